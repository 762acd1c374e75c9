//! Lowering: a checked `Schedule` becomes an MSCCL++ execution plan.
//!
//! Chunks sit where the MSCCL lowering puts them ([`Layout`]), so both backends agree on
//! what each chunk index means. Transfers between two ranks travel in lanes
//! ([`lanes`]): a threadblock at each end and one channel between them, a memory channel
//! inside an NVLink domain and a port channel across the network. [`build`] replays the
//! schedule into each rank's operations and their dependencies; [`emit`] writes them with
//! the `nop`s and semaphores the executor needs. Lanes hold fewer transfers until every
//! threadblock fits the executor's 64 operations; a plan that cannot is refused naming the
//! limit. In-switch transfers become switch-channel operations ([`switch`]).

mod build;
mod emit;
mod instances;
mod lanes;
mod switch;

use super::plan::{
    ChannelType, Plan, MAX_CHANNELS_PER_THREADBLOCK, MAX_OPS_PER_THREADBLOCK, MAX_THREADS_PER_BLOCK,
};
use crate::collective::CollectiveKind;
use crate::cost::program::domain_size;
use crate::error::{Error, Result};
use crate::gpu::GpuArch;
use crate::msccl::lower::{rank_map, sanitize};
use crate::msccl::{Buf, Layout};
use crate::schedule::Schedule;
use crate::topology::Topology;
use lanes::Move;

/// Choices for the lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// In place (input and output one buffer) or out of place; by default in place for
    /// All-Reduce and Broadcast, as frameworks call them.
    pub in_place: Option<bool>,
    /// The plan's name (the executor's cache key); by default from the collective and the
    /// topology.
    pub name: Option<String>,
    /// The message sizes the plan accepts, in the executor's measure (All-Gather: the
    /// output). By default exactly the schedule's size: the executor throws, through the
    /// NCCL shim's C API, on a size its chunk counts do not divide.
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    /// Ranks whose NPU ids are this far apart or less share an NVLink domain and talk over
    /// memory channels; by default the topology's node size.
    pub domain_size: Option<usize>,
    /// The most threadblocks a GPU may run: the executor needs them all resident at once.
    pub max_threadblocks: usize,
    /// Copies of the plan on threadblocks and channels of their own, each moving 1/n of
    /// every chunk: more threadblocks driving each link.
    pub instances: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            in_place: None,
            name: None,
            min_bytes: None,
            max_bytes: None,
            domain_size: None,
            max_threadblocks: DEFAULT_MAX_THREADBLOCKS,
            instances: 1,
        }
    }
}

/// Threadblocks one GPU can hold at once at 1,024 threads each where its generation is not
/// known: one per SM of an A100 (108), the fewest of the GPUs MSCCL++ runs on
/// ([`PlanOptions::for_gpu`] takes the GPU's own).
pub const DEFAULT_MAX_THREADBLOCKS: usize = 108;

impl PlanOptions {
    /// The default options for GPUs of generation `gpu`: as many threadblocks as it has
    /// SMs.
    ///
    /// ```
    /// use tacos::gpu::GpuArch;
    /// use tacos::mscclpp::PlanOptions;
    /// assert_eq!(PlanOptions::for_gpu(GpuArch::Hopper).max_threadblocks, 132);
    /// ```
    pub fn for_gpu(gpu: GpuArch) -> PlanOptions {
        PlanOptions {
            max_threadblocks: gpu.sms(),
            ..PlanOptions::default()
        }
    }
}

/// The collectives a plan can carry: those whose chunks are one size in input and output.
const PLANNED: [CollectiveKind; 5] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
    CollectiveKind::Broadcast,
    CollectiveKind::AllToAll,
];

