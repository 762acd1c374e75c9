//! The one path from a request to an algorithm the product emits: synthesis, the schedule
//! checker, lowering to MSCCL for a target, the XML verifier for that target, and timing,
//! with the search over K (chunks per NPU) and seeds.
//!
//! Every front end that emits an algorithm goes through here: `tacos synth` (schedules,
//! and programs with `--xml`; several collectives at once through [`concurrent`], as
//! schedules only), the C API, and `compile` (which keeps its own band ranking
//! and merging but lowers and verifies each program it keeps with [`lower`] and
//! [`Lowered::verify`]). A [`Verified`] can only be made by [`Lowered::verify`] after the
//! program passed the target's loader rules and `msccl::verify`, so whatever holds one
//! holds a program that may be written.
//!
//! Defaults, the same in every front end: K chosen automatically ([`Chunks::Auto`] over
//! [`AUTO_CHUNKS`]) by the simulated time of what is emitted, seed 0 (`tacos synth` tries
//! [`default_seeds`] seeds from `--seed`), the executor's target
//! (`msccl::Target::default`). Trials run side by side on the caller's rayon thread pool.

mod baselines;
pub mod memory;

use baselines::baseline as pipeline_baseline;
pub use baselines::{baseline, MAX_BASELINE_NPUS};

use crate::baselines::Baseline;
use crate::budget::MemoryLimit;
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::cost::Executor;
use crate::error::{Error, Result};
use crate::fsio;
use crate::msccl::{
    self, lower::check_shape, LowerOptions, Profile, Program, ProgramTimer, Target, VerifyOptions,
};
use crate::mscclpp::{Plan, PlanOptions, PlanTimer};
use crate::schedule::check_stream;
use crate::schedule::stream::{StreamHeader, StreamReader, StreamWriter};
use crate::schedule::Network;
use crate::schedule::{check, check_concurrent, check_data_flow, CheckReport, Schedule};
use crate::sim::simulate_schedule;
use crate::synth::{
    prepare_streamed, synthesize_concurrent, AllReduceTimes, Prepared, Streamed, SynthOptions,
};
use crate::topology::{NpuId, Topology};
use crate::units::Picos;
use rayon::prelude::*;
use std::io::{BufReader, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The K values an automatic choice tries.
pub const AUTO_CHUNKS: [usize; 4] = [1, 2, 4, 8];

/// The K values a command's default search ([`default_chunks`]) may try: those of
/// [`AUTO_CHUNKS`] and, where the search's budget leaves room (small problems), 16, which
/// pipelines a ring's or a slow dimension's chunks finer.
pub const SEARCH_CHUNKS: [usize; 5] = [1, 2, 4, 8, 16];

/// K, the chunks each NPU's share is split into: more chunks pipeline better over
/// multi-hop paths, but every chunk pays each link's latency, so the best K depends on the
/// size and is found by trying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Chunks {
    Fixed(usize),
    /// Each of [`AUTO_CHUNKS`], the fastest kept.
    #[default]
    Auto,
    /// Each of [`SEARCH_CHUNKS`] up to this K (1 at least), the fastest kept: the search
    /// [`default_chunks`] sizes to the problem.
    UpTo(usize),
}

impl Chunks {
    fn candidates(self) -> Vec<usize> {
        match self {
            Chunks::Fixed(k) => vec![k],
            Chunks::Auto => AUTO_CHUNKS.to_vec(),
            Chunks::UpTo(most) => SEARCH_CHUNKS
                .into_iter()
                .filter(|&k| k == 1 || k <= most)
                .collect(),
        }
    }

    /// The one K tried, where only one is.
    pub fn only(self) -> Option<usize> {
        match self.candidates().as_slice() {
            &[k] => Some(k),
            _ => None,
        }
    }
}

