//! What checking a schedule holds, estimated before it starts (`crate::budget` holds the
//! estimates to the memory limit).

use crate::budget::{mul, ALLOCATION};
use crate::collective::{memory::Shape, CollectiveSpec};
use crate::topology::Topology;

/// Bytes of one transfer record (`super::Transfer`).
pub const TRANSFER: u64 = std::mem::size_of::<super::Transfer>() as u64;

/// Whether every transfer of one chunk size takes equally long on `topo`: no switches
/// (routes differ in length), every link of the same latency and bandwidth.
pub(crate) fn one_speed(topo: &Topology) -> bool {
    !topo.has_switches()
        && topo.links().windows(2).all(|w| {
            (w[0].latency_us, w[0].bandwidth_gbps) == (w[1].latency_us, w[1].bandwidth_gbps)
        })
}

/// Bytes the checker holds for a schedule of `transfers` transfers of `spec` on `topo`:
/// the contents (copying collectives: a bit per (NPU, chunk); combining ones, a chunk at a
/// time: a bit per contributor on each NPU, with the data of transfers in flight, at most
/// about one per link or NPU, and the transfers grouped by chunk, 4 bytes each), and what
/// every sweep holds (`sweep_state`).
pub fn check(spec: &CollectiveSpec, topo: &Topology, transfers: u64) -> u64 {
    let s = Shape::of(spec, topo.npus());
    let npus = topo.npus() as u64;
    let links = topo.links().len() as u64;
    let contents = if spec.kind.combining() {
        let row = 8 * spec.npus.len().div_ceil(64) as u64;
        let in_flight = mul(links.max(npus), row + 4 * ALLOCATION);
        mul(npus, row + 8)
            .saturating_add(in_flight)
            .saturating_add(mul(s.chunks, 16))
            .saturating_add(mul(transfers, 4))
    } else {
        mul(s.chunks, npus).div_ceil(8)
    };
    contents.saturating_add(sweep_state(topo, transfers))
}

/// Bytes the stream checker holds for a stream of `spec` on `topo`, nothing per transfer:
/// a bit per (NPU, chunk) (combining collectives, read as reduction trees: two, whether
/// the NPU sent its partial sum and whether it holds the whole sum, and per chunk a
/// 4-byte count of the reductions landed) and what every sweep holds (`sweep_state`).
pub fn check_streamed(spec: &CollectiveSpec, topo: &Topology) -> u64 {
    let s = Shape::of(spec, topo.npus());
    let states = mul(s.chunks, topo.npus() as u64);
    let contents = if spec.kind.combining() {
        mul(states, 2).div_ceil(8).saturating_add(mul(s.chunks, 4))
    } else {
        states.div_ceil(8)
    };
    contents.saturating_add(sweep_state(topo, 0))
}

/// Bytes every checker's sweep holds beside the contents: the last transfer on each link
/// (24; 32 more for its in-switch group, once there is one) and the transfers in flight, at most one per link (32 with a queue's growth slack),
/// where transfers differ in duration a 4-byte index per transfer for each of the start
/// and end orders, and through switches a route tree per NPU.
pub(crate) fn sweep_state(topo: &Topology, transfers: u64) -> u64 {
    let links = topo.links().len() as u64;
    let orders = if one_speed(topo) { 0 } else { 8 };
    mul(links, 24 + 32 + 32)
        .saturating_add(mul(transfers, orders))
        .saturating_add(route_trees(topo))
}

/// Bytes of a route tree per NPU sending through switches: what each holds for its
/// vertices (the first live NPU's stands for every NPU's), two allocations and its slot.
pub fn route_trees(topo: &Topology) -> u64 {
    match (0..topo.npus()).find(|&n| !topo.is_failed(n)) {
        Some(first) if topo.has_switches() => {
            let held = topo.route_tree(first).held_bytes() as u64;
            mul(topo.npus() as u64, held + 64 + 2 * ALLOCATION)
        }
        _ => 0,
    }
}
