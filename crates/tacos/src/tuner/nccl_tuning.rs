//! NCCL's own choice of algorithm and protocol: its cost model (`ncclTopoTuneModel` and
//! `ncclTopoGetAlgoTime` in NCCL's `src/graph/tuning.cc`), restated for each band of NCCL
//! versions whose model is the same, priced on the graphs its search finds
//! (`search`). NCCL runs, for each collective and size, the enabled (algorithm, protocol)
//! its model prices fastest; this module finds the same pair, so what `tacos` says NCCL
//! runs is what NCCL's model says, never a pair that model prices slower.
//!
//! For each collective, algorithm and protocol NCCL keeps a latency and a bandwidth:
//!
//! ```text
//! time = latency + bytes / (1000 x bandwidth)       (us, bytes, GB/s)
//! ```
//!
//! - bandwidth: the graph's channels times what each claims (`bw_intra` on up to two
//!   nodes, `bw_inter` beyond), refined per algorithm and protocol (LL's flags, LL128's,
//!   per-channel ceilings per GPU generation, NVLS's share), then turned from bus to
//!   algorithm bandwidth (Ring: ranks / steps; NVLS: 5/6 or, from 2.28, ranks / steps;
//!   trees: 1/2);
//! - latency: a base per (algorithm, protocol) plus hardware latencies per step within a
//!   node (NVLink or PCIe) and across the network, counted per algorithm (a ring's
//!   steps, a tree's depth, NVLS's one hop);
//! - per size: trees' correction factors from 64 B to 256 MiB, and the ring's plateau
//!   (its latency times 1.4, 1.9 before Ampere) for multi-node All-Reduce/Simple.
//!
//! What is enabled: LL128 on NVLink nodes; NVLS and NVLS-Tree with Simple only, where the
//! NVSwitch reduces (NVLS-Tree from two nodes, NVLS across nodes only with SHARP);
//! CollNet only with SHARP; PAT (from 2.23) for All-Gather and Reduce-Scatter with one
//! GPU per node. Not modelled: AMD CPUs' LL ceilings and network overhead (an Intel host
//! is assumed), Power CPUs, `NCCL_ALGO`/`NCCL_PROTO` lists, grouped operations.

use super::constants::{NcclConstants, HW_NET, HW_NVLINK};
use super::search::{Graph, Graphs};
use super::TUNED;
use crate::collective::CollectiveKind;
use crate::gpu::{Algorithm, GpuArch, Protocol};
use std::fmt;

/// A band of NCCL versions with one tuning model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NcclVersion {
    /// 2.19 and 2.20: LL at a quarter of the wire, NVLS's NVLink latency 23 us.
    V2_19,
    /// 2.21 and 2.22: LL at half the wire, NVLS's NVLink latency 25 us.
    V2_21,
    /// 2.23: PAT (at 0.85 of its graph), Tree/Simple's latencies cut.
    V2_23,
    /// 2.24 to 2.27: PAT at 0.75.
    V2_24,
    /// 2.28 to 2.30: NVLS priced from its efficiency per GPU generation.
    V2_28,
}

impl NcclVersion {
    /// Every band, oldest first.
    pub const ALL: [NcclVersion; 5] = [
        NcclVersion::V2_19,
        NcclVersion::V2_21,
        NcclVersion::V2_23,
        NcclVersion::V2_24,
        NcclVersion::V2_28,
    ];

    /// What a version may be given as, for messages refusing another.
    pub const ALLOWED: &'static str =
        "an NCCL version from 2.19 to 2.30, as MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. 2.26 or 2.26.2)";

