//! The NCCL tuner's per-communicator decisions, free of the ABI: the model ([`Tuner`]) on
//! the topology the settings name, and how its choice is handed to NCCL: set outright for
//! tuner v2, which cannot see what NCCL disabled, or by lowering one entry of NCCL's cost
//! table for v3 and later.

use super::{plan, Config, Layout, Log, NvlDomains};
use crate::collective::CollectiveKind;
use crate::cost::{ExecModel, NcclShapes};
use crate::error::{echo, Error, Result};
use crate::gpu::{GpuArch, Protocol};
use crate::tuner::{
    check_ranks, Choice, Cluster, Communicator, NcclConstants, Network, Tuner, TUNED,
};
use std::time::Instant;

/// The most ranks the tuner simulates NCCL's algorithms for (up to 0.6 s of init; time
/// and memory grow with the square of the ranks). Larger communicators are priced by
/// formulas when their topology is a cluster of identical nodes, else left to NCCL.
pub const SIMULATED_RANKS_MAX: usize = 64;
/// The most ranks the formulas price (time and memory grow with the ranks: about 0.5 s
/// and 75 MB at 65,536); beyond, NCCL keeps its own choices.
pub const FORMULA_RANKS_MAX: usize = 1 << 17;

/// The model's decisions for a communicator of `comm` on the cluster `config` names
/// ([`plan`]); the tuner's warnings start with what discovery had to assume. Up to
/// [`FORMULA_RANKS_MAX`] ranks by formulas on clusters of identical nodes where they give
/// the simulation's choices (nodes of 4 or 8 GPUs, from 4 nodes); other topologies up to
/// [`SIMULATED_RANKS_MAX`] ranks by simulation; otherwise an error, so the plugin leaves
/// NCCL its choices. Either way NCCL's algorithms are then ranked by
/// the executor cost model. Nothing is built or read before its size is known to fit.
pub fn tuner_for(config: &Config, comm: &Communicator, nvl: Option<NvlDomains>) -> Result<Tuner> {
    let found = plan(config, comm.ranks, comm.nodes, nvl)?;
    let (gpu, domain) = (config.gpu(), found.domain_size);
    let (mut cluster, mut nics) = (None, None);
    if let Layout::Composed {
        name,
        dims,
        nics: recorded,
    } = &found.layout
    {
        nics = recorded.map(|n| n.count);
        let npus = dims
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(d.size))
            .unwrap_or(usize::MAX);
        check_ranks(name, &found.source, npus, comm.ranks)?;
        cluster = Cluster::from_dims(dims, domain).map(|c| (c, name));
    }
    // Constants other than NCCL's defaults are someone's deliberate tuning: kept.
    let tuned_by_host = comm
        .constants
        .as_ref()
        .is_some_and(|c| *c != NcclConstants::default());
    let rank_by_executor =
        |tuner: &mut Tuner, shapes: &dyn Fn(CollectiveKind, u32) -> Result<NcclShapes>| {
            if tuned_by_host {
                return;
            }
            if let Err(e) = price_with_executor(tuner, gpu, shapes) {
                tuner.warn(format!(
                "the executor cost model could not price NCCL's algorithms ({}); ranking by NCCL's own constants",
                e.message()
            ));
            }
        };
    let by_formula = cluster.is_some_and(|(c, _)| formulas_agree(&c));
    if comm.ranks <= SIMULATED_RANKS_MAX && !by_formula {
        let found = found.build()?;
        let network = Network::Simulated(&found.topology);
        let mut tuner = Tuner::new(network, &found.source, domain, found.warnings, comm, gpu)?;
        let topo = &found.topology;
        rank_by_executor(&mut tuner, &|kind, channels| {
            NcclShapes::new(topo, kind, domain, channels)
        });
        return Ok(tuner);
    }
    let limit = |limit: usize, context: String| Error::Limit {
        what: "ranks",
        value: comm.ranks as u64,
        limit: limit as u64,
        context,
    };
    match cluster {
        Some((cluster, name)) if comm.ranks <= FORMULA_RANKS_MAX => {
            let network = Network::Cluster { cluster, name };
            let mut tuner = Tuner::new(network, &found.source, domain, found.warnings, comm, gpu)?;
            rank_by_executor(&mut tuner, &|kind, channels| {
                NcclShapes::for_cluster(&cluster, nics, kind, channels)
            });
            Ok(tuner)
        }
        Some(_) => Err(limit(
            FORMULA_RANKS_MAX,
            "the tuner's formulas for clusters of identical nodes".into(),
        )),
        None => Err(limit(
            SIMULATED_RANKS_MAX,
            format!(
                "{} is not a cluster of identical nodes of {domain} GPUs (priced by formulas at any size), and other topologies are simulated",
                echo(&found.source)
            ),
        )),
    }
}

