//! The congestion-aware alpha-beta simulator.
//!
//! It executes messages, not promises: a message is issued once the messages it depends on
//! have arrived and the previous message of its flow (same source and destination) has been
//! issued, so every flow is FIFO the way a runtime connection is. A message between
//! neighbours takes their link; one between NPUs joined through switches takes the route
//! `Topology::route_tree` gives and holds all its links at once (cut-through: the summed
//! latency, the bytes at the narrowest link); any other is routed on a shortest path (by
//! alpha-beta cost) and occupies each hop in turn (store and forward). Each directed link
//! carries one message at a time, serving its queue in order of arrival at the link, ties
//! broken by message index. Timestamps in a schedule are only used to order its transfers.
//!
//! In-switch transfers (`Transfer::in_switch`) move an operation at a time: a multicast
//! or a sum inside a reducing switch starts once all its transfers are ready and its
//! links free, holds the links its transfers share once, and lands all of them together
//! (module `groups`).
//!
//! That is the default, `Sharing::Serial`. `Sharing::Fair` instead moves every issued
//! message at once and shares link bandwidth by max-min fairness (module `fair`).
//!
//! The engine keeps flat arrays indexed by message and link, so a schedule of a million
//! transfers simulates in a fraction of a second (`tacos bench sim` measures it). A
//! transfer stream too large to hold is replayed in one pass instead (`replay_stream`),
//! with the same answer wherever the schedule is timed.
//!
//! ```
//! use tacos::baselines::Baseline;
//! use tacos::collective::{Collective, CollectiveKind};
//! use tacos::sim::simulate_schedule;
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! // The one-way Ring All-Gather of 4 MiB on 4 NPUs: 3 steps of a 1 MiB chunk on each
//! // 50 GB/s link with 0.5 us of latency, 3 x (0.5 + 20.97152) us.
//! let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
//! let c = Collective::over_all(&ring, CollectiveKind::AllGather, None, 1, 4 << 20).unwrap();
//! let schedule = Baseline::RingUni.schedule(&ring, c.spec()).unwrap();
//! assert_eq!(simulate_schedule(&ring, &schedule).unwrap().time_ps, 64_414_560);
//! ```

mod engine;
mod fair;
mod groups;
mod landed;
pub mod memory;
mod ready;
mod replay;
mod report;
mod route;
mod workload;

pub(crate) use engine::HopStarts;
pub use fair::MAX_CONCURRENT_FLOWS;
pub use replay::{replay_stream, Replayed};
pub use report::{bus_factor, LinkLoad, SimReport};
pub(crate) use route::Router;

use crate::budget::{Allowance, MemoryLimit};
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::topology::{NpuId, Topology};
use crate::units::Picos;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use workload::{Dependencies, Workload};

/// One message to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub src: NpuId,
    pub dst: NpuId,
    pub bytes: f64,
    /// Indices of messages that must have arrived before this one is issued.
    pub deps: Vec<usize>,
}

/// When a message left its source and arrived at its destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageTiming {
    pub start_ps: Picos,
    pub end_ps: Picos,
}

/// What a simulation measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// When the last message arrived.
    pub time_ps: Picos,
    /// Per message (empty from `replay_stream`, which keeps nothing per message).
    pub messages: Vec<MessageTiming>,
    /// Per link (indexed like `Topology::links()`): time spent carrying messages.
    pub link_busy_ps: Vec<Picos>,
    /// Per link: bytes carried.
    pub link_bytes: Vec<f64>,
}

/// How messages crossing the same link share it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// One message per link at a time, in order of arrival at the link (this module's
    /// model, what every other figure of tacos uses).
    #[default]
    Serial,
    /// Every issued message moves at once, links shared by max-min fairness (the
    /// flow-level model SimGrid uses); see `fair` for its rules.
    Fair,
}

impl Sharing {
    pub const ALL: [Sharing; 2] = [Sharing::Serial, Sharing::Fair];

