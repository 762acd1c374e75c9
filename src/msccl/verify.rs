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

use super::exec::{self, Trace};
use super::layout::{Layout, Slot};
use super::limits::{self, Limits};
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
    pub limits: Limits,
}

/// Kinds of problems, from the shape of the program to its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// The program cannot be executed as written (missing peers, shared connections...).
    Structure,
    /// An executor limit is exceeded.
    Limit,
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
            ProblemKind::Limit => "limit",
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
}

impl VerifyReport {
    /// Whether the program is correct: no problem at all.
    pub fn is_correct(&self) -> bool {
        self.problems.is_empty() && self.unlisted == 0
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
    };
    let structure = exec::structure_problems(program);
    for p in &structure {
        problems.add(ProblemKind::Structure, p.clone());
    }
    static_checks(program, kind, options, &mut problems);
    if structure.is_empty() {
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

fn static_checks(
    program: &Program,
    kind: Option<CollectiveKind>,
    options: &VerifyOptions,
    problems: &mut Problems,
) {
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
    for v in limits::check(program, &options.limits) {
        problems.add(ProblemKind::Limit, v.message);
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
            let mut pending_nops = false;
            for (s, step) in tb.steps.iter().enumerate() {
                if step.instr == Instr::Nop {
                    pending_nops |= step.dep.is_some();
                    continue;
                }
                if pending_nops && step.dep.is_none() {
                    problems.add(
                        ProblemKind::Structure,
                        format!(
                            "{} follows nops carrying dependencies but has none itself; the executor rejects such a chain",
                            step_name(program, g, t, s)
                        ),
                    );
                }
                pending_nops = false;
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
    let root = match (kind.has_root(), options.root) {
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
        find_races(program, trace, &accesses, problems);
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
/// whose offsets leave their buffers are reported and get no accesses.
struct Accesses {
    reads: Vec<Vec<Slot>>,
    writes: Vec<Vec<Slot>>,
}

impl Accesses {
    fn new(program: &Program, layout: &Layout, trace: &Trace, problems: &mut Problems) -> Self {
        let n = trace.index.steps();
        let mut reads = vec![Vec::new(); n];
        let mut writes = vec![Vec::new(); n];
        for (t, &(g, tb)) in trace.index.tbs.iter().enumerate() {
            let gpu = &program.gpus[g];
            for (s, step) in gpu.threadblocks[tb].steps.iter().enumerate() {
                let gid = trace.index.first_step[t] + s;
                let mut slots = |on: bool, buf: Buf, off: i64, what: &str| -> Vec<Slot> {
                    if !on {
                        return Vec::new();
                    }
                    let declared = match buf {
                        Buf::Input => gpu.input_chunks,
                        Buf::Output => gpu.output_chunks,
                        Buf::Scratch => gpu.scratch_chunks,
                    };
                    let mut out = Vec::new();
                    for i in 0..step.count as i64 {
                        let o = off + i;
                        let slot = layout
                            .resolve(g, buf, o)
                            .filter(|sl| sl.buf != Buf::Scratch || sl.index < declared);
                        match slot {
                            Some(sl) if o < declared as i64 => out.push(sl),
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
                                return Vec::new();
                            }
                        }
                    }
                    out
                };
                reads[gid] = slots(step.instr.reads_src(), step.src_buf, step.src_off, "reads");
                writes[gid] = slots(
                    step.instr.writes_dst(),
                    step.dst_buf,
                    step.dst_off,
                    "writes",
                );
            }
        }
        Accesses { reads, writes }
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
    /// Per message: what it carries.
    carried: Vec<Vec<Val>>,
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
        Replay {
            program,
            layout,
            trace,
            accesses,
            problems,
            mem,
            sets,
            carried: vec![Vec::new(); trace.messages.len()],
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
        let reads = &self.accesses.reads[gid];
        let writes = &self.accesses.writes[gid];
        let src: Vec<Val> = (0..n)
            .map(|i| match reads.get(i) {
                Some(&slot) => self.read(gid, g, slot),
                None => Val::Poison,
            })
            .collect();
        let incoming: Vec<Val> = match self.trace.received[gid] {
            Some(m) => {
                let mut v = std::mem::take(&mut self.carried[m]);
                v.resize(n, Val::Poison);
                v
            }
            None => Vec::new(),
        };
        let old_dst: Vec<Val> = if step.instr == Instr::Reduce {
            (0..n)
                .map(|i| match writes.get(i) {
                    Some(&slot) => self.read(gid, g, slot),
                    None => Val::Poison,
                })
                .collect()
        } else {
            Vec::new()
        };
        let result: Vec<Val> = (0..n)
            .map(|i| match step.instr {
                Instr::Send | Instr::Copy => src[i],
                Instr::Recv | Instr::RecvCopySend => incoming[i],
                Instr::RecvReduceSend | Instr::RecvReduceCopy | Instr::RecvReduceCopySend => {
                    self.add(gid, incoming[i], src[i])
                }
                Instr::Reduce => self.add(gid, old_dst[i], src[i]),
                Instr::Nop => Val::Poison,
            })
            .collect();
        for (i, &slot) in writes.iter().enumerate() {
            self.mem[g][buf_index(slot.buf)][slot.index] = result[i];
        }
        if let Some(m) = self.trace.sent[gid] {
            self.carried[m] = result;
        }
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

#[derive(Default)]
struct SlotHistory {
    last_write: Option<Epoch>,
    /// Reads since the last write, the latest per threadblock.
    reads: Vec<Epoch>,
}

/// Finds unordered conflicting accesses, one GPU at a time: vector clocks over that GPU's
/// threadblocks are carried through every step of the run, since orderings can pass
/// through other GPUs by messages.
fn find_races(program: &Program, trace: &Trace, accesses: &Accesses, problems: &mut Problems) {
    let index = &trace.index;
    let mut is_source = vec![false; index.steps()];
    for src in trace.released_by.iter().flatten() {
        is_source[*src] = true;
    }
    for g in 0..program.gpus.len() {
        let width = index.tb_id[g].len();
        if width == 0 {
            continue;
        }
        let mut clocks = vec![vec![0u32; width]; index.tbs.len()];
        let mut at_message: Vec<Option<Vec<u32>>> = vec![None; trace.messages.len()];
        let mut at_signal: HashMap<usize, Vec<u32>> = HashMap::new();
        let mut history: HashMap<Slot, SlotHistory> = HashMap::new();
        for &gid in &trace.order {
            let (t, s) = index.locate(gid);
            let (h, tb) = index.tbs[t];
            if let Some(src) = trace.released_by[gid] {
                if let Some(snap) = at_signal.get(&src) {
                    join(&mut clocks[t], snap);
                }
            }
            if let Some(m) = trace.received[gid] {
                if let Some(snap) = &at_message[m] {
                    let snap = snap.clone();
                    join(&mut clocks[t], &snap);
                }
            }
            if h == g {
                let me: Epoch = (tb as u32, s as u32);
                let clock = &clocks[t];
                let before = |e: &Epoch| clock[e.0 as usize] > e.1;
                for &slot in &accesses.reads[gid] {
                    let hist = history.entry(slot).or_default();
                    if let Some(w) = hist.last_write.filter(|w| !before(w)) {
                        report_race(program, g, slot, w, me, "written", "read", problems);
                    }
                    hist.reads.retain(|r| r.0 != me.0);
                    hist.reads.push(me);
                }
                for &slot in &accesses.writes[gid] {
                    let hist = history.entry(slot).or_default();
                    if let Some(w) = hist.last_write.filter(|w| !before(w) && w.0 != me.0) {
                        report_race(program, g, slot, w, me, "written", "written", problems);
                    }
                    if let Some(&r) = hist.reads.iter().find(|r| r.0 != me.0 && !before(r)) {
                        report_race(program, g, slot, r, me, "read", "written", problems);
                    }
                    hist.last_write = Some(me);
                    hist.reads.clear();
                }
                clocks[t][tb] = s as u32 + 1;
            }
            if let Some(m) = trace.sent[gid] {
                at_message[m] = Some(clocks[t].clone());
            }
            if is_source[gid] {
                at_signal.insert(gid, clocks[t].clone());
            }
        }
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
