//! The replay: a schedule's transfers, in time order, become each rank's threadblocks of
//! abstract operations, with the slot every operation reads and writes and the operations
//! of other threadblocks it must follow.
//!
//! Transfers are pushed. At a departure the sender puts the chunk's current value into the
//! receiver (its final slot, where the chunk ends there and that slot was never written,
//! else a fresh scratch slot) and signals; at the arrival the receiver waits, then copies the
//! chunk to its final slot or sums it into its partial sum. No put lands where anything was
//! or will be read in the launch before the receiver's wait, so puts need no handshake
//! beyond the lane's one at the start of a launch (the receiver has finished the last one).
//! A partial sum never overwrites a const input: out of place, the first sum goes to the
//! output slot (or scratch), reading the input.
//!
//! In-switch operations ([`super::switch`]) run at their root on a switch channel over
//! their members, each member's part on its lane with the root: a sum's source lends its
//! chunk (a signal once the chunk is final and nothing of its own still reads or writes
//! where the switch will store), the root waits for every source, runs the `glres`, and
//! signals each member, who waits before it reads the result (partial sums lying in
//! different places on the members are first copied to one). A multicast (`gstore`)
//! stores where nothing was claimed, so, as a put, it needs only each member's
//! start-of-launch handshake before it and a signal to each member after it.

use super::lanes::{Lane, Lanes};
use super::switch::{Action, Role, SwitchOps};
use crate::collective::CollectiveSpec;
use crate::error::{Error, Result};
use crate::msccl::{layout::Slot as LayoutSlot, Buf, Layout};
use crate::mscclpp::plan::BufferType;
use crate::schedule::{Op, Schedule};
use std::collections::HashMap;

/// A chunk-sized place in one rank's memory, in the layout's canonical buffers.
pub(super) type Slot = (BufferType, usize);

/// An operation of a threadblock (0-based index in its rank's list) by its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct OpRef {
    pub tb: usize,
    pub op: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Kind {
    /// Signal the lane's peer (the start-of-launch handshake, or after a put).
    Signal,
    /// Wait for the lane's peer's signal; `arrives` is where its data landed, if any.
    Wait { arrives: Option<Slot> },
    /// Put `src` into the lane peer's `dst`.
    Put { src: Slot, dst: (usize, Slot) },
    /// Local copy.
    Copy { src: Slot, dst: Slot },
    /// `dst = a + b`, all local.
    Sum { dst: Slot, a: Slot, b: Slot },
    /// Signal the lane's peer that `slots` are ready for its switch operation, which reads
    /// and writes them here.
    Lend { slots: Vec<Slot> },
    /// `glres`: the switch sums `src` over the members of switch channel `from` and stores
    /// the sum into `dst` of every member of switch channel `to`.
    SwitchReduce {
        from: usize,
        src: Slot,
        to: usize,
        dst: Slot,
    },
    /// `gstore`: local `src` stored into `dst` of every member of switch channel `to`.
    SwitchStore { src: Slot, to: usize, dst: Slot },
}

/// A switch channel of the plan: its ranks (sorted) and the buffer it binds on each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SwitchChannel {
    pub ranks: Vec<usize>,
    pub buffer: BufferType,
}

#[derive(Clone, Debug)]
pub(super) struct AbstractOp {
    pub kind: Kind,
    /// Operations of other threadblocks of the rank that must finish first.
    pub after: Vec<OpRef>,
    /// A put whose source is written again later: over a port channel it must be flushed.
    pub source_reused: bool,
}

/// One threadblock: the lane it serves (None: the rank's local copies).
pub(super) struct Block {
    pub lane: Option<usize>,
    pub ops: Vec<AbstractOp>,
}

/// One rank's threadblocks.
pub(super) struct RankOps {
    pub blocks: Vec<Block>,
    pub scratch_chunks: usize,
}

#[derive(Default)]
struct SlotState {
    writer: Option<OpRef>,
    readers: Vec<OpRef>,
    /// A put already aims at it (or it was written): no second put may.
    claimed: bool,
}

