//! What the engine runs: message endpoints and sizes in flat arrays, and what each message
//! waits for.
//!
//! Dependencies come in two shapes. Messages given one by one list the messages they wait
//! for. A schedule's transfer waits for the arrivals of its chunk at its source that ended
//! before it started; those are a prefix of that (NPU, chunk) pair's arrivals in schedule
//! order, so they are kept as one count per transfer rather than one list each (a reduction
//! fed by P contributions and forwarded P times would otherwise cost P^2 entries).

use super::Message;
use crate::error::{Error, Result};
use crate::schedule::{GroupKey, Schedule};
use crate::topology::Topology;
use crate::units::Picos;

/// Marks "none" in the u32 index arrays.
pub(super) const NONE: u32 = u32::MAX;

pub(super) struct Workload {
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    pub bytes: Bytes,
    pub deps: Dependencies,
    /// A schedule's (start, end) of each message: where the schedule is timed (every
    /// transfer takes its route's time), messages cross links through switches in start
    /// order (equal times in any order). None for plain messages.
    pub planned: Option<Vec<(Picos, Picos)>>,
    /// The in-switch messages, by index, with their groups (`sim::groups`).
    pub in_switch: Vec<(u32, GroupKey)>,
}

/// Message sizes: one for all (a schedule's chunk) or one per message.
pub(super) enum Bytes {
    Uniform(f64),
    PerMessage(Vec<f64>),
}

impl Bytes {
    pub fn of(&self, m: usize) -> f64 {
        match self {
            Bytes::Uniform(b) => *b,
            Bytes::PerMessage(v) => v[m],
        }
    }
}

pub(super) enum Dependencies {
    /// `list[start[m]..start[m + 1]]` are the messages `m` waits for.
    Explicit { start: Vec<u32>, list: Vec<u32> },
    /// Each message waits for a prefix of its chunk's arrivals at its source.
    Arrivals(ArrivalGroups),
}

/// Arrivals grouped by (destination NPU, chunk), each group in schedule order.
pub(super) struct ArrivalGroups {
    /// Messages sorted by (destination, chunk, scheduled end, index).
    pub order: Vec<u32>,
    /// `order[group_start[g]..group_start[g + 1]]` are group g's arrivals.
    pub group_start: Vec<u32>,
    /// Per message: the group its arrival belongs to, and its position in `order`.
    pub arrival_group: Vec<u32>,
    pub slot: Vec<u32>,
    /// Per message: the group whose first `wait_count` arrivals it waits for (NONE: none).
    pub wait_group: Vec<u32>,
    pub wait_count: Vec<u32>,
    /// `waiters[waiter_start[g]..waiter_start[g + 1]]` wait on group g, fewest arrivals first.
    pub waiter_start: Vec<u32>,
    pub waiters: Vec<u32>,
}

impl Workload {
    pub fn from_messages(topo: &Topology, messages: &[Message]) -> Result<Workload> {
        let n = check_count(messages.len())?;
        let mut start = Vec::with_capacity(n + 1);
        let mut list = Vec::new();
        start.push(0);
        for (i, m) in messages.iter().enumerate() {
            check_message_endpoints(topo, i, m.src, m.dst)?;
            if !(m.bytes.is_finite() && m.bytes >= 0.0) {
                return Err(Error::schedule_at(
                    i,
                    format!("message {i} has {} bytes", m.bytes),
                ));
            }
            for &d in &m.deps {
                if d >= n {
                    return Err(Error::schedule_at(
                        i,
                        format!("message {i} depends on message {d}, which does not exist"),
                    ));
                }
                list.push(d as u32);
            }
            start.push(list.len() as u32);
        }
        Ok(Workload {
            src: messages.iter().map(|m| m.src as u32).collect(),
            dst: messages.iter().map(|m| m.dst as u32).collect(),
            bytes: Bytes::PerMessage(messages.iter().map(|m| m.bytes).collect()),
            deps: Dependencies::Explicit { start, list },
            planned: None,
            in_switch: Vec::new(),
        })
    }

