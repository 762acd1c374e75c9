//! The scheduler's cache of compiled algorithm sets: where an entry lives, the lock the
//! ranks of one node take turns on, [`open_or_compile`], which `tacos compile` users
//! may call too (an offline-compiled directory and an online cache entry are the same
//! thing, made by the same code: `compile::write_dir`, checked by `compile::check_dir`),
//! and the verdict on an entry's files kept beside it, so that serving from a warm entry
//! ([`installed`]) reads only its manifest and that verdict.

use super::Log;
use crate::compile::{
    algorithm_dir, check_dir_with, compile, loader_problems, parent_and_name, read_regular,
    remove_abandoned, sha256_hex, tidy_dir, topology_hash, write_dir, CheckOptions, CompileOptions,
    Entry, Manifest, Progress, Written, MANIFEST_FORMAT, MANIFEST_VERSION,
};
use crate::error::{echo, Error, Result};
use crate::fsio::write_atomic;
use crate::msccl::{parse_program, Target};
use crate::topology::Topology;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::ffi::OsString;
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

/// An algorithm set the cache holds: its manifest, the directory that holds its
/// algorithm files alone (what `MSCCL_ALGO_DIR` would name), and the files the verdict
/// kept beside the entry refuses, with why.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedSet {
    pub algorithms: PathBuf,
    pub manifest: Manifest,
    pub refused: Vec<(String, String)>,
}

/// The cache entry for what `options` compile on `topo`.
fn entry_dir(cache_dir: &Path, topo: &Topology, options: &CompileOptions) -> PathBuf {
    cache_dir.join(cache_dir_name(topo, options))
}

/// Opens or compiles what `options` compile on `topo` in the cache under `cache_dir`, and
/// makes sure the verdict on its files is kept beside it (checking every file against the
/// target's loader rules where it is not). The cache's entries are ours by their names,
/// so an entry that cannot be read (its manifest damaged or gone) is rebuilt in place,
/// with one warning through `log`; hidden directories that killed writers left anywhere
/// in the cache are removed. A cache that cannot be written is an error before any
/// compiling, naming the directory: nothing is written anywhere else.
pub fn open_cached(
    cache_dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    log: &dyn Log,
) -> std::result::Result<CachedSet, String> {
    let dir = entry_dir(cache_dir, topo, options);
    remove_abandoned(cache_dir, None);
    let rebuilding = |why: &str| {
        log.warn(&format!(
            "cache entry {} cannot be used ({}); rebuilding it",
            dir.display(),
            echo(why)
        ))
    };
    let failed = |e: Error| format!("{}: {e}", dir.display());
    let (manifest, _) =
        open_or_rebuild(&dir, topo, options, true, &|_| {}, &rebuilding).map_err(failed)?;
    let refused = match Verdict::read(&dir, &manifest, &options.target) {
        Some(refused) => refused,
        None => {
            // The ranks of a node take turns: one checks, the others find its verdict.
            let _lock = DirLock::acquire(&dir).map_err(failed)?;
            match Verdict::read(&dir, &manifest, &options.target) {
                Some(refused) => refused,
                None => Verdict::make(&dir, &manifest, &options.target)
                    .write(&dir)
                    .map_err(failed)?,
            }
        }
    };
    Ok(CachedSet {
        algorithms: algorithm_dir(&dir),
        manifest,
        refused,
    })
}

/// Which entries of a cache were installed at one moment: those whose verdict, the last
/// thing installing a set writes, was there. A scheduler takes it when it starts (the
/// job's first communicator, which its ranks create together), so that a set installed
/// while the job runs is never served in it, however its ranks' first calls are spread.
#[derive(Clone, Debug, Default)]
pub struct CacheState {
    verdicts: HashSet<OsString>,
}

impl CacheState {
    /// The cache under `cache_dir` as it is now (empty where it cannot be read).
    pub fn read(cache_dir: &Path) -> CacheState {
        let verdicts = std::fs::read_dir(cache_dir)
            .map(|listing| {
                listing
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .filter(|n| n.as_encoded_bytes().ends_with(b".checked"))
                    .collect()
            })
            .unwrap_or_default();
        CacheState { verdicts }
    }

    /// Whether entry `dir` had its verdict.
    fn had(&self, dir: &Path) -> bool {
        Verdict::path(dir)
            .and_then(|p| p.file_name().map(|n| self.verdicts.contains(n)))
            .unwrap_or(false)
    }
}

