//! The topology a plugin works on, from its [`Config`] and what the host says:
//!
//! 1. `TACOS_TOPOLOGY`: a topology spec or file, as the command line takes it;
//! 2. else `NCCL_TOPO_FILE`: NCCL's topology XML for one node, repeated over the
//!    communicator's nodes, with `TACOS_NIC_GBPS`, `TACOS_NVSWITCH_GBPS` and
//!    `TACOS_NVLINK_GBPS` filling in what the file lacks;
//! 3. else a generic cluster: an NVSwitch per NVLink domain (the host's NVLink domain
//!    information where it is uniform, else ranks / nodes), one NIC per GPU on rails across
//!    domains, link speeds from `TACOS_NVSWITCH_GBPS` and `TACOS_NIC_GBPS` or the GPU
//!    generation's usual figures (`TACOS_GPU_ARCH`, default hopper).
//!
//! Rank r is NPU r: clusters are numbered node by node, as NCCL numbers ranks when
//! launchers place them node by node.

use super::Config;
use crate::error::{Error, Result};
use crate::topology::nccl_xml::{self, NcclImportOptions};
use crate::topology::spec::{plan_spec, SpecPlan};
use crate::topology::{Dim, DimKind, NodeNics, SpecDefaults, Topology};
use std::path::Path;

/// Latencies of the generic cluster's links, microseconds (as the presets).
const NVLINK_US: f64 = 0.7;
const NIC_US: f64 = 2.0;

/// The host's NVLink domain information (NCCL tuner v5+): domains and ranks per domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvlDomains {
    pub domains: usize,
    pub min_ranks: usize,
    pub max_ranks: usize,
}

/// A topology, where it came from, what had to be assumed, and the size of its NVLink
/// domains (NPUs `domain_size` apart in id share one).
#[derive(Clone, Debug)]
pub struct Discovered {
    pub topology: Topology,
    pub source: String,
    pub warnings: Vec<String>,
    pub domain_size: usize,
}

/// What discovery found before building anything, so a caller can check the size or price
/// a composed topology by formulas first ([`Plan::build`] builds it).
#[derive(Clone, Debug)]
pub struct Plan {
    pub layout: Layout,
    pub source: String,
    pub warnings: Vec<String>,
    pub domain_size: usize,
}

/// The topology, unbuilt where building it costs.
#[derive(Clone, Debug)]
pub enum Layout {
    /// Dimensions [`compose`](crate::topology::compose) joins (the generic cluster, builder specs, cluster presets),
    /// and the NICs a preset's nodes have (else one per GPU linked across nodes).
    Composed {
        name: String,
        dims: Vec<Dim>,
        nics: Option<NodeNics>,
    },
    /// Already read (topology files, the other builders).
    Built(Topology),
    /// NCCL's topology XML, repeated over the nodes.
    NcclFile {
        path: String,
        options: NcclImportOptions,
    },
}

impl Plan {
    /// Builds the topology.
    pub fn build(self) -> Result<Discovered> {
        let mut warnings = self.warnings;
        let topology = match self.layout {
            Layout::Composed { name, dims, nics } => {
                SpecPlan::Composed { name, dims, nics }.build()?
            }
            Layout::Built(topology) => topology,
            Layout::NcclFile { path, options } => {
                let mut imported = nccl_xml::read(Path::new(&path), &options)?;
                if !imported.warnings.is_empty() {
                    imported.warnings.push(
                        "the plugins take nvswitch=, nic= and nvlink= from TACOS_NVSWITCH_GBPS, TACOS_NIC_GBPS and TACOS_NVLINK_GBPS".into(),
                    );
                }
                warnings.extend(imported.warnings);
                imported.topology
            }
        };
        Ok(Discovered {
            topology,
            source: self.source,
            warnings,
            domain_size: self.domain_size,
        })
    }
}

/// Finds the topology for a communicator of `ranks` ranks on `nodes` nodes.
pub fn discover(
    config: &Config,
    ranks: usize,
    nodes: usize,
    nvl: Option<NvlDomains>,
) -> Result<Discovered> {
    plan(config, ranks, nodes, nvl)?.build()
}

/// Where the topology for a communicator of `ranks` ranks on `nodes` nodes comes from.
pub fn plan(config: &Config, ranks: usize, nodes: usize, nvl: Option<NvlDomains>) -> Result<Plan> {
    let nodes = nodes.max(1);
    let mut warnings = Vec::new();
    let uniform_domain = nvl.and_then(|d| {
        let uniform = d.domains >= 1
            && d.min_ranks >= 1
            && d.min_ranks == d.max_ranks
            && d.domains.checked_mul(d.min_ranks) == Some(ranks);
        if !uniform {
            warnings.push(format!(
                "NVLink domains ({} domains of {} to {} ranks) do not split {ranks} ranks evenly; taking ranks per node",
                d.domains, d.min_ranks, d.max_ranks
            ));
        }
        uniform.then_some(d.min_ranks)
    });
    let domain_size = uniform_domain
        .unwrap_or_else(|| ranks.div_ceil(nodes))
        .max(1);
    let (layout, source, more) = if let Some(spec) = &config.topology {
        let (layout, w) = match plan_spec(spec, &SpecDefaults::default())? {
            SpecPlan::Composed { name, dims, nics } => {
                (Layout::Composed { name, dims, nics }, Vec::new())
            }
            SpecPlan::Built(topo, w) => (Layout::Built(topo), w),
        };
        (layout, format!("TACOS_TOPOLOGY={spec}"), w)
    } else if let Some(path) = &config.nccl_topo_file {
        let options = NcclImportOptions {
            nodes,
            nvlink_gbps: config.nvlink_gbps,
            nvswitch_gbps: config.nvswitch_gbps,
            nic_gbps: config.nic_gbps,
            ..NcclImportOptions::default()
        };
        let source = format!("NCCL_TOPO_FILE={path} on {nodes} node(s)");
        let layout = Layout::NcclFile {
            path: path.clone(),
            options,
        };
        (layout, source, Vec::new())
    } else {
        if ranks % domain_size != 0 {
            return Err(Error::Topology(format!(
                "{ranks} ranks do not split evenly over {nodes} nodes; set TACOS_TOPOLOGY"
            )));
        }
        let (name, dims) = generic(config, domain_size, ranks / domain_size);
        let layout = Layout::Composed {
            name,
            dims,
            nics: None,
        };
        (layout, "generic cluster".to_string(), Vec::new())
    };
    warnings.extend(more);
    Ok(Plan {
        layout,
        source,
        warnings,
        domain_size,
    })
}

