//! The NCCL tuner's cost model: which of NCCL's own algorithms, protocols and channel
//! counts is fastest for a collective and size on our topology model. The plugin layer
//! (`plugin::tuner_for`) finds the topology and builds a [`Tuner`] once, at init; the ABI
//! glue (`ffi::tuner`) only looks decisions up.
//!
//! # The model
//!
//! For each collective NCCL tunes (Broadcast, Reduce, All-Gather, Reduce-Scatter,
//! All-Reduce) and each of NCCL's algorithms that runs it — Ring always, Tree for
//! All-Reduce only, as in NCCL — the simulator runs our baseline of the same shape (the
//! ring baseline for Ring, the double binary tree for Tree; rooted collectives from rank 0)
//! on the topology, and reduces it to size-independent parts (`profile`): a zero-byte
//! latency per protocol, a time per byte, and each NPU's bytes sent. On a [`Cluster`] of
//! identical nodes the same parts come from formulas (`formula`) instead, at any size
//! ([`Network`] says which). A protocol adds
//! NCCL's own figures ([`ProtocolCost`], from `ncclTunerConstants_v5_t` when the host gives
//! it, else NCCL's defaults). The predicted time of size S with `c` channels is
//!
//! ```text
//! base + latency + S * max(time_per_byte / efficiency, max over NPUs of sent / min(limit(c), efficiency * egress))
//! ```
//!
//! - `base`: NCCL's baseLatencies for the (algorithm, protocol);
//! - `latency`: the zero-byte simulation with each hop costing the larger of the link's
//!   alpha and NCCL's hwLatencies step for the protocol (NVLink inside an NVLink domain,
//!   network across);
//! - `time_per_byte / efficiency`: the link-limited time; a protocol moves data at
//!   `efficiency` of link speed (Ring: LL 0.5, LL128 0.92, Simple 1; Tree: 0.92 times LL
//!   1/3.8, LL128 7/9 on one node or 120/128 across, Simple 1 — NCCL's own factors);
//! - the injection term: NCCL runs `c` channels, each at most a per-channel rate
//!   (perChMax*Bws; LL also at most llMaxBws for all channels), and no faster than the
//!   NPU's links allow.
//!
//! Algorithm and protocol: the lowest predicted time with [`MAX_CHANNELS`] channels.
//! Channels: where the pair has a per-channel limit, the saturating count is the fewest
//! channels (powers of two) that inject at the NPUs' full link rate; the model asks for
//! the fewest channels whose time, judged on the injection term alone, is within 1% of the
//! time with the saturating count, and only when that is fewer — mostly sizes where
//! latency dominates. The simulated link-limited time is left out of this judgment: it does
//! not change with the channel count (every channel runs the same schedule) and, on
//! unwound switches, would hide how many channels NCCL needs to fill a GPU's links.
//! Otherwise NCCL keeps its own channel count, which knows its rings and NICs better.
//!
//! Every rank computes the same decisions from the same inputs (environment, nRanks,
//! nNodes, NCCL's constants), with no timing or randomness involved: NCCL needs all ranks
//! to agree on the algorithm and protocol of each collective.
//!
//! Decisions are computed for every power-of-two size band (band b holds sizes in
//! [2^b, 2^(b+1)), priced at 2^(b+1/2)), so a lookup is a table index.
//!
//! Not modeled: CollNet, NVLS and PAT (the glue leaves NCCL's choice alone when NCCL
//! prefers one of them), NCCL's graph search (its rings use several NICs per node where
//! our ring crosses nodes once per direction), tree correction factors, network overheads,
//! the root of Broadcast and Reduce, grouped operations (`numPipeOps`) and registered
//! buffers.

mod cluster;
mod constants;
mod fabric;
mod formula;
pub mod nccl_tuning;
pub(crate) mod profile;
mod protocol;
pub mod search;

pub use cluster::{Cluster, LinkKind};
pub use constants::NcclConstants;
pub(crate) use fabric::shape as fabric_shape;
pub use protocol::ProtocolCost;

use crate::collective::CollectiveKind;
use crate::error::{echo, Error, Result};
use crate::gpu::{Algorithm, GpuArch, Protocol};
use crate::topology::Topology;
use crate::units::format_size;
use profile::{Profile, Profiler};

