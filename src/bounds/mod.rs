//! Lower bounds on collective time, to say how close an algorithm is to the physical limit.
//!
//! Every bound below holds for any algorithm in the alpha-beta model, however it chunks
//! the data, except `ideal`, which is the TACOS paper's reference formula:
//!
//! | bound | what it says | kinds |
//! | --- | --- | --- |
//! | ingress | an NPU must take in the data it lacks over its incoming links | all |
//! | egress | an NPU must send out the data only it holds over its outgoing links | all |
//! | latency | the first byte of a needed piece crosses at least the alpha-shortest path | all |
//! | cut | ForestColl's max over cuts, with max-flow (see `cut`) | allgather, reducescatter, allreduce, broadcast, reduce, gather, scatter |
//! | ideal | size x busbw factor / smallest NPU bandwidth + alpha diameter (the paper's) | all |
//!
//! Ingress and egress count chunk-sized pieces of the collective: for copying collectives an
//! NPU needs every chunk it lacks; for combining ones it needs one chunk's worth for every
//! chunk it must end with that others contribute to, and must send one chunk's worth for
//! every chunk it contributes to that others must end with. The cut bound for
//! Reduce-Scatter, Reduce and Scatter is that of their dual (All-Gather, Broadcast, Gather)
//! on the reversed topology; All-Reduce is at least an All-Gather and a Reduce-Scatter (any
//! All-Reduce performs either when the other inputs are zero). All-to-All has no cut bound
//! here. `efficiency = best bound / time`, the best bound being the largest of the valid ones.

mod cut;

use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::sim::bus_factor;
use crate::sim::route::shortest_paths;
use crate::topology::{NpuId, Topology};
use crate::units::{us_to_ps, Picos};
use serde::Serialize;

/// The cut bound and whether it was computed exactly.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CutBound {
    pub time_ps: Picos,
    /// False on huge topologies where only some sinks were checked (still a valid bound).
    pub exact: bool,
}

/// Every bound for one collective on one topology.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bounds {
    pub ingress_ps: Picos,
    pub egress_ps: Picos,
    pub latency_ps: Picos,
    /// None for All-to-All.
    pub cut: Option<CutBound>,
    /// The paper's Ideal: a reference figure, not a proven bound.
    pub ideal_ps: Picos,
}

impl Bounds {
    /// Computes every bound.
    pub fn new(topo: &Topology, collective: &Collective) -> Bounds {
        let (latency_ps, diameter_ps) = latency_bounds(topo, collective);
        let cut = CutParts::new(topo, collective);
        Bounds::assemble(topo, collective, latency_ps, diameter_ps, cut.as_ref())
    }

    /// `Bounds::new` for `collective` resized to each of `sizes` (bytes), with the work
    /// that does not depend on the size (the cut's max-flows, shortest paths) done once.
    pub fn for_sizes(
        topo: &Topology,
        collective: &Collective,
        sizes: &[u64],
    ) -> Result<Vec<Bounds>> {
        let (latency_ps, diameter_ps) = latency_bounds(topo, collective);
        let cut = CutParts::new(topo, collective);
        sizes
            .iter()
            .map(|&size_bytes| {
                let spec = CollectiveSpec {
                    size_bytes,
                    ..collective.spec().clone()
                };
                let resized = Collective::new(topo, spec)?;
                Ok(Bounds::assemble(
                    topo,
                    &resized,
                    latency_ps,
                    diameter_ps,
                    cut.as_ref(),
                ))
            })
            .collect()
    }

    fn assemble(
        topo: &Topology,
        collective: &Collective,
        latency_ps: Picos,
        diameter_ps: Picos,
        cut: Option<&CutParts>,
    ) -> Bounds {
        Bounds {
            ingress_ps: ingress_bound_ps(topo, collective),
            egress_ps: egress_bound_ps(topo, collective),
            latency_ps,
            cut: cut.and_then(|c| c.bound(collective)),
            ideal_ps: ideal_ps(topo, collective, diameter_ps),
        }
    }

    /// The largest valid lower bound (Ideal left out).
    pub fn best_ps(&self) -> Picos {
        let cut = self.cut.map_or(0, |c| c.time_ps);
        self.ingress_ps
            .max(self.egress_ps)
            .max(self.latency_ps)
            .max(cut)
    }

    /// Best bound over `time_ps`: 1 means the algorithm meets the bound.
    pub fn efficiency(&self, time_ps: Picos) -> f64 {
        ratio(self.best_ps(), time_ps)
    }

    /// Ideal over `time_ps`, the figure the paper reports as efficiency.
    pub fn of_ideal(&self, time_ps: Picos) -> f64 {
        ratio(self.ideal_ps, time_ps)
    }
}

fn ratio(bound: Picos, time: Picos) -> f64 {
    if time == 0 {
        1.0
    } else {
        bound as f64 / time as f64
    }
}

