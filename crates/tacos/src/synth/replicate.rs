//! Replicated synthesis: one node's NPUs matched, every other node's transfers their
//! shifted copies.
//!
//! Where shifting every NPU by one node (v -> v + P mod n, P NPUs a node) maps the
//! topology onto itself (direct links onto direct links, each switch's member set onto a
//! switch's member set, with the same figures: rail-optimized clusters of identical nodes,
//! rings, tori along their last dimension), an All-Gather over every NPU can be made
//! symmetric: whenever NPU u sends chunk x to v, every shift of that transfer by whole
//! nodes runs at the same time. Such a schedule is fixed by what node 0's NPUs receive,
//! and node 0's NPU r holding chunk x says NPU r of node j holds x's shift by j nodes. So
//! the matcher keeps one node's state (P x nK bits where the full matcher keeps n x nK)
//! and matches P receivers an event, and the schedule is every shift of those transfers.
//!
//! The shifts of one transfer use distinct links, since the shift moves every NPU and so
//! every link with an NPU at one end. Two transfers never use shifts of one link at once:
//! each link's shifts are one resource here, keyed by the shift that has its NPU in node
//! 0. A switch the shift maps to itself (a rail) joins NPU r of node 0 to the same class
//! of NPU in every other node: any of them holding chunk x's shift, that is node 0's r
//! holding any chunk of x's orbit, can send it, so such a switch needs a count per orbit,
//! not a sender per node. Node 0's NPUs are matched by the round loop every matcher shares
//! (`synth::matching`), seated on node 0's state: a receiver's links there are its
//! channels, each a class of shifted links (or, through a rail, one down link and a choice
//! of senders). Combining collectives are the time reversal of the All-Gather on the
//! reversed topology, as `compose` makes them; an All-Reduce is composed phased. What comes
//! out is checked like any other schedule.

use super::matching::{match_in_turn, Draws, Offer, Seat, Turn};
use super::phases::{reductions, Phases};
use super::stars::Stars;
use crate::collective::{Collective, CollectiveKind};
use crate::error::{Error, Result};
use crate::schedule::{later, link_time_ps, Op, Transfer};
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Orbits drawn for a switch shared by every node before one with no chunk new to the
/// receiver's node is taken.
const FRESH_DRAWS: usize = 8;

/// A topology's symmetry under shifting every NPU by whole nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeShift {
    /// NPUs a node: the shift moves NPU v to v + period (mod the NPUs).
    pub period: usize,
    /// Nodes: shifts before the NPUs are back where they started.
    pub nodes: usize,
}

impl NodeShift {
    /// The shift by the fewest NPUs that maps `topo` onto itself (so the most nodes), or
    /// None where none does: failed NPUs, routes not through star groups or direct links
    /// (`synth::stars`), or no period that keeps every link's figures.
    pub fn find(topo: &Topology) -> Option<NodeShift> {
        let n = topo.npus();
        if n < 2 || !topo.failed().is_empty() {
            return None;
        }
        let stars = Stars::find(topo)?;
        if !stars.excluded.is_empty() {
            return None;
        }
        (1..n)
            .filter(|p| n % p == 0)
            .map(|period| NodeShift {
                period,
                nodes: n / period,
            })
            .find(|shift| shift.maps_onto_itself(topo, &stars))
    }

    /// Whether the shift maps every direct link and every star group of `topo` onto one
    /// with the same figures.
    fn maps_onto_itself(&self, topo: &Topology, stars: &Stars) -> bool {
        let n = topo.npus();
        let moved = |v: NpuId| (v + self.period) % n;
        let same = |a: LinkId, b: LinkId| {
            let (a, b) = (topo.link(a), topo.link(b));
            a.latency_us == b.latency_us && a.bandwidth_gbps == b.bandwidth_gbps
        };
        let direct = topo
            .links()
            .iter()
            .enumerate()
            .filter(|(_, l)| l.src < n && l.dst < n);
        for (id, link) in direct {
            match topo.link_between(moved(link.src), moved(link.dst)) {
                Some(image) if same(id, image) => {}
                _ => return false,
            }
        }
        let member_sets: HashMap<Vec<NpuId>, usize> = stars
            .stars
            .iter()
            .enumerate()
            .map(|(g, star)| (sorted_members(star.members.iter().map(|m| m.0)), g))
            .collect();
        stars.stars.iter().all(|star| {
            let image = sorted_members(star.members.iter().map(|m| moved(m.0)));
            member_sets.get(&image).is_some_and(|&g| {
                let (_, up, down) = star.members[0];
                let (_, up2, down2) = stars.stars[g].members[0];
                same(up, up2) && same(down, down2)
            })
        })
    }

