//! The in-switch candidate (`Baseline::InSwitch`): sums and multicasts inside the switches
//! that reduce (NVLS), checked on the times the simulator gives it, held to the bounds,
//! kept by the schedule search where it is fastest and never by the MSCCL XML search.

use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::{self, baseline, Chunks, Options, Request};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const GIB: u64 = 1 << 30;

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The in-switch schedule's time and the best bound for `kind` at `k` chunks per NPU.
fn timed(t: &Topology, kind: CollectiveKind, k: usize) -> (f64, f64) {
    let request = Request::new(kind, GIB);
    let checked = baseline(t, &request, Baseline::InSwitch, k)
        .unwrap_or_else(|e| panic!("{} {kind}: {e}", t.name()));
    let collective = Collective::new(t, checked.schedule().collective.clone()).unwrap();
    let bound = Bounds::new(t, &collective).best_ps() as f64;
    (checked.report().collective_time_ps as f64, bound)
}

/// One H100 node: 8 GPUs with 450 GB/s ports, 0.7 us through the switch. With the switch
/// summing and multicasting, an All-Reduce's port carries the buffer once each way: at
/// 1 GiB, 1,073,741,824 B / 450 GB/s = 2386.09 us, the ingress bound, where any algorithm
/// without it moves 2 x 7/8 of the buffer through each port (4175.7 us). An owner's K
/// chunks go one after another, the sum of one into it beside the multicast of the one
/// before from it (they hold its port in opposite directions), so 8 owners take 8 (K + 1)
/// chunk times: at K = 8, 72 x (0.7 us + 16 MiB / 450 GB/s) = 2734.6 us.
#[test]
fn one_h100_node_reduces_in_its_switch_near_the_bound() {
    let t = topo("preset:hgx-h100");
    let (time, bound) = timed(&t, CollectiveKind::AllReduce, 8);
    assert!((2_386.0e6..2_387.0e6).contains(&bound), "bound {bound} ps");
    let chunk_us = 0.7 + (16u64 << 20) as f64 / 450e3;
    let hand = 72.0 * chunk_us * 1e6;
    assert!(
        (time - hand).abs() < 1e-4 * hand,
        "{time} ps, by hand {hand} ps"
    );
    assert!(
        time >= bound && time < 4_175.0e6,
        "{time} ps against {bound} ps"
    );
    // A Broadcast's root sends the buffer up once, however many receive it.
    let (time, bound) = timed(&t, CollectiveKind::Broadcast, 2);
    assert!(
        time >= bound && time <= 1.01 * bound,
        "{time} ps against {bound} ps"
    );
}
/// Two and four H100 nodes on rails: an All-Reduce's every byte crosses between nodes
/// 2 (N - 1) times over the 400 GB/s of NICs leaving each of the N nodes (the grouped
/// traffic bound: 2684.35 us on 2 nodes, 4026.53 us on 4 at 1 GiB). The in-switch schedule
/// sums in each node, exchanges along the rails and multicasts; a Broadcast passes each
/// chunk along its rail from node to node.
#[test]
fn h100_nodes_reduce_in_their_switches_and_exchange_along_rails() {
    for (nodes, traffic_us) in [(2, 2684.35), (4, 4026.53)] {
        let t = topo(&format!("preset:dgx-h100,nodes={nodes}"));
        let (time, bound) = timed(&t, CollectiveKind::AllReduce, 8);
        let what = format!("{nodes} nodes: {time} ps against the bound {bound} ps");
        assert!((bound - traffic_us * 1e6).abs() < 0.01e6, "{what}");
        assert!(time >= bound && time <= 1.25 * bound, "{what}");
        let (time, bound) = timed(&t, CollectiveKind::Broadcast, 8);
        let what = format!("{nodes} nodes: {time} ps against the bound {bound} ps");
        assert!(time >= bound && time <= 1.15 * bound, "{what}");
    }
}

#[test]
fn switches_that_do_not_reduce_have_no_in_switch_schedule() {
    let t = topo("preset:dgx-a100");
    let request = Request::new(CollectiveKind::AllReduce, GIB);
    let e = baseline(&t, &request, Baseline::InSwitch, 1).unwrap_err();
    assert!(e.to_string().contains("no switch that reduces"), "{e}");
}

/// Where a switch reduces, NPU-to-NPU message counts say nothing of what ports carry:
/// one node has no traffic bound; between nodes, whose NVSwitches sit inside them, the
/// count of messages between nodes still holds: 2 (2 - 1) buffers over the 2 x 400 GB/s
/// leaving the two nodes, 2684.35 us at 1 GiB.
#[test]
fn the_traffic_bound_counts_only_between_what_no_reducing_switch_joins() {
    let traffic = |spec: &str| {
        let t = topo(spec);
        let c = Collective::over_all(&t, CollectiveKind::AllReduce, None, 1, GIB).unwrap();
        Bounds::new(&t, &c).traffic_ps
    };
    assert_eq!(traffic("preset:hgx-h100"), 0);
    assert!(traffic("preset:hgx-a100") > 0);
    let two = traffic("preset:dgx-h100,nodes=2") as f64;
    assert!((two - 2684.35e6).abs() < 0.01e6, "{two} ps");
}

/// The schedule search keeps the in-switch schedule on one H100 node; the MSCCL XML search,
/// whose files have no in-switch operation, never tries it.
#[test]
fn the_schedule_search_keeps_it_and_the_xml_search_leaves_it_out() {
    let t = topo("preset:hgx-h100");
    let request = Request::new(CollectiveKind::AllReduce, GIB);
    let options = Options {
        chunks: Chunks::UpTo(8),
        ..Options::default()
    };
    let found = pipeline::schedule(&t, &request, &options).unwrap();
    assert_eq!(found.kept.baseline(), Some(Baseline::InSwitch));
    let program = pipeline::program(&t, &request, &options).unwrap();
    assert_ne!(program.kept.checked().baseline(), Some(Baseline::InSwitch));
    assert!(program
        .trials
        .iter()
        .all(|t| t.baseline != Some(Baseline::InSwitch)));
}
