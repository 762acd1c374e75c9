//! Choosing a program per band and merging bands: the heart of `compile`.

use super::candidate::{lowering_for, same_program};
use super::manifest::{
    sha256_hex, topology_hash, BandPrediction, Entry, LeftToNccl, Manifest, NcclBand, TopologyInfo,
};
use super::quick::by_schedules;
use super::{
    short_range, Band, Candidate, CompileOptions, CostOptions, Ranking, MANIFEST_FORMAT,
    MANIFEST_VERSION,
};
use crate::bounds::Bounds;
use crate::collective::{Collective, CollectiveKind};
use crate::cost::nccl::nccl_tuning;
use crate::cost::NcclPricer;
use crate::error::{Error, Result};
use crate::gpu::{Algorithm, Protocol};
use crate::msccl::{Proto, Target};
use crate::pipeline::{self, planning_applies, Checked, Lowered, Request, Verified};
use crate::topology::Topology;
use crate::tuner::TUNED;
use crate::units::{algbw_gbps, format_size, ps_to_us, Picos};
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What `compile` is doing, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Synthesizing, lowering and timing candidates: `done` of `total` (band, candidate)
    /// pairs.
    Candidates,
    /// Verifying the fastest programs and merging bands (timing programs at neighbouring
    /// bands): `done` of `total` (collective, placement) pairs.
    Selecting,
}

/// A progress report; `done` counts up to `total` within a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    pub done: usize,
    pub total: usize,
}

/// A candidate that did not make it into a band: it could not be built (synthesis or the
/// target's limits) or, worse, its program failed verification.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    pub collective: CollectiveKind,
    /// None when no placement was tried (the schedule itself failed).
    pub in_place: Option<bool>,
    pub band: Band,
    pub candidate: Candidate,
    /// The program was built and timed but `msccl::verify` found it wrong.
    pub failed_verification: bool,
    pub reason: String,
}

/// One file of a compiled set.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledFile {
    pub name: String,
    pub xml: String,
}

/// A compiled set, in memory: the manifest and its files (in the manifest's entry order).
#[derive(Clone, Debug)]
pub struct AlgorithmSet {
    pub manifest: Manifest,
    pub files: Vec<CompiledFile>,
    pub rejected: Vec<Rejection>,
}

/// One band of one collective and placement, every candidate timed.
struct Ranked {
    band: Band,
    bound_ps: Picos,
    /// (candidate index, time), fastest first, ties to the earlier candidate.
    ranked: Vec<(usize, Picos)>,
    /// The program of `ranked[0]`; the others are rebuilt only if it fails verification.
    fastest: Option<Lowered>,
    best_baseline: Option<(Candidate, Picos)>,
    /// Candidates that could not be built here (those whose schedule failed are listed
    /// with the first placement only).
    rejected: Vec<Rejection>,
}

/// The bands of one collective and placement, smallest first.
struct Sequence<'a> {
    kind: CollectiveKind,
    in_place: bool,
    /// Index of the placement among the collective's (`Placements::flags`).
    slot: usize,
    candidates: &'a [Candidate],
    bands: Vec<Ranked>,
}

