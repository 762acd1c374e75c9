//! The event loop. Events are hop completions, processed one timestamp at a time: every
//! completion at `now` frees its link, moves its message to the next hop or lands it (which
//! may make dependent messages ready), and only then do the touched links pick their next
//! message, so a link's queue order is (time reached the link, message index) exactly.
//!
//! A hop is one link, or a run of links through switches (from an NPU to the next NPU on
//! the route): that run is cut-through, holding all its links at once for the sum of their
//! latencies plus the bytes at the narrowest one's bandwidth. A switched hop starts once
//! every link of it is free; waiting hops are tried in queue order (time reached, index)
//! and one whose links are taken does not hold up the ones behind it. A schedule's
//! messages (`Workload::planned`) cross links through switches in the schedule's order
//! instead: a hop also waits until every message planned to start earlier on each of its
//! links has started (`Planned`). Greedy order can let a message ready early take a
//! switch port another was planned to use first, and lose the schedule's own timing; in
//! planned order, a schedule that is contention-free on its routes runs on its clock.
//!
//! In-switch messages move a group at a time (`super::groups`): a group's members start
//! together once all are issued and every link the group holds is free, and land
//! together.

use super::groups::Groups;
use super::ready::{Readiness, Routes};
use super::workload::Workload;
use super::{MessageTiming, SimResult};
use crate::budget::Allowance;
use crate::error::{Error, Result};
use crate::schedule::{later, link_time_ps};
use crate::topology::{Link, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Range;

pub(super) fn run(topo: &Topology, work: &Workload, room: Allowance) -> Result<SimResult> {
    Engine::new(topo, work, room)?.run()
}

/// [`run`], also telling when each hop of each message started.
pub(super) fn run_with_hops(
    topo: &Topology,
    work: &Workload,
    room: Allowance,
) -> Result<(SimResult, HopStarts)> {
    let mut engine = Engine::new(topo, work, room)?;
    engine.hop_started = Some(vec![0; engine.route_links.len()]);
    let (result, hops) = engine.run_keeping_hops()?;
    Ok((result, hops.unwrap_or_default()))
}

/// When each hop of each message started (a hop ends at an NPU: links through switches
/// are one).
#[derive(Clone, Debug, Default)]
pub struct HopStarts {
    start: Vec<u32>,
    times: Vec<Picos>,
}

impl HopStarts {
    /// The start of each hop of message `m`, in route order.
    pub fn of(&self, m: usize) -> &[Picos] {
        &self.times[self.start[m] as usize..self.start[m + 1] as usize]
    }
}

struct Engine<'a> {
    topo: &'a Topology,
    work: &'a Workload,
    /// `route_links[route_start[m]..route_start[m + 1]]` are the links message m crosses.
    route_start: Vec<u32>,
    route_links: Vec<u32>,
    /// Per message: where in its route the hop it is on starts (0 = its first link).
    hop: Vec<u32>,
    ready: Readiness<'a>,
    /// Messages just issued, kept for reuse.
    issued: Vec<u32>,
    /// Per link: queued messages as (time they reached the link, index), in that order.
    /// Time only grows, so a message joins at the back; those that join together are put
    /// in index order before the link next picks one.
    queues: Vec<VecDeque<(Picos, u32)>>,
    link_busy: Vec<bool>,
    /// For a schedule's messages: the order they take on links through switches.
    planned: Option<Planned>,
    /// The in-switch groups, and per group how many members wait at their hop.
    groups: Groups,
    group_waiting: Vec<u32>,
    /// How many messages have landed.
    landed: usize,
    /// Links whose state changed at the current timestamp.
    touched: Vec<u32>,
    /// Messages whose current hop ends at each future time. Hops of equal cost end
    /// together, so a time holds many completions and is taken out in one piece.
    events: BTreeMap<Picos, Vec<u32>>,
    /// Emptied event lists, kept for reuse.
    spare: Vec<Vec<u32>>,
    timing: Vec<MessageTiming>,
    link_busy_ps: Vec<Picos>,
    link_bytes: Vec<f64>,
    /// Where asked for: when the hop starting at each place of `route_links` started.
    hop_started: Option<Vec<Picos>>,
}

