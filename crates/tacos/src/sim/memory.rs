//! What the simulator holds, estimated before it starts (`crate::budget` holds the
//! estimates to the memory limit).

use crate::budget::mul;
use crate::collective::{memory::Shape, CollectiveSpec};
use crate::schedule::memory::sweep_state;
use crate::topology::Topology;

/// Bytes the streamed simulation (`sim::replay_stream`) holds for a stream of `spec` on
/// `topo`, nothing per transfer: a simulated time per (NPU, chunk), 4 bytes while times
/// fit (it asks again before widening them); per link its free time, last planned start,
/// busy time and bytes, and an arrival in flight (48 with a heap's slack); the route
/// trees as every sweep holds them (`sweep_state`).
pub fn replay(spec: &CollectiveSpec, topo: &Topology) -> u64 {
    let s = Shape::of(spec, topo.npus());
    mul(mul(s.chunks, topo.npus() as u64), 4)
        .saturating_add(mul(topo.links().len() as u64, 40 + 48))
        .saturating_add(sweep_state(topo, 0))
}

/// Bytes the simulator holds for `messages` messages on `topo`: per message its endpoints,
/// dependencies and timing, with queues and events, and per link its state. What grows
/// with the routes, known only as they are found, is taken from an [`Allowance`](crate::budget::Allowance) then
/// ([`ROUTE_LINK`] per link of each route, and the trees routes are read from).
pub fn simulation(topo: &Topology, messages: u64) -> u64 {
    mul(messages, 120).saturating_add(mul(topo.links().len() as u64, 96))
}

/// Bytes the simulator holds beside `simulation`'s for `messages` messages of which
/// `in_switch` are in-switch (`sim::groups`): where there are any, each message's group
/// (4), and per in-switch message its group key and index (40), its place among the
/// group's members (4) and its links in the group's (8), with the key's entry in the map
/// that numbers groups (48) and growth slack (128 in all).
pub fn in_switch(messages: u64, in_switch: u64) -> u64 {
    match in_switch {
        0 => 0,
        _ => mul(messages, 4).saturating_add(mul(in_switch, 128)),
    }
}

/// Bytes the simulator holds per link of a message's route: its entry in the routes (4,
/// twice with a vector's growth slack), the message's place in the link's queue (16, twice
/// with the queue's slack) and in a schedule's planned order (5).
pub const ROUTE_LINK: u64 = 45;
