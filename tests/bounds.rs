//! Lower bounds against hand-worked figures, the max-flow cut bound against a
//! brute-force enumeration of every cut, and every bound against every algorithm we have
//! on random heterogeneous topologies.

mod common;

use proptest::prelude::*;
use tacos::baselines::Baseline;
use tacos::bounds::{chunked_bound_ps, cut_bound, Bounds, CutBound};
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, Link, SpecDefaults, Topology};

/// Proptest cases: `PROPTEST_CASES` when set (as proptest's own default does), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const GB: u64 = 1_000_000_000;

fn bounds(spec: &str, kind: CollectiveKind, size: u64) -> Bounds {
    let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
    let root = kind.has_root().then_some(0);
    let c = Collective::over_all(&topo, kind, root, 1, size).unwrap();
    Bounds::new(&topo, &c)
}

fn ms(ps: u64) -> f64 {
    ps as f64 / 1e9
}

fn assert_ms(ps: u64, expected_ms: f64) {
    assert!(
        (ms(ps) - expected_ms).abs() < 1e-6,
        "{} ms, expected {expected_ms} ms",
        ms(ps)
    );
}

#[test]
fn ring_allgather_bounds_by_hand() {
    // ring:8, 1 GB: each NPU takes in 7/8 GB over 2 x 50 GB/s = 8.75 ms; the cut bound
    // (an arc leaves by two links) is the same; the farthest NPU is 4 hops of 0.5 us.
    let b = bounds("ring:8", CollectiveKind::AllGather, 8 * GB / 8);
    assert_ms(b.ingress_ps, 8.75);
    assert_ms(b.cut.unwrap().time_ps, 8.75);
    assert!(b.cut.unwrap().exact);
    assert_eq!(b.latency_ps, 2_000_000);
    // Egress: each NPU sends its 1/8 GB at least once over 100 GB/s.
    assert_ms(b.egress_ps, 1.25);
    assert_eq!(b.best_ps(), b.ingress_ps.max(b.cut.unwrap().time_ps));
    // Ideal: 7/8 GB over 100 GB/s plus the 2 us diameter.
    assert_eq!(b.ideal_ps, 8_750_000_000 + 2_000_000);
}

#[test]
fn dragonfly_group_cut_beats_ingress() {
    // 5 groups of 4 NPUs, 400 GB/s inside a group, one 200 GB/s link per group pair. Leaving
    // one group out, the other 16 NPUs' data (16/20 GB) enters it over its 4 global links:
    // 0.8 GB / 800 GB/s = 1 ms, more than any NPU's ingress (19/20 GB over 1400 GB/s).
    let b = bounds("dragonfly:4x5,bw=400:200", CollectiveKind::AllGather, GB);
    assert_ms(b.cut.unwrap().time_ps, 1.0);
    assert_ms(b.ingress_ps, 0.95 / 1400.0 * 1000.0);
    assert_eq!(b.best_ps(), b.cut.unwrap().time_ps);
}

