//! Candidates for one band: synthesized schedules (a K and a seed each) and baselines,
//! each checked and lowered by the pipeline to the MSCCL program that would actually run.

use super::CompileOptions;
use crate::baselines::Baseline;
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::msccl::{LowerOptions, Program, Proto, Target};
use crate::pipeline::{self, Checked, Request};
use crate::synth::{SynthOptions, TreeShape};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a program came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum Candidate {
    /// The synthesizer, with `chunks_per_npu` chunks per NPU and seed `seed`.
    Tacos { chunks_per_npu: usize, seed: u64 },
    /// The synthesizer with its chunks' ways planned (`SynthOptions::planned`, seed 0),
    /// with `chunks_per_npu` chunks per NPU. Sets compiled before the paths were planned
    /// name it `trees`.
    #[serde(alias = "trees")]
    Planned { chunks_per_npu: usize },
    /// The same with shallow trees (`SynthOptions::shape`), for collectives whose chunks
    /// go along trees.
    Shallow { chunks_per_npu: usize },
    Baseline {
        #[serde(with = "baseline_name")]
        name: Baseline,
    },
}

impl Candidate {
    /// Every candidate the options ask for, in the order ties are broken: synthesized
    /// ones by K, each K's seeds then (where `planned`: planning applies to `kind` on the
    /// topology, `pipeline::planning_applies`) planned, balanced and, where the chunks go
    /// along trees, shallow; then the baselines that define `kind`.
    pub(crate) fn all(
        kind: CollectiveKind,
        chunk_candidates: &[usize],
        seeds: u64,
        planned: bool,
        baselines: bool,
    ) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = chunk_candidates
            .iter()
            .flat_map(|&k| {
                let free = (0..seeds).map(move |seed| Candidate::Tacos {
                    chunks_per_npu: k,
                    seed,
                });
                let balanced = planned.then_some(Candidate::Planned { chunks_per_npu: k });
                let shallow = (planned && !kind.one_target())
                    .then_some(Candidate::Shallow { chunks_per_npu: k });
                free.chain(balanced).chain(shallow)
            })
            .collect();
        if baselines {
            out.extend(
                Baseline::ALL
                    .into_iter()
                    .filter(|b| b.kinds().contains(&kind) && b.writes_xml())
                    .map(|name| Candidate::Baseline { name }),
            );
        }
        out
    }

    /// Whether the options skip this candidate at `size_bytes` on `ranks` ranks: a K
    /// above the smallest whose chunks would be under `min_chunk_bytes`.
    pub(crate) fn too_fine(&self, ranks: usize, size_bytes: u64, options: &CompileOptions) -> bool {
        let smallest = options.chunk_candidates.iter().min().copied().unwrap_or(1);
        match *self {
            Candidate::Tacos { chunks_per_npu, .. }
            | Candidate::Planned { chunks_per_npu }
            | Candidate::Shallow { chunks_per_npu } => {
                chunks_per_npu > smallest
                    && size_bytes / ((ranks * chunks_per_npu) as u64) < options.min_chunk_bytes
            }
            Candidate::Baseline { .. } => false,
        }
    }

    /// Whether the options' `max_transfers` rules this candidate out on `ranks` ranks:
    /// a synthesized one whose collective needs more transfers than that.
    pub(crate) fn too_large(
        &self,
        kind: CollectiveKind,
        ranks: usize,
        options: &CompileOptions,
    ) -> bool {
        match (self.chunks_per_npu(), options.max_transfers) {
            (Some(k), Some(most)) => least_transfers(kind, ranks, k) > most,
            _ => false,
        }
    }

    /// K, for a synthesized candidate.
    pub fn chunks_per_npu(&self) -> Option<usize> {
        match *self {
            Candidate::Tacos { chunks_per_npu, .. }
            | Candidate::Planned { chunks_per_npu }
            | Candidate::Shallow { chunks_per_npu } => Some(chunks_per_npu),
            Candidate::Baseline { .. } => None,
        }
    }

    pub fn is_baseline(&self) -> bool {
        matches!(self, Candidate::Baseline { .. })
    }

    /// The candidate's checked schedule for `kind` of `size_bytes` over every alive NPU.
    pub(crate) fn schedule(
        &self,
        topo: &Topology,
        kind: CollectiveKind,
        size_bytes: u64,
    ) -> Result<Checked> {
        match *self {
            Candidate::Tacos {
                chunks_per_npu,
                seed,
            } => {
                let request = Request::new(kind, size_bytes);
                pipeline::synthesize(topo, &request, chunks_per_npu, &SynthOptions::seeded(seed))
            }
            Candidate::Planned { chunks_per_npu } | Candidate::Shallow { chunks_per_npu } => {
                let request = Request::new(kind, size_bytes);
                let shape = match self {
                    Candidate::Shallow { .. } => TreeShape::Shallow,
                    _ => TreeShape::Balanced,
                };
                let options = SynthOptions {
                    planned: true,
                    shape,
                    ..SynthOptions::seeded(0)
                };
                pipeline::synthesize(topo, &request, chunks_per_npu, &options)
            }
            Candidate::Baseline { name } => {
                let spec = CollectiveSpec {
                    kind,
                    root: None,
                    npus: topo.alive_npus(),
                    chunks_per_npu: 1,
                    size_bytes,
                };
                Checked::order_only(name, name.schedule(topo, &spec)?, topo)
            }
        }
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Candidate::Tacos {
                chunks_per_npu,
                seed,
            } => write!(f, "tacos K={chunks_per_npu} seed={seed}"),
            Candidate::Planned { chunks_per_npu } => {
                write!(f, "tacos K={chunks_per_npu} planned")
            }
            Candidate::Shallow { chunks_per_npu } => {
                write!(f, "tacos K={chunks_per_npu} planned shallow")
            }
            Candidate::Baseline { name } => write!(f, "{name} (baseline)"),
        }
    }
}