/// The K search a command makes unless told: the values of [`SEARCH_CHUNKS`] up to the
/// largest whose search, with the seeds [`default_seeds`] gives it, matches at most
/// [`DEFAULT_SEARCH_WORK`] chunk deliveries (NPUs^2 x K summed over every K and seed,
/// some 0.3 s of trials), so that small and mid-sized problems get the best K and a large
/// one is not synthesized fifteen times over: up to 16 to 64 NPUs, 8 to 128, K = 1 alone
/// from 512 NPUs on.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::pipeline::{default_chunks, Chunks, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let request = Request::new(CollectiveKind::AllGather, 1 << 30);
/// let torus = parse_spec("torus:4x4", &SpecDefaults::default()).unwrap();
/// assert_eq!(default_chunks(&torus, &request), Chunks::UpTo(16));
/// let mesh = parse_spec("mesh:32x32", &SpecDefaults::default()).unwrap();
/// assert_eq!(default_chunks(&mesh, &request), Chunks::UpTo(1));
/// ```
pub fn default_chunks(topo: &Topology, request: &Request) -> Chunks {
    let squared = (participants(topo, request) as u64).pow(2);
    let mut most = 1;
    for (i, &k) in SEARCH_CHUNKS.iter().enumerate() {
        let seeds = seeds_for_work(squared.saturating_mul(k as u64)) as u64;
        let summed: u64 = SEARCH_CHUNKS[..=i].iter().map(|&k| k as u64).sum();
        if seeds.saturating_mul(squared).saturating_mul(summed) <= DEFAULT_SEARCH_WORK {
            most = k;
        }
    }
    Chunks::UpTo(most)
}

/// Chunk deliveries (NPUs^2 x K, summed over the trials) a default search may match.
pub const DEFAULT_SEARCH_WORK: u64 = 1 << 19;

/// What to synthesize: a collective of a size over some NPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub kind: CollectiveKind,
    /// The buffer every NPU ends with, in bytes (nccl-tests' convention).
    pub size_bytes: u64,
    /// The NPUs taking part, in rank order; by default every alive NPU.
    pub npus: Option<Vec<NpuId>>,
    /// The root of a rooted collective; by default the first NPU taking part.
    pub root: Option<NpuId>,
}

impl Request {
    /// `kind` of `size_bytes` over every alive NPU, rooted (if at all) at the first.
    pub fn new(kind: CollectiveKind, size_bytes: u64) -> Request {
        Request {
            kind,
            size_bytes,
            npus: None,
            root: None,
        }
    }

    /// The collective with `k` chunks per NPU.
    pub fn spec(&self, topo: &Topology, k: usize) -> CollectiveSpec {
        let npus = self.npus.clone().unwrap_or_else(|| topo.alive_npus());
        let root = match (self.kind.has_root(), self.root) {
            (true, None) => npus.first().copied(),
            (_, root) => root,
        };
        CollectiveSpec {
            kind: self.kind,
            root,
            npus,
            chunks_per_npu: k,
            size_bytes: self.size_bytes,
        }
    }
}

/// How many seeds a search tries unless told: several where a synthesis is quick enough
/// that more go unnoticed (a single seed lands on a worse schedule than the C++ TACOS's
/// median in up to two of three seeds on small meshes and tori), one where each takes
/// long. The work grows with the chunk deliveries, NPUs^2 x K at the largest K tried: up
/// to 2^14 (64 NPUs at K = 4, a few ms a trial) 8 seeds, up to 2^16 (256 NPUs at K = 1,
/// some 40 ms) 4, up to 2^18 2, beyond that 1; on two cores each adds at most about
/// 0.1 s.
pub fn default_seeds(topo: &Topology, request: &Request, chunks: Chunks) -> usize {
    let npus = participants(topo, request) as u64;
    let k = chunks.candidates().into_iter().max().unwrap_or(1) as u64;
    seeds_for_work(npus.saturating_mul(npus).saturating_mul(k))
}

/// [`default_seeds`] for a matching of `work` chunk deliveries (NPUs^2 x K).
fn seeds_for_work(work: u64) -> usize {
    match work {
        0..=0x4000 => 8,
        0x4001..=0x1_0000 => 4,
        0x1_0001..=0x4_0000 => 2,
        _ => 1,
    }
}

/// The NPUs taking part in `request`.
fn participants(topo: &Topology, request: &Request) -> usize {
    request
        .npus
        .as_ref()
        .map_or_else(|| topo.alive_npus().len(), Vec::len)
}

