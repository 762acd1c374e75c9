//! `tacos compare`: the synthesized algorithm and every baseline on one topology, each
//! timed by the congestion-aware simulator, next to the lower bounds.

use super::nccl_beside;
use super::progress::ProgressHandle;
use super::simulate::{print_bounds, sharing_note, CollectiveArgs};
use super::{seed_count, sharing, CostArgs, TopologyArgs};
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveSpec};
use tacos::fsio::write_atomic;
use tacos::pipeline::{self, Checked, Chunks, Request};
use tacos::schedule::Schedule;
use tacos::sim::{simulate_schedule_with, Sharing, SimReport, SimResult};
use tacos::topology::Topology;
use tacos::units::{format_size, ps_to_us};
use tacos::Error;
use tacos_cli::draw::heatmap_svg;
use tacos_cli::report::{
    BoundsReport, CollectiveInfo, CompareReport, CompareRow, CompareTimed, Timing, TopologyInfo,
    SCHEMA_VERSION,
};

#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    /// Seed for the synthesizer's random choices (the first of --seeds)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seeds tried from --seed on, the fastest kept [default: as `tacos synth`, 8 on small
    /// problems down to 1 on large ones]
    #[arg(long, value_name = "N", value_parser = seed_count)]
    pub seeds: Option<usize>,
    /// Leave out the trials with planned ways (as `tacos synth --no-plan`)
    #[arg(long)]
    pub no_plan: bool,
    /// How messages crossing a link share it: serial (one at a time, in order of arrival)
    /// or fair (all at once, max-min fair shares of bandwidth, as SimGrid's flow model)
    #[arg(long, default_value = "serial", value_parser = sharing)]
    pub sharing: Sharing,
    #[command(flatten)]
    pub cost: CostArgs,
    /// Print one JSON object instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also draw each algorithm's per-link utilization as an SVG heat map
    #[arg(long, value_name = "FILE")]
    pub heatmap: Option<PathBuf>,
    /// No progress display
    #[arg(long)]
    pub quiet: bool,
}

/// One algorithm's row.
pub(super) struct Row {
    pub name: String,
    pub outcome: Result<Measured, String>,
}

pub(super) struct Measured {
    pub report: SimReport,
    pub transfers: usize,
    /// The synthesized schedule's own (contention-free) clock.
    pub synthesized_ps: Option<u64>,
    /// The schedule and its simulation, where kept (the synthesized one's: `tacos
    /// report` draws its timeline).
    pub run: Option<Run>,
}

