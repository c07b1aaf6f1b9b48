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
fn line<T>(p: *const T) {
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
fn bytes(start: *const u8, len: usize) {
    for offset in (0..len).step_by(LINE_BYTES) {
        line(start.wrapping_add(offset));
    }
    if len > 0 {
        line(start.wrapping_add(len - 1));
    }
}

/// Byte ranges to prefetch later, worked out while the state they belong to is in the caches.
///
/// A prefetch that has to load a pointer first (a `Vec`'s buffer, a queue's head) waits for
/// that load, and after a batch that load misses: in the data plane, prefetching the
/// scheduler's state from the scheduler itself took about 200 cycles, most of a decision's
/// cost (issue 5's overhead benchmark, split by part). A plan holds plain addresses: issuing
/// it loads nothing, so all its lines are fetched side by side. Addresses that went stale
/// since the plan was made only waste a fetch: a prefetch never faults.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    ranges: [(*const u8, usize); Plan::MAX_RANGES],
    len: usize,
}

impl Default for Plan {
    fn default() -> Self {
        Plan { ranges: [(std::ptr::null(), 0); Plan::MAX_RANGES], len: 0 }
    }
}

impl Plan {
    pub const MAX_RANGES: usize = 16;
    /// Largest range taken whole; a longer one is cut to its start.
    pub const MAX_RANGE_BYTES: usize = 16 * LINE_BYTES;

    /// Adds `len` bytes from `start`; ignored when the plan is full or `len` is 0.
    #[inline]
    pub fn add_bytes(&mut self, start: *const u8, len: usize) {
        if self.len < Self::MAX_RANGES && len > 0 {
            self.ranges[self.len] = (start, len.min(Self::MAX_RANGE_BYTES));
            self.len += 1;
        }
    }

    /// Adds every line of `*value`.
    #[inline]
    pub fn add_value<T>(&mut self, value: &T) {
        self.add_bytes((value as *const T).cast(), std::mem::size_of::<T>());
    }

    /// Adds the line holding `*value`.
    #[inline]
    pub fn add_line<T>(&mut self, value: &T) {
        self.add_bytes((value as *const T).cast(), 1);
    }

    /// Adds the lines of a slice (its first [`Plan::MAX_RANGE_BYTES`]).
    #[inline]
    pub fn add_slice<T>(&mut self, values: &[T]) {
        self.add_bytes(values.as_ptr().cast(), std::mem::size_of_val(values));
    }

    /// Lines the plan will fetch (ranges may overlap: a line may count twice).
    pub fn lines(&self) -> usize {
        self.ranges[..self.len]
            .iter()
            .map(|&(start, len)| {
                let first = start as usize / LINE_BYTES;
                (start as usize + len - 1) / LINE_BYTES - first + 1
            })
            .sum()
    }

    /// Issues the prefetches.
    #[inline]
    pub fn issue(&self) {
        for &(start, len) in &self.ranges[..self.len] {
            bytes(start, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_keeps_whole_ranges_up_to_its_limits() {
        let data = [0u8; 4096];
        let mut plan = Plan::default();
        plan.add_bytes(data.as_ptr(), 0);
        assert_eq!(plan.lines(), 0, "an empty range adds nothing");
        // 64-byte aligned start: 130 bytes span 3 lines.
        let aligned = data.as_ptr().wrapping_add(data.as_ptr().align_offset(LINE_BYTES));
        plan.add_bytes(aligned, 130);
        assert_eq!(plan.lines(), 3);
        plan.add_bytes(aligned, 4000);
        assert_eq!(plan.lines(), 3 + 16, "a long range is cut to its first 16 lines");
        for _ in 0..40 {
            plan.add_line(&data[0]);
        }
        assert_eq!(plan.len, Plan::MAX_RANGES, "no more ranges than it holds");
        plan.issue();
    }
}
