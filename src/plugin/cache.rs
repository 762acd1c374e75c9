//! The scheduler's cache of compiled algorithm sets: where an entry lives, the lock the
//! ranks of one node take turns on, and [`open_or_compile`], which `tacos compile` users
//! may call too: an offline-compiled directory and an online cache entry are the same
//! thing, made by the same code (`compile::write_dir`, checked by `compile::check_dir`).

use super::Log;
use crate::compile::{
    algorithm_dir, check_dir_with, compile, parent_and_name, remove_abandoned, sha256_hex,
    tidy_dir, topology_hash, write_dir, CheckOptions, CompileOptions, Manifest, Progress, Written,
};
use crate::error::{echo, Error, Result};
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
/// replaced; any other, such as one whose manifest cannot be read, only with `force`).
/// What killed writers left beside `dir` is repaired or removed first (`tidy_dir`).
///
/// Processes opening the same directory at once (the ranks of one node) compile one at a
/// time: each waits on an advisory lock on `.NAME.lock` beside the directory, then looks
/// again, so one compiles and the others find its result. Where the lock file cannot be
/// made the directory cannot be written either: that is an error before any compiling.
pub fn open_or_compile(
    dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    force: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(Manifest, Opened)> {
    open_or_rebuild(dir, topo, options, force, progress, &|_| {})
}

/// `open_or_compile`, calling `rebuilding` with the reason when a directory that was
/// there is compiled again.
fn open_or_rebuild(
    dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    force: bool,
    progress: &(dyn Fn(Progress) + Sync),
    rebuilding: &dyn Fn(&str),
) -> Result<(Manifest, Opened)> {
    let wanted = CompileOptions {
        jobs: 0,
        ..options.clone()
    };
    tidy_dir(dir);
    if let Ok(manifest) = look(dir, topo, &wanted) {
        return Ok((manifest, Opened::Existing));
    }
    let _lock = DirLock::acquire(dir)?;
    let unsound = match look(dir, topo, &wanted) {
        Ok(manifest) => return Ok((manifest, Opened::Existing)),
        Err(why) => why,
    };
    if let Some(why) = unsound {
        rebuilding(&why);
    }
    let set = compile(topo, options, progress)?;
    let written = write_dir(&set, dir, force)?;
    Ok((set.manifest, Opened::Compiled(written)))
}

/// The manifest of `dir` where it holds, intact, the set `wanted` compiles on `topo`;
/// else why not (None: there is no directory).
fn look(
    dir: &Path,
    topo: &Topology,
    wanted: &CompileOptions,
) -> std::result::Result<Manifest, Option<String>> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Err(None);
    }
    let report = check_dir_with(dir, &CheckOptions::hashes_only(Some(topo)))
        .map_err(|e| Some(e.to_string()))?;
    if let Some(first) = report.problems.first() {
        return Err(Some(first.to_string()));
    }
    match report.manifest {
        Some(m) if &m.options == wanted => Ok(m),
        _ => Err(Some("compiled with other options".into())),
    }
}

/// An algorithm set the cache holds: its manifest, and the directory that holds its
/// algorithm files alone (what `MSCCL_ALGO_DIR` would name).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedSet {
    pub algorithms: PathBuf,
    pub manifest: Manifest,
}

/// Opens or compiles what `options` compile on `topo` in the cache under `cache_dir`.
/// The cache's entries are ours by their names, so an entry that cannot be read (its
/// manifest damaged or gone) is rebuilt in place, with one warning through `log`; hidden
/// directories that killed writers left anywhere in the cache are removed. A cache that
/// cannot be written is an error before any compiling, naming the directory: nothing is
/// written anywhere else.
pub fn open_cached(
    cache_dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    log: &dyn Log,
) -> std::result::Result<CachedSet, String> {
    let dir = cache_dir.join(cache_dir_name(topo, options));
    remove_abandoned(cache_dir, None);
    let rebuilding = |why: &str| {
        log.warn(&format!(
            "cache entry {} cannot be used ({}); rebuilding it",
            dir.display(),
            echo(why)
        ))
    };
    match open_or_rebuild(&dir, topo, options, true, &|_| {}, &rebuilding) {
        Ok((manifest, _)) => Ok(CachedSet {
            algorithms: algorithm_dir(&dir),
            manifest,
        }),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// An exclusive advisory lock (`flock`) on `.NAME.lock` beside a directory, released when
/// dropped (or when its process dies).
struct DirLock {
    held: Option<std::fs::File>,
}

impl Drop for DirLock {
    /// Unlocks explicitly: a child the host forked meanwhile (a data loader, say) shares
    /// the open file and would otherwise keep the lock for as long as it lives.
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        if let Some(file) = &self.held {
            // SAFETY: flock on a descriptor this value owns; it does not touch memory.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

impl DirLock {
    /// Waits for the lock. An error where the lock file cannot be made (the directory's
    /// parent cannot be written); no lock, but no error, where the filesystem keeps none.
    fn acquire(dir: &Path) -> Result<DirLock> {
        use std::os::fd::AsRawFd;
        let (parent, name) = parent_and_name(dir)?;
        std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
        let path = parent.join(format!(".{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; it does not touch memory.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(DirLock { held: Some(file) });
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Ok(DirLock { held: None });
            }
        }
    }
}
