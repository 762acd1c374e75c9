//! Topologies of real machines, as fabrics: GPUs, NVSwitches and rail and spine switches
//! as vertices.
//!
//! Bandwidths are line rates per direction (NCCL reaches about 80% of them on NVLink,
//! about 24 of 25 GB/s on an HDR NIC: see ../shared/reference/measured-training.md).
//! NVLink counts 25 GB/s a link; a GPU's port into its node's NVSwitch is one link up and
//! one link down, each with the GPU's whole NVLink bandwidth. Clusters are rail-optimized:
//! GPU g of every node is linked up and down to leaf switch `rail{g}`, and with `spine=K`
//! the rails are joined by K spine switches.
//!
//! A node has its NICs (`nics=`, each of `nic=` GB/s) spread evenly over its GPUs, in the
//! order of their PCIe switches: GPUs that share a NIC (DGX-2: a pair per NIC) split it,
//! a GPU with several NICs has all of them, never more than its PCIe link carries. A
//! partial node (`gpus=G`, the node's first G GPUs) keeps each GPU's own NICs and shares
//! only among the GPUs taken, as NCCL, which sees only the communicator's GPUs, uses them.
//! A GPU's link to its rail is its share (the least any GPU taken gets, so every rail is
//! alike); the topology records the NICs themselves (`Topology::nics`) for NCCL's search,
//! which lays its channels per NIC. Latencies are per transfer and
//! split evenly over the two hops through a switch, so a route's summed latency is the
//! figure: 0.7 us GPU to GPU through the NVSwitch (the TACOS paper's DGX-1 NVLink figure,
//! 0.35 us a hop), 2 us through a rail (1 us a NIC hop); a route between rails crosses a
//! spine, which adds two hops of 0.25 us (an InfiniBand switch forwards in a fraction of
//! a microsecond; most of the 2 us is at the ends), 2.5 us in all.

use super::builders::{
    add_spines, compose, compose_fabric, reducing_switches, Dim, DimKind, LinkSet, Spines,
};
use super::limits::MAX_NICS;
use super::{NodeNics, Topology};
use crate::error::{Error, Result};

/// Names and descriptions of the presets, for help texts and error messages.
pub const PRESETS: &[(&str, &str)] = &[
    ("dgx1", "DGX-1 (V100): 8 GPUs, hybrid cube-mesh NVLink, 25 GB/s a link, some pairs doubled; one node"),
    ("dgx2", "DGX-2 (V100): 16 GPUs on an NVSwitch, 150 GB/s a GPU; 8 EDR NICs (12.5 GB/s), each shared by a GPU pair: 6.25 GB/s a GPU on its rail"),
    ("hgx-a100", "HGX A100: 8 GPUs on an NVSwitch, 300 GB/s a GPU; 8 HDR NICs (25 GB/s), one per GPU"),
    ("dgx-a100", "DGX A100: as hgx-a100, nodes=2 by default"),
    ("hgx-h100", "HGX H100: 8 GPUs on an NVSwitch, 450 GB/s a GPU; 8 NDR NICs (50 GB/s), one per GPU"),
    ("dgx-h100", "DGX H100: as hgx-h100, nodes=2 by default"),
    ("ndv4", "Azure NDv4: as hgx-a100 (A100, 8 x HDR 200 Gb/s NICs)"),
];

/// GB/s of one NVLink, per direction.
const NVLINK_GBPS: f64 = 25.0;
/// A transfer between two GPUs over NVLink, through the NVSwitch or direct.
const NVLINK_US: f64 = 0.7;
/// A transfer between two nodes through a rail switch.
const IB_US: f64 = 2.0;
/// One hop between a rail switch and a spine switch.
const SPINE_HOP_US: f64 = 0.25;

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

/// What a preset spec may say besides the preset's name (every field optional).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PresetOptions {
    pub nodes: Option<usize>,
    /// GPUs of each node taken (1 to the node's GPUs).
    pub gpus: Option<usize>,
    /// Spine switches over the rails.
    pub spines: Option<usize>,
    /// Oversubscription of the rails' links to the spines.
    pub oversub: Option<f64>,
    /// NICs of each node (a divisor or a multiple of its GPUs).
    pub nics: Option<usize>,
    /// GB/s of each NIC.
    pub nic_gbps: Option<f64>,
    /// GB/s of one NVLink (a GPU's NVSwitch port is its NVLinks' total).
    pub nvlink_gbps: Option<f64>,
    /// GB/s of each GPU's port into the NVSwitch (wins over nvlink=).
    pub nvswitch_gbps: Option<f64>,
    /// The network between nodes reduces (SHARP): `sharp=yes`.
    pub sharp: Option<bool>,
}

