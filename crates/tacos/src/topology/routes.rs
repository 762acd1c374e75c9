//! Routes between NPUs through switches: which links a transfer from one NPU to another
//! holds when switches stand between them.
//!
//! A route never passes through a third NPU (that would be a relay, which schedules make
//! explicit); it is a direct NPU-to-NPU link, or a path whose inner vertices are all
//! switches. Among those it is the shortest by summed latency, then by hops; where a
//! switch is reached as soon through several others (the spines of a leaf-spine fabric),
//! sources spread over them by their id (`spread_over_equal_parents`), as ECMP spreads
//! flows; other ties go toward the lowest-numbered vertex, so routes are reproducible.
//! A pair whose shortest
//! route has more than `MAX_ROUTE_LINKS` links has no route (`try_route` says why), even
//! where a slower one within the limit exists: no fabric built sanely has one, and
//! keeping the search latency-first keeps it one pass.

use super::limits::{MAX_LATENCY_US, MAX_LINKS, MAX_NPUS, MAX_ROUTE_LINKS};
use super::{Link, LinkId, NpuId, Topology, VertexId};
use crate::error::{Error, Npus, Result};
use crate::units::{us_to_ps, PICOS_PER_US};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

// A search sums latencies in u64 picoseconds and keeps vertex and link ids in u32: a route
// in a search's tree is a simple path, so it and the one link that ends it at an NPU have
// at most `MAX_NPUS` links of at most `MAX_LATENCY_US` each, and 2^24 x 1e12 ps is below
// 2^64; vertex ids are below `MAX_NPUS` and link ids below `MAX_LINKS`.
const _: () = assert!(
    MAX_NPUS as u128 * (MAX_LATENCY_US * PICOS_PER_US) as u128 <= u64::MAX as u128
        && MAX_NPUS as u64 <= u32::MAX as u64
        && MAX_LINKS as u64 <= u32::MAX as u64
);

/// Shortest routes from one NPU to every other, through switches only.
///
/// It keeps only the vertices the search expanded (`src` and the switches it reached:
/// from a GPU of a rail-optimized cluster, its NVSwitch, its rails and the spines, tens
/// where the cluster has thousands of vertices), each with its distance and the link it
/// was reached by. The last link of a route to an NPU is derived when asked, from the
/// NPU's in-links, exactly as the search would have settled it (`last_link`).
#[derive(Clone, Debug)]
pub struct RouteTree {
    src: NpuId,
    /// The expanded vertices, ascending, for binary search.
    vertices: Box<[u32]>,
    /// How each of `vertices` was reached, at the same index.
    reached: Box<[Reached]>,
}

/// A vertex's shortest distance from the tree's `src` and the last link of its route.
#[derive(Clone, Copy, Debug)]
struct Reached {
    /// Summed latency, picoseconds.
    ps: u64,
    /// Links on the route.
    hops: u32,
    /// The route's last link and the index (in the tree) of the vertex it leaves from,
    /// so a route is walked back without searching (both meaningless for `src`).
    via: u32,
    parent: u32,
}

impl Reached {
    /// The order the search expands vertices in: distance, hops, then vertex id.
    fn order(self, v: VertexId) -> (u64, u32, VertexId) {
        (self.ps, self.hops, v)
    }
}

impl RouteTree {
    /// The links from `src` to `dst`, in order; `None` when `dst` cannot be reached
    /// through switches alone within `MAX_ROUTE_LINKS` links, is `src`, or is not a vertex.
    pub fn route_to(&self, topo: &Topology, dst: NpuId) -> Option<Vec<LinkId>> {
        let mut route = Vec::new();
        self.route_into(topo, dst, &mut route).then_some(route)
    }

    /// As `route_to`, writing the route into `route` (cleared first; left empty where
    /// there is none) so that callers routing many messages allocate nothing per message.
    /// Returns whether there is a route.
    pub fn route_into(&self, topo: &Topology, dst: NpuId, route: &mut Vec<LinkId>) -> bool {
        self.links_into(topo, dst, route).is_ok()
    }

