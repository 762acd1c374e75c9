//! A spool: transfers kept on disk in start order and read back either way, for a
//! streamed synthesis whose output is not in the order its matching makes it. A combining
//! collective's reductions are the time reversal of a copying matching, so its last
//! transfer is the first reduction: the matching is spooled whole, then read from the last
//! transfer to the first.
//!
//! Records are a stream's (`schedule::stream`), in blocks of about a megabyte that each
//! start from an empty context, so a block decodes on its own; the blocks' places are held
//! in memory (24 bytes a megabyte). The file is a temporary one beside the output
//! (`fsio::AtomicFile`, never committed: removed when the spool or its reader is
//! dropped), and reading backwards gives each block's disk space back as it is read.

use super::stream::Context;
use super::Transfer;
use crate::error::{Error, Result};
use crate::fsio::AtomicFile;
use crate::units::Picos;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Encoded bytes after which a block ends.
const BLOCK_BYTES: usize = 1 << 20;

/// Transfers written in start order, to be read back (`forwards` or `backwards`).
pub(crate) struct Spool {
    file: AtomicFile,
    buf: Vec<u8>,
    context: Context,
    /// (offset, length) of every block written.
    blocks: Vec<(u64, usize)>,
    written: u64,
    transfers: u64,
    end_ps: Picos,
    longest_ps: Picos,
}

impl Spool {
    /// A spool in a temporary file beside `beside` (a path the caller writes, or will).
    pub fn create(beside: &Path) -> Result<Spool> {
        Ok(Spool {
            file: AtomicFile::create(beside)?,
            buf: Vec::with_capacity(BLOCK_BYTES + 64),
            context: Context::default(),
            blocks: Vec::new(),
            written: 0,
            transfers: 0,
            end_ps: 0,
            longest_ps: 0,
        })
    }

    /// Adds `t`, which must start no earlier than the transfer before it.
    pub fn push(&mut self, t: &Transfer) -> Result<()> {
        if !self.context.encode(&mut self.buf, t) {
            return Err(Error::Synthesis(format!(
                "{}: transfer {} (chunk {}) starts at {} ps, before the one before it: a spool takes transfers in start order",
                self.origin().display(),
                self.transfers,
                t.chunk(),
                t.start_ps
            )));
        }
        self.transfers += 1;
        self.end_ps = self.end_ps.max(t.end_ps);
        self.longest_ps = self.longest_ps.max(t.end_ps.saturating_sub(t.start_ps));
        if self.buf.len() >= BLOCK_BYTES {
            self.flush_block()?;
        }
        Ok(())
    }

    pub fn transfers(&self) -> u64 {
        self.transfers
    }

    /// When the latest transfer ends (0 for none).
    pub fn end_ps(&self) -> Picos {
        self.end_ps
    }

    /// The longest transfer's duration.
    pub fn longest_ps(&self) -> Picos {
        self.longest_ps
    }

    /// The transfers from the first to the last.
    pub fn forwards(&mut self) -> Result<SpoolReader<'_>> {
        SpoolReader::new(self, false, false)
    }

    /// The transfers from the last to the first; with `give_back`, each block's disk space
    /// is given back as it is read (and the spool cannot be read again).
    pub fn backwards(&mut self, give_back: bool) -> Result<SpoolReader<'_>> {
        SpoolReader::new(self, true, give_back)
    }

    fn origin(&self) -> PathBuf {
        self.file.temp_path().to_path_buf()
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let origin = self.origin();
        self.file
            .writer()
            .write_all(&self.buf)
            .map_err(|e| Error::io(&origin, e))?;
        self.blocks.push((self.written, self.buf.len()));
        self.written += self.buf.len() as u64;
        self.buf.clear();
        self.context = Context::default();
        Ok(())
    }
}

/// A spool read back, a block at a time.
pub(crate) struct SpoolReader<'a> {
    spool: &'a mut Spool,
    input: File,
    backwards: bool,
    give_back: bool,
    /// Blocks not read yet: `spool.blocks[next..]` forwards, `[..next]` backwards.
    next: usize,
    /// The block being read, in the order it is handed out, reversed (so `pop` hands out
    /// the next).
    block: Vec<Transfer>,
    bytes: Vec<u8>,
}

