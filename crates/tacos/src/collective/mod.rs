//! Collectives as chunk movements: for every chunk, who holds it at the start
//! (precondition) and who must hold it at the end (postcondition).
//!
//! Conditions are a function of the spec and the chunk's index, so none is stored: each
//! is a slice of the spec's NPUs (every NPU, or the one owner or root), so that a
//! collective over 40,000 NPUs takes no more memory than its spec.
//!
//! Sizes follow nccl-tests: `size_bytes` is the buffer every NPU ends with (All-Gather: the
//! output; Reduce-Scatter: the input; All-Reduce, Broadcast, Reduce: the buffer; Gather and
//! Scatter: the root's; All-to-All: each NPU's). With P NPUs and K chunks per NPU, chunks are
//! S / (P K) bytes, except Broadcast and Reduce, whose K chunks are S / K bytes.
//!
//! ```
//! use tacos::collective::{Collective, CollectiveKind};
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let mesh = parse_spec("mesh:2x2", &SpecDefaults::default()).unwrap();
//! // 1 MiB gathered by 4 NPUs in 2 chunks each: 8 chunks of 128 KiB.
//! let c = Collective::over_all(&mesh, CollectiveKind::AllGather, None, 2, 1 << 20).unwrap();
//! assert_eq!(c.chunk_bytes(), 131072.0);
//! ```

pub mod memory;

