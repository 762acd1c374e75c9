//! The network: NPUs, switches and directed links, each with its own latency and bandwidth.
//!
//! Vertices are NPUs (ids `0..npus()`) and switches (ids `npus()..vertices()`): a switch
//! forwards and holds nothing, so every collective, schedule and failed-NPU list speaks of
//! NPUs only, and a transfer between two NPUs crosses switches on a `route`.
//! A `Topology` is immutable once built. Links are kept sorted by (src, dst) and unique,
//! with compressed adjacency in both directions, so the synthesizer and the simulator
//! walk a sparse graph: nothing here is an n x n matrix.
//!
//! A spec string builds one (`docs/topologies.md` lists the builders and presets); failing
//! an NPU keeps its id and takes it out of every collective:
//!
//! ```
//! use tacos::topology::{parse_spec, SpecDefaults};
//!
//! let torus = parse_spec("torus:4x4", &SpecDefaults::default())?;
//! assert_eq!(torus.npus(), 16);
//! // Each NPU of a 4x4 torus has a link to its four neighbours, in both directions.
//! assert_eq!(torus.links().len(), 16 * 4);
//! let degraded = torus.fail_npus(&[5])?;
//! assert_eq!(degraded.alive_npus().len(), 15);
//! # Ok::<(), tacos::Error>(())
//! ```

mod builders;
pub mod file;
pub mod limits;
mod lists;
pub mod nccl_xml;
mod paths;
mod presets;
mod routes;
pub mod spec;
mod unwind;

pub use builders::{compose, star, Dim, DimKind};
pub use limits::{
    MAX_BANDWIDTH_GBPS, MAX_LATENCY_US, MAX_LINKS, MAX_NICS, MAX_NPUS, MAX_ROUTE_LINKS,
    MIN_BANDWIDTH_GBPS,
};
pub use lists::{format_npus, parse_link_pairs, parse_npu_list};
pub(crate) use paths::{shortest_paths, ShortestPaths};
pub use presets::PRESETS;
pub use routes::{RouteCache, RouteTree};
pub use spec::{parse_spec, parse_spec_with_warnings, SpecDefaults};

use crate::error::{echo, Error, Npus, Result};
use crate::units::{alpha_beta_ps, Picos};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Index of an NPU, 0-based.
pub type NpuId = usize;
/// Index of a vertex: an NPU (`0..npus()`) or a switch (`npus()..vertices()`).
pub type VertexId = usize;
/// Index of a link in `Topology::links()`.
pub type LinkId = usize;

/// A directed link from vertex `src` to vertex `dst`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub src: VertexId,
    pub dst: VertexId,
    /// Bandwidth in GB/s (1e9 bytes per second), `MIN_BANDWIDTH_GBPS..=MAX_BANDWIDTH_GBPS`.
    pub bandwidth_gbps: f64,
    /// Latency (alpha) in microseconds, `0..=MAX_LATENCY_US`.
    pub latency_us: f64,
}

impl Link {
    /// Alpha-beta time to move `bytes` over this link, in picoseconds.
    pub fn transfer_ps(&self, bytes: f64) -> Picos {
        alpha_beta_ps(self.latency_us, self.bandwidth_gbps, bytes)
    }
}

/// The NICs of one node that its GPUs in the topology use, where the builder knows them
/// (presets, NCCL topology files): NCCL lays its channels over NICs, which GPUs may share
/// or have several of, while the links say only each GPU's share of them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeNics {
    /// NICs of a node that its GPUs use.
    pub count: usize,
    /// Line rate of one NIC, GB/s per direction.
    pub gbps: f64,
    /// The network reduces what the NICs send into it (SHARP), as a user says (a preset's
    /// `sharp=yes`, an NCCL topology file's `coll="1"`): NCCL may then run CollNet.
    pub sharp: bool,
}

