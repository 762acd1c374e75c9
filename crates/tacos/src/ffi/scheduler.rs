//! The MSCCL scheduler plugin: the symbol `mscclScheduler` that the MSCCL executor (and
//! RCCL's MSCCL) loads from `MSCCL_SCHEDULER`.
//!
//! This module only marshals the ABI; what the plugin decides is [`crate::plugin`]'s.
//!
//! - `init` holds the process to the plugins' memory limit ([`plugin::set_memory_limit`])
//!   and to reading regular files only ([`crate::fsio::read_regular_files_only`]),
//!   reads the settings ([`Config::from_process`]) and starts a [`plugin::Scheduler`],
//!   which reads and compiles nothing yet (the executor's `init` does not say the
//!   communicator's size). The first call for a communicator size finds the cluster
//!   (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over `TACOS_NODES` nodes, or over
//!   as many nodes as the rank count needs; else nothing, and every call falls back to the
//!   executor's own algorithms) and the loader to compile for (`TACOS_TARGET`: `executor`,
//!   the default, `executor-256` or `msccl-legacy`; any other value gets one warning and
//!   the default, whose files every executor build loads). The first call of each
//!   collective, placement and size band decides that band for the whole process: the
//!   band's record in the cache directory (`TACOS_CACHE_DIR`, default
//!   `$XDG_CACHE_HOME/tacos` or `~/.cache/tacos`) where there is one, else the band
//!   compiled there and then, deterministically (the same bytes on every rank; the
//!   candidates bounded by `TACOS_MAX_TRANSFERS`, NCCL's own choice competing by
//!   `TACOS_NCCL_MARGIN`), and recorded. A band NCCL wins, or that no program fits, falls
//!   back on every rank alike. The executor may call `init` once per communicator: later
//!   calls reuse what the first found.
//! - `selectAlgo` matches function, rank count, in-place or out-of-place and message size
//!   against the band's record (every file was checked against the target's loader rules
//!   before its record was written: one that breaks any is never handed over), loads it through
//!   the executor's `mscclLoadAlgo`
//!   (looked up at run time) once per rank and file, and sets `scheduled` and `handle`.
//!   Anything it cannot serve (rooted collectives, Send/Recv, AllToAllv, Avg reductions,
//!   counts that are not a multiple of the algorithm's chunks, a rank count the topology
//!   does not have) it leaves unscheduled, so the executor falls back; it always returns
//!   success, because the executor fails the collective otherwise.
//! - `teardown` unloads every handle it loaded. What the scheduler decided stays: a
//!   process that creates communicators again keeps serving (or not) what it did, since
//!   its cache may have changed meanwhile while other nodes' did not.
//!
//! Nothing panics across the ABI; warnings go to stderr once each, prefixed `tacos:`.

use super::abi::{
    mscclAlgoHandle_t, mscclFuncAllGather, mscclFuncAllReduce, mscclFuncAllToAll,
    mscclFuncBroadcast, mscclFuncGather, mscclFuncReduce, mscclFuncReduceScatter, mscclFuncScatter,
    mscclFunc_t, mscclSchedulerInterface, mscclSchedulerParam, ncclDataType_t, ncclResult_t,
    ncclSuccess,
};
use super::guard::guard;
use super::PluginTable;
use crate::collective::CollectiveKind;
use crate::plugin::{self, Call, Config, Log};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::Mutex;

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mscclScheduler: PluginTable<mscclSchedulerInterface> =
    PluginTable(mscclSchedulerInterface {
        name: c"TACOS".as_ptr(),
        init: Some(init),
        selectAlgo: Some(select_algo),
        teardown: Some(teardown),
    });

/// What every entry point shares; `None` before the first `init`.
static STATE: Mutex<Option<State>> = Mutex::new(None);

type LoadAlgo = unsafe extern "C" fn(*const c_char, *mut mscclAlgoHandle_t, c_int) -> ncclResult_t;
type UnloadAlgo = unsafe extern "C" fn(mscclAlgoHandle_t) -> ncclResult_t;

/// The executor's functions for turning an XML file into an algorithm handle and back.
#[derive(Clone, Copy)]
struct Executor {
    load: LoadAlgo,
    unload: UnloadAlgo,
}

