//! Helpers shared by the integration tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tacos::topology::{Link, Topology};

/// A random strongly connected topology: a ring through a random permutation of the NPUs
/// plus up to `extra` random links, each link's bandwidth and latency drawn from the
/// given choices.
pub fn random_topology(
    seed: u64,
    npus: usize,
    extra: usize,
    bandwidths: &[f64],
    latencies: &[f64],
) -> Topology {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..npus).collect();
    for i in (1..npus).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut pairs: Vec<(usize, usize)> = (0..npus)
        .map(|i| (order[i], order[(i + 1) % npus]))
        .collect();
    for _ in 0..extra {
        let (a, b) = (rng.random_range(0..npus), rng.random_range(0..npus));
        if a != b && !pairs.contains(&(a, b)) {
            pairs.push((a, b));
        }
    }
    let links = pairs
        .into_iter()
        .map(|(src, dst)| Link {
            src,
            dst,
            bandwidth_gbps: bandwidths[rng.random_range(0..bandwidths.len())],
            latency_us: latencies[rng.random_range(0..latencies.len())],
        })
        .collect();
    Topology::new(format!("random {seed}"), npus, links).unwrap()
}
