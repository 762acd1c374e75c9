//! Memory estimates made before allocating, and the limit they are held to.
//!
//! Synthesis, baselines, the schedule checker and the simulator each keep state that grows
//! with chunks x NPUs or with transfers; a request large enough (All-to-All on a 32x32
//! mesh, a ring All-Reduce on 4,096 NPUs) would ask the allocator for more than the
//! machine has and abort the process, which no caller can catch. So each of them first
//! estimates, from the request's figures alone, the bytes it would hold at its peak, and
//! refuses with [`Error::Limit`] above a [`MemoryLimit`].
//!
//! The estimates follow the data structures: per (NPU, chunk) state, per transfer records
//! and per link tables, each with the growth slack of a vector. `tests/budget.rs` holds
//! them to within a factor of two of what a counting allocator measures.
//!
//! The limit is one figure, the smallest of: what was asked for (the command line's
//! `--max-memory SIZE`, else the environment's [`MAX_MEMORY_ENV`]; the plugins, which run
//! inside other programs, else the far lower [`PLUGIN_MAX_MEMORY`]), half of this machine's
//! physical memory, and half of what the process's address-space limit (`RLIMIT_AS`,
//! `RLIMIT_DATA`) and its cgroup's memory limit leave it ([`MemoryLimit::system`]). Half,
//! because the estimates may fall short of the measured peak by up to that much.

use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::synth::{port_shape, PortShape};
use crate::topology::{NpuId, Topology};
use crate::units::parse_size;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, RwLock};

/// The environment variable that sets the limit where no `--max-memory` is given.
pub const MAX_MEMORY_ENV: &str = "TACOS_MAX_MEMORY";

/// The limit for the plugins: they share the host process with a training job.
pub const PLUGIN_MAX_MEMORY: u64 = 1 << 30;

/// Physical memory assumed where the machine's cannot be read.
const FALLBACK_PHYSICAL: u64 = 8 << 30;

/// The most memory one request may hold, and where that figure came from (said in the
/// error, with how to raise it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    bytes: u64,
    origin: Origin,
}

/// Where a [`MemoryLimit`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Half of this machine's physical memory.
    Machine,
    /// The `--max-memory` flag.
    Flag,
    /// The [`MAX_MEMORY_ENV`] environment variable.
    Environment,
    /// [`PLUGIN_MAX_MEMORY`].
    Plugin,
    /// A library caller's own figure.
    Caller,
    /// Half of what the process's address-space limit leaves it.
    AddressSpace,
    /// Half of what the process's cgroup's memory limit leaves it.
    Cgroup,
}

/// The limit `Default` gives, once a front end has set it for the process.
static PROCESS_DEFAULT: RwLock<Option<MemoryLimit>> = RwLock::new(None);

impl MemoryLimit {
    /// A limit of `bytes`.
    pub fn new(bytes: u64, origin: Origin) -> MemoryLimit {
        MemoryLimit { bytes, origin }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Half of this machine's physical memory (of an assumed 8 GiB where it cannot be read).
    pub fn machine() -> MemoryLimit {
        static HALF: OnceLock<u64> = OnceLock::new();
        let bytes = *HALF.get_or_init(|| physical_memory().unwrap_or(FALLBACK_PHYSICAL) / 2);
        MemoryLimit::new(bytes, Origin::Machine)
    }

    /// The plugins' limit, [`PLUGIN_MAX_MEMORY`].
    pub fn plugin() -> MemoryLimit {
        MemoryLimit::new(PLUGIN_MAX_MEMORY, Origin::Plugin)
    }

    /// The most this process may hold now, whatever was asked for: half of physical
    /// memory ([`MemoryLimit::machine`]), half of what `RLIMIT_AS` and `RLIMIT_DATA` leave
    /// beyond the address space already mapped, and half of what the cgroup's memory limit
    /// leaves beyond what it holds; the smallest of those that apply.
    ///
    /// ```
    /// use tacos::budget::MemoryLimit;
    /// assert!(MemoryLimit::system().bytes() <= MemoryLimit::machine().bytes());
    /// ```
    pub fn system() -> MemoryLimit {
        let mut limit = MemoryLimit::machine();
        for (room, origin) in [
            (address_space_room(), Origin::AddressSpace),
            (cgroup_room(), Origin::Cgroup),
        ] {
            if let Some(room) = room {
                limit = limit.min(MemoryLimit::new(room / 2, origin));
            }
        }
        limit
    }

    /// The smaller of two limits (the first where they are equal).
    pub fn min(self, other: MemoryLimit) -> MemoryLimit {
        if other.bytes < self.bytes {
            other
        } else {
            self
        }
    }

    /// The limit [`MAX_MEMORY_ENV`] sets, if it is set; an error names a value that is
    /// not a size.
    pub fn from_env() -> Result<Option<MemoryLimit>> {
        match std::env::var(MAX_MEMORY_ENV) {
            Ok(text) => parse_limit(MAX_MEMORY_ENV, &text, Origin::Environment).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(raw)) => Err(Error::Invalid {
                input: MAX_MEMORY_ENV.into(),
                value: raw.to_string_lossy().into_owned(),
                allowed: SIZE_ALLOWED.into(),
            }),
        }
    }

