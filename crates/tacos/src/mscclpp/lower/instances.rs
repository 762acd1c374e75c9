//! Instances: copies of a plan, each moving 1/n of every chunk on threadblocks and
//! channels of its own, so that n times as many threadblocks drive each link.
//!
//! Chunk c of the plan becomes sub-chunks c·n .. c·n + n - 1, instance i taking sub-chunk
//! c·n + i everywhere (input, output, scratch, remote); each instance's channels follow the
//! first's in every GPU's lists (the k-th channel to a peer still pairs with the peer's
//! k-th channel back), its threadblocks and semaphores likewise. Switch channels are not
//! copied: each binds a whole buffer, n times the chunks, which every instance shares.

use crate::error::{Error, Result};
use crate::mscclpp::plan::{Buff, ChannelType, Gpu, Operation, Plan};
use std::collections::HashMap;

/// `plan` as `n` instances. Only plans whose ranges are single chunks are replicated (what
/// the lowering writes).
pub(super) fn replicate(plan: &Plan, n: usize) -> Result<Plan> {
    if n <= 1 {
        return Ok(plan.clone());
    }
    let gpus = plan
        .gpus
        .iter()
        .map(|g| replicate_gpu(g, n))
        .collect::<Result<Vec<_>>>()?;
    Ok(Plan {
        gpus,
        ..plan.clone()
    })
}

fn replicate_gpu(gpu: &Gpu, n: usize) -> Result<Gpu> {
    // GPU-level channels per type, and the offset of instance i's copy of each type.
    let mut lengths: HashMap<_, usize> = HashMap::new();
    for c in &gpu.channels {
        *lengths.entry(c.channel_type).or_default() += c.connected_to.as_ref().map_or(0, Vec::len);
    }
    let (switches, peers): (Vec<_>, Vec<_>) = gpu
        .channels
        .iter()
        .partition(|c| c.channel_type == ChannelType::Switch);
    let mut channels = Vec::with_capacity(peers.len() * n + switches.len());
    for _ in 0..n {
        channels.extend(peers.iter().map(|&c| c.clone()));
    }
    channels.extend(switches.into_iter().map(|c| {
        let mut c = c.clone();
        for g in c.rank_groups.iter_mut().flatten() {
            g.size *= n;
        }
        c
    }));
    let blocks = gpu.threadblocks.len();
    let semaphores = gpu.semaphores.len();
    let mut threadblocks = Vec::with_capacity(blocks * n);
    for i in 0..n {
        for tb in &gpu.threadblocks {
            let mut copy = tb.clone();
            copy.id = i * blocks + tb.id;
            for c in &mut copy.channels {
                let shift = i * lengths.get(&c.channel_type).copied().unwrap_or(0);
                for id in &mut c.channel_ids {
                    *id += shift;
                }
            }
            for op in &mut copy.ops {
                shift_op(op, n, i, i * semaphores, gpu.id, tb.id)?;
            }
            threadblocks.push(copy);
        }
    }
    let mut sems = Vec::with_capacity(semaphores * n);
    for _ in 0..n {
        sems.extend(gpu.semaphores.iter().cloned());
    }
    Ok(Gpu {
        id: gpu.id,
        input_chunks: gpu.input_chunks * n,
        output_chunks: gpu.output_chunks * n,
        scratch_chunks: gpu.scratch_chunks * n,
        threadblocks,
        channels,
        remote_buffers: gpu.remote_buffers.clone(),
        semaphores: sems,
    })
}

/// Instance `i`'s copy of `op`: sub-chunk indices, semaphore ids past the earlier copies'.
fn shift_op(
    op: &mut Operation,
    n: usize,
    i: usize,
    sem_shift: usize,
    rank: usize,
    tb: usize,
) -> Result<()> {
    let shift = |b: &mut Buff| {
        if b.size != 1 {
            return Err(Error::plan(format!(
                "rank {rank}, threadblock {tb}, op {}: a range of {} chunks cannot be split into instances",
                op.name, b.size
            )));
        }
        b.index = b.index * n + i;
        Ok(())
    };
    for b in op.src_buff.iter_mut().flatten() {
        shift(b)?;
    }
    for b in op.dst_buff.iter_mut().flatten() {
        shift(b)?;
    }
    for s in op.semaphore_ids.iter_mut().flatten() {
        *s += sem_shift;
    }
    Ok(())
}
