//! The `--json` schema (docs/json.md): every command's report has the common fields with
//! their types, and one algorithm gets the same figures whichever command reports it.

mod common;

use common::tacos;
use serde_json::Value;
use std::path::PathBuf;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::schedule::check;
use tacos::synth::{synthesize_concurrent, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos_cli::report::{SynthReport, SynthRun, SCHEMA_VERSION};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("json_schema");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn run_json(args: &[&str]) -> Value {
    let (ok, out, err) = tacos(args);
    assert!(ok, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

fn f64_at(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

fn u64_or_null(v: &Value, field: &str) {
    assert!(
        v[field].is_u64() || v[field].is_null(),
        "{field} is neither an integer nor null in {v}"
    );
}

fn header(v: &Value, command: &str) {
    assert_eq!(v["schema_version"], SCHEMA_VERSION, "{v}");
    assert_eq!(v["command"], command, "{v}");
}

fn topology_fields(t: &Value) {
    assert!(t["name"].is_string(), "{t}");
    assert!(t["npus"].is_u64() && t["links"].is_u64(), "{t}");
    assert!(t["failed_npus"].is_array(), "{t}");
}

fn collective_fields(c: &Value) {
    assert!(c["kind"].is_string(), "{c}");
    for field in ["size_bytes", "chunks_per_npu", "root"] {
        u64_or_null(c, field);
    }
    assert!(c["npus"].is_u64() && c["participants"].is_string(), "{c}");
}

/// The bounds' types, and that `best_us` is the largest of them.
fn bounds_fields(b: &Value) {
    let names = ["ingress", "egress", "traffic", "latency", "cut", "chunked"];
    let best = b["best"].as_str().expect("best is a name");
    assert!(names.contains(&best), "{b}");
    let largest = names
        .iter()
        .filter_map(|n| b[format!("{n}_us")].as_f64())
        .fold(0.0, f64::max);
    assert_eq!(f64_at(b, "best_us"), largest, "{b}");
    assert_eq!(f64_at(b, &format!("{best}_us")), largest, "{b}");
    assert!(b["cut_us"].is_f64() || b["cut_us"].is_null(), "{b}");
    assert!(b["chunked_us"].is_f64() || b["chunked_us"].is_null(), "{b}");
    f64_at(b, "ideal_us");
    assert!(b["ideal_note"]
        .as_str()
        .unwrap()
        .contains("not a lower bound"));
}

/// nccl-tests' figures from the time, the size and the bus factor `bus`, and the
/// efficiency as the best bound over the time, at most 1.
fn timing(v: &Value, size_bytes: u64, bus: f64, best_us: f64) {
    let time_us = f64_at(v, "time_us");
    let algbw = f64_at(v, "algbw_gbps");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(algbw, size_bytes as f64 / (time_us * 1e3)), "{v}");
    assert!(close(f64_at(v, "busbw_gbps"), algbw * bus), "{v}");
    let efficiency = f64_at(v, "efficiency");
    assert!(close(efficiency, best_us / time_us), "{v}");
    assert!(efficiency <= 1.0 + 1e-12, "{v}");
    f64_at(v, "of_ideal");
}

/// A ring:4 All-Gather of 1 MiB synthesized with seed 0 alone (as the library below and
/// docs/json.md) to files: (synth's report, schedule, XML).
fn synthesized(tag: &str) -> (Value, String, String) {
    let schedule = scratch(&format!("{tag}.json"));
    let xml = scratch(&format!("{tag}.xml"));
    let (s, x) = (schedule.to_str().unwrap(), xml.to_str().unwrap());
    // One chunk per NPU and one seed, as `compare -k 1 --seeds 1` below synthesizes it.
    let v = run_json(&[
        "synth", "ring:4", "-s", "1MiB", "-k", "1", "--seeds", "1", "--out", s, "--xml", x,
        "--json",
    ]);
    (v, s.to_string(), x.to_string())
}

#[test]
fn every_command_reports_the_common_fields_with_their_types() {
    let (_, _, xml) = synthesized("types");
    // All-Gather on 4 NPUs: nccl-tests' bus factor (n-1)/n.
    let bus = 0.75;
    let sim = run_json(&[
        "simulate",
        "ring:4",
        "--baseline",
        "ring",
        "-s",
        "1MiB",
        "--json",
    ]);
    header(&sim, "simulate");
    topology_fields(&sim["topology"]);
    collective_fields(&sim["collective"]);
    bounds_fields(&sim["bounds"]);
    timing(&sim, 1 << 20, bus, f64_at(&sim["bounds"], "best_us"));
    assert!(sim["schedule_time_us"].is_null(), "a baseline has no clock");

    let cmp = run_json(&[
        "compare", "ring:4", "-s", "1MiB", "-k", "1", "--seeds", "1", "--json", "--quiet",
    ]);
    header(&cmp, "compare");
    topology_fields(&cmp["topology"]);
    collective_fields(&cmp["collective"]);
    bounds_fields(&cmp["bounds"]);
    for row in cmp["algorithms"].as_array().unwrap() {
        if row["skipped"].is_null() {
            timing(row, 1 << 20, bus, f64_at(&cmp["bounds"], "best_us"));
        } else {
            assert!(row["time_us"].is_null(), "{row}");
        }
    }

    let ver = run_json(&["verify", &xml, "ring:4", "-s", "1MiB", "--json"]);
    header(&ver, "verify");
    topology_fields(&ver["topology"]);
    collective_fields(&ver["collective"]);
    assert!(ver["collective"]["chunks_per_npu"].is_null(), "{ver}");
    bounds_fields(&ver["bounds"]);
    timing(&ver, 1 << 20, bus, f64_at(&ver["bounds"], "best_us"));
    // Untimed: the collective has no size and no timing field is there.
    let untimed = run_json(&["verify", &xml, "--json"]);
    assert!(untimed["collective"]["size_bytes"].is_null(), "{untimed}");
    assert!(untimed.get("time_us").is_none() && untimed["bounds"].is_null());

    let dir = scratch("compiled");
    let dir = dir.to_str().unwrap();
    let compiled = run_json(&[
        "compile",
        "ring:4",
        "--out",
        dir,
        "--collectives",
        "allgather",
        "--sizes",
        "1MiB..2MiB",
        "--fast",
        "--force",
        "--quiet",
        "--json",
    ]);
    header(&compiled, "compile");
    f64_at(&compiled, "elapsed_ms");
    for entry in compiled["manifest"]["entries"].as_array().unwrap() {
        for band in entry["bands"].as_array().unwrap() {
            let efficiency = f64_at(band, "efficiency");
            assert!(f64_at(band, "time_us") > 0.0 && f64_at(band, "algbw_gbps") > 0.0);
            assert!(efficiency > 0.0 && efficiency <= 1.0 + 1e-12, "{band}");
        }
    }
    let checked = run_json(&["compile", "--check", dir, "--json"]);
    header(&checked, "compile-check");
    assert_eq!(checked["ok"], true, "{checked}");

    let topo = run_json(&["topo", "show", "ring:4", "--json"]);
    header(&topo, "topo-show");
    topology_fields(&topo);
}

#[test]
fn one_algorithm_gets_the_same_figures_from_every_command() {
    let (synth, schedule, xml) = synthesized("agree");
    let time_us = f64_at(&synth, "collective_time_us");
    let sim = run_json(&["simulate", "--schedule", &schedule, "--json"]);
    // Synthesized schedules are contention-free: the simulator meets their clock.
    assert_eq!(f64_at(&sim, "time_us"), time_us, "{sim}");
    assert_eq!(f64_at(&sim, "schedule_time_us"), time_us);
    assert_eq!(sim["bounds"], synth["bounds"]);
    assert_eq!(f64_at(&sim, "efficiency"), f64_at(&synth, "efficiency"));
    // Worked by hand: each NPU takes in 3/4 MiB over two links of 50 GB/s.
    let ingress = 786_432.0 / 100.0 / 1e3;
    assert!((f64_at(&sim["bounds"], "ingress_us") - ingress).abs() < 1e-9);
    // And each lacks 3 chunks of 1/4 MiB over two links, 0.5 + 5.24288 us each: one link
    // carries two of them, 11.48576 us, which the synthesized schedule meets.
    assert!((f64_at(&sim["bounds"], "chunked_us") - 11.48576).abs() < 1e-9);
    assert_eq!(sim["bounds"]["best"], "chunked");

    let cmp = run_json(&[
        "compare", "ring:4", "-s", "1MiB", "-k", "1", "--seeds", "1", "--json", "--quiet",
    ]);
    let tacos = &cmp["algorithms"][0];
    assert_eq!(tacos["name"], "tacos");
    assert_eq!(f64_at(tacos, "time_us"), time_us, "{tacos}");
    // `compare` and `verify` time algorithms that may send several chunks for one alpha
    // (baselines, programs): the same bounds but the chunked one.
    assert!(cmp["bounds"]["chunked_us"].is_null(), "{cmp}");
    assert_eq!(general(&cmp["bounds"]), general(&sim["bounds"]));
    assert_eq!(cmp["collective"], sim["collective"]);

    // The program times differently (its own alpha-beta rules), but on the same bounds.
    let ver = run_json(&["verify", &xml, "ring:4", "-s", "1MiB", "--json"]);
    assert_eq!(ver["bounds"], cmp["bounds"]);
    assert_eq!(ver["collective"]["size_bytes"], 1 << 20);
    assert_eq!(ver["topology"], sim["topology"]);
}

/// The bounds that hold for any algorithm: all but the chunked one, and the best of them.
fn general(bounds: &Value) -> Value {
    let mut b = bounds.clone();
    let names = ["ingress", "egress", "traffic", "latency", "cut"];
    let largest = names
        .iter()
        .filter_map(|n| b[format!("{n}_us")].as_f64())
        .fold(0.0, f64::max);
    let fields = b.as_object_mut().unwrap();
    fields.remove("chunked_us");
    fields.remove("best");
    fields.insert("best_us".into(), largest.into());
    b
}

/// `SynthReport`, which `synth --json` prints, built from a synthesis the library runs
/// here, reports what the command reports, and its aliases repeat the common fields.
#[test]
fn synth_report_matches_the_command_and_keeps_the_old_names() {
    let topo = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let spec = CollectiveSpec {
        kind: CollectiveKind::AllGather,
        root: None,
        npus: topo.alive_npus(),
        chunks_per_npu: 1,
        size_bytes: 1 << 20,
    };
    let collective = Collective::new(&topo, spec).unwrap();
    let synthesis = synthesize_concurrent(
        &topo,
        std::slice::from_ref(&collective),
        &SynthOptions::seeded(0),
    )
    .unwrap();
    let checked = check(&synthesis.schedules[0], &topo).unwrap();
    let bounds = Bounds::chunked(&topo, &collective);
    let report = SynthReport::new(
        &topo,
        &collective,
        &bounds,
        SynthRun {
            time_ps: checked.collective_time_ps,
            elapsed_ms: 1.5,
            check_ms: None,
            transfers: checked.transfers,
            seed: 0,
            baseline: None,
            schedule_file: None,
            xml_file: None,
            plan_file: None,
            program_time_ps: None,
            cost_model: None,
            nccl: None,
            allreduce: None,
            replicated: None,
            chunk_trials: None,
        },
    );
    let v = serde_json::to_value(&report).unwrap();
    header(&v, "synth");
    topology_fields(&v["topology"]);
    collective_fields(&v["collective"]);
    bounds_and_aliases(&v);
    let (cli, _, _) = synthesized("report");
    for field in [
        "collective_time_us",
        "algbw_gbps",
        "npus",
        "size_bytes",
        "bounds",
    ] {
        assert_eq!(v[field], cli[field], "{field}");
    }
    assert_eq!(v["transfers"], cli["transfers"]);
}

fn bounds_and_aliases(v: &Value) {
    bounds_fields(&v["bounds"]);
    timing(v, 1 << 20, 0.75, f64_at(&v["bounds"], "best_us"));
    assert_eq!(v["collective_time_us"], v["time_us"]);
    assert_eq!(v["npus"], v["collective"]["npus"]);
    assert_eq!(v["size_bytes"], v["collective"]["size_bytes"]);
    assert_eq!(v["synth_time_ms"], v["elapsed_ms"]);
}

#[test]
fn bench_reports_its_rows_with_the_common_fields() {
    // The small cases of three subjects (compile's smallest case compiles a cluster's set
    // several times over, too long for a test).
    let synth = run_json(&["bench", "synth", "--filter", "mesh:4x4", "--json"]);
    header(&synth, "bench");
    assert_eq!(synth["subject"], "synth");
    let rows = synth["rows"].as_array().unwrap();
    // mesh:4x4 and mesh:4x4x4.
    assert_eq!(rows.len(), 2, "{synth}");
    for row in rows {
        topology_fields(&row["topology"]);
        collective_fields(&row["collective"]);
        bounds_fields(&row["bounds"]);
        let n = row["collective"]["npus"].as_u64().unwrap() as f64;
        // All-Gather of 1 GiB: nccl-tests' bus factor (n-1)/n.
        timing(
            row,
            1 << 30,
            (n - 1.0) / n,
            f64_at(&row["bounds"], "best_us"),
        );
        assert!(f64_at(row, "elapsed_ms") > 0.0, "{row}");
        assert!(row["reference_cpp_ms"].is_f64(), "{row}");
    }

    let sim = run_json(&["bench", "sim", "--filter", "torus:16x16", "--json"]);
    header(&sim, "bench");
    assert_eq!(sim["subject"], "sim");
    let rows = sim["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{sim}");
    let row = &rows[0];
    topology_fields(&row["topology"]);
    collective_fields(&row["collective"]);
    assert_eq!(row["algorithm"], "tacos");
    // A synthesized schedule is contention-free: the simulator meets its clock.
    assert_eq!(
        f64_at(row, "time_us"),
        f64_at(row, "schedule_time_us"),
        "{row}"
    );
    assert!(row["transfers"].as_u64().unwrap() > 0 && f64_at(row, "elapsed_ms") > 0.0);

    let fabric = run_json(&["bench", "fabric", "--filter", "switch:8", "--json"]);
    header(&fabric, "bench");
    assert_eq!(fabric["subject"], "fabric");
    let rows = fabric["rows"].as_array().unwrap();
    // All-Gather, Reduce-Scatter and All-Reduce.
    assert_eq!(rows.len(), 3, "{fabric}");
    for row in rows {
        topology_fields(&row["topology"]);
        collective_fields(&row["collective"]);
        bounds_fields(&row["bounds"]);
        // Ring on the same fabric is a schedule like any other: never below the bounds,
        // and the speedup is its time over the synthesized one.
        let (ring, time) = (f64_at(row, "ring_us"), f64_at(row, "time_us"));
        assert!(ring >= f64_at(&row["bounds"], "best_us"), "{row}");
        assert!(
            (f64_at(row, "speedup_over_ring") - ring / time).abs() < 1e-6,
            "{row}"
        );
    }

    let scale = run_json(&["bench", "scale", "--filter", "32x32", "--json", "--quiet"]);
    header(&scale, "bench");
    assert_eq!(scale["subject"], "scale");
    let rows = scale["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{scale}");
    let row = &rows[0];
    topology_fields(&row["topology"]);
    collective_fields(&row["collective"]);
    assert!(row["skipped"].is_null(), "{row}");
    // Every NPU takes in the other 1,023 chunks once, each by one transfer.
    assert_eq!(row["transfers"], 1024 * 1023);
    for field in ["synth_ms", "check_ms", "synth_peak_mib", "peak_mib"] {
        assert!(f64_at(row, field) > 0.0, "{field}: {row}");
    }
    assert!(
        f64_at(row, "peak_mib") >= f64_at(row, "synth_peak_mib"),
        "{row}"
    );
    // The corner lacks 1,023 chunks of 1 MiB over two links: 512 x (0.5 + 20.97152) us.
    let (bound, time) = (f64_at(row, "bound_us"), f64_at(row, "time_us"));
    assert_eq!(row["bound"], "chunked");
    assert!((bound - 512.0 * 21.47152).abs() < 1e-6, "{row}");
    assert!(time >= bound && (f64_at(row, "efficiency") - bound / time).abs() < 1e-12);
    let plot = &scale["plot"];
    assert_eq!(plot["points"][0]["npus"], 1024);
    assert_eq!(plot["points"][0]["synth_ms"], row["synth_ms"]);
    assert!(plot["exponent"].is_null(), "one point fits no line: {plot}");
    // The C++ figures of ../shared/reference: 16 to 1,024 NPUs, 0.45 ms to 81.8 s.
    let reference = plot["reference_cpp"].as_array().unwrap();
    assert_eq!(reference.len(), 5, "{plot}");
    assert_eq!(reference[4]["npus"], 1024);
    assert_eq!(f64_at(&reference[4], "synth_ms"), 81_800.0);
    let exponent = f64_at(plot, "reference_cpp_exponent");
    assert!((2.5..3.5).contains(&exponent), "{plot}");

    let lowering = run_json(&["bench", "lowering", "--filter", "hypercube", "--json"]);
    header(&lowering, "bench");
    assert_eq!(lowering["subject"], "lowering");
    let rows = lowering["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{lowering}");
    let row = &rows[0];
    topology_fields(&row["topology"]);
    collective_fields(&row["collective"]);
    assert_eq!(row["collective"]["npus"], 64);
    for field in [
        "lower_ms",
        "write_ms",
        "parse_ms",
        "verify_ms",
        "simulate_ms",
    ] {
        assert!(f64_at(row, field) > 0.0, "{field}: {row}");
    }
    for field in ["steps", "threadblocks", "channels", "xml_bytes"] {
        assert!(row[field].as_u64().unwrap() > 0, "{field}: {row}");
    }
    assert!(f64_at(row, "time_us") > 0.0 && f64_at(row, "schedule_time_us") > 0.0);
}

#[test]
fn several_groups_report_each_collective_and_the_last_end() {
    let v = run_json(&[
        "synth", "mesh:4x4", "--npus", "0-3", "--npus", "4-7,12", "-s", "1MiB", "--json",
    ]);
    header(&v, "synth");
    topology_fields(&v["topology"]);
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{v}");
    let mut last = 0.0f64;
    for (group, npus) in groups.iter().zip([4, 5]) {
        collective_fields(&group["collective"]);
        assert_eq!(group["collective"]["npus"], npus, "{group}");
        assert!(group["transfers"].as_u64().unwrap() > 0, "{group}");
        // Sharing links never makes a group faster than it is alone.
        assert!(
            f64_at(group, "time_us") >= f64_at(group, "alone_time_us") - 1e-9,
            "{group}"
        );
        last = last.max(f64_at(group, "time_us"));
    }
    assert_eq!(f64_at(&v, "time_us"), last, "{v}");
}
