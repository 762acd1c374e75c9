//! `compile` and `tacos compile`: a compiled set tiles the requested sizes, every file
//! verifies and runs as the manifest predicts, no candidate beats the chosen program, and
//! the directory is written whole (races, refusals, interrupted writes) and re-checked
//! against its manifest; the command reports it and refuses bad input in one line.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod common;

use common::tacos;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, OnceLock};
use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::compile::{
    algorithm_dir, check_dir, check_dir_with, compile, sha256_hex, write_dir, AlgorithmSet,
    CheckKind, CheckOptions, CompileOptions, Manifest, Placements, Ranking, SizeRange, Written,
    MANIFEST_FILE,
};
use tacos::msccl::{
    lower, parse_program, simulate_program, verify, Layout, LimitOverrides, LowerOptions, Profile,
    Program, Proto, Target, VerifyOptions,
};
use tacos::plugin::{cache_dir_name, open_or_compile, Opened};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::ps_to_us;

const SPEC: &str = "torus:2x4";
const MIN: u64 = 1 << 10;
const MAX: u64 = 16 << 20;

fn topo() -> Topology {
    parse_spec(SPEC, &SpecDefaults::default()).unwrap()
}

fn options() -> CompileOptions {
    CompileOptions {
        sizes: SizeRange::new(MIN, MAX).unwrap(),
        seeds: 1,
        chunk_candidates: vec![1, 2, 4],
        ..CompileOptions::default()
    }
}

/// The set every test reads, compiled once.
fn compiled() -> &'static AlgorithmSet {
    static SET: OnceLock<AlgorithmSet> = OnceLock::new();
    SET.get_or_init(|| compile(&topo(), &options(), &|_| {}).unwrap())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("tacos-compile-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Names in `dir` (hidden ones too).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn ranges_tile_the_requested_sizes_in_the_executors_measure() {
    let set = compiled();
    let m = &set.manifest;
    for kind in [
        CollectiveKind::AllReduce,
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
    ] {
        for in_place in [true, false] {
            let mut ranges: Vec<(u64, u64)> = m
                .entries
                .iter()
                .filter(|e| e.collective == kind && e.in_place == in_place)
                .map(|e| (e.min_bytes, e.max_bytes))
                .collect();
            ranges.sort_unstable();
            assert!(!ranges.is_empty(), "{kind} {in_place}: no file");
            assert_eq!(ranges[0].0, MIN);
            assert_eq!(ranges.last().unwrap().1, MAX);
            for w in ranges.windows(2) {
                assert_eq!(w[1].0, w[0].1 + 1, "{kind} {in_place}: {ranges:?}");
            }
            // Every size the executor could ask for maps to exactly one file.
            for size in [MIN, MIN + 1, 3 << 10, 1 << 20, (1 << 20) - 1, MAX - 1, MAX] {
                let hits = m
                    .entries
                    .iter()
                    .filter(|e| e.collective == kind && e.in_place == in_place)
                    .filter(|e| (e.min_bytes..=e.max_bytes).contains(&size))
                    .count();
                assert_eq!(hits, 1, "{kind} {in_place} {size}");
                let e = m.select(kind, 8, in_place, size).unwrap();
                assert!((e.min_bytes..=e.max_bytes).contains(&size));
            }
            assert!(m.select(kind, 8, in_place, MIN - 1).is_none());
            assert!(m.select(kind, 8, in_place, MAX + 1).is_none());
            assert!(m.select(kind, 16, in_place, MIN).is_none());
        }
    }
    // 14 bands per (collective, placement); merging makes fewer files, and the table
    // still lists every band once.
    let bands: usize = m.entries.iter().map(|e| e.bands.len()).sum();
    assert_eq!(bands, 14 * 6);
    assert!(m.entries.len() < bands);
    assert_eq!(set.files.len(), m.entries.len());
}

#[test]
fn every_file_verifies_and_runs_as_predicted() {
    files_verify_and_run_as_predicted(compiled());
}

fn files_verify_and_run_as_predicted(set: &AlgorithmSet) {
    let topo = topo();
    for (entry, file) in set.manifest.entries.iter().zip(&set.files) {
        assert_eq!(entry.file, file.name);
        assert_eq!(entry.sha256, sha256_hex(file.xml.as_bytes()));
        let program = parse_program(&file.xml, &file.name).unwrap();
        let report = verify(&program, &VerifyOptions::default());
        assert!(report.is_correct(), "{}: {:?}", file.name, report.problems);
        assert_eq!(program.collective_kind(), Some(entry.collective));
        assert_eq!(program.inplace, entry.in_place);
        assert_eq!(program.outofplace, !entry.in_place);
        assert_eq!(program.min_bytes, Some(entry.min_bytes));
        assert_eq!(program.max_bytes, Some(entry.max_bytes));
        assert_eq!(program.proto.name(), entry.proto);
        let layout = Layout::new(
            entry.collective,
            program.gpus.len(),
            program.nchunksperloop,
            entry.in_place,
            None,
        )
        .unwrap();
        for band in &entry.bands {
            let executor = layout.executor_bytes(band.size_bytes);
            assert!((entry.min_bytes..=entry.max_bytes).contains(&executor));
            let sim = simulate_program(&topo, &program, band.size_bytes).unwrap();
            assert_eq!(ps_to_us(sim.time_ps), band.time_us, "{}", file.name);
            // algbw = size / time; the baseline figures agree with the speedup.
            let algbw = band.size_bytes as f64 / (band.time_us * 1e-6) / 1e9;
            assert!((band.algbw_gbps - algbw).abs() < 1e-6 * algbw);
            assert!(band.efficiency > 0.0 && band.efficiency <= 1.0);
            let base = band.best_baseline_us.unwrap();
            assert!(
                base >= band.time_us,
                "{}: slower than a baseline",
                file.name
            );
            let speedup = band.speedup_vs_baseline.unwrap();
            assert!((speedup - base / band.time_us).abs() < 1e-9);
        }
    }
}

