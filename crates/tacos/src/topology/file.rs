//! The topology JSON file: the form users write by hand and `tacos topo export` writes.
//!
//! ```json
//! {
//!   "name": "two-level",
//!   "npus": 4,
//!   "bandwidth_gbps": 50,
//!   "latency_us": 0.5,
//!   "switches": ["nvs0"],
//!   "links": [
//!     { "src": 0, "dst": 1, "bidirectional": true },
//!     { "src": 1, "dst": 2, "bandwidth_gbps": 100, "latency_us": 0.7 },
//!     { "src": 2, "dst": "nvs0", "bidirectional": true },
//!     { "src": 3, "dst": "nvs0", "bidirectional": true }
//!   ],
//!   "failed": []
//! }
//! ```
//!
//! `switches` (optional) names switch vertices; a link's `src` and `dst` are an NPU number
//! or a switch's name. Switches take ids after the NPUs, in the order listed.
//! `bandwidth_gbps` (GB/s) and `latency_us` on a link override the file's top-level
//! defaults, which override the command line's `--bandwidth` and `--latency`.
//! `bidirectional: true` adds the reverse link with the same figures. `nics` (optional)
//! records the NICs each node's GPUs use, which NCCL's search lays its channels over:
//! `{"count": 8, "gbps": 50, "sharp": false}` (`sharp`: the network reduces).
//! `reducing_switches` (optional) names the switches that sum and multicast inside
//! themselves (NVLS: a Hopper or Blackwell NVSwitch), `["nvs0"]`. Unknown fields
//! are errors, so a typo never silently falls back to a default. `npus` and the number of
//! links are checked against `limits::MAX_NPUS` and `MAX_LINKS`, bandwidths and latencies
//! against their ranges, before the topology is built.

use super::limits::{check_bandwidth, check_latency, check_links, check_npus, MAX_NICS};
use super::spec::SpecDefaults;
use super::{check_link, Link, NodeNics, NpuId, Topology};
use crate::error::{echo, Error, FileFormat, FileProblem, Result};
use crate::fsio::parse_json;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Version written by `export`; readers accept files without one.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    npus: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bandwidth_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    latency_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    switches: Vec<String>,
    links: Vec<FileLink>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failed: Vec<NpuId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nics: Option<FileNics>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    reducing_switches: Vec<String>,
}

/// The NICs of a node (`Topology::nics`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNics {
    count: usize,
    gbps: f64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sharp: bool,
}

/// One end of a link: an NPU by number or a switch by name.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum End {
    Npu(NpuId),
    Switch(String),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLink {
    src: End,
    dst: End,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bandwidth_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    latency_us: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    bidirectional: bool,
}

/// The largest topology file read (about twelve million links), checked before reading.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Reads a topology JSON file.
pub fn read(path: &Path, defaults: &SpecDefaults) -> Result<Topology> {
    let text = crate::fsio::read_text(path, "a topology file", MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string(), defaults)
}

/// Parses topology JSON text; `origin` names it in errors (a file name).
pub fn parse(text: &str, origin: &str, defaults: &SpecDefaults) -> Result<Topology> {
    let origin = &echo(origin);
    let file: TopologyFile = parse_json(text, origin).map_err(|p| p.of(FileFormat::Topology))?;
    from_file(file, origin, defaults)
}

