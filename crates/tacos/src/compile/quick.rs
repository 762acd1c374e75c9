//! `Ranking::Schedules`: candidates ranked by their schedule's own time, and only the
//! winners lowered, for a plugin compiling while a communicator starts.
//!
//! Each collective's bands are taken smallest first, on a thread per collective.
//! Candidates over the options' `max_transfers` are never synthesized. In a band the
//! smallest K is synthesized first; a larger K is synthesized only if its
//! chunked bound (`bounds::chunked_bound_ps`) is below the best schedule time so far, and
//! not once a K at least as large broke the target's limits at a smaller size (a
//! program's steps grow with K, hardly with the size; the first schedule of a K larger
//! than any that fitted is checked with `msccl::lower::check_shape`). Then, per
//! placement (side by side), the band joins the file before it if that file's program,
//! timed at the band's size, is no slower than the band's best schedule; otherwise the
//! best candidate whose program can be built and passes `msccl::verify` starts a file,
//! its program timed for the manifest (unless the file before is faster after all).

use super::candidate::least_transfers;
use super::select::{
    bounds_at, no_program, timed_program, verified, Rejection, Run, Selected, Served,
};
use super::{Band, Candidate, CompileOptions};
use crate::bounds::chunked_bound_ps;
use crate::collective::{Collective, CollectiveKind};
use crate::error::Result;
use crate::msccl::lower::check_shape;
use crate::msccl::LowerOptions;
use crate::pipeline::Checked;
use crate::sim::simulate_schedule;
use crate::topology::Topology;
use crate::units::Picos;
use rayon::prelude::*;

/// A candidate built for a band: its index in the candidate list, its schedule's time.
struct Trial {
    index: usize,
    time_ps: Picos,
    checked: Checked,
}

/// The runs of every collective and placement, in the options' order.
pub(super) fn by_schedules(
    topo: &Topology,
    options: &CompileOptions,
    bands: &[Band],
    groups: &[(CollectiveKind, Vec<Candidate>)],
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<Selected>> {
    let per_collective: Vec<Vec<Selected>> = groups
        .par_iter()
        .map(|(kind, candidates)| {
            let selection = Selection {
                topo,
                options,
                kind: *kind,
                candidates,
                doomed_from: None,
                fits_up_to: None,
            };
            // The bounds (max-flows) only go into the manifest: found alongside.
            let (bounds, selected) = rayon::join(
                || bounds_at(topo, *kind, bands),
                || selection.select(bands, tick),
            );
            let (bounds, mut selected) = (bounds?, selected?);
            for (_, _, runs, _) in &mut selected {
                for served in runs.iter_mut().flat_map(|r| &mut r.bands) {
                    let b = bands.iter().position(|&b| b == served.band);
                    served.bound_ps = b.map_or(0, |b| bounds[b].best_ps());
                }
            }
            Ok(selected)
        })
        .collect::<Result<_>>()?;
    Ok(per_collective.into_iter().flatten().collect())
}

/// One collective's selection.
struct Selection<'a> {
    topo: &'a Topology,
    options: &'a CompileOptions,
    kind: CollectiveKind,
    candidates: &'a [Candidate],
    /// The smallest K whose program broke the target's limits so far, and the largest
    /// whose schedule's shape fitted them (`msccl::lower::check_shape`).
    doomed_from: Option<usize>,
    fits_up_to: Option<usize>,
}

