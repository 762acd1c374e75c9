//! Every collective, synthesized and then executed by the schedule checker: on every
//! builder and preset, on random heterogeneous directed topologies, over NPU subsets that
//! need relays, with failures, and several collectives at once.

use proptest::prelude::*;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::schedule::{check, check_concurrent};
use tacos::synth::{synthesize, synthesize_concurrent, SynthOptions};
use tacos::topology::{parse_spec, Link, NpuId, SpecDefaults, Topology};
use tacos::units::{alpha_beta_ps, Picos};
use tacos::Error;

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn collective(
    topo: &Topology,
    kind: CollectiveKind,
    npus: Vec<NpuId>,
    root: NpuId,
    k: usize,
    size: u64,
) -> Collective {
    let root = kind.has_root().then_some(root);
    Collective::new(
        topo,
        CollectiveSpec {
            kind,
            root,
            npus,
            chunks_per_npu: k,
            size_bytes: size,
        },
    )
    .unwrap_or_else(|e| panic!("{} {kind}: {e}", topo.name()))
}

/// Synthesizes and checks; returns the collective time.
fn synth_checked(topo: &Topology, c: &Collective, seed: u64) -> Picos {
    let schedule = synthesize(topo, c, &SynthOptions::seeded(seed))
        .unwrap_or_else(|e| panic!("{} {} seed {seed}: {e}", topo.name(), c.kind()));
    assert_eq!(&schedule.collective, c.spec());
    check(&schedule, topo)
        .unwrap_or_else(|e| panic!("{} {} seed {seed}: {e}", topo.name(), c.kind()))
        .collective_time_ps
}

const BUILDERS: &[&str] = &[
    "ring:5",
    "uniring:5",
    "fc:4",
    "switch:6,d=2",
    "mesh:3x3",
    "torus:3x3",
    "mesh:2x2x2",
    "torus:3x2x2",
    "hypercube:3",
    "dragonfly:2x3",
    "rfs:2x2x2,bw=200:100:50",
    "multi:U3xL2,bw=100:25",
    "preset:dgx1",
    "preset:dgx2",
    "preset:hgx-a100",
    "preset:hgx-h100",
    "preset:dgx-a100,nodes=2",
    "preset:dgx-h100,nodes=2",
    "preset:ndv4",
];

#[test]
fn every_collective_checks_on_every_builder_and_preset() {
    for s in BUILDERS {
        let topo = spec(s);
        let all = topo.alive_npus();
        let last = *all.last().unwrap();
        for kind in CollectiveKind::ALL {
            for (seed, k) in [(0, 1), (1, 3), (2, 2)] {
                // Rooted collectives alternate between the first and the last NPU.
                let root = if seed % 2 == 0 { all[0] } else { last };
                let c = collective(&topo, kind, all.clone(), root, k, 1 << 20);
                synth_checked(&topo, &c, seed);
            }
        }
    }
}

#[test]
fn sub_collectives_relay_through_npus_outside_them() {
    // The diagonal of a 4x4 mesh: no two of its NPUs are neighbours, so every chunk must
    // cross NPUs that take no part. Ranks are given out of id order on purpose.
    let topo = spec("mesh:4x4");
    let npus = vec![10, 0, 15, 5];
    for kind in CollectiveKind::ALL {
        for seed in 0..3 {
            let c = collective(&topo, kind, npus.clone(), 15, 2, 1 << 20);
            synth_checked(&topo, &c, seed);
        }
    }
    // The paper's kind of subset: two of four racks of 3D-RFS.
    let rfs = spec("rfs:2x4x4,bw=200:100:50");
    let racks: Vec<NpuId> = (0..8).chain(16..24).collect();
    for kind in CollectiveKind::ALL {
        let c = collective(&rfs, kind, racks.clone(), 16, 1, 1 << 20);
        synth_checked(&rfs, &c, 0);
    }
}

