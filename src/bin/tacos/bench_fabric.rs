//! `tacos bench fabric`: synthesis through switch vertices on switched machines (a star,
//! the DGX presets as rail-optimized fabrics, a 1,024-GPU cluster with a 2:1 spine): its
//! speed, its time against the bounds and against Ring on the same fabric.

use super::bench::{print_json, BenchArgs};
use super::progress::ProgressHandle;
use std::time::Instant;
use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::{ps_to_us, Picos};
use tacos_cli::report::{BoundsReport, CollectiveInfo, FabricBenchRow, Timing, TopologyInfo};

/// (topology spec, whether only K = 1 is tried: the large cases, where one synthesis is
/// the figure measured).
const CASES: &[(&str, bool)] = &[
    ("switch:8", false),
    ("preset:dgx-a100,nodes=2", false),
    ("preset:dgx-h100,nodes=4", false),
    ("preset:dgx-h100,nodes=128,spine=4,oversub=2", true),
];

const SIZE: u64 = 1 << 30;

/// The collectives measured unless `--collective` names one.
const KINDS: [CollectiveKind; 3] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
];

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let kinds: Vec<CollectiveKind> = args.collective.map_or(KINDS.to_vec(), |k| vec![k]);
    if !args.json {
        bar.println(format!(
            "{:<44} {:>5} {:<14} {:>2} {:>11} {:>12} {:>12} {:>6} {:>12} {:>7}",
            "topology",
            "NPUs",
            "collective",
            "K",
            "synth (ms)",
            "time (us)",
            "bound (us)",
            "eff.",
            "ring (us)",
            "speedup"
        ));
    }
    let mut rows = Vec::new();
    for &(spec, large) in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && large {
            continue;
        }
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        for &kind in &kinds {
            bar.step(&format!("{spec} {kind}"));
            let root = kind.has_root().then_some(0);
            let ks: &[usize] = if large { &[1] } else { &[1, 2, 4, 8] };
            let mut best: Option<(Picos, f64, Collective)> = None;
            for &k in ks {
                let collective = Collective::over_all(&topo, kind, root, k, SIZE)?;
                let started = Instant::now();
                let schedule = synthesize(&topo, &collective, &SynthOptions::seeded(args.seed))?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let time = schedule.collective_time_ps();
                if best.as_ref().map_or(true, |b| time < b.0) {
                    best = Some((time, ms, collective));
                }
            }
            let Some((time_ps, elapsed_ms, collective)) = best else {
                continue;
            };
            let bounds = Bounds::chunked(&topo, &collective);
            let ring_ps = Baseline::Ring
                .schedule(&topo, collective.spec())
                .and_then(|s| simulate_schedule(&topo, &s))
                .map(|r| r.time_ps)
                .ok();
            let row = FabricBenchRow {
                topology: TopologyInfo::new(&topo),
                collective: CollectiveInfo::new(collective.spec()),
                elapsed_ms,
                timing: Timing::new(collective.spec(), time_ps, &bounds),
                bounds: BoundsReport::new(&bounds),
                ring_us: ring_ps.map(ps_to_us),
                speedup_over_ring: ring_ps.map(|r| r as f64 / time_ps as f64),
            };
            if !args.json {
                bar.println(format!(
                    "{:<44} {:>5} {:<14} {:>2} {:>11.1} {:>12.1} {:>12.1} {:>6.3} {:>12} {:>7}",
                    spec,
                    topo.npus(),
                    kind.to_string(),
                    collective.spec().chunks_per_npu,
                    elapsed_ms,
                    ps_to_us(time_ps),
                    ps_to_us(bounds.best_ps()),
                    row.timing.efficiency,
                    row.ring_us.map_or("-".into(), |r| format!("{r:.1}")),
                    row.speedup_over_ring
                        .map_or("-".into(), |s| format!("{s:.2}x")),
                ));
            }
            rows.push(row);
        }
    }
    print_json(args, "fabric", rows)
}
