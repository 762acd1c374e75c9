//! A small element tree over quick-xml, for the XML files the project reads whole (NCCL
//! topology dumps, MSCCL algorithms): every element with its attributes, children and
//! source position.
//!
//! The reader is iterative (nothing recurses on the input's nesting) and refuses, before it
//! costs memory, a file nested deeper than [`Limits::max_depth`] or holding more than
//! [`Limits::max_elements`] elements. It is strict about the document: exactly one root
//! element, nothing but whitespace and comments around it. It accepts what any XML reader
//! does (a declaration, single-quoted values...) and records in [`Document::notes`] what a
//! minimal reader such as the MSCCL executor's refuses, for the callers that care.
//!
//! ```
//! let root = tacos::xmltree::parse(r#"<system><gpu dev="0"/><gpu dev="1"/></system>"#, "example").unwrap();
//! assert_eq!(root.name, "system");
//! assert_eq!(root.children[1].attr("dev"), Some("1"));
//! ```

use crate::error::FileProblem;
use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

/// One XML element.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    pub name: String,
    /// Attribute names and values in file order, one after the other in one string:
    /// attribute i's name ends at `ends[2i]` and its value at `ends[2i + 1]`. An
    /// algorithm's steps are most of its elements, and two strings per attribute took
    /// five times the memory.
    text: String,
    ends: Vec<u32>,
    pub children: Vec<Element>,
    /// 1-based line and column where the element starts.
    pub line: usize,
    pub column: usize,
}

impl Element {
    /// The value of attribute `key`.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs().find(|&(k, _)| k == key).map(|(_, v)| v)
    }

    /// The attributes, (name, value), in file order.
    pub fn attrs(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.ends.len() / 2).map(|i| {
            let start = if i == 0 {
                0
            } else {
                self.ends[2 * i - 1] as usize
            };
            let (k, v) = (self.ends[2 * i] as usize, self.ends[2 * i + 1] as usize);
            (&self.text[start..k], &self.text[k..v])
        })
    }

    /// Every element below this one, depth first, with its ancestors (outermost first).
    /// The paths cost the elements times their depth, which [`Limits::max_depth`] bounds.
    pub fn walk(&self) -> Vec<(Vec<&Element>, &Element)> {
        let mut out = Vec::new();
        let mut stack = vec![(Vec::new(), self)];
        while let Some((path, e)) = stack.pop() {
            let mut below = path.clone();
            below.push(e);
            for c in e.children.iter().rev() {
                stack.push((below.clone(), c));
            }
            out.push((path, e));
        }
        out
    }
}

/// How much a file may make the reader build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most elements open at once (the root is depth 1). NCCL topology dumps nest about 10
    /// deep and MSCCL algorithms 4; 128 is serde_json's nesting limit too. It also bounds
    /// the recursion of dropping, cloning and comparing a tree, which are derived.
    pub max_depth: usize,
    /// Most elements in the file: 2^22 holds an MSCCL algorithm at the executor's limits
    /// (1,024 GPUs of 4,095 elements each), whose tree takes about 300 bytes per step.
    pub max_elements: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 128,
            max_elements: 1 << 22,
        }
    }
}

/// Something in the text that this reader accepts but a minimal one refuses (the MSCCL
/// executor's reads nothing but elements, comments, spaces between attributes and
/// double-quoted values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// What was found: "an XML declaration", "a single-quoted attribute value"...
    pub what: &'static str,
    /// 1-based position: of the element, for what is inside a tag.
    pub line: usize,
    pub column: usize,
}

/// The note on indentation or other text between elements holding a tab.
const TAB_NOTE: &str = "a tab between elements";

/// A parsed file: its root element and the notes on its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub root: Element,
    pub notes: Vec<Note>,
}

/// Byte offsets where lines start, to turn offsets into positions without rescanning the
/// text for every element.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        let starts = std::iter::once(0).chain(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lines(starts.collect())
    }

    /// The 1-based (line, column) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let line = self.0.partition_point(|&start| start <= offset);
        (line, offset - self.0[line - 1] + 1)
    }
}

/// Parses `text` into its root element, within the default [`Limits`]. An error is
/// a [`FileProblem`] at its line and column.
pub fn parse(text: &str, origin: &str) -> Result<Element, FileProblem> {
    parse_document(text, origin, &Limits::default()).map(|d| d.root)
}

