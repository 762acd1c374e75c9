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
/// not yet on the ring when stuck. On a fabric two NPUs joined through switches only are
/// neighbours too: a send between them is one transfer on its route. Neighbours through
/// one switch are tried first (an NVSwitch, a rail: the ring NCCL lays on a rail-optimized
/// cluster, which crosses to the next node on a rail), then through any number (a spine),
/// where hops through the spine would all share its links. Starts at `npus[0]`;
/// reproducible.
pub fn ring_order(topo: &Topology, npus: &[NpuId]) -> Vec<NpuId> {
    if npus.len() <= 2 {
        return npus.to_vec();
    }
    let mut member = vec![false; topo.vertices()];
    for &n in npus {
        member[n] = true;
    }
    let reaches: &[Option<usize>] = if topo.has_switches() {
        &[Some(1), None]
    } else {
        &[None]
    };
    for &switches in reaches {
        let neighbours = Neighbours::new(topo, &member, npus, switches);
        let mut search = Search::new(&neighbours, npus.len(), SEARCH_STEPS_PER_NPU * npus.len());
        search.visit(npus[0]);
        if search.extend() {
            return search.path;
        }
    }
    let neighbours = Neighbours::new(topo, &member, npus, None);
    greedy_walk(topo, &member, &neighbours, npus)
}

/// The members each member can send to in one transfer, in id order: over a link, or on
/// a fabric through switches only (`Topology::route`; at most `switches` of them when
/// given); and, reversed, who can send to each. Compressed rows indexed by NPU id;
/// non-members have none.
struct Neighbours {
    out_start: Vec<usize>,
    out: Vec<NpuId>,
    in_start: Vec<usize>,
    ins: Vec<NpuId>,
}

impl Neighbours {
    fn new(
        topo: &Topology,
        member: &[bool],
        npus: &[NpuId],
        switches: Option<usize>,
    ) -> Neighbours {
        let n = topo.npus();
        let mut rows: Vec<Vec<NpuId>> = vec![Vec::new(); n];
        let mut reach = Reach::new(topo);
        for &u in npus {
            rows[u] = if topo.has_switches() {
                reach.members_from(u, member, switches)
            } else {
                topo.out_links(u)
                    .map(|l| topo.link(l).dst)
                    .filter(|&v| member[v])
                    .collect()
            };
        }
        let (out_start, out) = compress(&rows);
        let mut back: Vec<Vec<NpuId>> = vec![Vec::new(); n];
        for (u, row) in rows.iter().enumerate() {
            for &v in row {
                back[v].push(u);
            }
        }
        let (in_start, ins) = compress(&back);
        Neighbours {
            out_start,
            out,
            in_start,
            ins,
        }
    }

    fn of(&self, u: NpuId) -> &[NpuId] {
        &self.out[self.out_start[u]..self.out_start[u + 1]]
    }

    fn to(&self, v: NpuId) -> &[NpuId] {
        &self.ins[self.in_start[v]..self.in_start[v + 1]]
    }

    fn joined(&self, u: NpuId, v: NpuId) -> bool {
        self.of(u).binary_search(&v).is_ok()
    }
}

/// Rows as (start of each row, the rows one after another).
fn compress(rows: &[Vec<NpuId>]) -> (Vec<usize>, Vec<NpuId>) {
    let mut start = Vec::with_capacity(rows.len() + 1);
    start.push(0);
    for row in rows {
        start.push(start.last().expect("starts with 0") + row.len());
    }
    (start, rows.concat())
}

/// A walk from one NPU over its links and on through switches, reusing its marks.
struct Reach<'a> {
    topo: &'a Topology,
    seen: Vec<bool>,
}