impl<'a> Engine<'a> {
    fn new(topo: &'a Topology, work: &'a Workload, room: Allowance) -> Result<Engine<'a>> {
        let n = work.len();
        let links = topo.links().len();
        let routes = Routes::new(topo, work, room)?;
        let groups = Groups::new(topo, work, &routes)?;
        let planned = work
            .planned
            .as_deref()
            .filter(|times| is_timed(topo, work, &routes.start, &routes.links, times))
            .map(|times| {
                let starts: Vec<Picos> = times.iter().map(|t| t.0).collect();
                Planned::new(topo, &starts, &routes.start, &routes.links)
            });
        Ok(Engine {
            planned,
            group_waiting: vec![0; groups.len()],
            groups,
            landed: 0,
            topo,
            work,
            ready: Readiness::new(work, &routes),
            route_start: routes.start,
            route_links: routes.links,
            hop: vec![0; n],
            issued: Vec::new(),
            queues: vec![VecDeque::new(); links],
            link_busy: vec![false; links],
            touched: Vec::new(),
            events: BTreeMap::new(),
            spare: Vec::new(),
            timing: vec![MessageTiming::default(); n],
            link_busy_ps: vec![0; links],
            link_bytes: vec![0.0; links],
            hop_started: None,
        })
    }

    fn run(self) -> Result<SimResult> {
        Ok(self.run_keeping_hops()?.0)
    }

    /// Runs every message; the hops' start times where they were asked for.
    fn run_keeping_hops(mut self) -> Result<(SimResult, Option<HopStarts>)> {
        let mut issued = std::mem::take(&mut self.issued);
        self.ready.start(&mut issued);
        self.issue(&mut issued, 0);
        self.issued = issued;
        self.serve_touched(0)?;
        while let Some((now, mut done)) = self.events.pop_first() {
            // The order within `done` does not matter: links pick their next message only
            // once every completion at `now` is in.
            for &m in &done {
                self.hop_done(m as usize, now);
            }
            done.clear();
            self.spare.push(done);
            self.serve_touched(now)?;
        }
        self.ready.check_all_issued()?;
        self.check_all_landed()?;
        let hops = self
            .hop_started
            .take()
            .map(|started| self.hop_starts(&started));
        let result = SimResult {
            time_ps: self.timing.iter().map(|t| t.end_ps).max().unwrap_or(0),
            messages: self.timing,
            link_busy_ps: self.link_busy_ps,
            link_bytes: self.link_bytes,
        };
        Ok((result, hops))
    }

    /// Each message's hop start times out of `started` (by place in `route_links`): a hop
    /// begins at the route's first link and at each link leaving an NPU.
    fn hop_starts(&self, started: &[Picos]) -> HopStarts {
        let messages = self.route_start.len() - 1;
        let mut hops = HopStarts {
            start: Vec::with_capacity(messages + 1),
            times: Vec::new(),
        };
        hops.start.push(0);
        for m in 0..messages {
            let route = self.route_start[m] as usize..self.route_start[m + 1] as usize;
            for i in route.clone() {
                let from = self.topo.link(self.route_links[i] as usize).src;
                if i == route.start || !self.topo.is_switch(from) {
                    hops.times.push(started[i]);
                }
            }
            hops.start.push(hops.times.len() as u32);
        }
        hops
    }

    /// An error when some message never landed: an in-switch group one of whose members
    /// waited for what only the group could deliver.
    fn check_all_landed(&self) -> Result<()> {
        if self.landed == self.timing.len() {
            return Ok(());
        }
        let stuck = (0..self.timing.len())
            .find(|&m| self.route_start[m] + self.hop[m] < self.route_start[m + 1])
            .unwrap_or(0);
        Err(Error::schedule_at(
            stuck,
            format!(
                "{} messages never landed, message {stuck} among them: an in-switch operation starts only once all its transfers are ready, and one of them waits for what the operation delivers",
                self.timing.len() - self.landed
            ),
        ))
    }

    /// Puts the messages just issued (drained from `issued`) on their first hop's queues.
    fn issue(&mut self, issued: &mut Vec<u32>, now: Picos) {
        for m in issued.drain(..) {
            self.timing[m as usize].start_ps = now;
            self.enqueue(m as usize, now);
        }
    }

    /// Where in `route_links` the hop message `m` is on lies: one link, or a run of links
    /// through switches.
    fn hop_range(&self, m: usize) -> Range<usize> {
        let start = (self.route_start[m] + self.hop[m]) as usize;
        let end = self.route_start[m + 1] as usize;
        let mut stop = start + 1;
        while stop < end
            && self
                .topo
                .is_switch(self.topo.link(self.route_links[stop - 1] as usize).dst)
        {
            stop += 1;
        }
        start..stop
    }

    fn enqueue(&mut self, m: usize, now: Picos) {
        for i in self.hop_range(m) {
            let link = self.route_links[i];
            match &mut self.planned {
                Some(p) if p.orders(link as usize) => p.waiting[m] = true,
                _ => self.queues[link as usize].push_back((now, m as u32)),
            }
            self.touched.push(link);
        }
        if let Some(g) = self.groups.of(m) {
            self.group_waiting[g] += 1;
        }
    }

    fn hop_done(&mut self, m: usize, now: Picos) {
        let hop = self.hop_range(m);
        for i in hop.clone() {
            let link = self.route_links[i];
            self.link_busy[link as usize] = false;
            self.touched.push(link);
        }
        self.hop[m] += hop.len() as u32;
        if self.route_start[m] + self.hop[m] < self.route_start[m + 1] {
            self.enqueue(m, now);
        } else {
            self.timing[m].end_ps = now;
            self.land(m, now);
        }
    }

    /// Message `m` arrived: issue what waited for it.
    fn land(&mut self, m: usize, now: Picos) {
        self.landed += 1;
        let mut issued = std::mem::take(&mut self.issued);
        self.ready.landed(m, &mut issued);
        self.issue(&mut issued, now);
        self.issued = issued;
    }

    fn serve_touched(&mut self, now: Picos) -> Result<()> {
        let mut touched = std::mem::take(&mut self.touched);
        // A link is touched once per message joining or leaving it; serving it once is
        // the same, and keeps what follows to one pass over each queue.
        touched.sort_unstable();
        touched.dedup();
        let mut switched = BinaryHeap::new();
        let mut planned_links = Vec::new();
        for &link in &touched {
            if self
                .planned
                .as_ref()
                .is_some_and(|p| p.orders(link as usize))
            {
                if !self.link_busy[link as usize] {
                    planned_links.push(link as usize);
                }
                continue;
            }
            order_arrivals(&mut self.queues[link as usize], now);
            if self.link_busy[link as usize] {
                continue;
            }
            let l = self.topo.link(link as usize);
            if self.topo.is_switch(l.src) || self.topo.is_switch(l.dst) {
                if let Some(&first) = self.queues[link as usize].front() {
                    switched.push(Reverse((first, link, 0u32)));
                }
            } else if let Some((_, m)) = self.queues[link as usize].pop_front() {
                self.start(m as usize, now)?;
            }
        }
        touched.clear();
        self.touched = touched;
        self.serve_switched(switched, now)?;
        for link in planned_links {
            self.serve_planned(link, now)?;
        }
        Ok(())
    }

    /// Starts the switched hops waiting on the freed links whose queue heads `cursors`
    /// holds, in queue order across all of them (time reached, index): each hop whose links
    /// are all free. Every message in a link's queue crosses that link, so once the link
    /// is taken the rest of its queue waits: each queue is read only up to there.
    fn serve_switched(&mut self, mut cursors: BinaryHeap<Cursor>, now: Picos) -> Result<()> {
        while let Some(Reverse(((_, m), link, at))) = cursors.pop() {
            if self.link_busy[link as usize] {
                continue;
            }
            let m = m as usize;
            let free = match self.groups.of(m) {
                None => self.hop_free(m),
                Some(g) => self.group_free(g),
            };
            if free {
                self.each_in_unit(m, |engine, u| {
                    for i in engine.hop_range(u) {
                        let l = engine.route_links[i] as usize;
                        engine.queues[l].retain(|e| e.1 as usize != u);
                    }
                });
                self.start_unit(m, now)?;
                continue;
            }
            if let Some(&next) = self.queues[link as usize].get(at as usize + 1) {
                cursors.push(Reverse((next, link, at + 1)));
            }
        }
        Ok(())
    }

    /// Starts the messages due next on free link `link` (planned order) whose hops can
    /// start: every link free, and no message planned earlier on any of them still to go.
    /// Once one starts the link is taken, and the rest wait: each call reads the due
    /// messages only up to there.
    fn serve_planned(&mut self, link: usize, now: Picos) -> Result<()> {
        let mut at = 0;
        while !self.link_busy[link] {
            let Some((position, m)) = self.planned.as_ref().and_then(|p| p.next_due(link, at))
            else {
                return Ok(());
            };
            at = position + 1;
            let Some(p) = &self.planned else {
                return Ok(());
            };
            let ready = self.groups.of(m).map_or(true, |g| self.group_free(g))
                && self.unit(m).all(|u| {
                    p.waiting[u]
                        && self.route_links[self.hop_range(u)]
                            .iter()
                            .all(|&l| !self.link_busy[l as usize] && p.is_due(l as usize, u))
                });
            if ready {
                self.each_in_unit(m, |engine, u| {
                    let links: Vec<usize> = engine.route_links[engine.hop_range(u)]
                        .iter()
                        .map(|&l| l as usize)
                        .collect();
                    if let Some(p) = &mut engine.planned {
                        p.started(u, &links);
                    }
                });
                self.start_unit(m, now)?;
            }
        }
        Ok(())
    }

    /// Whether every link of the hop message `m` is on is free.
    fn hop_free(&self, m: usize) -> bool {
        self.route_links[self.hop_range(m)]
            .iter()
            .all(|&l| !self.link_busy[l as usize])
    }

    /// Whether in-switch group `g` may start: every member waits at its hop, and every
    /// link the group holds is free.
    fn group_free(&self, g: usize) -> bool {
        self.group_waiting[g] as usize == self.groups.members(g).len()
            && self
                .groups
                .links(g)
                .iter()
                .all(|&l| !self.link_busy[l as usize])
    }

    /// The messages that start with `m`: its in-switch group, or `m` alone.
    fn unit(&self, m: usize) -> impl Iterator<Item = usize> + '_ {
        let (members, alone) = match self.groups.of(m) {
            Some(g) => (self.groups.members(g), None),
            None => (&[][..], Some(m)),
        };
        members.iter().map(|&u| u as usize).chain(alone)
    }

    /// Calls `f` on each message that starts with `m` (`unit`).
    fn each_in_unit(&mut self, m: usize, mut f: impl FnMut(&mut Self, usize)) {
        match self.groups.of(m) {
            Some(g) => {
                for k in 0..self.groups.members(g).len() {
                    let u = self.groups.members(g)[k] as usize;
                    f(self, u);
                }
            }
            None => f(self, m),
        }
    }

    /// Starts `m`'s hop at `now`, with its in-switch group if it has one.
    fn start_unit(&mut self, m: usize, now: Picos) -> Result<()> {
        match self.groups.of(m) {
            Some(g) => self.start_group(g, now),
            None => self.start(m, now),
        }
    }

    /// How long message `m`'s hop takes cut-through: the links' summed latency, the bytes
    /// at the narrowest bandwidth; and that link, to name it.
    fn hop_time(&self, m: usize) -> Result<(Picos, Link)> {
        let hop = self.hop_range(m);
        let l = self
            .topo
            .route_link(self.route_links[hop].iter().map(|&l| l as usize));
        Ok((link_time_ps(&l, self.work.bytes.of(m))?, l))
    }

    /// Message `m` takes every link of its hop at `now`, for the cut-through time. A time
    /// past the clock is an error: a wrapped or saturated one would be a wrong answer.
    fn start(&mut self, m: usize, now: Picos) -> Result<()> {
        let (took, l) = self.hop_time(m)?;
        let end = later(now, took, || {
            format!("simulation: message {m} on link {} -> {}", l.src, l.dst)
        })?;
        for i in self.hop_range(m) {
            self.occupy(self.route_links[i] as usize, took, self.work.bytes.of(m))?;
        }
        self.ends_at(m, now, end);
        Ok(())
    }

    /// In-switch group `g` takes every link it holds at `now`, each once, for its slowest
    /// member's cut-through time, and its members land together then.
    fn start_group(&mut self, g: usize, now: Picos) -> Result<()> {
        let members = self.groups.members(g).to_vec();
        let mut took = 0;
        for &m in &members {
            took = took.max(self.hop_time(m as usize)?.0);
        }
        let first = members[0] as usize;
        let end = later(now, took, || {
            format!("simulation: the in-switch operation of message {first}")
        })?;
        let bytes = self.work.bytes.of(first);
        for k in 0..self.groups.links(g).len() {
            self.occupy(self.groups.links(g)[k] as usize, took, bytes)?;
        }
        for m in members {
            self.ends_at(m as usize, now, end);
        }
        Ok(())
    }

    /// `link` carries `bytes` for `took` from now on.
    fn occupy(&mut self, link: usize, took: Picos, bytes: f64) -> Result<()> {
        let l = self.topo.link(link);
        self.link_busy_ps[link] = later(self.link_busy_ps[link], took, || {
            format!("simulation: busy time of link {} -> {}", l.src, l.dst)
        })?;
        self.link_busy[link] = true;
        self.link_bytes[link] += bytes;
        Ok(())
    }

    /// Message `m`'s hop, started at `now`, ends at `end`.
    fn ends_at(&mut self, m: usize, now: Picos, end: Picos) {
        if let Some(started) = &mut self.hop_started {
            started[self.route_start[m] as usize + self.hop[m] as usize] = now;
        }
        let spare = &mut self.spare;
        self.events
            .entry(end)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(m as u32);
    }
}

