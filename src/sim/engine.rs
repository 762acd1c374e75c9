//! The event loop. Events are hop completions, processed one timestamp at a time: every
//! completion at `now` frees its link, moves its message to the next hop or lands it (which
//! may make dependent messages ready), and only then do the touched links pick their next
//! message, so a link's queue order is (time reached the link, message index) exactly.
//!
//! A hop is one link, or a run of links through switches (from an NPU to the next NPU on
//! the route): that run is cut-through, holding all its links at once for the sum of their
//! latencies plus the bytes at the narrowest one's bandwidth. A switched hop starts once
//! every link of it is free; waiting hops are tried in queue order (time reached, index)
//! and one whose links are taken does not hold up the ones behind it.

use super::ready::{Readiness, Routes};
use super::workload::Workload;
use super::{MessageTiming, SimResult};
use crate::error::Result;
use crate::schedule::{later, link_time_ps};
use crate::topology::Topology;
use crate::units::Picos;
use std::collections::{BTreeMap, VecDeque};
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
    ready: Readiness<'a>,
    /// Messages just issued, kept for reuse.
    issued: Vec<u32>,
    /// Per link: queued messages as (time they reached the link, index), in that order.
    /// Time only grows, so a message joins at the back; those that join together are put
    /// in index order before the link next picks one.
    queues: Vec<VecDeque<(Picos, u32)>>,
    link_busy: Vec<bool>,
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
        let routes = Routes::new(topo, work)?;
        Ok(Engine {
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
        })
    }

    fn run(mut self) -> Result<SimResult> {
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
        Ok(SimResult {
            time_ps: self.timing.iter().map(|t| t.end_ps).max().unwrap_or(0),
            messages: self.timing,
            link_busy_ps: self.link_busy_ps,
            link_bytes: self.link_bytes,
        })
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
            self.queues[link as usize].push_back((now, m as u32));
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

    /// Message `m` arrived: issue what waited for it.
    fn land(&mut self, m: usize, now: Picos) {
        let mut issued = std::mem::take(&mut self.issued);
        self.ready.landed(m, &mut issued);
        self.issue(&mut issued, now);
        self.issued = issued;
    }

    fn serve_touched(&mut self, now: Picos) -> Result<()> {
        let mut touched = std::mem::take(&mut self.touched);
        let mut switched = Vec::new();
        for &link in &touched {
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
