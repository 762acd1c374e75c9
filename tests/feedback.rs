//! `tacos compile --feedback`: nccl-tests outputs measured with a compiled set and without
//! it, written here as nccl-tests prints them from the manifest's own predictions (so which
//! band measured slower is known by construction), fed back to the directory. A band where
//! ours measured slower goes back to NCCL, its file cut or removed, and the manifest records
//! both figures; the other bands stay byte for byte; the directory still checks. Results
//! that do not match the directory are refused with the directory's bytes unchanged.

mod common;

use common::tacos;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tacos::collective::CollectiveKind;
use tacos::compile::{algorithm_dir, check_dir, Manifest};
use tacos::msccl::{parse_program, Program};

const SPEC: &str = "preset:dgx-h100";
const RANKS: usize = 16;
const MIN: u64 = 1 << 10;
const MAX: u64 = 256 << 10;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("feedback-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the set of [`compiled`] again over the one in `root`; its warnings.
fn compiled_warning(root: &Path) -> String {
    let (ok, _, err) = tacos(&compile_args(&root.join("set")));
    assert!(ok, "{err}");
    err
}

/// A small set for two H100 nodes: All-Gather and Reduce-Scatter over 1 KiB..256 KiB, one
/// band per doubling, K = 1 and one seed so it compiles in well under a second. NCCL
/// competes, so some bands are served and some left to NCCL.
fn compiled(root: &Path) -> PathBuf {
    let out = root.join("set");
    let (ok, _, err) = tacos(&compile_args(&out));
    assert!(ok, "{err}");
    out
}

fn compile_args(out: &Path) -> Vec<&str> {
    vec![
        "compile",
        SPEC,
        "--out",
        out.to_str().unwrap(),
        "--sizes",
        "1KiB..256KiB",
        "--collectives",
        "allgather,reducescatter",
        "-k",
        "1",
        "--seeds",
        "1",
        "--no-baselines",
        "--quiet",
    ]
}

/// Our predicted time and NCCL's at `size`: the band serving it (the prediction at its
/// smallest size), or, for a band left to NCCL, NCCL's for both, since the executor runs
/// NCCL's own algorithm there even with the set loaded.
fn predicted(m: &Manifest, kind: CollectiveKind, in_place: bool, size: u64) -> (f64, f64) {
    if let Some(e) = m.select(kind, RANKS, in_place, size) {
        let band = e.bands.iter().rev().find(|b| b.size_bytes <= size).unwrap();
        let nccl = band.nccl.as_ref().expect("NCCL competed").time_us;
        return (band.time_us, nccl);
    }
    let left = m
        .left_to_nccl
        .iter()
        .find(|l| {
            (l.collective, l.in_place) == (kind, in_place)
                && (l.min_bytes..=l.max_bytes).contains(&size)
        })
        .expect("every size is served or left to NCCL");
    (left.nccl.time_us, left.nccl.time_us)
}

/// What nccl-tests prints for one run of `kind` over `sizes` on `ranks` ranks of two hosts
/// (an MPI run, one process per GPU, as `measure-plan` launches it), each row's
/// out-of-place and in-place times from `time(in_place, size)`.
fn nccl_tests_output(
    kind: CollectiveKind,
    ranks: usize,
    sizes: &[u64],
    time: impl Fn(bool, u64) -> f64,
) -> String {
    let program = match kind {
        CollectiveKind::AllGather => "all_gather_perf",
        CollectiveKind::ReduceScatter => "reduce_scatter_perf",
        CollectiveKind::AllReduce => "all_reduce_perf",
        other => panic!("no nccl-tests program written here for {other}"),
    };
    let mut text = format!(
        "# Collective test starting: {program}\n\
         # nThread 1 nGpus 1 minBytes {} maxBytes {} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n# Using devices\n",
        sizes[0],
        sizes[sizes.len() - 1]
    );
    for rank in 0..ranks {
        text += &format!(
            "#  Rank {rank:2} Group  0 Pid {:6} on {:>10} device {:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3\n",
            4100 + rank,
            format!("node-{}", rank / 8),
            rank % 8,
            0x18 + rank % 8
        );
    }
    text += "#\n\
#                                                              out-of-place                       in-place          \n\
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)        \n";
    let (redop, per_rank) = match kind {
        CollectiveKind::AllReduce => ("sum", 1),
        CollectiveKind::ReduceScatter => ("sum", ranks as u64),
        _ => ("none", ranks as u64),
    };
    let bus = (ranks - 1) as f64 / ranks as f64;
    for &size in sizes {
        let columns = |us: f64| {
            let algbw = size as f64 / (us * 1e3);
            format!("{us:8.2} {algbw:7.2} {:7.2}       0", algbw * bus)
        };
        text += &format!(
            "{size:12} {:13}     float {redop:>7}      -1 {} {}\n",
            size / 4 / per_rank,
            columns(time(false, size)),
            columns(time(true, size))
        );
    }
    text += &format!(
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.23 \n#\n# Collective test concluded: {program}\n"
    );
    text
}

/// The doublings from 1 KiB to 256 KiB, as `measure-plan`'s `-b 1K -e 256K -f 2` runs.
fn measured_sizes() -> Vec<u64> {
    std::iter::successors(Some(MIN), |s| Some(s * 2))
        .take_while(|&s| s <= MAX)
        .collect()
}

/// Writes `tacos-{kind}.txt` and `nccl-{kind}.txt` for every collective of the set, the
/// figures the manifest predicts, except that ours takes 1.25 times NCCL's time at the
/// (collective, in place, size) listed in `slower`. Returns the files.
fn results(root: &Path, m: &Manifest, slower: &[(CollectiveKind, bool, u64)]) -> Vec<String> {
    let mut files = Vec::new();
    for &kind in &m.options.collectives {
        let with = nccl_tests_output(kind, RANKS, &measured_sizes(), |in_place, size| {
            let (ours, nccl) = predicted(m, kind, in_place, size);
            match slower.contains(&(kind, in_place, size)) {
                true => nccl * 1.25,
                false => ours,
            }
        });
        let without = nccl_tests_output(kind, RANKS, &measured_sizes(), |in_place, size| {
            predicted(m, kind, in_place, size).1
        });
        for (prefix, text) in [("tacos", with), ("nccl", without)] {
            let file = root.join(format!("{prefix}-{kind}.txt"));
            std::fs::write(&file, text).unwrap();
            files.push(file.to_str().unwrap().to_string());
        }
    }
    files
}

fn feedback(dir: &Path, files: &[String], json: bool) -> (bool, String, String) {
    let mut args = vec!["compile", "--feedback"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["--out", dir.to_str().unwrap()]);
    if json {
        args.push("--json");
    }
    tacos(&args)
}

/// Every file under `dir` (hidden ones too) and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(snapshot(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// The directory checks: against its manifest, every file re-verified, and, on the
/// topology named, every prediction re-timed.
fn assert_checks(dir: &Path) {
    assert!(check_dir(dir).unwrap().is_ok());
    let (ok, out, err) = tacos(&["compile", "--check", dir.to_str().unwrap(), SPEC]);
    assert!(ok, "{out}{err}");
}

/// `tacos report --compiled DIR`'s page.
fn compiled_page(root: &Path, dir: &Path) -> String {
    let page = root.join("report.html");
    let (ok, _, err) = tacos(&[
        "report",
        "--compiled",
        dir.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(ok, "{err}");
    std::fs::read_to_string(page).unwrap()
}

fn served_bands(m: &Manifest) -> usize {
    m.entries.iter().map(|e| e.bands.len()).sum()
}

#[test]
fn bands_measured_faster_stay_as_they_were_and_record_the_measurements() {
    let root = scratch("faster");
    let dir = compiled(&root);
    let before = Manifest::read(&dir).unwrap();
    let files_before = snapshot(&algorithm_dir(&dir));
    let page_before = compiled_page(&root, &dir);
    let files = results(&root, &before, &[]);
    let (ok, out, err) = feedback(&dir, &files, true);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["command"], "compile-feedback");
    assert_eq!(v["written"], "replaced");
    let bands = v["bands"].as_array().unwrap();
    assert_eq!(bands.len(), served_bands(&before), "{out}");
    for band in bands {
        assert_eq!(band["outcome"], "kept", "{band}");
        // The outputs hold the predictions to two decimals.
        for field in [
            "ours_measured_over_predicted",
            "nccl_measured_over_predicted",
        ] {
            let ratio = band[field].as_f64().unwrap();
            assert!((ratio - 1.0).abs() < 1e-3, "{field}: {band}");
        }
        // One measurement per size the runs measured inside the band.
        let (lo, hi) = (
            band["min_bytes"].as_u64().unwrap(),
            band["max_bytes"].as_u64().unwrap(),
        );
        let inside = measured_sizes()
            .into_iter()
            .filter(|s| (lo..=hi).contains(s))
            .count();
        assert_eq!(band["measured"].as_array().unwrap().len(), inside, "{band}");
    }
    // The algorithm files are untouched; the manifest records every band's measurement.
    assert_eq!(snapshot(&algorithm_dir(&dir)), files_before);
    let after = Manifest::read(&dir).unwrap();
    assert!(after.returned_to_nccl.is_empty());
    assert_eq!(after.entries.len(), before.entries.len());
    for (e, was) in after.entries.iter().zip(&before.entries) {
        assert_eq!((&e.file, &e.sha256), (&was.file, &was.sha256));
        for (i, (band, was)) in e.bands.iter().zip(&was.bands).enumerate() {
            // Each size measured inside the band (up to the next band's), from its smallest
            // (where it is predicted), every one at the figures the runs were given: the
            // band's predictions.
            let hi = e.bands.get(i + 1).map_or(e.max_bytes, |b| b.size_bytes - 1);
            let inside: Vec<u64> = measured_sizes()
                .into_iter()
                .filter(|s| (band.size_bytes..=hi).contains(s))
                .collect();
            let sizes: Vec<u64> = band.measured.iter().map(|m| m.size_bytes).collect();
            assert_eq!(sizes, inside, "{}: {band:?}", e.file);
            let nccl = was.nccl.as_ref().unwrap().time_us;
            for m in &band.measured {
                assert!((m.ours_us - was.time_us).abs() <= 0.005, "{m:?} {was:?}");
                assert!((m.nccl_us - nccl).abs() <= 0.005, "{m:?} {was:?}");
            }
            assert_eq!(band.time_us, was.time_us);
        }
    }
    assert_checks(&dir);
    // The report on the set draws the measurements beside the predictions.
    let page = compiled_page(&root, &dir);
    for drawn in [
        "measured: ours",
        "measured: NCCL",
        "predicted and measured bus bandwidth",
    ] {
        assert!(
            !page_before.contains(drawn),
            "{drawn} before any measurement"
        );
        assert!(page.contains(drawn), "{drawn} missing from the report");
    }
    // The same results again: the directory already holds them.
    let (ok, out, err) = feedback(&dir, &files, false);
    assert!(ok, "{err}");
    assert!(out.starts_with("unchanged"), "{out}");
}

/// The out-of-place All-Gather file serves several bands; the one at 8 KiB, in its middle,
/// measures slower, so the file is cut in two around it.
#[test]
fn a_band_measured_slower_goes_back_to_nccl_and_its_file_is_cut_around_it() {
    let root = scratch("slower");
    let dir = compiled(&root);
    let before = Manifest::read(&dir).unwrap();
    let kind = CollectiveKind::AllGather;
    let size = 8 << 10;
    let old = before.select(kind, RANKS, false, size).unwrap().clone();
    assert!(
        old.min_bytes < size && old.max_bytes >= 2 * size,
        "the band must lie inside its file for this test: {old:?}"
    );
    let algorithms = algorithm_dir(&dir);
    let program = |name: &str, text: &[u8]| -> Program {
        parse_program(std::str::from_utf8(text).unwrap(), name).unwrap()
    };
    let was = snapshot(&algorithms);
    let original = program(&old.file, &was[&algorithms.join(&old.file)]);
    let files = results(&root, &before, &[(kind, false, size)]);
    let (ok, table, err) = feedback(&dir, &files, false);
    assert!(ok, "{err}");
    assert!(
        table.contains("1 returned to NCCL") && table.contains("returned to NCCL: measured slower"),
        "{table}"
    );

    let after = Manifest::read(&dir).unwrap();
    // The band is NCCL's: no file serves 8 KiB..16 KiB - 1 any more.
    for s in [size, size + 1000, 2 * size - 1] {
        assert!(after.select(kind, RANKS, false, s).is_none(), "{s}");
    }
    // Its neighbours are served by the same program, its size range cut to theirs.
    let below = after.select(kind, RANKS, false, size - 1).unwrap();
    let above = after.select(kind, RANKS, false, 2 * size).unwrap();
    assert_eq!(
        (below.min_bytes, below.max_bytes),
        (old.min_bytes, size - 1)
    );
    assert_eq!(
        (above.min_bytes, above.max_bytes),
        (2 * size, old.max_bytes)
    );
    assert!(!algorithms.join(&old.file).exists());
    for piece in [below, above] {
        let text = std::fs::read(algorithms.join(&piece.file)).unwrap();
        let mut cut = program(&piece.file, &text);
        assert_eq!(
            (cut.min_bytes, cut.max_bytes),
            (Some(piece.min_bytes), Some(piece.max_bytes))
        );
        (cut.min_bytes, cut.max_bytes) = (original.min_bytes, original.max_bytes);
        assert!(
            cut == original,
            "{} is not {}'s program",
            piece.file,
            old.file
        );
        assert_eq!(piece.algorithm, old.algorithm);
        let bands: Vec<_> = old
            .bands
            .iter()
            .filter(|b| (piece.min_bytes..=piece.max_bytes).contains(&b.size_bytes))
            .map(|b| b.time_us)
            .collect();
        let kept: Vec<_> = piece.bands.iter().map(|b| b.time_us).collect();
        assert_eq!(kept, bands, "{}", piece.file);
    }
    // The manifest records the band, both figures as measured, and why.
    let [returned] = &after.returned_to_nccl[..] else {
        panic!("one band returned: {:?}", after.returned_to_nccl)
    };
    assert_eq!(
        (
            returned.collective,
            returned.in_place,
            returned.min_bytes,
            returned.max_bytes
        ),
        (kind, false, size, 2 * size - 1)
    );
    assert_eq!(returned.file, old.file);
    let (ours, nccl) = predicted(&before, kind, false, size);
    let [m] = returned.prediction.measured[..] else {
        panic!("{returned:?}")
    };
    assert_eq!(m.size_bytes, size);
    assert!((m.nccl_us - nccl).abs() <= 0.005, "{m:?}");
    assert!((m.ours_us - nccl * 1.25).abs() <= 0.005, "{m:?}");
    assert_eq!(returned.prediction.time_us, ours);
    assert!(returned.reason.contains("8 KiB"), "{}", returned.reason);
    // Every other file is as it was, and the directory checks.
    for (path, bytes) in was.iter().filter(|(p, _)| !p.ends_with(&old.file)) {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
    }
    assert_eq!(
        served_bands(&after),
        served_bands(&before) - 1,
        "every other band stays"
    );
    assert_checks(&dir);
    // Compiling again starts from the model's choices, and says what it drops.
    let warning = compiled_warning(&root);
    assert!(
        warning.contains("1 band(s) returned to NCCL by measurements"),
        "{warning}"
    );
    assert!(Manifest::read(&dir).unwrap().returned_to_nccl.is_empty());
}

/// Every band of the in-place All-Gather file measures slower: the file goes, each band
/// is recorded as returned, and the sizes it served are NCCL's.
#[test]
fn a_file_whose_every_band_measured_slower_is_removed() {
    let root = scratch("all-slower");
    let dir = compiled(&root);
    let before = Manifest::read(&dir).unwrap();
    let kind = CollectiveKind::AllGather;
    let old = before.select(kind, RANKS, true, MIN).unwrap().clone();
    let slower: Vec<_> = old
        .bands
        .iter()
        .map(|b| (kind, true, b.size_bytes))
        .collect();
    let files = results(&root, &before, &slower);
    let (ok, out, err) = feedback(&dir, &files, true);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let returned: Vec<&serde_json::Value> = v["bands"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["outcome"] == "returned")
        .collect();
    assert_eq!(returned.len(), old.bands.len(), "{out}");
    assert!(returned.iter().all(|b| b["file"] == old.file.as_str()));
    assert!(!v["files"]
        .as_array()
        .unwrap()
        .contains(&old.file.as_str().into()));

    let after = Manifest::read(&dir).unwrap();
    assert!(!algorithm_dir(&dir).join(&old.file).exists());
    assert!(after.select(kind, RANKS, true, old.min_bytes).is_none());
    assert!(after.select(kind, RANKS, true, old.max_bytes).is_none());
    assert_eq!(after.entries.len(), before.entries.len() - 1);
    let ranges: Vec<(u64, u64)> = after
        .returned_to_nccl
        .iter()
        .map(|r| (r.min_bytes, r.max_bytes))
        .collect();
    assert_eq!(ranges.first().map(|r| r.0), Some(old.min_bytes));
    assert_eq!(ranges.last().map(|r| r.1), Some(old.max_bytes));
    assert!(
        ranges.windows(2).all(|w| w[1].0 == w[0].1 + 1),
        "{ranges:?}"
    );
    assert_checks(&dir);
}

/// Runs `compile --feedback` that must fail; returns its error.
fn refused(dir: &Path, files: &[String], spec: Option<&str>) -> String {
    let mut args = vec!["compile"];
    args.extend(spec);
    args.push("--feedback");
    args.extend(files.iter().map(String::as_str));
    args.extend(["--out", dir.to_str().unwrap()]);
    let (ok, out, err) = tacos(&args);
    assert!(!ok, "{args:?} should fail: {out}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    err
}

/// Results that do not match the directory, or cannot be read, are refused naming the file
/// and the mismatch, and nothing is written: the directory's bytes are as they were, and
/// nothing is left beside it.
#[test]
fn results_for_another_cluster_collective_or_sizes_are_refused_and_nothing_is_written() {
    let root = scratch("refused");
    let dir = compiled(&root);
    let m = Manifest::read(&dir).unwrap();
    let results_dir = root.join("results");
    std::fs::create_dir_all(&results_dir).unwrap();
    let good = results(&results_dir, &m, &[]);
    let kind = CollectiveKind::AllGather;
    let (good_with, good_without) = (&good[0], &good[1]);
    assert!(
        good_with.ends_with("tacos-allgather.txt") && good_without.ends_with("nccl-allgather.txt")
    );
    let before = snapshot(&root);
    // Each bad file in a folder of its own: several share a name.
    let written = std::cell::Cell::new(0);
    let write = |name: &str, text: String| -> String {
        written.set(written.get() + 1);
        let bad = root.join("bad").join(written.get().to_string());
        std::fs::create_dir_all(&bad).unwrap();
        let path = bad.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let predicted_ours = |in_place, size| predicted(&m, kind, in_place, size).0;
    let sizes = measured_sizes();
    let cases: Vec<(Vec<String>, Option<&str>, Vec<String>)> = vec![
        // One node's rank count.
        {
            let f = write(
                "tacos-allgather.txt",
                nccl_tests_output(kind, 8, &sizes, predicted_ours),
            );
            (
                vec![f.clone(), good_without.clone()],
                None,
                vec![f, "8 ranks".into(), "16".into()],
            )
        },
        // A collective the set was not compiled for.
        {
            let f = write(
                "tacos-allreduce.txt",
                nccl_tests_output(CollectiveKind::AllReduce, RANKS, &sizes, |_, _| 50.0),
            );
            let g = write(
                "nccl-allreduce.txt",
                nccl_tests_output(CollectiveKind::AllReduce, RANKS, &sizes, |_, _| 40.0),
            );
            (
                vec![f.clone(), g],
                None,
                vec![f, "allreduce".into(), "not compiled for".into()],
            )
        },
        // A file whose name says All-Gather holding a Reduce-Scatter run.
        {
            let text = nccl_tests_output(CollectiveKind::ReduceScatter, RANKS, &sizes, |_, _| 40.0);
            let f = write("tacos-allgather.txt", text);
            (
                vec![f.clone(), good_without.clone()],
                None,
                vec![f, "no allgather table".into()],
            )
        },
        // Sizes the set was not compiled for.
        {
            let big = [32 << 20, 64 << 20];
            let f = write(
                "nccl-allgather.txt",
                nccl_tests_output(kind, RANKS, &big, |_, _| 300.0),
            );
            (
                vec![good_with.clone(), f.clone()],
                None,
                vec![f, "none of it inside".into()],
            )
        },
        // One run without the other.
        (
            vec![good_with.clone()],
            None,
            vec!["allgather".into(), "not without the set".into()],
        ),
        // A name that says neither run.
        {
            let f = write("allgather.txt", std::fs::read_to_string(good_with).unwrap());
            (
                vec![f.clone(), good_without.clone()],
                None,
                vec![f, "tacos-".into()],
            )
        },
        // A row that is not a measurement: the file and its line.
        {
            let text = std::fs::read_to_string(good_without).unwrap();
            let row = text
                .lines()
                .position(|l| l.trim_start().starts_with("4096 "))
                .unwrap();
            let broken: Vec<String> = text
                .lines()
                .enumerate()
                .map(|(i, l)| match i == row {
                    true => l.replacen("float", "float  x", 1),
                    false => l.to_string(),
                })
                .collect();
            let f = write("nccl-allgather.txt", broken.join("\n"));
            (
                vec![good_with.clone(), f.clone()],
                None,
                vec![format!("{f}:{}", row + 1)],
            )
        },
        // A directory compiled for another topology than the one named.
        (
            good.clone(),
            Some("preset:dgx-h100,nodes=1"),
            vec!["compiled for".into(), "nodes=1".into()],
        ),
    ];
    for (files, spec, expected) in cases {
        let e = refused(&dir, &files, spec);
        for want in &expected {
            assert!(
                e.contains(want.as_str()),
                "{files:?}: wants {want:?} in: {e}"
            );
        }
        let now: BTreeMap<_, _> = snapshot(&root)
            .into_iter()
            .filter(|(p, _)| !p.starts_with(root.join("bad")))
            .collect();
        assert!(now == before, "{files:?} changed the directory");
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["bad", "results", "set"], "{files:?}");
    }
    // The good results still apply afterwards.
    let (ok, _, err) = feedback(&dir, &good, false);
    assert!(ok, "{err}");
}

/// Bands of three doublings (`--fast`) are measured at three sizes each: ours slower at
/// one that is not the band's smallest, where the prediction was made, still returns the
/// band, and the band records all three sizes.
#[test]
fn a_band_goes_back_when_ours_loses_at_any_size_inside_it() {
    let root = scratch("any-size");
    let dir = root.join("set");
    let mut args = compile_args(&dir);
    args.push("--fast");
    let (ok, _, err) = tacos(&args);
    assert!(ok, "{err}");
    let before = Manifest::read(&dir).unwrap();
    let kind = CollectiveKind::AllGather;
    let entry = before.select(kind, RANKS, true, 16 << 10).unwrap().clone();
    let band = entry
        .bands
        .iter()
        .rev()
        .find(|b| b.size_bytes <= 16 << 10)
        .unwrap();
    assert_eq!(band.size_bytes, 8 << 10, "{entry:?}");
    let files = results(&root, &before, &[(kind, true, 16 << 10)]);
    let (ok, _, err) = feedback(&dir, &files, false);
    assert!(ok, "{err}");
    let after = Manifest::read(&dir).unwrap();
    let [returned] = &after.returned_to_nccl[..] else {
        panic!("{:?}", after.returned_to_nccl)
    };
    assert_eq!(
        (returned.in_place, returned.min_bytes, returned.max_bytes),
        (true, 8 << 10, (64 << 10) - 1)
    );
    let sizes: Vec<u64> = returned
        .prediction
        .measured
        .iter()
        .map(|m| m.size_bytes)
        .collect();
    assert_eq!(sizes, [8 << 10, 16 << 10, 32 << 10]);
    let lost: Vec<bool> = returned
        .prediction
        .measured
        .iter()
        .map(|m| m.ours_us > m.nccl_us)
        .collect();
    assert_eq!(lost, [false, true, false]);
    assert!(returned.reason.contains("1 of 3") && returned.reason.contains("16 KiB"));
    assert!(after.select(kind, RANKS, true, 8 << 10).is_none());
    assert!(after.select(kind, RANKS, true, (8 << 10) - 1).is_some());
    assert_checks(&dir);
}
