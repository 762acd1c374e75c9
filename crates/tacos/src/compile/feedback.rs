//! Measurements fed back into a compiled set (`tacos compile --feedback`): nccl-tests run
//! on the cluster with the set loaded and without it, as `tacos measure-plan` prints the
//! runs, compared band by band. Every band where our program measured slower than NCCL at
//! any size goes back to NCCL: its file is cut around it (or removed), and the manifest
//! records what was measured and why the band went back.
//!
//! The cost model chose each band by a prediction; these are the cluster's own figures, so
//! they overrule it, in one direction only: a measured loss takes a band from the set, but
//! nothing puts back a band the model left to NCCL (no program of ours ran there).
//!
//! Which run a file holds is told by its name, as `measure-plan` writes it:
//! [`WITH_SET_PREFIX`] (`tacos-allgather.txt`) with the set, [`WITHOUT_SET_PREFIX`]
//! (`nccl-allgather.txt`) without it. The output itself cannot say: the executor prints
//! the same table either way.

use super::dir::loader_problems;
use super::manifest::{BandPrediction, Entry, Manifest, MeasuredSize, ReturnedToNccl};
use super::select::{file_name, AlgorithmSet, CompiledFile};
use super::sha256_hex;
use crate::collective::CollectiveKind;
use crate::cost::nccltests::{self, Measured, ReadOptions, MAX_FILE_BYTES};
use crate::error::{echo, Error, Result};
use crate::fsio;
use crate::msccl::{parse_program, write_program, Target};
use crate::units::format_size;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The name prefix of an nccl-tests output measured with the compiled set loaded
/// (`NCCL_MSCCL_ENABLE=1`).
pub const WITH_SET_PREFIX: &str = "tacos-";
/// The name prefix of an nccl-tests output measured without it (`NCCL_MSCCL_ENABLE=0`):
/// stock NCCL's own choice at every size.
pub const WITHOUT_SET_PREFIX: &str = "nccl-";

/// Which of the two runs a results file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Run {
    /// With the compiled set loaded: our programs where it serves a size.
    WithSet,
    /// Without it: NCCL's own choice everywhere.
    WithoutSet,
}

impl Run {
    /// The run a file holds, by its name's prefix, and the collective the rest of the name
    /// names where it names one (`tacos-allgather.txt`: with the set, All-Gather).
    ///
    /// ```
    /// use tacos::compile::Run;
    /// use tacos::collective::CollectiveKind;
    /// let (run, kind) = Run::of_file("out/nccl-allgather.txt".as_ref()).unwrap();
    /// assert_eq!((run, kind), (Run::WithoutSet, Some(CollectiveKind::AllGather)));
    /// assert!(Run::of_file("allgather.txt".as_ref()).is_err());
    /// ```
    pub fn of_file(path: &Path) -> Result<(Run, Option<CollectiveKind>)> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (run, rest) = if let Some(rest) = name.strip_prefix(WITH_SET_PREFIX) {
            (Run::WithSet, rest)
        } else if let Some(rest) = name.strip_prefix(WITHOUT_SET_PREFIX) {
            (Run::WithoutSet, rest)
        } else {
            return Err(Error::compile_in(
                path,
                format!(
                    "the name must say which run it holds, as `tacos measure-plan` writes them: \
                 {WITH_SET_PREFIX}... measured with the set (NCCL_MSCCL_ENABLE=1), \
                 {WITHOUT_SET_PREFIX}... without it (NCCL_MSCCL_ENABLE=0)",
                ),
            ));
        };
        let word = rest.split(['-', '.']).next().unwrap_or_default();
        Ok((run, word.parse().ok()))
    }

    /// The run in words, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Run::WithSet => "with the set",
            Run::WithoutSet => "without the set",
        }
    }
}

