//! Max-min fair sharing of link bandwidth: the flow-level model SimGrid uses, for users
//! to compare with the serial model (one message per link at a time).
//!
//! Every message starts the moment it is issued (dependencies and flow order as in the
//! serial engine). It first pays its route's latency (alpha, the sum over its links), then
//! its bytes flow over every link of the route at once, at a rate max-min fairness gives:
//! progressive filling, where each link's capacity is split equally among the flows
//! crossing it, the flows of the most constrained link are fixed at that share first and
//! what they leave on their other links goes to the remaining flows. Rates are worked out
//! anew whenever a flow starts moving bytes or ends. A route between non-neighbours that
//! passes through NPUs is one flow over all its links too (the serial model stores and
//! forwards at each NPU instead).
//!
//! Nothing paces a schedule here: messages ready together on a link all move at once, so
//! each arrives later than it would in its turn, and so do the messages forwarded after
//! it. Pipelined schedules (TACOS's, rings with many chunks) run slower than in the serial
//! model; that is the model's answer, not a fault of the schedule.
//!
//! Times are integer picoseconds: latencies and each completion are rounded up to the next
//! picosecond, and a completion within one part in 10^12 of a whole picosecond counts as
//! that picosecond, so float noise does not split flows that end together. A link counts
//! as busy while at least one message crossing it is in flight (its latency included, as
//! in the serial model), and carries every byte of each message crossing it.
//!
//! An in-switch group (`super::groups`) is one flow: it starts once all its members are
//! issued, crosses every link it holds once, pays its slowest member's latency, and its
//! members land together.
//!
//! Each event re-shares the links of every moving flow, O(F h log L) for F flows of h links
//! on L links, so a schedule with many flows in flight at once is slow: more than
//! `MAX_CONCURRENT_FLOWS` at once is refused.

use super::groups::Groups;
use super::ready::{Readiness, Routes};
use super::workload::Workload;
use super::{MessageTiming, SimResult};
use crate::budget::Allowance;
use crate::error::{Error, Result};
use crate::schedule::{later, time_limit};
use crate::topology::Topology;
use crate::units::{Picos, PICOS_PER_US};
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

/// The most messages moving bytes at once that fair sharing simulates.
pub const MAX_CONCURRENT_FLOWS: usize = 1 << 16;

/// How close to a whole picosecond (relatively) a completion counts as that picosecond.
const SAME_PICOSECOND: f64 = 1e-12;

pub(super) fn run(topo: &Topology, work: &Workload, room: Allowance) -> Result<SimResult> {
    Fair::new(topo, work, room)?.run()
}

struct Fair<'a> {
    topo: &'a Topology,
    work: &'a Workload,
    routes: Routes,
    ready: Readiness<'a>,
    /// The in-switch groups, each moving as one flow (its first member's), and per group
    /// how many members are issued.
    groups: Groups,
    group_issued: Vec<u32>,
    /// Messages just issued, kept for reuse.
    issued: Vec<u32>,
    /// Messages whose latency ends at each future time.
    latency_ends: BTreeMap<Picos, Vec<u32>>,
    /// Messages moving bytes.
    active: Vec<u32>,
    /// Per moving message: bytes left, its rate (bytes per ps) and when it ends at that rate.
    remaining: Vec<f64>,
    rate: Vec<f64>,
    finish: Vec<Picos>,
    /// Messages that ended at the current time and have not landed yet.
    done: Vec<u32>,
    /// Per link: messages in flight across it, and since when it has had one.
    in_flight: Vec<u32>,
    busy_since: Vec<Picos>,
    filling: Filling,
    timing: Vec<MessageTiming>,
    link_busy_ps: Vec<Picos>,
    link_bytes: Vec<f64>,
}