    fn node(&self, v: NpuId) -> usize {
        v / self.period
    }

    fn class(&self, v: NpuId) -> usize {
        v % self.period
    }
}

fn sorted_members(members: impl Iterator<Item = NpuId>) -> Vec<NpuId> {
    let mut list: Vec<NpuId> = members.collect();
    list.sort_unstable();
    list
}

/// Where node 0's NPU of some class can take chunks from.
#[derive(Clone, Copy)]
enum Channel {
    /// One sender, over a direct link or through a switch only one node's NPUs are
    /// members of; its pool holds chunks that sender has (in the receiver's numbering).
    Single {
        sender: NpuId,
        up: LinkId,
        down: LinkId,
        duration: Picos,
        pool: usize,
    },
    /// A switch the shift maps to itself: every node's NPUs of some classes are its
    /// members (`NodeMatcher::senders`), each sending up its own link (keyed by node 0's).
    Shared {
        senders: usize,
        down: LinkId,
        duration: Picos,
    },
}

/// A chunk numbering that the shift moves by whole orbits: chunk x is the
/// (x % per_node)-th of its orbit's, in node x / per_node.
#[derive(Clone, Copy)]
struct Chunks {
    /// Chunks a node owns (its NPUs x K): also the number of orbits.
    per_node: usize,
    nodes: usize,
    /// Words a row of one orbit's bits takes.
    row_words: usize,
}

impl Chunks {
    /// The chunks of `npus_per_node` NPUs x `chunks_per_npu` a node, over `nodes` nodes.
    fn new(npus_per_node: usize, chunks_per_npu: usize, nodes: usize) -> Chunks {
        Chunks {
            per_node: npus_per_node * chunks_per_npu,
            nodes,
            row_words: nodes.div_ceil(64),
        }
    }

    fn shifted(&self, x: usize, nodes: usize) -> usize {
        (x + nodes * self.per_node) % (self.per_node * self.nodes)
    }

    /// (orbit, node) of chunk x.
    fn place(&self, x: usize) -> (usize, usize) {
        (x % self.per_node, x / self.per_node)
    }

    fn chunk(&self, orbit: usize, node: usize) -> usize {
        node * self.per_node + orbit
    }

    fn bit(&self, x: usize) -> (usize, u64) {
        let (orbit, node) = self.place(x);
        (orbit * self.row_words + node / 64, 1 << (node % 64))
    }
}

/// One class's bits per chunk, each orbit's nodes in a row of whole words.
struct Bits(Vec<u64>);

impl Bits {
    fn get(&self, chunks: &Chunks, x: usize) -> bool {
        let (w, b) = chunks.bit(x);
        self.0[w] & b != 0
    }

    fn set(&mut self, chunks: &Chunks, x: usize) {
        let (w, b) = chunks.bit(x);
        self.0[w] |= b;
    }

    /// A node whose bit in `orbit`'s row is `value`, the first at or after a random one
    /// (wrapping); None where there is none.
    fn pick(
        &self,
        chunks: &Chunks,
        orbit: usize,
        value: bool,
        rng: &mut impl Rng,
    ) -> Option<usize> {
        let row = &self.0[orbit * chunks.row_words..][..chunks.row_words];
        let start = rng.random_range(0..chunks.nodes);
        let word = |w: usize| {
            let bits = if value { row[w] } else { !row[w] };
            let valid = chunks.nodes - 64 * w;
            if valid < 64 {
                bits & ((1u64 << valid) - 1)
            } else {
                bits
            }
        };
        let (first, shift) = (start / 64, start % 64);
        let at = |w: usize, bits: u64| 64 * w + bits.trailing_zeros() as usize;
        let high = word(first) & (!0u64 << shift);
        if high != 0 {
            return Some(at(first, high));
        }
        for step in 1..=chunks.row_words {
            let w = (first + step) % chunks.row_words;
            let bits = if w == first {
                word(w) & !(!0u64 << shift)
            } else {
                word(w)
            };
            if bits != 0 {
                return Some(at(w, bits));
            }
        }
        None
    }
}

/// A chunk a receiver takes, and how.
struct Pick {
    chunk: usize,
    sender: NpuId,
    up: LinkId,
    down: LinkId,
    duration: Picos,
}

