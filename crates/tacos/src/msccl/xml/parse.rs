//! The parser: what msccl-tools and the executor's users write, read into a program, every
//! error naming the file, line and column.

use crate::error::{Error, FileFormat, FileProblem, Result};

use crate::msccl::rules::{self, Rule, RuleBreak};
use crate::msccl::WHOLE_RANGE_MAX_BYTES;
use crate::msccl::{Buf, Dep, ExtraAttrs, Gpu, Inferred, Instr, Program, Proto, Step, Threadblock};
use crate::xmltree::{self, Element, Limits};
use std::collections::HashMap;
use std::path::Path;

/// The largest count, offset or id a file may give: the executor reads them as C `int`.
pub const MAX_ATTRIBUTE_INT: i64 = i32::MAX as i64;

/// The `<algo>` attributes the model reads as numbers or codes (`rules` checks `name` and
/// the unknown ones from the model).
const ALGO_ATTRIBUTES: &[&str] = &[
    "proto",
    "nchannels",
    "nchunksperloop",
    "ngpus",
    "coll",
    "root",
    "inplace",
    "outofplace",
    "minBytes",
    "maxBytes",
];

/// The `<step>` attributes the model reads.
const STEP_ATTRIBUTES: &[&str] = &[
    "s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep",
];

/// Attributes the loaders' parser keeps per element (`MAX_ATTR_COUNT`); it ignores the rest.
const MAX_ATTRIBUTES: usize = 16;

/// The loaders' parser reads a value into a 255-byte buffer (`MAX_STR_LEN`).
const MAX_VALUE_BYTES: usize = 255;

/// The largest algorithm file read: 512 MiB. The largest the executor can load (1,024
/// ranks of 4,095 elements) takes about 460 MB as the writer lays it out; the reader holds
/// about ten times a file's size while it parses.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// Reads and parses an XML file.
pub fn read_program(path: &Path) -> Result<Program> {
    let text = crate::fsio::read_text(path, "an MSCCL algorithm file", MAX_FILE_BYTES)?;
    parse_program(&text, &path.display().to_string())
}

/// What an MSCCL file's problems are reported as.
const FORMAT: FileFormat = FileFormat::Msccl;

