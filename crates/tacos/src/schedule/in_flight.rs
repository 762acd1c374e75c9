//! Transfers in flight during a sweep in start order (the stream checker's, the streamed
//! simulation's), landed by end time; and how far ahead such a sweep asks the cache for
//! what it will read.

use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How many transfers ahead a sweep asks the cache for what it will read: at scale each
/// transfer's state is a cache miss of its own, and fetched this far ahead the misses of
/// several transfers overlap.
pub(crate) const LOOKAHEAD: usize = 8;

/// Transfers in flight, landed earliest first (in any order among equal ends), each with
/// what it carries: those sent in end order (all of them where every transfer takes as
/// long) queue in order, the rest wait in a heap.
pub(crate) struct InFlight<A> {
    in_order: VecDeque<(Picos, A)>,
    rest: BinaryHeap<Reverse<(Picos, A)>>,
}

impl<A: Ord> InFlight<A> {
    pub fn new() -> InFlight<A> {
        InFlight {
            in_order: VecDeque::new(),
            rest: BinaryHeap::new(),
        }
    }

    /// A transfer ending at `end` is sent, carrying `carried`.
    pub fn push(&mut self, end: Picos, carried: A) {
        match self.in_order.back() {
            Some(last) if end < last.0 => self.rest.push(Reverse((end, carried))),
            _ => self.in_order.push_back((end, carried)),
        }
    }

    /// The earliest arrival by `by`, taken out.
    pub fn pop_by(&mut self, by: Picos) -> Option<(Picos, A)> {
        let queued = self.in_order.front().map(|a| a.0).filter(|&end| end <= by);
        let heaped = self.rest.peek().map(|r| r.0 .0).filter(|&end| end <= by);
        match (queued, heaped) {
            (Some(q), Some(h)) if h < q => self.rest.pop().map(|r| r.0),
            (Some(_), _) => self.in_order.pop_front(),
            (None, Some(_)) => self.rest.pop().map(|r| r.0),
            (None, None) => None,
        }
    }

    /// What the `k`-th of the transfers queued in end order carries (0: the next), to
    /// ask the cache for what its landing will read.
    pub fn ahead(&self, k: usize) -> Option<&A> {
        self.in_order.get(k).map(|(_, carried)| carried)
    }
}