/// Parses `text` into its root element and the notes on its text, within `limits`.
pub fn parse_document(text: &str, origin: &str, limits: &Limits) -> Result<Document, FileProblem> {
    let mut notes = Vec::new();
    let mut tab_noted = false;
    // A byte order mark: quick-xml would read it as text before the root.
    let (body, skipped) = match text.strip_prefix('\u{feff}') {
        Some(rest) => {
            notes.push(Note {
                what: "a byte order mark",
                line: 1,
                column: 1,
            });
            (rest, '\u{feff}'.len_utf8())
        }
        None => (text, 0),
    };
    let mut reader = Reader::from_str(body);
    let lines = Lines::new(text);
    let position = |offset: u64| lines.position(skipped + (offset as usize).min(body.len()));
    let at = |offset: u64, what: String| {
        let (line, column) = position(offset);
        FileProblem::new(origin, what).at(line, column)
    };
    let mut open: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut elements = 0usize;
    // Counts an element about to be built and checks the limits first.
    let mut admit = |depth: usize, offset: u64| -> Result<(), FileProblem> {
        elements += 1;
        if elements > limits.max_elements {
            return Err(at(
                offset,
                format!(
                    "more than {} elements, the most this reader takes",
                    limits.max_elements
                ),
            ));
        }
        if depth > limits.max_depth {
            return Err(at(
                offset,
                format!(
                    "elements nested {depth} deep, more than the {} this reader takes",
                    limits.max_depth
                ),
            ));
        }
        Ok(())
    };
    loop {
        let offset = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| at(reader.error_position(), e.to_string()))?;
        let (line, column) = position(offset);
        let mut note = |what| notes.push(Note { what, line, column });
        let done = match event {
            Event::Start(s) | Event::Empty(s) if root.is_some() => {
                return Err(at(
                    offset,
                    format!(
                        "a second root element <{}> after the first one ends",
                        crate::error::echo(&String::from_utf8_lossy(s.name().as_ref()))
                    ),
                ))
            }
            Event::Start(s) => {
                admit(open.len() + 1, offset)?;
                open.push(element(&s, (line, column), &mut notes, &at, offset)?);
                None
            }
            Event::Empty(s) => {
                admit(open.len() + 1, offset)?;
                let e = element(&s, (line, column), &mut notes, &at, offset)?;
                match open.last_mut() {
                    Some(parent) => {
                        parent.children.push(e);
                        None
                    }
                    None => Some(e),
                }
            }
            Event::End(_) => {
                let Some(mut done) = open.pop() else {
                    return Err(at(offset, "an end tag with no start tag".into()));
                };
                done.children.shrink_to_fit();
                match open.last_mut() {
                    Some(parent) => {
                        parent.children.push(done);
                        None
                    }
                    None => Some(done),
                }
            }
            Event::Text(t) if open.is_empty() => {
                let text = String::from_utf8_lossy(&t);
                let trimmed = text.trim_start();
                if !trimmed.is_empty() {
                    let what = match root {
                        Some(_) => "text after the root element",
                        None => "no root element before text",
                    };
                    let start = offset + (text.len() - trimmed.len()) as u64;
                    return Err(at(
                        start,
                        format!("{what}: '{}'", crate::error::echo(trimmed.trim_end())),
                    ));
                }
                None
            }
            Event::GeneralRef(_) | Event::CData(_) if open.is_empty() => {
                return Err(at(offset, "text outside the root element".into()))
            }
            Event::Decl(_) => {
                note("an XML declaration");
                None
            }
            Event::PI(_) => {
                note("a processing instruction");
                None
            }
            Event::DocType(_) => {
                note("a document type declaration");
                None
            }
            Event::CData(_) => {
                note("a CDATA section");
                None
            }
            Event::Eof => {
                return match (root, open.last()) {
                    (Some(root), _) => Ok(Document { root, notes }),
                    (None, Some(e)) => Err(at(
                        offset,
                        format!(
                            "the file ends inside <{}> (opened at {}:{})",
                            crate::error::echo(&e.name),
                            e.line,
                            e.column
                        ),
                    )),
                    (None, None) => Err(at(offset, "no root element".into())),
                };
            }
            Event::Text(t) => {
                // The loaders' parser skips only spaces and line breaks between tags; the
                // first tab found stands for the file's.
                let tab = t.iter().position(|&b| b == b'\t');
                if let Some(tab) = tab.filter(|_| !tab_noted) {
                    tab_noted = true;
                    let (line, column) = position(offset + tab as u64);
                    notes.push(Note {
                        what: TAB_NOTE,
                        line,
                        column,
                    });
                }
                None
            }
            Event::GeneralRef(_) | Event::Comment(_) => None,
        };
        if done.is_some() {
            root = done;
        }
    }
}

