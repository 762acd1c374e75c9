//! The profiles of NCCL's algorithms on a [`Cluster`] of identical nodes, by formula: the
//! figures `profile` draws from simulating the baselines, found without building the
//! topology or any rank's schedule, so a cluster of 65,536 GPUs is priced in well under a
//! second.
//!
//! Ring (the ring baseline: a bidirectional ring that visits the nodes one after another,
//! crossing to the next node over a rail, as the ring search lays it on nodes of up to 8
//! GPUs; on nodes of 16 the search closes its ring over a two-hop route instead, a few
//! percent slower):
//!
//! - every hop is a direct link, so a pass of P - 1 steps of S / 2P per direction keeps
//!   each link busy for (P - 1) S / 2P at its bandwidth, and the slowest link sets the
//!   time (a ring's steps pipeline: no step waits longer than the slowest link's share);
//!   All-Reduce is two passes; a chain (Broadcast, Reduce) with unlimited pipelining
//!   carries S / 2 per direction at the speed of its slowest link;
//! - latency: a segment's P - 1 (All-Reduce 2 (P - 1)) consecutive hops, of which one in
//!   every `size` crosses a rail, so at most ceil(hops / size) do;
//! - each GPU sends (P - 1) / P of S per pass, 1 x S in a chain.
//!
//! Tree (the double binary tree over all ranks, All-Reduce): the trees' 4 (P - 1) edges are
//! walked once (no schedule, no simulation): each edge carries S / 2 up and S / 2 down on
//! its route (direct, or over the GPU of the other index in one of the two domains), and
//! the busiest link sets the time with unlimited pipelining; the latency is the longest
//! chain of edges up both trees and down again ([`longest_chain_ps`] over the edges, exactly
//! the simulation's). Where the busiest link is a rail that many edges' routes share (nodes
//! of 4 or 8 GPUs from 4 nodes on: the generic model's and the presets' shape) this is the
//! simulated figure; on one node, one GPU per node or nodes of 2 or 16 the simulated tree
//! stays 1.5 to 2 times above its links' bound. The tuner simulates communicators of up to
//! 64 ranks (`plugin::SIMULATED_RANKS_MAX`), so its choices there are the simulation's.

use super::cluster::{Cluster, LinkKind};
use super::profile::{longest_chain_ps, Profile, Step};
use super::protocol::ProtocolCost;
use crate::baselines::BalancedTree;
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use crate::gpu::Algorithm;
use crate::topology::NpuId;
use crate::units::{ps_to_us, us_to_ps};

/// The profile of `algorithm` for `kind` on `cluster` (rooted collectives at NPU 0), with
/// NVLink domains the cluster's nodes; `costs` by `Protocol::index`.
pub(crate) fn profile(
    cluster: &Cluster,
    kind: CollectiveKind,
    algorithm: Algorithm,
    costs: &[ProtocolCost; 3],
) -> Result<Profile> {
    match algorithm {
        Algorithm::Ring => Ok(ring(cluster, kind, costs)),
        Algorithm::Tree if kind == CollectiveKind::AllReduce => tree(cluster, costs),
        other => Err(Error::baseline(
            format!("NCCL {other}"),
            format!(
            "the formulas cover NCCL's ring, and its tree for allreduce, not {other} for {kind}"
        ),
        )),
    }
}

/// Microseconds a hop on a link of `kind` costs with `cost`: the link's latency or the
/// protocol's step latency for NVLink (`across` false) or the network, the larger.
fn hop_us(kind: &LinkKind, cost: &ProtocolCost, across: bool) -> f64 {
    kind.latency_us.max(cost.step_us[usize::from(across)])
}

/// NCCL's ring of `kind` on a cluster, counted: what both its time formula here and its
/// executor shape (`fabric`) are made of.
pub(super) struct RingWalk {
    /// Hops in a row a chunk takes (twice round for All-Reduce).
    pub hops: usize,
    /// Broadcast and Reduce: a chain from the root, not a ring every rank sends on.
    pub chain: bool,
    /// Rail crossings among `hops` consecutive hops of the ring.
    pub rails: usize,
    /// Bytes per byte of collective over each direction of a link the ring uses.
    pub link_bytes: f64,
    /// Bytes per byte of collective each rank sends.
    pub sent: f64,
}

