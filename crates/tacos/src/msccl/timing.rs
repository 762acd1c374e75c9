//! Times a program with the simulator's alpha-beta rules: every message a program sends
//! becomes a `sim::Message` from its GPU's NPU to its peer's, and the simulator does the
//! rest (one message per link at a time, FIFO flows, multi-hop routes; on a fabric a
//! message between GPUs joined through switches holds its route's links cut-through).
//!
//! A message depends on the receives its sending step waited for on its own GPU: the
//! earlier receives of its threadblock and, through dependencies, those of the steps it
//! waited on (the latest per threadblock stands for the earlier ones, since a connection
//! is FIFO). Sending and local steps take no time of their own. Messages are numbered in
//! an order a run could issue them (see `ProgramTimer::messages`).

use super::exec::{self, Trace};
use super::{Layout, Program};
use crate::error::{Error, Result};
use crate::sim::{simulate_messages, Message, SimResult};
use crate::topology::{LinkId, NpuId, RouteTree, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Times `program` on `topo`, rank r on the r-th alive NPU, for a collective of
/// `size_bytes` (nccl-tests' convention, as `tacos synth --size`).
pub fn simulate_program(topo: &Topology, program: &Program, size_bytes: u64) -> Result<SimResult> {
    let ranks = topo.alive_npus();
    if ranks.len() != program.gpus.len() {
        return Err(Error::msccl(format!(
            "the program has {} GPUs but topology {} has {} NPUs",
            program.gpus.len(),
            topo.name(),
            ranks.len()
        )));
    }
    simulate_program_on(topo, program, size_bytes, &ranks)
}

/// Times `program` with rank r on NPU `ranks[r]`.
pub fn simulate_program_on(
    topo: &Topology,
    program: &Program,
    size_bytes: u64,
    ranks: &[NpuId],
) -> Result<SimResult> {
    ProgramTimer::new(topo, program, ranks)?.simulate(topo, size_bytes)
}

/// A program's messages and what each waits for, worked out once (by running its control
/// flow), so that it can be timed at many sizes for the cost of the simulation alone.
#[derive(Clone, Debug)]
pub struct ProgramTimer {
    /// Per message, in the order sent: its NPUs, the links it holds (`route_links[
    /// route_at[m]..route_at[m + 1]]`), chunks, sending threadblock, and (chain of steps,
    /// sending step) to break ties.
    src: Vec<NpuId>,
    dst: Vec<NpuId>,
    route_at: Vec<u32>,
    route_links: Vec<LinkId>,
    count: Vec<u32>,
    tb: Vec<u32>,
    tie: Vec<(u32, usize)>,
    /// Messages each waits for (all sent before it): `deps[deps_at[m]..deps_at[m + 1]]`.
    deps_at: Vec<u32>,
    deps: Vec<u32>,
    tbs: usize,
    size_divisor: usize,
}

impl ProgramTimer {
    /// Runs `program` (rank r on NPU `ranks[r]`), which must be complete and finish.
    pub fn new(topo: &Topology, program: &Program, ranks: &[NpuId]) -> Result<ProgramTimer> {
        if ranks.len() != program.gpus.len() {
            return Err(Error::msccl(format!(
                "{} NPUs given for a program of {} GPUs",
                ranks.len(),
                program.gpus.len()
            )));
        }
        let kind = program.collective_kind();
        super::footprint::check(program, kind, "timing")?;
        let structure = exec::structure_problems(program);
        if let Some(p) = structure.first() {
            return Err(Error::msccl(format!("cannot run the program: {p}")));
        }
        let trace = exec::run(program, usize::MAX / 2);
        if let Some(d) = &trace.deadlock {
            return Err(Error::msccl(format!("the program does not finish: {d}")));
        }
        Ok(ProgramTimer::of_trace(
            topo,
            program,
            &trace,
            ranks,
            size_divisor(program)?,
        ))
    }

    /// Times the program for a collective of `size_bytes` (nccl-tests' convention).
    pub fn simulate(&self, topo: &Topology, size_bytes: u64) -> Result<SimResult> {
        self.simulate_in_lines(topo, size_bytes, 1)
    }

    /// Per link of `topo` (the topology the timer was made on), how many threadblocks
    /// send over it: the connections that share it.
    pub fn threadblocks_per_link(&self, links: usize) -> Vec<u32> {
        let mut seen: Vec<Vec<u32>> = vec![Vec::new(); links];
        for m in 0..self.src.len() {
            for &l in self.route_of(m) {
                if let Some(tbs) = seen.get_mut(l) {
                    if !tbs.contains(&self.tb[m]) {
                        tbs.push(self.tb[m]);
                    }
                }
            }
        }
        seen.iter().map(|tbs| tbs.len() as u32).collect()
    }

    /// [`ProgramTimer::simulate`] with every message rounded up to whole lines of
    /// `line_bytes` data bytes: a protocol moves at least one line per step.
    pub fn simulate_in_lines(
        &self,
        topo: &Topology,
        size_bytes: u64,
        line_bytes: u64,
    ) -> Result<SimResult> {
        simulate_messages(topo, &self.messages(topo, size_bytes, line_bytes.max(1)))
    }
}

/// Chunks in the buffer a collective's size measures.
fn size_divisor(program: &Program) -> Result<usize> {
    let Some(kind) = program.collective_kind() else {
        return Ok(program.nchunksperloop.max(1));
    };
    let root = kind.has_root().then_some(0);
    let layout = Layout::new(
        kind,
        program.gpus.len(),
        program.nchunksperloop,
        false,
        root,
    )?;
    Ok(layout.size_divisor())
}

/// A message that can go: (when it may start, when it became ready, tie-break, message).
type Ready = (Picos, Picos, (u32, usize), u32);

/// Per threadblock of one GPU, the latest receive a step has waited for: (1 + the
/// receiving step's index, message id), or (0, _) for none yet.
type Seen = (u32, u32);

/// Keeps, per threadblock, the later of two receives.
fn merge(into: &mut [Seen], other: &[Seen]) {
    for (a, b) in into.iter_mut().zip(other) {
        if b.0 > a.0 {
            *a = *b;
        }
    }
}

impl ProgramTimer {
    /// Each message's dependencies: the latest receive, per threadblock of the sending
    /// GPU, that the sending step has waited for.
    fn of_trace(
        topo: &Topology,
        program: &Program,
        trace: &Trace,
        ranks: &[NpuId],
        size_divisor: usize,
    ) -> ProgramTimer {
        let index = &trace.index;
        let messages = trace.messages.len();
        // Per global threadblock, where its receive frontier (one entry per threadblock
        // of its GPU) starts in `frontier`; per signalling step, where its snapshot starts.
        let width = |t: usize| index.tb_id[index.tbs[t].0].len();
        let mut frontier_at = Vec::with_capacity(index.tbs.len() + 1);
        frontier_at.push(0);
        for t in 0..index.tbs.len() {
            frontier_at.push(frontier_at[t] + width(t));
        }
        let mut frontier: Vec<Seen> = vec![(0, 0); frontier_at[index.tbs.len()]];
        const NO_SNAPSHOT: usize = usize::MAX;
        let mut snapshot_at = vec![NO_SNAPSHOT; index.steps()];
        let mut snapshots = 0;
        for &src in trace.released_by.iter().flatten() {
            if snapshot_at[src] == NO_SNAPSHOT {
                snapshot_at[src] = snapshots;
                snapshots += width(index.locate(src).0);
            }
        }
        let mut at_signal: Vec<Seen> = vec![(0, 0); snapshots];
        let mut timer = ProgramTimer {
            src: vec![0; messages],
            dst: vec![0; messages],
            route_at: Vec::with_capacity(messages + 1),
            route_links: Vec::new(),
            count: vec![0; messages],
            tb: vec![0; messages],
            tie: vec![(0, 0); messages],
            deps_at: Vec::with_capacity(messages + 1),
            deps: Vec::new(),
            tbs: index.tbs.len(),
            size_divisor,
        };
        // Messages are numbered as they are sent, so their dependencies are laid out in
        // order as the run goes.
        timer.deps_at.push(0);
        timer.route_at.push(0);
        let mut routes = Routes::new(topo);
        for &gid in &trace.order {
            let (t, s) = index.locate(gid);
            let (g, tb) = index.tbs[t];
            let mine = frontier_at[t]..frontier_at[t + 1];
            if let Some(src) = trace.released_by[gid] {
                let at = snapshot_at[src];
                merge(&mut frontier[mine.clone()], &at_signal[at..at + mine.len()]);
            }
            if let Some(m) = trace.received[gid] {
                frontier[mine.start + tb] = (s as u32 + 1, m as u32);
            }
            if let Some(m) = trace.sent[gid] {
                debug_assert_eq!(m + 1, timer.deps_at.len());
                let peer = program.gpus[g].threadblocks[tb]
                    .send
                    .expect("a sending step's threadblock has a send peer");
                let (src, dst) = (ranks[g], ranks[peer]);
                timer.src[m] = src;
                timer.dst[m] = dst;
                timer
                    .route_links
                    .extend_from_slice(routes.between(src, dst));
                timer.route_at.push(timer.route_links.len() as u32);
                timer.count[m] = trace.messages[m].count;
                timer.tb[m] = t as u32;
                timer.tie[m] = (trace.depth[gid], gid);
                let seen = frontier[mine.clone()].iter().filter(|e| e.0 > 0);
                timer.deps.extend(seen.map(|e| e.1));
                timer.deps_at.push(timer.deps.len() as u32);
            }
            let at = snapshot_at[gid];
            if at != NO_SNAPSHOT {
                at_signal[at..at + mine.len()].copy_from_slice(&frontier[mine]);
            }
        }
        timer
    }

    fn route_of(&self, m: usize) -> &[LinkId] {
        &self.route_links[self.route_at[m] as usize..self.route_at[m + 1] as usize]
    }

    fn deps_of(&self, m: usize) -> &[u32] {
        &self.deps[self.deps_at[m] as usize..self.deps_at[m + 1] as usize]
    }

    /// The program's messages as simulator messages, in issue order.
    ///
    /// The order is that of a run in which every link carries, whenever it is free, the
    /// message that became ready first (its data has arrived and its connection's earlier
    /// message has too), at the alpha-beta cost of the link (of the route, held
    /// cut-through, when it goes through switches): it keeps each connection's
    /// order, and where channels share a link it interleaves them by when their data is
    /// ready, as the executor's channels (separate connections) do. The simulator keeps a
    /// single queue per link, so an order that put a message ahead of one that is ready
    /// before it would idle the link (a run that let every connection have its link to
    /// itself got ahead of the shared link and did that). Ties go to the shorter chain of
    /// steps.
    fn messages(&self, topo: &Topology, size_bytes: u64, line_bytes: u64) -> Vec<Message> {
        let chunk_bytes = size_bytes as f64 / self.size_divisor as f64;
        let line = line_bytes as f64;
        let bytes_of = |m: usize| match self.count[m] as f64 * chunk_bytes {
            bytes if line_bytes > 1 => (bytes / line).ceil() * line,
            bytes => bytes,
        };
        let n = self.src.len();
        // Who waits for each message: the messages that depend on it, and the next
        // message of its threadblock (its connection).
        let mut waiting = vec![0u32; n];
        let mut dependents_at = vec![0u32; n + 1];
        for &d in &self.deps {
            dependents_at[d as usize + 1] += 1;
        }
        for m in 0..n {
            dependents_at[m + 1] += dependents_at[m];
        }
        let mut fill = dependents_at.clone();
        let mut dependents = vec![0u32; self.deps.len()];
        let mut next_of_tb = vec![u32::MAX; n];
        let mut last_of_tb = vec![u32::MAX; self.tbs];
        for (m, waits) in waiting.iter_mut().enumerate() {
            for &d in self.deps_of(m) {
                dependents[fill[d as usize] as usize] = m as u32;
                fill[d as usize] += 1;
            }
            *waits = self.deps_of(m).len() as u32;
            let t = self.tb[m] as usize;
            if last_of_tb[t] != u32::MAX {
                next_of_tb[last_of_tb[t] as usize] = m as u32;
                *waits += 1;
            }
            last_of_tb[t] = m as u32;
        }
        let mut ready: Vec<Picos> = vec![0; n];
        let mut start: Vec<Picos> = vec![0; n];
        let mut link_free: Vec<Picos> = vec![0; topo.links().len()];
        let mut queue: BinaryHeap<Reverse<Ready>> = (0..n)
            .filter(|&m| waiting[m] == 0)
            .map(|m| Reverse((0, 0, self.tie[m], m as u32)))
            .collect();
        while let Some(Reverse((at, since, tie, m))) = queue.pop() {
            let m = m as usize;
            let route = self.route_of(m);
            // As in the simulator, a link serves its messages in the order they reached it,
            // while a message through switches goes once all its links are free: until
            // then it reserves nothing and tries again, so one that needs other links
            // goes first instead of waiting behind it.
            let free = route.iter().map(|&l| link_free[l]).fold(at, Picos::max);
            if free > at && route.len() > 1 {
                queue.push(Reverse((free, since, tie, m as u32)));
                continue;
            }
            let bytes = bytes_of(m);
            let cost = match route {
                [] => 0,
                _ => topo.route_link(route.iter().copied()).transfer_ps(bytes),
            };
            start[m] = free;
            let arrival = free + cost;
            for &l in route {
                link_free[l] = arrival;
            }
            let released = dependents[dependents_at[m] as usize..dependents_at[m + 1] as usize]
                .iter()
                .chain(Some(&next_of_tb[m]).filter(|&&x| x != u32::MAX));
            for &w in released {
                let w = w as usize;
                ready[w] = ready[w].max(arrival);
                waiting[w] -= 1;
                if waiting[w] == 0 {
                    queue.push(Reverse((ready[w], ready[w], self.tie[w], w as u32)));
                }
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&m| (start[m], self.tie[m]));
        let mut position = vec![0; n];
        for (i, &m) in order.iter().enumerate() {
            position[m] = i;
        }
        order
            .iter()
            .map(|&m| {
                let mut deps: Vec<usize> = self
                    .deps_of(m)
                    .iter()
                    .map(|&x| position[x as usize])
                    .collect();
                deps.sort_unstable();
                Message {
                    src: self.src[m],
                    dst: self.dst[m],
                    bytes: bytes_of(m),
                    deps,
                }
            })
            .collect()
    }
}

/// The links a message between two NPUs holds (`Topology::route`): their link, or on a
/// fabric the route through switches; none where the simulator would relay it through
/// other NPUs (the order then ignores its cost). Routes are found once per source.
/// Routes between NPUs as the executor's messages take them: the direct link, else the
/// fabric's route through switches (none between NPUs a mesh joins only over several hops).
pub(crate) struct Routes<'a> {
    topo: &'a Topology,
    direct: [LinkId; 1],
    trees: HashMap<NpuId, RouteTree>,
    known: HashMap<(NpuId, NpuId), Vec<LinkId>>,
}

impl<'a> Routes<'a> {
    pub(crate) fn new(topo: &'a Topology) -> Routes<'a> {
        Routes {
            topo,
            direct: [0],
            trees: HashMap::new(),
            known: HashMap::new(),
        }
    }

    pub(crate) fn between(&mut self, src: NpuId, dst: NpuId) -> &[LinkId] {
        let topo = self.topo;
        if let Some(l) = topo.link_between(src, dst) {
            self.direct = [l];
            return &self.direct;
        }
        if !topo.has_switches() {
            return &[];
        }
        let trees = &mut self.trees;
        self.known.entry((src, dst)).or_insert_with(|| {
            trees
                .entry(src)
                .or_insert_with(|| topo.route_tree(src))
                .route_to(topo, dst)
                .unwrap_or_default()
        })
    }
}
