//! Topologies of real machines.
//!
//! Bandwidths are per direction. NVLink counts 25 GB/s a link; an NVSwitch is unwound
//! into a fully connected graph where each GPU's NVLink bandwidth is split evenly over its
//! peers (the switch rule with d = n-1); multi-node clusters put one NIC per GPU on a
//! rail-optimized fabric, unwound the same way among the GPUs of one rail. Latencies:
//! 0.7 us on NVLink (the TACOS paper's DGX-1 figure), 2 us across InfiniBand.

use super::builders::{compose, Dim, DimKind, LinkSet};
use super::Topology;
use crate::error::{Error, Result};

/// Names and descriptions of the presets, for help texts and error messages.
pub const PRESETS: &[(&str, &str)] = &[
    ("dgx1", "DGX-1 (V100): 8 GPUs, hybrid cube-mesh NVLink, 25 GB/s a link, some pairs doubled"),
    ("dgx2", "DGX-2 (V100): 16 GPUs on NVSwitch, 150 GB/s a GPU, unwound"),
    ("hgx-a100", "HGX/DGX A100 node: 8 GPUs on NVSwitch, 300 GB/s a GPU, unwound"),
    ("hgx-h100", "HGX/DGX H100 node: 8 GPUs on NVSwitch, 450 GB/s a GPU, unwound"),
    ("dgx-a100", "DGX A100 cluster, nodes=N (default 2): NVSwitch inside, one 25 GB/s (HDR) NIC per GPU on rails"),
    ("dgx-h100", "DGX H100 cluster, nodes=N (default 2): NVSwitch inside, one 50 GB/s (NDR) NIC per GPU on rails"),
    ("ndv4", "Azure NDv4 cluster, nodes=N (default 1): as dgx-a100"),
];

const NVLINK_GBPS: f64 = 25.0;
const NVLINK_US: f64 = 0.7;
const IB_US: f64 = 2.0;

/// NVLink counts between DGX-1 (V100) GPUs, as `nvidia-smi topo -m` shows them.
const DGX1_NVLINKS: [[u8; 8]; 8] = [
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
];

/// Builds the preset `name`; `nodes` applies to the multi-node clusters.
pub fn preset(name: &str, nodes: Option<usize>) -> Result<Topology> {
    if let Some((label, dims)) = preset_dims(name, nodes)? {
        return compose(label, &dims);
    }
    let label = format!("preset:{name}");
    match name {
        "dgx1" => {
            single_node(name, nodes)?;
            let mut set = LinkSet::default();
            for (i, row) in DGX1_NVLINKS.iter().enumerate() {
                for (j, &count) in row.iter().enumerate() {
                    if count > 0 {
                        set.add(i, j, count as f64 * NVLINK_GBPS, NVLINK_US);
                    }
                }
            }
            set.into_topology(label, 8)
        }
        _ => Err(Error::Unknown {
            what: "preset",
            given: name.into(),
            known: PRESETS.iter().map(|p| p.0).collect(),
        }),
    }
}

fn single_node(name: &str, nodes: Option<usize>) -> Result<()> {
    match nodes {
        None | Some(1) => Ok(()),
        Some(n) => Err(Error::Invalid {
            input: format!("nodes= of preset '{name}'"),
            value: n.to_string(),
            allowed: "1: this preset is one node; nodes= applies to dgx-a100, dgx-h100 and ndv4"
                .into(),
        }),
    }
}

/// The name and dimensions of the presets composed of dimensions (all but DGX-1), without
/// building them; None for the others.
pub fn preset_dims(name: &str, nodes: Option<usize>) -> Result<Option<(String, Vec<Dim>)>> {
    let label = format!("preset:{name}");
    let single_node = |nodes| single_node(name, nodes);
    let nvswitch = |gpus: usize, links: f64| Dim {
        kind: DimKind::Switch { degree: gpus - 1 },
        size: gpus,
        bandwidth_gbps: links * NVLINK_GBPS,
        latency_us: NVLINK_US,
    };
    let cluster = |nodes: usize, nvlinks: f64, nic_gbps: f64| {
        if nodes == 0 {
            return Err(Error::Invalid {
                input: "nodes".into(),
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
        let rail = Dim {
            kind: DimKind::Switch {
                degree: nodes.saturating_sub(1).max(1),
            },
            size: nodes,
            bandwidth_gbps: nic_gbps,
            latency_us: IB_US,
        };
        Ok(Some((
            format!("{label},nodes={nodes}"),
            vec![nvswitch(8, nvlinks), rail],
        )))
    };
    let node = |gpus, links| {
        single_node(nodes).map(|()| Some((label.clone(), vec![nvswitch(gpus, links)])))
    };
    match name {
        "dgx2" => node(16, 6.0),
        "hgx-a100" => node(8, 12.0),
        "hgx-h100" => node(8, 18.0),
        "dgx-a100" => cluster(nodes.unwrap_or(2), 12.0, 25.0),
        "dgx-h100" => cluster(nodes.unwrap_or(2), 18.0, 50.0),
        "ndv4" => cluster(nodes.unwrap_or(1), 12.0, 25.0),
        _ => Ok(None),
    }
}