pub(super) struct Run {
    pub schedule: Schedule,
    pub result: SimResult,
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.heatmap {
        check_writable_dir(path, "the heat map")?;
    }
    let (topo, base) = args.topology.with_base()?;
    if args.heatmap.is_some() {
        tacos_cli::draw::topology::check_drawable(&topo)?;
    }
    let requested = args.collective.spec(&topo);
    super::check_moves_data(&requested)?;
    let search = Search {
        chunks: args.collective.chunks_per_npu,
        seed: args.seed,
        seeds: args.seeds,
        planned: !args.no_plan,
    };
    let spinner = ProgressHandle::spinner("synthesizing", args.quiet || args.json);
    let Synthesized {
        collective,
        seed,
        outcome,
        checked,
    } = synthesized(&topo, &requested, &search, args.sharing)?;
    drop(spinner);
    let priced = beside_nccl(&args, &topo, &collective, checked.as_ref())?;
    let spec = collective.spec().clone();
    let baselines = baselines_for(&topo, &spec);
    let bar = ProgressHandle::bar("baselines", baselines.len() as u64, args.quiet || args.json);
    let mut rows = vec![Row {
        name: "tacos".into(),
        outcome,
    }];
    rows.extend(measure_baselines(
        &topo,
        &collective,
        &baselines,
        args.sharing,
        &bar,
    )?);
    drop(bar);
    let bounds = Bounds::new(&topo, &collective);
    let tacos_ps = rows[0].outcome.as_ref().ok().map(|m| m.report.time_ps);
    let title = title(&spec, &topo);
    if let Some(path) = &args.heatmap {
        let panels: Vec<(String, &SimReport)> = rows
            .iter()
            .filter_map(|r| {
                let m = r.outcome.as_ref().ok()?;
                Some((
                    format!("{}: {:.1} us", r.name, ps_to_us(m.report.time_ps)),
                    &m.report,
                ))
            })
            .collect();
        let svg = heatmap_svg(
            &format!("Link utilization, {title}"),
            &topo,
            base.as_ref(),
            &panels,
        );
        write_atomic(path, svg.as_bytes()).context("cannot write the heat map")?;
    }
    if args.json {
        let algorithms = rows
            .iter()
            .map(|r| match &r.outcome {
                Ok(m) => CompareRow {
                    name: r.name.clone(),
                    timed: Some(CompareTimed {
                        timing: Timing::new(&spec, m.report.time_ps, &bounds),
                        schedule_time_us: m.synthesized_ps.map(ps_to_us),
                        tacos_speedup: tacos_ps.map(|t| m.report.time_ps as f64 / t as f64),
                        transfers: m.transfers,
                    }),
                    skipped: None,
                },
                Err(why) => CompareRow {
                    name: r.name.clone(),
                    timed: None,
                    skipped: Some(why.clone()),
                },
            })
            .collect();
        let value = CompareReport {
            schema_version: SCHEMA_VERSION,
            command: "compare",
            topology: TopologyInfo::new(&topo),
            collective: CollectiveInfo::new(&spec),
            seed,
            sharing: args.sharing,
            bounds: BoundsReport::new(&bounds),
            algorithms,
            heatmap: args.heatmap.as_ref().map(|p| p.display().to_string()),
            program_time_us: priced.program_us,
            cost_model: priced.cost_model,
            nccl: priced.nccl,
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "{title}, K = {}, seed {}, sharing {}",
        spec.chunks_per_npu,
        seed,
        sharing_note(args.sharing)
    );
    println!(
        "{:<14} {:>14} {:>10} {:>10} {:>14} {:>7} {:>8} {:>10}",
        "algorithm",
        "time (us)",
        "algbw",
        "busbw",
        "tacos speedup",
        "eff.",
        "of ideal",
        "transfers"
    );
    for row in &rows {
        match &row.outcome {
            Ok(m) => println!(
                "{:<14} {:>14.3} {:>10.2} {:>10.2} {:>14} {:>7.3} {:>8.3} {:>10}",
                row.name,
                ps_to_us(m.report.time_ps),
                m.report.algbw_gbps,
                m.report.busbw_gbps,
                tacos_ps.map_or("-".into(), |t| format!(
                    "{:.2}x",
                    m.report.time_ps as f64 / t as f64
                )),
                bounds.efficiency(m.report.time_ps),
                bounds.of_ideal(m.report.time_ps),
                m.transfers
            ),
            Err(why) => println!("{:<14} skipped: {why}", row.name),
        }
    }
    if let Ok(m) = &rows[0].outcome {
        let own = m.synthesized_ps.unwrap_or(0);
        println!(
            "tacos's synthesized clock {:.3} us; simulated {:.3} us{}",
            ps_to_us(own),
            ps_to_us(m.report.time_ps),
            if own == m.report.time_ps {
                " (equal: contention-free)"
            } else {
                ""
            }
        );
    }
    print_bounds(&bounds, None);
    if let Some(info) = &priced.cost_model {
        let model = nccl_beside::model_label(info);
        match &priced.program_us {
            Some(us) => println!(
                "program       {us:.3} us (tacos as the MSCCL program synth --xml writes, {model})"
            ),
            None => println!(
                "program       not priced: {}",
                priced.not_lowered.as_deref().unwrap_or("no program")
            ),
        }
        if let Some(nccl) = &priced.nccl {
            println!("{}", nccl_beside::line(nccl, &model));
        }
    }
    if let Some(path) = &args.heatmap {
        println!("heat map      {}", path.display());
    }
    Ok(())
}

/// Our program and NCCL's own choice, priced by the executor cost model.
struct Priced {
    program_us: Option<f64>,
    /// Why the schedule kept has no program price.
    not_lowered: Option<String>,
    cost_model: Option<tacos_cli::report::CostModelInfo>,
    nccl: Option<tacos_cli::report::NcclBeside>,
}

/// What `compare` prints beside the link-level table: the kept schedule as a program and
/// NCCL's own choice, by the executor cost model (nothing with `--alpha-beta`).
fn beside_nccl(
    args: &CompareArgs,
    topo: &Topology,
    collective: &Collective,
    checked: Option<&Checked>,
) -> anyhow::Result<Priced> {
    let Some(executor) = args.cost.executor(topo)? else {
        return Ok(Priced {
            program_us: None,
            not_lowered: None,
            cost_model: None,
            nccl: None,
        });
    };
    let program = match checked {
        Some(checked) => nccl_beside::program_us(topo, checked, &executor),
        None => Err("the schedule was not synthesized".to_string()),
    };
    let (program_us, not_lowered) = match program {
        Ok(us) => (Some(us), None),
        Err(why) => (None, Some(why)),
    };
    let nccl = nccl_beside::beside(
        topo,
        &args.cost,
        collective.spec(),
        &executor,
        program_us,
        args.json,
    );
    Ok(Priced {
        program_us,
        not_lowered,
        cost_model: Some(nccl_beside::model_info(&executor, args.cost.profile_file())),
        nccl,
    })
}

/// The baselines that define `spec`'s collective and run on `topo` (in-switch only where
/// switches reduce).
pub(super) fn baselines_for(topo: &Topology, spec: &CollectiveSpec) -> Vec<Baseline> {
    Baseline::ALL
        .into_iter()
        .filter(|b| b.kinds().contains(&spec.kind) && b.runs_on(topo))
        .collect()
}

/// Each baseline's row, simulated (a step of `bar` each); Err(reason) in a row where the
/// baseline does not apply or would not fit the memory limit.
pub(super) fn measure_baselines(
    topo: &Topology,
    collective: &Collective,
    baselines: &[Baseline],
    sharing: Sharing,
    bar: &ProgressHandle,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(baselines.len());
    for b in baselines {
        bar.step(b.name());
        let outcome = match b.schedule(topo, collective.spec()) {
            Ok(schedule) => Ok(measure(topo, collective, schedule, None, sharing, false)?),
            Err(Error::Baseline { problem, .. }) => Err(problem),
            // One algorithm too large for the memory limit leaves the others to compare.
            Err(e @ Error::Limit { .. }) => Err(e.to_string()),
            Err(e) => return Err(e.into()),
        };
        rows.push(Row {
            name: b.name().into(),
            outcome,
        });
    }
    Ok(rows)
}

/// How `compare` and `report` search for the synthesized algorithm: as `tacos synth`
/// does without `--xml`.
pub(super) struct Search {
    /// K as given; by default the search `pipeline::default_chunks` sizes.
    pub chunks: Option<usize>,
    pub seed: u64,
    /// Seeds tried from `seed` on; by default `pipeline::default_seeds`.
    pub seeds: Option<usize>,
    /// Whether planned ways are tried beside the seeds (`pipeline::Options::planned`).
    pub planned: bool,
}

/// What `synthesized` found.
pub(super) struct Synthesized {
    /// The collective at the K kept.
    pub collective: Collective,
    /// The seed kept.
    pub seed: u64,
    /// The algorithm checked and simulated (its run kept); Err(reason) where it would not
    /// fit the memory limit.
    pub outcome: Result<Measured, String>,
    /// The schedule kept, where one was.
    pub checked: Option<Checked>,
}

/// The synthesized algorithm for `spec`, its K aside: `search` says which K are tried.
pub(super) fn synthesized(
    topo: &Topology,
    spec: &CollectiveSpec,
    search: &Search,
    sharing: Sharing,
) -> anyhow::Result<Synthesized> {
    let request = Request {
        kind: spec.kind,
        size_bytes: spec.size_bytes,
        npus: Some(spec.npus.clone()),
        root: spec.root,
    };
    let chunks = search
        .chunks
        .map_or_else(|| pipeline::default_chunks(topo, &request), Chunks::Fixed);
    let seeds = search
        .seeds
        .unwrap_or_else(|| pipeline::default_seeds(topo, &request, chunks));
    let options = pipeline::Options {
        chunks,
        seeds: (0..seeds as u64)
            .map(|i| search.seed.wrapping_add(i))
            .collect(),
        planned: search.planned,
        // The synthesized algorithm is set against the baselines, not chosen among them.
        baselines: false,
        ..pipeline::Options::default()
    };
    let found = match pipeline::schedule(topo, &request, &options) {
        Ok(found) => found,
        Err(e @ Error::Limit { .. }) => {
            let k = chunks.only().unwrap_or(1);
            return Ok(Synthesized {
                collective: Collective::new(topo, request.spec(topo, k))?,
                seed: search.seed,
                outcome: Err(e.to_string()),
                checked: None,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let checked = found.kept;
    let collective = Collective::new(topo, checked.schedule().collective.clone())?;
    let own = checked.report().collective_time_ps;
    let schedule = checked.schedule().clone();
    let measured = measure(topo, &collective, schedule, Some(own), sharing, true)?;
    Ok(Synthesized {
        collective,
        seed: checked.seed().unwrap_or(search.seed),
        outcome: Ok(measured),
        checked: Some(checked),
    })
}

/// Simulates `schedule`, keeping it and its simulation where `keep` says.
pub(super) fn measure(
    topo: &Topology,
    collective: &Collective,
    schedule: Schedule,
    synthesized_ps: Option<u64>,
    sharing: Sharing,
    keep: bool,
) -> anyhow::Result<Measured> {
    let result = simulate_schedule_with(topo, &schedule, sharing)?;
    Ok(Measured {
        report: SimReport::new(topo, collective.spec(), &result),
        transfers: schedule.transfers.len(),
        synthesized_ps,
        run: keep.then_some(Run { schedule, result }),
    })
}

/// Fails early, before a long comparison, when the folder `what` (the heat map, the
/// report) is to be written in is missing.
pub(super) fn check_writable_dir(path: &Path, what: &str) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write {what} {}: folder {} does not exist",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// What is compared, as the text and the page title name it.
pub fn title(spec: &CollectiveSpec, topo: &Topology) -> String {
    format!(
        "{}{} of {} on {} ({} NPUs)",
        spec.kind,
        spec.root.map_or(String::new(), |r| format!(" (root {r})")),
        format_size(spec.size_bytes),
        topo.name(),
        spec.npus.len()
    )
}
