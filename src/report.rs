//! What the commands print with `--json`: one schema for every command, so a script reads
//! the same name for the same figure whichever command made it (`docs/json.md`).
//!
//! Every top-level report carries [`SCHEMA_VERSION`] and the `command` that made it. The
//! shared parts: [`TopologyInfo`] (`topology`), [`CollectiveInfo`] (`collective`: kind,
//! size, K, root), [`Timing`] (flattened: `time_us`, `algbw_gbps`, `busbw_gbps`,
//! `efficiency`, `of_ideal`) and [`BoundsReport`] (`bounds`). Times are in microseconds,
//! bandwidths in GB/s (10^9 bytes per second), sizes in bytes (nccl-tests' convention).
//!
//! ```
//! use tacos_cli::report::TopologyInfo;
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let torus = parse_spec("torus:4x4", &SpecDefaults::default()).unwrap();
//! let info = serde_json::to_value(TopologyInfo::new(&torus)).unwrap();
//! assert_eq!((info["npus"].as_u64(), info["links"].as_u64()), (Some(16), Some(64)));
//! ```

use serde::{Deserialize, Serialize};
use tacos::bounds::Bounds;
use tacos::collective::{Collective, CollectiveKind, CollectiveSpec};
use tacos::compile::{
    BandFeedback, Candidate, CheckReport, Manifest, MeasuredSize, Outcome, Rejection, Run,
};
use tacos::gpu::{Algorithm, Protocol};
use tacos::msccl::RuleBreak;
use tacos::pipeline::Trial;
use tacos::sim::{bus_factor, LinkLoad, Sharing};
use tacos::synth::AllReduceTimes;
use tacos::topology::{format_npus, LinkClass, NpuId, Topology};
use tacos::units::{algbw_gbps, ps_to_us, Picos};

/// The schema's version. It changes only when a field is removed or renamed, or its type
/// or meaning changes; a new field keeps it.
pub const SCHEMA_VERSION: u32 = 1;

/// What `bounds.ideal_note` says: Ideal is a reference figure, not a lower bound.
pub const IDEAL_NOTE: &str = "the TACOS paper's formula, not a lower bound";

/// The topology a command ran on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyInfo {
    pub name: String,
    /// Every NPU, failed ones included (they keep their ids).
    pub npus: usize,
    /// Directed links.
    pub links: usize,
    /// Switch vertices; left out for a topology of NPUs only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub switches: usize,
    pub failed_npus: Vec<NpuId>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl TopologyInfo {
    pub fn new(topo: &Topology) -> TopologyInfo {
        TopologyInfo {
            name: topo.name().to_string(),
            npus: topo.npus(),
            links: topo.links().len(),
            switches: topo.switches().len(),
            failed_npus: topo.failed().to_vec(),
        }
    }
}

/// The collective a figure is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveInfo {
    /// `allgather`, `reducescatter`, ...; for an MSCCL file whose `coll` names no known
    /// collective, that name.
    pub kind: String,
    /// The buffer every NPU ends with; null where nothing was timed (`verify` without a
    /// size).
    pub size_bytes: Option<u64>,
    /// K; null for an MSCCL program, whose chunking is its `chunks_per_loop`.
    pub chunks_per_npu: Option<usize>,
    /// The root NPU (for `verify`, the root rank); null for unrooted collectives.
    pub root: Option<NpuId>,
    /// NPUs (ranks) taking part.
    pub npus: usize,
    /// Which NPUs, as a list of ranges (`0-7,16-23`).
    pub participants: String,
}

impl CollectiveInfo {
    pub fn new(spec: &CollectiveSpec) -> CollectiveInfo {
        CollectiveInfo {
            kind: spec.kind.name().to_string(),
            size_bytes: Some(spec.size_bytes),
            chunks_per_npu: Some(spec.chunks_per_npu),
            root: spec.root,
            npus: spec.npus.len(),
            participants: format_npus(&spec.npus),
        }
    }

    /// The collective of an MSCCL program of `ranks` ranks (rank r on NPU r).
    pub fn program(
        kind: String,
        root: Option<usize>,
        ranks: usize,
        size_bytes: Option<u64>,
    ) -> CollectiveInfo {
        let all: Vec<NpuId> = (0..ranks).collect();
        CollectiveInfo {
            kind,
            size_bytes,
            chunks_per_npu: None,
            root,
            npus: ranks,
            participants: format_npus(&all),
        }
    }
}

/// One algorithm's time and what it means: nccl-tests' bandwidths and the efficiency
/// against the bounds. Flattened into the report that holds it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    pub time_us: f64,
    /// size / time.
    pub algbw_gbps: f64,
    /// algbw x nccl-tests' bus factor for the collective.
    pub busbw_gbps: f64,
    /// The best lower bound over the time: at most 1, 1 meets the bound.
    pub efficiency: f64,
    /// The paper's Ideal over the time (not a bound: may exceed 1).
    pub of_ideal: f64,
}

