//! The plugins' start as a GPU process of someone's job runs it: any environment (the
//! `TACOS_*` and `NCCL_*` settings), any NCCL topology file, any communicator size. Both
//! plugins either serve or fall back; nothing panics, aborts, waits without a bound or
//! allocates without bound.
//!
//! Input: `NAME=VALUE` lines, then an empty line, then the bytes of the file that
//! `NCCL_TOPO_FILE` names (whatever path the input gives is replaced by that file), then,
//! optionally, an empty line and the bytes of a band record. Two lines are not settings:
//! - `FIFO=NAME` makes setting NAME a FIFO nobody writes (`TACOS_TOPOLOGY`,
//!   `NCCL_TOPO_FILE`, `TACOS_PROFILE`): the plugins must refuse it, not wait on it;
//! - `CACHE=1` gives the scheduler a cache of its own on a cluster of at most 8 ranks:
//!   after a first call compiles its band, every record of the entry is replaced by the
//!   record bytes of the input, every band's lock is held, and a second scheduler's call
//!   must read the records (served, or compiled again as corrupt) after a 1 ms lock wait.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use tacos::collective::CollectiveKind;
use tacos::fsio::{FileLock, Locking};
use tacos::plugin::{Call, Config, Scheduler, Silent, Tuning};
use tacos::tuner::Communicator;

/// Most ranks of a cluster the scheduler compiles for within one input.
const CACHE_RANKS_MAX: usize = 8;

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    // What the plugins' init sets: a FIFO is refused, never opened to wait on.
    tacos::fsio::read_regular_files_only();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (settings, rest) = text.split_once("\n\n").unwrap_or((text, ""));
    let (topo_file, record) = rest.split_once("\n\n").unwrap_or((rest, ""));
    let scratch = std::env::temp_dir().join(format!("tacos-fuzz-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::create_dir_all(&scratch);
    let mut env: HashMap<String, OsString> = HashMap::new();
    let mut fifos = Vec::new();
    let mut own_cache = false;
    for (name, value) in settings.lines().filter_map(|line| line.split_once('=')) {
        match name {
            "FIFO" => fifos.push(value.to_string()),
            "CACHE" => own_cache = true,
            _ => {
                env.insert(name.to_string(), OsString::from(value));
            }
        }
    }
    if env.contains_key("NCCL_TOPO_FILE") {
        let path = scratch.join("topo.xml");
        if std::fs::write(&path, topo_file).is_err() {
            return;
        }
        env.insert("NCCL_TOPO_FILE".into(), path.into_os_string());
    }
    for name in fifos {
        // Named as the setting's files are, so a spec reads it as a file.
        let extension = if name == "NCCL_TOPO_FILE" { "xml" } else { "json" };
        let path = scratch.join(format!("{}.{extension}", name.replace('/', "_")));
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        if made.is_ok_and(|s| s.success()) {
            env.insert(name, path.into_os_string());
        }
    }
    // The communicator's size comes from the input too, kept to what a job can have.
    let mut ranks = 1 + data.first().map_or(0, |&b| b as usize) * 32;
    let nodes = 1 + data.get(1).map_or(0, |&b| b as usize % 64);
    if own_cache {
        ranks = ranks.min(CACHE_RANKS_MAX);
        env.insert("TACOS_CACHE_DIR".into(), scratch.join("cache").into_os_string());
        env.insert("TACOS_LOCK_WAIT_MS".into(), OsString::from("1"));
    } else {
        // A cache that cannot be created: the scheduler goes as far as it can (settings,
        // cluster, sizes) and then falls back without starting a compile, which would
        // outlive the input; nothing is written, whatever the input says.
        env.insert(
            "TACOS_CACHE_DIR".into(),
            OsString::from("/dev/null/tacos-cache"),
        );
    }
    let lookup = |name: &str| env.get(name).cloned();
    let comm = Communicator {
        ranks,
        nodes,
        constants: None,
    };
    let tuning = Tuning::start(Config::from_env(lookup), comm, None, &Silent);
    if let Some(tuner) = &tuning.tuner {
        let _ = tuner.choices(CollectiveKind::AllReduce, 1 << 20);
    }
    let call = Call {
        kind: CollectiveKind::AllReduce,
        ranks,
        in_place: false,
        bytes: 1 << 20,
        count: (1 << 18).max(ranks) / ranks,
    };
    let mut scheduler = Scheduler::new(Config::from_env(lookup), Box::new(Silent));
    let _ = scheduler.select(&call);
    if !own_cache {
        return;
    }
    let Some(entry) = scheduler.entry(ranks) else {
        return;
    };
    let _locks = replace_records_and_lock(&entry.join("bands"), record.as_bytes());
    let mut again = Scheduler::new(Config::from_env(lookup), Box::new(Silent));
    let _ = again.select(&call);
});

/// Replaces every band record in `bands` by `record` and takes every band's lock, held
/// until the returned locks are dropped.
fn replace_records_and_lock(bands: &Path, record: &[u8]) -> Vec<FileLock> {
    let mut locks = Vec::new();
    let Ok(entries) = std::fs::read_dir(bands) else {
        return locks;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let _ = std::fs::write(entry.path(), record);
        let lock = bands.join(format!(".{name}.lock"));
        if let Ok(file) = std::fs::File::create(&lock) {
            if let Locking::Held(held) = FileLock::try_lock(file) {
                locks.push(held);
            }
        }
    }
    locks
}
