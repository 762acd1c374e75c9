//! `tacos synth`: synthesize, check and report one algorithm.

use super::lowering::{describe, LowerArgs};
use super::{at_least_one, collective_kind, npu_list, size, NpuList, TopologyArgs};
use crate::bounds::Bounds;
use crate::collective::{Collective, CollectiveKind, CollectiveSpec};
use crate::fsio::write_atomic;
use crate::msccl::lower::check_shape;
use crate::msccl::{lower, Limits, LowerOptions, Profile, Program, Target};
use crate::schedule::check;
use crate::synth::{
    synthesize_best_chunking, synthesize_concurrent, ChunkTrial, SynthOptions, Synthesis,
    AUTO_CHUNKS,
};
use crate::topology::{format_npus, Topology};
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
    /// Chunks per NPU (K): each NPU's share is split into K chunks; `auto` tries 1, 2, 4
    /// and 8 and keeps the fastest in simulation (with --xml, the fastest whose program
    /// fits the target)
    #[arg(short = 'k', long, default_value = "1", value_parser = chunks_per_npu)]
    pub chunks_per_npu: ChunksPerNpu,
    /// NPUs taking part, in rank order (default: every alive NPU); the others may relay
    /// chunks, e.g. 0-7,16-23. Given several times: one collective per list, all
    /// synthesized together so they share links without contention
    #[arg(long, value_name = "LIST", value_parser = npu_list, action = clap::ArgAction::Append)]
    pub npus: Vec<NpuList>,
    /// Root NPU of a rooted collective (default: the first NPU taking part)
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
    #[command(flatten)]
    pub msccl: LowerArgs,
}

/// K, or a choice by simulated time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChunksPerNpu {
    Fixed(usize),
    Auto,
}

fn chunks_per_npu(s: &str) -> Result<ChunksPerNpu, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ChunksPerNpu::Auto);
    }
    at_least_one(s)
        .map(ChunksPerNpu::Fixed)
        .map_err(|e| format!("{e}, or auto"))
}

