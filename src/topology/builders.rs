//! Builders for the regular shapes: rings, fully connected, unwound switches, meshes,
//! tori, hypercubes, dragonflies, and their multi-dimensional compositions.

use super::limits::{check_bandwidth, check_latency, check_links, check_npus};
use super::{Link, NpuId, Topology};
use crate::error::{echo, Error, Result};

/// How the NPUs along one dimension are joined.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DimKind {
    /// A line: i <-> i+1, no wrap-around (one dimension of a mesh).
    Line,
    /// A bidirectional ring: i <-> i+1 mod n.
    Ring,
    /// A unidirectional ring: i -> i+1 mod n.
    UniRing,
    /// Every NPU linked to every other in both directions.
    FullyConnected,
    /// A switch unwound with degree d (the TACOS paper's rule): NPU i links to
    /// i+1 .. i+d mod n, each link carrying the NPU's bandwidth divided by d.
    Switch { degree: usize },
}

/// One dimension of a composed topology.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dim {
    pub kind: DimKind,
    pub size: usize,
    /// Bandwidth in GB/s of an NPU in this dimension (split over d links for a switch).
    pub bandwidth_gbps: f64,
    pub latency_us: f64,
}

/// Links as builders add them; adding an existing (src, dst) pair again keeps the first (so
/// a ring of two NPUs is one link each way). A plain list, sorted once at the end: a third
/// of the memory of a map, which matters at `MAX_LINKS`.
#[derive(Default)]
pub(crate) struct LinkSet(Vec<Link>);

impl LinkSet {
    /// An empty set with room for `links` links (what the builder counted beforehand).
    pub(crate) fn with_capacity(links: usize) -> LinkSet {
        LinkSet(Vec::with_capacity(links))
    }

    pub(crate) fn add(&mut self, src: NpuId, dst: NpuId, bandwidth_gbps: f64, latency_us: f64) {
        self.0.push(Link {
            src,
            dst,
            bandwidth_gbps,
            latency_us,
        });
    }

    pub(crate) fn add_both(&mut self, a: NpuId, b: NpuId, bandwidth_gbps: f64, latency_us: f64) {
        self.add(a, b, bandwidth_gbps, latency_us);
        self.add(b, a, bandwidth_gbps, latency_us);
    }

    pub(crate) fn into_topology(self, name: impl Into<String>, npus: usize) -> Result<Topology> {
        let mut links = self.0;
        // A stable sort keeps the first of equal pairs first, and dedup keeps it.
        links.sort_by_key(|l| (l.src, l.dst));
        links.dedup_by_key(|l| (l.src, l.dst));
        Topology::new(name, npus, links)
    }
}

/// How many distinct links `add_dim` makes along one line of `size` NPUs.
fn links_per_line(kind: DimKind, size: usize) -> u128 {
    let n = size as u128;
    match kind {
        DimKind::Line => 2 * n.saturating_sub(1),
        DimKind::Ring if size > 2 => 2 * n,
        DimKind::Ring | DimKind::UniRing => n * u128::from(size > 1),
        DimKind::FullyConnected => n * n.saturating_sub(1),
        DimKind::Switch { degree } => n * (degree as u128).min(n.saturating_sub(1)),
    }
}

/// Adds the links of one dimension among `members` (NPU ids in dimension order).
fn add_dim(set: &mut LinkSet, dim: &Dim, members: &[NpuId]) {
    let n = members.len();
    let (bw, lat) = (dim.bandwidth_gbps, dim.latency_us);
    match dim.kind {
        DimKind::Line => {
            for i in 0..n.saturating_sub(1) {
                set.add_both(members[i], members[i + 1], bw, lat);
            }
        }
        DimKind::Ring if n > 1 => {
            // Two NPUs are one pair, not two: the links are added once, as counted.
            let pairs = if n == 2 { 1 } else { n };
            for i in 0..pairs {
                set.add_both(members[i], members[(i + 1) % n], bw, lat);
            }
        }
        DimKind::UniRing if n > 1 => {
            for i in 0..n {
                set.add(members[i], members[(i + 1) % n], bw, lat);
            }
        }
        DimKind::FullyConnected => {
            for i in 0..n {
                for j in 0..n {
                    if i != j {
                        set.add(members[i], members[j], bw, lat);
                    }
                }
            }
        }
        DimKind::Switch { degree } => {
            let d = unwound_degree(n, degree);
            for (i, j) in unwound_pairs(n, d) {
                set.add(members[i], members[j], bw / d as f64, lat);
            }
        }
        DimKind::Ring | DimKind::UniRing => {}
    }
}

