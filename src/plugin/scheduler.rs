//! The MSCCL scheduler's decisions, free of the ABI: which cluster a communicator runs on
//! (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over `TACOS_NODES` nodes, or over as
//! many nodes as the rank count needs; else none, and every call falls back), its
//! algorithm set from the cache, and the file that serves a call: the manifest's entry for
//! the call's collective, rank count, placement and size, whose chunk count divides the
//! call's element count, checked once against the target's loader rules (a file that
//! breaks any is never handed over). Loading files and keeping their handles is the ABI's
//! part (`ffi::scheduler`).

use super::cache::{open_cached, CachedSet};
use super::{discover, Config, Log};
use crate::collective::CollectiveKind;
use crate::compile::{loader_problems, CompileOptions};
use crate::msccl::{read_program, Target};
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::{parse_spec_with_warnings, SpecDefaults, Topology};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// One process's scheduler: its settings, the algorithm sets it has opened per
/// communicator size, and the files it has checked.
pub struct Scheduler {
    /// None where the settings could not be read: every call falls back.
    config: Option<Config>,
    log: Box<dyn Log + Send>,
    /// Per communicator size: the algorithm set, or None where that size cannot be served.
    sets: HashMap<usize, Option<CachedSet>>,
    /// Whether each file handed over so far passed the target's loader rules.
    admitted: HashMap<PathBuf, bool>,
}

impl Scheduler {
    /// A scheduler on `config` (or on none, with a warning saying why); where the settings
    /// fix the communicator size, its algorithm set is opened or compiled now, so the
    /// first collective stays fast.
    pub fn new(config: crate::Result<Config>, log: Box<dyn Log + Send>) -> Scheduler {
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
        let mut s = Scheduler {
            config,
            log,
            sets: HashMap::new(),
            admitted: HashMap::new(),
        };
        if let Some(ranks) = s.known_size() {
            s.prepare(ranks);
        }
        s
    }

    /// The file to load for `call`, or None where the executor should fall back.
    pub fn select(&mut self, call: &Call) -> Option<PathBuf> {
        let set = self.prepare(call.ranks)?;
        let entry = set
            .manifest
            .select(call.kind, call.ranks, call.in_place, call.bytes)?;
        if entry.chunks_per_loop == 0 || call.count % entry.chunks_per_loop != 0 {
            return None;
        }
        let path = set.algorithms.join(&entry.file);
        let target = &self.config.as_ref()?.target;
        let log = &*self.log;
        let admitted = *self
            .admitted
            .entry(path.clone())
            .or_insert_with(|| admissible(&path, target, log));
        admitted.then_some(path)
    }

    /// The communicator size the settings already fix, if any.
    fn known_size(&self) -> Option<usize> {
        let config = self.config.as_ref()?;
        if let Some(spec) = &config.topology {
            return parse_spec_with_warnings(spec, &SpecDefaults::default())
                .ok()
                .map(|(t, _)| t.alive_npus().len());
        }
        let nodes = config.nodes?;
        let file = config.nccl_topo_file.as_ref()?;
        gpus_per_node(file).map(|g| g * nodes)
    }

    /// The algorithm set for communicators of `ranks` ranks, opened on first use.
    fn prepare(&mut self, ranks: usize) -> Option<&CachedSet> {
        if !self.sets.contains_key(&ranks) {
            let set = match self.topology(ranks) {
                Ok(Some(topo)) => self.open(&topo),
                Ok(None) => None,
                Err(e) => {
                    self.log
                        .warn(&format!("{e}; falling back to the executor's algorithms"));
                    None
                }
            };
            self.sets.insert(ranks, set);
        }
        self.sets.get(&ranks).and_then(Option::as_ref)
    }

