//! The transfer stream (`schedule::stream`): records round-trip, damage and truncation are
//! named, a synthesized mesh takes a few bytes a transfer, and the stream checker gives
//! the in-memory checker's verdict on the same transfers.

use std::io::Write;
use std::process::Command;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::pipeline::Request;
use tacos::schedule::stream::{
    self, StreamHeader, StreamReader, StreamSummary, StreamWriter, STREAM_FORMAT,
};
use tacos::schedule::{
    check, check_stream, link_time_ps, CheckReport, Network, Op, Schedule, Transfer,
};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

fn synth(t: &Topology, kind: CollectiveKind, k: usize) -> Schedule {
    let c = Collective::over_all(t, kind, None, k, 1 << 26).unwrap();
    let mut s = synthesize(t, &c, &SynthOptions::default()).unwrap();
    s.network = Some(Network::of(t));
    s
}

fn header_of(s: &Schedule) -> StreamHeader {
    StreamHeader::new(
        s.topology.clone(),
        s.collective.clone(),
        s.chunk_bytes,
        s.network.clone(),
    )
}

/// `transfers` written as a stream behind `s`'s header, through a `&mut dyn Write` as
/// `fsio::write_atomic_with` hands one over.
fn stream_of(s: &Schedule, transfers: &[Transfer]) -> (Vec<u8>, StreamSummary) {
    let mut bytes = Vec::new();
    let out: &mut dyn Write = &mut bytes;
    let mut writer = StreamWriter::new(out, &header_of(s)).unwrap();
    for t in transfers {
        writer.push(t).unwrap();
    }
    let (_, summary) = writer.finish().unwrap();
    (bytes, summary)
}

fn read_all(bytes: &[u8]) -> tacos::Result<Vec<Transfer>> {
    StreamReader::new(bytes, "test.tts")?.collect()
}

/// Where the records start: after the magic line and the header line.
fn records_start(bytes: &[u8]) -> usize {
    let first = bytes.iter().position(|&b| b == b'\n').unwrap();
    first + 1 + bytes[first + 1..].iter().position(|&b| b == b'\n').unwrap() + 1
}

fn copy(chunk: usize, src: usize, dst: usize, start_ps: u64, end_ps: u64) -> Transfer {
    Transfer::new(chunk, src, dst, start_ps, end_ps, Op::Copy)
}

fn small_schedule() -> Schedule {
    synth(&topo("mesh:3x3"), CollectiveKind::AllGather, 1)
}

#[test]
fn hand_made_transfers_round_trip_up_to_the_limits_of_their_fields() {
    let mut transfers = Vec::new();
    // More distinct offsets than the stream has slots, then the first ones again (their
    // slots were overwritten), with durations and senders going up and down.
    for i in 0..40usize {
        let offset = if i < 20 { i + 1 } else { i - 19 };
        transfers.push(Transfer::new(
            i * 1000,
            100 + (i % 3) * 7,
            100 + (i % 3) * 7 + offset,
            (i / 4) as u64 * 1_000_000,
            (i / 4) as u64 * 1_000_000 + 500 + (i % 5) as u64 * 100_000,
            if i % 3 == 0 { Op::Reduce } else { Op::Copy },
        ));
    }
    let max = u32::MAX as usize;
    transfers.extend([
        // An end before its start, an NPU at the top of 32 bits, the largest chunk.
        Transfer::new(max, max, 0, u64::MAX / 2, 3, Op::Reduce),
        copy(0, 0, max, u64::MAX - 1, u64::MAX),
        copy(max - 1, 5, 5, u64::MAX, u64::MAX),
        copy(7, max, max - 1, u64::MAX, 0),
    ]);
    let s = small_schedule();
    let (bytes, summary) = stream_of(&s, &transfers);
    assert_eq!(
        summary,
        StreamSummary {
            transfers: transfers.len() as u64,
            collective_time_ps: u64::MAX,
        }
    );
    let reader = StreamReader::new(&bytes[..], "test.tts").unwrap();
    assert_eq!(reader.header(), &header_of(&s));
    assert_eq!(reader.header().format, STREAM_FORMAT);
    assert_eq!(
        reader.collect::<tacos::Result<Vec<_>>>().unwrap(),
        transfers
    );
    // The same transfers give the same bytes.
    assert_eq!(stream_of(&s, &transfers).0, bytes);
    // No transfers at all.
    let (empty, summary) = stream_of(&s, &[]);
    assert_eq!(summary.transfers, 0);
    assert_eq!(summary.collective_time_ps, 0);
    assert!(read_all(&empty).unwrap().is_empty());
}

