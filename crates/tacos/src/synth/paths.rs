//! Planned paths for chunks that each go to one NPU (All-to-All, Gather, Scatter).
//!
//! Left to itself, the matcher sends such a chunk over whichever link brings it closer to
//! its target and is free first; which of several equally short ways each chunk takes
//! then falls out of the order links free up, and the busiest link (on a multi-node
//! fabric, one NIC) ends up carrying more than its share: the makespan is that link's.
//! Here every chunk is given its path before matching, so that the load on every
//! physical link is as even as the paths allow, and the matcher only times the hops.
//!
//! A chunk's path moves it strictly closer to its target at each hop (by the alpha-beta
//! time of one chunk: `dist`), so paths are acyclic and no longer than needed when links
//! are alike; where they differ, a path may take more fast hops in place of one slow one.
//! Among those, the path is the one that adds least to the sum of the squared loads of
//! the physical links (`marginal`), ties to the quicker: chunks in a seeded random
//! order, each routed on the loads of those before it, then each routed again on the
//! loads of all the others.

use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Routing passes over every chunk: the first on the loads of the chunks before it, the
/// others on everyone else's.
const PASSES: usize = 4;

/// Most hops one path may take.
pub(super) const MAX_HOPS: usize = u8::MAX as usize;

/// One chunk to route: where it starts, where it goes, and its hops' times.
pub(super) struct Trip<'a> {
    pub from: NpuId,
    pub to: NpuId,
    /// Time of one such chunk on each link of the view.
    pub cost: &'a [Picos],
    /// Time from every NPU to `to` by the cheapest path (`Picos::MAX` if none).
    pub dist: &'a [Picos],
}

/// Every chunk's path, as the links of the view it takes in order, and how far along it
/// the chunk has started.
pub(super) struct Paths {
    start: Vec<u32>,
    hops: Vec<u32>,
    /// Hops started, per chunk.
    progress: Vec<u8>,
}

impl Paths {
    /// Routes every trip over `view`'s links; `physical(l)` lists the links of the
    /// topology that view link `l` holds while it carries a chunk (whose loads are
    /// balanced) among `physical_links`.
    /// Err((from, to)) of a trip that has no such path (no path at all, or only links of
    /// no time, which bring nothing strictly closer).
    pub(super) fn plan<'p>(
        view: &Topology,
        physical_links: usize,
        physical: impl Fn(LinkId) -> &'p [u32],
        trips: &[Trip<'_>],
        seed: u64,
    ) -> Result<Paths, (NpuId, NpuId)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut planner = Planner::new(view, physical_links);
        let mut paths: Vec<Vec<u32>> = vec![Vec::new(); trips.len()];
        let mut order: Vec<usize> = (0..trips.len()).collect();
        order.shuffle(&mut rng);
        for pass in 0..PASSES {
            for &c in &order {
                let trip = &trips[c];
                if pass > 0 {
                    planner.load(&paths[c], trip.cost, &physical, false);
                }
                paths[c] = planner
                    .route(view, trip, &physical)
                    .ok_or((trip.from, trip.to))?;
                planner.load(&paths[c], trip.cost, &physical, true);
            }
        }
        let mut start = Vec::with_capacity(trips.len() + 1);
        let mut hops = Vec::with_capacity(paths.iter().map(Vec::len).sum());
        for path in paths {
            start.push(hops.len() as u32);
            hops.extend(path);
        }
        start.push(hops.len() as u32);
        Ok(Paths {
            progress: vec![0; trips.len()],
            start,
            hops,
        })
    }

    fn path(&self, chunk: usize) -> &[u32] {
        &self.hops[self.start[chunk] as usize..self.start[chunk + 1] as usize]
    }

    /// The next link `chunk` takes, if it has not started its last hop.
    pub(super) fn next(&self, chunk: usize) -> Option<LinkId> {
        self.path(chunk)
            .get(self.progress[chunk] as usize)
            .map(|&l| l as usize)
    }

    /// `chunk` started its hop over `link`, if that is its next.
    pub(super) fn advance(&mut self, chunk: usize, link: LinkId) {
        if self.next(chunk) == Some(link) {
            self.progress[chunk] += 1;
        }
    }

    /// The links `chunk` has yet to start.
    pub(super) fn ahead(&self, chunk: usize) -> &[u32] {
        &self.path(chunk)[self.progress[chunk] as usize..]
    }
}

