//! Composition: one or more collectives matched together as one problem, combining
//! collectives by reversal, All-Reduce as Reduce-Scatter then All-Gather.
//!
//! Phase 1 (reductions): each combining collective's copying dual is matched on the
//! reversed topology and reversed in time (`phases`, which says what every collective is
//! made of): a chunk's broadcast tree becomes its reduction tree, in which every NPU sends
//! its partial sum once, after its subtree's have arrived, and links stay contention-free;
//! so a Reduce-Scatter takes as long as the All-Gather on the reversed topology. The
//! reductions are then compacted (`retime`), which never delays any of them and now and
//! then (where the All-Gather had idle gaps) ends sooner.
//!
//! Phase 2 (copies): copying collectives and All-Reduce's All-Gather half are matched on
//! the topology around the link time phase 1 occupies. An All-Gather chunk is released at
//! its owner either when its own reduction completes (pipelined) or when every reduction
//! has (phased, the paper's composition); both are matched and the faster is kept. On a
//! plain reversal every chunk is reduced near the end, which leaves pipelining little to
//! overlap; so on direct networks the reductions are also taken from a dual whose owners
//! release their chunks a step apart (staggered), reduced one after another.
//!
//! Collectives synthesized together share links without contention: "concurrent" means
//! one matching problem, not separate schedules that would collide on shared links.

use super::fabric::Fabric;
use super::greedy::{match_chunks, ChunkTask, Problem};
use super::order::order_by_start;
use super::phases::{reductions, with_kind, Phases};
use super::replicate::Replicated;
use super::retime::{compact, ready_first};
use super::{SynthOptions, TreeShape};
use crate::budget::MemoryLimit;
use crate::collective::{ChunkId, Collective, CollectiveKind, CollectiveSpec};
use crate::error::{Error, Result};
use crate::schedule::{Schedule, Transfer};
use crate::topology::Topology;
use crate::units::Picos;

/// How the All-Reduces of a synthesis were composed, and what the alternative took.
#[derive(Clone, Debug, PartialEq)]
pub struct AllReduceTimes {
    /// When the last reduction ends (the Reduce-Scatter phase).
    pub reduce_scatter_ps: Picos,
    /// All-Gather trees start as soon as their chunk is reduced.
    pub pipelined_ps: Picos,
    /// All-Gather starts once every chunk is reduced.
    pub phased_ps: Picos,
    /// Whether the pipelined composition was kept (it was strictly faster).
    pub pipelined: bool,
}

/// What `synthesize_concurrent` produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Synthesis {
    /// One schedule per collective, in the order given; together they are contention-free.
    pub schedules: Vec<Schedule>,
    /// Present when some collective is an All-Reduce composed both ways (a replicated
    /// synthesis composes it phased only).
    pub all_reduce: Option<AllReduceTimes>,
}

