//! One pipeline behind every front end: `tacos synth --xml`, the C API and `tacos compile`
//! give the same bytes for the same request, and (with the `test-hooks` feature, which can
//! corrupt every lowering) each refuses a program the verifier rejects.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod common;

use common::tacos;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tacos::ffi::{tacos_free_string, tacos_last_error, tacos_synthesize_xml};

/// Held by each test for its whole run: the corruption hook is an environment variable,
/// which the C API in this process and every `tacos` process a test starts would see.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

/// The request every front end gets: All-Reduce of 1 MiB on DGX-1, in place, K automatic,
/// seed 0, the executor's target (each front end's defaults, given explicitly where a
/// front end's own differ: compile's K, seeds, baselines, placements and size range).
const TOPOLOGY: &str = "preset:dgx1";
const SIZE: &str = "1MiB";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `tacos synth --xml` with one seed (the C API's default, and compile's below), with
/// `extra` arguments: the XML, or the error.
fn synth_xml(name: &str, extra: &[&str]) -> Result<String, String> {
    let path = scratch(name);
    let p = path.to_str().unwrap();
    let args = [
        &[
            "synth",
            TOPOLOGY,
            "-c",
            "allreduce",
            "-s",
            SIZE,
            "--seeds",
            "1",
            "--xml",
            p,
        ][..],
        extra,
    ]
    .concat();
    let (ok, _, err) = tacos(&args);
    if !ok {
        assert!(!path.exists(), "a refused program was written");
        return Err(err);
    }
    Ok(std::fs::read_to_string(&path).unwrap())
}

/// The C API with default options (NULL): the XML, or the last error.
fn c_api_xml() -> Result<String, String> {
    let (topology, collective) = (CString::new(TOPOLOGY).unwrap(), CString::new("allreduce"));
    let mut xml: *mut c_char = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings that outlive the call, NULL options, an output slot.
    let rc = unsafe {
        tacos_synthesize_xml(
            topology.as_ptr(),
            collective.unwrap().as_ptr(),
            1 << 20,
            std::ptr::null(),
            &mut xml,
        )
    };
    if rc != 0 {
        // SAFETY: the library's NUL-terminated message for this thread.
        let e = unsafe { CStr::from_ptr(tacos_last_error()) };
        return Err(e.to_string_lossy().into_owned());
    }
    // SAFETY: the call succeeded, so `xml` is the library's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(xml) }.to_str().unwrap().to_owned();
    // SAFETY: `xml` came from the library and is freed once, after its last use.
    unsafe { tacos_free_string(xml) };
    Ok(text)
}

