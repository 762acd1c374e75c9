//! Emission: each rank's abstract threadblocks become the plan's JSON operations.
//!
//! Ordering is made explicit here, as the executor needs it: a `nop` (the threadblock's
//! only thread barrier) wherever an operation touches a slot an earlier one of the same
//! threadblock wrote, or writes one it read, and before a signal or a semaphore release
//! (which publish what the whole block did); a semaphore per dependency between
//! threadblocks, released after the producer and acquired, then a `nop`, before the
//! consumer. Over a port channel a put and its signal are one `pws` (data then signal
//! through the proxy, in order), flushed (`pwsf`) where its source is overwritten later
//! and at a threadblock's last put. In-switch operations (`glres`, `gstore`) name the
//! threadblock's switch channels; every member of a switch channel lists it, in the
//! plan's order, whether or not it runs an operation on it.

use super::build::{Kind, OpRef, RankOps, Slot, SwitchChannel};
use super::lanes::Lanes;
use crate::mscclpp::plan::{
    Buff, BufferType, Channel, ChannelType, Gpu, Operation, RankGroup, RemoteBuffer,
    RemoteBufferRefs, Semaphore, Threadblock, ThreadblockChannels, MAX_SEMAPHORES_PER_OP,
};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The GPU entry of `rank`, with `chunks` (input, output) declared and the plan's
/// `switches` it is a member of.
pub(super) fn gpu(
    rank: usize,
    ops: &RankOps,
    lanes: &Lanes,
    lane_type: &[ChannelType],
    switches: &[SwitchChannel],
    chunks: (usize, usize),
) -> Gpu {
    // The rank's switch channels: the plan's it is in, in the plan's order.
    let mine: Vec<usize> = (0..switches.len())
        .filter(|&s| switches[s].ranks.contains(&rank))
        .collect();
    // Channels: one per lane at this rank, listed in lane order at both ends, so the k-th
    // occurrence of a peer here pairs with the k-th occurrence of this rank there.
    let mut lists: BTreeMap<ChannelType, Vec<usize>> = BTreeMap::new();
    let mut lane_channel: HashMap<usize, (ChannelType, usize)> = HashMap::new();
    for (l, lane) in lanes.lanes.iter().enumerate() {
        let peer = if lane.low == rank {
            lane.high
        } else if lane.high == rank {
            lane.low
        } else {
            continue;
        };
        let list = lists.entry(lane_type[l]).or_default();
        lane_channel.insert(l, (lane_type[l], list.len()));
        list.push(peer);
    }
    let mut releases: HashMap<OpRef, Vec<usize>> = HashMap::new();
    let mut acquires: HashMap<OpRef, Vec<usize>> = HashMap::new();
    let mut semaphores = 0;
    for (tb, block) in ops.blocks.iter().enumerate() {
        for (op, a) in block.ops.iter().enumerate() {
            for &producer in &a.after {
                releases.entry(producer).or_default().push(semaphores);
                acquires
                    .entry(OpRef { tb, op })
                    .or_default()
                    .push(semaphores);
                semaphores += 1;
            }
        }
    }
    let mut remote: Vec<RemoteBuffer> = Vec::new();
    let mut remote_index: HashMap<(usize, BufferType, ChannelType), usize> = HashMap::new();
    let threadblocks = ops
        .blocks
        .iter()
        .enumerate()
        .map(|(tb, block)| {
            let channel = block.lane.map(|l| lane_channel[&l]);
            let mut writer = BlockWriter::new(channel.map(|c| c.0));
            let gpu_switch = |s: usize| mine.iter().position(|&m| m == s).unwrap_or_default();
            let last_put = block
                .ops
                .iter()
                .rposition(|a| matches!(a.kind, Kind::Put { .. }));
            let mut i = 0;
            while i < block.ops.len() {
                let a = &block.ops[i];
                let at = OpRef { tb, op: i };
                if let Some(ids) = acquires.get(&at) {
                    writer.semaphores("sem_acquire", ids);
                    writer.nop();
                }
                let mut fused_signal = false;
                match &a.kind {
                    Kind::Signal | Kind::Lend { .. } => writer.signal(),
                    Kind::SwitchReduce { from, src, to, dst } => {
                        let from = writer.switch_id(gpu_switch(*from));
                        let to = writer.switch_id(gpu_switch(*to));
                        writer.switch(
                            "glres",
                            Buff::switch(from, src.1, 1),
                            *src,
                            Buff::switch(to, dst.1, 1),
                            *dst,
                        )
                    }
                    Kind::SwitchStore { src, to, dst } => {
                        let to = writer.switch_id(gpu_switch(*to));
                        writer.switch(
                            "gstore",
                            Buff::local(src.0, src.1, 1),
                            *src,
                            Buff::switch(to, dst.1, 1),
                            *dst,
                        )
                    }
                    Kind::Wait { arrives } => writer.wait(*arrives),
                    Kind::Copy { src, dst } => writer.local("copy", &[*src], *dst),
                    Kind::Sum { dst, a: x, b: y } => writer.local("re", &[*x, *y], *dst),
                    Kind::Put {
                        src,
                        dst: (peer, slot),
                    } => {
                        let access = channel.map_or(ChannelType::Memory, |c| c.0);
                        let key = (*peer, slot.0, access);
                        let gpu_id = *remote_index.entry(key).or_insert_with(|| {
                            remote.push(RemoteBuffer {
                                rank: *peer,
                                buffer_type: slot.0,
                                access_channel_types: vec![access],
                            });
                            remote.len() - 1
                        });
                        let next_signals =
                            matches!(block.ops.get(i + 1).map(|n| &n.kind), Some(Kind::Signal))
                                && !acquires.contains_key(&OpRef { tb, op: i + 1 });
                        let port = access == ChannelType::Port;
                        fused_signal = port && next_signals && !releases.contains_key(&at);
                        let flush = a.source_reused || Some(i) == last_put;
                        writer.put(*src, gpu_id, slot.1, fused_signal, flush);
                    }
                }
                if let Some(ids) = releases.get(&at) {
                    writer.nop_if_busy();
                    writer.semaphores("sem_release", ids);
                }
                i += if fused_signal { 2 } else { 1 };
            }
            writer.finish(tb, channel)
        })
        .collect();
    let mut channels: Vec<Channel> = lists
        .into_iter()
        .map(|(channel_type, peers)| Channel {
            channel_type,
            connected_to: Some(peers),
            buffer_type: None,
            rank_groups: None,
        })
        .collect();
    channels.extend(mine.iter().map(|&s| {
        let SwitchChannel { ranks, buffer } = &switches[s];
        let size = match buffer {
            BufferType::Input => chunks.0,
            BufferType::Output => chunks.1,
            BufferType::Scratch => ops.scratch_chunks,
        };
        Channel {
            channel_type: ChannelType::Switch,
            connected_to: None,
            buffer_type: Some(*buffer),
            rank_groups: Some(vec![RankGroup {
                size,
                ranks: ranks.clone(),
            }]),
        }
    }));
    Gpu {
        id: rank,
        input_chunks: chunks.0,
        output_chunks: chunks.1,
        scratch_chunks: ops.scratch_chunks,
        threadblocks,
        channels,
        remote_buffers: remote,
        semaphores: vec![Semaphore { init_value: 0 }; semaphores],
    }
}

