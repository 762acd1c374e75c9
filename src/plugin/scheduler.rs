//! The MSCCL scheduler's decisions, free of the ABI: which cluster a communicator runs on
//! (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over `TACOS_NODES` nodes, or over as
//! many nodes as the rank count needs; else none, and every call falls back), its
//! algorithm set from the cache, and the file that serves a call: the manifest's entry for
//! the call's collective, rank count, placement and size, whose chunk count divides the
//! call's element count. Loading files and keeping their handles is the ABI's part
//! (`ffi::scheduler`).
//!
//! Ranks that run different algorithms for one collective call hang or corrupt the job,
//! and the ranks of a job cannot talk to each other here. So whether a communicator size
//! is served is decided once, at its first call, from what every rank of a job sees alike
//! (the settings, and the cache as the job found it), and never changes afterwards in the
//! process: the size is served only where its set is installed in the cache, complete,
//! with the verdict on its files that installing it left, and was so already when the
//! scheduler started (the job's first communicator, which its ranks create together,
//! rather than first calls, which may be spread over minutes): see [`installed`], which
//! reads the manifest and the verdict and parses no algorithm file. Otherwise the process
//! falls back for that size for its whole life, with one warning, and compiles the set
//! in the background, so that the next job on this cache serves it: a compile finishing
//! part-way through a job never switches it over, since it would finish at a different
//! call on every node. The caller's thread never waits for a compile. A thread rather
//! than a process per node: the plugin lives inside a GPU process, where forking is
//! unsafe and no `tacos` binary need exist; the cache's lock makes one compile per node,
//! a process prepares one set at a time, on one core, and each step of it is held to
//! the plugins' memory limit.
//!
//! Each file is read back and its hash compared with the manifest's when it is first
//! served; a file that fails was changed behind the cache's back (the cache writes
//! whole sets, never part of one), and the size falls back from then on, with one
//! warning, while the entry is rebuilt in the background. A topology whose NPU count is not the communicator's rank count is never
//! compiled.

use super::cache::{installed, intact, open_cached, CacheState, CachedSet};
use super::{discover, Config, Log};
use crate::collective::CollectiveKind;
use crate::compile::{CompileOptions, CostOptions};
use crate::cost::program::domain_size;
use crate::cost::{ExecModel, Executor};
use crate::error::echo;
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::Topology;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A collective call as the executor measures it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub kind: CollectiveKind,
    /// Ranks of the communicator.
    pub ranks: usize,
    pub in_place: bool,
    /// The message in the units of `minBytes`/`maxBytes` (the whole buffer for
    /// allgather, reducescatter and alltoall).
    pub bytes: u64,
    /// Elements per rank.
    pub count: usize,
}

/// One process's scheduler: its settings and, per communicator size, whether and what
/// it serves.
pub struct Scheduler {
    /// None where the settings could not be read: every call falls back.
    config: Option<Config>,
    /// The cache as this scheduler found it when it started.
    found: CacheState,
    log: Arc<dyn Log + Send + Sync>,
    /// Each size's decision, made at its first call: the set it serves, or None.
    sets: HashMap<usize, Option<Served>>,
    /// The sets this process compiles in the background, by size.
    background: HashMap<usize, Arc<Background>>,
}

/// A set being prepared in the background; `done` holds whether it ended in the cache.
#[derive(Default)]
struct Background {
    done: Mutex<Option<bool>>,
    ended: Condvar,
}

/// An installed set that this process serves.
struct Served {
    set: CachedSet,
    /// The cluster, to rebuild the set should a file turn out changed.
    topo: Topology,
    /// Files the verdict does not refuse.
    admitted: HashSet<String>,
    /// Files read back and found to be the manifest's bytes.
    intact: HashSet<String>,
}

