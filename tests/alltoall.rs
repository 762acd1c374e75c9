//! All-to-All with planned paths (`synth::paths`): every chunk's way is chosen before
//! matching so the links share the load evenly, and the schedules come within a few
//! percent of bounds worked out here by hand.

mod common;

use common::synth_checked;
use std::collections::HashMap;
use tacos::collective::CollectiveKind;
use tacos::pipeline::{self, Chunks, Request};
use tacos::schedule::{check, Schedule};
use tacos::sim::simulate_schedule;
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const GIB: u64 = 1 << 30;

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

/// The All-to-All of 1 GiB a user's `tacos synth -c alltoall -k K` keeps (the default
/// seeds), checked, and its simulated time in us.
fn searched(t: &Topology, chunks: Chunks) -> (Schedule, f64) {
    let request = Request::new(CollectiveKind::AllToAll, GIB);
    let seeds = pipeline::default_seeds(t, &request, chunks) as u64;
    let options = pipeline::Options {
        chunks,
        seeds: (0..seeds).collect(),
        ..pipeline::Options::default()
    };
    let kept = pipeline::schedule(t, &request, &options).unwrap().kept;
    let schedule = kept.schedule().clone();
    check(&schedule, t).unwrap();
    let time_ps = simulate_schedule(t, &schedule).unwrap().time_ps;
    (schedule, time_ps as f64 / 1e6)
}

/// On rail-optimized nodes every chunk between two nodes crosses one NIC each way, and
/// each node's NICs carry all it sends: the time is at least (NPUs per node x NPUs
/// elsewhere) pieces over the node's NIC bandwidth. With one chunk per piece, the planned
/// paths spread the pieces over the NICs evenly (some seed of the default search finds
/// the even spread where a seed alone may leave one NIC a piece over), within 1% of it.
#[test]
fn multi_node_fabrics_come_within_a_percent_of_their_nics() {
    // (spec, NPUs per node, nodes, one NIC's GB/s)
    for (spec, per_node, nodes, nic_gbps) in [
        ("preset:dgx-a100,nodes=2", 8, 2, 25.0),
        ("preset:dgx-h100,nodes=2", 8, 2, 50.0),
        ("preset:dgx-h100,nodes=4", 8, 4, 50.0),
    ] {
        let t = topo(spec);
        let npus = per_node * nodes;
        let piece = GIB as f64 / npus as f64;
        let sent = (per_node * (npus - per_node)) as f64 * piece;
        let bound_us = sent / (per_node as f64 * nic_gbps * 1e3);
        let (schedule, time_us) = searched(&t, Chunks::Fixed(1));
        assert!(
            time_us <= bound_us / 0.99,
            "{spec}: {time_us} us against the NICs' {bound_us} us"
        );
        // Every NIC carries its node's share: the pieces leaving a node, one transfer
        // each between nodes, spread evenly over its NPUs.
        let node = |npu: usize| npu / per_node;
        let mut out: HashMap<usize, usize> = HashMap::new();
        for tr in schedule
            .transfers
            .iter()
            .filter(|t| node(t.src()) != node(t.dst()))
        {
            *out.entry(tr.src()).or_default() += 1;
        }
        let even = npus - per_node;
        for npu in 0..npus {
            assert_eq!(out.get(&npu), Some(&even), "{spec}: NPU {npu}'s NIC");
        }
    }
}

/// On a torus every piece crosses at least its hop distance: 4x4, each NPU's 15 pieces
/// cross 32 hops in all (per dimension 0 + 1 + 2 + 1, times the 4 rows, for both), so the
/// 64 links of 50 GB/s carry 16 x 32 pieces of 1/16 GiB at least: 10,737 us. Balanced
/// shortest paths take one transfer per hop of each piece's distance at every K, and the
/// default search comes within 5% of the bound.
#[test]
fn a_torus_comes_within_five_percent_of_its_traffic() {
    let t = topo("torus:4x4");
    let bound_us = (16 * 32) as f64 * (GIB as f64 / 16.0) / (64.0 * 50.0 * 1e3);
    for k in [1, 2, 4] {
        let (schedule, _) = synth_checked(&t, CollectiveKind::AllToAll, k, GIB, 0);
        assert_eq!(schedule.transfers.len(), 16 * 32 * k, "K={k}");
    }
    let request = Request::new(CollectiveKind::AllToAll, GIB);
    let (_, time_us) = searched(&t, pipeline::default_chunks(&t, &request));
    assert!(
        time_us <= bound_us / 0.95,
        "{time_us} us against {bound_us} us"
    );
}

/// A dragonfly's global links carry every piece between their groups: 4 x 9 at 200 GB/s
/// a global link, each group pair's 16 pieces of 1/36 GiB over its one link take 2,386 us.
/// Planned paths keep each piece on its own group pair's link (a detour over a third group
/// would load two global links), so the time comes within 4% of that.
#[test]
fn a_dragonfly_keeps_pieces_on_their_own_global_links() {
    let t = topo("dragonfly:4x9,bw=400:200");
    let bound_us = 16.0 * (GIB as f64 / 36.0) / (200.0 * 1e3);
    let (schedule, time_us) = searched(&t, Chunks::Fixed(1));
    assert!(
        time_us <= bound_us / 0.96,
        "{time_us} us against {bound_us} us"
    );
    let group = |npu: usize| npu / 4;
    let crossings = schedule
        .transfers
        .iter()
        .filter(|t| group(t.src()) != group(t.dst()))
        .count();
    // Each of the 36 x 32 pieces between groups crosses exactly one global link.
    assert_eq!(crossings, 36 * 32);
}
