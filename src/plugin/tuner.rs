//! The NCCL tuner's per-communicator decisions, free of the ABI: the model ([`Tuner`]) on
//! the topology the settings name, and how its choice is handed to NCCL: set outright for
//! tuner v2, which cannot see what NCCL disabled, or by lowering one entry of NCCL's cost
//! table for v3 and later.

use super::{discover, Config, Log, NvlDomains};
use crate::collective::CollectiveKind;
use crate::error::Result;
use crate::tuner::{Choice, Communicator, Protocol, Tuner};
use std::time::Instant;

/// The model's decisions for a communicator of `comm` on the cluster `config` names
/// ([`discover`]); the tuner's warnings start with what discovery had to assume.
pub fn tuner_for(config: &Config, comm: &Communicator, nvl: Option<NvlDomains>) -> Result<Tuner> {
    let found = discover(config, comm.ranks, comm.nodes, nvl)?;
    Tuner::new(
        &found.topology,
        &found.source,
        found.domain_size,
        found.warnings,
        comm,
        config.gpu(),
    )
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
                log.warn(&format!("{e}; NCCL keeps its own choices"));
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