#[test]
fn combining_and_rooted_bounds_by_hand() {
    // Reduce-Scatter on ring:4: each NPU needs its quarter summed from 3 others; its
    // incoming links carry at least one quarter: 0.25 GB / 100 GB/s.
    let b = bounds("ring:4", CollectiveKind::ReduceScatter, GB);
    assert_ms(b.ingress_ps, 2.5);
    // The cut bound is All-Gather's on the reversed ring: the other three quarters reach an
    // NPU over 2 x 50 GB/s.
    assert_ms(b.cut.unwrap().time_ps, 7.5);
    // Broadcast from 0 on uniring:4: everything leaves the root over one 50 GB/s link.
    let b = bounds("uniring:4", CollectiveKind::Broadcast, GB);
    assert_ms(b.egress_ps, 20.0);
    assert_ms(b.cut.unwrap().time_ps, 20.0);
    // NPU 3 is three 0.5 us hops away.
    assert_eq!(b.latency_ps, 1_500_000);
    // Gather to 0 on fc:4: three quarters enter the root over 3 x 50 GB/s.
    let b = bounds("fc:4", CollectiveKind::Gather, GB);
    assert_ms(b.cut.unwrap().time_ps, 5.0);
    assert_ms(b.ingress_ps, 5.0);
    // All-to-All: each NPU takes in its quarter of every other NPU's buffer: 3/4 GB over
    // 150 GB/s. Every cut of fc:4 has 50 GB/s per pair of NPUs it separates (one NPU: 150
    // GB/s for 3 pairs; two: 200 GB/s for 4), a quarter GB per pair: 5 ms too.
    let b = bounds("fc:4", CollectiveKind::AllToAll, GB);
    assert_ms(b.ingress_ps, 5.0);
    assert_ms(b.cut.unwrap().time_ps, 5.0);
    // All-Reduce's Ideal is twice All-Gather's bandwidth term.
    let b = bounds("fc:4", CollectiveKind::AllReduce, GB);
    assert_eq!(b.ideal_ps, 10_000_000_000 + 500_000);
}

#[test]
fn all_reduce_needs_twice_the_all_gather_traffic() {
    // ring:8, 1 GB: one-way gossip needs 2 x 7 messages per byte, 14 GB over 16 links of
    // 50 GB/s = 17.5 ms: 2 x 7/8 GB over an NPU's 100 GB/s. Every cut between NPUs has at
    // least 2 x 50 GB/s: the whole buffer over it is 10 ms.
    let b = bounds("ring:8", CollectiveKind::AllReduce, GB);
    assert_ms(b.traffic_ps, 17.5);
    assert_ms(b.cut.unwrap().time_ps, 10.0);
    assert_ms(b.ingress_ps, 10.0);
    assert_eq!(b.best_ps(), b.traffic_ps);
    assert_eq!(b.best_name(), "traffic");
    // dragonfly:4x5 (400 GB/s links in a group, one 200 GB/s link per group pair): the
    // smallest cut is a group's 4 x 200 GB/s, the whole buffer over it 1.25 ms; the
    // traffic between groups (`all_reduce_gossip_between_groups_by_hand`) says 2 ms.
    let b = bounds("dragonfly:4x5,bw=400:200", CollectiveKind::AllReduce, GB);
    assert_ms(b.cut.unwrap().time_ps, 1.25);
    assert_ms(b.traffic_ps, 2.0);
}

const GIB: u64 = 1 << 30;

fn simulated_ps(topo: &Topology, baseline: Baseline, kind: CollectiveKind, size: u64) -> u64 {
    let spec = CollectiveSpec {
        kind,
        root: kind.has_root().then_some(0),
        npus: topo.alive_npus(),
        chunks_per_npu: 1,
        size_bytes: size,
    };
    let schedule = baseline.schedule(topo, &spec).unwrap();
    simulate_schedule(topo, &schedule).unwrap().time_ps
}

#[test]
fn ring_all_reduce_meets_the_bandwidth_term() {
    // ring:4 (50 GB/s each way, 0.5 us), 1 GiB: the bound is 2 x 3/4 GiB over an NPU's
    // 100 GB/s, 16.10612736 ms. The ring baseline sends each quarter both ways round in
    // halves: 2 x 3 steps of 1/8 GiB at 50 GB/s, each 0.5 us plus 2.68435456 ms.
    let topo = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllReduce, None, 1, GIB).unwrap();
    let b = Bounds::new(&topo, &c);
    assert_eq!(b.best_ps(), 16_106_127_360);
    let ring = simulated_ps(&topo, Baseline::Ring, CollectiveKind::AllReduce, GIB);
    assert_eq!(ring, 16_106_127_360 + 6 * 500_000);
}

