//! Gates: the large star groups, matched by port rather than by pair.
//!
//! A switch with thousands of members (a rail of a large cluster) joins each to thousands
//! of peers; one channel per pair, each with its pool of chunks, costs the square of the
//! NPUs in memory and the cube in work. A gate is one member's port down from the switch:
//! whichever member the matcher picks sends to it, up its own port, so the state is per
//! port. A transfer through a gate holds the sender's link up to the switch and the
//! gate's link down, which is the route `Topology::route` gives that pair (pairs whose
//! route is elsewhere are excluded, see `stars`).

use super::stars::{Member, Star};
use crate::topology::{Link, LinkId, NpuId, Topology};
use std::collections::HashSet;

/// `up_of` / `down_of` of a link that is no gate's.
const NONE: u32 = u32::MAX;

pub(super) struct Gates {
    /// Per group: its gates are `start[g]..start[g + 1]`, one per member, by NPU.
    start: Vec<u32>,
    /// Per gate: its group, its member, the member's link up and the link down to it.
    group: Vec<u32>,
    members: Vec<Member>,
    /// Per NPU: its gates (one per group it is a member of).
    npu_start: Vec<u32>,
    npu_gates: Vec<u32>,
    /// Per physical link: the gate whose link up (or down) it is, or NONE.
    up_of: Vec<u32>,
    down_of: Vec<u32>,
    /// (group, src, dst) of member pairs whose route is not through the group.
    excluded: HashSet<(u32, u32, u32)>,
    /// Per gate: whether its member is in some excluded pair of its group.
    contested: Vec<bool>,
    /// Per group: the link a transfer through it behaves as (`Topology::route_link`).
    channel: Vec<Link>,
}

impl Gates {
    /// Gates of `stars` (groups of `topo`), leaving out the member pairs in `excluded`.
    pub fn new(topo: &Topology, stars: Vec<Star>, excluded: HashSet<(u32, u32, u32)>) -> Gates {
        let mut start = vec![0u32];
        let mut group = Vec::new();
        let mut members = Vec::new();
        let mut channel = Vec::new();
        for (g, mut star) in stars.into_iter().enumerate() {
            star.members.sort_unstable();
            let (_, up, down) = star.members[0];
            channel.push(topo.route_link([up, down]));
            group.resize(group.len() + star.members.len(), g as u32);
            members.extend(star.members);
            start.push(members.len() as u32);
        }
        let mut up_of = vec![NONE; topo.links().len()];
        let mut down_of = vec![NONE; topo.links().len()];
        let mut npu_start = vec![0u32; topo.npus() + 1];
        for (gate, &(v, up, down)) in members.iter().enumerate() {
            up_of[up] = gate as u32;
            down_of[down] = gate as u32;
            npu_start[v + 1] += 1;
        }
        for v in 0..topo.npus() {
            npu_start[v + 1] += npu_start[v];
        }
        let mut fill = npu_start.clone();
        let mut npu_gates = vec![0u32; members.len()];
        for (gate, &(v, _, _)) in members.iter().enumerate() {
            npu_gates[fill[v] as usize] = gate as u32;
            fill[v] += 1;
        }
        let mut gates = Gates {
            start,
            group,
            members,
            npu_start,
            npu_gates,
            up_of,
            down_of,
            excluded,
            contested: Vec::new(),
            channel,
        };
        let mut contested = vec![false; gates.members.len()];
        for &(g, u, v) in &gates.excluded {
            for npu in [u, v] {
                if let Some(gate) = gates.gate_in(g as usize, npu as usize) {
                    contested[gate] = true;
                }
            }
        }
        gates.contested = contested;
        gates
    }

    /// The same gates on `reversed` (`topo.reversed()`): each member's links up and down
    /// swap roles, and so do the pairs left out.
    pub fn reversed(&self, topo: &Topology, reversed: &Topology) -> Gates {
        let back = |l: LinkId| {
            let link = topo.link(l);
            reversed
                .link_between(link.dst, link.src)
                .expect("the reversed topology has every link reversed")
        };
        let stars = (0..self.groups())
            .map(|g| Star {
                switch: topo.link(self.members[self.start[g] as usize].1).dst,
                members: self
                    .gates_of_group(g)
                    .map(|gate| {
                        let (v, up, down) = self.members[gate];
                        (v, back(down), back(up))
                    })
                    .collect(),
            })
            .collect();
        let excluded = self.excluded.iter().map(|&(g, u, v)| (g, v, u)).collect();
        Gates::new(reversed, stars, excluded)
    }