/// Parses MSCCL algorithm XML; `origin` names the text in errors.
pub fn parse_program(text: &str, origin: &str) -> Result<Program> {
    let document =
        xmltree::parse_document(text, origin, &Limits::default()).map_err(|p| p.of(FORMAT))?;
    let root = &document.root;
    let at = |e: &Element, what: &str| {
        FileProblem::new(origin, what)
            .at(e.line, e.column)
            .of(FORMAT)
    };
    if root.name != "algo" {
        return Err(at(
            root,
            &format!(
                "the root element is <{}>, not <algo>",
                crate::error::echo(&root.name)
            ),
        ));
    }
    let mut syntax = Syntax::new(origin, &document.notes);
    syntax.element(root, rules::Element::ALGO, ALGO_ATTRIBUTES);
    let mut a = Attrs::new(origin, root, String::new());
    let ngpus = a.usize("ngpus")?;
    let gpu_elements = root.children.iter().filter(|e| e.name == "gpu").count();
    if ngpus > gpu_elements {
        return Err(a.fail(&format!(
            "ngpus is {ngpus} but the file has {gpu_elements} <gpu> element(s)"
        )));
    }
    let proto = a.string("proto")?;
    let proto: Proto = proto
        .parse()
        .map_err(|e: Error| a.fail(&e.to_string().replace("msccl: ", "")))?;
    let mut inferred = Vec::new();
    let mut infer = |attribute: &'static str, value: String, reason: &'static str| {
        inferred.push(Inferred {
            attribute,
            value,
            reason,
        });
    };
    let name = a.optional("name").map(str::to_owned).unwrap_or_else(|| {
        infer("name", String::new(), "none given");
        String::new()
    });
    let collective = a.string("coll")?.to_owned();
    let root_rank = a.optional_usize("root")?;
    let nchannels = a.usize("nchannels")?;
    let nchunksperloop = a.usize("nchunksperloop")?;
    let inplace = a.flag("inplace")?;
    let outofplace = match a.optional_flag("outofplace")? {
        Some(v) => v,
        None => {
            infer("outofplace", u8::from(!inplace).to_string(), "1 - inplace");
            !inplace
        }
    };
    let whole_range = "the whole size range";
    let min_bytes = a.optional_u64("minBytes")?.unwrap_or_else(|| {
        infer("minBytes", "0".into(), whole_range);
        0
    });
    let max_bytes = a.optional_u64("maxBytes")?.unwrap_or_else(|| {
        infer("maxBytes", WHOLE_RANGE_MAX_BYTES.to_string(), whole_range);
        WHOLE_RANGE_MAX_BYTES
    });
    let mut program = Program {
        name,
        collective,
        root: root_rank,
        proto,
        nchannels,
        nchunksperloop,
        inplace,
        outofplace,
        min_bytes: Some(min_bytes),
        max_bytes: Some(max_bytes),
        gpus: Vec::new(),
        extra: a.rest(),
        inferred,
        syntax_breaks: Vec::new(),
    };
    let mut gpus: Vec<Option<(&Element, Gpu)>> = vec![None; ngpus];
    for e in root.children.iter().filter(|e| e.name == "gpu") {
        let (id, gpu) = parse_gpu(origin, e, ngpus, &mut syntax)?;
        if let Some((first, _)) = &gpus[id] {
            return Err(at(
                e,
                &format!(
                    "<gpu id=\"{id}\">: duplicate GPU id (first at {}:{})",
                    first.line, first.column
                ),
            ));
        }
        gpus[id] = Some((e, gpu));
    }
    if let Some(missing) = gpus.iter().position(|g| g.is_none()) {
        return Err(at(
            root,
            &format!("<algo>: ngpus is {ngpus} but there is no <gpu id=\"{missing}\">"),
        ));
    }
    program.gpus = gpus.into_iter().flatten().map(|(_, g)| g).collect();
    program.syntax_breaks = syntax.finish();
    Ok(program)
}

fn parse_gpu(origin: &str, e: &Element, ngpus: usize, syntax: &mut Syntax) -> Result<(usize, Gpu)> {
    let mut a = Attrs::new(origin, e, String::new());
    let id = a.usize("id")?;
    if id >= ngpus {
        return Err(a.fail(&format!("id {id} is out of range: ngpus is {ngpus}")));
    }
    syntax.element(
        e,
        rules::Element::gpu(id),
        &["id", "i_chunks", "o_chunks", "s_chunks"],
    );
    let mut gpu = Gpu {
        input_chunks: a.usize("i_chunks")?,
        output_chunks: a.usize("o_chunks")?,
        scratch_chunks: a.usize("s_chunks")?,
        threadblocks: Vec::new(),
        extra: a.rest(),
    };
    let mut tbs: Vec<(usize, &Element, Threadblock)> = Vec::new();
    for t in e.children.iter().filter(|t| t.name == "tb") {
        let (tid, tb) = parse_tb(origin, t, id, ngpus, syntax)?;
        tbs.push((tid, t, tb));
    }
    tbs.sort_by_key(|t| (t.0, t.1.line, t.1.column));
    let fail = |e: &Element, what: String| {
        FileProblem::new(origin, what)
            .at(e.line, e.column)
            .of(FORMAT)
    };
    if let Some(w) = tbs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(fail(
            w[1].1,
            format!(
                "<tb id=\"{}\"> on GPU {id}: duplicate threadblock id (first at {}:{})",
                w[1].0, w[0].1.line, w[0].1.column
            ),
        ));
    }
    if let Some(missing) = (0..tbs.len()).find(|&i| tbs[i].0 != i) {
        return Err(fail(
            e,
            format!(
                "<gpu id=\"{id}\">: threadblock {missing} is missing (ids must be 0..{} without gaps)",
                tbs.len() - 1
            ),
        ));
    }
    let lengths: Vec<usize> = tbs.iter().map(|t| t.2.steps.len()).collect();
    for (tid, t, tb) in &tbs {
        let step_elements = t.children.iter().filter(|s| s.name == "step");
        for ((s, step), se) in tb.steps.iter().enumerate().zip(step_elements) {
            let Some(dep) = step.dep else { continue };
            let what = match lengths.get(dep.tb) {
                None => format!(
                    "depid {} names no threadblock (GPU {id} has {})",
                    dep.tb,
                    lengths.len()
                ),
                Some(&len) if dep.step >= len => {
                    format!("deps {} names no step (tb {} has {len})", dep.step, dep.tb)
                }
                Some(_) => continue,
            };
            return Err(fail(
                se,
                format!("<step s=\"{s}\"> in GPU {id} tb {tid}: {what}"),
            ));
        }
    }
    gpu.threadblocks = tbs.into_iter().map(|t| t.2).collect();
    Ok((id, gpu))
}

