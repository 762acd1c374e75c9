//! `tacos simulate`: run one algorithm (a schedule file or a baseline) through the
//! congestion-aware simulator and report its time, bandwidths, bounds and link load.

use super::check::open_stream;
use super::progress::ProgressHandle;
use super::simulate_nccl::{self, NcclArgs};
use super::{chunk_count, collective_kind, sharing, size, CostArgs, TopologyArgs};
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::cost::Executor;
use tacos::msccl::{read_program, simulate_program, verify, Layout, VerifyOptions};
use tacos::mscclpp::plan::ChannelType;
use tacos::mscclpp::{verify as plan_verify, Plan, PlanTimer, VerifyOptions as PlanVerifyOptions};
use tacos::schedule::stream;
use tacos::schedule::{check, check_data_flow, check_stream, Network, Schedule};
use tacos::sim::{replay_stream, simulate_schedule_with, Replayed, Sharing, SimReport, SimResult};
use tacos::topology::Topology;
use tacos::units::{format_size, ps_to_us};
use tacos_cli::report::{
    BoundsReport, CollectiveInfo, SimulateReport, Timing, TopologyInfo, IDEAL_NOTE, SCHEMA_VERSION,
};

/// The collective every comparing command takes.
#[derive(Debug, Args)]
pub struct CollectiveArgs {
    /// Collective: allgather, reducescatter, allreduce, broadcast, reduce, gather, scatter, alltoall
    /// [default: allgather, or the schedule file's]
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// Buffer every NPU ends with (nccl-tests' convention), e.g. 1GiB or 1G (2^30), 4MB
    /// (10^6)
    /// [default: 1GiB, or the schedule file's]
    #[arg(short, long, value_parser = size)]
    pub size: Option<u64>,
    /// Chunks per NPU (K) [default: where an algorithm is synthesized (compare, report), the
    /// search `tacos synth` makes (K = 1, 2, 4, 8, 16 within its time budget, then
    /// K between them beside the fastest); for
    /// a baseline 1; or the schedule file's]
    #[arg(short = 'k', long, value_parser = chunk_count)]
    pub chunks_per_npu: Option<usize>,
    /// Root NPU of a rooted collective (default: the first NPU)
    #[arg(long)]
    pub root: Option<usize>,
}

impl CollectiveArgs {
    /// The collective over every alive NPU, with the defaults filled in.
    pub fn spec(&self, topo: &Topology) -> CollectiveSpec {
        let kind = self.collective.unwrap_or(CollectiveKind::AllGather);
        let npus = topo.alive_npus();
        CollectiveSpec {
            kind,
            root: kind
                .has_root()
                .then(|| self.root.or(npus.first().copied()))
                .flatten(),
            npus,
            chunks_per_npu: self.chunks_per_npu.unwrap_or(1),
            size_bytes: self.size.unwrap_or(1 << 30),
        }
    }

