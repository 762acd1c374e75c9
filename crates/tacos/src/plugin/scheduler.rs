//! The MSCCL scheduler's decisions, free of the ABI: which cluster a communicator runs on
//! (`TACOS_TOPOLOGY`; else `NCCL_TOPO_FILE` repeated over `TACOS_NODES` nodes, or over as
//! many nodes as the rank count needs; else none, and every call falls back), and per
//! size band the file that serves a call, whose chunk count must divide the call's
//! element count. Loading files and keeping their handles is the ABI's part
//! (`ffi::scheduler`).
//!
//! Ranks that run different algorithms for one collective call hang or corrupt the job,
//! and the ranks of a job cannot talk to each other here. So what a call gets is a
//! function of what every rank sees alike (the settings, the cluster, the call's
//! collective, placement and size band) and of nothing else: not the clock, not the
//! machine's cores, not what the cache held when the job started. Each (collective,
//! placement, band) is decided at its first call in the process and kept for the
//! process's life:
//!
//! - where the cache ([`BandCache`]) holds the band's record, for this tool, topology,
//!   options and memory limit, the record decides (its file is read and hashed first);
//! - otherwise the band is compiled there and then, on the caller's thread, by
//!   [`BandCompiler`]: deterministic (no wall-clock budget, a fixed thread count whose
//!   results do not depend on it anyway, a work bound that skips candidates by their
//!   size before any work, `TACOS_MAX_TRANSFERS`, and the plugins' memory limit per
//!   step, judged by estimates), so the record and file it writes are byte for byte
//!   those any other rank compiles or finds. The ranks of a node take turns on a lock
//!   beside the record: one compiles, the others read its result.
//!
//! A band's decision is a program, or a fallback on every rank alike: NCCL's own choice
//! is predicted as fast within `TACOS_NCCL_MARGIN` (as `tacos compile` decides), or no
//! candidate gives a program within the target's limits and the work bound (such a
//! compile fails the same way everywhere, and its record says why). A record or file that
//! cannot be used (changed behind the cache's back, unreadable) is compiled again and
//! replaced: the same bytes. A cache that cannot be written gets one warning, and the
//! process compiles its bands in memory and hands the executor anonymous in-memory files
//! (`/proc/self/fd/N`) with the same bytes. What can still split a job is a rank that
//! cannot decide as the others do: one whose settings differ, or whose compile panics (a
//! bug).
//! A topology whose NPU count is not the communicator's rank count is never compiled.

use super::cache::{compile_decision, BandCache, Decision, Found, Notice};
use super::config::LOCK_WAIT_ENV;
use super::{discover, Config, Log};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveKind;
use crate::compile::{Band, BandCompiler, CompileOptions, CostOptions};
use crate::cost::program::domain_size;
use crate::cost::{ExecModel, Executor};
use crate::error::echo;
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::Topology;
use crate::units::format_size;
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

/// One process's scheduler: its settings and, per communicator size and band, what it
/// serves.
pub struct Scheduler {
    /// None where the settings could not be read: every call falls back.
    config: Option<Config>,
    log: Box<dyn Log + Send + Sync>,
    /// Per communicator size, its cluster's compiler and cache entry, or None where it
    /// has no cluster.
    sizes: HashMap<usize, Option<Size>>,
}

/// A communicator size with a cluster: its bands' compiler, its cache entry, and each
/// band's decision, made at the band's first call.
struct Size {
    compiler: BandCompiler,
    cache: BandCache,
    bands: HashMap<(CollectiveKind, bool, Band), Option<Served>>,
    /// The cache could not store a band: from then on the size's bands are compiled and
    /// served from memory, after the one warning that said so.
    unwritable: bool,
}

