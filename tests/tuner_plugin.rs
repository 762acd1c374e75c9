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
    let mut cmd = Command::new(harness());
    cmd.arg(cdylib())
        .args([mode, &ranks.to_string(), &nodes.to_string()]);
    if !log {
        cmd.arg("nolog");
    }
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
