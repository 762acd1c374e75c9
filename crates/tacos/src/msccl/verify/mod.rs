//! The verifier: executes a program symbolically and checks that it computes its
//! collective.
//!
//! It runs the control flow (see `exec`): a deadlock is reported with the cycle of waiting
//! steps, a receive that meets a message of another size or a message nobody receives as
//! a FIFO mismatch. It then replays data along the run: every slot holds a chunk id and,
//! for combining collectives, the set of ranks whose contributions it sums (as the
//! schedule checker counts them); reading an empty slot, adding different chunks or
//! counting a contribution twice is reported where it happens. Races are found with
//! vector clocks over the happens-before order of threadblock order, dependencies and
//! messages: two accesses to one slot, at least one a write, that nothing orders. At the
//! end every output slot must hold exactly its chunk, or its full sum. Programs declaring
//! both in-place and out-of-place are checked both ways.
//!
//! Apart from that, the report lists the rules of the target's loader the program breaks
//! (`super::rules`): a program can compute its collective and still be refused.
//!
//! This file holds the options, the report and the order the checks run in. The parts:
//! `accesses` resolves the slots each executed step reads and writes, once, for both
//! judges of the data; `replay` carries chunk ids and contributor sets along the run and
//! checks the final buffers; `races` finds accesses nothing orders; `root` infers the root
//! of a rooted collective when neither the caller nor the file names one.

mod accesses;
mod races;
mod replay;
mod root;

use super::exec::{self, Trace};
use super::layout::Layout;
use super::rules::{self, RuleBreak};
use super::Target;
use super::{step_name, Program};
use crate::collective::CollectiveKind;
use accesses::Accesses;
use races::find_races;
use replay::Replay;
use root::infer_root;
use std::collections::HashMap;
use std::fmt;

/// What to verify a program as.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// The collective to check; by default the one the program declares.
    pub collective: Option<CollectiveKind>,
    /// The root rank of a rooted collective; by default the one GPU that only sends
    /// (Broadcast, Scatter) or only receives (Reduce, Gather), else the first that works.
    pub root: Option<usize>,
    /// Unreceived chunks a connection holds before its sender waits; by default what the
    /// executor's buffers hold for the program's protocol (`exec::buffered_chunks`).
    pub capacity: Option<usize>,
    /// The loader whose rules the program must keep to.
    pub target: Target,
}

/// Kinds of problems, from the shape of the program to its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// The program cannot be executed as written (missing peers, shared connections...).
    Structure,
    /// An offset outside its buffer.
    Bounds,
    Deadlock,
    /// Sends and receives of a connection do not match.
    Fifo,
    Race,
    /// A step reads nothing, or combines data wrongly.
    Data,
    /// The final buffers do not hold the collective's result.
    Result,
}

impl ProblemKind {
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Structure => "structure",
            ProblemKind::Bounds => "bounds",
            ProblemKind::Deadlock => "deadlock",
            ProblemKind::Fifo => "fifo",
            ProblemKind::Race => "race",
            ProblemKind::Data => "data",
            ProblemKind::Result => "result",
        }
    }
}

/// One problem found.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

/// What verification found.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    /// The collective checked, if known.
    pub collective: Option<CollectiveKind>,
    pub root: Option<usize>,
    /// Layouts checked: true for in place.
    pub in_place_checked: Vec<bool>,
    pub steps: usize,
    /// Messages sent in the run.
    pub messages: usize,
    pub problems: Vec<Problem>,
    /// Problems found but not listed (each kind lists at most `LISTED`).
    pub unlisted: usize,
    /// The rules of the target's loader the program breaks.
    pub rule_breaks: Vec<RuleBreak>,
}

impl VerifyReport {
    /// Whether the target's loader takes the program: no rule broken.
    pub fn loads(&self) -> bool {
        self.rule_breaks.is_empty()
    }

    /// Whether the program computes its collective: no problem found.
    pub fn computes(&self) -> bool {
        self.problems.is_empty() && self.unlisted == 0
    }

    /// Whether the program loads in the target and computes its collective.
    pub fn is_correct(&self) -> bool {
        self.loads() && self.computes()
    }
}

/// Problems listed per kind; the rest are only counted.
const LISTED: usize = 20;

#[derive(Default)]
struct Problems {
    list: Vec<Problem>,
    per_kind: HashMap<ProblemKind, usize>,
    unlisted: usize,
    /// Prefix naming the layout when a program is checked both ways.
    context: &'static str,
}

impl Problems {
    fn add(&mut self, kind: ProblemKind, message: String) {
        let n = self.per_kind.entry(kind).or_default();
        *n += 1;
        if *n > LISTED {
            self.unlisted += 1;
        } else {
            self.list.push(Problem {
                kind,
                message: format!("{}{message}", self.context),
            });
        }
    }
}

