//! Fits the executor model's constants to measured times: least squares on log time,
//! each constant kept inside a physical range, by coordinate descent on multiplicative
//! steps (deterministic: the same tables give the same profile).
//!
//! A constant that no measured point depends on (network figures fitted on one node, a
//! protocol NCCL never picked) keeps the value it started from.

use super::model::{ExecModel, FitError};
use super::nccl::NcclPricer;
use crate::error::Result;
use crate::gpu::{Algorithm, Protocol};
use serde::Serialize;

/// One measured size: collective bytes (nccl-tests' size) and time, us.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Observation {
    pub bytes: u64,
    pub time_us: f64,
}

/// A table of measured times for one collective on one topology.
pub struct Table<'a> {
    /// How reports name it (the file, and the table within it).
    pub name: String,
    pub pricer: &'a NcclPricer,
    /// The algorithm the run was held to (`NCCL_ALGO`), else NCCL's choice.
    pub algorithm: Option<Algorithm>,
    /// The protocol the run was held to (`NCCL_PROTO`), else NCCL's choice.
    pub protocol: Option<Protocol>,
    pub points: Vec<Observation>,
}

impl Table<'_> {
    /// Predicted times of the table's sizes under `model`.
    pub fn predict(&self, model: &ExecModel) -> Result<Vec<f64>> {
        self.points
            .iter()
            .map(|o| {
                let p = self
                    .pricer
                    .price_with(model, o.bytes, self.algorithm, self.protocol)?;
                Ok(p.time_us)
            })
            .collect()
    }
}

/// A constant of the model the fit may move, with its physical range.
struct Knob {
    name: &'static str,
    low: f64,
    high: f64,
    get: fn(&ExecModel) -> f64,
    set: fn(&mut ExecModel, f64),
}

macro_rules! knob {
    ($name:literal, $low:expr, $high:expr, $($field:ident).+) => {
        Knob {
            name: $name,
            low: $low,
            high: $high,
            get: |m| m.$($field).+,
            set: |m, v| m.$($field).+ = v,
        }
    };
}

/// Every constant the fit moves; ranges are what hardware can be (a launch of at most
/// 200 us, an efficiency of 0.3 to 1 of line rate, steps of at most 100 us, a channel of
/// 0.5 to 500 GB/s).
/// (The NVLS knobs read NaN, and are left alone, on a profile without NVLS figures.)
fn knobs() -> Vec<Knob> {
    vec![
        knob!("launch_us", 0.0, 200.0, launch_us),
        knob!("efficiency.nvlink", 0.3, 1.0, efficiency.nvlink),
        knob!("efficiency.net", 0.3, 1.0, efficiency.net),
        knob!("ll.step_us.nvlink", 0.0, 100.0, ll.step_us.nvlink),
        knob!("ll.step_us.net", 0.0, 100.0, ll.step_us.net),
        knob!("ll.channel_gbps", 0.5, 500.0, ll.channel_gbps),
        knob!("ll128.step_us.nvlink", 0.0, 100.0, ll128.step_us.nvlink),
        knob!("ll128.step_us.net", 0.0, 100.0, ll128.step_us.net),
        knob!("ll128.channel_gbps", 0.5, 500.0, ll128.channel_gbps),
        knob!("simple.step_us.nvlink", 0.0, 100.0, simple.step_us.nvlink),
        knob!("simple.step_us.net", 0.0, 100.0, simple.step_us.net),
        knob!("simple.channel_gbps", 0.5, 500.0, simple.channel_gbps),
        Knob {
            name: "nvls.gbps",
            low: 10.0,
            high: 2000.0,
            get: |m| m.nvls.map_or(f64::NAN, |n| n.gbps),
            set: |m, v| {
                if let Some(n) = &mut m.nvls {
                    n.gbps = v;
                }
            },
        },
        Knob {
            name: "nvls.step_us",
            low: 0.0,
            high: 100.0,
            get: |m| m.nvls.map_or(f64::NAN, |n| n.step_us),
            set: |m, v| {
                if let Some(n) = &mut m.nvls {
                    n.step_us = v;
                }
            },
        },
    ]
}