/// One threadblock's operations as they are written, with the `nop`s its data needs.
struct BlockWriter {
    channel_type: Option<ChannelType>,
    ops: Vec<Operation>,
    /// Slots read and written since the last `nop`.
    read: HashSet<Slot>,
    written: HashSet<Slot>,
    /// Data moved or waited for since the last `nop` (what a signal or release publishes).
    busy: bool,
    /// A wait since the last `nop`: what follows must not start before it passes.
    waited: bool,
    /// The threadblock's remote buffers: GPU-level ids, in the order ops name them.
    remote: Vec<usize>,
    /// The threadblock's switch channels: GPU-level ids, in the order ops name them.
    switches: Vec<usize>,
}

impl BlockWriter {
    fn new(channel_type: Option<ChannelType>) -> BlockWriter {
        BlockWriter {
            channel_type,
            ops: Vec::new(),
            read: HashSet::new(),
            written: HashSet::new(),
            busy: false,
            waited: false,
            remote: Vec::new(),
            switches: Vec::new(),
        }
    }

    fn nop(&mut self) {
        self.ops.push(Operation::named("nop"));
        self.read.clear();
        self.written.clear();
        self.busy = false;
        self.waited = false;
    }

    fn nop_if_busy(&mut self) {
        if self.busy {
            self.nop();
        }
    }

