//! The schedule checker follows time, not the order transfers are listed in: it sweeps
//! links in start order and lands arrivals in end order, so a schedule listed backwards, or
//! one whose transfers end in another order than they start, is judged as the same
//! algorithm. Each case is worked out by hand.

use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::schedule::{check, check_concurrent, Op, Schedule, Transfer};
use tacos::topology::{parse_spec, Link, NpuId, SpecDefaults, Topology};
use tacos::units::Picos;

/// 1 MB over a 50 GB/s, 0.5 us link: 0.5 us + 20 us.
const FAST: Picos = 20_500_000;
/// 1 MB over a 10 GB/s, 0.5 us link: 0.5 us + 100 us.
const SLOW: Picos = 100_500_000;

fn copy(chunk: usize, src: NpuId, dst: NpuId, start_ps: Picos, length: Picos) -> Transfer {
    Transfer::new(chunk, src, dst, start_ps, start_ps + length, Op::Copy)
}

fn all_gather(npus: usize, transfers: Vec<Transfer>) -> Schedule {
    let spec = CollectiveSpec {
        kind: CollectiveKind::AllGather,
        root: None,
        npus: (0..npus).collect(),
        chunks_per_npu: 1,
        size_bytes: npus as u64 * 1_000_000,
    };
    Schedule::new("hand", spec, 1e6, transfers)
}

/// All-Gather by hand on the 4-NPU unidirectional ring: at step s, NPU i forwards chunk
/// (i - s) mod 4 to NPU i+1.
fn ring_all_gather() -> Schedule {
    let transfers = (0..3)
        .flat_map(|s| {
            (0..4).map(move |i| copy((i + 4 - s) % 4, i, (i + 1) % 4, s as u64 * FAST, FAST))
        })
        .collect();
    all_gather(4, transfers)
}

fn ring() -> Topology {
    parse_spec("uniring:4", &SpecDefaults::default()).unwrap()
}

#[test]
fn a_schedule_listed_backwards_is_the_same_algorithm() {
    let mut s = ring_all_gather();
    s.transfers.reverse();
    assert_eq!(check(&s, &ring()).unwrap().collective_time_ps, 3 * FAST);

    // NPU 1 forwarding chunk 0 one step early (its step-1 send moved to step 0) sends what
    // it does not hold yet, and shares the link 1 -> 2 with chunk 1's send.
    let early = s
        .transfers
        .iter()
        .position(|t| (t.chunk(), t.src()) == (0, 1))
        .unwrap();
    s.transfers[early].start_ps -= FAST;
    s.transfers[early].end_ps -= FAST;
    let e = check(&s, &ring()).unwrap_err().to_string();
    assert!(e.contains("still occupies the link"), "{e}");
    // Without the overlap (chunk 1 sent later), the early send itself is caught.
    let later = s
        .transfers
        .iter()
        .position(|t| (t.chunk(), t.src()) == (1, 1))
        .unwrap();
    s.transfers.remove(later);
    let e = check(&s, &ring()).unwrap_err().to_string();
    assert!(e.contains("does not hold chunk 0 when it sends"), "{e}");
}

/// A line 0 - 1 - 2 whose link pair 0 - 1 carries 1 MB in `SLOW`, 1 - 2 in `FAST`.
fn slow_fast_line() -> Topology {
    let link = |src, dst, bandwidth_gbps| Link {
        src,
        dst,
        bandwidth_gbps,
        latency_us: 0.5,
    };
    Topology::new(
        "slow-fast",
        3,
        vec![
            link(0, 1, 10.0),
            link(1, 0, 10.0),
            link(1, 2, 50.0),
            link(2, 1, 50.0),
        ],
    )
    .unwrap()
}

/// All-Gather on the slow-fast line: NPU 1 forwards chunk 0 the moment it arrives (at
/// SLOW) and chunk 2 once the link to NPU 0 is free (SLOW again, after chunk 1). Chunk 2's
/// transfer in ends (FAST) before chunk 0's, which started with it, so ends come in another
/// order than starts.
fn slow_fast_all_gather(forward_at: Picos) -> Schedule {
    all_gather(
        3,
        vec![
            copy(1, 1, 0, 0, SLOW),
            copy(1, 1, 2, 0, FAST),
            copy(0, 0, 1, 0, SLOW),
            copy(2, 2, 1, 0, FAST),
            copy(0, 1, 2, forward_at, FAST),
            copy(2, 1, 0, SLOW, SLOW),
        ],
    )
}

#[test]
fn arrivals_land_in_time_order_before_departures_at_the_same_time() {
    let line = slow_fast_line();
    let report = check(&slow_fast_all_gather(SLOW), &line).unwrap();
    assert_eq!(report.collective_time_ps, 2 * SLOW);
    // One picosecond before chunk 0 has arrived at NPU 1, it cannot be forwarded.
    let e = check(&slow_fast_all_gather(SLOW - 1), &line)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("NPU 1 does not hold chunk 0 when it sends"),
        "{e}"
    );
}

