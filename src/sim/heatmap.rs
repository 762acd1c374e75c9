//! The per-link load matrix as an SVG picture (the TACOS paper's Fig. 1): one panel per
//! algorithm, source NPU down, destination NPU across, each link coloured by the share of
//! the algorithm's time it was busy; cells with no link stay light grey.

use super::SimReport;
use std::fmt::Write;

/// Colour stops from idle (dark) to always busy (bright), perceptually ordered.
const STOPS: [(f64, [u8; 3]); 5] = [
    (0.0, [0x44, 0x01, 0x54]),
    (0.25, [0x3b, 0x52, 0x8b]),
    (0.5, [0x21, 0x91, 0x8c]),
    (0.75, [0x5e, 0xc9, 0x62]),
    (1.0, [0xfd, 0xe7, 0x25]),
];
const NO_LINK: &str = "#eeeeee";
const PANEL: f64 = 360.0;
const MARGIN: f64 = 70.0;
const COLUMNS: usize = 3;

/// An SVG of each (name, report)'s link utilization on a topology of `npus` NPUs.
pub fn heatmap_svg(title: &str, npus: usize, panels: &[(String, &SimReport)]) -> String {
    let cell = PANEL / npus.max(1) as f64;
    let columns = panels.len().clamp(1, COLUMNS);
    let rows = panels.len().div_ceil(COLUMNS).max(1);
    let (panel_w, panel_h) = (PANEL + MARGIN + 20.0, PANEL + MARGIN + 30.0);
    let width = columns as f64 * panel_w + 40.0;
    let height = 60.0 + rows as f64 * panel_h + 70.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="20" y="30" font-size="18" font-weight="bold">{}</text>"#,
        escape(title)
    );
    for (i, (name, report)) in panels.iter().enumerate() {
        let x0 = 20.0 + (i % COLUMNS) as f64 * panel_w + MARGIN;
        let y0 = 60.0 + (i / COLUMNS) as f64 * panel_h + 30.0;
        panel(&mut svg, name, report, npus, x0, y0, cell);
    }
    colour_bar(&mut svg, 20.0 + MARGIN, height - 50.0);
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    name: &str,
    report: &SimReport,
    npus: usize,
    x0: f64,
    y0: f64,
    cell: f64,
) {
    let _ = writeln!(
        svg,
        r#"<text x="{x0}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        y0 - 10.0,
        escape(name)
    );
    let _ = writeln!(
        svg,
        r#"<rect x="{x0}" y="{y0}" width="{PANEL}" height="{PANEL}" fill="{NO_LINK}" stroke="gray"/>"#
    );
    for link in &report.links {
        let _ = writeln!(
            svg,
            r#"<rect x="{:.2}" y="{:.2}" width="{cell:.2}" height="{cell:.2}" fill="{}"><title>{} -> {}: {:.1}% busy, {:.0} bytes</title></rect>"#,
            x0 + link.dst as f64 * cell,
            y0 + link.src as f64 * cell,
            colour(link.utilization),
            link.src,
            link.dst,
            100.0 * link.utilization,
            link.bytes
        );
    }
    // Ticks at a round step, about eight per axis.
    let step = [
        1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 200, 256, 500, 512, 1000,
    ]
    .into_iter()
    .find(|&s| npus.div_ceil(s) <= 8)
    .unwrap_or(npus.div_ceil(8).max(1));
    for t in (0..npus).step_by(step) {
        let at = (t as f64 + 0.5) * cell;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t}</text>"#,
            x0 + at,
            y0 + PANEL + 14.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" dominant-baseline="middle">{t}</text>"#,
            x0 - 4.0,
            y0 + at
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">destination NPU</text>"#,
        x0 + PANEL / 2.0,
        y0 + PANEL + 32.0
    );
    let (lx, ly) = (x0 - 34.0, y0 + PANEL / 2.0);
    let _ = writeln!(
        svg,
        r#"<text x="{lx:.1}" y="{ly:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">source NPU</text>"#
    );
}

fn colour_bar(svg: &mut String, x0: f64, y0: f64) {
    let (w, h) = (300.0, 14.0);
    let _ = writeln!(svg, r#"<defs><linearGradient id="scale">"#);
    for (at, _) in STOPS {
        let _ = writeln!(
            svg,
            r#"<stop offset="{:.0}%" stop-color="{}"/>"#,
            at * 100.0,
            colour(at)
        );
    }
    let _ = writeln!(svg, "</linearGradient></defs>");
    let _ = writeln!(
        svg,
        r#"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="url(#scale)" stroke="gray"/>"#
    );
    for (at, label) in [(0.0, "0%"), (0.5, "50%"), (1.0, "100%")] {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{label}</text>"#,
            x0 + at * w,
            y0 + h + 14.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12">link busy time / the algorithm's collective time</text>"#,
        x0 + w + 16.0,
        y0 + h - 2.0
    );
    let _ = writeln!(
        svg,
        r#"<rect x="{:.1}" y="{y0}" width="{h}" height="{h}" fill="{NO_LINK}" stroke="gray"/><text x="{:.1}" y="{:.1}" font-size="12">no link</text>"#,
        x0 + w + 350.0,
        x0 + w + 370.0,
        y0 + h - 2.0
    );
}

/// The colour for a utilization in [0, 1].
fn colour(utilization: f64) -> String {
    let u = utilization.clamp(0.0, 1.0);
    let i = STOPS
        .iter()
        .position(|&(at, _)| at >= u)
        .unwrap_or(STOPS.len() - 1)
        .max(1);
    let ((a, ca), (b, cb)) = (STOPS[i - 1], STOPS[i]);
    let f = if b > a { (u - a) / (b - a) } else { 0.0 };
    let mix = |k: usize| (ca[k] as f64 + f * (cb[k] as f64 - ca[k] as f64)).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
