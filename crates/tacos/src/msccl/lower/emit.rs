//! Threadblocks and steps for one channel assignment.
//!
//! Each transfer gets a channel; a (sender, receiver, channel) connection belongs to one
//! threadblock at each end. On every rank and channel, receive connections are paired
//! with send connections so that chunks passing straight through (arriving and leaving
//! at the same instant) meet in one threadblock, where a fused `rcs`, `rrs` or `rrcs`
//! replaces the receive and the send; the remaining connections pair with the same peer,
//! then with any other, to keep threadblocks few. Then every transfer becomes steps, in
//! replay order: where each value lives (its output slot, else a scratch slot; the input
//! for initial contributions), what each step waits for (the step that made the value it
//! reads, and every earlier reader of a slot it overwrites), and final local copies into
//! output slots a value did not land in.

use super::flow::{Flow, VersionId};
use crate::msccl::layout::Slot;
use crate::msccl::{Buf, Instr, Layout};
use std::collections::BTreeSet;

/// How transfers are spread over channels and threadblocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Spread {
    pub channels: usize,
    pub split: Split,
    /// Receive and send connections share threadblocks (as fused steps need); unpaired,
    /// each connection has a threadblock of its own, half as many steps each.
    pub paired: bool,
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let split = match (self.channels, self.split) {
            (1, _) => "",
            (_, Split::Chunk) => " by chunk",
            (_, Split::Turn) => " by turn",
            (_, Split::Peer) => " by peer",
            (_, Split::Busy) => " on the busiest links",
        };
        write!(
            f,
            "{} channel{}{split}, {}",
            self.channels,
            if self.channels == 1 { "" } else { "s" },
            if self.paired {
                "connections paired"
            } else {
                "one threadblock per connection"
            }
        )
    }
}

/// Which channel a transfer takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// Chunk mod channels: a chunk keeps its channel along its path, so it can still pass
    /// straight through.
    Chunk,
    /// Its turn on its link mod channels: a link's transfers alternate between channels.
    Turn,
    /// (receiver - sender) mod ranks mod channels: a rank's peers spread over channels.
    Peer,
    /// Only the busiest links spread: with `per` the most transfers of a link over the
    /// channels, a link of n transfers alternates between ceil(n / per) channels, a
    /// link of at most `per` keeps channel 0.
    Busy,
}

/// (sender rank, receiver rank, channel).
type Conn = (usize, usize, usize);

pub(super) struct TbPlan {
    pub rank: usize,
    pub send: Option<usize>,
    pub recv: Option<usize>,
    pub channel: usize,
}

pub(super) struct OpPlan {
    pub rank: usize,
    pub tb: usize,
    pub instr: Instr,
    pub src: Option<Slot>,
    pub dst: Option<Slot>,
    /// The transfers it receives and sends.
    pub recv: Option<usize>,
    pub send: Option<usize>,
    pub deps: Vec<usize>,
    /// Replay position, then class (transfers before final copies).
    pub key: (usize, u8),
}

pub(super) struct Plan {
    pub tbs: Vec<TbPlan>,
    pub ops: Vec<OpPlan>,
    /// Scratch chunks per rank.
    pub scratch: Vec<usize>,
}

#[derive(Clone, Default)]
struct SlotUse {
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// Marks a move with no threadblock (dropped) and a chunk with no scratch slot yet.
const NONE: usize = usize::MAX;

struct Emitter<'a> {
    flow: &'a Flow,
    layout: &'a Layout,
    /// Per move: the threadblocks that send and receive it (`NONE` if dropped).
    tb_of_send: Vec<usize>,
    tb_of_recv: Vec<usize>,
    fused: Vec<Option<usize>>,
    fused_send: Vec<bool>,
    /// Per rank, the threadblock that copies its own contribution where it must go.
    local_tb: Vec<usize>,
    ops: Vec<OpPlan>,
    /// Per version: where it lives (None: never stored) and the op that made it.
    loc: Vec<Option<Slot>>,
    made_by: Vec<Option<usize>>,
    /// Per rank and slot (`slot_index`): who last wrote it and who read it since.
    slots: Vec<SlotUse>,
    /// Slots per rank in `slots`: input, output, then one scratch slot per chunk at most.
    slots_per_rank: usize,
    scratch: Vec<usize>,
    /// Per rank and chunk: its scratch slot, or `NONE`.
    scratch_of: Vec<usize>,
}

