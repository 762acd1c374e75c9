//! MSCCL++ plan sets (`tacos compile --format mscclpp`): for each collective the MSCCL++
//! NCCL shim hands to plans and each size, the fastest verified plan, kept where the
//! executor cost model prices it faster than NCCL's own choice (the shim falls back to
//! NCCL for the rest); written as `DIR/mscclpp/` with `plans.json` (what is there and why)
//! and `register.py`, which registers the plans with the shim.
//!
//! A plan accepts exactly the size it was made for: the executor throws, through the
//! shim's C API, on a size its chunk counts do not divide, so no plan claims a range. And
//! the shim remembers the first plan's placement for every plan (`DslAlgorithm::
//! bufferMode` caches it), so a set holds one placement only.

use crate::collective::CollectiveKind;
use crate::cost::{Executor, NcclPricer};
use crate::error::{Error, FileFormat, FileProblem, Result};
use crate::mscclpp::{Plan, PlanOptions};
use crate::pipeline::{self, Request};
use crate::topology::Topology;
use crate::tuner::TUNED;
use crate::units::{format_size, ps_to_us, Picos};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The collectives the shim serves from plans.
pub const SHIM_COLLECTIVES: [CollectiveKind; 4] = [
    CollectiveKind::AllReduce,
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::Broadcast,
];

/// The subdirectory of a compiled directory holding a plan set.
pub const PLAN_DIR: &str = "mscclpp";
/// The set's record, inside [`PLAN_DIR`].
pub const PLAN_MANIFEST: &str = "plans.json";
/// Its format tag.
pub const PLAN_MANIFEST_FORMAT: &str = "tacos-mscclpp-set/1";

/// What to compile.
#[derive(Clone, Debug)]
pub struct PlanSetOptions {
    pub collectives: Vec<CollectiveKind>,
    /// Each size, in the shim's measure (All-Gather: the output).
    pub sizes: Vec<u64>,
    pub in_place: bool,
    /// The search for each size (K, seeds, the executor that ranks plans).
    pub search: pipeline::Options,
}

/// One (collective, size) of a set: the plan kept, or why NCCL keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub collective: CollectiveKind,
    pub size_bytes: u64,
    /// The plan's file in the set, where one is kept.
    pub file: Option<String>,
    /// The plan's time under the executor cost model.
    pub time_us: Option<f64>,
    /// NCCL's own choice there, "algorithm/protocol", and its time under the same model.
    pub nccl: Option<String>,
    pub nccl_time_us: Option<f64>,
    /// Why no plan is kept.
    pub left_to_nccl: Option<String>,
}

/// The set's record (`plans.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanManifest {
    pub format: String,
    pub topology: String,
    pub world_size: usize,
    pub ranks_per_node: usize,
    pub in_place: bool,
    /// The executor cost model that priced plans and NCCL.
    pub cost_model: String,
    pub entries: Vec<PlanEntry>,
}

/// A compiled set: the record and the plans it names.
#[derive(Clone, Debug)]
pub struct PlanSet {
    pub manifest: PlanManifest,
    pub plans: Vec<(String, Plan)>,
}

