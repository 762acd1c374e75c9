//! `tacos bench lowering`: how long turning a synthesized schedule into MSCCL XML takes
//! (lowering, writing), and reading it back, verifying and simulating it, on 64-NPU cases.

use super::bench::{best_of, print_json, BenchArgs};
use super::progress::ProgressHandle;
use std::time::Duration;
use tacos::collective::{Collective, CollectiveKind};
use tacos::msccl::{lower, parse_program, simulate_program, verify, write_program};
use tacos::msccl::{LowerOptions, VerifyOptions};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::ps_to_us;
use tacos_cli::report::{CollectiveInfo, LoweringBenchRow, TopologyInfo};

/// (topology, collective, chunks per NPU).
const CASES: &[(&str, CollectiveKind, usize)] = &[
    ("mesh:8x8", CollectiveKind::AllGather, 1),
    ("mesh:8x8", CollectiveKind::AllGather, 4),
    ("torus:4x4x4", CollectiveKind::AllGather, 1),
    ("hypercube:6", CollectiveKind::AllGather, 1),
    ("fc:64", CollectiveKind::AllGather, 1),
    ("mesh:8x8", CollectiveKind::AllReduce, 1),
    ("torus:4x4x4", CollectiveKind::AllReduce, 1),
];

const SIZE: u64 = 1 << 30;

/// Time each measurement is repeated for, keeping the fastest run.
const BUDGET: Duration = Duration::from_millis(200);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints the table through `bar`, which names the case running.
pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<12} {:<10} {:>4} {:>3} {:>10} {:>10} {:>10} {:>11} {:>8} {:>6} {:>8} {:>9} {:>10}",
            "topology",
            "collective",
            "NPUs",
            "K",
            "lower (ms)",
            "write (ms)",
            "parse (ms)",
            "verify (ms)",
            "steps",
            "tbs",
            "XML KiB",
            "sim (ms)",
            "sim/synth"
        ));
    }
    for &(spec, kind, k) in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        bar.step(spec);
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let collective = Collective::over_all(&topo, kind, None, k, SIZE)?;
        let schedule = synthesize(&topo, &collective, &SynthOptions::seeded(args.seed))?;
        let options = LowerOptions::default();
        let (lower_t, program) = best_of(BUDGET, || Ok(lower(&schedule, &topo, &options)?))?;
        let (write_t, text) = best_of(BUDGET, || Ok(write_program(&program)))?;
        let (parse_t, _) = best_of(BUDGET, || Ok(parse_program(&text, spec)?))?;
        let (verify_t, report) =
            best_of(BUDGET, || Ok(verify(&program, &VerifyOptions::default())))?;
        if !report.is_correct() {
            anyhow::bail!(
                "{spec} {kind}: the lowered program fails verification: {}",
                report.problems[0]
            );
        }
        let (sim_t, sim) = best_of(BUDGET, || Ok(simulate_program(&topo, &program, SIZE)?))?;
        let ratio = sim.time_ps as f64 / schedule.collective_time_ps() as f64;
        let tbs: usize = program.gpus.iter().map(|g| g.threadblocks.len()).sum();
        if args.json {
            rows.push(LoweringBenchRow {
                topology: TopologyInfo::new(&topo),
                collective: CollectiveInfo::new(collective.spec()),
                lower_ms: ms(lower_t),
                write_ms: ms(write_t),
                parse_ms: ms(parse_t),
                verify_ms: ms(verify_t),
                simulate_ms: ms(sim_t),
                steps: program.steps(),
                threadblocks: tbs,
                channels: program.nchannels,
                xml_bytes: text.len(),
                time_us: ps_to_us(sim.time_ps),
                schedule_time_us: ps_to_us(schedule.collective_time_ps()),
            });
        } else {
            bar.println(format!(
                "{spec:<12} {:<10} {:>4} {k:>3} {:>10.3} {:>10.3} {:>10.3} {:>11.3} {:>8} {:>6} {:>8.0} {:>9.3} {:>10.4}",
                kind.name(),
                program.gpus.len(),
                ms(lower_t),
                ms(write_t),
                ms(parse_t),
                ms(verify_t),
                program.steps(),
                tbs,
                text.len() as f64 / 1024.0,
                ms(sim_t),
                ratio
            ));
        }
    }
    print_json(args, "lowering", rows)
}