/// How to search and what to emit.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub chunks: Chunks,
    /// Seeds of the synthesizer's random choices, each tried with each K.
    pub seeds: Vec<u64>,
    /// Placement, protocol, size range and target of the program. Without a name the
    /// program is named `tacos-{collective}-k{K}-s{seed}` (`-p{seed}` planned),
    /// as `compile` names it.
    pub lowering: LowerOptions,
    /// The memory a trial may hold; trials run side by side only while their estimates
    /// fit it together. (The steps themselves, which take no options, also hold to the
    /// process's limit, `MemoryLimit::default()`, which this defaults to.)
    pub max_memory: MemoryLimit,
    /// Each trial synthesized replicated (`synth::Replicated`): one node matched, its
    /// transfers shifted onto every other.
    pub replicate: bool,
    /// Each K also tried with the chunks' ways planned (`SynthOptions::planned`, with the
    /// first seed) where planning applies ([`planning_applies`], not replicated): the
    /// faster way is kept.
    pub planned: bool,
    /// How [`program`] times the programs it ranks and keeps: by the executor cost model
    /// where given (what `tacos simulate --xml` and `tacos verify` say of the same file),
    /// else by bare alpha-beta messages.
    pub executor: Option<Executor>,
    /// With `executor`: each program is also lowered on as many instances as its busiest
    /// link needs, the faster kept, as `compile` does ([`priced`]).
    pub fill_instances: bool,
    /// At each K, the baselines that define the collective are candidates too ([`baseline`],
    /// up to [`MAX_BASELINE_NPUS`]), so that what is kept is never slower than one of them.
    pub baselines: bool,
}

impl Options {
    /// What the synthesizer is told for a trial with `seed`, planned or not.
    fn synth(&self, seed: u64, planned: bool) -> SynthOptions {
        SynthOptions {
            seed,
            replicate: self.replicate,
            planned,
        }
    }

    /// The (seed, planned) trials made at each K: every seed, then (where planning applies)
    /// planned with the first seed, so that ties go to the free matching.
    fn ways(&self, topo: &Topology, request: &Request) -> Vec<(u64, bool)> {
        let plans = self.planned && !self.replicate && planning_applies(topo, request);
        let free = self.seeds.iter().map(|&seed| (seed, false));
        let planned = self
            .seeds
            .first()
            .filter(|_| plans)
            .map(|&seed| (seed, true));
        free.chain(planned).collect()
    }

    /// The baselines tried at `k` beside the synthesized trials: none where K is fixed,
    /// which asks for the synthesizer's schedule at that K.
    fn baselines(&self, topo: &Topology, request: &Request, k: usize) -> Vec<Baseline> {
        match self.baselines && !matches!(self.chunks, Chunks::Fixed(_)) {
            true => baselines::tried(request.kind, participants(topo, request), k),
            false => Vec::new(),
        }
    }

    /// Whether `schedule` ranks its candidates by simulation: one candidate leaves nothing
    /// to rank, and simulating it can take longer than synthesizing it (a 64x64 mesh).
    fn ranks_candidates(&self, topo: &Topology, request: &Request) -> bool {
        self.chunks.candidates().len() > 1
            || self.seeds.len() > 1
            || !self.baselines(topo, request, 1).is_empty()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunks: Chunks::Auto,
            seeds: vec![0],
            lowering: LowerOptions::default(),
            max_memory: MemoryLimit::default(),
            replicate: false,
            planned: true,
            executor: None,
            fill_instances: false,
            baselines: true,
        }
    }
}

/// Most NPUs a trial with planned trees is made for: a tree per chunk holds a link per NPU
/// (8 bytes with its subtree's size), NPUs^2 x K in all, and the search stays within the
/// time `default_seeds` budgets.
pub const MAX_TREE_NPUS: usize = 512;