/// One results file, read and matched to a compiled set.
#[derive(Clone, Debug)]
pub struct Results {
    pub file: String,
    pub run: Run,
    /// Its tables, out of place, and in place too for collectives the set has in-place
    /// programs of; only the sizes inside the compiled range.
    pub tables: Vec<Measured>,
    /// Sizes it measured outside the compiled range, left aside.
    pub notes: Vec<String>,
}

/// Reads the nccl-tests output at `path` for feedback to `manifest`'s set: refused unless
/// its run is named (`Run::of_file`), every table measured the set's rank count and one
/// of its collectives, and each table has sizes inside the compiled range. Rows outside
/// that range are left aside with a note: nccl-tests rounds each size down to a whole
/// number of elements per rank, so on a rank count that is not a power of two even the
/// runs `measure-plan` prints start below the range.
pub fn read_results(path: &Path, manifest: &Manifest) -> Result<Results> {
    let (run, named) = Run::of_file(path)?;
    let text = fsio::read_text(path, "nccl-tests output", MAX_FILE_BYTES)?;
    let origin = path.display().to_string();
    let read = |in_place: bool| {
        let options = ReadOptions {
            collective: named,
            in_place,
            ranks: None,
        };
        nccltests::parse(&text, &origin, &options)
    };
    let out_of_place = read(false)?;
    let mut notes = Vec::new();
    for table in &out_of_place {
        notes.extend(matches(table, manifest)?);
    }
    let has_in_place =
        |kind: CollectiveKind| manifest.options.placements.flags(kind).contains(&true);
    let mut tables = Vec::new();
    if out_of_place.iter().any(|t| has_in_place(t.collective)) {
        let in_place = read(true).map_err(|e| {
            e.context("the set has in-place programs: feedback reads the in-place times nccl-tests prints beside the out-of-place ones")
        })?;
        tables.extend(in_place.into_iter().filter(|t| has_in_place(t.collective)));
    }
    tables.splice(0..0, out_of_place);
    let compiled = manifest.options.sizes.min_bytes..=manifest.options.sizes.max_bytes;
    for table in &mut tables {
        table.points.retain(|p| compiled.contains(&p.bytes));
    }
    Ok(Results {
        file: origin,
        run,
        tables,
        notes,
    })
}

/// An error unless `table` measured the set's ranks, one of its collectives, and some
/// size it was compiled for; the note for rows outside the compiled sizes, if any.
fn matches(table: &Measured, manifest: &Manifest) -> Result<Option<String>> {
    let (npus, topology) = (manifest.topology.npus, &manifest.topology.name);
    if table.ranks != npus {
        return Err(Error::compile_in(
            &table.origin,
            format!(
                "measured on {} ranks ({}), but the set was compiled for {npus} ({})",
                table.ranks,
                table.ranks_from,
                echo(topology)
            ),
        ));
    }
    let collectives = &manifest.options.collectives;
    if !collectives.contains(&table.collective) {
        let held: Vec<&str> = collectives.iter().map(|k| k.name()).collect();
        return Err(Error::compile_in(
            &table.origin,
            format!(
                "measures {}, which the set was not compiled for (it holds {})",
                table.collective,
                held.join(", ")
            ),
        ));
    }
    let sizes = manifest.options.sizes;
    let compiled = sizes.min_bytes..=sizes.max_bytes;
    let outside: Vec<u64> = table
        .points
        .iter()
        .map(|p| p.bytes)
        .filter(|b| !compiled.contains(b))
        .collect();
    let range = format!(
        "{}..{}",
        format_size(sizes.min_bytes),
        format_size(sizes.max_bytes)
    );
    if outside.len() == table.points.len() {
        let (lo, hi) = (outside.iter().min(), outside.iter().max());
        return Err(Error::compile_in(&table.origin, format!("measures {}..{}, none of it inside the sizes the set was compiled for ({range}); run the sizes `tacos measure-plan` prints", format_size(lo.copied().unwrap_or(0)),
            format_size(hi.copied().unwrap_or(0))
        )));
    }
    Ok((!outside.is_empty()).then(|| {
        format!(
            "{}: {} of its {} sizes lie outside the compiled {range} and are left aside",
            table.origin,
            outside.len(),
            table.points.len()
        )
    }))
}

