//! Every picture tacos draws, as SVG: one colour scale and one axis code for all of
//! them, each written deterministically (fixed number formatting, escaped text) so the
//! same figures give the same bytes. `tacos report` puts them on one self-contained page
//! (`html`); `tacos compare --heatmap` writes the topology's loads alone.

pub mod chart;
mod heatmap;
pub mod html;
pub mod plots;
pub mod scale;
pub mod svg;
pub mod timeline;
pub mod topology;

pub use heatmap::heatmap_svg;
