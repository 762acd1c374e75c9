//! The event-driven link-chunk matcher.
//!
//! State is kept sparse where the topology is sparse: per link, a pool of chunks its source
//! holds that are useful to its destination (filled when the source receives a chunk,
//! cleaned lazily), so a matching step costs the destination's in-degree plus the few pool
//! entries it samples, never a scan of every (NPU, chunk) pair. Per (NPU, chunk) the matcher
//! keeps only when the NPU got the chunk and whether it wants it.
//!
//! A chunk is useful to an NPU that wants it and lacks it, or, when some chunks must cross
//! NPUs that do not need them (a sub-collective, Gather, Scatter, All-to-All), to a relay
//! that is strictly closer to a target than every copy so far (see `relay`).

use super::bits::row_word;
use super::calendar::Arrivals;
use super::fabric::{Fabric, Routes};
use super::fast::FastPaths;
use super::gates::Gates;
use super::matching::Draws;
use super::outbox::{Outbox, Sink};
use super::ports::match_ports;
use super::prefetch;
use super::relay::Relays;
use super::trees::{Sprout, TreeShape, Trees};
use crate::collective::ChunkId;
use crate::error::{Error, Result};
use crate::hugepages::table;
use crate::schedule::{later, link_time_ps, Op, Transfer};
use crate::topology::{Link, LinkId, NpuId, Topology};
use crate::units::{ps_to_us, Picos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

mod round;

const NEVER: Picos = Picos::MAX;
const IDLE: usize = usize::MAX;
const UNPLANNED: u32 = u32::MAX;
/// A physical link no channel holds.
const FREE: u32 = u32::MAX;
/// Most (NPU, chunk) pairs one matching tracks (chunk ids must also fit pools' u32).
const MAX_STATES: usize = 1 << 31;
/// Pool entries compared when picking a relayed chunk.
const URGENCY_SAMPLES: usize = 4;
/// How many destinations ahead of the one being matched its pools are prefetched (their
/// headers twice as far ahead).
const PREFETCH_AHEAD: usize = 2;
/// Most links whose pools are prefetched for one NPU: a matching draws from every pool of
/// a mesh NPU, but only from a few of the many channels of an NPU behind a switch, whose
/// pools would crowd the cache.
const PREFETCH_MAX_LINKS: usize = 8;
/// A gate's receiver needing fewer than one chunk in this many is matched chunk first
/// (its needed chunks, then a free holder of each), else sender first.
const SPARSE_NEED: usize = 16;
/// Senders (or chunks) one gate's search tries before it leaves the gate idle until a
/// sender frees or gets something; the search that ends a stalled matching tries all.
const GATE_PROBES: usize = 64;
/// Fewest destinations a thread takes on at once in a parallel matching round: below,
/// handing them to another thread costs more than it saves.
const PARALLEL_GRAIN: usize = 1024;

/// A transfer a destination's matching decided, started once the round has matched every
/// destination (`round`'s `Apart`).
#[derive(Clone, Copy, Debug)]
struct Decided {
    link: LinkId,
    chunk: usize,
    arrival: Picos,
}

/// What drawing one pool entry came to.
enum Drawn {
    /// The entry was of no use (stale, or the chunk comes as soon by another way) and is
    /// gone; the pool may hold more.
    Dropped,
    /// The chunk goes over this link.
    Sent(Decided),
}

/// One chunk as the matcher sees it.
#[derive(Clone, Debug)]
pub(super) struct ChunkTask<'a> {
    /// NPUs that get the chunk at `release`.
    pub pre: &'a [NpuId],
    /// NPUs that must end with it.
    pub post: &'a [NpuId],
    /// Index into `Problem::class_bytes`: the chunk's size.
    pub class: usize,
    /// When the chunk becomes available at its `pre` NPUs.
    pub release: Picos,
}

/// Everything the matcher must achieve, and what it must work around.
#[derive(Clone, Debug)]
pub(super) struct Problem<'a> {
    pub chunks: Vec<ChunkTask<'a>>,
    /// Bytes of a chunk of each class (concurrent collectives may differ).
    pub class_bytes: Vec<f64>,
    /// Per physical link, sorted disjoint [start, end) intervals already taken by other
    /// transfers; empty when nothing is reserved.
    pub reserved: Vec<Vec<(Picos, Picos)>>,
    /// Whether each chunk's way is planned before matching: a tree (`trees`) where every
    /// chunk has one holder and needs no relay, a path (`paths`) where each has one target.
    pub planned: bool,
    /// How planned trees are grown.
    pub shape: TreeShape,
}

/// What happens at an event time besides arrivals (handled after them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A chunk becomes available at its `pre` NPUs.
    Release(ChunkId),
    /// A reservation on this physical link ends.
    Wake(LinkId),
}

/// Whether the first `explicit` of each class's `links` cost entries are all the same.
fn uniform_costs(cost: &[Picos], links: usize, explicit: usize) -> bool {
    cost.chunks(links.max(1))
        .all(|class| class[..explicit].iter().all(|&c| c == class[0]))
}

/// Whether some chunk must cross NPUs that do not want it (relays).
fn needs_relays(topo: &Topology, problem: &Problem<'_>) -> bool {
    let alive = topo.alive_npus().len();
    problem.chunks.iter().any(|c| c.post.len() < alive)
}

/// `fabric`, or where it has gates and the problem needs relays or plans its chunks' ways
/// (which gates do not serve), the same channels with a channel per pair of group members,
/// in `paired`.
fn serving<'f>(
    fabric: &'f Fabric<'f>,
    problem: &Problem<'_>,
    paired: &'f mut Option<Fabric<'f>>,
) -> Result<&'f Fabric<'f>> {
    if fabric.gates.is_some() && (problem.planned || needs_relays(&fabric.view, problem)) {
        return Ok(paired.insert(fabric.paired()?));
    }
    Ok(fabric)
}

/// Each chunk's planned tree on the fabric's view, where `problem` asks for them and every
/// chunk has one holder and needs no relay (`relay_free`): the loads balanced are those of
/// the physical links (`routes`), `cost` a chunk's time per class and view link.
fn plan_trees(
    view: &Topology,
    routes: Option<&Routes>,
    problem: &Problem<'_>,
    cost: &[Picos],
    links: usize,
    relay_free: bool,
    seed: u64,
) -> Option<Trees> {
    if !problem.planned || !relay_free || problem.chunks.iter().any(|c| c.pre.len() != 1) {
        return None;
    }
    let sprouts: Vec<Sprout> = problem
        .chunks
        .iter()
        .map(|c| Sprout {
            root: c.pre[0],
            cost: &cost[c.class * links..(c.class + 1) * links],
        })
        .collect();
    Some(match routes {
        Some(r) => Trees::plan(
            view,
            r.physical(),
            |l| r.links(l),
            &sprouts,
            seed,
            problem.shape,
        ),
        None => {
            let own: Vec<u32> = (0..links as u32).collect();
            Trees::plan(view, links, |l| &own[l..=l], &sprouts, seed, problem.shape)
        }
    })
}

/// Matches `problem` on `fabric` and returns the transfers that carried a useful chunk.
pub(super) fn match_chunks(
    fabric: &Fabric<'_>,
    problem: &Problem<'_>,
    seed: u64,
) -> Result<Vec<Transfer>> {
    let mut paired = None;
    let fabric = serving(fabric, problem, &mut paired)?;
    let mut matcher = Matcher::new(fabric, problem, seed)?;
    // Every postcondition not met at the start takes a transfer, and few take more
    // (relays, replaced copies): reserved at once, the list does not double past its
    // need (the transfers are most of what a large matching holds).
    let mut kept = Vec::with_capacity(matcher.unsatisfied);
    matcher.run(&mut |t| {
        kept.push(t);
        Ok(())
    })?;
    kept.shrink_to_fit();
    if matcher.relays.is_some() {
        matcher.prune_dead_ends(&mut kept);
    }
    Ok(kept)
}

