//! The race finder: accesses to one slot, at least one a write, that no ordering of the
//! program (threadblock order, dependencies, messages) puts one before the other. Apart
//! from the replay because it judges every order the executor may take, by vector clocks,
//! where the replay follows one.

use super::accesses::Accesses;
use super::{ProblemKind, Problems};
use crate::msccl::exec::{self, Trace};
use crate::msccl::layout::{Layout, Slot};
use crate::msccl::{step_name, Buf, Program};

/// Epoch of an access: (threadblock on its GPU, step).
type Epoch = (u32, u32);

#[derive(Clone, Default)]
struct SlotHistory {
    last_write: Option<Epoch>,
    /// Reads since the last write, the latest per threadblock.
    reads: Vec<Epoch>,
}

/// An unordered pair: the slot, the earlier access and what each did.
type Race = (Slot, Epoch, &'static str, &'static str);

/// The accesses so far to one GPU's slots, indexed flat: input, output, then scratch.
struct Histories {
    input_len: usize,
    output_len: usize,
    slots: Vec<SlotHistory>,
}

impl Histories {
    /// Forgets everything and sizes the table for a GPU with `scratch` scratch chunks.
    fn reset(&mut self, scratch: usize) {
        let len = self.input_len + self.output_len + scratch;
        for h in &mut self.slots {
            h.last_write = None;
            h.reads.clear();
        }
        self.slots.resize_with(len, SlotHistory::default);
    }

    fn at(&mut self, slot: Slot) -> &mut SlotHistory {
        let i = match slot.buf {
            Buf::Input => slot.index,
            Buf::Output => self.input_len + slot.index,
            Buf::Scratch => self.input_len + self.output_len + slot.index,
        };
        &mut self.slots[i]
    }

    /// Records the accesses of the step at `me`, which is ordered after the accesses
    /// `before` accepts, and hands `race` every conflicting access it is not ordered after.
    fn record(
        &mut self,
        reads: &[Slot],
        writes: &[Slot],
        me: Epoch,
        before: impl Fn(&Epoch) -> bool,
        mut race: impl FnMut(Race),
    ) {
        for &slot in reads {
            let hist = self.at(slot);
            if let Some(w) = hist.last_write.filter(|w| !before(w)) {
                race((slot, w, "written", "read"));
            }
            hist.reads.retain(|r| r.0 != me.0);
            hist.reads.push(me);
        }
        for &slot in writes {
            let hist = self.at(slot);
            if let Some(w) = hist.last_write.filter(|w| !before(w) && w.0 != me.0) {
                race((slot, w, "written", "written"));
            }
            if let Some(&r) = hist.reads.iter().find(|r| r.0 != me.0 && !before(r)) {
                race((slot, r, "read", "written"));
            }
            hist.last_write = Some(me);
            hist.reads.clear();
        }
    }
}

/// Finds unordered conflicting accesses: two accesses to one slot of a GPU, at least one a
/// write, that nothing orders. Vector clocks over one GPU's threadblocks decide what is
/// ordered. Orderings can pass through other GPUs by messages, so the exact search carries
/// the clocks through every step of the run, for every GPU: quadratic in the program's
/// size. The GPU's own orderings (threadblock order and dependencies) are a subset of the
/// exact ones and usually order everything, so a pass over the GPU's own steps with them
/// comes first; only a GPU where it leaves some pair unordered is searched exactly, and
/// only the exact search reports.
pub(super) fn find_races(
    program: &Program,
    layout: &Layout,
    trace: &Trace,
    accesses: &Accesses,
    problems: &mut Problems,
) {
    let mut search = RaceSearch::new(program, layout, trace, accesses);
    for g in 0..program.gpus.len() {
        if !search.index().tb_id[g].is_empty() && !search.locally_ordered(g) {
            search.exact(g, problems);
        }
    }
}

const NO_SOURCE: u32 = u32::MAX;

struct RaceSearch<'a> {
    program: &'a Program,
    trace: &'a Trace,
    accesses: &'a Accesses,
    /// Each GPU's steps in the order they ran: `by_gpu[gpu_at[g]..gpu_at[g + 1]]`.
    by_gpu: Vec<u32>,
    gpu_at: Vec<usize>,
    /// Per global step: its number among the steps that release a dependency, numbered
    /// in global step order (so each GPU's are consecutive), or `NO_SOURCE`.
    source: Vec<u32>,
    /// Per GPU: the number of its first source (the GPU's are consecutive); one more
    /// entry at the end, the count of all.
    source_base: Vec<u32>,
    histories: Histories,
    /// Work space: clocks, and the clocks of sources and messages when they ran.
    clocks: Vec<u32>,
    at_source: Vec<u32>,
    at_message: Vec<u32>,
}

