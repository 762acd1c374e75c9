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

/// Runs the command, which must succeed.
fn succeeds(args: &[&str]) -> Output {
    let out = tacos(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&succeeds(args).stdout).expect("JSON output")
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
    // ring:8, 8 MB: the search keeps K = 2, each NPU's 0.5 MB halves going opposite ways
    // round (one-way trees), and the baselines run at that K. A 0.5 MB chunk takes
    // 0.5 + 10 us on a 50 GB/s link, Ring's 0.25 MB quarters 0.5 + 5 us.
    let v = ok_json(&["compare", "ring:8", "-s", "8MB", "--json"]);
    assert_eq!(v["collective"]["chunks_per_npu"], 2);
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
    // Ring-uni: two chunks each 7 hops one way, 14 steps; Ring: its quarters, 14 steps.
    assert!((time("ring-uni") - 14.0 * 10.5).abs() < 1e-9);
    assert!((time("ring") - 14.0 * 5.5).abs() < 1e-9);
    // Hierarchical on a one-dimensional ring is the unidirectional ring.
    assert!((time("hierarchical") - 14.0 * 10.5).abs() < 1e-9);
    // TACOS: every directed link busy in each of 7 steps, the fewest there are; on a ring
    // it is contention-free and its clocks agree.
    let tacos = &v["algorithms"][0];
    assert_eq!(tacos["name"], "tacos");
    assert!((time("tacos") - 7.0 * 10.5).abs() < 1e-9);
    assert_eq!(tacos["time_us"], tacos["schedule_time_us"]);
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
    succeeds(&["synth", "mesh:3x3", "-s", "9MB", "--out", f]);
    let v = ok_json(&["simulate", "mesh:3x3", "--schedule", f, "--json"]);
    assert_eq!(v["time_us"], v["schedule_time_us"]);
    assert_eq!(v["links"].as_array().unwrap().len(), 24);
    // ring:9 has the NPUs but not the links 0 -> 3 and so on.
    let err = error_of(&["simulate", "ring:9", "--schedule", f]);
    assert!(
        err.contains("does not fit ring:9") && err.contains("which no link joins"),
        "{err}"
    );
    // ring:4 lacks NPUs 4..8: the error names both topologies.
    let err = error_of(&["simulate", "ring:4", "--schedule", f]);
    assert!(
        err.contains("made for mesh:3x3 (9 NPUs), but ring:4 has 4 NPUs"),
        "{err}"
    );
    let err = error_of(&["simulate", "mesh:3x3", "--schedule", f, "-c", "broadcast"]);
    assert!(err.contains("schedule for collective allgather"), "{err}");
}