/// A network of NPUs and switches joined by directed links.
#[derive(Clone, Debug)]
pub struct Topology {
    name: String,
    npus: usize,
    /// Names of the switches, vertex `npus + i` being `switches[i]`.
    switches: Vec<String>,
    links: Vec<Link>,
    failed: Vec<NpuId>,
    /// Sizes of the dimensions the topology was composed of (first varying fastest in NPU
    /// ids), when it was built that way; what hierarchical algorithms follow.
    dims: Option<Vec<usize>>,
    /// The NICs each node's GPUs use, where the builder knows them.
    nics: Option<NodeNics>,
    /// The switches that can sum what their members send them and multicast the result
    /// (NVLS: Hopper and Blackwell NVSwitches), sorted.
    reducing: Vec<VertexId>,
    /// `links[out_start[u]..out_start[u+1]]` are the links leaving `u`.
    out_start: Vec<usize>,
    /// `in_index[in_start[v]..in_start[v+1]]` are the ids of the links entering `v`.
    in_start: Vec<usize>,
    in_index: Vec<LinkId>,
}

impl PartialEq for Topology {
    fn eq(&self, other: &Self) -> bool {
        self.npus == other.npus
            && self.switches == other.switches
            && self.links == other.links
            && self.failed == other.failed
            && self.reducing == other.reducing
    }
}

impl Topology {
    /// Builds a topology, checking every link: NPUs in range, no self loops, no duplicate
    /// (src, dst) pair, bandwidth and latency within `limits`' ranges; and at most
    /// `MAX_NPUS` NPUs and `MAX_LINKS` links, checked before anything is allocated.
    pub fn new(name: impl Into<String>, npus: usize, links: Vec<Link>) -> Result<Topology> {
        Self::with_failed(name, npus, Vec::new(), links, Vec::new())
    }

    /// As `new`, with switch vertices `npus..npus + switches.len()` named by `switches`
    /// (unique, non-empty names); links may join any two vertices. Every switch needs a
    /// link in and a link out, else it could never forward anything.
    pub fn with_switches(
        name: impl Into<String>,
        npus: usize,
        switches: Vec<String>,
        links: Vec<Link>,
    ) -> Result<Topology> {
        Self::with_failed(name, npus, switches, links, Vec::new())
    }