#[test]
fn reduce_scatter_on_a_unidirectional_ring_meets_its_bound() {
    // uniring:4, 1 GiB: every NPU must send its three other quarters' contributions over
    // its one 50 GB/s link: 3/4 GiB / 50 GB/s = 16.10612736 ms. The ring does exactly that,
    // in 3 steps of 0.5 us latency each.
    let topo = parse_spec("uniring:4", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::ReduceScatter, None, 1, GIB).unwrap();
    let b = Bounds::new(&topo, &c);
    assert_eq!(b.egress_ps, 16_106_127_360);
    assert_eq!(b.best_ps(), b.egress_ps);
    let ring = simulated_ps(&topo, Baseline::RingUni, CollectiveKind::ReduceScatter, GIB);
    assert_eq!(ring, b.best_ps() + 3 * 500_000);
    let synthesized = synthesize(&topo, &c, &SynthOptions::default()).unwrap();
    assert_eq!(synthesized.collective_time_ps(), ring);
}

#[test]
fn scatter_on_a_star_meets_the_root_egress_bound() {
    // NPU 0 joined to each of 1..4 by a 50 GB/s link each way: the root sends 4/5 of 1 GB
    // over 200 GB/s, 4 ms. Sending each leaf its fifth directly takes 0.2 GB / 50 GB/s
    // plus one 0.5 us hop: the bound and one latency.
    let links = (1..5)
        .flat_map(|leaf| [(0, leaf), (leaf, 0)])
        .map(|(src, dst)| Link {
            src,
            dst,
            bandwidth_gbps: 50.0,
            latency_us: 0.5,
        })
        .collect();
    let topo = Topology::new("star", 5, links).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::Scatter, Some(0), 1, GB).unwrap();
    let b = Bounds::new(&topo, &c);
    assert_ms(b.egress_ps, 4.0);
    assert_eq!(b.best_ps(), b.egress_ps);
    let s = synthesize(&topo, &c, &SynthOptions::default()).unwrap();
    assert_eq!(s.collective_time_ps(), b.egress_ps + 500_000);
    let direct = simulated_ps(&topo, Baseline::Direct, CollectiveKind::Scatter, GB);
    assert_eq!(direct, b.egress_ps + 500_000);
}

