//! Where each collective's chunks live in the executor's buffers.
//!
//! The executor splits the message into `nchunksperloop` (N) chunks and a program names
//! them by buffer and offset. What N counts follows the executor's size rules: for
//! All-Gather, Reduce-Scatter and All-to-All the message is the whole P-rank buffer; for
//! Gather and Scatter it is one rank's share. With K chunks per rank (N / P, or N for
//! Gather and Scatter), chunk ids follow `crate::collective`: chunk `rank * K + piece` is
//! piece `piece` of rank `rank`'s share (All-to-All: `(src * P + dst) * K + piece`), and
//! All-Reduce, Broadcast and Reduce chunk `c` is offset `c` of the buffer.
//!
//! In place, the input and output buffers are one allocation, as NCCL passes them: the
//! input of All-Gather and Gather is the rank's share of the output, the output of
//! Reduce-Scatter and Scatter is the rank's share of the input, and otherwise they are the
//! same buffer. Slots are named in the canonical buffer of that allocation.

use super::Buf;
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};

/// A chunk-sized place in a rank's memory, in the canonical buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    pub buf: Buf,
    pub index: usize,
}

impl Slot {
    pub fn new(buf: Buf, index: usize) -> Slot {
        Slot { buf, index }
    }
}

/// A collective's buffer layout for a number of ranks and chunks per loop.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    kind: CollectiveKind,
    ranks: usize,
    chunks_per_loop: usize,
    /// K: chunks in one rank's share (N for collectives without shares).
    share: usize,
    in_place: bool,
    root: Option<usize>,
}

impl Layout {
    /// The layout of `kind` on `ranks` ranks with `chunks_per_loop` chunks; `root` is a
    /// rank, needed by rooted collectives.
    pub fn new(
        kind: CollectiveKind,
        ranks: usize,
        chunks_per_loop: usize,
        in_place: bool,
        root: Option<usize>,
    ) -> Result<Layout> {
        let bad = |m: String| Err(Error::msccl(m));
        if ranks == 0 || chunks_per_loop == 0 {
            return bad(format!(
                "{kind} needs at least one GPU and one chunk per loop (got {ranks} GPUs, {chunks_per_loop} chunks)"
            ));
        }
        let share = match kind {
            CollectiveKind::AllGather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::AllToAll => {
                if chunks_per_loop % ranks != 0 {
                    return bad(format!(
                        "{kind} on {ranks} GPUs needs nchunksperloop to be a multiple of {ranks}, not {chunks_per_loop}"
                    ));
                }
                chunks_per_loop / ranks
            }
            _ => chunks_per_loop,
        };
        let root = match (kind.has_root(), root) {
            (true, None) => return bad(format!("{kind} needs a root rank")),
            (true, Some(r)) if r >= ranks => {
                return bad(format!("root rank {r} is not one of the {ranks} GPUs"))
            }
            (true, r) => r,
            (false, _) => None,
        };
        Ok(Layout {
            kind,
            ranks,
            chunks_per_loop,
            share,
            in_place,
            root,
        })
    }

    /// The layout a collective spec asks for: ranks are the spec's NPUs in order.
    pub fn for_spec(spec: &CollectiveSpec, in_place: bool) -> Result<Layout> {
        let p = spec.npus.len();
        let k = spec.chunks_per_npu;
        let chunks_per_loop = match spec.kind {
            CollectiveKind::AllGather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::AllReduce
            | CollectiveKind::AllToAll => p * k,
            _ => k,
        };
        let root = match spec.root {
            Some(npu) => Some(spec.npus.iter().position(|&n| n == npu).ok_or_else(|| {
                Error::msccl(format!(
                    "root NPU {npu} is not one of the collective's NPUs"
                ))
            })?),
            None => None,
        };
        Layout::new(spec.kind, p, chunks_per_loop, in_place, root)
    }

    pub fn kind(&self) -> CollectiveKind {
        self.kind
    }

    pub fn ranks(&self) -> usize {
        self.ranks
    }

    pub fn chunks_per_loop(&self) -> usize {
        self.chunks_per_loop
    }

    /// The root rank of a rooted collective.
    pub fn root(&self) -> Option<usize> {
        self.root
    }

    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// Number of distinct chunks of the collective (chunk ids are 0..this).
    pub fn chunks(&self) -> usize {
        let (p, k) = (self.ranks, self.share);
        match self.kind {
            CollectiveKind::AllToAll => p * p * k,
            CollectiveKind::AllReduce | CollectiveKind::Broadcast | CollectiveKind::Reduce => k,
            _ => p * k,
        }
    }

    /// Chunks in the buffer that the collective's size (nccl-tests' convention) measures,
    /// so a chunk is size / this bytes.
    pub fn size_divisor(&self) -> usize {
        match self.kind {
            CollectiveKind::Gather | CollectiveKind::Scatter => self.ranks * self.share,
            _ => self.chunks_per_loop,
        }
    }

