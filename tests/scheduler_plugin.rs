//! The MSCCL scheduler plugin as the executor sees it: a C stand-in for the executor
//! (tests/c/scheduler_harness.c) exports mscclLoadAlgo/mscclUnloadAlgo, dlopens the cdylib
//! and drives init/selectAlgo/teardown. Every file the plugin hands over must verify as the
//! collective and placement it was chosen for.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use tacos::collective::CollectiveKind;
use tacos::msccl::{read_program, verify, Profile, Target, VerifyOptions};

fn harness() -> &'static Path {
    static HARNESS: OnceLock<PathBuf> = OnceLock::new();
    HARNESS.get_or_init(|| common::build_harness("scheduler_harness", &["-ldl", "-rdynamic"]))
}

/// A scratch directory of this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacos-scheduler-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the harness; returns the files it loaded and everything it printed. The plugin
/// gets 600 s to prepare a set before it falls back (`TACOS_INIT_BUDGET`, unless `env`
/// sets it), so a cold cache is compiled before the first call returns, and `TMPDIR` is
/// a scratch directory of its own, checked to be left empty.
fn run(ranks: usize, expect_scheduled: bool, env: &[(&str, &str)]) -> (BTreeSet<PathBuf>, String) {
    let mode = if expect_scheduled {
        "expect-scheduled"
    } else {
        "expect-fallback"
    };
    run_mode(ranks, &[mode], env)
}

fn run_mode(ranks: usize, mode: &[&str], env: &[(&str, &str)]) -> (BTreeSet<PathBuf>, String) {
    static NEXT_TMPDIR: AtomicUsize = AtomicUsize::new(0);
    let mut cmd = Command::new(harness());
    cmd.arg(common::cdylib()).arg(ranks.to_string()).args(mode);
    for var in [
        "TACOS_TOPOLOGY",
        "NCCL_TOPO_FILE",
        "TACOS_NODES",
        "TACOS_CACHE_DIR",
        "TACOS_TARGET",
        "TACOS_NIC_GBPS",
        "TACOS_NVSWITCH_GBPS",
    ] {
        cmd.env_remove(var);
    }
    let tmp = scratch(&format!(
        "tmpdir-{}",
        NEXT_TMPDIR.fetch_add(1, Ordering::Relaxed)
    ));
    cmd.env("TACOS_INIT_BUDGET", "600").env("TMPDIR", &tmp);
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("the harness runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("\n0 failures"),
        "{env:?}:\n{text}"
    );
    let stray: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(stray.is_empty(), "left in TMPDIR: {stray:?}");
    let loaded = text
        .lines()
        .filter_map(|l| l.strip_prefix("LOAD "))
        .map(|l| PathBuf::from(l.splitn(3, ' ').nth(2).unwrap()))
        .collect();
    (loaded, text)
}

/// The `tacos: WARN` lines of a run that contain `needle`, but for the one about the
/// call the harness makes with one rank too many (the topology has another size).
fn warnings<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with("tacos: WARN") && l.contains(needle))
        .filter(|l| !l.contains("NPUs but the communicator has"))
        .collect()
}

