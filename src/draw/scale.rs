//! Mapping figures to pictures: the colour scale every load is drawn on, and axes (linear
//! or logarithmic) with their ticks.

use super::svg::{at, attr, num, Svg};
use tacos::units::format_size;

/// Colour stops from none (dark) to the most (bright), perceptually ordered (viridis).
const STOPS: [(f64, [u8; 3]); 5] = [
    (0.0, [0x44, 0x01, 0x54]),
    (0.25, [0x3b, 0x52, 0x8b]),
    (0.5, [0x21, 0x91, 0x8c]),
    (0.75, [0x5e, 0xc9, 0x62]),
    (1.0, [0xfd, 0xe7, 0x25]),
];

/// The colour of zero (an idle link), apart from the scale so that it does not read as
/// a little load.
pub const IDLE: &str = "#d9d9d9";

/// How far apart the panels' largest figures may be (a ratio) before a shared scale turns
/// logarithmic: past it a linear scale would leave the fastest panel all dark.
pub const SPREAD: f64 = 20.0;

/// One colour scale up to `max`: every panel of a page that shares it colours the same
/// figure alike, so panels compare. Linear from 0, or logarithmic from `log_from`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColourScale {
    pub max: f64,
    pub log_from: Option<f64>,
}

impl ColourScale {
    /// The scale panels whose largest figures are `maxima` share: linear up to the
    /// largest, or logarithmic from a tenth of the smallest (nonzero) one where the
    /// largest is more than `SPREAD` times it.
    pub fn shared(maxima: impl IntoIterator<Item = f64>) -> ColourScale {
        let (mut lo, mut max) = (f64::INFINITY, 0.0f64);
        for m in maxima.into_iter().filter(|m| *m > 0.0) {
            lo = lo.min(m);
            max = max.max(m);
        }
        ColourScale {
            max,
            log_from: (max > SPREAD * lo).then_some(lo / 10.0),
        }
    }

    /// Where `value` lies on the scale, 0 to 1 (clamped).
    pub fn fraction(&self, value: f64) -> f64 {
        let f = match self.log_from {
            Some(lo) => (value.max(lo) / lo).ln() / (self.max / lo).ln(),
            None if self.max > 0.0 => value / self.max,
            None => 0.0,
        };
        f.clamp(0.0, 1.0)
    }

    /// The value at `fraction` of the scale.
    pub fn value_at(&self, fraction: f64) -> f64 {
        match self.log_from {
            Some(lo) => lo * (self.max / lo).powf(fraction),
            None => fraction * self.max,
        }
    }

    /// The colour of `value`: `IDLE` for zero (or less).
    pub fn colour(&self, value: f64) -> String {
        if value > 0.0 {
            colour_at(self.fraction(value))
        } else {
            IDLE.into()
        }
    }

