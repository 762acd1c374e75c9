//! Lanes: the transfers between two ranks, both ways, that one pair of threadblocks (one
//! at each end) carries over one channel.
//!
//! A channel's signals are counted, not addressed: a receiver's k-th wait passes once the
//! sender has signalled k times. So within a lane, chunks must arrive in the order they left;
//! a transfer that would overtake an earlier one in its direction opens the pair's next lane,
//! as does one past the lane's share of transfers (what keeps a threadblock within the
//! executor's 64 operations).

use crate::schedule::Transfer;

/// One lane: ranks `low < high`, its place among that pair's lanes, and which ways it
/// carries data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lane {
    pub low: usize,
    pub high: usize,
    /// Whether it carries transfers from `low` to `high`, and from `high` to `low`.
    pub up: bool,
    pub down: bool,
}

/// The lanes of a schedule's transfers (in ranks), and each transfer's lane.
pub(super) struct Lanes {
    pub lanes: Vec<Lane>,
    pub of_transfer: Vec<usize>,
}

/// A transfer in ranks, with the times that order it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Move {
    pub src: usize,
    pub dst: usize,
    pub start_ps: u64,
    pub end_ps: u64,
}

impl Move {
    pub fn of(t: &Transfer, src: usize, dst: usize) -> Move {
        Move {
            src,
            dst,
            start_ps: t.start_ps,
            end_ps: t.end_ps,
        }
    }
}

/// Groups `moves`, taken in `departures` order, into lanes of at most `share` transfers.
pub(super) fn group(moves: &[Move], departures: &[usize], share: usize) -> Lanes {
    struct Open {
        lane: usize,
        count: usize,
        /// The latest arrival so far in each direction (low to high, high to low).
        last_end: [Option<u64>; 2],
    }
    let mut open: std::collections::HashMap<(usize, usize), Open> = Default::default();
    let mut lanes = Vec::new();
    let mut of_transfer = vec![usize::MAX; moves.len()];
    for &t in departures {
        let m = moves[t];
        let (low, high) = (m.src.min(m.dst), m.src.max(m.dst));
        let way = usize::from(m.src > m.dst);
        let fits = |o: &Open| o.count < share && o.last_end[way].map_or(true, |e| m.end_ps >= e);
        let entry = open.entry((low, high));
        let o = match entry {
            std::collections::hash_map::Entry::Occupied(e) if fits(e.get()) => e.into_mut(),
            e => {
                lanes.push(Lane {
                    low,
                    high,
                    up: false,
                    down: false,
                });
                let fresh = Open {
                    lane: lanes.len() - 1,
                    count: 0,
                    last_end: [None, None],
                };
                match e {
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        o.insert(fresh);
                        o.into_mut()
                    }
                    std::collections::hash_map::Entry::Vacant(v) => v.insert(fresh),
                }
            }
        };
        o.count += 1;
        o.last_end[way] = Some(m.end_ps);
        let lane = &mut lanes[o.lane];
        if way == 0 {
            lane.up = true;
        } else {
            lane.down = true;
        }
        of_transfer[t] = o.lane;
    }
    Lanes { lanes, of_transfer }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(src: usize, dst: usize, start_ps: u64, end_ps: u64) -> Move {
        Move {
            src,
            dst,
            start_ps,
            end_ps,
        }
    }

    #[test]
    fn an_overtaking_transfer_opens_the_pairs_next_lane() {
        // 0 -> 1 twice: the second leaves later but arrives first, so a counted wait
        // could pass on the first's signal before the second's data is there.
        let moves = [mv(0, 1, 0, 10), mv(0, 1, 1, 5), mv(1, 0, 2, 12)];
        let lanes = group(&moves, &[0, 1, 2], 100);
        assert_eq!(lanes.of_transfer, vec![0, 1, 1]);
        assert_eq!(lanes.lanes.len(), 2);
        assert!(lanes.lanes[1].up && lanes.lanes[1].down);
    }

    #[test]
    fn a_lane_holds_at_most_its_share() {
        let moves: Vec<Move> = (0..5).map(|i| mv(2, 1, i, i + 1)).collect();
        let lanes = group(&moves, &[0, 1, 2, 3, 4], 2);
        assert_eq!(lanes.of_transfer, vec![0, 0, 1, 1, 2]);
        assert!(lanes
            .lanes
            .iter()
            .all(|l| (l.low, l.high, l.up, l.down) == (1, 2, false, true)));
    }
}
