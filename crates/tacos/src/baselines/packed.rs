//! Packed spanning trees for All-Reduce: each chunk is reduced up a spanning tree of the
//! NPUs' two-way links to the tree's root and broadcast back down the same tree, the
//! trees chosen so that together they load every link by its bandwidth. Broadcast and
//! Reduce are one half of that, each tree rooted at the collective's root: its chunks go
//! down trees that load each direction of a link by its bandwidth (packed arborescences,
//! whose throughput is the cut from the root), or up them.
//!
//! Why: a chunk reduced and broadcast along a spanning tree crosses each tree edge once
//! each way, so the links' loads are set by how often each edge is used, and a packing
//! that spreads the chunks over many trees in proportion to the links' bandwidths keeps
//! every link busy (the throughput of a fractional spanning-tree packing, which on a mesh
//! is the traffic bound: its corners, with two links, limit a Reduce-Scatter or an
//! All-Gather alone, not the two overlapped). The matcher composes All-Reduce as a
//! Reduce-Scatter to fixed owners and an All-Gather from them; here a chunk's root is
//! free, and its broadcast starts as soon as its reduction is done.
//!
//! How: one chunk at a time, the minimum spanning tree under the links' loads so far
//! (chunks over capacity: for All-Reduce an edge's, the lesser of the two directions'
//! bandwidths, as it carries the chunk both ways; for Broadcast and Reduce the direction's
//! own), grown from a centre of the graph (the root) by Prim's rule with ties to the
//! shallower NPU, so that trees stay shallow where loads are equal. This greedy packing is the multiplicative-weights
//! packing with linear lengths; chunks spread like the fractional packing once there are
//! a few per edge. The hops are then list-scheduled: each link, when free, sends the
//! oldest chunk (lowest index) whose data is ready there. On links between NPUs the
//! simulator keeps each link's order, so it times the schedule as planned; a fixed step
//! order instead makes a link wait, in order, for a chunk another link is still
//! delaying.
//!
//! Only for topologies of NPUs joined by links (no switch vertices: through a switch a tree
//! would need Steiner vertices), both ways for All-Reduce, whose chunks go both ways along
//! each tree edge.

use super::{root_rank, Plan};
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::{later, link_time_ps, Op, Transfer};
use crate::topology::{LinkId, Topology};
use crate::units::Picos;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

/// One undirected edge between members (ranks): the fastest link each way, their
/// bandwidths (0 where no link runs that way) and the lesser of them.
struct Edge {
    a: usize,
    b: usize,
    /// Link a -> b and link b -> a.
    links: Ways,
    bandwidth: [f64; 2],
    capacity: f64,
}

/// The fastest link each way between two members, where there is one.
type Ways = [Option<LinkId>; 2];

/// The members' two-way edges, and each member's edges (by index).
struct Graph {
    edges: Vec<Edge>,
    incident: Vec<Vec<usize>>,
}

impl Graph {
    /// The links between `spec`'s NPUs (of parallel links, the fastest): pairs joined both
    /// ways only, unless `one_way` (a tree that carries its chunks one way only may take a
    /// link without its reverse).
    fn new(topo: &Topology, spec: &CollectiveSpec, one_way: bool) -> Result<Graph> {
        if topo.has_switches() {
            return Err(Error::baseline(
                "trees",
                format!(
                    "trees: {} has switches; packed trees need NPUs joined by links, not through switches",
                    topo.name()
                ),
            ));
        }
        let mut rank = vec![usize::MAX; topo.npus()];
        for (r, &npu) in spec.npus.iter().enumerate() {
            rank[npu] = r;
        }
        // The fastest link each way between two members, by (lower rank, higher rank).
        let mut both: HashMap<(usize, usize), Ways> = HashMap::new();
        for (id, l) in topo.links().iter().enumerate() {
            let (a, b) = (rank[l.src], rank[l.dst]);
            if a == usize::MAX || b == usize::MAX || a == b {
                continue;
            }
            let (key, way) = if a < b { ((a, b), 0) } else { ((b, a), 1) };
            let slot = &mut both.entry(key).or_insert([None; 2])[way];
            if slot.map_or(true, |best| {
                topo.link(best).bandwidth_gbps < l.bandwidth_gbps
            }) {
                *slot = Some(id);
            }
        }
        let mut pairs: Vec<((usize, usize), Ways)> = both.into_iter().collect();
        pairs.sort_unstable_by_key(|&(key, _)| key);
        let mut graph = Graph {
            edges: Vec::new(),
            incident: vec![Vec::new(); spec.npus.len()],
        };
        for ((a, b), ways) in pairs {
            if ways.iter().all(Option::is_some) || one_way {
                graph.incident[a].push(graph.edges.len());
                graph.incident[b].push(graph.edges.len());
                let bandwidth = ways.map(|l| l.map_or(0.0, |l| topo.link(l).bandwidth_gbps));
                graph.edges.push(Edge {
                    a,
                    b,
                    links: ways,
                    bandwidth,
                    capacity: bandwidth[0].min(bandwidth[1]),
                });
            }
        }
        Ok(graph)
    }

