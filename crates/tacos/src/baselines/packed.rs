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
//! (chunks over bandwidth; an edge's load is that of the busiest link its chunk crosses,
//! both ways for All-Reduce), grown from a centre of the graph (the root) by Prim's rule
//! with ties to the shallower NPU, so that trees stay shallow where loads are equal. This
//! greedy packing is the multiplicative-weights packing with linear lengths; chunks spread
//! like the fractional packing once there are a few per edge. The hops are then
//! list-scheduled: each link, when free, sends the oldest chunk (lowest index) whose data
//! is ready there and whose other links are free. On links between NPUs the simulator
//! keeps each link's order, so it times the schedule as planned; a fixed step order
//! instead makes a link wait, in order, for a chunk another link is still delaying.
//!
//! Through switches (Broadcast and Reduce: an All-Reduce's trees lost to the matcher on
//! every switched network measured, so they are not tried there) an edge joins two NPUs
//! the topology routes between (`RouteCache`, as the checker and the simulator route
//! them), and its hop holds every link of the route, cut-through. A switch forwards one copy per destination (it neither sums nor
//! multicasts), so a tree branches at NPUs only and crosses switches; edges through the
//! same switch port share that link's load, so the port is loaded as each edge joins, and
//! the packing spreads a Broadcast over every NIC and NVLink port of a node rather than
//! the root's alone.

use super::{root_rank, Plan};
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::{later, link_time_ps, Op, Transfer};
use crate::topology::{Link, LinkId, RouteCache, Topology};
use crate::units::Picos;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap};

/// Most edge visits a packing may take: each tree's growth looks at every edge about once.
/// Through switches every pair of NPUs a route joins is an edge, so a large fabric's
/// trees would take minutes; the search keeps the matcher's schedule there.
const MAX_EDGE_VISITS: u64 = 1 << 24;

/// One undirected edge between members (ranks): the route each way (an index into
/// `Graph::routes`; none where no link or route runs that way).
struct Edge {
    a: usize,
    b: usize,
    routes: [Option<usize>; 2],
}

/// The links one way along an edge holds, and the one link they behave as cut-through
/// (`Topology::route_link`: from NPU to NPU, the summed latency, the narrowest bandwidth).
struct Route {
    links: Vec<LinkId>,
    through: Link,
}

/// The links each way between a pair of members (lower rank, higher rank).
type Ways = [Option<Vec<LinkId>>; 2];

/// The members' edges, each member's edges (by index), and the routes they run along.
struct Graph {
    edges: Vec<Edge>,
    incident: Vec<Vec<usize>>,
    routes: Vec<Route>,
}