    /// A colour bar at (x, y), 300 pixels wide, labelled at its ends and middle by
    /// `label`, with `caption` (and whether the scale is logarithmic) beside it, and the
    /// idle colour before it.
    pub fn legend(
        &self,
        svg: &mut Svg,
        x: f64,
        y: f64,
        caption: &str,
        label: impl Fn(f64) -> String,
    ) {
        let (w, h) = (300.0, 14.0);
        let mut stops = String::from(r#"<defs><linearGradient id="load-scale">"#);
        for (f, _) in STOPS {
            stops.push_str(&format!(
                r#"<stop offset="{}%" stop-color="{}"/>"#,
                num(f * 100.0),
                colour_at(f)
            ));
        }
        stops.push_str("</linearGradient></defs>\n");
        svg.raw(&stops);
        svg.element(
            "rect",
            &[
                at("x", x),
                at("y", y),
                at("width", w),
                at("height", h),
                attr("fill", "url(#load-scale)"),
                attr("stroke", "gray"),
            ],
            None,
        );
        for f in [0.0, 0.5, 1.0] {
            svg.text(
                &[
                    at("x", x + f * w),
                    at("y", y + h + 13.0),
                    attr("font-size", "11"),
                    attr("text-anchor", "middle"),
                ],
                &label(self.value_at(f)),
            );
        }
        svg.text(
            &[
                at("x", x + w + 12.0),
                at("y", y + h - 2.0),
                attr("font-size", "12"),
            ],
            &match self.log_from {
                Some(_) => format!("{caption}, log scale"),
                None => caption.to_string(),
            },
        );
        // The idle colour, left of the bar.
        svg.element(
            "rect",
            &[
                at("x", x - 34.0 - h),
                at("y", y),
                at("width", h),
                at("height", h),
                attr("fill", IDLE),
                attr("stroke", "gray"),
            ],
            Some("idle"),
        );
        svg.text(
            &[
                at("x", x - 34.0 - h / 2.0),
                at("y", y + h + 13.0),
                attr("font-size", "11"),
                attr("text-anchor", "middle"),
            ],
            "idle",
        );
    }
}

/// The colour at `fraction` of the scale, clamped to [0, 1].
pub fn colour_at(fraction: f64) -> String {
    let u = if fraction.is_nan() {
        0.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    let i = STOPS
        .iter()
        .position(|&(s, _)| s >= u)
        .unwrap_or(STOPS.len() - 1)
        .max(1);
    let ((a, ca), (b, cb)) = (STOPS[i - 1], STOPS[i]);
    let f = (u - a) / (b - a);
    let mix = |k: usize| (ca[k] as f64 + f * (cb[k] as f64 - ca[k] as f64)).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2))
}

/// Distinct colours for categories (series, chunks, phases), repeated past ten.
pub fn category_colour(i: usize) -> &'static str {
    const PALETTE: [&str; 10] = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    PALETTE[i % PALETTE.len()]
}

/// How an axis labels its ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TickFormat {
    /// Numbers: 0.5, 20, 1000, 1e+06.
    #[default]
    Plain,
    /// Byte sizes: 4 KiB, 1 MiB (a log axis ticks at powers of two).
    Bytes,
}

impl TickFormat {
    pub fn label(self, v: f64) -> String {
        match self {
            TickFormat::Bytes if v >= 1.0 => format_size(v.round() as u64),
            _ => plain(v),
        }
    }
}

/// A number as a tick shows it: at most four significant figures, no trailing zeros.
pub fn plain(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        return format!("{v:.0e}");
    }
    let decimals = if a >= 100.0 || a == 0.0 {
        0
    } else {
        (3 - a.log10().floor() as i32).clamp(0, 6) as usize
    };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// A mapping from figures in [min, max] to pixels in [from, to] (`to` < `from` for a y
/// axis, which grows upwards), linear or logarithmic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub log: bool,
    pub from: f64,
    pub to: f64,
    pub format: TickFormat,
}

impl Axis {
    /// An axis covering `values` (positive ones only when `log`), widened to round ends.
    pub fn covering(
        values: impl IntoIterator<Item = f64>,
        log: bool,
        from: f64,
        to: f64,
        format: TickFormat,
    ) -> Axis {
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            if v.is_finite() && (!log || v > 0.0) {
                min = min.min(v);
                max = max.max(v);
            }
        }
        if min > max {
            (min, max) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        let (min, max) = if log {
            let base = log_base(format);
            let (lo, hi) = (min.log(base).floor(), max.log(base).ceil());
            (
                base.powf(lo),
                base.powf(if hi > lo { hi } else { lo + 1.0 }),
            )
        } else {
            let lo = min.min(0.0);
            let step = nice_step(max - lo);
            (
                lo,
                if max > lo {
                    (max / step).ceil() * step
                } else {
                    lo + 1.0
                },
            )
        };
        Axis {
            min,
            max,
            log,
            from,
            to,
            format,
        }
    }