#[test]
fn reduce_scatter_takes_as_long_as_all_gather_on_the_reversed_topology() {
    let asymmetric = Topology::new(
        "asymmetric",
        4,
        vec![
            link(0, 1, 50.0, 0.5),
            link(1, 2, 25.0, 1.0),
            link(2, 3, 100.0, 0.2),
            link(3, 0, 10.0, 0.0),
            link(1, 0, 80.0, 0.7),
            link(2, 0, 40.0, 0.3),
        ],
    )
    .unwrap();
    for topo in [
        spec("uniring:5"),
        spec("multi:U3xL2,bw=100:25"),
        asymmetric,
        spec("mesh:3x3"),
        spec("rfs:2x4x2,bw=200:100:50"),
        spec("preset:dgx1"),
    ] {
        let reversed = topo.reversed();
        let all = topo.alive_npus();
        for (seed, k) in [(0, 1), (7, 3)] {
            for (kind, dual, root) in [
                (CollectiveKind::ReduceScatter, CollectiveKind::AllGather, 0),
                (CollectiveKind::Reduce, CollectiveKind::Broadcast, 1),
            ] {
                let combining = collective(&topo, kind, all.clone(), root, k, 1 << 24);
                let copying = collective(&reversed, dual, all.clone(), root, k, 1 << 24);
                assert_eq!(
                    synth_checked(&topo, &combining, seed),
                    synth_checked(&reversed, &copying, seed),
                    "{} {kind}",
                    topo.name()
                );
            }
        }
    }
    // Symmetric topologies are their own reversal, so there Reduce-Scatter and All-Gather
    // take the same time.
    let mesh = spec("mesh:3x3");
    assert!(mesh.reversed() == mesh);
    assert!(spec("uniring:5").reversed() != spec("uniring:5"));
}

#[test]
fn reduce_scatter_on_a_one_way_ring_takes_the_hand_computed_time() {
    // One-way ring of 4, 4 MB: each NPU reduces 1 MB chunks; every step each NPU can only
    // pass one chunk to its successor, and a chunk's sum needs 3 hops: 3 x (0.5 us + 1e6 B
    // / 50 GB/s) = 3 x 20.5 us.
    let topo = spec("uniring:4");
    let rs = collective(
        &topo,
        CollectiveKind::ReduceScatter,
        topo.alive_npus(),
        0,
        1,
        4_000_000,
    );
    assert_eq!(
        synth_checked(&topo, &rs, 0),
        3 * alpha_beta_ps(0.5, 50.0, 1e6)
    );
    assert_eq!(3 * alpha_beta_ps(0.5, 50.0, 1e6), 61_500_000);
}

#[test]
fn all_reduce_keeps_the_faster_of_pipelined_and_phased() {
    for (s, k) in [
        ("mesh:4x4", 4),
        ("rfs:2x4x2,bw=200:100:50", 2),
        ("uniring:5", 3),
    ] {
        let topo = spec(s);
        let all = topo.alive_npus();
        let seed = 3;
        let ar = collective(&topo, CollectiveKind::AllReduce, all.clone(), 0, k, 1 << 26);
        let synthesis = synthesize_concurrent(
            &topo,
            std::slice::from_ref(&ar),
            &SynthOptions::seeded(seed),
        )
        .unwrap();
        let time = check(&synthesis.schedules[0], &topo)
            .unwrap()
            .collective_time_ps;
        let times = synthesis
            .all_reduce
            .expect("an All-Reduce reports both compositions");
        assert_eq!(time, times.pipelined_ps.min(times.phased_ps), "{s}");
        assert_eq!(times.pipelined, times.pipelined_ps < times.phased_ps, "{s}");
        // Phased is Reduce-Scatter, a barrier, then All-Gather: the sum of the two
        // synthesized on their own with the same seed.
        let rs = collective(
            &topo,
            CollectiveKind::ReduceScatter,
            all.clone(),
            0,
            k,
            1 << 26,
        );
        let ag = collective(&topo, CollectiveKind::AllGather, all.clone(), 0, k, 1 << 26);
        let (rs_ps, ag_ps) = (
            synth_checked(&topo, &rs, seed),
            synth_checked(&topo, &ag, seed),
        );
        assert_eq!(times.reduce_scatter_ps, rs_ps, "{s}");
        assert_eq!(times.phased_ps, rs_ps + ag_ps, "{s}");
    }
}