    /// As `route_into`, saying why there is no route: `Err(Some(links))` where the route
    /// through switches is longer than `MAX_ROUTE_LINKS`, `Err(None)` where there is none.
    pub(crate) fn try_route_into(
        &self,
        topo: &Topology,
        dst: NpuId,
        route: &mut Vec<LinkId>,
    ) -> std::result::Result<(), Option<usize>> {
        self.links_into(topo, dst, route)
    }

    /// How many vertices the tree holds: `src` and the switches reached.
    pub(crate) fn held(&self) -> usize {
        self.vertices.len()
    }

    /// The bytes the tree holds for its vertices.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held() * (std::mem::size_of::<u32>() + std::mem::size_of::<Reached>())
    }

    /// Asks the cache for the vertices a route's lookup searches.
    pub(crate) fn prefetch(&self) {
        crate::prefetch::slice(&self.vertices);
    }

    /// The index of vertex `v` in the tree, if the search expanded it.
    fn find(&self, v: VertexId) -> Option<usize> {
        self.vertices.binary_search(&u32::try_from(v).ok()?).ok()
    }

    /// The last link of the route to NPU `dst` and the index of the vertex it leaves from,
    /// as the search over every vertex would settle it: each in-link from an expanded
    /// vertex `s` offers `dst` the distance `s`'s plus the link's latency, with one hop
    /// more, and the least offer wins; among equal offers the first made, that is the one from the `s`
    /// expanded first (least `Reached::order`). A topology has at most one link from `s`
    /// to `dst`, so no two offers come from the same `s`.
    fn last_link(&self, topo: &Topology, dst: NpuId) -> Option<(LinkId, usize)> {
        topo.in_links(dst)
            .iter()
            .filter_map(|&l| {
                let s = topo.link(l).src;
                if s != self.src && !topo.is_switch(s) {
                    return None;
                }
                Some((l, s, self.find(s)?))
            })
            .min_by_key(|&(l, s, i)| {
                let (from, latency) = (self.reached[i], us_to_ps(topo.link(l).latency_us));
                (from.ps + latency, from.hops + 1, from.order(s))
            })
            .map(|(l, _, i)| (l, i))
    }

    /// The route to `dst` written into `route` (cleared first), or why there is none:
    /// `Err(Some(links))` when it is longer than `MAX_ROUTE_LINKS`, `Err(None)` when there
    /// is no route at all.
    fn links_into(
        &self,
        topo: &Topology,
        dst: VertexId,
        route: &mut Vec<LinkId>,
    ) -> std::result::Result<(), Option<usize>> {
        route.clear();
        if dst == self.src {
            return Err(None);
        }
        // The last link, when derived, and the index of the vertex whose stored route
        // comes before it.
        let (last, mut at) = if dst < topo.npus() {
            let (l, i) = self.last_link(topo, dst).ok_or(None)?;
            (Some(l), i)
        } else {
            (None, self.find(dst).ok_or(None)?)
        };
        let stored = self.reached[at].hops as usize;
        let len = stored + usize::from(last.is_some());
        if len > MAX_ROUTE_LINKS {
            return Err(Some(len));
        }
        route.resize(stored, 0);
        for slot in route.iter_mut().rev() {
            let r = self.reached[at];
            *slot = r.via as LinkId;
            at = r.parent as usize;
        }
        route.extend(last);
        Ok(())
    }
}

/// The links each NPU pair's transfers hold ([`Topology::route`]) for a caller asking
/// about many pairs: the direct link, or the route read off the sender's route tree, kept
/// per sending NPU (routes are walked again for each pair rather than kept per pair, of
/// which there can be as many as transfers).
pub struct RouteCache<'a> {
    topo: &'a Topology,
    /// The last route found.
    route: Vec<LinkId>,
    /// Per sending NPU, its route tree once it has sent through a switch (none for a
    /// topology without switches).
    trees: Vec<Option<RouteTree>>,
    /// With switches, per NPU: whether it has a link straight to another NPU. A GPU of a
    /// rail-optimized cluster has none, so its transfers go to its tree without a search
    /// of its links first (reads that miss the cache on a large cluster).
    direct: Vec<bool>,
}

