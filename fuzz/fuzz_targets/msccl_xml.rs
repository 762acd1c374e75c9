//! An MSCCL algorithm XML file: parsed, written back (which must be stable), verified for
//! the default target, and timed, as `tacos verify`, `tacos simulate --xml` and
//! `tacos_simulate_xml` do with a user's file.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::msccl::{parse_program, simulate_program, verify, write_program, VerifyOptions};
use tacos::topology::{parse_spec, SpecDefaults};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(program) = parse_program(text, "fuzz.xml") else {
        return;
    };
    let written = write_program(&program);
    let again = parse_program(&written, "written.xml").expect("a written program reads back");
    assert_eq!(
        write_program(&again),
        written,
        "writing a program is not stable"
    );
    let report = verify(&program, &VerifyOptions::default());
    let gpus = program.gpus.len();
    if report.is_correct() && (2..=64).contains(&gpus) {
        let topo = parse_spec(&format!("fc:{gpus}"), &SpecDefaults::default())
            .expect("a small fully connected topology builds");
        let _ = simulate_program(&topo, &program, 1 << 20);
    }
});
