//! The schedule checker: replays a schedule on a topology, independently of whatever made
//! it, and rejects it unless it is a correct, contention-free algorithm.
//!
//! A chunk's content on an NPU is the set of contributions it holds: for copying
//! collectives one bit (the whole chunk), for combining collectives one bit per
//! contributor. A copy overwrites the destination's content with what the source held when
//! the transfer started; a reduce adds it, and adding a contribution twice is an error.
//!
//! It holds little beyond the schedule, so that whatever synthesis could make can be
//! checked: the contents (copying collectives: one bit per (NPU, chunk), as a sender must
//! hold the whole chunk and so always sends it whole; combining collectives, replayed a
//! chunk at a time: one chunk's contribution sets and a 4-byte index per transfer to
//! group them by chunk), the last transfer on each link and the transfers in flight (at
//! most one per link), through switches a route tree per sending NPU, and a 4-byte index
//! per transfer only where the schedule is not already in start order. Transfers are
//! swept once in start order (a stream is read in that order, so `check_stream` holds
//! nothing per transfer); durations are at least a picosecond, so two transfers on a link
//! overlap exactly when one starts before the one that started last on it has ended.

use super::stream::StreamReader;
use super::{route_time_ps, Op, Schedule, Transfer};
use crate::budget::{self, MemoryLimit};
use crate::collective::{ChunkId, Collective, CollectiveSpec};
use crate::error::{Error, Result};
use crate::hugepages::table;
use crate::topology::{format_npus, LinkId, NpuId, RouteTree, Topology};
use crate::units::{ps_to_us, Picos};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::BufRead;

/// What a passing check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// When the last transfer ends.
    pub collective_time_ps: Picos,
    pub transfers: usize,
}

/// Checks a timed schedule: every transfer uses an existing link, or a route through
/// switches (`Topology::route`, held cut-through), and takes exactly its alpha + size /
/// bandwidth (`route_time_ps`), no link carries two chunks at once, every sender holds
/// the chunk when it sends, and every postcondition holds at the end. A schedule with
/// several faults is refused for the first in start order (at one instant, a transfer's
/// NPUs, route, duration or link before any sender lacking its chunk then).
pub fn check(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    sweep_schedule(schedule, &collective, topo, Timing::Promised)
}

/// `check` on a stream (`schedule::stream`) in one pass, holding a bit per (NPU, chunk),
/// per link its last transfer and the transfers in flight (a contention-free schedule has
/// at most one per link; contention is refused as it appears), nothing per transfer:
/// the same verdict as `check` on the same transfers. Combining collectives
/// (Reduce-Scatter, Reduce, All-Reduce) are replayed a chunk at a time, which needs the
/// transfers grouped by chunk: their stream is read into a `Schedule` (within the memory
/// limit) and checked by `check`.
pub fn check_stream<R: BufRead>(stream: StreamReader<R>, topo: &Topology) -> Result<CheckReport> {
    let spec = stream.header().collective.clone();
    let chunk_bytes = stream.header().chunk_bytes;
    let doing = |transfers: String| {
        format!(
            "checking a {} stream over {} NPUs with K={} ({transfers})",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        )
    };
    if spec.kind.combining() {
        let schedule = stream.into_schedule(
            |n| budget::collective(topo, &spec).saturating_add(budget::check(&spec, topo, n)),
            || doing("read whole: its sums are replayed a chunk at a time".into()),
        )?;
        return check(&schedule, topo);
    }
    // Nothing per transfer: the checker's state for no transfers, plus the transfers in
    // flight (at most one per link, in a queue or a heap, with a vector's slack) and the
    // reader's buffers.
    let in_flight = 4 * std::mem::size_of::<Arrival>() as u64;
    let estimate = budget::collective(topo, &spec)
        .saturating_add(budget::check(&spec, topo, 0))
        .saturating_add((topo.links().len() as u64).saturating_mul(in_flight))
        .saturating_add(1 << 18);
    let collective = admitted(&spec, topo, estimate, || doing("streamed".into()))?;
    let mut sweep = Sweep::new(topo, &collective, chunk_bytes, Timing::Promised)?;
    for (i, t) in stream.enumerate() {
        sweep.depart(i, &t?)?;
    }
    sweep.finish()
}

