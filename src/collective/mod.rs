//! Collectives as chunk movements: for every chunk, who holds it at the start
//! (precondition) and who must hold it at the end (postcondition).
//!
//! Sizes follow nccl-tests: `size_bytes` is the buffer every NPU ends with (All-Gather: the
//! output; Reduce-Scatter: the input; All-Reduce, Broadcast, Reduce: the buffer; Gather and
//! Scatter: the root's; All-to-All: each NPU's). With P NPUs and K chunks per NPU, chunks are
//! S / (P K) bytes, except Broadcast and Reduce, whose K chunks are S / K bytes.

use crate::error::{Error, Npus, Result};
use crate::topology::{format_npus, NpuId, Topology};
use crate::units::{MAX_SIZE_BYTES, SIZE_ALLOWED};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Index of a chunk in `Collective::chunks()`.
pub type ChunkId = usize;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectiveKind {
    /// Every NPU ends with every NPU's contribution.
    AllGather,
    /// Every NPU's input is summed; NPU r ends with the r-th share of the sum.
    ReduceScatter,
    /// Every NPU ends with the sum of every NPU's buffer.
    AllReduce,
    /// Every NPU ends with the root's buffer.
    Broadcast,
    /// The root ends with the sum of every NPU's buffer.
    Reduce,
    /// The root ends with every NPU's contribution.
    Gather,
    /// NPU r ends with the r-th share of the root's buffer.
    Scatter,
    /// NPU j ends with the j-th share of every NPU's buffer.
    AllToAll,
}

impl CollectiveKind {
    /// All kinds, in the order help texts list them.
    pub const ALL: [CollectiveKind; 8] = [
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllReduce,
        CollectiveKind::Broadcast,
        CollectiveKind::Reduce,
        CollectiveKind::Gather,
        CollectiveKind::Scatter,
        CollectiveKind::AllToAll,
    ];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllGather => "allgather",
            CollectiveKind::ReduceScatter => "reducescatter",
            CollectiveKind::AllReduce => "allreduce",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Gather => "gather",
            CollectiveKind::Scatter => "scatter",
            CollectiveKind::AllToAll => "alltoall",
        }
    }

    /// Whether the collective has a root NPU.
    pub fn has_root(self) -> bool {
        matches!(
            self,
            CollectiveKind::Broadcast
                | CollectiveKind::Reduce
                | CollectiveKind::Gather
                | CollectiveKind::Scatter
        )
    }

    /// Whether chunks are combined (summed) on the way rather than copied.
    pub fn combining(self) -> bool {
        matches!(
            self,
            CollectiveKind::ReduceScatter | CollectiveKind::AllReduce | CollectiveKind::Reduce
        )
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CollectiveKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let key: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        CollectiveKind::ALL
            .into_iter()
            .find(|k| k.name() == key)
            .ok_or_else(|| Error::Unknown {
                what: "collective",
                given: s.into(),
                known: CollectiveKind::ALL.map(|k| k.name()).to_vec(),
            })
    }
}

/// What a user asks for; enough to rebuild every chunk's conditions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSpec {
    pub kind: CollectiveKind,
    /// The root NPU for rooted collectives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<NpuId>,
    /// The NPUs taking part, in rank order.
    pub npus: Vec<NpuId>,
    /// K: each NPU's share of the collective is split into this many chunks.
    pub chunks_per_npu: usize,
    /// The buffer every NPU ends with, in bytes (nccl-tests' convention), from 1 to
    /// `units::MAX_SIZE_BYTES`.
    pub size_bytes: u64,
}

/// One chunk's conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    /// NPUs holding the chunk at the start (its contributors for combining collectives).
    pub pre: Vec<NpuId>,
    /// NPUs that must hold the whole chunk at the end.
    pub post: Vec<NpuId>,
}

/// Largest number of chunks a collective may have; keeps per-(NPU, chunk) state bounded.
const MAX_CHUNK_STATES: usize = 1 << 31;

/// Most NPU ids all chunks' pre- and postconditions may list together: 2^28, 2 GiB of
/// ids. An All-Reduce lists every NPU twice per chunk, so its conditions grow as P^2 K;
/// they are counted before any is built.
pub const MAX_CONDITION_ENTRIES: u64 = 1 << 28;

