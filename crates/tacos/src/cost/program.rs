//! MSCCL programs timed with the executor cost model: the program's messages run through
//! the simulator (one message per link at a time, routes through switches held
//! cut-through) on the topology as the executor sees it ([`Executor::priced`]):
//!
//! - a link moves data at its line rate times the efficiency of its kind (NVLink or
//!   network), over the protocol's wire bytes per data byte, and no faster than the
//!   threadblocks sending over it can (each at most the protocol's per-channel rate);
//! - a link leaving a GPU adds the protocol's step latency to its own, shared among the
//!   threadblocks sending over it: a message (one step of a threadblock) pays it once,
//!   however many switches it crosses (see `Executor::priced` for the sharing);
//! - every message moves whole protocol lines;
//! - the collective pays the launch floor once.

use super::model::{line_data_bytes, wire_factor, ExecModel};
use crate::error::Result;
use crate::gpu::{GpuArch, Protocol};
use crate::msccl::{Program, ProgramTimer, Proto};
use crate::sim::SimResult;
use crate::topology::{Link, Topology};
use crate::tuner::profile::network_links;
use crate::units::{us_to_ps, Picos};
use std::path::Path;

/// NCCL's protocol of an MSCCL program's `proto`.
pub fn protocol_of(proto: Proto) -> Protocol {
    match proto {
        Proto::LL => Protocol::Ll,
        Proto::LL128 => Protocol::Ll128,
        Proto::Simple => Protocol::Simple,
    }
}

/// The executor cost model applied to one topology: its constants and its NVLink domains.
#[derive(Clone, Debug, PartialEq)]
pub struct Executor {
    pub model: ExecModel,
    /// NPUs `domain_size` apart in id share an NVLink domain (a node).
    pub domain_size: usize,
    /// The generation NCCL's tables are read for.
    pub gpu: GpuArch,
}

impl Executor {
    /// The executor of `topo`: its GPU generation from `gpu`, else from its preset (else
    /// Hopper), its constants from `profile`, else `TACOS_PROFILE`, else the generation's
    /// built-in profile; a node per NVLink domain on presets, one domain for the rest.
    pub fn for_topology(
        topo: &Topology,
        gpu: Option<GpuArch>,
        profile: Option<&Path>,
    ) -> Result<Executor> {
        let gpu = gpu
            .or_else(|| preset_gpu(topo.name()))
            .unwrap_or(GpuArch::Hopper);
        Ok(Executor {
            model: ExecModel::resolve(profile, gpu)?,
            domain_size: domain_size(topo),
            gpu,
        })
    }

    /// `topo` as a program with `protocol` sees it (see the module), `senders[l]`
    /// threadblocks sending over link `l`.
    pub fn priced(&self, topo: &Topology, protocol: Protocol, senders: &[u32]) -> Result<Topology> {
        let network = network_links(topo, self.domain_size);
        let m = &self.model;
        let step = m.protocol(protocol).step_us;
        let wire = wire_factor(protocol);
        let links = topo
            .links()
            .iter()
            .zip(&network)
            .enumerate()
            .map(|(id, (l, &across))| {
                let threadblocks = senders.get(id).copied().unwrap_or(1).max(1);
                let channels_gbps = m.protocol(protocol).channel_gbps * threadblocks as f64;
                let (efficiency, step_us) = if across {
                    (m.efficiency.net, step.net)
                } else {
                    (m.efficiency.nvlink, step.nvlink)
                };
                // A threadblock's steps follow each other, but several threadblocks'
                // steps overlap on a link they share, while the simulator holds a link for
                // a message's whole latency: a link shared by T threadblocks charges each
                // message 1/T of a step, so T threadblocks' N steps each still take N
                // steps' time on it.
                let step_us = if topo.is_switch(l.src) {
                    0.0
                } else {
                    step_us / threadblocks as f64
                };
                Link {
                    bandwidth_gbps: (l.bandwidth_gbps * efficiency).min(channels_gbps) / wire,
                    latency_us: l.latency_us + step_us,
                    ..l.clone()
                }
            })
            .collect();
        topo.relinked(links)
    }

