//! What the two plugins (the MSCCL scheduler and the NCCL tuner) do, behind Rust-typed
//! APIs that take a [`Config`]: the settings read from the environment once
//! ([`Config::from_process`]) or built by hand, the cluster a communicator runs on
//! ([`discover`]), compiled algorithm sets ([`open_or_compile`]) and the scheduler's
//! cache of bands ([`BandCache`]), the scheduler's choice of file per call ([`Scheduler`]) and the tuner's decisions
//! ([`Tuning`]). `ffi` only translates the C ABI to these calls and back; tests and
//! benchmarks call them directly with configurations of their own.
//!
//! This layer uses `compile`, `tuner` and `topology`; nothing in the core uses it.
//!
//! ```
//! use std::ffi::OsString;
//! use tacos::plugin::Config;
//!
//! // What a job's environment says, read as the plugins read it (here from a table).
//! let env = [("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"), ("TACOS_NODES", "two")];
//! let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v));
//! let config = Config::from_env(lookup).unwrap();
//! assert_eq!(config.topology.as_deref(), Some("preset:dgx-a100,nodes=2"));
//! // A node count that does not parse is replaced, and said so.
//! assert_eq!(config.nodes, None);
//! assert!(config.warnings.iter().any(|w| w.contains("TACOS_NODES")));
//! ```

mod cache;
mod config;
mod discover;
mod scheduler;
mod tuner;

pub use cache::{
    cache_dir_name, compile_decision, open_or_compile, BandCache, Decision, Found, Notice, Opened,
};
pub use config::{
    set_memory_limit, Config, DEFAULT_GPU, DEFAULT_LOCK_WAIT, DEFAULT_MAX_TRANSFERS,
    DEFAULT_NCCL_MARGIN, LOCK_WAIT_ENV,
};
pub use discover::{discover, plan, Discovered, Layout, NvlDomains, Plan};
pub use scheduler::{fill_cache, Call, Filled, Scheduler, ServedBy};
pub use tuner::{tuner_for, CostTable, Tuning, FORMULA_RANKS_MAX, SIMULATED_RANKS_MAX};

/// Where a plugin's messages go: the host's logger, stderr, or nowhere.
pub trait Log {
    fn info(&self, message: &str);
    fn warn(&self, message: &str);
}

/// A [`Log`] that drops every message.
pub struct Silent;

impl Log for Silent {
    fn info(&self, _: &str) {}
    fn warn(&self, _: &str) {}
}