/// Whether the formulas give `cluster` the simulation's choices, so it need not be
/// simulated (P^2 time and memory: 0.6 s and 73 MB at 64 ranks): nodes of 4 or 8 GPUs
/// from four nodes on, where the tree's busiest link is a rail many of its routes share
/// (`tuner::formula`'s tests). Elsewhere (one node, nodes of 16 or of 1 GPU) the
/// simulated tree stays above the formulas' bound.
fn formulas_agree(cluster: &Cluster) -> bool {
    cluster.domains >= 4 && matches!(cluster.size, 4 | 8)
}

/// Ranks the tuner's decisions by the executor cost model (`TACOS_PROFILE`, else the GPU
/// generation's built-in profile): the predicted time on the hardware, where NCCL's own
/// constants only pick. `shapes(kind, channels)`: NCCL's algorithms for `kind`, simulated
/// or by formula.
fn price_with_executor(
    tuner: &mut Tuner,
    gpu: GpuArch,
    shapes: &dyn Fn(CollectiveKind, u32) -> Result<NcclShapes>,
) -> Result<()> {
    let model = ExecModel::resolve(None, gpu)?;
    let shapes: Vec<(CollectiveKind, NcclShapes)> = TUNED
        .iter()
        .map(|&kind| Ok((kind, shapes(kind, model.channels)?)))
        .collect::<Result<_>>()?;
    tuner.reprice(|kind, bytes, algorithm, protocol| {
        let (_, shape) = shapes.iter().find(|(k, _)| *k == kind)?;
        shape.time_us(&model, algorithm, protocol, bytes).ok()
    });
    Ok(())
}

/// What the tuner plugin keeps for one communicator.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// The model's decisions; None where it cannot help (every call changes nothing).
    pub tuner: Option<Tuner>,
    /// `NCCL_ALGO` or `NCCL_PROTO` is set: v2 leaves the choice to NCCL.
    pub user_chose_algorithms: bool,
}

impl Tuning {
    /// What init builds from the settings (or why they could not be read); never fails:
    /// where the model cannot help, a tuning that changes nothing, and a warning saying
    /// why. Logs the decisions' summary.
    pub fn start(
        config: Result<Config>,
        comm: Communicator,
        nvl: Option<NvlDomains>,
        log: &dyn Log,
    ) -> Tuning {
        let user_chose_algorithms = config.as_ref().is_ok_and(|c| c.user_chose_algorithms);
        if comm.ranks < 2 {
            log.info("a communicator of one rank has nothing to tune");
            return Tuning {
                tuner: None,
                user_chose_algorithms,
            };
        }
        let started = Instant::now();
        let tuner = match config.and_then(|config| tuner_for(&config, &comm, nvl)) {
            Ok(tuner) => {
                for w in tuner.warnings() {
                    log.warn(w);
                }
                log.info(&format!(
                    "{}; decisions in {:.1} ms",
                    tuner.description(),
                    started.elapsed().as_secs_f64() * 1e3
                ));
                for line in tuner.summary() {
                    log.info(&line);
                }
                Some(tuner)
            }
            Err(e) => {
                log.warn(&format!("{}; NCCL keeps its own choices", e.message()));
                None
            }
        };
        Tuning {
            tuner,
            user_chose_algorithms,
        }
    }

    /// The model's choices for `kind` at `bytes`, fastest first; none for collectives it
    /// does not tune or when it cannot help.
    pub fn choices(&self, kind: CollectiveKind, bytes: u64) -> &[Choice] {
        match &self.tuner {
            Some(tuner) => tuner.choices(kind, bytes),
            None => &[],
        }
    }

    /// Tuner v2's pick, which NCCL takes as it stands: only what NCCL runs everywhere
    /// (Ring, Tree for All-Reduce; LL or Simple), and nothing when the user chose NCCL's
    /// algorithms or CollNet or NVLS is available.
    pub fn pick(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        collnet: bool,
        nvls: bool,
    ) -> Option<&Choice> {
        if self.user_chose_algorithms || collnet || nvls {
            return None;
        }
        self.choices(kind, bytes)
            .iter()
            .find(|c| c.protocol != Protocol::Ll128)
    }

