//! In-switch reduction (NVLS) in the checker and the simulator, on a star of 4 NPUs around
//! one switch (`switch:4`: each NPU a link up and one down of 50 GB/s and 0.25 us): a
//! chunk of 1 MB crosses a route (up, then down) in 0.5 + 20 = 20.5 us.
//!
//! The hand-worked All-Reduce: chunk c is summed into NPU c from the other three as one
//! in-switch sum in slot c, then multicast from NPU c to the other three in slot 4 + c.
//! Two operations cannot share a slot: a sum into c takes every uplink but c's, a
//! multicast from c takes c's uplink and every downlink but c's, so any two of them meet
//! on a link they do not share. Eight slots of 20.5 us: 164 us. Every link carries four
//! chunks (an uplink: its three partials and its one multicast; a downlink: its one sum
//! and three multicasts), busy 4 x 20.5 = 82 us, where plain copies and reductions would
//! carry six each.

use std::io::Write;
use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::schedule::stream::{StreamHeader, StreamReader, StreamWriter};
use tacos::schedule::{check, check_concurrent, check_stream, Network, Op, Schedule, Transfer};
use tacos::sim::{replay_stream, simulate_schedule, simulate_schedule_with, Replayed, Sharing};
use tacos::topology::{parse_spec, Link, SpecDefaults, Topology};
use tacos::units::Picos;

const CHUNK: f64 = 1e6;
/// One slot: a route's 0.5 us of latency and 1 MB at 50 GB/s.
const SLOT: Picos = 20_500_000;

fn star() -> Topology {
    parse_spec("switch:4", &SpecDefaults::default()).unwrap()
}

fn nvls_star() -> Topology {
    let t = star();
    let sw = t.npus();
    t.with_reducing(&[sw]).unwrap()
}

fn all_reduce_spec() -> CollectiveSpec {
    CollectiveSpec {
        kind: CollectiveKind::AllReduce,
        root: None,
        npus: vec![0, 1, 2, 3],
        chunks_per_npu: 1,
        size_bytes: 4_000_000,
    }
}

/// The hand-worked All-Reduce, its transfers at the slots `at(slot)` gives.
fn all_reduce_at(at: impl Fn(u64) -> (Picos, Picos), in_switch: bool) -> Schedule {
    let mut transfers = Vec::new();
    for c in 0..4usize {
        let others = (0..4).filter(move |&n| n != c);
        let (start, end) = at(c as u64);
        transfers.extend(
            others
                .clone()
                .map(|s| Transfer::new(c, s, c, start, end, Op::Reduce)),
        );
        let (start, end) = at(4 + c as u64);
        transfers.extend(others.map(|d| Transfer::new(c, c, d, start, end, Op::Copy)));
    }
    if in_switch {
        transfers = transfers.into_iter().map(Transfer::switched).collect();
    }
    Schedule::new("switch:4", all_reduce_spec(), CHUNK, transfers)
}

fn all_reduce(in_switch: bool) -> Schedule {
    all_reduce_at(|slot| (slot * SLOT, (slot + 1) * SLOT), in_switch)
}

fn find(s: &Schedule, chunk: usize, src: usize, dst: usize) -> usize {
    s.transfers
        .iter()
        .position(|t| (t.chunk(), t.src(), t.dst()) == (chunk, src, dst))
        .unwrap()
}

#[test]
fn the_in_switch_all_reduce_passes_on_its_hand_worked_times() {
    let s = all_reduce(true);
    let report = check(&s, &nvls_star()).unwrap();
    assert_eq!(report.collective_time_ps, 8 * SLOT);
    assert_eq!(report.transfers, 24);
}

#[test]
fn the_simulator_runs_the_in_switch_all_reduce_on_its_clock() {
    let (topo, s) = (nvls_star(), all_reduce(true));
    let run = simulate_schedule(&topo, &s).unwrap();
    assert_eq!(run.time_ps, 8 * SLOT);
    for (t, m) in s.transfers.iter().zip(&run.messages) {
        assert_eq!(m.end_ps, t.end_ps, "{t:?}");
    }
    for (l, link) in topo.links().iter().enumerate() {
        assert_eq!(run.link_busy_ps[l], 4 * SLOT, "{link:?}");
        assert_eq!(run.link_bytes[l], 4.0 * CHUNK, "{link:?}");
    }
}

