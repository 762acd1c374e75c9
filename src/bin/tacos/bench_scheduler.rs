//! `tacos bench scheduler`: how long until the MSCCL scheduler plugin serves a
//! communicator (a `plugin::Scheduler` started on a configuration naming the cluster, its
//! set prepared for the cluster's size), with a cold cache (a new, empty cache directory:
//! the algorithm set is compiled in the background while calls fall back) and a warm one
//! (the set is found, its hashes and every file's loader rules checked). The executor's
//! calls never wait longer than `TACOS_INIT_BUDGET` for either.

use super::bench::BenchArgs;
use std::time::{Duration, Instant};
use tacos::plugin::{Config, Scheduler, Silent};

/// Clusters to time: (topology spec, GPUs).
const CASES: &[(&str, usize)] = &[
    ("preset:hgx-h100", 8),
    ("preset:dgx-a100,nodes=2", 16),
    ("preset:dgx-a100,nodes=4", 32),
    ("preset:dgx-a100,nodes=8", 64),
];

/// One start of the scheduler until it serves `gpus`-rank communicators.
fn ready_once(config: &Config, gpus: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut scheduler = Scheduler::new(Ok(config.clone()), Box::new(Silent));
    anyhow::ensure!(
        scheduler.wait(gpus, Duration::from_secs(3600)),
        "no algorithm set for {gpus} ranks on {:?}",
        config.topology
    );
    Ok(started.elapsed())
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("tacos-bench-scheduler-{}", std::process::id()));
    if !args.json {
        println!(
            "{:<26} {:>5} {:>15} {:>15}",
            "TACOS_TOPOLOGY", "GPUs", "cold ready (ms)", "warm ready (ms)"
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
        let cold = ready_once(&config, gpus)?;
        let mut warm = Duration::MAX;
        for _ in 0..5 {
            warm = warm.min(ready_once(&config, gpus)?);
        }
        anyhow::ensure!(
            config.cache_dir.read_dir()?.next().is_some(),
            "{spec}: nothing was cached in {}",
            config.cache_dir.display()
        );
        let (cold_ms, warm_ms) = (cold.as_secs_f64() * 1e3, warm.as_secs_f64() * 1e3);
        if args.json {
            rows.push(serde_json::json!({
                "topology": spec, "gpus": gpus, "cold_ready_ms": cold_ms, "warm_ready_ms": warm_ms,
            }));
        } else {
            println!("{spec:<26} {gpus:>5} {cold_ms:>15.1} {warm_ms:>15.2}");
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
