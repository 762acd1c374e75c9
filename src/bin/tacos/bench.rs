//! `tacos bench`: synthesis speed and quality on the topologies the project measures
//! itself against (All-Gather of 1 GiB unless `--collective` says otherwise, links 50 GB/s
//! and 0.5 us unless the case says).

use super::collective_kind;
use super::progress::ProgressHandle;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::time::{Duration, Instant};
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::ps_to_us;
use tacos_cli::report::{
    BenchReport, BoundsReport, CollectiveInfo, SynthBenchRow, Timing, TopologyInfo,
};

/// What `tacos bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchSubject {
    /// The synthesizer's time and quality against the reference figures
    Synth,
    /// The congestion-aware simulator on large schedules
    Sim,
    /// Lowering to MSCCL XML, writing, parsing, verifying and timing it
    Lowering,
    /// The NCCL tuner plugin's init and its per-collective lookup
    Tuner,
    /// The plugin cache: compiling a cluster's algorithm set (the fast preset), cold and warm
    Compile,
    /// The MSCCL scheduler plugin's init through its entry point, with a cold and a warm cache
    Scheduler,
    /// Synthesis through switch vertices on switched machines, against the bounds and Ring
    Fabric,
    /// Pricing NCCL's own choices with the executor cost model (30 sizes per cluster)
    Cost,
    /// Synthesis at scale (meshes of 1K to 40K NPUs, a 16K-GPU cluster, All-to-All over 512
    /// NPUs): time, peak memory, quality, and how the time grows with the NPUs
    Scale,
    /// The seed study: 100 seeds each on the C++ TACOS's small meshes and tori, and what the
    /// default search keeps, against the C++'s collective time
    Seeds,
    /// The quality suite: rings, meshes, tori, hypercubes, dragonflies, heterogeneous and
    /// switched networks and every preset, four collectives at three sizes, each against
    /// the best lower bound and the best baseline (--quick: 1 GiB only)
    Quality,
    /// The quality suite's networks (up to 64 GPUs) as MSCCL++ plans: All-Gather,
    /// Reduce-Scatter, All-Reduce and Broadcast at K 1, 2 and 4, each lowered, verified
    /// and timed, refusals counted by the limit they broke (1 GiB; --quick: 16 MiB)
    Plans,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure
    #[arg(value_enum, default_value = "synth")]
    pub subject: BenchSubject,
    /// Only the cases whose topology contains this text (e.g. torus, 32x32)
    #[arg(long)]
    pub filter: Option<String>,
    /// Leave out the largest cases (synth: the 32x32 and 24x24 meshes; scale: all but the
    /// 32x32 and 64x64 meshes and the 512-NPU All-to-Alls; quality: all sizes but 1 GiB)
    #[arg(long)]
    pub quick: bool,
    /// Seed for the synthesizer
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Collective to synthesize (rooted ones from NPU 0; default allgather, and for
    /// `fabric` allgather, reducescatter and allreduce); the C++ reference times are for
    /// allgather only
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// Print the rows as JSON instead of a table (synth, sim, lowering, compile: one
    /// report, docs/json.md)
    #[arg(long)]
    pub json: bool,
    /// No progress display
    #[arg(long)]
    pub quiet: bool,
    /// scale: write the log-log plot of synthesis time against NPUs (with the C++
    /// reference's) as SVG to this file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
    /// scale: measure this one case here and print its row as JSON (how each case runs in
    /// a process of its own)
    #[arg(long, hide = true, value_name = "SPEC")]
    pub case: Option<String>,
    /// scale, with --case: synthesize replicated (`synth --replicate`)
    #[arg(long, hide = true)]
    pub replicate: bool,
}

/// (topology spec, chunks per NPU, synthesis time of the public C++ TACOS on this machine
/// class in ms where measured, from the project's reference figures).
const CASES: &[(&str, usize, Option<f64>)] = &[
    ("mesh:4x4", 1, Some(0.45)),
    ("mesh:8x8", 1, Some(11.6)),
    ("torus:8x8", 1, Some(7.6)),
    ("torus:8x8", 4, Some(114.0)),
    ("mesh:4x4x4", 1, Some(8.2)),
    ("torus:4x4x4", 1, Some(9.1)),
    ("multi:L8xL8,bw=100:25", 1, Some(60.0)),
    ("mesh:16x16", 1, Some(940.0)),
    ("torus:16x16", 1, Some(774.0)),
    ("mesh:24x24", 1, Some(12_100.0)),
    ("mesh:32x32", 1, Some(81_800.0)),
    ("rfs:2x4x8,bw=200:100:50", 8, None),
];

