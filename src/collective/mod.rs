//! Collectives as chunk movements: for every chunk, who holds it at the start
//! (precondition) and who must hold it at the end (postcondition).
//!
//! Sizes follow nccl-tests: `size_bytes` is the buffer every NPU ends with. An All-Gather
//! of S over P NPUs with K chunks per NPU moves chunks of S / (P K) bytes; a Broadcast of
//! S with K chunks moves chunks of S / K bytes.

use crate::error::{Error, Result};
use crate::topology::{format_npus, NpuId, Topology};
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
    /// Every NPU ends with the root's buffer.
    Broadcast,
}

impl CollectiveKind {
    /// All kinds, in the order help texts list them.
    pub const ALL: [CollectiveKind; 2] = [CollectiveKind::AllGather, CollectiveKind::Broadcast];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllGather => "allgather",
            CollectiveKind::Broadcast => "broadcast",
        }
    }

    /// Whether the collective has a root NPU.
    pub fn has_root(self) -> bool {
        matches!(self, CollectiveKind::Broadcast)
    }

    /// Whether chunks are combined (summed) on the way rather than copied.
    pub fn combining(self) -> bool {
        false
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
            .ok_or_else(|| {
                Error::Collective(format!(
                    "unknown collective '{s}' (known: {})",
                    CollectiveKind::ALL.map(|k| k.name()).join(", ")
                ))
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
    /// The buffer every NPU ends with, in bytes (nccl-tests' convention).
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
        if spec.size_bytes == 0 {
            return bad("size must be at least 1 byte".into());
        }
        if spec.chunks_per_npu == 0 {
            return bad("chunks per NPU (K) must be at least 1".into());
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
        let count = match spec.kind {
            CollectiveKind::AllGather => p.checked_mul(k),
            CollectiveKind::Broadcast => Some(k),
        };
        let count = count
            .filter(|&c| {
                c.checked_mul(topo.npus())
                    .is_some_and(|s| s <= MAX_CHUNK_STATES)
            })
            .ok_or_else(|| {
                Error::Collective(format!(
                    "{k} chunks per NPU on {p} NPUs is too many chunks to track"
                ))
            })?;
        let chunks: Vec<Chunk> = (0..count)
            .map(|c| Chunk {
                pre: vec![match spec.kind {
                    CollectiveKind::AllGather => spec.npus[c / k],
                    CollectiveKind::Broadcast => root.expect("checked above"),
                }],
                post: spec.npus.clone(),
            })
            .collect();
        match spec.kind {
            CollectiveKind::AllGather => topo.check_strongly_connected(&spec.npus)?,
            CollectiveKind::Broadcast => {
                let r = root.expect("checked above");
                let missing = topo.unreachable_from(r, &spec.npus);
                if !missing.is_empty() {
                    return Err(Error::Disconnected(format!(
                        "root {r} cannot reach NPUs {}",
                        format_npus(&missing)
                    )));
                }
            }
        }
        let chunk_bytes = match spec.kind {
            CollectiveKind::AllGather => spec.size_bytes as f64 / count as f64,
            CollectiveKind::Broadcast => spec.size_bytes as f64 / k as f64,
        };
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

fn sorted(npus: &[NpuId]) -> Vec<NpuId> {
    let mut v = npus.to_vec();
    v.sort_unstable();
    v
}
