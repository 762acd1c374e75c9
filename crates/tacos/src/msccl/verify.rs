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

use super::exec::{self, Trace};
use super::layout::{Layout, Slot};
use super::rules::{self, RuleBreak};
use super::Target;
use super::{step_name, Buf, Instr, Program};
use crate::collective::CollectiveKind;
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

/// The root of a rooted collective: the only GPU that sends but never receives
/// (Broadcast, Scatter) or receives but never sends (Reduce, Gather); failing that, the
/// first GPU for which the program checks out (as when a Reduce is a Reduce-Scatter then a
/// Gather, and the root sends too).
fn infer_root(program: &Program, kind: CollectiveKind, trace: &Trace) -> Option<usize> {
    if program.gpus.len() == 1 {
        return Some(0);
    }
    let does = |g: &super::Gpu, f: fn(Instr) -> bool| {
        g.threadblocks
            .iter()
            .any(|tb| tb.steps.iter().any(|s| f(s.instr)))
    };
    let roots: Vec<usize> = program
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| {
            let (sends, receives) = (does(g, Instr::sends), does(g, Instr::receives));
            match kind {
                CollectiveKind::Broadcast | CollectiveKind::Scatter => sends && !receives,
                _ => receives && !sends,
            }
        })
        .map(|(r, _)| r)
        .collect();
    if let [root] = roots[..] {
        return Some(root);
    }
    (0..program.gpus.len()).find(|&root| {
        let mut trial = Problems::default();
        check_layouts(program, kind, Some(root), trace, &mut trial);
        trial.list.is_empty() && trial.unlisted == 0
    })
}

/// The slots each executed step reads and writes, resolved through the layout; steps
/// whose offsets leave their buffers are reported and get no accesses. Stored flat: the
/// accesses of global step `gid` are `slots[start[gid]..start[gid + 1]]`, its reads first.
struct Accesses {
    slots: Vec<Slot>,
    /// Per global step: where its reads start; one more entry at the end.
    start: Vec<u32>,
    /// Per global step: how many of its accesses are reads.
    reads: Vec<u32>,
}

impl Accesses {
    fn new(program: &Program, layout: &Layout, trace: &Trace, problems: &mut Problems) -> Self {
        let n = trace.index.steps();
        let mut slots = Vec::with_capacity(n * 2);
        let mut start = Vec::with_capacity(n + 1);
        let mut reads = Vec::with_capacity(n);
        for (t, &(g, tb)) in trace.index.tbs.iter().enumerate() {
            let gpu = &program.gpus[g];
            for (s, step) in gpu.threadblocks[tb].steps.iter().enumerate() {
                debug_assert_eq!(trace.index.first_step[t] + s, start.len());
                start.push(slots.len() as u32);
                // Appends the slots of `buf[off..off + count]`, or none if one is outside.
                let mut push = |slots: &mut Vec<Slot>, on: bool, buf: Buf, off: i64, what: &str| {
                    if !on {
                        return;
                    }
                    let declared = match buf {
                        Buf::Input => gpu.input_chunks,
                        Buf::Output => gpu.output_chunks,
                        Buf::Scratch => gpu.scratch_chunks,
                    };
                    let first = slots.len();
                    for i in 0..step.count as i64 {
                        let o = off + i;
                        let slot = layout
                            .resolve(g, buf, o)
                            .filter(|sl| sl.buf != Buf::Scratch || sl.index < declared);
                        match slot {
                            Some(sl) if o < declared as i64 => slots.push(sl),
                            _ => {
                                let real = match buf {
                                    Buf::Scratch => declared,
                                    _ => layout.view_len(buf),
                                };
                                problems.add(
                                    ProblemKind::Bounds,
                                    format!(
                                        "{} {what} {}[{o}], outside the buffer ({} declares {declared} chunks, the {} buffer has {real})",
                                        step_name(program, g, tb, s),
                                        buf.code(),
                                        buf.code(),
                                        layout.kind()
                                    ),
                                );
                                slots.truncate(first);
                                return;
                            }
                        }
                    }
                };
                push(
                    &mut slots,
                    step.instr.reads_src(),
                    step.src_buf,
                    step.src_off,
                    "reads",
                );
                reads.push(slots.len() as u32 - start[start.len() - 1]);
                push(
                    &mut slots,
                    step.instr.writes_dst(),
                    step.dst_buf,
                    step.dst_off,
                    "writes",
                );
            }
        }
        start.push(slots.len() as u32);
        Accesses {
            slots,
            start,
            reads,
        }
    }

