//! The MSCCL scheduler plugin as the executor sees it: a C stand-in for the executor
//! (tests/c/scheduler_harness.c) exports mscclLoadAlgo/mscclUnloadAlgo, dlopens the cdylib
//! and drives init/selectAlgo/teardown. Every file the plugin hands over must verify as the
//! collective and placement it was chosen for. Tests about serving itself set
//! `TACOS_NCCL_MARGIN=off`, so that every band gets a program; with NCCL competing, a
//! band it wins falls back on every rank alike.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tacos::collective::CollectiveKind;
use tacos::msccl::{read_program, verify, Profile, Target, VerifyOptions};
use tacos::plugin::{fill_cache, Config, Log};

fn harness() -> &'static Path {
    static HARNESS: OnceLock<PathBuf> = OnceLock::new();
    HARNESS.get_or_init(|| common::build_harness("scheduler_harness", &["-ldl", "-rdynamic"]))
}

/// A scratch directory of this test, removed when dropped (a 128-GPU cache is 200 MB).
fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tacos-scheduler-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills the cache that the settings `env` name with the set for `ranks`, as a job's
/// prologue would (`tacos compile --plugin-cache`), so the next job serves from its
/// first call; the warnings it gave.
fn fill(ranks: usize, env: &[(&str, &str)]) -> Vec<String> {
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<String>>>);
    impl Log for Kept {
        fn info(&self, _: &str) {}
        fn warn(&self, message: &str) {
            self.0.lock().unwrap().push(message.into());
        }
    }
    let config = Config::from_env(|name| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    })
    .unwrap();
    let kept = Kept::default();
    // The plugin's memory limit, as the harness runs under: the same cache entry.
    tacos::plugin::set_memory_limit(&kept);
    fill_cache(&config, ranks, &kept).unwrap_or_else(|e| panic!("{env:?}: {e}"));
    let warnings = kept.0.lock().unwrap().clone();
    warnings
}

/// Runs the harness; returns the files it loaded and everything it printed. `TMPDIR` is
/// a scratch directory of its own, checked to be left empty.
fn run(ranks: usize, expect_scheduled: bool, env: &[(&str, &str)]) -> (BTreeSet<PathBuf>, String) {
    let mode = match expect_scheduled {
        true => "expect-scheduled",
        false => "expect-fallback",
    };
    run_mode(ranks, &[mode], env)
}

fn run_mode(ranks: usize, mode: &[&str], env: &[(&str, &str)]) -> (BTreeSet<PathBuf>, String) {
    run_within(None, ranks, mode, env)
}

