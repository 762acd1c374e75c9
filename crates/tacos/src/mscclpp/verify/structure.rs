//! The plan's shape, checked before anything runs: ids in order, chunk counts, every
//! reference (channel, remote buffer, switch channel, semaphore, barrier) inside what it
//! indexes, operation names the executor knows, its limits, and channels paired
//! symmetrically. Builds the tables the execution looks references up in.

use super::site::{program, Site};
use crate::error::{Error, Result};
use crate::mscclpp::plan::{
    Buff, BufferType, ChannelType, Gpu, Operation, Plan, Threadblock, MAX_BARRIERS,
    MAX_BUFFS_PER_OP, MAX_CHANNELS_PER_OP, MAX_CHANNELS_PER_THREADBLOCK, MAX_OPS_PER_THREADBLOCK,
    MAX_REMOTE_BUFFERS_PER_THREADBLOCK, MAX_SEMAPHORES_PER_OP, MAX_THREADS_PER_BLOCK,
};
use std::collections::HashMap;

/// Operation names the executor's parser knows.
pub(super) const OPERATIONS: [&str; 30] = [
    "nop",
    "barrier",
    "put",
    "pws",
    "pwsf",
    "get",
    "copy",
    "signal",
    "wait",
    "flush",
    "re",
    "res",
    "rre",
    "rres",
    "ppkt",
    "rppkt",
    "respkt",
    "cpkt",
    "upkt",
    "repkt",
    "recpkt",
    "recspkt",
    "glres",
    "gstore",
    "gstorepkt",
    "rlxsignal",
    "rlxwait",
    "pipeline",
    "sem_acquire",
    "sem_release",
];

/// Memory and port channels: the two kinds that pair with a peer.
pub(super) const PEER_TYPES: [ChannelType; 2] = [ChannelType::Memory, ChannelType::Port];

/// Index of a peer channel type in per-type tables.
pub(super) fn kind(t: ChannelType) -> Option<usize> {
    PEER_TYPES.iter().position(|&p| p == t)
}

/// One NVLS channel: a rank group over one buffer type.
#[derive(Clone, Debug)]
pub(super) struct SwitchGroup {
    pub buffer: BufferType,
    pub chunks: usize,
    pub ranks: Vec<usize>,
}

/// A GPU-level channel end of a peer type: rank `rank`'s channel `index` of its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct End {
    pub rank: usize,
    pub kind: usize,
    pub index: usize,
}

/// The lookups the execution needs, built from a plan whose references all resolve.
pub(super) struct Tables {
    /// Per rank and peer type: the peer of each GPU-level channel.
    pub peers: Vec<[Vec<usize>; 2]>,
    /// Per rank and peer type: the paired end (on the peer) of each channel.
    pub pairs: Vec<[Vec<usize>; 2]>,
    /// Per rank: its NVLS channels in order.
    pub switches: Vec<Vec<SwitchGroup>>,
}

impl Tables {
    /// The channel end paired with `end`.
    pub fn peer_end(&self, end: End) -> End {
        let rank = self.peers[end.rank][end.kind][end.index];
        End {
            rank,
            kind: end.kind,
            index: self.pairs[end.rank][end.kind][end.index],
        }
    }
}

/// A threadblock's local lists: channel ids per type and remote buffers per access type.
pub(super) struct TbLists {
    /// Per peer type, then switch: the GPU-level channel each local id names.
    pub channels: [Vec<usize>; 3],
    /// Per peer type: the GPU-level remote buffer each local `buffer_id` names.
    pub remote: [Vec<usize>; 2],
}

impl TbLists {
    pub fn new(tb: &Threadblock) -> TbLists {
        let mut channels: [Vec<usize>; 3] = Default::default();
        for c in &tb.channels {
            let slot = match c.channel_type {
                ChannelType::Switch => Some(2),
                t => kind(t),
            };
            if let Some(s) = slot {
                channels[s].extend(&c.channel_ids);
            }
        }
        let mut remote: [Vec<usize>; 2] = Default::default();
        for r in &tb.remote_buffer_refs {
            if let Some(k) = kind(r.access_channel_type) {
                remote[k].extend(&r.remote_buffer_ids);
            }
        }
        TbLists { channels, remote }
    }
}

fn fail(message: String) -> Error {
    Error::plan(message)
}

