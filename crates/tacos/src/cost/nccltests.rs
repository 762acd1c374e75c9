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
//!
//! What users paste besides, read where the collective is known (the program named, else
//! `-c`) and the ranks too (the run header, else `ReadOptions::ranks`):
//! - rows without their column line (and often without the run header), read by their
//!   shape: `size count type`, `redop` where the fourth field is a name, `root` where the
//!   count of fields says so, then one or two halves of `time algbw busbw #wrong`, as
//!   nccl-tests prints them; each row's algbw must be its size over its time, so a row of
//!   another shape is refused naming its line rather than misread;
//! - size and busbw alone (`1M 123.4`, under an optional `size busbw` header, from a chart
//!   or a page; CSV and Markdown tables too): busbw is algbw times the collective's bus
//!   factor (`sim::bus_factor`) and algbw is size over time, so each row gives a time.

use super::fit::Observation;
use crate::collective::CollectiveKind;
use crate::error::{echo, Error, FileFormat, FileProblem, Result};
use crate::fsio;
use crate::gpu::{Algorithm, Protocol};
use crate::sim::bus_factor;
use crate::units::parse_size;
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
    /// The ranks of tables whose output does not say (no `#  Rank` device lines, no
    /// `# nThread` line): rows pasted without their run's header.
    pub ranks: Option<usize>,
}

/// One measured table: one collective, data type and operation of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// `FILE:LINE` of the table's column line, else of its first row (with the data type
    /// and operation when the run measured several).
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
        Err(in_table(
            &self.origin,
            format!(
                "the table's {} ranks ({}) do not match {}'s {npus} NPUs",
                self.ranks,
                self.ranks_from,
                echo(topology)
            ),
        ))
    }
}

/// Reads the nccl-tests output file at `path`.
pub fn read_file(path: &Path, options: &ReadOptions) -> Result<Vec<Measured>> {
    let text = fsio::read_text(path, "nccl-tests output", MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string(), options)
}

/// Reads nccl-tests output; `origin` names it in errors (`origin:line: ...`).
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::cost::nccltests::{parse, ReadOptions};
///
/// // All-Reduce on 8 GPUs (bus factor 1.75): 1 GiB at busbw 175 GB/s is algbw 100 GB/s.
/// let options = ReadOptions {
///     collective: Some(CollectiveKind::AllReduce),
///     ranks: Some(8),
///     ..ReadOptions::default()
/// };
/// let tables = parse("size busbw\n1GiB 175\n", "pasted.txt", &options).unwrap();
/// assert_eq!(tables[0].points[0].bytes, 1 << 30);
/// assert!((tables[0].points[0].time_us - 10_737.418_24).abs() < 1e-6);
/// ```
pub fn parse(text: &str, origin: &str, options: &ReadOptions) -> Result<Vec<Measured>> {
    let mut reader = Reader::new(origin, *options);
    for (i, line) in text.lines().enumerate() {
        reader.line(i + 1, line)?;
    }
    reader.close_table()?;
    select(reader.tables, origin, options.collective)
}

/// A table read, its collective settled.
struct Pending {
    /// The collective the program before the table names, and the program's line.
    named: Option<(CollectiveKind, usize)>,
    /// None for the table of a program the model does not price, left aside by `-c`.
    measured: Option<Measured>,
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
    size: usize,
    count: Option<usize>,
    data_type: Option<usize>,
    redop: Option<usize>,
    root: Option<usize>,
    /// Out-of-place and in-place time columns.
    time: [Option<usize>; 2],
}

/// How a table's rows are laid out.
enum Layout {
    /// As the column line names them.
    Named(Columns),
    /// As the first row's shape tells: rows pasted without their column line.
    Shaped(Columns),
    /// Size and busbw (GB/s) alone, as copied from a chart or a page: each row's size,
    /// busbw and line, turned into times once the collective and ranks are settled.
    BusBandwidth {
        /// The unit the header gives sizes without one (`size (MiB)`).
        size_unit: Option<String>,
        rows: Vec<(u64, f64, usize)>,
    },
}