    pub fn from_schedule(topo: &Topology, schedule: &Schedule) -> Result<Workload> {
        check_count(schedule.transfers.len())?;
        for (i, t) in schedule.transfers.iter().enumerate() {
            check_endpoints(topo, "transfer", i, t.src(), t.dst())?;
            if t.chunk() >= NONE as usize {
                return Err(Error::schedule_at(
                    i,
                    format!(
                        "transfer {i} names chunk {}, more than the simulator handles",
                        t.chunk()
                    ),
                ));
            }
        }
        if !(schedule.chunk_bytes.is_finite() && schedule.chunk_bytes >= 0.0) {
            return Err(Error::schedule(format!(
                "chunk_bytes is {}",
                schedule.chunk_bytes
            )));
        }
        Ok(Workload {
            src: schedule.transfers.iter().map(|t| t.src() as u32).collect(),
            dst: schedule.transfers.iter().map(|t| t.dst() as u32).collect(),
            bytes: Bytes::Uniform(schedule.chunk_bytes),
            deps: Dependencies::of_schedule(schedule),
            planned: Some(
                schedule
                    .transfers
                    .iter()
                    .map(|t| (t.start_ps, t.end_ps))
                    .collect(),
            ),
            in_switch: schedule
                .transfers
                .iter()
                .enumerate()
                .filter(|(_, t)| t.in_switch)
                .map(|(i, t)| (i as u32, GroupKey::of(t)))
                .collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.src.len()
    }
}

impl Dependencies {
    /// A schedule's data dependencies: each transfer waits for the arrivals of its chunk at
    /// its source that end no later than it starts. Spelled out as lists when that stays
    /// small (the engine walks lists with better memory locality), as groups otherwise.
    pub fn of_schedule(schedule: &Schedule) -> Dependencies {
        let groups = ArrivalGroups::new(schedule);
        let n = groups.wait_count.len();
        let total: usize = groups.wait_count.iter().map(|&k| k as usize).sum();
        if total > 2 * n {
            return Dependencies::Arrivals(groups);
        }
        let mut start = Vec::with_capacity(n + 1);
        let mut list = Vec::with_capacity(total);
        start.push(0);
        for m in 0..n {
            list.extend_from_slice(groups.awaited(m));
            start.push(list.len() as u32);
        }
        Dependencies::Explicit { start, list }
    }

    /// The messages `m` waits for.
    pub fn awaited(&self, m: usize) -> &[u32] {
        match self {
            Dependencies::Explicit { start, list } => {
                &list[start[m] as usize..start[m + 1] as usize]
            }
            Dependencies::Arrivals(g) => g.awaited(m),
        }
    }
}

impl ArrivalGroups {
    /// The arrivals message `m` waits for.
    fn awaited(&self, m: usize) -> &[u32] {
        match self.wait_group[m] {
            NONE => &[],
            g => {
                let from = self.group_start[g as usize] as usize;
                &self.order[from..from + self.wait_count[m] as usize]
            }
        }
    }

    fn new(schedule: &Schedule) -> ArrivalGroups {
        let t = &schedule.transfers;
        let n = t.len();
        let npus = t
            .iter()
            .map(|t| t.src().max(t.dst()) + 1)
            .max()
            .unwrap_or(0);
        let (arrival_npus, arrivals) =
            by_npu_chunk_time(npus, t.iter().map(|x| (x.dst(), x.chunk(), x.end_ps)));
        let (sender_npus, senders) =
            by_npu_chunk_time(npus, t.iter().map(|x| (x.src(), x.chunk(), x.start_ps)));
        let mut order = Vec::with_capacity(n);
        let mut group_start = Vec::new();
        let mut arrival_group = vec![0u32; n];
        let mut slot = vec![0u32; n];
        let mut wait_group = vec![NONE; n];
        let mut wait_count = vec![0u32; n];
        let mut waiter_start = vec![0u32];
        let mut waiters = Vec::new();
        for v in 0..npus {
            let mut a = arrival_npus[v] as usize;
            let a_end = arrival_npus[v + 1] as usize;
            let mut s = sender_npus[v] as usize;
            let s_end = sender_npus[v + 1] as usize;
            // Runs of one chunk: arrivals form a group; senders of that chunk wait on a
            // prefix of it, found by walking both runs in time order.
            while a < a_end {
                let chunk = arrivals[a].chunk();
                let mut run_end = a + 1;
                while run_end < a_end && arrivals[run_end].chunk() == chunk {
                    run_end += 1;
                }
                let g = group_start.len() as u32;
                group_start.push(a as u32);
                for (k, r) in arrivals[a..run_end].iter().enumerate() {
                    let m = r.index();
                    order.push(m);
                    arrival_group[m as usize] = g;
                    slot[m as usize] = (a + k) as u32;
                }
                while s < s_end && senders[s].chunk() < chunk {
                    s += 1;
                }
                let mut landed = a;
                while s < s_end && senders[s].chunk() == chunk {
                    let (start, m) = (senders[s].time(), senders[s].index());
                    while landed < run_end && arrivals[landed].time() <= start {
                        landed += 1;
                    }
                    if landed > a {
                        wait_group[m as usize] = g;
                        wait_count[m as usize] = (landed - a) as u32;
                        waiters.push(m);
                    }
                    s += 1;
                }
                waiter_start.push(waiters.len() as u32);
                a = run_end;
            }
        }
        group_start.push(n as u32);
        ArrivalGroups {
            order,
            group_start,
            arrival_group,
            slot,
            wait_group,
            wait_count,
            waiter_start,
            waiters,
        }
    }
}

/// One arrival or send, packed so that sorting the integers sorts by (chunk, time, index).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Keyed(u128);

impl Keyed {
    fn new(chunk: usize, time: Picos, index: usize) -> Keyed {
        Keyed((chunk as u128) << 96 | (time as u128) << 32 | index as u128)
    }
    fn chunk(self) -> usize {
        (self.0 >> 96) as usize
    }
    fn time(self) -> Picos {
        (self.0 >> 32) as Picos
    }
    fn index(self) -> u32 {
        self.0 as u32
    }
}

/// Sorts items given as (NPU, chunk, time) by that triple then index: bucketed by NPU in
/// one linear pass, then each NPU's small bucket sorted in place. Returns each NPU's start
/// in the result and the sorted items.
fn by_npu_chunk_time(
    npus: usize,
    items: impl Iterator<Item = (usize, usize, Picos)> + Clone,
) -> (Vec<u32>, Vec<Keyed>) {
    let mut start = vec![0u32; npus + 1];
    for (npu, _, _) in items.clone() {
        start[npu + 1] += 1;
    }
    for v in 0..npus {
        start[v + 1] += start[v];
    }
    let mut fill = start.clone();
    let mut sorted = vec![Keyed(0); start[npus] as usize];
    for (i, (npu, chunk, time)) in items.enumerate() {
        sorted[fill[npu] as usize] = Keyed::new(chunk, time, i);
        fill[npu] += 1;
    }
    for v in 0..npus {
        sorted[start[v] as usize..start[v + 1] as usize].sort_unstable();
    }
    (start, sorted)
}

fn check_count(n: usize) -> Result<usize> {
    if n >= NONE as usize {
        return Err(Error::Limit {
            what: "messages",
            value: n as u64,
            limit: NONE as u64 - 1,
            context: "the simulator".into(),
        });
    }
    Ok(n)
}

/// A message's ends: two NPUs, or an NPU and a switch joined by a link (a GPU's leg of a
/// reduction or multicast inside an NVSwitch).
fn check_message_endpoints(topo: &Topology, i: usize, src: usize, dst: usize) -> Result<()> {
    let vertices = topo.vertices();
    let switch_leg = src < vertices
        && dst < vertices
        && (topo.is_switch(src) != topo.is_switch(dst))
        && topo.link_between(src, dst).is_some();
    if switch_leg {
        return Ok(());
    }
    check_endpoints(topo, "message", i, src, dst)
}

pub(super) fn check_endpoints(
    topo: &Topology,
    what: &str,
    i: usize,
    src: usize,
    dst: usize,
) -> Result<()> {
    if src >= topo.npus() || dst >= topo.npus() || src == dst {
        return Err(Error::schedule_at(i, format!(
            "{what} {i} goes from NPU {src} to NPU {dst}: both must be distinct NPUs of the topology (0..{})",
            topo.npus() - 1
        )));
    }
    Ok(())
}