impl Timing {
    pub fn new(spec: &CollectiveSpec, time_ps: Picos, bounds: &Bounds) -> Timing {
        let algbw = algbw_gbps(spec.size_bytes, time_ps);
        Timing {
            time_us: ps_to_us(time_ps),
            algbw_gbps: algbw,
            busbw_gbps: algbw * bus_factor(spec.kind, spec.npus.len()),
            efficiency: bounds.efficiency(time_ps),
            of_ideal: bounds.of_ideal(time_ps),
        }
    }
}

/// The lower bounds on the collective's time (`bounds::Bounds`), in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BoundsReport {
    /// Which bound is the largest: `ingress`, `egress`, `traffic`, `latency`, `cut` or
    /// `chunked`.
    pub best: &'static str,
    pub best_us: f64,
    pub ingress_us: f64,
    pub egress_us: f64,
    pub traffic_us: f64,
    pub latency_us: f64,
    /// Null where no set of NPUs must exchange anything.
    pub cut_us: Option<f64>,
    /// False where only some cuts were checked (still a valid bound).
    pub cut_exact: Option<bool>,
    /// The TACOS paper's Ideal, a reference figure and not a bound.
    pub ideal_us: f64,
    /// Says so ([`IDEAL_NOTE`]).
    pub ideal_note: &'static str,
    /// The latency-aware bound of schedules of whole chunks (`Bounds::chunked`); null
    /// where the algorithm may send several chunks for one alpha.
    pub chunked_us: Option<f64>,
}

impl BoundsReport {
    pub fn new(b: &Bounds) -> BoundsReport {
        BoundsReport {
            best: b.best_name(),
            best_us: ps_to_us(b.best_ps()),
            ingress_us: ps_to_us(b.ingress_ps),
            egress_us: ps_to_us(b.egress_ps),
            traffic_us: ps_to_us(b.traffic_ps),
            latency_us: ps_to_us(b.latency_ps),
            cut_us: b.cut.map(|c| ps_to_us(c.time_ps)),
            cut_exact: b.cut.map(|c| c.exact),
            ideal_us: ps_to_us(b.ideal_ps),
            ideal_note: IDEAL_NOTE,
            chunked_us: b.chunked_ps.map(ps_to_us),
        }
    }
}

/// `tacos simulate --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimulateReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub topology: TopologyInfo,
    /// What was simulated: `schedule FILE`, `MSCCL program FILE` or `baseline NAME`.
    pub algorithm: String,
    pub collective: CollectiveInfo,
    /// Where the size came from: `command line`, `schedule file`, `minBytes`, `default`.
    pub size_from: &'static str,
    /// Messages simulated (schedule transfers, or the program's sends).
    pub transfers: usize,
    /// How messages crossing a link shared it: `serial` or `fair`.
    pub sharing: Sharing,
    #[serde(flatten)]
    pub timing: Timing,
    /// A contention-free schedule's own clock; null for baselines and MSCCL programs.
    pub schedule_time_us: Option<f64>,
    pub bounds: BoundsReport,
    /// Every link's load, in `Topology::links()` order.
    pub links: Vec<LinkLoad>,
}

/// `tacos simulate --baseline nccl --json`: one of NCCL's own algorithms, priced by the
/// executor cost model (not simulated link by link).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NcclSimulateReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub topology: TopologyInfo,
    /// `nccl ALGORITHM/PROTOCOL`.
    pub algorithm: String,
    pub collective: CollectiveInfo,
    pub nccl: NcclInfo,
    pub cost_model: CostModelInfo,
    #[serde(flatten)]
    pub timing: Timing,
    pub bounds: BoundsReport,
}

/// Which of NCCL's algorithms was priced, and who picked it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NcclInfo {
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub channels: u32,
    /// `nccl` where NCCL's own tuning picked the algorithm and protocol for the size (as
    /// the tuner plugin sees its cost table), `command line` where they were given.
    pub picked_by: &'static str,
}

/// The executor cost model's constants a figure was priced with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostModelInfo {
    /// The GPU generation of the constants.
    pub arch: String,
    /// Where they come from (the profile's own `source`).
    pub source: String,
    /// The profile file, where one was read (`--profile` or `TACOS_PROFILE`).
    pub profile: Option<String>,
}

/// NCCL's own choice for the request a command answered, priced by the executor cost model
/// beside the program the command would have the user run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NcclBeside {
    /// The NCCL version band whose tuning picked (the profile's).
    pub version: String,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    pub channels: u32,
    pub time_us: f64,
    /// NCCL's time over our program's (above 1: ours is faster); absent where no
    /// program was priced (`synth` without `--xml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
}

/// `tacos compare --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    pub seed: u64,
    /// How messages crossing a link shared it: `serial` or `fair`.
    pub sharing: Sharing,
    pub bounds: BoundsReport,
    /// The synthesized algorithm first, then every baseline for the collective.
    pub algorithms: Vec<CompareRow>,
    pub heatmap: Option<String>,
    /// The synthesized schedule as the MSCCL program `synth --xml` would write for it,
    /// timed by the executor cost model (`cost_model`); absent with `--alpha-beta` or
    /// where it could not be lowered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_time_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<CostModelInfo>,
    /// NCCL's own choice for the request, priced by the same model as `program_time_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclBeside>,
}

