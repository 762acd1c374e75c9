//! The library's error type: every variant says what was wrong and where, in one line.

use std::fmt;
use std::path::PathBuf;

/// Errors the library reports instead of panicking on user input.
///
/// `Unknown`, `Invalid`, `Limit`, `TargetLimit` and `Disconnected` carry their figures as
/// fields, for programs that react to them; the variants holding a message are for
/// failures whose reason is a sentence (a schedule that breaks a rule, a file that says
/// something else).
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
    /// A topology spec string or JSON file that cannot be understood.
    #[error("topology spec: {0}")]
    Spec(String),
    /// A topology whose contents break a rule (bad link, out-of-range NPU...).
    #[error("topology: {0}")]
    Topology(String),
    /// Some NPUs cannot be reached from others: `from` cannot reach `to` (a collective's
    /// root and its NPUs, the NPUs of a topology, a route a simulator needs).
    #[error("disconnected topology: {from} cannot reach {to}")]
    Disconnected { from: Npus, to: Npus },
    /// A collective that cannot be built as asked (root, size, chunks, NPU subset).
    #[error("collective: {0}")]
    Collective(String),
    /// A schedule that is not a correct algorithm on its topology.
    #[error("schedule: {0}")]
    Schedule(String),
    /// A baseline algorithm that does not apply to this collective or topology.
    #[error("baseline: {0}")]
    Baseline(String),
    /// The synthesizer could not complete the collective.
    #[error("synthesis: {0}")]
    Synthesis(String),
    /// An MSCCL program that cannot be built, read or run as asked.
    #[error("msccl: {0}")]
    Msccl(String),
    /// An MSCCL++ execution plan that cannot be built, read or verified as asked.
    #[error("mscclpp plan: {0}")]
    Plan(String),
    /// A cost-model profile or a measurement file that cannot be used as given.
    #[error("cost model: {0}")]
    Cost(String),
    /// A compilation that cannot be done as asked, or a compiled directory that is not
    /// what its manifest says.
    #[error("compile: {0}")]
    Compile(String),
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
    /// as `error.kind`): `unknown`, `invalid`, `limit`, `target_limit`, `spec`,
    /// `topology`, `disconnected`, `collective`, `schedule`, `baseline`, `synthesis`,
    /// `msccl`, `plan`, `cost`, `compile`, `io`.
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
            Error::Spec(_) => "spec",
            Error::Topology(_) => "topology",
            Error::Disconnected { .. } => "disconnected",
            Error::Collective(_) => "collective",
            Error::Schedule(_) => "schedule",
            Error::Baseline(_) => "baseline",
            Error::Synthesis(_) => "synthesis",
            Error::Msccl(_) => "msccl",
            Error::Plan(_) => "plan",
            Error::Cost(_) => "cost",
            Error::Compile(_) => "compile",
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
