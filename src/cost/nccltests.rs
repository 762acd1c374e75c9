//! Reads what nccl-tests (`all_reduce_perf` and its siblings) prints: the measured tables
//! `tacos calibrate` fits a cluster's profile to.
//!
//! What the reader relies on, as nccl-tests prints it:
//! - a run's header, `# nThread T nGpus G ...` (ranks per process), and one device line
//!   per rank, `#  Rank R Group G Pid P on HOST device D [BUS] NAME` (an MPI run's first
//!   process prints every process's lines);
//! - the table's column line, `#  size  count  type  redop  root  time  algbw  busbw
//!   #wrong  time ...`: columns are found by name, the first `time` (or `cputime`) being
//!   out-of-place and the second in-place (a table may have only the first), so versions
//!   without `root`, per-iteration columns and time stamps read alike;
//! - one row per size (per data type and operation with `-d all`, `-o all`) up to the next
//!   `#` line (the footer: `# Out of bounds values`, `# Avg bus bandwidth`); NCCL's own log
//!   lines (`NCCL INFO`, `NCCL WARN`) may come between rows and are skipped;
//! - the collective: the program (`all_reduce_perf`, `all_gather_perf_mpi`) named before
//!   the table, in `# Collective test starting:` or an echoed command line; the caller
//!   names it (`-c`) for output that does not;
//! - `NCCL_ALGO` and `NCCL_PROTO`: a `NAME=value` word (a command line, `-x NAME=value`,
//!   `export`) or NCCL's `NAME set by environment to value`; a setting holds for the
//!   tables after it in the file.

use super::fit::Observation;
use crate::collective::CollectiveKind;
use crate::error::{echo, Error, Result};
use crate::fsio;
use crate::gpu::{Algorithm, Protocol};
use std::collections::BTreeSet;
use std::path::Path;

/// Largest nccl-tests output read, bytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The range a measured time may lie in, microseconds: from 10 ns (below any collective's
/// launch) to 1,000 s. A denormal or a time of 1e308 is no measurement; a fit to it
/// reports nonsense.
pub const TIME_US_RANGE: std::ops::RangeInclusive<f64> = 0.01..=1e9;

/// How to read a file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadOptions {
    /// The collective of tables whose output does not name it; with several collectives
    /// in a file, the one taken.
    pub collective: Option<CollectiveKind>,
    /// Take the in-place times instead of the out-of-place ones.
    pub in_place: bool,
}

/// One measured table: one collective, data type and operation of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// `FILE:LINE` of the table's column line (with the data type and operation when the
    /// run measured several).
    pub origin: String,
    pub collective: CollectiveKind,
    /// Ranks (GPUs) of the run.
    pub ranks: usize,
    /// How `ranks` is known, for messages (`device lines 6-13`).
    pub ranks_from: String,
    /// Distinct host names of the device lines; 0 where none were printed.
    pub hosts: usize,
    /// The GPU's name, as the device lines give it.
    pub gpu: Option<String>,
    pub data_type: String,
    pub redop: String,
    /// The algorithm `NCCL_ALGO` held the run to, if it named Ring or Tree alone.
    pub algorithm: Option<Algorithm>,
    /// The protocol `NCCL_PROTO` held the run to, if it named one alone.
    pub protocol: Option<Protocol>,
    /// Whether the times are the in-place ones.
    pub in_place: bool,
    /// Size (nccl-tests' `size`, bytes) and time of each row, in file order.
    pub points: Vec<Observation>,
    /// What the reader assumed or left aside.
    pub notes: Vec<String>,
}

impl Measured {
    /// An error unless the run's ranks are the topology's `npus` alive NPUs.
    pub fn check_ranks(&self, npus: usize, topology: &str) -> Result<()> {
        if self.ranks == npus {
            return Ok(());
        }
        Err(Error::Cost(format!(
            "{}: the table's {} ranks ({}) do not match {}'s {npus} NPUs",
            self.origin,
            self.ranks,
            self.ranks_from,
            echo(topology)
        )))
    }
}

