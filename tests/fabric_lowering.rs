//! Baselines and MSCCL lowering on fabrics (topologies with switch vertices): every
//! baseline runs on a star and on a two-level fabric, a send between GPUs joined through
//! switches is one transfer and one send/receive pair, and lowered programs are timed
//! cut-through as the simulator times their schedules. Figures are worked by hand.

use tacos::baselines::{ring_order, Baseline};
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::msccl::{
    lower, parse_program, simulate_program_on, verify, write_program, LowerOptions, Program,
    VerifyOptions,
};
use tacos::schedule::{check, check_data_flow, route_time_ps, Op, Schedule, Transfer};
use tacos::sim::simulate_schedule;
use tacos::topology::{parse_spec, Link, SpecDefaults, Topology};

const US: u64 = 1_000_000;

/// `star:8` as the builder makes it by default: 50 GB/s and 0.5 us per hop, so a route
/// (up into the switch, down out of it) has alpha = 1 us, and a 1 MB share crosses a
/// port in 20 us.
fn star8() -> Topology {
    parse_spec("star:8", &SpecDefaults::default()).unwrap()
}

/// All-Gather of 8 MB over the star's NPUs: a 1 MB share each.
const SIZE: u64 = 8_000_000;

/// Two nodes of four GPUs: each GPU has a port into its node's switch (100 GB/s, 0.5 us a
/// hop) and one into a rail switch (25 GB/s, 1 us a hop); rail r joins GPUs 2r and 2r + 1
/// of both nodes. NPU ids are node * 4 + GPU.
fn two_level() -> Topology {
    let switches = ["node0", "node1", "rail0", "rail1"]
        .map(String::from)
        .to_vec();
    let (node0, rail0) = (8, 10);
    let mut links = Vec::new();
    let mut port = |npu: usize, switch: usize, bandwidth_gbps: f64, latency_us: f64| {
        for (src, dst) in [(npu, switch), (switch, npu)] {
            links.push(Link {
                src,
                dst,
                bandwidth_gbps,
                latency_us,
            });
        }
    };
    for npu in 0..8 {
        port(npu, node0 + npu / 4, 100.0, 0.5);
        port(npu, rail0 + npu % 4 / 2, 25.0, 1.0);
    }
    Topology::with_switches("two-level", 8, switches, links).unwrap()
}

fn spec(topo: &Topology, kind: CollectiveKind, k: usize, size: u64) -> CollectiveSpec {
    let npus = topo.alive_npus();
    CollectiveSpec {
        kind,
        root: kind.has_root().then_some(npus[npus.len() / 2]),
        npus,
        chunks_per_npu: k,
        size_bytes: size,
    }
}

fn all_gather(topo: &Topology) -> CollectiveSpec {
    spec(topo, CollectiveKind::AllGather, 1, SIZE)
}

/// The lowered program, through its XML text and back, verified correct.
fn lowered(topo: &Topology, schedule: &Schedule) -> Program {
    let program = lower(schedule, topo, &LowerOptions::default()).unwrap();
    let program = parse_program(&write_program(&program), "lowered.xml").unwrap();
    let report = verify(&program, &VerifyOptions::default());
    assert!(report.is_correct(), "{:?}", report.problems);
    program
}

/// The lowered program's time, against the simulated schedule's.
fn program_and_schedule_ps(topo: &Topology, schedule: &Schedule) -> (u64, u64) {
    let program = lowered(topo, schedule);
    let spec = &schedule.collective;
    let program_ps = simulate_program_on(topo, &program, spec.size_bytes, &spec.npus)
        .unwrap()
        .time_ps;
    (
        program_ps,
        simulate_schedule(topo, schedule).unwrap().time_ps,
    )
}

#[test]
fn the_ring_on_a_star_goes_round_in_id_order_one_route_per_neighbour() {
    // Every NPU reaches every other through the switch: all have the same number of ways
    // on, so Warnsdorff's rule takes the lowest id each time.
    let t = star8();
    assert_eq!(ring_order(&t, &t.alive_npus()), (0..8).collect::<Vec<_>>());
    let s = Baseline::RingUni.schedule(&t, &all_gather(&t)).unwrap();
    assert!(s.transfers.iter().all(|x| x.dst() == (x.src() + 1) % 8));
    assert_eq!(s.transfers.len(), 8 * 7);
}

