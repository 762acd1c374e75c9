//! The MSCCL program a search keeps: each lowered, priced and verified for its target,
//! with advice where K breaks the target's limits.

use super::*;

/// `lowered` timed by `executor` at its schedule's size; where `fill` gives the options it
/// was lowered with, also lowered again on the instances (copies on more channels) its
/// busiest link needs to move data at the link's rate (`Executor::instances_to_fill`),
/// and that program kept where it lowers within the target and is faster.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::cost::Executor;
/// use tacos::msccl::LowerOptions;
/// use tacos::pipeline::{lower, priced, synthesize, Request};
/// use tacos::synth::SynthOptions;
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let request = Request::new(CollectiveKind::AllGather, 1 << 30);
/// let checked = synthesize(&ring, &request, 1, &SynthOptions::seeded(0)).unwrap();
/// let lowering = LowerOptions::default();
/// let one = lower(&ring, &checked, &lowering).unwrap();
/// let executor = Executor::for_topology(&ring, None, None).unwrap();
/// let single = priced(&ring, one.clone(), &executor, None).unwrap();
/// let filled = priced(&ring, one, &executor, Some(&lowering)).unwrap();
/// // The executor's channels do not move a link's rate alone: more instances are faster.
/// assert!(filled.time_ps() <= single.time_ps());
/// ```
pub fn priced(
    topo: &Topology,
    lowered: Lowered,
    executor: &Executor,
    fill: Option<&LowerOptions>,
) -> Result<Lowered> {
    let size = lowered.checked().schedule().collective.size_bytes;
    let time_ps = executor.program_time_ps(topo, lowered.program(), lowered.timer(), size)?;
    let single = lowered.retimed(time_ps);
    let Some(lowering) = fill else {
        return Ok(single);
    };
    let instances = executor.instances_to_fill(topo, single.program(), single.timer());
    if instances <= lowering.instances {
        return Ok(single);
    }
    let copied = LowerOptions {
        instances,
        ..lowering.clone()
    };
    let Ok(more) = lower(topo, single.checked(), &copied) else {
        return Ok(single);
    };
    let more_ps = executor.program_time_ps(topo, more.program(), more.timer(), size)?;
    Ok(if more_ps < time_ps {
        more.retimed(more_ps)
    } else {
        single
    })
}

/// The fastest verified program for `request` over the options' K and seeds: each
/// candidate is synthesized, checked, lowered for the options' target and timed as the
/// program; the fastest that passes verification is kept (ties to the smaller K, then the
/// earlier seed). A K whose program breaks the target's limits is passed over; with K
/// fixed, the error says which smaller K fits and whether a larger target takes it.
pub fn program(topo: &Topology, request: &Request, options: &Options) -> Result<Found<Verified>> {
    let options = &Options {
        in_switch: false,
        ..options.clone()
    };
    let lowering = &options.lowering;
    // Every program is timed by simulation, one candidate or many.
    let tried = search(topo, request, options, true, |checked| {
        let lowered = lower(topo, &checked, lowering)?;
        let lowered = match &options.executor {
            Some(executor) => {
                let fill = options.fill_instances.then_some(lowering);
                priced(topo, lowered, executor, fill)?
            }
            None => lowered,
        };
        let time_ps = lowered.time_ps();
        Ok((lowered, time_ps))
    })?;
    let (mut trials, built): (Vec<Trial>, Vec<Result<Lowered>>) = tried.into_iter().unzip();
    let mut failed = None;
    let mut built: Vec<Option<Lowered>> = built
        .into_iter()
        .map(|b| b.map_err(|e| failed = Some(e)).ok())
        .collect();
    let none_built = built.iter().all(Option::is_none);
    let mut order: Vec<usize> = (0..trials.len()).filter(|&i| built[i].is_some()).collect();
    order.sort_by_key(|&i| (trials[i].simulated_ps, i));
    for i in order {
        let lowered = built[i].take().expect("ranked only where built");
        match lowered.verify(&lowering.target) {
            Ok(verified) => {
                return Ok(Found {
                    kept: verified,
                    trials,
                })
            }
            Err(refusal) => trials[i].refused = Some(refusal.reason),
        }
    }
    let what = format!("verified program for target {}", lowering.target);
    // A single K whose trials could not be built (rather than programs that failed
    // verification) keeps the error's fields; a fixed K past the target's limits (one
    // that lowers once they are lifted) says what would fit, whatever the seeds.
    let one_k = trials.len() == 1 || matches!(options.chunks, Chunks::Fixed(_));
    if let (Some(e), Some(trial), true) = (failed, trials.first(), none_built && one_k) {
        let advice = match options.chunks {
            Chunks::Fixed(k) => limit_advice(topo, request, k, options)
                .map(|advice| format!("-k {k} does not fit: {advice}; ")),
            Chunks::Auto | Chunks::UpTo(_) => None,
        };
        let seeds = match trials.as_slice() {
            [_] => format!("seed {}", trial.seed),
            _ => format!("{} seeds", trials.len()),
        };
        let prefix = advice.unwrap_or_else(|| {
            format!("K={} with {seeds} gives no {what}: ", trial.chunks_per_npu)
        });
        return Err(prefixed(e, &prefix));
    }
    Err(Error::msccl(nothing_found(&trials, &what)))
}

