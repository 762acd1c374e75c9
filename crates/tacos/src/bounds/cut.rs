//! The cut bound (ForestColl's): an All-Gather cannot beat, for any set S of vertices that
//! leaves out some NPU t, the time to push the data of the NPUs in S out of S:
//! `unit x |S ∩ sources| / B+(S)`, B+(S) being the bandwidth of the links leaving S.
//!
//! The largest such ratio is found exactly with max-flow: for a rate x per source, every
//! cut leaving out t has capacity at least `x x |sources|` iff the max flow from a super
//! source (an edge of capacity x to each source other than t) to t reaches `x x (sources
//! other than t)`. Starting from the best single-NPU cut, each failed check yields a cut
//! with a smaller ratio (Dinkelbach's method), so few rounds are needed. Every ratio used
//! is that of a real cut, so the bound is valid whatever the max-flow's rounding; checking
//! only some sinks (on large topologies, to keep to a work budget) can only make it
//! weaker, never wrong.

use super::maxflow::FlowNetwork;
use crate::topology::{NpuId, Topology};
use rayon::prelude::*;

/// Max-flow work allowed, in NPUs x links per sink checked: every sink of a topology of
/// a few hundred NPUs, a sample on larger ones (4 on a 32x32 mesh, 4 ms; all of its
/// 1,024 would take 0.7 s on two cores), marked approximate. The bound is printed beside
/// every synthesis and computed for every compiled collective, so its cost is part of
/// what a user waits for.
const WORK_BUDGET: usize = 20_000_000;
/// Sinks checked however large the topology: the least-fed one and one more.
const MIN_SINKS: usize = 2;

/// A cut's bandwidth per unit of data that must cross it, in GB/s: per source for
/// `min_cut_ratio` (the smallest `B+(S) / |S ∩ sources|` over vertex sets S that contain a
/// source and leave out one of `sinks`), per pair for `all_to_all_cut_ratio`, the cut's
/// whole bandwidth for `min_cut_gbps`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CutRatio {
    pub gbps_per_source: f64,
    /// Whether every sink was checked (otherwise the ratio may be higher than the true
    /// minimum, which makes the time bound lower: weaker, still valid).
    pub exact: bool,
}

/// Finds the tightest cut ratio; `None` when no sink misses a source (nothing to move).
pub(super) fn min_cut_ratio(
    topo: &Topology,
    sources: &[NpuId],
    sinks: &[NpuId],
) -> Option<CutRatio> {
    let is_source = membership(topo.vertices(), sources);
    let others = |t: NpuId| sources.len() - usize::from(is_source[t]);
    // Start from the cuts that leave out only one sink: its incoming bandwidth.
    let mut ratio = f64::INFINITY;
    for &t in sinks {
        if others(t) > 0 {
            let inbound: f64 = topo
                .in_links(t)
                .iter()
                .map(|&l| topo.link(l).bandwidth_gbps)
                .sum();
            ratio = ratio.min(inbound / others(t) as f64);
        }
    }
    if !ratio.is_finite() {
        return None;
    }
    let checked = sample(topo, sinks);
    let exact = checked.len() == sinks.len();
    let scale = capacity_scale(topo);
    // Each sink on its own (the caller's pool), from the single-NPU cuts' ratio: the least
    // of their results does not depend on the order or the number of threads.
    let best = checked
        .into_par_iter()
        .filter(|&t| others(t) > 0)
        .map(|t| {
            // Dinkelbach: while some cut leaving out t beats the current ratio, take it.
            let mut ratio = ratio;
            while let Some(better) = violated_cut(topo, sources, t, ratio, scale) {
                ratio = better;
            }
            ratio
        })
        .reduce(|| ratio, f64::min);
    Some(CutRatio {
        gbps_per_source: best,
        exact,
    })
}

