//! Relays: letting chunks cross NPUs that do not need them (sub-collectives, Gather,
//! Scatter, All-to-All).
//!
//! For each chunk and each NPU that must end with it (a target), `best` is the cheapest
//! alpha-beta time from any NPU that holds the chunk, or is about to, to that target.
//! Sending the chunk to an NPU that does not want it is useful only when that NPU is
//! strictly closer to some target than `best`. So every relay hop moves a copy strictly
//! closer (no cycles), a second copy chasing the same target is never sent, and the copy
//! closest to a target that still lacks the chunk always has a useful next hop on a
//! shortest path, so every reachable target is reached.
//!
//! Where every chunk has one target (All-to-All, Gather, Scatter) and the problem plans
//! its chunks' ways, each is given its path before matching instead (`paths`): the only
//! useful next hop is the next on its path.

use super::fabric::Routes;
use super::greedy::Problem;
use super::paths::{Paths, Trip};
use crate::error::{Error, Result};
use crate::schedule::later;
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const FAR: Picos = Picos::MAX;

pub(super) struct Relays {
    npus: usize,
    /// Per chunk, its range in `rows` and `best` (`start[c]..start[c + 1]`).
    start: Vec<usize>,
    /// Per (chunk, target): the target's row in `dist`.
    rows: Vec<u32>,
    /// Per (chunk, target): the cheapest time from a copy to the target.
    best: Vec<Picos>,
    /// Distinct targets.
    targets: usize,
    /// `dist[(class * targets + row) * npus + x]`: cheapest time from x to the row's target
    /// for a chunk of that class.
    dist: Vec<Picos>,
    /// Every chunk's planned path, where each has one target.
    paths: Option<Paths>,
}

impl Relays {
    /// `cost[class * links + link]` is the time of one chunk of the class on the link;
    /// `routes`, the physical links each link of `topo` holds (where it is a channel
    /// through switches), whose loads planned paths balance; `seed` orders the planning.
    pub(super) fn new(
        topo: &Topology,
        routes: Option<&Routes>,
        problem: &Problem<'_>,
        cost: &[Picos],
        seed: u64,
    ) -> Result<Relays> {
        let n = topo.npus();
        let mut row_of = vec![u32::MAX; n];
        let mut target_npus = Vec::new();
        let mut start = Vec::with_capacity(problem.chunks.len() + 1);
        let mut rows = Vec::new();
        for chunk in &problem.chunks {
            start.push(rows.len());
            for &w in chunk.post {
                if row_of[w] == u32::MAX {
                    row_of[w] = target_npus.len() as u32;
                    target_npus.push(w);
                }
                rows.push(row_of[w]);
            }
        }
        start.push(rows.len());
        let links = topo.links().len();
        let mut dist = Vec::with_capacity(problem.class_bytes.len() * target_npus.len() * n);
        for class in 0..problem.class_bytes.len() {
            let class_cost = &cost[class * links..(class + 1) * links];
            for &w in &target_npus {
                dist.extend(times_to(topo, w, class_cost)?);
            }
        }
        let mut relays = Relays {
            npus: n,
            best: vec![FAR; rows.len()],
            start,
            rows,
            targets: target_npus.len(),
            dist,
            paths: None,
        };
        if problem.planned && single_targets(problem) {
            relays.paths = Some(relays.plan(topo, routes, problem, cost, seed)?);
        }
        Ok(relays)
    }

