//! The verifier against broken programs (mutations of correct ones, each of which must be
//! caught), the parser against bad files (each error names the place and the reason), and
//! both against random programs (never a panic).

use proptest::prelude::*;
use std::path::PathBuf;
use tacos::collective::{Collective, CollectiveKind};
use tacos::msccl::layout::Layout;
use tacos::msccl::{lower, parse_program, read_program, simulate_program, verify, write_program};
use tacos::msccl::{Buf, Dep, Gpu, Instr, LowerOptions, ProblemKind, Program, Proto, Step};
use tacos::msccl::{Element, Rule, Threadblock, VerifyOptions, VerifyReport};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};

fn lowered(spec: &str, kind: CollectiveKind, k: usize, in_place: bool) -> Program {
    let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
    let root = kind.has_root().then_some(0);
    let collective = Collective::over_all(&topo, kind, root, k, 1 << 20).unwrap();
    let schedule = synthesize(&topo, &collective, &SynthOptions::seeded(3)).unwrap();
    let options = LowerOptions {
        in_place: Some(in_place),
        ..LowerOptions::default()
    };
    lower(&schedule, &topo, &options).unwrap()
}

/// A file of the third-party corpus, or `None` when the corpus is not beside the checkout.
fn corpus(name: &str) -> Option<Program> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus/msccl-xml/ndv4")
        .join(name);
    path.exists().then(|| read_program(&path).unwrap())
}

fn check(p: &Program) -> VerifyReport {
    verify(p, &VerifyOptions::default())
}

/// Programs to mutate: lowered ones of both layouts and two third-party All-Reduces (when
/// the corpus is there).
fn subjects() -> Vec<(String, Program)> {
    let mut subjects = vec![
        (
            "ring:4 allgather".into(),
            lowered("ring:4", CollectiveKind::AllGather, 2, false),
        ),
        (
            "mesh:2x2 allgather in place".into(),
            lowered("mesh:2x2", CollectiveKind::AllGather, 1, true),
        ),
        (
            "mesh:2x3 broadcast".into(),
            lowered("mesh:2x3", CollectiveKind::Broadcast, 2, true),
        ),
    ];
    let third_party = ["r48ll.xml", "ap-1pass.xml"].map(|name| (name, corpus(name)));
    if third_party.iter().any(|(_, p)| p.is_none()) {
        println!("skipping the third-party subjects: ../shared/corpus/msccl-xml is absent");
    }
    subjects.extend(
        third_party
            .into_iter()
            .filter_map(|(name, p)| Some((name.to_string(), p?))),
    );
    subjects
}

/// Slots in the program's own buffer names.
type Slots = Vec<(Buf, i64)>;

/// Slots a step reads and writes.
fn touches(step: &Step) -> (Slots, Slots) {
    let range = |on: bool, buf: Buf, off: i64| -> Slots {
        if on {
            (0..step.count as i64).map(|i| (buf, off + i)).collect()
        } else {
            Vec::new()
        }
    };
    (
        range(step.instr.reads_src(), step.src_buf, step.src_off),
        range(step.instr.writes_dst(), step.dst_buf, step.dst_off),
    )
}

/// Every (gpu, tb, step) in the program.
fn all_steps(p: &Program) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for (g, gpu) in p.gpus.iter().enumerate() {
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            out.extend((0..tb.steps.len()).map(|s| (g, t, s)));
        }
    }
    out
}

#[test]
fn the_subjects_are_correct_to_begin_with() {
    for (name, p) in subjects() {
        let r = check(&p);
        assert!(r.is_correct(), "{name}: {:#?}", r.problems);
    }
}

/// Whether swapping two steps of one threadblock changes what it does: they use the same
/// connection, or touch common data (two reductions into one slot commute).
fn ordered(a: &Step, b: &Step) -> bool {
    if a.instr == Instr::Nop || b.instr == Instr::Nop {
        return false;
    }
    let same_connection =
        (a.instr.sends() && b.instr.sends()) || (a.instr.receives() && b.instr.receives());
    let ((ra, wa), (rb, wb)) = (touches(a), touches(b));
    let commute = a.instr == Instr::Reduce && b.instr == Instr::Reduce && wa == wb;
    let shared =
        wa.iter().any(|x| rb.contains(x) || wb.contains(x)) || ra.iter().any(|x| wb.contains(x));
    same_connection || (shared && !commute)
}