    fn with_failed(
        name: impl Into<String>,
        npus: usize,
        switches: Vec<String>,
        mut links: Vec<Link>,
        mut failed: Vec<NpuId>,
    ) -> Result<Topology> {
        let name = name.into();
        if npus == 0 {
            return Err(Error::Invalid {
                input: format!("NPUs of topology '{}'", echo(&name)),
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
        let vertices = npus as u128 + switches.len() as u128;
        limits::check_npus(vertices, || format!("topology '{}'", echo(&name)))?;
        limits::check_links(links.len() as u128, || {
            format!("topology '{}'", echo(&name))
        })?;
        check_switch_names(&switches)?;
        let vertices = npus + switches.len();
        let label = format!("link of '{}'", echo(&name));
        for l in &links {
            check_link(&label, l, npus, switches.len())?;
        }
        failed.sort_unstable();
        failed.dedup();
        if let Some(&f) = failed.iter().find(|&&f| f >= npus) {
            return Err(not_an_npu(f, npus));
        }
        // Builders hand links over sorted and unique; only other lists need the search
        // for a repeated pair, which names both positions.
        let key = |l: &Link| (l.src, l.dst);
        if !links.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
            let mut order: Vec<usize> = (0..links.len()).collect();
            order.sort_by_key(|&i| key(&links[i]));
            for w in order.windows(2) {
                let (a, b) = (&links[w[0]], &links[w[1]]);
                if key(a) == key(b) {
                    return Err(Error::Topology(format!(
                        "links[{}] and links[{}] both connect {} to {}; give one link with the summed bandwidth",
                        w[0].min(w[1]),
                        w[0].max(w[1]),
                        vertex_label(npus, &switches, a.src),
                        vertex_label(npus, &switches, a.dst)
                    )));
                }
            }
        }
        links.sort_by_key(|l| (l.src, l.dst));
        let mut out_start = vec![0; vertices + 1];
        let mut in_start = vec![0; vertices + 1];
        for l in &links {
            out_start[l.src + 1] += 1;
            in_start[l.dst + 1] += 1;
        }
        for v in 0..vertices {
            out_start[v + 1] += out_start[v];
            in_start[v + 1] += in_start[v];
        }
        let mut fill = in_start.clone();
        let mut in_index = vec![0; links.len()];
        for (id, l) in links.iter().enumerate() {
            in_index[fill[l.dst]] = id;
            fill[l.dst] += 1;
        }
        for s in npus..vertices {
            let (outs, ins) = (
                out_start[s + 1] - out_start[s],
                in_start[s + 1] - in_start[s],
            );
            if outs == 0 || ins == 0 {
                return Err(Error::Topology(format!(
                    "switch '{}' of '{}' has no link {}; a switch needs a link in and a link out to forward anything",
                    echo(&switches[s - npus]),
                    echo(&name),
                    if ins == 0 { "in" } else { "out" }
                )));
            }
        }
        Ok(Topology {
            name,
            npus,
            switches,
            links,
            failed,
            dims: None,
            nics: None,
            reducing: Vec::new(),
            out_start,
            in_start,
            in_index,
        })
    }

    /// A short name saying how the topology was made (the spec, or the file's name field).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of NPU ids, failed ones included.
    pub fn npus(&self) -> usize {
        self.npus
    }

    /// Number of vertices: NPUs and switches.
    pub fn vertices(&self) -> usize {
        self.npus + self.switches.len()
    }

    /// Ids of the switch vertices (empty for a topology of NPUs only).
    pub fn switches(&self) -> std::ops::Range<VertexId> {
        self.npus..self.vertices()
    }

    /// Whether the topology has switch vertices.
    pub fn has_switches(&self) -> bool {
        !self.switches.is_empty()
    }

    /// Whether vertex `v` is a switch.
    pub fn is_switch(&self, v: VertexId) -> bool {
        self.switches().contains(&v)
    }

    /// The name of switch `v`; `None` when `v` is not a switch.
    pub fn switch_name(&self, v: VertexId) -> Option<&str> {
        v.checked_sub(self.npus)
            .and_then(|i| self.switches.get(i))
            .map(String::as_str)
    }

    /// How messages name a vertex: `NPU 3` or `switch 'nvs0'`.
    pub fn vertex_label(&self, v: VertexId) -> String {
        vertex_label(self.npus, &self.switches, v)
    }

    /// `Ok` on a topology of NPUs only; else the error saying that `what` does not work
    /// through switch vertices yet and that `--unwind` turns them into NPU-to-NPU links.
    pub fn refuse_switches(&self, what: &str) -> Result<()> {
        if self.switches.is_empty() {
            return Ok(());
        }
        Err(Error::Topology(format!(
            "{what} does not handle switch vertices yet, and '{}' has {} (first '{}'); unwind them into NPU-to-NPU links with --unwind",
            echo(&self.name),
            self.switches.len(),
            echo(&self.switches[0])
        )))
    }

    /// The same topology with `switches` able to reduce inside the switch: a switch that
    /// sums the chunks its NPUs send it and multicasts the result (NVLS), which in-switch
    /// transfers (`schedule::Transfer::in_switch`) may use. Every id must be a switch.
    ///
    /// ```
    /// use tacos::topology::{parse_spec, SpecDefaults};
    /// let star = parse_spec("switch:4", &SpecDefaults::default())?;
    /// let sw = star.npus();
    /// assert!(!star.reduces(sw));
    /// let nvls = star.with_reducing(&[sw])?;
    /// assert!(nvls.reduces(sw) && nvls.has_reducing_switch());
    /// assert!(nvls.with_reducing(&[0]).is_err());
    /// # Ok::<(), tacos::Error>(())
    /// ```
    pub fn with_reducing(mut self, switches: &[VertexId]) -> Result<Topology> {
        if let Some(&v) = switches.iter().find(|&&v| !self.is_switch(v)) {
            return Err(Error::Invalid {
                input: format!("reducing switch of '{}'", echo(&self.name)),
                value: self.vertex_label(v),
                allowed: "a switch of the topology".into(),
            });
        }
        self.reducing.extend_from_slice(switches);
        self.reducing.sort_unstable();
        self.reducing.dedup();
        Ok(self)
    }

    /// Whether vertex `v` is a switch that reduces inside itself (see [`Topology::with_reducing`]).
    pub fn reduces(&self, v: VertexId) -> bool {
        self.reducing.binary_search(&v).is_ok()
    }

    /// The switches that reduce inside themselves, in id order.
    pub fn reducing_switches(&self) -> &[VertexId] {
        &self.reducing
    }

    /// Whether some switch reduces inside itself.
    pub fn has_reducing_switch(&self) -> bool {
        !self.reducing.is_empty()
    }

    /// The same topology, recorded as composed of dimensions of these sizes.
    pub(crate) fn with_dimensions(mut self, dims: Vec<usize>) -> Topology {
        debug_assert_eq!(dims.iter().product::<usize>(), self.npus);
        self.dims = Some(dims);
        self
    }

    /// Sizes of the dimensions the topology was composed of (first varying fastest), if
    /// it was built from dimensions; failed NPUs keep them, subsets and files do not.
    pub fn dimensions(&self) -> Option<&[usize]> {
        self.dims.as_deref()
    }

    /// The same topology, recorded as having `nics` in each node.
    pub(crate) fn with_nics(mut self, nics: NodeNics) -> Topology {
        self.nics = Some(nics);
        self
    }

    /// The NICs each node's GPUs use, where the topology's builder knew them (presets,
    /// NCCL topology files of several nodes); failed NPUs keep them, subsets and files do
    /// not.
    pub fn nics(&self) -> Option<NodeNics> {
        self.nics
    }

    /// All links, sorted by (src, dst).
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The link with this id.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id]
    }

