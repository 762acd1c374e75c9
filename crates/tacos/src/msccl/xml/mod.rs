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
//! whole range) or `name` is inferred and recorded in [`Program::inferred`](super::Program::inferred). Every error
//! names the file, line and column, the element and what was wrong.
//!
//! Numbers are held to what the executor stores (a C `int`; `minBytes` and `maxBytes` an
//! `int64_t`), and `ngpus` to the `<gpu>` elements the file holds, so no count in a file
//! makes the reader (or the verifier, the executor model or the timing after it) allocate
//! more than the file's size warrants. What the loaders' own small parser refuses in the
//! text (an XML declaration, single quotes, more than 16 attributes on an element, a value
//! over 255 bytes) is kept in [`Program::syntax_breaks`](super::Program::syntax_breaks) for [`super::rules`].

mod parse;
mod write;

pub use parse::{parse_program, read_program, MAX_ATTRIBUTE_INT, MAX_FILE_BYTES};
pub use write::write_program;
