//! Import of NCCL topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`).
//!
//! GPUs are `<pci>` devices of class 0x0300/0x0302; their `<gpu>` child may list
//! `<nvlink target=... count=...>` to other GPUs (direct NVLinks) or to NVSwitches. An
//! NVSwitch fabric is unwound like every switch here: each GPU's NVLink bandwidth is split
//! evenly over its peers. NICs are class 0x0200/0x0207 with `<net speed>` in Mb/s; each GPU
//! uses the NIC closest to it in the PCI tree, shared evenly by the GPUs that use it. Several
//! nodes of the same machine are joined GPU by GPU through rail switches, unwound.
//!
//! Cloud images often ship partial files (only the PCI tree). What is missing is taken from
//! the options (or their defaults) and every such choice is reported as a warning.
//!
//! Every figure is checked before use: bandwidths (options, PCIe `link_speed` x
//! `link_width`, `<net speed>`) and latencies against `limits`' ranges, NVLink counts
//! from 1 to `MAX_NVLINK_COUNT`, and the NPUs and links of all nodes together against
//! `MAX_NPUS` and `MAX_LINKS` before any link is built.

use super::builders::LinkSet;
use super::limits::{
    bandwidth_in_range, check_bandwidth, check_latency, check_links, check_npus, BANDWIDTH_ALLOWED,
};
use super::Topology;
use crate::error::{echo, Error, Result};
use crate::xmltree::{self, Element};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Figures the file may lack, and how many nodes the cluster has.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclImportOptions {
    /// Identical nodes joined through rail switches.
    pub nodes: usize,
    /// GB/s per NVLink per direction; by default from the GPU generation (`sm`).
    pub nvlink_gbps: Option<f64>,
    /// GB/s per GPU into an NVSwitch, used when the file lists no NVLinks at all.
    pub nvswitch_gbps: Option<f64>,
    /// GB/s per NIC when the file gives no speed (default 25, a 200 Gb/s HDR port).
    pub nic_gbps: Option<f64>,
    pub nvlink_latency_us: f64,
    pub pcie_latency_us: f64,
    pub nic_latency_us: f64,
}

impl Default for NcclImportOptions {
    fn default() -> Self {
        NcclImportOptions {
            nodes: 1,
            nvlink_gbps: None,
            nvswitch_gbps: None,
            nic_gbps: None,
            nvlink_latency_us: 0.7,
            pcie_latency_us: 1.0,
            nic_latency_us: 2.0,
        }
    }
}

/// An imported topology and what had to be assumed to build it.
#[derive(Clone, Debug)]
pub struct NcclImport {
    pub topology: Topology,
    /// GPU PCI bus ids in rank order within a node.
    pub gpu_busids: Vec<String>,
    pub warnings: Vec<String>,
}

const DEFAULT_NIC_GBPS: f64 = 25.0;

/// Most NVLinks one `<nvlink>` element may count (GPUs have at most 18 today).
pub const MAX_NVLINK_COUNT: u32 = 1024;

struct Gpu {
    busid: String,
    dev: Option<usize>,
    sm: Option<u32>,
    /// (target bus id, NVLink count, target class when given)
    nvlinks: Vec<(String, u32, Option<String>)>,
    /// Bus ids (or `cpu<numa>`) of the PCI ancestors, outermost first.
    ancestors: Vec<String>,
    pcie_gbps: Option<f64>,
}

struct Nic {
    gbps: Option<f64>,
    ancestors: Vec<String>,
}

/// The largest NCCL topology file read; NCCL's own are a few kilobytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads an NCCL topology file.
pub fn read(path: &Path, options: &NcclImportOptions) -> Result<NcclImport> {
    let text = crate::fsio::read_text(path, "an NCCL topology file", MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string(), options)
}