    /// The members no farther (in hops) from the rest than any other, in rank order;
    /// `None` when the two-way links leave some member unreachable.
    fn centres(&self) -> Option<Vec<usize>> {
        let n = self.incident.len();
        let mut eccentricity = vec![0usize; n];
        let mut hops = vec![usize::MAX; n];
        let mut queue = std::collections::VecDeque::new();
        for (from, ecc) in eccentricity.iter_mut().enumerate() {
            hops.fill(usize::MAX);
            hops[from] = 0;
            queue.push_back(from);
            let mut reached = 1;
            while let Some(v) = queue.pop_front() {
                for &e in &self.incident[v] {
                    let w = self.other(e, v);
                    if hops[w] == usize::MAX {
                        hops[w] = hops[v] + 1;
                        *ecc = hops[w];
                        reached += 1;
                        queue.push_back(w);
                    }
                }
            }
            if reached < n {
                return None;
            }
        }
        let least = eccentricity.iter().copied().min()?;
        Some((0..n).filter(|&v| eccentricity[v] == least).collect())
    }

    /// Which way edge `e` runs leaving member `from`: 0 from `a` to `b`, 1 back.
    fn way(&self, e: usize, from: usize) -> usize {
        usize::from(self.edges[e].a != from)
    }

    /// The link over edge `e` leaving member `from`.
    fn link_from(&self, e: usize, from: usize) -> Option<LinkId> {
        self.edges[e].links[self.way(e, from)]
    }

    fn other(&self, e: usize, v: usize) -> usize {
        let edge = &self.edges[e];
        if edge.a == v {
            edge.b
        } else {
            edge.a
        }
    }
}

/// A spanning tree over the members: each one's parent and the edge to it (none at the
/// root), depth and height (the longest way down to a leaf).
struct Tree {
    root: usize,
    parent: Vec<Option<(usize, usize)>>,
    depth: Vec<usize>,
    height: Vec<usize>,
}