struct Rank {
    blocks: Vec<Block>,
    lane_block: HashMap<usize, usize>,
    local_block: Option<usize>,
    slots: HashMap<Slot, SlotState>,
    /// Where the rank holds each chunk's latest value.
    holds: HashMap<usize, Slot>,
    scratch: usize,
    /// The sending end's start-of-launch wait of each lane (by lane).
    lane_ready: HashMap<usize, OpRef>,
}

impl Rank {
    fn fresh_scratch(&mut self) -> Slot {
        self.scratch += 1;
        let slot = (BufferType::Scratch, self.scratch - 1);
        self.slots.entry(slot).or_default().claimed = true;
        slot
    }

    /// Appends `kind` to block `tb`, ordered after the last writer of what it reads and
    /// after every reader and writer of what it writes, and records its accesses.
    fn push(&mut self, tb: usize, kind: Kind) -> OpRef {
        self.push_after(tb, kind, &[])
    }

    /// [`Rank::push`], ordered after `also` as well.
    fn push_after(&mut self, tb: usize, kind: Kind, also: &[OpRef]) -> OpRef {
        let (reads, writes) = accesses(&kind);
        let at = OpRef {
            tb,
            op: self.blocks[tb].ops.len(),
        };
        let mut after = also.to_vec();
        for s in &reads {
            if let Some(w) = self.slots.get(s).and_then(|st| st.writer) {
                after.push(w);
            }
        }
        for s in &writes {
            let st = self.slots.entry(*s).or_default();
            after.extend(st.writer);
            for &r in &st.readers {
                after.push(r);
            }
            // Puts that read this slot before it is overwritten must have finished.
            let readers = std::mem::take(&mut st.readers);
            st.writer = Some(at);
            st.claimed = true;
            for r in readers {
                if let Kind::Put { .. } = self.blocks[r.tb].ops[r.op].kind {
                    self.blocks[r.tb].ops[r.op].source_reused = true;
                }
            }
        }
        for s in &reads {
            self.slots.entry(*s).or_default().readers.push(at);
        }
        after.retain(|d| d.tb != tb && *d != at);
        after.sort();
        after.dedup();
        self.blocks[tb].ops.push(AbstractOp {
            kind,
            after,
            source_reused: false,
        });
        at
    }

    fn local_block(&mut self) -> usize {
        *self.local_block.get_or_insert_with(|| {
            self.blocks.push(Block {
                lane: None,
                ops: Vec::new(),
            });
            self.blocks.len() - 1
        })
    }
}

/// What an operation reads and writes on its own rank (a wait writes where data landed).
fn accesses(kind: &Kind) -> (Vec<Slot>, Vec<Slot>) {
    match kind {
        Kind::Signal | Kind::Wait { arrives: None } => (vec![], vec![]),
        Kind::Wait { arrives: Some(s) } => (vec![], vec![*s]),
        Kind::Put { src, .. } => (vec![*src], vec![]),
        Kind::Copy { src, dst } => (vec![*src], vec![*dst]),
        Kind::Sum { dst, a, b } => (vec![*a, *b], vec![*dst]),
        Kind::Lend { slots } => (slots.clone(), slots.clone()),
        Kind::SwitchReduce { src, dst, .. } | Kind::SwitchStore { src, dst, .. } => {
            (vec![*src], vec![*dst])
        }
    }
}

fn slot_of(s: LayoutSlot) -> Slot {
    let b = match s.buf {
        Buf::Input => BufferType::Input,
        Buf::Output => BufferType::Output,
        Buf::Scratch => BufferType::Scratch,
    };
    (b, s.index)
}

