//! The loader rules of a [`Target`]: what the real loaders' host code refuses in a file
//! (`../shared/reference/msccl-xml.md`, checked against the loaders' source), each break
//! with the element that breaks it.
//!
//! Separate from correctness: a file can load and compute the wrong thing (that is
//! `super::verify`'s part), or compute the right thing and be refused, and a refused file
//! in `MSCCL_ALGO_DIR` fails the whole job. Numeric limits come from [`limits::check`]; the
//! rules here add the loaders' dialects (required attributes, collective names), the
//! older fork's extra checks, and what makes connections impossible to form.

use super::limits::{self, LimitKind};
use super::{Buf, Instr, Profile, Program, Target, Threadblock};
use crate::collective::CollectiveKind;
use serde::{Serialize, Serializer};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;

/// A rule of a loader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// One of the loader's numeric limits.
    Limit(LimitKind),
    /// The file lacks an `<algo>` attribute the loader requires (the parser inferred it).
    RequiredAttribute,
    /// `coll` names no collective the loader knows.
    CollectiveName,
    /// The older fork refuses `minBytes` above `maxBytes`.
    ByteRange,
    /// The older fork refuses `i_chunks`/`o_chunks` that disagree with `nchunksperloop`.
    ChunkCounts,
    /// The older fork refuses an `nthreads` that is not a multiple of 32.
    Threads,
    /// An attribute longer than the loader parser's 255-byte buffers.
    AttributeLength,
    /// A threadblock peer that is its own GPU or no GPU of the algorithm.
    Peer,
    /// A step sends (receives) in a threadblock without a send (recv) peer.
    PeerlessTransfer,
    /// Two threadblocks of a GPU send to (or receive from) one peer on one channel: the
    /// executor gives them one connection, so their messages interleave.
    SharedConnection,
    /// Nops carrying dependencies before a step that carries none.
    DependencyChain,
    /// An offset outside the chunks its GPU declares for that buffer.
    DeclaredOffset,
    /// Text the loaders' small parser refuses: an XML declaration or other processing
    /// instruction, a byte order mark, single-quoted values, separators other than
    /// spaces inside a tag (found by the XML reader, `Program::syntax_breaks`).
    XmlSyntax,
    /// More than the 16 attributes the loaders' parser keeps on one element.
    AttributeCount,
}

impl Rule {
    /// The rule's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Limit(kind) => kind.name(),
            Rule::RequiredAttribute => "required_attribute",
            Rule::CollectiveName => "collective_name",
            Rule::ByteRange => "byte_range",
            Rule::ChunkCounts => "chunk_counts",
            Rule::Threads => "nthreads",
            Rule::AttributeLength => "attribute_length",
            Rule::Peer => "peer",
            Rule::PeerlessTransfer => "peerless_transfer",
            Rule::SharedConnection => "shared_connection",
            Rule::DependencyChain => "dependency_chain",
            Rule::DeclaredOffset => "declared_offset",
            Rule::XmlSyntax => "xml_syntax",
            Rule::AttributeCount => "attribute_count",
        }
    }

    /// Whether a program breaking it cannot be executed at all (not even symbolically):
    /// its connections cannot be formed.
    pub fn blocks_execution(self) -> bool {
        matches!(
            self,
            Rule::Peer | Rule::PeerlessTransfer | Rule::SharedConnection
        )
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Where in a file a rule is broken: `<algo>`, a GPU, a threadblock or a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Element {
    pub gpu: Option<usize>,
    pub tb: Option<usize>,
    pub step: Option<usize>,
}

impl Element {
    /// The `<algo>` element.
    pub const ALGO: Element = Element {
        gpu: None,
        tb: None,
        step: None,
    };

    pub fn gpu(gpu: usize) -> Element {
        Element {
            gpu: Some(gpu),
            ..Element::ALGO
        }
    }

    pub fn tb(gpu: usize, tb: usize) -> Element {
        Element {
            tb: Some(tb),
            ..Element::gpu(gpu)
        }
    }

    pub fn step(gpu: usize, tb: usize, step: usize) -> Element {
        Element {
            step: Some(step),
            ..Element::tb(gpu, tb)
        }
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(g) = self.gpu else {
            return f.write_str("<algo>");
        };
        write!(f, "GPU {g}")?;
        if let Some(t) = self.tb {
            write!(f, " tb {t}")?;
        }
        if let Some(s) = self.step {
            write!(f, " step {s}")?;
        }
        Ok(())
    }
}

/// One rule a file breaks, with the first element that breaks it on its GPU (the message
/// counts the others).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleBreak {
    pub rule: Rule,
    pub element: Element,
    pub message: String,
}