const SIZE: u64 = 1 << 30;

/// (NPUs, synthesis time in ms) of the public C++ TACOS on the 2D meshes of `CASES`.
pub(super) fn reference_mesh_ms() -> Vec<(usize, f64)> {
    CASES
        .iter()
        .filter_map(|&(spec, k, ms)| {
            let sides = spec.strip_prefix("mesh:")?;
            let (a, b) = sides.split_once('x')?;
            let npus = a.parse::<usize>().ok()? * b.parse::<usize>().ok()?;
            (k == 1).then_some((npus, ms?))
        })
        .collect()
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.subject {
        BenchSubject::Tuner => return super::bench_tuner::run(&args),
        BenchSubject::Scheduler => return super::bench_scheduler::run(&args),
        _ => {}
    }
    // The cases print as they finish, under a spinner naming the one running.
    let bar = ProgressHandle::spinner("bench", args.quiet || args.json);
    match args.subject {
        BenchSubject::Sim => return super::bench_sim::run(&args, &bar),
        BenchSubject::Lowering => return super::bench_lowering::run(&args, &bar),
        BenchSubject::Compile => return super::bench_compile::run(&args, &bar),
        BenchSubject::Fabric => return super::bench_fabric::run(&args, &bar),
        BenchSubject::Cost => return super::bench_cost::run(&args, &bar),
        BenchSubject::Scale => return super::bench_scale::run(&args, &bar),
        BenchSubject::Seeds => return super::bench_seeds::run(&args, &bar),
        BenchSubject::Quality => return super::bench_quality::run(&args, &bar),
        BenchSubject::Plans => return super::bench_plans::run(&args, &bar),
        _ => {}
    }
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<24} {:>5} {:>3} {:>12} {:>12} {:>13} {:>10} {:>8}",
            "topology", "NPUs", "K", "synth (ms)", "C++ (ms)", "time (us)", "bound (us)", "eff."
        ));
    }
    for &(spec, k, reference_ms) in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && (spec.contains("32x32") || spec.contains("24x24")) {
            continue;
        }
        bar.step(spec);
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let kind = args.collective.unwrap_or(CollectiveKind::AllGather);
        let root = kind.has_root().then_some(0);
        let collective = Collective::over_all(&topo, kind, root, k, SIZE)?;
        let reference_ms = reference_ms.filter(|_| kind == CollectiveKind::AllGather);
        let options = SynthOptions::seeded(args.seed);
        let (best, schedule) = best_of(Duration::from_millis(300), || {
            Ok(synthesize(&topo, &collective, &options)?)
        })?;
        let time_ps = schedule.collective_time_ps();
        let bounds = Bounds::chunked(&topo, &collective);
        let bound_ps = bounds.best_ps();
        let synth_ms = best.as_secs_f64() * 1e3;
        let efficiency = bounds.efficiency(time_ps);
        if args.json {
            rows.push(SynthBenchRow {
                topology: TopologyInfo::new(&topo),
                collective: CollectiveInfo::new(collective.spec()),
                elapsed_ms: synth_ms,
                reference_cpp_ms: reference_ms,
                timing: Timing::new(collective.spec(), time_ps, &bounds),
                bounds: BoundsReport::new(&bounds),
            });
        } else {
            bar.println(format!(
                "{:<24} {:>5} {:>3} {:>12.3} {:>12} {:>13.1} {:>10.1} {:>8.3}",
                spec,
                topo.npus(),
                k,
                synth_ms,
                reference_ms.map_or("-".into(), |r| format!("{r:.1}")),
                ps_to_us(time_ps),
                ps_to_us(bound_ps),
                efficiency
            ));
        }
    }
    print_json(&args, "synth", rows)
}

/// With `--json`, prints the rows as one report of `subject`.
pub(super) fn print_json<R: Serialize>(
    args: &BenchArgs,
    subject: &'static str,
    rows: Vec<R>,
) -> anyhow::Result<()> {
    if args.json {
        let report = BenchReport::new(subject, rows);
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// Runs `run` until `min_total` has passed, at least once: the fastest run's time and the
/// last run's result (best of a few for fast cases, one run for slow ones).
pub(super) fn best_of<T>(
    min_total: Duration,
    mut run: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<(Duration, T)> {
    let (mut best, mut total) = (Duration::MAX, Duration::ZERO);
    loop {
        let started = Instant::now();
        let result = run()?;
        let took = started.elapsed();
        best = best.min(took);
        total += took;
        if total >= min_total {
            return Ok((best, result));
        }
    }
}
