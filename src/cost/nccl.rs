//! NCCL's built-in algorithms (Ring; Tree for All-Reduce) priced with the executor cost
//! model, and the (algorithm, protocol) NCCL's own tuning would pick, as the tuner plugin
//! sees it ([`crate::tuner::Tuner`] with NCCL's default constants).
//!
//! The time of `bytes` with `protocol` on `channels` channels is
//!
//! ```text
//! launch + wire latency + nvlink steps x step(nvlink) + network steps x step(net)
//!        + bytes x wire(protocol) x max(links, injection)
//! ```
//!
//! - the chain of dependent steps is the algorithm's (its baseline schedule's) longest,
//!   found on the topology as it is (switch vertices forwarding, not unwound);
//! - `links`: the busiest link's time per byte at line rate, divided by the efficiency of
//!   its kind (NVLink or network), with unlimited pipelining;
//! - `injection`: the busiest NPU's bytes over what its channels move (per-channel rate
//!   times channels), at most its links' rate;
//! - `wire(protocol)`: LL's and LL128's flag bytes (`model::wire_factor`); each rank's
//!   share of the bytes is rounded up to whole protocol lines.

use super::model::{line_data_bytes, wire_factor, ExecModel};
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use crate::topology::Topology;
use crate::tuner::profile::{network_links, Profiler, Shape};
use crate::tuner::{
    fabric_shape, Algorithm, Cluster, Communicator, GpuArch, Network, Protocol, Tuner,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// One of NCCL's algorithms with a protocol, priced.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct NcclPrice {
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub channels: u32,
    /// Predicted time, us.
    pub time_us: f64,
    /// Whether NCCL's tuning picked the algorithm and protocol (else the user named them).
    pub nccl_choice: bool,
}

/// The shapes of NCCL's algorithms for one collective on one topology: what pricing them
/// at any size and with any constants needs.
pub struct NcclShapes {
    kind: CollectiveKind,
    /// (algorithm, its shape): Ring, and Tree for All-Reduce.
    shapes: Vec<(Algorithm, Shape)>,
}

impl NcclShapes {
    /// The shapes of `kind` on `topo`'s alive NPUs, NVLink domains of `domain_size` NPUs
    /// apart in id (a node), NCCL running `channels` channels.
    pub fn new(
        topo: &Topology,
        kind: CollectiveKind,
        domain_size: usize,
        channels: u32,
    ) -> Result<NcclShapes> {
        let ranks = topo.alive_npus().len();
        let domain_size = domain_size.clamp(1, ranks.max(1));
        check_tuned(kind)?;
        let profiler = Profiler::on_fabric(topo, domain_size)?;
        let nics = nics_per_domain(topo, domain_size);
        NcclShapes::build(kind, channels, nics, |a| profiler.shape(kind, a))
    }

    /// The shapes of `kind` on `cluster` by formula (`tuner::fabric_shape`), without
    /// building its topology: for communicators too large to simulate. Every GPU of a node
    /// has its NIC.
    pub fn for_cluster(
        cluster: &Cluster,
        kind: CollectiveKind,
        channels: u32,
    ) -> Result<NcclShapes> {
        check_tuned(kind)?;
        let nics = if cluster.domains > 1 { cluster.size } else { 0 };
        NcclShapes::build(kind, channels, nics, |a| fabric_shape(cluster, kind, a))
    }

    /// Ring, and Tree for All-Reduce, from `shape_of`, NCCL's channels spread over `nics`
    /// NICs per node.
    fn build(
        kind: CollectiveKind,
        channels: u32,
        nics: usize,
        shape_of: impl Fn(Algorithm) -> Result<Shape>,
    ) -> Result<NcclShapes> {
        let mut algorithms = vec![Algorithm::Ring];
        if kind == CollectiveKind::AllReduce {
            algorithms.push(Algorithm::Tree);
        }
        let nics = nics.min(channels as usize) as f64;
        let mut shapes = Vec::new();
        for algorithm in algorithms {
            let mut shape = shape_of(algorithm)?;
            // Our baselines leave a node over one or two NICs; NCCL's rings and trees (one
            // per channel) leave it over different NICs, so the network's share of the
            // busiest link spreads over as many as the channels reach.
            if shape.nics_used > 0 {
                shape.busiest[1] /= (nics / shape.nics_used as f64).max(1.0);
            }
            shapes.push((algorithm, shape));
        }
        Ok(NcclShapes { kind, shapes })
    }

