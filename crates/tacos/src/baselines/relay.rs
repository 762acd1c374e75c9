//! Relaying a baseline hop by hop: a send between NPUs that neither a link nor switches
//! join becomes one transfer per NPU it stops at on the simulator's path (shortest by
//! alpha-beta cost, `sim::Router::stops`), each NPU on the way receiving the chunk and
//! forwarding it. The simulator moves such a send store-and-forward along that path
//! anyway; relayed, it is a schedule of the topology's links the checker can judge.
//!
//! Where every hop is a send of its own, the hops take the order in which the simulator
//! ran the sends moved whole: a relaying NPU forwards what reached it first, so the
//! relayed schedule runs as the routed one did. Copies of one chunk sharing a hop in a
//! step (a Broadcast's down the root's tree) send it once, and then the step order
//! stays, spaced by the most stops H of any send: hop j of a step-s transfer runs during
//! [s H + j, s H + j + 1). Only copies are relayed: an NPU
//! on the way has no buffer apart from its own for a partial sum passing through, so it
//! would add it to its own, and a reduction that needs a relay is an error.

use crate::budget::{mul, Allowance, MemoryLimit};
use crate::error::{Error, Result};
use crate::schedule::memory::TRANSFER;
use crate::schedule::{Op, Schedule, Transfer};
use crate::sim::{simulate_schedule_hops, Router};
use crate::topology::{NpuId, Topology};
use crate::units::Picos;

/// `schedule` (a step order, as `Baseline::schedule` gives) with every send between
/// unjoined NPUs relayed through the NPUs on its way, in the order the simulator ran
/// them where no hop is shared; unchanged where none needs a relay.
/// The relayed transfers are checked against `limit` before they are made.
///
/// ```
/// use tacos::baselines::{relay, Baseline};
/// use tacos::budget::MemoryLimit;
/// use tacos::collective::{Collective, CollectiveKind};
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let ring = parse_spec("ring:4", &SpecDefaults::default()).unwrap();
/// let c = Collective::over_all(&ring, CollectiveKind::AllToAll, None, 1, 1 << 20).unwrap();
/// let direct = Baseline::Direct.schedule(&ring, c.spec()).unwrap();
/// // 12 sends, of which the 4 to the NPU across the ring pass through a neighbour.
/// let relayed = relay(&ring, direct, MemoryLimit::default()).unwrap();
/// assert_eq!(relayed.transfers.len(), 16);
/// tacos::schedule::check_data_flow(&relayed, &ring).unwrap();
/// ```
pub fn relay(topo: &Topology, schedule: Schedule, limit: MemoryLimit) -> Result<Schedule> {
    let mut router = Router::new(topo, Allowance::new(limit, 0));
    let mut stops = Vec::new();
    let bytes = schedule.chunk_bytes;
    // First the size of what relaying makes, refused before it is made.
    let (mut hops, mut most) = (0u64, 1u64);
    for t in &schedule.transfers {
        router.stops(t.src(), t.dst(), bytes, &mut stops)?;
        let n = stops.len() as u64;
        if n > 1 && t.op == Op::Reduce {
            return Err(Error::baseline("relayed", format!(
                "{}: a partial sum of chunk {} sent from NPU {} to NPU {}, which no link or switch joins, cannot be relayed: NPU {} on the way would add it to its own",
                schedule.topology,
                t.chunk(),
                t.src(),
                t.dst(),
                stops[0]
            )));
        }
        hops += n;
        most = most.max(n);
    }
    if most == 1 {
        return Ok(schedule);
    }
    // Each hop and the time it is due, and the simulation of the sends moved whole, which
    // records each hop's start (once as the engine runs, once as reported).
    let per_hop = TRANSFER + 3 * std::mem::size_of::<Picos>() as u64;
    limit.admit(mul(hops, per_hop), || {
        format!(
            "relaying {} transfers through {hops} hops on {}",
            schedule.transfers.len(),
            topo.name()
        )
    })?;
    let (_, ran) = simulate_schedule_hops(topo, &schedule)?;
    let mut relayed = Vec::with_capacity(hops as usize);
    for (i, t) in schedule.transfers.iter().enumerate() {
        router.stops(t.src(), t.dst(), bytes, &mut stops)?;
        let started = ran.of(i);
        if started.len() != stops.len() {
            return Err(Error::baseline(
                "relayed",
                format!(
                "{}: the send from NPU {} to NPU {} took {} hops in the simulation and {} relayed",
                schedule.topology,
                t.src(),
                t.dst(),
                started.len(),
                stops.len()
            ),
            ));
        }
        let mut from = t.src();
        for (j, (&to, &began)) in stops.iter().zip(started).enumerate() {
            // The step order (H steps for each of the schedule's), which decides which
            // copies are one, and when the hop started in the simulation, which orders
            // them (H ticks a picosecond, so that a send's hops stay in turn).
            let step = t.start_ps * most + j as u64;
            let due = began * most + j as u64;
            relayed.push((
                Transfer::new(t.chunk(), from, to, step, step + 1, t.op),
                due,
            ));
            from = to;
        }
    }
    // Copies of one chunk from one sender take the sender's one shortest-path tree, so a
    // hop several of them share in a step (every NPU past the first relay, in a Broadcast
    // or an All-Gather) is sent once: a second copy carries nothing new, and the NPUs past
    // it would wait for it as well as for the first.
    relayed.sort_unstable_by_key(|(t, due)| (t.start_ps, t.src(), t.dst(), t.chunk(), *due));
    let sends = relayed.len();
    relayed.dedup_by(|(a, _), (b, _)| a == b && a.op == Op::Copy);
    // Where every hop is a send of its own, each takes the order the simulator ran the
    // sends in: a hop is due after the hops bringing its data (a send starts after its
    // data arrived; its hops run in turn), and a relaying NPU forwards what reached it
    // first, not what the step order names first, so the relayed schedule runs as the
    // routed one did. Where copies were merged, the routed run carried the duplicates,
    // and its order is no guide: the step order stays.
    let routed_order = relayed.len() == sends;
    let relayed = relayed
        .into_iter()
        .map(|(t, due)| {
            if routed_order {
                Transfer::new(t.chunk(), t.src(), t.dst(), due, due + 1, t.op)
            } else {
                t
            }
        })
        .collect();
    Ok(Schedule::new(
        schedule.topology,
        schedule.collective,
        schedule.chunk_bytes,
        relayed,
    ))
}

