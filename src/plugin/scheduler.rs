//! The MSCCL scheduler's decisions, free of the ABI: which cluster a communicator runs on
//! (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over `TACOS_NODES` nodes, or over as
//! many nodes as the rank count needs; else none, and every call falls back), its
//! algorithm set from the cache, and the file that serves a call: the manifest's entry for
//! the call's collective, rank count, placement and size, whose chunk count divides the
//! call's element count. Loading files and keeping their handles is the ABI's part
//! (`ffi::scheduler`).
//!
//! Nothing slow runs on the caller's thread for longer than the budget
//! ([`Config::init_budget`], `TACOS_INIT_BUDGET`): the first call for a communicator size
//! starts a worker thread that finds the cluster, opens the set in the cache or compiles
//! it there (the ranks of a node take turns on the cache's lock, so one compiles and the
//! others, blocked on the lock without using a core, open its result), and checks every
//! file; calls wait for it at most the budget in all, then fall back until it is done. A
//! thread rather than a process per node: the plugin lives inside a GPU process, where
//! forking is unsafe and no `tacos` binary need exist, and the lock already makes one
//! compile per node. A set is served only whole: once it is installed in the cache and
//! every file has been read back, found to be the bytes its manifest names (SHA-256)
//! and passed the target's loader rules, so every rank of a job serves the same bytes
//! for the same call, and a file that fails is never served (its calls fall back, with
//! one warning). What the rules found is kept beside the entry, keyed by the manifest's
//! hash and the target, so later processes only check the hashes. A topology whose NPU count is not the communicator's rank count is
//! never compiled.

use super::cache::open_cached;
use super::{discover, Config, Log};
use crate::collective::CollectiveKind;
use crate::compile::{
    loader_problems, parent_and_name, read_regular, sha256_hex, CompileOptions, Entry, Manifest,
};
use crate::error::echo;
use crate::fsio::write_atomic;
use crate::msccl::{parse_program, Target};
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::Topology;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
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

/// One process's scheduler: its settings and the algorithm set of each communicator size.
pub struct Scheduler {
    /// None where the settings could not be read: every call falls back.
    config: Option<Config>,
    log: Arc<dyn Log + Send + Sync>,
    sets: HashMap<usize, SetState>,
}

/// A communicator size's algorithm set.
enum SetState {
    /// Being prepared on a worker thread; calls wait for it until `deadline`.
    Preparing {
        outcome: Arc<Outcome>,
        deadline: Instant,
        warned: bool,
    },
    /// Done: the set, or None where this size is not served.
    Settled(Option<Box<Served>>),
}

/// Where a worker leaves its result.
#[derive(Default)]
struct Outcome {
    done: Mutex<Option<Option<Served>>>,
    ready: Condvar,
}

/// A complete, checked set: its manifest, where its files are, and the files that passed.
struct Served {
    algorithms: PathBuf,
    manifest: Manifest,
    admitted: HashSet<String>,
}

