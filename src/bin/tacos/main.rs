//! The `tacos` command line: thin commands over the library's pipeline.

mod bench;
mod bench_compile;
mod bench_cost;
mod bench_fabric;
mod bench_lowering;
mod bench_plans;
mod bench_quality;
mod bench_scale;
mod bench_scheduler;
mod bench_seeds;
mod bench_sim;
mod bench_tuner;
mod calibrate;
mod check;
mod compare;
mod compile;
mod compile_feedback;
mod compile_plans;
mod concurrent;
mod lowering;
mod measure_plan;
mod nccl_beside;
mod plan_file;
pub mod progress;
mod report;
mod simulate;
mod simulate_nccl;
mod synth;
mod synth_stream;
mod topo;
mod verify;
mod verify_plan;

use clap::{Args, Parser, Subcommand};
pub use plan_file::{describe_plan, write_plan};
use std::path::PathBuf;
use std::process::ExitCode;
use tacos::budget::MemoryLimit;
use tacos::collective::CollectiveKind;
use tacos::cost::Executor;
use tacos::error::echo;
use tacos::gpu::GpuArch;
use tacos::msccl::{LimitOverrides, Profile, Target};
use tacos::topology::limits::{
    bandwidth_in_range, latency_in_range, BANDWIDTH_ALLOWED, LATENCY_ALLOWED,
};
use tacos::topology::{parse_link_pairs, parse_npu_list};
use tacos::topology::{parse_spec_with_warnings, SpecDefaults, Topology};
use tacos::units::parse_size;

