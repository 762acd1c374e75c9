//! `tacos compare --heatmap`: each algorithm's link loads drawn on the topology itself
//! (`draw::topology`), every panel on one colour scale.

use super::topology::{loads_svg, LoadPanel};
use tacos::sim::SimReport;
use tacos::topology::Topology;

/// An SVG of each (name, report)'s link loads on `topo`; links of `base` (the topology
/// before failures) that `topo` lacks are drawn failed.
pub fn heatmap_svg(
    title: &str,
    topo: &Topology,
    base: Option<&Topology>,
    panels: &[(String, &SimReport)],
) -> String {
    let panels: Vec<LoadPanel> = panels
        .iter()
        .map(|(name, report)| LoadPanel {
            name: name.clone(),
            report,
        })
        .collect();
    loads_svg(title, topo, base, &panels)
}
