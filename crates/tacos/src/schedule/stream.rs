//! A schedule's transfers as a compact binary stream, written as they are made and read
//! one at a time, for schedules too large to hold as records (a 200x200 mesh All-Gather
//! has 1.6e9 transfers: 51 GB of `Transfer` records, about 150 GB of JSON, some 6 GB as a
//! stream). `check::check_stream` checks one in a single pass; `Schedule::read` reads one
//! whole where it fits the memory limit.
//!
//! # Format `tacos-transfers/1`
//!
//! ```text
//! tacos-transfers/1 LF            the magic line
//! {...} LF                        the StreamHeader as one line of JSON (at most 1 GiB)
//! record ...                      one per transfer, in nondecreasing start order
//! 0xF0                            the end marker
//! varint                          the number of transfers
//! varint                          the collective time: the latest end, in ps
//! 8 bytes                         the checksum (little-endian) of every byte before the marker
//! (end of file)
//! ```
//!
//! A varint is unsigned LEB128: 7 bits a byte, low bits first, the high bit set on every
//! byte but the last, at most 10 bytes. A signed value is stored zigzagged, `(n << 1) ^
//! (n >> 63)`, so small magnitudes of either sign take one byte. Differences are taken
//! modulo 2^64, so every record round-trips, even one a checker would refuse (an end
//! before its start).
//!
//! A record is a flag byte, then the fields its flags call for, in this order:
//!
//! | flag bits | meaning | field that follows |
//! |---|---|---|
//! | 0 (`0x01`) | the op is `reduce` (else `copy`) | none |
//! | 1 (`0x02`) | the start differs from the previous transfer's | varint: start - previous start |
//! | 2 (`0x04`) | the duration (end - start) differs | zigzag varint: duration - previous duration |
//! | 3 (`0x08`) | the source NPU differs | zigzag varint: src - previous src |
//! | 4-7 | slot s: 0-13, dst - src is the offset in slot s; 14, a new offset | s = 14: zigzag varint: dst - src |
//! | | | always: varint: the chunk |
//!
//! A new offset is stored in the slots round-robin (slot 0, 1, ..., 13, 0, ...), and a
//! writer uses the lowest slot holding the offset it needs, so a file is determined by its
//! transfers. Before the first record the start, duration, source and every slot are 0.
//! Slot 15 appears only in the end marker (`0xF0` exactly) and in `0xF1`, a byte put
//! before a record whose transfer is in-switch (`Transfer::in_switch`).
//!
//! Why this shape: in a synthesized schedule most transfers start with the one before
//! (starts change once a step), take as long (links of one speed), come from the same
//! sender or the next, and go over one of a few link directions (a 2D mesh has four:
//! +-1 and +-width), so a record is mostly the flag byte and the chunk: 3.2 bytes a
//! transfer on 32x32 and 64x64 mesh All-Gathers (`examples/stream_check.rs`; chunks past
//! 2^14 take a byte more), against 32 bytes held as a `Transfer` and about 93 as JSON.
//!
//! The checksum reads the bytes as 64-bit little-endian words (the last zero-padded),
//! `h = (rotl(h, 5) ^ word) * 0x517cc1b727220a95` from `h = 0`, then once more with the
//! byte count as the word; it changes whenever any one word does. With the count it makes
//! a truncated or damaged file an error naming the file and the transfer, never a wrong
//! schedule read as right.

use super::{Op, Schedule, Transfer, SCHEDULE_FORMAT};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveSpec;
use crate::error::{Error, FileFormat, FileProblem, Result};
use crate::fsio::parse_json;
use crate::schedule::Network;
use crate::units::Picos;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::Path;

pub const STREAM_FORMAT: &str = "tacos-transfers/1";

/// Everything of a schedule but its transfers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamHeader {
    pub format: String,
    /// The topology it was made for (its spec or name).
    pub topology: String,
    pub collective: CollectiveSpec,
    pub chunk_bytes: f64,
    /// The network itself, where the writer recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