impl Scheduler {
    /// A scheduler on `config` (or on none, with a warning saying why). Nothing is read
    /// or compiled here: the executor's `init` does not say the communicator's size.
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
        Scheduler {
            config,
            log: Arc::from(log),
            sets: HashMap::new(),
        }
    }

    /// The file to load for `call`, or None where the executor should fall back (also
    /// while its set is still being prepared after the budget is spent).
    pub fn select(&mut self, call: &Call) -> Option<PathBuf> {
        let served = self.served(call.ranks, None)?;
        let entry = served
            .manifest
            .select(call.kind, call.ranks, call.in_place, call.bytes)?;
        if entry.chunks_per_loop == 0 || call.count % entry.chunks_per_loop != 0 {
            return None;
        }
        served
            .admitted
            .contains(&entry.file)
            .then(|| served.algorithms.join(&entry.file))
    }

    /// Waits up to `timeout` (beyond the budget) for the set of `ranks`-rank communicators
    /// to be settled, starting it if needed; whether it is served. For benchmarks and
    /// tests: the executor's calls never wait past the budget.
    pub fn wait(&mut self, ranks: usize, timeout: Duration) -> bool {
        self.served(ranks, Some(Instant::now() + timeout)).is_some()
    }

    /// The set for `ranks`, started on first use, waited for until its deadline (or
    /// `until`), None while it is not ready or where it is not served.
    fn served(&mut self, ranks: usize, until: Option<Instant>) -> Option<&Served> {
        if !self.sets.contains_key(&ranks) {
            let state = self.start(ranks);
            self.sets.insert(ranks, state);
        }
        let state = self.sets.get_mut(&ranks)?;
        if let SetState::Preparing {
            outcome,
            deadline,
            warned,
        } = state
        {
            let deadline = until.unwrap_or(*deadline);
            let mut done = outcome.done.lock().unwrap_or_else(|p| p.into_inner());
            while done.is_none() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                done = outcome
                    .ready
                    .wait_timeout(done, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            match done.take() {
                Some(settled) => {
                    drop(done);
                    *state = SetState::Settled(settled.map(Box::new));
                }
                None => {
                    if !*warned {
                        *warned = true;
                        let budget = self
                            .config
                            .as_ref()
                            .map_or(0.0, |c| c.init_budget.as_secs_f64());
                        self.log.warn(&format!(
                            "the algorithm set for {ranks} ranks is not ready within TACOS_INIT_BUDGET={budget} s; it is prepared in the background and collectives fall back to the executor's algorithms until it is"
                        ));
                    }
                    return None;
                }
            }
        }
        match state {
            SetState::Settled(served) => served.as_deref(),
            SetState::Preparing { .. } => None,
        }
    }

    /// Starts preparing the set for `ranks` on a worker thread.
    fn start(&self, ranks: usize) -> SetState {
        let Some(config) = self.config.clone() else {
            return SetState::Settled(None);
        };
        let outcome = Arc::new(Outcome::default());
        let deadline = Instant::now() + config.init_budget;
        let (log, result) = (self.log.clone(), outcome.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("tacos-set-{ranks}"))
            .spawn(move || {
                let settled = prepare(&config, ranks, &*log);
                *result.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(settled);
                result.ready.notify_all();
            });
        match spawned {
            Ok(_) => SetState::Preparing {
                outcome,
                deadline,
                warned: false,
            },
            Err(e) => {
                self.log.warn(&format!(
                    "cannot start a thread to prepare the algorithm set ({e}); falling back to the executor's algorithms"
                ));
                SetState::Settled(None)
            }
        }
    }
}

/// The worker's part: the cluster for `ranks` ranks, its set opened or compiled in the
/// cache, every file checked (side by side); None (with a warning) where this size is not
/// served. Sets are opened one at a time per process: they compete for the same cores.
fn prepare(config: &Config, ranks: usize, log: &(dyn Log + Sync)) -> Option<Served> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let topo = match topology(config, ranks, log) {
        Ok(topo) => topo?,
        Err(e) => {
            log.warn(&format!("{e}; falling back to the executor's algorithms"));
            return None;
        }
    };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let options = CompileOptions {
        target: config.target.clone(),
        ..CompileOptions::fast()
    };
    let set = match open_cached(&config.cache_dir, &topo, &options, log) {
        Ok(set) => set,
        Err(tried) => {
            log.warn(&format!(
                "no algorithm set for {} ({tried}); falling back to the executor's algorithms",
                topo.name()
            ));
            return None;
        }
    };
    let refused = refusals(&set.algorithms, &set.manifest, ranks, &config.target);
    for (file, why) in &refused {
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
        .filter(|e| !refused.iter().any(|(file, _)| file == &e.file))
        .map(|e| e.file.clone())
        .collect();
    Some(Served {
        algorithms: set.algorithms,
        manifest: set.manifest,
        admitted,
    })
}

/// What checking a set's files found, kept beside its cache entry (`.NAME.checked`) so
/// later processes need not parse every file again: keyed by the SHA-256 of the
/// manifest (which holds every file's) and the target, so it speaks only for the very
/// bytes and loader it was made for.
#[derive(Serialize, Deserialize, PartialEq)]
struct Verdict {
    manifest_sha256: String,
    target: String,
    /// (file, why) for every file that may not be served.
    refused: Vec<(String, String)>,
}

