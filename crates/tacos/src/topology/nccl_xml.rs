//! Import of NCCL topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`) as a fabric:
//! GPUs are NPUs; NVSwitches, the PCIe tree and the network's rails are switch vertices.
//!
//! GPUs are `<pci>` devices of class 0x0300/0x0302; their `<gpu>` child may list
//! `<nvlink target=... count=...>` to other GPUs (direct NVLinks, kept as GPU-to-GPU
//! links) or to NVSwitches. A node's NVSwitches become one switch vertex `node<N>.nvswitch`:
//! NCCL spreads every GPU's NVLinks over all of them and treats them as one fabric, so
//! each GPU gets one link up and one link down with its total NVLink bandwidth to the
//! switches. A file without NVLinks joins its GPUs through one vertex as well,
//! `node<N>.nvswitch` when the nvswitch= option says they share one, else `node<N>.pcie`
//! at each GPU's PCIe bandwidth. Each hop into or out of these switches takes half the
//! option's latency, so a GPU-to-GPU route takes the whole.
//!
//! NICs are class 0x0200/0x0207 with `<net speed>` in Mb/s; each GPU uses the NIC closest
//! to it in the PCI tree. With several nodes (identical copies of the file) the network is
//! rail-optimized, as NCCL's rings and trees assume: the NIC a GPU uses is its link up to,
//! and down from, a rail switch `rail<R>` joining that NIC of every node, rails numbered
//! in the order of the first GPU (in rank order) using them. A NIC shared by k GPUs gives
//! each a link of 1/k of its speed: a NIC vertex between them would open a PCIe path
//! between those GPUs that routes inside the node would take. A file that lists no NIC
//! gives no rails to tell apart, so every GPU gets its own NIC of the nic= speed into one
//! `network` switch (a non-blocking fabric), with a warning. Each network hop takes half
//! the NIC latency. The topology records the NICs the GPUs use (`Topology::nics`: how
//! many, the fastest one's speed), which NCCL's search lays its channels over.
//!
//! Cloud images often ship partial files (only the PCI tree). What is missing is taken from
//! the options (or their defaults) and every such choice is reported as a warning.
//!
//! Every figure is checked before use: bandwidths (options, PCIe `link_speed` x
//! `link_width`, `<net speed>`) and latencies against `limits`' ranges, NVLink counts
//! from 1 to `MAX_NVLINK_COUNT`, and the vertices and links of all nodes together against
//! `MAX_NPUS` and `MAX_LINKS` before any link is built. The GPUs are checked against each
//! other too (`check_consistent`): a repeated bus id or device number, or an NVLink to a GPU
//! the file lacks, is an error naming the element.

use super::limits::{
    bandwidth_in_range, check_bandwidth, check_latency, check_links, check_npus, BANDWIDTH_ALLOWED,
};
use super::{Link, NodeNics, Topology};
use crate::error::{echo, Error, FileFormat, FileProblem, Result};
use crate::xmltree::{self, Element};
use std::collections::{BTreeMap, HashMap, HashSet};
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
    /// Where the GPU's `<pci>` element and each of its `<nvlink>` elements are, for
    /// errors.
    at: At,
    nvlinks_at: Vec<At>,
    /// Bus ids (or `cpu<numa>`) of the PCI ancestors, outermost first.
    ancestors: Vec<String>,
    pcie_gbps: Option<f64>,
}

