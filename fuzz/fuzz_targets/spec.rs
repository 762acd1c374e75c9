//! A topology spec string, as `--topology` and `TACOS_TOPOLOGY` take it: parsed and built,
//! or refused with an error; never a panic, an abort or an allocation past the limits.
//! A spec that is valid but too big for the memory limit must be refused by its
//! estimate, not built.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::topology::{parse_spec, SpecDefaults};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    if let Ok(spec) = std::str::from_utf8(data) {
        let _ = parse_spec(spec, &SpecDefaults::default());
    }
});