/// Matches `problem` on `fabric`, handing each transfer that carried a useful chunk to
/// `sink` in start order as soon as it is settled, and returns (transfers, when the last
/// ends). Nothing per transfer is held beyond those in flight; so a problem where chunks
/// cross NPUs that do not want them, whose dead ends are pruned from the whole list
/// afterwards, is refused.
pub(super) fn match_chunks_into(
    fabric: &Fabric<'_>,
    problem: &Problem<'_>,
    seed: u64,
    sink: &mut Sink<'_>,
) -> Result<(u64, Picos)> {
    let mut matcher = Matcher::new(fabric, problem, seed)?;
    if matcher.relays.is_some() {
        return Err(Error::Synthesis(
            "a streamed synthesis needs every chunk wanted by every NPU it crosses \
             (All-Gather or Broadcast over every alive NPU)"
                .into(),
        ));
    }
    matcher.run(sink)
}

/// The matcher. `topo` is the fabric's view: its links are channels (see `fabric`), and
/// "link" below means a channel unless it says physical link.
struct Matcher<'a> {
    topo: &'a Topology,
    /// The physical links each channel holds, where channels go through switches.
    routes: Option<&'a Routes>,
    /// The large star groups, matched by port: gate g is channel `explicit + g`.
    gates: Option<&'a Gates>,
    /// How many channels are links of `topo` (the rest are gates).
    explicit: usize,
    /// Per gate, while it carries a chunk: the sender's gate in the group.
    gate_src: Vec<u32>,
    /// Per group of gates, one bit per NPU (`group * npu_words + npu / 64`): the members
    /// whose link up to the switch is free.
    free_up: Vec<u64>,
    npu_words: usize,
    /// Per group: the words of its row in `free_up` that hold members, and how many
    /// members' links up are free.
    span: Vec<(usize, usize)>,
    free_ups: Vec<u32>,
    /// Per group: gates whose search found nothing (woken when a sender frees or gets a
    /// chunk), and per gate whether it is listed.
    idle: Vec<Vec<u32>>,
    in_idle: Vec<bool>,
    /// Set while a stalled matching searches every gate without a bound.
    exhaustive: bool,
    /// Per physical link, the channel holding it while it carries a chunk, or FREE (with
    /// `routes` only).
    link_holder: Vec<u32>,
    problem: &'a Problem<'a>,
    chunks: usize,
    /// NPUs of the view (a row of `holders`).
    npus: usize,
    /// Whether every chunk has the same size (the usual case: no per-chunk class lookups).
    one_class: bool,
    /// Alpha-beta time of one chunk of each class on each link (`class * links + link`).
    cost: Vec<Picos>,
    /// Per link, the time of its most expensive chunk class (used to fit between reservations).
    max_cost: Vec<Picos>,
    /// The outbox's sequence number of the transfer each link carries, or IDLE.
    busy: Vec<usize>,
    /// Per link, the chunk it carries and when it arrives (while `busy`): what
    /// `in_flight_arrival` reads for every candidate chunk, kept beside `busy` rather than
    /// fetched from the outbox.
    carrying: Vec<(usize, Picos)>,
    /// Per physical link, the first reservation that has not ended yet.
    next_reserved: Vec<usize>,
    /// Per physical link, when a wake-up is already scheduled (NEVER if none).
    wake_at: Vec<Picos>,
    /// When each NPU got each chunk (`npu * chunks + chunk`), NEVER if it has not, for
    /// `replacement`. Kept only where links differ in cost: where every chunk takes as
    /// long on every link, a copy that would arrive second is never started
    /// (`in_flight_arrival`), so nothing is ever replaced, and the table (8 bytes and a
    /// cache miss per (NPU, chunk) received) is left out; so it is where every chunk
    /// follows a planned path, as one copy.
    held_since: Vec<Picos>,
    /// Whether each NPU holds each chunk, one bit per (NPU, chunk), for the checks made
    /// on every pool entry.
    held: Vec<u64>,
    /// The same bits by chunk (`chunk * npus + npu`), for the checks that read one chunk
    /// at several NPUs (an NPU's neighbours when it receives a chunk, the sources of the
    /// links into it when it is sent one): on a mesh or torus the neighbours' bits share a
    /// cache line or two here, where by NPU each is a line of its own.
    holders: Vec<u64>,
    /// Whether each NPU must end with each chunk, one bit per (NPU, chunk); empty where
    /// every NPU wants every chunk (All-Gather, Broadcast), which spares a lookup per
    /// link a chunk could be offered over.
    wants: Vec<u64>,
    /// Postconditions not yet met.
    unsatisfied: usize,
    /// Per NPU, the chunks it wants and does not hold yet (kept through switches only).
    missing: Vec<u32>,
    /// Through switches, per physical link: the channel the event's plan gives the
    /// sender's port that link leaves, or UNPLANNED.
    plan_up: Vec<u32>,
    /// Ports planned at this event (to clear afterwards).
    planned: Vec<LinkId>,
    /// Set when some chunk must cross NPUs that do not want it.
    relays: Option<Relays>,
    /// The two link lists a round matched in turn works in, kept between rounds (a round
    /// is matched at every event).
    spare_links: (Vec<LinkId>, Vec<LinkId>),
    /// Each chunk's planned tree, where the problem asks for them (`Problem::planned`).
    trees: Option<Trees>,
    /// Set when some links are much slower than others.
    fast: Option<FastPaths>,
    /// Per link (at `pool_slot[link]`): chunks its source holds that were useful to its
    /// destination when offered. Ordered by destination, so that the pools of the links into
    /// one NPU lie side by side, from `pool_first[npu]` in its `in_links` order, and a
    /// round's destinations split the table into disjoint slices (`round`'s `Apart`).
    pools: Vec<Vec<u32>>,
    pool_slot: Vec<u32>,
    pool_first: Vec<usize>,
    /// Whether a round may match its destinations apart and in parallel: no destination's
    /// matching reads what another's changes (no switch ports, relays, fast paths or
    /// reservations shared between them).
    plain: bool,
    /// Drawn from `rng` at each round: seeds every destination's `Draws`.
    round_seed: u64,
    /// The transfers a plain round decided, kept between rounds.
    decided: Vec<Decided>,
    /// Transfers from their start until their arrival settles them.
    outbox: Outbox,
    /// The link of every chunk in flight, by arrival time.
    arrivals: Arrivals,
    /// Releases and wake-ups, kept apart so the common case stays a heap of plain pairs.
    events: BinaryHeap<Reverse<(Picos, Event)>>,
    /// NPUs whose incoming links may have something to match at the current event.
    dirty: Vec<NpuId>,
    is_dirty: Vec<bool>,
    /// `sort_distinct`'s bitmap for `dirty`, kept between events.
    dirty_bits: Vec<u64>,
    rng: ChaCha8Rng,
}