#[test]
fn paper_failure_case_synthesizes_and_checks() {
    // 4x4 mesh, NPUs 7 and 9 failed. NPU 3 keeps one link each way (to NPU 2), so it must
    // take in a chunk-sized message for every one of the 14 chunk positions over one
    // 50 GB/s link: at least 1 GiB / 50 GB/s. Phased, its link in carries 13 of 14 chunks
    // twice over (partial sums out are on the other direction), so pipelining must win.
    let topo = spec("mesh:4x4").fail_npus(&[7, 9]).unwrap();
    let all = topo.alive_npus();
    assert_eq!(all.len(), 14);
    let floor = alpha_beta_ps(0.5, 50.0, (1u64 << 30) as f64);
    for k in [1, 4] {
        let ar = collective(&topo, CollectiveKind::AllReduce, all.clone(), 0, k, 1 << 30);
        let synthesis =
            synthesize_concurrent(&topo, std::slice::from_ref(&ar), &SynthOptions::default())
                .unwrap();
        let time = check(&synthesis.schedules[0], &topo)
            .unwrap()
            .collective_time_ps;
        let times = synthesis.all_reduce.unwrap();
        assert!(time >= floor, "K={k}: {time} ps beats the bound {floor} ps");
        if k > 1 {
            assert!(times.pipelined, "K={k}: {times:?}");
        }
    }
}

#[test]
fn three_concurrent_sub_collectives_share_a_6x6_mesh_without_contention() {
    // Three interleaved groups of 12 (NPU (x, y) is in group (x + y) mod 3): no two
    // members of a group are neighbours, so each group routes through the others' NPUs
    // while they run their own collective. Synthesized jointly, as one matching problem,
    // the three schedules together use every link for one chunk at a time.
    let topo = spec("mesh:6x6");
    let group = |g: usize| -> Vec<NpuId> { (0..36).filter(|n| (n % 6 + n / 6) % 3 == g).collect() };
    for kinds in [
        [CollectiveKind::AllReduce; 3],
        [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllToAll,
        ],
    ] {
        let collectives: Vec<Collective> = (0..3)
            .map(|g| collective(&topo, kinds[g], group(g), 0, 2, 3 << 20))
            .collect();
        let synthesis =
            synthesize_concurrent(&topo, &collectives, &SynthOptions::seeded(5)).unwrap();
        assert_eq!(synthesis.schedules.len(), 3);
        check_concurrent(&synthesis.schedules, &topo).unwrap();
        // Synthesized one by one, each is fine alone but together they collide.
        let separate: Vec<_> = collectives
            .iter()
            .map(|c| synthesize(&topo, c, &SynthOptions::seeded(5)).unwrap())
            .collect();
        for s in &separate {
            check(s, &topo).unwrap();
        }
        let err = check_concurrent(&separate, &topo).unwrap_err().to_string();
        assert!(err.contains("still occupies the link"), "{err}");
    }
}

