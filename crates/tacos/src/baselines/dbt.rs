//! Double binary tree (NCCL's): two balanced binary trees over the same NPUs, the second
//! shifted by one position so that most NPUs that are inner nodes in one are leaves in
//! the other; each tree carries half of the chunks. All-Reduce reduces up each tree and
//! broadcasts back down; Broadcast and Reduce hang both trees under the root.

use super::{rechunked, root_rank, span, Plan};
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::schedule::Op;

pub(super) fn plan(spec: &CollectiveSpec) -> (Plan, CollectiveSpec) {
    let k = spec.chunks_per_npu;
    let spec = rechunked(spec, 2 * k);
    let p = spec.npus.len();
    let mut plan = Plan::default();
    if p < 2 {
        return (plan, spec);
    }
    let root = root_rank(&spec);
    let members: Vec<usize> = match spec.kind {
        CollectiveKind::AllReduce => (0..p).collect(),
        _ => (0..p).filter(|&r| r != root).collect(),
    };
    let m = members.len();
    for tree in 0..2 {
        // Tree 1 puts rank members[(i + 1) % m] where tree 0 puts members[i].
        let shape = Tree::balanced(m);
        let rank = |i: usize| members[(i + tree) % m];
        let npu = |i: usize| spec.npus[rank(i)];
        let height = shape.height[shape.root];
        match spec.kind {
            CollectiveKind::AllReduce => {
                // Every rank's tree-th half of its pieces, reduced up then sent down.
                let chunks: Vec<usize> =
                    (0..p).flat_map(|r| span(r * 2 * k + tree * k, k)).collect();
                for i in 0..m {
                    if let Some(parent) = shape.parent[i] {
                        plan.send(shape.height[i], &chunks, npu(i), npu(parent), Op::Reduce);
                        plan.send(
                            height + shape.depth[parent],
                            &chunks,
                            npu(parent),
                            npu(i),
                            Op::Copy,
                        );
                    }
                }
            }
            CollectiveKind::Broadcast | CollectiveKind::Reduce => {
                let chunks = span(tree * k, k);
                let top = spec.npus[root];
                let broadcast = spec.kind == CollectiveKind::Broadcast;
                for i in 0..m {
                    let (parent, depth) = match shape.parent[i] {
                        Some(parent) => (npu(parent), shape.depth[parent] + 1),
                        None => (top, 0),
                    };
                    if broadcast {
                        plan.send(depth, &chunks, parent, npu(i), Op::Copy);
                    } else {
                        plan.send(shape.height[i], &chunks, npu(i), parent, Op::Reduce);
                    }
                }
            }
            other => unreachable!("dbt does not define {other}"),
        }
    }
    (plan, spec)
}

/// A balanced binary tree over positions 0..m in in-order layout: the middle of a range
/// is the root of its subtree.
pub(crate) struct Tree {
    pub root: usize,
    pub parent: Vec<Option<usize>>,
    pub depth: Vec<usize>,
    /// Longest way down to a leaf (leaves: 0).
    pub height: Vec<usize>,
}

impl Tree {
    pub(crate) fn balanced(m: usize) -> Tree {
        let mut tree = Tree {
            root: m / 2,
            parent: vec![None; m],
            depth: vec![0; m],
            height: vec![0; m],
        };
        tree.build(0, m, None, 0);
        tree
    }

    /// Builds the subtree of positions lo..hi under `parent`; returns its root's height.
    fn build(
        &mut self,
        lo: usize,
        hi: usize,
        parent: Option<usize>,
        depth: usize,
    ) -> Option<usize> {
        if lo >= hi {
            return None;
        }
        let mid = (lo + hi) / 2;
        self.parent[mid] = parent;
        self.depth[mid] = depth;
        let left = self.build(lo, mid, Some(mid), depth + 1);
        let right = self.build(mid + 1, hi, Some(mid), depth + 1);
        let height = left.max(right).map_or(0, |h| h + 1);
        self.height[mid] = height;
        Some(height)
    }
}
