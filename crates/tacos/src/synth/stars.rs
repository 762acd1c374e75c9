//! Star groups: switches whose two-link routes join their members, found from the links
//! alone (no route per NPU pair).
//!
//! A star group is a switch S and the alive NPUs linked to it both ways (its members).
//! The route `Topology::route` gives a pair of members u, v is u -> S -> v unless the pair
//! is joined by a direct link or by another switch they share that the route search
//! reaches first; such pairs are rare (dual-plane fabrics) and resolved one by one here
//! with the search's own rule (least summed latency, then the switch reached first). A
//! route of three links or more never wins where every group's two hops cost at most the
//! cheapest three (`find` checks it per group). So on fabrics where the direct links and
//! the groups connect every alive NPU (rail-optimized clusters, `switch:N`, the dgx
//! presets), the pairs joined by routes of at most two links, the matcher's channels, are
//! known from the members of each group, and a large group is matched by port (see
//! `Gates`) rather than through one channel per pair.

use crate::topology::{Link, LinkId, NpuId, Topology, VertexId};
use crate::units::us_to_ps;
use std::collections::{HashMap, HashSet};

/// Most NPU pairs sharing two groups that are resolved one by one; past it the fabric is
/// handled route by route.
const MAX_CONTESTED: usize = 1 << 22;

/// One group's member: (NPU, its link up to the switch, the switch's link down to it).
pub(super) type Member = (NpuId, LinkId, LinkId);

/// A switch and its members.
pub(super) struct Star {
    pub switch: VertexId,
    pub members: Vec<Member>,
}

/// The star groups of a topology and the member pairs whose route is not through them.
pub(super) struct Stars {
    pub stars: Vec<Star>,
    /// (group, src, dst) of member pairs whose route does not go through the group's switch.
    pub excluded: HashSet<(u32, u32, u32)>,
}

/// Latencies in picoseconds, as the route search adds them.
fn latency_ps(link: &Link) -> u128 {
    u128::from(us_to_ps(link.latency_us))
}

impl Stars {
    /// The star groups of `topo`, or None where they do not describe its short routes: a
    /// link between an NPU and a switch without its twin, a group whose up (or down) links
    /// differ in latency or bandwidth, a group whose two hops could cost more than a
    /// three-link route, too many pairs sharing groups, or groups and direct links that
    /// leave some alive NPU unreachable.
    pub fn find(topo: &Topology) -> Option<Stars> {
        let n = topo.npus();
        let mut direct: Vec<(NpuId, NpuId)> = Vec::new();
        for link in topo.links() {
            match (topo.is_switch(link.src), topo.is_switch(link.dst)) {
                (false, true) | (true, false) => {
                    topo.link_between(link.dst, link.src)?;
                }
                (true, true) => {}
                (false, false) => direct.push((link.src, link.dst)),
            }
        }
        let onward = onward_ps(topo);
        let mut stars = Vec::new();
        for s in topo.switches() {
            let members: Vec<Member> = topo
                .out_links(s)
                .filter_map(|down| {
                    let v = topo.link(down).dst;
                    let up = topo.link_between(v, s)?;
                    (v < n && !topo.is_failed(v)).then_some((v, up, down))
                })
                .collect();
            if members.len() < 2 {
                continue;
            }
            let same = |l: LinkId, m: LinkId| {
                let (a, b) = (topo.link(l), topo.link(m));
                a.latency_us == b.latency_us && a.bandwidth_gbps == b.bandwidth_gbps
            };
            let (_, up0, down0) = members[0];
            if !members
                .iter()
                .all(|&(_, up, down)| same(up, up0) && same(down, down0))
            {
                return None;
            }
            // The cheapest route of three links or more from a member: up to some
            // switch, then on through another.
            let two = latency_ps(topo.link(up0)) + latency_ps(topo.link(down0));
            let three = members
                .iter()
                .flat_map(|&(u, _, _)| topo.out_links(u))
                .map(|l| latency_ps(topo.link(l)).saturating_add(onward[topo.link(l).dst]))
                .min()
                .unwrap_or(u128::MAX);
            if two > three {
                return None;
            }
            stars.push(Star { switch: s, members });
        }
        let excluded = contested(topo, &stars, &direct)?;
        let found = Stars { stars, excluded };
        found.connects(topo, &direct).then_some(found)
    }

