//! NCCL's built-in algorithms priced with the executor cost model, and the (algorithm,
//! protocol) NCCL's own tuning picks: its cost model in the profile's band of NCCL
//! versions ([`NcclTuning`]) on the graphs its search finds on the machine
//! (the [`machine`] module), so the pair priced is the pair NCCL runs.
//!
//! Ring and Tree are priced from their shapes on the topology (below). The others by
//! closed forms on the machine (`g` GPUs a node, `N` nodes, NICs of `nic` GB/s):
//!
//! - NVLS (one node): `launch + nvls.step + S / min(nvls.gbps, port x eff x g/(g+1))`:
//!   each GPU sends its whole buffer into the switch and a 1/g share out again, and the
//!   switch's reduction runs at its own rate; All-Gather and Reduce-Scatter move
//!   `S (g-1)/g` through the port;
//! - NVLS-Tree (from two nodes): NVLS within each node and trees of the nodes between the
//!   NICs, pipelined: the slower of the two, the trees' `2 log2 N` network steps on top;
//!   a NIC carries `S / nics` each way on two nodes, twice that beyond (a tree's inner
//!   nodes);
//! - PAT (one GPU per node): `log2 N` network steps, `S (N-1)/N` through the NICs;
//! - CollNet (SHARP): a reduce-scatter and all-gather within the node and `S / nics`
//!   each way through a NIC, the network reducing.
//!
//! The time of Ring or Tree of `bytes` with `protocol` on `channels` channels is
//!
//! ```text
//! launch + wire latency + nvlink steps x step(nvlink) + network steps x step(net)
//!        + bytes x wire(protocol) x max(links, injection)
//! ```
//!
//! - the chain of dependent steps is the algorithm's (its baseline schedule's) longest,
//!   found on the topology as it is (switch vertices forwarding, not unwound);
//! - `links`: the busiest link's time per byte at line rate, divided by the efficiency of
//!   its kind (NVLink or network), with unlimited pipelining; across nodes NCCL's rings
//!   leave a node over as many NICs as their channels reach, and its tree is a chain
//!   through each node's GPUs with trees of the nodes between their NICs (`2 (g-1)/g S`
//!   through a GPU's port, `S` each way through a node's NICs on two nodes, `2 S` beyond);
//! - `injection`: the busiest NPU's bytes over what its channels move (per-channel rate
//!   times channels), at most its links' rate;
//! - `wire(protocol)`: LL's and LL128's flag bytes (`model::wire_factor`); each rank's
//!   share of the bytes is rounded up to whole protocol lines.

