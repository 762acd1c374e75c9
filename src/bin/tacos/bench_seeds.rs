//! `tacos bench seeds`: the seed study. On the topologies the public C++ TACOS was run on
//! (../shared/reference/figures.md, in its units: links of 50 GiB/s and 0.5 us), every one
//! of N seeds synthesizes alone, and the default search (`pipeline::default_seeds` seeds,
//! the best kept) is set against the C++'s median over 100 seeds: how often one seed alone
//! lands worse, and whether what `synth` keeps by default ever does.

use super::bench::{print_json, BenchArgs};
use super::progress::ProgressHandle;
use tacos::collective::CollectiveKind;
use tacos::pipeline::{self, Chunks, Request};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::ps_to_us;
use tacos_cli::report::SeedsBenchRow;

/// (spec, chunks per NPU, the C++'s median and best collective time in us over 100 seeds):
/// All-Gather of 1 GiB, links of 50 GiB/s written in GB/s. The C++ figures: its code as
/// published, built on this machine class, its random engine seeded 1 to 100.
const CASES: [(&str, usize, f64, f64); 7] = [
    ("mesh:4x4,bw=53.6870912", 1, 10004.0, 10004.0),
    ("mesh:8x8,bw=53.6870912", 1, 10016.0, 10016.0),
    ("torus:8x8,bw=53.6870912", 1, 5321.0, 5321.0),
    ("torus:8x8,bw=53.6870912", 4, 5032.0, 5032.0),
    ("mesh:4x4x4,bw=53.6870912", 1, 6573.0, 6573.0),
    ("torus:4x4x4,bw=53.6870912", 1, 3443.0, 3443.0),
    ("multi:L8xL8,bw=107.3741824:26.8435456", 1, 8913.75, 8446.5),
];
/// Seeds per case (`--quick`: 20).
const SEEDS: u64 = 100;

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let seeds = if args.quick { 20 } else { SEEDS };
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<40} {:>3} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11} {:>16}",
            "topology",
            "K",
            "C++ median",
            "C++ best",
            "best",
            "median",
            "worst",
            "seeds worse",
            "default (seeds)"
        ));
    }
    for (spec, k, reference_us, reference_best_us) in CASES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        bar.step(spec);
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        let request = Request::new(CollectiveKind::AllGather, 1 << 30);
        let options = pipeline::Options {
            chunks: Chunks::Fixed(k),
            seeds: (args.seed..args.seed + seeds).collect(),
            ..pipeline::Options::default()
        };
        let found = pipeline::schedule(&topo, &request, &options)?;
        // Each seed's simulated time, in seed order (what the search chooses on).
        let times: Vec<f64> = found
            .trials
            .iter()
            .map(|t| t.simulated_ps.map(ps_to_us))
            .collect::<Option<_>>()
            .ok_or_else(|| anyhow::anyhow!("{spec}: a seed's schedule could not be simulated"))?;
        let default_seeds = pipeline::default_seeds(&topo, &request, Chunks::Fixed(k));
        let default_us = times[..default_seeds.min(times.len())]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let worse = |t: f64| t > reference_us + 1e-6;
        let row = SeedsBenchRow {
            topology: spec.to_string(),
            chunks_per_npu: k,
            seeds: times.len(),
            reference_cpp_median_us: reference_us,
            reference_cpp_best_us: reference_best_us,
            best_us: sorted[0],
            median_us: sorted[sorted.len() / 2],
            worst_us: sorted[sorted.len() - 1],
            seeds_worse_than_reference: times.iter().filter(|&&t| worse(t)).count(),
            default_seeds,
            default_us,
            default_worse_than_reference: worse(default_us),
        };
        if !args.json {
            bar.println(format!(
                "{:<40} {:>3} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} of {:<3} {:>9.1} ({}){}",
                spec,
                k,
                reference_us,
                reference_best_us,
                row.best_us,
                row.median_us,
                row.worst_us,
                row.seeds_worse_than_reference,
                row.seeds,
                default_us,
                default_seeds,
                if row.default_worse_than_reference {
                    " worse"
                } else {
                    ""
                }
            ));
        }
        rows.push(row);
    }
    print_json(args, "seeds", rows)
}