    fn reads(&self, gid: usize) -> &[Slot] {
        let a = self.start[gid] as usize;
        &self.slots[a..a + self.reads[gid] as usize]
    }

    fn writes(&self, gid: usize) -> &[Slot] {
        let a = self.start[gid] as usize + self.reads[gid] as usize;
        &self.slots[a..self.start[gid + 1] as usize]
    }
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Empty,
    /// Data already reported as wrong; not reported again.
    Poison,
    /// A chunk and, for combining collectives, the id of its contributor set.
    Data {
        chunk: u32,
        set: u32,
    },
}

/// Contributor sets of combining collectives, one bit per rank, stored flat.
struct Sets {
    words: usize,
    bits: Vec<u64>,
    singletons: Vec<Option<u32>>,
}

impl Sets {
    fn new(ranks: usize) -> Sets {
        Sets {
            words: ranks.div_ceil(64),
            bits: Vec::new(),
            singletons: vec![None; ranks],
        }
    }

    fn get(&self, id: u32) -> &[u64] {
        let i = id as usize * self.words;
        &self.bits[i..i + self.words]
    }

    fn push(&mut self, words: Vec<u64>) -> u32 {
        let id = (self.bits.len() / self.words.max(1)) as u32;
        self.bits.extend(words);
        id
    }

    fn singleton(&mut self, rank: usize) -> u32 {
        if let Some(id) = self.singletons[rank] {
            return id;
        }
        let mut w = vec![0; self.words];
        w[rank / 64] |= 1 << (rank % 64);
        let id = self.push(w);
        self.singletons[rank] = Some(id);
        id
    }

    /// The union of two sets, or the first rank in both.
    fn union(&mut self, a: u32, b: u32) -> Result<u32, usize> {
        let (x, y) = (self.get(a), self.get(b));
        if let Some(i) = (0..self.words).find(|&i| x[i] & y[i] != 0) {
            return Err(i * 64 + (x[i] & y[i]).trailing_zeros() as usize);
        }
        let w: Vec<u64> = x.iter().zip(y).map(|(p, q)| p | q).collect();
        Ok(self.push(w))
    }

    fn count(&self, id: u32) -> usize {
        self.get(id).iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Replays data along the trace.
struct Replay<'a> {
    program: &'a Program,
    layout: &'a Layout,
    trace: &'a Trace,
    accesses: &'a Accesses,
    problems: &'a mut Problems,
    /// Per rank, per buffer (input, output, scratch): slot contents.
    mem: Vec<[Vec<Val>; 3]>,
    sets: Sets,
    /// What the messages carry, flat: message m's values start at `carried_at[m]`.
    carried: Vec<Val>,
    carried_at: Vec<usize>,
    /// Per-step work space, kept to spare allocations.
    src: Vec<Val>,
    old_dst: Vec<Val>,
    result: Vec<Val>,
}

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::Input => 0,
        Buf::Output => 1,
        Buf::Scratch => 2,
    }
}

