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

use super::route::Router;
use super::workload::{ArrivalGroups, Dependencies, Workload, NONE};
use super::{MessageTiming, SimResult};
use crate::error::{Error, Result};
use crate::schedule::{later, link_time_ps};
use crate::topology::Topology;
use crate::units::Picos;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;

pub(super) fn run(topo: &Topology, work: &Workload) -> Result<SimResult> {
    Engine::new(topo, work)?.run()
}

struct Engine<'a> {
    topo: &'a Topology,
    work: &'a Workload,
    /// `route_links[route_start[m]..route_start[m + 1]]` are the links message m crosses.
    route_start: Vec<u32>,
    route_links: Vec<u32>,
    /// Per message: where in its route the hop it is on starts (0 = its first link).
    hop: Vec<u32>,
    /// Dependencies not yet met (for arrival groups: 1 while the prefix is incomplete).
    pending: Vec<u32>,
    /// Explicit dependencies only: `dependents[dependent_start[m]..]` wait for m.
    dependent_start: Vec<u32>,
    dependents: Vec<u32>,
    /// Arrival groups only: which arrivals landed, and per group the first slot that has
    /// not and the next waiter to release.
    arrived: Vec<bool>,
    prefix: Vec<u32>,
    next_waiter: Vec<u32>,
    /// The next message of the same flow (NONE at the end), and whether each message still
    /// waits for its flow predecessor to be issued.
    flow_next: Vec<u32>,
    flow_blocked: Vec<bool>,
    issued: Vec<bool>,
    /// Per link: queued messages as (time they reached the link, index), in that order.
    /// Time only grows, so a message joins at the back; those that join together are put
    /// in index order before the link next picks one.
    queues: Vec<VecDeque<(Picos, u32)>>,
    link_busy: Vec<bool>,
    /// For a schedule's messages: the order they take on links through switches.
    planned: Option<Planned>,
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
}