    /// The versions the band covers, e.g. `2.24-2.27`.
    pub fn band(self) -> &'static str {
        match self {
            NcclVersion::V2_19 => "2.19-2.20",
            NcclVersion::V2_21 => "2.21-2.22",
            NcclVersion::V2_23 => "2.23",
            NcclVersion::V2_24 => "2.24-2.27",
            NcclVersion::V2_28 => "2.28-2.30",
        }
    }

    /// The band of a version given as `2.26`, `2.26.2` or `2.26.2-1`.
    pub fn parse(text: &str) -> Result<NcclVersion, String> {
        let bad = || format!("'{text}' is not {}", NcclVersion::ALLOWED);
        let mut parts = text.trim().split(['.', '-']);
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        if parts.any(|p| p.parse::<u32>().is_err()) {
            return Err(bad());
        }
        match (major, minor) {
            (2, 19..=20) => Ok(NcclVersion::V2_19),
            (2, 21..=22) => Ok(NcclVersion::V2_21),
            (2, 23) => Ok(NcclVersion::V2_23),
            (2, 24..=27) => Ok(NcclVersion::V2_24),
            (2, 28..=30) => Ok(NcclVersion::V2_28),
            _ => Err(format!(
                "NCCL {major}.{minor} is not modelled: {}",
                NcclVersion::ALLOWED
            )),
        }
    }

    /// NCCL's default tuning constants in this band.
    pub fn constants(self) -> NcclConstants {
        let mut c = NcclConstants::default();
        let tree = Algorithm::Tree.index();
        let (nvls, nvls_tree) = (Algorithm::Nvls.index(), Algorithm::NvlsTree.index());
        let simple = Protocol::Simple.index();
        if self <= NcclVersion::V2_21 {
            c.base_latency_us[tree][simple] = 0.0;
            for hw in &mut c.hw_latency_us {
                hw[tree][simple] = 28.0;
            }
            let nvlink = if self == NcclVersion::V2_19 {
                23.0
            } else {
                25.0
            };
            c.hw_latency_us[HW_NVLINK][nvls][simple] = nvlink;
            c.hw_latency_us[HW_NVLINK][nvls_tree][simple] = nvlink;
        }
        if self < NcclVersion::V2_28 {
            c.hw_latency_us[HW_NET][nvls_tree][simple] = 14.0;
        }
        c
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.band())
    }
}

/// What NCCL knows of a communicator when it tunes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comm {
    pub ranks: usize,
    pub nodes: usize,
    pub arch: GpuArch,
    /// The NVSwitch reduces (NVLink SHARP) and NCCL found an NVLS graph.
    pub nvls: bool,
    /// The network reduces (SHARP through NCCL's CollNet plugin).
    pub collnet: bool,
}

/// NCCL's tree correction factors per protocol, for sizes 64 B x 2^i (All-Reduce).
const TREE_CORRECTION: [[f64; 23]; 3] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9,
    ],
];

/// NVLS's share of its graph's bandwidth per GPU generation (2.28 on).
fn nvls_efficiency(arch: GpuArch) -> f64 {
    match arch {
        GpuArch::Volta | GpuArch::Ampere => 0.0,
        GpuArch::Hopper => 0.85,
        GpuArch::Blackwell => 0.74,
    }
}

/// NVLS-Tree's per-channel ceiling per generation and node-count column (2.28 on).
fn nvls_tree_channel_gbps(arch: GpuArch, column: usize) -> f64 {
    let row = match arch {
        GpuArch::Volta => [26.5, 18.5, 10.0],
        GpuArch::Ampere => [24.0, 23.6, 17.8],
        GpuArch::Hopper => [0.0, 57.7, 45.5],
        GpuArch::Blackwell => [0.0, 96.0, 43.8],
    };
    row[column]
}

/// NCCL's network post overhead on an Intel host, us.
const NET_OVERHEAD_US: f64 = 1.0;

/// `floor(log2(n))`, 0 for 0 and 1, as NCCL's `log2i`.
fn log2i(n: usize) -> f64 {
    f64::from(n.max(1).ilog2())
}

/// NCCL's latencies and bandwidths for one communicator: what it picks from.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclTuning {
    version: NcclVersion,
    comm: Comm,
    channels: u32,
    /// `[collective][algorithm][protocol]`, collectives as in [`TUNED`]; a bandwidth of 0
    /// is disabled.
    latency_us: [[[f64; 3]; 7]; 5],
    bandwidth_gbps: [[[f64; 3]; 7]; 5],
}

