//! The matching round: the TACOS loop at one event of the time-expanded network, one loop
//! for every matcher.
//!
//! At each event the NPUs that may have something to match are matched one destination at
//! a time by `match_destination`: while a free incoming link is left, pick one at random,
//! draw a chunk from its pool (chunks its source holds that the destination needs), send
//! it (over the cheapest free link whose source holds it, where the matcher knows several),
//! and take that link, and whatever it made busy, out of the free ones. The matcher keeps
//! the pools, the holders and the links' times up to date between rounds.
//!
//! The loop reaches a matcher through a `Seat`, which says what a link is and how a
//! decided transfer takes effect: `greedy::round`'s `InTurn` and `Apart` seat every NPU's
//! state (`greedy::Matcher`); `replicate`'s seats node 0's alone, where a link is a class
//! of links equal under the node shift.

use crate::error::Result;
use crate::topology::{LinkId, NpuId};
use crate::units::Picos;
use rand::Rng;

/// A round's random stream; where the round's destinations are matched apart, each its
/// own, so that its draws do not depend on which thread matched it nor on which
/// destinations were matched before it.
pub(super) type Draws = rand_pcg::Pcg32;

/// What offering one free link to its destination came to.
pub(super) enum Offer {
    /// Nothing to take over it this round (its pool is empty, or its gate found no sender).
    Nothing,
    /// A pool entry of no use was dropped; the link may still take another.
    Dropped,
    /// A transfer was decided over this link (the cheapest holder, not always the one drawn).
    Sent(LinkId),
}

/// A link's offer: the destination being matched, the event's time, and every link into
/// the destination still free.
#[derive(Clone, Copy)]
pub(super) struct Turn<'f> {
    pub(super) dst: NpuId,
    pub(super) now: Picos,
    pub(super) free: &'f [LinkId],
}

/// How the round's loop reaches a matcher's state: see the module doc. A "link" is
/// whatever the seat's destinations take chunks over, numbered by the seat.
pub(super) trait Seat {
    /// Asks the cache for what matching `dirty[k]`'s successors will read.
    fn prefetch(&self, _dirty: &[NpuId], _k: usize) {}
    /// The round's random stream for `dst`, where each destination has its own.
    fn own_draws(&self, dst: NpuId) -> Option<Draws>;
    /// `dst` is about to be matched.
    fn begin(&mut self, dst: NpuId);
    /// Fills `free` with the links into `dst` that can start a chunk at `now`.
    fn free_into(&mut self, dst: NpuId, now: Picos, free: &mut Vec<LinkId>);
    /// Whether the event's plan chose `link` (its pool is drawn from first).
    fn is_planned(&self, link: LinkId) -> bool;
    /// Offers `link` (free, into `turn.dst`) its chance to carry a chunk.
    fn offer(&mut self, turn: Turn, link: LinkId, rng: &mut Draws) -> Result<Offer>;
    /// Whether `link`, free before `taken` (another link into the same destination) took
    /// a chunk at `now`, is free still.
    fn still_free(&mut self, taken: LinkId, link: LinkId, now: Picos) -> bool;
}

/// Matches the free incoming links of `dst` with chunks useful to it (the paper's loop):
/// pick a free link at random (through switches, those the event's plan chose first),
/// draw a chunk from its pool, send it over the cheapest free link whose source holds it
/// (ties broken at random), until every free link is busy or nothing is left.
/// `free` and `sampling` are scratch lists.
fn match_destination(
    seat: &mut impl Seat,
    dst: NpuId,
    now: Picos,
    rng: &mut Draws,
    free: &mut Vec<LinkId>,
    sampling: &mut Vec<LinkId>,
) -> Result<()> {
    seat.free_into(dst, now, free);
    if free.is_empty() {
        return Ok(());
    }
    sampling.clone_from(free);
    let mut planned: Vec<LinkId> = free
        .iter()
        .copied()
        .filter(|&l| seat.is_planned(l))
        .collect();
    while !sampling.is_empty() {
        let i = loop {
            let Some(&l) = planned.last() else {
                break rng.random_range(0..sampling.len());
            };
            match sampling.iter().position(|&s| s == l) {
                Some(i) => break i,
                None => {
                    planned.pop();
                }
            }
        };
        let turn = Turn { dst, now, free };
        match seat.offer(turn, sampling[i], rng)? {
            Offer::Nothing => {
                sampling.swap_remove(i);
            }
            Offer::Dropped => {}
            Offer::Sent(taken) => {
                free.retain(|&l| l != taken && seat.still_free(taken, l, now));
                sampling.retain(|&l| l != taken && seat.still_free(taken, l, now));
            }
        }
    }
    Ok(())
}

/// Matches the destinations `dirty` one after the other, in their order, each on its own
/// stream where the seat gives one, else on `shared`.
pub(super) fn match_in_turn(
    seat: &mut impl Seat,
    dirty: &[NpuId],
    now: Picos,
    shared: &mut Draws,
    free: &mut Vec<LinkId>,
    sampling: &mut Vec<LinkId>,
) -> Result<()> {
    for (k, &dst) in dirty.iter().enumerate() {
        seat.prefetch(dirty, k);
        seat.begin(dst);
        match seat.own_draws(dst) {
            Some(mut own) => match_destination(seat, dst, now, &mut own, free, sampling)?,
            None => match_destination(seat, dst, now, shared, free, sampling)?,
        }
    }
    Ok(())
}
