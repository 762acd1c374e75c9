//! Lower bounds on collective time, to say how close an algorithm is to the physical limit.
//!
//! Every bound below holds for any algorithm in the alpha-beta model, however it chunks
//! the data, except `ideal`, which is the TACOS paper's reference formula. Where switches
//! reduce and multicast (`Topology::reduces`: NVLS) the traffic bound is left out (0), its
//! count of NPU-to-NPU messages no longer being what the ports carry; the others hold
//! there too: a multicast still enters every receiver, a sum inside the switch still
//! leaves every contributor, and what must cross a cut crosses it at least once. With P NPUs and a buffer of S bytes (nccl-tests' sizes):
//!
//! | bound | what it says |
//! | --- | --- |
//! | ingress | an NPU must take in what it lacks over its incoming links: All-Gather and All-to-All (P-1)/P S, Reduce-Scatter S/P, All-Reduce S, Broadcast S (every NPU but the root), Reduce and Gather the root S and (P-1)/P S |
//! | egress | an NPU must send out what only it holds: All-Gather S/P, Reduce-Scatter and All-to-All (P-1)/P S, All-Reduce S, Broadcast the root S, Reduce S (every NPU but the root), Scatter the root (P-1)/P S |
//! | traffic | the NPUs' ports together must carry the least number of NPU-to-NPU messages every piece needs, at the summed bandwidth of the links leaving (or entering) NPUs, every link's without switches: All-Reduce 2(P-1) S (one-way gossip needs 2P-2 messages per byte; P S when NPUs outside the collective could combine), All-to-All the hop count between every pair times S/P; through one switch, All-Reduce's is the classic 2(P-1)/P S per port. The counts also hold between groups of NPUs (those that links of at least some bandwidth join), over the links leaving the groups: All-Reduce 2(G-1) S among G groups, All-to-All every pair's S/P times the groups between them |
//! | latency | the first byte of a needed piece crosses at least the alpha-shortest path |
//! | cut | for a set X of vertices, what must leave X over the bandwidth leaving X (see `cut`) |
//! | ideal | size x busbw factor / smallest NPU bandwidth + alpha diameter (the paper's) |
//! | chunked | latency-aware, for schedules of whole chunks only (every synthesized one): each chunk an NPU lacks comes by a transfer of its own over an incoming link, each paying its route's alpha (both hops' through a switch) and the chunk's beta (see `chunked_bound_ps`) |
//!
//! The cut bound per kind: All-Gather ForestColl's max-flow bound (X's NPUs' shares must
//! leave X); Reduce-Scatter, Reduce and Scatter that of their dual (All-Gather, Broadcast,
//! Gather) on the reversed topology; All-Reduce the whole buffer over the smallest cut
//! between its NPUs, both ways (X's partial sum must leave X, the rest's must enter);
//! All-to-All |X ∩ NPUs| x |NPUs outside X| x S/P over the lesser of the bandwidths
//! leaving and entering X, over candidate sets (balls around each NPU, id-order prefixes),
//! so it is marked approximate. For homogeneous NPUs the traffic bound of All-Reduce is
//! the classic 2(P-1)/P S over an NPU's bandwidth. `efficiency = best bound / time`, the
//! best bound being the largest of the valid ones.
//!
//! ```
//! use tacos::bounds::Bounds;
//! use tacos::collective::{Collective, CollectiveKind};
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! // An All-Gather of 4 MiB on a ring of 4 NPUs at 50 GB/s: each NPU must take in 3 MiB
//! // over its two links in, 3 x 1,048,576 B / 100 GB/s = 31.45728 us at the least.
//! let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
//! let c = Collective::over_all(&ring, CollectiveKind::AllGather, None, 1, 4 << 20).unwrap();
//! let bounds = Bounds::new(&ring, &c);
//! assert!(bounds.best_ps() >= 31_457_280);
//! ```

mod chunked;
mod cut;
mod maxflow;
mod traffic;

pub use chunked::chunked_bound_ps;

use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::sim::bus_factor;
use crate::topology::{shortest_paths, NpuId, Topology};
use crate::units::{us_to_ps, Picos};
use serde::Serialize;

/// The cut bound and whether it was computed exactly.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CutBound {
    pub time_ps: Picos,
    /// False where only some cuts were checked (huge topologies, All-to-All): still a
    /// valid bound, perhaps not the tightest.
    pub exact: bool,
}

