//! Helpers for tests that load the cdylib from C, the way NCCL and the MSCCL executor do.

use std::path::{Path, PathBuf};
use std::process::Command;

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
        .arg(root.join("include"))
        .arg(root.join("tests/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(&out)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
    assert!(status.success(), "{cc} could not build {name}");
    out
}
