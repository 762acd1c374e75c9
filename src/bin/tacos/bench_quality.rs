//! `tacos bench quality`: a fixed suite of networks, collectives and sizes on which the
//! synthesized algorithm is set against the best lower bound and the best baseline, as a
//! user's `tacos synth` gets it (`pipeline::schedule` with `default_chunks`, the default
//! seeds, planned ways and baselines), so docs/quality.md can print a table in place of claims and say
//! where the worst cases are.

use super::bench::{print_json, BenchArgs};
use super::progress::ProgressHandle;
use serde::Serialize;
use std::time::Instant;
use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::{self, Request};
use tacos::sim::simulate_schedule;
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::{format_size, ps_to_us, Picos};
use tacos_cli::report::{CollectiveInfo, TopologyInfo};

/// The networks of the suite: the paper's (dragonfly, 2D switch, 3D-RFS), direct networks
/// of every shape, heterogeneous dimensions both ways round, an oversubscribed leaf-spine,
/// and every machine preset at 1, 2 and 4 nodes (the HGX presets are the DGX ones' nodes).
/// The leaf-spine has a spine per uplink port: with one spine (`clos:8x4,oversub=2`) a
/// leaf's uplink is one link four NPU links wide, which a transfer holds whole at an NPU
/// link's rate (routes are held cut-through), so no algorithm uses more than a quarter of
/// it.
pub(super) const TOPOLOGIES: &[&str] = &[
    "ring:8",
    "ring:16",
    "mesh:4x4",
    "mesh:8x8",
    "torus:4x4",
    "torus:8x8",
    "torus:4x4x4",
    "hypercube:4",
    "hypercube:6",
    "dragonfly:4x5,bw=400:200",
    "dragonfly:4x9,bw=400:200",
    "multi:U4xF4,bw=100:25",
    "multi:F4xU4,bw=25:100",
    "multi:R4xF4,bw=25:100",
    "multi:S8xS4,bw=300:25",
    "rfs:2x4x8,bw=200:100:50",
    "clos:8x4,spine=4,oversub=2",
    "preset:dgx1",
    "preset:dgx2,nodes=1",
    "preset:dgx2,nodes=2",
    "preset:dgx2,nodes=4",
    "preset:dgx-a100,nodes=1",
    "preset:dgx-a100,nodes=2",
    "preset:dgx-a100,nodes=4",
    "preset:dgx-h100,nodes=1",
    "preset:dgx-h100,nodes=2",
    "preset:dgx-h100,nodes=4",
    "preset:ndv4,nodes=1",
    "preset:ndv4,nodes=2",
    "preset:ndv4,nodes=4",
];

const KINDS: [CollectiveKind; 4] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
    CollectiveKind::AllToAll,
];

/// 64 KiB, 16 MiB, 1 GiB: latency-bound, between, bandwidth-bound.
const SIZES: [u64; 3] = [64 << 10, 16 << 20, 1 << 30];

/// Rows listed as the worst cases after the table.
const WORST: usize = 10;

/// One case of `tacos bench quality`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QualityBenchRow {
    pub topology: TopologyInfo,
    /// The K kept (the fastest of those tried).
    pub collective: CollectiveInfo,
    /// The kept schedule's simulated time.
    pub time_us: f64,
    /// The baseline the search kept, where one was faster than every synthesized
    /// schedule (null: synthesized).
    pub kept_baseline: Option<String>,
    /// The best lower bound that holds for any algorithm (`Bounds::new`) and its name.
    pub bound_us: f64,
    pub bound: &'static str,
    /// bound / time: at most 1.
    pub efficiency: f64,
    /// The fastest baseline (each at K = 1 and at the K kept), its time, and its time
    /// over ours (above 1: ours is faster). Null where no baseline defines the case.
    pub baseline: Option<String>,
    pub baseline_us: Option<f64>,
    pub speedup_over_baseline: Option<f64>,
    /// Wall time of the whole search (every K and seed, checked and simulated).
    pub elapsed_ms: f64,
}

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let kinds: Vec<CollectiveKind> = args.collective.map_or(KINDS.to_vec(), |k| vec![k]);
    // --quick: the bandwidth-bound size only, where the suite's targets are set.
    let sizes: &[u64] = if args.quick { &SIZES[2..] } else { &SIZES };
    if !args.json {
        bar.println(format!(
            "{:<26} {:>4} {:<13} {:>7} {:>2} {:<12} {:>12} {:>12} {:<8} {:>6} {:<12} {:>8}",
            "topology",
            "NPUs",
            "collective",
            "size",
            "K",
            "kept",
            "time (us)",
            "bound (us)",
            "bound",
            "eff.",
            "baseline",
            "speedup"
        ));
    }
    let mut rows = Vec::new();
    for &spec in TOPOLOGIES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        for &kind in &kinds {
            for &size in sizes {
                bar.step(&format!("{spec} {kind} {}", format_size(size)));
                let row = measure(&topo, kind, size, args.seed)?;
                if !args.json {
                    bar.println(line(spec, &row));
                }
                rows.push(row);
            }
        }
    }
    if !args.json {
        for line in summary(&rows) {
            bar.println(line);
        }
    }
    print_json(args, "quality", rows)
}