#[test]
fn ids_past_32_bits_are_refused_by_name() {
    let s = small_schedule();
    let top = u32::MAX as usize;
    // (the transfer, its field's varint at the top of 32 bits, one past, the field's name)
    let cases = [
        (
            copy(top, 0, 1, 0, 10),
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
            vec![0x80, 0x80, 0x80, 0x80, 0x10],
            "chunk 4294967296",
        ),
        // The source is stored zigzagged: 2 x (2^32 - 1), then 2 x 2^32.
        (
            copy(0, top, top - 1, 0, 10),
            vec![0xfe, 0xff, 0xff, 0xff, 0x1f],
            vec![0x80, 0x80, 0x80, 0x80, 0x20],
            "source NPU 4294967296",
        ),
    ];
    for (t, at_top, past, what) in cases {
        let (mut bytes, _) = stream_of(&s, &[t]);
        let records = records_start(&bytes);
        let at = records
            + bytes[records..]
                .windows(at_top.len())
                .position(|w| w == at_top)
                .unwrap();
        bytes[at..at + past.len()].copy_from_slice(&past);
        let e = read_all(&bytes).unwrap_err().to_string();
        assert!(e.contains(&format!("transfer 0: its {what} passes")), "{e}");
    }
}

#[test]
fn a_transfer_starting_before_the_one_before_it_is_refused_by_name() {
    let s = small_schedule();
    let mut writer = StreamWriter::new(Vec::new(), &header_of(&s)).unwrap();
    writer.push(&copy(0, 0, 1, 10, 20)).unwrap();
    writer.push(&copy(1, 1, 2, 10, 20)).unwrap();
    let e = writer.push(&copy(2, 2, 1, 9, 20)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let text = e.to_string();
    assert!(text.contains("transfer 2 (chunk 2, NPU 2 -> 1)"), "{text}");
    assert!(text.contains("start order"), "{text}");
}

#[test]
fn every_truncation_is_an_error_that_names_the_file() {
    let s = small_schedule();
    let (bytes, _) = stream_of(&s, &s.transfers);
    let records = records_start(&bytes);
    for cut in 0..bytes.len() {
        let e = read_all(&bytes[..cut]).expect_err("a truncated stream is refused");
        let text = e.to_string();
        assert!(text.contains("test.tts"), "cut at {cut}: {text}");
        if cut >= records {
            assert!(text.contains("(truncated)"), "cut at {cut}: {text}");
        }
    }
    assert_eq!(read_all(&bytes).unwrap(), s.transfers);
}

#[test]
fn every_damaged_byte_is_an_error_never_a_different_schedule() {
    let s = small_schedule();
    let (bytes, _) = stream_of(&s, &s.transfers);
    for at in 0..bytes.len() {
        for mask in [0x01u8, 0x10, 0x80, 0xff] {
            let mut damaged = bytes.clone();
            damaged[at] ^= mask;
            let e = read_all(&damaged).expect_err("a damaged stream is refused");
            assert!(e.to_string().contains("test.tts"), "byte {at}: {e}");
        }
    }
    // What was wrong, and where.
    let records = records_start(&bytes);
    let mut damaged = bytes.clone();
    damaged[records] = 0xF5;
    let e = read_all(&damaged).unwrap_err().to_string();
    assert!(
        e.contains("test.tts: transfer 0: flag byte 0xf5") && e.contains("(damaged)"),
        "{e}"
    );
    let mut damaged = bytes.clone();
    *damaged.last_mut().unwrap() ^= 1;
    let e = read_all(&damaged).unwrap_err().to_string();
    assert!(e.contains("checksum"), "{e}");
    let mut longer = bytes.clone();
    longer.push(0);
    let e = read_all(&longer).unwrap_err().to_string();
    assert!(e.contains("bytes follow the trailer"), "{e}");
    let e = read_all(b"{\"format\": \"tacos-schedule/1\"}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a transfer stream"), "{e}");
}