impl fmt::Display for RuleBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule.name(), self.message)
    }
}

/// Every rule of `target`'s loader that `program` breaks, by element (`<algo>` first),
/// at most one break per rule and GPU (the first element; its message counts the rest).
pub fn check(program: &Program, target: &Target) -> Vec<RuleBreak> {
    let mut breaks = Breaks::default();
    let known = known_collectives(target);
    for b in &program.syntax_breaks {
        breaks.add(b.rule, b.element, b.message.clone());
    }
    attributes(program, target, &known, &mut breaks);
    for v in limits::check(program, &target.limits) {
        breaks.add(Rule::Limit(v.kind), v.element, v.message);
    }
    connections(program, &mut breaks);
    for (g, gpu) in program.gpus.iter().enumerate() {
        // The older fork checks chunk counts once it knows the collective.
        if target.profile == Profile::MscclLegacy && known.contains(&program.collective.as_str()) {
            chunk_counts(program, g, &mut breaks);
        }
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            dependency_chain(program, g, t, tb, &mut breaks);
            declared_offsets(program, g, t, tb, &mut breaks);
        }
    }
    breaks.finish()
}

/// The breaks that leave a program's connections impossible to form, so that it cannot be
/// executed (rules for which [`Rule::blocks_execution`] holds).
pub(crate) fn execution_breaks(program: &Program) -> Vec<RuleBreak> {
    let mut breaks = Breaks::default();
    connections(program, &mut breaks);
    breaks.finish()
}

/// Collects breaks, keeping the first per rule and GPU and counting the rest (`<algo>`'s
/// are all kept: each names a different attribute or figure).
#[derive(Default)]
struct Breaks {
    list: Vec<RuleBreak>,
    /// Per (rule, GPU): the index of its first break in `list`, and how many more.
    seen: HashMap<(Rule, usize), (usize, usize)>,
}

impl Breaks {
    fn add(&mut self, rule: Rule, element: Element, message: String) {
        if let Some(g) = element.gpu {
            match self.seen.entry((rule, g)) {
                Entry::Occupied(mut e) => {
                    e.get_mut().1 += 1;
                    return;
                }
                Entry::Vacant(e) => {
                    e.insert((self.list.len(), 0));
                }
            }
        }
        self.list.push(RuleBreak {
            rule,
            element,
            message,
        });
    }

    fn finish(mut self) -> Vec<RuleBreak> {
        for (&(_, g), &(i, more)) in &self.seen {
            if more > 0 {
                self.list[i].message += &format!(" (and {more} more on GPU {g})");
            }
        }
        self.list.sort_by_key(|b| b.element);
        self.list
    }
}

/// The loaders' parsers keep attribute names below 255 bytes and values within 255 bytes
/// (`MAX_STR_LEN`; a longer value overruns the executor's buffer).
const MAX_ATTRIBUTE_BYTES: usize = 255;

/// The older fork's threadblocks run whole warps.
const WARP_SIZE: i64 = 32;

/// The `<algo>` attributes a loader requires that a file may lack (the parser infers
/// them): the executor reads `outofplace`, `minBytes` and `maxBytes` as required; the
/// older fork reads only `inplace` and makes the range optional, but requires `name`.
fn required_attributes(target: &Target) -> &'static [&'static str] {
    if target.requires_placement_and_range() {
        &["outofplace", "minBytes", "maxBytes"]
    } else {
        &["name"]
    }
}

/// The `coll` names the loader knows: ours as it spells them, and the ones it has that
/// we do not synthesize.
fn known_collectives(target: &Target) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = CollectiveKind::ALL
        .into_iter()
        .filter_map(|k| target.coll_name(k))
        .collect();
    names.extend(match target.profile {
        Profile::MscclLegacy => &["custom"][..],
        Profile::Executor | Profile::Executor256 => &["send", "recv", "alltoallv"][..],
    });
    names
}