    /// The message size the executor compares with minBytes and maxBytes for a
    /// collective of `size_bytes`: one rank's share for Gather and Scatter.
    pub fn executor_bytes(&self, size_bytes: u64) -> u64 {
        match self.kind {
            CollectiveKind::Gather | CollectiveKind::Scatter => size_bytes / self.ranks as u64,
            _ => size_bytes,
        }
    }

    /// Length in chunks of the buffer a program names `buf` (input or output) on one rank.
    pub fn view_len(&self, buf: Buf) -> usize {
        let (p, k) = (self.ranks, self.share);
        let whole = p * k;
        match (self.kind, buf) {
            (_, Buf::Scratch) => 0,
            (CollectiveKind::AllGather | CollectiveKind::Gather, Buf::Input) => k,
            (CollectiveKind::AllGather | CollectiveKind::Gather, Buf::Output) => whole,
            (CollectiveKind::ReduceScatter | CollectiveKind::Scatter, Buf::Input) => whole,
            (CollectiveKind::ReduceScatter | CollectiveKind::Scatter, Buf::Output) => k,
            (CollectiveKind::AllToAll, _) => whole,
            _ => self.chunks_per_loop,
        }
    }

    /// The buffer that holds an in-place allocation.
    fn canonical(&self) -> Buf {
        match self.kind {
            CollectiveKind::AllGather | CollectiveKind::Gather => Buf::Output,
            _ => Buf::Input,
        }
    }

    /// Length of a canonical buffer (0 for the buffer that in place is an alias).
    pub fn canonical_len(&self, buf: Buf) -> usize {
        if !self.in_place {
            return self.view_len(buf);
        }
        if buf == self.canonical() {
            self.view_len(Buf::Input).max(self.view_len(Buf::Output))
        } else {
            0
        }
    }

    /// The input and output chunk counts a program declares (`i_chunks`, `o_chunks`):
    /// in place, only the canonical buffer is named.
    pub fn declared_counts(&self) -> (usize, usize) {
        (
            self.canonical_len(Buf::Input),
            self.canonical_len(Buf::Output),
        )
    }

    /// The canonical slot that `buf[off]` on `rank` names, if it lies inside the real
    /// buffer (scratch slots are checked by the caller against `s_chunks`).
    pub fn resolve(&self, rank: usize, buf: Buf, off: i64) -> Option<Slot> {
        if buf == Buf::Scratch {
            return usize::try_from(off).ok().map(|i| Slot::new(buf, i));
        }
        let off = usize::try_from(off)
            .ok()
            .filter(|&o| o < self.view_len(buf))?;
        if !self.in_place || buf == self.canonical() {
            return Some(Slot::new(buf, off));
        }
        let shift = match self.kind {
            CollectiveKind::AllGather
            | CollectiveKind::Gather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::Scatter => rank * self.share,
            _ => 0,
        };
        Some(Slot::new(self.canonical(), shift + off))
    }

    /// Where `rank` holds `chunk` at the start (its contribution, for combining
    /// collectives), if it holds it.
    pub fn input_slot(&self, rank: usize, chunk: usize) -> Option<Slot> {
        let (p, k) = (self.ranks, self.share);
        let off = match self.kind {
            CollectiveKind::AllGather | CollectiveKind::Gather => {
                (chunk / k == rank).then_some(chunk % k)
            }
            CollectiveKind::ReduceScatter | CollectiveKind::AllReduce | CollectiveKind::Reduce => {
                Some(chunk)
            }
            CollectiveKind::Broadcast | CollectiveKind::Scatter => {
                (self.root == Some(rank)).then_some(chunk)
            }
            CollectiveKind::AllToAll => (chunk / (p * k) == rank).then_some(chunk % (p * k)),
        }?;
        self.resolve(rank, Buf::Input, off as i64)
    }

    /// Where `rank` must hold `chunk` at the end, if it must.
    pub fn output_slot(&self, rank: usize, chunk: usize) -> Option<Slot> {
        let (p, k) = (self.ranks, self.share);
        let off = match self.kind {
            CollectiveKind::AllGather | CollectiveKind::AllReduce | CollectiveKind::Broadcast => {
                Some(chunk)
            }
            CollectiveKind::Gather | CollectiveKind::Reduce => {
                (self.root == Some(rank)).then_some(chunk)
            }
            CollectiveKind::ReduceScatter | CollectiveKind::Scatter => {
                (chunk / k == rank).then_some(chunk % k)
            }
            CollectiveKind::AllToAll => {
                let (src, dst, piece) = (chunk / (p * k), chunk / k % p, chunk % k);
                (dst == rank).then_some(src * k + piece)
            }
        }?;
        self.resolve(rank, Buf::Output, off as i64)
    }

    /// Whether chunks are summed: then every rank contributes to every chunk.
    pub fn combining(&self) -> bool {
        self.kind.combining()
    }
}