impl<'a> Matcher<'a> {
    fn new(fabric: &'a Fabric<'a>, problem: &'a Problem<'a>, seed: u64) -> Result<Matcher<'a>> {
        let topo: &'a Topology = &fabric.view;
        let routes = fabric.routes.as_ref();
        let gates = fabric.gates.as_ref();
        let chunks = problem.chunks.len();
        let n = topo.npus();
        let explicit = topo.links().len();
        let gate_count = gates.map_or(0, Gates::len);
        let links = explicit + gate_count;
        if !matches!(chunks.checked_mul(n), Some(states) if states <= MAX_STATES) {
            return Err(Error::Synthesis(format!(
                "{chunks} chunks on {n} NPUs are too many to track"
            )));
        }
        let gate_links: Vec<&Link> = gates.map_or(Vec::new(), |g| {
            (0..g.len()).map(|gate| g.channel(g.group(gate))).collect()
        });
        let channel_links: Vec<&Link> = topo.links().iter().chain(gate_links).collect();
        let cost: Vec<Picos> = problem
            .class_bytes
            .iter()
            .flat_map(|&bytes| channel_links.iter().map(move |l| link_time_ps(l, bytes)))
            .collect::<Result<_>>()?;
        let max_cost = (0..links)
            .map(|l| {
                (0..problem.class_bytes.len())
                    .map(|c| cost[c * links + l])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let relays = needs_relays(topo, problem)
            .then(|| Relays::new(topo, routes, problem, &cost, seed))
            .transpose()?;
        if relays.is_some() && gates.is_some() {
            return Err(Error::Synthesis(
                "relayed chunks are matched on channels per pair, not gates".into(),
            ));
        }
        let trees = plan_trees(topo, routes, problem, &cost, links, relays.is_none(), seed);
        // The fast-path estimate assumes every NPU on a fast route will take the chunk
        // on, which holds when every NPU wants every chunk (no relays); a planned tree
        // sends each chunk one way only, which no estimate may hold back.
        let fast = if problem.class_bytes.len() == 1 && relays.is_none() && trees.is_none() {
            FastPaths::new(topo, &cost, chunks)
        } else {
            None
        };
        let physical = routes.map_or(links, Routes::physical);
        let wants_all = problem.chunks.iter().all(|c| c.post.len() == n);
        let uniform = uniform_costs(&cost, links, explicit);
        let npu_words = n.div_ceil(64);
        let groups = gates.map_or(0, Gates::groups);
        let mut free_up = vec![0u64; groups * npu_words];
        let mut span = vec![(0, 0); groups];
        let mut free_ups = vec![0u32; groups];
        if let Some(g) = gates {
            for group in 0..groups {
                let range = g.gates_of_group(group);
                // Members come by NPU.
                span[group] = (g.npu(range.start) / 64, g.npu(range.end - 1) / 64 + 1);
                free_ups[group] = range.len() as u32;
                for gate in range {
                    let v = g.npu(gate);
                    free_up[group * npu_words + v / 64] |= 1 << (v % 64);
                }
            }
        }
        // Pools by destination: the links into each vertex in its `in_links` order.
        let mut pool_slot = vec![0u32; explicit];
        let mut pool_first = Vec::with_capacity(topo.vertices() + 1);
        let mut next = 0;
        for v in 0..topo.vertices() {
            pool_first.push(next);
            for &l in topo.in_links(v) {
                pool_slot[l] = next as u32;
                next += 1;
            }
        }
        pool_first.push(next);
        let plain = routes.is_none()
            && gates.is_none()
            && relays.is_none()
            && fast.is_none()
            && problem.reserved.is_empty();
        let mut m = Matcher {
            topo,
            routes,
            gates,
            explicit,
            gate_src: vec![0; gate_count],
            free_up,
            npu_words,
            span,
            free_ups,
            idle: vec![Vec::new(); groups],
            in_idle: vec![false; gate_count],
            exhaustive: false,
            link_holder: vec![FREE; if routes.is_some() { physical } else { 0 }],
            problem,
            chunks,
            npus: n,
            one_class: problem.class_bytes.len() == 1,
            cost,
            max_cost,
            busy: vec![IDLE; links],
            carrying: vec![(0, NEVER); links],
            spare_links: (Vec::new(), Vec::new()),
            next_reserved: vec![0; physical],
            wake_at: vec![NEVER; physical],
            held_since: if uniform || trees.is_some() || relays.as_ref().is_some_and(Relays::routed)
            {
                Vec::new()
            } else {
                table(NEVER, n * chunks)
            },
            held: table(0, (n * chunks).div_ceil(64)),
            holders: table(0, (n * chunks).div_ceil(64)),
            wants: if wants_all {
                Vec::new()
            } else {
                table(0, (n * chunks).div_ceil(64))
            },
            unsatisfied: 0,
            missing: vec![0; if routes.is_some() { n } else { 0 }],
            plan_up: vec![UNPLANNED; if routes.is_some() { physical } else { 0 }],
            planned: Vec::new(),
            relays,
            trees,
            fast,
            pools: vec![Vec::new(); explicit],
            pool_slot,
            pool_first,
            plain,
            round_seed: 0,
            decided: Vec::new(),
            outbox: Outbox::default(),
            arrivals: Arrivals::default(),
            events: BinaryHeap::new(),
            dirty: Vec::new(),
            is_dirty: vec![false; n],
            dirty_bits: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        for (c, chunk) in problem.chunks.iter().enumerate() {
            for &npu in chunk.post {
                let i = npu * chunks + c;
                if let Some(word) = m.wants.get_mut(i / 64) {
                    *word |= 1 << (i % 64);
                }
                m.unsatisfied += 1;
                if let Some(missing) = m.missing.get_mut(npu) {
                    *missing += 1;
                }
            }
        }
        for (c, chunk) in problem.chunks.iter().enumerate() {
            if chunk.release == 0 {
                for &npu in chunk.pre {
                    m.receive(npu, c, 0);
                }
            } else {
                m.events.push(Reverse((chunk.release, Event::Release(c))));
            }
        }
        Ok(m)
    }

    /// Runs to completion, handing `sink` the transfers that carried a useful chunk (in
    /// start order, as they settle); returns (how many, when the last ends).
    fn run(&mut self, sink: &mut Sink<'_>) -> Result<(u64, Picos)> {
        // On a worker of the caller's pool (rayon's), where the rounds' halves are handed
        // to the other workers at the cost of a push, not of waking a thread per round.
        rayon::scope(|_| self.run_events(sink))
    }

    fn run_events(&mut self, sink: &mut Sink<'_>) -> Result<(u64, Picos)> {
        self.match_dirty(0)?;
        let mut last = 0;
        loop {
            let next_arrival = self.arrivals.next_time();
            let next_event = self.events.peek().map(|&Reverse((t, _))| t);
            let Some(now) = next_arrival.into_iter().chain(next_event).min() else {
                if self.unsatisfied > 0 && self.gates.is_some() && self.sweep(last)? {
                    self.outbox.release(sink)?;
                    continue;
                }
                break;
            };
            last = now;
            if next_arrival == Some(now) {
                if let Some((_, links)) = self.arrivals.pop_next() {
                    for (k, &link) in links.iter().enumerate() {
                        if let Some(&ahead) = links.get(k + 2 * PREFETCH_AHEAD) {
                            self.prefetch_carried(ahead);
                        }
                        if let Some(&ahead) = links.get(k + PREFETCH_AHEAD) {
                            self.prefetch_arrival(ahead);
                        }
                        self.arrive(link, now);
                    }
                    self.arrivals.recycle(links);
                }
            }
            while let Some(&Reverse((t, event))) = self.events.peek() {
                if t != now {
                    break;
                }
                self.events.pop();
                match event {
                    Event::Release(c) => {
                        for &npu in self.problem.chunks[c].pre {
                            self.receive(npu, c, now);
                        }
                    }
                    Event::Wake(link) => self.physical_freed(link, IDLE),
                }
            }
            self.match_dirty(now)?;
            self.outbox.release(sink)?;
        }
        if self.unsatisfied > 0 {
            return Err(self.stuck());
        }
        debug_assert!(self.outbox.is_empty(), "every transfer arrived");
        Ok(self.outbox.totals())
    }

    fn held(&self, npu: NpuId, chunk: usize) -> bool {
        let i = npu * self.chunks + chunk;
        self.held[i / 64] & (1 << (i % 64)) != 0
    }

    /// `held`, read from `holders`.
    #[inline]
    fn holds(&self, npu: NpuId, chunk: usize) -> bool {
        let i = chunk * self.npus + npu;
        let holds = self.holders[i / 64] & (1 << (i % 64)) != 0;
        debug_assert_eq!(holds, self.held(npu, chunk), "the two layouts disagree");
        holds
    }

    fn wants(&self, npu: NpuId, chunk: usize) -> bool {
        if self.wants.is_empty() {
            return true;
        }
        let i = npu * self.chunks + chunk;
        self.wants[i / 64] & (1 << (i % 64)) != 0
    }

    fn class(&self, chunk: usize) -> usize {
        if self.one_class {
            0
        } else {
            self.problem.chunks[chunk].class
        }
    }

    #[inline]
    fn cost(&self, link: LinkId, chunk: usize) -> Picos {
        self.cost[self.class(chunk) * self.busy.len() + link]
    }

    /// Whether sending `chunk` to `npu` brings it closer to where it is needed.
    #[inline]
    fn useful(&self, npu: NpuId, chunk: usize) -> bool {
        !self.held(npu, chunk) && self.needed(npu, chunk)
    }

    /// Whether `chunk` may go into `dst` over `link`: any link, or its planned tree's.
    #[inline]
    fn on_tree(&self, link: LinkId, dst: NpuId, chunk: usize) -> bool {
        self.trees
            .as_ref()
            .map_or(true, |t| t.parent(chunk, dst) == Some(link))
    }

    /// Whether `npu`, if it lacks `chunk`, should get it.
    #[inline]
    fn needed(&self, npu: NpuId, chunk: usize) -> bool {
        match &self.relays {
            // On a planned path only the next hop's NPU, its target included.
            Some(r) if r.routed() => r
                .next_hop(chunk)
                .is_some_and(|l| self.topo.link(l).dst == npu),
            _ if self.wants(npu, chunk) => true,
            Some(r) => r.improves(chunk, self.class(chunk), npu),
            None => false,
        }
    }

    /// The slot of `link`'s pool in `pools`.
    #[inline]
    fn slot(&self, link: LinkId) -> usize {
        self.pool_slot[link] as usize
    }

    /// The slots of the pools of the links into `npu`, in its `in_links` order.
    #[inline]
    fn inbox(&self, npu: NpuId) -> std::ops::Range<usize> {
        self.pool_first[npu]..self.pool_first[npu + 1]
    }

    /// The pools of the links into `dst` worth prefetching, from `pools` (the table's
    /// slots from `base` on): a matching draws from every pool of a mesh NPU, but only
    /// from a few of an NPU's many channels behind a switch.
    fn pools_into<'p>(&self, pools: &'p [Vec<u32>], base: usize, dst: NpuId) -> &'p [Vec<u32>] {
        let inbox = self.inbox(dst);
        if inbox.len() > PREFETCH_MAX_LINKS {
            return &[];
        }
        &pools[inbox.start - base..inbox.end - base]
    }

