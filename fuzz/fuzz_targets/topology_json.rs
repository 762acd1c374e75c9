//! A topology JSON file: parsed, and what parses is written and read back unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::topology::{file, SpecDefaults};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let defaults = SpecDefaults::default();
    if let Ok(topo) = file::parse(text, "fuzz.json", &defaults) {
        let again = file::parse(&file::to_json(&topo), "written.json", &defaults)
            .expect("a written topology reads back");
        assert!(again == topo, "a topology changed on its way through JSON");
    }
});
