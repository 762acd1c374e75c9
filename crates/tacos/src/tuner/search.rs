//! What NCCL's topology search finds on a machine: per graph (ring, tree, NVLS, CollNet)
//! the channels it lays and the bandwidth each channel claims, within a node
//! (`bw_intra`) and to the network (`bw_inter`), in NCCL's own units. NCCL's tuning model
//! (`nccl_tuning`) prices its algorithms from these figures alone.
//!
//! The search here follows NCCL's in outline, not step by step: from the fastest speed of
//! NCCL's speed ladder for the GPU generation that a path can carry, it counts the
//! channels the links hold at that speed (a channel claims its speed on every link it
//! crosses), keeps the speed whose channels carry the most, stops early at a "perfect"
//! graph (every channel it may lay, or the GPU's whole bandwidth), halves per-channel
//! speed while doubling channels where NCCL duplicates them, and raises a ring's speed
//! again where the doubled channels still fit. Links are NCCL's figures for them: an
//! NVLink is 20 GB/s (20.6 on Hopper, 40 on Blackwell), PCIe 12, 24 or 48 GB/s by
//! generation, a NIC its line rate.

use crate::gpu::GpuArch;

/// How a node's GPUs reach each other.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeFabric {
    /// Every GPU has one port into an NVSwitch, of `nvlinks` NVLinks.
    NvSwitch { nvlinks: f64 },
    /// NVLinks between pairs of GPUs: `links[a][b]` NVLinks from GPU a to GPU b.
    NvLinkMesh { links: Vec<Vec<u8>> },
    /// No NVLink: every path crosses PCIe.
    Pcie,
}

/// A machine as NCCL's search sees it: identical nodes of GPUs and NICs.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub arch: GpuArch,
    pub nodes: usize,
    /// GPUs of each node in the communicator.
    pub gpus_per_node: usize,
    pub fabric: NodeFabric,
    /// NICs of each node the communicator's GPUs use: their own, which GPUs may share or
    /// have several of (NCCL lays a channel's way in and out of a node over one NIC, and
    /// leaves NICs of GPUs outside the communicator unused).
    pub nics: usize,
    /// Line rate of one NIC, GB/s per direction.
    pub nic_gbps: f64,
    /// GB/s per direction a node's GPUs move into the network together at line rate: the
    /// sum of their shares of the NICs, each at most what its PCIe link carries (the
    /// executor's view; NCCL's search counts NICs).
    pub network_gbps: f64,
    /// The NVSwitch reduces and multicasts (NVLink SHARP), and NCCL may use it.
    pub nvls: bool,
    /// The network switches reduce (SHARP, NCCL's CollNet plugin).
    pub sharp: bool,
}

/// One graph NCCL's search found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Graph {
    /// Channels laid (none: NCCL found no graph and cannot run the algorithm).
    pub channels: u32,
    /// GB/s each channel claims inside a node and to the network.
    pub bw_intra: f64,
    pub bw_inter: f64,
    /// Whether the node's paths are NVLink (else PCIe): NCCL's hardware latencies differ.
    pub nvlink: bool,
    /// Whether every channel takes the same path through the node (NVSwitch nodes).
    pub same_channels: bool,
}

impl Graph {
    const NONE: Graph = Graph {
        channels: 0,
        bw_intra: 0.0,
        bw_inter: 0.0,
        nvlink: false,
        same_channels: false,
    };
}

/// The graphs NCCL's algorithms run on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Graphs {
    pub ring: Graph,
    pub tree: Graph,
    pub nvls: Graph,
    pub collnet: Graph,
}

/// NCCL's speed ladders (GB/s a channel), fastest first: within a node, and with a network.
const SPEEDS_INTRA: [f64; 13] = [
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];
const SPEEDS_INTER: [f64; 19] = [
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
    0.24, 0.12,
];
const SPEEDS_INTRA_SM90: [f64; 11] = [
    60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
];
const SPEEDS_INTER_SM90: [f64; 17] = [
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
    0.12,
];
const SPEEDS_INTRA_SM100: [f64; 10] = [90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0];

/// Most channels a ring or tree graph holds (NCCL's MAXCHANNELS / 2).
const GRAPH_CHANNELS_MAX: u32 = 16;

