//! The event-driven link-chunk matcher.
//!
//! State is kept sparse where the topology is sparse: per link, a pool of chunks its source
//! holds that its destination may still need (filled when the source receives a chunk,
//! cleaned lazily), so a matching step costs the destination's in-degree plus the few pool
//! entries it samples, never a scan of every (NPU, chunk) pair. Per (NPU, chunk) the matcher
//! keeps only when the NPU got the chunk and whether it wants it.

use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::schedule::{Op, Transfer};
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::{ps_to_us, Picos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NEVER: Picos = Picos::MAX;
const IDLE: usize = usize::MAX;

pub(super) struct Matcher<'a> {
    topo: &'a Topology,
    chunks: usize,
    /// Alpha-beta time of one chunk on each link.
    cost: Vec<Picos>,
    /// Index into `transfers` of the chunk each link carries, or IDLE.
    busy: Vec<usize>,
    /// When each NPU got each chunk (`npu * chunks + chunk`), NEVER if it has not.
    held_since: Vec<Picos>,
    /// Whether each NPU must end with each chunk, one bit per (NPU, chunk).
    wants: Vec<u64>,
    /// Postconditions not yet met.
    unsatisfied: usize,
    /// Per link: chunks its source holds that its destination may still need.
    pools: Vec<Vec<u32>>,
    transfers: Vec<Transfer>,
    /// Transfers made useless by another path and not replaced (left out of the result).
    dropped: Vec<bool>,
    /// (arrival time, link) of every chunk in flight.
    arrivals: BinaryHeap<Reverse<(Picos, LinkId)>>,
    /// NPUs whose incoming links may have something to match at the current event.
    dirty: Vec<NpuId>,
    is_dirty: Vec<bool>,
    rng: ChaCha8Rng,
}

impl<'a> Matcher<'a> {
    pub(super) fn new(topo: &'a Topology, collective: &'a Collective, seed: u64) -> Matcher<'a> {
        let chunks = collective.chunks().len();
        let n = topo.npus();
        let cost = topo
            .links()
            .iter()
            .map(|l| l.transfer_ps(collective.chunk_bytes()))
            .collect();
        let mut m = Matcher {
            topo,
            chunks,
            cost,
            busy: vec![IDLE; topo.links().len()],
            held_since: vec![NEVER; n * chunks],
            wants: vec![0; (n * chunks).div_ceil(64)],
            unsatisfied: 0,
            pools: vec![Vec::new(); topo.links().len()],
            transfers: Vec::new(),
            dropped: Vec::new(),
            arrivals: BinaryHeap::new(),
            dirty: Vec::new(),
            is_dirty: vec![false; n],
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        for (c, chunk) in collective.chunks().iter().enumerate() {
            for &npu in &chunk.post {
                let i = npu * chunks + c;
                m.wants[i / 64] |= 1 << (i % 64);
                m.unsatisfied += 1;
            }
        }
        for (c, chunk) in collective.chunks().iter().enumerate() {
            for &npu in &chunk.pre {
                m.receive(npu, c, 0);
            }
        }
        m
    }

    /// Runs to completion and returns the transfers that carried a needed chunk.
    pub(super) fn run(mut self) -> Result<Vec<Transfer>> {
        self.match_dirty(0);
        while let Some(&Reverse((now, _))) = self.arrivals.peek() {
            while let Some(&Reverse((t, link))) = self.arrivals.peek() {
                if t != now {
                    break;
                }
                self.arrivals.pop();
                self.arrive(link, now);
            }
            self.match_dirty(now);
        }
        if self.unsatisfied > 0 {
            return Err(self.stuck());
        }
        let dropped = self.dropped;
        Ok(self
            .transfers
            .into_iter()
            .zip(dropped)
            .filter_map(|(t, d)| (!d).then_some(t))
            .collect())
    }

    fn held(&self, npu: NpuId, chunk: usize) -> bool {
        self.held_since[npu * self.chunks + chunk] != NEVER
    }

    fn wants(&self, npu: NpuId, chunk: usize) -> bool {
        let i = npu * self.chunks + chunk;
        self.wants[i / 64] & (1 << (i % 64)) != 0
    }

    fn mark_dirty(&mut self, npu: NpuId) {
        if !std::mem::replace(&mut self.is_dirty[npu], true) {
            self.dirty.push(npu);
        }
    }

    /// `npu` now holds `chunk`: offer it to every out-neighbour that still needs it.
    fn receive(&mut self, npu: NpuId, chunk: usize, now: Picos) {
        if self.held(npu, chunk) {
            return;
        }
        self.held_since[npu * self.chunks + chunk] = now;
        if self.wants(npu, chunk) {
            self.unsatisfied -= 1;
        }
        for link in self.topo.out_links(npu) {
            let dst = self.topo.link(link).dst;
            if self.wants(dst, chunk) && !self.held(dst, chunk) {
                self.pools[link].push(chunk as u32);
                self.mark_dirty(dst);
            }
        }
    }

    /// Earliest time a chunk already in flight to `npu` arrives there.
    fn in_flight_arrival(&self, npu: NpuId, chunk: usize) -> Picos {
        self.topo
            .in_links(npu)
            .iter()
            .filter_map(|&l| {
                let t = self.transfers.get(self.busy[l])?;
                (t.chunk == chunk).then_some(t.end_ps)
            })
            .min()
            .unwrap_or(NEVER)
    }