/// The collectives NCCL tunes, in NCCL's numbering (`ncclFunc_t` 0 to 4).
pub const TUNED: [CollectiveKind; 5] = [
    CollectiveKind::Broadcast,
    CollectiveKind::Reduce,
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
];

/// Most channels the model considers (NCCL's MAXCHANNELS).
pub const MAX_CHANNELS: u32 = 32;
/// Channel counts the model tries.
const CHANNEL_COUNTS: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Fewer channels are enough when within this share of the time with saturating channels.
const CHANNEL_TOLERANCE: f64 = 0.01;
/// Size bands: band b holds sizes in [2^b, 2^(b+1)); band 0 also holds 0.
const BANDS: usize = 64;

/// What the model prices NCCL's algorithms on.
#[derive(Clone, Copy, Debug)]
pub enum Network<'a> {
    /// A topology: the baselines are simulated on it (time and memory grow with the square
    /// of the ranks; the plugin keeps this to small communicators).
    Simulated(&'a Topology),
    /// Identical nodes, named `name`: priced by formulas, at any size.
    Cluster { cluster: Cluster, name: &'a str },
}

impl Network<'_> {
    fn name(&self) -> &str {
        match self {
            Network::Simulated(topo) => topo.name(),
            Network::Cluster { name, .. } => name,
        }
    }

    fn npus(&self) -> usize {
        match self {
            Network::Simulated(topo) => topo.alive_npus().len(),
            Network::Cluster { cluster, .. } => cluster.npus(),
        }
    }
}

/// An error unless the topology `name` (from `source`) has as many NPUs as the
/// communicator has ranks.
pub fn check_ranks(name: &str, source: &str, npus: usize, ranks: usize) -> Result<()> {
    if npus == ranks {
        return Ok(());
    }
    Err(Error::Topology(format!(
        "the topology ({}, from {}) has {npus} NPUs but the communicator has {ranks} ranks",
        echo(name),
        echo(source)
    )))
}

/// One (algorithm, protocol) with its predicted time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// Predicted time with `MAX_CHANNELS` channels, microseconds.
    pub time_us: f64,
    /// Channels to ask NCCL for; `None`: NCCL decides.
    pub channels: Option<u32>,
}

/// What NCCL tells a tuner about the communicator at init.
#[derive(Clone, Debug, PartialEq)]
pub struct Communicator {
    pub ranks: usize,
    pub nodes: usize,
    /// NCCL's tuning constants (v5+); `None`: NCCL's defaults.
    pub constants: Option<NcclConstants>,
}

/// An (algorithm, protocol) with its costs and its algorithm's profile.
struct Candidate<'p> {
    algorithm: Algorithm,
    protocol: Protocol,
    cost: ProtocolCost,
    profile: &'p Profile,
}

impl Candidate<'_> {
    /// Fixed part of the time: start-up and zero-byte latency, microseconds.
    fn fixed_us(&self) -> f64 {
        self.cost.base_us + self.profile.latency_us[self.protocol.index()]
    }

    /// Microseconds per byte the NPUs need to inject their data with `channels`.
    fn injection_us_per_byte(&self, channels: u32) -> f64 {
        let limit = self.cost.rate_limit_gbps(channels);
        self.profile
            .injection
            .iter()
            .map(|&(sent, egress)| sent / (limit.min(self.cost.efficiency * egress) * 1e3))
            .fold(0.0, f64::max)
    }

    fn time_us(&self, bytes: f64) -> f64 {
        let links = self.profile.us_per_byte / self.cost.efficiency;
        let injection = self.injection_us_per_byte(MAX_CHANNELS);
        self.fixed_us() + bytes * links.max(injection)
    }

    /// Channels to ask for at `bytes`; `None` where the pair has no per-channel limit or
    /// the size needs every channel that helps.
    fn channels(&self, bytes: f64) -> Option<u32> {
        self.cost.channel_gbps?;
        let full_rate = self.injection_us_per_byte(MAX_CHANNELS);
        let saturating = CHANNEL_COUNTS
            .into_iter()
            .find(|&c| self.injection_us_per_byte(c) <= full_rate)
            .unwrap_or(MAX_CHANNELS);
        let time = |c| self.fixed_us() + bytes * self.injection_us_per_byte(c);
        let enough = (1.0 + CHANNEL_TOLERANCE) * time(saturating);
        CHANNEL_COUNTS
            .into_iter()
            .find(|&c| c < saturating && time(c) <= enough)
    }
}