/// Lowers `schedule` (made for `topo`, checked) to an execution plan; rank r is the
/// collective's r-th NPU.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::mscclpp::{lower, PlanOptions};
/// use tacos::pipeline::{synthesize, Request};
/// use tacos::synth::SynthOptions;
/// use tacos::topology::{parse_spec, SpecDefaults};
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let request = Request::new(CollectiveKind::AllGather, 1 << 20);
/// let checked = synthesize(&ring, &request, 1, &SynthOptions::seeded(0)).unwrap();
/// let plan = lower(checked.schedule(), &ring, &PlanOptions::default()).unwrap();
/// assert_eq!(plan.gpus.len(), 4);
/// assert_eq!((plan.gpus[0].input_chunks, plan.gpus[0].output_chunks), (1, 4));
/// ```
pub fn lower(schedule: &Schedule, topo: &Topology, options: &PlanOptions) -> Result<Plan> {
    let spec = &schedule.collective;
    let kind = spec.kind;
    if !PLANNED.contains(&kind) {
        return Err(Error::plan(format!(
            "{kind} has no MSCCL++ plan: its input and output chunks differ in size on some ranks; plans carry {}",
            PLANNED.map(|k| k.name()).join(", ")
        )));
    }
    let in_place = options.in_place.unwrap_or(matches!(
        kind,
        CollectiveKind::AllReduce | CollectiveKind::Broadcast
    ));
    let layout = Layout::for_spec(spec, in_place).map_err(|e| Error::plan(e.to_string()))?;
    let size = layout.executor_bytes(spec.size_bytes);
    let instances = options.instances.max(1);
    let divisor = (layout.size_divisor() * instances) as u64;
    if spec.size_bytes % (16 * divisor) != 0 {
        return Err(Error::plan(format!(
            "{size} bytes in {divisor} chunks ({instances} instances of {}) is not a whole number of 16-byte units per chunk, as the executor needs (buffer_alignment 16): choose a size that is a multiple of {} bytes, or fewer chunks (-k)",
            layout.size_divisor(),
            16 * divisor
        )));
    }
    let rank_of = rank_map(spec);
    let mut ranks_of = Vec::with_capacity(schedule.transfers.len());
    let mut moves = Vec::with_capacity(schedule.transfers.len());
    for (i, t) in schedule.transfers.iter().enumerate() {
        let rank = |npu: usize| {
            rank_of.get(npu).copied().flatten().ok_or_else(|| {
                Error::plan(format!(
                    "transfer {i} goes through NPU {npu}, which is not one of the collective's NPUs; a plan has GPUs only for the collective's ranks"
                ))
            })
        };
        let (src, dst) = (rank(t.src())?, rank(t.dst())?);
        ranks_of.push((src, dst));
        moves.push(Move::of(t, src, dst));
    }
    let switch = switch::group(schedule, &ranks_of, topo)?;
    let mut departures: Vec<usize> = (0..moves.len()).collect();
    departures.sort_by_key(|&t| (moves[t].start_ps, t));
    let mut order = vec![0; moves.len()];
    for (k, &t) in departures.iter().enumerate() {
        order[t] = k;
    }
    // Arrivals before departures at equal times, as the schedule checker replays them.
    let mut events: Vec<(usize, bool)> = (0..moves.len())
        .flat_map(|t| [(t, false), (t, true)])
        .collect();
    events.sort_by_key(|&(t, departs)| {
        let m = &moves[t];
        let time = if departs { m.start_ps } else { m.end_ps };
        (time, departs, order[t])
    });
    let domain = options
        .domain_size
        .unwrap_or_else(|| domain_size(topo))
        .max(1);
    let head = Head {
        name: sanitize(
            options
                .name
                .clone()
                .unwrap_or_else(|| format!("tacos-{kind}-{}", schedule.topology)),
        ),
        collective: kind.name().into(),
        in_place,
        min_bytes: options.min_bytes.unwrap_or(size),
        max_bytes: options.max_bytes.unwrap_or(size),
        chunks: (layout.view_len(Buf::Input), layout.view_len(Buf::Output)),
    };
    let mut share = moves.len().max(1);
    loop {
        let lanes = lanes::group(&moves, &departures, share);
        let lane_type: Vec<ChannelType> = lanes
            .lanes
            .iter()
            .map(|l| {
                let npu = |r: usize| spec.npus[r] / domain;
                if npu(l.low) == npu(l.high) {
                    ChannelType::Memory
                } else {
                    ChannelType::Port
                }
            })
            .collect();
        let (ranks, switches) =
            build::replay(schedule, &ranks_of, &layout, &lanes, &events, &switch)?;
        let plan = head.plan(
            ranks
                .iter()
                .enumerate()
                .map(|(r, ops)| emit::gpu(r, ops, &lanes, &lane_type, &switches, head.chunks))
                .collect(),
        );
        if !switch.is_empty() {
            switch_channels_fit(&plan)?;
        }
        match longest_threadblock(&plan) {
            Some((rank, tb, ops)) if ops > MAX_OPS_PER_THREADBLOCK => {
                if share == 1 {
                    return Err(Error::Limit {
                        what: "operations",
                        value: ops as u64,
                        limit: MAX_OPS_PER_THREADBLOCK as u64,
                        context: format!(
                            "rank {rank}, threadblock {tb}, with one transfer per lane (the MSCCL++ executor's limit per threadblock)"
                        ),
                    });
                }
                share = share.div_ceil(2);
                continue;
            }
            _ => {}
        }
        let plan = instances::replicate(&plan, instances)?;
        if let Some((rank, blocks)) = plan
            .gpus
            .iter()
            .map(|g| (g.id, g.threadblocks.len()))
            .max_by_key(|&(r, n)| (n, std::cmp::Reverse(r)))
            .filter(|&(_, n)| n > options.max_threadblocks)
        {
            return Err(Error::Limit {
                what: "threadblocks",
                value: blocks as u64,
                limit: options.max_threadblocks as u64,
                context: format!(
                    "rank {rank} of the plan, {instances} instance(s) with at most {share} transfers per lane so that each threadblock keeps within {MAX_OPS_PER_THREADBLOCK} operations (every threadblock must be resident at once: one per SM); fewer chunks (-k) or instances need fewer"
                ),
            });
        }
        return Ok(plan);
    }
}