impl<'a> RaceSearch<'a> {
    fn new(
        program: &'a Program,
        layout: &Layout,
        trace: &'a Trace,
        accesses: &'a Accesses,
    ) -> RaceSearch<'a> {
        let index = &trace.index;
        let gpus = program.gpus.len();
        let gpu_of = |gid: usize| index.tbs[index.locate(gid).0].0;
        let mut gpu_at = vec![0; gpus + 1];
        for &gid in &trace.order {
            gpu_at[gpu_of(gid) + 1] += 1;
        }
        for g in 0..gpus {
            gpu_at[g + 1] += gpu_at[g];
        }
        let mut next = gpu_at.clone();
        let mut by_gpu = vec![0; trace.order.len()];
        for &gid in &trace.order {
            let g = gpu_of(gid);
            by_gpu[next[g]] = gid as u32;
            next[g] += 1;
        }
        let mut source = vec![NO_SOURCE; index.steps()];
        for src in trace.released_by.iter().flatten() {
            source[*src] = 0;
        }
        // Global steps are numbered GPU by GPU, so numbering sources in step order
        // keeps each GPU's consecutive.
        let mut source_base = vec![0; gpus + 1];
        let mut sources = 0;
        for (gid, s) in source.iter_mut().enumerate() {
            if *s != NO_SOURCE {
                *s = sources;
                sources += 1;
                source_base[gpu_of(gid) + 1] = sources;
            }
        }
        for g in 0..gpus {
            source_base[g + 1] = source_base[g + 1].max(source_base[g]);
        }
        RaceSearch {
            program,
            trace,
            accesses,
            by_gpu,
            gpu_at,
            source,
            source_base,
            histories: Histories {
                input_len: layout.canonical_len(Buf::Input),
                output_len: layout.canonical_len(Buf::Output),
                slots: Vec::new(),
            },
            clocks: Vec::new(),
            at_source: Vec::new(),
            at_message: Vec::new(),
        }
    }

    fn index(&self) -> &'a exec::Index {
        &self.trace.index
    }

    /// Whether GPU g's own orderings order every conflicting pair of its accesses.
    fn locally_ordered(&mut self, g: usize) -> bool {
        self.pass(g, false, |_, _| false)
    }

    /// Reports GPU g's races, with every ordering of the run.
    fn exact(&mut self, g: usize, problems: &mut Problems) {
        let program = self.program;
        self.pass(g, true, |(slot, first, first_did, second_did), me| {
            report_race(program, g, slot, first, me, first_did, second_did, problems);
            true
        });
    }

    /// Records GPU g's accesses in the order they ran, with vector clocks over its
    /// threadblocks carried along its own steps and dependencies only, or (`exact`) along
    /// every step of the run and its messages too. Hands `race` each conflicting pair the
    /// clocks leave unordered (and the later access); stops when it returns false.
    /// Returns whether the pass went through.
    fn pass(&mut self, g: usize, exact: bool, mut race: impl FnMut(Race, Epoch) -> bool) -> bool {
        let index = self.index();
        let width = index.tb_id[g].len();
        // Clock rows: one per threadblock of the run, or of the GPU; likewise for sources.
        let (rows, first_row) = if exact {
            (index.tbs.len(), 0)
        } else {
            (width, index.tb_id[g][0])
        };
        let (first_source, sources) = if exact {
            (0, self.source_base[self.program.gpus.len()])
        } else {
            (self.source_base[g], self.source_base[g + 1])
        };
        self.clocks.clear();
        self.clocks.resize(rows * width, 0);
        self.at_source.clear();
        self.at_source
            .resize((sources - first_source) as usize * width, 0);
        self.at_message.clear();
        if exact {
            self.at_message.resize(self.trace.messages.len() * width, 0);
        }
        self.histories.reset(self.program.gpus[g].scratch_chunks);
        let trace = self.trace;
        let steps: Box<dyn Iterator<Item = usize>> = if exact {
            Box::new(trace.order.iter().copied())
        } else {
            let own = &self.by_gpu[self.gpu_at[g]..self.gpu_at[g + 1]];
            Box::new(own.iter().map(|&gid| gid as usize))
        };
        for gid in steps {
            let (t, s) = index.locate(gid);
            let (h, tb) = index.tbs[t];
            let clock = (t - first_row) * width..(t - first_row + 1) * width;
            if let Some(src) = self.trace.released_by[gid] {
                let at = (self.source[src] - first_source) as usize * width;
                join(
                    &mut self.clocks[clock.clone()],
                    &self.at_source[at..at + width],
                );
            }
            if let Some(m) = self.trace.received[gid].filter(|_| exact) {
                let at = m * width;
                join(
                    &mut self.clocks[clock.clone()],
                    &self.at_message[at..at + width],
                );
            }
            if h == g {
                let me: Epoch = (tb as u32, s as u32);
                let now = &self.clocks[clock.clone()];
                let mut going = true;
                self.histories.record(
                    self.accesses.reads(gid),
                    self.accesses.writes(gid),
                    me,
                    |e| now[e.0 as usize] > e.1,
                    |pair| going &= race(pair, me),
                );
                if !going {
                    return false;
                }
                self.clocks[clock.start + tb] = s as u32 + 1;
            }
            if let Some(m) = self.trace.sent[gid].filter(|_| exact) {
                let at = m * width;
                self.at_message[at..at + width].copy_from_slice(&self.clocks[clock.clone()]);
            }
            let source = self.source[gid];
            if source != NO_SOURCE {
                let at = (source - first_source) as usize * width;
                self.at_source[at..at + width].copy_from_slice(&self.clocks[clock]);
            }
        }
        true
    }
}

fn join(clock: &mut [u32], other: &[u32]) {
    for (a, b) in clock.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

#[allow(clippy::too_many_arguments)]
fn report_race(
    program: &Program,
    g: usize,
    slot: Slot,
    first: Epoch,
    second: Epoch,
    first_did: &str,
    second_did: &str,
    problems: &mut Problems,
) {
    problems.add(
        ProblemKind::Race,
        format!(
            "GPU {g} {}[{}] is {first_did} by {} and {second_did} by {} with nothing ordering them",
            slot.buf.code(),
            slot.index,
            step_name(program, g, first.0 as usize, first.1 as usize),
            step_name(program, g, second.0 as usize, second.1 as usize)
        ),
    );
}