/// Ingress bound: every NPU must take in what it needs from others, at most at the sum of
/// its incoming links' bandwidths. The largest such time over NPUs, bandwidth term only.
pub fn ingress_bound_ps(topo: &Topology, collective: &Collective) -> Picos {
    let needed = needed_chunks(topo, collective);
    volume_bound_ps(topo, collective, &needed, |npu| topo.in_links(npu).to_vec())
}

/// Egress bound: every NPU must send out, at least once, the data only it can provide
/// (for combining collectives: its contribution to every chunk others must end with).
pub fn egress_bound_ps(topo: &Topology, collective: &Collective) -> Picos {
    let owed = owed_chunks(topo, collective);
    volume_bound_ps(topo, collective, &owed, |npu| topo.out_links(npu).collect())
}

/// Per NPU, the chunks it must take in from others (see `ingress_bound_ps`).
fn needed_chunks(topo: &Topology, collective: &Collective) -> Vec<usize> {
    let combining = collective.combining();
    let mut needed = vec![0usize; topo.npus()];
    for chunk in collective.chunks() {
        for &npu in &chunk.post {
            let from_others = if combining {
                chunk.pre.iter().any(|&u| u != npu)
            } else {
                !chunk.pre.contains(&npu)
            };
            needed[npu] += usize::from(from_others);
        }
    }
    needed
}

/// Per NPU, the chunks only it can send out (see `egress_bound_ps`).
fn owed_chunks(topo: &Topology, collective: &Collective) -> Vec<usize> {
    let combining = collective.combining();
    let mut owed = vec![0usize; topo.npus()];
    for chunk in collective.chunks() {
        let providers: &[NpuId] = if combining || chunk.pre.len() == 1 {
            &chunk.pre
        } else {
            &[]
        };
        for &npu in providers {
            owed[npu] += usize::from(chunk.post.iter().any(|&v| v != npu));
        }
    }
    owed
}

/// A bound for algorithms that move whole chunks, each link carrying one at a time for
/// its alpha-beta time (every synthesized schedule; not every algorithm, since a message
/// may carry several chunks for one alpha): in time T a link with chunk time d delivers
/// at most T / d chunks, so an NPU that must take in N chunks needs T >= N / sum(1 / d)
/// over its incoming links, and likewise for what it must send out. Unlike the bounds
/// above it grows with the number of chunks, which makes it a quick test of whether more
/// chunks per NPU could beat a time already found.
pub fn chunked_bound_ps(topo: &Topology, collective: &Collective) -> Picos {
    let bytes = collective.chunk_bytes();
    let rate = |links: &mut dyn Iterator<Item = usize>| -> f64 {
        links
            .map(|l| 1.0 / topo.link(l).transfer_ps(bytes).max(1) as f64)
            .sum()
    };
    let needed = needed_chunks(topo, collective);
    let owed = owed_chunks(topo, collective);
    let mut worst = 0.0f64;
    for npu in 0..topo.npus() {
        for (count, per_ps) in [
            (needed[npu], rate(&mut topo.in_links(npu).iter().copied())),
            (owed[npu], rate(&mut topo.out_links(npu))),
        ] {
            if count > 0 && per_ps > 0.0 {
                worst = worst.max(count as f64 / per_ps);
            }
        }
    }
    worst.floor() as Picos
}

/// The largest `chunks x chunk size / bandwidth of the given links` over NPUs.
fn volume_bound_ps(
    topo: &Topology,
    collective: &Collective,
    chunks: &[usize],
    links: impl Fn(NpuId) -> Vec<usize>,
) -> Picos {
    let mut worst = 0.0f64;
    for (npu, &count) in chunks.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let gbps: f64 = links(npu)
            .iter()
            .map(|&l| topo.link(l).bandwidth_gbps)
            .sum();
        worst = worst.max(bytes_over_gbps_ps(
            count as f64 * collective.chunk_bytes(),
            gbps,
        ));
    }
    worst.floor() as Picos
}

/// Picoseconds to move `bytes` at `gbps` (1 GB/s = 1 byte per ns).
fn bytes_over_gbps_ps(bytes: f64, gbps: f64) -> f64 {
    bytes / gbps * 1000.0
}