/// The most a fit over tables of several node counts may miss one of its own tables by
/// (median error) before `calibrate` says it cannot predict it.
pub const NODE_COUNTS_ERROR: f64 = 0.25;

/// Below this size a measured time varies more from run to run (launch jitter, the
/// host's synchronisation), so its points weigh less.
pub const SMALL_BYTES: u64 = 1 << 20;

/// The relative error a prediction is held to: 15% from [`SMALL_BYTES`] up, 30% below.
pub fn tolerance(bytes: u64) -> f64 {
    if bytes >= SMALL_BYTES {
        0.15
    } else {
        0.30
    }
}

/// Sum over every point of ((ln predicted - ln measured) / tolerance)^2: least squares on
/// log time, each point weighed by how closely its size is held.
fn loss(tables: &[Table], model: &ExecModel) -> Result<f64> {
    let mut sum = 0.0;
    for t in tables {
        for (o, p) in t.points.iter().zip(t.predict(model)?) {
            let residual = p.max(1e-9).ln() - o.time_us.max(1e-9).ln();
            sum += (residual / tolerance(o.bytes)).powi(2);
        }
    }
    Ok(sum)
}

/// Keeps the protocols' step latencies in their physical order, LL <= LL128 <= Simple on
/// each kind of hop (LL's lines carry their own flags and need no separate
/// synchronisation; Simple synchronises per slice), raising the later ones where needed,
/// those `free` names only. Without it, constants no table pins down could land in any
/// order.
fn order_steps(model: &mut ExecModel, free: &[&str]) {
    let raise = |later: &mut f64, earlier: f64, name: &str| {
        if free.contains(&name) {
            *later = later.max(earlier);
        }
    };
    let ll = model.ll.step_us;
    raise(
        &mut model.ll128.step_us.nvlink,
        ll.nvlink,
        "ll128.step_us.nvlink",
    );
    raise(&mut model.ll128.step_us.net, ll.net, "ll128.step_us.net");
    let ll128 = model.ll128.step_us;
    raise(
        &mut model.simple.step_us.nvlink,
        ll128.nvlink,
        "simple.step_us.nvlink",
    );
    raise(
        &mut model.simple.step_us.net,
        ll128.net,
        "simple.step_us.net",
    );
}

/// A fitted profile, and what the fit says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    pub model: ExecModel,
    /// Per constant the fit may move (as [`constants`] lists them), whether the tables
    /// determine it: those they do not keep their start values.
    pub determined: Vec<Determination>,
    /// Constants fitted onto a bound of their physical range: the tables push them past
    /// what hardware can be, so the fit's other constants may be off too.
    pub on_bounds: Vec<String>,
}

/// The constants, starting from `start`, that best fit `tables`: those the tables
/// determine are fitted (a first fit over every constant finds which they are), the rest
/// keep their start values.
pub fn fit(tables: &[Table], start: &ExecModel) -> Result<Fitted> {
    let all: Vec<Knob> = knobs()
        .into_iter()
        .filter(|k| (k.get)(start).is_finite())
        .collect();
    let first = descend(tables, start, &all.iter().collect::<Vec<_>>())?;
    let determined = determined(tables, &first)?;
    let free: Vec<&Knob> = all
        .iter()
        .zip(&determined)
        .filter(|(_, d)| d.determined)
        .map(|(k, _)| k)
        .collect();
    let model = descend(tables, start, &free)?;
    let on_bounds = free
        .iter()
        .filter_map(|k| {
            let v = (k.get)(&model);
            let at = |b: f64| (v - b).abs() <= 1e-9 * (k.high - k.low);
            let bound = if at(k.low) {
                "lowest"
            } else if at(k.high) {
                "highest"
            } else {
                return None;
            };
            Some(format!(
                "{} = {v} is fitted to the {bound} value it may take (from {} to {}): the tables want it past what hardware can be, so the fit's other constants may be off too",
                k.name, k.low, k.high
            ))
        })
        .collect();
    Ok(Fitted {
        model,
        determined,
        on_bounds,
    })
}

