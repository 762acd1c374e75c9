//! Switch vertices: topologies with switches built and read from JSON, routes through
//! them, the paper's unwinding as a transform, the cut-through simulator and the bounds,
//! each against hand-worked figures; and every command either working on a star or
//! refusing it with the `--unwind` hint.

mod common;

use common::tacos;
use tacos::bounds::{cut_bound, Bounds};
use tacos::collective::{Collective, CollectiveKind};
use tacos::error::Error;
use tacos::sim::{simulate_messages, Message};
use tacos::topology::{file, parse_spec, SpecDefaults, Topology};

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap()
}

fn json(text: &str) -> tacos::Result<Topology> {
    file::parse(text, "t.json", &SpecDefaults::default())
}

/// (src, dst) of each link of a route.
fn ends(topo: &Topology, route: &[usize]) -> Vec<(usize, usize)> {
    route
        .iter()
        .map(|&l| (topo.link(l).src, topo.link(l).dst))
        .collect()
}

const US: u64 = 1_000_000;

#[test]
fn a_star_has_npus_then_one_switch_and_routes_through_it() {
    let t = spec("star:8,bw=50,lat=0.5");
    assert_eq!((t.npus(), t.vertices(), t.switches()), (8, 9, 8..9));
    assert!(t.is_switch(8) && !t.is_switch(7));
    assert_eq!(t.switch_name(8), Some("switch"));
    assert_eq!(t.switch_name(3), None);
    assert_eq!(t.alive_npus(), (0..8).collect::<Vec<_>>());
    assert_eq!(t.links().len(), 16);
    let route = t.route(2, 5).unwrap();
    assert_eq!(ends(&t, &route), [(2, 8), (8, 5)]);
    t.check_strongly_connected(&t.alive_npus()).unwrap();
}

#[test]
fn routes_go_through_switches_only_by_latency_then_hops() {
    // 0 -> 1 through a (2 us), through b (1 us) or through c then d (1 us, three hops);
    // 1 -> 2 direct; 0 reaches 2 only through NPU 1, which is no route.
    let t = json(
        r#"{"npus": 3, "switches": ["a", "b", "c", "d"], "links": [
            {"src": 0, "dst": "a", "latency_us": 1}, {"src": "a", "dst": 1, "latency_us": 1},
            {"src": 0, "dst": "b", "latency_us": 0.5}, {"src": "b", "dst": 1, "latency_us": 0.5},
            {"src": 0, "dst": "c", "latency_us": 0.25}, {"src": "c", "dst": "d", "latency_us": 0.5},
            {"src": "d", "dst": 1, "latency_us": 0.25},
            {"src": 1, "dst": 2}, {"src": 2, "dst": 0}
        ]}"#,
    )
    .unwrap();
    let b = 3 + 1;
    assert_eq!(ends(&t, &t.route(0, 1).unwrap()), [(0, b), (b, 1)]);
    assert_eq!(ends(&t, &t.route(1, 2).unwrap()), [(1, 2)]);
    assert_eq!(t.route(0, 2), None);
    assert_eq!(t.route(1, 0), None);
}

#[test]
fn json_with_switches_round_trips_and_names_bad_switches() {
    let text = r#"{"npus": 2, "switches": ["nvs0"], "links": [
        {"src": 0, "dst": "nvs0", "bidirectional": true},
        {"src": 1, "dst": "nvs0", "bidirectional": true, "bandwidth_gbps": 25}
    ]}"#;
    let t = json(text).unwrap();
    assert_eq!(t.vertices(), 3);
    assert_eq!(t.link(t.link_between(2, 1).unwrap()).bandwidth_gbps, 25.0);
    let back = json(&file::to_json(&t)).unwrap();
    assert_eq!(back, t);
    assert_eq!(
        spec("star:5"),
        json(&file::to_json(&spec("star:5"))).unwrap()
    );

    let unknown = json(&text.replace(
        r#""dst": "nvs0", "bidirectional": true, "b"#,
        r#""dst": "nvs9", "bidirectional": true, "b"#,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        unknown.contains("links[1].dst") && unknown.contains("nvs9"),
        "{unknown}"
    );

    let idle = json(r#"{"npus": 2, "switches": ["s0", "idle"], "links": [
        {"src": 0, "dst": "s0", "bidirectional": true}, {"src": 1, "dst": "s0", "bidirectional": true}
    ]}"#)
    .unwrap_err()
    .to_string();
    assert!(
        idle.contains("switch 'idle'") && idle.contains("no link in"),
        "{idle}"
    );

    let twice = json(r#"{"npus": 1, "switches": ["s", "s"], "links": []}"#)
        .unwrap_err()
        .to_string();
    assert!(twice.contains("switches[1]"), "{twice}");
}