impl<'a> Engine<'a> {
    fn new(topo: &'a Topology, work: &'a Workload) -> Result<Engine<'a>> {
        let n = work.len();
        let links = topo.links().len();
        let mut router = Router::new(topo);
        let mut route_start = Vec::with_capacity(n + 1);
        let mut route_links = Vec::with_capacity(n);
        route_start.push(0);
        // Flows: keyed by link for neighbour messages, by (src, dst) otherwise.
        let mut last_on_link = vec![NONE; links];
        let mut last_routed: HashMap<(u32, u32), u32> = HashMap::new();
        let mut flow_next = vec![NONE; n];
        let mut flow_blocked = vec![false; n];
        for (m, (&src, &dst)) in work.src.iter().zip(&work.dst).enumerate() {
            router.route(
                src as usize,
                dst as usize,
                work.bytes.of(m),
                &mut route_links,
            )?;
            let first_hop = *route_start.last().expect("starts with 0") as usize;
            route_start.push(route_links.len() as u32);
            let last = if route_links.len() - first_hop == 1 {
                let link = *route_links.last().expect("one hop") as usize;
                std::mem::replace(&mut last_on_link[link], m as u32)
            } else {
                last_routed.insert((src, dst), m as u32).unwrap_or(NONE)
            };
            if last != NONE {
                flow_next[last as usize] = m as u32;
                flow_blocked[m] = true;
            }
        }
        let planned = work
            .planned
            .as_deref()
            .map(|times| Planned::new(topo, times, &route_start, &route_links));
        let mut engine = Engine {
            planned,
            topo,
            work,
            route_start,
            route_links,
            hop: vec![0; n],
            pending: vec![0; n],
            dependent_start: Vec::new(),
            dependents: Vec::new(),
            arrived: Vec::new(),
            prefix: Vec::new(),
            next_waiter: Vec::new(),
            flow_next,
            flow_blocked,
            issued: vec![false; n],
            queues: vec![VecDeque::new(); links],
            link_busy: vec![false; links],
            touched: Vec::new(),
            events: BTreeMap::new(),
            spare: Vec::new(),
            timing: vec![MessageTiming::default(); n],
            link_busy_ps: vec![0; links],
            link_bytes: vec![0.0; links],
        };
        match &work.deps {
            Dependencies::Explicit { start, list } => engine.index_dependents(start, list),
            Dependencies::Arrivals(groups) => {
                for (m, &g) in groups.wait_group.iter().enumerate() {
                    engine.pending[m] = u32::from(g != NONE);
                }
                engine.arrived = vec![false; n];
                engine.prefix = groups.group_start[..groups.group_start.len() - 1].to_vec();
                engine.next_waiter = groups.waiter_start[..groups.waiter_start.len() - 1].to_vec();
            }
        }
        Ok(engine)
    }

    /// Inverts explicit dependency lists so an arrival finds who waits for it.
    fn index_dependents(&mut self, start: &[u32], list: &[u32]) {
        let n = self.pending.len();
        let mut dependent_start = vec![0u32; n + 1];
        for &d in list {
            dependent_start[d as usize + 1] += 1;
        }
        for m in 0..n {
            dependent_start[m + 1] += dependent_start[m];
            self.pending[m] = start[m + 1] - start[m];
        }
        let mut fill = dependent_start.clone();
        let mut dependents = vec![0u32; list.len()];
        for m in 0..n {
            for &d in &list[start[m] as usize..start[m + 1] as usize] {
                dependents[fill[d as usize] as usize] = m as u32;
                fill[d as usize] += 1;
            }
        }
        self.dependent_start = dependent_start;
        self.dependents = dependents;
    }

    fn run(mut self) -> Result<SimResult> {
        for m in 0..self.pending.len() {
            if self.pending[m] == 0 && !self.flow_blocked[m] && !self.issued[m] {
                self.issue(m, 0);
            }
        }
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
        let stuck = self.issued.iter().filter(|&&i| !i).count();
        if stuck > 0 {
            let first = self.issued.iter().position(|&i| !i).unwrap_or(0);
            return Err(Error::Schedule(format!(
                "{stuck} messages never became ready (a dependency cycle), message {first} among them"
            )));
        }
        Ok(SimResult {
            time_ps: self.timing.iter().map(|t| t.end_ps).max().unwrap_or(0),
            messages: self.timing,
            link_busy_ps: self.link_busy_ps,
            link_bytes: self.link_bytes,
        })
    }

    /// Issues ready message `m` at `now`, then the following messages of its flow that
    /// were only waiting for it.
    fn issue(&mut self, mut m: usize, now: Picos) {
        loop {
            self.issued[m] = true;
            self.timing[m].start_ps = now;
            self.enqueue(m, now);
            let next = self.flow_next[m];
            if next == NONE {
                return;
            }
            let next = next as usize;
            self.flow_blocked[next] = false;
            if self.pending[next] > 0 {
                return;
            }
            m = next;
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

    /// Message `m` arrived: release what waited for it.
    fn land(&mut self, m: usize, now: Picos) {
        let work = self.work;
        match &work.deps {
            Dependencies::Explicit { .. } => {
                for k in self.dependent_start[m]..self.dependent_start[m + 1] {
                    let d = self.dependents[k as usize] as usize;
                    self.satisfy(d, now);
                }
            }
            Dependencies::Arrivals(groups) => self.land_in_group(groups, m, now),
        }
    }

    fn land_in_group(&mut self, groups: &ArrivalGroups, m: usize, now: Picos) {
        let g = groups.arrival_group[m] as usize;
        self.arrived[groups.slot[m] as usize] = true;
        let end = groups.group_start[g + 1];
        while self.prefix[g] < end && self.arrived[self.prefix[g] as usize] {
            self.prefix[g] += 1;
        }
        let landed = self.prefix[g] - groups.group_start[g];
        while self.next_waiter[g] < groups.waiter_start[g + 1] {
            let w = groups.waiters[self.next_waiter[g] as usize] as usize;
            if groups.wait_count[w] > landed {
                break;
            }
            self.next_waiter[g] += 1;
            self.satisfy(w, now);
        }
    }

    fn satisfy(&mut self, m: usize, now: Picos) {
        self.pending[m] -= 1;
        if self.pending[m] == 0 && !self.flow_blocked[m] {
            self.issue(m, now);
        }
    }

    fn serve_touched(&mut self, now: Picos) -> Result<()> {
        let mut touched = std::mem::take(&mut self.touched);
        let mut switched = Vec::new();
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
            let l = self.topo.link(link as usize);
            if self.topo.is_switch(l.src) || self.topo.is_switch(l.dst) {
                if !self.link_busy[link as usize] {
                    switched.extend(self.queues[link as usize].iter().copied());
                }
            } else if !self.link_busy[link as usize] {
                if let Some((_, m)) = self.queues[link as usize].pop_front() {
                    self.start(m as usize, now)?;
                }
            }
        }
        touched.clear();
        self.touched = touched;
        // Switched hops waiting on a freed link, in queue order across all of them.
        switched.sort_unstable();
        switched.dedup();
        for (_, m) in switched {
            let m = m as usize;
            let hop = self.hop_range(m);
            let links = &self.route_links[hop.clone()];
            if links.iter().all(|&l| !self.link_busy[l as usize]) {
                for i in hop {
                    let link = self.route_links[i] as usize;
                    self.queues[link].retain(|e| e.1 as usize != m);
                }
                self.start(m, now)?;
            }
        }
        planned_links.sort_unstable();
        planned_links.dedup();
        for link in planned_links {
            self.serve_planned(link, now)?;
        }
        Ok(())
    }

    /// Starts the messages due next on free link `link` (planned order) whose hops can
    /// start: every link free, and no message planned earlier on any of them still to go.
    fn serve_planned(&mut self, link: usize, now: Picos) -> Result<()> {
        let Some(p) = &self.planned else {
            return Ok(());
        };
        let due: Vec<usize> = p.due(link).collect();
        for m in due {
            let hop = self.hop_range(m);
            let Some(p) = &self.planned else {
                return Ok(());
            };
            let ready = p.waiting[m]
                && self.route_links[hop.clone()]
                    .iter()
                    .all(|&l| !self.link_busy[l as usize] && p.is_due(l as usize, m));
            if ready {
                let links: Vec<usize> = self.route_links[hop].iter().map(|&l| l as usize).collect();
                if let Some(p) = &mut self.planned {
                    p.started(m, &links);
                }
                self.start(m, now)?;
            }
        }
        Ok(())
    }

    /// Message `m` takes every link of its hop at `now`, for the cut-through time: the
    /// links' summed latency, the bytes at the narrowest bandwidth. A time past the clock
    /// is an error: a wrapped or saturated one would be a wrong answer.
    fn start(&mut self, m: usize, now: Picos) -> Result<()> {
        let bytes = self.work.bytes.of(m);
        let topo = self.topo;
        let hop = self.hop_range(m);
        let l = &topo.route_link(self.route_links[hop.clone()].iter().map(|&l| l as usize));
        let took = link_time_ps(l, bytes)?;
        let end = later(now, took, || {
            format!("simulation: message {m} on link {} -> {}", l.src, l.dst)
        })?;
        for i in hop {
            let link = self.route_links[i] as usize;
            self.link_busy_ps[link] = later(self.link_busy_ps[link], took, || {
                format!("simulation: busy time of link {} -> {}", l.src, l.dst)
            })?;
            self.link_busy[link] = true;
            self.link_bytes[link] += bytes;
        }
        let spare = &mut self.spare;
        self.events
            .entry(end)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(m as u32);
        Ok(())
    }
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

    /// The messages not started on `link` that are planned first (at the same time).
    fn due(&self, link: usize) -> impl Iterator<Item = usize> + '_ {
        let range = self.first_open[link] as usize..self.user_start[link + 1] as usize;
        let first = self.users.get(range.start).map(|&m| self.times[m as usize]);
        range
            .filter(|&p| !self.started[p])
            .map(|p| self.users[p] as usize)
            .take_while(move |&m| Some(self.times[m]) == first)
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