#[test]
fn swapping_two_steps_is_caught() {
    let mut tried = 0;
    for (name, p) in subjects() {
        for (g, t, s) in all_steps(&p) {
            let steps = &p.gpus[g].threadblocks[t].steps;
            if s + 1 >= steps.len() || !ordered(&steps[s], &steps[s + 1]) {
                continue;
            }
            let mut m = p.clone();
            m.gpus[g].threadblocks[t].steps.swap(s, s + 1);
            tried += 1;
            let r = check(&m);
            assert!(
                !r.is_correct(),
                "{name}: swapping GPU {g} tb {t} steps {s}, {} went unnoticed",
                s + 1
            );
        }
    }
    assert!(tried >= 20, "only {tried} swaps tried");
}

#[test]
fn reversing_the_order_of_a_connection_is_caught() {
    // The receiving threadblock takes its messages in the reverse order.
    let mut tried = 0;
    for (name, p) in subjects() {
        for (g, gpu) in p.gpus.iter().enumerate() {
            for (t, tb) in gpu.threadblocks.iter().enumerate() {
                let recvs: Vec<usize> = (0..tb.steps.len())
                    .filter(|&s| tb.steps[s].instr.receives())
                    .collect();
                if recvs.len() < 2 {
                    continue;
                }
                let mut m = p.clone();
                let steps = &mut m.gpus[g].threadblocks[t].steps;
                let taken: Vec<Step> = recvs.iter().map(|&s| steps[s].clone()).collect();
                for (&s, step) in recvs.iter().zip(taken.into_iter().rev()) {
                    steps[s] = step;
                }
                tried += 1;
                let r = check(&m);
                assert!(
                    !r.is_correct(),
                    "{name}: GPU {g} tb {t} receiving in reverse order went unnoticed"
                );
            }
        }
    }
    assert!(tried >= 10, "only {tried} reversals tried");
}

#[test]
fn removing_a_dependency_is_caught() {
    let mut tried = 0;
    for (name, p) in subjects() {
        for (g, t, s) in all_steps(&p) {
            let step = &p.gpus[g].threadblocks[t].steps[s];
            if step.dep.is_none() || step.instr == Instr::Nop {
                continue;
            }
            // Remove the step's dependency and the nops carrying its others.
            let mut m = p.clone();
            let steps = &mut m.gpus[g].threadblocks[t].steps;
            steps[s].dep = None;
            let mut first = s;
            while first > 0 && steps[first - 1].instr == Instr::Nop {
                first -= 1;
            }
            steps.drain(first..s);
            renumber_deps(&mut m, g, t, first, s - first);
            tried += 1;
            let r = check(&m);
            assert!(
                r.problems.iter().any(|p| matches!(
                    p.kind,
                    ProblemKind::Race | ProblemKind::Result | ProblemKind::Data
                )),
                "{name}: removing GPU {g} tb {t} step {s}'s dependency went unnoticed: {:?}",
                r.problems
            );
        }
    }
    // The lowered subjects have few dependencies; the third-party ones bring enough.
    if corpus("r48ll.xml").is_some() {
        assert!(tried >= 5, "only {tried} removals tried");
    }
}

/// After removing `removed` steps of GPU g tb t from `from` on, dependencies on later
/// steps of that threadblock move down.
fn renumber_deps(p: &mut Program, g: usize, t: usize, from: usize, removed: usize) {
    for tb in &mut p.gpus[g].threadblocks {
        for step in &mut tb.steps {
            if let Some(d) = &mut step.dep {
                if d.tb == t && d.step >= from + removed {
                    d.step -= removed;
                }
            }
        }
    }
}

#[test]
fn a_wrong_offset_is_caught() {
    let mut tried = 0;
    for (name, p) in subjects() {
        for (g, t, s) in all_steps(&p) {
            let step = &p.gpus[g].threadblocks[t].steps[s];
            if !step.instr.writes_dst() || step.dst_buf == Buf::Scratch {
                continue;
            }
            let len = match step.dst_buf {
                Buf::Input => p.gpus[g].input_chunks,
                _ => p.gpus[g].output_chunks,
            } as i64;
            let mut m = p.clone();
            let d = &mut m.gpus[g].threadblocks[t].steps[s];
            d.dst_off = (d.dst_off + 1) % len;
            tried += 1;
            let r = check(&m);
            assert!(
                !r.is_correct(),
                "{name}: GPU {g} tb {t} step {s} writing the next slot went unnoticed"
            );
        }
    }
    assert!(tried >= 20, "only {tried} offsets tried");
}

