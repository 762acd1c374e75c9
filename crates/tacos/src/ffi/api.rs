//! The project's own C API (`include/tacos.h`): synthesize an algorithm as MSCCL XML, and
//! time an XML file on a topology. Every function returns 0 on success and -1 on failure,
//! with the reason readable through `tacos_last_error`.

use super::guard::{c_str, give_string, guard, Failure};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveKind;
use crate::cost::Executor;
use crate::fsio::write_atomic;
use crate::msccl::{read_program, verify, LowerOptions, Profile, Proto, Target, VerifyOptions};
use crate::mscclpp::PlanOptions;
use crate::pipeline::{self, Chunks, Request};
use crate::topology::{file, parse_spec, SpecDefaults, Topology};
use crate::units::ps_to_us;
use std::ffi::{c_char, c_int};
use std::path::Path;

/// Mirrors `tacos_synth_options` in include/tacos.h, written by hand: `ffi::layout_tests`
/// checks its layout against figures worked from the header in every build, and against
/// the header itself (through bindgen) in CI. Fields are only ever appended, so a caller
/// built against an older header (a smaller `struct_size`) keeps working: the fields it
/// lacks take their defaults.
#[repr(C)]
pub struct TacosSynthOptions {
    /// This struct's size as the caller knows it; set by `tacos_synth_options_init`.
    pub struct_size: u32,
    /// Chunks per NPU (K); 0 tries 1, 2, 4, 8, then K between them beside the fastest, and
    /// keeps the fastest program.
    pub chunks_per_npu: u32,
    /// Fixes every random choice.
    pub seed: u64,
    /// Root NPU of rooted collectives; -1 for the first alive NPU.
    pub root: i32,
    /// 1 in place, 0 out of place, -1 the collective's usual.
    pub in_place: i32,
    /// "Simple", "LL" or "LL128"; NULL for LL up to 512 KiB, else Simple.
    pub proto: *const c_char,
    /// For links the topology leaves unspecified; 0 for 50 GB/s.
    pub bandwidth_gbps: f64,
    /// Likewise; negative for 0.5 us.
    pub latency_us: f64,
    /// The loader's name (`Profile::name`); NULL for the executor as it builds by default.
    pub target: *const c_char,
    /// "msccl" (XML, the default for NULL) or "mscclpp" (an execution plan, JSON).
    pub format: *const c_char,
}

/// The struct's size before `target` was added: the smallest `struct_size` accepted.
const FIRST_STRUCT_SIZE: usize = std::mem::offset_of!(TacosSynthOptions, target);

/// What the options say once defaults are filled in.
struct Options {
    chunks: Chunks,
    seed: u64,
    root: Option<usize>,
    in_place: Option<bool>,
    proto: Option<Proto>,
    defaults: SpecDefaults,
    target: Target,
    format: Format,
}

/// What the synthesis functions return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// MSCCL algorithm XML.
    Msccl,
    /// An MSCCL++ execution plan.
    Mscclpp,
}