/// `domains` NVSwitch domains of `size` GPUs joined by rails: GPU i of every domain shares
/// a rail switch. Both are switch vertices, as in the cluster presets.
fn generic(config: &Config, size: usize, domains: usize) -> (String, Vec<Dim>) {
    let gpu = config.gpu();
    let nvswitch = config.nvswitch_gbps.unwrap_or(gpu.nvswitch_gbps());
    let nic = config.nic_gbps.unwrap_or(gpu.nic_gbps());
    // The NVSwitch reduces where the GPUs' NCCL would run NVLS on it.
    let nvls = gpu >= crate::gpu::GpuArch::Hopper;
    let switch = |prefix, size: usize, bandwidth_gbps, latency_us| Dim {
        reduces: nvls && prefix == "nvswitch-node",
        kind: DimKind::SwitchVertex {
            prefix: Some(prefix),
        },
        size,
        bandwidth_gbps,
        latency_us,
    };
    (
        format!("generic: {domains} x {size} GPUs, NVSwitch {nvswitch} GB/s, NIC {nic} GB/s"),
        vec![
            switch("nvswitch-node", size, nvswitch, NVLINK_US),
            switch("rail", domains, nic, NIC_US),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::super::config::tests::config;
    use super::*;

    #[test]
    fn generic_cluster_has_nvswitch_inside_and_rails_across() {
        let c = config(&[("TACOS_NIC_GBPS", "40")]).unwrap();
        let d = discover(&c, 16, 2, None).unwrap();
        assert_eq!(d.domain_size, 8);
        let t = &d.topology;
        assert_eq!(t.npus(), 16);
        // Inside a node: through the node's NVSwitch at the port's 450 GB/s (Hopper);
        // across: GPU i to GPU i + 8 only, through rail i at the NIC's 40 GB/s.
        let through = |a, b| t.route(a, b).map(|r| t.route_link(r).bandwidth_gbps);
        assert_eq!(through(0, 7), Some(450.0));
        assert_eq!(through(3, 11), Some(40.0));
        assert_eq!(through(3, 12), None);
    }

    #[test]
    fn uniform_nvlink_domains_replace_nodes() {
        let c = Config::default();
        let nvl = NvlDomains {
            domains: 2,
            min_ranks: 4,
            max_ranks: 4,
        };
        // One node as NCCL sees it, two NVLink domains of 4.
        let d = discover(&c, 8, 1, Some(nvl)).unwrap();
        assert_eq!(d.domain_size, 4);
        assert!(d.topology.route(0, 4).is_some());
        assert!(d.topology.route(0, 5).is_none());
        let uneven = NvlDomains {
            max_ranks: 5,
            ..nvl
        };
        let d = discover(&c, 8, 1, Some(uneven)).unwrap();
        assert_eq!(d.domain_size, 8);
        assert!(d.warnings[0].contains("do not split 8 ranks evenly"));
    }

    /// A preset's NICs reach the plugins as they reach the command line: NCCL's search
    /// lays its channels over a node's NICs, which the preset's dimensions do not say.
    #[test]
    fn a_named_presets_nics_are_recorded() {
        for (spec, ranks, count, gbps, sharp) in [
            ("preset:dgx-h100,nodes=2,nics=2", 16, 2, 50.0, false),
            ("preset:dgx2,nodes=2", 32, 8, 12.5, false),
            ("preset:dgx-h100,nodes=2,sharp=yes", 16, 8, 50.0, true),
        ] {
            let c = config(&[("TACOS_TOPOLOGY", spec)]).unwrap();
            let d = discover(&c, ranks, 2, None).unwrap();
            let nics = NodeNics { count, gbps, sharp };
            assert_eq!(d.topology.nics(), Some(nics), "{spec}");
        }
    }

    #[test]
    fn named_topologies_win_and_bad_ones_are_errors() {
        let c = config(&[
            ("TACOS_TOPOLOGY", "preset:dgx-a100,nodes=2"),
            ("NCCL_TOPO_FILE", "/nonexistent.xml"),
        ])
        .unwrap();
        let d = discover(&c, 16, 2, None).unwrap();
        assert_eq!(d.topology.npus(), 16);
        assert_eq!(d.source, "TACOS_TOPOLOGY=preset:dgx-a100,nodes=2");
        let c = config(&[("NCCL_TOPO_FILE", "/nonexistent.xml")]).unwrap();
        let err = discover(&c, 16, 2, None).unwrap_err().to_string();
        assert!(err.contains("/nonexistent.xml"), "{err}");
        let err = discover(&Config::default(), 10, 4, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("10 ranks do not split evenly over 4 nodes"),
            "{err}"
        );
    }
}
