//! Choosing K, the chunks per NPU: more chunks pipeline better over multi-hop paths, but
//! every chunk pays each link's latency. The best K depends on the size, so it is chosen by
//! synthesizing each candidate and simulating the result.

use super::{join, synthesize_concurrent, SynthOptions, Synthesis};
use crate::collective::{Collective, CollectiveSpec};
use crate::error::{Error, Result};
use crate::sim::simulate_schedule;
use crate::topology::Topology;
use crate::units::Picos;

/// The K values an automatic choice tries.
pub const AUTO_CHUNKS: [usize; 4] = [1, 2, 4, 8];

/// One candidate K and how it did.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkTrial {
    pub chunks_per_npu: usize,
    /// The schedule's own time.
    pub synthesized_ps: Picos,
    /// The simulator's time for the schedule (what the choice is made on).
    pub simulated_ps: Picos,
}

/// The best K found, its collective and synthesis, and every candidate's figures.
#[derive(Clone, Debug)]
pub struct BestChunking {
    pub collective: Collective,
    pub synthesis: Synthesis,
    pub trials: Vec<ChunkTrial>,
}

/// Synthesizes `spec` with each K in `candidates` (its own `chunks_per_npu` is ignored)
/// and keeps the one with the lowest simulated time, ties going to the earlier candidate.
/// Candidates after the first that give too many chunks to track are skipped.
pub fn synthesize_best_chunking(
    topo: &Topology,
    spec: &CollectiveSpec,
    candidates: &[usize],
    options: &SynthOptions,
) -> Result<BestChunking> {
    let attempt = |k: usize| -> Result<Option<(Collective, Synthesis, ChunkTrial)>> {
        let collective = match Collective::new(
            topo,
            CollectiveSpec {
                chunks_per_npu: k,
                ..spec.clone()
            },
        ) {
            Ok(c) => c,
            Err(_) if Some(&k) != candidates.first() => return Ok(None),
            Err(e) => return Err(e),
        };
        let synthesis = synthesize_concurrent(topo, std::slice::from_ref(&collective), options)?;
        let schedule = &synthesis.schedules[0];
        let trial = ChunkTrial {
            chunks_per_npu: k,
            synthesized_ps: schedule.collective_time_ps(),
            simulated_ps: simulate_schedule(topo, schedule)?.time_ps,
        };
        Ok(Some((collective, synthesis, trial)))
    };
    // The candidates are independent: synthesize them side by side.
    let attempts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|&k| s.spawn(move || attempt(k)))
            .collect();
        handles.into_iter().map(join).collect()
    });
    let mut best: Option<(Collective, Synthesis)> = None;
    let mut trials: Vec<ChunkTrial> = Vec::new();
    for attempt in attempts {
        let Some((collective, synthesis, trial)) = attempt? else {
            continue;
        };
        let lowest = trials.iter().map(|t| t.simulated_ps).min();
        if lowest.map_or(true, |l| trial.simulated_ps < l) {
            best = Some((collective, synthesis));
        }
        trials.push(trial);
    }
    let (collective, synthesis) =
        best.ok_or_else(|| Error::Synthesis("no number of chunks per NPU to try".into()))?;
    Ok(BestChunking {
        collective,
        synthesis,
        trials,
    })
}