    /// The limit a command line runs under: `--max-memory` (already parsed, in bytes) if
    /// given, else [`MAX_MEMORY_ENV`], held within [`MemoryLimit::system`].
    pub fn configured(flag: Option<u64>) -> Result<MemoryLimit> {
        let asked = match flag {
            Some(bytes) => Some(MemoryLimit::new(bytes, Origin::Flag)),
            None => MemoryLimit::from_env()?,
        };
        Ok(MemoryLimit::within_system(asked))
    }

    /// `asked`, where given, held within [`MemoryLimit::system`]; else that alone.
    pub fn within_system(asked: Option<MemoryLimit>) -> MemoryLimit {
        let system = MemoryLimit::system();
        asked.map_or(system, |asked| asked.min(system))
    }

    /// Makes this the limit `MemoryLimit::default()` gives in this process: what a front
    /// end (the command line, a plugin) does once, so every step it runs is held to it.
    pub fn set_process_default(self) {
        *PROCESS_DEFAULT.write().unwrap_or_else(|e| e.into_inner()) = Some(self);
    }

    /// Refuses `estimate` bytes above the limit; `doing` says what would need them.
    pub fn admit(&self, estimate: u64, doing: impl FnOnce() -> String) -> Result<()> {
        if estimate <= self.bytes {
            return Ok(());
        }
        Err(Error::Limit {
            what: "bytes of memory (estimated)",
            value: estimate,
            limit: self.bytes,
            context: format!(
                "{} would need about {}; the limit of {} is {}",
                doing(),
                readable(estimate),
                readable(self.bytes),
                self.origin.describe()
            ),
        })
    }
}

impl Default for MemoryLimit {
    /// The process's limit ([`MemoryLimit::set_process_default`]), else
    /// [`MemoryLimit::system`] as it was the first time it was asked for.
    fn default() -> MemoryLimit {
        static SYSTEM: OnceLock<MemoryLimit> = OnceLock::new();
        PROCESS_DEFAULT
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(|| *SYSTEM.get_or_init(MemoryLimit::system))
    }
}

impl Origin {
    /// Where the limit came from and how to raise it, for an error message.
    fn describe(self) -> &'static str {
        match self {
            Origin::Machine => {
                "half of this machine's memory (--max-memory SIZE or TACOS_MAX_MEMORY may lower it, not raise it)"
            }
            Origin::Flag => "set by --max-memory",
            Origin::Environment => "set by TACOS_MAX_MEMORY (--max-memory SIZE overrides it)",
            Origin::Plugin => "the plugins' limit (TACOS_MAX_MEMORY raises it)",
            Origin::Caller => "the caller's",
            Origin::AddressSpace => {
                "half of what the address-space limit (ulimit -v) leaves this process"
            }
            Origin::Cgroup => "half of what this process's cgroup memory limit leaves it",
        }
    }
}

const SIZE_ALLOWED: &str = "a size such as 16GiB, 4GB or 1000000000";

/// Parses a limit given as a size by `input`.
pub fn parse_limit(input: &str, text: &str, origin: Origin) -> Result<MemoryLimit> {
    parse_size(text)
        .map(|bytes| MemoryLimit::new(bytes, origin))
        .map_err(|_| Error::Invalid {
            input: input.into(),
            value: text.into(),
            allowed: SIZE_ALLOWED.into(),
        })
}

/// A byte count to three significant figures or so: `24.4 GiB`, `950 MiB`.
fn readable(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

/// This machine's physical memory, where the OS says.
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let bytes = u64::try_from(pages)
        .ok()?
        .checked_mul(u64::try_from(page).ok()?)?;
    (bytes > 0).then_some(bytes)
}