    /// NPUs removed by `fail_npus`: they keep their ids but have no links and take no part.
    pub fn failed(&self) -> &[NpuId] {
        &self.failed
    }

    /// Whether `npu` was failed.
    pub fn is_failed(&self, npu: NpuId) -> bool {
        self.failed.binary_search(&npu).is_ok()
    }

    /// NPUs that are not failed, in id order.
    pub fn alive_npus(&self) -> Vec<NpuId> {
        (0..self.npus).filter(|&n| !self.is_failed(n)).collect()
    }

    /// Ids of the links leaving vertex `v`.
    pub fn out_links(&self, v: VertexId) -> std::ops::Range<LinkId> {
        self.out_start[v]..self.out_start[v + 1]
    }

    /// Ids of the links entering vertex `v`.
    pub fn in_links(&self, v: VertexId) -> &[LinkId] {
        &self.in_index[self.in_start[v]..self.in_start[v + 1]]
    }

    /// The link from vertex `src` to vertex `dst`, if there is one.
    pub fn link_between(&self, src: VertexId, dst: VertexId) -> Option<LinkId> {
        if src >= self.vertices() || dst >= self.vertices() {
            return None;
        }
        let range = self.out_links(src);
        let start = range.start;
        self.links[range]
            .binary_search_by_key(&dst, |l| l.dst)
            .ok()
            .map(|i| start + i)
    }

    /// The same topology with the given NPUs failed: their links are removed and
    /// collectives leave them out. NPU ids do not change.
    pub fn fail_npus(&self, npus: &[NpuId]) -> Result<Topology> {
        if let Some(&bad) = npus.iter().find(|&&n| n >= self.npus) {
            return Err(not_an_npu(bad, self.npus));
        }
        let mut gone = vec![false; self.vertices()];
        for &n in npus {
            gone[n] = true;
        }
        let links = self
            .links
            .iter()
            .filter(|l| !gone[l.src] && !gone[l.dst])
            .cloned()
            .collect();
        let mut failed = self.failed.clone();
        failed.extend_from_slice(npus);
        let switches = self.switches.clone();
        Ok(
            Self::with_failed(self.name.clone(), self.npus, switches, links, failed)?
                .keep_layout(self),
        )
    }

    /// The same vertices, switches and failed NPUs with other `links` (the same pairs
    /// with other figures, for instance).
    pub fn relinked(&self, links: Vec<Link>) -> Result<Topology> {
        let (switches, failed) = (self.switches.clone(), self.failed.clone());
        Ok(
            Self::with_failed(self.name.clone(), self.npus, switches, links, failed)?
                .keep_layout(self),
        )
    }

    /// The same topology without the links between each given pair, in both directions.
    pub fn fail_links(&self, pairs: &[(NpuId, NpuId)]) -> Result<Topology> {
        let mut cut = HashSet::with_capacity(pairs.len());
        for &(a, b) in pairs {
            if self.link_between(a, b).is_none() && self.link_between(b, a).is_none() {
                return Err(Error::Invalid {
                    input: "failed link".into(),
                    value: format!("{a}-{b}"),
                    allowed: "a pair of NPUs that a link joins".into(),
                });
            }
            cut.insert((a.min(b), a.max(b)));
        }
        let joins = |l: &Link| cut.contains(&(l.src.min(l.dst), l.src.max(l.dst)));
        let links = self.links.iter().filter(|l| !joins(l)).cloned().collect();
        let (switches, failed) = (self.switches.clone(), self.failed.clone());
        Ok(
            Self::with_failed(self.name.clone(), self.npus, switches, links, failed)?
                .keep_layout(self),
        )
    }