/// Decisions for one communicator: per tuned collective and size band, every modeled
/// (algorithm, protocol), fastest first.
#[derive(Clone, Debug)]
pub struct Tuner {
    /// `choices[collective][band]`, collectives as in [`TUNED`].
    choices: Vec<Vec<Vec<Choice>>>,
    description: String,
    warnings: Vec<String>,
}

impl Tuner {
    /// Prices every decision for communicator `comm` on `network` (from `source`, as
    /// messages name it), whose NVLink domains hold `domain_size` NPUs apart in id (a
    /// cluster's must be its nodes); `gpu` picks NCCL's per-generation figures. `assumed`
    /// (what finding the topology had to assume) heads the tuner's warnings; invalid host
    /// constants add one and are replaced by NCCL's defaults.
    pub fn new(
        network: Network,
        source: &str,
        domain_size: usize,
        assumed: Vec<String>,
        comm: &Communicator,
        gpu: GpuArch,
    ) -> Result<Tuner> {
        let mut warnings = assumed;
        let constants = match &comm.constants {
            Some(c) => match c.first_invalid() {
                None => c.clone(),
                Some(bad) => {
                    warnings.push(format!(
                        "NCCL's tuning constants have {bad}; using NCCL's defaults"
                    ));
                    NcclConstants::default()
                }
            },
            None => NcclConstants::default(),
        };
        let constants = &constants;
        let npus = network.npus();
        check_ranks(network.name(), source, npus, comm.ranks)?;
        if npus < 2 {
            return Err(Error::Topology(
                "a communicator of one rank has nothing to tune".into(),
            ));
        }
        let pricer = match network {
            Network::Simulated(topo) => {
                Pricer::Simulation(Box::new(Profiler::new(topo, domain_size)?))
            }
            Network::Cluster { cluster, .. } if cluster.size == domain_size => {
                Pricer::Formulas(cluster)
            }
            Network::Cluster { cluster, .. } => {
                return Err(Error::Topology(format!(
                    "NVLink domains of {domain_size} GPUs do not match the topology's nodes of {}",
                    cluster.size
                )))
            }
        };
        let mut choices = Vec::with_capacity(TUNED.len());
        for kind in TUNED {
            let algorithms: &[Algorithm] = if kind == CollectiveKind::AllReduce {
                &[Algorithm::Tree, Algorithm::Ring]
            } else {
                &[Algorithm::Ring]
            };
            let mut profiles = Vec::new();
            for &algorithm in algorithms {
                let costs = Protocol::ALL
                    .map(|p| ProtocolCost::new(constants, gpu, comm.nodes, algorithm, p));
                profiles.push((algorithm, costs, pricer.profile(kind, algorithm, &costs)?));
            }
            let candidates: Vec<Candidate> = profiles
                .iter()
                .flat_map(|(algorithm, costs, profile)| {
                    Protocol::ALL.map(|protocol| Candidate {
                        algorithm: *algorithm,
                        protocol,
                        cost: costs[protocol.index()],
                        profile,
                    })
                })
                .collect();
            choices.push((0..BANDS).map(|band| rank(&candidates, band)).collect());
        }
        Ok(Tuner {
            choices,
            description: format!(
                "{} ({}), {npus} ranks on {} node(s), NVLink domains of {}, {gpu} GPUs, {}",
                echo(network.name()),
                echo(source),
                comm.nodes,
                domain_size,
                match network {
                    Network::Simulated(_) => "simulated",
                    Network::Cluster { .. } => "by formulas",
                }
            ),
            warnings,
        })
    }

    /// Prices every decision again with `time_us(collective, bytes, algorithm, protocol)`
    /// (another model's time, us, at the middle of each size band; `None` keeps the
    /// choice's own) and ranks each band anew. The channel advice stays NCCL's model's.
    pub fn reprice(
        &mut self,
        mut time_us: impl FnMut(CollectiveKind, u64, Algorithm, Protocol) -> Option<f64>,
    ) {
        for (kind, bands) in TUNED.iter().zip(&mut self.choices) {
            for (band, ranked) in bands.iter_mut().enumerate() {
                let bytes = 2f64.powf(band as f64 + 0.5) as u64;
                for choice in ranked.iter_mut() {
                    if let Some(t) = time_us(*kind, bytes, choice.algorithm, choice.protocol) {
                        choice.time_us = t;
                    }
                }
                ranked.sort_by(|a, b| a.time_us.total_cmp(&b.time_us));
            }
        }
    }