/// Compiles the algorithms `options` ask for on `topo` (rank r on the r-th alive NPU).
/// `progress` is called from worker threads as work completes. Work runs on a thread pool
/// of its own with `options.jobs` threads, never on rayon's global pool, so a host process
/// embedding the library keeps its own.
pub fn compile(
    topo: &Topology,
    options: &CompileOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<AlgorithmSet> {
    options.validate()?;
    let bands = options.sizes.bands(options.band_octaves);
    for &kind in &options.collectives {
        Collective::over_all(topo, kind, None, 1, bands[0].min_bytes).map_err(|e| {
            Error::compile(format!(
                "{kind} cannot run on topology {}: {e}",
                topo.name()
            ))
        })?;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.jobs)
        .thread_name(|i| format!("tacos-compile-{i}"))
        .build()
        .map_err(|e| Error::compile(format!("cannot start worker threads: {e}")))?;
    pool.install(|| compile_on_pool(topo, options, &bands, progress))
}

fn compile_on_pool(
    topo: &Topology,
    options: &CompileOptions,
    bands: &[Band],
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<AlgorithmSet> {
    let groups: Vec<(CollectiveKind, Vec<Candidate>)> = options
        .collectives
        .iter()
        .map(|&kind| {
            let candidates = Candidate::all(
                kind,
                &options.chunk_candidates,
                options.seeds,
                planning_applies(topo, &Request::new(kind, 1)),
                options.baselines,
            );
            (kind, candidates)
        })
        .collect();
    let total = groups.iter().map(|g| g.1.len()).sum::<usize>() * bands.len();
    let done = AtomicUsize::new(0);
    let tick = || {
        let done = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress(Progress {
            stage: Stage::Candidates,
            done,
            total,
        })
    };
    progress(Progress {
        stage: Stage::Candidates,
        done: 0,
        total,
    });
    let results = select_runs(topo, options, bands, &groups, &tick, progress)?;
    let mut rejected = Vec::new();
    let mut runs = Vec::new();
    for (kind, in_place, kept, rejections) in results {
        runs.extend(kept.into_iter().map(|run| (kind, in_place, run)));
        rejected.extend(rejections);
    }
    let (runs, left_to_nccl) = match options.cost.as_ref() {
        Some(
            cost @ CostOptions {
                nccl_margin: Some(margin),
                ..
            },
        ) => {
            let pricers = nccl_pricers(topo, options, cost)?;
            let pricers: Vec<(CollectiveKind, &NcclPricer)> =
                pricers.iter().map(|(k, p)| (*k, p)).collect();
            against_nccl(&pricers, *margin, runs)?
        }
        _ => (runs, Vec::new()),
    };
    // Writing the XML (megabytes for large clusters) and hashing it, side by side.
    let files: Vec<(Entry, CompiledFile)> = runs
        .into_par_iter()
        .map(|(kind, in_place, run)| run.into_file(kind, in_place, &options.target))
        .collect::<Result<_>>()?;
    let (entries, files): (Vec<Entry>, Vec<CompiledFile>) = files.into_iter().unzip();
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_string(),
        format_version: MANIFEST_VERSION,
        tool_version: crate::VERSION.to_string(),
        topology: TopologyInfo {
            name: topo.name().to_string(),
            hash: topology_hash(topo),
            npus: topo.alive_npus().len(),
            links: topo.links().len(),
        },
        options: CompileOptions {
            jobs: 0,
            ..options.clone()
        },
        entries,
        left_to_nccl,
        returned_to_nccl: Vec::new(),
    };
    Ok(AlgorithmSet {
        manifest,
        files,
        rejected,
    })
}

/// The programs of every collective and placement of `groups` over `bands`, ranked as
/// the options say.
pub(super) fn select_runs(
    topo: &Topology,
    options: &CompileOptions,
    bands: &[Band],
    groups: &[(CollectiveKind, Vec<Candidate>)],
    tick: &(dyn Fn() + Sync),
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<Selected>> {
    Ok(match options.ranking {
        Ranking::Programs => {
            let bounds: Vec<Vec<Bounds>> = groups
                .par_iter()
                .map(|&(kind, _)| bounds_at(topo, kind, bands))
                .collect::<Result<_>>()?;
            by_programs(topo, options, bands, groups, &bounds, tick, progress)?
        }
        Ranking::Schedules => {
            let results = by_schedules(topo, options, bands, groups, tick)?;
            progress(Progress {
                stage: Stage::Selecting,
                done: results.len(),
                total: results.len(),
            });
            results
        }
    })
}

/// `kind`'s lower bound at each band's size, the max-flows done once.
pub(super) fn bounds_at(
    topo: &Topology,
    kind: CollectiveKind,
    bands: &[Band],
) -> Result<Vec<Bounds>> {
    let sizes: Vec<u64> = bands.iter().map(|b| b.min_bytes).collect();
    let collective = Collective::over_all(topo, kind, None, 1, sizes[0])?;
    Bounds::for_sizes(topo, &collective, &sizes)
}

/// The programs of one collective and placement, and the candidates rejected on the way.
pub(super) type Selected = (CollectiveKind, bool, Vec<Run>, Vec<Rejection>);

/// `Ranking::Programs`: every candidate of every band lowered and timed as a program,
/// bands judged side by side, then each (collective, placement) merged.
fn by_programs(
    topo: &Topology,
    options: &CompileOptions,
    bands: &[Band],
    groups: &[(CollectiveKind, Vec<Candidate>)],
    bounds: &[Vec<Bounds>],
    tick: &(dyn Fn() + Sync),
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<Selected>> {
    let work: Vec<(usize, usize)> = (0..groups.len())
        .flat_map(|g| (0..bands.len()).map(move |b| (g, b)))
        .collect();
    let judged: Vec<Vec<Ranked>> = work
        .par_iter()
        .map(|&(g, b)| {
            let (kind, candidates) = (groups[g].0, &groups[g].1);
            let bound_ps = bounds[g][b].best_ps();
            judge(topo, options, kind, bands[b], bound_ps, candidates, tick)
        })
        .collect::<Result<_>>()?;

    // Regroup by (collective, placement): each sequence is merged on its own.
    let mut sequences: Vec<Sequence> = Vec::new();
    for (&(g, _), per_slot) in work.iter().zip(judged) {
        let (kind, candidates) = (groups[g].0, &groups[g].1);
        let flags = options.placements.flags(kind);
        for (slot, ranked) in per_slot.into_iter().enumerate() {
            let found = sequences
                .iter_mut()
                .find(|s| s.kind == kind && s.slot == slot);
            match found {
                Some(s) => s.bands.push(ranked),
                None => sequences.push(Sequence {
                    kind,
                    in_place: flags[slot],
                    slot,
                    candidates,
                    bands: vec![ranked],
                }),
            }
        }
    }
    let count = sequences.len();
    let merged = AtomicUsize::new(0);
    progress(Progress {
        stage: Stage::Selecting,
        done: 0,
        total: count,
    });
    sequences
        .into_par_iter()
        .map(|seq| {
            let (kind, in_place) = (seq.kind, seq.in_place);
            let merged_runs = merge(topo, options, seq);
            progress(Progress {
                stage: Stage::Selecting,
                done: merged.fetch_add(1, Ordering::Relaxed) + 1,
                total: count,
            });
            let (runs, rejected) = merged_runs?;
            Ok((kind, in_place, runs, rejected))
        })
        .collect()
}

/// Every candidate's time per placement; the fastest program per placement is kept.
#[derive(Default)]
struct Trials {
    times: Vec<(usize, usize, Picos)>,
    best: Vec<Option<(usize, Lowered)>>,
    rejected: Vec<Rejection>,
}

impl Trials {
    /// Records a built program's time and keeps it if it is the fastest so far.
    fn keep(&mut self, slot: usize, index: usize, built: Lowered) {
        self.times.push((slot, index, built.time_ps()));
        self.offer(slot, index, built);
    }

    /// Keeps `built` if it beats the slot's best (ties to the earlier candidate).
    fn offer(&mut self, slot: usize, index: usize, built: Lowered) {
        if self.best.len() <= slot {
            self.best.resize_with(slot + 1, || None);
        }
        let better = self.best[slot]
            .as_ref()
            .map_or(true, |(i, b)| (built.time_ps(), index) < (b.time_ps(), *i));
        if better {
            self.best[slot] = Some((index, built));
        }
    }

    fn join(mut self, other: Trials) -> Trials {
        for (slot, best) in other.best.into_iter().enumerate() {
            if let Some((i, built)) = best {
                self.offer(slot, i, built);
            }
        }
        self.times.extend(other.times);
        self.rejected.extend(other.rejected);
        self
    }
}

/// Times every candidate of one band of `kind` for every placement.
fn judge(
    topo: &Topology,
    options: &CompileOptions,
    kind: CollectiveKind,
    band: Band,
    bound_ps: Picos,
    candidates: &[Candidate],
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<Ranked>> {
    let size = band.min_bytes;
    let proto = options.proto.for_size(size);
    let flags = options.placements.flags(kind);
    let ranks = topo.alive_npus().len();
    let rejection = |candidate: Candidate, in_place, reason: String| Rejection {
        collective: kind,
        in_place,
        band,
        candidate,
        failed_verification: false,
        reason,
    };
    let trials = candidates
        .par_iter()
        .enumerate()
        .map(|(index, candidate)| {
            let mut trials = Trials::default();
            if candidate.too_fine(ranks, size, options) {
                tick();
                return trials;
            }
            if candidate.too_large(kind, ranks, options) {
                let reason = format!(
                    "it needs more than the {} transfers the options allow",
                    options.max_transfers.unwrap_or(u64::MAX)
                );
                trials.rejected.push(rejection(*candidate, None, reason));
                tick();
                return trials;
            }
            match candidate.schedule(topo, kind, size) {
                Ok(schedule) => {
                    for (slot, &in_place) in flags.iter().enumerate() {
                        let built = timed_program(topo, &schedule, in_place, proto, options);
                        match built {
                            Ok(built) => trials.keep(slot, index, built),
                            Err(e) => trials.rejected.push(rejection(
                                *candidate,
                                Some(in_place),
                                e.message(),
                            )),
                        }
                    }
                }
                Err(e) => trials
                    .rejected
                    .push(rejection(*candidate, None, e.message())),
            }
            tick();
            trials
        })
        .reduce(Trials::default, Trials::join);
    let Trials {
        mut times,
        mut best,
        rejected,
    } = trials;
    times.sort_unstable_by_key(|&(slot, index, time)| (slot, time, index));
    best.resize_with(flags.len(), || None);
    Ok(flags
        .iter()
        .enumerate()
        .map(|(slot, &in_place)| {
            let ranked: Vec<(usize, Picos)> = times
                .iter()
                .filter(|t| t.0 == slot)
                .map(|t| (t.1, t.2))
                .collect();
            let best_baseline = ranked
                .iter()
                .find(|(i, _)| candidates[*i].is_baseline())
                .map(|&(i, t)| (candidates[i], t));
            let rejected = rejected
                .iter()
                .filter(|r| r.in_place.map_or(slot == 0, |p| p == in_place))
                .cloned()
                .collect();
            Ranked {
                band,
                bound_ps,
                ranked,
                fastest: best[slot].take().map(|(_, built)| built),
                best_baseline,
                rejected,
            }
        })
        .collect())
}

/// A candidate's program for one placement, protocol and target, timed at the size the
/// schedule was made for (its timer times it at other sizes).
pub(super) fn timed_program(
    topo: &Topology,
    checked: &Checked,
    in_place: bool,
    proto: Proto,
    options: &CompileOptions,
) -> Result<Lowered> {
    let lowering = lowering_for((in_place, proto, 1), &options.target);
    let built = pipeline::lower(topo, checked, &lowering)?;
    match &options.cost {
        // Where the program's threadblocks cannot fill a link at the protocol's channel
        // rate, copies of it on more channels (instances) may.
        Some(cost) => pipeline::priced(topo, built, &cost.executor(), Some(&lowering)),
        None => Ok(built),
    }
}

/// Bands served by one program: one file.
pub(super) struct Run {
    pub candidate: Candidate,
    /// The program; its timer times it at the sizes of the bands it may extend to.
    pub verified: Verified,
    pub bands: Vec<Served>,
}

/// A band a file serves, with the file's program's time there.
#[derive(Clone, Copy)]
pub(super) struct Served {
    pub band: Band,
    pub time_ps: Picos,
    pub bound_ps: Picos,
    pub best_baseline: Option<(Candidate, Picos)>,
    /// NCCL's best choice there (algorithm, protocol, us) and the margin the program had
    /// to beat it by, where NCCL competed.
    pub nccl: Option<(Algorithm, Protocol, f64, f64)>,
}

/// A run of one collective and placement.
pub(super) type KindRun = (CollectiveKind, bool, Run);

/// NCCL's own algorithms for the collectives of `options` it tunes, priced by `cost`'s
/// executor on `topo`. All-to-All and the others NCCL runs as point-to-point sends, which
/// the model does not price: they get no pricer, and no competition.
fn nccl_pricers(
    topo: &Topology,
    options: &CompileOptions,
    cost: &CostOptions,
) -> Result<Vec<(CollectiveKind, NcclPricer)>> {
    let tuned: Vec<CollectiveKind> = options
        .collectives
        .iter()
        .copied()
        .filter(|k| TUNED.contains(k))
        .collect();
    if tuned.is_empty() {
        return Ok(Vec::new());
    }
    let executor = cost.executor();
    let version = executor.model.nccl_version();
    let tuning = Arc::new(nccl_tuning(
        topo,
        executor.domain_size,
        executor.gpu,
        version,
    )?);
    tuned
        .into_iter()
        .map(|kind| {
            let model = executor.model.clone();
            let domain = executor.domain_size;
            let pricer = NcclPricer::with_tuning(topo, kind, domain, model, tuning.clone())?;
            Ok((kind, pricer))
        })
        .collect()
}

/// Each band against NCCL's best choice for it (`pricers`, by collective): of the
/// algorithms NCCL has enabled, the one the executor cost model prices fastest. A band
/// stays with its program only where the program is predicted faster by more than the
/// margin: the larger of `margin` and the profile's own measured error at the band's size
/// (a gain the model cannot tell from its error is no gain). The others are left to NCCL,
/// and a run that loses a band in its middle becomes two files.
pub(super) fn against_nccl(
    pricers: &[(CollectiveKind, &NcclPricer)],
    margin: f64,
    runs: Vec<KindRun>,
) -> Result<(Vec<KindRun>, Vec<LeftToNccl>)> {
    let mut kept = Vec::new();
    let mut left = Vec::new();
    for (kind, in_place, run) in runs {
        let Some((_, pricer)) = pricers.iter().find(|(k, _)| *k == kind) else {
            kept.push((kind, in_place, run));
            continue;
        };
        let mut current: Vec<Served> = Vec::new();
        for mut served in run.bands.iter().copied() {
            let bytes = served.band.min_bytes;
            let nccl = pricer.best_price(bytes)?;
            let needed = margin.max(pricer.model().error_at(bytes));
            served.nccl = Some((nccl.algorithm, nccl.protocol, nccl.time_us, needed));
            let program_us = ps_to_us(served.time_ps);
            if program_us * (1.0 + needed) < nccl.time_us {
                current.push(served);
                continue;
            }
            left.push(LeftToNccl {
                collective: kind,
                in_place,
                min_bytes: served.band.min_bytes,
                max_bytes: served.band.max_bytes,
                program_us,
                nccl: nccl_band(served.nccl).expect("just priced"),
            });
            if !current.is_empty() {
                kept.push((kind, in_place, run.with_bands(std::mem::take(&mut current))));
            }
        }
        if !current.is_empty() {
            kept.push((kind, in_place, run.with_bands(current)));
        }
    }
    Ok((kept, left))
}

/// The manifest's record of NCCL's best choice.
fn nccl_band(nccl: Option<(Algorithm, Protocol, f64, f64)>) -> Option<NcclBand> {
    nccl.map(|(algorithm, protocol, time_us, margin)| NcclBand {
        algorithm: algorithm.name().to_string(),
        protocol: protocol.name().to_string(),
        time_us,
        margin: Some(margin),
    })
}

/// Picks the programs of one collective and placement, smallest band first: a band
/// joins the file before it when that file's program has the same protocol and is no
/// slower at the band's size than the band's fastest candidate; otherwise the band starts
/// a file with its fastest candidate whose program passes `msccl::verify` (so only
/// programs that are written are verified, each once).
fn merge(
    topo: &Topology,
    options: &CompileOptions,
    seq: Sequence,
) -> Result<(Vec<Run>, Vec<Rejection>)> {
    let mut runs: Vec<Run> = Vec::new();
    let mut rejected = Vec::new();
    for mut r in seq.bands {
        let size = r.band.min_bytes;
        let entry = |time_ps| Served {
            band: r.band,
            time_ps,
            bound_ps: r.bound_ps,
            best_baseline: r.best_baseline,
            nccl: None,
        };
        if let (Some(run), Some(fastest), Some(&(_, best_ps))) =
            (runs.last_mut(), &r.fastest, r.ranked.first())
        {
            let (program, fastest) = (run.verified.program(), fastest.program());
            if program.proto == fastest.proto {
                let time_ps = if same_program(program, fastest) {
                    best_ps
                } else {
                    let (program, timer) = (run.verified.program(), run.verified.timer());
                    options.program_time_ps(topo, program, timer, size)?
                };
                if time_ps <= best_ps {
                    run.bands.push(entry(time_ps));
                    rejected.append(&mut r.rejected);
                    continue;
                }
            }
        }
        let mut started = None;
        for (rank, &(index, time_ps)) in r.ranked.iter().enumerate() {
            let candidate = seq.candidates[index];
            let built = match r.fastest.take().filter(|_| rank == 0) {
                Some(built) => built,
                None => {
                    let checked = candidate.schedule(topo, seq.kind, size)?;
                    let proto = options.proto.for_size(size);
                    timed_program(topo, &checked, seq.in_place, proto, options)?
                }
            };
            let claim = (seq.kind, seq.in_place, r.band, candidate);
            match verified(built, claim, &options.target) {
                Ok(verified) => {
                    started = Some(Run {
                        candidate,
                        verified,
                        bands: vec![entry(time_ps)],
                    });
                    break;
                }
                Err(rejection) => r.rejected.push(rejection),
            }
        }
        let Some(run) = started else {
            return Err(no_program(
                seq.kind,
                seq.in_place,
                size,
                &options.target,
                &r.rejected,
            ));
        };
        runs.push(run);
        rejected.append(&mut r.rejected);
    }
    Ok((runs, rejected))
}

/// What a program is for: its collective, placement, band and candidate.
pub(super) type Claim = (CollectiveKind, bool, Band, Candidate);

/// The program once the pipeline verified it for the target (its loader rules and
/// `msccl::verify`), else why the candidate is rejected.
pub(super) fn verified(
    built: Lowered,
    (collective, in_place, band, candidate): Claim,
    target: &Target,
) -> std::result::Result<Verified, Rejection> {
    built.verify(target).map_err(|refusal| Rejection {
        collective,
        in_place: Some(in_place),
        band,
        candidate,
        failed_verification: refusal.failed_verification,
        reason: refusal.reason,
    })
}

/// The error when no candidate of a band gives a program that can be written.
pub(super) fn no_program(
    collective: CollectiveKind,
    in_place: bool,
    size: u64,
    target: &Target,
    rejected: &[Rejection],
) -> Error {
    let placement = if in_place { "in place" } else { "out of place" };
    let why = rejected.last().map_or("no candidate".to_string(), |x| {
        format!("the last, {}: {}", x.candidate, x.reason)
    });
    Error::compile(format!(
        "no candidate for {collective} {placement} at {} gives a correct program within the limits of target {target} ({why})",
        format_size(size)
    ))
}

impl Run {
    /// The same program serving `bands` (a part of the run's).
    fn with_bands(&self, bands: Vec<Served>) -> Run {
        Run {
            candidate: self.candidate,
            verified: self.verified.clone(),
            bands,
        }
    }

    /// The run's manifest entry and file: its program for the sizes of its bands.
    pub(super) fn into_file(
        self,
        kind: CollectiveKind,
        in_place: bool,
        target: &Target,
    ) -> Result<(Entry, CompiledFile)> {
        let min_bytes = self.bands.first().expect("a run has a band").band.min_bytes;
        let max_bytes = self.bands.last().expect("a run has a band").band.max_bytes;
        let verified = self
            .verified
            .with_size_range(min_bytes, max_bytes, target)?;
        let xml = verified.xml();
        let program = verified.program();
        let name = file_name(kind, in_place, min_bytes, max_bytes);
        let bands = self
            .bands
            .iter()
            .map(|served| {
                let (size, time_ps, bound_ps) =
                    (served.band.min_bytes, served.time_ps, served.bound_ps);
                let baseline = served.best_baseline;
                BandPrediction {
                    size_bytes: size,
                    time_us: ps_to_us(time_ps),
                    algbw_gbps: algbw_gbps(size, time_ps),
                    bound_us: ps_to_us(bound_ps),
                    efficiency: ratio(bound_ps, time_ps),
                    best_baseline: baseline.map(|b| b.0),
                    best_baseline_us: baseline.map(|b| ps_to_us(b.1)),
                    speedup_vs_baseline: baseline.map(|b| ratio(b.1, time_ps)),
                    nccl: nccl_band(served.nccl),
                    measured: Vec::new(),
                }
            })
            .collect();
        let entry = Entry {
            collective: kind,
            in_place,
            min_bytes,
            max_bytes,
            file: name.clone(),
            sha256: sha256_hex(xml.as_bytes()),
            proto: program.proto.name().to_string(),
            channels: program.nchannels,
            chunks_per_loop: program.nchunksperloop,
            algorithm: self.candidate,
            bands,
        };
        Ok((entry, CompiledFile { name, xml }))
    }
}

/// The name of the file serving `kind` in place or not for `min_bytes..=max_bytes`:
/// `allgather-inplace-1K-64K.xml`. Ranges of one collective and placement do not overlap,
/// so names within a set differ.
pub(super) fn file_name(
    kind: CollectiveKind,
    in_place: bool,
    min_bytes: u64,
    max_bytes: u64,
) -> String {
    let placement = if in_place { "inplace" } else { "outofplace" };
    format!(
        "{kind}-{placement}-{}.xml",
        short_range(min_bytes, max_bytes)
    )
}

/// a / b, 1 when b is 0.
fn ratio(a: Picos, b: Picos) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}
