//! The NCCL tuner plugin as NCCL sees it: a C harness (tests/c/tuner_harness.c), built with
//! the system C compiler, dlopens the cdylib, looks up `ncclTunerPlugin_v2` .. `_v6` and
//! drives every version. The harness prints each failed check and exits non-zero.

mod common;

use common::cdylib;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Environment variables the plugin reads; cleared so the runs see only what they set.
const PLUGIN_VARIABLES: &[&str] = &[
    "TACOS_TOPOLOGY",
    "NCCL_TOPO_FILE",
    "TACOS_NIC_GBPS",
    "TACOS_NVSWITCH_GBPS",
    "TACOS_NVLINK_GBPS",
    "TACOS_GPU_ARCH",
    "NCCL_ALGO",
    "NCCL_PROTO",
];

/// The harness, compiled once per test run.
fn harness() -> &'static Path {
    static HARNESS: OnceLock<PathBuf> = OnceLock::new();
    HARNESS.get_or_init(|| common::build_harness("tuner_harness", &["-ldl"]))
}

/// Runs the harness in `mode` for a communicator of `ranks` on `nodes` with `env` set.
fn run(mode: &str, ranks: usize, nodes: usize, env: &[(&str, &str)], log: bool) {
    run_with(mode, ranks, nodes, env, if log { &[] } else { &["nolog"] });
}

/// As `run`, with the harness's `options` (`nolog`, `init-ms=N`).
fn run_with(mode: &str, ranks: usize, nodes: usize, env: &[(&str, &str)], options: &[&str]) {
    let mut cmd = Command::new(harness());
    cmd.arg(cdylib())
        .args([mode, &ranks.to_string(), &nodes.to_string()])
        .args(options);
    for var in PLUGIN_VARIABLES {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let output = cmd.output().expect("the harness runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "harness {mode} {ranks} {nodes} {env:?}:\n{text}"
    );
    assert!(text.contains(" 0 failures"), "{text}");
}

const DGX_A100_PAIR: (&str, &str) = ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2");

#[test]
fn every_version_steers_nccl_on_two_dgx_a100() {
    run("steer", 16, 2, &[DGX_A100_PAIR], true);
}

#[test]
fn a_null_logger_is_fine() {
    run("steer", 16, 2, &[DGX_A100_PAIR], false);
    run("untouched", 8, 1, &[DGX_A100_PAIR], false);
}

#[test]
fn the_generic_cluster_needs_no_settings() {
    run("steer", 64, 8, &[], true);
}

/// Every init must return within this (the formulas take tens of milliseconds at 4,096
/// ranks; CI machines are loaded).
const INIT_BOUND: &str = "init-ms=5000";

#[test]
fn the_generic_cluster_starts_at_4096_ranks_on_512_nodes() {
    run_with("steer", 4096, 512, &[], &[INIT_BOUND]);
}

#[test]
fn a_named_cluster_starts_at_4096_ranks_on_512_nodes() {
    let env = [("TACOS_TOPOLOGY", "preset:dgx-h100,nodes=512")];
    run_with("steer", 4096, 512, &env, &[INIT_BOUND]);
}

#[test]
fn topologies_too_large_for_any_model_are_left_to_nccl() {
    // A mesh is no cluster of identical nodes, and too large to simulate; a switch of
    // 100,000 is refused on its size, before it is built (it would hold 10^10 links).
    let mesh = [("TACOS_TOPOLOGY", "mesh:64x64")];
    run_with("untouched", 4096, 512, &mesh, &[INIT_BOUND]);
    let switch = [("TACOS_TOPOLOGY", "switch:100000")];
    run_with("untouched", 16, 2, &switch, &[INIT_BOUND]);
    let nodes = [("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=100000")];
    run_with("untouched", 800_000, 100_000, &nodes, &[INIT_BOUND]);
}

#[test]
fn an_nccl_topology_file_is_imported_for_every_node() {
    // Azure NDv4: 8 A100s per node; the file lacks link speeds, so warnings are logged
    // (the harness allows them only in untouched mode): run with the figures given.
    let Some(file) = common::corpus("nccl-topo/ndv4-topo.xml") else {
        return;
    };
    let env = [("NCCL_TOPO_FILE", file.to_str().unwrap())];
    run("untouched", 8, 2, &env, true);
    run("steer", 16, 2, &env, false);
}

#[test]
fn a_rank_count_that_does_not_match_the_topology_changes_nothing() {
    run("untouched", 8, 1, &[DGX_A100_PAIR], true);
}

#[test]
fn bad_settings_change_nothing() {
    run(
        "untouched",
        16,
        2,
        &[("NCCL_TOPO_FILE", "/nonexistent/topo.xml")],
        true,
    );
    run("untouched", 16, 2, &[("TACOS_TOPOLOGY", "mesh:4xZ")], true);
    run("untouched", 16, 2, &[("TACOS_NIC_GBPS", "-3")], true);
}

/// A FIFO with no writer as a setting once held NCCL's init forever (opening it waits for
/// a writer): the plugin refuses what is not a regular file and changes nothing.
#[test]
fn settings_that_name_a_fifo_change_nothing_and_return() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tuner-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (variable, name) in [
        ("NCCL_TOPO_FILE", "topo.xml"),
        ("TACOS_TOPOLOGY", "topology.json"),
    ] {
        let fifo = dir.join(name);
        let made = Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        run(
            "untouched",
            16,
            2,
            &[(variable, fifo.to_str().unwrap())],
            true,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_user_choice_of_algorithms_keeps_v2_out() {
    run(
        "v2-off",
        16,
        2,
        &[DGX_A100_PAIR, ("NCCL_PROTO", "^LL128")],
        true,
    );
}
