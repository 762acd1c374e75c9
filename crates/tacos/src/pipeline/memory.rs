//! What one trial of the search holds from start to finish, estimated before it starts.

use crate::budget::mul;
use crate::collective::{memory, memory::Shape, CollectiveSpec};
use crate::schedule::memory::{check, TRANSFER};
use crate::sim::memory::simulation;
use crate::synth::memory::{mean_hops, synthesis};
use crate::topology::Topology;

/// Bytes one synthesis of `spec` holds at its peak from start to finish: the collective,
/// the synthesis (`planned` or not: `SynthOptions::planned`), then its schedule checked
/// and, where `simulated` (a search ranking several candidates), simulated.
pub fn synthesis_checked(
    topo: &Topology,
    spec: &CollectiveSpec,
    simulated: bool,
    planned: bool,
) -> u64 {
    let s = Shape::of(spec, topo.alive_npus().len());
    let transfers = if s.relayed {
        mul(s.deliveries, mean_hops(topo))
    } else {
        s.deliveries
    };
    let checked = check(spec, topo, transfers);
    let after = if simulated {
        checked.max(simulation(topo, transfers))
    } else {
        checked
    };
    memory::building(topo, spec)
        .saturating_add(synthesis(topo, std::slice::from_ref(spec), planned))
        .max(mul(transfers, 2 * TRANSFER).saturating_add(after))
}
