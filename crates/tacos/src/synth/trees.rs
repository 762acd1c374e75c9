//! Planned trees: each chunk of a copying collective (All-Gather, Broadcast, and the duals
//! whose reversal makes Reduce-Scatter, Reduce and All-Reduce's reductions) spread from
//! its holder along a spanning tree chosen before matching, so that every link carries
//! its share of the chunks and no chunk crosses into a group twice.
//!
//! Left to itself the matcher sends a chunk over whichever link can take it first; where
//! links differ in speed (a dragonfly's global links, a cluster's NICs), a chunk often
//! enters a group over two slow links at once, or slow links idle while a fast one queues.
//! The throughput a network allows is set by its cuts (`crate::bounds`), and a packing of
//! spanning trees whose loads fit the links' bandwidths reaches it. Here each chunk's tree
//! is grown from its holder one link at a time, each the one whose busiest physical link
//! the trees before it leave least busy (`Planner::grow`): chunks in a seeded random
//! order, each planned on the loads of those before it, then each planned again on the
//! loads of all the others. The matcher then times the hops, a chunk going to an NPU only
//! over its tree's link into it, and of the chunks a link could carry it prefers the one
//! the most NPUs wait on below it (`Trees::below`).
//!
//! Balanced trees may be deep: a tree grown for its loads runs a chunk along a chain of
//! NPUs where a star would do, and with few chunks to pipeline each hop of the chain is
//! a step the collective waits for. Shallow trees ([`TreeShape::Shallow`]) take the
//! cheapest link first and, among equals, the one its chunk arrives over first: a chunk
//! enters each group of fast links once and spreads there as a star (a dragonfly's
//! All-Gather of 1 GiB at K = 2: 0.959 of the cut against 0.756 balanced); loads then
//! only break ties. Searches try both.
//!
//! On rings and tori the fastest All-Gather splits each NPU's share in halves that go
//! opposite ways round every ring, so that each direction of every link is busy at every
//! step (`ring:8` at K = 2: 7 steps, each link carrying a chunk in every one). Balanced
//! and shallow trees send both halves whichever way is least busy or arrives first; one-way
//! trees ([`TreeShape::OneWay`]) are shallow trees whose chunks may go only one way round
//! each ring dimension (`rounds`), up for even chunks and down for odd ones, so that an
//! NPU's halves go round both ways. Grown shallow, a chunk reaches each NPU of a torus by
//! as few one-way hops as there are, the busiest link breaking ties between dimensions;
//! grown balanced, it runs long chains (`torus:4x4` at K = 4, 1 GiB: 5,377 us shallow,
//! 5,713 balanced). Searches try them where a dimension is a ring.

use super::rounds::{Round, Rounds};
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Planning passes over every chunk: the first on the loads of the chunks before it, the
/// others on everyone else's.
const PASSES: usize = 2;

/// A chunk's tree link into an NPU the tree does not reach (its root, an NPU that wants
/// nothing).
const NONE: u32 = u32::MAX;

/// How each chunk's tree is grown (`SynthOptions::shape`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TreeShape {
    /// Each link the one whose busiest physical link is left least busy: every link
    /// carries its share.
    #[default]
    Balanced,
    /// The cheapest link first, then the earliest arrival, then the least busy: shallow
    /// trees that enter each group of fast links once.
    Shallow,
    /// Shallow, each chunk going only one way round every ring dimension, even chunks up
    /// and odd ones down: an NPU's halves go round both ways (rings, tori; elsewhere
    /// shallow).
    OneWay,
}

/// One chunk to plan: where it starts and its hops' times.
pub(super) struct Sprout<'a> {
    pub root: NpuId,
    /// Time of one such chunk on each link of the view.
    pub cost: &'a [Picos],
}

/// Every chunk's tree, as the link of the view into each NPU.
pub(super) struct Trees {
    npus: usize,
    /// `parent[chunk * npus + npu]`: the link the chunk comes into the NPU by, or NONE.
    parent: Vec<u32>,
    /// `below[chunk * npus + npu]`: the NPUs of the chunk's tree under `npu`, itself
    /// included.
    below: Vec<u32>,
}

/// Each NPU's subtree size in `tree` (each NPU's link in, NONE at the root and where the
/// tree does not reach): every NPU counts itself and adds its count to each ancestor.
fn subtree_sizes(view: &Topology, tree: &[u32], sizes: &mut [u32]) {
    for v in 0..tree.len() {
        let mut at = v;
        sizes[at] += 1;
        while tree[at] != NONE {
            at = view.link(tree[at] as usize).src;
            sizes[at] += 1;
        }
    }
}

