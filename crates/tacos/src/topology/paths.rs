//! Shortest paths over the whole network (NPUs and switches alike, relays allowed) by a
//! weight per link the caller chooses: what the simulator routes messages on where no
//! route through switches exists, what the latency bound and the NCCL model's hop costs
//! are measured on.

use super::{Link, LinkId, NpuId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Shortest paths from one NPU: the cost to reach each NPU and the last link on the way.
pub(crate) struct ShortestPaths {
    /// `Picos::MAX` where unreachable or farther than the clock reaches.
    pub dist: Vec<Picos>,
    pub via: Vec<Option<LinkId>>,
}

/// Dijkstra from `src` with the given link weights. NPUs at equal distance are settled in
/// id order and a route is only replaced by a strictly shorter one, so where paths tie the
/// one through the lowest-numbered NPU wins and routes are reproducible. Distances are
/// summed exactly (in u128), so a path longer than the clock is still a path, never a
/// false "unreachable".
pub(crate) fn shortest_paths(
    topo: &Topology,
    src: NpuId,
    weight: impl Fn(&Link) -> Picos,
) -> ShortestPaths {
    let mut dist = vec![u128::MAX; topo.vertices()];
    let mut via = vec![None; topo.vertices()];
    let mut heap = BinaryHeap::from([Reverse((0u128, src))]);
    dist[src] = 0;
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for l in topo.out_links(u) {
            let link = topo.link(l);
            let nd = d + u128::from(weight(link));
            if nd < dist[link.dst] {
                dist[link.dst] = nd;
                via[link.dst] = Some(l);
                heap.push(Reverse((nd, link.dst)));
            }
        }
    }
    let dist = dist
        .into_iter()
        .map(|d| Picos::try_from(d).unwrap_or(Picos::MAX))
        .collect();
    ShortestPaths { dist, via }
}
