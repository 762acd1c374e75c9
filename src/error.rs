//! The library's error type: every variant says what was wrong and where, in one line.

use std::path::PathBuf;

/// Errors the library reports instead of panicking on user input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A topology spec string or JSON file that cannot be understood.
    #[error("topology spec: {0}")]
    Spec(String),
    /// A topology whose contents break a rule (bad link, out-of-range NPU...).
    #[error("topology: {0}")]
    Topology(String),
    /// Some NPUs cannot be reached from others.
    #[error("disconnected topology: {0}")]
    Disconnected(String),
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
    /// A compilation that cannot be done as asked, or a compiled directory that is not
    /// what its manifest says.
    #[error("compile: {0}")]
    Compile(String),
    /// A file that could not be read or written. The OS error is part of the message, not
    /// a separate cause, so it is printed once.
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }
}

/// Result with the library's error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