fn parse_tb(
    origin: &str,
    e: &Element,
    gpu: usize,
    ngpus: usize,
    syntax: &mut Syntax,
) -> Result<(usize, Threadblock)> {
    let mut a = Attrs::new(origin, e, format!(" on GPU {gpu}"));
    let id = a.usize("id")?;
    syntax.element(
        e,
        rules::Element::tb(gpu, id),
        &["id", "send", "recv", "chan"],
    );
    let peer = |a: &mut Attrs, key: &str| -> Result<Option<usize>> {
        match a.int(key)? {
            -1 => Ok(None),
            p if p == gpu as i64 => {
                Err(a.fail(&format!("{key} peer {p} is the threadblock's own GPU")))
            }
            p if p >= 0 && (p as usize) < ngpus => Ok(Some(p as usize)),
            p => Err(a.fail(&format!(
                "{key} peer {p} is out of range: -1 or a GPU of 0..{}",
                ngpus - 1
            ))),
        }
    };
    let send = peer(&mut a, "send")?;
    let recv = peer(&mut a, "recv")?;
    let channel = a.usize("chan")?;
    let mut tb = Threadblock {
        send,
        recv,
        channel,
        steps: Vec::new(),
        extra: a.rest(),
    };
    for s in e.children.iter().filter(|s| s.name == "step") {
        let context = format!(" in GPU {gpu} tb {id}");
        syntax.element(
            s,
            rules::Element::step(gpu, id, tb.steps.len()),
            STEP_ATTRIBUTES,
        );
        tb.steps
            .push(parse_step(origin, s, context, tb.steps.len())?);
    }
    Ok((id, tb))
}

fn parse_step(origin: &str, e: &Element, context: String, index: usize) -> Result<Step> {
    let mut a = Attrs::new(origin, e, context);
    let s = a.int("s")?;
    if s != index as i64 {
        return Err(a.fail(&format!(
            "step number {s} is out of order: it is step {index} of its threadblock (steps are numbered 0, 1, ... in order)"
        )));
    }
    let code = a.string("type")?;
    let instr = Instr::from_code(code).ok_or_else(|| {
        a.fail(&format!(
            "unknown instruction type '{}' (known: {})",
            crate::error::echo(code),
            Instr::ALL.map(|i| i.code()).join(", ")
        ))
    })?;
    let src_buf = a.buf("srcbuf")?;
    let src_off = a.int("srcoff")?;
    let dst_buf = a.buf("dstbuf")?;
    let dst_off = a.int("dstoff")?;
    let count = a.usize("cnt")? as u32;
    let dep = match (a.int("depid")?, a.int("deps")?) {
        (-1, _) => None,
        (t, s) if t >= 0 && s >= 0 => Some(Dep {
            tb: t as usize,
            step: s as usize,
        }),
        (t, s) => {
            return Err(a.fail(&format!(
                "depid {t} with deps {s}: a dependency names a threadblock and a step (both 0 or more), or depid is -1"
            )))
        }
    };
    let has_dep = a.flag("hasdep")?;
    Ok(Step {
        instr,
        src_buf,
        src_off,
        dst_buf,
        dst_off,
        count,
        dep,
        has_dep,
        extra: a.rest(),
    })
}