/// Checks schedules meant to run at the same time on `topo` (as
/// `synth::synthesize_concurrent` makes them): each must pass `check`, and no link may
/// carry two chunks at once across all of them.
pub fn check_concurrent(schedules: &[Schedule], topo: &Topology) -> Result<Vec<CheckReport>> {
    let reports = schedules
        .iter()
        .enumerate()
        .map(|(i, s)| check(s, topo).map_err(|e| Error::Schedule(format!("schedule {i}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    // The schedules' transfers merged in start order, each schedule's taken in its own.
    let orders = schedules
        .iter()
        .map(|s| Order::by(&s.transfers, |t| t.start_ps))
        .collect::<Result<Vec<_>>>()?;
    let start = |s: usize, at: usize| schedules[s].transfers[orders[s].at(at)].start_ps;
    let mut next: BinaryHeap<Reverse<(Picos, usize, usize)>> = (0..schedules.len())
        .filter(|&s| orders[s].len() > 0)
        .map(|s| Reverse((start(s, 0), s, 0)))
        .collect();
    let mut links = LinkSweep::new(topo.links().len());
    let mut routes = Routes::new(topo);
    while let Some(Reverse((_, s, at))) = next.pop() {
        let i = orders[s].at(at);
        let t = &schedules[s].transfers[i];
        let route = routes
            .between(t.src, t.dst)
            .expect("check found every transfer's route");
        if let Some((_, (sa, a))) = links.hold(route, t, (s, i)) {
            let ta = &schedules[sa].transfers[a];
            return Err(Error::Schedule(format!(
                "schedule {s}, {}: starts while transfer {a} of schedule {sa} (chunk {}) still occupies the link until {:.6} us",
                describe(i, t),
                ta.chunk,
                ps_to_us(ta.end_ps)
            )));
        }
        if at + 1 < orders[s].len() {
            next.push(Reverse((start(s, at + 1), s, at + 1)));
        }
    }
    Ok(reports)
}

/// The links each NPU pair's transfers hold (`Topology::route`): the direct link, or the
/// route read off the sender's route tree, kept per sending NPU (routes are walked again
/// for each transfer rather than kept per pair, of which there can be as many as
/// transfers).
struct Routes<'a> {
    topo: &'a Topology,
    /// The last route found.
    route: Vec<LinkId>,
    trees: HashMap<NpuId, RouteTree>,
}

impl<'a> Routes<'a> {
    fn new(topo: &'a Topology) -> Routes<'a> {
        Routes {
            topo,
            route: Vec::new(),
            trees: HashMap::new(),
        }
    }

    fn between(&mut self, src: NpuId, dst: NpuId) -> Option<&[LinkId]> {
        let topo = self.topo;
        if let Some(l) = topo.link_between(src, dst) {
            self.route.clear();
            self.route.push(l);
            return Some(&self.route);
        }
        if !topo.has_switches() {
            return None;
        }
        self.route = self
            .trees
            .entry(src)
            .or_insert_with(|| topo.route_tree(src))
            .route_to(topo, dst)?;
        Some(&self.route)
    }
}

/// Per link, when the transfer that started last on it ends, and which it is (ending at
/// 0 where none has: every transfer ends after it starts).
struct LinkSweep<Id> {
    last: Vec<(Picos, Id)>,
}

impl<Id: Copy + Default> LinkSweep<Id> {
    fn new(links: usize) -> LinkSweep<Id> {
        LinkSweep {
            last: vec![(0, Id::default()); links],
        }
    }

    /// Puts `t` (transfer `id`) on the links of `route`; transfers must come in start
    /// order. Returns the transfer it overlaps on one of them, if any, with its end.
    fn hold(&mut self, route: &[LinkId], t: &Transfer, id: Id) -> Option<(Picos, Id)> {
        for &link in route {
            match self.last[link] {
                (end, earlier) if t.start_ps < end => return Some((end, earlier)),
                _ => self.last[link] = (t.end_ps, id),
            }
        }
        None
    }
}

/// Transfer indices in the order of a key (ties in index order): nothing stored where the
/// schedule is already in that order (a synthesized one is in start order), else one u32
/// per transfer.
enum Order {
    Given(usize),
    Sorted(Vec<u32>),
}

impl Order {
    fn by<K: Ord>(transfers: &[Transfer], key: impl Fn(&Transfer) -> K) -> Result<Order> {
        if transfers.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            return Ok(Order::Given(transfers.len()));
        }
        let count = index32(transfers.len())?;
        let mut order: Vec<u32> = (0..count).collect();
        order.sort_unstable_by_key(|&i| (key(&transfers[i as usize]), i));
        Ok(Order::Sorted(order))
    }

    fn len(&self) -> usize {
        match self {
            Order::Given(n) => *n,
            Order::Sorted(order) => order.len(),
        }
    }

    /// The index of the transfer at position `at`.
    fn at(&self, at: usize) -> usize {
        match self {
            Order::Given(_) => at,
            Order::Sorted(order) => order[at] as usize,
        }
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).map(|at| self.at(at))
    }
}

/// `transfers` as a u32, the checker's transfer index where it keeps one per transfer.
fn index32(transfers: usize) -> Result<u32> {
    u32::try_from(transfers).map_err(|_| Error::Limit {
        what: "transfers",
        value: transfers as u64,
        limit: u32::MAX as u64,
        context: "checking a schedule".into(),
    })
}

/// Checks only the data flow of a schedule whose times are an order, not a promise (a
/// baseline whose sends the simulator routes and times): NPUs and chunks exist, every
/// sender holds the chunk when it sends in (start, end) order, and every postcondition holds.
pub fn check_data_flow(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    sweep_schedule(schedule, &collective, topo, Timing::Order)
}

/// The schedule's collective, built once the checker's memory fits the limit.
fn collective_of(schedule: &Schedule, topo: &Topology) -> Result<Collective> {
    let spec = &schedule.collective;
    let transfers = schedule.transfers.len() as u64;
    let estimate =
        budget::collective(topo, spec).saturating_add(budget::check(spec, topo, transfers));
    admitted(spec, topo, estimate, || {
        format!(
            "checking a {} schedule over {} NPUs with K={} ({transfers} transfers)",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        )
    })
}

/// The collective of `spec`, built once `estimate` bytes fit the memory limit.
fn admitted(
    spec: &CollectiveSpec,
    topo: &Topology,
    estimate: u64,
    doing: impl FnOnce() -> String,
) -> Result<Collective> {
    MemoryLimit::default().admit(estimate, doing)?;
    Collective::new(topo, spec.clone())
        .map_err(|e| Error::Schedule(format!("its collective is not valid here: {e}")))
}

/// Sweeps a schedule's transfers in start order, then for combining collectives replays
/// their sums.
fn sweep_schedule(
    schedule: &Schedule,
    collective: &Collective,
    topo: &Topology,
    timing: Timing,
) -> Result<CheckReport> {
    let departures = Order::by(&schedule.transfers, |t| t.start_ps)?;
    let mut sweep = Sweep::new(topo, collective, schedule.chunk_bytes, timing)?;
    for i in departures.iter() {
        sweep.depart(i, &schedule.transfers[i])?;
    }
    let report = sweep.finish()?;
    if collective.combining() {
        replay_sums(schedule, collective, topo.npus(), &departures)?;
    }
    Ok(report)
}

/// What a sweep holds the transfers' times to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Timing {
    /// Each takes exactly its route's time and no link carries two at once (`check`).
    Promised,
    /// They only order the sends: each ends after it starts (`check_data_flow`).
    Order,
}

/// The one pass over transfers in start order that `check`, `check_stream` and
/// `check_data_flow` share: each transfer's NPUs, chunk, route, duration and link use as
/// it departs, and for copying collectives the contents (combining ones are replayed
/// after, a chunk at a time).
struct Sweep<'a> {
    topo: &'a Topology,
    collective: &'a Collective,
    chunk_bytes: f64,
    timing: Timing,
    routes: Routes<'a>,
    /// Per link, the last transfer on it: its index and chunk.
    links: LinkSweep<(usize, ChunkId)>,
    copies: Option<Copies>,
    transfers: usize,
    latest_end: Picos,
}