#[test]
fn ring_all_gather_through_a_star_takes_seven_route_steps() {
    // Unidirectional: each step every NPU passes a 1 MB share to the next through the
    // switch, every port carrying one message: 7 x (1 us + 20 us).
    let t = star8();
    let uni = Baseline::RingUni.schedule(&t, &all_gather(&t)).unwrap();
    check_data_flow(&uni, &t).unwrap();
    assert_eq!(simulate_schedule(&t, &uni).unwrap().time_ps, 7 * 21 * US);
    // Bidirectional: half a share each way, but both directions leave an NPU by its one
    // up port, so each step holds it twice, a message (1 us + 10 us) at a time.
    let bi = Baseline::Ring.schedule(&t, &all_gather(&t)).unwrap();
    assert_eq!(simulate_schedule(&t, &bi).unwrap().time_ps, 14 * 11 * US);
}

#[test]
fn direct_all_gather_through_a_star_has_the_ring_bandwidth_term() {
    // Every port receives 7 shares one at a time: 7 x 20 us of bandwidth (the ingress
    // bound), the ring's; and no worse than the ring's seven rounds of a route each.
    let t = star8();
    let s = Baseline::Direct.schedule(&t, &all_gather(&t)).unwrap();
    let time = simulate_schedule(&t, &s).unwrap().time_ps;
    assert!(time >= 7 * 20 * US, "{time}");
    assert!(time <= 7 * 21 * US, "{time}");
}

#[test]
fn every_baseline_runs_on_a_star_and_on_a_two_level_fabric() {
    let mut ran = 0;
    for t in [star8(), two_level()] {
        // Packed trees need NPUs joined by links, not switches; in-switch needs switches
        // that reduce and writes no XML: tests/baselines.rs and tests/in_switch_search.rs.
        for baseline in Baseline::ALL
            .into_iter()
            .filter(|&b| b != Baseline::Trees && b != Baseline::InSwitch)
        {
            for &kind in baseline.kinds() {
                for k in [1, 2] {
                    let cspec = spec(&t, kind, k, 1 << 20);
                    let what = format!("{} {baseline} {kind} K={k}", t.name());
                    let s = baseline
                        .schedule(&t, &cspec)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    check_data_flow(&s, &t).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let sim = simulate_schedule(&t, &s).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let bounds = Bounds::new(&t, &Collective::new(&t, cspec).unwrap());
                    assert!(sim.time_ps >= bounds.best_ps(), "{what}: {bounds:?}");
                    ran += 1;
                }
            }
        }
    }
    // 6 baselines' collectives (5 + 5 + 8 + 5 + 3 + 3) at two K on two fabrics.
    assert_eq!(ran, 29 * 2 * 2);
}

#[test]
fn on_a_two_level_fabric_the_ring_and_hierarchical_send_only_through_switches() {
    let t = two_level();
    // GPU 0 reaches its node (1, 2, 3) and rail 0 (4, 5); 6 and 7 only through a relay.
    assert!(t.route(0, 5).is_some() && t.route(0, 6).is_none());
    let ring = ring_order(&t, &t.alive_npus());
    let mut sorted = ring.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    for (i, &a) in ring.iter().enumerate() {
        let b = ring[(i + 1) % ring.len()];
        assert!(t.route(a, b).is_some(), "{ring:?}: {a} -> {b}");
    }
    // Levels read from the switches: the node's four GPUs, then pairs across nodes on a
    // rail (i, i + 4). A Reduce-Scatter is 3 steps in the nodes, then 1 across.
    let rs = spec(&t, CollectiveKind::ReduceScatter, 1, 1 << 20);
    let s = Baseline::Hierarchical.schedule(&t, &rs).unwrap();
    for x in &s.transfers {
        let in_node = x.src() / 4 == x.dst() / 4 && x.start_ps < 3;
        let on_rail = x.src() % 4 == x.dst() % 4 && x.start_ps == 3;
        assert!(in_node || on_rail, "{x:?}");
        // One switch between them: two links.
        assert_eq!(t.route(x.src(), x.dst()).unwrap().len(), 2, "{x:?}");
    }
    assert_eq!(s.transfers.iter().map(|x| x.start_ps).max(), Some(3));
}

#[test]
fn hierarchical_refuses_a_fabric_whose_switches_make_no_grid() {
    // Four NPUs in a ring of switches: s_i joins NPUs i and i + 1. Pairs (0, 1) make a
    // first dimension of 2, but no switch holds 0 and 2 for the second.
    let names: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    let mut links = Vec::new();
    for i in 0..4 {
        for npu in [i, (i + 1) % 4] {
            for (src, dst) in [(npu, 4 + i), (4 + i, npu)] {
                links.push(Link {
                    src,
                    dst,
                    bandwidth_gbps: 50.0,
                    latency_us: 0.5,
                });
            }
        }
    }
    let t = Topology::with_switches("switch-ring", 4, names, links).unwrap();
    let rs = spec(&t, CollectiveKind::ReduceScatter, 1, 1 << 20);
    let e = Baseline::Hierarchical
        .schedule(&t, &rs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("'switch-ring'") && e.contains("grid"), "{e}");
    // The ring needs no grid: round the switches.
    let s = Baseline::Ring.schedule(&t, &rs).unwrap();
    check_data_flow(&s, &t).unwrap();
    assert_eq!(ring_order(&t, &t.alive_npus()), [0, 1, 2, 3]);
}

