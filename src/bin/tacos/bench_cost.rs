//! `tacos bench cost`: what pricing NCCL's own choices with the executor cost model costs:
//! building the prices for one collective on a cluster (the algorithms' shapes and NCCL's
//! cost table, once), then pricing 30 sizes (1 KiB to 512 GiB, doubling) as `compile`
//! and `simulate --baseline nccl` do. The last cases price by formulas, as the tuner
//! plugin does for clusters of identical nodes, with no topology built.

use super::bench::{best_of, print_json, BenchArgs};
use super::progress::ProgressHandle;
use std::time::Duration;
use tacos::collective::CollectiveKind;
use tacos::cost::program::preset_gpu;
use tacos::cost::{ExecModel, Executor, NcclPricer};
use tacos::gpu::GpuArch;
use tacos::topology::spec::{plan_spec, SpecPlan};
use tacos::topology::{parse_spec, SpecDefaults};
use tacos::tuner::Cluster;
use tacos::units::algbw_gbps;
use tacos_cli::report::CostBenchRow;

/// The clusters: one node of each generation, two and eight nodes (64 GPUs).
const CASES: [&str; 4] = [
    "preset:dgx-a100,nodes=1",
    "preset:dgx-h100,nodes=1",
    "preset:dgx-a100,nodes=2",
    "preset:dgx-h100,nodes=8",
];
/// Clusters priced by formulas: 64 GPUs as above, and 4,096.
const FORMULA_CASES: [&str; 2] = ["preset:dgx-h100,nodes=8", "preset:dgx-h100,nodes=512"];
/// Sizes priced per case: 2^10 .. 2^39 bytes.
const SIZES: usize = 30;

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let kind = args.collective.unwrap_or(CollectiveKind::AllReduce);
    let mut rows = Vec::new();
    if !args.json {
        bar.println(format!(
            "{:<37} {:>5} {:<14} {:>10} {:>16} {:>14}",
            "topology", "GPUs", "collective", "init (ms)", "30 sizes (us)", "busbw 1 GiB"
        ));
    }
    let simulated = CASES.iter().map(|&spec| (spec, false));
    let formulas = FORMULA_CASES.iter().map(|&spec| (spec, true));
    for (spec, by_formula) in simulated.chain(formulas) {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        bar.step(spec);
        let (init, pricer, gpus) = if by_formula {
            let cluster = cluster_of(spec)?;
            let gpu = preset_gpu(spec).unwrap_or(GpuArch::Hopper);
            let model = ExecModel::resolve(None, gpu)?;
            let build = || {
                Ok(NcclPricer::for_cluster(
                    &cluster,
                    spec,
                    kind,
                    gpu,
                    model.clone(),
                )?)
            };
            let (init, pricer) = best_of(Duration::from_millis(300), build)?;
            (init, pricer, cluster.npus())
        } else {
            let topo = parse_spec(spec, &SpecDefaults::default())?;
            let executor = Executor::for_topology(&topo, None, None)?;
            let build = || {
                let model = executor.model.clone();
                let (domain, gpu) = (executor.domain_size, executor.gpu);
                Ok(NcclPricer::new(&topo, kind, domain, gpu, model)?)
            };
            let (init, pricer) = best_of(Duration::from_millis(300), build)?;
            (init, pricer, topo.alive_npus().len())
        };
        let price_all = || {
            let mut total = 0.0;
            for b in 0..SIZES {
                total += pricer.price(1u64 << (10 + b), None, None)?.time_us;
            }
            Ok(total)
        };
        let (priced, _) = best_of(Duration::from_millis(300), price_all)?;
        let gib = pricer.price(1 << 30, None, None)?;
        let busbw = algbw_gbps(1 << 30, tacos::units::us_to_ps(gib.time_us))
            * tacos::sim::bus_factor(kind, gpus);
        let row = CostBenchRow {
            topology: if by_formula {
                format!("{spec} (formulas)")
            } else {
                spec.to_string()
            },
            gpus,
            collective: kind,
            init_ms: init.as_secs_f64() * 1e3,
            sizes: SIZES,
            price_all_us: priced.as_secs_f64() * 1e6,
            busbw_1gib_gbps: busbw,
        };
        if !args.json {
            bar.println(format!(
                "{:<37} {:>5} {:<14} {:>10.2} {:>16.2} {:>14.1}",
                row.topology, row.gpus, kind, row.init_ms, row.price_all_us, row.busbw_1gib_gbps
            ));
        }
        rows.push(row);
    }
    print_json(args, "cost", rows)
}

/// The cluster of identical nodes of 8 GPUs a preset spec names.
fn cluster_of(spec: &str) -> anyhow::Result<Cluster> {
    match plan_spec(spec, &SpecDefaults::default())? {
        SpecPlan::Composed { dims, .. } => Cluster::from_dims(&dims, 8)
            .ok_or_else(|| anyhow::anyhow!("{spec} is not a cluster of nodes of 8 GPUs")),
        SpecPlan::Built(..) => anyhow::bail!("{spec} is not a cluster of identical nodes"),
    }
}