/// A collective on a topology: its spec and every chunk's pre- and postcondition.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    spec: CollectiveSpec,
    chunks: Vec<Chunk>,
    chunk_bytes: f64,
}

impl Collective {
    /// Builds and checks a collective: size, K, root and NPUs must make sense on `topo`,
    /// and every chunk must be able to reach every NPU that needs it.
    pub fn new(topo: &Topology, spec: CollectiveSpec) -> Result<Collective> {
        let bad = |m: String| Err(Error::Collective(m));
        if !(1..=MAX_SIZE_BYTES).contains(&spec.size_bytes) {
            return Err(Error::Invalid {
                input: "size".into(),
                value: spec.size_bytes.to_string(),
                allowed: SIZE_ALLOWED.into(),
            });
        }
        if spec.chunks_per_npu == 0 {
            return Err(Error::Invalid {
                input: "chunks per NPU (K)".into(),
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
        if spec.npus.is_empty() {
            return bad("a collective needs at least one NPU".into());
        }
        let mut seen = vec![false; topo.npus()];
        for &n in &spec.npus {
            if n >= topo.npus() {
                return bad(format!(
                    "NPU {n} does not exist (the topology has NPUs 0..{})",
                    topo.npus() - 1
                ));
            }
            if topo.is_failed(n) {
                return bad(format!("NPU {n} has failed and cannot take part"));
            }
            if std::mem::replace(&mut seen[n], true) {
                return bad(format!("NPU {n} is named twice"));
            }
        }
        let root = match (spec.kind.has_root(), spec.root) {
            (true, None) => return bad(format!("{} needs a root NPU", spec.kind)),
            (false, Some(_)) => return bad(format!("{} takes no root", spec.kind)),
            (true, Some(r)) if r >= topo.npus() => {
                return bad(format!(
                    "root {r} does not exist (the topology has NPUs 0..{})",
                    topo.npus() - 1
                ))
            }
            (true, Some(r)) if topo.is_failed(r) => {
                return bad(format!("root {r} has failed and cannot take part"))
            }
            (true, Some(r)) if !spec.npus.contains(&r) => {
                return bad(format!(
                    "root {r} is not one of the collective's NPUs ({})",
                    format_npus(&sorted(&spec.npus))
                ))
            }
            (_, r) => r,
        };
        let p = spec.npus.len();
        let k = spec.chunks_per_npu;
        let (p128, k128) = (p as u128, k as u128);
        let chunks = match spec.kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => k128,
            CollectiveKind::AllToAll => p128 * p128 * k128,
            _ => p128 * k128,
        };
        let states = chunks * topo.npus() as u128;
        if states > MAX_CHUNK_STATES as u128 {
            return Err(Error::Limit {
                what: "chunk states (chunks x the topology's NPUs)",
                value: u64::try_from(states).unwrap_or(u64::MAX),
                limit: MAX_CHUNK_STATES as u64,
                context: format!("{k} chunks per NPU on {p} NPUs is too many chunks to track"),
            });
        }
        // NPUs each chunk's pre- and postcondition list (see `chunk_conditions`).
        let per_chunk = match spec.kind {
            CollectiveKind::AllReduce => 2 * p128,
            CollectiveKind::Gather | CollectiveKind::Scatter | CollectiveKind::AllToAll => 2,
            _ => 1 + p128,
        };
        let entries = chunks * per_chunk;
        if entries > MAX_CONDITION_ENTRIES as u128 {
            return Err(Error::Limit {
                what: "NPU entries in chunk conditions",
                value: u64::try_from(entries).unwrap_or(u64::MAX),
                limit: MAX_CONDITION_ENTRIES,
                context: format!("{} of {k} chunks per NPU on {p} NPUs", spec.kind),
            });
        }
        let count = chunks as usize;
        let all = &spec.npus;
        let chunks: Vec<Chunk> = (0..count)
            .map(|c| chunk_conditions(spec.kind, all, root, k, c))
            .collect();
        check_reachable(topo, spec.kind, all, root)?;
        let chunk_bytes = spec.size_bytes as f64 / chunk_divisor(spec.kind, p, k) as f64;
        Ok(Collective {
            spec,
            chunks,
            chunk_bytes,
        })
    }

    /// A collective over every alive NPU of `topo`.
    pub fn over_all(
        topo: &Topology,
        kind: CollectiveKind,
        root: Option<NpuId>,
        chunks_per_npu: usize,
        size_bytes: u64,
    ) -> Result<Collective> {
        Collective::new(
            topo,
            CollectiveSpec {
                kind,
                root,
                npus: topo.alive_npus(),
                chunks_per_npu,
                size_bytes,
            },
        )
    }

    pub fn spec(&self) -> &CollectiveSpec {
        &self.spec
    }

    pub fn kind(&self) -> CollectiveKind {
        self.spec.kind
    }

    /// The NPUs taking part, in rank order.
    pub fn npus(&self) -> &[NpuId] {
        &self.spec.npus
    }

    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Bytes in one chunk (the buffer divided evenly; may be fractional).
    pub fn chunk_bytes(&self) -> f64 {
        self.chunk_bytes
    }

    /// Whether chunks are summed rather than copied.
    pub fn combining(&self) -> bool {
        self.spec.kind.combining()
    }
}

/// Chunk `c`'s conditions. Chunks are numbered so that chunk `rank * K + piece` is the
/// piece-th share of rank's part of the buffer (All-to-All: `(src_rank * P + dst_rank) * K + piece`).
fn chunk_conditions(
    kind: CollectiveKind,
    all: &[NpuId],
    root: Option<NpuId>,
    k: usize,
    c: usize,
) -> Chunk {
    let owner = || all[c / k];
    let root = || root.expect("rooted collectives have a root");
    let (pre, post) = match kind {
        CollectiveKind::AllGather => (vec![owner()], all.to_vec()),
        CollectiveKind::ReduceScatter => (all.to_vec(), vec![owner()]),
        CollectiveKind::AllReduce => (all.to_vec(), all.to_vec()),
        CollectiveKind::Broadcast => (vec![root()], all.to_vec()),
        CollectiveKind::Reduce => (all.to_vec(), vec![root()]),
        CollectiveKind::Gather => (vec![owner()], vec![root()]),
        CollectiveKind::Scatter => (vec![root()], vec![owner()]),
        CollectiveKind::AllToAll => {
            let p = all.len();
            (vec![all[c / k / p]], vec![all[c / k % p]])
        }
    };
    Chunk { pre, post }
}

/// How many chunks `size_bytes` is split into: the buffer every NPU ends with (the input
/// for Reduce-Scatter, the root's for Scatter) is P x K chunks, or K for Broadcast and Reduce.
fn chunk_divisor(kind: CollectiveKind, p: usize, k: usize) -> usize {
    match kind {
        CollectiveKind::Broadcast | CollectiveKind::Reduce => k,
        _ => p * k,
    }
}

/// Every chunk must be able to reach every NPU that needs it.
fn check_reachable(
    topo: &Topology,
    kind: CollectiveKind,
    all: &[NpuId],
    root: Option<NpuId>,
) -> Result<()> {
    let root_reaches = |r: NpuId| match topo.cut_off(r, all, false) {
        None => Ok(()),
        Some(missing) => Err(Error::Disconnected {
            from: Npus::Root(r),
            to: missing,
        }),
    };
    let reach_root = |r: NpuId| match topo.cut_off(r, all, true) {
        None => Ok(()),
        Some(missing) => Err(Error::Disconnected {
            from: missing,
            to: Npus::Root(r),
        }),
    };
    match (kind, root) {
        (CollectiveKind::Broadcast | CollectiveKind::Scatter, Some(r)) => root_reaches(r),
        (CollectiveKind::Reduce | CollectiveKind::Gather, Some(r)) => reach_root(r),
        _ => topo.check_strongly_connected(all),
    }
}

fn sorted(npus: &[NpuId]) -> Vec<NpuId> {
    let mut v = npus.to_vec();
    v.sort_unstable();
    v
}