/// The degree a switch of `n` NPUs is unwound with when `degree` is asked for: at most
/// n-1, the peers there are.
pub(crate) fn unwound_degree(n: usize, degree: usize) -> usize {
    degree.min(n.saturating_sub(1))
}

/// The TACOS paper's unwinding of a switch among `n` NPUs with degree `d`: member i links
/// to members i+1 .. i+d mod n, each link carrying the port's bandwidth divided by d.
/// `compose` and `Topology::unwind` both take their pairs from here.
pub(crate) fn unwound_pairs(n: usize, d: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |i| (1..=d).map(move |k| (i, (i + k) % n)))
}

/// Composes dimensions into one topology: NPU id = sum of coordinate x stride, the first
/// dimension varying fastest; each line of NPUs along a dimension is joined as that
/// dimension says. A 2D mesh is Line x Line, a torus Ring x Ring, the paper's 3D-RFS
/// Ring x FullyConnected x Switch.
pub fn compose(name: impl Into<String>, dims: &[Dim]) -> Result<Topology> {
    let name = name.into();
    let invalid = |input: String, value: String, allowed: &str| Error::Invalid {
        input: format!("{input} of '{}'", echo(&name)),
        value,
        allowed: allowed.into(),
    };
    if dims.is_empty() {
        return Err(invalid(
            "dimensions".into(),
            "none".into(),
            "at least one dimension",
        ));
    }
    for (i, d) in dims.iter().enumerate() {
        if d.size == 0 {
            return Err(invalid(
                format!("dimension {i} size"),
                "0".into(),
                "at least 1",
            ));
        }
        if let DimKind::Switch { degree: 0 } = d.kind {
            return Err(invalid(
                format!("dimension {i} switch degree d"),
                "0".into(),
                "at least 1",
            ));
        }
        check_bandwidth(
            &format!("dimension {i} bandwidth of '{}'", echo(&name)),
            d.bandwidth_gbps,
        )?;
        check_latency(
            &format!("dimension {i} latency of '{}'", echo(&name)),
            d.latency_us,
        )?;
    }
    let context = || format!("'{}'", echo(&name));
    let npus = dims
        .iter()
        .try_fold(1u128, |acc, d| {
            let product = acc * d.size as u128;
            check_npus(product, context).map(|_| product)
        })
        .map(|n| n as usize)?;
    let links = dims
        .iter()
        .map(|d| (npus / d.size) as u128 * links_per_line(d.kind, d.size))
        .sum();
    let mut set = LinkSet::with_capacity(check_links(links, context)?);
    let mut stride = 1;
    for dim in dims {
        for base in 0..npus {
            // `base` starts a line when its coordinate in this dimension is 0.
            if (base / stride) % dim.size != 0 {
                continue;
            }
            let members: Vec<NpuId> = (0..dim.size).map(|k| base + k * stride).collect();
            add_dim(&mut set, dim, &members);
        }
        stride *= dim.size;
    }
    let sizes = dims.iter().map(|d| d.size).collect();
    Ok(set.into_topology(name, npus)?.with_dimensions(sizes))
}