use crate::error::{Error, Npus, Result};
use crate::topology::{format_npus, NpuId, Topology};
use crate::units::{MAX_SIZE_BYTES, SIZE_ALLOWED};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Index of a chunk, from 0 to `Collective::chunk_count()`.
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

    /// Whether each chunk has one NPU to reach (All-to-All, Gather, Scatter): planned, it
    /// follows a path, where the others' chunks spread along trees.
    pub fn one_target(self) -> bool {
        matches!(
            self,
            CollectiveKind::AllToAll | CollectiveKind::Gather | CollectiveKind::Scatter
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

/// Largest number of (NPU, chunk) pairs, chunks x the topology's NPUs: the synthesizer and
/// the checker keep state per pair (at least one bit) and number pairs and chunks in 32
/// bits, so more could neither be tracked nor fit a machine.
const MAX_CHUNK_STATES: usize = 1 << 31;

/// The most chunks a collective has: every chunk is a chunk state on at least one NPU, so
/// `Collective::new`'s bound on chunk states bounds them too, and a chunk id fits the
/// 32 bits a `schedule::Transfer` holds it in.
pub const MAX_CHUNKS: usize = MAX_CHUNK_STATES;

/// A collective on a topology: its spec, checked, and every chunk's pre- and
/// postcondition, computed on demand.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    spec: CollectiveSpec,
    chunk_count: usize,
    chunk_bytes: f64,
}

impl Collective {
    /// Builds and checks a collective: size, K, root and NPUs must make sense on `topo`,
    /// and every chunk must be able to reach every NPU that needs it.
    pub fn new(topo: &Topology, spec: CollectiveSpec) -> Result<Collective> {
        let bad = |npu: Option<usize>, problem: String| Err(Error::Collective { npu, problem });
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
            return bad(None, "a collective needs at least one NPU".into());
        }
        let mut seen = vec![false; topo.npus()];
        for &n in &spec.npus {
            if n >= topo.npus() {
                return bad(
                    Some(n),
                    format!(
                        "NPU {n} does not exist (the topology has NPUs 0..{})",
                        topo.npus() - 1
                    ),
                );
            }
            if topo.is_failed(n) {
                return bad(Some(n), format!("NPU {n} has failed and cannot take part"));
            }
            if std::mem::replace(&mut seen[n], true) {
                return bad(Some(n), format!("NPU {n} is named twice"));
            }
        }
        let root = match (spec.kind.has_root(), spec.root) {
            (true, None) => return bad(None, format!("{} needs a root NPU", spec.kind)),
            (false, Some(_)) => return bad(None, format!("{} takes no root", spec.kind)),
            (true, Some(r)) if r >= topo.npus() => {
                return bad(
                    Some(r),
                    format!(
                        "root {r} does not exist (the topology has NPUs 0..{})",
                        topo.npus() - 1
                    ),
                )
            }
            (true, Some(r)) if topo.is_failed(r) => {
                return bad(Some(r), format!("root {r} has failed and cannot take part"))
            }
            (true, Some(r)) if !spec.npus.contains(&r) => {
                return bad(
                    Some(r),
                    format!(
                        "root {r} is not one of the collective's NPUs ({})",
                        format_npus(&sorted(&spec.npus))
                    ),
                )
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
        check_reachable(topo, spec.kind, &spec.npus, root)?;
        let chunk_bytes = spec.size_bytes as f64 / chunk_divisor(spec.kind, p, k) as f64;
        Ok(Collective {
            spec,
            chunk_count: chunks as usize,
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

    /// How many chunks there are: P x K (All-to-All: P x P x K; Broadcast and Reduce: K),
    /// at most `MAX_CHUNKS`.
    pub fn chunk_count(&self) -> usize {
        self.chunk_count
    }

    /// NPUs holding chunk `c` at the start (its contributors for combining collectives).
    /// Chunk `rank * K + piece` is the piece-th share of rank's part of the buffer
    /// (All-to-All: `(src_rank * P + dst_rank) * K + piece`). Panics if `c` is not below
    /// `chunk_count()`.
    pub fn pre(&self, c: ChunkId) -> &[NpuId] {
        self.condition(c, true)
    }

    /// NPUs that must hold the whole of chunk `c` at the end (numbered as for `pre`).
    pub fn post(&self, c: ChunkId) -> &[NpuId] {
        self.condition(c, false)
    }

    /// Chunk `c`'s precondition (`pre`) or postcondition: every NPU, the chunk's owner
    /// (the rank whose share it is) or the root.
    fn condition(&self, c: ChunkId, pre: bool) -> &[NpuId] {
        assert!(c < self.chunk_count, "chunk {c} of {}", self.chunk_count);
        let all = &self.spec.npus[..];
        let k = self.spec.chunks_per_npu;
        let owner = || std::slice::from_ref(&all[c / k]);
        let root = || self.spec.root.as_slice();
        match (self.spec.kind, pre) {
            (CollectiveKind::AllGather, true) => owner(),
            (CollectiveKind::ReduceScatter, false) => owner(),
            (CollectiveKind::Broadcast | CollectiveKind::Scatter, true) => root(),
            (CollectiveKind::Reduce | CollectiveKind::Gather, false) => root(),
            (CollectiveKind::Gather | CollectiveKind::Scatter, _) => owner(),
            (CollectiveKind::AllToAll, true) => std::slice::from_ref(&all[c / k / all.len()]),
            (CollectiveKind::AllToAll, false) => std::slice::from_ref(&all[c / k % all.len()]),
            _ => all,
        }
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

/// How many chunks `size_bytes` is split into: the buffer every NPU ends with (the input
/// for Reduce-Scatter, the root's for Scatter) is P x K chunks, or K for Broadcast and Reduce.
pub(crate) fn chunk_divisor(kind: CollectiveKind, p: usize, k: usize) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    #[test]
    fn chunk_counts_past_a_transfers_32_bits_are_refused_naming_k() {
        // Broadcast on one NPU has K chunks, one state each: the most chunks per state.
        let topo = parse_spec("ring:1", &SpecDefaults::default()).unwrap();
        let broadcast =
            |k: usize| Collective::over_all(&topo, CollectiveKind::Broadcast, Some(0), k, 1 << 40);
        assert_eq!(broadcast(MAX_CHUNKS).unwrap().chunk_count(), MAX_CHUNKS);
        for k in [MAX_CHUNKS + 1, u32::MAX as usize + 1] {
            let e = broadcast(k).unwrap_err().to_string();
            assert!(e.contains(&format!("{k} chunks per NPU")), "{e}");
        }
    }

    #[test]
    fn conditions_follow_the_documented_numbering() {
        // NPUs 3, 1, 2 in rank order, K = 2, root 1: chunk `rank * 2 + piece` belongs to
        // the rank's NPU (All-to-All: chunk `(src * 3 + dst) * 2 + piece`).
        let topo = parse_spec("fc:4", &SpecDefaults::default()).unwrap();
        let all: &[NpuId] = &[3, 1, 2];
        let build = |kind: CollectiveKind| {
            let spec = CollectiveSpec {
                kind,
                root: kind.has_root().then_some(1),
                npus: all.to_vec(),
                chunks_per_npu: 2,
                size_bytes: 1 << 20,
            };
            Collective::new(&topo, spec).unwrap()
        };
        use CollectiveKind::*;
        // (kind, chunk, pre, post, chunks)
        type Case<'a> = (CollectiveKind, usize, &'a [NpuId], &'a [NpuId], usize);
        let cases: [Case; 8] = [
            (AllGather, 3, &[1], all, 6),
            (ReduceScatter, 4, all, &[2], 6),
            (AllReduce, 5, all, all, 6),
            (Broadcast, 1, &[1], all, 2),
            (Reduce, 0, all, &[1], 2),
            (Gather, 5, &[2], &[1], 6),
            (Scatter, 0, &[1], &[3], 6),
            // (src 2 (NPU 2) * 3 + dst 1 (NPU 1)) * 2 + piece 1 = 15.
            (AllToAll, 15, &[2], &[1], 18),
        ];
        for (kind, chunk, pre, post, chunks) in cases {
            let c = build(kind);
            assert_eq!(c.chunk_count(), chunks, "{kind}");
            assert_eq!((c.pre(chunk), c.post(chunk)), (pre, post), "{kind} {chunk}");
        }
    }
}
