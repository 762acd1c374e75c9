//! Recursive halving-doubling (power-of-two NPU counts). Reduce-Scatter halves: at step s
//! each NPU swaps half of what it is still responsible for with the partner at distance
//! P / 2^(s+1), reducing what it receives. All-Gather doubles: at distance 1, 2, 4, ...
//! partners swap everything they hold. All-Reduce is one then the other (Rabenseifner).
//! Broadcast is a halving scatter then a doubling All-Gather, Reduce a halving
//! Reduce-Scatter then a binomial gather to the root; both cut the buffer into P x K chunks.
//! Ranks are taken relative to the root (rank xor root), so the root plays rank 0.

use super::{rechunked, root_rank, span, Plan};
use crate::collective::{ChunkId, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::Op;

pub(super) fn plan(spec: &CollectiveSpec) -> Result<(Plan, CollectiveSpec)> {
    let p = spec.npus.len();
    if !p.is_power_of_two() {
        return Err(Error::baseline("rhd", format!(
            "rhd needs a power-of-two number of NPUs; this collective has {p} (use ring, direct or dbt)"
        )));
    }
    let k = spec.chunks_per_npu;
    let rooted = spec.kind.has_root();
    let spec = if rooted {
        rechunked(spec, p * k)
    } else {
        spec.clone()
    };
    let origin = if rooted { root_rank(&spec) } else { 0 };
    let halving = Halving {
        npus: &spec.npus,
        origin,
        k,
        log_p: p.trailing_zeros() as usize,
    };
    let mut plan = Plan::default();
    match spec.kind {
        CollectiveKind::AllGather => {
            halving.doubling_allgather(&mut plan, 0);
        }
        CollectiveKind::ReduceScatter => {
            halving.halving(&mut plan, 0, Op::Reduce);
        }
        CollectiveKind::AllReduce => {
            let next = halving.halving(&mut plan, 0, Op::Reduce);
            halving.doubling_allgather(&mut plan, next);
        }
        CollectiveKind::Broadcast => {
            let next = halving.halving(&mut plan, 0, Op::Copy);
            halving.doubling_allgather(&mut plan, next);
        }
        CollectiveKind::Reduce => {
            let next = halving.halving(&mut plan, 0, Op::Reduce);
            halving.binomial_gather(&mut plan, next);
        }
        other => unreachable!("rhd does not define {other}"),
    }
    Ok((plan, spec))
}

/// The collective's NPUs seen as relative ranks 0..P (rank xor origin): relative rank q
/// ends a halving responsible for segment q, chunks q*K..(q+1)*K.
struct Halving<'a> {
    npus: &'a [usize],
    origin: usize,
    k: usize,
    log_p: usize,
}

impl Halving<'_> {
    fn npu(&self, q: usize) -> usize {
        self.npus[q ^ self.origin]
    }

    /// The chunks of segments `from..from + count`.
    fn segments(&self, from: usize, count: usize) -> Vec<ChunkId> {
        span(from * self.k, count * self.k)
    }

    /// Steps of halving: each rank sends the half of its segments on its partner's side.
    /// With `Op::Copy` and everything at relative rank 0 this is a scatter: only ranks
    /// holding data (multiples of twice the distance) send.
    fn halving(&self, plan: &mut Plan, step: usize, op: Op) -> usize {
        let p = 1 << self.log_p;
        for s in 0..self.log_p {
            let d = p >> (s + 1);
            for q in 0..p {
                if op == Op::Copy && q % (2 * d) != 0 {
                    continue;
                }
                let partner = q ^ d;
                // q is responsible for the 2d segments sharing its bits above d; the
                // partner takes the half containing itself.
                let base = q & !(2 * d - 1);
                let theirs = base + (partner & d);
                plan.send(
                    step + s,
                    &self.segments(theirs, d),
                    self.npu(q),
                    self.npu(partner),
                    op,
                );
            }
        }
        step + self.log_p
    }

    /// Doubling: at distance 1, 2, 4, ... each rank sends the block it holds.
    fn doubling_allgather(&self, plan: &mut Plan, step: usize) -> usize {
        let p = 1 << self.log_p;
        for s in 0..self.log_p {
            let d = 1 << s;
            for q in 0..p {
                let block = q & !(d - 1);
                plan.send(
                    step + s,
                    &self.segments(block, d),
                    self.npu(q),
                    self.npu(q ^ d),
                    Op::Copy,
                );
            }
        }
        step + self.log_p
    }

    /// Binomial gather of every rank's segment to relative rank 0.
    fn binomial_gather(&self, plan: &mut Plan, step: usize) -> usize {
        let p = 1 << self.log_p;
        for s in 0..self.log_p {
            let d = 1 << s;
            for q in (d..p).step_by(2 * d) {
                plan.send(
                    step + s,
                    &self.segments(q, d),
                    self.npu(q),
                    self.npu(q - d),
                    Op::Copy,
                );
            }
        }
        step + self.log_p
    }
}
