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
    /// Whether the plan reduces inside the NVSwitch (`mscclpp::nvls`, or
    /// `mscclpp::nvls_rail` over several nodes) rather than following `checked`, because
    /// the executor cost model prices it faster.
    pub in_switch: bool,
    /// The fastest in-switch plan tried, kept or not; None where none applies.
    pub in_switch_tried: Option<InSwitch>,
    /// The time of `checked`'s own plan, as the search ranked it.
    pub schedule_plan_ps: Picos,
    /// The kept plan's time under the executor cost model, where the options gave one.
    pub time_ps: Option<Picos>,
}

/// An in-switch All-Reduce plan [`plan`] tried beside the schedule's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InSwitch {
    /// `NVLS` (one node's switch) or `NVLS + rail` (several nodes' switches and their NICs).
    pub label: &'static str,
    /// Its time under the executor cost model.
    pub time_ps: Picos,
}

/// The fastest checked schedule for `request` whose MSCCL++ execution plan the lowering
/// can write within the executor's limits and the plan verifier passes, with that plan: a
/// K whose plan needs more operations per threadblock or threadblocks per GPU than the
/// executor runs is passed over (its trial says why), so the search settles on the
/// fastest K that runs. With an executor, an All-Reduce over NVSwitches whose GPUs can
/// reduce in them (NVLS: Hopper and later) is also tried as an in-switch plan (one node's,
/// or NVLS + rail over several nodes with a NIC per GPU), which is kept where the model
/// prices it faster.
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
                let tried = options
                    .executor
                    .as_ref()
                    .and_then(|executor| in_switch_plan(topo, request, plan_options, executor));
                let in_switch_tried = tried.as_ref().map(|(_, tried)| *tried);
                let (plan, time_ps, in_switch) = match tried {
                    Some((nvls, t)) if t.time_ps < schedule_plan_ps => {
                        (nvls, Some(t.time_ps), true)
                    }
                    _ => (
                        plan,
                        options.executor.is_some().then_some(schedule_plan_ps),
                        false,
                    ),
                };
                let kept = Planned {
                    checked,
                    plan,
                    in_switch,
                    in_switch_tried,
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

/// The fastest verified in-switch All-Reduce plan for `request` (over every NPU, in
/// place), with its time under `executor`; None where it does not apply. On one NVSwitch
/// whose GPUs reduce in it (NVLS: Hopper and later) that is the node plan (`nvls`); on
/// several such nodes of equal size with a NIC per GPU, the NVLS + rail plan
/// (`nvls_rail`), its threadblocks' switch reductions staggered by 0, 1 or 2. Each is
/// tried on 1 to 8 threadblocks per GPU.
fn in_switch_plan(
    topo: &Topology,
    request: &Request,
    options: &PlanOptions,
    executor: &Executor,
) -> Option<(Plan, InSwitch)> {
    let npus = topo.alive_npus();
    let machine = crate::cost::machine::of_topology(topo, executor.domain_size, executor.gpu);
    let applies = request.kind == CollectiveKind::AllReduce
        && request.npus.as_ref().map_or(true, |n| *n == npus)
        && options.in_place != Some(false)
        && machine.nvls
        && executor.model.nvls().is_some();
    if !applies {
        return None;
    }
    let size = request.size_bytes;
    let instances = [1, 2, 4, 8]
        .into_iter()
        .filter(|&t| t <= options.max_threadblocks);
    let (label, candidates): (_, Vec<Result<Plan>>) = if machine.nodes == 1 {
        let name = format!("tacos-allreduce-nvls-{}", topo.name());
        let plans = instances
            .map(|t| crate::mscclpp::nvls::all_reduce(npus.len(), t, size, &name))
            .collect();
        ("NVLS", plans)
    } else if rails(&npus, &machine, executor.domain_size) {
        let name = format!("tacos-allreduce-nvls-rail-{}", topo.name());
        let plans = instances
            .flat_map(|t| [0, 1, 2].map(|stagger| (t, stagger)))
            // A stagger of the threadblocks or more orders nothing: the plan of 0.
            .filter(|&(t, stagger)| stagger < t || stagger == 0)
            .map(|(instances, stagger)| {
                let shape = crate::mscclpp::nvls_rail::Shape {
                    nodes: machine.nodes,
                    gpus_per_node: machine.gpus_per_node,
                    instances,
                    stagger,
                };
                crate::mscclpp::nvls_rail::all_reduce(&shape, size, &name)
            })
            .collect();
        ("NVLS + rail", plans)
    } else {
        return None;
    };
    candidates
        .into_iter()
        .filter_map(|plan| {
            let plan = plan.ok()?;
            let at = crate::mscclpp::VerifyOptions {
                size: Some(size),
                root: None,
            };
            crate::mscclpp::verify(&plan, &at).ok()?;
            let time_ps = PlanTimer::new(&plan)
                .ok()?
                .time_ps(executor, topo, size)
                .ok()?;
            Some((plan, InSwitch { label, time_ps }))
        })
        .min_by_key(|(_, t)| t.time_ps)
}

/// Whether `npus` are whole nodes of `machine` in order (rank n·P + g is GPU g of node
/// n), each GPU with a NIC of its own: the machine the NVLS + rail plan is for.
fn rails(npus: &[NpuId], machine: &crate::tuner::search::Machine, domain_size: usize) -> bool {
    let p = machine.gpus_per_node;
    let node = |v: NpuId| v / domain_size.max(1);
    let whole = |c: &[NpuId]| c.len() == p && c.iter().all(|&v| node(v) == node(c[0]));
    p >= 2
        && machine.nics == p
        && npus.len() == machine.nodes * p
        && npus.chunks(p).all(whole)
        && npus
            .chunks(p)
            .zip(npus.chunks(p).skip(1))
            .all(|(a, b)| node(a[0]) < node(b[0]))
}
