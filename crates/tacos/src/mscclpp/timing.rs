//! Execution plans timed with the executor cost model, as MSCCL programs are
//! (`cost::program`): every chunk range a plan moves between GPUs becomes a simulator
//! message from its GPU's NPU to the peer's, and the simulator does the rest.
//!
//! A message depends on what its threadblock waited for before it: the threadblock's
//! previous message (its threads copy one range at a time), the messages a matched signal
//! or semaphore release had behind it, and every participant's at a barrier. Which signal
//! a wait consumes is found by running the plan's control flow once: a wait takes the
//! oldest signal its channel end has not yet given to that threadblock (the executor
//! counts signals per channel end and threadblock). Local copies and sums take no time of
//! their own. A plan the verifier passes always runs to its end here.

use super::plan::{Buff, ChannelType, Operation, Plan};
use crate::cost::model::line_data_bytes;
use crate::cost::program::MAX_INSTANCES;
use crate::cost::Executor;
use crate::error::{Error, Result};
use crate::gpu::Protocol;
use crate::sim::{simulate_messages, Message, SimResult};
use crate::topology::{NpuId, Topology};
use crate::tuner::profile::network_links;
use crate::units::{us_to_ps, Picos};
use std::collections::{HashMap, VecDeque};

/// A plan's messages and what each waits for, worked out once so it can be timed at many
/// sizes.
#[derive(Clone, Debug)]
pub struct PlanTimer {
    /// Per message: source and destination, chunks, the global threadblock sending.
    src: Vec<End>,
    dst: Vec<End>,
    /// The ranks of each NVLS group the plan reduces or multicasts in (`End::Switch`).
    groups: Vec<Vec<usize>>,
    /// Chunks each moves (a share of a range where an in-switch operation is split).
    chunks: Vec<f64>,
    tb: Vec<usize>,
    deps: Vec<Vec<u32>>,
    /// The chunk size divides the message size by this (input chunks; output for
    /// All-Gather, whose size is its output).
    size_divisor: usize,
    packets: bool,
}

/// Pieces an in-switch operation's range is timed in.
const SWITCH_PIECES: usize = 32;

/// Where a message starts or ends: a rank's GPU, or the switch of an NVLS group (a GPU's
/// leg of an in-switch reduction or multicast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Rank(usize),
    Switch(usize),
}

/// One threadblock as its control flow runs.
struct Block<'a> {
    rank: usize,
    ops: Vec<&'a Operation>,
    pc: usize,
    /// The latest messages this point depends on.
    frontier: Vec<u32>,
    /// Signals consumed so far per (channel type, TB-local index).
    waited: HashMap<(ChannelType, usize), usize>,
}

