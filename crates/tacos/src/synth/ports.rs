//! The plan of one event through switches: which sender port serves which receiver port.
//!
//! Receivers served one after another, each taking a random free sender, can leave the
//! last ones with none (on a star, with only themselves to receive from) and idle a port
//! for a whole transfer. A maximum matching of sender ports to receiver ports over the
//! free channels that carry something useful avoids it; augmenting paths are kept short
//! (`DEPTH`), which finds the maximum on the shapes switches make in practice and bounds
//! the work of an event.

use std::collections::{HashMap, HashSet};

/// How many senders one search may move to give one more receiver port a sender.
const DEPTH: usize = 8;

/// Matches receiver ports to sender ports. `edges` are (receiver port, sender port,
/// channel), those of receiver port p at `edges[ports[p]..ports[p + 1]]`; receiver ports are
/// served in that order, each trying its edges from `offset(count)` on (so equal choices
/// spread at random). Returns (sender port, channel) of the matching, by sender port.
pub(super) fn match_ports(
    edges: &[(u32, u32, u32)],
    ports: &[usize],
    mut offset: impl FnMut(usize) -> usize,
) -> Vec<(u32, u32)> {
    let mut search = Search {
        edges,
        ports,
        owner: HashMap::new(),
        seen: HashSet::new(),
    };
    for port in 0..ports.len().saturating_sub(1) {
        let start = offset(ports[port + 1] - ports[port]);
        search.seen.clear();
        search.augment(port, start, 0);
    }
    let mut matched: Vec<(u32, u32)> = search
        .owner
        .into_iter()
        .map(|(up, edge)| (up, edges[edge].2))
        .collect();
    matched.sort_unstable();
    matched
}

struct Search<'e> {
    edges: &'e [(u32, u32, u32)],
    ports: &'e [usize],
    /// Sender port -> the edge that has it.
    owner: HashMap<u32, usize>,
    /// Sender ports visited by the current search.
    seen: HashSet<u32>,
}

impl Search<'_> {
    /// Gives receiver port `port` a sender, moving others' senders along an augmenting
    /// path of at most `DEPTH` steps; edges are tried from `offset` on.
    fn augment(&mut self, port: usize, offset: usize, depth: usize) -> bool {
        let range = self.ports[port]..self.ports[port + 1];
        let len = range.len();
        let order = (0..len).map(|i| range.start + (i + offset) % len);
        for e in order.clone() {
            if !self.owner.contains_key(&self.edges[e].1) {
                self.owner.insert(self.edges[e].1, e);
                return true;
            }
        }
        if depth >= DEPTH {
            return false;
        }
        for e in order {
            let up = self.edges[e].1;
            if !self.seen.insert(up) {
                continue;
            }
            let holder = self.owner[&up];
            let holder_port = self.ports.partition_point(|&p| p <= holder) - 1;
            if self.augment(holder_port, 0, depth + 1) {
                self.owner.insert(up, e);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_receiver_gets_a_sender_by_moving_another() {
        // Receivers 0 and 1 (ports 10, 11); senders A (port 0) and B (port 1). Receiver 0
        // can take A or B and, trying A first, takes it; receiver 1 can only take A. A
        // greedy pass leaves receiver 1 without a sender; the augmenting path moves
        // receiver 0 to B.
        let edges = [(10, 0, 100), (10, 1, 101), (11, 0, 102)];
        let ports = [0, 2, 3];
        let matched = match_ports(&edges, &ports, |_| 0);
        assert_eq!(matched, [(0, 102), (1, 101)]);
    }

    #[test]
    fn every_receiver_of_a_star_gets_a_sender_other_than_itself() {
        // Eight NPUs on one switch: receiver i may take any sender j != i. Whatever the
        // offsets, the matching is perfect (a derangement).
        for seed in 0..50usize {
            let mut edges = Vec::new();
            let mut ports = vec![0];
            for i in 0..8u32 {
                for j in (0..8u32).filter(|&j| j != i) {
                    edges.push((100 + i, j, i * 8 + j));
                }
                ports.push(edges.len());
            }
            let mut k = seed;
            let matched = match_ports(&edges, &ports, |n| {
                k = k.wrapping_mul(31).wrapping_add(7);
                k % n
            });
            assert_eq!(matched.len(), 8, "seed {seed}");
            let mut receivers: Vec<u32> = matched.iter().map(|&(_, c)| c / 8).collect();
            receivers.sort_unstable();
            assert_eq!(receivers, (0..8).collect::<Vec<_>>());
            assert!(matched.iter().all(|&(up, c)| up == c % 8 && up != c / 8));
        }
    }
}