#[test]
fn npus_cut_apart_between_switches_are_disconnected() {
    let t = json(
        r#"{"npus": 4, "switches": ["left", "right"], "links": [
        {"src": 0, "dst": "left", "bidirectional": true}, {"src": 1, "dst": "left", "bidirectional": true},
        {"src": 2, "dst": "right", "bidirectional": true}, {"src": 3, "dst": "right", "bidirectional": true}
    ]}"#,
    )
    .unwrap();
    let e = t.check_strongly_connected(&t.alive_npus()).unwrap_err();
    assert!(matches!(e, Error::Disconnected { .. }), "{e}");
    assert!(
        e.to_string().contains('2') && e.to_string().contains('3'),
        "{e}"
    );
}

#[test]
fn unwinding_a_star_is_the_switch_builder() {
    // Each hop of the star takes half the builder's latency: a route crosses two.
    let star = spec("star:8,bw=50,lat=0.25");
    assert_eq!(
        star.unwind(None).unwrap(),
        spec("switch:8,d=7,bw=50,lat=0.5")
    );
    assert_eq!(
        star.unwind(Some(2)).unwrap(),
        spec("switch:8,d=2,bw=50,lat=0.5")
    );
    assert_eq!(
        star.unwind(Some(100)).unwrap(),
        spec("switch:8,d=7,bw=50,lat=0.5")
    );
    assert!(!star.unwind(None).unwrap().has_switches());
    assert!(star.unwind(Some(0)).is_err());
    let plain = spec("ring:4");
    assert_eq!(plain.unwind(None).unwrap(), plain);
}

#[test]
fn unwinding_refuses_switches_joined_to_switches() {
    let t = json(
        r#"{"npus": 2, "switches": ["leaf", "spine"], "links": [
        {"src": 0, "dst": "leaf", "bidirectional": true}, {"src": 1, "dst": "leaf", "bidirectional": true},
        {"src": "leaf", "dst": "spine", "bidirectional": true}
    ]}"#,
    )
    .unwrap();
    let e = t.unwind(None).unwrap_err().to_string();
    assert!(e.contains("'leaf'") && e.contains("'spine'"), "{e}");
}

/// The star of the hand-worked figures: 8 NPUs, 50 GB/s and 0.5 us per hop, so a route
/// takes alpha = 1 us and a 1 MB share 20 us at the port's bandwidth.
fn star8() -> Topology {
    spec("star:8,bw=50,lat=0.5")
}

const SHARE: f64 = 1e6;

fn message(src: usize, dst: usize, deps: Vec<usize>) -> Message {
    Message {
        src,
        dst,
        bytes: SHARE,
        deps,
    }
}

#[test]
fn ring_all_gather_through_a_switch_takes_seven_route_steps() {
    // Step s: NPU i forwards to i+1 the share it received at step s-1.
    let n = 8;
    let mut messages = Vec::new();
    for s in 0..n - 1 {
        for i in 0..n {
            let deps = if s == 0 {
                vec![]
            } else {
                vec![(s - 1) * n + (i + n - 1) % n]
            };
            messages.push(message(i, (i + 1) % n, deps));
        }
    }
    let r = simulate_messages(&star8(), &messages).unwrap();
    assert_eq!(r.time_ps, 7 * 21 * US);
    // Every port carried its 7 shares, each for one step.
    for l in 0..16 {
        assert_eq!(r.link_busy_ps[l], 7 * 21 * US, "link {l}");
        assert_eq!(r.link_bytes[l], 7.0 * SHARE, "link {l}");
    }
}

#[test]
fn direct_all_gather_through_a_switch_has_the_ring_bandwidth_term() {
    // Shift k: every NPU sends its share to i+k, a permutation using every port once.
    let n = 8;
    let messages: Vec<Message> = (1..n)
        .flat_map(|k| (0..n).map(move |i| message(i, (i + k) % n, vec![])))
        .collect();
    let r = simulate_messages(&star8(), &messages).unwrap();
    assert_eq!(r.time_ps, 7 * 21 * US);
}

