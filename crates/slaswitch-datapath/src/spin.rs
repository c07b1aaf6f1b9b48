//! A port's tx spin lock, taken when several PMDs may transmit on it, as OVS does when a port
//! has fewer tx queues than PMDs; a paced port's link is always reached under it, by the PMDs
//! and by the control thread that reconfigures its scheduler.

use std::sync::atomic::{AtomicBool, Ordering};

/// Holds the lock until dropped.
pub(crate) struct SpinGuard<'a>(&'a AtomicBool);

impl<'a> SpinGuard<'a> {
    /// Spins until the lock is taken.
    pub(crate) fn lock(flag: &'a AtomicBool) -> Self {
        while flag.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        SpinGuard(flag)
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
