//! A topology spec string, as `--topology` and `TACOS_TOPOLOGY` take it: parsed and built,
//! or refused with an error; never a panic, an abort or an allocation past the limits.
//! The process is held to a plugin's memory limit, so a spec that is valid but too big
//! for it must be refused by its estimate, not built.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tacos::budget::MemoryLimit;
use tacos::topology::{parse_spec, SpecDefaults};

fuzz_target!(|data: &[u8]| {
    static LIMIT: std::sync::Once = std::sync::Once::new();
    LIMIT.call_once(|| MemoryLimit::plugin().set_process_default());
    if let Ok(spec) = std::str::from_utf8(data) {
        let _ = parse_spec(spec, &SpecDefaults::default());
    }
});
