//! Compiled algorithms on disk: [`open_or_compile`], the whole-set directory that
//! `tacos compile` users may call (made by `compile::write_dir`, checked by
//! `compile::check_dir`), and the MSCCL scheduler's cache, [`BandCache`]: one record per
//! size band, each compiled at the band's first call and byte for byte what any other
//! rank compiles for it, with the lock the ranks of one node take turns on.

use crate::collective::CollectiveKind;
use crate::compile::{
    algorithm_dir, check_dir_with, compile, loader_problems, parent_and_name, read_regular,
    sha256_hex, short_size, tidy_dir, topology_hash, write_dir, Band, BandCompiler, BandOutcome,
    CheckOptions, CompileOptions, Entry, LeftToNccl, Manifest, Progress, ProtoChoice, Written,
};
use crate::error::echo;
use crate::error::{Error, Result};
use crate::fsio::{create_private_dir, write_private, FileLock, Locking};
use crate::msccl::{parse_program, Target};
use crate::topology::Topology;
use crate::xmltree::parse_root_tag;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// A directory name for the cache of what `options` compile on `topo` with this tool:
/// `tacos-VERSION-TARGET-TOPOLOGY-OPTIONS` with the target's profile name, the first 16
/// hex digits of the topology hash and 12 of the options' hash (which covers the target's
/// limits), so a new tool, target, topology or option set gets a directory of its own and
/// never reads another's.
pub fn cache_dir_name(topo: &Topology, options: &CompileOptions) -> String {
    entry_name(options, &topology_hash(topo), &options_sha256(options))
}

/// [`cache_dir_name`] from the hashes already made.
fn entry_name(options: &CompileOptions, topology_hash: &str, options_sha256: &str) -> String {
    format!(
        "tacos-{}-{}-{}-{}",
        crate::VERSION,
        options.target.profile.name(),
        &topology_hash[..16],
        &options_sha256[..12]
    )
}

fn options_sha256(options: &CompileOptions) -> String {
    let json = serde_json::to_string(options).expect("options serialize");
    sha256_hex(json.as_bytes())
}

/// How `open_or_compile` got its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A complete, current directory for this topology and these options was there.
    Existing,
    /// It was compiled now and written (or, racing, found written by another process).
    Compiled(Written),
}

/// The plugin cache's entry point, and the same path as `tacos compile`: uses `dir` if
/// it holds, intact, what `options` compile on `topo` with this tool (manifest format and
/// tool version, topology hash, options, every file's hash; the XML is not re-parsed),
/// else compiles and writes it with `write_dir` (a stale or corrupted directory of ours is
/// replaced; any other, such as one whose manifest cannot be read, only with `force`).
/// What killed writers left beside `dir` is repaired or removed first (`tidy_dir`).
///
/// Processes opening the same directory at once (the ranks of one node) compile one at a
/// time: each waits on an advisory lock on `.NAME.lock` beside the directory, then looks
/// again, so one compiles and the others find its result. Where the lock file cannot be
/// made the directory cannot be written either: that is an error before any compiling.
pub fn open_or_compile(
    dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    force: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(Manifest, Opened)> {
    open_or_rebuild(dir, topo, options, force, progress, &|_| {})
}

/// `open_or_compile`, calling `rebuilding` with the reason when a directory that was
/// there is compiled again.
fn open_or_rebuild(
    dir: &Path,
    topo: &Topology,
    options: &CompileOptions,
    force: bool,
    progress: &(dyn Fn(Progress) + Sync),
    rebuilding: &dyn Fn(&str),
) -> Result<(Manifest, Opened)> {
    let wanted = CompileOptions {
        jobs: 0,
        ..options.clone()
    };
    tidy_dir(dir);
    if let Ok(manifest) = look(dir, topo, &wanted) {
        return Ok((manifest, Opened::Existing));
    }
    let _lock = DirLock::acquire(dir, None)?;
    let unsound = match look(dir, topo, &wanted) {
        Ok(manifest) => return Ok((manifest, Opened::Existing)),
        Err(why) => why,
    };
    if let Some(why) = unsound {
        rebuilding(&why);
    }
    let set = compile(topo, options, progress)?;
    let written = write_dir(&set, dir, force)?;
    Ok((set.manifest, Opened::Compiled(written)))
}

/// The manifest of `dir` where it holds, intact, the set `wanted` compiles on `topo`;
/// else why not (None: there is no directory).
fn look(
    dir: &Path,
    topo: &Topology,
    wanted: &CompileOptions,
) -> std::result::Result<Manifest, Option<String>> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Err(None);
    }
    let report = check_dir_with(dir, &CheckOptions::hashes_only(Some(topo)))
        .map_err(|e| Some(e.to_string()))?;
    if let Some(first) = report.problems.first() {
        return Err(Some(first.to_string()));
    }
    match report.manifest {
        Some(m) if &m.options == wanted => Ok(m),
        _ => Err(Some("compiled with other options".into())),
    }
}