impl<'a> Sweep<'a> {
    fn new(
        topo: &'a Topology,
        collective: &'a Collective,
        chunk_bytes: f64,
        timing: Timing,
    ) -> Result<Sweep<'a>> {
        let expected = collective.chunk_bytes();
        if timing == Timing::Promised && (chunk_bytes - expected).abs() > 1e-9 * expected.max(1.0) {
            return Err(Error::Schedule(format!(
                "chunk_bytes is {chunk_bytes} but the collective's chunks are {expected} bytes"
            )));
        }
        Ok(Sweep {
            topo,
            collective,
            chunk_bytes,
            timing,
            routes: Routes::new(topo),
            links: LinkSweep::new(match timing {
                Timing::Promised => topo.links().len(),
                Timing::Order => 0,
            }),
            copies: (!collective.combining()).then(|| Copies::new(collective, topo.npus())),
            transfers: 0,
            latest_end: 0,
        })
    }

    /// Takes transfer `i`, which starts no earlier than those before it.
    fn depart(&mut self, i: usize, t: &Transfer) -> Result<()> {
        check_static(i, t, self.collective, self.topo)?;
        match self.timing {
            Timing::Promised => {
                let topo = self.topo;
                let route = self.routes.between(t.src, t.dst).ok_or_else(|| {
                    fail(
                        i,
                        t,
                        format!(
                            "there is no link {}from NPU {} to NPU {}",
                            if topo.has_switches() {
                                "or route through switches "
                            } else {
                                ""
                            },
                            t.src,
                            t.dst
                        ),
                    )
                })?;
                let needed = route_time_ps(topo, route, self.chunk_bytes)
                    .map_err(|e| fail(i, t, e.to_string()))?;
                if t.end_ps.checked_sub(t.start_ps) != Some(needed) {
                    return Err(fail(
                        i,
                        t,
                        format!(
                            "takes {:.6} us but the {} needs {:.6} us",
                            ps_to_us(t.end_ps.saturating_sub(t.start_ps)),
                            if route.len() == 1 { "link" } else { "route" },
                            ps_to_us(needed)
                        ),
                    ));
                }
                if let Some((end, (a, chunk))) = self.links.hold(route, t, (i, t.chunk)) {
                    return Err(fail(
                        i,
                        t,
                        format!(
                            "starts while transfer {a} (chunk {chunk}) still occupies the link until {:.6} us",
                            ps_to_us(end)
                        ),
                    ));
                }
            }
            Timing::Order => {
                if t.end_ps <= t.start_ps {
                    return Err(fail(i, t, "does not end after it starts".into()));
                }
            }
        }
        if let Some(copies) = &mut self.copies {
            copies.depart(i, t)?;
        }
        self.transfers += 1;
        self.latest_end = self.latest_end.max(t.end_ps);
        Ok(())
    }

    /// Lands the transfers still in flight and checks the postconditions of a copying
    /// collective.
    fn finish(self) -> Result<CheckReport> {
        if let Some(copies) = self.copies {
            copies.finish(self.collective)?;
        }
        Ok(CheckReport {
            collective_time_ps: self.latest_end,
            transfers: self.transfers,
        })
    }
}

