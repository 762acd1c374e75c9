//! The executor's hard limits: a program past any of them fails to load or misbehaves.
//! The lowering spreads work to stay within them; `super::rules` reports any a file breaks,
//! with the loader's other rules.

use super::rules::Element;
use super::{Instr, Program};
use crate::error::LimitBreach;
use std::collections::HashMap;
use std::fmt;

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

    /// The limit's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::StepsPerTb => "steps_per_threadblock",
            LimitKind::TbsPerChannel => "threadblocks_per_channel",
            LimitKind::Channels => "channels",
            LimitKind::Tbs => "threadblocks_per_gpu",
            LimitKind::DepTb => "dependency_threadblock_int8",
            LimitKind::Offset => "offset_int16",
            LimitKind::Count => "count",
            LimitKind::ElementsPerRank => "elements_per_rank",
            LimitKind::Gpus => "gpus",
        }
    }
}

/// One broken limit: which, the element that breaks it first on its GPU (or `<algo>`),
/// the figure and the limit, and a sentence saying so.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub kind: LimitKind,
    pub element: Element,
    /// The figure past the limit: how many (GPUs, channels, threadblocks, steps, chunks,
    /// elements) or how large (a threadblock id a dependency names, an offset).
    pub value: u64,
    /// The most the loader takes.
    pub limit: u64,
    /// The figures in a sentence, with the GPU, threadblock or channel they concern.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Violation> for LimitBreach {
    fn from(v: Violation) -> LimitBreach {
        LimitBreach {
            limit_name: v.kind.name(),
            gpu: v.element.gpu,
            tb: v.element.tb,
            step: v.element.step,
            value: v.value,
            limit: v.limit,
            message: v.message,
        }
    }
}

/// A count or size as a violation's figure (saturating: a figure past `u64` is past any limit).
fn figure<T: TryInto<u64>>(n: T) -> u64 {
    n.try_into().unwrap_or(u64::MAX)
}

