//! The library's error type: every variant carries what was wrong and where as fields, and
//! says it in one line.

use std::fmt;
use std::path::PathBuf;

/// Errors the library reports instead of panicking on user input.
///
/// Each variant carries, as fields for programs that react to them, what it concerns: the
/// input and what it allows (`Unknown`, `Invalid`), the figure and the limit (`Limit`,
/// `TargetLimit`), the file, line, column and field (`File`), the element at fault (the
/// transfer of a `Schedule` or `Msccl`, the rank, threadblock and op of a `Plan`, the NPU
/// of a `Collective`, the algorithm of a `Baseline`, the path of a `Compile`); beside them
/// `problem` says the rest in a sentence. `Topology` and `Synthesis` are a sentence only.
/// What the library was doing when an error happened wraps it as the cause ([`Error::Context`]).
///
/// ```
/// use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
/// use tacos::topology::{parse_spec, SpecDefaults};
/// use tacos::Error;
///
/// let ring = parse_spec("ring:4", &SpecDefaults::default())?;
/// let spec = CollectiveSpec {
///     kind: CollectiveKind::Broadcast,
///     root: Some(9),
///     npus: vec![0, 1, 2, 3],
///     chunks_per_npu: 1,
///     size_bytes: 1 << 20,
/// };
/// match Collective::new(&ring, spec) {
///     Err(Error::Collective { npu: Some(9), .. }) => {} // the root the ring lacks
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name that is not one of those the library knows: a target, protocol,
    /// collective, baseline, preset, topology builder or spec option, GPU architecture.
    #[error("unknown {what} '{}' (known: {})", echo(given), known.join(", "))]
    Unknown {
        /// What kind of name it is ("target", "protocol", "collective"...).
        what: &'static str,
        /// The name as given.
        given: String,
        /// Every name that would have been accepted.
        known: Vec<&'static str>,
    },
    /// A value out of its range or of the wrong form.
    #[error("{input}: '{}' must be {allowed}", echo(value))]
    Invalid {
        /// Where the value came from: a flag (`--max-steps`), an environment variable,
        /// a field, or an option within a topology spec.
        input: String,
        /// The value as given.
        value: String,
        /// What the input takes.
        allowed: String,
    },
    /// A figure past a limit: of the MSCCL target, of the simulator, of the topology
    /// builders.
    #[error("{context}: {value} {what}, more than the {limit} allowed")]
    Limit {
        /// What is counted ("channels", "messages", "NPUs"...).
        what: &'static str,
        /// How many there are (or would be).
        value: u64,
        /// The most allowed.
        limit: u64,
        /// What was being done, and for what, when the count was reached.
        context: String,
    },
    /// A program past a limit of the MSCCL loader it is for: `violation` says which limit,
    /// the figure, the limit and the first element (GPU, threadblock, step) past it.
    #[error("{context}: {violation}")]
    TargetLimit {
        /// The target, as messages name it: its profile, and its limits where they
        /// differ from the profile's.
        target: String,
        violation: Box<LimitBreach>,
        /// What was being done (for the lowering: the arrangements it tried, and what
        /// would help).
        context: String,
    },
    /// A file whose contents cannot be used: `problem` says where (file, line, column,
    /// field) and what is wrong; `format` says what the file was read as, and so the
    /// error's kind (a topology file is `spec`, an MSCCL program `msccl`...).
    #[error("{}: {problem}", .format.prefix())]
    File {
        format: FileFormat,
        problem: Box<FileProblem>,
    },
    /// A topology whose contents break a rule (bad link, out-of-range NPU...).
    #[error("topology: {0}")]
    Topology(String),
    /// Some NPUs cannot be reached from others: `from` cannot reach `to` (a collective's
    /// root and its NPUs, the NPUs of a topology, a route a simulator needs).
    #[error("disconnected topology: {from} cannot reach {to}")]
    Disconnected { from: Npus, to: Npus },
    /// A collective that cannot be built as asked (root, NPU subset): `npu` is the NPU
    /// or root at fault, where one is.
    #[error("collective: {problem}")]
    Collective { npu: Option<usize>, problem: String },
    /// A schedule that is not a correct algorithm on its topology, or a workload the
    /// simulator cannot run: `transfer` is the first transfer (or message) at fault, where
    /// one is.
    #[error("schedule: {problem}")]
    Schedule {
        transfer: Option<usize>,
        problem: String,
    },
    /// A baseline algorithm (one of the library's, or NCCL's own) that does not apply to
    /// this collective or topology: `baseline` names it.
    #[error("baseline: {problem}")]
    Baseline { baseline: String, problem: String },
    /// The synthesizer could not complete the collective.
    #[error("synthesis: {0}")]
    Synthesis(String),
    /// An MSCCL program that cannot be built or run as asked: `transfer` is the
    /// schedule's transfer that the lowering could not place, where one is at fault.
    #[error("msccl: {problem}")]
    Msccl {
        transfer: Option<usize>,
        problem: String,
    },
    /// An MSCCL++ execution plan that cannot be built or verified as asked: `rank`,
    /// `threadblock` and `op` (the index in the threadblock's list) place the problem,
    /// where it is at one.
    #[error("mscclpp plan: {problem}")]
    Plan {
        rank: Option<usize>,
        threadblock: Option<usize>,
        op: Option<usize>,
        problem: String,
    },
    /// A compilation that cannot be done as asked, or a compiled directory that is not
    /// what its manifest says: `path` is the directory or file concerned, where one is.
    #[error("compile: {}{problem}", path_prefix(path.as_deref()))]
    Compile {
        path: Option<PathBuf>,
        problem: String,
    },
    /// What the library was doing when the error under it happened (the search's K and
    /// seeds): the error keeps its own kind and fields as the cause, printed after the
    /// context by `{:#}`-style chains and by [`Error::message`].
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
    /// A file that could not be read or written. The OS error is part of the message, not
    /// a separate cause, so it is printed once.
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
}

