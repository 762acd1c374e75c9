//! Keeping slow links for chunks that cannot come sooner another way.
//!
//! On hierarchical topologies (racks joined by switches much slower than the links inside
//! them) a greedy matcher wastes the scarce slow links: it sends a chunk across a slow link
//! into a group that is already receiving the same chunk across another one, and will
//! spread it over fast links sooner. So the matcher tracks, per (NPU, chunk), the earliest
//! time a copy already held or in flight in the NPU's fast group could reach it over fast
//! links alone (contention ignored), and does not start a chunk over a slow link when that
//! copy would arrive at most one slow transfer later: the slow link saves this chunk little
//! and is better spent on one that has no copy nearby. The estimate is only ever met by
//! chunks that are really there and, as every NPU wants every chunk when this is used (no
//! relays), every NPU on the fast route takes it on: nothing waits for a copy that will
//! not come. Contention is left out here; the matcher adds the fast links' backlog before
//! it holds a slow link back (`Matcher::fast_backlog`).

use super::bits::row_word;
use crate::topology::{NpuId, Topology};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NEVER: Picos = Picos::MAX;
/// A link is slow when a chunk takes more than this many times as long on it as on the
/// fastest link of the topology.
const SLOW_FACTOR: Picos = 2;
/// Largest fast group tracked (the tables grow as its square).
const MAX_GROUP: usize = 256;

pub(super) struct FastPaths {
    chunks: usize,
    /// Per link: whether it is slow.
    slow: Vec<bool>,
    /// Per NPU: its fast group and its index there.
    group: Vec<usize>,
    index: Vec<usize>,
    members: Vec<Vec<NpuId>>,
    /// Per group: time over fast links from member i to member j, `i * size + j`.
    dist: Vec<Vec<Picos>>,
    /// Per (NPU, chunk): earliest arrival over fast links from a copy held or in flight.
    eta: Vec<Picos>,
    /// Per group: whether fast links lead from every member to every other.
    complete: Vec<bool>,
    /// Per (group, chunk), one bit: whether a copy is held or in flight in the group.
    copies: Vec<u64>,
    /// Per group: how many chunks have a copy there.
    present: Vec<u32>,
}

impl FastPaths {
    /// Tables for `topo` where `cost` is a chunk's time on each channel: its links, then
    /// any further channels (gates) that join no fast group; None when no channel is slow
    /// or a fast group is too large to track. The per-(NPU, chunk) estimate behind
    /// `arrives_by` is kept only where some fast group is incomplete or some link of
    /// `topo` is slow (slow gates ask `comes_by_fast_links` instead).
    pub(super) fn new(topo: &Topology, cost: &[Picos], chunks: usize) -> Option<FastPaths> {
        let cheapest = cost.iter().copied().min()?;
        let slow: Vec<bool> = cost
            .iter()
            .map(|&c| c > cheapest.max(1).saturating_mul(SLOW_FACTOR))
            .collect();
        if !slow.iter().any(|&s| s) {
            return None;
        }
        let n = topo.npus();
        let mut group = vec![usize::MAX; n];
        let mut index = vec![0; n];
        let mut members: Vec<Vec<NpuId>> = Vec::new();
        for start in 0..n {
            if group[start] != usize::MAX {
                continue;
            }
            // Fast groups: NPUs joined by fast links in either direction.
            let g = members.len();
            let mut list = vec![start];
            group[start] = g;
            let mut next = 0;
            while next < list.len() {
                let u = list[next];
                next += 1;
                let out = topo.out_links(u).map(|l| (l, topo.link(l).dst));
                let inc = topo.in_links(u).iter().map(|&l| (l, topo.link(l).src));
                for (l, v) in out.chain(inc) {
                    if !slow[l] && group[v] == usize::MAX {
                        group[v] = g;
                        list.push(v);
                    }
                }
            }
            if list.len() > MAX_GROUP {
                return None;
            }
            for (i, &v) in list.iter().enumerate() {
                index[v] = i;
            }
            members.push(list);
        }
        let dist: Vec<Vec<Picos>> = members
            .iter()
            .map(|list| {
                list.iter()
                    .flat_map(|&src| fast_times(topo, cost, &slow, src, list, &index))
                    .collect()
            })
            .collect();
        let complete: Vec<bool> = dist.iter().map(|d| d.iter().all(|&t| t != NEVER)).collect();
        let copies = vec![0; (members.len() * chunks).div_ceil(64)];
        let estimated = !complete.iter().all(|&c| c) || slow[..topo.links().len()].contains(&true);
        Some(FastPaths {
            present: vec![0; members.len()],
            complete,
            copies,
            chunks,
            slow,
            group,
            index,
            members,
            dist,
            eta: if estimated {
                vec![NEVER; n * chunks]
            } else {
                Vec::new()
            },
        })
    }

