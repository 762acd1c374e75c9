//! Lowering: a `Schedule` becomes an MSCCL `Program`.
//!
//! Each transfer becomes a send at its source and a receive at its destination (a copy,
//! or a reduction for combining collectives), fused into `rcs`, `rrs` or `rrcs` where a
//! chunk passes straight through; threadblocks are formed per peer and channel; steps keep
//! the schedule's order, so every connection is FIFO-consistent and nothing waits longer
//! than the schedule says; dependencies carry the data flow and protect overwritten slots.
//! Partial sums that are not a rank's result go to scratch, never into its output.
//!
//! The lowering tries one channel first, with receive and send connections sharing
//! threadblocks, then one threadblock per connection, then more channels (transfers spread
//! by chunk, then by peer) while a threadblock has too many steps or a channel too many
//! threadblocks; any other broken limit, or one more channels cannot cure, is an error
//! naming the limit and the figure.

mod build;
mod emit;
mod flow;

use super::exec;
use super::limits::{self, LimitKind, Violation};
use super::{simulate_program_on, Buf, Layout, Program, Proto};
use super::{Element, Target};
use crate::collective::{Collective, CollectiveKind};
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::topology::Topology;
use emit::{Split, Spread};
pub(crate) use flow::rank_map;
use flow::Flow;

/// Choices for the lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct LowerOptions {
    /// In place (input and output one buffer) or out of place; by default in place for
    /// All-Reduce, Broadcast and Reduce, as frameworks call them.
    pub in_place: Option<bool>,
    /// Copies of the algorithm on separate channels, each moving 1/instances of every chunk.
    pub instances: usize,
    /// By default chosen from the schedule's size (`Proto::for_size`).
    pub proto: Option<Proto>,
    /// The message sizes the executor picks the algorithm for; by default [S, 2S - 1]
    /// around the schedule's size S (in the executor's measure).
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    /// The algorithm's name; by default from the collective and the topology.
    pub name: Option<String>,
    /// The loader the program is for: its limits and its spelling of the collective.
    pub target: Target,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            in_place: None,
            instances: 1,
            proto: None,
            min_bytes: None,
            max_bytes: None,
            name: None,
            target: Target::default(),
        }
    }
}

/// Whether a collective runs in place unless told otherwise.
fn default_in_place(kind: CollectiveKind) -> bool {
    matches!(
        kind,
        CollectiveKind::AllReduce | CollectiveKind::Broadcast | CollectiveKind::Reduce
    )
}

/// Lowers `schedule` (made for `topo`) to a program; rank r is the collective's r-th NPU.
/// A transfer between NPUs joined through switches is one send and receive between their
/// GPUs, as any other: the connection between peers is the runtime's.
pub fn lower(schedule: &Schedule, topo: &Topology, options: &LowerOptions) -> Result<Program> {
    let (layout, flow) = prepare(schedule, topo, options)?;
    let spec = &schedule.collective;
    let kind = spec.kind;
    let size = layout.executor_bytes(spec.size_bytes);
    let coll = options
        .target
        .coll_name(kind)
        .ok_or_else(|| Error::Invalid {
            input: "target".into(),
            value: options.target.profile.to_string(),
            allowed: format!(
                "a target whose loader knows {kind}: this one has no {kind} collective"
            ),
        })?;
    let head = Head {
        coll,
        name: sanitize(
            options
                .name
                .clone()
                .unwrap_or_else(|| format!("tacos-{kind}-{}", schedule.topology)),
        ),
        proto: options.proto.unwrap_or(Proto::for_size(spec.size_bytes)),
        min_bytes: options.min_bytes.unwrap_or(size),
        max_bytes: options
            .max_bytes
            .unwrap_or(size.saturating_mul(2).saturating_sub(1).max(size)),
    };
    let base = lower_base(&flow, &layout, options, &head, (topo, schedule))?;
    let program = replicate(base, options.instances);
    let broken = limits::check(&program, &options.target.limits);
    if let Some(v) = broken.into_iter().next() {
        let context = format!(
            "with {} instances the program breaks a limit of target {}",
            options.instances, options.target
        );
        return Err(target_limit(options, v, context));
    }
    Ok(program)
}