pub fn run(args: SynthArgs) -> anyhow::Result<()> {
    let topo = args.topology.topology()?;
    if args.npus.len() > 1 {
        if args.msccl.xml.is_some() {
            anyhow::bail!("--xml writes one collective; give --npus once");
        }
        return super::concurrent::run(&args, &topo);
    }
    let npus = args
        .npus
        .first()
        .cloned()
        .unwrap_or_else(|| topo.alive_npus());
    let root = match (args.collective.has_root(), args.root) {
        (true, None) => npus.first().copied(),
        (_, root) => root,
    };
    let spec = CollectiveSpec {
        kind: args.collective,
        root,
        npus,
        chunks_per_npu: 1,
        size_bytes: args.size,
    };
    let options = SynthOptions { seed: args.seed };
    let started = Instant::now();
    let (collective, synthesis, trials) = match args.chunks_per_npu {
        ChunksPerNpu::Fixed(k) => {
            let collective = Collective::new(
                &topo,
                CollectiveSpec {
                    chunks_per_npu: k,
                    ..spec
                },
            )?;
            let synthesis =
                synthesize_concurrent(&topo, std::slice::from_ref(&collective), &options)?;
            (collective, synthesis, None)
        }
        ChunksPerNpu::Auto => {
            let best = synthesize_best_chunking(&topo, &spec, &AUTO_CHUNKS, &options)?;
            (best.collective, best.synthesis, Some(best.trials))
        }
    };
    let synth_ms = started.elapsed().as_secs_f64() * 1e3;
    let (collective, synthesis, program, passed_over) = match args.msccl.options()? {
        None => (collective, synthesis, None, Vec::new()),
        Some(lowering) => {
            let spec = collective.spec().clone();
            let fit = Fitting {
                topo: &topo,
                spec: &spec,
                options: &options,
                lowering: &lowering,
            };
            let (collective, synthesis, program, passed_over) = match &trials {
                None => fit.fixed(collective, synthesis)?,
                Some(trials) => fit.auto(collective, synthesis, trials)?,
            };
            (collective, synthesis, Some(program), passed_over)
        }
    };
    let k = collective.spec().chunks_per_npu;
    let schedule = &synthesis.schedules[0];
    let report = check(schedule, &topo).context("the synthesized schedule failed the checker")?;
    if let Some(path) = &args.out {
        // The file records the network itself, so `tacos simulate --schedule` can rebuild it.
        let recorded = schedule.clone().with_network(&topo);
        write_atomic(path, recorded.to_json().as_bytes()).context("cannot write the schedule")?;
    }
    let xml = match &program {
        Some(program) => args.msccl.write(program)?.map(|path| (program, path)),
        None => None,
    };
    let time_ps = report.collective_time_ps;
    let bounds = Bounds::new(&topo, &collective);
    let efficiency = bounds.efficiency(time_ps);
    let npus = collective.npus().len();
    let all_reduce = synthesis.all_reduce.as_ref();
    if args.json {
        let value = serde_json::json!({
            "topology": topo.name(),
            "npus": npus,
            "links": topo.links().len(),
            "collective": collective.kind().name(),
            "root": root.filter(|_| collective.kind().has_root()),
            "size_bytes": args.size,
            "chunks_per_npu": k,
            "chunk_bytes": collective.chunk_bytes(),
            "collective_time_us": ps_to_us(time_ps),
            "algbw_gbps": algbw_gbps(args.size, time_ps),
            "ingress_bound_us": ps_to_us(bounds.ingress_ps),
            "bounds": super::simulate::bounds_json(&bounds),
            "efficiency": efficiency,
            "synth_time_ms": synth_ms,
            "transfers": report.transfers,
            "seed": args.seed,
            "schedule_file": args.out.as_ref().map(|p| p.display().to_string()),
            "participants": format_npus(collective.npus()),
            "failed_npus": topo.failed(),
            "allreduce": all_reduce.map(|a| serde_json::json!({
                "reduce_scatter_us": ps_to_us(a.reduce_scatter_ps),
                "pipelined_us": ps_to_us(a.pipelined_ps),
                "phased_us": ps_to_us(a.phased_ps),
                "kept": if a.pipelined { "pipelined" } else { "phased" },
            })),
            "chunk_trials": trials.as_ref().map(|ts| ts.iter().map(|t| serde_json::json!({
                "chunks_per_npu": t.chunks_per_npu,
                "collective_time_us": ps_to_us(t.synthesized_ps),
                "simulated_time_us": ps_to_us(t.simulated_ps),
                // With --xml: false for each K passed over, true for the one kept.
                "fits_target": xml.as_ref().and_then(|_| {
                    if passed_over.contains(&t.chunks_per_npu) {
                        Some(false)
                    } else {
                        (t.chunks_per_npu == k).then_some(true)
                    }
                }),
            })).collect::<Vec<_>>()),
            "xml_file": xml.as_ref().map(|(_, p)| p.display().to_string()),
        });
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
        let tried: Vec<String> = trials
            .iter()
            .map(|t| format!("K={} {:.3} us", t.chunks_per_npu, ps_to_us(t.simulated_ps)))
            .collect();
        println!("chunks per NPU       auto, simulated: {}", tried.join(", "));
        if !passed_over.is_empty() {
            let ks: Vec<String> = passed_over.iter().map(|k| format!("K={k}")).collect();
            println!(
                "                     passed over (the program does not fit the target): {}",
                ks.join(", ")
            );
        }
    }
    println!("collective time      {:.3} us", ps_to_us(time_ps));
    if let Some(a) = all_reduce {
        println!(
            "all-reduce           pipelined {:.3} us, phased {:.3} us (reduce-scatter ends {:.3} us); kept {}",
            ps_to_us(a.pipelined_ps),
            ps_to_us(a.phased_ps),
            ps_to_us(a.reduce_scatter_ps),
            if a.pipelined { "pipelined" } else { "phased" }
        );
    }
    println!(
        "algorithm bandwidth  {:.2} GB/s",
        algbw_gbps(args.size, time_ps)
    );
    println!(
        "lower bound          {:.3} us, {} (efficiency {:.3})",
        ps_to_us(bounds.best_ps()),
        bounds.best_name(),
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
    if let Some((program, path)) = &xml {
        println!(
            "msccl xml            {} ({})",
            path.display(),
            describe(program)
        );
    }
    Ok(())
}

/// Lowering a synthesized collective for the `--xml` target.
struct Fitting<'a> {
    topo: &'a Topology,
    /// The collective as synthesized (its K is replaced for other candidates).
    spec: &'a CollectiveSpec,
    options: &'a SynthOptions,
    lowering: &'a LowerOptions,
}

