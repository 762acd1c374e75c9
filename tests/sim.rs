//! The simulator against hand-worked figures, its own second path (explicit message
//! lists), and the synthesizer's clock.

mod common;

use proptest::prelude::*;
use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::{Op, Schedule, Transfer};
use tacos::sim::{schedule_messages, simulate_messages, simulate_schedule, Message, SimReport};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::Error;

fn topology(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// All-Gather of 1 MB per NPU: every chunk takes 0.5 us + 1e6 B / 50 GB/s = 20.5 us on a link.
fn allgather_time(spec: &str, baseline: Baseline) -> (u64, u64) {
    let topo = topology(spec);
    let n = topo.npus() as u64;
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, n * 1_000_000).unwrap();
    let s = baseline.schedule(&topo, c.spec()).unwrap();
    let r = simulate_schedule(&topo, &s).unwrap();
    (r.time_ps, *r.link_busy_ps.iter().max().unwrap())
}

const CHUNK_PS: u64 = 20_500_000;

#[test]
fn ring_allgather_on_a_ring_takes_the_alpha_beta_time() {
    // P - 1 steps of one chunk per link.
    assert_eq!(allgather_time("ring:8", Baseline::RingUni).0, 7 * CHUNK_PS);
    // Both ways round: P - 1 steps of half a chunk (0.5 us + 10 us).
    assert_eq!(allgather_time("ring:8", Baseline::Ring).0, 7 * 10_500_000);
}

#[test]
fn direct_allgather_on_fully_connected_takes_one_chunk_time() {
    assert_eq!(allgather_time("fc:8", Baseline::Direct).0, CHUNK_PS);
}

#[test]
fn direct_allgather_on_a_64_ring_is_bound_by_its_most_loaded_link() {
    // Each NPU r sends to r +/- d over d hops. The clockwise link i -> i+1 carries the sends
    // from the d sources behind it for d = 1..31: 1 + 2 + ... + 31 = 496. Sends over 32 hops
    // tie both ways; the router settles the lower NPU id first, so from r the way round
    // through r+31 wins unless r+33 wraps below it (r = 31, 32): a link whose 32 sources
    // avoid 31 and 32 carries 32 more, 528 chunks in all.
    let (time, busiest) = allgather_time("ring:64", Baseline::Direct);
    assert_eq!(busiest, 528 * CHUNK_PS);
    assert_eq!(time, busiest, "the busiest link never waits");
    let (ring, _) = allgather_time("ring:64", Baseline::RingUni);
    assert_eq!(ring, 63 * CHUNK_PS);
    assert!(time > 8 * ring);
}

fn message(src: usize, dst: usize, bytes: f64, deps: Vec<usize>) -> Message {
    Message {
        src,
        dst,
        bytes,
        deps,
    }
}

#[test]
fn messages_contend_route_and_wait_as_documented() {
    // uniring:4: 0->1->2->3->0, 50 GB/s, 0.5 us; 1e6 bytes take 20.5 us per hop.
    let topo = topology("uniring:4");
    let r = simulate_messages(
        &topo,
        &[
            // Two messages from 0 to 1 share the link: the second waits.
            message(0, 1, 1e6, vec![]),
            message(0, 1, 1e6, vec![]),
            // 0 -> 2 goes 0->1->2, store and forward; it queues behind both on 0->1.
            message(0, 2, 1e6, vec![]),
            // Issued once message 0 has arrived.
            message(1, 2, 1e6, vec![0]),
        ],
    )
    .unwrap();
    let ends: Vec<u64> = r.messages.iter().map(|m| m.end_ps).collect();
    let hop = CHUNK_PS;
    // Link 1->2: message 3 reaches it at 1 hop, message 2 at 3 hops.
    assert_eq!(ends, vec![hop, 2 * hop, 4 * hop, 2 * hop]);
    assert_eq!(r.messages[3].start_ps, hop);
    assert_eq!(r.time_ps, 4 * hop);
    let link01 = topo.link_between(0, 1).unwrap();
    assert_eq!(r.link_busy_ps[link01], 3 * hop);
    assert_eq!(r.link_bytes[link01], 3e6);
}

