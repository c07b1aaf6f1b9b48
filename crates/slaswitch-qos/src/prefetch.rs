//! Cache-line prefetch hints for the decision points' state.
//!
//! In the data plane every batch (the classifier's tables, the packets, the rings) evicts the
//! scheduler's state from the core's private caches before the PMD decides again; issue 5's
//! overhead benchmark measured most of a decision's cost in those misses. The PMD therefore
//! asks for the lines the next decision will read while the batch's last stage still runs.

/// Bytes per cache line on the cores this runs on.
pub const LINE_BYTES: usize = 64;

/// Asks the core to load the line holding `p` into all cache levels. Never faults, whatever `p`.
#[inline(always)]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it does not fault, even on an invalid address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches every line of the `len` bytes from `start` (also when they do not start on a
/// line).
#[inline(always)]
pub fn bytes(start: *const u8, len: usize) {
    for offset in (0..len).step_by(LINE_BYTES) {
        line(start.wrapping_add(offset));
    }
    if len > 0 {
        line(start.wrapping_add(len - 1));
    }
}

/// Prefetches every line `*value` touches.
#[inline(always)]
pub fn all_lines<T>(value: &T) {
    bytes((value as *const T).cast(), std::mem::size_of::<T>());
}
