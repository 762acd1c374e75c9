//! Streamed synthesis: the transfers handed to a sink in start order as they are final,
//! the schedule never held, for schedules too large to hold (a 200x200 mesh's All-Gather
//! makes 1.6e9 transfers, its All-Reduce twice as many).
//!
//! A copying collective is matched straight into the sink (the matcher's outbox hands
//! each transfer on once its arrival settles it). A combining collective's reductions are
//! the time reversal of its copying dual's matching on the reversed topology (`compose`),
//! whose last copy is the first reduction: the dual is matched into a spool on disk
//! (`schedule::spool`) and read back from its last transfer. An All-Reduce is composed
//! phased, as the paper composes it: its All-Gather half starts when the last reduction
//! ends, so it needs no reservations around the reductions and is matched on its own, at
//! the same time as the dual (two matchings on the caller's thread pool), into a second
//! spool, and handed out after the reductions shifted by their end. Where every link has
//! a twin the other way as fast and every route through switches is its reverse's taken
//! back (meshes, tori, rings, rail-optimized clusters: `Fabric::mirrors_itself`), the
//! dual's matching on the reversed topology is itself an All-Gather on the topology, and
//! is used for both halves: one matching, read back twice. The held synthesis
//! (`synthesize_concurrent`) also compacts the reductions and tries the pipelined
//! composition, which need the reductions held; the streamed one does neither.

use super::compose::{describe, duals, Joint};
use super::fabric::Fabric;
use super::greedy::match_chunks_into;
use super::outbox::Sink;
use super::phases::{reverse_in_time, with_kind, Phases};
use super::replicate::Replicated;
use super::SynthOptions;
use crate::budget::MemoryLimit;
use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::schedule::spool::Spool;
use crate::topology::Topology;
use crate::units::Picos;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering as Atomic};

/// How many transfers a matching spools between calls of the progress callback.
const PROGRESS_EVERY: u64 = 1 << 20;

/// What a streamed synthesis made (its transfers went to the sink).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streamed {
    pub transfers: u64,
    /// When the last transfer ends.
    pub collective_time_ps: Picos,
}

/// Synthesizes a copying `collective` on `topo` without holding its schedule: each
/// transfer goes to `sink` in start order (ties in the order they were made) as soon as
/// it is final, so the memory held is the matching's (bits per (NPU, chunk), per link
/// pools), whatever the number of transfers. The transfers are those `synthesize` makes
/// with the same seed. For copying collectives whose chunks cross only NPUs that want
/// them (All-Gather and Broadcast over every alive NPU); a combining collective needs a
/// spool ([`prepare_streamed`]), and relayed chunks are pruned over the whole list.
pub fn synthesize_streamed(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
    sink: &mut Sink<'_>,
) -> Result<Streamed> {
    if collective.combining() {
        return Err(Error::Synthesis(format!(
            "{} is streamed through a spool on disk: its reductions are the time reversal \
             of a whole matching (synth::prepare_streamed)",
            collective.kind()
        )));
    }
    if options.replicate {
        return emit_replicated(&Replicated::new(topo, collective, options.seed)?, sink);
    }
    admit_streamed(topo, collective)?;
    match_copies(topo, collective, options.seed, sink)
}

/// Every transfer of a replicated synthesis to `sink`, in start order.
fn emit_replicated(replicated: &Replicated, sink: &mut Sink<'_>) -> Result<Streamed> {
    replicated.emit(sink)?;
    Ok(Streamed {
        transfers: replicated.transfers(),
        collective_time_ps: replicated.end_ps,
    })
}

/// A streamed synthesis ready to hand out its transfers ([`Prepared::emit`]): for a
/// combining collective its matchings made and spooled to disk, for a copying one nothing
/// yet (its matching runs as it hands them out).
pub struct Prepared<'a> {
    topo: &'a Topology,
    collective: &'a Collective,
    seed: u64,
    spools: Option<Spools>,
    /// A replicated synthesis: one node's transfers, held (they are few).
    replicated: Option<Replicated>,
}

/// A combining collective's matchings on disk.
struct Spools {
    /// The copying dual's, on the reversed topology.
    dual: Spool,
    all_gather: Half,
}

/// An All-Reduce's All-Gather half.
enum Half {
    /// Not an All-Reduce.
    None,
    /// Matched on its own, from time 0.
    Matched(Box<Spool>),
    /// The dual's matching, copies over the same links (see `Fabric::mirrors_itself`).
    Dual,
}

