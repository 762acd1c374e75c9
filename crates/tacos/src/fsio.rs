//! Reading files whole within a size limit, reading JSON with errors that point at the
//! spot, writing files atomically, and advisory locks on files.
//!
//! ```
//! let path = std::env::temp_dir().join(format!("tacos-fsio-doc-{}", std::process::id()));
//! tacos::fsio::write_atomic(&path, b"whole or not at all").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"whole or not at all");
//! std::fs::remove_file(&path).unwrap();
//! ```

use crate::error::{Error, FileProblem, Result};
use serde::de::DeserializeOwned;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Numbers every temporary file this process makes, so no two calls share one.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Reads the text file at `path` (`what` it holds, for the error) whole, refusing one of
/// more than `max_bytes`: by its size before reading, and by what it yields for a stream
/// whose size is not known (a pipe), so a huge input costs no memory.
pub fn read_text(path: &Path, what: &str, max_bytes: u64) -> Result<String> {
    let too_big = |value: u64| Error::Limit {
        what: "bytes",
        value,
        limit: max_bytes,
        context: format!("{}: {what}", path.display()),
    };
    let file = open_input(path)?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_file() && meta.len() > max_bytes {
        return Err(too_big(meta.len()));
    }
    let mut text = String::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|e| Error::io(path, e))?;
    if text.len() as u64 > max_bytes {
        return Err(too_big(text.len() as u64));
    }
    Ok(text)
}

/// Whether [`read_text`] takes only regular files ([`read_regular_files_only`]).
static REGULAR_ONLY: AtomicBool = AtomicBool::new(false);

/// From now on [`read_text`] refuses, in this process, an input that is not a regular
/// file (a FIFO, a device, a socket), opened without blocking and checked before it is
/// read: what the plugins set, since a FIFO with no writer named by a setting would hold
/// up a communicator's init forever. The command line reads pipes as files.
pub fn read_regular_files_only() {
    REGULAR_ONLY.store(true, Ordering::Relaxed);
}

/// Opens `path` to read it: where only regular files are read, without blocking (a FIFO's
/// open waits for a writer) and refusing any other kind of file.
fn open_input(path: &Path) -> Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !REGULAR_ONLY.load(Ordering::Relaxed) {
        return File::open(path).map_err(|e| Error::io(path, e));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let kind = file.metadata().map_err(|e| Error::io(path, e))?.file_type();
    let what = if kind.is_file() {
        return Ok(file);
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a directory"
    };
    Err(Error::io(
        path,
        std::io::Error::other(format!(
            "is {what}, not a regular file; the plugins read only regular files (one that never ends or has no writer would hold up the job)"
        )),
    ))
}

/// Parses JSON text into `T`: one document, nothing but whitespace after it. The problem
/// names the line, the column and the field (`links[2].src`) where serde found it; the
/// caller says what the file was read as ([`FileProblem::of`]).
pub fn parse_json<T: DeserializeOwned>(
    text: &str,
    origin: &str,
) -> std::result::Result<T, FileProblem> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let problem = located(origin, e.inner());
        if path == "." {
            problem
        } else {
            problem.field(path)
        }
    })?;
    de.end().map_err(|e| located(origin, &e))?;
    Ok(value)
}

/// A serde_json error as a problem at its line and column.
fn located(origin: &str, e: &serde_json::Error) -> FileProblem {
    let message = e.to_string();
    // serde_json appends " at line L column C"; the problem's place says it already.
    let message = message
        .rfind(" at line ")
        .map_or(message.as_str(), |i| &message[..i]);
    FileProblem::new(origin, message).at(e.line(), e.column())
}

/// Writes `contents` to `path` through a temporary file in the same directory and a
/// rename, so readers never see a half-written file. The temporary file's name holds the
/// process id and a number unique in the process, so concurrent writers of one path (other
/// processes, other threads) never write into each other's: the last rename wins whole.
/// The path is written as its kind asks ([`AtomicFile`]): through a symbolic link, the
/// file it names; a device or FIFO, directly; a directory is an error.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, |out| out.write_all(contents))
}

/// As [`write_atomic`], with the contents written by `write` as they are made (buffered),
/// so a large file never has to be held whole in memory first.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut file = AtomicFile::create(path)?;
    write(file.writer()).map_err(|e| Error::io(path, e))?;
    file.commit()
}

/// Writes `contents` to `path` as [`write_atomic`] does, the file readable and writable by
/// its owner alone (mode 0600): what a cache others must not change keeps.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    let mut file = AtomicFile::create_with_mode(path, 0o600)?;
    file.writer()
        .write_all(contents)
        .map_err(|e| Error::io(path, e))?;
    file.commit()
}

/// Creates directory `dir` and those above it that are missing, each readable, writable
/// and searchable by its owner alone (mode 0700).
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(dir, e))
}

/// A file written under a temporary name and put in place by [`AtomicFile::commit`];
/// dropped uncommitted, the temporary file is removed. For a writer that must let the
/// file be read while it is written (`temp_path`), or decide after writing whether it is
/// kept.
///
/// What is written in place is what the path names: through symbolic links, the file
/// they lead to (written beside it and renamed onto it, so the links stay); a file or a
/// new name, renamed into place; a character or block device, a FIFO or a socket, copied
/// into at commit (the temporary file kept in the system's temporary directory): `--xml
/// /dev/null` run as root writes to the device, never replaces it. A directory is an
/// error before anything is written.
pub struct AtomicFile {
    /// The path as given, for errors.
    path: PathBuf,
    /// Where the contents land: `path` with its symbolic links followed.
    target: PathBuf,
    temp: PathBuf,
    out: BufWriter<File>,
    /// Whether the target is written into at commit (a device, a FIFO) rather than
    /// replaced.
    into: bool,
    /// Whether the temporary file is gone (renamed into place, or removed after copying).
    done: bool,
}

