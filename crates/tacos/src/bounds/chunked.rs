//! The latency-aware bound of schedules that move whole chunks (`chunked_bound_ps`).

use super::{needed_chunks, owed_chunks};
use crate::collective::Collective;
use crate::topology::{Link, LinkId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The latency-aware bound of schedules that move whole chunks: every transfer carries
/// one chunk of `collective` (K chunks per NPU, as it is split), over one link or a route
/// through switches, which holds each of its links throughout, paying the summed alpha
/// and the chunk's beta at the narrowest bandwidth, and a link carries one transfer at a
/// time. Every synthesized schedule is one (the checker enforces the last two), so none
/// beats this bound; an algorithm that sends several chunks for one alpha may.
///
/// Why it holds: an NPU that lacks n chunks (takes in contributions from others, for
/// combining collectives) receives each by at least one transfer of its own, since a
/// transfer carries one chunk. A transfer into it holds one of its incoming links l for at
/// least d_l (`least_transfer`): l's own time when l comes from an NPU; through a switch,
/// the route's whole latency, at least the least latency from any NPU to the switch plus
/// l's, and the chunk at no more than l's bandwidth. So by time T link l has delivered at
/// most floor(T / d_l) chunks, and T must satisfy sum_l floor(T / d_l) >= n. Likewise for
/// the chunks only the NPU holds, over its outgoing links. The bound is the least such T,
/// over NPUs and both directions.
///
/// On a mesh's corner NPU (two links in, N - 1 chunks lacking) it is ceil((N - 1) / 2) x
/// (alpha + chunk / B), where the ingress bound counts only the bytes: on a 100x100 mesh
/// at 1 GiB, 13.2 ms against 10.7 ms. Through switches it counts both hops' latency: on
/// a cluster of 8-GPU NVSwitch nodes on rails, a GPU takes in most chunks through its
/// NVSwitch port at 0.7 us each, which at thousands of GPUs outweighs the bytes.
///
/// The floor makes it a bound at this K only: with 4 NPUs on a ring and K = 1 it is
/// 2 (alpha + c), yet K = 2 may take 3 (alpha + c / 2), less when alpha < c / 2. A caller
/// that needs one figure for several K takes the bound at each; it grows with K, which
/// makes it a quick test of whether more chunks per NPU could beat a time already found.
pub fn chunked_bound_ps(topo: &Topology, collective: &Collective) -> Picos {
    let bytes = collective.chunk_bytes();
    let needed = needed_chunks(topo, collective);
    let owed = owed_chunks(topo, collective);
    let reach = SwitchReach::new(topo);
    let costs = |links: &mut dyn Iterator<Item = LinkId>| -> Vec<Picos> {
        links
            .filter_map(|l| reach.least_transfer_ps(topo, l, bytes))
            .collect()
    };
    (0..topo.npus())
        .map(|npu| {
            let into = costs(&mut topo.in_links(npu).iter().copied());
            let out_of = costs(&mut topo.out_links(npu));
            least_time_for(needed[npu], &into).max(least_time_for(owed[npu], &out_of))
        })
        .max()
        .unwrap_or(0)
}

/// Per vertex, the least summed latency (microseconds) of a path through switches only
/// from some NPU to it (`to`) and from it to some NPU (`from`): 0 at NPUs, infinite at
/// switches no NPU reaches (or that reach none).
struct SwitchReach {
    to: Vec<f64>,
    from: Vec<f64>,
}

impl SwitchReach {
    fn new(topo: &Topology) -> SwitchReach {
        SwitchReach {
            to: least_latency(topo, Direction::AwayFromNpus),
            from: least_latency(topo, Direction::TowardNpus),
        }
    }

    /// The least time a transfer of `bytes` over link `l` can hold it (see
    /// `chunked_bound_ps`); None when no route between NPUs crosses it. Through a switch
    /// the latencies are summed in another order than along the route, so the figure is
    /// taken a picosecond lower, lest rounding put it above the route's own.
    fn least_transfer_ps(&self, topo: &Topology, l: LinkId, bytes: f64) -> Option<Picos> {
        let link = topo.link(l);
        let (before, after) = (self.to[link.src], self.from[link.dst]);
        if !(before.is_finite() && after.is_finite()) {
            return None;
        }
        let through_switch = topo.is_switch(link.src) || topo.is_switch(link.dst);
        let least = Link {
            latency_us: before + link.latency_us + after,
            ..*link
        };
        let ps = least.transfer_ps(bytes);
        Some(if through_switch { ps - 1 } else { ps }.max(1))
    }
}

/// The least T with sum over `costs` of floor(T / cost) >= `count`: the time links of
/// these per-transfer costs need to carry `count` transfers; 0 without links (nothing
/// can be carried: the collective cannot be synthesized at all).
fn least_time_for(count: usize, costs: &[Picos]) -> Picos {
    let Some(&slowest) = costs.iter().max() else {
        return 0;
    };
    let carried = |t: u128| -> u128 { costs.iter().map(|&d| t / d as u128).sum() };
    // At T = count x slowest every link alone carries count / (its share): enough.
    let (mut lo, mut hi) = (0u128, count as u128 * slowest as u128);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if carried(mid) >= count as u128 {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Picos::try_from(lo).unwrap_or(Picos::MAX)
}

/// Which way `least_latency` measures paths.
#[derive(Clone, Copy, PartialEq)]
enum Direction {
    /// From an NPU to the vertex.
    AwayFromNpus,
    /// From the vertex to an NPU.
    TowardNpus,
}

/// Per vertex, the least summed latency of a path between it and the nearest NPU, in
/// `direction`, through switches only: every NPU starts at 0, so no path runs through one.
fn least_latency(topo: &Topology, direction: Direction) -> Vec<f64> {
    let mut dist = vec![f64::INFINITY; topo.vertices()];
    dist[..topo.npus()].fill(0.0);
    let mut heap: BinaryHeap<_> = (0..topo.npus()).map(|npu| Reverse((0u64, npu))).collect();
    let mut step = Vec::new();
    // Sums of latencies >= 0 from 0.0 are never -0.0, so their bits order as they do.
    while let Some(Reverse((bits, u))) = heap.pop() {
        let d = f64::from_bits(bits);
        if d > dist[u] {
            continue;
        }
        step.clear();
        match direction {
            Direction::AwayFromNpus => {
                step.extend(topo.out_links(u).map(|l| (l, topo.link(l).dst)))
            }
            Direction::TowardNpus => {
                step.extend(topo.in_links(u).iter().map(|&l| (l, topo.link(l).src)))
            }
        }
        for &(l, v) in &step {
            let next = d + topo.link(l).latency_us;
            if next < dist[v] {
                dist[v] = next;
                heap.push(Reverse((next.to_bits(), v)));
            }
        }
    }
    dist
}