/// Compiles the set for `topo`; `progress` hears of each (collective, size) as it ends.
///
/// ```
/// use tacos::collective::CollectiveKind;
/// use tacos::compile::plans::{compile_plans, PlanSetOptions};
/// use tacos::cost::Executor;
/// use tacos::pipeline::Options;
/// use tacos::topology::{parse_spec, SpecDefaults};
/// let topo = parse_spec("preset:dgx-a100,nodes=2", &SpecDefaults::default()).unwrap();
/// let executor = Executor::for_topology(&topo, None, None).unwrap();
/// let options = PlanSetOptions {
///     collectives: vec![CollectiveKind::AllGather],
///     sizes: vec![1 << 24],
///     in_place: false,
///     search: Options { seeds: vec![0], ..Options::default() },
/// };
/// let set = compile_plans(&topo, &options, &executor, &mut |_| {}).unwrap();
/// let entry = &set.manifest.entries[0];
/// // Kept only where faster than NCCL under the same model; said why otherwise.
/// assert!(entry.file.is_some() == entry.left_to_nccl.is_none());
/// ```
pub fn compile_plans(
    topo: &Topology,
    options: &PlanSetOptions,
    executor: &Executor,
    progress: &mut dyn FnMut(&PlanEntry),
) -> Result<PlanSet> {
    for &kind in &options.collectives {
        if !SHIM_COLLECTIVES.contains(&kind) {
            return Err(Error::compile(format!(
                "{kind}: the MSCCL++ NCCL shim serves only {} from plans",
                SHIM_COLLECTIVES.map(|k| k.name()).join(", ")
            )));
        }
    }
    let search = pipeline::Options {
        executor: Some(executor.clone()),
        ..options.search.clone()
    };
    let plan_options = PlanOptions {
        in_place: Some(options.in_place),
        ..PlanOptions::for_gpu(executor.gpu)
    };
    let mut entries = Vec::new();
    let mut plans = Vec::new();
    for &kind in &options.collectives {
        // NCCL's price where NCCL runs the collective on this machine (else a plan is kept
        // on its own).
        let pricer = NcclPricer::new(
            topo,
            kind,
            executor.domain_size,
            executor.gpu,
            executor.model.clone(),
        )
        .ok()
        .filter(|_| TUNED.contains(&kind));
        for &size in &options.sizes {
            let nccl = pricer.as_ref().and_then(|p| p.price(size, None, None).ok());
            let mut entry = PlanEntry {
                collective: kind,
                size_bytes: size,
                file: None,
                time_us: None,
                nccl: nccl
                    .as_ref()
                    .map(|n| format!("{}/{}", n.algorithm, n.protocol)),
                nccl_time_us: nccl.as_ref().map(|n| n.time_us),
                left_to_nccl: None,
            };
            match pipeline::plan(topo, &Request::new(kind, size), &search, &plan_options) {
                Ok(found) => {
                    let plan = found.kept.plan;
                    // The search is given the executor, so it timed the plan kept.
                    let time_us = ps_to_us(found.kept.time_ps.unwrap_or(Picos::MAX));
                    entry.time_us = Some(time_us);
                    let nccl_us = nccl.as_ref().map_or(f64::INFINITY, |n| n.time_us);
                    if time_us < nccl_us {
                        let file = format!("{kind}-{}.json", format_size(size).replace(' ', ""));
                        let named = Plan {
                            name: format!("tacos-{kind}-{size}-{}", topo.name()),
                            ..plan
                        };
                        plans.push((file.clone(), named));
                        entry.file = Some(file);
                    } else {
                        entry.left_to_nccl = Some(format!(
                            "NCCL's {} is predicted faster",
                            entry.nccl.as_deref().unwrap_or("choice")
                        ));
                    }
                }
                Err(e) => entry.left_to_nccl = Some(format!("no plan: {e}")),
            }
            progress(&entry);
            entries.push(entry);
        }
    }
    let npus = topo.alive_npus().len();
    let manifest = PlanManifest {
        format: PLAN_MANIFEST_FORMAT.into(),
        topology: topo.name().to_string(),
        world_size: npus,
        ranks_per_node: executor.domain_size.min(npus),
        in_place: options.in_place,
        cost_model: format!("executor cost model, {} profile", executor.gpu),
        entries,
    };
    Ok(PlanSet { manifest, plans })
}

