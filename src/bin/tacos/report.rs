//! `tacos report`: one self-contained HTML page of pictures. For a topology and a
//! collective (synthesized here, or given as a schedule, an MSCCL program or an MSCCL++
//! plan): the
//! topology drawn with every algorithm's link loads on one scale, and the algorithm's
//! timeline with the bound. For a compiled directory: predicted busbw against size per
//! collective, and the table of its files.

use super::compare::{
    baselines_for, check_writable_dir, measure, measure_baselines, synthesized, title, Measured,
    Row, Run, Search,
};
use super::nccl_beside;
use super::progress::ProgressHandle;
use super::simulate::{read_schedule, simulate_plan, simulate_xml, CollectiveArgs, Simulated};
use super::{npu_list, seed_count, CostArgs, NpuList, TopologyArgs};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::compile::{Entry, Manifest};
use tacos::fsio::write_atomic;
use tacos::schedule::Op;
use tacos::sim::{bus_factor, Sharing, SimReport};
use tacos::topology::Topology;
use tacos::units::{format_size, ps_to_us};
use tacos_cli::draw::chart::{LineChart, Series, VLine};
use tacos_cli::draw::html::Page;
use tacos_cli::draw::scale::TickFormat;
use tacos_cli::draw::timeline::{held_links, utilization_chart, Timeline, BUSIEST_ROWS, MAX_ROWS};
use tacos_cli::draw::topology::{check_drawable, loads_svg, LoadPanel};

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    /// NPUs taking part, in rank order (default: every alive NPU), e.g. 0-7,16-23
    #[arg(long, value_name = "LIST", value_parser = npu_list, conflicts_with_all = ["schedule", "xml", "plan"])]
    pub npus: Option<NpuList>,
    /// Seed for the synthesizer's random choices (the first of --seeds)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seeds tried from --seed on, the fastest kept [default: as `tacos synth`, 8 on small
    /// problems down to 1 on large ones]
    #[arg(long, value_name = "N", value_parser = seed_count, conflicts_with_all = ["schedule", "xml", "plan"])]
    pub seeds: Option<usize>,
    /// Leave out the trials with planned ways (as `tacos synth --no-plan`)
    #[arg(long, conflicts_with_all = ["schedule", "xml", "plan"])]
    pub no_plan: bool,
    /// Report on this schedule file (from `tacos synth --out`) instead of synthesizing
    #[arg(long, value_name = "FILE", conflicts_with_all = ["xml", "plan", "compiled"])]
    pub schedule: Option<PathBuf>,
    /// Report on this MSCCL algorithm XML file (verified, then timed as `tacos simulate
    /// --xml` times it) instead of synthesizing
    #[arg(long, value_name = "FILE", conflicts_with_all = ["plan", "compiled"])]
    pub xml: Option<PathBuf>,
    /// Report on this MSCCL++ execution plan (JSON; verified, then timed by the executor
    /// cost model as `tacos simulate --plan` times it) instead of synthesizing
    #[arg(long, value_name = "FILE", conflicts_with = "compiled")]
    pub plan: Option<PathBuf>,
    /// Report on a compiled directory (`tacos compile --out DIR`): predicted busbw against
    /// size and the table of its files
    #[arg(long, value_name = "DIR", conflicts_with_all = ["spec", "npus", "fail_npus", "fail_links"])]
    pub compiled: Option<PathBuf>,
    /// The HTML file to write
    #[arg(short, long, value_name = "FILE")]
    pub out: PathBuf,
    /// No progress display
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub cost: CostArgs,
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    check_writable_dir(&args.out, "the report")?;
    let page = match &args.compiled {
        Some(dir) => compiled_page(dir)?,
        None => algorithm_page(&args)?,
    };
    write_atomic(&args.out, page.finish().as_bytes()).context("cannot write the report")?;
    println!("report        {}", args.out.display());
    Ok(())
}

