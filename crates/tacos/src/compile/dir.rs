//! A compiled directory on disk: written whole or not at all, and checked against its
//! manifest and for anything the executor would refuse.
//!
//! A compiled directory `DIR` holds `manifest.json` and `msccl/`, and `msccl/` holds the
//! algorithm files and nothing else: the executor parses every regular file and symlink
//! of `MSCCL_ALGO_DIR` as algorithm XML, dot files included, and one it cannot load fails
//! the job. A directory is "ours" when it holds a `manifest.json` whose `format` is
//! `MANIFEST_FORMAT`. Writing builds the whole directory under a hidden temporary name
//! beside `DIR` and renames it into place, so readers see the old directory, no
//! directory, or the complete new one, never part of one, and nothing but finished
//! algorithm files is ever in `DIR/msccl/`. Several processes may write the same target
//! at once: one rename wins, and a writer that finds a complete identical directory in
//! place keeps it.
//!
//! This file holds what writing and checking share: the manifest's header, where the
//! algorithm files live, which names are plain, reading a regular file without following
//! or blocking. `install` writes a set in place, `check` re-checks one, `staging` keeps the
//! hidden directories beside a target.

use super::manifest::{ALGORITHM_DIR, MANIFEST_FILE, MANIFEST_FORMAT};
use crate::error::{Error, Result};
use crate::msccl::rules;
use crate::msccl::{Program, Target};
use serde::Deserialize;
use std::path::{Path, PathBuf};

mod check;
mod install;
pub(crate) mod staging;

pub use check::{
    check_dir, check_dir_with, read_set, CheckKind, CheckOptions, CheckProblem, CheckReport,
};
pub(crate) use install::tidy_dir;
pub use install::{check_target, write_dir, Found, Written};

/// The manifest's first fields, readable whatever the format version.
#[derive(Deserialize)]
struct Header {
    format: String,
    format_version: u32,
    tool_version: String,
}

fn read_header(dir: &Path) -> Option<Header> {
    let bytes = read_regular(&dir.join(MANIFEST_FILE)).ok()?;
    serde_json::from_slice::<Header>(&bytes)
        .ok()
        .filter(|h| h.format == MANIFEST_FORMAT)
}

/// The topology the algorithm directory at `dir` was compiled for, as its manifest names
/// it: (name, `topology_hash`); None where `dir` holds no manifest of ours.
///
/// ```
/// let dir = std::env::temp_dir().join("tacos-doc-compiled-for-nothing");
/// assert_eq!(tacos::compile::compiled_for(&dir), None);
/// ```
pub fn compiled_for(dir: &Path) -> Option<(String, String)> {
    #[derive(Deserialize)]
    struct Stamp {
        topology: Named,
    }
    #[derive(Deserialize)]
    struct Named {
        name: String,
        hash: String,
    }
    read_header(dir)?;
    let bytes = read_regular(&dir.join(MANIFEST_FILE)).ok()?;
    let stamp: Stamp = serde_json::from_slice(&bytes).ok()?;
    Some((stamp.topology.name, stamp.topology.hash))
}

/// The directory of a compiled directory `dir` that holds its algorithm files alone: what
/// `MSCCL_ALGO_DIR` should name.
pub fn algorithm_dir(dir: &Path) -> PathBuf {
    dir.join(ALGORITHM_DIR)
}

/// Every rule of `target`'s loader that `program` breaks, one line each; empty when the
/// loader takes the file. Compile, `compile --check`, the scheduler plugin and the C API
/// all ask here.
pub(crate) fn loader_problems(program: &Program, target: &Target) -> Vec<String> {
    rules::check(program, target)
        .iter()
        .map(|b| b.to_string())
        .collect()
}

/// A name that stays inside the directory and is not hidden.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\', '\0'])
}

/// The bytes of `path` where it is a regular file; anything else (a symbolic link, a
/// FIFO, a device) is an error without blocking on it: it is opened without following a
/// link and without waiting for a writer, then checked before it is read.
pub(crate) fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if !std::fs::symlink_metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The folder a directory lives in and its name.
pub(crate) fn parent_and_name(dir: &Path) -> Result<(PathBuf, String)> {
    let name = dir
        .file_name()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::compile_in(dir, "names no directory"))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}