/// A one-band compile of the request: the one file it writes, or the error.
fn compile_xml(name: &str) -> Result<String, String> {
    let out = scratch(name);
    let o = out.to_str().unwrap();
    let (ok, _, err) = tacos(&[
        "compile",
        TOPOLOGY,
        "--out",
        o,
        "--collectives",
        "allreduce",
        "--sizes",
        "1MiB..1MiB",
        "--inplace",
        "inplace",
        "-k",
        "1,2,4,8",
        "--seeds",
        "1",
        "--no-baselines",
        // Every front end times programs by the executor cost model; NCCL does not
        // compete for the others' answers.
        "--no-nccl",
        "--quiet",
    ]);
    if !ok {
        assert!(!out.exists(), "a refused compile left a directory");
        return Err(err);
    }
    let files: Vec<PathBuf> = std::fs::read_dir(Path::new(o).join("msccl"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    Ok(std::fs::read_to_string(&files[0]).unwrap())
}

#[test]
fn every_front_end_gives_the_same_bytes_for_the_same_request() {
    let _alone = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    let synth = synth_xml("synth.xml", &[]).unwrap();
    let c_api = c_api_xml().unwrap();
    assert_eq!(synth, c_api, "synth --xml and the C API differ");
    // Compile's file serves its band, 1 MiB alone; given that range, synth writes the
    // same bytes, and the default range ([S, 2S - 1]) is the only difference.
    let band = synth_xml("band.xml", &["--min-bytes", "1MiB", "--max-bytes", "1MiB"]).unwrap();
    let compiled = compile_xml("compiled").unwrap();
    assert_eq!(band, compiled, "synth --xml and compile differ");
    let default_range = "minBytes=\"1048576\" maxBytes=\"2097151\"";
    let band_range = "minBytes=\"1048576\" maxBytes=\"1048576\"";
    assert!(synth.contains(default_range), "{synth}");
    assert_eq!(synth.replacen(default_range, band_range, 1), compiled);
    // K was searched, not fixed: every K was tried and the fastest program kept, and
    // the file names the K chosen.
    let path = scratch("searched.xml");
    let (ok, out, err) = tacos(&[
        "synth",
        TOPOLOGY,
        "-c",
        "allreduce",
        "-s",
        SIZE,
        "--seeds",
        "1",
        "--xml",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let trials = report["chunk_trials"].as_array().unwrap();
    let ks: std::collections::BTreeSet<u64> = trials
        .iter()
        .filter(|t| t.get("baseline").is_none())
        .map(|t| t["chunks_per_npu"].as_u64().unwrap())
        .collect();
    assert_eq!(ks.into_iter().collect::<Vec<_>>(), [1, 2, 4, 8]);
    let fastest = trials
        .iter()
        .map(|t| t["simulated_time_us"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(report["program_time_us"].as_f64().unwrap(), fastest);
    // The file names the K chosen, or the baseline where one was kept.
    let k = report["collective"]["chunks_per_npu"].as_u64().unwrap();
    let name = synth.split("name=\"").nth(1).unwrap();
    let named = match report.get("baseline") {
        Some(b) => format!("tacos-allreduce-{}\"", b.as_str().unwrap()),
        None => format!("tacos-allreduce-k{k}-"),
    };
    assert!(name.starts_with(&named), "{name}");
}

/// With the hook on, every lowering is corrupted (one receive writes the wrong slot): each
/// front end must refuse, saying verification failed, and write nothing.
#[cfg(feature = "test-hooks")]
#[test]
fn every_front_end_refuses_a_program_that_fails_verification() {
    use tacos::pipeline::test_hooks::CORRUPT_LOWERING;
    let _alone = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var(CORRUPT_LOWERING, "1");
    let refusals = [
        ("synth --xml", synth_xml("corrupt.xml", &[])),
        (
            "synth --xml -k 2",
            synth_xml("corrupt-k2.xml", &["-k", "2"]),
        ),
        ("the C API", c_api_xml()),
        ("compile", compile_xml("corrupt-dir")),
    ];
    std::env::remove_var(CORRUPT_LOWERING);
    for (front_end, result) in refusals {
        match result {
            Ok(_) => panic!("{front_end} emitted the corrupted program"),
            Err(e) => assert!(e.contains("failed verification"), "{front_end}: {e}"),
        }
    }
    // The hook off again, the same request goes through.
    assert!(c_api_xml().is_ok());
}

/// The K search (moved here from `synth` with the search itself): every K of `auto` is
/// tried, then K between them around the best, and the kept one is the first with the
/// lowest simulated time, for schedules and for programs alike.
#[test]
fn automatic_chunking_keeps_the_fastest_simulated_k() {
    use tacos::collective::CollectiveKind;
    use tacos::pipeline::{self, Options, Request, Trial, AUTO_CHUNKS};
    let topo = tacos::topology::parse_spec("ring:8", &Default::default()).unwrap();
    // Synthesized trials only: the baselines' are counted in their own test.
    let options = Options {
        baselines: false,
        ..Options::default()
    };
    let kept_is_fastest = |trials: &[Trial], k: usize| {
        // Each K of `auto` with its seed, then with planned trees, balanced, shallow and one
        // way round the ring; each K refined with one of those ways, the fastest's.
        let mut ks: Vec<usize> = trials.iter().map(|t| t.chunks_per_npu).collect();
        ks.dedup();
        for &k in &ks {
            let ways: Vec<(bool, bool, bool)> = trials
                .iter()
                .filter(|t| t.chunks_per_npu == k)
                .map(|t| (t.planned, t.shallow, t.one_way))
                .collect();
            if AUTO_CHUNKS.contains(&k) {
                let planned = [
                    (true, false, false),
                    (true, true, false),
                    (true, false, true),
                ];
                assert_eq!(ways[0], (false, false, false), "K={k}");
                assert_eq!(ways[1..], planned, "K={k}");
            } else {
                assert_eq!(ways.len(), 1, "K={k}: {ways:?}");
            }
        }
        // Every K of `auto`, and refinements strictly between them.
        assert!(AUTO_CHUNKS.iter().all(|k| ks.contains(k)), "{ks:?}");
        assert!(ks
            .iter()
            .all(|&k| AUTO_CHUNKS.contains(&k) || (2..8).contains(&k)));
        let kept = trials.iter().find(|t| t.chunks_per_npu == k).unwrap();
        let lowest = trials.iter().filter_map(|t| t.simulated_ps).min();
        assert_eq!(kept.simulated_ps, lowest);
        assert!(trials
            .iter()
            .all(|t| t.chunks_per_npu >= k || t.simulated_ps.is_some_and(|p| Some(p) > lowest)));
    };
    for size in [1 << 10, 1 << 30] {
        let request = Request::new(CollectiveKind::Broadcast, size);
        let found = pipeline::schedule(&topo, &request, &options).unwrap();
        let k = found.kept.chunks_per_npu();
        kept_is_fastest(&found.trials, k);
        tacos::schedule::check(found.kept.schedule(), &topo).unwrap();
        // A broadcast down 4 hops: for 1 KiB the 0.5 us latency per chunk per hop
        // dominates. One chunk takes 4 x (0.5 + 1024 B / 50 GB/s) = 2.08192 us; two can
        // go one each way round, 4 x 0.51024 = 2.04096 us; with four or more the NPU
        // opposite the root takes two chunks in over one link, one hop after the first
        // (4 x 0.50512 + 0.50512 = 2.5256 us at best), so more than two never wins. For
        // 1 GiB, pipelining pieces wins.
        if size == 1 << 10 {
            assert!(k <= 2, "{k}");
            assert!(found.kept.report().collective_time_ps <= 2_081_920);
        } else {
            assert!(k > 1);
        }
        // As programs: the kept one's time is what the program timer says at the size.
        let found = pipeline::program(&topo, &request, &options).unwrap();
        kept_is_fastest(&found.trials, found.kept.chunks_per_npu());
        let timed = tacos::msccl::simulate_program(&topo, found.kept.program(), size).unwrap();
        assert_eq!(timed.time_ps, found.kept.time_ps());
    }
}

#[test]
fn concurrent_groups_come_checked_alone_and_together() {
    // Two All-Reduce groups on a ring of 8 (0-3 and 4-7, each group's ring closing over
    // the other's links) and an All-Gather group on a line through them: what the
    // pipeline returns passes the checker again, alone and together, each schedule is
    // over its group, and none beats its group's lower bounds.
    use tacos::bounds::Bounds;
    use tacos::collective::{Collective, CollectiveKind};
    use tacos::pipeline::{concurrent, Request};
    use tacos::schedule::{check, check_concurrent};
    use tacos::topology::{parse_spec, SpecDefaults};
    let topo = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
    let group = |kind, npus: Vec<usize>| Request {
        npus: Some(npus),
        ..Request::new(kind, 1 << 20)
    };
    let requests = [
        group(CollectiveKind::AllReduce, vec![0, 1, 2, 3]),
        group(CollectiveKind::AllReduce, vec![4, 5, 6, 7]),
        group(CollectiveKind::AllGather, vec![1, 5]),
    ];
    let checked = concurrent(&topo, &requests, 2, 0).unwrap();
    assert_eq!(checked.len(), requests.len());
    let schedules: Vec<_> = checked.iter().map(|c| c.schedule().clone()).collect();
    check_concurrent(&schedules, &topo).unwrap();
    for (c, r) in checked.iter().zip(&requests) {
        let spec = &c.schedule().collective;
        assert_eq!(Some(&spec.npus), r.npus.as_ref());
        assert_eq!((spec.kind, spec.chunks_per_npu), (r.kind, 2));
        let report = check(c.schedule(), &topo).unwrap();
        assert_eq!(report.collective_time_ps, c.report().collective_time_ps);
        let bounds = Bounds::new(&topo, &Collective::new(&topo, spec.clone()).unwrap());
        assert!(c.report().collective_time_ps >= bounds.best_ps());
        assert_eq!(
            c.all_reduce().is_some(),
            r.kind == CollectiveKind::AllReduce
        );
    }
}

#[test]
fn default_seeds_shrink_as_the_work_grows() {
    use tacos::collective::CollectiveKind;
    use tacos::pipeline::{default_seeds, Chunks, Request};
    use tacos::topology::{parse_spec, SpecDefaults};
    let request = Request::new(CollectiveKind::AllGather, 1 << 30);
    let seeds = |spec: &str, chunks| {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        default_seeds(&topo, &request, chunks)
    };
    // NPUs^2 x K: 4,096 (8 seeds), 32,768 at K = 8 (4), 65,536 (4), 2^18 (2), 576^2 (1).
    assert_eq!(seeds("mesh:8x8", Chunks::Fixed(1)), 8);
    assert_eq!(seeds("mesh:8x8", Chunks::Auto), 4);
    assert_eq!(seeds("mesh:16x16", Chunks::Fixed(1)), 4);
    assert_eq!(seeds("mesh:16x32", Chunks::Fixed(1)), 2);
    assert_eq!(seeds("mesh:24x24", Chunks::Fixed(1)), 1);
    // Over the NPUs taking part, not the topology's.
    let few = Request {
        npus: Some((0..8).collect()),
        ..request.clone()
    };
    let topo = parse_spec("mesh:32x32", &SpecDefaults::default()).unwrap();
    assert_eq!(default_seeds(&topo, &few, Chunks::Auto), 8);
}

#[test]
fn synth_keeps_the_fastest_of_its_seeds() {
    let (ok, out, err) = tacos(&[
        "synth",
        "torus:4x4",
        "-k",
        "2",
        "--seeds",
        "5",
        "--seed",
        "10",
        "--jobs",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let trials = v["chunk_trials"].as_array().unwrap();
    // The five seeds, then planned trees with the first: balanced, shallow and one way
    // round the torus's rings.
    let seeds: Vec<(u64, bool, bool, bool)> = trials
        .iter()
        .map(|t| {
            (
                t["seed"].as_u64().unwrap(),
                t["planned"].as_bool().unwrap(),
                t["shallow"].as_bool().unwrap(),
                t["one_way"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seeds,
        [
            (10, false, false, false),
            (11, false, false, false),
            (12, false, false, false),
            (13, false, false, false),
            (14, false, false, false),
            (10, true, false, false),
            (10, true, true, false),
            (10, true, false, true)
        ]
    );
    let fastest = trials
        .iter()
        .map(|t| t["simulated_time_us"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let kept = trials
        .iter()
        .find(|t| t["seed"] == v["seed"])
        .expect("the kept seed is one of those tried");
    assert_eq!(kept["simulated_time_us"].as_f64().unwrap(), fastest);
    // Ties go to the earlier seed.
    let first_fastest = trials
        .iter()
        .find(|t| t["simulated_time_us"].as_f64().unwrap() == fastest)
        .unwrap();
    assert_eq!(first_fastest["seed"], v["seed"]);
}

/// Baselines are candidates of the search: on `ring:8` an All-Gather of 16 MiB by the Ring
/// baseline (K = 1: two chunks an NPU, one each way round) takes 7 steps of one 1 MiB chunk
/// a link, 7 x (0.5 us + 1,048,576 B / 50 GB/s) = 150.30064 us, which the kept schedule
/// must match or beat; the baseline comes timed and passes the checker, and without
/// baselines (or with K fixed) only synthesized schedules are kept.
#[test]
fn the_search_keeps_a_baseline_where_none_synthesized_is_faster() {
    use tacos::baselines::Baseline;
    use tacos::collective::CollectiveKind;
    use tacos::pipeline::{self, Chunks, Options, Request};
    let topo = tacos::topology::parse_spec("ring:8", &Default::default()).unwrap();
    let request = Request::new(CollectiveKind::AllGather, 16 << 20);
    let ring_ps = 7 * (500_000 + 1_048_576 * 1000 / 50);
    let ring = pipeline::baseline(&topo, &request, Baseline::Ring, 1).unwrap();
    assert_eq!(ring.report().collective_time_ps, ring_ps);
    tacos::schedule::check(ring.schedule(), &topo).unwrap();
    // Direct's sends between NPUs no link joins are relayed: a schedule of the links.
    let direct = pipeline::baseline(&topo, &request, Baseline::Direct, 1).unwrap();
    tacos::schedule::check(direct.schedule(), &topo).unwrap();

    let found = pipeline::schedule(&topo, &request, &Options::default()).unwrap();
    assert!(found.kept.report().collective_time_ps <= ring_ps);
    let simulated = tacos::sim::simulate_schedule(&topo, found.kept.schedule()).unwrap();
    assert!(simulated.time_ps <= ring_ps);
    let tried: Vec<Baseline> = found.trials.iter().filter_map(|t| t.baseline).collect();
    assert!(tried.contains(&Baseline::Ring) && tried.contains(&Baseline::Direct));
    // The lowered program is named by the baseline where one was kept.
    if let Some(b) = found.kept.baseline() {
        let lowered =
            pipeline::lower(&topo, &found.kept, &tacos::msccl::LowerOptions::default()).unwrap();
        assert_eq!(lowered.program().name, format!("tacos-allgather-{b}"));
    }

    for options in [
        Options {
            baselines: false,
            ..Options::default()
        },
        Options {
            chunks: Chunks::Fixed(1),
            ..Options::default()
        },
    ] {
        let found = pipeline::schedule(&topo, &request, &options).unwrap();
        assert_eq!(found.kept.baseline(), None);
        assert!(found.trials.iter().all(|t| t.baseline.is_none()));
    }
}

/// Direct All-to-All on `ring:4` relayed hop by hop (each NPU's chunk for the NPU across
/// the ring goes through a neighbour) is a candidate, checked on its simulated times. By
/// hand: 1 MiB a buffer is a 262,144-byte chunk per pair, c = 0.5 us + 262,144 B / 50 GB/s
/// = 5.74288 us a link. Link 0 -> 1 carries NPU 0's chunk for 1, then its chunk for 2
/// (first hop), then NPU 3's chunk for 1 (second hop, in at c): 3 chunks back to back,
/// as every link of the busiest direction does, so the collective takes 3c = 17.22864 us.
#[test]
fn direct_is_relayed_where_no_link_joins_its_npus() {
    use tacos::baselines::Baseline;
    use tacos::collective::CollectiveKind;
    use tacos::pipeline::{self, Request};
    let topo = tacos::topology::parse_spec("ring:4", &Default::default()).unwrap();
    let request = Request::new(CollectiveKind::AllToAll, 1 << 20);
    let c = 500_000 + 262_144 * 1000 / 50;
    let direct = pipeline::baseline(&topo, &request, Baseline::Direct, 1).unwrap();
    assert_eq!(direct.baseline(), Some(Baseline::Direct));
    assert_eq!(direct.schedule().transfers.len(), 8 + 4 * 2);
    assert_eq!(direct.report().collective_time_ps, 3 * c);
    tacos::schedule::check(direct.schedule(), &topo).unwrap();
    let simulated = tacos::sim::simulate_schedule(&topo, direct.schedule()).unwrap();
    assert_eq!(simulated.time_ps, 3 * c);
}