struct Nic {
    gbps: Option<f64>,
    /// One of its ports reduces in the network (`coll="1"`: SHARP).
    coll: bool,
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
    let root = xmltree::parse(text, origin).map_err(|p| p.of(FileFormat::Topology))?;
    if root.name != "system" {
        return Err(At::of(origin, &root).problem(format!(
            "the root element is <{}>, expected <system> (an NCCL topology file)",
            echo(&root.name)
        )));
    }
    check_options(options)?;
    let (mut gpus, nics, switch_busids, listed) = collect(&root, origin)?;
    if gpus.is_empty() {
        return Err(FileProblem::new(
            origin.as_str(),
            "no GPU found (no <pci> of class 0x0300 or 0x0302)",
        )
        .of(FileFormat::Topology));
    }
    check_consistent(&gpus, &switch_busids, &listed)?;
    // Rank order: the CUDA device number where the file gives it, else bus id order.
    gpus.sort_by(|a, b| (a.dev, &a.busid).cmp(&(b.dev, &b.busid)));
    let mut warnings = Vec::new();
    let node = intra_node(&gpus, &switch_busids, options, origin, &mut warnings);
    let network =
        (options.nodes > 1).then(|| network(&gpus, &nics, options, origin, &mut warnings));
    let name = if options.nodes > 1 {
        format!("{origin} x {} nodes", options.nodes)
    } else {
        origin.to_string()
    };
    let mut topology = build(name, gpus.len(), &node, network.as_ref(), options)?;
    if let Some(nics) = network.as_ref().and_then(|n| n.nics) {
        topology = topology.with_nics(nics);
    }
    Ok(NcclImport {
        topology,
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

/// The GPUs, the NICs, the NVSwitches' bus ids and every `<pci>` bus id in the file.
type Collected = (Vec<Gpu>, Vec<Nic>, Vec<String>, HashSet<String>);

fn collect(root: &Element, origin: &str) -> Result<Collected> {
    let mut gpus = Vec::new();
    let mut nics = Vec::new();
    let mut switches = Vec::new();
    let mut listed = HashSet::new();
    for (path, e) in root.walk() {
        let ancestors: Vec<String> = path
            .iter()
            .filter_map(|a| match a.name.as_str() {
                "pci" => a.attr("busid").map(str::to_ascii_lowercase),
                "cpu" => Some(format!("cpu{}", a.attr("numaid").unwrap_or("?"))),
                _ => None,
            })
            .collect();
        if e.name == "pci" {
            listed.extend(e.attr("busid").map(str::to_ascii_lowercase));
        }
        match e.name.as_str() {
            "pci" if is_gpu(&class_of(e)) => {
                let busid = e
                    .attr("busid")
                    .ok_or_else(|| At::of(origin, e).problem("GPU <pci> without busid"))?
                    .to_ascii_lowercase();
                let gpu_el = e.children.iter().find(|c| c.name == "gpu");
                let mut nvlinks = Vec::new();
                let mut nvlinks_at = Vec::new();
                let (mut dev, mut sm) = (None, None);
                if let Some(gpu_el) = gpu_el {
                    dev = number(gpu_el, "dev", origin)?;
                    sm = number(gpu_el, "sm", origin)?;
                    for l in gpu_el.children.iter().filter(|c| c.name == "nvlink") {
                        let target = l
                            .attr("target")
                            .ok_or_else(|| At::of(origin, l).problem("<nvlink> without target"))?;
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
                        nvlinks_at.push(At::of(origin, l));
                    }
                }
                gpus.push(Gpu {
                    busid,
                    dev,
                    sm,
                    nvlinks,
                    at: At::of(origin, e),
                    nvlinks_at,
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
                let mut coll = false;
                for net in e.children.iter().filter(|c| c.name == "net") {
                    coll |= number::<i64>(net, "coll", origin)?.is_some_and(|c| c != 0);
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
                    coll,
                    ancestors,
                });
            }
            "pci" if is_nic(&class_of(e)) && !e.children.iter().any(|c| c.name == "nic") => {
                let mut ancestors = ancestors;
                ancestors.extend(e.attr("busid").map(str::to_ascii_lowercase));
                nics.push(Nic {
                    gbps: None,
                    coll: false,
                    ancestors,
                });
            }
            _ => {}
        }
    }
    Ok((gpus, nics, switches, listed))
}

/// Where an element is in the file: `origin:line:column` in messages.
#[derive(Clone, Debug)]
struct At {
    origin: String,
    line: usize,
    column: usize,
}

impl At {
    fn of(origin: &str, e: &Element) -> At {
        At {
            origin: origin.to_string(),
            line: e.line,
            column: e.column,
        }
    }

    /// The file's problem at this element.
    fn problem(&self, what: impl Into<String>) -> Error {
        FileProblem::new(self.origin.as_str(), what)
            .at(self.line, self.column)
            .of(FileFormat::Topology)
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.origin, self.line, self.column)
    }
}

/// Refuses a file whose GPUs contradict each other, naming the element: two GPUs with one
/// bus id or one CUDA device number, an NVLink from a GPU to itself, or one to a bus id
/// that the file lists nowhere and whose class (`tclass`) does not say it is an NVSwitch
/// or a CPU (an NVLink whose class says GPU must lead to one of the file's GPUs). Silently
/// dropped, such an NVLink would change the topology.
fn check_consistent(gpus: &[Gpu], switches: &[String], listed: &HashSet<String>) -> Result<()> {
    let mut busids: HashMap<&str, &At> = HashMap::new();
    let mut devs: HashMap<usize, &At> = HashMap::new();
    for gpu in gpus {
        if let Some(first) = busids.insert(&gpu.busid, &gpu.at) {
            return Err(gpu.at.problem(format!(
                "GPU <pci busid=\"{}\"> has the bus id of the GPU at {first}",
                echo(&gpu.busid)
            )));
        }
        if let Some(dev) = gpu.dev {
            if let Some(first) = devs.insert(dev, &gpu.at) {
                return Err(gpu.at.problem(format!(
                    "GPU <gpu dev=\"{dev}\"> has the device number of the GPU at {first}"
                )));
            }
        }
    }
    for gpu in gpus {
        for ((target, _, tclass), at) in gpu.nvlinks.iter().zip(&gpu.nvlinks_at) {
            let to_gpu = busids.contains_key(target.as_str());
            let why = if *target == gpu.busid {
                "leads back to its own GPU"
            } else if to_gpu || switches.contains(target) {
                continue;
            } else if tclass.as_deref().is_some_and(is_gpu) {
                "is a GPU by its tclass, but the file lists no GPU with that bus id"
            } else if tclass.is_some() || listed.contains(target) {
                // An NVSwitch or a CPU, said by its class or listed in the PCI tree.
                continue;
            } else {
                "names a bus id the file lists nowhere, and no tclass says what it is"
            };
            return Err(at.problem(format!(
                "<nvlink target=\"{}\"> of the GPU at {} {why}",
                echo(target),
                gpu.at
            )));
        }
    }
    Ok(())
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

/// One node's links in local GPU numbers, repeated for every node.
struct Node {
    /// Direct NVLinks: (from, to, GB/s).
    direct: Vec<(usize, usize, f64)>,
    /// The switch joining the node's GPUs, if any: its name within the node and each
    /// GPU's port bandwidth (0 for a GPU not on it).
    hub: Option<(&'static str, Vec<f64>)>,
    /// Latency of a direct link; a hop into or out of the hub takes half.
    latency_us: f64,
    /// The hub is an NVSwitch that reduces inside itself (NVLS): every GPU is Hopper or
    /// later (`sm` 90 and up).
    reduces: bool,
}

/// The network between nodes.
struct Network {
    /// Its switches: `rail<R>`, or the one `network`.
    switches: Vec<String>,
    /// Per GPU of a node: (its switch, as an index into `switches`; its GB/s).
    ports: Vec<(usize, f64)>,
    /// The NICs the GPUs use, where the file lists them.
    nics: Option<NodeNics>,
}

/// Makes `nodes` copies of `node` joined by `network`, checking the counts first.
fn build(
    name: String,
    g: usize,
    node: &Node,
    network: Option<&Network>,
    options: &NcclImportOptions,
) -> Result<Topology> {
    let nodes = options.nodes;
    let hub_ports = node
        .hub
        .as_ref()
        .map_or(0, |(_, ports)| ports.iter().filter(|&&bw| bw > 0.0).count());
    let per_node_switches = u128::from(node.hub.is_some());
    let network_switches = network.map_or(0, |n| n.switches.len()) as u128;
    let (gpus, copies) = (g as u128, nodes as u128);
    let context = || format!("{name}: GPUs and switches");
    let npus = check_npus(gpus * copies, context)?;
    check_npus(
        gpus * copies + per_node_switches * copies + network_switches,
        context,
    )?;
    let per_node_links = node.direct.len() as u128 + 2 * hub_ports as u128;
    let network_links = if network.is_some() { 2 * gpus } else { 0 };
    let count = check_links(copies * (per_node_links + network_links), || {
        format!("{name}: links")
    })?;
    let mut switches = Vec::new();
    let mut reducing = Vec::new();
    let mut links = Vec::with_capacity(count);
    let mut both = |a: usize, b: usize, bandwidth_gbps: f64, latency_us: f64| {
        for (src, dst) in [(a, b), (b, a)] {
            links.push(Link {
                src,
                dst,
                bandwidth_gbps,
                latency_us,
            });
        }
    };
    for n in 0..nodes {
        let base = n * g;
        if let Some((hub, ports)) = &node.hub {
            let s = npus + switches.len();
            switches.push(format!("node{n}.{hub}"));
            if node.reduces {
                reducing.push(s);
            }
            for (i, &bw) in ports.iter().enumerate().filter(|&(_, &bw)| bw > 0.0) {
                both(base + i, s, bw, node.latency_us / 2.0);
            }
        }
    }
    if let Some(net) = network {
        let first = npus + switches.len();
        switches.extend(net.switches.iter().cloned());
        for n in 0..nodes {
            for (i, &(rail, bw)) in net.ports.iter().enumerate() {
                both(n * g + i, first + rail, bw, options.nic_latency_us / 2.0);
            }
        }
    }
    for n in 0..nodes {
        for &(a, b, bw) in &node.direct {
            links.push(Link {
                src: n * g + a,
                dst: n * g + b,
                bandwidth_gbps: bw,
                latency_us: node.latency_us,
            });
        }
    }
    Topology::with_switches(name, npus, switches, links)?.with_reducing(&reducing)
}

/// The links inside one node: direct NVLinks, and the switch (NVSwitch, else PCIe)
/// joining its GPUs.
fn intra_node(
    gpus: &[Gpu],
    switch_busids: &[String],
    options: &NcclImportOptions,
    origin: &str,
    warnings: &mut Vec<String>,
) -> Node {
    let g = gpus.len();
    let index: HashMap<&str, usize> = gpus
        .iter()
        .enumerate()
        .map(|(i, gpu)| (gpu.busid.as_str(), i))
        .collect();
    let any_nvlink = gpus.iter().any(|gpu| !gpu.nvlinks.is_empty());
    if !any_nvlink {
        let (hub, ports, latency_us) = if g < 2 {
            return Node {
                direct: Vec::new(),
                hub: None,
                latency_us: options.nvlink_latency_us,
                reduces: false,
            };
        } else if let Some(per_gpu) = options.nvswitch_gbps {
            warnings.push(format!(
                "{origin}: the file lists no NVLinks; joining its {g} GPUs through an NVSwitch at {per_gpu} GB/s each (nvswitch= option)"
            ));
            ("nvswitch", vec![per_gpu; g], options.nvlink_latency_us)
        } else {
            let per_gpu: Vec<f64> = gpus
                .iter()
                .map(|gpu| gpu.pcie_gbps.unwrap_or(16.0))
                .collect();
            warnings.push(format!(
                "{origin}: the file lists no NVLinks; joining its {g} GPUs over PCIe only ({:.1} GB/s each); set nvswitch=GBPS if they share an NVSwitch",
                per_gpu.iter().cloned().fold(f64::INFINITY, f64::min)
            ));
            ("pcie", per_gpu, options.pcie_latency_us)
        };
        return Node {
            direct: Vec::new(),
            reduces: hub == "nvswitch" && nvls_generation(gpus),
            hub: Some((hub, ports)),
            latency_us,
        };
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
    // A switch with one GPU on it joins nothing.
    let on_switch = into_switch.iter().filter(|&&bw| bw > 0.0).count();
    Node {
        direct: direct.into_iter().map(|((a, b), bw)| (a, b, bw)).collect(),
        hub: (on_switch > 1).then_some(("nvswitch", into_switch)),
        latency_us: options.nvlink_latency_us,
        reduces: on_switch > 1 && nvls_generation(gpus),
    }
}

/// Whether every GPU is of a generation whose NVSwitch reduces (NVLS: Hopper, `sm` 90,
/// and later); unknown generations do not.
fn nvls_generation(gpus: &[Gpu]) -> bool {
    !gpus.is_empty() && gpus.iter().all(|gpu| gpu.sm.is_some_and(|sm| sm >= 90))
}

/// Each GPU's way off the node: its NIC's rail and its share of the NIC's speed. A GPU
/// uses the NIC sharing its deepest PCI ancestor.
fn network(
    gpus: &[Gpu],
    nics: &[Nic],
    options: &NcclImportOptions,
    origin: &str,
    warnings: &mut Vec<String>,
) -> Network {
    let fallback = options.nic_gbps.unwrap_or(DEFAULT_NIC_GBPS);
    if nics.is_empty() {
        warnings.push(format!(
            "{origin}: the file lists no NIC, so no rails can be told apart; giving each GPU its own {fallback} GB/s NIC (nic= option) into one non-blocking network switch"
        ));
        return Network {
            switches: vec!["network".into()],
            ports: vec![(0, fallback); gpus.len()],
            nics: None,
        };
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
    let speed = |k: usize| match options.nic_gbps {
        Some(forced) => forced,
        None => nics[k].gbps.unwrap_or(fallback),
    };
    let mut rail_of = vec![None; nics.len()];
    let mut switches = Vec::new();
    let ports = choice
        .iter()
        .map(|&k| {
            let rail = *rail_of[k].get_or_insert_with(|| {
                switches.push(format!("rail{}", switches.len()));
                switches.len() - 1
            });
            (rail, speed(k) / users[k] as f64)
        })
        .collect();
    let used: Vec<usize> = (0..nics.len()).filter(|&k| users[k] > 0).collect();
    let nics = NodeNics {
        count: used.len(),
        gbps: used.iter().map(|&k| speed(k)).fold(0.0, f64::max),
        sharp: used.iter().any(|&k| nics[k].coll),
    };
    Network {
        switches,
        ports,
        nics: Some(nics),
    }
}
