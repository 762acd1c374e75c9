//! `tacos bench scheduler`: how long the MSCCL scheduler plugin's `init` takes through its
//! real entry point, with a cold cache (a new, empty cache directory: the algorithm set is
//! compiled) and a warm one (the set is found and its hashes checked).

use super::bench::BenchArgs;
use crate::ffi::abi::ncclSuccess;
use crate::ffi::scheduler::mscclScheduler;
use anyhow::bail;
use std::time::{Duration, Instant};

/// Clusters to time: (TACOS_TOPOLOGY, GPUs).
const CASES: &[(&str, usize)] = &[
    ("preset:hgx-h100", 8),
    ("preset:dgx-a100,nodes=2", 16),
    ("preset:dgx-a100,nodes=4", 32),
    ("preset:dgx-a100,nodes=8", 64),
];

/// One init and teardown of the plugin; what the executor does per communicator.
fn init_once() -> anyhow::Result<Duration> {
    let table = &mscclScheduler.0;
    let (Some(init), Some(teardown)) = (table.init, table.teardown) else {
        bail!("the scheduler table lacks init or teardown");
    };
    let started = Instant::now();
    // SAFETY: the plugin's own entry points, called as the executor calls them.
    let rc = unsafe { init() };
    let took = started.elapsed();
    unsafe { teardown() };
    if rc != ncclSuccess {
        bail!("init returned {rc}");
    }
    Ok(took)
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
        let cache = scratch.join(i.to_string());
        // The plugin reads its settings from the environment, as in a job.
        std::env::set_var("TACOS_TOPOLOGY", spec);
        std::env::set_var("TACOS_CACHE_DIR", &cache);
        let cold = init_once()?;
        let warm = (0..5)
            .map(|_| init_once())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let warm = warm.into_iter().min().unwrap_or_default();
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
