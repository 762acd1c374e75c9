//! The memory estimates of `tacos::budget` against what a counting allocator measures: on
//! small cases of every kind, each estimate is at least half the measured peak (so the
//! limit refuses what would not fit) and at most a few times it (so it does not refuse
//! what would).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tacos::baselines::Baseline;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::pipeline::{self, Request};
use tacos::schedule::{check, check_data_flow};
use tacos::sim::simulate_schedule;
use tacos::synth::{synthesize_concurrent, synthesize_streamed, SynthOptions};
use tacos::topology::{parse_spec, SpecDefaults, Topology};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires it, passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from `System` with `layout`, and the caller's `new_size` is valid for it.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            // Growing in place or by moving: count the larger of old and new while both
            // may exist (a move holds both for a moment).
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(live, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measurement at a time: tests run on threads of one process.
static MEASURING: Mutex<()> = Mutex::new(());

/// Peak heap bytes `work` holds beyond what was live before it.
fn peak_of<T>(work: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = work();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    (out, peak as u64)
}

/// At least half the measured peak, and at most `over` times it.
fn assert_honest(what: &str, estimate: u64, measured: u64, over: u64) {
    println!(
        "{what}: estimate {estimate} B, measured {measured} B, ratio {:.2}",
        estimate as f64 / measured as f64
    );
    assert!(
        estimate >= measured / 2,
        "{what}: estimate {estimate} B is below half of the {measured} B measured"
    );
    assert!(
        estimate <= measured * over,
        "{what}: estimate {estimate} B is over {over} times the {measured} B measured"
    );
}

fn topo(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap()
}

fn spec(topo: &Topology, kind: CollectiveKind, k: usize) -> CollectiveSpec {
    let npus = topo.alive_npus();
    CollectiveSpec {
        kind,
        root: kind.has_root().then_some(npus[0]),
        npus,
        chunks_per_npu: k,
        size_bytes: 1 << 24,
    }
}

const CASES: &[(&str, CollectiveKind, usize)] = &[
    ("mesh:8x8", CollectiveKind::AllGather, 2),
    ("torus:8x8", CollectiveKind::ReduceScatter, 1),
    ("mesh:6x6", CollectiveKind::AllReduce, 2),
    ("hypercube:6", CollectiveKind::Broadcast, 8),
    ("mesh:6x6", CollectiveKind::Gather, 2),
    ("mesh:6x6", CollectiveKind::AllToAll, 1),
    ("mesh:12x12", CollectiveKind::AllToAll, 1),
    ("rfs:2x4x8,bw=200:100:50", CollectiveKind::AllGather, 2),
];

#[test]
fn synthesis_estimates_are_honest() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for &(name, kind, k) in CASES {
        let topo = topo(name);
        let collective = Collective::new(&topo, spec(&topo, kind, k)).unwrap();
        let (synthesis, measured) = peak_of(|| {
            synthesize_concurrent(
                &topo,
                std::slice::from_ref(&collective),
                &SynthOptions::default(),
            )
            .unwrap()
        });
        let estimate =
            tacos::synth::memory::synthesis(&topo, std::slice::from_ref(collective.spec()), false);
        assert_honest(
            &format!("synthesis {kind} on {name}"),
            estimate,
            measured,
            4,
        );
        let schedule = &synthesis.schedules[0];
        let transfers = schedule.transfers.len() as u64;
        let (_, measured) = peak_of(|| check(schedule, &topo).unwrap());
        let estimate = tacos::collective::memory::building(&topo, collective.spec())
            + tacos::schedule::memory::check(collective.spec(), &topo, transfers);
        assert_honest(&format!("check {kind} on {name}"), estimate, measured, 4);
        let (_, measured) = peak_of(|| simulate_schedule(&topo, schedule).unwrap());
        let estimate = tacos::sim::memory::simulation(&topo, transfers);
        assert_honest(
            &format!("simulation {kind} on {name}"),
            estimate,
            measured,
            4,
        );
    }
}

/// A streamed synthesis holds no transfer beyond those in flight: its estimate is the
/// matcher's state and pools, held to the measured peak like the others.
#[test]
fn streamed_synthesis_estimates_are_honest() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let cases = [
        ("mesh:16x16", CollectiveKind::AllGather, 1),
        ("mesh:24x24", CollectiveKind::AllGather, 1),
        ("torus:12x12", CollectiveKind::AllGather, 2),
        ("hypercube:8", CollectiveKind::AllGather, 1),
        ("hypercube:6", CollectiveKind::Broadcast, 8),
        ("preset:dgx-a100,nodes=4", CollectiveKind::AllGather, 1),
    ];
    for (name, kind, k) in cases {
        let topo = topo(name);
        let collective = Collective::new(&topo, spec(&topo, kind, k)).unwrap();
        let (transfers, measured) = peak_of(|| {
            synthesize_streamed(
                &topo,
                &collective,
                &SynthOptions::default(),
                &mut |_| Ok(()),
            )
            .unwrap()
            .transfers
        });
        assert!(transfers > 0);
        let estimate = tacos::synth::memory::streamed_synthesis(&topo, collective.spec());
        assert_honest(&format!("streamed {kind} on {name}"), estimate, measured, 4);
    }
}

