//! The schedule checker on a hand-written algorithm and on mutations of it.

use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::schedule::{check, Op, Schedule, Transfer};
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::alpha_beta_ps;

const CHUNK: f64 = 1e6;

fn ring() -> Topology {
    parse_spec("uniring:4", &SpecDefaults::default()).unwrap()
}

/// Ring All-Gather by hand on a 4-NPU unidirectional ring: at step s, NPU i forwards
/// chunk (i - s) mod 4 to NPU i+1.
fn ring_all_gather() -> Schedule {
    let step = alpha_beta_ps(0.5, 50.0, CHUNK);
    let mut transfers = Vec::new();
    for s in 0..3u64 {
        for i in 0..4usize {
            transfers.push(Transfer::new(
                (i + 4 - s as usize) % 4,
                i,
                (i + 1) % 4,
                s * step,
                (s + 1) * step,
                Op::Copy,
            ));
        }
    }
    let spec = CollectiveSpec {
        kind: CollectiveKind::AllGather,
        root: None,
        npus: vec![0, 1, 2, 3],
        chunks_per_npu: 1,
        size_bytes: 4_000_000,
    };
    Schedule::new("uniring:4", spec, CHUNK, transfers)
}

fn rejected(s: &Schedule) -> String {
    check(s, &ring()).unwrap_err().to_string()
}

fn find(s: &Schedule, chunk: usize, src: usize) -> usize {
    s.transfers
        .iter()
        .position(|t| t.chunk() == chunk && t.src() == src)
        .unwrap()
}

#[test]
fn the_hand_written_ring_passes() {
    let s = ring_all_gather();
    let report = check(&s, &ring()).unwrap();
    assert_eq!(
        report.collective_time_ps,
        3 * alpha_beta_ps(0.5, 50.0, CHUNK)
    );
}

#[test]
fn a_missing_transfer_leaves_a_postcondition_unmet() {
    let mut s = ring_all_gather();
    let i = find(&s, 1, 3); // chunk 1's last hop, NPU 3 -> 0
    s.transfers.remove(i);
    let e = rejected(&s);
    assert_eq!(e, "schedule: at the end, NPU 0 lacks chunk 1");
}

#[test]
fn sending_a_chunk_before_it_arrives_is_caught() {
    let mut s = ring_all_gather();
    // NPU 1 forwards chunk 0 at step 1; swap it with the step-0 send of its own chunk, so
    // chunk 0 leaves before it has arrived.
    let (a, b) = (find(&s, 0, 1), find(&s, 1, 1));
    let (ta, tb) = (s.transfers[a].clone(), s.transfers[b].clone());
    s.transfers[a].start_ps = tb.start_ps;
    s.transfers[a].end_ps = tb.end_ps;
    s.transfers[b].start_ps = ta.start_ps;
    s.transfers[b].end_ps = ta.end_ps;
    let e = rejected(&s);
    assert!(e.contains("does not hold chunk 0 when it sends"), "{e}");
}

#[test]
fn wrong_durations_missing_links_and_overlaps_are_caught() {
    let mut s = ring_all_gather();
    s.transfers[0].end_ps += 1;
    assert!(rejected(&s).contains("but the link needs"));

    let mut s = ring_all_gather();
    let t = s.transfers[0].clone();
    let skip = (t.src() + 2) % 4;
    s.transfers[0] = Transfer::new(t.chunk(), t.src(), skip, t.start_ps, t.end_ps, t.op);
    assert!(rejected(&s).contains("there is no link"));

    let mut s = ring_all_gather();
    let later = s
        .transfers
        .iter()
        .position(|t| t.src() == 0 && t.start_ps > 0)
        .unwrap();
    let half = alpha_beta_ps(0.5, 50.0, CHUNK) / 2;
    s.transfers[later].start_ps -= half;
    s.transfers[later].end_ps -= half;
    assert!(rejected(&s).contains("still occupies the link"));
}

