//! The command line as a user meets it: outputs that agree with themselves, and one-line
//! errors with a non-zero exit for bad input.

mod common;

use common::tacos;

use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs a command that must fail; returns its one-line error.
fn fails(args: &[&str]) -> String {
    let (ok, _, err) = tacos(args);
    assert!(!ok, "{args:?} should fail");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(!lines.is_empty(), "{args:?} printed no error");
    lines[0].to_string()
}

#[test]
fn synth_json_reports_consistent_figures() {
    let (ok, out, err) = tacos(&[
        "synth",
        "mesh:4x4",
        "--collective",
        "allgather",
        "--size",
        "1GiB",
        "-k",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["npus"], 16);
    assert_eq!(v["collective"]["kind"], "allgather");
    assert_eq!(v["size_bytes"], 1u64 << 30);
    assert_eq!(v["chunk_bytes"], (1u64 << 26) as f64);
    let time_us = v["collective_time_us"].as_f64().unwrap();
    let algbw = v["algbw_gbps"].as_f64().unwrap();
    // algbw = size / time.
    assert!((algbw - (1u64 << 30) as f64 / (time_us * 1e-6) / 1e9).abs() < 1e-6);
    assert!(v["synth_time_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["transfers"], 16 * 15);
}

/// Without `-k`, `synth` and `compare` search K as `-k auto` does on a small problem: the
/// search includes K = 1 with the same seeds, so what it keeps is never slower than `-k 1`,
/// and on a torus (where one chunk per NPU leaves links idle) it is faster.
#[test]
fn synth_and_compare_search_k_by_default() {
    let run = |args: &[&str]| {
        let (ok, out, err) = tacos(args);
        assert!(ok, "{args:?}: {err}");
        json(&out)
    };
    let default = run(&["synth", "torus:4x4", "--json"]);
    let one = run(&["synth", "torus:4x4", "-k", "1", "--json"]);
    let tried: Vec<u64> = default["chunk_trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["chunks_per_npu"].as_u64().unwrap())
        .collect();
    for k in [1, 2, 4, 8] {
        assert!(tried.contains(&k), "K={k} not tried: {tried:?}");
    }
    let (searched, fixed) = (
        default["time_us"].as_f64().unwrap(),
        one["time_us"].as_f64().unwrap(),
    );
    assert!(searched < fixed, "searched {searched} us, K=1 {fixed} us");
    let compared = run(&["compare", "torus:4x4", "--json"]);
    let tacos_us = compared["algorithms"][0]["time_us"].as_f64().unwrap();
    assert!(
        (tacos_us - searched).abs() < 1e-6,
        "compare {tacos_us} us, synth {searched} us"
    );
    assert_eq!(
        compared["collective"]["chunks_per_npu"],
        default["collective"]["chunks_per_npu"]
    );
}

#[test]
fn synth_writes_a_schedule_that_reads_back() {
    let path = scratch("schedule.json");
    let p = path.to_str().unwrap();
    let (ok, _, err) = tacos(&[
        "synth",
        "ring:4",
        "--collective",
        "broadcast",
        "--root",
        "2",
        "--size",
        "4MB",
        "-k",
        "2",
        "--out",
        p,
    ]);
    assert!(ok, "{err}");
    let s = tacos::schedule::Schedule::read(&path).unwrap();
    assert_eq!(s.collective.root, Some(2));
    assert_eq!(s.transfers.len(), 3 * 2);
}

/// `--stream` writes a transfer stream that checks, and holds the schedule `--out` writes
/// for the same seed; it refuses what it cannot stream with one line.
#[test]
fn synth_streams_the_schedule_it_would_hold() {
    let stream = scratch("mesh.tts");
    let held = scratch("mesh.json");
    let common = [
        "synth", "mesh:6x6", "--size", "64MiB", "--seed", "3", "--seeds", "1",
    ];
    let (ok, out, err) = tacos(
        &[
            &common[..],
            &["--stream", stream.to_str().unwrap(), "--json"],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Every NPU takes in the 35 chunks it lacks, one transfer each (K = 1).
    assert_eq!(v["transfers"], 36 * 35);
    assert!(v["check_ms"].as_f64().is_some(), "{v}");
    assert_eq!(v["schedule_file"], stream.to_str().unwrap());
    let (ok, _, err) =
        tacos(&[&common[..], &["-k", "1", "--out", held.to_str().unwrap()]].concat());
    assert!(ok, "{err}");
    let streamed = tacos::schedule::Schedule::read(&stream).unwrap();
    let held = tacos::schedule::Schedule::read(&held).unwrap();
    let key = |t: &tacos::schedule::Transfer| (t.start_ps, t.src(), t.dst(), t.chunk());
    let mut a = streamed.transfers.clone();
    let mut b = held.transfers.clone();
    a.sort_unstable_by_key(key);
    b.sort_unstable_by_key(key);
    assert_eq!(a, b);
    assert_eq!(streamed.network, held.network);
    let p = stream.to_str().unwrap();
    // An All-Reduce streams too: every NPU takes in its 15 missing partial sums' worth
    // of reductions (each NPU but a chunk's owner sends its partial once) and then the 15
    // reduced chunks it lacks.
    let (ok, out, err) = tacos(&[
        "synth",
        "mesh:4x4",
        "-c",
        "allreduce",
        "--stream",
        p,
        "--json",
    ]);
    assert!(ok, "{err}");
    let synthesized: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(synthesized["transfers"], 2 * 16 * 15);
    // `tacos check` reads the stream again, and refuses it cut short, naming the file.
    let (ok, out, err) = tacos(&["check", p, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&v["form"], &v["collective"]),
        (&"stream".into(), &"allreduce".into())
    );
    assert_eq!(v["transfers"], synthesized["transfers"]);
    assert_eq!(v["collective_time_us"], synthesized["collective_time_us"]);
    let bytes = std::fs::read(&stream).unwrap();
    let cut = scratch("check-cut.tts");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = fails(&["check", cut.to_str().unwrap()]);
    assert!(
        e.contains("check-cut.tts") && e.contains("truncated"),
        "{e}"
    );
    let e = fails(&["synth", "mesh:4x4", "-k", "auto", "--stream", p]);
    assert!(e.contains("--stream takes a fixed -k"), "{e}");
    let e = fails(&["synth", "mesh:4x4", "--seeds", "4", "--stream", p]);
    assert!(e.contains("one seed"), "{e}");
}

/// `tacos check` reads a held schedule, and refuses one that lost a transfer by name.
#[test]
fn check_reads_a_held_schedule_and_names_what_is_wrong() {
    let held = scratch("check-ring.json");
    let h = held.to_str().unwrap();
    let (ok, _, err) = tacos(&["synth", "ring:4", "--out", h]);
    assert!(ok, "{err}");
    let (ok, out, err) = tacos(&["check", h]);
    assert!(ok, "{err}");
    assert!(
        out.contains("(schedule)") && out.contains("correct"),
        "{out}"
    );
    // Without its last transfer some NPU ends without a chunk.
    let mut schedule: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&held).unwrap()).unwrap();
    schedule["transfers"].as_array_mut().unwrap().pop();
    let short = scratch("check-short.json");
    std::fs::write(&short, schedule.to_string()).unwrap();
    let e = fails(&["check", short.to_str().unwrap()]);
    assert!(e.contains("check-short.json") && e.contains("chunk"), "{e}");
}

#[test]
fn topo_export_reads_back_the_same_topology() {
    let path = scratch("dragonfly.json");
    let p = path.to_str().unwrap();
    let (ok, _, err) = tacos(&["topo", "export", "dragonfly:4x5,bw=400:200", "-o", p]);
    assert!(ok, "{err}");
    let (ok, direct, _) = tacos(&["topo", "show", "dragonfly:4x5,bw=400:200", "--json"]);
    assert!(ok);
    let (ok, from_file, _) = tacos(&["topo", "show", p, "--json"]);
    assert!(ok);
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&direct).unwrap(),
        serde_json::from_str(&from_file).unwrap(),
    );
    assert_eq!(a["links"], 80);
    assert_eq!(a["link_classes"], b["link_classes"]);
    assert_eq!(a["diameter_hops"], b["diameter_hops"]);
    assert_eq!(a["name"], b["name"]);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let cases: &[(&[&str], &str)] = &[
        (&["synth", "blob:4"], "unknown builder 'blob'"),
        (&["synth", "ring:0"], "'0' must be a whole number >= 1"),
        (&["synth", "--size", "0"], "at least 1"),
        (&["synth", "--size", "-5MB"], "size '-5MB' must be a number"),
        (&["synth", "--bandwidth", "-1"], "must be a positive number"),
        (
            &["synth", "--latency", "-0.5"],
            "must be zero or a positive number",
        ),
        (
            &["synth", "--collective", "allshuffle"],
            "unknown collective 'allshuffle'",
        ),
        (
            &[
                "synth",
                "ring:4",
                "--collective",
                "broadcast",
                "--root",
                "9",
            ],
            "root 9 does not exist",
        ),
        (&["synth", "-k", "0"], "from 1 to 1048576"),
        (&["topo", "show", "no-such-file.json"], "no-such-file.json"),
    ];
    for (args, expected) in cases {
        let line = fails(args);
        assert!(line.starts_with("error"), "{args:?}: {line}");
        assert!(
            line.contains(expected),
            "{args:?}: '{line}' lacks '{expected}'"
        );
    }
}

#[test]
fn malformed_and_disconnected_files_are_named() {
    let bad = scratch("bad.json");
    std::fs::write(
        &bad,
        "{\n  \"npus\": 2,\n  \"links\": [\n    {\"src\": 0, \"dst\": \"one\"}\n  ]\n}\n",
    )
    .unwrap();
    let line = fails(&["synth", bad.to_str().unwrap()]);
    assert!(
        line.contains("bad.json") && line.contains("links[0].dst") && line.contains("one"),
        "{line}"
    );

    let split = scratch("split.json");
    std::fs::write(
        &split,
        r#"{"npus": 3, "links": [{"src": 0, "dst": 1, "bidirectional": true}]}"#,
    )
    .unwrap();
    let line = fails(&["synth", split.to_str().unwrap()]);
    assert!(line.contains("NPU 0 cannot reach NPUs 2"), "{line}");
}

#[test]
fn an_unwritable_output_leaves_nothing_behind() {
    let dir = scratch("no-such-dir");
    let target = dir.join("schedule.json");
    let line = fails(&["synth", "ring:4", "--out", target.to_str().unwrap()]);
    assert!(line.contains("cannot write the schedule"), "{line}");
    assert!(!dir.exists());
}

// `tacos synth --xml` and `tacos verify`.

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn synth_writes_xml_that_verifies_and_times_like_the_schedule() {
    let xml = scratch("torus.xml").display().to_string();
    let (ok, out, err) = tacos(&[
        "synth",
        "torus:4x4",
        "-c",
        "allgather",
        "-k",
        "2",
        "--size",
        "64MiB",
        "--xml",
        &xml,
        "--json",
    ]);
    assert!(ok, "{err}");
    let synth = json(&out);
    assert_eq!(synth["xml_file"], xml.as_str());
    // In the synthesizer's own model (the executor's adds launch, protocol and
    // threadblock costs).
    let (ok, out, err) = tacos(&[
        "verify",
        &xml,
        "torus:4x4",
        "--size",
        "64MiB",
        "--alpha-beta",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(v["correct"], true);
    assert_eq!(v["collective"]["kind"], "allgather");
    assert_eq!(v["gpus"], 16);
    assert_eq!(v["layouts_checked"], serde_json::json!(["out of place"]));
    let (synth_us, xml_us) = (
        synth["collective_time_us"].as_f64().unwrap(),
        v["time_us"].as_f64().unwrap(),
    );
    assert!(
        xml_us <= 1.05 * synth_us && xml_us > 0.0,
        "xml {xml_us} us, schedule {synth_us} us"
    );
    // Text output says the same.
    let (ok, out, _) = tacos(&["verify", &xml]);
    assert!(ok);
    assert!(out.contains("correct: no deadlock, no race"), "{out}");
}

#[test]
fn verify_fails_with_one_line_naming_the_file_and_the_problem() {
    let xml = scratch("ring.xml").display().to_string();
    // K = 1 on one instance: the step edited below is the one-chunk program's.
    let (ok, _, err) = tacos(&[
        "synth",
        "ring:4",
        "-c",
        "allgather",
        "-k",
        "1",
        "--instances",
        "1",
        "--xml",
        &xml,
    ]);
    assert!(ok, "{err}");
    // As another collective it is wrong.
    let (ok, out, err) = tacos(&["verify", &xml, "--collective", "broadcast", "--root", "0"]);
    assert!(!ok);
    assert!(out.contains("problem"), "{out}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("error: ")
            && first.contains("ring.xml")
            && first.contains("not a correct broadcast program"),
        "{err}"
    );
    // A step pointed at the wrong slot.
    let text = std::fs::read_to_string(&xml).unwrap();
    let broken = scratch("broken.xml").display().to_string();
    std::fs::write(
        &broken,
        text.replacen(
            "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"3\"",
            "type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"2\"",
            1,
        ),
    )
    .unwrap();
    let (ok, out, err) = tacos(&["verify", &broken, "--json"]);
    assert!(!ok && err.contains("broken.xml"), "{err}");
    assert_eq!(json(&out)["correct"], false);
    // Malformed XML: the file, line and column.
    let bad = scratch("bad.xml").display().to_string();
    std::fs::write(&bad, "<algo>\n  <gpu id=\"0\">\n</algo>\n").unwrap();
    let (ok, _, err) = tacos(&["verify", &bad]);
    assert!(!ok && err.contains("bad.xml:3:"), "{err}");
    assert!(!err.contains("panicked"));
    // Timing needs a size, and a topology with as many NPUs as the program has GPUs.
    let (ok, _, err) = tacos(&["verify", &xml, "ring:4"]);
    assert!(!ok && err.contains("--size"), "{err}");
    let (ok, _, err) = tacos(&["verify", &xml, "ring:8", "--size", "1MiB"]);
    assert!(
        !ok && err.contains("4 GPUs") && err.contains("8 NPUs"),
        "{err}"
    );
}

#[test]
fn third_party_files_verify_and_time_on_their_machine() {
    let Some(file) = common::corpus("msccl-xml/ndv4/r48ll.xml") else {
        return;
    };
    let (ok, out, err) = tacos(&[
        "verify",
        file.to_str().unwrap(),
        "preset:ndv4",
        "--size",
        "1MiB",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(v["collective"]["kind"], "allreduce");
    assert_eq!(v["layouts_checked"], serde_json::json!(["in place"]));
    assert!(v["time_us"].as_f64().unwrap() > 0.0);
}

#[test]
fn lowering_options_reach_the_file() {
    let xml = scratch("options.xml").display().to_string();
    let (ok, _, err) = tacos(&[
        "synth",
        "mesh:2x2",
        "-c",
        "broadcast",
        // The synthesized program (one channel an instance), not a baseline's.
        "--no-baselines",
        "--xml",
        &xml,
        "--proto",
        "LL128",
        "--instances",
        "2",
        "--placement",
        "out-of-place",
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "1MiB",
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&xml).unwrap();
    let head = text.lines().next().unwrap();
    for want in [
        "proto=\"LL128\"",
        "nchannels=\"2\"",
        "inplace=\"0\"",
        "outofplace=\"1\"",
        "minBytes=\"1024\"",
        "maxBytes=\"1048576\"",
    ] {
        assert!(head.contains(want), "{want} missing: {head}");
    }
    let (ok, _, err) = tacos(&["verify", &xml]);
    assert!(ok, "{err}");
    let (ok, _, err) = tacos(&["synth", "mesh:2x2", "--proto", "LL"]);
    assert!(!ok && err.contains("--xml"), "{err}");
}

#[test]
fn an_nccl_file_without_options_reads_as_one_node() {
    // Two sm80 GPUs joined by four NVLinks (25 GB/s each): 100 GB/s each way.
    let gpu = |bus: &str, peer: &str, dev: u32| {
        format!(
            "<pci busid=\"{bus}\" class=\"0x030200\"><gpu dev=\"{dev}\" sm=\"80\"><nvlink target=\"{peer}\" count=\"4\"/></gpu></pci>"
        )
    };
    let xml = format!(
        "<system version=\"1\"><cpu numaid=\"0\">{}{}</cpu></system>",
        gpu("0000:01:00.0", "0000:02:00.0", 0),
        gpu("0000:02:00.0", "0000:01:00.0", 1)
    );
    let file = scratch("pair.xml");
    std::fs::write(&file, xml).unwrap();
    let show = |spec: String| {
        let (ok, out, err) = tacos(&["topo", "show", &spec, "--json"]);
        assert!(ok, "{spec}: {err}");
        let mut v = json(&out);
        // The name is the spec itself; everything else must agree.
        v.as_object_mut().unwrap().remove("name");
        v
    };
    let bare = show(format!("nccl:{}", file.display()));
    assert_eq!(bare, show(format!("nccl:{},nodes=1", file.display())));
    assert_eq!(bare["npus"], 2, "{bare}");
}

#[test]
fn completions_cover_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (ok, out, err) = tacos(&["completions", shell]);
        assert!(ok, "{shell}: {err}");
        for sub in ["synth", "simulate", "compare", "verify", "compile", "topo"] {
            assert!(out.contains(sub), "{shell} completions lack {sub}");
        }
    }
    assert!(fails(&["completions", "tcsh"]).contains("tcsh"));
}

#[test]
fn topo_show_gives_the_diameter_where_it_can_search_and_says_when_it_cannot() {
    let show = |spec: &str| {
        let (ok, out, err) = tacos(&["topo", "show", spec, "--json"]);
        assert!(ok, "{spec}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    // Corner to corner of a 4x4 mesh: 3 + 3 hops.
    let small = show("mesh:4x4");
    assert_eq!(small["diameter_hops"], 6);
    assert_eq!(small["diameter_computed"], true);
    // 250,000 NPUs x 998,000 links is far past the search budget: answered at once,
    // without a diameter, rather than after hours of searching.
    let large = show("mesh:500x500");
    assert_eq!(large["diameter_computed"], false);
    assert!(large["diameter_hops"].is_null());
    assert_eq!(large["links"], 998_000);
    // 300,000 NPUs and no link: each search walks 300,000 vertices, so the searches are
    // past the budget too (they took quadratic time, counted as one step per NPU).
    let dir = scratch("no-links");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("no-links.json");
    std::fs::write(
        &file,
        r#"{"version": 1, "name": "no links", "npus": 300000, "links": []}"#,
    )
    .unwrap();
    let empty = show(file.to_str().unwrap());
    assert_eq!(empty["diameter_computed"], false);
    assert!(empty["diameter_hops"].is_null());
}

/// `--xml /dev/null` run as root once replaced the system's `/dev/null` with a regular
/// file (every writer renamed a temporary file onto its path). Outputs on a device are
/// written into it; one naming a directory is an error naming it, with nothing written.
#[test]
fn outputs_on_a_device_are_written_into_and_a_directory_is_refused() {
    use std::os::unix::fs::FileTypeExt;
    let (ok, out, err) = tacos(&[
        "synth",
        "ring:4",
        "--quiet",
        "--xml",
        "/dev/null",
        "-o",
        "/dev/null",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("msccl xml            /dev/null"), "{out}");
    let kind = std::fs::symlink_metadata("/dev/null").unwrap().file_type();
    assert!(kind.is_char_device(), "/dev/null is no longer a device");
    let dir = scratch("an-output-directory");
    std::fs::create_dir_all(&dir).unwrap();
    let e = fails(&["synth", "ring:4", "--quiet", "--xml", dir.to_str().unwrap()]);
    assert!(
        e.contains(dir.to_str().unwrap()) && e.contains("is a directory"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// `--seeds 4294967295` once built four billion seeds and aborted, `--jobs 4294967295`
/// asked for as many threads: every count a flag takes has a range, and the error names
/// the flag and the range.
#[test]
fn counts_past_their_range_are_refused_naming_the_flag_and_the_range() {
    for (args, flag, range) in [
        (
            vec!["synth", "ring:4", "--seeds", "4294967295"],
            "--seeds",
            "from 1 to 4096",
        ),
        (
            vec!["synth", "ring:4", "--seeds", "18446744073709551615"],
            "--seeds",
            "from 1 to 4096",
        ),
        (
            vec!["synth", "ring:4", "--jobs", "4294967295"],
            "--jobs",
            "from 0 to 256",
        ),
        (
            vec!["compile", "ring:4", "--seeds", "4294967295"],
            "--seeds",
            "from 1 to 4096",
        ),
        (
            vec!["compile", "ring:4", "--jobs", "4294967295"],
            "--jobs",
            "from 0 to 256",
        ),
        (
            vec!["simulate", "ring:4", "-k", "18446744073709551615"],
            "--chunks-per-npu",
            "from 1 to 1048576",
        ),
        (
            vec!["compile", "ring:4", "-k", "1,2,4294967296"],
            "--chunks",
            "from 1 to 1048576",
        ),
    ] {
        let e = fails(&args);
        assert!(e.contains(flag) && e.contains(range), "{args:?}: {e}");
    }
}

/// A collective left with one NPU (by `--npus` or `--fail-npus`) took no time, and
/// `synth` printed `algorithm bandwidth inf GB/s`, `compare` a busbw of NaN, each
/// exiting 0. It is refused, naming the flags.
#[test]
fn a_collective_of_one_npu_is_refused_rather_than_reported_at_infinite_bandwidth() {
    for args in [
        vec!["synth", "ring:4", "--npus", "0"],
        vec!["synth", "ring:2", "--fail-npus", "1"],
        vec![
            "simulate",
            "ring:2",
            "--fail-npus",
            "1",
            "--baseline",
            "ring",
        ],
        vec!["compare", "ring:2", "--fail-npus", "1"],
    ] {
        let e = fails(&args);
        assert!(
            e.contains("takes part on 1 NPU(s)") && e.contains("--fail-npus"),
            "{args:?}: {e}"
        );
    }
}

/// A directory compiled for one cluster is not replaced by a compilation for another by
/// mistake: refused naming both, nothing changed, unless `--force`.
#[test]
fn compile_out_keeps_a_set_compiled_for_another_topology_without_force() {
    let dir = scratch("compiled-for-ring4");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    let (ok, _, err) = tacos(&["compile", "ring:4", "--fast", "--out", out, "--quiet"]);
    assert!(ok, "{err}");
    let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
    let e = fails(&["compile", "ring:8", "--fast", "--out", out, "--quiet"]);
    assert!(
        e.contains(out) && e.contains("ring:4") && e.contains("ring:8") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), manifest);
    // The same cluster recompiles in place; --force replaces another's.
    let (ok, _, err) = tacos(&["compile", "ring:4", "--fast", "--out", out, "--quiet"]);
    assert!(ok, "{err}");
    let (ok, _, err) = tacos(&[
        "compile", "ring:8", "--fast", "--out", out, "--quiet", "--force",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        tacos::compile::compiled_for(&dir).map(|(name, _)| name),
        Some("ring:8".to_string())
    );
}

/// The older microsoft/msccl reads no directory and loads at most four files: a legacy set
/// is refused past four (nothing written) and otherwise told as the list it reads.
#[test]
fn a_legacy_set_is_at_most_four_files_named_in_msccl_xml_files() {
    let dir = scratch("legacy-set");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    let base = [
        "compile",
        "ring:4",
        "--fast",
        "--no-nccl",
        "--target",
        "msccl-legacy",
        "--out",
        out,
        "--quiet",
    ];
    let e = fails(&base);
    assert!(e.contains("at most 4") && e.contains("--sizes"), "{e}");
    assert!(!dir.exists(), "a refused set was written");
    let (ok, text, err) = tacos(
        &[
            &base[..],
            &["--collectives", "allreduce", "--sizes", "1MiB..4MiB"],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    let line = text
        .lines()
        .find_map(|l| l.split("MSCCL_XML_FILES=").nth(1))
        .unwrap_or_else(|| panic!("{text}"));
    let files: Vec<&str> = line.split(':').collect();
    assert!((1..=4).contains(&files.len()), "{line}");
    for f in files {
        let program = tacos::msccl::read_program(std::path::Path::new(f)).unwrap();
        assert_eq!(program.collective, "allreduce");
    }
    assert!(!text.contains("MSCCL_ALGO_DIR"), "{text}");
}

/// `measure-plan` prints, for every collective the set serves some band of, the nccl-tests
/// run with the set and the same run without it, on every rank of the cluster it was
/// compiled for; nothing for a collective left wholly to NCCL.
#[test]
fn measure_plan_runs_each_served_collective_with_and_without_the_set() {
    let dir = scratch("measure-plan-set");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    let (ok, _, err) = tacos(&[
        "compile",
        "preset:dgx-a100,nodes=2",
        "--fast",
        "--no-nccl",
        "--out",
        out,
        "--quiet",
        "--collectives",
        "allreduce,allgather",
        "--sizes",
        "1MiB..16MiB",
    ]);
    assert!(ok, "{err}");
    let (ok, plan, err) = tacos(&["measure-plan", "--compiled", out, "--hosts", "a:8,b:8"]);
    assert!(ok, "{err}");
    for (binary, kind) in [
        ("all_reduce_perf", "allreduce"),
        ("all_gather_perf", "allgather"),
    ] {
        let runs: Vec<&str> = plan.lines().filter(|l| l.contains(binary)).collect();
        assert_eq!(runs.len(), 2, "{plan}");
        for (run, enabled, label) in [(runs[0], 1, "tacos"), (runs[1], 0, "nccl")] {
            assert!(run.starts_with("mpirun -np 16 -H a:8,b:8 "), "{run}");
            assert!(
                run.contains(&format!("NCCL_MSCCL_ENABLE={enabled}")),
                "{run}"
            );
            assert!(
                run.contains(&format!("MSCCL_ALGO_DIR={out}/msccl")),
                "{run}"
            );
            assert!(run.contains("-b 1M -e 16M -f 2 -g 1"), "{run}");
            assert!(run.ends_with(&format!("> {label}-{kind}.txt")), "{run}");
        }
    }
    let e = fails(&["measure-plan", "--compiled", "/no/such/set"]);
    assert!(e.contains("/no/such/set"), "{e}");
}

/// With `--json`, a failed command prints its error as JSON on stdout too: the library's
/// kind of error, the message, and what went wrong under it; the exit status stays a failure.
#[test]
fn json_errors_name_their_kind_and_causes() {
    let error = |args: &[&str]| {
        let (ok, out, err) = tacos(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.starts_with("error: "), "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["command"], args[0]);
        v["error"].clone()
    };
    let bad_spec = error(&["synth", "ring:1x", "--json"]);
    assert_eq!(bad_spec["kind"], "invalid");
    assert!(bad_spec["message"].as_str().unwrap().contains("ring:1x"));
    assert_eq!(bad_spec["causes"].as_array().unwrap().len(), 0);
    let path = "/nonexistent-tacos-dir/schedule.json";
    let unwritable = error(&[
        "synth",
        "ring:4",
        "-c",
        "allgather",
        "-s",
        "1MiB",
        "--out",
        path,
        "--json",
    ]);
    assert_eq!(unwritable["kind"], "io");
    assert_eq!(unwritable["message"], "cannot write the schedule");
    let causes = unwritable["causes"].as_array().unwrap();
    assert!(causes[0].as_str().unwrap().starts_with(path), "{causes:?}");
    // Without --json, nothing on stdout.
    let (ok, out, _) = tacos(&["synth", "ring:1x"]);
    assert!(!ok && out.is_empty(), "{out}");
}

/// A baseline may split the buffer finer than the K searched (packed trees: 2 x NPUs
/// pieces a Broadcast chunk), and the chunked bound holds for one K only: the bounds
/// printed are those of the schedule kept, never above its checked time. 512 NPUs: the
/// default search is one K, whose bounds are computed beside it.
#[test]
fn synth_bounds_are_the_kept_schedules() {
    let (ok, out, err) = tacos(&[
        "synth",
        "torus:8x8x8",
        "-c",
        "broadcast",
        "-s",
        "1GiB",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v = json(&out);
    assert_eq!(v["collective"]["chunks_per_npu"], 1024, "{v}");
    let time = v["collective_time_us"].as_f64().unwrap();
    let bound = v["bounds"]["best_us"].as_f64().unwrap();
    assert!(
        bound <= time,
        "bound {bound} us above the schedule's {time} us"
    );
}