/// The attributes of one element, taken one by one; what is left is kept as extra.
struct Attrs<'a> {
    origin: &'a str,
    element: &'a Element,
    attrs: Vec<(&'a str, &'a str)>,
    /// Where the element is, for messages (" in GPU 0 tb 3").
    context: String,
}

impl<'a> Attrs<'a> {
    fn new(origin: &'a str, element: &'a Element, context: String) -> Attrs<'a> {
        Attrs {
            origin,
            element,
            attrs: element.attrs().collect(),
            context,
        }
    }

    /// `what` placed where the element is: file, line, column, and as the field the
    /// element and what holds it.
    fn place(&self, what: &str) -> FileProblem {
        let e = self.element;
        let element = format!(
            "<{}{}>{}",
            crate::error::echo(&e.name),
            self.id(),
            self.context
        );
        FileProblem::new(self.origin, what)
            .at(e.line, e.column)
            .field(element)
    }

    fn fail(&self, what: &str) -> Error {
        self.place(what).of(FORMAT)
    }

    fn optional(&mut self, key: &str) -> Option<&'a str> {
        let i = self.attrs.iter().position(|&(k, _)| k == key)?;
        Some(self.attrs.remove(i).1)
    }

    fn string(&mut self, key: &str) -> Result<&'a str> {
        self.optional(key)
            .ok_or_else(|| self.fail(&format!("missing attribute '{key}'")))
    }

    /// A whole number the executor reads as a C `int`.
    fn int(&mut self, key: &str) -> Result<i64> {
        let v = self.string(key)?;
        let n: i64 = v.trim().parse().map_err(|_| {
            self.fail(&format!(
                "{key}=\"{}\" is not a whole number",
                crate::error::echo(v)
            ))
        })?;
        if n.unsigned_abs() > MAX_ATTRIBUTE_INT as u64 {
            return Err(self.invalid(
                key,
                v,
                format!("a whole number from -{MAX_ATTRIBUTE_INT} to {MAX_ATTRIBUTE_INT} (the executor reads it as a C int)"),
            ));
        }
        Ok(n)
    }

    fn usize(&mut self, key: &str) -> Result<usize> {
        let v = self.int(key)?;
        usize::try_from(v).map_err(|_| self.fail(&format!("{key} is {v}; it must be 0 or more")))
    }

    /// A value out of its range: names the file, line, column, element and attribute.
    fn invalid(&self, key: &str, value: &str, allowed: String) -> Error {
        Error::Invalid {
            input: self.place(key).to_string(),
            value: value.into(),
            allowed,
        }
    }

    /// The element's `id` or `s` attribute as the messages show it.
    fn id(&self) -> String {
        ["id", "s"]
            .iter()
            .find_map(|k| {
                self.element
                    .attr(k)
                    .map(|v| format!(" {k}=\"{}\"", crate::error::echo(v)))
            })
            .unwrap_or_default()
    }

    fn optional_usize(&mut self, key: &str) -> Result<Option<usize>> {
        match self.optional(key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                self.fail(&format!(
                    "{key}=\"{}\" is not a rank (a whole number, 0 or more)",
                    crate::error::echo(v)
                ))
            }),
        }
    }

    /// A byte count the executor reads as an `int64_t`.
    fn optional_u64(&mut self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.optional(key) else {
            return Ok(None);
        };
        match v.trim().parse::<u64>() {
            Ok(n) if n <= WHOLE_RANGE_MAX_BYTES => Ok(Some(n)),
            _ => Err(self.invalid(
                key,
                v,
                format!("a byte count, a whole number from 0 to {WHOLE_RANGE_MAX_BYTES} (the executor reads it as an int64_t)"),
            )),
        }
    }

    fn flag(&mut self, key: &str) -> Result<bool> {
        match self.optional_flag(key)? {
            Some(v) => Ok(v),
            None => Err(self.fail(&format!("missing attribute '{key}'"))),
        }
    }

    fn optional_flag(&mut self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.optional(key) else {
            return Ok(None);
        };
        match v.trim().parse::<i64>() {
            Ok(0) => Ok(Some(false)),
            Ok(1) => Ok(Some(true)),
            Ok(n) => Err(self.fail(&format!("{key} is {n}; it must be 0 or 1"))),
            Err(_) => Err(self.fail(&format!(
                "{key}=\"{}\" is not a whole number",
                crate::error::echo(v)
            ))),
        }
    }

    fn buf(&mut self, key: &str) -> Result<Buf> {
        let v = self.string(key)?;
        Buf::from_code(v).ok_or_else(|| {
            self.fail(&format!(
                "{key} is '{}'; it must be i, o or s",
                crate::error::echo(v)
            ))
        })
    }

    fn rest(self) -> ExtraAttrs {
        self.attrs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

/// The loader rules the text breaks where the model cannot show them, each with the
/// element it is in (`<algo>` for what is outside every element the model keeps).
struct Syntax<'a> {
    origin: &'a str,
    /// The reader's notes by the position of the element they are in.
    notes: HashMap<(usize, usize), Vec<&'a xmltree::Note>>,
    breaks: Vec<RuleBreak>,
}