/// Whether a synthesis of `request` may plan its chunks' ways (`SynthOptions::planned`):
/// paths for a collective whose chunks have one target each (All-to-All, Gather,
/// Scatter), trees for one whose chunks are copied or reduced along trees (All-Gather,
/// Reduce-Scatter, All-Reduce, Broadcast, Reduce) over every alive NPU, at most
/// [`MAX_TREE_NPUS`] of them (synthesized held and not replicated: the search's
/// `Options` say).
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::pipeline::{planning_applies, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
/// assert!(planning_applies(&ring, &Request::new(CollectiveKind::AllReduce, 1 << 20)));
/// let some = Request {
///     npus: Some(vec![0, 2, 4]),
///     ..Request::new(CollectiveKind::AllGather, 1 << 20)
/// };
/// assert!(!planning_applies(&ring, &some));
/// ```
pub fn planning_applies(topo: &Topology, request: &Request) -> bool {
    use CollectiveKind::*;
    let alive = topo.alive_npus();
    let every_npu = request.npus.as_ref().map_or(true, |n| n == &alive);
    match request.kind {
        AllToAll | Gather | Scatter => true,
        AllGather | ReduceScatter | AllReduce | Broadcast | Reduce => {
            every_npu && alive.len() <= MAX_TREE_NPUS
        }
    }
}

/// A schedule that passed `schedule::check` on its topology. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Checked(Arc<CheckedParts>);

#[derive(Clone, Debug)]
struct CheckedParts {
    schedule: Schedule,
    report: CheckReport,
    all_reduce: Option<AllReduceTimes>,
    seed: Option<u64>,
    /// Whether the synthesizer planned its chunks' ways.
    planned: bool,
    /// The baseline it is, where it is one.
    baseline: Option<Baseline>,
}

impl Checked {
    /// Checks a timed `schedule` (from a file, say) on `topo` with `schedule::check`.
    pub fn new(schedule: Schedule, topo: &Topology) -> Result<Checked> {
        let report = check(&schedule, topo);
        Checked::with(schedule, report, None, None, false)
    }

    /// Checks `baseline`'s schedule whose times are an order, not a promise (the simulator
    /// routes and times its sends) with `schedule::check_data_flow`; its report's time is
    /// then only the number of steps. [`baseline`] gives one timed by the simulator.
    pub fn order_only(baseline: Baseline, schedule: Schedule, topo: &Topology) -> Result<Checked> {
        let report = check_data_flow(&schedule, topo);
        Checked::with(schedule, report, None, None, false).map(|c| c.of(baseline))
    }

    /// The same schedule, as `baseline`'s.
    fn of(self, baseline: Baseline) -> Checked {
        let mut parts = Arc::unwrap_or_clone(self.0);
        parts.baseline = Some(baseline);
        Checked(Arc::new(parts))
    }

    fn with(
        schedule: Schedule,
        report: Result<CheckReport>,
        all_reduce: Option<AllReduceTimes>,
        seed: Option<u64>,
        planned: bool,
    ) -> Result<Checked> {
        let report = report.map_err(|e| {
            Error::Schedule(format!(
                "the {} schedule failed the checker: {e}",
                schedule.collective.kind
            ))
        })?;
        Ok(Checked(Arc::new(CheckedParts {
            schedule,
            report,
            all_reduce,
            seed,
            planned,
            baseline: None,
        })))
    }

    pub fn schedule(&self) -> &Schedule {
        &self.0.schedule
    }

    /// What the checker found: the schedule's time and its transfers.
    pub fn report(&self) -> &CheckReport {
        &self.0.report
    }

    /// For a synthesized All-Reduce, how it was composed.
    pub fn all_reduce(&self) -> Option<&AllReduceTimes> {
        self.0.all_reduce.as_ref()
    }

    /// The synthesizer's seed; None for a schedule made otherwise.
    pub fn seed(&self) -> Option<u64> {
        self.0.seed
    }

    /// Whether the synthesizer planned its chunks' ways (`SynthOptions::planned`).
    pub fn planned(&self) -> bool {
        self.0.planned
    }

    /// The baseline the schedule is, where it is one rather than synthesized.
    pub fn baseline(&self) -> Option<Baseline> {
        self.0.baseline
    }

    pub fn chunks_per_npu(&self) -> usize {
        self.0.schedule.collective.chunks_per_npu
    }
}

/// Synthesizes `request` with `k` chunks per NPU as `options` say, and checks the
/// schedule.
pub fn synthesize(
    topo: &Topology,
    request: &Request,
    k: usize,
    options: &SynthOptions,
) -> Result<Checked> {
    let collective = Collective::new(topo, request.spec(topo, k))?;
    let mut synthesis = synthesize_concurrent(topo, std::slice::from_ref(&collective), options)?;
    let schedule = synthesis.schedules.remove(0);
    let report = check(&schedule, topo);
    Checked::with(
        schedule,
        report,
        synthesis.all_reduce,
        Some(options.seed),
        options.planned,
    )
}

/// How often (in transfers written) `synthesize_to_stream` reports progress.
pub const STREAM_PROGRESS_EVERY: u64 = 1 << 22;

/// A collective synthesized into a transfer stream file and checked from that file.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamedChecked {
    pub streamed: Streamed,
    pub report: CheckReport,
    /// Wall time from the start until the synthesis had written its last transfer.
    pub synthesized: Duration,
    /// Wall time from the start until the checker had read and checked the whole file.
    pub checked: Duration,
}

