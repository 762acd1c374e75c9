//! `tacos simulate`: run one algorithm (a schedule file or a baseline) through the
//! congestion-aware simulator and report its time, bandwidths, bounds and link load.

use super::{at_least_one, collective_kind, size, TopologyArgs};
use crate::baselines::Baseline;
use crate::bounds::Bounds;
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::msccl::{read_program, simulate_program, verify, VerifyOptions};
use crate::schedule::{check, check_data_flow, Schedule};
use crate::sim::{simulate_schedule, SimReport, SimResult};
use crate::topology::Topology;
use crate::units::{format_size, ps_to_us};
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};

/// The collective every comparing command takes.
#[derive(Debug, Args)]
pub struct CollectiveArgs {
    /// Collective: allgather, reducescatter, allreduce, broadcast, reduce, gather, scatter, alltoall
    /// [default: allgather, or the schedule file's]
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// Buffer every NPU ends with (nccl-tests' convention), e.g. 1GiB, 4MB
    /// [default: 1GiB, or the schedule file's]
    #[arg(short, long, value_parser = size)]
    pub size: Option<u64>,
    /// Chunks per NPU (K) [default: 1, or the schedule file's]
    #[arg(short = 'k', long, value_parser = at_least_one)]
    pub chunks_per_npu: Option<usize>,
    /// Root NPU of a rooted collective (default: the first NPU)
    #[arg(long)]
    pub root: Option<usize>,
}

impl CollectiveArgs {
    /// The collective over every alive NPU, with the defaults filled in.
    pub fn spec(&self, topo: &Topology) -> CollectiveSpec {
        let kind = self.collective.unwrap_or(CollectiveKind::AllGather);
        let npus = topo.alive_npus();
        CollectiveSpec {
            kind,
            root: kind
                .has_root()
                .then(|| self.root.or(npus.first().copied()))
                .flatten(),
            npus,
            chunks_per_npu: self.chunks_per_npu.unwrap_or(1),
            size_bytes: self.size.unwrap_or(1 << 30),
        }
    }

