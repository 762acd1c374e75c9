//! Planned steps to a `Program`: each threadblock's steps in replay order, dependencies
//! on other threadblocks (extra ones as `nop`s before the step), signalling steps marked,
//! and threadblock ids that put dependency targets first (the executor stores them as int8).

use super::emit::Plan;
use crate::msccl::layout::Slot;
use crate::msccl::limits::{too_many_elements, Limits, Violation};
use crate::msccl::{Buf, Dep, Gpu, Layout, Step, Threadblock};

/// Why a plan gives no program.
pub(super) enum Refusal {
    /// Its steps cannot be ordered.
    Order(String),
    /// A rank's part of the file would have more elements than the executor's parser
    /// keeps (found before the steps are built).
    Elements(Violation),
}

/// Each rank's GPU, or why the plan gives none.
pub(super) fn build_gpus(
    plan: &Plan,
    layout: &Layout,
    limits: &Limits,
) -> Result<Vec<Gpu>, Refusal> {
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
    // Moves are numbered below this.
    let moves = plan
        .ops
        .iter()
        .flat_map(|op| op.send.into_iter().chain(op.recv))
        .max()
        .map_or(0, |m| m + 1);
    check_fifo(plan, &order, moves).map_err(Refusal::Order)?;
    // Dependencies on other threadblocks, the latest per threadblock, by threadblock.
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(plan.ops.len());
    let mut latest: Vec<(usize, usize)> = Vec::new();
    for (o, op) in plan.ops.iter().enumerate() {
        latest.clear();
        for &d in &op.deps {
            let tb = plan.ops[d].tb;
            if tb == op.tb {
                if pos[d] >= pos[o] {
                    return Err(Refusal::Order(format!(
                        "a step would wait for a later step of its own threadblock (rank {}, threadblock plan {tb})",
                        op.rank
                    )));
                }
                continue;
            }
            match latest.iter_mut().find(|e| e.0 == tb) {
                Some(e) if pos[d] > pos[e.1] => e.1 = d,
                Some(_) => {}
                None => latest.push((tb, d)),
            }
        }
        latest.sort_unstable();
        deps.push(latest.iter().map(|e| e.1).collect());
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
    let mut steps_of_rank = vec![0; ranks];
    for (t, list) in order.iter().enumerate() {
        let mut next = 0;
        for &o in list {
            next += deps[o].len().saturating_sub(1);
            index[o] = next;
            next += 1;
        }
        steps_of_rank[plan.tbs[t].rank] += next;
    }
    for (rank, &steps) in steps_of_rank.iter().enumerate() {
        let tbs = per_rank[rank].len();
        if let Some(v) = too_many_elements(rank, ranks, tbs, steps, limits) {
            return Err(Refusal::Elements(v));
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
    let mut sender_src: Vec<Option<Slot>> = vec![None; moves];
    let mut receiver_dst: Vec<Option<Slot>> = vec![None; moves];
    for op in &plan.ops {
        if let (Some(m), Some(s)) = (op.send, op.src.or(op.dst)) {
            sender_src[m] = Some(s);
        }
        if let (Some(m), Some(d)) = (op.recv, op.dst.or(op.src)) {
            receiver_dst[m] = Some(d);
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
                let remote_src = op.recv.and_then(|m| sender_src[m]);
                let remote_dst = op.send.and_then(|m| receiver_dst[m]);
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
fn check_fifo(plan: &Plan, order: &[Vec<usize>], moves: usize) -> Result<(), String> {
    let mut sent: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    let mut received: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    let mut receiver_tb: Vec<Option<usize>> = vec![None; moves];
    for (t, list) in order.iter().enumerate() {
        for &o in list {
            let op = &plan.ops[o];
            if let Some(m) = op.send {
                sent[t].push(m);
            }
            if let Some(m) = op.recv {
                received[t].push(m);
                receiver_tb[m] = Some(t);
            }
        }
    }
    for (t, moves) in sent.iter().enumerate() {
        let Some(r) = moves.first().and_then(|&m| receiver_tb[m]) else {
            continue;
        };
        if received[r] != *moves {
            let tb = &plan.tbs[t];
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
