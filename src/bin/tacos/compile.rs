//! `tacos compile`: a topology's MSCCL algorithm directory, and `--check` of one.

use super::progress::ProgressHandle;
use super::{
    at_least_one, chunk_count, collective_kind, job_count, seed_count, CostArgs, TargetArgs,
    TopologyArgs,
};
use anyhow::bail;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tacos::collective::CollectiveKind;
use tacos::compile::{
    algorithm_dir, check_dir_with, check_target, compile, compiled_for, legacy_xml_files,
    short_range, short_size, topology_hash, write_dir, AlgorithmSet, CheckOptions, CompileOptions,
    CostOptions, Manifest, NcclBand, Placements, Progress, ProtoChoice, SizeRange, Stage, Written,
};
use tacos::msccl::{Profile, Target};
use tacos::topology::Topology;
use tacos::units::format_size;
use tacos_cli::report::{CompileCheckReport, CompileReport, RejectedCandidate, SCHEMA_VERSION};

#[derive(Debug, Args)]
pub struct CompileArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Directory to write, created whole or not at all: the algorithm files alone in
    /// DIR/msccl (point MSCCL_ALGO_DIR there) and manifest.json in DIR (replaces an
    /// earlier compiled directory; any other directory only with --force). With
    /// --feedback, the compiled directory to rewrite
    #[arg(long, value_name = "DIR", required_unless_present_any = ["check", "plugin_cache"])]
    pub out: Option<PathBuf>,
    /// Instead of compiling, feed nccl-tests measurements back into the compiled directory
    /// --out DIR. RESULTS are the outputs of the runs `tacos measure-plan` prints, named as
    /// it names them: tacos-*.txt measured with the set (NCCL_MSCCL_ENABLE=1), nccl-*.txt
    /// without it (=0), each collective both ways. Every band the set serves is compared,
    /// ours measured against NCCL measured and against the manifest's prediction; a band
    /// where ours measured slower at any size goes back to NCCL (its file cut around it,
    /// or removed) and DIR is rewritten whole, its manifest recording the measurements
    /// (`returned_to_nccl` names the bands returned). Results for another rank count, a
    /// collective DIR was not compiled for, or sizes outside its range are refused and
    /// nothing is written. With SPEC, DIR must have been compiled for it
    #[arg(long, value_name = "RESULTS", num_args = 1.., conflicts_with_all = [
        "check", "plugin_cache", "collectives", "sizes", "proto", "inplace", "seeds", "chunks",
        "no_baselines", "fast", "force",
    ])]
    pub feedback: Vec<PathBuf>,
    /// Instead of compiling, re-check a compiled directory: against its manifest (edited,
    /// missing, extra or stale files, every program re-verified) and for anything in
    /// DIR/msccl the executor would refuse (entries that are not algorithm XML, files over
    /// the target's limits, two files claiming one size range). The target is the one the
    /// manifest records, unless --target or a --max-* option names another; with SPEC the
    /// manifest's topology must be that one and every prediction is re-timed on it
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub check: Option<PathBuf>,
    /// Instead, fill the MSCCL scheduler plugin's cache with the set it serves to
    /// communicators of RANKS ranks, read from the plugin's own settings in the
    /// environment (TACOS_TOPOLOGY or NCCL_TOPO_FILE, TACOS_NODES, TACOS_TARGET,
    /// TACOS_CACHE_DIR, ...): what a job's prologue runs so the job serves from its first
    /// call. Prints the cache entry and, per collective and placement, what serves each
    /// range of sizes (a program file, or NCCL)
    #[arg(long, value_name = "RANKS", value_parser = at_least_one, conflicts_with_all = ["out", "check", "spec"])]
    pub plugin_cache: Option<usize>,
    /// Collectives, comma-separated: allreduce, allgather, reducescatter, alltoall
    /// [default: allreduce,allgather,reducescatter]
    #[arg(long, value_delimiter = ',', value_parser = collective_kind)]
    pub collectives: Option<Vec<CollectiveKind>>,
    /// Message sizes MIN..MAX, powers of two, in the executor's measure (the whole buffer
    /// for allgather, reducescatter and alltoall); one band per doubling
    /// [default: 1KiB..4GiB]
    #[arg(long, value_parser = size_range)]
    pub sizes: Option<SizeRange>,
    /// Protocol: auto (LL up to 512 KiB, Simple above), Simple, LL or LL128 [default: auto]
    #[arg(long, value_parser = proto)]
    pub proto: Option<ProtoChoice>,
    /// Buffer placements: both, inplace or outofplace [default: both]
    #[arg(long, value_parser = placements)]
    pub inplace: Option<Placements>,
    /// Seeds tried for every K, 1 to 4096 [default: 2]
    #[arg(long, value_parser = seeds)]
    pub seeds: Option<u64>,
    /// Chunks per NPU (K) tried, comma-separated; a K above the smallest is skipped where
    /// its chunks would be under 4 KiB [default: 1,2,4,8,16,32]
    #[arg(short = 'k', long, value_delimiter = ',', value_parser = chunk_count)]
    pub chunks: Option<Vec<usize>>,
    /// Leave the baselines out (no speedup against them is reported)
    #[arg(long)]
    pub no_baselines: bool,
    /// Start from the plugin's fast preset (bands of three doublings, one seed, K in
    /// 1,4,16, no baselines, candidates ranked by their schedules and only the winners
    /// lowered); other options still apply
    #[arg(long)]
    pub fast: bool,
    /// Worker threads (0: one per core; at most 256)
    #[arg(long, default_value_t = 0, value_parser = job_count)]
    pub jobs: usize,
    /// Replace an existing directory even if it is not a compiled one, or was compiled for
    /// another topology
    #[arg(long)]
    pub force: bool,
    /// No progress display
    #[arg(long)]
    pub quiet: bool,
    /// Print one JSON object instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cost: CostArgs,
    /// Serve a band only where our program is predicted faster than NCCL's best choice by
    /// more than this share (0.05: 5%) and than the cost profile's own measured error at
    /// the band's size; other bands are left to NCCL
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = margin)]
    pub nccl_margin: f64,
    /// Do not price NCCL's own algorithms: every band gets a program
    #[arg(long)]
    pub no_nccl: bool,
    /// What to write: msccl (MSCCL algorithm XML in DIR/msccl with DIR/manifest.json), or
    /// mscclpp (MSCCL++ execution plans in DIR/mscclpp for the MSCCL++ executor's NCCL shim,
    /// with plans.json and register.py: one plan per collective and size, each size of
    /// --sizes's doublings, kept where faster than NCCL; allreduce, allgather,
    /// reducescatter, broadcast; one placement, in place by default)
    #[arg(long, value_enum, default_value_t = Format::Msccl)]
    pub format: Format,
}

