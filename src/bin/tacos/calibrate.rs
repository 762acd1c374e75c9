//! `tacos calibrate`: fit the executor cost model's constants to a cluster's nccl-tests
//! output and write them as a profile (`--profile F`, `TACOS_PROFILE`).

use super::collective_kind;
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tacos::collective::CollectiveKind;
use tacos::cost::fit::{self, Table};
use tacos::cost::nccltests::{self, Measured, ReadOptions};
use tacos::cost::program::domain_size;
use tacos::cost::{ExecModel, NcclPricer};
use tacos::error::echo;
use tacos::fsio::write_atomic;
use tacos::gpu::{Algorithm, GpuArch};
use tacos::topology::{parse_spec_with_warnings, SpecDefaults, Topology};
use tacos::units::format_size;
use tacos_cli::draw::plots::calibration_svg;
use tacos_cli::report::{
    CalibrateConstant, CalibratePoint, CalibrateReport, CalibrateTable, TopologyInfo,
    SCHEMA_VERSION,
};

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// nccl-tests output files (what all_reduce_perf and its siblings print)
    #[arg(required = true, value_name = "RESULTS")]
    pub files: Vec<PathBuf>,
    /// nccl-tests output to predict with the fitted profile without fitting to it (how the
    /// fit carries to a table it did not see); may be given several times
    #[arg(long, value_name = "RESULTS")]
    pub holdout: Vec<PathBuf>,
    /// The cluster the runs were on, a spec or file (e.g. preset:dgx-h100,nodes=1); given
    /// several times (one node, two nodes), each table is priced on the one with its rank count
    #[arg(long, required = true, value_name = "SPEC")]
    pub topology: Vec<String>,
    /// Collective of tables whose output does not name it (the program, all_reduce_perf);
    /// in a file of several collectives, the one taken
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// The algorithm runs were held to (NCCL_ALGO) where their output does not say: ring,
    /// tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain [default: NCCL's own choice]
    #[arg(long, value_name = "ALGO", value_parser = nccl_algo)]
    pub nccl_algo: Option<Algorithm>,
    /// Fit the in-place times instead of the out-of-place ones
    #[arg(long)]
    pub in_place: bool,
    /// GPU generation: NCCL's tuning tables and the start profile [default: from the device
    /// names the output prints, else the preset]
    #[arg(long, value_name = "ARCH", value_parser = gpu_arch)]
    pub gpu_arch: Option<GpuArch>,
    /// Profile to start the fit from: a profile file or a generation's name
    /// [default: the GPU generation's built-in profile]
    #[arg(long, value_name = "PROFILE")]
    pub start: Option<String>,
    /// Write the fitted profile to this file
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// Write measured and predicted busbw against size as an SVG chart to this file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

fn nccl_algo(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(s).ok_or_else(|| {
        format!(
            "'{}' must be one of NCCL's algorithms: ring, tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain",
            echo(s)
        )
    })
}

fn gpu_arch(s: &str) -> Result<GpuArch, String> {
    s.parse()
}

