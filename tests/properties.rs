//! Properties of the whole pipeline on random connected heterogeneous topologies (random
//! links, bandwidths and latencies, some NPUs failed): every collective synthesizes,
//! passes the schedule checker, lowers and verifies for the default target (or the
//! lowering refuses it with a typed limit error); no time beats a lower bound; the
//! reversal and composition identities the synthesizer is built on hold; and what is
//! written reads back the same (MSCCL programs, topology JSON, schedule JSON).
//!
//! Case counts are small by default so the file runs in well under a minute; set
//! `PROPTEST_CASES` for a longer run.

use proptest::prelude::*;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::msccl::limits::check as check_limits;
use tacos::msccl::{
    parse_program, verify, write_program, Limits, LowerOptions, Target, VerifyOptions,
};
use tacos::pipeline::{self, Chunks, Options, Request};
use tacos::schedule::{check, Network, Schedule};
use tacos::sim::simulate_schedule;
use tacos::synth::SynthOptions;
use tacos::topology::{file as topology_file, Link, NpuId, SpecDefaults, Topology};
use tacos::units::Picos;
use tacos::Error;

/// Proptest cases: `PROPTEST_CASES` when set (as proptest's own default does), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A random fabric of 1 to 8 NPUs and 1 to 4 switches: switch i linked both ways to NPU
/// i mod n (so each has a link in and out), random one-way links between any two vertices
/// on top, each with its own figures.
fn fabric() -> impl Strategy<Value = Topology> {
    (1usize..9, 1usize..5)
        .prop_flat_map(|(n, s)| {
            let v = n + s;
            (
                Just((n, s)),
                prop::collection::vec((0..v, 0..v), 0..2 * v),
                prop::collection::vec((1.0f64..400.0, 0.0f64..5.0), 2 * s + 2 * v),
            )
        })
        .prop_map(|((n, s), extra, params)| {
            let pairs: Vec<(usize, usize)> = (0..s)
                .flat_map(|i| [(i % n, n + i), (n + i, i % n)])
                .collect();
            let links = links(pairs, extra, params);
            let names = (0..s).map(|i| format!("sw{i}")).collect();
            Topology::with_switches(format!("fabric{n}x{s}"), n, names, links).unwrap()
        })
}

/// The links of `pairs` and of the `extra` pairs that are not self loops, each pair once
/// (sorted), with the figures of `params` in that order.
fn links(
    mut pairs: Vec<(usize, usize)>,
    extra: Vec<(usize, usize)>,
    params: Vec<(f64, f64)>,
) -> Vec<Link> {
    pairs.extend(extra.into_iter().filter(|(a, b)| a != b));
    pairs.sort_unstable();
    pairs.dedup();
    pairs
        .into_iter()
        .zip(params)
        .map(|((src, dst), (bandwidth_gbps, latency_us))| Link {
            src,
            dst,
            bandwidth_gbps,
            latency_us,
        })
        .collect()
}

/// A random connected topology of 2 to 12 NPUs: a ring both ways through a random order
/// of the NPUs (each direction its own bandwidth and latency), random one-way links on
/// top, and up to two NPUs failed. Failing one NPU of a two-way ring leaves the rest
/// connected; failing two may not, and a collective there must be refused as
/// `Disconnected` (the properties below check that).
fn topology() -> impl Strategy<Value = Topology> {
    (2usize..13)
        .prop_flat_map(|n| {
            (
                Just(n),
                Just((0..n).collect::<Vec<NpuId>>()).prop_shuffle(),
                prop::collection::vec((0..n, 0..n), 0..n + 2),
                // Bandwidth (GB/s) and latency (us) of each link, the ring's first; a
                // latency of 0 now and then (NVLink-like figures round to it).
                prop::collection::vec(
                    (1.0f64..400.0, prop_oneof![1 => Just(0.0), 4 => 0.0f64..5.0]),
                    4 * n + 2,
                ),
                prop::collection::vec(0..n, 0..3),
            )
        })
        .prop_map(|(n, order, extra, params, failed)| {
            let mut pairs: Vec<(NpuId, NpuId)> = Vec::new();
            for i in 0..n {
                let (a, b) = (order[i], order[(i + 1) % n]);
                pairs.extend([(a, b), (b, a)]);
            }
            let links = links(pairs, extra, params);
            let topo = Topology::new(format!("random{n}"), n, links).unwrap();
            // At least two NPUs stay.
            let mut failed = failed;
            failed.sort_unstable();
            failed.dedup();
            failed.truncate(n - 2);
            topo.fail_npus(&failed).unwrap()
        })
}

