//! Streamed synthesis (`synth::synthesize_streamed`, `synth::prepare_streamed`): the
//! transfers `synthesize` makes, handed on in start order without the schedule being
//! held; combining collectives as the time reversal of their dual's matching, spooled on
//! disk; refused where the whole matching is needed.

use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::pipeline::synthesize_to_stream;
use tacos::schedule::{check, Schedule, Transfer};
use tacos::synth::{
    prepare_streamed, spooled_matchings, synthesize, synthesize_streamed, SynthOptions,
};
use tacos::topology::{file, parse_spec, Link, SpecDefaults, Topology};

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

/// `npus` NPUs on one switch, each port twice as fast down as up: no link has a twin the
/// other way as fast, so a matching on the reversed topology is not one on it.
fn lopsided_star(npus: usize) -> Topology {
    let links: Vec<String> = (0..npus)
        .flat_map(|npu| {
            [
                format!(r#"{{"src": {npu}, "dst": "s", "bandwidth_gbps": 50, "latency_us": 0.2}}"#),
                format!(
                    r#"{{"src": "s", "dst": {npu}, "bandwidth_gbps": 100, "latency_us": 0.2}}"#
                ),
            ]
        })
        .collect();
    let text = format!(
        r#"{{"name": "lopsided-star-{npus}", "npus": {npus}, "switches": ["s"], "links": [{}]}}"#,
        links.join(", ")
    );
    file::parse(&text, "lopsided-star.json", &SpecDefaults::default()).unwrap()
}

fn over_all(topo: &Topology, kind: CollectiveKind, k: usize) -> Collective {
    Collective::over_all(topo, kind, kind.has_root().then_some(0), k, 1 << 24).unwrap()
}

fn sorted(mut transfers: Vec<Transfer>) -> Vec<Transfer> {
    transfers.sort_unstable_by_key(|t| (t.start_ps, t.src(), t.dst(), t.chunk()));
    transfers
}

/// The same transfers as the held schedule, in start order, counted and timed alike; and
/// what was streamed passes the checker. Cases: one link speed (no copy is ever
/// replaced), two speeds (copies replaced and dropped on arrival, so transfers settle out
/// of start order), switches, a Broadcast.
#[test]
fn streamed_transfers_are_the_held_schedules_in_start_order() {
    let cases = [
        ("mesh:8x8", CollectiveKind::AllGather, 1),
        ("mesh:6x6,bw=100:25", CollectiveKind::AllGather, 2),
        ("rfs:2x4x4,bw=200:100:50", CollectiveKind::AllGather, 1),
        ("preset:dgx-a100,nodes=2", CollectiveKind::AllGather, 2),
        ("torus:4x4", CollectiveKind::Broadcast, 4),
    ];
    for (spec, kind, k) in cases {
        let topo = topo(spec);
        let collective = over_all(&topo, kind, k);
        for seed in [0, 5] {
            let options = SynthOptions::seeded(seed);
            let held = synthesize(&topo, &collective, &options).unwrap();
            let mut streamed = Vec::new();
            let made = synthesize_streamed(&topo, &collective, &options, &mut |t| {
                streamed.push(t);
                Ok(())
            })
            .unwrap();
            let what = format!("{kind} on {spec}, seed {seed}");
            assert!(
                streamed.windows(2).all(|w| w[0].start_ps <= w[1].start_ps),
                "{what}: not in start order"
            );
            assert_eq!(made.transfers, streamed.len() as u64, "{what}");
            assert_eq!(made.collective_time_ps, held.collective_time_ps(), "{what}");
            let streamed = sorted(streamed);
            assert_eq!(streamed, sorted(held.transfers.clone()), "{what}");
            let schedule = Schedule::new(
                topo.name(),
                collective.spec().clone(),
                collective.chunk_bytes(),
                streamed,
            );
            check(&schedule, &topo).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}

#[test]
fn a_streamed_synthesis_refuses_what_needs_the_whole_matching() {
    let mesh = topo("mesh:4x4");
    let refused = |collective: &Collective| {
        synthesize_streamed(&mesh, collective, &SynthOptions::default(), &mut |_| Ok(()))
            .unwrap_err()
            .to_string()
    };
    // Reductions are the time reversal of a whole matching: they go through a spool.
    let e = refused(&over_all(&mesh, CollectiveKind::ReduceScatter, 1));
    assert!(e.contains("spool"), "{e}");
    // A sub-collective relays chunks through NPUs that do not want them, pruned afterwards.
    let part = Collective::new(
        &mesh,
        CollectiveSpec {
            kind: CollectiveKind::AllGather,
            root: None,
            npus: vec![0, 5, 10, 15],
            chunks_per_npu: 1,
            size_bytes: 1 << 20,
        },
    )
    .unwrap();
    let e = refused(&part);
    assert!(e.contains("every alive NPU"), "{e}");
}

/// A sink's error stops the matching and comes back as it was.
#[test]
fn a_sink_error_stops_the_synthesis() {
    let mesh = topo("mesh:4x4");
    let collective = over_all(&mesh, CollectiveKind::AllGather, 1);
    let mut seen = 0;
    let e = synthesize_streamed(&mesh, &collective, &SynthOptions::default(), &mut |_| {
        seen += 1;
        Err(tacos::error::Error::Synthesis("disk full".into()))
    })
    .unwrap_err();
    assert_eq!(seen, 1);
    assert!(e.to_string().contains("disk full"), "{e}");
}

/// `pipeline::synthesize_to_stream` checks the file as it is written where the pool has a
/// second thread and after it where it has one: the same bytes and report either way,
/// and the file reads back to the held schedule.
#[test]
fn a_stream_file_is_the_same_checked_with_one_thread_or_two() {
    let mesh = topo("mesh:8x8");
    let collective = over_all(&mesh, CollectiveKind::AllGather, 2);
    let dir = std::env::temp_dir().join(format!("tacos-streamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |threads: usize| {
        let path = dir.join(format!("t{threads}.tts"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let made = pool
            .install(|| {
                synthesize_to_stream(
                    &mesh,
                    &collective,
                    &SynthOptions::seeded(4),
                    &path,
                    &mut |_| {},
                )
            })
            .unwrap();
        assert!(made.checked >= made.synthesized);
        (made.streamed, made.report, std::fs::read(&path).unwrap())
    };
    let (one, report_one, bytes_one) = run(1);
    let (two, report_two, bytes_two) = run(2);
    assert_eq!(one, two);
    assert_eq!(report_one, report_two);
    assert_eq!(bytes_one, bytes_two);
    // 64 NPUs each lack 63 x 2 chunks.
    assert_eq!(one.transfers, 64 * 63 * 2);
    assert_eq!(report_one.transfers as u64, one.transfers);
    let held = synthesize(&mesh, &collective, &SynthOptions::seeded(4)).unwrap();
    let read = Schedule::read(&dir.join("t1.tts")).unwrap();
    assert_eq!(sorted(read.transfers), sorted(held.transfers));
    // Nothing but the two files: no temporary file left behind.
    let names = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(names, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A path that cannot be written is an error naming it, before any synthesis.
#[test]
fn an_unwritable_stream_path_is_named() {
    let mesh = topo("mesh:4x4");
    let collective = over_all(&mesh, CollectiveKind::AllGather, 1);
    let path = std::path::Path::new("/nonexistent-dir/x.tts");
    let e = synthesize_to_stream(
        &mesh,
        &collective,
        &SynthOptions::seeded(0),
        path,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent-dir/x.tts"), "{e}");
}

/// A combining collective streamed through its spools is, transfer for transfer, the
/// time reversal of the held All-Gather (Broadcast for Reduce) synthesized on the
/// reversed topology with the same seed, and for an All-Reduce then, from when the last
/// reduction ends (the phased composition), an All-Gather: that same dual's copies where
/// every link has an equal twin the other way and every route through switches is its
/// reverse's taken back (meshes, bidirectional rings, the DGX and leaf-spine fabrics, with
/// their large rails matched by port), else the held All-Gather on the topology (a
/// unidirectional ring, a switch whose ports run faster down than up). A second
/// derivation of every transfer, independent of the spool and the reordering. The file
/// passes the held checker, which replays every contribution (and routes every transfer
/// as `Topology::route` does); the spools are removed.
#[test]
fn streamed_reductions_are_the_dual_matching_reversed() {
    // (topology, collective, K, whether an All-Reduce's two halves are one matching)
    let cases = [
        (topo("mesh:4x4"), CollectiveKind::AllReduce, 1, true),
        (
            topo("mesh:6x6,bw=100:25"),
            CollectiveKind::AllReduce,
            2,
            true,
        ),
        (topo("ring:5"), CollectiveKind::AllReduce, 2, true),
        (topo("uniring:6"), CollectiveKind::AllReduce, 2, false),
        (
            topo("preset:dgx-a100,nodes=2"),
            CollectiveKind::AllReduce,
            2,
            true,
        ),
        (
            topo("preset:dgx-a100,nodes=24"),
            CollectiveKind::AllReduce,
            1,
            true,
        ),
        (topo("clos:4x2"), CollectiveKind::AllReduce, 1, true),
        (lopsided_star(6), CollectiveKind::AllReduce, 2, false),
        (lopsided_star(20), CollectiveKind::AllReduce, 1, false),
        (topo("ring:6"), CollectiveKind::ReduceScatter, 3, false),
        (
            topo("rfs:2x4x4,bw=200:100:50"),
            CollectiveKind::ReduceScatter,
            1,
            false,
        ),
        (topo("torus:4x4"), CollectiveKind::Reduce, 2, false),
    ];
    let dir = std::env::temp_dir().join(format!("tacos-streamed-sums-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (topo, kind, k, one_matching) in cases {
        let spec = topo.name().to_string();
        let collective = over_all(&topo, kind, k);
        if kind == CollectiveKind::AllReduce {
            let matchings = if one_matching { 1 } else { 2 };
            assert_eq!(spooled_matchings(&topo, &collective), matchings, "{spec}");
        }
        let seed = 3;
        let options = SynthOptions::seeded(seed);
        let what = format!("{kind} on {spec}");
        let path = dir.join("sums.tts");
        let made = synthesize_to_stream(
            &topo,
            &collective,
            &SynthOptions::seeded(seed),
            &path,
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let read = Schedule::read(&path).unwrap();
        let report = check(&read, &topo).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(report, made.report, "{what}");

        let reversed = topo.reversed();
        let dual_kind = match kind {
            CollectiveKind::Reduce => CollectiveKind::Broadcast,
            _ => CollectiveKind::AllGather,
        };
        let dual = Collective::new(
            &reversed,
            CollectiveSpec {
                kind: dual_kind,
                ..collective.spec().clone()
            },
        )
        .unwrap();
        let copies = synthesize(&reversed, &dual, &options).unwrap();
        let end = copies.collective_time_ps();
        let mut expected: Vec<Transfer> = copies
            .transfers
            .iter()
            .map(|t| {
                Transfer::new(
                    t.chunk(),
                    t.dst(),
                    t.src(),
                    end - t.end_ps,
                    end - t.start_ps,
                    tacos::schedule::Op::Reduce,
                )
            })
            .collect();
        let mut time = end;
        if kind == CollectiveKind::AllReduce {
            let gathered = if one_matching {
                copies
            } else {
                let half = over_all(&topo, CollectiveKind::AllGather, k);
                synthesize(&topo, &half, &options).unwrap()
            };
            time += gathered.collective_time_ps();
            expected.extend(gathered.transfers.iter().map(|t| t.clone().delayed(end)));
        }
        assert_eq!(made.streamed.collective_time_ps, time, "{what}");
        assert_eq!(made.streamed.transfers, expected.len() as u64, "{what}");
        assert_eq!(sorted(read.transfers), sorted(expected), "{what}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["sums.tts"], "{what}: the spools are removed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Preparing spools the matchings and counts them; dropped unread, the spools go too.
#[test]
fn a_prepared_synthesis_dropped_unread_leaves_no_spool() {
    let mesh = topo("mesh:4x4");
    let collective = over_all(&mesh, CollectiveKind::AllReduce, 1);
    let dir = std::env::temp_dir().join(format!("tacos-streamed-drop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prepared = prepare_streamed(
        &mesh,
        &collective,
        &SynthOptions::default(),
        &dir.join("x.tts"),
        &|_| {},
    )
    .unwrap();
    // One matching for both halves on a mesh: 16 NPUs each lack 15 chunks.
    assert_eq!(prepared.spooled(), 16 * 15);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one spool");
    drop(prepared);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Random small fabrics through switches, many with latency ties between routes: where
/// a fabric mirrors itself the streamed All-Reduce is one matching read back twice, and
/// the file it makes passes the held checker, which routes every transfer as
/// `Topology::route` does (a route not its reverse's taken back would put copies on
/// links the matching never held); where it does not (a link faster one way), two
/// matchings, checked alike.
#[test]
fn streamed_all_reduces_on_random_switched_fabrics_pass_the_checker() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
    let dir = std::env::temp_dir().join(format!("tacos-streamed-random-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("all-reduce.tts");
    let (mut one, mut two) = (0, 0);
    for case in 0..60 {
        let npus = rng.random_range(3..8);
        let switches = rng.random_range(1..4);
        let vertices = npus + switches;
        let mut links = Vec::new();
        for u in 0..vertices {
            for v in u + 1..vertices {
                // Every NPU on some switch; other pairs now and then.
                let on_switch = u < npus && v == npus + u % switches;
                if !on_switch && !rng.random_bool(0.3) {
                    continue;
                }
                let latency_us = [0.5, 1.0][rng.random_range(0..2)];
                let bandwidth_gbps = [50.0, 100.0][rng.random_range(0..2)];
                let back_gbps = if rng.random_bool(0.03) {
                    2.0 * bandwidth_gbps
                } else {
                    bandwidth_gbps
                };
                links.push(Link {
                    src: u,
                    dst: v,
                    bandwidth_gbps,
                    latency_us,
                });
                links.push(Link {
                    src: v,
                    dst: u,
                    bandwidth_gbps: back_gbps,
                    latency_us,
                });
            }
        }
        let names = (0..switches).map(|s| format!("s{s}")).collect();
        let Ok(topo) = Topology::with_switches(format!("random-{case}"), npus, names, links) else {
            continue;
        };
        // Some NPU reaches another only through a third (routes never relay).
        let Ok(collective) =
            Collective::over_all(&topo, CollectiveKind::AllReduce, None, 1, 1 << 20)
        else {
            continue;
        };
        let made = synthesize_to_stream(
            &topo,
            &collective,
            &SynthOptions::seeded(case),
            &path,
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("random-{case}: {e}"));
        let read = Schedule::read(&path).unwrap();
        let report = check(&read, &topo).unwrap_or_else(|e| panic!("random-{case}: {e}"));
        assert_eq!(report, made.report, "random-{case}");
        match spooled_matchings(&topo, &collective) {
            1 => one += 1,
            _ => two += 1,
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        one >= 20 && two >= 5,
        "{one} fabrics with one matching, {two} with two"
    );
}

/// Over two spines each source takes its own (`Topology::route_tree`), so a route does
/// not come back the way it went: a streamed All-Reduce matches its halves apart, and the
/// stream read back checks and holds what the check of the stream found.
#[test]
fn a_fabric_of_several_spines_streams_its_all_reduce_in_two_matchings() {
    let topo = topo("clos:4x2,spine=2");
    let collective = over_all(&topo, CollectiveKind::AllReduce, 1);
    assert_eq!(spooled_matchings(&topo, &collective), 2);
    let dir = std::env::temp_dir().join(format!("tacos-streamed-spines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ar.tts");
    let made = synthesize_to_stream(
        &topo,
        &collective,
        &SynthOptions::seeded(0),
        &path,
        &mut |_| {},
    )
    .unwrap();
    let read = Schedule::read(&path).unwrap();
    assert_eq!(check(&read, &topo).unwrap(), made.report);
    std::fs::remove_dir_all(&dir).unwrap();
}
