//! The hidden directories beside a compiled directory `DIR` while it is written or
//! replaced, and what happens to those a killed writer leaves.
//!
//! A writer builds the new set in `.DIR.tmp-PID-N` and holds an advisory lock (`flock`) on
//! it until it is done; a set moved out of the way is `.DIR.old-PID-N` (PID: the writer's
//! process id, N: a number unique in that process). A later writer or cache open
//! ([`tidy`]) takes one of them for abandoned only when nobody holds its lock (a live
//! writer, even in another PID namespace or on another host of a shared filesystem,
//! holds it) and either no process PID runs here or it is over a day old (a PID reused by
//! another program, or one from another machine's namespace, keeps it that long). Where
//! `DIR` itself is missing (a writer killed between the two renames of the fallback
//! replacement), the newest abandoned complete set is renamed back into place first.

use crate::error::{Error, Result};
use crate::fsio::{FileLock, Locking};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// How old an unlocked leftover must be before it is removed although a process with its
/// PID runs.
const ABANDONED_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The two kinds of hidden directory: a set being written, a set moved aside.
const KINDS: [&str; 2] = ["tmp", "old"];

/// A hidden directory beside the target, removed when dropped unless renamed away.
pub(super) struct Staged {
    pub(super) path: PathBuf,
    /// The lock that says a live writer owns the directory (None where it was only
    /// reserved, or the filesystem has no locks); released after `drop` has removed the
    /// directory, as fields drop after it.
    lock: Option<FileLock>,
}

impl Staged {
    /// A fresh name `.NAME.KIND-PID-N` beside the target, unique in this process.
    pub(super) fn reserve(parent: &Path, name: &str, kind: &str) -> Staged {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Staged {
            path: parent.join(format!(".{name}.{kind}-{}-{n}", std::process::id())),
            lock: None,
        }
    }

    /// Creates the directory and locks it for as long as this value lives.
    pub(super) fn create(parent: &Path, name: &str, kind: &str) -> Result<Staged> {
        let mut staged = Staged::reserve(parent, name, kind);
        std::fs::create_dir(&staged.path).map_err(|e| Error::io(&staged.path, e))?;
        staged.lock = match File::open(&staged.path).map(FileLock::try_lock) {
            Ok(Locking::Held(lock)) => Some(lock),
            _ => None,
        };
        Ok(staged)
    }

    /// Writes `file`, a path relative to the staged directory, and flushes it.
    pub(super) fn write(&self, file: &Path, bytes: &[u8]) -> Result<()> {
        let path = self.path.join(file);
        let result = File::create(&path).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
        result.map_err(|e| Error::io(&path, e))
    }
}