/// A place in a free link's queue: the entry there (time reached, message), the link and
/// the entry's position, least entry first.
type Cursor = Reverse<((Picos, u32), u32, u32)>;

/// Whether a schedule's times are a timing, not just an order: every message crosses one
/// hop (a link, or a route through switches) and takes exactly its cut-through time, as
/// the checker requires of a timed schedule (a baseline's unit steps are an order only,
/// and keeping their order across independent flows on shared links would couple them).
fn is_timed(
    topo: &Topology,
    work: &Workload,
    route_start: &[u32],
    route_links: &[u32],
    times: &[(Picos, Picos)],
) -> bool {
    times.iter().enumerate().all(|(m, &(start, end))| {
        let route = &route_links[route_start[m] as usize..route_start[m + 1] as usize];
        is_timed_hop(topo, route, work.bytes.of(m), start, end)
    })
}

/// Whether `route` is one hop (a link, or a run of links through switches) and a message
/// of `bytes` planned over [start, end) takes exactly its cut-through time.
pub(super) fn is_timed_hop(
    topo: &Topology,
    route: &[u32],
    bytes: f64,
    start: Picos,
    end: Picos,
) -> bool {
    let Some((_, inner)) = route.split_last() else {
        return false;
    };
    let one_hop = inner
        .iter()
        .all(|&l| topo.is_switch(topo.link(l as usize).dst));
    let link = topo.route_link(route.iter().map(|&l| l as usize));
    one_hop && link_time_ps(&link, bytes).ok() == end.checked_sub(start)
}