impl<'a> Syntax<'a> {
    fn new(origin: &'a str, notes: &'a [xmltree::Note]) -> Syntax<'a> {
        let mut by_position: HashMap<(usize, usize), Vec<&xmltree::Note>> = HashMap::new();
        for n in notes {
            by_position.entry((n.line, n.column)).or_default().push(n);
        }
        Syntax {
            origin,
            notes: by_position,
            breaks: Vec::new(),
        }
    }

    fn add(
        &mut self,
        rule: Rule,
        element: rules::Element,
        line: usize,
        column: usize,
        what: String,
    ) {
        self.breaks.push(RuleBreak {
            rule,
            element,
            message: format!("{}:{line}:{column}: {what}", self.origin),
        });
    }

    /// Checks `e`, which the model reads as `at`: the notes on its tag, its attribute
    /// count, and the length of the values of `model_reads`, the attributes the model
    /// turns into numbers or codes (`rules` measures the others from the model).
    fn element(&mut self, e: &Element, at: rules::Element, model_reads: &[&str]) {
        for note in self.notes.remove(&(e.line, e.column)).unwrap_or_default() {
            self.add(
                Rule::XmlSyntax,
                at,
                e.line,
                e.column,
                format!("{at}: {}, which the loaders' parser refuses", note.what),
            );
        }
        if e.attrs().len() > MAX_ATTRIBUTES {
            let ignored: Vec<&str> = e.attrs().skip(MAX_ATTRIBUTES).map(|(k, _)| k).collect();
            self.add(
                Rule::AttributeCount,
                at,
                e.line,
                e.column,
                format!(
                    "{at}: {} attributes; the loaders' parser keeps the first {MAX_ATTRIBUTES} and ignores {}",
                    e.attrs().len(),
                    crate::error::echo(&ignored.join(", "))
                ),
            );
        }
        let long = e
            .attrs()
            .find(|(k, v)| v.len() > MAX_VALUE_BYTES && model_reads.contains(k));
        if let Some((k, v)) = long {
            self.add(
                Rule::AttributeLength,
                at,
                e.line,
                e.column,
                format!(
                    "{at}: attribute '{}' has a value of {} bytes; the loaders' parser takes values up to {MAX_VALUE_BYTES}",
                    crate::error::echo(k),
                    v.len()
                ),
            );
        }
    }

    /// The breaks found, with the notes outside the elements the model keeps (a
    /// declaration, a skipped element's tag) on `<algo>`.
    fn finish(mut self) -> Vec<RuleBreak> {
        let mut rest: Vec<&xmltree::Note> = self.notes.drain().flat_map(|(_, n)| n).collect();
        rest.sort_by_key(|n| (n.line, n.column));
        for note in rest {
            self.add(
                Rule::XmlSyntax,
                rules::Element::ALGO,
                note.line,
                note.column,
                format!("{}, which the loaders' parser refuses", note.what),
            );
        }
        self.breaks
    }
}
