//! Builders for the regular shapes: rings, fully connected, switches (as vertices or
//! unwound), meshes, tori, hypercubes, dragonflies, leaf-spine fabrics, and their
//! multi-dimensional compositions.

use super::limits::{check_bandwidth, check_latency, check_links, check_npus};
use super::{Link, NpuId, Topology, VertexId};
use crate::error::{echo, Error, Result};
use std::ops::Range;

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
    /// Each line of NPUs joined through a switch vertex of its own: every NPU's port is a
    /// link up into the switch and a link down from it, each with the dimension's full
    /// bandwidth and half its latency, so a transfer through the switch (two hops) takes
    /// the dimension's latency, as over an unwound switch's link. The switch of line l
    /// (lines numbered in the order of their first NPU) is named `{prefix}{l}`, or without
    /// a prefix `dim{d}-line{l}` (`switch` when it is the topology's only switch). A line of
    /// one NPU has no switch.
    SwitchVertex { prefix: Option<&'static str> },
}

/// One dimension of a composed topology.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dim {
    pub kind: DimKind,
    pub size: usize,
    /// Bandwidth in GB/s of an NPU in this dimension: split over d links for an unwound
    /// switch, the whole of each link of its port for a switch vertex.
    pub bandwidth_gbps: f64,
    /// Latency of a transfer along this dimension, microseconds (halved over the two hops
    /// through a switch vertex).
    pub latency_us: f64,
    /// Its switch vertices sum and multicast inside themselves (NVLS,
    /// `Topology::reduces`); meaningful for a switch-vertex dimension only.
    pub reduces: bool,
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

    pub(crate) fn add(
        &mut self,
        src: VertexId,
        dst: VertexId,
        bandwidth_gbps: f64,
        latency_us: f64,
    ) {
        self.0.push(Link {
            src,
            dst,
            bandwidth_gbps,
            latency_us,
        });
    }

    pub(crate) fn add_both(
        &mut self,
        a: VertexId,
        b: VertexId,
        bandwidth_gbps: f64,
        latency_us: f64,
    ) {
        self.add(a, b, bandwidth_gbps, latency_us);
        self.add(b, a, bandwidth_gbps, latency_us);
    }

    /// The links sorted by (src, dst), the first of equal pairs kept.
    fn sorted(self) -> Vec<Link> {
        let mut links = self.0;
        // A stable sort keeps the first of equal pairs first, and dedup keeps it.
        links.sort_by_key(|l| (l.src, l.dst));
        links.dedup_by_key(|l| (l.src, l.dst));
        links
    }

    pub(crate) fn into_topology(self, name: impl Into<String>, npus: usize) -> Result<Topology> {
        Topology::new(name, npus, self.sorted())
    }
}

/// A topology being built: NPUs `0..npus`, switch vertices numbered after them in the
/// order they are added, and links. Every addition is counted against the limits first
/// (`reserve`), so a shape too large is refused before anything is allocated for it.
pub(crate) struct Fabric {
    name: String,
    npus: usize,
    switches: Vec<String>,
    links: LinkSet,
}

impl Fabric {
    /// `npus` NPUs (counted against the limit), no switches or links yet.
    pub(crate) fn new(name: impl Into<String>, npus: usize) -> Result<Fabric> {
        let name = name.into();
        check_npus(npus as u128, || format!("'{}'", echo(&name)))?;
        Ok(Fabric {
            name,
            npus,
            switches: Vec::new(),
            links: LinkSet::default(),
        })
    }

    /// Checks that `switches` more switches and `links` more links keep the topology
    /// within the limits (switches count as vertices with the NPUs), and makes room.
    pub(crate) fn reserve(&mut self, switches: u128, links: u128) -> Result<()> {
        let context = || format!("'{}'", echo(&self.name));
        let vertices = self.npus as u128 + self.switches.len() as u128 + switches;
        check_npus(vertices, context)?;
        let links = check_links(self.links.0.len() as u128 + links, context)?;
        self.switches.reserve(switches as usize);
        self.links.0.reserve(links - self.links.0.len());
        Ok(())
    }

    /// Adds a switch vertex named `name`; its id.
    pub(crate) fn add_switch(&mut self, name: String) -> VertexId {
        self.switches.push(name);
        self.npus + self.switches.len() - 1
    }

    /// A link from `src` to `dst` and one back, alike.
    pub(crate) fn add_both(
        &mut self,
        a: VertexId,
        b: VertexId,
        bandwidth_gbps: f64,
        latency_us: f64,
    ) {
        self.links.add_both(a, b, bandwidth_gbps, latency_us);
    }