impl<'a> Replay<'a> {
    fn new(
        program: &'a Program,
        layout: &'a Layout,
        trace: &'a Trace,
        accesses: &'a Accesses,
        problems: &'a mut Problems,
    ) -> Replay<'a> {
        let ranks = program.gpus.len();
        let mut sets = Sets::new(ranks);
        let mut mem: Vec<[Vec<Val>; 3]> = program
            .gpus
            .iter()
            .map(|g| {
                [
                    vec![Val::Empty; layout.canonical_len(Buf::Input)],
                    vec![Val::Empty; layout.canonical_len(Buf::Output)],
                    vec![Val::Empty; g.scratch_chunks],
                ]
            })
            .collect();
        for (rank, m) in mem.iter_mut().enumerate() {
            for chunk in 0..layout.chunks() {
                if let Some(slot) = layout.input_slot(rank, chunk) {
                    let set = if layout.combining() {
                        sets.singleton(rank)
                    } else {
                        0
                    };
                    m[buf_index(slot.buf)][slot.index] = Val::Data {
                        chunk: chunk as u32,
                        set,
                    };
                }
            }
        }
        let mut carried_at = Vec::with_capacity(trace.messages.len() + 1);
        carried_at.push(0);
        for m in &trace.messages {
            carried_at.push(carried_at[carried_at.len() - 1] + m.count as usize);
        }
        Replay {
            program,
            layout,
            trace,
            accesses,
            problems,
            mem,
            sets,
            carried: vec![Val::Poison; carried_at.last().copied().unwrap_or(0)],
            carried_at,
            src: Vec::new(),
            old_dst: Vec::new(),
            result: Vec::new(),
        }
    }

    fn name(&self, gid: usize) -> String {
        let (t, s) = self.trace.index.locate(gid);
        let (g, tb) = self.trace.index.tbs[t];
        step_name(self.program, g, tb, s)
    }

    fn run(mut self) {
        for &gid in &self.trace.order {
            self.step(gid);
        }
        if self.trace.completed() {
            self.check_result();
        }
    }

    fn read(&mut self, gid: usize, rank: usize, slot: Slot) -> Val {
        let v = self.mem[rank][buf_index(slot.buf)][slot.index];
        if v == Val::Empty {
            let who = self.name(gid);
            self.problems.add(
                ProblemKind::Data,
                format!(
                    "{who} reads {}[{}], which holds no data yet",
                    slot.buf.code(),
                    slot.index
                ),
            );
            return Val::Poison;
        }
        v
    }

    fn add(&mut self, gid: usize, a: Val, b: Val) -> Val {
        let (Val::Data { chunk: ca, set: sa }, Val::Data { chunk: cb, set: sb }) = (a, b) else {
            return Val::Poison;
        };
        if !self.layout.combining() {
            return Val::Poison;
        }
        if ca != cb {
            let who = self.name(gid);
            self.problems.add(
                ProblemKind::Data,
                format!("{who} adds chunk {ca} to chunk {cb}"),
            );
            return Val::Poison;
        }
        match self.sets.union(sa, sb) {
            Ok(set) => Val::Data { chunk: ca, set },
            Err(rank) => {
                let who = self.name(gid);
                self.problems.add(
                    ProblemKind::Data,
                    format!("{who} counts GPU {rank}'s contribution to chunk {ca} twice"),
                );
                Val::Poison
            }
        }
    }

    fn step(&mut self, gid: usize) {
        let (t, s) = self.trace.index.locate(gid);
        let (g, tb) = self.trace.index.tbs[t];
        let step = &self.program.gpus[g].threadblocks[tb].steps[s];
        let n = step.count as usize;
        let accesses = self.accesses;
        let (reads, writes) = (accesses.reads(gid), accesses.writes(gid));
        let mut src = std::mem::take(&mut self.src);
        src.clear();
        for i in 0..n {
            src.push(match reads.get(i) {
                Some(&slot) => self.read(gid, g, slot),
                None => Val::Poison,
            });
        }
        // What the received message carries, padded with poison if it is short.
        let incoming = match self.trace.received[gid] {
            Some(m) => self.carried_at[m]..self.carried_at[m + 1],
            None => 0..0,
        };
        let mut old_dst = std::mem::take(&mut self.old_dst);
        old_dst.clear();
        if step.instr == Instr::Reduce {
            for i in 0..n {
                old_dst.push(match writes.get(i) {
                    Some(&slot) => self.read(gid, g, slot),
                    None => Val::Poison,
                });
            }
        }
        let mut result = std::mem::take(&mut self.result);
        result.clear();
        for i in 0..n {
            let incoming_i = match incoming.start + i {
                at if at < incoming.end => self.carried[at],
                _ => Val::Poison,
            };
            result.push(match step.instr {
                Instr::Send | Instr::Copy => src[i],
                Instr::Recv | Instr::RecvCopySend => incoming_i,
                Instr::RecvReduceSend | Instr::RecvReduceCopy | Instr::RecvReduceCopySend => {
                    self.add(gid, incoming_i, src[i])
                }
                Instr::Reduce => self.add(gid, old_dst[i], src[i]),
                Instr::Nop => Val::Poison,
            });
        }
        for (i, &slot) in writes.iter().enumerate() {
            self.mem[g][buf_index(slot.buf)][slot.index] = result[i];
        }
        if let Some(m) = self.trace.sent[gid] {
            let at = self.carried_at[m];
            let len = self.carried_at[m + 1] - at;
            self.carried[at..at + len].copy_from_slice(&result[..len]);
        }
        self.src = src;
        self.old_dst = old_dst;
        self.result = result;
    }

    fn check_result(&mut self) {
        let full = self.program.gpus.len();
        for rank in 0..self.program.gpus.len() {
            for chunk in 0..self.layout.chunks() {
                let Some(slot) = self.layout.output_slot(rank, chunk) else {
                    continue;
                };
                let got = self.mem[rank][buf_index(slot.buf)][slot.index];
                let combining = self.layout.combining();
                let ok = matches!(got, Val::Data { chunk: c, set }
                    if c as usize == chunk && (!combining || self.sets.count(set) == full));
                if ok {
                    continue;
                }
                let want = if combining {
                    format!("chunk {chunk} summed over all {full} GPUs")
                } else {
                    format!("chunk {chunk}")
                };
                let held = match got {
                    Val::Empty => "nothing".to_string(),
                    Val::Poison => "data already reported wrong".to_string(),
                    Val::Data { chunk: c, set } if combining => {
                        let ranks: Vec<String> = (0..full)
                            .filter(|&r| self.sets.get(set)[r / 64] & (1 << (r % 64)) != 0)
                            .map(|r| r.to_string())
                            .collect();
                        format!("chunk {c} summed over GPUs {}", ranks.join(","))
                    }
                    Val::Data { chunk: c, .. } => format!("chunk {c}"),
                };
                self.problems.add(
                    ProblemKind::Result,
                    format!(
                        "at the end GPU {rank} {}[{}] should hold {want} but holds {held}",
                        slot.buf.code(),
                        slot.index
                    ),
                );
            }
        }
    }
}

