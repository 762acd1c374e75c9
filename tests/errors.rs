//! Typed errors: a refusal says, in fields a program can read, which input was wrong,
//! which name or value it had and what was allowed, or which figure passed which limit.

use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::compile::{CompileOptions, Placements, ProtoChoice, SizeRange};
use tacos::error::FileFormat;
use tacos::msccl::limits::{check as check_limits, LimitKind};
use tacos::msccl::{lower, Dep, Element, Limits, LowerOptions, Profile, Proto, Target};
use tacos::pipeline::{program, Chunks, Options, Request};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::units::format_size;
use tacos::Error;

fn spec_error(spec: &str) -> Error {
    parse_spec(spec, &SpecDefaults::default()).unwrap_err()
}

/// The fields of an `Unknown`, or a panic naming what came instead.
fn unknown(e: Error) -> (&'static str, String, Vec<&'static str>) {
    match e {
        Error::Unknown { what, given, known } => (what, given, known),
        other => panic!("not Unknown: {other:?}"),
    }
}

#[test]
fn an_unknown_target_lists_the_known_ones() {
    let (what, given, known) = unknown("executr".parse::<Profile>().unwrap_err());
    assert_eq!((what, given.as_str()), ("target", "executr"));
    // Every profile the library has, each of which parses back.
    assert_eq!(known.len(), Profile::ALL.len());
    for name in &known {
        assert!(name.parse::<Profile>().is_ok(), "{name}");
    }
    assert!(known.contains(&"executor"), "{known:?}");
}

#[test]
fn unknown_names_of_every_list_are_typed() {
    let cases: [(Error, &str, &str, &str); 4] = [
        (
            "allshuffle".parse::<CollectiveKind>().unwrap_err(),
            "collective",
            "allshuffle",
            "allreduce",
        ),
        (
            "LL64".parse::<Proto>().unwrap_err(),
            "protocol",
            "LL64",
            "LL128",
        ),
        (
            "spiral".parse::<Baseline>().unwrap_err(),
            "baseline",
            "spiral",
            "ring",
        ),
        (spec_error("preset:dgx9"), "preset", "dgx9", "dgx1"),
    ];
    for (e, what, given, one_known) in cases {
        let (w, g, known) = unknown(e);
        assert_eq!((w, g.as_str()), (what, given));
        assert!(known.contains(&one_known), "{what}: {known:?}");
    }
}

#[test]
fn an_unknown_builder_in_a_spec_names_the_builder() {
    let (what, given, known) = unknown(spec_error("blob:4,bw=10"));
    assert_eq!((what, given.as_str()), ("builder", "blob"));
    assert!(known.contains(&"ring:N"), "{known:?}");
    // Without the NAME: form it may have been meant as a file.
    let (what, given, _) = unknown(spec_error("no-such-topology"));
    assert_eq!(
        (what, given.as_str()),
        ("topology file or builder", "no-such-topology")
    );
}