impl Executor {
    /// Looks `mscclLoadAlgo` and `mscclUnloadAlgo` up among the symbols the process has
    /// loaded (the executor exports them).
    fn find() -> Option<Executor> {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names; the symbols, when present,
        // have the executor's signatures (include/msccl_scheduler.h).
        unsafe {
            let load = libc::dlsym(libc::RTLD_DEFAULT, c"mscclLoadAlgo".as_ptr());
            let unload = libc::dlsym(libc::RTLD_DEFAULT, c"mscclUnloadAlgo".as_ptr());
            if load.is_null() || unload.is_null() {
                return None;
            }
            Some(Executor {
                load: std::mem::transmute::<*mut libc::c_void, LoadAlgo>(load),
                unload: std::mem::transmute::<*mut libc::c_void, UnloadAlgo>(unload),
            })
        }
    }
}

/// The plugin's scheduler and what the ABI adds: the executor's functions, and the
/// handles it gave.
struct State {
    scheduler: plugin::Scheduler,
    executor: Option<Executor>,
    /// Handles the executor gave for (file, rank).
    handles: HashMap<(PathBuf, c_int), mscclAlgoHandle_t>,
}

/// Prints a warning on stderr, once per process (init runs once per communicator).
fn warn(message: String) {
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if warned
        .get_or_insert_with(HashSet::new)
        .insert(message.clone())
    {
        eprintln!("tacos: WARN {message}");
    }
}

/// Warnings on stderr, once each per process.
struct Stderr;

impl Log for Stderr {
    /// Each band's decision, where `NCCL_DEBUG` asks NCCL for INFO (or TRACE) lines too:
    /// how a user sees which calls our programs serve.
    fn info(&self, message: &str) {
        static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let verbose = VERBOSE.get_or_init(|| {
            std::env::var("NCCL_DEBUG")
                .is_ok_and(|v| v.eq_ignore_ascii_case("info") || v.eq_ignore_ascii_case("trace"))
        });
        if *verbose {
            eprintln!("tacos: INFO {message}");
        }
    }

    fn warn(&self, message: &str) {
        warn(message.to_string());
    }
}

impl State {
    fn start() -> State {
        let executor = Executor::find();
        let config = Config::from_process();
        if executor.is_none() {
            warn("the executor's mscclLoadAlgo/mscclUnloadAlgo are not in this process; every collective falls back to the executor's algorithms".into());
        }
        State {
            scheduler: plugin::Scheduler::new(config, Box::new(Stderr)),
            executor,
            handles: HashMap::new(),
        }
    }
}

/// The collective a call is, where the plugin serves it.
fn kind_of(func: mscclFunc_t) -> Option<CollectiveKind> {
    #[allow(non_upper_case_globals)]
    match func {
        mscclFuncReduce => Some(CollectiveKind::Reduce),
        mscclFuncBroadcast => Some(CollectiveKind::Broadcast),
        mscclFuncAllReduce => Some(CollectiveKind::AllReduce),
        mscclFuncReduceScatter => Some(CollectiveKind::ReduceScatter),
        mscclFuncAllGather => Some(CollectiveKind::AllGather),
        mscclFuncGather => Some(CollectiveKind::Gather),
        mscclFuncScatter => Some(CollectiveKind::Scatter),
        mscclFuncAllToAll => Some(CollectiveKind::AllToAll),
        _ => None,
    }
}

/// Bytes per element of NCCL's data types (the fp8 types after bfloat16 are one byte).
fn type_size(t: ncclDataType_t) -> Option<usize> {
    match t {
        0 | 1 => Some(1),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        6 | 9 => Some(2),
        10 | 11 => Some(1),
        _ => None,
    }
}

/// What the executor's own scheduler computes for a call: whether it is in place, and its
/// message size in the units of `minBytes`/`maxBytes` (the whole buffer for allgather,
/// reducescatter and alltoall).
fn measure(p: &mscclSchedulerParam, kind: CollectiveKind, elem: usize) -> Option<(bool, u64)> {
    let rank_offset = (p.rank as usize).checked_mul(p.count)?.checked_mul(elem)?;
    let (send, recv) = (p.sendBuff as usize, p.recvBuff as usize);
    let in_place = match kind {
        CollectiveKind::AllGather | CollectiveKind::Gather => {
            send == recv.wrapping_add(rank_offset)
        }
        CollectiveKind::ReduceScatter | CollectiveKind::Scatter => {
            recv == send.wrapping_add(rank_offset)
        }
        _ => send == recv,
    };
    let multiplier = match kind {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            p.nRanks as usize
        }
        _ => 1,
    };
    let bytes = p.count.checked_mul(elem)?.checked_mul(multiplier)?;
    Some((in_place, bytes as u64))
}