/// Most symbolic links followed to find what a path names, as the kernel's limit.
const MAX_SYMLINKS: usize = 40;

/// What writing `path` lands on: `path` with its symbolic links followed (a relative one
/// from the folder it is in), and whether that is something other than a file or a new
/// name (a device, a FIFO, a socket), written into rather than replaced. An error for a
/// directory, or a loop of links.
fn write_target(path: &Path) -> Result<(PathBuf, bool)> {
    use std::os::unix::fs::FileTypeExt;
    let mut at = path.to_path_buf();
    for _ in 0..MAX_SYMLINKS {
        let kind = match std::fs::symlink_metadata(&at) {
            Ok(meta) => meta.file_type(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((at, false)),
            Err(e) => return Err(Error::io(path, e)),
        };
        if kind.is_symlink() {
            let link = std::fs::read_link(&at).map_err(|e| Error::io(path, e))?;
            at = match at.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
            continue;
        }
        if kind.is_dir() {
            return Err(Error::io(
                path,
                std::io::Error::other("is a directory; name a file to write"),
            ));
        }
        let special = kind.is_char_device() || kind.is_block_device() || kind.is_fifo();
        return Ok((at, special || kind.is_socket()));
    }
    Err(Error::io(
        path,
        std::io::Error::other(format!("more than {MAX_SYMLINKS} symbolic links in a row")),
    ))
}

impl AtomicFile {
    /// Creates the temporary file for `path`.
    pub fn create(path: &Path) -> Result<AtomicFile> {
        AtomicFile::create_with_mode(path, 0o666)
    }

    /// Creates the temporary file for `path` with permissions `mode` (less the umask).
    pub fn create_with_mode(path: &Path, mode: u32) -> Result<AtomicFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let (target, into) = write_target(path)?;
        let beside = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = if into { std::env::temp_dir() } else { beside };
        let name = target
            .file_name()
            .ok_or_else(|| Error::io(path, std::io::Error::other("not a file path")))?;
        let temp = dir.join(format!(
            ".{}.tmp{}-{}",
            name.to_string_lossy(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)
            .map_err(|e| Error::io(path, e))?;
        let out = BufWriter::new(file);
        Ok(AtomicFile {
            path: path.to_path_buf(),
            target,
            temp,
            out,
            into,
            done: false,
        })
    }

    /// Where the contents are written until `commit`.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    pub fn writer(&mut self) -> &mut BufWriter<File> {
        &mut self.out
    }

    /// Writes out what is buffered and puts the contents in place: synced and renamed
    /// onto the target, or copied into a device or FIFO.
    pub fn commit(mut self) -> Result<()> {
        let result = (|| {
            self.out.flush()?;
            if self.into {
                let mut from = File::open(&self.temp)?;
                let mut to = std::fs::OpenOptions::new().write(true).open(&self.target)?;
                std::io::copy(&mut from, &mut to)?;
                to.flush()
            } else {
                self.out.get_ref().sync_all()?;
                std::fs::rename(&self.temp, &self.target)?;
                self.done = true;
                Ok(())
            }
        })();
        result.map_err(|e| Error::io(&self.path, e))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// A file another thread is writing, read as it grows: at its current end a read waits
/// for more (taking on the pool's pending work meanwhile) until the writer says it is done
/// (`written`), then ends where the file does.
pub struct Following<'a> {
    file: File,
    written: &'a AtomicBool,
}

impl<'a> Following<'a> {
    pub fn open(path: &Path, written: &'a AtomicBool) -> Result<Following<'a>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(Following { file, written })
    }
}

impl Read for Following<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            // Read before this read: if the writer had finished, the file's end is final.
            let finished = self.written.load(Ordering::Acquire);
            let n = self.file.read(buf)?;
            if n > 0 || buf.is_empty() || finished {
                return Ok(n);
            }
            // On a worker of a pool whose other worker writes the file, the writer's work
            // handed to the pool (a matching round's half) is taken on while waiting.
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}

/// Sets its flag when dropped, however the scope that holds it ends.
pub struct SetOnDrop<'a>(pub &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// An exclusive advisory lock (`flock`) on an open file, released explicitly when dropped:
/// a child forked meanwhile (by the host, or by another thread) shares the open file and
/// would otherwise keep the lock until it execs or exits, even from this process.
pub struct FileLock(File);

/// What an attempt to lock without waiting found.
pub enum Locking {
    Held(FileLock),
    ByOther,
    /// The filesystem keeps no locks.
    Unsupported,
}

impl FileLock {
    /// Locks `file` if nobody else holds it, without waiting.
    pub fn try_lock(file: File) -> Locking {
        FileLock::wait_for(file, Duration::ZERO)
    }

    /// Waits for the lock on `file`; None where the filesystem keeps no locks.
    pub fn wait(file: File) -> Option<FileLock> {
        loop {
            match flock(&file, libc::LOCK_EX) {
                Ok(()) => return Some(FileLock(file)),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
        }
    }

    /// Waits for the lock on `file` for at most `wait`, trying again at growing intervals
    /// (1 ms up to 50 ms); `ByOther` where another still holds it then.
    pub fn wait_for(file: File, wait: Duration) -> Locking {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => return Locking::Held(FileLock(file)),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Locking::Unsupported,
            }
            let now = Instant::now();
            if now >= deadline {
                return Locking::ByOther;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = flock(&self.0, libc::LOCK_UN);
    }
}

fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; it does not touch memory.
    match unsafe { libc::flock(file.as_raw_fd(), operation) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}