    /// Adds a warning (what the plugin logs at init).
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// Every modeled (algorithm, protocol) for `kind` at `bytes`, fastest first; empty for
    /// collectives NCCL does not tune.
    pub fn choices(&self, kind: CollectiveKind, bytes: u64) -> &[Choice] {
        match TUNED.iter().position(|&k| k == kind) {
            Some(i) => &self.choices[i][band(bytes)],
            None => &[],
        }
    }

    /// The topology and communicator the decisions are for, in one line.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// What had to be assumed on the way.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// One line per collective: the fastest choice over ranges of sizes, e.g.
    /// `allreduce: 0 B.. tree/LL (1 ch), 64 KiB.. ring/LL128, 4 MiB.. ring/Simple`.
    pub fn summary(&self) -> Vec<String> {
        TUNED
            .iter()
            .zip(&self.choices)
            .map(|(kind, bands)| {
                let mut parts: Vec<String> = Vec::new();
                let mut last = None;
                for (b, ranked) in bands.iter().enumerate().take(41) {
                    let best = &ranked[0];
                    let key = (best.algorithm, best.protocol, best.channels);
                    if last != Some(key) {
                        let from = if b == 0 {
                            "0 B".into()
                        } else {
                            format_size(1 << b)
                        };
                        let channels = best
                            .channels
                            .map_or(String::new(), |c| format!(" ({c} ch)"));
                        parts.push(format!(
                            "{from}.. {}/{}{channels}",
                            best.algorithm, best.protocol
                        ));
                        last = Some(key);
                    }
                }
                format!("{}: {}", kind.name(), parts.join(", "))
            })
            .collect()
    }
}

/// How profiles are drawn: by simulation on a topology, or by formulas on a cluster.
enum Pricer<'a> {
    Simulation(Box<Profiler<'a>>),
    Formulas(Cluster),
}

impl Pricer<'_> {
    fn profile(
        &self,
        kind: CollectiveKind,
        algorithm: Algorithm,
        costs: &[ProtocolCost; 3],
    ) -> Result<Profile> {
        match self {
            Pricer::Simulation(profiler) => profiler.profile(kind, algorithm, costs),
            Pricer::Formulas(cluster) => formula::profile(cluster, kind, algorithm, costs),
        }
    }
}

/// The size band of `bytes`: floor(log2), 0 for 0 and 1.
fn band(bytes: u64) -> usize {
    bytes.max(1).ilog2() as usize
}

