//! Synthesis through large switches matched by port (gates): a switch with more than 16
//! NPUs is not given a channel per pair of its NPUs; the matcher picks, for each free port
//! down from it, a sender with a free port up and a chunk. Every schedule is replayed by
//! the independent checker, which routes each transfer with `Topology::route` (so a pair
//! matched through a switch its route does not cross fails there), and by the simulator.

mod common;

use common::synth_checked;
use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::synthesize_to_stream;
use tacos::schedule::{check, Schedule};
use tacos::synth::SynthOptions;
use tacos::topology::{file, parse_spec, SpecDefaults, Topology};

const GIB: u64 = 1 << 30;

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap()
}

fn synth(t: &Topology, kind: CollectiveKind, k: usize, size: u64, seed: u64) -> Schedule {
    let (s, simulated) = synth_checked(t, kind, k, size, seed);
    // Contention-free on its routes: the simulator runs it on its own clock, never later.
    // (It may end sooner: a copy through a gate that arrives after a faster one is
    // dropped, not relabelled with another chunk, so the link time it held is idle in the
    // schedule.)
    assert!(simulated <= s.collective_time_ps(), "{} {kind:?}", t.name());
    s
}

/// Picoseconds to move `bytes` at `gbps` GB/s.
fn at_rate(bytes: f64, gbps: f64) -> u64 {
    (bytes * 1000.0 / gbps) as u64
}

#[test]
fn every_collective_through_a_large_switch_passes_the_checker() {
    // 24 NPUs on one switch (gates), also with two failed; collectives whose chunks cross
    // NPUs that do not want them are matched on a channel per pair instead.
    let star = spec("star:24,bw=50,lat=0.5");
    let failed = star.fail_npus(&[3, 17]).unwrap();
    for t in [&star, &failed] {
        for kind in CollectiveKind::ALL {
            for k in [1, 3] {
                synth(t, kind, k, 12 << 20, 5);
            }
        }
    }
}

#[test]
fn all_gather_through_a_large_switch_nears_the_port_bound() {
    // Each NPU's one 50 GB/s port must take in the 23 other parts of 1 GiB, whatever the
    // algorithm: 23/24 GiB / 50 GB/s. Matched by port, K=4 comes within 5% of it.
    let t = spec("star:24,bw=50,lat=0.5");
    let bound = at_rate(23.0 * (GIB / 24) as f64, 50.0);
    let time = synth(&t, CollectiveKind::AllGather, 4, GIB, 0).collective_time_ps();
    assert!(time >= bound, "{time} ps beats the bound {bound} ps");
    assert!(
        time as f64 <= bound as f64 / 0.95,
        "{time} ps, bound {bound} ps"
    );
}

#[test]
fn a_rail_optimized_cluster_with_large_rails_passes_the_checker() {
    // 24 nodes: rails of 24 GPUs (gates), NVSwitches of 8 (a channel per pair).
    let t = spec("preset:dgx-a100,nodes=24");
    for kind in [CollectiveKind::AllGather, CollectiveKind::AllReduce] {
        let s = synth(&t, kind, 1, GIB, 2);
        // A node's GPUs reach other nodes through their rails only: same GPU index.
        assert!(s
            .transfers
            .iter()
            .all(|x| x.src() / 8 == x.dst() / 8 || x.src() % 8 == x.dst() % 8));
    }
}

/// NPUs 0..20 on switch `a`, 10..30 on switch `b` (both large), so 10..20 share both
/// switches; `a` is faster to reach than `b` (0.2 us against 0.3 us a hop), so a pair of
/// those goes through `a`; NPUs 0 and 1 also have a direct link, their route.
fn two_planes() -> Topology {
    let mut links = Vec::new();
    for npu in 0..30 {
        if npu < 20 {
            links.push(format!(
                r#"{{"src": {npu}, "dst": "a", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0.2}}"#
            ));
        }
        if npu >= 10 {
            links.push(format!(
                r#"{{"src": {npu}, "dst": "b", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0.3}}"#
            ));
        }
    }
    links.push(
        r#"{"src": 0, "dst": 1, "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0.5}"#
            .into(),
    );
    let text = format!(
        r#"{{"name": "two-planes", "npus": 30, "switches": ["a", "b"], "links": [{}]}}"#,
        links.join(", ")
    );
    file::parse(&text, "two-planes.json", &SpecDefaults::default()).unwrap()
}

#[test]
fn pairs_sharing_two_switches_go_the_way_their_route_does() {
    let t = two_planes();
    let route_switch = |src: usize, dst: usize| {
        let route = t.route(src, dst).unwrap();
        (route.len() == 2).then(|| t.link(route[0]).dst)
    };
    // The fabric as worked out above: shared pairs through `a` (vertex 30), the direct
    // link between 0 and 1.
    assert_eq!(route_switch(12, 15), Some(30));
    assert_eq!(t.route(0, 1).unwrap().len(), 1);
    for kind in [CollectiveKind::AllGather, CollectiveKind::AllReduce] {
        for seed in [0, 1, 2] {
            // The checker routes every transfer as `Topology::route` does.
            let s = synth(&t, kind, 2, 64 << 20, seed);
            assert!(s.transfers.iter().any(|x| x.src() == 0 && x.dst() == 1));
        }
    }
}

#[test]
fn a_streamed_all_reduce_through_large_switches_passes_the_checker() {
    let dir = std::env::temp_dir().join(format!("tacos-gates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for topo in [spec("preset:dgx-a100,nodes=24"), two_planes()] {
        let c = Collective::over_all(&topo, CollectiveKind::AllReduce, None, 1, GIB).unwrap();
        let path = dir.join("all-reduce.tts");
        let made =
            synthesize_to_stream(&topo, &c, &SynthOptions::seeded(1), &path, &mut |_| {}).unwrap();
        let read = Schedule::read(&path).unwrap();
        let report = check(&read, &topo).unwrap_or_else(|e| panic!("{}: {e}", topo.name()));
        assert_eq!(report, made.report, "{}", topo.name());
        // Every NPU sends its partial sums and gets the sums: at least 2 (n - 1) transfers
        // per NPU's worth of chunks.
        let n = topo.npus() as u64;
        assert!(made.streamed.transfers >= 2 * n * (n - 1));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
