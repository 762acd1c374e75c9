//! The writer: a program as the text the executor's own small parser reads.

use crate::msccl::WHOLE_RANGE_MAX_BYTES;
use crate::msccl::{ExtraAttrs, Program};

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