/// Where each band's record is kept in an entry, beside `msccl/`.
const BAND_DIR: &str = "bands";
/// The records' `format` tag.
const BAND_FORMAT: &str = "tacos-plugin-band";

/// What the scheduler serves for one band: a file, or nothing (NCCL's choice, or no
/// program), the same on every rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The band's program, in the entry's `msccl/`.
    Program(Entry),
    /// NCCL's own choice is predicted as fast: the calls fall back.
    LeftToNccl(LeftToNccl),
    /// No candidate gave a program within the target's limits and the options' bounds
    /// (why): the calls fall back.
    NoProgram(String),
}

/// One band's record in the cache: its decision, and the key it was made for, so that a
/// record speaks only for the very tool, topology, options and memory limit.
#[derive(Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct BandRecord {
    format: String,
    tool_version: String,
    topology_hash: String,
    options_sha256: String,
    memory_limit: u64,
    collective: CollectiveKind,
    in_place: bool,
    band: Band,
    decision: Decision,
}

/// One entry of the scheduler's cache: the bands of one topology, option set and memory
/// limit, each compiled at its first call (or by a prologue) and kept as a record and,
/// where it has one, its program's file. A band's record is written after its file and
/// only once the file's bytes passed the target's loader rules, so a record naming a
/// file is that file's verdict.
pub struct BandCache {
    dir: PathBuf,
    topology_hash: String,
    options_sha256: String,
    memory_limit: u64,
    /// How long a band's first caller waits for the rank compiling it (None: as long as
    /// that takes).
    lock_wait: Option<Duration>,
    /// What a served file must declare beside its call: the GPUs, and the protocol each
    /// band is compiled with.
    ranks: usize,
    proto: ProtoChoice,
    /// Whether the directories the entry lives in belong to this user alone (else why
    /// not), found at the first band.
    trusted: OnceLock<std::result::Result<(), String>>,
    cache_dir: PathBuf,
}

/// How [`BandCache::open_band`] got a band's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Its record was in the cache.
    Cached,
    /// It was compiled now (and, where it could be, stored).
    Compiled,
}

impl BandCache {
    /// The entry for what `compiler` compiles under `cache_dir`, its steps held to
    /// `memory_limit` bytes: the compile's own directory name ([`cache_dir_name`]) with
    /// that limit (a step refused under one limit may be admitted under another, and pick
    /// another program).
    pub fn new(cache_dir: &Path, compiler: &BandCompiler, memory_limit: u64) -> BandCache {
        let options = compiler.options();
        let (topology_hash, options_sha256) =
            (topology_hash(compiler.topology()), options_sha256(options));
        let name = entry_name(options, &topology_hash, &options_sha256);
        BandCache {
            dir: cache_dir.join(format!("{name}-m{memory_limit}")),
            topology_hash,
            options_sha256,
            memory_limit,
            lock_wait: None,
            ranks: compiler.topology().alive_npus().len(),
            proto: options.proto,
            trusted: OnceLock::new(),
            cache_dir: cache_dir.to_path_buf(),
        }
    }

    /// The same entry, a band's first caller waiting at most `wait` for the lock of a
    /// rank compiling it, then compiling it too ([`BandCache::open_band`]).
    pub fn with_lock_wait(self, wait: Duration) -> BandCache {
        BandCache {
            lock_wait: Some(wait),
            ..self
        }
    }

