//! Ring: a logical ring over the collective's NPUs, laid along links where the topology
//! allows (a Hamiltonian cycle when one is found), each step passing one segment on.

use super::{rechunked, root_rank, span, Plan};
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::schedule::Op;
use crate::topology::{NpuId, Topology};
use std::collections::VecDeque;

/// Search steps allowed per NPU when looking for a ring that follows links everywhere.
const SEARCH_STEPS_PER_NPU: usize = 2_000;

pub(super) fn plan(
    topo: &Topology,
    spec: &CollectiveSpec,
    bidirectional: bool,
) -> Result<(Plan, CollectiveSpec)> {
    let k = spec.chunks_per_npu;
    let ways = if bidirectional { 2 } else { 1 };
    let spec = rechunked(spec, k * ways);
    let order = ring_order(topo, &spec.npus);
    let p = order.len();
    // Position of each rank in the ring, and the rank at each position.
    let rank_at: Vec<usize> = order
        .iter()
        .map(|n| spec.npus.iter().position(|m| m == n).expect("a member"))
        .collect();
    let mut plan = Plan::default();
    for way in 0..ways {
        let forward = way == 0;
        // This direction's share of a rank's (or the root's) K pieces.
        let own = |rank: usize| span(rank * k * ways + way * k, k);
        let segment = |pos: usize| own(rank_at[pos]);
        match spec.kind {
            CollectiveKind::AllGather => {
                plan.ring_pass(0, &order, &segment, forward, Op::Copy);
            }
            CollectiveKind::ReduceScatter => {
                plan.ring_pass(0, &order, &segment, forward, Op::Reduce);
            }
            CollectiveKind::AllReduce => {
                let next = plan.ring_pass(0, &order, &segment, forward, Op::Reduce);
                plan.ring_pass(next, &order, &segment, forward, Op::Copy);
            }
            CollectiveKind::Broadcast | CollectiveKind::Reduce => {
                // A chain round the ring in its direction: from the root (Broadcast), or
                // from the root's successor round to the root (Reduce).
                let root = rank_at
                    .iter()
                    .position(|&r| r == root_rank(&spec))
                    .expect("root");
                let (first, op) = if spec.kind == CollectiveKind::Broadcast {
                    (0, Op::Copy)
                } else {
                    (1, Op::Reduce)
                };
                let chain = |h: usize| {
                    let h = (first + h) % p;
                    order[if forward {
                        (root + h) % p
                    } else {
                        (root + p - h) % p
                    }]
                };
                for h in 0..p.saturating_sub(1) {
                    plan.send(h, &span(way * k, k), chain(h), chain(h + 1), op);
                }
            }
            other => unreachable!("ring does not define {other}"),
        }
    }
    Ok((plan, spec))
}

/// A ring order over `npus` that follows links where it can: a Hamiltonian cycle of the
/// links among them when a bounded search finds one (Warnsdorff's rule: go first where
/// fewest ways on remain), otherwise the best greedy walk, jumping to the nearest NPU
/// not yet on the ring when stuck. Starts at `npus[0]`; reproducible.
pub fn ring_order(topo: &Topology, npus: &[NpuId]) -> Vec<NpuId> {
    if npus.len() <= 2 {
        return npus.to_vec();
    }
    let mut member = vec![false; topo.npus()];
    for &n in npus {
        member[n] = true;
    }
    let mut search = Search {
        topo,
        member: &member,
        on_ring: vec![false; topo.npus()],
        path: Vec::with_capacity(npus.len()),
        want: npus.len(),
        budget: SEARCH_STEPS_PER_NPU * npus.len(),
    };
    search.on_ring[npus[0]] = true;
    search.path.push(npus[0]);
    if search.extend() {
        return search.path;
    }
    greedy_walk(topo, &member, npus)
}

struct Search<'a> {
    topo: &'a Topology,
    member: &'a [bool],
    on_ring: Vec<bool>,
    path: Vec<NpuId>,
    want: usize,
    budget: usize,
}

impl Search<'_> {
    /// Members linked from `u` and not on the ring yet, fewest onward choices first.
    fn choices(&self, u: NpuId) -> Vec<NpuId> {
        let mut next: Vec<(usize, NpuId)> = self
            .topo
            .out_links(u)
            .map(|l| self.topo.link(l).dst)
            .filter(|&v| self.member[v] && !self.on_ring[v])
            .map(|v| (self.onward(v), v))
            .collect();
        next.sort_unstable();
        next.into_iter().map(|(_, v)| v).collect()
    }

    fn onward(&self, v: NpuId) -> usize {
        self.topo
            .out_links(v)
            .filter(|&l| {
                let w = self.topo.link(l).dst;
                self.member[w] && !self.on_ring[w]
            })
            .count()
    }

    /// Depth-first extension of `path` into a closed cycle; false when it cannot or the
    /// budget ran out.
    fn extend(&mut self) -> bool {
        let u = *self.path.last().expect("starts with one NPU");
        if self.path.len() == self.want {
            return self.topo.link_between(u, self.path[0]).is_some();
        }
        for v in self.choices(u) {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            self.on_ring[v] = true;
            self.path.push(v);
            if self.extend() {
                return true;
            }
            self.path.pop();
            self.on_ring[v] = false;
        }
        false
    }
}

/// Warnsdorff's walk without backtracking; when stuck, on to the nearest member not yet
/// visited (by hops).
fn greedy_walk(topo: &Topology, member: &[bool], npus: &[NpuId]) -> Vec<NpuId> {
    let mut search = Search {
        topo,
        member,
        on_ring: vec![false; topo.npus()],
        path: vec![npus[0]],
        want: npus.len(),
        budget: 0,
    };
    search.on_ring[npus[0]] = true;
    while search.path.len() < npus.len() {
        let u = *search.path.last().expect("not empty");
        let v = match search.choices(u).first() {
            Some(&v) => v,
            None => nearest_unvisited(topo, u, member, &search.on_ring).unwrap_or_else(|| {
                *npus
                    .iter()
                    .find(|&&n| !search.on_ring[n])
                    .expect("some left")
            }),
        };
        search.on_ring[v] = true;
        search.path.push(v);
    }
    search.path
}

fn nearest_unvisited(
    topo: &Topology,
    from: NpuId,
    member: &[bool],
    seen: &[bool],
) -> Option<NpuId> {
    let mut visited = vec![false; topo.npus()];
    let mut queue = VecDeque::from([from]);
    visited[from] = true;
    while let Some(u) = queue.pop_front() {
        for l in topo.out_links(u) {
            let v = topo.link(l).dst;
            if !visited[v] {
                if member[v] && !seen[v] {
                    return Some(v);
                }
                visited[v] = true;
                queue.push_back(v);
            }
        }
    }
    None
}