impl RingWalk {
    pub(super) fn of(cluster: &Cluster, kind: CollectiveKind) -> RingWalk {
        let p = cluster.npus();
        let pf = p as f64;
        let (hops, chain) = match kind {
            CollectiveKind::AllReduce => (2 * (p - 1), false),
            CollectiveKind::Broadcast | CollectiveKind::Reduce => (p - 1, true),
            _ => (p - 1, false),
        };
        let rails = match (cluster.domains, cluster.size) {
            (1, _) => 0,
            (_, 1) => hops,
            _ => hops.div_ceil(cluster.size),
        };
        // Two NPUs: both directions share the one link each way.
        let share = if p == 2 { 2.0 } else { 1.0 };
        let passes = if kind == CollectiveKind::AllReduce {
            2.0
        } else {
            1.0
        };
        let (link_bytes, sent) = if chain {
            (0.5 * share, 1.0)
        } else {
            (
                passes * share * (pf - 1.0) / (2.0 * pf),
                passes * (pf - 1.0) / pf,
            )
        };
        RingWalk {
            hops,
            chain,
            rails,
            link_bytes,
            sent,
        }
    }
}

fn ring(cluster: &Cluster, kind: CollectiveKind, costs: &[ProtocolCost; 3]) -> Profile {
    let (domains, size) = (cluster.domains, cluster.size);
    let RingWalk {
        hops,
        chain,
        rails,
        link_bytes,
        sent,
    } = RingWalk::of(cluster, kind);
    let latency_us = costs.map(|c| {
        let rail = hop_us(&cluster.rail, &c, true);
        let nvlink = hop_us(&cluster.nvlink, &c, false);
        rails as f64 * rail + (hops - rails) as f64 * nvlink
    });
    let mut slowest = f64::INFINITY;
    if size > 1 {
        slowest = slowest.min(cluster.nvlink.bandwidth_gbps);
    }
    if domains > 1 {
        slowest = slowest.min(cluster.rail.bandwidth_gbps);
    }
    let egress = cluster.egress_gbps();
    // Bytes per byte of collective over GB/s: microseconds per byte / 1e3. A chain is
    // also no faster than its root sends, as `profile` bounds it.
    let links = link_bytes / slowest;
    let us_per_byte = if chain {
        links.max(sent / egress)
    } else {
        links
    } / 1e3;
    Profile {
        latency_us,
        us_per_byte,
        injection: vec![(sent, egress)],
    }
}

/// A step as the schedule orders them: (step, src, dst).
type Key = (usize, NpuId, NpuId);

/// The double binary tree's All-Reduce on `p` NPUs as steps (the same key in both trees is
/// one step, as in `merged_steps`, each with the steps it waits for), and every edge it
/// carries S / 2 over, once per direction and tree: up each tree, then down. The
/// schedule of the DBT baseline, without building it.
pub(super) fn tree_steps(p: usize) -> (Vec<Step>, Vec<(NpuId, NpuId)>) {
    let shape = BalancedTree::balanced(p);
    let top = shape.height[shape.root];
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); p];
    for (i, parent) in shape.parent.iter().enumerate() {
        if let Some(q) = *parent {
            kids[q].push(i);
        }
    }
    let mut keys: Vec<Key> = Vec::with_capacity(4 * p);
    let mut waits: Vec<(Key, Key)> = Vec::with_capacity(8 * p);
    let mut carried: Vec<(NpuId, NpuId)> = Vec::with_capacity(4 * p);
    for tree in 0..2 {
        let npu = |i: usize| (i + tree) % p;
        let up = |i: usize| shape.parent[i].map(|q| (shape.height[i], npu(i), npu(q)));
        for i in 0..p {
            let Some(q) = shape.parent[i] else { continue };
            carried.extend([(npu(i), npu(q)), (npu(q), npu(i))]);
            let key = (shape.height[i], npu(i), npu(q));
            keys.push(key);
            waits.extend(kids[i].iter().filter_map(|&c| up(c)).map(|d| (key, d)));
            let down = (top + shape.depth[q], npu(q), npu(i));
            keys.push(down);
            waits.extend(kids[q].iter().filter_map(|&c| up(c)).map(|d| (down, d)));
            if let Some(g) = shape.parent[q] {
                waits.push((down, (top + shape.depth[g], npu(g), npu(q))));
            }
        }
    }
    keys.sort_unstable();
    keys.dedup();
    let index = |k: &Key| {
        keys.binary_search(k)
            .unwrap_or_else(|_| unreachable!("a step"))
    };
    let mut edges: Vec<(usize, usize)> = waits.iter().map(|(s, d)| (index(s), index(d))).collect();
    edges.sort_unstable();
    edges.dedup();
    let mut steps: Vec<Step> = keys
        .iter()
        .map(|&(_, src, dst)| Step {
            src,
            dst,
            deps: Vec::new(),
        })
        .collect();
    for (step, dep) in edges {
        steps[step].deps.push(dep);
    }
    (steps, carried)
}