/// The point of the format. A mesh All-Gather's record is its flag byte and its chunk
/// (below 256 on a 16x16 mesh: at most 2 bytes); the start changes once a step, the
/// duration never (one link speed), the four link directions stay in their slots, and
/// the sender changes (at most 2 bytes) only after all of its transfers of a step, up
/// to four. So a record averages under 4 bytes, against 48 held as a `Transfer`.
#[test]
fn a_synthesized_mesh_takes_a_few_bytes_a_transfer() {
    let s = synth(&topo("mesh:16x16"), CollectiveKind::AllGather, 1);
    let (bytes, summary) = stream_of(&s, &s.transfers);
    assert_eq!(summary.transfers, s.transfers.len() as u64);
    assert_eq!(summary.collective_time_ps, s.collective_time_ps());
    let per_transfer = (bytes.len() - records_start(&bytes)) as f64 / s.transfers.len() as f64;
    println!(
        "mesh:16x16 All-Gather: {} transfers, {per_transfer:.2} bytes each",
        s.transfers.len()
    );
    assert!(per_transfer < 4.0, "{per_transfer} bytes a transfer");
}

/// Both checkers on the same transfers: the same report or the same error.
fn same_verdict(s: &Schedule, t: &Topology) -> tacos::Result<CheckReport> {
    let (bytes, _) = stream_of(s, &s.transfers);
    let streamed = check_stream(StreamReader::new(&bytes[..], "test.tts").unwrap(), t);
    let held = check(s, t);
    match (&held, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("check gives {held:?} but check_stream {streamed:?}"),
    }
    held
}

/// `s` with its transfers changed by `change`, in start order again.
fn mutated(s: &Schedule, change: impl FnOnce(&mut Vec<Transfer>)) -> Schedule {
    let mut transfers = s.transfers.clone();
    change(&mut transfers);
    Schedule::new(
        s.topology.clone(),
        s.collective.clone(),
        s.chunk_bytes,
        transfers,
    )
}

/// A correct schedule is accepted by both checkers, and each kind of fault refused by
/// both with the same message.
fn both_checkers_agree(t: &Topology, s: &Schedule) {
    let report = same_verdict(s, t).unwrap();
    assert_eq!(report.transfers, s.transfers.len());
    assert_eq!(report.collective_time_ps, s.collective_time_ps());
    let refused = |s: &Schedule, what: &str| {
        let e = same_verdict(s, t).unwrap_err().to_string();
        assert!(e.contains(what), "expected '{what}': {e}");
    };
    // A transfer sent twice at once over the same link (or route).
    let busy = mutated(s, |ts| ts.push(ts[ts.len() / 2].clone()));
    refused(&busy, "still occupies the link");
    // A relay that never got the chunk it forwards.
    let unfed = mutated(s, |ts| {
        let relayed = ts
            .iter()
            .position(|a| {
                ts.iter()
                    .any(|b| b.src() == a.dst() && b.chunk() == a.chunk())
            })
            .expect("some NPU forwards a chunk it received");
        ts.remove(relayed);
    });
    refused(&unfed, "does not hold chunk");
    // The last delivery dropped.
    let short = mutated(s, |ts| {
        ts.pop();
    });
    refused(&short, "at the end, NPU");
    // A transfer a picosecond too long.
    let slow = mutated(s, |ts| ts[0].end_ps += 1);
    refused(&slow, "takes");
}

