//! An algorithm's timeline: when each link carried what, as Gantt rows (one per link,
//! transfers coloured by chunk or by phase) with the bound as a vertical line, and for
//! large topologies the share of links busy over time.

use super::chart::{LineChart, Series, VLine};
use super::scale::{category_colour, Axis, TickFormat};
use super::svg::{at, attr, num, Svg};
use std::collections::BTreeMap;
use tacos::error::Result;
use tacos::schedule::link_time_ps;
use tacos::sim::SimResult;
use tacos::topology::{LinkId, NpuId, RouteTree, Topology};
use tacos::units::{ps_to_us, Picos};

/// One message holding one link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub message: usize,
    pub link: LinkId,
    pub start_ps: Picos,
    pub end_ps: Picos,
}

/// When each message held each link, from the simulation's arrival times (serial
/// sharing): a message's last hop (one link, or a run through switches held cut-through)
/// ends when the message arrives and lasted the alpha-beta time of that hop. The
/// simulator keeps no time for the earlier hops of a message stored and forwarded over
/// several links: such messages are counted (the second figure), not drawn.
/// `messages` are (source, destination, bytes), indexed like `result.messages`.
pub fn held_links(
    topo: &Topology,
    messages: impl IntoIterator<Item = (NpuId, NpuId, f64)>,
    result: &SimResult,
) -> Result<(Vec<Held>, usize)> {
    let mut trees: BTreeMap<NpuId, RouteTree> = BTreeMap::new();
    let (mut held, mut unknown) = (Vec::with_capacity(result.messages.len()), 0);
    let timed = messages.into_iter().zip(&result.messages);
    for (m, ((src, dst, bytes), timing)) in timed.enumerate() {
        let route = match topo.link_between(src, dst) {
            Some(l) => vec![l],
            None => {
                let tree = trees.entry(src).or_insert_with(|| topo.route_tree(src));
                match tree.route_to(topo, dst) {
                    Some(r) => r,
                    None => {
                        unknown += 1;
                        continue;
                    }
                }
            }
        };
        let took = link_time_ps(&topo.route_link(route.iter().copied()), bytes)?;
        let start_ps = timing.end_ps.saturating_sub(took);
        held.extend(route.into_iter().map(|link| Held {
            message: m,
            link,
            start_ps,
            end_ps: timing.end_ps,
        }));
    }
    held.sort_by_key(|h| (h.link, h.start_ps, h.message));
    Ok((held, unknown))
}

/// Links drawn one row each when a topology has at most this many; past it, the busiest.
pub const MAX_ROWS: usize = 64;
/// Rows a large topology's timeline keeps: its busiest links.
pub const BUSIEST_ROWS: usize = 16;

/// A Gantt chart of `held`, one row per link.
pub struct Timeline<'a> {
    pub title: String,
    pub topo: &'a Topology,
    pub held: &'a [Held],
    /// Per message: its colour's category and what it is (`chunk 3`, `reduce-scatter`);
    /// a message without one is not drawn.
    pub keys: &'a [(usize, String)],
    /// Categories named in the legend (phases); empty when colours stand for chunks.
    pub legend: Vec<(usize, String)>,
    pub time_ps: Picos,
    /// The best lower bound and its name.
    pub bound: Option<(Picos, String)>,
}

const LABELS: f64 = 160.0;
const PLOT: f64 = 700.0;