/// Checks what the schedule's shape says about the target's limits before any step is
/// built: an error names a limit that lowering it with these options breaks (as `lower`
/// reports it, at a small fraction of the cost). It goes through the arrangements `lower`
/// tries as far as their threadblock assignments alone decide (threadblocks per GPU and
/// per channel, transfer steps per threadblock, elements per rank), so it refuses only
/// what `lower` refuses, with the same message.
pub fn check_shape(schedule: &Schedule, topo: &Topology, options: &LowerOptions) -> Result<()> {
    let (layout, flow) = prepare(schedule, topo, options)?;
    arrangements(options, false, |spread| {
        precheck(&flow, &layout, options, spread).map(|r| r.map(|_| ()))
    })
    .map(|_| ())
}

/// The error for a program (or arrangement) that breaks `violation` of the options' target.
fn target_limit(options: &LowerOptions, violation: Violation, context: String) -> Error {
    Error::TargetLimit {
        target: options.target.to_string(),
        violation: Box::new(violation.into()),
        context,
    }
}

/// The layout and data flow of a lowering, once the options are checked.
fn prepare(schedule: &Schedule, topo: &Topology, options: &LowerOptions) -> Result<(Layout, Flow)> {
    refuse_in_switch(schedule)?;
    let spec = &schedule.collective;
    Collective::new(topo, spec.clone())
        .map_err(|e| e.context("the schedule's collective is not valid here"))?;
    let kind = spec.kind;
    let in_place = options.in_place.unwrap_or_else(|| default_in_place(kind));
    if in_place && kind == CollectiveKind::AllToAll {
        return Err(Error::Invalid {
            input: "in_place".into(),
            value: "true".into(),
            allowed: "false for all-to-all (in place it overwrites chunks before they leave; lower it out of place)".into(),
        });
    }
    if options.instances == 0 {
        return Err(Error::Invalid {
            input: "instances".into(),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    let channels = options.target.limits.max_channels;
    if options.instances > channels {
        return Err(Error::Limit {
            what: "channels",
            value: options.instances as u64,
            limit: channels as u64,
            context: format!(
                "{} instances need a channel each on the {} target",
                options.instances, options.target
            ),
        });
    }
    let layout = Layout::for_spec(spec, in_place)?;
    let flow = Flow::new(schedule, &layout)?;
    Ok((layout, flow))
}

/// Refuses a schedule that reduces or multicasts inside a switch: MSCCL XML has sends and
/// receives between GPUs only.
fn refuse_in_switch(schedule: &Schedule) -> Result<()> {
    let Some((i, t)) = schedule
        .transfers
        .iter()
        .enumerate()
        .find(|(_, t)| t.in_switch)
    else {
        return Ok(());
    };
    let what = match t.op {
        crate::schedule::Op::Copy => "multicast",
        crate::schedule::Op::Reduce => "sum",
    };
    Err(Error::msccl_at(
        i,
        format!(
            "transfer {i} (chunk {}, NPU {} to NPU {}) is part of an in-switch {what} (NVLS), which MSCCL XML has no operation for: lower the schedule to an MSCCL++ plan instead (`tacos synth --plan F.json`, `tacos compile --format mscclpp`), which carries it on switch channels",
            t.chunk(),
            t.src(),
            t.dst()
        ),
    ))
}

/// One instance, on as few channels as the limits allow.
/// The algo attributes the lowering does not derive from the plan.
struct Head {
    /// The `coll` attribute, as the target spells it.
    coll: &'static str,
    name: String,
    proto: Proto,
    min_bytes: u64,
    max_bytes: u64,
}

/// Keeps names to characters the executor's plain XML reader takes as they are.
pub(crate) fn sanitize(name: String) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:,=+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect()
}

fn lower_base(
    flow: &Flow,
    layout: &Layout,
    options: &LowerOptions,
    head: &Head,
    timing: (&Topology, &Schedule),
) -> Result<Program> {
    let fits = arrangements(options, true, |spread| {
        arrange(flow, layout, options, head, spread)
    })?;
    if fits.len() == 1 {
        return Ok(fits.into_iter().next().expect("one program"));
    }
    // Spread over channels, a link's transfers no longer keep the schedule's order: keep
    // the arrangement that loses least time to that (ties to the earlier one).
    let (topo, schedule) = timing;
    let spec = &schedule.collective;
    let mut best: Option<(u64, Program)> = None;
    for program in fits {
        let time = simulate_program_on(topo, &program, spec.size_bytes, &spec.npus)?.time_ps;
        if best.as_ref().map_or(true, |(t, _)| time < *t) {
            best = Some((time, program));
        }
    }
    Ok(best.expect("at least one program").1)
}

/// Why an arrangement gives no program.
enum Refusal {
    /// It breaks a limit of the target.
    Limit(Violation),
    /// Its threadblocks would wait on each other round a cycle.
    Deadlock(String),
}

impl Refusal {
    /// What more channels do about it.
    fn broken(&self) -> Broken {
        match self {
            Refusal::Limit(v) => match v.kind {
                LimitKind::StepsPerTb => Broken::Steps,
                LimitKind::TbsPerChannel => Broken::TbsPerChannel,
                _ => Broken::Size,
            },
            Refusal::Deadlock(_) => Broken::Deadlock,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Limit(v) => v.fmt(f),
            Refusal::Deadlock(why) => f.write_str(why),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Broken {
    /// A threadblock has too many steps: more channels share them out.
    Steps,
    /// A channel has too many threadblocks: spreading peers over channels helps.
    TbsPerChannel,
    /// A GPU has too many threadblocks or XML elements: more channels only add to them.
    Size,
    /// The threadblocks wait on each other round a cycle.
    Deadlock,
}

/// Tries arrangements in turn, one channel first, then more (transfers spread over the
/// busiest links only, by turn on every link, by chunk and by peer; by peer first once a
/// channel had too many threadblocks), each with connections paired in threadblocks and
/// then not, until `attempt` gives a result: on one channel the first, on more all those
/// on the fewest channels that give one (when `all`; else the first). When none does (it
/// stops at a channel count where every arrangement had too many threadblocks or
/// elements), the error carries the limit that stopped the spreading (as a
/// [`Error::TargetLimit`]) and names what one channel broke.
fn arrangements<T>(
    options: &LowerOptions,
    all: bool,
    mut attempt: impl FnMut(Spread) -> Result<Result<T, Refusal>>,
) -> Result<Vec<T>> {
    let max_channels = (options.target.limits.max_channels / options.instances).max(1);
    let mut refusals: Vec<(Spread, Refusal)> = Vec::new();
    let mut crowded = false;
    let mut channels = 1;
    while channels <= max_channels {
        let splits = match (channels, crowded) {
            (1, _) => &[Split::Chunk][..],
            (_, true) => &[Split::Peer, Split::Busy, Split::Turn, Split::Chunk][..],
            (_, false) => &[Split::Busy, Split::Turn, Split::Chunk, Split::Peer][..],
        };
        let mut fits = Vec::new();
        let mut only_size = true;
        for &split in splits {
            for paired in [true, false] {
                let spread = Spread {
                    channels,
                    split,
                    paired,
                };
                match attempt(spread)? {
                    Ok(done) => {
                        fits.push(done);
                        if channels == 1 || !all {
                            return Ok(fits);
                        }
                    }
                    Err(refusal) => {
                        let broken = refusal.broken();
                        crowded |= broken == Broken::TbsPerChannel;
                        only_size &= broken == Broken::Size;
                        refusals.push((spread, refusal));
                    }
                }
            }
        }
        if !fits.is_empty() {
            return Ok(fits);
        }
        if only_size {
            break;
        }
        channels *= 2;
    }
    // What stopped the spreading: too many threadblocks or elements, if that is what did.
    let stopped = refusals
        .iter()
        .rposition(|(_, r)| r.broken() == Broken::Size)
        .unwrap_or(refusals.len().saturating_sub(1));
    let mut refusals = refusals.into_iter();
    let (first_spread, first) = refusals.next().expect("at least one arrangement is tried");
    let stopped = stopped.checked_sub(1).and_then(|i| refusals.nth(i));
    let instances = if options.instances > 1 {
        " or fewer instances"
    } else {
        ""
    };
    let mut context = format!(
        "cannot lower the schedule within the limits of target {} (use fewer chunks per NPU{instances}): on {first_spread}",
        options.target
    );
    let (refusal, why) = match stopped {
        None => (first, context),
        Some((spread, stopped)) => {
            context += &format!(": {first}; on {spread}");
            (stopped, context)
        }
    };
    Err(match refusal {
        Refusal::Limit(v) => target_limit(options, v, why),
        Refusal::Deadlock(deadlock) => Error::msccl(format!("{why}: {deadlock}")),
    })
}

/// What the threadblock assignment of an arrangement tells before its steps are built: a
/// refusal for a threadblock with more transfer steps than the executor takes, a GPU
/// with more threadblocks or (counting transfer steps alone) more XML elements, or a
/// channel with more threadblocks than it takes; else the assignment, to be built. Too
/// many elements in the first arrangement (one channel, paired: the fewest threadblocks
/// and the most fused steps) is an error, since no arrangement does better.
fn precheck(
    flow: &Flow,
    layout: &Layout,
    options: &LowerOptions,
    spread: Spread,
) -> Result<Result<emit::Assignment, Refusal>> {
    let assignment = emit::assign(flow, layout, spread);
    let limits = &options.target.limits;
    let steps = assignment.transfer_steps();
    let ranks = layout.ranks();
    let mut per_rank = vec![(0, 0); ranks];
    for (tb, &n) in assignment.tbs.iter().zip(&steps) {
        per_rank[tb.rank].0 += options.instances;
        per_rank[tb.rank].1 += n * options.instances;
    }
    let refuse = |kind, rank, (value, limit): (usize, usize), message| {
        Ok(Err(Refusal::Limit(Violation {
            kind,
            element: Element::gpu(rank),
            value: value as u64,
            limit: limit as u64,
            message,
        })))
    };
    let max = limits.max_elements_per_rank;
    for (rank, &(tbs, steps)) in per_rank.iter().enumerate() {
        let elements = 1 + ranks + tbs + steps;
        if elements > max {
            if spread.channels == 1 && spread.paired {
                return Err(Error::Limit {
                    what: "XML elements",
                    value: elements as u64,
                    limit: max as u64,
                    context: format!(
                        "GPU {rank}'s part of the file for the executor's XML parser (algo, gpus, {tbs} threadblocks, at least a step per transfer it sends or receives; use fewer chunks per NPU)"
                    ),
                });
            }
            let why = format!(
                "GPU {rank}'s part of the file would have at least {elements} elements (algo, gpus, {tbs} threadblocks and at least {steps} steps, one per transfer it sends or receives); the executor's XML parser keeps {max}"
            );
            return refuse(LimitKind::ElementsPerRank, rank, (elements, max), why);
        }
        if tbs > limits.max_tbs {
            return refuse(
                LimitKind::Tbs,
                rank,
                (tbs, limits.max_tbs),
                format!(
                    "GPU {rank} would have {tbs} threadblocks; the executor takes {}",
                    limits.max_tbs
                ),
            );
        }
    }
    let most = limits.max_steps_per_tb;
    if let Some((t, &n)) = steps.iter().enumerate().find(|&(_, &n)| n > most) {
        let rank = assignment.tbs[t].rank;
        return refuse(
            LimitKind::StepsPerTb,
            rank,
            (n, most),
            format!(
                "GPU {rank} would have a threadblock of at least {n} steps; the executor takes {most} per threadblock"
            ),
        );
    }
    let ends = assignment
        .tbs
        .iter()
        .map(|tb| (tb.rank, tb.channel, tb.send.is_some(), tb.recv.is_some()));
    if let Some(v) = limits::crowded_channels(ends, limits.max_tbs_per_channel) {
        return Ok(Err(Refusal::Limit(v)));
    }
    Ok(Ok(assignment))
}

/// One arrangement: the program, or why it does not do; an error for a limit no
/// arrangement can cure.
fn arrange(
    flow: &Flow,
    layout: &Layout,
    options: &LowerOptions,
    head: &Head,
    spread: Spread,
) -> Result<Result<Program, Refusal>> {
    let assignment = match precheck(flow, layout, options, spread)? {
        Ok(assignment) => assignment,
        Err(refused) => return Ok(Err(refused)),
    };
    let plan = emit::plan(flow, layout, assignment);
    let gpus = match build::build_gpus(&plan, layout, &options.target.limits) {
        Ok(gpus) => gpus,
        Err(build::Refusal::Order(e)) => {
            return Err(Error::msccl(format!(
                "cannot order the program's steps: {e}"
            )))
        }
        Err(build::Refusal::Elements(v)) => return Ok(Err(Refusal::Limit(v))),
    };
    let program = header(layout, head, spread.channels, gpus);
    let broken = limits::check(&program, &options.target.limits);
    let cured_by_spreading = |kind: LimitKind| {
        matches!(
            kind,
            LimitKind::StepsPerTb | LimitKind::TbsPerChannel | LimitKind::Tbs
        )
    };
    if let Some(v) = broken.iter().find(|v| !cured_by_spreading(v.kind)) {
        let context = format!(
            "on {spread} the program would break a limit of target {}",
            options.target
        );
        return Err(target_limit(options, v.clone(), context));
    }
    if let Some(v) = broken.into_iter().next() {
        return Ok(Err(Refusal::Limit(v)));
    }
    // Threadblocks that both receive and send can wait on each other round a cycle when
    // connections buffer less than the schedule keeps in flight; then the next
    // arrangement (one threadblock per connection) is tried.
    let trace = exec::run(&program, exec::buffered_chunks(program.proto));
    Ok(match trace.deadlock {
        None => Ok(program),
        Some(d) => Err(Refusal::Deadlock(format!(
            "it would deadlock with the executor's {} buffers: {d}",
            program.proto
        ))),
    })
}

fn header(layout: &Layout, head: &Head, channels: usize, gpus: Vec<super::Gpu>) -> Program {
    Program {
        name: head.name.clone(),
        collective: head.coll.to_string(),
        root: layout.root(),
        proto: head.proto,
        nchannels: channels,
        nchunksperloop: layout.chunks_per_loop(),
        inplace: layout.in_place(),
        outofplace: !layout.in_place(),
        min_bytes: Some(head.min_bytes),
        max_bytes: Some(head.max_bytes),
        gpus,
        extra: Vec::new(),
        inferred: Vec::new(),
        syntax_breaks: Vec::new(),
    }
}

/// `instances` copies of a one-instance program: chunk j of a buffer becomes chunks
/// j * instances + i, scratch is stacked per copy, channels and threadblock ids are
/// interleaved the same way so dependency targets keep the lowest ids.
fn replicate(base: Program, instances: usize) -> Program {
    if instances == 1 {
        return base;
    }
    let n = instances as i64;
    let channels = base.nchannels;
    let gpus = base
        .gpus
        .into_iter()
        .map(|gpu| {
            let scratch = gpu.scratch_chunks as i64;
            let mut tbs = Vec::with_capacity(gpu.threadblocks.len() * instances);
            for tb in &gpu.threadblocks {
                for i in 0..instances {
                    let mut copy = tb.clone();
                    copy.channel = channels * i + tb.channel;
                    for step in &mut copy.steps {
                        let map = |buf: Buf, off: i64| match (buf, off) {
                            (_, -1) => -1,
                            (Buf::Scratch, o) => scratch * i as i64 + o,
                            (_, o) => o * n + i as i64,
                        };
                        step.src_off = map(step.src_buf, step.src_off);
                        step.dst_off = map(step.dst_buf, step.dst_off);
                        if let Some(d) = &mut step.dep {
                            d.tb = d.tb * instances + i;
                        }
                    }
                    tbs.push(copy);
                }
            }
            super::Gpu {
                input_chunks: gpu.input_chunks * instances,
                output_chunks: gpu.output_chunks * instances,
                scratch_chunks: gpu.scratch_chunks * instances,
                threadblocks: tbs,
                extra: gpu.extra,
            }
        })
        .collect();
    Program {
        nchannels: channels * instances,
        nchunksperloop: base.nchunksperloop * instances,
        gpus,
        ..base
    }
}