#[test]
fn out_of_bounds_offsets_and_counts_are_reported() {
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    let (g, t, s) = all_steps(&p)
        .into_iter()
        .find(|&(g, t, s)| p.gpus[g].threadblocks[t].steps[s].instr == Instr::Recv)
        .unwrap();
    p.gpus[g].threadblocks[t].steps[s].dst_off = 40;
    let r = check(&p);
    let bounds: Vec<_> = r
        .problems
        .iter()
        .filter(|x| x.kind == ProblemKind::Bounds)
        .collect();
    assert_eq!(bounds.len(), 1, "{:?}", r.problems);
    assert!(bounds[0].message.contains("o[40]"), "{}", bounds[0].message);
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    p.gpus[g].threadblocks[t].steps[s].count = 2;
    let r = check(&p);
    assert!(
        r.problems.iter().any(|x| x.kind == ProblemKind::Fifo),
        "{:?}",
        r.problems
    );
}

#[test]
fn a_dependency_cycle_is_reported_with_the_waiting_steps() {
    // Two threadblocks on GPU 0 each wait for the other's last step.
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    let gpu = &mut p.gpus[0];
    assert!(gpu.threadblocks.len() >= 2);
    let last = |tb: &Threadblock| tb.steps.len() - 1;
    let (l0, l1) = (last(&gpu.threadblocks[0]), last(&gpu.threadblocks[1]));
    gpu.threadblocks[0].steps[0].dep = Some(Dep { tb: 1, step: l1 });
    gpu.threadblocks[1].steps[0].dep = Some(Dep { tb: 0, step: l0 });
    gpu.threadblocks[0].steps[l0].has_dep = true;
    gpu.threadblocks[1].steps[l1].has_dep = true;
    let r = check(&p);
    let dead: Vec<_> = r
        .problems
        .iter()
        .filter(|x| x.kind == ProblemKind::Deadlock)
        .collect();
    assert_eq!(dead.len(), 1, "{:?}", r.problems);
    let m = &dead[0].message;
    assert!(
        m.contains("GPU 0 tb 0 step 0") && m.contains("GPU 0 tb 1 step 0") && m.contains("cycle"),
        "{m}"
    );
    // A dependency on a step that never signals is reported as such.
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    p.gpus[0].threadblocks[0].steps[0].dep = Some(Dep { tb: 1, step: 0 });
    p.gpus[0].threadblocks[1].steps[0].has_dep = false;
    let r = check(&p);
    assert!(
        r.problems
            .iter()
            .any(|x| x.kind == ProblemKind::Deadlock && x.message.contains("never signals")),
        "{:?}",
        r.problems
    );
}

#[test]
fn shared_connections_and_missing_peers_break_loader_rules_and_stop_execution() {
    // A copy of GPU 0's threadblock 0 is the second threadblock on its connections.
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    let tb = p.gpus[0].threadblocks[0].clone();
    let copy = p.gpus[0].threadblocks.len();
    p.gpus[0].threadblocks.push(tb);
    let r = check(&p);
    let shared: Vec<_> = r
        .rule_breaks
        .iter()
        .filter(|b| b.rule == Rule::SharedConnection)
        .collect();
    assert_eq!(shared.len(), 1, "{:?}", r.rule_breaks);
    assert_eq!(shared[0].element, Element::tb(0, copy));
    assert!(
        shared[0]
            .message
            .contains("a connection belongs to one threadblock"),
        "{}",
        shared[0].message
    );
    assert!(
        r.problems
            .iter()
            .any(|x| x.kind == ProblemKind::Structure && x.message.starts_with("not executed")),
        "{:?}",
        r.problems
    );
    assert!(!r.loads() && !r.computes());
    let mut p = lowered("ring:4", CollectiveKind::AllGather, 1, false);
    p.gpus[1].threadblocks[0].send = None;
    let first_send = p.gpus[1].threadblocks[0]
        .steps
        .iter()
        .position(|s| s.instr.sends())
        .unwrap();
    let r = check(&p);
    let peerless: Vec<_> = r
        .rule_breaks
        .iter()
        .filter(|b| b.rule == Rule::PeerlessTransfer)
        .collect();
    assert_eq!(peerless.len(), 1, "{:?}", r.rule_breaks);
    assert_eq!(peerless[0].element, Element::step(1, 0, first_send));
    assert!(peerless[0].message.contains("no send peer"));
}

