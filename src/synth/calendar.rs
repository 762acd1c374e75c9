//! Chunks in flight, grouped by the time they arrive.
//!
//! The matcher settles arrivals in (time, link) order. Where links are alike, every chunk
//! started at one event arrives at one later time, so a heap of (time, link) pairs pays a
//! logarithmic sift through a large heap per transfer for an order that sorting each
//! time's links once gives as well: here each time holds a list, sorted when it is due.

use crate::topology::LinkId;
use crate::units::Picos;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct Arrivals {
    by_time: BTreeMap<Picos, Vec<LinkId>>,
    /// Emptied lists, kept for the next times (one per distinct time in flight).
    spare: Vec<Vec<LinkId>>,
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
        links.sort_unstable();
        Some((time, links))
    }

    pub(super) fn recycle(&mut self, mut links: Vec<LinkId>) {
        links.clear();
        self.spare.push(links);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