/// One case: the search a user's `tacos synth -k auto` makes, the bounds, the baselines.
fn measure(
    topo: &Topology,
    kind: CollectiveKind,
    size: u64,
    seed: u64,
) -> anyhow::Result<QualityBenchRow> {
    let request = Request::new(kind, size);
    let options = pipeline::Options::searching(topo, &request, seed);
    let started = Instant::now();
    let found = pipeline::schedule(topo, &request, &options)?;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    let k = found.kept.chunks_per_npu();
    let time_ps = simulate_schedule(topo, found.kept.schedule())?.time_ps;
    let collective = Collective::new(topo, request.spec(topo, k))?;
    let bounds = Bounds::new(topo, &collective);
    let baseline = fastest_baseline(topo, &request, k)?;
    Ok(QualityBenchRow {
        topology: TopologyInfo::new(topo),
        collective: CollectiveInfo::new(collective.spec()),
        time_us: ps_to_us(time_ps),
        kept_baseline: found.kept.baseline().map(|b| b.name().to_string()),
        bound_us: ps_to_us(bounds.best_ps()),
        bound: bounds.best_name(),
        efficiency: bounds.efficiency(time_ps),
        baseline: baseline.as_ref().map(|b| b.0.name().to_string()),
        baseline_us: baseline.as_ref().map(|b| ps_to_us(b.1)),
        speedup_over_baseline: baseline.map(|b| b.1 as f64 / time_ps.max(1) as f64),
        elapsed_ms,
    })
}

/// The baseline with the least simulated time, each tried at K = 1 and at `k`; None where
/// none defines the collective on this topology.
fn fastest_baseline(
    topo: &Topology,
    request: &Request,
    k: usize,
) -> anyhow::Result<Option<(Baseline, Picos)>> {
    let mut best: Option<(Baseline, Picos)> = None;
    let ks: &[usize] = if k == 1 { &[1] } else { &[1, k] };
    for baseline in Baseline::ALL {
        // Ours beside the matcher (packed trees) is not what users run today.
        if !baseline.user_runs() || !baseline.kinds().contains(&request.kind) {
            continue;
        }
        for &k in ks {
            // A baseline that does not apply here (RHD off powers of two, rings that
            // the links do not close) is left out of the comparison.
            let Ok(schedule) = baseline.schedule(topo, &request.spec(topo, k)) else {
                continue;
            };
            let time_ps = simulate_schedule(topo, &schedule)?.time_ps;
            if best.map_or(true, |(_, t)| time_ps < t) {
                best = Some((baseline, time_ps));
            }
        }
    }
    Ok(best)
}

fn line(spec: &str, row: &QualityBenchRow) -> String {
    format!(
        "{:<26} {:>4} {:<13} {:>7} {:>2} {:<12} {:>12.1} {:>12.1} {:<8} {:>6.3} {:<12} {:>8}",
        spec,
        row.topology.npus,
        row.collective.kind.to_string(),
        format_size(row.collective.size_bytes.unwrap_or(0)),
        row.collective.chunks_per_npu.unwrap_or(0),
        row.kept_baseline.as_deref().unwrap_or("tacos"),
        row.time_us,
        row.bound_us,
        row.bound,
        row.efficiency,
        row.baseline.as_deref().unwrap_or("-"),
        row.speedup_over_baseline
            .map_or("-".into(), |s| format!("{s:.2}x")),
    )
}

/// What the table shows at a glance: the worst efficiencies at the largest size, and
/// every case where a baseline is faster.
fn summary(rows: &[QualityBenchRow]) -> Vec<String> {
    let mut out = Vec::new();
    let largest = rows.iter().filter_map(|r| r.collective.size_bytes).max();
    let mut at_largest: Vec<&QualityBenchRow> = rows
        .iter()
        .filter(|r| r.collective.size_bytes == largest)
        .collect();
    if !at_largest.is_empty() {
        at_largest.sort_by(|a, b| a.efficiency.total_cmp(&b.efficiency));
        let below = |t: f64| at_largest.iter().filter(|r| r.efficiency < t).count();
        out.push(format!(
            "at {}: {} cases, {} below 0.95 of the best bound, {} below 0.90; the worst:",
            format_size(largest.unwrap_or(0)),
            at_largest.len(),
            below(0.95),
            below(0.90)
        ));
        for r in at_largest.iter().take(WORST) {
            out.push(format!(
                "  {:<30} {:<13} K={} efficiency {:.3} ({} bound)",
                r.topology.name,
                r.collective.kind,
                r.collective.chunks_per_npu.unwrap_or(0),
                r.efficiency,
                r.bound
            ));
        }
    }
    let slower: Vec<&QualityBenchRow> = rows
        .iter()
        .filter(|r| r.speedup_over_baseline.is_some_and(|s| s < 1.0))
        .collect();
    out.push(format!("slower than a baseline: {} cases", slower.len()));
    for r in slower {
        out.push(format!(
            "  {:<30} {:<13} {:>7} {} {:.1} us against ours {:.1} us",
            r.topology.name,
            r.collective.kind,
            format_size(r.collective.size_bytes.unwrap_or(0)),
            r.baseline.as_deref().unwrap_or("-"),
            r.baseline_us.unwrap_or(0.0),
            r.time_us
        ));
    }
    out
}