/// One algorithm of a comparison: timed, or skipped with the reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareRow {
    pub name: String,
    #[serde(flatten)]
    pub timed: Option<CompareTimed>,
    /// Why the algorithm was not run (it does not make this collective on this topology).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// A compared algorithm's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareTimed {
    #[serde(flatten)]
    pub timing: Timing,
    /// The synthesized schedule's own clock (null for baselines).
    pub schedule_time_us: Option<f64>,
    /// This algorithm's time over the synthesized one's (null when that was skipped).
    pub tacos_speedup: Option<f64>,
    pub transfers: usize,
}

/// `tacos verify --json`: exactly one per run, whatever happened; fields that could not
/// be found are null (or absent, for the timing).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerifyReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub file: String,
    /// Null when the target options themselves were wrong (then `error` says why).
    pub target: Option<String>,
    pub loads: bool,
    /// Why the file could not be read as MSCCL XML.
    pub load_error: Option<String>,
    pub warnings: Vec<String>,
    pub rule_breaks: Vec<RuleBreak>,
    #[serde(flatten)]
    pub program: Option<ProgramInfo>,
    /// The collective checked (the file's `coll`, or `--collective`).
    pub collective: Option<CollectiveInfo>,
    #[serde(flatten)]
    pub check: Option<VerifyCheck>,
    /// Null when the file was not read.
    pub computes: Option<bool>,
    pub correct: bool,
    /// The topology timed on (null when nothing was timed).
    pub topology: Option<TopologyInfo>,
    #[serde(flatten)]
    pub timing: Option<Timing>,
    pub bounds: Option<BoundsReport>,
    /// Why the options were refused or the program could not be timed.
    pub error: Option<String>,
}

impl VerifyReport {
    /// The report for a file not read (yet): nothing loaded, nothing found; the caller
    /// fills in what it knows.
    pub fn unread(file: String, target: Option<String>) -> VerifyReport {
        VerifyReport {
            schema_version: SCHEMA_VERSION,
            command: "verify",
            file,
            target,
            loads: false,
            load_error: None,
            warnings: Vec::new(),
            rule_breaks: Vec::new(),
            program: None,
            collective: None,
            check: None,
            computes: None,
            correct: false,
            topology: None,
            timing: None,
            bounds: None,
            error: None,
        }
    }
}

/// What an MSCCL file declares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgramInfo {
    pub name: String,
    pub gpus: usize,
    pub channels: usize,
    pub chunks_per_loop: usize,
    pub proto: &'static str,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub threadblocks: usize,
}

/// What the verifier found in an MSCCL program.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerifyCheck {
    /// `in place`, `out of place`.
    pub layouts_checked: Vec<&'static str>,
    pub steps: usize,
    pub messages: usize,
    pub problems: Vec<ProblemInfo>,
    /// Problems found beyond those listed.
    pub unlisted_problems: usize,
}

/// One problem: its kind's name and the message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProblemInfo {
    pub kind: &'static str,
    /// The file it concerns (`compile --check`); absent for `verify`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub message: String,
}

/// `tacos compile --json`: what was written and the manifest, whose bands carry
/// `time_us`, `algbw_gbps` and `efficiency` at each band's smallest size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompileReport<'a> {
    pub schema_version: u32,
    pub command: &'static str,
    pub dir: String,
    pub msccl_algo_dir: String,
    /// With `--target msccl-legacy`, which reads no directory: the `MSCCL_XML_FILES` value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msccl_xml_files: Option<String>,
    pub target: String,
    /// `created`, `replaced` or `unchanged`.
    pub written: &'static str,
    /// Wall time of the compilation.
    pub elapsed_ms: f64,
    pub manifest: &'a Manifest,
    pub rejected: Vec<RejectedCandidate>,
}

/// A candidate left out of a band.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RejectedCandidate {
    pub collective: String,
    pub in_place: Option<bool>,
    pub band_min_bytes: u64,
    pub candidate: Candidate,
    pub failed_verification: bool,
    pub reason: String,
}

impl RejectedCandidate {
    pub fn new(r: &Rejection) -> RejectedCandidate {
        RejectedCandidate {
            collective: r.collective.name().to_string(),
            in_place: r.in_place,
            band_min_bytes: r.band.min_bytes,
            candidate: r.candidate,
            failed_verification: r.failed_verification,
            reason: r.reason.clone(),
        }
    }
}

/// `tacos compile --check DIR --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompileCheckReport<'a> {
    pub schema_version: u32,
    pub command: &'static str,
    pub dir: String,
    pub ok: bool,
    pub files_checked: usize,
    /// The manifest's record of the topology (null when it could not be read).
    pub topology: Option<&'a tacos::compile::TopologyInfo>,
    pub tool_version: Option<&'a str>,
    pub target: Option<String>,
    pub problems: Vec<ProblemInfo>,
}

