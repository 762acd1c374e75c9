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

/// The address space a run under `within_4gb` may use, in KiB (`ulimit -v`): what the
/// issue's hostile runs were given.
const ADDRESS_SPACE_KIB: u64 = 4_000_000;

/// Runs the tacos binary under a 4 GB address-space limit, the way a job with `ulimit -v`
/// does: an allocation no estimate saw aborts it (a signal, not an exit code).
fn within_4gb(args: &[&str]) -> Output {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_tacos"))
        .args(args)
        .env_remove("TACOS_MAX_MEMORY")
        .output()
        .expect("the tacos binary runs");
    assert!(
        out.status.code().is_some(),
        "{args:?} was killed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stdout of a run under `within_4gb` that must succeed.
fn succeeds_within_4gb(args: &[&str]) -> String {
    let out = within_4gb(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch path of these tests.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-resource-limits");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The one error line of a run that must fail cleanly.
fn one_error(args: &[&str], out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    err
}

/// A figure printed on the line that starts with `label`, in microseconds.
fn figure_us(text: &str, label: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' line in:\n{text}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no figure in '{line}'"))
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
    // Its estimate is about 4 GiB, twice the limit.
    let err = error_of(
        &[
            "synth",
            "mesh:32x32",
            "-c",
            "alltoall",
            "--max-memory",
            "2GiB",
        ],
        &[],
    );
    assert!(err.contains("bytes of memory (estimated)"), "{err}");
    assert!(
        err.contains("the limit of 2.0 GiB is set by --max-memory"),
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

/// Switched hops once gathered every waiting message of every freed port, once per
/// message that touched the port: on a 512-NPU star, 4 GiB at the first step. The queues
/// are now read only up to where their port is taken again.
#[test]
fn a_512_npu_switched_all_to_all_simulates_within_4gb() {
    let args = [
        "simulate",
        "switch:512",
        "--baseline",
        "direct",
        "-c",
        "alltoall",
    ];
    let text = succeeds_within_4gb(&args);
    // No faster than its lower bound, and no slower than every message in a row through
    // the busiest port's 511 x 2 messages of 1 GiB / 512^2 each.
    let (time, bound) = (figure_us(&text, "time"), figure_us(&text, "lower bound"));
    assert!(time >= bound && time < 2.0 * bound, "{text}");
}

#[test]
fn nccls_rings_and_trees_on_256_gpus_simulate_within_4gb() {
    let args = ["simulate", "preset:dgx-a100,nodes=32", "--baseline", "nccl"];
    let text = succeeds_within_4gb(&args);
    assert!(
        figure_us(&text, "time") >= figure_us(&text, "lower bound"),
        "{text}"
    );
}

/// The memory limit is the least of the flag, half of the machine and half of what the
/// address-space limit leaves: under `ulimit -v` 4 GB, a million chunks of a 4-NPU
/// All-Reduce (8 GiB estimated, less than half this machine) are refused, not aborted.
#[test]
fn the_memory_limit_is_held_within_the_address_space_limit() {
    let args = [
        "synth",
        "ring:4",
        "-c",
        "allreduce",
        "-s",
        "1MiB",
        "-k",
        "1048576",
    ];
    let err = one_error(&args, &within_4gb(&args));
    assert!(err.contains("the address-space limit (ulimit -v)"), "{err}");
}

/// A chunk slot costs the verifier a value on each rank and an access history, not a
/// byte: a 1 KB program of 200,000,000 chunks per loop once passed as 1.2 GB and took
/// the process past 4 GB.
#[test]
fn a_program_of_huge_loops_is_refused_by_verify_and_simulate() {
    let path = scratch("loop.xml");
    std::fs::write(&path, HUGE_LOOP).unwrap();
    let path = path.to_str().unwrap();
    for args in [
        vec!["verify", path],
        vec!["simulate", "ring:2", "--xml", path],
    ] {
        let err = one_error(&args, &within_4gb(&args));
        assert!(
            err.contains("nchunksperloop 200000000 on 2 GPUs") && err.contains("bytes, more than"),
            "{args:?}: {err}"
        );
    }
}

/// A 2-GPU All-Gather whose loop claims 200,000,000 chunks.
const HUGE_LOOP: &str = r#"<algo name="t" proto="Simple" nchannels="1" nchunksperloop="200000000" ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

/// Pricing NCCL's own algorithms on a 256-GPU fabric simulates its rings through the
/// switches: that once aborted `tacos compile` under 4 GB at its first band. One band
/// here (the whole compile takes tens of minutes on two cores, within the limit).
#[test]
fn compiling_for_a_256_gpu_fabric_prices_nccl_within_4gb() {
    let out_dir = scratch("dgx-a100-32");
    let _ = std::fs::remove_dir_all(&out_dir);
    let args = [
        "compile",
        "preset:dgx-a100,nodes=32",
        "--fast",
        "--sizes",
        "1MiB..2MiB",
        "--collectives",
        "allgather",
        "--inplace",
        "outofplace",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let text = succeeds_within_4gb(&args);
    // The band is NCCL's or ours, with NCCL's price beside it.
    assert!(
        text.contains("allgather") && text.contains("ring/"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// A profile's efficiency of 1e-300 priced NCCL's All-Reduce at a 300-digit figure, a
/// denormal channel rate at `inf us`, and the command exited 0. Each constant has a
/// floor that keeps every time a figure; below it the file and field are named.
#[test]
fn a_profile_with_vanishing_constants_is_refused_naming_the_field() {
    let good = tacos::cost::ExecModel::builtin(tacos::gpu::GpuArch::Hopper);
    let mut efficiency = good.clone();
    efficiency.efficiency.nvlink = 1e-300;
    let mut rate = good.clone();
    rate.simple.channel_gbps = 1e-310;
    for (name, model, field) in [
        ("efficiency.json", efficiency, "efficiency.nvlink: 1e-300"),
        ("rate.json", rate, "simple.channel_gbps: 1e-310"),
    ] {
        let path = scratch(name);
        std::fs::write(&path, model.to_json()).unwrap();
        let args = [
            "simulate",
            "preset:hgx-h100",
            "--baseline",
            "nccl",
            "-c",
            "allreduce",
            "--profile",
            path.to_str().unwrap(),
        ];
        let err = error_of(&args, &[]);
        assert!(
            err.contains(name) && err.contains(field) && err.contains("at least 0.01"),
            "{err}"
        );
    }
}