#[test]
fn a_bad_spec_option_value_names_the_option_and_the_value() {
    match spec_error("ring:4,bw=-2") {
        Error::Invalid {
            input,
            value,
            allowed,
        } => {
            assert_eq!(input, "bw= in 'ring:4,bw=-2'");
            assert_eq!(value, "-2");
            assert!(allowed.starts_with("positive numbers"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_zero_limit_override_names_the_flag() {
    let zero = tacos::msccl::LimitOverrides {
        max_channels: Some(0),
        ..Default::default()
    };
    match Target::with_overrides(Profile::Executor, &zero) {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!((input.as_str(), value.as_str()), ("--max-channels", "0"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_zero_size_collective_is_an_invalid_size() {
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    match Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 0) {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!((input.as_str(), value.as_str()), ("size", "0"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_topology_past_the_npu_limit_states_both_figures() {
    // 8192 x 4096 = 2^25 NPUs, twice the 2^24 a built topology may have.
    match spec_error("mesh:8192x4096") {
        Error::Limit {
            what, value, limit, ..
        } => assert_eq!((what, value, limit), ("NPUs", 1 << 25, 1 << 24)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lowering_with_more_instances_than_channels_states_the_limit_and_the_figure() {
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let collective = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
    let schedule = synthesize(&t, &collective, &SynthOptions::seeded(0)).unwrap();
    let options = LowerOptions {
        instances: 3,
        target: Target {
            limits: Limits {
                max_channels: 2,
                ..Limits::default()
            },
            ..Target::default()
        },
        ..LowerOptions::default()
    };
    match lower(&schedule, &t, &options) {
        Err(Error::Limit {
            what, value, limit, ..
        }) => assert_eq!((what, value, limit), ("channels", 3, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn failing_an_npu_the_topology_lacks_names_it_and_the_range() {
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    match t.fail_npus(&[4]) {
        Err(Error::Invalid {
            input,
            value,
            allowed,
        }) => {
            assert_eq!((input.as_str(), value.as_str()), ("failed NPU", "4"));
            assert!(allowed.ends_with("0..3"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

/// A ring:4 All-Gather of 1 MiB with `k` chunks per NPU.
fn ring_all_gather(k: usize) -> (tacos::topology::Topology, tacos::schedule::Schedule) {
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let collective = Collective::over_all(&t, CollectiveKind::AllGather, None, k, 1 << 20).unwrap();
    let schedule = synthesize(&t, &collective, &SynthOptions::seeded(0)).unwrap();
    (t, schedule)
}

fn with_limits(limits: Limits) -> LowerOptions {
    LowerOptions {
        target: Target {
            limits,
            ..Target::default()
        },
        ..LowerOptions::default()
    }
}

#[test]
fn a_lowering_past_the_steps_per_threadblock_names_the_limit_the_figure_and_the_gpu() {
    // Every rank of a ring All-Gather receives 3 chunks and sends some: with one step per
    // threadblock no arrangement fits, however many channels share the steps out.
    let (t, schedule) = ring_all_gather(1);
    let options = with_limits(Limits {
        max_steps_per_tb: 1,
        ..Limits::default()
    });
    let refused = lower(&schedule, &t, &options).unwrap_err();
    // What fewer chunks may cure, unlike a wrong input.
    assert!(refused.is_limit());
    match refused {
        Error::TargetLimit {
            target,
            violation,
            context,
        } => {
            assert!(target.starts_with("executor"), "{target}");
            assert!(target.contains("max 1 steps"), "{target}");
            assert!(violation.limit < violation.value, "{violation:?}");
            let gpu = violation.gpu.expect("a GPU is named");
            assert!(gpu < 4, "{violation:?}");
            // Spreading over channels stops at a count past another limit, or on the
            // steps themselves: each of which the limits set.
            let limits = &options.target.limits;
            let expected = [
                (LimitKind::StepsPerTb, limits.max_steps_per_tb),
                (LimitKind::Tbs, limits.max_tbs),
                (LimitKind::TbsPerChannel, limits.max_tbs_per_channel),
                (LimitKind::ElementsPerRank, limits.max_elements_per_rank),
            ]
            .into_iter()
            .find(|(kind, _)| kind.name() == violation.limit_name)
            .map(|(_, limit)| limit)
            .unwrap_or_else(|| panic!("a limit spreading cannot reach: {violation:?}"));
            assert_eq!(violation.limit, expected as u64, "{violation:?}");
            assert!(context.contains("use fewer chunks per NPU"), "{context}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_limit_checker_states_each_figure_and_where_it_is() {
    // A program the lowering made within the limits, then pushed past four of them by
    // hand: each violation carries the figure set and the limit, at the element changed.
    let (t, schedule) = ring_all_gather(1);
    let limits = Limits::default();
    let mut program = lower(&schedule, &t, &LowerOptions::default()).unwrap();
    assert!(check_limits(&program, &limits).is_empty());
    program.nchannels = limits.max_channels + 3;
    let step = &mut program.gpus[2].threadblocks[0].steps[0];
    step.count = limits.max_count + 5;
    let dep_tb = limits.max_dep_tb + 1;
    step.dep = Some(Dep {
        tb: dep_tb,
        step: 0,
    });
    let broken = check_limits(&program, &limits);
    let find = |kind| {
        broken
            .iter()
            .find(|v| v.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} in {broken:?}"))
    };
    let channels = find(LimitKind::Channels);
    assert_eq!(
        (channels.value, channels.limit, channels.element),
        (
            limits.max_channels as u64 + 3,
            limits.max_channels as u64,
            Element::ALGO
        )
    );
    let count = find(LimitKind::Count);
    assert_eq!(
        (count.value, count.limit, count.element),
        (
            u64::from(limits.max_count) + 5,
            u64::from(limits.max_count),
            Element::step(2, 0, 0)
        )
    );
    let dep = find(LimitKind::DepTb);
    assert_eq!(
        (dep.value, dep.limit, dep.element),
        (
            dep_tb as u64,
            limits.max_dep_tb as u64,
            Element::step(2, 0, 0)
        )
    );
    // The same program lowered with more instances than its target has channels for is
    // refused before it is built, by `Limit`; this one, built, by its violations.
    assert_eq!(broken.len(), 3, "{broken:?}");
}

#[test]
fn compile_options_out_of_range_are_invalid_with_the_field_and_value() {
    let backwards = CompileOptions {
        sizes: SizeRange {
            min_bytes: 1 << 20,
            max_bytes: 1 << 10,
        },
        ..CompileOptions::default()
    };
    match backwards.validate() {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!(input, "sizes");
            assert_eq!(
                value,
                format!("{}..{}", format_size(1 << 20), format_size(1 << 10))
            );
        }
        other => panic!("{other:?}"),
    }
    let no_k = CompileOptions {
        chunk_candidates: vec![4, 0],
        ..CompileOptions::default()
    };
    match no_k.validate() {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!(
                (input.as_str(), value.as_str()),
                ("chunk candidates (K)", "[4, 0]")
            )
        }
        other => panic!("{other:?}"),
    }
    match "1000..64KiB".parse::<SizeRange>() {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!(
                (input.as_str(), value),
                ("sizes, the smallest", format_size(1000))
            )
        }
        other => panic!("{other:?}"),
    }
    let (what, given, known) = unknown("fast".parse::<ProtoChoice>().unwrap_err());
    assert_eq!((what, given.as_str()), ("protocol", "fast"));
    for name in known {
        assert!(name.parse::<ProtoChoice>().is_ok(), "{name}");
    }
    let (what, given, known) = unknown("sideways".parse::<Placements>().unwrap_err());
    assert_eq!((what, given.as_str()), ("placement", "sideways"));
    for name in known {
        assert!(name.parse::<Placements>().is_ok(), "{name}");
    }
}

#[test]
fn a_fixed_k_past_the_targets_limits_keeps_the_fields_and_says_what_fits() {
    // ring:4 All-Gather with K = 4: 12 chunks reach every rank, at least 12 receive steps;
    // with 8 steps per threadblock and 2 threadblocks per GPU on one channel nothing fits.
    // K = 1 (3 receives) does: the error says so, and keeps the limit's figures.
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let options = Options {
        chunks: Chunks::Fixed(4),
        lowering: with_limits(Limits {
            max_steps_per_tb: 8,
            max_tbs: 2,
            ..Limits::default()
        }),
        ..Options::default()
    };
    let request = Request::new(CollectiveKind::AllGather, 1 << 20);
    match program(&t, &request, &options) {
        Err(Error::TargetLimit {
            violation, context, ..
        }) => {
            assert!(violation.value > violation.limit, "{violation:?}");
            assert!(context.starts_with("-k 4 does not fit"), "{context}");
            let suggested: usize = context
                .split("(-k ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .and_then(|k| k.parse().ok())
                .unwrap_or_else(|| panic!("no K suggested: {context}"));
            assert!((1..4).contains(&suggested), "{context}");
            let fits = Options {
                chunks: Chunks::Fixed(suggested),
                ..options.clone()
            };
            program(&t, &request, &fits).unwrap();
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let no_seed = Options {
        seeds: Vec::new(),
        ..Options::default()
    };
    match program(&t, &request, &no_seed) {
        Err(Error::Invalid { input, .. }) => assert_eq!(input, "seeds"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn an_in_place_all_to_all_is_an_invalid_placement() {
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let collective = Collective::over_all(&t, CollectiveKind::AllToAll, None, 1, 1 << 20).unwrap();
    let schedule = synthesize(&t, &collective, &SynthOptions::seeded(0)).unwrap();
    let options = LowerOptions {
        in_place: Some(true),
        ..LowerOptions::default()
    };
    let refused = lower(&schedule, &t, &options).unwrap_err();
    assert!(!refused.is_limit());
    match refused {
        Error::Invalid {
            input,
            value,
            allowed,
        } => {
            assert_eq!((input.as_str(), value.as_str()), ("in_place", "true"));
            assert!(allowed.starts_with("false"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_size_range_the_target_refuses_is_invalid_with_the_range() {
    // The older fork refuses minBytes above maxBytes.
    let t = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
    let legacy = Target::new(Profile::MscclLegacy);
    let options = Options {
        chunks: Chunks::Fixed(1),
        lowering: LowerOptions {
            target: legacy.clone(),
            ..LowerOptions::default()
        },
        ..Options::default()
    };
    let request = Request::new(CollectiveKind::AllGather, 1 << 20);
    let verified = program(&t, &request, &options).unwrap().kept;
    match verified.with_size_range(1 << 21, 1 << 20, &legacy) {
        Err(Error::Invalid { input, value, .. }) => {
            assert_eq!(input, "message size range");
            assert_eq!(value, format!("{}..={}", 1 << 21, 1 << 20));
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A topology from JSON text, with the crate's default figures.
fn fabric(json: &str) -> tacos::Result<tacos::topology::Topology> {
    tacos::topology::file::parse(json, "fabric.json", &SpecDefaults::default())
}

#[test]
fn a_switch_with_no_links_is_named() {
    let e = fabric(
        r#"{"npus": 2, "switches": ["idle"], "links": [{"src": 0, "dst": 1, "bidirectional": true}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("switch 'idle'") && e.contains("no link"), "{e}");
}

#[test]
fn a_link_naming_an_unknown_switch_names_it_and_the_known_ones() {
    let e = fabric(
        r#"{"npus": 2, "switches": ["nvs0"], "links": [
        {"src": 0, "dst": "nvs0", "bidirectional": true}, {"src": 1, "dst": "nvs9", "bidirectional": true}]}"#,
    );
    match e {
        Err(Error::Invalid {
            input,
            value,
            allowed,
        }) => {
            assert_eq!(
                (input.as_str(), value.as_str()),
                ("fabric.json: links[1].dst", "nvs9")
            );
            assert!(allowed.ends_with("the file lists: nvs0"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn npus_cut_off_between_switches_are_named_with_their_switch() {
    use tacos::error::Npus;
    // NPUs 0-1 on 'left', 2-3 on 'right', and a link from left to right only: 2 and 3
    // are reached, but reach nothing beyond 'right'.
    let ports = r#"{"src": 0, "dst": "left", "bidirectional": true}, {"src": 1, "dst": "left", "bidirectional": true},
        {"src": 2, "dst": "right", "bidirectional": true}, {"src": 3, "dst": "right", "bidirectional": true}"#;
    let one_way = fabric(&format!(
        r#"{{"npus": 4, "switches": ["left", "right"], "links": [{ports}, {{"src": "left", "dst": "right"}}]}}"#
    ))
    .unwrap();
    let e =
        Collective::over_all(&one_way, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap_err();
    assert_eq!(
        e.to_string(),
        "disconnected topology: NPUs 2-3 (on switch 'right') cannot reach NPU 0"
    );
    match e {
        Error::Disconnected {
            from: Npus::OnSwitch { npus, switch },
            to: Npus::Npu(0),
        } => assert_eq!((npus, switch.as_str()), (vec![2, 3], "switch 'right'")),
        other => panic!("{other:?}"),
    }
    // A Broadcast from NPU 0 goes the link's way; a Reduce to it would have to come back.
    assert!(Collective::over_all(&one_way, CollectiveKind::Broadcast, Some(0), 1, 1 << 20).is_ok());
    let e =
        Collective::over_all(&one_way, CollectiveKind::Reduce, Some(0), 1, 1 << 20).unwrap_err();
    assert_eq!(
        e.to_string(),
        "disconnected topology: NPUs 2-3 (on switch 'right') cannot reach root 0"
    );
    // Without the link the two halves are islands: NPU 0 cannot reach the right one.
    let islands = fabric(&format!(
        r#"{{"npus": 4, "switches": ["left", "right"], "links": [{ports}]}}"#
    ))
    .unwrap();
    let e = islands.check_strongly_connected(&[0, 1, 2, 3]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "disconnected topology: NPU 0 cannot reach NPUs 2-3 (on switch 'right')"
    );
}

#[test]
fn a_route_through_more_switches_than_the_limit_is_refused_naming_the_pair() {
    use tacos::topology::{Link, Topology, MAX_ROUTE_LINKS};
    // NPU 0, a chain of `switches` switches, NPU 1, both ways: a route of switches + 1
    // links, the only one between the two NPUs.
    let chain = |switches: usize| {
        let names = (0..switches).map(|i| format!("s{i}")).collect();
        let mut links = Vec::new();
        let path: Vec<usize> = std::iter::once(0)
            .chain(2..2 + switches)
            .chain(std::iter::once(1))
            .collect();
        for w in path.windows(2) {
            for (src, dst) in [(w[0], w[1]), (w[1], w[0])] {
                links.push(Link {
                    src,
                    dst,
                    bandwidth_gbps: 100.0,
                    latency_us: 0.1,
                });
            }
        }
        Topology::with_switches("chain", 2, names, links).unwrap()
    };
    let longest = chain(MAX_ROUTE_LINKS - 1);
    assert_eq!(longest.try_route(0, 1).unwrap().len(), MAX_ROUTE_LINKS);
    assert_eq!(longest.route(1, 0).unwrap().len(), MAX_ROUTE_LINKS);
    let too_long = chain(MAX_ROUTE_LINKS);
    assert_eq!(too_long.route(0, 1), None);
    assert!(too_long.route_tree(0).route_to(&too_long, 1).is_none());
    match too_long.try_route(1, 0) {
        Err(Error::Limit {
            what,
            value,
            limit,
            context,
        }) => {
            assert_eq!((what, value, limit), ("links", 17, 16));
            assert_eq!(context, "the route from NPU 1 to NPU 0 through switches");
        }
        other => panic!("{other:?}"),
    }
    // The simulator once relayed such a message store-and-forward through the switches
    // and reported a time: a 21-switch chain simulated.
    let message = tacos::sim::Message {
        src: 0,
        dst: 1,
        bytes: 1024.0,
        deps: Vec::new(),
    };
    let e = tacos::sim::simulate_messages(&chain(21), &[message]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the route from NPU 0 to NPU 1 through switches: 22 links, more than the 16 allowed"
    );
}

#[test]
fn a_problem_in_an_msccl_file_names_its_line_column_and_element() {
    let (t, schedule) = ring_all_gather(1);
    let program = lower(&schedule, &t, &LowerOptions::default()).unwrap();
    let xml = tacos::msccl::write_program(&program);
    let broken = xml.replacen(" chan=\"0\"", " chan=\"x\"", 1);
    assert_ne!(broken, xml, "the program names channel 0");
    // The line of the first channel attribute, counted by hand from the text.
    let line = 1 + xml[..xml.find(" chan=\"0\"").unwrap()]
        .matches('\n')
        .count();
    match tacos::msccl::parse_program(&broken, "ring.xml").unwrap_err() {
        Error::File {
            format: FileFormat::Msccl,
            problem,
        } => {
            assert_eq!(
                (problem.file.as_str(), problem.line),
                ("ring.xml", Some(line))
            );
            assert!(problem.column.is_some(), "{problem}");
            assert!(
                problem
                    .field
                    .as_deref()
                    .is_some_and(|f| f.starts_with("<tb")),
                "{problem}"
            );
            assert!(problem.problem.contains("chan=\"x\""), "{problem}");
        }
        other => panic!("not an MSCCL file's problem: {other:?}"),
    }
}

#[test]
fn a_plan_the_verifier_refuses_names_the_rank_threadblock_and_operation() {
    let (t, schedule) = ring_all_gather(1);
    let mut plan =
        tacos::mscclpp::lower(&schedule, &t, &tacos::mscclpp::PlanOptions::default()).unwrap();
    let options = tacos::mscclpp::VerifyOptions::default();
    tacos::mscclpp::verify(&plan, &options).unwrap();
    let gpu = 2;
    let tb = plan.gpus[gpu].threadblocks.len() - 1;
    let op = plan.gpus[gpu].threadblocks[tb].ops.len() - 1;
    plan.gpus[gpu].threadblocks[tb].ops[op].name = "teleport".into();
    match tacos::mscclpp::verify(&plan, &options).unwrap_err() {
        Error::Plan {
            rank,
            threadblock,
            op: at,
            problem,
        } => {
            assert_eq!(
                (rank, threadblock, at),
                (Some(gpu), Some(tb), Some(op)),
                "{problem}"
            );
            assert!(problem.contains("'teleport'"), "{problem}");
        }
        other => panic!("not a plan's problem: {other:?}"),
    }
}

#[test]
fn a_schedule_the_checker_refuses_names_the_transfer() {
    let (t, mut schedule) = ring_all_gather(1);
    // A transfer shortened below its link's time: alpha + size / bandwidth.
    let i = schedule.transfers.len() / 2;
    let late = schedule.transfers[i].end_ps;
    schedule.transfers[i].end_ps = late - 1;
    match tacos::schedule::check(&schedule, &t).unwrap_err() {
        Error::Schedule { transfer, problem } => {
            assert_eq!(transfer, Some(i), "{problem}");
        }
        other => panic!("not a schedule's problem: {other:?}"),
    }
}

#[test]
fn a_baseline_that_does_not_apply_names_itself() {
    let t = parse_spec("ring:6", &SpecDefaults::default()).unwrap();
    let c = Collective::over_all(&t, CollectiveKind::AllGather, None, 1, 1 << 20).unwrap();
    match Baseline::Rhd.schedule(&t, c.spec()).unwrap_err() {
        Error::Baseline { baseline, problem } => {
            assert_eq!(baseline, "rhd");
            assert!(problem.contains("power-of-two"), "{problem}");
        }
        other => panic!("not a baseline's problem: {other:?}"),
    }
}

#[test]
fn a_compiled_directory_that_is_not_one_is_named_as_the_path() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("errors-not-compiled");
    std::fs::create_dir_all(&dir).unwrap();
    match tacos::compile::check_dir(&dir).unwrap_err() {
        Error::Compile { path, problem } => {
            assert_eq!(path.as_deref(), Some(dir.as_path()), "{problem}");
        }
        other => panic!("not a compile problem: {other:?}"),
    }
}
