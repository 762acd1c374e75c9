//! What executing a program costs the verifier, the executor model and the timing,
//! estimated from its counts before any of them allocates, so that a file whose counts
//! are legal but huge (`s_chunks`, `nchunksperloop` or `cnt` near 2^31, tens of thousands
//! of threadblocks on a GPU) is refused with the count to blame instead of exhausting
//! memory.
//!
//! The estimate is in bytes, from the sizes of the tables they build; it is an upper
//! bound up to small constants, and time follows it (each entry is visited a bounded
//! number of times).

use super::{Layout, Program};
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
    let layout = kind.and_then(|kind| {
        let root = kind.has_root().then_some(0);
        Layout::new(
            kind,
            program.gpus.len(),
            program.nchunksperloop,
            false,
            root,
        )
        .ok()
    });
    if let Some(layout) = layout {
        // The buffers of every rank, and the start and end states checked chunk by chunk;
        // a rooted collective without a root is tried with every rank as the root.
        let per_rank = (layout.chunks() as u64).saturating_add(2 * program.nchunksperloop as u64);
        let tries = if layout.kind().has_root() && program.root.is_none() {
            ranks
        } else {
            1
        };
        parts.push((
            sat(sat(per_rank, ranks), tries),
            format!(
                "nchunksperloop {} on {ranks} GPUs ({} chunks of {})",
                program.nchunksperloop,
                layout.chunks(),
                layout.kind()
            ),
        ));
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    parts
}

/// Refuses a program that would cost more than `limit` bytes to `doing` ("verifying",
/// "timing") as `kind`, naming what costs the most.
pub fn check(
    program: &Program,
    kind: Option<CollectiveKind>,
    limit: u64,
    doing: &str,
) -> Result<()> {
    let parts = estimate(program, kind);
    let total = parts.iter().map(|p| p.0).fold(0, u64::saturating_add);
    if total <= limit {
        return Ok(());
    }
    Err(Error::Limit {
        what: "bytes",
        value: total,
        limit,
        context: format!(
            "{doing} the program would take, mostly for {}",
            parts.first().map_or("", |p| p.1.as_str())
        ),
    })
}