/// Every limit `program` breaks (at most one report per limit and GPU, naming the first
/// element past it).
pub fn check(program: &Program, limits: &Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut report = |kind, element, (value, limit): (u64, u64), message: String| {
        out.push(Violation {
            kind,
            element,
            value,
            limit,
            message,
        })
    };
    if program.gpus.len() > limits.max_gpus {
        report(
            LimitKind::Gpus,
            Element::ALGO,
            (figure(program.gpus.len()), figure(limits.max_gpus)),
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
            Element::ALGO,
            (figure(program.nchannels), figure(limits.max_channels)),
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
                Element::tb(g, limits.max_tbs),
                (figure(tbs.len()), figure(limits.max_tbs)),
                format!(
                    "GPU {g} has {} threadblocks; the executor takes {}",
                    tbs.len(),
                    limits.max_tbs
                ),
            );
        }
        let steps: usize = tbs.iter().map(|t| t.steps.len()).sum();
        if let Some(v) = too_many_elements(g, program.gpus.len(), tbs.len(), steps, limits) {
            report(v.kind, v.element, (v.value, v.limit), v.message);
        }
        if let Some((t, tb)) = tbs
            .iter()
            .enumerate()
            .find(|(_, tb)| tb.steps.len() > limits.max_steps_per_tb)
        {
            report(
                LimitKind::StepsPerTb,
                Element::step(g, t, limits.max_steps_per_tb),
                (figure(tb.steps.len()), figure(limits.max_steps_per_tb)),
                format!(
                    "GPU {g} tb {t} has {} steps; the executor takes {} per threadblock",
                    tb.steps.len(),
                    limits.max_steps_per_tb
                ),
            );
        }
        if let Some((t, tb)) = tbs
            .iter()
            .enumerate()
            .find(|(_, tb)| tb.channel >= limits.max_channels)
        {
            report(
                LimitKind::Channels,
                Element::tb(g, t),
                // Channel c needs c + 1 channels.
                (
                    figure(tb.channel).saturating_add(1),
                    figure(limits.max_channels),
                ),
                format!(
                    "GPU {g} tb {t} is on channel {}; the executor has channels 0..{}",
                    tb.channel,
                    limits.max_channels - 1
                ),
            );
        }
        let ends = tbs
            .iter()
            .map(|tb| (tb.channel, tb.send.is_some(), tb.recv.is_some()));
        if let Some(c) = crowded(ends, limits.max_tbs_per_channel).first() {
            report(
                LimitKind::TbsPerChannel,
                Element::tb(g, c.first_over),
                (figure(c.count), figure(limits.max_tbs_per_channel)),
                format!(
                    "GPU {g} has {} threadblocks {} on channel {}; the executor takes {}",
                    c.count,
                    if c.sending { "sending" } else { "receiving" },
                    c.channel,
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
                    Element::step(g, t, s),
                    (figure(d.tb), figure(limits.max_dep_tb)),
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
                    Element::step(g, t, s),
                    (figure(off), figure(limits.max_offset)),
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
                    Element::step(g, t, s),
                    (u64::from(step.count), u64::from(limits.max_count)),
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
) -> Option<Violation> {
    let elements = 1 + gpus + tbs + steps;
    (elements > limits.max_elements_per_rank).then(|| Violation {
        kind: LimitKind::ElementsPerRank,
        element: Element::gpu(g),
        value: figure(elements),
        limit: figure(limits.max_elements_per_rank),
        message: format!(
            "GPU {g}'s part of the file has {elements} elements (algo, gpus, its threadblocks and {steps} steps); the executor's XML parser keeps {}",
            limits.max_elements_per_rank
        ),
    })
}

/// A channel of one GPU with more threadblocks sending (or receiving) on it than allowed.
struct Crowded {
    channel: usize,
    sending: bool,
    count: usize,
    /// The first threadblock past the limit.
    first_over: usize,
}

/// One GPU's channels with more than `max` threadblocks sending (or receiving) on them, by
/// channel; `tbs` gives each threadblock's channel and whether it sends and receives.
fn crowded(tbs: impl Iterator<Item = (usize, bool, bool)>, max: usize) -> Vec<Crowded> {
    let mut per_channel: HashMap<(usize, bool), Crowded> = HashMap::new();
    for (t, (channel, sends, receives)) in tbs.enumerate() {
        for sending in [(true, sends), (false, receives)]
            .into_iter()
            .filter_map(|(sending, on)| on.then_some(sending))
        {
            let c = per_channel.entry((channel, sending)).or_insert(Crowded {
                channel,
                sending,
                count: 0,
                first_over: t,
            });
            c.count += 1;
            // No limit at all (usize::MAX) is never passed.
            if max.checked_add(1) == Some(c.count) {
                c.first_over = t;
            }
        }
    }
    let mut over: Vec<Crowded> = per_channel
        .into_values()
        .filter(|c| c.count > max)
        .collect();
    over.sort_unstable_by_key(|c| (c.channel, !c.sending));
    over
}

/// The first GPU with more than `max` threadblocks sending (or receiving) on one channel,
/// as a violation naming the GPU and the channel; `tbs` gives each threadblock's GPU,
/// channel, and whether it sends and receives (a plan's threadblocks, before they have ids).
pub(crate) fn crowded_channels(
    tbs: impl Iterator<Item = (usize, usize, bool, bool)>,
    max: usize,
) -> Option<Violation> {
    let mut per_gpu: Vec<Vec<(usize, bool, bool)>> = Vec::new();
    for (gpu, channel, sends, receives) in tbs {
        if per_gpu.len() <= gpu {
            per_gpu.resize_with(gpu + 1, Vec::new);
        }
        per_gpu[gpu].push((channel, sends, receives));
    }
    per_gpu.into_iter().enumerate().find_map(|(g, ends)| {
        let c = crowded(ends.into_iter(), max).into_iter().next()?;
        Some(Violation {
            kind: LimitKind::TbsPerChannel,
            element: Element::gpu(g),
            value: figure(c.count),
            limit: figure(max),
            message: format!(
                "GPU {g} would have {} threadblocks {} on channel {}; the executor takes {max}",
                c.count,
                if c.sending { "sending" } else { "receiving" },
                c.channel
            ),
        })
    })
}