impl Timeline<'_> {
    /// The links given a row: every link with a transfer, in link order, or past
    /// `MAX_ROWS` links the `BUSIEST_ROWS` busiest (by held time; ties by link order).
    pub fn rows(&self) -> Vec<LinkId> {
        let mut busy: BTreeMap<LinkId, Picos> = BTreeMap::new();
        for h in self.held {
            *busy.entry(h.link).or_default() += h.end_ps - h.start_ps;
        }
        if self.topo.links().len() <= MAX_ROWS {
            return busy.into_keys().collect();
        }
        let mut v: Vec<(LinkId, Picos)> = busy.into_iter().collect();
        v.sort_by_key(|&(l, b)| (std::cmp::Reverse(b), l));
        v.truncate(BUSIEST_ROWS);
        v.sort_unstable();
        v.into_iter().map(|(l, _)| l).collect()
    }

    /// The time axis, microseconds, from 0 past the collective's end and the bound.
    pub fn time_axis(&self) -> Axis {
        let ends = [
            0.0,
            ps_to_us(self.time_ps),
            self.bound.as_ref().map_or(0.0, |b| ps_to_us(b.0)),
        ];
        Axis::covering(ends, false, LABELS, LABELS + PLOT, TickFormat::Plain)
    }

    pub fn to_svg(&self) -> String {
        let rows = self.rows();
        let row_h = if rows.len() > 32 { 10.0 } else { 16.0 };
        let top = 44.0;
        let bottom = top + row_h * rows.len().max(1) as f64;
        let height = bottom + 70.0;
        let axis = self.time_axis();
        let mut svg = Svg::new(LABELS + PLOT + 30.0, height);
        svg.text(
            &[
                at("x", 12.0),
                at("y", 24.0),
                attr("font-size", "15"),
                attr("font-weight", "bold"),
            ],
            &self.title,
        );
        for (v, label) in axis.ticks() {
            let x = axis.map(v);
            svg.element(
                "line",
                &[
                    at("x1", x),
                    at("y1", top),
                    at("x2", x),
                    at("y2", bottom),
                    attr("stroke", "#e4e4e4"),
                ],
                None,
            );
            svg.text(
                &[
                    attr("class", "tick-x"),
                    at("x", x),
                    at("y", bottom + 14.0),
                    attr("font-size", "11"),
                    attr("text-anchor", "middle"),
                ],
                &label,
            );
        }
        svg.text(
            &[
                at("x", LABELS + PLOT / 2.0),
                at("y", bottom + 30.0),
                attr("font-size", "12"),
                attr("text-anchor", "middle"),
            ],
            "time, us",
        );
        let row_of: BTreeMap<LinkId, usize> =
            rows.iter().enumerate().map(|(i, &l)| (l, i)).collect();
        for (i, &l) in rows.iter().enumerate() {
            let link = self.topo.link(l);
            svg.text(
                &[
                    at("x", LABELS - 6.0),
                    at("y", top + row_h * (i as f64 + 0.75)),
                    attr("font-size", num(row_h * 0.7)),
                    attr("text-anchor", "end"),
                ],
                &format!(
                    "{} -> {}",
                    short(self.topo, link.src),
                    short(self.topo, link.dst)
                ),
            );
        }
        for h in self.held {
            let Some(&row) = row_of.get(&h.link) else {
                continue;
            };
            let Some((category, what)) = self.keys.get(h.message) else {
                continue;
            };
            let (x1, x2) = (axis.map(ps_to_us(h.start_ps)), axis.map(ps_to_us(h.end_ps)));
            let link = self.topo.link(h.link);
            svg.element(
                "rect",
                &[
                    attr("class", "held"),
                    at("x", x1),
                    at("y", top + row_h * row as f64 + 1.0),
                    at("width", (x2 - x1).max(0.5)),
                    at("height", row_h - 2.0),
                    attr("fill", category_colour(*category)),
                    attr("stroke", "white"),
                    attr("stroke-width", "0.5"),
                ],
                Some(&format!(
                    "{what} on {} -> {}: {:.3} to {:.3} us",
                    self.topo.vertex_label(link.src),
                    self.topo.vertex_label(link.dst),
                    ps_to_us(h.start_ps),
                    ps_to_us(h.end_ps)
                )),
            );
        }
        if let Some((bound, name)) = &self.bound {
            let x = axis.map(ps_to_us(*bound));
            let label = format!("bound ({name}) {:.3} us", ps_to_us(*bound));
            svg.element(
                "line",
                &[
                    attr("class", "bound"),
                    at("x1", x),
                    at("y1", top - 6.0),
                    at("x2", x),
                    at("y2", bottom),
                    attr("stroke", "black"),
                    attr("stroke-width", "1.5"),
                    attr("stroke-dasharray", "4 3"),
                ],
                Some(&label),
            );
            svg.text(
                &[
                    at("x", x + 3.0),
                    at("y", top - 8.0),
                    attr("font-size", "10"),
                ],
                &label,
            );
        }
        let mut lx = LABELS;
        for (category, name) in &self.legend {
            svg.element(
                "rect",
                &[
                    at("x", lx),
                    at("y", height - 22.0),
                    attr("width", "12"),
                    attr("height", "12"),
                    attr("fill", category_colour(*category)),
                ],
                None,
            );
            svg.text(
                &[
                    at("x", lx + 16.0),
                    at("y", height - 12.0),
                    attr("font-size", "12"),
                ],
                name,
            );
            lx += 30.0 + 7.0 * name.len() as f64;
        }
        if self.legend.is_empty() {
            svg.text(
                &[at("x", lx), at("y", height - 12.0), attr("font-size", "12")],
                "colours: chunks (hover a bar for its chunk)",
            );
        }
        svg.finish()
    }
}