/// Parses NCCL topology XML; `origin` names it in errors and warnings.
pub fn parse(text: &str, origin: &str, options: &NcclImportOptions) -> Result<NcclImport> {
    let origin = &echo(origin);
    let root = xmltree::parse(text, origin).map_err(Error::Spec)?;
    if root.name != "system" {
        return Err(Error::Spec(format!(
            "{origin}:{}:{}: the root element is <{}>, expected <system> (an NCCL topology file)",
            root.line,
            root.column,
            echo(&root.name)
        )));
    }
    check_options(options)?;
    let (mut gpus, nics, switch_busids) = collect(&root, origin)?;
    if gpus.is_empty() {
        return Err(Error::Spec(format!(
            "{origin}: no GPU found (no <pci> of class 0x0300 or 0x0302)"
        )));
    }
    // At most every GPU pair of a node, and every pair of nodes on each rail.
    let (g, nodes) = (gpus.len() as u128, options.nodes as u128);
    let context = || format!("{origin} on {nodes} node(s)");
    check_npus(g * nodes, context)?;
    check_links(nodes * g * (g - 1) + g * nodes * (nodes - 1), context)?;
    // Rank order: the CUDA device number where the file gives it, else bus id order.
    gpus.sort_by(|a, b| (a.dev, &a.busid).cmp(&(b.dev, &b.busid)));
    let mut warnings = Vec::new();
    let g = gpus.len();
    let mut set = LinkSet::default();
    intra_node(
        &gpus,
        &switch_busids,
        options,
        origin,
        &mut warnings,
        &mut |a, b, bw, lat| {
            for node in 0..options.nodes {
                set.add(node * g + a, node * g + b, bw, lat);
            }
        },
    );
    if options.nodes > 1 {
        let rail = rail_bandwidths(&gpus, &nics, options, origin, &mut warnings);
        let peers = options.nodes - 1;
        for (local, &bw) in rail.iter().enumerate() {
            for a in 0..options.nodes {
                for b in 0..options.nodes {
                    if a != b {
                        set.add(
                            a * g + local,
                            b * g + local,
                            bw / peers as f64,
                            options.nic_latency_us,
                        );
                    }
                }
            }
        }
    }
    let name = if options.nodes > 1 {
        format!("{origin} x {} nodes", options.nodes)
    } else {
        origin.to_string()
    };
    Ok(NcclImport {
        topology: set.into_topology(name, g * options.nodes)?,
        gpu_busids: gpus.into_iter().map(|gpu| gpu.busid).collect(),
        warnings,
    })
}

