//! `tacos verify`: check that an MSCCL algorithm XML file loads in a target's loader and
//! computes its collective, and time it on a topology; or verify an MSCCL++ execution
//! plan (`super::verify_plan`).

use super::{bandwidth, collective_kind, latency, size, CostArgs, TargetArgs, TopologyArgs};
use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use tacos::bounds::Bounds;
use tacos::collective::CollectiveKind;
use tacos::collective::{Collective, CollectiveSpec};
use tacos::msccl::{read_program, simulate_program, verify, Program, Target, VerifyOptions};
use tacos::msccl::{VerifyReport, WHOLE_RANGE_MAX_BYTES};
use tacos::units::format_size;
use tacos_cli::report::VerifyReport as VerifyJson;
use tacos_cli::report::{
    BoundsReport, CollectiveInfo, ProblemInfo, ProgramInfo, Timing, TopologyInfo, VerifyCheck,
};

/// Exit status for a file that cannot be loaded (unreadable, not MSCCL XML, or refused by
/// the target's loader); 1 stays "loads but is wrong".
pub const CANNOT_LOAD: i32 = 3;

/// Exit status for a usage error, as clap's.
pub const USAGE: i32 = 2;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the file loads in the target and is correct; 1 when it loads but is \
wrong (deadlock, FIFO mismatch, race, wrong result) or cannot be timed as asked; 2 for a usage \
error; 3 when it cannot be loaded (unreadable, not MSCCL XML, or breaking a rule of the target's \
loader). With --json, stdout holds exactly one JSON object in every case."
)]
pub struct VerifyArgs {
    /// MSCCL algorithm XML file, or MSCCL++ execution plan (JSON)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Topology to time the program on, as `tacos synth` takes it (rank r on the r-th
    /// NPU); without it nothing is timed
    #[arg(value_name = "SPEC", requires = "size")]
    pub spec: Option<String>,
    /// Collective size to time the program for (nccl-tests' convention), e.g. 1GiB; for
    /// an MSCCL++ plan, the message size whose chunk rules to check (the output size for
    /// allgather, else the input size)
    #[arg(short, long, value_parser = size)]
    pub size: Option<u64>,
    /// Bandwidth of links the spec leaves unspecified, GB/s
    #[arg(long, default_value_t = 50.0, value_name = "GBPS", value_parser = bandwidth)]
    pub bandwidth: f64,
    /// Latency (alpha) of links the spec leaves unspecified, microseconds
    #[arg(long, default_value_t = 0.5, value_name = "US", value_parser = latency)]
    pub latency: f64,
    /// Check the program as this collective instead of the one its coll attribute names
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// Root rank of a rooted collective (a plan's broadcast too; default: the one GPU that only sends, for
    /// broadcast and scatter, or only receives, for reduce and gather, else the first
    /// rank for which the program is correct)
    #[arg(long)]
    pub root: Option<usize>,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// Succeeds only when the program loads in the target and is correct; exits with
/// `CANNOT_LOAD` when it cannot be loaded, `USAGE` for a limit of 0.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    if let Some(text) = super::verify_plan::plan_text(&args.file) {
        return super::verify_plan::run(&args, &text);
    }
    let file = args.file.display().to_string();
    if args.size.is_some() && args.spec.is_none() {
        exit_with(
            USAGE,
            "--size times an MSCCL XML file on a topology: give the SPEC too",
        );
    }
    let target = match args.target.target() {
        Ok(t) => t,
        Err(e) => {
            if args.json {
                print_json(&VerifyJson {
                    error: Some(e.to_string()),
                    ..VerifyJson::unread(file.clone(), None)
                })?;
            }
            exit_with(USAGE, &e.to_string());
        }
    };
    let program = match read_program(&args.file) {
        Ok(p) => p,
        Err(e) => {
            if args.json {
                print_json(&VerifyJson {
                    load_error: Some(e.to_string()),
                    ..VerifyJson::unread(file.clone(), Some(target.to_string()))
                })?;
            }
            exit_with(CANNOT_LOAD, &e.to_string());
        }
    };
    let warnings: Vec<String> = program
        .inferred
        .iter()
        .map(|w| format!("{file}: {w}"))
        .collect();
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let options = VerifyOptions {
        collective: args.collective,
        root: args.root,
        target: target.clone(),
        ..VerifyOptions::default()
    };
    let report = verify(&program, &options);
    let timing = match (&args.spec, args.size) {
        (Some(spec), Some(size)) if report.computes() => time(&args, spec, size, &program, &report)
            .map(Some)
            .map_err(|e| e.to_string()),
        _ => Ok(None),
    };
    let kind = report
        .collective
        .map_or(program.collective.clone(), |k| k.to_string());
    if args.json {
        let timed = timing.as_ref().ok().and_then(|t| t.as_ref());
        let size = timed.map(|t| t.spec.size_bytes);
        print_json(&VerifyJson {
            warnings,
            collective: Some(CollectiveInfo::program(
                kind.clone(),
                report.root,
                program.gpus.len(),
                size,
            )),
            topology: timed.map(|t| t.topology.clone()),
            timing: timed.map(|t| Timing::new(&t.spec, t.time_ps, &t.bounds)),
            bounds: timed.map(|t| BoundsReport::new(&t.bounds)),
            error: timing.as_ref().err().cloned(),
            ..summary(&file, &target, &program, &report)
        })?;
    } else {
        print_text(&file, &target, &program, &report, &kind);
        if let Ok(Some(t)) = &timing {
            let figures = Timing::new(&t.spec, t.time_ps, &t.bounds);
            println!(
                "time                 {:.3} us on {} for {} (algbw {:.2} GB/s, busbw {:.2} GB/s, efficiency {:.3})",
                figures.time_us,
                t.topology.name,
                format_size(t.spec.size_bytes),
                figures.algbw_gbps,
                figures.busbw_gbps,
                figures.efficiency
            );
        }
    }
    if !report.loads() {
        let n = report.rule_breaks.len();
        exit_with(
            CANNOT_LOAD,
            &format!(
                "{file} does not load in {target}: {n} loader rule(s) broken: {}",
                report.rule_breaks[0]
            ),
        );
    }
    if !report.computes() {
        let n = report.problems.len() + report.unlisted;
        let first = report
            .problems
            .first()
            .map_or(String::new(), |p| format!(": {p}"));
        return Err(super::Reported(format!(
            "{file} is not a correct {kind} program ({n} problem(s)){first}"
        ))
        .into());
    }
    if let Err(e) = timing {
        return Err(super::Reported(e.to_string()).into());
    }
    Ok(())
}