/// The sinks to check: all of them within the work budget, otherwise the half of the
/// allowance with the least incoming bandwidth (where tight cuts are most likely) plus an
/// even spread of the rest.
fn sample(topo: &Topology, sinks: &[NpuId]) -> Vec<NpuId> {
    let per_sink = (topo.vertices() * topo.links().len()).max(1);
    let allowed = (WORK_BUDGET / per_sink).max(MIN_SINKS);
    if sinks.len() <= allowed {
        return sinks.to_vec();
    }
    let inbound = |t: NpuId| -> f64 {
        topo.in_links(t)
            .iter()
            .map(|&l| topo.link(l).bandwidth_gbps)
            .sum()
    };
    let mut by_inbound = sinks.to_vec();
    by_inbound.sort_by(|&a, &b| inbound(a).total_cmp(&inbound(b)).then(a.cmp(&b)));
    let mut chosen: Vec<NpuId> = by_inbound[..allowed / 2].to_vec();
    let step = sinks.len().div_ceil(allowed / 2);
    chosen.extend(sinks.iter().step_by(step.max(1)).copied());
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

/// Integer capacities for the max-flow: bandwidths scaled so the largest is 2^30.
fn capacity_scale(topo: &Topology) -> f64 {
    let max = topo
        .links()
        .iter()
        .map(|l| l.bandwidth_gbps)
        .fold(0.0, f64::max);
    if max > 0.0 {
        (1u64 << 30) as f64 / max
    } else {
        1.0
    }
}

/// A cut leaving out `t` whose ratio is below `ratio`, if the max-flow finds one.
fn violated_cut(
    topo: &Topology,
    sources: &[NpuId],
    t: NpuId,
    ratio: f64,
    scale: f64,
) -> Option<f64> {
    let super_source = topo.vertices();
    let per_source = (ratio * scale).round() as i64;
    let fed: Vec<NpuId> = sources.iter().copied().filter(|&u| u != t).collect();
    let demand = per_source * fed.len() as i64;
    let mut net = FlowNetwork::new(
        topo.vertices() + 1,
        scaled_links(topo, scale).chain(fed.iter().map(|&u| (super_source, u, per_source))),
    );
    let flow = net.max_flow(super_source, t);
    // Rounding costs at most one unit per edge; a shortfall within that is no cut.
    let slack = (topo.links().len() + sources.len()) as i64;
    if flow + slack >= demand {
        return None;
    }
    let in_s = net.source_side(super_source);
    let members = sources.iter().filter(|&&u| in_s[u]).count();
    let found = leaving_gbps(topo, &in_s) / members.max(1) as f64;
    (members > 0 && found < ratio * (1.0 - 1e-12)).then_some(found)
}

/// The smallest bandwidth leaving a vertex set that holds some of `npus` and misses
/// another: every such set holds `npus[0]` and misses some t, or the other way round, so
/// max-flows from `npus[0]` to each t on `topo` and on its reverse find it (the caller
/// passes both). Each value is that of a real cut, so max-flow rounding cannot make it
/// too small; `None` for fewer than two NPUs.
pub(super) fn min_cut_gbps(topo: &Topology, npus: &[NpuId]) -> Option<CutRatio> {
    let (&s, rest) = npus.split_first()?;
    let checked = sample(topo, rest);
    let exact = checked.len() == rest.len();
    let scale = capacity_scale(topo);
    let best = checked
        .into_par_iter()
        .map(|t| {
            let mut net = FlowNetwork::new(topo.vertices(), scaled_links(topo, scale));
            net.max_flow(s, t);
            let in_s = net.source_side(s);
            leaving_gbps(topo, &in_s)
        })
        .reduce(|| f64::INFINITY, f64::min);
    best.is_finite().then_some(CutRatio {
        gbps_per_source: best,
        exact,
    })
}

/// The smallest `min(B+(X), B-(X)) / (|X ∩ npus| x |npus outside X|)` over candidate
/// sets X: balls of growing hop radius around each NPU (around as many as the work budget
/// allows) and prefixes of the NPUs in id order (rows, planes of meshes and tori). What
/// X's NPUs send to the others must leave X, and what they receive must enter it, so
/// every candidate gives a valid ratio; the smallest of all sets is not searched for
/// (that is the sparsest-cut problem), hence never exact.
pub(super) fn all_to_all_cut_ratio(topo: &Topology, npus: &[NpuId]) -> Option<CutRatio> {
    if npus.len() < 2 {
        return None;
    }
    let is_member = membership(topo.vertices(), npus);
    let per_order = topo.vertices() + topo.links().len();
    let balls = (WORK_BUDGET / per_order.max(1))
        .max(MIN_SINKS)
        .min(npus.len());
    let mut orders: Vec<Vec<NpuId>> = vec![with_switches(topo, (0..topo.npus()).collect())];
    for &centre in npus.iter().step_by(npus.len().div_ceil(balls)) {
        let hops = topo.hops_from(centre);
        let mut order: Vec<NpuId> = (0..topo.npus()).collect();
        order.sort_by_key(|&v| (hops[v], v));
        orders.push(with_switches(topo, order));
    }
    let mut best: Option<(f64, Vec<bool>)> = None;
    for order in &orders {
        if let Some((ratio, prefix)) = best_prefix(topo, &is_member, npus.len(), order) {
            if best.as_ref().map_or(true, |(b, _)| ratio < *b) {
                let mut inside = vec![false; topo.vertices()];
                for &v in &order[..prefix] {
                    inside[v] = true;
                }
                best = Some((ratio, inside));
            }
        }
    }
    // Recomputed from scratch, so the running sums' rounding cannot loosen the bound.
    let (_, inside) = best?;
    let members = npus.iter().filter(|&&u| inside[u]).count();
    let pairs = (members * (npus.len() - members)) as f64;
    let outside: Vec<bool> = inside.iter().map(|&x| !x).collect();
    let bandwidth = leaving_gbps(topo, &inside).min(leaving_gbps(topo, &outside));
    Some(CutRatio {
        gbps_per_source: bandwidth / pairs,
        exact: false,
    })
}

/// `npu_order` (every NPU) with each switch placed right after the last of its NPU
/// neighbours, and switches with none at the end: so a prefix that holds a node's NPUs
/// holds the node's own switch too (whose links into the node would otherwise count as
/// leaving the set), and a switch shared with NPUs outside stays out.
fn with_switches(topo: &Topology, npu_order: Vec<NpuId>) -> Vec<NpuId> {
    let mut position = vec![0; topo.npus()];
    for (i, &v) in npu_order.iter().enumerate() {
        position[v] = i;
    }
    let mut after: Vec<(usize, usize)> = topo
        .switches()
        .map(|w| {
            let npus = topo.out_links(w).map(|l| topo.link(l).dst);
            let last = npus
                .chain(topo.in_links(w).iter().map(|&l| topo.link(l).src))
                .filter(|&v| v < topo.npus())
                .map(|v| position[v])
                .max()
                .unwrap_or(usize::MAX);
            (last, w)
        })
        .collect();
    after.sort_unstable();
    let mut order = Vec::with_capacity(topo.vertices());
    let mut next = after.iter().peekable();
    for (i, v) in npu_order.into_iter().enumerate() {
        order.push(v);
        while let Some(&(_, w)) = next.next_if(|&&(last, _)| last == i) {
            order.push(w);
        }
    }
    order.extend(next.map(|&(_, w)| w));
    order
}

/// The prefix of `order` with the smallest All-to-All cut ratio: (ratio, prefix length).
fn best_prefix(
    topo: &Topology,
    is_member: &[bool],
    members: usize,
    order: &[NpuId],
) -> Option<(f64, usize)> {
    let mut inside = vec![false; topo.vertices()];
    let (mut leaving, mut entering, mut count) = (0.0f64, 0.0f64, 0usize);
    let mut best: Option<(f64, usize)> = None;
    for (i, &v) in order.iter().enumerate() {
        inside[v] = true;
        count += usize::from(is_member[v]);
        for l in &topo.links()[topo.out_links(v)] {
            if inside[l.dst] {
                entering -= l.bandwidth_gbps;
            } else {
                leaving += l.bandwidth_gbps;
            }
        }
        for &id in topo.in_links(v) {
            let l = topo.link(id);
            if inside[l.src] {
                leaving -= l.bandwidth_gbps;
            } else {
                entering += l.bandwidth_gbps;
            }
        }
        if count == 0 || count == members {
            continue;
        }
        let ratio = leaving.min(entering).max(0.0) / (count * (members - count)) as f64;
        if best.map_or(true, |(b, _)| ratio < b) {
            best = Some((ratio, i + 1));
        }
    }
    best
}

/// The topology's links as max-flow edges, bandwidths scaled to integers.
fn scaled_links(topo: &Topology, scale: f64) -> impl Iterator<Item = (usize, usize, i64)> + '_ {
    topo.links()
        .iter()
        .map(move |l| (l.src, l.dst, (l.bandwidth_gbps * scale).round() as i64))
}

/// The bandwidth of the links leaving the set `inside` (indexed by NPU; longer is fine).
fn leaving_gbps(topo: &Topology, inside: &[bool]) -> f64 {
    topo.links()
        .iter()
        .filter(|l| inside[l.src] && !inside[l.dst])
        .map(|l| l.bandwidth_gbps)
        .sum()
}

fn membership(n: usize, npus: &[NpuId]) -> Vec<bool> {
    let mut v = vec![false; n];
    for &u in npus {
        v[u] = true;
    }
    v
}
