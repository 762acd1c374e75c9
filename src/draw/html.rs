//! The report page: one self-contained XHTML file (inline SVG, a little CSS, no script,
//! nothing fetched), well-formed XML so that any XML parser reads it back.

use super::svg::escape;
use std::fmt::Write;

/// A page being written, section by section.
pub struct Page {
    body: String,
    title: String,
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;max-width:1600px;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:8px 0 24px}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}\
figure{margin:12px 0 28px}figcaption{font-size:13px;color:#555;max-width:1000px}\
svg{max-width:100%;height:auto}";

impl Page {
    pub fn new(title: &str) -> Page {
        Page {
            body: String::new(),
            title: title.to_string(),
        }
    }

    /// A heading (`level` 1 to 3).
    pub fn heading(&mut self, level: u8, text: &str) {
        let h = level.clamp(1, 3);
        let _ = writeln!(self.body, "<h{h}>{}</h{h}>", escape(text));
    }

    pub fn paragraph(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p>{}</p>", escape(text));
    }

    /// An SVG picture (from this module's writers) with a caption under it.
    pub fn figure(&mut self, svg: &str, caption: &str) {
        let _ = writeln!(
            self.body,
            "<figure>\n{svg}<figcaption>{}</figcaption></figure>",
            escape(caption)
        );
    }

    /// A table: a header row, then rows of cells.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table>\n<tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let _ = write!(self.body, "<td>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// The whole document.
    pub fn finish(self) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"UTF-8\"/>\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{}</body>\n</html>\n",
            escape(&self.title),
            self.body
        )
    }
}
