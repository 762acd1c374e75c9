//! `tacos bench scale`: synthesis at the TACOS paper's scale and beyond (meshes of 1K to
//! 40K NPUs, a 16K-GPU rail-optimized cluster, All-to-All over 512 NPUs): synthesis and
//! check time, peak memory,
//! transfers, the schedule's time against the bounds computed per NPU, and the points of a
//! log-log plot of synthesis time against NPUs with the fitted exponent, beside the public
//! C++ TACOS's figures on this machine class.
//!
//! Each case runs in a child process (this binary, `bench scale --case SPEC`), so that the
//! peak memory of one is not the peak of another before it.

use super::bench::{reference_mesh_ms, BenchArgs};
use super::progress::ProgressHandle;
use anyhow::Context;
use std::process::Command;
use std::time::Instant;
use tacos::bounds::{chunked_bound_ps, egress_bound_ps, ingress_bound_ps, Bounds};
use tacos::budget::MemoryLimit;
use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::synthesize_to_stream;
use tacos::schedule::{check, CheckReport};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::ps_to_us;
use tacos_cli::report::{
    BenchReport, CollectiveInfo, ScaleBenchReport, ScaleBenchRow, ScalePlot, ScalePoint,
    TopologyInfo,
};

/// The 16,384-GPU rail-optimized cluster.
const CLUSTER: &str = "preset:dgx-h100,nodes=2048,spine=64,oversub=2";

/// (topology spec, collective unless `--collective` says, whether `--quick` keeps it,
/// whether it is synthesized replicated: one node matched, `synth::Replicated`).
const CASES: &[(&str, CollectiveKind, bool, bool)] = &[
    ("mesh:32x32", CollectiveKind::AllGather, true, false),
    ("mesh:64x64", CollectiveKind::AllGather, true, false),
    ("mesh:100x100", CollectiveKind::AllGather, false, false),
    ("mesh:200x200", CollectiveKind::AllGather, false, false),
    ("mesh:200x200", CollectiveKind::AllReduce, false, false),
    (CLUSTER, CollectiveKind::AllReduce, false, false),
    (CLUSTER, CollectiveKind::AllReduce, false, true),
    ("torus:8x8x8", CollectiveKind::AllToAll, true, false),
    (
        "preset:dgx-h100,nodes=64",
        CollectiveKind::AllToAll,
        true,
        false,
    ),
];

