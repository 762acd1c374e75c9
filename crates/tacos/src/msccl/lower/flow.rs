//! The data flow of a schedule, rank by rank: which value of a chunk each transfer sends,
//! which it creates, and who reads each value.
//!
//! Transfers are replayed in time order, arrivals before departures at equal times (as
//! the schedule checker does). Every (rank, chunk) goes through versions: its initial
//! contribution, then one per arrival (a copy replaces the value, a reduction adds to the
//! previous one, which it reads). A departure reads the current version. For copying
//! collectives a chunk arriving where it already is carries nothing new and is dropped.

use crate::collective::CollectiveSpec;
use crate::error::{Error, Result};
use crate::msccl::Layout;
use crate::schedule::{Op, Schedule};
use crate::topology::NpuId;
use crate::units::{ps_to_us, Picos};

pub(super) type VersionId = usize;
const NONE: usize = usize::MAX;

pub(super) struct Version {
    pub rank: usize,
    pub chunk: usize,
    /// The arrival that made it; None for a rank's initial contribution.
    pub producer: Option<usize>,
    /// The version a reducing arrival added to.
    pub base: Option<VersionId>,
    /// Who reads it: departures that send it, reducing arrivals that add to it, and the
    /// rank's result if it is one.
    pub readers: u32,
    /// The first departure that sends it.
    pub first_departure: Option<usize>,
}

/// A transfer in ranks, with its place in the replay.
pub(super) struct Move {
    pub chunk: usize,
    pub src: usize,
    pub dst: usize,
    pub op: Op,
    pub start_ps: Picos,
    pub end_ps: Picos,
    /// Positions of its departure and arrival in the replay order.
    pub depart_seq: usize,
    pub arrive_seq: usize,
    pub dropped: bool,
    /// The version it sends and the one it creates.
    pub sends: VersionId,
    pub creates: VersionId,
}

pub(super) struct Flow {
    pub moves: Vec<Move>,
    pub versions: Vec<Version>,
    /// (rank, chunk, version) that each output slot must end with.
    pub finals: Vec<(usize, usize, VersionId)>,
    /// Per arrival: the departure it can fuse with (the chunk passes straight through).
    pub straight_through: Vec<Option<usize>>,
    /// Events in replay order: (move, is departure).
    pub events: Vec<(usize, bool)>,
}

impl Flow {
    pub fn new(schedule: &Schedule, layout: &Layout) -> Result<Flow> {
        let spec = &schedule.collective;
        let rank_of = rank_map(spec);
        let ranks = spec.npus.len();
        let chunks = layout.chunks();
        let mut moves = Vec::with_capacity(schedule.transfers.len());
        for (i, t) in schedule.transfers.iter().enumerate() {
            let rank = |npu: NpuId| {
                rank_of.get(npu).copied().flatten().ok_or_else(|| {
                    Error::msccl_at(i, format!(
                        "transfer {i} (chunk {}, NPU {} -> {}) goes through NPU {npu}, which is not one of the collective's NPUs; an MSCCL program has GPUs only for the collective's ranks",
                        t.chunk(), t.src(), t.dst()
                    ))
                })
            };
            if t.chunk() >= chunks {
                return Err(Error::msccl_at(
                    i,
                    format!(
                        "transfer {i} moves chunk {}, but the collective has chunks 0..{}",
                        t.chunk(),
                        chunks - 1
                    ),
                ));
            }
            let (src, dst) = (rank(t.src())?, rank(t.dst())?);
            if src == dst {
                return Err(Error::msccl_at(
                    i,
                    format!("transfer {i} goes from NPU {} to itself", t.src()),
                ));
            }
            moves.push(Move {
                chunk: t.chunk(),
                src,
                dst,
                op: t.op,
                start_ps: t.start_ps,
                end_ps: t.end_ps,
                depart_seq: 0,
                arrive_seq: 0,
                dropped: false,
                sends: NONE,
                creates: NONE,
            });
        }
        let mut events: Vec<(Picos, bool, usize)> = moves
            .iter()
            .enumerate()
            .flat_map(|(i, m)| [(m.start_ps, true, i), (m.end_ps, false, i)])
            .collect();
        events.sort_unstable();
        let events: Vec<(usize, bool)> = events.into_iter().map(|(_, d, i)| (i, d)).collect();
        for (seq, &(i, departs)) in events.iter().enumerate() {
            if departs {
                moves[i].depart_seq = seq;
            } else {
                moves[i].arrive_seq = seq;
            }
        }
        let mut flow = Flow {
            moves,
            versions: Vec::new(),
            finals: Vec::new(),
            straight_through: Vec::new(),
            events,
        };
        flow.replay(layout, ranks)?;
        flow.find_straight_through(ranks);
        Ok(flow)
    }