    /// Asks the cache for the headers of the pools into `dst` (where each pool's entries
    /// are), ahead of `prefetch_pools`, which reads them: on a large cluster the headers
    /// miss the cache as often as the entries.
    fn prefetch_pool_heads(&self, pools: &[Vec<u32>], base: usize, dst: NpuId) {
        prefetch::slice(self.pools_into(pools, base, dst));
    }

    /// Asks the cache for the pools into `dst`, whose entries its matching will draw at
    /// random. Not behind switches: there a matching draws from one or two of the NPU's
    /// channels, and fetching every pool's first lines costs more than it saves (the
    /// 8,192-GPU rail-optimized All-Gather matched in 97-106 s without it, 123 s with).
    fn prefetch_pools(&self, pools: &[Vec<u32>], base: usize, dst: NpuId) {
        if self.routes.is_some() {
            return;
        }
        for pool in self.pools_into(pools, base, dst) {
            prefetch::slice(pool);
        }
    }

    /// Asks the cache for what `prefetch_arrival` reads to find the arrival over `link`:
    /// which chunk it carries, and where to.
    fn prefetch_carried(&self, link: LinkId) {
        if link < self.explicit {
            prefetch::line(&self.carrying[link]);
            prefetch::line(self.topo.link(link));
        }
    }

    /// Asks the cache for what the arrival over `link` will read: the chunk's bits at its
    /// destination and the headers of the pools it may be offered to.
    fn prefetch_arrival(&self, link: LinkId) {
        if link >= self.explicit {
            return;
        }
        let chunk = self.carrying[link].0;
        let dst = self.topo.link(link).dst;
        prefetch::line(&self.held[(dst * self.chunks + chunk) / 64]);
        prefetch::line(&self.holders[(chunk * self.npus + dst) / 64]);
        let links = self.topo.out_links(dst);
        if links.len() <= PREFETCH_MAX_LINKS {
            for l in links {
                prefetch::line(&self.pools[self.slot(l)]);
            }
        }
    }

    fn mark_dirty(&mut self, npu: NpuId) {
        if !std::mem::replace(&mut self.is_dirty[npu], true) {
            self.dirty.push(npu);
        }
    }

    /// `npu` now holds `chunk`: offer it over every outgoing link where it is useful.
    fn receive(&mut self, npu: NpuId, chunk: usize, now: Picos) {
        if self.held(npu, chunk) {
            return;
        }
        let i = npu * self.chunks + chunk;
        if let Some(since) = self.held_since.get_mut(i) {
            *since = now;
        }
        self.held[i / 64] |= 1 << (i % 64);
        let i = chunk * self.npus + npu;
        self.holders[i / 64] |= 1 << (i % 64);
        if self.wants(npu, chunk) {
            self.unsatisfied -= 1;
            if let Some(missing) = self.missing.get_mut(npu) {
                *missing -= 1;
            }
        }
        let class = self.class(chunk);
        if let Some(r) = &mut self.relays {
            r.reach(chunk, class, npu);
        }
        if let Some(f) = &mut self.fast {
            f.reach(npu, chunk, now);
        }
        for link in self.topo.out_links(npu) {
            let dst = self.topo.link(link).dst;
            if !self.holds(dst, chunk)
                && self.on_tree(link, dst, chunk)
                && self.needed(dst, chunk)
                && !self.comes_fast(link, dst, chunk)
            {
                let slot = self.slot(link);
                self.pools[slot].push(chunk as u32);
                if self.gates.is_some()
                    && self.pools[slot].len() > 2 * self.useful_bound(link, dst) + 8
                {
                    self.compact_pool(link, dst);
                }
                // Through switches most channels wait for a port; the destination is
                // marked when the route frees (`physical_freed`).
                if self.routes.map_or(true, |r| self.route_free(r, link)) {
                    self.mark_dirty(dst);
                }
            }
        }
        if let Some(gates) = self.gates {
            for &from in gates.of_npu(npu) {
                let from = from as usize;
                let g = gates.group(from);
                if !self.idle[g].is_empty() && !self.link_busy(gates.up(from)) {
                    self.wake_idle(g, Some(chunk), npu);
                }
            }
        }
    }

    /// Gates of group `g` left idle may now find something: a sender (`sender`, which
    /// does not send to itself) freed its link up, or got `chunk`. Marks their NPUs
    /// (those lacking `chunk`, if given) and forgets gates that are busy or need nothing.
    fn wake_idle(&mut self, g: usize, chunk: Option<usize>, sender: NpuId) {
        let Some(gates) = self.gates else {
            return;
        };
        let mut idle = std::mem::take(&mut self.idle[g]);
        idle.retain(|&gate| {
            let gate = gate as usize;
            let v = gates.npu(gate);
            if self.link_busy(gates.down(gate)) || self.gate_need(gate, v) == 0 {
                self.in_idle[gate] = false;
                return false;
            }
            let slow = self.explicit + gate;
            let wanted = chunk.map_or(true, |c| {
                !self.holds(v, c) && self.wants(v, c) && !self.comes_fast(slow, v, c)
            });
            if v != sender && wanted {
                self.mark_dirty(v);
            }
            true
        });
        self.idle[g] = idle;
    }

