//! The traffic bound's count: the fewest NPU-to-NPU messages, summed over chunks, that
//! any algorithm makes (a chunk split over several paths makes them per byte). Each leaves
//! an NPU over one of its outgoing links and enters one over an incoming link; a message
//! through switches is one message (switches forward, never hold or combine), so hops are
//! counted between NPUs, a link into a switch counting none. Without switches a message is
//! a link crossing.
//!
//! A copied chunk must enter every NPU that lacks it (one crossing each) and travel from
//! its nearest holder to the farthest of them (one per hop). A chunk summed into one NPU
//! must leave every other contributor and travel from the farthest one. A chunk every NPU
//! sums and ends with (All-Reduce) is a one-way gossip: 2(P-1) messages at least; when an
//! NPU outside the collective could combine on the way, only that each takes part in one
//! sent and one received message is sure, P crossings.

use crate::collective::Collective;
use crate::topology::{NpuId, Topology};
use std::collections::VecDeque;

/// The fewest NPU-to-NPU messages of the collective's chunks, in chunks.
pub(super) fn least_crossings(topo: &Topology, collective: &Collective) -> f64 {
    let mut from_holders = HopCache::new(topo);
    let reversed = topo.reversed();
    let mut to_receiver = HopCache::new(&reversed);
    let outsiders_link = outsiders_have_links(topo, collective.npus());
    let mut total = 0usize;
    for c in 0..collective.chunk_count() {
        let (pre, post) = (collective.pre(c), collective.post(c));
        total += if !collective.combining() {
            let needers: Vec<NpuId> = post.iter().copied().filter(|v| !pre.contains(v)).collect();
            farthest_or_count(from_holders.hops(pre), &needers)
        } else if let [receiver] = post[..] {
            let contributors: Vec<NpuId> = pre.iter().copied().filter(|&u| u != receiver).collect();
            farthest_or_count(to_receiver.hops(&[receiver]), &contributors)
        } else {
            let mut everyone = pre.to_vec();
            everyone.extend(post);
            everyone.sort_unstable();
            everyone.dedup();
            match everyone.len() {
                0 | 1 => 0,
                p if outsiders_link => pre.len().max(post.len()).min(p),
                p => 2 * (p - 1),
            }
        };
    }
    total as f64
}

/// max(how many NPUs, the farthest one's hops); unreachable ones count one hop.
fn farthest_or_count(hops: &[usize], npus: &[NpuId]) -> usize {
    let farthest = npus
        .iter()
        .map(|&v| if hops[v] == usize::MAX { 1 } else { hops[v] })
        .max()
        .unwrap_or(0);
    farthest.max(npus.len())
}

/// Whether an NPU outside `npus` has a link, so it could relay and combine (a switch
/// forwards but never combines, so it counts as inside).
fn outsiders_have_links(topo: &Topology, npus: &[NpuId]) -> bool {
    let mut inside = vec![false; topo.vertices()];
    for &u in npus {
        inside[u] = true;
    }
    for s in topo.switches() {
        inside[s] = true;
    }
    topo.links()
        .iter()
        .any(|l| !inside[l.src] || !inside[l.dst])
}

/// Hop counts from a set of NPUs, kept for the next chunk: chunks come in runs with the
/// same holders (or receiver), so each set is searched about once, and only one set's
/// counts are held at a time.
struct HopCache<'a> {
    topo: &'a Topology,
    last: Option<(Vec<NpuId>, Vec<usize>)>,
}

impl<'a> HopCache<'a> {
    fn new(topo: &'a Topology) -> HopCache<'a> {
        HopCache { topo, last: None }
    }

    /// Messages from the nearest of `sources` to every vertex (`usize::MAX` where
    /// unreachable): a breadth-first search in which a link into a switch costs nothing.
    fn hops(&mut self, sources: &[NpuId]) -> &[usize] {
        let topo = self.topo;
        if self.last.as_ref().map_or(true, |(s, _)| s != sources) {
            let mut dist = vec![usize::MAX; topo.vertices()];
            let mut queue: VecDeque<NpuId> = sources.iter().copied().collect();
            for &s in sources {
                dist[s] = 0;
            }
            while let Some(u) = queue.pop_front() {
                for l in &topo.links()[topo.out_links(u)] {
                    let free = topo.is_switch(l.dst);
                    let d = dist[u] + usize::from(!free);
                    if d < dist[l.dst] {
                        dist[l.dst] = d;
                        if free {
                            queue.push_front(l.dst);
                        } else {
                            queue.push_back(l.dst);
                        }
                    }
                }
            }
            self.last = Some((sources.to_vec(), dist));
        }
        self.last.as_ref().map_or(&[], |(_, d)| d)
    }
}
