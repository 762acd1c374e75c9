//! `tacos synth`: synthesize, check and report one algorithm.

use super::{at_least_one, collective_kind, size, TopologyArgs};
use crate::bounds::ingress_bound_ps;
use crate::collective::{Collective, CollectiveKind};
use crate::fsio::write_atomic;
use crate::schedule::check;
use crate::synth::{synthesize, SynthOptions};
use crate::units::{algbw_gbps, format_size, ps_to_us};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SynthArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Collective: allgather, reducescatter, allreduce, broadcast, reduce, gather, scatter, alltoall
    #[arg(short, long, default_value = "allgather", value_parser = collective_kind)]
    pub collective: CollectiveKind,
    /// Buffer every NPU ends with (nccl-tests' convention), e.g. 1GiB, 4MB, 65536
    #[arg(short, long, default_value = "1GiB", value_parser = size, allow_hyphen_values = true)]
    pub size: u64,
    /// Chunks per NPU (K): each NPU's share is split into K chunks
    #[arg(short = 'k', long, default_value_t = 1, value_parser = at_least_one)]
    pub chunks_per_npu: usize,
    /// Root NPU of a rooted collective (default: the first NPU)
    #[arg(long)]
    pub root: Option<usize>,
    /// Seed for the synthesizer's random choices
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the schedule (every transfer) as JSON to this file
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SynthArgs) -> anyhow::Result<()> {
    let topo = args.topology.topology()?;
    let root = match (args.collective.has_root(), args.root) {
        (true, None) => topo.alive_npus().first().copied(),
        (_, root) => root,
    };
    let collective =
        Collective::over_all(&topo, args.collective, root, args.chunks_per_npu, args.size)?;
    let started = Instant::now();
    let schedule = synthesize(&topo, &collective, &SynthOptions { seed: args.seed })?;
    let synth_ms = started.elapsed().as_secs_f64() * 1e3;
    let report = check(&schedule, &topo).context("the synthesized schedule failed the checker")?;
    if let Some(path) = &args.out {
        write_atomic(path, schedule.to_json().as_bytes()).context("cannot write the schedule")?;
    }
    let time_ps = report.collective_time_ps;
    let bound_ps = ingress_bound_ps(&topo, &collective);
    let efficiency = if time_ps > 0 {
        bound_ps as f64 / time_ps as f64
    } else {
        1.0
    };
    let npus = collective.npus().len();
    if args.json {
        let value = serde_json::json!({
            "topology": topo.name(),
            "npus": npus,
            "links": topo.links().len(),
            "collective": collective.kind().name(),
            "root": root.filter(|_| collective.kind().has_root()),
            "size_bytes": args.size,
            "chunks_per_npu": args.chunks_per_npu,
            "chunk_bytes": collective.chunk_bytes(),
            "collective_time_us": ps_to_us(time_ps),
            "algbw_gbps": algbw_gbps(args.size, time_ps),
            "ingress_bound_us": ps_to_us(bound_ps),
            "efficiency": efficiency,
            "synth_time_ms": synth_ms,
            "transfers": report.transfers,
            "seed": args.seed,
            "schedule_file": args.out.as_ref().map(|p| p.display().to_string()),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "topology             {} ({npus} NPUs, {} links)",
        topo.name(),
        topo.links().len()
    );
    println!(
        "collective           {}{} of {} ({} bytes), {} chunk{} per NPU of {}",
        collective.kind(),
        root.filter(|_| collective.kind().has_root())
            .map_or(String::new(), |r| format!(" from NPU {r}")),
        format_size(args.size),
        args.size,
        args.chunks_per_npu,
        if args.chunks_per_npu == 1 { "" } else { "s" },
        format_size(collective.chunk_bytes().round() as u64)
    );
    println!("collective time      {:.3} us", ps_to_us(time_ps));
    println!(
        "algorithm bandwidth  {:.2} GB/s",
        algbw_gbps(args.size, time_ps)
    );
    println!(
        "ingress bound        {:.3} us (efficiency {:.3})",
        ps_to_us(bound_ps),
        efficiency
    );
    println!("synthesis time       {synth_ms:.2} ms (seed {})", args.seed);
    println!(
        "transfers            {} (checked: correct and contention-free)",
        report.transfers
    );
    if let Some(path) = &args.out {
        println!("schedule             {}", path.display());
    }
    Ok(())
}
