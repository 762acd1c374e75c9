//! MSCCL++ execution plans: the JSON programs of Microsoft's live collective runtime,
//! beside MSCCL XML ([`crate::msccl`]).
//!
//! [`plan`] is the file as the executor reads it; [`lower()`] turns a checked `Schedule`
//! into one.

mod lower;
pub mod nvls;
pub mod nvls_rail;
pub mod plan;
mod timing;
pub mod verify;

pub use lower::{lower, PlanOptions, DEFAULT_MAX_THREADBLOCKS};
pub use plan::Plan;
pub use timing::PlanTimer;
pub use verify::{verify, PlanReport, VerifyOptions};
