//! The loader rules (`msccl::rules`) against probe programs at each limit of each target and
//! one past it, each built from a small correct program padded with nops, threadblocks or
//! GPUs: the probe at the limit loads and computes, the one past it breaks exactly the rule
//! probed, at the first element past the limit. The limits are the loaders' own
//! (../shared/reference/msccl-xml.md): 64 or 256 steps per threadblock, 64, 1,024 or 216
//! threadblocks per GPU, 4,095 XML elements per rank (every loader, the older fork too), 32 threadblocks per channel,
//! cnt below 72, int8 dependency targets, int16 offsets.

use tacos::msccl::limits::LimitKind;
use tacos::msccl::rules::{self, Element, Rule, RuleBreak};
use tacos::msccl::{verify, Buf, Dep, Gpu, Instr, Profile, Program, Proto, Step, Target};
use tacos::msccl::{Threadblock, VerifyOptions};

fn step(instr: Instr, src: (Buf, i64), dst: (Buf, i64), count: usize) -> Step {
    Step::new(instr, src, dst, count as u32)
}

fn nop() -> Step {
    step(Instr::Nop, (Buf::Input, -1), (Buf::Output, -1), 0)
}

fn tb(send: Option<usize>, recv: Option<usize>, steps: Vec<Step>) -> Threadblock {
    Threadblock {
        send,
        recv,
        channel: 0,
        steps,
        extra: Vec::new(),
    }
}

fn gpu(input: usize, output: usize, threadblocks: Vec<Threadblock>) -> Gpu {
    Gpu {
        input_chunks: input,
        output_chunks: output,
        scratch_chunks: 0,
        threadblocks,
        extra: Vec::new(),
    }
}

fn program(collective: &str, chunks: usize, gpus: Vec<Gpu>) -> Program {
    Program {
        name: "probe".into(),
        collective: collective.into(),
        root: None,
        proto: Proto::LL,
        nchannels: 1,
        nchunksperloop: chunks,
        inplace: false,
        outofplace: true,
        min_bytes: Some(0),
        max_bytes: Some(1 << 30),
        gpus,
        extra: Vec::new(),
        inferred: Vec::new(),
        syntax_breaks: Vec::new(),
    }
}

use Buf::{Input as I, Output as O};

/// A 2-GPU All-Gather moving `c` chunks per step: each GPU sends its input, receives the
/// other's into its half of the output and copies its own into the other half.
fn all_gather_pair(c: usize) -> Program {
    let gpus = (0..2)
        .map(|g| {
            let other = 1 - g;
            let steps = vec![
                step(Instr::Send, (I, 0), (O, 0), c),
                step(Instr::Recv, (I, 0), (O, (other * c) as i64), c),
                step(Instr::Copy, (I, 0), (O, (g * c) as i64), c),
            ];
            gpu(c, 2 * c, vec![tb(Some(other), Some(other), steps)])
        })
        .collect();
    program("allgather", 2 * c, gpus)
}

/// A Broadcast from GPU 0 to `receivers` GPUs, each over its own threadblock of GPU 0, all
/// sending on channel 0 (threadblock `receivers` copies the root's own chunk).
fn fan_out(receivers: usize) -> Program {
    let mut root: Vec<Threadblock> = (1..=receivers)
        .map(|r| tb(Some(r), None, vec![step(Instr::Send, (I, 0), (O, 0), 1)]))
        .collect();
    root.push(tb(None, None, vec![step(Instr::Copy, (I, 0), (O, 0), 1)]));
    let mut gpus = vec![gpu(1, 1, root)];
    for _ in 1..=receivers {
        let recv = step(Instr::Recv, (I, 0), (O, 0), 1);
        gpus.push(gpu(1, 1, vec![tb(None, Some(0), vec![recv])]));
    }
    program("broadcast", 1, gpus)
}

/// A Reduce to GPU 0 from `senders` GPUs, each received by its own threadblock of GPU 0,
/// all receiving on channel 0; threadblock t adds its sender's chunk after threadblock t - 1.
fn fan_in(senders: usize) -> Program {
    let root = (0..senders)
        .map(|t| {
            let src = if t == 0 { (I, 0) } else { (O, 0) };
            let mut rrc = step(Instr::RecvReduceCopy, src, (O, 0), 1);
            rrc.dep = (t > 0).then_some(Dep { tb: t - 1, step: 0 });
            rrc.has_dep = t + 1 < senders;
            tb(None, Some(t + 1), vec![rrc])
        })
        .collect();
    let mut gpus = vec![gpu(1, 1, root)];
    for _ in 1..=senders {
        let send = step(Instr::Send, (I, 0), (O, 0), 1);
        gpus.push(gpu(1, 1, vec![tb(Some(0), None, vec![send])]));
    }
    program("reduce", 1, gpus)
}