/// `n` NPUs around one switch vertex named `switch`: each NPU's port is a link up into it
/// and a link down from it, both of `bandwidth_gbps` and `latency_us` (a route between two
/// NPUs crosses two links, so it takes twice the latency).
pub fn star(name: &str, n: usize, bandwidth_gbps: f64, latency_us: f64) -> Result<Topology> {
    if n == 0 {
        return Err(Error::Invalid {
            input: format!("NPUs of '{}'", echo(name)),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    let context = || format!("'{}'", echo(name));
    check_npus(n as u128 + 1, context)?;
    let mut links = Vec::with_capacity(check_links(2 * n as u128, context)?);
    // Ids in (src, dst) order: every NPU's link up, then the switch's links down.
    for (src, dst) in (0..n).map(|npu| (npu, n)).chain((0..n).map(|npu| (n, npu))) {
        links.push(Link {
            src,
            dst,
            bandwidth_gbps,
            latency_us,
        });
    }
    Topology::with_switches(name, n, vec!["switch".into()], links)
}

/// A binary hypercube of 2^dims NPUs: i <-> i xor 2^k.
pub fn hypercube(
    name: &str,
    dims: usize,
    bandwidth_gbps: f64,
    latency_us: f64,
) -> Result<Topology> {
    if dims == 0 || dims > 24 {
        return Err(Error::Invalid {
            input: "hypercube dimensions".into(),
            value: dims.to_string(),
            allowed: "1..24".into(),
        });
    }
    let n = 1usize << dims;
    let context = || format!("'{}'", echo(name));
    let mut set = LinkSet::with_capacity(check_links((n * dims) as u128, context)?);
    for i in 0..n {
        for k in 0..dims {
            set.add(i, i ^ (1 << k), bandwidth_gbps, latency_us);
        }
    }
    Ok(set.into_topology(name, n)?.with_dimensions(vec![2; dims]))
}

/// A dragonfly of `groups` groups of `per_group` NPUs: fully connected inside a group, one
/// bidirectional global link per pair of groups. Group g's link to its j-th other group
/// (other groups in increasing order) leaves from its NPU j mod per_group.
pub fn dragonfly(
    name: &str,
    per_group: usize,
    groups: usize,
    local: (f64, f64),
    global: (f64, f64),
) -> Result<Topology> {
    for (what, count) in [("NPUs per group", per_group), ("groups", groups)] {
        if count == 0 {
            return Err(Error::Invalid {
                input: format!("{what} of '{}'", echo(name)),
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
    }
    let context = || format!("'{}'", echo(name));
    let (p, g) = (per_group as u128, groups as u128);
    let n = check_npus(p * g, context)?;
    let links = g * p * (p - 1) + g * (g - 1);
    let mut set = LinkSet::with_capacity(check_links(links, context)?);
    for g in 0..groups {
        let members: Vec<NpuId> = (0..per_group).map(|i| g * per_group + i).collect();
        let dim = Dim {
            kind: DimKind::FullyConnected,
            size: per_group,
            bandwidth_gbps: local.0,
            latency_us: local.1,
        };
        add_dim(&mut set, &dim, &members);
    }
    // Index of group `h` among the other groups of `g`.
    let slot = |g: usize, h: usize| if h < g { h } else { h - 1 };
    for g in 0..groups {
        for h in g + 1..groups {
            let a = g * per_group + slot(g, h) % per_group;
            let b = h * per_group + slot(h, g) % per_group;
            set.add_both(a, b, global.0, global.1);
        }
    }
    Ok(set
        .into_topology(name, n)?
        .with_dimensions(vec![per_group, groups]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_counted_as_built() {
        let kinds = |n: usize| {
            [
                DimKind::Line,
                DimKind::Ring,
                DimKind::UniRing,
                DimKind::FullyConnected,
                DimKind::Switch { degree: 1 },
                DimKind::Switch { degree: 3 },
                DimKind::Switch { degree: n + 5 },
            ]
        };
        let dim = |kind, size| Dim {
            kind,
            size,
            bandwidth_gbps: 50.0,
            latency_us: 0.5,
        };
        for a in 1..7 {
            for kind in kinds(a) {
                let t = compose("one", &[dim(kind, a)]).unwrap();
                assert_eq!(
                    t.links().len() as u128,
                    links_per_line(kind, a),
                    "{kind:?} {a}"
                );
                for b in 1..4 {
                    let two = [dim(kind, a), dim(DimKind::Ring, b)];
                    let t = compose("two", &two).unwrap();
                    let counted = b as u128 * links_per_line(kind, a)
                        + a as u128 * links_per_line(DimKind::Ring, b);
                    assert_eq!(t.links().len() as u128, counted, "{kind:?} {a} x ring {b}");
                }
            }
        }
    }
}