impl CompileCheckReport<'_> {
    pub fn new(dir: String, report: &CheckReport) -> CompileCheckReport<'_> {
        CompileCheckReport {
            schema_version: SCHEMA_VERSION,
            command: "compile-check",
            dir,
            ok: report.is_ok(),
            files_checked: report.files_checked,
            topology: report.manifest.as_ref().map(|m| &m.topology),
            tool_version: report.manifest.as_ref().map(|m| m.tool_version.as_str()),
            target: report.target.as_ref().map(|t| t.to_string()),
            problems: report
                .problems
                .iter()
                .map(|p| ProblemInfo {
                    kind: p.kind.name(),
                    file: p.file.clone(),
                    message: p.message.clone(),
                })
                .collect(),
        }
    }
}

/// `tacos compile --feedback --json`: every band the set served, measured ours against
/// measured NCCL and against the manifest's prediction, and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompileFeedbackReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub dir: String,
    pub msccl_algo_dir: String,
    /// With `--target msccl-legacy`: the `MSCCL_XML_FILES` value for the rewritten set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msccl_xml_files: Option<String>,
    /// `replaced`, or `unchanged` where the directory already held this feedback.
    pub written: &'static str,
    pub results: Vec<FeedbackFile>,
    pub bands: Vec<FeedbackBand>,
    /// The files of the rewritten set.
    pub files: Vec<String>,
    /// What was left aside: sizes outside the compiled range or measured in one run only.
    pub notes: Vec<String>,
}

/// A results file and what it was read as.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeedbackFile {
    pub file: String,
    /// `with_set` or `without_set`, by its name.
    pub run: Run,
    /// Tables read (one per placement).
    pub tables: usize,
}

/// One served band.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeedbackBand {
    pub collective: CollectiveKind,
    pub in_place: bool,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The file that served it before the feedback.
    pub file: String,
    /// `kept`, `returned` (to NCCL) or `unmeasured`.
    pub outcome: &'static str,
    /// Why it was returned; null otherwise.
    pub reason: Option<String>,
    /// The size the manifest predicts at (the band's smallest), our program's predicted
    /// time and NCCL's (null where NCCL did not compete).
    pub predicted_size_bytes: u64,
    pub predicted_us: f64,
    pub predicted_nccl_us: Option<f64>,
    /// Every size measured both ways inside the band.
    pub measured: Vec<MeasuredSize>,
    /// Measured over predicted at `predicted_size_bytes`, where that size was measured.
    pub ours_measured_over_predicted: Option<f64>,
    pub nccl_measured_over_predicted: Option<f64>,
}

impl FeedbackBand {
    pub fn new(band: &BandFeedback) -> FeedbackBand {
        let p = &band.prediction;
        let measured = match band.outcome {
            Outcome::Unmeasured => Vec::new(),
            _ => p.measured.clone(),
        };
        let at_predicted = measured.iter().find(|m| m.size_bytes == p.size_bytes);
        let nccl_us = p.nccl.as_ref().map(|n| n.time_us);
        let (outcome, reason) = match &band.outcome {
            Outcome::Kept => ("kept", None),
            Outcome::Returned(why) => ("returned", Some(why.clone())),
            Outcome::Unmeasured => ("unmeasured", None),
        };
        FeedbackBand {
            collective: band.collective,
            in_place: band.in_place,
            min_bytes: band.min_bytes,
            max_bytes: band.max_bytes,
            file: band.file.clone(),
            outcome,
            reason,
            predicted_size_bytes: p.size_bytes,
            predicted_us: p.time_us,
            predicted_nccl_us: nccl_us,
            ours_measured_over_predicted: at_predicted.map(|m| m.ours_us / p.time_us),
            nccl_measured_over_predicted: at_predicted.zip(nccl_us).map(|(m, n)| m.nccl_us / n),
            measured,
        }
    }
}

/// `tacos topo show --json`: the topology and its statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopoShowReport {
    pub schema_version: u32,
    pub command: &'static str,
    #[serde(flatten)]
    pub topology: TopologyInfo,
    pub alive_npus: usize,
    pub out_degree: DegreeRange,
    pub in_degree: DegreeRange,
    pub link_classes: Vec<LinkClass>,
    /// Null when some pair of alive NPUs cannot reach each other, or when the topology is
    /// too large to search (`diameter_computed` false).
    pub diameter_hops: Option<usize>,
    pub diameter_computed: bool,
}

/// Fewest and most links at an alive NPU.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DegreeRange {
    pub min: usize,
    pub max: usize,
}

impl TopoShowReport {
    pub fn new(topo: &Topology) -> TopoShowReport {
        let stats = topo.stats();
        let range = |(min, max)| DegreeRange { min, max };
        TopoShowReport {
            schema_version: SCHEMA_VERSION,
            command: "topo-show",
            topology: TopologyInfo::new(topo),
            alive_npus: stats.alive_npus,
            out_degree: range(stats.out_degree),
            in_degree: range(stats.in_degree),
            link_classes: stats.link_classes,
            diameter_hops: stats.diameter_hops,
            diameter_computed: stats.diameter_computed,
        }
    }
}

