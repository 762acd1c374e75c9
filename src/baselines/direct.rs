//! Direct: every NPU sends its data straight to every NPU that needs it, all at once;
//! sends between NPUs without a link are routed, and contend for the links on the way.

use super::{root_rank, span, Plan};
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::schedule::Op;

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