const SIZE: u64 = 1 << 30;

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    if let Some(spec) = &args.case {
        let row = measure(spec, args)?;
        println!("{}", serde_json::to_string(&row)?);
        return Ok(());
    }
    if !args.json {
        bar.println(format!(
            "{:<59} {:>6} {:<13} {:>11} {:>10} {:>11} {:>9} {:>10} {:>11} {:>11} {:>6}",
            "topology",
            "NPUs",
            "collective",
            "synth (s)",
            "check (s)",
            "synth MiB",
            "peak MiB",
            "transfers",
            "time (us)",
            "bound (us)",
            "eff."
        ));
    }
    let mut rows = Vec::new();
    let mut cases: Vec<(&str, CollectiveKind, bool)> = Vec::new();
    for &(spec, kind, small, replicate) in CASES {
        let case = (spec, args.collective.unwrap_or(kind), replicate);
        let filtered = args.filter.as_deref().is_some_and(|f| !spec.contains(f));
        // `--collective` may make two cases one.
        if !filtered && (small || !args.quick) && !cases.contains(&case) {
            cases.push(case);
        }
    }
    for (spec, kind, replicate) in cases {
        let how = if replicate { " replicated" } else { "" };
        bar.step(&format!("{spec} {kind}{how}"));
        let row = in_child(spec, kind, replicate, args)?;
        if !args.json {
            bar.println(text_row(spec, &row));
        }
        rows.push(row);
    }
    let plot = plot(&rows);
    if let Some(file) = &args.plot {
        tacos::fsio::write_atomic(file, tacos_cli::draw::plots::scale_svg(&plot).as_bytes())?;
    }
    if args.json {
        let report = ScaleBenchReport {
            bench: BenchReport::new("scale", rows),
            plot,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    for row in rows.iter() {
        if let (Some(bytes), Some(transfers)) = (row.stream_bytes, row.transfers) {
            bar.println(format!(
                "{}: too large to hold; streamed to a file of {} ({:.1} bytes per transfer), checked from the file as it was written",
                row.topology.name,
                tacos::units::format_size(bytes),
                bytes as f64 / transfers.max(1) as f64
            ));
        }
    }
    if let Some(e) = plot.exponent {
        bar.println(format!(
            "synthesis time grows as NPUs^{e:.2} on these meshes (least squares on logs)"
        ));
    }
    if let Some(e) = plot.reference_cpp_exponent {
        bar.println(format!(
            "the public C++ TACOS's as NPUs^{e:.2} (meshes of 16 to 1,024 NPUs, one thread)"
        ));
    }
    Ok(())
}

/// Runs one case in a child process of this binary and reads back its row.
fn in_child(
    spec: &str,
    kind: CollectiveKind,
    replicate: bool,
    args: &BenchArgs,
) -> anyhow::Result<ScaleBenchRow> {
    let exe = std::env::current_exe().context("cannot find this binary to run a case")?;
    let output = Command::new(exe)
        .args(["bench", "scale", "--quiet", "--case", spec])
        .args(["--collective", kind.name()])
        .args(["--seed", &args.seed.to_string()])
        .args(replicate.then_some("--replicate"))
        .args(["--max-memory", &MemoryLimit::default().bytes().to_string()])
        .output()
        .context("cannot start a process for the case")?;
    let out = String::from_utf8_lossy(&output.stdout);
    match serde_json::from_str::<ScaleBenchRow>(out.trim()) {
        Ok(row) if output.status.success() => Ok(row),
        _ => {
            // Killed (out of memory) or failed before it could report: the row says why.
            let err = String::from_utf8_lossy(&output.stderr);
            let why = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map_or_else(|| output.status.to_string(), |l| l.trim().to_string());
            skipped(spec, kind, replicate, why)
        }
    }
}

/// A row for a case that could not be measured.
fn skipped(
    spec: &str,
    kind: CollectiveKind,
    replicated: bool,
    why: String,
) -> anyhow::Result<ScaleBenchRow> {
    let topo = parse_spec(spec, &SpecDefaults::default())?;
    let npus = topo.alive_npus();
    Ok(ScaleBenchRow {
        topology: TopologyInfo::new(&topo),
        collective: CollectiveInfo::new(&tacos::collective::CollectiveSpec {
            kind,
            root: kind.has_root().then_some(0),
            npus,
            chunks_per_npu: 1,
            size_bytes: SIZE,
        }),
        replicated,
        skipped: Some(tacos::error::echo(&why)),
        synth_ms: None,
        check_ms: None,
        synth_peak_mib: None,
        peak_mib: None,
        transfers: None,
        stream_bytes: None,
        time_us: None,
        bound_us: None,
        bound: None,
        efficiency: None,
    })
}

/// Measures one case in this process: synthesis, check, the per-NPU bounds, peak memory.
/// A schedule that would not fit in memory is streamed to a temporary file and checked
/// from it (a combining collective's matchings spooled beside it first); a synthesis the
/// memory limit refuses is a skipped row, not an error.
fn measure(spec: &str, args: &BenchArgs) -> anyhow::Result<ScaleBenchRow> {
    let kind = args.collective.unwrap_or(CollectiveKind::AllGather);
    let topo = parse_spec(spec, &SpecDefaults::default())?;
    let root = kind.has_root().then_some(0);
    let collective = match Collective::over_all(&topo, kind, root, 1, SIZE) {
        Ok(c) => c,
        Err(e) => return skipped(spec, kind, args.replicate, e.to_string()),
    };
    // Chunks with one target each follow planned paths, as a user's default search
    // keeps at this scale; copied chunks are matched freely (trees stop at 512 NPUs).
    let one_target = kind.one_target();
    let options = SynthOptions {
        replicate: args.replicate,
        planned: one_target && !args.replicate,
        ..SynthOptions::seeded(args.seed)
    };
    let held = tacos::pipeline::memory::synthesis_checked(
        &topo,
        collective.spec(),
        false,
        options.planned,
    );
    let streamed = held > MemoryLimit::default().bytes();
    let measured = match streamed {
        true => measure_streamed(&topo, &collective, &options),
        false => measure_held(&topo, &collective, &options),
    };
    let Measured {
        synth_ms,
        synth_peak_mib,
        check_ms,
        report,
        stream_bytes,
    } = match measured {
        Ok(m) => m,
        Err(e) => return skipped(spec, kind, args.replicate, e.to_string()),
    };
    let time_ps = report.collective_time_ps;
    // An All-to-All's time is set by the links between NPUs, which only the traffic and
    // cut bounds see (on these cases they take well under a second).
    let (bound, bound_ps) = if kind == CollectiveKind::AllToAll {
        let bounds = Bounds::new(&topo, &collective);
        (bounds.best_name(), bounds.best_ps())
    } else {
        [
            ("ingress", ingress_bound_ps(&topo, &collective)),
            ("egress", egress_bound_ps(&topo, &collective)),
            ("chunked", chunked_bound_ps(&topo, &collective)),
        ]
        .into_iter()
        .max_by_key(|&(_, ps)| ps)
        .unwrap_or(("ingress", 0))
    };
    Ok(ScaleBenchRow {
        topology: TopologyInfo::new(&topo),
        collective: CollectiveInfo::new(collective.spec()),
        replicated: args.replicate,
        skipped: None,
        synth_ms: Some(synth_ms),
        check_ms: Some(check_ms),
        synth_peak_mib,
        // Linux counts a thread's resident pages into the process's high-water mark in
        // batches, so a later reading can lag an earlier one by a few pages.
        peak_mib: peak_mib().map(|p| synth_peak_mib.map_or(p, |s| p.max(s))),
        transfers: Some(report.transfers),
        stream_bytes,
        time_us: Some(ps_to_us(time_ps)),
        bound_us: Some(ps_to_us(bound_ps)),
        bound: Some(bound.to_string()),
        efficiency: Some(bound_ps as f64 / time_ps.max(1) as f64),
    })
}

/// What one case's synthesis and check measured.
struct Measured {
    synth_ms: f64,
    synth_peak_mib: Option<f64>,
    check_ms: f64,
    report: CheckReport,
    stream_bytes: Option<u64>,
}

/// The schedule held in memory and checked there.
fn measure_held(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
) -> tacos::error::Result<Measured> {
    let started = Instant::now();
    let schedule = synthesize(topo, collective, options)?;
    let synth_ms = started.elapsed().as_secs_f64() * 1e3;
    let synth_peak_mib = peak_mib();
    let started = Instant::now();
    let report = check(&schedule, topo)?;
    Ok(Measured {
        synth_ms,
        synth_peak_mib,
        check_ms: started.elapsed().as_secs_f64() * 1e3,
        report,
        stream_bytes: None,
    })
}

/// The schedule streamed to a temporary file as it is made and checked from the file as
/// it is written (`pipeline::synthesize_to_stream`); the check's time is what it ran on
/// after the synthesis ended. The file is removed afterwards.
fn measure_streamed(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
) -> tacos::error::Result<Measured> {
    let path = std::env::temp_dir().join(format!("tacos-scale-{}.tts", std::process::id()));
    let made = synthesize_to_stream(topo, collective, options, &path, &mut |_| {});
    let stream_bytes = std::fs::metadata(&path).ok().map(|m| m.len());
    let _ = std::fs::remove_file(&path);
    let made = made?;
    Ok(Measured {
        synth_ms: made.synthesized.as_secs_f64() * 1e3,
        synth_peak_mib: peak_mib(),
        check_ms: made.checked.saturating_sub(made.synthesized).as_secs_f64() * 1e3,
        report: made.report,
        stream_bytes,
    })
}

/// The process's peak resident memory so far (VmHWM), in MiB; None where /proc does not
/// say (not Linux).
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn text_row(spec: &str, row: &ScaleBenchRow) -> String {
    let name = match row.replicated {
        true => format!("{spec} (replicated)"),
        false => spec.to_string(),
    };
    let head = format!(
        "{:<59} {:>6} {:<13}",
        name, row.collective.npus, row.collective.kind
    );
    if let Some(why) = &row.skipped {
        return format!("{head} skipped: {why}");
    }
    let f = |v: Option<f64>, scale: f64, places: usize| {
        v.map_or("-".into(), |v| format!("{:.*}", places, v * scale))
    };
    format!(
        "{head} {:>11} {:>10} {:>11} {:>9} {:>10} {:>11} {:>11} {:>6}",
        f(row.synth_ms, 1e-3, 2),
        f(row.check_ms, 1e-3, 2),
        f(row.synth_peak_mib, 1.0, 0),
        f(row.peak_mib, 1.0, 0),
        row.transfers.map_or("-".into(), |t| t.to_string()),
        f(row.time_us, 1.0, 1),
        f(row.bound_us, 1.0, 1),
        f(row.efficiency, 1.0, 3),
    )
}

/// The plot's data: the measured 2D-mesh All-Gathers and the C++ reference's.
fn plot(rows: &[ScaleBenchRow]) -> ScalePlot {
    let points: Vec<ScalePoint> = rows
        .iter()
        .filter(|r| r.topology.name.starts_with("mesh:") && r.collective.kind == "allgather")
        .filter_map(|r| {
            Some(ScalePoint {
                npus: r.collective.npus,
                synth_ms: r.synth_ms?,
            })
        })
        .collect();
    let reference_cpp: Vec<ScalePoint> = reference_mesh_ms()
        .into_iter()
        .map(|(npus, synth_ms)| ScalePoint { npus, synth_ms })
        .collect();
    ScalePlot {
        exponent: loglog_slope(&points),
        reference_cpp_exponent: loglog_slope(&reference_cpp),
        points,
        reference_cpp,
    }
}

/// The least-squares slope of log(time) on log(NPUs); None with fewer than two distinct
/// NPU counts.
fn loglog_slope(points: &[ScalePoint]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.npus > 0 && p.synth_ms > 0.0)
        .map(|p| ((p.npus as f64).ln(), p.synth_ms.ln()))
        .collect();
    let n = logs.len() as f64;
    let (mx, my) = logs
        .iter()
        .fold((0.0, 0.0), |(x, y), &(a, b)| (x + a / n, y + b / n));
    let sxx: f64 = logs.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = logs.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
    (logs.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(data: &[(usize, f64)]) -> Vec<ScalePoint> {
        data.iter()
            .map(|&(npus, synth_ms)| ScalePoint { npus, synth_ms })
            .collect()
    }

    #[test]
    fn the_slope_of_a_power_law_is_its_exponent() {
        // 3 n^2: 3, 12, 48 at n = 1, 2, 4.
        let slope = loglog_slope(&points(&[(1, 3.0), (2, 12.0), (4, 48.0)])).unwrap();
        assert!((slope - 2.0).abs() < 1e-12, "{slope}");
        // Off the line, least squares: log2 times 0, 3, 4 at log2 n = 0, 1, 2 give slope 2.
        let slope = loglog_slope(&points(&[(1, 1.0), (2, 8.0), (4, 16.0)])).unwrap();
        assert!((slope - 2.0).abs() < 1e-12, "{slope}");
    }

    #[test]
    fn no_slope_without_two_npu_counts() {
        assert_eq!(loglog_slope(&points(&[(4, 1.0)])), None);
        assert_eq!(loglog_slope(&points(&[(4, 1.0), (4, 2.0)])), None);
    }
}