#[test]
fn a_step_ordered_in_switch_all_reduce_is_timed_as_the_checker_accepts() {
    // Every sum at step 0 and every multicast at step 1, as a baseline orders them. The
    // simulator serves a link's queue by (time reached, message): the schedule's
    // transfers are sorted by sender, so the sums start in the order of their transfers
    // from NPU 0 (into NPUs 1, 2, 3), then the sum into 0, one a slot (each waited since
    // 0, longer than any multicast); each multicast is queued when its sum lands and runs
    // in that order: the hand-worked slots, sums and multicasts in the order 1, 2, 3, 0.
    let topo = nvls_star();
    let mut s = all_reduce_at(|slot| if slot < 4 { (0, 1) } else { (1, 2) }, true);
    let run = simulate_schedule(&topo, &s).unwrap();
    for (t, m) in s.transfers.iter_mut().zip(&run.messages) {
        t.end_ps = m.end_ps;
        t.start_ps = m.end_ps - SLOT;
    }
    let report = check(&s, &topo).unwrap();
    assert_eq!(report.collective_time_ps, 8 * SLOT);
    let mut timed: Vec<_> = s.transfers.iter().map(|t| format!("{t:?}")).collect();
    let rotated = |slot: u64| {
        let slot = slot / 4 * 4 + (slot + 3) % 4;
        (slot * SLOT, (slot + 1) * SLOT)
    };
    let mut hand: Vec<_> = all_reduce_at(rotated, true)
        .transfers
        .iter()
        .map(|t| format!("{t:?}"))
        .collect();
    timed.sort();
    hand.sort();
    assert_eq!(timed, hand);
}

#[test]
fn fair_sharing_moves_each_in_switch_operation_as_one_flow() {
    // All four sums start at once; each crosses three uplinks, each uplink carries three
    // sums: 50/3 GB/s each, 60 us after 0.5 us of latency. The multicasts likewise share
    // the downlinks three ways: 121 us.
    let run = simulate_schedule_with(&nvls_star(), &all_reduce(true), Sharing::Fair).unwrap();
    assert_eq!(run.time_ps, 121_000_000);
    let s = all_reduce(true);
    for (t, m) in s.transfers.iter().zip(&run.messages) {
        let expected = if t.op == Op::Reduce {
            60_500_000
        } else {
            121_000_000
        };
        assert_eq!(m.end_ps, expected, "{t:?}");
    }
}

#[test]
fn an_in_switch_transfer_needs_a_reducing_switch_on_its_route() {
    let s = all_reduce(true);
    let i = find(&s, 0, 1, 0);
    let e = check(&s, &star()).unwrap_err().to_string();
    assert!(
        e.contains(&format!("transfer {i} (chunk 0, NPU 1 -> 0")),
        "{e}"
    );
    assert!(
        e.contains("in-switch, but its route passes no reducing switch (switch"),
        "{e}"
    );
    assert!(e.contains("does not reduce"), "{e}");
    let e = simulate_schedule(&star(), &s).unwrap_err().to_string();
    assert!(
        e.contains(&format!("transfer {i} (chunk 0, NPU 1 -> 0)")),
        "{e}"
    );
    assert!(e.contains("passes no reducing switch"), "{e}");
    // Nor may it cross a link alone.
    let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let e = check(&s, &ring).unwrap_err().to_string();
    assert!(
        e.contains("in-switch, but its route passes no switch"),
        "{e}"
    );
}

#[test]
fn plain_transfers_of_the_same_times_contend_on_the_shared_link() {
    // The three reductions into NPU 0 at once all take the switch's link down to it.
    let s = all_reduce(false);
    let e = check(&s, &nvls_star()).unwrap_err().to_string();
    let (first, second) = (find(&s, 0, 1, 0), find(&s, 0, 2, 0));
    assert!(
        e.contains(&format!(
            "transfer {second} (chunk 0, NPU 2 -> 0, 0.000000-20.500000 us): starts while transfer {first} (chunk 0) still occupies the link until 20.500000 us"
        )),
        "{e}"
    );
    // One plain reduction among the in-switch ones is not of their sum.
    let mut mixed = all_reduce(true);
    let third = find(&mixed, 0, 3, 0);
    mixed.transfers[third].in_switch = false;
    let e = check(&mixed, &nvls_star()).unwrap_err().to_string();
    assert!(e.contains("still occupies the link"), "{e}");
}

#[test]
fn two_operations_on_one_link_at_once_contend() {
    // The multicast from NPU 0 moved into slot 1, beside the sum into NPU 1: both take
    // NPU 0's uplink, which neither shares with the other.
    let mut s = all_reduce(true);
    for t in s.transfers.iter_mut() {
        if t.op == Op::Copy && t.src() == 0 {
            (t.start_ps, t.end_ps) = (SLOT, 2 * SLOT);
        }
    }
    let s = Schedule::new("switch:4", s.collective, CHUNK, s.transfers);
    let e = check(&s, &nvls_star()).unwrap_err().to_string();
    assert!(
        e.contains("still occupies the link until 41.000000 us"),
        "{e}"
    );
}

/// A star of three NPUs whose downlink to NPU 2 has 0.5 us of latency, the rest 0.25.
fn uneven_star() -> Topology {
    let link = |src, dst, latency_us| Link {
        src,
        dst,
        bandwidth_gbps: 50.0,
        latency_us,
    };
    let mut links = Vec::new();
    for n in 0..3 {
        links.push(link(n, 3, 0.25));
        links.push(link(3, n, if n == 2 { 0.5 } else { 0.25 }));
    }
    Topology::with_switches("uneven", 3, vec!["nvs".into()], links)
        .unwrap()
        .with_reducing(&[3])
        .unwrap()
}