/// How many transfers `per_pair` sends of `bytes` from `src` to each of `dsts` are, and
/// how many they become once relayed (one per NPU each stops at). `None` where a route
/// cannot be found within the memory limit (or at all).
pub(super) fn relayed_sends(
    topo: &Topology,
    src: NpuId,
    dsts: impl Iterator<Item = NpuId>,
    bytes: f64,
    per_pair: u64,
) -> Option<(u64, u64)> {
    // A router per sender holds one shortest-path tree at a time.
    let mut router = Router::new(topo, Allowance::new(MemoryLimit::default(), 0));
    let mut stops = Vec::new();
    let (mut sends, mut hops) = (0u64, 0u64);
    for dst in dsts {
        router.stops(src, dst, bytes, &mut stops).ok()?;
        sends = sends.saturating_add(per_pair);
        hops = hops.saturating_add(mul(stops.len() as u64, per_pair));
    }
    Some((sends, hops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::{memory_bytes, Baseline};
    use crate::collective::{Collective, CollectiveKind};
    use crate::schedule::check_data_flow;
    use crate::sim::simulate_schedule;
    use crate::topology::{parse_spec, SpecDefaults};

    fn direct(spec: &str, kind: CollectiveKind) -> (Topology, Schedule) {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let c =
            Collective::over_all(&topo, kind, kind.has_root().then_some(0), 1, 1 << 20).unwrap();
        let schedule = Baseline::Direct.schedule(&topo, c.spec()).unwrap();
        (topo, schedule)
    }

    /// Where each chunk is sent once (All-to-All, Gather, Scatter), the relayed schedule
    /// moves exactly what the simulator moved store and forward, in the same order, so
    /// the simulator (the second implementation here) times both alike.
    #[test]
    fn relaying_sends_of_distinct_chunks_keeps_the_simulated_time() {
        use CollectiveKind::*;
        for spec in [
            "ring:4",
            "mesh:3x3",
            "torus:4x4",
            "hypercube:3",
            "preset:dgx2,nodes=4",
        ] {
            for kind in [AllToAll, Gather, Scatter] {
                let (topo, raw) = direct(spec, kind);
                let raw_ps = simulate_schedule(&topo, &raw).unwrap().time_ps;
                let relayed = relay(&topo, raw, MemoryLimit::default()).unwrap();
                check_data_flow(&relayed, &topo).unwrap();
                let mut routes = crate::topology::RouteCache::new(&topo);
                assert!(relayed
                    .transfers
                    .iter()
                    .all(|t| routes.between(t.src(), t.dst()).is_some()));
                let relayed_ps = simulate_schedule(&topo, &relayed).unwrap().time_ps;
                assert_eq!(relayed_ps, raw_ps, "{spec} {kind}");
            }
        }
    }

    /// Copies of one chunk share the sender's tree, each hop sent once: a relayed
    /// Broadcast or All-Gather carries less than Direct's routed sends, and is no slower.
    #[test]
    fn shared_hops_are_sent_once() {
        // On ring:4 the root's chunk reaches NPU 2 through NPU 1, which it reaches anyway:
        // 3 hops where Direct's sends cross 4 links.
        let (topo, raw) = direct("ring:4", CollectiveKind::Broadcast);
        let relayed = relay(&topo, raw.clone(), MemoryLimit::default()).unwrap();
        assert_eq!(relayed.transfers.len(), 3);
        for spec in ["ring:8", "mesh:3x3", "torus:4x4"] {
            for kind in [CollectiveKind::Broadcast, CollectiveKind::AllGather] {
                let (topo, raw) = direct(spec, kind);
                let raw_ps = simulate_schedule(&topo, &raw).unwrap().time_ps;
                let relayed = relay(&topo, raw, MemoryLimit::default()).unwrap();
                check_data_flow(&relayed, &topo).unwrap();
                assert!(simulate_schedule(&topo, &relayed).unwrap().time_ps <= raw_ps);
            }
        }
    }

    #[test]
    fn a_partial_sum_is_never_relayed() {
        let (topo, raw) = direct("ring:4", CollectiveKind::ReduceScatter);
        let e = relay(&topo, raw, MemoryLimit::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("partial sum") && e.contains("NPU 1"), "{e}");
        // Joined everywhere, nothing is relayed and the schedule comes back as it was.
        let (topo, raw) = direct("fc:4", CollectiveKind::ReduceScatter);
        assert_eq!(
            relay(&topo, raw.clone(), MemoryLimit::default()).unwrap(),
            raw
        );
    }

    /// Direct's estimate counts the hops relaying makes before they are made: on ring:4
    /// an All-to-All's 12 sends become 16 transfers (4 relayed in 2 hops), on fc:4
    /// nothing is relayed and the estimate is the plain one.
    #[test]
    fn the_memory_estimate_counts_relayed_hops() {
        for (spec, transfers) in [("ring:4", 16), ("fc:4", 12)] {
            let (topo, raw) = direct(spec, CollectiveKind::AllToAll);
            let spec = &raw.collective;
            let relayed = super::super::direct::relayed_transfers(&topo, spec);
            assert_eq!(relayed, (transfers > 12).then_some(transfers));
            assert_eq!(
                relay(&topo, raw.clone(), MemoryLimit::default())
                    .unwrap()
                    .transfers
                    .len() as u64,
                transfers
            );
            let estimate = Baseline::Direct.memory_estimate(&topo, spec);
            let plain = memory_bytes(&topo, spec, 1);
            assert_eq!(estimate > plain, transfers > 12);
        }
    }
}