    fn replay(&mut self, layout: &Layout, ranks: usize) -> Result<()> {
        let chunks = layout.chunks();
        let mut current = vec![NONE; ranks * chunks];
        // Every read in replay order: the version and, for a departure, the move.
        let mut reads: Vec<(VersionId, Option<usize>)> = Vec::with_capacity(self.moves.len());
        for rank in 0..ranks {
            for chunk in 0..chunks {
                if layout.input_slot(rank, chunk).is_some() {
                    current[rank * chunks + chunk] = self.versions.len();
                    self.versions.push(Version {
                        rank,
                        chunk,
                        producer: None,
                        base: None,
                        readers: 0,
                        first_departure: None,
                    });
                }
            }
        }
        for e in 0..self.events.len() {
            let (i, departs) = self.events[e];
            let m = &self.moves[i];
            let (chunk, src, dst) = (m.chunk, m.src, m.dst);
            if departs {
                let v = current[src * chunks + chunk];
                if v == NONE {
                    return Err(Error::msccl_at(i, format!(
                        "transfer {i} sends chunk {chunk} from rank {src} at {:.6} us, before the rank holds it",
                        ps_to_us(m.start_ps)
                    )));
                }
                reads.push((v, Some(i)));
                self.moves[i].sends = v;
                continue;
            }
            let here = current[dst * chunks + chunk];
            if m.op == Op::Copy && !layout.combining() && here != NONE {
                self.moves[i].dropped = true;
                continue;
            }
            let base = (m.op == Op::Reduce && here != NONE).then_some(here);
            let v = self.versions.len();
            if let Some(b) = base {
                reads.push((b, None));
            }
            self.versions.push(Version {
                rank: dst,
                chunk,
                producer: Some(i),
                base,
                readers: 0,
                first_departure: None,
            });
            self.moves[i].creates = v;
            current[dst * chunks + chunk] = v;
        }
        for rank in 0..ranks {
            for chunk in 0..chunks {
                if layout.output_slot(rank, chunk).is_none() {
                    continue;
                }
                let v = current[rank * chunks + chunk];
                if v == NONE {
                    return Err(Error::msccl(format!(
                        "the schedule leaves rank {rank} without chunk {chunk}, which it must hold at the end"
                    )));
                }
                reads.push((v, None));
                self.finals.push((rank, chunk, v));
            }
        }
        for (v, departure) in reads {
            // A dropped arrival's departure read nothing that matters.
            if departure.is_some_and(|i| self.moves[i].dropped) {
                continue;
            }
            let version = &mut self.versions[v];
            version.readers += 1;
            if version.first_departure.is_none() {
                version.first_departure = departure;
            }
        }
        Ok(())
    }

    /// An arrival fuses with the first departure of the value it created that leaves the
    /// moment it arrives, if it is the last arrival of that moment on its link (a fused
    /// step runs with the departures, after every arrival of its moment, and must not
    /// overtake a message behind it on its connection).
    fn find_straight_through(&mut self, ranks: usize) {
        // Whether each arrival is the last of its moment on its link: walking the replay
        // backwards, the first arrival met per (link, moment).
        let mut last_of_moment = vec![false; self.moves.len()];
        let mut moment_seen: Vec<Option<Picos>> = vec![None; ranks * ranks];
        for &(i, departs) in self.events.iter().rev() {
            let m = &self.moves[i];
            if departs || m.dropped {
                continue;
            }
            let seen = &mut moment_seen[m.src * ranks + m.dst];
            if *seen != Some(m.end_ps) {
                *seen = Some(m.end_ps);
                last_of_moment[i] = true;
            }
        }
        self.straight_through = vec![None; self.moves.len()];
        for (a, m) in self.moves.iter().enumerate() {
            if m.dropped || !last_of_moment[a] {
                continue;
            }
            // Departures of a value leave in replay order, none before it arrives.
            self.straight_through[a] = self.versions[m.creates]
                .first_departure
                .filter(|&d| self.moves[d].start_ps == m.end_ps);
        }
    }

    /// Whether version `v` must be stored, given the departure (if any) fused with the
    /// arrival that creates it: it must unless that departure is its only reader.
    pub fn must_store(&self, v: VersionId, fused: Option<usize>) -> bool {
        let version = &self.versions[v];
        !(fused.is_some() && version.readers == 1 && version.first_departure == fused)
    }
}

/// Rank of each NPU id, None for NPUs outside the collective.
pub(crate) fn rank_map(spec: &CollectiveSpec) -> Vec<Option<usize>> {
    let n = spec.npus.iter().max().map_or(0, |&m| m + 1);
    let mut map = vec![None; n];
    for (r, &npu) in spec.npus.iter().enumerate() {
        map[npu] = Some(r);
    }
    map
}
