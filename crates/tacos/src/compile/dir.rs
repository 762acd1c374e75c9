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

use super::manifest::{
    sha256_hex, topology_hash, Entry, Manifest, ALGORITHM_DIR, MANIFEST_FILE, MANIFEST_FORMAT,
};
use super::{AlgorithmSet, CompiledFile, MANIFEST_VERSION};
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use crate::msccl::rules;
use crate::msccl::{parse_program, verify, Program, ProgramTimer, Target, VerifyOptions};
use crate::topology::Topology;
use crate::units::ps_to_us;
use serde::Deserialize;
use staging::{exchange, Staged};
use std::path::{Path, PathBuf};

pub(crate) mod staging;

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
    let refuse = |why: &str| Err(Error::Compile(format!("{} {why}", dir.display())));
    match inspect(dir)? {
        Found::NotADirectory => refuse("exists and is not a directory"),
        Found::Foreign if !force => refuse(
            "exists and is not a tacos algorithm directory (no manifest.json of ours); use --force to replace it",
        ),
        found => Ok(found),
    }
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
            return Err(Error::Compile(format!(
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
                return Err(Error::Compile(format!(
                    "{} was created by something else while compiling; not replacing it",
                    dir.display()
                )))
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
    Err(Error::Compile(format!(
        "{}: other writers kept replacing the directory; try again",
        dir.display()
    )))
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

/// What `check_dir_with` looks at.
#[derive(Clone, Copy, Debug)]
pub struct CheckOptions<'a> {
    /// Parse and verify every file (and, with a topology, re-time it against the
    /// manifest's predictions); without it only hashes, names and ranges are checked
    /// (and files the manifest does not list are parsed), which is what a warm cache needs.
    pub verify_xml: bool,
    /// The topology the directory must be for.
    pub topology: Option<&'a Topology>,
    /// The loader whose rules every file must pass; by default the target the manifest
    /// records.
    pub target: Option<&'a Target>,
}

impl Default for CheckOptions<'_> {
    fn default() -> Self {
        CheckOptions {
            verify_xml: true,
            topology: None,
            target: None,
        }
    }
}

impl<'a> CheckOptions<'a> {
    /// Hashes, names and ranges, and the topology if given: no listed XML is parsed.
    pub fn hashes_only(topology: Option<&'a Topology>) -> CheckOptions<'a> {
        CheckOptions {
            verify_xml: false,
            topology,
            target: None,
        }
    }
}

/// Kinds of problems a check finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// Written by another tool version, manifest format or directory layout.
    Stale,
    Missing,
    /// The file's bytes do not match the manifest's hash.
    Edited,
    /// A file the manifest does not list.
    Extra,
    /// An entry of `msccl/` the executor cannot load as an algorithm: not a regular file
    /// (a directory, a FIFO, a symlink...), or not MSCCL algorithm XML. The executor
    /// parses every entry there, and one it cannot load fails the job.
    NotAlgorithm,
    /// A file the target's loader refuses (`loader_problems`).
    Limits,
    /// Two files that claim the same collective, rank count, placement and protocol for
    /// overlapping message sizes.
    Conflict,
    /// A manifest entry or file that does not hold what the manifest says, or a program
    /// that fails verification.
    Invalid,
    /// Ranges of one collective and placement that leave a gap, overlap, or miss the
    /// compiled range.
    Ranges,
    /// Compiled for another topology.
    Topology,
    /// A file's simulated time differs from the manifest's prediction.
    Prediction,
}

impl CheckKind {
    pub fn name(self) -> &'static str {
        match self {
            CheckKind::Stale => "stale",
            CheckKind::Missing => "missing",
            CheckKind::Edited => "edited",
            CheckKind::Extra => "extra",
            CheckKind::NotAlgorithm => "not-algorithm",
            CheckKind::Limits => "limits",
            CheckKind::Conflict => "conflict",
            CheckKind::Invalid => "invalid",
            CheckKind::Ranges => "ranges",
            CheckKind::Topology => "topology",
            CheckKind::Prediction => "prediction",
        }
    }
}

/// One problem, with the file it concerns (relative to the compiled directory).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckProblem {
    pub kind: CheckKind,
    pub file: Option<String>,
    pub message: String,
}