impl NcclTuning {
    /// NCCL's model in band `version` for `comm` on `graphs`, with NCCL's default constants.
    ///
    /// ```
    /// use tacos::collective::CollectiveKind;
    /// use tacos::tuner::nccl_tuning::{Comm, NcclTuning, NcclVersion};
    /// use tacos::tuner::search::{Machine, NodeFabric};
    /// use tacos::gpu::{Algorithm, GpuArch};
    /// // One H100 node: 8 GPUs on an NVSwitch of 18 NVLinks each.
    /// let machine = Machine {
    ///     arch: GpuArch::Hopper,
    ///     nodes: 1,
    ///     gpus_per_node: 8,
    ///     fabric: NodeFabric::NvSwitch { nvlinks: 18.0 },
    ///     nics: 0,
    ///     nic_gbps: 0.0,
    ///     network_gbps: 0.0,
    ///     nvls: true,
    ///     sharp: false,
    /// };
    /// let comm = Comm { ranks: 8, nodes: 1, arch: GpuArch::Hopper, nvls: true, collnet: false };
    /// let version = NcclVersion::parse("2.26.2").unwrap();
    /// let tuning = NcclTuning::new(version, comm, &machine.graphs());
    /// let (algorithm, _, _) = tuning.pick(CollectiveKind::AllReduce, 1 << 30, None, None).unwrap();
    /// assert_eq!(algorithm, Algorithm::Nvls);
    /// ```
    pub fn new(version: NcclVersion, comm: Comm, graphs: &Graphs) -> NcclTuning {
        let constants = version.constants();
        let mut tuning = NcclTuning {
            version,
            comm,
            channels: graphs.ring.channels.max(1),
            latency_us: [[[0.0; 3]; 7]; 5],
            bandwidth_gbps: [[[0.0; 3]; 7]; 5],
        };
        for (c, &kind) in TUNED.iter().enumerate() {
            for algorithm in Algorithm::ALL {
                for protocol in Protocol::ALL {
                    if !tuning.runs(kind, algorithm, protocol) {
                        continue;
                    }
                    let graph = graph_of(graphs, algorithm);
                    let (a, p) = (algorithm.index(), protocol.index());
                    let bw = tuning.bandwidth(&constants, kind, algorithm, protocol, &graph);
                    tuning.bandwidth_gbps[c][a][p] = bw;
                    tuning.latency_us[c][a][p] =
                        tuning.latency(&constants, kind, algorithm, protocol, &graph);
                }
            }
        }
        tuning
    }

    pub fn version(&self) -> NcclVersion {
        self.version
    }

    /// The communicator the model is for.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Whether NCCL would consider `algorithm` with `protocol` for `kind` here at all.
    fn runs(&self, kind: CollectiveKind, algorithm: Algorithm, protocol: Protocol) -> bool {
        use CollectiveKind::*;
        let v = self.version;
        let c = &self.comm;
        let simple = protocol == Protocol::Simple;
        let fits = match kind {
            Broadcast | Reduce => algorithm == Algorithm::Ring,
            AllGather | ReduceScatter => match algorithm {
                Algorithm::Ring => true,
                Algorithm::Nvls => c.nodes == 1 || c.collnet,
                Algorithm::CollnetDirect => v >= NcclVersion::V2_23 && c.collnet,
                Algorithm::Pat => {
                    v >= NcclVersion::V2_23 && c.nodes == c.ranks && c.nodes > 1 && simple
                }
                _ => false,
            },
            AllReduce => match algorithm {
                Algorithm::Ring | Algorithm::Tree => true,
                Algorithm::Nvls => c.nvls && (c.nodes == 1 || c.collnet),
                Algorithm::NvlsTree => c.nvls && c.nodes > 1,
                Algorithm::CollnetDirect | Algorithm::CollnetChain => c.collnet,
                Algorithm::Pat => false,
            },
            _ => false,
        };
        let nvls_ok = !algorithm.uses_nvls() || (c.nvls && simple);
        let collnet_ok = !algorithm.uses_collnet() || simple;
        fits && nvls_ok && collnet_ok
    }

