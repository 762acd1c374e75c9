//! The MSCCL++ plan a search keeps: each schedule's plan priced by the executor cost
//! model, and the in-switch All-Reduce where the NVSwitch reduces.

use super::*;

/// `checked` lowered to a plan with `options` and timed by `executor`, and lowered again on
/// the instances its busiest link needs to move data at the link's rate, kept where it
/// fits and is faster: the plan [`plan`] ranks for a schedule (not yet verified).
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::cost::Executor;
/// use tacos::mscclpp::PlanOptions;
/// use tacos::pipeline::{priced_plan, synthesize, Request};
/// use tacos::synth::SynthOptions;
/// use tacos::topology::{parse_spec, SpecDefaults};
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let request = Request::new(CollectiveKind::AllGather, 1 << 26);
/// let checked = synthesize(&ring, &request, 1, &SynthOptions::seeded(0)).unwrap();
/// let executor = Executor::for_topology(&ring, None, None).unwrap();
/// let (plan, time_ps) = priced_plan(&ring, &checked, &PlanOptions::default(), &executor).unwrap();
/// assert!(plan.gpus[0].threadblocks.len() >= 2 && time_ps > 0);
/// ```
pub fn priced_plan(
    topo: &Topology,
    checked: &Checked,
    options: &PlanOptions,
    executor: &Executor,
) -> Result<(Plan, Picos)> {
    let plan = crate::mscclpp::lower(checked.schedule(), topo, options)?;
    let size = checked.schedule().collective.size_bytes;
    let timer = PlanTimer::new(&plan)?;
    let time_ps = timer.time_ps(executor, topo, size)?;
    let instances = timer.instances_to_fill(executor, topo) * options.instances.max(1);
    if instances <= options.instances.max(1) {
        return Ok((plan, time_ps));
    }
    let more = PlanOptions {
        instances,
        ..options.clone()
    };
    let Ok(copied) = crate::mscclpp::lower(checked.schedule(), topo, &more) else {
        return Ok((plan, time_ps));
    };
    let copied_ps = PlanTimer::new(&copied)?.time_ps(executor, topo, size)?;
    Ok(if copied_ps < time_ps {
        (copied, copied_ps)
    } else {
        (plan, time_ps)
    })
}

/// What [`plan`] keeps: the plan, and the fastest checked schedule it or the in-switch
/// plan it beat came from.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The fastest schedule whose plan fits and verifies.
    pub checked: Checked,
    pub plan: Plan,
    /// Whether the plan reduces inside the NVSwitch (`mscclpp::nvls`) rather than
    /// following `checked`, because the executor cost model prices it faster.
    pub in_switch: bool,
    /// The time of `checked`'s own plan, as the search ranked it.
    pub schedule_plan_ps: Picos,
    /// The kept plan's time under the executor cost model, where the options gave one.
    pub time_ps: Option<Picos>,
}