/// Synthesizes `collectives` (built on `topo`) together: each gets its own schedule, and
/// no link carries two chunks at once across all of them.
pub fn synthesize_concurrent(
    topo: &Topology,
    collectives: &[Collective],
    options: &SynthOptions,
) -> Result<Synthesis> {
    if collectives.is_empty() {
        return Err(Error::Synthesis("no collective to synthesize".into()));
    }
    let specs: Vec<CollectiveSpec> = collectives.iter().map(|c| c.spec().clone()).collect();
    MemoryLimit::default().admit(
        super::memory::synthesis(topo, &specs, options.planned),
        || format!("synthesizing {} on {}", describe(&specs), topo.name()),
    )?;
    if options.replicate {
        return replicated(topo, collectives, options.seed);
    }
    let seed = options.seed;
    let fabric = Fabric::new(topo)?;
    let reversed = topo.reversed();
    let fabric_back = fabric.reversed(topo, &reversed)?;
    let duals = duals(&reversed, collectives)?;
    let reducing = Joint::new(present(&duals)).planned(options.planned, options.shape);
    let halves = all_gather_halves(topo, collectives)?;
    let copied: Vec<Option<&Collective>> = collectives
        .iter()
        .zip(&halves)
        .map(|(c, half)| half.as_ref().or((!c.combining()).then_some(c)))
        .collect();
    let copying = Joint::new(present(&copied)).planned(options.planned, options.shape);

    let reductions = reduce(&fabric, &fabric_back, &reducing, seed, &|_, _| 0)?;
    // Phase 2 on top of some re-timing of the reductions, with chunks released as `release`
    // says; returns (end, reductions, copies).
    let copy = |reductions: Vec<Transfer>, release: &Release| -> Result<Variant> {
        let copies = if copying.is_empty() {
            Vec::new()
        } else {
            let mut problem = copying.problem(release, Vec::new());
            // Reductions that all end before the first copy is released are in no copy's
            // way; reserving them anyway would match the copies another way (on a topology
            // whose NPUs are matched apart, each from its own random stream, reservations
            // make them share one), so a phased All-Gather half would not be the
            // All-Gather synthesized alone.
            let first_release = problem.chunks.iter().map(|c| c.release).min();
            if first_release.is_some_and(|r| r < end_of(&reductions, &[])) {
                problem.reserved = reservations(&fabric, &reductions);
            }
            match_chunks(&fabric, &problem, seed)?
        };
        Ok((end_of(&reductions, &copies), reductions, copies))
    };
    let (reductions, copies, all_reduce) = if halves.iter().any(Option::is_some) {
        let reduced_by = end_of(&reductions, &[]);
        let pipelined = |reduced: Vec<Transfer>| {
            let ready = reduced_at(collectives, &reducing, &reduced);
            copy(reduced, &|i, c| ready[i].get(c).copied().unwrap_or(0))
        };
        // Phased, and pipelined on the compacted reductions and on the list-scheduled
        // ones (each wins somewhere; list scheduling is for single links, not routes
        // through switches): independent matchings, run side by side on the caller's
        // thread pool (rayon's), so that its size bounds them.
        let phased = || {
            copy(reductions.clone(), &|i, _| {
                if halves[i].is_some() {
                    reduced_by
                } else {
                    0
                }
            })
        };
        let listed = || {
            fabric.routes.is_none().then(|| {
                let mut early = reductions.clone();
                ready_first(topo, &mut early)?;
                pipelined(early)
            })
        };
        // Pipelined on the reductions of a dual whose chunks are released one K-th of
        // the phase apart by their index at their owner: mirrored, the owners' chunks
        // are reduced one after another, and each starts its All-Gather while the next
        // is reduced (on a mesh the plain reversal reduces every chunk near the end, and
        // pipelining gains little). Direct networks only, as `listed`: through switches
        // it gained nothing measured and costs two matchings a synthesis.
        let staggered = || -> Result<Option<Variant>> {
            if fabric.routes.is_some() {
                return Ok(None);
            }
            let step = |i: usize| {
                let k = collectives[i].spec().chunks_per_npu.max(1) as Picos;
                reduced_by.saturating_mul(STAGGER_NUM) / STAGGER_DEN / k
            };
            let release = |i: usize, c: ChunkId| {
                let k = collectives[i].spec().chunks_per_npu.max(1);
                ((c % k) as Picos).saturating_mul(step(i))
            };
            let early = reduce(&fabric, &fabric_back, &reducing, seed, &release)?;
            pipelined(early).map(Some)
        };
        let ((phased, staggered), (compacted, listed)) = rayon::join(
            || rayon::join(phased, staggered),
            || rayon::join(|| pipelined(reductions.clone()), listed),
        );
        let (phased, compacted) = (phased?, compacted?);
        let pipelined = [listed.transpose()?, staggered?]
            .into_iter()
            .flatten()
            .fold(compacted, |best, v| if v.0 < best.0 { v } else { best });
        let times = AllReduceTimes {
            reduce_scatter_ps: reduced_by,
            pipelined_ps: pipelined.0,
            phased_ps: phased.0,
            pipelined: pipelined.0 < phased.0,
        };
        let (_, reductions, copies) = if times.pipelined { pipelined } else { phased };
        (reductions, copies, Some(times))
    } else {
        let (_, reductions, copies) = copy(reductions, &|_, _| 0)?;
        (reductions, copies, None)
    };

    // The transfers are most of the memory at scale: moved, not copied, where one
    // collective's chunks were matched alone, and each list sized once otherwise.
    let mut transfers: Vec<Vec<Transfer>> = vec![Vec::new(); collectives.len()];
    for (joint, mut list) in [(&reducing, reductions), (&copying, copies)] {
        match joint.single() {
            Some(i) if transfers[i].is_empty() => transfers[i] = list,
            Some(i) => {
                transfers[i].reserve_exact(list.len());
                transfers[i].append(&mut list);
            }
            None => {
                let mut counts = vec![0; collectives.len()];
                for t in &list {
                    counts[joint.locate(t.chunk()).0] += 1;
                }
                for (own, count) in transfers.iter_mut().zip(counts) {
                    own.reserve_exact(count);
                }
                for t in list {
                    let (i, chunk) = joint.locate(t.chunk());
                    let mut t = t;
                    t.set_chunk(chunk);
                    transfers[i].push(t);
                }
            }
        }
    }
    let schedules = collectives
        .iter()
        .zip(transfers)
        .map(|(c, mut ts)| {
            order_by_start(&mut ts);
            Schedule::new(topo.name(), c.spec().clone(), c.chunk_bytes(), ts)
        })
        .collect();
    Ok(Synthesis {
        schedules,
        all_reduce,
    })
}