/// The plan-wide fields.
struct Head {
    name: String,
    collective: String,
    in_place: bool,
    min_bytes: u64,
    max_bytes: u64,
    chunks: (usize, usize),
}

impl Head {
    fn plan(&self, gpus: Vec<super::plan::Gpu>) -> Plan {
        Plan {
            name: self.name.clone(),
            collective: self.collective.clone(),
            protocol: "Simple".into(),
            inplace: self.in_place,
            reuse_resources: false,
            num_threads_per_block: MAX_THREADS_PER_BLOCK,
            use_double_scratch_buffer: false,
            buffer_alignment: 16,
            min_message_size: self.min_bytes,
            max_message_size: self.max_bytes,
            gpus,
        }
    }
}

/// Refuses a plan with a threadblock naming more switch channels than the executor holds.
fn switch_channels_fit(plan: &Plan) -> Result<()> {
    for g in &plan.gpus {
        for tb in &g.threadblocks {
            let n: usize = tb
                .channels
                .iter()
                .filter(|c| c.channel_type == ChannelType::Switch)
                .map(|c| c.channel_ids.len())
                .sum();
            if n > MAX_CHANNELS_PER_THREADBLOCK {
                return Err(Error::Limit {
                    what: "switch channels",
                    value: n as u64,
                    limit: MAX_CHANNELS_PER_THREADBLOCK as u64,
                    context: format!(
                        "rank {}, threadblock {}: its in-switch operations span that many groups of GPUs and buffers (the MSCCL++ executor's limit per threadblock and channel type)",
                        g.id, tb.id
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The threadblock with the most operations (flattened): rank, index, count.
fn longest_threadblock(plan: &Plan) -> Option<(usize, usize, usize)> {
    plan.gpus
        .iter()
        .flat_map(|g| {
            g.threadblocks
                .iter()
                .map(move |tb| (g.id, tb.id, tb.ops.iter().map(|o| o.flat_count()).sum()))
        })
        .max_by_key(|&(r, tb, n): &(usize, usize, usize)| (n, std::cmp::Reverse((r, tb))))
}