impl Trees {
    /// Plans a tree over `view` for each sprout, reaching every NPU of `view` that a path
    /// from its root reaches; `physical(l)` lists the links of the topology that view link
    /// `l` holds while it carries a chunk (whose loads are balanced), among
    /// `physical_links`.
    pub(super) fn plan<'p>(
        view: &Topology,
        physical_links: usize,
        physical: impl Fn(LinkId) -> &'p [u32],
        sprouts: &[Sprout<'_>],
        seed: u64,
        shape: TreeShape,
    ) -> Trees {
        let n = view.npus();
        let rounds = match shape {
            TreeShape::OneWay => Rounds::of(view),
            TreeShape::Balanced | TreeShape::Shallow => None,
        };
        let mut planner = Planner {
            load: vec![0; physical_links],
            joined: vec![false; n],
            heap: BinaryHeap::new(),
            shape,
            rounds,
        };
        let mut parent = vec![NONE; sprouts.len() * n];
        let mut order: Vec<usize> = (0..sprouts.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        for pass in 0..PASSES {
            for &c in &order {
                let tree = &mut parent[c * n..(c + 1) * n];
                let cost = sprouts[c].cost;
                if pass > 0 {
                    planner.load(view, tree, cost, &physical, false);
                }
                let way = if c % 2 == 0 { Round::Up } else { Round::Down };
                planner.grow(view, (sprouts[c].root, way), cost, &physical, tree);
                planner.load(view, tree, cost, &physical, true);
            }
        }
        let mut below = vec![0u32; parent.len()];
        for c in 0..sprouts.len() {
            let (tree, sizes) = (&parent[c * n..(c + 1) * n], &mut below[c * n..(c + 1) * n]);
            subtree_sizes(view, tree, sizes);
        }
        Trees {
            npus: n,
            parent,
            below,
        }
    }

    /// How many NPUs `chunk` reaches through `npu` in its tree, `npu` itself included: the
    /// more wait on a transfer into `npu`, the sooner it should go.
    pub(super) fn below(&self, chunk: usize, npu: NpuId) -> u32 {
        self.below[chunk * self.npus + npu]
    }

    /// The link `chunk` comes into `npu` by, where its tree reaches `npu`.
    pub(super) fn parent(&self, chunk: usize, npu: NpuId) -> Option<LinkId> {
        match self.parent[chunk * self.npus + npu] {
            NONE => None,
            l => Some(l as LinkId),
        }
    }
}

/// Loads and the scratch of one tree at a time.
struct Planner {
    /// Per physical link, the time the trees so far keep it busy.
    load: Vec<Picos>,
    /// Per NPU: whether it is in the tree being grown.
    joined: Vec<bool>,
    /// Candidate links out of the tree, by the shape's key: (the busiest of its links'
    /// loads with the hop, arrival time, 0, link) balanced, (the hop, arrival time, the
    /// busiest load, link) shallow and one-way.
    heap: BinaryHeap<Reverse<(Picos, Picos, Picos, LinkId)>>,
    shape: TreeShape,
    /// With one-way trees, which way round its ring each link goes.
    rounds: Option<Rounds>,
}

impl Planner {
    /// Adds (or takes away) the tree's hops to the loads of the links they hold.
    fn load<'p>(
        &mut self,
        view: &Topology,
        tree: &[u32],
        cost: &[Picos],
        physical: &impl Fn(LinkId) -> &'p [u32],
        add: bool,
    ) {
        for &l in tree.iter().filter(|&&l| l != NONE) {
            let time = cost[l as usize];
            debug_assert!((l as usize) < view.links().len());
            for &p in physical(l as usize) {
                let load = &mut self.load[p as usize];
                *load = if add {
                    load.saturating_add(time)
                } else {
                    load.saturating_sub(time)
                };
            }
        }
    }

    /// A tree from `root` grown one link at a time (Prim's rule), each time the link from
    /// an NPU in the tree to one outside whose busiest physical link, with the hop added,
    /// is least busy (ties to the one arriving first): a chunk enters each group of NPUs
    /// that fast links join once, over the least loaded slow link, where a shortest-path
    /// tree would bring it to each NPU its own cheapest way (several times over slow
    /// links into one group), and the links end equally busy in time whatever their
    /// speeds (a sum of squared loads would leave a link four times slower four times
    /// less busy). Shallow ([`TreeShape::Shallow`]): the cheapest link, ties to the one
    /// arriving first, then to the least busy. One-way ([`TreeShape::OneWay`]): shallow,
    /// over the links that go `way` round their rings or along no ring. Written into
    /// `tree` as each NPU's link in.
    fn grow<'p>(
        &mut self,
        view: &Topology,
        (root, way): (NpuId, Round),
        cost: &[Picos],
        physical: &impl Fn(LinkId) -> &'p [u32],
        tree: &mut [u32],
    ) {
        tree.fill(NONE);
        self.joined.fill(false);
        self.heap.clear();
        let join = |planner: &mut Planner, u: NpuId, at: Picos| {
            planner.joined[u] = true;
            for l in view.out_links(u) {
                let v = view.link(l).dst;
                let wrong_way = planner.rounds.as_ref().is_some_and(|r| !r.allows(l, way));
                if planner.joined[v] || wrong_way {
                    continue;
                }
                let hop = cost[l];
                let busiest = physical(l)
                    .iter()
                    .map(|&p| planner.load[p as usize].saturating_add(hop))
                    .max()
                    .unwrap_or(hop);
                let arrival = at.saturating_add(hop);
                planner.heap.push(Reverse(match planner.shape {
                    TreeShape::Balanced => (busiest, arrival, 0, l),
                    TreeShape::Shallow | TreeShape::OneWay => (hop, arrival, busiest, l),
                }));
            }
        };
        join(self, root, 0);
        while let Some(Reverse((_, at, _, l))) = self.heap.pop() {
            let v = view.link(l).dst;
            if self.joined[v] {
                continue;
            }
            tree[v] = l as u32;
            join(self, v, at);
        }
        tree[root] = NONE;
    }
}