/// The double binary tree's All-Reduce: up each tree, then down.
fn tree(cluster: &Cluster, costs: &[ProtocolCost; 3]) -> Result<Profile> {
    let p = cluster.npus();
    let (steps, carried) = tree_steps(p);
    let mut link_loads: Vec<(NpuId, NpuId)> = Vec::with_capacity(2 * carried.len());
    let (mut sent, mut received) = (vec![0.0f64; p], vec![0.0f64; p]);
    for &(from, to) in &carried {
        sent[from] += 0.5;
        received[to] += 0.5;
        if cluster.link(from, to).is_some() {
            link_loads.push((from, to));
        } else {
            let via = cluster.via(from, to);
            link_loads.extend([(from, via), (via, to)]);
        }
    }
    let mut latency_us = [0.0; 3];
    for (slot, cost) in latency_us.iter_mut().zip(costs) {
        let rail = us_to_ps(hop_us(&cluster.rail, cost, true));
        let nvlink = us_to_ps(hop_us(&cluster.nvlink, cost, false));
        let hop = |a: NpuId, b: NpuId| {
            Ok(match cluster.link(a, b) {
                Some(_) if a / cluster.size != b / cluster.size => rail,
                Some(_) => nvlink,
                None => rail + nvlink,
            })
        };
        *slot = ps_to_us(longest_chain_ps(&steps, hop)?);
    }
    link_loads.sort_unstable();
    let busiest = link_loads
        .chunk_by(|a, b| a == b)
        .map(|uses| {
            let (a, b) = uses[0];
            let bandwidth = cluster
                .link(a, b)
                .map_or(f64::INFINITY, |k| k.bandwidth_gbps);
            0.5 * uses.len() as f64 / bandwidth
        })
        .fold(0.0, f64::max);
    let egress = cluster.egress_gbps();
    let most = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (most_sent, most_received) = (most(&sent), most(&received));
    Ok(Profile {
        latency_us,
        us_per_byte: busiest.max(most_sent.max(most_received) / egress) / 1e3,
        injection: vec![(most_sent, egress)],
    })
}

#[cfg(test)]
mod tests {
    //! The simulation (`profile`, the tuner's model before the formulas) is the second
    //! implementation the formulas are held to, on clusters small enough to simulate.
    use super::*;
    use crate::gpu::{GpuArch, Protocol};
    use crate::topology::spec::{plan_spec, SpecPlan};
    use crate::topology::{compose, SpecDefaults, Topology};
    use crate::tuner::constants::NcclConstants;
    use crate::tuner::profile::Profiler;
    use crate::tuner::{Communicator, Network, Tuner, TUNED};

    /// The cluster a spec describes with NVLink domains of `domain` NPUs, and its built
    /// topology.
    /// The cluster and its topology as the tuner prices it (switch vertices unwound, as
    /// `Profiler` does).
    fn both(spec: &str, domain: usize) -> (Cluster, Topology) {
        let SpecPlan::Composed { name, dims, .. } =
            plan_spec(spec, &SpecDefaults::default()).unwrap()
        else {
            panic!("{spec} is composed")
        };
        let cluster = Cluster::from_dims(&dims, domain).unwrap();
        (cluster, compose(name, &dims).unwrap().unwind(None).unwrap())
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * a.abs().max(b.abs())
    }