impl Graph {
    /// The members' edges: pairs joined both ways only, unless `one_way` (a tree that
    /// carries its chunks one way only may take a link without its reverse).
    fn new(topo: &Topology, spec: &CollectiveSpec, one_way: bool) -> Graph {
        let pairs = if topo.has_switches() {
            routed_pairs(topo, spec)
        } else {
            linked_pairs(topo, spec)
        };
        let mut graph = Graph {
            edges: Vec::new(),
            incident: vec![Vec::new(); spec.npus.len()],
            routes: Vec::new(),
        };
        for ((a, b), ways) in pairs {
            if !(one_way || ways.iter().all(Option::is_some)) {
                continue;
            }
            let mut routes = [None, None];
            for (way, links) in ways.into_iter().enumerate() {
                if let Some(links) = links {
                    routes[way] = Some(graph.routes.len());
                    graph.routes.push(Route {
                        through: topo.route_link(links.iter().copied()),
                        links,
                    });
                }
            }
            graph.incident[a].push(graph.edges.len());
            graph.incident[b].push(graph.edges.len());
            graph.edges.push(Edge { a, b, routes });
        }
        graph
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

    /// The route over edge `e` leaving member `from`.
    fn route_from(&self, e: usize, from: usize) -> Option<usize> {
        self.edges[e].routes[self.way(e, from)]
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

/// Each NPU's rank among `spec`'s members (`usize::MAX` for the others).
fn ranks(topo: &Topology, spec: &CollectiveSpec) -> Vec<usize> {
    let mut rank = vec![usize::MAX; topo.npus()];
    for (r, &npu) in spec.npus.iter().enumerate() {
        rank[npu] = r;
    }
    rank
}

/// The fastest link each way between two members (of parallel links) on a network of
/// NPUs, by (lower rank, higher rank).
fn linked_pairs(topo: &Topology, spec: &CollectiveSpec) -> Vec<((usize, usize), Ways)> {
    let rank = ranks(topo, spec);
    let mut both: HashMap<(usize, usize), [Option<LinkId>; 2]> = HashMap::new();
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
    let mut pairs: Vec<((usize, usize), Ways)> = both
        .into_iter()
        .map(|(key, ways)| (key, ways.map(|l| l.map(|l| vec![l]))))
        .collect();
    pairs.sort_unstable_by_key(|&(key, _)| key);
    pairs
}

/// The way each direction between two members runs where switches stand between NPUs:
/// as a transfer between them is routed (a link between the NPUs where there is one, else
/// through switches), by (lower rank, higher rank).
fn routed_pairs(topo: &Topology, spec: &CollectiveSpec) -> Vec<((usize, usize), Ways)> {
    let n = spec.npus.len();
    let mut routes = RouteCache::new(topo);
    let mut pairs = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let ab = routes
                .between(spec.npus[a], spec.npus[b])
                .map(<[_]>::to_vec);
            let ba = routes
                .between(spec.npus[b], spec.npus[a])
                .map(<[_]>::to_vec);
            if ab.is_some() || ba.is_some() {
                pairs.push(((a, b), [ab, ba]));
            }
        }
    }
    pairs
}

/// Edges a packing of `spec` may look at: every pair of members through switches, else
/// one per pair of opposite links at most.
fn edges_at_most(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let n = spec.npus.len() as u64;
    if topo.has_switches() {
        n * n.saturating_sub(1) / 2
    } else {
        topo.links().len() as u64
    }
}

/// Bytes the edges and routes of a packing of `spec` hold at most (a route through
/// switches has at most `MAX_ROUTE_LINKS` links).
pub(super) fn graph_bytes(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let per_edge = if topo.has_switches() {
        2 * (crate::topology::limits::MAX_ROUTE_LINKS * std::mem::size_of::<LinkId>()
            + std::mem::size_of::<Route>())
    } else {
        2 * (std::mem::size_of::<LinkId>() + std::mem::size_of::<Route>())
    } + std::mem::size_of::<Edge>()
        + 2 * std::mem::size_of::<usize>();
    edges_at_most(topo, spec).saturating_mul(per_edge as u64)
}

/// The links' loads as the trees so far cross them: how long each is held for the bytes
/// it carries. A hop holds every link of its route for as long as the route's narrowest
/// link takes (cut-through), so a port shared by many routes is as busy as their sum.
struct Loads<'g> {
    graph: &'g Graph,
    legs: Legs,
    /// How long a chunk holds each route's links for its bytes.
    weight: &'g [Picos],
    held: Vec<Picos>,
}

impl Loads<'_> {
    /// The routes a chunk of edge `e` takes when `from` is the end already in its tree:
    /// down from it, up into it, or both (`None` where no route runs that way).
    fn crossed(&self, e: usize, from: usize) -> impl Iterator<Item = Option<usize>> + use<> {
        let routes = self.graph.edges[e].routes;
        let down = self.graph.way(e, from);
        let ways = [
            self.legs.down().then_some(routes[down]),
            self.legs.up().then_some(routes[1 - down]),
        ];
        ways.into_iter().flatten()
    }

    /// The load of taking edge `e` from `from`: how long the busiest link its chunk
    /// crosses is held already; `None` where no route runs a way it must go.
    fn of(&self, e: usize, from: usize) -> Option<Picos> {
        let mut busiest = 0;
        for route in self.crossed(e, from) {
            for &l in &self.graph.routes[route?].links {
                busiest = busiest.max(self.held[l]);
            }
        }
        Some(busiest)
    }

    /// Holds every link edge `e` takes its chunk over, joined from `from`.
    fn take(&mut self, e: usize, from: usize) {
        for route in self.crossed(e, from).flatten() {
            for &l in &self.graph.routes[route].links {
                self.held[l] = self.held[l].saturating_add(self.weight[route]);
            }
        }
    }
}

/// A spanning tree over the members: each one's parent and the edge to it (none at the
/// root), and depth.
struct Tree {
    root: usize,
    parent: Vec<Option<(usize, usize)>>,
    depth: Vec<usize>,
}

