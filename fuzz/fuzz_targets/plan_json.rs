//! An MSCCL++ execution plan (`tacos verify F.json`, `simulate --plan`): read, verified,
//! and its control flow run and timed on a ring of its ranks, verified or not.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::cost::Executor;
use tacos::mscclpp::{verify, Plan, PlanTimer, VerifyOptions};
use tacos::topology::{parse_spec, SpecDefaults};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(plan) = Plan::from_json(text, "fuzz.json") else {
        return;
    };
    let options = VerifyOptions {
        size: Some(plan.min_message_size),
        root: None,
    };
    let _ = verify(&plan, &options);
    let ranks = plan.gpus.len();
    if !(2..=16).contains(&ranks) {
        return;
    }
    let Ok(timer) = PlanTimer::new(&plan) else {
        return;
    };
    let Ok(topo) = parse_spec(&format!("switch:{ranks}"), &SpecDefaults::default()) else {
        return;
    };
    if let Ok(executor) = Executor::for_topology(&topo, None, None) {
        let _ = timer.time_ps(&executor, &topo, 1 << 20);
    }
});