impl PlanTimer {
    /// Runs `plan`'s control flow; an error where it cannot finish (a plan the verifier
    /// refuses).
    ///
    /// ```
    /// use tacos::collective::CollectiveKind;
    /// use tacos::mscclpp::{lower, PlanOptions, PlanTimer};
    /// use tacos::pipeline::{synthesize, Request};
    /// use tacos::synth::SynthOptions;
    /// use tacos::topology::{parse_spec, SpecDefaults};
    /// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    /// let request = Request::new(CollectiveKind::AllGather, 1 << 20);
    /// let checked = synthesize(&ring, &request, 1, &SynthOptions::seeded(0)).unwrap();
    /// let plan = lower(checked.schedule(), &ring, &PlanOptions::default()).unwrap();
    /// let timer = PlanTimer::new(&plan).unwrap();
    /// // A ring's All-Gather: every GPU sends three chunks.
    /// assert_eq!(timer.messages(), checked.schedule().transfers.len());
    /// ```
    pub fn new(plan: &Plan) -> Result<PlanTimer> {
        admit(plan)?;
        let mut blocks: Vec<Block> = Vec::new();
        for gpu in &plan.gpus {
            for tb in &gpu.threadblocks {
                let mut ops = Vec::new();
                flatten(&tb.ops, &mut ops);
                blocks.push(Block {
                    rank: gpu.id,
                    ops,
                    pc: 0,
                    frontier: Vec::new(),
                    waited: HashMap::new(),
                });
            }
        }
        let wiring = Wiring::new(plan)?;
        let mut timer = PlanTimer {
            src: Vec::new(),
            dst: Vec::new(),
            groups: Vec::new(),
            chunks: Vec::new(),
            tb: Vec::new(),
            deps: Vec::new(),
            size_divisor: size_divisor(plan),
            packets: plan.protocol == "LL",
        };
        // Signals in flight per channel end (rank, type, GPU-level index): each with the
        // frontier behind it; semaphores likewise per (rank, id).
        let mut signals: HashMap<(usize, ChannelType, usize), Vec<Vec<u32>>> = HashMap::new();
        let mut semaphores: HashMap<(usize, usize), VecDeque<Vec<u32>>> = HashMap::new();
        let mut barriers: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        let mut done = 0;
        while done < blocks.len() {
            let mut moved = false;
            for b in 0..blocks.len() {
                while let Some(op) = blocks[b].ops.get(blocks[b].pc).copied() {
                    let rank = blocks[b].rank;
                    let local = wiring.tb_of(b);
                    match op.name.as_str() {
                        "wait" | "rlxwait" => {
                            let ty = op.channel_type.unwrap_or(ChannelType::Memory);
                            let ids = op.channel_ids.clone().unwrap_or_default();
                            // A channel named twice waits for two signals.
                            let ready = ids.iter().all(|&c| {
                                let end = wiring.end(rank, local, ty, c);
                                let seen = blocks[b].waited.get(&(ty, c)).copied().unwrap_or(0);
                                let named = ids.iter().filter(|&&d| d == c).count();
                                end.is_some_and(|e| {
                                    signals.get(&e).map_or(0, Vec::len) >= seen + named
                                })
                            });
                            if !ready {
                                break;
                            }
                            for &c in &ids {
                                let Some(e) = wiring.end(rank, local, ty, c) else {
                                    continue;
                                };
                                let seen = blocks[b].waited.entry((ty, c)).or_insert(0);
                                let behind = signals
                                    .get(&e)
                                    .and_then(|queue| queue.get(*seen))
                                    .cloned()
                                    .unwrap_or_default();
                                *seen += 1;
                                blocks[b].frontier.extend(behind);
                            }
                        }
                        "sem_acquire" => {
                            let ids = op.semaphore_ids.clone().unwrap_or_default();
                            if !ids
                                .iter()
                                .all(|&s| semaphores.get(&(rank, s)).is_some_and(|q| !q.is_empty()))
                            {
                                break;
                            }
                            for s in ids {
                                if let Some(behind) =
                                    semaphores.get_mut(&(rank, s)).and_then(VecDeque::pop_front)
                                {
                                    blocks[b].frontier.extend(behind);
                                }
                            }
                        }
                        "barrier" => {
                            let key = (rank, op.barrier_id.unwrap_or(0));
                            let arrived = barriers.entry(key).or_default();
                            if !arrived.contains(&b) {
                                arrived.push(b);
                            }
                            if arrived.len() < op.num_threadblocks.unwrap_or(1) {
                                break;
                            }
                            let all = std::mem::take(arrived);
                            let joined: Vec<u32> = all
                                .iter()
                                .flat_map(|&t| blocks[t].frontier.clone())
                                .collect();
                            // The others stopped at the barrier: they pass it now.
                            for &t in &all {
                                blocks[t].frontier = joined.clone();
                                if t != b {
                                    blocks[t].pc += 1;
                                    if blocks[t].pc == blocks[t].ops.len() {
                                        done += 1;
                                    }
                                }
                            }
                        }
                        _ => {
                            timer.data(op, b, rank, local, &wiring, &mut blocks[b].frontier);
                            let behind = blocks[b].frontier.clone();
                            if matches!(op.name.as_str(), "signal" | "rlxsignal" | "pws" | "pwsf") {
                                let ty = op.channel_type.unwrap_or(ChannelType::Memory);
                                for &c in op.channel_ids.as_deref().unwrap_or_default() {
                                    if let Some(e) = wiring.peer_end(rank, local, ty, c) {
                                        signals.entry(e).or_default().push(behind.clone());
                                    }
                                }
                            }
                            if op.name == "sem_release" {
                                for &s in op.semaphore_ids.as_deref().unwrap_or_default() {
                                    semaphores
                                        .entry((rank, s))
                                        .or_default()
                                        .push_back(behind.clone());
                                }
                            }
                        }
                    }
                    let block = &mut blocks[b];
                    block.frontier.sort_unstable();
                    block.frontier.dedup();
                    block.pc += 1;
                    moved = true;
                    if block.pc == block.ops.len() {
                        done += 1;
                    }
                }
            }
            if !moved && done < blocks.len() {
                let (b, block) = blocks
                    .iter()
                    .enumerate()
                    .find(|(_, t)| t.pc < t.ops.len())
                    .expect("a block is unfinished");
                return Err(Error::plan(format!(
                    "the plan does not run to its end: rank {}, threadblock {}, op {} ({}) waits forever; `tacos verify` says why",
                    block.rank,
                    wiring.tb_of(b),
                    block.pc,
                    block.ops[block.pc].name
                )));
            }
        }
        Ok(timer)
    }