/// The topology a parsed file describes; `origin` is already fit to repeat in messages.
fn from_file(file: TopologyFile, origin: &str, defaults: &SpecDefaults) -> Result<Topology> {
    // Errors of the topology's own checks name the file.
    let in_file = |e: Error| match e {
        Error::Invalid {
            input,
            value,
            allowed,
        } => Error::Invalid {
            input: format!("{origin}: {input}"),
            value,
            allowed,
        },
        other => other,
    };
    if let Some(v) = file.version.filter(|&v| v != FORMAT_VERSION) {
        return Err(Error::Invalid {
            input: format!("{origin}: version"),
            value: v.to_string(),
            allowed: format!("{FORMAT_VERSION} (the version this tool reads)"),
        });
    }
    let field = |name: &str| format!("{origin}: {name}");
    if file.npus == 0 {
        return Err(Error::Invalid {
            input: field("npus"),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    check_npus(file.npus as u128 + file.switches.len() as u128, || {
        field("npus and switches")
    })?;
    let mut switch_ids = HashMap::with_capacity(file.switches.len());
    for (i, name) in file.switches.iter().enumerate() {
        if name.is_empty() || switch_ids.insert(name.as_str(), file.npus + i).is_some() {
            return Err(Error::Invalid {
                input: field(&format!("switches[{i}]")),
                value: name.clone(),
                allowed: "a non-empty name no other switch has".into(),
            });
        }
    }
    let vertex = |end: &End, at: String| match end {
        End::Npu(n) => Ok(*n),
        End::Switch(name) => switch_ids
            .get(name.as_str())
            .copied()
            .ok_or_else(|| Error::Invalid {
                input: field(&at),
                value: name.clone(),
                allowed: if file.switches.is_empty() {
                    "an NPU number (the file lists no \"switches\")".into()
                } else {
                    format!(
                        "an NPU number or a switch the file lists: {}",
                        echo(&file.switches.join(", "))
                    )
                },
            }),
    };
    let directed = file.links.iter().map(|l| 1 + l.bidirectional as u128).sum();
    check_links(directed, || field("links"))?;
    if let Some(v) = file.bandwidth_gbps {
        check_bandwidth(&field("bandwidth_gbps"), v)?;
    }
    if let Some(v) = file.latency_us {
        check_latency(&field("latency_us"), v)?;
    }
    let bandwidth = file.bandwidth_gbps.unwrap_or(defaults.bandwidth_gbps);
    let latency = file.latency_us.unwrap_or(defaults.latency_us);
    let mut links = Vec::new();
    let mut seen: HashMap<(NpuId, NpuId), usize> = HashMap::new();
    for (i, fl) in file.links.iter().enumerate() {
        let link = Link {
            src: vertex(&fl.src, format!("links[{i}].src"))?,
            dst: vertex(&fl.dst, format!("links[{i}].dst"))?,
            bandwidth_gbps: fl.bandwidth_gbps.unwrap_or(bandwidth),
            latency_us: fl.latency_us.unwrap_or(latency),
        };
        let label = field(&format!("links[{i}]"));
        check_link(&label, &link, file.npus, file.switches.len())?;
        let mut both = vec![link.clone()];
        if fl.bidirectional {
            both.push(Link {
                src: link.dst,
                dst: link.src,
                ..link
            });
        }
        for l in both {
            if let Some(first) = seen.insert((l.src, l.dst), i) {
                return Err(FileProblem::new(
                    origin,
                    format!(
                        "repeats the link {}->{} of links[{first}]; give one link with the summed bandwidth",
                        l.src, l.dst
                    ),
                )
                .field(format!("links[{i}]"))
                .of(FileFormat::Topology));
            }
            links.push(l);
        }
    }
    let nics = match &file.nics {
        Some(n) => {
            if !(1..=MAX_NICS).contains(&n.count) {
                return Err(Error::Invalid {
                    input: field("nics.count"),
                    value: n.count.to_string(),
                    allowed: format!("the NICs of a node, 1 to {MAX_NICS}"),
                });
            }
            check_bandwidth(&field("nics.gbps"), n.gbps)?;
            Some(NodeNics {
                count: n.count,
                gbps: n.gbps,
                sharp: n.sharp,
            })
        }
        None => None,
    };
    let reducing = file
        .reducing_switches
        .iter()
        .enumerate()
        .map(|(i, name)| {
            vertex(
                &End::Switch(name.clone()),
                format!("reducing_switches[{i}]"),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let name = file.name.unwrap_or_else(|| origin.to_string());
    let mut topo = Topology::with_switches(name, file.npus, file.switches, links)
        .and_then(|t| t.with_reducing(&reducing))
        .map_err(in_file)?;
    if let Some(nics) = nics {
        topo = topo.with_nics(nics);
    }
    if file.failed.is_empty() {
        Ok(topo)
    } else {
        topo.fail_npus(&file.failed).map_err(in_file)
    }
}

/// The JSON form of a topology: every directed link written out, so reading it back
/// gives the same topology.
pub fn to_json(topo: &Topology) -> String {
    let end = |v: usize| match topo.switch_name(v) {
        Some(name) => End::Switch(name.to_string()),
        None => End::Npu(v),
    };
    let file = TopologyFile {
        version: Some(FORMAT_VERSION),
        name: Some(topo.name().to_string()),
        npus: topo.npus(),
        bandwidth_gbps: None,
        latency_us: None,
        switches: topo
            .switches()
            .filter_map(|v| topo.switch_name(v).map(str::to_string))
            .collect(),
        links: topo
            .links()
            .iter()
            .map(|l| FileLink {
                src: end(l.src),
                dst: end(l.dst),
                bandwidth_gbps: Some(l.bandwidth_gbps),
                latency_us: Some(l.latency_us),
                bidirectional: false,
            })
            .collect(),
        failed: topo.failed().to_vec(),
        nics: topo.nics().map(|n| FileNics {
            count: n.count,
            gbps: n.gbps,
            sharp: n.sharp,
        }),
        reducing_switches: topo
            .reducing_switches()
            .iter()
            .filter_map(|&v| topo.switch_name(v).map(str::to_string))
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&file).expect("topology serializes");
    text.push('\n');
    text
}