impl Drop for Staged {
    /// Removes the directory; the lock is released after this, when the field drops.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `.NAME.KIND-PID-N` taken apart: (NAME, KIND, PID).
fn parse_hidden(file_name: &str) -> Option<(&str, &str, u32)> {
    let rest = file_name.strip_prefix('.')?;
    let (rest, n) = rest.rsplit_once('-')?;
    let (rest, pid) = rest.rsplit_once('-')?;
    let (name, kind) = rest.rsplit_once('.')?;
    let numbers = n.parse::<u64>().is_ok() && pid.bytes().all(|b| b.is_ascii_digit());
    (numbers && KINDS.contains(&kind) && !name.is_empty()).then_some((
        name,
        kind,
        pid.parse().ok()?,
    ))
}

/// Whether a process `pid` runs here (one we may not signal runs too).
fn running(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// An abandoned hidden directory, locked by this process while it is removed or restored.
struct Abandoned {
    path: PathBuf,
    kind: String,
    modified: SystemTime,
    _lock: Option<FileLock>,
}

/// The abandoned hidden directories in `parent`: of the directory named `only`, or of
/// every directory.
fn abandoned(parent: &Path, only: Option<&str>) -> Vec<Abandoned> {
    let Ok(listing) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for item in listing.flatten() {
        let file_name = item.file_name().to_string_lossy().into_owned();
        let Some((name, kind, pid)) = parse_hidden(&file_name) else {
            continue;
        };
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let path = item.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let old = SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|age| age > ABANDONED_AFTER);
        if !old && running(pid) {
            continue;
        }
        let lock = match File::open(&path).map(FileLock::try_lock) {
            Ok(Locking::ByOther) => continue,
            Ok(Locking::Held(lock)) => Some(lock),
            _ => None,
        };
        found.push(Abandoned {
            path,
            kind: kind.to_string(),
            modified,
            _lock: lock,
        });
    }
    found
}

/// Removes the hidden directories dead writers left in `parent` (of `only`, or of every
/// directory); returns how many.
pub(crate) fn remove_abandoned(parent: &Path, only: Option<&str>) -> usize {
    abandoned(parent, only)
        .into_iter()
        .filter(|a| std::fs::remove_dir_all(&a.path).is_ok())
        .count()
}

/// Puts `dir` back where a writer was killed between moving the old set aside and
/// renaming the new one in, then removes what dead writers left beside it: where `dir` is
/// missing, the newest abandoned complete set (`has_set` says which are) takes its place,
/// a new one before an old one. Returns whether `dir` was restored.
pub(super) fn tidy(dir: &Path, has_set: impl Fn(&Path) -> bool) -> bool {
    let Ok((parent, name)) = super::parent_and_name(dir) else {
        return false;
    };
    let mut restored = false;
    if std::fs::symlink_metadata(dir).is_err() {
        let mut candidates: Vec<Abandoned> = abandoned(&parent, Some(&name))
            .into_iter()
            .filter(|a| has_set(&a.path))
            .collect();
        candidates.sort_by_key(|a| (a.kind == "tmp", a.modified));
        if let Some(best) = candidates.pop() {
            restored = std::fs::rename(&best.path, dir).is_ok();
        }
    }
    remove_abandoned(&parent, Some(&name));
    restored
}

/// Swaps two directories in one step (`renameat2` with `RENAME_EXCHANGE`), so neither
/// name is ever missing. `Unsupported` where the system or filesystem cannot.
pub(crate) fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        };
        let (a, b) = (c(a)?, c(b)?);
        // SAFETY: the raw renameat2 system call (glibc gained a wrapper only in 2.28) on two
        // NUL-terminated paths that outlive the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                Err(std::io::ErrorKind::Unsupported.into())
            }
            _ => Err(e),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (a, b);
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_names_come_apart_from_the_right() {
        assert_eq!(
            parse_hidden(".tacos-0.1-x.tmp-123-4"),
            Some(("tacos-0.1-x", "tmp", 123))
        );
        assert_eq!(parse_hidden(".out.old-9-0"), Some(("out", "old", 9)));
        for not_ours in [
            "out",
            ".out.tmp",
            ".out.tmp-1",
            ".out.new-1-2",
            ".out.tmp-x-2",
            ".out.tmp-+1-2",
            "..tmp-1-2",
            ".out.tmp1-2",
        ] {
            assert_eq!(parse_hidden(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn this_process_runs_and_pid_zero_never_counts() {
        assert!(running(std::process::id()));
        assert!(!running(0));
        assert!(!running(u32::MAX));
    }

    #[test]
    fn a_child_forked_while_a_leftover_is_locked_does_not_keep_it_from_this_process() {
        // A PID no process can have (above the kernel's limit of 2^22).
        let dead = (1u32 << 22) + 1;
        let parent = std::env::temp_dir().join(format!("tacos-staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        let leftover = parent.join(format!(".out.old-{dead}-0"));
        std::fs::create_dir_all(&leftover).unwrap();
        let found = abandoned(&parent, Some("out"));
        assert_eq!(found.len(), 1);
        // SAFETY: the child only sleeps and exits, both async-signal-safe.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: in the forked child only async-signal-safe calls run: sleep, then _exit,
            // which skips the parent's atexit handlers and buffered output.
            unsafe {
                libc::sleep(5);
                libc::_exit(0)
            };
        }
        assert!(child > 0);
        drop(found);
        // The child still holds the open directory; the lock must be gone all the same.
        assert_eq!(remove_abandoned(&parent, Some("out")), 1);
        // SAFETY: `child` is our own child's pid (checked positive above), not yet reaped, so
        // the signal reaches no other process; waitpid takes a null status pointer.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