fn targets() -> [Target; 3] {
    Profile::ALL.map(Target::new)
}

/// The program loads in the target and computes its collective.
fn assert_passes(p: &Program, target: &Target, what: &str) {
    let breaks = rules::check(p, target);
    assert!(breaks.is_empty(), "{what} on {target}: {breaks:#?}");
    let options = VerifyOptions {
        target: target.clone(),
        ..VerifyOptions::default()
    };
    let report = verify(p, &options);
    assert!(report.is_correct(), "{what} on {target}: {:#?}", report);
}

/// The program's breaks, checked to be some and all of `rule`.
fn only(p: &Program, target: &Target, rule: Rule) -> Vec<RuleBreak> {
    let breaks = rules::check(p, target);
    assert!(
        !breaks.is_empty() && breaks.iter().all(|b| b.rule == rule),
        "{target}: wanted only {rule:?}, got {breaks:#?}"
    );
    breaks
}

fn elements(p: &Program, g: usize) -> usize {
    let gpu = &p.gpus[g];
    1 + p.gpus.len()
        + gpu.threadblocks.len()
        + gpu
            .threadblocks
            .iter()
            .map(|t| t.steps.len())
            .sum::<usize>()
}

#[test]
fn the_probes_bases_load_and_compute_everywhere() {
    for target in targets() {
        assert_passes(&all_gather_pair(1), &target, "all-gather pair");
        assert_passes(&fan_out(3), &target, "fan-out");
        assert_passes(&fan_in(3), &target, "fan-in");
    }
}

#[test]
fn steps_per_threadblock_at_and_past_the_limit() {
    for target in targets() {
        let limit = target.limits.max_steps_per_tb;
        let mut p = all_gather_pair(1);
        p.gpus[0].threadblocks[0].steps.resize(limit, nop());
        assert_passes(&p, &target, &format!("{limit} steps"));
        p.gpus[0].threadblocks[0].steps.push(nop());
        let b = only(&p, &target, Rule::Limit(LimitKind::StepsPerTb));
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].element, Element::step(0, 0, limit), "{target}");
        assert!(b[0].message.contains(&format!("{} steps", limit + 1)));
    }
    assert_eq!(Target::new(Profile::Executor).limits.max_steps_per_tb, 64);
    assert_eq!(
        Target::new(Profile::Executor256).limits.max_steps_per_tb,
        256
    );
}

#[test]
fn threadblocks_per_gpu_at_and_past_the_limit() {
    for target in targets() {
        let limit = target.limits.max_tbs;
        let mut p = all_gather_pair(1);
        p.gpus[0]
            .threadblocks
            .resize(limit, tb(None, None, Vec::new()));
        assert_passes(&p, &target, &format!("{limit} threadblocks"));
        p.gpus[0].threadblocks.push(tb(None, None, Vec::new()));
        let b = only(&p, &target, Rule::Limit(LimitKind::Tbs));
        assert_eq!(b[0].element, Element::tb(0, limit), "{target}");
    }
    let limits = targets().map(|t| t.limits.max_tbs);
    assert_eq!(limits, [64, 1024, 216]);
}

/// Pads GPU 0 with nops (in its last threadblock while it has room, then in new
/// threadblocks without peers) until its part of the file has `n` elements.
fn pad_elements(p: &mut Program, target: &Target, n: usize) {
    while elements(p, 0) < n {
        let tbs = &mut p.gpus[0].threadblocks;
        match tbs.last_mut() {
            Some(last) if last.steps.len() < target.limits.max_steps_per_tb => {
                last.steps.push(nop())
            }
            _ => tbs.push(tb(None, None, Vec::new())),
        }
    }
}

#[test]
fn elements_per_rank_at_and_past_the_limit() {
    for target in targets() {
        let limit = target.limits.max_elements_per_rank;
        let mut p = all_gather_pair(1);
        pad_elements(&mut p, &target, limit);
        assert_eq!(elements(&p, 0), limit);
        assert_passes(&p, &target, &format!("{limit} elements"));
        pad_elements(&mut p, &target, limit + 1);
        let b = only(&p, &target, Rule::Limit(LimitKind::ElementsPerRank));
        assert_eq!(b[0].element, Element::gpu(0), "{target}");
        assert!(b[0].message.contains(&format!("{} elements", limit + 1)));
    }
    let limits = targets().map(|t| t.limits.max_elements_per_rank);
    assert_eq!(limits, [4095, 4095, 4095]);
}