#[test]
fn schedules_run_together_may_not_share_a_link_at_once_in_any_order() {
    let first = ring_all_gather();
    // The same algorithm again, from when the first ends: no link is shared at once.
    let mut second = ring_all_gather();
    second.transfers.iter_mut().for_each(|t| {
        t.start_ps += 3 * FAST;
        t.end_ps += 3 * FAST;
    });
    second.transfers.reverse();
    let reports = check_concurrent(&[second.clone(), first.clone()], &ring()).unwrap();
    assert_eq!(reports[0].collective_time_ps, 6 * FAST);
    // One picosecond earlier, its first sends start while the first's last still run.
    second.transfers.iter_mut().for_each(|t| {
        t.start_ps -= 1;
        t.end_ps -= 1;
    });
    let e = check_concurrent(&[second, first], &ring())
        .unwrap_err()
        .to_string();
    assert!(e.contains("still occupies the link"), "{e}");
}

/// A Reduce-Scatter over fc:3 with 1 MB chunks (each link carries one in `FAST`).
fn reduce_scatter(transfers: Vec<Transfer>) -> Schedule {
    let spec = CollectiveSpec {
        kind: CollectiveKind::ReduceScatter,
        root: None,
        npus: vec![0, 1, 2],
        chunks_per_npu: 1,
        size_bytes: 3_000_000,
    };
    Schedule::new("hand", spec, 1e6, transfers)
}

fn sum(chunk: usize, src: NpuId, dst: NpuId, step: u64) -> Transfer {
    let mut t = copy(chunk, src, dst, step * FAST, FAST);
    t.op = Op::Reduce;
    t
}

#[test]
fn combining_collectives_report_the_earliest_failure_whatever_its_chunk() {
    let fc3 = parse_spec("fc:3", &SpecDefaults::default()).unwrap();
    // Every chunk summed straight into its owner: 3 x 2 transfers in one step.
    let direct: Vec<Transfer> = (0..3)
        .flat_map(|owner| {
            (0..3)
                .filter(move |&o| o != owner)
                .map(move |o| sum(owner, o, owner, 0))
        })
        .collect();
    assert_eq!(
        check(&reduce_scatter(direct.clone()), &fc3)
            .unwrap()
            .collective_time_ps,
        FAST
    );
    // Chunk 0 is summed along 2 -> 1 -> 0 instead (steps 1 and 2), and NPU 1's partial sum
    // {1, 2} is added into NPU 0 again at step 3: a failure at 4 FAST. Chunk 2 gets NPU 0's
    // contribution at step 0 and again at step 1: a failure at 2 FAST, the earlier one,
    // though its chunk comes later.
    let mut ts: Vec<Transfer> = direct
        .iter()
        .filter(|t| (t.chunk(), t.src()) != (0, 2) && (t.chunk(), t.src()) != (0, 1))
        .cloned()
        .collect();
    ts.extend([sum(0, 2, 1, 1), sum(0, 1, 0, 2), sum(0, 1, 0, 3)]);
    ts.push(sum(2, 0, 2, 1));
    let e = check(&reduce_scatter(ts.clone()), &fc3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("NPU 2 would count a contribution to chunk 2 twice"),
        "{e}"
    );
    // Without chunk 2's second sum, chunk 0's at step 3 (1's and 2's again) is the failure.
    ts.pop();
    let e = check(&reduce_scatter(ts.clone()), &fc3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("NPU 0 would count a contribution to chunk 0 twice"),
        "{e}"
    );
    // A chunk lacking a contribution at the end is reported only when no transfer fails:
    // with chunk 1's sum from NPU 0 dropped, the failure in chunk 0 still comes first.
    let lacking = ts
        .iter()
        .position(|t| (t.chunk(), t.src()) == (1, 0))
        .unwrap();
    ts.remove(lacking);
    let e = check(&reduce_scatter(ts.clone()), &fc3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("chunk 0 twice"), "{e}");
    ts.pop();
    let e = check(&reduce_scatter(ts), &fc3).unwrap_err().to_string();
    assert!(
        e.contains("at the end, NPU 1 lacks chunk 1 (or some of its contributions)"),
        "{e}"
    );
}

#[test]
fn a_sum_missing_any_one_of_many_contributions_is_caught() {
    // Reduce to NPU 0 over fc:P, every other NPU adding its contribution straight into the
    // root at once; with one left out, the root lacks it, whichever bit word it is in.
    for p in [64usize, 70] {
        let fc = parse_spec(&format!("fc:{p}"), &SpecDefaults::default()).unwrap();
        let reduce = |left_out: Option<NpuId>| {
            let spec = CollectiveSpec {
                kind: CollectiveKind::Reduce,
                root: Some(0),
                npus: (0..p).collect(),
                chunks_per_npu: 1,
                size_bytes: 1_000_000,
            };
            let transfers = (1..p)
                .filter(|&u| Some(u) != left_out)
                .map(|u| sum(0, u, 0, 0))
                .collect();
            Schedule::new("hand", spec, 1e6, transfers)
        };
        check(&reduce(None), &fc).unwrap();
        for left_out in [1, 63, p - 1] {
            let e = check(&reduce(Some(left_out)), &fc).unwrap_err().to_string();
            assert!(
                e.contains("NPU 0 lacks chunk 0"),
                "P = {p}, without {left_out}: {e}"
            );
        }
    }
}
