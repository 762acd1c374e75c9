//! A symbolic verifier for MSCCL++ execution plans, independent of how they were made.
//!
//! It checks the plan's shape and the executor's limits (`structure`), its chunk
//! counts against a message size (`sizes`), then runs one launch (`exec`): every
//! threadblock of every rank as a program, interleaved; a wait passes only on a signal
//! of its paired channel, a semaphore acquire on a release, a barrier when all its
//! threadblocks are there, so a deadlock is found and named. Every chunk holds a
//! symbolic value (the input chunks it sums) and its access history: an access that
//! nothing orders after a conflicting one (`nop`s within a threadblock,
//! semaphores and barriers across threadblocks, signal/wait across GPUs: `clock`) is a
//! race. At the end every signal must have been waited for, every semaphore back where
//! it started, and every output chunk must hold the collective's result.

mod clock;
mod exec;
mod memory;
mod ops;
mod site;
mod sizes;
mod structure;
mod value;

use crate::error::{Error, Result};
use crate::mscclpp::plan::Plan;
use memory::{Memory, Place};
use serde::Serialize;
use value::Value;

/// What to verify a plan for.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// A message size in bytes, as the executor checks it (the output size for
    /// All-Gather, else the input size); without it, only that one chunk size fits.
    pub size: Option<u64>,
    /// The root of a Broadcast; by default the one rank for which the result is right.
    pub root: Option<usize>,
}

/// What one launch of a verified plan does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanReport {
    pub name: String,
    pub collective: String,
    pub protocol: String,
    pub inplace: bool,
    pub ranks: usize,
    pub threadblocks: usize,
    /// Operations, pipeline bodies flattened (as the executor counts them).
    pub ops: usize,
    pub max_ops_per_threadblock: usize,
    /// Signals sent in one launch (a put with signal counts one per destination).
    pub signals: usize,
    pub waits: usize,
    pub max_scratch_chunks: usize,
    /// The Broadcast root the result was checked for.
    pub root: Option<usize>,
}

/// The collectives whose result the verifier knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
}