/// The replay of `schedule` (transfers in ranks: `ranks_of[i]` is transfer i's source and
/// destination rank) over `lanes`, in `events` order, with its in-switch operations
/// `switch`; with the switch channels the ranks' operations name.
pub(super) fn replay(
    schedule: &Schedule,
    ranks_of: &[(usize, usize)],
    layout: &Layout,
    lanes: &Lanes,
    events: &[(usize, bool)],
    switch: &SwitchOps,
) -> Result<(Vec<RankOps>, Vec<SwitchChannel>)> {
    let spec: &CollectiveSpec = &schedule.collective;
    let p = spec.npus.len();
    let chunks = layout.chunks();
    let mut ranks: Vec<Rank> = (0..p)
        .map(|r| {
            let mut holds = HashMap::new();
            for c in 0..chunks {
                if let Some(s) = layout.input_slot(r, c) {
                    holds.insert(c, slot_of(s));
                }
            }
            let mut slots: HashMap<Slot, SlotState> = HashMap::new();
            for s in holds.values() {
                slots.entry(*s).or_default().claimed = true;
            }
            Rank {
                blocks: Vec::new(),
                lane_block: HashMap::new(),
                local_block: None,
                slots,
                holds,
                scratch: 0,
                lane_ready: HashMap::new(),
            }
        })
        .collect();
    // Every lane's block at both ends, with the start-of-launch handshake: the receiving
    // end says it is ready (its last launch is over), the sending end waits for that.
    for (l, lane) in lanes.lanes.iter().enumerate() {
        let Lane {
            low,
            high,
            up,
            down,
        } = *lane;
        for (rank, sends, receives) in [(low, up, down), (high, down, up)] {
            let r = &mut ranks[rank];
            r.blocks.push(Block {
                lane: Some(l),
                ops: Vec::new(),
            });
            let tb = r.blocks.len() - 1;
            r.lane_block.insert(l, tb);
            if receives {
                r.push(tb, Kind::Signal);
            }
            if sends {
                let ready = r.push(tb, Kind::Wait { arrives: None });
                r.lane_ready.insert(l, ready);
            }
        }
    }
    let writable = |slot: Slot| layout.in_place() || slot.0 != BufferType::Input;
    // Where each transfer's put lands, from its departure to its arrival.
    let mut landing: Vec<Option<(Slot, bool)>> = vec![None; schedule.transfers.len()];
    let mut in_switch = InSwitch {
        ops: switch,
        pending: vec![None; switch.ops.len()],
        channels: Vec::new(),
    };
    for &(t, departs) in events {
        let tr = &schedule.transfers[t];
        let (src, dst) = ranks_of[t];
        let lane = lanes.of_transfer[t];
        let c = tr.chunk();
        let step = Step {
            transfer: t,
            lane,
            src,
            dst,
        };
        match switch.roles[t] {
            Role::Sum(op) => {
                in_switch.sum(&mut ranks, layout, op, step, departs)?;
                continue;
            }
            Role::Store(op) if departs => {
                landing[t] = Some(in_switch.store(&mut ranks, layout, lanes, op, step)?);
                continue;
            }
            _ => {}
        }
        if departs {
            let from = *ranks[src].holds.get(&c).ok_or_else(|| {
                Error::plan(format!(
                    "transfer {t} sends chunk {c} from rank {src} before the rank holds it; the schedule is not one the checker passes"
                ))
            })?;
            // A copy lands straight in its final slot where nothing has claimed that yet.
            let unclaimed_final = layout.output_slot(dst, c).map(slot_of).filter(|f| {
                tr.op == Op::Copy && !ranks[dst].slots.get(f).is_some_and(|s| s.claimed)
            });
            let direct = unclaimed_final.is_some();
            let to = match unclaimed_final {
                Some(f) => {
                    ranks[dst].slots.entry(f).or_default().claimed = true;
                    f
                }
                None => ranks[dst].fresh_scratch(),
            };
            landing[t] = Some((to, direct));
            let tb = ranks[src].lane_block[&lane];
            ranks[src].push(
                tb,
                Kind::Put {
                    src: from,
                    dst: (dst, to),
                },
            );
            ranks[src].push(tb, Kind::Signal);
        } else {
            let (at, direct) = landing[t]
                .ok_or_else(|| Error::plan(format!("transfer {t} arrives before it departs")))?;
            let r = &mut ranks[dst];
            let tb = r.lane_block[&lane];
            r.push(tb, Kind::Wait { arrives: Some(at) });
            match tr.op {
                Op::Copy if direct => {
                    r.holds.insert(c, at);
                }
                Op::Copy => {
                    // A copy replaces a partial sum; a chunk copied where it already is
                    // carries nothing new.
                    if !layout.combining() && r.holds.contains_key(&c) {
                        continue;
                    }
                    r.holds.insert(c, at);
                    if let Some(f) = layout.output_slot(dst, c).map(slot_of) {
                        if !r.slots.get(&f).is_some_and(|s| s.claimed) {
                            r.push(tb, Kind::Copy { src: at, dst: f });
                            r.holds.insert(c, f);
                        }
                    }
                }
                Op::Reduce => {
                    let cur = *r.holds.get(&c).ok_or_else(|| {
                        Error::plan(format!(
                            "transfer {t} adds chunk {c} into rank {dst}, which holds no partial sum of it"
                        ))
                    })?;
                    let acc = if writable(cur) {
                        cur
                    } else {
                        match layout.output_slot(dst, c).map(slot_of) {
                            Some(f)
                                if writable(f) && !r.slots.get(&f).is_some_and(|s| s.claimed) =>
                            {
                                f
                            }
                            _ => r.fresh_scratch(),
                        }
                    };
                    r.push(
                        tb,
                        Kind::Sum {
                            dst: acc,
                            a: cur,
                            b: at,
                        },
                    );
                    r.holds.insert(c, acc);
                }
            }
        }
    }
    // Results still elsewhere than their final slot are copied there, by the block that
    // wrote them (or the rank's local block for a value it started with).
    for (rank, r) in ranks.iter_mut().enumerate() {
        for c in 0..chunks {
            let Some(f) = layout.output_slot(rank, c).map(slot_of) else {
                continue;
            };
            let held = *r.holds.get(&c).ok_or_else(|| {
                Error::plan(format!(
                    "rank {rank} never receives chunk {c}, which it must hold at the end; the schedule is not one the checker passes"
                ))
            })?;
            if held == f {
                continue;
            }
            let tb = match r.slots.get(&held).and_then(|s| s.writer) {
                Some(w) => w.tb,
                None => r.local_block(),
            };
            r.push(tb, Kind::Copy { src: held, dst: f });
            r.holds.insert(c, f);
        }
    }
    let ranks = ranks
        .into_iter()
        .map(|r| RankOps {
            blocks: r.blocks,
            scratch_chunks: r.scratch,
        })
        .collect();
    Ok((ranks, in_switch.channels))
}

