//! `tacos compile --format mscclpp`: a plan set for the MSCCL++ NCCL shim.

use super::compile::CompileArgs;
use anyhow::{bail, Context};
use std::path::Path;
use tacos::compile::plans::{
    check_plan_set, compile_plans, write_plan_set, PlanSetOptions, SHIM_COLLECTIVES,
};
use tacos::compile::Placements;
use tacos::pipeline::{self, Chunks};
use tacos::topology::Topology;
use tacos::units::format_size;

pub fn run(args: &CompileArgs, topo: &Topology, out: &Path) -> anyhow::Result<()> {
    let Some(executor) = args.cost.executor(topo)? else {
        bail!("--format mscclpp prices plans and NCCL with the executor cost model; leave out --alpha-beta");
    };
    let in_place = match args.inplace.unwrap_or(Placements::InPlace) {
        Placements::InPlace => true,
        Placements::OutOfPlace => false,
        Placements::Both => bail!(
            "--format mscclpp: --inplace both is refused: the shim remembers the first plan's placement for all its plans, so a set holds one (inplace or outofplace)"
        ),
    };
    // Every doubling from the smallest size to the largest, both included.
    let sizes = args.sizes.map_or_else(
        || vec![1 << 20, 1 << 24, 1 << 28, 1 << 30],
        |r| {
            std::iter::successors(Some(r.min_bytes), |s| s.checked_mul(2))
                .take_while(|&s| s <= r.max_bytes)
                .collect()
        },
    );
    let collectives = args
        .collectives
        .clone()
        .unwrap_or_else(|| SHIM_COLLECTIVES[..3].to_vec());
    let seeds = args.seeds.unwrap_or(2);
    let options = PlanSetOptions {
        collectives,
        sizes,
        in_place,
        search: pipeline::Options {
            chunks: match &args.chunks {
                Some(ks) if ks.len() == 1 => Chunks::Fixed(ks[0]),
                Some(ks) => Chunks::UpTo(ks.iter().copied().max().unwrap_or(1)),
                None => Chunks::UpTo(16),
            },
            seeds: (0..seeds).collect(),
            ..pipeline::Options::default()
        },
    };
    let quiet = args.quiet || args.json;
    let set = compile_plans(topo, &options, &executor, &mut |e| {
        if !quiet {
            eprintln!(
                "{} {}: {}",
                e.collective,
                format_size(e.size_bytes),
                match (&e.file, &e.left_to_nccl) {
                    (Some(f), _) => format!("{f} ({:.1} us)", e.time_us.unwrap_or(0.0)),
                    (None, Some(why)) => format!("left to NCCL: {why}"),
                    (None, None) => "left to NCCL".into(),
                }
            )
        }
    })?;
    write_plan_set(&set, out, args.force).context("cannot write the plan set")?;
    let dir = out.join(tacos::compile::plans::PLAN_DIR);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&set.manifest)?);
        return Ok(());
    }
    println!(
        "{}: {} plans of {} (collective, size) for {} ({}, {})",
        dir.display(),
        set.plans.len(),
        set.manifest.entries.len(),
        set.manifest.topology,
        if in_place { "in place" } else { "out of place" },
        set.manifest.cost_model
    );
    println!(
        "{:<14} {:>8} {:>12} {:>12}  served by",
        "collective", "size", "plan us", "nccl us"
    );
    for e in &set.manifest.entries {
        let us = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.1}"));
        println!(
            "{:<14} {:>8} {:>12} {:>12}  {}",
            e.collective.name(),
            format_size(e.size_bytes),
            us(e.time_us),
            us(e.nccl_time_us),
            e.file
                .clone()
                .or_else(|| e.left_to_nccl.as_ref().map(|w| format!("NCCL ({w})")))
                .unwrap_or_default()
        );
    }
    println!(
        "to load: in every rank's process, before the communicator is made, `sys.path.insert(0, \"{}\"); import register`, the job run with LD_PRELOAD=libmscclpp_nccl.so and MSCCLPP_NCCL_LIB_PATH=<the real libnccl.so>",
        dir.display()
    );
    Ok(())
}

/// `tacos compile --check DIR` on a plan set: every plan re-verified at its size against the
/// record, nothing missing or extra, the registration as written.
pub fn check(dir: &Path, json: bool) -> anyhow::Result<()> {
    let problems = check_plan_set(dir)?;
    if json {
        let value = serde_json::json!({
            "command": "compile",
            "dir": dir.display().to_string(),
            "format": "mscclpp",
            "problems": problems,
            "ok": problems.is_empty(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for p in &problems {
            println!("  {p}");
        }
        if problems.is_empty() {
            println!(
                "ok: every plan in {} matches plans.json and verifies at its size; register.py registers exactly them",
                dir.join(tacos::compile::plans::PLAN_DIR).display()
            );
        }
    }
    if let Some(first) = problems.first() {
        bail!(
            "{}: {} problem(s), first: {first}",
            dir.display(),
            problems.len()
        );
    }
    Ok(())
}
