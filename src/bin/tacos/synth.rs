//! `tacos synth`: synthesize, check and report one algorithm.

use super::lowering::{describe, LowerArgs};
use super::nccl_beside;
use super::progress::ProgressHandle;
use super::{
    chunk_count, collective_kind, job_count, npu_list, seed_count, size, CostArgs, NpuList,
    TopologyArgs,
};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tacos::baselines::Baseline;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::fsio::write_atomic_with;
use tacos::mscclpp::PlanOptions;
use tacos::pipeline::{self, Chunks, Request};
use tacos::schedule::MAX_FILE_BYTES;
use tacos::synth::{NodeShift, TreeShape};
use tacos::topology::{format_npus, Topology};
use tacos::units::{algbw_gbps, format_size, ps_to_us};
use tacos_cli::report::{AllReducePhases, ChunkTrialReport, Replication, SynthReport, SynthRun};

#[derive(Debug, Args)]
pub struct SynthArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Collective: allgather, reducescatter, allreduce, broadcast, reduce, gather, scatter, alltoall
    #[arg(short, long, default_value = "allgather", value_parser = collective_kind)]
    pub collective: CollectiveKind,
    /// Buffer every NPU ends with (nccl-tests' convention), e.g. 1GiB or 1G (2^30), 4MB
    /// (10^6), 65536
    #[arg(short, long, default_value = "1GiB", value_parser = size, allow_hyphen_values = true)]
    pub size: u64,
    /// Chunks per NPU (K): each NPU's share is split into K chunks; `auto` tries 1, 2, 4
    /// and 8, then K between them beside the fastest (3, 5, 6, 7), and keeps the fastest
    /// in simulation (with --xml, the fastest verified program within the target).
    /// Default: auto with --xml (as the C API and compile), else the values of 1, 2, 4, 8,
    /// 16 whose search stays within the time --seeds budgets (up to 16 to 64 NPUs, 8 to
    /// 128, K = 1 alone from 512 on), refined between them the same way; `-k 1` is the
    /// TACOS paper's setting
    #[arg(short = 'k', long, value_parser = chunks_per_npu)]
    pub chunks_per_npu: Option<Chunks>,
    /// NPUs taking part, in rank order (default: every alive NPU); the others may relay
    /// chunks, e.g. 0-7,16-23. Given several times: one collective per list, all
    /// synthesized together so they share links without contention
    #[arg(long, value_name = "LIST", value_parser = npu_list, action = clap::ArgAction::Append)]
    pub npus: Vec<NpuList>,
    /// Root NPU of a rooted collective (default: the first NPU taking part)
    #[arg(long)]
    pub root: Option<usize>,
    /// Seed for the synthesizer's random choices (the first of --seeds)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seeds tried, from --seed on, side by side; the fastest schedule (program with
    /// --xml) is kept. Default: 8 on small problems down to 1 on large ones (NPUs^2 x K
    /// past 2^18), so that each K's trials stay within about a tenth of a second; at most 4096
    #[arg(long, value_name = "N", value_parser = seed_count)]
    pub seeds: Option<usize>,
    /// Leave out the trials with planned ways (by default each K is also tried once with
    /// every chunk's way planned before matching, the links loaded evenly for their
    /// speeds: a spanning tree for each chunk of All-Gather, Reduce-Scatter, All-Reduce,
    /// Broadcast and Reduce over every NPU up to 512, balanced, shallow and, on rings and
    /// tori, one way round, a path for each chunk of All-to-All, Gather and Scatter): only
    /// the free matching, as the TACOS paper's
    #[arg(long)]
    pub no_plan: bool,
    /// Leave out the baselines (by default, while K is searched, Ring, Direct and the
    /// others that define the collective are tried at each K beside the synthesized
    /// schedules, and one is kept where it is faster): only synthesized schedules
    #[arg(long)]
    pub no_baselines: bool,
    /// Worker threads for the search and the synthesis (0: one per core; at most 256)
    #[arg(long, default_value_t = 0, value_parser = job_count)]
    pub jobs: usize,
    /// Write the schedule (every transfer) as JSON to this file
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write the schedule to this file as a compact binary transfer stream while it is
    /// made, holding none of it, then check the file by reading it back: for schedules
    /// too large to hold (a 200x200 mesh's All-Gather has 1.6e9 transfers, about 6 bytes
    /// each in the file). All-Gather and Broadcast over every NPU; one seed, K fixed
    #[arg(long, value_name = "FILE", conflicts_with_all = ["out", "xml", "npus"])]
    pub stream: Option<PathBuf>,
    /// Write the algorithm as an MSCCL++ execution plan (JSON) to this file, for the
    /// MSCCL++ executor and its NCCL shim: memory channels inside a node, port channels
    /// across the network, in place for All-Reduce and Broadcast; All-Gather,
    /// Reduce-Scatter, All-Reduce, Broadcast and All-to-All
    #[arg(long, value_name = "FILE", conflicts_with = "stream")]
    pub plan: Option<PathBuf>,
    /// Match one node and shift its transfers onto every other identical node: for
    /// All-Gather, Reduce-Scatter and All-Reduce over every NPU of a topology that a shift
    /// by whole nodes maps onto itself (rail-optimized clusters of identical nodes, rings,
    /// tori). Work and memory of one node, not of every NPU: a 16,384-GPU cluster is
    /// matched in under a second where matching every GPU takes minutes (writing and checking
    /// its hundreds of millions of transfers take minutes). The schedule is checked as any
    /// other
    #[arg(long, conflicts_with = "npus")]
    pub replicate: bool,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// No progress spinner on the terminal
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub msccl: LowerArgs,
    #[command(flatten)]
    pub cost: CostArgs,
}

