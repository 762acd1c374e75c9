//! The one path from a request to an algorithm the product emits: synthesis, the schedule
//! checker, lowering to MSCCL for a target, the XML verifier for that target, and timing,
//! with the search over K (chunks per NPU) and seeds.
//!
//! Every front end that emits an algorithm goes through here: `tacos synth` (schedules,
//! and programs with `--xml`; several collectives at once through [`concurrent`], as
//! schedules only), the C API, and `compile` (which keeps its own band ranking
//! and merging but lowers and verifies each program it keeps with [`lower`] and
//! [`Lowered::verify`]). A [`Verified`] can only be made by [`Lowered::verify`] after the
//! program passed the target's loader rules and `msccl::verify`, so whatever holds one
//! holds a program that may be written.
//!
//! Defaults, the same in every front end: K chosen automatically ([`Chunks::Auto`] over
//! [`AUTO_CHUNKS`], then K between them beside the fastest) by the simulated time of what is
//! emitted, seed 0 (`tacos synth` tries
//! [`default_seeds`] seeds from `--seed`), the executor's target
//! (`msccl::Target::default`). Trials run side by side on the caller's rayon thread pool.

// `request`: what is asked and the search's settings; `trials`: the search itself;
// `checked`: what each step hands out; `programs` and `plans`: the MSCCL program and the
// MSCCL++ plan a search keeps; `stream`: schedules too large to hold; `baselines`: the
// baselines as candidates; `memory`: a trial's estimate.
mod baselines;
mod checked;
pub mod memory;
mod plans;
mod programs;
mod request;
mod stream;
mod trials;

use baselines::baseline_within as pipeline_baseline;
pub use baselines::{baseline, MAX_BASELINE_NPUS};
pub use checked::*;
pub use plans::*;
pub use programs::*;
pub use request::*;
pub use stream::*;
pub use trials::*;

// What the submodules share: each takes `use super::*`.
use crate::baselines::Baseline;
use crate::budget::MemoryLimit;
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::cost::Executor;
use crate::error::{Error, Result};
use crate::fsio;
use crate::msccl::{
    self, lower::check_shape, LowerOptions, Profile, Program, ProgramTimer, Target, VerifyOptions,
};
use crate::mscclpp::{Plan, PlanOptions, PlanTimer};
use crate::schedule::check_stream;
use crate::schedule::stream::{StreamHeader, StreamReader, StreamWriter};
use crate::schedule::Network;
use crate::schedule::{check, check_concurrent, check_data_flow, CheckReport, Schedule};
use crate::sim::simulate_schedule;
use crate::synth::{
    prepare_streamed, synthesize_concurrent, AllReduceTimes, Prepared, Streamed, SynthOptions,
    TreeShape,
};
use crate::topology::{NpuId, Topology};
use crate::units::Picos;
use rayon::prelude::*;
use std::io::{BufReader, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A switch that corrupts every lowering, so tests can show that each front end refuses
/// a program the verifier rejects.
///
/// It is an environment variable, [`test_hooks::CORRUPT_LOWERING`], because the front ends
/// under test include the `tacos` binary, run as a separate process. It is compiled in only
/// with the cargo feature `test-hooks`: a default build (the binary users install, the
/// shared library NCCL loads) has no code that reads it, so no environment can corrupt a
/// user's algorithms. `.ci/run` runs `tests/pipeline.rs` with the feature on.
#[cfg(feature = "test-hooks")]
pub mod test_hooks {
    use crate::msccl::{Buf, Program};

    /// Set (to anything) to corrupt every lowering.
    pub const CORRUPT_LOWERING: &str = "TACOS_TEST_CORRUPT_LOWERING";

    /// Points the first receive that stores into a user buffer (not at its first slot) at
    /// the slot before: the control flow (and so the timing) is unchanged and the offset stays inside
    /// the buffer, so the loader takes it and only the verifier can tell.
    pub(super) fn corrupted(mut program: Program) -> Program {
        if std::env::var_os(CORRUPT_LOWERING).is_none() {
            return program;
        }
        let steps = program
            .gpus
            .iter_mut()
            .flat_map(|g| g.threadblocks.iter_mut())
            .flat_map(|tb| tb.steps.iter_mut());
        for step in steps {
            if step.instr.receives()
                && step.instr.writes_dst()
                && step.dst_buf != Buf::Scratch
                && step.dst_off > 0
            {
                step.dst_off -= 1;
                break;
            }
        }
        program
    }
}