    /// Whether these gates are their own reversal over `twin` (per physical link, its twin
    /// the other way): each member's link down is the twin of its link up, and a pair left
    /// out is left out both ways.
    pub fn mirror_themselves(&self, twin: &[LinkId]) -> bool {
        self.members.iter().all(|&(_, up, down)| twin[down] == up)
            && self
                .excluded
                .iter()
                .all(|&(g, u, v)| self.excluded.contains(&(g, v, u)))
    }

    /// How many gates there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// How many groups there are.
    pub fn groups(&self) -> usize {
        self.start.len() - 1
    }

    /// The gates of group `g`.
    pub fn gates_of_group(&self, g: usize) -> std::ops::Range<usize> {
        self.start[g] as usize..self.start[g + 1] as usize
    }

    /// The gates of `npu`, one per group it is a member of.
    pub fn of_npu(&self, npu: NpuId) -> &[u32] {
        &self.npu_gates[self.npu_start[npu] as usize..self.npu_start[npu + 1] as usize]
    }

    /// `npu`'s gate in group `g`, if it is a member.
    pub fn gate_in(&self, g: usize, npu: NpuId) -> Option<usize> {
        self.of_npu(npu)
            .iter()
            .map(|&gate| gate as usize)
            .find(|&gate| self.group[gate] as usize == g)
    }

    pub fn group(&self, gate: usize) -> usize {
        self.group[gate] as usize
    }

    pub fn npu(&self, gate: usize) -> NpuId {
        self.members[gate].0
    }

    /// The member's link up to the switch.
    pub fn up(&self, gate: usize) -> LinkId {
        self.members[gate].1
    }

    /// The switch's link down to the member.
    pub fn down(&self, gate: usize) -> LinkId {
        self.members[gate].2
    }

    /// The gate whose link up `link` is.
    pub fn up_of(&self, link: LinkId) -> Option<usize> {
        let gate = self.up_of[link];
        (gate != NONE).then_some(gate as usize)
    }

    /// The gate whose link down `link` is.
    pub fn down_of(&self, link: LinkId) -> Option<usize> {
        let gate = self.down_of[link];
        (gate != NONE).then_some(gate as usize)
    }

    /// Whether the member of gate `from` sends to the member of gate `to` (same group)
    /// through their switch.
    pub fn joins(&self, from: usize, to: usize) -> bool {
        from != to
            && !(self.contested[from]
                && self.contested[to]
                && self.excluded.contains(&(
                    self.group[to],
                    self.members[from].0 as u32,
                    self.members[to].0 as u32,
                )))
    }

    /// The link a transfer through group `g` behaves as.
    pub fn channel(&self, g: usize) -> &Link {
        &self.channel[g]
    }

    /// (sender's gate, receiver's gate) of a group joining `src` to `dst`.
    pub fn between(&self, src: NpuId, dst: NpuId) -> Option<(usize, usize)> {
        self.of_npu(dst).iter().find_map(|&to| {
            let from = self.gate_in(self.group(to as usize), src)?;
            self.joins(from, to as usize).then_some((from, to as usize))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::fabric::Fabric;
    use crate::topology::{parse_spec, SpecDefaults};

    #[test]
    fn a_pair_left_out_one_way_only_breaks_the_mirror() {
        let topo = parse_spec("preset:dgx-a100,nodes=24", &SpecDefaults::default()).unwrap();
        let mut fabric = Fabric::new(&topo).unwrap();
        assert!(fabric.mirrors_itself());
        let gates = fabric
            .gates
            .as_mut()
            .expect("rails of 24 are matched by port");
        let (first, second) = (gates.npu(0) as u32, gates.npu(1) as u32);
        gates.excluded.insert((0, first, second));
        assert!(!fabric.mirrors_itself());
        let gates = fabric.gates.as_mut().unwrap();
        gates.excluded.insert((0, second, first));
        assert!(fabric.mirrors_itself());
    }
}