/// What `compile` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Msccl,
    Mscclpp,
}

fn margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if (0.0..=10.0).contains(&m) => Ok(m),
        _ => Err(format!("'{s}' must be a share from 0 to 10, e.g. 0.05")),
    }
}

/// The message alone: clap already names the argument.
fn message(e: tacos::Error) -> String {
    match e {
        tacos::Error::Compile {
            path: None,
            problem,
        } => problem,
        other => other.message(),
    }
}

fn size_range(s: &str) -> Result<SizeRange, String> {
    s.parse().map_err(message)
}

fn proto(s: &str) -> Result<ProtoChoice, String> {
    s.parse().map_err(message)
}

fn placements(s: &str) -> Result<Placements, String> {
    s.parse().map_err(message)
}

fn seeds(s: &str) -> Result<u64, String> {
    seed_count(s).map(|n| n as u64)
}

impl CompileArgs {
    /// The options the flags ask for, on top of the defaults or the fast preset.
    fn options(&self, topo: &Topology) -> tacos::Result<CompileOptions> {
        // With --alpha-beta, programs are timed by bare messages and NCCL does not compete.
        let cost = self.cost.executor(topo)?.map(|executor| CostOptions {
            model: executor.model,
            domain_size: executor.domain_size,
            nccl_margin: (!self.no_nccl).then_some(self.nccl_margin),
        });
        let base = if self.fast {
            CompileOptions::fast()
        } else {
            CompileOptions::default()
        };
        Ok(CompileOptions {
            collectives: self.collectives.clone().unwrap_or(base.collectives),
            sizes: self.sizes.unwrap_or(base.sizes),
            proto: self.proto.unwrap_or(base.proto),
            placements: self.inplace.unwrap_or(base.placements),
            seeds: self.seeds.unwrap_or(base.seeds),
            chunk_candidates: self.chunks.clone().unwrap_or(base.chunk_candidates),
            baselines: base.baselines && !self.no_baselines,
            target: self.target.target()?,
            cost,
            jobs: self.jobs,
            ..base
        })
    }
}