    /// (spec, GPUs per NVLink domain): 1 to 8 nodes of presets and builder specs
    /// (TACOS_TOPOLOGY as users give it), and the edges: two GPUs, one node, one GPU per
    /// node, nodes of 2 and of 16.
    const SPECS: [(&str, usize); 13] = [
        ("switch:2", 2),
        ("switch:6,bw=90", 6),
        ("multi:F1xS5,bw=100:40", 1),
        ("multi:S2xS8", 2),
        ("multi:S16xS4", 16),
        ("preset:hgx-h100", 8),
        ("preset:dgx-h100,nodes=2", 8),
        ("preset:dgx-h100,nodes=3", 8),
        ("multi:F4xS3,bw=100:20", 4),
        ("preset:dgx-h100,nodes=4", 8),
        ("preset:dgx-a100,nodes=8", 8),
        ("multi:S8xS4,bw=300:25,lat=0.5:3", 8),
        ("multi:S4xS8", 4),
    ];
    /// The specs above of nodes of 4 or 8 GPUs, from 4 nodes on: the generic model's and
    /// the presets' shape, where the busiest link of the tree is a rail that many of its
    /// edges' routes share, so the simulated tree reaches its links' bound.
    const RAIL_BOUND: usize = 9;

    /// Whether the ring search lays its ring on `topo` as the formulas assume: along links,
    /// visiting the nodes one after another.
    fn ring_follows_nodes(topo: &Topology, cluster: &Cluster) -> bool {
        let order = crate::baselines::ring_order(topo, &topo.alive_npus());
        let hops = order.iter().zip(order.iter().cycle().skip(1));
        let crossings = hops
            .clone()
            .filter(|&(a, b)| a / cluster.size != b / cluster.size)
            .count();
        let linked = hops
            .into_iter()
            .all(|(&a, &b)| topo.link_between(a, b).is_some());
        linked
            && crossings
                == if cluster.domains > 1 {
                    cluster.domains
                } else {
                    0
                }
    }