/// Topology-aware collective algorithm synthesizer (TACOS link-chunk matching).
#[derive(Debug, Parser)]
#[command(name = "tacos", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Most memory one request may hold, e.g. 16GiB; larger ones are refused before they
    /// allocate [default: TACOS_MAX_MEMORY; at most half of this machine's memory and of
    /// what ulimit -v and the cgroup's limit leave]
    #[arg(long, global = true, value_name = "SIZE", value_parser = size)]
    pub max_memory: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and export topologies.
    #[command(subcommand)]
    Topo(topo::TopoCommand),
    /// Synthesize a collective algorithm for a topology.
    Synth(synth::SynthArgs),
    /// Time synthesis (or the simulator, the MSCCL lowering, the plugins) on standard
    /// topologies and print a table.
    Bench(bench::BenchArgs),
    /// Simulate a schedule file or a baseline with link contention.
    Simulate(simulate::SimulateArgs),
    /// Compare the synthesized algorithm with every baseline and the lower bounds.
    Compare(compare::CompareArgs),
    /// Check an MSCCL algorithm XML file (deadlock, races, result) and optionally time it.
    Verify(verify::VerifyArgs),
    /// Check a schedule file, held or streamed (any length), on its topology.
    Check(check::CheckArgs),
    /// Draw an algorithm (synthesized, --schedule or --xml) or a compiled set (--compiled)
    /// as one self-contained HTML page.
    Report(report::ReportArgs),
    /// Compile a topology's MSCCL algorithm directory (every collective and size band), or
    /// re-check one with --check.
    Compile(compile::CompileArgs),
    /// Print the nccl-tests runs that measure a compiled set against stock NCCL on its
    /// cluster, band by band.
    MeasurePlan(measure_plan::MeasurePlanArgs),
    /// Fit the cost model's constants to a cluster's nccl-tests output and write a profile.
    Calibrate(calibrate::CalibrateArgs),
    /// Print a shell completion script, e.g. `tacos completions bash > /etc/bash_completion.d/tacos`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    MemoryLimit::configured(cli.max_memory)?.set_process_default();
    match cli.command {
        Command::Topo(cmd) => topo::run(cmd),
        Command::Synth(args) => synth::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Check(args) => check::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::MeasurePlan(args) => measure_plan::run(args),
        Command::Report(args) => report::run(args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "tacos", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// NPU ids from the command line (an alias, so clap takes the list as one value).
pub type NpuList = Vec<usize>;
/// NPU pairs from the command line (an alias, so clap takes the list as one value).
pub type LinkPairs = Vec<(usize, usize)>;

/// The topology a command uses when none is given.
const DEFAULT_SPEC: &str = "mesh:4x4";

/// A topology as every command takes it.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Topology: a JSON file, or a builder such as ring:8, fc:8, switch:8,d=2, mesh:4x4,
    /// torus:8x8, mesh:4x4x4, hypercube:4, dragonfly:4x5,bw=400:200, rfs:2x4x8,bw=200:100:50,
    /// multi:R4xF4xS8, preset:dgx1 (`tacos topo builders` lists them all)
    /// [default: mesh:4x4, or the network a schedule file records]
    #[arg(value_name = "SPEC")]
    pub spec: Option<String>,
    /// Bandwidth of links the spec leaves unspecified, GB/s (0.001 to 1000000)
    #[arg(long, default_value_t = 50.0, value_name = "GBPS", value_parser = bandwidth, allow_hyphen_values = true)]
    pub bandwidth: f64,
    /// Latency (alpha) of links the spec leaves unspecified, microseconds (0 to 1000000)
    #[arg(long, default_value_t = 0.5, value_name = "US", value_parser = latency, allow_hyphen_values = true)]
    pub latency: f64,
    /// NPUs that have failed: their links are removed and they take no part, e.g. 7,9
    #[arg(long, value_name = "LIST", value_parser = npu_list)]
    pub fail_npus: Option<NpuList>,
    /// Links that have failed, both directions of each pair, e.g. 3-4,8-12
    #[arg(long, value_name = "PAIRS", value_parser = link_pairs)]
    pub fail_links: Option<LinkPairs>,
    /// Replace every switch vertex by the TACOS paper's unwinding: each NPU on the switch
    /// linked to its next D peers, its port's bandwidth split over them [D default: the
    /// switch's NPUs - 1]
    #[arg(long, value_name = "D", num_args = 0..=1)]
    pub unwind: Option<Option<usize>>,
}

impl TopologyArgs {
    /// Builds the topology the arguments name, with the failures they give, printing on
    /// stderr what had to be assumed.
    pub fn topology(&self) -> tacos::Result<Topology> {
        self.topology_of(self.spec.as_deref().unwrap_or(DEFAULT_SPEC))
    }

    /// Builds `spec` with these arguments' defaults and failures.
    pub fn topology_of(&self, spec: &str) -> tacos::Result<Topology> {
        let defaults = SpecDefaults {
            bandwidth_gbps: self.bandwidth,
            latency_us: self.latency,
        };
        let (topo, warnings) = parse_spec_with_warnings(spec, &defaults)?;
        for w in warnings {
            eprintln!("warning: {w}");
        }
        self.with_failures(topo)
    }

    /// The topology the arguments name, and the same before the failures they give (None
    /// without failures): what a picture draws failed.
    pub fn with_base(&self) -> tacos::Result<(Topology, Option<Topology>)> {
        if self.fail_npus.is_none() && self.fail_links.is_none() {
            return Ok((self.topology()?, None));
        }
        let bare = TopologyArgs {
            spec: self.spec.clone(),
            bandwidth: self.bandwidth,
            latency: self.latency,
            fail_npus: None,
            fail_links: None,
            unwind: None,
        };
        let parsed = bare.topology()?;
        let unwound = TopologyArgs {
            unwind: self.unwind,
            ..bare
        };
        let base = unwound.with_failures(parsed.clone())?;
        Ok((self.with_failures(parsed)?, Some(base)))
    }

    /// `topo` with the failures the arguments give, then its switches unwound (among
    /// the NPUs still attached, as the file's own failures are).
    pub fn with_failures(&self, mut topo: Topology) -> tacos::Result<Topology> {
        if let Some(pairs) = &self.fail_links {
            topo = topo.fail_links(pairs)?;
        }
        if let Some(npus) = &self.fail_npus {
            topo = topo.fail_npus(npus)?;
        }
        if let Some(degree) = self.unwind {
            topo = topo.unwind(degree)?;
        }
        Ok(topo)
    }
}

/// The executor cost model every timing of a program or of NCCL's algorithms uses.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// GPU generation whose cost constants to use: volta, ampere, hopper, blackwell, or a
    /// compute capability such as 80 [default: the preset's, else hopper]
    #[arg(long, value_name = "ARCH", value_parser = gpu_arch)]
    pub gpu_arch: Option<GpuArch>,
    /// A cost profile (JSON, from `tacos calibrate -o`) for your cluster [default:
    /// TACOS_PROFILE, else the GPU generation's built-in profile]
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Time MSCCL programs by bare alpha-beta messages (the synthesizer's own model, as
    /// before the executor cost model) instead of the executor cost model
    #[arg(long, conflicts_with_all = ["gpu_arch", "profile"])]
    pub alpha_beta: bool,
}

impl CostArgs {
    /// The executor model for `topo`; None with `--alpha-beta`.
    pub fn executor(&self, topo: &Topology) -> tacos::Result<Option<Executor>> {
        if self.alpha_beta {
            return Ok(None);
        }
        Executor::for_topology(topo, self.gpu_arch, self.profile.as_deref()).map(Some)
    }

    /// The profile file in use, if any (`--profile`, else `TACOS_PROFILE`).
    pub fn profile_file(&self) -> Option<String> {
        self.profile
            .as_ref()
            .map(|p| p.display().to_string())
            .or_else(|| {
                std::env::var("TACOS_PROFILE")
                    .ok()
                    .filter(|p| !p.is_empty())
            })
    }
}

fn gpu_arch(s: &str) -> Result<GpuArch, String> {
    s.parse()
}

/// The loader MSCCL XML is written or checked for, as every command that writes or
/// checks XML takes it.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The loader the XML is for: executor (the MSCCL executor as built by default, and
    /// RCCL: 64 steps per threadblock), executor-256 (built with MSCCL_MAX_NUM_STEPS=256),
    /// msccl-legacy (the older microsoft/msccl) [default: executor]
    #[arg(long, value_name = "TARGET", value_parser = profile)]
    pub target: Option<Profile>,
    /// Steps per threadblock the loader takes, replacing the target's
    #[arg(long, value_name = "N")]
    pub max_steps: Option<usize>,
    /// Threadblocks per GPU the loader takes, replacing the target's
    #[arg(long, value_name = "N")]
    pub max_tbs: Option<usize>,
    /// XML elements per rank the loader's parser keeps, replacing the target's
    #[arg(long, value_name = "N")]
    pub max_elements: Option<usize>,
    /// Channels the loader takes, replacing the target's
    #[arg(long, value_name = "N")]
    pub max_channels: Option<usize>,
}