/// One collective synthesized replicated (`replicate`), held.
fn replicated(topo: &Topology, collectives: &[Collective], seed: u64) -> Result<Synthesis> {
    let [collective] = collectives else {
        return Err(Error::Synthesis(
            "a replicated synthesis makes one collective at a time".into(),
        ));
    };
    let replicated = Replicated::new(topo, collective, seed)?;
    let mut transfers = Vec::with_capacity(replicated.transfers() as usize);
    replicated.emit(&mut |t| {
        transfers.push(t);
        Ok(())
    })?;
    Ok(Synthesis {
        schedules: vec![Schedule::new(
            topo.name(),
            collective.spec().clone(),
            collective.chunk_bytes(),
            transfers,
        )],
        all_reduce: None,
    })
}

/// The collectives as a memory estimate's error names them.
pub(crate) fn describe(specs: &[CollectiveSpec]) -> String {
    let each: Vec<String> = specs
        .iter()
        .map(|s| {
            format!(
                "{} over {} NPUs with K={}",
                s.kind,
                s.npus.len(),
                s.chunks_per_npu
            )
        })
        .collect();
    each.join(" and ")
}

/// How far apart a staggered dual releases an owner's chunks: 3/2 of the phase over K (a
/// gap past what the matching fills closes up when the reductions are compacted; 1/2 of
/// it gained a third of what this does on meshes).
const STAGGER_NUM: Picos = 3;
const STAGGER_DEN: Picos = 2;

/// When chunk `c` of the caller's collective `i` becomes available for copying.
type Release<'a> = dyn Fn(usize, ChunkId) -> Picos + Sync + 'a;

/// One way of finishing phase 2: (when everything ends, reductions, copies).
type Variant = (Picos, Vec<Transfer>, Vec<Transfer>);

/// Per collective, on the reversed topology: the copying dual whose time reversal does
/// its reductions (None for copying collectives).
pub(super) fn duals(
    reversed: &Topology,
    collectives: &[Collective],
) -> Result<Vec<Option<Collective>>> {
    collectives
        .iter()
        .map(|c| match Phases::of(c.kind()).reduce {
            Some(kind) => Collective::new(reversed, with_kind(c.spec(), kind)).map(Some),
            None => Ok(None),
        })
        .collect()
}

/// Per collective: for an All-Reduce, the All-Gather that spreads its reduced chunks.
fn all_gather_halves(
    topo: &Topology,
    collectives: &[Collective],
) -> Result<Vec<Option<Collective>>> {
    collectives
        .iter()
        .map(|c| match Phases::of(c.kind()) {
            phases @ Phases {
                copy: Some(kind), ..
            } if phases.both() => Collective::new(topo, with_kind(c.spec(), kind)).map(Some),
            _ => Ok(None),
        })
        .collect()
}

/// (index, collective) of the entries that are present.
fn present<'a, C: std::borrow::Borrow<Collective> + 'a>(
    list: &'a [Option<C>],
) -> Vec<(usize, &'a Collective)> {
    list.iter()
        .enumerate()
        .filter_map(|(i, c)| c.as_ref().map(|c| (i, c.borrow())))
        .collect()
}

/// Phase 1: matches the copying duals on the reversed topology and returns their time
/// reversal as reductions (joint chunk ids), compacted.
fn reduce(
    fabric: &Fabric<'_>,
    reversed: &Fabric<'_>,
    duals: &Joint<'_>,
    seed: u64,
    release: &Release,
) -> Result<Vec<Transfer>> {
    if duals.is_empty() {
        return Ok(Vec::new());
    }
    let copies = match_chunks(reversed, &duals.problem(release, Vec::new()), seed)?;
    let (mut reductions, _) = reductions(copies);
    compact(fabric, &mut reductions);
    Ok(reductions)
}

/// When the last of these transfers ends.
fn end_of(a: &[Transfer], b: &[Transfer]) -> Picos {
    a.iter().chain(b).map(|t| t.end_ps).max().unwrap_or(0)
}