#[test]
fn a_whole_synthesis_trial_is_estimated_honestly() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for &(name, kind, k) in CASES {
        let topo = topo(name);
        for simulated in [false, true] {
            let (_, measured) = peak_of(|| {
                let request = Request::new(kind, 1 << 24);
                let checked =
                    pipeline::synthesize(&topo, &request, k, &SynthOptions::seeded(0)).unwrap();
                simulated.then(|| simulate_schedule(&topo, checked.schedule()).unwrap())
            });
            let estimate = tacos::pipeline::memory::synthesis_checked(
                &topo,
                &spec(&topo, kind, k),
                simulated,
                false,
            );
            let what = format!("trial {kind} on {name}, simulated: {simulated}");
            assert_honest(&what, estimate, measured, 4);
        }
    }
}

#[test]
fn baseline_estimates_are_honest() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let cases = [
        ("torus:8x8", Baseline::Ring, CollectiveKind::AllReduce, 2),
        ("mesh:16x16", Baseline::Ring, CollectiveKind::AllReduce, 1),
        ("mesh:8x8", Baseline::RingUni, CollectiveKind::AllGather, 1),
        (
            "hypercube:6",
            Baseline::Rhd,
            CollectiveKind::ReduceScatter,
            1,
        ),
        ("hypercube:5", Baseline::Rhd, CollectiveKind::Broadcast, 2),
        ("mesh:8x8", Baseline::Dbt, CollectiveKind::AllReduce, 1),
        ("mesh:6x6", Baseline::Direct, CollectiveKind::AllToAll, 1),
        (
            "torus:8x8",
            Baseline::Hierarchical,
            CollectiveKind::AllReduce,
            1,
        ),
    ];
    for (name, baseline, kind, k) in cases {
        let topo = topo(name);
        let spec = spec(&topo, kind, k);
        let (_, measured) = peak_of(|| {
            let schedule = baseline.schedule(&topo, &spec).unwrap();
            check_data_flow(&schedule, &topo).unwrap();
            schedule
        });
        let estimate = baseline.memory_estimate(&topo, &spec);
        assert_honest(
            &format!("{baseline} {kind} on {name}"),
            estimate,
            measured,
            4,
        );
    }
}

#[test]
fn topology_estimates_are_honest() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for spec in [
        "fc:300",
        "torus:64x64",
        "switch:200,d=4",
        "preset:dgx-a100,nodes=32",
    ] {
        let (topo, measured) = peak_of(|| topo(spec));
        let estimate = tacos::topology::limits::building_bytes(topo.links().len());
        assert_honest(&format!("building {spec}"), estimate, measured, 4);
    }
}

#[test]
fn a_topology_past_the_memory_limit_is_refused_before_it_is_built() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    // fc:3000 has 8,997,000 links: within MAX_LINKS, but about 700 MB to build.
    let (result, measured) = peak_of(|| {
        let limit = tacos::budget::MemoryLimit::new(64 << 20, tacos::budget::Origin::Caller);
        limit.set_process_default();
        let result = parse_spec("fc:3000", &SpecDefaults::default());
        tacos::budget::MemoryLimit::machine().set_process_default();
        result
    });
    let e = result.unwrap_err();
    assert!(matches!(e, tacos::Error::Limit { .. }), "{e}");
    assert!(e.to_string().contains("8997000 links"), "{e}");
    assert!(
        measured < 1 << 20,
        "{measured} bytes allocated before the refusal"
    );
}

#[test]
fn specs_the_fuzzer_found_too_slow_are_refused_at_the_fuzzers_limit() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    // Each took longer than the fuzzer's 10 s per input: 200,080 and 4,444,444 NPUs.
    for spec in ["dragonfly:4x50020", "torus:4x1111111"] {
        let (result, measured) = peak_of(|| {
            let limit = tacos::budget::MemoryLimit::new(256 << 20, tacos::budget::Origin::Caller);
            limit.set_process_default();
            let result = parse_spec(spec, &SpecDefaults::default());
            tacos::budget::MemoryLimit::machine().set_process_default();
            result
        });
        let e = result.unwrap_err();
        assert!(matches!(e, tacos::Error::Limit { .. }), "{spec}: {e}");
        assert!(
            measured < 1 << 20,
            "{spec}: {measured} bytes allocated before the refusal"
        );
    }
}

