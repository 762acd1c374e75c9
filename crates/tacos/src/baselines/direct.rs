//! Direct: every NPU sends its data straight to every NPU that needs it, all at once;
//! sends between NPUs without a link are routed, and contend for the links on the way.

use super::relay::relayed_sends;
use super::{root_rank, span, Plan};
use crate::collective::{chunk_divisor, CollectiveKind, CollectiveSpec};
use crate::schedule::Op;
use crate::topology::Topology;

pub(super) fn plan(spec: &CollectiveSpec) -> Plan {
    let p = spec.npus.len();
    let k = spec.chunks_per_npu;
    let npu = |rank: usize| spec.npus[rank];
    let root = root_rank(spec);
    let mut plan = Plan::default();
    // Rank r sends to r + 1, r + 2, ... so that no NPU is everyone's first target.
    let others = |r: usize| (1..p).map(move |d| (r + d) % p);
    match spec.kind {
        CollectiveKind::AllGather => {
            for r in 0..p {
                for q in others(r) {
                    plan.send(0, &span(r * k, k), npu(r), npu(q), Op::Copy);
                }
            }
        }
        CollectiveKind::ReduceScatter | CollectiveKind::AllReduce => {
            for r in 0..p {
                for q in others(r) {
                    plan.send(0, &span(q * k, k), npu(r), npu(q), Op::Reduce);
                }
            }
            if spec.kind == CollectiveKind::AllReduce {
                for r in 0..p {
                    for q in others(r) {
                        plan.send(1, &span(r * k, k), npu(r), npu(q), Op::Copy);
                    }
                }
            }
        }
        CollectiveKind::Broadcast => {
            for q in others(root) {
                plan.send(0, &span(0, k), npu(root), npu(q), Op::Copy);
            }
        }
        CollectiveKind::Reduce => {
            for r in others(root) {
                plan.send(0, &span(0, k), npu(r), npu(root), Op::Reduce);
            }
        }
        CollectiveKind::Gather => {
            for r in others(root) {
                plan.send(0, &span(r * k, k), npu(r), npu(root), Op::Copy);
            }
        }
        CollectiveKind::Scatter => {
            for q in others(root) {
                plan.send(0, &span(q * k, k), npu(root), npu(q), Op::Copy);
            }
        }
        CollectiveKind::AllToAll => {
            for r in 0..p {
                for q in others(r) {
                    plan.send(0, &span((r * p + q) * k, k), npu(r), npu(q), Op::Copy);
                }
            }
        }
    }
    plan
}

/// How many transfers Direct's schedule for `spec` holds once relayed (`super::relay`),
/// where it relays any: a copy between NPUs that no link or switch joins counts once per
/// NPU it stops at. Reductions are never relayed (`relay` refuses before it allocates),
/// so a combining collective relays nothing, nor does a sender whose routes cannot be
/// found (`relay` says why).
pub(super) fn relayed_transfers(topo: &Topology, spec: &CollectiveSpec) -> Option<u64> {
    let p = spec.npus.len();
    let k = spec.chunks_per_npu;
    let bytes = spec.size_bytes as f64 / chunk_divisor(spec.kind, p, k).max(1) as f64;
    let npu = |rank: usize| spec.npus[rank];
    let root = root_rank(spec);
    let others = |r: usize| (0..p).filter(move |&q| q != r).map(npu);
    let from = |r: usize, to: &mut dyn Iterator<Item = usize>| {
        relayed_sends(topo, npu(r), to, bytes, k as u64)
    };
    let sum = |a: (u64, u64), b: (u64, u64)| (a.0.saturating_add(b.0), a.1.saturating_add(b.1));
    let (sends, relayed) = match spec.kind {
        CollectiveKind::AllGather | CollectiveKind::AllToAll => (0..p)
            .map(|r| from(r, &mut others(r)))
            .try_fold((0, 0), |total, n| Some(sum(total, n?))),
        CollectiveKind::Broadcast | CollectiveKind::Scatter => from(root, &mut others(root)),
        CollectiveKind::Gather => (0..p)
            .filter(|&r| r != root)
            .map(|r| from(r, &mut std::iter::once(npu(root))))
            .try_fold((0, 0), |total, n| Some(sum(total, n?))),
        CollectiveKind::ReduceScatter | CollectiveKind::AllReduce | CollectiveKind::Reduce => None,
    }?;
    (relayed > sends).then_some(relayed)
}
