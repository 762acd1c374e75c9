//! The MSCCL scheduler plugin: the symbol `mscclScheduler` that the MSCCL executor (and
//! RCCL's MSCCL) loads from `MSCCL_SCHEDULER`.
//!
//! - `init` finds the cluster (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over
//!   `TACOS_NODES` nodes, or over as many nodes as the first call's rank count needs; else
//!   nothing, and every call falls back to the executor's own algorithms) and the loader
//!   to compile for (`TACOS_TARGET`: `executor`, the default, `executor-256` or
//!   `msccl-legacy`; any other value gets one warning and the default, whose files every
//!   executor build loads), then opens or compiles its algorithm set in the cache directory
//!   (`TACOS_CACHE_DIR`, default `$XDG_CACHE_HOME/tacos` or `~/.cache/tacos`) through
//!   [`crate::compile::open_or_compile`], the same code path as `tacos compile`: an offline-compiled
//!   directory and the online cache are the same thing, with the algorithm files alone in
//!   each entry's `msccl/`. The ranks of one node take turns on a lock, so one compiles and
//!   the others read its result; a corrupted or stale entry is detected by its hashes and
//!   rebuilt. The executor may call `init` once per communicator without `teardown` in
//!   between: later calls reuse what the first found.
//! - `selectAlgo` matches function, rank count, in-place or out-of-place and message size
//!   against the manifest, checks the file once against the target's loader rules (one that
//!   breaks any is never handed over), loads it through the executor's `mscclLoadAlgo`
//!   (looked up at run time) once per rank and file, and sets `scheduled` and `handle`.
//!   Anything it cannot serve (rooted collectives, Send/Recv, AllToAllv, Avg reductions,
//!   counts that are not a multiple of the algorithm's chunks, a rank count the topology
//!   does not have) it leaves unscheduled, so the executor falls back; it always returns
//!   success, because the executor fails the collective otherwise.
//! - `teardown` unloads every handle it loaded.
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
use crate::compile::{
    algorithm_dir, cache_dir_name, loader_problems, open_or_compile, CompileOptions, Manifest,
};
use crate::msccl::{read_program, Profile, Target};
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::{parse_spec_with_warnings, SpecDefaults, Topology};
use crate::tuner::{discover, PluginEnv};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, CString};
use std::path::{Path, PathBuf};
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

/// What every entry point shares; `None` before `init` and after `teardown`.
static STATE: Mutex<Option<Scheduler>> = Mutex::new(None);

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

/// An algorithm set on disk and its manifest.
struct AlgorithmDir {
    /// The directory holding the algorithm files alone (the entry's `msccl/`).
    algorithms: PathBuf,
    manifest: Manifest,
}