impl StreamHeader {
    pub fn new(
        topology: impl Into<String>,
        collective: CollectiveSpec,
        chunk_bytes: f64,
        network: Option<Network>,
    ) -> StreamHeader {
        StreamHeader {
            format: STREAM_FORMAT.to_string(),
            topology: topology.into(),
            collective,
            chunk_bytes,
            network,
        }
    }
}

/// What a finished stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    pub transfers: u64,
    /// The latest end (0 for no transfers), as `Schedule::collective_time_ps` counts it.
    pub collective_time_ps: Picos,
}

const OP_REDUCE: u8 = 0x01;
const START_CHANGED: u8 = 0x02;
const DURATION_CHANGED: u8 = 0x04;
const SRC_CHANGED: u8 = 0x08;
/// Slots of recent dst - src offsets.
const SLOTS: usize = 14;
/// The slot number saying a new offset follows.
const NEW_OFFSET: u8 = 14;
const END_MARKER: u8 = 0xF0;
/// Put before the flag byte of an in-switch transfer's record.
const IN_SWITCH: u8 = 0xF1;
/// The longest record: the in-switch byte, the flag byte and five 10-byte varints
/// (longer than the trailer: the marker, two varints and the checksum).
const MAX_RECORD: usize = 52;
/// The longest header line read, its line break included.
const MAX_HEADER_BYTES: u64 = 1 << 30;
/// Bytes written or read at a time.
const BLOCK: usize = 1 << 16;

/// What encoder and decoder both remember of the transfers so far.
#[derive(Default)]
pub(super) struct Context {
    start: Picos,
    duration: Picos,
    src: u64,
    offsets: [u64; SLOTS],
    next_slot: usize,
}

impl Context {
    fn remember_offset(&mut self, offset: u64) {
        self.offsets[self.next_slot] = offset;
        self.next_slot = (self.next_slot + 1) % SLOTS;
    }

    /// Appends `t`'s record to `buf` and remembers it; false (nothing appended) when `t`
    /// starts before the transfer before it.
    pub(super) fn encode(&mut self, buf: &mut Vec<u8>, t: &Transfer) -> bool {
        let Some(start_delta) = t.start_ps.checked_sub(self.start) else {
            return false;
        };
        let duration = t.end_ps.wrapping_sub(t.start_ps);
        let src = u64::from(t.src);
        let offset = u64::from(t.dst).wrapping_sub(src);
        let slot = self.offsets.iter().position(|&o| o == offset);
        let mut flag = match slot {
            Some(s) => (s as u8) << 4,
            None => NEW_OFFSET << 4,
        };
        if t.in_switch {
            buf.push(IN_SWITCH);
        }
        if t.op == Op::Reduce {
            flag |= OP_REDUCE;
        }
        if start_delta != 0 {
            flag |= START_CHANGED;
        }
        if duration != self.duration {
            flag |= DURATION_CHANGED;
        }
        if src != self.src {
            flag |= SRC_CHANGED;
        }
        buf.push(flag);
        if start_delta != 0 {
            put_varint(buf, start_delta);
        }
        if duration != self.duration {
            put_varint(buf, zigzag(duration.wrapping_sub(self.duration)));
        }
        if src != self.src {
            put_varint(buf, zigzag(src.wrapping_sub(self.src)));
        }
        if slot.is_none() {
            put_varint(buf, zigzag(offset));
            self.remember_offset(offset);
        }
        put_varint(buf, u64::from(t.chunk));
        (self.start, self.duration, self.src) = (t.start_ps, duration, src);
        true
    }

    /// Decodes the record starting at `bytes[*at]` (its flag byte), or None at the end of
    /// `bytes` or where it is damaged or cut short (bytes this process wrote itself).
    pub(super) fn decode_next(&mut self, bytes: &[u8], at: &mut usize) -> Option<Transfer> {
        let &flag = bytes.get(*at)?;
        *at += 1;
        decode(bytes, at, flag, self).ok()
    }
}

