//! Topology specs as the command line takes them: a JSON file path, or a builder string
//! such as `mesh:4x4`, `switch:8,d=2`, `rfs:2x4x8,bw=200:100:50` or `preset:dgx1`.

use super::builders::{clos, compose, dragonfly, hypercube, star, Dim, DimKind};
use super::limits::{
    bandwidth_in_range, check_bandwidth, check_latency, latency_in_range, BANDWIDTH_ALLOWED,
};
use super::nccl_xml::{self, NcclImportOptions};
use super::presets::{preset, preset_dims, Composed, PresetOptions};
use super::{file, NodeNics, Topology};
use crate::error::{echo, Error, Result};
use std::path::Path;

/// Link figures used where a spec gives none (the TACOS paper's: 50 GB/s, 0.5 us); each
/// must lie in `limits`' range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpecDefaults {
    pub bandwidth_gbps: f64,
    pub latency_us: f64,
}

impl Default for SpecDefaults {
    fn default() -> Self {
        SpecDefaults {
            bandwidth_gbps: 50.0,
            latency_us: 0.5,
        }
    }
}

/// One line per builder, for `--help` and error messages.
pub const BUILDERS: &[(&str, &str)] = &[
    ("ring:N", "bidirectional ring"),
    ("uniring:N", "unidirectional ring (i -> i+1)"),
    ("fc:N", "fully connected"),
    (
        "switch:N",
        "N NPUs around one switch vertex: each a link up and one down of bw, lat/2 each (a transfer takes lat)",
    ),
    (
        "switch:N,d=D",
        "the TACOS paper's unwound switch: NPU i linked to i+1..i+D mod N, bw/D a link",
    ),
    (
        "star:N",
        "as switch:N, with bw and lat per link (a transfer takes 2 lat)",
    ),
    ("mesh:AxB | mesh:AxBxC", "2D or 3D mesh"),
    ("torus:AxB | torus:AxBxC", "2D or 3D torus"),
    ("hypercube:D", "binary hypercube of 2^D NPUs"),
    (
        "dragonfly:PxG[,bw=L:G,lat=L:G]",
        "G groups of P NPUs, fully connected inside, one global link per group pair",
    ),
    (
        "rfs:AxBxC[,d=D]",
        "ring x fully connected x switch (the paper's 3D-RFS): a switch vertex per line, unwound with d=",
    ),
    (
        "multi:R4xF4xS8[,d=D]",
        "composition: R ring, U unidirectional ring, L line, F fully connected, S switch (a vertex per line, unwound with d=)",
    ),
    (
        "clos:PxL[,spine=K,oversub=R]",
        "leaf-spine: L leaf switches of P NPUs (bw, lat/2 a hop), K spines (default 1) over them, each leaf's uplinks P x bw / R (default 1) split over the K",
    ),
    (
        "preset:NAME[,nodes=N,gpus=G,...]",
        "a real machine as a fabric (see `tacos topo presets`): nodes=N rail-optimized (GPU g of every node on leaf switch rail{g}), gpus=G (the first G GPUs of each node), spine=K switches over the rails with oversub=R (rail-to-spine bandwidth = the rail's NIC bandwidth / R), nics=N NICs a node (a divisor or multiple of its GPUs; GPUs share or split them), nic= (GB/s a NIC), nvlink=, nvswitch= in GB/s",
    ),
];

/// Options every builder takes: `bw=` and `lat=`, one value or one per dimension
/// (colon-separated), and `d=` for switches. Bandwidths and latencies are checked
/// against `limits`' ranges as they are parsed.
struct Options {
    bw: Option<Vec<f64>>,
    lat: Option<Vec<f64>>,
    degree: Option<usize>,
    nodes: Option<usize>,
    /// Presets: GPUs of each node; clusters and `clos`: spine switches and their
    /// oversubscription.
    gpus: Option<usize>,
    spine: Option<usize>,
    oversub: Option<f64>,
    /// Presets: NICs of each node.
    nics: Option<usize>,
    /// Presets and NCCL topology import: GB/s per NIC, per NVLink, per GPU into an
    /// NVSwitch.
    nic: Option<f64>,
    nvlink: Option<f64>,
    nvswitch: Option<f64>,
    /// Presets: the network between nodes reduces (SHARP).
    sharp: Option<bool>,
}