/// Reads the nccl-tests output file at `path`.
pub fn read_file(path: &Path, options: &ReadOptions) -> Result<Vec<Measured>> {
    let text = fsio::read_text(path, "nccl-tests output", MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string(), options)
}

/// Reads nccl-tests output; `origin` names it in errors (`origin:line: ...`).
pub fn parse(text: &str, origin: &str, options: &ReadOptions) -> Result<Vec<Measured>> {
    let mut reader = Reader::new(origin, options.in_place);
    for (i, line) in text.lines().enumerate() {
        reader.line(i + 1, line)?;
    }
    reader.close_table()?;
    select(reader.tables, origin, options.collective)
}

/// A table read, before its collective is settled.
struct Pending {
    program: Option<(String, usize)>,
    measured: Measured,
}

/// What the run said before its table.
#[derive(Default)]
struct RunContext {
    /// (threads, GPUs per thread) and the `# nThread` line.
    per_process: Option<(usize, usize, usize)>,
    ranks: BTreeSet<usize>,
    /// First and last device line.
    device_lines: Option<(usize, usize)>,
    hosts: BTreeSet<String>,
    gpu: Option<String>,
    /// The program named since the last table, and its line.
    program: Option<(String, usize)>,
}

/// Where each column is in a row.
struct Columns {
    line: usize,
    size: usize,
    count: Option<usize>,
    data_type: Option<usize>,
    redop: Option<usize>,
    root: Option<usize>,
    /// Out-of-place and in-place time columns.
    time: [Option<usize>; 2],
}

/// A table being read: its columns and rows, grouped by (type, redop, root).
struct OpenTable {
    columns: Columns,
    groups: Vec<(Group, Vec<Observation>)>,
}

type Group = (String, String, String);

struct Reader<'a> {
    origin: &'a str,
    in_place: bool,
    run: RunContext,
    algorithm: Setting<Algorithm>,
    protocol: Setting<Protocol>,
    open: Option<OpenTable>,
    tables: Vec<Pending>,
}

/// An `NCCL_ALGO` or `NCCL_PROTO` setting: what it holds the run to, and the note when it
/// names something the model does not take alone.
#[derive(Clone)]
struct Setting<T> {
    value: Option<T>,
    note: Option<String>,
}

impl<T> Default for Setting<T> {
    fn default() -> Self {
        Setting {
            value: None,
            note: None,
        }
    }
}

impl<'a> Reader<'a> {
    fn new(origin: &'a str, in_place: bool) -> Reader<'a> {
        Reader {
            origin,
            in_place,
            run: RunContext::default(),
            algorithm: Setting::default(),
            protocol: Setting::default(),
            open: None,
            tables: Vec::new(),
        }
    }

    fn error(&self, line: usize, what: String) -> Error {
        Error::Cost(format!("{}:{line}: {what}", self.origin))
    }

    fn line(&mut self, n: usize, line: &str) -> Result<()> {
        let line = untagged(line);
        self.environment(n, line);
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            let words: Vec<&str> = comment.split_whitespace().collect();
            if is_column_line(&words) {
                self.close_table()?;
                let columns = self.columns(n, &words)?;
                self.open = Some(OpenTable {
                    columns,
                    groups: Vec::new(),
                });
                return Ok(());
            }
            // The units line under the column line; any other comment ends a table (its
            // footer) and may describe the next run.
            let units = words.first().is_some_and(|w| w.starts_with('('));
            if units && self.open.as_ref().is_some_and(|t| t.groups.is_empty()) {
                return Ok(());
            }
            self.close_table()?;
            self.header(n, &words);
            return Ok(());
        }
        if trimmed.is_empty() || is_nccl_log(trimmed) {
            return Ok(());
        }
        if self.open.is_some() {
            return self.row(n, trimmed);
        }
        // Outside a table: a command line may name the program.
        if let Some(program) = program_named(trimmed) {
            self.run.program = Some((program, n));
        }
        Ok(())
    }