/// Channels of `speed` GB/s a link of `capacity` GB/s holds.
fn fits(capacity: f64, speed: f64) -> u32 {
    (capacity / speed + 1e-9).floor().max(0.0) as u32
}

/// Which graph is searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    Ring,
    Tree,
    Nvls,
}

impl Machine {
    /// NCCL's figure for one NVLink of this generation, GB/s.
    fn nvlink_gbps(&self) -> f64 {
        match self.arch {
            GpuArch::Volta | GpuArch::Ampere => 20.0,
            GpuArch::Hopper => 20.6,
            GpuArch::Blackwell => 40.0,
        }
    }

    /// NCCL's figure for a GPU's PCIe link (x16 of the generation's PCIe), GB/s.
    fn pci_gbps(&self) -> f64 {
        match self.arch {
            GpuArch::Volta => 12.0,
            GpuArch::Ampere => 24.0,
            GpuArch::Hopper | GpuArch::Blackwell => 48.0,
        }
    }

    fn multi_node(&self) -> bool {
        self.nodes > 1 && self.nics > 0
    }

    /// The speed ladder the search walks down.
    fn speeds(&self) -> &'static [f64] {
        match (self.arch, self.multi_node()) {
            (GpuArch::Blackwell, false) => &SPEEDS_INTRA_SM100,
            (GpuArch::Hopper, false) => &SPEEDS_INTRA_SM90,
            (GpuArch::Hopper | GpuArch::Blackwell, true) => &SPEEDS_INTER_SM90,
            (_, false) => &SPEEDS_INTRA,
            (_, true) => &SPEEDS_INTER,
        }
    }

    /// A GPU's NVLink bandwidth to the rest of its node, NCCL's units.
    fn gpu_nvlink_gbps(&self) -> f64 {
        let per_link = self.nvlink_gbps();
        match &self.fabric {
            NodeFabric::NvSwitch { nvlinks } => nvlinks * per_link,
            NodeFabric::NvLinkMesh { links } => links
                .iter()
                .map(|row| row.iter().map(|&l| f64::from(l)).sum::<f64>() * per_link)
                .fold(0.0, f64::max),
            NodeFabric::Pcie => 0.0,
        }
    }

    /// The fastest a single path can carry (NCCL's `maxBw`): to the NIC on a network,
    /// else between two GPUs.
    fn max_path_gbps(&self) -> f64 {
        if self.multi_node() {
            return self.nic_gbps.min(self.pci_gbps());
        }
        match &self.fabric {
            NodeFabric::NvSwitch { .. } => self.gpu_nvlink_gbps(),
            NodeFabric::NvLinkMesh { links } => {
                let most = links.iter().flatten().copied().max().unwrap_or(0);
                f64::from(most) * self.nvlink_gbps()
            }
            NodeFabric::Pcie => self.pci_gbps(),
        }
    }

    /// A GPU's bandwidth over all its links (NCCL's `totalBw`).
    fn total_gbps(&self) -> f64 {
        self.gpu_nvlink_gbps().max(self.pci_gbps())
    }

    /// Channels of `pattern` the links hold at `speed` GB/s a channel (at most `most`).
    fn channels_at(&self, pattern: Pattern, speed: f64, most: u32) -> u32 {
        let inter = if self.multi_node() {
            // Each channel enters and leaves a node through one NIC, and through the PCIe
            // link of the GPU it enters at (and of the one it leaves from): NICs beyond a
            // GPU's PCIe link carry nothing more.
            let per_nic = fits(self.nic_gbps.min(self.pci_gbps()), speed);
            let per_gpu = fits(self.pci_gbps(), speed);
            (self.nics as u32 * per_nic).min(self.gpus_per_node.max(1) as u32 * per_gpu)
        } else {
            most
        };
        self.intra_channels(pattern, speed, most).min(inter)
    }

    /// Channels of `pattern` the node's own links hold at `speed` (at most `most`).
    fn intra_channels(&self, pattern: Pattern, speed: f64, most: u32) -> u32 {
        let g = self.gpus_per_node.max(1);
        let held = match (&self.fabric, g) {
            (_, 1) => most,
            // A channel through the node leaves every GPU but its last (or, on one node,
            // every GPU) once over its port.
            (NodeFabric::NvSwitch { .. }, _) => {
                let share = if self.multi_node() && pattern != Pattern::Nvls {
                    (g - 1) as f64 / g as f64
                } else {
                    1.0
                };
                fits(self.gpu_nvlink_gbps() / share, speed)
            }
            (NodeFabric::NvLinkMesh { links }, _) => {
                rings_on_mesh(links, self.nvlink_gbps(), speed, most)
            }
            (NodeFabric::Pcie, _) => fits(self.pci_gbps(), speed),
        };
        held.min(most)
    }

    /// The graph of `pattern` with between `least` and `most` channels.
    fn search(&self, pattern: Pattern, least: u32, most: u32) -> Graph {
        let speeds = self.speeds();
        let nvlink = !matches!(self.fabric, NodeFabric::Pcie);
        let g = self.gpus_per_node.max(1) as f64;
        let mut total = self.total_gbps();
        if pattern != Pattern::Ring && g > 1.0 {
            total *= g / (g - 1.0);
        }
        let max_path = self.max_path_gbps();
        let start = speeds
            .iter()
            .position(|&s| s <= max_path && s * least as f64 <= total)
            .unwrap_or(speeds.len() - 1);
        // Pass 1: walk down the ladder, keeping the speed whose channels carry the most.
        let mut best: Option<(u32, f64)> = None;
        for &speed in &speeds[start..] {
            if best.is_some_and(|(_, bw)| speed / bw <= 0.49) {
                break;
            }
            let channels = self.channels_at(pattern, speed, most);
            if channels < least.max(1) {
                continue;
            }
            let better = best.map_or(true, |(c, bw)| channels as f64 * speed > c as f64 * bw);
            if better {
                best = Some((channels, speed));
            }
            if channels == most || channels as f64 * speed >= total {
                break;
            }
        }
        let Some((mut channels, mut speed)) = best else {
            return Graph::NONE;
        };
        // NCCL doubles fast channels (not NVLS ones), halving what each claims.
        let doubles = pattern != Pattern::Nvls
            && speed >= 25.0
            && !(self.arch != GpuArch::Volta
                && self.arch != GpuArch::Ampere
                && speed < 50.0
                && channels > 4);
        if doubles {
            let doubled = (2 * channels).min(most);
            speed /= f64::from(doubled.div_ceil(channels));
            channels = doubled;
        }
        // Pass 2: a ring takes a faster speed where its channels still fit; a tree across
        // nodes a faster speed within them (up to twice its network speed).
        let mut intra = speed;
        let faster = |from: f64, limit: f64, held: &dyn Fn(f64) -> u32| {
            let mut at = from;
            for &s in speeds.iter().rev().filter(|&&s| s > from && s < limit) {
                if held(s) < channels {
                    break;
                }
                at = s;
            }
            at
        };
        match pattern {
            Pattern::Ring => {
                speed = faster(speed, f64::INFINITY, &|s| {
                    self.channels_at(pattern, s, most)
                });
                intra = speed;
            }
            Pattern::Tree if self.multi_node() => {
                intra = faster(speed, 2.0 * speed, &|s| {
                    self.intra_channels(pattern, s, most)
                });
            }
            _ => {}
        }
        Graph {
            channels,
            bw_intra: intra,
            bw_inter: speed,
            nvlink,
            same_channels: matches!(self.fabric, NodeFabric::NvSwitch { .. }),
        }
    }

    /// Every graph NCCL's algorithms need.
    ///
    /// ```
    /// use tacos::tuner::search::{Machine, NodeFabric};
    /// use tacos::gpu::GpuArch;
    /// // One A100 node: 12 NVLinks a GPU into the NVSwitch, which does not reduce.
    /// let machine = Machine {
    ///     arch: GpuArch::Ampere,
    ///     nodes: 1,
    ///     gpus_per_node: 8,
    ///     fabric: NodeFabric::NvSwitch { nvlinks: 12.0 },
    ///     nics: 0,
    ///     nic_gbps: 0.0,
    ///     network_gbps: 0.0,
    ///     nvls: false,
    ///     sharp: false,
    /// };
    /// let graphs = machine.graphs();
    /// assert_eq!((graphs.ring.channels, graphs.ring.bw_intra), (12, 20.0));
    /// assert_eq!(graphs.nvls.channels, 0);
    /// ```
    pub fn graphs(&self) -> Graphs {
        let ring = self.search(Pattern::Ring, 1, GRAPH_CHANNELS_MAX);
        let tree = if ring.channels == 0 {
            Graph::NONE
        } else {
            self.search(Pattern::Tree, ring.channels, ring.channels)
        };
        let nvls = if self.nvls && matches!(self.fabric, NodeFabric::NvSwitch { .. }) {
            let g = self.gpus_per_node as u32;
            let most = if self.multi_node() {
                g.min(self.nics as u32)
            } else {
                g
            };
            let least = if self.multi_node() { 1 } else { most };
            self.search(Pattern::Nvls, least, most)
        } else {
            Graph::NONE
        };
        let collnet = if self.sharp && self.multi_node() {
            Graph {
                channels: self.nics.min(self.gpus_per_node) as u32,
                ..ring
            }
        } else {
            Graph::NONE
        };
        Graphs {
            ring,
            tree,
            nvls,
            collnet,
        }
    }
}

