//! What the simulator says about one of NCCL's algorithms for one collective on the
//! topology, in parts that do not depend on the size, so every size band is priced
//! without simulating again:
//!
//! - latency: the longest chain of dependent steps of the baseline with no data (the
//!   transfers of one step between the same two NPUs merged into one message, as NCCL
//!   sends them), each step costing its route's hops, a hop the larger of the link's alpha
//!   and the protocol's step latency for that kind of link. This is a chain, not a
//!   simulation: the simulator's links carry one message for its whole alpha, which would
//!   queue a ring's steps behind each other on every link, while NCCL keeps several steps
//!   in flight on a connection (NCCL's own latency model is the same chain);
//! - time per byte: the baseline with no link latency at 1 GiB (with no latency, time is
//!   exactly linear in size). NCCL pipelines finely; a pipeline's fill shrinks as 1/K with
//!   K chunks per NPU, so the time is extrapolated to unlimited pipelining from K = 1 and
//!   K = 2, kept between the busiest NPU's send/receive bound and the K = 2 time. Ring
//!   passes (All-Gather, Reduce-Scatter, All-Reduce) move every segment at every step and
//!   take as long for any K, so they are measured at K = 1 only;
//! - injection: how many bytes each NPU sends per byte of collective, against its links'
//!   total bandwidth, for the per-channel limits.

use super::protocol::ProtocolCost;
use crate::baselines::Baseline;
use crate::collective::{CollectiveKind, CollectiveSpec};
use crate::error::Result;
use crate::error::{Error, Npus};
use crate::gpu::Algorithm;
use crate::schedule::Schedule;
use crate::sim::{schedule_messages, simulate_schedule};
use crate::topology::{shortest_paths, Link, NpuId, ShortestPaths, Topology};
use crate::units::{ps_to_us, us_to_ps, Picos};
use std::borrow::Cow;
use std::collections::HashMap;

/// Collective size the per-byte time is measured at.
const REFERENCE_BYTES: u64 = 1 << 30;

/// The size-independent parts of one algorithm's time for one collective.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Profile {
    /// Zero-byte time per protocol (by `Protocol::index`), microseconds.
    pub latency_us: [f64; 3],
    /// Alpha-free time per byte of collective size with unlimited pipelining, microseconds.
    pub us_per_byte: f64,
    /// Per NPU that sends: bytes it sends per byte of collective size, and the total
    /// bandwidth of its links, GB/s.
    pub injection: Vec<(f64, f64)>,
}

/// What the executor cost model (`cost`) needs of one algorithm for one collective, at
/// line rate, in parts that do not depend on the size or the protocol.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shape {
    /// Latency-free time per byte of collective size with unlimited pipelining, us.
    pub us_per_byte: f64,
    /// The busiest NVLink and network link's busy time, as shares of the busiest link's.
    pub busiest: [f64; 2],
    /// The most NPUs of one NVLink domain whose links into the network carry data.
    pub nics_used: usize,
    /// The longest chain of dependent steps: its links' latency, us, and its steps within
    /// NVLink domains and across the network.
    pub wire_latency_us: f64,
    pub steps: [f64; 2],
    /// As [`Profile::injection`].
    pub injection: Vec<(f64, f64)>,
}

/// An algorithm's simulated parts.
struct Measured {
    steps: Vec<Step>,
    us_per_byte: f64,
    busiest: [f64; 2],
    nics_used: usize,
    injection: Vec<(f64, f64)>,
}

/// The topology as the profiles need it. Switch vertices are priced as the paper's
/// unwinding (each GPU's port split evenly over its peers), as the closed forms
/// (`formula`) price them, so the tuner decides alike at every communicator size; pricing
/// NCCL's algorithms on switch ports is the executor cost model's part.
pub(crate) struct Profiler<'a> {
    topo: Cow<'a, Topology>,
    /// The same links with no latency.
    zero_alpha: Topology,
    npus: Vec<NpuId>,
    /// NPUs `domain_size` apart in id share an NVLink domain (a node unless told otherwise).
    domain_size: usize,
    /// Per link of `topo`, whether it is a network hop; `None`: the unwound topology, where
    /// a link is a network hop when it joins two domains.
    network_links: Option<Vec<bool>>,
}