/// Warnings on stderr.
struct Warnings;

impl tacos::plugin::Log for Warnings {
    fn info(&self, _: &str) {}
    fn warn(&self, message: &str) {
        eprintln!("warning: {message}");
    }
}

/// Per collective and placement of a filled plugin cache: its bands and what serves them,
/// consecutive bands served alike told as one range.
fn print_served(filled: &tacos::plugin::Filled) {
    use tacos::plugin::ServedBy;
    let mut i = 0;
    while i < filled.bands.len() {
        let (kind, in_place, _, _) = filled.bands[i];
        let group: Vec<_> = filled.bands[i..]
            .iter()
            .take_while(|b| (b.0, b.1) == (kind, in_place))
            .collect();
        i += group.len();
        let placement = if in_place { "in place" } else { "out of place" };
        let mut runs: Vec<String> = Vec::new();
        let mut j = 0;
        while j < group.len() {
            let served = &group[j].3;
            let len = group[j..].iter().take_while(|b| &b.3 == served).count();
            let sizes = short_range(group[j].2.min_bytes, group[j + len - 1].2.max_bytes);
            let what = match served {
                ServedBy::Program(file) => file.clone(),
                ServedBy::Nccl => "NCCL (predicted as fast)".to_string(),
                ServedBy::NoProgram => "NCCL (no program)".to_string(),
            };
            runs.push(format!("{sizes} {what}"));
            j += len;
        }
        println!("  {kind} {placement}: {}", runs.join(", "));
    }
}

pub fn run(args: CompileArgs) -> anyhow::Result<()> {
    if let Some(ranks) = args.plugin_cache {
        // The plugin's memory limit, as the plugin would compile under: the same entry.
        tacos::plugin::set_memory_limit(&Warnings);
        let config = tacos::plugin::Config::from_process()?;
        for w in &config.warnings {
            tacos::plugin::Log::warn(&Warnings, w);
        }
        let filled =
            tacos::plugin::fill_cache(&config, ranks, &Warnings).map_err(anyhow::Error::msg)?;
        println!("{}", filled.dir.display());
        print_served(&filled);
        return Ok(());
    }
    if let Some(dir) = &args.check {
        // Without --target or a --max-* option the manifest's target is checked.
        let target = match args.target.given() {
            true => Some(args.target.target()?),
            false => None,
        };
        // With a topology, the manifest's is compared and every prediction re-timed.
        let topology = match args.topology.spec {
            Some(_) => Some(args.topology.topology()?),
            None => None,
        };
        return check(dir, target.as_ref(), topology.as_ref(), args.json);
    }
    let out = args
        .out
        .as_ref()
        .expect("clap requires --out without --check");
    if !args.feedback.is_empty() {
        if args.format == Format::Mscclpp {
            bail!("--feedback reads MSCCL algorithm directories; --format mscclpp sets are kept per size by their own plans.json");
        }
        // With a topology, the directory must have been compiled for it.
        let topology = match args.topology.spec {
            Some(_) => Some(args.topology.topology()?),
            None => None,
        };
        return super::compile_feedback::run(&args.feedback, out, topology.as_ref(), args.json);
    }
    let topo = args.topology.topology()?;
    if args.format == Format::Mscclpp {
        return super::compile_plans::run(&args, &topo, out);
    }
    let options = args.options(&topo)?;
    options.validate()?;
    // Refuse before a long compilation what the write would refuse after it, and a set
    // compiled for another cluster, which is not replaced by mistake.
    check_target(out, args.force)?;
    if let Some((name, hash)) = compiled_for(out).filter(|_| !args.force) {
        if hash != topology_hash(&topo) {
            bail!(
                "{} holds algorithms compiled for {name}, not for {}; use --force to replace them, or another --out",
                out.display(),
                topo.name()
            );
        }
    }
    let bar = ProgressHandle::bar("candidates", 0, args.quiet || args.json);
    let report = |p: Progress| {
        if p.done == 0 {
            let label = match p.stage {
                Stage::Candidates => "candidates",
                Stage::Selecting => "selecting",
            };
            bar.stage(label, p.total as u64);
        }
        bar.set(p.done as u64);
    };
    let started = Instant::now();
    let set = compile(&topo, &options, &report);
    drop(bar);
    let set = set?;
    // The older fork reads a list of files, not a directory, and only a few of them.
    let xml_files = match set.manifest.options.target.profile {
        Profile::MscclLegacy => Some(legacy_xml_files(&set, &algorithm_dir(out))?),
        _ => None,
    };
    // A set compiled again starts from the model's choices: say what measurements it drops.
    let returned = Manifest::read(out).map_or(0, |old| old.returned_to_nccl.len());
    let written = write_dir(&set, out, args.force)?;
    if returned > 0 && written != Written::AlreadyThere {
        eprintln!(
            "warning: the set replaced had {returned} band(s) returned to NCCL by measurements (compile --feedback); feed the measurements back to this one too"
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let loading = Loading { out, xml_files };
    if args.json {
        print_json(&set, &loading, written, seconds)
    } else {
        print_table(&set, &loading, written, seconds);
        Ok(())
    }
}

/// Where a written set is and what the runtime is told to load it.
struct Loading<'a> {
    out: &'a Path,
    /// `MSCCL_XML_FILES` for the older fork; None where `MSCCL_ALGO_DIR` names the files.
    xml_files: Option<String>,
}

fn written_word(w: Written) -> &'static str {
    match w {
        Written::Created => "created",
        Written::Replaced => "replaced",
        Written::AlreadyThere => "unchanged",
    }
}