#[test]
fn threadblocks_per_channel_at_and_past_the_limit_both_ways() {
    for target in targets() {
        let limit = target.limits.max_tbs_per_channel;
        assert_eq!(limit, 32);
        for (build, way) in [
            (fan_out as fn(usize) -> Program, "sending"),
            (fan_in, "receiving"),
        ] {
            assert_passes(&build(limit), &target, way);
            let p = build(limit + 1);
            let b = only(&p, &target, Rule::Limit(LimitKind::TbsPerChannel));
            assert_eq!(b.len(), 1);
            assert_eq!(b[0].element, Element::tb(0, limit), "{target} {way}");
            assert!(b[0].message.contains(way), "{}", b[0].message);
        }
    }
}

#[test]
fn chunk_counts_at_and_past_the_limit() {
    for target in targets() {
        assert_eq!(target.limits.max_count, 71);
        assert_passes(&all_gather_pair(71), &target, "cnt 71");
        let b = only(&all_gather_pair(72), &target, Rule::Limit(LimitKind::Count));
        let at: Vec<Element> = b.iter().map(|b| b.element).collect();
        assert_eq!(at, [Element::step(0, 0, 0), Element::step(1, 0, 0)]);
    }
}

/// GPU 0's copy moves to threadblock `d` (after empty ones) and its send waits for it.
fn depending_on(d: usize) -> Program {
    let mut p = all_gather_pair(1);
    let tbs = &mut p.gpus[0].threadblocks;
    let mut copy = tbs[0].steps.pop().unwrap();
    copy.has_dep = true;
    tbs[0].steps[0].dep = Some(Dep { tb: d, step: 0 });
    tbs.resize(d, tb(None, None, Vec::new()));
    tbs.push(tb(None, None, vec![copy]));
    p
}

#[test]
fn dependency_targets_at_and_past_int8() {
    for target in targets() {
        assert_eq!(target.limits.max_dep_tb, 127);
        let at = depending_on(127);
        let dep_breaks = |p: &Program| -> Vec<RuleBreak> {
            rules::check(p, &target)
                .into_iter()
                .filter(|b| b.rule == Rule::Limit(LimitKind::DepTb))
                .collect()
        };
        assert!(dep_breaks(&at).is_empty(), "{target}");
        let past = dep_breaks(&depending_on(128));
        assert_eq!(past.len(), 1, "{target}");
        assert_eq!(past[0].element, Element::step(0, 0, 0));
        if target.limits.max_tbs >= 129 {
            assert_passes(&at, &target, "a dependency on tb 127");
            only(&depending_on(128), &target, Rule::Limit(LimitKind::DepTb));
        } else {
            // 128 threadblocks are past this target's threadblock limit too.
            let rules: Vec<Rule> = rules::check(&at, &target).iter().map(|b| b.rule).collect();
            assert_eq!(rules, [Rule::Limit(LimitKind::Tbs)]);
            assert!(verify(&at, &VerifyOptions::default()).computes());
        }
    }
}

/// GPU 0 copies its chunk to the output through scratch slot `x`.
fn through_scratch(x: i64) -> Program {
    let mut p = all_gather_pair(1);
    let g = &mut p.gpus[0];
    g.scratch_chunks = x as usize + 1;
    let steps = &mut g.threadblocks[0].steps;
    steps[2] = step(Instr::Copy, (I, 0), (Buf::Scratch, x), 1);
    steps.push(step(Instr::Copy, (Buf::Scratch, x), (O, 0), 1));
    p
}

#[test]
fn offsets_at_and_past_int16() {
    for target in targets() {
        assert_eq!(target.limits.max_offset, 32767);
        assert_passes(&through_scratch(32767), &target, "offset 32767");
        let b = only(
            &through_scratch(32768),
            &target,
            Rule::Limit(LimitKind::Offset),
        );
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].element, Element::step(0, 0, 2), "{target}");
    }
}

#[test]
fn nops_carrying_dependencies_need_a_dependency_on_the_step_they_lead_to() {
    let mut p = depending_on(1);
    let tb0 = &mut p.gpus[0].threadblocks[0];
    // The send's dependency moves to a nop before it: the executor refuses the chain.
    let dep = tb0.steps[0].dep.take().unwrap();
    tb0.steps.insert(0, Step::nop(dep));
    for target in targets() {
        let b = only(&p, &target, Rule::DependencyChain);
        assert_eq!(b[0].element, Element::step(0, 0, 1));
    }
    // With the dependency on the step as well, the chain is accepted.
    p.gpus[0].threadblocks[0].steps[1].dep = Some(dep);
    assert_passes(&p, &Target::default(), "a nop chain");
}