#[test]
fn bad_input_gets_clear_errors() {
    let topo = spec("mesh:4x4").fail_npus(&[7]).unwrap();
    let base = CollectiveSpec {
        kind: CollectiveKind::Gather,
        root: Some(0),
        npus: topo.alive_npus(),
        chunks_per_npu: 1,
        size_bytes: 1 << 20,
    };
    let err = |spec: CollectiveSpec| match Collective::new(&topo, spec) {
        Ok(_) => panic!("should be rejected"),
        Err(e) => e.to_string(),
    };
    // The NPU at fault, as a field, and the reason in the message.
    let at_fault = |spec: CollectiveSpec| match Collective::new(&topo, spec) {
        Err(tacos::Error::Collective { npu, problem }) => (npu, problem),
        other => panic!("not a collective's problem: {other:?}"),
    };
    let (npu, msg) = at_fault(CollectiveSpec {
        root: Some(16),
        ..base.clone()
    });
    assert_eq!(npu, Some(16));
    assert!(msg.contains("root 16 does not exist"), "{msg}");
    let (npu, msg) = at_fault(CollectiveSpec {
        root: Some(7),
        ..base.clone()
    });
    assert_eq!(npu, Some(7));
    assert!(msg.contains("root 7 has failed"), "{msg}");
    let (npu, msg) = at_fault(CollectiveSpec {
        npus: vec![0, 7],
        ..base.clone()
    });
    assert_eq!(npu, Some(7));
    assert!(msg.contains("NPU 7 has failed"), "{msg}");
    let (npu, msg) = at_fault(CollectiveSpec {
        npus: vec![0, 99],
        ..base.clone()
    });
    assert_eq!(npu, Some(99));
    assert!(msg.contains("NPU 99 does not exist"), "{msg}");
    let msg = err(CollectiveSpec {
        chunks_per_npu: 0,
        ..base.clone()
    });
    assert!(msg.contains("at least 1"), "{msg}");
    // On the command line too, where K may also be `auto`.
    let synth = |k: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tacos"))
            .args(["synth", "mesh:2x2", "-s", "1MiB", "-k", k])
            .output()
            .unwrap()
    };
    let refused = synth("0");
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(msg.contains("from 1 to 1048576, or auto"), "{msg}");
    assert!(synth("auto").status.success());
    // Failing NPUs 1 and 4 cuts NPU 0 off: a subset holding it cannot complete.
    let cut = spec("mesh:4x4").fail_npus(&[1, 4]).unwrap();
    for kind in [CollectiveKind::AllReduce, CollectiveKind::Scatter] {
        match Collective::new(
            &cut,
            CollectiveSpec {
                kind,
                root: kind.has_root().then_some(5),
                npus: vec![5, 0, 10],
                ..base.clone()
            },
        ) {
            Err(e @ Error::Disconnected { .. }) => assert!(e.to_string().contains("NPUs 0"), "{e}"),
            other => panic!("{kind}: expected a disconnection error, got {other:?}"),
        }
    }
}

fn link(src: NpuId, dst: NpuId, bandwidth_gbps: f64, latency_us: f64) -> Link {
    Link {
        src,
        dst,
        bandwidth_gbps,
        latency_us,
    }
}

/// A random strongly connected directed topology: a one-way ring through a random order
/// of the NPUs, plus random extra links, every link with its own bandwidth and latency.
fn random_topology() -> impl Strategy<Value = Topology> {
    (2usize..12)
        .prop_flat_map(|n| {
            (
                Just(n),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                prop::collection::vec((0..n, 0..n), 0..2 * n),
                prop::collection::vec((1.0f64..400.0, 0.0f64..2.0), n + 2 * n),
            )
        })
        .prop_map(|(n, order, extra, params)| {
            let mut pairs: Vec<(NpuId, NpuId)> =
                (0..n).map(|i| (order[i], order[(i + 1) % n])).collect();
            pairs.extend(extra.into_iter().filter(|(a, b)| a != b));
            pairs.sort_unstable();
            pairs.dedup();
            let links = pairs
                .into_iter()
                .zip(params)
                .map(|((a, b), (bw, lat))| link(a, b, bw, lat))
                .collect();
            Topology::new("random", n, links).unwrap()
        })
}