/// The root element's start tag of `text`, its attributes read and nothing after it: what
/// a reader checking a file's header needs, at the cost of the prolog alone. An error
/// is a [`FileProblem`] at its line and column.
pub fn parse_root_tag(text: &str, origin: &str) -> Result<Element, FileProblem> {
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let skipped = text.len() - body.len();
    let mut reader = Reader::from_str(body);
    let lines = Lines::new(text);
    let position = |offset: u64| lines.position(skipped + (offset as usize).min(body.len()));
    let at = |offset: u64, what: String| {
        let (line, column) = position(offset);
        FileProblem::new(origin, what).at(line, column)
    };
    loop {
        let offset = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| at(reader.error_position(), e.to_string()))?;
        match event {
            Event::Start(s) | Event::Empty(s) => {
                return element(&s, position(offset), &mut Vec::new(), &at, offset)
            }
            Event::Text(t) if !String::from_utf8_lossy(&t).trim().is_empty() => {
                return Err(at(offset, "no root element before text".into()))
            }
            Event::Eof => return Err(at(offset, "no root element".into())),
            _ => {}
        }
    }
}

/// Builds an element from its start tag at `position`, noting what a minimal reader
/// would refuse inside the tag.
fn element(
    start: &BytesStart,
    position: (usize, usize),
    notes: &mut Vec<Note>,
    at: &dyn Fn(u64, String) -> FileProblem,
    offset: u64,
) -> Result<Element, FileProblem> {
    let (line, column) = position;
    let mut text = String::new();
    let mut ends = Vec::new();
    for a in start.attributes() {
        let a = a.map_err(|e| at(offset, format!("bad attribute: {e}")))?;
        let value = a
            .normalized_value(XmlVersion::default())
            .map_err(|e| at(offset, format!("bad attribute value: {e}")))?;
        text.push_str(&String::from_utf8_lossy(a.key.as_ref()));
        ends.push(text.len().min(u32::MAX as usize) as u32);
        text.push_str(&value);
        if text.len() > u32::MAX as usize {
            return Err(at(
                offset,
                "attributes of more than 4 GiB in one tag".into(),
            ));
        }
        ends.push(text.len() as u32);
    }
    text.shrink_to_fit();
    ends.shrink_to_fit();
    let name_len = start.name().as_ref().len();
    for what in tag_notes(&start[name_len..]) {
        notes.push(Note { what, line, column });
    }
    Ok(Element {
        name: String::from_utf8_lossy(start.name().as_ref()).into_owned(),
        text,
        ends,
        children: Vec::new(),
        line,
        column,
    })
}

