//! The topology drawn as itself: meshes and tori as grids of NPUs (from the dimensions
//! they were built of), rings and anything else without switches as a ring, fabrics as a
//! row of NPUs under rows of switches (a node's switch, then the rails, then the spine),
//! each row a kind of switch. Each directed link is a line of its own, beside its
//! reverse, coloured by its busy time on one scale every panel of the picture shares;
//! its `<title>` (what a browser shows on hover) gives its figures. Failed NPUs are
//! crossed out and failed links dashed red, so neither looks like a missing link.

use super::scale::ColourScale;
use super::svg::{at, attr, num, Svg};
use std::collections::{BTreeMap, VecDeque};
use tacos::sim::SimReport;
use tacos::topology::{Link, Topology, VertexId};
use tacos::units::ps_to_us;

/// Most vertices (NPUs and switches) a topology picture draws: a 64x64 mesh. Past it a
/// picture is no picture (every NPU a few pixels) and its SVG runs to hundreds of
/// megabytes per panel.
pub const MAX_DRAWN_VERTICES: usize = 4096;

/// Most directed links a topology picture draws (a 64x64 torus has 16,384).
pub const MAX_DRAWN_LINKS: usize = 32_768;

/// An error naming what is over the limits of a picture of `topo`, if anything: what the
/// commands that draw a topology check before they measure what they would draw.
///
/// ```
/// let topo = tacos::topology::parse_spec("mesh:8x8", &Default::default()).unwrap();
/// assert!(tacos_cli::draw::topology::check_drawable(&topo).is_ok());
/// ```
pub fn check_drawable(topo: &Topology) -> tacos::Result<()> {
    for (what, value, limit) in [
        ("vertices to draw", topo.vertices(), MAX_DRAWN_VERTICES),
        ("links to draw", topo.links().len(), MAX_DRAWN_LINKS),
    ] {
        if value > limit {
            return Err(tacos::Error::Limit {
                what,
                value: value as u64,
                limit: limit as u64,
                context: format!(
                    "picturing topology '{}' (tacos simulate and compare give its figures without a picture)",
                    tacos::error::echo(topo.name())
                ),
            });
        }
    }
    Ok(())
}

/// How the vertices are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// NPUs `block` apart in id are in different 2D blocks (a third dimension on).
    Grid {
        block: usize,
    },
    Ring,
    Fabric,
}

/// Where each vertex is drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub shape: Shape,
    /// Centre of each vertex (NPUs, then switches), in pixels from the panel's corner.
    pub pos: Vec<(f64, f64)>,
    pub width: f64,
    pub height: f64,
    /// Radius of an NPU's circle (a switch's box is as high).
    pub radius: f64,
    /// Distance between neighbouring NPUs.
    pub spacing: f64,
}

const MARGIN: f64 = 30.0;
const FAILED: &str = "#d62728";

/// The layout of `topo`'s vertices.
pub fn layout(topo: &Topology) -> Layout {
    match topo.dimensions() {
        _ if topo.has_switches() => fabric(topo),
        Some(dims) if dims.len() >= 2 => grid(dims),
        _ => ring(topo.npus()),
    }
}

/// Dimensions 0, 2, 4... across, 1, 3, 5... down; blocks of a later dimension a gap
/// apart.
fn grid(dims: &[usize]) -> Layout {
    // Per dimension: its stride in NPU ids and its stride in grid cells along its axis.
    let mut strides = Vec::with_capacity(dims.len());
    let (mut id_stride, mut cells) = (1, [1usize, 1usize]);
    for (k, &d) in dims.iter().enumerate() {
        let axis = k % 2;
        let cell_stride = if k < 2 { 1 } else { cells[axis] + 1 };
        strides.push((id_stride, axis, cell_stride));
        cells[axis] = if k < 2 {
            d
        } else {
            cell_stride * d.saturating_sub(1) + cells[axis]
        };
        id_stride *= d;
    }
    let spacing = (600.0 / cells[0].max(cells[1]) as f64).clamp(10.0, 56.0);
    let npus = id_stride;
    let pos = (0..npus)
        .map(|n| {
            let mut cell = [0usize; 2];
            for (k, &(stride, axis, cell_stride)) in strides.iter().enumerate() {
                cell[axis] += (n / stride) % dims[k] * cell_stride;
            }
            (
                MARGIN + spacing * (cell[0] as f64 + 0.5),
                MARGIN + spacing * (cell[1] as f64 + 0.5),
            )
        })
        .collect();
    Layout {
        shape: Shape::Grid {
            block: dims[0] * dims[1],
        },
        pos,
        width: 2.0 * MARGIN + spacing * cells[0] as f64,
        height: 2.0 * MARGIN + spacing * cells[1] as f64,
        radius: spacing * 0.28,
        spacing,
    }
}