/// A size from 4 KiB to 64 MiB, not always a power of two.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        (12u32..27).prop_map(|e| 1u64 << e),
        (1u64 << 12)..(1u64 << 26),
    ]
}

/// The collective `kind` over every alive NPU of `topo`, rooted at the alive NPU `root`
/// picks; None when the alive NPUs are not all connected (after asserting that this is
/// what the error says).
fn collective(
    topo: &Topology,
    kind: CollectiveKind,
    root: prop::sample::Index,
    k: usize,
    size_bytes: u64,
) -> Result<Option<Collective>, TestCaseError> {
    let npus = topo.alive_npus();
    let spec = CollectiveSpec {
        kind,
        root: kind.has_root().then(|| npus[root.index(npus.len())]),
        npus,
        chunks_per_npu: k,
        size_bytes,
    };
    match Collective::new(topo, spec) {
        Ok(c) => Ok(Some(c)),
        Err(e) => {
            prop_assert!(matches!(e, Error::Disconnected { .. }), "{e}");
            Ok(None)
        }
    }
}

/// The request for `c` as the pipeline takes it.
fn request(c: &Collective) -> Request {
    let spec = c.spec();
    Request {
        npus: Some(spec.npus.clone()),
        root: spec.root,
        ..Request::new(spec.kind, spec.size_bytes)
    }
}