    /// At most how many distinct chunks `link`'s pool can hold that are useful to `dst`
    /// (gates only: no relays, every alive NPU wants every chunk): those `dst` lacks, and
    /// over a fast link only those with a copy in `dst`'s fast group (its source's).
    fn useful_bound(&self, link: LinkId, dst: NpuId) -> usize {
        let missing = self.missing[dst] as usize;
        match &self.fast {
            Some(f) if !f.is_slow(link) => {
                let held = self.chunks - missing;
                missing.min(self.chunks - f.absent(f.group_of(dst)) - held)
            }
            _ => missing,
        }
    }

    /// Drops the entries of `link`'s pool that are `stale` at `dst`: behind switches once
    /// a draw finds one, and where large groups are matched by port (no relays) also
    /// when a push makes the pool long. There a pool holds each chunk once and at most
    /// `missing[dst]` of them are still useful, so a pool past twice that is mostly
    /// stale: compacted then, each entry costs O(1) however long the chunks spread, where
    /// entries left to be drawn one by one fill the pools of a large cluster's NVSwitch
    /// channels and make every draw a run of cache misses.
    fn compact_pool(&mut self, link: LinkId, dst: NpuId) {
        let slot = self.slot(link);
        let mut pool = std::mem::take(&mut self.pools[slot]);
        self.drop_stale(&mut pool, dst);
        self.pools[slot] = pool;
    }

    /// Drops the entries of `pool` (of a link into `dst`) that are `stale`.
    fn drop_stale(&self, pool: &mut Vec<u32>, dst: NpuId) {
        pool.retain(|&c| !self.stale(dst, c as usize));
    }

    /// Whether a pool entry of `chunk` on a link into `dst` is of no more use there.
    #[inline]
    fn stale(&self, dst: NpuId, chunk: usize) -> bool {
        // Without relays every pooled chunk is wanted, so only holding it matters.
        match self.relays {
            None => self.held(dst, chunk),
            Some(_) => !self.useful(dst, chunk),
        }
    }

    /// Through switches: whether `link` is slow and a copy of `chunk` is already in or on
    /// its way into `dst`'s fast group, whose members all take it on: offering it over
    /// the slow link as well would only add a pool entry to discard later (on a
    /// rail-optimized cluster, most chunks reach a node once over a NIC and spread
    /// over NVSwitch).
    #[inline]
    fn comes_fast(&self, link: LinkId, dst: NpuId, chunk: usize) -> bool {
        self.routes.is_some()
            && self
                .fast
                .as_ref()
                .is_some_and(|f| f.is_slow(link) && f.comes_by_fast_links(dst, chunk))
    }

    /// How long the fast links into `dst` are kept busy by the chunks their pools hold for
    /// it, per link (stale entries counted too, which only makes it longer): a chunk
    /// that is to come over them waits that long on average. The fast-path estimate
    /// (`FastPaths::arrives_by`) leaves contention out; on a network whose fast links are
    /// its bottleneck (a one-way ring of fast links crossed with slow ones) it would keep
    /// the slow links idle while chunks queue for the fast ones.
    fn fast_backlog(&self, dst: NpuId) -> Picos {
        let Some(f) = &self.fast else {
            return 0;
        };
        if self.routes.is_some() {
            // Through switches the fast links are NVSwitch ports, which a node's NICs
            // rather than they limit, and the pools of their many channels say little of
            // what one port has queued.
            return 0;
        }
        let (mut total, mut links): (Picos, Picos) = (0, 0);
        for &l in self.topo.in_links(dst) {
            if f.is_slow(l) {
                continue;
            }
            links += 1;
            let queued = self.pools[self.slot(l)].len() as Picos;
            total = total.saturating_add(queued.saturating_mul(self.cost(l, 0)));
        }
        total / links.max(1)
    }

    /// Whether a channel holding physical link `l` carries a chunk.
    #[inline]
    fn link_busy(&self, l: LinkId) -> bool {
        self.link_holder[l] != FREE
    }

    /// Earliest time a chunk already in flight to `npu` arrives there. Through switches,
    /// from the channels holding `npu`'s ports (a busy channel holds its last link), not
    /// a scan of every channel into it.
    fn in_flight_arrival(&self, npu: NpuId, chunk: usize) -> Picos {
        if let Some(routes) = self.routes {
            return routes
                .ports_into(npu)
                .iter()
                .filter_map(|&p| {
                    let c = self.link_holder[p as usize];
                    if c == FREE {
                        return None;
                    }
                    let (carried, end) = self.carrying[c as usize];
                    (carried == chunk).then_some(end)
                })
                .min()
                .unwrap_or(NEVER);
        }
        self.topo
            .in_links(npu)
            .iter()
            .filter_map(|&l| {
                let (c, end) = self.carrying[l];
                (self.busy[l] != IDLE && c == chunk).then_some(end)
            })
            .min()
            .unwrap_or(NEVER)
    }

    /// A transfer ends: the chunk lands, unless it already arrived by a faster path; then
    /// the transfer is relabelled with another chunk of the same size its source held when
    /// it started and that is still useful to the destination (the paper's chunk
    /// replacement), or dropped.
    fn arrive(&mut self, link: LinkId, now: Picos) {
        let idx = std::mem::replace(&mut self.busy[link], IDLE);
        // From the link's own tables, not the transfer record: the records are most of the
        // matching's memory and seldom still in cache when their chunk lands.
        let (src, dst) = self.ends(link);
        self.mark_dirty(dst);
        if let (Some(gates), true) = (self.gates, link >= self.explicit) {
            let (to, from) = (
                link - self.explicit,
                self.gate_src[link - self.explicit] as usize,
            );
            let (up, down) = (gates.up(from), gates.down(to));
            self.link_holder[up] = FREE;
            self.link_holder[down] = FREE;
            let g = gates.group(to);
            let u = gates.npu(from);
            self.free_up[g * self.npu_words + u / 64] |= 1 << (u % 64);
            self.free_ups[g] += 1;
            self.physical_freed(up, link);
            self.physical_freed(down, link);
        } else if let Some(routes) = self.routes {
            for &l in routes.links(link) {
                self.link_holder[l as usize] = FREE;
            }
            for &l in routes.links(link) {
                self.physical_freed(l as usize, link);
            }
        }
        let mut chunk = self.carrying[link].0;
        if self.held(dst, chunk) {
            match self.replacement(link, chunk, self.outbox.get(idx).start_ps, now) {
                Some(other) => {
                    chunk = other;
                    self.outbox.get_mut(idx).set_chunk(other);
                }
                None => {
                    self.outbox.settle(idx, false);
                    return;
                }
            }
        }
        debug_assert!(self
            .held_since
            .get(src * self.chunks + chunk)
            .map_or(true, |&since| since <= self.outbox.get(idx).start_ps));
        self.outbox.settle(idx, true);
        self.receive(dst, chunk, now);
    }

    fn replacement(
        &mut self,
        link: LinkId,
        carried: usize,
        started: Picos,
        now: Picos,
    ) -> Option<usize> {
        if self.held_since.is_empty() || link >= self.explicit {
            // Equal costs: no second copy is ever started (see `held_since`); dropping
            // one is always sound. A gate keeps no pool to draw another chunk from.
            return None;
        }
        let (src, dst) = (self.topo.link(link).src, self.topo.link(link).dst);
        let slot = self.slot(link);
        let mut pool = std::mem::take(&mut self.pools[slot]);
        pool.retain(|&c| self.useful(dst, c as usize));
        let candidates: Vec<usize> = (0..pool.len())
            .filter(|&i| {
                let c = pool[i] as usize;
                self.class(c) == self.class(carried)
                    && self.held_since[src * self.chunks + c] <= started
                    && self.in_flight_arrival(dst, c) > now
            })
            .collect();
        let pick = (!candidates.is_empty())
            .then(|| candidates[self.rng.random_range(0..candidates.len())])
            .map(|i| pool.swap_remove(i) as usize);
        self.pools[slot] = pool;
        pick
    }

