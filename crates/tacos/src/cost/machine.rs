//! The machine NCCL finds under a topology ([`Machine`]): how each node's GPUs
//! reach each other (an NVSwitch port, NVLinks pair by pair, or PCIe), how many NICs a
//! node's GPUs use and how fast one is, and whether the NVSwitch reduces (NVLS: Hopper
//! and Blackwell NVSwitch nodes; an A100's NVSwitch does not). Read from the built
//! topology, or from a cluster's description without building it. The NICs are the
//! topology's own record of them where its builder knew them (presets, NCCL topology
//! files: GPUs may share a NIC or have several), else one per GPU linked into the
//! network.

use crate::gpu::GpuArch;
use crate::topology::{NodeNics, NpuId, Topology};
use crate::tuner::profile::network_links;
use crate::tuner::search::{Machine, NodeFabric};
use crate::tuner::Cluster;

/// Line rate of one NVLink of `arch`, GB/s per direction (NVLink 2 to 4: 25; 5: 50).
pub fn nvlink_line_gbps(arch: GpuArch) -> f64 {
    match arch {
        GpuArch::Blackwell => 50.0,
        _ => 25.0,
    }
}

/// Whether NCCL may run NVLS on a node of `fabric` with `arch` GPUs.
fn nvls_capable(arch: GpuArch, fabric: &NodeFabric) -> bool {
    arch >= GpuArch::Hopper && matches!(fabric, NodeFabric::NvSwitch { .. })
}

/// NVLinks in `gbps` of line rate, at least one.
fn nvlinks(gbps: f64, arch: GpuArch) -> f64 {
    (gbps / nvlink_line_gbps(arch)).round().max(1.0)
}

/// The machine under `topo`'s alive NPUs, NVLink domains (nodes) of `domain_size` NPUs
/// apart in id, `arch` GPUs.
///
/// ```
/// use tacos::cost::machine::of_topology;
/// use tacos::topology::{parse_spec, SpecDefaults};
/// use tacos::gpu::GpuArch;
/// let topo = parse_spec("preset:dgx-h100,nodes=2", &SpecDefaults::default()).unwrap();
/// let machine = of_topology(&topo, 8, GpuArch::Hopper);
/// assert_eq!((machine.nodes, machine.nics, machine.nvls), (2, 8, true));
/// // DGX-2: 16 GPUs a node, a pair to each of its 8 EDR NICs.
/// let topo = parse_spec("preset:dgx2,nodes=2", &SpecDefaults::default()).unwrap();
/// let machine = of_topology(&topo, 16, GpuArch::Volta);
/// assert_eq!((machine.nics, machine.nic_gbps, machine.network_gbps), (8, 12.5, 100.0));
/// ```
pub fn of_topology(topo: &Topology, domain_size: usize, arch: GpuArch) -> Machine {
    let FirstNode {
        nodes,
        gpus: node,
        network,
    } = first_node(topo, domain_size);
    // The node's fabric, from its first GPU's links within the node.
    let gpu = node.first().copied().unwrap_or(0);
    let inside: Vec<usize> = topo.out_links(gpu).filter(|&l| !network[l]).collect();
    let fabric = if inside.iter().any(|&l| topo.is_switch(topo.link(l).dst)) {
        let port: f64 = inside.iter().map(|&l| topo.link(l).bandwidth_gbps).sum();
        NodeFabric::NvSwitch {
            nvlinks: nvlinks(port, arch),
        }
    } else if inside.is_empty() {
        NodeFabric::Pcie
    } else {
        let links = node
            .iter()
            .map(|&a| {
                node.iter()
                    .map(|&b| match topo.link_between(a, b) {
                        Some(l) if !network[l] => nvlinks(topo.link(l).bandwidth_gbps, arch) as u8,
                        _ => 0,
                    })
                    .collect()
            })
            .collect();
        NodeFabric::NvLinkMesh { links }
    };
    // The node's GPUs' links into the network.
    let nic_links: Vec<f64> = node
        .iter()
        .filter_map(|&g| {
            let out: f64 = topo
                .out_links(g)
                .filter(|&l| network[l])
                .map(|l| topo.link(l).bandwidth_gbps)
                .sum();
            (out > 0.0).then_some(out)
        })
        .collect();
    let nvls = nvls_capable(arch, &fabric);
    let machine = Machine {
        arch,
        nodes,
        gpus_per_node: node.len(),
        fabric,
        // Without a record of the NICs, each GPU linked into the network has its own.
        nics: if nodes > 1 { nic_links.len() } else { 0 },
        nic_gbps: nic_links.iter().copied().fold(0.0, f64::max),
        network_gbps: if nodes > 1 {
            nic_links.iter().sum()
        } else {
            0.0
        },
        nvls,
        sharp: false,
    };
    with_nics(machine, topo.nics())
}

