//! MSCCL++ execution plans: the JSON programs of Microsoft's live collective runtime,
//! beside MSCCL XML ([`crate::msccl`]).
//!
//! [`plan`] is the file as the executor reads it.

pub mod plan;
pub mod verify;

pub use plan::Plan;
pub use verify::{verify, PlanReport, VerifyOptions};