    /// The sub-topology induced by `npus`, renumbered 0..k-1 in the order given: what a
    /// communicator over those NPUs sees when it can only route among its own members.
    /// Switches are shared by everyone and stay, numbered after the NPUs as before.
    pub fn subset(&self, npus: &[NpuId]) -> Result<Topology> {
        let mut new_id = vec![usize::MAX; self.vertices()];
        for (i, &n) in npus.iter().enumerate() {
            if n >= self.npus || self.is_failed(n) {
                return Err(Error::Invalid {
                    input: "subset NPU".into(),
                    value: n.to_string(),
                    allowed: format!("an alive NPU of the topology, 0..{}", self.npus - 1),
                });
            }
            if new_id[n] != usize::MAX {
                return Err(Error::Invalid {
                    input: "subset NPU".into(),
                    value: n.to_string(),
                    allowed: "named once".into(),
                });
            }
            new_id[n] = i;
        }
        let switches = self.switches_serving(&new_id);
        for (i, &v) in switches.iter().enumerate() {
            new_id[v] = npus.len() + i;
        }
        let links = self
            .links
            .iter()
            .filter(|l| new_id[l.src] != usize::MAX && new_id[l.dst] != usize::MAX)
            .map(|l| Link {
                src: new_id[l.src],
                dst: new_id[l.dst],
                ..l.clone()
            })
            .collect();
        let names = switches
            .iter()
            .map(|&v| self.switches[v - self.npus].clone())
            .collect();
        let reducing: Vec<VertexId> = switches
            .iter()
            .filter(|&&v| self.reduces(v))
            .map(|&v| new_id[v])
            .collect();
        Topology::with_switches(format!("{} (subset)", self.name), npus.len(), names, links)?
            .with_reducing(&reducing)
    }

    /// The switches that still forward something among the NPUs `kept` marks (not
    /// `usize::MAX`): each needs a link in and a link out among kept vertices, and
    /// dropping one may leave another without (a spine above dropped rails).
    fn switches_serving(&self, kept: &[usize]) -> Vec<VertexId> {
        let mut keep: Vec<bool> = (0..self.vertices())
            .map(|v| self.is_switch(v) || kept[v] != usize::MAX)
            .collect();
        loop {
            let (mut ins, mut outs) = (vec![0usize; keep.len()], vec![0usize; keep.len()]);
            for l in self.links.iter().filter(|l| keep[l.src] && keep[l.dst]) {
                outs[l.src] += 1;
                ins[l.dst] += 1;
            }
            let idle: Vec<VertexId> = self
                .switches()
                .filter(|&v| keep[v] && (ins[v] == 0 || outs[v] == 0))
                .collect();
            if idle.is_empty() {
                return self.switches().filter(|&v| keep[v]).collect();
            }
            idle.into_iter().for_each(|v| keep[v] = false);
        }
    }

    /// Hop counts from `src` to every vertex (`usize::MAX` where unreachable); a switch
    /// on the way counts as a hop like any vertex.
    pub fn hops_from(&self, src: VertexId) -> Vec<usize> {
        let mut dist = vec![usize::MAX; self.vertices()];
        let mut queue = VecDeque::from([src]);
        dist[src] = 0;
        while let Some(u) = queue.pop_front() {
            for l in &self.links[self.out_links(u)] {
                if dist[l.dst] == usize::MAX {
                    dist[l.dst] = dist[u] + 1;
                    queue.push_back(l.dst);
                }
            }
        }
        dist
    }

    /// The NPUs of `targets` that `src` cannot reach.
    pub fn unreachable_from(&self, src: NpuId, targets: &[NpuId]) -> Vec<NpuId> {
        let dist = self.hops_from(src);
        targets
            .iter()
            .copied()
            .filter(|&t| dist[t] == usize::MAX)
            .collect()
    }