/// Epoch of an access: (threadblock on its GPU, step).
type Epoch = (u32, u32);

#[derive(Clone, Default)]
struct SlotHistory {
    last_write: Option<Epoch>,
    /// Reads since the last write, the latest per threadblock.
    reads: Vec<Epoch>,
}

/// An unordered pair: the slot, the earlier access and what each did.
type Race = (Slot, Epoch, &'static str, &'static str);

/// The accesses so far to one GPU's slots, indexed flat: input, output, then scratch.
struct Histories {
    input_len: usize,
    output_len: usize,
    slots: Vec<SlotHistory>,
}

impl Histories {
    /// Forgets everything and sizes the table for a GPU with `scratch` scratch chunks.
    fn reset(&mut self, scratch: usize) {
        let len = self.input_len + self.output_len + scratch;
        for h in &mut self.slots {
            h.last_write = None;
            h.reads.clear();
        }
        self.slots.resize_with(len, SlotHistory::default);
    }

    fn at(&mut self, slot: Slot) -> &mut SlotHistory {
        let i = match slot.buf {
            Buf::Input => slot.index,
            Buf::Output => self.input_len + slot.index,
            Buf::Scratch => self.input_len + self.output_len + slot.index,
        };
        &mut self.slots[i]
    }

    /// Records the accesses of the step at `me`, which is ordered after the accesses
    /// `before` accepts, and hands `race` every conflicting access it is not ordered after.
    fn record(
        &mut self,
        reads: &[Slot],
        writes: &[Slot],
        me: Epoch,
        before: impl Fn(&Epoch) -> bool,
        mut race: impl FnMut(Race),
    ) {
        for &slot in reads {
            let hist = self.at(slot);
            if let Some(w) = hist.last_write.filter(|w| !before(w)) {
                race((slot, w, "written", "read"));
            }
            hist.reads.retain(|r| r.0 != me.0);
            hist.reads.push(me);
        }
        for &slot in writes {
            let hist = self.at(slot);
            if let Some(w) = hist.last_write.filter(|w| !before(w) && w.0 != me.0) {
                race((slot, w, "written", "written"));
            }
            if let Some(&r) = hist.reads.iter().find(|r| r.0 != me.0 && !before(r)) {
                race((slot, r, "read", "written"));
            }
            hist.last_write = Some(me);
            hist.reads.clear();
        }
    }
}