/// Threadblocks, which threadblock sends and receives each transfer, and which arrivals
/// fuse with the departure they pass straight through: everything but the steps.
pub(super) struct Assignment {
    pub tbs: Vec<TbPlan>,
    /// Per move: the threadblocks that send and receive it (`NONE` if dropped).
    tb_of_send: Vec<usize>,
    tb_of_recv: Vec<usize>,
    /// Per rank, the threadblock that copies its own contribution where it must go.
    local_tb: Vec<usize>,
    fused: Vec<Option<usize>>,
    fused_send: Vec<bool>,
}

impl Assignment {
    /// Per threadblock, the steps its transfers take (nops and final copies left out):
    /// a receive per arrival and a send per departure not fused with one.
    pub fn transfer_steps(&self) -> Vec<usize> {
        let mut steps = vec![0; self.tbs.len()];
        for (i, &t) in self.tb_of_recv.iter().enumerate() {
            if t != NONE {
                steps[t] += 1;
                if !self.fused_send[i] {
                    steps[self.tb_of_send[i]] += 1;
                }
            }
        }
        steps
    }
}

pub(super) fn assign(flow: &Flow, layout: &Layout, spread: Spread) -> Assignment {
    let ranks = layout.ranks();
    let mut turns: Vec<usize> = vec![0; ranks * ranks];
    let mut turn = vec![0; flow.moves.len()];
    for &(i, departs) in &flow.events {
        let m = &flow.moves[i];
        if departs && !m.dropped {
            let next = &mut turns[m.src * ranks + m.dst];
            turn[i] = *next;
            *next += 1;
        }
    }
    let per = turns
        .iter()
        .max()
        .map_or(1, |&n| n.div_ceil(spread.channels).max(1));
    let channel: Vec<usize> = flow
        .moves
        .iter()
        .enumerate()
        .map(|(i, m)| match spread.split {
            Split::Chunk => m.chunk % spread.channels,
            Split::Turn => turn[i] % spread.channels,
            Split::Peer => (m.dst + ranks - m.src) % ranks % spread.channels,
            Split::Busy => turn[i] % turns[m.src * ranks + m.dst].div_ceil(per),
        })
        .collect();
    let conn = |i: usize| -> Conn { (flow.moves[i].src, flow.moves[i].dst, channel[i]) };
    let live = |i: &usize| !flow.moves[*i].dropped;
    // Each rank's connections, sorted and without repeats.
    let mut sends: Vec<Vec<Conn>> = vec![Vec::new(); ranks];
    let mut recvs: Vec<Vec<Conn>> = vec![Vec::new(); ranks];
    for i in (0..flow.moves.len()).filter(live) {
        let c = conn(i);
        sends[c.0].push(c);
        recvs[c.1].push(c);
    }
    for list in sends.iter_mut().chain(&mut recvs) {
        list.sort_unstable();
        list.dedup();
    }
    // How many chunks could pass straight through each (receive, send) pair, per rank.
    let mut pairs_through: Vec<Vec<(Conn, Conn)>> = vec![Vec::new(); ranks];
    for (a, d) in flow.straight_through.iter().enumerate() {
        if let Some(d) = *d {
            if channel[a] == channel[d] {
                pairs_through[flow.moves[a].dst].push((conn(a), conn(d)));
            }
        }
    }
    let through: Vec<Vec<((Conn, Conn), usize)>> = pairs_through
        .into_iter()
        .map(|mut list| {
            list.sort_unstable();
            let mut counted: Vec<((Conn, Conn), usize)> = Vec::new();
            for pair in list {
                match counted.last_mut() {
                    Some((last, n)) if *last == pair => *n += 1,
                    _ => counted.push((pair, 1)),
                }
            }
            counted
        })
        .collect();
    // Threadblock of each connection end, indexed by `conn_index`.
    let channels = spread.channels;
    let conn_index = |c: Conn| (c.0 * ranks + c.1) * channels + c.2;
    let mut tbs = Vec::new();
    let mut tb_of_send = vec![NONE; ranks * ranks * channels];
    let mut tb_of_recv = vec![NONE; ranks * ranks * channels];
    let mut local_tb = Vec::with_capacity(ranks);
    for rank in 0..ranks {
        let pairs = if spread.paired {
            pair_connections(&recvs[rank], &sends[rank], &through[rank])
        } else {
            let recv = recvs[rank].iter().map(|&r| (Some(r), None));
            let send = sends[rank].iter().map(|&s| (None, Some(s)));
            recv.chain(send).collect()
        };
        let first = tbs.len();
        for (recv, send) in pairs {
            let id = tbs.len();
            let channel = recv.or(send).map_or(0, |c| c.2);
            if let Some(r) = recv {
                tb_of_recv[conn_index(r)] = id;
            }
            if let Some(s) = send {
                tb_of_send[conn_index(s)] = id;
            }
            tbs.push(TbPlan {
                rank,
                send: send.map(|c| c.1),
                recv: recv.map(|c| c.0),
                channel,
            });
        }
        if tbs.len() == first {
            tbs.push(TbPlan {
                rank,
                send: None,
                recv: None,
                channel: 0,
            });
        }
        local_tb.push(first);
    }
    let mut tb_of_send_move = vec![NONE; flow.moves.len()];
    let mut tb_of_recv_move = vec![NONE; flow.moves.len()];
    for i in (0..flow.moves.len()).filter(live) {
        tb_of_send_move[i] = tb_of_send[conn_index(conn(i))];
        tb_of_recv_move[i] = tb_of_recv[conn_index(conn(i))];
    }
    let (fused, fused_send) = choose_fusions(flow, &tb_of_send_move, &tb_of_recv_move);
    let mut assignment = Assignment {
        tbs,
        tb_of_send: tb_of_send_move,
        tb_of_recv: tb_of_recv_move,
        local_tb,
        fused,
        fused_send,
    };
    // Copies of a rank's own contribution wait for nothing: they go to its threadblock
    // with the fewest transfer steps, not to one that may be full.
    let steps = assignment.transfer_steps();
    for (t, tb) in assignment.tbs.iter().enumerate() {
        let local = &mut assignment.local_tb[tb.rank];
        if steps[t] < steps[*local] {
            *local = t;
        }
    }
    assignment
}

