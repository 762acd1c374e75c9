//! Charts drawn from command reports: `tacos bench scale`'s synthesis time against NPUs
//! and `tacos calibrate`'s measured and predicted busbw against size.

use super::chart::{LineChart, Series};
use super::scale::TickFormat;
use crate::report::{CalibrateReport, ScalePlot, ScalePoint};
use tacos::collective::CollectiveKind;
use tacos::sim::bus_factor;

/// Log-log synthesis time (ms) against NPUs: this run's meshes and the public C++
/// reference's, each with its fitted power law dashed.
pub fn scale_svg(plot: &ScalePlot) -> String {
    let mut series = Vec::new();
    // (series, its fit's short name: the legend's column is narrow)
    for ((name, short), points, exponent) in [
        (("tacos", "tacos"), &plot.points, plot.exponent),
        (
            ("C++ reference", "C++"),
            &plot.reference_cpp,
            plot.reference_cpp_exponent,
        ),
    ] {
        if points.is_empty() {
            continue;
        }
        series.push(Series {
            name: name.to_string(),
            points: points.iter().map(|p| (p.npus as f64, p.synth_ms)).collect(),
            dashed: false,
        });
        if let Some(e) = exponent {
            series.push(Series {
                name: format!("{short} fit: NPUs^{e:.2}"),
                points: fitted(points, e),
                dashed: true,
            });
        }
    }
    LineChart {
        title: "Synthesis time against NPUs (2D meshes, All-Gather)".into(),
        x_label: "NPUs".into(),
        y_label: "synthesis time (ms)".into(),
        log_x: true,
        log_y: true,
        series,
        ..LineChart::default()
    }
    .log_y_over_decades()
    .to_svg()
}

/// The power law with slope `exponent` through the points' mean in log space (what a
/// least-squares fit on logs passes through), at the smallest and largest NPU counts.
fn fitted(points: &[ScalePoint], exponent: f64) -> Vec<(f64, f64)> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.npus > 0 && p.synth_ms > 0.0)
        .map(|p| ((p.npus as f64).ln(), p.synth_ms.ln()))
        .collect();
    if logs.is_empty() {
        return Vec::new();
    }
    let n = logs.len() as f64;
    let (mx, my) = logs
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (lo, hi) = logs
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.0), h.max(p.0)));
    [lo, hi]
        .iter()
        .map(|&x| (x.exp(), (my + exponent * (x - mx)).exp()))
        .collect()
}

/// Bus bandwidth (GB/s, as nccl-tests counts it) against size, log x: per table the
/// measured points and the fitted model's predictions (dashed).
pub fn calibration_svg(report: &CalibrateReport) -> String {
    let mut series = Vec::new();
    for t in &report.tables {
        let kind = t.collective.parse::<CollectiveKind>().ok();
        let busbw = |bytes: u64, us: f64| {
            let factor = kind.map_or(1.0, |k| bus_factor(k, t.ranks));
            bytes as f64 / (us * 1e3) * factor
        };
        let pick = |predicted: bool| -> Vec<(f64, f64)> {
            t.points
                .iter()
                .map(|p| {
                    let us = if predicted {
                        p.predicted_us
                    } else {
                        p.measured_us
                    };
                    (p.size_bytes as f64, busbw(p.size_bytes, us))
                })
                .collect()
        };
        // The file name alone: the legend is narrow.
        let name = t.name.rsplit('/').next().unwrap_or(&t.name);
        series.push(Series {
            name: format!("{name} measured"),
            points: pick(false),
            dashed: false,
        });
        series.push(Series {
            name: format!("{name} predicted"),
            points: pick(true),
            dashed: true,
        });
    }
    LineChart {
        title: format!("Measured and predicted busbw ({} profile)", report.gpu_arch),
        x_label: "size".into(),
        y_label: "busbw (GB/s)".into(),
        log_x: true,
        x_format: TickFormat::Bytes,
        series,
        ..LineChart::default()
    }
    .log_y_over_decades()
    .to_svg()
}