    /// Whether the groups and the direct links join every alive NPU to every other
    /// (groups are strongly connected among their members; excluded pairs are joined by
    /// another group or a direct link, so leaving them in does not change the answer).
    fn connects(&self, topo: &Topology, direct: &[(NpuId, NpuId)]) -> bool {
        let n = topo.npus();
        let alive = topo.alive_npus();
        let Some(&first) = alive.first() else {
            return true;
        };
        // Vertices: NPUs, then one per group.
        let mut of_npu: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (g, star) in self.stars.iter().enumerate() {
            for &(v, _, _) in &star.members {
                of_npu[v].push(n + g);
            }
        }
        for forward in [true, false] {
            let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
            for &(a, b) in direct {
                let (from, to) = if forward { (a, b) } else { (b, a) };
                next[from].push(to);
            }
            let mut seen = vec![false; n + self.stars.len()];
            seen[first] = true;
            let mut stack = vec![first];
            while let Some(x) = stack.pop() {
                let step: Vec<usize> = if x < n {
                    of_npu[x].iter().chain(&next[x]).copied().collect()
                } else {
                    self.stars[x - n].members.iter().map(|m| m.0).collect()
                };
                for y in step {
                    if !std::mem::replace(&mut seen[y], true) {
                        stack.push(y);
                    }
                }
            }
            if !alive.iter().all(|&v| seen[v]) {
                return false;
            }
        }
        true
    }
}

/// Per vertex (switches only; NPUs get MAX): the least latency from it through at least
/// one more switch down to some NPU, MAX where none leads on. A Dijkstra over the
/// switches, backwards from their links down to NPUs.
fn onward_ps(topo: &Topology) -> Vec<u128> {
    let v = topo.vertices();
    // down[y]: least latency from switch y down to an NPU, through switches or not.
    let mut down = vec![u128::MAX; v];
    let mut heap = std::collections::BinaryHeap::new();
    for y in topo.switches() {
        for l in topo.out_links(y) {
            let link = topo.link(l);
            if !topo.is_switch(link.dst) {
                down[y] = down[y].min(latency_ps(link));
            }
        }
        if down[y] != u128::MAX {
            heap.push(std::cmp::Reverse((down[y], y)));
        }
    }
    while let Some(std::cmp::Reverse((d, y))) = heap.pop() {
        if d > down[y] {
            continue;
        }
        for &l in topo.in_links(y) {
            let x = topo.link(l).src;
            let through = d.saturating_add(latency_ps(topo.link(l)));
            if topo.is_switch(x) && through < down[x] {
                down[x] = through;
                heap.push(std::cmp::Reverse((through, x)));
            }
        }
    }
    (0..v)
        .map(|x| {
            if !topo.is_switch(x) {
                return u128::MAX;
            }
            topo.out_links(x)
                .filter(|&l| topo.is_switch(topo.link(l).dst))
                .map(|l| latency_ps(topo.link(l)).saturating_add(down[topo.link(l).dst]))
                .min()
                .unwrap_or(u128::MAX)
        })
        .collect()
}