/// The least room the address-space limits (`RLIMIT_AS`, `RLIMIT_DATA`) leave beyond
/// what this process has mapped (its size, for the data limit its data and stack), where
/// either is set.
fn address_space_room() -> Option<u64> {
    // /proc/self/statm: sizes in pages, the whole mapping first and data and stack sixth.
    let statm = std::fs::read_to_string("/proc/self/statm").ok();
    let pages = |field: usize| -> u64 {
        statm
            .as_deref()
            .and_then(|s| s.split_whitespace().nth(field)?.parse().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads system configuration.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    [(libc::RLIMIT_AS, 0), (libc::RLIMIT_DATA, 5)]
        .into_iter()
        .filter_map(|(resource, field)| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes the one struct it is given.
            if unsafe { libc::getrlimit(resource, &mut limit) } != 0
                || limit.rlim_cur == libc::RLIM_INFINITY
            {
                return None;
            }
            Some(
                limit
                    .rlim_cur
                    .saturating_sub(pages(field).saturating_mul(page)),
            )
        })
        .min()
}

/// The least room the memory limits of this process's cgroup and its ancestors leave
/// beyond what each holds, where one is set.
fn cgroup_room() -> Option<u64> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_room_at(&membership, Path::new("/sys/fs/cgroup"))
}