    /// The pixel of `v`.
    pub fn map(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(f64::MIN_POSITIVE).ln() - self.min.ln()) / (self.max.ln() - self.min.ln())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        self.from + f * (self.to - self.from)
    }

    /// Tick values with their labels, about eight at most.
    pub fn ticks(&self) -> Vec<(f64, String)> {
        let values: Vec<f64> = if self.log {
            let base = log_base(self.format);
            let (lo, hi) = (
                self.min.log(base).round() as i32,
                self.max.log(base).round() as i32,
            );
            let every = ((hi - lo) as usize).div_ceil(8).max(1);
            (lo..=hi).step_by(every).map(|k| base.powi(k)).collect()
        } else {
            let step = nice_step(self.max - self.min);
            let first = (self.min / step).ceil() as i64;
            let last = (self.max / step + 1e-9).floor() as i64;
            (first..=last).map(|k| k as f64 * step).collect()
        };
        values
            .into_iter()
            .map(|v| (v, self.format.label(v)))
            .collect()
    }
}

/// Log axes of byte sizes tick at powers of two; others at powers of ten.
fn log_base(format: TickFormat) -> f64 {
    match format {
        TickFormat::Bytes => 2.0,
        TickFormat::Plain => 10.0,
    }
}

/// A step of 1, 2 or 5 x 10^k giving at most about eight ticks over `span`.
fn nice_step(span: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / 8.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_ends_at_its_stops() {
        let s = ColourScale::shared([4.0, 1.0]);
        assert_eq!(
            s,
            ColourScale {
                max: 4.0,
                log_from: None
            }
        );
        assert_eq!(s.colour(0.0), IDLE);
        assert_eq!(s.colour(1e-12), "#440154");
        assert_eq!(s.colour(4.0), "#fde725");
        assert_eq!(s.colour(9.0), "#fde725");
        assert_eq!(s.colour(2.0), "#21918c");
        // Halfway between the first two stops: (0x44 + 0x3b) / 2 = 63.5, (0x01 + 0x52) / 2 =
        // 41.5, (0x54 + 0x8b) / 2 = 111.5, each rounded up.
        assert_eq!(s.colour(0.5), "#402a70");
    }

    #[test]
    fn panels_far_apart_share_a_log_scale() {
        // 1000 is more than SPREAD times 1: logarithmic from 0.1, four decades.
        let s = ColourScale::shared([1.0, 0.0, 1000.0]);
        assert_eq!(s.log_from, Some(0.1));
        assert_eq!(s.colour(1000.0), "#fde725");
        // 10 is two decades of four up: the middle stop.
        assert_eq!(s.colour(10.0), "#21918c");
        assert!((s.value_at(0.5) - 10.0).abs() < 1e-9);
        assert_eq!(s.colour(0.01), "#440154");
    }

    #[test]
    fn axes_map_their_ends_and_decades() {
        let log = Axis::covering([3.0, 700.0], true, 0.0, 300.0, TickFormat::Plain);
        assert_eq!((log.min, log.max), (1.0, 1000.0));
        assert!((log.map(10.0) - 100.0).abs() < 1e-9);
        let ticks: Vec<String> = log.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(ticks, ["1", "10", "100", "1000"]);
        let lin = Axis::covering([0.0, 7.3], false, 100.0, 0.0, TickFormat::Plain);
        assert_eq!(lin.max, 8.0);
        assert!((lin.map(2.0) - 75.0).abs() < 1e-9);
        let bytes = Axis::covering([1024.0, 1048576.0], true, 0.0, 1.0, TickFormat::Bytes);
        let ticks: Vec<String> = bytes.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(
            ticks,
            ["1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB"]
        );
    }

    #[test]
    fn plain_ticks_are_short() {
        assert_eq!(plain(0.0), "0");
        assert_eq!(plain(2.5), "2.5");
        assert_eq!(plain(1500.0), "1500");
        assert_eq!(plain(0.125), "0.125");
        assert_eq!(plain(2e7), "2e7");
    }
}