/// A band's file, as handed over.
struct Served {
    path: PathBuf,
    chunks_per_loop: usize,
    /// The in-memory file `path` names, where the cache could not be written: kept open
    /// for the process's life.
    _in_memory: Option<std::fs::File>,
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
                log.warn(&format!(
                    "{}; falling back to the executor's algorithms",
                    e.message()
                ));
                None
            }
        };
        Scheduler {
            config,
            log,
            sizes: HashMap::new(),
        }
    }

    /// The file to load for `call`, or None where the executor should fall back. The
    /// first call of a band decides it, compiling it where the cache does not hold it.
    pub fn select(&mut self, call: &Call) -> Option<PathBuf> {
        let ranks = call.ranks;
        self.find_size(ranks);
        let size = self.sizes.get_mut(&ranks)?.as_mut()?;
        let band = size
            .compiler
            .band_of(call.kind, call.in_place, call.bytes)?;
        let key = (call.kind, call.in_place, band);
        if !size.bands.contains_key(&key) {
            let decided = decide(size, key, ranks, &*self.log);
            size.bands.insert(key, decided);
        }
        let served = size.bands.get(&key)?.as_ref()?;
        let divides = served.chunks_per_loop > 0 && call.count % served.chunks_per_loop == 0;
        divides.then(|| served.path.clone())
    }

    /// The cache entry that serves `ranks`-rank communicators, where they have a cluster
    /// (deciding it as a first call would). For tests and benchmarks.
    pub fn entry(&mut self, ranks: usize) -> Option<PathBuf> {
        self.find_size(ranks);
        Some(self.sizes.get(&ranks)?.as_ref()?.cache.dir().to_path_buf())
    }

    /// Finds what serves `ranks`-rank communicators at the first call of that size (or
    /// that there is nothing), and keeps it.
    fn find_size(&mut self, ranks: usize) {
        if !self.sizes.contains_key(&ranks) {
            let size = self.size(ranks);
            self.sizes.insert(ranks, size);
        }
    }

    /// The cluster of `ranks`-rank communicators and its bands' compiler and cache
    /// entry; None (with a warning) where there is none.
    fn size(&self, ranks: usize) -> Option<Size> {
        let config = self.config.as_ref()?;
        let log = &*self.log;
        let topo = match topology(config, ranks, log) {
            Ok(topo) => topo?,
            Err(e) => {
                log.warn(&format!("{e}; falling back to the executor's algorithms"));
                return None;
            }
        };
        match sized(config, topo, log) {
            Ok(size) => Some(size),
            Err(e) => {
                log.warn(&format!(
                    "{}; {ranks}-rank collectives fall back to the executor's algorithms",
                    e.message()
                ));
                None
            }
        }
    }
}

/// A size's compiler and cache entry on `topo`, under this process's memory limit.
fn sized(config: &Config, topo: Topology, log: &dyn Log) -> crate::Result<Size> {
    let options = compile_options(config, &topo, log);
    let compiler = BandCompiler::new(topo, options)?;
    let memory = MemoryLimit::default().bytes();
    let cache =
        BandCache::new(&config.cache_dir, &compiler, memory).with_lock_wait(config.lock_wait);
    Ok(Size {
        compiler,
        cache,
        bands: HashMap::new(),
        unwritable: false,
    })
}