impl Scheduler {
    /// A scheduler on `config` (or on none, with a warning saying why). It notes which
    /// sets the cache holds installed now, and serves no other in its life; nothing else
    /// is read or compiled here: the executor's `init` does not say the communicator's
    /// size.
    pub fn new(config: crate::Result<Config>, log: Box<dyn Log + Send + Sync>) -> Scheduler {
        let config = match config {
            Ok(config) => {
                for w in &config.warnings {
                    log.warn(w);
                }
                Some(config)
            }
            Err(e) => {
                log.warn(&format!("{e}; falling back to the executor's algorithms"));
                None
            }
        };
        let found = config
            .as_ref()
            .map(|c| CacheState::read(&c.cache_dir))
            .unwrap_or_default();
        Scheduler {
            config,
            found,
            log: Arc::from(log),
            sets: HashMap::new(),
            background: HashMap::new(),
        }
    }

    /// The file to load for `call`, or None where the executor should fall back.
    pub fn select(&mut self, call: &Call) -> Option<PathBuf> {
        let ranks = call.ranks;
        let served = self.served(ranks)?;
        let entry = served
            .set
            .manifest
            .select(call.kind, ranks, call.in_place, call.bytes)?;
        if entry.chunks_per_loop == 0
            || call.count % entry.chunks_per_loop != 0
            || !served.admitted.contains(&entry.file)
        {
            return None;
        }
        let path = served.set.algorithms.join(&entry.file);
        if served.intact.contains(&entry.file) {
            return Some(path);
        }
        let why = match intact(&served.set.algorithms, entry) {
            Ok(_) => {
                served.intact.insert(entry.file.clone());
                return Some(path);
            }
            Err(why) => why,
        };
        self.log.warn(&format!(
            "{} cannot be served ({}): the cache was changed behind tacos's back; collectives of {ranks}-rank communicators fall back to the executor's algorithms for the rest of this process, and the entry is rebuilt in the background",
            path.display(),
            echo(&why)
        ));
        if let (Some(Some(served)), Some(config)) =
            (self.sets.insert(ranks, None), self.config.clone())
        {
            let options = compile_options(&config, &served.topo, &*self.log);
            self.start_background(config, ranks, served.topo, options);
        }
        None
    }

    /// Whether this process serves `ranks`-rank communicators (deciding it, as their
    /// first call would, if no call has yet).
    pub fn serves(&mut self, ranks: usize) -> bool {
        self.served(ranks).is_some()
    }