    /// NCCL's algorithm bandwidth for the pair, GB/s (0: not run).
    fn bandwidth(
        &self,
        k: &NcclConstants,
        kind: CollectiveKind,
        algorithm: Algorithm,
        protocol: Protocol,
        graph: &Graph,
    ) -> f64 {
        if graph.channels == 0 {
            return 0.0;
        }
        let v = self.version;
        let (nodes, ranks) = (self.comm.nodes, self.comm.ranks);
        let arch = self.comm.arch;
        let g = arch.index();
        let column = nodes.clamp(1, 3) - 1;
        let ppn = ranks as f64 / nodes as f64;
        let channels = f64::from(graph.channels);
        // The LL ceiling: the GPU's row on one node, an Intel host's across nodes.
        let ll_max = k.ll_max_gbps[if nodes == 1 { g } else { 0 }][column];
        let collnet = algorithm.uses_collnet();
        let mut bw = if nodes <= 2 || collnet {
            graph.bw_intra
        } else {
            graph.bw_inter
        };
        match algorithm {
            Algorithm::Nvls | Algorithm::NvlsTree if v >= NcclVersion::V2_28 => {
                if graph.channels < 2 {
                    return 0.0;
                }
                let mut intra =
                    graph.bw_intra * nvls_efficiency(arch) * (channels - 1.0) / channels;
                intra *= if kind == CollectiveKind::AllReduce {
                    2.0
                } else {
                    (ppn - 1.0) / ppn
                };
                let tree = algorithm == Algorithm::NvlsTree;
                let inter = graph.bw_inter * if nodes <= 2 && tree { 2.0 } else { 1.0 };
                let ceiling = if tree {
                    nvls_tree_channel_gbps(arch, column)
                } else {
                    f64::INFINITY
                };
                bw = intra.min(inter).min(ceiling);
            }
            Algorithm::Nvls => bw = graph.bw_intra.min(graph.bw_inter),
            Algorithm::NvlsTree => {
                let inter = if nodes <= 2 {
                    graph.bw_inter
                } else {
                    graph.bw_inter / 2.0
                };
                bw = graph.bw_intra.min(inter);
            }
            _ => {}
        }
        let mut bus = channels * bw;
        let ring_ll_share = if v >= NcclVersion::V2_21 {
            0.5
        } else if nodes > 1 || matches!(kind, CollectiveKind::AllReduce | CollectiveKind::Reduce) {
            0.25
        } else {
            1.0 / 3.0
        };
        match (algorithm, protocol) {
            (Algorithm::Ring, Protocol::Ll) => bus = ll_max.min(bus * ring_ll_share),
            (Algorithm::Ring, Protocol::Ll128) => {
                let share = if v <= NcclVersion::V2_21 && ppn < 2.0 {
                    0.7
                } else {
                    0.92
                };
                bus = (bus * share).min(channels * k.per_channel_ring_ll128_gbps[g][column]);
            }
            (Algorithm::Tree, _) => {
                bus = (bus * 0.92).min(channels * k.per_channel_tree_gbps[g][column]);
                match protocol {
                    Protocol::Ll => bus = (bus / 3.8).min(ll_max),
                    Protocol::Ll128 => {
                        let share = if nodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                        bus =
                            (bus * share).min(channels * k.per_channel_tree_ll128_gbps[g][column]);
                    }
                    Protocol::Simple => {}
                }
            }
            (Algorithm::Pat, _) => {
                bus *= if v == NcclVersion::V2_23 { 0.85 } else { 0.75 };
            }
            (Algorithm::CollnetDirect, _) => {
                let gathers = matches!(
                    kind,
                    CollectiveKind::AllGather | CollectiveKind::ReduceScatter
                );
                if gathers {
                    bus = ppn * graph.bw_intra.min(graph.bw_inter * 0.9);
                } else {
                    // Full speed needs a NIC per GPU.
                    let mut factor = ppn / channels;
                    factor -= (factor - 1.0) / 2.0;
                    bus /= factor;
                    if arch >= GpuArch::Hopper {
                        bus *= 0.85;
                    }
                }
            }
            _ => {}
        }
        // Bus to algorithm bandwidth; All-Gather and Reduce-Scatter other than Ring stay
        // as they are (from 2.23).
        let gathers = matches!(
            kind,
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter
        );
        if algorithm != Algorithm::Ring && gathers && v >= NcclVersion::V2_23 {
            return bus;
        }
        let steps = nsteps(kind, ranks) as f64;
        let ratio = match algorithm {
            Algorithm::Ring => ranks as f64 / steps,
            Algorithm::Nvls | Algorithm::NvlsTree if v >= NcclVersion::V2_28 => {
                ranks as f64 / steps
            }
            Algorithm::Nvls | Algorithm::NvlsTree => 5.0 / 6.0,
            _ => 0.5,
        };
        bus * ratio
    }