    fn match_dirty(&mut self, now: Picos) -> Result<()> {
        self.match_round(now, true)?;
        if self.routes.is_some() {
            // Ports the plan promised to a channel that then carried nothing (its chunk
            // was on its way by another path): whoever waited behind them tries again,
            // without a plan, so the event ends with every free port offered.
            let mut unused = Vec::new();
            for up in std::mem::take(&mut self.planned) {
                if std::mem::replace(&mut self.plan_up[up], UNPLANNED) != UNPLANNED {
                    unused.push(up);
                }
            }
            for up in unused {
                self.physical_freed(up, IDLE);
            }
            if !self.dirty.is_empty() {
                self.match_round(now, false)?;
            }
        }
        Ok(())
    }

    /// Through switches: gives as many of the receivers' free ports as possible a sender
    /// with something useful, each sender's port to one receiver (a maximum matching of
    /// sender ports to receiver ports over the free channels, by augmenting paths of
    /// bounded length). Receivers then draw their chunks from the planned channel first.
    /// Without the plan, receivers served in turn take senders at random, and the last
    /// ones can be left with none (on a star, with only themselves).
    fn plan(&mut self, receivers: &[NpuId], now: Picos) {
        let Some(routes) = self.routes else {
            return;
        };
        // (receiver port, sender port, channel), grouped by receiver port.
        let mut edges: Vec<(u32, u32, u32)> = Vec::new();
        let mut ports: Vec<usize> = vec![0];
        for &d in receivers {
            let first = edges.len();
            let mut free = Vec::new();
            self.free_into(d, now, &mut free);
            let explicit = self.explicit;
            for c in free.into_iter().filter(|&c| c < explicit) {
                let route = routes.links(c);
                if route.len() < 2 || !self.has_useful(c) {
                    continue;
                }
                edges.push((route[route.len() - 1], route[0], c as u32));
            }
            for i in first + 1..edges.len() {
                if edges[i].0 != edges[i - 1].0 {
                    ports.push(i);
                }
            }
            if edges.len() > first {
                ports.push(edges.len());
            }
        }
        let rng = &mut self.rng;
        for (up, channel) in match_ports(&edges, &ports, |n| rng.random_range(0..n)) {
            self.plan_up[up as usize] = channel;
            self.planned.push(up as usize);
        }
    }

    /// Fills `free` with the links into `dst` that can start a chunk at `now` (and that
    /// the event's plan leaves free). Through switches, a port that is busy rules out every
    /// channel coming in by it at once, and the links come grouped by port.
    fn free_into(&mut self, dst: NpuId, now: Picos, free: &mut Vec<LinkId>) {
        free.clear();
        let topo = self.topo;
        let Some(routes) = self.routes else {
            for &l in topo.in_links(dst) {
                if self.available(l, now) {
                    free.push(l);
                }
            }
            return;
        };
        let into = routes.into(dst);
        let mut i = 0;
        while i < into.len() {
            let (port, c) = (into[i].0 as usize, into[i].1 as usize);
            if self.link_busy(port) {
                i += into[i..].partition_point(|e| e.0 as usize == port);
                continue;
            }
            if self.plan_allows(c) && self.available(c, now) {
                free.push(c);
            }
            i += 1;
        }
        if let Some(gates) = self.gates {
            for &gate in gates.of_npu(dst) {
                let c = self.explicit + gate as usize;
                if self.available(c, now) {
                    free.push(c);
                }
            }
        }
    }

    /// Whether channel `link`'s pool has a chunk still useful to its destination (stale
    /// entries found on the way are dropped).
    fn has_useful(&mut self, link: LinkId) -> bool {
        let (dst, slot) = (self.topo.link(link).dst, self.slot(link));
        while let Some(&c) = self.pools[slot].last() {
            if !self.stale(dst, c as usize) {
                return true;
            }
            self.pools[slot].pop();
        }
        false
    }

    /// Whether `link` can start a chunk at `now`: it carries nothing, no other channel
    /// holds a physical link of its route, and no reservation falls within the time its
    /// largest chunk would take. If a reservation is in the way, a wake-up is scheduled for
    /// when it ends.
    #[inline]
    fn available(&mut self, link: LinkId, now: Picos) -> bool {
        if self.busy[link] != IDLE {
            return false;
        }
        let span = self.max_cost[link];
        let Some(routes) = self.routes else {
            return self.problem.reserved.is_empty() || self.clear_of_reservations(link, span, now);
        };
        if let (Some(gates), true) = (self.gates, link >= self.explicit) {
            // The sender's link up is checked when one is picked.
            let down = gates.down(link - self.explicit);
            return !self.link_busy(down)
                && (self.problem.reserved.is_empty()
                    || self.clear_of_reservations(down, span, now));
        }
        let route = routes.links(link);
        if route.iter().any(|&l| self.link_busy(l as usize)) {
            return false;
        }
        self.problem.reserved.is_empty()
            || route
                .iter()
                .all(|&l| self.clear_of_reservations(l as usize, span, now))
    }

    /// A physical link was freed (by channel `by`, or a reservation ended): the
    /// destinations of the other channels holding it may now match.
    fn physical_freed(&mut self, link: LinkId, by: LinkId) {
        let Some(routes) = self.routes else {
            self.mark_dirty(self.topo.link(link).dst);
            return;
        };
        if let Some(gates) = self.gates {
            // A gate's links carry nothing but its group's transfers.
            if let Some(gate) = gates.down_of(link) {
                let v = gates.npu(gate);
                if self.gate_need(gate, v) > 0 {
                    self.mark_dirty(v);
                }
                return;
            }
            if let Some(gate) = gates.up_of(link) {
                self.wake_idle(gates.group(gate), None, gates.npu(gate));
                return;
            }
        }
        if routes.enters(link).is_some_and(|npu| self.is_dirty[npu]) {
            // Every channel holding the link ends at an NPU already marked.
            return;
        }
        for &c in routes.users(link) {
            let c = c as usize;
            let dst = self.topo.link(c).dst;
            if c != by
                && !self.is_dirty[dst]
                && !self.pools[self.slot(c)].is_empty()
                && self.route_free(routes, c)
            {
                self.mark_dirty(dst);
            }
        }
    }

    /// Whether channel `c` carries nothing and no other channel holds a link of its route
    /// (reservations aside).
    #[inline]
    fn route_free(&self, routes: &Routes, c: LinkId) -> bool {
        self.busy[c] == IDLE && routes.links(c).iter().all(|&l| !self.link_busy(l as usize))
    }

    /// Whether physical link `link` is clear of reservations during [now, now + span).
    fn clear_of_reservations(&mut self, link: LinkId, span: Picos, now: Picos) -> bool {
        let reserved = &self.problem.reserved[link];
        let mut next = self.next_reserved[link];
        while next < reserved.len() && reserved[next].1 <= now {
            next += 1;
        }
        self.next_reserved[link] = next;
        match reserved.get(next) {
            // Saturating: past the clock's end, the reservation is in the way.
            Some(&(start, end)) if start < now.saturating_add(span) => {
                if self.wake_at[link] != end {
                    self.wake_at[link] = end;
                    self.events.push(Reverse((end, Event::Wake(link))));
                }
                false
            }
            _ => true,
        }
    }

    /// `dst`'s random stream at this round, where destinations are matched apart.
    fn draws(&self, dst: NpuId) -> Draws {
        Draws::seed_from_u64(self.round_seed.wrapping_add(dst as u64))
    }