#[test]
fn bad_messages_are_rejected_with_their_index() {
    let topo = topology("ring:4");
    let err = simulate_messages(&topo, &[message(0, 9, 1.0, vec![])]).unwrap_err();
    assert!(
        err.to_string()
            .contains("message 0 goes from NPU 0 to NPU 9"),
        "{err}"
    );
    let cycle = [message(0, 1, 1.0, vec![1]), message(1, 0, 1.0, vec![0])];
    let err = simulate_messages(&topo, &cycle).unwrap_err();
    assert!(err.to_string().contains("dependency cycle"), "{err}");
}

#[test]
fn a_schedule_naming_a_missing_npu_is_rejected() {
    let topo = topology("ring:4");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 4096).unwrap();
    let mut s = Baseline::RingUni.schedule(&topo, c.spec()).unwrap();
    let t = s.transfers[3].clone();
    s.transfers[3] = Transfer::new(t.chunk(), t.src(), 7, t.start_ps, t.end_ps, t.op);
    let err = simulate_schedule(&topo, &s).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Schedule {
                transfer: Some(3),
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn explicit_message_lists_give_the_same_simulation() {
    // Direct All-Reduce forwards every reduced chunk P - 1 times, each send waiting for
    // P - 1 contributions: the grouped dependency path. Ring uses plain lists.
    for (spec, baseline) in [
        ("fc:8", Baseline::Direct),
        ("mesh:3x3", Baseline::Direct),
        ("torus:4x4", Baseline::Ring),
        ("hypercube:3", Baseline::Rhd),
    ] {
        let topo = topology(spec);
        let c = Collective::over_all(&topo, CollectiveKind::AllReduce, None, 2, 1 << 20).unwrap();
        let s = baseline.schedule(&topo, c.spec()).unwrap();
        let grouped = simulate_schedule(&topo, &s).unwrap();
        let listed = simulate_messages(&topo, &schedule_messages(&s)).unwrap();
        assert_eq!(grouped, listed, "{spec} {baseline}");
    }
}

#[test]
fn report_uses_nccl_tests_bus_bandwidth() {
    let topo = topology("ring:8");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 8_000_000).unwrap();
    let s = Baseline::RingUni.schedule(&topo, c.spec()).unwrap();
    let report = SimReport::new(&topo, c.spec(), &simulate_schedule(&topo, &s).unwrap());
    // 8 MB in 143.5 us.
    let algbw = 8e6 / 143.5e-6 / 1e9;
    assert!((report.algbw_gbps - algbw).abs() < 1e-9);
    assert!((report.busbw_gbps - algbw * 7.0 / 8.0).abs() < 1e-9);
    // The unidirectional ring keeps 8 of the 16 links busy the whole time.
    let full = report.links.iter().filter(|l| l.utilization == 1.0).count();
    let idle = report.links.iter().filter(|l| l.busy_ps == 0).count();
    assert_eq!((full, idle), (8, 8));
}

/// A random strongly connected topology, with one link class or several.
fn random_topology(seed: u64, npus: usize, extra: usize, homogeneous: bool) -> Topology {
    if homogeneous {
        common::random_topology(seed, npus, extra, &[50.0], &[0.5])
    } else {
        common::random_topology(
            seed,
            npus,
            extra,
            &[12.5, 25.0, 50.0, 100.0],
            &[0.0, 0.3, 0.5, 2.0],
        )
    }
}