/// A table being read: its layout and rows, grouped by (type, redop, root).
struct OpenTable {
    /// The column line, else the first row.
    line: usize,
    layout: Layout,
    groups: Vec<(Group, Vec<Observation>)>,
}

type Group = (String, String, String);

struct Reader<'a> {
    origin: &'a str,
    options: ReadOptions,
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

/// The row shapes nccl-tests prints, as errors about rows without a column line say them.
const ROW_SHAPES: &str = "`size count type redop root time algbw busbw #wrong time algbw busbw #wrong` (older versions print no `root`, some no `redop`; the in-place half may be cut off)";

/// What a size+busbw row is, as errors say it.
const BUSBW_ROW: &str =
    "`SIZE BUSBW`: SIZE in bytes or with a unit (1M, 1MiB, 1G, 4MB), BUSBW in GB/s";

impl<'a> Reader<'a> {
    fn new(origin: &'a str, options: ReadOptions) -> Reader<'a> {
        Reader {
            origin,
            options,
            run: RunContext::default(),
            algorithm: Setting::default(),
            protocol: Setting::default(),
            open: None,
            tables: Vec::new(),
        }
    }

    fn error(&self, line: usize, what: String) -> Error {
        FileProblem::new(self.origin, what)
            .line(line)
            .of(FileFormat::Cost)
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
                return self.open_table(n, Layout::Named(columns));
            }
            if let Some(size_unit) = busbw_header(comment) {
                self.close_table()?;
                return self.open_busbw(n, size_unit);
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
        if let Some(size_unit) = busbw_header(trimmed) {
            return self.open_busbw(n, size_unit);
        }
        // Rows pasted without their column line: read by their shape.
        let fields = busbw_fields(trimmed);
        if fields.len() == 2 && size_field(fields[0], None).is_ok() && numeric(fields[1]) {
            self.open_busbw(n, Ok(None))?;
            return self.row(n, trimmed);
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        if words.len() > 2 && whole(words[0]) && whole(words[1]) {
            let columns = shape(&words).map_err(|e| self.error(n, e))?;
            self.open_table(n, Layout::Shaped(columns))?;
            return self.row(n, trimmed);
        }
        // Outside a table: a command line may name the program.
        if let Some(program) = program_named(trimmed) {
            self.run.program = Some((program, n));
        }
        Ok(())
    }

    fn open_table(&mut self, n: usize, layout: Layout) -> Result<()> {
        if let Layout::Shaped(c) = &layout {
            if self.options.in_place && c.time[1].is_none() {
                return Err(self.error(
                    n,
                    "the row has out-of-place columns only: --in-place needs the second `time` field".into(),
                ));
            }
        }
        self.open = Some(OpenTable {
            line: n,
            layout,
            groups: Vec::new(),
        });
        Ok(())
    }

    /// Opens a size+busbw table; `size_unit` is its header's unit of sizes, if any.
    fn open_busbw(&mut self, n: usize, size_unit: Result<Option<String>, String>) -> Result<()> {
        let size_unit = size_unit.map_err(|e| self.error(n, e))?;
        if self.options.in_place {
            return Err(self.error(
                n,
                "a size+busbw table has one busbw per size, no in-place column for --in-place to take".into(),
            ));
        }
        self.open_table(
            n,
            Layout::BusBandwidth {
                size_unit,
                rows: Vec::new(),
            },
        )
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
            size: 0,
            count: find("count"),
            data_type: find("type"),
            redop: find("redop"),
            root: find("root"),
            time: [Some(out_of_place), times.get(1).copied()],
        };
        if self.options.in_place && columns.time[1].is_none() {
            return Err(self.error(
                n,
                "the table has out-of-place columns only: --in-place needs the second `time` column".into(),
            ));
        }
        Ok(columns)
    }

    fn row(&mut self, n: usize, line: &str) -> Result<()> {
        let open = self.open.as_ref().expect("a table is open");
        let (c, shaped) = match &open.layout {
            Layout::Named(c) => (c, false),
            Layout::Shaped(c) => (c, true),
            Layout::BusBandwidth { size_unit, .. } => {
                // A Markdown table's rule under its header.
                if line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
                    return Ok(());
                }
                let (bytes, busbw) = busbw_row(line, size_unit.as_deref()).map_err(|e| {
                    self.error(
                        n,
                        format!("{e} (a row of the size+busbw table at line {})", open.line),
                    )
                })?;
                if let Some(OpenTable {
                    layout: Layout::BusBandwidth { rows, .. },
                    ..
                }) = self.open.as_mut()
                {
                    rows.push((bytes, busbw, n));
                }
                return Ok(());
            }
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let in_place = usize::from(self.options.in_place);
        let time_column = c.time[in_place].expect("checked with the columns");
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
        let table = if shaped {
            format!("the rows from line {} read as {ROW_SHAPES}", open.line)
        } else {
            format!("the columns at line {}", open.line)
        };
        let size = words[0];
        let Ok(bytes) = size.parse::<u64>() else {
            return Err(self.error(
                n,
                format!(
                    "field size: '{}' is not a whole number of bytes (a row of the table at line {} starts with its size)",
                    echo(size),
                    open.line
                ),
            ));
        };
        if words.len() < needed {
            return Err(self.error(
                n,
                format!("the row has {} fields; {table} need {needed}", words.len()),
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
        if shaped {
            algbw_agrees(&words, bytes, c).map_err(|e| {
                self.error(
                    n,
                    format!("{e}: the fields are not where {table} puts them; paste the table's `#  size  count  type ...` column line above its rows"),
                )
            })?;
        }
        let field = |i: Option<usize>| i.map_or("", |i| words[i]).to_string();
        let name = if self.options.in_place {
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

    /// The open table's collective: the program the output names, else `-c`; None for a
    /// program the model does not price when `-c` takes another collective.
    fn collective(&self, line: usize, what: &str) -> Result<Option<CollectiveKind>> {
        match (&self.run.program, self.options.collective) {
            (Some((program, at)), chosen) => match program_kind(program, self.origin, *at) {
                Ok(kind) => Ok(Some(kind)),
                Err(_) if chosen.is_some() => Ok(None),
                Err(e) => Err(e),
            },
            (None, Some(chosen)) => Ok(Some(chosen)),
            (None, None) => Err(self.error(
                    line,
                    format!(
                        "the output does not name the collective of {what} (no `*_perf` program before it); pass -c to name it ({})",
                        CollectiveKind::ALL.map(|k| k.name()).join(", ")
                    ),
                )),
        }
    }

    /// Ends the open table, if any: settles its collective and ranks and keeps one table
    /// per group.
    fn close_table(&mut self) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let line = open.line;
        let empty = match &open.layout {
            Layout::BusBandwidth { rows, .. } => rows.is_empty(),
            Layout::Named(_) | Layout::Shaped(_) => open.groups.is_empty(),
        };
        if empty {
            return Err(self.error(line, "the table has no rows".into()));
        }
        let what = match open.layout {
            Layout::Named(_) => "the table",
            Layout::Shaped(_) => "rows pasted without their column line",
            Layout::BusBandwidth { .. } => "a size+busbw table",
        };
        let kind = self.collective(line, what)?;
        let program = self.run.program.take();
        let named = program.zip(kind).map(|((_, at), kind)| (kind, at));
        let Some(kind) = kind else {
            self.tables.push(Pending {
                named,
                measured: None,
            });
            return Ok(());
        };
        let (ranks, ranks_from, mut notes) = self.ranks(line)?;
        notes.extend(self.algorithm.note.clone());
        notes.extend(self.protocol.note.clone());
        let groups = match open.layout {
            Layout::Named(_) => open.groups,
            Layout::Shaped(c) => {
                notes.push(format!(
                    "line {line}: rows without their column line, read by their shape as {}",
                    shape_words(&c)
                ));
                open.groups
            }
            Layout::BusBandwidth { rows, .. } => {
                let (points, note) = self.busbw_times(kind, ranks, line, &rows)?;
                notes.push(note);
                vec![(Group::default(), points)]
            }
        };
        let several = groups.len() > 1;
        for ((data_type, redop, root), rows) in groups {
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
                named,
                measured: Some(Measured {
                    origin,
                    collective: kind,
                    ranks,
                    ranks_from: ranks_from.clone(),
                    hosts: self.run.hosts.len(),
                    gpu: self.run.gpu.clone(),
                    data_type,
                    redop,
                    algorithm: self.algorithm.value,
                    protocol: self.protocol.value,
                    in_place: self.options.in_place,
                    points,
                    notes,
                }),
            });
        }
        Ok(())
    }

    /// The times of a size+busbw table's rows: busbw is algbw times the collective's bus
    /// factor (nccl-tests' convention, `sim::bus_factor`) and algbw is size over time.
    fn busbw_times(
        &self,
        kind: CollectiveKind,
        ranks: usize,
        line: usize,
        rows: &[(u64, f64, usize)],
    ) -> Result<(Vec<Observation>, String)> {
        let factor = bus_factor(kind, ranks);
        if factor <= 0.0 {
            return Err(self.error(
                line,
                format!("busbw of {kind} on {ranks} rank is 0 whatever the time: a size+busbw table cannot give its times"),
            ));
        }
        let mut points = Vec::with_capacity(rows.len());
        for &(bytes, busbw, n) in rows {
            // GB/s is bytes per nanosecond: bytes / algbw ns, / 1e3 us.
            let time_us = bytes as f64 / (busbw / factor) / 1e3;
            if !TIME_US_RANGE.contains(&time_us) {
                return Err(self.error(
                    n,
                    format!(
                        "field busbw: {busbw} GB/s for {bytes} B gives {time_us:e} us ({kind}'s bus factor on {ranks} ranks is {factor}), outside the {} to {:e} us a time may take",
                        TIME_US_RANGE.start(),
                        TIME_US_RANGE.end()
                    ),
                ));
            }
            points.push(Observation { bytes, time_us });
        }
        let note = format!(
            "line {line}: sizes and busbw only: each time is size / (busbw / {factor}), {factor} being {kind}'s bus factor on {ranks} ranks"
        );
        Ok((points, note))
    }

    /// The run's ranks: one per device line (a process whose lines nccl-tests cut short
    /// still has all its ranks), else one process's threads x GPUs, else the caller's.
    fn ranks(&self, table_line: usize) -> Result<(usize, String, Vec<String>)> {
        let per_process = self.run.per_process.map(|(t, g, _)| t * g);
        if let (Some(&last), Some((first, end))) = (self.run.ranks.last(), self.run.device_lines) {
            let ranks = match per_process {
                Some(p) => (last + 1).div_ceil(p) * p,
                None => last + 1,
            };
            return Ok((ranks, format!("device lines {first}-{end}"), Vec::new()));
        }
        match (self.run.per_process, self.options.ranks) {
            (Some((threads, gpus, line)), _) => Ok((
                threads * gpus,
                format!("line {line}: nThread {threads} x nGpus {gpus}"),
                vec![format!(
                    "line {line}: no device lines; one process of {threads} thread(s) x {gpus} GPU(s) assumed"
                )],
            )),
            (None, Some(ranks)) => Ok((
                ranks,
                "the topology's NPUs: the output prints no `# nThread` or device lines".into(),
                vec![format!(
                    "line {table_line}: no run header; {ranks} ranks, the topology's NPUs, assumed"
                )],
            )),
            (None, None) => Err(self.error(
                table_line,
                "the output does not say how many ranks ran (no `#  Rank` device lines, no `# nThread` line before the table); with one --topology, its NPUs are taken".into(),
            )),
        }
    }
}

/// Keeps the tables of `collective` where it is given, and refuses a file of several
/// collectives where it is not.
fn select(
    tables: Vec<Pending>,
    origin: &str,
    collective: Option<CollectiveKind>,
) -> Result<Vec<Measured>> {
    if tables.is_empty() {
        return Err(in_table(origin, format!(
            "no nccl-tests table (a `#  size  count  type  redop  root  time ...` column line followed by rows, rows as nccl-tests prints them with -c, or {BUSBW_ROW} rows with -c)"
        )));
    }
    let kinds: BTreeSet<&'static str> = tables
        .iter()
        .filter_map(|t| t.named.map(|(k, _)| k.name()))
        .collect();
    let Some(chosen) = collective else {
        if kinds.len() > 1 {
            let said: Vec<String> = tables
                .iter()
                .filter_map(|t| t.named.map(|(kind, line)| format!("{kind} (line {line})")))
                .collect();
            return Err(in_table(
                origin,
                format!(
                    "mixed collectives ({}); pass -c to take one",
                    said.join(", ")
                ),
            ));
        }
        // Without -c every table's collective is named: `Reader::collective`.
        return Ok(tables.into_iter().filter_map(|t| t.measured).collect());
    };
    let out: Vec<Measured> = tables
        .into_iter()
        .filter_map(|t| t.measured)
        .filter(|m| m.collective == chosen)
        .collect();
    if out.is_empty() {
        return Err(in_table(
            origin,
            format!(
                "no {chosen} table (the file holds {})",
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(out)
}

/// The collective of an nccl-tests program (`all_reduce` of `all_reduce_perf`).
fn program_kind(program: &str, origin: &str, line: usize) -> Result<CollectiveKind> {
    program.parse::<CollectiveKind>().map_err(|_| {
        FileProblem::new(
            origin,
            format!(
                "{}_perf is not a collective the model prices (known: {})",
                echo(program),
                CollectiveKind::ALL.map(|k| k.name()).join(", ")
            ),
        )
        .line(line)
        .of(FileFormat::Cost)
    })
}

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

/// Whether a comment's words are a table's column line.
fn is_column_line(words: &[&str]) -> bool {
    words.first() == Some(&"size")
        && words.contains(&"count")
        && words.iter().any(|w| matches!(*w, "time" | "cputime"))
}

/// Whether a word is a number as nccl-tests prints one (`-1`, `12.50`, `0e+00`), not a
/// name that parses as one (`inf`, `nan`).
fn numeric(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.'))
        && word.parse::<f64>().is_ok_and(f64::is_finite)
}

fn whole(word: &str) -> bool {
    word.parse::<u64>().is_ok()
}

/// Whether a word is the date of nccl-tests' time stamp (`2025-03-01`).
fn is_date(word: &str) -> bool {
    let b = word.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The columns of a row pasted without its table's column line, told by its shape (what
/// nccl-tests' `writeBenchmarkLinePreamble` and `writeBenchmarkLineBody` print): `size
/// count type`, then `redop` where the fourth word is a name, then `root` where the count
/// of fields left says so, then one half (`time algbw busbw #wrong`) or two; a time stamp
/// at the end (two words) is left aside. Each row's algbw is checked against its size and
/// time by `algbw_agrees`, so a shape misread is refused rather than fitted.
fn shape(words: &[&str]) -> std::result::Result<Columns, String> {
    let paste = "paste the table's `#  size  count  type ...` column line above its rows";
    if numeric(words[2]) {
        return Err(format!(
            "field type: '{}' is a number where a row without its column line has its data type (float, half, ...): rows must be {ROW_SHAPES}, or {paste}",
            echo(words[2])
        ));
    }
    let redop = words
        .get(3)
        .is_some_and(|w| !numeric(w) && *w != "N/A")
        .then_some(3);
    let first = 3 + usize::from(redop.is_some());
    let mut tail = &words[first..];
    if let [rest @ .., date, _] = tail {
        if is_date(date) {
            tail = rest;
        }
    }
    let (root, halves) = match tail.len() {
        4 => (false, 1),
        5 => (true, 1),
        8 => (false, 2),
        9 => (true, 2),
        k => {
            return Err(format!(
                "the row has {k} fields after its {}; rows without their column line must be {ROW_SHAPES}: 4 or 8 fields after it, 5 or 9 with `root`; {paste}",
                if redop.is_some() { "redop" } else { "type" }
            ))
        }
    };
    if root && tail[0].parse::<i64>().is_err() {
        return Err(format!(
            "field root: '{}' is not a rank, where a row of {} fields after its type has `root`: rows must be {ROW_SHAPES}, or {paste}",
            echo(tail[0]),
            tail.len()
        ));
    }
    let time = first + usize::from(root);
    Ok(Columns {
        size: 0,
        count: Some(1),
        data_type: Some(2),
        redop,
        root: root.then_some(first),
        time: [Some(time), (halves == 2).then_some(time + 4)],
    })
}

/// Shaped columns as a column line would name them, for notes.
fn shape_words(c: &Columns) -> String {
    let mut words = vec!["size", "count", "type"];
    words.extend(c.redop.map(|_| "redop"));
    words.extend(c.root.map(|_| "root"));
    for _ in c.time.iter().flatten() {
        words.extend(["time", "algbw", "busbw", "#wrong"]);
    }
    format!("`{}`", words.join(" "))
}

/// An error unless each half's algbw is the row's size over its time, as nccl-tests
/// computes it, to the rounding of both printed figures (1% and 0.006 GB/s allowed). A time
/// that is no positive number is left to the time field's own check.
fn algbw_agrees(words: &[&str], bytes: u64, c: &Columns) -> std::result::Result<(), String> {
    if bytes == 0 {
        return Ok(());
    }
    for t in c.time.into_iter().flatten() {
        let (Some(time), Some(algbw)) = (words.get(t), words.get(t + 1)) else {
            continue;
        };
        let Some(time_us) = time
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0)
        else {
            continue;
        };
        if !numeric(algbw) {
            return Err(format!("field algbw: '{}' is not a number", echo(algbw)));
        }
        let printed: f64 = algbw.parse().expect("numeric");
        // GB/s is bytes per nanosecond.
        let expected = bytes as f64 / (time_us * 1e3);
        if (printed - expected).abs() > 0.006 + 0.01 * expected {
            return Err(format!(
                "field algbw: {printed} GB/s is not size / time ({bytes} B / {time_us} us = {expected:.2} GB/s)"
            ));
        }
    }
    Ok(())
}

/// A size+busbw line's fields: split at white space, commas and `|` (a CSV or Markdown
/// table).
fn busbw_fields(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || c == ',' || c == '|')
        .filter(|f| !f.is_empty())
        .collect()
}

/// The unit in brackets at the start of `text` (`(MiB)`, `[GB/s]`), if any.
fn bracketed(text: &str) -> Option<&str> {
    let (unit, _) = text.strip_prefix(['(', '['])?.split_once([')', ']'])?;
    Some(unit.trim())
}

/// Whether a line is a size+busbw table's header (`size busbw`, `Size (B), busbw (GB/s)`):
/// its first word names the size and another busbw, no `time` or `count` column; with the
/// unit of its sizes where it names one other than bytes, or why its units are not read.
fn busbw_header(line: &str) -> Option<std::result::Result<Option<String>, String>> {
    let lower = line.to_ascii_lowercase();
    let words = busbw_fields(&lower);
    let name = |w: &str| w.split(['(', '[']).next().unwrap_or_default().to_string();
    if name(words.first()?) != "size"
        || words
            .iter()
            .any(|w| matches!(*w, "time" | "cputime" | "count"))
    {
        return None;
    }
    let busbw = words
        .iter()
        .position(|w| matches!(name(w).as_str(), "busbw" | "bus_bw"))?;
    // A word's unit, in brackets after its name or as the next word.
    let unit = |at: usize| {
        let rest = words[at].trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '_');
        match rest {
            "" => bracketed(words.get(at + 1)?),
            rest => bracketed(rest),
        }
    };
    if let Some(u) = unit(busbw).filter(|u| *u != "gb/s") {
        return Some(Err(format!(
            "the header gives busbw in '{}': the reader takes GB/s (1e9 bytes per second, as nccl-tests prints busbw)",
            echo(u)
        )));
    }
    Some(match unit(0) {
        None | Some("b" | "byte" | "bytes") => Ok(None),
        Some(u) if parse_size(&format!("1{u}")).is_ok() => Ok(Some(u.to_string())),
        Some(u) => Err(format!(
            "the header's size unit '{}' is none of B, KB, MB, GB, KiB, MiB, GiB, K, M, G",
            echo(u)
        )),
    })
}

/// A size as a size+busbw table gives it: bytes, a size with its unit (`1M`, `1MiB`), or a
/// number in the header's unit.
fn size_field(field: &str, unit: Option<&str>) -> std::result::Result<u64, String> {
    let unitless = field.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    match unit {
        Some(unit) if unitless => parse_size(&format!("{field}{unit}")),
        _ => parse_size(field),
    }
}

/// A size+busbw row: its size in bytes and busbw in GB/s.
fn busbw_row(line: &str, size_unit: Option<&str>) -> std::result::Result<(u64, f64), String> {
    let fields = busbw_fields(line);
    let [size, busbw] = fields[..] else {
        return Err(format!(
            "the row has {} fields; a size+busbw row is {BUSBW_ROW}",
            fields.len()
        ));
    };
    let bytes = size_field(size, size_unit).map_err(|e| format!("field {e}"))?;
    let gbps = Some(busbw)
        .filter(|b| numeric(b))
        .and_then(|b| b.parse::<f64>().ok())
        .filter(|b| *b > 0.0)
        .ok_or_else(|| {
            format!(
                "field busbw: '{}' must be a positive number of GB/s",
                echo(busbw)
            )
        })?;
    Ok((bytes, gbps))
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

/// A problem of the measurement file `origin` as a whole.
fn in_table(origin: &str, what: String) -> Error {
    FileProblem::new(origin, what).of(FileFormat::Cost)
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

    /// Rows as nccl-tests' printf formats lay them out: `%12li  %12li  %8s  %6s  %6s`, then
    /// `  %7s  %6s  %6s  %6g` per half, then `%21s` for a time stamp; older versions
    /// without `root` or `redop`.
    #[test]
    fn rows_are_shaped_as_nccl_tests_prints_them() {
        let half = format!(
            "  {:>7}  {:>6}  {:>6}  {:>6}",
            "40.00", "26.21", "45.87", "0"
        );
        let words = |row: &str| {
            row.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let current = format!(
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{half}{half}",
            1048576, 262144, "float", "sum", -1
        );
        let stamped = format!("{current}{:>21}", "2025-03-01 10:14:16");
        let no_root = format!(
            "{:>12}  {:>12}  {:>8}  {:>6}{half}",
            1048576, 262144, "float", "sum"
        );
        let broadcast = format!(
            "{:>12}  {:>12}  {:>8}  {:>6}{half}{half}",
            1048576, 262144, "float", 0
        );
        for (row, redop, root, time) in [
            (&current, Some(3), Some(4), [Some(5), Some(9)]),
            (&stamped, Some(3), Some(4), [Some(5), Some(9)]),
            (&no_root, Some(3), None, [Some(4), None]),
            (&broadcast, None, Some(3), [Some(4), Some(8)]),
        ] {
            let w = words(row);
            let w: Vec<&str> = w.iter().map(String::as_str).collect();
            let c = shape(&w).unwrap();
            assert_eq!((c.redop, c.root, c.time), (redop, root, time), "{row}");
            assert_eq!(algbw_agrees(&w, 1048576, &c), Ok(()), "{row}");
        }
    }

    #[test]
    fn busbw_headers_give_their_size_unit() {
        assert_eq!(busbw_header("size busbw"), Some(Ok(None)));
        assert_eq!(busbw_header(" Size (B)  busbw (GB/s)"), Some(Ok(None)));
        assert_eq!(
            busbw_header("size(MiB),busbw(GB/s)"),
            Some(Ok(Some("mib".into())))
        );
        assert!(matches!(busbw_header("size [parsec] busbw"), Some(Err(_))));
        assert_eq!(
            busbw_header("size count type redop root time algbw busbw"),
            None
        );
        assert_eq!(busbw_header("sizes of busbw tables"), None);
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