/// A random strongly connected topology with asymmetric bandwidths and latencies, and
/// with up to two NPUs failed when the rest stays strongly connected.
fn random_failing_topology(seed: u64, npus: usize, extra: usize, fail: &[usize]) -> Topology {
    let topo = common::random_topology(
        seed,
        npus,
        extra,
        &[10.0, 25.0, 40.0, 100.0],
        &[0.2, 0.5, 1.5],
    );
    let fail: Vec<usize> = fail.iter().map(|f| f % npus).collect();
    match topo.fail_npus(&fail) {
        Ok(failed)
            if failed.alive_npus().len() >= 2
                && failed
                    .check_strongly_connected(&failed.alive_npus())
                    .is_ok() =>
        {
            failed
        }
        _ => topo,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    /// No algorithm we have beats any bound: the synthesized schedule and every baseline
    /// that applies, simulated with contention, on random heterogeneous topologies.
    #[test]
    fn no_algorithm_beats_any_bound(
        seed in any::<u64>(), npus in 2usize..9, extra in 0usize..12,
        fail in proptest::collection::vec(0usize..9, 0..3),
        kind in 0usize..8, k in 1usize..3, size_log in 10u32..31,
    ) {
        let topo = random_failing_topology(seed, npus, extra, &fail);
        let kind = CollectiveKind::ALL[kind];
        let alive = topo.alive_npus();
        let root = kind.has_root().then_some(alive[seed as usize % alive.len()]);
        let c = Collective::over_all(&topo, kind, root, k, 1 << size_log).unwrap();
        let b = Bounds::new(&topo, &c);
        let mut timed = vec![("synthesized".to_string(), {
            let s = synthesize(&topo, &c, &SynthOptions::seeded(seed)).unwrap();
            simulate_schedule(&topo, &s).unwrap().time_ps
        })];
        for baseline in Baseline::ALL.into_iter().filter(|b| b.kinds().contains(&kind)) {
            if let Ok(s) = baseline.schedule(&topo, c.spec()) {
                timed.push((baseline.name().to_string(), simulate_schedule(&topo, &s).unwrap().time_ps));
            }
        }
        let cut = b.cut.map_or(0, |c| c.time_ps);
        for (name, time) in timed {
            for (bound, ps) in [("ingress", b.ingress_ps), ("egress", b.egress_ps), ("traffic", b.traffic_ps), ("latency", b.latency_ps), ("cut", cut)] {
                prop_assert!(time >= ps, "{kind} K={k} {name}: {time} ps beats the {bound} bound {ps} ps on {:?}", topo.links());
            }
            prop_assert!(b.efficiency(time) <= 1.0);
        }
    }
}

#[test]
fn all_to_all_bisection_by_hand() {
    // mesh:4x4 (50 GB/s links): the top two rows send 8 x 8 sixteenths of a 1.6 GB buffer
    // (6.4 GB) over the 4 links going down: 6.4 GB / 200 GB/s = 32 ms. A corner NPU's
    // ingress is 15/16 x 1.6 GB over 100 GB/s, 15 ms.
    let b = bounds("mesh:4x4", CollectiveKind::AllToAll, 1_600_000_000);
    assert_ms(b.ingress_ps, 15.0);
    assert_ms(b.cut.unwrap().time_ps, 32.0);
    assert!(!b.cut.unwrap().exact);
    // Hop-bytes: the 240 ordered pairs of a 4x4 mesh are 640 hops apart in all, each
    // pair 0.1 GB: 64 GB over 48 links x 50 GB/s = 26.667 ms.
    assert_ms(b.traffic_ps, 64_000.0 / 2400.0);
}

#[test]
fn all_to_all_node_cut_counts_the_node_switch_inside() {
    // 4 DGX H100 nodes (50 GB/s a NIC): a node's 8 GPUs send 8 x 24 thirty-seconds of a
    // 32 GB buffer (192 GB) out over its 8 NICs (400 GB/s): 480 ms. The node's NVSwitch
    // is inside that set; left outside, its 8 links of 450 GB/s would count as leaving.
    let b = bounds("preset:dgx-h100,nodes=4", CollectiveKind::AllToAll, 32 * GB);
    assert!((ms(b.cut.unwrap().time_ps) - 480.0).abs() < 1e-6);
}

#[test]
fn all_reduce_gossip_between_groups_by_hand() {
    // dragonfly:4x5 (400 GB/s inside a group, one 200 GB/s global link per group pair):
    // merged, the 5 groups' All-Reduce needs 2 x 4 messages per byte between groups, over
    // the 20 global links both ways (4,000 GB/s): 1 GB takes 8 GB / 4,000 GB/s = 2 ms,
    // where counting every NPU's links gives 2 x 19 GB / (20 x 1,400 GB/s) = 1.357 ms.
    let b = bounds("dragonfly:4x5,bw=400:200", CollectiveKind::AllReduce, GB);
    assert_ms(b.traffic_ps, 2.0);
    // 4 DGX A100 nodes: the nodes' 32 NICs of 25 GB/s carry 2 x 3 GB: 7.5 ms.
    let b = bounds("preset:dgx-a100,nodes=4", CollectiveKind::AllReduce, GB);
    assert_ms(b.traffic_ps, 7.5);
    // Copies gain nothing from groups: each group's cut already says more.
    let ag = bounds("dragonfly:4x5,bw=400:200", CollectiveKind::AllGather, GB);
    assert!(ag.traffic_ps < b.traffic_ps);
}

#[test]
fn all_to_all_crossings_between_groups_by_hand() {
    // multi:R4xF4,bw=25:100: four groups of four fully connected at 100 GB/s, in a ring
    // of 25 GB/s links. A piece crosses as many ring links as its groups are apart (0, 1,
    // 2, 1 from each group): each NPU's 16 pieces of 1/16 GB cross 4 x 4 = 16 ring links,
    // 16 GB in all over the 32 ring links' 800 GB/s: 20 ms. Counting every NPU's links
    // alike, the hops spread over 3,200 GB/s more.
    let b = bounds("multi:R4xF4,bw=25:100", CollectiveKind::AllToAll, GB);
    assert_ms(b.traffic_ps, 20.0);
    assert_eq!(b.best_name(), "traffic");
}

/// The cut bound by enumerating every vertex set, switches included.
fn brute_force_cut_ms(topo: &Topology, kind: CollectiveKind, size: u64) -> Option<f64> {
    let n = topo.npus();
    let (net, sources, sinks, unit): (Topology, Vec<usize>, Vec<usize>, f64) = match kind {
        CollectiveKind::AllGather => (
            topo.clone(),
            (0..n).collect(),
            (0..n).collect(),
            size as f64 / n as f64,
        ),
        CollectiveKind::ReduceScatter => (
            topo.reversed(),
            (0..n).collect(),
            (0..n).collect(),
            size as f64 / n as f64,
        ),
        CollectiveKind::Broadcast => (topo.clone(), vec![0], (1..n).collect(), size as f64),
        CollectiveKind::Gather => (
            topo.clone(),
            (1..n).collect(),
            vec![0],
            size as f64 / n as f64,
        ),
        _ => unreachable!(),
    };
    let mut best: Option<f64> = None;
    for set in 1u32..(1 << topo.vertices()) - 1 {
        let inside = |u: usize| set & (1 << u) != 0;
        let members = sources.iter().filter(|&&u| inside(u)).count();
        if members == 0 || sinks.iter().all(|&t| inside(t)) {
            continue;
        }
        let leaving: f64 = net
            .links()
            .iter()
            .filter(|l| inside(l.src) && !inside(l.dst))
            .map(|l| l.bandwidth_gbps)
            .sum();
        let ms = members as f64 * unit / leaving / 1e6;
        best = Some(best.map_or(ms, |b: f64| b.max(ms)));
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), ..ProptestConfig::default() })]

    #[test]
    fn max_flow_cut_bound_through_switches_equals_brute_force(seed in any::<u64>(), npus in 2usize..7, switches in 1usize..4, extra in 0usize..8, kind in 0usize..4) {
        let kind = [CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::Broadcast, CollectiveKind::Gather][kind];
        let topo = common::random_fabric(seed, npus, switches, extra);
        let c = Collective::over_all(&topo, kind, kind.has_root().then_some(0), 1, GB).unwrap();
        let fast = cut_bound(&topo, &c).map(|b| b.time_ps as f64 / 1e9);
        let slow = brute_force_cut_ms(&topo, kind, GB);
        match (fast, slow) {
            (Some(f), Some(s)) => prop_assert!((f - s).abs() <= 1e-6 * s, "{kind}: max-flow {f} ms, enumeration {s} ms"),
            (f, s) => prop_assert!(f.is_none() && s.is_none(), "{kind}: {f:?} vs {s:?}"),
        }
    }

    #[test]
    fn max_flow_cut_bound_equals_brute_force(seed in any::<u64>(), npus in 2usize..8, extra in 0usize..14, kind in 0usize..4) {
        let kind = [CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::Broadcast, CollectiveKind::Gather][kind];
        let topo = common::random_topology(seed, npus, extra, &[10.0, 25.0, 40.0, 100.0], &[0.5]);
        let c = Collective::over_all(&topo, kind, kind.has_root().then_some(0), 1, GB).unwrap();
        let fast = cut_bound(&topo, &c).map(|b| b.time_ps as f64 / 1e9);
        let slow = brute_force_cut_ms(&topo, kind, GB);
        match (fast, slow) {
            (Some(f), Some(s)) => prop_assert!((f - s).abs() <= 1e-6 * s, "{kind}: max-flow {f} ms, enumeration {s} ms"),
            (f, s) => prop_assert!(f.is_none() && s.is_none(), "{kind}: {f:?} vs {s:?}"),
        }
    }
}

