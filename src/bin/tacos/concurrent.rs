//! `tacos synth --npus A --npus B ...`: several collectives over NPU groups, synthesized
//! together as one matching so they share links without contention (tensor-parallel
//! groups running their collectives at the same time, say).

use super::synth::{topology_line, SynthArgs};
use anyhow::{bail, Context};
use std::time::Instant;
use tacos::collective::{Collective, CollectiveSpec};
use tacos::pipeline::{self, Request};
use tacos::schedule::CheckReport;
use tacos::synth::SynthOptions;
use tacos::topology::{format_npus, Topology};
use tacos::units::{format_size, ps_to_us};
use tacos_cli::report::{
    CollectiveInfo, ConcurrentSynthReport, GroupReport, TopologyInfo, SCHEMA_VERSION,
};

pub(super) fn run(args: &SynthArgs, topo: &Topology) -> anyhow::Result<()> {
    let k = args.fixed_chunks(
        "--chunks-per-npu auto chooses K for one collective; give a number with several --npus",
    )?;
    if args.root.is_some() {
        bail!("--root names one root; with several --npus each group's root is its first NPU");
    }
    if args.out.is_some() {
        bail!("--out writes one schedule; give a single --npus to write it");
    }
    let collectives = args
        .npus
        .iter()
        .enumerate()
        .map(|(i, npus)| {
            Collective::new(
                topo,
                CollectiveSpec {
                    kind: args.collective,
                    root: args.collective.has_root().then(|| npus[0]),
                    npus: npus.clone(),
                    chunks_per_npu: k,
                    size_bytes: args.size,
                },
            )
            .with_context(|| format!("group {i} (--npus {})", format_npus(npus)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let requests: Vec<Request> = collectives
        .iter()
        .map(|c| Request {
            npus: Some(c.npus().to_vec()),
            root: c.spec().root,
            ..Request::new(args.collective, args.size)
        })
        .collect();
    let started = Instant::now();
    let checked = pipeline::concurrent(topo, &requests, k, args.seed)?;
    let synth_ms = started.elapsed().as_secs_f64() * 1e3;
    let reports: Vec<&CheckReport> = checked.iter().map(|c| c.report()).collect();
    // Each group on its own, to show what sharing the links costs.
    let alone = requests
        .iter()
        .map(|r| {
            Ok(
                pipeline::synthesize(topo, r, k, &SynthOptions::seeded(args.seed))?
                    .report()
                    .collective_time_ps,
            )
        })
        .collect::<tacos::Result<Vec<_>>>()?;
    let together = reports
        .iter()
        .map(|r| r.collective_time_ps)
        .max()
        .unwrap_or(0);
    if args.json {
        let groups = collectives
            .iter()
            .zip(&reports)
            .zip(&alone)
            .map(|((c, r), &a)| GroupReport {
                collective: CollectiveInfo::new(c.spec()),
                time_us: ps_to_us(r.collective_time_ps),
                alone_time_us: ps_to_us(a),
                transfers: r.transfers,
            })
            .collect();
        let report = ConcurrentSynthReport {
            schema_version: SCHEMA_VERSION,
            command: "synth",
            topology: TopologyInfo::new(topo),
            groups,
            time_us: ps_to_us(together),
            elapsed_ms: synth_ms,
            seed: args.seed,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}", topology_line(topo));
    println!(
        "collective           {} of {} in each of {} groups, {k} chunk{} per NPU, synthesized together",
        args.collective,
        format_size(args.size),
        collectives.len(),
        if k == 1 { "" } else { "s" }
    );
    for (i, ((c, r), &a)) in collectives.iter().zip(&reports).zip(&alone).enumerate() {
        println!(
            "group {i:<14} {:.3} us (alone {:.3} us), NPUs {}",
            ps_to_us(r.collective_time_ps),
            ps_to_us(a),
            format_npus(c.npus())
        );
    }
    println!("all done             {:.3} us", ps_to_us(together));
    println!("synthesis time       {synth_ms:.2} ms (seed {})", args.seed);
    println!(
        "transfers            {} (checked: correct, and contention-free together)",
        reports.iter().map(|r| r.transfers).sum::<usize>()
    );
    Ok(())
}