#[test]
fn bad_chunks_ops_and_sizes_are_caught() {
    let mut s = ring_all_gather();
    s.transfers[0].set_chunk(99);
    assert!(rejected(&s).contains("chunks 0..3"));

    let mut s = ring_all_gather();
    s.transfers[0].op = Op::Reduce;
    assert!(rejected(&s).contains("has no reductions"));

    let mut s = ring_all_gather();
    s.chunk_bytes = 2e6;
    assert!(rejected(&s).contains("chunk_bytes"));

    let mut s = ring_all_gather();
    let t = s.transfers[0].clone();
    s.transfers[0] = Transfer::new(t.chunk(), 9, t.dst(), t.start_ps, t.end_ps, t.op);
    assert!(rejected(&s).contains("NPUs 0..3"));
}

#[test]
fn schedules_round_trip_through_json() {
    let s = ring_all_gather();
    let back = Schedule::from_json(&s.to_json(), "s.json").unwrap();
    assert_eq!(back, s);
    let e = Schedule::from_json(r#"{"format": "other"}"#, "s.json").unwrap_err();
    assert!(e.to_string().contains("s.json:"), "{e}");
    let wrong = s.to_json().replace("tacos-schedule/1", "tacos-schedule/9");
    let e = Schedule::from_json(&wrong, "s.json").unwrap_err();
    assert!(e.to_string().contains("expected 'tacos-schedule/1'"), "{e}");
}

#[test]
fn a_transfer_is_written_field_by_field_and_ids_past_32_bits_are_refused_by_name() {
    let s = ring_all_gather();
    let t = &s.transfers[0];
    // The schedule format's transfer line: its fields in this order, ids as plain numbers.
    let line = format!(
        r#"{{"chunk":{},"src":{},"dst":{},"start_ps":{},"end_ps":{},"op":"copy"}}"#,
        t.chunk(),
        t.src(),
        t.dst(),
        t.start_ps,
        t.end_ps
    );
    let json = s.to_json();
    assert!(json.contains(&format!("\n    {line},\n")), "{json}");
    // Transfers hold ids in 32 bits: one past is an error naming the field, not a wrap.
    for field in ["chunk", "src", "dst"] {
        let value = match field {
            "chunk" => t.chunk(),
            "src" => t.src(),
            _ => t.dst(),
        };
        let huge = json.replacen(
            &format!(r#""{field}":{value},"#),
            &format!(r#""{field}":{},"#, u32::MAX as u64 + 1),
            1,
        );
        assert_ne!(huge, json);
        let e = Schedule::from_json(&huge, "s.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("transfers[0].{field}")), "{e}");
        assert!(e.contains("4294967296"), "{e}");
    }
}

#[test]
fn a_transfer_that_takes_no_time_is_rejected_not_a_panic() {
    // Regression: a zero-duration transfer sorted its arrival before its departure and
    // panicked the replay. Every transfer takes at least 1 ps, so it is a wrong time.
    let mut s = ring_all_gather();
    let i = find(&s, 0, 0);
    s.transfers[i].end_ps = s.transfers[i].start_ps;
    let e = rejected(&s);
    assert!(e.contains("takes 0.000000 us but the link needs"), "{e}");
    let e = tacos::schedule::check_data_flow(&s, &ring())
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not end after it starts"), "{e}");
}

#[test]
fn a_link_that_moves_a_chunk_in_under_a_picosecond_still_takes_one() {
    // 1 byte at 1e6 GB/s with no latency is 0.001 ps: counted as 1 ps, so the hand
    // ring's transfers at 1 ps a step pass and ones taking 0 ps do not.
    let fast = Topology::new(
        "uniring:4",
        4,
        (0..4)
            .map(|i| tacos::topology::Link {
                src: i,
                dst: (i + 1) % 4,
                bandwidth_gbps: 1e6,
                latency_us: 0.0,
            })
            .collect(),
    )
    .unwrap();
    let mut s = ring_all_gather();
    s.chunk_bytes = 1.0;
    s.collective.size_bytes = 4;
    for t in &mut s.transfers {
        let step = t.start_ps / alpha_beta_ps(0.5, 50.0, CHUNK);
        t.start_ps = step;
        t.end_ps = step + 1;
    }
    assert_eq!(check(&s, &fast).unwrap().collective_time_ps, 3);
}