/// A node of GPUs on an NVSwitch, and its NICs.
struct Machine {
    gpus: usize,
    nvlinks: f64,
    nics: usize,
    nic_gbps: f64,
    /// A GPU's PCIe link (x16 of its generation), GB/s per direction: the most it moves
    /// to and from its NICs.
    pcie_gbps: f64,
    default_nodes: usize,
    /// Its NVSwitch sums and multicasts inside itself (NVLS: Hopper and later).
    nvls: bool,
}

/// PCIe x16 line rates per direction, GB/s: GT/s x 16 lanes x 128/130 / 8 bits.
const PCIE3_X16_GBPS: f64 = 15.75;
const PCIE4_X16_GBPS: f64 = 31.5;
const PCIE5_X16_GBPS: f64 = 63.0;

fn machine(name: &str) -> Option<Machine> {
    let (gpus, nvlinks, nics, nic_gbps, pcie_gbps, default_nodes, nvls) = match name {
        "dgx2" => (16, 6.0, 8, 12.5, PCIE3_X16_GBPS, 1, false),
        "hgx-a100" | "ndv4" => (8, 12.0, 8, 25.0, PCIE4_X16_GBPS, 1, false),
        "dgx-a100" => (8, 12.0, 8, 25.0, PCIE4_X16_GBPS, 2, false),
        "hgx-h100" => (8, 18.0, 8, 50.0, PCIE5_X16_GBPS, 1, true),
        "dgx-h100" => (8, 18.0, 8, 50.0, PCIE5_X16_GBPS, 2, true),
        _ => return None,
    };
    Some(Machine {
        gpus,
        nvlinks,
        nics,
        nic_gbps,
        pcie_gbps,
        default_nodes,
        nvls,
    })
}

/// How the first `taken` of a node's `gpus` GPUs reach the network through its `nics`
/// NICs of `nic_gbps` (NICs spread evenly: `nics` divides `gpus` or is a multiple of
/// them), each GPU through a PCIe link of `pcie_gbps`: the GB/s the GPU that gets the
/// least has to itself, and the NICs the GPUs taken use.
fn nic_share(
    gpus: usize,
    nics: usize,
    taken: usize,
    nic_gbps: f64,
    pcie_gbps: f64,
) -> (f64, usize) {
    let (share, used) = if nics >= gpus {
        // Each GPU has nics / gpus NICs of its own.
        let own = nics / gpus;
        (own as f64 * nic_gbps, taken * own)
    } else {
        // GPUs i*s .. (i+1)*s - 1 share NIC i; the first NIC has the most GPUs taken.
        let per_nic = gpus / nics;
        (
            nic_gbps / per_nic.min(taken) as f64,
            taken.div_ceil(per_nic),
        )
    };
    (share.min(pcie_gbps), used)
}