/// A program timed on a topology.
struct Timed {
    topology: TopologyInfo,
    /// The collective timed: rank r on the r-th alive NPU.
    spec: CollectiveSpec,
    time_ps: u64,
    bounds: Bounds,
}

/// Times the program, as the collective `checked` found it computes, on the topology
/// `spec` for `size` bytes.
fn time(
    args: &VerifyArgs,
    spec: &str,
    size: u64,
    program: &Program,
    checked: &VerifyReport,
) -> anyhow::Result<Timed> {
    let topo = TopologyArgs {
        spec: Some(spec.to_string()),
        bandwidth: args.bandwidth,
        latency: args.latency,
        fail_npus: None,
        fail_links: None,
        unwind: None,
    }
    .topology()?;
    let sim = match args.cost.executor(&topo)? {
        Some(executor) => executor.simulate_program(&topo, program, size)?,
        None => simulate_program(&topo, program, size)?,
    };
    let kind = checked
        .collective
        .or_else(|| program.collective_kind())
        .with_context(|| format!("unknown collective '{}'", program.collective))?;
    let npus: Vec<usize> = topo
        .alive_npus()
        .into_iter()
        .take(program.gpus.len())
        .collect();
    let spec = CollectiveSpec {
        kind,
        root: kind
            .has_root()
            .then(|| npus.get(checked.root.unwrap_or(0)).copied())
            .flatten(),
        npus,
        chunks_per_npu: 1,
        size_bytes: size,
    };
    let bounds = Bounds::new(&topo, &Collective::new(&topo, spec.clone())?);
    Ok(Timed {
        topology: TopologyInfo::new(&topo),
        spec,
        time_ps: sim.time_ps,
        bounds,
    })
}