/// The same search ranked by schedule time, lowering only the winners, as the fast preset
/// does: every file still verifies and runs as predicted, and no band is slower than with
/// every candidate timed as a program by more than 2 %.
#[test]
fn ranking_by_schedules_keeps_the_programs_choices() {
    let quick = compile(
        &topo(),
        &CompileOptions {
            ranking: Ranking::Schedules,
            ..options()
        },
        &|_| {},
    )
    .unwrap();
    files_verify_and_run_as_predicted(&quick);
    let full = &compiled().manifest;
    let mut bands = 0;
    for entry in &quick.manifest.entries {
        for band in &entry.bands {
            let chosen = full
                .select(entry.collective, 8, entry.in_place, band.size_bytes)
                .unwrap();
            let full_us = chosen
                .bands
                .iter()
                .find(|b| b.size_bytes == band.size_bytes)
                .unwrap()
                .time_us;
            assert!(
                band.time_us <= full_us * 1.02,
                "{} at {}: {} us, {full_us} us when programs are timed",
                entry.file,
                band.size_bytes,
                band.time_us
            );
            bands += 1;
        }
    }
    assert_eq!(bands, 14 * 6);
}

/// Times every candidate independently (synthesis or baseline, lowered with the band's
/// protocol) and checks none beats the file the manifest picks for that band.
#[test]
fn no_candidate_beats_the_chosen_program() {
    let topo = topo();
    let set = compiled();
    let kind = CollectiveKind::AllReduce;
    for size in [MIN, 1 << 20, MAX >> 1] {
        for in_place in [true, false] {
            let chosen = set.manifest.select(kind, 8, in_place, size).unwrap();
            let band = chosen.bands.iter().find(|b| b.size_bytes == size).unwrap();
            let mut schedules = Vec::new();
            for k in [1, 2, 4] {
                if k > 1 && size / (8 * k as u64) < 4096 {
                    continue; // The options' smallest chunk.
                }
                let c = Collective::over_all(&topo, kind, None, k, size).unwrap();
                schedules.push(synthesize(&topo, &c, &SynthOptions::seeded(0)).unwrap());
            }
            for b in Baseline::ALL
                .into_iter()
                .filter(|b| b.kinds().contains(&kind) && b.writes_xml())
            {
                let spec = CollectiveSpec {
                    kind,
                    root: None,
                    npus: topo.alive_npus(),
                    chunks_per_npu: 1,
                    size_bytes: size,
                };
                schedules.push(b.schedule(&topo, &spec).unwrap());
            }
            for s in &schedules {
                let options = LowerOptions {
                    in_place: Some(in_place),
                    proto: Some(Proto::for_size(size)),
                    ..LowerOptions::default()
                };
                let Ok(program) = lower(s, &topo, &options) else {
                    continue;
                };
                let t = ps_to_us(simulate_program(&topo, &program, size).unwrap().time_ps);
                assert!(
                    band.time_us <= t,
                    "{} at {size}: {} us, but {} takes {t} us",
                    chosen.file,
                    band.time_us,
                    s.topology
                );
            }
        }
    }
}

#[test]
fn choices_change_with_size() {
    let m = &compiled().manifest;
    let ks: Vec<usize> = m
        .entries
        .iter()
        .filter(|e| e.collective == CollectiveKind::AllReduce && e.in_place)
        .map(|e| e.chunks_per_loop)
        .collect();
    // More chunks for larger messages on a torus, where pipelining pays.
    assert!(ks.first() < ks.last(), "{ks:?}");
    let protos: Vec<&str> = m.entries.iter().map(|e| e.proto.as_str()).collect();
    assert!(protos.contains(&"LL") && protos.contains(&"Simple"));
}

#[test]
fn check_dir_passes_then_finds_edits_deletions_extras_and_staleness() {
    let set = compiled();
    let root = scratch("check");
    let fresh = |name: &str| {
        let dir = root.join(name);
        assert_eq!(write_dir(set, &dir, false).unwrap(), Written::Created);
        dir
    };
    let dir = fresh("ok");
    let report = check_dir(&dir).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.files_checked, set.files.len());
    // With the topology, predictions are re-timed too.
    let topo = topo();
    let full = CheckOptions {
        topology: Some(&topo),
        ..CheckOptions::default()
    };
    assert!(check_dir_with(&dir, &full).unwrap().is_ok());
    let other = parse_spec("ring:8", &SpecDefaults::default()).unwrap();
    let wrong = check_dir_with(&dir, &CheckOptions::hashes_only(Some(&other))).unwrap();
    assert_eq!(kinds(&wrong.problems), [CheckKind::Topology]);

    let first = &set.files[0].name;
    let dir = fresh("edited");
    let path = algorithm_dir(&dir).join(first);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text} ")).unwrap();
    let report = check_dir(&dir).unwrap();
    assert_eq!(kinds(&report.problems), [CheckKind::Edited]);
    assert_eq!(
        report.problems[0].file.as_deref(),
        Some(format!("msccl/{first}").as_str())
    );

    let dir = fresh("missing");
    std::fs::remove_file(algorithm_dir(&dir).join(first)).unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Missing]
    );

    // Beside the algorithm directory, a file is extra; the executor never sees it.
    let dir = fresh("extra");
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Extra]
    );

    let dir = fresh("stale");
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let version = format!("\"tool_version\": \"{}\"", tacos::VERSION);
    assert!(text.contains(&version));
    std::fs::write(&path, text.replace(&version, "\"tool_version\": \"0.0.1\"")).unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Stale]
    );
    std::fs::write(
        &path,
        text.replace("\"format_version\": 2", "\"format_version\": 99"),
    )
    .unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Stale]
    );

    // A file whose hash was updated to match an edit is still caught by verification.
    let dir = fresh("forged");
    let name = &set.files[0].name;
    let path = algorithm_dir(&dir).join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let broken = text.replacen("type=\"s\"", "type=\"nop\"", 1);
    assert_ne!(broken, text);
    std::fs::write(&path, &broken).unwrap();
    let mut manifest = Manifest::read(&dir).unwrap();
    manifest.entries[0].sha256 = sha256_hex(broken.as_bytes());
    std::fs::write(dir.join(MANIFEST_FILE), manifest.to_json()).unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Invalid]
    );

    // Not ours at all: an error, not a report.
    let foreign = root.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    assert!(check_dir(&foreign)
        .unwrap_err()
        .to_string()
        .contains("not a tacos"));
    // Given the algorithm directory instead of the one holding it: told which to give.
    let dir = fresh("inner");
    let e = check_dir(&algorithm_dir(&dir)).unwrap_err().to_string();
    assert!(e.contains("give the directory that holds it"), "{e}");
}