    /// Refuses a schedule whose collective differs from what the arguments say.
    fn check_matches(&self, file: &str, spec: &CollectiveSpec) -> anyhow::Result<()> {
        let differs = |what: &str, given: String, has: String| -> anyhow::Result<()> {
            bail!("{file} is a schedule for {what} {has}, but the command line says {given}")
        };
        match (self.collective, self.size, self.chunks_per_npu, self.root) {
            (Some(k), ..) if k != spec.kind => {
                differs("collective", k.to_string(), spec.kind.to_string())
            }
            (_, Some(s), ..) if s != spec.size_bytes => {
                differs("size", s.to_string(), spec.size_bytes.to_string())
            }
            (_, _, Some(k), _) if k != spec.chunks_per_npu => differs(
                "chunks per NPU",
                k.to_string(),
                spec.chunks_per_npu.to_string(),
            ),
            (.., Some(r)) if Some(r) != spec.root => {
                differs("root", r.to_string(), format!("{:?}", spec.root))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    #[command(flatten)]
    pub algorithm: AlgorithmArgs,
    /// Busiest links to list
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Print one JSON object (with every link's load) instead of text
    #[arg(long)]
    pub json: bool,
}

/// What to simulate: exactly one of a schedule file, an MSCCL XML file and a baseline.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct AlgorithmArgs {
    /// A schedule file (from `tacos synth --out`) to simulate
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// An MSCCL algorithm XML file (ours, msccl-tools' or hand-written) to verify and time,
    /// rank r on the r-th NPU
    #[arg(long, value_name = "FILE")]
    pub xml: Option<PathBuf>,
    /// A baseline algorithm: ring, ring-uni, direct, rhd, dbt, hierarchical
    #[arg(long, value_name = "NAME", value_parser = baseline)]
    pub baseline: Option<Baseline>,
}

fn baseline(s: &str) -> Result<Baseline, String> {
    s.parse().map_err(|e: crate::Error| e.to_string())
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let topo = args.topology.topology()?;
    let Simulated {
        label: algorithm,
        spec,
        messages,
        result,
        own_clock,
    } = match (
        &args.algorithm.schedule,
        &args.algorithm.xml,
        args.algorithm.baseline,
    ) {
        (Some(path), ..) => {
            let schedule = Schedule::read(path)?;
            let file = path.display().to_string();
            args.collective.check_matches(&file, &schedule.collective)?;
            check_on_links(&schedule, &topo)
                .with_context(|| format!("{file} does not fit {}", topo.name()))?;
            // A contention-free schedule has a clock worth showing next to the simulation.
            let own = check(&schedule, &topo).ok().map(|r| r.collective_time_ps);
            Simulated::schedule(&topo, schedule, format!("schedule {file}"), own)?
        }
        (None, Some(path), _) => simulate_xml(&topo, path, &args.collective)?,
        (None, None, Some(b)) => {
            let spec = args.collective.spec(&topo);
            let schedule = b.schedule(&topo, &spec)?;
            Simulated::schedule(&topo, schedule, format!("baseline {b}"), None)?
        }
        (None, None, None) => bail!("give --schedule FILE, --xml FILE or --baseline NAME"),
    };
    let collective = Collective::new(&topo, spec)?;
    let report = SimReport::new(&topo, collective.spec(), &result);
    let bounds = Bounds::new(&topo, &collective);
    if args.json {
        let value = serde_json::json!({
            "topology": topo.name(),
            "npus": collective.npus().len(),
            "algorithm": algorithm,
            "collective": collective.spec(),
            "transfers": messages,
            "time_us": ps_to_us(report.time_ps),
            "schedule_time_us": own_clock.map(ps_to_us),
            "algbw_gbps": report.algbw_gbps,
            "busbw_gbps": report.busbw_gbps,
            "bounds": bounds_json(&bounds),
            "efficiency": bounds.efficiency(report.time_ps),
            "of_ideal": bounds.of_ideal(report.time_ps),
            "links": report.links,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let spec = collective.spec();
    println!(
        "topology      {} ({} NPUs, {} links)",
        topo.name(),
        topo.npus(),
        topo.links().len()
    );
    println!("algorithm     {algorithm} ({messages} transfers)");
    println!(
        "collective    {} of {}, {} chunk{} per NPU",
        spec.kind,
        format_size(spec.size_bytes),
        spec.chunks_per_npu,
        if spec.chunks_per_npu == 1 { "" } else { "s" }
    );
    match own_clock {
        Some(own) => println!(
            "time          {:.3} us simulated (the schedule's own clock: {:.3} us)",
            ps_to_us(report.time_ps),
            ps_to_us(own)
        ),
        None => println!("time          {:.3} us simulated", ps_to_us(report.time_ps)),
    }
    println!("algbw         {:.2} GB/s", report.algbw_gbps);
    println!("busbw         {:.2} GB/s", report.busbw_gbps);
    print_bounds(&bounds, Some(report.time_ps));
    let used = report.links.iter().filter(|l| l.busy_ps > 0).count();
    let mean =
        report.links.iter().map(|l| l.utilization).sum::<f64>() / report.links.len().max(1) as f64;
    println!(
        "links         {used} of {} used, mean utilization {:.1}%; busiest:",
        report.links.len(),
        100.0 * mean
    );
    for l in report.busiest_links().into_iter().take(args.top) {
        println!(
            "              {:>5} -> {:<5} {:>6.1}% busy  {}",
            l.src,
            l.dst,
            100.0 * l.utilization,
            format_size(l.bytes.round() as u64)
        );
    }
    Ok(())
}

/// One algorithm's simulation, whatever it came from.
struct Simulated {
    label: String,
    spec: CollectiveSpec,
    /// Messages (schedule transfers, or the program's sends).
    messages: usize,
    result: SimResult,
    /// The algorithm's own clock, where it has one worth showing.
    own_clock: Option<u64>,
}

impl Simulated {
    fn schedule(
        topo: &Topology,
        schedule: Schedule,
        label: String,
        own_clock: Option<u64>,
    ) -> anyhow::Result<Simulated> {
        Ok(Simulated {
            label,
            messages: schedule.transfers.len(),
            result: simulate_schedule(topo, &schedule)?,
            spec: schedule.collective,
            own_clock,
        })
    }
}

/// An MSCCL program is verified first (timing a wrong program says nothing), then timed
/// with the same alpha-beta rules as schedules; whether a loader takes it is `tacos
/// verify`'s question, so msccl-tools' files (no `outofplace`...) are timed too.
fn simulate_xml(
    topo: &Topology,
    path: &Path,
    collective: &CollectiveArgs,
) -> anyhow::Result<Simulated> {
    let file = path.display().to_string();
    let program = read_program(path)?;
    for w in &program.inferred {
        eprintln!("warning: {file}: {w}");
    }
    let report = verify(
        &program,
        &VerifyOptions {
            collective: collective.collective,
            root: collective.root,
            ..VerifyOptions::default()
        },
    );
    if !report.computes() {
        let first = report.problems.first().map_or(String::new(), |p| {
            format!(": {} ({})", p.message, p.kind.name())
        });
        bail!("{file} is not a correct program{first}; `tacos verify {file}` lists every problem");
    }
    let kind = report
        .collective
        .or_else(|| program.collective_kind())
        .with_context(|| format!("{file}: unknown collective '{}'", program.collective))?;
    let size = collective.size.unwrap_or(1 << 30);
    let result = simulate_program(topo, &program, size)?;
    let npus = topo.alive_npus();
    let spec = CollectiveSpec {
        kind,
        root: kind
            .has_root()
            .then(|| report.root.unwrap_or(0))
            .map(|r| npus[r]),
        npus,
        chunks_per_npu: 1,
        size_bytes: size,
    };
    Ok(Simulated {
        label: format!("MSCCL program {file}"),
        messages: result.messages.len(),
        result,
        spec,
        own_clock: None,
    })
}

/// A schedule file must be correct on the topology and send only over its links.
fn check_on_links(schedule: &Schedule, topo: &Topology) -> anyhow::Result<()> {
    check_data_flow(schedule, topo)?;
    if let Some((i, t)) = schedule
        .transfers
        .iter()
        .enumerate()
        .find(|(_, t)| topo.link_between(t.src, t.dst).is_none())
    {
        bail!(
            "transfer {i} (chunk {}) goes from NPU {} to NPU {}, which no link joins",
            t.chunk,
            t.src,
            t.dst
        );
    }
    Ok(())
}

pub(super) fn bounds_json(b: &Bounds) -> serde_json::Value {
    serde_json::json!({
        "best_us": ps_to_us(b.best_ps()),
        "best": b.best_name(),
        "ingress_us": ps_to_us(b.ingress_ps),
        "egress_us": ps_to_us(b.egress_ps),
        "traffic_us": ps_to_us(b.traffic_ps),
        "latency_us": ps_to_us(b.latency_ps),
        "cut_us": b.cut.map(|c| ps_to_us(c.time_ps)),
        "cut_exact": b.cut.map(|c| c.exact),
        "ideal_us": ps_to_us(b.ideal_ps),
    })
}

/// The bounds, and with a time the efficiencies against them.
pub(super) fn print_bounds(b: &Bounds, time_ps: Option<u64>) {
    let cut = match b.cut {
        Some(c) => format!(
            ", cut {:.3}{}",
            ps_to_us(c.time_ps),
            if c.exact { "" } else { " (some cuts checked)" }
        ),
        None => String::new(),
    };
    let against = |label: &str, f: fn(&Bounds, u64) -> f64| {
        time_ps.map_or(String::new(), |t| format!("; {label} {:.3}", f(b, t)))
    };
    println!(
        "lower bound   {:.3} us, {} (ingress {:.3}, egress {:.3}, traffic {:.3}, latency {:.3}{cut}){}",
        ps_to_us(b.best_ps()),
        b.best_name(),
        ps_to_us(b.ingress_ps),
        ps_to_us(b.egress_ps),
        ps_to_us(b.traffic_ps),
        ps_to_us(b.latency_ps),
        against("efficiency", Bounds::efficiency)
    );
    println!(
        "ideal         {:.3} us (the TACOS paper's formula, not a proven bound){}",
        ps_to_us(b.ideal_ps),
        against("of ideal", Bounds::of_ideal)
    );
}
