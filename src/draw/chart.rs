//! Line charts: series of points on linear or logarithmic axes, with labelled vertical
//! markers (a bound, a band edge). `tacos report`, `tacos bench scale` and `tacos
//! calibrate --plot` draw their curves with it.

use super::scale::{category_colour, Axis, TickFormat};
use super::svg::{at, attr, num, Svg};

/// One curve.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    /// (x, y) in the order they are joined; points a log axis cannot show (zero or
    /// negative) are left out.
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A vertical line at `x`, labelled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VLine {
    pub x: f64,
    pub label: String,
}

/// A chart of series against one x and one y axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// How tick labels are written (sizes in bytes, or plain numbers).
    pub x_format: TickFormat,
    pub y_format: TickFormat,
    pub series: Vec<Series>,
    pub markers: Vec<VLine>,
}

pub const WIDTH: f64 = 760.0;
pub const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 54.0;
/// Most points of a series drawn as dots (a dense curve is a line only).
const MAX_DOTS: usize = 60;

/// How far apart the largest and smallest positive y may be on a linear axis: past this,
/// the small values would be flat along the bottom.
const LINEAR_Y_SPAN: f64 = 10.0;

impl LineChart {
    /// The same chart with a log y axis where its positive y values span a decade or more
    /// (bus bandwidth from 1 KiB to 4 GiB spans four), else as it was.
    pub fn log_y_over_decades(mut self) -> LineChart {
        let ys = self
            .points()
            .map(|p| p.1)
            .filter(|y| y.is_finite() && *y > 0.0);
        let (low, high) = ys.fold((f64::INFINITY, 0.0f64), |(l, h), y| (l.min(y), h.max(y)));
        if high >= low * LINEAR_Y_SPAN {
            self.log_y = true;
        }
        self
    }

    /// The x axis the chart is drawn on: covering every point and marker.
    pub fn x_axis(&self) -> Axis {
        let xs = self
            .points()
            .map(|p| p.0)
            .chain(self.markers.iter().map(|m| m.x));
        Axis::covering(xs, self.log_x, LEFT, WIDTH - RIGHT, self.x_format)
    }