    /// A transfer ends: the chunk lands, unless it already arrived by a faster path; then
    /// the transfer is relabelled with another chunk its source held when it started and
    /// the destination still needs (the paper's chunk replacement), or dropped.
    fn arrive(&mut self, link: LinkId, now: Picos) {
        let idx = std::mem::replace(&mut self.busy[link], IDLE);
        let (src, dst) = (self.transfers[idx].src, self.transfers[idx].dst);
        self.mark_dirty(dst);
        let mut chunk = self.transfers[idx].chunk;
        if self.held(dst, chunk) {
            match self.replacement(link, self.transfers[idx].start_ps, now) {
                Some(other) => {
                    chunk = other;
                    self.transfers[idx].chunk = other;
                }
                None => {
                    self.dropped[idx] = true;
                    return;
                }
            }
        }
        debug_assert!(self.held_since[src * self.chunks + chunk] <= self.transfers[idx].start_ps);
        self.receive(dst, chunk, now);
    }

    fn replacement(&mut self, link: LinkId, started: Picos, now: Picos) -> Option<usize> {
        let (src, dst) = (self.topo.link(link).src, self.topo.link(link).dst);
        let mut pool = std::mem::take(&mut self.pools[link]);
        pool.retain(|&c| !self.held(dst, c as usize));
        let candidates: Vec<usize> = (0..pool.len())
            .filter(|&i| {
                let c = pool[i] as usize;
                self.held_since[src * self.chunks + c] <= started
                    && self.in_flight_arrival(dst, c) > now
            })
            .collect();
        let pick = (!candidates.is_empty())
            .then(|| candidates[self.rng.random_range(0..candidates.len())])
            .map(|i| pool.swap_remove(i) as usize);
        self.pools[link] = pool;
        pick
    }

    fn match_dirty(&mut self, now: Picos) {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        for &npu in &dirty {
            self.is_dirty[npu] = false;
            self.match_destination(npu, now);
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Matches the free incoming links of `dst` with chunks it needs: pick a random chunk
    /// from a random free link's pool, send it over the cheapest free link whose source
    /// holds it (ties broken at random), until every free link is busy or nothing is left.
    fn match_destination(&mut self, dst: NpuId, now: Picos) {
        let mut free: Vec<LinkId> = self
            .topo
            .in_links(dst)
            .iter()
            .copied()
            .filter(|&l| self.busy[l] == IDLE)
            .collect();
        let mut sampling = free.clone();
        while !sampling.is_empty() {
            let i = self.rng.random_range(0..sampling.len());
            let link = sampling[i];
            if self.pools[link].is_empty() {
                sampling.swap_remove(i);
                continue;
            }
            let j = self.rng.random_range(0..self.pools[link].len());
            let chunk = self.pools[link][j] as usize;
            if self.held(dst, chunk) {
                self.pools[link].swap_remove(j);
                continue;
            }
            let best = self.cheapest_holder(&free, chunk);
            if self.in_flight_arrival(dst, chunk) <= now + self.cost[best] {
                // Already on its way and arriving no later: a second copy is useless.
                self.pools[link].swap_remove(j);
                continue;
            }
            if best == link {
                self.pools[link].swap_remove(j);
            }
            self.start(best, chunk, now);
            free.retain(|&l| l != best);
            sampling.retain(|&l| l != best);
        }
    }

    /// The cheapest link in `links` whose source holds `chunk`, ties broken at random.
    fn cheapest_holder(&mut self, links: &[LinkId], chunk: usize) -> LinkId {
        let mut best = IDLE;
        let mut ties = 0;
        for &l in links {
            if !self.held(self.topo.link(l).src, chunk) {
                continue;
            }
            if best == IDLE || self.cost[l] < self.cost[best] {
                best = l;
                ties = 1;
            } else if self.cost[l] == self.cost[best] {
                ties += 1;
                if self.rng.random_range(0..ties) == 0 {
                    best = l;
                }
            }
        }
        debug_assert!(best != IDLE, "the sampled link's source holds the chunk");
        best
    }

    fn start(&mut self, link: LinkId, chunk: usize, now: Picos) {
        let l = self.topo.link(link);
        let end = now + self.cost[link];
        self.busy[link] = self.transfers.len();
        self.transfers.push(Transfer {
            chunk,
            src: l.src,
            dst: l.dst,
            start_ps: now,
            end_ps: end,
            op: Op::Copy,
        });
        self.dropped.push(false);
        self.arrivals.push(Reverse((end, link)));
    }

    /// The error when nothing is in flight and some NPU still lacks a chunk.
    fn stuck(&self) -> Error {
        let n = self.topo.npus();
        let missing: Vec<(NpuId, usize)> = (0..n)
            .flat_map(|npu| (0..self.chunks).map(move |c| (npu, c)))
            .filter(|&(npu, c)| self.wants(npu, c) && !self.held(npu, c))
            .take(4)
            .collect();
        let examples: Vec<String> = missing
            .iter()
            .map(|(npu, c)| format!("NPU {npu} lacks chunk {c}"))
            .collect();
        let last = self.transfers.iter().map(|t| t.end_ps).max().unwrap_or(0);
        Error::Synthesis(format!(
            "{} postconditions cannot be met by forwarding through NPUs that need the chunk ({}; stalled at {:.3} us)",
            self.unsatisfied,
            examples.join(", "),
            ps_to_us(last)
        ))
    }
}