/// The decision for one band of `ranks`-rank communicators: the file to serve, or None
/// (with one warning where the fallback is not NCCL's winning choice). Where the cache
/// cannot store the band, it is compiled in memory and served from there: the same bytes.
fn decide(
    size: &mut Size,
    (kind, in_place, band): (CollectiveKind, bool, Band),
    ranks: usize,
    log: &dyn Log,
) -> Option<Served> {
    let key = (kind, in_place, band);
    let placement = if in_place { "in place" } else { "out of place" };
    let what = format!(
        "{kind} {placement} of {}..{} on {ranks} ranks",
        format_size(band.min_bytes),
        format_size(band.max_bytes)
    );
    let notice = |notice: Notice| {
        match notice {
        Notice::Rebuilding(why) => log.warn(&format!(
            "{} (the cache was changed behind tacos's back, or a write was cut short); compiling {what} again",
            echo(why)
        )),
        Notice::StillLocked(lock, wait) => log.warn(&format!(
            "{} was still locked by another process after {} ms ({LOCK_WAIT_ENV}); compiling {what} here too",
            lock.display(),
            wait.as_millis()
        )),
    }
    };
    let opened = crate::panics::catch(|| {
        if size.unwritable {
            return Ok(None);
        }
        size.cache.open_band(&size.compiler, key, &notice).map(Some)
    });
    let decided = match opened {
        Ok(Ok(Some((decision, found)))) => Ok((decision, found, None)),
        Ok(Ok(None)) => from_memory(size, key),
        Ok(Err(e)) => {
            size.unwritable = true;
            log.warn(&format!(
                "cannot store {what} in the cache ({e}); this process compiles {ranks}-rank bands in memory and serves them from there, the bytes the cache would hold"
            ));
            from_memory(size, key)
        }
        Err(panic) => Err(panic),
    };
    match &decided {
        Ok((Decision::Program(entry), found, _)) => log.info(&format!(
            "{what}: {} ({}, {})",
            entry.file,
            entry.algorithm,
            match found {
                Found::Cached => "from the cache",
                Found::Compiled => "compiled now",
            }
        )),
        Ok((Decision::LeftToNccl(left), _, _)) => log.info(&format!(
            "{what}: left to NCCL, whose {}/{} is predicted at {:.1} us against our {:.1} us",
            left.nccl.algorithm, left.nccl.protocol, left.nccl.time_us, left.program_us
        )),
        _ => {}
    }
    match decided {
        Ok((Decision::Program(entry), _, in_memory)) => match in_memory {
            Some((file, path)) => Some(Served {
                path,
                chunks_per_loop: entry.chunks_per_loop,
                _in_memory: Some(file),
            }),
            None => Some(Served {
                path: size.cache.file_path(&entry),
                chunks_per_loop: entry.chunks_per_loop,
                _in_memory: None,
            }),
        },
        Ok((Decision::LeftToNccl(_), _, _)) => None,
        Ok((Decision::NoProgram(why), found, _)) => {
            let how = match found {
                Found::Cached => "as the cache records",
                Found::Compiled => "compiled now",
            };
            log.warn(&format!(
                "no program for {what} ({how}: {}); these calls run on the executor's own algorithms, on every rank alike",
                echo(&why)
            ));
            None
        }
        Err(why) => {
            log.warn(&format!(
                "compiling {what} stopped: {why} (please report); these calls fall back to the executor's algorithms"
            ));
            None
        }
    }
}

/// A decision, how it was found, and the in-memory file serving it, if any.
type InMemory = (Decision, Found, Option<(std::fs::File, PathBuf)>);

/// The band compiled without the cache, its file (if any) in memory; why not where that
/// fails too (a panic, or no in-memory file).
fn from_memory(size: &Size, key: (CollectiveKind, bool, Band)) -> Result<InMemory, String> {
    let (decision, xml) = crate::panics::catch(|| compile_decision(&size.compiler, key))?;
    let file = match (&decision, xml) {
        (Decision::Program(entry), Some(xml)) => Some(
            in_memory(&entry.file, &xml)
                .map_err(|e| format!("cannot hold {} in memory: {e}", entry.file))?,
        ),
        _ => None,
    };
    Ok((decision, Found::Compiled, file))
}

/// `xml` in an anonymous file of this process's memory, and the path by which the
/// executor can open it (`/proc/self/fd/N`).
fn in_memory(name: &str, xml: &str) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    let name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: memfd_create with a NUL-terminated name; it touches no memory of ours.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created for us and is owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(xml.as_bytes())?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Ok((file, path))
}

/// Threads a band's compile runs on: fixed, rather than the machine's cores, so that not
/// even a thread-dependent step could make two ranks differ.
const BAND_THREADS: usize = 4;

/// What the scheduler compiles for `topo`: the fast preset, for the settings' target,
/// priced by the executor cost model (`TACOS_PROFILE`, else the settings' GPU
/// generation's built-in profile), against NCCL's own choice by `TACOS_NCCL_MARGIN`,
/// and bounded by `TACOS_MAX_TRANSFERS`.
fn compile_options(config: &Config, topo: &Topology, log: &dyn Log) -> CompileOptions {
    let executor = Executor::for_topology(topo, Some(config.gpu()), None).unwrap_or_else(|e| {
        log.warn(&format!(
            "{}; pricing with the built-in {} profile",
            e.message(),
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
            nccl_margin: config.nccl_margin,
        }),
        max_transfers: Some(config.max_transfers),
        jobs: BAND_THREADS,
        ..CompileOptions::fast()
    }
}

/// What [`fill_cache`] filled: the cache entry's directory and each band's decision.
pub struct Filled {
    pub dir: PathBuf,
    /// (collective, in place, the band, what serves it), in the order the bands were
    /// filled.
    pub bands: Vec<(CollectiveKind, bool, Band, ServedBy)>,
}

/// What serves a band of a filled cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServedBy {
    /// The program in this file of the entry's `msccl/`.
    Program(String),
    /// NCCL, whose own choice is predicted as fast.
    Nccl,
    /// NCCL, no program having been found (the warning says why).
    NoProgram,
}