/// The fewest transfers `kind` over `ranks` ranks with `k` chunks per rank can take:
/// every rank must receive each of the others' `k` chunks (All-Gather, All-to-All), or
/// each of the `ranks * k` chunks must be reduced from every rank (Reduce-Scatter): one
/// transfer per contribution; All-Reduce does both. Rooted collectives: every other rank
/// takes part at least once.
pub(crate) fn least_transfers(kind: CollectiveKind, ranks: usize, k: usize) -> u64 {
    let others = ranks.saturating_sub(1) as u64;
    let one_pass = (ranks as u64)
        .saturating_mul(others)
        .saturating_mul(k as u64);
    match kind {
        CollectiveKind::AllReduce => one_pass.saturating_mul(2),
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            one_pass
        }
        _ => others,
    }
}

/// How a candidate's program is lowered for one placement, protocol and target (the
/// pipeline names it by where it came from); the size range is set when the bands are
/// merged.
pub(crate) fn lowering_for(
    (in_place, proto, instances): (bool, Proto, usize),
    target: &Target,
) -> LowerOptions {
    LowerOptions {
        in_place: Some(in_place),
        proto: Some(proto),
        instances,
        target: target.clone(),
        ..LowerOptions::default()
    }
}

/// Whether two programs run the same steps (their size ranges aside).
pub(crate) fn same_program(a: &Program, b: &Program) -> bool {
    a.name == b.name
        && a.collective == b.collective
        && a.proto == b.proto
        && a.nchannels == b.nchannels
        && a.nchunksperloop == b.nchunksperloop
        && a.inplace == b.inplace
        && a.outofplace == b.outofplace
        && a.extra == b.extra
        && a.gpus == b.gpus
}

/// A baseline as its name in files.
mod baseline_name {
    use crate::baselines::Baseline;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Baseline, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(b.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Baseline, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