/// Checks the plan's shape and builds its tables.
pub(super) fn check(plan: &Plan) -> Result<Tables> {
    if plan.gpus.is_empty() {
        return Err(fail("the plan has no GPU".into()));
    }
    if plan.num_threads_per_block > MAX_THREADS_PER_BLOCK || plan.num_threads_per_block == 0 {
        return Err(fail(format!(
            "num_threads_per_block is {}: the kernel is built for 1 to {MAX_THREADS_PER_BLOCK} threads",
            plan.num_threads_per_block
        )));
    }
    if plan.buffer_alignment == 0 {
        return Err(fail("buffer_alignment is 0: it must be at least 1".into()));
    }
    let nranks = plan.gpus.len();
    let mut peers = Vec::with_capacity(nranks);
    let mut switches = Vec::with_capacity(nranks);
    for (i, gpu) in plan.gpus.iter().enumerate() {
        gpu_counts(gpu, i)?;
        let (p, s) = gpu_channels(gpu, nranks)?;
        peers.push(p);
        switches.push(s);
    }
    let pairs = pair_channels(&peers)?;
    pair_switches(&switches)?;
    let tables = Tables {
        peers,
        pairs,
        switches,
    };
    for (rank, gpu) in plan.gpus.iter().enumerate() {
        for rb in &gpu.remote_buffers {
            if rb.rank >= nranks {
                return Err(fail(format!(
                    "rank {rank}: a remote buffer of rank {}, but the plan has {nranks} GPUs",
                    rb.rank
                )));
            }
        }
        for (k, tb) in gpu.threadblocks.iter().enumerate() {
            threadblock(plan, &tables, rank, k, tb)?;
        }
    }
    Ok(tables)
}

fn gpu_counts(gpu: &Gpu, i: usize) -> Result<()> {
    if gpu.id != i {
        return Err(fail(format!(
            "gpus[{i}] has id {}: entry i must have id i",
            gpu.id
        )));
    }
    for (field, n) in [
        ("input_chunks", gpu.input_chunks),
        ("output_chunks", gpu.output_chunks),
    ] {
        if n == 0 {
            return Err(fail(format!(
                "rank {i}: {field} is 0: the executor divides by it (a crash); it must be at least 1"
            )));
        }
    }
    for (k, tb) in gpu.threadblocks.iter().enumerate() {
        if tb.id != k {
            return Err(fail(format!(
                "rank {i}: threadblocks[{k}] has id {}: entry k must have id k",
                tb.id
            )));
        }
    }
    Ok(())
}

/// Per peer type, the peer of each GPU-level channel; and the NVLS channels.
#[allow(clippy::type_complexity)]
fn gpu_channels(gpu: &Gpu, nranks: usize) -> Result<([Vec<usize>; 2], Vec<SwitchGroup>)> {
    let rank = gpu.id;
    let mut peers: [Vec<usize>; 2] = Default::default();
    let mut switches = Vec::new();
    for c in &gpu.channels {
        match (c.channel_type, kind(c.channel_type)) {
            (_, Some(k)) => {
                let list = c.connected_to.as_deref().ok_or_else(|| {
                    fail(format!(
                        "rank {rank}: a {} channel entry without connected_to",
                        c.channel_type
                    ))
                })?;
                for &p in list {
                    if p >= nranks || p == rank {
                        return Err(fail(format!(
                            "rank {rank}: a {} channel to rank {p}: peers are the other ranks of the {nranks}",
                            c.channel_type
                        )));
                    }
                }
                peers[k].extend(list);
            }
            (ChannelType::Switch, None) => {
                let buffer = c.buffer_type.ok_or_else(|| {
                    fail(format!(
                        "rank {rank}: a switch channel entry without buffer_type"
                    ))
                })?;
                for g in c.rank_groups.as_deref().unwrap_or_default() {
                    if let Some(&r) = g.ranks.iter().find(|&&r| r >= nranks) {
                        return Err(fail(format!(
                            "rank {rank}: a switch channel's rank group names rank {r}, but the plan has {nranks} GPUs"
                        )));
                    }
                    if !g.ranks.contains(&rank) {
                        return Err(fail(format!(
                            "rank {rank}: a switch channel's rank group {:?} does not hold the rank itself",
                            g.ranks
                        )));
                    }
                    switches.push(SwitchGroup {
                        buffer,
                        chunks: g.size,
                        ranks: g.ranks.clone(),
                    });
                }
            }
            (t, None) => {
                return Err(fail(format!(
                    "rank {rank}: a channel entry of type {t}: memory, port or switch"
                )))
            }
        }
    }
    Ok((peers, switches))
}