struct Scheduler {
    env: Option<PluginEnv>,
    nodes: Option<usize>,
    /// The loader the files are compiled for and checked against.
    target: Target,
    executor: Option<Executor>,
    /// Per communicator size: the algorithm set, or None where that size cannot be served.
    sets: HashMap<usize, Option<AlgorithmDir>>,
    /// Whether each file handed over so far passed the target's loader rules.
    admitted: HashMap<PathBuf, bool>,
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

impl Scheduler {
    fn start() -> Scheduler {
        let mut s = Scheduler {
            env: None,
            nodes: None,
            target: target_from_env(),
            executor: Executor::find(),
            sets: HashMap::new(),
            admitted: HashMap::new(),
            handles: HashMap::new(),
        };
        if s.executor.is_none() {
            warn("the executor's mscclLoadAlgo/mscclUnloadAlgo are not in this process; every collective falls back to the executor's algorithms".into());
        }
        match PluginEnv::from_process() {
            Ok(env) => s.env = Some(env),
            Err(e) => warn(format!("{e}; falling back to the executor's algorithms")),
        }
        match std::env::var("TACOS_NODES")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            None => {}
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => s.nodes = Some(n),
                _ => warn(format!(
                    "TACOS_NODES='{v}' must be a whole number >= 1; ignoring it"
                )),
            },
        }
        // With the whole cluster known now, compile now: the first collective stays fast.
        if let Some(ranks) = s.known_size() {
            s.prepare(ranks);
        }
        s
    }

    /// The communicator size the settings already fix, if any.
    fn known_size(&mut self) -> Option<usize> {
        let env = self.env.as_ref()?;
        if let Some(spec) = &env.topology {
            return parse_spec_with_warnings(spec, &SpecDefaults::default())
                .ok()
                .map(|(t, _)| t.alive_npus().len());
        }
        let nodes = self.nodes?;
        let file = env.nccl_topo_file.as_ref()?;
        gpus_per_node(file).map(|g| g * nodes)
    }

    /// The algorithm set for communicators of `ranks` ranks, compiled on first use.
    fn prepare(&mut self, ranks: usize) -> Option<&AlgorithmDir> {
        if !self.sets.contains_key(&ranks) {
            let set = match self.topology(ranks) {
                Ok(Some(topo)) => self.open(&topo),
                Ok(None) => None,
                Err(e) => {
                    warn(format!("{e}; falling back to the executor's algorithms"));
                    None
                }
            };
            self.sets.insert(ranks, set);
        }
        self.sets.get(&ranks).and_then(Option::as_ref)
    }

    /// The cluster for `ranks` ranks, or None (with a warning) where the settings give none.
    fn topology(&mut self, ranks: usize) -> Result<Option<Topology>, String> {
        let Some(env) = self.env.clone() else {
            return Ok(None);
        };
        if env.topology.is_none() && env.nccl_topo_file.is_none() {
            warn("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE is set; falling back to the executor's algorithms".into());
            return Ok(None);
        }
        let nodes = match (self.nodes, &env.nccl_topo_file) {
            (Some(n), _) => n,
            (None, Some(file)) if env.topology.is_none() => match gpus_per_node(file) {
                Some(g) if g > 0 && ranks % g == 0 => ranks / g,
                _ => {
                    return Err(format!(
                        "{ranks} ranks are not a whole number of nodes of {file}; set TACOS_NODES"
                    ))
                }
            },
            _ => 1,
        };
        let found = discover(&env, ranks, nodes, None).map_err(|e| e.to_string())?;
        for w in found.warnings {
            warn(w);
        }
        let npus = found.topology.alive_npus().len();
        if npus != ranks {
            warn(format!(
                "{} has {npus} NPUs but the communicator has {ranks} ranks; its collectives fall back to the executor's algorithms",
                found.source
            ));
            return Ok(None);
        }
        Ok(Some(found.topology))
    }

    /// Opens or compiles the set in the cache; a cache that cannot be written is replaced by
    /// a directory of this process under the system's temporary directory.
    fn open(&mut self, topo: &Topology) -> Option<AlgorithmDir> {
        let options = CompileOptions {
            target: self.target.clone(),
            ..CompileOptions::fast()
        };
        let name = cache_dir_name(topo, &options);
        let mut tried = Vec::new();
        for root in [
            cache_root(),
            std::env::temp_dir().join(format!("tacos-{}", std::process::id())),
        ] {
            let dir = root.join(&name);
            match open_or_compile(&dir, topo, &options, false, &|_| {}) {
                Ok((manifest, _)) => {
                    let algorithms = algorithm_dir(&dir);
                    return Some(AlgorithmDir {
                        algorithms,
                        manifest,
                    });
                }
                Err(e) => tried.push(format!("{}: {e}", dir.display())),
            }
        }
        warn(format!(
            "no algorithm set for {} ({}); falling back to the executor's algorithms",
            topo.name(),
            tried.join("; ")
        ));
        None
    }
}