impl<'a> Fair<'a> {
    fn new(topo: &'a Topology, work: &'a Workload, room: Allowance) -> Result<Fair<'a>> {
        let n = work.len();
        let links = topo.links().len();
        let routes = Routes::new(topo, work, room)?;
        let groups = Groups::new(topo, work, &routes)?;
        Ok(Fair {
            topo,
            work,
            ready: Readiness::new(work, &routes),
            group_issued: vec![0; groups.len()],
            groups,
            routes,
            issued: Vec::new(),
            latency_ends: BTreeMap::new(),
            active: Vec::new(),
            remaining: vec![0.0; n],
            rate: vec![0.0; n],
            finish: vec![0; n],
            done: Vec::new(),
            in_flight: vec![0; links],
            busy_since: vec![0; links],
            filling: Filling::new(topo, n),
            timing: vec![MessageTiming::default(); n],
            link_busy_ps: vec![0; links],
            link_bytes: vec![0.0; links],
        })
    }

    fn run(mut self) -> Result<SimResult> {
        let mut issued = std::mem::take(&mut self.issued);
        self.ready.start(&mut issued);
        self.issued = issued;
        let mut now = 0;
        self.settle(now)?;
        loop {
            let next_latency = self.latency_ends.first_key_value().map(|(&t, _)| t);
            let next_finish = self.active.iter().map(|&m| self.finish[m as usize]).min();
            let Some(t) = next_latency.into_iter().chain(next_finish).min() else {
                break;
            };
            let elapsed = (t - now) as f64;
            for &m in &self.active {
                let m = m as usize;
                if self.finish[m] == t {
                    self.done.push(m as u32);
                } else {
                    self.remaining[m] -= self.rate[m] * elapsed;
                }
            }
            let finish = &self.finish;
            self.active.retain(|&m| finish[m as usize] != t);
            now = t;
            self.settle(now)?;
        }
        self.ready.check_all_issued()?;
        Ok(SimResult {
            time_ps: self.timing.iter().map(|t| t.end_ps).max().unwrap_or(0),
            messages: self.timing,
            link_busy_ps: self.link_busy_ps,
            link_bytes: self.link_bytes,
        })
    }

    /// Everything that happens at `now`: flows that ended land (issuing what waited for
    /// them), issued messages start, latencies that end start moving bytes, until nothing
    /// more does; then the moving flows' rates and completion times are worked out anew.
    fn settle(&mut self, now: Picos) -> Result<()> {
        loop {
            self.done.sort_unstable();
            let mut done = std::mem::take(&mut self.done);
            let mut issued = std::mem::take(&mut self.issued);
            for m in done.drain(..) {
                let mut k = 0;
                while let Some(landed) = self.flow_member(m as usize, k) {
                    self.land(landed, now);
                    self.ready.landed(landed, &mut issued);
                    k += 1;
                }
            }
            self.done = done;
            for m in issued.drain(..) {
                self.start(m as usize, now)?;
            }
            self.issued = issued;
            match self.latency_ends.first_entry() {
                Some(entry) if *entry.key() == now => {
                    for m in entry.remove() {
                        let bytes = self.work.bytes.of(m as usize);
                        if bytes > 0.0 {
                            self.remaining[m as usize] = bytes;
                            self.active.push(m);
                        } else {
                            self.done.push(m);
                        }
                    }
                }
                _ if self.done.is_empty() => break,
                _ => {}
            }
        }
        if self.active.len() > MAX_CONCURRENT_FLOWS {
            return Err(Error::Limit {
                what: "messages moving at once",
                value: self.active.len() as u64,
                limit: MAX_CONCURRENT_FLOWS as u64,
                context: format!(
                    "fair sharing on {} (each event re-shares every moving message's links; --sharing serial has no such limit)",
                    self.topo.name()
                ),
            });
        }
        let (routes, groups) = (&self.routes, &self.groups);
        self.filling.share(
            |m| flow_links(routes, groups, m),
            &self.active,
            &mut self.rate,
        );
        for &m in &self.active {
            let m = m as usize;
            self.finish[m] = completion(now, self.remaining[m], self.rate[m], m)?;
        }
        Ok(())
    }

    /// Issued message `m` starts at `now` (an in-switch one once its whole group is
    /// issued, as its group's flow): its links are in use and its latency runs.
    fn start(&mut self, m: usize, now: Picos) -> Result<()> {
        if let Some(g) = self.groups.of(m) {
            self.group_issued[g] += 1;
            if (self.group_issued[g] as usize) < self.groups.members(g).len() {
                return Ok(());
            }
        }
        let flow = self
            .groups
            .of(m)
            .map_or(m, |g| self.groups.members(g)[0] as usize);
        let mut latency_ps = 0;
        let mut k = 0;
        while let Some(member) = self.flow_member(flow, k) {
            k += 1;
            self.timing[member].start_ps = now;
            let route = self.routes.of(member).iter().map(|&l| l as usize);
            let latency = (self.topo.route_link(route).latency_us * PICOS_PER_US).ceil();
            latency_ps = latency_ps.max(latency as Picos);
        }
        let bytes = self.work.bytes.of(flow);
        for &l in flow_links(&self.routes, &self.groups, flow) {
            let l = l as usize;
            if self.in_flight[l] == 0 {
                self.busy_since[l] = now;
            }
            self.in_flight[l] += 1;
            self.link_bytes[l] += bytes;
        }
        let moving = later(now, latency_ps, || format!("simulation: message {flow}"))?;
        self.latency_ends
            .entry(moving)
            .or_default()
            .push(flow as u32);
        Ok(())
    }

    /// The `k`-th message flow `m` carries (its in-switch group's, or `m` alone), if it
    /// carries that many.
    fn flow_member(&self, m: usize, k: usize) -> Option<usize> {
        match self.groups.of(m) {
            Some(g) => self.groups.members(g).get(k).map(|&u| u as usize),
            None => (k == 0).then_some(m),
        }
    }

    /// Message `m` arrived at `now`: the links of its flow are free of it (once, for the
    /// first member of an in-switch group).
    fn land(&mut self, m: usize, now: Picos) {
        self.timing[m].end_ps = now;
        let leads = self
            .groups
            .of(m)
            .map_or(true, |g| self.groups.members(g)[0] as usize == m);
        if !leads {
            return;
        }
        for &l in flow_links(&self.routes, &self.groups, m) {
            let l = l as usize;
            self.in_flight[l] -= 1;
            if self.in_flight[l] == 0 {
                self.link_busy_ps[l] += now - self.busy_since[l];
            }
        }
    }
}

