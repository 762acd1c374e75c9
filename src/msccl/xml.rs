//! MSCCL algorithm XML: writing and parsing, with quick-xml.
//!
//! The writer emits what the executor's own small parser reads: no XML declaration,
//! double-quoted attributes separated by single spaces, space indentation, `<step .../>`.
//! The parser (over `crate::xmltree`) accepts what msccl-tools and the executor's users
//! write: unknown attributes are kept (and written back), unknown elements and comments are
//! skipped. Every error names the file, line and column, the element and what was wrong.

use super::{Buf, Dep, ExtraAttrs, Gpu, Instr, Program, Proto, Step, Threadblock};
use crate::error::{Error, Result};
use crate::xmltree::{self, Element};
use quick_xml::events::{BytesEnd, BytesStart, Event};
use quick_xml::Writer;
use std::path::Path;

/// The program as XML text.
pub fn write_program(program: &Program) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let algo = [
        ("name", program.name.clone()),
        ("proto", program.proto.name().to_string()),
        ("nchannels", program.nchannels.to_string()),
        ("nchunksperloop", program.nchunksperloop.to_string()),
        ("ngpus", program.gpus.len().to_string()),
        ("coll", program.collective.clone()),
        ("inplace", flag(program.inplace)),
        ("outofplace", flag(program.outofplace)),
    ];
    let bytes = [
        ("minBytes", program.min_bytes),
        ("maxBytes", program.max_bytes),
    ];
    let bytes = bytes
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v.to_string())));
    let algo = element("algo", algo.into_iter().chain(bytes), &program.extra);
    write(&mut w, Event::Start(algo));
    for (id, gpu) in program.gpus.iter().enumerate() {
        let attrs = [
            ("id", id.to_string()),
            ("i_chunks", gpu.input_chunks.to_string()),
            ("o_chunks", gpu.output_chunks.to_string()),
            ("s_chunks", gpu.scratch_chunks.to_string()),
        ];
        write(&mut w, Event::Start(element("gpu", attrs, &gpu.extra)));
        for (t, tb) in gpu.threadblocks.iter().enumerate() {
            let attrs = [
                ("id", t.to_string()),
                ("send", peer(tb.send)),
                ("recv", peer(tb.recv)),
                ("chan", tb.channel.to_string()),
            ];
            write(&mut w, Event::Start(element("tb", attrs, &tb.extra)));
            for (s, step) in tb.steps.iter().enumerate() {
                let (depid, deps) = step.dep.map_or((-1, -1), |d| (d.tb as i64, d.step as i64));
                let attrs = [
                    ("s", s.to_string()),
                    ("type", step.instr.code().to_string()),
                    ("srcbuf", step.src_buf.code().to_string()),
                    ("srcoff", step.src_off.to_string()),
                    ("dstbuf", step.dst_buf.code().to_string()),
                    ("dstoff", step.dst_off.to_string()),
                    ("cnt", step.count.to_string()),
                    ("depid", depid.to_string()),
                    ("deps", deps.to_string()),
                    ("hasdep", flag(step.has_dep)),
                ];
                write(&mut w, Event::Empty(element("step", attrs, &step.extra)));
            }
            write(&mut w, Event::End(BytesEnd::new("tb")));
        }
        write(&mut w, Event::End(BytesEnd::new("gpu")));
    }
    write(&mut w, Event::End(BytesEnd::new("algo")));
    let mut text = String::from_utf8(w.into_inner()).expect("the writer writes UTF-8");
    text.push('\n');
    text
}

fn element<'a>(
    name: &'a str,
    attrs: impl IntoIterator<Item = (&'a str, String)>,
    extra: &'a ExtraAttrs,
) -> BytesStart<'a> {
    let mut e = BytesStart::new(name);
    for (k, v) in attrs {
        e.push_attribute((k, v.as_str()));
    }
    for (k, v) in extra {
        e.push_attribute((k.as_str(), v.as_str()));
    }
    e
}

fn write(w: &mut Writer<Vec<u8>>, event: Event) {
    w.write_event(event).expect("writing to memory cannot fail");
}

fn flag(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

fn peer(p: Option<usize>) -> String {
    p.map_or("-1".to_string(), |p| p.to_string())
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
    let mut program = Program {
        name: a.optional("name").unwrap_or_default(),
        collective: a.string("coll")?,
        proto,
        nchannels: a.usize("nchannels")?,
        nchunksperloop: a.usize("nchunksperloop")?,
        inplace: a.flag("inplace")?,
        outofplace: a.flag("outofplace")?,
        min_bytes: a.optional_u64("minBytes")?,
        max_bytes: a.optional_u64("maxBytes")?,
        gpus: Vec::new(),
        extra: a.rest(),
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
        match self.int(key)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.fail(&format!("{key} is {v}; it must be 0 or 1"))),
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
