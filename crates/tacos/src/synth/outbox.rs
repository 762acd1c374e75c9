//! Transfers between their start and the arrival that settles them, handed on in start
//! order.
//!
//! A transfer's fate is known only when it arrives: where links differ in cost, a copy
//! arriving second may carry another chunk instead, or be dropped. So the matcher keeps
//! each transfer here from its start until it arrives, and after each event hands every
//! settled transfer with no unsettled one before it to a sink: a list, or a file written
//! as the matching runs, so a matching too large to hold (1.6e9 transfers on a 200x200
//! mesh) holds only the transfers in flight. Transfers reach the sink in the order they
//! started (ties in the order they were made), dropped ones left out.

use crate::error::Result;
use crate::schedule::Transfer;
use crate::units::Picos;
use std::collections::VecDeque;

/// Where settled transfers go, in start order (from whichever worker of the pool runs the
/// matching).
pub type Sink<'s> = dyn FnMut(Transfer) -> Result<()> + Send + 's;

#[derive(Default)]
pub(super) struct Outbox {
    /// Sequence number of `window[0]`.
    base: usize,
    /// Every transfer from the oldest unsettled one on, with whether it is settled
    /// (`Some(kept)`).
    window: VecDeque<(Transfer, Option<bool>)>,
    /// Transfers kept so far, and when the last of them ends.
    kept: u64,
    end_ps: Picos,
}

impl Outbox {
    /// Holds a transfer that just started; returns its sequence number.
    pub(super) fn start(&mut self, t: Transfer) -> usize {
        self.window.push_back((t, None));
        self.base + self.window.len() - 1
    }

    /// The unsettled transfer `seq`.
    pub(super) fn get(&self, seq: usize) -> &Transfer {
        &self.window[seq - self.base].0
    }

    pub(super) fn get_mut(&mut self, seq: usize) -> &mut Transfer {
        &mut self.window[seq - self.base].0
    }

    /// Settles transfer `seq`: kept (with whatever chunk it carries now) or dropped.
    pub(super) fn settle(&mut self, seq: usize, keep: bool) {
        self.window[seq - self.base].1 = Some(keep);
    }

    /// Hands every settled transfer that no unsettled one precedes to `sink`.
    pub(super) fn release(&mut self, sink: &mut Sink<'_>) -> Result<()> {
        while let Some(&(_, Some(keep))) = self.window.front() {
            let (t, _) = self.window.pop_front().expect("the front was just read");
            self.base += 1;
            if keep {
                self.kept += 1;
                self.end_ps = self.end_ps.max(t.end_ps);
                sink(t)?;
            }
        }
        Ok(())
    }

    /// (transfers kept, when the last of them ends).
    pub(super) fn totals(&self) -> (u64, Picos) {
        (self.kept, self.end_ps)
    }

    /// Whether every transfer started has been settled.
    pub(super) fn is_empty(&self) -> bool {
        self.window.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Op;

    fn transfer(chunk: usize, start_ps: Picos, end_ps: Picos) -> Transfer {
        Transfer::new(chunk, 0, 1, start_ps, end_ps, Op::Copy)
    }

    #[test]
    fn settled_transfers_leave_in_start_order_once_nothing_before_them_is_in_flight() {
        let mut out = Vec::new();
        let mut sink = |t: Transfer| {
            out.push(t.chunk());
            Ok(())
        };
        let mut outbox = Outbox::default();
        let a = outbox.start(transfer(0, 0, 30));
        let b = outbox.start(transfer(1, 0, 10));
        let c = outbox.start(transfer(2, 5, 15));
        // b and c arrive first but wait for a; c is dropped.
        outbox.settle(b, true);
        outbox.settle(c, false);
        outbox.release(&mut sink).unwrap();
        assert_eq!(outbox.totals(), (0, 0));
        assert_eq!(outbox.get(a).chunk(), 0);
        outbox.get_mut(a).set_chunk(7);
        outbox.settle(a, true);
        outbox.release(&mut sink).unwrap();
        assert!(outbox.is_empty());
        assert_eq!(outbox.totals(), (2, 30));
        assert_eq!(out, vec![7, 1]);
    }
}