impl SynthArgs {
    /// K as given, or the default: automatic where a program is emitted (`--xml`), as in
    /// the C API and compile; else the search `pipeline::default_chunks` sizes.
    pub fn chunks(&self, topo: &Topology, request: &Request) -> Chunks {
        match self.chunks_per_npu {
            Some(chunks) => chunks,
            None if self.msccl.xml.is_some() => Chunks::Auto,
            None => pipeline::default_chunks(topo, request),
        }
    }

    /// K for a synthesis that takes one (`--stream`, several `--npus`): as given, 1 by
    /// default; `why` says why `auto` is refused.
    pub fn fixed_chunks(&self, why: &str) -> anyhow::Result<usize> {
        match self.chunks_per_npu {
            None => Ok(1),
            Some(Chunks::Fixed(k)) => Ok(k),
            Some(_) => anyhow::bail!("{why}"),
        }
    }
}

/// With `--replicate`: the node shift the schedule was replicated over.
pub fn replication(args: &SynthArgs, topo: &Topology) -> Option<Replication> {
    let shift = NodeShift::find(topo).filter(|_| args.replicate)?;
    Some(Replication {
        npus_per_node: shift.period,
        nodes: shift.nodes,
    })
}

/// How the synthesis time line says a synthesis was replicated (empty where it was not).
pub fn replicated_note(args: &SynthArgs, topo: &Topology) -> String {
    replication(args, topo).map_or(String::new(), |r| {
        format!(
            "; one node of {} NPUs matched, replicated onto {} nodes",
            r.npus_per_node, r.nodes
        )
    })
}

fn chunks_per_npu(s: &str) -> Result<Chunks, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(Chunks::Auto);
    }
    chunk_count(s)
        .map(Chunks::Fixed)
        .map_err(|e| format!("{e}, or auto"))
}

pub fn run(args: SynthArgs) -> anyhow::Result<()> {
    // Every thread the command starts is one of the pool's.
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs)
        .thread_name(|i| format!("tacos-synth-{i}"))
        .build()
        .context("cannot start worker threads")?
        .install(|| run_on_pool(args))
}

