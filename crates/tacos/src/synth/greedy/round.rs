//! The matcher's rounds: at each event the NPUs whose incoming links may have something
//! to match (`dirty`) go through the one round loop (`synth::matching`), seated one of
//! two ways, which say how a decided transfer takes effect:
//! - `InTurn`: started at once, so the next draw sees its links taken (through switches a
//!   transfer takes ports other channels share; relays and fast paths read what it
//!   changes). The destinations share the round's random stream, one after the other.
//! - `Apart`: where no destination's matching reads what another's changes (`plain`), each
//!   draws from its own links' pools with a random stream of its own, and the transfers
//!   decided start after the round, so the destinations are matched in parallel with the
//!   same result whatever the threads.

use super::super::calendar::sort_distinct;
use super::super::matching::{match_in_turn, Draws, Offer, Seat, Turn};
use super::{Decided, Drawn, Matcher, IDLE, PARALLEL_GRAIN, PREFETCH_AHEAD, UNPLANNED};
use crate::error::Result;
use crate::topology::{LinkId, NpuId};
use crate::units::Picos;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;

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

impl Seat for InTurn<'_, '_> {
    fn prefetch(&self, dirty: &[NpuId], k: usize) {
        self.m.prefetch_ahead(&self.m.pools, 0, dirty, k);
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

    fn offer(&mut self, turn: Turn, link: LinkId, rng: &mut Draws) -> Result<Offer> {
        let Turn { dst, now, free } = turn;
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

    fn still_free(&mut self, taken: LinkId, link: LinkId, now: Picos) -> bool {
        // Channels sharing a physical link with `taken` (into the same switch port) are
        // taken too.
        let m = &mut *self.m;
        !(m.routes.is_some() || taken >= m.explicit) || m.available(link, now)
    }
}

impl Seat for Apart<'_, '_> {
    fn prefetch(&self, dirty: &[NpuId], k: usize) {
        self.m.prefetch_ahead(self.pools, self.base, dirty, k);
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

    fn offer(&mut self, turn: Turn, link: LinkId, rng: &mut Draws) -> Result<Offer> {
        let Turn { dst, now, free } = turn;
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

    fn still_free(&mut self, _: LinkId, _: LinkId, _: Picos) -> bool {
        // No routes: a transfer takes its own link alone.
        true
    }
}

impl Matcher<'_> {
    /// Asks the cache for the pools (`pools`, the table's slots from `base` on) of the
    /// destinations after `dirty[k]`, the nearer ones' entries and the farther ones'
    /// headers.
    fn prefetch_ahead(&self, pools: &[Vec<u32>], base: usize, dirty: &[NpuId], k: usize) {
        if let Some(&ahead) = dirty.get(k + 2 * PREFETCH_AHEAD) {
            self.prefetch_pool_heads(pools, base, ahead);
        }
        if let Some(&ahead) = dirty.get(k + PREFETCH_AHEAD) {
            self.prefetch_pools(pools, base, ahead);
        }
    }

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