impl<'a> SpoolReader<'a> {
    fn new(spool: &'a mut Spool, backwards: bool, give_back: bool) -> Result<SpoolReader<'a>> {
        spool.flush_block()?;
        let origin = spool.origin();
        spool
            .file
            .writer()
            .flush()
            .map_err(|e| Error::io(&origin, e))?;
        let input = File::open(&origin).map_err(|e| Error::io(&origin, e))?;
        let next = if backwards { spool.blocks.len() } else { 0 };
        Ok(SpoolReader {
            spool,
            input,
            backwards,
            give_back,
            next,
            block: Vec::new(),
            bytes: Vec::new(),
        })
    }

    /// Reads and decodes the next block; false when none is left.
    fn load(&mut self) -> Result<bool> {
        let index = if self.backwards {
            let Some(i) = self.next.checked_sub(1) else {
                return Ok(false);
            };
            self.next = i;
            i
        } else {
            if self.next == self.spool.blocks.len() {
                return Ok(false);
            }
            self.next += 1;
            self.next - 1
        };
        let (offset, len) = self.spool.blocks[index];
        let origin = self.spool.origin();
        self.bytes.resize(len, 0);
        self.input
            .read_exact_at(&mut self.bytes, offset)
            .map_err(|e| Error::io(&origin, e))?;
        let mut context = Context::default();
        let mut at = 0;
        self.block.clear();
        while at < len {
            let t = context.decode_next(&self.bytes, &mut at).ok_or_else(|| {
                Error::Synthesis(format!(
                    "{}: block {index} does not decode (the spool was changed while it was read)",
                    origin.display()
                ))
            })?;
            self.block.push(t);
        }
        if self.give_back {
            // Read backwards, the file's tail is done with.
            self.spool
                .file
                .writer()
                .get_ref()
                .set_len(offset)
                .map_err(|e| Error::io(&origin, e))?;
        }
        if !self.backwards {
            self.block.reverse();
        }
        Ok(true)
    }
}

impl Iterator for SpoolReader<'_> {
    type Item = Result<Transfer>;

    fn next(&mut self) -> Option<Result<Transfer>> {
        loop {
            if let Some(t) = self.block.pop() {
                return Some(Ok(t));
            }
            match self.load() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.next = if self.backwards {
                        0
                    } else {
                        self.spool.blocks.len()
                    };
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Op;

    /// Transfers in start order with varied fields (several per start, durations,
    /// sources and offsets changing), enough to fill several blocks.
    fn transfers(n: usize) -> Vec<Transfer> {
        (0..n)
            .map(|i| {
                Transfer::new(
                    (i * 7919) % 100_003,
                    (i * 31) % 977,
                    (i * 17) % 1013,
                    (i / 3) as Picos * 1_000,
                    (i / 3) as Picos * 1_000 + 500 + (i % 5) as Picos,
                    if i % 4 == 0 { Op::Reduce } else { Op::Copy },
                )
            })
            .collect()
    }

    fn spooled(dir: &Path, list: &[Transfer]) -> Spool {
        let mut spool = Spool::create(&dir.join("out.tts")).unwrap();
        for t in list {
            spool.push(t).unwrap();
        }
        spool
    }

    #[test]
    fn reads_back_in_either_order_and_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("tacos-spool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // About 3 MB of records: several blocks, the last one partial.
        let list = transfers(400_000);
        let spool = spooled(&dir, &list);
        assert_eq!(spool.transfers(), list.len() as u64);
        assert_eq!(spool.end_ps(), list.iter().map(|t| t.end_ps).max().unwrap());
        assert_eq!(spool.longest_ps(), 504);
        assert!(spool.blocks.len() >= 2, "{} blocks", spool.blocks.len());
        let mut spool = spool;
        let read =
            |reader: SpoolReader<'_>| -> Vec<Transfer> { reader.map(Result::unwrap).collect() };
        let mut backwards = read(spool.backwards(false).unwrap());
        backwards.reverse();
        assert!(backwards == list);
        // Kept, it reads again, either way.
        assert!(read(spool.forwards().unwrap()) == list);
        let file = spool.file.temp_path().to_path_buf();
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size > 1 << 20, "{size} bytes");
        let mut backwards = read(spool.backwards(true).unwrap());
        backwards.reverse();
        assert!(backwards == list);
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            0,
            "the space is given back"
        );
        drop(spool);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "the spools' files are removed: {left:?}");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn refuses_a_transfer_out_of_start_order() {
        let dir = std::env::temp_dir();
        let list = transfers(10);
        let mut spool = Spool::create(&dir.join("unordered.tts")).unwrap();
        spool.push(&list[5]).unwrap();
        let e = spool.push(&list[0]).unwrap_err().to_string();
        assert!(e.contains("start order"), "{e}");
        assert_eq!(spool.transfers(), 1);
    }
}
