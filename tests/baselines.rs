//! Every baseline on every builder topology it applies to: a correct algorithm by the
//! schedule checker's data-flow replay, simulated without deadlock, and never faster than
//! the lower bounds.

use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::schedule::check_data_flow;
use tacos::sim::simulate_schedule;
use tacos::topology::{parse_spec, SpecDefaults, Topology};

const SPECS: &[&str] = &[
    "ring:5",
    "ring:8",
    "uniring:6",
    "fc:5",
    "switch:8,d=2",
    "mesh:3x4",
    "mesh:4x4",
    "torus:4x4",
    "mesh:2x2x2",
    "torus:3x2x2",
    "hypercube:3",
    "dragonfly:3x4,bw=400:200",
    "rfs:2x2x4,bw=200:100:50",
    "multi:R2xF2xS4",
    "multi:U3xL2",
    "preset:dgx1",
    // NVSwitches that reduce: the in-switch baseline's.
    "preset:hgx-h100,gpus=4",
    "preset:dgx-h100,nodes=3,gpus=2",
];

fn topology(spec: &str) -> Topology {
    parse_spec(spec, &SpecDefaults::default()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

fn spec_for(topo: &Topology, kind: CollectiveKind, k: usize) -> CollectiveSpec {
    let npus = topo.alive_npus();
    CollectiveSpec {
        kind,
        root: kind.has_root().then_some(npus[npus.len() / 2]),
        npus,
        chunks_per_npu: k,
        size_bytes: 1 << 20,
    }
}

/// Whether NPUs joined both ways (by links, or by routes through switches) reach every
/// NPU: what packed trees need.
fn two_way_joined(topo: &Topology) -> bool {
    let n = topo.npus();
    let both = |a: usize, b: usize| topo.route(a, b).is_some() && topo.route(b, a).is_some();
    let mut reached = vec![false; n];
    let mut stack = vec![0];
    reached[0] = true;
    while let Some(v) = stack.pop() {
        for (w, seen) in reached.iter_mut().enumerate() {
            if !*seen && both(v, w) {
                *seen = true;
                stack.push(w);
            }
        }
    }
    reached.iter().all(|&r| r)
}

#[test]
fn every_baseline_is_correct_and_respects_the_bounds_on_every_builder() {
    let mut ran = 0;
    for spec in SPECS {
        let topo = topology(spec);
        for baseline in Baseline::ALL {
            for &kind in baseline.kinds() {
                for k in [1, 2] {
                    let cspec = spec_for(&topo, kind, k);
                    let schedule = match baseline.schedule(&topo, &cspec) {
                        Ok(s) => s,
                        Err(e) => {
                            let p = cspec.npus.len();
                            let expected = (baseline == Baseline::Rhd && !p.is_power_of_two())
                                || (baseline == Baseline::InSwitch && !topo.has_reducing_switch())
                                || (baseline == Baseline::Hierarchical
                                    && topo.dimensions().is_none())
                                || (baseline == Baseline::Trees
                                    && (!two_way_joined(&topo)
                                        || (kind == CollectiveKind::AllReduce
                                            && topo.has_switches())));
                            assert!(expected, "{spec} {baseline} {kind} K={k}: {e}");
                            continue;
                        }
                    };
                    let what = format!("{spec} {baseline} {kind} K={k}");
                    assert_eq!(schedule.collective.kind, kind, "{what}");
                    assert_eq!(schedule.collective.size_bytes, cspec.size_bytes, "{what}");
                    check_data_flow(&schedule, &topo).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let sim = simulate_schedule(&topo, &schedule)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let collective = Collective::new(&topo, cspec).unwrap();
                    let bounds = Bounds::new(&topo, &collective);
                    assert!(
                        sim.time_ps >= bounds.best_ps(),
                        "{what}: simulated {} ps beats the lower bound {:?}",
                        sim.time_ps,
                        bounds
                    );
                    ran += 1;
                }
            }
        }
    }
    assert!(ran > 300, "only {ran} cases ran");
}