/// Synthesizes `collective` as `options` say into a transfer stream file at `path`
/// (`schedule::stream`, recording the network), written as it is made, so no more than
/// the matchings themselves are held (`synth::prepare_streamed`: a copying collective
/// matched as it is written; a combining one's matchings spooled beside `path` first, an
/// All-Reduce's two side by side where its halves are not one matching), and checks the
/// file (`schedule::check_stream`), reading it as it is written on another of the pool's
/// threads where there is one, else after.
/// The file is renamed into place only once it checks. `progress` hears, every
/// [`STREAM_PROGRESS_EVERY`] or so, the transfers spooled plus those written
/// (`synth::spooled_matchings` says how many matchings are spooled first).
pub fn synthesize_to_stream(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
    path: &Path,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<StreamedChecked> {
    let header = StreamHeader::new(
        topo.name(),
        collective.spec().clone(),
        collective.chunk_bytes(),
        Some(Network::of(topo)),
    );
    let started = Instant::now();
    let shared = std::sync::Mutex::new(progress);
    let tell = |n: u64| {
        if let Ok(mut progress) = shared.lock() {
            progress(n);
        }
    };
    let mut file = fsio::AtomicFile::create(path)?;
    let temp = file.temp_path().to_path_buf();
    let prepared = prepare_streamed(topo, collective, options, path, &tell)?;
    let spooled = prepared.spooled();
    let written = AtomicBool::new(false);
    // A checker that refuses the file stops the synthesis rather than wait for its end.
    let refused = AtomicBool::new(false);
    let (made, checked) = rayon::join(
        || {
            // However the writing ends, so that the checker never waits for bytes that
            // will not come.
            let _finished = fsio::SetOnDrop(&written);
            let out = file.writer();
            let progress = |n| tell(spooled + n);
            let made = write_stream(prepared, &header, out, path, &progress, &refused)
                .and_then(|m| out.flush().map(|()| m).map_err(|e| Error::io(path, e)));
            (made, started.elapsed())
        },
        || {
            let checked = (|| {
                let following = fsio::Following::open(&temp, &written)?;
                let reader = BufReader::with_capacity(1 << 16, following);
                let report = check_stream(
                    StreamReader::new(reader, &path.display().to_string())?,
                    topo,
                )?;
                Ok::<_, Error>((report, started.elapsed()))
            })();
            if checked.is_err() {
                refused.store(true, Ordering::Release);
            }
            checked
        },
    );
    // The checker's verdict first: where it refused, the synthesis only stopped.
    let (report, checked) = checked?;
    let (made, synthesized) = made;
    let streamed = made?;
    if report.transfers as u64 != streamed.transfers {
        return Err(Error::Schedule(format!(
            "{}: {} transfers read back where {} were written",
            path.display(),
            report.transfers,
            streamed.transfers
        )));
    }
    file.commit()?;
    Ok(StreamedChecked {
        streamed,
        report,
        synthesized,
        checked,
    })
}

/// How often (in transfers written) the writer looks whether the checker refused the file.
const REFUSAL_EVERY: u64 = 1 << 12;

/// A prepared streamed synthesis written to `out` as a transfer stream; it stops once
/// `refused` is set.
fn write_stream(
    prepared: Prepared<'_>,
    header: &StreamHeader,
    out: &mut (dyn Write + Send),
    path: &Path,
    progress: &(dyn Fn(u64) + Sync),
    refused: &AtomicBool,
) -> Result<Streamed> {
    let io = |e| Error::io(path, e);
    let mut stream = StreamWriter::new(out, header).map_err(io)?;
    let mut count = 0u64;
    let streamed = prepared.emit(&mut |t| {
        stream.push(&t).map_err(io)?;
        count += 1;
        if count % REFUSAL_EVERY == 0 && refused.load(Ordering::Acquire) {
            return Err(Error::Synthesis(
                "stopped: the checker refused what was written".into(),
            ));
        }
        if count % STREAM_PROGRESS_EVERY == 0 {
            progress(count);
        }
        Ok(())
    })?;
    stream.finish().map_err(io)?;
    Ok(streamed)
}

/// Synthesizes `requests` together with `k` chunks per NPU and `seed`, as one matching so
/// that they share links without contention (groups running their collectives at the same
/// time), and checks each schedule alone and all of them together
/// (`schedule::check_concurrent`). One schedule per request, in order; a synthesis with an
/// All-Reduce gives each All-Reduce's schedule the composition's times.
pub fn concurrent(
    topo: &Topology,
    requests: &[Request],
    k: usize,
    seed: u64,
) -> Result<Vec<Checked>> {
    let collectives = requests
        .iter()
        .map(|r| Collective::new(topo, r.spec(topo, k)))
        .collect::<Result<Vec<_>>>()?;
    let synthesis = synthesize_concurrent(topo, &collectives, &SynthOptions::seeded(seed))?;
    let reports = check_concurrent(&synthesis.schedules, topo).map_err(|e| {
        Error::Schedule(format!(
            "the schedules synthesized together failed the checker: {e}"
        ))
    })?;
    synthesis
        .schedules
        .into_iter()
        .zip(reports)
        .map(|(schedule, report)| {
            let all_reduce = synthesis
                .all_reduce
                .clone()
                .filter(|_| schedule.collective.kind == CollectiveKind::AllReduce);
            Checked::with(schedule, Ok(report), all_reduce, Some(seed), false)
        })
        .collect()
}

/// A checked schedule lowered to a program and timed, not yet verified: it cannot be
/// written until [`Lowered::verify`] makes it a [`Verified`].
#[derive(Clone, Debug)]
pub struct Lowered {
    checked: Checked,
    program: Program,
    timer: ProgramTimer,
    time_ps: Picos,
}

impl Lowered {
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program's simulated time at the schedule's size.
    pub fn time_ps(&self) -> Picos {
        self.time_ps
    }

    /// Times the program at other sizes.
    pub fn timer(&self) -> &ProgramTimer {
        &self.timer
    }

    /// The same program with its time at the schedule's size priced another way (the
    /// executor cost model's).
    pub fn retimed(self, time_ps: Picos) -> Lowered {
        Lowered { time_ps, ..self }
    }

    pub fn checked(&self) -> &Checked {
        &self.checked
    }

    /// The program, once it keeps to `target`'s loader rules and `msccl::verify` finds it
    /// computes its collective.
    pub fn verify(self, target: &Target) -> std::result::Result<Verified, Refusal> {
        let options = VerifyOptions {
            target: target.clone(),
            ..VerifyOptions::default()
        };
        let report = msccl::verify(&self.program, &options);
        if let Some(broken) = report.rule_breaks.first() {
            return Err(Refusal {
                failed_verification: false,
                reason: format!("target {target} would refuse the program: {broken}"),
            });
        }
        if !report.computes() {
            let first = report
                .problems
                .first()
                .map_or_else(|| "unlisted problems".to_string(), |p| p.to_string());
            return Err(Refusal {
                failed_verification: true,
                reason: format!("the lowered program failed verification (please report): {first}"),
            });
        }
        Ok(Verified(self))
    }
}

/// Why a lowered program may not be emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The verifier found the program wrong (rather than the loader refusing it).
    pub failed_verification: bool,
    pub reason: String,
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        Error::Msccl(r.reason)
    }
}

