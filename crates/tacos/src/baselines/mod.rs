//! Baseline algorithms as `Schedule`s: what users run today, to measure synthesized
//! algorithms against. Each is topology-unaware or only dimension-aware; the simulator
//! gives them the link contention they really meet.
//!
//! A baseline's transfer times are an order, not a promise: transfer k of a step-by-step
//! algorithm runs during [step, step + 1) "picoseconds", so `schedule::check_data_flow`
//! verifies it and the simulator derives its dependencies, while every real time comes
//! from the simulator. Sends between NPUs that share no link are routed by the simulator;
//! on a fabric a send between NPUs joined through switches is one transfer on its route
//! (`Topology::route`), as a runtime's connection between peers is, and the ring takes
//! such NPUs as neighbours.
//!
//! | baseline | collectives | chunks per NPU |
//! | --- | --- | --- |
//! | ring | allgather, reducescatter, allreduce, broadcast, reduce | 2K, half each way round |
//! | ring-uni | the same | K |
//! | direct | all | K |
//! | rhd | allgather, reducescatter, allreduce; broadcast, reduce (scatter/reduce-scatter + allgather/gather) | K, P x K for broadcast/reduce |
//! | dbt | allreduce, broadcast, reduce | 2K, half per tree |
//! | hierarchical | allgather, reducescatter, allreduce on composed topologies | K |
//! | trees | allreduce over links; broadcast, reduce over links or through switches | 2K, a tree each; 2 x P x K for broadcast/reduce |
//! | in-switch | allgather, reducescatter, allreduce, broadcast, reduce where switches reduce | K |
//!
//! `trees` and `in-switch` are not ones users run as such: they are the search's own
//! constructions (packed spanning trees, module `packed`; sums and multicasts inside
//! reducing switches, module `in_switch`) that share the baselines' path (a fixed plan the
//! simulator times), so measurements against "the baselines" leave them out
//! (`Baseline::user_runs`). In-switch schedules run as MSCCL++ plans, not MSCCL XML
//! (`Baseline::writes_xml`).
//!
//! ```
//! use tacos::baselines::Baseline;
//! use tacos::collective::{Collective, CollectiveKind};
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
//! let all_gather = Collective::over_all(&ring, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
//! let schedule = Baseline::Ring.schedule(&ring, all_gather.spec()).unwrap();
//! // Half of each NPU's share goes each way round: 3 steps of 4 x 2 sends.
//! assert_eq!(schedule.transfers.len(), 24);
//! tacos::schedule::check_data_flow(&schedule, &ring).unwrap();
//! ```

mod dbt;
mod direct;
mod hierarchical;
mod in_switch;
mod packed;
mod relay;
mod rhd;
mod ring;

pub(crate) use dbt::Tree as BalancedTree;
pub use relay::relay;
pub use ring::ring_order;

use crate::budget::{mul, MemoryLimit};
use crate::collective::memory::{self, Shape};
use crate::collective::{ChunkId, Collective, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::memory::{check, TRANSFER};
use crate::schedule::{Op, Schedule, Transfer};
use crate::topology::{NpuId, Topology};
use std::fmt;
use std::str::FromStr;

/// A baseline algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Baseline {
    /// Bidirectional ring: half the data goes each way round a ring that follows links.
    Ring,
    /// Unidirectional ring.
    RingUni,
    /// Every NPU sends straight to every NPU that needs its data.
    Direct,
    /// Recursive halving-doubling (power-of-two NPU counts).
    Rhd,
    /// Double binary tree, NCCL's: two trees, each carrying half the data.
    Dbt,
    /// Per-dimension rings: Reduce-Scatter dimension by dimension, then All-Gather back
    /// (BlueConnect).
    Hierarchical,
    /// Spanning trees packed to the links' bandwidths, a chunk reduced up its tree and
    /// broadcast back down (All-Reduce, over links), or only down (Broadcast) or up
    /// (Reduce), whose trees' edges may also be routes through switches. Not a baseline users run: the search's
    /// own candidate beside the matcher ([`Baseline::user_runs`]).
    Trees,
    /// Sums and multicasts inside the switches that reduce (NVLS), each node's share
    /// exchanged along rails between nodes. The search's own candidate where switches
    /// reduce; it runs as an MSCCL++ plan, not MSCCL XML ([`Baseline::writes_xml`]).
    InSwitch,
}

