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
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How transfers are spread over channels and threadblocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Spread {
    pub channels: usize,
    pub split: Split,
    /// Receive and send connections share threadblocks (as fused steps need); unpaired,
    /// each connection has a threadblock of its own, half as many steps each.
    pub paired: bool,
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

#[derive(Default)]
struct SlotUse {
    writer: Option<usize>,
    readers: Vec<usize>,
}

struct Emitter<'a> {
    flow: &'a Flow,
    layout: &'a Layout,
    tb_of_send: HashMap<usize, usize>,
    tb_of_recv: HashMap<usize, usize>,
    fused: Vec<Option<usize>>,
    fused_send: Vec<bool>,
    /// First threadblock of each rank, for local copies of initial values.
    local_tb: Vec<usize>,
    ops: Vec<OpPlan>,
    /// Per version: where it lives (None: never stored) and the op that made it.
    loc: Vec<Option<Slot>>,
    made_by: Vec<Option<usize>>,
    slots: HashMap<(usize, Slot), SlotUse>,
    scratch: Vec<usize>,
    scratch_of: HashMap<(usize, usize), usize>,
}

pub(super) fn plan(flow: &Flow, layout: &Layout, spread: Spread) -> Plan {
    let ranks = layout.ranks();
    let mut turns: HashMap<(usize, usize), usize> = HashMap::new();
    let mut turn = vec![0; flow.moves.len()];
    for &(i, departs) in &flow.events {
        if departs {
            let m = &flow.moves[i];
            let next = turns.entry((m.src, m.dst)).or_default();
            turn[i] = *next;
            *next += 1;
        }
    }
    let channel: Vec<usize> = flow
        .moves
        .iter()
        .enumerate()
        .map(|(i, m)| match spread.split {
            Split::Chunk => m.chunk % spread.channels,
            Split::Turn => turn[i] % spread.channels,
            Split::Peer => (m.dst + ranks - m.src) % ranks % spread.channels,
        })
        .collect();
    let conn = |i: usize| -> Conn { (flow.moves[i].src, flow.moves[i].dst, channel[i]) };
    let live = |i: &usize| !flow.moves[*i].dropped;
    let mut sends: Vec<BTreeSet<Conn>> = vec![BTreeSet::new(); ranks];
    let mut recvs: Vec<BTreeSet<Conn>> = vec![BTreeSet::new(); ranks];
    for i in (0..flow.moves.len()).filter(live) {
        let c = conn(i);
        sends[c.0].insert(c);
        recvs[c.1].insert(c);
    }
    // How many chunks could pass straight through each (receive, send) pair.
    let mut through: Vec<BTreeMap<(Conn, Conn), usize>> = vec![BTreeMap::new(); ranks];
    for (a, d) in flow.straight_through.iter().enumerate() {
        if let Some(d) = *d {
            if channel[a] == channel[d] {
                *through[flow.moves[a].dst]
                    .entry((conn(a), conn(d)))
                    .or_default() += 1;
            }
        }
    }
    let mut tbs = Vec::new();
    let mut tb_of_send = HashMap::new();
    let mut tb_of_recv = HashMap::new();
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
                tb_of_recv.insert(r, id);
            }
            if let Some(s) = send {
                tb_of_send.insert(s, id);
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
    let mut tb_of_send_move = HashMap::new();
    let mut tb_of_recv_move = HashMap::new();
    for i in (0..flow.moves.len()).filter(live) {
        tb_of_send_move.insert(i, tb_of_send[&conn(i)]);
        tb_of_recv_move.insert(i, tb_of_recv[&conn(i)]);
    }
    let (fused, fused_send) = choose_fusions(flow, &tb_of_send_move, &tb_of_recv_move);
    let mut e = Emitter {
        flow,
        layout,
        tb_of_send: tb_of_send_move,
        tb_of_recv: tb_of_recv_move,
        fused,
        fused_send,
        local_tb,
        ops: Vec::new(),
        loc: vec![None; flow.versions.len()],
        made_by: vec![None; flow.versions.len()],
        slots: HashMap::new(),
        scratch: vec![0; ranks],
        scratch_of: HashMap::new(),
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
    recvs: &BTreeSet<Conn>,
    sends: &BTreeSet<Conn>,
    through: &BTreeMap<(Conn, Conn), usize>,
) -> Vec<(Option<Conn>, Option<Conn>)> {
    let mut free_r: BTreeSet<Conn> = recvs.clone();
    let mut free_s: BTreeSet<Conn> = sends.clone();
    let mut pairs = Vec::new();
    let mut ranked: Vec<(&(Conn, Conn), &usize)> = through.iter().collect();
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
    tb_of_send: &HashMap<usize, usize>,
    tb_of_recv: &HashMap<usize, usize>,
) -> (Vec<Option<usize>>, Vec<bool>) {
    let mut candidates: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (a, d) in flow.straight_through.iter().enumerate() {
        let Some(d) = *d else { continue };
        let (Some(&ta), Some(&td)) = (tb_of_recv.get(&a), tb_of_send.get(&d)) else {
            continue;
        };
        if ta == td {
            candidates.entry(ta).or_default().push((a, d));
        }
    }
    let mut fused = vec![None; flow.moves.len()];
    let mut fused_send = vec![false; flow.moves.len()];
    for list in candidates.values_mut() {
        list.sort_by_key(|&(a, _)| flow.moves[a].arrive_seq);
        let mut last = None;
        for &(a, d) in list.iter() {
            let seq = flow.moves[d].depart_seq;
            if last.map_or(true, |l| seq > l) {
                fused[a] = Some(d);
                fused_send[d] = true;
                last = Some(seq);
            }
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
        let next = &mut self.scratch[rank];
        let index = *self.scratch_of.entry((rank, chunk)).or_insert_with(|| {
            *next += 1;
            *next - 1
        });
        Slot::new(Buf::Scratch, index)
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
        self.slots.entry((rank, slot)).or_default().readers.push(op);
        Some(slot)
    }

    /// Records that `op` overwrites `slot`: it waits for every reader of the old value,
    /// or for its writer when nobody read it.
    fn write(&mut self, op: usize, rank: usize, slot: Slot) {
        let used = self.slots.entry((rank, slot)).or_default();
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
            tb: self.tb_of_send[&i],
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
            tb: self.tb_of_recv[&a],
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
