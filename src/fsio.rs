//! Reading files whole within a size limit, reading JSON with errors that point at the
//! spot, and writing files atomically.

use crate::error::{Error, Result};
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
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

/// Parses JSON text into `T`: one document, nothing but whitespace after it. The error
/// reads `origin:line:column: field.path: what`.
pub fn parse_json<T: DeserializeOwned>(text: &str, origin: &str) -> std::result::Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        located(origin, &field, e.inner())
    })?;
    de.end().map_err(|e| located(origin, "", &e))?;
    Ok(value)
}

/// A serde_json error as `origin:line:column: field what`.
fn located(origin: &str, field: &str, e: &serde_json::Error) -> String {
    let message = e.to_string();
    // serde_json appends " at line L column C"; the prefix says it already.
    let message = message
        .rfind(" at line ")
        .map_or(message.as_str(), |i| &message[..i]);
    format!("{origin}:{}:{}: {field}{message}", e.line(), e.column())
}

/// Writes `contents` to `path` through a temporary file in the same directory and a
/// rename, so readers never see a half-written file. The temporary file's name holds the
/// process id and a number unique in the process, so concurrent writers of one path (other
/// processes, other threads) never write into each other's: the last rename wins whole.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, |out| out.write_all(contents))
}

/// As [`write_atomic`], with the contents written by `write` as they are made (buffered),
/// so a large file never has to be held whole in memory first.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::io(path, std::io::Error::other("not a file path")))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}