/// The scheduler's `init`.
///
/// # Safety
/// None beyond the ABI's: it takes no arguments (unsafe only because the table's type says so).
unsafe extern "C" fn init() -> ncclResult_t {
    guard(ncclSuccess, || {
        plugin::set_memory_limit(&Stderr);
        crate::fsio::read_regular_files_only();
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if state.is_none() {
            *state = Some(State::start());
        }
        Ok(ncclSuccess)
    })
}

/// The scheduler's `selectAlgo`.
///
/// # Safety
/// `param` must be NULL or point to a `mscclSchedulerParam` the executor owns and does not
/// touch during the call (include/msccl_scheduler.h); the buffers it names are only
/// compared as addresses, never read.
unsafe extern "C" fn select_algo(param: *mut mscclSchedulerParam) -> ncclResult_t {
    guard(ncclSuccess, || {
        // SAFETY: the executor passes NULL (handled by `as_mut`) or its own aligned, initialized
        // parameter block, which nothing else touches until this call returns.
        let Some(p) = (unsafe { param.as_mut() }) else {
            return Ok(ncclSuccess);
        };
        p.scheduled = false;
        // Sum, Prod, Max and Min reduce the same way; the executor skips Avg and above.
        let (Some(kind), Some(elem), true, true) = (
            kind_of(p.func),
            type_size(p.dataType),
            p.op <= 3,
            p.nRanks > 0 && p.rank >= 0 && p.rank < p.nRanks && p.count > 0,
        ) else {
            return Ok(ncclSuccess);
        };
        let Some((in_place, bytes)) = measure(p, kind, elem) else {
            return Ok(ncclSuccess);
        };
        let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = state.as_mut() else {
            return Ok(ncclSuccess);
        };
        let Some(executor) = state.executor else {
            return Ok(ncclSuccess);
        };
        let call = Call {
            kind,
            ranks: p.nRanks as usize,
            in_place,
            bytes,
            count: p.count,
        };
        let Some(path) = state.scheduler.select(&call) else {
            return Ok(ncclSuccess);
        };
        let key = (path, p.rank);
        let handle = match state.handles.get(&key) {
            Some(&h) => h,
            None => {
                let c_path = CString::new(key.0.as_os_str().as_encoded_bytes())
                    .map_err(|_| format!("{} has a NUL byte", key.0.display()))?;
                let mut h: mscclAlgoHandle_t = 0;
                // SAFETY: `load` is the executor's mscclLoadAlgo (found by `Executor::find`),
                // given a NUL-terminated path and a handle slot that outlive the call, and
                // the caller's own rank.
                let rc = unsafe { (executor.load)(c_path.as_ptr(), &mut h, p.rank) };
                if rc != ncclSuccess {
                    warn(format!(
                        "mscclLoadAlgo refused {} (error {rc}); that call falls back",
                        key.0.display()
                    ));
                    return Ok(ncclSuccess);
                }
                state.handles.insert(key, h);
                h
            }
        };
        p.handle = handle;
        p.scheduled = true;
        Ok(ncclSuccess)
    })
}

/// The scheduler's `teardown`.
///
/// # Safety
/// None beyond the ABI's: it takes no arguments.
unsafe extern "C" fn teardown() -> ncclResult_t {
    guard(ncclSuccess, || {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = state.as_mut() {
            let handles = std::mem::take(&mut state.handles);
            if let Some(executor) = state.executor {
                for (_, handle) in handles {
                    // SAFETY: `unload` is the executor's mscclUnloadAlgo, given a handle its
                    // `load` returned and that was not unloaded yet (`handles` was emptied).
                    unsafe { (executor.unload)(handle) };
                }
            }
        }
        Ok(ncclSuccess)
    })
}