/// A flag option's value as `sharp=` takes it.
fn yes_no(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// The error for an option a preset does not take, or takes only in some range.
fn invalid(name: &str, option: &str, value: String, allowed: String) -> Error {
    Error::Invalid {
        input: format!("{option} of preset '{name}'"),
        value,
        allowed,
    }
}

/// Builds the preset `name`.
pub fn preset(name: &str, opts: &PresetOptions) -> Result<Topology> {
    if name == "dgx1" {
        return dgx1(opts);
    }
    let plan = plan(name, opts)?;
    let built = match plan.spines {
        None => compose(plan.label, &plan.dims)?,
        Some(spines) => {
            let (mut fabric, switches) = compose_fabric(plan.label, &plan.dims)?;
            let rails = plan.dims[1];
            let rail_down_gbps = rails.size as f64 * rails.bandwidth_gbps;
            add_spines(&mut fabric, switches[1].clone(), rail_down_gbps, &spines)?;
            let sizes = plan.dims.iter().map(|d| d.size).collect();
            let reducing = reducing_switches(&plan.dims, &switches);
            fabric
                .build()?
                .with_dimensions(sizes)
                .with_reducing(&reducing)?
        }
    };
    Ok(built.with_nics(plan.nics))
}

/// An NVSwitch preset without spines, unbuilt (a cluster is priced from its dimensions);
/// None for DGX-1 and clusters with spines, which only `preset` builds.
pub(crate) struct Composed {
    pub label: String,
    pub dims: Vec<Dim>,
    /// The NICs each node's GPUs use, which `compose` does not record.
    pub nics: NodeNics,
}

/// The preset `name` as dimensions, where it is composed of them alone (see [`Composed`]).
pub(crate) fn preset_dims(name: &str, opts: &PresetOptions) -> Result<Option<Composed>> {
    if name == "dgx1" {
        return Ok(None);
    }
    let plan = plan(name, opts)?;
    Ok(plan.spines.is_none().then_some(Composed {
        label: plan.label,
        dims: plan.dims,
        nics: plan.nics,
    }))
}

/// An NVSwitch preset's name, its NVSwitch dimension (and rails, from two nodes on), its
/// spines and the NICs its GPUs use.
struct Plan {
    label: String,
    dims: Vec<Dim>,
    spines: Option<Spines>,
    nics: NodeNics,
}

fn plan(name: &str, opts: &PresetOptions) -> Result<Plan> {
    let Some(m) = machine(name) else {
        return Err(Error::Unknown {
            what: "preset",
            given: name.into(),
            known: PRESETS.iter().map(|p| p.0).collect(),
        });
    };
    let nodes = opts.nodes.unwrap_or(m.default_nodes);
    if nodes == 0 {
        return Err(invalid(name, "nodes=", "0".into(), "at least 1".into()));
    }
    let gpus = opts.gpus.unwrap_or(m.gpus);
    if !(1..=m.gpus).contains(&gpus) {
        return Err(invalid(
            name,
            "gpus=",
            gpus.to_string(),
            format!("1 to {} (GPUs of each node taken)", m.gpus),
        ));
    }
    let spines =
        match (opts.spines, opts.oversub) {
            (None, None) => None,
            (None, Some(r)) => return Err(invalid(
                name,
                "oversub=",
                r.to_string(),
                "given with spine=K: it is the oversubscription of the rails' links to the spines"
                    .into(),
            )),
            (Some(k), _) if nodes < 2 => {
                return Err(invalid(
                    name,
                    "spine=",
                    k.to_string(),
                    "given with nodes=2 or more: spines join the rails between nodes".into(),
                ))
            }
            (Some(count), oversub) => Some(Spines {
                count,
                oversub: oversub.unwrap_or(1.0),
                hop_latency_us: SPINE_HOP_US,
            }),
        };
    if opts.sharp == Some(true) && nodes < 2 {
        return Err(invalid(
            name,
            "sharp=",
            "yes".into(),
            "given with nodes=2 or more: SHARP reduces in the network between nodes".into(),
        ));
    }
    let nics = opts.nics.unwrap_or(m.nics);
    let spread = nics % m.gpus == 0 || m.gpus % nics == 0;
    if nics == 0 || nics > MAX_NICS || !spread {
        return Err(invalid(
            name,
            "nics=",
            nics.to_string(),
            format!(
                "NICs of each node, a divisor or a multiple of its {} GPUs (spread evenly over them), from 1 to {MAX_NICS}",
                m.gpus
            ),
        ));
    }
    let nvlink = opts.nvlink_gbps.unwrap_or(NVLINK_GBPS);
    let port = opts.nvswitch_gbps.unwrap_or(m.nvlinks * nvlink);
    let nic_gbps = opts.nic_gbps.unwrap_or(m.nic_gbps);
    let (nic, nics_used) = nic_share(m.gpus, nics, gpus, nic_gbps, m.pcie_gbps);
    let mut label = format!("preset:{name}");
    let mut said = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            label.push_str(&format!(",{key}={v}"));
        }
    };
    said(
        "nodes",
        (nodes > 1 || m.default_nodes > 1).then(|| nodes.to_string()),
    );
    said("gpus", opts.gpus.map(|g| g.to_string()));
    said("spine", spines.map(|s| s.count.to_string()));
    said("oversub", spines.map(|s| s.oversub.to_string()));
    said("nics", opts.nics.map(|n| n.to_string()));
    said("nic", opts.nic_gbps.map(|v| v.to_string()));
    said("nvlink", opts.nvlink_gbps.map(|v| v.to_string()));
    said("nvswitch", opts.nvswitch_gbps.map(|v| v.to_string()));
    said("sharp", opts.sharp.map(|s| yes_no(s).to_string()));
    let nvswitch = Dim {
        kind: DimKind::SwitchVertex {
            prefix: Some("nvswitch-node"),
        },
        reduces: m.nvls,
        size: gpus,
        bandwidth_gbps: port,
        latency_us: NVLINK_US,
    };
    let rails = Dim {
        kind: DimKind::SwitchVertex {
            prefix: Some("rail"),
        },
        reduces: false,
        size: nodes,
        bandwidth_gbps: nic,
        latency_us: IB_US,
    };
    let dims = if nodes > 1 {
        vec![nvswitch, rails]
    } else {
        vec![nvswitch]
    };
    Ok(Plan {
        label,
        dims,
        spines,
        nics: NodeNics {
            count: nics_used,
            gbps: nic_gbps,
            sharp: opts.sharp == Some(true),
        },
    })
}

