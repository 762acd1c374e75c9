//! `tacos bench compile`: the plugin's cache on DGX A100 clusters of 1 to 8 nodes:
//! `open_or_compile` with the fast preset (every collective, placement and size band,
//! verified) into an empty directory (a cold cache: compile and write) and again (a warm
//! one: every file's hash checked). Cold runs are repeated, and the fastest and the
//! slowest shown, since the machine may be shared.

use super::bench::{print_json, BenchArgs};
use super::progress::ProgressHandle;
use std::time::Instant;
use tacos::compile::CompileOptions;
use tacos::plugin::{open_or_compile, Opened};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos_cli::report::{CompileBenchRow, TopologyInfo};

const CASES: &[&str] = &[
    "preset:dgx-a100,nodes=1",
    "preset:dgx-a100,nodes=2",
    "preset:dgx-a100,nodes=4",
    "preset:dgx-a100,nodes=8",
];

/// Cold runs per case.
const RUNS: usize = 3;

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let scratch = std::env::temp_dir().join(format!("tacos-bench-compile-{}", std::process::id()));
    let result = run_in(args, &scratch, bar);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Prints the table through `bar`, which names the case running.
fn run_in(args: &BenchArgs, scratch: &std::path::Path, bar: &ProgressHandle) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<26} {:>5} {:>6} {:>9} {:>14} {:>15} {:>9} {:>10}",
            "topology",
            "NPUs",
            "files",
            "XML MiB",
            "cold best (s)",
            "cold worst (s)",
            "warm (s)",
            "min. eff."
        ));
    }
    let options = CompileOptions::fast();
    for &spec in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && spec.ends_with("nodes=8") {
            continue;
        }
        bar.step(spec);
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let dir = scratch.join("cache");
        let mut cold = Vec::new();
        for _ in 0..RUNS {
            let _ = std::fs::remove_dir_all(&dir);
            let started = Instant::now();
            let (_, opened) = open_or_compile(&dir, &topo, &options, false, &|_| {})?;
            cold.push(started.elapsed().as_secs_f64());
            anyhow::ensure!(
                matches!(opened, Opened::Compiled(_)),
                "{spec}: not compiled"
            );
        }
        let started = Instant::now();
        let (manifest, opened) = open_or_compile(&dir, &topo, &options, false, &|_| {})?;
        let warm = started.elapsed().as_secs_f64();
        anyhow::ensure!(opened == Opened::Existing, "{spec}: compiled again");
        let xml_bytes: u64 = std::fs::read_dir(&dir)?
            .map(|e| Ok(e?.metadata()?.len()))
            .collect::<std::io::Result<Vec<u64>>>()?
            .iter()
            .sum();
        // The least efficient band (its bound over its predicted time).
        let efficiency = manifest
            .entries
            .iter()
            .flat_map(|e| &e.bands)
            .map(|b| b.efficiency)
            .fold(1.0, f64::min);
        let best = cold.iter().copied().fold(f64::INFINITY, f64::min);
        let worst = cold.iter().copied().fold(0.0, f64::max);
        let npus = topo.alive_npus().len();
        let files = manifest.entries.len();
        if args.json {
            rows.push(CompileBenchRow {
                topology: TopologyInfo::new(&topo),
                files,
                xml_bytes,
                cold_ms: cold.iter().map(|s| s * 1e3).collect(),
                warm_ms: warm * 1e3,
                min_efficiency: efficiency,
            });
        } else {
            bar.println(format!(
                "{spec:<26} {npus:>5} {files:>6} {:>9.1} {best:>14.3} {worst:>15.3} {warm:>9.3} {efficiency:>10.3}",
                xml_bytes as f64 / 1048576.0
            ));
        }
    }
    print_json(args, "compile", rows)
}