/// The layouts checked, as words.
fn layouts(report: &VerifyReport) -> Vec<&'static str> {
    report
        .in_place_checked
        .iter()
        .map(|&p| if p { "in place" } else { "out of place" })
        .collect()
}

/// The report as JSON, the collective and timing aside.
fn summary(file: &str, target: &Target, program: &Program, report: &VerifyReport) -> VerifyJson {
    VerifyJson {
        loads: report.loads(),
        rule_breaks: report.rule_breaks.clone(),
        program: Some(ProgramInfo {
            name: program.name.clone(),
            gpus: program.gpus.len(),
            channels: program.nchannels,
            chunks_per_loop: program.nchunksperloop,
            proto: program.proto.name(),
            min_bytes: program.min_bytes.unwrap_or(0),
            max_bytes: program.max_bytes.unwrap_or(WHOLE_RANGE_MAX_BYTES),
            threadblocks: program.gpus.iter().map(|g| g.threadblocks.len()).sum(),
        }),
        check: Some(VerifyCheck {
            layouts_checked: layouts(report),
            steps: report.steps,
            messages: report.messages,
            problems: report
                .problems
                .iter()
                .map(|p| ProblemInfo {
                    kind: p.kind.name(),
                    file: None,
                    message: p.message.clone(),
                })
                .collect(),
            unlisted_problems: report.unlisted,
        }),
        computes: Some(report.computes()),
        correct: report.is_correct(),
        ..VerifyJson::unread(file.to_string(), Some(target.to_string()))
    }
}

fn print_text(file: &str, target: &Target, program: &Program, report: &VerifyReport, kind: &str) {
    let tbs: usize = program.gpus.iter().map(|g| g.threadblocks.len()).sum();
    println!("file                 {file}");
    println!(
        "algorithm            {} ({}, {} GPUs, {} channels, {} chunks per loop, {})",
        program.name,
        program.collective,
        program.gpus.len(),
        program.nchannels,
        program.nchunksperloop,
        program.proto
    );
    println!(
        "size                 {} threadblocks, {} steps, {} messages",
        tbs, report.steps, report.messages
    );
    if report.loads() {
        println!("loader               {target}: loads");
    } else {
        let n = report.rule_breaks.len();
        println!(
            "loader               {target}: refused, {n} rule{} broken",
            if n == 1 { "" } else { "s" }
        );
        for b in &report.rule_breaks {
            println!("  {} at {}: {}", b.rule.name(), b.element, b.message);
        }
    }
    let root = report
        .root
        .map_or(String::new(), |r| format!(" from rank {r}"));
    println!(
        "checked as           {kind}{root}, {}",
        layouts(report).join(" and ")
    );
    if report.computes() {
        println!(
            "result               correct: no deadlock, no race, every output holds its chunk"
        );
    } else {
        let n = report.problems.len() + report.unlisted;
        println!(
            "result               {n} problem{}",
            if n == 1 { "" } else { "s" }
        );
        for p in &report.problems {
            println!("  {p}");
        }
        if report.unlisted > 0 {
            println!("  ... and {} more", report.unlisted);
        }
    }
}

fn print_json(value: &VerifyJson) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Ends the process with `code` after the one-line error, as `main` ends it with 1 for
/// other errors.
pub fn exit_with(code: i32, message: &str) -> ! {
    let _ = std::io::stdout().flush();
    eprintln!("error: {message}");
    std::process::exit(code)
}