/// Directed rings through every GPU of a node of point-to-point NVLinks (`links[a][b]`
/// NVLinks of `per_link` GB/s), each claiming `speed` on every link it takes: the most
/// that fit together (at most `most`). Every ring through the node is listed (nodes of up
/// to [`MESH_GPUS_MAX`] GPUs; larger ones are given one ring), then a branch-and-bound
/// picks the largest set the links hold, within [`MESH_SEARCH_STEPS`] steps.
pub(crate) fn rings_on_mesh(links: &[Vec<u8>], per_link: f64, speed: f64, most: u32) -> u32 {
    let n = links.len();
    if n < 2 {
        return most;
    }
    if n > MESH_GPUS_MAX {
        return most.min(1);
    }
    // Rings a link holds at this speed.
    let room: Vec<Vec<u32>> = links
        .iter()
        .map(|row| {
            row.iter()
                .map(|&l| (f64::from(l) * per_link / speed + 1e-9).floor() as u32)
                .collect()
        })
        .collect();
    let mut rings = Vec::new();
    let mut path = vec![0usize];
    let mut used = vec![false; n];
    used[0] = true;
    list_rings(&room, &mut path, &mut used, &mut rings);
    let mut pick = Pick {
        rings: &rings,
        room,
        best: 0,
        most,
        steps: 0,
    };
    pick.extend(0, 0);
    pick.best
}