    /// Waits up to `timeout` for the set of `ranks`-rank communicators that this process
    /// prepares in the background (deciding, as a first call would, if no call has yet);
    /// whether the cache now holds it: at once where this process serves it, false where
    /// it prepares nothing for it or the preparation failed or is still going. It never
    /// changes what this process serves. For tests and benchmarks.
    pub fn wait(&mut self, ranks: usize, timeout: Duration) -> bool {
        if self.serves(ranks) {
            return true;
        }
        let Some(background) = self.background.get(&ranks) else {
            return false;
        };
        let deadline = Instant::now() + timeout;
        let mut done = background.done.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(ok) = *done {
                return ok;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            done = background
                .ended
                .wait_timeout(done, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The set served for `ranks`, decided at the first call.
    fn served(&mut self, ranks: usize) -> Option<&mut Served> {
        if !self.sets.contains_key(&ranks) {
            let decided = self.decide(ranks);
            self.sets.insert(ranks, decided);
        }
        self.sets.get_mut(&ranks)?.as_mut()
    }

    /// Whether `ranks` is served, from the settings and the cache as they are now: the
    /// set where it is installed, else None (compiling it in the background where there
    /// is a cluster of that size).
    fn decide(&mut self, ranks: usize) -> Option<Served> {
        let config = self.config.clone()?;
        let log = &*self.log;
        let topo = match topology(&config, ranks, log) {
            Ok(topo) => topo?,
            Err(e) => {
                log.warn(&format!("{e}; falling back to the executor's algorithms"));
                return None;
            }
        };
        let options = compile_options(&config, &topo, log);
        match installed(&config.cache_dir, &topo, &options, &self.found) {
            Ok(set) => {
                for (file, why) in &set.refused {
                    log.warn(&format!(
                        "{} does not load in target {} ({}); its calls fall back to the executor's algorithms",
                        set.algorithms.join(file).display(),
                        config.target,
                        echo(why)
                    ));
                }
                let admitted = set
                    .manifest
                    .entries
                    .iter()
                    .filter(|e| !set.refused.iter().any(|(file, _)| file == &e.file))
                    .map(|e| e.file.clone())
                    .collect();
                Some(Served {
                    set,
                    topo,
                    admitted,
                    intact: HashSet::new(),
                })
            }
            Err(why) => {
                log.warn(&format!(
                    "no complete algorithm set for {ranks} ranks in the cache ({}); {ranks}-rank collectives run on the executor's own algorithms for the whole of this process, and the set is compiled in the background for the next job (to serve a job from its start, fill the cache before it: tacos compile --plugin-cache {ranks})",
                    echo(&why)
                ));
                if ranks <= BACKGROUND_MAX_RANKS {
                    self.start_background(config, ranks, topo, options);
                } else {
                    log.warn(&format!(
                        "{ranks} ranks is more than the {BACKGROUND_MAX_RANKS} a background compile takes on (it would hold a core of the job for hours); run the prologue command instead"
                    ));
                }
                None
            }
        }
    }

    /// Compiles the set of `ranks` into the cache on a thread of its own.
    fn start_background(
        &mut self,
        config: Config,
        ranks: usize,
        topo: Topology,
        options: CompileOptions,
    ) {
        let background = Arc::new(Background::default());
        let (log, result) = (self.log.clone(), background.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("tacos-set-{ranks}"))
            .spawn(move || {
                let ok = crate::panics::catch(|| prepare(&config.cache_dir, &topo, &options, &*log))
                    .unwrap_or_else(|panic| {
                        log.warn(&format!(
                            "compiling the algorithm set for {ranks} ranks stopped: {panic} (please report)"
                        ));
                        false
                    });
                *result.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(ok);
                result.ended.notify_all();
            });
        match spawned {
            Ok(_) => {
                self.background.insert(ranks, background);
            }
            Err(e) => self.log.warn(&format!(
                "cannot start a thread to compile the algorithm set for {ranks} ranks ({e})"
            )),
        }
    }
}

/// What the scheduler compiles for `topo`: the fast preset, for the settings' target,
/// priced by the executor cost model (`TACOS_PROFILE`, else the settings' GPU
/// generation's built-in profile). NCCL's own algorithms do not compete yet: every band
/// gets a program, as before the model.
fn compile_options(config: &Config, topo: &Topology, log: &dyn Log) -> CompileOptions {
    let executor = Executor::for_topology(topo, Some(config.gpu()), None).unwrap_or_else(|e| {
        log.warn(&format!(
            "{e}; pricing with the built-in {} profile",
            config.gpu()
        ));
        Executor {
            model: ExecModel::builtin(config.gpu()),
            domain_size: domain_size(topo),
            gpu: config.gpu(),
        }
    });
    CompileOptions {
        target: config.target.clone(),
        cost: Some(CostOptions {
            model: executor.model,
            domain_size: executor.domain_size,
            nccl_margin: None,
        }),
        ..CompileOptions::fast()
    }
}

/// Fills the cache with the set for `ranks`-rank communicators as the scheduler would in
/// the background (the same cluster, options and entry), waiting for it: what a job's
/// prologue runs (`tacos compile --plugin-cache RANKS`) so that the job serves from its
/// first call. The entry's directory, or why there is none.
pub fn fill_cache(
    config: &Config,
    ranks: usize,
    log: &(dyn Log + Sync),
) -> Result<PathBuf, String> {
    let topo = topology(config, ranks, log)?.ok_or_else(|| {
        format!("the settings give no cluster of {ranks} GPUs (see the warnings)")
    })?;
    let set = open_cached(
        &config.cache_dir,
        &topo,
        &compile_options(config, &topo, log),
        log,
    )?;
    Ok(set
        .algorithms
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(set.algorithms))
}

/// The largest communicator whose set is compiled in the background of a job: one core
/// compiles 128 GPUs' set in about 15 s and the time grows faster than the GPUs; larger
/// clusters fill the cache in a prologue (`tacos compile --plugin-cache RANKS`).
pub const BACKGROUND_MAX_RANKS: usize = 1024;

/// Threads a background compile (and its check of the files) runs on: it shares the
/// node with a training job, whose data loaders need the cores; a prologue
/// ([`fill_cache`]) uses them all.
const BACKGROUND_THREADS: usize = 1;

/// The background's part: the set opened or compiled in the cache and its files checked,
/// on [`BACKGROUND_THREADS`], one set at a time per process; whether it is there.
fn prepare(
    cache_dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    log: &(dyn Log + Sync),
) -> bool {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let options = CompileOptions {
        jobs: BACKGROUND_THREADS,
        ..options.clone()
    };
    let open = || open_cached(cache_dir, topo, &options, log);
    let opened = match rayon::ThreadPoolBuilder::new()
        .num_threads(BACKGROUND_THREADS)
        .build()
    {
        Ok(pool) => pool.install(open),
        Err(_) => open(),
    };
    match opened {
        Ok(_) => true,
        Err(tried) => {
            log.warn(&format!(
                "cannot compile the algorithm set for {} into the cache ({tried})",
                topo.name()
            ));
            false
        }
    }
}

/// The cluster for `ranks` ranks, or None (with a warning) where the settings give none
/// or it has another number of NPUs.
fn topology(config: &Config, ranks: usize, log: &dyn Log) -> Result<Option<Topology>, String> {
    if config.topology.is_none() && config.nccl_topo_file.is_none() {
        log.warn("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE is set; falling back to the executor's algorithms");
        return Ok(None);
    }
    let nodes = match (config.nodes, &config.nccl_topo_file) {
        (Some(n), _) => n,
        (None, Some(file)) if config.topology.is_none() => match gpus_per_node(file) {
            Some(g) if g > 0 && ranks % g == 0 => ranks / g,
            _ => {
                return Err(format!(
                    "{ranks} ranks are not a whole number of nodes of {file}; set TACOS_NODES"
                ))
            }
        },
        _ => 1,
    };
    let found = discover(config, ranks, nodes, None).map_err(|e| e.to_string())?;
    for w in &found.warnings {
        log.warn(w);
    }
    let npus = found.topology.alive_npus().len();
    if npus != ranks {
        log.warn(&format!(
            "{} has {npus} NPUs but the communicator has {ranks} ranks; its collectives fall back to the executor's algorithms",
            found.source
        ));
        return Ok(None);
    }
    Ok(Some(found.topology))
}

/// GPUs one NCCL topology file describes.
fn gpus_per_node(file: &str) -> Option<usize> {
    nccl_xml::read(Path::new(file), &NcclImportOptions::default())
        .ok()
        .map(|i| i.topology.npus())
}

#[cfg(test)]
mod tests {
    use super::super::cache::refusal;
    use super::*;
    use crate::compile::{sha256_hex, Entry};
    use crate::msccl::{read_program, Target};

    /// Keeps every warning.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl Log for Recorded {
        fn info(&self, _: &str) {}
        fn warn(&self, message: &str) {
            self.0.lock().unwrap().push(message.to_string());
        }
    }

    impl Recorded {
        fn all(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    /// Settings naming `topology` with a fresh cache of this test's.
    fn settings(topology: &str, cache: &str) -> Config {
        let dir = std::env::temp_dir().join(format!(
            "tacos-plugin-scheduler-{}-{cache}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Config {
            topology: Some(topology.into()),
            cache_dir: dir,
            ..Config::default()
        }
    }

    /// A scheduler (a new process) on `config`, and what it warns.
    fn job(config: &Config) -> (Scheduler, Recorded) {
        let log = Recorded::default();
        (
            Scheduler::new(Ok(config.clone()), Box::new(log.clone())),
            log,
        )
    }

    /// `config`'s cache filled for `ranks` as a prologue would.
    fn filled(config: &Config, ranks: usize) -> PathBuf {
        fill_cache(config, ranks, &Recorded::default()).expect("the cache is filled")
    }

    /// The set the scheduler serves for `ranks`.
    fn served(s: &Scheduler, ranks: usize) -> &CachedSet {
        match s.sets.get(&ranks) {
            Some(Some(served)) => &served.set,
            _ => panic!("no set for {ranks} ranks"),
        }
    }

    fn call_for(e: &Entry, ranks: usize) -> Call {
        Call {
            kind: e.collective,
            ranks,
            in_place: e.in_place,
            bytes: e.min_bytes,
            count: e.chunks_per_loop * 3,
        }
    }

    const ALLREDUCE_4: Call = Call {
        kind: CollectiveKind::AllReduce,
        ranks: 4,
        in_place: true,
        bytes: 1 << 20,
        count: 1 << 18,
    };

    #[test]
    fn every_call_gets_a_file_declaring_its_collective_placement_and_size() {
        let config = settings("ring:4", "select");
        filled(&config, 4);
        let (mut s, log) = job(&config);
        assert!(s.select(&ALLREDUCE_4).is_some(), "{:?}", log.all());
        let set = served(&s, 4);
        assert!(set.algorithms.starts_with(&config.cache_dir));
        let entries = set.manifest.entries.clone();
        let mut divisible = false;
        for e in &entries {
            for bytes in [e.min_bytes, e.max_bytes] {
                let call = Call {
                    bytes,
                    ..call_for(e, 4)
                };
                let file = s.select(&call).expect("a file");
                let p = read_program(&file).unwrap();
                assert_eq!(
                    (p.collective_kind(), p.inplace, p.gpus.len()),
                    (Some(e.collective), e.in_place, 4)
                );
                let (min, max) = (p.min_bytes.unwrap(), p.max_bytes.unwrap());
                assert!((min..=max).contains(&bytes), "{bytes} in {min}..{max}");
                // A count the algorithm's chunks do not divide, another rank count: none.
                if e.chunks_per_loop > 1 {
                    divisible = true;
                    let odd = Call {
                        count: 3 * e.chunks_per_loop + 1,
                        ..call
                    };
                    assert_eq!(s.select(&odd), None);
                }
                assert_eq!(s.select(&Call { ranks: 8, ..call }), None);
            }
        }
        assert!(divisible, "no entry exercised the chunk check");
        let mismatch: Vec<String> = log
            .all()
            .into_iter()
            .filter(|w| w.contains("8 ranks"))
            .collect();
        assert_eq!(mismatch.len(), 1, "one warning per problem: {mismatch:?}");
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_cold_cache_falls_back_for_the_whole_process_and_the_next_job_serves() {
        let config = settings("ring:4", "cold");
        let (mut first, log) = job(&config);
        assert_eq!(first.select(&ALLREDUCE_4), None);
        // The compile is done in the background: the cache now serves the next job...
        assert!(first.wait(4, Duration::from_secs(600)), "{:?}", log.all());
        let topo = topology(&config, 4, &Recorded::default()).unwrap().unwrap();
        let now = CacheState::read(&config.cache_dir);
        let options = compile_options(&config, &topo, &Recorded::default());
        assert!(installed(&config.cache_dir, &topo, &options, &now).is_ok());
        // ...but never this process, which decided at its first call.
        for _ in 0..3 {
            assert_eq!(first.select(&ALLREDUCE_4), None);
        }
        assert!(!first.serves(4));
        let cold: Vec<String> = log.all();
        assert_eq!(cold.len(), 1, "one warning: {cold:?}");
        assert!(
            cold[0].contains("no complete algorithm set for 4 ranks")
                && cold[0].contains("for the whole of this process"),
            "{cold:?}"
        );
        let (mut next, log) = job(&config);
        assert!(next.select(&ALLREDUCE_4).is_some(), "{:?}", log.all());
        assert!(log.all().is_empty(), "{:?}", log.all());
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_set_installed_after_the_scheduler_started_is_not_served_by_it() {
        let config = settings("ring:4", "late");
        // The job starts, then another job's compile installs the set, then the first call.
        let (mut started_before, log) = job(&config);
        filled(&config, 4);
        assert_eq!(started_before.select(&ALLREDUCE_4), None);
        assert!(
            log.all()[0].contains("was not installed when this process's scheduler started"),
            "{:?}",
            log.all()
        );
        let (mut started_after, _) = job(&config);
        assert!(started_after.select(&ALLREDUCE_4).is_some());
        assert!(started_before.wait(4, Duration::from_secs(600)));
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_topology_of_another_size_is_never_compiled() {
        let config = settings("ring:4", "mismatch");
        let (mut s, log) = job(&config);
        let call = Call {
            ranks: 8,
            ..ALLREDUCE_4
        };
        assert_eq!(s.select(&call), None);
        assert!(!s.wait(8, Duration::from_secs(600)));
        assert!(
            log.all()[0].contains("has 4 NPUs but the communicator has 8 ranks"),
            "{:?}",
            log.all()
        );
        // Nothing was written: no cache directory at all.
        assert!(!config.cache_dir.exists(), "{}", config.cache_dir.display());
    }

    #[test]
    fn a_cluster_past_the_background_limit_is_left_to_the_prologue() {
        // 2,048 GPUs: the cluster is built (to check its size) but no compile starts.
        let config = settings("preset:dgx-a100,nodes=256", "too-big");
        let (mut s, log) = job(&config);
        let call = Call {
            ranks: 2048,
            ..ALLREDUCE_4
        };
        assert_eq!(s.select(&call), None);
        assert!(!s.wait(2048, Duration::from_secs(600)));
        assert!(
            log.all()
                .iter()
                .any(|w| w.contains("more than the 1024 a background compile takes on")),
            "{:?}",
            log.all()
        );
    }

    /// The verdict kept beside the cache entry that holds `set`, as JSON.
    fn verdict_path(set: &CachedSet) -> PathBuf {
        let entry = set.algorithms.parent().unwrap();
        let name = entry.file_name().unwrap().to_string_lossy();
        entry.parent().unwrap().join(format!(".{name}.checked"))
    }

    #[test]
    fn a_warm_entry_serves_from_its_verdict_without_checking_the_files_again() {
        let config = settings("ring:4", "verdict");
        filled(&config, 4);
        let (mut s, _) = job(&config);
        assert!(s.serves(4));
        let set = served(&s, 4).clone();
        let (kept, other) = (&set.manifest.entries[0], &set.manifest.entries[1]);
        // The verdict edited to refuse an intact file: a new process follows the verdict
        // (checking the file again would admit it).
        let path = verdict_path(&set);
        let mut verdict: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(verdict["refused"], serde_json::json!([]), "{verdict}");
        verdict["refused"] = serde_json::json!([[kept.file, "refused by hand"]]);
        std::fs::write(&path, verdict.to_string()).unwrap();
        let (mut s, log) = job(&config);
        assert_eq!(s.select(&call_for(kept, 4)), None);
        assert!(s.select(&call_for(other, 4)).is_some());
        let warnings = log.all();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&kept.file) && warnings[0].contains("refused by hand"),
            "{warnings:?}"
        );
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_file_the_loader_would_refuse_is_never_handed_over() {
        let config = settings("ring:4", "refuse");
        filled(&config, 4);
        let (mut s, _) = job(&config);
        assert!(s.serves(4));
        let set = served(&s, 4).clone();
        let (e, other) = (&set.manifest.entries[0], &set.manifest.entries[1]);
        // The file broken and the manifest's hash made to match: the cache's hashes pass,
        // the file's own check does not. The manifest changed, so its verdict is void:
        // this job falls back, and the background checks the files again.
        let broken = "<algo broken";
        std::fs::write(set.algorithms.join(&e.file), broken).unwrap();
        let manifest_path = set.algorithms.parent().unwrap().join("manifest.json");
        let manifest = std::fs::read_to_string(&manifest_path).unwrap();
        let forged = manifest.replace(&e.sha256, &sha256_hex(broken.as_bytes()));
        std::fs::write(&manifest_path, forged).unwrap();
        let (mut s, log) = job(&config);
        assert_eq!(s.select(&call_for(other, 4)), None);
        assert!(s.wait(4, Duration::from_secs(600)), "{:?}", log.all());
        assert!(log.all()[0].contains("no verdict"), "{:?}", log.all());
        // The next job serves every file but that one, with one warning naming it.
        let (mut s, log) = job(&config);
        assert_eq!(s.select(&call_for(e, 4)), None);
        assert_eq!(s.select(&call_for(e, 4)), None);
        assert!(s.select(&call_for(other, 4)).is_some());
        let refusals = log.all();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].contains(&e.file), "{refusals:?}");
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_file_changed_behind_the_caches_back_ends_serving_for_the_process() {
        let config = settings("ring:4", "changed");
        filled(&config, 4);
        let (mut s, log) = job(&config);
        let set = {
            assert!(s.serves(4));
            served(&s, 4).clone()
        };
        let (first, second) = (&set.manifest.entries[0], &set.manifest.entries[1]);
        assert!(s.select(&call_for(first, 4)).is_some());
        std::fs::write(set.algorithms.join(&second.file), "<algo edited").unwrap();
        assert_eq!(s.select(&call_for(second, 4)), None);
        // The whole size falls back from then on, the file already served included.
        assert_eq!(s.select(&call_for(first, 4)), None);
        assert_eq!(s.select(&call_for(second, 4)), None);
        let warnings = log.all();
        assert!(
            warnings[0].contains(&second.file) && warnings[0].contains("behind tacos's back"),
            "{warnings:?}"
        );
        // Rebuilt in the background, in place: the next job serves the file as it was.
        assert!(s.wait(4, Duration::from_secs(600)));
        assert!(log.all()[1].contains("rebuilding it"), "{:?}", log.all());
        let (mut next, _) = job(&config);
        assert!(next.select(&call_for(second, 4)).is_some());
        assert_eq!(
            sha256_hex(&std::fs::read(set.algorithms.join(&second.file)).unwrap()),
            second.sha256
        );
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_file_over_the_targets_limits_is_refused_by_its_loader_rules() {
        let config = settings("ring:4", "limits");
        filled(&config, 4);
        let (mut s, _) = job(&config);
        assert!(s.serves(4));
        let set = served(&s, 4);
        let target = Target::default();
        let e = &set.manifest.entries[0];
        assert_eq!(refusal(&set.algorithms, e, 4, &target), None);
        // The same intact file, for a loader allowing one step per threadblock.
        let mut tight = target.clone();
        tight.limits.max_steps_per_tb = 1;
        let why = refusal(&set.algorithms, e, 4, &tight).expect("refused");
        assert!(why.contains("steps"), "{why}");
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn settings_that_give_no_cluster_fall_back_with_a_reason() {
        let log = Recorded::default();
        let bad = Err(crate::Error::Spec("TACOS_NIC_GBPS='x'".into()));
        let mut s = Scheduler::new(bad, Box::new(log.clone()));
        assert_eq!(s.select(&ALLREDUCE_4), None);
        let mut s = Scheduler::new(Ok(Config::default()), Box::new(log.clone()));
        assert!(!s.wait(4, Duration::from_secs(600)));
        assert_eq!(s.select(&ALLREDUCE_4), None);
        let warnings = log.all();
        assert!(warnings[0].contains("TACOS_NIC_GBPS='x'"), "{warnings:?}");
        assert!(warnings[1].contains("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }
}