/// The planned order of a schedule's messages on links through switches.
struct Planned {
    /// Each message's planned start.
    times: Vec<Picos>,
    /// Per link through a switch, the messages crossing it by (planned start, index):
    /// `users[user_start[l]..user_start[l + 1]]`, with whether each has started, and the
    /// first that has not.
    user_start: Vec<u32>,
    users: Vec<u32>,
    started: Vec<bool>,
    first_open: Vec<u32>,
    /// Per message: whether it waits at a hop through switches.
    waiting: Vec<bool>,
}

impl Planned {
    fn new(topo: &Topology, times: &[Picos], route_start: &[u32], route_links: &[u32]) -> Planned {
        let links = topo.links().len();
        let through_switch = |l: usize| {
            let link = topo.link(l);
            topo.is_switch(link.src) || topo.is_switch(link.dst)
        };
        let mut user_start = vec![0u32; links + 1];
        for &l in route_links {
            if through_switch(l as usize) {
                user_start[l as usize + 1] += 1;
            }
        }
        for l in 0..links {
            user_start[l + 1] += user_start[l];
        }
        let mut fill = user_start.clone();
        let mut users = vec![0u32; user_start[links] as usize];
        for m in 0..route_start.len() - 1 {
            for &l in &route_links[route_start[m] as usize..route_start[m + 1] as usize] {
                if through_switch(l as usize) {
                    users[fill[l as usize] as usize] = m as u32;
                    fill[l as usize] += 1;
                }
            }
        }
        for l in 0..links {
            users[user_start[l] as usize..user_start[l + 1] as usize]
                .sort_unstable_by_key(|&m| (times[m as usize], m));
        }
        Planned {
            times: times.to_vec(),
            first_open: user_start[..links].to_vec(),
            started: vec![false; users.len()],
            user_start,
            users,
            waiting: vec![false; route_start.len() - 1],
        }
    }