/// The fastest checked schedule for `request` whose MSCCL++ execution plan the lowering
/// can write within the executor's limits and the plan verifier passes, with that plan: a
/// K whose plan needs more operations per threadblock or threadblocks per GPU than the
/// executor runs is passed over (its trial says why), so the search settles on the
/// fastest K that runs. With an executor, an All-Reduce over one NVSwitch whose GPUs can
/// reduce in it (NVLS: Hopper and later) is also tried as the in-switch plan, which is
/// kept where the model prices it faster.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::mscclpp::PlanOptions;
/// use tacos::pipeline::{plan, Chunks, Options, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
/// let ring = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
/// let request = Request::new(CollectiveKind::AllReduce, 1 << 26);
/// let options = Options { chunks: Chunks::UpTo(16), ..Options::default() };
/// let found = plan(&ring, &request, &options, &PlanOptions::default()).unwrap();
/// assert_eq!(found.kept.plan.gpus.len(), 8);
/// assert!(found.kept.checked.chunks_per_npu() <= 16 && !found.kept.in_switch);
/// ```
pub fn plan(
    topo: &Topology,
    request: &Request,
    options: &Options,
    plan_options: &PlanOptions,
) -> Result<Found<Planned>> {
    let ranked = options.ranks_candidates(topo, request) || options.executor.is_some();
    let tried = search(topo, request, options, ranked, |checked| {
        let (plan, time_ps) = match &options.executor {
            Some(executor) => priced_plan(topo, &checked, plan_options, executor)?,
            None => {
                let plan = crate::mscclpp::lower(checked.schedule(), topo, plan_options)?;
                let time_ps = if ranked {
                    simulate_schedule(topo, checked.schedule())?.time_ps
                } else {
                    checked.report().collective_time_ps
                };
                (plan, time_ps)
            }
        };
        Ok(((checked, plan), time_ps))
    })?;
    // The fastest plan the verifier passes; a refused one stays in its trial's record.
    let (mut trials, mut built): (Vec<Trial>, Vec<Result<(Checked, Plan)>>) =
        tried.into_iter().unzip();
    let mut order: Vec<usize> = (0..trials.len())
        .filter(|&i| built[i].is_ok() && trials[i].simulated_ps.is_some())
        .collect();
    order.sort_by_key(|&i| (trials[i].simulated_ps, i));
    for i in order {
        let Ok((_, plan)) = &built[i] else { continue };
        let options_at = crate::mscclpp::VerifyOptions {
            size: Some(plan.min_message_size),
            root: None,
        };
        match crate::mscclpp::verify(plan, &options_at) {
            Ok(_) => {
                let (checked, plan) =
                    std::mem::replace(&mut built[i], Err(Error::plan(String::new())))?;
                let schedule_plan_ps = trials[i].simulated_ps.unwrap_or(Picos::MAX);
                let in_switch = options.executor.as_ref().and_then(|executor| {
                    in_switch_plan(topo, request, plan_options, executor)
                        .filter(|(_, t)| *t < schedule_plan_ps)
                });
                let (plan, time_ps, in_switch) = match in_switch {
                    Some((nvls, t)) => (nvls, Some(t), true),
                    None => (
                        plan,
                        options.executor.is_some().then_some(schedule_plan_ps),
                        false,
                    ),
                };
                let kept = Planned {
                    checked,
                    plan,
                    in_switch,
                    schedule_plan_ps,
                    time_ps,
                };
                return Ok(Found { kept, trials });
            }
            Err(e) => trials[i].refused = Some(format!("the plan verifier refused it: {e}")),
        }
    }
    Err(Error::Synthesis(nothing_found(
        &trials,
        "verified MSCCL++ plan",
    )))
}

/// The fastest verified in-switch All-Reduce plan for `request` (over every NPU of one
/// NVSwitch whose GPUs reduce in it, in place), over 1 to 8 threadblocks per GPU, with its
/// time under `executor`; None where it does not apply.
fn in_switch_plan(
    topo: &Topology,
    request: &Request,
    options: &PlanOptions,
    executor: &Executor,
) -> Option<(Plan, Picos)> {
    let npus = topo.alive_npus();
    let machine = crate::cost::machine::of_topology(topo, executor.domain_size, executor.gpu);
    let applies = request.kind == CollectiveKind::AllReduce
        && request.npus.as_ref().map_or(true, |n| *n == npus)
        && options.in_place != Some(false)
        && machine.nvls
        && machine.nodes == 1
        && executor.model.nvls().is_some();
    if !applies {
        return None;
    }
    let name = format!("tacos-allreduce-nvls-{}", topo.name());
    [1, 2, 4, 8]
        .into_iter()
        .filter(|&t| t <= options.max_threadblocks)
        .filter_map(|t| {
            let plan =
                crate::mscclpp::nvls::all_reduce(npus.len(), t, request.size_bytes, &name).ok()?;
            let at = crate::mscclpp::VerifyOptions {
                size: Some(request.size_bytes),
                root: None,
            };
            crate::mscclpp::verify(&plan, &at).ok()?;
            let time = PlanTimer::new(&plan)
                .ok()?
                .time_ps(executor, topo, request.size_bytes)
                .ok()?;
            Some((plan, time))
        })
        .min_by_key(|(_, t)| *t)
}