#[test]
fn two_flows_into_one_port_serialize() {
    let r = simulate_messages(&star8(), &[message(0, 2, vec![]), message(1, 2, vec![])]).unwrap();
    // Both are issued at 0; the second waits for the port.
    let ends: Vec<u64> = r.messages.iter().map(|m| m.end_ps).collect();
    assert_eq!(ends, [21 * US, 42 * US]);
    // Out of one port likewise; into different ports from different ports, at once.
    let r = simulate_messages(&star8(), &[message(0, 1, vec![]), message(0, 2, vec![])]).unwrap();
    assert_eq!(r.time_ps, 42 * US);
    let r = simulate_messages(&star8(), &[message(0, 1, vec![]), message(2, 3, vec![])]).unwrap();
    assert_eq!(r.time_ps, 21 * US);
}

#[test]
fn bounds_through_a_switch_are_the_port_figures() {
    let t = star8();
    let size = 8 * SHARE as u64;
    let ag = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, size).unwrap();
    let b = Bounds::new(&t, &ag);
    // 7 shares into each port at 50 GB/s: 140 us; one share out: 20 us.
    assert_eq!(b.ingress_ps, 140 * US);
    assert_eq!(b.egress_ps, 20 * US);
    assert_eq!(cut_bound(&t, &ag).unwrap().time_ps, 140 * US);
    assert_eq!(b.best_ps(), 140 * US);
    // All-Reduce: 2(n-1)/n S per port, 1.75 x 160 us; the cut between NPUs is one port.
    let ar = Collective::over_all(&t, CollectiveKind::AllReduce, None, 1, size).unwrap();
    let b = Bounds::new(&t, &ar);
    assert_eq!(b.traffic_ps, 280 * US);
    assert_eq!(cut_bound(&t, &ar).unwrap().time_ps, 160 * US);
    assert_eq!(b.best_ps(), 280 * US);
    // A route's latency is two hops.
    assert_eq!(b.latency_ps, US);
}