/// As `cgroup_room`, for the membership lines of `/proc/self/cgroup` under the cgroup
/// file system mounted at `root`: cgroup v2's `memory.max` and `memory.current`, else v1's
/// `memory.limit_in_bytes` and `memory.usage_in_bytes` under `root/memory`.
fn cgroup_room_at(membership: &str, root: &Path) -> Option<u64> {
    let read =
        |path: PathBuf| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let mut least: Option<u64> = None;
    for line in membership.lines() {
        // hierarchy-id:controllers:path; v2 lists no controllers.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let base = match controllers {
            "" => root.to_path_buf(),
            c if c.split(',').any(|c| c == "memory") => root.join("memory"),
            _ => continue,
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            let v2 = read(dir.join("memory.max")).zip(read(dir.join("memory.current")));
            let v1 = || {
                read(dir.join("memory.limit_in_bytes")).zip(read(dir.join("memory.usage_in_bytes")))
            };
            // v2 writes "max" where there is no limit (it does not parse); v1 a figure
            // near 2^63.
            if let Some((max, used)) = v2.or_else(v1).filter(|&(max, _)| max < 1 << 62) {
                let room = max.saturating_sub(used);
                least = Some(least.map_or(room, |l| l.min(room)));
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    least
}

/// Bytes of one transfer record (`schedule::Transfer`).
const TRANSFER: u64 = 48;
/// What the allocator adds to each allocation, roughly.
const ALLOCATION: u64 = 16;
/// Bytes the matcher keeps per link of a held synthesis: the transfer it carries and when
/// it lands (24), its costs (16), its reservations' cursor and wake-up (16), its pool's
/// header and slot (28) and the pool's first allocation (16 with the allocator's).
const LINK_STATE: u64 = 100;

/// A collective's figures, from its spec alone (nothing built).
#[derive(Clone, Copy, Debug)]
struct Shape {
    chunks: u64,
    /// (chunk, NPU) pairs where the NPU must receive the chunk (or, combining, send its
    /// contribution): one transfer each over neighbours.
    deliveries: u64,
    /// Whether chunks must cross NPUs that do not need them.
    relayed: bool,
}

impl Shape {
    fn of(spec: &CollectiveSpec, alive: usize) -> Shape {
        use CollectiveKind::*;
        let p = spec.npus.len() as u64;
        let k = spec.chunks_per_npu as u64;
        // K comes from user input (a schedule file) before the collective is checked.
        let pk = p.saturating_mul(k);
        let (chunks, per_chunk_deliveries) = match spec.kind {
            AllGather | ReduceScatter => (pk, p.saturating_sub(1)),
            AllReduce => (pk, 2 * p.saturating_sub(1)),
            Broadcast | Reduce => (k, p.saturating_sub(1)),
            Gather | Scatter => (pk, 1),
            AllToAll => (p.saturating_mul(p).saturating_mul(k), 1),
        };
        let relayed = matches!(spec.kind, Gather | Scatter | AllToAll) || spec.npus.len() < alive;
        Shape {
            chunks,
            deliveries: chunks.saturating_mul(per_chunk_deliveries),
            relayed,
        }
    }
}

/// Bytes building a topology of `links` directed links holds at its peak: each link (32
/// bytes) in the builder's list and in the topology, with the sort order and the incoming
/// index beside them.
pub fn topology(links: usize) -> u64 {
    mul(
        links as u64,
        2 * std::mem::size_of::<crate::topology::Link>() as u64 + 16,
    )
}

/// Bytes `Collective::new` holds for `spec` on `topo` at its peak: its copy of the spec's
/// NPUs (conditions are computed, not stored) and what its reachability check builds:
/// hops from one NPU, and unless chunks only spread from a root, the reversed topology.
pub fn collective(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let hops = mul(topo.vertices() as u64, 16);
    let reversed = match spec.kind {
        CollectiveKind::Broadcast | CollectiveKind::Scatter => 0,
        _ => topology(topo.links().len()),
    };
    mul(spec.npus.len() as u64, 8)
        .saturating_add(hops)
        .saturating_add(reversed)
}

/// Bytes synthesizing `specs` together on `topo` holds at its peak (the collectives
/// themselves excluded): the matcher's per (NPU, chunk) and per transfer state, for
/// All-Reduce its reduction phase and the three copy phases it runs side by side.
pub fn synthesis(topo: &Topology, specs: &[CollectiveSpec], planned: bool) -> u64 {
    let n = topo.npus() as u64;
    let links = topo.links().len() as u64;
    let alive = topo.alive_npus().len();
    let hops = mean_hops(topo);
    let mut chunks = 0u64;
    let mut transfers = 0u64;
    let mut copy_phases = 1;
    let mut relayed = false;
    for spec in specs {
        let s = Shape::of(spec, alive);
        chunks = chunks.saturating_add(s.chunks);
        let t = if s.relayed {
            relayed = true;
            mul(s.deliveries, hops)
        } else {
            s.deliveries
        };
        transfers = transfers.saturating_add(t);
        if spec.kind == CollectiveKind::AllReduce {
            copy_phases = 3;
        }
    }
    let ports = if relayed { None } else { port_shape(topo) };
    let (matched_links, _) = matcher_links(topo, ports);
    // Planned, chunks with one target each travel as one copy on a path and chunks copied
    // to every NPU along one tree: nothing is ever replaced, so no time per (NPU, chunk)
    // is kept.
    let one_copy = planned;
    let mut matcher =
        matcher_state(topo, chunks, ports, one_copy).saturating_add(mul(matched_links, LINK_STATE));
    // Per transfer: its record (48, reserved once, with growth slack where relays add
    // hops), whether it was dropped (1), and pool entries offered over each outgoing link
    // (4 x degree x 2; through switches matched by port, each channel with a pool); the
    // kept ones are filtered in place.
    let degree = ports.map_or(links, |p| p.channels) / n.max(1) + 1;
    let record = if relayed { 2 * TRANSFER } else { TRANSFER };
    matcher = matcher.saturating_add(mul(transfers, record + 8 * degree + 1));
    if relayed {
        // Distances from every target to every NPU, per chunk the best so far, and where
        // chunks have one target their planned paths: while they are planned, a trip (48),
        // its place in the order (8) and a path of its own (its header and allocation, 40,
        // and 4 a hop); then 5 a chunk and 4 a hop.
        matcher = matcher
            .saturating_add(mul(mul(n, n), 8))
            .saturating_add(mul(chunks, 12 + 101 + 8 * hops));
    }
    // Phases running side by side, plus the finished transfers grouped per collective
    // where several lists are merged (one collective's single list is moved).
    let merged = if specs.len() > 1 || copy_phases > 1 {
        mul(transfers, 2 * TRANSFER)
    } else {
        0
    };
    mul(matcher, copy_phases).saturating_add(merged)
}

/// Bytes planned trees for `spec` hold (`synth::trees`, a trial of `pipeline::search`
/// with `SynthOptions::trees`): per chunk and NPU its tree's link in and the NPUs below it
/// (8), and while they are planned a link's load and a candidate link per link (32).
pub fn trees(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let chunks = Shape::of(spec, topo.alive_npus().len()).chunks;
    mul(mul(chunks, topo.npus() as u64), 8).saturating_add(mul(topo.links().len() as u64, 32))
}

/// Bytes a streamed synthesis of `spec` (`synth::synthesize_streamed`) holds at its
/// peak, the collective excluded: the matcher's per (NPU, chunk) and per chunk state, per
/// link (through switches, per channel) the transfer in flight (with those settled behind an earlier one, about as many),
/// and the pools of chunks offered over each link. A pool holds a chunk at most once;
/// measured at their peak, the pools hold about 2 to 2.5 x links x chunks / mean hops
/// entries (meshes of 256 to 4,096 NPUs, a torus, a hypercube: a chunk waits in a link's
/// pool while the wave that spreads it passes), counted here as 4 x, with a vector's
/// growth slack.
pub fn streamed_synthesis(topo: &Topology, spec: &CollectiveSpec) -> u64 {
    let alive = topo.alive_npus().len() as u64;
    let chunks = Shape::of(spec, alive as usize).chunks;
    // Through switches the matcher's links are channels, one per pair of NPUs a route
    // joins (`synth::fabric`), except that large star groups are matched by port: a
    // gate per member, and no pool.
    let ports = port_shape(topo);
    let (links, pooled_links) = matcher_links(topo, ports);
    let offers = mul(pooled_links, chunks);
    let pooled = match ports {
        // Measured at their peak (rail-optimized clusters of 1,024 to 4,096 GPUs, the
        // vectors' capacity), the pools of the small groups' channels hold up to a
        // quarter of the chunks each (a backlog at NVSwitch ports nearly as busy as the
        // rails); with the growth slack counted below, half.
        Some(_) => offers / 4,
        None => (mul(offers, 4) / mean_hops(topo)).min(offers),
    };
    matcher_state(topo, chunks, ports, false)
        .saturating_add(mul(links, 2 * TRANSFER + 64))
        .saturating_add(mul(pooled, 2 * 4))
}

/// The links the matcher matches on `topo` and those of them with a pool: through switches
/// its links are channels, one per pair of NPUs a route joins (`synth::fabric`), except
/// that large star groups are matched by port (`ports`): a gate per member, and no pool.
fn matcher_links(topo: &Topology, ports: Option<PortShape>) -> (u64, u64) {
    match ports {
        Some(p) => (p.channels + p.gates, p.channels),
        None if topo.has_switches() => {
            let alive = topo.alive_npus().len() as u64;
            let pairs = mul(alive, alive.saturating_sub(1));
            (pairs, pairs)
        }
        None => (topo.links().len() as u64, topo.links().len() as u64),
    }
}

/// Bytes of the matcher's state per (NPU, chunk) and per chunk for `chunks` chunks on
/// `topo`: whether each NPU holds each chunk (two bits, one in each of two layouts) and
/// wants it (a bit, rounded up with them to a byte), and where links differ in cost when
/// it was got (8) and the fast-path estimate (8); per chunk its task and release (48 +
/// 24). Through switches matched by port (`ports`), those two tables are kept only where
/// the channels with pools differ in cost, and each large group has a bit per NPU; where
/// every chunk travels as `one_copy` (planned paths), neither is (no relays, no copies
/// replaced).
fn matcher_state(topo: &Topology, chunks: u64, ports: Option<PortShape>, one_copy: bool) -> u64 {
    let states = mul(topo.npus() as u64, chunks);
    let uniform = one_copy || one_speed(topo) || ports.is_some_and(|p| p.uniform);
    let per_state = if uniform { 1 } else { 17 };
    let groups = ports.map_or(0, |p| {
        mul(p.groups, (topo.npus() as u64).div_ceil(8)).saturating_add(mul(p.gates, 64))
    });
    mul(states, per_state)
        .saturating_add(mul(chunks, 72))
        .saturating_add(groups)
}

/// Whether every transfer of one chunk size takes equally long on `topo`: no switches
/// (routes differ in length), every link of the same latency and bandwidth.
fn one_speed(topo: &Topology) -> bool {
    !topo.has_switches()
        && topo.links().windows(2).all(|w| {
            (w[0].latency_us, w[0].bandwidth_gbps) == (w[1].latency_us, w[1].bandwidth_gbps)
        })
}

/// Bytes the checker holds for a schedule of `transfers` transfers of `spec` on `topo`:
/// the contents (copying collectives: a bit per (NPU, chunk); combining ones, a chunk at a
/// time: a bit per contributor on each NPU, with the data of transfers in flight, at most
/// about one per link or NPU, and the transfers grouped by chunk, 4 bytes each), and what
/// every sweep holds (`sweep_state`).
pub fn check(spec: &CollectiveSpec, topo: &Topology, transfers: u64) -> u64 {
    let s = Shape::of(spec, topo.npus());
    let npus = topo.npus() as u64;
    let links = topo.links().len() as u64;
    let contents = if spec.kind.combining() {
        let row = 8 * spec.npus.len().div_ceil(64) as u64;
        let in_flight = mul(links.max(npus), row + 4 * ALLOCATION);
        mul(npus, row + 8)
            .saturating_add(in_flight)
            .saturating_add(mul(s.chunks, 16))
            .saturating_add(mul(transfers, 4))
    } else {
        mul(s.chunks, npus).div_ceil(8)
    };
    contents.saturating_add(sweep_state(topo, transfers))
}

/// Bytes the stream checker holds for a stream of `spec` on `topo`, nothing per transfer:
/// a bit per (NPU, chunk) (combining collectives, read as reduction trees: two, whether
/// the NPU sent its partial sum and whether it holds the whole sum, and per chunk a
/// 4-byte count of the reductions landed) and what every sweep holds (`sweep_state`).
pub fn check_streamed(spec: &CollectiveSpec, topo: &Topology) -> u64 {
    let s = Shape::of(spec, topo.npus());
    let states = mul(s.chunks, topo.npus() as u64);
    let contents = if spec.kind.combining() {
        mul(states, 2).div_ceil(8).saturating_add(mul(s.chunks, 4))
    } else {
        states.div_ceil(8)
    };
    contents.saturating_add(sweep_state(topo, 0))
}

/// Bytes every checker's sweep holds beside the contents: the last transfer on each link
/// and the transfers in flight, at most one per link (32 with a queue's growth slack),
/// where transfers differ in duration a 4-byte index per transfer for each of the start
/// and end orders, and through switches a route tree per NPU.
fn sweep_state(topo: &Topology, transfers: u64) -> u64 {
    let links = topo.links().len() as u64;
    let orders = if one_speed(topo) { 0 } else { 8 };
    mul(links, 24 + 32)
        .saturating_add(mul(transfers, orders))
        .saturating_add(route_trees(topo))
}

/// Bytes of a route tree per NPU sending through switches: what each holds for its
/// vertices (the first live NPU's stands for every NPU's), two allocations and its slot.
pub fn route_trees(topo: &Topology) -> u64 {
    match (0..topo.npus()).find(|&n| !topo.is_failed(n)) {
        Some(first) if topo.has_switches() => {
            let held = topo.route_tree(first).held_bytes() as u64;
            mul(topo.npus() as u64, held + 64 + 2 * ALLOCATION)
        }
        _ => 0,
    }
}

/// Bytes the streamed simulation (`sim::replay_stream`) holds for a stream of `spec` on
/// `topo`, nothing per transfer: a simulated time per (NPU, chunk), 4 bytes while times
/// fit (it asks again before widening them); per link its free time, last planned start,
/// busy time and bytes, and an arrival in flight (48 with a heap's slack); the route
/// trees as every sweep holds them (`sweep_state`).
pub fn replay(spec: &CollectiveSpec, topo: &Topology) -> u64 {
    let s = Shape::of(spec, topo.npus());
    mul(mul(s.chunks, topo.npus() as u64), 4)
        .saturating_add(mul(topo.links().len() as u64, 40 + 48))
        .saturating_add(sweep_state(topo, 0))
}

/// Bytes the simulator holds for `messages` messages on `topo`: per message its endpoints,
/// dependencies and timing, with queues and events, and per link its state. What grows
/// with the routes, known only as they are found, is taken from an [`Allowance`] then
/// ([`ROUTE_LINK`] per link of each route, and the trees routes are read from).
pub fn simulation(topo: &Topology, messages: u64) -> u64 {
    mul(messages, 120).saturating_add(mul(topo.links().len() as u64, 96))
}

/// Bytes the simulator holds per link of a message's route: its entry in the routes (4,
/// twice with a vector's growth slack), the message's place in the link's queue (16, twice
/// with the queue's slack) and in a schedule's planned order (5).
pub const ROUTE_LINK: u64 = 45;

/// A limit's room for state whose size is only known as it is built (the simulator's
/// routes): the estimate admitted before it starts, plus what is taken as it grows.
///
/// ```
/// use tacos::budget::{Allowance, MemoryLimit, Origin};
/// let mut room = Allowance::new(MemoryLimit::new(100, Origin::Caller), 60);
/// assert!(room.take(40, || "routing".into()).is_ok());
/// assert!(room.take(1, || "routing".into()).is_err());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Allowance {
    limit: MemoryLimit,
    used: u64,
}

impl Allowance {
    /// Room under `limit` beside the `admitted` bytes already estimated.
    pub fn new(limit: MemoryLimit, admitted: u64) -> Allowance {
        Allowance {
            limit,
            used: admitted,
        }
    }

    /// Takes `bytes` more; an error once everything taken passes the limit (`doing` says
    /// what needed it).
    pub fn take(&mut self, bytes: u64, doing: impl FnOnce() -> String) -> Result<()> {
        self.used = self.used.saturating_add(bytes);
        self.limit.admit(self.used, doing)
    }
}

/// Bytes one synthesis of `spec` holds at its peak from start to finish: the collective,
/// the synthesis (`planned` or not: `SynthOptions::planned`), then its schedule checked
/// and, where `simulated` (a search ranking several candidates), simulated.
pub fn synthesis_checked(
    topo: &Topology,
    spec: &CollectiveSpec,
    simulated: bool,
    planned: bool,
) -> u64 {
    let s = Shape::of(spec, topo.alive_npus().len());
    let transfers = if s.relayed {
        mul(s.deliveries, mean_hops(topo))
    } else {
        s.deliveries
    };
    let checked = check(spec, topo, transfers);
    let after = if simulated {
        checked.max(simulation(topo, transfers))
    } else {
        checked
    };
    collective(topo, spec)
        .saturating_add(synthesis(topo, std::slice::from_ref(spec), planned))
        .max(mul(transfers, 2 * TRANSFER).saturating_add(after))
}

/// Bytes a baseline's schedule of `spec` holds on `topo`, checked and simulated:
/// `factor` is how many chunks it splits each of the spec's into (2 for the two-way ring
/// and the double tree, P for recursive halving-doubling's Broadcast and Reduce).
pub fn baseline(topo: &Topology, spec: &CollectiveSpec, factor: u64) -> u64 {
    let spec = CollectiveSpec {
        chunks_per_npu: spec.chunks_per_npu.saturating_mul(factor as usize),
        ..spec.clone()
    };
    let transfers = Shape::of(&spec, spec.npus.len()).deliveries;
    // The plan's records (with growth slack) and the schedule made of them.
    mul(transfers, 3 * TRANSFER)
        .saturating_add(collective(topo, &spec))
        .saturating_add(check(&spec, topo, transfers))
}

/// The mean hop count of shortest paths, from a few NPUs spread over the topology: how
/// many transfers a relayed chunk takes.
fn mean_hops(topo: &Topology) -> u64 {
    let alive = topo.alive_npus();
    let samples = 4.min(alive.len());
    let mut total = 0u64;
    let mut pairs = 0u64;
    for i in 0..samples {
        let src = alive[i * alive.len() / samples];
        for d in hops_from(topo, src)
            .into_iter()
            .flatten()
            .filter(|&d| d > 0)
        {
            total += d;
            pairs += 1;
        }
    }
    total.div_ceil(pairs.max(1)).max(1)
}

/// Hops from `src` to every NPU (None where none leads).
fn hops_from(topo: &Topology, src: NpuId) -> Vec<Option<u64>> {
    let mut hops = vec![None; topo.vertices()];
    hops[src] = Some(0);
    let mut queue = VecDeque::from([src]);
    while let Some(u) = queue.pop_front() {
        let next = hops[u].map(|h| h + 1);
        for l in topo.out_links(u) {
            let v = topo.link(l).dst;
            if hops[v].is_none() {
                hops[v] = next;
                queue.push_back(v);
            }
        }
    }
    hops
}

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_refuses_only_above_it_and_says_how_to_raise_it() {
        let limit = MemoryLimit::new(1000, Origin::Machine);
        assert!(limit.admit(1000, || unreachable!()).is_ok());
        let e = limit.admit(1001, || "synthesizing".into()).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(
                e,
                Error::Limit {
                    value: 1001,
                    limit: 1000,
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("--max-memory"), "{text}");
        assert!(text.contains("TACOS_MAX_MEMORY"), "{text}");
    }

    /// On a rail-optimized cluster large rails are matched by port: nothing is held per
    /// pair of GPUs, so with K=1 the streamed estimate grows as GPUs x chunks (the pools
    /// of each node's NVSwitch channels, the per-(GPU, chunk) bits): about 4x for twice
    /// the nodes, where a channel per pair would grow it 8x.
    #[test]
    fn a_rail_cluster_matched_by_port_grows_as_gpus_times_chunks() {
        let estimate = |nodes: usize| {
            let spec_text = format!("preset:dgx-h100,nodes={nodes},spine=8,oversub=2");
            let topo =
                crate::topology::parse_spec(&spec_text, &crate::topology::SpecDefaults::default())
                    .unwrap();
            assert!(
                port_shape(&topo).is_some(),
                "{spec_text}: rails matched by port"
            );
            let spec = CollectiveSpec {
                kind: CollectiveKind::AllGather,
                root: None,
                npus: (0..topo.npus()).collect(),
                chunks_per_npu: 1,
                size_bytes: 1 << 30,
            };
            streamed_synthesis(&topo, &spec) as f64
        };
        let ratio = estimate(256) / estimate(128);
        assert!((3.5..4.5).contains(&ratio), "{ratio}");
    }

    /// K is read from a schedule file before the collective checks it: a K no machine
    /// could hold saturates the estimate (so the limit refuses it) instead of overflowing.
    #[test]
    fn a_k_from_a_file_too_large_for_any_machine_saturates() {
        let spec = CollectiveSpec {
            kind: CollectiveKind::AllReduce,
            root: None,
            npus: vec![0, 1],
            chunks_per_npu: usize::MAX,
            size_bytes: 1 << 20,
        };
        assert_eq!(Shape::of(&spec, 2).chunks, u64::MAX);
        assert_eq!(Shape::of(&spec, 2).deliveries, u64::MAX);
    }

    #[test]
    fn the_machine_limit_is_half_of_physical_memory() {
        let physical = physical_memory().expect("sysconf reports memory on this system");
        assert_eq!(MemoryLimit::machine().bytes(), physical / 2);
        assert!(PLUGIN_MAX_MEMORY < MemoryLimit::machine().bytes() || physical < 4 << 30);
    }

    /// The least room over the process's cgroup and its ancestors, v2 and v1 alike; "no
    /// limit" in either spelling is none.
    #[test]
    fn a_cgroups_room_is_the_least_its_limits_and_its_ancestors_leave() {
        let root = std::env::temp_dir().join(format!("tacos-cgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let write = |dir: &str, files: &[(&str, &str)]| {
            let dir = root.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in files {
                std::fs::write(dir.join(name), text).unwrap();
            }
        };
        write(
            "job",
            &[("memory.max", "1000\n"), ("memory.current", "400\n")],
        );
        write(
            "job/step",
            &[("memory.max", "max\n"), ("memory.current", "100\n")],
        );
        assert_eq!(cgroup_room_at("0::/job/step\n", &root), Some(600));
        write("job", &[("memory.max", "max\n")]);
        assert_eq!(cgroup_room_at("0::/job/step\n", &root), None);
        write(
            "memory/batch",
            &[
                ("memory.limit_in_bytes", "9223372036854771712"),
                ("memory.usage_in_bytes", "5"),
            ],
        );
        write(
            "memory/batch/task",
            &[
                ("memory.limit_in_bytes", "300"),
                ("memory.usage_in_bytes", "500"),
            ],
        );
        let v1 = "4:cpu,cpuacct:/batch/task\n3:memory:/batch/task\n";
        assert_eq!(cgroup_room_at(v1, &root), Some(0));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn limits_parse_as_sizes_and_name_a_bad_value() {
        let l = parse_limit("--max-memory", "2GiB", Origin::Flag).unwrap();
        assert_eq!(l.bytes(), 2 << 30);
        let e = parse_limit(MAX_MEMORY_ENV, "lots", Origin::Environment).unwrap_err();
        assert!(e.to_string().contains(MAX_MEMORY_ENV), "{e}");
    }

    #[test]
    fn hops_average_over_the_other_npus() {
        // A 4-NPU ring: from any NPU, hops 1, 2, 1 to the others: mean 4/3, rounded up.
        let ring = crate::topology::parse_spec("ring:4", &Default::default()).unwrap();
        assert_eq!(mean_hops(&ring), 2);
    }
}