/// Lowers `checked` with `lowering` and times the program at the schedule's size, rank r
/// on the collective's r-th NPU.
pub fn lower(topo: &Topology, checked: &Checked, lowering: &LowerOptions) -> Result<Lowered> {
    let schedule = checked.schedule();
    let named;
    let kind = schedule.collective.kind;
    let name = match (checked.baseline(), checked.seed()) {
        (Some(baseline), _) => Some(format!("tacos-{kind}-{baseline}")),
        (None, Some(seed)) => {
            let way = if checked.planned() { 'p' } else { 's' };
            let k = schedule.collective.chunks_per_npu;
            Some(format!("tacos-{kind}-k{k}-{way}{seed}"))
        }
        (None, None) => None,
    };
    let lowering = match (&lowering.name, name) {
        (None, Some(name)) => {
            named = LowerOptions {
                name: Some(name),
                ..lowering.clone()
            };
            &named
        }
        _ => lowering,
    };
    let program = msccl::lower(schedule, topo, lowering)?;
    #[cfg(feature = "test-hooks")]
    let program = test_hooks::corrupted(program);
    let timer = ProgramTimer::new(topo, &program, &schedule.collective.npus)?;
    let time_ps = timer
        .simulate(topo, schedule.collective.size_bytes)?
        .time_ps;
    Ok(Lowered {
        checked: checked.clone(),
        program,
        timer,
        time_ps,
    })
}