/// Per collective, per chunk: when its owner holds the whole sum (All-Reduces only; other
/// collectives get an empty list). `reductions` use `reducing`'s joint chunk ids.
fn reduced_at(
    collectives: &[Collective],
    reducing: &Joint<'_>,
    reductions: &[Transfer],
) -> Vec<Vec<Picos>> {
    let mut ready: Vec<Vec<Picos>> = collectives
        .iter()
        .map(|c| match c.kind() {
            CollectiveKind::AllReduce => vec![0; c.chunk_count()],
            _ => Vec::new(),
        })
        .collect();
    for t in reductions {
        let (i, chunk) = reducing.locate(t.chunk());
        let c = &collectives[i];
        if !ready[i].is_empty() && t.dst() == c.npus()[chunk / c.spec().chunks_per_npu] {
            ready[i][chunk] = ready[i][chunk].max(t.end_ps);
        }
    }
    ready
}

/// Per physical link of the fabric: the intervals the given transfers occupy, sorted
/// (nothing at all when there are no transfers).
fn reservations(fabric: &Fabric<'_>, transfers: &[Transfer]) -> Vec<Vec<(Picos, Picos)>> {
    if transfers.is_empty() {
        return Vec::new();
    }
    let mut reserved = vec![Vec::new(); fabric.physical_links()];
    for t in transfers {
        fabric.for_each_link(t.src(), t.dst(), |l| {
            reserved[l].push((t.start_ps, t.end_ps))
        });
    }
    reserved.iter_mut().for_each(|r| r.sort_unstable());
    reserved
}

/// Several collectives' chunks numbered one after another, for one matching.
pub(super) struct Joint<'a> {
    /// (index among the caller's collectives, the collective whose chunks are matched).
    parts: Vec<(usize, &'a Collective)>,
    /// First joint chunk id of each part, and the total at the end.
    offsets: Vec<usize>,
    /// Distinct chunk sizes, and each part's index among them.
    class_bytes: Vec<f64>,
    class: Vec<usize>,
    /// Whether the chunks' ways are planned (`Problem::planned`), and how.
    planned: bool,
    shape: TreeShape,
}

impl<'a> Joint<'a> {
    pub(super) fn new(parts: Vec<(usize, &'a Collective)>) -> Joint<'a> {
        let mut offsets = vec![0];
        let mut class_bytes: Vec<f64> = Vec::new();
        let mut class = Vec::new();
        for (_, c) in &parts {
            offsets.push(offsets.last().copied().unwrap_or(0) + c.chunk_count());
            let bytes = c.chunk_bytes();
            class.push(match class_bytes.iter().position(|&b| b == bytes) {
                Some(k) => k,
                None => {
                    class_bytes.push(bytes);
                    class_bytes.len() - 1
                }
            });
        }
        Joint {
            parts,
            offsets,
            class_bytes,
            class,
            planned: false,
            shape: TreeShape::Balanced,
        }
    }

    /// The same, its chunks' ways planned where `planned` (`Problem::planned`), trees
    /// grown `shape`.
    pub(super) fn planned(self, planned: bool, shape: TreeShape) -> Joint<'a> {
        Joint {
            planned,
            shape,
            ..self
        }
    }

    /// The matching problem; `release(i, c)` says when chunk `c` of the caller's
    /// collective `i` becomes available.
    pub(super) fn problem(
        &self,
        release: &Release,
        reserved: Vec<Vec<(Picos, Picos)>>,
    ) -> Problem<'a> {
        let chunks = self
            .parts
            .iter()
            .zip(&self.class)
            .flat_map(|(&(i, c), &class)| {
                (0..c.chunk_count()).map(move |id| ChunkTask {
                    pre: c.pre(id),
                    post: c.post(id),
                    class,
                    release: release(i, id),
                })
            })
            .collect();
        Problem {
            chunks,
            class_bytes: self.class_bytes.clone(),
            reserved,
            planned: self.planned,
            shape: self.shape,
        }
    }

    fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The caller's index of the one collective matched, whose joint chunk ids are its
    /// own; None for several (or none).
    fn single(&self) -> Option<usize> {
        match self.parts[..] {
            [(i, _)] => Some(i),
            _ => None,
        }
    }

    /// (caller's collective index, its chunk id) of a joint chunk id.
    fn locate(&self, chunk: ChunkId) -> (usize, ChunkId) {
        let part = self.offsets.partition_point(|&o| o <= chunk) - 1;
        (self.parts[part].0, chunk - self.offsets[part])
    }
}