/// DGX-1: one node, its GPUs linked directly (no switch); nvlink= sets a link's GB/s.
fn dgx1(opts: &PresetOptions) -> Result<Topology> {
    let one_node = "1: this preset is one node; nodes= applies to the NVSwitch presets";
    match opts.nodes {
        None | Some(1) => {}
        Some(n) => return Err(invalid("dgx1", "nodes=", n.to_string(), one_node.into())),
    }
    let unused = [
        ("gpus=", opts.gpus.map(|v| v.to_string())),
        ("spine=", opts.spines.map(|v| v.to_string())),
        ("oversub=", opts.oversub.map(|v| v.to_string())),
        ("nics=", opts.nics.map(|v| v.to_string())),
        ("nic=", opts.nic_gbps.map(|v| v.to_string())),
        ("nvswitch=", opts.nvswitch_gbps.map(|v| v.to_string())),
        ("sharp=", opts.sharp.map(|v| yes_no(v).to_string())),
    ];
    if let Some((option, Some(value))) = unused.into_iter().find(|u| u.1.is_some()) {
        return Err(invalid(
            "dgx1",
            option,
            value,
            "left out: DGX-1 is one node of direct NVLinks (it takes nodes=1 and nvlink=)".into(),
        ));
    }
    let nvlink = opts.nvlink_gbps.unwrap_or(NVLINK_GBPS);
    let mut set = LinkSet::default();
    for (i, row) in DGX1_NVLINKS.iter().enumerate() {
        for (j, &count) in row.iter().enumerate() {
            if count > 0 {
                set.add(i, j, count as f64 * nvlink, NVLINK_US);
            }
        }
    }
    set.into_topology("preset:dgx1", 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hopper's NVSwitch reduces (NVLS), an A100's and a V100's do not; rails and spines
    /// never do.
    #[test]
    fn hopper_nvswitches_reduce_and_nothing_else_does() {
        let nodes = |n| PresetOptions {
            nodes: Some(n),
            ..PresetOptions::default()
        };
        let h100 = preset("dgx-h100", &nodes(2)).unwrap();
        let names: Vec<&str> = h100
            .reducing_switches()
            .iter()
            .map(|&v| h100.switch_name(v).unwrap())
            .collect();
        assert_eq!(names, ["nvswitch-node0", "nvswitch-node1"]);
        let spined = PresetOptions {
            spines: Some(2),
            ..nodes(4)
        };
        assert_eq!(
            preset("dgx-h100", &spined)
                .unwrap()
                .reducing_switches()
                .len(),
            4
        );
        assert_eq!(
            preset("hgx-h100", &nodes(1))
                .unwrap()
                .reducing_switches()
                .len(),
            1
        );
        for name in ["dgx-a100", "ndv4", "dgx2"] {
            assert!(
                !preset(name, &nodes(2)).unwrap().has_reducing_switch(),
                "{name}"
            );
        }
    }

    fn dims(name: &str, opts: PresetOptions) -> (String, Vec<Dim>) {
        let composed = preset_dims(name, &opts).unwrap().unwrap();
        (composed.label, composed.dims)
    }

    #[test]
    fn names_say_the_nodes_and_every_option_given() {
        let nodes = |n| PresetOptions {
            nodes: Some(n),
            ..PresetOptions::default()
        };
        assert_eq!(dims("hgx-h100", nodes(1)).0, "preset:hgx-h100");
        assert_eq!(dims("hgx-h100", nodes(3)).0, "preset:hgx-h100,nodes=3");
        // The cluster presets always say their nodes, as before.
        let (label, d) = dims("dgx-a100", PresetOptions::default());
        assert_eq!(label, "preset:dgx-a100,nodes=2");
        assert_eq!(d.len(), 2);
        let opts = PresetOptions {
            gpus: Some(4),
            nic_gbps: Some(12.5),
            ..nodes(2)
        };
        assert_eq!(dims("ndv4", opts).0, "preset:ndv4,nodes=2,gpus=4,nic=12.5");
        let shared = PresetOptions {
            nics: Some(4),
            ..nodes(2)
        };
        assert_eq!(dims("dgx-h100", shared).0, "preset:dgx-h100,nodes=2,nics=4");
        let spined = PresetOptions {
            spines: Some(2),
            oversub: Some(2.0),
            ..nodes(4)
        };
        assert!(preset_dims("dgx-h100", &spined).unwrap().is_none());
        let t = preset("dgx-h100", &spined).unwrap();
        assert_eq!(t.name(), "preset:dgx-h100,nodes=4,spine=2,oversub=2");
        assert_eq!(t.dimensions(), Some(&[8, 4][..]));
    }

    #[test]
    fn a_single_node_has_no_rails() {
        let (_, d) = dims(
            "dgx-h100",
            PresetOptions {
                nodes: Some(1),
                ..PresetOptions::default()
            },
        );
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].size, d[0].bandwidth_gbps), (8, 450.0));
    }
}
