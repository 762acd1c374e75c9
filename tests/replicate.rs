//! Replicated synthesis (`tacos synth --replicate`): one node's NPUs matched, every other
//! node's transfers their shifts. The node shift is checked against shifts worked out by
//! hand; every schedule is replayed by the independent checker (which routes each
//! transfer itself and refuses contention, a sender lacking its chunk, a reduction short
//! of a contribution) and by the simulator; and the schedules are checked to be what the
//! design says: every shift of a transfer by whole nodes is one too.

mod common;

use common::tacos;
use std::collections::HashSet;
use tacos::collective::{Collective, CollectiveKind};
use tacos::schedule::{check, Op, Schedule, Transfer};
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize, synthesize_streamed, NodeShift, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const GIB: u64 = 1 << 30;

fn spec(s: &str) -> Topology {
    parse_spec(s, &SpecDefaults::default()).unwrap()
}

fn replicated(seed: u64) -> SynthOptions {
    SynthOptions {
        replicate: true,
        ..SynthOptions::seeded(seed)
    }
}

fn shift_of(s: &str) -> Option<(usize, usize)> {
    NodeShift::find(&spec(s)).map(|shift| (shift.period, shift.nodes))
}

#[test]
fn the_node_shift_is_the_fewest_npus_that_map_the_topology_onto_itself() {
    // A ring turns by one NPU; a switch's members all look alike.
    assert_eq!(shift_of("ring:8"), Some((1, 8)));
    assert_eq!(shift_of("switch:8"), Some((1, 8)));
    // A 4-wide torus: a shift by fewer than a row moves some NPU of the row's end onto the
    // next row, whose wrap-around link it lacks; a whole row maps the torus onto itself.
    assert_eq!(shift_of("torus:4x6"), Some((4, 6)));
    // A 4-cube: adding 8 mod 16 flips the top bit, an automorphism; adding 1, 2 or 4
    // maps some link (0-1, 1-3, 3-7) to a pair two bits apart.
    assert_eq!(shift_of("hypercube:4"), Some((8, 2)));
    // A rail-optimized cluster of identical 8-GPU nodes shifts by a node.
    assert_eq!(
        shift_of("preset:dgx-h100,nodes=4,spine=2,oversub=2"),
        Some((8, 4))
    );
    // A mesh has no wrap-around links; a failed NPU is not shifted onto a failed one.
    assert_eq!(shift_of("mesh:4x4"), None);
    let failed = spec("ring:8").fail_npus(&[3]).unwrap();
    assert_eq!(NodeShift::find(&failed), None);
}

/// Every transfer of `schedule` shifted by one node, as a set of the transfers' fields.
fn shifted_by_a_node(
    schedule: &Schedule,
    shift: NodeShift,
) -> Vec<(usize, usize, usize, u64, u64, bool)> {
    let n = shift.period * shift.nodes;
    let per_node = shift.period * schedule.collective.chunks_per_npu;
    let chunks = per_node * shift.nodes;
    schedule
        .transfers
        .iter()
        .map(|t| {
            (
                (t.chunk() + per_node) % chunks,
                (t.src() + shift.period) % n,
                (t.dst() + shift.period) % n,
                t.start_ps,
                t.end_ps,
                t.op == Op::Reduce,
            )
        })
        .collect()
}

fn fields(t: &Transfer) -> (usize, usize, usize, u64, u64, bool) {
    (
        t.chunk(),
        t.src(),
        t.dst(),
        t.start_ps,
        t.end_ps,
        t.op == Op::Reduce,
    )
}

#[test]
fn replicated_schedules_pass_the_checker_and_are_their_own_shifts() {
    let cases = [
        "ring:8",
        "switch:8",
        "torus:4x6",
        "hypercube:4",
        "preset:dgx-h100,nodes=4,spine=2,oversub=2",
        "preset:dgx-a100,nodes=6",
    ];
    for name in cases {
        let topo = spec(name);
        let shift = NodeShift::find(&topo).unwrap();
        let n = topo.npus();
        for kind in [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ] {
            for k in [1, 3] {
                let c = Collective::over_all(&topo, kind, None, k, GIB).unwrap();
                let s = synthesize(&topo, &c, &replicated(7)).unwrap();
                let what = format!("{name} {kind} K={k}");
                let report = check(&s, &topo).unwrap_or_else(|e| panic!("{what}: {e}"));
                // Each of the nK chunks reaches (or is reduced from) the n - 1 other NPUs
                // once a phase.
                let phases = if kind == CollectiveKind::AllReduce {
                    2
                } else {
                    1
                };
                assert_eq!(report.transfers, phases * n * k * (n - 1), "{what}");
                let simulated = simulate_schedule(&topo, &s).unwrap().time_ps;
                assert!(simulated <= report.collective_time_ps, "{what}");
                let all: HashSet<_> = s.transfers.iter().map(fields).collect();
                for image in shifted_by_a_node(&s, shift) {
                    assert!(all.contains(&image), "{what}: {image:?} is missing");
                }
            }
        }
    }
}

#[test]
fn a_replicated_all_gather_streams_the_transfers_it_holds_and_a_seed_fixes_them() {
    let topo = spec("preset:dgx-h100,nodes=6,spine=2,oversub=2");
    let c = Collective::over_all(&topo, CollectiveKind::AllGather, None, 2, GIB).unwrap();
    let held = synthesize(&topo, &c, &replicated(3)).unwrap();
    assert_eq!(held, synthesize(&topo, &c, &replicated(3)).unwrap());
    let mut streamed = Vec::new();
    let made = synthesize_streamed(&topo, &c, &replicated(3), &mut |t| {
        streamed.push(t);
        Ok(())
    })
    .unwrap();
    assert_eq!(made.transfers, held.transfers.len() as u64);
    assert_eq!(made.collective_time_ps, held.collective_time_ps());
    // In start order, and the same transfers (the held schedule orders ties its own way).
    assert!(streamed.windows(2).all(|w| w[0].start_ps <= w[1].start_ps));
    let as_set = |ts: &[Transfer]| ts.iter().map(fields).collect::<HashSet<_>>();
    assert_eq!(as_set(&streamed), as_set(&held.transfers));
}

#[test]
fn what_cannot_be_replicated_is_refused_with_the_reason() {
    let ring = spec("ring:8");
    let broadcast =
        Collective::over_all(&ring, CollectiveKind::Broadcast, Some(0), 1, GIB).unwrap();
    let e = synthesize(&ring, &broadcast, &replicated(0)).unwrap_err();
    assert!(e.to_string().contains("broadcast"), "{e}");
    let mesh = spec("mesh:4x4");
    let all_gather = Collective::over_all(&mesh, CollectiveKind::AllGather, None, 1, GIB).unwrap();
    let e = synthesize(&mesh, &all_gather, &replicated(0)).unwrap_err();
    assert!(e.to_string().contains("no shift by whole nodes"), "{e}");
    // The command line says so before it searches, naming the flag.
    let (ok, _, err) = tacos(&["synth", "mesh:4x4", "--replicate"]);
    assert!(
        !ok && err.contains("--replicate") && err.contains("mesh:4x4"),
        "{err}"
    );
}

#[test]
fn the_command_line_reports_the_replication() {
    let (ok, out, err) = tacos(&[
        "synth",
        "preset:dgx-h100,nodes=4,spine=2,oversub=2",
        "-c",
        "allreduce",
        "--replicate",
        "-k",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["replicated"]["npus_per_node"], 8, "{v}");
    assert_eq!(v["replicated"]["nodes"], 4, "{v}");
    assert_eq!(v["transfers"], 2 * 32 * 31, "{v}");
}