/// Turns a spec into a topology. A spec naming an existing file, or ending in `.json`, is
/// read as a topology file; `nccl:FILE.xml[,options]`, or a path ending in `.xml`, as an
/// NCCL topology file (one node unless `nodes=` says otherwise).
pub fn parse_spec(spec: &str, defaults: &SpecDefaults) -> Result<Topology> {
    parse_spec_with_warnings(spec, defaults).map(|(topo, _)| topo)
}

/// As `parse_spec`, also returning what had to be assumed (NCCL topology files often lack
/// NVLink or NIC figures, which are then taken from options or defaults).
pub fn parse_spec_with_warnings(
    spec: &str,
    defaults: &SpecDefaults,
) -> Result<(Topology, Vec<String>)> {
    let spec = spec.trim();
    check_bandwidth("default link bandwidth", defaults.bandwidth_gbps)?;
    check_latency("default link latency", defaults.latency_us)?;
    if let Some(rest) = spec.strip_prefix("nccl:") {
        let mut parts = rest.split(',');
        let path = parts.next().unwrap_or("").trim();
        let opts = parse_options(spec, parts)?;
        check_allowed(spec, &opts, &["nodes", "nic", "nvlink", "nvswitch"])?;
        let defaults = NcclImportOptions::default();
        let options = NcclImportOptions {
            nodes: opts.nodes.unwrap_or(1),
            nvlink_gbps: opts.nvlink,
            nvswitch_gbps: opts.nvswitch,
            nic_gbps: opts.nic,
            ..defaults
        };
        return nccl(path, &options);
    }
    if spec.ends_with(".xml") {
        return nccl(spec, &NcclImportOptions::default());
    }
    if spec.ends_with(".json") || Path::new(spec).is_file() {
        return Ok((file::read(Path::new(spec), defaults)?, Vec::new()));
    }
    Ok((parse_builder(spec, defaults)?.build()?, Vec::new()))
}

/// A spec read as far as it can be without building it: the dimensions of a composed
/// topology (builders, the cluster presets), which `compose` turns into one and a model
/// may price without building (a rail of 512 nodes unwound has 2 million links), or the
/// topology itself (files, hypercubes, dragonflies, DGX-1) with what had to be assumed.
#[derive(Clone, Debug)]
pub enum SpecPlan {
    /// `nics`: the NICs a composed preset's nodes have, which its dimensions do not say
    /// (NCCL's search lays its channels over them).
    Composed {
        name: String,
        dims: Vec<Dim>,
        nics: Option<NodeNics>,
    },
    Built(Topology, Vec<String>),
}

impl SpecPlan {
    /// The topology planned, built (a composed one with its NICs recorded).
    pub fn build(self) -> Result<Topology> {
        match self {
            SpecPlan::Composed { name, dims, nics } => {
                let topo = compose(name, &dims)?;
                Ok(match nics {
                    Some(nics) => topo.with_nics(nics),
                    None => topo,
                })
            }
            SpecPlan::Built(topo, _) => Ok(topo),
        }
    }
}

/// As `parse_spec_with_warnings`, leaving composed topologies unbuilt.
pub fn plan_spec(spec: &str, defaults: &SpecDefaults) -> Result<SpecPlan> {
    let trimmed = spec.trim();
    if trimmed.starts_with("nccl:")
        || trimmed.ends_with(".xml")
        || trimmed.ends_with(".json")
        || Path::new(trimmed).is_file()
    {
        let (topo, warnings) = parse_spec_with_warnings(spec, defaults)?;
        return Ok(SpecPlan::Built(topo, warnings));
    }
    parse_builder(trimmed, defaults)
}

fn nccl(path: &str, options: &NcclImportOptions) -> Result<(Topology, Vec<String>)> {
    let imported = nccl_xml::read(Path::new(path), options)?;
    Ok((imported.topology, imported.warnings))
}