/// Through switches the simulator holds, beside its per-message state, each route's links
/// in the queues and the route trees: taken from the limit as routes are found. A direct
/// All-to-All on a star queues every message on its sender's and its receiver's port.
#[test]
fn a_switched_simulation_is_estimated_honestly_with_its_routes() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for name in ["switch:64", "switch:128"] {
        let topo = topo(name);
        let spec = spec(&topo, CollectiveKind::AllToAll, 1);
        let schedule = Baseline::Direct.schedule(&topo, &spec).unwrap();
        let (_, measured) = peak_of(|| simulate_schedule(&topo, &schedule).unwrap());
        let messages = schedule.transfers.len() as u64;
        // Every message crosses two links: up to the switch and down from it.
        let estimate = tacos::sim::memory::simulation(&topo, messages)
            + 2 * messages * tacos::sim::memory::ROUTE_LINK
            + tacos::schedule::memory::route_trees(&topo);
        assert_honest(
            &format!("simulation alltoall on {name}"),
            estimate,
            measured,
            4,
        );
    }
}

/// Routes found one by one are held to the limit as they grow: messages across a
/// 256-NPU ring are routed over up to 128 links each, far past what their count alone
/// says.
#[test]
fn long_routes_are_refused_as_they_are_found() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let topo = topo("ring:256");
    let messages: Vec<tacos::sim::Message> = (0..256)
        .flat_map(|src| {
            (0..256)
                .filter(move |&dst| dst != src)
                .map(move |dst| tacos::sim::Message {
                    src,
                    dst,
                    bytes: 1024.0,
                    deps: Vec::new(),
                })
        })
        .collect();
    let counted = tacos::sim::memory::simulation(&topo, messages.len() as u64);
    let (result, measured) = peak_of(|| {
        let limit = tacos::budget::MemoryLimit::new(2 * counted, tacos::budget::Origin::Caller);
        limit.set_process_default();
        let result = tacos::sim::simulate_messages(&topo, &messages);
        tacos::budget::MemoryLimit::machine().set_process_default();
        result
    });
    let e = result.unwrap_err();
    assert!(
        matches!(e, tacos::Error::Limit { .. }) && e.to_string().contains("links of routes"),
        "{e}"
    );
    assert!(
        measured < 4 * counted,
        "{measured} bytes held before the refusal"
    );
}

/// Random requests through the library's entry points (topology, synthesis with its
/// check, a baseline, the simulator) under a small memory limit: each ends in a result or
/// an error, and what any of them holds at its peak stays within a few times the limit,
/// so no allocation grows outside an estimate the limit saw.
mod under_a_small_limit {
    use super::*;
    use proptest::prelude::*;

    const LIMIT: u64 = 16 << 20;

    /// Proptest cases: `PROPTEST_CASES` when set, else `default`.
    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn spec_text(builder: usize, a: usize, b: usize) -> String {
        match builder {
            0 => format!("ring:{}", 2 + a * 4),
            1 => format!("mesh:{}x{}", 2 + a, 2 + b),
            2 => format!("switch:{}", 2 + a * 8),
            3 => format!("fc:{}", 2 + a * 2),
            4 => format!("preset:dgx-a100,nodes={}", 1 + a / 4),
            5 => format!("torus:{}x{}", 3 + a, 3 + b),
            _ => format!("hypercube:{}", 1 + a % 7),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]
        #[test]
        fn every_step_holds_to_its_estimates(
            builder in 0usize..7,
            a in 0usize..16,
            b in 0usize..16,
            kind in 0usize..CollectiveKind::ALL.len(),
            k in 1usize..64,
            size_log in 10u32..31,
            baseline in 0usize..4,
        ) {
            let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
            let kind = CollectiveKind::ALL[kind];
            let text = spec_text(builder, a, b);
            let (_, measured) = peak_of(|| {
                tacos::budget::MemoryLimit::new(LIMIT, tacos::budget::Origin::Caller)
                    .set_process_default();
                let Ok(topo) = parse_spec(&text, &SpecDefaults::default()) else {
                    return;
                };
                let request = Request::new(kind, 1 << size_log);
                if let Ok(checked) =
                    pipeline::synthesize(&topo, &request, k, &SynthOptions::seeded(0))
                {
                    let _ = simulate_schedule(&topo, checked.schedule());
                }
                let baseline = [Baseline::Ring, Baseline::Direct, Baseline::Dbt, Baseline::Rhd][baseline];
                let spec = spec(&topo, kind, k);
                if let Ok(schedule) = baseline.schedule(&topo, &spec) {
                    let _ = simulate_schedule(&topo, &schedule);
                }
            });
            tacos::budget::MemoryLimit::machine().set_process_default();
            prop_assert!(
                measured <= 4 * LIMIT,
                "{text} {kind} K={k} 2^{size_log} B: {measured} bytes held under a {LIMIT}-byte limit"
            );
        }
    }
}