/// A program that passed the schedule checker, its target's loader rules and the XML
/// verifier; only [`Lowered::verify`] makes one.
#[derive(Clone, Debug)]
pub struct Verified(Lowered);

impl Verified {
    pub fn program(&self) -> &Program {
        &self.0.program
    }

    pub fn schedule(&self) -> &Schedule {
        self.0.checked.schedule()
    }

    pub fn checked(&self) -> &Checked {
        &self.0.checked
    }

    /// The program's simulated time at the schedule's size.
    pub fn time_ps(&self) -> Picos {
        self.0.time_ps
    }

    pub fn timer(&self) -> &ProgramTimer {
        &self.0.timer
    }

    pub fn chunks_per_npu(&self) -> usize {
        self.0.checked.chunks_per_npu()
    }

    /// The synthesizer's seed; None for a program of a baseline's schedule.
    pub fn seed(&self) -> Option<u64> {
        self.0.checked.seed()
    }

    /// The program as MSCCL XML.
    pub fn xml(&self) -> String {
        msccl::write_program(&self.0.program)
    }

    /// The same program for the message sizes `min_bytes..=max_bytes`, once `target`'s
    /// loader rules still hold (the range changes what the loader reads, not what the
    /// program computes).
    pub fn with_size_range(
        mut self,
        min_bytes: u64,
        max_bytes: u64,
        target: &Target,
    ) -> Result<Verified> {
        self.0.program.min_bytes = Some(min_bytes);
        self.0.program.max_bytes = Some(max_bytes);
        match msccl::rules::check(&self.0.program, target).first() {
            Some(broken) => Err(Error::Invalid {
                input: "message size range".into(),
                value: format!("{min_bytes}..={max_bytes}"),
                allowed: format!("a range target {target} loads the program for ({broken})"),
            }),
            None => Ok(self),
        }
    }
}

/// One (K, seed) the search tried and how it did.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub chunks_per_npu: usize,
    pub seed: u64,
    /// Whether its chunks' ways were planned (`SynthOptions::planned`).
    pub planned: bool,
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
fn estimate_at(
    topo: &Topology,
    request: &Request,
    k: usize,
    simulated: bool,
    planned: bool,
) -> u64 {
    let spec = request.spec(topo, k);
    let one_target = matches!(
        request.kind,
        CollectiveKind::AllToAll | CollectiveKind::Gather | CollectiveKind::Scatter
    );
    let trees = if planned && !one_target {
        crate::synth::memory::trees(topo, &spec)
    } else {
        0
    };
    memory::synthesis_checked(topo, &spec, simulated, planned).saturating_add(trees)
}

fn admit_at(
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
fn fastest<T>(tried: Vec<(Trial, Result<T>)>, what: &str) -> Result<Found<T>> {
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
                    std::mem::replace(&mut built[i], Err(Error::Plan(String::new())))?;
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
    Err(Error::Msccl(nothing_found(&trials, &what)))
}

/// `e` with `prefix` before what it says: in the context of a figure past a limit (the
/// fields stay), else as an `msccl` message.
fn prefixed(e: Error, prefix: &str) -> Error {
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
        other => Error::Msccl(format!("{prefix}{other}")),
    }
}

