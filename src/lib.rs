//! What the `tacos` command shows its users, over the `tacos` library: the `--json` reports
//! every command prints ([`report`]) and the SVG pictures and HTML page it draws ([`draw`]).
//!
//! They live here, beside the command, rather than in the library: nothing that synthesizes,
//! checks, lowers or serves an algorithm (the library, `libtacos.so`, the plugins) needs them,
//! and what they say is the command line's to change. These modules use the library's public
//! API only, never the other way round (`docs/architecture.md`, "Crates").
//!
//! ```
//! use tacos::topology::{parse_spec, SpecDefaults};
//! use tacos_cli::draw::topology::{check_drawable, layout, Shape};
//! use tacos_cli::report::TopologyInfo;
//!
//! let ring = parse_spec("ring:8", &SpecDefaults::default())?;
//! check_drawable(&ring)?;
//! let drawn = layout(&ring);
//! assert_eq!((drawn.shape, drawn.pos.len()), (Shape::Ring, 8));
//! assert_eq!(TopologyInfo::new(&ring).links, 16);
//! # Ok::<(), tacos::Error>(())
//! ```

pub mod draw;
pub mod report;
