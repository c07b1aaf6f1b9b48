//! A PMD that sleeps between passes while its queues are light, so that what shares its core
//! (the VMs of a small host, another PMD's VMs) gets the core when the switch has little to do.
//! A polling thread otherwise takes its whole share of the core whatever its load: on a host
//! where a PMD shares a core with VMs, the kernel gives each half, and the VMs send half as much.
//! OVS-DPDK offers the same trade as `pmd-maxsleep`.
//!
//! The rule: after a pass in which no poll returned half a batch (no queue is filling up), the
//! sleep doubles from [`FIRST_SLEEP_NS`] up to the maximum; a poll with half a batch or more
//! ends the sleeping at once. So a frame waits in its ring at most the maximum more, and a
//! backlogged PMD never sleeps. Off (a maximum of 0) by default: the PMD polls without a pause.

use std::time::Duration;

/// The first sleep after a light pass.
pub const FIRST_SLEEP_NS: u64 = 1_000;

/// The longest sleep the switch accepts, microseconds (as OVS-DPDK's `pmd-maxsleep`).
pub const MAX_SLEEP_US: u64 = 10_000;

/// A PMD's sleeping between passes.
#[derive(Clone, Debug)]
pub struct PmdSleep {
    max_ns: u64,
    next_ns: u64,
}

impl PmdSleep {
    /// Sleeps of at most `max_us` microseconds; 0: never.
    pub fn new(max_us: u64) -> PmdSleep {
        PmdSleep { max_ns: max_us.min(MAX_SLEEP_US) * 1_000, next_ns: 0 }
    }

    /// Whether the PMD ever sleeps.
    pub fn enabled(&self) -> bool {
        self.max_ns > 0
    }

    /// Whether a poll that returned `received` frames of `burst` asked found its queue filling.
    pub fn filling(received: usize, burst: usize) -> bool {
        2 * received >= burst.max(1)
    }

    /// After a pass in which some poll found its queue `filling` (or not), with `busy` other
    /// work waiting (a paced link's queue): how long to sleep now (zero: poll on).
    pub fn after_pass(&mut self, filling: bool, busy: bool) -> Duration {
        if self.max_ns == 0 || busy || filling {
            self.next_ns = 0;
            return Duration::ZERO;
        }
        self.next_ns = if self.next_ns == 0 { FIRST_SLEEP_NS } else { self.next_ns * 2 }.min(self.max_ns);
        Duration::from_nanos(self.next_ns)
    }
}

/// Lets the calling thread's sleeps end close to when asked: the kernel's default slack for a
/// normal thread (50 us) would lengthen every short sleep by that much.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a number and changes only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_never_sleeps() {
        let mut s = PmdSleep::new(0);
        assert!(!s.enabled());
        for _ in 0..10 {
            assert_eq!(s.after_pass(false, false), Duration::ZERO);
        }
    }

    #[test]
    fn light_passes_double_the_sleep_up_to_the_maximum() {
        let mut s = PmdSleep::new(5);
        let sleeps: Vec<u64> = (0..5).map(|_| s.after_pass(false, false).as_nanos() as u64).collect();
        assert_eq!(sleeps, [1_000, 2_000, 4_000, 5_000, 5_000]);
    }

    #[test]
    fn half_a_batch_or_queued_link_work_stops_the_sleeping() {
        let mut s = PmdSleep::new(50);
        s.after_pass(false, false);
        s.after_pass(false, false);
        assert_eq!(s.after_pass(PmdSleep::filling(16, 32), false), Duration::ZERO);
        assert_eq!(s.after_pass(PmdSleep::filling(15, 32), false), Duration::from_micros(1));
        assert_eq!(s.after_pass(false, true), Duration::ZERO);
        assert_eq!(s.after_pass(false, false), Duration::from_micros(1), "started over");
        assert!(PmdSleep::filling(1, 1), "a one-frame poll of one asked is full");
        assert!(!PmdSleep::filling(0, 0));
    }

    #[test]
    fn the_maximum_is_bounded() {
        let mut s = PmdSleep::new(u64::MAX / 1_000_000);
        for _ in 0..40 {
            s.after_pass(false, false);
        }
        assert_eq!(s.after_pass(false, false), Duration::from_micros(MAX_SLEEP_US));
    }
}
