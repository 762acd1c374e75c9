//! `tacos measure-plan`: the nccl-tests runs that measure a compiled set against stock NCCL
//! on the cluster it was compiled for, band by band: the same sizes twice, with the set and
//! without it, one process per GPU.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use tacos::collective::CollectiveKind;
use tacos::compile::{
    algorithm_dir, short_range, short_size, Manifest, WITHOUT_SET_PREFIX, WITH_SET_PREFIX,
};

#[derive(Debug, Args)]
pub struct MeasurePlanArgs {
    /// The compiled directory (from `tacos compile --out`), on the path every node sees
    #[arg(long, value_name = "DIR")]
    pub compiled: PathBuf,
    /// The hosts and their GPUs, as mpirun's -H takes them (e.g. node1:8,node2:8)
    /// [default: a HOSTS placeholder to fill in]
    #[arg(long, value_name = "LIST")]
    pub hosts: Option<String>,
    /// Where the nccl-tests binaries are [default: ./build, as nccl-tests builds them]
    #[arg(long, value_name = "DIR", default_value = "./build")]
    pub nccl_tests: PathBuf,
}

/// The nccl-tests binary that times `kind`.
fn perf_binary(kind: CollectiveKind) -> &'static str {
    match kind {
        CollectiveKind::AllReduce => "all_reduce_perf",
        CollectiveKind::AllGather => "all_gather_perf",
        CollectiveKind::ReduceScatter => "reduce_scatter_perf",
        CollectiveKind::Broadcast => "broadcast_perf",
        CollectiveKind::Reduce => "reduce_perf",
        CollectiveKind::AllToAll => "alltoall_perf",
        CollectiveKind::Gather => "gather_perf",
        CollectiveKind::Scatter => "scatter_perf",
    }
}

pub fn run(args: MeasurePlanArgs) -> anyhow::Result<()> {
    let manifest = Manifest::read(&args.compiled)
        .with_context(|| format!("{} is not a compiled directory", args.compiled.display()))?;
    let ranks = manifest.topology.npus;
    let hosts = args.hosts.as_deref().unwrap_or("HOSTS");
    let algos = algorithm_dir(&args.compiled);
    let sizes = manifest.options.sizes;
    println!(
        "# Measure {} (compiled for {}, {ranks} ranks) against stock NCCL: each collective twice, \
         with the set (NCCL_MSCCL_ENABLE=1) and without it (=0), over {}..{}, one process per GPU.",
        args.compiled.display(),
        manifest.topology.name,
        short_size(sizes.min_bytes),
        short_size(sizes.max_bytes)
    );
    let mut measured = Vec::new();
    for &kind in &manifest.options.collectives {
        let binary = perf_binary(kind);
        let served: Vec<String> = manifest
            .entries
            .iter()
            .filter(|e| e.collective == kind)
            .map(|e| {
                let placement = if e.in_place {
                    "in place"
                } else {
                    "out of place"
                };
                format!("{} {placement}", short_range(e.min_bytes, e.max_bytes))
            })
            .collect();
        println!();
        if served.is_empty() {
            println!("# {kind}: every band is left to NCCL; nothing of ours to measure");
            continue;
        }
        println!("# {kind}: the set serves {}", served.join(", "));
        measured.push(kind);
        for (prefix, enabled) in [(WITH_SET_PREFIX, 1), (WITHOUT_SET_PREFIX, 0)] {
            println!(
                "mpirun -np {ranks} -H {hosts} -x NCCL_MSCCL_ENABLE={enabled} -x MSCCL_ALGO_DIR={} \
                 {}/{binary} -b {} -e {} -f 2 -g 1 > {prefix}{kind}.txt",
                algos.display(),
                args.nccl_tests.display(),
                short_size(sizes.min_bytes),
                short_size(sizes.max_bytes)
            );
        }
    }
    if !measured.is_empty() {
        let files: Vec<String> = [WITH_SET_PREFIX, WITHOUT_SET_PREFIX]
            .iter()
            .flat_map(|prefix| {
                measured
                    .iter()
                    .map(move |kind| format!("{prefix}{kind}.txt"))
            })
            .collect();
        println!(
            "\n# Then, where the outputs are: every band where ours measured slower goes back to NCCL\n\
             tacos compile --feedback {} --out {}",
            files.join(" "),
            args.compiled.display()
        );
    }
    Ok(())
}