    /// Messages the plan sends in one launch.
    pub fn messages(&self) -> usize {
        self.src.len()
    }

    /// Records the messages `op` sends or fetches (none for a local or control op).
    fn data(
        &mut self,
        op: &Operation,
        block: usize,
        rank: usize,
        local: usize,
        wiring: &Wiring,
        frontier: &mut Vec<u32>,
    ) {
        if op.channel_type == Some(ChannelType::Switch) {
            return self.in_switch(op, block, rank, local, wiring, frontier);
        }
        let remote = |b: &Buff| {
            b.buffer_id
                .and_then(|id| wiring.remote_rank(rank, local, op.channel_type, id))
                .map(|peer| (peer, b.size))
        };
        let sources: Vec<(usize, usize)> =
            op.src_buff.iter().flatten().filter_map(remote).collect();
        let targets: Vec<(usize, usize)> =
            op.dst_buff.iter().flatten().filter_map(remote).collect();
        let moves = sources
            .iter()
            .map(|&(peer, n)| (End::Rank(peer), End::Rank(rank), n))
            .chain(
                targets
                    .iter()
                    .map(|&(peer, n)| (End::Rank(rank), End::Rank(peer), n)),
            );
        let deps = frontier.clone();
        let sent: Vec<u32> = moves
            .map(|(src, dst, chunks)| self.push(src, dst, chunks as f64, block, deps.clone()))
            .collect();
        if !sent.is_empty() {
            *frontier = sent;
        }
    }

    fn push(&mut self, src: End, dst: End, chunks: f64, block: usize, deps: Vec<u32>) -> u32 {
        let m = self.src.len() as u32;
        self.src.push(src);
        self.dst.push(dst);
        self.chunks.push(chunks);
        self.tb.push(block);
        self.deps.push(deps);
        m
    }

    /// The legs of an in-switch operation: `glres` has every member send its range up to
    /// the switch, the sum come down to this GPU and go back up, and the switch store it to
    /// every member; `gstore` has this GPU's range go up and come down to every member. The
    /// switch works through a range a piece at a time, its legs overlapping: each of
    /// [`SWITCH_PIECES`] pieces takes every leg, a piece's first leg after the last piece's.
    fn in_switch(
        &mut self,
        op: &Operation,
        block: usize,
        rank: usize,
        local: usize,
        wiring: &Wiring,
        frontier: &mut Vec<u32>,
    ) {
        let Some((members, chunks)) = op.dst_buff.iter().flatten().find_map(|b| {
            let id = b.switch_channel_id?;
            Some((wiring.switch_group(rank, local, id)?, b.size))
        }) else {
            return;
        };
        if members.is_empty() {
            return;
        }
        let group = match self.groups.iter().position(|g| *g == members) {
            Some(g) => g,
            None => {
                self.groups.push(members.clone());
                self.groups.len() - 1
            }
        };
        let (switch, me) = (End::Switch(group), End::Rank(rank));
        let piece = chunks as f64 / SWITCH_PIECES as f64;
        let mut after = frontier.clone();
        let mut last = Vec::new();
        for _ in 0..SWITCH_PIECES {
            let (up, next) = match op.name.as_str() {
                "glres" => {
                    let reads: Vec<u32> = members
                        .iter()
                        .map(|&j| self.push(End::Rank(j), switch, piece, block, after.clone()))
                        .collect();
                    let sum = self.push(switch, me, piece, block, reads.clone());
                    (self.push(me, switch, piece, block, vec![sum]), reads)
                }
                "gstore" | "gstorepkt" => {
                    let up = self.push(me, switch, piece, block, after.clone());
                    (up, vec![up])
                }
                _ => return,
            };
            after = next;
            last = members
                .iter()
                .map(|&j| self.push(switch, End::Rank(j), piece, block, vec![up]))
                .collect();
        }
        *frontier = last;
    }