/// The generation of a GPU or machine by its name (`NVIDIA H100 80GB HBM3`, `dgx-a100`).
fn arch_named(name: &str) -> Option<GpuArch> {
    let name = name.to_ascii_lowercase();
    let has = |keys: &[&str]| keys.iter().any(|k| name.contains(k));
    if has(&["b100", "b200", "b300", "gb200"]) {
        Some(GpuArch::Blackwell)
    } else if has(&["h100", "h200", "h800", "gh200"]) {
        Some(GpuArch::Hopper)
    } else if has(&["a100", "a800", "a30", "a40", "ndv4"]) {
        Some(GpuArch::Ampere)
    } else if has(&["v100", "dgx1", "dgx2"]) {
        Some(GpuArch::Volta)
    } else {
        None
    }
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let mut topologies: Vec<Topology> = Vec::new();
    for spec in &args.topology {
        let (topo, warnings) = parse_spec_with_warnings(spec, &SpecDefaults::default())?;
        for w in warnings {
            eprintln!("warning: {w}");
        }
        let npus = topo.alive_npus().len();
        if let Some(other) = topologies.iter().find(|t| t.alive_npus().len() == npus) {
            bail!(
                "--topology {} and {} both have {npus} NPUs: a table is priced on the one with its rank count",
                echo(other.name()),
                echo(spec)
            );
        }
        topologies.push(topo);
    }
    // Rows pasted without their run's header are of the one topology, where one is given.
    let options = ReadOptions {
        collective: args.collective,
        in_place: args.in_place,
        ranks: match topologies.as_slice() {
            [only] => Some(only.alive_npus().len()),
            _ => None,
        },
    };
    let mut measured = Vec::new();
    for file in &args.files {
        measured.extend(nccltests::read_file(file, &options)?);
    }
    let fitted_tables = measured.len();
    for file in &args.holdout {
        measured.extend(nccltests::read_file(file, &options)?);
    }
    let placed = place(&measured, &topologies)?;
    let gpu = generation(args.gpu_arch, &measured, &topologies)?;
    let named = |s: &str| {
        GpuArch::ALL
            .into_iter()
            .find(|a| a.name() == s.to_ascii_lowercase())
    };
    let (start, start_label) = match args.start.as_deref() {
        None => (ExecModel::builtin(gpu), format!("built-in {gpu}")),
        Some(s) => match named(s) {
            Some(arch) => (ExecModel::builtin(arch), format!("built-in {arch}")),
            None => (
                ExecModel::load(std::path::Path::new(s))
                    .with_context(|| "--start: not a generation's name nor a profile file")?,
                s.to_string(),
            ),
        },
    };

    // One pricer per (topology, collective), the tables priced on theirs.
    let mut keys: Vec<(usize, CollectiveKind)> = Vec::new();
    for (m, &t) in measured.iter().zip(&placed) {
        if !keys.contains(&(t, m.collective)) {
            keys.push((t, m.collective));
        }
    }
    let pricers = keys
        .iter()
        .map(|&(t, kind)| {
            let topo = &topologies[t];
            NcclPricer::new(topo, kind, domain_size(topo), gpu, start.clone())
        })
        .collect::<tacos::Result<Vec<_>>>()?;
    let tables: Vec<Table> = measured
        .iter()
        .zip(&placed)
        .map(|(m, &t)| Table {
            name: m.origin.clone(),
            pricer: &pricers[keys
                .iter()
                .position(|k| *k == (t, m.collective))
                .expect("every table's key is listed")],
            algorithm: m.algorithm.or(args.nccl_algo),
            protocol: m.protocol,
            points: m.points.clone(),
        })
        .collect();

    let clock = Instant::now();
    let fit::Fitted {
        model: mut fitted,
        determined,
        on_bounds,
    } = fit::fit(&tables[..fitted_tables], &start)?;
    let elapsed_ms = clock.elapsed().as_secs_f64() * 1e3;
    fitted.arch = gpu.name().to_string();
    fitted.source = source(&measured[..fitted_tables], &placed, &topologies);
    let after = fit::assess(&tables, &fitted)?;
    fitted.error = Some(fit::median_errors(&after[..fitted_tables]));
    fitted.validate("the fitted profile")?;

    let before = fit::assess(&tables, &start)?;
    let mut warnings = on_bounds;
    let node_counts = placed[..fitted_tables]
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mut report_tables = Vec::new();
    for (i, (((m, &t), table), (a, b))) in measured
        .iter()
        .zip(&placed)
        .zip(&tables)
        .zip(after.iter().zip(&before))
        .enumerate()
    {
        let held_out = i >= fitted_tables;
        if node_counts > 1 && !held_out && a.median_error > fit::NODE_COUNTS_ERROR {
            warnings.push(format!(
                "{}: the fit over {node_counts} topologies misses this table by {} (median), more than {}: one profile cannot predict every node count here",
                m.origin,
                percent(a.median_error),
                percent(fit::NODE_COUNTS_ERROR)
            ));
        }
        let mut points = Vec::new();
        for (&(bytes, measured_us, predicted_us), &(_, _, start_us)) in
            a.points.iter().zip(&b.points)
        {
            let price = table
                .pricer
                .price_with(&fitted, bytes, table.algorithm, table.protocol)?;
            points.push(CalibratePoint {
                size_bytes: bytes,
                measured_us,
                predicted_us,
                error: (predicted_us - measured_us) / measured_us,
                tolerance: fit::tolerance(bytes),
                algorithm: price.algorithm,
                protocol: price.protocol,
                start_predicted_us: start_us,
            });
        }
        report_tables.push(CalibrateTable {
            name: m.origin.clone(),
            collective: m.collective.name().to_string(),
            topology: topologies[t].name().to_string(),
            ranks: m.ranks,
            column: if m.in_place {
                "in-place"
            } else {
                "out-of-place"
            },
            algorithm_held: table.algorithm,
            protocol_held: table.protocol,
            median_error: a.median_error,
            worst_error: a.worst_error,
            start_median_error: b.median_error,
            start_worst_error: b.worst_error,
            points,
            notes: notes(m, &topologies[t]),
            held_out,
        });
    }
    let constants = fit::constants(&start)
        .into_iter()
        .zip(fit::constants(&fitted))
        .zip(determined)
        .map(|(((name, start), (_, fitted)), d)| CalibrateConstant {
            name,
            start,
            fitted,
            determined: d.determined,
            reason: d.reason,
        })
        .collect();

    if let Some(out) = &args.out {
        write_atomic(out, fitted.to_json().as_bytes())
            .with_context(|| "cannot write the profile")?;
    }
    let report = CalibrateReport {
        schema_version: SCHEMA_VERSION,
        command: "calibrate",
        topologies: topologies.iter().map(TopologyInfo::new).collect(),
        gpu_arch: gpu.name().to_string(),
        start: start_label,
        files: args.files.iter().map(|f| f.display().to_string()).collect(),
        tables: report_tables,
        constants,
        warnings,
        profile: fitted,
        written: args.out.as_ref().map(|p| p.display().to_string()),
        elapsed_ms,
    };
    if let Some(plot) = &args.plot {
        write_atomic(plot, calibration_svg(&report).as_bytes())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// For each table, the topology with its rank count.
fn place(measured: &[Measured], topologies: &[Topology]) -> anyhow::Result<Vec<usize>> {
    measured
        .iter()
        .map(|m| {
            if let Some(i) = topologies
                .iter()
                .position(|t| t.alive_npus().len() == m.ranks)
            {
                return Ok(i);
            }
            if let [only] = topologies {
                m.check_ranks(only.alive_npus().len(), only.name())?;
            }
            let known: Vec<String> = topologies
                .iter()
                .map(|t| format!("{} ({} NPUs)", echo(t.name()), t.alive_npus().len()))
                .collect();
            bail!(
                "{}: the table's {} ranks ({}) match none of the topologies: {}",
                m.origin,
                m.ranks,
                m.ranks_from,
                known.join(", ")
            )
        })
        .collect()
}

/// The GPU generation: given, else the one the device names say, else the presets'.
fn generation(
    given: Option<GpuArch>,
    measured: &[Measured],
    topologies: &[Topology],
) -> anyhow::Result<GpuArch> {
    if let Some(arch) = given {
        return Ok(arch);
    }
    let mut found: Vec<(GpuArch, String)> = Vec::new();
    for m in measured {
        if let Some(gpu) = m.gpu.as_deref() {
            if let Some(arch) = arch_named(gpu) {
                found.push((arch, format!("{} ({})", m.origin, echo(gpu))));
            }
        }
    }
    if found.is_empty() {
        for t in topologies {
            if let Some(arch) = arch_named(t.name()) {
                found.push((arch, echo(t.name())));
            }
        }
    }
    match found.as_slice() {
        [] => {
            bail!("cannot tell the GPU generation from the output or the topology: pass --gpu-arch")
        }
        [(arch, _), rest @ ..] => {
            if let Some((other, at)) = rest.iter().find(|(a, _)| a != arch) {
                bail!(
                    "the tables are of two GPU generations ({arch} for {}, {other} for {at}); fit one cluster at a time or pass --gpu-arch",
                    found[0].1
                );
            }
            Ok(*arch)
        }
    }
}

/// The profile's `source`: the files and tables it was fitted to.
fn source(measured: &[Measured], placed: &[usize], topologies: &[Topology]) -> String {
    let tables: Vec<String> = measured
        .iter()
        .zip(placed)
        .map(|(m, &t)| {
            let held = m
                .algorithm
                .map_or(String::new(), |a| format!(", NCCL_ALGO={a}"));
            format!(
                "{} ({} on {}, {} sizes{held})",
                m.origin,
                m.collective,
                topologies[t].name(),
                m.points.len()
            )
        })
        .collect();
    format!("Fitted by `tacos calibrate` to {}", tables.join("; "))
}

/// The reader's notes, and a word where the output's hosts disagree with the topology's
/// nodes.
fn notes(m: &Measured, topo: &Topology) -> Vec<String> {
    let mut notes = m.notes.clone();
    let domain = domain_size(topo);
    if m.hosts > 1 && m.ranks % m.hosts == 0 && m.ranks / m.hosts != domain {
        notes.push(format!(
            "the output's {} hosts hold {} ranks each; the topology's NVLink domains hold {domain}",
            m.hosts,
            m.ranks / m.hosts
        ));
    }
    notes
}

fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn print_report(r: &CalibrateReport) {
    println!(
        "calibrated the {} profile to {} table(s) in {:.0} ms, starting from the {} profile",
        r.gpu_arch,
        r.tables.len(),
        r.elapsed_ms,
        echo(&r.start)
    );
    for t in &r.tables {
        let held = match (t.algorithm_held, t.protocol_held) {
            (None, None) => "NCCL's choice".to_string(),
            (a, p) => format!(
                "held to {}",
                [a.map(|a| a.to_string()), p.map(|p| p.to_string())]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        };
        println!();
        let role = if t.held_out {
            "  (held out: predicted, not fitted)"
        } else {
            ""
        };
        println!(
            "{}  {} of {} ranks on {}, {held}, {}{role}",
            echo(&t.name),
            t.collective,
            t.ranks,
            echo(&t.topology),
            t.column
        );
        for n in &t.notes {
            println!("  note: {}", echo(n));
        }
        println!(
            "  error: median {} (start {}), worst {} (start {})",
            percent(t.median_error),
            percent(t.start_median_error),
            percent(t.worst_error),
            percent(t.start_worst_error)
        );
        println!(
            "  {:>10}  {:>11}  {:>12}  {:>8}  {:>8}  priced",
            "size", "measured us", "predicted us", "error", "start us"
        );
        for p in &t.points {
            let past = if p.error.abs() > p.tolerance {
                format!("  past {:.0}%", p.tolerance * 100.0)
            } else {
                String::new()
            };
            println!(
                "  {:>10}  {:>11.2}  {:>12.2}  {:>8}  {:>8.2}  {} {}{past}",
                format_size(p.size_bytes),
                p.measured_us,
                p.predicted_us,
                format!("{:+.1}%", p.error * 100.0),
                p.start_predicted_us,
                p.algorithm,
                p.protocol
            );
        }
    }
    println!();
    println!(
        "{:<22}  {:>10}  {:>10}  {:>8}",
        "constant", "start", "fitted", "moved"
    );
    for c in &r.constants {
        let why = c
            .reason
            .as_deref()
            .map_or(String::new(), |w| format!("  (not determined, kept: {w})"));
        let moved = if c.fitted == c.start {
            "-".to_string()
        } else if c.start != 0.0 {
            format!("{:+.1}%", (c.fitted - c.start) / c.start * 100.0)
        } else {
            format!("{:+.4}", c.fitted - c.start)
        };
        println!(
            "{:<22}  {:>10.4}  {:>10.4}  {moved:>8}{why}",
            c.name, c.start, c.fitted
        );
    }
    for w in &r.warnings {
        println!("warning: {}", echo(w));
    }
    if let Some(out) = &r.written {
        println!();
        println!("wrote {}", echo(out));
    }
}
