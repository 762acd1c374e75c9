//! TACOS: topology-aware collective algorithm synthesis.
//!
//! One pipeline: a [`topology::Topology`] and a [`collective::Collective`] go into the
//! synthesizer ([`synth`]), which produces a [`schedule::Schedule`]: the algorithm as data,
//! checked by [`schedule::check`] independently of the synthesizer, then lowered to MSCCL
//! XML for a loader ([`msccl`]) and verified; [`pipeline`] is the one path from a request to
//! a verified program. [`compile`] builds per-cluster algorithm sets, [`plugin`] serves them
//! (and NCCL tuning decisions) to the MSCCL scheduler and NCCL tuner entry points in [`ffi`].
//! The library holds no command-line code: the `tacos` tool (the `tacos-cli` package at the
//! workspace's root, with its `--json` reports and pictures) is a thin shell over this public
//! API.
//!
//! Unsafe code lives only where the C ABI ([`ffi`]) or a system call (`fsio`, `budget`,
//! `plugin`, `compile`'s staging, `hugepages`, `prefetch`) needs it. Every unsafe
//! operation sits in its own `unsafe {}` block, even inside an `unsafe fn`, under a
//! `// SAFETY:` comment that says why it holds; every `unsafe fn` says in `# Safety` what its
//! caller must guarantee. Two lints, denied for every target of the workspace
//! (`[workspace.lints]` in the root `Cargo.toml`), keep it so.
//!
//! From a network to a verified MSCCL program, through the one pipeline:
//!
//! ```
//! use tacos::collective::CollectiveKind;
//! use tacos::pipeline::{self, Options, Request};
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let mesh = parse_spec("mesh:2x2", &SpecDefaults::default())?;
//! let request = Request::new(CollectiveKind::AllReduce, 1 << 20);
//! let found = pipeline::program(&mesh, &request, &Options::default())?;
//! tacos::schedule::check(found.kept.schedule(), &mesh)?; // checked again, independently
//! assert!(found.kept.xml().contains("coll=\"allreduce\""));
//! # Ok::<(), tacos::Error>(())
//! ```
//!
//! The same steps by hand: synthesize, check, lower to MSCCL XML:
//!
//! ```
//! use tacos::collective::{Collective, CollectiveKind};
//! use tacos::msccl::{lower, write_program, LowerOptions};
//! use tacos::synth::{synthesize, SynthOptions};
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let torus = parse_spec("torus:2x2", &SpecDefaults::default())?;
//! let all_gather = Collective::over_all(&torus, CollectiveKind::AllGather, None, 1, 1 << 20)?;
//! let schedule = synthesize(&torus, &all_gather, &SynthOptions::seeded(0))?;
//! tacos::schedule::check(&schedule, &torus)?; // every transfer replayed on its link
//! let program = lower(&schedule, &torus, &LowerOptions::default())?;
//! assert!(write_program(&program).contains("coll=\"allgather\""));
//! # Ok::<(), tacos::Error>(())
//! ```

pub mod baselines;
pub mod bounds;
pub mod budget;
pub mod collective;
pub mod compile;
pub mod cost;
pub mod error;
pub mod ffi;
pub mod fsio;
pub mod gpu;
mod hugepages;
pub mod msccl;
pub mod mscclpp;
pub mod panics;
pub mod pipeline;
pub mod plugin;
mod prefetch;
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
