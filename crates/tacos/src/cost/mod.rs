//! The executor cost model: what a collective costs on real GPUs beyond the alpha-beta
//! links, for NCCL's own algorithms (`nccl`) and for MSCCL programs (`program`), with
//! constants per GPU generation or fitted to a user's cluster (`model`, `fit`).
//!
//! What it adds to the links' alpha and beta:
//! - a launch floor paid once per collective (kernel launch, synchronisation);
//! - per protocol (LL, LL128, Simple), a latency per step of a chain of dependent steps,
//!   within an NVLink domain and across the network, and the flag bytes of its lines;
//! - a share of each link's line rate that carries bytes (NVLink and network apart);
//! - a bandwidth ceiling per channel (one thread block), times the channels a run uses.

pub mod fit;
pub mod machine;
pub mod model;
pub mod nccl;
pub mod nccltests;
pub mod program;

pub use model::{ExecModel, ProtocolModel};
pub use nccl::{NcclPrice, NcclPricer, NcclShapes};
pub use program::Executor;