    /// Adds the links of one dimension among `members` (NPU ids in dimension order); a
    /// switch vertex, where the dimension has one, named `switch_name()`.
    fn add_line(&mut self, dim: &Dim, members: &[NpuId], switch_name: impl FnOnce() -> String) {
        let n = members.len();
        let (bw, lat) = (dim.bandwidth_gbps, dim.latency_us);
        let set = &mut self.links;
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
            DimKind::SwitchVertex { .. } if n > 1 => {
                let s = self.add_switch(switch_name());
                for &m in members {
                    self.links.add_both(m, s, bw, lat / 2.0);
                }
            }
            DimKind::Ring | DimKind::UniRing | DimKind::SwitchVertex { .. } => {}
        }
    }

    /// The topology, checked as `Topology::with_switches` checks any.
    pub(crate) fn build(self) -> Result<Topology> {
        Topology::with_switches(self.name, self.npus, self.switches, self.links.sorted())
    }
}

/// How many distinct links `add_line` makes along one line of `size` NPUs.
fn links_per_line(kind: DimKind, size: usize) -> u128 {
    let n = size as u128;
    match kind {
        DimKind::Line => 2 * n.saturating_sub(1),
        DimKind::Ring if size > 2 => 2 * n,
        DimKind::Ring | DimKind::UniRing => n * u128::from(size > 1),
        DimKind::FullyConnected => n * n.saturating_sub(1),
        DimKind::Switch { degree } => n * (degree as u128).min(n.saturating_sub(1)),
        DimKind::SwitchVertex { .. } => 2 * n * u128::from(size > 1),
    }
}