/// The files of the set in `algorithms` that may not be served, and why: from the
/// verdict kept beside the entry where it is for this manifest and target, else by
/// checking every file side by side (and keeping the verdict, where the cache can be
/// written).
fn refusals(
    algorithms: &Path,
    manifest: &Manifest,
    ranks: usize,
    target: &Target,
) -> Vec<(String, String)> {
    let key = Verdict {
        manifest_sha256: sha256_hex(manifest.to_json().as_bytes()),
        target: format!("{target:?}"),
        refused: Vec::new(),
    };
    let kept = algorithms.parent().and_then(|entry| {
        let (parent, name) = parent_and_name(entry).ok()?;
        Some(parent.join(format!(".{name}.checked")))
    });
    let known = kept.as_ref().and_then(|path| {
        let bytes = read_regular(path).ok()?;
        let verdict: Verdict = serde_json::from_slice(&bytes).ok()?;
        let same =
            (&verdict.manifest_sha256, &verdict.target) == (&key.manifest_sha256, &key.target);
        same.then_some(verdict.refused)
    });
    if let Some(refused) = known {
        return refused;
    }
    let refused: Vec<(String, String)> = manifest
        .entries
        .par_iter()
        .filter_map(|e| refusal(algorithms, e, ranks, target).map(|why| (e.file.clone(), why)))
        .collect();
    if let Some(path) = kept {
        let verdict = Verdict { refused, ..key };
        if let Ok(json) = serde_json::to_vec(&verdict) {
            let _ = write_atomic(&path, &json);
        }
        return verdict.refused;
    }
    refused
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

/// Why the file of `entry` in `algorithms` may not be served, if so: it must be the bytes
/// the manifest names, a program for `ranks` GPUs with the manifest's chunk count, that
/// passes `target`'s loader rules.
fn refusal(algorithms: &Path, entry: &Entry, ranks: usize, target: &Target) -> Option<String> {
    let path = algorithms.join(&entry.file);
    match read_regular(&path) {
        Err(e) => Some(e.to_string()),
        Ok(bytes) if sha256_hex(&bytes) != entry.sha256 => {
            Some("its bytes are not those the manifest names (SHA-256 mismatch)".into())
        }
        Ok(bytes) => match parse_program(&String::from_utf8_lossy(&bytes), &entry.file) {
            Err(e) => Some(e.to_string()),
            Ok(p) if p.gpus.len() != ranks || p.nchunksperloop != entry.chunks_per_loop => {
                Some(format!(
                    "it has {} GPUs and {} chunks per loop, the manifest says {ranks} and {}",
                    p.gpus.len(),
                    p.nchunksperloop,
                    entry.chunks_per_loop
                ))
            }
            Ok(p) => loader_problems(&p, target).into_iter().next(),
        },
    }
}

/// GPUs one NCCL topology file describes.
fn gpus_per_node(file: &str) -> Option<usize> {
    nccl_xml::read(Path::new(file), &NcclImportOptions::default())
        .ok()
        .map(|i| i.topology.npus())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msccl::read_program;

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

    /// A scheduler on `topology` with a fresh cache and `budget` seconds.
    fn scheduler(topology: &str, cache: &str, budget: u64) -> (Scheduler, Recorded, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "tacos-plugin-scheduler-{}-{cache}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let config = Config {
            topology: Some(topology.into()),
            cache_dir: dir.clone(),
            init_budget: Duration::from_secs(budget),
            ..Config::default()
        };
        let log = Recorded::default();
        (Scheduler::new(Ok(config), Box::new(log.clone())), log, dir)
    }

    /// The set the scheduler serves for `ranks`.
    fn served(s: &Scheduler, ranks: usize) -> &Served {
        match s.sets.get(&ranks) {
            Some(SetState::Settled(Some(served))) => served,
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

    #[test]
    fn every_call_gets_a_file_declaring_its_collective_placement_and_size() {
        let (mut s, log, dir) = scheduler("ring:4", "select", 600);
        let any = Call {
            kind: CollectiveKind::AllReduce,
            ranks: 4,
            in_place: true,
            bytes: 1 << 20,
            count: 1 << 18,
        };
        // Within the budget the first call waits for the set.
        assert!(s.select(&any).is_some());
        let set = served(&s, 4);
        assert!(set.algorithms.starts_with(&dir), "{:?}", set.algorithms);
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
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn past_the_budget_calls_fall_back_until_the_whole_set_is_ready() {
        let (mut s, log, dir) = scheduler("ring:4", "budget", 0);
        let call = Call {
            kind: CollectiveKind::AllReduce,
            ranks: 4,
            in_place: true,
            bytes: 1 << 20,
            count: 1 << 18,
        };
        // A zero budget: the first calls return at once with nothing (a cold cache cannot
        // be compiled in no time), and say so once.
        assert_eq!(s.select(&call), None);
        assert_eq!(s.select(&call), None);
        assert!(s.wait(4, Duration::from_secs(600)), "{:?}", log.all());
        assert!(s.select(&call).is_some());
        let waits: Vec<String> = log
            .all()
            .into_iter()
            .filter(|w| w.contains("TACOS_INIT_BUDGET=0"))
            .collect();
        assert_eq!(waits.len(), 1, "{:?}", log.all());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_topology_of_another_size_is_never_compiled() {
        let (mut s, log, dir) = scheduler("ring:4", "mismatch", 600);
        let call = Call {
            kind: CollectiveKind::AllReduce,
            ranks: 8,
            in_place: true,
            bytes: 1 << 20,
            count: 1 << 18,
        };
        assert_eq!(s.select(&call), None);
        assert!(!s.wait(8, Duration::from_secs(600)));
        assert!(
            log.all()[0].contains("has 4 NPUs but the communicator has 8 ranks"),
            "{:?}",
            log.all()
        );
        // Nothing was written: no cache directory at all.
        assert!(!dir.exists(), "{}", dir.display());
    }

    #[test]
    fn a_file_the_loader_would_refuse_is_never_handed_over() {
        let (mut s, _, dir) = scheduler("ring:4", "refuse", 600);
        assert!(s.wait(4, Duration::from_secs(600)));
        let set = served(&s, 4);
        let (algorithms, e) = (set.algorithms.clone(), set.manifest.entries[0].clone());
        // The file broken and the manifest's hash made to match: the cache's hashes pass,
        // the file's own check does not.
        let broken = "<algo broken";
        std::fs::write(algorithms.join(&e.file), broken).unwrap();
        let manifest_path = algorithms.parent().unwrap().join("manifest.json");
        let manifest = std::fs::read_to_string(&manifest_path).unwrap();
        let forged = manifest.replace(&e.sha256, &sha256_hex(broken.as_bytes()));
        std::fs::write(&manifest_path, forged).unwrap();
        let log = Recorded::default();
        let config = s.config.clone().unwrap();
        let mut s = Scheduler::new(Ok(config), Box::new(log.clone()));
        assert_eq!(s.select(&call_for(&e, 4)), None);
        assert_eq!(s.select(&call_for(&e, 4)), None);
        let refusals = log.all();
        assert_eq!(refusals.len(), 1, "checked once: {refusals:?}");
        assert!(refusals[0].contains(&e.file), "{refusals:?}");
        // A later process takes the verdict kept beside the entry: the same refusal.
        let again = Recorded::default();
        let config = s.config.clone().unwrap();
        let mut later = Scheduler::new(Ok(config), Box::new(again.clone()));
        assert_eq!(later.select(&call_for(&e, 4)), None);
        assert_eq!(again.all(), refusals);
        // The other files are still served.
        let other = served(&s, 4).manifest.entries[1].clone();
        assert!(s.select(&call_for(&other, 4)).is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_over_the_targets_limits_is_refused_by_its_loader_rules() {
        let (mut s, _, dir) = scheduler("ring:4", "limits", 600);
        assert!(s.wait(4, Duration::from_secs(600)));
        let set = served(&s, 4);
        let target = Target::default();
        let e = &set.manifest.entries[0];
        assert_eq!(refusal(&set.algorithms, e, 4, &target), None);
        // The same intact file, for a loader allowing one step per threadblock.
        let mut tight = target.clone();
        tight.limits.max_steps_per_tb = 1;
        let why = refusal(&set.algorithms, e, 4, &tight).expect("refused");
        assert!(why.contains("steps"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn settings_that_give_no_cluster_fall_back_with_a_reason() {
        let log = Recorded::default();
        let bad = Err(crate::Error::Spec("TACOS_NIC_GBPS='x'".into()));
        let mut s = Scheduler::new(bad, Box::new(log.clone()));
        let call = Call {
            kind: CollectiveKind::AllReduce,
            ranks: 4,
            in_place: true,
            bytes: 1 << 20,
            count: 1 << 18,
        };
        assert_eq!(s.select(&call), None);
        let mut s = Scheduler::new(Ok(Config::default()), Box::new(log.clone()));
        assert!(!s.wait(4, Duration::from_secs(600)));
        assert_eq!(s.select(&call), None);
        let warnings = log.all();
        assert!(warnings[0].contains("TACOS_NIC_GBPS='x'"), "{warnings:?}");
        assert!(warnings[1].contains("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }
}
