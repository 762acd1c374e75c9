//! `tacos synth --stream FILE`: a schedule too large to hold, synthesized into a transfer
//! stream file as it is made and checked by reading the file back.

use super::progress::ProgressHandle;
use super::synth::{
    print_bandwidth_and_bound, replicated_note, replication, topology_line, SynthArgs,
};
use std::path::Path;
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind};
use tacos::pipeline::{self, Request};
use tacos::synth::SynthOptions;
use tacos::topology::Topology;
use tacos::units::{format_size, ps_to_us};
use tacos_cli::report::{SynthReport, SynthRun};

pub fn run(args: &SynthArgs, topo: &Topology, path: &Path) -> anyhow::Result<()> {
    let k = args.fixed_chunks(
        "--stream takes a fixed -k (K is chosen by simulating schedules held whole)",
    )?;
    if args.seeds.is_some_and(|n| n > 1) {
        anyhow::bail!(
            "--stream synthesizes one seed (--seed); --seeds compares schedules held whole"
        );
    }
    // `--npus` is refused beside `--stream`: a sub-collective's relayed chunks are pruned
    // over the whole list.
    let request = Request {
        root: args.root,
        ..Request::new(args.collective, args.size)
    };
    let spec = request.spec(topo, k);
    super::check_moves_data(&spec)?;
    let collective = Collective::new(topo, spec)?;
    let hidden = args.quiet || args.json;
    // Every NPU but a chunk's first gets it once in each half (an All-Reduce has two);
    // the progress counts the transfers of the matchings spooled first, then those
    // written.
    let per_half =
        collective.chunk_count() as u64 * collective.npus().len().saturating_sub(1) as u64;
    let halves = if collective.kind() == CollectiveKind::AllReduce {
        2
    } else {
        1
    };
    let options = SynthOptions {
        replicate: args.replicate,
        ..SynthOptions::seeded(args.seed)
    };
    // A replicated synthesis matches one node, so it spools nothing and is not refused
    // for the whole matching's memory.
    let spooled = match args.replicate {
        true => 0,
        false => tacos::synth::spooled_matchings(topo, &collective),
    };
    let expected = per_half * (halves + spooled);
    let label = if spooled > 0 {
        "synthesizing (transfers matched, then written)"
    } else {
        "synthesizing (transfers written)"
    };
    let bar = ProgressHandle::bar(label, expected, hidden);
    // Refused before the bounds start, which would otherwise be waited for.
    if !args.replicate {
        tacos::synth::admit_streamed(topo, &collective)?;
    }
    // The bounds need nothing from the synthesis, so they are computed beside it.
    let (made, bounds) = rayon::join(
        || pipeline::synthesize_to_stream(topo, &collective, &options, path, &mut |n| bar.set(n)),
        || Bounds::chunked(topo, &collective),
    );
    drop(bar);
    let made = made?;
    let synth_ms = made.synthesized.as_secs_f64() * 1e3;
    // The check reads the file as it is written; what it adds is the time it runs on.
    let check_ms = made.checked.saturating_sub(made.synthesized).as_secs_f64() * 1e3;
    let report = made.report;
    let time_ps = report.collective_time_ps;
    let written = std::fs::metadata(path).map_or(0, |m| m.len());
    if args.json {
        let run = SynthRun {
            baseline: None,
            time_ps,
            elapsed_ms: synth_ms,
            check_ms: Some(check_ms),
            transfers: report.transfers,
            seed: args.seed,
            schedule_file: Some(path.display().to_string()),
            xml_file: None,
            plan_file: None,
            program_time_ps: None,
            cost_model: None,
            nccl: None,
            allreduce: None,
            replicated: replication(args, topo),
            chunk_trials: None,
        };
        let value = SynthReport::new(topo, &collective, &bounds, run);
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{}", topology_line(topo));
    println!(
        "collective           {} of {}, {k} chunk{} per NPU of {}",
        collective.kind(),
        format_size(args.size),
        if k == 1 { "" } else { "s" },
        format_size(collective.chunk_bytes().round() as u64)
    );
    println!("collective time      {:.3} us", ps_to_us(time_ps));
    print_bandwidth_and_bound(args.size, time_ps, &bounds);
    println!(
        "synthesis time       {synth_ms:.2} ms (seed {}, streamed{})",
        args.seed,
        replicated_note(args, topo)
    );
    println!(
        "check time           {check_ms:.2} ms after the synthesis (the file read as it was written)"
    );
    println!(
        "transfers            {} (checked: correct and contention-free)",
        report.transfers
    );
    println!(
        "schedule             {} ({}, {:.1} bytes per transfer)",
        path.display(),
        format_size(written),
        written as f64 / report.transfers.max(1) as f64
    );
    Ok(())
}
