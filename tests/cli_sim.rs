//! `tacos simulate` and `tacos compare` as a user runs them: figures worked out by hand,
//! and clear errors that leave nothing half written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tacos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .output()
        .expect("the tacos binary runs")
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    let out = tacos(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn error_of(args: &[&str]) -> String {
    let out = tacos(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.starts_with("error: ") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    err
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-cli-sim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect()
}

#[test]
fn compare_on_a_ring_reports_hand_worked_times() {
    // ring:8, 8 MB: 1 MB chunks take 0.5 + 20 us on a 50 GB/s link.
    let v = ok_json(&["compare", "ring:8", "-s", "8MB", "--json"]);
    let time = |name: &str| {
        v["algorithms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("no {name} row"))["time_us"]
            .as_f64()
            .unwrap()
    };
    assert!((time("ring-uni") - 7.0 * 20.5).abs() < 1e-9);
    assert!((time("ring") - 7.0 * 10.5).abs() < 1e-9);
    // Hierarchical on a one-dimensional ring is the unidirectional ring.
    assert!((time("hierarchical") - 7.0 * 20.5).abs() < 1e-9);
    // TACOS on a ring is contention-free and its clocks agree.
    let tacos = &v["algorithms"][0];
    assert_eq!(tacos["name"], "tacos");
    assert_eq!(tacos["time_us"], tacos["synthesized_time_us"]);
    // The ingress bound: 7 MB over 100 GB/s.
    assert!((v["bounds"]["ingress_us"].as_f64().unwrap() - 70.0).abs() < 1e-6);
}

#[test]
fn a_baseline_that_does_not_apply_is_skipped_or_refused() {
    let v = ok_json(&["compare", "ring:6", "-s", "6MB", "--json"]);
    let rhd = v["algorithms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "rhd")
        .unwrap();
    let why = rhd["skipped"].as_str().unwrap();
    assert!(
        why.contains("power-of-two") && why.contains("has 6"),
        "{why}"
    );
    let err = error_of(&["simulate", "ring:6", "--baseline", "rhd"]);
    assert!(
        err.contains("rhd needs a power-of-two number of NPUs; this collective has 6"),
        "{err}"
    );
    let err = error_of(&["simulate", "preset:dgx1", "--baseline", "hierarchical"]);
    assert!(
        err.contains("needs a topology composed of dimensions"),
        "{err}"
    );
    let err = error_of(&["simulate", "ring:4", "--baseline", "dbt", "-c", "allgather"]);
    assert!(err.contains("dbt does not define allgather"), "{err}");
}

#[test]
fn a_schedule_file_is_simulated_on_its_topology_and_refused_elsewhere() {
    let dir = scratch("schedule");
    let file = dir.join("mesh.json");
    let f = file.to_str().unwrap();
    let out = tacos(&["synth", "mesh:3x3", "-s", "9MB", "--out", f]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = ok_json(&["simulate", "mesh:3x3", "--schedule", f, "--json"]);
    assert_eq!(v["time_us"], v["schedule_time_us"]);
    assert_eq!(v["links"].as_array().unwrap().len(), 24);
    // ring:9 has the NPUs but not the links 0 -> 3 and so on.
    let err = error_of(&["simulate", "ring:9", "--schedule", f]);
    assert!(
        err.contains("does not fit ring:9") && err.contains("which no link joins"),
        "{err}"
    );
    // ring:4 lacks NPUs 4..8.
    let err = error_of(&["simulate", "ring:4", "--schedule", f]);
    assert!(err.contains("NPU 4 does not exist"), "{err}");
    let err = error_of(&["simulate", "mesh:3x3", "--schedule", f, "-c", "broadcast"]);
    assert!(err.contains("schedule for collective allgather"), "{err}");
}

#[test]
fn heat_map_is_a_readable_svg() {
    let dir = scratch("heatmap");
    let svg = dir.join("load.svg");
    let out = tacos(&[
        "compare",
        "mesh:3x3",
        "-s",
        "9MB",
        "--heatmap",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains("Link utilization, allgather of"));
    assert!(
        text.contains("source NPU") && text.contains("destination NPU") && text.contains("100%")
    );
    // tacos, ring, ring-uni, direct, hierarchical (rhd does not apply to 9 NPUs): one
    // cell with a tooltip per link in each panel.
    assert_eq!(text.matches("<title>").count(), 5 * 24);
    assert_eq!(leftovers(&dir), vec!["load.svg".to_string()]);
}

#[test]
fn an_unwritable_heat_map_path_fails_cleanly() {
    let err = error_of(&[
        "compare",
        "ring:4",
        "--heatmap",
        "/nonexistent-tacos-dir/x.svg",
    ]);
    assert!(
        err.contains("/nonexistent-tacos-dir") && err.contains("does not exist"),
        "{err}"
    );
    // A path that is a folder: the atomic write fails at the rename and cleans up.
    let dir = scratch("unwritable");
    std::fs::create_dir(dir.join("taken.svg")).unwrap();
    let err = error_of(&[
        "compare",
        "ring:4",
        "--heatmap",
        dir.join("taken.svg").to_str().unwrap(),
    ]);
    assert!(
        err.contains("cannot write the heat map") && err.contains("taken.svg"),
        "{err}"
    );
    assert_eq!(leftovers(&dir), vec!["taken.svg".to_string()]);
}

#[test]
fn simulate_times_msccl_xml_like_the_schedule_it_was_lowered_from() {
    let dir = scratch("xml");
    let xml = dir.join("ar.xml");
    let synth = ok_json(&[
        "synth",
        "torus:2x4",
        "-c",
        "allreduce",
        "-s",
        "8MiB",
        "-k",
        "2",
        "--json",
        "--xml",
        xml.to_str().unwrap(),
    ]);
    let sim = ok_json(&[
        "simulate",
        "torus:2x4",
        "--xml",
        xml.to_str().unwrap(),
        "-s",
        "8MiB",
        "--json",
    ]);
    assert_eq!(sim["collective"]["kind"], "allreduce");
    let (synth_us, xml_us) = (
        synth["collective_time_us"].as_f64().unwrap(),
        sim["time_us"].as_f64().unwrap(),
    );
    // The lowering keeps the synthesized order on every link: the program can be no
    // faster than the contention-free schedule and should lose at most 5% to it.
    assert!(
        xml_us >= synth_us * 0.999 && xml_us <= synth_us * 1.05,
        "{xml_us} vs {synth_us}"
    );

    let broken = dir.join("broken.xml");
    let text = std::fs::read_to_string(&xml).unwrap();
    std::fs::write(&broken, text.replacen("type=\"rrcs\"", "type=\"rcs\"", 1)).unwrap();
    let err = error_of(&["simulate", "torus:2x4", "--xml", broken.to_str().unwrap()]);
    assert!(err.contains("is not a correct program"), "{err}");
}
