//! The matching round: the TACOS loop at one event of the time-expanded network.
//!
//! At each event the NPUs whose incoming links may have something to match (`dirty`) are
//! matched one destination at a time by one loop, `match_destination`: while a free
//! incoming link is left, pick one at random, draw a chunk from its pool (chunks its
//! source holds that the destination needs), send it over the cheapest free link whose
//! source holds it, and take that link out of the free ones. Everything else in the
//! matcher keeps the pools, the holders and the links' times up to date between rounds.
//!
//! The loop reaches the matcher through a `Seat`, which says how a decided transfer takes
//! effect:
//! - `InTurn`: started at once, so the next draw sees its links taken (through switches a
//!   transfer takes ports other channels share; relays and fast paths read what it
//!   changes). The destinations share the round's random stream, one after the other.
//! - `Apart`: where no destination's matching reads what another's changes (`plain`), each
//!   draws from its own links' pools with a random stream of its own, and the transfers
//!   decided start after the round, so the destinations are matched in parallel with the
//!   same result whatever the threads.

use super::super::calendar::sort_distinct;
use super::{Decided, Drawn, Draws, Matcher, IDLE, PARALLEL_GRAIN, PREFETCH_AHEAD, UNPLANNED};
use crate::error::Result;
use crate::topology::{LinkId, NpuId};
use crate::units::Picos;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;

/// What offering one free link to its destination came to.
enum Offer {
    /// Nothing to take over it this round (its pool is empty, or its gate found no sender).
    Nothing,
    /// A pool entry of no use was dropped; the link may still take another.
    Dropped,
    /// A transfer was decided over this link (the cheapest holder, not always the one drawn).
    Sent(LinkId),
}

/// How the round's loop reaches the matcher's state: see the module doc.
trait Seat<'a> {
    fn matcher(&self) -> &Matcher<'a>;
    /// The pools the loop draws from, and the slot of the first (the table's slots from
    /// there on).
    fn pools(&self) -> (&[Vec<u32>], usize);
    /// The round's random stream for `dst`, where each destination has its own.
    fn own_draws(&self, dst: NpuId) -> Option<Draws>;
    /// `dst` is about to be matched.
    fn begin(&mut self, dst: NpuId);
    /// Fills `free` with the links into `dst` that can start a chunk at `now`.
    fn free_into(&mut self, dst: NpuId, now: Picos, free: &mut Vec<LinkId>);
    /// Whether the event's plan chose `link` (its pool is drawn from first).
    fn is_planned(&self, link: LinkId) -> bool;
    /// Offers `link` (free, into `dst`) its chance to carry a chunk; `free`: every link
    /// into `dst` still free.
    fn offer(
        &mut self,
        dst: NpuId,
        link: LinkId,
        free: &[LinkId],
        now: Picos,
        rng: &mut Draws,
    ) -> Result<Offer>;
    /// `taken` carries a chunk now: drops it, and whatever it made busy, from `free` and
    /// `sampling`.
    fn keep_free(
        &mut self,
        taken: LinkId,
        free: &mut Vec<LinkId>,
        sampling: &mut Vec<LinkId>,
        now: Picos,
    );
}

/// Each transfer started at once, the destinations in turn on the round's one stream.
struct InTurn<'m, 'a> {
    m: &'m mut Matcher<'a>,
}

/// Each destination on its own pools and stream, the transfers started after the round.
struct Apart<'m, 'a> {
    m: &'m Matcher<'a>,
    /// The pools of the round's destinations (a slice of the table from `base` on).
    pools: &'m mut [Vec<u32>],
    base: usize,
    /// The transfers decided, in the order of the destinations; from `mine` on, those of
    /// the destination being matched.
    decided: &'m mut Vec<Decided>,
    mine: usize,
}