/// Writes transfers as a `tacos-transfers/1` stream.
pub struct StreamWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    sum: Checksum,
    context: Context,
    summary: StreamSummary,
}

impl<W: Write> StreamWriter<W> {
    /// Writes the magic line and `header`.
    pub fn new(out: W, header: &StreamHeader) -> std::io::Result<StreamWriter<W>> {
        let mut buf = Vec::with_capacity(BLOCK + MAX_RECORD);
        buf.extend_from_slice(STREAM_FORMAT.as_bytes());
        buf.push(b'\n');
        serde_json::to_writer(&mut buf, header)?;
        buf.push(b'\n');
        let mut writer = StreamWriter {
            out,
            buf,
            sum: Checksum::default(),
            context: Context::default(),
            summary: StreamSummary {
                transfers: 0,
                collective_time_ps: 0,
            },
        };
        writer.flush_block()?;
        Ok(writer)
    }

    /// Transfers must come in nondecreasing start order (an io error of kind InvalidInput
    /// otherwise, naming the transfer).
    pub fn push(&mut self, t: &Transfer) -> std::io::Result<()> {
        if !self.context.encode(&mut self.buf, t) {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "transfer {} (chunk {}, NPU {} -> {}) starts at {} ps, before the one before it ({} ps): a stream's transfers come in start order",
                    self.summary.transfers, t.chunk, t.src, t.dst, t.start_ps, self.context.start
                ),
            ));
        }
        self.summary.transfers += 1;
        self.summary.collective_time_ps = self.summary.collective_time_ps.max(t.end_ps);
        if self.buf.len() >= BLOCK {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Writes the trailer (count, so a truncated file is detected) and hands back the writer.
    pub fn finish(mut self) -> std::io::Result<(W, StreamSummary)> {
        self.flush_block()?;
        let mut trailer = vec![END_MARKER];
        put_varint(&mut trailer, self.summary.transfers);
        put_varint(&mut trailer, self.summary.collective_time_ps);
        trailer.extend_from_slice(&self.sum.finish().to_le_bytes());
        self.out.write_all(&trailer)?;
        Ok((self.out, self.summary))
    }

    fn flush_block(&mut self) -> std::io::Result<()> {
        self.sum.update(&self.buf);
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// Reads a `tacos-transfers/1` stream: its header, then its transfers one at a time (an
/// iterator that stops after the first error). The trailer is checked when the last
/// transfer has been read.
pub struct StreamReader<R: BufRead> {
    input: R,
    origin: String,
    header: StreamHeader,
    /// Bytes read from `input` not yet decoded start at `at`; those before `hashed` are
    /// in `sum` already.
    buf: Vec<u8>,
    at: usize,
    hashed: usize,
    ended: bool,
    sum: Checksum,
    context: Context,
    summary: StreamSummary,
    done: bool,
}

/// Why a record could not be decoded from the bytes at hand.
enum Bad {
    /// The bytes ran out.
    Short,
    Damaged(String),
}

impl<R: BufRead> StreamReader<R> {
    /// Reads the magic line and the header; `origin` (the file) prefixes errors.
    pub fn new(mut input: R, origin: &str) -> Result<StreamReader<R>> {
        let io = |e| Error::io(origin, e);
        let mut sum = Checksum::default();
        let mut magic = Vec::new();
        (&mut input)
            .take(STREAM_FORMAT.len() as u64 + 1)
            .read_to_end(&mut magic)
            .map_err(io)?;
        if !magic.starts_with(STREAM_FORMAT.as_bytes()) || magic.last() != Some(&b'\n') {
            return Err(in_stream(
                origin,
                format!(
                    "not a transfer stream (it does not start with the line '{STREAM_FORMAT}')"
                ),
            ));
        }
        sum.update(&magic);
        let mut line = Vec::new();
        (&mut input)
            .take(MAX_HEADER_BYTES)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if line.len() as u64 == MAX_HEADER_BYTES && line.last() != Some(&b'\n') {
            return Err(Error::Limit {
                what: "bytes",
                value: MAX_HEADER_BYTES + 1,
                limit: MAX_HEADER_BYTES,
                context: format!(
                    "{origin}: the stream's header line (no line break within the limit)"
                ),
            });
        }
        if line.last() != Some(&b'\n') {
            return Err(in_stream(
                origin,
                "the header line ends without a line break (truncated)",
            ));
        }
        sum.update(&line);
        let text = std::str::from_utf8(&line)
            .map_err(|e| in_stream(origin, format!("the header is not UTF-8 text: {e}")))?;
        let header: StreamHeader = parse_json(text, origin).map_err(|p| {
            let field = p
                .field
                .as_ref()
                .map_or("header".into(), |f| format!("header: {f}"));
            p.field(field).of(FileFormat::Schedule)
        })?;
        if header.format != STREAM_FORMAT {
            let tag =
                FileProblem::wrong_tag(origin, "header: format", &header.format, STREAM_FORMAT);
            return Err(tag.of(FileFormat::Schedule));
        }
        Ok(StreamReader {
            input,
            origin: origin.to_string(),
            header,
            buf: Vec::with_capacity(BLOCK + MAX_RECORD),
            at: 0,
            hashed: 0,
            ended: false,
            sum,
            context: Context::default(),
            summary: StreamSummary {
                transfers: 0,
                collective_time_ps: 0,
            },
            done: false,
        })
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Reads every transfer into a schedule (in the stream's order), admitting its records
    /// and `also(n)` more bytes for n transfers against the memory limit as they grow;
    /// `doing` says what they are read for.
    pub(crate) fn into_schedule(
        self,
        also: impl Fn(u64) -> u64,
        doing: impl Fn() -> String,
    ) -> Result<Schedule> {
        let header = self.header.clone();
        let limit = MemoryLimit::default();
        let record = std::mem::size_of::<Transfer>() as u64;
        let mut transfers: Vec<Transfer> = Vec::new();
        for t in self {
            if transfers.len() == transfers.capacity() {
                // Growing copies the records: the old and the new vector are held at once.
                let more = transfers.capacity().max(4096);
                let wanted = (transfers.capacity() + more) as u64;
                let held = transfers.capacity() as u64 + wanted;
                limit.admit(
                    also(wanted).saturating_add(held.saturating_mul(record)),
                    || format!("{} ({wanted} transfers so far)", doing()),
                )?;
                transfers.reserve_exact(more);
            }
            transfers.push(t?);
        }
        Ok(Schedule {
            format: SCHEDULE_FORMAT.to_string(),
            topology: header.topology,
            collective: header.collective,
            chunk_bytes: header.chunk_bytes,
            network: header.network,
            transfers,
        })
    }

    fn damaged(&self, what: impl std::fmt::Display) -> Error {
        in_stream(&self.origin, format!("{what} (damaged)"))
    }

    /// Makes at least `MAX_RECORD` bytes available from `at`, unless the input ends.
    fn fill(&mut self) -> Result<()> {
        if self.ended || self.buf.len() - self.at >= MAX_RECORD {
            return Ok(());
        }
        self.sum.update(&self.buf[self.hashed..self.at]);
        self.buf.drain(..self.at);
        (self.at, self.hashed) = (0, 0);
        while self.buf.len() < BLOCK {
            let got = self
                .input
                .fill_buf()
                .map_err(|e| Error::io(&self.origin, e))?;
            if got.is_empty() {
                self.ended = true;
                break;
            }
            let n = got.len().min(BLOCK - self.buf.len());
            self.buf.extend_from_slice(&got[..n]);
            self.input.consume(n);
        }
        Ok(())
    }

    /// The next transfer, or None after the trailer (checked).
    fn read_next(&mut self) -> Result<Option<Transfer>> {
        self.fill()?;
        let i = self.summary.transfers;
        let Some(&flag) = self.buf.get(self.at) else {
            return Err(in_stream(
                &self.origin,
                format!(
                    "the file ends after {i} transfers without the stream's trailer (truncated)"
                ),
            ));
        };
        if flag == END_MARKER {
            self.read_trailer()?;
            return Ok(None);
        }
        let mut at = self.at + 1;
        match decode(&self.buf, &mut at, flag, &mut self.context) {
            Ok(t) => {
                self.at = at;
                self.summary.transfers += 1;
                self.summary.collective_time_ps = self.summary.collective_time_ps.max(t.end_ps);
                Ok(Some(t))
            }
            Err(Bad::Short) => Err(in_stream(
                &self.origin,
                format!("the file ends inside transfer {i} (truncated)"),
            )),
            Err(Bad::Damaged(what)) => Err(self.damaged(format!("transfer {i}: {what}"))),
        }
    }

    fn read_trailer(&mut self) -> Result<()> {
        self.sum.update(&self.buf[self.hashed..self.at]);
        let contents = std::mem::take(&mut self.sum).finish();
        let trailer = |r: &Self, what: String| r.damaged(format!("the trailer: {what}"));
        let short = |r: &Self| {
            in_stream(
                &r.origin,
                "the file ends inside the stream's trailer (truncated)",
            )
        };
        let mut at = self.at + 1;
        let count = match varint(&self.buf, &mut at) {
            Ok(n) => n,
            Err(Bad::Short) => return Err(short(self)),
            Err(Bad::Damaged(what)) => return Err(trailer(self, what)),
        };
        let time = match varint(&self.buf, &mut at) {
            Ok(n) => n,
            Err(Bad::Short) => return Err(short(self)),
            Err(Bad::Damaged(what)) => return Err(trailer(self, what)),
        };
        let Some(written) = self.buf.get(at..at + 8) else {
            return Err(short(self));
        };
        let written = u64::from_le_bytes(written.try_into().expect("8 bytes"));
        at += 8;
        let StreamSummary {
            transfers,
            collective_time_ps,
        } = self.summary;
        if count != transfers {
            return Err(trailer(
                self,
                format!("it counts {count} transfers but the file holds {transfers}"),
            ));
        }
        if time != collective_time_ps {
            return Err(trailer(
                self,
                format!("its collective time {time} ps is not the transfers' latest end, {collective_time_ps} ps"),
            ));
        }
        if written != contents {
            return Err(trailer(
                self,
                format!("its checksum {written:016x} is not the contents' {contents:016x}"),
            ));
        }
        let extra = self.buf.len() > at
            || !self
                .input
                .fill_buf()
                .map_err(|e| Error::io(&self.origin, e))?
                .is_empty();
        if extra {
            return Err(self.damaged("bytes follow the trailer"));
        }
        Ok(())
    }
}

impl<R: BufRead> Iterator for StreamReader<R> {
    type Item = Result<Transfer>;

    fn next(&mut self) -> Option<Result<Transfer>> {
        if self.done {
            return None;
        }
        let next = self.read_next();
        if !matches!(next, Ok(Some(_))) {
            self.done = true;
        }
        next.transpose()
    }
}

/// Decodes the record whose flag byte was `flag`, its fields from `bytes[*at..]`.
fn decode(bytes: &[u8], at: &mut usize, flag: u8, c: &mut Context) -> Result<Transfer, Bad> {
    let in_switch = flag == IN_SWITCH;
    let flag = match in_switch {
        true => {
            let &next = bytes.get(*at).ok_or(Bad::Short)?;
            *at += 1;
            next
        }
        false => flag,
    };
    let slot = flag >> 4;
    if slot > NEW_OFFSET {
        return Err(Bad::Damaged(format!(
            "flag byte {flag:#04x} is neither a record nor the end marker"
        )));
    }
    let mut start = c.start;
    if flag & START_CHANGED != 0 {
        start = start
            .checked_add(varint(bytes, at)?)
            .ok_or_else(|| Bad::Damaged("its start passes 2^64 ps".into()))?;
    }
    let mut duration = c.duration;
    if flag & DURATION_CHANGED != 0 {
        duration = duration.wrapping_add(unzigzag(varint(bytes, at)?));
    }
    let mut src = c.src;
    if flag & SRC_CHANGED != 0 {
        src = src.wrapping_add(unzigzag(varint(bytes, at)?));
    }
    let offset = if slot == NEW_OFFSET {
        let offset = unzigzag(varint(bytes, at)?);
        c.remember_offset(offset);
        offset
    } else {
        c.offsets[slot as usize]
    };
    let chunk = varint(bytes, at)?;
    let dst = src.wrapping_add(offset);
    let index = |what: &str, v: u64| {
        u32::try_from(v).map_err(|_| Bad::Damaged(format!("its {what} {v} passes 2^32 - 1")))
    };
    let t = Transfer {
        chunk: index("chunk", chunk)?,
        src: index("source NPU", src)?,
        dst: index("destination NPU", dst)?,
        start_ps: start,
        end_ps: start.wrapping_add(duration),
        op: if flag & OP_REDUCE != 0 {
            Op::Reduce
        } else {
            Op::Copy
        },
        in_switch,
    };
    (c.start, c.duration, c.src) = (start, duration, src);
    Ok(t)
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, Bad> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let &b = bytes.get(*at).ok_or(Bad::Short)?;
        *at += 1;
        if shift == 63 && b > 1 {
            return Err(Bad::Damaged("a number runs past 64 bits".into()));
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Bad::Damaged("a number runs past 64 bits".into()))
}

/// A difference modulo 2^64, read as signed, zigzagged.
fn zigzag(d: u64) -> u64 {
    let n = d as i64;
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

/// The stream's checksum (see the module doc), fed bytes in pieces of any size.
#[derive(Default)]
struct Checksum {
    h: u64,
    pending: [u8; 8],
    pending_len: usize,
    bytes: u64,
}

impl Checksum {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn mix(&mut self, word: u64) {
        self.h = (self.h.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }

    fn update(&mut self, mut bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        if self.pending_len > 0 {
            let n = bytes.len().min(8 - self.pending_len);
            self.pending[self.pending_len..self.pending_len + n].copy_from_slice(&bytes[..n]);
            self.pending_len += n;
            bytes = &bytes[n..];
            if self.pending_len < 8 {
                return;
            }
            self.mix(u64::from_le_bytes(self.pending));
            self.pending_len = 0;
        }
        let words = bytes.chunks_exact(8);
        let rest = words.remainder();
        for w in words {
            self.mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    fn finish(mut self) -> u64 {
        if self.pending_len > 0 {
            self.pending[self.pending_len..].fill(0);
            self.mix(u64::from_le_bytes(self.pending));
        }
        let bytes = self.bytes;
        self.mix(bytes);
        self.h
    }
}

/// Opens a stream file and reads its header.
pub fn open(path: &Path) -> Result<StreamReader<BufReader<File>>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    StreamReader::new(
        BufReader::with_capacity(BLOCK, file),
        &path.display().to_string(),
    )
}

/// Whether a file starts with the stream's magic (so readers of schedule files accept both forms).
pub fn is_stream(path: &Path) -> Result<bool> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut start = Vec::new();
    file.take(STREAM_FORMAT.len() as u64 + 1)
        .read_to_end(&mut start)
        .map_err(|e| Error::io(path, e))?;
    Ok(start.starts_with(STREAM_FORMAT.as_bytes()) && start.last() == Some(&b'\n'))
}

/// A problem of the transfer stream `origin`.
fn in_stream(origin: &str, what: impl Into<String>) -> Error {
    FileProblem::new(origin, what).of(FileFormat::Schedule)
}