/// A transfer at one of its events: its index, lane and ranks.
#[derive(Clone, Copy)]
struct Step {
    transfer: usize,
    lane: usize,
    src: usize,
    dst: usize,
}

/// Where an in-switch operation reads and writes, once its first transfer departs, and
/// how far it has got.
#[derive(Clone)]
struct Pending {
    src: Slot,
    dst: Slot,
    /// The root's waits for its sources' lends so far (`glres`).
    waits: Vec<OpRef>,
    /// The switch operation itself, once pushed.
    done: Option<OpRef>,
}

/// The replay's in-switch operations.
struct InSwitch<'a> {
    ops: &'a SwitchOps,
    pending: Vec<Option<Pending>>,
    channels: Vec<SwitchChannel>,
}

impl InSwitch<'_> {
    /// The plan-wide switch channel over `ranks` binding `buffer`.
    fn channel(&mut self, ranks: &[usize], buffer: BufferType) -> usize {
        let wanted = SwitchChannel {
            ranks: ranks.to_vec(),
            buffer,
        };
        match self.channels.iter().position(|c| *c == wanted) {
            Some(i) => i,
            None => {
                self.channels.push(wanted);
                self.channels.len() - 1
            }
        }
    }

    /// A source's share of a sum, at its departure (the source lends its chunk) or its
    /// arrival (the root waits; after the last, it runs the `glres`).
    fn sum(
        &mut self,
        ranks: &mut [Rank],
        layout: &Layout,
        k: usize,
        step: Step,
        departs: bool,
    ) -> Result<()> {
        let ops = self.ops;
        let op = &ops.ops[k];
        let c = op.chunk;
        if self.pending[k].is_none() {
            let members = &op.members;
            let mut held = Vec::with_capacity(members.len());
            for &m in members {
                held.push(*ranks[m].holds.get(&c).ok_or_else(|| {
                    Error::plan(format!(
                        "transfer {} sums chunk {c} inside the switch from rank {m}, which holds no partial sum of it; the schedule is not one the checker passes",
                        step.transfer
                    ))
                })?);
            }
            let writable = |slot: Slot| layout.in_place() || slot.0 != BufferType::Input;
            let src = if held.iter().all(|&h| h == held[0]) {
                held[0]
            } else {
                gather(ranks, layout, members, c, writable)
            };
            let dst = if writable(src) {
                src
            } else {
                common_output(ranks, layout, members, c, writable)
                    .unwrap_or_else(|| common_scratch(ranks, members))
            };
            claim(ranks, members, dst);
            self.pending[k] = Some(Pending {
                src,
                dst,
                waits: Vec::new(),
                done: None,
            });
        }
        let Some(p) = self.pending[k].clone() else {
            return Ok(());
        };
        if departs {
            let r = &mut ranks[step.src];
            let tb = r.lane_block[&step.lane];
            let mut slots = vec![p.src, p.dst];
            slots.dedup();
            r.push(tb, Kind::Lend { slots });
            return Ok(());
        }
        let root = &mut ranks[step.dst];
        let tb = root.lane_block[&step.lane];
        let wait = root.push(tb, Kind::Wait { arrives: None });
        let mut waits = p.waits;
        waits.push(wait);
        if waits.len() == op.sums.len() {
            if root.holds.get(&c) != Some(&p.src) {
                return Err(Error::plan(format!(
                    "transfer {} completes an in-switch sum of chunk {c} into rank {}, whose partial sum moved after the sum began: the switch reads one place on every GPU",
                    step.transfer, op.root
                )));
            }
            let from = self.channel(&op.members, p.src.0);
            let to = self.channel(&op.members, p.dst.0);
            let root = &mut ranks[step.dst];
            let done = root.push_after(
                tb,
                Kind::SwitchReduce {
                    from,
                    src: p.src,
                    to,
                    dst: p.dst,
                },
                &waits,
            );
            root.holds.insert(c, p.dst);
            self.pending[k] = Some(Pending {
                done: Some(done),
                waits,
                ..p
            });
        } else {
            self.pending[k] = Some(Pending { waits, ..p });
        }
        Ok(())
    }

    /// A member's share of a store, at its departure: the root signals the member once the
    /// switch has stored (a `gstore` it runs at the first departure; or the `glres`).
    /// Returns where the chunk lands on the member and whether that is its final slot.
    fn store(
        &mut self,
        ranks: &mut [Rank],
        layout: &Layout,
        lanes: &Lanes,
        k: usize,
        step: Step,
    ) -> Result<(Slot, bool)> {
        let ops = self.ops;
        let op = &ops.ops[k];
        let c = op.chunk;
        if op.action == Action::Store && self.pending[k].is_none() {
            let src = *ranks[op.root].holds.get(&c).ok_or_else(|| {
                Error::plan(format!(
                    "transfer {} multicasts chunk {c} from rank {} before the rank holds it; the schedule is not one the checker passes",
                    step.transfer, op.root
                ))
            })?;
            let writable = |slot: Slot| layout.in_place() || slot.0 != BufferType::Input;
            let peers: Vec<usize> = op
                .members
                .iter()
                .copied()
                .filter(|&m| m != op.root)
                .collect();
            // The root's own copy is stored again: the final slot where it is the peers',
            // else scratch.
            let dst = common_output(ranks, layout, &peers, c, writable)
                .filter(|f| layout.output_slot(op.root, c).map(slot_of) == Some(*f))
                .unwrap_or_else(|| common_scratch(ranks, &op.members));
            claim(ranks, &peers, dst);
            let to = self.channel(&op.members, dst.0);
            let root = &mut ranks[op.root];
            let tb = root.lane_block[&step.lane];
            let ready: Vec<OpRef> = op
                .stores
                .iter()
                .filter_map(|&i| root.lane_ready.get(&lanes.of_transfer[i]).copied())
                .collect();
            let done = root.push_after(tb, Kind::SwitchStore { src, to, dst }, &ready);
            if layout.output_slot(op.root, c).map(slot_of) == Some(dst) {
                root.holds.insert(c, dst);
            }
            self.pending[k] = Some(Pending {
                src,
                dst,
                waits: Vec::new(),
                done: Some(done),
            });
        }
        let (dst, done) = match &self.pending[k] {
            Some(Pending {
                dst,
                done: Some(done),
                ..
            }) => (*dst, *done),
            _ => {
                return Err(Error::plan(format!(
                    "transfer {} multicasts chunk {c} from rank {} before the in-switch sum it follows has arrived",
                    step.transfer, op.root
                )))
            }
        };
        let root = &mut ranks[op.root];
        let tb = root.lane_block[&step.lane];
        root.push_after(tb, Kind::Signal, &[done]);
        let direct = layout.output_slot(step.dst, c).map(slot_of) == Some(dst);
        Ok((dst, direct))
    }
}

