//! What a simulation tells a user: collective time, algorithm and bus bandwidth
//! (nccl-tests' conventions), and how busy each link was.

use super::SimResult;
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::topology::{NpuId, Topology};
use crate::units::{algbw_gbps, Picos};
use serde::Serialize;

/// nccl-tests' bus bandwidth factor: busbw = algbw x factor, so that busbw compares with
/// a link's bandwidth whatever the collective. n is the number of ranks.
pub fn bus_factor(kind: CollectiveKind, n: usize) -> f64 {
    let n = n.max(1) as f64;
    match kind {
        CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveKind::Broadcast | CollectiveKind::Reduce => 1.0,
        CollectiveKind::AllGather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::AllToAll
        | CollectiveKind::Gather
        | CollectiveKind::Scatter => (n - 1.0) / n,
    }
}

/// One link's load during a simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkLoad {
    pub src: NpuId,
    pub dst: NpuId,
    pub busy_ps: Picos,
    pub bytes: f64,
    /// Busy time over the collective time (0 when the collective took no time).
    pub utilization: f64,
}

/// A simulation's figures for one collective.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    pub time_ps: Picos,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Indexed like `Topology::links()`.
    pub links: Vec<LinkLoad>,
}

impl SimReport {
    pub fn new(topo: &Topology, collective: &CollectiveSpec, result: &SimResult) -> SimReport {
        let algbw = algbw_gbps(collective.size_bytes, result.time_ps);
        let links = topo
            .links()
            .iter()
            .enumerate()
            .map(|(id, l)| LinkLoad {
                src: l.src,
                dst: l.dst,
                busy_ps: result.link_busy_ps[id],
                bytes: result.link_bytes[id],
                utilization: if result.time_ps == 0 {
                    0.0
                } else {
                    result.link_busy_ps[id] as f64 / result.time_ps as f64
                },
            })
            .collect();
        SimReport {
            time_ps: result.time_ps,
            algbw_gbps: algbw,
            busbw_gbps: algbw * bus_factor(collective.kind, collective.npus.len()),
            links,
        }
    }

    /// The links in decreasing order of busy time (ties: link order).
    pub fn busiest_links(&self) -> Vec<&LinkLoad> {
        let mut v: Vec<&LinkLoad> = self.links.iter().collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.busy_ps));
        v
    }
}