    /// The time of `program` (timed by `timer` on `topo`) for a collective of
    /// `size_bytes`.
    pub fn program_time_ps(
        &self,
        topo: &Topology,
        program: &Program,
        timer: &ProgramTimer,
        size_bytes: u64,
    ) -> Result<Picos> {
        Ok(self.run_program(topo, program, timer, size_bytes)?.time_ps)
    }

    /// The whole simulation of `program` on `topo` (rank r on its r-th alive NPU): its
    /// time, launch included, and each link's load as the executor runs it.
    pub fn simulate_program(
        &self,
        topo: &Topology,
        program: &Program,
        size_bytes: u64,
    ) -> Result<SimResult> {
        let timer = ProgramTimer::new(topo, program, &topo.alive_npus())?;
        self.run_program(topo, program, &timer, size_bytes)
    }

    fn run_program(
        &self,
        topo: &Topology,
        program: &Program,
        timer: &ProgramTimer,
        size_bytes: u64,
    ) -> Result<SimResult> {
        let protocol = protocol_of(program.proto);
        let senders = timer.threadblocks_per_link(topo.links().len());
        let priced = self.priced(topo, protocol, &senders)?;
        let mut run = timer.simulate_in_lines(&priced, size_bytes, line_data_bytes(protocol))?;
        run.time_ps += us_to_ps(self.model.launch_us);
        Ok(run)
    }
}

impl Executor {
    /// Copies of `program` (instances: a power of two, at most 8) that would let the
    /// threadblocks on its busiest link move data as fast as the link: 1 where they
    /// already can.
    pub fn instances_to_fill(
        &self,
        topo: &Topology,
        program: &Program,
        timer: &ProgramTimer,
    ) -> usize {
        let protocol = protocol_of(program.proto);
        let channel = self.model.protocol(protocol).channel_gbps;
        let network = network_links(topo, self.domain_size);
        let senders = timer.threadblocks_per_link(topo.links().len());
        let needed = topo
            .links()
            .iter()
            .zip(&network)
            .zip(&senders)
            .filter(|(_, &tbs)| tbs > 0)
            .map(|((l, &across), &tbs)| {
                let efficiency = if across {
                    self.model.efficiency.net
                } else {
                    self.model.efficiency.nvlink
                };
                (l.bandwidth_gbps * efficiency / (tbs as f64 * channel)).ceil()
            })
            .fold(1.0, f64::max);
        // A power of two: the executor runs a program only for element counts its chunks
        // divide, and frameworks' counts are mostly powers of two.
        (needed as usize)
            .clamp(1, MAX_INSTANCES)
            .next_power_of_two()
    }
}

/// The most copies of a program `instances_to_fill` asks for.
pub const MAX_INSTANCES: usize = 8;

/// The GPU generation a preset's name says (`preset:dgx-a100,...`), if any.
pub fn preset_gpu(name: &str) -> Option<GpuArch> {
    let preset = name.strip_prefix("preset:")?;
    let machine = preset.split(',').next()?;
    match machine {
        "dgx1" | "dgx2" => Some(GpuArch::Volta),
        "hgx-a100" | "dgx-a100" | "ndv4" => Some(GpuArch::Ampere),
        "hgx-h100" | "dgx-h100" => Some(GpuArch::Hopper),
        _ => None,
    }
}

/// NPUs per NVLink domain: a node (the first dimension) of a preset or of a switched
/// cluster built from dimensions (the plugins' clusters), else every NPU (a mesh or torus
/// of links is one domain).
pub fn domain_size(topo: &Topology) -> usize {
    let all = topo.npus().max(1);
    let clustered = topo.name().starts_with("preset:") || topo.has_switches();
    match topo.dimensions() {
        Some(dims) if clustered && dims.len() > 1 => dims[0].clamp(1, all),
        _ => all,
    }
}
