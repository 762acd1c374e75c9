//! In-switch: the switch a node's NPUs hang off sums what they send it and multicasts
//! (NVLS), so a node's share of a collective crosses each NPU's link to the switch once
//! each way rather than once per step of a ring. Across nodes, NPU g of every node
//! exchanges its share with its peers (its rail).
//!
//! A node is the alive NPUs of the collective with links to and from one reducing switch
//! (`Topology::reduces`); every node must have as many, and NPU g of one node must reach
//! NPU g of every other (its rail peer). Per chunk owned by NPU g of node n:
//!
//! | collective | node | rail | node |
//! | --- | --- | --- | --- |
//! | allreduce | sum into each node's NPU g | reduce into n's, copy back | multicast from NPU g |
//! | reducescatter | sum into each node's NPU g | reduce into n's | |
//! | allgather | | copy from n's to each node's NPU g | multicast from NPU g |
//!
//! A Broadcast multicasts chunk j in the root's node, NPU j mod P of the root's node
//! copies it along its rail and each node multicasts it again; a Reduce sums every chunk
//! into the root's rail peer in each node, and those reduce into the root along its rail.

use super::{root_rank, Plan};
use crate::collective::{ChunkId, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::{Op, Transfer};
use crate::topology::{NpuId, RouteCache, Topology, VertexId};

/// The collectives the in-switch plan defines.
pub(super) const KINDS: &[CollectiveKind] = &[
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
    CollectiveKind::Broadcast,
    CollectiveKind::Reduce,
];

/// The collective's NPUs as nodes of equal size, one per reducing switch, each in the
/// collective's rank order.
pub(super) fn nodes(topo: &Topology, spec: &CollectiveSpec) -> Result<Vec<Vec<NpuId>>> {
    let refuse = |why: String| Err(Error::baseline("in-switch", why));
    if !topo.has_reducing_switch() {
        return refuse(format!(
            "'{}' has no switch that reduces inside itself (NVLS)",
            topo.name()
        ));
    }
    let switch_of = |npu: NpuId| -> Option<VertexId> {
        topo.out_links(npu)
            .map(|l| topo.link(l).dst)
            .find(|&s| topo.reduces(s) && topo.link_between(s, npu).is_some())
    };
    let mut nodes: Vec<(VertexId, Vec<NpuId>)> = Vec::new();
    for &npu in &spec.npus {
        let Some(s) = switch_of(npu) else {
            return refuse(format!(
                "NPU {npu} has no link to and from a reducing switch"
            ));
        };
        match nodes.iter_mut().find(|(t, _)| *t == s) {
            Some((_, members)) => members.push(npu),
            None => nodes.push((s, vec![npu])),
        }
    }
    nodes.sort_by_key(|(s, _)| *s);
    let size = nodes[0].1.len();
    if let Some((s, members)) = nodes.iter().find(|(_, m)| m.len() != size) {
        return refuse(format!(
            "its nodes differ in size: {} has {} NPUs, {} has {size}",
            topo.vertex_label(*s),
            members.len(),
            topo.vertex_label(nodes[0].0)
        ));
    }
    if size < 2 && nodes.len() < 2 {
        return refuse("one NPU takes part".into());
    }
    let nodes: Vec<Vec<NpuId>> = nodes.into_iter().map(|(_, m)| m).collect();
    let mut routes = RouteCache::new(topo);
    for g in 0..size {
        for a in &nodes {
            for b in &nodes {
                if a[0] != b[0] && routes.between(a[g], b[g]).is_none() {
                    return refuse(format!(
                        "NPU {} does not reach its rail peer NPU {}",
                        a[g], b[g]
                    ));
                }
            }
        }
    }
    Ok(nodes)
}

/// The in-switch plan of `spec` on `topo` (see the module's table).
pub(super) fn plan(topo: &Topology, spec: &CollectiveSpec) -> Result<Plan> {
    let nodes = nodes(topo, spec)?;
    let mut out = Steps::default();
    let k = spec.chunks_per_npu;
    let size = nodes[0].len();
    let at = |npu: NpuId| -> (usize, usize) {
        nodes
            .iter()
            .enumerate()
            .find_map(|(n, m)| m.iter().position(|&x| x == npu).map(|g| (n, g)))
            .expect("every NPU of the collective is in a node")
    };
    let owned = |rank: usize| (rank * k..(rank + 1) * k).enumerate();
    match spec.kind {
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::AllGather => {
            for (rank, &npu) in spec.npus.iter().enumerate() {
                let (_, g) = at(npu);
                let rail: Vec<NpuId> = nodes.iter().map(|m| m[g]).collect();
                for (j, chunk) in owned(rank) {
                    // Each chunk's stages, a step apart; chunk j of every owner together.
                    let step = 4 * j;
                    if spec.kind != CollectiveKind::AllGather {
                        for node in &nodes {
                            out.sum(step, chunk, node[g], node);
                        }
                        for &peer in rail.iter().filter(|&&p| p != npu) {
                            out.send(step + 1, chunk, peer, npu, Op::Reduce);
                        }
                    }
                    if spec.kind != CollectiveKind::ReduceScatter {
                        for &peer in rail.iter().filter(|&&p| p != npu) {
                            out.send(step + 2, chunk, npu, peer, Op::Copy);
                        }
                        for node in &nodes {
                            out.multicast(step + 3, chunk, node[g], node);
                        }
                    }
                }
            }
        }
        CollectiveKind::Broadcast => {
            let root = spec.npus[root_rank(spec)];
            let (home, _) = at(root);
            for chunk in 0..k {
                let g = chunk % size;
                out.multicast(3 * chunk, chunk, root, &nodes[home]);
                let from = nodes[home][g];
                for node in nodes.iter().filter(|m| m[g] != from) {
                    out.send(3 * chunk + 1, chunk, from, node[g], Op::Copy);
                    out.multicast(3 * chunk + 2, chunk, node[g], node);
                }
            }
        }
        CollectiveKind::Reduce => {
            let root = spec.npus[root_rank(spec)];
            let (_, g) = at(root);
            for chunk in 0..k {
                for node in &nodes {
                    out.sum(2 * chunk, chunk, node[g], node);
                    if node[g] != root {
                        out.send(2 * chunk + 1, chunk, node[g], root, Op::Reduce);
                    }
                }
            }
        }
        other => {
            return Err(Error::baseline(
                "in-switch",
                format!("in-switch does not define {other}"),
            ))
        }
    }
    Ok(out.into_plan())
}

/// Transfers by step, put in step order at the end.
#[derive(Default)]
struct Steps {
    transfers: Vec<Transfer>,
}

impl Steps {
    fn send(&mut self, step: usize, chunk: ChunkId, src: NpuId, dst: NpuId, op: Op) {
        let t = Transfer::new(chunk, src, dst, step as u64, step as u64 + 1, op);
        self.transfers.push(t);
    }

    /// `chunk` summed inside the switch into `dst` from the rest of `node`.
    fn sum(&mut self, step: usize, chunk: ChunkId, dst: NpuId, node: &[NpuId]) {
        for &src in node.iter().filter(|&&n| n != dst) {
            let t = Transfer::new(chunk, src, dst, step as u64, step as u64 + 1, Op::Reduce);
            self.transfers.push(t.switched());
        }
    }

    /// `chunk` multicast by the switch from `src` to the rest of `node`.
    fn multicast(&mut self, step: usize, chunk: ChunkId, src: NpuId, node: &[NpuId]) {
        for &dst in node.iter().filter(|&&n| n != src) {
            let t = Transfer::new(chunk, src, dst, step as u64, step as u64 + 1, Op::Copy);
            self.transfers.push(t.switched());
        }
    }

    fn into_plan(mut self) -> Plan {
        // Stable: within a step, the order the stages were written in.
        self.transfers.sort_by_key(|t| t.start_ps);
        Plan {
            transfers: self.transfers,
        }
    }
}
