//! Putting a matching's transfers in the schedule's order, (start, src, dst, chunk).
//!
//! A copying phase alone makes its transfers by start already, so each run of equal starts
//! is sorted on its own (the runs side by side on the caller's thread pool) and
//! `Schedule::new`'s sort then finds the list in order in one pass instead of sorting
//! millions of transfers anew. A long run (up to one transfer per link) is sorted by source
//! with a counting pass, two moves per transfer instead of a comparison sort's n log n; each
//! source's few transfers are then sorted by (dst, chunk). Other lists are left to
//! `Schedule::new`.

use crate::schedule::Transfer;
use rayon::prelude::*;

/// Lists shorter than this are sorted on the caller's thread (handing runs to the pool
/// costs more than sorting them).
const PARALLEL_MIN: usize = 1 << 14;
/// Runs shorter than this are left to a comparison sort.
const COUNTING_MIN: usize = 64;

/// Sorts each run of equal starts by (src, dst, chunk) where `transfers` come by start.
pub(super) fn order_by_start(transfers: &mut [Transfer]) {
    if !transfers.windows(2).all(|w| w[0].start_ps <= w[1].start_ps) {
        return;
    }
    let same_start = |a: &Transfer, b: &Transfer| a.start_ps == b.start_ps;
    if transfers.len() < PARALLEL_MIN {
        let mut scratch = Scratch::default();
        transfers
            .chunk_by_mut(same_start)
            .for_each(|run| scratch.sort(run));
    } else {
        transfers
            .par_chunk_by_mut(same_start)
            .for_each_init(Scratch::default, |scratch, run| scratch.sort(run));
    }
}

fn key(t: &Transfer) -> (usize, usize, usize) {
    (t.src(), t.dst(), t.chunk())
}

/// Buffers one thread reuses from run to run.
#[derive(Default)]
struct Scratch {
    /// Per source, where its next transfer goes.
    next: Vec<usize>,
    sorted: Vec<Transfer>,
}

impl Scratch {
    /// Sorts `run` by (src, dst, chunk) into the order `sort_unstable_by_key` gives: where
    /// two transfers share that key (parallel links), that sort itself decides.
    fn sort(&mut self, run: &mut [Transfer]) {
        let sources = run.iter().map(|t| t.src() + 1).max().unwrap_or(0);
        // The counting pass costs a slot per source as well as a move per transfer.
        if run.len() < COUNTING_MIN || run.len() < sources / 4 {
            run.sort_unstable_by_key(key);
            return;
        }
        self.next.clear();
        self.next.resize(sources + 1, 0);
        for t in run.iter() {
            self.next[t.src() + 1] += 1;
        }
        for s in 1..=sources {
            self.next[s] += self.next[s - 1];
        }
        self.sorted.clear();
        self.sorted.extend_from_slice(run);
        for t in run.iter() {
            let at = &mut self.next[t.src()];
            self.sorted[*at] = t.clone();
            *at += 1;
        }
        // `next[s]` is now where source s's transfers end.
        let mut from = 0;
        for &end in &self.next[..sources] {
            self.sorted[from..end].sort_unstable_by_key(key);
            from = end;
        }
        if self.sorted.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
            run.clone_from_slice(&self.sorted);
        } else {
            run.sort_unstable_by_key(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Op;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn transfer(chunk: usize, src: usize, dst: usize, start_ps: u64, end_ps: u64) -> Transfer {
        Transfer::new(chunk, src, dst, start_ps, end_ps, Op::Copy)
    }

    /// Against a plain comparison sort of each run, on runs long enough for the counting
    /// pass, with repeated sources and (in some lists) parallel-link ties; lists short
    /// enough for the caller's thread and long enough for the pool.
    #[test]
    fn sorts_runs_as_a_comparison_sort_does() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (ties, per_run) in [(false, 500), (true, 500), (false, PARALLEL_MIN / 2)] {
            let mut list: Vec<Transfer> = Vec::new();
            for start in [0, 10, 20] {
                for _ in 0..per_run {
                    let src = rng.random_range(0..40);
                    let dst = rng.random_range(0..40);
                    let chunk = if ties {
                        rng.random_range(0..2)
                    } else {
                        list.len()
                    };
                    let end = start + 1 + rng.random_range(0..5);
                    list.push(transfer(chunk, src, dst, start, end));
                }
            }
            let mut expected = list.clone();
            for run in expected.chunk_by_mut(|a, b| a.start_ps == b.start_ps) {
                run.sort_unstable_by_key(key);
            }
            order_by_start(&mut list);
            assert_eq!(list, expected, "ties: {ties}");
        }
    }

    /// A list not ordered by start is left alone.
    #[test]
    fn leaves_a_list_out_of_start_order() {
        let mut list = vec![transfer(0, 3, 1, 5, 6), transfer(1, 2, 1, 0, 1)];
        let before = list.clone();
        order_by_start(&mut list);
        assert_eq!(list, before);
    }
}