    /// The entry's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a band's program file would be.
    pub fn file_path(&self, entry: &Entry) -> PathBuf {
        algorithm_dir(&self.dir).join(&entry.file)
    }

    fn record_path(&self, kind: CollectiveKind, in_place: bool, band: Band) -> PathBuf {
        let placement = if in_place { "inplace" } else { "outofplace" };
        let name = format!("{kind}-{placement}-{}.json", short_size(band.min_bytes));
        self.dir.join(BAND_DIR).join(name)
    }

    fn record(
        &self,
        kind: CollectiveKind,
        in_place: bool,
        band: Band,
        decision: Decision,
    ) -> BandRecord {
        BandRecord {
            format: BAND_FORMAT.into(),
            tool_version: crate::VERSION.into(),
            topology_hash: self.topology_hash.clone(),
            options_sha256: self.options_sha256.clone(),
            memory_limit: self.memory_limit,
            collective: kind,
            in_place,
            band,
            decision,
        }
    }

    /// The band's decision as the cache holds it: Ok(None) where there is no record;
    /// Err(why) where the record or its file cannot be used (unreadable, for another
    /// key, the file missing or not the bytes the record names). A program's file is
    /// read and hashed here.
    pub fn look(
        &self,
        kind: CollectiveKind,
        in_place: bool,
        band: Band,
    ) -> std::result::Result<Option<Decision>, String> {
        let path = self.record_path(kind, in_place, band);
        let bytes = match read_regular(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let record: BandRecord = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} cannot be read ({e})", path.display()))?;
        let wanted = self.record(kind, in_place, band, record.decision.clone());
        if record != wanted {
            return Err(format!(
                "{} is for another tool, topology, options or band",
                path.display()
            ));
        }
        if let Decision::Program(entry) = &record.decision {
            if entry.file.contains('/') {
                return Err(format!("{} names a file outside its entry", path.display()));
            }
            let file = self.file_path(entry);
            self.servable(&file, entry, (kind, in_place, band))
                .map_err(|why| format!("{why}: {}", file.display()))?;
        }
        Ok(Some(record.decision))
    }

    /// Whether `file`, the program `entry` names, may serve the calls of `key`: its bytes
    /// are those the entry names, and both the entry and what the file itself declares
    /// in its `<algo>` tag (the collective, the GPUs, the placement, the size range, the
    /// protocol, the chunks per loop) are the call's, so a record naming another band's
    /// file, hash and all, serves nothing. Else why not.
    fn servable(
        &self,
        file: &Path,
        entry: &Entry,
        (kind, in_place, band): (CollectiveKind, bool, Band),
    ) -> std::result::Result<(), String> {
        let proto = self.proto.for_size(band.min_bytes);
        let recorded = (entry.collective, entry.in_place, entry.proto.as_str());
        if recorded != (kind, in_place, proto.name())
            || entry.min_bytes > band.min_bytes
            || entry.max_bytes < band.max_bytes
        {
            return Err(format!(
                "the record's program is {} {} for {}..{} bytes in {}, the band {kind} {} for {}..{} in {}",
                entry.collective,
                placement(entry.in_place),
                entry.min_bytes,
                entry.max_bytes,
                entry.proto,
                placement(in_place),
                band.min_bytes,
                band.max_bytes,
                proto.name()
            ));
        }
        let bytes = read_regular(file).map_err(|e| e.to_string())?;
        if sha256_hex(&bytes) != entry.sha256 {
            return Err("its bytes are not those the record names (SHA-256 mismatch)".into());
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| e.to_string())?;
        let algo = parse_root_tag(text, &file.display().to_string()).map_err(|e| e.to_string())?;
        let placement_flag = if in_place { "inplace" } else { "outofplace" };
        let declared = [
            ("coll", kind.name().to_string()),
            ("ngpus", self.ranks.to_string()),
            ("proto", proto.name().to_string()),
            ("nchunksperloop", entry.chunks_per_loop.to_string()),
            (placement_flag, "1".into()),
            ("minBytes", entry.min_bytes.to_string()),
            ("maxBytes", entry.max_bytes.to_string()),
        ];
        if algo.name != "algo" {
            return Err(format!(
                "its root element is <{}>, not <algo>",
                echo(&algo.name)
            ));
        }
        for (attribute, wanted) in declared {
            let found = algo.attr(attribute);
            if found.map(str::trim) != Some(wanted.as_str()) {
                return Err(format!(
                    "it declares {attribute}={}, the call needs {wanted}",
                    found.map_or("nothing".into(), |f| format!("\"{}\"", echo(f)))
                ));
            }
        }
        Ok(())
    }