const HOMOGENEOUS_BUILDERS: &[&str] = &[
    "ring:5",
    "uniring:6",
    "fc:4",
    "switch:6,d=2",
    "mesh:3x3",
    "mesh:2x4",
    "torus:3x3",
    "mesh:2x2x2",
    "hypercube:3",
    "switch:5",
];
const HETEROGENEOUS_BUILDERS: &[&str] = &[
    "dragonfly:3x3,bw=400:200",
    "rfs:2x2x3,bw=200:100:50",
    "multi:R3xL3,bw=100:25",
    "mesh:3x3,lat=0.1:2",
    "preset:dgx1",
];

/// Synthesized schedule time and its simulated time, for every kind the synthesizer makes.
fn synth_vs_sim(topo: &Topology, k: usize, seed: u64) -> Vec<(CollectiveKind, u64, u64)> {
    let mut out = Vec::new();
    for kind in CollectiveKind::ALL {
        let root = kind.has_root().then_some(topo.npus() - 1);
        let c = Collective::over_all(topo, kind, root, k, 3 << 20).unwrap();
        let schedule: Schedule = match synthesize(topo, &c, &SynthOptions::seeded(seed)) {
            Ok(s) => s,
            Err(Error::Synthesis(m)) if m.contains("not synthesized yet") => continue,
            Err(e) => panic!("{} {kind}: {e}", topo.name()),
        };
        let sim = simulate_schedule(topo, &schedule).unwrap();
        out.push((kind, schedule.collective_time_ps(), sim.time_ps));
    }
    out
}

/// The greedy forward synthesis never replaces a chunk where every link costs the same,
/// so nothing it schedules could start earlier: equal clocks.
fn forward_greedy(kind: CollectiveKind) -> bool {
    matches!(kind, CollectiveKind::AllGather | CollectiveKind::Broadcast)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn simulated_time_never_exceeds_synthesized_time(
        seed in any::<u64>(), npus in 3usize..10, extra in 0usize..12, k in 1usize..3, homogeneous in any::<bool>(),
        builder in 0usize..15,
    ) {
        let (topo, homogeneous) = if builder < HOMOGENEOUS_BUILDERS.len() {
            (topology(HOMOGENEOUS_BUILDERS[builder]), true)
        } else if builder - HOMOGENEOUS_BUILDERS.len() < HETEROGENEOUS_BUILDERS.len() && !homogeneous {
            (topology(HETEROGENEOUS_BUILDERS[builder - HOMOGENEOUS_BUILDERS.len()]), false)
        } else {
            (random_topology(seed, npus, extra, homogeneous), homogeneous)
        };
        for (kind, synth, sim) in synth_vs_sim(&topo, k, seed) {
            prop_assert!(sim <= synth, "{} {kind}: simulated {sim} > synthesized {synth}", topo.name());
            if homogeneous && forward_greedy(kind) {
                prop_assert_eq!(sim, synth, "{} {}", topo.name(), kind);
            }
        }
    }
}

#[test]
fn op_reduce_is_simulated_like_a_copy() {
    // The simulator times data movement; what the destination does with it is free.
    let topo = topology("ring:2");
    let c = Collective::over_all(&topo, CollectiveKind::Reduce, Some(0), 1, 1_000_000).unwrap();
    let transfer = Transfer::new(0, 1, 0, 0, 1, Op::Reduce);
    let s = Schedule::new("ring:2", c.spec().clone(), c.chunk_bytes(), vec![transfer]);
    assert_eq!(simulate_schedule(&topo, &s).unwrap().time_ps, 20_500_000);
}

