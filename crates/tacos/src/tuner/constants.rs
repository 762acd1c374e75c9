//! NCCL's tuning constants: the latencies and bandwidth limits NCCL's own cost model uses.
//! NCCL hands its current values to v5+ tuner plugins at init; older versions get the
//! defaults below, which are NCCL's published defaults (`src/graph/tuning.cc`).

/// Rows of `hw_latency_us`: the kind of connection a hop crosses.
pub const HW_NVLINK: usize = 0;
pub const HW_NET: usize = 2;

/// NCCL's tuning constants, laid out as `ncclTunerConstants_v5_t` (the NVLS tree figures,
/// which the model does not use, are left out). Latencies in microseconds, bandwidths in
/// GB/s. Algorithm rows follow NCCL's numbering (Tree 0, Ring 1, ...), protocol columns
/// LL, LL128, Simple; the bandwidth tables have one row per GPU generation
/// ([`GpuArch::index`](crate::gpu::GpuArch::index)) and one column per node count (1, 2, more).
#[derive(Clone, Debug, PartialEq)]
pub struct NcclConstants {
    /// Fixed cost of launching an algorithm with a protocol.
    pub base_latency_us: [[f64; 3]; 7],
    /// Cost of one step across NVLink, PCI or the network, per algorithm and protocol.
    pub hw_latency_us: [[[f64; 3]; 7]; 3],
    /// Most an LL collective moves per rank, all channels together.
    pub ll_max_gbps: [[f64; 3]; 4],
    /// Most one channel moves with Ring/LL128.
    pub per_channel_ring_ll128_gbps: [[f64; 3]; 4],
    /// Most one channel moves with Tree/LL128.
    pub per_channel_tree_ll128_gbps: [[f64; 3]; 4],
    /// Most one channel moves with Tree (any protocol, before the protocol's own factor).
    pub per_channel_tree_gbps: [[f64; 3]; 4],
}

impl Default for NcclConstants {
    /// NCCL's defaults.
    fn default() -> Self {
        NcclConstants {
            base_latency_us: [
                [6.8, 14.0, 8.4], // Tree
                [6.6, 14.0, 8.4], // Ring
                [0.0; 3],         // CollNet Direct
                [0.0; 3],         // CollNet Chain
                [0.0; 3],         // NVLS
                [0.0; 3],         // NVLS Tree
                [8.0, 8.0, 8.0],  // PAT
            ],
            hw_latency_us: [
                // NVLink
                [
                    [0.6, 1.25, 4.0],
                    [0.6, 1.9, 3.4],
                    [0.0, 0.0, 3.7],
                    [0.0, 0.0, 2.8],
                    [0.0, 0.0, 25.0],
                    [0.0, 0.0, 25.0],
                    [0.0, 0.0, 4.0],
                ],
                // PCI
                [
                    [1.0, 1.9, 4.0],
                    [1.0, 2.5, 5.7],
                    [0.0, 0.0, 3.7],
                    [0.0, 0.0, 2.8],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 4.0],
                ],
                // Network
                [
                    [5.0, 8.5, 14.0],
                    [2.7, 4.0, 14.0],
                    [0.0, 0.0, 31.0],
                    [0.0, 0.0, 30.0],
                    [0.0, 0.0, 18.0],
                    [0.0, 0.0, 20.9],
                    [0.0, 0.0, 14.0],
                ],
            ],
            ll_max_gbps: [
                [39.0, 39.0, 20.4],
                [87.7, 22.5, 19.0],
                [141.0, 45.0, 35.0],
                [282.0, 90.0, 70.0],
            ],
            per_channel_ring_ll128_gbps: [
                [20.0, 20.0, 20.0],
                [20.0, 20.0, 20.0],
                [36.7, 36.7, 36.7],
                [40.0, 40.0, 40.0],
            ],
            per_channel_tree_ll128_gbps: [
                [20.0, 20.0, 20.0],
                [20.0, 20.0, 20.0],
                [36.7, 36.7, 29.0],
                [55.6, 31.67, 20.0],
            ],
            per_channel_tree_gbps: [
                [26.5, 18.5, 10.0],
                [24.0, 23.6, 17.8],
                [38.7, 41.4, 36.0],
                [70.0, 42.8, 24.0],
            ],
        }
    }
}

impl NcclConstants {
    /// The first value that is not a finite number >= 0, named, if any: NCCL's figures are
    /// used only when every one of them makes sense.
    pub fn first_invalid(&self) -> Option<String> {
        let tables: [(&str, Vec<f64>); 6] = [
            ("baseLatencies", self.base_latency_us.concat()),
            (
                "hwLatencies",
                self.hw_latency_us.iter().flat_map(|t| t.concat()).collect(),
            ),
            ("llMaxBws", self.ll_max_gbps.concat()),
            (
                "perChMaxRingLL128Bws",
                self.per_channel_ring_ll128_gbps.concat(),
            ),
            (
                "perChMaxTreeLL128Bws",
                self.per_channel_tree_ll128_gbps.concat(),
            ),
            ("perChMaxTreeBws", self.per_channel_tree_gbps.concat()),
        ];
        tables.into_iter().find_map(|(name, values)| {
            values
                .iter()
                .position(|v| !(v.is_finite() && *v >= 0.0))
                .map(|i| format!("{name}[{i}] = {}", values[i]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_constants_are_named() {
        assert_eq!(NcclConstants::default().first_invalid(), None);
        let mut c = NcclConstants::default();
        c.hw_latency_us[HW_NET][1][2] = f64::NAN;
        // Flattened: table 2 of 3, row 1, column 2 = 2*21 + 1*3 + 2.
        assert_eq!(c.first_invalid().unwrap(), "hwLatencies[47] = NaN");
        c = NcclConstants::default();
        c.per_channel_tree_gbps[0][0] = -1.0;
        assert_eq!(c.first_invalid().unwrap(), "perChMaxTreeBws[0] = -1");
    }
}