/// Finds unordered conflicting accesses: two accesses to one slot of a GPU, at least one a
/// write, that nothing orders. Vector clocks over one GPU's threadblocks decide what is
/// ordered. Orderings can pass through other GPUs by messages, so the exact search carries
/// the clocks through every step of the run, for every GPU: quadratic in the program's
/// size. The GPU's own orderings (threadblock order and dependencies) are a subset of the
/// exact ones and usually order everything, so a pass over the GPU's own steps with them
/// comes first; only a GPU where it leaves some pair unordered is searched exactly, and
/// only the exact search reports.
fn find_races(
    program: &Program,
    layout: &Layout,
    trace: &Trace,
    accesses: &Accesses,
    problems: &mut Problems,
) {
    let mut search = RaceSearch::new(program, layout, trace, accesses);
    for g in 0..program.gpus.len() {
        if !search.index().tb_id[g].is_empty() && !search.locally_ordered(g) {
            search.exact(g, problems);
        }
    }
}

const NO_SOURCE: u32 = u32::MAX;

struct RaceSearch<'a> {
    program: &'a Program,
    trace: &'a Trace,
    accesses: &'a Accesses,
    /// Each GPU's steps in the order they ran: `by_gpu[gpu_at[g]..gpu_at[g + 1]]`.
    by_gpu: Vec<u32>,
    gpu_at: Vec<usize>,
    /// Per global step: its number among the steps that release a dependency, numbered
    /// in global step order (so each GPU's are consecutive), or `NO_SOURCE`.
    source: Vec<u32>,
    /// Per GPU: the number of its first source (the GPU's are consecutive); one more
    /// entry at the end, the count of all.
    source_base: Vec<u32>,
    histories: Histories,
    /// Work space: clocks, and the clocks of sources and messages when they ran.
    clocks: Vec<u32>,
    at_source: Vec<u32>,
    at_message: Vec<u32>,
}

