//! `tacos verify`: check an MSCCL algorithm XML file, and time it on a topology.

use super::{collective_kind, non_negative, positive, size, TopologyArgs};
use crate::collective::CollectiveKind;
use crate::msccl::{read_program, simulate_program, verify, VerifyOptions};
use crate::units::{algbw_gbps, format_size, ps_to_us};
use anyhow::bail;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// MSCCL algorithm XML file
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Topology to time the program on, as `tacos synth` takes it (rank r on the r-th
    /// NPU); without it nothing is timed
    #[arg(value_name = "SPEC", requires = "size")]
    pub spec: Option<String>,
    /// Collective size to time the program for (nccl-tests' convention), e.g. 1GiB
    #[arg(short, long, value_parser = size, requires = "spec")]
    pub size: Option<u64>,
    /// Bandwidth of links the spec leaves unspecified, GB/s
    #[arg(long, default_value_t = 50.0, value_name = "GBPS", value_parser = positive)]
    pub bandwidth: f64,
    /// Latency (alpha) of links the spec leaves unspecified, microseconds
    #[arg(long, default_value_t = 0.5, value_name = "US", value_parser = non_negative)]
    pub latency: f64,
    /// Check the program as this collective instead of the one its coll attribute names
    #[arg(short, long, value_parser = collective_kind)]
    pub collective: Option<CollectiveKind>,
    /// Root rank of a rooted collective (default: the one GPU that only sends, for
    /// broadcast and scatter, or only receives, for reduce and gather, else the first
    /// rank for which the program is correct)
    #[arg(long)]
    pub root: Option<usize>,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// Succeeds only when the program is correct.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let program = read_program(&args.file)?;
    let options = VerifyOptions {
        collective: args.collective,
        root: args.root,
        ..VerifyOptions::default()
    };
    let report = verify(&program, &options);
    let timing = match (&args.spec, args.size) {
        (Some(spec), Some(size)) if report.is_correct() => {
            let topo = TopologyArgs {
                spec: spec.clone(),
                bandwidth: args.bandwidth,
                latency: args.latency,
                fail_npus: None,
                fail_links: None,
            }
            .topology()?;
            let sim = simulate_program(&topo, &program, size)?;
            Some((topo.name().to_string(), size, sim.time_ps))
        }
        _ => None,
    };
    let file = args.file.display();
    let tbs: usize = program.gpus.iter().map(|g| g.threadblocks.len()).sum();
    let kind = report
        .collective
        .map_or(program.collective.clone(), |k| k.to_string());
    let layouts: Vec<&str> = report
        .in_place_checked
        .iter()
        .map(|&p| if p { "in place" } else { "out of place" })
        .collect();
    if args.json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| serde_json::json!({"kind": p.kind.name(), "message": p.message}))
            .collect();
        let value = serde_json::json!({
            "file": file.to_string(),
            "name": program.name,
            "collective": kind,
            "root": report.root,
            "gpus": program.gpus.len(),
            "channels": program.nchannels,
            "chunks_per_loop": program.nchunksperloop,
            "proto": program.proto.name(),
            "layouts_checked": layouts,
            "threadblocks": tbs,
            "steps": report.steps,
            "messages": report.messages,
            "correct": report.is_correct(),
            "problems": problems,
            "unlisted_problems": report.unlisted,
            "topology": timing.as_ref().map(|t| t.0.clone()),
            "size_bytes": timing.as_ref().map(|t| t.1),
            "time_us": timing.as_ref().map(|t| ps_to_us(t.2)),
            "algbw_gbps": timing.as_ref().map(|t| algbw_gbps(t.1, t.2)),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
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
        let root = report
            .root
            .map_or(String::new(), |r| format!(" from rank {r}"));
        println!(
            "checked as           {kind}{root}, {}",
            layouts.join(" and ")
        );
        if report.is_correct() {
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
        if let Some((topo, size, time_ps)) = &timing {
            println!(
                "time                 {:.3} us on {topo} for {} (algbw {:.2} GB/s)",
                ps_to_us(*time_ps),
                format_size(*size),
                algbw_gbps(*size, *time_ps)
            );
        }
    }
    if !report.is_correct() {
        let n = report.problems.len() + report.unlisted;
        let first = report
            .problems
            .first()
            .map_or(String::new(), |p| format!(": {p}"));
        bail!("{file} is not a correct {kind} program ({n} problem(s)){first}");
    }
    Ok(())
}
