//! `tacos topo`: show, export and list topologies.

use super::TopologyArgs;
use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;
use tacos::fsio::write_atomic;
use tacos::topology::{file, spec::BUILDERS, PRESETS};
use tacos_cli::report::TopoShowReport;

#[derive(Debug, Subcommand)]
pub enum TopoCommand {
    /// Print NPUs, links, degree range, bandwidth classes and diameter.
    Show {
        #[command(flatten)]
        topology: TopologyArgs,
        /// Print one JSON object instead of text
        #[arg(long)]
        json: bool,
    },
    /// Write the topology as a JSON file (reading it back gives the same topology).
    Export {
        #[command(flatten)]
        topology: TopologyArgs,
        /// Output file
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
    },
    /// List the topology builders.
    Builders,
    /// List the presets of real machines.
    Presets,
}

pub fn run(cmd: TopoCommand) -> anyhow::Result<()> {
    match cmd {
        TopoCommand::Show { topology, json } => {
            let topo = topology.topology()?;
            let stats = topo.stats();
            if json {
                let value = TopoShowReport::new(&topo);
                println!("{}", serde_json::to_string_pretty(&value)?);
                return Ok(());
            }
            println!("topology      {}", tacos::error::echo(topo.name()));
            if stats.switches > 0 {
                match stats.reducing_switches {
                    0 => println!("switches      {}", stats.switches),
                    n => println!(
                        "switches      {} ({n} reduce and multicast inside themselves: NVLS)",
                        stats.switches
                    ),
                }
            }
            println!(
                "NPUs          {}{}",
                stats.npus,
                if topo.failed().is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} failed: {})",
                        topo.failed().len(),
                        tacos::topology::format_npus(topo.failed())
                    )
                }
            );
            println!("links         {} (directed)", stats.links);
            println!(
                "out-degree    {}..{}",
                stats.out_degree.0, stats.out_degree.1
            );
            println!("in-degree     {}..{}", stats.in_degree.0, stats.in_degree.1);
            println!(
                "diameter      {}",
                match (stats.diameter_computed, stats.diameter_hops) {
                    (false, _) => format!(
                        "not computed ({} alive NPUs x {} vertices and links is past {} search steps)",
                        stats.alive_npus,
                        stats.npus + stats.switches + stats.links,
                        tacos::topology::DIAMETER_SEARCH_MAX
                    ),
                    (true, None) => "unreachable pairs".to_string(),
                    (true, Some(d)) => format!("{d} hops"),
                }
            );
            println!("link classes  bandwidth       latency    links");
            for c in &stats.link_classes {
                println!(
                    "              {:>9.3} GB/s  {:>7.3} us  {:>5}",
                    c.bandwidth_gbps, c.latency_us, c.links
                );
            }
            Ok(())
        }
        TopoCommand::Export { topology, out } => {
            let topo = topology.topology()?;
            write_atomic(&out, file::to_json(&topo).as_bytes())
                .with_context(|| "cannot write the topology")?;
            eprintln!(
                "wrote {} ({} NPUs, {} links)",
                out.display(),
                topo.npus(),
                topo.links().len()
            );
            Ok(())
        }
        TopoCommand::Builders => {
            for (spec, what) in BUILDERS {
                println!("{spec:<34} {what}");
            }
            println!(
                "\noptions: bw=GBPS[:GBPS..] and lat=US[:US..] per dimension; d=D for switches"
            );
            Ok(())
        }
        TopoCommand::Presets => {
            for (name, what) in PRESETS {
                println!("preset:{name:<12} {what}");
            }
            Ok(())
        }
    }
}
