//! Per-cluster compilation: every algorithm a topology needs, as a directory holding the
//! MSCCL algorithm XML files alone in `msccl/` (what `MSCCL_ALGO_DIR` points at: the
//! executor parses every entry there as XML) and a `manifest.json` beside it, ready for the
//! MSCCL executor, a scheduler, or the project's own plugin cache.
//!
//! For each collective, buffer placement and size band, [`compile`] synthesizes
//! candidates (several chunk counts K and seeds), lowers each to an MSCCL program for the
//! options' [`Target`] and times the program itself with `msccl::simulate_program`, next
//! to the baselines lowered the same way; the fastest program that passes the target's
//! loader rules and `msccl::verify` wins the band, so a band whose larger K break the
//! target's limits picks a smaller K. Adjacent bands merge where one band's program is
//! also the fastest at the next, so each file covers a contiguous range of message sizes
//! and the ranges of one collective and placement tile the requested range with no gap
//! and no overlap, in the executor's own measure of a message
//! (`msccl::Layout::executor_bytes`; for every collective compiled here that is the
//! nccl-tests size). With [`Ranking::Schedules`] (the fast preset) candidates are ranked
//! by their schedules' own times instead and only the winners are lowered, verified and
//! timed as programs. [`write_dir`] writes the set atomically and [`check_dir`] re-checks
//! a directory against its manifest and for what the executor would refuse
//! (`plugin::open_or_compile` finds or makes such a directory). [`apply_feedback`] takes
//! back from a directory's set every band nccl-tests measured slower than NCCL. The MSCCL scheduler
//! plugin compiles one band at a time instead, at its first call ([`BandCompiler`]).

mod band;
mod candidate;
mod dir;
mod feedback;
mod legacy;
mod manifest;
pub mod plans;
mod quick;
mod select;

pub use band::{BandCompiler, BandOutcome};
pub use candidate::Candidate;
pub use dir::{
    algorithm_dir, check_dir, check_dir_with, check_target, compiled_for, read_set, write_dir,
    CheckKind, CheckOptions, CheckProblem, CheckReport, Found, Written,
};
pub(crate) use dir::{loader_problems, parent_and_name, read_regular, tidy_dir};
pub use feedback::{
    apply as apply_feedback, read_results, BandFeedback, Feedback, Outcome, Results, Run,
    WITHOUT_SET_PREFIX, WITH_SET_PREFIX,
};
pub use legacy::{legacy_xml_files, LEGACY_MAX_FILES, LEGACY_MAX_SCRATCH_BYTES};
pub use manifest::{
    sha256_hex, topology_hash, BandPrediction, Entry, LeftToNccl, Manifest, MeasuredSize, NcclBand,
    ReturnedToNccl, TopologyInfo, ALGORITHM_DIR, MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION,
};
pub use select::{compile, AlgorithmSet, CompiledFile, Progress, Rejection, Stage};

use crate::collective::CollectiveKind;
use crate::cost::{ExecModel, Executor};
use crate::error::{Error, Result};
use crate::gpu::GpuArch;
use crate::msccl::{Program, ProgramTimer, Proto, Target};
use crate::topology::Topology;
use crate::units::Picos;
use crate::units::{format_size, parse_size};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The message sizes to compile for: `min_bytes..=max_bytes`, both powers of two, in the
/// executor's measure of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeRange {
    pub min_bytes: u64,
    pub max_bytes: u64,
}

impl SizeRange {
    /// Checks the range: powers of two, smallest first.
    pub fn new(min_bytes: u64, max_bytes: u64) -> Result<SizeRange> {
        for (what, v) in [("smallest", min_bytes), ("largest", max_bytes)] {
            if !v.is_power_of_two() {
                return Err(Error::Invalid {
                    input: format!("sizes, the {what}"),
                    value: format_size(v),
                    allowed: "a power of two (bands run from one power of two to the next, e.g. 1KiB..4GiB)".into(),
                });
            }
        }
        if min_bytes > max_bytes {
            return Err(Error::Invalid {
                input: "sizes".into(),
                value: format!("{}..{}", format_size(min_bytes), format_size(max_bytes)),
                allowed: "the smallest size first (this range runs backwards)".into(),
            });
        }
        Ok(SizeRange {
            min_bytes,
            max_bytes,
        })
    }

