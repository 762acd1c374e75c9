//! Installing a compiled set: built whole under a hidden name beside the target, then
//! renamed into place, so a reader never sees part of one. Apart from the check, which
//! writes nothing; a writer asks the check only whether an identical set is already there.

use super::check::{check_dir_with, CheckOptions};
use super::staging::{self, exchange, Staged};
use super::{parent_and_name, plain_name, read_header, read_regular};
use crate::compile::manifest::{ALGORITHM_DIR, MANIFEST_FILE};
use crate::compile::AlgorithmSet;
use crate::error::{Error, Result};
use std::path::Path;

/// What `write_dir` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// There was no directory (or an empty one).
    Created,
    /// A directory of ours with other contents, or with `force` any directory, was replaced.
    Replaced,
    /// The same set was already there, complete (another writer won a race, or a rerun);
    /// it was kept untouched.
    AlreadyThere,
}

/// What is at a target directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// An empty directory: `rename` replaces it as it stands.
    Empty,
    Ours,
    Foreign,
    NotADirectory,
}

fn inspect(dir: &Path) -> Result<Found> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(Error::io(dir, e)),
        Ok(m) if !m.is_dir() => return Ok(Found::NotADirectory),
        Ok(_) => {}
    }
    let mut listing = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    if listing.next().is_none() {
        return Ok(Found::Empty);
    }
    Ok(if read_header(dir).is_some() {
        Found::Ours
    } else {
        Found::Foreign
    })
}

/// Fails as `write_dir` would on what is at `dir`: a file, or a directory not of ours
/// without `force`. Lets a command refuse before a long compilation.
pub fn check_target(dir: &Path, force: bool) -> Result<Found> {
    let refuse = |why: &str| Err(Error::compile_in(dir, why));
    match inspect(dir)? {
        Found::NotADirectory => refuse("exists and is not a directory"),
        Found::Foreign if !force => refuse(
            "exists and is not a tacos algorithm directory (no manifest.json of ours); use --force to replace it",
        ),
        found => Ok(found),
    }
}

/// Whether `dir` holds exactly `set`: the same manifest and every file intact.
fn holds(dir: &Path, set: &AlgorithmSet) -> bool {
    let same_manifest = read_regular(&dir.join(MANIFEST_FILE))
        .is_ok_and(|m| m == set.manifest.to_json().as_bytes());
    same_manifest && check_dir_with(dir, &CheckOptions::hashes_only(None)).is_ok_and(|r| r.is_ok())
}

/// Threads writing a directory's files.
const WRITERS: usize = 4;

/// Writes `set` as directory `dir` (its parent is created if needed), atomically. An
/// existing directory of ours is replaced unless it already holds the same set; any other
/// existing directory is refused unless `force`; a file in the way is always refused.
pub fn write_dir(set: &AlgorithmSet, dir: &Path, force: bool) -> Result<Written> {
    for (i, file) in set.files.iter().enumerate() {
        let taken = set.files[..i].iter().any(|f| f.name == file.name);
        if !plain_name(&file.name) || file.name == MANIFEST_FILE || taken {
            return Err(Error::compile(format!(
                "cannot write '{}': a file name must be a plain name, not manifest.json, used once",
                file.name
            )));
        }
    }
    tidy_dir(dir);
    if let Found::Ours = check_target(dir, force)? {
        if holds(dir, set) {
            return Ok(Written::AlreadyThere);
        }
    }
    let (parent, name) = parent_and_name(dir)?;
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let staged = Staged::create(&parent, &name, "tmp")?;
    let algorithms = Path::new(ALGORITHM_DIR);
    let inside = staged.path.join(algorithms);
    std::fs::create_dir(&inside).map_err(|e| Error::io(&inside, e))?;
    // Files are written (and flushed to disk) a few at a time: flushing dominates.
    let writers = WRITERS.min(set.files.len()).max(1);
    std::thread::scope(|s| {
        let staged = &staged;
        let workers: Vec<_> = (0..writers)
            .map(|w| {
                s.spawn(move || {
                    set.files
                        .iter()
                        .skip(w)
                        .step_by(writers)
                        .try_for_each(|file| {
                            staged.write(&algorithms.join(&file.name), file.xml.as_bytes())
                        })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    sync_dir(&inside);
    // The manifest last: a directory with a manifest has every file.
    staged.write(Path::new(MANIFEST_FILE), set.manifest.to_json().as_bytes())?;
    sync_dir(&staged.path);
    install(set, staged, dir, &parent, &name, force)
}

/// Renames the staged directory into place. What is in the way, where it may be replaced,
/// is swapped with it in one step where the filesystem can (`dir` is never missing), else
/// moved aside first (a kill between the two renames leaves `dir` missing until
/// [`tidy_dir`] restores it). A bounded number of tries against racing writers.
fn install(
    set: &AlgorithmSet,
    staged: Staged,
    dir: &Path,
    parent: &Path,
    name: &str,
    force: bool,
) -> Result<Written> {
    let mut moved_aside: Vec<Staged> = Vec::new();
    for _ in 0..4 {
        let error = match std::fs::rename(&staged.path, dir) {
            Ok(()) => {
                sync_dir(parent);
                let replaced = !moved_aside.is_empty();
                // Dropping what was moved aside removes it.
                drop(moved_aside);
                return Ok(if replaced {
                    Written::Replaced
                } else {
                    Written::Created
                });
            }
            Err(e) => e,
        };
        let in_the_way = matches!(
            error.raw_os_error(),
            Some(libc::ENOTEMPTY) | Some(libc::EEXIST)
        );
        if !in_the_way {
            return Err(Error::io(dir, error));
        }
        match inspect(dir)? {
            Found::Ours if holds(dir, set) => return Ok(Written::AlreadyThere),
            // Emptied or removed by another writer meanwhile: try again.
            Found::Missing | Found::Empty => continue,
            Found::Ours => {}
            Found::Foreign if force => {}
            Found::Foreign | Found::NotADirectory => {
                return Err(Error::compile_in(
                    dir,
                    "was created by something else while compiling; not replacing it",
                ))
            }
        }
        match exchange(&staged.path, dir) {
            Ok(()) => {
                sync_dir(parent);
                // The staged name now holds the old set: dropping it removes that.
                drop(staged);
                return Ok(Written::Replaced);
            }
            // Removed by another writer meanwhile: try again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {}
            Err(e) => return Err(Error::io(dir, e)),
        }
        let aside = Staged::reserve(parent, name, "old");
        match std::fs::rename(dir, &aside.path) {
            Ok(()) => moved_aside.push(aside),
            // Another writer moved it first; try again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(dir, e)),
        }
    }
    Err(Error::compile_in(
        dir,
        "other writers kept replacing the directory; try again",
    ))
}

/// Repairs what killed writers left at `dir`: where `dir` is missing and an abandoned
/// complete set of it is hidden beside it, that set is put back; then every abandoned
/// hidden directory of `dir` is removed (see `staging`). Returns whether `dir` was put
/// back. `write_dir` and the plugin cache call it before they look at `dir`.
pub(crate) fn tidy_dir(dir: &Path) -> bool {
    staging::tidy(dir, |candidate| read_header(candidate).is_some())
}

/// Flushes a directory's entries to disk where the filesystem allows it.
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