#[test]
fn offsets_outside_the_declared_buffers_are_refused_where_the_loader_checks() {
    let mut p = all_gather_pair(1);
    p.gpus[1].threadblocks[0].steps[1].dst_off = 2;
    for target in targets() {
        let b = only(&p, &target, Rule::DeclaredOffset);
        assert_eq!(b[0].element, Element::step(1, 0, 1));
        assert!(b[0].message.contains("o_chunks"), "{}", b[0].message);
    }
    // The loaders check no operand of rrc: a fan-in whose first rrc reads i[5] loads (and
    // is wrong).
    let mut p = fan_in(2);
    p.gpus[0].threadblocks[0].steps[0].src_off = 5;
    assert!(rules::check(&p, &Target::default()).is_empty());
    assert!(!verify(&p, &VerifyOptions::default()).computes());
}

#[test]
fn the_older_fork_checks_chunk_counts_byte_ranges_and_thread_counts() {
    let legacy = Target::new(Profile::MscclLegacy);
    let executor = Target::default();
    // All-Gather input chunks times the GPUs must be nchunksperloop.
    let mut p = all_gather_pair(1);
    p.gpus[1].input_chunks = 2;
    let b = only(&p, &legacy, Rule::ChunkCounts);
    assert_eq!(b[0].element, Element::gpu(1));
    assert!(rules::check(&p, &executor).is_empty());
    let mut p = all_gather_pair(1);
    p.min_bytes = Some(2048);
    p.max_bytes = Some(1024);
    only(&p, &legacy, Rule::ByteRange);
    assert!(rules::check(&p, &executor).is_empty());
    let mut p = all_gather_pair(1);
    p.extra.push(("nthreads".into(), "48".into()));
    only(&p, &legacy, Rule::Threads);
    p.extra[0].1 = "512".into();
    assert!(rules::check(&p, &legacy).is_empty());
}

#[test]
fn attribute_values_past_the_parsers_buffers_are_refused() {
    let mut p = all_gather_pair(1);
    p.name = "n".repeat(255);
    assert!(rules::check(&p, &Target::default()).is_empty());
    p.name.push('n');
    let b = only(&p, &Target::default(), Rule::AttributeLength);
    assert_eq!(b[0].element, Element::ALGO);
    // Escaped as written: 52 ampersands take 260 bytes.
    p.name = "&".repeat(52);
    only(&p, &Target::default(), Rule::AttributeLength);
}

#[test]
fn one_break_per_rule_and_gpu_counts_the_others() {
    // GPU 0 sends and receives without peers: two peerless steps, one break naming the first.
    let mut p = all_gather_pair(1);
    let tb = &mut p.gpus[0].threadblocks[0];
    (tb.send, tb.recv) = (None, None);
    let b = only(&p, &Target::default(), Rule::PeerlessTransfer);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].element, Element::step(0, 0, 0));
    assert!(
        b[0].message.ends_with("(and 1 more on GPU 0)"),
        "{}",
        b[0].message
    );
}

#[test]
fn a_peer_that_is_the_gpu_itself_is_refused() {
    let mut p = all_gather_pair(1);
    p.gpus[0].threadblocks[0].send = Some(0);
    let b = rules::check(&p, &Target::default());
    assert!(
        b.iter()
            .any(|b| b.rule == Rule::Peer && b.element == Element::tb(0, 0)),
        "{b:#?}"
    );
}

#[test]
fn collective_names_follow_each_loaders_spelling() {
    let (executor, legacy) = (Target::default(), Target::new(Profile::MscclLegacy));
    let named = |coll: &str| {
        let mut p = all_gather_pair(1);
        p.collective = coll.into();
        p
    };
    let refused = |p: &Program, t: &Target| {
        rules::check(p, t)
            .iter()
            .any(|b| b.rule == Rule::CollectiveName && b.element == Element::ALGO)
    };
    for (coll, by_executor, by_legacy) in [
        ("reducescatter", false, true),
        ("reduce_scatter", true, false),
        ("gather", false, true),
        ("scatter", false, true),
        ("allgather", false, false),
        ("alltoall", false, false),
        ("custom", true, false),
        ("alltoallv", false, true),
        ("nonsense", true, true),
    ] {
        let p = named(coll);
        assert_eq!(refused(&p, &executor), by_executor, "{coll} on executor");
        assert_eq!(refused(&p, &legacy), by_legacy, "{coll} on msccl-legacy");
    }
    let b = rules::check(&named("reduce_scatter"), &executor);
    assert!(
        b[0].message.contains("spells it \"reducescatter\""),
        "{}",
        b[0].message
    );
}