/// Fills the cache with every band of `ranks`-rank communicators as the scheduler would
/// at their first calls (the same cluster, options, memory limit and entry): what a job's
/// prologue runs (`tacos compile --plugin-cache RANKS`) so that no call of the job
/// compiles. The entry and what serves each band, or why there is none; bands that get no
/// program are also reported through `log`.
pub fn fill_cache(config: &Config, ranks: usize, log: &(dyn Log + Sync)) -> Result<Filled, String> {
    let topo = topology(config, ranks, log)?.ok_or_else(|| {
        format!("the settings give no cluster of {ranks} GPUs (see the warnings)")
    })?;
    let size = sized(config, topo, log).map_err(|e| e.to_string())?;
    let options = size.compiler.options();
    let mut bands = Vec::new();
    for &kind in &options.collectives {
        for in_place in options.placements.flags(kind) {
            for &band in size.compiler.bands() {
                let key = (kind, in_place, band);
                let notice = |notice: Notice| {
                    match notice {
                    Notice::Rebuilding(why) => {
                        log.warn(&format!("{}; compiling that band again", echo(why)))
                    }
                    Notice::StillLocked(lock, wait) => log.warn(&format!(
                        "{} was still locked by another process after {} ms; compiling that band here too",
                        lock.display(),
                        wait.as_millis()
                    )),
                }
                };
                let served = match size.cache.open_band(&size.compiler, key, &notice) {
                    Ok((Decision::NoProgram(why), _)) => {
                        log.warn(&format!(
                            "no program for {kind} {} from {}: {}",
                            if in_place { "in place" } else { "out of place" },
                            format_size(band.min_bytes),
                            echo(&why)
                        ));
                        ServedBy::NoProgram
                    }
                    Ok((Decision::Program(entry), _)) => ServedBy::Program(entry.file),
                    Ok((Decision::LeftToNccl(_), _)) => ServedBy::Nccl,
                    Err(e) => return Err(e.to_string()),
                };
                bands.push((kind, in_place, band, served));
            }
        }
    }
    Ok(Filled {
        dir: size.cache.dir().to_path_buf(),
        bands,
    })
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
            Ok(g) if g > 0 && ranks % g == 0 => ranks / g,
            Ok(_) => {
                return Err(format!(
                    "{ranks} ranks are not a whole number of nodes of {file}; set TACOS_NODES"
                ))
            }
            Err(e) => return Err(e.message()),
        },
        _ => 1,
    };
    let found = discover(config, ranks, nodes, None).map_err(|e| e.message())?;
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
fn gpus_per_node(file: &str) -> crate::Result<usize> {
    nccl_xml::read(Path::new(file), &NcclImportOptions::default()).map(|i| i.topology.npus())
}

#[cfg(test)]
mod tests {
    use super::super::cache::refusal_of;
    use super::*;
    use crate::compile::sha256_hex;
    use crate::msccl::{read_program, Target};
    use std::collections::BTreeSet;
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

    /// Settings naming `topology` with a fresh cache of this test's (`cache`), NCCL
    /// competing by the default margin.
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

    /// `settings` with NCCL left out: every band gets a program, for tests about
    /// something else.
    fn every_band(topology: &str, cache: &str) -> Config {
        Config {
            nccl_margin: None,
            ..settings(topology, cache)
        }
    }

    /// A scheduler (a new process, a rank) on `config`, and what it warns.
    fn job(config: &Config) -> (Scheduler, Recorded) {
        let log = Recorded::default();
        (
            Scheduler::new(Ok(config.clone()), Box::new(log.clone())),
            log,
        )
    }

