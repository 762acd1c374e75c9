//! The synthesizer: greedy link-chunk matching over a time-expanded network (TACOS).
//!
//! Time advances from event to event (a chunk arriving somewhere). At each event the
//! network is expanded by one step: arrivals settle, and every NPU whose incoming links are
//! free is matched with chunks useful to it, chosen at random among those its in-neighbours
//! hold, each sent over the cheapest free link that can carry it. A link carries one chunk
//! at a time, so the result is contention-free by construction; the schedule checker
//! verifies it independently.
//!
//! Copying collectives are matched directly (`greedy`, with `relay` for chunks that must
//! cross NPUs that do not need them). Combining ones are the time reversal of their copying
//! dual on the reversed topology, and All-Reduce is Reduce-Scatter then All-Gather
//! (`compose`). Where the topology is identical nodes, one node can be matched and its
//! transfers shifted onto every other (`replicate`). The number of chunks per NPU is
//! chosen by `crate::pipeline`, by the simulated time of what is emitted.

mod bits;
mod calendar;
mod compose;
mod fabric;
mod fast;
mod gates;
mod greedy;
mod order;
mod outbox;
mod paths;
mod ports;
mod relay;
mod replicate;
mod retime;
mod stars;
mod streamed;

use crate::prefetch;

pub use compose::{synthesize_concurrent, AllReduceTimes, Synthesis};
pub(crate) use fabric::{port_shape, PortShape};
pub use outbox::Sink;
pub use replicate::{NodeShift, Replicated};
pub use streamed::{
    admit_streamed, prepare_streamed, spooled_matchings, synthesize_streamed, Prepared, Streamed,
};

use crate::collective::Collective;
use crate::error::Result;
use crate::schedule::Schedule;
use crate::topology::Topology;

/// Choices that change what the synthesizer produces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SynthOptions {
    /// Seeds every random choice: the same inputs and seed give the same schedule.
    pub seed: u64,
    /// Match one node and replicate it over the topology's identical nodes
    /// ([`Replicated`]): All-Gather, Reduce-Scatter and All-Reduce over every NPU, on
    /// topologies a shift by whole nodes maps onto themselves.
    pub replicate: bool,
}

impl SynthOptions {
    /// The default synthesis (every NPU matched) with `seed`.
    pub fn seeded(seed: u64) -> SynthOptions {
        SynthOptions {
            seed,
            replicate: false,
        }
    }
}

/// Synthesizes a contention-free schedule for `collective` on `topo`.
pub fn synthesize(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
) -> Result<Schedule> {
    let mut synthesis = synthesize_concurrent(topo, std::slice::from_ref(collective), options)?;
    Ok(synthesis.schedules.remove(0))
}