/// A candidate edge in Prim's heap: least load first, then the shallower end in the
/// tree, then the lower edge index.
#[derive(PartialEq)]
struct Candidate {
    load: f64,
    depth: usize,
    edge: usize,
    to: usize,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.load
            .total_cmp(&other.load)
            .then(self.depth.cmp(&other.depth))
            .then(self.edge.cmp(&other.edge))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The minimum spanning tree grown from `root` under `load(e, from)`: the load of taking
/// edge `e` from `from`, the member already in the tree (infinite where it cannot be
/// taken that way; members only such edges reach are left without a parent).
fn grow(graph: &Graph, load: impl Fn(usize, usize) -> f64, root: usize) -> Tree {
    let n = graph.incident.len();
    let mut tree = Tree {
        root,
        parent: vec![None; n],
        depth: vec![0; n],
        height: vec![0; n],
    };
    let mut joined = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut heap = BinaryHeap::new();
    let mut next = Some((root, None));
    while let Some((v, link)) = next.take() {
        if let Some((from, edge)) = link {
            tree.parent[v] = Some((from, edge));
            tree.depth[v] = tree.depth[from] + 1;
        }
        joined[v] = true;
        order.push(v);
        for &e in &graph.incident[v] {
            heap.push(Reverse(Candidate {
                load: load(e, v),
                depth: tree.depth[v],
                edge: e,
                to: graph.other(e, v),
            }));
        }
        while let Some(Reverse(c)) = heap.pop() {
            // No link runs the way the chunk would go: what is left is out of reach.
            if c.load.is_infinite() {
                break;
            }
            if !joined[c.to] {
                next = Some((c.to, Some((graph.other(c.edge, c.to), c.edge))));
                break;
            }
        }
    }
    // Children join after their parents: heights from the last joined back.
    for &v in order.iter().rev() {
        if let Some((p, _)) = tree.parent[v] {
            tree.height[p] = tree.height[p].max(tree.height[v] + 1);
        }
    }
    tree
}

/// Which ways a chunk travels its tree: up to the root summing (Reduce), down from it
/// copying (Broadcast), or up then down (All-Reduce).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Legs {
    Up,
    Down,
    Both,
}

impl Legs {
    fn up(self) -> bool {
        self != Legs::Down
    }

    fn down(self) -> bool {
        self != Legs::Up
    }
}

/// `spec` (All-Reduce, Broadcast or Reduce) over packed spanning trees, one tree per
/// chunk, timed by list scheduling.
pub(super) fn plan(topo: &Topology, spec: &CollectiveSpec) -> Result<Plan> {
    let n = spec.npus.len();
    if n < 2 {
        return Ok(Plan::default());
    }
    let legs = match spec.kind {
        CollectiveKind::AllReduce => Legs::Both,
        CollectiveKind::Broadcast => Legs::Down,
        CollectiveKind::Reduce => Legs::Up,
        other => {
            return Err(Error::baseline(
                "trees",
                format!("trees: {other} is not a collective of packed trees"),
            ))
        }
    };
    let graph = Graph::new(topo, spec, legs != Legs::Both)?;
    let unjoined = || {
        let ways = if legs == Legs::Both {
            "two-way links"
        } else {
            "links"
        };
        Error::baseline(
            "trees",
            format!(
                "trees: the {ways} of {} do not join all {n} NPUs of the collective",
                topo.name()
            ),
        )
    };
    let roots = match legs {
        Legs::Both => graph.centres().ok_or_else(unjoined)?,
        Legs::Up | Legs::Down => vec![root_rank(spec)],
    };
    let collective = Collective::new(topo, spec.clone())?;
    let chunks = collective.chunk_count();
    let legs_per_edge = if legs == Legs::Both { 2 } else { 1 };
    let mut hops = Hops::with_capacity(legs_per_edge * (n - 1) * chunks);
    // Chunks each edge has carried each way (a -> b, b -> a), and their load: an
    // All-Reduce tree's edge carries its chunk both ways, so its load is the busier way's
    // over the lesser capacity; a Broadcast's or Reduce's one way over that way's.
    let mut uses = vec![[0u64; 2]; graph.edges.len()];
    let way = |e: usize, from: usize| graph.way(e, from);
    let load = |uses: &[[u64; 2]], e: usize, from: usize| -> f64 {
        let edge = &graph.edges[e];
        let (used, gbps) = match legs {
            Legs::Both => (uses[e][0], edge.capacity),
            // Chunks leave `from` down the tree, or come up to it.
            Legs::Down => (uses[e][way(e, from)], edge.bandwidth[way(e, from)]),
            Legs::Up => (uses[e][1 - way(e, from)], edge.bandwidth[1 - way(e, from)]),
        };
        if gbps > 0.0 {
            used as f64 / gbps
        } else {
            f64::INFINITY
        }
    };
    for chunk in 0..chunks {
        let tree = grow(
            &graph,
            |e, from| load(&uses, e, from),
            roots[chunk % roots.len()],
        );
        if tree.parent.iter().filter(|p| p.is_some()).count() < n - 1 {
            return Err(unjoined());
        }
        for (v, link) in tree.parent.iter().enumerate() {
            if let Some((p, e)) = *link {
                if legs.down() {
                    uses[e][way(e, p)] += 1;
                }
                if legs.up() {
                    uses[e][way(e, v)] += 1;
                }
            }
        }
        hops.add(&graph, &tree, chunk, legs)?;
    }
    hops.schedule(topo, collective.chunk_bytes())
}

