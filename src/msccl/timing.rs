//! Times a program with the simulator's alpha-beta rules: every message a program sends
//! becomes a `sim::Message` from its GPU's NPU to its peer's, and the simulator does the
//! rest (one message per link at a time, FIFO flows, multi-hop routes).
//!
//! A message depends on the receives its sending step waited for on its own GPU: the
//! earlier receives of its threadblock and, through dependencies, those of the steps it
//! waited on (the latest per threadblock stands for the earlier ones, since a connection
//! is FIFO). Sending and local steps take no time of their own. Messages are numbered in
//! an order a run could issue them (see `program_messages`).

use super::exec::{self, Trace};
use super::{Layout, Program};
use crate::error::{Error, Result};
use crate::sim::{simulate_messages, Message, SimResult};
use crate::topology::{NpuId, Topology};
use crate::units::Picos;

/// Times `program` on `topo`, rank r on the r-th alive NPU, for a collective of
/// `size_bytes` (nccl-tests' convention, as `tacos synth --size`).
pub fn simulate_program(topo: &Topology, program: &Program, size_bytes: u64) -> Result<SimResult> {
    let ranks = topo.alive_npus();
    if ranks.len() != program.gpus.len() {
        return Err(Error::Msccl(format!(
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
    if ranks.len() != program.gpus.len() {
        return Err(Error::Msccl(format!(
            "{} NPUs given for a program of {} GPUs",
            ranks.len(),
            program.gpus.len()
        )));
    }
    let structure = exec::structure_problems(program);
    if let Some(p) = structure.first() {
        return Err(Error::Msccl(format!("cannot run the program: {p}")));
    }
    let trace = exec::run(program, usize::MAX / 2);
    if let Some(d) = &trace.deadlock {
        return Err(Error::Msccl(format!("the program does not finish: {d}")));
    }
    let chunk_bytes = size_bytes as f64 / size_divisor(program)? as f64;
    simulate_messages(
        topo,
        &program_messages(topo, program, &trace, ranks, chunk_bytes),
    )
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

/// The program's messages as simulator messages, in issue order.
///
/// The order is that of an idealized run in which every connection is a link of its own
/// (messages of one connection one after another, at the alpha-beta cost of their link,
/// without sharing it with other connections): it keeps each connection's order, and where
/// channels share a link it interleaves them by when their data is ready, as the executor
/// does, instead of letting one channel's late message hold up another's in the
/// simulator's single queue per link. Ties go to the shorter chain of steps.
pub(crate) fn program_messages(
    topo: &Topology,
    program: &Program,
    trace: &Trace,
    ranks: &[NpuId],
    chunk_bytes: f64,
) -> Vec<Message> {
    let index = &trace.index;
    // Per global threadblock, where its receive frontier (one entry per threadblock of
    // its GPU) starts in `frontier`; per signalling step, where its snapshot starts.
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
    let mut messages: Vec<Message> = Vec::with_capacity(trace.messages.len());
    messages.resize_with(trace.messages.len(), || Message {
        src: 0,
        dst: 0,
        bytes: 0.0,
        deps: Vec::new(),
    });
    // Idealized start and arrival of each message, and when each sending threadblock's
    // connection is free again.
    let mut start: Vec<Picos> = vec![0; trace.messages.len()];
    let mut arrival: Vec<Picos> = vec![0; trace.messages.len()];
    let mut free: Vec<Picos> = vec![0; index.tbs.len()];
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
            let peer = program.gpus[g].threadblocks[tb]
                .send
                .expect("a sending step's threadblock has a send peer");
            let (src, dst) = (ranks[g], ranks[peer]);
            let bytes = trace.messages[m].count as f64 * chunk_bytes;
            let deps: Vec<usize> = frontier[mine.clone()]
                .iter()
                .filter(|e| e.0 > 0)
                .map(|e| e.1 as usize)
                .collect();
            let ready = deps.iter().map(|&d| arrival[d]).max().unwrap_or(0);
            let cost = topo
                .link_between(src, dst)
                .map_or(0, |l| topo.link(l).transfer_ps(bytes));
            start[m] = ready.max(free[t]);
            arrival[m] = start[m] + cost;
            free[t] = arrival[m];
            messages[m] = Message {
                src,
                dst,
                bytes,
                deps,
            };
        }
        let at = snapshot_at[gid];
        if at != NO_SNAPSHOT {
            at_signal[at..at + mine.len()].copy_from_slice(&frontier[mine]);
        }
    }
    let mut order: Vec<usize> = (0..messages.len()).collect();
    let from = |m: usize| trace.messages[m].from;
    order.sort_by_key(|&m| (start[m], trace.depth[from(m)], from(m)));
    let mut position = vec![0; order.len()];
    for (i, &m) in order.iter().enumerate() {
        position[m] = i;
    }
    order
        .iter()
        .map(|&m| {
            let mut deps: Vec<usize> = messages[m].deps.iter().map(|&x| position[x]).collect();
            deps.sort_unstable();
            Message {
                deps,
                ..messages[m].clone()
            }
        })
        .collect()
}