    /// Draws an entry of `pool` (the pool of `link`, into `dst`; not empty) and decides
    /// what it comes to: the cheapest link in `free` whose source holds the chunk (ties
    /// broken at random) sends it, unless it is stale or comes as soon by another way.
    /// `decided`: the chunks sent into `dst` at this round that have not started yet.
    #[allow(clippy::too_many_arguments)]
    fn draw(
        &self,
        dst: NpuId,
        link: LinkId,
        pool: &mut Vec<u32>,
        free: &[LinkId],
        decided: &[Decided],
        now: Picos,
        rng: &mut Draws,
    ) -> Result<Drawn> {
        let j = self.pick(pool, dst, rng);
        let chunk = pool[j] as usize;
        if self.stale(dst, chunk) {
            if self.routes.is_some() {
                // Behind switches a drawn entry is stale more often than not (a chunk
                // is pooled by every NVSwitch peer that gets it before `dst`): one
                // pass over the pool drops them all, where drawing each costs two
                // cache misses. The draws stay uniform over the entries still useful.
                // Not on meshes yet: there a pool grows with the mesh's side, the pass
                // reads `dst`'s bit for each entry, and the 200x200 mesh showed no gain
                // where the 100x100 one did (docs/performance.md, scale).
                self.drop_stale(pool, dst);
            } else {
                pool.swap_remove(j);
            }
            return Ok(Drawn::Dropped);
        }
        // A chunk on a planned path or tree is in no pool but its next hop's.
        let planned = self.trees.is_some() || self.relays.as_ref().is_some_and(Relays::routed);
        let best = if planned {
            link
        } else {
            self.cheapest_holder(free, chunk, link, rng)
        };
        let arrival = later(now, self.cost(best, chunk), || {
            format!("synthesis: chunk {chunk} arriving at NPU {dst}")
        })?;
        let coming = self.in_flight_arrival(dst, chunk).min(
            decided
                .iter()
                .filter(|d| d.chunk == chunk)
                .map(|d| d.arrival)
                .min()
                .unwrap_or(NEVER),
        );
        if coming <= arrival {
            // Already on its way and arriving no later: a second copy is useless.
            pool.swap_remove(j);
            return Ok(Drawn::Dropped);
        }
        if self.fast.as_ref().is_some_and(|f| {
            let by = arrival.saturating_add(arrival - now);
            f.is_slow(best)
                && f.arrives_by(dst, chunk, by)
                && now.saturating_add(self.fast_backlog(dst)) <= by
        }) {
            // Coming over fast links at most one slow transfer later, and the fast links
            // into `dst` are not so backed up that it would come later still: keep the slow
            // link for a chunk that gains more from it (`link` is free and holds the
            // chunk, so it is no faster than `best`). Where the fast links are the
            // bottleneck, a second copy over the slow link relieves them.
            pool.swap_remove(j);
            return Ok(Drawn::Dropped);
        }
        if best == link {
            pool.swap_remove(j);
        }
        Ok(Drawn::Sent(Decided {
            link: best,
            chunk,
            arrival,
        }))
    }

