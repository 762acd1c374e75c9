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

use super::lanes::{Lane, Lanes};
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
        let (reads, writes) = accesses(&kind);
        let at = OpRef {
            tb,
            op: self.blocks[tb].ops.len(),
        };
        let mut after = Vec::new();
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

/// The replay of `schedule` (transfers in ranks: `moves[i]` is transfer i's source and
/// destination rank) over `lanes`, in `events` order.
pub(super) fn replay(
    schedule: &Schedule,
    ranks_of: &[(usize, usize)],
    layout: &Layout,
    lanes: &Lanes,
    events: &[(usize, bool)],
) -> Result<Vec<RankOps>> {
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
                r.push(tb, Kind::Wait { arrives: None });
            }
        }
    }
    let writable = |slot: Slot| layout.in_place() || slot.0 != BufferType::Input;
    // Where each transfer's put lands, from its departure to its arrival.
    let mut landing: Vec<Option<(Slot, bool)>> = vec![None; schedule.transfers.len()];
    for &(t, departs) in events {
        let tr = &schedule.transfers[t];
        let (src, dst) = ranks_of[t];
        let lane = lanes.of_transfer[t];
        let c = tr.chunk();
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
    Ok(ranks
        .into_iter()
        .map(|r| RankOps {
            blocks: r.blocks,
            scratch_chunks: r.scratch,
        })
        .collect())
}