/// A builder spec read.
fn parse_builder(spec: &str, defaults: &SpecDefaults) -> Result<SpecPlan> {
    let Some((kind, rest)) = spec.split_once(':') else {
        return Err(unknown("topology file or builder", spec));
    };
    let mut parts = rest.split(',');
    let shape = parts.next().unwrap_or("").trim();
    let opts = parse_options(spec, parts)?;
    if kind == "preset" {
        return parse_preset(spec, shape, &opts);
    }
    let allow = |allowed: &[&str]| check_allowed(spec, &opts, allowed);
    let dims_of = |shape: &str, kinds: &[DimKind]| dims(spec, shape, kinds, &opts, defaults);
    let name = spec.to_string();
    let composed = |dims: Vec<Dim>| {
        Ok(SpecPlan::Composed {
            name: spec.to_string(),
            dims,
            nics: None,
        })
    };
    let built = |topo: Topology| SpecPlan::Built(topo, Vec::new());
    let plan = match kind {
        "ring" | "uniring" | "fc" | "fully-connected" | "switch" => {
            count(spec, shape)?;
            let is_switch = kind == "switch";
            let kind = match kind {
                "ring" => DimKind::Ring,
                "uniring" => DimKind::UniRing,
                "switch" => switch_kind(&opts),
                _ => DimKind::FullyConnected,
            };
            allow(if is_switch {
                &["bw", "lat", "d"]
            } else {
                &["bw", "lat"]
            })?;
            composed(dims_of(shape, &[kind])?)
        }
        "mesh" | "torus" => {
            allow(&["bw", "lat"])?;
            let kind = if kind == "mesh" {
                DimKind::Line
            } else {
                DimKind::Ring
            };
            let sizes = sizes(spec, shape)?;
            if !(2..=3).contains(&sizes.len()) {
                return Err(shape_error(spec, shape, "2D (AxB) or 3D (AxBxC)"));
            }
            composed(dims_of(shape, &vec![kind; sizes.len()])?)
        }
        "rfs" => {
            allow(&["bw", "lat", "d"])?;
            let n = sizes(spec, shape)?;
            if n.len() != 3 {
                return Err(shape_error(spec, shape, "three sizes, AxBxC"));
            }
            composed(dims_of(
                shape,
                &[DimKind::Ring, DimKind::FullyConnected, switch_kind(&opts)],
            )?)
        }
        "multi" => {
            allow(&["bw", "lat", "d"])?;
            let (kinds, plain) = multi_kinds(spec, shape, &opts)?;
            composed(dims_of(&plain, &kinds)?)
        }
        "star" => {
            allow(&["bw", "lat"])?;
            let n = count(spec, shape)?;
            let bw = single(spec, "bw", &opts.bw, defaults.bandwidth_gbps)?;
            let lat = single(spec, "lat", &opts.lat, defaults.latency_us)?;
            star(&name, n, bw, lat).map(built)
        }
        "hypercube" => {
            allow(&["bw", "lat"])?;
            let d = count(spec, shape)?;
            let bw = single(spec, "bw", &opts.bw, defaults.bandwidth_gbps)?;
            let lat = single(spec, "lat", &opts.lat, defaults.latency_us)?;
            hypercube(&name, d, bw, lat).map(built)
        }
        "dragonfly" => {
            allow(&["bw", "lat"])?;
            let n = sizes(spec, shape)?;
            if n.len() != 2 {
                return Err(shape_error(spec, shape, "PxG (NPUs per group x groups)"));
            }
            let d = dims_of(shape, &[DimKind::FullyConnected, DimKind::FullyConnected])?;
            dragonfly(
                &name,
                n[0],
                n[1],
                (d[0].bandwidth_gbps, d[0].latency_us),
                (d[1].bandwidth_gbps, d[1].latency_us),
            )
            .map(built)
        }
        "clos" => {
            allow(&["bw", "lat", "spine", "oversub"])?;
            let n = sizes(spec, shape)?;
            if n.len() != 2 {
                return Err(shape_error(spec, shape, "PxL (NPUs per leaf x leaves)"));
            }
            let bw = single(spec, "bw", &opts.bw, defaults.bandwidth_gbps)?;
            let lat = single(spec, "lat", &opts.lat, defaults.latency_us)?;
            let (spines, oversub) = (opts.spine.unwrap_or(1), opts.oversub.unwrap_or(1.0));
            clos(&name, n[0], n[1], spines, oversub, (bw, lat)).map(built)
        }
        _ => Err(unknown("builder", kind)),
    }?;
    Ok(plan)
}