impl<'a> Seat<'a> for InTurn<'_, 'a> {
    fn matcher(&self) -> &Matcher<'a> {
        self.m
    }

    fn pools(&self) -> (&[Vec<u32>], usize) {
        (&self.m.pools, 0)
    }

    fn own_draws(&self, _: NpuId) -> Option<Draws> {
        None
    }

    fn begin(&mut self, dst: NpuId) {
        self.m.is_dirty[dst] = false;
    }

    fn free_into(&mut self, dst: NpuId, now: Picos, free: &mut Vec<LinkId>) {
        self.m.free_into(dst, now, free);
    }

    fn is_planned(&self, link: LinkId) -> bool {
        self.m.is_planned(link)
    }

    fn offer(
        &mut self,
        dst: NpuId,
        link: LinkId,
        free: &[LinkId],
        now: Picos,
        rng: &mut Draws,
    ) -> Result<Offer> {
        let m = &mut *self.m;
        if link >= m.explicit {
            let gate = link - m.explicit;
            return Ok(match m.gate_pick(gate, dst, now, rng)? {
                Some((from, chunk, arrival)) => {
                    m.gate_src[gate] = from as u32;
                    m.start(link, chunk, now, arrival);
                    Offer::Sent(link)
                }
                None => {
                    if m.gate_need(gate, dst) > 0 && !std::mem::replace(&mut m.in_idle[gate], true)
                    {
                        let g = m.gates.map_or(0, |g| g.group(gate));
                        m.idle[g].push(gate as u32);
                    }
                    Offer::Nothing
                }
            });
        }
        let slot = m.slot(link);
        if m.pools[slot].is_empty() {
            return Ok(Offer::Nothing);
        }
        let mut pool = std::mem::take(&mut m.pools[slot]);
        let drawn = m.draw(dst, link, &mut pool, free, &[], now, rng);
        m.pools[slot] = pool;
        let Drawn::Sent(d) = drawn? else {
            return Ok(Offer::Dropped);
        };
        m.start(d.link, d.chunk, now, d.arrival);
        if m.is_planned(d.link) {
            let up = m.routes.map_or(0, |r| r.links(d.link)[0] as usize);
            m.plan_up[up] = UNPLANNED;
        }
        Ok(Offer::Sent(d.link))
    }

    fn keep_free(
        &mut self,
        taken: LinkId,
        free: &mut Vec<LinkId>,
        sampling: &mut Vec<LinkId>,
        now: Picos,
    ) {
        let m = &mut *self.m;
        if m.routes.is_some() || taken >= m.explicit {
            // Channels sharing a physical link with `taken` (into the same switch port)
            // are taken too.
            free.retain(|&l| l != taken && m.available(l, now));
            sampling.retain(|&l| l != taken && m.available(l, now));
        } else {
            free.retain(|&l| l != taken);
            sampling.retain(|&l| l != taken);
        }
    }
}

impl<'a> Seat<'a> for Apart<'_, 'a> {
    fn matcher(&self) -> &Matcher<'a> {
        self.m
    }

    fn pools(&self) -> (&[Vec<u32>], usize) {
        (self.pools, self.base)
    }

    fn own_draws(&self, dst: NpuId) -> Option<Draws> {
        Some(self.m.draws(dst))
    }

    fn begin(&mut self, _: NpuId) {
        self.mine = self.decided.len();
    }

    fn free_into(&mut self, dst: NpuId, _: Picos, free: &mut Vec<LinkId>) {
        // No reservations and no routes: a link is free when it carries nothing.
        free.clear();
        let m = self.m;
        free.extend(m.topo.in_links(dst).iter().filter(|&&l| m.busy[l] == IDLE));
    }

    fn is_planned(&self, _: LinkId) -> bool {
        false
    }

    fn offer(
        &mut self,
        dst: NpuId,
        link: LinkId,
        free: &[LinkId],
        now: Picos,
        rng: &mut Draws,
    ) -> Result<Offer> {
        let pool = &mut self.pools[self.m.slot(link) - self.base];
        if pool.is_empty() {
            return Ok(Offer::Nothing);
        }
        let decided = &self.decided[self.mine..];
        Ok(
            match self.m.draw(dst, link, pool, free, decided, now, rng)? {
                Drawn::Dropped => Offer::Dropped,
                Drawn::Sent(d) => {
                    self.decided.push(d);
                    Offer::Sent(d.link)
                }
            },
        )
    }

    fn keep_free(
        &mut self,
        taken: LinkId,
        free: &mut Vec<LinkId>,
        sampling: &mut Vec<LinkId>,
        _: Picos,
    ) {
        free.retain(|&l| l != taken);
        sampling.retain(|&l| l != taken);
    }
}

/// Matches the free incoming links of `dst` with chunks useful to it (the paper's loop):
/// pick a free link at random (through switches, those the event's plan chose first),
/// draw a chunk from its pool, send it over the cheapest free link whose source holds it
/// (ties broken at random), until every free link is busy or nothing is left.
/// `free` and `sampling` are scratch lists.
fn match_destination<'a>(
    seat: &mut impl Seat<'a>,
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
        match seat.offer(dst, sampling[i], free, now, rng)? {
            Offer::Nothing => {
                sampling.swap_remove(i);
            }
            Offer::Dropped => {}
            Offer::Sent(taken) => seat.keep_free(taken, free, sampling, now),
        }
    }
    Ok(())
}