    /// The predicted time of `bytes` with `algorithm` and `protocol` under `model`, on the
    /// model's channel count; an error for Tree on a collective other than All-Reduce.
    pub fn time_us(
        &self,
        model: &ExecModel,
        algorithm: Algorithm,
        protocol: Protocol,
        bytes: u64,
    ) -> Result<f64> {
        let shape = self
            .shapes
            .iter()
            .find(|(a, _)| *a == algorithm)
            .map(|(_, s)| s)
            .ok_or_else(|| {
                Error::Baseline(format!(
                    "NCCL's {algorithm} runs allreduce only, not {}",
                    self.kind
                ))
            })?;
        Ok(time_us(
            model,
            shape,
            protocol,
            model.channels,
            bytes as f64,
        ))
    }
}

/// NCCL runs its own algorithms only for the collectives it tunes.
fn check_tuned(kind: CollectiveKind) -> Result<()> {
    if crate::tuner::TUNED.contains(&kind) {
        return Ok(());
    }
    Err(Error::Baseline(format!(
        "NCCL has no built-in {kind}; it runs broadcast, reduce, allgather, reducescatter and allreduce"
    )))
}

/// NCCL's algorithms for one collective on one topology, ready to price at any size.
pub struct NcclPricer {
    kind: CollectiveKind,
    model: ExecModel,
    shapes: NcclShapes,
    /// NCCL's own ranking, per collective and size band (shared by the pricers of one
    /// topology).
    tuner: Arc<Tuner>,
}

impl NcclPricer {
    /// Prices `kind` on `topo`'s alive NPUs, NVLink domains of `domain_size` NPUs apart
    /// in id (a node), `gpu` for NCCL's tables, `model` for the executor.
    pub fn new(
        topo: &Topology,
        kind: CollectiveKind,
        domain_size: usize,
        gpu: GpuArch,
        model: ExecModel,
    ) -> Result<NcclPricer> {
        let tuner = Arc::new(nccl_tuning(topo, domain_size, gpu)?);
        NcclPricer::with_tuning(topo, kind, domain_size, model, tuner)
    }

    /// A pricer for `kind` that reads NCCL's choices from `tuner` (made by
    /// [`nccl_tuning`] for the same topology), so the pricers of several collectives share
    /// one.
    pub fn with_tuning(
        topo: &Topology,
        kind: CollectiveKind,
        domain_size: usize,
        model: ExecModel,
        tuner: Arc<Tuner>,
    ) -> Result<NcclPricer> {
        let shapes = NcclShapes::new(topo, kind, domain_size, model.channels)?;
        Ok(NcclPricer {
            kind,
            model,
            shapes,
            tuner,
        })
    }

    /// Prices `kind` on `cluster` by formulas (its shapes, and NCCL's tuning by
    /// `tuner::formula`), building no topology: for clusters too large to simulate, as the
    /// tuner plugin prices them. `name` labels NCCL's tuning.
    pub fn for_cluster(
        cluster: &Cluster,
        name: &str,
        kind: CollectiveKind,
        gpu: GpuArch,
        model: ExecModel,
    ) -> Result<NcclPricer> {
        let comm = Communicator {
            ranks: cluster.npus(),
            nodes: cluster.domains,
            constants: None,
        };
        let network = Network::Cluster {
            cluster: *cluster,
            name,
        };
        let tuner = Tuner::new(network, name, cluster.size, Vec::new(), &comm, gpu)?;
        Ok(NcclPricer {
            kind,
            shapes: NcclShapes::for_cluster(cluster, kind, model.channels)?,
            model,
            tuner: Arc::new(tuner),
        })
    }

    pub fn model(&self) -> &ExecModel {
        &self.model
    }