    /// The bands covering the range, smallest first: each spans `octaves` doublings
    /// ([S, S * 2^octaves - 1]) and is judged at its smallest size S; the last is cut at
    /// and includes `max_bytes`, so together they cover `min_bytes..=max_bytes` exactly.
    pub fn bands(&self, octaves: u32) -> Vec<Band> {
        let octaves = octaves.clamp(1, 63);
        let mut bands = Vec::new();
        let mut start = self.min_bytes;
        loop {
            let next = start.saturating_mul(1 << octaves).min(self.max_bytes);
            if next >= self.max_bytes {
                bands.push(Band {
                    min_bytes: start,
                    max_bytes: self.max_bytes,
                });
                return bands;
            }
            bands.push(Band {
                min_bytes: start,
                max_bytes: next - 1,
            });
            start = next;
        }
    }
}

impl FromStr for SizeRange {
    type Err = Error;

    /// `MIN..MAX`, each a size such as `1KiB` or `4GiB`.
    fn from_str(s: &str) -> Result<SizeRange> {
        let (lo, hi) = s.split_once("..").ok_or_else(|| Error::Invalid {
            input: "sizes".into(),
            value: s.into(),
            allowed: "a range MIN..MAX such as 1KiB..4GiB".into(),
        })?;
        let parse = |v: &str| parse_size(v).map_err(|e| Error::compile(format!("sizes: {e}")));
        SizeRange::new(parse(lo)?, parse(hi)?)
    }
}

impl fmt::Display for SizeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}..{}",
            short_size(self.min_bytes),
            short_size(self.max_bytes)
        )
    }
}

/// A range of message sizes one program serves, in the executor's measure; an algorithm
/// is chosen for it at its smallest size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Band {
    pub min_bytes: u64,
    pub max_bytes: u64,
}

/// The transfer protocol written into each file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProtoChoice {
    /// Per band, by size (`Proto::for_size`): LL up to 512 KiB, Simple above.
    #[default]
    Auto,
    Fixed(Proto),
}

impl ProtoChoice {
    pub fn for_size(self, size_bytes: u64) -> Proto {
        match self {
            ProtoChoice::Auto => Proto::for_size(size_bytes),
            ProtoChoice::Fixed(p) => p,
        }
    }
}

impl FromStr for ProtoChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<ProtoChoice> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ProtoChoice::Auto),
            "simple" => Ok(ProtoChoice::Fixed(Proto::Simple)),
            "ll" => Ok(ProtoChoice::Fixed(Proto::LL)),
            "ll128" => Ok(ProtoChoice::Fixed(Proto::LL128)),
            _ => Err(Error::Unknown {
                what: "protocol",
                given: s.into(),
                known: vec!["auto", "Simple", "LL", "LL128"],
            }),
        }
    }
}

impl fmt::Display for ProtoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoChoice::Auto => f.write_str("auto"),
            ProtoChoice::Fixed(p) => f.write_str(p.name()),
        }
    }
}

impl Serialize for ProtoChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProtoChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Which buffer placements to compile programs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placements {
    /// In place and out of place (All-to-All: out of place only, as it cannot run in place).
    #[default]
    Both,
    InPlace,
    OutOfPlace,
}

impl Placements {
    /// The in-place flags to compile `kind` for.
    pub fn flags(self, kind: CollectiveKind) -> Vec<bool> {
        let in_place_possible = kind != CollectiveKind::AllToAll;
        match self {
            Placements::Both if in_place_possible => vec![true, false],
            Placements::InPlace if in_place_possible => vec![true],
            Placements::InPlace => Vec::new(),
            Placements::Both | Placements::OutOfPlace => vec![false],
        }
    }
}

impl FromStr for Placements {
    type Err = Error;