/// As `run_mode`, under an address-space limit of `address_space_kib` KiB (`ulimit -v`)
/// where given, as a job run with one: an allocation no estimate saw aborts the harness.
fn run_within(
    address_space_kib: Option<u64>,
    ranks: usize,
    mode: &[&str],
    env: &[(&str, &str)],
) -> (BTreeSet<PathBuf>, String) {
    static NEXT_TMPDIR: AtomicUsize = AtomicUsize::new(0);
    let mut cmd = match address_space_kib {
        Some(kib) => {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                .arg(harness());
            sh
        }
        None => Command::new(harness()),
    };
    cmd.arg(common::cdylib()).arg(ranks.to_string()).args(mode);
    for var in [
        "TACOS_TOPOLOGY",
        "NCCL_TOPO_FILE",
        "TACOS_NODES",
        "TACOS_CACHE_DIR",
        "TACOS_TARGET",
        "TACOS_NIC_GBPS",
        "TACOS_NVSWITCH_GBPS",
        "TACOS_MAX_MEMORY",
        "TACOS_NCCL_MARGIN",
        "TACOS_MAX_TRANSFERS",
    ] {
        cmd.env_remove(var);
    }
    let tmp = scratch(&format!(
        "tmpdir-{}",
        NEXT_TMPDIR.fetch_add(1, Ordering::Relaxed)
    ));
    cmd.env("TMPDIR", &tmp);
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
fn verified_algorithms_for_every_call_once_the_cache_is_filled() {
    let cache = scratch("cache");
    let env = [
        ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    // The prologue's command, with the job's settings.
    let out = Command::new(env!("CARGO_BIN_EXE_tacos"))
        .args(["compile", "--plugin-cache", "16"])
        .env_remove("TACOS_TARGET")
        .envs(env)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let (first, _) = run(16, true, &env);
    // The entry first, then what serves each collective and placement: here, with NCCL out
    // of the running, a file for every band.
    let mut lines = printed.lines();
    assert_eq!(lines.next(), entry_of(&first).to_str());
    let served: Vec<&str> = lines.collect();
    assert_eq!(served.len(), 6, "{printed}");
    assert!(served.iter().all(|l| !l.contains("NCCL")), "{printed}");
    all_verify(&first, 16);
    assert!(first.iter().all(|f| f.starts_with(&cache)), "{first:?}");
    only_algorithms_where_the_executor_scans(&first);
    // Every job: the same directory serves the same files.
    let (again, _) = run(16, true, &env);
    assert_eq!(again, first);
}

/// Every loaded file sits in a cache entry's `msccl/`, which holds regular files of
/// algorithm XML and nothing else; the bands' records are beside it.
fn only_algorithms_where_the_executor_scans(files: &BTreeSet<PathBuf>) {
    let dirs: BTreeSet<&Path> = files.iter().map(|f| f.parent().unwrap()).collect();
    assert!(!dirs.is_empty());
    for dir in dirs {
        assert!(dir.ends_with("msccl"), "{}", dir.display());
        assert!(dir.parent().unwrap().join("bands").is_dir());
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
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", c),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    let roomy_env = [env[0], env[1], env[2], ("TACOS_TARGET", "executor-256")];
    fill(4, &roomy_env);
    let (roomy, _) = run(4, true, &roomy_env);
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
    let bad_env = [env[0], env[1], env[2], ("TACOS_TARGET", "executor-512")];
    fill(4, &bad_env);
    let (files, text) = run(4, true, &bad_env);
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
fn a_file_changed_in_the_cache_is_compiled_again_with_one_warning_and_never_served() {
    let cache = scratch("corrupt");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    fill(4, &env);
    let (files, text) = run(4, true, &env);
    assert!(warnings(&text, "").is_empty(), "{text}");
    let victim = files.iter().next().unwrap();
    let intact = std::fs::read(victim).unwrap();
    std::fs::write(victim, "<algo broken").unwrap();
    // Hashed at its band's first call: compiled again, the same bytes, and served.
    let (loaded, text) = run(4, true, &env);
    assert_eq!(loaded, files, "{text}");
    assert_eq!(std::fs::read(victim).unwrap(), intact);
    let changed = warnings(&text, "behind tacos's back");
    assert_eq!(changed.len(), 1, "{text}");
    assert!(changed[0].contains(victim.to_str().unwrap()), "{text}");
    all_verify(&loaded, 4);
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
fn a_band_record_that_cannot_be_read_is_compiled_again_in_place_with_one_warning() {
    let cache = scratch("unreadable");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    fill(4, &env);
    let (files, _) = run(4, true, &env);
    let entry = entry_of(&files);
    let name = entry.file_name().unwrap().to_string_lossy().into_owned();
    let record = std::fs::read_dir(entry.join("bands"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("allreduce-inplace-8K.json"))
        .expect("the record of the band of the harness's 16 KiB all-reduce");
    let kept = std::fs::read(&record).unwrap();
    for damage in ["{ not json", ""] {
        std::fs::write(&record, damage).unwrap();
        let (again, text) = run(4, true, &env);
        assert_eq!(warnings(&text, "cannot be read").len(), 1, "{text}");
        assert_eq!(again, files, "the same files");
        assert_eq!(std::fs::read(&record).unwrap(), kept, "the same record");
        // Nothing beside the entry (and run() found TMPDIR untouched).
        let names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, std::slice::from_ref(&name));
    }
}

#[test]
fn an_unwritable_cache_gives_one_warning_serves_from_memory_and_writes_nothing_elsewhere() {
    let dir = scratch("unwritable");
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let inside = blocker.join("cache");
    let good = scratch("writable");
    fn env(cache: &Path) -> [(&str, &str); 3] {
        [
            ("TACOS_TOPOLOGY", "ring:4"),
            ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ("TACOS_NCCL_MARGIN", "off"),
        ]
    }
    let (bad, good_env) = (env(&inside), env(&good));
    // run() checks that nothing was left in TMPDIR: the files live in memory.
    let (files, text) = run(4, true, &bad);
    assert!(
        files.iter().all(|f| f.starts_with("/proc/self/fd")),
        "{files:?}"
    );
    let all = warnings(&text, "");
    assert_eq!(all.len(), 1, "{text}");
    assert!(all[0].contains("in memory"), "{text}");
    assert!(all[0].contains(blocker.to_str().unwrap()), "{text}");
    assert!(all[0].contains("Not a directory"), "{text}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // Every call got the answer a rank with a writable cache gets.
    let selects = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("SELECT"))
            .map(str::to_string)
            .collect()
    };
    let (_, good_text) = run(4, true, &good_env);
    assert_eq!(selects(&text), selects(&good_text));
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
    let env = [
        ("NCCL_TOPO_FILE", file.to_str().unwrap()),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    fill(16, &env);
    let (files, _) = run(16, true, &env);
    all_verify(&files, 16);
}

#[test]
fn a_job_on_a_cold_128_gpu_cache_is_served_from_its_first_call_and_the_next_loads_the_same_files() {
    let cache = scratch("cold-128");
    let env = [
        ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=16"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    // The first call of each band compiles it: bounded by the work bound, so every
    // call returns within a generous 300 s on a loaded machine.
    let (files, text) = run_mode(128, &["expect-first", "300"], &env);
    assert!(warnings(&text, "").is_empty(), "{text}");
    // The 129-rank call among the declined ones: a topology of another size is only
    // reported, never compiled.
    let other_size: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tacos: WARN") && l.contains("communicator has 129 ranks"))
        .collect();
    assert_eq!(other_size.len(), 1, "{text}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "one entry");
    only_algorithms_where_the_executor_scans(&files);
    // The next job finds what the first compiled: the same files, byte for byte.
    let bytes = |files: &BTreeSet<PathBuf>| -> Vec<Vec<u8>> {
        files.iter().map(|f| std::fs::read(f).unwrap()).collect()
    };
    let before = bytes(&files);
    let (next, text) = run_mode(128, &["expect-first", "300"], &env);
    assert!(warnings(&text, "").is_empty(), "{text}");
    assert_eq!(next, files);
    assert_eq!(bytes(&next), before);
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
}

/// A 256-GPU DGX A100 fabric with a cold cache, as a job under a 4 GB address-space
/// limit runs it: pricing NCCL's rings on it once gathered 4 GiB of waiting messages in
/// the simulator and aborted the host. Init and every call return; a band that cannot be
/// served falls back with one warning of its own.
#[test]
fn a_256_gpu_fabric_on_a_cold_cache_under_4gb_returns_from_every_call() {
    let cache = scratch("cold-256");
    let env = [
        ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=32"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let (_, text) = run_within(Some(4_000_000), 256, &["expect-any"], &env);
    let warned = warnings(&text, "");
    let distinct: BTreeSet<&str> = warned.iter().copied().collect();
    assert_eq!(distinct.len(), warned.len(), "a warning repeated:\n{text}");
    assert!(warned.iter().all(|w| w.contains("on 256 ranks")), "{text}");
}

/// Two nodes with caches of their own, NCCL competing by the default margin: every call
/// gets the same answer on both, and the bands NCCL wins fall back on both.
#[test]
fn bands_left_to_nccl_fall_back_on_every_node_alike() {
    let answers: Vec<Vec<String>> = ["nccl-a", "nccl-b"]
        .into_iter()
        .map(|node| {
            let cache = scratch(node);
            let env = [
                ("TACOS_TOPOLOGY", "fc:4"),
                ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ];
            let (_, text) = run_mode(4, &["expect-any"], &env);
            assert!(warnings(&text, "").is_empty(), "{text}");
            // Whether each call was scheduled; handles are numbered alike too.
            text.lines()
                .filter(|l| l.starts_with("SELECT"))
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(answers[0], answers[1]);
    let declined = answers[0].iter().filter(|l| l.ends_with("-> 0 -1")).count();
    let served = answers[0].len() - declined;
    assert!(declined > 0 && served > 0, "{:?}", answers[0]);
}

/// Nodes that fill their own caches in a prologue must serve the same bytes: the
/// compile is deterministic, whatever the threads do.
#[test]
fn two_nodes_filling_their_own_caches_get_the_same_bytes() {
    let (caches, entries): (Vec<Scratch>, Vec<PathBuf>) = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let cache = scratch(node);
            let env = [
                ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"),
                ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ];
            fill(16, &env);
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&cache)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                .collect();
            assert_eq!(entries.len(), 1, "{entries:?}");
            (cache, entries.pop().unwrap())
        })
        .unzip();
    let contents = |entry: &Path| {
        let mut files = Vec::new();
        for sub in ["bands", "msccl"] {
            for f in std::fs::read_dir(entry.join(sub)).unwrap() {
                let f = f.unwrap();
                let name = f.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') {
                    files.push((format!("{sub}/{name}"), std::fs::read(f.path()).unwrap()));
                }
            }
        }
        files.sort();
        (entry.file_name().unwrap().to_owned(), files)
    };
    let (a, b) = (contents(&entries[0]), contents(&entries[1]));
    assert!(a.1.len() > 1);
    assert!(a == b, "the two nodes' entries differ");
    drop(caches);
}

#[test]
fn a_tacos_max_memory_that_is_not_a_size_gets_one_warning_and_the_plugins_limit() {
    let cache = scratch("max-memory");
    let (_, text) = run(
        4,
        false,
        &[
            ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ("TACOS_MAX_MEMORY", "lots"),
        ],
    );
    // init runs twice; the limit is read once.
    let limit = warnings(&text, "TACOS_MAX_MEMORY");
    assert_eq!(limit.len(), 1, "{text}");
    assert!(
        limit[0].contains("lots") && limit[0].contains("using the plugins' limit of 1 GiB"),
        "{text}"
    );
}

/// A FIFO with no writer named by a setting once held up the executor's init forever
/// (opening it waits for a writer): the plugins open inputs without blocking and read
/// only regular files, so each falls back (or prices with the built-in profile) with a
/// warning naming the FIFO.
#[test]
fn settings_that_name_a_fifo_warn_and_fall_back_instead_of_waiting() {
    let dir = scratch("fifo");
    let fifo = |name: &str| -> String {
        let path = dir.join(name);
        let made = Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        path.to_str().unwrap().into()
    };
    let cache = dir.join("cache");
    let c = cache.to_str().unwrap();
    for (variable, name) in [
        ("TACOS_TOPOLOGY", "topology.json"),
        ("NCCL_TOPO_FILE", "topo.xml"),
    ] {
        let f = fifo(name);
        let (_, text) = run(4, false, &[(variable, &f), ("TACOS_CACHE_DIR", c)]);
        let named = warnings(&text, "is a FIFO, not a regular file");
        assert!(
            !named.is_empty() && named[0].contains(&f),
            "{variable}:\n{text}"
        );
    }
    let profile = fifo("profile.json");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_PROFILE", &profile),
        ("TACOS_CACHE_DIR", c),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    let (files, text) = run(4, true, &env);
    let named = warnings(&text, "is a FIFO, not a regular file");
    assert_eq!(named.len(), 1, "{text}");
    assert!(named[0].contains("built-in"), "{text}");
    all_verify(&files, 4);
}

/// A band's lock held by another process (a stopped prologue, another job's long
/// compile) once kept the band's first call waiting as long as that process did. After
/// `TACOS_LOCK_WAIT_MS` the call compiles the band itself, with one warning per band, and
/// gets what every other rank gets: the same files as a cache nobody held.
#[test]
fn a_band_locked_by_another_process_is_compiled_here_after_the_lock_wait() {
    let free = scratch("lock-free");
    let held = scratch("lock-held");
    fn env(cache: &Path) -> [(&str, &str); 4] {
        [
            ("TACOS_TOPOLOGY", "ring:4"),
            ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
            ("TACOS_NCCL_MARGIN", "off"),
            ("TACOS_LOCK_WAIT_MS", "100"),
        ]
    }
    let (free_env, held_env) = (env(&free), env(&held));
    let (files, free_text) = run(4, true, &free_env);
    // The same entry under the other cache, every band's lock taken by this process.
    let entry = entry_of(&files);
    let bands = held.join(entry.file_name().unwrap()).join("bands");
    std::fs::create_dir_all(&bands).unwrap();
    let mut locks = Vec::new();
    for record in std::fs::read_dir(entry.join("bands")).unwrap() {
        let name = record.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue; // the free run's own lock files
        }
        let path = bands.join(format!(".{name}.lock"));
        let file = std::fs::File::create(&path).unwrap();
        match tacos::fsio::FileLock::try_lock(file) {
            tacos::fsio::Locking::Held(lock) => locks.push(lock),
            _ => panic!("{} could not be locked", path.display()),
        }
    }
    let (served, text) = run(4, true, &held_env);
    let waited = warnings(&text, "was still locked by another process after 100 ms");
    assert_eq!(waited.len(), locks.len(), "one warning per band:\n{text}");
    let distinct: BTreeSet<&str> = waited.iter().copied().collect();
    assert_eq!(distinct.len(), waited.len(), "{text}");
    let selects = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("SELECT"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(selects(&text), selects(&free_text));
    let bytes = |files: &BTreeSet<PathBuf>| -> Vec<Vec<u8>> {
        files.iter().map(|f| std::fs::read(f).unwrap()).collect()
    };
    assert_eq!(bytes(&served), bytes(&files));
    drop(locks);
}

/// A band record that names another band's file, with that file's SHA-256, was served:
/// an All-Gather program for an All-Reduce call. The file's own `<algo>` tag is now
/// checked against the call and the record: one warning, the band compiled again, and the
/// All-Reduce's own file served.
#[test]
fn a_record_naming_another_bands_file_is_compiled_again_not_served() {
    let cache = scratch("swapped");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", cache.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    let (files, _) = run(4, true, &env);
    let bands = entry_of(&files).join("bands");
    let record = |name: &str| bands.join(name);
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(record(name)).unwrap()).unwrap()
    };
    let all_reduce = "allreduce-inplace-8K.json";
    let kept = std::fs::read(record(all_reduce)).unwrap();
    let mut swapped = read(all_reduce);
    swapped["decision"] = read("allgather-inplace-64K.json")["decision"].clone();
    std::fs::write(
        record(all_reduce),
        serde_json::to_vec_pretty(&swapped).unwrap(),
    )
    .unwrap();
    let (again, text) = run(4, true, &env);
    let caught = warnings(&text, "the record's program is allgather in place");
    assert_eq!(caught.len(), 1, "{text}");
    assert_eq!(again, files, "the same files");
    assert_eq!(std::fs::read(record(all_reduce)).unwrap(), kept);
    all_verify(&again, 4);
    // The same, the record's entry made to match the call but the file left another's:
    // what the file declares gives it away.
    let own = read(all_reduce)["decision"]["program"].clone();
    let mut forged = swapped;
    let program = &mut forged["decision"]["program"];
    for field in ["collective", "min_bytes", "max_bytes", "proto"] {
        program[field] = own[field].clone();
    }
    std::fs::write(
        record(all_reduce),
        serde_json::to_vec_pretty(&forged).unwrap(),
    )
    .unwrap();
    let (again, text) = run(4, true, &env);
    let caught = warnings(
        &text,
        "it declares coll=\"allgather\", the call needs allreduce",
    );
    assert_eq!(caught.len(), 1, "{text}");
    assert_eq!(again, files);
    all_verify(&again, 4);
}

/// The cache is the user's alone: its directories are made owner-only, its files too;
/// a cache directory every user may write is not served from (one warning, the bands
/// compiled in memory, the same answers).
#[test]
fn the_cache_is_owner_only_and_one_others_may_write_is_not_served() {
    use std::os::unix::fs::PermissionsExt;
    let cache = scratch("owner-only");
    let root = cache.join("cache");
    let env = [
        ("TACOS_TOPOLOGY", "ring:4"),
        ("TACOS_CACHE_DIR", root.to_str().unwrap()),
        ("TACOS_NCCL_MARGIN", "off"),
    ];
    let (files, good) = run(4, true, &env);
    let entry = entry_of(&files);
    for dir in [
        root.clone(),
        entry.clone(),
        entry.join("bands"),
        entry.join("msccl"),
    ] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{}: {mode:o}", dir.display());
    }
    for sub in ["bands", "msccl"] {
        for f in std::fs::read_dir(entry.join(sub)).unwrap() {
            let f = f.unwrap();
            let mode = f.metadata().unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{:?}: {mode:o}", f.path());
        }
    }
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (served, text) = run(4, true, &env);
    let refused = warnings(&text, "may be written by every user");
    assert_eq!(refused.len(), 1, "{text}");
    assert!(
        served.iter().all(|f| f.starts_with("/proc/self/fd")),
        "{served:?}"
    );
    let selects = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("SELECT"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(selects(&text), selects(&good));
}
