//! Large bit tables read at random, backed by huge pages where the system offers them.
//!
//! The matcher and the checker keep a bit per (NPU, chunk): 200 MB each on a 200x200
//! mesh, read at random on every pool entry. With 4 KiB pages nearly every read also
//! misses the TLB; Linux backs a region with 2 MiB pages when asked (transparent huge
//! pages in `madvise` mode, the common default), so the tables ask. Nothing changes but
//! the speed, and where the system says no the table is an ordinary one.

/// Tables smaller than this stay on ordinary pages (they fit the TLB's reach anyway).
const HUGE_FROM_BYTES: usize = 8 << 20;

/// A table of `len` copies of `value`, on huge pages where the system grants them: the
/// advice is given before the table is first written, so its pages are made huge as they
/// are first touched.
pub(crate) fn table<T: Clone>(value: T, len: usize) -> Vec<T> {
    let mut table = Vec::with_capacity(len);
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if bytes >= HUGE_FROM_BYTES {
        advise_huge(table.as_ptr() as usize, bytes);
    }
    table.resize(len, value);
    table
}

#[cfg(target_os = "linux")]
fn advise_huge(address: usize, bytes: usize) {
    // madvise takes whole pages: those inside the table.
    const PAGE: usize = 4096;
    let start = address.next_multiple_of(PAGE);
    let end = (address + bytes) / PAGE * PAGE;
    if end > start {
        // SAFETY: the range lies within an allocation the caller owns; the advice does
        // not change its contents, and a refusal (an error return) changes nothing.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_address: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the size that asks for huge pages as below it: the advice changes nothing
    /// the table holds.
    #[test]
    fn a_table_holds_its_value_everywhere_whatever_its_pages() {
        for len in [0, 5, HUGE_FROM_BYTES / 8 + 3] {
            let t = table(u64::MAX - 1, len);
            assert_eq!(t.len(), len);
            assert!(t.iter().all(|&w| w == u64::MAX - 1));
        }
        let t = table(0u64, HUGE_FROM_BYTES);
        assert!(t.iter().all(|&w| w == 0));
    }
}
