//! Checking a compiled directory: the manifest, every file it lists, and everything in
//! `msccl/` the executor would load. Apart from installing: it reads and reports, never
//! writes. `files` judges what is in `msccl/`, `coverage` what the manifest says alone.

use super::{algorithm_dir, read_header, read_regular};
use crate::compile::manifest::{sha256_hex, topology_hash, Manifest, ALGORITHM_DIR, MANIFEST_FILE};
use crate::compile::{AlgorithmSet, CompiledFile, MANIFEST_VERSION};
use crate::error::{Error, FileFormat, FileProblem, Result};
use crate::msccl::Target;
use crate::topology::Topology;
use coverage::{band_problem, range_problems};
use files::{check_listed, check_unlisted, conflicts};
use std::path::{Path, PathBuf};

mod coverage;
mod files;

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
            return Err(Error::compile_in(dir, format!("{} problem(s) with its manifest or files, first: {}; `tacos compile --check` lists them", report.problems.len(),
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
                return Err(FileProblem::new(
                    path.display().to_string(),
                    "changed while it was read; try again",
                )
                .of(FileFormat::Compiled));
            }
            let xml = String::from_utf8(bytes).map_err(|_| {
                FileProblem::new(path.display().to_string(), "not UTF-8 text")
                    .of(FileFormat::Compiled)
            })?;
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
        Error::compile_in(
            dir,
            format!(
                "is not a tacos algorithm directory (no readable {MANIFEST_FILE} of ours){hint}",
            ),
        )
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
