//! The slots each executed step touches: offsets resolved through the layout once, so the
//! data replay and the race finder read the same accesses and a step outside its buffer
//! is reported once.

use super::{ProblemKind, Problems};
use crate::msccl::exec::Trace;
use crate::msccl::layout::{Layout, Slot};
use crate::msccl::{step_name, Buf, Program};

/// The slots each executed step reads and writes, resolved through the layout; steps
/// whose offsets leave their buffers are reported and get no accesses. Stored flat: the
/// accesses of global step `gid` are `slots[start[gid]..start[gid + 1]]`, its reads first.
pub(super) struct Accesses {
    slots: Vec<Slot>,
    /// Per global step: where its reads start; one more entry at the end.
    start: Vec<u32>,
    /// Per global step: how many of its accesses are reads.
    reads: Vec<u32>,
}

impl Accesses {
    pub(super) fn new(
        program: &Program,
        layout: &Layout,
        trace: &Trace,
        problems: &mut Problems,
    ) -> Self {
        let n = trace.index.steps();
        let mut slots = Vec::with_capacity(n * 2);
        let mut start = Vec::with_capacity(n + 1);
        let mut reads = Vec::with_capacity(n);
        for (t, &(g, tb)) in trace.index.tbs.iter().enumerate() {
            let gpu = &program.gpus[g];
            for (s, step) in gpu.threadblocks[tb].steps.iter().enumerate() {
                debug_assert_eq!(trace.index.first_step[t] + s, start.len());
                start.push(slots.len() as u32);
                // Appends the slots of `buf[off..off + count]`, or none if one is outside.
                let mut push = |slots: &mut Vec<Slot>, on: bool, buf: Buf, off: i64, what: &str| {
                    if !on {
                        return;
                    }
                    let declared = match buf {
                        Buf::Input => gpu.input_chunks,
                        Buf::Output => gpu.output_chunks,
                        Buf::Scratch => gpu.scratch_chunks,
                    };
                    let first = slots.len();
                    for i in 0..step.count as i64 {
                        let o = off + i;
                        let slot = layout
                            .resolve(g, buf, o)
                            .filter(|sl| sl.buf != Buf::Scratch || sl.index < declared);
                        match slot {
                            Some(sl) if o < declared as i64 => slots.push(sl),
                            _ => {
                                let real = match buf {
                                    Buf::Scratch => declared,
                                    _ => layout.view_len(buf),
                                };
                                problems.add(
                                    ProblemKind::Bounds,
                                    format!(
                                        "{} {what} {}[{o}], outside the buffer ({} declares {declared} chunks, the {} buffer has {real})",
                                        step_name(program, g, tb, s),
                                        buf.code(),
                                        buf.code(),
                                        layout.kind()
                                    ),
                                );
                                slots.truncate(first);
                                return;
                            }
                        }
                    }
                };
                push(
                    &mut slots,
                    step.instr.reads_src(),
                    step.src_buf,
                    step.src_off,
                    "reads",
                );
                reads.push(slots.len() as u32 - start[start.len() - 1]);
                push(
                    &mut slots,
                    step.instr.writes_dst(),
                    step.dst_buf,
                    step.dst_off,
                    "writes",
                );
            }
        }
        start.push(slots.len() as u32);
        Accesses {
            slots,
            start,
            reads,
        }
    }

    pub(super) fn reads(&self, gid: usize) -> &[Slot] {
        let a = self.start[gid] as usize;
        &self.slots[a..a + self.reads[gid] as usize]
    }

    pub(super) fn writes(&self, gid: usize) -> &[Slot] {
        let a = self.start[gid] as usize + self.reads[gid] as usize;
        &self.slots[a..self.start[gid + 1] as usize]
    }
}