    pub fn name(self) -> &'static str {
        match self {
            Sharing::Serial => "serial",
            Sharing::Fair => "fair",
        }
    }

    fn run(self, topo: &Topology, work: &Workload, room: Allowance) -> Result<SimResult> {
        match self {
            Sharing::Serial => engine::run(topo, work, room),
            Sharing::Fair => fair::run(topo, work, room),
        }
    }
}

impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Sharing {
    type Err = Error;

    fn from_str(s: &str) -> Result<Sharing> {
        Sharing::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::Unknown {
                what: "link sharing",
                given: s.to_string(),
                known: Sharing::ALL.iter().map(|k| k.name()).collect(),
            })
    }
}

/// Simulates `messages` on `topo`, one message per link at a time.
pub fn simulate_messages(topo: &Topology, messages: &[Message]) -> Result<SimResult> {
    simulate_messages_with(topo, messages, Sharing::Serial)
}

/// Simulates `messages` on `topo`, links shared as `sharing` says.
pub fn simulate_messages_with(
    topo: &Topology,
    messages: &[Message],
    sharing: Sharing,
) -> Result<SimResult> {
    let room = admit(topo, messages.len(), 0)?;
    sharing.run(topo, &Workload::from_messages(topo, messages)?, room)
}

/// Simulates a schedule: each transfer becomes a message that depends on every transfer
/// that brought the same chunk to its source before it started (by the schedule's order).
/// One message per link at a time.
pub fn simulate_schedule(topo: &Topology, schedule: &Schedule) -> Result<SimResult> {
    simulate_schedule_with(topo, schedule, Sharing::Serial)
}

/// `simulate_schedule`, links shared as `sharing` says.
pub fn simulate_schedule_with(
    topo: &Topology,
    schedule: &Schedule,
    sharing: Sharing,
) -> Result<SimResult> {
    let room = admit_schedule(topo, schedule)?;
    sharing.run(topo, &Workload::from_schedule(topo, schedule)?, room)
}

/// [`simulate_schedule`], also telling when each hop of each transfer started: what
/// relaying a schedule hop by hop needs to run as the simulator ran it
/// (`baselines::relay`).
pub(crate) fn simulate_schedule_hops(
    topo: &Topology,
    schedule: &Schedule,
) -> Result<(SimResult, HopStarts)> {
    let room = admit_schedule(topo, schedule)?;
    engine::run_with_hops(topo, &Workload::from_schedule(topo, schedule)?, room)
}

/// [`admit`] for a schedule's transfers.
fn admit_schedule(topo: &Topology, schedule: &Schedule) -> Result<Allowance> {
    let in_switch = schedule.transfers.iter().filter(|t| t.in_switch).count();
    admit(topo, schedule.transfers.len(), in_switch)
}

/// Refuses a simulation of `messages` messages, `in_switch` of them in-switch, whose
/// state would not fit the memory limit; the room left for its routes.
fn admit(topo: &Topology, messages: usize, in_switch: usize) -> Result<Allowance> {
    let limit = MemoryLimit::default();
    let estimate = memory::simulation(topo, messages as u64)
        .saturating_add(memory::in_switch(messages as u64, in_switch as u64));
    limit.admit(estimate, || {
        format!("simulating {messages} messages on {}", topo.name())
    })?;
    Ok(Allowance::new(limit, estimate))
}

/// The messages of a schedule, with data dependencies taken from its transfer order: the
/// same messages `simulate_schedule` runs, spelled out one dependency list per message.
/// A message has no in-switch flag: `simulate_schedule` moves an in-switch operation's
/// transfers as one (`Transfer::in_switch`), `simulate_messages` moves these one by one.
pub fn schedule_messages(schedule: &Schedule) -> Vec<Message> {
    let deps = Dependencies::of_schedule(schedule);
    schedule
        .transfers
        .iter()
        .enumerate()
        .map(|(i, t)| Message {
            src: t.src(),
            dst: t.dst(),
            bytes: schedule.chunk_bytes,
            deps: deps.awaited(i).iter().map(|&d| d as usize).collect(),
        })
        .collect()
}