    /// The vertex of each message end: rank r on `npus[r]`, an NVLS group on the switch
    /// that joins its members' NPUs.
    fn vertices(&self, topo: &Topology, npus: &[NpuId]) -> Result<(Vec<NpuId>, Vec<NpuId>)> {
        let switches = self
            .groups
            .iter()
            .map(|members| {
                let first = npus[members[0]];
                topo.out_links(first)
                    .map(|l| topo.link(l).dst)
                    .find(|&w| {
                        topo.is_switch(w)
                            && members
                                .iter()
                                .all(|&j| topo.link_between(npus[j], w).is_some())
                    })
                    .ok_or_else(|| {
                        Error::plan(format!(
                            "the plan reduces inside a switch over ranks {members:?}, but no switch of {} joins their NPUs",
                            topo.name()
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let at = |e: &End| match *e {
            End::Rank(r) => npus[r],
            End::Switch(g) => switches[g],
        };
        Ok((
            self.src.iter().map(at).collect(),
            self.dst.iter().map(at).collect(),
        ))
    }

    /// The plan's messages for a collective of `size_bytes`, from and to `ends`.
    fn sim_messages(
        &self,
        ends: &(Vec<NpuId>, Vec<NpuId>),
        size_bytes: u64,
        line_bytes: u64,
    ) -> Vec<Message> {
        let chunk = size_bytes as f64 / self.size_divisor.max(1) as f64;
        let line = line_bytes.max(1) as f64;
        let factor = if self.packets { 2.0 } else { 1.0 };
        (0..self.src.len())
            .map(|m| Message {
                src: ends.0[m],
                dst: ends.1[m],
                bytes: ((self.chunks[m] * chunk * factor) / line).ceil() * line,
                deps: self.deps[m].iter().map(|&d| d as usize).collect(),
            })
            .collect()
    }

    /// Threadblocks sending over each link of `topo`, messages between `ends`.
    fn senders(&self, topo: &Topology, ends: &(Vec<NpuId>, Vec<NpuId>)) -> Vec<u32> {
        let mut seen: Vec<Vec<usize>> = vec![Vec::new(); topo.links().len()];
        let mut routes = crate::msccl::timing::Routes::new(topo);
        for m in 0..self.src.len() {
            for &l in routes.between(ends.0[m], ends.1[m]) {
                if !seen[l].contains(&self.tb[m]) {
                    seen[l].push(self.tb[m]);
                }
            }
        }
        seen.iter().map(|t| t.len() as u32).collect()
    }

    fn protocol(&self) -> Protocol {
        if self.packets {
            Protocol::Ll
        } else {
            Protocol::Simple
        }
    }

    /// The message ends on `topo`'s alive NPUs, once the plan's ranks fit on them.
    fn ends(&self, topo: &Topology) -> Result<(Vec<NpuId>, Vec<NpuId>)> {
        let npus = topo.alive_npus();
        let ranks = self
            .src
            .iter()
            .chain(&self.dst)
            .filter_map(|e| match e {
                End::Rank(r) => Some(r + 1),
                End::Switch(_) => None,
            })
            .chain(self.groups.iter().flatten().map(|r| r + 1))
            .max()
            .unwrap_or(0);
        if npus.len() < ranks {
            return Err(Error::plan(format!(
                "the plan has {ranks} ranks but topology {} has {} NPUs",
                topo.name(),
                npus.len()
            )));
        }
        self.vertices(topo, &npus)
    }

    /// The plan's run under `executor`'s cost model on `topo` (rank r on its r-th alive
    /// NPU) for a collective of `size_bytes`: the launch, then the messages. Where it
    /// reduces inside a switch, the links to that switch move its legs no faster than the
    /// model's NVLS rate allows (a GPU's link carries (P+1)/P of what the collective moves
    /// through the switch, as NCCL's NVLS is priced), and the switch's round trip is paid
    /// once.
    pub fn simulate(
        &self,
        executor: &Executor,
        topo: &Topology,
        size_bytes: u64,
    ) -> Result<SimResult> {
        let ends = self.ends(topo)?;
        let protocol = self.protocol();
        let mut priced = executor.priced(topo, protocol, &self.senders(topo, &ends))?;
        let mut extra_us = 0.0;
        if !self.groups.is_empty() {
            let nvls = executor.model.nvls().ok_or_else(|| {
                Error::plan(format!(
                    "the plan reduces inside the NVSwitch, which {} GPUs' switches do not (the cost model has no NVLS figures for them)",
                    executor.gpu
                ))
            })?;
            let switches: Vec<NpuId> = (0..self.src.len())
                .flat_map(|m| [(self.src[m], ends.0[m]), (self.dst[m], ends.1[m])])
                .filter(|(e, _)| matches!(e, End::Switch(_)))
                .map(|(_, v)| v)
                .collect();
            let members = self.groups.iter().map(Vec::len).max().unwrap_or(1) as f64;
            let cap = nvls.gbps * (members + 1.0) / members;
            let links = priced
                .links()
                .iter()
                .map(|l| {
                    let mut l = l.clone();
                    if switches.contains(&l.src) || switches.contains(&l.dst) {
                        l.bandwidth_gbps = l.bandwidth_gbps.min(cap);
                    }
                    l
                })
                .collect();
            priced = priced.relinked(links)?;
            extra_us = nvls.step_us;
        }
        let line = line_data_bytes(protocol);
        let messages = issue_order(&priced, self.sim_messages(&ends, size_bytes, line));
        let mut run = simulate_messages(&priced, &messages)?;
        run.time_ps += us_to_ps(executor.model.launch_us + extra_us);
        Ok(run)
    }

    /// Instances of the plan (a power of two, at most 8) that would let the threadblocks on
    /// its busiest link move data as fast as the link under `executor`'s model: 1 where
    /// they already can.
    pub fn instances_to_fill(&self, executor: &Executor, topo: &Topology) -> usize {
        let Ok(ends) = self.ends(topo) else {
            return 1;
        };
        let model = &executor.model;
        let channel = model.protocol(self.protocol()).channel_gbps;
        let network = network_links(topo, executor.domain_size);
        let needed = topo
            .links()
            .iter()
            .zip(&network)
            .zip(self.senders(topo, &ends))
            .filter(|(_, tbs)| *tbs > 0)
            .map(|((l, &across), tbs)| {
                let efficiency = if across {
                    model.efficiency.net
                } else {
                    model.efficiency.nvlink
                };
                (l.bandwidth_gbps * efficiency / (tbs as f64 * channel)).ceil()
            })
            .fold(1.0, f64::max);
        (needed as usize)
            .clamp(1, MAX_INSTANCES)
            .next_power_of_two()
    }

    /// The time of one launch, as [`PlanTimer::simulate`] finds it.
    pub fn time_ps(&self, executor: &Executor, topo: &Topology, size_bytes: u64) -> Result<Picos> {
        Ok(self.simulate(executor, topo, size_bytes)?.time_ps)
    }
}

/// Refuses a plan whose messages would not fit the memory limit: each remote range an
/// operation names is a message, an in-switch one [`SWITCH_PIECES`] times every member's
/// legs, and a message may wait for as many as a group has members.
fn admit(plan: &Plan) -> Result<()> {
    let members = plan
        .gpus
        .iter()
        .flat_map(|g| &g.channels)
        .flat_map(|c| c.rank_groups.iter().flatten())
        .map(|g| g.ranks.len() as u64)
        .max()
        .unwrap_or(0);
    let mut ops = Vec::new();
    for tb in plan.gpus.iter().flat_map(|g| &g.threadblocks) {
        flatten(&tb.ops, &mut ops);
    }
    let messages: u64 = ops
        .iter()
        .map(|op| {
            let ranges = op.src_buff.iter().chain(&op.dst_buff).flatten().count() as u64;
            if op.channel_type == Some(ChannelType::Switch) {
                SWITCH_PIECES as u64 * (2 * members + 2)
            } else {
                ranges
            }
        })
        .sum();
    // Per message: its ends, chunks, threadblock and dependency list, and the simulator's.
    let estimate = messages.saturating_mul(128 + 4 * members.max(1));
    crate::budget::MemoryLimit::default().admit(estimate, || {
        format!("timing plan '{}' ({messages} messages)", plan.name)
    })
}

/// `messages` renumbered in the order a run issues them: each link, whenever it is free,
/// carries the waiting message that became ready first (its data there), as the executor's
/// threadblocks, each with its own channels, do. The simulator keeps one queue per link in
/// message order, so the order the plan's control flow met them in (threadblock by
/// threadblock) would hold a link for a message not yet ready while others wait. The order
/// is found by a list-scheduling pass over the links' alpha-beta times.
fn issue_order(topo: &Topology, messages: Vec<Message>) -> Vec<Message> {
    let n = messages.len();
    let mut routes = crate::msccl::timing::Routes::new(topo);
    let route: Vec<Vec<usize>> = messages
        .iter()
        .map(|m| routes.between(m.src, m.dst).to_vec())
        .collect();
    let mut waiting: Vec<usize> = messages.iter().map(|m| m.deps.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (m, msg) in messages.iter().enumerate() {
        for &d in &msg.deps {
            dependents[d].push(m);
        }
    }
    let mut ready_at: Vec<Picos> = vec![0; n];
    let mut start: Vec<Picos> = vec![0; n];
    let mut free: Vec<Picos> = vec![0; topo.links().len()];
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(Picos, usize)>> = (0..n)
        .filter(|&m| waiting[m] == 0)
        .map(|m| std::cmp::Reverse((0, m)))
        .collect();
    while let Some(std::cmp::Reverse((ready, m))) = heap.pop() {
        let links = &route[m];
        let at = links.iter().map(|&l| free[l]).fold(ready, Picos::max);
        let took = links
            .iter()
            .map(|&l| topo.link(l).transfer_ps(messages[m].bytes))
            .max()
            .unwrap_or(0);
        for &l in links {
            free[l] = at + took;
        }
        start[m] = at;
        for &d in &dependents[m] {
            ready_at[d] = ready_at[d].max(at + took);
            waiting[d] -= 1;
            if waiting[d] == 0 {
                heap.push(std::cmp::Reverse((ready_at[d], d)));
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&m| (start[m], m));
    let mut renumbered = vec![0; n];
    for (i, &m) in order.iter().enumerate() {
        renumbered[m] = i;
    }
    let mut messages: Vec<Option<Message>> = messages.into_iter().map(Some).collect();
    order
        .iter()
        .map(|&m| {
            let mut msg = messages[m]
                .take()
                .unwrap_or_else(|| unreachable!("each taken once"));
            for d in &mut msg.deps {
                *d = renumbered[*d];
            }
            msg
        })
        .collect()
}

/// A threadblock's operations with pipeline bodies in line, as the executor runs them.
fn flatten<'a>(ops: &'a [Operation], out: &mut Vec<&'a Operation>) {
    for op in ops {
        match &op.ops {
            Some(body) if op.name == "pipeline" => flatten(body, out),
            _ => out.push(op),
        }
    }
}

/// Chunks the collective's size is divided into: a chunk is size / this.
fn size_divisor(plan: &Plan) -> usize {
    let gpu = plan.gpus.first();
    match (plan.collective.as_str(), gpu) {
        ("allgather", Some(g)) => g.output_chunks,
        (_, Some(g)) => g.input_chunks,
        (_, None) => 1,
    }
}

/// Who is at the other end of each threadblock's channels and remote buffers.
struct Wiring {
    /// Per global threadblock: its (rank, TB index).
    tbs: Vec<(usize, usize)>,
    /// Per rank and type: the GPU-level channel list (peers in order).
    peers: HashMap<(usize, ChannelType), Vec<usize>>,
    /// Per rank, TB and type: the TB-local channel list (GPU-level indices).
    tb_channels: HashMap<(usize, usize, ChannelType), Vec<usize>>,
    /// Per rank, TB and access type: the TB-local remote buffer list (owners).
    tb_remote: HashMap<(usize, usize, ChannelType), Vec<usize>>,
    /// Per rank: its switch channels' rank groups, in the GPU's order.
    switch_groups: HashMap<usize, Vec<Vec<usize>>>,
}

impl Wiring {
    fn new(plan: &Plan) -> Result<Wiring> {
        let mut w = Wiring {
            tbs: Vec::new(),
            peers: HashMap::new(),
            tb_channels: HashMap::new(),
            tb_remote: HashMap::new(),
            switch_groups: HashMap::new(),
        };
        for gpu in &plan.gpus {
            for ch in &gpu.channels {
                for group in ch.rank_groups.iter().flatten() {
                    w.switch_groups
                        .entry(gpu.id)
                        .or_default()
                        .push(group.ranks.clone());
                }
                if let Some(list) = &ch.connected_to {
                    w.peers
                        .entry((gpu.id, ch.channel_type))
                        .or_default()
                        .extend(list);
                }
            }
            for tb in &gpu.threadblocks {
                w.tbs.push((gpu.id, tb.id));
                for c in &tb.channels {
                    w.tb_channels
                        .entry((gpu.id, tb.id, c.channel_type))
                        .or_default()
                        .extend(&c.channel_ids);
                }
                for r in &tb.remote_buffer_refs {
                    let owners = r
                        .remote_buffer_ids
                        .iter()
                        .map(|&i| gpu.remote_buffers.get(i).map(|b| b.rank))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                            Error::plan(format!(
                                "rank {}, threadblock {}: a remote buffer id past the GPU's list",
                                gpu.id, tb.id
                            ))
                        })?;
                    w.tb_remote
                        .entry((gpu.id, tb.id, r.access_channel_type))
                        .or_default()
                        .extend(owners);
                }
            }
        }
        Ok(w)
    }

    fn tb_of(&self, global: usize) -> usize {
        self.tbs[global].1
    }

    /// The GPU-level channel a TB's local channel `c` of type `ty` is.
    fn channel(&self, rank: usize, tb: usize, ty: ChannelType, c: usize) -> Option<usize> {
        self.tb_channels.get(&(rank, tb, ty))?.get(c).copied()
    }

    /// This side's end of a TB's channel: where its peer's signals arrive.
    fn end(
        &self,
        rank: usize,
        tb: usize,
        ty: ChannelType,
        c: usize,
    ) -> Option<(usize, ChannelType, usize)> {
        Some((rank, ty, self.channel(rank, tb, ty, c)?))
    }

    /// The peer's end of a TB's channel: the k-th channel to a peer pairs with the peer's
    /// k-th channel back.
    fn peer_end(
        &self,
        rank: usize,
        tb: usize,
        ty: ChannelType,
        c: usize,
    ) -> Option<(usize, ChannelType, usize)> {
        let g = self.channel(rank, tb, ty, c)?;
        let mine = self.peers.get(&(rank, ty))?;
        let peer = *mine.get(g)?;
        let k = mine[..g].iter().filter(|&&p| p == peer).count();
        let theirs = self.peers.get(&(peer, ty))?;
        let back = theirs
            .iter()
            .enumerate()
            .filter(|(_, &p)| p == rank)
            .nth(k)?
            .0;
        Some((peer, ty, back))
    }

    /// The ranks of the NVLS group behind a TB's switch channel `id`.
    fn switch_group(&self, rank: usize, tb: usize, id: usize) -> Option<Vec<usize>> {
        let g = self.channel(rank, tb, ChannelType::Switch, id)?;
        self.switch_groups.get(&rank)?.get(g).cloned()
    }

    /// The owner of a TB's remote buffer `id` reached through `ty`.
    fn remote_rank(
        &self,
        rank: usize,
        tb: usize,
        ty: Option<ChannelType>,
        id: usize,
    ) -> Option<usize> {
        let ty = ty.unwrap_or(ChannelType::Memory);
        self.tb_remote.get(&(rank, tb, ty))?.get(id).copied()
    }
}
