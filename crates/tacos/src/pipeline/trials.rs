//! The search: every (K, seed, way) trial and the baselines, admitted against the memory
//! limit, built side by side, and the fastest kept.

use super::*;

/// One (K, seed) the search tried and how it did.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub chunks_per_npu: usize,
    pub seed: u64,
    /// Whether its chunks' ways were planned (`SynthOptions::planned`).
    pub planned: bool,
    /// Whether its planned trees were grown shallow (`SynthOptions::shape`).
    pub shallow: bool,
    /// Whether its planned trees went one way round each ring (`SynthOptions::shape`).
    pub one_way: bool,
    /// The baseline tried, where the trial is one (its seed and planned then mean
    /// nothing, and `chunks_per_npu` is its schedule's: a ring's halves go each way).
    pub baseline: Option<Baseline>,
    /// The schedule's own time, when it was synthesized.
    pub synthesized_ps: Option<Picos>,
    /// The simulated time of what would be emitted (the schedule, or its program), which
    /// the choice is made on (a lone schedule candidate: its own time, nothing being
    /// chosen); None when it could not be built.
    pub simulated_ps: Option<Picos>,
    /// Why it was not kept, when it could not be (built, lowered within the target's
    /// limits, or verified); None for those that could, kept or slower.
    pub refused: Option<String>,
}

/// Refuses `request` where its first K's synthesis and check (and the simulation that
/// ranks candidates) would pass the options' memory limit: what `schedule` (`lowered`
/// false) or `program` (true) refuses first, for a caller about to start other long work
/// beside them.
pub fn admit(topo: &Topology, request: &Request, options: &Options, lowered: bool) -> Result<()> {
    let simulated = lowered || options.ranks_candidates(topo, request);
    admit_at(
        topo,
        request,
        options,
        options.chunks.candidates()[0],
        simulated,
        false,
    )
}

/// The memory a synthesis of `request` with `k` chunks per NPU holds, checked (and
/// simulated), planned or not (a tree per chunk where its chunks are copied to every NPU).
pub(super) fn estimate_at(
    topo: &Topology,
    request: &Request,
    k: usize,
    simulated: bool,
    planned: bool,
) -> u64 {
    let spec = request.spec(topo, k);
    let trees = if planned && !request.kind.one_target() {
        crate::synth::memory::trees(topo, &spec)
    } else {
        0
    };
    memory::synthesis_checked(topo, &spec, simulated, planned).saturating_add(trees)
}

pub(super) fn admit_at(
    topo: &Topology,
    request: &Request,
    options: &Options,
    k: usize,
    simulated: bool,
    planned: bool,
) -> Result<()> {
    let how = if planned { " planned" } else { "" };
    options
        .max_memory
        .admit(estimate_at(topo, request, k, simulated, planned), || {
            format!("synthesizing {} with K={k}{how}", request.kind)
        })
}

/// What a search kept, and every trial.
#[derive(Clone, Debug)]
pub struct Found<T> {
    pub kept: T,
    pub trials: Vec<Trial>,
}

/// The fastest checked schedule for `request` over the options' K and seeds, by the
/// simulator's time (ties to the smaller K, then the earlier seed).
pub fn schedule(topo: &Topology, request: &Request, options: &Options) -> Result<Found<Checked>> {
    // A lone candidate's own checked time stands for it.
    let ranked = options.ranks_candidates(topo, request);
    let tried = search(topo, request, options, ranked, |checked| {
        // A baseline's clock is the simulator's already.
        let time_ps = if ranked && checked.baseline().is_none() {
            simulate_schedule(topo, checked.schedule())?.time_ps
        } else {
            checked.report().collective_time_ps
        };
        Ok((checked, time_ps))
    })?;
    fastest(tried, "schedule")
}

/// The fastest built candidate of a search (ties to the earlier: the smaller K, then the
/// earlier seed), with every trial.
pub(super) fn fastest<T>(tried: Vec<(Trial, Result<T>)>, what: &str) -> Result<Found<T>> {
    let mut trials = Vec::new();
    let mut kept: Option<(Picos, T)> = None;
    for (trial, built) in tried {
        if let (Ok(built), Some(t)) = (built, trial.simulated_ps) {
            if kept.as_ref().map_or(true, |(best, _)| t < *best) {
                kept = Some((t, built));
            }
        }
        trials.push(trial);
    }
    match kept {
        Some((_, kept)) => Ok(Found { kept, trials }),
        None => Err(Error::Synthesis(nothing_found(&trials, what))),
    }
}

