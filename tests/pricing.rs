//! One model for programs: the time `tacos synth --xml` prints for the file it writes is
//! the one `tacos simulate --xml` and `tacos verify SPEC -s S` print for the same file (the
//! executor cost model's, unless `--alpha-beta`), and NCCL's own choice is priced beside it
//! by the same model, as `tacos simulate --baseline nccl` prices it alone.

mod common;

use common::tacos;
use serde_json::Value;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-pricing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = tacos(args);
    assert!(ok, "tacos {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("tacos {args:?}: {e}: {out}"))
}

fn time_us(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

#[test]
fn synth_xml_prints_the_time_simulate_and_verify_give_its_file_and_nccls_beside() {
    let spec = "preset:dgx-h100,nodes=2";
    let xml = scratch("h100-allreduce.xml");
    let file = xml.to_str().unwrap();
    let synth = json(&[
        "synth",
        spec,
        "-c",
        "allreduce",
        "-s",
        "64MiB",
        "-k",
        "2",
        "--seeds",
        "1",
        "--xml",
        file,
        "--json",
    ]);
    let program = time_us(&synth, "program_time_us");
    let simulated = json(&[
        "simulate",
        spec,
        "-c",
        "allreduce",
        "-s",
        "64MiB",
        "--xml",
        file,
        "--json",
    ]);
    let verified = json(&["verify", file, spec, "-s", "64MiB", "--json"]);
    assert!(
        same(program, time_us(&simulated, "time_us")),
        "{synth} {simulated}"
    );
    assert!(
        same(program, time_us(&verified, "time_us")),
        "{synth} {verified}"
    );
    // The executor model adds a launch floor and per-step latencies to the links' alpha
    // and beta, so the program never runs faster than the schedule's own clock.
    assert!(program > time_us(&synth, "time_us"), "{synth}");
    assert_eq!(synth["cost_model"]["arch"], "hopper");

    let nccl = json(&[
        "simulate",
        spec,
        "-c",
        "allreduce",
        "-s",
        "64MiB",
        "--baseline",
        "nccl",
        "--json",
    ]);
    let beside = &synth["nccl"];
    assert!(
        same(time_us(beside, "time_us"), time_us(&nccl, "time_us")),
        "{beside} {nccl}"
    );
    assert_eq!(beside["algorithm"], nccl["nccl"]["algorithm"]);
    assert_eq!(beside["protocol"], nccl["nccl"]["protocol"]);
    let speedup = time_us(beside, "speedup");
    assert!(
        same(speedup, time_us(beside, "time_us") / program),
        "{beside}"
    );
}

#[test]
fn the_text_report_names_the_model_and_says_which_is_faster() {
    let xml = scratch("ring-allgather.xml");
    let (ok, out, err) = tacos(&[
        "synth",
        "ring:8",
        "-c",
        "allgather",
        "-s",
        "1MiB",
        "-k",
        "1",
        "--seeds",
        "1",
        "--xml",
        xml.to_str().unwrap(),
        "--gpu-arch",
        "hopper",
    ]);
    assert!(ok, "{err}");
    let program = out
        .lines()
        .find(|l| l.starts_with("program time"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        program.contains("executor cost model, hopper built-in profile"),
        "{out}"
    );
    let nccl = out
        .lines()
        .find(|l| l.starts_with("nccl "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(nccl.contains("faster") || nccl.contains("slower"), "{nccl}");
    if nccl.contains("slower") {
        assert!(err.contains("tacos compile ring:8"), "{err}");
    }
    assert!(out.contains("the schedule's own clock"), "{out}");
}

#[test]
fn alpha_beta_times_programs_by_bare_messages_and_prices_no_nccl() {
    let xml = scratch("ring-alpha-beta.xml");
    let file = xml.to_str().unwrap();
    let synth = json(&[
        "synth",
        "ring:4",
        "-c",
        "allreduce",
        "-s",
        "4MiB",
        "-k",
        "2",
        "--seeds",
        "1",
        "--xml",
        file,
        "--alpha-beta",
        "--json",
    ]);
    let simulated = json(&[
        "simulate",
        "ring:4",
        "-c",
        "allreduce",
        "-s",
        "4MiB",
        "--xml",
        file,
        "--alpha-beta",
        "--json",
    ]);
    assert!(same(
        time_us(&synth, "program_time_us"),
        time_us(&simulated, "time_us")
    ));
    assert!(
        synth.get("nccl").is_none() && synth.get("cost_model").is_none(),
        "{synth}"
    );
}

#[test]
fn nccl_is_priced_only_where_it_runs_the_collective() {
    // NCCL has no built-in All-to-All, and a subset is not the communicator priced.
    let a2a = json(&["synth", "ring:4", "-c", "alltoall", "-s", "1MiB", "--json"]);
    assert!(a2a.get("nccl").is_none(), "{a2a}");
    let some = json(&[
        "synth",
        "ring:8",
        "-c",
        "allgather",
        "-s",
        "1MiB",
        "--npus",
        "0-3",
        "--json",
    ]);
    assert!(some.get("nccl").is_none(), "{some}");
    // An abstract ring is no machine NCCL runs on until its GPUs are named.
    let abstract_ring = json(&["synth", "ring:8", "-c", "allgather", "-s", "1MiB", "--json"]);
    assert!(abstract_ring.get("nccl").is_none(), "{abstract_ring}");
    let all = json(&[
        "synth",
        "ring:8",
        "-c",
        "allgather",
        "-s",
        "1MiB",
        "--gpu-arch",
        "hopper",
        "--json",
    ]);
    assert!(time_us(&all["nccl"], "time_us") > 0.0, "{all}");
    // Without a program there is nothing of ours priced by the same model to compare.
    assert!(all["nccl"].get("speedup").is_none(), "{all}");
}

#[test]
fn compare_prices_our_program_and_nccls_as_synth_does() {
    let spec = "preset:dgx-h100,nodes=2";
    let one = [
        "-c",
        "allreduce",
        "-s",
        "64MiB",
        "-k",
        "2",
        "--seeds",
        "1",
        "--no-plan",
    ];
    let xml = scratch("compared.xml");
    let synth = json(
        &[
            &["synth", spec][..],
            &one,
            &["--xml", xml.to_str().unwrap(), "--instances", "1", "--json"],
        ]
        .concat(),
    );
    let compare = json(&[&["compare", spec][..], &one, &["--quiet", "--json"]].concat());
    // One candidate: the same schedule. Compare's program fills instances where that is
    // faster, so it is no slower than synth's one-instance file.
    let compared = time_us(&compare, "program_time_us");
    assert!(compared <= time_us(&synth, "program_time_us") * (1.0 + 1e-9));
    assert!(same(
        time_us(&compare["nccl"], "time_us"),
        time_us(&synth["nccl"], "time_us")
    ));
    assert!(same(
        time_us(&compare["nccl"], "speedup"),
        time_us(&compare["nccl"], "time_us") / compared
    ));
    let bare = json(&[&["compare", spec][..], &one, &["--alpha-beta", "--json"]].concat());
    assert!(bare.get("nccl").is_none() && bare.get("program_time_us").is_none());
}

/// NCCL runs CollNet only where the network reduces (SHARP), which a user says
/// (`sharp=yes`); a node's buffer must still enter the network once, so no price beats its
/// NICs' line rate.
#[test]
fn collnet_is_priced_only_where_the_network_reduces() {
    let args = |spec| {
        [
            "simulate",
            spec,
            "-c",
            "allreduce",
            "-s",
            "1GiB",
            "--baseline",
            "nccl",
            "--nccl-algo",
            "collnet_direct",
            "--json",
        ]
    };
    let (ok, _, err) = tacos(&args("preset:dgx-h100,nodes=4"));
    assert!(!ok && err.contains("SHARP"), "{err}");
    let sharp = json(&args("preset:dgx-h100,nodes=4,sharp=yes"));
    assert_eq!(sharp["nccl"]["algorithm"], "collnet_direct", "{sharp}");
    // 1 GiB over a node's 8 NICs of 50 GB/s, us.
    let nics_us = (1u64 << 30) as f64 / (8.0 * 50.0 * 1e3);
    assert!(time_us(&sharp, "time_us") >= nics_us, "{sharp}");
    let (ok, _, err) = tacos(&args("preset:dgx-h100,nodes=1,sharp=yes"));
    assert!(
        !ok && err.contains("sharp=") && err.contains("nodes=2"),
        "{err}"
    );
}
