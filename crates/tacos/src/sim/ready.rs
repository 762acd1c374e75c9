//! What both timing engines share: each message's route, and when a message may be issued.
//!
//! A message is issued once the messages it depends on have arrived and the previous
//! message of its flow has been issued. Flows are keyed by link for messages between
//! neighbours and by (source, destination) otherwise.

use super::route::Router;
use super::workload::{ArrivalGroups, Dependencies, Workload, NONE};
use crate::budget::Allowance;
use crate::error::{Error, Result};
use crate::topology::Topology;
use std::collections::HashMap;

/// Every message's links, in order: `links[start[m]..start[m + 1]]` for message m.
pub(super) struct Routes {
    pub start: Vec<u32>,
    pub links: Vec<u32>,
}

impl Routes {
    /// Routes every message of `work`, taking what the routes hold from `room`.
    pub fn new(topo: &Topology, work: &Workload, room: Allowance) -> Result<Routes> {
        let n = work.len();
        let mut router = Router::new(topo, room);
        let mut start = Vec::with_capacity(n + 1);
        let mut links = Vec::with_capacity(n);
        start.push(0);
        for (m, (&src, &dst)) in work.src.iter().zip(&work.dst).enumerate() {
            let before = links.len();
            router.route(src as usize, dst as usize, work.bytes.of(m), &mut links)?;
            let hops = (links.len() - before) as u64;
            router.take(hops * super::memory::ROUTE_LINK, || {
                format!(
                    "simulating {n} messages on {}, {} links of routes so far",
                    topo.name(),
                    links.len()
                )
            })?;
            start.push(u32::try_from(links.len()).map_err(|_| Error::Limit {
                what: "links of message routes",
                value: links.len() as u64,
                limit: u32::MAX as u64,
                context: format!("simulating {n} messages on {}", topo.name()),
            })?);
        }
        Ok(Routes { start, links })
    }

    /// The links message `m` crosses.
    pub fn of(&self, m: usize) -> &[u32] {
        &self.links[self.start[m] as usize..self.start[m + 1] as usize]
    }
}

/// Which messages may be issued, updated as messages are issued and arrive.
pub(super) struct Readiness<'a> {
    work: &'a Workload,
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
}

impl<'a> Readiness<'a> {
    pub fn new(work: &'a Workload, routes: &Routes) -> Readiness<'a> {
        let n = work.len();
        let (flow_next, flow_blocked) = flows(work, routes);
        let mut ready = Readiness {
            work,
            pending: vec![0; n],
            dependent_start: Vec::new(),
            dependents: Vec::new(),
            arrived: Vec::new(),
            prefix: Vec::new(),
            next_waiter: Vec::new(),
            flow_next,
            flow_blocked,
            issued: vec![false; n],
        };
        match &work.deps {
            Dependencies::Explicit { start, list } => ready.index_dependents(start, list),
            Dependencies::Arrivals(groups) => {
                for (m, &g) in groups.wait_group.iter().enumerate() {
                    ready.pending[m] = u32::from(g != NONE);
                }
                ready.arrived = vec![false; n];
                ready.prefix = groups.group_start[..groups.group_start.len() - 1].to_vec();
                ready.next_waiter = groups.waiter_start[..groups.waiter_start.len() - 1].to_vec();
            }
        }
        ready
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

    /// Issues every message ready before anything arrived, appending them to `issued`.
    pub fn start(&mut self, issued: &mut Vec<u32>) {
        for m in 0..self.pending.len() {
            if self.pending[m] == 0 && !self.flow_blocked[m] && !self.issued[m] {
                self.issue(m, issued);
            }
        }
    }

    /// Message `m` arrived: issues what waited only for it, appending those to `issued`.
    pub fn landed(&mut self, m: usize, issued: &mut Vec<u32>) {
        let work = self.work;
        match &work.deps {
            Dependencies::Explicit { .. } => {
                for k in self.dependent_start[m]..self.dependent_start[m + 1] {
                    let d = self.dependents[k as usize] as usize;
                    self.satisfy(d, issued);
                }
            }
            Dependencies::Arrivals(groups) => self.land_in_group(groups, m, issued),
        }
    }

    /// An error when some message was never issued (its dependencies form a cycle).
    pub fn check_all_issued(&self) -> Result<()> {
        let stuck = self.issued.iter().filter(|&&i| !i).count();
        if stuck > 0 {
            let first = self.issued.iter().position(|&i| !i).unwrap_or(0);
            return Err(Error::schedule(format!(
                "{stuck} messages never became ready (a dependency cycle), message {first} among them"
            )));
        }
        Ok(())
    }

    /// Issues ready message `m`, then the following messages of its flow that were only
    /// waiting for it.
    fn issue(&mut self, mut m: usize, issued: &mut Vec<u32>) {
        loop {
            self.issued[m] = true;
            issued.push(m as u32);
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

    fn land_in_group(&mut self, groups: &ArrivalGroups, m: usize, issued: &mut Vec<u32>) {
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
            self.satisfy(w, issued);
        }
    }

    fn satisfy(&mut self, m: usize, issued: &mut Vec<u32>) {
        self.pending[m] -= 1;
        if self.pending[m] == 0 && !self.flow_blocked[m] {
            self.issue(m, issued);
        }
    }
}

/// Per message: the next message of its flow (NONE at the end), and whether it has a
/// predecessor in its flow.
fn flows(work: &Workload, routes: &Routes) -> (Vec<u32>, Vec<bool>) {
    let n = work.len();
    let mut last_on_link = vec![NONE; routes.links.iter().max().map_or(0, |&l| l as usize + 1)];
    let mut last_routed: HashMap<(u32, u32), u32> = HashMap::new();
    let mut flow_next = vec![NONE; n];
    let mut flow_blocked = vec![false; n];
    for (m, (&src, &dst)) in work.src.iter().zip(&work.dst).enumerate() {
        let last = match routes.of(m) {
            &[link] => std::mem::replace(&mut last_on_link[link as usize], m as u32),
            _ => last_routed.insert((src, dst), m as u32).unwrap_or(NONE),
        };
        if last != NONE {
            flow_next[last as usize] = m as u32;
            flow_blocked[m] = true;
        }
    }
    (flow_next, flow_blocked)
}
