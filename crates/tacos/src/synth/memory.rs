//! What synthesis holds, estimated from the request's figures before it starts
//! (`crate::budget` holds the estimates to the memory limit).

use super::{port_shape, PortShape};
use crate::budget::mul;
use crate::collective::{memory::Shape, CollectiveKind, CollectiveSpec};
use crate::schedule::memory::{one_speed, TRANSFER};
use crate::topology::{NpuId, Topology};
use std::collections::VecDeque;

/// Bytes the matcher keeps per link of a held synthesis: the transfer it carries and when
/// it lands (24), its costs (16), its reservations' cursor and wake-up (16), its pool's
/// header and slot (28) and the pool's first allocation (16 with the allocator's).
const LINK_STATE: u64 = 100;

/// Bytes synthesizing `specs` together on `topo` holds at its peak (the collectives
/// themselves excluded): the matcher's per (NPU, chunk) and per transfer state, for
/// All-Reduce its reduction phase and the three copy phases it runs side by side.
pub fn synthesis(topo: &Topology, specs: &[CollectiveSpec], planned: bool) -> u64 {
    let n = topo.npus() as u64;
    let links = topo.links().len() as u64;
    let alive = topo.alive_npus().len();
    let hops = mean_hops(topo);
    let mut chunks = 0u64;
    let mut transfers = 0u64;
    let mut copy_phases = 1;
    let mut relayed = false;
    for spec in specs {
        let s = Shape::of(spec, alive);
        chunks = chunks.saturating_add(s.chunks);
        let t = if s.relayed {
            relayed = true;
            mul(s.deliveries, hops)
        } else {
            s.deliveries
        };
        transfers = transfers.saturating_add(t);
        if spec.kind == CollectiveKind::AllReduce {
            copy_phases = 3;
        }
    }
    let ports = if relayed { None } else { port_shape(topo) };
    let (matched_links, _) = matcher_links(topo, ports);
    // Planned, chunks with one target each travel as one copy on a path and chunks copied
    // to every NPU along one tree: nothing is ever replaced, so no time per (NPU, chunk)
    // is kept.
    let one_copy = planned;
    let mut matcher =
        matcher_state(topo, chunks, ports, one_copy).saturating_add(mul(matched_links, LINK_STATE));
    // Per transfer: its record (`TRANSFER`, reserved once, with growth slack where relays add
    // hops), whether it was dropped (1), and pool entries offered over each outgoing link
    // (4 x degree x 2; through switches matched by port, each channel with a pool); the
    // kept ones are filtered in place.
    let degree = ports.map_or(links, |p| p.channels) / n.max(1) + 1;
    let record = if relayed { 2 * TRANSFER } else { TRANSFER };
    matcher = matcher.saturating_add(mul(transfers, record + 8 * degree + 1));
    if relayed {
        // Distances from every target to every NPU, per chunk the best so far, and where
        // chunks have one target their planned paths: while they are planned, a trip (48),
        // its place in the order (8) and a path of its own (its header and allocation, 40,
        // and 4 a hop); then 5 a chunk and 4 a hop.
        matcher = matcher
            .saturating_add(mul(mul(n, n), 8))
            .saturating_add(mul(chunks, 12 + 101 + 8 * hops));
    }
    // Phases running side by side, plus the finished transfers grouped per collective
    // where several lists are merged (one collective's single list is moved).
    let merged = if specs.len() > 1 || copy_phases > 1 {
        mul(transfers, 2 * TRANSFER)
    } else {
        0
    };
    mul(matcher, copy_phases).saturating_add(merged)
}

/// Bytes planned trees for `spec` hold (`synth::trees`, a trial of `pipeline::search`
/// with `SynthOptions::trees`): per chunk and NPU its tree's link in and the NPUs below it
/// (8), and while they are planned a link's load and a candidate link per link (32).
pub fn trees(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let chunks = Shape::of(spec, topo.alive_npus().len()).chunks;
    mul(mul(chunks, topo.npus() as u64), 8).saturating_add(mul(topo.links().len() as u64, 32))
}

/// Bytes a streamed synthesis of `spec` (`synth::synthesize_streamed`) holds at its
/// peak, the collective excluded: the matcher's per (NPU, chunk) and per chunk state, per
/// link (through switches, per channel) the transfer in flight (with those settled behind an earlier one, about as many),
/// and the pools of chunks offered over each link. A pool holds a chunk at most once;
/// measured at their peak, the pools hold about 2 to 2.5 x links x chunks / mean hops
/// entries (meshes of 256 to 4,096 NPUs, a torus, a hypercube: a chunk waits in a link's
/// pool while the wave that spreads it passes), counted here as 4 x, with a vector's
/// growth slack.
pub fn streamed_synthesis(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let alive = topo.alive_npus().len() as u64;
    let chunks = Shape::of(spec, alive as usize).chunks;
    // Through switches the matcher's links are channels, one per pair of NPUs a route
    // joins (`synth::fabric`), except that large star groups are matched by port: a
    // gate per member, and no pool.
    let ports = port_shape(topo);
    let (links, pooled_links) = matcher_links(topo, ports);
    let offers = mul(pooled_links, chunks);
    let pooled = match ports {
        // Measured at their peak (rail-optimized clusters of 1,024 to 4,096 GPUs, the
        // vectors' capacity), the pools of the small groups' channels hold up to a
        // quarter of the chunks each (a backlog at NVSwitch ports nearly as busy as the
        // rails); with the growth slack counted below, half.
        Some(_) => offers / 4,
        None => (mul(offers, 4) / mean_hops(topo)).min(offers),
    };
    matcher_state(topo, chunks, ports, false)
        .saturating_add(mul(links, 2 * TRANSFER + 64))
        .saturating_add(mul(pooled, 2 * 4))
}

