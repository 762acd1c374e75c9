//! The serial model in one pass over a transfer stream, for schedules too large to hold:
//! nothing is kept per transfer, only a time per (NPU, chunk) and a few per link.
//!
//! Why one pass gives the engine's answer. In a *timed* schedule (every transfer one hop,
//! a link or a run through switches, taking exactly that hop's time: what the synthesizer
//! writes) the engine serves every link in the schedule's order. A link between two NPUs
//! carries one flow, whose messages are issued in order and queue in that order; a link
//! through a switch keeps the planned (start) order. A message's flow predecessor crosses
//! the same links before it. So the engine starts a transfer once
//! - the arrivals of its chunk at its source that the schedule lands by its start have
//!   landed (its dependencies), and
//! - the transfer before it on each of its links has ended,
//!
//! whichever is later, and it ends its hop's time after. Both are known from transfers
//! earlier in the stream, which its format keeps in start order: the arrivals wait in
//! flight by their scheduled end (`InFlight`, as in the stream checker) and are folded
//! into the (NPU, chunk) table (`LandedTimes`) once the stream passes it.
//!
//! Where the argument does not hold (a transfer of several hops or of another duration,
//! two planned at one time on a link through a switch, whose order the engine leaves to
//! readiness, an in-switch transfer, which moves with its group) the replay says which
//! transfer, and the caller holds the schedule for the
//! engine instead. `tests/sim_replay.rs` compares the two on synthesized schedules and on
//! the same schedules with transfers delayed.

use super::engine::is_timed_hop;
use super::landed::LandedTimes;
use super::route::Router;
use super::workload::check_endpoints;
use super::SimResult;
use crate::budget::{Allowance, MemoryLimit};
use crate::collective::Collective;
use crate::error::Result;
use crate::schedule::in_flight::{InFlight, LOOKAHEAD};
use crate::schedule::stream::StreamReader;
use crate::schedule::{later, Transfer};
use crate::topology::Topology;
use crate::units::Picos;
use std::collections::VecDeque;
use std::io::BufRead;

/// What a replay came to.
#[derive(Debug)]
pub enum Replayed {
    /// The engine's result, without per-message timings (`SimResult::messages` is empty),
    /// and how many transfers the stream held.
    Simulated { result: SimResult, transfers: u64 },
    /// The stream is not one the replay answers for exactly: `transfer` (its index) is the
    /// first that shows it, and `why` says how. Simulate it held instead.
    NotReplayable { transfer: u64, why: String },
}

/// Simulates a stream with one message per link at a time (`Sharing::Serial`), reading it
/// once; the same figures `simulate_schedule` gives for the stream read whole.
pub fn replay_stream<R: BufRead>(stream: StreamReader<R>, topo: &Topology) -> Result<Replayed> {
    let header = stream.header().clone();
    let doing = format!(
        "simulating a {} stream over {} NPUs with K={}",
        header.collective.kind,
        header.collective.npus.len(),
        header.collective.chunks_per_npu
    );
    let limit = MemoryLimit::default();
    let estimate = super::memory::replay(&header.collective, topo);
    limit.admit(estimate, || doing.clone())?;
    let chunks = Collective::new(topo, header.collective)?.chunk_count();
    // The router takes its route trees from the room as it builds them.
    let room = Allowance::new(
        limit,
        estimate.saturating_sub(crate::schedule::memory::route_trees(topo)),
    );
    let mut replay = Replay::new(topo, header.chunk_bytes, chunks, doing, room);
    // Read a few transfers ahead, so that their times are fetched before they are read.
    let mut ahead: VecDeque<Transfer> = VecDeque::with_capacity(LOOKAHEAD + 1);
    let mut stream = stream.fuse();
    let mut played = 0;
    loop {
        while ahead.len() <= LOOKAHEAD {
            let Some(t) = stream.next() else { break };
            let t = t?;
            replay.prefetch(&t);
            ahead.push_back(t);
        }
        let Some(t) = ahead.pop_front() else { break };
        if let Err(why) = replay.step(played, &t)? {
            return Ok(Replayed::NotReplayable {
                transfer: played as u64,
                why,
            });
        }
        played += 1;
    }
    Ok(Replayed::Simulated {
        result: replay.finish(),
        transfers: played as u64,
    })
}

/// Why a transfer cannot be replayed, said of it.
type Verdict = std::result::Result<(), String>;