#[test]
fn bounds_for_several_sizes_are_those_of_each_size() {
    // The size-independent work is shared, so each size must still get exactly what
    // `Bounds::new` gives on the collective of that size.
    let sizes = [1 << 10, 3 << 20, 1 << 30];
    for spec in ["preset:dgx-a100,nodes=2", "mesh:3x3", "ring:5"] {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        for kind in CollectiveKind::ALL {
            let root = kind.has_root().then_some(1);
            let first = Collective::over_all(&topo, kind, root, 2, sizes[0]).unwrap();
            let all = Bounds::for_sizes(&topo, &first, &sizes).unwrap();
            for (&size, got) in sizes.iter().zip(&all) {
                let c = Collective::over_all(&topo, kind, root, 2, size).unwrap();
                assert_eq!(*got, Bounds::new(&topo, &c), "{spec} {kind} {size}");
            }
        }
    }
}

#[test]
fn the_chunked_bound_by_hand() {
    // fc:4 (0.5 us, 50 GB/s), All-Gather, K = 2 of 8 MB: chunks of 1 MB take 0.5 + 20 =
    // 20.5 us a link; an NPU lacks 6 chunks and has 3 incoming links: 2 x 20.5 = 41 us.
    let topo = parse_spec("fc:4", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 2, 8_000_000).unwrap();
    assert_eq!(chunked_bound_ps(&topo, &c), 41_000_000);
    // Twice the chunks of half the size: 12 x (0.5 + 10) / 3 = 42 us, more for the
    // extra latencies (to a picosecond: the division is in floating point, rounded down).
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 4, 8_000_000).unwrap();
    assert!(chunked_bound_ps(&topo, &c).abs_diff(42_000_000) <= 1);
}