#[test]
fn layouts_agree_with_the_collectives_chunk_conditions() {
    // Where the layout puts a chunk at the start and the end must be exactly the
    // collective's pre- and postconditions, for every kind.
    let topo = parse_spec("fc:4", &SpecDefaults::default()).unwrap();
    for kind in CollectiveKind::ALL {
        for in_place in [false, true] {
            let root = kind.has_root().then_some(2);
            let c = Collective::over_all(&topo, kind, root, 2, 1 << 20).unwrap();
            let layout = Layout::for_spec(c.spec(), in_place).unwrap();
            assert_eq!(layout.chunks(), c.chunk_count(), "{kind}");
            for id in 0..c.chunk_count() {
                for r in 0..4 {
                    assert_eq!(
                        layout.input_slot(r, id).is_some(),
                        c.pre(id).contains(&r),
                        "{kind} pre"
                    );
                    assert_eq!(
                        layout.output_slot(r, id).is_some(),
                        c.post(id).contains(&r),
                        "{kind} post"
                    );
                }
            }
            // No two chunks share a slot at the start, or at the end.
            for r in 0..4 {
                for slots in [
                    (0..layout.chunks())
                        .filter_map(|id| layout.input_slot(r, id))
                        .collect::<Vec<_>>(),
                    (0..layout.chunks())
                        .filter_map(|id| layout.output_slot(r, id))
                        .collect(),
                ] {
                    let mut sorted = slots.clone();
                    sorted.sort();
                    sorted.dedup();
                    assert_eq!(sorted.len(), slots.len(), "{kind} in place {in_place}");
                }
            }
            let chunk = layout.size_divisor() as f64;
            assert!(
                (c.chunk_bytes() - (1 << 20) as f64 / chunk).abs() < 1e-6,
                "{kind}"
            );
        }
    }
}

const SMALL: &str = r#"<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

/// A 2-GPU All-Gather in which GPU 0's threadblock 1 rewrites o[0], which threadblock 0
/// wrote, ordered after that write only by a message round trip through GPU 1 (no
/// dependency on GPU 0 orders them). `GPU1` is GPU 1's threadblock, receive first.
const ROUND_TRIP: &str = r#"<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
GPU1
    </tb>
  </gpu>
</algo>
"#;

const RECEIVE: &str = r#"      <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#;
const COPY: &str = r#"      <step s="1" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#;
const SEND: &str = r#"      <step s="2" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>"#;

#[test]
fn orderings_through_other_gpus_count_and_their_absence_is_a_race() {
    // GPU 1 receives, then sends: GPU 0's second write comes after its first.
    let ordered = ROUND_TRIP.replace("GPU1", &[RECEIVE, COPY, SEND].join("\n"));
    let r = check(&parse_program(&ordered, "t.xml").unwrap());
    assert!(r.is_correct(), "{:?}", r.problems);
    // GPU 1 sends first: nothing orders GPU 0's two writes of o[0].
    let unordered = ROUND_TRIP.replace(
        "GPU1",
        &[
            SEND.replace("s=\"2\"", "s=\"0\""),
            COPY.to_string(),
            RECEIVE.replace("s=\"0\"", "s=\"2\""),
        ]
        .join("\n"),
    );
    let r = check(&parse_program(&unordered, "t.xml").unwrap());
    let races: Vec<&str> = r
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::Race)
        .map(|p| p.message.as_str())
        .collect();
    assert_eq!(
        races,
        ["GPU 0 o[0] is written by GPU 0 tb 0 step 0 (cpy) and written by GPU 0 tb 1 step 1 (cpy) with nothing ordering them"],
        "{:?}",
        r.problems
    );
}

