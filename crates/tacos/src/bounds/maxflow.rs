//! Maximum flow by Dinic's algorithm, for the cut bounds.
//!
//! The All-Gather cut's network has a super source with an edge to every NPU, each carrying
//! one NPU's small share of what the sink's links take in, so every augmenting path moves
//! one share and there are as many paths as NPUs. A search of the whole network per path
//! (Edmonds-Karp) is quadratic in the NPUs: 7.9 minutes for a 200x200 mesh's two sinks.
//! Dinic's algorithm finds all the shortest paths of one length in a single sweep of the
//! level graph, keeping per vertex the next edge to try, so that no edge is looked at twice
//! in a sweep except along the paths found.

use std::collections::VecDeque;

/// A network in residual form: edge `e` and its reverse `e ^ 1` are stored side by side,
/// and each vertex lists the edges leaving it in both directions.
pub(super) struct FlowNetwork {
    /// Vertex `v`'s edges are `adjacent[first[v]..first[v + 1]]`.
    first: Vec<usize>,
    adjacent: Vec<usize>,
    /// The vertex edge `e` leads to; its tail is `head[e ^ 1]`.
    head: Vec<usize>,
    /// What edge `e` can still carry.
    residual: Vec<i64>,
}

impl FlowNetwork {
    /// A network on `vertices` vertices with the given `(from, to, capacity)` edges;
    /// parallel edges add up. Endpoints must be below `vertices`.
    pub(super) fn new(
        vertices: usize,
        edges: impl IntoIterator<Item = (usize, usize, i64)>,
    ) -> FlowNetwork {
        let mut head = Vec::new();
        let mut residual = Vec::new();
        for (from, to, capacity) in edges {
            head.extend([to, from]);
            residual.extend([capacity.max(0), 0]);
        }
        // The edges by tail (a stable sort: each vertex's in the order given).
        let mut adjacent: Vec<usize> = (0..head.len()).collect();
        adjacent.sort_by_key(|&e| head[e ^ 1]);
        let first = (0..=vertices)
            .map(|v| adjacent.partition_point(|&e| head[e ^ 1] < v))
            .collect();
        FlowNetwork {
            first,
            adjacent,
            head,
            residual,
        }
    }

    fn vertices(&self) -> usize {
        self.first.len() - 1
    }

    /// Pushes as much flow as the network carries from `source` to `sink`, and returns it.
    pub(super) fn max_flow(&mut self, source: usize, sink: usize) -> i64 {
        if source == sink {
            return 0;
        }
        let mut level = vec![u32::MAX; self.vertices()];
        let mut next_edge = vec![0; self.vertices()];
        let mut path = Vec::new();
        let mut total = 0;
        while self.assign_levels(source, sink, &mut level) {
            next_edge.copy_from_slice(&self.first[..self.vertices()]);
            total += self.blocking_flow(source, sink, &level, &mut next_edge, &mut path);
        }
        total
    }

    /// Each vertex's distance from `source` over edges that can still carry flow; whether
    /// `sink` is reached.
    fn assign_levels(&self, source: usize, sink: usize, level: &mut [u32]) -> bool {
        level.fill(u32::MAX);
        level[source] = 0;
        let mut queue = VecDeque::from([source]);
        while let Some(v) = queue.pop_front() {
            if v == sink {
                // Vertices further away than the sink lie on no shortest path.
                break;
            }
            for &e in &self.adjacent[self.first[v]..self.first[v + 1]] {
                let w = self.head[e];
                if self.residual[e] > 0 && level[w] == u32::MAX {
                    level[w] = level[v] + 1;
                    queue.push_back(w);
                }
            }
        }
        level[sink] != u32::MAX
    }

    /// Saturates every shortest path of the level graph, walking forward from `source`
    /// along each vertex's next usable edge: at the sink the path's bottleneck is pushed
    /// and the walk resumes from the first edge it filled; at a dead end it steps back and
    /// the edge it came by is skipped from then on.
    fn blocking_flow(
        &mut self,
        source: usize,
        sink: usize,
        level: &[u32],
        next_edge: &mut [usize],
        path: &mut Vec<usize>,
    ) -> i64 {
        path.clear();
        let mut pushed = 0;
        let mut v = source;
        loop {
            if v == sink {
                let bottleneck = path.iter().map(|&e| self.residual[e]).min().unwrap_or(0);
                for &e in path.iter() {
                    self.residual[e] -= bottleneck;
                    self.residual[e ^ 1] += bottleneck;
                }
                pushed += bottleneck;
                let filled = path
                    .iter()
                    .position(|&e| self.residual[e] == 0)
                    .unwrap_or(0);
                path.truncate(filled);
                v = path.last().map_or(source, |&e| self.head[e]);
                continue;
            }
            let end = self.first[v + 1];
            while next_edge[v] < end {
                let e = self.adjacent[next_edge[v]];
                if self.residual[e] > 0 && level[self.head[e]] == level[v] + 1 {
                    break;
                }
                next_edge[v] += 1;
            }
            if next_edge[v] < end {
                let e = self.adjacent[next_edge[v]];
                path.push(e);
                v = self.head[e];
            } else {
                let Some(e) = path.pop() else {
                    return pushed;
                };
                v = self.head[e ^ 1];
                next_edge[v] += 1;
            }
        }
    }