/// The algorithm reported on (first row), the baselines after it, on `topo`.
struct Compared {
    topo: Topology,
    /// The topology before the failures the command line gives, when it gives some.
    base: Option<Topology>,
    collective: Collective,
    rows: Vec<Row>,
    /// The algorithm as the MSCCL program that would run, timed by the executor cost
    /// model (or why not); None where there is no program to price (a schedule file,
    /// `--alpha-beta`).
    program_us: ProgramTime,
}

/// What would run, timed by the executor cost model (or why it cannot be); None where
/// nothing is priced.
type ProgramTime = Option<Result<f64, String>>;

fn algorithm_page(args: &ReportArgs) -> anyhow::Result<Page> {
    let Compared {
        topo,
        base,
        collective,
        rows,
        program_us,
    } = compared(args)?;
    let spec = collective.spec();
    let bounds = Bounds::new(&topo, &collective);
    let on_gpus = on_gpus(args, &topo, &collective, program_us)?;
    let title = title(spec, &topo);
    let mut page = Page::new(&format!("tacos report: {title}"));
    page.heading(1, &title);
    // A program's or a plan's chunking is its own, not the K of the command line.
    let chunks = match args.xml.is_some() || args.plan.is_some() {
        true => String::new(),
        false => format!(" K = {};", spec.chunks_per_npu),
    };
    page.paragraph(&format!(
        "tacos {}: every algorithm simulated with serial link sharing (one message per link at a time);{chunks} best lower bound {:.3} us ({}).",
        tacos::VERSION,
        ps_to_us(bounds.best_ps()),
        bounds.best_name()
    ));
    page.table(
        &[
            "algorithm",
            "time (us)",
            "busbw (GB/s)",
            "bound / time",
            "time / first row's",
            "transfers",
        ],
        &summary(&rows, &bounds),
    );
    if let Some(text) = on_gpus {
        page.paragraph(&text);
    }
    let panels: Vec<LoadPanel> = rows
        .iter()
        .filter_map(|r| {
            let m = r.outcome.as_ref().ok()?;
            Some(LoadPanel {
                name: format!("{}: {:.2} us", r.name, ps_to_us(m.report.time_ps)),
                report: &m.report,
            })
        })
        .collect();
    page.heading(2, "Link load");
    page.figure(
        &loads_svg(&format!("Link load, {title}"), &topo, base.as_ref(), &panels),
        "Each directed link is a line beside its reverse, coloured by its busy time on one scale for every algorithm on the page; hover a link for its figures. Crossed-out circles are failed NPUs, dashed red lines failed links.",
    );
    let first = &rows[0];
    page.heading(2, &format!("Timeline of {}", first.name));
    match first.outcome.as_ref().map(|m| m.run.as_ref()) {
        Ok(Some(run)) => timeline(&mut page, &topo, &first.name, run, &bounds)?,
        // A program or a plan: its timer keeps its messages to itself.
        Ok(None) => page.paragraph(&format!(
            "No timeline for {}: the executor cost model's timer does not expose a program's messages; report on the schedule it was lowered from (--schedule) for its timeline.",
            first.name
        )),
        Err(why) => page.paragraph(&format!("No timeline for {}: {why}.", first.name)),
    }
    Ok(page)
}

