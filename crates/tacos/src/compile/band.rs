//! One band at a time: what the MSCCL scheduler plugin compiles at the first call of a
//! size band, so that a job on an empty cache is served from its first call.
//!
//! A band's outcome is a function of the topology, the options and the band alone: the
//! band is ranked as [`compile`](super::compile) ranks a set of one band (no merging with
//! its neighbours, no state carried from other bands), candidates over the options'
//! `max_transfers` are skipped before any work, NCCL's own choice competes where the
//! options' cost says so, and nothing depends on the clock or on the number of threads
//! (results are gathered in candidate order, ties go to the earlier candidate). So the
//! ranks of a job, which cannot talk to each other, each compile or find the same bytes
//! for the same call. Only what does not depend on the band (NCCL's tuning and its
//! algorithms' shapes, per collective) is kept between bands.

use super::candidate::{least_transfers, Candidate};
use super::manifest::{Entry, LeftToNccl};
use super::select::{against_nccl, select_runs, CompiledFile, KindRun};
use super::{Band, CompileOptions, CostOptions, Placements};
use crate::collective::{Collective, CollectiveKind};
use crate::cost::nccl::nccl_tuning;
use crate::cost::NcclPricer;
use crate::error::{Error, Result};
use crate::pipeline::{planning_applies, Request};
use crate::topology::Topology;
use crate::tuner::nccl_tuning::NcclTuning;
use crate::tuner::TUNED;
use std::sync::{Arc, OnceLock};

/// What a band gets.
#[derive(Clone, Debug, PartialEq)]
pub enum BandOutcome {
    /// A program: its manifest entry and its file.
    Program { entry: Entry, file: CompiledFile },
    /// No program is predicted faster than NCCL's own choice by the options' margin.
    LeftToNccl(LeftToNccl),
}

/// Compiles the bands of one topology and option set one at a time, on a thread pool of
/// its own with `options.jobs` threads (started at the first band it compiles).
pub struct BandCompiler {
    topo: Topology,
    options: CompileOptions,
    bands: Vec<Band>,
    /// Started at the first band compiled: a process whose bands are all in the cache
    /// never starts its threads.
    pool: OnceLock<std::result::Result<rayon::ThreadPool, String>>,
    /// NCCL's tuning on the topology, made at the first band that needs it.
    tuning: OnceLock<std::result::Result<Arc<NcclTuning>, String>>,
    /// Per collective NCCL tunes, its pricer, made at the collective's first band.
    pricers: Vec<(
        CollectiveKind,
        OnceLock<std::result::Result<NcclPricer, String>>,
    )>,
}