    /// Why the cache's directories may not be used, if so: each of the cache directory,
    /// the entry and its folders that exists must belong to this user and be writable by
    /// no other (a directory others can write lets them plant a record and its program).
    fn untrusted(&self) -> Option<&str> {
        self.trusted
            .get_or_init(|| {
                let dirs = [
                    self.cache_dir.clone(),
                    self.dir.clone(),
                    self.dir.join(BAND_DIR),
                    algorithm_dir(&self.dir),
                ];
                dirs.iter().try_for_each(|d| owned_by_us(d))
            })
            .as_ref()
            .err()
            .map(String::as_str)
    }

    /// The band's decision: the cache's where it holds a usable one, else compiled by
    /// `compiler` (whose topology and options this entry is for) and stored, the ranks of
    /// a node taking turns on a lock beside the record so that one compiles and the
    /// others find its result. A compile that fails is a decision too (`NoProgram`): it
    /// fails alike everywhere. `notice` hears why a record that was there is replaced,
    /// and where the lock was still held after the entry's lock wait: the band is then
    /// compiled here as well (the same bytes, written atomically over the same), so that
    /// no call waits on another process without a bound and every rank decides alike. An
    /// error where the decision cannot be stored (the cache cannot be written): the
    /// caller may still compile it ([`compile_decision`]).
    pub fn open_band(
        &self,
        compiler: &BandCompiler,
        (kind, in_place, band): (CollectiveKind, bool, Band),
        notice: &dyn Fn(Notice),
    ) -> Result<(Decision, Found)> {
        if let Some(why) = self.untrusted() {
            return Err(Error::compile(why.to_string()));
        }
        if let Ok(Some(decision)) = self.look(kind, in_place, band) {
            return Ok((decision, Found::Cached));
        }
        let path = self.record_path(kind, in_place, band);
        let _turn = match DirLock::acquire(&path, self.lock_wait)? {
            Ok(lock) => Some(lock),
            Err(lock) => {
                notice(Notice::StillLocked(
                    &lock,
                    self.lock_wait.unwrap_or_default(),
                ));
                None
            }
        };
        match self.look(kind, in_place, band) {
            Ok(Some(decision)) => return Ok((decision, Found::Cached)),
            Ok(None) => {}
            Err(why) => notice(Notice::Rebuilding(&why)),
        }
        let (decision, xml) = compile_decision(compiler, (kind, in_place, band));
        if let (Decision::Program(entry), Some(xml)) = (&decision, xml) {
            create_private_dir(&algorithm_dir(&self.dir))?;
            write_private(&self.file_path(entry), xml.as_bytes())?;
        }
        let record = self.record(kind, in_place, band, decision);
        let json = serde_json::to_vec_pretty(&record).map_err(|e| Error::compile(e.to_string()))?;
        write_private(&path, &json)?;
        Ok((record.decision, Found::Compiled))
    }
}

