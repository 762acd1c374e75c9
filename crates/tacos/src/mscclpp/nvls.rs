//! All-Reduce reduced inside the NVSwitch (NVLS): each GPU has the switch sum its share of
//! the buffer over every GPU of the node (`multimem.ld_reduce`) and store the sum to every
//! GPU at once (`multimem.st`), the executor's `glres`. Per GPU, its link to the switch
//! carries the buffer plus its share up and the same down, against 2(P-1)/P of the buffer
//! each way for any algorithm whose GPUs do the sums.
//!
//! A plan of P GPUs and T threadblocks each splits the buffer into P·T chunks; threadblock t
//! of GPU r reduces chunk r·T + t. Each threadblock first meets its peers (a signal to each
//! and a wait for each: every GPU has started the launch, so its input is there and its
//! last launch is over), then runs its `glres`, then meets them again so that no GPU
//! returns before every share has been stored to it. In place only: the switch channel
//! binds one buffer, which the reduction reads and the multicast writes.

use super::plan::{
    Buff, BufferType, Channel, ChannelType, Gpu, Operation, Plan, RankGroup, Threadblock,
    ThreadblockChannels, MAX_CHANNELS_PER_OP, MAX_THREADS_PER_BLOCK,
};
use crate::error::{Error, Result};

/// The NVLS All-Reduce plan of `ranks` GPUs of one NVSwitch with `instances` threadblocks
/// each, for exactly `size_bytes`.
///
/// ```
/// use tacos::mscclpp::nvls::all_reduce;
/// use tacos::mscclpp::{verify, VerifyOptions};
/// let plan = all_reduce(8, 4, 1 << 30, "nvls").unwrap();
/// let at = VerifyOptions { size: Some(1 << 30), root: None };
/// assert_eq!(verify(&plan, &at).unwrap().ranks, 8);
/// ```
pub fn all_reduce(ranks: usize, instances: usize, size_bytes: u64, name: &str) -> Result<Plan> {
    let chunks = ranks * instances.max(1);
    if ranks < 2 || size_bytes % (16 * chunks as u64) != 0 {
        return Err(Error::plan(format!(
            "an NVLS All-Reduce of {ranks} GPUs in {instances} instances needs at least 2 GPUs and a size that is a multiple of {} bytes, not {size_bytes}",
            16 * chunks
        )));
    }
    let instances = instances.max(1);
    let peers = ranks - 1;
    let members: Vec<usize> = (0..ranks).collect();
    let gpus = (0..ranks)
        .map(|r| Gpu {
            id: r,
            input_chunks: chunks,
            output_chunks: chunks,
            scratch_chunks: 0,
            threadblocks: (0..instances)
                .map(|t| Threadblock {
                    id: t,
                    ops: threadblock_ops(peers, r * instances + t),
                    channels: node_tb_channels(t, peers),
                    remote_buffer_refs: Vec::new(),
                })
                .collect(),
            channels: node_channels(r, &members, instances, chunks),
            remote_buffers: Vec::new(),
            semaphores: Vec::new(),
        })
        .collect();
    Ok(in_place_all_reduce(name, size_bytes, gpus))
}

/// An in-place All-Reduce plan of `gpus` for exactly `size_bytes`, Simple protocol.
pub(super) fn in_place_all_reduce(name: &str, size_bytes: u64, gpus: Vec<Gpu>) -> Plan {
    Plan {
        name: name.into(),
        collective: "allreduce".into(),
        protocol: "Simple".into(),
        inplace: true,
        reuse_resources: false,
        num_threads_per_block: MAX_THREADS_PER_BLOCK,
        use_double_scratch_buffer: false,
        buffer_alignment: 16,
        min_message_size: size_bytes,
        max_message_size: size_bytes,
        gpus,
    }
}

/// A GPU's channels within its node of `members` (itself among them), for `instances`
/// threadblocks: a memory channel to each peer per threadblock (threadblock t's are
/// `t·peers..`, so each meets its namesakes), and one switch channel binding the input
/// buffer's `chunks` over the whole node.
pub(super) fn node_channels(
    me: usize,
    members: &[usize],
    instances: usize,
    chunks: usize,
) -> Vec<Channel> {
    let others: Vec<usize> = members.iter().copied().filter(|&q| q != me).collect();
    vec![
        Channel {
            channel_type: ChannelType::Memory,
            connected_to: Some(others.repeat(instances)),
            buffer_type: None,
            rank_groups: None,
        },
        Channel {
            channel_type: ChannelType::Switch,
            connected_to: None,
            buffer_type: Some(BufferType::Input),
            rank_groups: Some(vec![RankGroup {
                size: chunks,
                ranks: members.to_vec(),
            }]),
        },
    ]
}

/// Threadblock `t`'s share of [`node_channels`]: its `peers` memory channels and the switch.
pub(super) fn node_tb_channels(t: usize, peers: usize) -> Vec<ThreadblockChannels> {
    vec![
        ThreadblockChannels {
            channel_type: ChannelType::Memory,
            channel_ids: (t * peers..(t + 1) * peers).collect(),
        },
        ThreadblockChannels {
            channel_type: ChannelType::Switch,
            channel_ids: vec![0],
        },
    ]
}

/// One threadblock's operations: meet the peers, reduce `chunk` in the switch, meet again.
fn threadblock_ops(peers: usize, chunk: usize) -> Vec<Operation> {
    let mut ops = Vec::new();
    meet(&mut ops, peers);
    ops.push(Operation {
        name: "glres".into(),
        channel_type: Some(ChannelType::Switch),
        src_buff: Some(vec![switch_range(chunk, 1)]),
        dst_buff: Some(vec![switch_range(chunk, 1)]),
        ..Operation::default()
    });
    ops.push(Operation::named("nop"));
    meet(&mut ops, peers);
    ops
}

/// A meeting of a threadblock with its `peers` node peers over its memory channels
/// `0..peers`: a signal to each, a wait for each, and a `nop` that makes what the waits
/// saw visible to the whole threadblock.
pub(super) fn meet(ops: &mut Vec<Operation>, peers: usize) {
    for name in ["signal", "wait"] {
        let ids: Vec<usize> = (0..peers).collect();
        for group in ids.chunks(MAX_CHANNELS_PER_OP) {
            ops.push(Operation {
                name: name.into(),
                channel_type: Some(ChannelType::Memory),
                channel_ids: Some(group.to_vec()),
                ..Operation::default()
            });
        }
    }
    ops.push(Operation::named("nop"));
}

/// `size` chunks from `index` through the threadblock's switch channel 0.
pub(super) fn switch_range(index: usize, size: usize) -> Buff {
    Buff::switch(0, index, size)
}