#[test]
fn every_command_works_on_a_star_or_asks_for_unwind() {
    let dir = std::env::temp_dir().join(format!("tacos-switches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("star.json");
    let out = dir.join("compiled");
    let commands: Vec<Vec<&str>> = vec![
        vec!["topo", "show", "star:8"],
        vec!["topo", "show", "star:8", "--json"],
        vec!["topo", "export", "star:8", "--out", json.to_str().unwrap()],
        vec!["synth", "star:8"],
        vec!["synth", "star:8", "--collective", "allreduce"],
        vec!["simulate", "star:8", "--baseline", "ring"],
        vec!["compare", "star:8"],
        vec!["compile", "star:8", "--out", out.to_str().unwrap()],
    ];
    for args in &commands {
        let (ok, _, err) = tacos(args);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(ok || err.contains("--unwind"), "{args:?}: {err}");
    }
    let (ok, out, err) = tacos(&["synth", "star:8", "--unwind"]);
    assert!(ok && out.contains("(unwound)"), "{err}");
    let (ok, _, err) = tacos(&["topo", "show", json.to_str().unwrap()]);
    assert!(ok, "{err}");
}

#[test]
fn a_schedule_for_the_unwound_switch_runs_through_the_star() {
    let dir = std::env::temp_dir().join(format!("tacos-switches-sched-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ag.json");
    let file = file.to_str().unwrap();
    let (ok, _, err) = tacos(&[
        "synth",
        "switch:8,d=7",
        "-c",
        "allgather",
        "-s",
        "8MB",
        "--out",
        file,
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = tacos(&["simulate", "star:8,lat=0.25", "--schedule", file, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Seven 1 MB shares into each 50 GB/s port: 140 us, the ingress bound.
    let ingress = v["bounds"]["ingress_us"].as_f64().unwrap();
    assert!((ingress - 140.0).abs() < 1e-6, "{v}");
    assert!(v["time_us"].as_f64().unwrap() >= ingress, "{v}");
    // A ring's schedule runs too: its neighbours are joined through the switch.
    let (ok, _, _) = tacos(&[
        "synth",
        "ring:8",
        "-c",
        "allgather",
        "-s",
        "8MB",
        "--out",
        file,
    ]);
    assert!(ok);
    let (ok, _, err) = tacos(&["simulate", "star:8", "--schedule", file]);
    assert!(
        ok,
        "a ring's neighbours are joined through the switch: {err}"
    );
}

#[test]
fn unwinding_splits_the_narrower_port_and_merges_parallel_links() {
    // NPU 0's port is 30 GB/s, the others' 60; hops 0.5 us; a direct 0 -> 1 link of
    // 10 GB/s and 0.1 us besides. NPU 2 failed, so the switch joins two NPUs: d = n - 1
    // = 1, and each pair gets min(up, down) / 1, both hops' latency.
    let t = json(
        r#"{"npus": 3, "switches": ["s"], "latency_us": 0.5, "links": [
        {"src": 0, "dst": "s", "bidirectional": true, "bandwidth_gbps": 30},
        {"src": 1, "dst": "s", "bidirectional": true, "bandwidth_gbps": 60},
        {"src": 2, "dst": "s", "bidirectional": true, "bandwidth_gbps": 60},
        {"src": 0, "dst": 1, "bandwidth_gbps": 10, "latency_us": 0.1}
    ], "failed": [2]}"#,
    );
    // Failing NPU 2 leaves the switch its other links, so the file loads.
    let t = t.unwrap();
    let u = t.unwind(None).unwrap();
    let figures = |a, b| {
        let l = u.link(u.link_between(a, b).unwrap());
        (l.bandwidth_gbps, l.latency_us)
    };
    assert_eq!(figures(0, 1), (30.0 + 10.0, 0.1));
    assert_eq!(figures(1, 0), (30.0, 1.0));
    assert_eq!(u.failed(), [2]);
    assert_eq!(u.links().len(), 2, "NPU 2 failed keeps no links");
}

#[test]
fn switches_count_toward_the_npu_limit() {
    let max = tacos::topology::MAX_NPUS;
    let text = format!(r#"{{"npus": {max}, "switches": ["s"], "links": []}}"#);
    let e = json(&text).unwrap_err().to_string();
    assert!(
        e.contains("switches") && e.contains(&max.to_string()),
        "{e}"
    );
}

#[test]
fn unwinding_splits_each_port_over_its_peers() {
    // Three NPUs, NPU 0's port 30 GB/s, the others' 60: d = 2, min(up, down) / 2.
    let t = json(
        r#"{"npus": 3, "switches": ["s"], "links": [
        {"src": 0, "dst": "s", "bidirectional": true, "bandwidth_gbps": 30},
        {"src": 1, "dst": "s", "bidirectional": true, "bandwidth_gbps": 60},
        {"src": 2, "dst": "s", "bidirectional": true, "bandwidth_gbps": 60}
    ]}"#,
    )
    .unwrap();
    let u = t.unwind(None).unwrap();
    let bw = |a, b| u.link(u.link_between(a, b).unwrap()).bandwidth_gbps;
    assert_eq!(
        [bw(0, 1), bw(0, 2), bw(1, 0), bw(1, 2), bw(2, 0), bw(2, 1)],
        [15.0, 15.0, 15.0, 30.0, 15.0, 30.0]
    );
}

#[test]
fn a_subset_of_a_fabric_keeps_the_switches_its_npus_use() {
    // Two stars joined by one NPU-to-NPU link: 0-3 on 'left', 4-7 on 'right'.
    let t = json(
        r#"{"npus": 8, "switches": ["left", "right"], "links": [
            {"src": 0, "dst": "left", "bidirectional": true},
            {"src": 1, "dst": "left", "bidirectional": true},
            {"src": 2, "dst": "left", "bidirectional": true},
            {"src": 3, "dst": "left", "bidirectional": true},
            {"src": 4, "dst": "right", "bidirectional": true},
            {"src": 5, "dst": "right", "bidirectional": true},
            {"src": 6, "dst": "right", "bidirectional": true},
            {"src": 7, "dst": "right", "bidirectional": true},
            {"src": 3, "dst": 4, "bidirectional": true}
        ]}"#,
    )
    .unwrap();
    let s = t.subset(&[5, 1, 6, 2]).unwrap();
    // NPUs 5, 1, 6, 2 become 0..3; both switches stay (each joins two kept NPUs).
    assert_eq!((s.npus(), s.vertices()), (4, 6));
    assert_eq!(ends(&s, &s.route(0, 2).unwrap()), [(0, 5), (5, 2)]);
    assert_eq!(ends(&s, &s.route(1, 3).unwrap()), [(1, 4), (4, 3)]);
    assert!(
        s.route(0, 1).is_none(),
        "5 and 1 were joined only through 4 and 3"
    );
    // A subset on one star drops the other switch, which would join nothing.
    let one = t.subset(&[0, 2]).unwrap();
    assert_eq!((one.npus(), one.vertices()), (2, 3));
    assert_eq!(one.switch_name(2), Some("left"));
}

#[test]
fn an_unwinding_past_the_link_limit_is_refused_before_it_is_built() {
    // 10,000 NPUs unwound: 10,000 x 9,999 links, past 2^25.
    let e = spec("star:10000").unwind(None).unwrap_err().to_string();
    assert!(
        e.contains("99990000 links") && e.contains("33554432"),
        "{e}"
    );
}