use super::machine;
use super::model::{line_data_bytes, wire_factor, ExecModel};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveKind;
use crate::collective::CollectiveSpec;
use crate::error::{echo, Error, Result};
use crate::gpu::{Algorithm, GpuArch, Protocol};
use crate::topology::spec::{plan_spec, SpecPlan};
use crate::topology::{SpecDefaults, Topology};
use crate::tuner::nccl_tuning::{Comm, NcclTuning, NcclVersion};
use crate::tuner::profile::{network_links, Profiler, Shape};
use crate::tuner::search::{rings_on_mesh, Machine, NodeFabric};
use crate::tuner::{fabric_shape, Cluster};
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
    /// Whether NCCL's tuning picked the protocol, and the algorithm unless the user held it
    /// (else the user named the protocol too).
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
        // The baselines the profiler simulates, at two chunks a rank, split in two.
        let spec = CollectiveSpec {
            kind,
            root: kind.has_root().then(|| topo.alive_npus()[0]),
            npus: topo.alive_npus(),
            chunks_per_npu: 2,
            size_bytes: 1 << 30,
        };
        MemoryLimit::default().admit(crate::baselines::memory_bytes(topo, &spec, 2), || {
            format!(
                "pricing NCCL's ring and tree for {kind} on {} ({ranks} ranks)",
                echo(topo.name())
            )
        })?;
        let profiler = Profiler::on_fabric(topo, domain_size)?;
        let nics = topo.nics().map(|n| n.count);
        let all = nics_per_domain(topo, domain_size);
        let links = links_reached(all, nics, channels);
        let mesh = (domain_size == ranks && !topo.has_switches())
            .then(|| mesh_rings(topo, kind))
            .flatten();
        let nodes = Nodes::of_topology(topo, domain_size).map(|n| n.reaching(links, all));
        NcclShapes::build(kind, links, nodes, |a| match (&mesh, a) {
            (Some(rings), Algorithm::Ring) => Ok(rings.clone()),
            _ => profiler.shape(kind, a),
        })
    }

    /// The shapes of `kind` on `cluster` by formula (`tuner::fabric_shape`), without
    /// building its topology: for communicators too large to simulate. `nics`: a node's
    /// NICs where the topology records them, else one per GPU.
    pub fn for_cluster(
        cluster: &Cluster,
        nics: Option<usize>,
        kind: CollectiveKind,
        channels: u32,
    ) -> Result<NcclShapes> {
        check_tuned(kind)?;
        let all = if cluster.domains > 1 { cluster.size } else { 0 };
        let links = links_reached(all, nics, channels);
        let nodes = Nodes::of_cluster(cluster).map(|n| n.reaching(links, all));
        NcclShapes::build(kind, links, nodes, |a| fabric_shape(cluster, kind, a))
    }

    /// Ring, and Tree for All-Reduce, from `shape_of`, NCCL's channels spread over the
    /// `links` into the network of a node they reach; the tree's time per byte as NCCL's
    /// runs across `nodes`, where there are several.
    fn build(
        kind: CollectiveKind,
        links: f64,
        nodes: Option<Nodes>,
        shape_of: impl Fn(Algorithm) -> Result<Shape>,
    ) -> Result<NcclShapes> {
        let mut algorithms = vec![Algorithm::Ring];
        if kind == CollectiveKind::AllReduce {
            algorithms.push(Algorithm::Tree);
        }
        let mut shapes = Vec::new();
        for algorithm in algorithms {
            let mut shape = shape_of(algorithm)?;
            if let (Algorithm::Tree, Some(nodes)) = (algorithm, &nodes) {
                shape = nodes.tree(shape);
            }
            // Our baselines leave a node over one or two NICs; NCCL's rings and trees (one
            // per channel) leave it over different NICs, so the network's share of the
            // busiest link spreads over as many as the channels reach.
            if shape.nics_used > 0 {
                shape.busiest[1] /= (links / shape.nics_used as f64).max(1.0);
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
                Error::baseline(
                    format!("NCCL {algorithm}"),
                    format!("NCCL's {algorithm} runs allreduce only, not {}", self.kind),
                )
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
    Err(Error::baseline(format!("NCCL {kind}"), format!(
        "NCCL has no built-in {kind}; it runs broadcast, reduce, allgather, reducescatter and allreduce"
    )))
}

/// NCCL's algorithms for one collective on one topology, ready to price at any size.
pub struct NcclPricer {
    kind: CollectiveKind,
    model: ExecModel,
    shapes: NcclShapes,
    machine: Machine,
    /// NCCL's own model, which picks (shared by the pricers of one topology).
    tuning: Arc<NcclTuning>,
}

impl NcclPricer {
    /// Prices `kind` on `topo`'s alive NPUs, NVLink domains of `domain_size` NPUs apart
    /// in id (a node), `gpu` for NCCL's tables, `model` for the executor (and the NCCL
    /// version whose tuning picks).
    ///
    /// Above [`SIMULATED_RANKS_MAX`] ranks a preset cluster of identical nodes is priced
    /// by formulas ([`NcclPricer::for_cluster`]), in time and memory linear in the ranks.
    pub fn new(
        topo: &Topology,
        kind: CollectiveKind,
        domain_size: usize,
        gpu: GpuArch,
        model: ExecModel,
    ) -> Result<NcclPricer> {
        if topo.alive_npus().len() > SIMULATED_RANKS_MAX {
            if let Some(cluster) = preset_cluster(topo, domain_size) {
                let machine = machine::with_nics(machine::of_cluster(&cluster, gpu), topo.nics());
                return NcclPricer::on_machine(&cluster, machine, topo.name(), kind, model);
            }
        }
        let tuning = Arc::new(nccl_tuning(topo, domain_size, gpu, model.nccl_version())?);
        NcclPricer::with_tuning(topo, kind, domain_size, model, tuning)
    }

    /// A pricer for `kind` that reads NCCL's choices from `tuning` (made by
    /// [`nccl_tuning`] for the same topology), so the pricers of several collectives share
    /// one.
    pub fn with_tuning(
        topo: &Topology,
        kind: CollectiveKind,
        domain_size: usize,
        model: ExecModel,
        tuning: Arc<NcclTuning>,
    ) -> Result<NcclPricer> {
        let shapes = NcclShapes::new(topo, kind, domain_size, model.channels)?;
        let machine = machine::of_topology(topo, domain_size, tuning.comm().arch);
        Ok(NcclPricer {
            kind,
            model,
            shapes,
            machine,
            tuning,
        })
    }

    /// Prices `kind` on `cluster` by formulas (its shapes, and NCCL's tuning on the
    /// cluster's machine), building no topology: for clusters too large to simulate, as
    /// the tuner plugin prices them. `name` labels the cluster in messages.
    pub fn for_cluster(
        cluster: &Cluster,
        name: &str,
        kind: CollectiveKind,
        gpu: GpuArch,
        model: ExecModel,
    ) -> Result<NcclPricer> {
        let machine = machine::of_cluster(cluster, gpu);
        NcclPricer::on_machine(cluster, machine, name, kind, model)
    }

    /// [`NcclPricer::for_cluster`] with NCCL's search on `machine` (the cluster's, with
    /// its NICs as the topology records them).
    fn on_machine(
        cluster: &Cluster,
        machine: Machine,
        name: &str,
        kind: CollectiveKind,
        model: ExecModel,
    ) -> Result<NcclPricer> {
        if cluster.npus() < 2 {
            return Err(Error::Topology(format!(
                "{}: a communicator of one rank has nothing to price",
                echo(name)
            )));
        }
        let tuning = Arc::new(tuning_on(&machine, model.nccl_version()));
        Ok(NcclPricer {
            kind,
            shapes: NcclShapes::for_cluster(cluster, Some(machine.nics), kind, model.channels)?,
            model,
            machine,
            tuning,
        })
    }

    pub fn model(&self) -> &ExecModel {
        &self.model
    }

    /// The NCCL version band whose tuning picks.
    pub fn version(&self) -> NcclVersion {
        self.tuning.version()
    }

    /// The (algorithm, protocol) NCCL's tuning picks for `bytes`, among `algorithm`'s and
    /// `protocol`'s only where given (`NCCL_ALGO`, `NCCL_PROTO`); an error naming what
    /// runs where NCCL would not run what is held.
    pub fn nccl_choice(
        &self,
        bytes: u64,
        algorithm: Option<Algorithm>,
        protocol: Option<Protocol>,
    ) -> Result<(Algorithm, Protocol)> {
        match self.tuning.pick(self.kind, bytes, algorithm, protocol) {
            Some((a, p, _)) => Ok((a, p)),
            None => Err(self.not_run(algorithm, protocol)),
        }
    }

    /// Why NCCL runs nothing held to `algorithm` and `protocol` here.
    fn not_run(&self, algorithm: Option<Algorithm>, protocol: Option<Protocol>) -> Error {
        let m = &self.machine;
        let why = match algorithm {
            Some(a) if a.uses_nvls() && !m.nvls => format!(
                "NVLS needs NVSwitch nodes of Hopper or Blackwell GPUs, whose switch reduces; this machine has {} GPUs{}",
                m.arch,
                if matches!(m.fabric, NodeFabric::NvSwitch { .. }) { "" } else { " and no NVSwitch" }
            ),
            Some(Algorithm::NvlsTree) if m.nodes < 2 => "NVLS-Tree runs across nodes; on one node NCCL runs NVLS".into(),
            Some(Algorithm::Nvls) if m.nodes > 1 => "NVLS runs across nodes only with SHARP; NCCL runs NVLS-Tree".into(),
            Some(a) if a.uses_collnet() => "CollNet needs a network that reduces (SHARP), which the topology does not say it has".into(),
            Some(Algorithm::Pat) => "PAT runs All-Gather and Reduce-Scatter with one GPU per node, from NCCL 2.23".into(),
            Some(a) if a.uses_nvls() || a.uses_collnet() => format!("{a} runs with Simple only"),
            Some(Algorithm::Tree) => "NCCL's tree runs allreduce only".into(),
            _ => "no such algorithm and protocol is enabled".into(),
        };
        let held = [
            algorithm.map(|a| a.to_string()),
            protocol.map(|p| p.to_string()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("/");
        Error::baseline(
            format!("NCCL {held}"),
            format!(
                "NCCL {} does not run {held} for {} here: {why}; it runs {}",
                self.version(),
                self.kind,
                self.runnable().join(", ")
            ),
        )
    }

    /// The algorithms NCCL runs for the collective here, named.
    fn runnable(&self) -> Vec<String> {
        Algorithm::ALL
            .into_iter()
            .filter(|&a| {
                Protocol::ALL
                    .into_iter()
                    .any(|p| self.tuning.time_us(self.kind, a, p, 1 << 20).is_some())
            })
            .map(|a| a.to_string())
            .collect()
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
        let (picked_algorithm, picked_protocol) = self.nccl_choice(bytes, algorithm, None)?;
        let (algorithm, protocol) = self.nccl_choice(bytes, algorithm, protocol)?;
        let time_us = self.time_us(model, algorithm, protocol, bytes)?;
        Ok(NcclPrice {
            algorithm,
            protocol,
            channels: model.channels,
            time_us,
            nccl_choice: (algorithm, protocol) == (picked_algorithm, picked_protocol),
        })
    }

    /// The fastest time the executor model gives any pair NCCL has enabled for `bytes`,
    /// with that pair: what NCCL's best choice would take where its own model misjudges.
    pub fn best_price(&self, bytes: u64) -> Result<NcclPrice> {
        let picked = self.nccl_choice(bytes, None, None)?;
        let mut best: Option<NcclPrice> = None;
        for algorithm in Algorithm::ALL {
            for protocol in Protocol::ALL {
                if self
                    .tuning
                    .time_us(self.kind, algorithm, protocol, bytes)
                    .is_none()
                {
                    continue;
                }
                let time_us = self.time_us(&self.model, algorithm, protocol, bytes)?;
                if best.map_or(true, |b| time_us < b.time_us) {
                    best = Some(NcclPrice {
                        algorithm,
                        protocol,
                        channels: self.model.channels,
                        time_us,
                        nccl_choice: (algorithm, protocol) == picked,
                    });
                }
            }
        }
        best.ok_or_else(|| self.not_run(None, None))
    }

    /// The executor model's time of `bytes` with `algorithm` and `protocol`.
    fn time_us(
        &self,
        model: &ExecModel,
        algorithm: Algorithm,
        protocol: Protocol,
        bytes: u64,
    ) -> Result<f64> {
        match algorithm {
            Algorithm::Ring | Algorithm::Tree => {
                self.shapes.time_us(model, algorithm, protocol, bytes)
            }
            other => closed_form_us(model, &self.machine, self.kind, other, bytes as f64)
                .ok_or_else(|| self.not_run(Some(other), Some(protocol))),
        }
    }
}

/// The most ranks whose Ring and Tree are simulated on the topology where formulas could
/// price them (as the tuner plugin does).
pub const SIMULATED_RANKS_MAX: usize = 64;

/// The cluster of identical nodes a preset topology (every NPU alive) is, if it is one.
fn preset_cluster(topo: &Topology, domain_size: usize) -> Option<Cluster> {
    if !topo.name().starts_with("preset:") {
        return None;
    }
    let plan = plan_spec(topo.name(), &SpecDefaults::default()).ok()?;
    let SpecPlan::Composed { dims, .. } = plan else {
        return None;
    };
    Cluster::from_dims(&dims, domain_size).filter(|c| c.npus() == topo.alive_npus().len())
}

/// NCCL's own model of `topo` in band `version` (its machine's graphs, NCCL's default
/// constants), for [`NcclPricer::with_tuning`].
pub fn nccl_tuning(
    topo: &Topology,
    domain_size: usize,
    gpu: GpuArch,
    version: NcclVersion,
) -> Result<NcclTuning> {
    let ranks = topo.alive_npus().len();
    if ranks < 2 {
        return Err(Error::Topology(
            "a communicator of one rank has nothing to tune".into(),
        ));
    }
    Ok(tuning_on(
        &machine::of_topology(topo, domain_size, gpu),
        version,
    ))
}

/// NCCL's model on `machine`.
fn tuning_on(machine: &Machine, version: NcclVersion) -> NcclTuning {
    let graphs = machine.graphs();
    let comm = Comm {
        ranks: machine.nodes * machine.gpus_per_node,
        nodes: machine.nodes,
        arch: machine.arch,
        nvls: machine.nvls && graphs.nvls.channels > 0,
        collnet: machine.sharp && graphs.collnet.channels > 0,
    };
    NcclTuning::new(version, comm, &graphs)
}

/// The closed forms of the module's text: NVLS, NVLS-Tree, PAT and CollNet under `model`
/// on `machine`, us; `None` where the machine cannot run the algorithm (no NVLS figures,
/// no NVSwitch, no NICs).
fn closed_form_us(
    model: &ExecModel,
    machine: &Machine,
    kind: CollectiveKind,
    algorithm: Algorithm,
    bytes: f64,
) -> Option<f64> {
    let g = machine.gpus_per_node.max(1) as f64;
    let n = machine.nodes.max(1) as f64;
    let eff = model.efficiency;
    let port = match &machine.fabric {
        NodeFabric::NvSwitch { nvlinks } => nvlinks * machine::nvlink_line_gbps(machine.arch),
        _ => 0.0,
    } * eff.nvlink;
    let nics = (machine.network_gbps * eff.net).max(0.0);
    let net_step = model.simple.step_us.net;
    let depth = n.log2().ceil();
    let all_reduce = kind == CollectiveKind::AllReduce;
    // GB/s = bytes per ns: us = bytes / (GB/s x 1e3).
    let us = |bytes: f64, gbps: f64| bytes / (gbps * 1e3);
    let time = match algorithm {
        Algorithm::Nvls | Algorithm::NvlsTree => {
            let nvls = model.nvls()?;
            if port <= 0.0 {
                return None;
            }
            let intra = if all_reduce {
                us(bytes, nvls.gbps.min(port * g / (g + 1.0)))
            } else {
                let moved = bytes * (g - 1.0) / g;
                us(moved, port.min(nvls.gbps * 2.0 * (g - 1.0) / g))
            };
            let mut t = model.launch_us + nvls.step_us;
            if algorithm == Algorithm::NvlsTree || n > 1.0 {
                if nics <= 0.0 {
                    return None;
                }
                let inner = if algorithm == Algorithm::NvlsTree && n > 2.0 {
                    2.0
                } else {
                    1.0
                };
                t += 2.0 * depth * net_step;
                t + intra.max(us(bytes * inner, nics))
            } else {
                t + intra
            }
        }
        Algorithm::Pat => {
            if nics <= 0.0 {
                return None;
            }
            model.launch_us + depth * net_step + us(bytes * (n - 1.0) / n, nics)
        }
        Algorithm::CollnetDirect | Algorithm::CollnetChain => {
            if nics <= 0.0 || port <= 0.0 {
                return None;
            }
            let intra = us(bytes * 2.0 * (g - 1.0) / g, port);
            model.launch_us
                + 2.0 * model.simple.step_us.nvlink
                + 2.0 * net_step
                + intra.max(us(bytes, nics))
        }
        Algorithm::Ring | Algorithm::Tree => return None,
    };
    Some(time)
}

/// The shape of NCCL's rings on one node of point-to-point links (no switch): as many
/// rings through every NPU as the links hold, one link's worth each (a link of twice the
/// slowest link's speed serves two), the collective's bytes split evenly over them.
/// `None` where the NPUs have no such ring (NCCL's ring then follows the baseline's).
fn mesh_rings(topo: &Topology, kind: CollectiveKind) -> Option<Shape> {
    let npus = topo.alive_npus();
    let p = npus.len();
    let slowest = topo
        .links()
        .iter()
        .map(|l| l.bandwidth_gbps)
        .fold(f64::INFINITY, f64::min);
    if p < 3 || !slowest.is_finite() || slowest <= 0.0 {
        return None;
    }
    let mut links = vec![vec![0u8; p]; p];
    let mut latency_us = 0.0f64;
    for (i, &a) in npus.iter().enumerate() {
        for (j, &b) in npus.iter().enumerate() {
            if let Some(l) = topo.link_between(a, b) {
                let link = topo.link(l);
                links[i][j] = (link.bandwidth_gbps / slowest).round().clamp(1.0, 255.0) as u8;
                latency_us = latency_us.max(link.latency_us);
            }
        }
    }
    let rings = rings_on_mesh(&links, 1.0, 1.0, 64);
    if rings == 0 {
        return None;
    }
    let pf = p as f64;
    let (hops, per_rank) = match kind {
        CollectiveKind::AllReduce => (2 * (p - 1), 2.0 * (pf - 1.0) / pf),
        CollectiveKind::Broadcast | CollectiveKind::Reduce => (p - 1, 1.0),
        _ => (p - 1, (pf - 1.0) / pf),
    };
    let egress = |v: usize| -> f64 { topo.out_links(v).map(|l| topo.link(l).bandwidth_gbps).sum() };
    let senders = if kind == CollectiveKind::Reduce {
        p - 1
    } else {
        p
    };
    Some(Shape {
        us_per_byte: per_rank / (f64::from(rings) * slowest * 1e3),
        busiest: [1.0, 0.0],
        nics_used: 0,
        wire_latency_us: hops as f64 * latency_us,
        steps: [hops as f64, 0.0],
        injection: npus
            .iter()
            .take(senders)
            .map(|&v| (per_rank, egress(v)))
            .collect(),
    })
}

/// Several nodes of GPUs as NCCL's tree crosses them: each GPU's port into its node's
/// fabric, and what a node's GPUs send into the network together.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Nodes {
    count: usize,
    gpus: usize,
    /// The narrowest GPU port into the node's fabric (its links within the node), GB/s.
    port_gbps: f64,
    /// The node's links into the network together, GB/s.
    network_gbps: f64,
}

impl Nodes {
    /// The nodes of `topo` (NVLink domains of `domain_size` NPUs, the first alive one's
    /// figures), where there are two or more.
    fn of_topology(topo: &Topology, domain_size: usize) -> Option<Nodes> {
        let node = machine::first_node(topo, domain_size);
        let out = |gpu: usize, across: bool| -> f64 {
            topo.out_links(gpu)
                .filter(|&l| node.network[l] == across)
                .map(|l| topo.link(l).bandwidth_gbps)
                .sum()
        };
        (node.nodes > 1).then(|| Nodes {
            count: node.nodes,
            gpus: node.gpus.len(),
            port_gbps: node
                .gpus
                .iter()
                .map(|&g| out(g, false))
                .fold(f64::INFINITY, f64::min),
            network_gbps: node.gpus.iter().map(|&g| out(g, true)).sum(),
        })
    }

    /// The nodes of `cluster`, where it has two or more.
    fn of_cluster(cluster: &Cluster) -> Option<Nodes> {
        let size = cluster.size as f64;
        let peers = |n: usize| n.saturating_sub(1) as f64;
        let port =
            cluster.ports_gbps[0].unwrap_or(peers(cluster.size) * cluster.nvlink.bandwidth_gbps);
        let nic =
            cluster.ports_gbps[1].unwrap_or(peers(cluster.domains) * cluster.rail.bandwidth_gbps);
        (cluster.domains > 1).then_some(Nodes {
            count: cluster.domains,
            gpus: cluster.size,
            port_gbps: port,
            network_gbps: size * nic,
        })
    }

    /// The nodes with NCCL's channels reaching `links` of each node's `all` links into the
    /// network.
    fn reaching(self, links: f64, all: usize) -> Nodes {
        let share = if all > 0 { links / all as f64 } else { 1.0 };
        Nodes {
            network_gbps: self.network_gbps * share.min(1.0),
            ..self
        }
    }

    /// `shape` (the double binary tree's) with the links' time per byte of NCCL's tree
    /// across the nodes: a chain through each node's GPUs, trees of the nodes between their
    /// NICs. Every channel's chain starts at a NIC's GPU, so over the channels each GPU
    /// sends `2 (g-1)/g S` into the node's fabric (the bytes up the chain and back down
    /// it); a node's NICs carry `S` each way on two nodes, twice that beyond (a tree's
    /// inner nodes). The chain of steps and the bytes each GPU injects (against the
    /// per-channel ceilings, which the built-in profiles were fitted with) stay the double
    /// binary tree's.
    fn tree(&self, mut shape: Shape) -> Shape {
        let g = self.gpus as f64;
        // GB/s = bytes per ns: us per byte = 1 / (GB/s x 1e3).
        let fabric = if self.gpus > 1 && self.port_gbps > 0.0 {
            2.0 * (g - 1.0) / g / (self.port_gbps * 1e3)
        } else {
            0.0
        };
        let inner = if self.count > 2 { 2.0 } else { 1.0 };
        let network = inner / (self.network_gbps * 1e3);
        let most = fabric.max(network);
        if !(most.is_finite() && most > 0.0) {
            return shape;
        }
        shape.us_per_byte = most;
        shape.busiest = [fabric / most, network / most];
        // The NICs are counted already.
        shape.nics_used = 0;
        shape
    }
}

/// How many of a node's `links` into the network (a GPU's each) NCCL's `channels` reach:
/// a channel leaves the node through one NIC, and the node's `nics` (where the topology
/// records them; else a NIC per link) are `links / nics` links' worth each (GPUs sharing
/// a NIC split it, a GPU with several NICs has them on its one link).
fn links_reached(links: usize, nics: Option<usize>, channels: u32) -> f64 {
    let nics = nics.unwrap_or(links).max(1);
    (channels as usize).min(nics) as f64 * links as f64 / nics as f64
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