/// How many switch vertices `add_line` adds for one line of `size` NPUs.
fn switches_per_line(kind: DimKind, size: usize) -> u128 {
    u128::from(matches!(kind, DimKind::SwitchVertex { .. }) && size > 1)
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
/// Ring x FullyConnected x switch (a vertex per line, or unwound).
pub fn compose(name: impl Into<String>, dims: &[Dim]) -> Result<Topology> {
    let (fabric, switches) = compose_fabric(name, dims)?;
    let sizes = dims.iter().map(|d| d.size).collect();
    let reducing = reducing_switches(dims, &switches);
    fabric
        .build()?
        .with_dimensions(sizes)
        .with_reducing(&reducing)
}

/// The switches of the dimensions that reduce, given each dimension's switch ids.
pub(crate) fn reducing_switches(dims: &[Dim], switches: &[Range<VertexId>]) -> Vec<VertexId> {
    dims.iter()
        .zip(switches)
        .filter(|(d, _)| d.reduces && matches!(d.kind, DimKind::SwitchVertex { .. }))
        .flat_map(|(_, ids)| ids.clone())
        .collect()
}

/// As `compose`, leaving the fabric open for more switches (a spine over the switches of
/// a dimension); with the ids of each dimension's switches.
pub(crate) fn compose_fabric(
    name: impl Into<String>,
    dims: &[Dim],
) -> Result<(Fabric, Vec<Range<VertexId>>)> {
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
    let lines = |d: &Dim| (npus / d.size) as u128;
    let links = dims
        .iter()
        .map(|d| lines(d) * links_per_line(d.kind, d.size))
        .sum();
    let switches: u128 = dims
        .iter()
        .map(|d| lines(d) * switches_per_line(d.kind, d.size))
        .sum();
    let mut fabric = Fabric::new(name, npus)?;
    fabric.reserve(switches, links)?;
    let mut stride = 1;
    let mut ranges = Vec::with_capacity(dims.len());
    for (index, dim) in dims.iter().enumerate() {
        let first = fabric.npus + fabric.switches.len();
        let mut line = 0;
        for base in 0..npus {
            // `base` starts a line when its coordinate in this dimension is 0.
            if (base / stride) % dim.size != 0 {
                continue;
            }
            let members: Vec<NpuId> = (0..dim.size).map(|k| base + k * stride).collect();
            let switch_name = || match dim.kind {
                DimKind::SwitchVertex { prefix: Some(p) } => format!("{p}{line}"),
                _ if switches == 1 => "switch".to_string(),
                _ => format!("dim{index}-line{line}"),
            };
            fabric.add_line(dim, &members, switch_name);
            line += 1;
        }
        ranges.push(first..fabric.npus + fabric.switches.len());
        stride *= dim.size;
    }
    Ok((fabric, ranges))
}

/// `n` NPUs around one switch vertex named `switch`: each NPU's port is a link up into it
/// and a link down from it, both of `bandwidth_gbps` and `latency_us` (a route between two
/// NPUs crosses two links, so it takes twice the latency; `switch:N` halves its `lat=`).
pub fn star(name: &str, n: usize, bandwidth_gbps: f64, latency_us: f64) -> Result<Topology> {
    if n == 0 {
        return Err(Error::Invalid {
            input: format!("NPUs of '{}'", echo(name)),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    let mut fabric = Fabric::new(name, n)?;
    fabric.reserve(1, 2 * n as u128)?;
    let s = fabric.add_switch("switch".into());
    for npu in 0..n {
        fabric.add_both(npu, s, bandwidth_gbps, latency_us);
    }
    fabric.build()
}

/// A tier of spine switches over a set of leaf switches (a leaf-spine fabric's upper
/// level): spine k is named `spine{k}` and has a link up from and a link down to every
/// leaf.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spines {
    /// Spine switches, at least 1.
    pub count: usize,
    /// Oversubscription R > 0: a leaf's links up to the spines total the bandwidth of its
    /// links down to its NPUs divided by R (1 non-blocking, 2 for 2:1), spread evenly
    /// over its `count` spine links, each direction.
    pub oversub: f64,
    /// Latency of one hop between a leaf and a spine, microseconds.
    pub hop_latency_us: f64,
}

/// Adds `spines` over the switches `leaves`, each with `down_gbps` of links down to its
/// NPUs.
pub(crate) fn add_spines(
    fabric: &mut Fabric,
    leaves: Range<VertexId>,
    down_gbps: f64,
    spines: &Spines,
) -> Result<()> {
    let input = |what: &str| format!("{what} of '{}'", echo(&fabric.name));
    if spines.count == 0 {
        return Err(Error::Invalid {
            input: input("spine switches"),
            value: "0".into(),
            allowed: "at least 1".into(),
        });
    }
    if !(spines.oversub.is_finite() && spines.oversub > 0.0) {
        return Err(Error::Invalid {
            input: input("oversubscription"),
            value: spines.oversub.to_string(),
            allowed: "a number > 0 (1 non-blocking, 2 for 2:1)".into(),
        });
    }
    check_latency(&input("spine hop latency"), spines.hop_latency_us)?;
    let up = down_gbps / spines.oversub / spines.count as f64;
    check_bandwidth(
        &input("a spine link's bandwidth (a leaf's bandwidth down / oversubscription / spines)"),
        up,
    )?;
    fabric.reserve(
        spines.count as u128,
        2 * leaves.len() as u128 * spines.count as u128,
    )?;
    for k in 0..spines.count {
        let spine = fabric.add_switch(format!("spine{k}"));
        for leaf in leaves.clone() {
            fabric.add_both(leaf, spine, up, spines.hop_latency_us);
        }
    }
    Ok(())
}

/// A leaf-spine (folded Clos) fabric: `leaves` leaf switches `leaf0..` with `per_leaf`
/// NPUs each (NPU id = leaf x per_leaf + index), every NPU's port a link up and down of
/// `bandwidth_gbps` and `latency_us` / 2, so a transfer under one leaf takes `latency_us`;
/// `spines` over the leaves, their hops also `latency_us` / 2 (a transfer between leaves
/// takes 2 x `latency_us`).
pub fn clos(
    name: &str,
    per_leaf: usize,
    leaves: usize,
    spines: usize,
    oversub: f64,
    (bandwidth_gbps, latency_us): (f64, f64),
) -> Result<Topology> {
    for (what, count) in [("NPUs per leaf", per_leaf), ("leaves", leaves)] {
        if count == 0 {
            return Err(Error::Invalid {
                input: format!("{what} of '{}'", echo(name)),
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
    }
    check_bandwidth(&format!("bandwidth of '{}'", echo(name)), bandwidth_gbps)?;
    check_latency(&format!("latency of '{}'", echo(name)), latency_us)?;
    let npus = check_npus(per_leaf as u128 * leaves as u128, || {
        format!("'{}'", echo(name))
    })?;
    let mut fabric = Fabric::new(name, npus)?;
    fabric.reserve(leaves as u128, 2 * npus as u128)?;
    let first = npus;
    for leaf in 0..leaves {
        let s = fabric.add_switch(format!("leaf{leaf}"));
        for npu in leaf * per_leaf..(leaf + 1) * per_leaf {
            fabric.add_both(npu, s, bandwidth_gbps, latency_us / 2.0);
        }
    }
    let spines = Spines {
        count: spines,
        oversub,
        hop_latency_us: latency_us / 2.0,
    };
    add_spines(
        &mut fabric,
        first..first + leaves,
        per_leaf as f64 * bandwidth_gbps,
        &spines,
    )?;
    Ok(fabric.build()?.with_dimensions(vec![per_leaf, leaves]))
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
    let mut fabric = Fabric::new(name, n)?;
    fabric.reserve(0, g * p * (p - 1) + g * (g - 1))?;
    for g in 0..groups {
        let members: Vec<NpuId> = (0..per_group).map(|i| g * per_group + i).collect();
        let dim = Dim {
            reduces: false,
            kind: DimKind::FullyConnected,
            size: per_group,
            bandwidth_gbps: local.0,
            latency_us: local.1,
        };
        fabric.add_line(&dim, &members, String::new);
    }
    // Index of group `h` among the other groups of `g`.
    let slot = |g: usize, h: usize| if h < g { h } else { h - 1 };
    for g in 0..groups {
        for h in g + 1..groups {
            let a = g * per_group + slot(g, h) % per_group;
            let b = h * per_group + slot(h, g) % per_group;
            fabric.add_both(a, b, global.0, global.1);
        }
    }
    Ok(fabric.build()?.with_dimensions(vec![per_group, groups]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dim(kind: DimKind, size: usize) -> Dim {
        Dim {
            reduces: false,
            kind,
            size,
            bandwidth_gbps: 50.0,
            latency_us: 0.5,
        }
    }

    #[test]
    fn links_and_switches_are_counted_as_built() {
        let kinds = |n: usize| {
            [
                DimKind::Line,
                DimKind::Ring,
                DimKind::UniRing,
                DimKind::FullyConnected,
                DimKind::Switch { degree: 1 },
                DimKind::Switch { degree: 3 },
                DimKind::Switch { degree: n + 5 },
                DimKind::SwitchVertex { prefix: None },
            ]
        };
        for a in 1..7 {
            for kind in kinds(a) {
                let t = compose("one", &[dim(kind, a)]).unwrap();
                assert_eq!(
                    t.links().len() as u128,
                    links_per_line(kind, a),
                    "{kind:?} {a}"
                );
                assert_eq!(t.switches().len() as u128, switches_per_line(kind, a));
                for b in 1..4 {
                    let two = [dim(kind, a), dim(DimKind::Ring, b)];
                    let t = compose("two", &two).unwrap();
                    let counted = b as u128 * links_per_line(kind, a)
                        + a as u128 * links_per_line(DimKind::Ring, b);
                    assert_eq!(t.links().len() as u128, counted, "{kind:?} {a} x ring {b}");
                    let switches = b as u128 * switches_per_line(kind, a);
                    assert_eq!(t.switches().len() as u128, switches);
                }
            }
        }
    }

    #[test]
    fn switch_vertices_are_named_by_dimension_and_line() {
        let sw = |prefix| dim(DimKind::SwitchVertex { prefix }, 3);
        // 3 x 2: dimension 0 has lines {0,1,2} and {3,4,5}; dimension 1 lines {0,3},
        // {1,4}, {2,5}, the switches of dimension 1 numbered after those of dimension 0.
        let two = [sw(None), dim(DimKind::SwitchVertex { prefix: None }, 2)];
        let t = compose("t", &two).unwrap();
        let names: Vec<&str> = t.switches().map(|s| t.switch_name(s).unwrap()).collect();
        assert_eq!(
            names,
            [
                "dim0-line0",
                "dim0-line1",
                "dim1-line0",
                "dim1-line1",
                "dim1-line2"
            ]
        );
        // dim1-line1 joins NPUs 1 and 4.
        let line1: Vec<usize> = t.out_links(9).map(|l| t.link(l).dst).collect();
        assert_eq!(line1, [1, 4]);
        let t = compose("t", &[sw(Some("rail")), dim(DimKind::Ring, 2)]).unwrap();
        assert_eq!(t.switch_name(7), Some("rail1"));
        // One switch in all is `switch`; a line of one NPU has none.
        let t = compose("t", &[dim(DimKind::Ring, 1), sw(None)]).unwrap();
        assert_eq!(t.switches().len(), 1);
        assert_eq!(t.switch_name(3), Some("switch"));
    }

    #[test]
    fn a_switch_vertex_port_has_the_full_bandwidth_and_half_the_latency() {
        let t = compose("t", &[dim(DimKind::SwitchVertex { prefix: None }, 4)]).unwrap();
        for npu in 0..4 {
            for l in [t.link_between(npu, 4), t.link_between(4, npu)] {
                let l = t.link(l.unwrap());
                assert_eq!((l.bandwidth_gbps, l.latency_us), (50.0, 0.25));
            }
        }
        let route = t.route_link(t.route(0, 3).unwrap());
        assert_eq!((route.bandwidth_gbps, route.latency_us), (50.0, 0.5));
    }
}