/// Tries every (K, seed) of the options side by side: synthesized, checked, then
/// `evaluate`d to what would be emitted and its time (`simulated`: by simulation, which
/// the memory estimates count). A request the collective cannot be
/// built for at the first K is an error; later failures are refused trials.
fn search<T: Send>(
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
    let limit = options.max_memory;
    let estimate = |k: usize, planned: bool| estimate_at(topo, request, k, simulated, planned);
    // The request itself is checked once, at the first K, so that its errors come as they are.
    admit_at(topo, request, options, ks[0], simulated, false)?;
    Collective::new(topo, request.spec(topo, ks[0]))?;
    // Every K with each of the options' ways, then the baselines at that K.
    let ways = options.ways(topo, request);
    let candidates: Vec<(usize, Way)> = ks
        .iter()
        .flat_map(|&k| {
            let synthesized = ways
                .iter()
                .map(move |&(seed, planned)| (k, Way::Synthesized { seed, planned }));
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
            Way::Synthesized { planned, .. } => estimate(k, planned),
            Way::Baseline(b) => b.memory_estimate(topo, &request.spec(topo, k)),
        })
        .fold(0u64, u64::saturating_add)
        <= limit.bytes();
    // A baseline that does not apply (RHD off powers of two, Direct where no link joins
    // two NPUs) is no trial.
    let attempt = |(k, way): (usize, Way)| {
        let (seed, planned, baseline) = match way {
            Way::Synthesized { seed, planned } => (seed, planned, None),
            Way::Baseline(b) => (0, false, Some(b)),
        };
        let mut trial = Trial {
            chunks_per_npu: k,
            seed,
            planned,
            baseline,
            synthesized_ps: None,
            simulated_ps: None,
            refused: None,
        };
        let checked = match baseline {
            None => admit_at(topo, request, options, k, simulated, planned)
                .and_then(|()| synthesize(topo, request, k, &options.synth(seed, planned))),
            Some(b) => pipeline_baseline(topo, request, b, k).ok().map(Ok)?,
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
    };
    if !side_by_side {
        return Ok(candidates.into_iter().filter_map(attempt).collect());
    }
    // On the caller's thread pool (rayon's), whose size bounds how many run at once.
    Ok(candidates.into_par_iter().filter_map(attempt).collect())
}

/// How a search candidate is made at its K.
#[derive(Clone, Copy, Debug)]
enum Way {
    Synthesized { seed: u64, planned: bool },
    Baseline(Baseline),
}

/// Why no trial gave a `what`: the only trial's reason, or every (K, seed) tried and the
/// last reason.
fn nothing_found(trials: &[Trial], what: &str) -> String {
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

/// When K's program breaks only limits (it lowers once they are lifted): the largest
/// smaller K that fits the target (with any of the seeds and ways the options try, as
/// `-k` with that K would find it), and whether the executor rebuilt for 256 steps takes
/// K. None when the program fails for another reason.
fn limit_advice(topo: &Topology, request: &Request, k: usize, options: &Options) -> Option<String> {
    let lowering = &options.lowering;
    let synths: Vec<SynthOptions> = options
        .ways(topo, request)
        .into_iter()
        .map(|(seed, planned)| options.synth(seed, planned))
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

/// A switch that corrupts every lowering, so tests can show that each front end refuses
/// a program the verifier rejects.
///
/// It is an environment variable, [`test_hooks::CORRUPT_LOWERING`], because the front ends
/// under test include the `tacos` binary, run as a separate process. It is compiled in only
/// with the cargo feature `test-hooks`: a default build (the binary users install, the
/// shared library NCCL loads) has no code that reads it, so no environment can corrupt a
/// user's algorithms. `.ci/run` runs `tests/pipeline.rs` with the feature on.
#[cfg(feature = "test-hooks")]
pub mod test_hooks {
    use crate::msccl::{Buf, Program};

    /// Set (to anything) to corrupt every lowering.
    pub const CORRUPT_LOWERING: &str = "TACOS_TEST_CORRUPT_LOWERING";

    /// Points the first receive that stores into a user buffer (not at its first slot) at
    /// the slot before: the control flow (and so the timing) is unchanged and the offset stays inside
    /// the buffer, so the loader takes it and only the verifier can tell.
    pub(super) fn corrupted(mut program: Program) -> Program {
        if std::env::var_os(CORRUPT_LOWERING).is_none() {
            return program;
        }
        let steps = program
            .gpus
            .iter_mut()
            .flat_map(|g| g.threadblocks.iter_mut())
            .flat_map(|tb| tb.steps.iter_mut());
        for step in steps {
            if step.instr.receives()
                && step.instr.writes_dst()
                && step.dst_buf != Buf::Scratch
                && step.dst_off > 0
            {
                step.dst_off -= 1;
                break;
            }
        }
        program
    }
}
