//! `manifest.json`: what a compiled directory holds and why, and the lookup a scheduler
//! makes in it.

use super::dir::read_regular;
use super::{Candidate, CompileOptions};
use crate::collective::CollectiveKind;
use crate::error::{Error, FileFormat, FileProblem, Result};
use crate::fsio::parse_json;
use crate::msccl::{Limits, Profile, Target};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The manifest's file name in a compiled directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The subdirectory of a compiled directory that holds the algorithm files and nothing
/// else: the executor parses every entry of `MSCCL_ALGO_DIR` as XML, so the manifest
/// lives beside it, never in it.
pub const ALGORITHM_DIR: &str = "msccl";
/// The manifest's `format` tag: a directory whose manifest carries it is ours.
pub const MANIFEST_FORMAT: &str = "tacos-msccl-algorithms";
/// Bumped whenever the manifest or the directory's layout changes meaning (2: the files
/// moved into `msccl/`, and the options record the target).
pub const MANIFEST_VERSION: u32 = 2;

/// A compiled directory's table of contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    /// `tacos::VERSION` of the tool that compiled the directory.
    pub tool_version: String,
    pub topology: TopologyInfo,
    /// The options compiled with (all but the number of threads).
    pub options: CompileOptions,
    /// One per file, by collective (in the options' order), in place first, then by size.
    pub entries: Vec<Entry>,
    /// Bands no file serves because NCCL's best choice is predicted as fast (within the
    /// margin each records): the scheduler leaves them to NCCL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_to_nccl: Vec<LeftToNccl>,
    /// Bands a file served until nccl-tests measured our program slower than NCCL there
    /// (`compile --feedback`): the scheduler leaves them to NCCL too. Absent in manifests
    /// no measurement was fed back to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returned_to_nccl: Vec<ReturnedToNccl>,
}

/// NCCL's best choice for a band: of the algorithms and protocols NCCL has enabled, the
/// one the executor cost model prices fastest (NCCL's own pick, unless its model
/// misjudges), and the margin the program had to beat it by.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclBand {
    pub algorithm: String,
    pub protocol: String,
    pub time_us: f64,
    /// The share the program had to be faster by: the larger of the options'
    /// `cost.nccl_margin` and the profile's measured error at this size; absent in
    /// manifests written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<f64>,
}

/// A band left to NCCL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeftToNccl {
    pub collective: CollectiveKind,
    pub in_place: bool,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The best program's predicted time at `min_bytes`, us.
    pub program_us: f64,
    pub nccl: NcclBand,
}

/// A band taken from the set because it measured slower than NCCL: what served it, what
/// was predicted and measured there, and why it went back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReturnedToNccl {
    pub collective: CollectiveKind,
    pub in_place: bool,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The file that served the band, as the manifest named it then.
    pub file: String,
    pub algorithm: Candidate,
    /// The band's predictions as compiled, with the measurements (`measured`) that
    /// returned it.
    pub prediction: BandPrediction,
    /// The measured size where ours lost, in words.
    pub reason: String,
}

/// One size nccl-tests measured both ways: with the set loaded (`ours_us`: our program
/// where the set serves the size) and without it (`nccl_us`: stock NCCL's own choice).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredSize {
    /// The size as nccl-tests prints it, which is the executor's measure.
    pub size_bytes: u64,
    pub ours_us: f64,
    pub nccl_us: f64,
}

/// The topology a directory was compiled for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyInfo {
    pub name: String,
    /// `topology_hash`.
    pub hash: String,
    /// Ranks: the alive NPUs, rank r on the r-th.
    pub npus: usize,
    pub links: usize,
}

/// One algorithm file and the message sizes it serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub collective: CollectiveKind,
    pub in_place: bool,
    /// Smallest and largest message served, in the executor's measure (the file's
    /// minBytes and maxBytes).
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// File name inside the directory's `msccl/`.
    pub file: String,
    /// SHA-256 of the file's bytes, in hex.
    pub sha256: String,
    pub proto: String,
    pub channels: usize,
    pub chunks_per_loop: usize,
    /// The candidate whose program the file holds.
    pub algorithm: Candidate,
    /// Predictions for every band the file serves, smallest first.
    pub bands: Vec<BandPrediction>,
}