/// Every transfer's steps, in replay order, on the threadblocks `assignment` gives.
pub(super) fn plan(flow: &Flow, layout: &Layout, assignment: Assignment) -> Plan {
    let ranks = layout.ranks();
    let chunks = layout.chunks();
    let slots_per_rank =
        layout.canonical_len(Buf::Input) + layout.canonical_len(Buf::Output) + chunks;
    let Assignment {
        tbs,
        tb_of_send,
        tb_of_recv,
        local_tb,
        fused,
        fused_send,
    } = assignment;
    let mut e = Emitter {
        flow,
        layout,
        tb_of_send,
        tb_of_recv,
        fused,
        fused_send,
        local_tb,
        ops: Vec::new(),
        loc: vec![None; flow.versions.len()],
        made_by: vec![None; flow.versions.len()],
        slots: vec![SlotUse::default(); ranks * slots_per_rank],
        slots_per_rank,
        scratch: vec![0; ranks],
        scratch_of: vec![NONE; ranks * chunks],
    };
    e.emit();
    Plan {
        tbs,
        ops: e.ops,
        scratch: e.scratch,
    }
}

/// Pairs one rank's receive and send connections into threadblocks: pairs with the most
/// straight-through chunks first, then same-peer pairs, then any two on one channel.
fn pair_connections(
    recvs: &[Conn],
    sends: &[Conn],
    through: &[((Conn, Conn), usize)],
) -> Vec<(Option<Conn>, Option<Conn>)> {
    let mut free_r: BTreeSet<Conn> = recvs.iter().copied().collect();
    let mut free_s: BTreeSet<Conn> = sends.iter().copied().collect();
    let mut pairs = Vec::new();
    let mut ranked: Vec<(&(Conn, Conn), &usize)> = through.iter().map(|(k, w)| (k, w)).collect();
    ranked.sort_by_key(|&(k, w)| (std::cmp::Reverse(*w), *k));
    for (&(r, s), _) in ranked {
        if free_r.contains(&r) && free_s.contains(&s) {
            free_r.remove(&r);
            free_s.remove(&s);
            pairs.push((Some(r), Some(s)));
        }
    }
    for r in free_r.clone() {
        let same_peer = (r.1, r.0, r.2);
        if free_s.remove(&same_peer) {
            free_r.remove(&r);
            pairs.push((Some(r), Some(same_peer)));
        }
    }
    for r in free_r.clone() {
        if let Some(&s) = free_s.iter().find(|s| s.2 == r.2) {
            free_s.remove(&s);
            free_r.remove(&r);
            pairs.push((Some(r), Some(s)));
        }
    }
    pairs.extend(free_r.into_iter().map(|r| (Some(r), None)));
    pairs.extend(free_s.into_iter().map(|s| (None, Some(s))));
    let key = |p: &(Option<Conn>, Option<Conn>)| {
        let channel = p.0.or(p.1).map_or(0, |c| c.2);
        (
            channel,
            p.1.map_or(usize::MAX, |c| c.1),
            p.0.map_or(usize::MAX, |c| c.0),
        )
    };
    pairs.sort_by_key(key);
    pairs
}