/// Coordinate descent on `free` from `start` (each kept inside its range).
fn descend(tables: &[Table], start: &ExecModel, free: &[&Knob]) -> Result<ExecModel> {
    let names: Vec<&str> = free.iter().map(|k| k.name).collect();
    let mut model = start.clone();
    // Start inside every range.
    for k in free {
        let value = (k.get)(&model).clamp(k.low, k.high);
        (k.set)(&mut model, value);
    }
    order_steps(&mut model, &names);
    let mut best = loss(tables, &model)?;
    let mut step = 0.5;
    while step > 1e-5 {
        let mut improved = false;
        for k in free {
            let value = (k.get)(&model);
            // A multiplicative step, and an additive one so a constant can leave zero.
            let span = (k.high - k.low) * step * 0.01;
            for candidate in [
                value * (1.0 + step),
                value / (1.0 + step),
                value + span,
                value - span,
            ] {
                let candidate = candidate.clamp(k.low, k.high);
                if candidate == (k.get)(&model) {
                    continue;
                }
                let mut trial = model.clone();
                (k.set)(&mut trial, candidate);
                order_steps(&mut trial, &names);
                let l = loss(tables, &trial)?;
                if l < best * (1.0 - 1e-12) {
                    best = l;
                    model = trial;
                    improved = true;
                }
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
    Ok(model)
}

/// How well `model` predicts one table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableFit {
    pub name: String,
    /// Per point: (bytes, measured us, predicted us).
    pub points: Vec<(u64, f64, f64)>,
    /// Median and largest |predicted - measured| / measured.
    pub median_error: f64,
    pub worst_error: f64,
}

/// The fit of `model` to each table.
pub fn assess(tables: &[Table], model: &ExecModel) -> Result<Vec<TableFit>> {
    tables
        .iter()
        .map(|t| {
            let predicted = t.predict(model)?;
            let points: Vec<(u64, f64, f64)> = t
                .points
                .iter()
                .zip(predicted)
                .map(|(o, p)| (o.bytes, o.time_us, p))
                .collect();
            let mut errors: Vec<f64> = points
                .iter()
                .map(|&(_, m, p)| relative_error(m, p))
                .collect();
            errors.sort_by(f64::total_cmp);
            Ok(TableFit {
                name: t.name.clone(),
                median_error: errors.get(errors.len() / 2).copied().unwrap_or(0.0),
                worst_error: errors.last().copied().unwrap_or(0.0),
                points,
            })
        })
        .collect()
}

/// The worst table's median error below 1 MiB and from 1 MiB up (0 where no table has
/// points there): what a profile records of its own fit, so a margin taken from it covers
/// the table the profile predicts least well.
pub fn median_errors(fits: &[TableFit]) -> FitError {
    let worst_median = |small: bool| {
        fits.iter()
            .filter_map(|f| {
                let mut errors: Vec<f64> = f
                    .points
                    .iter()
                    .filter(|p| (p.0 < SMALL_BYTES) == small)
                    .map(|&(_, m, p)| relative_error(m, p))
                    .collect();
                errors.sort_by(f64::total_cmp);
                errors.get(errors.len() / 2).copied()
            })
            .fold(0.0, f64::max)
    };
    FitError {
        below_1mib: worst_median(true),
        from_1mib: worst_median(false),
    }
}

/// |predicted - measured| / measured.
pub fn relative_error(measured: f64, predicted: f64) -> f64 {
    (predicted - measured).abs() / measured
}

/// The names of the constants the fit moves, for reports.
pub fn fitted_constants() -> Vec<&'static str> {
    knobs().iter().map(|k| k.name).collect()
}

/// The constants the fit moves, named as [`fitted_constants`], with their values in
/// `model` (the NVLS ones only where it has NVLS figures).
pub fn constants(model: &ExecModel) -> Vec<(&'static str, f64)> {
    knobs()
        .iter()
        .map(|k| (k.name, (k.get)(model)))
        .filter(|(_, v)| v.is_finite())
        .collect()
}

/// Whether the tables pin one constant down on their own, around some constants.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Determination {
    pub name: &'static str,
    pub determined: bool,
    /// Why not: no point depends on it, or only a combination of it with others does.
    pub reason: Option<String>,
}