/// A transfer in flight as the sweep lands it: when, where, which chunk.
type Arrival = (Picos, NpuId, ChunkId);

/// Transfers in flight, landed earliest first (in any order among equal ends): those sent
/// in end order (all of them where every transfer takes as long) queue in order, the rest
/// wait in a heap.
#[derive(Default)]
struct InFlight {
    in_order: VecDeque<Arrival>,
    rest: BinaryHeap<Reverse<Arrival>>,
}

impl InFlight {
    fn push(&mut self, a: Arrival) {
        match self.in_order.back() {
            Some(last) if a.0 < last.0 => self.rest.push(Reverse(a)),
            _ => self.in_order.push_back(a),
        }
    }

    /// The earliest arrival by `by`, taken out.
    fn pop_by(&mut self, by: Picos) -> Option<Arrival> {
        let queued = self.in_order.front().filter(|a| a.0 <= by);
        let heaped = self.rest.peek().map(|r| r.0).filter(|a| a.0 <= by);
        match (queued, heaped) {
            (Some(q), Some(h)) if h.0 < q.0 => self.rest.pop().map(|r| r.0),
            (Some(_), _) => self.in_order.pop_front(),
            (None, Some(_)) => self.rest.pop().map(|r| r.0),
            (None, None) => None,
        }
    }
}

