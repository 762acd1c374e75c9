//! `tacos bench --compile`: how long the plugin's cold-cache compile (`compile` with the
//! fast preset: every collective, placement and size band, verified) takes on DGX A100
//! clusters of 1 to 8 nodes, and what it produces. Each case runs a few times: the
//! fastest and the slowest run are shown, since the machine may be shared.

use super::bench::BenchArgs;
use crate::compile::{compile, CompileOptions};
use crate::topology::{parse_spec, SpecDefaults};
use std::time::Instant;

const CASES: &[&str] = &[
    "preset:dgx-a100,nodes=1",
    "preset:dgx-a100,nodes=2",
    "preset:dgx-a100,nodes=4",
    "preset:dgx-a100,nodes=8",
];

/// Runs per case.
const RUNS: usize = 3;

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:<26} {:>5} {:>6} {:>9} {:>10} {:>10} {:>12}",
            "topology", "NPUs", "files", "XML MiB", "best (s)", "worst (s)", "min. eff."
        );
    }
    for &spec in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        if args.quick && spec.ends_with("nodes=8") {
            continue;
        }
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let options = CompileOptions::fast();
        let mut times = Vec::new();
        let mut set = None;
        for _ in 0..RUNS {
            let started = Instant::now();
            set = Some(compile(&topo, &options, &|_| {})?);
            times.push(started.elapsed().as_secs_f64());
        }
        let set = set.expect("ran at least once");
        let best = times.iter().copied().fold(f64::INFINITY, f64::min);
        let worst = times.iter().copied().fold(0.0, f64::max);
        let xml_mib = set.files.iter().map(|f| f.xml.len()).sum::<usize>() as f64 / 1048576.0;
        // The least efficient band (its bound over its predicted time).
        let efficiency = set
            .manifest
            .entries
            .iter()
            .flat_map(|e| &e.bands)
            .map(|b| b.efficiency)
            .fold(1.0, f64::min);
        let npus = topo.alive_npus().len();
        if args.json {
            rows.push(serde_json::json!({
                "topology": spec,
                "npus": npus,
                "files": set.files.len(),
                "xml_bytes": set.files.iter().map(|f| f.xml.len()).sum::<usize>(),
                "seconds": times,
                "min_efficiency": efficiency,
            }));
        } else {
            println!(
                "{spec:<26} {npus:>5} {:>6} {xml_mib:>9.1} {best:>10.3} {worst:>10.3} {efficiency:>12.3}",
                set.files.len()
            );
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