    /// A sender and a chunk for gate `gate` (into `dst`) to start at `now`: (the sender's
    /// gate, the chunk, its arrival). The sender is a member of the group whose link up is
    /// free and clear of reservations, joined to `dst` through the switch; the chunk is
    /// one it holds that `dst` wants and lacks, not on its way there as soon, and for a
    /// slow gate not held or coming in `dst`'s fast group. Where `dst` needs few chunks
    /// they are tried in turn (random start), each looked up among the free senders
    /// holding it; else free senders are tried (random start), each for a chunk it holds.
    /// Each way tries at most `GATE_PROBES` (unless `exhaustive`).
    fn gate_pick(
        &mut self,
        gate: usize,
        dst: NpuId,
        now: Picos,
        rng: &mut Draws,
    ) -> Result<Option<(usize, usize, Picos)>> {
        let Some(gates) = self.gates else {
            return Ok(None);
        };
        let link = self.explicit + gate;
        let g = gates.group(gate);
        let fast_group = self.slow_gate_group(gate, dst);
        let need = self.gate_need(gate, dst);
        if need == 0 || self.free_ups[g] == 0 {
            return Ok(None);
        }
        let probes = if self.exhaustive {
            usize::MAX
        } else {
            GATE_PROBES
        };
        let words = self.chunks.div_ceil(64);
        let (lo, hi) = self.span[g];
        let row = g * self.npu_words;
        let span = self.max_cost[link];
        let mut tried = 0;
        if need * SPARSE_NEED <= self.chunks {
            let (first, turn) = (rng.random_range(0..words), rng.random_range(0..64));
            for k in 0..words {
                let w = (first + k) % words;
                let mut chunks = self.needed_word(dst, fast_group, w).rotate_right(turn);
                while chunks != 0 {
                    let c = 64 * w + (chunks.trailing_zeros() + turn) as usize % 64;
                    chunks &= chunks - 1;
                    let arrival = self.gate_arrival(link, c, dst, now)?;
                    if self.in_flight_arrival(dst, c) <= arrival {
                        continue;
                    }
                    tried += 1;
                    if tried > probes {
                        return Ok(None);
                    }
                    let start = lo + rng.random_range(0..hi - lo);
                    for j in 0..hi - lo {
                        let uw = lo + (start - lo + j) % (hi - lo);
                        let mut senders = self.free_up[row + uw]
                            & row_word(&self.holders, c * self.npus, self.npus, uw);
                        while senders != 0 {
                            let u = 64 * uw + senders.trailing_zeros() as usize;
                            senders &= senders - 1;
                            if let Some(from) = self.gate_sender(gate, g, u, span, now) {
                                return Ok(Some((from, c, arrival)));
                            }
                        }
                    }
                }
            }
            return Ok(None);
        }
        let start = lo + rng.random_range(0..hi - lo);
        let turn = rng.random_range(0..64);
        for j in 0..hi - lo {
            let uw = lo + (start - lo + j) % (hi - lo);
            let mut senders = self.free_up[row + uw].rotate_right(turn);
            while senders != 0 {
                let u = 64 * uw + (senders.trailing_zeros() + turn) as usize % 64;
                senders &= senders - 1;
                let Some(from) = self.gate_sender(gate, g, u, span, now) else {
                    continue;
                };
                tried += 1;
                if tried > probes {
                    return Ok(None);
                }
                let first = rng.random_range(0..words);
                for k in 0..words {
                    let w = (first + k) % words;
                    let mut chunks = self.needed_word(dst, fast_group, w)
                        & row_word(&self.held, u * self.chunks, self.chunks, w);
                    while chunks != 0 {
                        let c = 64 * w + chunks.trailing_zeros() as usize;
                        chunks &= chunks - 1;
                        let arrival = self.gate_arrival(link, c, dst, now)?;
                        if self.in_flight_arrival(dst, c) > arrival {
                            return Ok(Some((from, c, arrival)));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// For a slow gate into `dst`, `dst`'s fast group (whose copies it need not bring).
    fn slow_gate_group(&self, gate: usize, dst: NpuId) -> Option<usize> {
        self.fast
            .as_ref()
            .filter(|f| f.is_slow(self.explicit + gate))
            .map(|f| f.group_of(dst))
    }

    /// At most how many chunks gate `gate` could still bring `dst`; once 0, never more.
    fn gate_need(&self, gate: usize, dst: NpuId) -> usize {
        let need = self.missing[dst] as usize;
        match (self.slow_gate_group(gate, dst), &self.fast) {
            (Some(fg), Some(f)) => need.min(f.absent(fg)),
            _ => need,
        }
    }

    /// When `chunk` sent through gate channel `link` at `now` reaches `dst`.
    fn gate_arrival(&self, link: LinkId, chunk: usize, dst: NpuId, now: Picos) -> Result<Picos> {
        later(now, self.cost(link, chunk), || {
            format!("synthesis: chunk {chunk} arriving at NPU {dst}")
        })
    }

    /// NPU `u`'s gate in group `g` if it may send through it to gate `to` at `now`: it is
    /// joined to `to`'s member that way and its link up is clear of reservations for
    /// `span` (its link up is free: the caller read `free_up`).
    fn gate_sender(
        &mut self,
        to: usize,
        g: usize,
        u: NpuId,
        span: Picos,
        now: Picos,
    ) -> Option<usize> {
        let gates = self.gates?;
        let from = gates.gate_in(g, u)?;
        if !gates.joins(from, to) {
            return None;
        }
        let clear = self.problem.reserved.is_empty()
            || self.clear_of_reservations(gates.up(from), span, now);
        clear.then_some(from)
    }

    /// Chunks `64 w..64 w + 64` that `dst` wants and lacks, one bit each; with
    /// `fast_group` (`dst`'s, for a slow gate), only those with no copy there either.
    fn needed_word(&self, dst: NpuId, fast_group: Option<usize>, w: usize) -> u64 {
        let row = dst * self.chunks;
        let left = self.chunks - 64 * w;
        let mut word = !row_word(&self.held, row, self.chunks, w);
        if left < 64 {
            word &= (1u64 << left) - 1;
        }
        if !self.wants.is_empty() {
            word &= row_word(&self.wants, row, self.chunks, w);
        }
        if let (Some(fg), Some(f)) = (fast_group, &self.fast) {
            word &= !f.copies_word(fg, w);
        }
        word
    }

    /// Nothing is in flight and some NPU still lacks a chunk: tries every gate again
    /// without the search's bound. Whether anything started.
    fn sweep(&mut self, now: Picos) -> Result<bool> {
        for npu in 0..self.npus {
            if self.missing[npu] > 0 {
                self.mark_dirty(npu);
            }
        }
        self.exhaustive = true;
        let matched = self.match_dirty(now);
        self.exhaustive = false;
        matched?;
        Ok(self.arrivals.next_time().is_some())
    }

    /// Whether the event's plan chose channel `link`.
    fn is_planned(&self, link: LinkId) -> bool {
        link < self.explicit
            && self.routes.is_some_and(|r| {
                let up = r.links(link)[0] as usize;
                self.plan_up[up] == link as u32
            })
    }

    /// Whether the plan leaves channel `link` free to use: its first link (the sender's
    /// port) is not promised to another channel.
    fn plan_allows(&self, link: LinkId) -> bool {
        self.routes.map_or(true, |r| {
            let up = r.links(link)[0] as usize;
            let owner = self.plan_up[up];
            owner == UNPLANNED || owner == link as u32
        })
    }

    /// A random entry of the pool of a link into `dst`; with relays or planned trees, the
    /// most urgent of a few random ones (the chunk whose farthest target is farthest from
    /// its nearest copy; the chunk the most NPUs wait on below `dst` in its tree), since a
    /// chunk others wait on sent late finishes late.
    fn pick(&self, pool: &[u32], dst: NpuId, rng: &mut Draws) -> usize {
        let len = pool.len();
        let first = rng.random_range(0..len);
        let urgency = |j: usize| -> Picos {
            let chunk = pool[j] as usize;
            match (&self.trees, &self.relays) {
                (Some(t), _) => t.below(chunk, dst) as Picos,
                (None, Some(r)) => r.remaining(chunk),
                (None, None) => 0,
            }
        };
        if self.trees.is_none() && self.relays.is_none() {
            return first;
        }
        let mut best = (urgency(first), first);
        for _ in 1..URGENCY_SAMPLES.min(len) {
            let j = rng.random_range(0..len);
            best = best.max((urgency(j), j));
        }
        best.1
    }

    /// The cheapest link in `links` whose source holds `chunk`, ties broken at random;
    /// through switches, ties go to `sampled` (the link the chunk was drawn from, which
    /// the event's plan may have chosen).
    fn cheapest_holder(
        &self,
        links: &[LinkId],
        chunk: usize,
        sampled: LinkId,
        rng: &mut Draws,
    ) -> LinkId {
        let costs = &self.cost[self.class(chunk) * self.busy.len()..];
        let switched = self.routes.is_some();
        let mut best = IDLE;
        let mut best_key = (Picos::MAX, true);
        let mut ties = 0;
        for &l in links {
            if l >= self.explicit || !self.holds(self.topo.link(l).src, chunk) {
                continue;
            }
            let key = (costs[l], switched && l != sampled);
            if key < best_key {
                best = l;
                best_key = key;
                ties = 1;
            } else if key == best_key {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = l;
                }
            }
        }
        debug_assert!(best != IDLE, "the sampled link's source holds the chunk");
        best
    }

    /// `link` carries `chunk` during [now, end).
    fn start(&mut self, link: LinkId, chunk: usize, now: Picos, end: Picos) {
        let (src, dst) = self.ends(link);
        let class = self.class(chunk);
        if let Some(r) = &mut self.relays {
            r.reach(chunk, class, dst);
            r.started(chunk, link);
        }
        if let Some(f) = &mut self.fast {
            f.reach(dst, chunk, end);
        }
        let seq = self
            .outbox
            .start(Transfer::new(chunk, src, dst, now, end, Op::Copy));
        self.busy[link] = seq;
        self.carrying[link] = (chunk, end);
        if let (Some(gates), true) = (self.gates, link >= self.explicit) {
            let (to, from) = (
                link - self.explicit,
                self.gate_src[link - self.explicit] as usize,
            );
            self.link_holder[gates.up(from)] = link as u32;
            self.link_holder[gates.down(to)] = link as u32;
            let g = gates.group(to);
            self.free_up[g * self.npu_words + src / 64] &= !(1 << (src % 64));
            self.free_ups[g] -= 1;
        } else if let Some(routes) = self.routes {
            for &p in routes.links(link) {
                self.link_holder[p as usize] = link as u32;
            }
        }
        self.arrivals.push(end, link);
    }

    /// (source, destination) of channel `link` (a gate's while it carries a chunk).
    fn ends(&self, link: LinkId) -> (NpuId, NpuId) {
        match self.gates {
            Some(gates) if link >= self.explicit => {
                let to = link - self.explicit;
                (gates.npu(self.gate_src[to] as usize), gates.npu(to))
            }
            _ => {
                let l = self.topo.link(link);
                (l.src, l.dst)
            }
        }
    }

    /// Removes transfers into relays whose copy is forwarded to nobody who needed it (a
    /// target may have been reached by another path meanwhile). Later transfers are seen
    /// first, so a relay's onward transfers are judged before the one that fed it.
    fn prune_dead_ends(&self, transfers: &mut Vec<Transfer>) {
        let mut order: Vec<usize> = (0..transfers.len()).collect();
        order.sort_by_key(|&i| Reverse(transfers[i].start_ps));
        let mut forwards = vec![0u64; (self.topo.npus() * self.chunks).div_ceil(64)];
        let mut keep = vec![false; transfers.len()];
        for i in order {
            let t = &transfers[i];
            let at = t.dst() * self.chunks + t.chunk();
            if self.wants(t.dst(), t.chunk()) || forwards[at / 64] & (1 << (at % 64)) != 0 {
                keep[i] = true;
                let from = t.src() * self.chunks + t.chunk();
                forwards[from / 64] |= 1 << (from % 64);
            }
        }
        let mut k = keep.into_iter();
        transfers.retain(|_| k.next().unwrap_or(false));
    }

    /// The error when nothing is in flight and some NPU still lacks a chunk.
    fn stuck(&self) -> Error {
        let n = self.topo.npus();
        let examples: Vec<String> = (0..n)
            .flat_map(|npu| (0..self.chunks).map(move |c| (npu, c)))
            .filter(|&(npu, c)| self.wants(npu, c) && !self.held(npu, c))
            .take(4)
            .map(|(npu, c)| format!("NPU {npu} lacks chunk {c}"))
            .collect();
        let last = self.outbox.totals().1;
        Error::Synthesis(format!(
            "{} postconditions cannot be met: no path carries the chunks there ({}; stalled at {:.3} us)",
            self.unsatisfied,
            examples.join(", "),
            ps_to_us(last)
        ))
    }
}
