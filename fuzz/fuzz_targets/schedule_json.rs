//! A schedule file (`tacos synth -o`, `simulate --schedule`): parsed and checked on the
//! network it records.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::schedule::{check, Schedule};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(schedule) = Schedule::from_json(text, "fuzz.json") else {
        return;
    };
    let Some(network) = schedule.network.as_ref() else {
        return;
    };
    if let Ok(topo) = network.topology("fuzz", "fuzz.json") {
        let _ = check(&schedule, &topo);
    }
});