/// The links flow `m` crosses: its in-switch group's, each once, or its route.
fn flow_links<'r>(routes: &'r Routes, groups: &'r Groups, m: usize) -> &'r [u32] {
    match groups.of(m) {
        Some(g) => groups.links(g),
        None => routes.of(m),
    }
}

/// When `remaining` bytes moving at `rate` from `now` are through: at least a picosecond
/// on, rounded up unless within `SAME_PICOSECOND` of a whole one.
fn completion(now: Picos, remaining: f64, rate: f64, m: usize) -> Result<Picos> {
    let ps = if remaining > 0.0 {
        remaining / rate
    } else {
        0.0
    };
    let whole = ps.round();
    let ps = if (ps - whole).abs() <= ps * SAME_PICOSECOND {
        whole
    } else {
        ps.ceil()
    };
    let context = || format!("simulation: message {m} sharing its links");
    if ps.is_nan() || ps >= (Picos::MAX - now) as f64 {
        return Err(time_limit(context(), now as f64 + ps));
    }
    later(now, (ps as Picos).max(1), context)
}

/// Progressive filling, with its working arrays kept between events.
struct Filling {
    /// Per link: its bandwidth in bytes per picosecond.
    bandwidth: Vec<f64>,
    /// Per link: capacity not yet given out, flows crossing it, and how many of those
    /// have no rate yet.
    capacity: Vec<f64>,
    flows: Vec<Vec<u32>>,
    unfixed: Vec<u32>,
    /// Links some moving flow crosses.
    used: Vec<u32>,
    /// Per message: whether it has its rate.
    fixed: Vec<bool>,
    /// (a link's fair share, link), least first; entries whose share changed since are
    /// skipped.
    heap: BinaryHeap<Reverse<(Share, u32)>>,
}

impl Filling {
    fn new(topo: &Topology, messages: usize) -> Filling {
        let links = topo.links().len();
        Filling {
            // 1 GB/s moves one byte per nanosecond: a thousandth of a byte per ps.
            bandwidth: topo
                .links()
                .iter()
                .map(|l| l.bandwidth_gbps / 1000.0)
                .collect(),
            capacity: vec![0.0; links],
            flows: vec![Vec::new(); links],
            unfixed: vec![0; links],
            used: Vec::new(),
            fixed: vec![false; messages],
            heap: BinaryHeap::new(),
        }
    }

    /// Sets `rate[m]` for every flow in `active`, crossing `links(m)`, to its max-min
    /// fair rate.
    fn share<'r>(&mut self, links: impl Fn(usize) -> &'r [u32], active: &[u32], rate: &mut [f64]) {
        for &m in active {
            self.fixed[m as usize] = false;
            for &l in links(m as usize) {
                let li = l as usize;
                if self.flows[li].is_empty() {
                    self.used.push(l);
                    self.capacity[li] = self.bandwidth[li];
                }
                self.flows[li].push(m);
                self.unfixed[li] += 1;
            }
        }
        for &l in &self.used {
            self.heap.push(Reverse((self.share_of(l as usize), l)));
        }
        while let Some(Reverse((share, l))) = self.heap.pop() {
            let li = l as usize;
            if self.unfixed[li] == 0 || self.share_of(li) != share {
                continue;
            }
            for k in 0..self.flows[li].len() {
                let m = self.flows[li][k] as usize;
                if self.fixed[m] {
                    continue;
                }
                self.fixed[m] = true;
                rate[m] = share.0;
                for &other in links(m) {
                    let o = other as usize;
                    self.capacity[o] -= share.0;
                    self.unfixed[o] -= 1;
                    if o != li && self.unfixed[o] > 0 {
                        self.heap.push(Reverse((self.share_of(o), other)));
                    }
                }
            }
        }
        for l in self.used.drain(..) {
            self.flows[l as usize].clear();
        }
    }

    /// What each flow without a rate would get on link `l` now.
    fn share_of(&self, l: usize) -> Share {
        Share((self.capacity[l] / f64::from(self.unfixed[l])).max(0.0))
    }
}

/// A fair share in bytes per picosecond, ordered as a number (never NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Share(f64);

impl Eq for Share {}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}