/// What adding `hop` to a link busy for `load` costs: the growth of the link's squared
/// load. Summed over a path's links it is least for the path over the least busy links,
/// and grows with every link a path takes, so a longer way round is taken only where the
/// short one is much busier (the paths then minimize the sum of squared loads, which
/// spreads load evenly without adding to it needlessly).
fn marginal(load: Picos, hop: Picos) -> f64 {
    let (load, hop) = (load as f64, hop as f64);
    hop * (2.0 * load + hop)
}

/// Loads and the scratch of one routing at a time.
struct Planner {
    /// Per physical link, the time the paths so far keep it busy.
    load: Vec<Picos>,
    /// Per NPU, the best (cost, time) found to it and the link it was reached by; valid
    /// where `seen` holds the current routing's stamp.
    best: Vec<(f64, Picos)>,
    via: Vec<u32>,
    seen: Vec<u32>,
    stamp: u32,
    /// The NPUs a routing reached, in the order they are settled.
    reached: Vec<NpuId>,
}

impl Planner {
    fn new(view: &Topology, physical_links: usize) -> Planner {
        let n = view.npus();
        Planner {
            load: vec![0; physical_links],
            best: vec![(0.0, 0); n],
            via: vec![u32::MAX; n],
            seen: vec![0; n],
            stamp: 0,
            reached: Vec::new(),
        }
    }

    /// Adds (or takes away) `path`'s hops to the loads of the links they hold.
    fn load<'p>(
        &mut self,
        path: &[u32],
        cost: &[Picos],
        physical: &impl Fn(LinkId) -> &'p [u32],
        add: bool,
    ) {
        for &l in path {
            let time = cost[l as usize];
            for &p in physical(l as usize) {
                let load = &mut self.load[p as usize];
                *load = if add {
                    load.saturating_add(time)
                } else {
                    load.saturating_sub(time)
                };
            }
        }
    }

    /// The path for `trip`: over links that each bring the chunk strictly closer to its
    /// target, the one of least `marginal` cost, ties to the one that arrives first; None
    /// where there is none.
    fn route<'p>(
        &mut self,
        view: &Topology,
        trip: &Trip<'_>,
        physical: &impl Fn(LinkId) -> &'p [u32],
    ) -> Option<Vec<u32>> {
        if trip.from == trip.to {
            return Some(Vec::new());
        }
        if trip.dist[trip.from] == Picos::MAX {
            return None;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.fill(0);
            self.stamp = 1;
        }
        let stamp = self.stamp;
        self.reached.clear();
        self.seen[trip.from] = stamp;
        self.best[trip.from] = (0.0, 0);
        // Every hop lowers the distance to the target, so settling NPUs from the farthest
        // down visits each after every NPU that can reach it.
        let mut frontier = vec![trip.from];
        while let Some(u) = frontier.pop() {
            self.reached.push(u);
            for l in view.out_links(u) {
                let v = view.link(l).dst;
                if v < trip.dist.len() && trip.dist[v] < trip.dist[u] && self.seen[v] != stamp {
                    self.seen[v] = stamp;
                    self.best[v] = (f64::INFINITY, Picos::MAX);
                    frontier.push(v);
                }
            }
        }
        let dist = trip.dist;
        self.reached
            .sort_unstable_by_key(|&u| std::cmp::Reverse(dist[u]));
        for i in 0..self.reached.len() {
            let u = self.reached[i];
            let (cost, time) = self.best[u];
            if u == trip.to || cost == f64::INFINITY {
                continue;
            }
            for l in view.out_links(u) {
                let v = view.link(l).dst;
                if v >= dist.len() || dist[v] >= dist[u] || self.seen[v] != stamp {
                    continue;
                }
                let hop = trip.cost[l];
                let added: f64 = physical(l)
                    .iter()
                    .map(|&p| marginal(self.load[p as usize], hop))
                    .sum();
                let candidate = (cost + added, time.saturating_add(hop));
                if candidate
                    .0
                    .total_cmp(&self.best[v].0)
                    .then(candidate.1.cmp(&self.best[v].1))
                    == std::cmp::Ordering::Less
                {
                    self.best[v] = candidate;
                    self.via[v] = l as u32;
                }
            }
        }
        if self.seen[trip.to] != stamp || self.best[trip.to].0 == f64::INFINITY {
            return None;
        }
        let mut path = Vec::new();
        let mut v = trip.to;
        while v != trip.from {
            let l = self.via[v];
            path.push(l);
            v = view.link(l as usize).src;
            if path.len() > MAX_HOPS {
                return None;
            }
        }
        path.reverse();
        Some(path)
    }
}
