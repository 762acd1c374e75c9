//! The executor's hard limits: a program past any of them fails to load or misbehaves.
//! The lowering spreads work to stay within them; the verifier reports any it finds.

use super::{Instr, Program};
use std::collections::HashMap;

/// Limits of an MSCCL loader (each profile's: `super::target::Profile::limits`).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Steps in one threadblock, nops included (`MSCCL_MAX_NUM_STEPS`: 64 in the
    /// executor's default build and in RCCL).
    pub max_steps_per_tb: usize,
    /// Threadblocks of one GPU sending (or receiving) on one channel.
    pub max_tbs_per_channel: usize,
    /// Channels (MAXCHANNELS).
    pub max_channels: usize,
    /// Threadblocks on one GPU (the executor's table and its XML parser's child limit).
    pub max_tbs: usize,
    /// Largest threadblock id a dependency may name (stored as int8).
    pub max_dep_tb: usize,
    /// Largest offset (stored as int16).
    pub max_offset: i64,
    /// Largest chunk count of one step (`cnt` must stay below 72).
    pub max_count: u32,
    /// XML elements the executor's parser keeps for one rank: the algo, every gpu, and
    /// that rank's threadblocks and steps.
    pub max_elements_per_rank: usize,
    /// GPUs in one algorithm (the parser's child limit).
    pub max_gpus: usize,
}

impl Default for Limits {
    /// The default target's: the MSCCL executor as it builds by default, and RCCL.
    fn default() -> Self {
        super::target::Profile::default().limits()
    }
}

/// Which limit a program breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    StepsPerTb,
    TbsPerChannel,
    Channels,
    Tbs,
    DepTb,
    Offset,
    Count,
    ElementsPerRank,
    Gpus,
}

impl LimitKind {
    /// Whether spreading work over more threadblocks or channels can cure it.
    pub fn spreading_helps(self) -> bool {
        matches!(self, LimitKind::StepsPerTb | LimitKind::TbsPerChannel)
    }
}

/// One broken limit, with the figure and the limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub kind: LimitKind,
    pub message: String,
}

/// Every limit `program` breaks (at most one report per limit and GPU).
pub fn check(program: &Program, limits: &Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut report = |kind, message: String| out.push(Violation { kind, message });
    if program.gpus.len() > limits.max_gpus {
        report(
            LimitKind::Gpus,
            format!(
                "{} GPUs exceed the executor's {}",
                program.gpus.len(),
                limits.max_gpus
            ),
        );
    }
    if program.nchannels > limits.max_channels {
        report(
            LimitKind::Channels,
            format!(
                "nchannels {} exceeds the executor's {} channels",
                program.nchannels, limits.max_channels
            ),
        );
    }
    for (g, gpu) in program.gpus.iter().enumerate() {
        let tbs = &gpu.threadblocks;
        if tbs.len() > limits.max_tbs {
            report(
                LimitKind::Tbs,
                format!(
                    "GPU {g} has {} threadblocks; the executor takes {}",
                    tbs.len(),
                    limits.max_tbs
                ),
            );
        }
        let steps: usize = tbs.iter().map(|t| t.steps.len()).sum();
        if let Some(message) = too_many_elements(g, program.gpus.len(), tbs.len(), steps, limits) {
            report(LimitKind::ElementsPerRank, message);
        }
        if let Some((t, tb)) = tbs
            .iter()
            .enumerate()
            .find(|(_, tb)| tb.steps.len() > limits.max_steps_per_tb)
        {
            report(
                LimitKind::StepsPerTb,
                format!(
                    "GPU {g} tb {t} has {} steps; the executor takes {} per threadblock",
                    tb.steps.len(),
                    limits.max_steps_per_tb
                ),
            );
        }
        let ends = tbs
            .iter()
            .map(|tb| (tb.channel, tb.send.is_some(), tb.recv.is_some()));
        if let Some(&((channel, sending), n)) = crowded(ends, limits.max_tbs_per_channel).first() {
            report(
                LimitKind::TbsPerChannel,
                format!(
                    "GPU {g} has {n} threadblocks {} on channel {channel}; the executor takes {}",
                    if sending { "sending" } else { "receiving" },
                    limits.max_tbs_per_channel
                ),
            );
        }
        let steps = tbs
            .iter()
            .enumerate()
            .flat_map(|(t, tb)| tb.steps.iter().enumerate().map(move |(s, st)| (t, s, st)));
        let (mut dep_tb, mut offset, mut count) = (false, false, false);
        for (t, s, step) in steps {
            if let Some(d) = step.dep.filter(|d| d.tb > limits.max_dep_tb && !dep_tb) {
                dep_tb = true;
                report(
                    LimitKind::DepTb,
                    format!(
                        "GPU {g} tb {t} step {s} depends on tb {}; the executor stores dependency targets as int8 (at most {})",
                        d.tb, limits.max_dep_tb
                    ),
                );
            }
            let used = |on: bool, off: i64| on && off > limits.max_offset;
            let big = [
                (used(step.instr.reads_src(), step.src_off), step.src_off),
                (used(step.instr.writes_dst(), step.dst_off), step.dst_off),
            ];
            if let Some(&(_, off)) = big.iter().find(|b| b.0).filter(|_| !offset) {
                offset = true;
                report(
                    LimitKind::Offset,
                    format!(
                        "GPU {g} tb {t} step {s} uses offset {off}; the executor stores offsets as int16 (at most {})",
                        limits.max_offset
                    ),
                );
            }
            if step.instr != Instr::Nop && step.count > limits.max_count && !count {
                count = true;
                report(
                    LimitKind::Count,
                    format!(
                        "GPU {g} tb {t} step {s} moves {} chunks; the executor takes at most {}",
                        step.count, limits.max_count
                    ),
                );
            }
        }
    }
    out
}