/// Synthesizes (or reads) the algorithm and simulates it and every baseline, as `tacos
/// compare` does.
fn compared(args: &ReportArgs) -> anyhow::Result<Compared> {
    let (topo, base, first, collective, program_us) = match (&args.schedule, &args.xml) {
        (None, None) if args.plan.is_some() => {
            let path = args.plan.as_deref().unwrap_or(Path::new(""));
            let (topo, base) = args.topology.with_base()?;
            check_drawable(&topo)?;
            let Some(executor) = args.cost.executor(&topo)? else {
                anyhow::bail!(
                    "--plan is timed with the executor cost model; leave out --alpha-beta"
                );
            };
            let simulated = simulate_plan(&topo, path, &args.collective, &executor)?;
            let (row, collective, program_us) = program_row(&topo, simulated, true)?;
            (topo, base, row, collective, program_us)
        }
        (Some(path), _) => {
            let (topo, schedule, own) = read_schedule(&args.topology, &args.collective, path)?;
            check_drawable(&topo)?;
            super::check_moves_data(&schedule.collective)?;
            let collective = Collective::new(&topo, schedule.collective.clone())?;
            let m = measure(&topo, &collective, schedule, own, Sharing::Serial, true)?;
            let row = Row {
                name: format!("schedule {}", path.display()),
                outcome: Ok(m),
            };
            (topo, None, row, collective, None)
        }
        (None, Some(path)) => {
            let (topo, base) = args.topology.with_base()?;
            check_drawable(&topo)?;
            let executor = args.cost.executor(&topo)?;
            let simulated = simulate_xml(&topo, path, &args.collective, executor.as_ref())?;
            let (row, collective, program_us) = program_row(&topo, simulated, executor.is_some())?;
            (topo, base, row, collective, program_us)
        }
        (None, None) => {
            let (topo, base) = args.topology.with_base()?;
            check_drawable(&topo)?;
            let mut spec = args.collective.spec(&topo);
            if let Some(npus) = &args.npus {
                spec.npus = npus.clone();
                spec.root = spec
                    .kind
                    .has_root()
                    .then(|| args.collective.root.or(npus.first().copied()))
                    .flatten();
            }
            super::check_moves_data(&spec)?;
            let spinner = ProgressHandle::spinner("synthesizing", args.quiet);
            let search = Search {
                chunks: args.collective.chunks_per_npu,
                seed: args.seed,
                seeds: args.seeds,
                planned: !args.no_plan,
            };
            let found = synthesized(&topo, &spec, &search, Sharing::Serial)?;
            drop(spinner);
            let program_us = match (args.cost.executor(&topo)?, &found.checked) {
                (Some(executor), Some(checked)) => {
                    Some(nccl_beside::program_us(&topo, checked, &executor))
                }
                _ => None,
            };
            let row = Row {
                name: "tacos".into(),
                outcome: found.outcome,
            };
            (topo, base, row, found.collective, program_us)
        }
    };
    let baselines = baselines_for(&topo, collective.spec());
    let bar = ProgressHandle::bar("baselines", baselines.len() as u64, args.quiet);
    let mut rows = vec![first];
    rows.extend(measure_baselines(
        &topo,
        &collective,
        &baselines,
        Sharing::Serial,
        &bar,
    )?);
    Ok(Compared {
        topo,
        base,
        collective,
        rows,
        program_us,
    })
}

/// The row of a program or plan that was timed (`simulate_xml`, `simulate_plan`), its
/// collective, and its time as what would run, where the executor cost model timed it.
fn program_row(
    topo: &Topology,
    simulated: Simulated,
    by_executor: bool,
) -> anyhow::Result<(Row, Collective, ProgramTime)> {
    let report = SimReport::new(topo, &simulated.spec, &simulated.result);
    let time_ps = report.time_ps;
    let row = Row {
        name: simulated.label,
        outcome: Ok(Measured {
            report,
            transfers: simulated.result.messages.len(),
            synthesized_ps: None,
            run: None,
        }),
    };
    super::check_moves_data(&simulated.spec)?;
    let collective = Collective::new(topo, simulated.spec)?;
    let program_us = by_executor.then(|| Ok(ps_to_us(time_ps)));
    Ok((row, collective, program_us))
}

