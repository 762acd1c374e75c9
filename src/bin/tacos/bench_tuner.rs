//! `tacos bench tuner`: how long the NCCL tuner plugin's init takes (everything it does
//! but reading the environment and logging: topology, simulations, every size band's
//! decision, through `plugin::tuner_for`) and what one getCollInfo's decision costs
//! (`plugin::Tuning::steer` on an NCCL-shaped cost table).

use super::bench::{best_of, BenchArgs};
use anyhow::{anyhow, Context as _};
use std::time::{Duration, Instant};
use tacos::plugin::{tuner_for, Config, CostTable, Tuning};
use tacos::tuner::{Communicator, Tuner, TUNED};

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

/// Decisions timed per case, over every tuned collective and size band.
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
        let config = Config {
            topology: spec.map(str::to_string),
            ..Config::default()
        };
        let comm = Communicator {
            ranks,
            nodes,
            constants: None,
        };
        let init = || tuner_for(&config, &comm, None);
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

/// Nanoseconds per decision on an NCCL-shaped 7 x 3 cost table (a fresh copy each call),
/// as getCollInfo v3+ makes it.
fn time_lookups(tuner: Tuner) -> anyhow::Result<f64> {
    let tuning = Tuning {
        tuner: Some(tuner),
        user_chose_algorithms: false,
    };
    let mut nccl_table = [-1.0f32; 21];
    nccl_table[..6].fill(10.0);
    let started = Instant::now();
    for i in 0..LOOKUPS {
        let mut costs = nccl_table;
        let (kind, bytes) = (TUNED[i % TUNED.len()], 1u64 << (i % 40));
        let mut table = CostTable::new(&mut costs, 3).ok_or_else(|| anyhow!("a 7 x 3 table"))?;
        let channels = tuning.steer(kind, bytes, &mut table).map(|c| c.channels);
        std::hint::black_box((&costs, channels));
    }
    Ok(started.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64)
}