impl<'a> RouteCache<'a> {
    pub fn new(topo: &'a Topology) -> RouteCache<'a> {
        let senders = if topo.has_switches() { topo.npus() } else { 0 };
        RouteCache {
            topo,
            route: Vec::new(),
            trees: std::iter::repeat_with(|| None).take(senders).collect(),
            direct: (0..senders)
                .map(|n| topo.out_links(n).any(|l| !topo.is_switch(topo.link(l).dst)))
                .collect(),
        }
    }

    /// Asks the cache for what finding a route from `src` will search: on a large
    /// cluster the senders' trees together outgrow the cache.
    pub fn prefetch(&self, src: NpuId) {
        if let Some(Some(tree)) = self.trees.get(src) {
            tree.prefetch();
        }
    }

    pub fn between(&mut self, src: NpuId, dst: NpuId) -> Option<&[LinkId]> {
        let topo = self.topo;
        let switched = topo.has_switches();
        if !switched || self.direct.get(src) == Some(&true) {
            if let Some(l) = topo.link_between(src, dst) {
                self.route.clear();
                self.route.push(l);
                return Some(&self.route);
            }
        }
        if !switched {
            return None;
        }
        let tree = self
            .trees
            .get_mut(src)?
            .get_or_insert_with(|| topo.route_tree(src));
        tree.route_into(topo, dst, &mut self.route)
            .then_some(&self.route)
    }
}

impl Topology {
    /// Shortest routes from NPU `src` through switches (see the module's rule). One search
    /// over the switches reachable from `src`: keep the tree to route many messages.
    ///
    /// NPUs other than `src` never relay, so the search visits switches only; the routes
    /// to NPUs follow from the switches' distances (`RouteTree::last_link`).
    pub fn route_tree(&self, src: NpuId) -> RouteTree {
        // In the order expanded, parents indexed in that order.
        let mut expanded: Vec<(u32, Reached)> = Vec::new();
        if src < self.npus() {
            let npus = self.npus();
            let unreached = Reached {
                ps: u64::MAX,
                hops: u32::MAX,
                via: 0,
                parent: 0,
            };
            let mut best = vec![unreached; self.switches().len()];
            // Per switch, its index in `expanded` once expanded.
            let mut slot = vec![u32::MAX; self.switches().len()];
            let mut heap = BinaryHeap::from([Reverse((0u64, 0u32, src))]);
            while let Some(Reverse((ps, hops, u))) = heap.pop() {
                let reached = if u == src {
                    Reached {
                        ps,
                        hops,
                        ..unreached
                    }
                } else {
                    let b = best[u - npus];
                    if (ps, hops) > (b.ps, b.hops) {
                        continue;
                    }
                    b
                };
                let parent = expanded.len() as u32;
                if u != src {
                    slot[u - npus] = parent;
                }
                expanded.push((u as u32, reached));
                for l in self.links_to_switches(u) {
                    let link = self.link(l);
                    let next = (ps + us_to_ps(link.latency_us), hops + 1);
                    let b = &mut best[link.dst - npus];
                    if next < (b.ps, b.hops) {
                        *b = Reached {
                            ps: next.0,
                            hops: next.1,
                            via: l as u32,
                            parent,
                        };
                        heap.push(Reverse((next.0, next.1, link.dst)));
                    }
                }
            }
            self.spread_over_equal_parents(src, &mut expanded, &slot);
        }
        let mut order: Vec<usize> = (0..expanded.len()).collect();
        order.sort_unstable_by_key(|&i| expanded[i].0);
        let mut rank = vec![0; order.len()];
        for (to, &from) in order.iter().enumerate() {
            rank[from] = to as u32;
        }
        RouteTree {
            src,
            vertices: order.iter().map(|&i| expanded[i].0).collect(),
            reached: order
                .iter()
                .map(|&i| Reached {
                    parent: rank[expanded[i].1.parent as usize],
                    ..expanded[i].1
                })
                .collect(),
        }
    }