/// The (group, src, dst) member pairs whose route is not through the group: pairs joined
/// by a direct link (the route is that link), and pairs sharing several groups, whose
/// route goes through the one the route search reaches first with the least summed
/// latency. None when there are too many.
fn contested(
    topo: &Topology,
    stars: &[Star],
    direct: &[(NpuId, NpuId)],
) -> Option<HashSet<(u32, u32, u32)>> {
    let n = topo.npus();
    let mut groups_of: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (g, star) in stars.iter().enumerate() {
        for &(v, _, _) in &star.members {
            groups_of[v].push(g as u32);
        }
    }
    let shared = |u: NpuId, v: NpuId| -> Vec<u32> {
        groups_of[u]
            .iter()
            .copied()
            .filter(|g| groups_of[v].contains(g))
            .collect()
    };
    let mut excluded = HashSet::new();
    for &(u, v) in direct {
        for g in shared(u, v) {
            excluded.insert((g, u as u32, v as u32));
        }
    }
    // Members of two groups at once, by the pair of groups.
    let mut both: HashMap<(u32, u32), Vec<NpuId>> = HashMap::new();
    for (v, groups) in groups_of.iter().enumerate() {
        for (i, &a) in groups.iter().enumerate() {
            for &b in &groups[i + 1..] {
                both.entry((a, b)).or_default().push(v);
            }
        }
    }
    let mut pairs = 0usize;
    // The key the route search ranks a group by for a pair: the two hops' latency, the
    // latency to the switch (switches are expanded in that order), the switch's id.
    let key = |g: u32| {
        let star = &stars[g as usize];
        let (_, up, down) = star.members[0];
        let up_ps = latency_ps(topo.link(up));
        (up_ps + latency_ps(topo.link(down)), up_ps, star.switch)
    };
    for members in both.values() {
        pairs += members.len() * (members.len() - 1);
        if pairs > MAX_CONTESTED {
            return None;
        }
        for &u in members {
            for &v in members {
                if u == v {
                    continue;
                }
                let groups = shared(u, v);
                let joined_directly = topo.link_between(u, v).is_some();
                let winner = groups.iter().copied().min_by_key(|&g| key(g));
                for g in groups {
                    if joined_directly || Some(g) != winner {
                        excluded.insert((g, u as u32, v as u32));
                    }
                }
            }
        }
    }
    Some(excluded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    /// Every pair of distinct alive NPUs whose route (`Topology::route`, a search over the
    /// whole fabric per source) is two links through a switch is joined by exactly that
    /// switch's group and no other; every other pair by none.
    fn agrees_with_routes(topo: &Topology) {
        let stars = Stars::find(topo).expect("groups describe the fabric");
        let alive = topo.alive_npus();
        for &u in &alive {
            for &v in &alive {
                if u == v {
                    continue;
                }
                let route = topo.route(u, v).unwrap_or_default();
                let through = (route.len() == 2).then(|| topo.link(route[0]).dst);
                let joining: Vec<VertexId> = stars
                    .stars
                    .iter()
                    .enumerate()
                    .filter(|(g, star)| {
                        let member = |x| star.members.iter().any(|m| m.0 == x);
                        member(u)
                            && member(v)
                            && !stars.excluded.contains(&(*g as u32, u as u32, v as u32))
                    })
                    .map(|(_, star)| star.switch)
                    .collect();
                assert_eq!(
                    joining,
                    Vec::from_iter(through),
                    "{}: {u} -> {v}",
                    topo.name()
                );
            }
        }
    }

    #[test]
    fn groups_join_the_pairs_whose_routes_cross_them() {
        for s in [
            "switch:6",
            "preset:dgx-a100,nodes=3",
            "preset:dgx-h100,nodes=4,spine=2,oversub=2",
        ] {
            let topo = parse_spec(s, &SpecDefaults::default()).unwrap();
            agrees_with_routes(&topo);
            agrees_with_routes(&topo.fail_npus(&[1]).unwrap());
        }
    }

    #[test]
    fn pairs_sharing_switches_and_direct_links_follow_the_route_search() {
        // NPUs 0..4 on switches a and b (b reached as fast but numbered first, c slower),
        // 2..6 on c; NPUs 0 and 1 also linked directly.
        let mut links = Vec::new();
        for npu in 0..6 {
            if npu < 4 {
                for (s, lat) in [("a", 0.5), ("b", 0.5)] {
                    links.push(format!(
                        r#"{{"src": {npu}, "dst": "{s}", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": {lat}}}"#
                    ));
                }
            }
            if npu >= 2 {
                links.push(format!(
                    r#"{{"src": {npu}, "dst": "c", "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 0.7}}"#
                ));
            }
        }
        links.push(
            r#"{"src": 0, "dst": 1, "bidirectional": true, "bandwidth_gbps": 50, "latency_us": 2}"#
                .into(),
        );
        let text = format!(
            r#"{{"name": "planes", "npus": 6, "switches": ["b", "a", "c"], "links": [{}]}}"#,
            links.join(", ")
        );
        let topo =
            crate::topology::file::parse(&text, "planes.json", &SpecDefaults::default()).unwrap();
        agrees_with_routes(&topo);
    }

    #[test]
    fn a_leaf_spine_fabric_with_npus_on_its_leaves_is_left_to_routes() {
        // Leaves of 4 NPUs: NPUs on different leaves are joined only through the spine.
        let topo = parse_spec("clos:4x2,spine=2", &SpecDefaults::default()).unwrap();
        assert!(Stars::find(&topo).is_none());
    }
}