/// The set `options` compile on `topo` where the cache holds it installed, with its
/// verdict, and held it already in state `found`; else why not. Cheap enough for a
/// collective call: it reads the manifest and the verdict and looks at each listed
/// file's directory entry, but neither hashes nor parses any algorithm file (each is
/// hashed when it is first served), and it never writes: what a job serves depends only
/// on the cache as the job found it.
pub fn installed(
    cache_dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    found: &CacheState,
) -> std::result::Result<CachedSet, String> {
    let dir = entry_dir(cache_dir, topo, options);
    if let Err(e) = std::fs::symlink_metadata(&dir) {
        return Err(match e.kind() {
            std::io::ErrorKind::NotFound => format!("there is no {}", dir.display()),
            _ => format!("{}: {e}", dir.display()),
        });
    }
    if !found.had(&dir) {
        return Err(format!(
            "{} was not installed when this process's scheduler started",
            dir.display()
        ));
    }
    let manifest = Manifest::read(&dir).map_err(|e| e.to_string())?;
    let wanted = CompileOptions {
        jobs: 0,
        ..options.clone()
    };
    if (
        manifest.format.as_str(),
        manifest.format_version,
        &*manifest.tool_version,
    ) != (MANIFEST_FORMAT, MANIFEST_VERSION, crate::VERSION)
    {
        return Err(format!("{} was written by another version", dir.display()));
    }
    if manifest.topology.hash != topology_hash(topo) || manifest.options != wanted {
        return Err(format!(
            "{} is for another topology or other options",
            dir.display()
        ));
    }
    let algorithms = algorithm_dir(&dir);
    for e in &manifest.entries {
        let path = algorithms.join(&e.file);
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        if e.file.contains('/') || !regular {
            return Err(format!("{} is missing", path.display()));
        }
    }
    let refused = Verdict::read(&dir, &manifest, &options.target).ok_or_else(|| {
        format!(
            "{} has no verdict on its files for this manifest",
            dir.display()
        )
    })?;
    Ok(CachedSet {
        algorithms,
        manifest,
        refused,
    })
}

/// What checking a set's files against a loader's rules found, kept beside its cache
/// entry (`.NAME.checked`) when the set is installed, so that serving needs no parsing:
/// keyed by the SHA-256 of the manifest (which holds every file's) and the target, so it
/// speaks only for the very bytes and loader it was made for.
#[derive(Serialize, Deserialize, PartialEq)]
struct Verdict {
    manifest_sha256: String,
    target: String,
    /// (file, why) for every file that may not be served.
    refused: Vec<(String, String)>,
}

impl Verdict {
    /// Where the verdict on entry `dir` is kept.
    fn path(dir: &Path) -> Option<PathBuf> {
        let (parent, name) = parent_and_name(dir).ok()?;
        Some(parent.join(format!(".{name}.checked")))
    }

    fn key(manifest: &Manifest, target: &Target) -> (String, String) {
        (
            sha256_hex(manifest.to_json().as_bytes()),
            format!("{target:?}"),
        )
    }

    /// The refusals kept beside `dir`, where there is a verdict for this manifest and target.
    fn read(dir: &Path, manifest: &Manifest, target: &Target) -> Option<Vec<(String, String)>> {
        let bytes = read_regular(&Verdict::path(dir)?).ok()?;
        let verdict: Verdict = serde_json::from_slice(&bytes).ok()?;
        let (sha, target) = Verdict::key(manifest, target);
        (verdict.manifest_sha256 == sha && verdict.target == target).then_some(verdict.refused)
    }

    /// Checks every file of entry `dir` (side by side).
    fn make(dir: &Path, manifest: &Manifest, target: &Target) -> Verdict {
        let algorithms = algorithm_dir(dir);
        let refused = manifest
            .entries
            .par_iter()
            .filter_map(|e| {
                refusal(&algorithms, e, manifest.topology.npus, target)
                    .map(|why| (e.file.clone(), why))
            })
            .collect();
        let (manifest_sha256, target) = Verdict::key(manifest, target);
        Verdict {
            manifest_sha256,
            target,
            refused,
        }
    }

    /// Keeps the verdict beside `dir`; its refusals.
    fn write(self, dir: &Path) -> Result<Vec<(String, String)>> {
        let path = Verdict::path(dir)
            .ok_or_else(|| Error::Compile(format!("{} names no directory", dir.display())))?;
        let json = serde_json::to_vec(&self).map_err(|e| Error::Compile(e.to_string()))?;
        write_atomic(&path, &json)?;
        Ok(self.refused)
    }
}

/// Why the file of `entry` in `algorithms` may not be served, if so: it must be the bytes
/// the manifest names, a program for `ranks` GPUs with the manifest's chunk count, that
/// passes `target`'s loader rules.
pub(super) fn refusal(
    algorithms: &Path,
    entry: &Entry,
    ranks: usize,
    target: &Target,
) -> Option<String> {
    let bytes = match intact(algorithms, entry) {
        Ok(bytes) => bytes,
        Err(why) => return Some(why),
    };
    match parse_program(&String::from_utf8_lossy(&bytes), &entry.file) {
        Err(e) => Some(e.to_string()),
        Ok(p) if p.gpus.len() != ranks || p.nchunksperloop != entry.chunks_per_loop => {
            Some(format!(
                "it has {} GPUs and {} chunks per loop, the manifest says {ranks} and {}",
                p.gpus.len(),
                p.nchunksperloop,
                entry.chunks_per_loop
            ))
        }
        Ok(p) => loader_problems(&p, target).into_iter().next(),
    }
}

/// The bytes of `entry`'s file in `algorithms`, where they are those its manifest names;
/// else why not.
pub(super) fn intact(algorithms: &Path, entry: &Entry) -> std::result::Result<Vec<u8>, String> {
    match read_regular(&algorithms.join(&entry.file)) {
        Err(e) => Err(e.to_string()),
        Ok(bytes) if sha256_hex(&bytes) != entry.sha256 => {
            Err("its bytes are not those the manifest names (SHA-256 mismatch)".into())
        }
        Ok(bytes) => Ok(bytes),
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