/// The matching of node 0's NPUs (the classes): what each holds, what each has claimed
/// (holds or is getting), and where each can take chunks from. Its rounds go through the
/// shared loop with node 0's classes as the destinations and each one's channels as its
/// links (`Seat`).
struct NodeMatcher {
    period: usize,
    chunks: Chunks,
    /// Per receiver class.
    channels: Vec<Vec<Channel>>,
    /// Per `Channel::Shared`: (class, its NPU's link up to the switch) of its senders.
    senders: Vec<Vec<(usize, LinkId)>>,
    /// Per sender class: (pool, the sender's node) of each `Channel::Single` it is.
    feeds: Vec<Vec<(usize, usize)>>,
    /// Per sender class: the receivers it joins through a switch the shift fixes.
    shares: Vec<Vec<usize>>,
    pools: Vec<Vec<u32>>,
    /// Per (receiver, sender class) of a shared switch: the orbits the sender holds some of.
    orbits: HashMap<(usize, usize), Vec<u32>>,
    held: Vec<Bits>,
    held_in_orbit: Vec<Vec<u32>>,
    claimed: Vec<Bits>,
    claimed_in_orbit: Vec<Vec<u32>>,
    /// Chunks some NPU of node 0 has claimed, and how many of each orbit's.
    in_node: Bits,
    in_node_per_orbit: Vec<u32>,
    missing: Vec<usize>,
    /// Per link (node 0's of each shift): when it is free.
    busy: Vec<Picos>,
    /// The class being matched.
    receiver: usize,
    /// (end, class, chunk) of each transfer under way.
    arrivals: BinaryHeap<Reverse<(Picos, u32, u32)>>,
    /// Node 0's transfers so far, in start order.
    out: Vec<Transfer>,
    /// Orders each event's classes and seeds its round's stream.
    rng: ChaCha8Rng,
}