impl Selection<'_> {
    /// The runs of each placement (their bands' bounds left at 0).
    fn select(mut self, bands: &[Band], tick: &(dyn Fn() + Sync)) -> Result<Vec<Selected>> {
        let flags = self.options.placements.flags(self.kind);
        let mut selected: Vec<Selected> = flags
            .iter()
            .map(|&in_place| (self.kind, in_place, Vec::new(), Vec::new()))
            .collect();
        for &band in bands {
            let (trials, rejected) = self.rank(band, tick);
            selected[0].3.extend(rejected);
            // The placements side by side; what one learns about K counts from the next
            // band on, so the outcome does not depend on which finishes first.
            let placed: Vec<Result<Placement>> = selected
                .par_iter()
                .map(|(_, in_place, runs, _)| self.place(*in_place, band, &trials, runs.last()))
                .collect();
            for ((_, _, runs, rejections), placed) in selected.iter_mut().zip(placed) {
                let placed = placed?;
                rejections.extend(placed.rejected);
                if let Some(k) = placed.doomed_from {
                    self.doomed_from = Some(self.doomed_from.map_or(k, |d| d.min(k)));
                }
                let served = |time_ps| Served {
                    band,
                    time_ps,
                    bound_ps: 0,
                    best_baseline: placed.best_baseline,
                    nccl: None,
                };
                match placed.placed {
                    Placed::Joins(time_ps) => runs
                        .last_mut()
                        .expect("joins the last file")
                        .bands
                        .push(served(time_ps)),
                    Placed::Starts(mut run, time_ps) => {
                        run.bands.push(served(time_ps));
                        runs.push(*run);
                    }
                }
            }
        }
        Ok(selected)
    }

    /// The band's candidates that could be built, fastest schedule first (ties to the
    /// earlier candidate), and those that could not.
    fn rank(&mut self, band: Band, tick: &(dyn Fn() + Sync)) -> (Vec<Trial>, Vec<Rejection>) {
        let size = band.min_bytes;
        let ranks = self.topo.alive_npus().len();
        let smallest = self.options.chunk_candidates.iter().min().copied();
        // Candidates over the options' work bound are never synthesized.
        let mut rejected = Vec::new();
        let mut within = Vec::new();
        for (i, candidate) in self.candidates.iter().enumerate() {
            if candidate.too_large(self.kind, ranks, self.options) {
                rejected.push(self.over_bound(band, *candidate, ranks));
                tick();
            } else {
                within.push(i);
            }
        }
        // First the baselines and the smallest K, then what can still win.
        let (first, rest): (Vec<usize>, Vec<usize>) = within.into_iter().partition(|&i| {
            self.candidates[i]
                .chunks_per_npu()
                .map_or(true, |k| Some(k) == smallest)
        });
        let (mut trials, refused) = self.build(&first, band, tick);
        rejected.extend(refused);
        let best = trials.iter().map(|t| t.time_ps).min();
        let mut hopeful = Vec::new();
        for i in rest {
            let candidate = &self.candidates[i];
            let k = candidate
                .chunks_per_npu()
                .expect("only synthesized candidates are left");
            let doomed = self.doomed_from.is_some_and(|d| k >= d);
            let skip = candidate.too_fine(ranks, size, self.options)
                || doomed
                || best.is_some_and(|best| {
                    Collective::over_all(self.topo, self.kind, None, k, size)
                        .is_ok_and(|c| chunked_bound_ps(self.topo, &c) >= best)
                });
            if skip {
                tick();
            } else {
                hopeful.push(i);
            }
        }
        let (more, refused) = self.build(&hopeful, band, tick);
        rejected.extend(refused);
        // The first schedule of a K larger than any that fitted is checked against the
        // target's limits, so that a K too large is neither lowered nor synthesized again.
        let shape = LowerOptions {
            target: self.options.target.clone(),
            ..LowerOptions::default()
        };
        for trial in more {
            let k = self.candidates[trial.index].chunks_per_npu();
            if k.is_some_and(|k| self.fits_up_to.map_or(true, |fits| k > fits)) {
                let k = k.expect("checked");
                let checked = check_shape(trial.checked.schedule(), self.topo, &shape);
                if let Err(e) = checked {
                    if e.is_limit() {
                        self.doomed_from = Some(self.doomed_from.map_or(k, |d| d.min(k)));
                    }
                    rejected.push(Rejection {
                        collective: self.kind,
                        in_place: None,
                        band,
                        candidate: self.candidates[trial.index],
                        failed_verification: false,
                        reason: e.message(),
                    });
                    continue;
                }
                self.fits_up_to = Some(k);
            }
            trials.push(trial);
        }
        trials.sort_by_key(|t| (t.time_ps, t.index));
        (trials, rejected)
    }

    /// The rejection of a candidate over the options' `max_transfers`.
    fn over_bound(&self, band: Band, candidate: Candidate, ranks: usize) -> Rejection {
        let k = candidate.chunks_per_npu().unwrap_or(1);
        Rejection {
            collective: self.kind,
            in_place: None,
            band,
            candidate,
            failed_verification: false,
            reason: format!(
                "it needs at least {} transfers, more than the {} the options allow",
                least_transfers(self.kind, ranks, k),
                self.options.max_transfers.unwrap_or(u64::MAX)
            ),
        }
    }

    /// Synthesizes the candidates `indices` at the band's size, side by side.
    fn build(
        &self,
        indices: &[usize],
        band: Band,
        tick: &(dyn Fn() + Sync),
    ) -> (Vec<Trial>, Vec<Rejection>) {
        let built: Vec<std::result::Result<Trial, Rejection>> = indices
            .par_iter()
            .map(|&index| {
                let candidate = self.candidates[index];
                let result = candidate
                    .schedule(self.topo, self.kind, band.min_bytes)
                    .and_then(|checked| {
                        // A baseline's times give only an order: simulate it.
                        let time_ps = if candidate.is_baseline() {
                            simulate_schedule(self.topo, checked.schedule())?.time_ps
                        } else {
                            checked.report().collective_time_ps
                        };
                        Ok(Trial {
                            index,
                            time_ps,
                            checked,
                        })
                    })
                    .map_err(|e| Rejection {
                        collective: self.kind,
                        in_place: None,
                        band,
                        candidate,
                        failed_verification: false,
                        reason: e.message(),
                    });
                tick();
                result
            })
            .collect();
        let mut trials = Vec::new();
        let mut rejected = Vec::new();
        for b in built {
            match b {
                Ok(t) => trials.push(t),
                Err(r) => rejected.push(r),
            }
        }
        (trials, rejected)
    }

    /// Places the band in a file of one placement: the file before it (`last`) if its
    /// program has the band's protocol and, timed at the band's size, is no slower than
    /// the fastest schedule that can still be built; otherwise a new file with that
    /// schedule's program if it passes verification, else with the next's. Where no
    /// program can be built at all the file before serves, if it can.
    fn place(
        &self,
        in_place: bool,
        band: Band,
        trials: &[Trial],
        last: Option<&Run>,
    ) -> Result<Placement> {
        let size = band.min_bytes;
        let proto = self.options.proto.for_size(size);
        let mut rejected = Vec::new();
        let mut doomed_from = self.doomed_from;
        let joinable = match last.filter(|r| r.verified.program().proto == proto) {
            Some(run) => {
                let (program, timer) = (run.verified.program(), run.verified.timer());
                Some(
                    self.options
                        .program_time_ps(self.topo, program, timer, size)?,
                )
            }
            None => None,
        };
        let mut placed = None;
        for trial in trials {
            let candidate = self.candidates[trial.index];
            let k = candidate.chunks_per_npu();
            if k.zip(doomed_from).is_some_and(|(k, d)| k >= d) {
                continue;
            }
            if let Some(time_ps) = joinable.filter(|&t| t <= trial.time_ps) {
                placed = Some(Placed::Joins(time_ps));
                break;
            }
            let built = timed_program(self.topo, &trial.checked, in_place, proto, self.options);
            let built = match built {
                Ok(b) => b,
                Err(e) => {
                    if let Some(k) = k.filter(|_| e.is_limit()) {
                        doomed_from = Some(doomed_from.map_or(k, |d| d.min(k)));
                    }
                    rejected.push(Rejection {
                        collective: self.kind,
                        in_place: Some(in_place),
                        band,
                        candidate,
                        failed_verification: false,
                        reason: e.message(),
                    });
                    continue;
                }
            };
            // A program can take longer than its schedule said: then the file before
            // may still be the better choice.
            let time_ps = built.time_ps();
            if let Some(time_ps) = joinable.filter(|&t| t <= time_ps) {
                placed = Some(Placed::Joins(time_ps));
                break;
            }
            match verified(
                built,
                (self.kind, in_place, band, candidate),
                &self.options.target,
            ) {
                Ok(verified) => {
                    let run = Run {
                        candidate,
                        verified,
                        bands: Vec::new(),
                    };
                    placed = Some(Placed::Starts(Box::new(run), time_ps));
                    break;
                }
                Err(rejection) => rejected.push(rejection),
            }
        }
        let placed = match (placed, joinable) {
            (Some(p), _) => p,
            (None, Some(time_ps)) => Placed::Joins(time_ps),
            (None, None) => {
                let target = &self.options.target;
                return Err(no_program(self.kind, in_place, size, target, &rejected));
            }
        };
        // The best baseline's time is its program's, as in the full ranking.
        let best_baseline = trials
            .iter()
            .find(|t| self.candidates[t.index].is_baseline())
            .and_then(|t| {
                let candidate = self.candidates[t.index];
                let built = timed_program(self.topo, &t.checked, in_place, proto, self.options);
                built.ok().map(|built| (candidate, built.time_ps()))
            });
        Ok(Placement {
            placed,
            best_baseline,
            rejected,
            doomed_from: doomed_from.filter(|_| doomed_from != self.doomed_from),
        })
    }
}

/// What placing a band in one placement's files came to.
struct Placement {
    placed: Placed,
    best_baseline: Option<(Candidate, Picos)>,
    rejected: Vec<Rejection>,
    /// The smallest K found to break the target's limits, if this placement found one.
    doomed_from: Option<usize>,
}

/// Where a band goes.
enum Placed {
    /// Into the file before it, whose program takes this long at the band's size.
    Joins(Picos),
    /// Into a new file (its run, without bands yet), with its program's time.
    Starts(Box<Run>, Picos),
}