/// `tacos synth --json`. Besides the common names it keeps, as aliases, the top-level
/// fields scripts read before the schema existed: `collective_time_us` (= `time_us`),
/// `npus` (= `collective.npus`), `size_bytes` (= `collective.size_bytes`) and
/// `synth_time_ms` (= `elapsed_ms`); `algbw_gbps` is a common name already.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SynthReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    /// Bytes per chunk.
    pub chunk_bytes: f64,
    /// The checked schedule's time (contention-free, so the simulator reports it, or less
    /// where the schedule leaves a link idle).
    #[serde(flatten)]
    pub timing: Timing,
    pub bounds: BoundsReport,
    /// Wall time of the synthesis (the K search included).
    pub elapsed_ms: f64,
    /// With `--stream`: the wall time the check of the file (read as it is written) ran on
    /// after the synthesis ended (the synthesis checks what it holds within `elapsed_ms`
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_ms: Option<f64>,
    pub transfers: usize,
    pub seed: u64,
    /// The baseline kept, where one was faster than every synthesized schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// The schedule file written (`--out`, or the transfer stream of `--stream`).
    pub schedule_file: Option<String>,
    pub xml_file: Option<String>,
    /// With `--plan`: the MSCCL++ execution plan written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<String>,
    /// With `--xml`: the verified program's simulated time, by the executor cost model
    /// (`cost_model`) unless `--alpha-beta`.
    pub program_time_us: Option<f64>,
    /// The executor cost model the program and NCCL were priced with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<CostModelInfo>,
    /// NCCL's own choice for the same request, priced by the same model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclBeside>,
    /// An All-Reduce's two compositions.
    pub allreduce: Option<AllReducePhases>,
    /// With `--replicate`: the nodes one node's matching was replicated onto.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicated: Option<Replication>,
    /// With `-k auto`, each K tried.
    pub chunk_trials: Option<Vec<ChunkTrialReport>>,
    /// Alias of `time_us`.
    pub collective_time_us: f64,
    /// Alias of `collective.npus`.
    pub npus: usize,
    /// Alias of `collective.size_bytes`.
    pub size_bytes: u64,
    /// Alias of `elapsed_ms`.
    pub synth_time_ms: f64,
}

/// An All-Reduce synthesized as Reduce-Scatter then All-Gather: when each ends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllReducePhases {
    pub reduce_scatter_us: f64,
    pub pipelined_us: f64,
    pub phased_us: f64,
    /// `pipelined` or `phased`.
    pub kept: &'static str,
}

impl AllReducePhases {
    pub fn new(a: &AllReduceTimes) -> AllReducePhases {
        AllReducePhases {
            reduce_scatter_us: ps_to_us(a.reduce_scatter_ps),
            pipelined_us: ps_to_us(a.pipelined_ps),
            phased_us: ps_to_us(a.phased_ps),
            kept: if a.pipelined { "pipelined" } else { "phased" },
        }
    }
}

/// One (K, seed) that `-k auto` tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChunkTrialReport {
    pub chunks_per_npu: usize,
    /// The baseline tried (at K), where the trial is one; its seed and planned mean
    /// nothing then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    pub seed: u64,
    /// Whether its chunks' ways were planned (`SynthOptions::planned`: trees, or paths
    /// for chunks with one target).
    pub planned: bool,
    /// Whether its planned trees were grown shallow (`SynthOptions::shape`).
    pub shallow: bool,
    /// Whether its planned trees went one way round each ring (`SynthOptions::shape`).
    pub one_way: bool,
    /// The synthesized schedule's own clock; null when it could not be synthesized.
    pub schedule_time_us: Option<f64>,
    /// What the choice is made on: the schedule's simulated time, or with `--xml` its
    /// program's; null when it could not be built.
    pub simulated_time_us: Option<f64>,
    /// With `--xml`: whether the K gave a verified program within the target's limits;
    /// null otherwise.
    pub fits_target: Option<bool>,
    /// Why it was not kept, when it could not be.
    pub refused: Option<String>,
}

impl ChunkTrialReport {
    /// `trial`, from a search that emitted programs (`programs`) or schedules.
    pub fn new(trial: &Trial, programs: bool) -> ChunkTrialReport {
        ChunkTrialReport {
            chunks_per_npu: trial.chunks_per_npu,
            baseline: trial.baseline.map(|b| b.name().to_string()),
            seed: trial.seed,
            planned: trial.planned,
            shallow: trial.shallow,
            one_way: trial.one_way,
            schedule_time_us: trial.synthesized_ps.map(ps_to_us),
            simulated_time_us: trial.simulated_ps.map(ps_to_us),
            fits_target: programs.then_some(trial.refused.is_none()),
            refused: trial.refused.clone(),
        }
    }
}

