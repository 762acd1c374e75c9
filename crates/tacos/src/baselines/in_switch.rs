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
//! A Broadcast multicasts chunk j in the root's node, NPU j mod P of each node passes it
//! along its rail to the next node's (a chain from the root's node) and multicasts it in
//! its node; a Reduce sums chunk j into NPU j mod P of each node, those reduce along the
//! same chain backwards into the root's node, whose NPU copies the total to the root.
//! Their K chunks per NPU are each NPU's share of the buffer (P x K in all), as many as
//! the others move.
//!
//! The plan is timed here, not by steps: its operations are list-scheduled on the links
//! (`Ops::list_schedule`), a chunk further along first, since operations that hold most of
//! a switch's ports at once leave a readiness order little room to overlap. The simulator
//! runs such a timed schedule on its clock.

use super::{root_rank, Plan};
use crate::collective::{ChunkId, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::{route_time_ps, Op, Transfer};
use crate::topology::{LinkId, NpuId, RouteCache, Topology, VertexId};
use crate::units::Picos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most link checks the list scheduler makes before it gives up (a few seconds' work):
/// the search then goes on without the in-switch schedule.
const MAX_WORK: u64 = 1 << 30;

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
fn nodes(topo: &Topology, spec: &CollectiveSpec) -> Result<Vec<Vec<NpuId>>> {
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
    let Some(size) = nodes.first().map(|(_, m)| m.len()) else {
        return refuse("no NPU takes part".into());
    };
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

/// The in-switch plan of `spec` on `topo` (see the module's table), timed.
pub(super) fn plan(topo: &Topology, spec: &CollectiveSpec, chunk_bytes: f64) -> Result<Plan> {
    let nodes = nodes(topo, spec)?;
    let mut ops = Ops::default();
    let k = spec.chunks_per_npu;
    let size = nodes[0].len();
    let at = |npu: NpuId| -> (usize, usize) {
        nodes
            .iter()
            .enumerate()
            .find_map(|(n, m)| m.iter().position(|&x| x == npu).map(|g| (n, g)))
            .expect("every NPU of the collective is in a node")
    };
    // The nodes from `home` on round the rails: a chunk passes along its rail down them.
    let chain_from = |home: usize| -> Vec<usize> {
        (0..nodes.len()).map(|i| (home + i) % nodes.len()).collect()
    };
    match spec.kind {
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::AllGather => {
            // Across nodes, chunk j of every owner before chunk j + 1 of any, so that the
            // rails take turns. In one node, an owner's chunks one after another, so that
            // the sum of one into its owner runs beside the multicast of the one before
            // from it: the two hold the owner's port in opposite directions.
            let owners = spec.npus.len();
            let order: Vec<(usize, usize)> = match nodes.len() {
                1 => (0..owners)
                    .flat_map(|r| (0..k).map(move |j| (r, j)))
                    .collect(),
                _ => (0..k)
                    .flat_map(|j| (0..owners).map(move |r| (r, j)))
                    .collect(),
            };
            for (rank, j) in order {
                let npu = spec.npus[rank];
                let (home, g) = at(npu);
                let chunk = rank * k + j;
                // Per node, what leaves NPU g of that node (its sum, or the owner's copy).
                let mut held: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
                if spec.kind != CollectiveKind::AllGather {
                    let sums: Vec<usize> = nodes
                        .iter()
                        .map(|node| ops.sum(chunk, node[g], node, &[]))
                        .collect();
                    let reduced: Vec<usize> = (0..nodes.len())
                        .filter(|&n| n != home)
                        .map(|n| {
                            let after = [sums[n], sums[home]];
                            ops.send(Stage::RailReduce, chunk, nodes[n][g], npu, &after)
                        })
                        .collect();
                    held[home] = if reduced.is_empty() {
                        vec![sums[home]]
                    } else {
                        reduced
                    };
                }
                if spec.kind != CollectiveKind::ReduceScatter {
                    for n in (0..nodes.len()).filter(|&n| n != home) {
                        let after = held[home].clone();
                        held[n] = vec![ops.send(Stage::RailCopy, chunk, npu, nodes[n][g], &after)];
                    }
                    for (n, node) in nodes.iter().enumerate() {
                        ops.multicast(chunk, node[g], node, &held[n]);
                    }
                }
            }
        }
        CollectiveKind::Broadcast => {
            let root = spec.npus[root_rank(spec)];
            let (home, _) = at(root);
            let chain = chain_from(home);
            for chunk in 0..k {
                let g = chunk % size;
                let spread = ops.multicast(chunk, root, &nodes[home], &[]);
                let mut after: Vec<usize> = (nodes[home][g] != root)
                    .then_some(spread)
                    .into_iter()
                    .collect();
                for pair in chain.windows(2) {
                    let (from, to) = (nodes[pair[0]][g], nodes[pair[1]][g]);
                    let copy = ops.send(Stage::RailCopy, chunk, from, to, &after);
                    ops.multicast(chunk, to, &nodes[pair[1]], &[copy]);
                    after = vec![copy];
                }
            }
        }
        CollectiveKind::Reduce => {
            let root = spec.npus[root_rank(spec)];
            let (home, root_rail) = at(root);
            let chain = chain_from(home);
            for chunk in 0..k {
                // Chunk j along rail j mod P, as a Broadcast spreads it: summed in each
                // node, reduced along the rail from the last node of the chain to the
                // root's, whose NPU on that rail copies the total to the root.
                let g = if nodes.len() == 1 {
                    root_rail
                } else {
                    chunk % size
                };
                let sums: Vec<usize> = nodes
                    .iter()
                    .map(|node| ops.sum(chunk, node[g], node, &[]))
                    .collect();
                let mut incoming: Option<usize> = None;
                for pair in chain.windows(2).rev() {
                    let (to, from) = (pair[0], pair[1]);
                    let after: Vec<usize> =
                        [sums[from], sums[to]].into_iter().chain(incoming).collect();
                    incoming = Some(ops.send(
                        Stage::RailReduce,
                        chunk,
                        nodes[from][g],
                        nodes[to][g],
                        &after,
                    ));
                }
                let total = nodes[home][g];
                if total != root {
                    let after = incoming.unwrap_or(sums[home]);
                    ops.send(Stage::RailCopy, chunk, total, root, &[after]);
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
    Ok(Plan {
        transfers: ops.list_schedule(topo, chunk_bytes)?,
    })
}

/// What an operation does, which also orders ready operations: a chunk further along
/// goes first, so that the switches' ports carry later stages of early chunks between
/// the first stages of later ones and the pipeline keeps moving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Multicast,
    RailCopy,
    RailReduce,
    Sum,
}

/// One operation: a sum inside the switch, a multicast, or one transfer along a rail.
struct Operation {
    stage: Stage,
    chunk: ChunkId,
    /// (src, dst) of each transfer.
    pairs: Vec<(NpuId, NpuId)>,
    /// The operations whose results it reads.
    after: Vec<usize>,
}

#[derive(Default)]
struct Ops {
    ops: Vec<Operation>,
}

impl Ops {
    fn push(
        &mut self,
        stage: Stage,
        chunk: ChunkId,
        pairs: Vec<(NpuId, NpuId)>,
        after: &[usize],
    ) -> usize {
        self.ops.push(Operation {
            stage,
            chunk,
            pairs,
            after: after.to_vec(),
        });
        self.ops.len() - 1
    }

    fn send(
        &mut self,
        stage: Stage,
        chunk: ChunkId,
        src: NpuId,
        dst: NpuId,
        after: &[usize],
    ) -> usize {
        self.push(stage, chunk, vec![(src, dst)], after)
    }

    /// `chunk` summed inside the switch into `dst` from the rest of `node`.
    fn sum(&mut self, chunk: ChunkId, dst: NpuId, node: &[NpuId], after: &[usize]) -> usize {
        self.through_switch(Stage::Sum, chunk, dst, node, after)
    }

    /// `chunk` multicast by the switch from `src` to the rest of `node`.
    fn multicast(&mut self, chunk: ChunkId, src: NpuId, node: &[NpuId], after: &[usize]) -> usize {
        self.through_switch(Stage::Multicast, chunk, src, node, after)
    }

    /// One operation inside the switch between `anchor` and the rest of `node`: into the
    /// anchor for a sum, out of it for a multicast.
    fn through_switch(
        &mut self,
        stage: Stage,
        chunk: ChunkId,
        anchor: NpuId,
        node: &[NpuId],
        after: &[usize],
    ) -> usize {
        let pairs = node
            .iter()
            .filter(|&&n| n != anchor)
            .map(|&n| match stage {
                Stage::Sum => (n, anchor),
                _ => (anchor, n),
            })
            .collect();
        self.push(stage, chunk, pairs, after)
    }

    /// The operations list-scheduled on the links: at each moment, of the operations
    /// whose inputs have landed, those whose links are all free start, later stages
    /// first, then in the order made. An operation holds the union of its transfers'
    /// routes (a link its transfers share, once) for its route's time, which must be the
    /// same for all its transfers; the transfers come out in start order.
    fn list_schedule(self, topo: &Topology, chunk_bytes: f64) -> Result<Vec<Transfer>> {
        let mut routes = RouteCache::new(topo);
        let mut held: Vec<(Vec<LinkId>, Picos)> = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let mut links = Vec::new();
            let mut time = None;
            for &(src, dst) in &op.pairs {
                let route = routes.between(src, dst).ok_or_else(|| {
                    Error::baseline("in-switch", format!("no route from NPU {src} to NPU {dst}"))
                })?;
                let ps = route_time_ps(topo, route, chunk_bytes)?;
                if *time.get_or_insert(ps) != ps {
                    return Err(Error::baseline(
                        "in-switch",
                        format!(
                            "the routes of one in-switch operation (NPU {src} to NPU {dst}) take different times: its NPUs' ports to the switch differ"
                        ),
                    ));
                }
                links.extend_from_slice(route);
            }
            links.sort_unstable();
            links.dedup();
            held.push((links, time.unwrap_or(0)));
        }
        let mut waiting: Vec<usize> = self.ops.iter().map(|op| op.after.len()).collect();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); self.ops.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &a in &op.after {
                next[a].push(i);
            }
        }
        let key = |i: usize| (self.ops[i].stage, i);
        // The operations that may start now: newly ready ones and those waiting on a link
        // that has just come free. Every other ready one waits on a link still busy.
        let mut candidates: Vec<usize> = (0..self.ops.len()).filter(|&i| waiting[i] == 0).collect();
        let mut blocked_on: Vec<Vec<usize>> = vec![Vec::new(); topo.links().len()];
        let mut free_at = vec![0 as Picos; topo.links().len()];
        let mut ends: BinaryHeap<Reverse<(Picos, usize)>> = BinaryHeap::new();
        let mut transfers = Vec::new();
        let mut now: Picos = 0;
        let mut work: u64 = 0;
        loop {
            candidates.sort_unstable_by_key(|&i| key(i));
            candidates.dedup();
            for i in candidates.drain(..) {
                let (links, ps) = &held[i];
                work += links.len() as u64;
                if let Some(&busy) = links.iter().find(|&&l| free_at[l] > now) {
                    blocked_on[busy].push(i);
                    continue;
                }
                let end = now + ps;
                links.iter().for_each(|&l| free_at[l] = end);
                ends.push(Reverse((end, i)));
                let op = &self.ops[i];
                let reduce = matches!(op.stage, Stage::Sum | Stage::RailReduce);
                let in_switch = matches!(op.stage, Stage::Sum | Stage::Multicast);
                for &(src, dst) in &op.pairs {
                    let t = Transfer::new(
                        op.chunk,
                        src,
                        dst,
                        now,
                        end,
                        if reduce { Op::Reduce } else { Op::Copy },
                    );
                    transfers.push(if in_switch { t.switched() } else { t });
                }
            }
            if work > MAX_WORK {
                return Err(Error::baseline(
                    "in-switch",
                    format!(
                        "scheduling its {} operations passes {MAX_WORK} link checks; fewer chunks (-k) or NPUs need fewer",
                        self.ops.len()
                    ),
                ));
            }
            let Some(Reverse((end, _))) = ends.peek().copied() else {
                break;
            };
            now = end;
            while let Some(&Reverse((end, i))) = ends.peek() {
                if end > now {
                    break;
                }
                ends.pop();
                for &l in &held[i].0 {
                    if free_at[l] <= now {
                        candidates.append(&mut blocked_on[l]);
                    }
                }
                for &j in &next[i] {
                    waiting[j] -= 1;
                    if waiting[j] == 0 {
                        candidates.push(j);
                    }
                }
            }
        }
        transfers.sort_by_key(|t| t.start_ps);
        Ok(transfers)
    }
}