#[test]
fn heat_map_is_a_readable_svg() {
    let dir = scratch("heatmap");
    let svg = dir.join("load.svg");
    succeeds(&[
        "compare",
        "mesh:3x3",
        "-s",
        "9MB",
        "--heatmap",
        svg.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains("Link utilization, allgather of"));
    assert!(text.contains("link busy time, us (one scale for every panel)"));
    // tacos, ring, ring-uni, direct, hierarchical (rhd does not apply to 9 NPUs): the
    // mesh drawn in each panel, its 24 links and 9 NPUs each with a tooltip, and the
    // legend's idle colour.
    assert_eq!(text.matches(r#"<path class="link""#).count(), 5 * 24);
    assert_eq!(text.matches(r#"<circle class="npu""#).count(), 5 * 9);
    assert_eq!(text.matches("<title>").count(), 5 * (24 + 9) + 1);
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
        "--alpha-beta",
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
        // The synthesizer's own model: the executor's adds launch and protocol costs.
        "--alpha-beta",
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

#[test]
fn a_schedule_file_without_a_spec_runs_on_the_network_it_records() {
    let dir = scratch("recorded");
    let file = dir.join("uniring.json");
    let f = file.to_str().unwrap();
    // uniring:4 at 10 GB/s, All-Gather of 4 MB: 1 MB chunks take 0.5 + 100 us, and the
    // last chunk needs three hops.
    succeeds(&[
        "synth",
        "uniring:4",
        "--bandwidth",
        "10",
        "-s",
        "4MB",
        "--out",
        f,
    ]);
    let v = ok_json(&["simulate", "--schedule", f, "--json"]);
    assert!(
        (v["time_us"].as_f64().unwrap() - 3.0 * 100.5).abs() < 1e-6,
        "{v}"
    );
    assert_eq!(v["topology"]["name"], "uniring:4");
    assert_eq!(v["links"].as_array().unwrap().len(), 4);
    // A SPEC given explicitly replaces the network: at 50 GB/s a hop is 20.5 us.
    let v = ok_json(&["simulate", "uniring:4", "--schedule", f, "--json"]);
    assert!(
        (v["time_us"].as_f64().unwrap() - 3.0 * 20.5).abs() < 1e-6,
        "{v}"
    );
    // One that does not fit is named next to the one the file was made for.
    let err = error_of(&["simulate", "ring:8", "--schedule", f]);
    assert!(
        err.contains("made for uniring:4 (4 NPUs), but ring:8 has 8 NPUs"),
        "{err}"
    );
    // mesh:2x2 has four NPUs but no link 1 -> 2.
    let err = error_of(&["simulate", "mesh:2x2", "--schedule", f]);
    assert!(
        err.contains("(made for uniring:4) does not fit mesh:2x2")
            && err.contains("from NPU 1 to NPU 2, which no link joins"),
        "{err}"
    );
    // Failures given apply to the recorded network.
    let err = error_of(&["simulate", "--schedule", f, "--fail-links", "2-3"]);
    assert!(
        err.contains("does not fit the network it records with the failures given"),
        "{err}"
    );
}

#[test]
fn a_recorded_network_keeps_its_failures() {
    let dir = scratch("failed");
    let file = dir.join("ring.json");
    let f = file.to_str().unwrap();
    succeeds(&[
        "synth",
        "ring:5",
        "--fail-npus",
        "4",
        "-s",
        "4MB",
        "--out",
        f,
    ]);
    let v = ok_json(&["simulate", "--schedule", f, "--json"]);
    // ring:5 without NPU 4 is the line 0-1-2-3: six directed links, four NPUs taking part.
    assert_eq!(v["links"].as_array().unwrap().len(), 6, "{v}");
    assert_eq!(v["collective"]["npus"], 4);
    assert_eq!(v["time_us"], v["schedule_time_us"]);

    // A file from before networks were recorded still reads: its topology name is read
    // as a spec (ring:5 with every NPU), with a warning.
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("network").unwrap();
    let old_file = dir.join("old.json");
    std::fs::write(&old_file, old.to_string()).unwrap();
    let out = succeeds(&[
        "simulate",
        "--schedule",
        old_file.to_str().unwrap(),
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("records no network") && err.contains("'ring:5'"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["links"].as_array().unwrap().len(), 10, "{v}");
}

#[test]
fn xml_without_a_size_is_timed_at_its_min_bytes() {
    let dir = scratch("minbytes");
    // Gather: the executor measures one rank's share, so minBytes is a quarter of the
    // nccl-tests size on 4 GPUs, and the simulator takes the size back.
    let gather = dir.join("gather.xml");
    let g = gather.to_str().unwrap();
    succeeds(&[
        "synth", "mesh:2x2", "-c", "gather", "-s", "1MiB", "--xml", g,
    ]);
    assert!(std::fs::read_to_string(&gather)
        .unwrap()
        .contains("minBytes=\"262144\""));
    let v = ok_json(&["simulate", "mesh:2x2", "--xml", g, "--json"]);
    assert_eq!(v["collective"]["size_bytes"], 1 << 20, "{v}");
    assert_eq!(v["size_from"], "minBytes");
    let out = tacos(&["simulate", "mesh:2x2", "--xml", g]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gather of 1 MiB (the file's minBytes"),
        "{text}"
    );
    // All-Gather measures the whole buffer: minBytes is the size.
    let ag = dir.join("ag.xml");
    let a = ag.to_str().unwrap();
    succeeds(&[
        "synth",
        "mesh:2x2",
        "-s",
        "1MiB",
        "--min-bytes",
        "65536",
        "--xml",
        a,
    ]);
    let v = ok_json(&["simulate", "mesh:2x2", "--xml", a, "--json"]);
    assert_eq!(v["collective"]["size_bytes"], 65536, "{v}");
    // -s still wins.
    let v = ok_json(&["simulate", "mesh:2x2", "--xml", a, "-s", "4MiB", "--json"]);
    assert_eq!(v["collective"]["size_bytes"], 4 << 20);
    assert_eq!(v["size_from"], "command line");
}

#[test]
fn long_commands_draw_no_progress_off_a_terminal() {
    // The tests' stderr is a pipe: no bar, no spinner, so stderr stays empty.
    for args in [
        &["compare", "ring:8", "-s", "8MB"][..],
        &["simulate", "ring:8", "--baseline", "ring", "-s", "8MB"],
        &["simulate", "ring:8", "--baseline", "ring", "--quiet"],
        &["compare", "ring:8", "--quiet", "--json"],
    ] {
        let out = tacos(args);
        assert!(out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

/// A transfer stream (`synth --stream`) is simulated in one pass, nothing held per
/// transfer, with every figure the same as the same transfers held; one the pass cannot
/// answer for exactly (a baseline's unit steps) is simulated held, saying so; a damaged
/// one is refused naming the file.
#[test]
fn a_stream_is_simulated_in_one_pass_as_it_would_be_held() {
    let dir = scratch("stream");
    let (stream, held) = (dir.join("mesh.tts"), dir.join("mesh.json"));
    let (s, h) = (stream.to_str().unwrap(), held.to_str().unwrap());
    succeeds(&[
        "synth",
        "mesh:4x4",
        "-c",
        "allreduce",
        "-k",
        "1",
        "--stream",
        s,
    ]);
    let schedule = tacos::schedule::Schedule::read(&stream).unwrap();
    std::fs::write(&held, schedule.to_json()).unwrap();
    let one_pass = ok_json(&["simulate", "--schedule", s, "--json"]);
    let whole = ok_json(&["simulate", "--schedule", h, "--json"]);
    for field in [
        "time_us",
        "schedule_time_us",
        "transfers",
        "links",
        "bounds",
    ] {
        assert_eq!(one_pass[field], whole[field], "{field}");
    }
    assert_eq!(one_pass["transfers"], 2 * 16 * 15);
    // A Ring baseline's times are steps, not the links' times.
    let topo = tacos::topology::parse_spec("ring:5", &Default::default()).unwrap();
    let c = tacos::collective::Collective::over_all(
        &topo,
        tacos::collective::CollectiveKind::AllGather,
        None,
        1,
        5 << 20,
    )
    .unwrap();
    let ring = tacos::baselines::Baseline::Ring
        .schedule(&topo, c.spec())
        .unwrap();
    let steps = dir.join("ring.tts");
    let header = tacos::schedule::stream::StreamHeader::new(
        "ring:5",
        ring.collective.clone(),
        ring.chunk_bytes,
        None,
    );
    let mut writer = tacos::schedule::stream::StreamWriter::new(Vec::new(), &header).unwrap();
    for t in &ring.transfers {
        writer.push(t).unwrap();
    }
    std::fs::write(&steps, writer.finish().unwrap().0).unwrap();
    let out = succeeds(&["simulate", "--schedule", steps.to_str().unwrap(), "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be replayed in one pass"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let baseline = ok_json(&[
        "simulate",
        "ring:5",
        "--baseline",
        "ring",
        "-s",
        "5MiB",
        "--json",
    ]);
    assert_eq!(v["time_us"], baseline["time_us"]);
    // Cut short in its records.
    let bytes = std::fs::read(&stream).unwrap();
    let cut = dir.join("cut.tts");
    std::fs::write(&cut, &bytes[..bytes.len() - 40]).unwrap();
    let err = error_of(&["simulate", "--schedule", cut.to_str().unwrap()]);
    assert!(
        err.contains("cut.tts") && err.contains("truncated"),
        "{err}"
    );
}