    fn from_str(s: &str) -> Result<Placements> {
        match s.to_ascii_lowercase().as_str() {
            "both" => Ok(Placements::Both),
            "inplace" => Ok(Placements::InPlace),
            "outofplace" => Ok(Placements::OutOfPlace),
            _ => Err(Error::Unknown {
                what: "placement",
                given: s.into(),
                known: vec!["both", "inplace", "outofplace"],
            }),
        }
    }
}

/// How the candidates of a band are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ranking {
    /// Every candidate is lowered for every placement and timed as the program that
    /// would run (`msccl::simulate_program`): the most faithful comparison.
    #[default]
    Programs,
    /// Candidates are ranked by their schedule's own time, which the lowering keeps
    /// (simulated programs of synthesized schedules take their schedule's time or less),
    /// and only the winner of each band is lowered, verified and timed as a program,
    /// where it does not extend the file before it. More chunks per NPU are not tried
    /// where `bounds::chunked_bound_ps` shows they cannot beat the band's best so far,
    /// nor, after a K broke the target's limits, at larger sizes. Bands are taken in
    /// order, one collective per thread.
    Schedules,
}

impl Ranking {
    fn is_programs(&self) -> bool {
        *self == Ranking::Programs
    }
}

/// What to compile and how hard to search. Everything but `jobs` is recorded in the
/// manifest: the same options on the same topology give the same bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileOptions {
    /// Collectives without a root (the executor's files do not name one).
    pub collectives: Vec<CollectiveKind>,
    pub sizes: SizeRange,
    /// Doublings of the message size one band spans.
    pub band_octaves: u32,
    pub proto: ProtoChoice,
    pub placements: Placements,
    /// Seeds 0..seeds are tried for every K.
    pub seeds: u64,
    /// Chunks per NPU (K) to synthesize with. Candidates whose programs break the
    /// target's limits are skipped.
    pub chunk_candidates: Vec<usize>,
    /// A K other than the smallest is not tried where it would cut chunks smaller than
    /// this: such chunks cost a step's latency for little data, and their programs are
    /// the slowest to lower and time.
    pub min_chunk_bytes: u64,
    /// Whether the baselines compete (and speedups against them are reported).
    pub baselines: bool,
    /// How candidates are compared. Left out of the manifest when it is the default, so
    /// manifests from before the choice existed still describe their options exactly.
    #[serde(default, skip_serializing_if = "Ranking::is_programs")]
    pub ranking: Ranking,
    /// The loader the files are for: every program is lowered, verified and checked for
    /// it (by default the MSCCL executor as it builds by default, 64 steps per
    /// threadblock).
    #[serde(with = "manifest::target_record")]
    pub target: Target,
    /// How programs are priced (the executor cost model) and whether NCCL's own algorithm
    /// competes for each band; `None`: programs are timed by bare alpha-beta messages and
    /// every band gets a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostOptions>,
    /// A deterministic bound on the work of one candidate: a synthesized candidate whose
    /// collective needs more transfers than this (`Candidate::least_transfers`) is
    /// skipped before it is synthesized, on every machine alike (a wall-clock budget
    /// would not be). `None`: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_transfers: Option<u64>,
    /// Worker threads (0: one per core), on a pool of the compilation's own.
    #[serde(skip)]
    pub jobs: usize,
}

/// The executor cost model a compilation prices programs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostOptions {
    pub model: ExecModel,
    /// NPUs per NVLink domain (a node).
    pub domain_size: usize,
    /// A band gets a program only where it is predicted faster than NCCL's best choice for
    /// the band by more than this share or the profile's measured error there, whichever
    /// is larger; elsewhere the band is left to NCCL and the manifest says so, with the
    /// margin used. `None`: NCCL does not compete.
    pub nccl_margin: Option<f64>,
}

impl CostOptions {
    /// The executor these options describe.
    pub fn executor(&self) -> Executor {
        Executor {
            model: self.model.clone(),
            domain_size: self.domain_size,
            gpu: self.model.arch.parse().unwrap_or(GpuArch::Hopper),
        }
    }
}