#[test]
fn the_chunked_bound_counts_both_hops_through_a_switch_by_hand() {
    // switch:4 (50 GB/s, 0.25 us a hop), All-Gather, K = 2 of 8 MB: a transfer of a 1 MB
    // chunk holds the port down for both hops' latency, 0.5 + 20 = 20.5 us, and each NPU
    // lacks 6 chunks: 123 us (each transfer's figure is taken a picosecond low, lest the
    // latencies' sum round above the route's own).
    let topo = parse_spec("switch:4", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 2, 8_000_000).unwrap();
    assert_eq!(chunked_bound_ps(&topo, &c), 6 * (20_500_000 - 1));
    // Two DGX H100 nodes: a GPU takes in its 15 chunks of 1 MB through its NVSwitch port
    // (0.7 us, 450 GB/s: 2.9222 us each) and its NIC (2 us, 50 GB/s: 22 us each). By
    // 14 NVSwitch transfers, 40.9111 us, the NIC has carried one: 15.
    let topo = parse_spec("preset:dgx-h100", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 16_000_000).unwrap();
    assert_eq!(chunked_bound_ps(&topo, &c), 14 * (2_922_223 - 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), ..ProptestConfig::default() })]

    /// Synthesized schedules move whole chunks, one per link at a time: none beats it.
    #[test]
    fn synthesized_schedules_respect_the_chunked_bound(
        seed in any::<u64>(), builder in 0usize..8, kind in 0usize..8, k in 1usize..4, size_log in 10u32..28,
    ) {
        let spec = ["ring:6", "mesh:3x3", "fc:5", "preset:dgx1", "torus:2x4", "preset:dgx-a100,nodes=2", "switch:5", "clos:2x3,spine=2"][builder];
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let kind = CollectiveKind::ALL[kind];
        let root = kind.has_root().then_some(1);
        let c = Collective::over_all(&topo, kind, root, k, 1 << size_log).unwrap();
        let s = synthesize(&topo, &c, &SynthOptions::seeded(seed)).unwrap();
        let bound = chunked_bound_ps(&topo, &c);
        prop_assert!(bound > 0);
        prop_assert!(s.collective_time_ps() >= bound, "{spec} {kind} K={k}: {} < {bound}", s.collective_time_ps());
    }
}