fn parse_err(text: &str) -> String {
    match parse_program(text, "t.xml") {
        Ok(_) => panic!("should be rejected:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_hand_written_all_gather_verifies_and_round_trips_byte_for_byte() {
    let p = parse_program(SMALL, "t.xml").unwrap();
    let r = check(&p);
    assert!(r.is_correct(), "{:?}", r.problems);
    assert_eq!((r.steps, r.messages), (6, 2));
    assert_eq!(write_program(&p), SMALL);
}

#[test]
fn bad_files_name_the_element_and_the_reason() {
    let cases = [
        (SMALL.replacen(" cnt=\"1\"", "", 1), "t.xml:4:7: <step s=\"0\"> in GPU 0 tb 0: missing attribute 'cnt'"),
        (SMALL.replacen("type=\"r\"", "type=\"rx\"", 1), "t.xml:5:7: <step s=\"1\"> in GPU 0 tb 0: unknown instruction type 'rx' (known: s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)"),
        (SMALL.replacen("send=\"1\"", "send=\"5\"", 1), "t.xml:3:5: <tb id=\"0\"> on GPU 0: send peer 5 is out of range: -1 or a GPU of 0..1"),
        (SMALL.replacen("recv=\"1\"", "recv=\"0\"", 1), "recv peer 0 is the threadblock's own GPU"),
        (SMALL.replacen("<tb id=\"0\" send=\"0\"", "<tb id=\"1\" send=\"0\"", 1), "<gpu id=\"1\">: threadblock 0 is missing (ids must be 0..0 without gaps)"),
        (
            SMALL.replacen("<gpu id=\"1\"", "<gpu id=\"0\"", 1).replacen("send=\"0\" recv=\"0\"", "send=\"1\" recv=\"1\"", 1),
            "t.xml:9:3: <gpu id=\"0\">: duplicate GPU id (first at 2:3)",
        ),
        (SMALL.replacen("s=\"1\" type", "s=\"2\" type", 1), "step number 2 is out of order"),
        (
            SMALL.replacen("depid=\"-1\" deps=\"-1\"", "depid=\"3\" deps=\"0\"", 1),
            "t.xml:4:7: <step s=\"0\"> in GPU 0 tb 0: depid 3 names no threadblock (GPU 0 has 1)",
        ),
        (SMALL.replacen("depid=\"-1\" deps", "depid=\"0\" deps", 1), "depid 0 with deps -1: a dependency names a threadblock and a step"),
        (SMALL.replacen("proto=\"Simple\"", "proto=\"Fast\"", 1), "unknown protocol 'Fast'"),
        (SMALL.replacen("srcbuf=\"i\"", "srcbuf=\"x\"", 1), "srcbuf is 'x'; it must be i, o or s"),
        (SMALL.replacen("</tb>", "", 1), "t.xml:"),
        // Counts are held to the executor's C int, and ngpus to the GPUs the file holds,
        // before anything is allocated for them.
        (
            SMALL.replacen("cnt=\"1\"", "cnt=\"4294967296\"", 1),
            "t.xml:4:7: <step s=\"0\"> in GPU 0 tb 0: cnt: '4294967296' must be a whole number from -2147483647 to 2147483647",
        ),
        (SMALL.replacen("ngpus=\"2\"", "ngpus=\"3\"", 1), "t.xml:1:1: <algo>: ngpus is 3 but the file has 2 <gpu> element(s)"),
        (SMALL.replacen("srcoff=\"0\"", "srcoff=\"-9223372036854775808\"", 1), "srcoff: '-9223372036854775808' must be a whole number from"),
        (SMALL.replacen("type=\"r\"", "type=\"\x1b[2J\"", 1), "unknown instruction type '\\u{1b}[2J'"),
        (SMALL.replacen("maxBytes=\"0\"", "maxBytes=\"9223372036854775808\"", 1), "<algo>: maxBytes: '9223372036854775808' must be a byte count"),
        // One document: nothing after </algo>.
        (format!("{SMALL}<algo/>"), "t.xml:17:1: a second root element <algo>"),
        (format!("{SMALL}x"), "t.xml:17:1: text after the root element: 'x'"),
    ];
    for (text, want) in cases {
        let err = parse_err(&text);
        assert!(err.contains(want), "got: {err}\nwant: {want}");
    }
    let duplicate_tb = SMALL.replacen(
        "    </tb>\n  </gpu>\n  <gpu id=\"1\"",
        "    </tb>\n    <tb id=\"0\" send=\"-1\" recv=\"-1\" chan=\"0\"/>\n  </gpu>\n  <gpu id=\"1\"",
        1,
    );
    let err = parse_err(&duplicate_tb);
    assert!(
        err.contains("t.xml:8:5: <tb id=\"0\"> on GPU 0: duplicate threadblock id (first at 3:5)"),
        "{err}"
    );
}

#[test]
fn unknown_attributes_and_elements_are_kept_or_skipped() {
    let text = SMALL
        .replacen("cnt=\"1\"", "cnt=\"1\" note=\"fused\"", 1)
        .replacen("<algo ", "<algo redop=\"sum\" ", 1)
        .replacen(
            "  </gpu>\n  <gpu id=\"1\"",
            "    <comment>x</comment>\n  </gpu>\n  <gpu id=\"1\"",
            1,
        );
    let p = parse_program(&text, "t.xml").unwrap();
    assert_eq!(p.extra, [("redop".to_string(), "sum".to_string())]);
    let written = write_program(&p);
    assert!(written.contains("note=\"fused\"") && written.contains("redop=\"sum\""));
    assert_eq!(parse_program(&written, "again").unwrap(), p);
    assert!(check(&p).is_correct());
}

fn arb_step(tbs: usize) -> impl Strategy<Value = Step> {
    let instr = prop::sample::select(Instr::ALL.to_vec());
    let buf = prop::sample::select(vec![Buf::Input, Buf::Output, Buf::Scratch]);
    (
        instr,
        buf.clone(),
        -2i64..6,
        buf,
        -2i64..6,
        0u32..3,
        prop::option::of((0..tbs + 1, 0usize..5)),
        any::<bool>(),
    )
        .prop_map(|(instr, sb, so, db, dof, count, dep, has_dep)| Step {
            dep: dep.map(|(tb, step)| Dep { tb, step }),
            has_dep,
            ..Step::new(instr, (sb, so), (db, dof), count)
        })
}

fn arb_program() -> impl Strategy<Value = Program> {
    (1usize..4).prop_flat_map(|n| {
        let tb = (
            prop::option::of(0..n + 1),
            prop::option::of(0..n + 1),
            0usize..2,
            prop::collection::vec(arb_step(3), 0..5),
        )
            .prop_map(|(send, recv, channel, steps)| Threadblock {
                send,
                recv,
                channel,
                steps,
                extra: Vec::new(),
            });
        let gpu = (
            0usize..5,
            0usize..5,
            0usize..3,
            prop::collection::vec(tb, 0..3),
        )
            .prop_map(|(i, o, s, threadblocks)| Gpu {
                input_chunks: i,
                output_chunks: o,
                scratch_chunks: s,
                threadblocks,
                extra: Vec::new(),
            });
        let coll = prop::sample::select(vec![
            "allgather",
            "allreduce",
            "broadcast",
            "reducescatter",
            "alltoall",
            "gather",
            "custom",
        ]);
        (
            prop::collection::vec(gpu, n),
            coll,
            1usize..5,
            any::<bool>(),
        )
            .prop_map(move |(gpus, coll, chunks, inplace)| Program {
                name: "random".into(),
                collective: coll.into(),
                root: None,
                proto: Proto::LL,
                nchannels: 2,
                nchunksperloop: chunks * n,
                inplace,
                outofplace: !inplace,
                min_bytes: Some(0),
                max_bytes: Some(1 << 20),
                gpus,
                extra: Vec::new(),
                inferred: Vec::new(),
                syntax_breaks: Vec::new(),
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_never_panic_and_round_trip_when_they_parse(p in arb_program()) {
        let report = verify(&p, &VerifyOptions::default());
        let _ = report.is_correct();
        let topo = parse_spec(&format!("fc:{}", p.gpus.len().max(2)), &SpecDefaults::default()).unwrap();
        let _ = simulate_program(&topo, &p, 1 << 20);
        let text = write_program(&p);
        if let Ok(again) = parse_program(&text, "random") {
            prop_assert_eq!(again, p);
        }
    }
}