/// Tries every (K, seed) of the options side by side: synthesized, checked, then
/// `evaluate`d to what would be emitted and its time (`simulated`: by simulation, which
/// the memory estimates count). A request the collective cannot be
/// built for at the first K is an error; later failures are refused trials.
pub(super) fn search<T: Send>(
    topo: &Topology,
    request: &Request,
    options: &Options,
    simulated: bool,
    evaluate: impl Fn(Checked) -> Result<(T, Picos)> + Sync,
) -> Result<Vec<(Trial, Result<T>)>> {
    if options.seeds.is_empty() {
        return Err(Error::Invalid {
            input: "seeds".into(),
            value: "none".into(),
            allowed: "at least one seed to synthesize with".into(),
        });
    }
    let ks = options.chunks.candidates();
    // The request itself is checked once, at the first K, so that its errors come as they are.
    admit_at(topo, request, options, ks[0], simulated, false)?;
    Collective::new(topo, request.spec(topo, ks[0]))?;
    let attempt =
        |k: usize, way: Way| attempt(topo, request, options, simulated, &evaluate, k, way);
    let ways = options.ways(topo, request);
    let mut tried = run_round(topo, request, options, simulated, (&ks, &ways), &attempt);
    if ks.len() > 1 {
        refine(topo, request, options, simulated, ks, &mut tried, &attempt);
    }
    // In order of K, so that ties go to the smaller K (`fastest`).
    tried.sort_by_key(|(k, _, _)| *k);
    Ok(tried
        .into_iter()
        .map(|(_, trial, built)| (trial, built))
        .collect())
}

/// Most rounds of K refinement after the first: each halves the gap around the best K.
const REFINE_ROUNDS: usize = 3;

/// Refines K around the fastest synthesized trial of a search's first round: K is tried
/// at the middle of each gap beside the best K so far (between 4 and 8, 6; then 5 or 7),
/// a round at a time, while the refinement's K summed stays within the first round's.
/// Only the fastest trial's way is refined (its seeds, free, or its planned trees' shape),
/// so that refining costs a fraction of the first round. The best K is not always a power
/// of two: 12 chunks can divide a dragonfly's slow links' load evenly where 8 and 16
/// cannot.
fn refine<T>(
    topo: &Topology,
    request: &Request,
    options: &Options,
    simulated: bool,
    first: Vec<usize>,
    tried: &mut Vec<(usize, Trial, Result<T>)>,
    attempt: &(impl Fn(usize, Way) -> Option<(Trial, Result<T>)> + Sync),
) where
    T: Send,
{
    let budget: usize = first.iter().sum();
    let mut spent = 0;
    let mut ks = first;
    for _ in 0..REFINE_ROUNDS {
        let fastest = tried
            .iter()
            .filter(|(_, trial, built)| trial.baseline.is_none() && built.is_ok())
            .filter_map(|(k, trial, _)| Some((trial.simulated_ps?, *k, trial)))
            .min_by_key(|&(ps, k, _)| (ps, k));
        let Some((_, best, trial)) = fastest else {
            return;
        };
        let way = match (trial.planned, trial.shallow, trial.one_way) {
            (false, _, _) => None,
            (true, true, _) => Some(TreeShape::Shallow),
            (true, _, true) => Some(TreeShape::OneWay),
            (true, false, false) => Some(TreeShape::Balanced),
        };
        let ways: Vec<(u64, Option<TreeShape>)> = options
            .ways(topo, request)
            .into_iter()
            .filter(|&(_, plan)| plan == way)
            .collect();
        let mut next = Vec::new();
        for mid in middles(&ks, best) {
            if spent + mid <= budget {
                spent += mid;
                next.push(mid);
            }
        }
        if next.is_empty() {
            return;
        }
        ks.extend(&next);
        tried.extend(run_round(
            topo,
            request,
            options,
            simulated,
            (&next, &ways),
            attempt,
        ));
    }
}

/// The K halfway into each gap beside `best` among the `tried` K, where a whole K lies
/// between: below it and above it.
fn middles(tried: &[usize], best: usize) -> Vec<usize> {
    let below = tried.iter().copied().filter(|&k| k < best).max();
    let above = tried.iter().copied().filter(|&k| k > best).min();
    [below.map(|k| (k + best) / 2), above.map(|k| (k + best) / 2)]
        .into_iter()
        .flatten()
        .filter(|&k| !tried.contains(&k))
        .collect()
}

