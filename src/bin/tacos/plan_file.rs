//! Writing MSCCL++ execution plans (`--plan`): lowered and verified, then the file, whole
//! or not at all.

use anyhow::Context;
use std::path::Path;
use tacos::fsio::write_atomic_with;
use tacos::mscclpp::{lower, verify, Plan, PlanOptions, VerifyOptions};
use tacos::schedule::Schedule;
use tacos::topology::Topology;

/// Writes `plan` to `path`, lowering `schedule` with `options` where no plan was made with
/// it.
pub fn write_plan(
    schedule: &Schedule,
    topo: &Topology,
    plan: Option<Plan>,
    options: &PlanOptions,
    path: &Path,
) -> anyhow::Result<Plan> {
    let plan = match plan {
        Some(plan) => plan,
        None => {
            let plan = lower(schedule, topo, options)
                .context("--plan: the schedule cannot be written as an MSCCL++ execution plan")?;
            let options = VerifyOptions {
                size: Some(plan.min_message_size),
                root: None,
            };
            verify(&plan, &options).context("--plan: the plan verifier refused the plan")?;
            plan
        }
    };
    let text = plan.to_json();
    write_atomic_with(path, |out| out.write_all(text.as_bytes()))
        .context("cannot write the plan")?;
    Ok(plan)
}

/// A plan in a few words: its GPUs, threadblocks and operations.
pub fn describe_plan(plan: &Plan) -> String {
    let blocks: usize = plan.gpus.iter().map(|g| g.threadblocks.len()).sum();
    let ops: usize = plan
        .gpus
        .iter()
        .flat_map(|g| &g.threadblocks)
        .map(|tb| tb.ops.iter().map(|o| o.flat_count()).sum::<usize>())
        .sum();
    let widest = plan
        .gpus
        .iter()
        .map(|g| g.threadblocks.len())
        .max()
        .unwrap_or(0);
    format!(
        "{} GPUs, {blocks} threadblocks (at most {widest} on a GPU), {ops} operations; verified",
        plan.gpus.len()
    )
}