/// Checks that the members of every NVLS group set it up together: the executor joins
/// each switch channel collectively over its ranks, in the order each rank lists them, so
/// any two ranks must list the groups holding both of them alike (ranks and buffer) and in
/// the same order.
fn pair_switches(switches: &[Vec<SwitchGroup>]) -> Result<()> {
    let shared = |a: usize, b: usize| -> Vec<(&[usize], BufferType)> {
        switches[a]
            .iter()
            .filter(|g| g.ranks.contains(&b))
            .map(|g| (&g.ranks[..], g.buffer))
            .collect()
    };
    for (a, groups) in switches.iter().enumerate() {
        for &b in groups.iter().flat_map(|g| &g.ranks) {
            let (mine, theirs) = (shared(a, b), shared(b, a));
            if b != a && mine != theirs {
                return Err(fail(format!(
                    "switch channels are not set up alike: rank {a} lists {} holding rank {b} ({mine:?}), rank {b} lists {} holding rank {a} ({theirs:?}); the executor joins each group collectively, in each rank's order",
                    mine.len(),
                    theirs.len()
                )));
            }
        }
    }
    Ok(())
}

/// Pairs channels as the executor does: A's k-th channel of a type toward B with B's k-th
/// toward A; the counts must agree both ways.
fn pair_channels(peers: &[[Vec<usize>; 2]]) -> Result<Vec<[Vec<usize>; 2]>> {
    let n = peers.len();
    let mut pairs: Vec<[Vec<usize>; 2]> = peers
        .iter()
        .map(|p| [vec![0; p[0].len()], vec![0; p[1].len()]])
        .collect();
    for (k, t) in PEER_TYPES.iter().enumerate() {
        // Occurrences of each peer on each rank's list, in order.
        let mut occurrences: Vec<HashMap<usize, Vec<usize>>> = vec![HashMap::new(); n];
        for (a, p) in peers.iter().enumerate() {
            for (index, &b) in p[k].iter().enumerate() {
                occurrences[a].entry(b).or_default().push(index);
            }
        }
        for a in 0..n {
            for (&b, mine) in &occurrences[a] {
                let theirs = occurrences[b].get(&a).map_or(&[][..], |v| &v[..]);
                if mine.len() != theirs.len() {
                    return Err(fail(format!(
                        "{t} channels are not paired: rank {a} lists rank {b} {} time(s) in its connected_to, rank {b} lists rank {a} {} time(s); the executor pairs the k-th of each and leaves the rest unpaired",
                        mine.len(),
                        theirs.len()
                    )));
                }
                for (&i, &j) in mine.iter().zip(theirs) {
                    pairs[a][k][i] = j;
                }
            }
        }
    }
    Ok(pairs)
}

fn threadblock(
    plan: &Plan,
    tables: &Tables,
    rank: usize,
    k: usize,
    tb: &Threadblock,
) -> Result<()> {
    let gpu = &plan.gpus[rank];
    let lists = TbLists::new(tb);
    let at = |what: String| Error::Plan {
        rank: Some(rank),
        threadblock: Some(k),
        op: None,
        problem: format!("rank {rank}, threadblock {k}: {what}"),
    };
    for (slot, name) in ["memory", "port", "switch"].iter().enumerate() {
        let list = &lists.channels[slot];
        if list.len() > MAX_CHANNELS_PER_THREADBLOCK {
            return Err(at(format!(
                "{} {name} channels: the executor holds at most {MAX_CHANNELS_PER_THREADBLOCK} per threadblock and type",
                list.len()
            )));
        }
        let available = if slot == 2 {
            tables.switches[rank].len()
        } else {
            tables.peers[rank][slot].len()
        };
        if let Some(&c) = list.iter().find(|&&c| c >= available) {
            return Err(at(format!(
                "{name} channel {c}, but rank {rank} has {available} {name} channel(s)"
            )));
        }
    }
    for (slot, name) in ["memory", "port"].iter().enumerate() {
        let list = &lists.remote[slot];
        if list.len() > MAX_REMOTE_BUFFERS_PER_THREADBLOCK {
            return Err(at(format!(
                "{} remote buffers reached by {name} channels: the executor holds at most {MAX_REMOTE_BUFFERS_PER_THREADBLOCK} per threadblock and access type",
                list.len()
            )));
        }
        for &b in list {
            let rb = gpu.remote_buffers.get(b).ok_or_else(|| {
                at(format!(
                    "remote buffer {b}, but rank {rank} lists {}",
                    gpu.remote_buffers.len()
                ))
            })?;
            if !rb.access_channel_types.contains(&PEER_TYPES[slot]) {
                return Err(at(format!(
                    "remote buffer {b} through {name} channels, but its access_channel_types do not include {name}"
                )));
            }
        }
    }
    let steps = program(tb);
    let count: usize = tb.ops.iter().map(Operation::flat_count).sum();
    if count > MAX_OPS_PER_THREADBLOCK {
        return Err(at(format!(
            "{count} operations (pipeline bodies counted): the executor takes at most {MAX_OPS_PER_THREADBLOCK} per threadblock"
        )));
    }
    for step in steps {
        let site = Site { rank, tb: k, step };
        operation(plan, tables, &lists, site)?;
    }
    Ok(())
}