impl<'a> Reach<'a> {
    fn new(topo: &'a Topology) -> Reach<'a> {
        Reach {
            topo,
            seen: vec![false; topo.vertices()],
        }
    }

    /// The members other than `u` that `u` reaches by a link or through switches only
    /// (at most `switches` of them when given), in id order.
    fn members_from(&mut self, u: NpuId, member: &[bool], switches: Option<usize>) -> Vec<NpuId> {
        let topo = self.topo;
        let mut found = Vec::new();
        let mut touched = vec![u];
        self.seen[u] = true;
        // Breadth first, one layer of switches at a time.
        let mut layer = vec![u];
        let mut depth = 0;
        while !layer.is_empty() {
            let mut next = Vec::new();
            for &x in &layer {
                for l in topo.out_links(x) {
                    let v = topo.link(l).dst;
                    if self.seen[v] {
                        continue;
                    }
                    self.seen[v] = true;
                    touched.push(v);
                    if topo.is_switch(v) {
                        next.push(v);
                    } else if member[v] {
                        found.push(v);
                    }
                }
            }
            depth += 1;
            if switches.is_some_and(|most| depth > most) {
                break;
            }
            layer = next;
        }
        for v in touched {
            self.seen[v] = false;
        }
        found.sort_unstable();
        found
    }
}

struct Search<'a> {
    neighbours: &'a Neighbours,
    on_ring: Vec<bool>,
    /// Per member, how many of its neighbours are not on the ring yet.
    onward: Vec<usize>,
    path: Vec<NpuId>,
    want: usize,
    budget: usize,
}

impl<'a> Search<'a> {
    fn new(neighbours: &'a Neighbours, want: usize, budget: usize) -> Search<'a> {
        let n = neighbours.out_start.len() - 1;
        Search {
            neighbours,
            on_ring: vec![false; n],
            onward: (0..n).map(|u| neighbours.of(u).len()).collect(),
            path: Vec::with_capacity(want),
            want,
            budget,
        }
    }

    /// Puts `v` on the ring (at the end of the path).
    fn visit(&mut self, v: NpuId) {
        self.on_ring[v] = true;
        self.path.push(v);
        for &w in self.neighbours.to(v) {
            self.onward[w] -= 1;
        }
    }

    /// Takes the last NPU off the ring.
    fn retreat(&mut self) {
        let v = self.path.pop().expect("a path to retreat on");
        self.on_ring[v] = false;
        for &w in self.neighbours.to(v) {
            self.onward[w] += 1;
        }
    }

    /// Members joined from `u` and not on the ring yet, fewest onward choices first.
    fn choices(&self, u: NpuId) -> Vec<NpuId> {
        let mut next: Vec<(usize, NpuId)> = self
            .neighbours
            .of(u)
            .iter()
            .filter(|&&v| !self.on_ring[v])
            .map(|&v| (self.onward[v], v))
            .collect();
        next.sort_unstable();
        next.into_iter().map(|(_, v)| v).collect()
    }

    /// Depth-first extension of `path` into a closed cycle; false when it cannot or the
    /// budget ran out.
    fn extend(&mut self) -> bool {
        let u = *self.path.last().expect("starts with one NPU");
        if self.path.len() == self.want {
            return self.neighbours.joined(u, self.path[0]);
        }
        for v in self.choices(u) {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            self.visit(v);
            if self.extend() {
                return true;
            }
            self.retreat();
        }
        false
    }
}

/// Warnsdorff's walk without backtracking; when stuck, on to the nearest member not yet
/// visited (by hops).
fn greedy_walk(
    topo: &Topology,
    member: &[bool],
    neighbours: &Neighbours,
    npus: &[NpuId],
) -> Vec<NpuId> {
    let mut search = Search::new(neighbours, npus.len(), 0);
    search.visit(npus[0]);
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
        search.visit(v);
    }
    search.path
}

/// The nearest member by hops (through NPUs or switches) not yet `seen`; `member` is
/// indexed by vertex, `seen` by NPU.
fn nearest_unvisited(
    topo: &Topology,
    from: NpuId,
    member: &[bool],
    seen: &[bool],
) -> Option<NpuId> {
    let mut visited = vec![false; topo.vertices()];
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