    /// Where a switch of a search from `src` is reached as soon through several vertices
    /// (the spines over a leaf-spine fabric's leaves), its route comes through the
    /// (`src` mod their number)-th of them by id, so the NPUs of a leaf spread over the
    /// spines evenly, as ECMP spreads flows, where all would take the first. Every
    /// candidate was expanded before the switch (its route is shorter), so the routes
    /// stay shortest and acyclic. `slot`: per switch, its index in `expanded`.
    fn spread_over_equal_parents(&self, src: NpuId, expanded: &mut [(u32, Reached)], slot: &[u32]) {
        let npus = self.npus();
        let mut equal: Vec<(u32, u32)> = Vec::new();
        for i in 1..expanded.len() {
            let (v, reached) = (expanded[i].0 as usize, expanded[i].1);
            equal.clear();
            // In-links come by source: the direct one from `src`, then those from switches.
            let links = self.in_links(v);
            let from_switches = links.partition_point(|&l| self.link(l).src < npus);
            let direct = links[..from_switches]
                .iter()
                .copied()
                .filter(|&l| self.link(l).src == src);
            for l in direct.chain(links[from_switches..].iter().copied()) {
                let w = self.link(l).src;
                let j = if w == src { 0 } else { slot[w - npus] };
                if j == u32::MAX {
                    continue;
                }
                let from = expanded[j as usize].1;
                let offer = (from.ps + us_to_ps(self.link(l).latency_us), from.hops + 1);
                if offer == (reached.ps, reached.hops) {
                    equal.push((l as u32, j));
                }
            }
            if equal.len() > 1 {
                let (via, parent) = equal[src % equal.len()];
                expanded[i].1.via = via;
                expanded[i].1.parent = parent;
            }
        }
    }

    /// The links from vertex `v` to switches: the tail of its out-links, which are sorted
    /// by destination, switches numbered after every NPU.
    fn links_to_switches(&self, v: VertexId) -> Range<LinkId> {
        let all = self.out_links(v);
        let first = self.links()[all.clone()].partition_point(|l| l.dst < self.npus());
        all.start + first..all.end
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
        let mut route = Vec::new();
        let found = if self.has_switches() && src < self.npus() && dst < self.npus() {
            self.route_tree(src).links_into(self, dst, &mut route)
        } else {
            Err(None)
        };
        found.map(|()| route).map_err(|too_long| match too_long {
            Some(links) => self.route_too_long(src, dst, links),
            None => Error::Disconnected {
                from: Npus::Npu(src),
                to: Npus::Npu(dst),
            },
        })
    }