/// What the measurements say of one band the set served.
#[derive(Clone, Debug, PartialEq)]
pub struct BandFeedback {
    pub collective: CollectiveKind,
    pub in_place: bool,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The file that served it.
    pub file: String,
    /// The band's predictions, with `measured` what this feedback measured (as before
    /// where it measured nothing).
    pub prediction: BandPrediction,
    pub outcome: Outcome,
}

/// What became of a served band.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Ours measured at least as fast as NCCL at every size measured in it.
    Kept,
    /// Ours measured slower at some size (why, in words): the band is NCCL's now.
    Returned(String),
    /// No size inside it was measured both ways: kept as predicted.
    Unmeasured,
}

/// A set with measurements applied.
#[derive(Clone, Debug)]
pub struct Feedback {
    /// The set to write: kept files byte for byte, cut files rewritten, the manifest
    /// recording every measurement and every band returned.
    pub set: AlgorithmSet,
    /// Every band the set served, in the manifest's order.
    pub bands: Vec<BandFeedback>,
    /// Sizes measured one way only, or outside the compiled range, left aside.
    pub notes: Vec<String>,
}

/// One size's time, and the table it came from.
struct Timed {
    time_us: f64,
    origin: String,
}

/// Every measured size of one run, collective and placement.
type Series = BTreeMap<u64, Timed>;