fn kinds(problems: &[tacos::compile::CheckProblem]) -> Vec<CheckKind> {
    let mut k: Vec<CheckKind> = problems.iter().map(|p| p.kind).collect();
    k.dedup();
    k
}

#[test]
fn racing_writers_leave_one_complete_directory() {
    let set = compiled();
    let root = scratch("race");
    let dir = root.join("algorithms");
    let writers = 6;
    let barrier = Arc::new(Barrier::new(writers));
    let outcomes: Vec<Written> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|_| {
                let (barrier, dir) = (barrier.clone(), dir.clone());
                s.spawn(move || {
                    barrier.wait();
                    write_dir(set, &dir, false).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created = outcomes.iter().filter(|&&w| w == Written::Created).count();
    assert_eq!(created, 1, "{outcomes:?}");
    assert!(outcomes
        .iter()
        .all(|&w| matches!(w, Written::Created | Written::AlreadyThere)));
    assert!(check_dir(&dir).unwrap().is_ok());
    // Nothing staged is left beside it.
    assert_eq!(listing(&root), ["algorithms"]);
}

#[test]
fn foreign_directories_are_refused_unless_forced_and_ours_are_replaced() {
    let set = compiled();
    let root = scratch("refuse");
    let dir = root.join("out");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let e = write_dir(set, &dir, false).unwrap_err().to_string();
    assert!(
        e.contains("not a tacos algorithm directory") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(listing(&dir), ["notes.txt"]);
    assert_eq!(write_dir(set, &dir, true).unwrap(), Written::Replaced);
    assert!(check_dir(&dir).unwrap().is_ok());
    assert_eq!(listing(&root), ["out"]);
    // The same set again changes nothing; another set of ours replaces it.
    assert_eq!(write_dir(set, &dir, false).unwrap(), Written::AlreadyThere);
    let small = compile(
        &topo(),
        &CompileOptions {
            collectives: vec![CollectiveKind::AllGather],
            sizes: SizeRange::new(MIN, 4 * MIN).unwrap(),
            placements: Placements::OutOfPlace,
            ..options()
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(write_dir(&small, &dir, false).unwrap(), Written::Replaced);
    assert_eq!(Manifest::read(&dir).unwrap(), small.manifest);
    assert!(check_dir(&dir).unwrap().is_ok());
    // A file in the way is never replaced.
    let file = root.join("file");
    std::fs::write(&file, "x").unwrap();
    let e = write_dir(set, &file, true).unwrap_err().to_string();
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let mut set = compiled().clone();
    // A name the filesystem refuses (too long), met after other files were written.
    set.files[1].name = format!("{}.xml", "x".repeat(300));
    set.manifest.entries[1].file = set.files[1].name.clone();
    let root = scratch("interrupted");
    let dir = root.join("out");
    assert!(write_dir(&set, &dir, false).is_err());
    assert!(listing(&root).is_empty(), "{:?}", listing(&root));
    // Over a directory of ours, the failed write leaves it as it was: its algorithm
    // directory holds the same files and nothing staged, and nothing is left beside it.
    write_dir(compiled(), &dir, false).unwrap();
    let before = listing(&algorithm_dir(&dir));
    assert!(write_dir(&set, &dir, false).is_err());
    assert_eq!(listing(&algorithm_dir(&dir)), before);
    assert_eq!(listing(&root), ["out"]);
    std::fs::remove_dir_all(&dir).unwrap();
    // A name that would leave the directory is refused before anything is written.
    set.files[1].name = "../escape.xml".into();
    let e = write_dir(&set, &dir, false).unwrap_err().to_string();
    assert!(e.contains("plain name"), "{e}");
    assert!(listing(&root).is_empty());
}

#[test]
fn open_or_compile_reuses_a_sound_directory_and_rebuilds_a_corrupted_one() {
    let topo = topo();
    let options = CompileOptions {
        collectives: vec![CollectiveKind::AllReduce],
        sizes: SizeRange::new(MIN, 8 * MIN).unwrap(),
        ..options()
    };
    let dir = scratch("cache").join("entry");
    let (first, how) = open_or_compile(&dir, &topo, &options, false, &|_| {}).unwrap();
    assert_eq!(how, Opened::Compiled(Written::Created));
    let (again, how) = open_or_compile(&dir, &topo, &options, false, &|_| {}).unwrap();
    assert_eq!((how, &again), (Opened::Existing, &first));
    let file = algorithm_dir(&dir).join(&first.entries[0].file);
    std::fs::write(&file, "<algo/>").unwrap();
    let (rebuilt, how) = open_or_compile(&dir, &topo, &options, false, &|_| {}).unwrap();
    assert_eq!(
        (how, &rebuilt),
        (Opened::Compiled(Written::Replaced), &first)
    );
    assert!(check_dir(&dir).unwrap().is_ok());
    // Ranks of one node opening a cold cache at once: one compiles, the others wait for
    // it and open its directory.
    let dir = scratch("cache-race").join("entry");
    let barrier = Barrier::new(4);
    let outcomes: Vec<Opened> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    open_or_compile(&dir, &topo, &options, false, &|_| {})
                        .unwrap()
                        .1
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let compiled = outcomes.iter().filter(|o| **o != Opened::Existing).count();
    assert_eq!(compiled, 1, "{outcomes:?}");
    assert!(check_dir(&dir).unwrap().is_ok());
    // Other options compile anew.
    let wider = CompileOptions {
        sizes: SizeRange::new(MIN, 16 * MIN).unwrap(),
        ..options
    };
    let (_, how) = open_or_compile(&dir, &topo, &wider, false, &|_| {}).unwrap();
    assert_eq!(how, Opened::Compiled(Written::Replaced));
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let topo = topo();
    let err = |o: CompileOptions| compile(&topo, &o, &|_| {}).unwrap_err().to_string();
    let e = err(CompileOptions {
        collectives: vec![CollectiveKind::Reduce],
        ..options()
    });
    assert!(e.contains("root"), "{e}");
    let e = err(CompileOptions {
        sizes: SizeRange {
            min_bytes: MAX,
            max_bytes: MIN,
        },
        ..options()
    });
    assert!(e.contains("backwards"), "{e}");
    let e = err(CompileOptions {
        chunk_candidates: vec![],
        ..options()
    });
    assert!(e.contains("chunk candidates"), "{e}");
    // Two islands: no collective over every NPU can complete.
    let split = parse_spec("ring:4", &SpecDefaults::default())
        .unwrap()
        .fail_links(&[(1, 2), (3, 0)])
        .unwrap();
    let e = compile(&split, &options(), &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot run on topology ring:4") && e.contains("cannot reach"),
        "{e}"
    );
}

#[test]
fn the_fast_preset_still_tiles_and_verifies() {
    let topo = topo();
    let options = CompileOptions {
        sizes: SizeRange::new(MIN, MAX).unwrap(),
        ..CompileOptions::fast()
    };
    let set = compile(&topo, &options, &|_| {}).unwrap();
    let bands: usize = set.manifest.entries.iter().map(|e| e.bands.len()).sum();
    // 1K..16M in bands of three doublings: 1K, 8K, 64K, 512K, 4M (the last to 16M).
    assert_eq!(bands, 5 * 6);
    for (entry, file) in set.manifest.entries.iter().zip(&set.files) {
        assert!(entry.bands.iter().all(|b| b.best_baseline.is_none()));
        let program = parse_program(&file.xml, &file.name).unwrap();
        assert!(verify(&program, &VerifyOptions::default()).is_correct());
    }
    let dir = scratch("fast").join("out");
    write_dir(&set, &dir, false).unwrap();
    assert!(check_dir(&dir).unwrap().is_ok());
}

#[test]
fn the_same_inputs_give_the_same_bytes() {
    let again = compile(
        &topo(),
        &CompileOptions {
            jobs: 1,
            ..options()
        },
        &|_| {},
    )
    .unwrap();
    let set = compiled();
    assert_eq!(again.manifest.to_json(), set.manifest.to_json());
    assert_eq!(again.files, set.files);
}

/// Runs a command that must fail; returns the first line of its error.
fn fails(args: &[&str]) -> String {
    let (ok, _, err) = tacos(args);
    assert!(!ok, "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    err.lines().next().unwrap_or_default().to_string()
}

#[test]
fn racing_processes_leave_one_complete_directory() {
    let root = scratch("race-processes");
    let out = root.join("algos");
    let args = [
        "compile",
        "torus:2x4",
        "--out",
        out.to_str().unwrap(),
        "--sizes",
        "1KiB..16KiB",
        "--seeds",
        "1",
        "-k",
        "1,2",
        "--json",
    ];
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_tacos"))
                .args(args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut written = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        written.push(v["written"].as_str().unwrap().to_string());
    }
    // The first rename creates it; a later writer finds it complete and keeps it (or,
    // starting after it, finds it unchanged).
    assert_eq!(
        written.iter().filter(|w| *w == "created").count(),
        1,
        "{written:?}"
    );
    assert!(written.iter().all(|w| w == "created" || w == "unchanged"));
    assert!(check_dir(&out).unwrap().is_ok());
    assert_eq!(listing(&root), ["algos"]);
}

#[test]
fn compile_writes_a_directory_that_checks_and_reports_it() {
    let root = scratch("ok");
    let out = root.join("algos");
    let out_s = out.to_str().unwrap();
    let args = [
        "compile",
        "torus:2x4",
        "--out",
        out_s,
        "--sizes",
        "1KiB..64KiB",
        "--collectives",
        "allreduce,allgather",
        "-k",
        "1,2",
        "--seeds",
        "1",
        // Every band gets a file: the layout is what is checked here.
        "--no-nccl",
        "--json",
    ];
    let (ok, stdout, err) = tacos(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["written"], "created");
    let entries = v["manifest"]["entries"].as_array().unwrap();
    // The manifest and the algorithm directory; in that, every entry's file and nothing
    // else; and the command says to point MSCCL_ALGO_DIR there.
    assert_eq!(listing(&out), ["manifest.json", "msccl"]);
    let mut files: Vec<String> = entries
        .iter()
        .map(|e| e["file"].as_str().unwrap().to_string())
        .collect();
    files.sort();
    assert_eq!(listing(&algorithm_dir(&out)), files);
    assert_eq!(v["msccl_algo_dir"].as_str(), algorithm_dir(&out).to_str());
    // The same command again leaves the directory as it was.
    let (ok, stdout, _) = tacos(&args);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["written"], "unchanged");
    // The table names every band once per (collective, placement): 6 bands x 4.
    let (ok, table, err) = tacos(&args[..args.len() - 1]);
    assert!(ok, "{err}");
    let rows = table.lines().filter(|l| l.contains(".xml")).count();
    assert_eq!(rows, 6 * 4, "{table}");
    let algo_dir = format!("MSCCL_ALGO_DIR={}", algorithm_dir(&out).display());
    assert!(table.contains(&algo_dir), "{table}");
    assert!(table.contains("allreduce, in place") && table.contains("vs best baseline"));

    let (ok, report, err) = tacos(&["compile", "--check", out_s]);
    assert!(ok, "{err}");
    assert!(report.contains("ok:"), "{report}");
    let first = algorithm_dir(&out).join(entries[0]["file"].as_str().unwrap());
    let text = std::fs::read_to_string(&first).unwrap();
    std::fs::write(&first, text.replace("</algo>", "</algo>\n<!-- edited -->")).unwrap();
    let e = fails(&["compile", "--check", out_s]);
    assert!(e.contains("edited"), "{e}");
}

#[test]
fn bad_input_gets_one_line_and_leaves_nothing() {
    let root = scratch("bad");
    let out = root.join("algos");
    let out_s = out.to_str().unwrap();
    let base = ["compile", "torus:2x4", "--out", out_s];
    let with = |extra: &[&'static str]| -> Vec<&str> { [&base[..], extra].concat() };
    let refusals: [(&[&str], &str); 10] = [
        (&["--target", "executor-512"], "executor-256, msccl-legacy"),
        (&["--max-steps", "0"], "--max-steps: '0'"),
        (&["--max-tbs", "0"], "--max-tbs: '0'"),
        (&["--sizes", "64KiB..1KiB"], "backwards"),
        (&["--sizes", "1KiB-64KiB"], "MIN..MAX"),
        (&["--sizes", "1000..64KiB"], "power of two"),
        (&["--collectives", "broadcast"], "root"),
        (&["--collectives", "allscatter"], "allscatter"),
        (&["--proto", "fast"], "auto, Simple, LL, LL128"),
        (
            &["--collectives", "alltoall", "--inplace", "inplace"],
            "cannot run in place",
        ),
    ];
    for (extra, why) in refusals {
        let e = fails(&with(extra));
        assert!(e.contains(why), "{extra:?}: {e}");
    }
    assert!(std::fs::read_dir(&root).unwrap().next().is_none());
    // A directory that is not ours is refused before any work, and kept.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let e = fails(&with(&["--sizes", "1KiB..2KiB"]));
    assert!(e.contains("--force"), "{e}");
    assert!(out.join("keep.txt").exists());
    let (ok, _, err) = tacos(&with(&["--sizes", "1KiB..2KiB", "--force", "--quiet"]));
    assert!(ok, "{err}");
    assert!(!out.join("keep.txt").exists());
    let e = fails(&["compile", "--check", root.to_str().unwrap()]);
    assert!(e.contains("not a tacos algorithm directory"), "{e}");
}

/// The most steps in one threadblock, and the most threadblocks on one GPU.
fn shape(program: &Program) -> (usize, usize) {
    let steps = program.gpus.iter().flat_map(|g| &g.threadblocks);
    let steps = steps.map(|t| t.steps.len()).max().unwrap_or(0);
    let tbs = program.gpus.iter().map(|g| g.threadblocks.len()).max();
    (steps, tbs.unwrap_or(0))
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// Checks `dir` on another thread, so a check that blocked on a FIFO fails the test
/// instead of hanging it.
fn check_in_time(dir: &Path) -> tacos::compile::CheckReport {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || tx.send(check_dir(&dir)).unwrap());
    let report = rx.recv_timeout(std::time::Duration::from_secs(120));
    report.expect("the check came back").unwrap()
}

#[test]
fn the_algorithm_directory_holds_only_the_compiled_xml() {
    let set = compiled();
    let dir = scratch("layout").join("out");
    write_dir(set, &dir, false).unwrap();
    assert_eq!(listing(&dir), ["manifest.json", "msccl"]);
    let mut names: Vec<String> = set.files.iter().map(|f| f.name.clone()).collect();
    names.sort();
    let inside = algorithm_dir(&dir);
    assert_eq!(listing(&inside), names);
    for name in &names {
        let path = inside.join(name);
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.trim_start().starts_with("<algo "), "{name}");
        parse_program(&text, name).unwrap();
    }
}

#[test]
fn check_finds_every_entry_the_executor_would_choke_on() {
    let set = compiled();
    let root = scratch("choke");
    let dir = root.join("out");
    write_dir(set, &dir, false).unwrap();
    let inside = algorithm_dir(&dir);
    std::fs::write(inside.join("README"), "notes, not XML").unwrap();
    std::fs::write(inside.join(".hidden"), "").unwrap();
    mkfifo(&inside.join("pipe"));
    std::fs::create_dir(inside.join("sub")).unwrap();
    // A listed file again under another name: it claims the same range.
    let (first, copy) = (&set.files[0], "copy.xml");
    std::fs::write(inside.join(copy), &first.xml).unwrap();
    let before = listing(&inside);
    let report = check_in_time(&dir);
    let of = |file: &str| -> Vec<CheckKind> {
        let file = format!("msccl/{file}");
        let mut k: Vec<CheckKind> = report
            .problems
            .iter()
            .filter(|p| p.file.as_deref() == Some(file.as_str()))
            .map(|p| p.kind)
            .collect();
        k.sort_by_key(|k| k.name());
        k
    };
    assert_eq!(of("README"), [CheckKind::NotAlgorithm]);
    assert_eq!(of(".hidden"), [CheckKind::NotAlgorithm]);
    assert_eq!(of("pipe"), [CheckKind::NotAlgorithm]);
    assert_eq!(of("sub"), [CheckKind::NotAlgorithm]);
    // The copy is not listed, and claims what the original does (named in the message).
    assert_eq!(of(copy), [CheckKind::Conflict, CheckKind::Extra]);
    let conflict = report
        .problems
        .iter()
        .find(|p| p.kind == CheckKind::Conflict);
    assert!(
        conflict.unwrap().message.contains(&first.name),
        "{conflict:?}"
    );
    assert_eq!(report.problems.len(), 6, "{:?}", report.problems);
    // The command fails, naming each file, and writes nothing.
    let e = fails(&["compile", "--check", dir.to_str().unwrap()]);
    assert!(e.contains("6 problem(s)"), "{e}");
    let (_, out, _) = tacos(&["compile", "--check", dir.to_str().unwrap()]);
    for name in ["README", ".hidden", "pipe", "sub", copy] {
        assert!(out.contains(&format!("msccl/{name}")), "{name}: {out}");
    }
    assert_eq!(listing(&inside), before);
    assert_eq!(listing(&root), ["out"]);
}

/// The compiled set with its in-place All-Reduce file replaced by the same band's program
/// lowered for `executor-256` with K = 8: 76 steps in a threadblock on torus:2x4, over the
/// executor's 64 (its program for the default target spreads them over more
/// threadblocks), and the manifest's hash, channels and chunks updated to match.
fn over_64_steps(dir: &Path) {
    let set = compiled();
    let index = set
        .manifest
        .entries
        .iter()
        .position(|e| e.collective == CollectiveKind::AllReduce && e.in_place)
        .unwrap();
    let entry = &set.manifest.entries[index];
    let topo = topo();
    let coll = Collective::over_all(&topo, CollectiveKind::AllReduce, None, 8, 64 << 20).unwrap();
    let schedule = synthesize(&topo, &coll, &SynthOptions::default()).unwrap();
    let options = LowerOptions {
        in_place: Some(true),
        proto: Some(entry.proto.parse().unwrap()),
        min_bytes: Some(entry.min_bytes),
        max_bytes: Some(entry.max_bytes),
        target: Target::new(Profile::Executor256),
        ..LowerOptions::default()
    };
    let program = lower(&schedule, &topo, &options).unwrap();
    let steps = shape(&program).0;
    assert!((65..=256).contains(&steps), "{steps} steps");
    let xml = tacos::msccl::write_program(&program);
    let mut altered = set.clone();
    altered.files[index].xml = xml.clone();
    let entry = &mut altered.manifest.entries[index];
    entry.sha256 = sha256_hex(xml.as_bytes());
    entry.channels = program.nchannels;
    entry.chunks_per_loop = program.nchunksperloop;
    write_dir(&altered, dir, true).unwrap();
}

#[test]
fn check_refuses_a_file_over_the_targets_limits() {
    let dir = scratch("over").join("out");
    over_64_steps(&dir);
    let report = check_dir(&dir).unwrap();
    assert_eq!(kinds(&report.problems), [CheckKind::Limits]);
    assert!(
        report.problems[0].message.contains("64"),
        "{:?}",
        report.problems
    );
    let roomy = Target::new(Profile::Executor256);
    let options = CheckOptions {
        target: Some(&roomy),
        ..CheckOptions::default()
    };
    assert!(check_dir_with(&dir, &options).unwrap().is_ok());
    let d = dir.to_str().unwrap();
    let e = fails(&["compile", "--check", d]);
    assert!(e.contains("limits"), "{e}");
    let (ok, out, err) = tacos(&["compile", "--check", d, "--target", "executor-256"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("for target executor-256"), "{out}");
    let e = fails(&["compile", "--check", d, "--max-steps", "32"]);
    assert!(e.contains("limits"), "{e}");
}

#[test]
fn the_manifest_and_the_cache_name_record_the_target() {
    let set = compiled();
    assert_eq!(set.manifest.options.target, Target::default());
    let json = set.manifest.to_json();
    assert!(
        json.contains("\"profile\": \"executor\"") && json.contains("\"max_steps_per_tb\": 64"),
        "{json}"
    );
    let roomy = CompileOptions {
        target: Target::new(Profile::Executor256),
        ..options()
    };
    let (a, b) = (
        cache_dir_name(&topo(), &options()),
        cache_dir_name(&topo(), &roomy),
    );
    assert!(
        a.contains("-executor-") && b.contains("-executor-256-"),
        "{a} {b}"
    );
    let tighter = CompileOptions {
        target: Target::with_overrides(
            Profile::Executor,
            &LimitOverrides {
                max_steps_per_tb: Some(32),
                ..LimitOverrides::default()
            },
        )
        .unwrap(),
        ..options()
    };
    assert_ne!(cache_dir_name(&topo(), &tighter), a);
    // Read back, a manifest gives the same target.
    let dir = scratch("record").join("out");
    write_dir(set, &dir, false).unwrap();
    assert_eq!(Manifest::read(&dir).unwrap(), set.manifest);
}

/// A target so tight (16 steps per threadblock, 4 threadblocks per GPU) that on torus:2x4
/// only K = 1 fits All-Reduce (10 steps in 3 threadblocks; K = 4 takes 40 steps, which 4
/// threadblocks cannot hold): every band picks K = 1, every file keeps to the limits, and
/// the fast ranking stops trying K = 4 and 16 once they broke them.
#[test]
fn bands_pick_a_k_that_fits_the_target() {
    let tight = Target::with_overrides(
        Profile::Executor,
        &LimitOverrides {
            max_steps_per_tb: Some(16),
            max_tbs: Some(4),
            ..LimitOverrides::default()
        },
    )
    .unwrap();
    for ranking in [Ranking::Programs, Ranking::Schedules] {
        let options = CompileOptions {
            collectives: vec![CollectiveKind::AllReduce],
            sizes: SizeRange::new(1 << 20, 64 << 20).unwrap(),
            chunk_candidates: vec![1, 4, 16],
            seeds: 1,
            baselines: false,
            ranking,
            target: tight.clone(),
            ..options()
        };
        let set = compile(&topo(), &options, &|_| {}).unwrap();
        for (entry, file) in set.manifest.entries.iter().zip(&set.files) {
            assert_eq!(entry.algorithm.chunks_per_npu(), Some(1), "{ranking:?}");
            let (steps, tbs) = shape(&parse_program(&file.xml, &file.name).unwrap());
            assert!(
                steps <= 16 && tbs <= 4,
                "{}: {steps} steps, {tbs} tbs",
                file.name
            );
        }
        let limited: Vec<_> = set
            .rejected
            .iter()
            .filter(|r| r.candidate.chunks_per_npu() > Some(1))
            .collect();
        assert!(!limited.is_empty(), "{ranking:?}");
        if ranking == Ranking::Schedules {
            // Pruned once they broke the limits: no later band tries them again.
            let first = limited[0].band.min_bytes;
            assert!(
                limited.iter().all(|r| r.band.min_bytes == first),
                "{:?}",
                limited
                    .iter()
                    .map(|r| (r.candidate, r.band.min_bytes))
                    .collect::<Vec<_>>()
            );
        }
    }
    // Nothing fits one step per threadblock: the error names the target and the limit.
    let none = CompileOptions {
        collectives: vec![CollectiveKind::AllReduce],
        sizes: SizeRange::new(MIN, MIN).unwrap(),
        target: Target::with_overrides(
            Profile::Executor,
            &LimitOverrides {
                max_steps_per_tb: Some(1),
                max_tbs: Some(2),
                ..LimitOverrides::default()
            },
        )
        .unwrap(),
        ..options()
    };
    let e = compile(&topo(), &none, &|_| {}).unwrap_err().to_string();
    assert!(
        e.contains("limits of target executor") && e.contains("steps"),
        "{e}"
    );
}

#[test]
fn a_directory_in_the_old_layout_is_stale_and_replaced() {
    let set = compiled();
    let dir = scratch("old-layout").join("out");
    write_dir(set, &dir, false).unwrap();
    // Format 1: the files beside the manifest.
    let inside = algorithm_dir(&dir);
    for name in listing(&inside) {
        std::fs::rename(inside.join(&name), dir.join(&name)).unwrap();
    }
    std::fs::remove_dir(&inside).unwrap();
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let old = text.replace("\"format_version\": 2", "\"format_version\": 1");
    assert_ne!(old, text);
    std::fs::write(&path, old).unwrap();
    assert_eq!(
        kinds(&check_dir(&dir).unwrap().problems),
        [CheckKind::Stale]
    );
    // Ours: replaced without --force, in the new layout.
    assert_eq!(write_dir(set, &dir, false).unwrap(), Written::Replaced);
    assert_eq!(listing(&dir), ["manifest.json", "msccl"]);
    assert!(check_dir(&dir).unwrap().is_ok());
}

/// A process id no process has: above Linux's largest (`PID_MAX_LIMIT`, 2^22), so a
/// writer named with it is certainly gone (a real one that exited could be reused).
fn dead_pid() -> u32 {
    (1 << 22) + 1
}

/// Copies a compiled directory.
fn copy_set(from: &Path, to: &Path) {
    std::fs::create_dir_all(algorithm_dir(to)).unwrap();
    std::fs::copy(from.join(MANIFEST_FILE), to.join(MANIFEST_FILE)).unwrap();
    for file in std::fs::read_dir(algorithm_dir(from)).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), algorithm_dir(to).join(file.file_name())).unwrap();
    }
}

/// Makes `path` look `hours` old.
fn age(path: &Path, hours: u64) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(hours * 3600);
    std::fs::File::open(path)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

/// A hidden directory beside `dir` named as a writer names its own, with a file inside.
fn hidden(dir: &Path, kind: &str, pid: u32, n: u32) -> PathBuf {
    let name = dir.file_name().unwrap().to_str().unwrap();
    let path = dir.with_file_name(format!(".{name}.{kind}-{pid}-{n}"));
    std::fs::create_dir_all(path.join("msccl")).unwrap();
    std::fs::write(path.join("msccl/partial.xml"), "<algo").unwrap();
    path
}

#[test]
fn what_killed_writers_left_is_removed_by_the_next_write_and_nothing_else() {
    let set = compiled();
    let root = scratch("leftovers");
    let dir = root.join("out");
    let (dead, alive) = (dead_pid(), std::process::id());
    let gone = [
        hidden(&dir, "tmp", dead, 0),
        hidden(&dir, "old", dead, 1),
        // A live process's, but over a day old and unlocked: its writer is long gone
        // (the PID was reused).
        hidden(&dir, "tmp", alive, 2),
    ];
    age(&gone[2], 25);
    let kept = [
        // A live process's, recent: perhaps still writing.
        hidden(&dir, "tmp", alive, 3),
        // A dead PID (another PID namespace, say) whose writer holds the lock.
        hidden(&dir, "tmp", dead, 4),
        // Another directory's, and a name that is not a writer's.
        hidden(&root.join("other"), "tmp", dead, 5),
    ];
    std::fs::create_dir(root.join(".out.tmp-notes")).unwrap();
    let lock = std::fs::File::open(&kept[1]).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor of a file that stays open while the lock is held.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    assert_eq!(write_dir(set, &dir, false).unwrap(), Written::Created);
    for path in &gone {
        assert!(!path.exists(), "{} left", path.display());
    }
    for path in &kept {
        assert!(path.exists(), "{} removed", path.display());
    }
    assert!(root.join(".out.tmp-notes").exists());
    assert!(check_dir(&dir).unwrap().is_ok());
    drop(lock);
}

#[test]
fn a_replacement_killed_between_its_renames_is_put_back_on_the_next_open() {
    // The state the fallback replacement (two renames, where the filesystem cannot swap
    // two directories) leaves when killed between them: no `out`, the old set moved
    // aside, the complete new one staged.
    let set = compiled();
    let topo = topo();
    let root = scratch("interrupted-swap");
    let dir = root.join("out");
    let small = compile(
        &topo,
        &CompileOptions {
            collectives: vec![CollectiveKind::AllGather],
            sizes: SizeRange::new(MIN, 4 * MIN).unwrap(),
            placements: Placements::OutOfPlace,
            ..options()
        },
        &|_| {},
    )
    .unwrap();
    let dead = dead_pid();
    // Copies, not the written directories themselves: a child process another test
    // forks at the wrong moment may hold the write's lock on those a little longer.
    let interrupt = |old: &AlgorithmSet, new: &AlgorithmSet| {
        let written = scratch("interrupted-swap-sets");
        write_dir(old, &written.join("old"), false).unwrap();
        write_dir(new, &written.join("new"), false).unwrap();
        copy_set(
            &written.join("old"),
            &root.join(format!(".out.old-{dead}-0")),
        );
        copy_set(
            &written.join("new"),
            &root.join(format!(".out.tmp-{dead}-1")),
        );
        assert!(!dir.exists());
    };
    // The cache's open puts the new set back and uses it: nothing is compiled.
    interrupt(&small, set);
    let (manifest, how) = open_or_compile(&dir, &topo, &options(), false, &|_| {}).unwrap();
    assert_eq!((how, &manifest), (Opened::Existing, &set.manifest));
    assert!(check_dir(&dir).unwrap().is_ok());
    assert_eq!(listing(&root), ["out"]);
    // A staged set that never got its manifest is incomplete: the old one comes back.
    std::fs::remove_dir_all(&dir).unwrap();
    interrupt(&small, set);
    let staged = dir.with_file_name(format!(".out.tmp-{dead}-1"));
    std::fs::remove_file(staged.join(MANIFEST_FILE)).unwrap();
    assert_eq!(
        write_dir(&small, &dir, false).unwrap(),
        Written::AlreadyThere
    );
    assert_eq!(Manifest::read(&dir).unwrap(), small.manifest);
    assert_eq!(listing(&root), ["out"]);
}

#[test]
fn replacing_a_directory_swaps_it_whole() {
    // Replacing one set by another leaves the new one and nothing beside it; on Linux
    // the two are swapped in one step (renameat2 RENAME_EXCHANGE), so `out` is never
    // missing, which a reader polling it throughout would see.
    let set = compiled();
    let root = scratch("swap");
    let dir = root.join("out");
    let other = AlgorithmSet {
        manifest: Manifest {
            tool_version: format!("{}-other", tacos::VERSION),
            ..set.manifest.clone()
        },
        ..set.clone()
    };
    write_dir(set, &dir, false).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let missing = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut missing = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if std::fs::symlink_metadata(dir.join(MANIFEST_FILE)).is_err() {
                    missing += 1;
                }
            }
            missing
        });
        for i in 0..20 {
            let next = if i % 2 == 0 { &other } else { set };
            assert_eq!(write_dir(next, &dir, false).unwrap(), Written::Replaced);
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert_eq!(missing, 0, "the manifest was missing {missing} times");
    assert_eq!(listing(&root), ["out"]);
}

/// A change to a manifest.
type Edit = fn(&mut Manifest);

/// A fresh copy of the compiled set in `root/name` with its manifest changed by `edit`.
fn edited(root: &Path, name: &str, edit: impl Fn(&mut Manifest)) -> PathBuf {
    let dir = root.join(name);
    write_dir(compiled(), &dir, false).unwrap();
    let mut manifest = Manifest::read(&dir).unwrap();
    edit(&mut manifest);
    std::fs::write(dir.join(MANIFEST_FILE), manifest.to_json()).unwrap();
    dir
}

#[test]
fn check_compares_every_manifest_field_with_the_file_it_describes() {
    let root = scratch("edited-fields");
    let topo = topo();
    let with_topology = CheckOptions {
        topology: Some(&topo),
        ..CheckOptions::default()
    };
    let edits: [(&str, Edit); 7] = [
        ("chunks", |m| m.entries[0].chunks_per_loop *= 2),
        ("channels", |m| m.entries[0].channels += 1),
        ("proto", |m| {
            let other = if m.entries[0].proto == "LL" {
                "Simple"
            } else {
                "LL"
            };
            m.entries[0].proto = other.into()
        }),
        ("time", |m| m.entries[0].bands[0].time_us *= 1.5),
        ("algbw", |m| m.entries[0].bands[0].algbw_gbps *= 2.0),
        ("bound", |m| m.entries[0].bands[0].bound_us *= 0.5),
        ("band-size", |m| m.entries[0].bands[0].size_bytes += 1),
    ];
    for (name, edit) in &edits {
        let dir = edited(&root, name, edit);
        let report = check_dir(&dir).unwrap();
        assert_eq!(
            kinds(&report.problems),
            [CheckKind::Invalid],
            "{name}: {:?}",
            report.problems
        );
        let file = format!("msccl/{}", compiled().manifest.entries[0].file);
        assert_eq!(
            report.problems[0].file.as_deref(),
            Some(file.as_str()),
            "{name}"
        );
    }
    // Every figure of a band edited together stays consistent: re-timing on the
    // topology finds it.
    let dir = edited(&root, "all-figures", |m| {
        let b = &mut m.entries[0].bands[0];
        b.time_us *= 2.0;
        b.algbw_gbps /= 2.0;
        b.efficiency /= 2.0;
        if let (Some(base), Some(s)) = (b.best_baseline_us, b.speedup_vs_baseline.as_mut()) {
            *s = base / b.time_us;
        }
    });
    assert!(check_dir(&dir).unwrap().is_ok());
    let report = check_dir_with(&dir, &with_topology).unwrap();
    assert_eq!(kinds(&report.problems), [CheckKind::Prediction]);
    // The topology's hash, against the topology given.
    let dir = edited(&root, "hash", |m| {
        m.topology.hash = m.topology.hash.replace(|c: char| c != '0', "0")
    });
    let report = check_dir_with(&dir, &with_topology).unwrap();
    assert_eq!(kinds(&report.problems), [CheckKind::Topology]);
    // The command does the same with the topology given after the directory.
    let d = dir.to_str().unwrap();
    let e = fails(&["compile", "--check", d, SPEC]);
    assert!(e.contains("topology"), "{e}");
    let time = root.join("time");
    let e = fails(&["compile", "--check", time.to_str().unwrap()]);
    assert!(e.contains("disagree"), "{e}");
}

#[test]
fn check_refuses_a_manifest_that_is_not_a_regular_file_without_opening_it() {
    let root = scratch("manifest-fifo");
    let dir = root.join("out");
    write_dir(compiled(), &dir, false).unwrap();
    let manifest = dir.join(MANIFEST_FILE);
    let (tx, rx) = std::sync::mpsc::channel();
    std::fs::remove_file(&manifest).unwrap();
    mkfifo(&manifest);
    let d = dir.clone();
    std::thread::spawn(move || tx.send(check_dir(&d).map(|_| ())).unwrap());
    let result = rx.recv_timeout(std::time::Duration::from_secs(120));
    let e = result
        .expect("the check came back")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let e = fails(&["compile", "--check", dir.to_str().unwrap()]);
    assert!(e.contains("not a regular file"), "{e}");
    // A symbolic link to a good manifest is refused too.
    std::fs::remove_file(&manifest).unwrap();
    let elsewhere = root.join("manifest-elsewhere.json");
    std::fs::write(&elsewhere, compiled().manifest.to_json()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &manifest).unwrap();
    let e = check_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

/// On two H100 nodes a band is served only where its program is predicted faster than
/// NCCL's best choice there (of the algorithms NCCL has enabled, the one the cost model
/// prices fastest) by more than the built-in profile's own measured error at that size,
/// and the manifest records that margin for every band, served or left to NCCL.
#[test]
fn a_band_is_served_only_past_the_models_own_error() {
    use tacos::cost::ExecModel;
    use tacos::gpu::GpuArch;
    let out = scratch("margins").join("set");
    let args = [
        "compile",
        "preset:dgx-h100",
        "--fast",
        "--sizes",
        "1KiB..1GiB",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    let (ok, stdout, err) = tacos(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let model = ExecModel::builtin(GpuArch::Hopper);
    let margin_at = |bytes: u64| model.error_at(bytes);
    let mut served = 0;
    for entry in v["manifest"]["entries"].as_array().unwrap() {
        for band in entry["bands"].as_array().unwrap() {
            let nccl = &band["nccl"];
            let (ours, theirs) = (
                band["time_us"].as_f64().unwrap(),
                nccl["time_us"].as_f64().unwrap(),
            );
            let margin = nccl["margin"].as_f64().unwrap();
            let bytes = band["size_bytes"].as_u64().unwrap();
            assert!(margin >= margin_at(bytes), "{band}");
            assert!(ours * (1.0 + margin) < theirs, "{band}");
            served += 1;
        }
    }
    let left = v["manifest"]["left_to_nccl"].as_array().unwrap();
    for band in left {
        let margin = band["nccl"]["margin"].as_f64().unwrap();
        assert!(
            margin >= margin_at(band["min_bytes"].as_u64().unwrap()),
            "{band}"
        );
        let (ours, theirs) = (
            band["program_us"].as_f64().unwrap(),
            band["nccl"]["time_us"].as_f64().unwrap(),
        );
        assert!(ours * (1.0 + margin) >= theirs, "{band}");
    }
    assert!(
        served > 0 && !left.is_empty(),
        "{served} served, {} left",
        left.len()
    );
}