/// Every bound for one collective on one topology.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bounds {
    /// The latency-aware bound of schedules that move one chunk per transfer
    /// (`chunked_bound_ps`); None for bounds that must hold for any algorithm
    /// (`Bounds::new`), which may send several chunks for one alpha.
    pub chunked_ps: Option<Picos>,
    pub ingress_ps: Picos,
    pub egress_ps: Picos,
    /// The least total link traffic over the total link bandwidth.
    pub traffic_ps: Picos,
    pub latency_ps: Picos,
    /// None where no set of NPUs must exchange anything (a single NPU).
    pub cut: Option<CutBound>,
    /// The paper's Ideal: a reference figure, not a proven bound.
    pub ideal_ps: Picos,
}

/// What the bounds take from the topology alone, computed once for every size.
struct SizeFree {
    latency_ps: Picos,
    diameter_ps: Picos,
    cut: CutParts,
    /// Link crossings, in chunks, that the traffic bound counts.
    crossings: f64,
    /// An All-Reduce's or All-to-All's messages between groups, in buffers per GB/s of
    /// the links leaving the groups (`traffic::grouped`).
    grouped: Option<f64>,
}

impl SizeFree {
    fn new(topo: &Topology, collective: &Collective) -> SizeFree {
        let (latency_ps, diameter_ps) = latency_bounds(topo, collective);
        // A multicast leaves its sender once for many receivers, and a sum inside a switch
        // enters its receiver once for many senders: NPU-to-NPU messages no longer count
        // what the ports carry, so where switches reduce the traffic bound is left out.
        let counted = !topo.has_reducing_switch();
        SizeFree {
            latency_ps,
            diameter_ps,
            cut: CutParts::new(topo, collective),
            crossings: match counted {
                true => traffic::least_crossings(topo, collective),
                false => 0.0,
            },
            grouped: traffic::grouped(topo, collective).filter(|_| counted),
        }
    }
}

impl Bounds {
    /// Computes every bound.
    pub fn new(topo: &Topology, collective: &Collective) -> Bounds {
        Bounds::assemble(topo, collective, &SizeFree::new(topo, collective))
    }

    /// `Bounds::new` plus the latency-aware `chunked_bound_ps`, for a schedule of
    /// `collective` as it is chunked (K chunks per NPU), one chunk per transfer: a
    /// synthesized schedule, or a schedule file timed with one message per link at a time.
    /// On a 100x100 mesh (1 GiB All-Gather, K = 1) it is 13.2 ms where ingress says 10.7 ms.
    pub fn chunked(topo: &Topology, collective: &Collective) -> Bounds {
        Bounds {
            chunked_ps: Some(chunked_bound_ps(topo, collective)),
            ..Bounds::new(topo, collective)
        }
    }

    /// `Bounds::new` for `collective` resized to each of `sizes` (bytes), with the work
    /// that does not depend on the size (the cut's max-flows, shortest paths) done once.
    pub fn for_sizes(
        topo: &Topology,
        collective: &Collective,
        sizes: &[u64],
    ) -> Result<Vec<Bounds>> {
        let fixed = SizeFree::new(topo, collective);
        sizes
            .iter()
            .map(|&size_bytes| {
                let spec = CollectiveSpec {
                    size_bytes,
                    ..collective.spec().clone()
                };
                let resized = Collective::new(topo, spec)?;
                Ok(Bounds::assemble(topo, &resized, &fixed))
            })
            .collect()
    }

    fn assemble(topo: &Topology, collective: &Collective, fixed: &SizeFree) -> Bounds {
        let total_gbps = npu_port_gbps(topo);
        let per_npu = if fixed.crossings > 0.0 && total_gbps > 0.0 {
            bytes_over_gbps_ps(fixed.crossings * collective.chunk_bytes(), total_gbps).floor()
                as Picos
        } else {
            0
        };
        let grouped = fixed.grouped.map_or(0, |buffers_per_gbps| {
            bytes_over_gbps_ps(collective.spec().size_bytes as f64 * buffers_per_gbps, 1.0).floor()
                as Picos
        });
        let traffic_ps = per_npu.max(grouped);
        Bounds {
            chunked_ps: None,
            ingress_ps: ingress_bound_ps(topo, collective),
            egress_ps: egress_bound_ps(topo, collective),
            traffic_ps,
            latency_ps: fixed.latency_ps,
            cut: fixed.cut.bound(collective),
            ideal_ps: ideal_ps(topo, collective, fixed.diameter_ps),
        }
    }