    /// A comment line outside a table: the run's header, a device line, a program name.
    fn header(&mut self, n: usize, words: &[&str]) {
        match words {
            ["nThread", threads, "nGpus", gpus, ..] => {
                let program = self.run.program.take();
                self.run = RunContext {
                    program,
                    ..RunContext::default()
                };
                if let (Ok(t), Ok(g)) = (threads.parse::<usize>(), gpus.parse::<usize>()) {
                    self.run.per_process = Some((t.max(1), g.max(1), n));
                }
            }
            ["Rank", rank, ..] => {
                if let Ok(rank) = rank.parse::<usize>() {
                    self.run.ranks.insert(rank);
                    let first = self.run.device_lines.map_or(n, |(f, _)| f);
                    self.run.device_lines = Some((first, n));
                    if let Some(at) = words.iter().position(|w| *w == "on") {
                        if let Some(host) = words.get(at + 1) {
                            self.run.hosts.insert(host.to_string());
                        }
                    }
                    // The name follows the bus id, `[...]`.
                    if let Some(bus) = words.iter().position(|w| w.ends_with(']')) {
                        let name = words[bus + 1..].join(" ");
                        if !name.is_empty() {
                            self.run.gpu = Some(name);
                        }
                    }
                }
            }
            _ if words.contains(&"concluded:") => {}
            _ => {
                if let Some(program) = program_named(&words.join(" ")) {
                    self.run.program = Some((program, n));
                }
            }
        }
    }

    /// Notes `NCCL_ALGO` and `NCCL_PROTO` settings on any line.
    fn environment(&mut self, n: usize, line: &str) {
        if let Some(value) = setting(line, "NCCL_ALGO") {
            let algorithm = Algorithm::from_name(&value);
            self.algorithm = Setting {
                value: algorithm,
                note: algorithm.is_none().then(|| {
                    format!(
                        "line {n}: NCCL_ALGO={} names no single algorithm (ring, tree, nvls, nvlstree, pat, collnetdirect, collnetchain); NCCL's choice is assumed",
                        echo(&value)
                    )
                }),
            };
        }
        if let Some(value) = setting(line, "NCCL_PROTO") {
            let protocol = Protocol::ALL
                .into_iter()
                .find(|p| p.name().eq_ignore_ascii_case(&value));
            self.protocol = Setting {
                value: protocol,
                note: protocol.is_none().then(|| {
                    format!(
                        "line {n}: NCCL_PROTO={} names no single protocol (LL, LL128, Simple); NCCL's choice is assumed",
                        echo(&value)
                    )
                }),
            };
        }
    }

    fn columns(&self, n: usize, words: &[&str]) -> Result<Columns> {
        let find = |name: &str| words.iter().position(|w| *w == name);
        let times: Vec<usize> = words
            .iter()
            .enumerate()
            .filter(|(_, w)| matches!(**w, "time" | "cputime"))
            .map(|(i, _)| i)
            .collect();
        let Some(&out_of_place) = times.first() else {
            return Err(self.error(
                n,
                "the column line has no `time` column (nccl-tests prints `size count type redop root time algbw busbw ...`)".into(),
            ));
        };
        let columns = Columns {
            line: n,
            size: 0,
            count: find("count"),
            data_type: find("type"),
            redop: find("redop"),
            root: find("root"),
            time: [Some(out_of_place), times.get(1).copied()],
        };
        if self.in_place && columns.time[1].is_none() {
            return Err(self.error(
                n,
                "the table has out-of-place columns only: --in-place needs the second `time` column".into(),
            ));
        }
        Ok(columns)
    }