/// The program's simulated figures at one band's smallest size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandPrediction {
    /// The size the band was judged at (its smallest).
    pub size_bytes: u64,
    /// `msccl::simulate_program` of the written program at `size_bytes`.
    pub time_us: f64,
    pub algbw_gbps: f64,
    /// The best lower bound (`bounds::Bounds::best_ps`) and the bound over the time.
    pub bound_us: f64,
    pub efficiency: f64,
    /// The fastest baseline's program at this size, when baselines competed.
    pub best_baseline: Option<Candidate>,
    pub best_baseline_us: Option<f64>,
    /// Best baseline's time over this program's.
    pub speedup_vs_baseline: Option<f64>,
    /// NCCL's own choice at this size, where NCCL competed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclBand>,
    /// What nccl-tests measured at the sizes of the band (which may differ from
    /// `size_bytes`), smallest first, as the last `compile --feedback` read them; empty
    /// until one has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<MeasuredSize>,
}

impl Manifest {
    /// The file a scheduler should load for a call of `kind` on `nranks` ranks, in place or
    /// not, whose message is `executor_bytes` (as the executor measures it: the whole
    /// buffer for allgather, reducescatter and alltoall); None where the directory has no
    /// algorithm for it and the executor should fall back.
    pub fn select(
        &self,
        kind: CollectiveKind,
        nranks: usize,
        in_place: bool,
        executor_bytes: u64,
    ) -> Option<&Entry> {
        if nranks != self.topology.npus {
            return None;
        }
        self.entries.iter().find(|e| {
            e.collective == kind
                && e.in_place == in_place
                && (e.min_bytes..=e.max_bytes).contains(&executor_bytes)
        })
    }

    /// Reads `dir/manifest.json`, which must be a regular file.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            FileProblem::new(path.display().to_string(), "not UTF-8 text").of(FileFormat::Compiled)
        })?;
        parse_json(&text, &path.display().to_string()).map_err(|p| p.of(FileFormat::Compiled))
    }

    /// The manifest as written: pretty JSON ending in a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest serializes");
        text.push('\n');
        text
    }
}