struct Replay<'a> {
    topo: &'a Topology,
    bytes: f64,
    chunks: usize,
    /// Per (NPU, chunk), at `npu * chunks + chunk`: the latest simulated end of the
    /// arrivals of the chunk there that the schedule has landed so far (0: none).
    landed: LandedTimes,
    /// What the replay is doing, for an error about its memory.
    doing: String,
    /// Arrivals not yet landed by the schedule's clock, by scheduled end: (slot in
    /// `landed`, simulated end).
    flying: InFlight<(usize, Picos)>,
    /// Per link: when its last message ends, as simulated.
    free_at: Vec<Picos>,
    /// Per link through a switch: the scheduled start of its last message.
    planned_at: Vec<Option<Picos>>,
    busy_ps: Vec<Picos>,
    link_bytes: Vec<f64>,
    router: Router<'a>,
    route: Vec<u32>,
    time_ps: Picos,
}

impl<'a> Replay<'a> {
    fn new(
        topo: &'a Topology,
        bytes: f64,
        chunks: usize,
        doing: String,
        room: Allowance,
    ) -> Replay<'a> {
        let links = topo.links().len();
        Replay {
            topo,
            bytes,
            chunks,
            landed: LandedTimes::new(topo.npus().saturating_mul(chunks)),
            doing,
            flying: InFlight::new(),
            free_at: vec![0; links],
            planned_at: vec![None; links],
            busy_ps: vec![0; links],
            link_bytes: vec![0.0; links],
            router: Router::new(topo, room),
            route: Vec::new(),
            time_ps: 0,
        }
    }

    /// Asks the cache for the time transfer `t` will read (none for endpoints `step`
    /// will refuse).
    fn prefetch(&self, t: &Transfer) {
        self.landed.prefetch(
            t.src()
                .saturating_mul(self.chunks)
                .saturating_add(t.chunk()),
        );
    }

    /// Plays transfer `i`; the inner error says why the replay cannot answer for it.
    fn step(&mut self, i: usize, t: &Transfer) -> Result<Verdict> {
        check_endpoints(self.topo, "transfer", i, t.src(), t.dst())?;
        if t.in_switch {
            return Ok(Err(
                "it is in-switch, and the replay does not move in-switch operations as one".into(),
            ));
        }
        if t.chunk() >= self.chunks {
            return Ok(Err(format!(
                "it names chunk {}; the collective has {}",
                t.chunk(),
                self.chunks
            )));
        }
        while let Some((_, (slot, simulated))) = self.flying.pop_by(t.start_ps) {
            if let Some(&(ahead, _)) = self.flying.ahead(LOOKAHEAD) {
                self.landed.prefetch(ahead);
            }
            let doing = &self.doing;
            self.landed.raise(slot, simulated, &|| doing.clone())?;
        }
        self.route.clear();
        if let Err(e) = self
            .router
            .route(t.src(), t.dst(), self.bytes, &mut self.route)
        {
            // Held, the schedule is checked against the links first, which says it better.
            return Ok(Err(e.to_string()));
        }
        let topo = self.topo;
        if !is_timed_hop(topo, &self.route, self.bytes, t.start_ps, t.end_ps) {
            return Ok(Err(format!(
                "it is not one hop taking exactly that hop's time ({} to {} ps from NPU {} to {})",
                t.start_ps,
                t.end_ps,
                t.src(),
                t.dst()
            )));
        }
        let took = t.end_ps - t.start_ps;
        let doing = &self.doing;
        self.landed.admit_duration(took, &|| doing.clone())?;
        let mut start = self.landed.get(t.src() * self.chunks + t.chunk());
        for &l in &self.route {
            let l = l as usize;
            start = start.max(self.free_at[l]);
            let link = topo.link(l);
            if topo.is_switch(link.src) || topo.is_switch(link.dst) {
                if self.planned_at[l] == Some(t.start_ps) {
                    return Ok(Err(format!(
                        "it is planned at {} ps on link {} -> {}, as the transfer before it there",
                        t.start_ps, link.src, link.dst
                    )));
                }
                self.planned_at[l] = Some(t.start_ps);
            }
        }
        let end = later(start, took, || format!("simulation: transfer {i}"))?;
        for &l in &self.route {
            let l = l as usize;
            self.free_at[l] = end;
            self.busy_ps[l] = later(self.busy_ps[l], took, || {
                format!("simulation: busy time of link {l}")
            })?;
            self.link_bytes[l] += self.bytes;
        }
        self.flying
            .push(t.end_ps, (t.dst() * self.chunks + t.chunk(), end));
        self.time_ps = self.time_ps.max(end);
        Ok(Ok(()))
    }

    fn finish(self) -> SimResult {
        SimResult {
            time_ps: self.time_ps,
            messages: Vec::new(),
            link_busy_ps: self.busy_ps,
            link_bytes: self.link_bytes,
        }
    }
}
