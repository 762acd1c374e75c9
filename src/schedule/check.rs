//! The schedule checker: replays a schedule on a topology, independently of whatever made
//! it, and rejects it unless it is a correct, contention-free algorithm.
//!
//! A chunk's content on an NPU is the set of contributions it holds: for copying
//! collectives one bit (the whole chunk), for combining collectives one bit per
//! contributor. A copy overwrites the destination's content with what the source held when
//! the transfer started; a reduce adds it, and adding a contribution twice is an error.

use super::{route_time_ps, Op, Schedule, Transfer};
use crate::budget::{self, MemoryLimit};
use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::topology::{format_npus, LinkId, NpuId, RouteTree, Topology};
use crate::units::{ps_to_us, Picos};
use std::collections::HashMap;

/// What a passing check found.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// When the last transfer ends.
    pub collective_time_ps: Picos,
    pub transfers: usize,
}

/// Checks a timed schedule: every transfer uses an existing link, or a route through
/// switches (`Topology::route`, held cut-through), and takes exactly its alpha + size /
/// bandwidth (`route_time_ps`), no link carries two chunks at once, every sender holds
/// the chunk when it sends, and every postcondition holds at the end.
pub fn check(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    let expected = collective.chunk_bytes();
    if (schedule.chunk_bytes - expected).abs() > 1e-9 * expected.max(1.0) {
        return Err(Error::Schedule(format!(
            "chunk_bytes is {} but the collective's chunks are {expected} bytes",
            schedule.chunk_bytes
        )));
    }
    let mut per_link: Vec<Vec<Occupancy<usize>>> = vec![Vec::new(); topo.links().len()];
    let mut routes = Routes::new(topo);
    for (i, t) in schedule.transfers.iter().enumerate() {
        check_static(i, t, &collective, topo)?;
        let route = routes.between(t.src, t.dst).ok_or_else(|| {
            fail(
                i,
                t,
                format!(
                    "there is no link {}from NPU {} to NPU {}",
                    if topo.has_switches() {
                        "or route through switches "
                    } else {
                        ""
                    },
                    t.src,
                    t.dst
                ),
            )
        })?;
        let needed = route_time_ps(topo, route, schedule.chunk_bytes)
            .map_err(|e| fail(i, t, e.to_string()))?;
        if t.end_ps.checked_sub(t.start_ps) != Some(needed) {
            return Err(fail(
                i,
                t,
                format!(
                    "takes {:.6} us but the {} needs {:.6} us",
                    ps_to_us(t.end_ps.saturating_sub(t.start_ps)),
                    if route.len() == 1 { "link" } else { "route" },
                    ps_to_us(needed)
                ),
            ));
        }
        for &link in route {
            per_link[link].push((t.start_ps, t.end_ps, i));
        }
    }
    if let Some((a, b)) = first_overlap(per_link) {
        let (ta, tb) = (&schedule.transfers[a], &schedule.transfers[b]);
        return Err(fail(
            b,
            tb,
            format!(
                "starts while transfer {a} (chunk {}) still occupies the link until {:.6} us",
                ta.chunk,
                ps_to_us(ta.end_ps)
            ),
        ));
    }
    replay(schedule, &collective, topo.npus())
}

