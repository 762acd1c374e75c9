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
//! group them by chunk; `check_stream` reads them as reduction trees instead, below),
//! the last transfer on each link and the transfers in flight (at most one per link),
//! through switches a route tree per sending NPU, and a 4-byte index per transfer only
//! where the schedule is not already in start order. Transfers are
//! swept once in start order (a stream is read in that order, so `check_stream` holds
//! nothing per transfer); durations are at least a picosecond, so two transfers on a link
//! overlap exactly when one starts before the one that started last on it has ended.
//!
//! # In-switch operations
//!
//! In-switch transfers (`Transfer::in_switch`) of one group (`GroupKey`: one multicast or
//! one sum inside a reducing switch) share some links of their routes (`shared_links`):
//! per link the sweep keeps the group of its holder beside it, so a later member takes a
//! shared link while the group's first member holds it, provided it ends when that one
//! does; every other overlap is contention as before. Contents are unchanged: a
//! multicast is its copies, a sum its reductions, each reading its sender's chunk at the
//! start, which the replays already judge.
//!
//! # Streamed combining collectives: reduction trees
//!
//! A combining collective's stream cannot be grouped by chunk without holding it, so
//! `check_stream` reads sums in one pass in start order with a sufficient rule instead:
//! it accepts exactly the schedules whose reductions form, per chunk, one in-tree over the
//! chunk's contributors (every contributor but the root sends its partial sum once, after
//! all partials sent to it have landed), followed by copies of the whole sum. Per (NPU,
//! chunk) it keeps whether the NPU has sent its partial (`passed`) and whether it holds
//! the whole sum (`whole`), per chunk how many reductions have landed; with P the chunk's
//! contributors (`Collective::pre`), arrivals at an instant landing before departures at
//! it:
//! - a reduction leaves from a contributor neither `passed` nor `whole`, which becomes
//!   `passed`;
//! - a reduction lands at a contributor neither `passed` (its partial left without this
//!   one: lost) nor `whole` (counted twice); when the chunk's landed reductions reach
//!   |P| - 1, that NPU becomes `whole` (a single contributor is `whole` from the start);
//! - a copy leaves only from a `whole` NPU and makes its destination `whole`;
//! - at the end every NPU of the postcondition is `whole`.
//!
//! Why an accepted schedule is correct under the contribution sets `check` replays: each
//! contributor sends at most once, so the reductions are a graph with at most one edge
//! out of each NPU, and along an edge s -> d, s leaves before the edge lands (durations
//! are at least a picosecond), which is no later than d leaves: times increase strictly
//! along paths, so there is no cycle. By induction over the replay, an NPU neither
//! `passed` nor `whole` holds exactly itself and the NPUs whose chain of landed edges
//! ends at it, and a reduction carries its sender's such set. Two such sets meeting at a
//! landing s -> d are disjoint: an NPU in both would have one chain of edges reaching s
//! and d, so either s's only edge (this one) had already landed on the way to d, or d
//! had already sent on the way to s and is `passed`, both refused. The (|P| - 1)-th
//! landing comes from the last of the |P| - 1 distinct senders other than its
//! destination d (d has not sent: it would be `passed`), every other contributor's
//! chain ends at d, so d holds all of P; only `whole` NPUs send copies, so copies carry
//! the whole sum, and a `whole` NPU neither sends nor takes partials after. A
//! contributor `passed` and not `whole` lacks its parent's contribution, any other NPU
//! not `whole` holds nothing: `whole` at the end is exactly holding the whole sum, so the
//! final verdict is `check`'s.
//!
//! `check`, holding the schedule, judges any reduction pattern; a correct schedule of
//! another shape (partial sums copied, a partial sent twice, recursive doubling's
//! exchanges) is refused by `check_stream` with a message saying the streamed check reads
//! only the reduction-tree form and that `check` on the schedule read whole judges it.

use super::in_flight::{InFlight, LOOKAHEAD};
use super::stream::StreamReader;
use super::{route_time_ps, shared_links, GroupKey, Op, Schedule, Transfer};
use crate::budget::MemoryLimit;
use crate::collective::{ChunkId, Collective, CollectiveSpec};
use crate::error::{Error, Result};
use crate::hugepages::table;
use crate::prefetch;
use crate::topology::{format_npus, LinkId, NpuId, RouteCache, Topology};
use crate::units::{ps_to_us, Picos};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::BufRead;
use std::ops::Range;