/// What [`BandCache::open_band`] tells its caller on the way.
#[derive(Clone, Copy, Debug)]
pub enum Notice<'a> {
    /// A record that was there cannot be used (why): the band is compiled again.
    Rebuilding(&'a str),
    /// Another process still held the band's lock (this file) after this long: the band
    /// is compiled here too.
    StillLocked(&'a Path, Duration),
}

/// A band's decision compiled by `compiler`, with the program's file where it has one:
/// a compile that fails, or a file the target's loader would refuse, is a decision too
/// (`NoProgram`), reached alike everywhere.
pub fn compile_decision(
    compiler: &BandCompiler,
    (kind, in_place, band): (CollectiveKind, bool, Band),
) -> (Decision, Option<String>) {
    match compiler.compile(kind, in_place, band) {
        Ok(BandOutcome::Program { entry, file }) => {
            let ranks = compiler.topology().alive_npus().len();
            match refusal_of(&file.xml, &entry, ranks, &compiler.options().target) {
                Some(why) => (
                    Decision::NoProgram(format!("{} would be refused: {why}", entry.file)),
                    None,
                ),
                None => (Decision::Program(entry), Some(file.xml)),
            }
        }
        Ok(BandOutcome::LeftToNccl(left)) => (Decision::LeftToNccl(left), None),
        Err(e) => (Decision::NoProgram(e.message()), None),
    }
}

/// Why `xml`, the file of `entry`, may not be served, if so: it must be a program for
/// `ranks` GPUs with the entry's chunk count that passes `target`'s loader rules, read
/// back from its bytes as the loader will read them.
pub(super) fn refusal_of(
    xml: &str,
    entry: &Entry,
    ranks: usize,
    target: &Target,
) -> Option<String> {
    match parse_program(xml, &entry.file) {
        Err(e) => Some(e.message()),
        Ok(p) if p.gpus.len() != ranks || p.nchunksperloop != entry.chunks_per_loop => {
            Some(format!(
                "it has {} GPUs and {} chunks per loop, the manifest says {ranks} and {}",
                p.gpus.len(),
                p.nchunksperloop,
                entry.chunks_per_loop
            ))
        }
        Ok(p) => loader_problems(&p, target).into_iter().next(),
    }
}

fn placement(in_place: bool) -> &'static str {
    if in_place {
        "in place"
    } else {
        "out of place"
    }
}

/// Whether directory `dir`, where it exists, belongs to this process's user and no other
/// user may write it; else why not.
fn owned_by_us(dir: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    // SAFETY: geteuid only reads the process's credentials.
    let us = unsafe { libc::geteuid() };
    if meta.uid() != us {
        return Err(format!(
            "{} belongs to user {}, not to this process's user ({us}): another user's cache is not served",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(format!(
            "{} may be written by every user (mode {:o}): a cache others can write is not served",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// An exclusive advisory lock on `.NAME.lock` beside a directory, released when dropped
/// (or when its process dies).
struct DirLock {
    _held: Option<FileLock>,
}

impl DirLock {
    /// Waits for the lock, for at most `wait` where given: `Err(path)` of the lock file
    /// where another still holds it then. An error where the lock file cannot be made
    /// (the directory's parent cannot be written); no lock, but no error, where the
    /// filesystem keeps none.
    fn acquire(
        dir: &Path,
        wait: Option<Duration>,
    ) -> Result<std::result::Result<DirLock, PathBuf>> {
        use std::os::unix::fs::OpenOptionsExt;
        let (parent, name) = parent_and_name(dir)?;
        create_private_dir(&parent)?;
        let path = parent.join(format!(".{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let held = match wait {
            None => FileLock::wait(file),
            Some(wait) => match FileLock::wait_for(file, wait) {
                Locking::Held(lock) => Some(lock),
                Locking::Unsupported => None,
                Locking::ByOther => return Ok(Err(path)),
            },
        };
        Ok(Ok(DirLock { _held: held }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another user's directory is refused, naming its owner: `/` where this process is
    /// not root; as root, a scratch directory given to another user.
    #[test]
    fn another_users_directory_is_not_trusted() {
        // SAFETY: geteuid only reads the process's credentials.
        let (dir, owner) = if unsafe { libc::geteuid() } != 0 {
            (PathBuf::from("/"), 0)
        } else {
            let dir = std::env::temp_dir().join(format!("tacos-owner-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            (dir, 65534)
        };
        let why = owned_by_us(&dir).unwrap_err();
        assert!(why.contains(&format!("belongs to user {owner}")), "{why}");
        assert!(owned_by_us(&dir.join("missing")).is_ok());
        if owner != 0 {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}
