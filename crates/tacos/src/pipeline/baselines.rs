//! Baselines as candidates of the search: where Ring, Direct or another fixed algorithm is
//! faster than every synthesized schedule (a ring's fixed order pipelines tightly at middling
//! sizes), the user is given it, so that what the search keeps is never slower than a
//! baseline it could have run.
//!
//! A baseline's schedule is a step order (`crate::baselines`); the simulator times it, and
//! those times make it a schedule like a synthesized one, which the checker must accept.
//! A send between NPUs that neither a link nor switches join (Direct on a mesh, or across
//! the nodes of a fabric whose NICs hang off some GPUs) is first relayed hop by hop along
//! the simulator's own path (`baselines::relay`), so the schedule is one of the
//! topology's links and runs as the simulator moved it, store and forward. A reduction
//! cannot be relayed (an NPU on the way has no room for another's partial sum), so a
//! baseline that would need one is left out.

use super::Checked;
use crate::baselines::{relay, Baseline};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};
use crate::pipeline::Request;
use crate::schedule::route_time_ps;
use crate::sim::simulate_schedule;
use crate::topology::{NpuId, RouteCache, Topology};
use crate::units::Picos;
use std::collections::HashMap;

/// Most NPUs the search tries baselines over: beyond them Direct alone holds NPUs^2
/// transfers, and a large search keeps to one synthesized trial (`super::default_chunks`).
pub const MAX_BASELINE_NPUS: usize = 512;

/// The baselines a search for `kind` over `npus` NPUs tries at `k`: those that define the
/// collective, up to [`MAX_BASELINE_NPUS`]; above K = 1 only those more chunks can speed
/// up (`Baseline::pipelines`).
pub(super) fn tried(kind: CollectiveKind, npus: usize, k: usize) -> Vec<Baseline> {
    if npus > MAX_BASELINE_NPUS {
        return Vec::new();
    }
    Baseline::ALL
        .into_iter()
        .filter(|b| b.kinds().contains(&kind) && (k == 1 || b.pipelines()))
        .collect()
}

/// `baseline`'s schedule for `request` with `k` chunks per NPU (as the baseline splits
/// them), its sends between unjoined NPUs relayed, timed by the simulator and checked on
/// those times.
///
/// ```
/// use tacos::baselines::Baseline;
/// use tacos::collective::CollectiveKind;
/// use tacos::pipeline::{baseline, Request};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let request = Request::new(CollectiveKind::AllGather, 1 << 20);
/// let checked = baseline(&ring, &request, Baseline::Ring, 1).unwrap();
/// assert_eq!(checked.baseline(), Some(Baseline::Ring));
/// assert!(checked.report().collective_time_ps > 0);
/// // Direct on a ring sends between NPUs no link joins: of its 12 sends, the 8 to
/// // neighbours take a link each; the 4 across the ring are relayed by a neighbour,
/// // which has just received that chunk for itself and forwards it: one hop more each.
/// let direct = baseline(&ring, &request, Baseline::Direct, 1).unwrap();
/// assert_eq!(direct.schedule().transfers.len(), 8 + 4);
/// // A partial sum cannot pass through another NPU's buffer: no relayed Reduce-Scatter.
/// let reduce_scatter = Request::new(CollectiveKind::ReduceScatter, 1 << 20);
/// assert!(baseline(&ring, &reduce_scatter, Baseline::Direct, 1).is_err());
/// ```
pub fn baseline(
    topo: &Topology,
    request: &Request,
    baseline: Baseline,
    k: usize,
) -> Result<Checked> {
    baseline_within(topo, request, baseline, k, MemoryLimit::default())
}

/// [`baseline`], its relayed transfers held to `limit` (a search's own).
pub(super) fn baseline_within(
    topo: &Topology,
    request: &Request,
    baseline: Baseline,
    k: usize,
    limit: MemoryLimit,
) -> Result<Checked> {
    let schedule = baseline.schedule(topo, &request.spec(topo, k))?;
    let mut schedule = relay(topo, schedule, limit)?;
    let timed = simulate_schedule(topo, &schedule)?;
    let unlinked = |src, dst| {
        Error::baseline(baseline.name(), format!(
            "{} sends from NPU {src} to NPU {dst}, which no link or switch joins: no schedule of the topology's links",
            baseline.name()
        ))
    };
    // A message is issued when its data is ready and may wait for its link; it holds the
    // link for its route's time before it lands.
    let mut took: HashMap<(NpuId, NpuId), Picos> = HashMap::new();
    let mut routes = RouteCache::new(topo);
    for (transfer, message) in schedule.transfers.iter_mut().zip(&timed.messages) {
        let pair = (transfer.src(), transfer.dst());
        let ps = match took.get(&pair) {
            Some(&ps) => ps,
            None => {
                let route = routes
                    .between(pair.0, pair.1)
                    .ok_or_else(|| unlinked(pair.0, pair.1))?;
                let ps = route_time_ps(topo, route, schedule.chunk_bytes)?;
                *took.entry(pair).or_insert(ps)
            }
        };
        transfer.end_ps = message.end_ps;
        transfer.start_ps = message.end_ps.saturating_sub(ps);
    }
    let checked = Checked::new(schedule, topo).map_err(|e| {
        e.context(format!(
            "{} as the simulator times it fails the checker",
            baseline.name()
        ))
    })?;
    Ok(checked.of(baseline))
}