    /// Tuner v3+: lowers the cost of the model's first choice that NCCL has enabled to 0.0
    /// in `table` and returns that choice; nothing changes where the model has no choice
    /// or NCCL would take an algorithm the model does not cover.
    pub fn steer(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        table: &mut CostTable,
    ) -> Option<&Choice> {
        table.steer(self.choices(kind, bytes))
    }
}

/// NCCL's cost table: one block of `algorithms x protocols` floats, microseconds; entries
/// below zero (NCCL writes -1.0) are disabled.
#[derive(Debug)]
pub struct CostTable<'a> {
    costs: &'a mut [f32],
    protocols: usize,
}

impl<'a> CostTable<'a> {
    /// `costs` read as rows of `protocols` entries, one per algorithm; None where that is
    /// no table (no protocols, or a partial row).
    pub fn new(costs: &'a mut [f32], protocols: usize) -> Option<CostTable<'a>> {
        (protocols > 0 && costs.len() % protocols == 0).then_some(CostTable { costs, protocols })
    }

    /// Index of entry (algorithm, protocol) when it exists and is enabled.
    fn enabled(&self, algorithm: usize, protocol: usize) -> Option<usize> {
        let i = algorithm * self.protocols + protocol;
        (protocol < self.protocols && self.costs.get(i).is_some_and(|&c| c >= 0.0)).then_some(i)
    }

    /// The algorithm NCCL would take: its cheapest enabled entry, the first on ties.
    fn nccl_algorithm(&self) -> Option<usize> {
        let mut best: Option<(usize, f32)> = None;
        for (i, &c) in self.costs.iter().enumerate() {
            if c >= 0.0 && best.map_or(true, |(_, b)| c < b) {
                best = Some((i, c));
            }
        }
        best.map(|(i, _)| i / self.protocols)
    }

    /// Lowers the first enabled one of `choices` to 0.0 and returns it, unless NCCL would
    /// take an algorithm the model does not cover.
    fn steer<'c>(&mut self, choices: &'c [Choice]) -> Option<&'c Choice> {
        let nccl = self.nccl_algorithm()?;
        if !choices.iter().any(|c| c.algorithm.index() == nccl) {
            return None;
        }
        let (choice, i) = choices.iter().find_map(|c| {
            self.enabled(c.algorithm.index(), c.protocol.index())
                .map(|i| (c, i))
        })?;
        self.costs[i] = 0.0;
        Some(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: f32 = -1.0;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * a.abs().max(b.abs())
    }

    /// Past the ranks it simulates, the tuner ranks by shapes found by formula; where
    /// both can run (the H100 preset on 2 to 8 nodes) they pick alike: the same choice and
    /// time for the Ring-only collectives (their shapes are the simulation's there), and
    /// for All-Reduce a fastest time within 30% (the formula prices the tree at its links'
    /// bound, the simulation's pipelined tree lands up to 30% above).
    #[test]
    fn formula_shapes_rank_as_the_simulation_does() {
        use crate::topology::spec::{plan_spec, SpecPlan};
        use crate::topology::{compose, SpecDefaults};
        let gpu = GpuArch::Hopper;
        for nodes in [2, 4, 8] {
            let spec = format!("preset:dgx-h100,nodes={nodes}");
            let SpecPlan::Composed { name, dims, .. } =
                plan_spec(&spec, &SpecDefaults::default()).unwrap()
            else {
                panic!("{spec} is composed")
            };
            let cluster = Cluster::from_dims(&dims, 8).unwrap();
            let topo = compose(name, &dims).unwrap();
            let comm = Communicator {
                ranks: 8 * nodes,
                nodes,
                constants: None,
            };
            let network = Network::Simulated(&topo);
            let mut simulated = Tuner::new(network, &spec, 8, Vec::new(), &comm, gpu).unwrap();
            price_with_executor(&mut simulated, gpu, &|kind, channels| {
                NcclShapes::new(&topo, kind, 8, channels)
            })
            .unwrap();
            let network = Network::Cluster {
                cluster,
                name: &spec,
            };
            let mut formulas = Tuner::new(network, &spec, 8, Vec::new(), &comm, gpu).unwrap();
            price_with_executor(&mut formulas, gpu, &|kind, channels| {
                NcclShapes::for_cluster(&cluster, None, kind, channels)
            })
            .unwrap();
            for kind in TUNED {
                for band in 0..=36 {
                    let bytes = 1u64 << band;
                    let a = &simulated.choices(kind, bytes)[0];
                    let b = &formulas.choices(kind, bytes)[0];
                    let what = format!("{spec} {kind} {bytes} B");
                    if kind == CollectiveKind::AllReduce {
                        assert!(close(a.time_us, b.time_us, 0.3), "{what}: {a:?} {b:?}");
                    } else {
                        let key = |c: &Choice| (c.algorithm, c.protocol);
                        assert_eq!(key(a), key(b), "{what}");
                        assert!(close(a.time_us, b.time_us, 1e-6), "{what}: {a:?} {b:?}");
                    }
                }
            }
        }
    }