    /// A `nop` first where `reads` or `writes` touch what the block did since the last,
    /// or a wait came since.
    fn order(&mut self, reads: &[Slot], writes: &[Slot]) {
        let clash = self.waited
            || reads.iter().any(|s| self.written.contains(s))
            || writes
                .iter()
                .any(|s| self.written.contains(s) || self.read.contains(s));
        if clash {
            self.nop();
        }
        self.read.extend(reads);
        self.written.extend(writes);
        self.busy = true;
    }

    fn channel_op(&self, name: &str) -> Operation {
        Operation {
            name: name.into(),
            channel_type: self.channel_type,
            channel_ids: Some(vec![0]),
            ..Operation::default()
        }
    }

    fn signal(&mut self) {
        self.nop_if_busy();
        self.ops.push(self.channel_op("signal"));
    }

    fn wait(&mut self, arrives: Option<Slot>) {
        self.written.extend(arrives);
        self.ops.push(self.channel_op("wait"));
        self.busy = true;
        self.waited = true;
    }

    fn local(&mut self, name: &str, srcs: &[Slot], dst: Slot) {
        self.order(srcs, &[dst]);
        self.ops.push(Operation {
            name: name.into(),
            src_buff: Some(srcs.iter().map(|s| Buff::local(s.0, s.1, 1)).collect()),
            dst_buff: Some(vec![Buff::local(dst.0, dst.1, 1)]),
            ..Operation::default()
        });
    }

    fn put(&mut self, src: Slot, gpu_id: usize, index: usize, signal: bool, flush: bool) {
        self.order(&[src], &[]);
        let id = match self.remote.iter().position(|&g| g == gpu_id) {
            Some(id) => id,
            None => {
                self.remote.push(gpu_id);
                self.remote.len() - 1
            }
        };
        let name = match (signal, flush) {
            (false, _) => "put",
            (true, false) => "pws",
            (true, true) => "pwsf",
        };
        self.ops.push(Operation {
            src_buff: Some(vec![Buff::local(src.0, src.1, 1)]),
            dst_buff: Some(vec![Buff::remote(id, index, 1)]),
            ..self.channel_op(name)
        });
    }

    /// The threadblock's id of GPU-level switch channel `gpu_id`.
    fn switch_id(&mut self, gpu_id: usize) -> usize {
        match self.switches.iter().position(|&g| g == gpu_id) {
            Some(id) => id,
            None => {
                self.switches.push(gpu_id);
                self.switches.len() - 1
            }
        }
    }

    /// An in-switch operation from `src` (local slot `read`) to `dst` (local slot
    /// `written`, and the same on every member).
    fn switch(&mut self, name: &str, src: Buff, read: Slot, dst: Buff, written: Slot) {
        self.order(&[read], &[written]);
        self.ops.push(Operation {
            name: name.into(),
            channel_type: Some(ChannelType::Switch),
            src_buff: Some(vec![src]),
            dst_buff: Some(vec![dst]),
            ..Operation::default()
        });
    }

    fn semaphores(&mut self, name: &str, ids: &[usize]) {
        if self.waited {
            self.nop();
        }
        for group in ids.chunks(MAX_SEMAPHORES_PER_OP) {
            self.ops.push(Operation {
                name: name.into(),
                semaphore_ids: Some(group.to_vec()),
                ..Operation::default()
            });
        }
    }

    fn finish(self, id: usize, channel: Option<(ChannelType, usize)>) -> Threadblock {
        let mut channels: Vec<ThreadblockChannels> = channel
            .map(|(channel_type, index)| ThreadblockChannels {
                channel_type,
                channel_ids: vec![index],
            })
            .into_iter()
            .collect();
        if !self.switches.is_empty() {
            channels.push(ThreadblockChannels {
                channel_type: ChannelType::Switch,
                channel_ids: self.switches,
            });
        }
        let remote_buffer_refs = match (channel, self.remote.is_empty()) {
            (Some((access, _)), false) => vec![RemoteBufferRefs {
                access_channel_type: access,
                remote_buffer_ids: self.remote,
            }],
            _ => Vec::new(),
        };
        Threadblock {
            id,
            ops: self.ops,
            channels,
            remote_buffer_refs,
        }
    }
}
