//! Every rank's buffers as the executor is handed them: input, output and scratch
//! allocations (input and output one allocation in place, as NCCL passes them), each
//! chunk holding a symbolic value and its access history.

use super::clock::History;
use super::value::Value;
use super::Collective;
use crate::mscclpp::plan::{BufferType, Plan};

/// One allocation of one rank.
pub(super) type Alloc = usize;
const INPUT: Alloc = 0;
const OUTPUT: Alloc = 1;
const SCRATCH: Alloc = 2;

/// A chunk of memory: its contents and who accessed it.
#[derive(Clone, Debug)]
pub(super) struct Cell {
    pub value: Value,
    /// While a threadblock group's write is incomplete: the contents its unwritten
    /// slices still hold.
    pub before_group: Option<Value>,
    pub history: History,
}

/// Where a buffer's chunk lies: rank, allocation, chunk within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub rank: usize,
    pub alloc: Alloc,
    pub chunk: usize,
}

pub(super) struct Memory {
    collective: Collective,
    inplace: bool,
    /// Per rank: input, output and scratch chunk counts.
    counts: Vec<[usize; 3]>,
    /// Per rank: the chunks of its input, output and scratch allocations.
    lens: Vec<[usize; 3]>,
    /// Per rank, per allocation: its chunks.
    pub cells: Vec<[Vec<Cell>; 3]>,
}

impl Memory {
    /// The buffers at the start of the launch: inputs hold the ranks' input chunks.
    pub fn new(plan: &Plan, collective: Collective) -> Memory {
        let counts: Vec<[usize; 3]> = plan
            .gpus
            .iter()
            .map(|g| [g.input_chunks, g.output_chunks, g.scratch_chunks])
            .collect();
        let inplace = plan.inplace;
        let lens = counts
            .iter()
            .map(|&[i, o, s]| match (inplace, collective) {
                (false, _) => [i, o, s],
                (true, Collective::ReduceScatter) => [i, 0, s],
                (true, _) => [0, o.max(i), s],
            })
            .collect();
        let mut memory = Memory {
            collective,
            inplace,
            counts,
            lens,
            cells: Vec::with_capacity(plan.gpus.len()),
        };
        let blank = Cell {
            value: Value::Unset,
            before_group: None,
            history: History::default(),
        };
        for rank in 0..plan.gpus.len() {
            let mut allocs = memory.lens[rank].map(|n| vec![blank.clone(); n]);
            for c in 0..memory.counts[rank][0] {
                if let Some(p) = memory.place(rank, rank, BufferType::Input, c) {
                    allocs[p.alloc][p.chunk].value = Value::input(rank, c);
                }
            }
            memory.cells.push(allocs);
        }
        memory
    }

    /// Where chunk `index` of `owner`'s buffer `t` lies when `accessor` addresses it: a
    /// peer's input or output is reached at the accessor's own offset in its allocation
    /// (the executor registers whole allocations), so in an in-place All-Gather a peer's
    /// input is the accessor's slice of the peer's output. `None` outside the allocation.
    pub fn place(
        &self,
        owner: usize,
        accessor: usize,
        t: BufferType,
        index: usize,
    ) -> Option<Place> {
        let [i, o, _] = self.counts[accessor];
        let (alloc, base) = match (t, self.inplace, self.collective) {
            (BufferType::Scratch, _, _) => (SCRATCH, 0),
            (BufferType::Input, false, _) => (INPUT, 0),
            (BufferType::Output, false, _) => (OUTPUT, 0),
            (BufferType::Input, true, Collective::AllGather) => (OUTPUT, accessor * i),
            (BufferType::Output, true, Collective::ReduceScatter) => (INPUT, accessor * o),
            (BufferType::Input, true, Collective::ReduceScatter) => (INPUT, 0),
            (_, true, _) => (OUTPUT, 0),
        };
        let chunk = base + index;
        (chunk < self.lens[owner][alloc]).then_some(Place {
            rank: owner,
            alloc,
            chunk,
        })
    }

    pub fn cell(&mut self, p: Place) -> &mut Cell {
        &mut self.cells[p.rank][p.alloc][p.chunk]
    }

    /// Words for an allocation's chunk.
    pub fn describe(&self, p: Place) -> String {
        let name = match (p.alloc, self.inplace) {
            (SCRATCH, _) => "scratch",
            (INPUT, false) => "input",
            (OUTPUT, false) => "output",
            (INPUT, true) => "input (= output, in place)",
            _ => "output (= input, in place)",
        };
        format!("rank {}'s {name} chunk {}", p.rank, p.chunk)
    }
}