    fn row(&mut self, n: usize, line: &str) -> Result<()> {
        let open = self.open.as_ref().expect("a table is open");
        let c = &open.columns;
        let words: Vec<&str> = line.split_whitespace().collect();
        let time_column = c.time[usize::from(self.in_place)].expect("checked with the columns");
        let needed = [
            Some(c.size),
            c.count,
            c.data_type,
            c.redop,
            c.root,
            Some(time_column),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
            + 1;
        let size = words[0];
        let Ok(bytes) = size.parse::<u64>() else {
            return Err(self.error(
                n,
                format!(
                    "field size: '{}' is not a whole number of bytes (a row of the table at line {} starts with its size)",
                    echo(size),
                    c.line
                ),
            ));
        };
        if words.len() < needed {
            return Err(self.error(
                n,
                format!(
                    "the row has {} fields; the columns at line {} need {needed}",
                    words.len(),
                    c.line
                ),
            ));
        }
        if let Some(count) = c.count {
            if words[count].parse::<u64>().is_err() {
                return Err(self.error(
                    n,
                    format!(
                        "field count: '{}' is not a whole number of elements",
                        echo(words[count])
                    ),
                ));
            }
        }
        let field = |i: Option<usize>| i.map_or("", |i| words[i]).to_string();
        let name = if self.in_place {
            "in-place"
        } else {
            "out-of-place"
        };
        let time = words[time_column];
        let time_us = match time.parse::<f64>() {
            Ok(t) if TIME_US_RANGE.contains(&t) => t,
            _ => {
                return Err(self.error(
                    n,
                    format!(
                    "field time ({name}): '{}' must be a number of microseconds from {} to {:e}",
                    echo(time),
                    TIME_US_RANGE.start(),
                    TIME_US_RANGE.end()
                ),
                ))
            }
        };
        let group = (field(c.data_type), field(c.redop), field(c.root));
        let open = self.open.as_mut().expect("a table is open");
        // nccl-tests times no work for an empty buffer: such a row says nothing.
        if bytes == 0 {
            return Ok(());
        }
        let point = Observation { bytes, time_us };
        match open.groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, points)) => points.push(point),
            None => open.groups.push((group, vec![point])),
        }
        Ok(())
    }

    /// Ends the open table, if any: settles its ranks and keeps one table per group.
    fn close_table(&mut self) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let line = open.columns.line;
        if open.groups.is_empty() {
            return Err(self.error(line, "the table has no rows".into()));
        }
        let (ranks, ranks_from, mut notes) = self.ranks(line)?;
        notes.extend(self.algorithm.note.clone());
        notes.extend(self.protocol.note.clone());
        let several = open.groups.len() > 1;
        let program = self.run.program.take();
        for ((data_type, redop, root), rows) in open.groups {
            let (points, repeated) = merge_repeats(rows);
            let mut notes = notes.clone();
            if let Some(bytes) = repeated {
                notes.push(format!(
                    "line {line}: the table gives a size twice or more ({bytes} B first): rows of several runs or communicators interleaved; each size's times are averaged (split the log per run to fit them apart)"
                ));
            }
            let origin = if several {
                let root = if root.is_empty() || root == "-1" {
                    String::new()
                } else {
                    format!(" root {root}")
                };
                format!("{}:{line} ({data_type} {redop}{root})", self.origin)
            } else {
                format!("{}:{line}", self.origin)
            };
            self.tables.push(Pending {
                program: program.clone(),
                measured: Measured {
                    origin,
                    // Settled by `select`.
                    collective: CollectiveKind::AllReduce,
                    ranks,
                    ranks_from: ranks_from.clone(),
                    hosts: self.run.hosts.len(),
                    gpu: self.run.gpu.clone(),
                    data_type,
                    redop,
                    algorithm: self.algorithm.value,
                    protocol: self.protocol.value,
                    in_place: self.in_place,
                    points,
                    notes,
                },
            });
        }
        Ok(())
    }

    /// The run's ranks: one per device line (a process whose lines nccl-tests cut short
    /// still has all its ranks), else one process's threads x GPUs.
    fn ranks(&self, table_line: usize) -> Result<(usize, String, Vec<String>)> {
        let per_process = self.run.per_process.map(|(t, g, _)| t * g);
        if let (Some(&last), Some((first, end))) = (self.run.ranks.last(), self.run.device_lines) {
            let ranks = match per_process {
                Some(p) => (last + 1).div_ceil(p) * p,
                None => last + 1,
            };
            return Ok((ranks, format!("device lines {first}-{end}"), Vec::new()));
        }
        match self.run.per_process {
            Some((threads, gpus, line)) => Ok((
                threads * gpus,
                format!("line {line}: nThread {threads} x nGpus {gpus}"),
                vec![format!(
                    "line {line}: no device lines; one process of {threads} thread(s) x {gpus} GPU(s) assumed"
                )],
            )),
            None => Err(self.error(
                table_line,
                "the output does not say how many ranks ran (no `#  Rank` device lines, no `# nThread` line before the table)".into(),
            )),
        }
    }
}