/// Verifies `program`; never panics on a parsed program.
pub fn verify(program: &Program, options: &VerifyOptions) -> VerifyReport {
    let mut problems = Problems::default();
    let kind = options.collective.or_else(|| program.collective_kind());
    let mut report = VerifyReport {
        collective: kind,
        root: None,
        in_place_checked: Vec::new(),
        steps: program.steps(),
        messages: 0,
        problems: Vec::new(),
        unlisted: 0,
        rule_breaks: rules::check(program, &options.target),
    };
    let blocking = report
        .rule_breaks
        .iter()
        .filter(|b| b.rule.blocks_execution())
        .count();
    if blocking > 0 {
        problems.add(
            ProblemKind::Structure,
            format!("not executed: {blocking} broken loader rule(s) leave connections that cannot be formed (listed with the loader rules)"),
        );
    }
    let missing = exec::missing_dependencies(program);
    for p in &missing {
        problems.add(ProblemKind::Structure, p.clone());
    }
    static_checks(program, kind, &mut problems);
    let affordable = super::footprint::check(program, kind, "verifying");
    if let Err(e) = &affordable {
        problems.add(ProblemKind::Structure, format!("not executed: {e}"));
    }
    if blocking == 0 && missing.is_empty() && affordable.is_ok() {
        let capacity = options
            .capacity
            .unwrap_or_else(|| exec::buffered_chunks(program.proto));
        let trace = exec::run(program, capacity);
        report.messages = trace.messages.len();
        if let Some(d) = &trace.deadlock {
            problems.add(ProblemKind::Deadlock, d.clone());
        }
        for f in &trace.fifo_problems {
            problems.add(ProblemKind::Fifo, f.clone());
        }
        if let Some(kind) = kind {
            check_data(program, kind, options, &trace, &mut report, &mut problems);
        }
    }
    report.problems = problems.list;
    report.unlisted = problems.unlisted;
    report
}

fn static_checks(program: &Program, kind: Option<CollectiveKind>, problems: &mut Problems) {
    if kind.is_none() {
        problems.add(
            ProblemKind::Structure,
            format!(
                "coll '{}' is not a collective the verifier knows (known: {}); name one to check the result",
                program.collective,
                CollectiveKind::ALL.map(|k| k.name()).join(", ")
            ),
        );
    }
    if !program.inplace && !program.outofplace {
        problems.add(
            ProblemKind::Structure,
            "the program declares neither inplace nor outofplace, so the executor never picks it"
                .into(),
        );
    }
    for (g, gpu) in program.gpus.iter().enumerate() {
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            if tb.channel >= program.nchannels {
                problems.add(
                    ProblemKind::Structure,
                    format!(
                        "GPU {g} tb {t} uses channel {} but nchannels is {}",
                        tb.channel, program.nchannels
                    ),
                );
            }
            for (s, step) in tb.steps.iter().enumerate() {
                if step.instr.reduces() && kind.is_some_and(|k| !k.combining()) {
                    problems.add(
                        ProblemKind::Data,
                        format!(
                            "{} reduces, but {} copies chunks",
                            step_name(program, g, t, s),
                            kind.map_or("", |k| k.name())
                        ),
                    );
                }
            }
        }
    }
}

/// Replays data for every layout the program declares, and checks races and results.
fn check_data(
    program: &Program,
    kind: CollectiveKind,
    options: &VerifyOptions,
    trace: &Trace,
    report: &mut VerifyReport,
    problems: &mut Problems,
) {
    let root = match (kind.has_root(), options.root.or(program.root)) {
        (false, _) => None,
        (true, Some(r)) => Some(r),
        (true, None) => match infer_root(program, kind, trace) {
            Some(r) => Some(r),
            None => {
                problems.add(
                    ProblemKind::Result,
                    format!("no GPU works as the {kind} root (tried every one)"),
                );
                return;
            }
        },
    };
    report.root = root;
    report.in_place_checked = check_layouts(program, kind, root, trace, problems);
}

/// Replays data for every layout the program declares, and checks races and results;
/// returns the layouts checked (true: in place).
fn check_layouts(
    program: &Program,
    kind: CollectiveKind,
    root: Option<usize>,
    trace: &Trace,
    problems: &mut Problems,
) -> Vec<bool> {
    let modes: Vec<bool> = [(program.inplace, true), (program.outofplace, false)]
        .into_iter()
        .filter_map(|(declared, in_place)| declared.then_some(in_place))
        .collect();
    let mut checked = Vec::new();
    for &in_place in &modes {
        problems.context = match (modes.len(), in_place) {
            (1, _) => "",
            (_, true) => "in place: ",
            (_, false) => "out of place: ",
        };
        let ranks = program.gpus.len();
        let layout = match Layout::new(kind, ranks, program.nchunksperloop, in_place, root) {
            Ok(l) => l,
            Err(e) => {
                problems.add(ProblemKind::Structure, e.to_string());
                continue;
            }
        };
        checked.push(in_place);
        let accesses = Accesses::new(program, &layout, trace, problems);
        Replay::new(program, &layout, trace, &accesses, problems).run();
        find_races(program, &layout, trace, &accesses, problems);
    }
    problems.context = "";
    checked
}
