//! Lower bounds on collective time, to say how close an algorithm is to the physical limit.

use crate::collective::Collective;
use crate::topology::Topology;
use crate::units::Picos;

/// Ingress bound: every NPU must take in each chunk it lacks, and can take in at most the
/// sum of its incoming links' bandwidths. Returns the largest such time over NPUs, in
/// picoseconds (bandwidth term only; latency is ignored, so the bound is never too high).
pub fn ingress_bound_ps(topo: &Topology, collective: &Collective) -> Picos {
    let mut needed = vec![0usize; topo.npus()];
    for chunk in collective.chunks() {
        for &npu in &chunk.post {
            if !chunk.pre.contains(&npu) {
                needed[npu] += 1;
            }
        }
    }
    let mut worst = 0.0f64;
    for (npu, &count) in needed.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let gbps: f64 = topo
            .in_links(npu)
            .iter()
            .map(|&l| topo.link(l).bandwidth_gbps)
            .sum();
        // bytes / (GB/s) = ns; * 1000 = ps.
        worst = worst.max(count as f64 * collective.chunk_bytes() / gbps * 1000.0);
    }
    worst.floor() as Picos
}