/// A random collective on `topo`: kind, K, NPU subset and root from the given draws.
fn random_collective(
    topo: &Topology,
    kind: CollectiveKind,
    k: usize,
    subset_bits: u16,
    root_pick: prop::sample::Index,
) -> Collective {
    let n = topo.npus();
    let mut npus: Vec<NpuId> = (0..n).filter(|i| subset_bits & (1 << i) != 0).collect();
    if npus.is_empty() {
        npus.push(n - 1);
    }
    let root = npus[root_pick.index(npus.len())];
    collective(topo, kind, npus, root, k, 1 << 16)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_directed_heterogeneous_topologies_never_fail(
        topo in random_topology(),
        kind in prop::sample::select(CollectiveKind::ALL.to_vec()),
        k in 1usize..4,
        seed in 0u64..1000,
        subset_bits in any::<u16>(),
        root_pick in any::<prop::sample::Index>(),
    ) {
        let c = random_collective(&topo, kind, k, subset_bits, root_pick);
        synth_checked(&topo, &c, seed);
    }

    /// With a failed NPU or link, whenever the collective can still be completed.
    #[test]
    fn random_failures_never_fail_a_completable_collective(
        topo in random_topology(),
        kind in prop::sample::select(CollectiveKind::ALL.to_vec()),
        seed in 0u64..1000,
        failed in any::<prop::sample::Index>(),
        fail_link in any::<bool>(),
        subset_bits in any::<u16>(),
        root_pick in any::<prop::sample::Index>(),
    ) {
        let topo = if fail_link {
            let l = topo.link(failed.index(topo.links().len())).clone();
            topo.fail_links(&[(l.src, l.dst)]).unwrap()
        } else {
            topo.fail_npus(&[failed.index(topo.npus())]).unwrap()
        };
        let alive = topo.alive_npus();
        let mut npus: Vec<NpuId> = alive
            .iter()
            .copied()
            .filter(|&i| subset_bits & (1 << i) != 0)
            .collect();
        if npus.is_empty() {
            npus.push(alive[0]);
        }
        let root = npus[root_pick.index(npus.len())];
        let spec = CollectiveSpec {
            kind,
            root: kind.has_root().then_some(root),
            npus,
            chunks_per_npu: 2,
            size_bytes: 1 << 16,
        };
        match Collective::new(&topo, spec) {
            Ok(c) => {
                synth_checked(&topo, &c, seed);
            }
            Err(e) => prop_assert!(matches!(e, Error::Disconnected { .. }), "{e}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Two collectives of different kinds, subsets and chunk sizes matched together.
    #[test]
    fn random_concurrent_pairs_share_links_without_contention(
        topo in random_topology(),
        kinds in prop::collection::vec(prop::sample::select(CollectiveKind::ALL.to_vec()), 2),
        ks in prop::collection::vec(1usize..4, 2),
        subsets in prop::collection::vec(any::<u16>(), 2),
        roots in prop::collection::vec(any::<prop::sample::Index>(), 2),
        seed in 0u64..1000,
    ) {
        let collectives: Vec<Collective> = (0..2)
            .map(|i| random_collective(&topo, kinds[i], ks[i], subsets[i], roots[i]))
            .collect();
        let synthesis = synthesize_concurrent(&topo, &collectives, &SynthOptions::seeded(seed))
            .unwrap_or_else(|e| panic!("{kinds:?}: {e}"));
        check_concurrent(&synthesis.schedules, &topo).unwrap_or_else(|e| panic!("{kinds:?}: {e}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The reversal keeps the All-Gather's time and the re-timing of the reductions only
    /// moves them earlier, so Reduce-Scatter is never slower than All-Gather on the
    /// reversed topology (equal on the topologies above; rarely shorter on random ones).
    #[test]
    fn reduce_scatter_never_outlasts_all_gather_on_the_reversed_topology(
        topo in random_topology(),
        k in 1usize..4,
        seed in 0u64..100,
    ) {
        let all = topo.alive_npus();
        let reversed = topo.reversed();
        let rs = collective(&topo, CollectiveKind::ReduceScatter, all.clone(), 0, k, 1 << 20);
        let ag = collective(&reversed, CollectiveKind::AllGather, all, 0, k, 1 << 20);
        prop_assert!(synth_checked(&topo, &rs, seed) <= synth_checked(&reversed, &ag, seed));
    }
}
