//! MSCCL algorithm XML: writing and parsing.
//!
//! The writer emits what the executor's own small parser reads: no XML declaration,
//! double-quoted attributes separated by single spaces, space indentation, `<step .../>`,
//! and every `<algo>` attribute any loader requires.
//! It formats directly into one string (quick-xml escapes the free-text values): a 64-GPU
//! program has over a hundred thousand steps.
//! The parser (over `crate::xmltree`) accepts what msccl-tools and the executor's users
//! write: unknown attributes are kept (and written back), unknown elements and comments are
//! skipped, and a missing `outofplace` (read as `1 - inplace`), `minBytes`, `maxBytes` (the
//! whole range) or `name` is inferred and recorded in [`Program::inferred`]. Every error
//! names the file, line and column, the element and what was wrong.
//!
//! Numbers are held to what the executor stores (a C `int`; `minBytes` and `maxBytes` an
//! `int64_t`), and `ngpus` to the `<gpu>` elements the file holds, so no count in a file
//! makes the reader (or the verifier, the executor model or the timing after it) allocate
//! more than the file's size warrants. What the loaders' own small parser refuses in the
//! text (an XML declaration, single quotes, more than 16 attributes on an element, a value
//! over 255 bytes) is kept in [`Program::syntax_breaks`] for [`super::rules`].

use super::rules::{self, Rule, RuleBreak};
use super::WHOLE_RANGE_MAX_BYTES;
use super::{Buf, Dep, ExtraAttrs, Gpu, Inferred, Instr, Program, Proto, Step, Threadblock};
use crate::error::{Error, Result};
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

/// The program as XML text.
pub fn write_program(program: &Program) -> String {
    // Steps take about 120 bytes each.
    let mut w = XmlWriter(String::with_capacity(256 + program.steps() * 128));
    w.open(0, "algo");
    w.attr("name", &program.name);
    w.plain("proto", program.proto.name());
    w.num("nchannels", program.nchannels);
    w.num("nchunksperloop", program.nchunksperloop);
    w.num("ngpus", program.gpus.len());
    w.attr("coll", &program.collective);
    if let Some(root) = program.root {
        w.num("root", root);
    }
    w.flag("inplace", program.inplace);
    w.flag("outofplace", program.outofplace);
    w.num("minBytes", program.min_bytes.unwrap_or(0));
    w.num(
        "maxBytes",
        program.max_bytes.unwrap_or(WHOLE_RANGE_MAX_BYTES),
    );
    w.close_start(&program.extra, false);
    for (id, gpu) in program.gpus.iter().enumerate() {
        w.open(1, "gpu");
        w.num("id", id);
        w.num("i_chunks", gpu.input_chunks);
        w.num("o_chunks", gpu.output_chunks);
        w.num("s_chunks", gpu.scratch_chunks);
        w.close_start(&gpu.extra, false);
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            w.open(2, "tb");
            w.num("id", t);
            w.peer("send", tb.send);
            w.peer("recv", tb.recv);
            w.num("chan", tb.channel);
            w.close_start(&tb.extra, false);
            for (s, step) in tb.steps.iter().enumerate() {
                let (depid, deps) = step.dep.map_or((-1, -1), |d| (d.tb as i64, d.step as i64));
                w.open(3, "step");
                w.num("s", s);
                w.plain("type", step.instr.code());
                w.plain("srcbuf", step.src_buf.code());
                w.num("srcoff", step.src_off);
                w.plain("dstbuf", step.dst_buf.code());
                w.num("dstoff", step.dst_off);
                w.num("cnt", step.count);
                w.num("depid", depid);
                w.num("deps", deps);
                w.flag("hasdep", step.has_dep);
                w.close_start(&step.extra, true);
            }
            w.end(2, "tb");
        }
        w.end(1, "gpu");
    }
    w.end(0, "algo");
    w.0.push('\n');
    w.0
}

/// The writer's layout, as the executor's small parser reads it: one element per line,
/// indented two spaces a level, attributes double-quoted and escaped, `<step .../>`.
struct XmlWriter(String);

impl XmlWriter {
    /// Starts `<name` on a line of its own (none before the root).
    fn open(&mut self, depth: usize, name: &str) {
        if depth > 0 {
            self.0.push('\n');
        }
        self.indent(depth);
        self.0.push('<');
        self.0.push_str(name);
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth * 2 {
            self.0.push(' ');
        }
    }

    fn attr(&mut self, key: &str, value: &str) {
        self.0.push(' ');
        self.0.push_str(key);
        self.0.push_str("=\"");
        self.0.push_str(&quick_xml::escape::escape(value));
        self.0.push('"');
    }

    /// An attribute whose value needs no escaping: a number or a code of the format.
    fn plain(&mut self, key: &str, value: &str) {
        self.0.push(' ');
        self.0.push_str(key);
        self.0.push_str("=\"");
        self.0.push_str(value);
        self.0.push('"');
    }

    fn num(&mut self, key: &str, value: impl itoa::Integer) {
        self.plain(key, itoa::Buffer::new().format(value));
    }

    fn flag(&mut self, key: &str, on: bool) {
        self.plain(key, if on { "1" } else { "0" });
    }

    fn peer(&mut self, key: &str, peer: Option<usize>) {
        match peer {
            Some(p) => self.num(key, p),
            None => self.plain(key, "-1"),
        }
    }

    /// Writes the attributes the model does not know and ends the start tag (`/>` for
    /// an element without children).
    fn close_start(&mut self, extra: &ExtraAttrs, empty: bool) {
        for (k, v) in extra {
            self.attr(k, v);
        }
        self.0.push_str(if empty { "/>" } else { ">" });
    }

    /// `</name>` on a line of its own.
    fn end(&mut self, depth: usize, name: &str) {
        self.0.push('\n');
        self.indent(depth);
        self.0.push_str("</");
        self.0.push_str(name);
        self.0.push('>');
    }
}

/// The largest algorithm file read: 512 MiB. The largest the executor can load (1,024
/// ranks of 4,095 elements) takes about 460 MB as the writer lays it out; the reader holds
/// about ten times a file's size while it parses.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// Reads and parses an XML file.
pub fn read_program(path: &Path) -> Result<Program> {
    let text = crate::fsio::read_text(path, "an MSCCL algorithm file", MAX_FILE_BYTES)?;
    parse_program(&text, &path.display().to_string())
}

/// Parses MSCCL algorithm XML; `origin` names the text in errors.
pub fn parse_program(text: &str, origin: &str) -> Result<Program> {
    let document =
        xmltree::parse_document(text, origin, &Limits::default()).map_err(Error::Msccl)?;
    let root = &document.root;
    let at =
        |e: &Element, what: &str| Error::Msccl(format!("{origin}:{}:{}: {what}", e.line, e.column));
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
        Error::Msccl(format!("{origin}:{}:{}: {what}", e.line, e.column))
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

    /// Where the element is: file, line, column, the element and what holds it.
    fn place(&self) -> String {
        let e = self.element;
        format!(
            "{}:{}:{}: <{}{}>{}",
            self.origin,
            e.line,
            e.column,
            crate::error::echo(&e.name),
            self.id(),
            self.context
        )
    }

    fn fail(&self, what: &str) -> Error {
        Error::Msccl(format!("{}: {what}", self.place()))
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
            input: format!("{}: {key}", self.place()),
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
