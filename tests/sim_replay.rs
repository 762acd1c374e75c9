//! The one-pass replay of a transfer stream (`sim::replay_stream`) against the engine
//! running the same schedule held: the same collective time and link loads, on
//! synthesized schedules of every kind (meshes, random graphs, switched fabrics), on the
//! same schedules with transfers delayed (so the simulation runs ahead of the schedule's
//! clock and links see contention), and on every prefix cut of them (a prefix's time is
//! the latest end among its transfers, which later transfers cannot change in either).

mod common;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::stream::{StreamHeader, StreamReader, StreamWriter};
use tacos::schedule::Schedule;
use tacos::sim::{replay_stream, simulate_schedule, Replayed, SimResult};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::Error;

fn topology(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The first `n` transfers of `schedule` written as a stream and replayed.
fn replay(topo: &Topology, schedule: &Schedule, n: usize) -> Replayed {
    let header = StreamHeader::new(
        schedule.topology.clone(),
        schedule.collective.clone(),
        schedule.chunk_bytes,
        None,
    );
    let mut writer = StreamWriter::new(Vec::new(), &header).unwrap();
    for t in &schedule.transfers[..n] {
        writer.push(t).unwrap();
    }
    let (bytes, _) = writer.finish().unwrap();
    replay_stream(StreamReader::new(&bytes[..], "replayed").unwrap(), topo).unwrap()
}

fn replayed(topo: &Topology, schedule: &Schedule, n: usize) -> SimResult {
    match replay(topo, schedule, n) {
        Replayed::Simulated { result, transfers } => {
            assert_eq!(transfers, n as u64);
            result
        }
        Replayed::NotReplayable { transfer, why } => {
            panic!("{}: transfer {transfer} not replayed: {why}", topo.name())
        }
    }
}

/// Replays `schedule` whole and at `cuts` prefix lengths and compares each with the engine.
fn same_as_engine(topo: &Topology, schedule: &Schedule, cuts: &[usize]) {
    let held = simulate_schedule(topo, schedule).unwrap();
    let whole = replayed(topo, schedule, schedule.transfers.len());
    assert_eq!(whole.time_ps, held.time_ps, "{}", topo.name());
    assert_eq!(whole.link_busy_ps, held.link_busy_ps, "{}", topo.name());
    assert_eq!(whole.link_bytes, held.link_bytes, "{}", topo.name());
    for &n in cuts {
        let n = n % (schedule.transfers.len() + 1);
        let latest = held.messages[..n]
            .iter()
            .map(|m| m.end_ps)
            .max()
            .unwrap_or(0);
        assert_eq!(
            replayed(topo, schedule, n).time_ps,
            latest,
            "{}: the first {n} transfers",
            topo.name()
        );
    }
}

/// `schedule` with a random third of its transfers delayed by up to `most` ps (each
/// keeping its duration), then put back in start order (ties in the order they had).
fn delayed(schedule: &Schedule, seed: u64, most: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = schedule.clone();
    for t in &mut out.transfers {
        if rng.random_range(0..3) == 0 {
            let d = rng.random_range(1..=most.max(1));
            t.start_ps += d;
            t.end_ps += d;
        }
    }
    out.transfers.sort_by_key(|t| t.start_ps);
    out
}

const BUILDERS: &[&str] = &[
    "ring:5",
    "mesh:3x3",
    "torus:3x3",
    "hypercube:3",
    "switch:6,d=2",
    "switch:5",
    "dragonfly:3x3,bw=400:200",
    "rfs:2x2x3,bw=200:100:50",
    "multi:R3xL3,bw=100:25",
    "mesh:3x3,lat=0.1:2",
    "preset:dgx1",
    "preset:dgx-a100,nodes=2",
    "star:6,bw=50,lat=0.5",
];

fn schedules(topo: &Topology, k: usize, seed: u64) -> Vec<Schedule> {
    let mut out = Vec::new();
    for kind in CollectiveKind::ALL {
        let root = kind.has_root().then_some(topo.npus() - 1);
        let c = Collective::over_all(topo, kind, root, k, 3 << 20).unwrap();
        match synthesize(topo, &c, &SynthOptions::seeded(seed)) {
            Ok(s) => out.push(s),
            Err(Error::Synthesis(m)) if m.contains("not synthesized yet") => {}
            Err(e) => panic!("{} {kind}: {e}", topo.name()),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_replay_simulates_as_the_engine(
        seed in any::<u64>(), which in 0usize..16, npus in 3usize..9, extra in 0usize..10,
        k in 1usize..3, cuts in proptest::collection::vec(any::<usize>(), 4),
    ) {
        let topo = match which {
            w if w < BUILDERS.len() => topology(BUILDERS[w]),
            13 | 14 => common::random_topology(seed, npus, extra, &[12.5, 50.0, 100.0], &[0.0, 0.5, 2.0]),
            _ => common::random_fabric(seed, npus, 2, extra),
        };
        for schedule in schedules(&topo, k, seed) {
            same_as_engine(&topo, &schedule, &cuts);
            let span = schedule.collective_time_ps().max(1);
            same_as_engine(&topo, &delayed(&schedule, seed, span / 4), &cuts);
        }
    }
}

#[test]
fn a_delayed_schedule_simulates_ahead_of_its_clock() {
    // Not a vacuous comparison: with a third of the transfers late, the schedule's own
    // clock ends later than the simulation, which starts each as soon as it can.
    let topo = topology("mesh:4x4");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
    let schedule = synthesize(&topo, &c, &SynthOptions::seeded(3)).unwrap();
    let late = delayed(&schedule, 3, schedule.collective_time_ps());
    let simulated = replayed(&topo, &late, late.transfers.len()).time_ps;
    assert!(simulated < late.collective_time_ps());
    assert!(simulated >= schedule.collective_time_ps() / 2);
    same_as_engine(&topo, &late, &[1, 100, 500]);
}

#[test]
fn a_schedule_timed_in_steps_is_left_to_the_engine() {
    let topo = topology("ring:6");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
    // A baseline's times are steps, an order only: not the links' times.
    let ring = Baseline::Ring.schedule(&topo, c.spec()).unwrap();
    let Replayed::NotReplayable { transfer: 0, why } = replay(&topo, &ring, ring.transfers.len())
    else {
        panic!("a baseline's unit steps replayed");
    };
    assert!(why.contains("not one hop taking exactly"), "{why}");
}

#[test]
fn two_transfers_planned_at_once_through_a_switch_are_left_to_the_engine() {
    // Two transfers into NPU 2's switch port at the same planned time: the engine starts
    // whichever is ready first; the replay, which keeps the stream's order, declines.
    let topo = topology("switch:3");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 1, 3 << 20).unwrap();
    let mut schedule = synthesize(&topo, &c, &SynthOptions::seeded(0)).unwrap();
    let into_2: Vec<usize> = (0..schedule.transfers.len())
        .filter(|&i| schedule.transfers[i].dst() == 2)
        .collect();
    let (a, b) = (into_2[0], into_2[1]);
    let (start, end) = (schedule.transfers[a].start_ps, schedule.transfers[a].end_ps);
    schedule.transfers[b].start_ps = start;
    schedule.transfers[b].end_ps = end;
    schedule.transfers.sort_by_key(|t| t.start_ps);
    let Replayed::NotReplayable { why, .. } = replay(&topo, &schedule, schedule.transfers.len())
    else {
        panic!("a tie on a switch port replayed");
    };
    assert!(why.contains("as the transfer before it there"), "{why}");
}