/// One round of a search: each of `ways` and the baselines at each of `ks`, side by side
/// where their memory fits together, each result with the K it was asked at.
fn run_round<T: Send>(
    topo: &Topology,
    request: &Request,
    options: &Options,
    simulated: bool,
    (ks, ways): (&[usize], &[(u64, Option<TreeShape>)]),
    attempt: &(impl Fn(usize, Way) -> Option<(Trial, Result<T>)> + Sync),
) -> Vec<(usize, Trial, Result<T>)> {
    let limit = options.max_memory;
    let estimate = |k: usize, planned: bool| estimate_at(topo, request, k, simulated, planned);
    // Every K with each of the ways, then the baselines at that K.
    let candidates: Vec<(usize, Way)> = ks
        .iter()
        .flat_map(|&k| {
            let synthesized = ways
                .iter()
                .map(move |&(seed, plan)| (k, Way::Synthesized { seed, plan }));
            let baselines = options
                .baselines(topo, request, k)
                .into_iter()
                .map(move |b| (k, Way::Baseline(b)));
            synthesized.chain(baselines)
        })
        .collect();
    let side_by_side = candidates
        .iter()
        .map(|&(k, way)| match way {
            Way::Synthesized { plan, .. } => estimate(k, plan.is_some()),
            Way::Baseline(b) => b.memory_estimate(topo, &request.spec(topo, k)),
        })
        .fold(0u64, u64::saturating_add)
        <= limit.bytes();
    let run = |(k, way): (usize, Way)| attempt(k, way).map(|(trial, built)| (k, trial, built));
    if !side_by_side {
        return candidates.into_iter().filter_map(run).collect();
    }
    // On the caller's thread pool (rayon's), whose size bounds how many run at once.
    candidates.into_par_iter().filter_map(run).collect()
}

/// Builds one candidate at `k` and evaluates it; None for a baseline that does not apply
/// (RHD off powers of two, Direct where no link joins two NPUs), which is no trial.
fn attempt<T>(
    topo: &Topology,
    request: &Request,
    options: &Options,
    simulated: bool,
    evaluate: &impl Fn(Checked) -> Result<(T, Picos)>,
    k: usize,
    way: Way,
) -> Option<(Trial, Result<T>)> {
    let (seed, plan, baseline) = match way {
        Way::Synthesized { seed, plan } => (seed, plan, None),
        Way::Baseline(b) => (0, None, Some(b)),
    };
    let planned = plan.is_some();
    let mut trial = Trial {
        chunks_per_npu: k,
        seed,
        planned,
        shallow: plan == Some(TreeShape::Shallow),
        one_way: plan == Some(TreeShape::OneWay),
        baseline,
        synthesized_ps: None,
        simulated_ps: None,
        refused: None,
    };
    let checked = match baseline {
        None => admit_at(topo, request, options, k, simulated, planned)
            .and_then(|()| synthesize(topo, request, k, &options.synth(seed, plan))),
        // Held to the search's limit, which may be below the process's.
        Some(b) => options
            .max_memory
            .admit(b.memory_estimate(topo, &request.spec(topo, k)), String::new)
            .and_then(|()| pipeline_baseline(topo, request, b, k, options.max_memory))
            .ok()
            .map(Ok)?,
    };
    let built = checked.and_then(|checked| {
        // A baseline may split each NPU's share further (a ring's halves go each way).
        trial.chunks_per_npu = checked.chunks_per_npu();
        trial.synthesized_ps = Some(checked.report().collective_time_ps);
        evaluate(checked)
    });
    Some(match built {
        Ok((value, time_ps)) => {
            trial.simulated_ps = Some(time_ps);
            (trial, Ok(value))
        }
        Err(e) => {
            trial.refused = Some(e.to_string());
            (trial, Err(e))
        }
    })
}

/// How a search candidate is made at its K.
#[derive(Clone, Copy, Debug)]
enum Way {
    Synthesized { seed: u64, plan: Option<TreeShape> },
    Baseline(Baseline),
}

/// Why no trial gave a `what`: the only trial's reason, or every (K, seed) tried and the
/// last reason.
pub(super) fn nothing_found(trials: &[Trial], what: &str) -> String {
    let last = trials
        .iter()
        .rev()
        .find_map(|t| t.refused.as_deref())
        .unwrap_or("nothing was tried");
    let tried: Vec<String> = trials
        .iter()
        .map(|t| format!("K={} seed {}", t.chunks_per_npu, t.seed))
        .collect();
    match trials {
        [_] => format!("{} gives no {what}: {last}", tried[0]),
        _ => format!(
            "none of {} gives a {what} (the last: {last})",
            tried.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::middles;

    #[test]
    fn refinement_halves_the_gaps_beside_the_best_k() {
        let first = [1, 2, 4, 8, 16];
        assert_eq!(middles(&first, 4), vec![3, 6]);
        // At the largest K tried, only the gap below.
        assert_eq!(middles(&first, 16), vec![12]);
        // No whole K between 1 and 2.
        assert_eq!(middles(&first, 1), Vec::<usize>::new());
        assert_eq!(middles(&first, 2), vec![3]);
        // After 3 and 6 were tried around 4: only 5 is left beside it.
        assert_eq!(middles(&[1, 2, 4, 8, 16, 3, 6], 4), vec![5]);
    }
}
