//! Planned steps to a `Program`: each threadblock's steps in replay order, dependencies
//! on other threadblocks (extra ones as `nop`s before the step), signalling steps marked,
//! and threadblock ids that put dependency targets first (the executor stores them as int8).

use super::emit::Plan;
use crate::msccl::layout::Slot;
use crate::msccl::{Buf, Dep, Gpu, Layout, Step, Threadblock};
use std::collections::BTreeMap;

/// Each rank's GPU, or a message saying why the plan cannot be ordered.
pub(super) fn build_gpus(plan: &Plan, layout: &Layout) -> Result<Vec<Gpu>, String> {
    let ntb = plan.tbs.len();
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); ntb];
    for (o, op) in plan.ops.iter().enumerate() {
        order[op.tb].push(o);
    }
    for list in &mut order {
        list.sort_by_key(|&o| (plan.ops[o].key, o));
    }
    let mut pos = vec![0; plan.ops.len()];
    for list in &order {
        for (p, &o) in list.iter().enumerate() {
            pos[o] = p;
        }
    }
    check_fifo(plan, &order)?;
    // Dependencies on other threadblocks, the latest per threadblock.
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(plan.ops.len());
    for (o, op) in plan.ops.iter().enumerate() {
        let mut latest: BTreeMap<usize, usize> = BTreeMap::new();
        for &d in &op.deps {
            let tb = plan.ops[d].tb;
            if tb == op.tb {
                if pos[d] >= pos[o] {
                    return Err(format!(
                        "a step would wait for a later step of its own threadblock (rank {}, threadblock plan {tb})",
                        op.rank
                    ));
                }
                continue;
            }
            let e = latest.entry(tb).or_insert(d);
            if pos[d] > pos[*e] {
                *e = d;
            }
        }
        deps.push(latest.into_values().collect());
    }
    // Threadblock ids: dependency targets first, then the rest, in plan order.
    let mut target = vec![false; ntb];
    for d in deps.iter().flatten() {
        target[plan.ops[*d].tb] = true;
    }
    let ranks = layout.ranks();
    let mut per_rank: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    for (t, tb) in plan.tbs.iter().enumerate() {
        per_rank[tb.rank].push(t);
    }
    let mut id = vec![0; ntb];
    for list in &mut per_rank {
        list.sort_by_key(|&t| !target[t]);
        for (i, &t) in list.iter().enumerate() {
            id[t] = i;
        }
    }
    // Step index of each op, counting the nops before it.
    let mut index = vec![0; plan.ops.len()];
    for list in &order {
        let mut next = 0;
        for &o in list {
            next += deps[o].len().saturating_sub(1);
            index[o] = next;
            next += 1;
        }
    }
    let mut signals = vec![false; plan.ops.len()];
    for d in deps.iter().flatten() {
        signals[*d] = true;
    }
    let dep_of = |d: usize| Dep {
        tb: id[plan.ops[d].tb],
        step: index[d],
    };
    // The far end of each transfer, to fill a step's unused buffer fields.
    let mut sender_src: BTreeMap<usize, Slot> = BTreeMap::new();
    let mut receiver_dst: BTreeMap<usize, Slot> = BTreeMap::new();
    for op in &plan.ops {
        if let (Some(m), Some(s)) = (op.send, op.src.or(op.dst)) {
            sender_src.insert(m, s);
        }
        if let (Some(m), Some(d)) = (op.recv, op.dst.or(op.src)) {
            receiver_dst.insert(m, d);
        }
    }
    let (input_chunks, output_chunks) = layout.declared_counts();
    let mut gpus: Vec<Gpu> = (0..ranks)
        .map(|r| Gpu {
            input_chunks,
            output_chunks,
            scratch_chunks: plan.scratch[r],
            threadblocks: Vec::new(),
            extra: Vec::new(),
        })
        .collect();
    for (rank, list) in per_rank.iter().enumerate() {
        for &t in list {
            let tb = &plan.tbs[t];
            let mut steps = Vec::new();
            for &o in &order[t] {
                let op = &plan.ops[o];
                for &d in deps[o].iter().skip(1) {
                    steps.push(Step::nop(dep_of(d)));
                }
                let remote_src = op.recv.and_then(|m| sender_src.get(&m).copied());
                let remote_dst = op.send.and_then(|m| receiver_dst.get(&m).copied());
                let src = op
                    .src
                    .or(remote_src)
                    .or(op.dst)
                    .unwrap_or(Slot::new(Buf::Input, 0));
                let dst = op.dst.or(remote_dst).unwrap_or(src);
                let mut step = Step::new(
                    op.instr,
                    (src.buf, src.index as i64),
                    (dst.buf, dst.index as i64),
                    1,
                );
                step.dep = deps[o].first().map(|&d| dep_of(d));
                step.has_dep = signals[o];
                steps.push(step);
            }
            gpus[rank].threadblocks.push(Threadblock {
                send: tb.send,
                recv: tb.recv,
                channel: tb.channel,
                steps,
                extra: Vec::new(),
            });
        }
    }
    Ok(gpus)
}

/// Every connection must carry its transfers in the same order at both ends.
fn check_fifo(plan: &Plan, order: &[Vec<usize>]) -> Result<(), String> {
    let mut sent: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut received: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut receiver_tb: BTreeMap<usize, usize> = BTreeMap::new();
    for (t, list) in order.iter().enumerate() {
        for &o in list {
            let op = &plan.ops[o];
            if let Some(m) = op.send {
                sent.entry(t).or_default().push(m);
            }
            if let Some(m) = op.recv {
                received.entry(t).or_default().push(m);
                receiver_tb.insert(m, t);
            }
        }
    }
    for (t, moves) in &sent {
        let Some(&r) = moves.first().and_then(|m| receiver_tb.get(m)) else {
            continue;
        };
        if received.get(&r) != Some(moves) {
            let tb = &plan.tbs[*t];
            return Err(format!(
                "rank {} would send to rank {} on channel {} in another order than rank {} receives",
                tb.rank,
                tb.send.unwrap_or(0),
                tb.channel,
                tb.send.unwrap_or(0)
            ));
        }
    }
    Ok(())
}