/// The loader `TACOS_TARGET` names; unset or empty, the executor as it builds by default.
/// Any other value gets a warning and the default too: its files load in every executor
/// build, where falling back to the executor's own algorithms would drop the cluster's.
fn target_from_env() -> Target {
    let Some(value) = std::env::var("TACOS_TARGET")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Target::default();
    };
    match value.trim().parse::<Profile>() {
        Ok(profile) => Target::new(profile),
        Err(e) => {
            warn(format!(
                "TACOS_TARGET: {e}; compiling for the default target, {}",
                Profile::default()
            ));
            Target::default()
        }
    }
}

/// Whether the file at `path` passes `target`'s loader rules; a warning names what it
/// breaks when it does not.
fn admissible(path: &Path, target: &Target) -> bool {
    let problems = match read_program(path) {
        Ok(program) => loader_problems(&program, target),
        Err(e) => vec![e.to_string()],
    };
    if let Some(first) = problems.first() {
        warn(format!(
            "{} does not load in target {target} ({first}); its calls fall back to the executor's algorithms",
            path.display()
        ));
    }
    problems.is_empty()
}

/// The cache directory: `TACOS_CACHE_DIR`, else `$XDG_CACHE_HOME/tacos`, else
/// `$HOME/.cache/tacos`, else under the system's temporary directory.
fn cache_root() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("TACOS_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("tacos")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("tacos")))
        .unwrap_or_else(|| std::env::temp_dir().join("tacos-cache"))
}

/// GPUs one NCCL topology file describes.
fn gpus_per_node(file: &str) -> Option<usize> {
    nccl_xml::read(Path::new(file), &NcclImportOptions::default())
        .ok()
        .map(|i| i.topology.npus())
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

unsafe extern "C" fn init() -> ncclResult_t {
    guard(ncclSuccess, || {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if state.is_none() {
            *state = Some(Scheduler::start());
        }
        Ok(ncclSuccess)
    })
}

unsafe extern "C" fn select_algo(param: *mut mscclSchedulerParam) -> ncclResult_t {
    guard(ncclSuccess, || {
        let Some(p) = param.as_mut() else {
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
        let Some(scheduler) = state.as_mut() else {
            return Ok(ncclSuccess);
        };
        let Some(executor) = scheduler.executor else {
            return Ok(ncclSuccess);
        };
        let Some(set) = scheduler.prepare(p.nRanks as usize) else {
            return Ok(ncclSuccess);
        };
        let Some(entry) = set
            .manifest
            .select(kind, p.nRanks as usize, in_place, bytes)
        else {
            return Ok(ncclSuccess);
        };
        if entry.chunks_per_loop == 0 || p.count % entry.chunks_per_loop != 0 {
            return Ok(ncclSuccess);
        }
        let path = set.algorithms.join(&entry.file);
        let target = &scheduler.target;
        let admitted = *scheduler
            .admitted
            .entry(path.clone())
            .or_insert_with(|| admissible(&path, target));
        if !admitted {
            return Ok(ncclSuccess);
        }
        let key = (path, p.rank);
        let handle = match scheduler.handles.get(&key) {
            Some(&h) => h,
            None => {
                let c_path = CString::new(key.0.as_os_str().as_encoded_bytes())
                    .map_err(|_| format!("{} has a NUL byte", key.0.display()))?;
                let mut h: mscclAlgoHandle_t = 0;
                let rc = (executor.load)(c_path.as_ptr(), &mut h, p.rank);
                if rc != ncclSuccess {
                    warn(format!(
                        "mscclLoadAlgo refused {} (error {rc}); that call falls back",
                        key.0.display()
                    ));
                    return Ok(ncclSuccess);
                }
                scheduler.handles.insert(key, h);
                h
            }
        };
        p.handle = handle;
        p.scheduled = true;
        Ok(ncclSuccess)
    })
}

unsafe extern "C" fn teardown() -> ncclResult_t {
    guard(ncclSuccess, || {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(scheduler) = state.take() {
            if let Some(executor) = scheduler.executor {
                for (_, handle) in scheduler.handles {
                    (executor.unload)(handle);
                }
            }
        }
        Ok(ncclSuccess)
    })
}