/// `preset:NAME` with `opts`: its dimensions where it is composed of them alone (and the
/// NICs its nodes' GPUs use), else built.
fn parse_preset(spec: &str, name: &str, opts: &Options) -> Result<SpecPlan> {
    check_allowed(
        spec,
        opts,
        &[
            "nodes", "gpus", "spine", "oversub", "nics", "nic", "nvlink", "nvswitch", "sharp",
        ],
    )?;
    let opts = PresetOptions {
        nodes: opts.nodes,
        gpus: opts.gpus,
        spines: opts.spine,
        oversub: opts.oversub,
        nics: opts.nics,
        nic_gbps: opts.nic,
        nvlink_gbps: opts.nvlink,
        nvswitch_gbps: opts.nvswitch,
        sharp: opts.sharp,
    };
    Ok(match preset_dims(name, &opts)? {
        Some(Composed { label, dims, nics }) => SpecPlan::Composed {
            name: label,
            dims,
            nics: Some(nics),
        },
        None => SpecPlan::Built(preset(name, &opts)?, Vec::new()),
    })
}

/// A spec that names no builder: `what` is "builder" when it has the builder's `NAME:`
/// form, else it may also have been meant as a file.
fn unknown(what: &'static str, given: &str) -> Error {
    Error::Unknown {
        what,
        given: given.into(),
        known: BUILDERS.iter().map(|b| b.0).collect(),
    }
}

/// A shape with the wrong number of sizes.
fn shape_error(spec: &str, shape: &str, allowed: &str) -> Error {
    Error::Invalid {
        input: format!("shape in '{}'", echo(spec)),
        value: shape.into(),
        allowed: allowed.into(),
    }
}

/// How a spec's switch dimension is joined: a switch vertex per line, or with `d=` the
/// paper's unwinding with that degree.
fn switch_kind(opts: &Options) -> DimKind {
    match opts.degree {
        Some(degree) => DimKind::Switch { degree },
        None => DimKind::SwitchVertex { prefix: None },
    }
}

/// Every option a spec may give, for error messages.
const OPTIONS: [&str; 12] = [
    "bw=",
    "lat=",
    "d=",
    "nodes=",
    "gpus=",
    "spine=",
    "oversub=",
    "nics=",
    "nic=",
    "nvlink=",
    "nvswitch=",
    "sharp=",
];