    /// `config`'s cache filled for `ranks` as a prologue would.
    fn filled(config: &Config, ranks: usize) -> Filled {
        fill_cache(config, ranks, &Recorded::default()).expect("the cache is filled")
    }

    /// The size's state in scheduler `s`.
    fn size(s: &mut Scheduler, ranks: usize) -> &Size {
        s.entry(ranks).expect("a cluster");
        s.sizes[&ranks].as_ref().unwrap()
    }

    /// The decision `config`'s cache records for `call`'s band.
    fn recorded(config: &Config, call: &Call) -> Decision {
        let (mut s, _) = job(config);
        let size = size(&mut s, call.ranks);
        let band = size
            .compiler
            .band_of(call.kind, call.in_place, call.bytes)
            .unwrap();
        size.cache
            .look(call.kind, call.in_place, band)
            .unwrap()
            .expect("a record")
    }

    /// A call of `kind` moving `bytes` over 4 ranks, in elements of 4 bytes.
    fn call4(kind: CollectiveKind, in_place: bool, bytes: u64) -> Call {
        let per_rank = match kind {
            CollectiveKind::AllReduce => bytes,
            _ => bytes / 4,
        };
        Call {
            kind,
            ranks: 4,
            in_place,
            bytes,
            count: (per_rank / 4) as usize,
        }
    }

    const ALLREDUCE_1M: Call = Call {
        kind: CollectiveKind::AllReduce,
        ranks: 4,
        in_place: true,
        bytes: 1 << 20,
        count: 1 << 18,
    };

