//! The schedule checker: replays a schedule on a topology, independently of whatever made
//! it, and rejects it unless it is a correct, contention-free algorithm.
//!
//! A chunk's content on an NPU is the set of contributions it holds: for copying
//! collectives one bit (the whole chunk), for combining collectives one bit per
//! contributor. A copy overwrites the destination's content with what the source held when
//! the transfer started; a reduce adds it, and adding a contribution twice is an error.
//!
//! It holds little beyond the schedule, so that whatever synthesis could make can be
//! checked: the contents (one bit per (NPU, chunk) for copying collectives, whose sender
//! must hold the whole chunk and so always sends it whole), the last transfer on each
//! link, the data of combining transfers in flight, and a 4-byte index per transfer only
//! where the schedule is not already in start (or end) order. Transfers are swept in start
//! order; durations are at least a picosecond, so two transfers on a link overlap exactly
//! when one starts before the one that started last on it has ended.

use super::{route_time_ps, Op, Schedule, Transfer};
use crate::budget::{self, MemoryLimit};
use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::topology::{format_npus, LinkId, NpuId, RouteTree, Topology};
use crate::units::{ps_to_us, Picos};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

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
/// the chunk when it sends, and every postcondition holds at the end.
pub fn check(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    let expected = collective.chunk_bytes();
    if (schedule.chunk_bytes - expected).abs() > 1e-9 * expected.max(1.0) {
        return Err(Error::Schedule(format!(
            "chunk_bytes is {} but the collective's chunks are {expected} bytes",
            schedule.chunk_bytes
        )));
    }
    let mut routes = Routes::new(topo);
    for (i, t) in schedule.transfers.iter().enumerate() {
        check_static(i, t, &collective, topo)?;
        let route = routes.between(t.src, t.dst).ok_or_else(|| {
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
        let needed = route_time_ps(topo, route, schedule.chunk_bytes)
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
    }
    let departures = Order::by(&schedule.transfers, |t| t.start_ps)?;
    let mut links = LinkSweep::new(topo.links().len());
    for i in departures.iter() {
        let t = &schedule.transfers[i];
        let route = routes
            .between(t.src, t.dst)
            .expect("every transfer's route was found above");
        if let Some(a) = links.hold(route, t, i) {
            let ta = &schedule.transfers[a];
            return Err(fail(
                i,
                t,
                format!(
                    "starts while transfer {a} (chunk {}) still occupies the link until {:.6} us",
                    ta.chunk,
                    ps_to_us(ta.end_ps)
                ),
            ));
        }
    }
    replay(schedule, &collective, topo.npus(), &departures)
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
        if let Some((sa, a)) = links.hold(route, t, (s, i)) {
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

/// The links each NPU pair's transfers hold (`Topology::route`), looked up once per pair.
struct Routes<'a> {
    topo: &'a Topology,
    /// The last direct link found (most transfers use one: no map lookup for them).
    direct: [LinkId; 1],
    known: HashMap<(NpuId, NpuId), Option<Vec<LinkId>>>,
    trees: HashMap<NpuId, RouteTree>,
}

impl<'a> Routes<'a> {
    fn new(topo: &'a Topology) -> Routes<'a> {
        Routes {
            topo,
            direct: [0],
            known: HashMap::new(),
            trees: HashMap::new(),
        }
    }

    fn between(&mut self, src: NpuId, dst: NpuId) -> Option<&[LinkId]> {
        let topo = self.topo;
        if let Some(l) = topo.link_between(src, dst) {
            self.direct = [l];
            return Some(&self.direct);
        }
        if !topo.has_switches() {
            return None;
        }
        let trees = &mut self.trees;
        self.known
            .entry((src, dst))
            .or_insert_with(|| {
                trees
                    .entry(src)
                    .or_insert_with(|| topo.route_tree(src))
                    .route_to(topo, dst)
            })
            .as_deref()
    }
}

/// Per link, when the transfer that started last on it ends, and which it is.
struct LinkSweep<Id> {
    last: Vec<Option<(Picos, Id)>>,
}

impl<Id: Copy> LinkSweep<Id> {
    fn new(links: usize) -> LinkSweep<Id> {
        LinkSweep {
            last: vec![None; links],
        }
    }

    /// Puts `t` (transfer `id`) on the links of `route`; transfers must come in start
    /// order. Returns the transfer it overlaps on one of them, if any.
    fn hold(&mut self, route: &[LinkId], t: &Transfer, id: Id) -> Option<Id> {
        for &link in route {
            match self.last[link] {
                Some((end, earlier)) if t.start_ps < end => return Some(earlier),
                _ => self.last[link] = Some((t.end_ps, id)),
            }
        }
        None
    }
}

/// Transfer indices in the order of a key (ties in index order): nothing stored where the
/// schedule is already in that order (a synthesized one is in start order, and on links
/// of one speed in end order too), else one u32 per transfer.
enum Order {
    Given(usize),
    Sorted(Vec<u32>),
}

impl Order {
    fn by<K: Ord>(transfers: &[Transfer], key: impl Fn(&Transfer) -> K) -> Result<Order> {
        if transfers.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            return Ok(Order::Given(transfers.len()));
        }
        let count = u32::try_from(transfers.len()).map_err(|_| Error::Limit {
            what: "transfers",
            value: transfers.len() as u64,
            limit: u32::MAX as u64,
            context: "checking a schedule whose transfers are out of time order".into(),
        })?;
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

/// Checks only the data flow of a schedule whose times are an order, not a promise (a
/// baseline whose sends the simulator routes and times): NPUs and chunks exist, every
/// sender holds the chunk when it sends in (start, end) order, and every postcondition holds.
pub fn check_data_flow(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    for (i, t) in schedule.transfers.iter().enumerate() {
        check_static(i, t, &collective, topo)?;
        if t.end_ps <= t.start_ps {
            return Err(fail(i, t, "does not end after it starts".into()));
        }
    }
    let departures = Order::by(&schedule.transfers, |t| t.start_ps)?;
    replay(schedule, &collective, topo.npus(), &departures)
}

/// The schedule's collective, built once the checker's memory fits the limit.
fn collective_of(schedule: &Schedule, topo: &Topology) -> Result<Collective> {
    let spec = &schedule.collective;
    let transfers = schedule.transfers.len() as u64;
    let estimate =
        budget::collective(topo, spec).saturating_add(budget::check(spec, topo, transfers));
    MemoryLimit::default().admit(estimate, || {
        format!(
            "checking a {} schedule over {} NPUs with K={} ({transfers} transfers)",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        )
    })?;
    Collective::new(topo, spec.clone())
        .map_err(|e| Error::Schedule(format!("its collective is not valid here: {e}")))
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

/// What every NPU holds of every chunk.
enum Contents {
    /// Copying collectives: whether the NPU holds the chunk. A copy brings what its sender
    /// held when it left, which was the whole chunk (checked then), so a chunk once held
    /// stays held and nothing in flight needs keeping.
    Held(Held),
    /// Combining collectives: the contributions the NPU holds.
    Sums(Sums),
}

/// One bit per (NPU, chunk): bit `npu * chunks + chunk`.
struct Held {
    chunks: usize,
    bits: Vec<u64>,
}

impl Held {
    fn bit(&self, npu: usize, chunk: usize) -> (usize, u64) {
        let bit = npu * self.chunks + chunk;
        (bit / 64, 1 << (bit % 64))
    }

    fn get(&self, npu: usize, chunk: usize) -> bool {
        let (word, mask) = self.bit(npu, chunk);
        self.bits[word] & mask != 0
    }

    fn set(&mut self, npu: usize, chunk: usize) {
        let (word, mask) = self.bit(npu, chunk);
        self.bits[word] |= mask;
    }
}

/// Per (NPU, chunk), `words` words with bit j set when the content includes the chunk's
/// j-th contributor (`Collective::pre`).
struct Sums {
    chunks: usize,
    words: usize,
    bits: Vec<u64>,
}

impl Sums {
    fn range(&self, npu: usize, chunk: usize) -> std::ops::Range<usize> {
        let base = (npu * self.chunks + chunk) * self.words;
        base..base + self.words
    }

    fn get(&self, npu: usize, chunk: usize) -> &[u64] {
        &self.bits[self.range(npu, chunk)]
    }

    fn get_mut(&mut self, npu: usize, chunk: usize) -> &mut [u64] {
        let r = self.range(npu, chunk);
        &mut self.bits[r]
    }
}

impl Contents {
    /// The contents at the start: every chunk at its precondition NPUs.
    fn new(collective: &Collective, npus: usize) -> Contents {
        let chunks = collective.chunk_count();
        if !collective.combining() {
            let mut held = Held {
                chunks,
                bits: vec![0; (npus * chunks).div_ceil(64)],
            };
            for c in 0..chunks {
                for &npu in collective.pre(c) {
                    held.set(npu, c);
                }
            }
            return Contents::Held(held);
        }
        let words = (0..chunks)
            .map(|c| collective.pre(c).len().div_ceil(64))
            .max()
            .unwrap_or(0);
        let mut sums = Sums {
            chunks,
            words,
            bits: vec![0; words * chunks * npus],
        };
        for c in 0..chunks {
            for (j, &npu) in collective.pre(c).iter().enumerate() {
                sums.get_mut(npu, c)[j / 64] |= 1 << (j % 64);
            }
        }
        Contents::Sums(sums)
    }

    /// Whether `npu` holds any of `chunk`.
    fn holds_any(&self, npu: usize, chunk: usize) -> bool {
        match self {
            Contents::Held(held) => held.get(npu, chunk),
            Contents::Sums(sums) => sums.get(npu, chunk).iter().any(|&w| w != 0),
        }
    }

    /// Whether `npu` holds the first `contributors` contributions of `chunk` (copying
    /// collectives: the chunk).
    fn holds_all(&self, npu: usize, chunk: usize, contributors: usize) -> bool {
        match self {
            Contents::Held(held) => held.get(npu, chunk),
            Contents::Sums(sums) => {
                let held = sums.get(npu, chunk);
                (0..contributors).all(|b| held[b / 64] & (1 << (b % 64)) != 0)
            }
        }
    }
}

/// Replays the transfers, departures in `departures`' (start) order and arrivals in end
/// order, and checks the postconditions.
fn replay(
    schedule: &Schedule,
    collective: &Collective,
    npus: usize,
    departures: &Order,
) -> Result<CheckReport> {
    let transfers = &schedule.transfers;
    let arrivals = Order::by(transfers, |t| t.end_ps)?;
    let mut contents = Contents::new(collective, npus);
    // The contributions combining transfers carry, while they are in flight.
    let mut in_flight: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut departed = departures.iter().peekable();
    for i in arrivals.iter() {
        let t = &transfers[i];
        // Arrivals at time t land before departures at t, so a chunk can be forwarded the
        // moment it arrives.
        while let Some(d) = departed.next_if(|&d| transfers[d].start_ps < t.end_ps) {
            let sent = &transfers[d];
            if !contents.holds_any(sent.src, sent.chunk) {
                return Err(fail(
                    d,
                    sent,
                    format!(
                        "NPU {} does not hold chunk {} when it sends",
                        sent.src, sent.chunk
                    ),
                ));
            }
            if let Contents::Sums(sums) = &contents {
                in_flight.insert(d, sums.get(sent.src, sent.chunk).to_vec());
            }
        }
        // Every transfer ends after it starts (checked before), so it has departed.
        if t.end_ps <= t.start_ps {
            return Err(fail(i, t, "arrives before it departs".into()));
        }
        match &mut contents {
            Contents::Held(held) => held.set(t.dst, t.chunk),
            Contents::Sums(sums) => {
                let Some(data) = in_flight.remove(&i) else {
                    return Err(fail(i, t, "arrives before it departs".into()));
                };
                let dst = sums.get_mut(t.dst, t.chunk);
                match t.op {
                    Op::Copy => dst.copy_from_slice(&data),
                    Op::Reduce => {
                        if dst.iter().zip(&data).any(|(a, b)| a & b != 0) {
                            return Err(fail(
                                i,
                                t,
                                format!(
                                    "NPU {} would count a contribution to chunk {} twice",
                                    t.dst, t.chunk
                                ),
                            ));
                        }
                        dst.iter_mut().zip(&data).for_each(|(a, b)| *a |= b);
                    }
                }
            }
        }
    }
    for c in 0..collective.chunk_count() {
        let contributors = if collective.combining() {
            collective.pre(c).len()
        } else {
            1
        };
        let lacking: Vec<usize> = collective
            .post(c)
            .iter()
            .copied()
            .filter(|&n| !contents.holds_all(n, c, contributors))
            .collect();
        if !lacking.is_empty() {
            let who = match lacking.as_slice() {
                [one] => format!("NPU {one} lacks"),
                many => format!("NPUs {} lack", format_npus(many)),
            };
            return Err(Error::Schedule(format!(
                "at the end, {who} chunk {c}{}",
                if collective.combining() {
                    " (or some of its contributions)"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(CheckReport {
        collective_time_ps: schedule.collective_time_ps(),
        transfers: schedule.transfers.len(),
    })
}