#[test]
fn a_time_past_the_picosecond_clock_is_an_error_not_a_wrapped_answer() {
    // Regression: a Ring time past 2^64 ps wrapped the clock (an efficiency of 1.345 was
    // printed). Within the input ranges: a Broadcast of 1 TiB over a one-way ring of 32 at
    // 0.001 GB/s takes 2^40 * 1e6 = 1.1e18 ps per hop, and the ring's chunks each cross 31
    // hops, so the last arrival is past 2^64 = 1.8e19 ps.
    let topo = parse_spec(
        "uniring:32",
        &SpecDefaults {
            bandwidth_gbps: 0.001,
            latency_us: 0.0,
        },
    )
    .unwrap();
    let spec = Collective::over_all(&topo, CollectiveKind::Broadcast, Some(0), 1, 1 << 40)
        .unwrap()
        .spec()
        .clone();
    let schedule = Baseline::Ring.schedule(&topo, &spec).unwrap();
    let e = simulate_schedule(&topo, &schedule).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    assert!(e.to_string().contains("us of time"), "{e}");
}

#[test]
fn a_route_longer_than_the_clock_is_too_long_not_disconnected() {
    // Regression: route lengths saturated, so a connected mesh read as disconnected. From
    // corner to corner of mesh:4x4 is 6 hops of 5e17 bytes at 50 GB/s = 1e19 ps each.
    let topo = topology("mesh:4x4");
    let e = simulate_messages(&topo, &[message(0, 15, 5e17, vec![])]).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
}

/// A timed schedule whose transfers all start at once on one port through a switch: each
/// free port once gathered every message due there at that time and tried them all, so
/// 2 x 40,000 transfers took minutes. Each direction's messages go one after another:
/// 40,000 hop times, hand-worked from the route's cut-through time.
#[test]
fn many_transfers_planned_at_once_on_one_port_go_in_a_row() {
    use tacos::collective::CollectiveSpec;
    use tacos::schedule::{link_time_ps, SCHEDULE_FORMAT};
    let topo = topology("switch:2");
    let k = 40_000;
    let chunk_bytes = 1024.0;
    let hop = |src, dst| {
        let route = topo.route(src, dst).unwrap();
        link_time_ps(&topo.route_link(route), chunk_bytes).unwrap()
    };
    let transfers = (0..k)
        .flat_map(|c| {
            [(0, 1, c), (1, 0, k + c)]
                .map(|(src, dst, chunk)| Transfer::new(chunk, src, dst, 0, hop(src, dst), Op::Copy))
        })
        .collect();
    let schedule = Schedule {
        format: SCHEDULE_FORMAT.into(),
        topology: topo.name().into(),
        collective: CollectiveSpec {
            kind: CollectiveKind::AllGather,
            root: None,
            npus: vec![0, 1],
            chunks_per_npu: k,
            size_bytes: (2 * k) as u64 * 1024,
        },
        chunk_bytes,
        network: None,
        transfers,
    };
    let result = simulate_schedule(&topo, &schedule).unwrap();
    assert_eq!(result.time_ps, k as u64 * hop(0, 1).max(hop(1, 0)));
}

#[test]
fn a_message_between_a_gpu_and_its_switch_takes_that_link_alone() {
    // A GPU's leg of an in-switch reduction: NPU 0 to the switch of switch:4 (one link of
    // 50 GB/s and 0.5 us by default): alpha + bytes / bandwidth, and back.
    let topo =
        tacos::topology::parse_spec("switch:4", &tacos::topology::SpecDefaults::default()).unwrap();
    let switch = topo.npus();
    let bytes = 1e6;
    let up = tacos::sim::Message {
        src: 0,
        dst: switch,
        bytes,
        deps: vec![],
    };
    let down = tacos::sim::Message {
        src: switch,
        dst: 1,
        bytes,
        deps: vec![0],
    };
    let run = tacos::sim::simulate_messages(&topo, &[up, down]).unwrap();
    let link = topo.link(topo.link_between(0, switch).unwrap());
    let one = link.transfer_ps(bytes);
    assert_eq!(run.time_ps, 2 * one);
    // Two switches' worth of ends, or a switch to itself, is still refused.
    let bad = tacos::sim::Message {
        src: switch,
        dst: switch,
        bytes,
        deps: vec![],
    };
    assert!(tacos::sim::simulate_messages(&topo, &[bad]).is_err());
}
