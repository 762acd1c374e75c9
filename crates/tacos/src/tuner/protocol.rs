//! What each of NCCL's (algorithm, protocol) pairs costs in NCCL's own model beyond the
//! links it uses: a start-up latency, a latency per step, the share of link bandwidth that
//! carries data, and how fast one channel (one thread block) can move data.

use super::constants::{NcclConstants, HW_NET, HW_NVLINK};
use crate::gpu::{Algorithm, GpuArch, Protocol};

/// What an (algorithm, protocol) pair costs on top of the topology's links.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtocolCost {
    /// Paid once per collective (NCCL's baseLatencies).
    pub base_us: f64,
    /// Paid per step across a link inside an NVLink domain and across the network (NCCL's
    /// hwLatencies for NVLink and NET).
    pub step_us: [f64; 2],
    /// Share of a link's bandwidth that carries data.
    pub efficiency: f64,
    /// Most one channel moves per rank, GB/s; `None` where NCCL's model has no such limit.
    pub channel_gbps: Option<f64>,
    /// Most all channels together move per rank, GB/s (LL's limit); `None`: no limit.
    pub total_gbps: Option<f64>,
}

/// Index of the node-count column in NCCL's bandwidth tables: 1 node, 2 nodes, more.
fn nodes_column(nodes: usize) -> usize {
    nodes.clamp(1, 3) - 1
}

impl ProtocolCost {
    /// NCCL's cost model of `algorithm` with `protocol` (its refinements in
    /// `ncclTopoTuneModel`): Ring loses half the bandwidth to LL's flags and 8% to
    /// LL128's; Tree keeps 92%, of which LL keeps 1/3.8 and LL128 7/9 on one node, 120/128
    /// across nodes. LL is capped per rank by llMaxBws (the GPU's row on one node, the
    /// first CPU row across nodes); Ring/LL128, Tree and Tree/LL128 per channel.
    pub fn new(
        constants: &NcclConstants,
        gpu: GpuArch,
        nodes: usize,
        algorithm: Algorithm,
        protocol: Protocol,
    ) -> ProtocolCost {
        let (g, n) = (gpu.index(), nodes_column(nodes));
        let (a, p) = (algorithm.index(), protocol.index());
        let ll_row = if nodes <= 1 { g } else { 0 };
        let ll_total = constants.ll_max_gbps[ll_row][n];
        let tree_channel = constants.per_channel_tree_gbps[g][n];
        const TREE: f64 = 0.92;
        let ll128_tree = if nodes <= 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
        let (efficiency, channel_gbps, total_gbps) = match (algorithm, protocol) {
            (Algorithm::Ring, Protocol::Ll) => (0.5, None, Some(ll_total)),
            (Algorithm::Ring, Protocol::Ll128) => (
                0.92,
                Some(constants.per_channel_ring_ll128_gbps[g][n]),
                None,
            ),
            (Algorithm::Ring, Protocol::Simple) => (1.0, None, None),
            (Algorithm::Tree, Protocol::Ll) => {
                (TREE / 3.8, Some(tree_channel / 3.8), Some(ll_total))
            }
            (Algorithm::Tree, Protocol::Ll128) => (
                TREE * ll128_tree,
                Some((tree_channel * ll128_tree).min(constants.per_channel_tree_ll128_gbps[g][n])),
                None,
            ),
            (Algorithm::Tree, Protocol::Simple) => (TREE, Some(tree_channel), None),
            // The plugin's tuner ranks Ring and Tree only; the others take no refinement.
            _ => (1.0, None, None),
        };
        ProtocolCost {
            base_us: constants.base_latency_us[a][p],
            step_us: [
                constants.hw_latency_us[HW_NVLINK][a][p],
                constants.hw_latency_us[HW_NET][a][p],
            ],
            efficiency,
            channel_gbps,
            total_gbps,
        }
    }

    /// Most all of `channels` move per rank, GB/s (infinite when nothing limits them).
    pub fn rate_limit_gbps(&self, channels: u32) -> f64 {
        let per_channel = self
            .channel_gbps
            .map_or(f64::INFINITY, |c| c * channels as f64);
        per_channel.min(self.total_gbps.unwrap_or(f64::INFINITY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_nccls_figures() {
        let c = NcclConstants::default();
        // Ampere, 2 nodes: Ring/LL128 20 GB/s a channel; LL across nodes takes the
        // first CPU row (39.0 for 2 nodes), on one node the GPU's (87.7).
        let ring_ll128 =
            ProtocolCost::new(&c, GpuArch::Ampere, 2, Algorithm::Ring, Protocol::Ll128);
        assert_eq!(ring_ll128.channel_gbps, Some(20.0));
        assert_eq!(ring_ll128.step_us, [1.9, 4.0]);
        assert_eq!(ring_ll128.base_us, 14.0);
        let ring_ll = ProtocolCost::new(&c, GpuArch::Ampere, 2, Algorithm::Ring, Protocol::Ll);
        assert_eq!(ring_ll.total_gbps, Some(39.0));
        assert_eq!(ring_ll.rate_limit_gbps(32), 39.0);
        let one_node = ProtocolCost::new(&c, GpuArch::Ampere, 1, Algorithm::Ring, Protocol::Ll);
        assert_eq!(one_node.total_gbps, Some(87.7));
        // Tree/LL128 on one Hopper node: min(38.7 * 7/9, 36.7) = 30.1 a channel.
        let tree = ProtocolCost::new(&c, GpuArch::Hopper, 1, Algorithm::Tree, Protocol::Ll128);
        assert!((tree.channel_gbps.unwrap() - 38.7 * 7.0 / 9.0).abs() < 1e-9);
        assert!((tree.rate_limit_gbps(4) - 4.0 * 38.7 * 7.0 / 9.0).abs() < 1e-9);
        let simple = ProtocolCost::new(&c, GpuArch::Hopper, 8, Algorithm::Ring, Protocol::Simple);
        assert_eq!(simple.rate_limit_gbps(1), f64::INFINITY);
        assert_eq!(simple.efficiency, 1.0);
    }
}
