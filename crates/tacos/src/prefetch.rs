//! Software prefetch: asking the cache for memory the matcher or the checker will read
//! soon, so that
//! the misses of several reads overlap instead of following one another. A prefetch
//! changes nothing but timing.

/// Most cache lines of one slice prefetched (a longer slice is fetched in part).
const MAX_LINES: usize = 8;
const LINE: usize = 64;

/// Prefetches the first lines of `items` into every cache level.
#[inline]
pub(crate) fn slice<T>(items: &[T]) {
    let bytes = std::mem::size_of_val(items).min(MAX_LINES * LINE);
    let base = items.as_ptr().cast::<u8>();
    let mut offset = 0;
    while offset < bytes {
        line(base.wrapping_add(offset));
        offset += LINE;
    }
}

/// Prefetches the cache line holding `at`.
#[inline]
pub(crate) fn line<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults nor reads into the program, whatever
    // the address, and SSE (which provides it) is part of every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