/// Copying collectives: a chunk is whole or absent on an NPU, one bit per (NPU, chunk).
/// A copy brings what its sender held when it left, which was the whole chunk (checked
/// then), so a chunk once held stays held, and a transfer in flight needs only its end,
/// destination and chunk.
struct Copies {
    chunks: usize,
    held: Vec<u64>,
    in_flight: InFlight,
    /// The first sender lacking its chunk among the transfers departing at the current
    /// instant, reported once all of them are on their links: contention among transfers
    /// that start together is found first however they are listed.
    lacking: Option<Error>,
    /// The current instant.
    now: Picos,
}

impl Copies {
    fn new(collective: &Collective, npus: usize) -> Copies {
        let chunks = collective.chunk_count();
        let mut copies = Copies {
            chunks,
            held: table(0u64, (npus * chunks).div_ceil(64)),
            in_flight: InFlight::default(),
            lacking: None,
            now: 0,
        };
        for c in 0..chunks {
            for &npu in collective.pre(c) {
                copies.set(npu, c);
            }
        }
        copies
    }

    fn bit(&self, npu: NpuId, chunk: ChunkId) -> (usize, u64) {
        let b = npu * self.chunks + chunk;
        (b / 64, 1u64 << (b % 64))
    }

    fn set(&mut self, npu: NpuId, chunk: ChunkId) {
        let (word, mask) = self.bit(npu, chunk);
        self.held[word] |= mask;
    }

    fn holds(&self, npu: NpuId, chunk: ChunkId) -> bool {
        let (word, mask) = self.bit(npu, chunk);
        self.held[word] & mask != 0
    }

    /// Sends transfer `i` once what arrives by its start has landed (arrivals at a time
    /// land before departures at it, so a chunk can be forwarded the moment it arrives),
    /// from an NPU that must hold its chunk.
    fn depart(&mut self, i: usize, t: &Transfer) -> Result<()> {
        if t.start_ps != self.now {
            self.report()?;
            self.now = t.start_ps;
            self.land(t.start_ps);
        }
        if self.lacking.is_none() && !self.holds(t.src, t.chunk) {
            self.lacking = Some(not_held(i, t));
        }
        self.in_flight.push((t.end_ps, t.dst, t.chunk));
        Ok(())
    }

    /// The lack found at the instant that ended, if any.
    fn report(&mut self) -> Result<()> {
        self.lacking.take().map_or(Ok(()), Err)
    }

    fn land(&mut self, by: Picos) {
        while let Some((_, dst, chunk)) = self.in_flight.pop_by(by) {
            self.set(dst, chunk);
        }
    }

    fn finish(mut self, collective: &Collective) -> Result<()> {
        self.report()?;
        self.land(Picos::MAX);
        for c in 0..self.chunks {
            let lacking: Vec<usize> = collective
                .post(c)
                .iter()
                .copied()
                .filter(|&n| !self.holds(n, c))
                .collect();
            if !lacking.is_empty() {
                return Err(lacks(&lacking, c, ""));
            }
        }
        Ok(())
    }
}

fn fail(i: usize, t: &Transfer, what: String) -> Error {
    Error::Schedule(format!("{}: {what}", describe(i, t)))
}

fn describe(i: usize, t: &Transfer) -> String {
    format!(
        "transfer {i} (chunk {}, NPU {} -> {}, {:.6}-{:.6} us)",
        t.chunk,
        t.src,
        t.dst,
        ps_to_us(t.start_ps),
        ps_to_us(t.end_ps)
    )
}

