//! Chunks in flight, grouped by the time they arrive.
//!
//! The matcher settles arrivals in (time, link) order. Where links are alike, every chunk
//! started at one event arrives at one later time, so a heap of (time, link) pairs pays a
//! logarithmic sift through a large heap per transfer for an order that sorting each
//! time's links once gives as well: here each time holds a list, sorted when it is due.
//! A due list often holds a good share of all links, so it is sorted by a bitmap pass
//! (`sort_distinct`) rather than by comparisons.

use crate::topology::LinkId;
use crate::units::Picos;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct Arrivals {
    by_time: BTreeMap<Picos, Vec<LinkId>>,
    /// Emptied lists, kept for the next times (one per distinct time in flight).
    spare: Vec<Vec<LinkId>>,
    /// `sort_distinct`'s bitmap, kept between calls.
    bits: Vec<u64>,
}

impl Arrivals {
    /// A chunk over `link` arrives at `time` (a link carries one chunk at a time, so each
    /// (time, link) pair comes once).
    pub(super) fn push(&mut self, time: Picos, link: LinkId) {
        self.by_time
            .entry(time)
            .or_insert_with(|| self.spare.pop().unwrap_or_default())
            .push(link);
    }

    /// When the next chunk arrives.
    pub(super) fn next_time(&self) -> Option<Picos> {
        self.by_time.first_key_value().map(|(&t, _)| t)
    }

    /// The links whose chunks arrive at the next time, in increasing order; hand the list
    /// back with `recycle` once read.
    pub(super) fn pop_next(&mut self) -> Option<(Picos, Vec<LinkId>)> {
        let (time, mut links) = self.by_time.pop_first()?;
        sort_distinct(&mut links, &mut self.bits);
        Some((time, links))
    }

    pub(super) fn recycle(&mut self, mut links: Vec<LinkId>) {
        links.clear();
        self.spare.push(links);
    }
}

/// Ids below this many per bitmap word are sorted by comparisons (the bitmap pass costs
/// a word per 64 ids of the range as well as a step per id).
const SPARSE: usize = 4;

/// Sorts `ids` in increasing order, as `sort_unstable` does. Where they are distinct and
/// dense in their range (links due at one time, NPUs to match at one event), by setting
/// their bits in `bits` and reading them back in order: a few steps per id instead of a
/// comparison sort's log n.
pub(super) fn sort_distinct(ids: &mut [usize], bits: &mut Vec<u64>) {
    let words = ids.iter().max().map_or(0, |&top| top / 64 + 1);
    if ids.len() < 64 || ids.len() * SPARSE < words {
        ids.sort_unstable();
        return;
    }
    bits.clear();
    bits.resize(words, 0);
    for &id in ids.iter() {
        bits[id / 64] |= 1 << (id % 64);
    }
    if bits.iter().map(|w| w.count_ones() as usize).sum::<usize>() != ids.len() {
        // Some id came twice: the bitmap holds it once.
        ids.sort_unstable();
        return;
    }
    let mut next = ids.iter_mut();
    for (w, &word) in bits.iter().enumerate() {
        let mut rest = word;
        while rest != 0 {
            if let Some(slot) = next.next() {
                *slot = w * 64 + rest.trailing_zeros() as usize;
            }
            rest &= rest - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Against `sort_unstable`: dense and sparse sets of distinct ids (both paths), short
    /// lists, and lists with repeated ids (which the bitmap cannot hold).
    #[test]
    fn sorts_as_sort_unstable() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut bits = Vec::new();
        for (range, len, repeats) in [
            (4096, 3000, false),
            (4096, 200, false),
            (100_000, 500, false),
            (1000, 10, false),
            (1000, 900, true),
            (0, 0, false),
        ] {
            let mut ids: Vec<usize> = (0..range).collect();
            ids.shuffle(&mut rng);
            ids.truncate(len);
            if repeats {
                let again = ids[rng.random_range(0..len)];
                ids.push(again);
            }
            let mut expected = ids.clone();
            expected.sort_unstable();
            sort_distinct(&mut ids, &mut bits);
            assert_eq!(ids, expected, "range {range}, {len} ids, repeats {repeats}");
        }
    }

    /// The order a heap of (time, link) pairs pops in, pushes interleaved across times.
    #[test]
    fn pops_by_time_then_link() {
        let pushes = [(30, 4), (10, 7), (30, 1), (10, 2), (20, 9), (10, 5)];
        let mut arrivals = Arrivals::default();
        for (t, l) in pushes {
            arrivals.push(t, l);
        }
        let mut popped = Vec::new();
        while let Some((t, links)) = arrivals.pop_next() {
            popped.extend(links.iter().map(|&l| (t, l)));
            arrivals.recycle(links);
        }
        let mut expected = pushes.to_vec();
        expected.sort();
        assert_eq!(popped, expected);
        assert_eq!(arrivals.next_time(), None);
    }

    /// A time pushed again after its list was taken comes back as a new list.
    #[test]
    fn a_time_taken_can_come_again() {
        let mut arrivals = Arrivals::default();
        arrivals.push(5, 3);
        let (t, links) = arrivals.pop_next().unwrap();
        assert_eq!((t, links.as_slice()), (5, &[3][..]));
        arrivals.recycle(links);
        arrivals.push(5, 1);
        assert_eq!(arrivals.next_time(), Some(5));
        assert_eq!(arrivals.pop_next().unwrap().1, vec![1]);
    }
}