/// The nodes of a topology as NCCL sees them: how many, and the first one's alive GPUs.
pub(crate) struct FirstNode {
    pub nodes: usize,
    pub gpus: Vec<NpuId>,
    /// Per link of the topology, whether it is a network hop.
    pub network: Vec<bool>,
}

/// `topo`'s alive NPUs in NVLink domains (nodes) of `domain_size` NPUs apart in id.
pub(crate) fn first_node(topo: &Topology, domain_size: usize) -> FirstNode {
    let npus = topo.alive_npus();
    let domain_size = domain_size.clamp(1, npus.len().max(1));
    let first = npus.first().copied().unwrap_or(0) / domain_size;
    FirstNode {
        nodes: npus
            .iter()
            .map(|n| n / domain_size)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        gpus: npus
            .iter()
            .copied()
            .filter(|&n| n / domain_size == first)
            .collect(),
        network: network_links(topo, domain_size),
    }
}

/// The machine of `cluster`: an NVSwitch port (or full NVLink mesh) per GPU and a NIC per
/// GPU on its rail (see [`with_nics`] for others).
pub fn of_cluster(cluster: &Cluster, arch: GpuArch) -> Machine {
    let port = cluster.ports_gbps[0]
        .unwrap_or((cluster.size.saturating_sub(1)) as f64 * cluster.nvlink.bandwidth_gbps);
    let fabric = if cluster.size <= 1 {
        NodeFabric::Pcie
    } else {
        NodeFabric::NvSwitch {
            nvlinks: nvlinks(port, arch),
        }
    };
    let nic = cluster.ports_gbps[1]
        .unwrap_or((cluster.domains.saturating_sub(1)) as f64 * cluster.rail.bandwidth_gbps);
    Machine {
        arch,
        nodes: cluster.domains,
        gpus_per_node: cluster.size,
        nvls: nvls_capable(arch, &fabric),
        fabric,
        nics: if cluster.domains > 1 { cluster.size } else { 0 },
        nic_gbps: nic,
        network_gbps: if cluster.domains > 1 {
            cluster.size as f64 * nic
        } else {
            0.0
        },
        sharp: false,
    }
}

/// `machine` with the NICs its topology records (`Topology::nics`) and whether the network
/// reduces (SHARP), where it does and the machine spans nodes; its links into the network
/// (`network_gbps`) stay as they are.
pub fn with_nics(machine: Machine, nics: Option<NodeNics>) -> Machine {
    match nics {
        Some(nics) if machine.nodes > 1 => Machine {
            nics: nics.count,
            nic_gbps: nics.gbps,
            sharp: nics.sharp,
            ..machine
        },
        _ => machine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    fn machine(spec: &str, domain: usize, arch: GpuArch) -> Machine {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        of_topology(&topo, domain, arch)
    }

    #[test]
    fn presets_say_their_fabric_nics_and_nvls() {
        let h100 = machine("preset:dgx-h100,nodes=2", 8, GpuArch::Hopper);
        assert_eq!(h100.fabric, NodeFabric::NvSwitch { nvlinks: 18.0 });
        assert_eq!((h100.nodes, h100.gpus_per_node, h100.nics), (2, 8, 8));
        assert_eq!(h100.nic_gbps, 50.0);
        assert!(h100.nvls);
        let a100 = machine("preset:dgx-a100,nodes=2", 8, GpuArch::Ampere);
        assert_eq!(a100.fabric, NodeFabric::NvSwitch { nvlinks: 12.0 });
        assert!(!a100.nvls, "an A100's NVSwitch does not reduce");
        let one = machine("preset:hgx-h100", 8, GpuArch::Hopper);
        assert_eq!((one.nodes, one.nics), (1, 0));
        let dgx1 = machine("preset:dgx1", 8, GpuArch::Volta);
        let NodeFabric::NvLinkMesh { links } = &dgx1.fabric else {
            panic!("{dgx1:?}")
        };
        // Every GPU has six NVLinks, two of its four peers doubled.
        for row in links {
            assert_eq!(row.iter().map(|&l| u32::from(l)).sum::<u32>(), 6);
        }
        assert!(!dgx1.nvls);
    }
}
