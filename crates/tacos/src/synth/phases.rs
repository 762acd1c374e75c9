//! How a collective is made of copying matchings, and how their transfers are put
//! together: the one place a combining collective's reductions and an All-Reduce's two
//! halves are composed, whatever holds the transfers (`compose`: a list; `streamed`: a
//! spool on disk; `replicate`: one node's matching, shifted onto the others).
//!
//! A combining collective's reductions are its copying dual (All-Gather for Reduce-Scatter
//! and All-Reduce, Broadcast for Reduce) matched on the reversed topology and reversed in
//! time about the dual's end: a copy over link v->u of the reversed topology during [s, e]
//! is a reduction over u->v during [T-e, T-s] (`reduction_of`), both links of the same
//! cost, and a chunk's broadcast tree becomes its reduction tree. An All-Reduce is those
//! reductions, then an All-Gather matched on the topology. Phased (the paper's
//! composition), that All-Gather is matched from time 0 and delayed by when the last
//! reduction ends (`Phases::after`); `compose` also pipelines it on the reductions, which
//! needs them held.

use super::outbox::Sink;
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::schedule::spool::SpoolReader;
use crate::schedule::{Op, Transfer};
use crate::units::Picos;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// The copying matchings a collective is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Phases {
    /// The copying dual whose matching on the reversed topology, reversed in time, makes
    /// the reductions (combining collectives only).
    pub reduce: Option<CollectiveKind>,
    /// The copying collective matched on the topology: the collective itself, or an
    /// All-Reduce's All-Gather half, after its reductions.
    pub copy: Option<CollectiveKind>,
}

impl Phases {
    pub(super) fn of(kind: CollectiveKind) -> Phases {
        use CollectiveKind::*;
        match kind {
            ReduceScatter => Phases {
                reduce: Some(AllGather),
                copy: None,
            },
            Reduce => Phases {
                reduce: Some(Broadcast),
                copy: None,
            },
            AllReduce => Phases {
                reduce: Some(AllGather),
                copy: Some(AllGather),
            },
            AllGather | Broadcast | Gather | Scatter | AllToAll => Phases {
                reduce: None,
                copy: Some(kind),
            },
        }
    }

    /// Whether both halves are matched: an All-Reduce.
    pub(super) fn both(&self) -> bool {
        self.reduce.is_some() && self.copy.is_some()
    }

    /// A copy of the All-Gather half, matched from 0, in the phased composition whose
    /// reductions end at `reduced_by`.
    pub(super) fn after(copy: Transfer, reduced_by: Picos) -> Transfer {
        copy.delayed(reduced_by)
    }
}

/// `spec` as another collective over the same NPUs, chunks and size (a dual, a half).
pub(super) fn with_kind(spec: &CollectiveSpec, kind: CollectiveKind) -> CollectiveSpec {
    CollectiveSpec {
        kind,
        ..spec.clone()
    }
}

/// The reduction a copy of the dual's matching on the reversed topology stands for, in a
/// phase that ends at `end` (when the dual's last copy does): over the same link
/// forwards, as long, mirrored in time.
pub(super) fn reduction_of(copy: Transfer, end: Picos) -> Transfer {
    Transfer::new(
        copy.chunk(),
        copy.dst(),
        copy.src(),
        end - copy.end_ps,
        end - copy.start_ps,
        Op::Reduce,
    )
}

/// The reductions the dual's matching `copies` (held) stands for, in the copies' order,
/// and when the last ends (the dual's end).
pub(super) fn reductions(copies: Vec<Transfer>) -> (Vec<Transfer>, Picos) {
    let end = copies.iter().map(|t| t.end_ps).max().unwrap_or(0);
    let reductions = copies.into_iter().map(|t| reduction_of(t, end)).collect();
    (reductions, end)
}

/// Hands `sink` the reductions of the dual's matching `copies` (read back from a spool,
/// last first: nonincreasing start), in start order: a reduction starts at `end` less its copy's end, so they go
/// out by nonincreasing copy end. A copy waits until no copy still unread can end later:
/// every unread one starts no later than the one just read, and so ends at most `longest`
/// after it. Copies wait for as long as the longest transfer (one instant's on links of
/// one speed).
pub(super) fn reverse_in_time(
    copies: SpoolReader<'_>,
    end: Picos,
    longest: Picos,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let mut waiting: BinaryHeap<Waiting> = BinaryHeap::new();
    for (read, copy) in copies.enumerate() {
        let copy = copy?;
        let horizon = copy.start_ps.saturating_add(longest);
        while waiting.peek().is_some_and(|w| w.copy.end_ps >= horizon) {
            let w = waiting.pop().expect("peeked");
            sink(reduction_of(w.copy, end))?;
        }
        waiting.push(Waiting {
            copy,
            read: Reverse(read),
        });
    }
    while let Some(w) = waiting.pop() {
        sink(reduction_of(w.copy, end))?;
    }
    Ok(())
}

/// A copy read back and not yet handed out; the greatest goes first: the latest end, then
/// the earliest read.
struct Waiting {
    copy: Transfer,
    read: Reverse<usize>,
}

impl Waiting {
    fn key(&self) -> (Picos, Reverse<usize>) {
        (self.copy.end_ps, self.read)
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Waiting {}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}