fn broadcast_spec() -> CollectiveSpec {
    CollectiveSpec {
        kind: CollectiveKind::Broadcast,
        root: Some(0),
        npus: vec![0, 1, 2],
        chunks_per_npu: 1,
        size_bytes: 1_000_000,
    }
}

#[test]
fn the_transfers_of_one_operation_end_together() {
    // A multicast from NPU 0: to NPU 1 in 20.5 us, to NPU 2 in 20.75 us, each its
    // route's time, but one operation cannot land twice.
    let to = |dst, end| Transfer::new(0, 0, dst, 0, end, Op::Copy).switched();
    let s = Schedule::new(
        "uneven",
        broadcast_spec(),
        CHUNK,
        vec![to(1, 20_500_000), to(2, 20_750_000)],
    );
    let e = check(&s, &uneven_star()).unwrap_err().to_string();
    assert!(
        e.contains("transfer 1 (chunk 0, NPU 0 -> 2, 0.000000-20.750000 us): is in the in-switch multicast from NPU 0 as transfer 0, which ends at 20.500000 us"),
        "{e}"
    );
    // The simulator moves it as one: both land after the slower route's time.
    let run = simulate_schedule(&uneven_star(), &s).unwrap();
    let ends: Vec<Picos> = run.messages.iter().map(|m| m.end_ps).collect();
    assert_eq!(ends, [20_750_000, 20_750_000]);
}

#[test]
fn an_in_switch_schedule_round_trips_through_a_stream_and_passes_its_checker() {
    let (topo, s) = (nvls_star(), all_reduce(true));
    let header = StreamHeader::new(
        s.topology.clone(),
        s.collective.clone(),
        s.chunk_bytes,
        Some(Network::of(&topo)),
    );
    let mut bytes = Vec::new();
    let out: &mut dyn Write = &mut bytes;
    let mut writer = StreamWriter::new(out, &header).unwrap();
    for t in &s.transfers {
        writer.push(t).unwrap();
    }
    writer.finish().unwrap();
    let read = || StreamReader::new(bytes.as_slice(), "in-switch.tt").unwrap();
    let back: Vec<Transfer> = read().map(Result::unwrap).collect();
    assert_eq!(back, s.transfers);
    let network = read().header().network.clone().unwrap();
    let recorded = network.topology("switch:4", "in-switch.tt").unwrap();
    assert_eq!(recorded, topo);
    assert_eq!(
        check_stream(read(), &recorded).unwrap(),
        check(&s, &topo).unwrap()
    );
    // The one-pass simulation leaves in-switch operations to the simulator.
    match replay_stream(read(), &recorded).unwrap() {
        Replayed::NotReplayable { transfer: 0, why } => assert!(why.contains("in-switch"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn concurrent_schedules_share_no_operation() {
    // A Broadcast from NPU 0 as one multicast: alone its three transfers share NPU 0's
    // uplink; two such schedules at once are two operations on it.
    let spec = CollectiveSpec {
        npus: vec![0, 1, 2, 3],
        ..broadcast_spec()
    };
    let to = |dst| Transfer::new(0, 0, dst, 0, SLOT, Op::Copy).switched();
    let s = Schedule::new("switch:4", spec, CHUNK, vec![to(1), to(2), to(3)]);
    let topo = nvls_star();
    assert_eq!(
        check_concurrent(std::slice::from_ref(&s), &topo).unwrap()[0].collective_time_ps,
        SLOT
    );
    let e = check_concurrent(&[s.clone(), s], &topo)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("schedule 1, transfer 0 (chunk 0, NPU 0 -> 1, 0.000000-20.500000 us): starts while transfer 0 of schedule 0"),
        "{e}"
    );
}

#[test]
fn members_may_not_share_a_link_past_the_reducing_switch() {
    // NPU 0 -> reducing switch 3 -> plain switch 4 -> NPUs 1 and 2: a multicast from 0
    // shares only NPU 0's uplink; both copies would cross 3 -> 4.
    let link = |src, dst| Link {
        src,
        dst,
        bandwidth_gbps: 50.0,
        latency_us: 0.25,
    };
    let mut links = Vec::new();
    for (a, b) in [(0, 3), (3, 4), (4, 1), (4, 2)] {
        links.extend([link(a, b), link(b, a)]);
    }
    let topo = Topology::with_switches("chain", 3, vec!["nvs".into(), "plain".into()], links)
        .unwrap()
        .with_reducing(&[3])
        .unwrap();
    let to = |dst| Transfer::new(0, 0, dst, 0, 20_750_000, Op::Copy).switched();
    let s = Schedule::new("chain", broadcast_spec(), CHUNK, vec![to(1), to(2)]);
    let e = check(&s, &topo).unwrap_err().to_string();
    assert!(e.contains("transfer 1 (chunk 0, NPU 0 -> 2, 0.000000-20.750000 us): starts while transfer 0 (chunk 0) still occupies the link"), "{e}");
    let e = simulate_schedule(&topo, &s).unwrap_err().to_string();
    assert!(
        e.contains("in-switch transfers 0 and 1 of one multicast from NPU 0 both cross link switch 'nvs' -> switch 'plain'"),
        "{e}"
    );
}
