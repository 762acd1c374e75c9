//! The memory limit estimates are held to before allocating, and their arithmetic.
//!
//! Synthesis, baselines, the schedule checker and the simulator each keep state that grows
//! with chunks x NPUs or with transfers; a request large enough (All-to-All on a 32x32
//! mesh, a ring All-Reduce on 4,096 NPUs) would ask the allocator for more than the
//! machine has and abort the process, which no caller can catch. So each of them first
//! estimates, from the request's figures alone, the bytes it would hold at its peak, and
//! refuses with [`Error::Limit`] above a [`MemoryLimit`]. Each module estimates its own
//! tables beside them (`topology::limits::building_bytes`, `collective::memory`,
//! `schedule::memory`, `sim::memory`, `synth::memory`, `Baseline::memory_estimate`,
//! `pipeline::memory`); this module knows none of them.
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

use crate::error::{Error, Result};
use crate::units::parse_size;
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

/// What the allocator adds to each allocation, roughly.
pub const ALLOCATION: u64 = 16;

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

/// `a * b`, saturating: an estimate past `u64` is past any limit.
pub fn mul(a: u64, b: u64) -> u64 {
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
    /// K is read from a schedule file before the collective checks it: a K no machine
    /// could hold saturates the estimate (so the limit refuses it) instead of overflowing.
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
}