/// `e` with `prefix` before what it says: in the context of a figure past a limit (the
/// fields stay), else as the context of `e`, which stays the cause.
pub(super) fn prefixed(e: Error, prefix: &str) -> Error {
    match e {
        Error::TargetLimit {
            target,
            violation,
            context,
        } => Error::TargetLimit {
            target,
            violation,
            context: format!("{prefix}{context}"),
        },
        Error::Limit {
            what,
            value,
            limit,
            context,
        } => Error::Limit {
            what,
            value,
            limit,
            context: format!("{prefix}{context}"),
        },
        other => Error::Context {
            context: prefix.trim_end_matches([':', ';', ' ']).to_string(),
            source: Box::new(other),
        },
    }
}

/// When K's program breaks only limits (it lowers once they are lifted): the largest
/// smaller K that fits the target (with any of the seeds and ways the options try, as
/// `-k` with that K would find it), and whether the executor rebuilt for 256 steps takes
/// K. None when the program fails for another reason.
pub(super) fn limit_advice(
    topo: &Topology,
    request: &Request,
    k: usize,
    options: &Options,
) -> Option<String> {
    let lowering = &options.lowering;
    let synths: Vec<SynthOptions> = options
        .ways(topo, request)
        .into_iter()
        .map(|(seed, plan)| options.synth(seed, plan))
        .collect();
    let checked = synthesize(topo, request, k, synths.first()?).ok()?;
    let target = &lowering.target;
    let lifted = LowerOptions {
        target: Target {
            limits: msccl::Limits {
                max_steps_per_tb: usize::MAX,
                max_tbs: usize::MAX,
                max_tbs_per_channel: usize::MAX,
                max_elements_per_rank: usize::MAX,
                ..target.limits.clone()
            },
            ..target.clone()
        },
        ..lowering.clone()
    };
    msccl::lower(checked.schedule(), topo, &lifted).ok()?;
    let mut advice = Vec::new();
    let fits = |j: usize, synth: &SynthOptions| {
        synthesize(topo, request, j, synth).is_ok_and(|c| {
            check_shape(c.schedule(), topo, lowering).is_ok()
                && msccl::lower(c.schedule(), topo, lowering).is_ok()
        })
    };
    let smaller = (1..k)
        .rev()
        .find(|&j| synths.iter().any(|synth| fits(j, synth)));
    advice.push(match smaller {
        Some(j) => format!("the largest K that fits target {target} is {j} (-k {j})"),
        None => format!("no smaller K fits target {target} either"),
    });
    if target.profile != Profile::Executor256 && target.limits == target.profile.limits() {
        let wide = LowerOptions {
            target: Target::new(Profile::Executor256),
            ..lowering.clone()
        };
        if msccl::lower(checked.schedule(), topo, &wide).is_ok() {
            advice.push(format!(
                "K={k} fits --target executor-256 (an executor built with MSCCL_MAX_NUM_STEPS=256)"
            ));
        }
    }
    Some(advice.join("; "))
}

#[cfg(test)]
mod tests {
    use super::prefixed;
    use crate::error::Error;
    use std::error::Error as _;

    /// A failure the search puts in context keeps its kind and stays the cause (C callers
    /// get its code, `--json` its causes); a figure past a limit keeps its fields.
    #[test]
    fn the_context_keeps_the_cause() {
        let cause = Error::Synthesis("NPU 3 is unreachable".into());
        let e = prefixed(cause, "K=4 with 8 seeds gives no program: ");
        assert_eq!(e.kind(), "synthesis");
        assert_eq!(e.to_string(), "K=4 with 8 seeds gives no program");
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("synthesis: NPU 3 is unreachable")
        );
        let limit = Error::Limit {
            what: "memory",
            value: 10,
            limit: 5,
            context: "matching".into(),
        };
        let e = prefixed(limit, "-k 8 does not fit: ");
        assert!(e.is_limit());
        assert!(
            matches!(
                e,
                Error::Limit {
                    value: 10,
                    limit: 5,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
