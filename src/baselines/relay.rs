//! Relaying a baseline hop by hop: a send between NPUs that neither a link nor switches
//! join becomes one transfer per NPU it stops at on the simulator's path (shortest by
//! alpha-beta cost, `sim::Router::stops`), each NPU on the way receiving the chunk and
//! forwarding it. The simulator moves such a send store-and-forward along that path
//! anyway; relayed, it is a schedule of the topology's links the checker can judge.
//!
//! Step order stays valid by spacing the steps by the most stops H of any send: hop j of
//! a step-s transfer runs during [s H + j, s H + j + 1). Only copies are relayed: an NPU
//! on the way has no buffer apart from its own for a partial sum passing through, so it
//! would add it to its own, and a reduction that needs a relay is an error.

use crate::budget::{mul, Allowance, MemoryLimit};
use crate::error::{Error, Result};
use crate::schedule::memory::TRANSFER;
use crate::schedule::{Op, Schedule, Transfer};
use crate::sim::Router;
use crate::topology::{NpuId, Topology};

/// `schedule` (a step order, as `Baseline::schedule` gives) with every send between
/// unjoined NPUs relayed through the NPUs on its way; unchanged where none needs a relay.
/// The relayed transfers are checked against the memory limit before they are made.
///
/// ```
/// use tacos::baselines::{relay, Baseline};
/// use tacos::collective::{Collective, CollectiveKind};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let c = Collective::over_all(&ring, CollectiveKind::AllToAll, None, 1, 1 << 20).unwrap();
/// let direct = Baseline::Direct.schedule(&ring, c.spec()).unwrap();
/// // 12 sends, of which the 4 to the NPU across the ring pass through a neighbour.
/// let relayed = relay(&ring, direct).unwrap();
/// assert_eq!(relayed.transfers.len(), 16);
/// tacos::schedule::check_data_flow(&relayed, &ring).unwrap();
/// ```
pub fn relay(topo: &Topology, schedule: Schedule) -> Result<Schedule> {
    let limit = MemoryLimit::default();
    let mut router = Router::new(topo, Allowance::new(limit, 0));
    let mut stops = Vec::new();
    let bytes = schedule.chunk_bytes;
    // First the size of what relaying makes, refused before it is made.
    let (mut hops, mut most) = (0u64, 1u64);
    for t in &schedule.transfers {
        router.stops(t.src, t.dst, bytes, &mut stops)?;
        let n = stops.len() as u64;
        if n > 1 && t.op == Op::Reduce {
            return Err(Error::Baseline(format!(
                "{}: a partial sum of chunk {} sent from NPU {} to NPU {}, which no link or switch joins, cannot be relayed: NPU {} on the way would add it to its own",
                schedule.topology, t.chunk, t.src, t.dst, stops[0]
            )));
        }
        hops += n;
        most = most.max(n);
    }
    if most == 1 {
        return Ok(schedule);
    }
    limit.admit(mul(hops, TRANSFER), || {
        format!(
            "relaying {} transfers through {hops} hops on {}",
            schedule.transfers.len(),
            topo.name()
        )
    })?;
    let mut relayed = Vec::with_capacity(hops as usize);
    for t in &schedule.transfers {
        router.stops(t.src, t.dst, bytes, &mut stops)?;
        let mut from = t.src;
        for (j, &to) in stops.iter().enumerate() {
            let start_ps = t.start_ps * most + j as u64;
            relayed.push(Transfer {
                src: from,
                dst: to,
                start_ps,
                end_ps: start_ps + 1,
                ..t.clone()
            });
            from = to;
        }
    }
    Ok(Schedule::new(
        schedule.topology,
        schedule.collective,
        schedule.chunk_bytes,
        relayed,
    ))
}

/// How many transfers `per_pair` sends of `bytes` from `src` to each of `dsts` become once
/// relayed: one per NPU each stops at. `None` where a route cannot be found within the
/// memory limit (or at all).
pub(super) fn relayed_sends(
    topo: &Topology,
    src: NpuId,
    dsts: impl Iterator<Item = NpuId>,
    bytes: f64,
    per_pair: u64,
) -> Option<u64> {
    // A router per sender holds one shortest-path tree at a time.
    let mut router = Router::new(topo, Allowance::new(MemoryLimit::default(), 0));
    let mut stops = Vec::new();
    let mut sends = 0u64;
    for dst in dsts {
        router.stops(src, dst, bytes, &mut stops).ok()?;
        sends = sends.saturating_add(mul(stops.len() as u64, per_pair));
    }
    Some(sends)
}
