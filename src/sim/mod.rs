//! The congestion-aware alpha-beta simulator.
//!
//! It executes messages, not promises: a message is issued once the messages it depends on
//! have arrived and the previous message of its flow (same source and destination) has been
//! issued, so every flow is FIFO the way a runtime connection is. A message between
//! neighbours takes their link; one between non-neighbours is routed on a shortest path (by
//! alpha-beta cost) and occupies each hop in turn (store and forward). Each directed link
//! carries one message at a time, serving its queue in order of arrival at the link, ties
//! broken by message index. Timestamps in a schedule are only used to order its transfers.

use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// One message to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub src: NpuId,
    pub dst: NpuId,
    pub bytes: f64,
    /// Indices of messages that must have arrived before this one is issued.
    pub deps: Vec<usize>,
}

/// When a message left its source and arrived at its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageTiming {
    pub start_ps: Picos,
    pub end_ps: Picos,
}

/// What a simulation measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// When the last message arrived.
    pub time_ps: Picos,
    pub messages: Vec<MessageTiming>,
    /// Per link (indexed like `Topology::links()`): time spent carrying messages.
    pub link_busy_ps: Vec<Picos>,
    /// Per link: bytes carried.
    pub link_bytes: Vec<f64>,
}

/// Simulates `messages` on `topo`.
pub fn simulate_messages(topo: &Topology, messages: &[Message]) -> Result<SimResult> {
    Simulation::new(topo, messages)?.run()
}

/// Simulates a schedule: each transfer becomes a message that depends on every transfer
/// that brought the same chunk to its source before it started (by the schedule's order).
pub fn simulate_schedule(topo: &Topology, schedule: &Schedule) -> Result<SimResult> {
    simulate_messages(topo, &schedule_messages(schedule))
}

/// The messages of a schedule, with data dependencies taken from its transfer order.
pub fn schedule_messages(schedule: &Schedule) -> Vec<Message> {
    // Arrivals of each (npu, chunk), by end time.
    let mut arrivals: HashMap<(NpuId, usize), Vec<(Picos, usize)>> = HashMap::new();
    for (i, t) in schedule.transfers.iter().enumerate() {
        arrivals
            .entry((t.dst, t.chunk))
            .or_default()
            .push((t.end_ps, i));
    }
    for list in arrivals.values_mut() {
        list.sort_unstable();
    }
    schedule
        .transfers
        .iter()
        .map(|t| {
            let deps = arrivals
                .get(&(t.src, t.chunk))
                .map(|list| {
                    list.iter()
                        .take_while(|&&(end, _)| end <= t.start_ps)
                        .map(|&(_, i)| i)
                        .collect()
                })
                .unwrap_or_default();
            Message {
                src: t.src,
                dst: t.dst,
                bytes: schedule.chunk_bytes,
                deps,
            }
        })
        .collect()
}

struct Simulation<'a> {
    topo: &'a Topology,
    messages: &'a [Message],
    /// The links each message crosses, in order.
    routes: Vec<Vec<LinkId>>,
    /// Messages waiting on each message's arrival.
    dependents: Vec<Vec<usize>>,
    waiting_deps: Vec<usize>,
    /// The next message of the same flow, and whether each message has been issued.
    flow_next: Vec<Option<usize>>,
    flow_blocked: Vec<bool>,
    issued: Vec<bool>,
    hop: Vec<usize>,
    /// Per link: messages queued, by (time they reached the link, index).
    queues: Vec<BinaryHeap<Reverse<(Picos, usize)>>>,
    link_free: Vec<bool>,
    /// (time a hop ends, message).
    events: BinaryHeap<Reverse<(Picos, usize)>>,
    timing: Vec<MessageTiming>,
    link_busy_ps: Vec<Picos>,
    link_bytes: Vec<f64>,
}