    /// Checks that every NPU in `npus` reaches every other one; the error names the NPUs
    /// the first one cannot reach, or that cannot reach it, and the switch cut off with
    /// them where there is one (a one-way link between switches, a switch of its own).
    pub fn check_strongly_connected(&self, npus: &[NpuId]) -> Result<()> {
        let Some(&first) = npus.first() else {
            return Ok(());
        };
        if let Some(side) = self.cut_off(first, npus, false) {
            return Err(Error::Disconnected {
                from: Npus::Npu(first),
                to: side,
            });
        }
        if let Some(side) = self.cut_off(first, npus, true) {
            return Err(Error::Disconnected {
                from: side,
                to: Npus::Npu(first),
            });
        }
        Ok(())
    }

    /// The NPUs of `targets` that `src` cannot reach (`backwards`: that cannot reach
    /// `src`), as an error names them: with the lowest-numbered switch that the first of
    /// them is linked to and that is cut off with them, if any, where the fabric is
    /// broken. `None` when there are none.
    pub(crate) fn cut_off(&self, src: NpuId, targets: &[NpuId], backwards: bool) -> Option<Npus> {
        let dist = if backwards {
            self.reversed().hops_from(src)
        } else {
            self.hops_from(src)
        };
        let cut_off = |v: VertexId| dist[v] == usize::MAX;
        let missing: Vec<NpuId> = targets.iter().copied().filter(|&v| cut_off(v)).collect();
        let &first = missing.first()?;
        let outs = self.out_links(first).map(|l| self.links[l].dst);
        let ins = self.in_links(first).iter().map(|&l| self.links[l].src);
        let switch = outs
            .chain(ins)
            .filter(|&v| self.is_switch(v) && cut_off(v))
            .min();
        Some(match switch {
            Some(s) => Npus::OnSwitch {
                npus: missing,
                switch: self.vertex_label(s),
            },
            None => Npus::Set(missing),
        })
    }

    /// The topology with every link reversed (same bandwidth and latency).
    pub fn reversed(&self) -> Topology {
        let links = self
            .links
            .iter()
            .map(|l| Link {
                src: l.dst,
                dst: l.src,
                ..l.clone()
            })
            .collect();
        let (switches, failed) = (self.switches.clone(), self.failed.clone());
        Self::with_failed(self.name.clone(), self.npus, switches, links, failed)
            .expect("reversing a valid topology keeps it valid")
            .keep_layout(self)
    }

    /// The dimensions, NICs and reducing switches of `from`, which this topology was made
    /// from.
    fn keep_layout(mut self, from: &Topology) -> Topology {
        self.dims = from.dims.clone();
        self.nics = from.nics;
        self.reducing = from.reducing.clone();
        self
    }

    /// Summary figures for `tacos topo show`.
    pub fn stats(&self) -> TopologyStats {
        let alive = self.alive_npus();
        let out_deg = |n: NpuId| self.out_links(n).len();
        let in_deg = |n: NpuId| self.in_links(n).len();
        let range = |f: &dyn Fn(NpuId) -> usize| {
            let v: Vec<usize> = alive.iter().map(|&n| f(n)).collect();
            (
                v.iter().copied().min().unwrap_or(0),
                v.iter().copied().max().unwrap_or(0),
            )
        };
        let mut classes: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for l in &self.links {
            *classes
                .entry((l.bandwidth_gbps.to_bits(), l.latency_us.to_bits()))
                .or_default() += 1;
        }
        // Each search visits every vertex (its table) and every link.
        let steps = (self.vertices() as u128 + self.links.len() as u128).max(1);
        let diameter_computed = (alive.len() as u128) * steps <= DIAMETER_SEARCH_MAX;
        let mut diameter = diameter_computed.then_some(0);
        for &s in alive.iter().filter(|_| diameter_computed) {
            let dist = self.hops_from(s);
            for &d in &alive {
                diameter = match (diameter, dist[d]) {
                    (_, usize::MAX) | (None, _) => None,
                    (Some(a), b) => Some(a.max(b)),
                };
            }
            if diameter.is_none() {
                // Some NPU cannot reach another: no diameter, whatever the other searches.
                break;
            }
        }
        TopologyStats {
            npus: self.npus,
            switches: self.switches.len(),
            reducing_switches: self.reducing.len(),
            alive_npus: alive.len(),
            links: self.links.len(),
            out_degree: range(&out_deg),
            in_degree: range(&in_deg),
            link_classes: classes
                .into_iter()
                .map(|((bw, lat), count)| LinkClass {
                    bandwidth_gbps: f64::from_bits(bw),
                    latency_us: f64::from_bits(lat),
                    links: count,
                })
                .collect(),
            diameter_hops: diameter,
            diameter_computed,
        }
    }
}