#[test]
fn star_ports_bound_every_collective_by_hand() {
    // star:8: 50 GB/s up and down per port, 0.5 us a hop; S = 8 GB, a share 1 GB.
    let size = 8 * GB;
    // All-Gather: 7 shares into each port, 140 ms; one out, 20 ms; 56 share-messages
    // over 8 ports at 50 GB/s, 140 ms; the tightest cut is one port's.
    let ag = bounds("star:8", CollectiveKind::AllGather, size);
    assert_ms(ag.ingress_ps, 140.0);
    assert_ms(ag.egress_ps, 20.0);
    assert_ms(ag.traffic_ps, 140.0);
    assert_ms(ag.cut.unwrap().time_ps, 140.0);
    assert_eq!(ag.latency_ps, 1_000_000);
    // Reduce-Scatter is All-Gather turned round.
    let rs = bounds("star:8", CollectiveKind::ReduceScatter, size);
    assert_ms(rs.ingress_ps, 20.0);
    assert_ms(rs.egress_ps, 140.0);
    assert_ms(rs.best_ps(), 140.0);
    // All-Reduce: 2(n-1)/n S per port, 2 x 7/8 x 8 GB / 50 GB/s = 280 ms, above the
    // whole buffer through one port (160 ms) that ingress, egress and the cut give.
    let ar = bounds("star:8", CollectiveKind::AllReduce, size);
    assert_ms(ar.traffic_ps, 280.0);
    assert_ms(ar.ingress_ps, 160.0);
    assert_ms(ar.egress_ps, 160.0);
    assert_ms(ar.cut.unwrap().time_ps, 160.0);
    assert_eq!((ar.best_name(), ar.best_ps()), ("traffic", ar.traffic_ps));
}

/// Two leaves of four NPUs (100 GB/s ports) under one spine, each leaf's uplink 25 GB/s
/// each way (16:1 oversubscribed), 0.5 us a hop.
fn two_level() -> Topology {
    let link = |src, dst, bandwidth_gbps| Link {
        src,
        dst,
        bandwidth_gbps,
        latency_us: 0.5,
    };
    let (leaf, spine) = (|n: usize| 8 + n / 4, 10);
    let mut links = Vec::new();
    for n in 0..8 {
        links.extend([link(n, leaf(n), 100.0), link(leaf(n), n, 100.0)]);
    }
    for l in [8, 9] {
        links.extend([link(l, spine, 25.0), link(spine, l, 25.0)]);
    }
    let names = ["leaf0", "leaf1", "spine"].map(String::from).to_vec();
    Topology::with_switches("two-level", 8, names, links).unwrap()
}

