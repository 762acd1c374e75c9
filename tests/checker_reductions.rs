//! The schedule checker on hand-built schedules: each case is worked out by hand, and the
//! checker must accept the correct ones and name what is wrong in the others.

use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::schedule::{check, Op, Schedule, Transfer};
use tacos::topology::{parse_spec, Link, NpuId, SpecDefaults, Topology};
use tacos::units::Picos;

/// 1 MB chunks on 50 GB/s, 0.5 us links: 0.5 us + 20 us.
const C: Picos = 20_500_000;

fn topo(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap()
}

/// A line 0 - 1 - 2.
fn line3() -> Topology {
    let link = |src, dst| Link {
        src,
        dst,
        bandwidth_gbps: 50.0,
        latency_us: 0.5,
    };
    Topology::new(
        "line",
        3,
        vec![link(0, 1), link(1, 0), link(1, 2), link(2, 1)],
    )
    .unwrap()
}

fn t(chunk: usize, src: NpuId, dst: NpuId, step: u64, op: Op) -> Transfer {
    Transfer::new(chunk, src, dst, step * C, (step + 1) * C, op)
}

/// A schedule of `kind` over `npus` with 1 MB chunks (size = chunks x 1 MB).
fn schedule(
    kind: CollectiveKind,
    npus: Vec<NpuId>,
    root: Option<NpuId>,
    transfers: Vec<Transfer>,
) -> Schedule {
    let p = npus.len() as u64;
    let size = match kind {
        CollectiveKind::Broadcast | CollectiveKind::Reduce => 1_000_000,
        _ => p * 1_000_000,
    };
    Schedule::new(
        "hand",
        CollectiveSpec {
            kind,
            root,
            npus,
            chunks_per_npu: 1,
            size_bytes: size,
        },
        1e6,
        transfers,
    )
}

fn rejected(s: &Schedule, topo: &Topology, expected: &str) {
    match check(s, topo) {
        Ok(_) => panic!("accepted; expected an error containing '{expected}'"),
        Err(e) => assert!(e.to_string().contains(expected), "{e}"),
    }
}

use CollectiveKind::*;
use Op::{Copy, Reduce as Sum};

#[test]
fn reductions_must_count_every_contribution_exactly_once() {
    let fc3 = topo("fc:3");
    let reduce = |ts| schedule(Reduce, vec![0, 1, 2], Some(0), ts);
    // 2 adds into 1, then 1's partial sum {1, 2} is added into root 0: {0, 1, 2}.
    let good = reduce(vec![t(0, 2, 1, 0, Sum), t(0, 1, 0, 1, Sum)]);
    assert_eq!(check(&good, &fc3).unwrap().collective_time_ps, 2 * C);
    // 2's contribution also sent straight to the root: counted twice.
    let twice = reduce(vec![
        t(0, 2, 1, 0, Sum),
        t(0, 2, 0, 0, Sum),
        t(0, 1, 0, 1, Sum),
    ]);
    rejected(&twice, &fc3, "would count a contribution to chunk 0 twice");
    // 2's contribution never arrives.
    let missing = reduce(vec![t(0, 1, 0, 0, Sum)]);
    rejected(
        &missing,
        &fc3,
        "NPU 0 lacks chunk 0 (or some of its contributions)",
    );
    // The partial sum {1, 2} copied over the root's own contribution: 0 is lost.
    let overwritten = reduce(vec![t(0, 2, 1, 0, Sum), t(0, 1, 0, 1, Copy)]);
    rejected(&overwritten, &fc3, "NPU 0 lacks chunk 0");
}

#[test]
fn relays_start_from_nothing_and_cannot_send_before_receiving() {
    // Reduce over NPUs 0 and 2 of a line: NPU 1 takes no part and only relays, so what
    // it sends on is exactly what reached it.
    let line = line3();
    let reduce = |ts| schedule(Reduce, vec![0, 2], Some(0), ts);
    let good = reduce(vec![t(0, 2, 1, 0, Sum), t(0, 1, 0, 1, Sum)]);
    check(&good, &line).unwrap();
    let early = reduce(vec![t(0, 1, 0, 0, Sum), t(0, 2, 1, 0, Sum)]);
    rejected(&early, &line, "NPU 1 does not hold chunk 0 when it sends");
}

