//! The simulator's router: routes for messages between non-neighbours, through switches
//! only where such a route exists (`Topology::route_tree`), else on shortest paths by
//! alpha-beta cost (`topology::shortest_paths`), each tree kept once per source and size
//! within the simulation's memory room. A route through switches longer than
//! `MAX_ROUTE_LINKS` is an error naming the pair, as everywhere else. The NPUs a routed
//! message stops at (`Router::stops`) are what a baseline relayed hop by hop sends through
//! (`baselines::relay`), so a relayed baseline takes exactly the simulator's paths.

use crate::budget::Allowance;
use crate::error::{Error, Npus, Result};
use crate::topology::{shortest_paths, LinkId, NpuId, RouteTree, Topology};
use std::collections::HashMap;

/// Shortest-path trees computed per (source, message size) on demand and kept.
pub(crate) struct Router<'a> {
    topo: &'a Topology,
    /// (src, bytes bits) -> the link that reaches each NPU on a shortest path.
    trees: HashMap<(NpuId, u64), Vec<Option<LinkId>>>,
    /// src -> routes through switches only, preferred where they exist.
    switched: HashMap<NpuId, RouteTree>,
    /// The last route through switches found, kept to route the next without allocating.
    route: Vec<LinkId>,
    /// The last path `stops` walked, kept likewise.
    path: Vec<u32>,
    /// The memory the trees (and the caller's routes) may take.
    room: Allowance,
}

impl<'a> Router<'a> {
    /// A router whose trees take their memory from `room`.
    pub fn new(topo: &'a Topology, room: Allowance) -> Router<'a> {
        Router {
            topo,
            trees: HashMap::new(),
            switched: HashMap::new(),
            route: Vec::new(),
            path: Vec::new(),
            room,
        }
    }

    /// Takes `bytes` more from the router's room (what a caller keeps per route).
    pub fn take(&mut self, bytes: u64, doing: impl FnOnce() -> String) -> Result<()> {
        self.room.take(bytes, doing)
    }

    /// The NPUs a message of `bytes` from `src` to `dst` is stored at and forwarded from on
    /// its route, in order, then `dst` (the engine's hops: a link, or a run of links through
    /// switches), written into `stops` (cleared first): `[dst]` where a link or switches
    /// join the two.
    pub fn stops(
        &mut self,
        src: NpuId,
        dst: NpuId,
        bytes: f64,
        stops: &mut Vec<NpuId>,
    ) -> Result<()> {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let routed = self.route(src, dst, bytes, &mut path);
        let topo = self.topo;
        stops.clear();
        stops.extend(
            path.iter()
                .map(|&l| topo.link(l as LinkId).dst)
                .filter(|&v| !topo.is_switch(v)),
        );
        self.path = path;
        routed
    }

    /// Appends the links from `src` to `dst` to `path`, in order.
    pub fn route(&mut self, src: NpuId, dst: NpuId, bytes: f64, path: &mut Vec<u32>) -> Result<()> {
        if let Some(l) = self.topo.link_between(src, dst) {
            path.push(l as u32);
            return Ok(());
        }
        let topo = self.topo;
        let doing = || format!("routing messages on {} from NPU {src}", topo.name());
        if topo.has_switches() {
            if !self.switched.contains_key(&src) {
                let tree = topo.route_tree(src);
                // The tree, its slot and the map's slack.
                self.room.take(tree.held_bytes() as u64 + 64, doing)?;
                self.switched.insert(src, tree);
            }
            match self.switched[&src].try_route_into(topo, dst, &mut self.route) {
                Ok(()) => {
                    path.extend(self.route.iter().map(|&l| l as u32));
                    return Ok(());
                }
                // A route through switches past the limit is a mistake in the fabric, not
                // a reason to relay through the switches store-and-forward.
                Err(Some(links)) => return Err(topo.route_too_long(src, dst, links)),
                Err(None) => {}
            }
        }
        if !self.trees.contains_key(&(src, bytes.to_bits())) {
            // The search's distances (16 a vertex) and the tree it leaves (16 a vertex).
            self.room.take(topo.vertices() as u64 * 32, doing)?;
        }
        let tree = self
            .trees
            .entry((src, bytes.to_bits()))
            .or_insert_with(|| shortest_paths(topo, src, |l| l.transfer_ps(bytes)).via);
        let first = path.len();
        let mut at = dst;
        while at != src {
            let Some(l) = tree[at] else {
                return Err(Error::Disconnected {
                    from: Npus::Npu(src),
                    to: Npus::Npu(dst),
                });
            };
            path.push(l as u32);
            at = topo.link(l).src;
        }
        path[first..].reverse();
        Ok(())
    }
}
