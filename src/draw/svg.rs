//! A tiny SVG writer: every attribute value and every text escaped, every number written
//! with the same fixed formatting, so a picture is well-formed XML and the same inputs
//! give the same bytes.

use std::fmt::Write;

/// `text` safe inside an XML element or a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 allows no other control characters.
            c if c.is_control() && !matches!(c, '\n' | '\t') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate as every picture writes it: two decimals, trailing zeros dropped, no
/// negative zero; a value that is not finite (a picture of nothing) as 0.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".into();
    }
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    match s {
        "-0" | "" => "0".into(),
        s => s.to_string(),
    }
}

/// One element's attributes, in the order given.
pub type Attrs<'a> = &'a [(&'a str, String)];

/// An SVG document being written.
pub struct Svg {
    out: String,
}

impl Svg {
    /// A `width` x `height` picture on a white background.
    pub fn new(width: f64, height: f64) -> Svg {
        let (w, h) = (num(width), num(height));
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#
        );
        let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        Svg { out }
    }

    /// `<tag attrs/>`, or with a `<title>` (what a browser shows on hover).
    pub fn element(&mut self, tag: &str, attrs: Attrs, title: Option<&str>) {
        self.start(tag, attrs);
        match title {
            Some(t) => {
                let _ = writeln!(self.out, "><title>{}</title></{tag}>", escape(t));
            }
            None => self.out.push_str("/>\n"),
        }
    }

    /// `<text attrs>content</text>`.
    pub fn text(&mut self, attrs: Attrs, content: &str) {
        self.start("text", attrs);
        let _ = writeln!(self.out, ">{}</text>", escape(content));
    }

    /// Opens a group; `close_group` ends it.
    pub fn open_group(&mut self, attrs: Attrs) {
        self.start("g", attrs);
        self.out.push_str(">\n");
    }

    pub fn close_group(&mut self) {
        self.out.push_str("</g>\n");
    }

    /// Writes raw, already well-formed markup (a gradient's stops, say).
    pub fn raw(&mut self, markup: &str) {
        self.out.push_str(markup);
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }

    fn start(&mut self, tag: &str, attrs: Attrs) {
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attrs {
            let _ = write!(self.out, r#" {name}="{}""#, escape(value));
        }
    }
}

/// `(name, value)` for an attribute whose value is a number.
pub fn at(name: &str, v: f64) -> (&str, String) {
    (name, num(v))
}

/// `(name, value)` for an attribute whose value is text.
pub fn attr(name: &str, v: impl Into<String>) -> (&str, String) {
    (name, v.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_one_spelling() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(1.005_1), "1.01");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(f64::NAN), "0");
        assert_eq!(num(120.0), "120");
    }

    #[test]
    fn text_and_attributes_are_escaped() {
        let mut svg = Svg::new(10.0, 10.0);
        svg.text(&[attr("class", "a\"b")], "<x & 'y'>");
        let out = svg.finish();
        assert!(out.contains(r#"class="a&quot;b""#));
        assert!(out.contains("&lt;x &amp; &apos;y&apos;&gt;</text>"));
    }
}
