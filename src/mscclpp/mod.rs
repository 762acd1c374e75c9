//! MSCCL++ execution plans: the JSON programs of Microsoft's live collective runtime,
//! beside MSCCL XML ([`crate::msccl`]).
//!
//! [`plan`] is the file as the executor reads it.

pub mod plan;

pub use plan::Plan;
