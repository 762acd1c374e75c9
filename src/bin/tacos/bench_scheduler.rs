//! `tacos bench scheduler`: how long the MSCCL scheduler plugin's `init` takes (a
//! `plugin::Scheduler` started on a configuration naming the cluster), with a cold cache
//! (a new, empty cache directory: the algorithm set is compiled) and a warm one (the set
//! is found and its hashes checked).

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

/// One start of the scheduler, what the executor's init does per communicator.
fn init_once(config: &Config) -> Duration {
    let config = config.clone();
    let started = Instant::now();
    let scheduler = Scheduler::new(Ok(config), Box::new(Silent));
    let took = started.elapsed();
    drop(scheduler);
    took
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("tacos-bench-scheduler-{}", std::process::id()));
    if !args.json {
        println!(
            "{:<26} {:>5} {:>15} {:>15}",
            "TACOS_TOPOLOGY", "GPUs", "cold init (ms)", "warm init (ms)"
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
        let cold = init_once(&config);
        let warm = (0..5).map(|_| init_once(&config)).min().unwrap_or_default();
        anyhow::ensure!(
            config.cache_dir.read_dir()?.next().is_some(),
            "{spec}: nothing was cached in {}",
            config.cache_dir.display()
        );
        let (cold_ms, warm_ms) = (cold.as_secs_f64() * 1e3, warm.as_secs_f64() * 1e3);
        if args.json {
            rows.push(serde_json::json!({
                "topology": spec, "gpus": gpus, "cold_init_ms": cold_ms, "warm_init_ms": warm_ms,
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