/// The page's sentence on what would run on GPUs: the program and NCCL's own choice, both
/// by the executor cost model, and which is faster; None where nothing was priced.
fn on_gpus(
    args: &ReportArgs,
    topo: &Topology,
    collective: &Collective,
    program_us: ProgramTime,
) -> anyhow::Result<Option<String>> {
    let Some(executor) = args.cost.executor(topo)? else {
        return Ok(None);
    };
    let Some(program) = program_us else {
        return Ok(None);
    };
    let model = nccl_beside::model_label(&nccl_beside::model_info(
        &executor,
        args.cost.profile_file(),
    ));
    let runs_as = match args.plan.is_some() {
        true => "MSCCL++ plan",
        false => "MSCCL program",
    };
    let ours = match &program {
        Ok(us) => format!("the algorithm as an {runs_as} takes {us:.3} us"),
        Err(why) => format!("the algorithm gives no {runs_as} ({why})"),
    };
    let ours_us = program.as_ref().ok().copied();
    let nccl = nccl_beside::beside(
        topo,
        &args.cost,
        collective.spec(),
        &executor,
        ours_us,
        args.quiet,
    );
    let beside = match nccl {
        Some(n) => {
            let verdict = match n.speedup {
                Some(x) if x >= 1.0 => format!("ours is {x:.2}x faster"),
                Some(x) => format!(
                    "ours is {:.2}x slower, so `tacos compile` would leave this size to NCCL",
                    1.0 / x
                ),
                None => String::new(),
            };
            format!(
                "; NCCL {}'s own choice, {}/{} on {} channels, {:.3} us: {verdict}",
                n.version, n.algorithm, n.protocol, n.channels, n.time_us
            )
        }
        None => String::new(),
    };
    Ok(Some(format!("On GPUs ({model}): {ours}{beside}.")))
}