#[test]
fn the_stream_checker_agrees_with_check_on_a_mesh() {
    let t = topo("mesh:4x4");
    both_checkers_agree(&t, &synth(&t, CollectiveKind::AllGather, 2));
}

/// Links of three speeds: transfers do not end in the order they start.
#[test]
fn the_stream_checker_agrees_with_check_where_links_differ_in_speed() {
    let t = topo("rfs:2x4x8,bw=200:100:50");
    both_checkers_agree(&t, &synth(&t, CollectiveKind::AllGather, 2));
}

#[test]
fn the_stream_checker_agrees_with_check_on_a_switched_fabric() {
    let t = topo("preset:dgx-a100,nodes=2");
    both_checkers_agree(&t, &synth(&t, CollectiveKind::AllGather, 1));
}

/// A synthesized combining collective (`pipeline::synthesize`, as `tacos synth` makes
/// it), with the network recorded.
fn synth_combining(t: &Topology, kind: CollectiveKind, k: usize) -> Schedule {
    let request = Request::new(kind, 1 << 26);
    let checked = tacos::pipeline::synthesize(t, &request, k, &SynthOptions::seeded(0)).unwrap();
    if let Some(times) = checked.all_reduce() {
        println!(
            "{} All-Reduce K={k}: {} composition kept",
            t.name(),
            if times.pipelined {
                "pipelined"
            } else {
                "phased"
            }
        );
    }
    let mut s = checked.schedule().clone();
    s.network = Some(Network::of(t));
    s
}

/// Synthesized sums are reduction trees (every contributor sends each chunk's partial sum
/// once, after those sent to it): the stream checker reads them with `check`'s report,
/// and refuses their faults with `check`'s message.
#[test]
fn synthesized_combining_collectives_pass_the_stream_checker_with_checks_report() {
    // Both All-Reduce compositions (phased on the first, pipelined on ring:5 K=2, rfs and
    // the DGX pair as synthesized at seed 0, printed), links of three speeds, switches.
    for (spec, k) in [
        ("mesh:3x3", 1),
        ("mesh:4x4", 2),
        ("ring:8", 1),
        ("ring:5", 2),
        ("switch:8", 1),
        ("rfs:2x4x8,bw=200:100:50", 1),
        ("preset:dgx-a100,nodes=2", 2),
    ] {
        let t = topo(spec);
        for kind in [
            CollectiveKind::ReduceScatter,
            CollectiveKind::Reduce,
            CollectiveKind::AllReduce,
        ] {
            let s = synth_combining(&t, kind, k);
            // An All-Reduce is reductions then copies of the sums.
            let copies = s.transfers.iter().filter(|t| t.op == Op::Copy).count();
            assert_eq!(
                copies > 0,
                kind == CollectiveKind::AllReduce,
                "{spec} {kind}"
            );
            let report =
                same_verdict(&s, &t).unwrap_or_else(|e| panic!("{spec} {kind} K={k}: {e}"));
            assert_eq!(report.transfers, s.transfers.len());
            assert_eq!(report.collective_time_ps, s.collective_time_ps());
            let slow = mutated(&s, |ts| ts[0].end_ps += 1);
            let e = same_verdict(&slow, &t).unwrap_err().to_string();
            assert!(e.contains("takes"), "{e}");
            let busy = mutated(&s, |ts| ts.push(ts[ts.len() / 2].clone()));
            let e = same_verdict(&busy, &t).unwrap_err().to_string();
            assert!(e.contains("still occupies the link"), "{e}");
            // The last transfer dropped: its destination lacks the chunk (the root, of a
            // reduction, or an NPU a copy would have reached).
            let short = mutated(&s, |ts| {
                ts.pop();
            });
            let e = same_verdict(&short, &t).unwrap_err().to_string();
            assert!(e.contains("at the end, NPU"), "{e}");
        }
    }
}