impl CompileOptions {
    /// The time of `program` (timed by `timer`) at `size_bytes` as the compilation prices
    /// it: with the executor cost model where `cost` says, else bare alpha-beta.
    pub fn program_time_ps(
        &self,
        topo: &Topology,
        program: &Program,
        timer: &ProgramTimer,
        size_bytes: u64,
    ) -> Result<Picos> {
        match &self.cost {
            Some(cost) => cost
                .executor()
                .program_time_ps(topo, program, timer, size_bytes),
            None => Ok(timer.simulate(topo, size_bytes)?.time_ps),
        }
    }
}

impl Default for CompileOptions {
    /// The command line's defaults.
    fn default() -> Self {
        CompileOptions {
            collectives: vec![
                CollectiveKind::AllReduce,
                CollectiveKind::AllGather,
                CollectiveKind::ReduceScatter,
            ],
            sizes: SizeRange {
                min_bytes: 1 << 10,
                max_bytes: 4 << 30,
            },
            band_octaves: 1,
            proto: ProtoChoice::Auto,
            placements: Placements::Both,
            seeds: 2,
            chunk_candidates: vec![1, 2, 4, 8, 16, 32],
            min_chunk_bytes: 4 << 10,
            baselines: true,
            ranking: Ranking::Programs,
            target: Target::default(),
            cost: None,
            max_transfers: None,
            jobs: 0,
        }
    }
}

impl CompileOptions {
    /// For a plugin compiling when a communicator starts: the same collectives, sizes and
    /// placements, and every file still verified and timed as a program, but a small part
    /// of the work. It drops the baselines (the executor's own algorithms are the fallback
    /// anyway, and no speedup against them is reported), tries one seed instead of two and
    /// K in {1, 4, 16} instead of {1, 2, 4, 8, 16, 32}, uses bands of three doublings
    /// (1-8 KiB, 8-64 KiB, ...), each judged at its smallest size, instead of one per
    /// doubling, and ranks candidates by their schedules' own times, lowering only the
    /// winners (`Ranking::Schedules`).
    pub fn fast() -> CompileOptions {
        CompileOptions {
            band_octaves: 3,
            seeds: 1,
            chunk_candidates: vec![1, 4, 16],
            baselines: false,
            ranking: Ranking::Schedules,
            ..CompileOptions::default()
        }
    }

    /// Checks what does not depend on the topology.
    pub fn validate(&self) -> Result<()> {
        let invalid = |input: &str, value: String, allowed: &str| {
            Err(Error::Invalid {
                input: input.into(),
                value,
                allowed: allowed.into(),
            })
        };
        if self.collectives.is_empty() {
            return invalid("collectives", "none".into(), "at least one collective");
        }
        if let Some(k) = self.collectives.iter().find(|k| k.has_root()) {
            return invalid(
                "collectives",
                k.to_string(),
                "collectives without a root (allreduce, allgather, reducescatter, alltoall): an algorithm file does not say which rank is the root",
            );
        }
        if let Some(k) = self
            .collectives
            .iter()
            .find(|&&k| self.placements.flags(k).is_empty())
        {
            return invalid(
                "placements",
                format!("inplace for {k}"),
                "outofplace or both: it cannot run in place",
            );
        }
        SizeRange::new(self.sizes.min_bytes, self.sizes.max_bytes)?;
        if !(1..=63).contains(&self.band_octaves) {
            return invalid(
                "band_octaves",
                self.band_octaves.to_string(),
                "1 to 63 (doublings a band spans)",
            );
        }
        if self.seeds == 0 {
            return invalid("seeds", "0".into(), "at least 1");
        }
        if self.chunk_candidates.is_empty() || self.chunk_candidates.contains(&0) {
            return invalid(
                "chunk candidates (K)",
                format!("{:?}", self.chunk_candidates),
                "a list of whole numbers, each at least 1",
            );
        }
        let l = &self.target.limits;
        let limits = [
            ("steps per threadblock", l.max_steps_per_tb),
            ("threadblocks per GPU", l.max_tbs),
            ("threadblocks per channel", l.max_tbs_per_channel),
            ("channels", l.max_channels),
            ("XML elements per rank", l.max_elements_per_rank),
        ];
        if let Some((what, _)) = limits.iter().find(|(_, v)| *v == 0) {
            return invalid(
                &format!("target {}: the limit of {what}", self.target.profile),
                "0".into(),
                "at least 1 (a limit of 0 admits no program)",
            );
        }
        Ok(())
    }
}