impl<'a> RaceSearch<'a> {
    fn new(
        program: &'a Program,
        layout: &Layout,
        trace: &'a Trace,
        accesses: &'a Accesses,
    ) -> RaceSearch<'a> {
        let index = &trace.index;
        let gpus = program.gpus.len();
        let gpu_of = |gid: usize| index.tbs[index.locate(gid).0].0;
        let mut gpu_at = vec![0; gpus + 1];
        for &gid in &trace.order {
            gpu_at[gpu_of(gid) + 1] += 1;
        }
        for g in 0..gpus {
            gpu_at[g + 1] += gpu_at[g];
        }
        let mut next = gpu_at.clone();
        let mut by_gpu = vec![0; trace.order.len()];
        for &gid in &trace.order {
            let g = gpu_of(gid);
            by_gpu[next[g]] = gid as u32;
            next[g] += 1;
        }
        let mut source = vec![NO_SOURCE; index.steps()];
        for src in trace.released_by.iter().flatten() {
            source[*src] = 0;
        }
        // Global steps are numbered GPU by GPU, so numbering sources in step order
        // keeps each GPU's consecutive.
        let mut source_base = vec![0; gpus + 1];
        let mut sources = 0;
        for (gid, s) in source.iter_mut().enumerate() {
            if *s != NO_SOURCE {
                *s = sources;
                sources += 1;
                source_base[gpu_of(gid) + 1] = sources;
            }
        }
        for g in 0..gpus {
            source_base[g + 1] = source_base[g + 1].max(source_base[g]);
        }
        RaceSearch {
            program,
            trace,
            accesses,
            by_gpu,
            gpu_at,
            source,
            source_base,
            histories: Histories {
                input_len: layout.canonical_len(Buf::Input),
                output_len: layout.canonical_len(Buf::Output),
                slots: Vec::new(),
            },
            clocks: Vec::new(),
            at_source: Vec::new(),
            at_message: Vec::new(),
        }
    }

    fn index(&self) -> &'a exec::Index {
        &self.trace.index
    }

    /// Whether GPU g's own orderings order every conflicting pair of its accesses.
    fn locally_ordered(&mut self, g: usize) -> bool {
        self.pass(g, false, |_, _| false)
    }

    /// Reports GPU g's races, with every ordering of the run.
    fn exact(&mut self, g: usize, problems: &mut Problems) {
        let program = self.program;
        self.pass(g, true, |(slot, first, first_did, second_did), me| {
            report_race(program, g, slot, first, me, first_did, second_did, problems);
            true
        });
    }

    /// Records GPU g's accesses in the order they ran, with vector clocks over its
    /// threadblocks carried along its own steps and dependencies only, or (`exact`) along
    /// every step of the run and its messages too. Hands `race` each conflicting pair the
    /// clocks leave unordered (and the later access); stops when it returns false.
    /// Returns whether the pass went through.
    fn pass(&mut self, g: usize, exact: bool, mut race: impl FnMut(Race, Epoch) -> bool) -> bool {
        let index = self.index();
        let width = index.tb_id[g].len();
        // Clock rows: one per threadblock of the run, or of the GPU; likewise for sources.
        let (rows, first_row) = if exact {
            (index.tbs.len(), 0)
        } else {
            (width, index.tb_id[g][0])
        };
        let (first_source, sources) = if exact {
            (0, self.source_base[self.program.gpus.len()])
        } else {
            (self.source_base[g], self.source_base[g + 1])
        };
        self.clocks.clear();
        self.clocks.resize(rows * width, 0);
        self.at_source.clear();
        self.at_source
            .resize((sources - first_source) as usize * width, 0);
        self.at_message.clear();
        if exact {
            self.at_message.resize(self.trace.messages.len() * width, 0);
        }
        self.histories.reset(self.program.gpus[g].scratch_chunks);
        let trace = self.trace;
        let steps: Box<dyn Iterator<Item = usize>> = if exact {
            Box::new(trace.order.iter().copied())
        } else {
            let own = &self.by_gpu[self.gpu_at[g]..self.gpu_at[g + 1]];
            Box::new(own.iter().map(|&gid| gid as usize))
        };
        for gid in steps {
            let (t, s) = index.locate(gid);
            let (h, tb) = index.tbs[t];
            let clock = (t - first_row) * width..(t - first_row + 1) * width;
            if let Some(src) = self.trace.released_by[gid] {
                let at = (self.source[src] - first_source) as usize * width;
                join(
                    &mut self.clocks[clock.clone()],
                    &self.at_source[at..at + width],
                );
            }
            if let Some(m) = self.trace.received[gid].filter(|_| exact) {
                let at = m * width;
                join(
                    &mut self.clocks[clock.clone()],
                    &self.at_message[at..at + width],
                );
            }
            if h == g {
                let me: Epoch = (tb as u32, s as u32);
                let now = &self.clocks[clock.clone()];
                let mut going = true;
                self.histories.record(
                    self.accesses.reads(gid),
                    self.accesses.writes(gid),
                    me,
                    |e| now[e.0 as usize] > e.1,
                    |pair| going &= race(pair, me),
                );
                if !going {
                    return false;
                }
                self.clocks[clock.start + tb] = s as u32 + 1;
            }
            if let Some(m) = self.trace.sent[gid].filter(|_| exact) {
                let at = m * width;
                self.at_message[at..at + width].copy_from_slice(&self.clocks[clock.clone()]);
            }
            let source = self.source[gid];
            if source != NO_SOURCE {
                let at = (source - first_source) as usize * width;
                self.at_source[at..at + width].copy_from_slice(&self.clocks[clock]);
            }
        }
        true
    }
}

fn join(clock: &mut [u32], other: &[u32]) {
    for (a, b) in clock.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

#[allow(clippy::too_many_arguments)]
fn report_race(
    program: &Program,
    g: usize,
    slot: Slot,
    first: Epoch,
    second: Epoch,
    first_did: &str,
    second_did: &str,
    problems: &mut Problems,
) {
    problems.add(
        ProblemKind::Race,
        format!(
            "GPU {g} {}[{}] is {first_did} by {} and {second_did} by {} with nothing ordering them",
            slot.buf.code(),
            slot.index,
            step_name(program, g, first.0 as usize, first.1 as usize),
            step_name(program, g, second.0 as usize, second.1 as usize)
        ),
    );
}