impl NodeMatcher {
    /// The matcher of node 0's All-Gather with `chunks_per_npu` chunks of `chunk_bytes`,
    /// each NPU holding its own.
    fn new(
        topo: &Topology,
        shift: NodeShift,
        chunks_per_npu: usize,
        chunk_bytes: f64,
        seed: u64,
    ) -> Result<NodeMatcher> {
        let unusable = || {
            Error::Synthesis(format!(
                "{} is not the same after a shift by {} NPUs, so it cannot be synthesized \
                 replicated",
                topo.name(),
                shift.period
            ))
        };
        let stars = Stars::find(topo).ok_or_else(unusable)?;
        if !(shift.maps_onto_itself(topo, &stars) && stars.excluded.is_empty()) {
            return Err(unusable());
        }
        let p = shift.period;
        let chunks = Chunks::new(p, chunks_per_npu, shift.nodes);
        let total = chunks.per_node * chunks.nodes;
        if total > u32::MAX as usize {
            return Err(Error::Synthesis(format!(
                "{total} chunks: a replicated synthesis numbers them in 32 bits"
            )));
        }
        let empty = || Bits(vec![0; chunks.per_node * chunks.row_words]);
        let mut m = NodeMatcher {
            period: p,
            chunks,
            channels: (0..p).map(|_| Vec::new()).collect(),
            senders: Vec::new(),
            feeds: vec![Vec::new(); p],
            shares: vec![Vec::new(); p],
            pools: Vec::new(),
            orbits: HashMap::new(),
            held: (0..p).map(|_| empty()).collect(),
            held_in_orbit: vec![vec![0; chunks.per_node]; p],
            claimed: (0..p).map(|_| empty()).collect(),
            claimed_in_orbit: vec![vec![0; chunks.per_node]; p],
            in_node: empty(),
            in_node_per_orbit: vec![0; chunks.per_node],
            missing: vec![total; p],
            busy: vec![0; topo.links().len()],
            receiver: 0,
            arrivals: BinaryHeap::new(),
            out: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        for r in 0..p {
            for &l in topo.in_links(r) {
                let src = topo.link(l).src;
                if src < topo.npus() {
                    let duration = link_time_ps(topo.link(l), chunk_bytes)?;
                    m.add_single(r, src, [l, l], duration, shift);
                }
            }
        }
        for star in &stars.stars {
            if !star.members.iter().any(|m| m.0 < p) {
                continue;
            }
            let members = sorted_members(star.members.iter().map(|m| m.0));
            let fixed = members == sorted_members(members.iter().map(|&v| (v + p) % topo.npus()));
            // A switch the shift moves must be one node's (node 0's here) for its links'
            // shifts to be keyed by node 0's.
            if !fixed && members.iter().any(|&v| v >= p) {
                return Err(unusable());
            }
            let of_node_0 = || star.members.iter().filter(|m| m.0 < p);
            for &(r, _, down) in of_node_0() {
                let duration =
                    link_time_ps(&topo.route_link([star.members[0].1, down]), chunk_bytes)?;
                if fixed {
                    for &(c, _, _) in of_node_0() {
                        m.shares[c].push(r);
                    }
                    m.channels[r].push(Channel::Shared {
                        senders: m.senders.len(),
                        down,
                        duration,
                    });
                    m.senders
                        .push(of_node_0().map(|&(c, up, _)| (c, up)).collect());
                } else {
                    for &(c, up, _) in of_node_0().filter(|m| m.0 != r) {
                        m.add_single(r, c, [up, down], duration, shift);
                    }
                }
            }
        }
        for c in 0..p {
            for piece in 0..chunks_per_npu {
                let x = c * chunks_per_npu + piece;
                m.claim(c, x);
                m.receive(c, x);
            }
        }
        Ok(m)
    }

    /// Receiver `r` takes chunks from `sender` alone over `[up, down]` (one link twice
    /// where they are joined directly).
    fn add_single(
        &mut self,
        r: usize,
        sender: NpuId,
        [up, down]: [LinkId; 2],
        duration: Picos,
        shift: NodeShift,
    ) {
        let pool = self.pools.len();
        self.pools.push(Vec::new());
        self.feeds[shift.class(sender)].push((pool, shift.node(sender)));
        self.channels[r].push(Channel::Single {
            sender,
            up,
            down,
            duration,
            pool,
        });
    }

    /// Class `r` holds or is getting chunk `x`.
    fn claim(&mut self, r: usize, x: usize) {
        let orbit = self.chunks.place(x).0;
        self.claimed[r].set(&self.chunks, x);
        self.claimed_in_orbit[r][orbit] += 1;
        self.missing[r] -= 1;
        if !self.in_node.get(&self.chunks, x) {
            self.in_node.set(&self.chunks, x);
            self.in_node_per_orbit[orbit] += 1;
        }
    }

    /// Class `c` got chunk `x`: it, and every shift of it, may send it on.
    fn receive(&mut self, c: usize, x: usize) {
        self.held[c].set(&self.chunks, x);
        for &(pool, node) in &self.feeds[c] {
            self.pools[pool].push(self.chunks.shifted(x, node) as u32);
        }
        let orbit = self.chunks.place(x).0;
        self.held_in_orbit[c][orbit] += 1;
        if self.held_in_orbit[c][orbit] == 1 {
            for &r in &self.shares[c] {
                self.orbits.entry((r, c)).or_default().push(orbit as u32);
            }
        }
    }

    /// Whether receiver `r`'s channel `way` is free at `now` (through a rail, its down
    /// link: which sender's up link is free is the pick's to find).
    fn is_free(&self, r: usize, way: usize, now: Picos) -> bool {
        match self.channels[r][way] {
            Channel::Single { up, down, .. } => self.busy[up] <= now && self.busy[down] <= now,
            Channel::Shared { down, .. } => self.busy[down] <= now,
        }
    }

    /// A chunk receiver `r` can take over its channel `way` (free) at `now`, if any.
    fn pick(&mut self, r: usize, way: usize, now: Picos, rng: &mut Draws) -> Option<Pick> {
        match self.channels[r][way] {
            Channel::Single {
                sender,
                up,
                down,
                duration,
                pool,
            } => {
                let pool = &mut self.pools[pool];
                while !pool.is_empty() {
                    let x = pool.swap_remove(rng.random_range(0..pool.len())) as usize;
                    if !self.claimed[r].get(&self.chunks, x) {
                        return Some(Pick {
                            chunk: x,
                            sender,
                            up,
                            down,
                            duration,
                        });
                    }
                }
                None
            }
            Channel::Shared {
                senders,
                down,
                duration,
            } => {
                let n = self.senders[senders].len();
                let first = rng.random_range(0..n);
                for i in 0..n {
                    let (c, up) = self.senders[senders][(first + i) % n];
                    if self.busy[up] > now {
                        continue;
                    }
                    if let Some((chunk, sender)) = self.pick_shared(r, c, rng) {
                        return Some(Pick {
                            chunk,
                            sender,
                            up,
                            down,
                            duration,
                        });
                    }
                }
                None
            }
        }
    }

    /// (chunk, sender) for receiver `r` from class `c`'s NPUs over a switch the shift
    /// fixes: a chunk of an orbit `c` holds some of, sent by the node holding it.
    fn pick_shared(&mut self, r: usize, c: usize, rng: &mut Draws) -> Option<(usize, NpuId)> {
        let chunks = self.chunks;
        let list = self.orbits.get_mut(&(r, c))?;
        let mut draws = 0;
        while !list.is_empty() {
            let at = rng.random_range(0..list.len());
            let orbit = list[at] as usize;
            if self.claimed_in_orbit[r][orbit] as usize == chunks.nodes {
                list.swap_remove(at);
                continue;
            }
            // A chunk new to the node, where a few draws find one: a switch joining nodes
            // is the slow way in, and what one NPU brings in its node's own links spread.
            let fresh = (self.in_node_per_orbit[orbit] as usize) < chunks.nodes;
            draws += 1;
            if !fresh && draws <= FRESH_DRAWS {
                continue;
            }
            let wanted = if fresh {
                &self.in_node
            } else {
                &self.claimed[r]
            };
            let node = wanted.pick(&chunks, orbit, false, rng)?;
            let from = self.held[c].pick(&chunks, orbit, true, rng)?;
            let offset = (node + chunks.nodes - from) % chunks.nodes;
            return Some((chunks.chunk(orbit, node), offset * self.period + c));
        }
        None
    }

    /// Matches until every class holds every chunk: at each arrival, the classes missing
    /// some in a random order, each through the round loop over its channels. Returns
    /// node 0's transfers in start order.
    fn run(mut self, topo: &Topology) -> Result<Vec<Transfer>> {
        let mut order = Vec::with_capacity(self.period);
        let (mut free, mut sampling) = (Vec::new(), Vec::new());
        let mut now: Picos = 0;
        loop {
            order.clear();
            order.extend((0..self.period).filter(|&r| self.missing[r] > 0));
            order.shuffle(&mut self.rng);
            let mut draws = Draws::seed_from_u64(self.rng.random());
            match_in_turn(&mut self, &order, now, &mut draws, &mut free, &mut sampling)?;
            let Some(&Reverse((next, _, _))) = self.arrivals.peek() else {
                break;
            };
            now = next;
            while let Some(&Reverse((at, r, x))) = self.arrivals.peek() {
                if at != now {
                    break;
                }
                self.arrivals.pop();
                self.receive(r as usize, x as usize);
            }
        }
        if self.missing.iter().any(|&m| m > 0) {
            return Err(Error::Synthesis(format!(
                "the replicated matching on {} stalled with chunks missing",
                topo.name()
            )));
        }
        Ok(self.out)
    }
}

/// Node 0's state seated at the round loop: the destinations are its classes, a class's
/// links its channels (numbered as `channels` lists them).
impl Seat for NodeMatcher {
    fn own_draws(&self, _: NpuId) -> Option<Draws> {
        None
    }