/// A power-of-two size as file names show it: 1K, 64M, 4G; other sizes in bytes.
pub fn short_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (name, shift) in UNITS {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// A band's sizes as file names show them, `1K-64K`: a band ending one byte below a power
/// of two is shown ending at it.
///
/// ```
/// assert_eq!(tacos::compile::short_range(1024, 65535), "1K-64K");
/// assert_eq!(tacos::compile::short_range(2 << 30, 4 << 30), "2G-4G");
/// ```
pub fn short_range(min_bytes: u64, max_bytes: u64) -> String {
    let end = match max_bytes.checked_add(1) {
        Some(next) if next.is_power_of_two() => next,
        _ => max_bytes,
    };
    format!("{}-{}", short_size(min_bytes), short_size(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_tile_the_range() {
        let r: SizeRange = "1KiB..16KiB".parse().unwrap();
        let b = r.bands(1);
        let want = [(1024, 2047), (2048, 4095), (4096, 8191), (8192, 16384)];
        assert_eq!(
            b.iter()
                .map(|b| (b.min_bytes, b.max_bytes))
                .collect::<Vec<_>>(),
            want
        );
        // Three doublings: 1K-8K-1, then the rest up to and including 16K.
        let b = r.bands(3);
        assert_eq!(
            b.iter()
                .map(|b| (b.min_bytes, b.max_bytes))
                .collect::<Vec<_>>(),
            [(1024, 8191), (8192, 16384)]
        );
        let one = SizeRange::new(4096, 4096).unwrap().bands(1);
        assert_eq!(
            one,
            [Band {
                min_bytes: 4096,
                max_bytes: 4096
            }]
        );
    }

    /// The input and value of an `Invalid`, or a panic naming what came instead.
    fn invalid(e: Error) -> (String, String) {
        match e {
            Error::Invalid { input, value, .. } => (input, value),
            other => panic!("not Invalid: {other:?}"),
        }
    }

    #[test]
    fn bad_ranges_are_named() {
        let parse = |s: &str| invalid(s.parse::<SizeRange>().unwrap_err());
        assert_eq!(
            parse("4GiB..1KiB"),
            (
                "sizes".into(),
                format!("{}..{}", format_size(4 << 30), format_size(1024))
            )
        );
        assert_eq!(
            parse("3KB..1GiB"),
            ("sizes, the smallest".into(), format_size(3000))
        );
        assert_eq!(parse("1KiB"), ("sizes".into(), "1KiB".into()));
        let e = "1KiB..lots".parse::<SizeRange>().unwrap_err().to_string();
        assert!(e.contains("lots"), "{e}");
    }

    #[test]
    fn options_reject_what_no_topology_could_serve() {
        let o = CompileOptions {
            collectives: vec![CollectiveKind::Broadcast],
            ..CompileOptions::default()
        };
        assert!(o.validate().unwrap_err().to_string().contains("root"));
        let o = CompileOptions {
            collectives: vec![CollectiveKind::AllToAll],
            placements: Placements::InPlace,
            ..CompileOptions::default()
        };
        assert!(o.validate().unwrap_err().to_string().contains("in place"));
        assert!(CompileOptions::fast().validate().is_ok());
    }

    #[test]
    fn short_sizes() {
        assert_eq!(short_size(1024), "1K");
        assert_eq!(short_size(4 << 30), "4G");
        assert_eq!(short_size(512), "512");
        assert_eq!(short_size(1536), "1536");
    }
}
