//! The scheduler's cache of compiled algorithm sets: where an entry lives, the lock the
//! ranks of one node take turns on, and [`open_or_compile`], which `tacos compile` users
//! may call too: an offline-compiled directory and an online cache entry are the same
//! thing, made by the same code (`compile::write_dir`, checked by `compile::check_dir`).

use crate::compile::{
    algorithm_dir, check_dir_with, compile, parent_and_name, sha256_hex, topology_hash, write_dir,
    CheckOptions, CompileOptions, Manifest, Progress, Written,
};
use crate::error::Result;
use crate::topology::Topology;
use std::path::{Path, PathBuf};

/// A directory name for the cache of what `options` compile on `topo` with this tool:
/// `tacos-VERSION-TARGET-TOPOLOGY-OPTIONS` with the target's profile name, the first 16
/// hex digits of the topology hash and 12 of the options' hash (which covers the target's
/// limits), so a new tool, target, topology or option set gets a directory of its own and
/// never reads another's.
pub fn cache_dir_name(topo: &Topology, options: &CompileOptions) -> String {
    let json = serde_json::to_string(options).expect("options serialize");
    format!(
        "tacos-{}-{}-{}-{}",
        crate::VERSION,
        options.target.profile.name(),
        &topology_hash(topo)[..16],
        &sha256_hex(json.as_bytes())[..12]
    )
}

/// How `open_or_compile` got its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A complete, current directory for this topology and these options was there.
    Existing,
    /// It was compiled now and written (or, racing, found written by another process).
    Compiled(Written),
}

/// The plugin cache's entry point, and the same path as `tacos compile`: uses `dir` if
/// it holds, intact, what `options` compile on `topo` with this tool (manifest format and
/// tool version, topology hash, options, every file's hash; the XML is not re-parsed),
/// else compiles and writes it with `write_dir` (a stale or corrupted directory of ours is
/// replaced; any other is replaced only with `force`).
///
/// Processes opening the same directory at once (the ranks of one node) compile one at a
/// time: each waits on an advisory lock on `.NAME.lock` beside the directory, then looks
/// again, so one compiles and the others find its result. Where the lock file cannot be
/// made they compile side by side, which `write_dir` tolerates.
pub fn open_or_compile(
    dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    force: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(Manifest, Opened)> {
    let wanted = CompileOptions {
        jobs: 0,
        ..options.clone()
    };
    let sound = || {
        let report = check_dir_with(dir, &CheckOptions::hashes_only(Some(topo))).ok()?;
        let manifest = report.manifest.filter(|m| m.options == wanted)?;
        report.problems.is_empty().then_some(manifest)
    };
    if let Some(manifest) = sound() {
        return Ok((manifest, Opened::Existing));
    }
    let _lock = DirLock::acquire(dir);
    if let Some(manifest) = sound() {
        return Ok((manifest, Opened::Existing));
    }
    let set = compile(topo, options, progress)?;
    let written = write_dir(&set, dir, force)?;
    Ok((set.manifest, Opened::Compiled(written)))
}

/// An algorithm set the cache holds: its manifest, and the directory that holds its
/// algorithm files alone (what `MSCCL_ALGO_DIR` would name).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedSet {
    pub algorithms: PathBuf,
    pub manifest: Manifest,
}

/// Opens or compiles what `options` compile on `topo` in the cache under `cache_dir`; a
/// cache that cannot be written is replaced by a directory of this process under the
/// system's temporary directory. The error names every directory tried and why it failed.
pub fn open_cached(
    cache_dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
) -> std::result::Result<CachedSet, String> {
    let name = cache_dir_name(topo, options);
    let mut tried = Vec::new();
    for root in [
        cache_dir.to_path_buf(),
        std::env::temp_dir().join(format!("tacos-{}", std::process::id())),
    ] {
        let dir = root.join(&name);
        match open_or_compile(&dir, topo, options, false, &|_| {}) {
            Ok((manifest, _)) => {
                return Ok(CachedSet {
                    algorithms: algorithm_dir(&dir),
                    manifest,
                })
            }
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(tried.join("; "))
}

/// An exclusive advisory lock (`flock`) on `.NAME.lock` beside a directory, released when
/// dropped (or when its process dies).
struct DirLock {
    _held: std::fs::File,
}

impl DirLock {
    fn acquire(dir: &Path) -> Option<DirLock> {
        use std::os::fd::AsRawFd;
        let (parent, name) = parent_and_name(dir).ok()?;
        std::fs::create_dir_all(&parent).ok()?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(parent.join(format!(".{name}.lock")))
            .ok()?;
        loop {
            // SAFETY: flock on a descriptor this function owns; it does not touch memory.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Some(DirLock { _held: file });
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return None;
            }
        }
    }
}