/// Checks schedules meant to run at the same time on `topo` (as
/// `synth::synthesize_concurrent` makes them): each must pass `check`, and no link may
/// carry two chunks at once across all of them.
pub fn check_concurrent(schedules: &[Schedule], topo: &Topology) -> Result<Vec<CheckReport>> {
    let reports = schedules
        .iter()
        .enumerate()
        .map(|(i, s)| check(s, topo).map_err(|e| Error::Schedule(format!("schedule {i}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let mut per_link: Vec<Vec<Occupancy<(usize, usize)>>> = vec![Vec::new(); topo.links().len()];
    let mut routes = Routes::new(topo);
    for (s, schedule) in schedules.iter().enumerate() {
        for (i, t) in schedule.transfers.iter().enumerate() {
            let route = routes
                .between(t.src, t.dst)
                .expect("check found every transfer's route");
            for &link in route {
                per_link[link].push((t.start_ps, t.end_ps, (s, i)));
            }
        }
    }
    if let Some(((sa, a), (sb, b))) = first_overlap(per_link) {
        let (ta, tb) = (&schedules[sa].transfers[a], &schedules[sb].transfers[b]);
        return Err(Error::Schedule(format!(
            "schedule {sb}, {}: starts while transfer {a} of schedule {sa} (chunk {}) still occupies the link until {:.6} us",
            describe(b, tb),
            ta.chunk,
            ps_to_us(ta.end_ps)
        )));
    }
    Ok(reports)
}

/// The links each NPU pair's transfers hold (`Topology::route`), looked up once per pair.
struct Routes<'a> {
    topo: &'a Topology,
    /// The last direct link found (most transfers use one: no map lookup for them).
    direct: [LinkId; 1],
    known: HashMap<(NpuId, NpuId), Option<Vec<LinkId>>>,
    trees: HashMap<NpuId, RouteTree>,
}

impl<'a> Routes<'a> {
    fn new(topo: &'a Topology) -> Routes<'a> {
        Routes {
            topo,
            direct: [0],
            known: HashMap::new(),
            trees: HashMap::new(),
        }
    }

    fn between(&mut self, src: NpuId, dst: NpuId) -> Option<&[LinkId]> {
        let topo = self.topo;
        if let Some(l) = topo.link_between(src, dst) {
            self.direct = [l];
            return Some(&self.direct);
        }
        if !topo.has_switches() {
            return None;
        }
        let trees = &mut self.trees;
        self.known
            .entry((src, dst))
            .or_insert_with(|| {
                trees
                    .entry(src)
                    .or_insert_with(|| topo.route_tree(src))
                    .route_to(topo, dst)
            })
            .as_deref()
    }
}

/// (start, end, transfer) of one transfer on a link.
type Occupancy<Id> = (Picos, Picos, Id);

/// The first pair of intervals (earlier, later) that overlap on some link, if any.
fn first_overlap<Id: Copy + Ord>(per_link: Vec<Vec<Occupancy<Id>>>) -> Option<(Id, Id)> {
    per_link.into_iter().find_map(|mut list| {
        list.sort_unstable();
        list.windows(2)
            .find(|w| w[1].0 < w[0].1)
            .map(|w| (w[0].2, w[1].2))
    })
}

/// Checks only the data flow of a schedule whose times are an order, not a promise (a
/// baseline whose sends the simulator routes and times): NPUs and chunks exist, every
/// sender holds the chunk when it sends in (start, end) order, and every postcondition holds.
pub fn check_data_flow(schedule: &Schedule, topo: &Topology) -> Result<CheckReport> {
    let collective = collective_of(schedule, topo)?;
    for (i, t) in schedule.transfers.iter().enumerate() {
        check_static(i, t, &collective, topo)?;
        if t.end_ps <= t.start_ps {
            return Err(fail(i, t, "does not end after it starts".into()));
        }
    }
    replay(schedule, &collective, topo.npus())
}

/// The schedule's collective, built once the checker's memory fits the limit.
fn collective_of(schedule: &Schedule, topo: &Topology) -> Result<Collective> {
    let spec = &schedule.collective;
    let transfers = schedule.transfers.len() as u64;
    let estimate =
        budget::collective(spec).saturating_add(budget::check(spec, topo.npus(), transfers));
    MemoryLimit::default().admit(estimate, || {
        format!(
            "checking a {} schedule over {} NPUs with K={} ({transfers} transfers)",
            spec.kind,
            spec.npus.len(),
            spec.chunks_per_npu
        )
    })?;
    Collective::new(topo, spec.clone())
        .map_err(|e| Error::Schedule(format!("its collective is not valid here: {e}")))
}

fn fail(i: usize, t: &Transfer, what: String) -> Error {
    Error::Schedule(format!("{}: {what}", describe(i, t)))
}

fn describe(i: usize, t: &Transfer) -> String {
    format!(
        "transfer {i} (chunk {}, NPU {} -> {}, {:.6}-{:.6} us)",
        t.chunk,
        t.src,
        t.dst,
        ps_to_us(t.start_ps),
        ps_to_us(t.end_ps)
    )
}

fn check_static(i: usize, t: &Transfer, collective: &Collective, topo: &Topology) -> Result<()> {
    if t.chunk >= collective.chunks().len() {
        return Err(fail(
            i,
            t,
            format!(
                "the collective has chunks 0..{}",
                collective.chunks().len() - 1
            ),
        ));
    }
    if t.src >= topo.npus() || t.dst >= topo.npus() {
        return Err(fail(
            i,
            t,
            format!("the topology has NPUs 0..{}", topo.npus() - 1),
        ));
    }
    if t.src == t.dst {
        return Err(fail(i, t, "source and destination are the same NPU".into()));
    }
    if t.op == Op::Reduce && !collective.combining() {
        return Err(fail(
            i,
            t,
            format!("{} copies chunks; it has no reductions", collective.kind()),
        ));
    }
    Ok(())
}

/// Per-(NPU, chunk) contribution sets, stored as bit words in one flat array.
struct Contents {
    /// First word of each chunk inside an NPU's block.
    offset: Vec<usize>,
    words_per_npu: usize,
    bits: Vec<u64>,
}

impl Contents {
    fn new(collective: &Collective, npus: usize) -> Contents {
        let mut offset = Vec::with_capacity(collective.chunks().len() + 1);
        let mut words = 0;
        for c in collective.chunks() {
            offset.push(words);
            let contributors = if collective.combining() {
                c.pre.len()
            } else {
                1
            };
            words += contributors.div_ceil(64);
        }
        offset.push(words);
        let mut contents = Contents {
            offset,
            words_per_npu: words,
            bits: vec![0; words * npus],
        };
        for (id, c) in collective.chunks().iter().enumerate() {
            for (j, &npu) in c.pre.iter().enumerate() {
                let bit = if collective.combining() { j } else { 0 };
                contents.get_mut(npu, id)[bit / 64] |= 1 << (bit % 64);
            }
        }
        contents
    }

    fn range(&self, npu: usize, chunk: usize) -> std::ops::Range<usize> {
        let base = npu * self.words_per_npu;
        base + self.offset[chunk]..base + self.offset[chunk + 1]
    }

    fn get(&self, npu: usize, chunk: usize) -> &[u64] {
        &self.bits[self.range(npu, chunk)]
    }

    fn get_mut(&mut self, npu: usize, chunk: usize) -> &mut [u64] {
        let r = self.range(npu, chunk);
        &mut self.bits[r]
    }
}

fn replay(schedule: &Schedule, collective: &Collective, npus: usize) -> Result<CheckReport> {
    let mut contents = Contents::new(collective, npus);
    // Arrivals at time t land before departures at t, so a chunk can be forwarded the
    // moment it arrives.
    let mut events: Vec<(Picos, bool, usize)> = schedule
        .transfers
        .iter()
        .enumerate()
        .flat_map(|(i, t)| [(t.start_ps, true, i), (t.end_ps, false, i)])
        .collect();
    events.sort_unstable();
    let mut in_flight: Vec<Option<Vec<u64>>> = vec![None; schedule.transfers.len()];
    for (_, departs, i) in events {
        let t = &schedule.transfers[i];
        if departs {
            let held = contents.get(t.src, t.chunk);
            if held.iter().all(|&w| w == 0) {
                return Err(fail(
                    i,
                    t,
                    format!(
                        "NPU {} does not hold chunk {} when it sends",
                        t.src, t.chunk
                    ),
                ));
            }
            in_flight[i] = Some(held.to_vec());
            continue;
        }
        // Every transfer ends after it starts (checked above), so it has departed.
        let Some(data) = in_flight[i].take() else {
            return Err(fail(i, t, "arrives before it departs".into()));
        };
        let dst = contents.get_mut(t.dst, t.chunk);
        match t.op {
            Op::Copy => dst.copy_from_slice(&data),
            Op::Reduce => {
                if dst.iter().zip(&data).any(|(a, b)| a & b != 0) {
                    return Err(fail(
                        i,
                        t,
                        format!(
                            "NPU {} would count a contribution to chunk {} twice",
                            t.dst, t.chunk
                        ),
                    ));
                }
                dst.iter_mut().zip(&data).for_each(|(a, b)| *a |= b);
            }
        }
    }
    for (id, c) in collective.chunks().iter().enumerate() {
        let contributors = if collective.combining() {
            c.pre.len()
        } else {
            1
        };
        let lacking: Vec<usize> = c
            .post
            .iter()
            .copied()
            .filter(|&n| {
                let held = contents.get(n, id);
                (0..contributors).any(|b| held[b / 64] & (1 << (b % 64)) == 0)
            })
            .collect();
        if !lacking.is_empty() {
            let who = match lacking.as_slice() {
                [one] => format!("NPU {one} lacks"),
                many => format!("NPUs {} lack", format_npus(many)),
            };
            return Err(Error::Schedule(format!(
                "at the end, {who} chunk {id}{}",
                if collective.combining() {
                    " (or some of its contributions)"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(CheckReport {
        collective_time_ps: schedule.collective_time_ps(),
        transfers: schedule.transfers.len(),
    })
}