/// SHA-256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A stable fingerprint of the network a program runs on, in hex: SHA-256 over a fixed
/// binary encoding of the NPU count, the failed NPUs (sorted) and every link in (src, dst)
/// order with its bandwidth and latency as IEEE-754 bit patterns (-0 taken as 0), all
/// integers little-endian; then, only where there are switch vertices (so that the hashes
/// of topologies without them stay as they were), their count and each name as its
/// length and UTF-8 bytes. It depends on nothing else (not the name, not how the topology
/// was written, not map order): two specs giving the same links hash alike, and a link
/// whose figures differ in the last bit hashes differently, which only costs a recompile.
pub fn topology_hash(topo: &Topology) -> String {
    let mut h = Sha256::new();
    let word = |h: &mut Sha256, v: u64| h.update(v.to_le_bytes());
    let float = |x: f64| if x == 0.0 { 0 } else { x.to_bits() };
    h.update(b"tacos-topology/1\0");
    word(&mut h, topo.npus() as u64);
    word(&mut h, topo.failed().len() as u64);
    for &f in topo.failed() {
        word(&mut h, f as u64);
    }
    word(&mut h, topo.links().len() as u64);
    for l in topo.links() {
        word(&mut h, l.src as u64);
        word(&mut h, l.dst as u64);
        word(&mut h, float(l.bandwidth_gbps));
        word(&mut h, float(l.latency_us));
    }
    // The link count fixes where the links end, so these trailing words cannot be read
    // as links of another topology.
    if topo.has_switches() {
        word(&mut h, topo.switches().len() as u64);
        for name in topo.switches().filter_map(|s| topo.switch_name(s)) {
            word(&mut h, name.len() as u64);
            h.update(name.as_bytes());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A [`Target`] as the manifest records it: the profile's name and every limit, so a
/// directory says which loader it was compiled for even where limits were overridden.
pub(super) mod target_record {
    use super::{Limits, Profile, Target};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(remote = "Target", deny_unknown_fields)]
    struct TargetRecord {
        #[serde(with = "profile_name")]
        profile: Profile,
        #[serde(with = "LimitsRecord")]
        limits: Limits,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(remote = "Limits", deny_unknown_fields)]
    struct LimitsRecord {
        max_steps_per_tb: usize,
        max_tbs_per_channel: usize,
        max_channels: usize,
        max_tbs: usize,
        max_dep_tb: usize,
        max_offset: i64,
        max_count: u32,
        max_elements_per_rank: usize,
        max_gpus: usize,
    }

    mod profile_name {
        use super::Profile;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(p: &Profile, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(p.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Profile, D::Error> {
            let s = String::deserialize(d)?;
            s.parse().map_err(serde::de::Error::custom)
        }
    }

    pub fn serialize<S: Serializer>(t: &Target, s: S) -> Result<S::Ok, S::Error> {
        TargetRecord::serialize(t, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        TargetRecord::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, Link, SpecDefaults};

    fn link(src: usize, dst: usize, bw: f64) -> Link {
        Link {
            src,
            dst,
            bandwidth_gbps: bw,
            latency_us: 0.5,
        }
    }

    #[test]
    fn topology_hash_sees_links_not_names_or_order() {
        let a = Topology::new("a", 3, vec![link(0, 1, 50.0), link(1, 2, 50.0)]).unwrap();
        let b = Topology::new("b", 3, vec![link(1, 2, 50.0), link(0, 1, 50.0)]).unwrap();
        assert_eq!(topology_hash(&a), topology_hash(&b));
        let c = Topology::new("a", 3, vec![link(0, 1, 50.0), link(1, 2, 25.0)]).unwrap();
        assert_ne!(topology_hash(&a), topology_hash(&c));
        let d = Topology::new("a", 3, vec![link(0, 1, 50.0), link(2, 1, 50.0)]).unwrap();
        assert_ne!(topology_hash(&a), topology_hash(&d));
        assert_ne!(
            topology_hash(&a),
            topology_hash(&a.fail_npus(&[2]).unwrap())
        );
        // A builder and the same ring written another way agree.
        let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
        let by_hand = Topology::new("by hand", 4, ring.links().to_vec()).unwrap();
        assert_eq!(topology_hash(&ring), topology_hash(&by_hand));
        assert_eq!(topology_hash(&a).len(), 64);
    }

    #[test]
    fn topology_hash_sees_switch_names_and_links_and_keeps_plain_hashes() {
        let star = |switch: &str, bw: f64| {
            let links = vec![
                link(0, 2, bw),
                link(1, 2, bw),
                link(2, 0, bw),
                link(2, 1, bw),
            ];
            Topology::with_switches("star", 2, vec![switch.into()], links).unwrap()
        };
        assert_eq!(
            topology_hash(&star("nvs", 50.0)),
            topology_hash(&star("nvs", 50.0))
        );
        assert_ne!(
            topology_hash(&star("nvs", 50.0)),
            topology_hash(&star("nvs1", 50.0))
        );
        assert_ne!(
            topology_hash(&star("nvs", 50.0)),
            topology_hash(&star("nvs", 25.0))
        );
        // Without switches the encoding is the documented one, written out by hand here,
        // so compiled directories of such topologies keep their hashes.
        let plain = Topology::new("plain", 2, vec![link(0, 1, 50.0)]).unwrap();
        let mut bytes = b"tacos-topology/1\0".to_vec();
        for w in [2, 0, 1, 0, 1, 50f64.to_bits(), 0.5f64.to_bits()] {
            bytes.extend(u64::to_le_bytes(w));
        }
        assert_eq!(topology_hash(&plain), sha256_hex(&bytes));
    }

    #[test]
    fn sha256_of_a_known_text() {
        // FIPS 180-2's example "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
