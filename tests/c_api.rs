//! The C API called the way a C program calls it: results that verify and time like the
//! command line's, and bad arguments that come back as -1 with a reason, never a crash.

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use tacos::ffi::*;

fn last_error() -> String {
    unsafe { CStr::from_ptr(tacos_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn defaults() -> TacosSynthOptions {
    let mut o = std::mem::MaybeUninit::<TacosSynthOptions>::uninit();
    unsafe {
        tacos_synth_options_init(o.as_mut_ptr());
        o.assume_init()
    }
}

#[test]
fn synthesized_xml_verifies_and_times_like_the_schedule() {
    let mut xml: *mut c_char = ptr::null_mut();
    let mut options = defaults();
    options.chunks_per_npu = 2;
    let rc = unsafe {
        tacos_synthesize_xml(
            c("ring:4").as_ptr(),
            c("allreduce").as_ptr(),
            4 << 20,
            &options,
            &mut xml,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    let text = unsafe { CStr::from_ptr(xml) }.to_str().unwrap().to_owned();
    unsafe { tacos_free_string(xml) };
    assert!(text.contains("coll=\"allreduce\"") && text.contains("ngpus=\"4\""));

    let dir = std::env::temp_dir().join(format!("tacos-c-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ar.xml");
    let cpath = c(path.to_str().unwrap());
    let rc = unsafe {
        tacos_synthesize_xml_file(
            c("ring:4").as_ptr(),
            c("allreduce").as_ptr(),
            4 << 20,
            &options,
            cpath.as_ptr(),
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "same inputs, same bytes"
    );

    // Time it and compare with the schedule synthesized the same way through the library:
    // the lowering keeps each link's order, so the program can lose at most 5% to it.
    let mut time_us = 0.0;
    let rc =
        unsafe { tacos_simulate_xml(c("ring:4").as_ptr(), cpath.as_ptr(), 4 << 20, &mut time_us) };
    assert_eq!(rc, 0, "{}", last_error());
    let topo = tacos::topology::parse_spec("ring:4", &Default::default()).unwrap();
    let coll = tacos::collective::Collective::over_all(
        &topo,
        tacos::collective::CollectiveKind::AllReduce,
        None,
        2,
        4 << 20,
    )
    .unwrap();
    let schedule = tacos::synth::synthesize(&topo, &coll, &Default::default()).unwrap();
    let synth_us = tacos::units::ps_to_us(schedule.collective_time_ps());
    assert!(
        time_us >= synth_us * 0.999 && time_us <= synth_us * 1.05,
        "{time_us} vs {synth_us}"
    );
}

#[test]
fn json_topology_text_is_accepted() {
    let json = r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bidirectional": true}]}"#;
    let mut xml: *mut c_char = ptr::null_mut();
    let rc = unsafe {
        tacos_synthesize_xml(
            c(json).as_ptr(),
            c("allgather").as_ptr(),
            1 << 20,
            ptr::null(),
            &mut xml,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    unsafe { tacos_free_string(xml) };
}

/// A call that must fail: -1, and a last error naming the problem.
fn fails(rc: i32, expected: &str) {
    assert_eq!(rc, -1, "{expected}");
    let e = last_error();
    assert!(e.contains(expected), "'{e}' lacks '{expected}'");
}

#[test]
fn bad_arguments_return_minus_one_with_a_reason() {
    let mut xml: *mut c_char = ptr::null_mut();
    let mut time = 0.0;
    let (ring, ar, none) = (c("ring:4"), c("allreduce"), ptr::null());
    unsafe {
        fails(
            tacos_synthesize_xml(none, ar.as_ptr(), 1024, none.cast(), &mut xml),
            "topology is NULL",
        );
        fails(
            tacos_synthesize_xml(ring.as_ptr(), none, 1024, none.cast(), &mut xml),
            "collective is NULL",
        );
        fails(
            tacos_synthesize_xml(
                ring.as_ptr(),
                ar.as_ptr(),
                1024,
                none.cast(),
                ptr::null_mut(),
            ),
            "xml_out is NULL",
        );
        fails(
            tacos_synthesize_xml(
                c("blob:4").as_ptr(),
                ar.as_ptr(),
                1024,
                none.cast(),
                &mut xml,
            ),
            "neither a topology file nor a known builder",
        );
        fails(
            tacos_synthesize_xml(
                ring.as_ptr(),
                c("allshuffle").as_ptr(),
                1024,
                none.cast(),
                &mut xml,
            ),
            "unknown collective",
        );
        fails(
            tacos_synthesize_xml(ring.as_ptr(), ar.as_ptr(), 0, none.cast(), &mut xml),
            "at least 1 byte",
        );
        fails(
            tacos_synthesize_xml(
                c("{\"npus\": 2,").as_ptr(),
                ar.as_ptr(),
                1024,
                none.cast(),
                &mut xml,
            ),
            "topology JSON:1:",
        );
        fails(
            tacos_simulate_xml(ring.as_ptr(), c("/no/such.xml").as_ptr(), 1024, &mut time),
            "/no/such.xml",
        );
        fails(
            tacos_simulate_xml(
                ring.as_ptr(),
                c("/no/such.xml").as_ptr(),
                1024,
                ptr::null_mut(),
            ),
            "time_us is NULL",
        );
        fails(
            tacos_synthesize_xml_file(
                ring.as_ptr(),
                c("allgather").as_ptr(),
                1024,
                none.cast(),
                c("/no/such/dir/x.xml").as_ptr(),
            ),
            "/no/such/dir/x.xml",
        );
        let mut short = defaults();
        short.struct_size = 4;
        fails(
            tacos_synthesize_xml(
                ring.as_ptr(),
                c("allgather").as_ptr(),
                1024,
                &short,
                &mut xml,
            ),
            "struct_size",
        );
        let mut bad_proto = defaults();
        let name = c("LL64");
        bad_proto.proto = name.as_ptr();
        fails(
            tacos_synthesize_xml(
                ring.as_ptr(),
                c("allgather").as_ptr(),
                1024,
                &bad_proto,
                &mut xml,
            ),
            "LL64",
        );
    }
}
