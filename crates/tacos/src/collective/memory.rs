//! What building a collective holds, estimated from its spec before anything is built
//! (`crate::budget` holds the estimates to the memory limit), and the figures of a
//! collective every other estimate starts from.

use super::{CollectiveKind, CollectiveSpec};
use crate::budget::mul;
use crate::topology::{limits::building_bytes, Topology};

/// A collective's figures, from its spec alone (nothing built).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub chunks: u64,
    /// (chunk, NPU) pairs where the NPU must receive the chunk (or, combining, send its
    /// contribution): one transfer each over neighbours.
    pub deliveries: u64,
    /// Whether chunks must cross NPUs that do not need them.
    pub relayed: bool,
}

impl Shape {
    pub fn of(spec: &CollectiveSpec, alive: usize) -> Shape {
        use CollectiveKind::*;
        let p = spec.npus.len() as u64;
        let k = spec.chunks_per_npu as u64;
        // K comes from user input (a schedule file) before the collective is checked.
        let pk = p.saturating_mul(k);
        let (chunks, per_chunk_deliveries) = match spec.kind {
            AllGather | ReduceScatter => (pk, p.saturating_sub(1)),
            AllReduce => (pk, 2 * p.saturating_sub(1)),
            Broadcast | Reduce => (k, p.saturating_sub(1)),
            Gather | Scatter => (pk, 1),
            AllToAll => (p.saturating_mul(p).saturating_mul(k), 1),
        };
        let relayed = matches!(spec.kind, Gather | Scatter | AllToAll) || spec.npus.len() < alive;
        Shape {
            chunks,
            deliveries: chunks.saturating_mul(per_chunk_deliveries),
            relayed,
        }
    }
}

/// Bytes `Collective::new` holds for `spec` on `topo` at its peak: its copy of the spec's
/// NPUs (conditions are computed, not stored) and what its reachability check builds:
/// hops from one NPU, and unless chunks only spread from a root, the reversed topology.
pub fn building(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let hops = mul(topo.vertices() as u64, 16);
    let reversed = match spec.kind {
        CollectiveKind::Broadcast | CollectiveKind::Scatter => 0,
        _ => building_bytes(topo.links().len()),
    };
    mul(spec.npus.len() as u64, 8)
        .saturating_add(hops)
        .saturating_add(reversed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// K is read from a schedule file before the collective checks it: a K no machine
    /// could hold saturates the estimate (so the limit refuses it) instead of overflowing.
    #[test]
    fn a_k_from_a_file_too_large_for_any_machine_saturates() {
        let spec = CollectiveSpec {
            kind: CollectiveKind::AllReduce,
            root: None,
            npus: vec![0, 1],
            chunks_per_npu: usize::MAX,
            size_bytes: 1 << 20,
        };
        assert_eq!(Shape::of(&spec, 2).chunks, u64::MAX);
        assert_eq!(Shape::of(&spec, 2).deliveries, u64::MAX);
    }
}