    /// Every file of an entry's `msccl/` and record of its `bands/`, by name.
    fn contents(entry: &Path) -> Vec<(String, Vec<u8>)> {
        let mut all = Vec::new();
        for sub in ["msccl", "bands"] {
            for f in std::fs::read_dir(entry.join(sub)).unwrap() {
                let f = f.unwrap();
                let name = f.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') {
                    all.push((format!("{sub}/{name}"), std::fs::read(f.path()).unwrap()));
                }
            }
        }
        all.sort();
        all
    }

    #[test]
    fn every_call_gets_a_file_declaring_its_collective_placement_and_size() {
        let config = every_band("fc:4", "select");
        let (mut s, log) = job(&config);
        let bands = size(&mut s, 4).compiler.bands().to_vec();
        let mut divisible = false;
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
            for in_place in [true, false] {
                for band in &bands {
                    for bytes in [band.min_bytes, (band.max_bytes - 4095) & !4095] {
                        let call = call4(kind, in_place, bytes);
                        let file = s.select(&call).expect("a file");
                        assert!(file.starts_with(&config.cache_dir));
                        let p = read_program(&file).unwrap();
                        assert_eq!(
                            (p.collective_kind(), p.inplace, p.gpus.len()),
                            (Some(kind), in_place, 4)
                        );
                        let (min, max) = (p.min_bytes.unwrap(), p.max_bytes.unwrap());
                        assert_eq!((min, max), (band.min_bytes, band.max_bytes));
                        assert!((min..=max).contains(&bytes));
                        // A count the algorithm's chunks do not divide, another rank count: none.
                        if p.nchunksperloop > 1 && call.count % p.nchunksperloop == 0 {
                            divisible = true;
                            let odd = Call {
                                count: call.count + 1,
                                ..call
                            };
                            assert_eq!(s.select(&odd), None);
                        }
                        assert_eq!(s.select(&Call { ranks: 8, ..call }), None);
                    }
                }
            }
        }
        assert!(divisible, "no call exercised the chunk check");
        // Outside the bands: none.
        assert_eq!(s.select(&call4(CollectiveKind::AllReduce, true, 512)), None);
        let warnings = log.all();
        assert_eq!(
            warnings.len(),
            1,
            "one warning, for the 8 ranks: {warnings:?}"
        );
        assert!(warnings[0].contains("8 ranks"), "{warnings:?}");
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_cold_cache_serves_from_the_first_call_the_bytes_every_rank_compiles_or_finds() {
        // Two nodes with caches of their own, and a third rank sharing node a's.
        let (a, b) = (every_band("fc:4", "node-a"), every_band("fc:4", "node-b"));
        let call = call4(CollectiveKind::AllGather, true, 4 << 10);
        let (mut rank_a, log_a) = job(&a);
        let (mut rank_b, log_b) = job(&b);
        let file_a = rank_a.select(&call).expect("served at its first call");
        let file_b = rank_b.select(&call).expect("served at its first call");
        assert_eq!(
            std::fs::read(&file_a).unwrap(),
            std::fs::read(&file_b).unwrap()
        );
        assert!(log_a.all().is_empty() && log_b.all().is_empty());
        let (mut shared, _) = job(&a);
        assert_eq!(shared.select(&call), Some(file_a.clone()));
        // What a prologue writes for every band is what first calls compiled: node b's
        // one band is byte for byte node a's after a prologue there.
        let filled = filled(&a, 4);
        let entry = filled.dir.clone();
        let whole = contents(&entry);
        // The prologue says what serves each band: every program file it names is in the
        // entry, and every file in the entry serves some band.
        let named: BTreeSet<String> = filled
            .bands
            .iter()
            .filter_map(|(_, _, _, by)| match by {
                ServedBy::Program(file) => Some(format!("msccl/{file}")),
                _ => None,
            })
            .collect();
        let files: BTreeSet<String> = whole
            .iter()
            .filter(|(name, _)| name.starts_with("msccl/"))
            .map(|(name, _)| name.clone())
            .collect();
        assert_eq!(named, files);
        assert!(filled.bands.len() >= files.len());
        let one = contents(&rank_b.entry(4).unwrap());
        assert_eq!(one.len(), 2, "{one:?}");
        for f in &one {
            assert!(whole.contains(f), "{} differs from the prologue's", f.0);
        }
        for dir in [&a.cache_dir, &b.cache_dir] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Keeps every INFO line.
    #[derive(Clone, Default)]
    struct Told(Arc<Mutex<Vec<String>>>);

    impl Log for Told {
        fn info(&self, message: &str) {
            self.0.lock().unwrap().push(message.to_string());
        }
        fn warn(&self, _: &str) {}
    }

    #[test]
    fn each_bands_decision_is_told_once_as_info() {
        let (nccl, served) = (
            settings("ring:4", "told-nccl"),
            every_band("ring:4", "told-own"),
        );
        for (config, expect) in [(&nccl, "left to NCCL"), (&served, ".xml")] {
            let told = Told::default();
            let mut rank = Scheduler::new(Ok(config.clone()), Box::new(told.clone()));
            let first = rank.select(&ALLREDUCE_1M);
            rank.select(&ALLREDUCE_1M);
            let lines = told.0.lock().unwrap().clone();
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("allreduce in place") && lines[0].contains(expect));
            if let Some(path) = first {
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                assert!(lines[0].contains(&file), "{lines:?}");
            }
            let _ = std::fs::remove_dir_all(&config.cache_dir);
        }
    }

    #[test]
    fn a_band_left_to_nccl_falls_back_on_every_rank_alike() {
        // ring:4, a 1 MiB All-Reduce: NCCL's ring is predicted well ahead of any program.
        let (a, b) = (settings("ring:4", "nccl-a"), settings("ring:4", "nccl-b"));
        for config in [&a, &a, &b] {
            let (mut rank, log) = job(config);
            assert_eq!(rank.select(&ALLREDUCE_1M), None);
            assert_eq!(rank.select(&ALLREDUCE_1M), None);
            assert!(
                log.all().is_empty(),
                "NCCL's band is no failure: {:?}",
                log.all()
            );
        }
        // Each node's record: NCCL's choice beats the program by more than the margin.
        for config in [&a, &b] {
            match recorded(config, &ALLREDUCE_1M) {
                Decision::LeftToNccl(left) => {
                    assert!(left.program_us * 1.05 > left.nccl.time_us, "{left:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(recorded(&a, &ALLREDUCE_1M), recorded(&b, &ALLREDUCE_1M));
        // With NCCL out of the running the same band gets a program: a margin, not a
        // failure, left it.
        let off = every_band("ring:4", "nccl-off");
        assert!(job(&off).0.select(&ALLREDUCE_1M).is_some());
        for dir in [&a.cache_dir, &b.cache_dir, &off.cache_dir] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn the_work_bound_skips_candidates_by_their_size_on_every_rank_alike() {
        // All-Reduce on 4 ranks needs at least 2 x 4 x 3 x K transfers: 24 for K = 1.
        let tight = Config {
            max_transfers: 23,
            ..every_band("ring:4", "bound-none")
        };
        let big = call4(CollectiveKind::AllReduce, true, 1 << 30);
        for _ in 0..2 {
            let (mut rank, log) = job(&tight);
            assert_eq!(rank.select(&big), None);
            let warnings = log.all();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(
                warnings[0].contains("transfers") && warnings[0].contains("on every rank alike"),
                "{warnings:?}"
            );
        }
        assert!(matches!(recorded(&tight, &big), Decision::NoProgram(_)));
        // 24 admits K = 1 only, where K = 4 and 16 would be tried at 1 GiB.
        let k1 = Config {
            max_transfers: 24,
            ..every_band("ring:4", "bound-k1")
        };
        assert!(job(&k1).0.select(&big).is_some());
        let Decision::Program(entry) = recorded(&k1, &big) else {
            panic!("no program")
        };
        assert_eq!(entry.algorithm.chunks_per_npu(), Some(1));
        let roomy = every_band("ring:4", "bound-roomy");
        assert!(job(&roomy).0.select(&big).is_some());
        let Decision::Program(entry) = recorded(&roomy, &big) else {
            panic!("no program")
        };
        assert!(
            entry.algorithm.chunks_per_npu() > Some(1),
            "{:?}",
            entry.algorithm
        );
        for dir in [&tight.cache_dir, &k1.cache_dir, &roomy.cache_dir] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_band_compiles_to_the_same_bytes_on_any_number_of_threads() {
        let defaults = crate::topology::SpecDefaults::default();
        let topo = crate::topology::spec::parse_spec("preset:dgx1", &defaults).unwrap();
        let config = settings("preset:dgx1", "threads");
        let outcomes: Vec<_> = [1, 3]
            .into_iter()
            .map(|jobs| {
                let options = CompileOptions {
                    jobs,
                    ..compile_options(&config, &topo, &Recorded::default())
                };
                let compiler = BandCompiler::new(topo.clone(), options).unwrap();
                let band = *compiler.bands().last().unwrap();
                compiler
                    .compile(CollectiveKind::AllReduce, false, band)
                    .unwrap()
            })
            .collect();
        assert_eq!(outcomes[0], outcomes[1]);
    }

    #[test]
    fn a_topology_of_another_size_is_never_compiled() {
        let config = settings("ring:4", "mismatch");
        let (mut s, log) = job(&config);
        let call = Call {
            ranks: 8,
            ..ALLREDUCE_1M
        };
        assert_eq!(s.select(&call), None);
        assert!(
            log.all()[0].contains("has 4 NPUs but the communicator has 8 ranks"),
            "{:?}",
            log.all()
        );
        // Nothing was written: no cache directory at all.
        assert!(!config.cache_dir.exists(), "{}", config.cache_dir.display());
    }

    #[test]
    fn a_target_whose_limits_no_program_meets_gets_no_file_on_any_rank() {
        let mut config = every_band("ring:4", "tight-target");
        // An XML element for the algo, one per GPU, one threadblock and a step at least:
        // 7 per rank on 4 GPUs.
        config.target.limits.max_elements_per_rank = 6;
        for found in ["compiled now", "as the cache records"] {
            let (mut rank, log) = job(&config);
            assert_eq!(rank.select(&ALLREDUCE_1M), None);
            let warnings = log.all();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].contains(found), "{warnings:?}");
        }
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_file_over_the_targets_limits_is_refused_by_its_loader_rules() {
        let config = every_band("ring:4", "limits");
        let (mut s, _) = job(&config);
        let file = s.select(&ALLREDUCE_1M).expect("a file");
        let Decision::Program(e) = recorded(&config, &ALLREDUCE_1M) else {
            panic!("no program")
        };
        let xml = std::fs::read_to_string(&file).unwrap();
        let target = Target::default();
        assert_eq!(refusal_of(&xml, &e, 4, &target), None);
        // The same file, for a loader allowing one step per threadblock, or for 8 GPUs.
        let mut tight = target.clone();
        tight.limits.max_steps_per_tb = 1;
        let why = refusal_of(&xml, &e, 4, &tight).expect("refused");
        assert!(why.contains("steps"), "{why}");
        assert!(refusal_of(&xml, &e, 8, &target).is_some());
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn a_file_changed_behind_the_caches_back_is_compiled_again_never_served() {
        let config = every_band("ring:4", "changed");
        let (mut s, _) = job(&config);
        let file = s.select(&ALLREDUCE_1M).expect("a file");
        let Decision::Program(entry) = recorded(&config, &ALLREDUCE_1M) else {
            panic!("no program")
        };
        // The file edited: the next rank's first call compiles the band again and serves
        // the bytes the record names.
        std::fs::write(&file, "<algo edited").unwrap();
        let (mut next, log) = job(&config);
        assert_eq!(next.select(&ALLREDUCE_1M), Some(file.clone()));
        assert_eq!(sha256_hex(&std::fs::read(&file).unwrap()), entry.sha256);
        let warnings = log.all();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("behind tacos's back"), "{warnings:?}");
        // The record damaged: compiled again, the same record and file.
        let record = size(&mut next, 4)
            .cache
            .dir()
            .join("bands/allreduce-inplace-512K.json");
        let kept = std::fs::read(&record).unwrap();
        std::fs::write(&record, "{ not json").unwrap();
        let (mut third, log) = job(&config);
        assert_eq!(third.select(&ALLREDUCE_1M), Some(file.clone()));
        assert_eq!(std::fs::read(&record).unwrap(), kept);
        assert!(log.all()[0].contains("cannot be read"), "{:?}", log.all());
        let _ = std::fs::remove_dir_all(&config.cache_dir);
    }

    #[test]
    fn an_unwritable_cache_serves_the_same_bytes_from_memory_with_one_warning() {
        let good = every_band("ring:4", "memory-good");
        let blocker = std::env::temp_dir().join(format!(
            "tacos-plugin-scheduler-{}-memory-blocker",
            std::process::id()
        ));
        std::fs::write(&blocker, "not a directory").unwrap();
        let bad = Config {
            cache_dir: blocker.join("cache"),
            ..good.clone()
        };
        let other = call4(CollectiveKind::AllGather, false, 1 << 20);
        let (mut rank, log) = job(&bad);
        for call in [ALLREDUCE_1M, other, ALLREDUCE_1M] {
            let path = rank.select(&call).expect("served from memory");
            assert!(path.starts_with("/proc/self/fd"), "{}", path.display());
            let file = job(&good).0.select(&call).expect("served from the cache");
            assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&file).unwrap());
        }
        let warnings = log.all();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("in memory") && warnings[0].contains("Not a directory"),
            "{warnings:?}"
        );
        let _ = std::fs::remove_file(&blocker);
        let _ = std::fs::remove_dir_all(&good.cache_dir);
    }

    #[test]
    fn settings_that_give_no_cluster_fall_back_with_a_reason() {
        let log = Recorded::default();
        let bad = Err(crate::Error::Invalid {
            input: "TACOS_NIC_GBPS".into(),
            value: "x".into(),
            allowed: "a bandwidth in GB/s".into(),
        });
        let mut s = Scheduler::new(bad, Box::new(log.clone()));
        assert_eq!(s.select(&ALLREDUCE_1M), None);
        let mut s = Scheduler::new(Ok(Config::default()), Box::new(log.clone()));
        assert_eq!(s.select(&ALLREDUCE_1M), None);
        assert_eq!(s.select(&ALLREDUCE_1M), None);
        let warnings = log.all();
        assert!(warnings[0].contains("TACOS_NIC_GBPS: 'x'"), "{warnings:?}");
        assert!(warnings[1].contains("neither TACOS_TOPOLOGY nor NCCL_TOPO_FILE"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }
}