/// `kind` over `npus` fully connected NPUs (rooted at NPU 0, K = 1) by hand-made
/// transfers of chunk 0, each taking a link's time: `(op, src, dst, step)` runs over
/// `[step, step + 1)` in link times.
fn hand_made(
    kind: CollectiveKind,
    npus: usize,
    transfers: &[(Op, usize, usize, u64)],
) -> (Topology, Schedule) {
    let of_chunk_0: Vec<_> = transfers
        .iter()
        .map(|&(op, src, dst, step)| (0, op, src, dst, step))
        .collect();
    hand_made_chunks(kind, npus, &of_chunk_0)
}

/// `hand_made` with each transfer's chunk first: `(chunk, op, src, dst, step)`.
fn hand_made_chunks(
    kind: CollectiveKind,
    npus: usize,
    transfers: &[(usize, Op, usize, usize, u64)],
) -> (Topology, Schedule) {
    let t = topo(&format!("fc:{npus}"));
    let spec = CollectiveSpec {
        kind,
        root: kind.has_root().then_some(0),
        npus: (0..npus).collect(),
        chunks_per_npu: 1,
        size_bytes: 1 << 20,
    };
    let collective = Collective::new(&t, spec.clone()).unwrap();
    let d = link_time_ps(&t.links()[0], collective.chunk_bytes()).unwrap();
    let ts: Vec<Transfer> = transfers
        .iter()
        .map(|&(chunk, op, src, dst, step)| {
            Transfer::new(chunk, src, dst, step * d, (step + 1) * d, op)
        })
        .collect();
    let mut s = Schedule::new(t.name(), spec, collective.chunk_bytes(), ts);
    s.network = Some(Network::of(&t));
    (t, s)
}

/// What each checker says of `s`: `check` on it held, `check_stream` on it streamed.
fn both_say(
    s: &Schedule,
    t: &Topology,
) -> (tacos::Result<CheckReport>, tacos::Result<CheckReport>) {
    let (bytes, _) = stream_of(s, &s.transfers);
    let streamed = check_stream(StreamReader::new(&bytes[..], "test.tts").unwrap(), t);
    (check(s, t), streamed)
}

const R: Op = Op::Reduce;
const C: Op = Op::Copy;

/// Hand-worked Reduce to NPU 0 over 4 NPUs: 2 -> 1 and 3 -> 0 in step 0, 1 -> 0 in step 1
/// (the tree 2 -> 1 -> 0 <- 3), and faults of each kind.
#[test]
fn hand_made_reduction_trees_and_their_faults() {
    let (t, good) = hand_made(
        CollectiveKind::Reduce,
        4,
        &[(R, 2, 1, 0), (R, 3, 0, 0), (R, 1, 0, 1)],
    );
    let (held, streamed) = both_say(&good, &t);
    assert_eq!(held.unwrap(), streamed.unwrap());
    // The same tree, then the whole sum copied on from the root: still correct.
    let (t, copied) = hand_made(
        CollectiveKind::Reduce,
        4,
        &[(R, 2, 1, 0), (R, 3, 0, 0), (R, 1, 0, 1), (C, 0, 2, 2)],
    );
    let (held, streamed) = both_say(&copied, &t);
    assert_eq!(held.unwrap(), streamed.unwrap());
    let refused = |transfers: &[(Op, usize, usize, u64)], held_says: &str, streamed_says: &str| {
        let (t, s) = hand_made(CollectiveKind::Reduce, 4, transfers);
        let (held, streamed) = both_say(&s, &t);
        let held = held.unwrap_err().to_string();
        let streamed = streamed.unwrap_err().to_string();
        assert!(held.contains(held_says), "check: {held}");
        assert!(streamed.contains(streamed_says), "check_stream: {streamed}");
    };
    // NPU 2 sends its partial to 1 and to 3, so 0 counts it twice.
    refused(
        &[(R, 2, 1, 0), (R, 2, 3, 0), (R, 1, 0, 1), (R, 3, 0, 1)],
        "would count a contribution to chunk 0 twice",
        "transfer 1 (chunk 0, NPU 2 -> 3, 0.000000-",
    );
    refused(
        &[(R, 2, 1, 0), (R, 2, 3, 0), (R, 1, 0, 1), (R, 3, 0, 1)],
        "transfer 3 (chunk 0, NPU 3 -> 0",
        "NPU 2 sends its partial sum of chunk 0 a second time",
    );
    // NPU 1 sends before 2's partial reaches it: 2's contribution is lost.
    refused(
        &[(R, 1, 0, 0), (R, 3, 0, 0), (R, 2, 1, 1)],
        "at the end, NPU 0 lacks chunk 0",
        "NPU 1 sent its partial sum of chunk 0 before this landed",
    );
    // A partial sum copied over the root's: what the root had gathered is overwritten.
    refused(
        &[(R, 2, 1, 0), (R, 3, 0, 0), (C, 1, 0, 1)],
        "at the end, NPU 0 lacks chunk 0",
        "NPU 1 does not hold the whole sum of chunk 0 when it sends",
    );
    // NPU 3 never sends: the root lacks its contribution, and both say so alike.
    let (t, missing) = hand_made(CollectiveKind::Reduce, 4, &[(R, 2, 1, 0), (R, 1, 0, 1)]);
    let (held, streamed) = both_say(&missing, &t);
    let held = held.unwrap_err().to_string();
    assert_eq!(held, streamed.unwrap_err().to_string());
    assert!(
        held.contains("at the end, NPU 0 lacks chunk 0 (or some of its contributions)"),
        "{held}"
    );
}