fn run_on_pool(args: SynthArgs) -> anyhow::Result<()> {
    let topo = args.topology.topology()?;
    if args.replicate && NodeShift::find(&topo).is_none() {
        anyhow::bail!(
            "--replicate: {} has no shift by whole nodes that maps it onto itself (identical \
             nodes, a ring, a torus along its last dimension, no failed NPU); synthesize it \
             without --replicate",
            topo.name()
        );
    }
    if let Some(path) = &args.stream {
        return super::synth_stream::run(&args, &topo, path);
    }
    if args.npus.len() > 1 {
        if args.msccl.xml.is_some() {
            anyhow::bail!("--xml writes one collective; give --npus once");
        }
        return super::concurrent::run(&args, &topo);
    }
    let request = Request {
        npus: args.npus.first().cloned(),
        root: args.root,
        ..Request::new(args.collective, args.size)
    };
    if args.msccl.placement.is_some() && args.msccl.xml.is_none() && args.plan.is_none() {
        anyhow::bail!(
            "--placement is the placement of what --xml or --plan writes; give one of them"
        );
    }
    let lowering = args.msccl.options()?;
    // The model programs are timed and NCCL priced with (None: --alpha-beta).
    let executor = args.cost.executor(&topo)?;
    let plan_options = PlanOptions {
        in_place: args.msccl.in_place(),
        ..executor
            .as_ref()
            .map_or_else(PlanOptions::default, |e| PlanOptions::for_gpu(e.gpu))
    };
    let chunks = args.chunks(&topo, &request);
    let seeds = args
        .seeds
        .unwrap_or_else(|| pipeline::default_seeds(&topo, &request, chunks));
    let options = pipeline::Options {
        chunks,
        seeds: (0..seeds as u64)
            .map(|i| args.seed.wrapping_add(i))
            .collect(),
        lowering: lowering.clone().unwrap_or_default(),
        replicate: args.replicate,
        planned: !args.no_plan,
        baselines: !args.no_baselines,
        executor: executor
            .clone()
            .filter(|_| lowering.is_some() || args.plan.is_some()),
        fill_instances: args.msccl.instances.is_none(),
        ..pipeline::Options::default()
    };
    let spinner = ProgressHandle::spinner("synthesizing", args.quiet || args.json);
    let search = || -> anyhow::Result<_> {
        let started = Instant::now();
        let found = match (&lowering, &args.plan) {
            (None, None) => {
                let found = pipeline::schedule(&topo, &request, &options)?;
                (found.kept, found.trials, None, None)
            }
            (None, Some(_)) => {
                let found = pipeline::plan(&topo, &request, &options, &plan_options)?;
                let checked = found.kept.checked.clone();
                (checked, found.trials, None, Some(found.kept))
            }
            (Some(_), _) => {
                let found = pipeline::program(&topo, &request, &options)?;
                (
                    found.kept.checked().clone(),
                    found.trials,
                    Some(found.kept),
                    None,
                )
            }
        };
        Ok((found, started.elapsed().as_secs_f64() * 1e3))
    };
    // With K fixed the bounds need nothing from the search, so they are computed beside
    // it: on a large mesh the cut bound's max-flows take about as long as the synthesis.
    let bounds_of = |k: usize| {
        let collective = Collective::new(&topo, request.spec(&topo, k)).ok()?;
        Some(Bounds::chunked(&topo, &collective))
    };
    // A synthesis the memory limit refuses is refused before the bounds start, which on a
    // large cluster would otherwise be waited for (a 16,384-GPU fabric's: half a minute).
    if chunks.only().is_some() {
        pipeline::admit(&topo, &request, &options, lowering.is_some())?;
    }
    let (searched, early_bounds) = rayon::join(search, || chunks.only().and_then(bounds_of));
    let ((checked, trials, verified, planned), synth_ms) = searched?;
    drop(spinner);
    let trials = (trials.len() > 1).then_some(trials);
    let seed = checked.seed().unwrap_or(args.seed);
    let schedule = checked.schedule();
    super::check_moves_data(&schedule.collective)?;
    let collective = Collective::new(&topo, schedule.collective.clone())?;
    let k = collective.spec().chunks_per_npu;
    let root = collective.spec().root;
    let report = checked.report();
    if let Some(path) = &args.out {
        // The file records the network itself, so `tacos simulate --schedule` can rebuild it.
        write_atomic_with(path, |out| schedule.write_json_recording(&topo, out))
            .context("cannot write the schedule")?;
        let written = std::fs::metadata(path).map_or(0, |m| m.len());
        if written > MAX_FILE_BYTES {
            eprintln!(
                "warning: {} is {}, over the {} a schedule file may be when read back (tacos simulate and report --schedule)",
                path.display(),
                format_size(written),
                format_size(MAX_FILE_BYTES)
            );
        }
    }
    let xml = match &verified {
        Some(verified) => args.msccl.write(verified)?.map(|path| (verified, path)),
        None => None,
    };
    // An in-switch plan tried: whether it was kept, and the schedule's own plan's time.
    let in_switch = planned.as_ref().and_then(|p| {
        p.in_switch_tried
            .map(|tried| (tried, p.in_switch, p.schedule_plan_ps))
    });
    // The plan and its time under the executor cost model: as the plan search kept them,
    // or, with --xml, the --xml search's schedule lowered and priced the same way.
    let searched = match (planned, &args.plan, &executor) {
        (Some(p), ..) => Some((p.plan, p.time_ps)),
        (None, Some(_), Some(e)) => {
            let (plan, ps) = pipeline::priced_plan(&topo, &checked, &plan_options, e)?;
            Some((plan, Some(ps)))
        }
        _ => None,
    };
    let plan_ps = searched.as_ref().and_then(|(_, ps)| *ps);
    let plan = match &args.plan {
        Some(path) => Some((
            super::write_plan(
                schedule,
                &topo,
                searched.map(|(p, _)| p),
                &plan_options,
                path,
            )?,
            path,
        )),
        None => None,
    };
    let time_ps = report.collective_time_ps;
    let program_us = verified
        .as_ref()
        .map(|v| ps_to_us(v.time_ps()))
        .or(plan_ps.map(ps_to_us));
    let cost_model = executor
        .as_ref()
        .map(|e| nccl_beside::model_info(e, args.cost.profile_file()));
    let nccl = executor.as_ref().and_then(|e| {
        nccl_beside::beside(
            &topo,
            &args.cost,
            collective.spec(),
            e,
            program_us,
            args.json,
        )
    });
    if let (Some(price), Some(ours)) = (&nccl, program_us) {
        if price.time_us < ours && !args.json {
            eprintln!(
                "warning: NCCL's own choice ({}/{}) is predicted faster than this program at {}: {:.1} us against {:.1} us; \
                 `tacos compile {}` builds a set that serves only the sizes where ours is faster and leaves the rest to NCCL",
                price.algorithm,
                price.protocol,
                format_size(args.size),
                price.time_us,
                ours,
                topo.name()
            );
        }
    }
    // The bounds computed beside the search hold for its K; a baseline kept may split the
    // buffer otherwise (the chunked bound is one K's).
    let bounds = match early_bounds {
        Some(bounds) if chunks.only() == Some(k) => bounds,
        _ => Bounds::chunked(&topo, &collective),
    };
    let npus = collective.npus().len();
    let all_reduce = checked.all_reduce();
    if args.json {
        let run = SynthRun {
            time_ps,
            elapsed_ms: synth_ms,
            check_ms: None,
            transfers: report.transfers,
            seed,
            baseline: checked.baseline().map(|b| b.name().to_string()),
            schedule_file: args.out.as_ref().map(|p| p.display().to_string()),
            xml_file: xml.as_ref().map(|(_, p)| p.display().to_string()),
            plan_file: plan.as_ref().map(|(_, p)| p.display().to_string()),
            program_time_ps: verified.as_ref().map(|v| v.time_ps()),
            cost_model: cost_model
                .clone()
                .filter(|_| verified.is_some() || nccl.is_some()),
            nccl: nccl.clone(),
            allreduce: all_reduce.map(AllReducePhases::new),
            replicated: replication(&args, &topo),
            chunk_trials: trials.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| ChunkTrialReport::new(t, xml.is_some()))
                    .collect()
            }),
        };
        let value = SynthReport::new(&topo, &collective, &bounds, run);
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{}", topology_line(&topo));
    println!(
        "collective           {}{} of {} ({} bytes), {} chunk{} per NPU of {}",
        collective.kind(),
        root.filter(|_| collective.kind().has_root())
            .map_or(String::new(), |r| format!(" from NPU {r}")),
        format_size(args.size),
        args.size,
        k,
        if k == 1 { "" } else { "s" },
        format_size(collective.chunk_bytes().round() as u64)
    );
    if npus != topo.alive_npus().len() || !topo.failed().is_empty() {
        println!(
            "NPUs                 {} take part{}",
            format_npus(collective.npus()),
            if topo.failed().is_empty() {
                String::new()
            } else {
                format!(", {} failed", format_npus(topo.failed()))
            }
        );
    }
    if let Some(trials) = &trials {
        // Per K, the best simulated time over the seeds.
        let mut best: Vec<(usize, u64)> = Vec::new();
        for t in trials.iter().filter(|t| t.baseline.is_none()) {
            let Some(ps) = t.simulated_ps else { continue };
            match best.iter_mut().find(|(k, _)| *k == t.chunks_per_npu) {
                Some(entry) => entry.1 = entry.1.min(ps),
                None => best.push((t.chunks_per_npu, ps)),
            }
        }
        let tried: Vec<String> = best
            .iter()
            .map(|&(k, ps)| format!("K={k} {:.3} us", ps_to_us(ps)))
            .collect();
        let what = if xml.is_some() {
            "programs"
        } else {
            "schedules"
        };
        match chunks.only() {
            None => {
                let of_seeds = if seeds > 1 {
                    format!(" (each the best of {seeds} seeds)")
                } else {
                    String::new()
                };
                println!(
                    "chunks per NPU       auto, simulated {what}{of_seeds}: {}",
                    tried.join(", ")
                );
            }
            Some(_) => {
                let times = trials.iter().filter_map(|t| t.simulated_ps);
                let worst = times.max().unwrap_or(0);
                println!(
                    "seeds                {seeds} tried, simulated {what}: {} (the worst {:.3} us)",
                    tried.join(", "),
                    ps_to_us(worst)
                );
            }
        }
        // Per baseline, its best K.
        let mut baselines: Vec<(Baseline, usize, u64)> = Vec::new();
        for t in trials {
            let (Some(b), Some(ps)) = (t.baseline, t.simulated_ps) else {
                continue;
            };
            match baselines.iter_mut().find(|(seen, ..)| *seen == b) {
                Some(entry) if ps < entry.2 => *entry = (b, t.chunks_per_npu, ps),
                Some(_) => {}
                None => baselines.push((b, t.chunks_per_npu, ps)),
            }
        }
        if !baselines.is_empty() {
            let each: Vec<String> = baselines
                .iter()
                .map(|&(b, k, ps)| format!("{b} {:.3} us (K={k})", ps_to_us(ps)))
                .collect();
            println!(
                "baselines            simulated {what}, each at its best K: {}",
                each.join(", ")
            );
        }
        // Trials passed over, counted per K in the order tried, and the first one's reason.
        let mut passed_over: Vec<(usize, usize)> = Vec::new();
        for t in trials.iter().filter(|t| t.refused.is_some()) {
            match passed_over.iter_mut().find(|(k, _)| *k == t.chunks_per_npu) {
                Some((_, count)) => *count += 1,
                None => passed_over.push((t.chunks_per_npu, 1)),
            }
        }
        if let Some(why) = trials.iter().find_map(|t| t.refused.as_deref()) {
            let each: Vec<String> = passed_over
                .iter()
                .map(|&(k, n)| match n {
                    1 => format!("K={k}"),
                    n => format!("K={k} ({n} trials)"),
                })
                .collect();
            println!(
                "                     passed over (no verified program within the target): {}; the first: {why}",
                each.join(", ")
            );
        }
    }
    println!(
        "schedule time        {:.3} us (the schedule's own clock: links' alpha-beta)",
        ps_to_us(time_ps)
    );
    if let Some(a) = all_reduce {
        println!(
            "all-reduce           pipelined {:.3} us, phased {:.3} us (reduce-scatter ends {:.3} us); kept {}",
            ps_to_us(a.pipelined_ps),
            ps_to_us(a.phased_ps),
            ps_to_us(a.reduce_scatter_ps),
            if a.pipelined { "pipelined" } else { "phased" }
        );
    }
    print_bandwidth_and_bound(args.size, time_ps, &bounds);
    let kept = if let Some(b) = checked.baseline() {
        format!(
            "the {b} baseline kept: faster than the {seeds} seeds and planned ways tried; --no-baselines for the synthesizer's own"
        )
    } else if let Some(shape) = checked.plan() {
        let ways = match shape {
            TreeShape::Balanced => "planned ways",
            TreeShape::Shallow => "planned ways (shallow trees)",
            TreeShape::OneWay => "planned ways (one-way trees)",
        };
        format!("{ways} with seed {seed} kept; {seeds} seeds and planned ways tried")
    } else {
        let planned = trials
            .as_ref()
            .is_some_and(|ts| ts.iter().any(|t| t.planned));
        let and_planned = if planned { " and planned ways" } else { "" };
        format!("seed {seed} kept of {seeds} tried{and_planned}")
    };
    println!(
        "synthesis time       {synth_ms:.2} ms ({kept}{})",
        replicated_note(&args, &topo)
    );
    println!(
        "transfers            {} (checked: correct and contention-free)",
        report.transfers
    );
    if let Some(path) = &args.out {
        println!("schedule             {}", path.display());
    }
    let model = cost_model.as_ref().map_or_else(
        || "bare alpha-beta messages".to_string(),
        nccl_beside::model_label,
    );
    if let Some((plan, path)) = &plan {
        println!(
            "mscclpp plan         {} ({})",
            path.display(),
            super::describe_plan(plan)
        );
        match in_switch {
            Some((tried, true, schedule_ps)) => println!(
                "                     reduced inside the NVSwitch ({}): faster than the schedule above, whose own plan takes {:.3} us",
                tried.label,
                ps_to_us(schedule_ps)
            ),
            Some((tried, false, _)) => println!(
                "                     the schedule's own; the in-switch plan ({}) takes {:.3} us ({model}), not kept",
                tried.label,
                ps_to_us(tried.time_ps)
            ),
            None => {}
        }
        if let Some(ps) = plan_ps {
            println!("plan time            {:.3} us ({model})", ps_to_us(ps));
        }
    }
    if let Some(verified) = &verified {
        let written = xml.as_ref().map_or_else(
            || "not written".to_string(),
            |(_, path)| path.display().to_string(),
        );
        println!(
            "msccl xml            {written} ({}; verified)",
            describe(verified.program())
        );
        println!(
            "program time         {:.3} us ({model})",
            ps_to_us(verified.time_ps())
        );
    }
    if let Some(price) = &nccl {
        println!("{}", nccl_beside::line(price, &model));
    }
    Ok(())
}

/// The text report's lines for the algorithm bandwidth of `size` bytes in `time_ps` and
/// the best lower bound with the efficiency against it.
pub(super) fn print_bandwidth_and_bound(size: u64, time_ps: u64, bounds: &Bounds) {
    println!("algorithm bandwidth  {:.2} GB/s", algbw_gbps(size, time_ps));
    println!(
        "lower bound          {:.3} us, {} (efficiency {:.3})",
        ps_to_us(bounds.best_ps()),
        bounds.best_name(),
        bounds.efficiency(time_ps)
    );
}

/// The first line of the text report: the topology and its size.
pub(super) fn topology_line(topo: &Topology) -> String {
    format!(
        "topology             {} ({} NPUs, {} links)",
        topo.name(),
        topo.alive_npus().len(),
        topo.links().len()
    )
}