impl<'a> Simulation<'a> {
    fn new(topo: &'a Topology, messages: &'a [Message]) -> Result<Simulation<'a>> {
        let n = messages.len();
        let mut routes = Vec::with_capacity(n);
        let mut router = Router::new(topo);
        let mut dependents = vec![Vec::new(); n];
        let mut waiting_deps = vec![0; n];
        let mut last_of_flow: HashMap<(NpuId, NpuId), usize> = HashMap::new();
        let mut flow_next = vec![None; n];
        let mut flow_blocked = vec![false; n];
        for (i, m) in messages.iter().enumerate() {
            if m.src >= topo.npus() || m.dst >= topo.npus() || m.src == m.dst {
                return Err(Error::Schedule(format!(
                    "message {i} goes from NPU {} to NPU {}: both must be distinct NPUs of 0..{}",
                    m.src,
                    m.dst,
                    topo.npus() - 1
                )));
            }
            if !(m.bytes.is_finite() && m.bytes >= 0.0) {
                return Err(Error::Schedule(format!(
                    "message {i} has {} bytes",
                    m.bytes
                )));
            }
            routes.push(router.route(m.src, m.dst, m.bytes)?);
            for &d in &m.deps {
                if d >= n {
                    return Err(Error::Schedule(format!(
                        "message {i} depends on message {d}, which does not exist"
                    )));
                }
                dependents[d].push(i);
                waiting_deps[i] += 1;
            }
            if let Some(prev) = last_of_flow.insert((m.src, m.dst), i) {
                flow_next[prev] = Some(i);
                flow_blocked[i] = true;
            }
        }
        Ok(Simulation {
            topo,
            messages,
            routes,
            dependents,
            waiting_deps,
            flow_next,
            flow_blocked,
            issued: vec![false; n],
            hop: vec![0; n],
            queues: vec![BinaryHeap::new(); topo.links().len()],
            link_free: vec![true; topo.links().len()],
            events: BinaryHeap::new(),
            timing: vec![
                MessageTiming {
                    start_ps: 0,
                    end_ps: 0
                };
                n
            ],
            link_busy_ps: vec![0; topo.links().len()],
            link_bytes: vec![0.0; topo.links().len()],
        })
    }

    fn run(mut self) -> Result<SimResult> {
        for i in 0..self.messages.len() {
            self.try_issue(i, 0);
        }
        while let Some(Reverse((now, m))) = self.events.pop() {
            let link = self.routes[m][self.hop[m]];
            self.link_free[link] = true;
            self.hop[m] += 1;
            if self.hop[m] < self.routes[m].len() {
                self.enqueue(m, now);
            } else {
                self.timing[m].end_ps = now;
                for k in 0..self.dependents[m].len() {
                    let d = self.dependents[m][k];
                    self.waiting_deps[d] -= 1;
                    self.try_issue(d, now);
                }
            }
            self.serve(link, now);
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

    /// Issues message `m` at `now` if its dependencies have arrived and its flow
    /// predecessor has been issued; then tries the next message of its flow.
    fn try_issue(&mut self, mut m: usize, now: Picos) {
        while !self.issued[m] && self.waiting_deps[m] == 0 && !self.flow_blocked[m] {
            self.issued[m] = true;
            self.timing[m].start_ps = now;
            if self.routes[m].is_empty() {
                self.timing[m].end_ps = now;
            } else {
                self.enqueue(m, now);
            }
            match self.flow_next[m] {
                Some(next) => {
                    self.flow_blocked[next] = false;
                    m = next;
                }
                None => break,
            }
        }
    }

    fn enqueue(&mut self, m: usize, now: Picos) {
        let link = self.routes[m][self.hop[m]];
        self.queues[link].push(Reverse((now, m)));
        self.serve(link, now);
    }

    fn serve(&mut self, link: LinkId, now: Picos) {
        if !self.link_free[link] {
            return;
        }
        let Some(Reverse((_, m))) = self.queues[link].pop() else {
            return;
        };
        let bytes = self.messages[m].bytes;
        let took = self.topo.link(link).transfer_ps(bytes);
        self.link_free[link] = false;
        self.link_busy_ps[link] += took;
        self.link_bytes[link] += bytes;
        self.events.push(Reverse((now + took, m)));
    }
}

/// Shortest paths by alpha-beta cost, computed per (source, message size) on demand.
struct Router<'a> {
    topo: &'a Topology,
    /// (src, bytes bits) -> the link that reaches each NPU on a shortest path.
    trees: HashMap<(NpuId, u64), Vec<Option<LinkId>>>,
}

impl<'a> Router<'a> {
    fn new(topo: &'a Topology) -> Router<'a> {
        Router {
            topo,
            trees: HashMap::new(),
        }
    }

    fn route(&mut self, src: NpuId, dst: NpuId, bytes: f64) -> Result<Vec<LinkId>> {
        if let Some(l) = self.topo.link_between(src, dst) {
            return Ok(vec![l]);
        }
        let topo = self.topo;
        let tree = self
            .trees
            .entry((src, bytes.to_bits()))
            .or_insert_with(|| shortest_path_tree(topo, src, bytes));
        let mut path = Vec::new();
        let mut at = dst;
        while at != src {
            let Some(l) = tree[at] else {
                return Err(Error::Disconnected(format!(
                    "no route from NPU {src} to NPU {dst}"
                )));
            };
            path.push(l);
            at = topo.link(l).src;
        }
        path.reverse();
        Ok(path)
    }
}

/// Dijkstra from `src` with link weights alpha + bytes / bandwidth; ties go to the lower
/// NPU id so routes are reproducible.
fn shortest_path_tree(topo: &Topology, src: NpuId, bytes: f64) -> Vec<Option<LinkId>> {
    let mut dist = vec![Picos::MAX; topo.npus()];
    let mut via = vec![None; topo.npus()];
    let mut heap = BinaryHeap::from([Reverse((0, src))]);
    dist[src] = 0;
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for l in topo.out_links(u) {
            let link = topo.link(l);
            let nd = d + link.transfer_ps(bytes);
            if nd < dist[link.dst] {
                dist[link.dst] = nd;
                via[link.dst] = Some(l);
                heap.push(Reverse((nd, link.dst)));
            }
        }
    }
    via
}
