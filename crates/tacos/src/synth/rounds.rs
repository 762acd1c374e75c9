//! Which way round its ring each link goes, on topologies composed of dimensions
//! (`Topology::dimensions`) some of which are bidirectional rings (rings, tori, a ring
//! crossed with other dimensions): what one-way trees (`TreeShape::OneWay`) follow.
//!
//! A dimension is a ring where each NPU's links along it go exactly to its two
//! neighbours round it, one step up and one step down (modulo its size, more than two),
//! and to nothing else along it; NPU ids are coordinates with the first dimension varying
//! fastest, as the builders lay them out. A topology with a failed NPU, switch vertices or
//! a link that is not along one dimension has no rounds.

use crate::topology::{NpuId, Topology};

/// Which way a link goes round its ring dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Round {
    /// One step up the dimension's coordinate (wrapping to 0).
    Up,
    /// One step down.
    Down,
}

/// Per link of a topology, the way it goes round its ring dimension, or None where it is
/// along a dimension that is not a ring.
pub(super) struct Rounds(Vec<Option<Round>>);

impl Rounds {
    /// The rounds of `topo`'s links, where at least one of its dimensions is a ring.
    pub(super) fn of(topo: &Topology) -> Option<Rounds> {
        let dims = topo.dimensions()?;
        if topo.has_switches() || !topo.failed().is_empty() {
            return None;
        }
        let mut stride = 1;
        let mut strides = Vec::with_capacity(dims.len());
        for &size in dims {
            strides.push(stride);
            stride *= size;
        }
        let coordinate = |npu: NpuId, d: usize| npu / strides[d] % dims[d];
        // Each link's dimension and its step along it (up, modulo the size).
        let mut steps = Vec::with_capacity(topo.links().len());
        for link in topo.links() {
            let mut along =
                (0..dims.len()).filter(|&d| coordinate(link.src, d) != coordinate(link.dst, d));
            let (Some(d), None) = (along.next(), along.next()) else {
                return None;
            };
            let n = dims[d];
            steps.push((
                d,
                (coordinate(link.dst, d) + n - coordinate(link.src, d)) % n,
            ));
        }
        // A ring: more than two NPUs round, and every NPU's links along it exactly one up
        // and one down.
        let ring: Vec<bool> = (0..dims.len())
            .map(|d| {
                let n = dims[d];
                n > 2
                    && (0..topo.npus()).all(|u| {
                        let mut ways: Vec<usize> = (topo.out_links(u))
                            .filter(|&l| steps[l].0 == d)
                            .map(|l| steps[l].1)
                            .collect();
                        ways.sort_unstable();
                        ways == [1, n - 1]
                    })
            })
            .collect();
        if !ring.contains(&true) {
            return None;
        }
        let rounds = steps
            .into_iter()
            .map(|(d, step)| match (ring[d], step == 1) {
                (false, _) => None,
                (true, true) => Some(Round::Up),
                (true, false) => Some(Round::Down),
            })
            .collect();
        Some(Rounds(rounds))
    }

    /// Whether `link` may carry a chunk going `way` round its rings.
    pub(super) fn allows(&self, link: usize, way: Round) -> bool {
        self.0[link].map_or(true, |r| r == way)
    }
}

/// Whether `topo` has a ring dimension for one-way trees (`TreeShape::OneWay`) to go
/// round.
///
/// ```
/// use tacos::synth::goes_round;
/// use tacos::topology::{parse_spec, SpecDefaults};
///
/// let spec = |s| parse_spec(s, &SpecDefaults::default()).unwrap();
/// assert!(goes_round(&spec("ring:8")));
/// assert!(goes_round(&spec("torus:4x4")));
/// assert!(!goes_round(&spec("mesh:4x4")));
/// assert!(!goes_round(&spec("hypercube:3")));
/// ```
pub fn goes_round(topo: &Topology) -> bool {
    Rounds::of(topo).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{parse_spec, SpecDefaults};

    fn rounds(spec: &str) -> Option<Vec<Option<Round>>> {
        let topo = parse_spec(spec, &SpecDefaults::default()).unwrap();
        Rounds::of(&topo).map(|r| r.0)
    }

    #[test]
    fn a_ring_goes_up_and_down_by_its_neighbours() {
        let topo = parse_spec("ring:5", &SpecDefaults::default()).unwrap();
        let ways = rounds("ring:5").unwrap();
        for (l, link) in topo.links().iter().enumerate() {
            let expected = if link.dst == (link.src + 1) % 5 {
                Round::Up
            } else {
                assert_eq!(link.src, (link.dst + 1) % 5);
                Round::Down
            };
            assert_eq!(ways[l], Some(expected), "{link:?}");
        }
    }

    #[test]
    fn only_ring_dimensions_have_rounds() {
        // A torus: every link round a ring, half of them up.
        let torus = rounds("torus:4x3").unwrap();
        assert!(torus.iter().all(Option::is_some));
        let up = torus.iter().filter(|&&r| r == Some(Round::Up)).count();
        assert_eq!(up * 2, torus.len());
        // No ring: a mesh, a hypercube, rings of two, a one-way ring.
        for spec in ["mesh:4x4", "hypercube:3", "torus:2x2", "multi:U4xF4"] {
            assert!(rounds(spec).is_none(), "{spec}");
        }
        // A ring crossed with a fully connected dimension: only the ring's links go round.
        let topo = parse_spec("multi:R4xF4", &SpecDefaults::default()).unwrap();
        let ways = rounds("multi:R4xF4").unwrap();
        for (l, link) in topo.links().iter().enumerate() {
            assert_eq!(ways[l].is_some(), link.src / 4 == link.dst / 4, "{link:?}");
        }
    }

    #[test]
    fn a_failed_npu_leaves_no_rounds() {
        let topo = parse_spec("ring:8", &SpecDefaults::default())
            .unwrap()
            .fail_npus(&[3])
            .unwrap();
        assert!(Rounds::of(&topo).is_none());
    }
}
