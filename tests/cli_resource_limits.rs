//! Requests too large for memory or for the picosecond clock, as a user runs them: each
//! ends in one clear error line instead of an abort, a panic or a wrong answer.

use std::process::{Command, Output};

fn tacos(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .env_remove("TACOS_MAX_MEMORY")
        .envs(env.iter().copied())
        .output()
        .expect("the tacos binary runs")
}

fn error_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = tacos(args, env);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    err
}

#[test]
fn all_to_all_on_a_32x32_mesh_is_refused_before_it_allocates() {
    let err = error_of(
        &[
            "synth",
            "mesh:32x32",
            "-c",
            "alltoall",
            "--max-memory",
            "4GiB",
        ],
        &[],
    );
    assert!(err.contains("bytes of memory (estimated)"), "{err}");
    assert!(
        err.contains("the limit of 4.0 GiB is set by --max-memory"),
        "{err}"
    );
}

#[test]
fn a_ring_all_reduce_on_4096_npus_is_refused_before_it_allocates() {
    // The flag is global: it may come before the command.
    let err = error_of(
        &[
            "--max-memory",
            "4GiB",
            "simulate",
            "mesh:64x64",
            "--baseline",
            "ring",
            "-c",
            "allreduce",
        ],
        &[],
    );
    assert!(
        err.contains("the ring baseline for allreduce over 4096 NPUs"),
        "{err}"
    );
}

#[test]
fn the_environment_sets_the_limit_and_a_bad_value_is_named() {
    let args = ["synth", "mesh:8x8", "-c", "alltoall", "--quiet"];
    let err = error_of(&args, &[("TACOS_MAX_MEMORY", "1MB")]);
    assert!(err.contains("set by TACOS_MAX_MEMORY"), "{err}");
    let err = error_of(&args, &[("TACOS_MAX_MEMORY", "plenty")]);
    assert!(
        err.contains("TACOS_MAX_MEMORY: 'plenty' must be a size"),
        "{err}"
    );
    // The flag wins over the environment.
    let out = tacos(
        &["synth", "mesh:4x4", "--quiet", "--max-memory", "1GiB"],
        &[("TACOS_MAX_MEMORY", "1MB")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_simulated_time_past_the_clock_is_an_error_not_an_efficiency_above_one() {
    // Every figure is within the input ranges, but a Broadcast of 1 TiB at 0.001 GB/s
    // takes 1.1e18 ps per hop, and its chunk crosses 31 hops in a row: past 2^64 ps.
    let err = error_of(
        &[
            "simulate",
            "uniring:32",
            "--bandwidth",
            "0.001",
            "--latency",
            "0",
            "-c",
            "broadcast",
            "--baseline",
            "ring",
            "-s",
            "1TiB",
        ],
        &[],
    );
    assert!(err.contains("us of time, more than the"), "{err}");
}

#[test]
fn links_faster_than_a_picosecond_synthesize() {
    let out = tacos(
        &[
            "synth",
            "--latency",
            "0",
            "--bandwidth",
            "1000000",
            "-s",
            "1KiB",
            "--quiet",
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("checked: correct and contention-free"),
        "{text}"
    );
}
