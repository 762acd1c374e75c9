//! `tacos simulate --baseline nccl`: NCCL's own Ring or Tree for the collective and size,
//! priced by the executor cost model (`tacos::cost::nccl`), with the algorithm and
//! protocol NCCL's tuning would pick unless the command line names them.

use super::simulate::{print_bounds, print_topology, SimulateArgs};
use anyhow::bail;
use clap::Args;
use tacos::bounds::Bounds;
use tacos::collective::Collective;
use tacos::cost::NcclPricer;
use tacos::gpu::{Algorithm, Protocol};
use tacos::units::{format_size, us_to_ps};
use tacos_cli::report::{
    BoundsReport, CollectiveInfo, CostModelInfo, NcclInfo, NcclSimulateReport, Timing,
    TopologyInfo, SCHEMA_VERSION,
};

/// The choices `--baseline nccl` takes.
#[derive(Debug, Args)]
pub struct NcclArgs {
    /// With --baseline nccl: NCCL's algorithm, ring, tree, nvls, nvls_tree, pat,
    /// collnet_direct or collnet_chain, where NCCL runs it [default: what NCCL's tuning
    /// picks for the size]
    #[arg(long, value_name = "ALGO", value_parser = nccl_algorithm)]
    pub nccl_algo: Option<Algorithm>,
    /// With --baseline nccl: NCCL's protocol, ll, ll128 or simple [default: what NCCL's
    /// tuning picks for the size]
    #[arg(long, value_name = "PROTO", value_parser = nccl_protocol)]
    pub proto: Option<Protocol>,
}

impl NcclArgs {
    pub fn given(&self) -> bool {
        self.nccl_algo.is_some() || self.proto.is_some()
    }
}

fn nccl_algorithm(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(s).ok_or_else(|| {
        format!(
            "'{s}' is not one of NCCL's algorithms: ring, tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain"
        )
    })
}

fn nccl_protocol(s: &str) -> Result<Protocol, String> {
    Protocol::ALL
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("'{s}' is not one of NCCL's protocols: ll, ll128, simple"))
}

pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    if args.sharing != tacos::sim::Sharing::Serial {
        bail!("--sharing applies to simulated algorithms; --baseline nccl is priced by the executor cost model");
    }
    let topo = args.topology.topology()?;
    let spec = args.collective.spec(&topo);
    let Some(executor) = args.cost.executor(&topo)? else {
        bail!("--baseline nccl is priced by the executor cost model; leave out --alpha-beta");
    };
    let pricer = NcclPricer::new(
        &topo,
        spec.kind,
        executor.domain_size,
        executor.gpu,
        executor.model.clone(),
    )?;
    let price = pricer.price(spec.size_bytes, args.nccl.nccl_algo, args.nccl.proto)?;
    let collective = Collective::new(&topo, spec)?;
    let bounds = Bounds::new(&topo, &collective);
    let time_ps = us_to_ps(price.time_us);
    let timing = Timing::new(collective.spec(), time_ps, &bounds);
    let picked_by = if price.nccl_choice {
        "nccl"
    } else {
        "command line"
    };
    let model = pricer.model();
    if args.json {
        let report = NcclSimulateReport {
            schema_version: SCHEMA_VERSION,
            command: "simulate",
            topology: TopologyInfo::new(&topo),
            algorithm: format!("nccl {}/{}", price.algorithm, price.protocol),
            collective: CollectiveInfo::new(collective.spec()),
            nccl: NcclInfo {
                algorithm: price.algorithm,
                protocol: price.protocol,
                channels: price.channels,
                picked_by,
            },
            cost_model: CostModelInfo {
                arch: model.arch.clone(),
                source: model.source.clone(),
                profile: args.cost.profile_file(),
            },
            timing,
            bounds: BoundsReport::new(&bounds),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let spec = collective.spec();
    print_topology(&topo);
    println!(
        "algorithm     NCCL {} with {} on {} channels (picked by {picked_by})",
        price.algorithm, price.protocol, price.channels
    );
    println!(
        "collective    {} of {}",
        spec.kind,
        format_size(spec.size_bytes)
    );
    println!(
        "cost model    {} constants ({})",
        model.arch,
        args.cost
            .profile_file()
            .unwrap_or_else(|| "built in".to_string())
    );
    println!("time          {:.3} us predicted", price.time_us);
    println!("algbw         {:.2} GB/s", timing.algbw_gbps);
    println!("busbw         {:.2} GB/s", timing.busbw_gbps);
    print_bounds(&bounds, Some(time_ps));
    Ok(())
}