    pub(super) fn is_slow(&self, link: usize) -> bool {
        self.slow[link]
    }

    /// A copy of `chunk` is at `npu` from time `at` (held, or arriving then).
    pub(super) fn reach(&mut self, npu: NpuId, chunk: usize, at: Picos) {
        let g = self.group[npu];
        let bit = g * self.chunks + chunk;
        if self.copies[bit / 64] & (1 << (bit % 64)) == 0 {
            self.copies[bit / 64] |= 1 << (bit % 64);
            self.present[g] += 1;
        }
        if self.eta.is_empty() {
            return;
        }
        let size = self.members[g].len();
        let row = &self.dist[g][self.index[npu] * size..(self.index[npu] + 1) * size];
        for (j, &d) in row.iter().enumerate() {
            if d != NEVER {
                let e = &mut self.eta[self.members[g][j] * self.chunks + chunk];
                // An estimate: past the clock's end it reads as "not by fast links".
                *e = (*e).min(at.saturating_add(d));
            }
        }
    }

    /// Whether a copy of `chunk` held or in flight in `npu`'s fast group will reach it
    /// over fast links, known without the per-(NPU, chunk) table where every member
    /// reaches every other (one bit per group and chunk, which stays in cache).
    pub(super) fn comes_by_fast_links(&self, npu: NpuId, chunk: usize) -> bool {
        let g = self.group[npu];
        let bit = g * self.chunks + chunk;
        if self.copies[bit / 64] & (1 << (bit % 64)) == 0 {
            return false;
        }
        self.complete[g] || self.eta[npu * self.chunks + chunk] != NEVER
    }

    /// Whether `chunk` reaches `npu` over fast links by `time` anyway.
    pub(super) fn arrives_by(&self, npu: NpuId, chunk: usize, time: Picos) -> bool {
        self.eta
            .get(npu * self.chunks + chunk)
            .is_some_and(|&eta| eta <= time)
    }

    /// `npu`'s fast group.
    pub(super) fn group_of(&self, npu: NpuId) -> usize {
        self.group[npu]
    }

    /// How many chunks have no copy in fast group `g` yet.
    pub(super) fn absent(&self, g: usize) -> usize {
        self.chunks - self.present[g] as usize
    }

    /// Chunks `64 w..64 w + 64` with a copy in fast group `g`, one bit each.
    pub(super) fn copies_word(&self, g: usize, w: usize) -> u64 {
        row_word(&self.copies, g * self.chunks, self.chunks, w)
    }
}

/// Time from `src` to each member of its group over fast links (NEVER where none leads).
fn fast_times(
    topo: &Topology,
    cost: &[Picos],
    slow: &[bool],
    src: NpuId,
    members: &[NpuId],
    index: &[usize],
) -> Vec<Picos> {
    let mut dist = vec![NEVER; members.len()];
    dist[index[src]] = 0;
    let mut heap = BinaryHeap::from([Reverse((0, src))]);
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[index[u]] {
            continue;
        }
        for l in topo.out_links(u) {
            let v = topo.link(l).dst;
            if slow[l] {
                continue;
            }
            let nd = d.saturating_add(cost[l]);
            if nd < dist[index[v]] {
                dist[index[v]] = nd;
                heap.push(Reverse((nd, v)));
            }
        }
    }
    dist
}