/// The links the matcher matches on `topo` and those of them with a pool: through switches
/// its links are channels, one per pair of NPUs a route joins (`synth::fabric`), except
/// that large star groups are matched by port (`ports`): a gate per member, and no pool.
fn matcher_links(topo: &Topology, ports: Option<PortShape>) -> (u64, u64) {
    match ports {
        Some(p) => (p.channels + p.gates, p.channels),
        None if topo.has_switches() => {
            let alive = topo.alive_npus().len() as u64;
            let pairs = mul(alive, alive.saturating_sub(1));
            (pairs, pairs)
        }
        None => (topo.links().len() as u64, topo.links().len() as u64),
    }
}

/// Bytes of the matcher's state per (NPU, chunk) and per chunk for `chunks` chunks on
/// `topo`: whether each NPU holds each chunk (two bits, one in each of two layouts) and
/// wants it (a bit, rounded up with them to a byte), and where links differ in cost when
/// it was got (8) and the fast-path estimate (8); per chunk its task and release (48 +
/// 24). Through switches matched by port (`ports`), those two tables are kept only where
/// the channels with pools differ in cost, and each large group has a bit per NPU; where
/// every chunk travels as `one_copy` (planned paths), neither is (no relays, no copies
/// replaced).
fn matcher_state(topo: &Topology, chunks: u64, ports: Option<PortShape>, one_copy: bool) -> u64 {
    let states = mul(topo.npus() as u64, chunks);
    let uniform = one_copy || one_speed(topo) || ports.is_some_and(|p| p.uniform);
    let per_state = if uniform { 1 } else { 17 };
    let groups = ports.map_or(0, |p| {
        mul(p.groups, (topo.npus() as u64).div_ceil(8)).saturating_add(mul(p.gates, 64))
    });
    mul(states, per_state)
        .saturating_add(mul(chunks, 72))
        .saturating_add(groups)
}

/// The mean hop count of shortest paths, from a few NPUs spread over the topology: how
/// many transfers a relayed chunk takes.
pub(crate) fn mean_hops(topo: &Topology) -> u64 {
    let alive = topo.alive_npus();
    let samples = 4.min(alive.len());
    let mut total = 0u64;
    let mut pairs = 0u64;
    for i in 0..samples {
        let src = alive[i * alive.len() / samples];
        for d in hops_from(topo, src)
            .into_iter()
            .flatten()
            .filter(|&d| d > 0)
        {
            total += d;
            pairs += 1;
        }
    }
    total.div_ceil(pairs.max(1)).max(1)
}

/// Hops from `src` to every NPU (None where none leads).
fn hops_from(topo: &Topology, src: NpuId) -> Vec<Option<u64>> {
    let mut hops = vec![None; topo.vertices()];
    hops[src] = Some(0);
    let mut queue = VecDeque::from([src]);
    while let Some(u) = queue.pop_front() {
        let next = hops[u].map(|h| h + 1);
        for l in topo.out_links(u) {
            let v = topo.link(l).dst;
            if hops[v].is_none() {
                hops[v] = next;
                queue.push_back(v);
            }
        }
    }
    hops
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a rail-optimized cluster large rails are matched by port: nothing is held per
    /// pair of GPUs, so with K=1 the streamed estimate grows as GPUs x chunks (the pools
    /// of each node's NVSwitch channels, the per-(GPU, chunk) bits): about 4x for twice
    /// the nodes, where a channel per pair would grow it 8x.
    #[test]
    fn a_rail_cluster_matched_by_port_grows_as_gpus_times_chunks() {
        let estimate = |nodes: usize| {
            let spec_text = format!("preset:dgx-h100,nodes={nodes},spine=8,oversub=2");
            let topo =
                crate::topology::parse_spec(&spec_text, &crate::topology::SpecDefaults::default())
                    .unwrap();
            assert!(
                port_shape(&topo).is_some(),
                "{spec_text}: rails matched by port"
            );
            let spec = CollectiveSpec {
                kind: CollectiveKind::AllGather,
                root: None,
                npus: (0..topo.npus()).collect(),
                chunks_per_npu: 1,
                size_bytes: 1 << 30,
            };
            streamed_synthesis(&topo, &spec) as f64
        };
        let ratio = estimate(256) / estimate(128);
        assert!((3.5..4.5).contains(&ratio), "{ratio}");
    }

    #[test]
    fn hops_average_over_the_other_npus() {
        // A 4-NPU ring: from any NPU, hops 1, 2, 1 to the others: mean 4/3, rounded up.
        let ring = crate::topology::parse_spec("ring:4", &Default::default()).unwrap();
        assert_eq!(mean_hops(&ring), 2);
    }
}