impl Collective {
    fn parse(name: &str) -> Option<Collective> {
        Some(match name {
            "allreduce" => Collective::AllReduce,
            "allgather" => Collective::AllGather,
            "reducescatter" => Collective::ReduceScatter,
            "alltoall" => Collective::AllToAll,
            "broadcast" => Collective::Broadcast,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "allreduce",
            Collective::AllGather => "allgather",
            Collective::ReduceScatter => "reducescatter",
            Collective::AllToAll => "alltoall",
            Collective::Broadcast => "broadcast",
        }
    }

    /// Input bytes per output bytes on one rank of `p`.
    fn chunk_ratio(self, p: usize) -> (usize, usize) {
        match self {
            Collective::AllGather => (1, p),
            Collective::ReduceScatter => (p, 1),
            _ => (1, 1),
        }
    }

    /// What rank `rank`'s output chunk `j` must hold (`inputs` and `outputs`: the rank's
    /// chunk counts).
    fn expected(
        self,
        p: usize,
        rank: usize,
        j: usize,
        inputs: usize,
        outputs: usize,
        root: usize,
    ) -> Value {
        let sum = |chunk: usize| Value::sum((0..p).map(|s| (s as u32, chunk as u32)).collect());
        match self {
            Collective::AllGather => Value::input(j / inputs, j % inputs),
            Collective::ReduceScatter => sum(rank * outputs + j),
            Collective::AllReduce => sum(j),
            Collective::AllToAll => {
                let k = inputs / p;
                Value::input(j / k, rank * k + j % k)
            }
            Collective::Broadcast => Value::input(root, j),
        }
    }
}

/// Verifies one launch of `plan`: its shape and limits, its sizes, no deadlock, every
/// signal waited for, no race, and the collective's result in every output chunk.
///
/// ```
/// use tacos::mscclpp::{verify, Plan, VerifyOptions};
/// // Two ranks exchange their chunk: put into the peer's output, nop, signal; wait, nop.
/// let tb = |peer: usize, me: usize| format!(r#"{{"id":0,"channels":[{{"channel_type":"memory","channel_ids":[0]}}],
///   "remote_buffer_refs":[{{"access_channel_type":"memory","remote_buffer_ids":[0]}}],
///   "ops":[{{"name":"copy","src_buff":[{{"type":"i","index":0,"size":1}}],"dst_buff":[{{"type":"o","index":{me},"size":1}}]}},
///     {{"name":"put","channel_type":"memory","src_buff":[{{"type":"i","index":0,"size":1}}],"dst_buff":[{{"buffer_id":0,"index":{me},"size":1}}]}},
///     {{"name":"nop"}},{{"name":"signal","channel_type":"memory","channel_ids":[0]}},
///     {{"name":"wait","channel_type":"memory","channel_ids":[0]}},{{"name":"nop"}}]}}"#);
/// let gpu = |me: usize, peer: usize| format!(r#"{{"id":{me},"input_chunks":1,"output_chunks":2,"scratch_chunks":0,
///   "channels":[{{"channel_type":"memory","connected_to":[{peer}]}}],
///   "remote_buffers":[{{"rank":{peer},"type":"o","access_channel_types":["memory"]}}],
///   "threadblocks":[{}]}}"#, tb(peer, me));
/// let text = format!(r#"{{"name":"ag","collective":"allgather","protocol":"Simple","inplace":false,
///   "gpus":[{},{}]}}"#, gpu(0, 1), gpu(1, 0));
/// let plan = Plan::from_json(&text, "ag.json").unwrap();
/// let report = verify(&plan, &VerifyOptions::default()).unwrap();
/// assert_eq!((report.ranks, report.signals), (2, 2));
/// ```
pub fn verify(plan: &Plan, options: &VerifyOptions) -> Result<PlanReport> {
    let collective = Collective::parse(&plan.collective).ok_or_else(|| {
        Error::plan(format!(
            "collective '{}': the verifier knows the results of allreduce, allgather, reducescatter, alltoall and broadcast",
            crate::error::echo(&plan.collective)
        ))
    })?;
    let tables = structure::check(plan)?;
    sizes::check(plan, collective, options.size)?;
    if let Some(r) = options.root {
        if r >= plan.gpus.len() {
            return Err(Error::plan(format!(
                "root {r}, but the plan has {} ranks",
                plan.gpus.len()
            )));
        }
    }
    check_memory(plan)?;
    let mut run = exec::Run::new(plan, &tables, Memory::new(plan, collective));
    run.run()?;
    let root = check_result(plan, collective, &mut run.memory, options.root)?;
    let per_tb: Vec<usize> = plan
        .gpus
        .iter()
        .flat_map(|g| g.threadblocks.iter())
        .map(|tb| tb.ops.iter().map(|o| o.flat_count()).sum())
        .collect();
    Ok(PlanReport {
        name: plan.name.clone(),
        collective: plan.collective.clone(),
        protocol: plan.protocol.clone(),
        inplace: plan.inplace,
        ranks: plan.gpus.len(),
        threadblocks: per_tb.len(),
        ops: per_tb.iter().sum(),
        max_ops_per_threadblock: per_tb.iter().copied().max().unwrap_or(0),
        signals: run.counts.signals,
        waits: run.counts.waits,
        max_scratch_chunks: plan
            .gpus
            .iter()
            .map(|g| g.scratch_chunks)
            .max()
            .unwrap_or(0),
        root,
    })
}

/// Largest symbolic state verified: the clocks (two bytes per pair of threadblocks)
/// and the chunks, before any is allocated.
const MAX_STATE_BYTES: u128 = 2 << 30;

fn check_memory(plan: &Plan) -> Result<()> {
    let tbs: u128 = plan.gpus.iter().map(|g| g.threadblocks.len() as u128).sum();
    let chunks: u128 = plan
        .gpus
        .iter()
        .map(|g| (g.input_chunks + g.output_chunks + g.scratch_chunks) as u128)
        .sum();
    let bytes = 2 * tbs * tbs + chunks * 96;
    if bytes > MAX_STATE_BYTES {
        return Err(Error::plan(format!(
            "verifying {tbs} threadblocks over {chunks} chunks needs about {} MiB, over the verifier's {} MiB",
            bytes >> 20,
            MAX_STATE_BYTES >> 20
        )));
    }
    Ok(())
}

/// Checks every output chunk; for a Broadcast without a root, tries each rank. Returns
/// the root checked.
fn check_result(
    plan: &Plan,
    collective: Collective,
    memory: &mut Memory,
    root: Option<usize>,
) -> Result<Option<usize>> {
    let p = plan.gpus.len();
    let first_wrong = |memory: &mut Memory, root: usize| -> Option<String> {
        for (r, gpu) in plan.gpus.iter().enumerate() {
            for j in 0..gpu.output_chunks {
                let want = collective.expected(p, r, j, gpu.input_chunks, gpu.output_chunks, root);
                let place: Option<Place> =
                    memory.place(r, r, crate::mscclpp::plan::BufferType::Output, j);
                let Some(place) = place else {
                    return Some(format!(
                        "rank {r}'s output chunk {j} lies outside its buffer"
                    ));
                };
                let have = &memory.cell(place).value;
                if *have != want {
                    return Some(format!(
                        "wrong result: rank {r}'s output chunk {j} holds {have}, but {} needs {want}",
                        collective.name()
                    ));
                }
            }
        }
        None
    };
    if collective != Collective::Broadcast {
        return match first_wrong(memory, 0) {
            Some(e) => Err(Error::plan(e)),
            None => Ok(None),
        };
    }
    if let Some(r) = root {
        return match first_wrong(memory, r) {
            Some(e) => Err(Error::plan(format!("{e} (root {r})"))),
            None => Ok(Some(r)),
        };
    }
    let mut first = None;
    for r in 0..p {
        match first_wrong(memory, r) {
            None => return Ok(Some(r)),
            Some(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(Error::plan(format!(
        "{} (as a broadcast from rank 0; no root gives the right result)",
        first.unwrap_or_default()
    )))
}