fn parse_options<'a>(spec: &str, parts: impl Iterator<Item = &'a str>) -> Result<Options> {
    let mut opts = Options {
        bw: None,
        lat: None,
        degree: None,
        nodes: None,
        gpus: None,
        spine: None,
        oversub: None,
        nics: None,
        nic: None,
        nvlink: None,
        nvswitch: None,
        sharp: None,
    };
    for part in parts.map(str::trim) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(Error::Invalid {
                input: format!("option in '{}'", echo(spec)),
                value: part.into(),
                allowed: format!("key=value, the key one of {}", OPTIONS.join(", ")),
            });
        };
        let input = || format!("{}= in '{}'", key.trim(), echo(spec));
        // Bandwidths (GB/s) or latencies (us), each within its range.
        let figures = |bandwidth: bool| -> Result<Vec<f64>> {
            value
                .split(':')
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|&x| {
                            if bandwidth {
                                bandwidth_in_range(x)
                            } else {
                                latency_in_range(x)
                            }
                        })
                        .ok_or_else(|| Error::Invalid {
                            input: input(),
                            value: value.into(),
                            allowed: if bandwidth {
                                "positive numbers separated by ':', each from 0.001 to 1000000 GB/s".to_string()
                            } else {
                                "non-negative numbers separated by ':', each at most 1000000 microseconds".to_string()
                            },
                        })
                })
                .collect()
        };
        let bandwidth = || -> Result<f64> {
            match figures(true)?[..] {
                [one] => Ok(one),
                _ => Err(Error::Invalid {
                    input: input(),
                    value: value.into(),
                    allowed: BANDWIDTH_ALLOWED.into(),
                }),
            }
        };
        let whole = || -> Result<usize> {
            value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::Invalid {
                    input: input(),
                    value: value.into(),
                    allowed: "a whole number >= 1".into(),
                })
        };
        match key.trim() {
            "bw" => opts.bw = Some(figures(true)?),
            "lat" => opts.lat = Some(figures(false)?),
            "d" => opts.degree = Some(whole()?),
            "nodes" => opts.nodes = Some(whole()?),
            // The preset checks the range, which depends on its node.
            "gpus" => {
                opts.gpus = Some(value.trim().parse().map_err(|_| Error::Invalid {
                    input: input(),
                    value: value.into(),
                    allowed: "a whole number of GPUs per node, from 1 to the node's GPUs".into(),
                })?)
            }
            "spine" => opts.spine = Some(whole()?),
            "oversub" => opts.oversub = Some(ratio(value).ok_or_else(|| Error::Invalid {
                input: input(),
                value: value.into(),
                allowed: "a number > 0, or R:1 (the leaves' bandwidth down over their bandwidth up to the spines: 1 non-blocking, 2 or 2:1 half as much up)".into(),
            })?),
            // The preset checks the count, which depends on its node.
            "nics" => {
                opts.nics = Some(value.trim().parse().map_err(|_| Error::Invalid {
                    input: input(),
                    value: value.into(),
                    allowed: "a whole number of NICs per node, a divisor or a multiple of the node's GPUs".into(),
                })?)
            }
            "nic" => opts.nic = Some(bandwidth()?),
            "nvlink" => opts.nvlink = Some(bandwidth()?),
            "nvswitch" => opts.nvswitch = Some(bandwidth()?),
            "sharp" => {
                opts.sharp = Some(match value.trim() {
                    "yes" | "1" | "true" => true,
                    "no" | "0" | "false" => false,
                    _ => {
                        return Err(Error::Invalid {
                            input: input(),
                            value: value.into(),
                            allowed: "yes or no: whether the network between nodes reduces (SHARP), so NCCL may run CollNet".into(),
                        })
                    }
                })
            }
            other => {
                return Err(Error::Unknown {
                    what: "option",
                    given: other.into(),
                    known: OPTIONS.to_vec(),
                })
            }
        }
    }
    Ok(opts)
}