/// The hops of every chunk's tree and what each waits for.
struct Hops {
    /// Per hop: its chunk, its link (between two NPUs: its ends are the hop's), and
    /// whether it reduces.
    chunk: Vec<u32>,
    link: Vec<u32>,
    reduce: Vec<bool>,
    /// How many hops each waits for.
    waits: Vec<u32>,
    /// `next[next_start[h]..next_start[h + 1]]`: the hops waiting for hop h.
    next_start: Vec<u32>,
    next: Vec<u32>,
}

impl Hops {
    fn with_capacity(hops: usize) -> Hops {
        Hops {
            chunk: Vec::with_capacity(hops),
            link: Vec::with_capacity(hops),
            reduce: Vec::with_capacity(hops),
            waits: Vec::with_capacity(hops),
            next_start: vec![0],
            next: Vec::with_capacity(2 * hops),
        }
    }

    /// Chunk `chunk`'s reductions up `tree` and broadcasts down it, as `legs` says. A
    /// member's reduction waits for its children's; a broadcast from the root waits for
    /// the root's children's reductions (if any), any other for the broadcast into its
    /// sender.
    fn add(&mut self, graph: &Graph, tree: &Tree, chunk: usize, legs: Legs) -> Result<()> {
        let n = tree.parent.len();
        let mut children = vec![Vec::new(); n];
        for (v, link) in tree.parent.iter().enumerate() {
            if let Some((p, _)) = link {
                children[*p].push(v);
            }
        }
        // Hops are numbered in the order pushed below: member v's reduction is id[v], the
        // broadcast into it id[n + v] (none for the root).
        let mut id = vec![u32::MAX; 2 * n];
        let mut next_id = self.chunk.len() as u32;
        for v in (0..n).filter(|&v| tree.parent[v].is_some()) {
            for (leg, slot) in [(legs.up(), v), (legs.down(), n + v)] {
                if leg {
                    id[slot] = next_id;
                    next_id += 1;
                }
            }
        }
        for v in 0..n {
            let Some((p, e)) = tree.parent[v] else {
                continue;
            };
            // Reduction v -> p, then broadcast p -> v.
            let up = legs.up().then_some((true, v));
            let down = legs.down().then_some((false, p));
            for (reduce, from) in up.into_iter().chain(down) {
                // `grow` takes an edge only the way a link runs.
                let link = graph.link_from(e, from).ok_or_else(|| {
                    Error::baseline("trees", "trees: a tree took an edge no link runs along")
                })?;
                self.chunk.push(chunk as u32);
                self.link.push(link as u32);
                self.reduce.push(reduce);
                let waits = match (reduce, p == tree.root) {
                    (true, _) => children[v].len(),
                    (false, true) if legs.up() => children[p].len(),
                    (false, true) => 0,
                    (false, false) => 1,
                };
                self.waits.push(waits as u32);
                let broadcasts = |of: usize| children[of].iter().map(|&c| id[n + c]);
                match (reduce, p == tree.root) {
                    (true, true) if legs.down() => self.next.extend(broadcasts(p)),
                    (true, true) => {}
                    (true, false) => self.next.push(id[p]),
                    (false, _) => self.next.extend(broadcasts(v)),
                }
                self.next_start.push(self.next.len() as u32);
            }
        }
        Ok(())
    }

