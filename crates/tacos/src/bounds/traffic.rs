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
//!
//! The counts hold for groups too (`grouped`): merge each group of NPUs into one, and any
//! All-Reduce becomes one among the G groups, whose bytes each take 2(G-1) messages
//! between groups, and an All-to-All's pieces cross as many groups as separate their
//! ends, each message leaving its group over a link out of it. Groups joined by fast links
//! and parted by slow ones (a dragonfly's, a cluster's nodes, the rings of a ring crossed
//! with faster dimensions) make the links between them the bottleneck that the per-NPU
//! count spreads over every link.

use crate::collective::{Collective, CollectiveKind};
use crate::topology::{NpuId, Topology};
use std::collections::VecDeque;

/// The fewest NPU-to-NPU messages of the collective's chunks, in chunks.
pub(super) fn least_crossings(topo: &Topology, collective: &Collective) -> f64 {
    let mut from_holders = HopCache::new(topo);
    let reversed = topo.reversed();
    let mut to_receiver = HopCache::new(&reversed);
    let outsiders_link = outsiders_have_links(topo, collective.npus());
    // No two NPUs are more messages apart than this, so a chunk with at least this many
    // NPUs to reach (or to hear from) needs exactly one message each, and no search.
    let farthest_possible = hop_diameter_at_most(topo, &reversed, collective.npus());
    let mut total = 0usize;
    // Chunks come in runs with the very same conditions (every chunk of an All-Reduce: the
    // spec's NPUs twice); a run's crossings are counted once.
    let mut last: Option<(&[NpuId], &[NpuId], usize)> = None;
    for c in 0..collective.chunk_count() {
        let (pre, post) = (collective.pre(c), collective.post(c));
        if let Some((p, q, crossings)) = last {
            if std::ptr::eq(p, pre) && std::ptr::eq(q, post) {
                total += crossings;
                continue;
            }
        }
        let crossings = if !collective.combining() {
            let needers: Vec<NpuId> = post.iter().copied().filter(|v| !pre.contains(v)).collect();
            if needers.len() >= farthest_possible {
                needers.len()
            } else {
                farthest_or_count(from_holders.hops(pre), &needers)
            }
        } else if let [receiver] = post[..] {
            let contributors: Vec<NpuId> = pre.iter().copied().filter(|&u| u != receiver).collect();
            if contributors.len() >= farthest_possible {
                contributors.len()
            } else {
                farthest_or_count(to_receiver.hops(&[receiver]), &contributors)
            }
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
        total += crossings;
        last = Some((pre, post, crossings));
    }
    total as f64
}

/// An upper bound on the messages between any two of `npus`: through the first of them,
/// the farthest that reaches it plus the farthest it reaches (`usize::MAX` where one of
/// them cannot reach it or be reached).
fn hop_diameter_at_most(topo: &Topology, reversed: &Topology, npus: &[NpuId]) -> usize {
    let Some(&hub) = npus.first() else {
        return usize::MAX;
    };
    let farthest = |graph: &Topology| {
        let mut cache = HopCache::new(graph);
        let hops = cache.hops(&[hub]);
        npus.iter().map(|&v| hops[v]).max().unwrap_or(usize::MAX)
    };
    farthest(topo).saturating_add(farthest(reversed))
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

/// Over the partitions of the vertices into the parts that links of at least some
/// bandwidth join (one partition per distinct bandwidth): the largest volume of messages
/// between the parts that hold NPUs, in buffers, over the bandwidth of the links leaving
/// those parts (GB/s). A message between two of them leaves the part it starts in over one
/// of those links (switches only forward), and leaves a part at every part it crosses.
/// All-Reduce: merged, the G parts' gossip takes 2(G-1) messages of each byte. All-to-All:
/// each NPU's piece for another crosses as many parts as the fewest parts a path from its
/// part to the other's leaves. None for other collectives (the cut bound says as much for
/// them), for an All-Reduce where an NPU outside could combine on the way, and where no
/// partition has two parts with NPUs that no reducing switch joins.
pub(super) fn grouped(topo: &Topology, collective: &Collective) -> Option<f64> {
    let kind = collective.kind();
    let npus = collective.npus();
    match kind {
        CollectiveKind::AllReduce if !outsiders_have_links(topo, npus) => {}
        CollectiveKind::AllToAll => {}
        _ => return None,
    }
    let mut thresholds: Vec<f64> = topo.links().iter().map(|l| l.bandwidth_gbps).collect();
    thresholds.sort_by(f64::total_cmp);
    thresholds.dedup();
    let mut best: Option<f64> = None;
    for &threshold in &thresholds {
        let part = parts(topo, threshold);
        let mut has_npu = vec![false; topo.vertices()];
        for &u in npus {
            has_npu[part[u]] = true;
        }
        let groups = has_npu.iter().filter(|&&h| h).count();
        if groups < 2 || reduces_across(topo, &part) {
            continue;
        }
        // Every message starts in a part with NPUs (a part of switches alone, a rail's,
        // only forwards) and leaves it.
        let leaving: f64 = topo
            .links()
            .iter()
            .filter(|l| has_npu[part[l.src]] && part[l.src] != part[l.dst])
            .map(|l| l.bandwidth_gbps)
            .sum();
        let buffers = match kind {
            CollectiveKind::AllToAll => pieces_crossing(topo, &part, &has_npu, npus),
            _ => 2.0 * (groups - 1) as f64,
        };
        if leaving > 0.0 && buffers > 0.0 {
            let ratio = buffers / leaving;
            best = Some(best.map_or(ratio, |b: f64| b.max(ratio)));
        }
    }
    best
}

/// Whether a switch that reduces (`Topology::reduces`) links parts of `part`: its sums
/// and multicasts would then join them, where inside one part they are what merging it
/// allows anyway.
fn reduces_across(topo: &Topology, part: &[usize]) -> bool {
    topo.reducing_switches().iter().any(|&s| {
        let out = topo.out_links(s).map(|l| topo.link(l).dst);
        let into = topo.in_links(s).iter().map(|&l| topo.link(l).src);
        out.chain(into).any(|v| part[v] != part[s])
    })
}

/// All-to-All: the parts (of `part`, those with NPUs: `has_npu`) each NPU's piece for
/// every other must leave, summed, in buffers (each piece 1/P of one): from each part
/// with NPUs, a search over parts in which leaving a part with NPUs costs one.
fn pieces_crossing(topo: &Topology, part: &[usize], has_npu: &[bool], npus: &[NpuId]) -> f64 {
    let vertices = topo.vertices();
    let mut per_part = vec![0usize; vertices];
    for &u in npus {
        per_part[part[u]] += 1;
    }
    // The parts' links, once per pair of parts that a link joins.
    let mut joins: Vec<Vec<usize>> = vec![Vec::new(); vertices];
    for l in topo.links() {
        let (a, b) = (part[l.src], part[l.dst]);
        if a != b && !joins[a].contains(&b) {
            joins[a].push(b);
        }
    }
    let mut crossings = 0usize;
    for from in (0..vertices).filter(|&p| has_npu[p] && per_part[p] > 0) {
        let mut dist = vec![usize::MAX; vertices];
        dist[from] = 0;
        let mut queue = VecDeque::from([from]);
        while let Some(a) = queue.pop_front() {
            let step = usize::from(has_npu[a]);
            for &b in &joins[a] {
                let d = dist[a] + step;
                if d < dist[b] {
                    dist[b] = d;
                    if step == 0 {
                        queue.push_front(b);
                    } else {
                        queue.push_back(b);
                    }
                }
            }
        }
        for to in (0..vertices).filter(|&p| p != from && per_part[p] > 0) {
            if dist[to] != usize::MAX {
                crossings += per_part[from] * per_part[to] * dist[to];
            }
        }
    }
    crossings as f64 / npus.len() as f64
}

/// Per vertex, the part it is in: the parts are what links of at least `threshold` GB/s
/// join (either way), numbered by their least vertex.
fn parts(topo: &Topology, threshold: f64) -> Vec<usize> {
    let mut part = vec![usize::MAX; topo.vertices()];
    for start in 0..topo.vertices() {
        if part[start] != usize::MAX {
            continue;
        }
        part[start] = start;
        let mut stack = vec![start];
        while let Some(u) = stack.pop() {
            let out = topo.out_links(u).map(|l| topo.link(l));
            let into = topo.in_links(u).iter().map(|&l| topo.link(l));
            for l in out.chain(into) {
                if l.bandwidth_gbps < threshold {
                    continue;
                }
                let v = if l.src == u { l.dst } else { l.src };
                if part[v] == usize::MAX {
                    part[v] = start;
                    stack.push(v);
                }
            }
        }
    }
    part
}