/// The slot where every one of `members` must end with chunk `c`, where it is the same
/// on all, writable and not yet claimed on any.
fn common_output(
    ranks: &[Rank],
    layout: &Layout,
    members: &[usize],
    c: usize,
    writable: impl Fn(Slot) -> bool,
) -> Option<Slot> {
    let f = layout.output_slot(*members.first()?, c).map(slot_of)?;
    members
        .iter()
        .all(|&m| {
            layout.output_slot(m, c).map(slot_of) == Some(f)
                && !ranks[m].slots.get(&f).is_some_and(|s| s.claimed)
        })
        .then_some(f)
        .filter(|&f| writable(f))
}

/// Partial sums of chunk `c` that lie in different places on `members` copied to one
/// place, the same on all (a switch channel reads one place on every GPU): the chunk's
/// final slot where it is common and writable, else fresh scratch. Returns that place.
fn gather(
    ranks: &mut [Rank],
    layout: &Layout,
    members: &[usize],
    c: usize,
    writable: impl Fn(Slot) -> bool,
) -> Slot {
    let first = members.first().and_then(|&m| layout.output_slot(m, c));
    let target = first.map(slot_of).filter(|&f| {
        writable(f)
            && members.iter().all(|&m| {
                let r = &ranks[m];
                layout.output_slot(m, c).map(slot_of) == Some(f)
                    && (r.holds.get(&c) == Some(&f) || !r.slots.get(&f).is_some_and(|s| s.claimed))
            })
    });
    let target = target.unwrap_or_else(|| common_scratch(ranks, members));
    for &m in members {
        let r = &mut ranks[m];
        let Some(&held) = r.holds.get(&c) else {
            continue;
        };
        if held != target {
            let tb = r.local_block();
            r.push(
                tb,
                Kind::Copy {
                    src: held,
                    dst: target,
                },
            );
            r.holds.insert(c, target);
        }
    }
    target
}

/// A scratch slot of the same index on every one of `members`, fresh on each.
fn common_scratch(ranks: &mut [Rank], members: &[usize]) -> Slot {
    let index = members.iter().map(|&m| ranks[m].scratch).max().unwrap_or(0);
    for &m in members {
        ranks[m].scratch = index + 1;
    }
    (BufferType::Scratch, index)
}

fn claim(ranks: &mut [Rank], members: &[usize], slot: Slot) {
    for &m in members {
        ranks[m].slots.entry(slot).or_default().claimed = true;
    }
}