/// Below this share of the tables' strongest direction (weighed log time per unit of a
/// constant's log, squared), a combination of constants counts as not determined.
const UNDETERMINED: f64 = 1e-6;

/// A constant takes part in a direction when its share of the unit vector is above this.
const TAKES_PART: f64 = 1e-3;

/// Which constants `tables` determine around `model`: those whose change the tables see
/// (a protocol NCCL never picks, network figures on one node: none) and that no change
/// of the others makes up for (one start-up latency per protocol cannot split into the
/// launch floor and per-step latencies). Found from the derivatives of the fit's residuals
/// in each constant's log: a constant is determined when it takes no part in any
/// direction those leave (nearly) flat.
pub fn determined(tables: &[Table], model: &ExecModel) -> Result<Vec<Determination>> {
    let knobs: Vec<Knob> = knobs()
        .into_iter()
        .filter(|k| (k.get)(model).is_finite())
        .collect();
    let residuals = |m: &ExecModel| -> Result<Vec<f64>> {
        let mut out = Vec::new();
        for t in tables {
            for (o, p) in t.points.iter().zip(t.predict(m)?) {
                out.push(p.max(1e-9).ln() / tolerance(o.bytes));
            }
        }
        Ok(out)
    };
    // Column i: the residuals' change per unit of ln(constant i), by differences inside
    // its range; at zero (a step latency may be none), per hundredth of its range.
    let mut columns = Vec::with_capacity(knobs.len());
    for k in &knobs {
        let value = (k.get)(model);
        let unit = if value > 0.0 {
            value
        } else {
            (k.high - k.low) * 0.01
        };
        let h = 1e-4 * unit;
        let (low, high) = ((value - h).max(k.low), (value + h).min(k.high));
        if high <= low {
            columns.push(None);
            continue;
        }
        let at = |v: f64| {
            let mut m = model.clone();
            (k.set)(&mut m, v);
            residuals(&m)
        };
        let (up, down) = (at(high)?, at(low)?);
        let span = (high - low) / unit;
        columns.push(Some(
            up.iter()
                .zip(&down)
                .map(|(u, d)| (u - d) / span)
                .collect::<Vec<f64>>(),
        ));
    }
    let norm = |c: &[f64]| c.iter().map(|x| x * x).sum::<f64>().sqrt();
    let strongest = columns
        .iter()
        .flatten()
        .map(|c| norm(c))
        .fold(0.0, f64::max);
    let seen: Vec<usize> = (0..knobs.len())
        .filter(|&i| {
            columns[i]
                .as_ref()
                .is_some_and(|c| norm(c) > strongest * UNDETERMINED.sqrt())
        })
        .collect();
    // The seen columns, each scaled to length 1; their Gram matrix's (nearly) flat
    // directions are the combinations the tables do not see.
    let unit: Vec<Vec<f64>> = seen
        .iter()
        .map(|&i| {
            let c = columns[i].as_ref().expect("seen columns exist");
            let n = norm(c);
            c.iter().map(|x| x / n).collect()
        })
        .collect();
    let gram: Vec<Vec<f64>> = unit
        .iter()
        .map(|a| {
            unit.iter()
                .map(|b| a.iter().zip(b).map(|(x, y)| x * y).sum())
                .collect()
        })
        .collect();
    let (values, vectors) = symmetric_eigen(gram);
    let mut out: Vec<Determination> = knobs
        .iter()
        .map(|k| Determination {
            name: k.name,
            determined: false,
            reason: Some("no measured point depends on it".into()),
        })
        .collect();
    let flat: Vec<&Vec<f64>> = values
        .iter()
        .zip(&vectors)
        .filter(|(value, _)| **value < UNDETERMINED)
        .map(|(_, vector)| vector)
        .collect();
    // Each flat direction leaves one constant to its start value: elimination with the
    // largest component as pivot picks constants the flat directions cannot all avoid,
    // so once those are held, the tables determine every other seen constant.
    let mut rows: Vec<Vec<f64>> = flat.iter().map(|v| v.to_vec()).collect();
    let mut held: Vec<(usize, Vec<usize>)> = Vec::new();
    for r in 0..rows.len() {
        let Some(pivot) = (0..seen.len())
            .filter(|&l| rows[r][l].abs() > TAKES_PART)
            .max_by(|&a, &b| {
                rows[r][a]
                    .abs()
                    .total_cmp(&rows[r][b].abs())
                    .then(b.cmp(&a))
            })
        else {
            continue;
        };
        let partners = (0..seen.len())
            .filter(|&l| l != pivot && rows[r][l].abs() > TAKES_PART)
            .collect();
        held.push((pivot, partners));
        let scale = rows[r][pivot];
        let pivot_row: Vec<f64> = rows[r].iter().map(|x| x / scale).collect();
        for (q, row) in rows.iter_mut().enumerate() {
            if q != r {
                let factor = row[pivot];
                for (x, p) in row.iter_mut().zip(&pivot_row) {
                    *x -= factor * p;
                }
            }
        }
        rows[r] = pivot_row;
    }
    for &i in &seen {
        out[i].determined = true;
        out[i].reason = None;
    }
    for (pivot, partners) in held {
        let names: Vec<&str> = partners.iter().map(|&l| knobs[seen[l]].name).collect();
        let i = seen[pivot];
        out[i].determined = false;
        out[i].reason = Some(format!(
            "the tables see it only together with {}",
            names.join(", ")
        ));
    }
    Ok(out)
}

