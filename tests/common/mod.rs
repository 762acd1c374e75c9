//! Helpers shared by the integration tests: random topologies, synthesized schedules
//! checked and simulated, and loading the cdylib from C the way NCCL and the MSCCL executor
//! do.
// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::{check, Schedule};
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{Link, Topology};

/// A random strongly connected topology: a ring through a random permutation of the NPUs
/// plus up to `extra` random links, each link's bandwidth and latency drawn from the
/// given choices.
pub fn random_topology(
    seed: u64,
    npus: usize,
    extra: usize,
    bandwidths: &[f64],
    latencies: &[f64],
) -> Topology {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..npus).collect();
    for i in (1..npus).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut pairs: Vec<(usize, usize)> = (0..npus)
        .map(|i| (order[i], order[(i + 1) % npus]))
        .collect();
    for _ in 0..extra {
        let (a, b) = (rng.random_range(0..npus), rng.random_range(0..npus));
        if a != b && !pairs.contains(&(a, b)) {
            pairs.push((a, b));
        }
    }
    let links = pairs
        .into_iter()
        .map(|(src, dst)| Link {
            src,
            dst,
            bandwidth_gbps: bandwidths[rng.random_range(0..bandwidths.len())],
            latency_us: latencies[rng.random_range(0..latencies.len())],
        })
        .collect();
    Topology::new(format!("random {seed}"), npus, links).unwrap()
}

/// A random fabric: `npus` NPUs each linked both ways to one of `switches` switches,
/// the switches in a line both ways, plus up to `extra` links between any two vertices;
/// bandwidths drawn from a few.
pub fn random_fabric(seed: u64, npus: usize, switches: usize, extra: usize) -> Topology {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vertices = npus + switches;
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for n in 0..npus {
        let s = npus + rng.random_range(0..switches);
        pairs.extend([(n, s), (s, n)]);
    }
    for s in npus + 1..vertices {
        pairs.extend([(s - 1, s), (s, s - 1)]);
    }
    for _ in 0..extra {
        let (a, b) = (rng.random_range(0..vertices), rng.random_range(0..vertices));
        if a != b && !pairs.contains(&(a, b)) {
            pairs.push((a, b));
        }
    }
    let links = pairs
        .into_iter()
        .map(|(src, dst)| Link {
            src,
            dst,
            bandwidth_gbps: [10.0, 25.0, 40.0, 100.0][rng.random_range(0..4)],
            latency_us: 0.5,
        })
        .collect();
    let names = (0..switches).map(|i| format!("s{i}")).collect();
    Topology::with_switches(format!("fabric {seed}"), npus, names, links).unwrap()
}

/// The cdylib cargo built with this test: in `deps/` next to the test binary, and copied to
/// the profile directory above it; the newest of them.
pub fn cdylib() -> PathBuf {
    let name = format!(
        "{}tacos{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary is in a directory");
    [deps.join(&name), deps.parent().unwrap_or(deps).join(&name)]
        .into_iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("{name} not found in {} or above it", deps.display()))
}

/// Compiles `tests/c/NAME.c` with `$CC` (default `cc`), warnings as errors, against the
/// project's headers, into the test's scratch directory; `extra` goes last (libraries,
/// linker flags).
pub fn build_harness(name: &str, extra: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-I",
        ])
        .arg(root.join("crates/tacos/include"))
        .arg(root.join("tests/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(&out)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
    assert!(status.success(), "{cc} could not build {name}");
    out
}

/// Runs the tacos binary: (success, stdout, stderr).
pub fn tacos(args: &[&str]) -> (bool, String, String) {
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

/// `RELATIVE` under the third-party corpus at `../shared/corpus` beside the repository, or
/// `None` in a checkout without it (a fresh clone), having printed the one line that says
/// the calling test was skipped.
pub fn corpus(relative: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if root.is_dir() {
        Some(root.join(relative))
    } else {
        // Written to the process's stderr itself, which the test harness does not
        // capture, so the line shows in `cargo test`'s output beside the test's "ok".
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {test}: ../shared/corpus is not beside the checkout"
        );
        None
    }
}

/// `kind` (K = `k`, `size` bytes, root 0 where it has one) synthesized on `t` with `seed`,
/// checked (its reported time is its own clock), and the time the simulator takes to run it
/// keeping the schedule's order on switch ports.
pub fn synth_checked(
    t: &Topology,
    kind: CollectiveKind,
    k: usize,
    size: u64,
    seed: u64,
) -> (Schedule, u64) {
    let root = kind.has_root().then_some(0);
    let c = Collective::over_all(t, kind, root, k, size).unwrap();
    let s = synthesize(t, &c, &SynthOptions::seeded(seed)).unwrap();
    let report = check(&s, t).unwrap_or_else(|e| panic!("{} {kind:?} K={k}: {e}", t.name()));
    assert_eq!(report.collective_time_ps, s.collective_time_ps());
    let simulated = simulate_schedule(t, &s).unwrap().time_ps;
    (s, simulated)
}
