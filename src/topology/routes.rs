//! Routes between NPUs through switches: which links a transfer from one NPU to another
//! holds when switches stand between them.
//!
//! A route never passes through a third NPU (that would be a relay, which schedules make
//! explicit); it is a direct NPU-to-NPU link, or a path whose inner vertices are all
//! switches. Among those it is the shortest by summed latency, then by hops, ties broken
//! toward the lowest-numbered vertex, so routes are reproducible. A pair whose shortest
//! route has more than `MAX_ROUTE_LINKS` links has no route (`try_route` says why), even
//! where a slower one within the limit exists: no fabric built sanely has one, and
//! keeping the search latency-first keeps it one pass.

use super::limits::MAX_ROUTE_LINKS;
use super::{Link, LinkId, NpuId, Topology};
use crate::error::{Error, Npus, Result};
use crate::units::us_to_ps;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Shortest routes from one NPU to every other, through switches only.
#[derive(Clone, Debug)]
pub struct RouteTree {
    src: NpuId,
    /// The last link on the route to each vertex (`None` for `src` and where unreachable).
    via: Vec<Option<LinkId>>,
}

impl RouteTree {
    /// The links from `src` to `dst`, in order; `None` when `dst` cannot be reached
    /// through switches alone within `MAX_ROUTE_LINKS` links, is `src`, or is not a vertex.
    pub fn route_to(&self, topo: &Topology, dst: NpuId) -> Option<Vec<LinkId>> {
        self.links_to(topo, dst).ok()
    }

    /// The route to `dst`, or why there is none: `Err(Some(links))` when it is longer
    /// than `MAX_ROUTE_LINKS`, `Err(None)` when there is no route at all.
    fn links_to(
        &self,
        topo: &Topology,
        dst: NpuId,
    ) -> std::result::Result<Vec<LinkId>, Option<usize>> {
        let mut path = Vec::new();
        let mut at = dst;
        while at != self.src {
            let l = self.via.get(at).copied().flatten().ok_or(None)?;
            path.push(l);
            at = topo.link(l).src;
        }
        if path.is_empty() {
            return Err(None);
        }
        if path.len() > MAX_ROUTE_LINKS {
            return Err(Some(path.len()));
        }
        path.reverse();
        Ok(path)
    }
}

impl Topology {
    /// Shortest routes from NPU `src` through switches (see the module's rule). One search
    /// over the switches reachable from `src`: keep the tree to route many messages.
    pub fn route_tree(&self, src: NpuId) -> RouteTree {
        let n = self.vertices();
        let mut best: Vec<(u128, usize)> = vec![(u128::MAX, usize::MAX); n];
        let mut via = vec![None; n];
        if src >= self.npus() {
            return RouteTree { src, via };
        }
        best[src] = (0, 0);
        let mut heap = BinaryHeap::from([Reverse((0u128, 0usize, src))]);
        while let Some(Reverse((d, h, u))) = heap.pop() {
            if (d, h) > best[u] || (u != src && !self.is_switch(u)) {
                continue;
            }
            for l in self.out_links(u) {
                let link = self.link(l);
                let next = (d + u128::from(us_to_ps(link.latency_us)), h + 1);
                if next < best[link.dst] {
                    best[link.dst] = next;
                    via[link.dst] = Some(l);
                    heap.push(Reverse((next.0, next.1, link.dst)));
                }
            }
        }
        RouteTree { src, via }
    }

    /// The single link a message crossing `route` (consecutive links) behaves as, held
    /// cut-through: from the route's first vertex to its last, the links' summed latency,
    /// the narrowest bandwidth. Everything that times a transfer through switches (the
    /// synthesizer, the checker, the simulator) times this link, so they agree exactly.
    pub fn route_link(&self, route: impl IntoIterator<Item = LinkId>) -> Link {
        let mut bandwidth_gbps = f64::INFINITY;
        let mut latency_us = 0.0;
        let (mut src, mut dst) = (None, 0);
        for l in route {
            let link = self.link(l);
            src.get_or_insert(link.src);
            dst = link.dst;
            bandwidth_gbps = bandwidth_gbps.min(link.bandwidth_gbps);
            latency_us += link.latency_us;
        }
        Link {
            src: src.unwrap_or(0),
            dst,
            bandwidth_gbps,
            latency_us,
        }
    }

    /// The links a transfer from NPU `src` to NPU `dst` holds: the direct link when there
    /// is one, else the shortest route through switches; `None` when there is neither (or
    /// the route is longer than `MAX_ROUTE_LINKS`: `try_route` says which).
    pub fn route(&self, src: NpuId, dst: NpuId) -> Option<Vec<LinkId>> {
        if let Some(l) = self.link_between(src, dst) {
            return Some(vec![l]);
        }
        if !self.has_switches() || src >= self.npus() || dst >= self.npus() {
            return None;
        }
        self.route_tree(src).route_to(self, dst)
    }

    /// As `route`, with an error naming the pair where there is no route: a `Limit` when
    /// the route through switches is longer than `MAX_ROUTE_LINKS`, else `Disconnected`.
    pub fn try_route(&self, src: NpuId, dst: NpuId) -> Result<Vec<LinkId>> {
        if let Some(l) = self.link_between(src, dst) {
            return Ok(vec![l]);
        }
        let found = if self.has_switches() && src < self.npus() && dst < self.npus() {
            self.route_tree(src).links_to(self, dst)
        } else {
            Err(None)
        };
        found.map_err(|too_long| match too_long {
            Some(links) => Error::Limit {
                what: "links",
                value: links as u64,
                limit: MAX_ROUTE_LINKS as u64,
                context: format!(
                    "the route from {} to {} through switches",
                    self.vertex_label(src),
                    self.vertex_label(dst)
                ),
            },
            None => Error::Disconnected {
                from: Npus::Npu(src),
                to: Npus::Npu(dst),
            },
        })
    }
}