    /// Refuses a schedule whose collective differs from what the arguments say.
    fn check_matches(&self, file: &str, spec: &CollectiveSpec) -> anyhow::Result<()> {
        let differs = |what: &str, given: String, has: String| -> anyhow::Result<()> {
            bail!("{file} is a schedule for {what} {has}, but the command line says {given}")
        };
        match (self.collective, self.size, self.chunks_per_npu, self.root) {
            (Some(k), ..) if k != spec.kind => {
                differs("collective", k.to_string(), spec.kind.to_string())
            }
            (_, Some(s), ..) if s != spec.size_bytes => {
                differs("size", s.to_string(), spec.size_bytes.to_string())
            }
            (_, _, Some(k), _) if k != spec.chunks_per_npu => differs(
                "chunks per NPU",
                k.to_string(),
                spec.chunks_per_npu.to_string(),
            ),
            (.., Some(r)) if Some(r) != spec.root => {
                differs("root", r.to_string(), format!("{:?}", spec.root))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    #[command(flatten)]
    pub algorithm: AlgorithmArgs,
    /// How messages crossing a link share it: serial (one at a time, in order of arrival)
    /// or fair (all at once, max-min fair shares of bandwidth, as SimGrid's flow model)
    #[arg(long, default_value = "serial", value_parser = sharing)]
    pub sharing: Sharing,
    /// Busiest links to list
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Print one JSON object (with every link's load) instead of text
    #[arg(long)]
    pub json: bool,
    /// No progress display
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub nccl: NcclArgs,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// What to simulate: exactly one of a schedule file, an MSCCL XML file and a baseline.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct AlgorithmArgs {
    /// A schedule file to simulate: from `tacos synth --out`, or a transfer stream from
    /// `tacos synth --stream`, which is simulated in one pass (serial sharing; checked
    /// beside it on the other core) whatever its length
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// An MSCCL algorithm XML file (ours, msccl-tools' or hand-written) to verify and time,
    /// rank r on the r-th NPU
    #[arg(long, value_name = "FILE")]
    pub xml: Option<PathBuf>,
    /// An MSCCL++ execution plan (JSON: ours from `tacos synth --plan`, or the DSL's) to
    /// verify and time with the executor cost model, rank r on the r-th NPU
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// A baseline algorithm: ring, ring-uni, direct, rhd, dbt, hierarchical, or nccl
    /// (NCCL's own Ring or Tree, priced by the executor cost model); or trees, the
    /// search's packed spanning trees (All-Reduce; Broadcast and Reduce, through switches too)
    #[arg(long, value_name = "NAME", value_parser = baseline)]
    pub baseline: Option<BaselineArg>,
}

/// What `--baseline` names: one of our baseline schedules, or NCCL's built-in algorithms.
#[derive(Clone, Copy, Debug)]
pub enum BaselineArg {
    Schedule(Baseline),
    Nccl,
}

fn baseline(s: &str) -> Result<BaselineArg, String> {
    if s.eq_ignore_ascii_case("nccl") {
        return Ok(BaselineArg::Nccl);
    }
    let b = s.parse().map_err(|e: tacos::Error| format!("{e}, nccl"))?;
    Ok(BaselineArg::Schedule(b))
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let hidden = args.quiet || args.json;
    let (
        topo,
        Simulated {
            label: algorithm,
            spec,
            messages,
            result,
            own_clock,
            size_from,
            is_program,
        },
    ) = match (
        &args.algorithm.schedule,
        &args.algorithm.xml,
        args.algorithm.baseline,
    ) {
        (Some(path), ..) => {
            let replayed = match args.sharing {
                Sharing::Serial if stream::is_stream(path)? => {
                    replay_file(&args.topology, &args.collective, path, hidden)?
                }
                _ => None,
            };
            if let Some(replayed) = replayed {
                replayed
            } else {
                let (topo, schedule, own) = read_schedule(&args.topology, &args.collective, path)?;
                let file = path.display().to_string();
                let _bar = ProgressHandle::spinner("simulating", hidden);
                let simulated = Simulated::schedule(
                    &topo,
                    schedule,
                    format!("schedule {file}"),
                    own,
                    SizeFrom::Schedule,
                    args.sharing,
                )?;
                (topo, simulated)
            }
        }
        (None, Some(path), _) => {
            if args.sharing != Sharing::Serial {
                bail!("--sharing {} times schedules and baselines; an MSCCL program (--xml) is timed with serial sharing only", args.sharing);
            }
            let topo = args.topology.topology()?;
            let _bar = ProgressHandle::spinner("simulating", hidden);
            let executor = args.cost.executor(&topo)?;
            let simulated = simulate_xml(&topo, path, &args.collective, executor.as_ref())?;
            (topo, simulated)
        }
        (None, None, _) if args.algorithm.plan.is_some() => {
            if args.sharing != Sharing::Serial {
                bail!("--sharing {} times schedules and baselines; a plan (--plan) is timed with serial sharing only", args.sharing);
            }
            let topo = args.topology.topology()?;
            let Some(executor) = args.cost.executor(&topo)? else {
                bail!("--plan is timed with the executor cost model; leave out --alpha-beta");
            };
            let path = args.algorithm.plan.as_deref().unwrap_or(Path::new(""));
            let _bar = ProgressHandle::spinner("simulating", hidden);
            let simulated = simulate_plan(&topo, path, &args.collective, &executor)?;
            (topo, simulated)
        }
        (None, None, Some(BaselineArg::Nccl)) => return simulate_nccl::run(&args),
        (None, None, Some(BaselineArg::Schedule(b))) => {
            if args.nccl.given() {
                bail!("--nccl-algo and --proto go with --baseline nccl");
            }
            let topo = args.topology.topology()?;
            let spec = args.collective.spec(&topo);
            let size_from = match args.collective.size {
                Some(_) => SizeFrom::CommandLine,
                None => SizeFrom::Default,
            };
            let _bar = ProgressHandle::spinner("simulating", hidden);
            let schedule = b.schedule(&topo, &spec)?;
            let simulated = Simulated::schedule(
                &topo,
                schedule,
                format!("baseline {b}"),
                None,
                size_from,
                args.sharing,
            )?;
            (topo, simulated)
        }
        (None, None, None) => {
            bail!("give --schedule FILE, --xml FILE, --plan FILE or --baseline NAME")
        }
    };
    super::check_moves_data(&spec)?;
    let collective = Collective::new(&topo, spec)?;
    let report = SimReport::new(&topo, collective.spec(), &result);
    // A schedule file moves one chunk per transfer, at its own K: with one message per
    // link at a time, the latency-aware bound holds for it too.
    let bounds = if args.algorithm.schedule.is_some() && args.sharing == Sharing::Serial {
        Bounds::chunked(&topo, &collective)
    } else {
        Bounds::new(&topo, &collective)
    };
    let timing = Timing::new(collective.spec(), report.time_ps, &bounds);
    if args.json {
        let collective_info = CollectiveInfo {
            // A program's chunking is its own (chunks_per_loop), not a K.
            chunks_per_npu: (!is_program).then_some(collective.spec().chunks_per_npu),
            ..CollectiveInfo::new(collective.spec())
        };
        let value = SimulateReport {
            schema_version: SCHEMA_VERSION,
            command: "simulate",
            topology: TopologyInfo::new(&topo),
            algorithm,
            collective: collective_info,
            size_from: size_from.json_name(),
            transfers: messages,
            sharing: args.sharing,
            timing,
            schedule_time_us: own_clock.map(ps_to_us),
            bounds: BoundsReport::new(&bounds),
            links: report.links,
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let spec = collective.spec();
    print_topology(&topo);
    println!("algorithm     {algorithm} ({messages} transfers)");
    println!(
        "collective    {} of {}{}, {} chunk{} per NPU",
        spec.kind,
        format_size(spec.size_bytes),
        size_from.note(),
        spec.chunks_per_npu,
        if spec.chunks_per_npu == 1 { "" } else { "s" }
    );
    println!("sharing       {}", sharing_note(args.sharing));
    match own_clock {
        Some(own) => println!(
            "time          {:.3} us simulated (the schedule's own clock: {:.3} us)",
            ps_to_us(report.time_ps),
            ps_to_us(own)
        ),
        None => println!("time          {:.3} us simulated", ps_to_us(report.time_ps)),
    }
    println!("algbw         {:.2} GB/s", timing.algbw_gbps);
    println!("busbw         {:.2} GB/s", timing.busbw_gbps);
    print_bounds(&bounds, Some(report.time_ps));
    let used = report.links.iter().filter(|l| l.busy_ps > 0).count();
    let mean =
        report.links.iter().map(|l| l.utilization).sum::<f64>() / report.links.len().max(1) as f64;
    println!(
        "links         {used} of {} used, mean utilization {:.1}%; busiest:",
        report.links.len(),
        100.0 * mean
    );
    for l in report.busiest_links().into_iter().take(args.top) {
        println!(
            "              {:>5} -> {:<5} {:>6.1}% busy  {}",
            l.src,
            l.dst,
            100.0 * l.utilization,
            format_size(l.bytes.round() as u64)
        );
    }
    Ok(())
}

/// Where the simulated size came from, said next to it (a file's own size is not what
/// a reader expects when they gave none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SizeFrom {
    CommandLine,
    /// The schedule file's collective.
    Schedule,
    /// The XML file's `minBytes`, the smallest message the executor picks it for.
    MinBytes,
    /// 1 GiB: nothing gave a size (an XML file whose range starts at 0 covers every size).
    Default,
}

impl SizeFrom {
    fn json_name(self) -> &'static str {
        match self {
            SizeFrom::CommandLine => "command line",
            SizeFrom::Schedule => "schedule file",
            SizeFrom::MinBytes => "minBytes",
            SizeFrom::Default => "default",
        }
    }

    /// What the text report says after the size.
    fn note(self) -> &'static str {
        match self {
            SizeFrom::CommandLine | SizeFrom::Schedule => "",
            SizeFrom::MinBytes => " (the file's minBytes; -s times another size)",
            SizeFrom::Default => " (the default; -s times another size)",
        }
    }
}

/// A schedule file, the topology it runs on (checked to fit it) and its own clock where
/// it is contention-free (a clock worth showing next to the simulation).
pub(super) fn read_schedule(
    topology: &TopologyArgs,
    collective: &CollectiveArgs,
    path: &Path,
) -> anyhow::Result<(Topology, Schedule, Option<u64>)> {
    let schedule = Schedule::read(path)?;
    let file = path.display().to_string();
    collective.check_matches(&file, &schedule.collective)?;
    let (topo, used) = schedule_topology(
        topology,
        &schedule.topology,
        schedule.network.as_ref(),
        &file,
    )?;
    check_on_links(&schedule, &topo).with_context(|| {
        format!(
            "{file} (made for {}) does not fit {used}",
            schedule.topology
        )
    })?;
    let own = check(&schedule, &topo).ok().map(|r| r.collective_time_ps);
    Ok((topo, schedule, own))
}

/// A transfer stream simulated in one pass (`replay_stream`), with the stream checker
/// beside it on the other core for the schedule's own clock: nothing is held per
/// transfer, so a stream of any length simulates. None, said on stderr, where the replay
/// cannot answer for the stream exactly (it is not a timed schedule): simulate it held.
fn replay_file(
    topology: &TopologyArgs,
    collective: &CollectiveArgs,
    path: &Path,
    hidden: bool,
) -> anyhow::Result<Option<(Topology, Simulated)>> {
    let file = path.display().to_string();
    let (reader, progress) = open_stream(path, "simulating", hidden)?;
    let header = reader.header().clone();
    collective.check_matches(&file, &header.collective)?;
    let (topo, used) =
        schedule_topology(topology, &header.topology, header.network.as_ref(), &file)?;
    let (checked, replayed) = rayon::join(
        || stream::open(path).and_then(|s| check_stream(s, &topo)),
        || replay_stream(reader, &topo),
    );
    let (result, transfers) = match replayed
        .with_context(|| format!("simulating {file} on {used}"))?
    {
        Replayed::Simulated { result, transfers } => (result, transfers),
        Replayed::NotReplayable { transfer, why } => {
            drop(progress);
            eprintln!(
                "note: {file}: transfer {transfer} cannot be replayed in one pass, as {why}; simulating the schedule held"
            );
            return Ok(None);
        }
    };
    let simulated = Simulated {
        label: format!("schedule {file}"),
        spec: header.collective,
        messages: transfers as usize,
        result,
        own_clock: checked.ok().map(|r| r.collective_time_ps),
        size_from: SizeFrom::Schedule,
        is_program: false,
    };
    Ok(Some((topo, simulated)))
}

/// One algorithm's simulation, whatever it came from.
pub(super) struct Simulated {
    pub label: String,
    pub spec: CollectiveSpec,
    /// Messages (schedule transfers, or the program's sends).
    messages: usize,
    pub result: SimResult,
    /// The algorithm's own clock, where it has one worth showing.
    own_clock: Option<u64>,
    size_from: SizeFrom,
    /// An MSCCL program rather than a schedule.
    is_program: bool,
}

impl Simulated {
    fn schedule(
        topo: &Topology,
        schedule: Schedule,
        label: String,
        own_clock: Option<u64>,
        size_from: SizeFrom,
        sharing: Sharing,
    ) -> anyhow::Result<Simulated> {
        Ok(Simulated {
            label,
            messages: schedule.transfers.len(),
            result: simulate_schedule_with(topo, &schedule, sharing)?,
            spec: schedule.collective,
            own_clock,
            size_from,
            is_program: false,
        })
    }
}

/// An MSCCL program is verified first (timing a wrong program says nothing), then timed
/// by the executor cost model (bare alpha-beta messages without one); whether a loader takes it is `tacos verify`'s question, so
/// msccl-tools' files (no `outofplace`...) are timed too.
pub(super) fn simulate_xml(
    topo: &Topology,
    path: &Path,
    collective: &CollectiveArgs,
    executor: Option<&Executor>,
) -> anyhow::Result<Simulated> {
    let file = path.display().to_string();
    let program = read_program(path)?;
    for w in &program.inferred {
        eprintln!("warning: {file}: {w}");
    }
    let report = verify(
        &program,
        &VerifyOptions {
            collective: collective.collective,
            root: collective.root,
            ..VerifyOptions::default()
        },
    );
    if !report.computes() {
        let first = report.problems.first().map_or(String::new(), |p| {
            format!(": {} ({})", p.message, p.kind.name())
        });
        bail!("{file} is not a correct program{first}; `tacos verify {file}` lists every problem");
    }
    let kind = report
        .collective
        .or_else(|| program.collective_kind())
        .with_context(|| format!("{file}: unknown collective '{}'", program.collective))?;
    let root = kind.has_root().then(|| report.root.unwrap_or(0));
    let (size, size_from) = match (collective.size, program.min_bytes) {
        (Some(size), _) => (size, SizeFrom::CommandLine),
        (None, Some(min_bytes)) if min_bytes > 0 => {
            let layout = Layout::new(
                kind,
                program.gpus.len(),
                program.nchunksperloop,
                program.inplace,
                root,
            )?;
            (size_measured_as(&layout, min_bytes), SizeFrom::MinBytes)
        }
        (None, _) => (1 << 30, SizeFrom::Default),
    };
    let result = match executor {
        Some(executor) => executor.simulate_program(topo, &program, size)?,
        None => simulate_program(topo, &program, size)?,
    };
    let npus = topo.alive_npus();
    let spec = CollectiveSpec {
        kind,
        root: root.map(|r| npus[r]),
        npus,
        chunks_per_npu: 1,
        size_bytes: size,
    };
    Ok(Simulated {
        label: format!("MSCCL program {file}"),
        messages: result.messages.len(),
        result,
        spec,
        own_clock: None,
        size_from,
        is_program: true,
    })
}

/// An MSCCL++ plan, verified at the size it is timed at (the command line's, else the
/// smallest it accepts, else 1 GiB), then timed by the executor cost model.
pub(super) fn simulate_plan(
    topo: &Topology,
    path: &Path,
    collective: &CollectiveArgs,
    executor: &Executor,
) -> anyhow::Result<Simulated> {
    let file = path.display().to_string();
    let plan = Plan::read(path)?;
    let (size, size_from) = match (collective.size, plan.min_message_size) {
        (Some(size), _) => (size, SizeFrom::CommandLine),
        (None, min) if min > 0 => (min, SizeFrom::MinBytes),
        (None, _) => (1 << 30, SizeFrom::Default),
    };
    let kind: CollectiveKind = plan
        .collective
        .parse()
        .with_context(|| format!("{file}: collective '{}'", plan.collective))?;
    let root = collective.root.filter(|_| kind.has_root());
    let report = plan_verify(
        &plan,
        &PlanVerifyOptions {
            size: Some(size),
            root,
        },
    )
    .with_context(|| format!("{file} is not a correct plan; `tacos verify {file}` says more"))?;
    let result = PlanTimer::new(&plan)?.simulate(executor, topo, size)?;
    let in_switch = plan.gpus.iter().any(|g| {
        g.channels
            .iter()
            .any(|c| c.channel_type == ChannelType::Switch)
    });
    if in_switch {
        eprintln!(
            "warning: {file} sums inside the NVSwitch; the lower bounds below assume sums on the GPUs, and the traffic bound need not hold for it"
        );
    }
    let npus = topo.alive_npus();
    let spec = CollectiveSpec {
        kind,
        root: kind
            .has_root()
            .then(|| npus[root.or(report.root).unwrap_or(0).min(npus.len() - 1)]),
        npus,
        chunks_per_npu: 1,
        size_bytes: size,
    };
    Ok(Simulated {
        label: format!("MSCCL++ plan {file}"),
        messages: result.messages.len(),
        result,
        spec,
        own_clock: None,
        size_from,
        is_program: true,
    })
}

/// The smallest collective size (nccl-tests' convention, what the simulator takes) that
/// the executor measures as at least `executor_bytes` (they differ for Gather and
/// Scatter, where the executor measures one rank's share).
fn size_measured_as(layout: &Layout, executor_bytes: u64) -> u64 {
    // The executor's measure never exceeds the size and grows with it.
    let (mut lo, mut hi) = (executor_bytes, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if layout.executor_bytes(mid) >= executor_bytes {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The topology a schedule file is simulated on, and words naming it: the SPEC given,
/// which must have the NPUs the file was made for, or else the network the file records
/// (with any failures given); a file written before networks were recorded has its
/// topology name read as a spec.
pub(super) fn schedule_topology(
    args: &TopologyArgs,
    made_for: &str,
    network: Option<&Network>,
    file: &str,
) -> anyhow::Result<(Topology, String)> {
    let failures = match (&args.fail_npus, &args.fail_links) {
        (None, None) => "",
        _ => " with the failures given",
    };
    match (&args.spec, network) {
        (Some(spec), network) => {
            let topo = args.topology()?;
            if let Some(n) = network.filter(|n| n.npus != topo.npus()) {
                bail!(
                    "{file} was made for {made_for} ({} NPUs), but {spec} has {} NPUs",
                    n.npus,
                    topo.npus()
                );
            }
            Ok((topo, format!("{spec}{failures}")))
        }
        (None, Some(network)) => {
            let topo = args.with_failures(network.topology(made_for, file)?)?;
            Ok((topo, format!("the network it records{failures}")))
        }
        (None, None) => {
            eprintln!(
                "warning: {file} records no network (an older tacos wrote it); simulating on its topology name '{made_for}' read as a spec"
            );
            let topo = args.topology_of(made_for).with_context(|| {
                format!("{file} records its topology only as '{made_for}'; give the SPEC it was made for")
            })?;
            Ok((topo, format!("{made_for}{failures}")))
        }
    }
}

/// A schedule file must be correct on the topology and send only over its links, or
/// through its switches (a route of switches only, one search per source NPU).
fn check_on_links(schedule: &Schedule, topo: &Topology) -> anyhow::Result<()> {
    check_data_flow(schedule, topo)?;
    let mut trees = std::collections::HashMap::new();
    let mut route = Vec::new();
    let mut joined = |src: usize, dst: usize| {
        topo.link_between(src, dst).is_some()
            || (topo.has_switches()
                && trees
                    .entry(src)
                    .or_insert_with(|| topo.route_tree(src))
                    .route_into(topo, dst, &mut route))
    };
    if let Some((i, t)) = schedule
        .transfers
        .iter()
        .enumerate()
        .find(|(_, t)| !joined(t.src(), t.dst()))
    {
        bail!(
            "transfer {i} (chunk {}) goes from NPU {} to NPU {}, which no link {}joins",
            t.chunk(),
            t.src(),
            t.dst(),
            if topo.has_switches() {
                "or route through switches "
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The sharing model, as the text reports name it.
pub(super) fn sharing_note(sharing: Sharing) -> String {
    let how = match sharing {
        Sharing::Serial => "one message per link at a time",
        Sharing::Fair => "max-min fair shares of link bandwidth",
    };
    format!("{sharing} ({how})")
}

/// The bounds, and with a time the efficiencies against them.
pub(super) fn print_bounds(b: &Bounds, time_ps: Option<u64>) {
    let cut = match b.cut {
        Some(c) => format!(
            ", cut {:.3}{}",
            ps_to_us(c.time_ps),
            if c.exact { "" } else { " (some cuts checked)" }
        ),
        None => String::new(),
    };
    let against = |label: &str, f: fn(&Bounds, u64) -> f64| {
        time_ps.map_or(String::new(), |t| format!("; {label} {:.3}", f(b, t)))
    };
    println!(
        "lower bound   {:.3} us, {} (ingress {:.3}, egress {:.3}, traffic {:.3}, latency {:.3}{cut}){}",
        ps_to_us(b.best_ps()),
        b.best_name(),
        ps_to_us(b.ingress_ps),
        ps_to_us(b.egress_ps),
        ps_to_us(b.traffic_ps),
        ps_to_us(b.latency_ps),
        against("efficiency", Bounds::efficiency)
    );
    println!(
        "ideal         {:.3} us ({IDEAL_NOTE}){}",
        ps_to_us(b.ideal_ps),
        against("of ideal", Bounds::of_ideal)
    );
}

/// The report's first line: the topology simulated on.
pub fn print_topology(topo: &Topology) {
    println!(
        "topology      {} ({} NPUs, {} links)",
        topo.name(),
        topo.npus(),
        topo.links().len()
    );
}
