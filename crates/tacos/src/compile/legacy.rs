//! What the older microsoft/msccl needs of a compiled set. It scans no directory: it loads
//! the files `MSCCL_XML_FILES` lists (colon-separated), at most [`LEGACY_MAX_FILES`] of
//! them, and allocates each file's scratch buffer, maxBytes x s_chunks / nchunksperloop
//! bytes, when a communicator starts.

use super::select::AlgorithmSet;
use crate::error::{Error, Result};
use crate::msccl::parse_program;
use crate::units::format_size;
use std::path::Path;

/// The most algorithm files the older fork loads.
pub const LEGACY_MAX_FILES: usize = 4;

/// The most scratch one file may have the older fork allocate at start-up, on every GPU of
/// the job, before a single collective runs.
pub const LEGACY_MAX_SCRATCH_BYTES: u64 = 1 << 30;

/// The `MSCCL_XML_FILES` value for `set` written in `algorithm_dir`, once the set keeps to
/// what the older fork loads: at most [`LEGACY_MAX_FILES`] files, none whose scratch
/// passes [`LEGACY_MAX_SCRATCH_BYTES`]. The error names the figure, its limit and what to
/// ask for instead.
///
/// ```
/// use tacos::compile::{legacy_xml_files, AlgorithmSet};
/// # fn _doc(set: &AlgorithmSet) {
/// match legacy_xml_files(set, std::path::Path::new("/algos/msccl")) {
///     Ok(files) => println!("MSCCL_XML_FILES={files}"),
///     Err(e) => eprintln!("{e}"),
/// }
/// # }
/// ```
pub fn legacy_xml_files(set: &AlgorithmSet, algorithm_dir: &Path) -> Result<String> {
    if set.files.len() > LEGACY_MAX_FILES {
        return Err(Error::compile(format!(
            "the set has {} files; the older microsoft/msccl loads at most {LEGACY_MAX_FILES}: \
             compile fewer collectives or a narrower size range (--collectives, --sizes)",
            set.files.len()
        )));
    }
    for file in &set.files {
        let program = parse_program(&file.xml, &file.name)?;
        let scratch = scratch_bytes(
            program.max_bytes.unwrap_or(u64::MAX),
            program
                .gpus
                .iter()
                .map(|g| g.scratch_chunks)
                .max()
                .unwrap_or(0),
            program.nchunksperloop,
        );
        if scratch > LEGACY_MAX_SCRATCH_BYTES {
            return Err(Error::compile(format!(
                "{}: the older microsoft/msccl would allocate {} of scratch for it on every GPU \
                 at start-up (maxBytes x s_chunks / nchunksperloop), over {}: compile a \
                 narrower size range (--sizes)",
                file.name,
                format_size(scratch),
                format_size(LEGACY_MAX_SCRATCH_BYTES)
            )));
        }
    }
    let paths: Vec<String> = set
        .files
        .iter()
        .map(|f| algorithm_dir.join(&f.name).display().to_string())
        .collect();
    Ok(paths.join(":"))
}

/// The scratch the older fork allocates for a file: `max_bytes` x `s_chunks` /
/// `nchunksperloop`, saturating.
fn scratch_bytes(max_bytes: u64, s_chunks: usize, nchunksperloop: usize) -> u64 {
    let per_chunk = max_bytes / nchunksperloop.max(1) as u64;
    per_chunk.saturating_mul(s_chunks as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_max_bytes_over_the_loop_times_scratch_chunks() {
        // 1 GiB served in loops of 8 chunks, 4 of them scratch: half a GiB.
        assert_eq!(scratch_bytes(1 << 30, 4, 8), 1 << 29);
        assert_eq!(scratch_bytes(1 << 30, 0, 8), 0);
        assert_eq!(scratch_bytes(u64::MAX, 16, 1), u64::MAX);
    }
}
