//! A cache hint, nothing more: in the data plane every batch of packets evicts the scheduler's
//! few lines from the caches, and the decision after it then waits on about eight misses
//! (docs/c2qos.md, section 6). Asking for the lines while the batch's last stage runs hides
//! some of that wait.

/// Asks the CPU to bring the line holding `value` into its caches. Never faults, never blocks.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing architecturally and cannot fault, and SSE
    // is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
