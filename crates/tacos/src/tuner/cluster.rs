//! A cluster of identical nodes, as the formulas price it: `domains` NVLink domains of
//! `size` GPUs each, every GPU linked to every other GPU of its domain and to the GPU of
//! the same index in every other domain (its rail). This is what the plugins' generic
//! cluster, the cluster presets and two-level compositions of fully connected, fully
//! unwound switch or switch vertex dimensions build (a switch vertex priced as its full
//! unwinding for now), known here from their dimensions alone: the built
//! topology of 512 such nodes holds two million rail links, the description a few numbers.

use crate::topology::{Dim, DimKind, NpuId};

/// One kind of link of a cluster: all links of the kind are alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkKind {
    /// Bandwidth of one link, GB/s.
    pub bandwidth_gbps: f64,
    pub latency_us: f64,
}

/// Identical NVLink domains joined by rails (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cluster {
    /// NVLink domains (nodes).
    pub domains: usize,
    /// GPUs per domain.
    pub size: usize,
    /// A link between two GPUs of one domain.
    pub nvlink: LinkKind,
    /// A link between GPUs of one index in two domains.
    pub rail: LinkKind,
    /// Where a level is a switch vertex, each GPU's port into it, GB/s each way (the
    /// executor cost model's view: `nvlink` and `rail` price the switch unwound); `None`
    /// where the GPUs are linked pair by pair.
    pub ports_gbps: [Option<f64>; 2],
}

impl Cluster {
    /// The cluster `compose(dims)` builds with NVLink domains of `domain_size` NPUs, when
    /// it is one: at most two dimensions of more than one NPU, each fully connected (or a
    /// switch unwound to every peer), the first (varying fastest in NPU ids) `domain_size`
    /// NPUs wide; one such dimension alone is a domain (`domain_size` its size) or rails
    /// (`domain_size` 1).
    pub fn from_dims(dims: &[Dim], domain_size: usize) -> Option<Cluster> {
        let wide: Vec<&Dim> = dims.iter().filter(|d| d.size > 1).collect();
        let unused = LinkKind {
            bandwidth_gbps: f64::INFINITY,
            latency_us: 0.0,
        };
        let (inner, outer) = match wide[..] {
            [] => (None, None),
            [only] if domain_size == 1 => (None, Some(only)),
            [only] => (Some(only), None),
            [inner, outer] => (Some(inner), Some(outer)),
            _ => return None,
        };
        let (size, nvlink) = match inner {
            Some(d) => (d.size, full_mesh(d)?),
            None => (1, unused),
        };
        let (domains, rail) = match outer {
            Some(d) => (d.size, full_mesh(d)?),
            None => (1, unused),
        };
        let port = |d: Option<&Dim>| {
            d.filter(|d| matches!(d.kind, DimKind::SwitchVertex { .. }))
                .map(|d| d.bandwidth_gbps)
        };
        (size == domain_size).then_some(Cluster {
            domains,
            size,
            nvlink,
            rail,
            ports_gbps: [port(inner), port(outer)],
        })
    }

    pub fn npus(&self) -> usize {
        self.domains * self.size
    }

    /// The domain and the index in it of `npu`.
    fn place(&self, npu: NpuId) -> (usize, usize) {
        (npu / self.size, npu % self.size)
    }

    /// The link from `a` to `b`, where there is one.
    pub fn link(&self, a: NpuId, b: NpuId) -> Option<LinkKind> {
        let ((da, ga), (db, gb)) = (self.place(a), self.place(b));
        match (da == db, ga == gb) {
            (true, false) => Some(self.nvlink),
            (false, true) => Some(self.rail),
            _ => None,
        }
    }

    /// The NPU a route from `a` to `b` (in different domains and at different indices)
    /// passes: two hops either way round, the simulator's shortest path takes the one whose
    /// first hop is faster for a message, and on a tie the middle NPU with the lower id.
    pub fn via(&self, a: NpuId, b: NpuId) -> NpuId {
        let ((da, _), (db, gb)) = (self.place(a), self.place(b));
        let nvlink_first = da * self.size + gb;
        let rail_first = db * self.size + a % self.size;
        let (nv, rail) = (self.nvlink.bandwidth_gbps, self.rail.bandwidth_gbps);
        if nv > rail || (nv == rail && nvlink_first < rail_first) {
            nvlink_first
        } else {
            rail_first
        }
    }

