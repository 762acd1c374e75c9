//! `tacos bench tuner`: how long the NCCL tuner plugin's init takes (everything it does
//! but reading the environment and logging: topology, simulations, every size band's
//! decision) and what one getCollInfo costs through the plugin's v5 entry point.

use super::bench::{best_of, BenchArgs};
use crate::ffi::abi::ncclSuccess;
use crate::ffi::tuner::{context_for, ncclTunerPlugin_v5};
use crate::tuner::{Communicator, PluginEnv, Tuner};
use anyhow::{anyhow, Context as _};
use std::time::{Duration, Instant};

/// (topology: a spec, or None for the plugin's generic cluster; ranks; nodes).
const CASES: &[(Option<&str>, usize, usize)] = &[
    (None, 64, 8),
    (Some("preset:dgx-a100,nodes=8"), 64, 8),
    (Some("preset:dgx-h100,nodes=8"), 64, 8),
    (Some("preset:dgx-a100,nodes=2"), 16, 2),
    (Some("preset:hgx-h100"), 8, 1),
    (None, 128, 16),
    (None, 256, 32),
];

/// getCollInfo calls timed per case, over every tuned collective and size band.
const LOOKUPS: usize = 1_000_000;

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:<26} {:>6} {:>6} {:>15} {:>15} {:>12}",
            "topology", "ranks", "nodes", "init cold (ms)", "init best (ms)", "lookup (ns)"
        );
    }
    let mut first_summary = None;
    for &(spec, ranks, nodes) in CASES {
        let label = spec.unwrap_or("generic");
        if args.filter.as_deref().is_some_and(|f| !label.contains(f)) {
            continue;
        }
        if args.quick && ranks > 64 {
            continue;
        }
        let env = PluginEnv {
            topology: spec.map(str::to_string),
            ..PluginEnv::default()
        };
        let comm = Communicator {
            ranks,
            nodes,
            constants: None,
        };
        let init = || Tuner::for_communicator(&env, &comm, None);
        let started = Instant::now();
        let tuner = init().with_context(|| format!("{label}, {ranks} ranks"))?;
        let cold = started.elapsed();
        let (best, _) = best_of(Duration::from_millis(300), || Ok(init()?))?;
        first_summary.get_or_insert_with(|| (tuner.description().to_string(), tuner.summary()));
        let lookup_ns = time_lookups(tuner)?;
        let (cold_ms, best_ms) = (cold.as_secs_f64() * 1e3, best.as_secs_f64() * 1e3);
        if args.json {
            rows.push(serde_json::json!({
                "topology": label,
                "ranks": ranks,
                "nodes": nodes,
                "init_cold_ms": cold_ms,
                "init_best_ms": best_ms,
                "lookup_ns": lookup_ns,
            }));
        } else {
            println!(
                "{label:<26} {ranks:>6} {nodes:>6} {cold_ms:>15.2} {best_ms:>15.2} {lookup_ns:>12.1}"
            );
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if let Some((description, summary)) = first_summary {
        println!("\nchoices on {description}:");
        for line in summary {
            println!("  {line}");
        }
    }
    Ok(())
}

/// Nanoseconds per getCollInfo on an NCCL-shaped cost table (a fresh copy each call).
fn time_lookups(tuner: Tuner) -> anyhow::Result<f64> {
    let plugin = &ncclTunerPlugin_v5.0;
    let get = plugin
        .getCollInfo
        .ok_or_else(|| anyhow!("no getCollInfo"))?;
    let finalize = plugin.finalize.ok_or_else(|| anyhow!("no finalize"))?;
    let ctx = context_for(tuner);
    let mut nccl_table = [-1.0f32; 21];
    nccl_table[..6].fill(10.0);
    let started = Instant::now();
    let mut failures = 0;
    for i in 0..LOOKUPS {
        let mut table = nccl_table;
        let mut channels = 0;
        let (coll, bytes) = ((i % 5) as u32, 1usize << (i % 40));
        // SAFETY: a context from `context_for` and a 7 x 3 table, as NCCL passes them.
        let r = unsafe {
            get(
                ctx,
                coll,
                bytes,
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut channels,
            )
        };
        failures += usize::from(r != ncclSuccess);
        std::hint::black_box(&table);
    }
    let ns = started.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64;
    // SAFETY: the context is finalized once.
    unsafe { finalize(ctx) };
    if failures > 0 {
        return Err(anyhow!("{failures} getCollInfo calls failed"));
    }
    Ok(ns)
}
