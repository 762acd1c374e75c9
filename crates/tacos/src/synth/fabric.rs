//! Channels: what the matcher sends over when switches stand between NPUs.
//!
//! The matcher works on a graph of NPUs only. On a topology without switches that graph is
//! the topology itself and a channel is a link. With switches, a channel is also any pair
//! of NPUs joined through switches: it behaves as one link (`Topology::route_link`: the
//! route's summed latency, its narrowest bandwidth, held cut-through) and holds every
//! physical link of its route while it carries a chunk. Which channels are used is decided
//! anew at every event (an NPU's port into a switch is free for whichever peer the matcher
//! picks), which is the switch's dynamic connectivity that a static unwinding fixes once.
//!
//! Channels are the NPU pairs joined by a direct link, plus the pairs joined through
//! switches by routes of at most `h` links, for the smallest `h` that still connects every
//! alive NPU to every other: on a rail-optimized cluster that is one switch (NVSwitch peers
//! and rail peers), as NCCL's own rings and trees use it; a leaf-spine fabric with NPUs on
//! its leaves gets routes through the spine too. Longer routes only add contention on the
//! links the shorter ones already use, and their number grows as the square of the NPUs.

use super::gates::Gates;
use super::stars::Stars;
use crate::error::{Error, Result};
use crate::topology::{Link, LinkId, NpuId, Topology};
use std::borrow::Cow;

/// The most channels one matching builds (each holds a pool and a route).
const MAX_CHANNELS: usize = 1 << 24;

/// Star groups with more members than this are matched by port (`Gates`); smaller ones
/// get a channel per pair of members, whose pools find useful chunks fastest.
const MAX_PAIRED_MEMBERS: usize = 16;

/// The matcher's view of a topology: NPUs and channels.
pub(super) struct Fabric<'a> {
    /// The topology the fabric is of.
    pub topo: &'a Topology,
    /// One link per channel, between NPUs only (the topology itself when it has no
    /// switches).
    pub view: Cow<'a, Topology>,
    /// The physical links each channel holds; None when every channel is one link.
    pub routes: Option<Routes>,
    /// The large star groups, matched by port (channels implied), where the fabric is
    /// described by its groups (`stars`).
    pub gates: Option<Gates>,
    /// The topology this fabric's is the reversal of (`reversed`), whose routes it keeps.
    forward: Option<&'a Topology>,
}

/// Per channel, the physical links it holds; per physical link, the channels holding it.
pub(super) struct Routes {
    start: Vec<u32>,
    links: Vec<u32>,
    user_start: Vec<u32>,
    users: Vec<u32>,
    /// Per NPU, (port, channel) of the channels into it ordered by their last link (the
    /// NPU's port they come in by): `into[into_start[npu]..into_start[npu + 1]]`.
    into_start: Vec<u32>,
    into: Vec<(u32, u32)>,
    /// Per NPU, the physical links its channels come in by:
    /// `ports[ports_start[npu]..ports_start[npu + 1]]`.
    ports_start: Vec<u32>,
    ports: Vec<u32>,
    /// Per physical link, the NPU it enters, or `NO_NPU` where it enters a switch: every
    /// channel holding a link into an NPU ends at that NPU (routes pass through switches
    /// only).
    enters: Vec<u32>,
}

/// `Routes::enters` of a link into a switch.
const NO_NPU: u32 = u32::MAX;

impl Routes {
    /// The physical links channel `c` holds, in order.
    pub fn links(&self, c: LinkId) -> &[u32] {
        &self.links[self.start[c] as usize..self.start[c + 1] as usize]
    }

    /// The channels that hold physical link `l`.
    pub fn users(&self, l: LinkId) -> &[u32] {
        &self.users[self.user_start[l] as usize..self.user_start[l + 1] as usize]
    }

    /// How many physical links there are.
    pub fn physical(&self) -> usize {
        self.user_start.len() - 1
    }

    /// The NPU physical link `l` enters (where every channel holding it ends), or None
    /// where it enters a switch.
    pub fn enters(&self, l: LinkId) -> Option<NpuId> {
        let npu = self.enters[l];
        (npu != NO_NPU).then_some(npu as usize)
    }

    /// The physical links the channels into `npu` come in by, each once.
    pub fn ports_into(&self, npu: NpuId) -> &[u32] {
        &self.ports[self.ports_start[npu] as usize..self.ports_start[npu + 1] as usize]
    }

    /// (port, channel) of the channels into `npu`, those sharing a port next to each other.
    pub fn into(&self, npu: NpuId) -> &[(u32, u32)] {
        &self.into[self.into_start[npu] as usize..self.into_start[npu + 1] as usize]
    }
}

