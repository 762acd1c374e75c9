//! A small element tree over quick-xml, for the XML files the project reads whole (NCCL
//! topology dumps): every element with its attributes, children and source position.

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

/// One XML element.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
    /// 1-based line and column where the element starts.
    pub line: usize,
    pub column: usize,
}

impl Element {
    /// The value of attribute `key`.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every element below this one, depth first, with its ancestors (outermost first).
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

/// Parses `text` into its root element. Errors read `origin:line:column: what`.
pub fn parse(text: &str, origin: &str) -> Result<Element, String> {
    let mut reader = Reader::from_str(text);
    let lines = Lines::new(text);
    let at = |offset: u64, what: String| {
        let (line, column) = lines.position(offset.min(text.len() as u64) as usize);
        format!("{origin}:{line}:{column}: {what}")
    };
    let element = |start: &BytesStart, offset: u64| -> Result<Element, String> {
        let (line, column) = lines.position(offset as usize);
        let mut attrs = Vec::new();
        for a in start.attributes() {
            let a = a.map_err(|e| at(offset, format!("bad attribute: {e}")))?;
            let value = a
                .normalized_value(XmlVersion::default())
                .map_err(|e| at(offset, format!("bad attribute value: {e}")))?;
            attrs.push((
                String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                value.into_owned(),
            ));
        }
        Ok(Element {
            name: String::from_utf8_lossy(start.name().as_ref()).into_owned(),
            attrs,
            children: Vec::new(),
            line,
            column,
        })
    };
    let mut open: Vec<Element> = Vec::new();
    loop {
        let offset = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| at(reader.error_position(), e.to_string()))?;
        match event {
            Event::Start(s) => open.push(element(&s, offset)?),
            Event::Empty(s) => {
                let e = element(&s, offset)?;
                match open.last_mut() {
                    Some(parent) => parent.children.push(e),
                    None => return Ok(e),
                }
            }
            Event::End(_) => {
                let done = open.pop().expect("quick-xml matches end tags");
                match open.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            }
            Event::Eof => return Err(at(offset, "no root element".into())),
            _ => {}
        }
    }
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
        assert_eq!((root.children[0].line, root.children[0].column), (2, 3));
        let names: Vec<&str> = root.walk().iter().map(|(_, e)| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }

    #[test]
    fn malformed_xml_names_line_and_column() {
        let e = parse("<a>\n  <b>\n</a>", "t.xml").unwrap_err();
        assert!(e.starts_with("t.xml:3:"), "{e}");
        assert!(parse("", "t.xml").unwrap_err().contains("no root element"));
    }
}