/// A vertex as a row label: its NPU number or its switch's name.
fn short(topo: &Topology, v: usize) -> String {
    topo.switch_name(v)
        .map_or_else(|| v.to_string(), str::to_string)
}

/// Points of the curve `utilization_chart` draws.
const BINS: usize = 200;

/// The share of `links` links busy over time, averaged over 200 equal spans of
/// [0, time_ps], with the bound marked.
pub fn utilization_chart(
    title: &str,
    links: usize,
    held: &[Held],
    time_ps: Picos,
    bound: Option<(Picos, String)>,
) -> LineChart {
    let width = (time_ps.max(1) as f64) / BINS as f64;
    let mut busy = vec![0.0f64; BINS + 1];
    let mut full = vec![0.0f64; BINS + 1];
    for h in held {
        let (s, e) = (h.start_ps as f64, h.end_ps as f64);
        let (i, j) = (
            ((s / width) as usize).min(BINS - 1),
            ((e / width) as usize).min(BINS - 1),
        );
        if i == j {
            busy[i] += e - s;
        } else {
            busy[i] += (i + 1) as f64 * width - s;
            busy[j] += e - j as f64 * width;
            full[i + 1] += width;
            full[j] -= width;
        }
    }
    let mut running = 0.0;
    let points = (0..BINS)
        .map(|b| {
            running += full[b];
            // At most every link: what rounding leaves above it is not load.
            let share = ((busy[b] + running) / (width * links.max(1) as f64)).min(1.0);
            (ps_to_us(((b as f64 + 0.5) * width) as Picos), 100.0 * share)
        })
        .collect();
    LineChart {
        title: title.into(),
        x_label: "time, us".into(),
        y_label: "links busy, %".into(),
        series: vec![Series {
            name: "links busy".into(),
            points,
            dashed: false,
        }],
        markers: bound
            .map(|(ps, name)| VLine {
                x: ps_to_us(ps),
                label: format!("bound ({name})"),
            })
            .into_iter()
            .collect(),
        ..LineChart::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacos::sim::{simulate_messages, Message};
    use tacos::topology::{parse_spec, SpecDefaults};

    fn msg(src: usize, dst: usize, deps: Vec<usize>) -> Message {
        Message {
            src,
            dst,
            bytes: 1000.0,
            deps,
        }
    }

    #[test]
    fn a_held_link_ends_at_arrival_and_lasts_its_alpha_beta_time() {
        // ring:4, 50 GB/s, 0.5 us: 1000 bytes take 0.5 us + 20 ns = 520000 ps a hop.
        let topo = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
        let messages = [msg(0, 1, vec![]), msg(1, 2, vec![0]), msg(0, 1, vec![])];
        let result = simulate_messages(&topo, &messages).unwrap();
        let hops = messages.iter().map(|m| (m.src, m.dst, m.bytes));
        let (held, unknown) = held_links(&topo, hops, &result).unwrap();
        assert_eq!(unknown, 0);
        let on = |l: LinkId| -> Vec<(Picos, Picos)> {
            held.iter()
                .filter(|h| h.link == l)
                .map(|h| (h.start_ps, h.end_ps))
                .collect()
        };
        let l01 = topo.link_between(0, 1).unwrap();
        let l12 = topo.link_between(1, 2).unwrap();
        // The two messages 0 -> 1 one after the other, then 1 -> 2 after the first.
        assert_eq!(on(l01), [(0, 520_000), (520_000, 1_040_000)]);
        assert_eq!(on(l12), [(520_000, 1_040_000)]);
        // The busiest link's figure agrees with the simulator's.
        assert_eq!(result.link_busy_ps[l01], 1_040_000);
    }

    #[test]
    fn the_curve_averages_busy_links() {
        // One of two links busy for the first half: 50% then 0%.
        let held = [Held {
            message: 0,
            link: 0,
            start_ps: 0,
            end_ps: 100,
        }];
        let chart = utilization_chart("u", 2, &held, 200, None);
        let p = &chart.series[0].points;
        assert_eq!(p.len(), BINS);
        assert!((p[0].1 - 50.0).abs() < 1e-9 && (p[BINS / 2 - 1].1 - 50.0).abs() < 1e-9);
        assert!(p[BINS / 2].1.abs() < 1e-9);
    }
}