impl TargetArgs {
    /// Whether the command line names a target or a limit (otherwise a command may use
    /// the target a file records).
    pub fn given(&self) -> bool {
        let l = self;
        l.target.is_some()
            || l.max_steps.is_some()
            || l.max_tbs.is_some()
            || l.max_elements.is_some()
            || l.max_channels.is_some()
    }

    /// The target the arguments name (the executor's by default), with their overrides.
    pub fn target(&self) -> tacos::Result<Target> {
        let overrides = LimitOverrides {
            max_steps_per_tb: self.max_steps,
            max_tbs: self.max_tbs,
            max_elements_per_rank: self.max_elements,
            max_channels: self.max_channels,
        };
        Target::with_overrides(self.target.unwrap_or_default(), &overrides)
    }
}

fn profile(s: &str) -> Result<Profile, String> {
    s.parse().map_err(|e: tacos::Error| e.to_string())
}

/// A link bandwidth flag: within `topology::limits`' range.
fn bandwidth(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if bandwidth_in_range(v) => Ok(v),
        _ => Err(format!("'{}' must be {BANDWIDTH_ALLOWED}", echo(s))),
    }
}

/// A link latency flag: within `topology::limits`' range.
fn latency(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if latency_in_range(v) => Ok(v),
        _ => Err(format!("'{}' must be {LATENCY_ALLOWED}", echo(s))),
    }
}