fn check_static(i: usize, t: &Transfer, collective: &Collective, topo: &Topology) -> Result<()> {
    if t.chunk >= collective.chunk_count() {
        return Err(fail(
            i,
            t,
            format!(
                "the collective has chunks 0..{}",
                collective.chunk_count() - 1
            ),
        ));
    }
    if t.src >= topo.npus() || t.dst >= topo.npus() {
        return Err(fail(
            i,
            t,
            format!("the topology has NPUs 0..{}", topo.npus() - 1),
        ));
    }
    if t.src == t.dst {
        return Err(fail(i, t, "source and destination are the same NPU".into()));
    }
    if t.op == Op::Reduce && !collective.combining() {
        return Err(fail(
            i,
            t,
            format!("{} copies chunks; it has no reductions", collective.kind()),
        ));
    }
    Ok(())
}

/// Combining collectives, one chunk at a time: a chunk's contents never depend on
/// another's, so only one chunk's contribution sets (one bit per contributor on each NPU)
/// are held at once, and transfers are grouped by chunk with a 4-byte index each. The
/// verdict is the one a replay of all chunks together gives: the earliest failure in
/// time, else the lowest-numbered chunk some NPU lacks at the end.
fn replay_sums(
    schedule: &Schedule,
    collective: &Collective,
    npus: usize,
    departures: &Order,
) -> Result<()> {
    let transfers = &schedule.transfers;
    let chunks = collective.chunk_count();
    index32(transfers.len())?;
    // Transfer indices grouped by chunk (a counting sort), each group in start order.
    let mut first = vec![0usize; chunks + 1];
    for t in transfers {
        first[t.chunk + 1] += 1;
    }
    for c in 0..chunks {
        first[c + 1] += first[c];
    }
    let mut by_chunk = vec![0u32; transfers.len()];
    let mut next = first.clone();
    for i in departures.iter() {
        let c = transfers[i].chunk;
        by_chunk[next[c]] = i as u32;
        next[c] += 1;
    }
    drop(next);
    let mut sums = ChunkSums::new(collective, npus);
    let mut arrivals: Vec<u32> = Vec::new();
    let mut earliest: Option<(Event, Error)> = None;
    let mut lacking_first: Option<Error> = None;
    for c in 0..chunks {
        let sent = &by_chunk[first[c]..first[c + 1]];
        arrivals.clear();
        arrivals.extend_from_slice(sent);
        arrivals.sort_unstable_by_key(|&i| (transfers[i as usize].end_ps, i));
        sums.begin(collective.pre(c));
        if let Err((event, e)) = sums.replay(transfers, sent, &arrivals) {
            if earliest.as_ref().map_or(true, |(first, _)| event < *first) {
                earliest = Some((event, e));
            }
            continue;
        }
        if lacking_first.is_none() {
            let contributors = collective.pre(c).len();
            let lacking: Vec<usize> = collective
                .post(c)
                .iter()
                .copied()
                .filter(|&n| !sums.holds_all(n, contributors))
                .collect();
            if !lacking.is_empty() {
                lacking_first = Some(lacks(&lacking, c, " (or some of its contributions)"));
            }
        }
    }
    match (earliest, lacking_first) {
        (Some((_, e)), _) | (None, Some(e)) => Err(e),
        (None, None) => Ok(()),
    }
}

/// When a replay step happens: (time, whether it is a departure, the transfer), the order
/// steps are taken in (arrivals at a time before departures at it).
type Event = (Picos, bool, usize);

/// One chunk's contribution sets on every NPU: `words` words per NPU, bit j set when the
/// NPU's content includes the chunk's j-th contributor (`Collective::pre`). Rows are
/// reset lazily: an NPU not yet touched for the current chunk holds its own contribution.
struct ChunkSums {
    words: usize,
    bits: Vec<u64>,
    /// Per NPU, the chunk (counted from 1) its row was last reset for.
    stamp: Vec<u32>,
    current: u32,
    /// Per NPU, its index among the current chunk's contributors (`NONE` if not one).
    contributor: Vec<u32>,
    /// The contributors `contributor` was filled for.
    contributors: Vec<NpuId>,
    /// The contributions of transfers in flight, and spare rows for them.
    in_flight: HashMap<usize, Vec<u64>>,
    spare: Vec<Vec<u64>>,
}

const NONE: u32 = u32::MAX;

