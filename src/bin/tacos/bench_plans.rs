//! `tacos bench plans`: the quality suite's networks lowered to MSCCL++ execution plans:
//! for the collectives the NCCL shim serves from plans, at several K, each schedule is
//! lowered (`mscclpp::lower`), run by the plan verifier at its size and timed by the
//! executor cost model; a plan the lowering or the verifier refuses is counted with the
//! limit or rule it broke. Where the network's switches reduce (NVLS), the in-switch
//! schedule (`Baseline::InSwitch`) is lowered too, as its own row.

use super::bench::{print_json, BenchArgs};
use super::bench_quality::TOPOLOGIES;
use super::progress::ProgressHandle;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use tacos::baselines::Baseline;
use tacos::collective::CollectiveKind;
use tacos::cost::Executor;
use tacos::mscclpp::{lower, verify, PlanOptions, PlanTimer, VerifyOptions};
use tacos::pipeline::{baseline, synthesize, Checked, Request};
use tacos::synth::SynthOptions;
use tacos::topology::{parse_spec, SpecDefaults, Topology};
use tacos::units::{format_size, ps_to_us};

const KINDS: [CollectiveKind; 4] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
    CollectiveKind::Broadcast,
];

/// K tried for every case.
const CHUNKS: [usize; 3] = [1, 2, 4];

/// The suite's largest networks for plans: the shim's plans run within one job of up to
/// 64 GPUs here.
const MAX_NPUS: usize = 64;

/// One case of `tacos bench plans`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanBenchRow {
    pub topology: String,
    pub npus: usize,
    pub collective: CollectiveKind,
    pub size_bytes: u64,
    pub chunks_per_npu: usize,
    /// The schedule lowered: "synthesized", or "in-switch" (sums and multicasts inside
    /// the switches that reduce).
    pub way: &'static str,
    /// "verified", or the stage that refused it ("lowering", "verifier", "synthesis").
    pub outcome: &'static str,
    /// The refusal, where there was one.
    pub reason: Option<String>,
    pub threadblocks_max: Option<usize>,
    pub ops: Option<usize>,
    /// The plan's time under the executor cost model (the topology's generation).
    pub plan_time_us: Option<f64>,
    /// Lowering, verifying and timing, not the synthesis.
    pub elapsed_ms: f64,
}

pub fn run(args: &BenchArgs, bar: &ProgressHandle) -> anyhow::Result<()> {
    let size: u64 = if args.quick { 16 << 20 } else { 1 << 30 };
    let kinds: Vec<CollectiveKind> = args.collective.map_or(KINDS.to_vec(), |k| vec![k]);
    if !args.json {
        bar.println(format!(
            "{:<26} {:>4} {:<13} {:>2} {:<11} {:<9} {:>5} {:>7} {:>12}  reason",
            "topology", "NPUs", "collective", "K", "way", "outcome", "TBs", "ops", "plan (us)"
        ));
    }
    let mut rows = Vec::new();
    for &spec in TOPOLOGIES {
        if args.filter.as_deref().is_some_and(|f| !spec.contains(f)) {
            continue;
        }
        let topo = parse_spec(spec, &SpecDefaults::default())?;
        if topo.alive_npus().len() > MAX_NPUS {
            continue;
        }
        let executor = Executor::for_topology(&topo, None, None)?;
        for &kind in &kinds {
            for k in CHUNKS {
                bar.step(&format!("{spec} {kind} K={k}"));
                let ways = [Way::Synthesized(args.seed), Way::InSwitch];
                for way in ways.into_iter().filter(|w| w.runs_on(&topo)) {
                    let row = measure(&topo, spec, kind, size, k, way, &executor);
                    if !args.json {
                        bar.println(line(&row));
                    }
                    rows.push(row);
                }
            }
        }
    }
    if !args.json {
        for l in summary(&rows, size) {
            bar.println(l);
        }
    }
    print_json(args, "plans", rows)
}

/// The schedule a row lowers.
#[derive(Clone, Copy)]
enum Way {
    /// The synthesizer's, with this seed.
    Synthesized(u64),
    InSwitch,
}

