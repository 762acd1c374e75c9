//! The C API called the way a C program calls it: results that verify and time like the
//! command line's, and bad arguments that come back as -1 with a reason, never a crash.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use tacos::ffi::*;

fn last_error() -> String {
    // SAFETY: the library's NUL-terminated message for this thread, copied out at once.
    unsafe { CStr::from_ptr(tacos_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn defaults() -> TacosSynthOptions {
    let mut o = std::mem::MaybeUninit::<TacosSynthOptions>::uninit();
    // SAFETY: init writes a whole struct into the uninitialized room it is given.
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
    // SAFETY: NUL-terminated strings (temporaries live to the end of the statement), an
    // initialized options struct and an output slot, all outliving the call.
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
    // SAFETY: the call succeeded, so `xml` is the library's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(xml) }.to_str().unwrap().to_owned();
    // SAFETY: `xml` came from the library and is freed once, after its last use.
    unsafe { tacos_free_string(xml) };
    assert!(text.contains("coll=\"allreduce\"") && text.contains("ngpus=\"4\""));

    let dir = std::env::temp_dir().join(format!("tacos-c-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ar.xml");
    let cpath = c(path.to_str().unwrap());
    // SAFETY: as for tacos_synthesize_xml above; `cpath` outlives the call.
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

    // Time it: the executor cost model's time of the file, as the library's executor
    // gives it, and no faster than the schedule synthesized the same way (the model adds a
    // launch floor and per-step costs to the links' alpha and beta).
    let mut time_us = 0.0;
    // SAFETY: NUL-terminated strings and an output double that outlive the call.
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
    assert!(time_us >= synth_us * 0.999, "{time_us} vs {synth_us}");
    let program = tacos::msccl::read_program(&path).unwrap();
    let executor = tacos::cost::Executor::for_topology(&topo, None, None).unwrap();
    let modelled = executor.simulate_program(&topo, &program, 4 << 20).unwrap();
    assert_eq!(time_us, tacos::units::ps_to_us(modelled.time_ps));
}

#[test]
fn json_topology_text_is_accepted() {
    let json = r#"{"npus": 2, "links": [{"src": 0, "dst": 1, "bidirectional": true}]}"#;
    let mut xml: *mut c_char = ptr::null_mut();
    // SAFETY: NUL-terminated strings, NULL options (the defaults) and an output slot.
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
    // SAFETY: `xml` came from the library and is freed once.
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
    // SAFETY: every pointer is NULL (which each call must refuse by name) or a live
    // NUL-terminated string, initialized options struct or output slot; `short` is a whole
    // struct, so even a library that read past its `struct_size` would stay inside it.
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
            "unknown builder 'blob'",
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
        // One JSON document, nothing after it.
        fails(
            tacos_synthesize_xml(
                c("{\"npus\": 2, \"links\": [{\"src\": 0, \"dst\": 1}]} {}").as_ptr(),
                ar.as_ptr(),
                1024,
                none.cast(),
                &mut xml,
            ),
            "topology JSON:1:46: trailing characters",
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
        short.struct_size = 40;
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

/// The most steps in one threadblock of an XML text.
fn max_steps(xml: &str) -> usize {
    let program = tacos::msccl::parse_program(xml, "xml").unwrap();
    let tbs = program.gpus.iter().flat_map(|g| &g.threadblocks);
    tbs.map(|t| t.steps.len()).max().unwrap_or(0)
}

/// The XML for All-Reduce of 64 MiB on ring:8 with `options`, or the last error.
fn ring8_allreduce(options: *const TacosSynthOptions) -> Result<String, String> {
    let mut xml: *mut c_char = ptr::null_mut();
    // SAFETY: NUL-terminated strings and an output slot; the caller's `options` is NULL or a
    // live struct.
    let rc = unsafe {
        tacos_synthesize_xml(
            c("ring:8").as_ptr(),
            c("allreduce").as_ptr(),
            64 << 20,
            options,
            &mut xml,
        )
    };
    if rc != 0 {
        return Err(last_error());
    }
    // SAFETY: the call succeeded, so `xml` is the library's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(xml) }.to_str().unwrap().to_owned();
    // SAFETY: `xml` came from the library and is freed once, after its last use.
    unsafe { tacos_free_string(xml) };
    Ok(text)
}

#[test]
fn the_target_field_picks_the_loader_and_old_callers_get_the_default() {
    // K = 8 on ring:8 takes 108 steps in a threadblock when 256 are allowed; for the
    // executor's 64 the lowering spreads them.
    let mut roomy = defaults();
    roomy.chunks_per_npu = 8;
    let name = c("executor-256");
    roomy.target = name.as_ptr();
    let steps = max_steps(&ring8_allreduce(&roomy).unwrap());
    assert!((65..=256).contains(&steps), "{steps}");
    let mut default = defaults();
    default.chunks_per_npu = 8;
    let fitted = ring8_allreduce(&default).unwrap();
    assert!(max_steps(&fitted) <= 64);
    // A caller built before the field existed: its struct ends where `target` begins, and
    // it gets the default target (the same bytes as a NULL target).
    let old_size = std::mem::offset_of!(TacosSynthOptions, target);
    assert_eq!(old_size, 48);
    let mut old = vec![0u64; old_size / 8];
    // SAFETY: `old` holds 48 bytes, 8-aligned: the copy fits, and `struct_size` is its first
    // four bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&default as *const TacosSynthOptions).cast::<u8>(),
            old.as_mut_ptr().cast::<u8>(),
            old_size,
        );
        *old.as_mut_ptr().cast::<u32>() = old_size as u32;
    }
    let from_old = ring8_allreduce(old.as_ptr().cast()).unwrap();
    assert_eq!(from_old, fitted);
    // K chosen automatically keeps to the target too.
    assert!(max_steps(&ring8_allreduce(ptr::null()).unwrap()) <= 64);
    // The older fork spells reduce_scatter and has no gather.
    let mut legacy = defaults();
    let name = c("msccl-legacy");
    legacy.target = name.as_ptr();
    let mut xml: *mut c_char = ptr::null_mut();
    // SAFETY: NUL-terminated strings, a live options struct and an output slot.
    let rc = unsafe {
        tacos_synthesize_xml(
            c("ring:4").as_ptr(),
            c("reducescatter").as_ptr(),
            1 << 20,
            &legacy,
            &mut xml,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    // SAFETY: the call succeeded, so `xml` is the library's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(xml) }.to_str().unwrap().to_owned();
    // SAFETY: `xml` came from the library and is freed once, after its last use.
    unsafe { tacos_free_string(xml) };
    assert!(text.contains("coll=\"reduce_scatter\""), "{text}");
    // SAFETY: as above.
    let rc = unsafe {
        tacos_synthesize_xml(
            c("ring:4").as_ptr(),
            c("gather").as_ptr(),
            1 << 20,
            &legacy,
            &mut xml,
        )
    };
    fails(rc, "no gather");
    // An unknown name: -1, naming it and the known ones.
    let mut unknown = defaults();
    let name = c("executor-512");
    unknown.target = name.as_ptr();
    let e = ring8_allreduce(&unknown).unwrap_err();
    assert!(
        e.contains("options.target") && e.contains("executor-512") && e.contains("msccl-legacy"),
        "{e}"
    );
}

/// Set in the child process of `guarded_panics_print_one_warn_line_each`.
const PANIC_CHILD: &str = "TACOS_TEST_PANIC_CHILD";

#[test]
fn guarded_panics_print_one_warn_line_each() {
    if std::env::var_os(PANIC_CHILD).is_some() {
        // On the guarded thread, with a control character to escape.
        assert_eq!(
            guard(-1, || -> Result<i32, Failure> { panic!("first \x1b[31m") }),
            -1
        );
        // On a worker thread: rayon hands the panic to the guarded thread.
        let worker = guard(-1, || {
            rayon::scope(|s| s.spawn(|_| panic!("in a worker")));
            Ok(0)
        });
        assert_eq!(worker, -1);
        // Outside any guard the hook that was there before still reports.
        assert!(std::panic::catch_unwind(|| panic!("unguarded")).is_err());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "guarded_panics_print_one_warn_line_each",
            "--nocapture",
        ])
        .env(PANIC_CHILD, "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tacos: WARN"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].starts_with("tacos: WARN panic at tests/c_api.rs:")
            && warnings[0].ends_with(": first \\u{1b}[31m (please report)"),
        "{stderr}"
    );
    assert_eq!(
        warnings[1],
        "tacos: WARN panic on a worker thread: in a worker (please report)"
    );
    // Nothing else about the guarded panics reaches stderr; the unguarded one does.
    assert_eq!(stderr.matches("first").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("in a worker").count(), 1, "{stderr}");
    assert!(stderr.contains("unguarded"), "{stderr}");
}

#[test]
fn the_format_field_returns_a_verified_mscclpp_plan_and_old_callers_get_xml() {
    let mut options = defaults();
    let name = c("mscclpp");
    options.format = name.as_ptr();
    let json = ring8_allreduce(&options).unwrap();
    let plan = tacos::mscclpp::Plan::from_json(&json, "the C API's plan").unwrap();
    let check = tacos::mscclpp::VerifyOptions {
        size: Some(plan.min_message_size),
        root: None,
    };
    tacos::mscclpp::verify(&plan, &check).unwrap();
    assert_eq!(
        (plan.gpus.len(), plan.collective.as_str()),
        (8, "allreduce")
    );
    // A caller built before the field existed: its struct ends where `format` begins, and
    // it gets XML whatever lies past its end.
    let old_size = std::mem::offset_of!(TacosSynthOptions, format);
    let mut old = vec![0u64; std::mem::size_of::<TacosSynthOptions>() / 8];
    // SAFETY: `old` has room for a whole struct, 8-aligned; `struct_size` is its first four
    // bytes. The bytes past `old_size` keep the "mscclpp" pointer, which must not be read.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&options as *const TacosSynthOptions).cast::<u8>(),
            old.as_mut_ptr().cast::<u8>(),
            std::mem::size_of::<TacosSynthOptions>(),
        );
        *old.as_mut_ptr().cast::<u32>() = old_size as u32;
    }
    let xml = ring8_allreduce(old.as_ptr().cast()).unwrap();
    assert!(xml.trim_start().starts_with("<algo"), "{}", &xml[..40]);
    let unknown = c("nccl");
    options.format = unknown.as_ptr();
    let e = ring8_allreduce(&options).unwrap_err();
    assert!(e.contains("options.format") && e.contains("mscclpp"), "{e}");
}

/// `tacos_last_error_code` names the kind of each failure, by the codes include/tacos.h
/// defines: the header's `TACOS_OK` and `TACOS_ERR_*` are the library's table, kind by kind.
#[test]
fn each_failure_has_its_kind_as_a_code() {
    let header = include_str!("../crates/tacos/include/tacos.h");
    for &(kind, code) in ERROR_CODES.iter() {
        let name = match kind {
            "ok" => "TACOS_OK".to_string(),
            _ => format!("TACOS_ERR_{}", kind.to_ascii_uppercase()),
        };
        let line = format!("#define {name} {code}");
        assert!(
            header.contains(&format!("{line} ")) || header.contains(&format!("{line}\n")),
            "{line}"
        );
    }
    assert_eq!(
        header.matches("#define TACOS_ERR_").count() + 1,
        ERROR_CODES.len()
    );
    let code = |kind: &str| ERROR_CODES.iter().find(|(k, _)| *k == kind).unwrap().1;
    let mut xml: *mut c_char = ptr::null_mut();
    let (ring, ar) = (c("ring:4"), c("allreduce"));
    // SAFETY: live NUL-terminated strings, a NULL options pointer (the defaults) and a
    // live output slot; a string returned is freed once.
    unsafe {
        let rc = tacos_synthesize_xml(ring.as_ptr(), ptr::null(), 1024, ptr::null(), &mut xml);
        assert_eq!((rc, tacos_last_error_code()), (-1, code("invalid")));
        let rc = tacos_synthesize_xml(
            ring.as_ptr(),
            c("allsort").as_ptr(),
            1024,
            ptr::null(),
            &mut xml,
        );
        assert_eq!((rc, tacos_last_error_code()), (-1, code("unknown")));
        let rc = tacos_synthesize_xml(
            c("ring:4,nosuch=1").as_ptr(),
            ar.as_ptr(),
            1024,
            ptr::null(),
            &mut xml,
        );
        assert_eq!(rc, -1);
        assert!(
            [code("spec"), code("invalid"), code("unknown")].contains(&tacos_last_error_code()),
            "{}",
            last_error()
        );
        // A success leaves the last failure's code, as it leaves its message.
        let rc = tacos_synthesize_xml(ring.as_ptr(), ar.as_ptr(), 1 << 20, ptr::null(), &mut xml);
        assert_eq!(rc, 0, "{}", last_error());
        tacos_free_string(xml);
        assert_ne!(tacos_last_error_code(), 0);
    }
}