/// What a synthesis run produced besides the topology and collective.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthRun {
    /// The checked schedule's time.
    pub time_ps: Picos,
    pub elapsed_ms: f64,
    /// With `--stream`: what the check of the file added after the synthesis ended.
    pub check_ms: Option<f64>,
    pub transfers: usize,
    pub seed: u64,
    /// The baseline kept, where one was.
    pub baseline: Option<String>,
    pub schedule_file: Option<String>,
    pub xml_file: Option<String>,
    /// With `--plan`: the MSCCL++ execution plan written.
    pub plan_file: Option<String>,
    /// With `--xml`: the verified program's simulated time.
    pub program_time_ps: Option<Picos>,
    /// The executor cost model `program_time_ps` and `nccl` were priced with; None where
    /// programs were timed by bare alpha-beta messages (`--alpha-beta`).
    pub cost_model: Option<CostModelInfo>,
    /// NCCL's own choice for the request, where NCCL runs the collective.
    pub nccl: Option<NcclBeside>,
    pub allreduce: Option<AllReducePhases>,
    pub replicated: Option<Replication>,
    pub chunk_trials: Option<Vec<ChunkTrialReport>>,
}

/// A replicated synthesis's node shift (`synth::NodeShift`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replication {
    pub npus_per_node: usize,
    pub nodes: usize,
}

impl SynthReport {
    pub fn new(
        topo: &Topology,
        collective: &Collective,
        bounds: &Bounds,
        run: SynthRun,
    ) -> SynthReport {
        let spec = collective.spec();
        let timing = Timing::new(spec, run.time_ps, bounds);
        SynthReport {
            schema_version: SCHEMA_VERSION,
            command: "synth",
            topology: TopologyInfo::new(topo),
            collective: CollectiveInfo::new(spec),
            chunk_bytes: collective.chunk_bytes(),
            collective_time_us: timing.time_us,
            timing,
            bounds: BoundsReport::new(bounds),
            elapsed_ms: run.elapsed_ms,
            check_ms: run.check_ms,
            transfers: run.transfers,
            seed: run.seed,
            baseline: run.baseline,
            schedule_file: run.schedule_file,
            xml_file: run.xml_file,
            plan_file: run.plan_file,
            program_time_us: run.program_time_ps.map(ps_to_us),
            cost_model: run.cost_model,
            nccl: run.nccl,
            allreduce: run.allreduce,
            replicated: run.replicated,
            chunk_trials: run.chunk_trials,
            npus: spec.npus.len(),
            size_bytes: spec.size_bytes,
            synth_time_ms: run.elapsed_ms,
        }
    }
}

/// `tacos bench SUBJECT --json`: the table's rows, each with the common names for the
/// common figures (`topology`, `collective`, `time_us`, ...) and its own measurements.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport<R> {
    pub schema_version: u32,
    pub command: &'static str,
    /// What was measured: `synth`, `sim`, `lowering`, `compile`.
    pub subject: &'static str,
    pub rows: Vec<R>,
}

impl<R> BenchReport<R> {
    pub fn new(subject: &'static str, rows: Vec<R>) -> BenchReport<R> {
        BenchReport {
            schema_version: SCHEMA_VERSION,
            command: "bench",
            subject,
            rows,
        }
    }
}

/// A row of `tacos bench synth`: one synthesis, its speed and its quality.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SynthBenchRow {
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    /// The fastest of the synthesis runs (wall time).
    pub elapsed_ms: f64,
    /// The public C++ TACOS's synthesis time on this case, where the project measured it
    /// (All-Gather only).
    pub reference_cpp_ms: Option<f64>,
    /// The schedule's time and what it means against the bounds.
    #[serde(flatten)]
    pub timing: Timing,
    pub bounds: BoundsReport,
}

/// A row of `tacos bench fabric`: synthesis through switch vertices, against the bounds
/// and against the Ring baseline on the same fabric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FabricBenchRow {
    pub topology: TopologyInfo,
    /// The K kept (the fastest of those tried).
    pub collective: CollectiveInfo,
    /// Wall time of the synthesis at the K kept.
    pub elapsed_ms: f64,
    /// The synthesized schedule's time against the bounds.
    #[serde(flatten)]
    pub timing: Timing,
    pub bounds: BoundsReport,
    /// The Ring baseline's simulated time on the same fabric (None where it is not defined).
    pub ring_us: Option<f64>,
    /// Ring's time over the synthesized one.
    pub speedup_over_ring: Option<f64>,
}

/// `tacos bench scale --json`: the rows, and the points of a log-log plot of synthesis
/// time against NPUs, ours and the public C++ TACOS's, each with its fitted exponent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScaleBenchReport {
    #[serde(flatten)]
    pub bench: BenchReport<ScaleBenchRow>,
    pub plot: ScalePlot,
}