/// What a passing check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// When the last transfer ends.
    pub collective_time_ps: Picos,
    pub transfers: usize,
}

/// Checks a timed schedule: every transfer uses an existing link, or a route through
/// switches (`Topology::route`, held cut-through), and takes exactly its alpha + size /
/// bandwidth (`route_time_ps`), every in-switch transfer passes a reducing switch, no
/// link carries two chunks at once (but the links an in-switch operation shares carry
/// its one chunk, and its transfers end together), every sender holds the chunk when it
/// sends, and every postcondition holds at the end. A schedule with
/// several faults is refused for the first in start order (at one instant, a transfer's
/// NPUs, route, duration or link before any sender lacking its chunk then).
pub fn check(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    sweep_schedule(schedule, &collective, topo, Timing::Promised)
}

/// `check` on a stream (`schedule::stream`) in one pass, holding per link its last
/// transfer and the transfers in flight (a contention-free schedule has at most one per
/// link; contention is refused as it appears), nothing per transfer. Copying collectives:
/// a bit per (NPU, chunk), and the same verdict as `check` on the same transfers.
/// Combining collectives (Reduce-Scatter, Reduce, All-Reduce): two bits per (NPU, chunk)
/// and a count per chunk, read as reduction trees (see the module's documentation):
/// every schedule it accepts `check` accepts with the same report, and a correct
/// schedule whose sums take another shape is refused, saying so.
pub fn check_stream<R: BufRead>(stream: StreamReader<R>, topo: &Topology) -> Result<CheckReport> {
    let spec = stream.header().collective.clone();
    let chunk_bytes = stream.header().chunk_bytes;
    // The checker's state, plus the transfers in flight (at most one per link, in a queue
    // or a heap, with a vector's slack) and the reader's buffers.
    let carried = match spec.kind.combining() {
        true => std::mem::size_of::<(Picos, Sent)>(),
        false => std::mem::size_of::<(Picos, (NpuId, ChunkId))>(),
    };
    let estimate = crate::collective::memory::building(topo, &spec)
        .saturating_add(super::memory::check_streamed(&spec, topo))
        .saturating_add((topo.links().len() as u64).saturating_mul(4 * carried as u64))
        .saturating_add(1 << 18);
    let collective = admitted(&spec, topo, estimate, || {
        format!(
            "checking a {} stream over {} NPUs with K={}",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        )
    })?;
    let mut sweep = Sweep::new(
        topo,
        &collective,
        chunk_bytes,
        Timing::Promised,
        Sums::Trees,
    )?;
    // Decoded a few transfers ahead, so their bits are fetched before they are read. A
    // transfer the file cannot give is reported once those before it are judged, as a
    // reader that did not look ahead would.
    let mut ahead: VecDeque<Transfer> = VecDeque::with_capacity(LOOKAHEAD + 1);
    let mut unreadable = None;
    for (i, t) in stream.enumerate() {
        match t {
            Ok(t) => {
                sweep.prefetch(&t);
                ahead.push_back(t);
            }
            Err(e) => {
                unreadable = Some(e);
                break;
            }
        }
        if ahead.len() > LOOKAHEAD {
            let t = ahead.pop_front().expect("more than LOOKAHEAD are waiting");
            sweep.depart(i - LOOKAHEAD, &t)?;
        }
    }
    let judged = sweep.transfers;
    for (k, t) in ahead.iter().enumerate() {
        sweep.depart(judged + k, t)?;
    }
    if let Some(e) = unreadable {
        return Err(e);
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
        .map(|(i, s)| check(s, topo).map_err(|e| e.context(format!("schedule {i}"))))
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
    let mut routes = RouteCache::new(topo);
    while let Some(Reverse((_, s, at))) = next.pop() {
        let i = orders[s].at(at);
        let t = &schedules[s].transfers[i];
        let route = routes
            .between(t.src(), t.dst())
            .expect("check found every transfer's route");
        // `check` accepted every in-switch transfer's route.
        let shared = match t.in_switch {
            true => shared_links(topo, route.iter().copied(), t.op)
                .ok()
                .map(|span| ((s, GroupKey::of(t)), span)),
            false => None,
        };
        if let Some(Clash::Occupied(_, (sa, a)) | Clash::Unequal(_, (sa, a))) =
            links.hold(route, t, (s, i), shared)
        {
            let ta = &schedules[sa].transfers[a];
            return Err(Error::schedule(format!(
                "schedule {s}, {}: starts while transfer {a} of schedule {sa} (chunk {}) still occupies the link until {:.6} us",
                describe(i, t),
                ta.chunk(),
                ps_to_us(ta.end_ps)
            )));
        }
        if at + 1 < orders[s].len() {
            next.push(Reverse((start(s, at + 1), s, at + 1)));
        }
    }
    Ok(reports)
}

/// Per link, when the transfer that started last on it ends, and which it is (ending at
/// 0 where none has: every transfer ends after it starts); and the in-switch group
/// (named by a `G`) it holds the link for, where the link is one its group shares.
struct LinkSweep<Id, G> {
    last: Vec<(Picos, Id)>,
    /// Per link, the holder's group; empty until an in-switch transfer comes, so that a
    /// schedule without one touches nothing more than before.
    groups: Vec<Option<G>>,
}

/// Why a transfer cannot take a link: what holds it, and until when.
enum Clash<Id> {
    /// Another transfer, not of its group on a link the group shares.
    Occupied(Picos, Id),
    /// The first of its own in-switch group, which ends at another time.
    Unequal(Picos, Id),
}

impl<Id: Copy + Default, G: Copy + PartialEq> LinkSweep<Id, G> {
    fn new(links: usize) -> LinkSweep<Id, G> {
        LinkSweep {
            last: vec![(0, Id::default()); links],
            groups: Vec::new(),
        }
    }

    /// Puts `t` (transfer `id`) on the links of `route`; transfers must come in start
    /// order. `shared`: an in-switch transfer's group and the positions in `route` of the
    /// links the group shares (`shared_links`), which a member may take while the
    /// group's first member holds them. Returns what keeps it off one of them, if any.
    fn hold(
        &mut self,
        route: &[LinkId],
        t: &Transfer,
        id: Id,
        shared: Option<(G, Range<usize>)>,
    ) -> Option<Clash<Id>> {
        if shared.is_some() && self.groups.is_empty() {
            self.groups = vec![None; self.last.len()];
        }
        for (k, &link) in route.iter().enumerate() {
            let group = match &shared {
                Some((g, span)) if span.contains(&k) => Some(*g),
                _ => None,
            };
            let (end, holder) = self.last[link];
            if t.start_ps >= end {
                self.last[link] = (t.end_ps, id);
                if let Some(held_for) = self.groups.get_mut(link) {
                    *held_for = group;
                }
            } else if group.is_none() || group != self.groups.get(link).copied().flatten() {
                return Some(Clash::Occupied(end, holder));
            } else if t.end_ps != end {
                return Some(Clash::Unequal(end, holder));
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
    let estimate = crate::collective::memory::building(topo, spec)
        .saturating_add(super::memory::check(spec, topo, transfers));
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
    Collective::new(topo, spec.clone()).map_err(|e| e.context("its collective is not valid here"))
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
    let mut sweep = Sweep::new(
        topo,
        collective,
        schedule.chunk_bytes,
        timing,
        Sums::Replayed,
    )?;
    for (k, i) in departures.iter().enumerate() {
        if k + LOOKAHEAD < departures.len() {
            sweep.prefetch(&schedule.transfers[departures.at(k + LOOKAHEAD)]);
        }
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

/// How a sweep judges a combining collective's sums.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sums {
    /// Replayed after the sweep, a chunk at a time, whatever their pattern (`check`).
    Replayed,
    /// As reduction trees, during the sweep (`check_stream`).
    Trees,
}

/// The contents a sweep follows as transfers depart and land.
enum Followed {
    /// A copying collective's.
    Copies(Replay<Copies>),
    /// A combining collective's, as reduction trees.
    Trees(Replay<Trees>),
    /// A combining collective's, replayed after the sweep (`replay_sums`).
    Later,
}

/// The one pass over transfers in start order that `check`, `check_stream` and
/// `check_data_flow` share: each transfer's NPUs, chunk, route, duration and link use as
/// it departs, and the contents it follows (`Followed`: a combining collective's, for
/// `check`, are replayed after, a chunk at a time).
struct Sweep<'a> {
    topo: &'a Topology,
    collective: &'a Collective,
    chunk_bytes: f64,
    timing: Timing,
    routes: RouteCache<'a>,
    /// Per link, the time a chunk takes on it alone, once computed (0 before: no time is 0).
    link_time: Vec<Picos>,
    /// Per link, the last transfer on it: its index and chunk, and its in-switch group.
    links: LinkSweep<(usize, ChunkId), GroupKey>,
    contents: Followed,
    transfers: usize,
    latest_end: Picos,
}

impl<'a> Sweep<'a> {
    fn new(
        topo: &'a Topology,
        collective: &'a Collective,
        chunk_bytes: f64,
        timing: Timing,
        sums: Sums,
    ) -> Result<Sweep<'a>> {
        let expected = collective.chunk_bytes();
        if timing == Timing::Promised && (chunk_bytes - expected).abs() > 1e-9 * expected.max(1.0) {
            return Err(Error::schedule(format!(
                "chunk_bytes is {chunk_bytes} but the collective's chunks are {expected} bytes"
            )));
        }
        // Links are followed only where the schedule's times are checked.
        let timed_links = match timing {
            Timing::Promised => topo.links().len(),
            Timing::Order => 0,
        };
        Ok(Sweep {
            topo,
            collective,
            chunk_bytes,
            timing,
            routes: RouteCache::new(topo),
            link_time: vec![0; timed_links],
            links: LinkSweep::new(timed_links),
            contents: match (collective.combining(), sums) {
                (false, _) => Followed::Copies(Replay::new(Copies::new(collective, topo.npus()))),
                (true, Sums::Trees) => {
                    Followed::Trees(Replay::new(Trees::new(collective, topo.npus())?))
                }
                (true, Sums::Replayed) => Followed::Later,
            },
            transfers: 0,
            latest_end: 0,
        })
    }

    /// Asks the cache for what `depart` will read of `t`.
    fn prefetch(&self, t: &Transfer) {
        self.routes.prefetch(t.src());
        match &self.contents {
            Followed::Copies(copies) => copies.contents.prefetch_depart(t),
            Followed::Trees(trees) => trees.contents.prefetch_depart(t),
            Followed::Later => {}
        }
    }

    /// Takes transfer `i`, which starts no earlier than those before it.
    fn depart(&mut self, i: usize, t: &Transfer) -> Result<()> {
        check_static(i, t, self.collective, self.topo)?;
        match self.timing {
            Timing::Promised => {
                let topo = self.topo;
                let route = self.routes.between(t.src(), t.dst()).ok_or_else(|| {
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
                            t.src(),
                            t.dst()
                        ),
                    )
                })?;
                let cached = match route {
                    &[link] => self.link_time[link],
                    _ => 0,
                };
                let needed = match cached {
                    0 => route_time_ps(topo, route, self.chunk_bytes)
                        .map_err(|e| fail(i, t, e.to_string()))?,
                    known => known,
                };
                if let &[link] = route {
                    self.link_time[link] = needed;
                }
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
                let shared = match t.in_switch {
                    true => Some((
                        GroupKey::of(t),
                        shared_links(topo, route.iter().copied(), t.op).map_err(|why| {
                            fail(i, t, format!("is in-switch, but its route {why}"))
                        })?,
                    )),
                    false => None,
                };
                match self.links.hold(route, t, (i, t.chunk()), shared) {
                    None => {}
                    Some(Clash::Occupied(end, (a, chunk))) => {
                        return Err(fail(
                            i,
                            t,
                            format!(
                                "starts while transfer {a} (chunk {chunk}) still occupies the link until {:.6} us",
                                ps_to_us(end)
                            ),
                        ))
                    }
                    Some(Clash::Unequal(end, (a, _))) => {
                        return Err(fail(
                            i,
                            t,
                            format!(
                                "is in the in-switch {} as transfer {a}, which ends at {:.6} us: the transfers of one in-switch operation end together",
                                group_name(t),
                                ps_to_us(end)
                            ),
                        ))
                    }
                }
            }
            Timing::Order => {
                if t.end_ps <= t.start_ps {
                    return Err(fail(i, t, "does not end after it starts".into()));
                }
            }
        }
        match &mut self.contents {
            Followed::Copies(copies) => copies.depart(i, t)?,
            Followed::Trees(trees) => trees.depart(i, t)?,
            Followed::Later => {}
        }
        self.transfers += 1;
        self.latest_end = self.latest_end.max(t.end_ps);
        Ok(())
    }

    /// Lands the transfers still in flight and checks the postconditions of the contents
    /// it follows.
    fn finish(self) -> Result<CheckReport> {
        match self.contents {
            Followed::Copies(copies) => copies.finish(self.collective)?,
            Followed::Trees(trees) => trees.finish(self.collective)?,
            Followed::Later => {}
        }
        Ok(CheckReport {
            collective_time_ps: self.latest_end,
            transfers: self.transfers,
        })
    }
}

/// A collective's chunk contents as a sweep follows them, transfer by transfer in start
/// order (`Replay`).
trait Contents {
    /// What a transfer in flight carries to its landing.
    type Carried: Ord;

    /// Transfer `i` leaves, once everything landing by its start has landed. An error is
    /// reported once every transfer departing at the same instant is on its links, so
    /// that contention among them is found first however they are listed.
    fn depart(&mut self, i: usize, t: &Transfer) -> Result<Self::Carried>;

    /// A transfer lands.
    fn land(&mut self, carried: Self::Carried) -> Result<()>;

    /// Asks the cache for what `depart` will read of transfer `t`. At scale each
    /// transfer's bits are a cache miss of their own; fetched a few transfers ahead, the
    /// misses overlap.
    fn prefetch_depart(&self, t: &Transfer);

    /// Asks the cache for what `land` will read of `carried`.
    fn prefetch_land(&self, carried: &Self::Carried);

    /// Every postcondition holds once everything has landed.
    fn finish(&self, collective: &Collective) -> Result<()>;
}

/// A sweep's replay of `Contents`: transfers in flight land in end order, those landing at
/// an instant before those departing at it (a chunk can be forwarded the moment it
/// arrives).
struct Replay<C: Contents> {
    contents: C,
    in_flight: InFlight<C::Carried>,
    /// The first departure refused at the current instant, reported when it ends.
    refused: Option<Error>,
    /// The current instant.
    now: Picos,
}

impl<C: Contents> Replay<C> {
    fn new(contents: C) -> Replay<C> {
        Replay {
            contents,
            in_flight: InFlight::new(),
            refused: None,
            now: 0,
        }
    }

    /// Sends transfer `i`, which starts no earlier than those before it.
    fn depart(&mut self, i: usize, t: &Transfer) -> Result<()> {
        if t.start_ps != self.now {
            self.report()?;
            self.now = t.start_ps;
            self.land(t.start_ps)?;
        }
        match self.contents.depart(i, t) {
            Ok(carried) => self.in_flight.push(t.end_ps, carried),
            Err(e) => {
                self.refused.get_or_insert(e);
            }
        }
        Ok(())
    }

    /// The refusal found at the instant that ended, if any.
    fn report(&mut self) -> Result<()> {
        self.refused.take().map_or(Ok(()), Err)
    }

    fn land(&mut self, by: Picos) -> Result<()> {
        while let Some((_, carried)) = self.in_flight.pop_by(by) {
            if let Some(ahead) = self.in_flight.ahead(LOOKAHEAD) {
                self.contents.prefetch_land(ahead);
            }
            self.contents.land(carried)?;
        }
        Ok(())
    }

    fn finish(mut self, collective: &Collective) -> Result<()> {
        self.report()?;
        self.land(Picos::MAX)?;
        self.contents.finish(collective)
    }
}

/// One bit per (NPU, chunk), on huge pages where the system grants them.
struct Bits {
    chunks: usize,
    words: Vec<u64>,
}

impl Bits {
    fn new(npus: usize, chunks: usize) -> Bits {
        Bits {
            chunks,
            words: table(0u64, (npus * chunks).div_ceil(64)),
        }
    }

    fn at(&self, npu: NpuId, chunk: ChunkId) -> (usize, u64) {
        let b = npu * self.chunks + chunk;
        (b / 64, 1u64 << (b % 64))
    }

    fn set(&mut self, npu: NpuId, chunk: ChunkId) {
        let (word, mask) = self.at(npu, chunk);
        self.words[word] |= mask;
    }

    fn holds(&self, npu: NpuId, chunk: ChunkId) -> bool {
        let (word, mask) = self.at(npu, chunk);
        self.words[word] & mask != 0
    }

    /// Asks the cache for the bit of (`npu`, `chunk`), soon to be read.
    fn prefetch(&self, npu: NpuId, chunk: ChunkId) {
        let (word, _) = self.at(npu, chunk);
        if let Some(w) = self.words.get(word) {
            prefetch::line(w);
        }
    }

    /// The error for the NPUs of chunk `c`'s postcondition whose bit is clear, if any.
    fn lacking(&self, collective: &Collective, what: &str) -> Result<()> {
        for c in 0..self.chunks {
            let lacking: Vec<usize> = collective
                .post(c)
                .iter()
                .copied()
                .filter(|&n| !self.holds(n, c))
                .collect();
            if !lacking.is_empty() {
                return Err(lacks(&lacking, c, what));
            }
        }
        Ok(())
    }
}

/// Copying collectives: a chunk is whole or absent on an NPU, one bit per (NPU, chunk).
/// A copy brings what its sender held when it left, which was the whole chunk (checked
/// then), so a chunk once held stays held, and a transfer in flight carries only its
/// destination and chunk.
struct Copies {
    held: Bits,
}

impl Copies {
    fn new(collective: &Collective, npus: usize) -> Copies {
        let mut held = Bits::new(npus, collective.chunk_count());
        for c in 0..collective.chunk_count() {
            for &npu in collective.pre(c) {
                held.set(npu, c);
            }
        }
        Copies { held }
    }
}

impl Contents for Copies {
    type Carried = (NpuId, ChunkId);

    fn depart(&mut self, i: usize, t: &Transfer) -> Result<(NpuId, ChunkId)> {
        match self.held.holds(t.src(), t.chunk()) {
            true => Ok((t.dst(), t.chunk())),
            false => Err(not_held(i, t)),
        }
    }

    fn land(&mut self, (dst, chunk): (NpuId, ChunkId)) -> Result<()> {
        self.held.set(dst, chunk);
        Ok(())
    }

    fn prefetch_depart(&self, t: &Transfer) {
        self.held.prefetch(t.src(), t.chunk());
    }

    fn prefetch_land(&self, &(dst, chunk): &(NpuId, ChunkId)) {
        self.held.prefetch(dst, chunk);
    }

    fn finish(&self, collective: &Collective) -> Result<()> {
        self.held.lacking(collective, "")
    }
}

/// Combining collectives read as reduction trees (`check_stream`; the rule and why it is
/// sound are in the module's documentation): per (NPU, chunk) whether the NPU has sent
/// its partial sum and whether it holds the whole sum, per chunk how many reductions
/// have landed.
struct Trees {
    passed: Bits,
    whole: Bits,
    landed: Vec<u32>,
    /// Whether each NPU contributes (to every chunk: `Trees::new` refuses a collective
    /// whose chunks have different contributors).
    contributor: Vec<bool>,
    /// How many NPUs contribute.
    contributors: usize,
}

/// A transfer in flight in a `Trees` replay: all of it, to name it if its landing is
/// refused, ordered by its index.
struct Sent {
    i: usize,
    t: Transfer,
}

impl PartialEq for Sent {
    fn eq(&self, other: &Sent) -> bool {
        self.i == other.i
    }
}

impl Eq for Sent {}

impl PartialOrd for Sent {
    fn partial_cmp(&self, other: &Sent) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sent {
    fn cmp(&self, other: &Sent) -> std::cmp::Ordering {
        self.i.cmp(&other.i)
    }
}

/// What a refusal of the reduction-tree rule adds: the rule, and what judges other shapes.
const TREE_FORM: &str = "the streamed check reads sums only in reduction-tree form (each contributor sends its partial sum once, after every partial sent to it has landed; only whole sums are copied); `schedule::check` on the schedule read whole judges any other shape";

impl Trees {
    fn new(collective: &Collective, npus: usize) -> Result<Trees> {
        let chunks = collective.chunk_count();
        let pre = collective.pre(0);
        if let Some(c) =
            (1..chunks).find(|&c| !std::ptr::eq(collective.pre(c), pre) && collective.pre(c) != pre)
        {
            return Err(Error::schedule(format!(
                "chunks 0 and {c} have different contributors; {TREE_FORM}"
            )));
        }
        let mut contributor = vec![false; npus];
        for &n in pre {
            contributor[n] = true;
        }
        let mut whole = Bits::new(npus, chunks);
        if let [only] = pre {
            for c in 0..chunks {
                whole.set(*only, c);
            }
        }
        Ok(Trees {
            passed: Bits::new(npus, chunks),
            whole,
            landed: vec![0; chunks],
            contributor,
            contributors: pre.len(),
        })
    }
}

/// Transfer `i` refused by the reduction-tree rule, saying which part.
fn off_tree(i: usize, t: &Transfer, what: String) -> Error {
    fail(i, t, format!("{what}; {TREE_FORM}"))
}

impl Contents for Trees {
    type Carried = Sent;

    fn depart(&mut self, i: usize, t: &Transfer) -> Result<Sent> {
        let (s, c) = (t.src(), t.chunk());
        match t.op {
            Op::Reduce if !self.contributor[s] => Err(off_tree(
                i,
                t,
                format!("NPU {s} is not a contributor of chunk {c}"),
            )),
            Op::Reduce if self.passed.holds(s, c) => Err(off_tree(
                i,
                t,
                format!("NPU {s} sends its partial sum of chunk {c} a second time"),
            )),
            Op::Reduce if self.whole.holds(s, c) => Err(off_tree(
                i,
                t,
                format!("NPU {s} already holds chunk {c}'s whole sum"),
            )),
            Op::Copy if !self.whole.holds(s, c) => Err(off_tree(
                i,
                t,
                format!("NPU {s} does not hold the whole sum of chunk {c} when it sends"),
            )),
            op => {
                if op == Op::Reduce {
                    self.passed.set(s, c);
                }
                Ok(Sent { i, t: t.clone() })
            }
        }
    }

    fn land(&mut self, Sent { i, t }: Sent) -> Result<()> {
        let (d, c) = (t.dst(), t.chunk());
        if t.op == Op::Copy {
            self.whole.set(d, c);
            return Ok(());
        }
        let refused = if !self.contributor[d] {
            format!("NPU {d} is not a contributor of chunk {c}")
        } else if self.whole.holds(d, c) {
            format!(
                "NPU {d} already holds chunk {c}'s whole sum: it would count a contribution twice"
            )
        } else if self.passed.holds(d, c) {
            format!("NPU {d} sent its partial sum of chunk {c} before this landed: the contribution would be lost")
        } else {
            self.landed[c] += 1;
            // Every other contributor has sent its partial sum, and it has landed here
            // through the tree.
            if self.landed[c] as usize + 1 == self.contributors {
                self.whole.set(d, c);
            }
            return Ok(());
        };
        Err(off_tree(i, &t, refused))
    }

    fn prefetch_depart(&self, t: &Transfer) {
        self.passed.prefetch(t.src(), t.chunk());
        self.whole.prefetch(t.src(), t.chunk());
    }

    fn prefetch_land(&self, Sent { t, .. }: &Sent) {
        self.passed.prefetch(t.dst(), t.chunk());
        self.whole.prefetch(t.dst(), t.chunk());
        if let Some(landed) = self.landed.get(t.chunk()) {
            prefetch::line(landed);
        }
    }

    fn finish(&self, collective: &Collective) -> Result<()> {
        self.whole
            .lacking(collective, " (or some of its contributions)")
    }
}

fn fail(i: usize, t: &Transfer, what: String) -> Error {
    Error::schedule_at(i, format!("{}: {what}", describe(i, t)))
}

/// What an in-switch transfer is part of: `multicast from NPU 2` or `sum into NPU 0`.
fn group_name(t: &Transfer) -> String {
    match t.op {
        Op::Copy => format!("multicast from NPU {}", t.src()),
        Op::Reduce => format!("sum into NPU {}", t.dst()),
    }
}

fn describe(i: usize, t: &Transfer) -> String {
    format!(
        "transfer {i} (chunk {}, NPU {} -> {}, {:.6}-{:.6} us)",
        t.chunk(),
        t.src(),
        t.dst(),
        ps_to_us(t.start_ps),
        ps_to_us(t.end_ps)
    )
}

fn check_static(i: usize, t: &Transfer, collective: &Collective, topo: &Topology) -> Result<()> {
    if t.chunk() >= collective.chunk_count() {
        return Err(fail(
            i,
            t,
            format!(
                "the collective has chunks 0..{}",
                collective.chunk_count() - 1
            ),
        ));
    }
    if t.src() >= topo.npus() || t.dst() >= topo.npus() {
        return Err(fail(
            i,
            t,
            format!("the topology has NPUs 0..{}", topo.npus() - 1),
        ));
    }
    if t.src() == t.dst() {
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
        first[t.chunk() + 1] += 1;
    }
    for c in 0..chunks {
        first[c + 1] += first[c];
    }
    let mut by_chunk = vec![0u32; transfers.len()];
    let mut next = first.clone();
    for i in departures.iter() {
        let c = transfers[i].chunk();
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
                data.extend_from_slice(self.row(s.src()));
                if data.iter().all(|&w| w == 0) {
                    return Err(((s.start_ps, true, d), not_held(d, s)));
                }
                self.in_flight.insert(d, data);
            }
            let arrival = (t.end_ps, false, i);
            let Some(data) = self.in_flight.remove(&i) else {
                return Err((arrival, fail(i, t, "arrives before it departs".into())));
            };
            let dst = self.row(t.dst());
            match t.op {
                Op::Copy => dst.copy_from_slice(&data),
                Op::Reduce => {
                    if dst.iter().zip(&data).any(|(a, b)| a & b != 0) {
                        let e = format!(
                            "NPU {} would count a contribution to chunk {} twice",
                            t.dst(),
                            t.chunk()
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
            t.src(),
            t.chunk()
        ),
    )
}

/// The error for NPUs lacking chunk `c` at the end.
fn lacks(lacking: &[NpuId], c: usize, what: &str) -> Error {
    let who = match lacking {
        [one] => format!("NPU {one} lacks"),
        many => format!("NPUs {} lack", format_npus(many)),
    };
    Error::schedule(format!("at the end, {who} chunk {c}{what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A multicast member from NPU 0 to `dst` over [start, end), on links 0 (up, shared)
    /// and `dst` (down).
    fn member(dst: NpuId, start: Picos, end: Picos) -> (Transfer, [LinkId; 2]) {
        let t = Transfer::new(0, 0, dst, start, end, Op::Copy).switched();
        (t, [0, dst])
    }

    fn hold(
        links: &mut LinkSweep<usize, GroupKey>,
        id: usize,
        (t, route): &(Transfer, [LinkId; 2]),
    ) -> Option<(bool, Picos, usize)> {
        let shared = t.in_switch.then(|| (GroupKey::of(t), 0..1));
        links.hold(route, t, id, shared).map(|clash| match clash {
            Clash::Occupied(end, by) => (true, end, by),
            Clash::Unequal(end, by) => (false, end, by),
        })
    }

    #[test]
    fn members_of_one_group_share_its_links_and_nothing_else() {
        let mut links = LinkSweep::new(4);
        assert_eq!(hold(&mut links, 0, &member(1, 0, 10)), None);
        assert_eq!(hold(&mut links, 1, &member(2, 0, 10)), None);
        // The group's first still holds the shared link, and the link down to NPU 2 is
        // member 1's own.
        assert_eq!(hold(&mut links, 2, &member(2, 0, 10)), Some((true, 10, 1)));
        // Another start is another group.
        assert_eq!(hold(&mut links, 3, &member(3, 5, 15)), Some((true, 10, 0)));
        // A plain copy of the same chunk at the same time is not of the group.
        let (plain, route) = member(3, 0, 10);
        let plain = (
            Transfer {
                in_switch: false,
                ..plain
            },
            route,
        );
        assert_eq!(hold(&mut links, 4, &plain), Some((true, 10, 0)));
        // Once the group has ended, the link is free.
        assert_eq!(hold(&mut links, 5, &member(3, 10, 20)), None);
    }

    #[test]
    fn a_member_ending_at_another_time_is_refused() {
        let mut links = LinkSweep::new(4);
        assert_eq!(hold(&mut links, 0, &member(1, 0, 10)), None);
        assert_eq!(hold(&mut links, 1, &member(2, 0, 12)), Some((false, 10, 0)));
    }
}
