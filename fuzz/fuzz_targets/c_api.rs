//! The C API as a host program calls it: any strings, sizes and option fields. Each call
//! returns 0 or -1 with a message; nothing panics or aborts across the ABI.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use std::ffi::{c_char, CString};
use tacos::ffi::{
    tacos_free_string, tacos_last_error, tacos_simulate_xml, tacos_synth_options_init,
    tacos_synthesize_xml, TacosSynthOptions,
};
use tacos::topology::{parse_spec, SpecDefaults};

#[derive(Arbitrary, Debug)]
struct Call {
    topology: String,
    collective: String,
    size_bytes: u64,
    struct_size: u32,
    chunks_per_npu: u32,
    seed: u64,
    root: i32,
    in_place: i32,
    proto: Option<String>,
    bandwidth_gbps: f64,
    latency_us: f64,
    target: Option<String>,
    /// Ask for an MSCCL++ plan rather than XML.
    mscclpp: bool,
    xml: Vec<u8>,
}

/// Synthesis on a large topology is legitimately slow: keep the fuzzer on small ones.
const MAX_NPUS: usize = 16;

fn c_string(text: &str) -> Option<CString> {
    CString::new(text).ok()
}

fuzz_target!(|call: Call| {
    common::hold_memory();
    let (Some(topology), Some(collective)) = (c_string(&call.topology), c_string(&call.collective))
    else {
        return;
    };
    let small = parse_spec(&call.topology, &SpecDefaults::default())
        .map(|t| t.npus() <= MAX_NPUS)
        .unwrap_or(true);
    let proto = call.proto.as_deref().and_then(c_string);
    let target = call.target.as_deref().and_then(c_string);
    let mut options = std::mem::MaybeUninit::<TacosSynthOptions>::uninit();
    // SAFETY: the pointers are valid for the calls' duration; the options struct is fully
    // initialized by tacos_synth_options_init before its fields are overwritten.
    unsafe {
        tacos_synth_options_init(options.as_mut_ptr());
        let mut options = options.assume_init();
        options.struct_size = call.struct_size;
        options.chunks_per_npu = call.chunks_per_npu % 64;
        options.seed = call.seed;
        options.root = call.root;
        options.in_place = call.in_place;
        options.proto = proto.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        options.bandwidth_gbps = call.bandwidth_gbps;
        options.latency_us = call.latency_us;
        options.target = target.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        let mscclpp = c"mscclpp";
        if call.mscclpp {
            options.format = mscclpp.as_ptr();
        }
        if small {
            let mut xml: *mut c_char = std::ptr::null_mut();
            let rc = tacos_synthesize_xml(
                topology.as_ptr(),
                collective.as_ptr(),
                call.size_bytes,
                &options,
                &mut xml,
            );
            assert!(rc == 0 || rc == -1, "return code {rc}");
            if rc == 0 {
                assert!(!xml.is_null());
                tacos_free_string(xml);
            } else {
                assert!(!tacos_last_error().is_null(), "a failure without a message");
            }
        }
        let dir = std::env::temp_dir().join(format!("tacos-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("algo.xml");
        if std::fs::write(&path, &call.xml).is_ok() {
            let path = c_string(&path.to_string_lossy()).expect("a temp path has no NUL");
            let mut time_us = 0.0;
            let rc = tacos_simulate_xml(
                topology.as_ptr(),
                path.as_ptr(),
                call.size_bytes,
                &mut time_us,
            );
            assert!(rc == 0 || rc == -1, "return code {rc}");
        }
    }
});
