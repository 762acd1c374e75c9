//! `tacos bench sim`: simulator speed on schedules of up to a million transfers, both
//! synthesized (one hop each) and baselines (routed sends, reductions with many inputs).

use super::bench::{best_of, print_json, BenchArgs};
use super::progress::ProgressHandle;
use std::time::Duration;
use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::Schedule;
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::ps_to_us;
use tacos_cli::report::{CollectiveInfo, SimBenchRow, TopologyInfo};

/// (topology spec, collective, algorithm: None for the synthesized one).
const CASES: &[(&str, CollectiveKind, Option<Baseline>)] = &[
    ("mesh:16x16", CollectiveKind::AllGather, None),
    ("torus:16x16", CollectiveKind::AllGather, None),
    ("mesh:32x32", CollectiveKind::AllGather, None),
    (
        "mesh:16x16",
        CollectiveKind::AllGather,
        Some(Baseline::Direct),
    ),
    ("fc:128", CollectiveKind::AllReduce, Some(Baseline::Direct)),
    (
        "mesh:32x32",
        CollectiveKind::AllReduce,
        Some(Baseline::Ring),
    ),
];

const SIZE: u64 = 1 << 30;

/// Prints the table through `bar`, which names the case running.
pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<14} {:<14} {:<6} {:>10} {:>10} {:>10} {:>12} {:>13} {:>8}",
            "topology",
            "collective",
            "algo",
            "transfers",
            "sim (ms)",
            "Mtr/s",
            "time (us)",
            "synth (us)",
            "equal"
        ));
    }
    for &(spec, kind, baseline) in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && spec.contains("32x32") {
            continue;
        }
        bar.step(spec);
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let collective = Collective::over_all(&topo, kind, None, 1, SIZE)?;
        let schedule: Schedule = match baseline {
            None => synthesize(&topo, &collective, &SynthOptions::seeded(args.seed))?,
            Some(b) => b.schedule(&topo, collective.spec())?,
        };
        let (best, result) = best_of(Duration::from_millis(500), || {
            Ok(simulate_schedule(&topo, &schedule)?)
        })?;
        let time_ps = result.time_ps;
        let synth_ps = baseline.is_none().then(|| schedule.collective_time_ps());
        let algo = baseline.map_or("tacos", |b| b.name());
        let transfers = schedule.transfers.len();
        let ms = best.as_secs_f64() * 1e3;
        if args.json {
            rows.push(SimBenchRow {
                topology: TopologyInfo::new(&topo),
                collective: CollectiveInfo::new(collective.spec()),
                algorithm: algo,
                transfers,
                elapsed_ms: ms,
                time_us: ps_to_us(time_ps),
                schedule_time_us: synth_ps.map(ps_to_us),
            });
        } else {
            bar.println(format!(
                "{:<14} {:<14} {:<6} {:>10} {:>10.1} {:>10.2} {:>12.1} {:>13} {:>8}",
                spec,
                kind.name(),
                algo,
                transfers,
                ms,
                transfers as f64 / ms / 1e3,
                ps_to_us(time_ps),
                synth_ps.map_or("-".into(), |s| format!("{:.1}", ps_to_us(s))),
                synth_ps.map_or("-", |s| if s == time_ps { "yes" } else { "NO" })
            ));
        }
    }
    print_json(args, "sim", rows)
}
