//! The data replay: every slot holds a chunk id and, for combining collectives, the set of
//! ranks whose contributions it sums, carried along the run step by step; reading an empty
//! slot, adding different chunks or counting a contribution twice is reported where it
//! happens, and the final buffers are checked against the collective's result. Apart from
//! the race finder: it follows the one order the run took, not every order allowed.

use super::accesses::Accesses;
use super::{ProblemKind, Problems};
use crate::msccl::exec::Trace;
use crate::msccl::layout::{Layout, Slot};
use crate::msccl::{step_name, Buf, Instr, Program};

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Empty,
    /// Data already reported as wrong; not reported again.
    Poison,
    /// A chunk and, for combining collectives, the id of its contributor set.
    Data {
        chunk: u32,
        set: u32,
    },
}

/// Contributor sets of combining collectives, one bit per rank, stored flat.
struct Sets {
    words: usize,
    bits: Vec<u64>,
    singletons: Vec<Option<u32>>,
}

impl Sets {
    fn new(ranks: usize) -> Sets {
        Sets {
            words: ranks.div_ceil(64),
            bits: Vec::new(),
            singletons: vec![None; ranks],
        }
    }

    fn get(&self, id: u32) -> &[u64] {
        let i = id as usize * self.words;
        &self.bits[i..i + self.words]
    }

    fn push(&mut self, words: Vec<u64>) -> u32 {
        let id = (self.bits.len() / self.words.max(1)) as u32;
        self.bits.extend(words);
        id
    }

    fn singleton(&mut self, rank: usize) -> u32 {
        if let Some(id) = self.singletons[rank] {
            return id;
        }
        let mut w = vec![0; self.words];
        w[rank / 64] |= 1 << (rank % 64);
        let id = self.push(w);
        self.singletons[rank] = Some(id);
        id
    }

    /// The union of two sets, or the first rank in both.
    fn union(&mut self, a: u32, b: u32) -> Result<u32, usize> {
        let (x, y) = (self.get(a), self.get(b));
        if let Some(i) = (0..self.words).find(|&i| x[i] & y[i] != 0) {
            return Err(i * 64 + (x[i] & y[i]).trailing_zeros() as usize);
        }
        let w: Vec<u64> = x.iter().zip(y).map(|(p, q)| p | q).collect();
        Ok(self.push(w))
    }

    fn count(&self, id: u32) -> usize {
        self.get(id).iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Replays data along the trace.
pub(super) struct Replay<'a> {
    program: &'a Program,
    layout: &'a Layout,
    trace: &'a Trace,
    accesses: &'a Accesses,
    problems: &'a mut Problems,
    /// Per rank, per buffer (input, output, scratch): slot contents.
    mem: Vec<[Vec<Val>; 3]>,
    sets: Sets,
    /// What the messages carry, flat: message m's values start at `carried_at[m]`.
    carried: Vec<Val>,
    carried_at: Vec<usize>,
    /// Per-step work space, kept to spare allocations.
    src: Vec<Val>,
    old_dst: Vec<Val>,
    result: Vec<Val>,
}

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::Input => 0,
        Buf::Output => 1,
        Buf::Scratch => 2,
    }
}