impl ChunkSums {
    fn new(collective: &Collective, npus: usize) -> ChunkSums {
        let words = (0..collective.chunk_count())
            .map(|c| collective.pre(c).len().div_ceil(64))
            .max()
            .unwrap_or(0);
        ChunkSums {
            words,
            bits: vec![0; words * npus],
            stamp: vec![0; npus],
            current: 0,
            contributor: vec![NONE; npus],
            contributors: Vec::new(),
            in_flight: HashMap::new(),
            spare: Vec::new(),
        }
    }

    /// Starts the next chunk, whose contributors are `pre`.
    fn begin(&mut self, pre: &[NpuId]) {
        self.current += 1;
        self.in_flight.clear();
        if self.contributors != pre {
            for &npu in &self.contributors {
                self.contributor[npu] = NONE;
            }
            for (j, &npu) in pre.iter().enumerate() {
                self.contributor[npu] = j as u32;
            }
            self.contributors = pre.to_vec();
        }
    }

    /// `npu`'s row, reset to its own contribution if the current chunk has not touched it.
    fn row(&mut self, npu: NpuId) -> &mut [u64] {
        let own = self.contributor[npu];
        let row = &mut self.bits[npu * self.words..(npu + 1) * self.words];
        if self.stamp[npu] != self.current {
            self.stamp[npu] = self.current;
            row.fill(0);
            if own != NONE {
                row[own as usize / 64] |= 1 << (own % 64);
            }
        }
        row
    }

    /// Replays the current chunk's transfers: `sent` in start order, `arrivals` in end
    /// order. A failure comes with when it happens.
    fn replay(
        &mut self,
        transfers: &[Transfer],
        sent: &[u32],
        arrivals: &[u32],
    ) -> std::result::Result<(), (Event, Error)> {
        let mut departed = sent.iter().map(|&d| d as usize).peekable();
        for i in arrivals.iter().map(|&i| i as usize) {
            let t = &transfers[i];
            // Arrivals at time t land before departures at t, so a chunk can be forwarded
            // the moment it arrives.
            while let Some(d) = departed.next_if(|&d| transfers[d].start_ps < t.end_ps) {
                let s = &transfers[d];
                let mut data = self.spare.pop().unwrap_or_default();
                data.clear();
                data.extend_from_slice(self.row(s.src));
                if data.iter().all(|&w| w == 0) {
                    return Err(((s.start_ps, true, d), not_held(d, s)));
                }
                self.in_flight.insert(d, data);
            }
            let arrival = (t.end_ps, false, i);
            let Some(data) = self.in_flight.remove(&i) else {
                return Err((arrival, fail(i, t, "arrives before it departs".into())));
            };
            let dst = self.row(t.dst);
            match t.op {
                Op::Copy => dst.copy_from_slice(&data),
                Op::Reduce => {
                    if dst.iter().zip(&data).any(|(a, b)| a & b != 0) {
                        let e = format!(
                            "NPU {} would count a contribution to chunk {} twice",
                            t.dst, t.chunk
                        );
                        return Err((arrival, fail(i, t, e)));
                    }
                    dst.iter_mut().zip(&data).for_each(|(a, b)| *a |= b);
                }
            }
            self.spare.push(data);
        }
        Ok(())
    }

    /// Whether `npu` holds the current chunk's first `contributors` contributions.
    fn holds_all(&mut self, npu: NpuId, contributors: usize) -> bool {
        let held = self.row(npu);
        let (whole, rest) = (contributors / 64, contributors % 64);
        held[..whole].iter().all(|&w| w == u64::MAX)
            && (rest == 0 || held[whole] & ((1 << rest) - 1) == (1 << rest) - 1)
    }
}

fn not_held(i: usize, t: &Transfer) -> Error {
    fail(
        i,
        t,
        format!(
            "NPU {} does not hold chunk {} when it sends",
            t.src, t.chunk
        ),
    )
}

/// The error for NPUs lacking chunk `c` at the end.
fn lacks(lacking: &[NpuId], c: usize, what: &str) -> Error {
    let who = match lacking {
        [one] => format!("NPU {one} lacks"),
        many => format!("NPUs {} lack", format_npus(many)),
    };
    Error::Schedule(format!("at the end, {who} chunk {c}{what}"))
}