impl Baseline {
    pub const ALL: [Baseline; 8] = [
        Baseline::Ring,
        Baseline::RingUni,
        Baseline::Direct,
        Baseline::Rhd,
        Baseline::Dbt,
        Baseline::Hierarchical,
        Baseline::Trees,
        Baseline::InSwitch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Baseline::Ring => "ring",
            Baseline::RingUni => "ring-uni",
            Baseline::Direct => "direct",
            Baseline::Rhd => "rhd",
            Baseline::Dbt => "dbt",
            Baseline::Hierarchical => "hierarchical",
            Baseline::Trees => "trees",
            Baseline::InSwitch => "in-switch",
        }
    }

    /// Whether it is an algorithm users run today (what synthesized schedules are
    /// measured against), not one of the search's own constructions.
    pub fn user_runs(self) -> bool {
        !matches!(self, Baseline::Trees | Baseline::InSwitch)
    }

    /// Whether its schedules lower to MSCCL XML: in-switch ones do not, having no such
    /// operation there (they run as MSCCL++ plans).
    pub fn writes_xml(self) -> bool {
        self != Baseline::InSwitch
    }

    /// Whether it runs on `topo` at all: in-switch needs switches that reduce.
    pub fn runs_on(self, topo: &Topology) -> bool {
        self != Baseline::InSwitch || topo.has_reducing_switch()
    }

    /// Whether more chunks per NPU can make it faster: its chunks go through trees or
    /// dimensions one after another, so finer pieces overlap the stages (dbt,
    /// hierarchical). Ring, Direct and RHD move every piece in lockstep steps, each paying
    /// a link's latency, so their time only grows with K.
    pub fn pipelines(self) -> bool {
        matches!(
            self,
            Baseline::Dbt | Baseline::Hierarchical | Baseline::Trees | Baseline::InSwitch
        )
    }

    /// The collectives the algorithm defines.
    pub fn kinds(self) -> &'static [CollectiveKind] {
        use CollectiveKind::*;
        match self {
            Baseline::Ring | Baseline::RingUni | Baseline::Rhd => {
                &[AllGather, ReduceScatter, AllReduce, Broadcast, Reduce]
            }
            Baseline::Direct => &CollectiveKind::ALL,
            Baseline::Dbt => &[AllReduce, Broadcast, Reduce],
            Baseline::Hierarchical => &[AllGather, ReduceScatter, AllReduce],
            Baseline::Trees => &[AllReduce, Broadcast, Reduce],
            Baseline::InSwitch => in_switch::KINDS,
        }
    }

    /// Bytes the baseline's schedule for `spec` holds, checked and simulated
    /// ([`memory_bytes`]), with the chunk split the table above gives; for Direct, with
    /// the transfers relaying its sends between unjoined NPUs makes ([`relay`]), which
    /// only Direct's NPUs^2 sends make large.
    pub fn memory_estimate(self, topo: &Topology, spec: &CollectiveSpec) -> u64 {
        if self == Baseline::Direct {
            let planned = Shape::of(spec, spec.npus.len()).deliveries;
            return held_bytes(topo, spec, planned, direct::relayed_transfers(topo, spec));
        }
        let split = match (self, spec.kind) {
            (Baseline::Trees, CollectiveKind::Broadcast | CollectiveKind::Reduce) => {
                2 * spec.npus.len() as u64
            }
            (Baseline::Ring | Baseline::Dbt | Baseline::Trees, _) => 2,
            (Baseline::Rhd, CollectiveKind::Broadcast | CollectiveKind::Reduce) => {
                spec.npus.len() as u64
            }
            _ => 1,
        };
        let graph = if self == Baseline::Trees {
            packed::graph_bytes(topo, spec)
        } else {
            0
        };
        memory_bytes(topo, spec, split).saturating_add(graph)
    }

    /// The baseline's schedule for `spec` on `topo`.
    pub fn schedule(self, topo: &Topology, spec: &CollectiveSpec) -> Result<Schedule> {
        if !self.kinds().contains(&spec.kind) {
            return Err(Error::baseline(
                self.name(),
                format!(
                    "{} does not define {} (it defines {})",
                    self.name(),
                    spec.kind,
                    self.kinds()
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        MemoryLimit::default().admit(self.memory_estimate(topo, spec), || {
            format!(
                "the {} baseline for {} over {} NPUs with K={}",
                self.name(),
                spec.kind,
                spec.npus.len(),
                spec.chunks_per_npu
            )
        })?;
        let (plan, spec) = match self {
            Baseline::Ring => ring::plan(topo, spec, true)?,
            Baseline::RingUni => ring::plan(topo, spec, false)?,
            Baseline::Direct => (direct::plan(spec), spec.clone()),
            Baseline::Rhd => rhd::plan(spec)?,
            Baseline::Dbt => dbt::plan(spec),
            Baseline::Hierarchical => (hierarchical::plan(topo, spec)?, spec.clone()),
            Baseline::InSwitch => (in_switch::plan(topo, spec)?, spec.clone()),
            Baseline::Trees => {
                // As many trees as an All-Reduce over the same NPUs packs: a Broadcast's or
                // Reduce's K chunks are the whole buffer's, not each NPU's share of it.
                let trees_per_chunk = match spec.kind {
                    CollectiveKind::Broadcast | CollectiveKind::Reduce => 2 * spec.npus.len(),
                    _ => 2,
                };
                let spec = rechunked(spec, trees_per_chunk * spec.chunks_per_npu);
                (packed::plan(topo, &spec)?, spec)
            }
        };
        let collective = Collective::new(topo, spec)?;
        Ok(Schedule::new(
            format!("{} ({})", topo.name(), self.name()),
            collective.spec().clone(),
            collective.chunk_bytes(),
            plan.transfers,
        ))
    }
}

impl fmt::Display for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Baseline {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Baseline::ALL
            .into_iter()
            .find(|b| b.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| Error::Unknown {
                what: "baseline",
                given: s.into(),
                known: Baseline::ALL.map(|b| b.name()).to_vec(),
            })
    }
}

/// Bytes a baseline's schedule of `spec` holds on `topo`, checked and simulated:
/// `factor` is how many chunks it splits each of the spec's into (2 for the two-way ring
/// and the double tree, P for recursive halving-doubling's Broadcast and Reduce).
pub fn memory_bytes(topo: &Topology, spec: &CollectiveSpec, factor: u64) -> u64 {
    let spec = CollectiveSpec {
        chunks_per_npu: spec.chunks_per_npu.saturating_mul(factor as usize),
        ..spec.clone()
    };
    let transfers = Shape::of(&spec, spec.npus.len()).deliveries;
    held_bytes(topo, &spec, transfers, None)
}

/// Bytes a baseline's schedule of `spec` holds: the plan's `planned` records (with
/// growth slack) and the schedule made of them, checked and simulated, or where it is
/// relayed ([`relay`]) into `relayed` transfers, those instead.
fn held_bytes(topo: &Topology, spec: &CollectiveSpec, planned: u64, relayed: Option<u64>) -> u64 {
    let timed = relayed.unwrap_or(planned);
    mul(planned, 3 * TRANSFER)
        .saturating_add(mul(relayed.unwrap_or(0), TRANSFER))
        .saturating_add(memory::building(topo, spec))
        .saturating_add(check(spec, topo, timed))
}

/// The same collective with a different number of chunks per NPU.
fn rechunked(spec: &CollectiveSpec, chunks_per_npu: usize) -> CollectiveSpec {
    CollectiveSpec {
        chunks_per_npu,
        ..spec.clone()
    }
}

/// The rank of the root among the collective's NPUs.
fn root_rank(spec: &CollectiveSpec) -> usize {
    spec.root
        .and_then(|r| spec.npus.iter().position(|&n| n == r))
        .unwrap_or(0)
}

/// Transfers in step order; step s runs during [s, s + 1).
#[derive(Default)]
struct Plan {
    transfers: Vec<Transfer>,
}

impl Plan {
    fn send(&mut self, step: usize, chunks: &[ChunkId], src: NpuId, dst: NpuId, op: Op) {
        for &chunk in chunks {
            self.transfers.push(Transfer::new(
                chunk,
                src,
                dst,
                step as u64,
                step as u64 + 1,
                op,
            ));
        }
    }

    /// One pass round a unidirectional ring over `members` (ring order) from `step`; returns
    /// the step after it. At step s member i passes on segment(i - s) going forward
    /// (i + s backward): with `Op::Copy` an All-Gather, each member's segment reaching all.
    /// With `Op::Reduce` the pass lags one member, so segment j starts at the member after
    /// j and ends, summed, at member j: a Reduce-Scatter.
    fn ring_pass(
        &mut self,
        step: usize,
        members: &[NpuId],
        segment: &dyn Fn(usize) -> Vec<ChunkId>,
        forward: bool,
        op: Op,
    ) -> usize {
        let p = members.len();
        let lag = usize::from(op == Op::Reduce);
        for s in 0..p.saturating_sub(1) {
            for i in 0..p {
                let (origin, next) = if forward {
                    ((i + 2 * p - s - lag) % p, (i + 1) % p)
                } else {
                    ((i + s + lag) % p, (i + p - 1) % p)
                };
                self.send(step + s, &segment(origin), members[i], members[next], op);
            }
        }
        step + p.saturating_sub(1)
    }
}

/// Chunks `from..from + count`.
fn span(from: usize, count: usize) -> Vec<ChunkId> {
    (from..from + count).collect()
}