/// A candidate edge in Prim's heap: least load first, then the shallower end in the
/// tree, then the lower edge index.
#[derive(PartialEq, Eq)]
struct Candidate {
    load: Picos,
    depth: usize,
    edge: usize,
    to: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.load
            .cmp(&other.load)
            .then(self.depth.cmp(&other.depth))
            .then(self.edge.cmp(&other.edge))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The minimum spanning tree grown from `root` under `loads`, each edge counted on its
/// links as it joins (edges into members no route reaches the way a chunk must go stay
/// out, and those members without a parent).
fn grow(loads: &mut Loads, root: usize) -> Tree {
    let graph = loads.graph;
    let n = graph.incident.len();
    let mut tree = Tree {
        root,
        parent: vec![None; n],
        depth: vec![0; n],
    };
    let mut joined = vec![false; n];
    let mut heap = BinaryHeap::new();
    let mut next = Some((root, None));
    while let Some((v, link)) = next.take() {
        if let Some((from, edge)) = link {
            tree.parent[v] = Some((from, edge));
            tree.depth[v] = tree.depth[from] + 1;
            loads.take(edge, from);
        }
        joined[v] = true;
        // An edge no route runs along the way the chunk would go is never offered.
        for &e in &graph.incident[v] {
            if let Some(load) = loads.of(e, v) {
                heap.push(Reverse(Candidate {
                    load,
                    depth: tree.depth[v],
                    edge: e,
                    to: graph.other(e, v),
                }));
            }
        }
        while let Some(Reverse(c)) = heap.pop() {
            if joined[c.to] {
                continue;
            }
            // Loads only grow; through a switch the tree's own edges share its ports, so
            // an edge whose load grew since it was offered is offered again at its new one.
            let from = graph.other(c.edge, c.to);
            let now = loads.of(c.edge, from).unwrap_or(Picos::MAX);
            if now > c.load {
                heap.push(Reverse(Candidate { load: now, ..c }));
                continue;
            }
            next = Some((c.to, Some((from, c.edge))));
            break;
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
    if legs == Legs::Both && topo.has_switches() {
        return Err(Error::baseline(
            "trees",
            format!(
                "trees: an All-Reduce's trees are not packed through switches ({} has them): the matcher's Reduce-Scatter and All-Gather were faster on every switched network measured",
                topo.name()
            ),
        ));
    }
    let collective = Collective::new(topo, spec.clone())?;
    let chunks = collective.chunk_count();
    let visits = edges_at_most(topo, spec).saturating_mul(chunks as u64);
    if visits > MAX_EDGE_VISITS {
        return Err(Error::baseline(
            "trees",
            format!(
                "trees: packing {chunks} trees over up to {} edges of {} takes {visits} edge visits, more than the {MAX_EDGE_VISITS} a packing is allowed; fewer chunks or NPUs fit",
                edges_at_most(topo, spec),
                topo.name()
            ),
        ));
    }
    let graph = Graph::new(topo, spec, legs != Legs::Both);
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
    let legs_per_edge = if legs == Legs::Both { 2 } else { 1 };
    let mut hops = Hops::with_capacity(legs_per_edge * (n - 1) * chunks);
    // A Reduce is also laid out as the Broadcast down the same trees, each hop crossing its
    // edge up, to be reversed in time: list scheduling forks well and joins less well, so
    // the faster of the two is kept.
    let mut mirrored = (legs == Legs::Up).then(|| Hops::with_capacity((n - 1) * chunks));
    // A chunk's time along each route, and the part of it its bytes take: loads leave
    // latencies out, so the packing spreads chunks by bandwidth.
    let bytes = collective.chunk_bytes();
    let took = graph
        .routes
        .iter()
        .map(|r| link_time_ps(&r.through, bytes))
        .collect::<Result<Vec<Picos>>>()?;
    let weights = graph
        .routes
        .iter()
        .map(|r| {
            let bandwidth_only = Link {
                latency_us: 0.0,
                ..r.through
            };
            link_time_ps(&bandwidth_only, bytes)
        })
        .collect::<Result<Vec<Picos>>>()?;
    let mut loads = Loads {
        graph: &graph,
        legs,
        weight: &weights,
        held: vec![0; topo.links().len()],
    };
    for chunk in 0..chunks {
        let tree = grow(&mut loads, roots[chunk % roots.len()]);
        if tree.parent.iter().filter(|p| p.is_some()).count() < n - 1 {
            return Err(unjoined());
        }
        hops.add(&graph, &tree, chunk, legs, false)?;
        if let Some(mirrored) = &mut mirrored {
            mirrored.add(&graph, &tree, chunk, Legs::Down, true)?;
        }
    }
    let planned = hops.schedule(topo, &graph, &took)?;
    let Some(mirrored) = mirrored else {
        return Ok(planned);
    };
    let reversed = reversed_in_time(mirrored.schedule(topo, &graph, &took)?);
    Ok(if makespan(&reversed) < makespan(&planned) {
        reversed
    } else {
        planned
    })
}

/// When the plan's last transfer ends.
fn makespan(plan: &Plan) -> Picos {
    plan.transfers.iter().map(|t| t.end_ps).max().unwrap_or(0)
}

/// `plan` run backwards: each transfer starts as long before the end as it ended after
/// the start. Links carry what they carried, each at most one chunk at a time.
fn reversed_in_time(mut plan: Plan) -> Plan {
    let end = makespan(&plan);
    for t in &mut plan.transfers {
        (t.start_ps, t.end_ps) = (end - t.end_ps, end - t.start_ps);
    }
    plan
}

/// The hops of every chunk's tree and what each waits for.
struct Hops {
    /// Per hop: its chunk, its route (in `Graph::routes`), and whether it reduces.
    chunk: Vec<u32>,
    route: Vec<u32>,
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
            route: Vec::with_capacity(hops),
            reduce: Vec::with_capacity(hops),
            waits: Vec::with_capacity(hops),
            next_start: vec![0],
            next: Vec::with_capacity(2 * hops),
        }
    }

    /// Chunk `chunk`'s reductions up `tree` and broadcasts down it, as `legs` says. A
    /// member's reduction waits for its children's; a broadcast from the root waits for
    /// the root's children's reductions (if any), any other for the broadcast into its
    /// sender. `mirrored`: each hop crosses its edge the other way and reduces (a
    /// Reduce's hops in the order of its Broadcast, to be reversed in time).
    fn add(
        &mut self,
        graph: &Graph,
        tree: &Tree,
        chunk: usize,
        legs: Legs,
        mirrored: bool,
    ) -> Result<()> {
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
                // `grow` takes an edge only the way a route runs.
                let from = if mirrored { graph.other(e, from) } else { from };
                let route = graph.route_from(e, from).ok_or_else(|| {
                    Error::baseline("trees", "trees: a tree took an edge no route runs along")
                })?;
                self.chunk.push(chunk as u32);
                self.route.push(route as u32);
                self.reduce.push(reduce || mirrored);
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

    /// List scheduling: every hop starts when its data is there and every link of its
    /// route is free, each link taking the lowest chunk ready for it whose other links
    /// are free too.
    fn schedule(self, topo: &Topology, graph: &Graph, took: &[Picos]) -> Result<Plan> {
        let hops = self.chunk.len();
        let links_of = |h: usize| graph.routes[self.route[h] as usize].links.as_slice();
        let mut waits = self.waits;
        // Per link, the ready hops crossing it that have not started: (chunk, hop).
        let mut ready: Vec<BTreeSet<(u32, u32)>> = vec![BTreeSet::new(); topo.links().len()];
        let mut busy = vec![false; topo.links().len()];
        // Hops under way: (end, hop, start).
        let mut events: BinaryHeap<Reverse<(Picos, u32, Picos)>> = BinaryHeap::new();
        let mut plan = Plan::default();
        plan.transfers.reserve(hops);
        // Starts on `link` (free) the first hop ready there whose other links are free.
        let start_on = |link: usize,
                        now: Picos,
                        ready: &mut [BTreeSet<(u32, u32)>],
                        busy: &mut [bool],
                        events: &mut BinaryHeap<_>| {
            let found = ready[link]
                .iter()
                .find(|&&(_, h)| links_of(h as usize).iter().all(|&l| !busy[l]))
                .copied();
            if let Some((chunk, h)) = found {
                for &l in links_of(h as usize) {
                    ready[l].remove(&(chunk, h));
                    busy[l] = true;
                }
                let end = later(now, took[self.route[h as usize] as usize], || {
                    "trees: a hop's end".to_string()
                })?;
                events.push(Reverse((end, h, now)));
            }
            Ok::<(), Error>(())
        };
        for (h, _) in waits.iter().enumerate().filter(|(_, &w)| w == 0) {
            for &l in links_of(h) {
                ready[l].insert((self.chunk[h], h as u32));
            }
        }
        for link in 0..ready.len() {
            if !busy[link] {
                start_on(link, 0, &mut ready, &mut busy, &mut events)?;
            }
        }
        // Links freed or given a ready hop by the hop that just ended.
        let mut touched = Vec::new();
        while let Some(Reverse((now, h, started))) = events.pop() {
            let h = h as usize;
            let op = if self.reduce[h] { Op::Reduce } else { Op::Copy };
            let route = &graph.routes[self.route[h] as usize];
            plan.transfers.push(Transfer::new(
                self.chunk[h] as usize,
                route.through.src,
                route.through.dst,
                started,
                now,
                op,
            ));
            touched.extend_from_slice(&route.links);
            for &w in &self.next[self.next_start[h] as usize..self.next_start[h + 1] as usize] {
                let w = w as usize;
                waits[w] -= 1;
                if waits[w] == 0 {
                    for &l in links_of(w) {
                        ready[l].insert((self.chunk[w], w as u32));
                        touched.push(l);
                    }
                }
            }
            for &l in &route.links {
                busy[l] = false;
            }
            for link in touched.drain(..) {
                if !busy[link] {
                    start_on(link, now, &mut ready, &mut busy, &mut events)?;
                }
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Baseline;
    use super::MAX_EDGE_VISITS;
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
        // Through switches (Broadcast and Reduce): one, a node's NVSwitch and its rails, a
        // leaf-spine fabric, a three-level one.
        for spec in [
            "switch:6",
            "preset:dgx-a100,nodes=2",
            "clos:4x3,spine=2,oversub=2",
            "rfs:2x2x4,bw=200:100:50",
        ] {
            for kind in [CollectiveKind::Broadcast, CollectiveKind::Reduce] {
                for k in [1, 3] {
                    checked_as_planned(spec, kind, k);
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

    /// A rail-optimized cluster's Broadcast is bounded by a node's ingress, its 8 NICs
    /// together (the cut bound): trees that crossed to the other nodes only through the
    /// root's own NIC would take 8 times as long. Packed through the switches, the trees
    /// enter each node over every NIC and spread there over NVLink.
    #[test]
    fn a_broadcast_through_switches_spreads_over_every_nic() {
        let topo = parse_spec("preset:dgx-h100,nodes=4", &SpecDefaults::default()).unwrap();
        for kind in [CollectiveKind::Broadcast, CollectiveKind::Reduce] {
            let c = Collective::over_all(&topo, kind, Some(9), 8, 1 << 30).unwrap();
            let schedule = Baseline::Trees.schedule(&topo, c.spec()).unwrap();
            let time = check(&schedule, &topo).unwrap().collective_time_ps;
            let efficiency = Bounds::new(&topo, &c).efficiency(time);
            assert!(efficiency > 0.8, "{kind}: {efficiency}");
        }
    }

    #[test]
    fn trees_need_two_way_links_between_npus() {
        let (topo, c) = all_reduce("preset:dgx-a100", 1, 1 << 20);
        let e = Baseline::Trees.schedule(&topo, c.spec()).unwrap_err();
        assert!(e.to_string().contains("not packed through switches"), "{e}");
        // A one-way ring crossed with a fully connected dimension: the ring's links run
        // one way only, and the rest join only the NPUs of each fully connected group.
        let (topo, c) = all_reduce("multi:U4xF4,bw=100:25", 1, 1 << 20);
        let e = Baseline::Trees.schedule(&topo, c.spec()).unwrap_err();
        assert!(e.to_string().contains("do not join all 16 NPUs"), "{e}");
    }

    /// Through switches every pair of NPUs is an edge: 512 GPUs have 130,816, and a
    /// Broadcast's 1,024 trees would look at them 134 million times, more than a packing
    /// may.
    #[test]
    fn a_packing_past_its_edge_visits_is_refused_before_it_starts() {
        let topo = parse_spec("preset:dgx-h100,nodes=64", &SpecDefaults::default()).unwrap();
        let c =
            Collective::over_all(&topo, CollectiveKind::Broadcast, Some(0), 1, 1 << 20).unwrap();
        let e = Baseline::Trees.schedule(&topo, c.spec()).unwrap_err();
        let message = e.to_string();
        assert!(
            message.contains(&(130_816u64 * 1_024).to_string()),
            "{message}"
        );
        assert!(message.contains(&MAX_EDGE_VISITS.to_string()), "{message}");
    }
}