/// Matches the destinations `dirty` one after the other, in their order.
fn match_in_turn<'a>(
    seat: &mut impl Seat<'a>,
    dirty: &[NpuId],
    now: Picos,
    shared: &mut Draws,
    free: &mut Vec<LinkId>,
    sampling: &mut Vec<LinkId>,
) -> Result<()> {
    for (k, &dst) in dirty.iter().enumerate() {
        let (pools, base) = seat.pools();
        let m = seat.matcher();
        if let Some(&ahead) = dirty.get(k + 2 * PREFETCH_AHEAD) {
            m.prefetch_pool_heads(pools, base, ahead);
        }
        if let Some(&ahead) = dirty.get(k + PREFETCH_AHEAD) {
            m.prefetch_pools(pools, base, ahead);
        }
        seat.begin(dst);
        match seat.own_draws(dst) {
            Some(mut own) => match_destination(seat, dst, now, &mut own, free, sampling)?,
            None => match_destination(seat, dst, now, shared, free, sampling)?,
        }
    }
    Ok(())
}

impl Matcher<'_> {
    /// Matches the NPUs marked dirty; through switches, by the event's plan if `plan`.
    pub(super) fn match_round(&mut self, now: Picos, plan: bool) -> Result<()> {
        let mut dirty = std::mem::take(&mut self.dirty);
        sort_distinct(&mut dirty, &mut self.dirty_bits);
        if !dirty.is_empty() {
            // Not for a round with nothing to match, so that a matching shifted in time
            // (whose first round, at 0, finds nothing released) draws what it would at 0.
            self.round_seed = self.rng.random();
        }
        if self.plain {
            for &npu in &dirty {
                self.is_dirty[npu] = false;
            }
            let mut pools = std::mem::take(&mut self.pools);
            let mut decided = std::mem::take(&mut self.decided);
            let matched = self.match_apart(&dirty, &mut pools, 0, now, &mut decided);
            self.pools = pools;
            matched?;
            for d in decided.drain(..) {
                self.start(d.link, d.chunk, now, d.arrival);
            }
            self.decided = decided;
        } else {
            self.order(&mut dirty, now, plan);
            // Matched one after the other, the destinations share the round's stream.
            let mut rng = Draws::seed_from_u64(self.round_seed);
            let (mut free, mut sampling) = std::mem::take(&mut self.spare_links);
            let matched = match_in_turn(
                &mut InTurn { m: self },
                &dirty,
                now,
                &mut rng,
                &mut free,
                &mut sampling,
            );
            self.spare_links = (free, sampling);
            matched?;
        }
        dirty.clear();
        self.dirty = dirty;
        Ok(())
    }

    /// Puts the destinations of a round matched in turn in the order they are matched.
    fn order(&mut self, dirty: &mut [NpuId], now: Picos, plan: bool) {
        if self.relays.is_some() || self.routes.is_some() {
            // A relayed chunk goes to whichever closer NPU takes it first; in id order
            // low ids would always win and draw every route the same way.
            dirty.shuffle(&mut self.rng);
        }
        if self.routes.is_some() {
            // Through a switch every receiver competes for the same senders: the one
            // that lacks the most goes first, so no NPU falls behind and finishes last.
            let missing = &self.missing;
            dirty.sort_by_key(|&npu| Reverse(missing[npu]));
            // Where large groups are matched by port the plan is left out: it orders
            // only the small groups' channels (an NVSwitch's), which fill their ports
            // well without it, and on large clusters it doubles the cost of an event.
            if plan && self.gates.is_none() {
                self.plan(dirty, now);
            }
        }
    }

    /// Matches the destinations `dirty` (in ascending order) of a plain round apart
    /// (`Apart`), each from its own links' pools (`pools`, the table's slots from `base`
    /// on), so the halves of `dirty` are matched apart, down to `PARALLEL_GRAIN`, on
    /// whichever threads of the pool are free; the transfers decided are appended to
    /// `decided` in `dirty`'s order, to be started afterwards. Whatever the threads, the
    /// result is the same.
    fn match_apart(
        &self,
        dirty: &[NpuId],
        pools: &mut [Vec<u32>],
        base: usize,
        now: Picos,
        decided: &mut Vec<Decided>,
    ) -> Result<()> {
        if dirty.len() >= 2 * PARALLEL_GRAIN {
            let (first, second) = dirty.split_at(dirty.len() / 2);
            let cut = self.pool_first[second[0]];
            let (mine, theirs) = pools.split_at_mut(cut - base);
            let mut later_half = Vec::new();
            let (done, other) = rayon::join(
                || self.match_apart(first, mine, base, now, decided),
                || self.match_apart(second, theirs, cut, now, &mut later_half),
            );
            done?;
            other?;
            decided.append(&mut later_half);
            return Ok(());
        }
        let mine = decided.len();
        let mut seat = Apart {
            m: self,
            pools,
            base,
            decided,
            mine,
        };
        // Each destination draws from its own stream; this one is never read.
        let mut unused = Draws::seed_from_u64(0);
        let (mut free, mut sampling) = (Vec::new(), Vec::new());
        match_in_turn(&mut seat, dirty, now, &mut unused, &mut free, &mut sampling)
    }
}