/// Rules on `<algo>` and on attribute text.
fn attributes(program: &Program, target: &Target, known: &[&str], out: &mut Breaks) {
    let profile = target.profile;
    let required = required_attributes(target);
    for inferred in &program.inferred {
        if required.contains(&inferred.attribute) {
            out.add(
                Rule::RequiredAttribute,
                Element::ALGO,
                format!(
                    "<algo> has no {} attribute, which the {profile} loader requires (read here as {}=\"{}\")",
                    inferred.attribute, inferred.attribute, inferred.value
                ),
            );
        }
    }
    if !known.contains(&program.collective.as_str()) {
        let spelling = program
            .collective_kind()
            .and_then(|k| target.coll_name(k))
            .map_or(String::new(), |n| format!("; it spells it \"{n}\""));
        out.add(
            Rule::CollectiveName,
            Element::ALGO,
            format!(
                "coll \"{}\" is not a collective the {profile} loader knows (it knows {}){spelling}",
                program.collective,
                known.join(", ")
            ),
        );
    }
    if profile == Profile::MscclLegacy {
        let range = (program.min_bytes.unwrap_or(0), program.max_bytes);
        if let (min, Some(max)) = range {
            if min > max {
                out.add(
                    Rule::ByteRange,
                    Element::ALGO,
                    format!(
                        "minBytes {min} is above maxBytes {max}; the {profile} loader refuses that"
                    ),
                );
            }
        }
        let threads = program.extra.iter().find(|(k, _)| k == "nthreads");
        if let Some((_, v)) = threads.filter(|(_, v)| leading_int(v) % WARP_SIZE != 0) {
            out.add(
                Rule::Threads,
                Element::ALGO,
                format!("nthreads \"{v}\" is not a multiple of {WARP_SIZE}; the {profile} loader refuses it"),
            );
        }
    }
    attribute_lengths(program, out);
}

/// Attribute names and values the loaders' parsers cannot hold.
fn attribute_lengths(program: &Program, out: &mut Breaks) {
    let with = |e: Element, extra: &'_ [(String, String)]| {
        extra
            .iter()
            .map(move |(k, v)| (e, k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let mut attrs = vec![(Element::ALGO, "name".to_string(), program.name.clone())];
    attrs.extend(with(Element::ALGO, &program.extra));
    for (g, gpu) in program.gpus.iter().enumerate() {
        attrs.extend(with(Element::gpu(g), &gpu.extra));
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            attrs.extend(with(Element::tb(g, t), &tb.extra));
            for (s, step) in tb.steps.iter().enumerate() {
                attrs.extend(with(Element::step(g, t, s), &step.extra));
            }
        }
    }
    for (element, key, value) in attrs {
        let len = quick_xml::escape::escape(value.as_str()).len();
        if key.len() >= MAX_ATTRIBUTE_BYTES || len > MAX_ATTRIBUTE_BYTES {
            out.add(
                Rule::AttributeLength,
                element,
                format!(
                    "{element}: attribute '{}' ({} bytes) has a value of {len} bytes; the loader's parser takes names below {MAX_ATTRIBUTE_BYTES} bytes and values up to {MAX_ATTRIBUTE_BYTES}",
                    key.chars().take(40).collect::<String>(),
                    key.len()
                ),
            );
        }
    }
}

/// The number `strtol` reads from the start of `s` (0 when there is none).
fn leading_int(s: &str) -> i64 {
    let s = s.trim_start();
    let sign = usize::from(s.starts_with(['-', '+']));
    let digits = s[sign..].bytes().take_while(u8::is_ascii_digit).count();
    s[..sign + digits].parse().unwrap_or(0)
}

/// Peers, steps that need a peer, and one threadblock per connection.
fn connections(program: &Program, out: &mut Breaks) {
    let n = program.gpus.len();
    for (g, gpu) in program.gpus.iter().enumerate() {
        let mut used: HashMap<(bool, usize, usize), usize> = HashMap::new();
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            for (sending, peer) in [(true, tb.send), (false, tb.recv)] {
                let Some(p) = peer else { continue };
                let role = if sending { "send" } else { "recv" };
                if p >= n || p == g {
                    out.add(
                        Rule::Peer,
                        Element::tb(g, t),
                        format!(
                            "GPU {g} tb {t}: {role} peer {p} must be another GPU of 0..{}",
                            n - 1
                        ),
                    );
                } else if let Some(other) = used.insert((sending, p, tb.channel), t) {
                    out.add(
                        Rule::SharedConnection,
                        Element::tb(g, t),
                        format!(
                            "GPU {g} tbs {other} and {t} both {role} {} GPU {p} on channel {}: a connection belongs to one threadblock",
                            if sending { "to" } else { "from" },
                            tb.channel
                        ),
                    );
                }
            }
            for (s, step) in tb.steps.iter().enumerate() {
                let missing = [
                    (step.instr.sends() && tb.send.is_none(), "sends", "send"),
                    (
                        step.instr.receives() && tb.recv.is_none(),
                        "receives",
                        "recv",
                    ),
                ];
                for (_, does, role) in missing.into_iter().filter(|m| m.0) {
                    out.add(
                        Rule::PeerlessTransfer,
                        Element::step(g, t, s),
                        format!(
                            "GPU {g} tb {t} step {s} ({}) {does} but the threadblock has no {role} peer",
                            step.instr.code()
                        ),
                    );
                }
            }
        }
    }
}