    /// List scheduling: every hop starts when its data is there and its link is free,
    /// each link taking the lowest chunk ready for it.
    fn schedule(self, topo: &Topology, chunk_bytes: f64) -> Result<Plan> {
        let hops = self.chunk.len();
        // A chunk's time on each link.
        let took = topo
            .links()
            .iter()
            .map(|l| link_time_ps(l, chunk_bytes))
            .collect::<Result<Vec<Picos>>>()?;
        let mut waits = self.waits;
        let mut ready: Vec<BinaryHeap<Reverse<(u32, u32)>>> =
            vec![BinaryHeap::new(); topo.links().len()];
        let mut busy = vec![false; topo.links().len()];
        // Hops under way: (end, hop, start).
        let mut events: BinaryHeap<Reverse<(Picos, u32, Picos)>> = BinaryHeap::new();
        let mut plan = Plan::default();
        plan.transfers.reserve(hops);
        let begin = |h: usize, now: Picos, events: &mut BinaryHeap<_>| {
            let end = later(now, took[self.link[h] as usize], || {
                "trees: a hop's end".to_string()
            })?;
            events.push(Reverse((end, h as u32, now)));
            Ok::<(), Error>(())
        };
        for h in 0..hops {
            if waits[h] == 0 {
                ready[self.link[h] as usize].push(Reverse((self.chunk[h], h as u32)));
            }
        }
        for link in 0..ready.len() {
            if let Some(Reverse((_, h))) = ready[link].pop() {
                busy[link] = true;
                begin(h as usize, 0, &mut events)?;
            }
        }
        // Links freed or given a ready hop by the hop that just ended.
        let mut touched = Vec::new();
        while let Some(Reverse((now, h, started))) = events.pop() {
            let h = h as usize;
            let op = if self.reduce[h] { Op::Reduce } else { Op::Copy };
            let link = topo.link(self.link[h] as usize);
            plan.transfers.push(Transfer::new(
                self.chunk[h] as usize,
                link.src,
                link.dst,
                started,
                now,
                op,
            ));
            touched.push(self.link[h] as usize);
            for &w in &self.next[self.next_start[h] as usize..self.next_start[h + 1] as usize] {
                let w = w as usize;
                waits[w] -= 1;
                if waits[w] == 0 {
                    let link = self.link[w] as usize;
                    ready[link].push(Reverse((self.chunk[w], w as u32)));
                    touched.push(link);
                }
            }
            busy[self.link[h] as usize] = false;
            for link in touched.drain(..) {
                if !busy[link] {
                    if let Some(Reverse((_, w))) = ready[link].pop() {
                        busy[link] = true;
                        begin(w as usize, now, &mut events)?;
                    }
                }
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Baseline;
    use crate::bounds::Bounds;
    use crate::collective::{Collective, CollectiveKind};
    use crate::schedule::check;
    use crate::sim::simulate_schedule;
    use crate::topology::{parse_spec, SpecDefaults, Topology};

    fn all_reduce(spec: &str, k: usize, bytes: u64) -> (Topology, Collective) {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let c = Collective::over_all(&topo, CollectiveKind::AllReduce, None, k, bytes).unwrap();
        (topo, c)
    }

    /// The list-scheduled trees are a correct, contention-free All-Reduce, Broadcast and
    /// Reduce (the checker replays every contribution), and the simulator, which keeps
    /// each link's order, times them exactly as planned.
    #[test]
    fn trees_are_checked_collectives_the_simulator_times_as_planned() {
        for spec in [
            "ring:5",
            "mesh:3x3",
            "mesh:2x5",
            "torus:4x4",
            "hypercube:3",
            "dragonfly:4x5,bw=400:200",
            "multi:R4xF4,bw=25:100",
        ] {
            for kind in Baseline::Trees.kinds() {
                for k in [1, 3] {
                    checked_as_planned(spec, *kind, k);
                }
            }
        }
        // A Broadcast's or Reduce's trees carry chunks one way: links without a reverse
        // serve them (a one-way ring; one crossed with a fully connected dimension).
        for spec in ["uniring:6", "multi:U4xF4,bw=100:25"] {
            for kind in [CollectiveKind::Broadcast, CollectiveKind::Reduce] {
                checked_as_planned(spec, kind, 2);
            }
        }
    }

    /// Checks the trees of `kind` on `spec` with `k` chunks per NPU (rooted at NPU 3) and
    /// holds the simulator's time to the checked one.
    fn checked_as_planned(spec: &str, kind: CollectiveKind, k: usize) {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let root = kind.has_root().then_some(3);
        let c = Collective::over_all(&topo, kind, root, k, 1 << 20).unwrap();
        let schedule = Baseline::Trees.schedule(&topo, c.spec()).unwrap();
        let report = check(&schedule, &topo).unwrap();
        let simulated = simulate_schedule(&topo, &schedule).unwrap().time_ps;
        assert_eq!(simulated, report.collective_time_ps, "{spec} {kind} K={k}");
    }

    /// Every chunk crosses each edge of its tree once each way, N - 1 edges a tree, so
    /// on a mesh whose links are alike the packing is balanced when every directed link
    /// carries within one chunk of chunks x (N - 1) / edges.
    #[test]
    fn the_packing_loads_alike_links_evenly() {
        let (topo, c) = all_reduce("mesh:4x4", 4, 1 << 20);
        let schedule = Baseline::Trees.schedule(&topo, c.spec()).unwrap();
        // 2K chunks per NPU: 16 x 8 chunks, 15 edges each, over 24 edges.
        let per_edge = (16 * 8 * 15) as f64 / 24.0;
        let mut carried = vec![0usize; topo.links().len()];
        for t in &schedule.transfers {
            let link = topo
                .links()
                .iter()
                .position(|l| l.src == t.src() && l.dst == t.dst())
                .unwrap();
            carried[link] += 1;
        }
        for (link, &n) in carried.iter().enumerate() {
            assert!((n as f64 - per_edge).abs() <= 1.0, "link {link}: {n}");
        }
    }

    /// On a mesh the corners (two links) limit a Reduce-Scatter or All-Gather alone, but
    /// trees overlap the two: at 1 GiB a 4x4 mesh comes within 7% of the traffic bound
    /// (every link busy throughout), where the matcher's composition reaches 0.89.
    #[test]
    fn a_mesh_all_reduce_comes_near_the_traffic_bound() {
        let (topo, c) = all_reduce("mesh:4x4", 16, 1 << 30);
        let schedule = Baseline::Trees.schedule(&topo, c.spec()).unwrap();
        let time = check(&schedule, &topo).unwrap().collective_time_ps;
        let efficiency = Bounds::new(&topo, &c).efficiency(time);
        assert!(efficiency > 0.93, "{efficiency}");
    }

    /// A torus node has four links out and four in: four arc-disjoint arborescences from
    /// the root exist (Edmonds), so a Broadcast (or, reversed, a Reduce) can reach the cut
    /// bound (the best bound here), the root's links busy throughout. The packed trees come
    /// within 7%.
    #[test]
    fn a_torus_broadcast_and_reduce_come_near_the_cut_bound() {
        let topo = parse_spec("torus:4x4", &SpecDefaults::default()).unwrap();
        for kind in [CollectiveKind::Broadcast, CollectiveKind::Reduce] {
            let c = Collective::over_all(&topo, kind, Some(5), 16, 1 << 30).unwrap();
            let schedule = Baseline::Trees.schedule(&topo, c.spec()).unwrap();
            let time = check(&schedule, &topo).unwrap().collective_time_ps;
            let efficiency = Bounds::new(&topo, &c).efficiency(time);
            assert!(efficiency > 0.93, "{kind}: {efficiency}");
        }
    }

    #[test]
    fn trees_need_two_way_links_between_npus() {
        let (topo, c) = all_reduce("preset:dgx-a100", 1, 1 << 20);
        let e = Baseline::Trees.schedule(&topo, c.spec()).unwrap_err();
        assert!(e.to_string().contains("switches"), "{e}");
        // A one-way ring crossed with a fully connected dimension: the ring's links run
        // one way only, and the rest join only the NPUs of each fully connected group.
        let (topo, c) = all_reduce("multi:U4xF4,bw=100:25", 1, 1 << 20);
        let e = Baseline::Trees.schedule(&topo, c.spec()).unwrap_err();
        assert!(e.to_string().contains("do not join all 16 NPUs"), "{e}");
    }
}