impl BandCompiler {
    /// A compiler of `options`' bands on `topo`; the options are checked here.
    pub fn new(topo: Topology, options: CompileOptions) -> Result<BandCompiler> {
        options.validate()?;
        let pricers = options
            .collectives
            .iter()
            .filter(|k| TUNED.contains(k))
            .map(|&k| (k, OnceLock::new()))
            .collect();
        Ok(BandCompiler {
            bands: options.sizes.bands(options.band_octaves),
            topo,
            options,
            pool: OnceLock::new(),
            tuning: OnceLock::new(),
            pricers,
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// Every band, smallest first.
    pub fn bands(&self) -> &[Band] {
        &self.bands
    }

    /// The band a call of `kind`, in place or not, moving `bytes` (the executor's
    /// measure) falls in, where the options compile one for it.
    pub fn band_of(&self, kind: CollectiveKind, in_place: bool, bytes: u64) -> Option<Band> {
        let compiled = self.options.collectives.contains(&kind)
            && self.options.placements.flags(kind).contains(&in_place);
        compiled.then_some(())?;
        self.bands
            .iter()
            .copied()
            .find(|b| (b.min_bytes..=b.max_bytes).contains(&bytes))
    }

    /// The outcome of `band` of `kind`, in place or not: its program, or NCCL's choice
    /// where that is predicted as fast; an error where no candidate gives a program
    /// within the target's limits and the options' bounds (or the collective cannot run
    /// here). The same on every machine for the same topology and options.
    pub fn compile(&self, kind: CollectiveKind, in_place: bool, band: Band) -> Result<BandOutcome> {
        if self.band_of(kind, in_place, band.min_bytes) != Some(band) {
            return Err(Error::compile(format!(
                "{kind} {} at {}..{} bytes is not a band these options compile",
                if in_place { "in place" } else { "out of place" },
                band.min_bytes,
                band.max_bytes
            )));
        }
        let pool = self.pool.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(self.options.jobs)
                .thread_name(|i| format!("tacos-band-{i}"))
                .build()
                .map_err(|e| format!("cannot start worker threads: {e}"))
        });
        let pool = pool.as_ref().map_err(|e| Error::compile(e.clone()))?;
        pool.install(|| self.compile_on_pool(kind, in_place, band))
    }

    fn compile_on_pool(
        &self,
        kind: CollectiveKind,
        in_place: bool,
        band: Band,
    ) -> Result<BandOutcome> {
        let topo = &self.topo;
        Collective::over_all(topo, kind, None, 1, band.min_bytes).map_err(|e| {
            Error::compile(format!(
                "{kind} cannot run on topology {}: {e}",
                topo.name()
            ))
        })?;
        let one = CompileOptions {
            collectives: vec![kind],
            placements: if in_place {
                Placements::InPlace
            } else {
                Placements::OutOfPlace
            },
            ..self.options.clone()
        };
        let o = &self.options;
        let groups = [(
            kind,
            Candidate::all(
                kind,
                &o.chunk_candidates,
                o.seeds,
                planning_applies(topo, &Request::new(kind, 1)),
                o.baselines,
            ),
        )];
        // Nothing to rank where every candidate is over the work bound: said at once,
        // before NCCL is priced or any bound is computed.
        let ranks = topo.alive_npus().len();
        if let (Some(most), true) = (
            o.max_transfers,
            groups[0].1.iter().all(|c| c.too_large(kind, ranks, o)),
        ) {
            let fewest = o.chunk_candidates.iter().min().copied().unwrap_or(1);
            return Err(Error::Limit {
                what: "transfers",
                value: least_transfers(kind, ranks, fewest),
                limit: most,
                context: format!(
                    "{kind} on {ranks} ranks with K = {fewest}, the fewest chunks tried: no candidate is within the options' work bound (max_transfers)"
                ),
            });
        }
        let nccl = o.cost.as_ref().and_then(|c| c.nccl_margin.map(|m| (c, m)));
        // NCCL's side does not depend on the band's programs: priced alongside.
        let (selected, pricer) = rayon::join(
            || select_runs(topo, &one, &[band], &groups, &|| {}, &|_| {}),
            || nccl.map(|(cost, _)| self.pricer(kind, cost)).transpose(),
        );
        let margin = nccl.map(|(_, m)| m);
        let runs: Vec<KindRun> = selected?
            .into_iter()
            .flat_map(|(kind, in_place, runs, _)| {
                runs.into_iter().map(move |r| (kind, in_place, r))
            })
            .collect();
        let (mut kept, mut left) = match (margin, pricer?.flatten()) {
            (Some(margin), Some(pricer)) => against_nccl(&[(kind, pricer)], margin, runs)?,
            _ => (runs, Vec::new()),
        };
        if let Some(left) = left.pop() {
            return Ok(BandOutcome::LeftToNccl(left));
        }
        let (kind, in_place, run) = kept.pop().ok_or_else(|| {
            Error::compile(format!("no program for {kind} at {} bytes", band.min_bytes))
        })?;
        let (entry, file) = run.into_file(kind, in_place, &o.target)?;
        Ok(BandOutcome::Program { entry, file })
    }

    /// NCCL's pricer for `kind`, made once; None where NCCL does not tune `kind`.
    fn pricer(&self, kind: CollectiveKind, cost: &CostOptions) -> Result<Option<&NcclPricer>> {
        let Some((_, cell)) = self.pricers.iter().find(|(k, _)| *k == kind) else {
            return Ok(None);
        };
        let executor = cost.executor();
        let made = cell.get_or_init(|| {
            let tuning = self
                .tuning
                .get_or_init(|| {
                    nccl_tuning(
                        &self.topo,
                        executor.domain_size,
                        executor.gpu,
                        executor.model.nccl_version(),
                    )
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
                })
                .clone()?;
            let model = executor.model.clone();
            NcclPricer::with_tuning(&self.topo, kind, executor.domain_size, model, tuning)
                .map_err(|e| e.to_string())
        });
        made.as_ref()
            .map(Some)
            .map_err(|e| Error::compile(e.clone()))
    }
}