fn size(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn npu_list(s: &str) -> Result<Vec<usize>, String> {
    parse_npu_list(s)
}

fn link_pairs(s: &str) -> Result<Vec<(usize, usize)>, String> {
    parse_link_pairs(s)
}

fn collective_kind(s: &str) -> Result<CollectiveKind, String> {
    s.parse().map_err(|e: tacos::Error| e.to_string())
}

fn sharing(s: &str) -> Result<tacos::sim::Sharing, String> {
    s.parse().map_err(|e: tacos::Error| e.to_string())
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("'{s}' must be a whole number, at least 1")),
    }
}

/// An error for a collective over fewer than two NPUs (what `--npus` or `--fail-npus`
/// can leave): it moves nothing in no time, so every bandwidth of it would read as
/// infinite or not a number.
pub fn check_moves_data(spec: &tacos::collective::CollectiveSpec) -> anyhow::Result<()> {
    if spec.npus.len() < 2 {
        anyhow::bail!(
            "the {} takes part on {} NPU(s) ({:?}): a collective moves data between at least 2 (see --npus and --fail-npus)",
            spec.kind,
            spec.npus.len(),
            spec.npus
        );
    }
    Ok(())
}

/// Most seeds one search tries (`--seeds`): 512 times the most the default tries.
pub const MAX_SEEDS: usize = 4096;

/// Most worker threads a command starts (`--jobs`).
pub const MAX_JOBS: usize = 256;

/// Most chunks per NPU (`-k`): past it the per (NPU, chunk) state of the smallest
/// collective runs to gigabytes.
pub const MAX_CHUNKS_PER_NPU: usize = 1 << 20;

/// `s` as a whole number within `range`, else why not.
fn whole_within(s: &str, range: std::ops::RangeInclusive<usize>) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if range.contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' must be a whole number from {} to {}",
            range.start(),
            range.end()
        )),
    }
}

/// A `--seeds` count.
fn seed_count(s: &str) -> Result<usize, String> {
    whole_within(s, 1..=MAX_SEEDS)
}

/// A `--jobs` count (0: one per core).
fn job_count(s: &str) -> Result<usize, String> {
    whole_within(s, 0..=MAX_JOBS).map_err(|e| format!("{e} (0: one per core)"))
}

/// A `-k` count of chunks per NPU.
fn chunk_count(s: &str) -> Result<usize, String> {
    whole_within(s, 1..=MAX_CHUNKS_PER_NPU)
}

fn main() -> ExitCode {
    // Die quietly when the reader of stdout goes away (`tacos bench | head`), as shell
    // tools do, instead of failing on a broken pipe.
    // SAFETY: restoring the default disposition of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // Where the output was asked for as JSON, so is the error (the message on stderr too).
    let json = std::env::args_os().any(|a| a == "--json");
    let command = std::env::args().nth(1).unwrap_or_default();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if json && !e.is::<Reported>() {
                println!("{}", error_json(&command, &e));
            }
            ExitCode::FAILURE
        }
    }
}

/// The error of a command that has already printed its report, which says what failed (a
/// file that is not a correct program, a compiled directory with problems): `main` prints
/// the message on stderr and, under `--json`, no second object.
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

/// A failed command's `--json` object: `error.kind` (the library's `Error::kind` where the
/// error is the library's, else `other`), its `message`, and the `causes` under it,
/// outermost first (what the command was doing, then what went wrong under it).
fn error_json(command: &str, e: &anyhow::Error) -> String {
    let kind = e
        .chain()
        .find_map(|c| c.downcast_ref::<tacos::Error>())
        .map_or("other", tacos::Error::kind);
    let causes: Vec<String> = e.chain().skip(1).map(ToString::to_string).collect();
    let value = serde_json::json!({
        "schema_version": tacos_cli::report::SCHEMA_VERSION,
        "command": command,
        "error": {
            "kind": kind,
            "message": e.to_string(),
            "causes": causes,
        },
    });
    serde_json::to_string_pretty(&value).unwrap_or_default()
}
