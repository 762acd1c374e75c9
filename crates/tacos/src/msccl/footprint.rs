//! What executing a program costs the verifier, the executor model and the timing,
//! estimated from its counts before any of them allocates, so that a file whose counts
//! are legal but huge (`s_chunks`, `nchunksperloop` or `cnt` near 2^31, tens of thousands
//! of threadblocks on a GPU) is refused with the count to blame instead of exhausting
//! memory.
//!
//! The estimate is in bytes, from the sizes of the tables they build; it is an upper
//! bound up to small constants, and time follows it (each entry is visited a bounded
//! number of times).

use super::{Buf, Layout, Program};
use crate::budget::MemoryLimit;
use crate::collective::CollectiveKind;
use crate::error::{Error, Result};

/// The most bytes executing one program may take: 2 GiB. The programs the lowering writes
/// for the executor's limits take tens of megabytes up to a few hundred (128 GPUs).
pub const MAX_BYTES: u64 = 2 << 30;

/// The cost of executing `program` and checking it as `kind`, by what it comes from,
/// largest first.
pub fn estimate(program: &Program, kind: Option<CollectiveKind>) -> Vec<(u64, String)> {
    let sat = |a: u64, b: u64| a.saturating_mul(b);
    let steps: u64 = program.steps() as u64;
    let tbs: u64 = program
        .gpus
        .iter()
        .map(|g| g.threadblocks.len() as u64)
        .sum();
    let (widest, width) = program
        .gpus
        .iter()
        .enumerate()
        .map(|(g, gpu)| (g, gpu.threadblocks.len() as u64))
        .max_by_key(|&(_, w)| w)
        .unwrap_or((0, 0));
    let squares: u64 = program
        .gpus
        .iter()
        .map(|g| sat(g.threadblocks.len() as u64, g.threadblocks.len() as u64))
        .fold(0, u64::saturating_add);
    let chunks_moved: u64 = program
        .gpus
        .iter()
        .flat_map(|g| &g.threadblocks)
        .flat_map(|t| &t.steps)
        .map(|s| u64::from(s.count))
        .fold(0, u64::saturating_add);
    let (scratch_gpu, scratch) = program
        .gpus
        .iter()
        .enumerate()
        .map(|(g, gpu)| (g, gpu.scratch_chunks as u64))
        .max_by_key(|&(_, s)| s)
        .unwrap_or((0, 0));
    let ranks = program.gpus.len() as u64;
    let mut parts = vec![
        (
            sat(steps, 96),
            format!("{steps} steps (the executor model's tables)"),
        ),
        (
            // Clocks per threadblock, per message and per signalling step, and receive
            // frontiers, each as wide as a GPU's threadblocks.
            sat(sat(tbs, 4).saturating_add(sat(steps, 24)), width)
                .saturating_add(sat(squares, 8)),
            format!("{width} threadblocks on GPU {widest} with {steps} steps in all (clocks as wide as a GPU's threadblocks)"),
        ),
        (
            // Two slots accessed and one value carried per chunk.
            sat(chunks_moved, 48),
            format!("{chunks_moved} chunks moved in all (the sum of cnt)"),
        ),
        (
            sat(scratch, sat(ranks, 12).saturating_add(32)),
            format!("s_chunks {scratch} on GPU {scratch_gpu}, for {ranks} GPUs"),
        ),
    ];
    if let Some(kind) = kind {
        if let Some((bytes, layout)) = replay_cost(program, kind) {
            let tries = if layout.kind().has_root() && program.root.is_none() {
                ranks
            } else {
                1
            };
            parts.push((
                sat(bytes, tries),
                format!(
                    "nchunksperloop {} on {ranks} GPUs ({} chunks of {})",
                    program.nchunksperloop,
                    layout.chunks(),
                    layout.kind()
                ),
            ));
        }
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    parts
}

/// What replaying data through `program` as `kind` costs, in its costlier placement (of
/// those it declares), with that placement's layout: every rank's input and output slots
/// (a value of 12 bytes each), one GPU's access histories at a time (40 bytes a slot), and
/// the start state written chunk by chunk on every rank (8 for each visit, for the time it
/// takes). None where no layout fits the program's counts (the verifier says why).
fn replay_cost(program: &Program, kind: CollectiveKind) -> Option<(u64, Layout)> {
    let sat = |a: u64, b: u64| a.saturating_mul(b);
    let ranks = program.gpus.len() as u64;
    let root = kind.has_root().then_some(0);
    [(program.inplace, true), (program.outofplace, false)]
        .into_iter()
        .filter(|&(declared, _)| declared)
        .filter_map(|(_, in_place)| {
            let layout = Layout::new(
                kind,
                program.gpus.len(),
                program.nchunksperloop,
                in_place,
                root,
            )
            .ok()?;
            let slots = (layout.canonical_len(Buf::Input) as u64)
                .saturating_add(layout.canonical_len(Buf::Output) as u64);
            let bytes = sat(sat(slots, ranks), 12)
                .saturating_add(sat(slots, 40))
                .saturating_add(sat(sat(layout.chunks() as u64, ranks), 8));
            Some((bytes, layout))
        })
        .max_by_key(|&(bytes, _)| bytes)
}

/// Refuses a program that would cost more than [`MAX_BYTES`], or more than the memory
/// limit allows, to `doing` ("verifying", "timing") as `kind`, naming what costs the most.
pub fn check(program: &Program, kind: Option<CollectiveKind>, doing: &str) -> Result<()> {
    let parts = estimate(program, kind);
    let total = parts.iter().map(|p| p.0).fold(0, u64::saturating_add);
    let mostly = parts.first().map_or("", |p| p.1.as_str());
    if total > MAX_BYTES {
        return Err(Error::Limit {
            what: "bytes",
            value: total,
            limit: MAX_BYTES,
            context: format!("{doing} the program would take, mostly for {mostly}"),
        });
    }
    MemoryLimit::default().admit(total, || {
        format!("{doing} the program, mostly for {mostly},")
    })
}
