//! The synthesizer: greedy link-chunk matching over a time-expanded network (TACOS).
//!
//! Time advances from event to event (a chunk arriving somewhere). At each event the
//! network is expanded by one step: arrivals settle, and every NPU whose incoming links are
//! free is matched with chunks it still needs, chosen at random among those its in-neighbours
//! hold, each sent over the cheapest free link that can carry it. A link carries one chunk
//! at a time, so the result is contention-free by construction; the schedule checker
//! verifies it independently.

mod greedy;

use crate::collective::{Collective, CollectiveKind};
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::topology::Topology;

/// Choices that change what the synthesizer produces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SynthOptions {
    /// Seeds every random choice: the same inputs and seed give the same schedule.
    pub seed: u64,
}

/// Synthesizes a contention-free schedule for `collective` on `topo`.
pub fn synthesize(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
) -> Result<Schedule> {
    if !matches!(
        collective.kind(),
        CollectiveKind::AllGather | CollectiveKind::Broadcast
    ) {
        return Err(Error::Synthesis(format!(
            "{} is not synthesized yet (allgather and broadcast are)",
            collective.kind()
        )));
    }
    let transfers = greedy::Matcher::new(topo, collective, options.seed).run()?;
    Ok(Schedule::new(
        topo.name(),
        collective.spec().clone(),
        collective.chunk_bytes(),
        transfers,
    ))
}