fn ring(npus: usize) -> Layout {
    let spacing = (2400.0 / npus as f64).clamp(6.0, 48.0);
    let r = (npus as f64 * spacing / std::f64::consts::TAU).max(60.0);
    let c = MARGIN + r + spacing;
    let pos = (0..npus)
        .map(|i| {
            let a = -std::f64::consts::FRAC_PI_2 + std::f64::consts::TAU * i as f64 / npus as f64;
            (c + r * a.cos(), c + r * a.sin())
        })
        .collect();
    Layout {
        shape: Shape::Ring,
        pos,
        width: 2.0 * c,
        height: 2.0 * c,
        radius: spacing * 0.3,
        spacing,
    }
}

/// NPUs in a row, a gap between nodes (the first dimension's lines); switches above in
/// rows, one per kind (the name without its digits) and hops from the nearest NPU, the
/// kinds closest to the NPUs lowest; each switch over the mean of what it links below.
fn fabric(topo: &Topology) -> Layout {
    let npus = topo.npus();
    let node = topo.dimensions().map_or(npus, |d| d[0].max(1));
    let spacing = (1100.0 / npus as f64).clamp(6.0, 40.0);
    let gap = |i: usize| (i / node) as f64 * spacing * 0.6;
    let mut pos = vec![(0.0, 0.0); topo.vertices()];
    for (n, p) in pos.iter_mut().enumerate().take(npus) {
        *p = (MARGIN + spacing * (n as f64 + 0.5) + gap(n), 0.0);
    }
    let level = hops_from_npus(topo);
    let kind = |s: VertexId| -> String {
        topo.switch_name(s)
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect()
    };
    let below = |s: VertexId, placed: &[bool]| -> Vec<VertexId> {
        let mut v: Vec<VertexId> = topo.links()[topo.out_links(s)]
            .iter()
            .map(|l| l.dst)
            .filter(|&d| placed[d])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    // Rows by (level, kind); within a level, the kinds whose switches span the fewest
    // pixels below them first (a node's switch before the rails across nodes).
    let mut rows: BTreeMap<(usize, String), Vec<VertexId>> = BTreeMap::new();
    for s in topo.switches() {
        rows.entry((level[s], kind(s))).or_default().push(s);
    }
    let mut placed = vec![false; topo.vertices()];
    placed[..npus].fill(true);
    let mut by_level: BTreeMap<usize, Vec<Vec<VertexId>>> = BTreeMap::new();
    for ((lvl, _), members) in rows {
        by_level.entry(lvl).or_default().push(members);
    }
    let row_gap = 80.0;
    let mut row_index = 0;
    let mut width = MARGIN * 2.0 + spacing * npus as f64 + gap(npus.saturating_sub(1));
    let box_w = 56.0f64;
    for (_, mut kinds) in by_level {
        let span = |members: &Vec<VertexId>, placed: &[bool]| -> f64 {
            let total: f64 = members
                .iter()
                .map(|&s| {
                    let xs: Vec<f64> = below(s, placed).iter().map(|&d| pos[d].0).collect();
                    xs.iter().cloned().fold(f64::MIN, f64::max)
                        - xs.iter().cloned().fold(f64::MAX, f64::min)
                })
                .filter(|w| w.is_finite())
                .sum();
            total / members.len() as f64
        };
        kinds.sort_by(|a, b| {
            span(a, &placed)
                .total_cmp(&span(b, &placed))
                .then(a[0].cmp(&b[0]))
        });
        for members in kinds {
            row_index += 1;
            let mut row: Vec<(f64, VertexId)> = members
                .iter()
                .map(|&s| {
                    let under = below(s, &placed);
                    let x = if under.is_empty() {
                        width / 2.0
                    } else {
                        under.iter().map(|&d| pos[d].0).sum::<f64>() / under.len() as f64
                    };
                    (x, s)
                })
                .collect();
            row.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let wanted: Vec<f64> = row.iter().map(|r| r.0).collect();
            for (&(_, s), x) in row
                .iter()
                .zip(spread(&wanted, box_w + 6.0, MARGIN + box_w / 2.0))
            {
                pos[s] = (x, row_index as f64);
                placed[s] = true;
                width = width.max(x + box_w / 2.0 + MARGIN);
            }
        }
    }
    let height = MARGIN * 2.0 + row_gap * row_index as f64 + spacing;
    for (v, p) in pos.iter_mut().enumerate() {
        let row = if v < npus { 0.0 } else { p.1 };
        p.1 = height - MARGIN - spacing / 2.0 - row * row_gap;
    }
    Layout {
        shape: Shape::Fabric,
        pos,
        width,
        height,
        radius: spacing * 0.32,
        spacing,
    }
}

/// Hops from the nearest NPU to every vertex, over links either way (`usize::MAX` where
/// none reaches).
fn hops_from_npus(topo: &Topology) -> Vec<usize> {
    let mut level = vec![usize::MAX; topo.vertices()];
    let mut queue: VecDeque<VertexId> = (0..topo.npus()).collect();
    level[..topo.npus()].fill(0);
    while let Some(v) = queue.pop_front() {
        let ins = topo.in_links(v).iter().map(|&l| topo.link(l).src);
        let outs = topo.links()[topo.out_links(v)].iter().map(|l| l.dst);
        for u in ins.chain(outs).collect::<Vec<_>>() {
            if level[u] == usize::MAX {
                level[u] = level[v] + 1;
                queue.push_back(u);
            }
        }
    }
    level
}

/// Positions as near `wanted` (sorted) as keeps them `gap` apart: pushed right where they
/// crowd, then the row shifted back to centre where it wanted to be, but not left of
/// `min`.
fn spread(wanted: &[f64], gap: f64, min: f64) -> Vec<f64> {
    let mut xs = wanted.to_vec();
    for i in 1..xs.len() {
        xs[i] = xs[i].max(xs[i - 1] + gap);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let shift = (mean(wanted) - mean(&xs)).max(min - xs.first().copied().unwrap_or(min));
    xs.iter().map(|x| x + shift).collect()
}

/// One panel of a load picture: an algorithm's name and its simulation.
pub struct LoadPanel<'a> {
    pub name: String,
    pub report: &'a SimReport,
}

/// The scale every panel is coloured on: busy time from idle to the busiest link of any
/// panel (`ColourScale::shared` of each panel's busiest).
pub fn load_scale(panels: &[LoadPanel]) -> ColourScale {
    ColourScale::shared(panels.iter().map(|p| {
        let busiest = p.report.links.iter().map(|l| l.busy_ps).max();
        ps_to_us(busiest.unwrap_or(0))
    }))
}

/// Panels side by side (three to a row at most), one per algorithm, each `topo` with its
/// links coloured by busy time on `load_scale(panels)`. `base` is the topology before
/// failures, when known: links it has and `topo` lacks are drawn failed.
pub fn loads_svg(
    title: &str,
    topo: &Topology,
    base: Option<&Topology>,
    panels: &[LoadPanel],
) -> String {
    // A base of other vertices is not this topology before failures.
    let base = base.filter(|b| b.vertices() == topo.vertices());
    let lay = layout(base.unwrap_or(topo));
    let scale = load_scale(panels);
    let columns = panels
        .len()
        .clamp(1, (1500.0 / lay.width).floor().clamp(1.0, 3.0) as usize);
    let rows = panels.len().div_ceil(columns).max(1);
    let (pw, ph) = (lay.width, lay.height + 24.0);
    let width = (columns as f64 * pw + 20.0).max(880.0);
    let height = 50.0 + rows as f64 * ph + 60.0;
    let mut svg = Svg::new(width, height);
    svg.text(
        &[
            at("x", 16.0),
            at("y", 28.0),
            attr("font-size", "16"),
            attr("font-weight", "bold"),
        ],
        title,
    );
    for (i, p) in panels.iter().enumerate() {
        let (x0, y0) = (
            10.0 + (i % columns) as f64 * pw,
            50.0 + (i / columns) as f64 * ph,
        );
        svg.text(
            &[
                at("x", x0 + 16.0),
                at("y", y0 + 14.0),
                attr("font-size", "13"),
                attr("font-weight", "bold"),
            ],
            &p.name,
        );
        svg.open_group(&[
            attr("class", "panel"),
            attr(
                "transform",
                format!("translate({} {})", num(x0), num(y0 + 24.0)),
            ),
        ]);
        draw_panel(&mut svg, &lay, topo, base, p, &scale);
        svg.close_group();
    }
    scale.legend(
        &mut svg,
        70.0,
        height - 44.0,
        "link busy time, us (one scale for every panel)",
        |v| format!("{v:.2}"),
    );
    failed_legend(&mut svg, 70.0 + 720.0, height - 44.0);
    svg.finish()
}

fn failed_legend(svg: &mut Svg, x: f64, y: f64) {
    svg.element(
        "line",
        &[
            at("x1", x),
            at("y1", y + 7.0),
            at("x2", x + 24.0),
            at("y2", y + 7.0),
            attr("stroke", FAILED),
            attr("stroke-width", "2"),
            attr("stroke-dasharray", "3 3"),
        ],
        None,
    );
    svg.text(
        &[
            at("x", x + 30.0),
            at("y", y + 12.0),
            attr("font-size", "12"),
        ],
        "failed",
    );
}

fn draw_panel(
    svg: &mut Svg,
    lay: &Layout,
    topo: &Topology,
    base: Option<&Topology>,
    panel: &LoadPanel,
    scale: &ColourScale,
) {
    let width = (lay.radius * 0.45).clamp(1.0, 4.0);
    if let Some(base) = base {
        for l in base.links() {
            if topo.link_between(l.src, l.dst).is_none() {
                svg.element(
                    "path",
                    &[
                        attr("class", "failed-link"),
                        attr("d", link_path(lay, topo, l)),
                        attr("fill", "none"),
                        attr("stroke", FAILED),
                        at("stroke-width", width),
                        attr("stroke-dasharray", "3 3"),
                    ],
                    Some(&format!(
                        "{} -> {}: failed",
                        topo.vertex_label(l.src),
                        topo.vertex_label(l.dst)
                    )),
                );
            }
        }
    }
    let report = panel.report;
    for (l, load) in topo.links().iter().zip(&report.links) {
        let busy = ps_to_us(load.busy_ps);
        svg.element(
            "path",
            &[
                attr("class", "link"),
                attr("data-link", format!("{}-{}", l.src, l.dst)),
                attr("d", link_path(lay, topo, l)),
                attr("fill", "none"),
                attr("stroke", scale.colour(busy)),
                at("stroke-width", width),
            ],
            Some(&format!(
                "{} -> {}: busy {:.3} us ({:.1}% of the algorithm's {:.3} us), {:.0} bytes; {} GB/s, {} us",
                topo.vertex_label(l.src),
                topo.vertex_label(l.dst),
                busy,
                100.0 * load.utilization,
                ps_to_us(report.time_ps),
                load.bytes,
                l.bandwidth_gbps,
                l.latency_us
            )),
        );
    }
    let r = lay.radius.max(2.0);
    for n in 0..topo.npus() {
        let (x, y) = lay.pos[n];
        if topo.is_failed(n) {
            svg.element(
                "circle",
                &[
                    attr("class", "failed-npu"),
                    attr("data-npu", n.to_string()),
                    at("cx", x),
                    at("cy", y),
                    at("r", r),
                    attr("fill", "white"),
                    attr("stroke", FAILED),
                    attr("stroke-width", "2"),
                ],
                Some(&format!("NPU {n}: failed")),
            );
            let d = r * 0.7;
            svg.element(
                "path",
                &[
                    attr(
                        "d",
                        format!(
                            "M{} {} L{} {} M{} {} L{} {}",
                            num(x - d),
                            num(y - d),
                            num(x + d),
                            num(y + d),
                            num(x - d),
                            num(y + d),
                            num(x + d),
                            num(y - d)
                        ),
                    ),
                    attr("stroke", FAILED),
                    attr("stroke-width", "2"),
                ],
                None,
            );
        } else {
            svg.element(
                "circle",
                &[
                    attr("class", "npu"),
                    attr("data-npu", n.to_string()),
                    at("cx", x),
                    at("cy", y),
                    at("r", r),
                    attr("fill", "#f2f2f2"),
                    attr("stroke", "#333333"),
                ],
                Some(&format!("NPU {n}")),
            );
        }
        if r >= 7.0 {
            svg.text(
                &[
                    at("x", x),
                    at("y", y + 3.5),
                    attr("font-size", num((r * 0.8).min(11.0))),
                    attr("text-anchor", "middle"),
                ],
                &n.to_string(),
            );
        }
    }
    for s in topo.switches() {
        let (x, y) = lay.pos[s];
        let name = topo.switch_name(s).unwrap_or_default();
        svg.element(
            "rect",
            &[
                attr("class", "switch"),
                at("x", x - 26.0),
                at("y", y - 9.0),
                attr("width", "52"),
                attr("height", "18"),
                attr("rx", "3"),
                attr("fill", "#f2f2f2"),
                attr("stroke", "#333333"),
            ],
            Some(&format!("switch {name}")),
        );
        // The whole name, smaller where it is long.
        let size = (80.0 / name.chars().count().max(1) as f64).clamp(5.0, 9.0);
        svg.text(
            &[
                at("x", x),
                at("y", y + 3.0),
                at("font-size", size),
                attr("text-anchor", "middle"),
            ],
            name,
        );
    }
}

/// A link's line, beside its reverse (each direction to its own side). A wrap-around link
/// of a grid (along a row or column of one block, past a neighbour) is two stubs leaving
/// the block's edges outwards, as tori are drawn; other links that skip over vertices bow
/// out (between blocks; a fabric's direct links between NPUs of its row, below it).
fn link_path(lay: &Layout, topo: &Topology, l: &Link) -> String {
    let ((x1, y1), (x2, y2)) = (lay.pos[l.src], lay.pos[l.dst]);
    let (dx, dy) = (x2 - x1, y2 - y1);
    let len = (dx * dx + dy * dy).sqrt().max(1e-9);
    let (ux, uy) = (dx / len, dy / len);
    let (nx, ny) = (-uy, ux);
    let o = (lay.radius * 0.4).clamp(1.0, 4.0);
    let (ax, ay, bx, by) = (x1 + nx * o, y1 + ny * o, x2 + nx * o, y2 + ny * o);
    let far = len > lay.spacing * 1.5;
    let aligned = dx.abs() < 1e-6 || dy.abs() < 1e-6;
    let line = |x1: f64, y1: f64, x2: f64, y2: f64| {
        format!("M{} {} L{} {}", num(x1), num(y1), num(x2), num(y2))
    };
    let bow = |cx: f64, cy: f64| {
        format!(
            "M{} {} Q{} {} {} {}",
            num(ax),
            num(ay),
            num((ax + bx) / 2.0 + cx),
            num((ay + by) / 2.0 + cy),
            num(bx),
            num(by)
        )
    };
    match lay.shape {
        Shape::Grid { block } if far && aligned && l.src / block == l.dst / block => {
            let s = lay.spacing * 0.45;
            format!(
                "{} {}",
                line(ax, ay, ax - ux * s, ay - uy * s),
                line(bx + ux * s, by + uy * s, bx, by)
            )
        }
        Shape::Grid { .. } if far => bow(nx * len * 0.2, ny * len * 0.2),
        Shape::Fabric if !topo.is_switch(l.src) && !topo.is_switch(l.dst) => {
            bow(0.0, (len * 0.25).max(lay.spacing) + o * ny.signum())
        }
        _ => line(ax, ay, bx, by),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacos::topology::{parse_spec, SpecDefaults};

    fn topo(spec: &str) -> Topology {
        parse_spec(spec, &SpecDefaults::default()).unwrap()
    }

    #[test]
    fn a_mesh_is_a_grid_of_its_dimensions() {
        let lay = layout(&topo("mesh:3x2"));
        assert_eq!(lay.shape, Shape::Grid { block: 6 });
        let (x0, y0) = lay.pos[0];
        // NPU 4 is (1, 1): one step across, one down; NPU 2 is (2, 0).
        assert_eq!(lay.pos[4], (x0 + lay.spacing, y0 + lay.spacing));
        assert_eq!(lay.pos[2], (x0 + 2.0 * lay.spacing, y0));
    }

    #[test]
    fn a_torus_wraps_around_with_stubs_and_blocks_join_with_bows() {
        let t = topo("torus:4x4x2");
        let lay = layout(&t);
        let path = |a, b| link_path(&lay, &t, &t.links()[t.link_between(a, b).unwrap()]);
        // 0 -> 3 wraps around its row: two straight stubs, 0.45 spacing each.
        let wrap = path(0, 3);
        assert_eq!(
            (wrap.matches('M').count(), wrap.matches('Q').count()),
            (2, 0),
            "{wrap}"
        );
        // 0 -> 1 is a neighbour: one line; 0 -> 16 joins the two blocks: a bow.
        assert_eq!(path(0, 1).matches('M').count(), 1);
        assert!(path(0, 16).contains('Q'));
    }

    #[test]
    fn crowded_switches_spread_around_where_they_want_to_be() {
        // 10 and 12 want to be 2 apart but need 10: 6 and 16 keep their mean, 11.
        assert_eq!(spread(&[10.0, 12.0], 10.0, 0.0), [6.0, 16.0]);
        // Not left of the margin.
        assert_eq!(spread(&[1.0, 2.0], 10.0, 5.0), [5.0, 15.0]);
        assert_eq!(spread(&[0.0, 50.0], 10.0, 0.0), [0.0, 50.0]);
    }

    #[test]
    fn a_ring_is_a_circle() {
        let lay = layout(&topo("ring:8"));
        assert_eq!(lay.shape, Shape::Ring);
        let c = lay.width / 2.0;
        let d = |v: usize| ((lay.pos[v].0 - c).powi(2) + (lay.pos[v].1 - c).powi(2)).sqrt();
        assert!((0..8).all(|v| (d(v) - d(0)).abs() < 1e-6));
    }

    #[test]
    fn a_fabrics_switches_sit_above_their_npus() {
        let t = topo("preset:dgx-a100,nodes=2");
        let lay = layout(&t);
        assert_eq!(lay.shape, Shape::Fabric);
        let npu_y = lay.pos[0].1;
        let named = |name: &str| {
            t.switches()
                .find(|&s| t.switch_name(s) == Some(name))
                .unwrap()
        };
        for s in t.switches() {
            assert!(lay.pos[s].1 < npu_y, "{:?}", t.switch_name(s));
        }
        // A node's switch sits over the middle of its GPUs, below the rails.
        let node1 = t
            .switches()
            .find(|&s| t.switch_name(s).unwrap().contains("node1"))
            .unwrap();
        let middle = (lay.pos[8].0 + lay.pos[15].0) / 2.0;
        assert!((lay.pos[node1].0 - middle).abs() < 1e-6);
        assert!(lay.pos[node1].1 > lay.pos[named("rail0")].1);
    }
}