/// One channel while the list is built: its link in the view and its route.
type Channel = (Link, Vec<LinkId>);

impl<'a> Fabric<'a> {
    /// The channels of `topo` (see the module's rule): from its star groups where they
    /// describe its short routes, the large ones as gates; else route by route.
    pub fn new(topo: &'a Topology) -> Result<Fabric<'a>> {
        if !topo.has_switches() {
            return Ok(Fabric {
                topo,
                view: Cow::Borrowed(topo),
                routes: None,
                gates: None,
                forward: None,
            });
        }
        match Stars::find(topo) {
            Some(stars) => Fabric::of_stars(topo, stars, MAX_PAIRED_MEMBERS),
            None => Fabric::by_routes(topo),
        }
    }

    /// The same channels with every pair of group members a channel of its own (no
    /// gates), for matchings the gates do not serve (relayed chunks).
    pub fn paired(&self) -> Result<Fabric<'a>> {
        let paired = |topo| match Stars::find(topo) {
            Some(stars) => Fabric::of_stars(topo, stars, usize::MAX),
            None => Fabric::by_routes(topo),
        };
        match self.forward {
            None => paired(self.topo),
            Some(forward) => paired(forward)?.reversed(forward, self.topo),
        }
    }

    /// Channels from the star groups: the direct links, the pairs of members of groups
    /// of at most `max_paired` members, and gates for the larger groups.
    fn of_stars(topo: &'a Topology, stars: Stars, max_paired: usize) -> Result<Fabric<'a>> {
        let mut channels: Vec<Channel> = Vec::new();
        for v in topo.alive_npus() {
            for l in topo.out_links(v) {
                if !topo.is_switch(topo.link(l).dst) {
                    channels.push((topo.link(l).clone(), vec![l]));
                }
            }
        }
        let Stars {
            stars: groups,
            excluded,
        } = stars;
        let mut large = Vec::new();
        let mut large_excluded = std::collections::HashSet::new();
        for (g, star) in groups.into_iter().enumerate() {
            if star.members.len() > max_paired {
                let k = large.len() as u32;
                large_excluded.extend(
                    excluded
                        .iter()
                        .filter(|e| e.0 == g as u32)
                        .map(|&(_, u, v)| (k, u, v)),
                );
                large.push(star);
                continue;
            }
            for &(u, up, _) in &star.members {
                for &(v, _, down) in &star.members {
                    if u == v || excluded.contains(&(g as u32, u as u32, v as u32)) {
                        continue;
                    }
                    if channels.len() >= MAX_CHANNELS {
                        return Err(too_many(topo));
                    }
                    channels.push((topo.route_link([up, down]), vec![up, down]));
                }
            }
        }
        let gates = (!large.is_empty()).then(|| Gates::new(topo, large, large_excluded));
        Fabric::from_channels(topo, channels, gates)
    }

    /// Channels route by route: every pair of alive NPUs whose route is short enough.
    fn by_routes(topo: &'a Topology) -> Result<Fabric<'a>> {
        let alive = topo.alive_npus();
        let mut direct: Vec<Channel> = Vec::new();
        let mut switched: Vec<Channel> = Vec::new();
        for &s in &alive {
            for l in topo.out_links(s) {
                if !topo.is_switch(topo.link(l).dst) {
                    direct.push((topo.link(l).clone(), vec![l]));
                }
            }
            let tree = topo.route_tree(s);
            for &d in &alive {
                if d == s || topo.link_between(s, d).is_some() {
                    continue;
                }
                if let Some(route) = tree.route_to(topo, d) {
                    if direct.len() + switched.len() >= MAX_CHANNELS {
                        return Err(too_many(topo));
                    }
                    switched.push((topo.route_link(route.iter().copied()), route));
                }
            }
        }
        let mut lengths: Vec<usize> = switched.iter().map(|(_, r)| r.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        // The fewest hops that connect everything; all routes when nothing does (the
        // matcher then names what cannot be reached).
        let mut chosen = None;
        for &h in &lengths {
            let channels: Vec<Channel> = direct
                .iter()
                .cloned()
                .chain(switched.iter().filter(|(_, r)| r.len() <= h).cloned())
                .collect();
            let fabric = Fabric::from_channels(topo, channels, None)?;
            let connected = fabric.view.check_strongly_connected(&alive).is_ok();
            chosen = Some(fabric);
            if connected {
                break;
            }
        }
        match chosen {
            Some(fabric) => Ok(fabric),
            None => Fabric::from_channels(topo, direct, None),
        }
    }

    /// The same channels on `reversed` (`topo.reversed()` of this fabric's topology), each
    /// in the other direction over the reversed links of its route, so a schedule matched
    /// there and reversed in time uses exactly the routes `Topology::route` gives.
    pub fn reversed<'b>(&self, topo: &'b Topology, reversed: &'b Topology) -> Result<Fabric<'b>> {
        let Some(routes) = &self.routes else {
            return Fabric::new(reversed);
        };
        let back = |l: u32| {
            let link = topo.link(l as usize);
            reversed
                .link_between(link.dst, link.src)
                .expect("the reversed topology has every link reversed")
        };
        let channels = self
            .view
            .links()
            .iter()
            .enumerate()
            .map(|(c, link)| {
                let route: Vec<LinkId> = routes.links(c).iter().rev().map(|&l| back(l)).collect();
                let link = Link {
                    src: link.dst,
                    dst: link.src,
                    ..link.clone()
                };
                (link, route)
            })
            .collect();
        let gates = self.gates.as_ref().map(|g| g.reversed(topo, reversed));
        let mut fabric = Fabric::from_channels(reversed, channels, gates)?;
        fabric.forward = Some(topo);
        Ok(fabric)
    }

    /// The fabric of `channels` and `gates` over `topo`'s physical links.
    fn from_channels(
        topo: &'a Topology,
        mut channels: Vec<Channel>,
        gates: Option<Gates>,
    ) -> Result<Fabric<'a>> {
        channels.sort_by_key(|(l, _)| (l.src, l.dst));
        let mut start = Vec::with_capacity(channels.len() + 1);
        let mut links = Vec::new();
        let mut user_start = vec![0u32; topo.links().len() + 1];
        start.push(0);
        for (_, route) in &channels {
            for &l in route {
                links.push(l as u32);
                user_start[l + 1] += 1;
            }
            start.push(u32::try_from(links.len()).map_err(|_| too_many(topo))?);
        }
        for l in 0..topo.links().len() {
            user_start[l + 1] += user_start[l];
        }
        let mut fill = user_start.clone();
        let mut users = vec![0u32; links.len()];
        for (c, (_, route)) in channels.iter().enumerate() {
            for &l in route {
                users[fill[l] as usize] = c as u32;
                fill[l] += 1;
            }
        }
        let mut into: Vec<(usize, LinkId, u32)> = channels
            .iter()
            .enumerate()
            .map(|(c, (l, route))| (l.dst, route[route.len() - 1], c as u32))
            .collect();
        into.sort_unstable();
        // Ports into each NPU: those of its channels, and its gates' links down.
        let mut gate_ports: Vec<(usize, u32)> = gates.as_ref().map_or(Vec::new(), |g| {
            (0..g.len())
                .map(|gate| (g.npu(gate), g.down(gate) as u32))
                .collect()
        });
        gate_ports.sort_unstable();
        let mut into_start = vec![0u32; topo.npus() + 1];
        for &(dst, _, _) in &into {
            into_start[dst + 1] += 1;
        }
        for npu in 0..topo.npus() {
            into_start[npu + 1] += into_start[npu];
        }
        let into: Vec<(u32, u32)> = into
            .into_iter()
            .map(|(_, port, c)| (port as u32, c))
            .collect();
        let mut ports_start = Vec::with_capacity(topo.npus() + 1);
        let mut ports = Vec::new();
        ports_start.push(0);
        let mut gate_port = gate_ports.iter().peekable();
        for npu in 0..topo.npus() {
            let group = &into[into_start[npu] as usize..into_start[npu + 1] as usize];
            let first = ports.len();
            ports.extend(group.iter().map(|&(port, _)| port));
            while let Some(&(_, port)) = gate_port.next_if(|&&(v, _)| v == npu) {
                ports.push(port);
            }
            ports[first..].sort_unstable();
            ports.dedup();
            ports_start.push(ports.len() as u32);
        }
        let enters = topo
            .links()
            .iter()
            .map(|l| {
                if topo.is_switch(l.dst) {
                    NO_NPU
                } else {
                    l.dst as u32
                }
            })
            .collect();
        let view_links: Vec<Link> = channels.into_iter().map(|(l, _)| l).collect();
        let view = Topology::new(topo.name(), topo.npus(), view_links)?;
        let view = if topo.failed().is_empty() {
            view
        } else {
            view.fail_npus(topo.failed())?
        };
        Ok(Fabric {
            topo,
            view: Cow::Owned(view),
            gates,
            forward: None,
            routes: Some(Routes {
                start,
                links,
                user_start,
                users,
                into_start,
                into,
                ports_start,
                ports,
                enters,
            }),
        })
    }

    /// Calls `f` with each physical link a transfer from `src` to `dst` (of a schedule
    /// matched on this fabric) holds.
    pub fn for_each_link(&self, src: NpuId, dst: NpuId, mut f: impl FnMut(LinkId)) {
        let channel = self.view.link_between(src, dst);
        match (&self.routes, channel) {
            (None, Some(c)) => f(c),
            (Some(r), Some(c)) => r.links(c).iter().for_each(|&l| f(l as usize)),
            (_, None) => {
                let (from, to) = self
                    .gates
                    .as_ref()
                    .and_then(|g| g.between(src, dst))
                    .expect("transfers use channels of the fabric");
                let gates = self.gates.as_ref().expect("found above");
                f(gates.up(from));
                f(gates.down(to));
            }
        }
    }

    /// Whether a matching on this fabric's `reversed` is also one on this fabric, copy for
    /// copy: every physical link has one twin the other way of the same latency and
    /// bandwidth, and each channel's route is its reverse channel's taken back over the
    /// twins (for gates: a member's link down is the twin of its link up, and a pair left
    /// out is left out both ways). A copy from u to v over the reversed fabric then holds,
    /// twin for link, what the same copy over this fabric holds, and for as long, so the
    /// twins (a bijection) carry its contention-freedom over.
    pub fn mirrors_itself(&self) -> bool {
        let topo = self.topo;
        let Some(twin) = twins(topo) else {
            return false;
        };
        let Some(routes) = &self.routes else {
            return true;
        };
        let channels_mirror = self.view.links().iter().enumerate().all(|(c, link)| {
            self.view
                .link_between(link.dst, link.src)
                .is_some_and(|back| {
                    let (route, back) = (routes.links(c), routes.links(back));
                    route.len() == back.len()
                        && route
                            .iter()
                            .zip(back.iter().rev())
                            .all(|(&l, &b)| twin[b as usize] == l as usize)
                })
        });
        channels_mirror
            && self
                .gates
                .as_ref()
                .map_or(true, |g| g.mirror_themselves(&twin))
    }

    /// How many physical links the topology has.
    pub fn physical_links(&self) -> usize {
        match &self.routes {
            None => self.view.links().len(),
            Some(r) => r.physical(),
        }
    }
}

/// What the matcher holds channels for on a switched fabric whose large star groups are
/// matched by port, for memory estimates (`crate::budget`), found without building them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PortShape {
    /// Channels with a pool: direct links and pairs of members of small groups.
    pub channels: u64,
    /// Gates (one per member of a large group) and large groups.
    pub gates: u64,
    pub groups: u64,
    /// Whether every channel with a pool takes as long (same latency and bandwidth), so
    /// no per-(NPU, chunk) arrival times are kept.
    pub uniform: bool,
}

/// The `PortShape` of `topo`; None where it has no gates (no switches, groups that do not
/// describe its routes, or only small groups): every channel then has a pool.
pub(crate) fn port_shape(topo: &Topology) -> Option<PortShape> {
    if !topo.has_switches() {
        return None;
    }
    let stars = Stars::find(topo)?;
    let mut shape = PortShape {
        channels: 0,
        gates: 0,
        groups: 0,
        uniform: true,
    };
    let mut first: Option<(f64, f64)> = None;
    let mut see = |link: &Link, shape: &mut PortShape| {
        let key = (link.latency_us, link.bandwidth_gbps);
        if *first.get_or_insert(key) != key {
            shape.uniform = false;
        }
    };
    for v in topo.alive_npus() {
        for l in topo.out_links(v) {
            if !topo.is_switch(topo.link(l).dst) {
                shape.channels += 1;
                see(topo.link(l), &mut shape);
            }
        }
    }
    for star in &stars.stars {
        let m = star.members.len() as u64;
        if star.members.len() > MAX_PAIRED_MEMBERS {
            shape.gates += m;
            shape.groups += 1;
        } else {
            shape.channels += m * (m - 1);
            let (_, up, down) = star.members[0];
            see(&topo.route_link([up, down]), &mut shape);
        }
    }
    (shape.gates > 0).then_some(shape)
}

/// Per physical link of `topo`, its twin: the link between the same vertices the other
/// way, of the same latency and bandwidth; None where some link has none, or where twins
/// are not one to one (parallel links).
fn twins(topo: &Topology) -> Option<Vec<LinkId>> {
    let twin: Vec<LinkId> = topo
        .links()
        .iter()
        .map(|l| {
            let back = topo.link_between(l.dst, l.src)?;
            let b = topo.link(back);
            ((b.latency_us, b.bandwidth_gbps) == (l.latency_us, l.bandwidth_gbps)).then_some(back)
        })
        .collect::<Option<_>>()?;
    twin.iter()
        .enumerate()
        .all(|(l, &back)| twin[back] == l)
        .then_some(twin)
}

fn too_many(topo: &Topology) -> Error {
    Error::Synthesis(format!(
        "{} joins more than {MAX_CHANNELS} NPU pairs through switches; synthesize it unwound (--unwind)",
        topo.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    fn routes_of(topo: &Topology) -> Routes {
        Fabric::new(topo)
            .unwrap()
            .routes
            .expect("a fabric with switches")
    }

    #[test]
    fn the_ports_into_an_npu_are_its_links_from_switches() {
        // Every in-link of an NPU here comes from a switch (its NVSwitch, its rail): each
        // is the last link of some channel into it, and no other physical link is.
        for spec in ["switch:4", "preset:dgx-h100,nodes=2", "clos:4x2,spine=2"] {
            let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
            let routes = routes_of(&topo);
            for npu in 0..topo.npus() {
                let mut expected: Vec<u32> = topo.in_links(npu).iter().map(|&l| l as u32).collect();
                expected.sort_unstable();
                assert_eq!(routes.ports_into(npu), expected, "{spec}, NPU {npu}");
            }
        }
    }

    fn spec(s: &str) -> Topology {
        parse_spec(s, &SpecDefaults::default()).unwrap()
    }

    #[test]
    fn fabrics_whose_routes_go_back_over_their_twins_mirror_themselves() {
        // Links in twins, routes through one switch or one spine (large rails as gates).
        for s in [
            "mesh:4x4",
            "ring:5",
            "switch:4",
            "preset:dgx-h100,nodes=2",
            "preset:dgx-a100,nodes=24",
            "clos:4x2",
        ] {
            assert!(Fabric::new(&spec(s)).unwrap().mirrors_itself(), "{s}");
        }
        // Over several spines each source takes its own (`Topology::route_tree`): NPU 0
        // goes to NPU 5 over spine 0 and NPU 5 comes back over spine 1.
        assert!(!Fabric::new(&spec("clos:4x2,spine=2"))
            .unwrap()
            .mirrors_itself());
        // Links one way only; a port faster down than up.
        assert!(!Fabric::new(&spec("uniring:6")).unwrap().mirrors_itself());
        let lopsided = crate::topology::file::parse(
            r#"{"name": "lopsided", "npus": 3, "switches": ["s"], "links": [
                {"src": 0, "dst": "s", "bandwidth_gbps": 50, "latency_us": 1},
                {"src": "s", "dst": 0, "bandwidth_gbps": 100, "latency_us": 1},
                {"src": 1, "dst": "s", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 1},
                {"src": 2, "dst": "s", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 1}
            ]}"#,
            "lopsided.json",
            &SpecDefaults::default(),
        )
        .unwrap();
        assert!(!Fabric::new(&lopsided).unwrap().mirrors_itself());
    }

    #[test]
    fn a_channel_whose_route_is_not_its_reverses_taken_back_breaks_the_mirror() {
        let topo = spec("switch:4");
        let mut fabric = Fabric::new(&topo).unwrap();
        assert!(fabric.mirrors_itself());
        // Channel 0 -> 1 made to come down into NPU 2: its reverse, 1 -> 0, goes up from
        // NPU 1, whose twin is the link down into NPU 1, not 2.
        let c = fabric.view.link_between(0, 1).unwrap();
        let routes = fabric.routes.as_mut().unwrap();
        let into_2 = topo.in_links(2)[0] as u32;
        let last = routes.start[c + 1] as usize - 1;
        routes.links[last] = into_2;
        assert!(!fabric.mirrors_itself());
    }

    #[test]
    fn a_link_enters_an_npu_or_a_switch() {
        let topo = parse_spec("preset:dgx-h100,nodes=2", &SpecDefaults::default()).unwrap();
        let routes = routes_of(&topo);
        for (l, link) in topo.links().iter().enumerate() {
            let expected = (!topo.is_switch(link.dst)).then_some(link.dst);
            assert_eq!(routes.enters(l), expected, "link {l}");
            if let Some(npu) = expected {
                // Every channel holding it ends there.
                let ends: Vec<usize> = routes
                    .users(l)
                    .iter()
                    .map(|&c| *routes.links(c as usize).last().unwrap() as usize)
                    .collect();
                assert!(ends.iter().all(|&last| topo.link(last).dst == npu));
            }
        }
    }
}