/// Eigenvalues and unit eigenvectors (`vectors[k]` for `values[k]`) of a symmetric
/// matrix, by cyclic Jacobi rotations.
fn symmetric_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A <- J^T A J, V <- V J, J the rotation in the (p, q) plane.
                let rotate = |x: &mut f64, y: &mut f64| {
                    let (xp, yq) = (*x, *y);
                    *x = c * xp - s * yq;
                    *y = s * xp + c * yq;
                };
                for row in a.iter_mut().chain(v.iter_mut()) {
                    let (mut x, mut y) = (row[p], row[q]);
                    rotate(&mut x, &mut y);
                    (row[p], row[q]) = (x, y);
                }
                let (low, high) = a.split_at_mut(q);
                for (x, y) in low[p].iter_mut().zip(high[0].iter_mut()) {
                    rotate(x, y);
                }
            }
        }
    }
    let values = (0..n).map(|i| a[i][i]).collect();
    // Column k of `v` is the k-th eigenvector.
    let vectors = (0..n).map(|k| (0..n).map(|i| v[i][k]).collect()).collect();
    (values, vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_pairs_of_a_hand_worked_matrix() {
        // [[2, 1, 0], [1, 2, 0], [0, 0, 5]]: 1 along (1, -1, 0), 3 along (1, 1, 0), 5 along z.
        let (values, vectors) = symmetric_eigen(vec![
            vec![2.0, 1.0, 0.0],
            vec![1.0, 2.0, 0.0],
            vec![0.0, 0.0, 5.0],
        ]);
        let mut pairs: Vec<(f64, Vec<f64>)> = values.into_iter().zip(vectors).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let half = std::f64::consts::FRAC_1_SQRT_2;
        for ((value, vector), (want, along)) in pairs.iter().zip([
            (1.0, [half, -half, 0.0]),
            (3.0, [half, half, 0.0]),
            (5.0, [0.0, 0.0, 1.0]),
        ]) {
            assert!((value - want).abs() < 1e-12, "{value} against {want}");
            let dot: f64 = vector.iter().zip(along).map(|(a, b)| a * b).sum();
            assert!(
                (dot.abs() - 1.0).abs() < 1e-12,
                "{vector:?} against {along:?}"
            );
        }
    }
}
