//! In-switch transfers (`Transfer::in_switch`, NVLS) as the checker and the simulator
//! read them: which group a transfer belongs to, and which links of its route the group
//! shares.
//!
//! A multicast copies a chunk from one NPU through a reducing switch to several: the
//! sender's links up to the switch carry it once for all. A sum reduces partials from
//! several NPUs inside a reducing switch into one: the links from the switch down to the
//! receiver carry the sum once for all. The switch is, on each member's route, the
//! reducing switch nearest the NPU the group has in common (the sender of a multicast,
//! the receiver of a sum), so the shared links are the fewest the group can share: from
//! that NPU to the switch. On a route through one switch (an NVSwitch node) it is that
//! switch.

use super::{Op, Transfer};
use crate::collective::ChunkId;
use crate::topology::{LinkId, NpuId, Topology};
use crate::units::Picos;
use std::ops::Range;

/// What makes in-switch transfers one operation: the same kind, chunk and start, and the
/// same sender (a multicast) or receiver (a sum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub op: Op,
    pub chunk: ChunkId,
    /// The sender of a multicast, the receiver of a sum.
    pub anchor: NpuId,
    pub start_ps: Picos,
}

impl GroupKey {
    /// The group of in-switch transfer `t`.
    ///
    /// ```
    /// use tacos::schedule::{GroupKey, Op, Transfer};
    /// let to = |dst| Transfer::new(7, 0, dst, 0, 1_000, Op::Copy).switched();
    /// assert_eq!(GroupKey::of(&to(1)), GroupKey::of(&to(2)));
    /// let into = |src| Transfer::new(7, src, 0, 0, 1_000, Op::Reduce).switched();
    /// assert_eq!(GroupKey::of(&into(1)), GroupKey::of(&into(2)));
    /// assert_ne!(GroupKey::of(&to(1)), GroupKey::of(&into(1)));
    /// ```
    pub fn of(t: &Transfer) -> GroupKey {
        GroupKey {
            op: t.op,
            chunk: t.chunk(),
            anchor: match t.op {
                Op::Copy => t.src(),
                Op::Reduce => t.dst(),
            },
            start_ps: t.start_ps,
        }
    }
}

/// The positions in `route` (an in-switch transfer's links, in order) of the links its
/// group shares: for a copy (`Op::Copy`, a multicast) those up to and including the one
/// entering the route's first reducing switch; for a reduction (a sum) those from the
/// route's last reducing switch down to the receiver. The error says why the route
/// cannot carry an in-switch transfer, to follow "its route ...".
///
/// ```
/// use tacos::schedule::{shared_links, Op};
/// use tacos::topology::{parse_spec, SpecDefaults};
/// let star = parse_spec("switch:4", &SpecDefaults::default())?;
/// let route = [star.link_between(0, 4).unwrap(), star.link_between(4, 1).unwrap()];
/// assert!(shared_links(&star, route.iter().copied(), Op::Copy).is_err());
/// let nvls = star.with_reducing(&[4])?;
/// assert_eq!(shared_links(&nvls, route.iter().copied(), Op::Copy), Ok(0..1));
/// assert_eq!(shared_links(&nvls, route.iter().copied(), Op::Reduce), Ok(1..2));
/// # Ok::<(), tacos::Error>(())
/// ```
pub fn shared_links(
    topo: &Topology,
    route: impl ExactSizeIterator<Item = LinkId>,
    op: Op,
) -> Result<Range<usize>, String> {
    let len = route.len();
    let mut switches = Vec::new();
    let mut reducing = None;
    for (k, l) in route.enumerate().take(len.saturating_sub(1)) {
        let v = topo.link(l).dst;
        if !topo.is_switch(v) {
            continue;
        }
        if topo.reduces(v) {
            match op {
                Op::Copy => return Ok(0..k + 1),
                Op::Reduce => reducing = Some(k + 1..len),
            }
        } else if switches.len() < 3 {
            switches.push(topo.vertex_label(v));
        }
    }
    match (reducing, switches.as_slice()) {
        (Some(shared), _) => Ok(shared),
        (None, []) => Err("passes no switch".into()),
        (None, names) => Err(format!(
            "passes no reducing switch ({} {} not reduce)",
            names.join(", "),
            if names.len() == 1 { "does" } else { "do" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Link;

    /// NPU 0 -> leaf0 -> spine -> leaf1 -> NPU 1 (switches 2, 3, 4), and back.
    fn two_levels(reducing: &[usize]) -> (Topology, Vec<LinkId>) {
        let hops = [(0, 2), (2, 3), (3, 4), (4, 1)];
        let link = |(src, dst)| Link {
            src,
            dst,
            bandwidth_gbps: 50.0,
            latency_us: 0.1,
        };
        let links = hops
            .iter()
            .flat_map(|&(a, b)| [link((a, b)), link((b, a))])
            .collect();
        let names = ["leaf0", "spine", "leaf1"].map(String::from).to_vec();
        let topo = Topology::with_switches("two levels", 2, names, links)
            .and_then(|t| t.with_reducing(reducing))
            .unwrap();
        let route = hops
            .iter()
            .map(|&(a, b)| topo.link_between(a, b).unwrap())
            .collect();
        (topo, route)
    }

    fn shared(reducing: &[usize], op: Op) -> Result<Range<usize>, String> {
        let (topo, route) = two_levels(reducing);
        shared_links(&topo, route.into_iter(), op)
    }

    #[test]
    fn a_group_shares_the_links_between_its_npu_and_the_nearest_reducing_switch() {
        // Both leaves reduce: a multicast shares NPU 0's link up to leaf0, a sum the
        // link from leaf1 down to NPU 1.
        assert_eq!(shared(&[2, 4], Op::Copy), Ok(0..1));
        assert_eq!(shared(&[2, 4], Op::Reduce), Ok(3..4));
        // Only the spine reduces: two links each side.
        assert_eq!(shared(&[3], Op::Copy), Ok(0..2));
        assert_eq!(shared(&[3], Op::Reduce), Ok(2..4));
    }

    #[test]
    fn a_route_without_a_reducing_switch_is_named() {
        assert_eq!(
            shared(&[], Op::Copy),
            Err("passes no reducing switch (switch 'leaf0', switch 'spine', switch 'leaf1' do not reduce)".into())
        );
        let (topo, _) = two_levels(&[]);
        let direct = [topo.link_between(0, 2).unwrap()];
        assert_eq!(
            shared_links(&topo, direct.into_iter(), Op::Copy),
            Err("passes no switch".into())
        );
    }
}