/// Which fields an operation needs.
struct Needs {
    channels: bool,
    src: bool,
    dst: bool,
    semaphores: bool,
}

fn needs(name: &str) -> Needs {
    let data = !matches!(
        name,
        "nop"
            | "barrier"
            | "signal"
            | "wait"
            | "rlxsignal"
            | "rlxwait"
            | "flush"
            | "sem_acquire"
            | "sem_release"
            | "pipeline"
    );
    Needs {
        channels: matches!(name, "signal" | "wait" | "rlxsignal" | "rlxwait"),
        src: data,
        dst: data,
        semaphores: matches!(name, "sem_acquire" | "sem_release"),
    }
}

fn operation(plan: &Plan, tables: &Tables, lists: &TbLists, site: Site<'_>) -> Result<()> {
    let op = site.step.op;
    let at = |what: String| site.error(what);
    let gpu = &plan.gpus[site.rank];
    if !OPERATIONS.contains(&op.name.as_str()) {
        return Err(at(format!(
            "'{}' is not an operation the executor knows (it throws \"Invalid operation type\")",
            crate::error::echo(&op.name)
        )));
    }
    if op.name == "pipeline" {
        // Reached only for a pipeline inside a pipeline body: `program` flattens one level.
        return Err(at("a pipeline inside a pipeline's body".into()));
    }
    let need = needs(&op.name);
    let channel_ids = op.channel_ids.as_deref().unwrap_or_default();
    if need.channels && channel_ids.is_empty() {
        return Err(at("no channel_ids".into()));
    }
    if channel_ids.len() > MAX_CHANNELS_PER_OP {
        return Err(at(format!(
            "{} channel ids: at most {MAX_CHANNELS_PER_OP} per operation",
            channel_ids.len()
        )));
    }
    if !channel_ids.is_empty() || need.channels {
        let ty = op
            .channel_type
            .ok_or_else(|| at("channel_ids without a channel_type".into()))?;
        let slot = match ty {
            ChannelType::Switch => 2,
            t => kind(t).ok_or_else(|| at(format!("channel_type {t} with channel_ids")))?,
        };
        let list = &lists.channels[slot];
        if let Some(&c) = channel_ids.iter().find(|&&c| c >= list.len()) {
            return Err(at(format!(
                "channel id {c}, but the threadblock lists {} {ty} channel(s)",
                list.len()
            )));
        }
    }
    for (field, buffs, required) in [
        ("src_buff", &op.src_buff, need.src),
        ("dst_buff", &op.dst_buff, need.dst),
    ] {
        let buffs = buffs.as_deref().unwrap_or_default();
        if required && buffs.is_empty() {
            return Err(at(format!("no {field}")));
        }
        if buffs.len() > MAX_BUFFS_PER_OP {
            return Err(at(format!(
                "{} {field} entries: at most {MAX_BUFFS_PER_OP}",
                buffs.len()
            )));
        }
        for (i, b) in buffs.iter().enumerate() {
            buff(plan, tables, lists, site, op, b).map_err(|e| at(format!("{field}[{i}]: {e}")))?;
        }
    }
    let sems = op.semaphore_ids.as_deref().unwrap_or_default();
    if need.semaphores && sems.is_empty() {
        return Err(at("no semaphore_ids".into()));
    }
    if sems.len() > MAX_SEMAPHORES_PER_OP {
        return Err(at(format!(
            "{} semaphore ids: at most {MAX_SEMAPHORES_PER_OP} per operation",
            sems.len()
        )));
    }
    if let Some(&s) = sems.iter().find(|&&s| s >= gpu.semaphores.len()) {
        return Err(at(format!(
            "semaphore {s}, but rank {} has {}",
            site.rank,
            gpu.semaphores.len()
        )));
    }
    if op.name == "barrier" {
        let id = op.barrier_id.ok_or_else(|| at("no barrier_id".into()))?;
        if id >= MAX_BARRIERS {
            return Err(at(format!(
                "barrier_id {id}: the executor has {MAX_BARRIERS} barriers (0 to {})",
                MAX_BARRIERS - 1
            )));
        }
        let n = op
            .num_threadblocks
            .ok_or_else(|| at("no num_threadblocks".into()))?;
        if n == 0 || n > gpu.threadblocks.len() {
            return Err(at(format!(
                "num_threadblocks {n}, but rank {} has {} threadblock(s)",
                site.rank,
                gpu.threadblocks.len()
            )));
        }
    }
    if let Some(g) = &op.tbg_info {
        if g.tbg_size == 0 || g.tb_id >= g.tbg_size {
            return Err(at(format!(
                "tbg_info tb_id {} of tbg_size {}: tb_id must be below a size of at least 1",
                g.tb_id, g.tbg_size
            )));
        }
    }
    Ok(())
}