/// The most search steps (alive NPUs x (vertices + links)) `stats` spends on the exact
/// diameter, one breadth-first search per NPU: about a second; larger topologies are
/// reported without it.
pub const DIAMETER_SEARCH_MAX: u128 = 1 << 30;

/// Links sharing one bandwidth and latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkClass {
    pub bandwidth_gbps: f64,
    pub latency_us: f64,
    pub links: usize,
}

/// What `tacos topo show` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopologyStats {
    pub npus: usize,
    /// Switch vertices (0 for a topology of NPUs only).
    #[serde(skip_serializing_if = "is_zero")]
    pub switches: usize,
    /// Switch vertices that reduce and multicast inside themselves (NVLS).
    #[serde(skip_serializing_if = "is_zero")]
    pub reducing_switches: usize,
    pub alive_npus: usize,
    pub links: usize,
    /// (min, max) links leaving an alive NPU.
    pub out_degree: (usize, usize),
    /// (min, max) links entering an alive NPU.
    pub in_degree: (usize, usize),
    pub link_classes: Vec<LinkClass>,
    /// Longest shortest path in hops between alive NPUs; `None` when some pair is
    /// unreachable, or when it was not computed.
    pub diameter_hops: Option<usize>,
    /// Whether the topology was small enough to search (`DIAMETER_SEARCH_MAX`).
    pub diameter_computed: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `NPU 3` or `switch 'nvs0'`, for messages.
fn vertex_label(npus: usize, switches: &[String], v: VertexId) -> String {
    match v.checked_sub(npus).and_then(|i| switches.get(i)) {
        Some(name) => format!("switch '{}'", echo(name)),
        None => format!("NPU {v}"),
    }
}

/// Switch names must be non-empty and unique: files name link ends by them.
fn check_switch_names(switches: &[String]) -> Result<()> {
    let mut seen = HashSet::with_capacity(switches.len());
    for (i, s) in switches.iter().enumerate() {
        if s.is_empty() || !seen.insert(s.as_str()) {
            return Err(Error::Invalid {
                input: format!("switches[{i}]"),
                value: s.clone(),
                allowed: "a non-empty name no other switch has".into(),
            });
        }
    }
    Ok(())
}

/// Checks one link on its own; `label` names it in the error (`t.json: links[3]`).
/// Its ends must be among the `npus` NPUs and `switches` switches.
pub(crate) fn check_link(label: &str, l: &Link, npus: usize, switches: usize) -> Result<()> {
    let input = |field: &str| format!("{label} ({}->{}) {field}", l.src, l.dst);
    let (what, a_what, vertices) = match switches {
        0 => ("NPU", "an NPU", npus),
        _ => ("vertex", "a vertex", npus + switches),
    };
    for end in [l.src, l.dst] {
        if end >= vertices {
            return Err(Error::Invalid {
                input: input(what),
                value: end.to_string(),
                allowed: format!("{a_what} of the topology, 0..{}", vertices - 1),
            });
        }
    }
    if l.src == l.dst {
        return Err(Error::Invalid {
            input: input("dst"),
            value: l.dst.to_string(),
            allowed: format!("another {what} than src (a link cannot join {a_what} to itself)"),
        });
    }
    if !limits::bandwidth_in_range(l.bandwidth_gbps) {
        return Err(limits::bandwidth_error(
            input("bandwidth_gbps"),
            l.bandwidth_gbps,
        ));
    }
    if !limits::latency_in_range(l.latency_us) {
        return Err(limits::latency_error(input("latency_us"), l.latency_us));
    }
    Ok(())
}

/// A failed NPU that is not one of the topology's `npus`.
fn not_an_npu(n: NpuId, npus: usize) -> Error {
    Error::Invalid {
        input: "failed NPU".into(),
        value: n.to_string(),
        allowed: format!("an NPU of the topology, 0..{}", npus - 1),
    }
}