/// The most GPUs of a point-to-point NVLink node whose rings are searched.
const MESH_GPUS_MAX: usize = 8;
/// Steps the search for the largest set of rings may take.
const MESH_SEARCH_STEPS: usize = 200_000;

/// Appends every ring through all GPUs that extends `path` (from GPU 0) over links with
/// room, as its list of links.
fn list_rings(
    room: &[Vec<u32>],
    path: &mut Vec<usize>,
    used: &mut [bool],
    rings: &mut Vec<Vec<(usize, usize)>>,
) {
    let n = room.len();
    let at = *path.last().expect("a path starts at GPU 0");
    if path.len() == n {
        if room[at][0] > 0 {
            let mut ring: Vec<(usize, usize)> = path.windows(2).map(|w| (w[0], w[1])).collect();
            ring.push((at, 0));
            rings.push(ring);
        }
        return;
    }
    for b in 0..n {
        if !used[b] && room[at][b] > 0 {
            used[b] = true;
            path.push(b);
            list_rings(room, path, used, rings);
            path.pop();
            used[b] = false;
        }
    }
}

/// A branch-and-bound over sets of rings (each may be taken several times).
struct Pick<'a> {
    rings: &'a [Vec<(usize, usize)>],
    /// Rings each link still holds.
    room: Vec<Vec<u32>>,
    best: u32,
    most: u32,
    steps: usize,
}