impl Error {
    /// The kind of error, a stable name for programs to branch on (what `--json` reports
    /// as `error.kind`, and the C API as a `TACOS_ERR_*` code): `unknown`, `invalid`,
    /// `limit`, `target_limit`, `spec`, `topology`, `disconnected`, `collective`,
    /// `schedule`, `baseline`, `synthesis`, `msccl`, `plan`, `cost`, `compile`, `io`. A
    /// file's problem ([`Error::File`]) has the kind of what the file was read as.
    ///
    /// ```
    /// use tacos::topology::{parse_spec, SpecDefaults};
    /// let e = parse_spec("ring:1x", &SpecDefaults::default()).unwrap_err();
    /// assert_eq!(e.kind(), "invalid");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Unknown { .. } => "unknown",
            Error::Invalid { .. } => "invalid",
            Error::Limit { .. } => "limit",
            Error::TargetLimit { .. } => "target_limit",
            Error::File { format, .. } => format.kind(),
            Error::Topology(_) => "topology",
            Error::Disconnected { .. } => "disconnected",
            Error::Collective { .. } => "collective",
            Error::Schedule { .. } => "schedule",
            Error::Baseline { .. } => "baseline",
            Error::Synthesis(_) => "synthesis",
            Error::Msccl { .. } => "msccl",
            Error::Plan { .. } => "plan",
            Error::Compile { .. } => "compile",
            Error::Context { source, .. } => source.kind(),
            Error::Io { .. } => "io",
        }
    }

    /// The whole message: the error and each cause under it, outermost first, joined by
    /// ": " (what a caller that keeps one string, the C API, reports).
    ///
    /// ```
    /// use tacos::Error;
    /// let cause = Error::Synthesis("NPU 3 is unreachable".into());
    /// let e = Error::Context { context: "K=4 with 8 seeds gives no program".into(), source: Box::new(cause) };
    /// assert_eq!(e.kind(), "synthesis");
    /// assert_eq!(e.message(), "K=4 with 8 seeds gives no program: synthesis: NPU 3 is unreachable");
    /// ```
    pub fn message(&self) -> String {
        let mut out = self.to_string();
        let mut under = std::error::Error::source(self);
        while let Some(cause) = under {
            out.push_str(": ");
            out.push_str(&cause.to_string());
            under = cause.source();
        }
        out
    }

    /// Whether the error is a figure past a limit (`Limit` or `TargetLimit`): what a
    /// smaller problem (fewer chunks, fewer NPUs) may cure, unlike a wrong input.
    pub fn is_limit(&self) -> bool {
        match self {
            Error::Context { source, .. } => source.is_limit(),
            other => matches!(other, Error::Limit { .. } | Error::TargetLimit { .. }),
        }
    }

    /// This error as the cause under `context`: what the library was doing when it happened.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// A schedule's problem that no one transfer is at fault for.
    pub fn schedule(problem: impl Into<String>) -> Error {
        Error::Schedule {
            transfer: None,
            problem: problem.into(),
        }
    }

    /// A problem of transfer (or message) `transfer` of a schedule.
    pub fn schedule_at(transfer: usize, problem: impl Into<String>) -> Error {
        Error::Schedule {
            transfer: Some(transfer),
            problem: problem.into(),
        }
    }

    /// An MSCCL program's problem that no one transfer is at fault for.
    pub fn msccl(problem: impl Into<String>) -> Error {
        Error::Msccl {
            transfer: None,
            problem: problem.into(),
        }
    }

    /// An MSCCL program's problem at transfer `transfer` of the schedule being lowered.
    pub fn msccl_at(transfer: usize, problem: impl Into<String>) -> Error {
        Error::Msccl {
            transfer: Some(transfer),
            problem: problem.into(),
        }
    }

    /// A compilation's problem that concerns no one file.
    pub fn compile(problem: impl Into<String>) -> Error {
        Error::Compile {
            path: None,
            problem: problem.into(),
        }
    }

    /// A compilation's problem with the directory or file at `path`.
    pub fn compile_in(path: impl Into<PathBuf>, problem: impl Into<String>) -> Error {
        Error::Compile {
            path: Some(path.into()),
            problem: problem.into(),
        }
    }

    /// A plan's problem that no one operation is at fault for.
    pub fn plan(problem: impl Into<String>) -> Error {
        Error::Plan {
            rank: None,
            threadblock: None,
            op: None,
            problem: problem.into(),
        }
    }

    /// Baseline `baseline` does not apply, because of `problem`.
    pub fn baseline(baseline: impl Into<String>, problem: impl Into<String>) -> Error {
        Error::Baseline {
            baseline: baseline.into(),
            problem: problem.into(),
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }
}