/// The collective, synthesis and program kept, and the K passed over for not fitting.
type Fitted = (Collective, Synthesis, Program, Vec<usize>);

impl Fitting<'_> {
    /// The collective with `k` chunks per NPU, synthesized.
    fn synthesize(&self, k: usize) -> crate::Result<(Collective, Synthesis)> {
        let collective = Collective::new(
            self.topo,
            CollectiveSpec {
                chunks_per_npu: k,
                ..self.spec.clone()
            },
        )?;
        let synthesis =
            synthesize_concurrent(self.topo, std::slice::from_ref(&collective), self.options)?;
        Ok((collective, synthesis))
    }

    fn lower(&self, synthesis: &Synthesis, options: &LowerOptions) -> crate::Result<Program> {
        lower(&synthesis.schedules[0], self.topo, options)
    }

    /// The program for the K asked for; when it does not fit, an error naming the limit
    /// and the figure, the largest smaller K that fits, and whether the executor rebuilt
    /// for 256 steps takes it.
    fn fixed(&self, collective: Collective, synthesis: Synthesis) -> anyhow::Result<Fitted> {
        let refused = match self.lower(&synthesis, self.lowering) {
            Ok(program) => return Ok((collective, synthesis, program, Vec::new())),
            Err(e) => e,
        };
        // Only a limit is helped by fewer chunks or a larger target.
        let lifted = LowerOptions {
            target: Target {
                limits: Limits {
                    max_steps_per_tb: usize::MAX,
                    max_tbs: usize::MAX,
                    max_tbs_per_channel: usize::MAX,
                    max_elements_per_rank: usize::MAX,
                    ..self.lowering.target.limits.clone()
                },
                ..self.lowering.target.clone()
            },
            ..self.lowering.clone()
        };
        if self.lower(&synthesis, &lifted).is_err() {
            return Err(refused.into());
        }
        let k = collective.spec().chunks_per_npu;
        let target = &self.lowering.target;
        let mut advice = Vec::new();
        let smaller = (1..k).rev().find(|&j| {
            self.synthesize(j).is_ok_and(|(_, s)| {
                check_shape(&s.schedules[0], self.topo, self.lowering).is_ok()
                    && self.lower(&s, self.lowering).is_ok()
            })
        });
        advice.push(match smaller {
            Some(j) => format!("the largest K that fits target {target} is {j} (-k {j})"),
            None => format!("no smaller K fits target {target} either"),
        });
        if target.profile != Profile::Executor256 && target.limits == target.profile.limits() {
            let wide = LowerOptions {
                target: Target::new(Profile::Executor256),
                ..self.lowering.clone()
            };
            if self.lower(&synthesis, &wide).is_ok() {
                advice.push(format!(
                    "K={k} fits --target executor-256 (an executor built with MSCCL_MAX_NUM_STEPS=256)"
                ));
            }
        }
        anyhow::bail!("-k {k} does not fit: {refused}; {}", advice.join("; "))
    }

    /// The fastest K in simulation whose program fits the target: the one chosen if it
    /// fits, else the next fastest that does.
    fn auto(
        &self,
        collective: Collective,
        synthesis: Synthesis,
        trials: &[ChunkTrial],
    ) -> anyhow::Result<Fitted> {
        let chosen = collective.spec().chunks_per_npu;
        let mut refusal = match self.lower(&synthesis, self.lowering) {
            Ok(program) => return Ok((collective, synthesis, program, Vec::new())),
            Err(e) => e,
        };
        let mut passed_over = vec![chosen];
        let mut ranked: Vec<&ChunkTrial> = trials
            .iter()
            .filter(|t| t.chunks_per_npu != chosen)
            .collect();
        ranked.sort_by_key(|t| t.simulated_ps);
        for trial in ranked {
            let (collective, synthesis) = self.synthesize(trial.chunks_per_npu)?;
            match self.lower(&synthesis, self.lowering) {
                Ok(program) => return Ok((collective, synthesis, program, passed_over)),
                Err(e) => {
                    passed_over.push(trial.chunks_per_npu);
                    refusal = e;
                }
            }
        }
        anyhow::bail!(
            "no K tried ({}) gives a program that fits target {}: {refusal}",
            trials
                .iter()
                .map(|t| t.chunks_per_npu.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.lowering.target
        )
    }
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