impl Format {
    const NAMES: [&'static str; 2] = ["msccl", "mscclpp"];

    fn parse(name: &str) -> Result<Format, String> {
        match name {
            "msccl" => Ok(Format::Msccl),
            "mscclpp" => Ok(Format::Mscclpp),
            other => Err(crate::Error::Unknown {
                what: "options.format",
                given: other.into(),
                known: Format::NAMES.to_vec(),
            }
            .to_string()),
        }
    }
}

impl Options {
    /// Reads the caller's options, filling in defaults and checking each field's range.
    ///
    /// # Safety
    /// `raw` must be NULL or point to an initialized `tacos_synth_options` whose
    /// `struct_size` says how much of it is valid (and is readable up to
    /// `FIRST_STRUCT_SIZE` at least: fields past `struct_size` are never read). Its string
    /// fields must be NULL or NUL-terminated strings that outlive the call.
    unsafe fn read(raw: *const TacosSynthOptions) -> Result<Options, String> {
        let mut o = Options {
            chunks: Chunks::Auto,
            seed: 0,
            root: None,
            in_place: None,
            proto: None,
            defaults: SpecDefaults::default(),
            target: Target::default(),
            format: Format::Msccl,
        };
        if raw.is_null() {
            return Ok(o);
        }
        // SAFETY: `raw` is not null, and the caller guarantees the struct is readable at least
        // up to `FIRST_STRUCT_SIZE`, which covers `struct_size`, the first field.
        let size = unsafe { std::ptr::addr_of!((*raw).struct_size).read() } as usize;
        if size < FIRST_STRUCT_SIZE {
            return Err(format!(
                "options.struct_size is {size}; call tacos_synth_options_init first (this library's struct is {} bytes, and takes {FIRST_STRUCT_SIZE} or more)",
                std::mem::size_of::<TacosSynthOptions>()
            ));
        }
        // Each field is read on its own, never the whole struct: an older caller's ends
        // before `target`.
        macro_rules! field {
            ($name:ident) => {
                // SAFETY: every field read lies within `struct_size` bytes, which the caller
                // guarantees readable: those before `target` because `struct_size` is at
                // least `FIRST_STRUCT_SIZE` (checked above), `target` only when
                // `struct_size` covers the whole struct. `read` copies the field out through
                // a place pointer, never making a reference to the caller's struct.
                unsafe { std::ptr::addr_of!((*raw).$name).read() }
            };
        }
        let chunks: u32 = field!(chunks_per_npu);
        if chunks > 0 {
            o.chunks = Chunks::Fixed(chunks as usize);
        }
        o.seed = field!(seed);
        let root: i32 = field!(root);
        o.root = match root {
            -1 => None,
            r => Some(usize::try_from(r).map_err(|_| {
                invalid(
                    "options.root",
                    r,
                    "an NPU id (0 or more), or -1 for the first alive NPU",
                )
            })?),
        };
        o.in_place = match field!(in_place) {
            -1 => None,
            0 => Some(false),
            1 => Some(true),
            other => {
                return Err(invalid(
                    "options.in_place",
                    other,
                    "1 (in place), 0 (out of place) or -1 (the collective's usual)",
                ))
            }
        };
        let proto: *const c_char = field!(proto);
        if !proto.is_null() {
            // SAFETY: not null, and the caller guarantees a string that outlives the call.
            let name = unsafe { c_str(proto, "options.proto") }?;
            o.proto = Some(name.parse().map_err(|e: crate::Error| e.to_string())?);
        }
        let (bandwidth, latency): (f64, f64) = (field!(bandwidth_gbps), field!(latency_us));
        if bandwidth != 0.0 {
            if !(bandwidth.is_finite() && bandwidth > 0.0) {
                return Err(invalid(
                    "options.bandwidth_gbps",
                    bandwidth,
                    "a positive, finite number of GB/s, or 0 for 50",
                ));
            }
            o.defaults.bandwidth_gbps = bandwidth;
        }
        if !(latency < 0.0 && latency.is_finite()) {
            if !(latency.is_finite() && latency >= 0.0) {
                return Err(invalid(
                    "options.latency_us",
                    latency,
                    "a finite number of microseconds, 0 or more, or negative for 0.5",
                ));
            }
            o.defaults.latency_us = latency;
        }
        let has_target = size >= std::mem::offset_of!(TacosSynthOptions, format);
        let target: *const c_char = if has_target {
            field!(target)
        } else {
            std::ptr::null()
        };
        if !target.is_null() {
            // SAFETY: not null, and the caller guarantees a string that outlives the call.
            let name = unsafe { c_str(target, "options.target") }?;
            let profile: Profile = name
                .parse()
                .map_err(|e: crate::Error| format!("options.target: {e}"))?;
            o.target = Target::new(profile);
        }
        let has_format = size >= std::mem::size_of::<TacosSynthOptions>();
        let format: *const c_char = if has_format {
            field!(format)
        } else {
            std::ptr::null()
        };
        if !format.is_null() {
            // SAFETY: not null, and the caller guarantees a string that outlives the call.
            o.format = Format::parse(unsafe { c_str(format, "options.format") }?)?;
        }
        Ok(o)
    }
}

/// An argument out of its range, as the library words it.
fn invalid(input: &str, value: impl std::fmt::Display, allowed: &str) -> String {
    crate::Error::Invalid {
        input: input.into(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
    .to_string()
}

/// The largest collective size the API takes: sizes are held below 2^63 bytes.
const MAX_SIZE_BYTES: u64 = i64::MAX as u64;

/// Checks a collective size: 1 byte to `MAX_SIZE_BYTES`.
fn check_size(size_bytes: u64) -> Result<(), String> {
    if size_bytes == 0 || size_bytes > MAX_SIZE_BYTES {
        return Err(invalid(
            "size_bytes",
            size_bytes,
            &format!("at least 1 byte and at most {MAX_SIZE_BYTES}"),
        ));
    }
    Ok(())
}

/// A topology given as JSON text, a JSON file, or a builder spec.
fn topology(text: &str, defaults: &SpecDefaults) -> Result<Topology, Failure> {
    let result = if text.trim_start().starts_with('{') {
        file::parse(text, "topology JSON", defaults)
    } else {
        parse_spec(text, defaults)
    };
    Ok(result?)
}

/// The XML of the verified program `pipeline::program` keeps for the request, or with
/// `Format::Mscclpp` the JSON of the verified plan `pipeline::plan` keeps.
fn synthesize_xml(
    topology_text: &str,
    collective: &str,
    size_bytes: u64,
    o: &Options,
) -> Result<String, Failure> {
    let topo = topology(topology_text, &o.defaults)?;
    let kind: CollectiveKind = collective.parse().map_err(Failure::from)?;
    let request = Request {
        root: o.root,
        ..Request::new(kind, size_bytes)
    };
    let executor = Executor::for_topology(&topo, None, None).map_err(Failure::from)?;
    let options = pipeline::Options {
        chunks: o.chunks,
        seeds: vec![o.seed],
        lowering: LowerOptions {
            in_place: o.in_place,
            proto: o.proto,
            target: o.target.clone(),
            ..LowerOptions::default()
        },
        // A host program sets no flag: the environment's limit (within what the host's
        // limits leave), else the process's.
        max_memory: match MemoryLimit::from_env().map_err(Failure::from)? {
            Some(asked) => MemoryLimit::within_system(Some(asked)),
            None => MemoryLimit::default(),
        },
        replicate: false,
        planned: true,
        // Ranked as `tacos_simulate_xml` and the plugins time programs.
        executor: Some(executor.clone()),
        fill_instances: true,
        baselines: true,
        // An MSCCL++ plan may reduce inside the switch; `program` leaves it out for XML.
        in_switch: true,
    };
    if o.format == Format::Mscclpp {
        let plan_options = PlanOptions {
            in_place: o.in_place,
            ..PlanOptions::for_gpu(executor.gpu)
        };
        let found =
            pipeline::plan(&topo, &request, &options, &plan_options).map_err(Failure::from)?;
        return Ok(found.kept.plan.to_json());
    }
    let found = pipeline::program(&topo, &request, &options).map_err(Failure::from)?;
    Ok(found.kept.xml())
}

/// `synthesize_xml` on the C arguments.
///
/// # Safety
/// `topology` and `collective` must be NULL or NUL-terminated strings, and `options` NULL
/// or a `tacos_synth_options` as [`Options::read`] requires, all outliving the call: the
/// contract include/tacos.h states for the exported functions that call this.
unsafe fn xml_from_c(
    topology: *const c_char,
    collective: *const c_char,
    size_bytes: u64,
    options: *const TacosSynthOptions,
) -> Result<String, Failure> {
    // SAFETY: the caller guarantees both are NULL (which c_str reports) or strings that
    // outlive the call.
    let (topology, collective) = unsafe {
        (
            c_str(topology, "topology")?,
            c_str(collective, "collective")?,
        )
    };
    // SAFETY: the caller guarantees `options` is NULL or a valid struct as `read` requires.
    let options = unsafe { Options::read(options) }?;
    check_size(size_bytes)?;
    synthesize_xml(topology, collective, size_bytes, &options)
}

/// Fills `options` with the defaults (`pipeline`'s: automatic chunks per NPU, seed 0, the
/// executor's target), the first NPU as root, the collective's usual placement, protocol by
/// size, 50 GB/s and 0.5 us links.
///
/// # Safety
/// `options` must be NULL or point to writable memory for a `tacos_synth_options`.
#[no_mangle]
pub unsafe extern "C" fn tacos_synth_options_init(options: *mut TacosSynthOptions) {
    if options.is_null() {
        return;
    }
    // SAFETY: not null, and the caller guarantees room for a whole `tacos_synth_options`;
    // `write` does not read or drop what was there (the caller's memory may be uninitialized).
    unsafe {
        options.write(TacosSynthOptions {
            struct_size: std::mem::size_of::<TacosSynthOptions>() as u32,
            chunks_per_npu: 0,
            seed: 0,
            root: -1,
            in_place: -1,
            proto: std::ptr::null(),
            bandwidth_gbps: 0.0,
            latency_us: -1.0,
            target: std::ptr::null(),
            format: std::ptr::null(),
        })
    };
}

/// Synthesizes `collective` of `size_bytes` on `topology` and returns verified MSCCL XML
/// in `*xml_out` (free it with `tacos_free_string`).
///
/// # Safety
/// `topology` and `collective` must be NULL or NUL-terminated strings; `options` NULL or a
/// `tacos_synth_options` filled by `tacos_synth_options_init` (its `struct_size` tells how
/// much may be read) whose strings are NULL or NUL-terminated; `xml_out` NULL or a writable
/// `char*`. All must outlive the call, as include/tacos.h describes.
#[no_mangle]
pub unsafe extern "C" fn tacos_synthesize_xml(
    topology: *const c_char,
    collective: *const c_char,
    size_bytes: u64,
    options: *const TacosSynthOptions,
    xml_out: *mut *mut c_char,
) -> c_int {
    guard(-1, || {
        if xml_out.is_null() {
            return Err("xml_out is NULL".into());
        }
        // SAFETY: the caller guarantees the arguments are as include/tacos.h describes.
        let xml = unsafe { xml_from_c(topology, collective, size_bytes, options) }?;
        // SAFETY: `xml_out` is not null, and the caller guarantees it points to a writable
        // `char*`; the old value is not read (it is only an output).
        unsafe { *xml_out = give_string(xml) };
        Ok(0)
    })
}

/// As `tacos_synthesize_xml`, writing the XML to `path` (atomically).
///
/// # Safety
/// As `tacos_synthesize_xml`'s first four arguments; `path` must be NULL or a NUL-terminated
/// string that outlives the call.
#[no_mangle]
pub unsafe extern "C" fn tacos_synthesize_xml_file(
    topology: *const c_char,
    collective: *const c_char,
    size_bytes: u64,
    options: *const TacosSynthOptions,
    path: *const c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller guarantees `path` is NULL or a string that outlives the call.
        let path = unsafe { c_str(path, "path") }?;
        // SAFETY: the caller guarantees the arguments are as include/tacos.h describes.
        let xml = unsafe { xml_from_c(topology, collective, size_bytes, options) }?;
        write_atomic(Path::new(path), xml.as_bytes()).map_err(Failure::from)?;
        Ok(0)
    })
}

/// Verifies the MSCCL XML file at `xml_path` and times it on `topology` for a collective of
/// `size_bytes` with the executor cost model; the time in microseconds goes to `*time_us`.
///
/// # Safety
/// `topology_text` and `xml_path` must be NULL or NUL-terminated strings that outlive the
/// call, and `time_us` NULL or a writable `double`, as include/tacos.h describes.
#[no_mangle]
pub unsafe extern "C" fn tacos_simulate_xml(
    topology_text: *const c_char,
    xml_path: *const c_char,
    size_bytes: u64,
    time_us: *mut f64,
) -> c_int {
    guard(-1, || {
        if time_us.is_null() {
            return Err("time_us is NULL".into());
        }
        check_size(size_bytes)?;
        // SAFETY: the caller guarantees `topology_text` is NULL or a string that outlives
        // the call.
        let topo = topology(
            unsafe { c_str(topology_text, "topology") }?,
            &SpecDefaults::default(),
        )?;
        // SAFETY: likewise for `xml_path`.
        let program = read_program(Path::new(unsafe { c_str(xml_path, "xml_path") }?))
            .map_err(Failure::from)?;
        let report = verify(&program, &VerifyOptions::default());
        if let Some(problem) = report.problems.first() {
            return Err(Failure {
                kind: "msccl",
                message: format!(
                    "{}: not a correct program: {}",
                    // SAFETY: as above; `xml_path` was read the same way.
                    unsafe { c_str(xml_path, "xml_path") }?,
                    problem.message
                ),
            });
        }
        let executor = Executor::for_topology(&topo, None, None).map_err(Failure::from)?;
        let sim = executor
            .simulate_program(&topo, &program, size_bytes)
            .map_err(Failure::from)?;
        // SAFETY: `time_us` is not null (checked above), and the caller guarantees it points
        // to a writable double.
        unsafe { *time_us = ps_to_us(sim.time_ps) };
        Ok(0)
    })
}