/// A figure past a limit of the loader a program is for, as [`Error::TargetLimit`] carries
/// it: which limit, where in the program, the figure and the limit (the lowering's
/// `msccl::limits::Violation`, in terms every layer can read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitBreach {
    /// The limit's name in reports (`steps_per_threadblock`, `threadblocks_per_gpu`, ...).
    pub limit_name: &'static str,
    /// The GPU, threadblock and step first past it; none where the whole program is.
    pub gpu: Option<usize>,
    pub tb: Option<usize>,
    pub step: Option<usize>,
    /// The figure past the limit.
    pub value: u64,
    /// The most the loader takes.
    pub limit: u64,
    /// The figures in a sentence, with the element they concern.
    pub message: String,
}

impl fmt::Display for LimitBreach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a file was read as, for [`Error::File`]: it gives the error its kind and the
/// message its first words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileFormat {
    /// A topology file (JSON) or an NCCL topology XML file (kind `spec`).
    Topology,
    /// An MSCCL algorithm XML file (kind `msccl`).
    Msccl,
    /// A schedule file or a transfer stream (kind `schedule`).
    Schedule,
    /// A cost-model profile or a measurement table (kind `cost`).
    Cost,
    /// A compiled directory's manifest, records or measurements (kind `compile`).
    Compiled,
    /// An MSCCL++ execution plan (kind `plan`).
    Plan,
}

impl FileFormat {
    /// The error kind of a problem in such a file ([`Error::kind`]).
    pub fn kind(self) -> &'static str {
        match self {
            FileFormat::Topology => "spec",
            FileFormat::Msccl => "msccl",
            FileFormat::Schedule => "schedule",
            FileFormat::Cost => "cost",
            FileFormat::Compiled => "compile",
            FileFormat::Plan => "plan",
        }
    }

    /// The words a message about such a file starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            FileFormat::Topology => "topology spec",
            FileFormat::Msccl => "msccl",
            FileFormat::Schedule => "schedule",
            FileFormat::Cost => "cost model",
            FileFormat::Compiled => "compile",
            FileFormat::Plan => "mscclpp plan",
        }
    }
}

/// Where in a file something is wrong, and what: what the readers of JSON, XML and text
/// tables report, and what [`Error::File`] carries. Printed `file:line:column: field: problem`,
/// each part only where known.
///
/// ```
/// use tacos::error::{Error, FileFormat, FileProblem};
/// let p = FileProblem::new("net.json", "must be at least 1").at(3, 9).field("links[0].bw");
/// assert_eq!(p.to_string(), "net.json:3:9: links[0].bw: must be at least 1");
/// let e = p.of(FileFormat::Topology);
/// assert_eq!(e.kind(), "spec");
/// assert!(matches!(e, Error::File { ref problem, .. } if problem.line == Some(3)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProblem {
    /// The file as messages name it: a path, or where its text came from.
    pub file: String,
    /// The 1-based line, where the problem is at one.
    pub line: Option<usize>,
    /// The 1-based column on that line, where known.
    pub column: Option<usize>,
    /// The field or part of the file concerned (`links[3].src`, `header`), where named.
    pub field: Option<String>,
    /// What is wrong, and what would be allowed.
    pub problem: String,
}