/// Settles each table's collective: the program its output names, else `collective`; the
/// tables of `collective` alone where the file holds several (a program the model does not
/// price, such as sendrecv_perf, is an error unless `collective` leaves its table aside).
fn select(
    tables: Vec<Pending>,
    origin: &str,
    collective: Option<CollectiveKind>,
) -> Result<Vec<Measured>> {
    if tables.is_empty() {
        return Err(Error::Cost(format!(
            "{origin}: no nccl-tests table (a `#  size  count  type  redop  root  time ...` column line followed by rows)"
        )));
    }
    let named: Vec<Option<(std::result::Result<CollectiveKind, Error>, usize)>> = tables
        .iter()
        .map(|t| {
            t.program
                .as_ref()
                .map(|(program, line)| (program_kind(program, origin, *line), *line))
        })
        .collect();
    let kinds: BTreeSet<&'static str> = named
        .iter()
        .flatten()
        .filter_map(|(k, _)| k.as_ref().ok().map(|k| k.name()))
        .collect();
    let Some(chosen) = collective else {
        let mut said = Vec::new();
        let mut out = Vec::new();
        for (mut t, kind) in tables.into_iter().zip(named) {
            match kind {
                None => {
                    return Err(Error::Cost(format!(
                        "{}: the output does not name its collective (no `*_perf` program before the table); pass -c",
                        t.measured.origin
                    )))
                }
                Some((Err(e), _)) => return Err(e),
                Some((Ok(kind), line)) => {
                    said.push(format!("{kind} (line {line})"));
                    t.measured.collective = kind;
                    out.push(t.measured);
                }
            }
        }
        if kinds.len() > 1 {
            return Err(Error::Cost(format!(
                "{origin}: mixed collectives ({}); pass -c to take one",
                said.join(", ")
            )));
        }
        return Ok(out);
    };
    let out: Vec<Measured> = tables
        .into_iter()
        .zip(named)
        .filter(|(_, kind)| match kind {
            None => true,
            Some((k, _)) => k.as_ref().is_ok_and(|k| *k == chosen),
        })
        .map(|(mut t, _)| {
            t.measured.collective = chosen;
            t.measured
        })
        .collect();
    if out.is_empty() {
        return Err(Error::Cost(format!(
            "{origin}: no {chosen} table (the file holds {})",
            kinds.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(out)
}

/// The collective of an nccl-tests program (`all_reduce` of `all_reduce_perf`).
fn program_kind(program: &str, origin: &str, line: usize) -> Result<CollectiveKind> {
    program.parse::<CollectiveKind>().map_err(|_| {
        Error::Cost(format!(
            "{origin}:{line}: {}_perf is not a collective the model prices (known: {})",
            echo(program),
            CollectiveKind::ALL.map(|k| k.name()).join(", ")
        ))
    })
}

/// Whether a comment's words are a table's column line.
/// `line` without the prefix `mpirun --tag-output` puts before each line of a process
/// (`[1,0]<stdout>:`), where it has one.
fn untagged(line: &str) -> &str {
    let Some(rest) = line.strip_prefix('[') else {
        return line;
    };
    let Some((ranks, rest)) = rest.split_once(']') else {
        return line;
    };
    let numbered = ranks
        .split(',')
        .all(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
    let stream = ["<stdout>:", "<stderr>:"]
        .iter()
        .find_map(|s| rest.strip_prefix(s));
    match stream {
        Some(text) if numbered => text,
        _ => line,
    }
}

/// The rows with each size once, a size given several times averaged (in the order sizes
/// first appear), and the first size repeated, if any.
fn merge_repeats(rows: Vec<Observation>) -> (Vec<Observation>, Option<u64>) {
    let mut merged: Vec<(Observation, usize)> = Vec::new();
    let mut repeated = None;
    for row in rows {
        match merged.iter_mut().find(|(o, _)| o.bytes == row.bytes) {
            Some((o, count)) => {
                repeated.get_or_insert(row.bytes);
                o.time_us += row.time_us;
                *count += 1;
            }
            None => merged.push((row, 1)),
        }
    }
    let points = merged
        .into_iter()
        .map(|(o, count)| Observation {
            bytes: o.bytes,
            time_us: o.time_us / count as f64,
        })
        .collect();
    (points, repeated)
}

fn is_column_line(words: &[&str]) -> bool {
    words.first() == Some(&"size")
        && words.contains(&"count")
        && words.iter().any(|w| matches!(*w, "time" | "cputime"))
}

/// Whether a line is NCCL's own log (`host:pid:tid [dev] NCCL INFO ...`).
fn is_nccl_log(line: &str) -> bool {
    ["NCCL INFO", "NCCL WARN", "NCCL TRACE"]
        .iter()
        .any(|tag| line.contains(tag))
}

/// The nccl-tests program a line names (`all_reduce` for `./build/all_reduce_perf`).
fn program_named(line: &str) -> Option<String> {
    line.split_whitespace().find_map(|word| {
        let base = word.rsplit('/').next().unwrap_or(word);
        let at = base.find("_perf")?;
        let name = &base[..at];
        let rest = &base[at + "_perf".len()..];
        let whole = rest.is_empty() || rest.starts_with(['_', '.', ':', ',', ';', ')']);
        (whole && !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .then(|| name.to_string())
    })
}

/// The value of `name` on a line: `name=value` as a word (`-x`, `export`, a command line)
/// or NCCL's `name set by environment to value`.
fn setting(line: &str, name: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let unquote = |v: &str| v.trim_matches(['"', '\'']).to_string();
    for (i, word) in words.iter().enumerate() {
        if let Some(value) = word.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(unquote(value));
        }
        if *word == name && words.get(i + 1..i + 5) == Some(&["set", "by", "environment", "to"]) {
            return words.get(i + 5).map(|v| unquote(v.trim_end_matches('.')));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_named_by_their_binaries() {
        assert_eq!(
            program_named("$ mpirun -np 8 ./build/all_reduce_perf -b 8"),
            Some("all_reduce".into())
        );
        assert_eq!(
            program_named("Collective test starting: all_gather_perf_mpi"),
            Some("all_gather".into())
        );
        assert_eq!(program_named("perf is fine"), None);
        assert_eq!(program_named("all_reduce_performance"), None);
    }

    #[test]
    fn settings_are_found_in_commands_and_nccl_logs() {
        assert_eq!(
            setting("mpirun -x NCCL_ALGO=Ring ./all_reduce_perf", "NCCL_ALGO"),
            Some("Ring".into())
        );
        assert_eq!(
            setting(
                "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL128",
                "NCCL_PROTO"
            ),
            Some("LL128".into())
        );
        assert_eq!(setting("NCCL_ALGORITHM=x", "NCCL_ALGO"), None);
    }
}
