//! NCCL's own choice for the request a command answers, priced by the same executor cost
//! model as our program, so a user sees whether running ours would beat doing nothing.

use super::CostArgs;
use tacos::collective::{CollectiveKind, CollectiveSpec};
use tacos::cost::nccl::SIMULATED_RANKS_MAX;
use tacos::cost::{Executor, NcclPricer};
use tacos::msccl::LowerOptions;
use tacos::pipeline::{self, Checked};
use tacos::topology::Topology;
use tacos::tuner::TUNED;
use tacos::units::ps_to_us;
use tacos_cli::report::{CostModelInfo, NcclBeside};

/// `checked` as the MSCCL program `tacos synth --xml` would write for it (the default
/// lowering, on as many instances as its busiest link needs where faster), timed by
/// `executor`; an error says why it could not be lowered.
pub fn program_us(topo: &Topology, checked: &Checked, executor: &Executor) -> Result<f64, String> {
    let lowering = LowerOptions::default();
    let lowered = pipeline::lower(topo, checked, &lowering).map_err(|e| e.to_string())?;
    let priced =
        pipeline::priced(topo, lowered, executor, Some(&lowering)).map_err(|e| e.to_string())?;
    Ok(ps_to_us(priced.time_ps()))
}

/// Whether `topo` is a machine NCCL runs on: a preset, an NCCL topology file imported, or
/// any topology whose GPUs the user named (`--gpu-arch`, `--profile`, `TACOS_PROFILE`). An
/// abstract network (a torus, a mesh) has no NCCL to compare with unless told which GPUs.
fn runs_nccl(topo: &Topology, cost: &CostArgs) -> bool {
    let name = topo.name();
    name.starts_with("preset:")
        || name.contains(".xml")
        || cost.gpu_arch.is_some()
        || cost.profile_file().is_some()
}

/// NCCL's own choice (its tuning's pick, as it runs unless told otherwise) for `kind` of
/// `size_bytes` over every alive NPU of `topo`, with `ours_us` (our program's time under
/// the same model) to compare; None where NCCL runs nothing to compare: a collective it
/// has no built-in for, a request over some NPUs only, or a topology too large to price
/// that is not a preset cluster. An error says why the price could not be made.
fn price(
    topo: &Topology,
    kind: CollectiveKind,
    size_bytes: u64,
    over_every_npu: bool,
    executor: &Executor,
    ours_us: Option<f64>,
) -> Option<Result<NcclBeside, String>> {
    let npus = topo.alive_npus().len();
    let priceable = npus <= SIMULATED_RANKS_MAX || topo.name().starts_with("preset:");
    if !TUNED.contains(&kind) || !over_every_npu || npus < 2 || !priceable {
        return None;
    }
    let priced = NcclPricer::new(
        topo,
        kind,
        executor.domain_size,
        executor.gpu,
        executor.model.clone(),
    )
    .and_then(|pricer| {
        let price = pricer.price(size_bytes, None, None)?;
        Ok((pricer.version(), price))
    });
    Some(match priced {
        Ok((version, price)) => Ok(NcclBeside {
            version: version.to_string(),
            algorithm: price.algorithm,
            protocol: price.protocol,
            channels: price.channels,
            time_us: price.time_us,
            speedup: ours_us
                .filter(|&ours| ours > 0.0)
                .map(|ours| price.time_us / ours),
        }),
        Err(e) => Err(e.to_string()),
    })
}

/// NCCL's own choice for `spec` on `topo`, priced by `executor` beside `ours_us` (our
/// program's time under the same model), where `topo` is a machine NCCL runs on
/// ([`runs_nccl`]) and NCCL runs the collective there ([`price`]). A price that cannot be
/// made is a warning on stderr (none where `quiet`), not an error: the answer stands
/// without it.
pub fn beside(
    topo: &Topology,
    cost: &CostArgs,
    spec: &CollectiveSpec,
    executor: &Executor,
    ours_us: Option<f64>,
    quiet: bool,
) -> Option<NcclBeside> {
    if !runs_nccl(topo, cost) {
        return None;
    }
    let over_every_npu = spec.npus == topo.alive_npus();
    match price(
        topo,
        spec.kind,
        spec.size_bytes,
        over_every_npu,
        executor,
        ours_us,
    )? {
        Ok(nccl) => Some(nccl),
        Err(why) => {
            if !quiet {
                eprintln!("warning: NCCL's own choice could not be priced here: {why}");
            }
            None
        }
    }
}

/// The executor cost model's name for reports: its GPU generation and the profile read.
pub fn model_info(executor: &Executor, profile: Option<String>) -> CostModelInfo {
    CostModelInfo {
        arch: executor.model.arch.clone(),
        source: executor.model.source.clone(),
        profile,
    }
}

/// How a text report names the model: "executor cost model, hopper built-in profile".
pub fn model_label(info: &CostModelInfo) -> String {
    match &info.profile {
        Some(file) => format!("executor cost model, profile {file}"),
        None => format!("executor cost model, {} built-in profile", info.arch),
    }
}

/// The text line for `nccl` beside our program (`ours` says what was priced of ours).
pub fn line(nccl: &NcclBeside, model: &str) -> String {
    let verdict = match nccl.speedup {
        Some(s) if s >= 1.0 => format!("; our program is {s:.2}x faster"),
        Some(s) => format!(
            "; our program is {:.2}x slower: NCCL's own choice is faster here",
            1.0 / s
        ),
        None => "; --xml prices our program the same way".to_string(),
    };
    format!(
        "nccl                 {:.3} us (NCCL {}'s choice: {}/{} on {} channels, {model}){verdict}",
        nccl.time_us, nccl.version, nccl.algorithm, nccl.protocol, nccl.channels
    )
}