/// Checks the figures the options give.
fn check_options(options: &NcclImportOptions) -> Result<()> {
    if options.nodes == 0 {
        return Err(Error::Invalid {
            input: "nodes".into(),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    let bandwidths = [
        ("nvlink= (GB/s per NVLink)", options.nvlink_gbps),
        ("nvswitch= (GB/s per GPU)", options.nvswitch_gbps),
        ("nic= (GB/s per NIC)", options.nic_gbps),
    ];
    for (input, gbps) in bandwidths {
        if let Some(gbps) = gbps {
            check_bandwidth(input, gbps)?;
        }
    }
    check_latency("NVLink latency", options.nvlink_latency_us)?;
    check_latency("PCIe latency", options.pcie_latency_us)?;
    check_latency("NIC latency", options.nic_latency_us)?;
    Ok(())
}

/// Where an element is, for error messages: `file:line:column: <name> attribute key`.
fn attribute(e: &Element, key: &str, origin: &str) -> String {
    format!(
        "{origin}:{}:{}: <{}> attribute {key}",
        e.line,
        e.column,
        echo(&e.name)
    )
}

fn class_of(e: &Element) -> String {
    e.attr("class").unwrap_or("").to_ascii_lowercase()
}

fn is_gpu(class: &str) -> bool {
    class.starts_with("0x0302") || class.starts_with("0x0300")
}

fn is_nic(class: &str) -> bool {
    class.starts_with("0x0207") || class.starts_with("0x0200")
}

fn is_nvswitch(class: &str) -> bool {
    class.starts_with("0x0680")
}

/// PCIe bandwidth of a device from `link_speed` ("16 GT/s", "32.0 GT/s PCIe") and
/// `link_width`, in GB/s: GT/s x lanes x 128/130 (encoding) / 8 bits. `None` when either
/// is missing, not a number (NCCL writes "Unknown") or not positive; an error when they
/// give a bandwidth out of range.
fn pcie_gbps(e: &Element, origin: &str) -> Result<Option<f64>> {
    let first_number =
        |key: &str| -> Option<f64> { e.attr(key)?.split_whitespace().next()?.parse().ok() };
    let (Some(speed), Some(width)) = (first_number("link_speed"), first_number("link_width"))
    else {
        return Ok(None);
    };
    if speed <= 0.0 || width <= 0.0 {
        return Ok(None);
    }
    let gbps = speed * width * 128.0 / 130.0 / 8.0;
    if bandwidth_in_range(gbps) {
        Ok(Some(gbps))
    } else {
        Err(Error::Invalid {
            input: attribute(e, "link_speed x link_width", origin),
            value: format!(
                "{} x {}",
                e.attr("link_speed").unwrap_or_default(),
                e.attr("link_width").unwrap_or_default()
            ),
            allowed: format!("a PCIe link of {BANDWIDTH_ALLOWED}"),
        })
    }
}

fn number<T: std::str::FromStr>(e: &Element, key: &str, origin: &str) -> Result<Option<T>> {
    e.attr(key)
        .map(|v| {
            v.trim().parse().map_err(|_| Error::Invalid {
                input: attribute(e, key, origin),
                value: v.into(),
                allowed: "a number".into(),
            })
        })
        .transpose()
}

type Collected = (Vec<Gpu>, Vec<Nic>, Vec<String>);

fn collect(root: &Element, origin: &str) -> Result<Collected> {
    let mut gpus = Vec::new();
    let mut nics = Vec::new();
    let mut switches = Vec::new();
    for (path, e) in root.walk() {
        let ancestors: Vec<String> = path
            .iter()
            .filter_map(|a| match a.name.as_str() {
                "pci" => a.attr("busid").map(str::to_ascii_lowercase),
                "cpu" => Some(format!("cpu{}", a.attr("numaid").unwrap_or("?"))),
                _ => None,
            })
            .collect();
        match e.name.as_str() {
            "pci" if is_gpu(&class_of(e)) => {
                let busid = e
                    .attr("busid")
                    .ok_or_else(|| {
                        Error::Spec(format!(
                            "{origin}:{}:{}: GPU <pci> without busid",
                            e.line, e.column
                        ))
                    })?
                    .to_ascii_lowercase();
                let gpu_el = e.children.iter().find(|c| c.name == "gpu");
                let mut nvlinks = Vec::new();
                let (mut dev, mut sm) = (None, None);
                if let Some(gpu_el) = gpu_el {
                    dev = number(gpu_el, "dev", origin)?;
                    sm = number(gpu_el, "sm", origin)?;
                    for l in gpu_el.children.iter().filter(|c| c.name == "nvlink") {
                        let target = l.attr("target").ok_or_else(|| {
                            Error::Spec(format!(
                                "{origin}:{}:{}: <nvlink> without target",
                                l.line, l.column
                            ))
                        })?;
                        let count = number(l, "count", origin)?.unwrap_or(1);
                        if !(1..=MAX_NVLINK_COUNT).contains(&count) {
                            return Err(Error::Invalid {
                                input: attribute(l, "count", origin),
                                value: count.to_string(),
                                allowed: format!(
                                    "a number of NVLinks from 1 to {MAX_NVLINK_COUNT}"
                                ),
                            });
                        }
                        nvlinks.push((
                            target.to_ascii_lowercase(),
                            count,
                            l.attr("tclass").map(str::to_ascii_lowercase),
                        ));
                    }
                }
                gpus.push(Gpu {
                    busid,
                    dev,
                    sm,
                    nvlinks,
                    ancestors,
                    pcie_gbps: pcie_gbps(e, origin)?,
                });
            }
            "pci" if is_nvswitch(&class_of(e)) => {
                if let Some(b) = e.attr("busid") {
                    switches.push(b.to_ascii_lowercase());
                }
            }
            "nic" => {
                let mut mbps = 0.0;
                let mut known = false;
                for net in e.children.iter().filter(|c| c.name == "net") {
                    if let Some(speed) = number::<f64>(net, "speed", origin)? {
                        if !bandwidth_in_range(speed / 8000.0) {
                            return Err(Error::Invalid {
                                input: attribute(net, "speed", origin),
                                value: net.attr("speed").unwrap_or_default().into(),
                                allowed:
                                    "a number of Mb/s from 8 to 8000000000 (0.001 to 1000000 GB/s)"
                                        .into(),
                            });
                        }
                        mbps += speed;
                        known = true;
                    }
                }
                // The NIC's PCI device is its parent; it is already among the ancestors.
                nics.push(Nic {
                    gbps: known.then_some(mbps / 8000.0),
                    ancestors,
                });
            }
            "pci" if is_nic(&class_of(e)) && !e.children.iter().any(|c| c.name == "nic") => {
                let mut ancestors = ancestors;
                ancestors.extend(e.attr("busid").map(str::to_ascii_lowercase));
                nics.push(Nic {
                    gbps: None,
                    ancestors,
                });
            }
            _ => {}
        }
    }
    Ok((gpus, nics, switches))
}

/// NVLink bandwidth per link for a GPU generation, per direction.
fn nvlink_default(sm: Option<u32>) -> Option<f64> {
    match sm? {
        60..=69 => Some(20.0),
        70..=89 => Some(25.0),
        90..=99 => Some(20.6),
        _ => None,
    }
}

fn intra_node(
    gpus: &[Gpu],
    switch_busids: &[String],
    options: &NcclImportOptions,
    origin: &str,
    warnings: &mut Vec<String>,
    add: &mut dyn FnMut(usize, usize, f64, f64),
) {
    let g = gpus.len();
    let index: HashMap<&str, usize> = gpus
        .iter()
        .enumerate()
        .map(|(i, gpu)| (gpu.busid.as_str(), i))
        .collect();
    let any_nvlink = gpus.iter().any(|gpu| !gpu.nvlinks.is_empty());
    if !any_nvlink {
        if g < 2 {
            return;
        }
        if let Some(per_gpu) = options.nvswitch_gbps {
            warnings.push(format!(
                "{origin}: the file lists no NVLinks; joining its {g} GPUs through an NVSwitch at {per_gpu} GB/s each (nvswitch= option)"
            ));
            unwound(g, &vec![per_gpu; g], options.nvlink_latency_us, add);
        } else {
            let per_gpu: Vec<f64> = gpus
                .iter()
                .map(|gpu| gpu.pcie_gbps.unwrap_or(16.0))
                .collect();
            warnings.push(format!(
                "{origin}: the file lists no NVLinks; joining its {g} GPUs over PCIe only ({:.1} GB/s each); set nvswitch=GBPS if they share an NVSwitch",
                per_gpu.iter().cloned().fold(f64::INFINITY, f64::min)
            ));
            unwound(g, &per_gpu, options.pcie_latency_us, add);
        }
        return;
    }
    let mut per_link_warned = false;
    let mut direct: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    let mut into_switch = vec![0.0; g];
    for (i, gpu) in gpus.iter().enumerate() {
        let per_link = match options.nvlink_gbps.or(nvlink_default(gpu.sm)) {
            Some(bw) => bw,
            None => {
                if !per_link_warned {
                    warnings.push(format!(
                        "{origin}: GPU generation unknown (no sm attribute); counting 25 GB/s per NVLink (nvlink= option)"
                    ));
                    per_link_warned = true;
                }
                25.0
            }
        };
        for (target, count, tclass) in &gpu.nvlinks {
            let bw = *count as f64 * per_link;
            match index.get(target.as_str()) {
                Some(&j) if j != i => *direct.entry((i, j)).or_default() += bw,
                Some(_) => {}
                None => {
                    let to_switch = switch_busids.contains(target)
                        || tclass.as_deref().is_some_and(is_nvswitch);
                    if to_switch {
                        into_switch[i] += bw;
                    }
                    // NVLinks to CPUs (POWER systems) carry no GPU-to-GPU traffic.
                }
            }
        }
    }
    for (&(a, b), &bw) in &direct {
        add(a, b, bw, options.nvlink_latency_us);
    }
    let on_switch: Vec<usize> = (0..g).filter(|&i| into_switch[i] > 0.0).collect();
    if on_switch.len() > 1 {
        let peers = (on_switch.len() - 1) as f64;
        for &a in &on_switch {
            for &b in &on_switch {
                if a != b && !direct.contains_key(&(a, b)) {
                    add(a, b, into_switch[a] / peers, options.nvlink_latency_us);
                }
            }
        }
    }
}

/// Joins `g` GPUs as an unwound switch: GPU i's bandwidth split over its g-1 peers.
fn unwound(g: usize, per_gpu: &[f64], latency: f64, add: &mut dyn FnMut(usize, usize, f64, f64)) {
    for (a, &bw) in per_gpu.iter().enumerate() {
        for b in (0..g).filter(|&b| b != a) {
            add(a, b, bw / (g - 1) as f64, latency);
        }
    }
}

/// Each GPU's bandwidth off the node: its NIC's speed shared among the GPUs that use it.
/// A GPU uses the NIC sharing its deepest PCI ancestor.
fn rail_bandwidths(
    gpus: &[Gpu],
    nics: &[Nic],
    options: &NcclImportOptions,
    origin: &str,
    warnings: &mut Vec<String>,
) -> Vec<f64> {
    let fallback = options.nic_gbps.unwrap_or(DEFAULT_NIC_GBPS);
    if nics.is_empty() {
        warnings.push(format!(
            "{origin}: the file lists no NIC; giving each GPU its own {fallback} GB/s NIC (nic= option)"
        ));
        return vec![fallback; gpus.len()];
    }
    if nics.iter().any(|n| n.gbps.is_none()) {
        warnings.push(format!(
            "{origin}: NIC speeds missing; counting {fallback} GB/s per NIC (nic= option)"
        ));
    }
    let shared = |a: &[String], b: &[String]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let mut users = vec![0usize; nics.len()];
    let choice: Vec<usize> = gpus
        .iter()
        .map(|gpu| {
            // The NICs sharing the deepest PCI ancestor; among them the least used.
            let depth = |k: usize| shared(&gpu.ancestors, &nics[k].ancestors);
            let best = (0..nics.len()).map(depth).max().unwrap_or(0);
            let k = (0..nics.len())
                .filter(|&k| depth(k) == best)
                .min_by_key(|&k| users[k])
                .expect("there is at least one NIC");
            users[k] += 1;
            k
        })
        .collect();
    choice
        .iter()
        .map(|&k| {
            let speed = match options.nic_gbps {
                Some(forced) => forced,
                None => nics[k].gbps.unwrap_or(fallback),
            };
            speed / users[k] as f64
        })
        .collect()
}
