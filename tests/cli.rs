//! The command line as a user meets it: outputs that agree with themselves, and one-line
//! errors with a non-zero exit for bad input.

use std::path::PathBuf;
use std::process::Command;

fn tacos(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .output()
        .expect("the tacos binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["npus"], 16);
    assert_eq!(v["collective"], "allgather");
    assert_eq!(v["size_bytes"], 1u64 << 30);
    assert_eq!(v["chunk_bytes"], (1u64 << 26) as f64);
    let time_us = v["collective_time_us"].as_f64().unwrap();
    let algbw = v["algbw_gbps"].as_f64().unwrap();
    // algbw = size / time.
    assert!((algbw - (1u64 << 30) as f64 / (time_us * 1e-6) / 1e9).abs() < 1e-6);
    assert!(v["synth_time_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["transfers"], 16 * 15);
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
        (
            &["synth", "blob:4"],
            "'blob:4' is neither a topology file nor a known builder",
        ),
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
        (&["synth", "-k", "0"], "at least 1"),
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
        line.contains("bad.json:4:") && line.contains("links[0].dst"),
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
