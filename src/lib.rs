//! TACOS: topology-aware collective algorithm synthesis.
//!
//! One pipeline: a [`topology::Topology`] and a [`collective::Collective`] go into the
//! synthesizer ([`synth`]), which produces a [`schedule::Schedule`]: the algorithm as data,
//! checked by [`schedule::check`] independently of the synthesizer. The command line tool
//! (`src/bin/tacos.rs`, commands in [`cli`]) is a thin shell over this pipeline.

pub mod baselines;
pub mod bounds;
pub mod cli;
pub mod collective;
pub mod compile;
pub mod error;
pub mod ffi;
pub mod fsio;
pub mod msccl;
pub mod pipeline;
pub mod plugin;
pub mod report;
pub mod schedule;
pub mod sim;
pub mod synth;
pub mod topology;
pub mod tuner;
pub mod units;
pub mod xmltree;

pub use error::{Error, Result};

/// The tool's version, as the C API and cache keys report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
