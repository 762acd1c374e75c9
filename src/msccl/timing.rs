//! Times a program with the simulator's alpha-beta rules: every message a program sends
//! becomes a `sim::Message` from its GPU's NPU to its peer's, and the simulator does the
//! rest (one message per link at a time, FIFO flows, multi-hop routes).
//!
//! A message depends on the receives its sending step waited for on its own GPU: the
//! earlier receives of its threadblock and, through dependencies, those of the steps it
//! waited on (the latest per threadblock stands for the earlier ones, since a connection
//! is FIFO). Sending and local steps take no time of their own. Messages are numbered in
//! the order a run could issue them (by the length of the chain of steps before them), which
//! orders each simulator flow the way the program orders its connections.

use super::exec::{self, Trace};
use super::{Layout, Program};
use crate::error::{Error, Result};
use crate::sim::{simulate_messages, Message, SimResult};
use crate::topology::{NpuId, Topology};
use std::collections::HashMap;

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
    simulate_messages(topo, &program_messages(program, &trace, ranks, chunk_bytes))
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

/// Latest receive (message id) per threadblock of one GPU that a step has waited for.
type Frontier = Vec<(usize, usize, usize)>;

/// Keeps, per threadblock, the later of two entries.
fn merge(into: &mut Frontier, other: &Frontier) {
    for &(tb, step, msg) in other {
        match into.iter_mut().find(|e| e.0 == tb) {
            Some(e) if e.1 < step => *e = (tb, step, msg),
            Some(_) => {}
            None => into.push((tb, step, msg)),
        }
    }
}

/// The program's messages as simulator messages, in issue order.
pub(crate) fn program_messages(
    program: &Program,
    trace: &Trace,
    ranks: &[NpuId],
    chunk_bytes: f64,
) -> Vec<Message> {
    let index = &trace.index;
    let mut is_source = vec![false; index.steps()];
    for src in trace.released_by.iter().flatten() {
        is_source[*src] = true;
    }
    let mut frontier: Vec<Frontier> = vec![Vec::new(); index.tbs.len()];
    let mut at_signal: HashMap<usize, Frontier> = HashMap::new();
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); trace.messages.len()];
    for &gid in &trace.order {
        let (t, s) = index.locate(gid);
        if let Some(src) = trace.released_by[gid] {
            if let Some(f) = at_signal.get(&src) {
                merge(&mut frontier[t], f);
            }
        }
        if let Some(m) = trace.received[gid] {
            merge(&mut frontier[t], &vec![(t, s, m)]);
        }
        if let Some(m) = trace.sent[gid] {
            deps[m] = frontier[t].iter().map(|e| e.2).collect();
        }
        if is_source[gid] {
            at_signal.insert(gid, frontier[t].clone());
        }
    }
    let mut order: Vec<usize> = (0..trace.messages.len()).collect();
    order.sort_by_key(|&m| (trace.depth[trace.messages[m].from], trace.messages[m].from));
    let mut position = vec![0; order.len()];
    for (i, &m) in order.iter().enumerate() {
        position[m] = i;
    }
    order
        .iter()
        .map(|&m| {
            let msg = &trace.messages[m];
            let (t, _) = index.locate(msg.from);
            let (g, tb) = index.tbs[t];
            let peer = program.gpus[g].threadblocks[tb]
                .send
                .expect("a sending step's threadblock has a send peer");
            let mut d: Vec<usize> = deps[m].iter().map(|&x| position[x]).collect();
            d.sort_unstable();
            Message {
                src: ranks[g],
                dst: ranks[peer],
                bytes: msg.count as f64 * chunk_bytes,
                deps: d,
            }
        })
        .collect()
}