    /// Total bandwidth of one GPU's links, GB/s (the same into and out of every GPU).
    pub fn egress_gbps(&self) -> f64 {
        let mut total = 0.0;
        if self.size > 1 {
            total += (self.size - 1) as f64 * self.nvlink.bandwidth_gbps;
        }
        if self.domains > 1 {
            total += (self.domains - 1) as f64 * self.rail.bandwidth_gbps;
        }
        total
    }
}

/// The links of a dimension joining every pair of its NPUs, when it does.
fn full_mesh(dim: &Dim) -> Option<LinkKind> {
    let peers = dim.size - 1;
    let bandwidth_gbps = match dim.kind {
        DimKind::FullyConnected => dim.bandwidth_gbps,
        DimKind::Switch { degree } if degree >= peers => dim.bandwidth_gbps / peers as f64,
        // Priced as its full unwinding until the formulas price switch ports.
        DimKind::SwitchVertex { .. } => dim.bandwidth_gbps / peers as f64,
        _ => return None,
    };
    Some(LinkKind {
        bandwidth_gbps,
        latency_us: dim.latency_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::compose;

    fn dim(kind: DimKind, size: usize, bandwidth_gbps: f64, latency_us: f64) -> Dim {
        Dim {
            reduces: false,
            kind,
            size,
            bandwidth_gbps,
            latency_us,
        }
    }

    /// What `from_dims` describes is what `compose` builds: every pair's link, or none.
    #[test]
    fn the_description_matches_the_built_topology() {
        let cases = [
            vec![
                dim(DimKind::Switch { degree: 3 }, 4, 300.0, 0.7),
                dim(DimKind::Switch { degree: 2 }, 3, 50.0, 2.0),
            ],
            vec![
                dim(DimKind::FullyConnected, 2, 40.0, 0.5),
                dim(DimKind::Switch { degree: 1 }, 1, 50.0, 2.0),
                dim(DimKind::Switch { degree: 9 }, 3, 20.0, 1.0),
            ],
            vec![dim(DimKind::Switch { degree: 7 }, 8, 450.0, 0.7)],
        ];
        for dims in cases {
            let domain = dims.iter().find(|d| d.size > 1).map_or(1, |d| d.size);
            let cluster = Cluster::from_dims(&dims, domain).unwrap();
            let topo = compose("t", &dims).unwrap();
            assert_eq!(cluster.npus(), topo.npus());
            for a in 0..topo.npus() {
                let egress: f64 = topo.out_links(a).map(|l| topo.link(l).bandwidth_gbps).sum();
                assert!((egress - cluster.egress_gbps()).abs() < 1e-9);
                for b in (0..topo.npus()).filter(|&b| b != a) {
                    let built = topo.link_between(a, b).map(|l| {
                        let l = topo.link(l);
                        (l.bandwidth_gbps, l.latency_us)
                    });
                    let described = cluster.link(a, b).map(|k| (k.bandwidth_gbps, k.latency_us));
                    assert_eq!(built, described, "{a} -> {b}");
                }
            }
        }
    }

    #[test]
    fn other_shapes_are_not_clusters() {
        let partial = dim(DimKind::Switch { degree: 2 }, 8, 100.0, 1.0);
        let ring = dim(DimKind::Ring, 4, 100.0, 1.0);
        let fc = dim(DimKind::FullyConnected, 4, 100.0, 1.0);
        assert_eq!(Cluster::from_dims(&[partial], 8), None);
        assert_eq!(Cluster::from_dims(&[fc, ring], 4), None);
        assert_eq!(Cluster::from_dims(&[fc, fc, fc], 4), None);
        // Domains that are not the first dimension's lines.
        assert_eq!(Cluster::from_dims(&[fc, fc], 2), None);
        assert_eq!(Cluster::from_dims(&[fc], 2), None);
    }

    #[test]
    fn one_dimension_is_a_domain_or_rails() {
        let fc = dim(DimKind::FullyConnected, 4, 100.0, 1.0);
        let one = dim(DimKind::FullyConnected, 1, 100.0, 1.0);
        let domain = Cluster::from_dims(&[fc], 4).unwrap();
        assert_eq!((domain.domains, domain.size), (1, 4));
        let rails = Cluster::from_dims(&[one, fc], 1).unwrap();
        assert_eq!((rails.domains, rails.size), (4, 1));
        assert_eq!(rails.link(0, 3), Some(rails.rail));
    }
}