#[test]
fn all_reduce_needs_the_complete_sum_everywhere() {
    let fc3 = topo("fc:3");
    let all_reduce = |ts| schedule(AllReduce, vec![0, 1, 2], None, ts);
    // Reduce-scatter straight to each chunk's owner, then each owner copies the sum out.
    let mut ts = Vec::new();
    for owner in 0..3 {
        for other in (0..3).filter(|&o| o != owner) {
            ts.push(t(owner, other, owner, 0, Sum));
            ts.push(t(owner, owner, other, 1, Copy));
        }
    }
    assert_eq!(
        check(&all_reduce(ts.clone()), &fc3)
            .unwrap()
            .collective_time_ps,
        2 * C
    );
    // NPU 2 gets chunk 0 from NPU 1 while NPU 1 holds only its own contribution, not the
    // sum (chunk 1's copy on that link moves one step later to make room).
    let partial: Vec<Transfer> = ts
        .iter()
        .map(|x| match (x.chunk(), x.src(), x.dst(), x.op) {
            (0, 0, 2, Copy) => t(0, 1, 2, 1, Copy),
            (1, 1, 2, Copy) => t(1, 1, 2, 2, Copy),
            _ => x.clone(),
        })
        .collect();
    rejected(&all_reduce(partial), &fc3, "NPU 2 lacks chunk 0");
}

#[test]
fn copying_collectives_need_each_chunk_where_it_belongs() {
    let fc3 = topo("fc:3");
    // All-to-All: chunk s*3+d goes from s to d, each over its own link.
    let a2a = |ts| schedule(AllToAll, vec![0, 1, 2], None, ts);
    let direct = |wrong: Option<(usize, NpuId)>| {
        let mut ts = Vec::new();
        for s in 0..3 {
            for d in (0..3).filter(|&d| d != s) {
                let chunk = s * 3 + d;
                match wrong {
                    Some((c, to)) if c == chunk => ts.push(t(chunk, s, to, 1, Copy)),
                    _ => ts.push(t(chunk, s, d, 0, Copy)),
                }
            }
        }
        ts
    };
    check(&a2a(direct(None)), &fc3).unwrap();
    // Chunk 1 (from 0 to 1) delivered to NPU 2 instead.
    rejected(&a2a(direct(Some((1, 2)))), &fc3, "NPU 1 lacks chunk 1");
    // Copying collectives have no reductions.
    let bcast = |ts| schedule(Broadcast, vec![0, 1, 2], Some(0), ts);
    rejected(
        &bcast(vec![t(0, 0, 1, 0, Sum), t(0, 0, 2, 0, Copy)]),
        &fc3,
        "broadcast copies chunks; it has no reductions",
    );
    // A sender must hold the chunk when it starts.
    rejected(
        &bcast(vec![t(0, 1, 2, 0, Copy), t(0, 0, 1, 0, Copy)]),
        &fc3,
        "NPU 1 does not hold chunk 0 when it sends",
    );
    // Gather: everything must end at the root, not merely move.
    let gather = |ts| schedule(Gather, vec![0, 1, 2], Some(0), ts);
    check(
        &gather(vec![t(1, 1, 0, 0, Copy), t(2, 2, 0, 0, Copy)]),
        &fc3,
    )
    .unwrap();
    rejected(
        &gather(vec![t(1, 1, 0, 0, Copy), t(2, 2, 1, 0, Copy)]),
        &fc3,
        "NPU 0 lacks chunk 2",
    );
}

#[test]
fn links_carry_one_chunk_at_a_time_for_exactly_their_cost() {
    let fc3 = topo("fc:3");
    let gather = |ts| schedule(Gather, vec![0, 1, 2], Some(0), ts);
    // Chunk 2 relayed through NPU 1 on the link 1 -> 0 that chunk 1 still occupies.
    let clash = Transfer::new(2, 1, 0, C / 2, C / 2 + C, Copy);
    rejected(
        &gather(vec![t(1, 1, 0, 0, Copy), t(2, 2, 1, 0, Copy), clash]),
        &fc3,
        "still occupies the link",
    );
    let too_fast = Transfer::new(1, 1, 0, 0, C - 1, Copy);
    rejected(
        &gather(vec![too_fast, t(2, 2, 0, 0, Copy)]),
        &fc3,
        "but the link needs",
    );
    rejected(
        &schedule(Gather, vec![0, 2], Some(0), vec![t(1, 2, 0, 0, Copy)]),
        &line3(),
        "there is no link from NPU 2 to NPU 0",
    );
}