/// Recursive doubling on two NPUs: each sends the other its partial of each chunk at once,
/// so both end with both contributions (`check` accepts, by hand: {0} + {1} on each), but
/// each sent its partial before the other's landed, which no reduction tree does.
#[test]
fn a_correct_all_reduce_of_another_shape_is_refused_by_the_stream_checker_saying_why() {
    // All-Reduce on 2 NPUs at K = 1 has two chunks: chunk 1 is exchanged a step later.
    let (t, s) = hand_made_chunks(
        CollectiveKind::AllReduce,
        2,
        &[
            (0, R, 0, 1, 0),
            (0, R, 1, 0, 0),
            (1, R, 0, 1, 1),
            (1, R, 1, 0, 1),
        ],
    );
    let (held, streamed) = both_say(&s, &t);
    let report = held.unwrap();
    assert_eq!(report.transfers, 4);
    let e = streamed.unwrap_err().to_string();
    assert!(
        e.contains("NPU 1 sent its partial sum of chunk 0 before this landed")
            && e.contains("reduction-tree form")
            && e.contains("`schedule::check` on the schedule read whole"),
        "{e}"
    );
}

/// The checker reads a few transfers ahead of the one it judges; a fault is still
/// reported before damage just after it, as a reader judging each transfer as it comes
/// would, and damage alone is reported as damage.
#[test]
fn a_fault_just_before_the_file_is_cut_is_reported_as_the_fault() {
    let t = topo("mesh:3x3");
    let s = small_schedule();
    // Transfer 2 a picosecond too long, then the file cut three transfers later.
    let slow = mutated(&s, |ts| ts[2].end_ps += 1);
    let (bytes, _) = stream_of(&slow, &slow.transfers);
    let whole = read_all(&bytes).unwrap();
    let cut = (records_start(&bytes)..bytes.len())
        .find(|&cut| {
            StreamReader::new(&bytes[..cut], "test.tts")
                .unwrap()
                .take_while(|r| r.is_ok())
                .count()
                == 5
        })
        .expect("some cut leaves five whole transfers");
    assert!(whole.len() > 5);
    let e = check_stream(StreamReader::new(&bytes[..cut], "test.tts").unwrap(), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("transfer 2 ") && e.contains("takes"), "{e}");
    let sound = mutated(&s, |_| {});
    let (sound, _) = stream_of(&sound, &sound.transfers);
    let e = check_stream(StreamReader::new(&sound[..cut], "test.tts").unwrap(), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated"), "{e}");
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-stream-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Written as `tacos synth` writes it: atomically, through a `&mut dyn Write`.
fn write_stream(path: &std::path::Path, s: &Schedule) {
    tacos::fsio::write_atomic_with(path, |w| {
        let mut writer = StreamWriter::new(w, &header_of(s))?;
        for t in &s.transfers {
            writer.push(t)?;
        }
        writer.finish().map(|_| ())
    })
    .unwrap();
}

#[test]
fn a_schedule_file_may_be_a_stream() {
    let dir = scratch("read");
    let s = synth(&topo("mesh:4x4"), CollectiveKind::AllGather, 1);
    let tts = dir.join("mesh.tts");
    let json = dir.join("mesh.json");
    write_stream(&tts, &s);
    tacos::fsio::write_atomic(&json, s.to_json().as_bytes()).unwrap();
    assert!(stream::is_stream(&tts).unwrap());
    assert!(!stream::is_stream(&json).unwrap());
    assert_eq!(Schedule::read(&tts).unwrap(), s);
    assert_eq!(Schedule::read(&json).unwrap(), s);
    let from_file = check_stream(stream::open(&tts).unwrap(), &topo("mesh:4x4")).unwrap();
    assert_eq!(from_file.collective_time_ps, s.collective_time_ps());
    // A damaged file is named by its path.
    let mut bytes = std::fs::read(&tts).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&tts, &bytes).unwrap();
    let e = Schedule::read(&tts).unwrap_err().to_string();
    assert!(e.contains("mesh.tts") && e.contains("truncated"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn simulate_reads_a_stream_like_the_json_it_holds() {
    let dir = scratch("simulate");
    let s = synth(&topo("mesh:3x3"), CollectiveKind::AllGather, 1);
    let tts = dir.join("mesh.tts");
    let json = dir.join("mesh.json");
    write_stream(&tts, &s);
    tacos::fsio::write_atomic(&json, s.to_json().as_bytes()).unwrap();
    let tacos = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tacos"))
            .args(args)
            .output()
            .unwrap()
    };
    let simulated = |path: &std::path::Path| {
        let out = tacos(&["simulate", "--schedule", path.to_str().unwrap(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["time_us"].clone(), v["schedule_time_us"].clone())
    };
    let from_stream = simulated(&tts);
    assert_eq!(from_stream, simulated(&json));
    // Contention-free: the simulation runs on the schedule's own clock.
    assert_eq!(from_stream.0, from_stream.1);
    // Simulated in one pass (serial sharing), nothing is held per transfer: it runs
    // within 64 KiB. Read whole (fair sharing), its records are held within the memory
    // limit: 4,096 of them (the first reserved) take 192 KiB, over that limit.
    let small = ["--max-memory", "64KiB", "--json"];
    let out = tacos(
        &[
            &["simulate", "--schedule", tts.to_str().unwrap()],
            &small[..],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["time_us"], from_stream.0);
    let out = tacos(&[
        "simulate",
        "--schedule",
        tts.to_str().unwrap(),
        "--sharing",
        "fair",
        "--max-memory",
        "64KiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("reading") && err.contains("mesh.tts") && err.contains("--max-memory"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A small deterministic generator (xorshift), so the random schedules below are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random schedule in reduction-tree form for `kind` on `npus` fully connected NPUs
/// (K = 1): per chunk a random in-tree into its root, each NPU sending after what it
/// receives has landed, then (All-Reduce) the sum copied from NPUs holding it.
fn random_trees(
    rng: &mut Rng,
    kind: CollectiveKind,
    npus: usize,
) -> Vec<(usize, Op, usize, usize, u64)> {
    let chunks = if kind == CollectiveKind::Reduce {
        1
    } else {
        npus
    };
    let mut transfers = Vec::new();
    for c in 0..chunks {
        let root = match kind {
            CollectiveKind::Reduce => 0,
            CollectiveKind::ReduceScatter => c,
            _ => rng.below(npus),
        };
        // Each NPU joins the tree below the root or one that joined before it.
        let mut order: Vec<usize> = (0..npus).filter(|&n| n != root).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let joined: Vec<usize> = std::iter::once(root).chain(order.iter().copied()).collect();
        let parent: Vec<(usize, usize)> = (1..joined.len())
            .map(|i| (joined[i], joined[rng.below(i)]))
            .collect();
        // Sending steps from the leaves up: after every child's partial has landed.
        let mut ready = vec![0u64; npus];
        for &(child, to) in parent.iter().rev() {
            let step = ready[child] + rng.below(2) as u64;
            transfers.push((c, Op::Reduce, child, to, step));
            ready[to] = ready[to].max(step + 1);
        }
        if kind == CollectiveKind::AllReduce {
            let mut holders = vec![root];
            for &n in &order {
                let from = holders[rng.below(holders.len())];
                let step = ready[from] + rng.below(2) as u64;
                transfers.push((c, Op::Copy, from, n, step));
                ready[n] = step + 1;
                holders.push(n);
            }
        }
    }
    transfers
}

/// The soundness of the reduction-tree rule, against `check`'s contribution sets as a
/// second implementation: on random trees, and on each with one random change (an op
/// flipped, a transfer dropped, moved a step, redirected, or sent again), every schedule
/// `check_stream` accepts `check` accepts with the same report, and every correct
/// schedule it refuses is refused for its shape, saying so.
#[test]
fn every_schedule_the_stream_checker_accepts_check_accepts() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let (mut accepted, mut changed_accepted, mut other_shapes) = (0, 0, 0);
    for round in 0..3000 {
        let kind = [
            CollectiveKind::Reduce,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ][round % 3];
        let npus = 3 + round % 3;
        let mut transfers = random_trees(&mut rng, kind, npus);
        let pick = rng.below(transfers.len());
        let changed = round % 4 != 0;
        if changed {
            let t = &mut transfers[pick];
            match rng.below(5) {
                0 => {
                    t.1 = if t.1 == Op::Copy {
                        Op::Reduce
                    } else {
                        Op::Copy
                    }
                }
                1 => {
                    transfers.remove(pick);
                }
                2 => {
                    t.4 = if rng.below(2) == 0 {
                        t.4 + 1
                    } else {
                        t.4.saturating_sub(1)
                    }
                }
                3 => t.3 = (t.2 + 1 + rng.below(npus - 1)) % npus,
                _ => {
                    let again = (
                        t.0,
                        t.1,
                        t.2,
                        (t.2 + 1 + rng.below(npus - 1)) % npus,
                        t.4 + rng.below(3) as u64,
                    );
                    transfers.push(again);
                }
            }
        }
        let (t, s) = hand_made_chunks(kind, npus, &transfers);
        let (held, streamed) = both_say(&s, &t);
        match (&held, &streamed) {
            (_, Ok(report)) => {
                assert_eq!(
                    held.as_ref().ok(),
                    Some(report),
                    "round {round}: {transfers:?}"
                );
                accepted += 1;
                changed_accepted += changed as usize;
            }
            (Ok(_), Err(e)) => {
                assert!(
                    e.to_string().contains("reduction-tree form"),
                    "round {round}: {e}"
                );
                other_shapes += 1;
            }
            (Err(_), Err(_)) => {}
        }
        if !changed {
            // Unchanged, it is a tree: refused only for links carrying two chunks at once,
            // by both alike.
            match (&held, &streamed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string());
                    assert!(a.to_string().contains("still occupies the link"), "{a}");
                }
                _ => panic!("round {round}: {held:?} but {streamed:?}"),
            }
        }
    }
    println!(
        "accepted {accepted} ({changed_accepted} changed), {other_shapes} correct of another shape"
    );
    assert!(accepted >= 500 && changed_accepted >= 200 && other_shapes >= 20);
}
