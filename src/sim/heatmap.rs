//! The per-link load matrix as an SVG picture (the TACOS paper's Fig. 1): one panel per
//! algorithm, source vertex down, destination vertex across, each link coloured by the
//! share of the algorithm's time it was busy; cells with no link stay light grey. Switch
//! vertices follow the NPUs, past a line, and are labelled by name: a switch's column
//! holds the ports into it, its row the ports out of it.

use super::SimReport;
use crate::topology::Topology;
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

/// Most characters of a switch's name a tick shows (about 50 pixels, within the margin
/// beside the axis caption); its cells' tooltips have the whole.
const TICK_CHARS: usize = 8;

/// An SVG of each (name, report)'s link utilization on `topo`.
pub fn heatmap_svg(title: &str, topo: &Topology, panels: &[(String, &SimReport)]) -> String {
    let cell = PANEL / topo.vertices() as f64;
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
        panel(&mut svg, name, report, topo, x0, y0, cell);
    }
    colour_bar(&mut svg, 20.0 + MARGIN, height - 50.0);
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    name: &str,
    report: &SimReport,
    topo: &Topology,
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
            r#"<rect x="{:.2}" y="{:.2}" width="{cell:.2}" height="{cell:.2}" fill="{}"><title>{}: {:.1}% busy, {:.0} bytes</title></rect>"#,
            x0 + link.dst as f64 * cell,
            y0 + link.src as f64 * cell,
            colour(link.utilization),
            escape(&format!(
                "{} -> {}",
                topo.vertex_label(link.src),
                topo.vertex_label(link.dst)
            )),
            100.0 * link.utilization,
            link.bytes
        );
    }
    // NPU ticks at a round step, about eight per axis; switches by name, about eight.
    let npus = topo.npus();
    let mut ticks: Vec<(usize, String)> = (0..npus)
        .step_by(tick_step(npus))
        .map(|t| (t, t.to_string()))
        .collect();
    let switches = topo.switches();
    ticks.extend(
        switches
            .clone()
            .step_by(tick_step(switches.len()))
            .map(|s| {
                let name = topo.switch_name(s).unwrap_or_default();
                let mut tick: String = name.chars().take(TICK_CHARS).collect();
                if name.chars().count() > TICK_CHARS {
                    tick.push('…');
                }
                (s, tick)
            }),
    );
    for (t, label) in &ticks {
        let at = (*t as f64 + 0.5) * cell;
        let label = escape(label);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{label}</text>"#,
            x0 + at,
            y0 + PANEL + 14.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" dominant-baseline="middle">{label}</text>"#,
            x0 - 4.0,
            y0 + at
        );
    }
    let what = if topo.has_switches() {
        // Where the switches begin.
        let at = npus as f64 * cell;
        let _ = writeln!(
            svg,
            r#"<path d="M{:.2} {y0} v{PANEL} M{x0} {:.2} h{PANEL}" stroke="black" stroke-width="1"/>"#,
            x0 + at,
            y0 + at
        );
        "NPU / switch"
    } else {
        "NPU"
    };
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">destination {what}</text>"#,
        x0 + PANEL / 2.0,
        y0 + PANEL + 32.0
    );
    // Left of the switches' names when there are some.
    let caption_gap = if topo.has_switches() { 62.0 } else { 34.0 };
    let (lx, ly) = (x0 - caption_gap, y0 + PANEL / 2.0);
    let _ = writeln!(
        svg,
        r#"<text x="{lx:.1}" y="{ly:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">source {what}</text>"#
    );
}

/// A round step giving about eight ticks over `count` rows.
fn tick_step(count: usize) -> usize {
    [
        1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 200, 256, 500, 512, 1000,
    ]
    .into_iter()
    .find(|&s| count.div_ceil(s) <= 8)
    .unwrap_or(count.div_ceil(8).max(1))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::LinkLoad;
    use crate::topology::Link;

    /// Four NPUs on one switch, every port half busy.
    fn star_and_report() -> (Topology, SimReport) {
        let port = |src, dst| Link {
            src,
            dst,
            bandwidth_gbps: 50.0,
            latency_us: 0.5,
        };
        let links = (0..4).flat_map(|n| [port(n, 4), port(4, n)]).collect();
        let topo =
            Topology::with_switches("star", 4, vec!["node0.nvswitch".into()], links).unwrap();
        let loads = topo
            .links()
            .iter()
            .map(|l| LinkLoad {
                src: l.src,
                dst: l.dst,
                busy_ps: 5,
                bytes: 1000.0,
                utilization: 0.5,
            })
            .collect();
        let report = SimReport {
            time_ps: 10,
            algbw_gbps: 1.0,
            busbw_gbps: 1.0,
            links: loads,
        };
        (topo, report)
    }

    #[test]
    fn switch_ports_are_rows_and_columns_named_after_the_switch() {
        let (topo, report) = star_and_report();
        let svg = heatmap_svg("star", &topo, &[("tacos".into(), &report)]);
        // Five vertices share the 360-pixel panel at (90, 90): cells of 72 pixels, the
        // switch's column and row at 90 + 4 x 72 = 378, the panel's last.
        assert_eq!(svg.matches("<title>").count(), 8);
        let cell = |x: f64, y: f64, title: &str| {
            format!(
                r#"<rect x="{x:.2}" y="{y:.2}" width="72.00" height="72.00" fill="{}"><title>{title}: 50.0% busy, 1000 bytes</title></rect>"#,
                colour(0.5)
            )
        };
        let up = cell(378.0, 90.0, "NPU 0 -&gt; switch 'node0.nvswitch'");
        let down = cell(234.0, 378.0, "switch 'node0.nvswitch' -&gt; NPU 2");
        assert!(svg.contains(&up), "{svg}");
        assert!(svg.contains(&down), "{svg}");
        // The line where the switches begin, their ticks by name, cut to eight characters.
        assert!(svg.contains(r#"<path d="M378.00 90 v360 M90 378.00 h360""#));
        assert_eq!(svg.matches(">node0.nv…</text>").count(), 2);
        assert!(svg.contains("destination NPU / switch") && svg.contains("source NPU / switch"));
    }
}