    fn begin(&mut self, r: NpuId) {
        self.receiver = r;
    }

    fn free_into(&mut self, r: NpuId, now: Picos, free: &mut Vec<LinkId>) {
        free.clear();
        if self.missing[r] > 0 {
            free.extend((0..self.channels[r].len()).filter(|&way| self.is_free(r, way, now)));
        }
    }

    fn is_planned(&self, _: LinkId) -> bool {
        false
    }

    fn offer(&mut self, turn: Turn, way: LinkId, rng: &mut Draws) -> Result<Offer> {
        let Turn { dst: r, now, .. } = turn;
        if self.missing[r] == 0 {
            return Ok(Offer::Nothing);
        }
        let Some(pick) = self.pick(r, way, now, rng) else {
            return Ok(Offer::Nothing);
        };
        let end = later(now, pick.duration, || "a replicated matching".into())?;
        self.busy[pick.up] = end;
        self.busy[pick.down] = end;
        self.claim(r, pick.chunk);
        self.arrivals
            .push(Reverse((end, r as u32, pick.chunk as u32)));
        self.out.push(Transfer::new(
            pick.chunk,
            pick.sender,
            r,
            now,
            end,
            Op::Copy,
        ));
        Ok(Offer::Sent(way))
    }

    fn still_free(&mut self, _: LinkId, way: LinkId, now: Picos) -> bool {
        // Channels into one switch port share its down link.
        self.is_free(self.receiver, way, now)
    }
}

/// One node's All-Gather matched on `topo`: the transfers into node 0's NPUs, in start
/// order; every shift of them by whole nodes makes the whole schedule.
fn match_node(
    topo: &Topology,
    shift: NodeShift,
    chunks_per_npu: usize,
    chunk_bytes: f64,
    seed: u64,
) -> Result<Vec<Transfer>> {
    NodeMatcher::new(topo, shift, chunks_per_npu, chunk_bytes, seed)?.run(topo)
}

/// A replicated synthesis: node 0's transfers, whose shifts make the schedule.
pub struct Replicated {
    shift: NodeShift,
    chunks: Chunks,
    /// Node 0's transfers in start order: the reductions, then the copies.
    transfers: Vec<Transfer>,
    /// When the last transfer ends.
    pub end_ps: Picos,
}

impl Replicated {
    /// Synthesizes `collective` (an All-Gather, Reduce-Scatter or All-Reduce over every
    /// NPU of `topo`, in order) replicated over `topo`'s node shift.
    pub fn new(topo: &Topology, collective: &Collective, seed: u64) -> Result<Replicated> {
        let kind = collective.kind();
        let supported = matches!(
            kind,
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllReduce
        );
        let every_npu = collective.npus().iter().copied().eq(0..topo.npus());
        if !supported || !every_npu {
            return Err(Error::Synthesis(format!(
                "a replicated synthesis makes All-Gather, Reduce-Scatter and All-Reduce over \
                 every NPU in order, not {} over {} of {} NPUs",
                kind,
                collective.npus().len(),
                topo.npus()
            )));
        }
        let shift = NodeShift::find(topo).ok_or_else(|| {
            Error::Synthesis(format!(
                "{} has no shift by whole nodes that maps it onto itself (identical nodes, \
                 a ring, a torus), so it cannot be synthesized replicated",
                topo.name()
            ))
        })?;
        let k = collective.spec().chunks_per_npu;
        let bytes = collective.chunk_bytes();
        let phases = Phases::of(kind);
        let mut transfers = Vec::new();
        let mut reduced_by = 0;
        if phases.reduce.is_some() {
            (transfers, reduced_by) =
                reductions(match_node(&topo.reversed(), shift, k, bytes, seed)?);
            transfers.sort_by_key(|t| t.start_ps);
        }
        if phases.copy.is_some() {
            let copies = match_node(topo, shift, k, bytes, seed)?;
            transfers.extend(copies.into_iter().map(|t| Phases::after(t, reduced_by)));
        }
        let end_ps = transfers.iter().map(|t| t.end_ps).max().unwrap_or(0);
        Ok(Replicated {
            shift,
            chunks: Chunks::new(shift.period, k, shift.nodes),
            transfers,
            end_ps,
        })
    }