/// Applies `results` to `set` (read from its directory): each served band is compared, our
/// measured time against NCCL's at every size measured both ways inside it, and a band
/// where ours is slower at any of them leaves the set. A file whose bands all stay is kept
/// byte for byte; one that loses some is cut into the runs of bands left, each the same
/// program with a narrower size range, checked again against the set's target. Refused,
/// with nothing to write: a collective measured one way only, a size measured twice in
/// one run.
///
/// ```no_run
/// use std::path::Path;
/// use tacos::compile::{apply_feedback, read_results, read_set, write_dir};
/// # fn main() -> tacos::Result<()> {
/// let dir = Path::new("h100-set");
/// let set = read_set(dir, None)?;
/// let results = ["tacos-allgather.txt", "nccl-allgather.txt"]
///     .iter()
///     .map(|f| read_results(Path::new(f), &set.manifest))
///     .collect::<tacos::Result<Vec<_>>>()?;
/// let feedback = apply_feedback(&set, &results)?;
/// write_dir(&feedback.set, dir, false)?;
/// # Ok(())
/// # }
/// ```
pub fn apply(set: &AlgorithmSet, results: &[Results]) -> Result<Feedback> {
    let manifest = &set.manifest;
    let series = collect(results)?;
    let mut notes: Vec<String> = results.iter().flat_map(|r| r.notes.clone()).collect();
    notes.extend(one_way_only(&series));
    let mut entries = Vec::new();
    let mut files = Vec::new();
    let mut returned = manifest.returned_to_nccl.clone();
    let mut bands = Vec::new();
    for entry in &manifest.entries {
        let file = set
            .files
            .iter()
            .find(|f| f.name == entry.file)
            .ok_or_else(|| {
                Error::compile_in(&entry.file, "listed in the manifest, not in the set")
            })?;
        let with = series.get(&(Run::WithSet, entry.collective.name(), entry.in_place));
        let without = series.get(&(Run::WithoutSet, entry.collective.name(), entry.in_place));
        let judged: Vec<BandFeedback> = entry
            .bands
            .iter()
            .enumerate()
            .map(|(i, band)| {
                let max_bytes = entry
                    .bands
                    .get(i + 1)
                    .map_or(entry.max_bytes, |next| next.size_bytes - 1);
                judge(entry, band, max_bytes, with, without)
            })
            .collect();
        let kept_runs = kept_runs(&judged);
        if kept_runs.len() == 1 && kept_runs[0].len() == judged.len() {
            entries.push(Entry {
                bands: judged.iter().map(|b| b.prediction.clone()).collect(),
                ..entry.clone()
            });
            files.push(file.clone());
        } else {
            for run in kept_runs {
                let (entry, file) = cut(entry, file, run, &manifest.options.target)?;
                entries.push(entry);
                files.push(file);
            }
        }
        returned.extend(judged.iter().filter_map(|b| match &b.outcome {
            Outcome::Returned(reason) => Some(ReturnedToNccl {
                collective: b.collective,
                in_place: b.in_place,
                min_bytes: b.min_bytes,
                max_bytes: b.max_bytes,
                file: b.file.clone(),
                algorithm: entry.algorithm,
                prediction: b.prediction.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }));
        bands.extend(judged);
    }
    // In the manifest's own order: by collective as compiled, in place first, by size.
    let order = |kind: CollectiveKind| manifest.options.collectives.iter().position(|&k| k == kind);
    returned.sort_by_key(|r| (order(r.collective), !r.in_place, r.min_bytes));
    let manifest = Manifest {
        entries,
        returned_to_nccl: returned,
        ..manifest.clone()
    };
    Ok(Feedback {
        set: AlgorithmSet {
            manifest,
            files,
            rejected: Vec::new(),
        },
        bands,
        notes,
    })
}

/// Every table's sizes by (run, collective, placement); a size two tables of one run give
/// is refused, naming both (a second run of the same sizes, or `-d all`, is not one
/// measurement).
fn collect(results: &[Results]) -> Result<BTreeMap<(Run, &'static str, bool), Series>> {
    let mut series: BTreeMap<(Run, &'static str, bool), Series> = BTreeMap::new();
    for r in results {
        for table in &r.tables {
            let key = (r.run, table.collective.name(), table.in_place);
            let sizes = series.entry(key).or_default();
            for point in &table.points {
                if let Some(earlier) = sizes.get(&point.bytes) {
                    return Err(Error::compile_in(&table.origin, format!("{} {} at {} bytes was measured already, by {}: give one measurement of each size per run (one data type, one run)", table.collective,
                        r.run.name(),
                        point.bytes,
                        earlier.origin
                    )));
                }
                sizes.insert(
                    point.bytes,
                    Timed {
                        time_us: point.time_us,
                        origin: table.origin.clone(),
                    },
                );
            }
        }
    }
    let kinds = |run: Run| -> Vec<&'static str> {
        let mut kinds: Vec<&str> = series.keys().filter(|k| k.0 == run).map(|k| k.1).collect();
        kinds.dedup();
        kinds
    };
    let (with, without) = (kinds(Run::WithSet), kinds(Run::WithoutSet));
    let one_way = with
        .iter()
        .filter(|k| !without.contains(k))
        .map(|k| (k, Run::WithSet, Run::WithoutSet))
        .chain(
            without
                .iter()
                .filter(|k| !with.contains(k))
                .map(|k| (k, Run::WithoutSet, Run::WithSet)),
        )
        .next();
    if let Some((kind, measured, missing)) = one_way {
        let prefix = match missing {
            Run::WithSet => WITH_SET_PREFIX,
            Run::WithoutSet => WITHOUT_SET_PREFIX,
        };
        let by: Vec<&str> = results
            .iter()
            .filter(|r| r.run == measured && r.tables.iter().any(|t| t.collective.name() == *kind))
            .map(|r| r.file.as_str())
            .collect();
        return Err(Error::compile(format!(
            "{kind} was measured {} ({}) but not {}: give its {prefix}{kind}.txt too; a band is judged on both runs",
            measured.name(),
            by.join(", "),
            missing.name()
        )));
    }
    Ok(series)
}

/// A note for each collective and placement with sizes measured in one run only.
fn one_way_only(series: &BTreeMap<(Run, &'static str, bool), Series>) -> Vec<String> {
    let mut notes = Vec::new();
    for (&(_, kind, in_place), with) in series.iter().filter(|(k, _)| k.0 == Run::WithSet) {
        let Some(without) = series.get(&(Run::WithoutSet, kind, in_place)) else {
            continue;
        };
        let placement = if in_place { "in place" } else { "out of place" };
        for (run, sizes, other) in [
            (Run::WithSet, with, without),
            (Run::WithoutSet, without, with),
        ] {
            let alone: Vec<String> = sizes
                .keys()
                .filter(|s| !other.contains_key(s))
                .map(|&s| format_size(s))
                .collect();
            if !alone.is_empty() {
                notes.push(format!(
                    "{kind} {placement}: {} measured {} only, left aside",
                    alone.join(", "),
                    run.name()
                ));
            }
        }
    }
    notes
}

/// The band of `entry` from `band.size_bytes` to `max_bytes`, judged on the sizes measured
/// both ways inside it.
fn judge(
    entry: &Entry,
    band: &BandPrediction,
    max_bytes: u64,
    with: Option<&Series>,
    without: Option<&Series>,
) -> BandFeedback {
    let mut points = Vec::new();
    if let (Some(with), Some(without)) = (with, without) {
        for (&size, ours) in with.range(band.size_bytes..=max_bytes) {
            if let Some(nccl) = without.get(&size) {
                points.push(MeasuredSize {
                    size_bytes: size,
                    ours_us: ours.time_us,
                    nccl_us: nccl.time_us,
                });
            }
        }
    }
    let slower: Vec<&MeasuredSize> = points.iter().filter(|p| p.ours_us > p.nccl_us).collect();
    let outcome = match slower.first() {
        _ if points.is_empty() => Outcome::Unmeasured,
        None => Outcome::Kept,
        Some(first) => Outcome::Returned(format!(
            "measured slower than NCCL at {} of {} size(s), first at {}: ours {:.3} us, NCCL {:.3} us",
            slower.len(),
            points.len(),
            format_size(first.size_bytes),
            first.ours_us,
            first.nccl_us
        )),
    };
    let mut prediction = band.clone();
    if !points.is_empty() {
        prediction.measured = points;
    }
    BandFeedback {
        collective: entry.collective,
        in_place: entry.in_place,
        min_bytes: band.size_bytes,
        max_bytes,
        file: entry.file.clone(),
        prediction,
        outcome,
    }
}

/// The runs of consecutive bands that stay, in order.
fn kept_runs(judged: &[BandFeedback]) -> Vec<&[BandFeedback]> {
    judged
        .split(|b| matches!(b.outcome, Outcome::Returned(_)))
        .filter(|run| !run.is_empty())
        .collect()
}

/// `file`'s program serving the bands of `run` alone: its size range cut to theirs, its
/// name and hash the new file's, checked against `target`'s loader rules again.
fn cut(
    entry: &Entry,
    file: &CompiledFile,
    run: &[BandFeedback],
    target: &Target,
) -> Result<(Entry, CompiledFile)> {
    let (first, last) = (&run[0], &run[run.len() - 1]);
    let (min_bytes, max_bytes) = (first.min_bytes, last.max_bytes);
    let mut program = parse_program(&file.xml, &file.name)?;
    program.min_bytes = Some(min_bytes);
    program.max_bytes = Some(max_bytes);
    let refused = loader_problems(&program, target);
    if !refused.is_empty() {
        return Err(Error::compile_in(
            &file.name,
            format!(
                "cut to {min_bytes}..{max_bytes} bytes, target {target} would refuse it: {}",
                refused.join("; ")
            ),
        ));
    }
    let xml = write_program(&program);
    let name = file_name(entry.collective, entry.in_place, min_bytes, max_bytes);
    let entry = Entry {
        min_bytes,
        max_bytes,
        file: name.clone(),
        sha256: sha256_hex(xml.as_bytes()),
        bands: run.iter().map(|b| b.prediction.clone()).collect(),
        ..entry.clone()
    };
    Ok((entry, CompiledFile { name, xml }))
}