impl std::fmt::Display for CheckProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}: {file}: {}", self.kind.name(), self.message),
            None => write!(f, "{}: {}", self.kind.name(), self.message),
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// The manifest, when its format could be read.
    pub manifest: Option<Manifest>,
    /// The target the files were checked for (None when the manifest could not be read).
    pub target: Option<Target>,
    /// Files listed in the manifest and present.
    pub files_checked: usize,
    pub problems: Vec<CheckProblem>,
}

impl CheckReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Re-checks every file of a compiled directory against its manifest and the target it
/// records, and re-verifies the XML (`check_dir_with` and `CheckOptions::default()`).
pub fn check_dir(dir: &Path) -> Result<CheckReport> {
    check_dir_with(dir, &CheckOptions::default())
}

/// The set in `dir` as it stands, once its files match the manifest (hashes, names,
/// ranges; no XML is parsed): what `compile --feedback` starts from. A directory that
/// fails that check, or is not ours, is an error naming its first problem.
///
/// ```
/// let dir = std::env::temp_dir().join("tacos-doc-read-set-nothing");
/// assert!(tacos::compile::read_set(&dir, None).is_err());
/// ```
pub fn read_set(dir: &Path, topology: Option<&Topology>) -> Result<AlgorithmSet> {
    let report = check_dir_with(dir, &CheckOptions::hashes_only(topology))?;
    let manifest = match (report.problems.first(), report.manifest) {
        (None, Some(manifest)) => manifest,
        (first, _) => {
            return Err(Error::Compile(format!(
                "{}: {} problem(s) with its manifest or files, first: {}; `tacos compile --check` lists them",
                dir.display(),
                report.problems.len(),
                first.map_or("no manifest".to_string(), |p| p.to_string())
            )))
        }
    };
    let files = manifest
        .entries
        .iter()
        .map(|entry| {
            let path = algorithm_dir(dir).join(&entry.file);
            let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
            // Checked a moment ago; a file changed since is not taken on trust.
            if sha256_hex(&bytes) != entry.sha256 {
                return Err(Error::Compile(format!(
                    "{}: changed while it was read; try again",
                    path.display()
                )));
            }
            let xml = String::from_utf8(bytes)
                .map_err(|_| Error::Compile(format!("{}: not UTF-8 text", path.display())))?;
            Ok(CompiledFile {
                name: entry.file.clone(),
                xml,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(AlgorithmSet {
        manifest,
        files,
        rejected: Vec::new(),
    })
}

/// The problems a check collects.
#[derive(Default)]
struct Problems(Vec<CheckProblem>);

impl Problems {
    fn add(&mut self, kind: CheckKind, file: Option<&str>, message: String) {
        self.0.push(CheckProblem {
            kind,
            file: file.map(str::to_string),
            message,
        })
    }
}

/// What a file of `msccl/` claims to serve: the executor picks among files by these.
struct Claim {
    file: String,
    /// Collective, ranks, in place, protocol.
    key: (String, usize, bool, &'static str),
    range: (u64, u64),
}

impl Claim {
    fn of(file: &str, program: &Program) -> Claim {
        Claim {
            file: file.to_string(),
            key: (
                program.collective.clone(),
                program.gpus.len(),
                program.inplace,
                program.proto.name(),
            ),
            // A file without a size range serves every size.
            range: (
                program.min_bytes.unwrap_or(0),
                program.max_bytes.unwrap_or(u64::MAX),
            ),
        }
    }
}

/// Checks a compiled directory: the manifest, every file it lists, and everything in
/// `msccl/` that the executor would choke on (entries that are not regular files or not
/// algorithm XML, files the target refuses, two files claiming one range). It reads no
/// entry that is not a regular file and writes nothing. An error means it is not one of
/// ours at all (no readable manifest with our format tag); everything else is a problem
/// in the report.
pub fn check_dir_with(dir: &Path, options: &CheckOptions) -> Result<CheckReport> {
    let header = read_header(dir).ok_or_else(|| {
        let manifest = std::fs::symlink_metadata(dir.join(MANIFEST_FILE));
        let hint = match (dir.file_name(), dir.parent()) {
            _ if manifest.is_ok_and(|m| !m.is_file()) => {
                format!("; its {MANIFEST_FILE} is not a regular file and was not opened")
            }
            (Some(n), Some(p)) if n == ALGORITHM_DIR && read_header(p).is_some() => {
                format!("; give the directory that holds it, {}", p.display())
            }
            _ => String::new(),
        };
        Error::Compile(format!(
            "{} is not a tacos algorithm directory (no readable {MANIFEST_FILE} of ours){hint}",
            dir.display()
        ))
    })?;
    let mut report = CheckReport {
        manifest: None,
        target: None,
        files_checked: 0,
        problems: Vec::new(),
    };
    let mut problems = Problems::default();
    if header.format_version != MANIFEST_VERSION {
        problems.add(
            CheckKind::Stale,
            Some(MANIFEST_FILE),
            format!(
                "manifest format {} (this tool reads {MANIFEST_VERSION}; format 1 kept the manifest among the algorithm files, where the executor cannot load it); compile again",
                header.format_version
            ),
        );
        report.problems = problems.0;
        return Ok(report);
    }
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(e) => {
            problems.add(CheckKind::Invalid, Some(MANIFEST_FILE), e.to_string());
            report.problems = problems.0;
            return Ok(report);
        }
    };
    let target = options
        .target
        .cloned()
        .unwrap_or_else(|| manifest.options.target.clone());
    if header.tool_version != crate::VERSION {
        problems.add(
            CheckKind::Stale,
            Some(MANIFEST_FILE),
            format!(
                "compiled by tacos {} (this is {}); compile again",
                header.tool_version,
                crate::VERSION
            ),
        );
    }
    if let Some(topo) = options.topology {
        let (hash, npus) = (topology_hash(topo), topo.alive_npus().len());
        if manifest.topology.hash != hash || manifest.topology.npus != npus {
            problems.add(
                CheckKind::Topology,
                Some(MANIFEST_FILE),
                format!(
                    "compiled for {} ({} NPUs, hash {}), not {} ({npus} NPUs, hash {hash})",
                    manifest.topology.name,
                    manifest.topology.npus,
                    &manifest.topology.hash,
                    topo.name()
                ),
            );
        }
    }
    for item in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let item = item.map_err(|e| Error::io(dir, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name != MANIFEST_FILE && name != ALGORITHM_DIR {
            problems.add(
                CheckKind::Extra,
                Some(&name),
                format!("a compiled directory holds only {MANIFEST_FILE} and {ALGORITHM_DIR}/"),
            );
        }
    }
    let mut claims = Vec::new();
    if let Some(present) = algorithm_entries(dir, &mut problems)? {
        check_listed(
            dir,
            &manifest,
            &target,
            options,
            &present,
            &mut claims,
            &mut problems,
        )?;
        check_unlisted(
            dir,
            &manifest,
            &target,
            &present,
            &mut claims,
            &mut problems,
        )?;
        report.files_checked = manifest
            .entries
            .iter()
            .filter(|e| present.contains(&e.file))
            .count();
    }
    conflicts(&mut claims, &mut problems);
    for message in range_problems(&manifest) {
        problems.add(CheckKind::Ranges, Some(MANIFEST_FILE), message);
    }
    for entry in &manifest.entries {
        if let Some(message) = band_problem(entry) {
            let shown = in_algorithms(dir, &entry.file).1;
            problems.add(CheckKind::Invalid, Some(&shown), message);
        }
    }
    report.problems = problems.0;
    report.manifest = Some(manifest);
    report.target = Some(target);
    Ok(report)
}

/// `dir/msccl/` and its path as problems name it.
fn in_algorithms(dir: &Path, name: &str) -> (PathBuf, String) {
    (
        algorithm_dir(dir).join(name),
        format!("{ALGORITHM_DIR}/{name}"),
    )
}

/// The regular files of `dir/msccl/`, by name; every other entry (and an `msccl` that is
/// absent or not a directory) is a problem. Nothing is opened: entries are only looked
/// at (`lstat`), so a FIFO cannot block the check.
fn algorithm_entries(dir: &Path, problems: &mut Problems) -> Result<Option<Vec<String>>> {
    let algorithms = algorithm_dir(dir);
    match std::fs::symlink_metadata(&algorithms) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            problems.add(
                CheckKind::Missing,
                Some(ALGORITHM_DIR),
                "the directory of algorithm files is absent".into(),
            );
            return Ok(None);
        }
        Err(e) => return Err(Error::io(&algorithms, e)),
        Ok(m) if !m.is_dir() => {
            problems.add(
                CheckKind::NotAlgorithm,
                Some(ALGORITHM_DIR),
                "is not a directory (the algorithm files belong in a directory of their own)"
                    .into(),
            );
            return Ok(None);
        }
        Ok(_) => {}
    }
    let mut present = Vec::new();
    for item in std::fs::read_dir(&algorithms).map_err(|e| Error::io(&algorithms, e))? {
        let item = item.map_err(|e| Error::io(&algorithms, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        let kind = item.file_type().map_err(|e| Error::io(item.path(), e))?;
        if kind.is_file() {
            present.push(name);
            continue;
        }
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        problems.add(
            CheckKind::NotAlgorithm,
            Some(&in_algorithms(dir, &name).1),
            format!("{what}: the executor parses every entry of MSCCL_ALGO_DIR as an algorithm file; only the compiled files may be here"),
        );
    }
    present.sort();
    Ok(Some(present))
}

/// Checks every file the manifest lists against its entry, and with `verify_xml` its
/// program (what it declares, the target's loader rules, verification, predictions).
fn check_listed(
    dir: &Path,
    manifest: &Manifest,
    target: &Target,
    options: &CheckOptions,
    present: &[String],
    claims: &mut Vec<Claim>,
    problems: &mut Problems,
) -> Result<()> {
    let verify_options = VerifyOptions {
        target: target.clone(),
        ..VerifyOptions::default()
    };
    for entry in &manifest.entries {
        let (path, shown) = in_algorithms(dir, &entry.file);
        let file = Some(shown.as_str());
        if !plain_name(&entry.file) {
            problems.add(
                CheckKind::Invalid,
                file,
                "a file name must be a plain name inside the directory".into(),
            );
            continue;
        }
        if !present.contains(&entry.file) {
            // An entry that is there but not a regular file is already reported.
            if std::fs::symlink_metadata(&path).is_err() {
                problems.add(CheckKind::Missing, file, "listed but absent".into());
            }
            continue;
        }
        let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
        if sha256_hex(&bytes) != entry.sha256 {
            problems.add(
                CheckKind::Edited,
                file,
                "its contents differ from what was compiled (SHA-256 mismatch)".into(),
            );
            continue;
        }
        if !options.verify_xml {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let program = match parse_program(&text, &path.display().to_string()) {
            Ok(p) => p,
            Err(e) => {
                problems.add(CheckKind::NotAlgorithm, file, e.to_string());
                continue;
            }
        };
        claims.push(Claim::of(&shown, &program));
        let declared = (
            program.collective_kind(),
            program.inplace,
            program.min_bytes,
            program.max_bytes,
            program.gpus.len(),
        );
        let expected = (
            Some(entry.collective),
            entry.in_place,
            Some(entry.min_bytes),
            Some(entry.max_bytes),
            manifest.topology.npus,
        );
        if declared != expected {
            problems.add(
                CheckKind::Invalid,
                file,
                format!("the file declares (collective, in place, minBytes, maxBytes, GPUs) = {declared:?}, the manifest {expected:?}"),
            );
            continue;
        }
        let declared = (
            program.proto.name(),
            program.nchannels,
            program.nchunksperloop,
        );
        let recorded = (entry.proto.as_str(), entry.channels, entry.chunks_per_loop);
        if declared != recorded {
            problems.add(
                CheckKind::Invalid,
                file,
                format!("the file declares (proto, channels, chunks per loop) = {declared:?}, the manifest {recorded:?}"),
            );
            continue;
        }
        let refused = loader_problems(&program, target);
        if !refused.is_empty() {
            problems.add(
                CheckKind::Limits,
                file,
                format!("target {target} refuses it: {}", refused.join("; ")),
            );
            continue;
        }
        if let Some(p) = verify(&program, &verify_options).problems.first() {
            problems.add(CheckKind::Invalid, file, format!("fails verification: {p}"));
            continue;
        }
        if let Some(topo) = options.topology {
            for band in &entry.bands {
                let timed = ProgramTimer::new(topo, &program, &topo.alive_npus())
                    .and_then(|timer| {
                        let options = &manifest.options;
                        options.program_time_ps(topo, &program, &timer, band.size_bytes)
                    })
                    .map(ps_to_us);
                if timed.as_ref().ok() != Some(&band.time_us) {
                    let gives = match &timed {
                        Ok(us) => format!("timed again, it takes {us} us"),
                        Err(e) => format!("the program cannot be timed: {e}"),
                    };
                    problems.add(
                        CheckKind::Prediction,
                        file,
                        format!(
                            "at {} bytes the manifest predicts {} us; {gives}",
                            band.size_bytes, band.time_us
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Regular files of `msccl/` that the manifest does not list: the executor would load
/// them too, so each is parsed and checked for the target like a listed one.
fn check_unlisted(
    dir: &Path,
    manifest: &Manifest,
    target: &Target,
    present: &[String],
    claims: &mut Vec<Claim>,
    problems: &mut Problems,
) -> Result<()> {
    let listed = |name: &String| manifest.entries.iter().any(|e| &e.file == name);
    for name in present.iter().filter(|n| !listed(n)) {
        let (path, shown) = in_algorithms(dir, name);
        let file = Some(shown.as_str());
        let hidden = if name.starts_with('.') {
            " (hidden files are parsed too)"
        } else {
            ""
        };
        let bytes = read_regular(&path).map_err(|e| Error::io(&path, e))?;
        let text = String::from_utf8_lossy(&bytes);
        let program = match parse_program(&text, &shown) {
            Ok(p) => p,
            Err(e) => {
                problems.add(
                    CheckKind::NotAlgorithm,
                    file,
                    format!(
                        "not in the manifest, and the executor would fail to load it{hidden}: {e}"
                    ),
                );
                continue;
            }
        };
        problems.add(
            CheckKind::Extra,
            file,
            format!("not listed in the manifest; the executor would load it too{hidden}"),
        );
        let refused = loader_problems(&program, target);
        if !refused.is_empty() {
            problems.add(
                CheckKind::Limits,
                file,
                format!("target {target} refuses it: {}", refused.join("; ")),
            );
        }
        claims.push(Claim::of(&shown, &program));
    }
    Ok(())
}

/// Files that claim one (collective, ranks, placement, protocol) for overlapping sizes.
fn conflicts(claims: &mut [Claim], problems: &mut Problems) {
    claims.sort_by(|a, b| (&a.key, a.range, &a.file).cmp(&(&b.key, b.range, &b.file)));
    for (i, later) in claims.iter().enumerate() {
        let earlier = claims[..i]
            .iter()
            .find(|c| c.key == later.key && c.range.1 >= later.range.0);
        if let Some(c) = earlier {
            let (coll, ranks, in_place, proto) = &later.key;
            let placement = if *in_place {
                "in place"
            } else {
                "out of place"
            };
            problems.add(
                CheckKind::Conflict,
                Some(&later.file),
                format!(
                    "claims {coll} on {ranks} ranks, {placement}, {proto} for {}..{} bytes, which {} already claims ({}..{})",
                    later.range.0,
                    later.range.1,
                    c.file,
                    c.range.0,
                    c.range.1
                ),
            );
        }
    }
}

/// Gaps, overlaps and missing coverage among the ranges of each collective and placement.
fn range_problems(manifest: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    let sizes = manifest.options.sizes;
    let mut groups: Vec<(CollectiveKind, bool)> = manifest
        .entries
        .iter()
        .map(|e| (e.collective, e.in_place))
        .chain(nccl_ranges(manifest).map(|(k, p, _)| (k, p)))
        .collect();
    groups.sort_by_key(|&(k, p)| (k.name(), !p));
    groups.dedup();
    for (kind, in_place) in groups {
        // Bands left or returned to NCCL are covered too: by NCCL.
        let mut ranges: Vec<(u64, u64)> = manifest
            .entries
            .iter()
            .filter(|e| (e.collective, e.in_place) == (kind, in_place))
            .map(|e| (e.min_bytes, e.max_bytes))
            .chain(
                nccl_ranges(manifest)
                    .filter(|&(k, p, _)| (k, p) == (kind, in_place))
                    .map(|(_, _, range)| range),
            )
            .collect();
        ranges.sort_unstable();
        let placement = if in_place { "in place" } else { "out of place" };
        let (first, last) = (ranges[0].0, ranges[ranges.len() - 1].1);
        if (first, last) != (sizes.min_bytes, sizes.max_bytes) {
            out.push(format!(
                "{kind} {placement} covers {first}..{last} bytes, not the compiled {}..{}",
                sizes.min_bytes, sizes.max_bytes
            ));
        }
        for w in ranges.windows(2) {
            if w[1].0 != w[0].1.saturating_add(1) {
                out.push(format!(
                    "{kind} {placement}: {}..{} and {}..{} {}",
                    w[0].0,
                    w[0].1,
                    w[1].0,
                    w[1].1,
                    if w[1].0 <= w[0].1 {
                        "overlap"
                    } else {
                        "leave a gap"
                    }
                ));
            }
        }
        if let Some(r) = ranges.iter().find(|r| r.0 > r.1) {
            out.push(format!(
                "{kind} {placement}: range {}..{} runs backwards",
                r.0, r.1
            ));
        }
    }
    out
}

/// The bands the manifest leaves to NCCL, by prediction or by measurement: (collective,
/// in place, (min, max)).
fn nccl_ranges(
    manifest: &Manifest,
) -> impl Iterator<Item = (CollectiveKind, bool, (u64, u64))> + '_ {
    let left = manifest
        .left_to_nccl
        .iter()
        .map(|l| (l.collective, l.in_place, (l.min_bytes, l.max_bytes)));
    let returned = manifest
        .returned_to_nccl
        .iter()
        .map(|r| (r.collective, r.in_place, (r.min_bytes, r.max_bytes)));
    left.chain(returned)
}

/// What is wrong with an entry's predictions, read alone: the bands must start at the
/// entry's smallest size and climb inside its range, and each band's figures must agree
/// with each other as the compiler derives them from one simulated time (an edited time,
/// bandwidth, bound or speedup breaks that; re-timing them needs the topology).
fn band_problem(entry: &Entry) -> Option<String> {
    let sizes: Vec<u64> = entry.bands.iter().map(|b| b.size_bytes).collect();
    let climbs = sizes.windows(2).all(|w| w[0] < w[1]);
    let inside = sizes
        .iter()
        .all(|s| (entry.min_bytes..=entry.max_bytes).contains(s));
    if sizes.first() != Some(&entry.min_bytes) || !climbs || !inside {
        return Some(format!(
            "predictions at sizes {sizes:?}, which must start at {} and climb within {}..{}",
            entry.min_bytes, entry.min_bytes, entry.max_bytes
        ));
    }
    let agrees = |recorded: f64, derived: f64| {
        recorded.is_finite() && (recorded - derived).abs() <= 1e-9 * derived.abs().max(1e-300)
    };
    for band in &entry.bands {
        let time = band.time_us;
        let consistent = time.is_finite()
            && time > 0.0
            && band.bound_us.is_finite()
            && (0.0..=time * (1.0 + 1e-9)).contains(&band.bound_us)
            && agrees(band.algbw_gbps, band.size_bytes as f64 / (time * 1e3))
            && agrees(band.efficiency, band.bound_us / time)
            && match (band.best_baseline_us, band.speedup_vs_baseline) {
                (Some(base), Some(speedup)) => agrees(speedup, base / time),
                (None, None) => true,
                _ => false,
            };
        if !consistent {
            return Some(format!(
                "at {} bytes the predictions disagree with each other: time {} us, algbw {} GB/s, bound {} us, efficiency {}, baseline {}, speedup {}",
                band.size_bytes,
                band.time_us,
                band.algbw_gbps,
                band.bound_us,
                band.efficiency,
                band.best_baseline_us
                    .map_or("none".to_string(), |us| format!("{us} us")),
                band.speedup_vs_baseline
                    .map_or("none".to_string(), |x| format!("{x}x"))
            ));
        }
    }
    None
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
        .ok_or_else(|| Error::Compile(format!("{} names no directory", dir.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}