    /// Transfers in the whole schedule.
    pub fn transfers(&self) -> u64 {
        self.transfers.len() as u64 * self.shift.nodes as u64
    }

    /// Hands every transfer of the schedule to `sink` in start order: each of node 0's,
    /// then its shifts.
    pub fn emit(&self, sink: &mut dyn FnMut(Transfer) -> Result<()>) -> Result<()> {
        let n = self.shift.period * self.shift.nodes;
        for t in &self.transfers {
            for j in 0..self.shift.nodes {
                sink(Transfer::new(
                    self.chunks.shifted(t.chunk(), j),
                    (t.src() + j * self.shift.period) % n,
                    (t.dst() + j * self.shift.period) % n,
                    t.start_ps,
                    t.end_ps,
                    t.op,
                ))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pick_finds_a_node_with_the_bit_asked_for_and_none_only_where_there_is_none() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for nodes in [1, 2, 63, 64, 65, 130, 200] {
            let chunks = Chunks::new(3, 1, nodes);
            for density in [0.0, 0.02, 0.5, 0.98, 1.0] {
                let mut bits = Bits(vec![0; 3 * chunks.row_words]);
                for x in 0..3 * nodes {
                    if rng.random_bool(density) {
                        bits.set(&chunks, x);
                    }
                }
                for orbit in 0..3 {
                    for value in [false, true] {
                        let any = (0..nodes)
                            .any(|node| bits.get(&chunks, chunks.chunk(orbit, node)) == value);
                        for _ in 0..20 {
                            match bits.pick(&chunks, orbit, value, &mut rng) {
                                Some(node) => {
                                    assert!(node < nodes, "{nodes} nodes: picked {node}");
                                    assert_eq!(bits.get(&chunks, chunks.chunk(orbit, node)), value);
                                }
                                None => assert!(!any, "{nodes} nodes, density {density}"),
                            }
                        }
                    }
                }
            }
        }
    }
}