/// Every loaded file is a correct program for `ranks` GPUs of one of the three collectives.
fn all_verify(files: &BTreeSet<PathBuf>, ranks: usize) {
    let mut kinds = BTreeSet::new();
    for f in files {
        let program = read_program(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(program.gpus.len(), ranks, "{}", f.display());
        let report = verify(&program, &VerifyOptions::default());
        assert!(
            report.is_correct(),
            "{}: {:?}",
            f.display(),
            report.problems.first()
        );
        kinds.insert(format!(
            "{:?} {}",
            program.collective_kind(),
            program.inplace
        ));
    }
    for kind in [
        CollectiveKind::AllReduce,
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
    ] {
        for in_place in [true, false] {
            assert!(
                kinds.contains(&format!("{:?} {in_place}", Some(kind))),
                "no {kind} in_place={in_place} among {kinds:?}"
            );
        }
    }
}

#[test]
fn verified_algorithms_for_every_call_cold_and_warm() {
    let cache = scratch("cache");
    let env = [
        ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let (cold, _) = run(16, true, &env);
    all_verify(&cold, 16);
    assert!(cold.iter().all(|f| f.starts_with(&cache)), "{cold:?}");
    only_algorithms_where_the_executor_scans(&cold);
    // Warm: the same directory serves the same files.
    let (warm, _) = run(16, true, &env);
    assert_eq!(warm, cold);
}

/// Every loaded file sits in a cache entry's `msccl/`, which holds regular files of
/// algorithm XML and nothing else; the manifest is beside it.
fn only_algorithms_where_the_executor_scans(files: &BTreeSet<PathBuf>) {
    let dirs: BTreeSet<&Path> = files.iter().map(|f| f.parent().unwrap()).collect();
    assert!(!dirs.is_empty());
    for dir in dirs {
        assert!(dir.ends_with("msccl"), "{}", dir.display());
        assert!(dir.parent().unwrap().join("manifest.json").is_file());
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            assert!(entry.file_type().unwrap().is_file(), "{:?}", entry.path());
            read_program(&entry.path()).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn tacos_target_picks_the_loader_and_a_bad_value_warns_once() {
    let cache = scratch("target");
    let c = cache.to_str().unwrap();
    let env = [("TACOS_TOPOLOGY", "ring:4"), ("TACOS_CACHE_DIR", c)];
    let (roomy, _) = run(4, true, &[env[0], env[1], ("TACOS_TARGET", "executor-256")]);
    // Entries are named tacos-VERSION-PROFILE-TOPOLOGYHASH-OPTIONSHASH.
    let in_entry = |files: &BTreeSet<PathBuf>, profile: &str| {
        let prefix = format!("tacos-{}-{profile}-", tacos::VERSION);
        files.iter().all(|f| {
            let entry = f.parent().unwrap().parent().unwrap();
            let name = entry.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)
                .and_then(|rest| rest.split('-').next())
                .is_some_and(|hash| hash.len() == 16)
        })
    };
    assert!(in_entry(&roomy, "executor-256"), "{roomy:?}");
    only_algorithms_where_the_executor_scans(&roomy);
    let roomy_target = Target::new(Profile::Executor256);
    for f in &roomy {
        let options = VerifyOptions {
            target: roomy_target.clone(),
            ..VerifyOptions::default()
        };
        assert!(verify(&read_program(f).unwrap(), &options).is_correct());
    }
    // A bad value: one warning naming it, and the default target's files.
    let (files, text) = run(4, true, &[env[0], env[1], ("TACOS_TARGET", "executor-512")]);
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tacos: WARN TACOS_TARGET"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("executor-512"), "{text}");
    assert!(!in_entry(&files, "executor-256") && in_entry(&files, "executor"));
    all_verify(&files, 4);
    let (default, _) = run(4, true, &env);
    assert_eq!(default, files);
}

#[test]
fn a_corrupted_cache_entry_is_rebuilt_with_one_warning() {
    let cache = scratch("corrupt");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let (files, text) = run(4, true, &env);
    assert!(warnings(&text, "").is_empty(), "{text}");
    let victim = files.iter().next().unwrap();
    std::fs::write(victim, "<algo broken").unwrap();
    let (again, text) = run(4, true, &env);
    all_verify(&again, 4);
    assert_eq!(again, files, "rebuilt in place");
    assert_eq!(warnings(&text, "rebuilding it").len(), 1, "{text}");
    assert_eq!(warnings(&text, "").len(), 1, "{text}");
}

/// The cache entry (its directory) the loaded files are in.
fn entry_of(files: &BTreeSet<PathBuf>) -> PathBuf {
    let entries: BTreeSet<&Path> = files
        .iter()
        .map(|f| f.parent().unwrap().parent().unwrap())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap().to_path_buf()
}

#[test]
fn an_entry_whose_manifest_cannot_be_read_is_rebuilt_in_place_with_one_warning() {
    let cache = scratch("unreadable");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let (files, _) = run(4, true, &env);
    let entry = entry_of(&files);
    let name = entry.file_name().unwrap().to_string_lossy().into_owned();
    let manifest = entry.join("manifest.json");
    for damage in ["{ not json", ""] {
        std::fs::write(&manifest, damage).unwrap();
        let (again, text) = run(4, true, &env);
        assert_eq!(again, files, "rebuilt in the same entry");
        all_verify(&again, 4);
        let rebuilt = warnings(&text, "rebuilding it");
        assert_eq!(rebuilt.len(), 1, "{text}");
        assert!(rebuilt[0].contains(&name), "{text}");
        // Nothing beside the entry but its lock and the verdict on its files (and run()
        // found TMPDIR untouched).
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                format!(".{name}.checked"),
                format!(".{name}.lock"),
                name.clone()
            ]
        );
    }
}

#[test]
fn an_unwritable_cache_gives_one_warning_and_a_fallback_and_writes_nothing_elsewhere() {
    let dir = scratch("unwritable");
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let inside = blocker.join("cache");
    // run() checks that nothing was left in TMPDIR: no private cache per process.
    let (files, text) = run(
        4,
        false,
        &[
            ("TACOS_TOPOLOGY", "ring:4"),
            ("TACOS_CACHE_DIR", inside.to_str().unwrap()),
        ],
    );
    assert!(files.is_empty());
    let all = warnings(&text, "");
    assert_eq!(all.len(), 1, "{text}");
    assert!(all[0].contains(blocker.to_str().unwrap()), "{text}");
    assert!(all[0].contains("Not a directory"), "{text}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn without_a_usable_topology_every_call_falls_back() {
    let cache = scratch("fallback");
    let c = cache.to_str().unwrap();
    let (_, text) = run(4, false, &[("TACOS_CACHE_DIR", c)]);
    assert!(
        text.contains("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE"),
        "{text}"
    );
    let (_, text) = run(
        4,
        false,
        &[("TACOS_TOPOLOGY", "mesh:4xZ"), ("TACOS_CACHE_DIR", c)],
    );
    assert!(text.contains("tacos: WARN"), "{text}");
    // 8 ranks on a 16-GPU cluster: its collectives fall back.
    let (_, text) = run(
        8,
        false,
        &[
            ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"),
            ("TACOS_CACHE_DIR", c),
        ],
    );
    assert!(
        text.contains("has 16 NPUs but the communicator has 8 ranks"),
        "{text}"
    );
    let (_, text) = run(
        4,
        false,
        &[
            ("NCCL_TOPO_FILE", "/no/such/topo.xml"),
            ("TACOS_CACHE_DIR", c),
        ],
    );
    assert!(text.contains("tacos: WARN"), "{text}");
}

#[test]
fn an_nccl_topology_file_serves_as_many_nodes_as_the_ranks_need() {
    let cache = scratch("nccl");
    let Some(file) = common::corpus("nccl-topo/ndv4-topo.xml") else {
        return;
    };
    let file = file.to_str().unwrap();
    let (files, _) = run(
        16,
        true,
        &[
            ("NCCL_TOPO_FILE", file),
            ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ],
    );
    all_verify(&files, 16);
}

#[test]
fn a_cold_128_gpu_cluster_never_holds_a_call_past_the_budget_then_serves() {
    let cache = scratch("cold-128");
    // The budget is 2 s (the default, given explicitly); every call must return within
    // 10 s (a loaded machine), and the compile gets up to 30 minutes.
    let (files, text) = run_mode(
        128,
        &["expect-background", "10", "1800"],
        &[
            ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=16"),
            ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ("TACOS_INIT_BUDGET", "2"),
        ],
    );
    let pending = warnings(&text, "not ready within TACOS_INIT_BUDGET=2 s");
    assert_eq!(pending.len(), 1, "{text}");
    assert!(text.contains("READY after"), "{text}");
    assert!(!files.is_empty() && files.iter().all(|f| f.starts_with(&cache)));
    only_algorithms_where_the_executor_scans(&files);
    // Every loaded file is a 128-GPU program; one is verified whole.
    for f in &files {
        assert_eq!(read_program(f).unwrap().gpus.len(), 128, "{}", f.display());
    }
    let first = files.iter().next().unwrap();
    let report = verify(&read_program(first).unwrap(), &VerifyOptions::default());
    assert!(
        report.is_correct(),
        "{}: {:?}",
        first.display(),
        report.problems.first()
    );
    // The 129-rank call among the declined ones: a topology of another size is only
    // reported, never compiled.
    let other_size: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tacos: WARN") && l.contains("communicator has 129 ranks"))
        .collect();
    assert_eq!(other_size.len(), 1, "{text}");
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        3,
        "one entry, its lock and the verdict on its files"
    );
}
