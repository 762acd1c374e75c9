//! The plugins' start as a GPU process of someone's job runs it: any environment (the
//! `TACOS_*` and `NCCL_*` settings), any NCCL topology file, any communicator size. Both
//! plugins either serve or fall back; nothing panics, aborts or allocates without bound.
//!
//! Input: `NAME=VALUE` lines, then an empty line, then the bytes of the file that
//! `NCCL_TOPO_FILE` names (whatever path the input gives is replaced by that file).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use std::collections::HashMap;
use std::ffi::OsString;
use tacos::collective::CollectiveKind;
use tacos::plugin::{Call, Config, Scheduler, Silent, Tuning};
use tacos::tuner::Communicator;

fuzz_target!(|data: &[u8]| {
    common::hold_memory();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (settings, topo_file) = text.split_once("\n\n").unwrap_or((text, ""));
    let scratch = std::env::temp_dir().join(format!("tacos-fuzz-plugin-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&scratch);
    let mut env: HashMap<String, OsString> = settings
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), OsString::from(value)))
        .collect();
    if env.contains_key("NCCL_TOPO_FILE") {
        let path = scratch.join("topo.xml");
        if std::fs::write(&path, topo_file).is_err() {
            return;
        }
        env.insert("NCCL_TOPO_FILE".into(), path.into_os_string());
    }
    // A cache that cannot be created: the scheduler goes as far as it can (settings,
    // cluster, sizes) and then falls back without starting a compile, which would outlive
    // the input; nothing is written, whatever the input says.
    env.insert(
        "TACOS_CACHE_DIR".into(),
        OsString::from("/dev/null/tacos-cache"),
    );
    let lookup = |name: &str| env.get(name).cloned();
    // The communicator's size comes from the input too, kept to what a job can have.
    let ranks = 1 + data.first().map_or(0, |&b| b as usize) * 32;
    let nodes = 1 + data.get(1).map_or(0, |&b| b as usize % 64);
    let comm = Communicator {
        ranks,
        nodes,
        constants: None,
    };
    let tuning = Tuning::start(Config::from_env(lookup), comm, None, &Silent);
    if let Some(tuner) = &tuning.tuner {
        let _ = tuner.choices(CollectiveKind::AllReduce, 1 << 20);
    }
    let mut scheduler = Scheduler::new(Config::from_env(lookup), Box::new(Silent));
    let _ = scheduler.select(&Call {
        kind: CollectiveKind::AllReduce,
        ranks,
        in_place: false,
        bytes: 1 << 20,
        count: (1 << 18).max(ranks) / ranks,
    });
});