/// The `ElementsPerRank` violation of GPU `g` with `tbs` threadblocks and `steps` steps in
/// a program of `gpus` GPUs, if it has one.
pub(crate) fn too_many_elements(
    g: usize,
    gpus: usize,
    tbs: usize,
    steps: usize,
    limits: &Limits,
) -> Option<String> {
    let elements = 1 + gpus + tbs + steps;
    (elements > limits.max_elements_per_rank).then(|| {
        format!(
            "GPU {g}'s part of the file has {elements} elements (algo, gpus, its threadblocks and {steps} steps); the executor's XML parser keeps {}",
            limits.max_elements_per_rank
        )
    })
}

/// One GPU's (channel, sending) pairs with more than `max` threadblocks sending (or
/// receiving) on that channel, with their counts, by channel; `tbs` gives each
/// threadblock's channel and whether it sends and receives.
fn crowded(
    tbs: impl Iterator<Item = (usize, bool, bool)>,
    max: usize,
) -> Vec<((usize, bool), usize)> {
    let mut per_channel: HashMap<(usize, bool), usize> = HashMap::new();
    for (channel, sends, receives) in tbs {
        if sends {
            *per_channel.entry((channel, true)).or_default() += 1;
        }
        if receives {
            *per_channel.entry((channel, false)).or_default() += 1;
        }
    }
    let mut over: Vec<_> = per_channel.into_iter().filter(|&(_, n)| n > max).collect();
    over.sort_unstable();
    over
}

/// Whether some GPU has more than `max` threadblocks sending (or receiving) on one
/// channel; `tbs` gives each threadblock's GPU, channel, and whether it sends and receives.
pub(crate) fn crowded_channels(
    tbs: impl Iterator<Item = (usize, usize, bool, bool)>,
    max: usize,
) -> bool {
    let mut per_gpu: Vec<Vec<(usize, bool, bool)>> = Vec::new();
    for (gpu, channel, sends, receives) in tbs {
        if per_gpu.len() <= gpu {
            per_gpu.resize_with(gpu + 1, Vec::new);
        }
        per_gpu[gpu].push((channel, sends, receives));
    }
    per_gpu
        .into_iter()
        .any(|ends| !crowded(ends.into_iter(), max).is_empty())
}
