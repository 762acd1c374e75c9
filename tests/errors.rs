//! Typed errors: a refusal says, in fields a program can read, which input was wrong,
//! which name or value it had and what was allowed, or which figure passed which limit.

use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind};
use tacos::msccl::{lower, Limits, LowerOptions, Profile, Proto, Target};
use tacos::synth::{synthesize, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults};
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
    let schedule = synthesize(&t, &collective, &SynthOptions { seed: 0 }).unwrap();
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