fn summary(rows: &[Row], bounds: &Bounds) -> Vec<Vec<String>> {
    let first = rows
        .first()
        .and_then(|r| r.outcome.as_ref().ok())
        .map(|m| m.report.time_ps);
    rows.iter()
        .map(|r| match &r.outcome {
            Ok(m) => vec![
                r.name.clone(),
                format!("{:.3}", ps_to_us(m.report.time_ps)),
                format!("{:.2}", m.report.busbw_gbps),
                format!("{:.3}", bounds.efficiency(m.report.time_ps)),
                first.map_or("-".into(), |t| {
                    format!("{:.2}x", m.report.time_ps as f64 / t as f64)
                }),
                m.transfers.to_string(),
            ],
            Err(why) => vec![
                r.name.clone(),
                format!("skipped: {why}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ],
        })
        .collect()
}

/// The Gantt rows of a schedule's simulated run, and past `MAX_ROWS` links the share of
/// links busy over time.
fn timeline(
    page: &mut Page,
    topo: &Topology,
    name: &str,
    run: &Run,
    bounds: &Bounds,
) -> anyhow::Result<()> {
    let (schedule, time_ps) = (&run.schedule, run.result.time_ps);
    let hops = schedule
        .transfers
        .iter()
        .map(|t| (t.src(), t.dst(), schedule.chunk_bytes));
    let (held, unknown) = held_links(topo, hops, &run.result)?;
    let by_phase = schedule.collective.kind == CollectiveKind::AllReduce;
    let keys: Vec<(usize, String)> = schedule
        .transfers
        .iter()
        .map(|t| match (by_phase, t.op) {
            (true, Op::Reduce) => (1, format!("reduce-scatter, chunk {}", t.chunk())),
            (true, Op::Copy) => (0, format!("all-gather, chunk {}", t.chunk())),
            (false, _) => (t.chunk(), format!("chunk {}", t.chunk())),
        })
        .collect();
    let legend = match by_phase {
        true => vec![
            (1, "reduce-scatter".to_string()),
            (0, "all-gather".to_string()),
        ],
        false => Vec::new(),
    };
    let bound = Some((bounds.best_ps(), bounds.best_name().to_string()));
    let large = topo.links().len() > MAX_ROWS;
    let gantt = Timeline {
        title: match large {
            true => format!(
                "{name}: the {BUSIEST_ROWS} busiest of {} links",
                topo.links().len()
            ),
            false => format!("{name}: every link that carried a transfer"),
        },
        topo,
        held: &held,
        keys: &keys,
        legend,
        time_ps,
        bound: bound.clone(),
    };
    let mut caption = format!(
        "Each bar is a transfer holding a link in the simulation ({}); the dashed line is the best lower bound.",
        match by_phase {
            true => "reduce-scatter and all-gather phases in their own colours",
            false => "colours stand for chunks",
        }
    );
    if unknown > 0 {
        caption.push_str(&format!(" {unknown} messages crossed several links stored and forwarded; the simulator keeps no times for their hops, so they are not drawn."));
    }
    page.figure(&gantt.to_svg(), &caption);
    if large {
        let chart = utilization_chart(
            &format!("{name}: links busy over time"),
            topo.links().len(),
            &held,
            time_ps,
            bound,
        );
        page.figure(
            &chart.to_svg(),
            "The share of all links busy, averaged over 200 equal spans of the collective's time.",
        );
    }
    Ok(())
}

/// The compiled directory's page: per collective, predicted busbw against size; then
/// its files.
fn compiled_page(dir: &Path) -> anyhow::Result<Page> {
    let manifest = Manifest::read(dir)?;
    let title = format!(
        "Compiled set {} for {} ({} ranks)",
        dir.display(),
        manifest.topology.name,
        manifest.topology.npus
    );
    let mut page = Page::new(&format!("tacos report: {title}"));
    page.heading(1, &title);
    page.paragraph(&format!(
        "Compiled by tacos {}; {} files. Predictions are the simulator's, at each band's smallest size.",
        manifest.tool_version,
        manifest.entries.len()
    ));
    let mut kinds: Vec<CollectiveKind> = Vec::new();
    for e in &manifest.entries {
        if !kinds.contains(&e.collective) {
            kinds.push(e.collective);
        }
    }
    for kind in kinds {
        page.heading(2, &kind.to_string());
        page.figure(
            &busbw_chart(&manifest, kind).to_svg(),
            "Predicted bus bandwidth of the program served in each band (out of place), NCCL's choice, the fastest baseline there and the bound, with what `tacos compile --feedback` recorded as measured (ours and NCCL's) where it has run; dotted lines mark where a band begins.",
        );
    }
    page.heading(2, "Files");
    page.table(
        &[
            "file",
            "collective",
            "in place",
            "sizes",
            "algorithm",
            "K",
            "protocol",
            "channels",
            "predicted time (us)",
            "speedup vs best baseline",
        ],
        &manifest.entries.iter().map(file_row).collect::<Vec<_>>(),
    );
    Ok(page)
}

/// Predicted busbw against size for the out-of-place files of `kind` (the in-place ones
/// when it has none).
fn busbw_chart(manifest: &Manifest, kind: CollectiveKind) -> LineChart {
    let of_kind: Vec<&Entry> = manifest
        .entries
        .iter()
        .filter(|e| e.collective == kind)
        .collect();
    let out_of_place = of_kind.iter().any(|e| !e.in_place);
    let entries: Vec<&Entry> = of_kind
        .into_iter()
        .filter(|e| e.in_place != out_of_place)
        .collect();
    let factor = bus_factor(kind, manifest.topology.npus);
    // busbw of a band at another time for the same size: algbw scales inversely.
    let busbw =
        |b: &tacos::compile::BandPrediction, us: f64| b.algbw_gbps * b.time_us / us * factor;
    let at = |bytes: u64, us: f64| (bytes as f64, bytes as f64 / (us * 1e3) * factor);
    let bands = || entries.iter().flat_map(|e| e.bands.iter());
    // Bands left to NCCL by the model or returned to it by measurements, of the same
    // placement as the entries drawn: where each begins, and NCCL's predicted time there
    // (none for a returned band that NCCL did not compete for).
    let placement = !out_of_place;
    let left: Vec<(u64, Option<f64>)> = manifest
        .left_to_nccl
        .iter()
        .filter(|l| l.collective == kind && l.in_place == placement)
        .map(|l| (l.min_bytes, Some(l.nccl.time_us)))
        .chain(
            manifest
                .returned_to_nccl
                .iter()
                .filter(|r| r.collective == kind && r.in_place == placement)
                .map(|r| (r.min_bytes, r.prediction.nccl.as_ref().map(|n| n.time_us))),
        )
        .collect();
    let nccl_left = || left.iter().filter_map(|&(min, us)| Some(at(min, us?)));
    // What the set serves: its program per band, NCCL's own choice where it left a band.
    let mut served: Vec<(f64, f64)> = bands()
        .map(|b| (b.size_bytes as f64, busbw(b, b.time_us)))
        .chain(nccl_left())
        .collect();
    served.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut series = vec![Series {
        name: "served".into(),
        points: served,
        dashed: false,
    }];
    let mut nccl: Vec<(f64, f64)> = bands()
        .filter_map(|b| Some(at(b.size_bytes, b.nccl.as_ref()?.time_us)))
        .chain(nccl_left())
        .collect();
    nccl.sort_by(|a, b| a.0.total_cmp(&b.0));
    if !nccl.is_empty() {
        series.push(Series {
            name: "NCCL's choice".into(),
            points: nccl,
            dashed: false,
        });
    }
    // What `compile --feedback` recorded: each measured size, ours and NCCL's, in the
    // bands still served and in those measurements returned to NCCL.
    let measured: Vec<&tacos::compile::MeasuredSize> = bands()
        .chain(
            manifest
                .returned_to_nccl
                .iter()
                .filter(|r| r.collective == kind && r.in_place == placement)
                .map(|r| &r.prediction),
        )
        .flat_map(|b| b.measured.iter())
        .collect();
    for (name, time) in [
        (
            "measured: ours",
            (|m: &tacos::compile::MeasuredSize| m.ours_us) as fn(&_) -> f64,
        ),
        ("measured: NCCL", |m| m.nccl_us),
    ] {
        let mut points: Vec<(f64, f64)> =
            measured.iter().map(|m| at(m.size_bytes, time(m))).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !points.is_empty() {
            series.push(Series {
                name: name.into(),
                points,
                dashed: true,
            });
        }
    }
    let baseline: Vec<(f64, f64)> = bands()
        .filter_map(|b| Some((b.size_bytes as f64, busbw(b, b.best_baseline_us?))))
        .collect();
    if !baseline.is_empty() {
        series.push(Series {
            name: "best baseline".into(),
            points: baseline,
            dashed: false,
        });
    }
    series.push(Series {
        name: "bound".into(),
        points: bands()
            .map(|b| (b.size_bytes as f64, busbw(b, b.bound_us)))
            .collect(),
        dashed: true,
    });
    let labelled = entries.len() + left.len() <= 12;
    LineChart {
        title: match measured.is_empty() {
            true => format!("{kind}: predicted bus bandwidth"),
            false => format!("{kind}: predicted and measured bus bandwidth"),
        },
        x_label: "size".into(),
        y_label: "busbw, GB/s".into(),
        log_x: true,
        x_format: TickFormat::Bytes,
        series,
        markers: entries
            .iter()
            .map(|e| VLine {
                x: e.bands.first().map_or(e.min_bytes, |b| b.size_bytes) as f64,
                label: match labelled {
                    true => format!("{} {}", short_candidate(e), e.proto),
                    false => String::new(),
                },
            })
            .chain(left.iter().map(|&(min_bytes, _)| VLine {
                x: min_bytes as f64,
                label: match labelled {
                    true => "NCCL".into(),
                    false => String::new(),
                },
            }))
            .collect(),
        ..LineChart::default()
    }
    .log_y_over_decades()
}

fn short_candidate(e: &Entry) -> String {
    match e.algorithm.chunks_per_npu() {
        Some(k) => format!("K={k}"),
        None => e.algorithm.to_string(),
    }
}

fn file_row(e: &Entry) -> Vec<String> {
    let range = |v: Vec<f64>, unit: &str| match (v.first(), v.last()) {
        (Some(a), Some(b)) if a == b => format!("{a:.2}{unit}"),
        (Some(a), Some(b)) => format!("{a:.2}{unit} .. {b:.2}{unit}"),
        _ => "-".into(),
    };
    vec![
        e.file.clone(),
        e.collective.to_string(),
        e.in_place.to_string(),
        format!(
            "{} .. {}",
            format_size(e.min_bytes),
            format_size(e.max_bytes)
        ),
        e.algorithm.to_string(),
        e.algorithm
            .chunks_per_npu()
            .map_or("-".into(), |k| k.to_string()),
        e.proto.clone(),
        e.channels.to_string(),
        range(e.bands.iter().map(|b| b.time_us).collect(), ""),
        range(
            e.bands
                .iter()
                .filter_map(|b| b.speedup_vs_baseline)
                .collect(),
            "x",
        ),
    ]
}
