//! The manifest read alone: the ranges of each collective and placement tile the compiled
//! range, and each entry's predictions agree with each other. Apart from the files: no
//! file is opened, so a warm cache's quick check gets these too.

use crate::collective::CollectiveKind;
use crate::compile::manifest::{Entry, Manifest};

/// Gaps, overlaps and missing coverage among the ranges of each collective and placement.
pub(super) fn range_problems(manifest: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    let sizes = manifest.options.sizes;
    let mut groups: Vec<(CollectiveKind, bool)> = manifest
        .entries
        .iter()
        .map(|e| (e.collective, e.in_place))
        .chain(nccl_ranges(manifest).map(|(k, p, _)| (k, p)))
        .collect();
    groups.sort_by_key(|&(k, p)| (k.name(), !p));
    groups.dedup();
    for (kind, in_place) in groups {
        // Bands left or returned to NCCL are covered too: by NCCL.
        let mut ranges: Vec<(u64, u64)> = manifest
            .entries
            .iter()
            .filter(|e| (e.collective, e.in_place) == (kind, in_place))
            .map(|e| (e.min_bytes, e.max_bytes))
            .chain(
                nccl_ranges(manifest)
                    .filter(|&(k, p, _)| (k, p) == (kind, in_place))
                    .map(|(_, _, range)| range),
            )
            .collect();
        ranges.sort_unstable();
        let placement = if in_place { "in place" } else { "out of place" };
        let (first, last) = (ranges[0].0, ranges[ranges.len() - 1].1);
        if (first, last) != (sizes.min_bytes, sizes.max_bytes) {
            out.push(format!(
                "{kind} {placement} covers {first}..{last} bytes, not the compiled {}..{}",
                sizes.min_bytes, sizes.max_bytes
            ));
        }
        for w in ranges.windows(2) {
            if w[1].0 != w[0].1.saturating_add(1) {
                out.push(format!(
                    "{kind} {placement}: {}..{} and {}..{} {}",
                    w[0].0,
                    w[0].1,
                    w[1].0,
                    w[1].1,
                    if w[1].0 <= w[0].1 {
                        "overlap"
                    } else {
                        "leave a gap"
                    }
                ));
            }
        }
        if let Some(r) = ranges.iter().find(|r| r.0 > r.1) {
            out.push(format!(
                "{kind} {placement}: range {}..{} runs backwards",
                r.0, r.1
            ));
        }
    }
    out
}

/// The bands the manifest leaves to NCCL, by prediction or by measurement: (collective,
/// in place, (min, max)).
fn nccl_ranges(
    manifest: &Manifest,
) -> impl Iterator<Item = (CollectiveKind, bool, (u64, u64))> + '_ {
    let left = manifest
        .left_to_nccl
        .iter()
        .map(|l| (l.collective, l.in_place, (l.min_bytes, l.max_bytes)));
    let returned = manifest
        .returned_to_nccl
        .iter()
        .map(|r| (r.collective, r.in_place, (r.min_bytes, r.max_bytes)));
    left.chain(returned)
}

/// What is wrong with an entry's predictions, read alone: the bands must start at the
/// entry's smallest size and climb inside its range, and each band's figures must agree
/// with each other as the compiler derives them from one simulated time (an edited time,
/// bandwidth, bound or speedup breaks that; re-timing them needs the topology).
pub(super) fn band_problem(entry: &Entry) -> Option<String> {
    let sizes: Vec<u64> = entry.bands.iter().map(|b| b.size_bytes).collect();
    let climbs = sizes.windows(2).all(|w| w[0] < w[1]);
    let inside = sizes
        .iter()
        .all(|s| (entry.min_bytes..=entry.max_bytes).contains(s));
    if sizes.first() != Some(&entry.min_bytes) || !climbs || !inside {
        return Some(format!(
            "predictions at sizes {sizes:?}, which must start at {} and climb within {}..{}",
            entry.min_bytes, entry.min_bytes, entry.max_bytes
        ));
    }
    let agrees = |recorded: f64, derived: f64| {
        recorded.is_finite() && (recorded - derived).abs() <= 1e-9 * derived.abs().max(1e-300)
    };
    for band in &entry.bands {
        let time = band.time_us;
        let consistent = time.is_finite()
            && time > 0.0
            && band.bound_us.is_finite()
            && (0.0..=time * (1.0 + 1e-9)).contains(&band.bound_us)
            && agrees(band.algbw_gbps, band.size_bytes as f64 / (time * 1e3))
            && agrees(band.efficiency, band.bound_us / time)
            && match (band.best_baseline_us, band.speedup_vs_baseline) {
                (Some(base), Some(speedup)) => agrees(speedup, base / time),
                (None, None) => true,
                _ => false,
            };
        if !consistent {
            return Some(format!(
                "at {} bytes the predictions disagree with each other: time {} us, algbw {} GB/s, bound {} us, efficiency {}, baseline {}, speedup {}",
                band.size_bytes,
                band.time_us,
                band.algbw_gbps,
                band.bound_us,
                band.efficiency,
                band.best_baseline_us
                    .map_or("none".to_string(), |us| format!("{us} us")),
                band.speedup_vs_baseline
                    .map_or("none".to_string(), |x| format!("{x}x"))
            ));
        }
    }
    None
}