    #[test]
    fn profiles_match_the_simulation() {
        let c = NcclConstants::default();
        for (spec_index, (spec, domain)) in SPECS.into_iter().enumerate() {
            let (cluster, topo) = both(spec, domain);
            let profiler = Profiler::new(&topo, cluster.size).unwrap();
            // Nodes of 16: the search's ring closes over a route of two hops.
            let ring_as_assumed = ring_follows_nodes(&topo, &cluster);
            assert!(ring_as_assumed || cluster.size > 8, "{spec}");
            for kind in TUNED {
                for algorithm in [Algorithm::Ring, Algorithm::Tree] {
                    if algorithm == Algorithm::Tree && kind != CollectiveKind::AllReduce {
                        continue;
                    }
                    let costs = Protocol::ALL.map(|p| {
                        ProtocolCost::new(&c, GpuArch::Hopper, cluster.domains, algorithm, p)
                    });
                    let simulated = profiler.profile(kind, algorithm, &costs).unwrap();
                    let formula = profile(&cluster, kind, algorithm, &costs).unwrap();
                    let what = format!("{spec} {kind} {algorithm}");
                    let exact = algorithm == Algorithm::Tree || ring_as_assumed;
                    let tolerance = if exact { 1e-9 } else { 0.05 };
                    for (a, b) in simulated.latency_us.iter().zip(formula.latency_us) {
                        assert!(close(*a, b, tolerance), "{what}: latency {a} vs {b}");
                    }
                    // Injection: the simulation lists every GPU, all alike here.
                    let worst = |p: &Profile| {
                        p.injection
                            .iter()
                            .map(|&(sent, egress)| sent / egress)
                            .fold(0.0, f64::max)
                    };
                    assert!(close(worst(&simulated), worst(&formula), 1e-9), "{what}");
                    let (a, b) = (simulated.us_per_byte, formula.us_per_byte);
                    if algorithm == Algorithm::Ring || spec_index >= RAIL_BOUND {
                        assert!(close(a, b, tolerance), "{what}: per byte {a} vs {b}");
                    } else {
                        // The formula is the tree's links' bound with unlimited
                        // pipelining; the simulated tree, extrapolated from two chunk
                        // counts, lands near it or up to twice above it.
                        assert!(
                            (0.95..=2.0).contains(&(a / b)),
                            "{what}: per byte {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn choices_match_the_simulation_on_nodes_of_eight_from_four_nodes() {
        let comm = |cluster: &Cluster| Communicator {
            ranks: cluster.npus(),
            nodes: cluster.domains,
            constants: None,
        };
        for (spec, domain) in SPECS[RAIL_BOUND..].iter().copied() {
            let (cluster, topo) = both(spec, domain);
            let (size, gpu) = (cluster.size, GpuArch::Hopper);
            let simulated = Network::Simulated(&topo);
            let formulas = Network::Cluster {
                cluster,
                name: spec,
            };
            let a = Tuner::new(simulated, spec, size, Vec::new(), &comm(&cluster), gpu).unwrap();
            let b = Tuner::new(formulas, spec, size, Vec::new(), &comm(&cluster), gpu).unwrap();
            for kind in TUNED {
                for band in 0..64 {
                    let bytes = 1u64 << band;
                    let (x, y) = (a.choices(kind, bytes), b.choices(kind, bytes));
                    assert_eq!(x.len(), y.len());
                    for (x, y) in x.iter().zip(y) {
                        let key = |c: &crate::tuner::Choice| (c.algorithm, c.protocol, c.channels);
                        assert_eq!(key(x), key(y), "{spec} {kind} {bytes} B");
                        assert!(close(x.time_us, y.time_us, 1e-9), "{spec} {kind} {bytes} B");
                    }
                }
            }
        }
    }

    #[test]
    fn a_large_cluster_prices_in_proportion() {
        // 512 nodes of 8 on the generic cluster's figures: no topology is built. A ring
        // over P GPUs has P - 1 hops per pass; a double binary tree's depth grows with
        // log2(P), so its latency is far below the ring's.
        let dims = [
            crate::topology::Dim {
                reduces: false,
                kind: crate::topology::DimKind::Switch { degree: 7 },
                size: 8,
                bandwidth_gbps: 450.0,
                latency_us: 0.7,
            },
            crate::topology::Dim {
                reduces: false,
                kind: crate::topology::DimKind::Switch { degree: 511 },
                size: 512,
                bandwidth_gbps: 50.0,
                latency_us: 2.0,
            },
        ];
        let cluster = Cluster::from_dims(&dims, 8).unwrap();
        let c = NcclConstants::default();
        let cost = |a| Protocol::ALL.map(|p| ProtocolCost::new(&c, GpuArch::Hopper, 512, a, p));
        let ring = profile(
            &cluster,
            CollectiveKind::AllReduce,
            Algorithm::Ring,
            &cost(Algorithm::Ring),
        );
        let tree = profile(
            &cluster,
            CollectiveKind::AllReduce,
            Algorithm::Tree,
            &cost(Algorithm::Tree),
        );
        let (ring, tree) = (ring.unwrap(), tree.unwrap());
        // Ring LL: 2 x 4095 hops, 1024 of them across rails at max(2.0, 2.7) us, the rest
        // on NVLink at max(0.7, 0.6) us.
        assert!(close(ring.latency_us[0], 1024.0 * 2.7 + 7166.0 * 0.7, 1e-9));
        // Two passes of 4095/8192 of S each over the slowest link, a rail of 50/511 GB/s.
        assert!(close(
            ring.us_per_byte,
            2.0 * 4095.0 / 8192.0 / (50.0 / 511.0) / 1e3,
            1e-9
        ));
        // Up and down a tree of height 12: 24 steps (each waits only for steps of a lower
        // level), each at least an NVLink hop (0.7 us) and at most a route over NVLink and
        // a rail (Tree/LL's network step 5.0 us).
        let tree_ll = tree.latency_us[0];
        assert!((24.0 * 0.7..=24.0 * 5.7).contains(&tree_ll), "{tree_ll}");
    }
}