/// The synthesized, checked schedule of `c` with `seed`, and its time by the checker.
fn synthesized(topo: &Topology, c: &Collective, seed: u64) -> (Schedule, Picos) {
    let k = c.spec().chunks_per_npu;
    let checked = pipeline::synthesize(topo, &request(c), k, &SynthOptions::seeded(seed))
        .unwrap_or_else(|e| panic!("{} {}: {e}", topo.name(), c.kind()));
    let time = checked.report().collective_time_ps;
    (checked.schedule().clone(), time)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(128), ..ProptestConfig::default() })]

    /// Synthesis, the checker, lowering and the verifier, end to end; every time at or
    /// above every bound.
    #[test]
    fn every_collective_lowers_to_a_verified_program_or_a_typed_limit_refusal(
        topo in topology(),
        kind in prop::sample::select(CollectiveKind::ALL.to_vec()),
        k in 1usize..4,
        seed in 0u64..1000,
        size_bytes in size(),
        root in any::<prop::sample::Index>(),
    ) {
        let Some(c) = collective(&topo, kind, root, k, size_bytes)? else {
            return Ok(());
        };
        let case = format!("{} {kind} K={k} seed {seed} {size_bytes} B", topo.name());
        let options = Options {
            chunks: Chunks::Fixed(k),
            seeds: vec![seed],
            ..Options::default()
        };
        let bounds = Bounds::new(&topo, &c);
        let best = bounds.best_ps();
        let verified = match pipeline::program(&topo, &request(&c), &options) {
            Ok(found) => found.kept,
            Err(Error::TargetLimit { violation, .. }) => {
                prop_assert!(violation.value > violation.limit, "{case}: {violation:?}");
                // The schedule itself is fine; only its program is too big.
                let (schedule, time) = synthesized(&topo, &c, seed);
                prop_assert!(!schedule.transfers.is_empty() && time >= best, "{case}");
                return Ok(());
            }
            Err(Error::Limit { value, limit, .. }) => {
                prop_assert!(value > limit, "{case}");
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{case}: {e}"))),
        };
        // The schedule passes the checker again, on its own.
        let schedule = verified.schedule();
        prop_assert_eq!(&schedule.collective, c.spec());
        let report = check(schedule, &topo).map_err(|e| TestCaseError::fail(format!("{case}: {e}")))?;
        prop_assert_eq!(report.collective_time_ps, verified.checked().report().collective_time_ps);
        // Synthesized schedules are contention-free, so the simulator, which starts each
        // transfer as soon as its link and its data allow, ends no later than their clock
        // (not always at it: the greedy matcher may leave a link idle that the simulator fills).
        let simulated = simulate_schedule(&topo, schedule)
            .map_err(|e| TestCaseError::fail(format!("{case}: {e}")))?
            .time_ps;
        prop_assert!(simulated <= report.collective_time_ps, "{case}: simulated {simulated}");
        // No time beats a lower bound: the schedule's, the simulator's nor its program's.
        prop_assert!(simulated >= best, "{case}: simulated {simulated} < {best}");
        prop_assert!(verified.time_ps() >= best, "{case}: program {} < {best}", verified.time_ps());
        // The program verifies again, and reads back from its XML as it was.
        let program = verified.program();
        let again = verify(program, &VerifyOptions::default());
        prop_assert!(again.is_correct(), "{case}: {:?}", again.problems.first());
        let xml = write_program(program);
        prop_assert_eq!(&verified.xml(), &xml);
        let parsed = parse_program(&xml, "written")
            .map_err(|e| TestCaseError::fail(format!("{case}: {e}")))?;
        prop_assert_eq!(&parsed, program, "{}", case);
    }

    /// Under a target with random tight limits, the pipeline gives a verified program
    /// within them, or refuses with the limit, the figure past it and the limit.
    #[test]
    fn tight_targets_give_a_program_within_them_or_a_typed_limit_refusal(
        topo in topology(),
        kind in prop::sample::select(CollectiveKind::ALL.to_vec()),
        k in 1usize..4,
        seed in 0u64..1000,
        root in any::<prop::sample::Index>(),
        steps in 1usize..24,
        tbs in 1usize..12,
        tbs_per_channel in 1usize..4,
        channels in 1usize..8,
        elements in 8usize..200,
    ) {
        let Some(c) = collective(&topo, kind, root, k, 1 << 20)? else {
            return Ok(());
        };
        let case = format!("{} {kind} K={k} seed {seed}", topo.name());
        let limits = Limits {
            max_steps_per_tb: steps,
            max_tbs: tbs,
            max_tbs_per_channel: tbs_per_channel,
            max_channels: channels,
            max_elements_per_rank: elements,
            ..Limits::default()
        };
        let options = Options {
            chunks: Chunks::Fixed(k),
            seeds: vec![seed],
            lowering: LowerOptions {
                target: Target { limits: limits.clone(), ..Target::default() },
                ..LowerOptions::default()
            },
            ..Options::default()
        };
        match pipeline::program(&topo, &request(&c), &options) {
            Ok(found) => {
                let program = found.kept.program();
                let broken = check_limits(program, &limits);
                prop_assert!(broken.is_empty(), "{case}: {broken:?}");
                // Spread over channels and threadblocks, it still reads back as written.
                let parsed = parse_program(&write_program(program), "written")
                    .map_err(|e| TestCaseError::fail(format!("{case}: {e}")))?;
                prop_assert_eq!(&parsed, program, "{}", case);
            }
            Err(Error::TargetLimit { violation, target, .. }) => {
                prop_assert!(violation.value > violation.limit, "{case}: {violation:?}");
                prop_assert!(target.contains(&format!("max {steps} steps")), "{case}: {target}");
            }
            Err(Error::Limit { value, limit, .. }) => prop_assert!(value > limit, "{case}"),
            Err(e) => return Err(TestCaseError::fail(format!("{case}: {e}"))),
        }
    }

    /// Reversal: a Reduce-Scatter (Reduce) is the time reversal of the All-Gather
    /// (Broadcast) synthesized on the reversed topology, compacted, which never delays a
    /// transfer: it takes at most as long (`synth::compose`). Composition:
    /// an All-Reduce keeps the faster of pipelined and phased, phased being the
    /// Reduce-Scatter and then the All-Gather, each as synthesized alone with the same seed.
    #[test]
    fn reversal_and_composition_identities_hold(
        topo in topology(),
        k in 1usize..4,
        seed in 0u64..1000,
        size_bytes in size(),
        root in any::<prop::sample::Index>(),
    ) {
        let reversed = topo.reversed();
        for (combining, copying) in [
            (CollectiveKind::ReduceScatter, CollectiveKind::AllGather),
            (CollectiveKind::Reduce, CollectiveKind::Broadcast),
        ] {
            let Some(c) = collective(&topo, combining, root, k, size_bytes)? else {
                return Ok(());
            };
            let Some(dual) = collective(&reversed, copying, root, k, size_bytes)? else {
                return Err(TestCaseError::fail("the reversal of a connected topology is connected"));
            };
            let (time, dual_time) = (synthesized(&topo, &c, seed).1, synthesized(&reversed, &dual, seed).1);
            prop_assert!(time <= dual_time, "{} {}: {time} > {dual_time}", topo.name(), combining);
        }
        let Some(all_reduce) = collective(&topo, CollectiveKind::AllReduce, root, k, size_bytes)? else {
            return Ok(());
        };
        let checked = pipeline::synthesize(&topo, &request(&all_reduce), k, &SynthOptions::seeded(seed))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let time = checked.report().collective_time_ps;
        let phases = checked.all_reduce().expect("an All-Reduce reports its composition");
        prop_assert_eq!(time, phases.pipelined_ps.min(phases.phased_ps));
        prop_assert_eq!(phases.pipelined, phases.pipelined_ps < phases.phased_ps);
        let alone = |kind| {
            let c = collective(&topo, kind, root, k, size_bytes)?
                .expect("connected, as the All-Reduce is");
            Ok::<_, TestCaseError>(synthesized(&topo, &c, seed).1)
        };
        let (rs, ag) = (alone(CollectiveKind::ReduceScatter)?, alone(CollectiveKind::AllGather)?);
        prop_assert_eq!(phases.reduce_scatter_ps, rs);
        prop_assert_eq!(phases.phased_ps, rs + ag);
        prop_assert!(time >= Bounds::new(&topo, &all_reduce).best_ps());
    }

    /// A random fabric (NPUs and switches, links between any two vertices) reads back from
    /// its JSON the same; every route joins its two NPUs through switches only.
    #[test]
    fn fabrics_read_back_the_same_and_route_through_switches_only(topo in fabric()) {
        let text = topology_file::to_json(&topo);
        let read = topology_file::parse(&text, "written", &SpecDefaults::default())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&read, &topo);
        for a in 0..topo.npus() {
            for b in (0..topo.npus()).filter(|&b| b != a) {
                let Some(route) = topo.route(a, b) else { continue };
                prop_assert_eq!(topo.link(route[0]).src, a);
                prop_assert_eq!(topo.link(route[route.len() - 1]).dst, b);
                for w in route.windows(2) {
                    let via = topo.link(w[0]).dst;
                    prop_assert_eq!(via, topo.link(w[1]).src);
                    prop_assert!(topo.is_switch(via), "route {:?} crosses NPU {}", route, via);
                }
            }
        }
    }

    /// Topology and schedule JSON read back to what was written.
    #[test]
    fn topology_and_schedule_json_read_back_the_same(
        topo in topology(),
        kind in prop::sample::select(CollectiveKind::ALL.to_vec()),
        k in 1usize..3,
        seed in 0u64..1000,
        size_bytes in size(),
        root in any::<prop::sample::Index>(),
    ) {
        let text = topology_file::to_json(&topo);
        let read = topology_file::parse(&text, "written", &SpecDefaults::default())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&read, &topo);
        prop_assert_eq!(read.name(), topo.name());
        let Some(c) = collective(&topo, kind, root, k, size_bytes)? else {
            return Ok(());
        };
        let (schedule, _) = synthesized(&topo, &c, seed);
        // Written as it is made, recording the network: the same text as the schedule
        // holding that network gives, and it reads back as that schedule.
        let mut streamed = Vec::new();
        schedule.write_json_recording(&topo, &mut streamed).unwrap();
        let recording = Schedule {
            network: Some(Network::of(&topo)),
            ..schedule.clone()
        };
        prop_assert_eq!(String::from_utf8(streamed).unwrap(), recording.to_json());
        for schedule in [schedule, recording] {
            let text = schedule.to_json();
            let read = Schedule::from_json(&text, "written")
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&read, &schedule);
        }
    }
}

/// Found by the first property above when transfers were rounded to the nearest
/// picosecond: a schedule could end a few picoseconds before its lower bound, with an
/// efficiency above 1. Two NPUs, 1 GB/s each way, no latency, All-Gather of 128 KiB with
/// K = 3: each NPU takes in 64 KiB over one link, at least 65,536,000 ps; each of its three
/// chunks of 21,845.33 bytes takes 21,845,333.3 ps, which rounded down ended the three at
/// 65,535,999 ps. Rounded up they end at 65,536,002 ps.
#[test]
fn rounding_never_puts_a_schedule_below_its_bound() {
    let link = |src, dst| Link {
        src,
        dst,
        bandwidth_gbps: 1.0,
        latency_us: 0.0,
    };
    let topo = Topology::new("two", 2, vec![link(0, 1), link(1, 0)]).unwrap();
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 3, 128 << 10).unwrap();
    let (_, time) = synthesized(&topo, &c, 0);
    let bounds = Bounds::new(&topo, &c);
    assert_eq!(bounds.best_ps(), 65_536_000);
    assert!(time >= bounds.best_ps(), "{time} ps");
    assert!(bounds.efficiency(time) <= 1.0);
}
