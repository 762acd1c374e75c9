//! An NCCL topology XML file (`NCCL_TOPO_FILE`), imported for one node and for several.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use tacos::topology::nccl_xml::{parse, NcclImportOptions};

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The node count comes from the environment in the plugins: take it from the input's
    // length so both one node and several are tried.
    let nodes = 1 + data.len() % 4;
    let options = NcclImportOptions {
        nodes,
        ..NcclImportOptions::default()
    };
    let _ = parse(text, "fuzz.xml", &options);
});