/// What a minimal reader refuses in the attributes part of a tag: values in single
/// quotes, and separators other than spaces (tabs, line breaks, spaces around `=`).
fn tag_notes(raw: &[u8]) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut note = |what| {
        if !out.contains(&what) {
            out.push(what);
        }
    };
    let mut quote = None;
    let mut last = b' ';
    for &b in raw {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => continue,
            None => match b {
                b'"' => quote = Some(b'"'),
                b'\'' => {
                    note("a single-quoted attribute value");
                    quote = Some(b'\'');
                }
                b'\t' | b'\n' | b'\r' => note("a tab or line break inside a tag"),
                b'=' if last == b' ' => note("a space around '=' in a tag"),
                b' ' if last == b'=' => note("a space around '=' in a tag"),
                _ => {}
            },
        }
        last = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_keep_attributes_children_and_positions() {
        let root = parse(
            "<a x=\"1\">\n  <b y=\"&lt;2\"/>\n  <c><d/></c>\n</a>",
            "t.xml",
        )
        .unwrap();
        assert_eq!(root.attr("x"), Some("1"));
        assert_eq!(root.children[0].attr("y"), Some("<2"));
        let many = parse("<a k=\"\" long=\"value\" k2=\"v\"/>", "t.xml").unwrap();
        let attrs: Vec<(&str, &str)> = many.attrs().collect();
        assert_eq!(attrs, [("k", ""), ("long", "value"), ("k2", "v")]);
        assert_eq!((many.attr("k2"), many.attr("v")), (Some("v"), None));
        assert_eq!((root.children[0].line, root.children[0].column), (2, 3));
        let names: Vec<&str> = root.walk().iter().map(|(_, e)| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }

    #[test]
    fn malformed_xml_names_line_and_column() {
        let e = parse("<a>\n  <b>\n</a>", "t.xml").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("t.xml", Some(3)), "{e}");
        let e = parse("", "t.xml").unwrap_err();
        assert!(e.problem.contains("no root element"), "{e}");
        let e = parse("<a>\n<b>", "t.xml").unwrap_err();
        assert!(e.problem.contains("ends inside <b> (opened at 2:1)"), "{e}");
    }

    #[test]
    fn nothing_but_comments_and_whitespace_around_the_root() {
        let ok = "<!-- c -->\n<a/>\n<!-- d -->\n\n";
        assert_eq!(parse(ok, "t.xml").unwrap().name, "a");
        let e = parse("<a/>\n<b/>", "t.xml").unwrap_err().to_string();
        assert!(e.starts_with("t.xml:2:1: a second root element <b>"), "{e}");
        let e = parse("<a></a>\n  junk", "t.xml").unwrap_err().to_string();
        assert!(
            e.starts_with("t.xml:2:3: text after the root element: 'junk'"),
            "{e}"
        );
        let e = parse("junk<a/>", "t.xml").unwrap_err().to_string();
        assert!(e.contains("no root element before text: 'junk'"), "{e}");
    }

    #[test]
    fn depth_and_element_limits_name_the_line() {
        let limits = Limits {
            max_depth: 3,
            max_elements: 5,
        };
        let deep = "<a>\n<b>\n<c>\n<d/></c></b></a>";
        let e = parse_document(deep, "t.xml", &limits).unwrap_err();
        let nested = "elements nested 4 deep, more than the 3 this reader takes";
        assert_eq!(e, FileProblem::new("t.xml", nested).at(4, 1));
        let wide = "<a><b/><b/><b/><b/>\n<b/></a>";
        let e = parse_document(wide, "t.xml", &limits).unwrap_err();
        let many = "more than 5 elements, the most this reader takes";
        assert_eq!(e, FileProblem::new("t.xml", many).at(2, 1));
        // At the limits exactly, the file reads.
        let fits = "<a><b><c/></b><b/><b/></a>";
        assert!(parse_document(fits, "t.xml", &limits).is_ok());
    }

    #[test]
    fn a_nesting_far_past_the_limit_is_refused_without_recursion() {
        let depth = 200_000;
        let text = "<a>".repeat(depth) + &"</a>".repeat(depth);
        let e = parse(&text, "deep.xml").unwrap_err().to_string();
        assert!(
            e.starts_with("deep.xml:1:385: elements nested 129 deep"),
            "{e}"
        );
    }

    #[test]
    fn what_a_minimal_reader_refuses_is_noted() {
        let text = "\u{feff}<?xml version=\"1.0\"?>\n<a x='1'\ty=\"2\" z = \"3\"><![CDATA[x]]></a>";
        let doc = parse_document(text, "t.xml", &Limits::default()).unwrap();
        let notes: Vec<(&str, usize, usize)> = doc
            .notes
            .iter()
            .map(|n| (n.what, n.line, n.column))
            .collect();
        assert_eq!(
            notes,
            [
                ("a byte order mark", 1, 1),
                // Columns count bytes: the mark takes three.
                ("an XML declaration", 1, 4),
                ("a single-quoted attribute value", 2, 1),
                ("a tab or line break inside a tag", 2, 1),
                ("a space around '=' in a tag", 2, 1),
                ("a CDATA section", 2, 24),
            ]
        );
        let plain = "<a x=\"1\" y=\"a'b\">\n  <b/>\n</a>\n";
        let doc = parse_document(plain, "t.xml", &Limits::default()).unwrap();
        assert!(doc.notes.is_empty(), "{:?}", doc.notes);
        // Indentation with tabs: noted once, at the first tab (line 2, after two spaces).
        let tabbed = "<a>\n  \t<b/>\n\t<c/>\n</a>\n";
        let doc = parse_document(tabbed, "t.xml", &Limits::default()).unwrap();
        let notes: Vec<(&str, usize, usize)> = doc
            .notes
            .iter()
            .map(|n| (n.what, n.line, n.column))
            .collect();
        assert_eq!(notes, [("a tab between elements", 2, 3)]);
    }
}