#[test]
fn an_oversubscribed_spine_is_the_cut_bound_by_hand() {
    let t = two_level();
    let size = 8 * GB;
    let bounds = |kind| {
        let c = Collective::over_all(&t, kind, None, 1, size).unwrap();
        Bounds::new(&t, &c)
    };
    // All-Gather: each port takes 7 shares of 1 GB at 100 GB/s, 70 ms, and the ports
    // together 56 messages, 70 ms; but a leaf's four shares must cross its 25 GB/s
    // uplink: 160 ms, the cut. The farthest NPU is four hops away: 2 us.
    let ag = bounds(CollectiveKind::AllGather);
    assert_ms(ag.ingress_ps, 70.0);
    assert_ms(ag.egress_ps, 10.0);
    assert_ms(ag.traffic_ps, 70.0);
    assert_eq!(
        ag.cut,
        Some(CutBound {
            time_ps: 160 * 1_000_000_000,
            exact: true
        })
    );
    assert_eq!(ag.latency_ps, 2_000_000);
    assert_eq!((ag.best_name(), ag.best_ps()), ("cut", 160 * 1_000_000_000));
    let rs = bounds(CollectiveKind::ReduceScatter);
    assert_ms(rs.cut.unwrap().time_ps, 160.0);
    // All-Reduce: a leaf's partial sums, the whole 8 GB, must cross the uplink each way:
    // 320 ms, above the ports' 2 x 7/8 x 8 GB / 100 GB/s = 140 ms. The two leaves' gossip
    // (2 x 8 GB over the two uplinks of 25 GB/s) says 320 ms too.
    let ar = bounds(CollectiveKind::AllReduce);
    assert_ms(ar.traffic_ps, 320.0);
    assert_ms(ar.ingress_ps, 80.0);
    assert_ms(ar.cut.unwrap().time_ps, 320.0);
    assert_eq!(ar.best_ps(), ar.cut.unwrap().time_ps);
}

#[test]
fn the_chunked_bound_counts_every_transfers_latency_on_a_mesh_corner() {
    // mesh:4x4 (0.5 us, 50 GB/s), All-Gather of 1 GiB, K = 1: a chunk of 2^26 bytes takes
    // 0.5 + 1342.17728 us a link. The corner NPU lacks 15 chunks over 2 links, so one
    // link carries ceil(15 / 2) = 8 of them: 8 x 1342.67728 us. The ingress bound counts
    // the bytes alone, 15 x 2^26 bytes over 100 GB/s.
    let topo = parse_spec("mesh:4x4", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 1 << 30).unwrap();
    let corner = 8 * 1_342_677_280;
    assert_eq!(chunked_bound_ps(&topo, &c), corner);
    let general = Bounds::new(&topo, &c);
    assert_eq!(general.ingress_ps, 10_066_329_600);
    assert_eq!(general.chunked_ps, None);
    // For schedules of whole chunks it joins the bounds and is the best one.
    let chunked = Bounds::chunked(&topo, &c);
    assert_eq!(chunked.chunked_ps, Some(corner));
    assert_eq!(
        (chunked.best_name(), chunked.best_ps()),
        ("chunked", corner)
    );
    assert_eq!(
        Bounds {
            chunked_ps: None,
            ..chunked
        },
        general
    );
}

#[test]
fn the_chunked_bound_on_unequal_links_by_hand() {
    // Three NPUs fully connected, no latency; NPU 0 takes in over a 10 GB/s and a 5 GB/s
    // link, every other link is 40 GB/s. All-Gather of 3 MB, K = 2: chunks of 0.5 MB take
    // 50 and 100 us on NPU 0's links. It lacks 4 chunks: by 100 us its links carry 2 + 1,
    // by 150 us 3 + 1, so 150 us, where 4 / (1/50 + 1/100) would say 133.3 us.
    let link = |src, dst, bandwidth_gbps| Link {
        src,
        dst,
        bandwidth_gbps,
        latency_us: 0.0,
    };
    let topo = Topology::new(
        "uneven",
        3,
        vec![
            link(1, 0, 10.0),
            link(2, 0, 5.0),
            link(0, 1, 40.0),
            link(2, 1, 40.0),
            link(0, 2, 40.0),
            link(1, 2, 40.0),
        ],
    )
    .unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 2, 3_000_000).unwrap();
    assert_eq!(chunked_bound_ps(&topo, &c), 150_000_000);
    for seed in 0..8 {
        let s = synthesize(&topo, &c, &SynthOptions::seeded(seed)).unwrap();
        assert!(s.collective_time_ps() >= 150_000_000, "seed {seed}");
    }
}