impl<'a> Replay<'a> {
    pub(super) fn new(
        program: &'a Program,
        layout: &'a Layout,
        trace: &'a Trace,
        accesses: &'a Accesses,
        problems: &'a mut Problems,
    ) -> Replay<'a> {
        let ranks = program.gpus.len();
        let mut sets = Sets::new(ranks);
        let mut mem: Vec<[Vec<Val>; 3]> = program
            .gpus
            .iter()
            .map(|g| {
                [
                    vec![Val::Empty; layout.canonical_len(Buf::Input)],
                    vec![Val::Empty; layout.canonical_len(Buf::Output)],
                    vec![Val::Empty; g.scratch_chunks],
                ]
            })
            .collect();
        for (rank, m) in mem.iter_mut().enumerate() {
            for chunk in 0..layout.chunks() {
                if let Some(slot) = layout.input_slot(rank, chunk) {
                    let set = if layout.combining() {
                        sets.singleton(rank)
                    } else {
                        0
                    };
                    m[buf_index(slot.buf)][slot.index] = Val::Data {
                        chunk: chunk as u32,
                        set,
                    };
                }
            }
        }
        let mut carried_at = Vec::with_capacity(trace.messages.len() + 1);
        carried_at.push(0);
        for m in &trace.messages {
            carried_at.push(carried_at[carried_at.len() - 1] + m.count as usize);
        }
        Replay {
            program,
            layout,
            trace,
            accesses,
            problems,
            mem,
            sets,
            carried: vec![Val::Poison; carried_at.last().copied().unwrap_or(0)],
            carried_at,
            src: Vec::new(),
            old_dst: Vec::new(),
            result: Vec::new(),
        }
    }

    fn name(&self, gid: usize) -> String {
        let (t, s) = self.trace.index.locate(gid);
        let (g, tb) = self.trace.index.tbs[t];
        step_name(self.program, g, tb, s)
    }

    pub(super) fn run(mut self) {
        for &gid in &self.trace.order {
            self.step(gid);
        }
        if self.trace.completed() {
            self.check_result();
        }
    }

    fn read(&mut self, gid: usize, rank: usize, slot: Slot) -> Val {
        let v = self.mem[rank][buf_index(slot.buf)][slot.index];
        if v == Val::Empty {
            let who = self.name(gid);
            self.problems.add(
                ProblemKind::Data,
                format!(
                    "{who} reads {}[{}], which holds no data yet",
                    slot.buf.code(),
                    slot.index
                ),
            );
            return Val::Poison;
        }
        v
    }

    fn add(&mut self, gid: usize, a: Val, b: Val) -> Val {
        let (Val::Data { chunk: ca, set: sa }, Val::Data { chunk: cb, set: sb }) = (a, b) else {
            return Val::Poison;
        };
        if !self.layout.combining() {
            return Val::Poison;
        }
        if ca != cb {
            let who = self.name(gid);
            self.problems.add(
                ProblemKind::Data,
                format!("{who} adds chunk {ca} to chunk {cb}"),
            );
            return Val::Poison;
        }
        match self.sets.union(sa, sb) {
            Ok(set) => Val::Data { chunk: ca, set },
            Err(rank) => {
                let who = self.name(gid);
                self.problems.add(
                    ProblemKind::Data,
                    format!("{who} counts GPU {rank}'s contribution to chunk {ca} twice"),
                );
                Val::Poison
            }
        }
    }

    fn step(&mut self, gid: usize) {
        let (t, s) = self.trace.index.locate(gid);
        let (g, tb) = self.trace.index.tbs[t];
        let step = &self.program.gpus[g].threadblocks[tb].steps[s];
        let n = step.count as usize;
        let accesses = self.accesses;
        let (reads, writes) = (accesses.reads(gid), accesses.writes(gid));
        let mut src = std::mem::take(&mut self.src);
        src.clear();
        for i in 0..n {
            src.push(match reads.get(i) {
                Some(&slot) => self.read(gid, g, slot),
                None => Val::Poison,
            });
        }
        // What the received message carries, padded with poison if it is short.
        let incoming = match self.trace.received[gid] {
            Some(m) => self.carried_at[m]..self.carried_at[m + 1],
            None => 0..0,
        };
        let mut old_dst = std::mem::take(&mut self.old_dst);
        old_dst.clear();
        if step.instr == Instr::Reduce {
            for i in 0..n {
                old_dst.push(match writes.get(i) {
                    Some(&slot) => self.read(gid, g, slot),
                    None => Val::Poison,
                });
            }
        }
        let mut result = std::mem::take(&mut self.result);
        result.clear();
        for i in 0..n {
            let incoming_i = match incoming.start + i {
                at if at < incoming.end => self.carried[at],
                _ => Val::Poison,
            };
            result.push(match step.instr {
                Instr::Send | Instr::Copy => src[i],
                Instr::Recv | Instr::RecvCopySend => incoming_i,
                Instr::RecvReduceSend | Instr::RecvReduceCopy | Instr::RecvReduceCopySend => {
                    self.add(gid, incoming_i, src[i])
                }
                Instr::Reduce => self.add(gid, old_dst[i], src[i]),
                Instr::Nop => Val::Poison,
            });
        }
        for (i, &slot) in writes.iter().enumerate() {
            self.mem[g][buf_index(slot.buf)][slot.index] = result[i];
        }
        if let Some(m) = self.trace.sent[gid] {
            let at = self.carried_at[m];
            let len = self.carried_at[m + 1] - at;
            self.carried[at..at + len].copy_from_slice(&result[..len]);
        }
        self.src = src;
        self.old_dst = old_dst;
        self.result = result;
    }

    fn check_result(&mut self) {
        let full = self.program.gpus.len();
        for rank in 0..self.program.gpus.len() {
            for chunk in 0..self.layout.chunks() {
                let Some(slot) = self.layout.output_slot(rank, chunk) else {
                    continue;
                };
                let got = self.mem[rank][buf_index(slot.buf)][slot.index];
                let combining = self.layout.combining();
                let ok = matches!(got, Val::Data { chunk: c, set }
                    if c as usize == chunk && (!combining || self.sets.count(set) == full));
                if ok {
                    continue;
                }
                let want = if combining {
                    format!("chunk {chunk} summed over all {full} GPUs")
                } else {
                    format!("chunk {chunk}")
                };
                let held = match got {
                    Val::Empty => "nothing".to_string(),
                    Val::Poison => "data already reported wrong".to_string(),
                    Val::Data { chunk: c, set } if combining => {
                        let ranks: Vec<String> = (0..full)
                            .filter(|&r| self.sets.get(set)[r / 64] & (1 << (r % 64)) != 0)
                            .map(|r| r.to_string())
                            .collect();
                        format!("chunk {c} summed over GPUs {}", ranks.join(","))
                    }
                    Val::Data { chunk: c, .. } => format!("chunk {c}"),
                };
                self.problems.add(
                    ProblemKind::Result,
                    format!(
                        "at the end GPU {rank} {}[{}] should hold {want} but holds {held}",
                        slot.buf.code(),
                        slot.index
                    ),
                );
            }
        }
    }
}