/// A row of `tacos bench scale`: one synthesis at scale, run in a process of its own so
/// that its peak memory is its own (which hands the row back as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleBenchRow {
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    /// Synthesized replicated (`tacos synth --replicate`): one node matched, its
    /// transfers shifted onto every other.
    #[serde(default)]
    pub replicated: bool,
    /// Why the case was not measured (refused by the memory limit, failed, killed); the
    /// figures below are then null.
    pub skipped: Option<String>,
    /// Wall time of the synthesis.
    pub synth_ms: Option<f64>,
    /// Wall time of the schedule checker on the result (streamed: what it ran on after the
    /// synthesis ended, as it reads the file beside the synthesis).
    pub check_ms: Option<f64>,
    /// The process's peak resident memory (VmHWM) once the synthesis ended, before the
    /// check, in MiB; null where the system does not say.
    pub synth_peak_mib: Option<f64>,
    /// The same at the end, the check included.
    pub peak_mib: Option<f64>,
    pub transfers: Option<usize>,
    /// Where the schedule would not fit in memory and was streamed to a file as it was
    /// made (`tacos synth --stream`) and checked from the file: the file's size in bytes.
    /// Null where it was held.
    pub stream_bytes: Option<u64>,
    /// The schedule's time.
    pub time_us: Option<f64>,
    /// The best of the bounds computed per NPU (ingress, egress, chunked); the others
    /// search from every NPU, which at this scale would take longer than the synthesis.
    pub bound_us: Option<f64>,
    /// Which one it is.
    pub bound: Option<String>,
    /// `bound_us / time_us`.
    pub efficiency: Option<f64>,
}

/// One point of the scaling plot.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScalePoint {
    pub npus: usize,
    pub synth_ms: f64,
}

/// The data of the log-log plot of synthesis time against NPUs (2D meshes, All-Gather).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScalePlot {
    /// This run's measured mesh cases.
    pub points: Vec<ScalePoint>,
    /// Least-squares slope of log(time) on log(NPUs) over `points`: time grows as
    /// NPUs^exponent. Null with fewer than two points.
    pub exponent: Option<f64>,
    /// The public C++ TACOS on this machine class (one thread; ../shared/reference).
    pub reference_cpp: Vec<ScalePoint>,
    pub reference_cpp_exponent: Option<f64>,
}

/// A row of `tacos bench sim`: the simulator's speed on one schedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimBenchRow {
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    /// `tacos` (synthesized) or a baseline's name.
    pub algorithm: &'static str,
    pub transfers: usize,
    /// The fastest of the simulation runs (wall time).
    pub elapsed_ms: f64,
    /// The simulated collective time.
    pub time_us: f64,
    /// A synthesized schedule's own clock (the simulator must agree); null for baselines.
    pub schedule_time_us: Option<f64>,
}

/// A row of `tacos bench lowering`: each stage's wall time (the fastest of its runs) on
/// one synthesized schedule, and the program's size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoweringBenchRow {
    pub topology: TopologyInfo,
    pub collective: CollectiveInfo,
    pub lower_ms: f64,
    pub write_ms: f64,
    pub parse_ms: f64,
    pub verify_ms: f64,
    pub simulate_ms: f64,
    pub steps: usize,
    pub threadblocks: usize,
    pub channels: usize,
    pub xml_bytes: usize,
    /// The program's simulated time.
    pub time_us: f64,
    /// The schedule's own clock.
    pub schedule_time_us: f64,
}

/// A row of `tacos bench compile`: the plugin cache for one cluster, cold and warm.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompileBenchRow {
    pub topology: TopologyInfo,
    /// Algorithm files in the set.
    pub files: usize,
    /// Their bytes together.
    pub xml_bytes: u64,
    /// Each cold run (compile and write into an empty directory).
    pub cold_ms: Vec<f64>,
    /// The warm run (every file's hash checked).
    pub warm_ms: f64,
    /// The least efficiency of any band (its best bound over its predicted time).
    pub min_efficiency: f64,
}

/// A row of `tacos bench tuner`: the tuner's start for one cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TunerBenchRow {
    /// The `TACOS_TOPOLOGY` spec, or `generic` for the model every tuner user gets.
    pub topology: String,
    pub ranks: usize,
    pub nodes: usize,
    /// The first init (wall time).
    pub init_cold_ms: f64,
    /// The fastest of the repeated inits.
    pub init_best_ms: f64,
    /// The most bytes init held at once, in MB (1e6).
    pub init_heap_mb: f64,
    /// One decision's lookup, in nanoseconds.
    pub lookup_ns: f64,
}

/// A row of `tacos bench cost`: pricing NCCL's own choices on one cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostBenchRow {
    pub topology: String,
    pub gpus: usize,
    pub collective: CollectiveKind,
    /// Building the prices once (shapes and NCCL's cost table), fastest run.
    pub init_ms: f64,
    /// Sizes priced, and the time to price them all, fastest run.
    pub sizes: usize,
    pub price_all_us: f64,
    /// NCCL's choice at 1 GiB, as nccl-tests counts busbw.
    pub busbw_1gib_gbps: f64,
}