impl FileProblem {
    /// A problem with file `file` as a whole.
    pub fn new(file: impl Into<String>, problem: impl Into<String>) -> FileProblem {
        FileProblem {
            file: file.into(),
            line: None,
            column: None,
            field: None,
            problem: problem.into(),
        }
    }

    /// The problem placed at `line` and `column`.
    pub fn at(self, line: usize, column: usize) -> FileProblem {
        FileProblem {
            line: Some(line),
            column: Some(column),
            ..self
        }
    }

    /// The problem placed on `line`.
    pub fn line(self, line: usize) -> FileProblem {
        FileProblem {
            line: Some(line),
            ..self
        }
    }

    /// The problem placed in `field`.
    pub fn field(self, field: impl Into<String>) -> FileProblem {
        FileProblem {
            field: Some(field.into()),
            ..self
        }
    }

    /// A tag of the file (`format`, a version) that is not the one this reader takes:
    /// `field` holds `found` where `expected` belongs.
    pub fn wrong_tag(
        file: impl Into<String>,
        field: &str,
        found: &str,
        expected: &str,
    ) -> FileProblem {
        FileProblem::new(file, format!("is '{}', expected '{expected}'", echo(found))).field(field)
    }

    /// The problem as the library's error, for a file read as `format`.
    pub fn of(self, format: FileFormat) -> Error {
        Error::File {
            format,
            problem: Box::new(self),
        }
    }
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.problem)
    }
}

/// One side of a `Disconnected`: as the message names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Npus {
    /// One NPU.
    Npu(usize),
    /// The root of a collective.
    Root(usize),
    /// A set of NPUs (also of one), listed as runs ([`format_ranges`]).
    Set(Vec<usize>),
    /// A set of NPUs cut off together with a switch they are linked to, where the fabric
    /// is broken; `switch` as `Topology::vertex_label` names it.
    OnSwitch { npus: Vec<usize>, switch: String },
}

impl fmt::Display for Npus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Npus::Npu(n) => write!(f, "NPU {n}"),
            Npus::Root(r) => write!(f, "root {r}"),
            Npus::Set(set) => write!(f, "NPUs {}", format_ranges(set)),
            Npus::OnSwitch { npus, switch } => {
                write!(f, "NPUs {} (on {switch})", format_ranges(npus))
            }
        }
    }
}

/// `path: ` where there is a path, for messages that lead with it.
fn path_prefix(path: Option<&std::path::Path>) -> String {
    path.map_or(String::new(), |p| format!("{}: ", p.display()))
}

/// Most characters of an untrusted input that a message repeats.
pub const ECHO_MAX_CHARS: usize = 200;

/// An untrusted input as a message may repeat it: control characters (terminal escape
/// sequences, newlines) escaped, and at most `ECHO_MAX_CHARS` characters, with the count
/// of those left out, so a hostile or huge value cannot take over the reader's terminal
/// or log.
pub fn echo(input: &str) -> String {
    let mut out = String::new();
    let mut chars = input.chars();
    for c in chars.by_ref().take(ECHO_MAX_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    let rest = chars.count();
    if rest > 0 {
        out.push_str(&format!("... ({rest} more characters)"));
    }
    out
}

/// Result with the library's error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats ids compactly as runs: `0-3,7,9-10` (for NPU lists: `topology::format_npus`).
pub fn format_ranges(ids: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_escapes_control_characters_and_truncates() {
        assert_eq!(echo("ring:8"), "ring:8");
        assert_eq!(echo("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        let long = "x".repeat(ECHO_MAX_CHARS + 5);
        let shown = echo(&long);
        assert!(shown.starts_with(&"x".repeat(ECHO_MAX_CHARS)));
        assert!(shown.ends_with("... (5 more characters)"), "{shown}");
    }

    #[test]
    fn invalid_and_unknown_messages_echo_safely() {
        let e = Error::Invalid {
            input: "--size".into(),
            value: "\u{1b}]0;owned\u{7}".into(),
            allowed: "a size".into(),
        };
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        let e = Error::Unknown {
            what: "collective",
            given: "y".repeat(1000),
            known: vec!["allgather"],
        };
        assert!(e.to_string().len() < 300, "{e}");
    }
}
