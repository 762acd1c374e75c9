//! The NCCL tuner plugin: `ncclTunerPlugin_v2` to `ncclTunerPlugin_v6`, thin glue over
//! [`Tuning`] (the decisions, in [`crate::plugin`]) and the cost model in [`crate::tuner`].
//! NCCL loads `NCCL_TUNER_PLUGIN` and takes the newest symbol it knows. This module only
//! marshals the ABI: a context is a boxed [`Tuning`].
//!
//! What keeps the host safe:
//! - init always returns success, because NCCL fails the communicator when it does not.
//!   When the plugin cannot help (no topology, a rank count that does not match it, bad
//!   settings) it logs a warning and hands back a context that changes nothing;
//! - getCollInfo always returns success (NCCL fails the collective otherwise), only reads
//!   the precomputed decisions, and leaves NCCL's choice alone for null pointers, unknown
//!   collectives, tables of implausible shape, or when NCCL prefers an algorithm the model
//!   does not cover (CollNet, NVLS, PAT);
//! - the cost table is one block of `numAlgo x numProto` floats passed as `float**`: it is
//!   read as such, never as row pointers. The plugin lowers one entry to 0.0 (NCCL takes
//!   the cheapest) and never touches a disabled (negative) entry: when its choice is
//!   disabled it takes its next best that is enabled;
//! - v2 sets the algorithm and protocol itself and cannot see what NCCL disabled, so it
//!   only picks what NCCL runs everywhere (Ring, Tree for All-Reduce; LL or Simple), and
//!   picks nothing when `NCCL_ALGO`/`NCCL_PROTO` is set or CollNet/NVLS is available;
//! - `*nChannels` is written only when the model asks for fewer channels than fill the
//!   GPU's links (mostly latency-bound sizes); NCCL starts it at 0, "NCCL decides";
//! - every rank must see the same settings (the same `TACOS_TOPOLOGY` file on every node):
//!   ranks that decide differently would run different algorithms for one collective;
//! - every entry point runs inside [`guard`], so no panic crosses into NCCL; messages go
//!   through NCCL's logger (format "%s", flags INIT|TUNING) when it is not null, one line
//!   each with control characters escaped; a communicator the model cannot help gets one
//!   warning.

use super::abi::{
    ncclDebugLogLevel, ncclDebugLogger_t, ncclFunc_t, ncclNvlDomainInfo_v5_t, ncclResult_t,
    ncclSuccess, ncclTunerConstants_v5_t, ncclTuner_v2_t, ncclTuner_v3_t, ncclTuner_v4_t,
    ncclTuner_v5_t, ncclTuner_v6_t, NCCL_INIT, NCCL_LOG_INFO, NCCL_LOG_WARN, NCCL_TUNING,
};
use super::guard::{guard, tacos_last_error};
use super::PluginTable;
use crate::collective::CollectiveKind;
use crate::plugin::{Config, CostTable, Log, NvlDomains, Tuning};
use crate::tuner::{Choice, Communicator, NcclConstants, TUNED};
use std::ffi::{c_int, c_ulong, c_void, CStr, CString};

const NAME: &CStr = c"TACOS";
/// Tables larger than this are taken for garbage and left alone (NCCL's is 7 x 3).
const MAX_TABLE_ALGORITHMS: usize = 64;
const MAX_TABLE_PROTOCOLS: usize = 16;

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclTunerPlugin_v2: PluginTable<ncclTuner_v2_t> = PluginTable(ncclTuner_v2_t {
    name: NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v2),
    destroy: Some(finalize),
});

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclTunerPlugin_v3: PluginTable<ncclTuner_v3_t> = PluginTable(ncclTuner_v3_t {
    name: NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v3),
    destroy: Some(finalize),
});

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclTunerPlugin_v4: PluginTable<ncclTuner_v4_t> = PluginTable(ncclTuner_v4_t {
    name: NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v4),
    destroy: Some(finalize),
});

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclTunerPlugin_v5: PluginTable<ncclTuner_v5_t> = PluginTable(ncclTuner_v5_t {
    name: NAME.as_ptr(),
    init: Some(init_v5),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
});

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclTunerPlugin_v6: PluginTable<ncclTuner_v6_t> = PluginTable(ncclTuner_v6_t {
    name: NAME.as_ptr(),
    init: Some(init_v5),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
    getChunkSize: None,
});