impl Pick<'_> {
    fn extend(&mut self, from: usize, taken: u32) {
        self.best = self.best.max(taken);
        self.steps += 1;
        if self.best >= self.most || self.steps > MESH_SEARCH_STEPS {
            return;
        }
        // No GPU sends more rings than its links have room for.
        let bound = self
            .room
            .iter()
            .map(|row| row.iter().sum::<u32>())
            .min()
            .unwrap_or(0);
        if taken + bound <= self.best {
            return;
        }
        for i in from..self.rings.len() {
            let ring = &self.rings[i];
            if ring.iter().all(|&(a, b)| self.room[a][b] > 0) {
                for &(a, b) in ring {
                    self.room[a][b] -= 1;
                }
                self.extend(i, taken + 1);
                for &(a, b) in ring {
                    self.room[a][b] += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvswitch(arch: GpuArch, nvlinks: f64, nodes: usize, nic_gbps: f64) -> Machine {
        Machine {
            arch,
            nodes,
            gpus_per_node: 8,
            fabric: NodeFabric::NvSwitch { nvlinks },
            nics: if nodes > 1 { 8 } else { 0 },
            nic_gbps,
            network_gbps: if nodes > 1 { 8.0 * nic_gbps } else { 0.0 },
            nvls: arch == GpuArch::Hopper,
            sharp: false,
        }
    }

    /// NCCL 2.19's own graph dump on one H100 NVSwitch node (NVIDIA/nccl#1197): ring and
    /// tree 12 channels of 30 GB/s, NVLS 8 channels of 40 within the node (a 2.19 NVLink
    /// was 20.0 GB/s, 360 a GPU, against 2.26's 20.6; the ladder gives the same graphs).
    #[test]
    fn one_h100_node_gives_nccls_published_graphs() {
        let g = nvswitch(GpuArch::Hopper, 18.0, 1, 0.0).graphs();
        assert_eq!((g.ring.channels, g.ring.bw_intra), (12, 30.0));
        assert_eq!((g.tree.channels, g.tree.bw_intra), (12, 30.0));
        assert_eq!((g.nvls.channels, g.nvls.bw_intra), (8, 40.0));
        assert_eq!(g.collnet.channels, 0);
    }

    /// On one A100 node 6 channels of 40 GB/s fill the 240 GB/s of 12 NVLinks; NCCL
    /// doubles them to 12 of 20.
    #[test]
    fn one_a100_node_doubles_its_channels() {
        let g = nvswitch(GpuArch::Ampere, 12.0, 1, 0.0).graphs();
        assert_eq!((g.ring.channels, g.ring.bw_intra), (12, 20.0));
        assert_eq!(g.nvls.channels, 0, "A100's NVSwitch does not reduce");
    }

    /// Across nodes a channel leaves through a NIC: 8 NDR NICs behind PCIe Gen5 (48 GB/s)
    /// hold 8 channels of 48 GB/s, which fill the GPUs' NVLinks, so nothing is doubled.
    #[test]
    fn h100_nodes_lay_a_channel_per_nic() {
        let g = nvswitch(GpuArch::Hopper, 18.0, 2, 50.0).graphs();
        assert_eq!((g.ring.channels, g.ring.bw_inter), (8, 48.0));
        assert!(g.nvls.channels >= 2);
    }

    /// DGX-1's hybrid cube-mesh: every GPU has 6 NVLinks (120 GB/s in NCCL's units), and
    /// its links split into 6 directed rings of one NVLink each: 120 GB/s together. (Two
    /// rings over the doubled links alone, 40 GB/s each, carry less.)
    #[test]
    fn dgx1_holds_six_rings() {
        const DGX1: [[u8; 8]; 8] = [
            [0, 1, 1, 2, 2, 0, 0, 0],
            [1, 0, 2, 1, 0, 2, 0, 0],
            [1, 2, 0, 2, 0, 0, 1, 0],
            [2, 1, 2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 1, 1, 2],
            [0, 2, 0, 0, 1, 0, 2, 1],
            [0, 0, 1, 0, 1, 2, 0, 2],
            [0, 0, 0, 1, 2, 1, 2, 0],
        ];
        let m = Machine {
            arch: GpuArch::Volta,
            nodes: 1,
            gpus_per_node: 8,
            fabric: NodeFabric::NvLinkMesh {
                links: DGX1.iter().map(|r| r.to_vec()).collect(),
            },
            nics: 0,
            nic_gbps: 0.0,
            network_gbps: 0.0,
            nvls: false,
            sharp: false,
        };
        let g = m.graphs();
        assert_eq!(g.ring.channels as f64 * g.ring.bw_intra, 120.0, "{g:?}");
    }
}