impl<'a> Profiler<'a> {
    pub fn new(topo: &'a Topology, domain_size: usize) -> Result<Profiler<'a>> {
        let topo = if topo.has_switches() {
            Cow::Owned(topo.unwind(None)?)
        } else {
            Cow::Borrowed(topo)
        };
        let zero_alpha = with_latencies(&topo, |_| 0.0)?;
        Ok(Profiler {
            npus: topo.alive_npus(),
            topo,
            zero_alpha,
            domain_size: domain_size.max(1),
            network_links: None,
        })
    }

    /// A profiler that keeps switch vertices as they are (a ring through an NVSwitch gets
    /// the GPU's whole port, as on the hardware): the executor cost model's. A step pays
    /// its route's latency plus the protocol's step latency once, on the link leaving the
    /// sending NPU (a network hop when any link of the route is one, see
    /// [`network_links`]).
    pub fn on_fabric(topo: &'a Topology, domain_size: usize) -> Result<Profiler<'a>> {
        let domain_size = domain_size.max(1);
        let zero_alpha = with_latencies(topo, |_| 0.0)?;
        Ok(Profiler {
            npus: topo.alive_npus(),
            network_links: Some(network_links(topo, domain_size)),
            topo: Cow::Borrowed(topo),
            zero_alpha,
            domain_size,
        })
    }

    /// Profiles `algorithm` (Ring: the ring baseline; Tree: the double binary tree) for
    /// `kind`, rooted collectives at the first NPU; `costs` by `Protocol::index`.
    pub fn profile(
        &self,
        kind: CollectiveKind,
        algorithm: Algorithm,
        costs: &[ProtocolCost; 3],
    ) -> Result<Profile> {
        let measured = self.measure(kind, algorithm)?;
        let mut latency_us = [0.0; 3];
        for (slot, cost) in latency_us.iter_mut().zip(costs) {
            let hop = |l: &Link| match &self.network_links {
                None => us_to_ps(l.latency_us.max(self.step_us(l, cost))),
                Some(_) => self.additive_hop_ps(l, cost.step_us),
            };
            *slot = ps_to_us(self.longest_chain_ps(&measured.steps, hop)?);
        }
        Ok(Profile {
            latency_us,
            us_per_byte: measured.us_per_byte,
            injection: measured.injection,
        })
    }

    /// The algorithm's [`Shape`] for `kind` (a profiler made [`Profiler::on_fabric`]).
    pub fn shape(&self, kind: CollectiveKind, algorithm: Algorithm) -> Result<Shape> {
        let measured = self.measure(kind, algorithm)?;
        let chain_us = |step_us: [f64; 2]| -> Result<f64> {
            let hop = |l: &Link| self.additive_hop_ps(l, step_us);
            Ok(ps_to_us(self.longest_chain_ps(&measured.steps, hop)?))
        };
        // The chain's parts, from three walks: no step cost, then a unit per kind of hop
        // (exact where the longest chain does not change with the step costs, as on a
        // ring; otherwise the chain that is longest with unit costs).
        let wire = chain_us([0.0, 0.0])?;
        let nvlink_steps = (chain_us([1.0, 0.0])? - wire).round();
        let network_steps = (chain_us([0.0, 1.0])? - wire).round();
        Ok(Shape {
            us_per_byte: measured.us_per_byte,
            busiest: measured.busiest,
            nics_used: measured.nics_used,
            wire_latency_us: wire,
            steps: [nvlink_steps, network_steps],
            injection: measured.injection,
        })
    }

    /// A hop that costs its link's latency, plus `step_us` (NVLink, network) where it
    /// leaves an NPU: once per step, however many switches its route crosses.
    fn additive_hop_ps(&self, l: &Link, step_us: [f64; 2]) -> Picos {
        if self.topo.is_switch(l.src) {
            return us_to_ps(l.latency_us);
        }
        let across = self.is_network(l);
        us_to_ps(l.latency_us + step_us[usize::from(across)])
    }

    /// The simulated parts of an algorithm's profile, worked out once.
    fn measure(&self, kind: CollectiveKind, algorithm: Algorithm) -> Result<Measured> {
        let baseline = match algorithm {
            Algorithm::Ring => Baseline::Ring,
            Algorithm::Tree => Baseline::Dbt,
            other => {
                return Err(Error::baseline(
                    format!("NCCL {other}"),
                    format!(
                    "NCCL's {other} has no baseline schedule to simulate; it is priced by formula"
                ),
                ))
            }
        };
        let spec = |chunks_per_npu| CollectiveSpec {
            kind,
            root: kind.has_root().then_some(self.npus[0]),
            npus: self.npus.clone(),
            chunks_per_npu,
            size_bytes: REFERENCE_BYTES,
        };
        let one = baseline.schedule(&self.topo, &spec(1))?;
        let run = simulate_schedule(&self.zero_alpha, &one)?;
        let t1 = run.time_ps as f64;
        let (injection, bound) = self.injection(&one);
        let ring_pass = algorithm == Algorithm::Ring && !kind.has_root();
        let pipelined = if ring_pass {
            t1
        } else {
            let two = baseline.schedule(&self.topo, &spec(2))?;
            let t2 = simulate_schedule(&self.zero_alpha, &two)?.time_ps as f64;
            (2.0 * t2 - t1).max(bound).min(t2)
        };
        let mut busiest = [0.0f64; 2];
        let mut nics_used: HashMap<usize, Vec<NpuId>> = HashMap::new();
        for (id, &busy) in run.link_busy_ps.iter().enumerate() {
            let link = self.topo.link(id);
            let network = self.is_network(link);
            busiest[usize::from(network)] = busiest[usize::from(network)].max(busy as f64);
            if network && busy > 0 && !self.topo.is_switch(link.src) {
                let npus = nics_used.entry(link.src / self.domain_size).or_default();
                if !npus.contains(&link.src) {
                    npus.push(link.src);
                }
            }
        }
        let most = busiest[0].max(busiest[1]).max(1.0);
        Ok(Measured {
            steps: merged_steps(&one),
            us_per_byte: ps_to_us(pipelined as Picos) / REFERENCE_BYTES as f64,
            busiest: busiest.map(|b| b / most),
            nics_used: nics_used.values().map(Vec::len).max().unwrap_or(0),
            injection,
        })
    }

    /// [`longest_chain_ps`] with each step taking the `hop` costs of its route (the direct
    /// link, else the cheapest path).
    fn longest_chain_ps(&self, steps: &[Step], hop: impl Fn(&Link) -> Picos) -> Result<Picos> {
        let topo = &*self.topo;
        let mut routes: HashMap<NpuId, ShortestPaths> = HashMap::new();
        longest_chain_ps(steps, |src, dst| match topo.link_between(src, dst) {
            Some(l) => Ok(hop(topo.link(l))),
            None => {
                let paths = routes
                    .entry(src)
                    .or_insert_with(|| shortest_paths(topo, src, &hop));
                match paths.dist[dst] {
                    Picos::MAX => Err(Error::Disconnected {
                        from: Npus::Npu(src),
                        to: Npus::Npu(dst),
                    }),
                    d => Ok(d),
                }
            }
        })
    }

    /// The protocol's step latency on `link`: NVLink inside a domain, network across.
    fn step_us(&self, link: &Link, cost: &ProtocolCost) -> f64 {
        cost.step_us[usize::from(self.is_network(link))]
    }

    /// Whether `link` is a network hop rather than one inside an NVLink domain.
    fn is_network(&self, link: &Link) -> bool {
        match &self.network_links {
            None => link.src / self.domain_size != link.dst / self.domain_size,
            Some(network) => self
                .topo
                .link_between(link.src, link.dst)
                .is_some_and(|id| network[id]),
        }
    }

    /// Per sending NPU (bytes sent per byte of collective, egress GB/s), and the time in ps
    /// the busiest NPU needs to send or receive its bytes at full link bandwidth.
    fn injection(&self, schedule: &Schedule) -> (Vec<(f64, f64)>, f64) {
        let n = self.topo.npus();
        let (mut sent, mut received) = (vec![0.0; n], vec![0.0; n]);
        for t in &schedule.transfers {
            sent[t.src()] += schedule.chunk_bytes;
            received[t.dst()] += schedule.chunk_bytes;
        }
        let total_gbps = |links: &mut dyn Iterator<Item = usize>| -> f64 {
            links.map(|l| self.topo.link(l).bandwidth_gbps).sum()
        };
        let mut bound: f64 = 0.0;
        let mut injection = Vec::new();
        for v in 0..n {
            let egress = total_gbps(&mut self.topo.out_links(v));
            let ingress = total_gbps(&mut self.topo.in_links(v).iter().copied());
            // bytes * 1000 / (GB/s) = picoseconds.
            if sent[v] > 0.0 {
                bound = bound.max(sent[v] * 1000.0 / egress);
                injection.push((sent[v] / REFERENCE_BYTES as f64, egress));
            }
            if received[v] > 0.0 {
                bound = bound.max(received[v] * 1000.0 / ingress);
            }
        }
        (injection, bound)
    }
}

/// Per link of `topo`, whether a transfer on it crosses the network rather than an NVLink
/// domain (NPUs `domain_size` apart in id share one): a link between NPUs of two domains,
/// a link of a switch that serves NPUs of several domains (a rail or spine switch) or of
/// no NPU at all; a link leaving an NPU counts as the network when its NPU's route onward
/// may cross it, i.e. when it leads into such a switch.
pub(crate) fn network_links(topo: &Topology, domain_size: usize) -> Vec<bool> {
    let npus = topo.npus();
    let domain = |v: usize| v / domain_size;
    // Per switch: the one domain whose NPUs it serves, or None (several or none).
    let switch_domain: Vec<Option<usize>> = (npus..topo.vertices())
        .map(|s| {
            let mut served = topo
                .out_links(s)
                .map(|l| topo.link(l).dst)
                .filter(|&v| v < npus)
                .map(domain);
            let first = served.next()?;
            served.all(|d| d == first).then_some(first)
        })
        .collect();
    let place = |v: usize| {
        if v < npus {
            Some(domain(v))
        } else {
            switch_domain[v - npus]
        }
    };
    topo.links()
        .iter()
        .map(|l| match (place(l.src), place(l.dst)) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        })
        .collect()
}

/// `topo` with every link's latency replaced by `latency(link)`.
fn with_latencies(topo: &Topology, latency: impl Fn(&Link) -> f64) -> Result<Topology> {
    let links = topo
        .links()
        .iter()
        .map(|l| Link {
            latency_us: latency(l),
            ..l.clone()
        })
        .collect();
    topo.relinked(links)
}

/// One step of an algorithm between two NPUs, and the earlier steps it waits for.
pub(crate) struct Step {
    pub src: NpuId,
    pub dst: NpuId,
    pub deps: Vec<usize>,
}

/// When the last of `steps` arrives if each starts once the steps it waits for have
/// arrived and the previous step between the same two NPUs has started, and takes
/// `cost(src, dst)`. Steps wait only for earlier steps (in the schedule's order).
pub(crate) fn longest_chain_ps(
    steps: &[Step],
    mut cost: impl FnMut(NpuId, NpuId) -> Result<Picos>,
) -> Result<Picos> {
    let mut last_start: HashMap<(NpuId, NpuId), Picos> = HashMap::new();
    let mut arrival: Vec<Picos> = Vec::with_capacity(steps.len());
    for m in steps {
        let cost = cost(m.src, m.dst)?;
        let ready = m.deps.iter().map(|&d| arrival[d]).max().unwrap_or(0);
        let previous = last_start.entry((m.src, m.dst)).or_insert(0);
        let start = ready.max(*previous);
        *previous = start;
        arrival.push(start.saturating_add(cost));
    }
    Ok(arrival.into_iter().max().unwrap_or(0))
}

/// The schedule's steps: the transfers of one step (a baseline's start time) between the
/// same two NPUs become one, waiting for every step that delivered what any of them sends.
fn merged_steps(schedule: &Schedule) -> Vec<Step> {
    let transfers = schedule_messages(schedule);
    let mut step_of = Vec::with_capacity(transfers.len());
    let mut index: HashMap<(NpuId, NpuId, Picos), usize> = HashMap::new();
    let mut steps: Vec<Step> = Vec::new();
    for t in &schedule.transfers {
        let step = *index
            .entry((t.src(), t.dst(), t.start_ps))
            .or_insert_with(|| {
                steps.push(Step {
                    src: t.src(),
                    dst: t.dst(),
                    deps: Vec::new(),
                });
                steps.len() - 1
            });
        step_of.push(step);
    }
    for (transfer, message) in transfers.iter().enumerate() {
        let step = step_of[transfer];
        for &d in &message.deps {
            let dep = step_of[d];
            if dep != step && !steps[step].deps.contains(&dep) {
                steps[step].deps.push(dep);
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{GpuArch, Protocol};
    use crate::topology::parse_spec;
    use crate::topology::SpecDefaults;
    use crate::tuner::constants::NcclConstants;

    /// The Ring profile of `kind` on `spec`, NVLink domains of `domain` NPUs, NCCL's
    /// default costs for Ampere on `nodes` nodes.
    fn ring_profile(spec: &str, domain: usize, nodes: usize, kind: CollectiveKind) -> Profile {
        let c = NcclConstants::default();
        let costs = Protocol::ALL
            .map(|p| ProtocolCost::new(&c, GpuArch::Ampere, nodes, Algorithm::Ring, p));
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        let profiler = Profiler::new(&topo, domain).unwrap();
        profiler.profile(kind, Algorithm::Ring, &costs).unwrap()
    }

    /// Equal to a millionth.
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1e-9)
    }

    /// A bidirectional ring of 4 NPUs, 10 GB/s and 1 us links: hand-worked figures.
    #[test]
    fn ring_all_gather_on_a_ring_matches_hand_worked_figures() {
        let p = ring_profile("ring:4,bw=10,lat=1", 4, 1, CollectiveKind::AllGather);
        // Bidirectional ring: each way carries half of the 1 GiB in P - 1 = 3 steps of
        // S/8 each: 3/8 S at 10 GB/s, i.e. 0.0375 us per byte.
        assert!(close(p.us_per_byte, 3.0 / 8.0 / 10e3), "{}", p.us_per_byte);
        // Zero bytes: 3 dependent steps, each max(1 us alpha, the protocol's NVLink step)
        // (LL 0.6, LL128 1.9, Simple 3.4 for Ring).
        let expected = [3.0, 3.0 * 1.9, 3.0 * 3.4];
        assert!(
            (0..3).all(|i| close(p.latency_us[i], expected[i])),
            "{:?}",
            p.latency_us
        );
        // Each NPU sends 2 segments of S/8 per step for 3 steps: 3/4 of S, over 20 GB/s.
        assert_eq!(p.injection, vec![(0.75, 20.0); 4]);
    }

    /// What `profile` relies on to measure ring passes at K = 1 only.
    #[test]
    fn ring_passes_take_as_long_for_any_k() {
        let topo = parse_spec("preset:dgx-a100,nodes=2", &SpecDefaults::default()).unwrap();
        let zero = with_latencies(&topo, |_| 0.0).unwrap();
        for kind in [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ] {
            let time = |k| {
                let spec = CollectiveSpec {
                    kind,
                    root: None,
                    npus: topo.alive_npus(),
                    chunks_per_npu: k,
                    size_bytes: REFERENCE_BYTES,
                };
                let schedule = Baseline::Ring.schedule(&topo, &spec).unwrap();
                simulate_schedule(&zero, &schedule).unwrap().time_ps as f64
            };
            // Equal up to the picoseconds each transfer rounds to.
            let t1 = time(1);
            assert!(close(time(2), t1) && close(time(3), t1), "{kind}");
        }
    }

    #[test]
    fn broadcast_chain_extrapolates_to_full_pipelining() {
        // Ring broadcast on 8 NPUs: each half of the buffer goes 7 hops round the ring, one
        // way each. Unpipelined (K = 1) a half takes 7 x S/2 / bw, with K = 2 pieces
        // (2 + 6) x S/4 / bw; extrapolated: 2 x 2 - 3.5 = S/2 / bw, the root's own bound.
        let p = ring_profile("ring:8,bw=10,lat=1", 8, 1, CollectiveKind::Broadcast);
        assert!(close(p.us_per_byte, 0.5 / 10e3), "{}", p.us_per_byte);
    }

    #[test]
    fn steps_across_domains_pay_the_network_latency() {
        // Two domains of 2 on a ring of 4: NPUs 0,1 | 2,3; links 1-2 and 3-0 cross.
        let p = ring_profile("ring:4,bw=10,lat=0", 2, 2, CollectiveKind::AllGather);
        // With LL (Ring: 0.6 us a step on NVLink, 2.7 across the network) the longest chain
        // of dependent steps is the segment 1 -> 2 -> 3 -> 0, which crosses twice.
        assert!(
            close(p.latency_us[0], 0.6 + 2.0 * 2.7),
            "{:?}",
            p.latency_us
        );
    }
}