/// Fuses straight-through pairs whose receive and send share a threadblock, keeping the
/// fused pairs in the same order on both connections.
fn choose_fusions(
    flow: &Flow,
    tb_of_send: &[usize],
    tb_of_recv: &[usize],
) -> (Vec<Option<usize>>, Vec<bool>) {
    // (threadblock, arrival's position in the replay, arrival, departure).
    let mut candidates: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (a, d) in flow.straight_through.iter().enumerate() {
        let Some(d) = *d else { continue };
        let (ta, td) = (tb_of_recv[a], tb_of_send[d]);
        if ta != NONE && ta == td {
            candidates.push((ta, flow.moves[a].arrive_seq, a, d));
        }
    }
    candidates.sort_unstable();
    let mut fused = vec![None; flow.moves.len()];
    let mut fused_send = vec![false; flow.moves.len()];
    // Per threadblock, in arrival order: the last fused departure's position.
    let mut last: Option<(usize, usize)> = None;
    for &(tb, _, a, d) in &candidates {
        let seq = flow.moves[d].depart_seq;
        if last.map_or(true, |(t, l)| t != tb || seq > l) {
            fused[a] = Some(d);
            fused_send[d] = true;
            last = Some((tb, seq));
        }
    }
    (fused, fused_send)
}

impl Emitter<'_> {
    fn emit(&mut self) {
        for (v, version) in self.flow.versions.iter().enumerate() {
            if version.producer.is_none() {
                self.loc[v] = self.layout.input_slot(version.rank, version.chunk);
            }
        }
        for seq in 0..self.flow.events.len() {
            let (i, departs) = self.flow.events[seq];
            if self.flow.moves[i].dropped {
                continue;
            }
            if departs {
                if !self.fused_send[i] {
                    self.emit_send(i, seq);
                }
            } else {
                self.emit_arrival(i, seq);
            }
        }
        for f in 0..self.flow.finals.len() {
            self.emit_final(f);
        }
    }

    /// Where a stored version of `chunk` on `rank` lives: its output slot, else the
    /// rank's scratch slot for that chunk.
    fn home(&mut self, rank: usize, chunk: usize) -> Slot {
        if let Some(slot) = self.layout.output_slot(rank, chunk) {
            return slot;
        }
        let of = &mut self.scratch_of[rank * self.layout.chunks() + chunk];
        if *of == NONE {
            *of = self.scratch[rank];
            self.scratch[rank] += 1;
        }
        Slot::new(Buf::Scratch, *of)
    }

    /// Who used `slot` on `rank`.
    fn slot_use(&mut self, rank: usize, slot: Slot) -> &mut SlotUse {
        let within = match slot.buf {
            Buf::Input => slot.index,
            Buf::Output => self.layout.canonical_len(Buf::Input) + slot.index,
            Buf::Scratch => {
                self.layout.canonical_len(Buf::Input)
                    + self.layout.canonical_len(Buf::Output)
                    + slot.index
            }
        };
        &mut self.slots[rank * self.slots_per_rank + within]
    }

    fn push(&mut self, op: OpPlan) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// Records that `op` reads the value of `v`, and makes it wait for its maker.
    fn read(&mut self, op: usize, v: VersionId) -> Option<Slot> {
        let rank = self.flow.versions[v].rank;
        let slot = self.loc[v]?;
        if let Some(maker) = self.made_by[v] {
            self.ops[op].deps.push(maker);
        }
        self.slot_use(rank, slot).readers.push(op);
        Some(slot)
    }

    /// Records that `op` overwrites `slot`: it waits for every reader of the old value,
    /// or for its writer when nobody read it.
    fn write(&mut self, op: usize, rank: usize, slot: Slot) {
        let used = self.slot_use(rank, slot);
        let mut deps: Vec<usize> = used.readers.iter().copied().filter(|&r| r != op).collect();
        if deps.is_empty() {
            deps.extend(used.writer.filter(|&w| w != op));
        }
        used.writer = Some(op);
        used.readers.clear();
        self.ops[op].deps.extend(deps);
    }

    fn emit_send(&mut self, i: usize, seq: usize) {
        let m = &self.flow.moves[i];
        let op = self.push(OpPlan {
            rank: m.src,
            tb: self.tb_of_send[i],
            instr: Instr::Send,
            src: None,
            dst: None,
            recv: None,
            send: Some(i),
            deps: Vec::new(),
            key: (seq, 0),
        });
        self.ops[op].src = self.read(op, m.sends);
    }

    fn emit_arrival(&mut self, a: usize, seq: usize) {
        let m = &self.flow.moves[a];
        let v = m.creates;
        let fused = self.fused[a];
        let base = self.flow.versions[v].base;
        let store = self.flow.must_store(v, fused) || base.is_none();
        let instr = match (base.is_some(), fused.is_some(), store) {
            (false, false, _) => Instr::Recv,
            (false, true, _) => Instr::RecvCopySend,
            (true, false, _) => Instr::RecvReduceCopy,
            (true, true, true) => Instr::RecvReduceCopySend,
            (true, true, false) => Instr::RecvReduceSend,
        };
        // A fused step runs with its departure, after every arrival of that moment.
        let key = fused.map_or(seq, |d| self.flow.moves[d].depart_seq);
        let op = self.push(OpPlan {
            rank: m.dst,
            tb: self.tb_of_recv[a],
            instr,
            src: None,
            dst: None,
            recv: Some(a),
            send: fused,
            deps: Vec::new(),
            key: (key, 0),
        });
        if let Some(b) = base {
            self.ops[op].src = self.read(op, b);
        }
        if store {
            let slot = self.home(m.dst, m.chunk);
            self.write(op, m.dst, slot);
            self.ops[op].dst = Some(slot);
            self.loc[v] = Some(slot);
        }
        self.made_by[v] = Some(op);
    }

    /// A local copy into the output slot when the final value lives elsewhere.
    fn emit_final(&mut self, f: usize) {
        let (rank, chunk, v) = self.flow.finals[f];
        let Some(out) = self.layout.output_slot(rank, chunk) else {
            return;
        };
        if self.loc[v] == Some(out) {
            return;
        }
        let maker = self.made_by[v];
        let tb = maker.map_or(self.local_tb[rank], |o| self.ops[o].tb);
        let key = maker.map_or(0, |o| self.ops[o].key.0);
        let op = self.push(OpPlan {
            rank,
            tb,
            instr: Instr::Copy,
            src: None,
            dst: Some(out),
            recv: None,
            send: None,
            deps: Vec::new(),
            key: (key, 1),
        });
        self.ops[op].src = self.read(op, v);
        self.write(op, rank, out);
        let latest = self.ops[op].deps.iter().map(|&d| self.ops[d].key.0).max();
        self.ops[op].key.0 = key.max(latest.unwrap_or(0));
    }
}