    fn tuning(user_chose_algorithms: bool) -> Tuning {
        let config = Config {
            topology: Some("preset:dgx-a100,nodes=2".into()),
            user_chose_algorithms,
            ..Config::default()
        };
        let comm = Communicator {
            ranks: 16,
            nodes: 2,
            constants: None,
        };
        Tuning::start(Ok(config), comm, None, &super::super::Silent)
    }

    #[test]
    fn v2_picks_what_nccl_runs_everywhere_unless_told_not_to() {
        let t = tuning(false);
        for bytes in [8, 1 << 20, 1 << 30] {
            let pick = t
                .pick(CollectiveKind::AllReduce, bytes, false, false)
                .unwrap();
            assert_ne!(pick.protocol, Protocol::Ll128);
            // The fastest such choice: nothing ranked before it is LL or Simple.
            let ranked = t.choices(CollectiveKind::AllReduce, bytes);
            let mut before = ranked.iter().take_while(|c| *c != pick);
            assert!(before.all(|c| c.protocol == Protocol::Ll128));
            assert!(t
                .pick(CollectiveKind::AllReduce, bytes, true, false)
                .is_none());
            assert!(t
                .pick(CollectiveKind::AllReduce, bytes, false, true)
                .is_none());
        }
        assert!(t.pick(CollectiveKind::AllToAll, 8, false, false).is_none());
        assert!(tuning(true)
            .pick(CollectiveKind::AllReduce, 8, false, false)
            .is_none());
    }

    #[test]
    fn steering_lowers_the_first_enabled_choice_only() {
        let t = tuning(false);
        let kind = CollectiveKind::AllReduce;
        let bytes = 1 << 30;
        let best = t.choices(kind, bytes)[0];
        // Tree and Ring at 100 us, the rest of NCCL's 7 x 3 table disabled.
        let mut costs = [OFF; 21];
        costs[..6].fill(100.0);
        let mut table = CostTable::new(&mut costs, 3).unwrap();
        assert_eq!(t.steer(kind, bytes, &mut table), Some(&best));
        let i = best.algorithm.index() * 3 + best.protocol.index();
        assert_eq!(costs[i], 0.0);
        assert_eq!(costs.iter().filter(|&&c| c == 0.0).count(), 1);
        // The model's best disabled: the next enabled one instead.
        let mut costs = [OFF; 21];
        costs[..6].fill(100.0);
        costs[i] = OFF;
        let mut table = CostTable::new(&mut costs, 3).unwrap();
        let second = *t.steer(kind, bytes, &mut table).unwrap();
        assert_ne!(second, best);
        assert_eq!(
            costs[second.algorithm.index() * 3 + second.protocol.index()],
            0.0
        );
        // NCCL prefers NVLS (algorithm 4), which the model does not cover: untouched.
        let mut costs = [OFF; 21];
        costs[..6].fill(100.0);
        costs[4 * 3 + 2] = 1.0;
        let before = costs;
        let mut table = CostTable::new(&mut costs, 3).unwrap();
        assert_eq!(t.steer(kind, bytes, &mut table), None);
        assert_eq!(costs, before);
    }

    #[test]
    fn a_cost_table_is_whole_rows() {
        assert!(CostTable::new(&mut [0.0; 6], 0).is_none());
        assert!(CostTable::new(&mut [0.0; 7], 3).is_none());
        assert!(CostTable::new(&mut [0.0; 6], 3).is_some());
    }
}