/// Checks one buffer reference: one kind of address, its index, its range.
fn buff(
    plan: &Plan,
    tables: &Tables,
    lists: &TbLists,
    site: Site<'_>,
    op: &Operation,
    b: &Buff,
) -> std::result::Result<(), String> {
    let kinds = [
        b.buffer_type.is_some(),
        b.buffer_id.is_some(),
        b.switch_channel_id.is_some(),
    ];
    if kinds.iter().filter(|&&k| k).count() != 1 {
        return Err(
            "needs exactly one of type (local), buffer_id (remote) or switch_channel_id".into(),
        );
    }
    let (_, what, chunks) = target(plan, tables, lists, site.rank, op, b)?;
    if !matches!(b.index.checked_add(b.size), Some(end) if end <= chunks) {
        return Err(format!(
            "index {} + size {} reaches past the end of {what}, which has {chunks} chunk(s)",
            b.index, b.size
        ));
    }
    Ok(())
}

/// The rank owning a referenced buffer, words naming it, and its chunk count.
pub(super) fn target(
    plan: &Plan,
    tables: &Tables,
    lists: &TbLists,
    rank: usize,
    op: &Operation,
    b: &Buff,
) -> std::result::Result<(usize, String, usize), String> {
    if let Some(t) = b.buffer_type {
        let gpu = &plan.gpus[rank];
        return Ok((rank, format!("rank {rank}'s {t} buffer"), chunks(gpu, t)));
    }
    if let Some(id) = b.buffer_id {
        let ty = op
            .channel_type
            .ok_or("a remote buffer_id without the operation's channel_type")?;
        let k = kind(ty).ok_or(format!("a remote buffer_id over a {ty} channel"))?;
        let list = &lists.remote[k];
        let &g = list.get(id).ok_or(format!(
            "buffer_id {id}, but the threadblock lists {} remote buffer(s) reached by {ty} channels",
            list.len()
        ))?;
        let rb = &plan.gpus[rank].remote_buffers[g];
        let owner = &plan.gpus[rb.rank];
        return Ok((
            rb.rank,
            format!("rank {}'s {} buffer", rb.rank, rb.buffer_type),
            chunks(owner, rb.buffer_type),
        ));
    }
    let id = b.switch_channel_id.unwrap_or_default();
    let list = &lists.channels[2];
    let &g = list.get(id).ok_or(format!(
        "switch_channel_id {id}, but the threadblock lists {} switch channel(s)",
        list.len()
    ))?;
    let group = &tables.switches[rank][g];
    Ok((
        rank,
        format!(
            "switch channel {g} ({} buffers of ranks {:?})",
            group.buffer, group.ranks
        ),
        group.chunks,
    ))
}

/// A GPU's chunk count of one buffer.
pub(super) fn chunks(gpu: &Gpu, t: BufferType) -> usize {
    match t {
        BufferType::Input => gpu.input_chunks,
        BufferType::Output => gpu.output_chunks,
        BufferType::Scratch => gpu.scratch_chunks,
    }
}