    /// The (algorithm, protocol) NCCL's tuning picks for `bytes`, among `algorithm`'s only
    /// when given.
    pub fn nccl_choice(&self, bytes: u64, algorithm: Option<Algorithm>) -> (Algorithm, Protocol) {
        self.tuner
            .choices(self.kind, bytes)
            .iter()
            .find(|c| algorithm.map_or(true, |a| a == c.algorithm))
            .map_or((Algorithm::Ring, Protocol::Simple), |c| {
                (c.algorithm, c.protocol)
            })
    }

    /// The predicted time of `bytes` with `algorithm` and `protocol` (NCCL's pick where
    /// `None`), on the model's channel count.
    pub fn price(
        &self,
        bytes: u64,
        algorithm: Option<Algorithm>,
        protocol: Option<Protocol>,
    ) -> Result<NcclPrice> {
        self.price_with(&self.model, bytes, algorithm, protocol)
    }

    /// [`NcclPricer::price`] with other executor constants (a fit tries many).
    pub fn price_with(
        &self,
        model: &ExecModel,
        bytes: u64,
        algorithm: Option<Algorithm>,
        protocol: Option<Protocol>,
    ) -> Result<NcclPrice> {
        let (picked_algorithm, picked_protocol) = self.nccl_choice(bytes, algorithm);
        let algorithm = algorithm.unwrap_or(picked_algorithm);
        let protocol = protocol.unwrap_or(picked_protocol);
        let time_us = self.shapes.time_us(model, algorithm, protocol, bytes)?;
        Ok(NcclPrice {
            algorithm,
            protocol,
            channels: model.channels,
            time_us,
            nccl_choice: (algorithm, protocol) == (picked_algorithm, picked_protocol),
        })
    }
}

/// NCCL's own ranking of its algorithms on `topo` (the tuner plugin's model with NCCL's
/// default constants), for [`NcclPricer::with_tuning`].
pub fn nccl_tuning(topo: &Topology, domain_size: usize, gpu: GpuArch) -> Result<Tuner> {
    let ranks = topo.alive_npus().len();
    let domain_size = domain_size.clamp(1, ranks.max(1));
    let comm = Communicator {
        ranks,
        nodes: ranks.div_ceil(domain_size),
        constants: None,
    };
    Tuner::new(
        Network::Simulated(topo),
        topo.name(),
        domain_size,
        Vec::new(),
        &comm,
        gpu,
    )
}

/// The most NPUs of one NVLink domain with a link into the network (their NICs).
fn nics_per_domain(topo: &Topology, domain_size: usize) -> usize {
    let network = network_links(topo, domain_size);
    let mut per_domain: HashMap<usize, usize> = HashMap::new();
    for npu in topo.alive_npus() {
        if topo.out_links(npu).any(|l| network[l]) {
            *per_domain.entry(npu / domain_size).or_default() += 1;
        }
    }
    per_domain.into_values().max().unwrap_or(0)
}

/// The module's formula: `shape` run with `protocol` on `channels` channels.
pub(crate) fn time_us(
    model: &ExecModel,
    shape: &Shape,
    protocol: Protocol,
    channels: u32,
    bytes: f64,
) -> f64 {
    let p = model.protocol(protocol);
    let latency = model.launch_us
        + shape.wire_latency_us
        + shape.steps[0] * p.step_us.nvlink
        + shape.steps[1] * p.step_us.net;
    let efficiency = [model.efficiency.nvlink, model.efficiency.net];
    let links = shape.us_per_byte
        * (shape.busiest[0] / efficiency[0]).max(shape.busiest[1] / efficiency[1]);
    let rate = model.channels_gbps(protocol, channels);
    let injection = shape
        .injection
        .iter()
        .map(|&(sent, egress)| sent / (rate.min(egress * efficiency[0]) * 1e3))
        .fold(0.0, f64::max);
    // Each rank's share of a step moves whole protocol lines.
    let ranks = shape.injection.len().max(1) as f64;
    let line = line_data_bytes(protocol) as f64;
    let bytes = (bytes / (ranks * line)).ceil() * ranks * line;
    latency + bytes * wire_factor(protocol) * links.max(injection)
}