/// NCCL's logger, which may be null.
#[derive(Clone, Copy)]
struct Logger(ncclDebugLogger_t);

impl Log for Logger {
    fn info(&self, message: &str) {
        self.log(NCCL_LOG_INFO, message);
    }

    fn warn(&self, message: &str) {
        self.log(NCCL_LOG_WARN, message);
    }
}

impl Logger {
    fn log(self, level: ncclDebugLogLevel, message: &str) {
        let Some(log) = self.0 else { return };
        let text = log_line(message);
        let flags = (NCCL_INIT | NCCL_TUNING) as c_ulong;
        // SAFETY: NCCL's logger is printf-like; "%s" takes exactly the one C string given.
        unsafe {
            log(
                level,
                flags,
                c"tacos/tuner".as_ptr(),
                0,
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }
}

/// `message` as one line of NCCL's log: control characters (newlines, terminal escapes,
/// NUL) escaped, since messages repeat settings nobody checked.
fn log_line(message: &str) -> CString {
    let mut line = String::from("TACOS/Tuner: ");
    for c in message.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    CString::new(line).unwrap_or_default()
}

/// Runs `start` for `context`, which is set to the new context, or to null if even that
/// failed (every entry point takes null for "change nothing").
///
/// # Safety
/// `context` must be NULL or point to a writable `void*` (NCCL's slot for the context).
unsafe fn init(context: *mut *mut c_void, log: Logger, start: impl FnOnce() -> Tuning) {
    crate::plugin::set_memory_limit(&log);
    crate::fsio::read_regular_files_only();
    if context.is_null() {
        log.warn("init was given no place for its context; NCCL keeps its own choices");
        return;
    }
    // SAFETY: not null, and the caller guarantees a writable `void*`; it is cleared first so
    // that a failure leaves the "change nothing" context.
    unsafe { *context = std::ptr::null_mut() };
    let built = guard(None, || Ok(Some(start())));
    match built {
        // SAFETY: as above; the box is NCCL's to hand back to `finalize`, which frees it.
        Some(ctx) => unsafe { *context = Box::into_raw(Box::new(ctx)).cast() },
        None => {
            // SAFETY: tacos_last_error returns this thread's NUL-terminated message, valid
            // until the next call into the library; it is copied out at once.
            let why = unsafe { CStr::from_ptr(tacos_last_error()) }.to_string_lossy();
            log.warn(&format!("{why}; NCCL keeps its own choices"));
        }
    }
}

/// init of v2, v3 and v4.
///
/// # Safety
/// `context` must be NULL or a writable `void*`; `log_function` NULL or NCCL's logger.
unsafe extern "C" fn init_v2(
    n_ranks: usize,
    n_nodes: usize,
    log_function: ncclDebugLogger_t,
    context: *mut *mut c_void,
) -> ncclResult_t {
    guard(ncclSuccess, || {
        let log = Logger(log_function);
        let comm = Communicator {
            ranks: n_ranks,
            nodes: n_nodes,
            constants: None,
        };
        // SAFETY: the caller guarantees `context` is NULL or a writable `void*`.
        unsafe {
            init(context, log, || {
                Tuning::start(Config::from_process(), comm, None, &log)
            })
        };
        Ok(ncclSuccess)
    })
}

/// init of v5 and v6: also NVLink domains and NCCL's tuning constants.
///
/// # Safety
/// `context` must be NULL or a writable `void*`; `nvl_domain_info` and `constants` NULL or
/// NCCL's initialized structs, unchanged during the call; `log_function` NULL or NCCL's
/// logger.
unsafe extern "C" fn init_v5(
    context: *mut *mut c_void,
    _comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log_function: ncclDebugLogger_t,
    nvl_domain_info: *mut ncclNvlDomainInfo_v5_t,
    constants: *mut ncclTunerConstants_v5_t,
) -> ncclResult_t {
    guard(ncclSuccess, || {
        let log = Logger(log_function);
        // SAFETY: NULL (handled by `as_ref`) or NCCL's initialized, aligned struct, which it
        // does not change while init runs; it is copied out before init returns.
        let nvl = unsafe { nvl_domain_info.as_ref() }.and_then(|d| {
            Some(NvlDomains {
                domains: usize::try_from(d.nNvlDomains).ok()?,
                min_ranks: usize::try_from(d.minRanksPerNvlDomain).ok()?,
                max_ranks: usize::try_from(d.maxRanksPerNvlDomain).ok()?,
            })
        });
        let comm = Communicator {
            ranks: n_ranks,
            nodes: n_nodes,
            // SAFETY: as for `nvl_domain_info`.
            constants: unsafe { constants.as_ref() }.map(from_nccl),
        };
        // SAFETY: the caller guarantees `context` is NULL or a writable `void*`.
        unsafe {
            init(context, log, || {
                Tuning::start(Config::from_process(), comm, nvl, &log)
            })
        };
        Ok(ncclSuccess)
    })
}

fn from_nccl(c: &ncclTunerConstants_v5_t) -> NcclConstants {
    NcclConstants {
        base_latency_us: c.baseLatencies,
        hw_latency_us: c.hwLatencies,
        ll_max_gbps: c.llMaxBws,
        per_channel_ring_ll128_gbps: c.perChMaxRingLL128Bws,
        per_channel_tree_ll128_gbps: c.perChMaxTreeLL128Bws,
        per_channel_tree_gbps: c.perChMaxTreeBws,
    }
}

/// destroy (v2-v4) and finalize (v5, v6).
///
/// # Safety
/// `context` must be NULL or a context `init` made and not yet finalized, used by no other
/// call now or later.
unsafe extern "C" fn finalize(context: *mut c_void) -> ncclResult_t {
    guard(ncclSuccess, || {
        if !context.is_null() {
            // SAFETY: NCCL hands back the pointer `init` took from `Box::into_raw`, once, after
            // its last call with it.
            drop(unsafe { Box::from_raw(context.cast::<Tuning>()) });
        }
        Ok(ncclSuccess)
    })
}

/// The context behind NCCL's pointer, if any.
///
/// # Safety
/// `context` must be NULL or a context `init` made and not yet finalized, which outlives
/// `'a`.
unsafe fn context<'a>(context: *mut c_void) -> Option<&'a Tuning> {
    // SAFETY: NULL or a live `Box<Tuning>` from `init`; decisions only read it (`&Tuning`), so
    // NCCL's threads may share it.
    unsafe { context.cast::<Tuning>().as_ref() }
}

/// The collective NCCL's function number names, where the model tunes it.
fn tuned(coll_type: ncclFunc_t) -> Option<CollectiveKind> {
    TUNED.get(coll_type as usize).copied()
}

/// Writes the choice's channel count where it has one.
///
/// # Safety
/// `n_channels` must be NULL or point to a writable `int`.
unsafe fn set_channels(choice: &Choice, n_channels: *mut c_int) {
    // SAFETY: NULL (handled by `as_mut`) or, as the caller guarantees, NCCL's writable `int`.
    if let (Some(n), Some(out)) = (choice.channels, unsafe { n_channels.as_mut() }) {
        *out = n as c_int;
    }
}

/// getCollInfo of v2: sets the algorithm and protocol itself.
///
/// # Safety
/// `context` must be NULL or a live context from `init`; `algorithm`, `protocol` and
/// `n_channels` NULL or writable `int`s.
unsafe extern "C" fn get_coll_info_v2(
    context: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    coll_net_support: c_int,
    nvls_support: c_int,
    _num_pipe_ops: c_int,
    algorithm: *mut c_int,
    protocol: *mut c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    guard(ncclSuccess, || {
        // SAFETY: the caller guarantees `context` is NULL or a live context from `init`.
        let (Some(ctx), Some(kind)) = (unsafe { self::context(context) }, tuned(coll_type)) else {
            return Ok(ncclSuccess);
        };
        // SAFETY: NULL (handled by `as_mut`) or NCCL's writable `int`s, distinct and unchanged
        // by NCCL during the call.
        let outputs = unsafe { (algorithm.as_mut(), protocol.as_mut()) };
        let (Some(algorithm), Some(protocol)) = outputs else {
            return Ok(ncclSuccess);
        };
        let picked = ctx.pick(
            kind,
            n_bytes as u64,
            coll_net_support != 0,
            nvls_support != 0,
        );
        if let Some(choice) = picked {
            *algorithm = choice.algorithm.index() as c_int;
            *protocol = choice.protocol.index() as c_int;
            // SAFETY: the caller guarantees `n_channels` is NULL or a writable `int`.
            unsafe { set_channels(choice, n_channels) };
        }
        Ok(ncclSuccess)
    })
}

/// getCollInfo of v3: lowers an entry of NCCL's cost table.
///
/// # Safety
/// As [`steer`]'s.
unsafe extern "C" fn get_coll_info_v3(
    context: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    _num_pipe_ops: c_int,
    coll_cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: the caller guarantees the pointers as `steer` requires.
    unsafe {
        steer(
            context,
            coll_type,
            n_bytes,
            coll_cost_table,
            num_algo,
            num_proto,
            n_channels,
        )
    }
}

/// getCollInfo of v4, v5 and v6 (v3's with `regBuff`).
///
/// # Safety
/// As [`steer`]'s.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_v4(
    context: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    _num_pipe_ops: c_int,
    coll_cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    _reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: the caller guarantees the pointers as `steer` requires.
    unsafe {
        steer(
            context,
            coll_type,
            n_bytes,
            coll_cost_table,
            num_algo,
            num_proto,
            n_channels,
        )
    }
}

/// Lowers the cost of the model's choice in NCCL's table.
///
/// # Safety
/// `context` must be NULL or a live context from `init`; `table` NULL or NCCL's cost table
/// as [`cost_table`] requires; `n_channels` NULL or a writable `int`.
unsafe fn steer(
    context: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    guard(ncclSuccess, || {
        // SAFETY: the caller guarantees `context` is NULL or a live context from `init`.
        let (Some(ctx), Some(kind)) = (unsafe { self::context(context) }, tuned(coll_type)) else {
            return Ok(ncclSuccess);
        };
        // Nothing to steer to: NCCL's table is not even read.
        if ctx.choices(kind, n_bytes as u64).is_empty() {
            return Ok(ncclSuccess);
        }
        // SAFETY: the caller guarantees `table` is NULL or NCCL's table of that shape.
        if let Some(mut table) = unsafe { cost_table(table, num_algo, num_proto) } {
            if let Some(choice) = ctx.steer(kind, n_bytes as u64, &mut table) {
                // SAFETY: the caller guarantees `n_channels` is NULL or a writable `int`.
                unsafe { set_channels(choice, n_channels) };
            }
        }
        Ok(ncclSuccess)
    })
}

/// NCCL's cost table behind its `float**` (one block of `algorithms x protocols` floats,
/// never row pointers), if its shape is plausible and it is aligned.
///
/// # Safety
/// `table` must be NULL or point to `algorithms x protocols` initialized floats that nothing
/// else reads or writes during `'a`.
unsafe fn cost_table<'a>(
    table: *mut *mut f32,
    algorithms: c_int,
    protocols: c_int,
) -> Option<CostTable<'a>> {
    let algorithms = usize::try_from(algorithms)
        .ok()
        .filter(|a| (1..=MAX_TABLE_ALGORITHMS).contains(a))?;
    let protocols = usize::try_from(protocols)
        .ok()
        .filter(|p| (1..=MAX_TABLE_PROTOCOLS).contains(p))?;
    let first = table.cast::<f32>();
    if first.is_null() || !first.is_aligned() {
        return None;
    }
    // SAFETY: `first` is not null and is aligned (checked above); the caller guarantees
    // `algorithms x protocols` floats there (both bounded above, so the product neither
    // overflows nor passes isize::MAX bytes), initialized and used by nothing else for `'a`.
    let costs = unsafe { std::slice::from_raw_parts_mut(first, algorithms * protocols) };
    CostTable::new(costs, protocols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::abi::{ncclFuncAllGather, ncclFuncAllReduce, ncclFuncRecv};
    use std::ptr::null_mut;

    const DISABLED: f32 = -1.0;
    const MAX_CHANNELS_ASKED: c_int = crate::tuner::MAX_CHANNELS as c_int;

    /// A context for a 2-node DGX A100 communicator (16 ranks), or one for a communicator
    /// the topology does not fit.
    #[test]
    fn log_lines_are_one_line_without_control_characters() {
        let line = log_line("bad spec 'mesh:4x\u{1b}[2J\n\0': no");
        let text = line.to_str().unwrap();
        assert_eq!(
            text,
            "TACOS/Tuner: bad spec 'mesh:4x\\u{1b}[2J\\n\\u{0}': no"
        );
        assert!(!text.chars().any(char::is_control));
    }

    fn context(ranks: usize, nodes: usize) -> Box<Tuning> {
        let config = Config {
            topology: Some("preset:dgx-a100,nodes=2".into()),
            ..Config::default()
        };
        let comm = Communicator {
            ranks,
            nodes,
            constants: None,
        };
        Box::new(Tuning::start(Ok(config), comm, None, &Logger(None)))
    }

    /// A table as NCCL builds it for `coll` (7 x 3): Tree/Ring entries 100 us, Tree
    /// disabled except for All-Reduce, CollNet/NVLS/PAT disabled.
    fn table(coll: ncclFunc_t) -> Vec<f32> {
        let mut t = vec![100.0; 21];
        t[6..].fill(DISABLED);
        if coll != ncclFuncAllReduce {
            t[..3].fill(DISABLED);
        }
        t
    }

    /// getCollInfo of v4 on `t` as an `algos x protos` table.
    ///
    /// # Safety
    /// `ctx` must be NULL or a live context, and `t` hold `algos x protos` floats unless that
    /// shape is one the plugin refuses (not positive, or past its bounds).
    unsafe fn call_v4(
        ctx: *mut c_void,
        coll: ncclFunc_t,
        bytes: usize,
        t: &mut [f32],
        algos: c_int,
        protos: c_int,
        channels: &mut c_int,
    ) -> ncclResult_t {
        let get = ncclTunerPlugin_v4.0.getCollInfo.unwrap();
        // SAFETY: the caller guarantees `ctx` and the table's shape; `channels` is a live `int`.
        unsafe {
            get(
                ctx,
                coll,
                bytes,
                1,
                t.as_mut_ptr().cast(),
                algos,
                protos,
                0,
                channels,
            )
        }
    }

    fn lowered(before: &[f32], after: &[f32]) -> Vec<usize> {
        (0..before.len())
            .filter(|&i| before[i] != after[i])
            .collect()
    }

    #[test]
    fn one_entry_is_lowered_and_disabled_ones_stay() {
        let mut ctx = context(16, 2);
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        for coll in 0..5 {
            for bytes in [0, 8, 1 << 20, 1 << 30, usize::MAX] {
                let mut t = table(coll);
                // As NCCL_PROTO=^LL would: LL disabled for Tree and Ring.
                t[0] = DISABLED;
                t[3] = DISABLED;
                let before = t.clone();
                let mut channels = 0;
                assert_eq!(
                    // SAFETY: `ptr` is the live context `ctx` owns, and `t` holds the 7 x 3 floats.
                    unsafe { call_v4(ptr, coll, bytes, &mut t, 7, 3, &mut channels) },
                    ncclSuccess
                );
                let changed = lowered(&before, &t);
                assert_eq!(changed.len(), 1, "coll {coll}, {bytes} B: {t:?}");
                let i = changed[0];
                assert!(before[i] >= 0.0 && t[i] == 0.0, "entry {i}");
                assert!(i < 6 && i % 3 != 0, "entry {i} is Tree/Ring and not LL");
                assert!((0..=MAX_CHANNELS_ASKED).contains(&channels));
            }
        }
    }

    #[test]
    fn bad_arguments_change_nothing() {
        let mut ctx = context(16, 2);
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        let get = ncclTunerPlugin_v4.0.getCollInfo.unwrap();
        let mut channels = 0;
        for (coll, algos, protos) in [
            (ncclFuncRecv, 7, 3),
            (99, 7, 3),
            (u32::MAX, 7, 3),
            (ncclFuncAllReduce, 0, 3),
            (ncclFuncAllReduce, -1, 3),
            (ncclFuncAllReduce, 7, 0),
            (ncclFuncAllReduce, 7, -5),
            (ncclFuncAllReduce, 1000, 3),
            (ncclFuncAllReduce, 7, 1000),
        ] {
            let mut t = table(ncclFuncAllReduce);
            let before = t.clone();
            assert_eq!(
                // SAFETY: `ptr` is a live context; `t` holds 7 x 3 floats, and the other
                // shapes are ones the plugin refuses before reading anything (beyond its
                // bounds, or not positive).
                unsafe { call_v4(ptr, coll, 8, &mut t, algos, protos, &mut channels) },
                ncclSuccess
            );
            assert_eq!(t, before, "coll {coll}, {algos} x {protos}");
        }
        assert_eq!(channels, 0);
        let mut t = table(ncclFuncAllReduce);
        let before = t.clone();
        // SAFETY: `ptr` is a live context (or NULL, which the plugin takes); every table is
        // NULL or `t`'s 7 x 3 floats; the channel count is NULL or `channels`.
        unsafe {
            assert_eq!(
                get(
                    null_mut(),
                    ncclFuncAllReduce,
                    8,
                    1,
                    t.as_mut_ptr().cast(),
                    7,
                    3,
                    0,
                    &mut channels
                ),
                ncclSuccess
            );
            assert_eq!(
                get(
                    ptr,
                    ncclFuncAllReduce,
                    8,
                    1,
                    null_mut(),
                    7,
                    3,
                    0,
                    &mut channels
                ),
                ncclSuccess
            );
            // A null channel count still lets the table be steered.
            assert_eq!(
                get(
                    ptr,
                    ncclFuncAllReduce,
                    8,
                    1,
                    t.as_mut_ptr().cast(),
                    7,
                    3,
                    0,
                    null_mut()
                ),
                ncclSuccess
            );
        }
        assert_eq!(lowered(&before, &t).len(), 1);
        // A misaligned table is left alone.
        let mut raw = vec![0u8; 4 * 22];
        // SAFETY: one byte into a buffer of 88, still inside it.
        let misaligned = unsafe { raw.as_mut_ptr().add(1) };
        // SAFETY: the 7 x 3 floats from `misaligned` lie inside `raw` (1 + 84 <= 88 bytes), and
        // the plugin refuses a misaligned table before reading it.
        let r = unsafe {
            get(
                ptr,
                ncclFuncAllReduce,
                8,
                1,
                misaligned.cast(),
                7,
                3,
                0,
                &mut channels,
            )
        };
        assert_eq!(r, ncclSuccess);
        assert!(raw.iter().all(|&b| b == 0));
    }

    #[test]
    fn odd_table_shapes_are_read_as_one_block() {
        let mut ctx = context(16, 2);
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        let mut channels = 0;
        // 2 x 3 (Tree and Ring only), guards after it.
        let d = DISABLED;
        let mut t = vec![d, d, d, 100.0, 100.0, 100.0, 7.0, 7.0];
        // SAFETY: `ptr` is a live context and `t` holds the 2 x 3 floats (and two more).
        unsafe { call_v4(ptr, ncclFuncAllGather, 8, &mut t, 2, 3, &mut channels) };
        assert_eq!(t, [d, d, d, 0.0, 100.0, 100.0, 7.0, 7.0], "Ring/LL at 8 B");
        // 7 x 2 (no Simple column): at 4 GiB the fastest entry there is, Ring/LL128 (the
        // protocol with the larger share of link speed), is (1, 1).
        let mut t = vec![d, d, 100.0, 100.0];
        t.extend([d; 10]);
        t.extend([7.0, 7.0]);
        let before = t.clone();
        // SAFETY: `ptr` is a live context and `t` holds the 7 x 2 floats (and two more).
        unsafe { call_v4(ptr, ncclFuncAllGather, 4 << 30, &mut t, 7, 2, &mut channels) };
        assert_eq!(lowered(&before, &t), vec![3]);
        // 1 x 1: NCCL's only entry is Tree/LL, which All-Gather cannot take.
        let mut t = vec![100.0, 7.0];
        // SAFETY: `ptr` is a live context and `t` holds the 1 x 1 float (and one more).
        unsafe { call_v4(ptr, ncclFuncAllGather, 8, &mut t, 1, 1, &mut channels) };
        assert_eq!(t, [100.0, 7.0]);
    }

    #[test]
    fn algorithms_the_model_does_not_cover_keep_their_place() {
        let mut ctx = context(16, 2);
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        let mut t = table(ncclFuncAllReduce);
        t[4 * 3 + 2] = 5.0; // NVLS/Simple enabled and NCCL's cheapest
        let before = t.clone();
        let mut channels = 0;
        // SAFETY: `ptr` is a live context and `t` holds the 7 x 3 floats.
        unsafe { call_v4(ptr, ncclFuncAllReduce, 1 << 30, &mut t, 7, 3, &mut channels) };
        assert_eq!(t, before);
        // Everything Tree/Ring disabled: nothing to steer to.
        let mut t = table(ncclFuncAllReduce);
        t[..6].fill(DISABLED);
        t[6 * 3 + 2] = 50.0; // PAT
        let before = t.clone();
        // SAFETY: as above.
        unsafe { call_v4(ptr, ncclFuncAllGather, 1 << 30, &mut t, 7, 3, &mut channels) };
        assert_eq!(t, before);
    }

    #[test]
    fn v2_picks_only_what_nccl_runs_everywhere() {
        let mut ctx = context(16, 2);
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        let get = ncclTunerPlugin_v2.0.getCollInfo.unwrap();
        for coll in 0..5 {
            for bytes in [0, 8, 1 << 16, 1 << 20, 1 << 24, 1 << 30] {
                let (mut algo, mut proto, mut channels) = (-1, -1, 0);
                // SAFETY: `ptr` is a live context, and the three outputs are this frame's `int`s.
                unsafe {
                    get(
                        ptr,
                        coll,
                        bytes,
                        0,
                        0,
                        1,
                        &mut algo,
                        &mut proto,
                        &mut channels,
                    )
                };
                assert!(
                    algo == 1 || (algo == 0 && coll == ncclFuncAllReduce),
                    "{coll} {bytes}: {algo}"
                );
                assert!(proto == 0 || proto == 2, "{coll} {bytes}: protocol {proto}");
                assert!((0..=MAX_CHANNELS_ASKED).contains(&channels));
            }
        }
        // NVLS or CollNet available, unknown collectives, null outputs: nothing set.
        for (coll, collnet, nvls) in [
            (ncclFuncAllReduce, 1, 0),
            (ncclFuncAllReduce, 0, 1),
            (ncclFuncRecv, 0, 0),
            (1234, 0, 0),
        ] {
            let (mut algo, mut proto, mut channels) = (-1, -1, 0);
            // SAFETY: as above.
            unsafe {
                get(
                    ptr,
                    coll,
                    8,
                    collnet,
                    nvls,
                    1,
                    &mut algo,
                    &mut proto,
                    &mut channels,
                )
            };
            assert_eq!((algo, proto, channels), (-1, -1, 0));
        }
        let mut algo = -1;
        // SAFETY: `ptr` is a live context; the outputs are `algo` or NULL.
        unsafe {
            get(
                ptr,
                ncclFuncAllReduce,
                8,
                0,
                0,
                1,
                &mut algo,
                null_mut(),
                null_mut(),
            )
        };
        assert_eq!(algo, -1);
        ctx.user_chose_algorithms = true;
        let (mut algo, mut proto) = (-1, -1);
        // SAFETY: `ptr` is a live context; the outputs are this frame's `int`s or NULL.
        unsafe {
            get(
                ptr,
                ncclFuncAllReduce,
                8,
                0,
                0,
                1,
                &mut algo,
                &mut proto,
                null_mut(),
            )
        };
        assert_eq!((algo, proto), (-1, -1));
    }

    #[test]
    fn contexts_that_cannot_help_change_nothing() {
        // 8 ranks on a 16-NPU topology.
        let mut ctx = context(8, 1);
        assert!(ctx.tuner.is_none());
        let ptr: *mut c_void = (&mut *ctx as *mut Tuning).cast();
        let mut t = table(ncclFuncAllReduce);
        let before = t.clone();
        let mut channels = 0;
        // SAFETY: `ptr` is the live context `ctx` owns, and `t` holds the 7 x 3 floats.
        unsafe { call_v4(ptr, ncclFuncAllReduce, 8, &mut t, 7, 3, &mut channels) };
        assert_eq!((t, channels), (before, 0));
        assert!(context(1, 1).tuner.is_none());
        // Settings that do not parse: a context all the same.
        let comm = Communicator {
            ranks: 16,
            nodes: 2,
            constants: None,
        };
        let bad = Err(crate::Error::Invalid {
            input: "TACOS_NIC_GBPS".into(),
            value: "x".into(),
            allowed: "a bandwidth in GB/s".into(),
        });
        assert!(Tuning::start(bad, comm, None, &Logger(None))
            .tuner
            .is_none());
    }

    #[test]
    fn init_and_finalize_take_null_pointers() {
        // SAFETY: init and finalize take NULL for every pointer, and no logger.
        unsafe {
            let init = ncclTunerPlugin_v5.0.init.unwrap();
            assert_eq!(
                init(null_mut(), 0, 16, 2, None, null_mut(), null_mut()),
                ncclSuccess
            );
            let init = ncclTunerPlugin_v2.0.init.unwrap();
            assert_eq!(init(16, 2, None, null_mut()), ncclSuccess);
            assert_eq!(finalize(null_mut()), ncclSuccess);
        }
        assert!(ncclTunerPlugin_v6.0.getChunkSize.is_none());
        // SAFETY: the table's name is a NUL-terminated static string.
        let name = unsafe { CStr::from_ptr(ncclTunerPlugin_v3.0.name) };
        assert_eq!(name, NAME);
    }
}
