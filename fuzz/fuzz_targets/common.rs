//! What every fuzz target shares.

use tacos::budget::{MemoryLimit, Origin};

/// The memory every step may estimate for itself, far below the fuzzer's own RSS limit
/// (scripts/fuzz.sh gives it 2 GiB): an input that is valid but bigger than this must be
/// refused by its estimate, and one that allocates past it anyway is a finding.
const FUZZ_MAX_MEMORY: u64 = 256 << 20;

/// Holds the process to `FUZZ_MAX_MEMORY`; call at the start of each input.
pub fn hold_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| MemoryLimit::new(FUZZ_MAX_MEMORY, Origin::Caller).set_process_default());
}