#[test]
fn a_lowered_ring_on_a_star_verifies_and_times_as_its_schedule() {
    let t = star8();
    for (baseline, kind, expected) in [
        (
            Baseline::RingUni,
            CollectiveKind::AllGather,
            Some(7 * 21 * US),
        ),
        (
            Baseline::Ring,
            CollectiveKind::AllGather,
            Some(14 * 11 * US),
        ),
        (Baseline::RingUni, CollectiveKind::ReduceScatter, None),
        (Baseline::Ring, CollectiveKind::AllReduce, None),
    ] {
        let s = baseline.schedule(&t, &spec(&t, kind, 1, SIZE)).unwrap();
        let (program_ps, schedule_ps) = program_and_schedule_ps(&t, &s);
        assert_eq!(program_ps, schedule_ps, "{baseline} {kind}");
        if let Some(e) = expected {
            assert_eq!(program_ps, e, "{baseline} {kind}");
        }
    }
}

#[test]
fn flows_into_one_port_serialize_in_a_lowered_program() {
    // Direct Gather to NPU 4: seven 1 MB shares into its one down port, each holding it
    // for the route's 1 us + 20 us, one after another.
    let t = star8();
    let s = Baseline::Direct
        .schedule(&t, &spec(&t, CollectiveKind::Gather, 1, SIZE))
        .unwrap();
    assert!(s.transfers.iter().all(|x| x.dst() == 4));
    assert_eq!(program_and_schedule_ps(&t, &s), (7 * 21 * US, 7 * 21 * US));
}

#[test]
fn a_timed_ring_through_a_star_passes_the_checker_and_lowers_to_its_time() {
    // The unidirectional ring All-Gather timed by hand: step s runs from s x 21 us for
    // the route's 1 us + 20 us, one message per port; the checker accepts it and the
    // lowered program takes what the schedule says.
    let t = star8();
    let cspec = all_gather(&t);
    let route_ps = route_time_ps(&t, &t.route(0, 1).unwrap(), 1e6).unwrap();
    assert_eq!(route_ps, 21 * US);
    let mut transfers = Vec::new();
    for step in 0..7u64 {
        for i in 0..8 {
            transfers.push(Transfer::new(
                (i + 8 - step as usize) % 8,
                i,
                (i + 1) % 8,
                step * route_ps,
                (step + 1) * route_ps,
                Op::Copy,
            ));
        }
    }
    let schedule = Schedule::new("star:8", cspec, 1e6, transfers);
    assert_eq!(
        check(&schedule, &t).unwrap().collective_time_ps,
        7 * 21 * US
    );
    assert_eq!(
        program_and_schedule_ps(&t, &schedule),
        (7 * 21 * US, 7 * 21 * US)
    );
    // Two sends into one port at once are refused: NPU 0 also sends to 2 at step 0.
    let mut crowded = schedule.clone();
    crowded
        .transfers
        .push(Transfer::new(0, 0, 2, 0, route_ps, Op::Copy));
    let e = check(&crowded, &t).unwrap_err().to_string();
    assert!(e.contains("still occupies the link"), "{e}");
}

#[test]
fn every_baseline_lowers_on_both_fabrics_to_a_verified_program() {
    // Sends through switches are send/receive pairs between the GPUs; on the two-level
    // fabric GPU 0's sends to GPUs 6 and 7 too (the simulator relays them).
    for t in [star8(), two_level()] {
        // Packed trees need NPUs joined by links, not switches; in-switch needs switches
        // that reduce and writes no XML: tests/baselines.rs and tests/in_switch_search.rs.
        for baseline in Baseline::ALL
            .into_iter()
            .filter(|&b| b != Baseline::Trees && b != Baseline::InSwitch)
        {
            for &kind in baseline.kinds() {
                let cspec = spec(&t, kind, 1, SIZE);
                let what = format!("{} {baseline} {kind}", t.name());
                let s = baseline.schedule(&t, &cspec).unwrap();
                let program = lowered(&t, &s);
                let time = simulate_program_on(&t, &program, SIZE, &cspec.npus)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                    .time_ps;
                let bounds = Bounds::new(&t, &Collective::new(&t, cspec).unwrap());
                assert!(time >= bounds.best_ps(), "{what}: {time} {bounds:?}");
            }
        }
    }
}