/// A row of `tacos bench seeds`: one topology's seed study against the C++ TACOS.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeedsBenchRow {
    pub topology: String,
    pub chunks_per_npu: usize,
    /// Seeds synthesized, each alone.
    pub seeds: usize,
    /// The public C++ TACOS's collective time over 100 seeds, us: median and best.
    pub reference_cpp_median_us: f64,
    pub reference_cpp_best_us: f64,
    /// Simulated collective time over the seeds, us.
    pub best_us: f64,
    pub median_us: f64,
    pub worst_us: f64,
    /// Seeds whose schedule alone is slower than the C++'s median.
    pub seeds_worse_than_reference: usize,
    /// What `synth` keeps by default: the best of its default number of seeds.
    pub default_seeds: usize,
    pub default_us: f64,
    pub default_worse_than_reference: bool,
}

/// A row of `tacos bench scheduler`: the MSCCL scheduler on one cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchedulerBenchRow {
    /// The `TACOS_TOPOLOGY` spec.
    pub topology: String,
    pub gpus: usize,
    /// The first call of a job on a cold cache (it compiles its band).
    pub cold_first_call_ms: f64,
    /// What that call got: `served`, `NCCL` (left to NCCL's own choice) or `fallback`
    /// (no program within the target's limits and the work bound).
    pub first_call: String,
    /// The slowest first call of a band on the cold cache, over every band.
    pub slowest_band_ms: f64,
    /// Every band's first call together: what a prologue filling the cache takes.
    pub all_bands_ms: f64,
    /// Bands served by a program, of `bands`.
    pub bands_served: usize,
    pub bands: usize,
    /// The first call of a job on the warm cache.
    pub warm_first_call_ms: f64,
    /// A job's first call of a served band on the warm cache (its file hashed), where
    /// one is served.
    pub warm_first_served_ms: Option<f64>,
}

/// `tacos synth --npus A --npus B ... --json`: several collectives synthesized together.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConcurrentSynthReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub topology: TopologyInfo,
    pub groups: Vec<GroupReport>,
    /// When the last group is done.
    pub time_us: f64,
    /// Wall time of the synthesis of all groups together.
    pub elapsed_ms: f64,
    pub seed: u64,
}

/// One group of a [`ConcurrentSynthReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    pub collective: CollectiveInfo,
    /// The group's time while sharing the links with the others.
    pub time_us: f64,
    /// The group's time synthesized alone on the same topology.
    pub alone_time_us: f64,
    pub transfers: usize,
}

/// `tacos calibrate --json`: how the start profile and the fitted one predict each measured
/// table, the constants before and after, and the profile written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrateReport {
    pub schema_version: u32,
    pub command: &'static str,
    /// The topologies the tables ran on (each table names its own).
    pub topologies: Vec<TopologyInfo>,
    /// The GPU generation: NCCL's tuning tables and the start profile.
    pub gpu_arch: String,
    /// The profile the fit started from: `built-in hopper`, or the file given.
    pub start: String,
    pub files: Vec<String>,
    pub tables: Vec<CalibrateTable>,
    pub constants: Vec<CalibrateConstant>,
    /// What to doubt in the fit: constants fitted onto a bound of their range, tables a fit
    /// over several node counts predicts worse than [`tacos::cost::fit::NODE_COUNTS_ERROR`].
    pub warnings: Vec<String>,
    /// The fitted profile, as `-o` writes it.
    pub profile: tacos::cost::ExecModel,
    /// Where the profile was written; null without `-o`.
    pub written: Option<String>,
    /// Wall time of the fit.
    pub elapsed_ms: f64,
}

/// One measured table of a [`CalibrateReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrateTable {
    /// `FILE:LINE` of the table.
    pub name: String,
    /// `allreduce`, `allgather`, ...
    pub collective: String,
    /// The topology's name.
    pub topology: String,
    pub ranks: usize,
    /// `out-of-place` or `in-place`.
    pub column: &'static str,
    /// What the run was held to (`NCCL_ALGO`, `--nccl-algo`, `NCCL_PROTO`); null: NCCL's choice.
    pub algorithm_held: Option<tacos::gpu::Algorithm>,
    pub protocol_held: Option<tacos::gpu::Protocol>,
    /// |predicted - measured| / measured over the table's points, fitted and at the start.
    pub median_error: f64,
    pub worst_error: f64,
    pub start_median_error: f64,
    pub start_worst_error: f64,
    pub points: Vec<CalibratePoint>,
    /// What the reader assumed or left aside.
    pub notes: Vec<String>,
    /// Given with `--holdout`: predicted by the fit, not fitted to.
    pub held_out: bool,
}

/// One size of a [`CalibrateTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibratePoint {
    pub size_bytes: u64,
    pub measured_us: f64,
    pub predicted_us: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
    /// The largest |error| the model is held to at this size.
    pub tolerance: f64,
    /// The algorithm and protocol priced (NCCL's pick unless held).
    pub algorithm: tacos::gpu::Algorithm,
    pub protocol: tacos::gpu::Protocol,
    pub start_predicted_us: f64,
}

/// A constant the fit moves: where it started, where it ended, whether the tables pin it
/// down (`cost::fit::determined`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrateConstant {
    pub name: &'static str,
    pub start: f64,
    pub fitted: f64,
    pub determined: bool,
    /// Why not determined; null when it is.
    pub reason: Option<String>,
}