/// Writes `set` as `dir/mscclpp/`: the plans, `plans.json` and `register.py`, staged
/// beside it and swapped into place (renamed where nothing was there); a `dir/mscclpp`
/// that is not a plan set is replaced only with `force`.
pub fn write_plan_set(set: &PlanSet, dir: &Path, force: bool) -> Result<()> {
    let target = dir.join(PLAN_DIR);
    if target.exists() && !target.join(PLAN_MANIFEST).is_file() && !force {
        return Err(Error::compile_in(target, format!("exists and holds no {PLAN_MANIFEST}: not a plan set tacos wrote; give --force to replace it", )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let staged = dir.join(format!(".{PLAN_DIR}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::create_dir(&staged).map_err(|e| Error::io(&staged, e))?;
    let write = |name: &str, text: &str| {
        std::fs::write(staged.join(name), text).map_err(|e| Error::io(staged.join(name), e))
    };
    let result = (|| {
        for (file, plan) in &set.plans {
            write(file, &plan.to_json())?;
        }
        write("register.py", &registration(&set.manifest))?;
        let mut record = serde_json::to_string_pretty(&set.manifest).unwrap_or_default();
        record.push('\n');
        write(PLAN_MANIFEST, &record)?;
        if target.exists() {
            // Swapped in one step where the filesystem can, so `dir/mscclpp` is never
            // missing; the staged name then holds the old set, removed below.
            match super::dir::staging::exchange(&staged, &target) {
                Ok(()) => {
                    return std::fs::remove_dir_all(&staged).map_err(|e| Error::io(&staged, e))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                    std::fs::remove_dir_all(&target).map_err(|e| Error::io(&target, e))?
                }
                Err(e) => return Err(Error::io(&target, e)),
            }
        }
        std::fs::rename(&staged, &target).map_err(|e| Error::io(&target, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    result
}

/// Re-checks `dir/mscclpp` against its record: every plan it names is there, reads,
/// claims exactly its size and verifies at it; nothing else is there; `register.py`
/// registers exactly those plans. Returns the problems, each naming its file (none: the
/// set is whole); an error where there is no record to check against.
///
/// ```
/// let e = tacos::compile::plans::check_plan_set(std::path::Path::new("/nonexistent"));
/// assert!(e.unwrap_err().to_string().contains("plans.json"));
/// ```
pub fn check_plan_set(dir: &Path) -> Result<Vec<String>> {
    let set = dir.join(PLAN_DIR);
    let record = set.join(PLAN_MANIFEST);
    let text = crate::fsio::read_text(&record, "plan set record", 1 << 20)?;
    let manifest: PlanManifest = crate::fsio::parse_json(&text, &record.display().to_string())
        .map_err(|p| p.of(FileFormat::Compiled))?;
    if manifest.format != PLAN_MANIFEST_FORMAT {
        let record = record.display().to_string();
        let tag = FileProblem::wrong_tag(record, "format", &manifest.format, PLAN_MANIFEST_FORMAT);
        return Err(tag.of(FileFormat::Compiled));
    }
    let mut problems = Vec::new();
    let kept: Vec<(&String, u64)> = manifest
        .entries
        .iter()
        .filter_map(|e| e.file.as_ref().map(|f| (f, e.size_bytes)))
        .collect();
    for &(file, size) in &kept {
        match Plan::read(&set.join(file)) {
            Err(e) => problems.push(format!("{file}: {e}")),
            Ok(plan) if (plan.min_message_size, plan.max_message_size) != (size, size) => problems
                .push(format!(
                    "{file}: claims sizes {}..{}, the record says exactly {size}",
                    plan.min_message_size, plan.max_message_size
                )),
            Ok(plan) if plan.inplace != manifest.in_place => problems.push(format!(
                "{file}: in place {}, the set is in place {}",
                plan.inplace, manifest.in_place
            )),
            Ok(plan) => {
                let at = crate::mscclpp::VerifyOptions {
                    size: Some(size),
                    root: None,
                };
                if let Err(e) = crate::mscclpp::verify(&plan, &at) {
                    problems.push(format!("{file}: {e}"));
                }
            }
        }
    }
    let entries = std::fs::read_dir(&set).map_err(|e| Error::io(&set, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let known =
            name == PLAN_MANIFEST || name == "register.py" || kept.iter().any(|(f, _)| **f == name);
        if !known {
            problems.push(format!("{name}: not in the record"));
        }
    }
    let register = crate::fsio::read_text(&set.join("register.py"), "registration", 1 << 20);
    match register {
        Ok(text) if text == registration(&manifest) => {}
        Ok(_) => problems.push("register.py: not the registration of the record's plans".into()),
        Err(e) => problems.push(format!("register.py: {e}")),
    }
    Ok(problems)
}

/// The Python file that registers the set's plans with the MSCCL++ NCCL shim: run in every
/// rank before the communicator is made.
fn registration(manifest: &PlanManifest) -> String {
    let plans: Vec<String> = manifest
        .entries
        .iter()
        .filter_map(|e| e.file.as_ref())
        .map(|f| format!("    \"{f}\",\n"))
        .collect();
    format!(
        r#""""MSCCL++ execution plans compiled by tacos for {topology}
({world} GPUs, {per_node} per node, {placement}).

Import this module in every rank before the NCCL communicator is created (before
torch.distributed.init_process_group), with the MSCCL++ NCCL shim loaded
(LD_PRELOAD=libmscclpp_nccl.so, MSCCLPP_NCCL_LIB_PATH=<the real libnccl.so>): the shim then
runs these plans at the sizes they were made for and NCCL everywhere else. The rank is
read from RANK (torchrun, mpirun with -x RANK) or OMPI_COMM_WORLD_RANK.
"""
import os

from mscclpp import Algorithm, ExecutionPlan
from mscclpp.ext import AlgorithmCollectionBuilder

WORLD_SIZE = {world}
RANKS_PER_NODE = {per_node}
PLANS = [
{plans}]


def register(rank=None):
    if rank is None:
        rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    here = os.path.dirname(os.path.abspath(__file__))
    builder = AlgorithmCollectionBuilder()
    for name in PLANS:
        plan = ExecutionPlan(os.path.join(here, name), rank)
        builder.add_algorithm_builder(
            Algorithm(
                id=name,
                execution_plan=plan,
                constraint=Algorithm.Constraint(
                    world_size=WORLD_SIZE, n_ranks_per_node=RANKS_PER_NODE
                ),
            )
        )


register()
"#,
        topology = manifest.topology,
        world = manifest.world_size,
        per_node = manifest.ranks_per_node,
        placement = if manifest.in_place {
            "in place"
        } else {
            "out of place"
        },
        plans = plans.concat(),
    )
}