#[test]
fn every_broken_rule_is_listed_with_its_element() {
    // One program breaking four rules at once: all four are reported, <algo>'s first.
    let mut p = all_gather_pair(1);
    p.collective = "reduce_scatter".into();
    p.nchannels = 33;
    p.gpus[0].threadblocks[0].steps.resize(65, nop());
    p.gpus[1].threadblocks[0].steps[0].count = 80;
    let b = rules::check(&p, &Target::default());
    let got: Vec<(Rule, Element)> = b.iter().map(|b| (b.rule, b.element)).collect();
    assert_eq!(
        got,
        [
            (Rule::CollectiveName, Element::ALGO),
            (Rule::Limit(LimitKind::Channels), Element::ALGO),
            (Rule::Limit(LimitKind::StepsPerTb), Element::step(0, 0, 64)),
            (Rule::Limit(LimitKind::Count), Element::step(1, 0, 0)),
        ]
    );
    let json = serde_json::to_value(&b[2]).unwrap();
    assert_eq!(json["rule"], "steps_per_threadblock");
    assert_eq!(
        json["element"],
        serde_json::json!({"gpu": 0, "tb": 0, "step": 64})
    );
}

/// The one break the text `edit` makes of the written pair breaks, after parsing.
fn text_break(edit: impl Fn(&str) -> String) -> RuleBreak {
    let written = tacos::msccl::write_program(&all_gather_pair(1));
    let p = tacos::msccl::parse_program(&edit(&written), "t.xml").unwrap();
    let breaks = rules::check(&p, &Target::default());
    assert_eq!(breaks.len(), 1, "{breaks:#?}");
    // The text's breaks are all the parse adds: the model is the written program's, but
    // for attributes added.
    let mut model = p.clone();
    model.syntax_breaks.clear();
    model.gpus[0].threadblocks[0].steps[0].extra.clear();
    assert_eq!(
        model,
        tacos::msccl::parse_program(&written, "t.xml").unwrap()
    );
    breaks[0].clone()
}

#[test]
fn text_the_loaders_parser_refuses_is_a_break_of_the_element_it_is_in() {
    // The executor's parser (msccl_parser.cc) reads "<?xml" as an element name and stops
    // at the '?' before '>'.
    let b = text_break(|t| format!("<?xml version=\"1.0\"?>\n{t}"));
    assert_eq!((b.rule, b.element), (Rule::XmlSyntax, Element::ALGO));
    assert!(
        b.message.starts_with("t.xml:1:1: an XML declaration"),
        "{}",
        b.message
    );
    // It reads a value from a single quote to the next double quote.
    let b = text_break(|t| t.replacen("cnt=\"1\"", "cnt='1'", 1));
    assert_eq!(
        (b.rule, b.element),
        (Rule::XmlSyntax, Element::step(0, 0, 0))
    );
    assert!(b.message.contains("single-quoted"), "{}", b.message);
    // A tab ends an attribute's name and is not the space it continues after.
    let b = text_break(|t| t.replacen(" chan=\"0\"", "\tchan=\"0\"", 1));
    assert_eq!((b.rule, b.element), (Rule::XmlSyntax, Element::tb(0, 0)));
    // It keeps 16 attributes: a step with 7 more than its 10 drops the last.
    let extra: String = (0..7).map(|i| format!(" x{i}=\"{i}\"")).collect();
    let b = text_break(|t| t.replacen("hasdep=\"0\"", &format!("hasdep=\"0\"{extra}"), 1));
    assert_eq!(
        (b.rule, b.element),
        (Rule::AttributeCount, Element::step(0, 0, 0))
    );
    assert!(
        b.message.contains("17 attributes") && b.message.ends_with("ignores x6"),
        "{}",
        b.message
    );
    // Values go into 255-byte buffers: 256 digits overrun one, whatever number they spell.
    let long = format!("srcoff=\"{}0\"", "0".repeat(255));
    let b = text_break(|t| t.replacen("srcoff=\"0\"", &long, 1));
    assert_eq!(
        (b.rule, b.element),
        (Rule::AttributeLength, Element::step(0, 0, 0))
    );
    assert!(
        b.message.contains("'srcoff' has a value of 256 bytes"),
        "{}",
        b.message
    );
}