    /// The cluster for `ranks` ranks, or None (with a warning) where the settings give none.
    fn topology(&self, ranks: usize) -> Result<Option<Topology>, String> {
        let Some(config) = &self.config else {
            return Ok(None);
        };
        if config.topology.is_none() && config.nccl_topo_file.is_none() {
            self.log.warn("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE is set; falling back to the executor's algorithms");
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
            self.log.warn(w);
        }
        let npus = found.topology.alive_npus().len();
        if npus != ranks {
            self.log.warn(&format!(
                "{} has {npus} NPUs but the communicator has {ranks} ranks; its collectives fall back to the executor's algorithms",
                found.source
            ));
            return Ok(None);
        }
        Ok(Some(found.topology))
    }

    /// Opens or compiles the set in the cache (the fast preset, for the configured target).
    fn open(&self, topo: &Topology) -> Option<CachedSet> {
        let config = self.config.as_ref()?;
        let options = CompileOptions {
            target: config.target.clone(),
            ..CompileOptions::fast()
        };
        match open_cached(&config.cache_dir, topo, &options) {
            Ok(set) => Some(set),
            Err(tried) => {
                self.log.warn(&format!(
                    "no algorithm set for {} ({tried}); falling back to the executor's algorithms",
                    topo.name()
                ));
                None
            }
        }
    }
}

/// Whether the file at `path` passes `target`'s loader rules; a warning names what it
/// breaks when it does not.
fn admissible(path: &Path, target: &Target, log: &dyn Log) -> bool {
    let problems = match read_program(path) {
        Ok(program) => loader_problems(&program, target),
        Err(e) => vec![e.to_string()],
    };
    if let Some(first) = problems.first() {
        log.warn(&format!(
            "{} does not load in target {target} ({first}); its calls fall back to the executor's algorithms",
            path.display()
        ));
    }
    problems.is_empty()
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
    use std::sync::{Arc, Mutex};

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

    fn scheduler(topology: &str, cache: &str) -> (Scheduler, Recorded, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "tacos-plugin-scheduler-{}-{cache}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let config = Config {
            topology: Some(topology.into()),
            cache_dir: dir.clone(),
            ..Config::default()
        };
        let log = Recorded::default();
        (Scheduler::new(Ok(config), Box::new(log.clone())), log, dir)
    }

    #[test]
    fn every_call_gets_a_file_declaring_its_collective_placement_and_size() {
        let (mut s, log, dir) = scheduler("ring:4", "select");
        // The size was known from the settings: the set is in the cache already.
        let set = s
            .sets
            .get(&4)
            .cloned()
            .flatten()
            .expect("compiled at start");
        assert!(set.algorithms.starts_with(&dir), "{set:?}");
        let mut divisible = false;
        for e in &set.manifest.entries {
            for bytes in [e.min_bytes, e.max_bytes] {
                let call = Call {
                    kind: e.collective,
                    ranks: 4,
                    in_place: e.in_place,
                    bytes,
                    count: e.chunks_per_loop * 3,
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
        assert!(
            log.all().iter().any(|w| w.contains("8 ranks")),
            "{:?}",
            log.all()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_the_loader_would_refuse_is_never_handed_over() {
        let (mut s, log, dir) = scheduler("ring:4", "refuse");
        let set = s
            .sets
            .get(&4)
            .cloned()
            .flatten()
            .expect("compiled at start");
        let e = &set.manifest.entries[0];
        std::fs::write(set.algorithms.join(&e.file), "<algo broken").unwrap();
        let call = Call {
            kind: e.collective,
            ranks: 4,
            in_place: e.in_place,
            bytes: e.min_bytes,
            count: e.chunks_per_loop,
        };
        assert_eq!(s.select(&call), None);
        assert_eq!(s.select(&call), None);
        let refusals = log.all();
        assert_eq!(refusals.len(), 1, "checked once: {refusals:?}");
        assert!(refusals[0].contains(&e.file), "{refusals:?}");
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
        assert_eq!(s.select(&call), None);
        let warnings = log.all();
        assert!(warnings[0].contains("TACOS_NIC_GBPS='x'"), "{warnings:?}");
        assert!(warnings[1].contains("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE"));
    }
}