    /// NCCL's latency for the pair, us.
    fn latency(
        &self,
        k: &NcclConstants,
        kind: CollectiveKind,
        algorithm: Algorithm,
        protocol: Protocol,
        graph: &Graph,
    ) -> f64 {
        let v = self.version;
        let (nodes, ranks) = (self.comm.nodes, self.comm.ranks);
        let (a, p) = (algorithm.index(), protocol.index());
        let local = (ranks / nodes) as f64;
        let intra_hw = if graph.nvlink { HW_NVLINK } else { 1 };
        let mut intra = k.hw_latency_us[intra_hw][a][p];
        let exposed = v >= NcclVersion::V2_23 && ranks == nodes;
        // With one GPU per node every latency is exposed: the tree's network figure. (The
        // graph's own network latency, added on top in NCCL, is none on the machines
        // modelled.)
        let inter = if exposed {
            k.hw_latency_us[HW_NET][Algorithm::Tree.index()][p]
        } else {
            k.hw_latency_us[HW_NET][a][p]
        };
        let base = k.base_latency_us[a][p];
        let steps = nsteps(kind, ranks) as f64;
        match algorithm {
            Algorithm::Ring
                if matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce) =>
            {
                let hw = if nodes == 1 { intra_hw } else { HW_NET };
                if graph.same_channels {
                    base + k.hw_latency_us[hw][a][p]
                } else {
                    // Channels on different rings: a step per rank, Simple at the tree's.
                    let step_of = if protocol == Protocol::Simple {
                        Algorithm::Tree.index()
                    } else {
                        a
                    };
                    base + steps * k.hw_latency_us[hw][step_of][p]
                }
            }
            Algorithm::Ring => {
                if nodes > 1 {
                    let overhead = NET_OVERHEAD_US
                        * if protocol == Protocol::Simple {
                            3.0
                        } else {
                            1.0
                        };
                    intra = intra.max(overhead);
                }
                let inter_steps = match (nodes, kind, v >= NcclVersion::V2_23) {
                    (1, _, true) => 0.0,
                    (_, CollectiveKind::AllReduce, true) => 2.0 * (nodes as f64 - 1.0),
                    (_, CollectiveKind::AllReduce, false) if nodes > 1 => 2.0 * nodes as f64,
                    (_, CollectiveKind::AllReduce, false) => 0.0,
                    _ => nodes as f64 - 1.0,
                };
                base + (steps - inter_steps) * intra + inter_steps * inter
            }
            Algorithm::Tree => base + 2.0 * ((local - 1.0) * intra + log2i(nodes) * inter),
            Algorithm::CollnetDirect => {
                base + 2.0 * ((local - 1.0).min(1.0) * intra + (local - 1.0) * 0.4) + inter
            }
            Algorithm::CollnetChain => base + 2.0 * (local - 1.0) * intra + inter,
            Algorithm::Nvls => intra + if nodes > 1 { inter } else { 0.0 },
            Algorithm::NvlsTree => base + intra + 2.0 * log2i(nodes) * inter,
            Algorithm::Pat => 8.0 + log2i(nodes) * (inter / 3.5) + ranks as f64 * 2.8,
        }
    }

    /// NCCL's predicted time of `bytes` with the pair, us; `None` where NCCL would not run
    /// it.
    pub fn time_us(
        &self,
        kind: CollectiveKind,
        algorithm: Algorithm,
        protocol: Protocol,
        bytes: u64,
    ) -> Option<f64> {
        let c = TUNED.iter().position(|&k| k == kind)?;
        let (a, p) = (algorithm.index(), protocol.index());
        let mut bw = self.bandwidth_gbps[c][a][p];
        let mut latency = self.latency_us[c][a][p];
        if bw <= 0.0 || bw.is_nan() {
            return None;
        }
        let log_size = (bytes >> 6).max(1).ilog2() as usize;
        let bucketed = bytes >= 64;
        if algorithm == Algorithm::Tree
            && kind == CollectiveKind::AllReduce
            && bucketed
            && log_size < 23
        {
            bw *= TREE_CORRECTION[p][log_size];
        }
        let per_rank = bytes / (u64::from(self.channels) * self.comm.ranks as u64).max(1);
        if algorithm == Algorithm::Ring
            && protocol == Protocol::Simple
            && self.comm.nodes > 1
            && kind == CollectiveKind::AllReduce
            && per_rank >= 64
        {
            latency *= if self.comm.arch < GpuArch::Ampere {
                1.9
            } else {
                1.4
            };
        }
        Some(latency + bytes as f64 / (1000.0 * bw))
    }

    /// The pair NCCL runs for `kind` at `bytes`, among `algorithm`'s only where it is
    /// given (`NCCL_ALGO`) and `protocol`'s where given (`NCCL_PROTO`), with NCCL's time
    /// for it; `None` where nothing allowed runs.
    pub fn pick(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        algorithm: Option<Algorithm>,
        protocol: Option<Protocol>,
    ) -> Option<(Algorithm, Protocol, f64)> {
        let mut best: Option<(Algorithm, Protocol, f64)> = None;
        for a in Algorithm::ALL {
            if algorithm.is_some_and(|held| held != a) {
                continue;
            }
            for p in Protocol::ALL {
                if protocol.is_some_and(|held| held != p) {
                    continue;
                }
                if let Some(t) = self.time_us(kind, a, p, bytes) {
                    if best.map_or(true, |(_, _, b)| t < b) {
                        best = Some((a, p, t));
                    }
                }
            }
        }
        best
    }
}