    /// The vertices `source` still reaches over edges that can carry flow: after
    /// `max_flow`, the source side of a minimum cut (the smallest one).
    pub(super) fn source_side(&self, source: usize) -> Vec<bool> {
        let mut in_s = vec![false; self.vertices()];
        in_s[source] = true;
        let mut queue = VecDeque::from([source]);
        while let Some(v) = queue.pop_front() {
            for &e in &self.adjacent[self.first[v]..self.first[v + 1]] {
                let w = self.head[e];
                if self.residual[e] > 0 && !in_s[w] {
                    in_s[w] = true;
                    queue.push_back(w);
                }
            }
        }
        in_s
    }
}

#[cfg(test)]
mod tests {
    use super::FlowNetwork;

    /// CLRS's worked example (figure 26.6): the maximum flow is 23, and the minimum cut
    /// leaves {s, v1, v2, v4} on the source side (capacity 12 + 7 + 4).
    #[test]
    fn the_textbook_network_carries_23() {
        let edges = [
            (0, 1, 16),
            (0, 2, 13),
            (1, 3, 12),
            (2, 1, 4),
            (2, 4, 14),
            (3, 2, 9),
            (3, 5, 20),
            (4, 3, 7),
            (4, 5, 4),
        ];
        let mut net = FlowNetwork::new(6, edges);
        assert_eq!(net.max_flow(0, 5), 23);
        assert_eq!(
            net.source_side(0),
            [true, true, true, false, true, false].to_vec()
        );
    }

    /// A source with no way to the sink carries nothing, and a zero-capacity edge is no
    /// way; parallel edges add up.
    #[test]
    fn unreachable_sinks_and_parallel_edges() {
        let mut net = FlowNetwork::new(3, [(0, 1, 5), (1, 2, 0)]);
        assert_eq!(net.max_flow(0, 2), 0);
        assert_eq!(net.source_side(0), [true, true, false].to_vec());
        let mut net = FlowNetwork::new(2, [(0, 1, 5), (0, 1, 7)]);
        assert_eq!(net.max_flow(0, 1), 12);
    }

    /// On random networks, the flow and the cut agree with a second implementation,
    /// Edmonds-Karp (the `pathfinding` crate), which sums no parallel edges, so each pair
    /// gets one edge here.
    mod against_edmonds_karp {
        use super::FlowNetwork;
        use pathfinding::directed::edmonds_karp::{EdmondsKarp, SparseCapacity};
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        proptest! {
            #[test]
            fn random_networks(
                vertices in 2usize..12,
                raw in proptest::collection::vec((0usize..12, 0usize..12, 0i64..20), 0..40),
            ) {
                let edges: BTreeMap<(usize, usize), i64> = raw
                    .into_iter()
                    .map(|(a, b, c)| ((a % vertices, b % vertices), c))
                    .filter(|((a, b), _)| a != b)
                    .collect();
                let (source, sink) = (0, vertices - 1);
                let mut ours = FlowNetwork::new(vertices, edges.iter().map(|(&(a, b), &c)| (a, b, c)));
                let mut theirs = SparseCapacity::<i64>::new(vertices, source, sink);
                for (&(a, b), &c) in &edges {
                    theirs.set_capacity(a, b, c);
                }
                let (_, flow, cut) = theirs.augment();
                prop_assert_eq!(ours.max_flow(source, sink), flow);
                let in_s = ours.source_side(source);
                let crossing: i64 = edges
                    .iter()
                    .filter(|(&(a, b), _)| in_s[a] && !in_s[b])
                    .map(|(_, &c)| c)
                    .sum();
                prop_assert_eq!(crossing, flow);
                prop_assert!(!in_s[sink]);
                let their_cut: i64 = cut.iter().map(|(_, c)| c).sum();
                prop_assert_eq!(their_cut, flow);
            }
        }
    }
}