impl Way {
    fn runs_on(self, topo: &Topology) -> bool {
        match self {
            Way::Synthesized(_) => true,
            Way::InSwitch => Baseline::InSwitch.runs_on(topo),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Way::Synthesized(_) => "synthesized",
            Way::InSwitch => "in-switch",
        }
    }

    fn schedule(self, topo: &Topology, request: &Request, k: usize) -> tacos::Result<Checked> {
        match self {
            Way::Synthesized(seed) => synthesize(topo, request, k, &SynthOptions::seeded(seed)),
            Way::InSwitch => baseline(topo, request, Baseline::InSwitch, k),
        }
    }
}

fn measure(
    topo: &Topology,
    spec: &str,
    kind: CollectiveKind,
    size: u64,
    k: usize,
    way: Way,
    executor: &Executor,
) -> PlanBenchRow {
    let mut row = PlanBenchRow {
        topology: spec.into(),
        npus: topo.alive_npus().len(),
        collective: kind,
        size_bytes: size,
        chunks_per_npu: k,
        way: way.name(),
        outcome: "verified",
        reason: None,
        threadblocks_max: None,
        ops: None,
        plan_time_us: None,
        elapsed_ms: 0.0,
    };
    let request = Request::new(kind, size);
    let checked = match way.schedule(topo, &request, k) {
        Ok(c) => c,
        Err(e) => {
            row.outcome = "synthesis";
            row.reason = Some(e.to_string());
            return row;
        }
    };
    let started = Instant::now();
    let result = lower(
        checked.schedule(),
        topo,
        &PlanOptions::for_gpu(executor.gpu),
    )
    .map_err(|e| ("lowering", e))
    .and_then(|plan| {
        let at = VerifyOptions {
            size: Some(plan.min_message_size),
            root: None,
        };
        verify(&plan, &at).map_err(|e| ("verifier", e))?;
        let time = PlanTimer::new(&plan)
            .and_then(|t| t.time_ps(executor, topo, size))
            .map_err(|e| ("timing", e))?;
        Ok((plan, time))
    });
    row.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok((plan, time)) => {
            row.threadblocks_max = plan.gpus.iter().map(|g| g.threadblocks.len()).max();
            row.ops = Some(
                plan.gpus
                    .iter()
                    .flat_map(|g| &g.threadblocks)
                    .map(|tb| tb.ops.len())
                    .sum(),
            );
            row.plan_time_us = Some(ps_to_us(time));
        }
        Err((stage, e)) => {
            row.outcome = stage;
            row.reason = Some(e.to_string());
        }
    }
    row
}

fn line(row: &PlanBenchRow) -> String {
    let opt = |v: Option<usize>| v.map_or("-".into(), |v| v.to_string());
    format!(
        "{:<26} {:>4} {:<13} {:>2} {:<11} {:<9} {:>5} {:>7} {:>12}  {}",
        row.topology,
        row.npus,
        row.collective.name(),
        row.chunks_per_npu,
        row.way,
        row.outcome,
        opt(row.threadblocks_max),
        opt(row.ops),
        row.plan_time_us.map_or("-".into(), |t| format!("{t:.1}")),
        row.reason.as_deref().map_or("", |r| &r[..r.len().min(120)])
    )
}

/// Counts: verified, and refusals by stage and the limit or rule named.
fn summary(rows: &[PlanBenchRow], size: u64) -> Vec<String> {
    let verified = rows.iter().filter(|r| r.outcome == "verified").count();
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.outcome != "verified") {
        let reason = r.reason.as_deref().unwrap_or("");
        let what = if reason.contains("threadblocks") {
            "resident threadblocks"
        } else if reason.contains("operations") {
            "64 operations per threadblock"
        } else if reason.contains("16-byte") {
            "16-byte chunk units"
        } else if reason.contains("glres") {
            "an in-switch sum without its multicast"
        } else {
            "other"
        };
        *refused
            .entry(format!("{} ({what})", r.outcome))
            .or_default() += 1;
    }
    let mut lines = vec![format!(
        "{verified} of {} plans verified at {}",
        rows.len(),
        format_size(size)
    )];
    lines.extend(
        refused
            .into_iter()
            .map(|(k, n)| format!("refused by {k}: {n}")),
    );
    lines
}