/// Prepares the streamed synthesis of `collective` on `topo`: a combining collective's
/// matchings are made now (an All-Reduce's two side by side on the caller's thread pool,
/// where they are not one: `Fabric::mirrors_itself`) and spooled to temporary files
/// beside `beside`, removed when the result is dropped; `progress` hears the transfers
/// spooled so far, now and then. Refused where the matchings' memory passes the limit,
/// and for collectives whose chunks cross NPUs that do not want them.
pub fn prepare_streamed<'a>(
    topo: &'a Topology,
    collective: &'a Collective,
    options: &SynthOptions,
    beside: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Prepared<'a>> {
    let mut prepared = Prepared {
        topo,
        collective,
        seed: options.seed,
        spools: None,
        replicated: None,
    };
    if options.replicate {
        prepared.replicated = Some(Replicated::new(topo, collective, options.seed)?);
        return Ok(prepared);
    }
    admit_streamed(topo, collective)?;
    if !collective.combining() {
        return Ok(prepared);
    }
    let phases = Phases::of(collective.kind());
    let all_reduce = phases.both();
    let fabric = Fabric::new(topo)?;
    let matched_half = all_reduce && !fabric.mirrors_itself();
    let reversed = topo.reversed();
    let dual = duals(&reversed, std::slice::from_ref(collective))?
        .pop()
        .flatten()
        .expect("a combining collective has a copying dual");
    let half = phases
        .copy
        .filter(|_| matched_half)
        .map(|kind| Collective::new(topo, with_kind(collective.spec(), kind)))
        .transpose()?;
    let back = fabric.reversed(topo, &reversed)?;
    let spooled = AtomicU64::new(0);
    let spool = |fabric: &Fabric<'_>, copies: &Collective, name: &str| -> Result<Spool> {
        let mut spool = Spool::create(&beside.with_extension(name))?;
        let joint = Joint::new(vec![(0, copies)]);
        let problem = joint.problem(&|_, _| 0, Vec::new());
        match_chunks_into(fabric, &problem, options.seed, &mut |t| {
            spool.push(&t)?;
            if spool.transfers() % PROGRESS_EVERY == 0 {
                progress(spooled.fetch_add(PROGRESS_EVERY, Atomic::Relaxed) + PROGRESS_EVERY);
            }
            Ok(())
        })?;
        Ok(spool)
    };
    let (dual, all_gather) = rayon::join(
        || spool(&back, &dual, "reductions"),
        || {
            half.as_ref()
                .map(|h| spool(&fabric, h, "all-gather"))
                .transpose()
        },
    );
    let all_gather = match all_gather? {
        Some(spool) => Half::Matched(Box::new(spool)),
        None if all_reduce => Half::Dual,
        None => Half::None,
    };
    prepared.spools = Some(Spools {
        dual: dual?,
        all_gather,
    });
    Ok(prepared)
}

impl Prepared<'_> {
    /// Transfers already made and spooled (0 for a copying collective).
    pub fn spooled(&self) -> u64 {
        self.spools.as_ref().map_or(0, |s| match &s.all_gather {
            Half::Matched(half) => s.dual.transfers() + half.transfers(),
            Half::None | Half::Dual => s.dual.transfers(),
        })
    }

    /// Hands every transfer to `sink` in start order: the reductions (the dual's matching
    /// read back last first, reversed in time and direction), then an All-Reduce's copies
    /// from when the last reduction ends; or a copying collective's matching as it runs.
    pub fn emit(self, sink: &mut Sink<'_>) -> Result<Streamed> {
        if let Some(replicated) = &self.replicated {
            return emit_replicated(replicated, sink);
        }
        let Some(Spools {
            mut dual,
            all_gather,
        }) = self.spools
        else {
            return match_copies(self.topo, self.collective, self.seed, sink);
        };
        let reduced_by = dual.end_ps();
        let longest = dual.longest_ps();
        let mut transfers = dual.transfers();
        let give_back = !matches!(all_gather, Half::Dual);
        reverse_in_time(dual.backwards(give_back)?, reduced_by, longest, sink)?;
        let mut collective_time_ps = reduced_by;
        let mut copies = match all_gather {
            Half::None => None,
            Half::Matched(spool) => Some(*spool),
            Half::Dual => Some(dual),
        };
        if let Some(copies) = &mut copies {
            transfers += copies.transfers();
            collective_time_ps += copies.end_ps();
            for t in copies.forwards()? {
                sink(Phases::after(t?, reduced_by))?;
            }
        }
        Ok(Streamed {
            transfers,
            collective_time_ps,
        })
    }
}

/// How many matchings a streamed synthesis of `collective` on `topo` spools before it
/// hands out its first transfer: none for a copying collective (matched as it hands them
/// out), one for a combining one, two for an All-Reduce whose halves are matched apart
/// (where a matching on the reversed topology is not one on `topo`, see
/// `Fabric::mirrors_itself`).
pub fn spooled_matchings(topo: &Topology, collective: &Collective) -> u64 {
    let phases = Phases::of(collective.kind());
    match phases.reduce {
        Some(_) if phases.both() && !Fabric::new(topo).is_ok_and(|f| f.mirrors_itself()) => 2,
        Some(_) => 1,
        None => 0,
    }
}

/// Refuses the streamed synthesis of `collective` on `topo` where its matchings' memory
/// (two at once for an All-Reduce whose halves are matched apart) passes the limit; a
/// caller about to start other long work beside the synthesis asks first.
pub fn admit_streamed(topo: &Topology, collective: &Collective) -> Result<()> {
    let spec = collective.spec();
    let matchings = spooled_matchings(topo, collective).max(1);
    let one = super::memory::streamed_synthesis(topo, spec);
    MemoryLimit::default().admit(one.saturating_mul(matchings), || {
        format!(
            "synthesizing {} on {} (streamed)",
            describe(std::slice::from_ref(spec)),
            topo.name()
        )
    })
}

/// A copying collective matched straight into `sink`.
fn match_copies(
    topo: &Topology,
    collective: &Collective,
    seed: u64,
    sink: &mut Sink<'_>,
) -> Result<Streamed> {
    let fabric = Fabric::new(topo)?;
    let joint = Joint::new(vec![(0, collective)]);
    let problem = joint.problem(&|_, _| 0, Vec::new());
    let (transfers, collective_time_ps) = match_chunks_into(&fabric, &problem, seed, sink)?;
    Ok(Streamed {
        transfers,
        collective_time_ps,
    })
}
