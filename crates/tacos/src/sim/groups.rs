//! In-switch operations (`Transfer::in_switch`) as the simulator runs them: each group of
//! in-switch messages (`schedule::GroupKey`: one multicast, or one sum inside a reducing
//! switch) moves as one. It starts once every member is issued and every link of the
//! group is free, holds the links its members share (`schedule::shared_links`) once and
//! each member's other links for itself, and all its members land together, after the
//! slowest member's cut-through time. A schedule whose members take equal times (the
//! checker requires it) so runs on its clock, and a step-ordered one comes out timed the
//! way the checker accepts.

use super::ready::Routes;
use super::workload::{Workload, NONE};
use crate::error::{Error, Result};
use crate::schedule::{shared_links, GroupKey, Op};
use crate::topology::Topology;
use std::collections::HashMap;

pub(super) struct Groups {
    /// Per message, its group (`NONE`: not in-switch); empty when no message is.
    of: Vec<u32>,
    /// `members[member_start[g]..member_start[g + 1]]`: group g's messages, by index.
    member_start: Vec<u32>,
    members: Vec<u32>,
    /// `links[link_start[g]..link_start[g + 1]]`: every link group g holds, each once.
    link_start: Vec<u32>,
    links: Vec<u32>,
}

impl Groups {
    /// The groups of `work`'s in-switch messages, routed by `routes`. An in-switch
    /// message must be one hop through switches passing a reducing switch, and no two
    /// members of a group may cross a link outside what the group shares.
    pub fn new(topo: &Topology, work: &Workload, routes: &Routes) -> Result<Groups> {
        if work.in_switch.is_empty() {
            return Ok(Groups {
                of: Vec::new(),
                member_start: vec![0],
                members: Vec::new(),
                link_start: vec![0],
                links: Vec::new(),
            });
        }
        let mut of = vec![NONE; work.len()];
        let mut ids: HashMap<GroupKey, u32> = HashMap::new();
        let mut keys: Vec<GroupKey> = Vec::new();
        let mut sizes: Vec<u32> = Vec::new();
        for &(m, key) in &work.in_switch {
            in_switch_span(topo, work, m as usize, &key, routes.of(m as usize))?;
            let next = ids.len() as u32;
            let g = *ids.entry(key).or_insert(next);
            if g == next {
                keys.push(key);
                sizes.push(0);
            }
            sizes[g as usize] += 1;
            of[m as usize] = g;
        }
        let mut member_start = vec![0u32; sizes.len() + 1];
        for (g, &size) in sizes.iter().enumerate() {
            member_start[g + 1] = member_start[g] + size;
        }
        let mut fill = member_start.clone();
        let mut members = vec![0u32; work.in_switch.len()];
        for (m, &g) in of.iter().enumerate().filter(|(_, &g)| g != NONE) {
            members[fill[g as usize] as usize] = m as u32;
            fill[g as usize] += 1;
        }
        let mut link_start = vec![0u32];
        let mut links = Vec::new();
        // (link, shared, member) of the group being gathered.
        let mut crossed: Vec<(u32, bool, u32)> = Vec::new();
        for g in 0..sizes.len() {
            crossed.clear();
            for &m in &members[member_start[g] as usize..member_start[g + 1] as usize] {
                let route = routes.of(m as usize);
                // Every member's route was found to have its span above.
                let shared = shared_links(topo, route.iter().map(|&l| l as usize), keys[g].op)
                    .unwrap_or(0..0);
                crossed.extend(
                    route
                        .iter()
                        .enumerate()
                        .map(|(k, &l)| (l, shared.contains(&k), m)),
                );
            }
            crossed.sort_unstable();
            for pair in crossed.windows(2) {
                let [(l, a_shared, a), (next, b_shared, b)] = *pair else {
                    continue;
                };
                if l == next && !(a_shared && b_shared) {
                    let link = topo.link(l as usize);
                    return Err(Error::schedule_at(
                        a.min(b) as usize,
                        format!(
                            "in-switch transfers {} and {} of one {} both cross link {} -> {}, which the operation does not share: a switch sends one chunk at a time on it",
                            a.min(b),
                            a.max(b),
                            operation(&keys[g]),
                            topo.vertex_label(link.src),
                            topo.vertex_label(link.dst)
                        ),
                    ));
                }
            }
            crossed.dedup_by_key(|&mut (l, _, _)| l);
            links.extend(crossed.iter().map(|&(l, _, _)| l));
            link_start.push(links.len() as u32);
        }
        Ok(Groups {
            of,
            member_start,
            members,
            link_start,
            links,
        })
    }

    /// The group of message `m`, if it is in-switch.
    pub fn of(&self, m: usize) -> Option<usize> {
        match self.of.get(m) {
            Some(&g) if g != NONE => Some(g as usize),
            _ => None,
        }
    }

    /// The messages of group `g`, by index.
    pub fn members(&self, g: usize) -> &[u32] {
        &self.members[self.member_start[g] as usize..self.member_start[g + 1] as usize]
    }

    /// Every link group `g` holds, each once.
    pub fn links(&self, g: usize) -> &[u32] {
        &self.links[self.link_start[g] as usize..self.link_start[g + 1] as usize]
    }

    /// How many groups there are.
    pub fn len(&self) -> usize {
        self.member_start.len() - 1
    }
}

/// Refuses in-switch message `m` (of group `key`), naming it, unless its route is one hop
/// through switches with a reducing switch on it.
fn in_switch_span(
    topo: &Topology,
    work: &Workload,
    m: usize,
    key: &GroupKey,
    route: &[u32],
) -> Result<()> {
    let through_npu = route
        .split_last()
        .map(|(_, inner)| inner)
        .unwrap_or_default()
        .iter()
        .map(|&l| topo.link(l as usize).dst)
        .find(|&v| !topo.is_switch(v));
    let span = match through_npu {
        Some(npu) => Err(format!("passes through NPU {npu}")),
        None => shared_links(topo, route.iter().map(|&l| l as usize), key.op).map(|_| ()),
    };
    span.map_err(|why| {
        Error::schedule_at(
            m,
            format!(
                "transfer {m} (chunk {}, NPU {} -> {}) is in-switch, but its route {why}",
                key.chunk, work.src[m], work.dst[m]
            ),
        )
    })
}

/// What group `key` is: `multicast from NPU 2` or `sum into NPU 0`.
fn operation(key: &GroupKey) -> String {
    match key.op {
        Op::Copy => format!("multicast from NPU {}", key.anchor),
        Op::Reduce => format!("sum into NPU {}", key.anchor),
    }
}