/// Candidates ranked by predicted time at the middle of `band` (stable: ties keep the
/// candidates' order).
fn rank(candidates: &[Candidate], band: usize) -> Vec<Choice> {
    let bytes = 2f64.powf(band as f64 + 0.5);
    let mut ranked: Vec<Choice> = candidates
        .iter()
        .map(|c| Choice {
            algorithm: c.algorithm,
            protocol: c.protocol,
            time_us: c.time_us(bytes),
            channels: c.channels(bytes),
        })
        .collect();
    ranked.sort_by(|a, b| a.time_us.total_cmp(&b.time_us));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tuner for `ranks` Ampere GPUs on `nodes` nodes of the topology `spec`, with
    /// NVLink domains of one node each.
    fn build(
        spec: &str,
        ranks: usize,
        nodes: usize,
        constants: Option<NcclConstants>,
    ) -> Result<Tuner> {
        let topo = crate::topology::parse_spec(spec, &Default::default())?;
        let comm = Communicator {
            ranks,
            nodes,
            constants,
        };
        let domain = ranks.div_ceil(nodes);
        let network = Network::Simulated(&topo);
        Tuner::new(network, spec, domain, Vec::new(), &comm, GpuArch::Ampere)
    }

    fn tuner(spec: &str, ranks: usize, nodes: usize) -> Tuner {
        build(spec, ranks, nodes, None).unwrap()
    }

    fn choice(t: &Tuner, kind: CollectiveKind, bytes: u64, a: Algorithm, p: Protocol) -> Choice {
        let found = t
            .choices(kind, bytes)
            .iter()
            .find(|c| (c.algorithm, c.protocol) == (a, p));
        *found.unwrap()
    }

    #[test]
    fn bands_are_powers_of_two() {
        assert_eq!(band(0), 0);
        assert_eq!(band(1), 0);
        assert_eq!(band(2), 1);
        assert_eq!(band(1023), 9);
        assert_eq!(band(1024), 10);
        assert_eq!(band(u64::MAX), 63);
    }

    #[test]
    fn tiny_sizes_take_ll_and_huge_ones_simple() {
        // LL has the lowest start-up and step latencies of NCCL's defaults on every kind of
        // link, so with no data it is fastest; at 64 GiB the bandwidth term dwarfs every
        // latency, and Simple moves data at the highest share of link speed.
        let t = tuner("preset:dgx-a100,nodes=2", 16, 2);
        for kind in TUNED {
            assert_eq!(t.choices(kind, 8)[0].protocol, Protocol::Ll, "{kind}");
            assert_eq!(
                t.choices(kind, 64 << 30)[0].protocol,
                Protocol::Simple,
                "{kind}"
            );
            let algorithms = t.choices(kind, 1024).iter().map(|c| c.algorithm);
            let trees = algorithms.filter(|&a| a == Algorithm::Tree).count();
            assert_eq!(
                trees,
                if kind == CollectiveKind::AllReduce {
                    3
                } else {
                    0
                }
            );
        }
        assert!(t.choices(CollectiveKind::AllToAll, 8).is_empty());
    }

    #[test]
    fn choices_are_ranked_and_channels_bounded() {
        let t = tuner("preset:dgx-a100,nodes=2", 16, 2);
        for kind in TUNED {
            for b in 0..BANDS {
                let ranked = t.choices(kind, 1 << b);
                assert!(ranked.windows(2).all(|w| w[0].time_us <= w[1].time_us));
                for c in ranked {
                    assert!(c.time_us.is_finite() && c.time_us > 0.0);
                    assert!(c.channels.map_or(true, |n| (1..MAX_CHANNELS).contains(&n)));
                }
            }
        }
        // Ring/Simple has no per-channel limit in NCCL's model: never a channel count.
        let ring_simple = choice(
            &t,
            CollectiveKind::AllGather,
            1 << 30,
            Algorithm::Ring,
            Protocol::Simple,
        );
        assert_eq!(ring_simple.channels, None);
    }

    #[test]
    fn latency_bound_sizes_take_one_channel() {
        // Tree/LL at 8 bytes: the injection term (8 bytes at a few GB/s) is far below 1%
        // of the microseconds of latency, so one channel is as fast as many.
        let t = tuner("preset:dgx-a100,nodes=2", 16, 2);
        let tree_ll = |bytes| {
            choice(
                &t,
                CollectiveKind::AllReduce,
                bytes,
                Algorithm::Tree,
                Protocol::Ll,
            )
        };
        assert_eq!(tree_ll(8).channels, Some(1));
        // At 1 GiB the injection term grows with the size: no reduction is asked for.
        assert_eq!(tree_ll(1 << 30).channels, None);
    }

    #[test]
    fn rank_mismatch_is_an_error_naming_both_counts() {
        let e = build("preset:dgx-a100,nodes=2", 8, 1, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("16 NPUs") && e.contains("8 ranks"), "{e}");
    }

    #[test]
    fn invalid_constants_fall_back_to_defaults_with_a_warning() {
        let mut constants = NcclConstants::default();
        constants.base_latency_us[1][0] = f64::INFINITY;
        let t = build("preset:hgx-a100", 8, 1, Some(constants)).unwrap();
        let warning = &t.warnings()[0];
        assert!(warning.contains("baseLatencies[3] = inf"), "{warning}");
    }

    #[test]
    fn host_constants_steer_the_choice() {
        // With LL's start-up latency made enormous, LL can no longer win at 8 bytes.
        let mut constants = NcclConstants::default();
        constants.base_latency_us[0][0] = 1e6;
        constants.base_latency_us[1][0] = 1e6;
        let t = build("preset:hgx-a100", 8, 1, Some(constants)).unwrap();
        let best = t.choices(CollectiveKind::AllReduce, 8)[0];
        assert_ne!(best.protocol, Protocol::Ll);
    }
}
