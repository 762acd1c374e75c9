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

use super::WHOLE_RANGE_MAX_BYTES;
use super::{Buf, Dep, ExtraAttrs, Gpu, Inferred, Instr, Program, Proto, Step, Threadblock};
use crate::error::{Error, Result};
use crate::xmltree::{self, Element};
use std::path::Path;

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

/// Reads and parses an XML file.
pub fn read_program(path: &Path) -> Result<Program> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_program(&text, &path.display().to_string())
}

/// Parses MSCCL algorithm XML; `origin` names the text in errors.
pub fn parse_program(text: &str, origin: &str) -> Result<Program> {
    let root = xmltree::parse(text, origin).map_err(Error::Msccl)?;
    let at =
        |e: &Element, what: &str| Error::Msccl(format!("{origin}:{}:{}: {what}", e.line, e.column));
    if root.name != "algo" {
        return Err(at(
            &root,
            &format!("the root element is <{}>, not <algo>", root.name),
        ));
    }
    let mut a = Attrs::new(origin, &root, String::new());
    let ngpus = a.usize("ngpus")?;
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
    let name = a.optional("name").unwrap_or_else(|| {
        infer("name", String::new(), "none given");
        String::new()
    });
    let collective = a.string("coll")?;
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
    };
    let mut gpus: Vec<Option<(&Element, Gpu)>> = vec![None; ngpus];
    for e in root.children.iter().filter(|e| e.name == "gpu") {
        let (id, gpu) = parse_gpu(origin, e, ngpus)?;
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
            &root,
            &format!("<algo>: ngpus is {ngpus} but there is no <gpu id=\"{missing}\">"),
        ));
    }
    program.gpus = gpus.into_iter().flatten().map(|(_, g)| g).collect();
    Ok(program)
}

fn parse_gpu(origin: &str, e: &Element, ngpus: usize) -> Result<(usize, Gpu)> {
    let mut a = Attrs::new(origin, e, String::new());
    let id = a.usize("id")?;
    if id >= ngpus {
        return Err(a.fail(&format!("id {id} is out of range: ngpus is {ngpus}")));
    }
    let mut gpu = Gpu {
        input_chunks: a.usize("i_chunks")?,
        output_chunks: a.usize("o_chunks")?,
        scratch_chunks: a.usize("s_chunks")?,
        threadblocks: Vec::new(),
        extra: a.rest(),
    };
    let mut tbs: Vec<(usize, &Element, Threadblock)> = Vec::new();
    for t in e.children.iter().filter(|t| t.name == "tb") {
        let (tid, tb) = parse_tb(origin, t, id, ngpus)?;
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

fn parse_tb(origin: &str, e: &Element, gpu: usize, ngpus: usize) -> Result<(usize, Threadblock)> {
    let mut a = Attrs::new(origin, e, format!(" on GPU {gpu}"));
    let id = a.usize("id")?;
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
    let instr = Instr::from_code(&code).ok_or_else(|| {
        a.fail(&format!(
            "unknown instruction type '{code}' (known: {})",
            Instr::ALL.map(|i| i.code()).join(", ")
        ))
    })?;
    let src_buf = a.buf("srcbuf")?;
    let src_off = a.int("srcoff")?;
    let dst_buf = a.buf("dstbuf")?;
    let dst_off = a.int("dstoff")?;
    let count = a.int("cnt")?;
    let count = u32::try_from(count)
        .map_err(|_| a.fail(&format!("cnt {count} must be a whole number, 0 or more")))?;
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
    attrs: Vec<(String, String)>,
    /// Where the element is, for messages (" in GPU 0 tb 3").
    context: String,
}

impl<'a> Attrs<'a> {
    fn new(origin: &'a str, element: &'a Element, context: String) -> Attrs<'a> {
        Attrs {
            origin,
            element,
            attrs: element.attrs.clone(),
            context,
        }
    }

    fn fail(&self, what: &str) -> Error {
        let e = self.element;
        let id = ["id", "s"]
            .iter()
            .find_map(|k| e.attr(k).map(|v| format!(" {k}=\"{v}\"")))
            .unwrap_or_default();
        Error::Msccl(format!(
            "{}:{}:{}: <{}{id}>{}: {what}",
            self.origin, e.line, e.column, e.name, self.context
        ))
    }

    fn optional(&mut self, key: &str) -> Option<String> {
        let i = self.attrs.iter().position(|(k, _)| k == key)?;
        Some(self.attrs.remove(i).1)
    }

    fn string(&mut self, key: &str) -> Result<String> {
        self.optional(key)
            .ok_or_else(|| self.fail(&format!("missing attribute '{key}'")))
    }

    fn int(&mut self, key: &str) -> Result<i64> {
        let v = self.string(key)?;
        v.trim()
            .parse()
            .map_err(|_| self.fail(&format!("{key}=\"{v}\" is not a whole number")))
    }

    fn usize(&mut self, key: &str) -> Result<usize> {
        let v = self.int(key)?;
        usize::try_from(v).map_err(|_| self.fail(&format!("{key} is {v}; it must be 0 or more")))
    }

    fn optional_usize(&mut self, key: &str) -> Result<Option<usize>> {
        match self.optional(key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                self.fail(&format!(
                    "{key}=\"{v}\" is not a rank (a whole number, 0 or more)"
                ))
            }),
        }
    }

    fn optional_u64(&mut self, key: &str) -> Result<Option<u64>> {
        match self.optional(key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                self.fail(&format!(
                    "{key}=\"{v}\" is not a byte count (a whole number, 0 or more)"
                ))
            }),
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
            Err(_) => Err(self.fail(&format!("{key}=\"{v}\" is not a whole number"))),
        }
    }

    fn buf(&mut self, key: &str) -> Result<Buf> {
        let v = self.string(key)?;
        Buf::from_code(&v)
            .ok_or_else(|| self.fail(&format!("{key} is '{v}'; it must be i, o or s")))
    }

    fn rest(self) -> ExtraAttrs {
        self.attrs
    }
}