fn print_json(
    set: &AlgorithmSet,
    loading: &Loading,
    written: Written,
    seconds: f64,
) -> anyhow::Result<()> {
    let out = loading.out;
    let value = CompileReport {
        schema_version: SCHEMA_VERSION,
        command: "compile",
        dir: out.display().to_string(),
        msccl_algo_dir: algorithm_dir(out).display().to_string(),
        msccl_xml_files: loading.xml_files.clone(),
        target: set.manifest.options.target.to_string(),
        written: written_word(written),
        elapsed_ms: seconds * 1e3,
        manifest: &set.manifest,
        rejected: set.rejected.iter().map(RejectedCandidate::new).collect(),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

fn print_table(set: &AlgorithmSet, loading: &Loading, written: Written, seconds: f64) {
    let out = loading.out;
    let m = &set.manifest;
    println!(
        "{} {} for {} ({} NPUs), target {}: {} files in {seconds:.1} s; figures at each band's smallest size",
        written_word(written),
        out.display(),
        m.topology.name,
        m.topology.npus,
        m.options.target,
        m.entries.len()
    );
    match &loading.xml_files {
        Some(files) if files.is_empty() => {
            println!("no file for the older msccl to load: every band is left to NCCL")
        }
        Some(files) => println!("point the older msccl at the files: MSCCL_XML_FILES={files}"),
        None => println!(
            "point the executor at the algorithm files: MSCCL_ALGO_DIR={}",
            algorithm_dir(out).display()
        ),
    }
    let mut group = None;
    for e in &m.entries {
        if group != Some((e.collective, e.in_place)) {
            group = Some((e.collective, e.in_place));
            let placement = if e.in_place {
                "in place"
            } else {
                "out of place"
            };
            println!("\n{}, {placement}", e.collective);
            println!(
                "  {:<12} {:<36} {:<20} {:<6} {:>11} {:>8} {:>6}  {:<22} vs best baseline",
                "band", "file", "algorithm", "proto", "time (us)", "algbw", "eff.", "NCCL (us)"
            );
        }
        for (i, b) in e.bands.iter().enumerate() {
            let band_end = match e.bands.get(i + 1) {
                Some(next) => next.size_bytes - 1,
                None => e.max_bytes,
            };
            let baseline = match (b.speedup_vs_baseline, b.best_baseline) {
                (Some(s), Some(base)) => format!("{s:.2}x {}", base_name(&base)),
                _ => "-".into(),
            };
            println!(
                "  {:<12} {:<36} {:<20} {:<6} {:>11.3} {:>8.2} {:>6.3}  {:<22} {}",
                band_label(b.size_bytes, band_end),
                e.file,
                e.algorithm.to_string(),
                e.proto,
                b.time_us,
                b.algbw_gbps,
                b.efficiency,
                nccl_label(b.nccl.as_ref()),
                baseline
            );
        }
    }
    if !m.left_to_nccl.is_empty() {
        println!(
            "
left to NCCL (no program predicted faster than NCCL's choice by the margin)"
        );
        println!(
            "  {:<14} {:<12} {:<12} {:>12}  {:<22}",
            "collective", "placement", "band", "ours (us)", "NCCL (us)"
        );
        for l in &m.left_to_nccl {
            let placement = if l.in_place {
                "in place"
            } else {
                "out of place"
            };
            println!(
                "  {:<14} {:<12} {:<12} {:>12.3}  {:<22}",
                l.collective.to_string(),
                placement,
                band_label(l.min_bytes, l.max_bytes),
                l.program_us,
                nccl_label(Some(&l.nccl))
            );
        }
    }
    let failed: Vec<_> = set
        .rejected
        .iter()
        .filter(|r| r.failed_verification)
        .collect();
    let skipped = set.rejected.len() - failed.len();
    if skipped > 0 {
        println!("{skipped} candidate programs skipped (synthesis or the target's limits; --json lists them)");
    }
    for r in failed {
        println!(
            "dropped {} for {} at {}: {}",
            r.candidate,
            r.collective,
            format_size(r.band.min_bytes),
            r.reason
        );
    }
}

/// `1K..2K` for a band ending just before a power of two, `512M..1G` for the last.
pub(super) fn band_label(min: u64, max: u64) -> String {
    let end = max
        .checked_add(1)
        .filter(|n| n.is_power_of_two())
        .unwrap_or(max);
    format!("{}..{}", short_size(min), short_size(end))
}

fn base_name(c: &tacos::compile::Candidate) -> String {
    match c {
        tacos::compile::Candidate::Baseline { name } => name.to_string(),
        other => other.to_string(),
    }
}

fn check(
    dir: &Path,
    target: Option<&Target>,
    topology: Option<&Topology>,
    json: bool,
) -> anyhow::Result<()> {
    let plan_set = dir
        .join(tacos::compile::plans::PLAN_DIR)
        .join(tacos::compile::plans::PLAN_MANIFEST);
    if plan_set.is_file() && !dir.join(tacos::compile::MANIFEST_FILE).is_file() {
        return super::compile_plans::check(dir, json);
    }
    let options = CheckOptions {
        target,
        topology,
        ..CheckOptions::default()
    };
    let report = check_dir_with(dir, &options)?;
    let checked_for = report.target.as_ref().map(|t| t.to_string());
    if json {
        let value = CompileCheckReport::new(dir.display().to_string(), &report);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if let (Some(m), Some(t)) = (&report.manifest, &checked_for) {
            println!(
                "{}: {} of {} files checked for target {t}, compiled by tacos {} for {} ({} NPUs)",
                dir.display(),
                report.files_checked,
                m.entries.len(),
                m.tool_version,
                m.topology.name,
                m.topology.npus
            );
        }
        for p in &report.problems {
            println!("  {p}");
        }
        if report.is_ok() {
            println!(
                "ok: every file matches the manifest, verifies and loads in the target; {} holds algorithm files only",
                algorithm_dir(dir).display()
            );
        }
    }
    if let Some(first) = report.problems.first() {
        return Err(super::Reported(format!(
            "{}: {} problem(s), first: {first}",
            dir.display(),
            report.problems.len()
        ))
        .into());
    }
    Ok(())
}

/// NCCL's choice as the table shows it: its time, algorithm and protocol.
fn nccl_label(nccl: Option<&NcclBand>) -> String {
    nccl.map_or("-".into(), |n| {
        format!("{:.3} {}/{}", n.time_us, n.algorithm, n.protocol)
    })
}