/// (latency bound, alpha diameter among the collective's NPUs). The latency bound is the
/// largest, over pieces of data an NPU needs, of the alpha-shortest path from where the
/// piece starts: for copying collectives from its holder, for combining ones from every
/// contributor (a copied chunk held by several NPUs counts for nothing, conservatively).
fn latency_bounds(topo: &Topology, collective: &Collective) -> (Picos, Picos) {
    let combining = collective.combining();
    // Chunks come in runs with equal conditions (a rank's K pieces, or all chunks of an
    // All-Reduce); each run is looked at once.
    let mut runs: Vec<usize> = Vec::new();
    for (c, chunk) in collective.chunks().iter().enumerate() {
        if runs
            .last()
            .map_or(true, |&r| collective.chunks()[r] != *chunk)
        {
            runs.push(c);
        }
    }
    let mut runs_from: Vec<Vec<usize>> = vec![Vec::new(); topo.npus()];
    for &r in &runs {
        let pre = &collective.chunks()[r].pre;
        if combining || pre.len() == 1 {
            for &u in pre {
                runs_from[u].push(r);
            }
        }
    }
    let mut sources: Vec<NpuId> = collective.npus().to_vec();
    sources.extend((0..topo.npus()).filter(|&u| !runs_from[u].is_empty()));
    sources.sort_unstable();
    sources.dedup();
    let (mut latency, mut diameter) = (0, 0);
    for u in sources {
        let dist = shortest_paths(topo, u, |l| us_to_ps(l.latency_us)).dist;
        let reachable = |v: &NpuId| dist[*v] != Picos::MAX;
        if collective.npus().contains(&u) {
            let far = collective
                .npus()
                .iter()
                .filter(|v| reachable(v))
                .map(|&v| dist[v]);
            diameter = diameter.max(far.max().unwrap_or(0));
        }
        for &r in &runs_from[u] {
            let far = collective.chunks()[r]
                .post
                .iter()
                .filter(|v| reachable(v))
                .map(|&v| dist[v]);
            latency = latency.max(far.max().unwrap_or(0));
        }
    }
    (latency, diameter)
}

/// The cut bound for the collective's kind, as documented above.
pub fn cut_bound(topo: &Topology, collective: &Collective) -> Option<CutBound> {
    CutParts::new(topo, collective)?.bound(collective)
}

/// What the cut bound takes from the topology alone: the tightest cut ratio of each
/// network checked, and whether each source's data is one rank's share or the buffer.
struct CutParts {
    ratios: Vec<cut::CutRatio>,
    per_share: bool,
}

impl CutParts {
    fn new(topo: &Topology, collective: &Collective) -> Option<CutParts> {
        let npus = collective.npus();
        let root = collective.spec().root;
        let all: Vec<NpuId> = npus.to_vec();
        let others: Vec<NpuId> = npus.iter().copied().filter(|&u| Some(u) != root).collect();
        // (on the topology, on its reverse, sources, sinks, data per source is a share).
        let (forward, backward, sources, sinks, per_share) = match collective.kind() {
            CollectiveKind::AllGather => (true, false, all.clone(), all, true),
            CollectiveKind::ReduceScatter => (false, true, all.clone(), all, true),
            CollectiveKind::AllReduce => (true, true, all.clone(), all, true),
            CollectiveKind::Broadcast => (true, false, vec![root?], others, false),
            CollectiveKind::Reduce => (false, true, vec![root?], others, false),
            CollectiveKind::Gather => (true, false, others, vec![root?], true),
            CollectiveKind::Scatter => (false, true, others, vec![root?], true),
            CollectiveKind::AllToAll => return None,
        };
        let reversed = backward.then(|| topo.reversed());
        let nets = forward.then_some(topo).into_iter().chain(reversed.as_ref());
        let ratios = nets
            .filter_map(|net| cut::min_cut_ratio(net, &sources, &sinks))
            .collect();
        Some(CutParts { ratios, per_share })
    }

    /// The bound at the collective's size.
    fn bound(&self, collective: &Collective) -> Option<CutBound> {
        let size = collective.spec().size_bytes as f64;
        let unit = if self.per_share {
            size / collective.npus().len() as f64
        } else {
            size
        };
        let found: Vec<CutBound> = self
            .ratios
            .iter()
            .map(|c| CutBound {
                time_ps: bytes_over_gbps_ps(unit, c.gbps_per_source).floor() as Picos,
                exact: c.exact,
            })
            .collect();
        let best = found.iter().map(|c| c.time_ps).max()?;
        Some(CutBound {
            time_ps: best,
            exact: found.iter().all(|c| c.exact),
        })
    }
}

/// The paper's Ideal: size x (nccl-tests bus factor) over the smallest NPU bandwidth
/// (the lesser of its incoming and outgoing totals), plus the alpha diameter.
fn ideal_ps(topo: &Topology, collective: &Collective, diameter_ps: Picos) -> Picos {
    let npus = collective.npus();
    let bandwidth = npus
        .iter()
        .map(|&u| {
            let sum = |links: &mut dyn Iterator<Item = usize>| -> f64 {
                links.map(|l| topo.link(l).bandwidth_gbps).sum()
            };
            sum(&mut topo.in_links(u).iter().copied()).min(sum(&mut topo.out_links(u)))
        })
        .fold(f64::INFINITY, f64::min);
    if npus.len() < 2 || !bandwidth.is_finite() || bandwidth <= 0.0 {
        return 0;
    }
    let bytes = collective.spec().size_bytes as f64 * bus_factor(collective.kind(), npus.len());
    bytes_over_gbps_ps(bytes, bandwidth).floor() as Picos + diameter_ps
}