/// Local reductions the loaders fuse into one transfer (`MSCCL_MAX_REDUCE_FUSION`).
const MAX_REDUCE_FUSION: usize = 16;

/// The loaders attach the dependencies of the nops before a step to that step, and refuse
/// the chain when the step itself carries none. A `re` continuing the previous one (same
/// buffers and destination, no dependency) joins its transfer and is not checked.
fn dependency_chain(program: &Program, g: usize, t: usize, tb: &Threadblock, out: &mut Breaks) {
    let mut pending = false;
    let mut fusing: Option<(Buf, i64, Buf)> = None;
    let mut reductions = 0;
    for (s, step) in tb.steps.iter().enumerate() {
        let has = step.dep.is_some();
        if step.instr == Instr::Nop {
            pending |= has;
            continue;
        }
        let continues = step.instr == Instr::Reduce
            && !has
            && fusing == Some((step.dst_buf, step.dst_off, step.src_buf));
        if !continues {
            if pending && !has {
                out.add(
                    Rule::DependencyChain,
                    Element::step(g, t, s),
                    format!(
                        "{} follows nops carrying dependencies but has none itself; the loader refuses such a chain",
                        super::step_name(program, g, t, s)
                    ),
                );
            }
            pending = false;
        }
        fusing = None;
        if step.instr == Instr::Reduce {
            reductions += 1;
            if !step.has_dep && reductions != MAX_REDUCE_FUSION {
                fusing = Some((step.dst_buf, step.dst_off, step.src_buf));
            }
        }
    }
}

/// The loaders check an operand's offset against the chunks its GPU declares (-1 allowed),
/// for the operands they check: `rrc`'s neither.
fn declared_offsets(program: &Program, g: usize, t: usize, tb: &Threadblock, out: &mut Breaks) {
    let gpu = &program.gpus[g];
    for (s, step) in tb.steps.iter().enumerate() {
        let checked = step.instr != Instr::RecvReduceCopy;
        let operands = [
            (step.instr.reads_src(), "src", step.src_buf, step.src_off),
            (step.instr.writes_dst(), "dst", step.dst_buf, step.dst_off),
        ];
        for (_, which, buf, off) in operands.into_iter().filter(|o| o.0 && checked) {
            let (declared, attribute) = match buf {
                Buf::Input => (gpu.input_chunks, "i_chunks"),
                Buf::Output => (gpu.output_chunks, "o_chunks"),
                Buf::Scratch => (gpu.scratch_chunks, "s_chunks"),
            };
            if off < -1 || off >= declared as i64 {
                out.add(
                    Rule::DeclaredOffset,
                    Element::step(g, t, s),
                    format!(
                        "{} {which} offset {}[{off}] is outside the {declared} chunks GPU {g} declares ({attribute}); the loader refuses it",
                        super::step_name(program, g, t, s),
                        buf.code()
                    ),
                );
            }
        }
    }
}

/// The older fork requires a nonzero `i_chunks` (times the GPUs, for All-Gather) and
/// `o_chunks` (times the GPUs, for Reduce-Scatter) to equal `nchunksperloop`.
fn chunk_counts(program: &Program, g: usize, out: &mut Breaks) {
    let gpu = &program.gpus[g];
    let n = program.gpus.len();
    let (in_mult, out_mult) = match program.collective.as_str() {
        "allgather" => (n, 1),
        "reduce_scatter" => (1, n),
        _ => (1, 1),
    };
    let chunks = program.nchunksperloop;
    let wrong = |declared: usize, mult: usize| declared > 0 && declared * mult != chunks;
    if wrong(gpu.input_chunks, in_mult) || wrong(gpu.output_chunks, out_mult) {
        let takes = |mult: usize| {
            if chunks % mult == 0 {
                format!("0 or {}", chunks / mult)
            } else {
                format!("0 (nchunksperloop {chunks} is not a multiple of {mult})")
            }
        };
        out.add(
            Rule::ChunkCounts,
            Element::gpu(g),
            format!(
                "GPU {g} declares i_chunks {} and o_chunks {}; msccl-legacy takes i_chunks {} and o_chunks {} for {} with nchunksperloop {chunks}",
                gpu.input_chunks,
                gpu.output_chunks,
                takes(in_mult),
                takes(out_mult),
                program.collective
            ),
        );
    }
}