/// The graph NCCL prices `algorithm` on.
fn graph_of(graphs: &Graphs, algorithm: Algorithm) -> Graph {
    match algorithm {
        Algorithm::Ring | Algorithm::Pat => graphs.ring,
        Algorithm::Tree => graphs.tree,
        Algorithm::CollnetDirect | Algorithm::CollnetChain => graphs.collnet,
        Algorithm::Nvls | Algorithm::NvlsTree => graphs.nvls,
    }
}

/// A ring's steps for `kind` on `ranks` ranks.
fn nsteps(kind: CollectiveKind, ranks: usize) -> usize {
    match kind {
        CollectiveKind::AllReduce => 2 * (ranks - 1),
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter => ranks - 1,
        _ => ranks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::search::{Machine, NodeFabric};

    fn h100(nodes: usize) -> (Comm, Graphs) {
        let machine = Machine {
            arch: GpuArch::Hopper,
            nodes,
            gpus_per_node: 8,
            fabric: NodeFabric::NvSwitch { nvlinks: 18.0 },
            nics: if nodes > 1 { 8 } else { 0 },
            nic_gbps: 50.0,
            network_gbps: if nodes > 1 { 400.0 } else { 0.0 },
            nvls: true,
            sharp: false,
        };
        let comm = Comm {
            ranks: 8 * nodes,
            nodes,
            arch: GpuArch::Hopper,
            nvls: true,
            collnet: false,
        };
        (comm, machine.graphs())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-4 * b.abs()
    }

    #[test]
    fn versions_parse_into_bands_or_are_refused() {
        assert_eq!(NcclVersion::parse("2.26.2"), Ok(NcclVersion::V2_24));
        assert_eq!(NcclVersion::parse("2.19.3-1"), Ok(NcclVersion::V2_19));
        assert_eq!(NcclVersion::parse("2.30"), Ok(NcclVersion::V2_28));
        let e = NcclVersion::parse("2.18.5").unwrap_err();
        assert!(e.contains("2.18") && e.contains("2.19 to 2.30"), "{e}");
        assert!(NcclVersion::parse("two")
            .unwrap_err()
            .contains("2.19 to 2.30"));
    }

    /// One H100 node, 1 GiB All-Reduce, NCCL 2.26: NVLS on 8 channels of 40 GB/s is
    /// 320 GB/s of bus bandwidth, 5/6 of it algorithm bandwidth, after 25 us on NVLink;
    /// Ring/Simple on 12 channels of 30 GB/s carries 360 x 8/14 after 8.4 + 14 x 3.4 us.
    #[test]
    fn one_h100_node_runs_nvls_at_large_sizes() {
        let (comm, graphs) = h100(1);
        let t = NcclTuning::new(NcclVersion::V2_24, comm, &graphs);
        let kind = CollectiveKind::AllReduce;
        let bytes = 1u64 << 30;
        let nvls = 25.0 + bytes as f64 / (1000.0 * 320.0 * 5.0 / 6.0);
        let ring = 8.4 + 14.0 * 3.4 + bytes as f64 / (1000.0 * 360.0 * 8.0 / 14.0);
        let (a, p, time) = t.pick(kind, bytes, None, None).unwrap();
        assert_eq!((a, p), (Algorithm::Nvls, Protocol::Simple));
        assert!(close(time, nvls), "{time} against {nvls}");
        let held = t.pick(kind, bytes, Some(Algorithm::Ring), None).unwrap();
        assert_eq!(held.1, Protocol::Simple);
        assert!(close(held.2, ring), "{} against {ring}", held.2);
        // NVLS-Tree needs two nodes, PAT one GPU per node.
        assert_eq!(
            t.time_us(kind, Algorithm::NvlsTree, Protocol::Simple, bytes),
            None
        );
        assert_eq!(
            t.time_us(
                CollectiveKind::AllGather,
                Algorithm::Pat,
                Protocol::Simple,
                bytes
            ),
            None
        );
    }

    /// Two H100 nodes, 8 bytes: Tree/LL's 6.8 + 2 x (7 x 0.6 + 5.0) us beats Ring/LL's
    /// 6.6 + 28 x 1.0 (the network overhead over NVLink's 0.6) + 2 x 2.7; its bandwidth is
    /// LL's ceiling across nodes (39 GB/s), halved by the tree.
    #[test]
    fn two_h100_nodes_run_tree_ll_at_tiny_sizes() {
        let (comm, graphs) = h100(2);
        let t = NcclTuning::new(NcclVersion::V2_24, comm, &graphs);
        let kind = CollectiveKind::AllReduce;
        let (a, p, time) = t.pick(kind, 8, None, None).unwrap();
        assert_eq!((a, p), (Algorithm::Tree, Protocol::Ll));
        assert!(close(time, 25.2 + 8.0 / (1000.0 * 19.5)), "{time}");
        let ring = t.time_us(kind, Algorithm::Ring, Protocol::Ll, 8).unwrap();
        assert!(
            close(ring, 40.0 + 8.0 / (1000.0 * 39.0 * 16.0 / 30.0)),
            "{ring}"
        );
        // NVLS needs SHARP across nodes; NVLS-Tree runs.
        assert_eq!(t.time_us(kind, Algorithm::Nvls, Protocol::Simple, 8), None);
        assert!(t
            .time_us(kind, Algorithm::NvlsTree, Protocol::Simple, 8)
            .is_some());
    }

    /// The pick is the fastest enabled pair NCCL's model prices, at every size: no other
    /// pair it runs is priced below it.
    #[test]
    fn the_pick_is_never_priced_slower_than_another_pair() {
        for nodes in [1, 2, 4, 16] {
            let (comm, graphs) = h100(nodes);
            for version in NcclVersion::ALL {
                let t = NcclTuning::new(version, comm, &graphs);
                for kind in TUNED {
                    for e in 0..=34 {
                        let bytes = 1u64 << e;
                        let (_, _, best) = t.pick(kind, bytes, None, None).unwrap();
                        for a in Algorithm::ALL {
                            for p in Protocol::ALL {
                                if let Some(other) = t.time_us(kind, a, p, bytes) {
                                    assert!(best <= other, "{version} {nodes} {kind} {bytes}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