    /// Every chunk's path (each has one target and a source); an error where a chunk
    /// cannot get strictly closer to its target at every hop (no path, or links that take
    /// no time), where matching would stall as well.
    fn plan(
        &self,
        topo: &Topology,
        routes: Option<&Routes>,
        problem: &Problem<'_>,
        cost: &[Picos],
        seed: u64,
    ) -> Result<Paths> {
        let links = topo.links().len();
        let n = self.npus;
        let trips: Vec<Trip> = problem
            .chunks
            .iter()
            .enumerate()
            .map(|(c, chunk)| {
                let row = (chunk.class * self.targets + self.rows[self.start[c]] as usize) * n;
                let dist = &self.dist[row..row + n];
                Trip {
                    from: chunk
                        .pre
                        .iter()
                        .copied()
                        .min_by_key(|&u| dist[u])
                        .unwrap_or(0),
                    to: chunk.post[0],
                    cost: &cost[chunk.class * links..(chunk.class + 1) * links],
                    dist,
                }
            })
            .collect();
        let planned = match routes {
            Some(r) => Paths::plan(topo, r.physical(), |l| r.links(l), &trips, seed),
            None => {
                let own: Vec<u32> = (0..links as u32).collect();
                Paths::plan(topo, links, |l| &own[l..=l], &trips, seed)
            }
        };
        planned.map_err(|(from, to)| {
            Error::Synthesis(format!(
                "no path takes a chunk from NPU {from} to NPU {to} strictly closer at every hop"
            ))
        })
    }

    /// Whether chunks follow planned paths (`next_hop`) rather than any closer NPU.
    pub(super) fn routed(&self) -> bool {
        self.paths.is_some()
    }

    /// The link a chunk on a planned path takes next, if it has not started its last hop.
    pub(super) fn next_hop(&self, chunk: usize) -> Option<LinkId> {
        self.paths.as_ref().and_then(|p| p.next(chunk))
    }

    /// A transfer of `chunk` over `link` started: on a planned path, its next hop.
    pub(super) fn started(&mut self, chunk: usize, link: LinkId) {
        if let Some(p) = &mut self.paths {
            p.advance(chunk, link);
        }
    }

    fn dist(&self, class: usize, entry: usize, npu: NpuId) -> Picos {
        self.dist[(class * self.targets + self.rows[entry] as usize) * self.npus + npu]
    }

    /// `npu` holds `chunk` or will: targets it is closer to than any copy so far get closer.
    pub(super) fn reach(&mut self, chunk: usize, class: usize, npu: NpuId) {
        for e in self.start[chunk]..self.start[chunk + 1] {
            let d = self.dist(class, e, npu);
            if d < self.best[e] {
                self.best[e] = d;
            }
        }
    }

    /// How far the chunk's farthest target still is from its nearest copy (on a planned
    /// path, the hops it has yet to start).
    pub(super) fn remaining(&self, chunk: usize) -> Picos {
        if let Some(p) = &self.paths {
            return p.ahead(chunk).len() as Picos;
        }
        self.best[self.start[chunk]..self.start[chunk + 1]]
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Whether a copy of `chunk` at `npu` would be closer to some target than every copy so far.
    pub(super) fn improves(&self, chunk: usize, class: usize, npu: NpuId) -> bool {
        (self.start[chunk]..self.start[chunk + 1]).any(|e| self.dist(class, e, npu) < self.best[e])
    }
}

/// Whether every chunk has one target and a source (All-to-All, Gather, Scatter): then
/// each gets a planned path.
pub(super) fn single_targets(problem: &Problem<'_>) -> bool {
    problem
        .chunks
        .iter()
        .all(|c| c.post.len() == 1 && !c.pre.is_empty())
}

/// Cheapest time from every NPU to `target` (Dijkstra over incoming links), FAR where
/// the target cannot be reached; an error where a path's time passes the clock (a
/// saturated time would read as unreachable).
fn times_to(topo: &Topology, target: NpuId, cost: &[Picos]) -> Result<Vec<Picos>> {
    let mut dist = vec![FAR; topo.npus()];
    dist[target] = 0;
    let mut heap = BinaryHeap::from([Reverse((0, target))]);
    while let Some(Reverse((d, v))) = heap.pop() {
        if d > dist[v] {
            continue;
        }
        for &l in topo.in_links(v) {
            let u = topo.link(l).src;
            let nd = later(d, cost[l], || {
                format!("synthesis: the path from NPU {u} to NPU {target}")
            })?;
            if nd < dist[u] {
                dist[u] = nd;
                heap.push(Reverse((nd, u)));
            }
        }
    }
    Ok(dist)
}