    /// The largest valid lower bound (Ideal left out).
    pub fn best_ps(&self) -> Picos {
        self.named().map(|(_, ps)| ps).max().unwrap_or(0)
    }

    /// Which bound is the best one: "ingress", "egress", "traffic", "latency", "cut" or
    /// "chunked"; of bounds that tie, the one later in that order of `named`.
    pub fn best_name(&self) -> &'static str {
        self.named()
            .max_by_key(|&(_, ps)| ps)
            .map_or("ingress", |(name, _)| name)
    }

    /// The valid bounds by name, in the order `best_name` breaks ties by.
    fn named(&self) -> impl Iterator<Item = (&'static str, Picos)> {
        [
            ("chunked", self.chunked_ps.unwrap_or(0)),
            ("cut", self.cut.map_or(0, |c| c.time_ps)),
            ("traffic", self.traffic_ps),
            ("ingress", self.ingress_ps),
            ("egress", self.egress_ps),
            ("latency", self.latency_ps),
        ]
        .into_iter()
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
    for c in 0..collective.chunk_count() {
        let pre = collective.pre(c);
        for &npu in collective.post(c) {
            let from_others = if combining {
                pre.iter().any(|&u| u != npu)
            } else {
                !pre.contains(&npu)
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
    for c in 0..collective.chunk_count() {
        let (pre, post) = (collective.pre(c), collective.post(c));
        let providers: &[NpuId] = if combining || pre.len() == 1 {
            pre
        } else {
            &[]
        };
        for &npu in providers {
            owed[npu] += usize::from(post.iter().any(|&v| v != npu));
        }
    }
    owed
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

/// What every NPU-to-NPU message must pass through: the lesser of the summed bandwidths of
/// the links leaving NPUs and of those entering NPUs (every link, without switches).
fn npu_port_gbps(topo: &Topology) -> f64 {
    let sum = |at: fn(&crate::topology::Link) -> usize| -> f64 {
        topo.links()
            .iter()
            .filter(|l| !topo.is_switch(at(l)))
            .map(|l| l.bandwidth_gbps)
            .sum()
    };
    sum(|l| l.src).min(sum(|l| l.dst))
}

/// Picoseconds to move `bytes` at `gbps` (1 GB/s = 1 byte per ns).
fn bytes_over_gbps_ps(bytes: f64, gbps: f64) -> f64 {
    bytes / gbps * 1000.0
}

/// The most sources the latency bounds search from.
const LATENCY_SOURCES: usize = 256;

/// (latency bound, alpha diameter among the collective's NPUs). The latency bound is the
/// largest, over pieces of data an NPU needs, of the alpha-shortest path from where the
/// piece starts: for copying collectives from its holder, for combining ones from every
/// contributor (a copied chunk held by several NPUs counts for nothing, conservatively).
fn latency_bounds(topo: &Topology, collective: &Collective) -> (Picos, Picos) {
    let combining = collective.combining();
    // Conditions are slices of the spec's NPUs: the same slice is the same condition,
    // found without comparing its (possibly 16,384) NPUs.
    let same = |a: &[NpuId], b: &[NpuId]| std::ptr::eq(a, b) || a == b;
    // Chunks come in runs with equal conditions (a rank's K pieces, or all chunks of an
    // All-Reduce); each run is looked at once.
    let mut runs: Vec<usize> = Vec::new();
    for c in 0..collective.chunk_count() {
        let fresh = runs.last().map_or(true, |&r| {
            !same(collective.pre(r), collective.pre(c))
                || !same(collective.post(r), collective.post(c))
        });
        if fresh {
            runs.push(c);
        }
    }
    // Where each run's pieces start: one NPU (`single`, by NPU), or, for sums, every
    // contributor (`wide`).
    let mut single: Vec<Vec<usize>> = vec![Vec::new(); topo.npus()];
    let mut wide: Vec<usize> = Vec::new();
    let mut sources: Vec<NpuId> = collective.npus().to_vec();
    for &r in &runs {
        match collective.pre(r) {
            [u] => single[*u].push(r),
            pre if combining => {
                if !wide
                    .last()
                    .is_some_and(|&w| std::ptr::eq(collective.pre(w), pre))
                {
                    sources.extend(pre);
                }
                wide.push(r);
            }
            _ => {}
        }
    }
    sources.extend((0..topo.npus()).filter(|&u| !single[u].is_empty()));
    sources.sort_unstable();
    sources.dedup();
    // A maximum over some sources is still a lower bound, only a weaker one: past
    // `LATENCY_SOURCES` sources (a 16,384-GPU cluster's all-pairs search takes half a
    // minute), evenly spaced ones stand for the rest, which on clusters of identical
    // nodes see the same distances.
    if sources.len() > LATENCY_SOURCES {
        let step = sources.len().div_ceil(LATENCY_SOURCES);
        sources = sources.into_iter().step_by(step).collect();
    }
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
        // Runs share their contributors' slice: whether `u` is in it is asked once a slice.
        let mut asked: Option<(&[NpuId], bool)> = None;
        let starts_here = wide
            .iter()
            .filter(|&&r| {
                let pre = collective.pre(r);
                match asked {
                    Some((slice, member)) if std::ptr::eq(slice, pre) => member,
                    _ => {
                        let member = pre.contains(&u);
                        asked = Some((pre, member));
                        member
                    }
                }
            })
            .chain(&single[u]);
        for &r in starts_here {
            let far = collective
                .post(r)
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
    CutParts::new(topo, collective).bound(collective)
}

/// What the cut bound takes from the topology alone: the tightest cut ratio of each
/// network checked, in GB/s per unit of data, and what the unit is.
struct CutParts {
    ratios: Vec<cut::CutRatio>,
    unit: CutUnit,
}

/// What must cross a cut, per unit its ratio counts.
#[derive(Clone, Copy)]
enum CutUnit {
    /// One NPU's share, S / P.
    Share,
    /// The whole buffer, S.
    Buffer,
}

impl CutParts {
    fn new(topo: &Topology, collective: &Collective) -> CutParts {
        let npus = collective.npus();
        let all: Vec<NpuId> = npus.to_vec();
        let others =
            |root: NpuId| -> Vec<NpuId> { npus.iter().copied().filter(|&u| u != root).collect() };
        let reversed = || topo.reversed();
        let root = collective.spec().root;
        let share = |ratio| (ratio, CutUnit::Share);
        let (ratios, unit): (Vec<Option<cut::CutRatio>>, CutUnit) = match (collective.kind(), root)
        {
            (CollectiveKind::AllGather, _) => share(vec![cut::min_cut_ratio(topo, &all, &all)]),
            (CollectiveKind::ReduceScatter, _) => {
                share(vec![cut::min_cut_ratio(&reversed(), &all, &all)])
            }
            (CollectiveKind::AllReduce, _) => (
                vec![
                    cut::min_cut_gbps(topo, &all),
                    cut::min_cut_gbps(&reversed(), &all),
                ],
                CutUnit::Buffer,
            ),
            (CollectiveKind::Broadcast, Some(r)) => (
                vec![cut::min_cut_ratio(topo, &[r], &others(r))],
                CutUnit::Buffer,
            ),
            (CollectiveKind::Reduce, Some(r)) => (
                vec![cut::min_cut_ratio(&reversed(), &[r], &others(r))],
                CutUnit::Buffer,
            ),
            (CollectiveKind::Gather, Some(r)) => {
                share(vec![cut::min_cut_ratio(topo, &others(r), &[r])])
            }
            (CollectiveKind::Scatter, Some(r)) => {
                share(vec![cut::min_cut_ratio(&reversed(), &others(r), &[r])])
            }
            (CollectiveKind::AllToAll, _) => share(vec![cut::all_to_all_cut_ratio(topo, &all)]),
            // A rooted kind without a root is refused by `Collective::new`.
            (_, None) => (Vec::new(), CutUnit::Share),
        };
        CutParts {
            ratios: ratios.into_iter().flatten().collect(),
            unit,
        }
    }

    /// The bound at the collective's size.
    fn bound(&self, collective: &Collective) -> Option<CutBound> {
        let size = collective.spec().size_bytes as f64;
        let unit = match self.unit {
            CutUnit::Share => size / collective.npus().len() as f64,
            CutUnit::Buffer => size,
        };
        let best = self
            .ratios
            .iter()
            .map(|c| bytes_over_gbps_ps(unit, c.gbps_per_source).floor() as Picos)
            .max()?;
        Some(CutBound {
            time_ps: best,
            exact: self.ratios.iter().all(|c| c.exact),
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