    /// The error for a route of `links` links from `src` to `dst` through switches, past
    /// `MAX_ROUTE_LINKS`.
    pub(crate) fn route_too_long(&self, src: NpuId, dst: NpuId, links: usize) -> Error {
        Error::Limit {
            what: "links",
            value: links as u64,
            limit: MAX_ROUTE_LINKS as u64,
            context: format!(
                "the route from {} to {} through switches",
                self.vertex_label(src),
                self.vertex_label(dst)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    /// The search this module's trees replace, kept as the reference: Dijkstra over every
    /// vertex, NPUs other than `src` reached but never expanded, the last link into each
    /// vertex kept, routes walked back from it; then each switch reached as soon from
    /// several vertices (`src` or switches) takes the (`src` mod their number)-th by id.
    fn full_search(topo: &Topology, src: NpuId) -> Vec<Option<LinkId>> {
        let n = topo.vertices();
        let mut best: Vec<(u128, usize)> = vec![(u128::MAX, usize::MAX); n];
        let mut via = vec![None; n];
        if src >= topo.npus() {
            return via;
        }
        best[src] = (0, 0);
        let mut heap = BinaryHeap::from([Reverse((0u128, 0usize, src))]);
        while let Some(Reverse((d, h, u))) = heap.pop() {
            if (d, h) > best[u] || (u != src && !topo.is_switch(u)) {
                continue;
            }
            for l in topo.out_links(u) {
                let link = topo.link(l);
                let next = (d + u128::from(us_to_ps(link.latency_us)), h + 1);
                if next < best[link.dst] {
                    best[link.dst] = next;
                    via[link.dst] = Some(l);
                    heap.push(Reverse((next.0, next.1, link.dst)));
                }
            }
        }
        for v in topo.switches() {
            let mut equal: Vec<(VertexId, LinkId)> = topo
                .in_links(v)
                .iter()
                .map(|&l| (topo.link(l).src, l))
                .filter(|&(w, l)| {
                    (w == src || topo.is_switch(w))
                        && best[w].0 != u128::MAX
                        && (
                            best[w].0 + u128::from(us_to_ps(topo.link(l).latency_us)),
                            best[w].1 + 1,
                        ) == best[v]
                })
                .collect();
            equal.sort_unstable();
            if equal.len() > 1 {
                via[v] = Some(equal[src % equal.len()].1);
            }
        }
        via
    }

    fn walk(
        topo: &Topology,
        src: NpuId,
        via: &[Option<LinkId>],
        dst: VertexId,
    ) -> std::result::Result<Vec<LinkId>, Option<usize>> {
        let mut path = Vec::new();
        let mut at = dst;
        while at != src {
            let l = via.get(at).copied().flatten().ok_or(None)?;
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

    /// Every route from every NPU (and one id past them) to every vertex (and two ids
    /// past them) agrees with the full search, errors included; returns how many routes
    /// there were, so callers can see the comparison was not vacuous.
    fn agrees_with_full_search(topo: &Topology) -> usize {
        let mut routes = 0;
        let mut route = vec![7];
        for src in 0..=topo.npus() {
            let via = full_search(topo, src);
            let tree = topo.route_tree(src);
            for dst in 0..topo.vertices() + 2 {
                let want = walk(topo, src, &via, dst);
                let got = tree
                    .links_into(topo, dst, &mut route)
                    .map(|()| route.clone());
                assert_eq!(got, want, "{}: {src} -> {dst}", topo.name());
                assert_eq!(tree.route_to(topo, dst), want.ok(), "{src} -> {dst}");
                routes += usize::from(got.is_ok());
            }
        }
        routes
    }

    fn spec(s: &str) -> Topology {
        parse_spec(s, &SpecDefaults::default()).unwrap()
    }

    fn link(src: VertexId, dst: VertexId, latency_us: f64) -> Link {
        Link {
            src,
            dst,
            bandwidth_gbps: 100.0,
            latency_us,
        }
    }

    fn names(switches: usize) -> Vec<String> {
        (0..switches).map(|i| format!("s{i}")).collect()
    }

    /// The vertices a route visits, in order.
    fn visits(topo: &Topology, route: &[LinkId]) -> Vec<VertexId> {
        let mut at = vec![topo.link(route[0]).src];
        at.extend(route.iter().map(|&l| topo.link(l).dst));
        at
    }

    #[test]
    fn built_fabrics_route_as_the_full_search() {
        for s in [
            "preset:dgx-h100,nodes=4,spine=2,oversub=2",
            "clos:4x4,spine=2",
            "multi:S8xS4,bw=300:25",
            "rfs:2x4x2,bw=200:100:50",
        ] {
            let topo = spec(s);
            assert!(agrees_with_full_search(&topo) > topo.npus(), "{s}");
            let failed = topo.fail_npus(&[1, topo.npus() - 2]).unwrap();
            assert!(agrees_with_full_search(&failed) > 0, "{s} with failures");
        }
    }

    #[test]
    fn ties_go_to_the_vertex_expanded_first() {
        // NPUs 0..4; switches a = 4, b = 5, c = 6, d = 7, e = 8.
        let (a, b, c, d, e) = (4, 5, 6, 7, 8);
        let links = vec![
            link(0, a, 1.0),
            link(0, b, 0.5),
            link(0, c, 0.0),
            link(a, 1, 1.0),
            link(a, 2, 1.0),
            link(a, 3, 0.0),
            link(b, 2, 1.5),
            link(c, d, 0.0),
            link(d, 0, 1.0),
            link(d, 3, 1.0),
            link(0, e, 1.0),
            link(e, 1, 1.0),
        ];
        let topo = Topology::with_switches("ties", 4, names(5), links).unwrap();
        let tree = topo.route_tree(0);
        let route = |dst| visits(&topo, &tree.route_to(&topo, dst).unwrap());
        // 2 us both ways; a and e both reached at 1 us in one hop, a numbered first.
        assert_eq!(route(1), [0, a, 1]);
        // 2 us both ways; b reached first (0.5 us) though numbered after a.
        assert_eq!(route(2), [0, b, 2]);
        // 1 us both ways; through a in two hops rather than c and d in three.
        assert_eq!(route(3), [0, a, 3]);
        assert_eq!(route(d), [0, c, d]);
        assert_eq!(tree.route_to(&topo, 0), None);
        assert_eq!(tree.route_to(&topo, 9), None);
        assert!(agrees_with_full_search(&topo) > 0);
    }

    #[test]
    fn long_unreachable_and_relayed_routes_match_the_full_search() {
        // NPU 0 to NPU 1 through a chain of MAX_ROUTE_LINKS switches (one link too many);
        // NPU 2 reached only from NPU 1 (NPUs never relay); NPU 3 from the chain's first
        // switch.
        let chain = MAX_ROUTE_LINKS;
        let first = 4;
        let mut links = vec![
            link(0, first, 0.1),
            link(first + chain - 1, 1, 0.1),
            link(1, 2, 0.1),
            link(first, 3, 0.1),
            link(3, first, 0.1),
        ];
        links.extend((first..first + chain - 1).map(|s| link(s, s + 1, 0.1)));
        let topo = Topology::with_switches("chain", 4, names(chain), links).unwrap();
        let tree = topo.route_tree(0);
        let mut route = Vec::new();
        assert_eq!(
            tree.links_into(&topo, 1, &mut route),
            Err(Some(MAX_ROUTE_LINKS + 1))
        );
        assert!(route.is_empty());
        assert_eq!(tree.links_into(&topo, 2, &mut route), Err(None));
        assert_eq!(
            visits(&topo, &tree.route_to(&topo, 3).unwrap()),
            [0, first, 3]
        );
        assert!(matches!(
            topo.try_route(0, 1),
            Err(Error::Limit { value: 17, .. })
        ));
        assert!(matches!(
            topo.try_route(0, 2),
            Err(Error::Disconnected { .. })
        ));
        assert!(agrees_with_full_search(&topo) > 0);
    }

    /// Small fabrics drawn at random, latencies from three values so that many routes
    /// tie, links between NPUs and into the source included.
    #[test]
    fn random_fabrics_route_as_the_full_search() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut draw = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut checked = 0;
        for _ in 0..400 {
            let npus = 2 + draw(5) as usize;
            let switches = 1 + draw(5) as usize;
            let vertices = npus + switches;
            let mut links = Vec::new();
            for u in 0..vertices {
                for v in (0..vertices).filter(|&v| v != u) {
                    if draw(100) < 35 {
                        links.push(link(u, v, [0.0, 0.5, 1.0][draw(3) as usize]));
                    }
                }
            }
            let Ok(topo) = Topology::with_switches("random", npus, names(switches), links) else {
                continue;
            };
            checked += agrees_with_full_search(&topo);
            let failed = topo.fail_npus(&[draw(npus as u64) as usize]);
            if let Ok(failed) = failed {
                agrees_with_full_search(&failed);
            }
        }
        assert!(checked > 1000, "{checked} routes compared");
    }

    /// A tree holds `src` and the switches reachable from it through switches, nothing
    /// more: on a rail cluster, a GPU's NVSwitch, the rails and the spines.
    #[test]
    fn trees_hold_the_switches_reached_only() {
        let topo = spec("preset:dgx-h100,nodes=4,spine=2,oversub=2");
        for src in 0..topo.npus() {
            let mut seen = vec![false; topo.vertices()];
            let mut todo = vec![src];
            seen[src] = true;
            while let Some(u) = todo.pop() {
                for l in topo.out_links(u) {
                    let v = topo.link(l).dst;
                    if topo.is_switch(v) && !seen[v] {
                        seen[v] = true;
                        todo.push(v);
                    }
                }
            }
            let reached = seen.iter().filter(|&&s| s).count();
            assert_eq!(topo.route_tree(src).held(), reached);
            // Its NVSwitch, the 8 rails, the 2 spines.
            assert_eq!(reached, 1 + 1 + 8 + 2);
        }
    }
}