fn check_allowed(spec: &str, opts: &Options, allowed: &[&str]) -> Result<()> {
    let given = [
        ("bw", opts.bw.is_some()),
        ("lat", opts.lat.is_some()),
        ("d", opts.degree.is_some()),
        ("nodes", opts.nodes.is_some()),
        ("gpus", opts.gpus.is_some()),
        ("spine", opts.spine.is_some()),
        ("oversub", opts.oversub.is_some()),
        ("nics", opts.nics.is_some()),
        ("nic", opts.nic.is_some()),
        ("nvlink", opts.nvlink.is_some()),
        ("nvswitch", opts.nvswitch.is_some()),
    ];
    for (key, present) in given {
        if present && !allowed.contains(&key) {
            return Err(Error::Invalid {
                input: format!("options of '{}'", echo(spec)),
                value: format!("{key}="),
                allowed: format!(
                    "one of those that apply here: {}",
                    allowed
                        .iter()
                        .map(|k| format!("{k}="))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// An oversubscription, `R` or `R:B` (R / B), when it is a finite number > 0.
fn ratio(text: &str) -> Option<f64> {
    let (a, b) = text.split_once(':').unwrap_or((text, "1"));
    let r = a.trim().parse::<f64>().ok()? / b.trim().parse::<f64>().ok()?;
    (r.is_finite() && r > 0.0).then_some(r)
}

fn count(spec: &str, text: &str) -> Result<usize> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::Invalid {
            input: format!("a size in '{}'", echo(spec)),
            value: text.into(),
            allowed: "a whole number >= 1".into(),
        })
}

fn sizes(spec: &str, shape: &str) -> Result<Vec<usize>> {
    shape.split('x').map(|s| count(spec, s)).collect()
}

/// The values of an option as given, `a:b:c`, for error messages.
fn joined(values: &[f64]) -> String {
    values
        .iter()
        .map(f64::to_string)
        .collect::<Vec<_>>()
        .join(":")
}

fn single(spec: &str, key: &str, values: &Option<Vec<f64>>, default: f64) -> Result<f64> {
    match values.as_deref() {
        None => Ok(default),
        Some([v]) => Ok(*v),
        Some(v) => Err(Error::Invalid {
            input: format!("{key}= in '{}'", echo(spec)),
            value: joined(v),
            allowed: "one value here".into(),
        }),
    }
}

/// Per-dimension values: none (default everywhere), one (everywhere) or one per dimension.
fn per_dim(
    spec: &str,
    key: &str,
    values: &Option<Vec<f64>>,
    default: f64,
    n: usize,
) -> Result<Vec<f64>> {
    match values.as_deref() {
        None => Ok(vec![default; n]),
        Some([v]) => Ok(vec![*v; n]),
        Some(v) if v.len() == n => Ok(v.to_vec()),
        Some(v) => Err(Error::Invalid {
            input: format!("{key}= in '{}'", echo(spec)),
            value: joined(v),
            allowed: format!("one value, or one per dimension ({n} values)"),
        }),
    }
}

fn dims(
    spec: &str,
    shape: &str,
    kinds: &[DimKind],
    opts: &Options,
    defaults: &SpecDefaults,
) -> Result<Vec<Dim>> {
    let n = sizes(spec, shape)?;
    if n.len() != kinds.len() {
        return Err(shape_error(
            spec,
            shape,
            &format!("{} sizes separated by 'x'", kinds.len()),
        ));
    }
    let bw = per_dim(spec, "bw", &opts.bw, defaults.bandwidth_gbps, n.len())?;
    let lat = per_dim(spec, "lat", &opts.lat, defaults.latency_us, n.len())?;
    Ok((0..n.len())
        .map(|i| Dim {
            reduces: false,
            kind: kinds[i],
            size: n[i],
            bandwidth_gbps: bw[i],
            latency_us: lat[i],
        })
        .collect())
}

/// Splits `R4xF4xS8` into dimension kinds and the plain shape `4x4x8`.
fn multi_kinds(spec: &str, shape: &str, opts: &Options) -> Result<(Vec<DimKind>, String)> {
    let mut kinds = Vec::new();
    let mut plain = Vec::new();
    for token in shape.split('x') {
        let mut chars = token.trim().chars();
        let letter = chars.next().map(|c| c.to_ascii_uppercase());
        let size = chars.as_str();
        count(spec, size)?;
        kinds.push(match letter {
            Some('R') => DimKind::Ring,
            Some('U') => DimKind::UniRing,
            Some('L') => DimKind::Line,
            Some('F') => DimKind::FullyConnected,
            Some('S') => switch_kind(opts),
            _ => {
                return Err(Error::Invalid {
                    input: format!("a dimension in '{}'", echo(spec)),
                    value: token.into(),
                    allowed: "a letter (R ring, U unidirectional ring, L line, F fully connected, S switch) and a size, e.g. R4".into(),
                })
            }
        });
        plain.push(size.to_string());
    }
    Ok((kinds, plain.join("x")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversubscription_is_a_number_or_a_ratio_above_zero() {
        assert_eq!(ratio("2"), Some(2.0));
        assert_eq!(ratio("3:2"), Some(1.5));
        assert_eq!(ratio(" 0.5 "), Some(0.5));
        for bad in ["0", "-1", "x", "1:0", "inf", "nan", "2:x", ""] {
            assert_eq!(ratio(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_switch_dimension_is_a_vertex_unless_d_is_given() {
        let plan = |s: &str| match plan_spec(s, &SpecDefaults::default()).unwrap() {
            SpecPlan::Composed { dims, .. } => dims.iter().map(|d| d.kind).collect::<Vec<_>>(),
            SpecPlan::Built(..) => panic!("{s} is composed"),
        };
        let vertex = DimKind::SwitchVertex { prefix: None };
        assert_eq!(plan("switch:8"), [vertex]);
        assert_eq!(plan("switch:8,d=3"), [DimKind::Switch { degree: 3 }]);
        assert_eq!(
            plan("rfs:2x4x8"),
            [DimKind::Ring, DimKind::FullyConnected, vertex]
        );
        assert_eq!(
            plan("multi:S8xR2xS4,d=2"),
            [
                DimKind::Switch { degree: 2 },
                DimKind::Ring,
                DimKind::Switch { degree: 2 }
            ]
        );
    }
}