    /// The y axis the chart is drawn on: covering every point.
    pub fn y_axis(&self) -> Axis {
        Axis::covering(
            self.points().map(|p| p.1),
            self.log_y,
            HEIGHT - BOTTOM,
            TOP,
            self.y_format,
        )
    }

    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.series.iter().flat_map(|s| s.points.iter().copied())
    }

    /// Whether an axis can show this point.
    fn shows(&self, (x, y): (f64, f64)) -> bool {
        x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0)
    }

    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let (xa, ya) = (self.x_axis(), self.y_axis());
        let mut svg = Svg::new(WIDTH, HEIGHT);
        svg.text(
            &[
                at("x", LEFT),
                at("y", 24.0),
                attr("font-size", "15"),
                attr("font-weight", "bold"),
            ],
            &self.title,
        );
        self.draw_axes(&mut svg, &xa, &ya);
        // Label lines' rightmost pixel taken, so nearby labels go on other lines.
        let mut taken = [f64::NEG_INFINITY; 3];
        let mut order: Vec<&VLine> = self.markers.iter().collect();
        order.sort_by(|a, b| a.x.total_cmp(&b.x));
        for m in order {
            let x = xa.map(m.x);
            svg.element(
                "line",
                &[
                    attr("class", "marker"),
                    at("x1", x),
                    at("y1", ya.from),
                    at("x2", x),
                    at("y2", ya.to),
                    attr("stroke", "#555555"),
                    attr("stroke-dasharray", "2 3"),
                ],
                Some(&m.label),
            );
            // Right of the line, or left of it near the plot's right edge, on the first of
            // three lines where it clears the labels before it (about 5.5 pixels a
            // character).
            let right_half = x > xa.from + 0.8 * (xa.to - xa.from);
            let width = 5.5 * m.label.chars().count() as f64;
            let (start, end) = match right_half {
                true => (x - 3.0 - width, x - 3.0),
                false => (x + 3.0, x + 3.0 + width),
            };
            let line = (0..taken.len())
                .find(|&r| start > taken[r] + 4.0)
                .unwrap_or_else(|| {
                    (0..taken.len())
                        .min_by(|&a, &b| taken[a].total_cmp(&taken[b]))
                        .unwrap_or(0)
                });
            taken[line] = taken[line].max(end);
            svg.text(
                &[
                    at("x", if right_half { x - 3.0 } else { x + 3.0 }),
                    at("y", ya.to + 10.0 + 11.0 * line as f64),
                    attr("font-size", "10"),
                    attr("fill", "#555555"),
                    attr("text-anchor", if right_half { "end" } else { "start" }),
                ],
                &m.label,
            );
        }
        for (i, s) in self.series.iter().enumerate() {
            let colour = category_colour(i);
            let shown: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&p| self.shows(p))
                .collect();
            let d: Vec<String> = shown
                .iter()
                .enumerate()
                .map(|(k, &(x, y))| {
                    format!(
                        "{}{} {}",
                        if k == 0 { "M" } else { "L" },
                        num(xa.map(x)),
                        num(ya.map(y))
                    )
                })
                .collect();
            let mut attrs = vec![
                attr("class", "series"),
                attr("d", d.join(" ")),
                attr("fill", "none"),
                attr("stroke", colour),
                attr("stroke-width", "2"),
            ];
            if s.dashed {
                attrs.push(attr("stroke-dasharray", "6 4"));
            }
            svg.element("path", &attrs, Some(&s.name));
            // Dots with their figures on hover, where few enough to tell apart.
            let dots = if shown.len() <= MAX_DOTS {
                &shown[..]
            } else {
                &[]
            };
            for &(x, y) in dots {
                svg.element(
                    "circle",
                    &[
                        at("cx", xa.map(x)),
                        at("cy", ya.map(y)),
                        attr("r", "3"),
                        attr("fill", colour),
                    ],
                    Some(&format!(
                        "{}: {} = {}, {} = {}",
                        s.name,
                        self.x_label,
                        self.x_format.label(x),
                        self.y_label,
                        self.y_format.label(y)
                    )),
                );
            }
            // The legend, right of the plot.
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = WIDTH - RIGHT + 16.0;
            let mut line = vec![
                at("x1", lx),
                at("y1", ly),
                at("x2", lx + 24.0),
                at("y2", ly),
                attr("stroke", colour),
                attr("stroke-width", "2"),
            ];
            if s.dashed {
                line.push(attr("stroke-dasharray", "6 4"));
            }
            svg.element("line", &line, None);
            svg.text(
                &[
                    at("x", lx + 30.0),
                    at("y", ly + 4.0),
                    attr("font-size", "11"),
                ],
                &s.name,
            );
        }
        svg.finish()
    }

    fn draw_axes(&self, svg: &mut Svg, xa: &Axis, ya: &Axis) {
        let grid = |svg: &mut Svg, x1: f64, y1: f64, x2: f64, y2: f64| {
            svg.element(
                "line",
                &[
                    at("x1", x1),
                    at("y1", y1),
                    at("x2", x2),
                    at("y2", y2),
                    attr("stroke", "#e4e4e4"),
                ],
                None,
            );
        };
        for (v, label) in xa.ticks() {
            let x = xa.map(v);
            grid(svg, x, ya.from, x, ya.to);
            svg.text(
                &[
                    attr("class", "tick-x"),
                    at("x", x),
                    at("y", ya.from + 15.0),
                    attr("font-size", "11"),
                    attr("text-anchor", "middle"),
                ],
                &label,
            );
        }
        for (v, label) in ya.ticks() {
            let y = ya.map(v);
            grid(svg, xa.from, y, xa.to, y);
            svg.text(
                &[
                    attr("class", "tick-y"),
                    at("x", xa.from - 5.0),
                    at("y", y + 4.0),
                    attr("font-size", "11"),
                    attr("text-anchor", "end"),
                ],
                &label,
            );
        }
        svg.element(
            "rect",
            &[
                at("x", xa.from),
                at("y", ya.to),
                at("width", xa.to - xa.from),
                at("height", ya.from - ya.to),
                attr("fill", "none"),
                attr("stroke", "gray"),
            ],
            None,
        );
        svg.text(
            &[
                at("x", (xa.from + xa.to) / 2.0),
                at("y", HEIGHT - 14.0),
                attr("font-size", "12"),
                attr("text-anchor", "middle"),
            ],
            &self.x_label,
        );
        let (lx, ly) = (16.0, (ya.from + ya.to) / 2.0);
        svg.text(
            &[
                at("x", lx),
                at("y", ly),
                attr("font-size", "12"),
                attr("text-anchor", "middle"),
                attr("transform", format!("rotate(-90 {} {})", num(lx), num(ly))),
            ],
            &self.y_label,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn y_goes_logarithmic_only_over_a_decade() {
        let chart = |ys: &[f64]| LineChart {
            series: vec![Series {
                name: "s".into(),
                points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
                dashed: false,
            }],
            ..LineChart::default()
        };
        assert!(!chart(&[2.0, 19.9]).log_y_over_decades().log_y);
        assert!(chart(&[2.0, 20.0]).log_y_over_decades().log_y);
        // Zeros and non-finite values are not drawn on a log axis, so they do not count.
        assert!(
            !chart(&[0.0, 5.0, 40.0, f64::NAN])
                .log_y_over_decades()
                .log_y
        );
        assert!(!chart(&[]).log_y_over_decades().log_y);
    }

    fn chart() -> LineChart {
        LineChart {
            title: "t <1>".into(),
            x_label: "NPUs".into(),
            y_label: "seconds".into(),
            log_x: true,
            log_y: true,
            series: vec![
                Series {
                    name: "a & b".into(),
                    points: vec![(10.0, 1.0), (100.0, 10.0), (0.0, 3.0)],
                    dashed: false,
                },
                Series {
                    name: "fit".into(),
                    points: vec![(10.0, 2.0), (1000.0, 200.0)],
                    dashed: true,
                },
            ],
            markers: vec![VLine {
                x: 50.0,
                label: "bound".into(),
            }],
            ..LineChart::default()
        }
    }

    #[test]
    fn points_sit_on_their_axes_and_a_log_axis_drops_zero() {
        let c = chart();
        let (xa, ya) = (c.x_axis(), c.y_axis());
        assert_eq!((xa.min, xa.max), (10.0, 1000.0));
        assert_eq!((ya.min, ya.max), (1.0, 1000.0));
        let svg = c.to_svg();
        // (100, 10): halfway across two decades of x, a third up three of y.
        let (x, y) = (
            LEFT + (WIDTH - RIGHT - LEFT) / 2.0,
            (HEIGHT - BOTTOM) - (HEIGHT - BOTTOM - TOP) / 3.0,
        );
        assert!(svg.contains(&format!(r#"L{} {}"#, num(x), num(y))), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("stroke-dasharray=\"6 4\""));
        assert!(svg.contains("t &lt;1&gt;") && svg.contains("a &amp; b"));
        assert_eq!(svg, c.to_svg());
    }
}
