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
use crate::sim::{simulate_messages, Message, SimResult};
use crate::topology::{NpuId, Topology};
use crate::tuner::profile::network_links;
use crate::tuner::Protocol;
use crate::units::{us_to_ps, Picos};
use std::collections::{HashMap, VecDeque};

/// A plan's messages and what each waits for, worked out once so it can be timed at many
/// sizes.
#[derive(Clone, Debug)]
pub struct PlanTimer {
    /// Per message: source and destination rank, chunks, the global threadblock sending.
    src: Vec<usize>,
    dst: Vec<usize>,
    chunks: Vec<usize>,
    tb: Vec<usize>,
    deps: Vec<Vec<u32>>,
    /// The chunk size divides the message size by this (input chunks; output for
    /// All-Gather, whose size is its output).
    size_divisor: usize,
    packets: bool,
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
                            let ready = ids.iter().all(|&c| {
                                let end = wiring.end(rank, local, ty, c);
                                let seen = blocks[b].waited.get(&(ty, c)).copied().unwrap_or(0);
                                end.is_some_and(|e| signals.get(&e).map_or(0, Vec::len) > seen)
                            });
                            if !ready {
                                break;
                            }
                            for &c in &ids {
                                let Some(e) = wiring.end(rank, local, ty, c) else {
                                    continue;
                                };
                                let seen = blocks[b].waited.entry((ty, c)).or_insert(0);
                                let behind = signals[&e][*seen].clone();
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
                return Err(Error::Plan(format!(
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
            .map(|&(peer, n)| (peer, rank, n))
            .chain(targets.iter().map(|&(peer, n)| (rank, peer, n)));
        let mut sent = Vec::new();
        for (src, dst, chunks) in moves {
            let m = self.src.len() as u32;
            self.src.push(src);
            self.dst.push(dst);
            self.chunks.push(chunks);
            self.tb.push(block);
            self.deps.push(frontier.clone());
            sent.push(m);
        }
        if !sent.is_empty() {
            *frontier = sent;
        }
    }

    /// The plan's messages for a collective of `size_bytes`, rank r on `npus[r]`.
    fn sim_messages(&self, npus: &[NpuId], size_bytes: u64, line_bytes: u64) -> Vec<Message> {
        let chunk = size_bytes as f64 / self.size_divisor.max(1) as f64;
        let line = line_bytes.max(1) as f64;
        let factor = if self.packets { 2.0 } else { 1.0 };
        (0..self.src.len())
            .map(|m| Message {
                src: npus[self.src[m]],
                dst: npus[self.dst[m]],
                bytes: ((self.chunks[m] as f64 * chunk * factor) / line).ceil() * line,
                deps: self.deps[m].iter().map(|&d| d as usize).collect(),
            })
            .collect()
    }

    /// Threadblocks sending over each link of `topo` (rank r on `npus[r]`).
    fn senders(&self, topo: &Topology, npus: &[NpuId]) -> Vec<u32> {
        let mut seen: Vec<Vec<usize>> = vec![Vec::new(); topo.links().len()];
        let mut routes = crate::msccl::timing::Routes::new(topo);
        for m in 0..self.src.len() {
            for &l in routes.between(npus[self.src[m]], npus[self.dst[m]]) {
                if !seen[l].contains(&self.tb[m]) {
                    seen[l].push(self.tb[m]);
                }
            }
        }
        seen.iter().map(|t| t.len() as u32).collect()
    }

    /// The plan's run under `executor`'s cost model on `topo` (rank r on its r-th alive
    /// NPU) for a collective of `size_bytes`: the launch, then the messages.
    pub fn simulate(
        &self,
        executor: &Executor,
        topo: &Topology,
        size_bytes: u64,
    ) -> Result<SimResult> {
        let npus = topo.alive_npus();
        let ranks = 1 + self.src.iter().chain(&self.dst).copied().max().unwrap_or(0);
        if npus.len() < ranks {
            return Err(Error::Plan(format!(
                "the plan has {ranks} ranks but topology {} has {} NPUs",
                topo.name(),
                npus.len()
            )));
        }
        let protocol = if self.packets {
            Protocol::Ll
        } else {
            Protocol::Simple
        };
        let priced = executor.priced(topo, protocol, &self.senders(topo, &npus))?;
        let line = line_data_bytes(protocol);
        let mut run = simulate_messages(&priced, &self.sim_messages(&npus, size_bytes, line))?;
        run.time_ps += us_to_ps(executor.model.launch_us);
        Ok(run)
    }

    /// Instances of the plan (a power of two, at most 8) that would let the threadblocks on
    /// its busiest link move data as fast as the link under `executor`'s model: 1 where
    /// they already can.
    pub fn instances_to_fill(&self, executor: &Executor, topo: &Topology) -> usize {
        let npus = topo.alive_npus();
        if self.src.iter().chain(&self.dst).any(|&r| r >= npus.len()) {
            return 1;
        }
        let protocol = if self.packets {
            Protocol::Ll
        } else {
            Protocol::Simple
        };
        let model = &executor.model;
        let channel = model.protocol(protocol).channel_gbps;
        let network = network_links(topo, executor.domain_size);
        let needed = topo
            .links()
            .iter()
            .zip(&network)
            .zip(self.senders(topo, &npus))
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
}

impl Wiring {
    fn new(plan: &Plan) -> Result<Wiring> {
        let mut w = Wiring {
            tbs: Vec::new(),
            peers: HashMap::new(),
            tb_channels: HashMap::new(),
            tb_remote: HashMap::new(),
        };
        for gpu in &plan.gpus {
            for ch in &gpu.channels {
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
                            Error::Plan(format!(
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
