//! `tacos bench scheduler`: what the MSCCL scheduler plugin costs a job (a
//! `plugin::Scheduler` on a configuration naming the cluster, as each GPU process runs
//! it). On a cold cache (a new, empty cache directory): how long the first call for the
//! cluster's size takes to return (it falls back, and starts the compile in the
//! background) and how long the background takes until the cache serves the next job.
//! On the warm cache: how long a new process's first call takes to return served (the
//! manifest and verdict read, the chosen file hashed). No call waits for a compile.

use super::bench::{print_json, BenchArgs};
use std::time::{Duration, Instant};
use tacos::collective::CollectiveKind;
use tacos::plugin::{Call, Config, Scheduler, Silent};
use tacos::report::SchedulerBenchRow;

/// Clusters to time: (topology spec, GPUs).
const CASES: &[(&str, usize)] = &[
    ("preset:hgx-h100", 8),
    ("preset:dgx-a100,nodes=2", 16),
    ("preset:dgx-a100,nodes=4", 32),
    ("preset:dgx-a100,nodes=8", 64),
];

/// A 1 MiB All-Reduce in place, in elements of 4 bytes that every chunk count divides.
fn first_call(gpus: usize) -> Call {
    Call {
        kind: CollectiveKind::AllReduce,
        ranks: gpus,
        in_place: true,
        bytes: 1 << 20,
        count: 1 << 18,
    }
}

/// A new process's first call for `gpus` ranks: how long it took and whether it was served.
fn first_call_of_a_job(config: &Config, gpus: usize) -> (Scheduler, Duration, bool) {
    let started = Instant::now();
    let mut scheduler = Scheduler::new(Ok(config.clone()), Box::new(Silent));
    let served = scheduler.select(&first_call(gpus)).is_some();
    (scheduler, started.elapsed(), served)
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("tacos-bench-scheduler-{}", std::process::id()));
    if !args.json {
        println!(
            "{:<26} {:>5} {:>20} {:>22} {:>20}",
            "TACOS_TOPOLOGY",
            "GPUs",
            "cold 1st call (ms)",
            "background fill (ms)",
            "warm 1st call (ms)"
        );
    }
    let mut rows = Vec::new();
    for (i, &(spec, gpus)) in CASES.iter().enumerate() {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && gpus > 16 {
            continue;
        }
        let config = Config {
            topology: Some(spec.to_string()),
            cache_dir: scratch.join(i.to_string()),
            ..Config::default()
        };
        let (mut cold_job, cold, served) = first_call_of_a_job(&config, gpus);
        anyhow::ensure!(!served, "{spec}: a cold cache served");
        let started = Instant::now();
        anyhow::ensure!(
            cold_job.wait(gpus, Duration::from_secs(3600)),
            "{spec}: the background compile did not fill the cache"
        );
        let fill = started.elapsed() + cold;
        let mut warm = Duration::MAX;
        for _ in 0..5 {
            let (_, took, served) = first_call_of_a_job(&config, gpus);
            anyhow::ensure!(
                served,
                "{spec}: the warm cache did not serve the first call"
            );
            warm = warm.min(took);
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if args.json {
            rows.push(SchedulerBenchRow {
                topology: spec.to_string(),
                gpus,
                cold_first_call_ms: ms(cold),
                background_fill_ms: ms(fill),
                warm_first_call_ms: ms(warm),
            });
        } else {
            println!(
                "{spec:<26} {gpus:>5} {:>20.2} {:>22.1} {:>20.2}",
                ms(cold),
                ms(fill),
                ms(warm)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print_json(args, "scheduler", rows)
}
