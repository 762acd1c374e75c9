//! Re-timing a schedule of reduction trees without changing which transfers it makes.
//!
//! A time-reversed schedule is as late as possible: every chunk's reduction tree finishes
//! at the very end. Re-timed, a chunk's reduction completes as soon as its tree allows, so
//! an All-Reduce can start gathering it early. In a reduction tree every NPU sends a chunk
//! once, after all of that chunk's transfers into it have arrived; both re-timings keep
//! those dependencies and one chunk per link at a time, so correctness and freedom from
//! contention are kept.

use super::fabric::Fabric;
use crate::collective::ChunkId;
use crate::error::Result;
use crate::schedule::{later, Transfer};
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Moves every transfer as early as its inputs and its links allow (every physical link
/// of its route, on a fabric), keeping each link's order: nothing starts later than before.
pub(super) fn compact(fabric: &Fabric<'_>, transfers: &mut [Transfer]) {
    let tree = Tree::new(fabric.view.npus(), transfers);
    let mut order: Vec<usize> = (0..transfers.len()).collect();
    order.sort_by_key(|&i| transfers[i].start_ps);
    let mut link_free = vec![0; fabric.physical_links()];
    let mut ready = vec![0; transfers.len()];
    for i in order {
        let t = &mut transfers[i];
        let took = t.end_ps - t.start_ps;
        let mut start = ready[i];
        fabric.for_each_link(t.src(), t.dst(), |l| start = start.max(link_free[l]));
        t.start_ps = start;
        t.end_ps = t.start_ps + took;
        fabric.for_each_link(t.src(), t.dst(), |l| link_free[l] = start + took);
        for &d in tree.dependents(t.dst(), t.chunk()) {
            ready[d] = ready[d].max(t.end_ps);
        }
    }
}

/// List scheduling: each link, whenever it is free, starts the transfer whose inputs
/// arrived first (ties to the earlier original start), so a chunk moves on as soon as its
/// partial sums are in, whatever order the links had before. Times may grow, so a time
/// past the clock is an error. Transfers use one link each (no routes through switches).
pub(super) fn ready_first(topo: &Topology, transfers: &mut [Transfer]) -> Result<()> {
    let tree = Tree::new(topo.npus(), transfers);
    let link: Vec<LinkId> = transfers
        .iter()
        .map(|t| {
            topo.link_between(t.src(), t.dst())
                .expect("transfers use links of the topology")
        })
        .collect();
    let mut waiting: Vec<usize> = transfers
        .iter()
        .map(|t| tree.inputs(t.src(), t.chunk()))
        .collect();
    let mut ready = vec![0; transfers.len()];
    let mut queues: Vec<BinaryHeap<Reverse<(Picos, Picos, usize)>>> =
        vec![BinaryHeap::new(); topo.links().len()];
    let mut link_busy = vec![false; topo.links().len()];
    let mut ends: BinaryHeap<Reverse<(Picos, usize)>> = BinaryHeap::new();
    let mut touched: Vec<LinkId> = Vec::new();
    for (i, t) in transfers.iter().enumerate() {
        if waiting[i] == 0 {
            queues[link[i]].push(Reverse((0, t.start_ps, i)));
            touched.push(link[i]);
        }
    }
    let mut now = 0;
    loop {
        for &link in &touched {
            if link_busy[link] {
                continue;
            }
            if let Some(Reverse((_, _, i))) = queues[link].pop() {
                let t = &mut transfers[i];
                let took = t.end_ps - t.start_ps;
                t.start_ps = now;
                t.end_ps = later(now, took, || {
                    format!("synthesis: re-timed reduction of chunk {}", t.chunk())
                })?;
                link_busy[link] = true;
                ends.push(Reverse((t.end_ps, i)));
            }
        }
        touched.clear();
        let Some(&Reverse((t, _))) = ends.peek() else {
            break;
        };
        now = t;
        while let Some(&Reverse((t, i))) = ends.peek() {
            if t != now {
                break;
            }
            ends.pop();
            link_busy[link[i]] = false;
            touched.push(link[i]);
            let (dst, chunk) = (transfers[i].dst(), transfers[i].chunk());
            for &d in tree.dependents(dst, chunk) {
                ready[d] = ready[d].max(now);
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    queues[link[d]].push(Reverse((ready[d], transfers[d].start_ps, d)));
                    touched.push(link[d]);
                }
            }
        }
    }
    Ok(())
}

/// The dependency structure of reduction trees, in flat arrays indexed by
/// `npu * chunks + chunk`.
struct Tree {
    chunks: usize,
    /// Transfers leaving each (NPU, chunk): `sends[send_start[i]..send_start[i + 1]]`.
    send_start: Vec<usize>,
    sends: Vec<usize>,
    /// How many transfers arrive at each (NPU, chunk).
    inputs: Vec<u32>,
}

impl Tree {
    fn new(npus: usize, transfers: &[Transfer]) -> Tree {
        let chunks = transfers.iter().map(|t| t.chunk() + 1).max().unwrap_or(0);
        let slots = npus * chunks;
        let mut send_start = vec![0; slots + 1];
        let mut inputs = vec![0; slots];
        for t in transfers {
            send_start[t.src() * chunks + t.chunk() + 1] += 1;
            inputs[t.dst() * chunks + t.chunk()] += 1;
        }
        for i in 0..slots {
            send_start[i + 1] += send_start[i];
        }
        let mut fill = send_start.clone();
        let mut sends = vec![0; transfers.len()];
        for (i, t) in transfers.iter().enumerate() {
            let slot = t.src() * chunks + t.chunk();
            sends[fill[slot]] = i;
            fill[slot] += 1;
        }
        Tree {
            chunks,
            send_start,
            sends,
            inputs,
        }
    }

    /// How many transfers arrive at (`npu`, `chunk`).
    fn inputs(&self, npu: NpuId, chunk: ChunkId) -> usize {
        self.inputs[npu * self.chunks + chunk] as usize
    }

    /// Transfers that wait for everything arriving at (`npu`, `chunk`).
    fn dependents(&self, npu: NpuId, chunk: ChunkId) -> &[usize] {
        let slot = npu * self.chunks + chunk;
        &self.sends[self.send_start[slot]..self.send_start[slot + 1]]
    }
}
