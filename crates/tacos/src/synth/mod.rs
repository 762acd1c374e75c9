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
//! cross NPUs that do not need them); every matcher's rounds go through one round loop,
//! `matching`.
//! Combining ones are the time reversal of their copying dual on the reversed topology, and
//! All-Reduce is Reduce-Scatter then All-Gather (`phases` says so once; `compose` holds
//! several collectives as one problem and pipelines All-Reduce). Where the topology is identical nodes, one node can be matched and its
//! transfers shifted onto every other (`replicate`). The number of chunks per NPU is
//! chosen by `crate::pipeline`, by the simulated time of what is emitted.

mod bits;
mod calendar;
mod compose;
mod fabric;
mod fast;
mod gates;
mod greedy;
mod matching;
pub mod memory;
mod order;
mod outbox;
mod paths;
mod phases;
mod ports;
mod relay;
mod replicate;
mod retime;
mod rounds;
mod stars;
mod streamed;
mod trees;

use crate::prefetch;

pub use compose::{synthesize_concurrent, AllReduceTimes, Synthesis};
pub(crate) use fabric::{port_shape, PortShape};
pub use outbox::Sink;
pub use replicate::{NodeShift, Replicated};
pub use rounds::goes_round;
pub use streamed::{
    admit_streamed, prepare_streamed, spooled_matchings, synthesize_streamed, Prepared, Streamed,
};
pub use trees::TreeShape;

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
    /// Plan each chunk's way before matching, the links loaded evenly for their speeds,
    /// instead of letting the matcher choose at every event: a chunk copied to every NPU
    /// (All-Gather, Broadcast, and the duals of the combining collectives) spreads along
    /// a spanning tree (`trees`), a chunk with one target (All-to-All, Gather, Scatter)
    /// follows a path (`paths`). Where links differ in speed, a ring's chunks must go round
    /// both ways or a fabric's NICs must share the load evenly, near the bounds; where the
    /// free choice times better (meshes, some relays), slower: searches try both. Held
    /// synthesis only (not `replicate`, not streamed), trees over every NPU.
    pub planned: bool,
    /// With `planned`, how each chunk's tree is grown: balanced for the links' loads,
    /// shallow (cheapest link first), which pipelines better with few chunks, or one way
    /// round each ring dimension, alternately up and down (rings and tori: [`goes_round`]);
    /// searches try each where it applies. Paths (one target per chunk) are always
    /// balanced.
    pub shape: TreeShape,
}

impl SynthOptions {
    /// The default synthesis (every NPU matched, nothing planned) with `seed`.
    ///
    /// ```
    /// use tacos::collective::{Collective, CollectiveKind};
    /// use tacos::schedule::check;
    /// use tacos::synth::{synthesize, SynthOptions};
    /// use tacos::topology::{parse_spec, SpecDefaults};
    ///
    /// let ring = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
    /// let all_gather =
    ///     Collective::over_all(&ring, CollectiveKind::AllGather, None, 8, 1 << 30).unwrap();
    /// let greedy = synthesize(&ring, &all_gather, &SynthOptions::seeded(0)).unwrap();
    /// let trees = SynthOptions { planned: true, ..SynthOptions::seeded(0) };
    /// let planned = synthesize(&ring, &all_gather, &trees).unwrap();
    /// check(&planned, &ring).unwrap();
    /// // Every link busy from start to end: within 0.2% of the 9,395 us each NPU needs to
    /// // take in 7/8 GiB over its two links, where chunks drawn freely take 3.7% more.
    /// let bound_ps = 7 * (1u64 << 30) / 8 * 10;
    /// assert!(planned.collective_time_ps() * 998 <= bound_ps * 1000);
    /// assert!(planned.collective_time_ps() < greedy.collective_time_ps());
    /// ```
    pub fn seeded(seed: u64) -> SynthOptions {
        SynthOptions {
            seed,
            replicate: false,
            planned: false,
            shape: TreeShape::Balanced,
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