    /// Whether `link` goes through a switch (its messages keep the planned order).
    fn orders(&self, link: usize) -> bool {
        self.user_start[link] != self.user_start[link + 1]
    }

    /// The first message not started on `link` that is planned first there (at the time
    /// of the first not started), at or after position `at` of the link's list: its
    /// position and the message.
    fn next_due(&self, link: usize, at: usize) -> Option<(usize, usize)> {
        let open = self.first_open[link] as usize;
        let end = self.user_start[link + 1] as usize;
        let first = self.times[*self.users[open..end].first()? as usize];
        (at.max(open)..end)
            .filter(|&p| !self.started[p])
            .map(|p| (p, self.users[p] as usize))
            .take_while(|&(_, m)| self.times[m] == first)
            .next()
    }

    /// Whether no message planned before `m` on `link` is still to start there.
    fn is_due(&self, link: usize, m: usize) -> bool {
        let first = self.first_open[link] as usize;
        first < self.user_start[link + 1] as usize
            && self.times[self.users[first] as usize] == self.times[m]
    }

    /// `m` started on `links`.
    fn started(&mut self, m: usize, links: &[usize]) {
        self.waiting[m] = false;
        let key = (self.times[m], m as u32);
        for &l in links {
            let range = self.user_start[l] as usize..self.user_start[l + 1] as usize;
            let list = &self.users[range.clone()];
            if let Ok(i) = list.binary_search_by_key(&key, |&u| (self.times[u as usize], u)) {
                self.started[range.start + i] = true;
            }
            let mut first = self.first_open[l] as usize;
            while first < range.end && self.started[first] {
                first += 1;
            }
            self.first_open[l] = first as u32;
        }
    }
}

/// Puts the messages that reached a queue at `now` (its back) in index order.
fn order_arrivals(queue: &mut VecDeque<(Picos, u32)>, now: Picos) {
    let joined = queue.iter().rev().take_while(|e| e.0 == now).count();
    if joined < 2 {
        return;
    }
    let from = queue.len() - joined;
    if queue
        .range(from..)
        .zip(queue.range(from + 1..))
        .all(|(a, b)| a <= b)
    {
        return;
    }
    let mut tail: Vec<(Picos, u32)> = queue.range(from..).copied().collect();
    tail.sort_unstable();
    for (slot, e) in queue.range_mut(from..).zip(tail) {
        *slot = e;
    }
}
