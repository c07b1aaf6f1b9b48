//! Spin locks for the PMDs, which must never sleep. [`SpinGuard`] is a port's tx lock, taken
//! around `tx_burst` when several PMDs may transmit on it, as OVS does when a port has fewer tx
//! queues than PMDs. [`SpinLock`] owns what it guards (a paced port's link state), so safe code
//! reaches that state only while holding it.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

fn acquire(flag: &AtomicBool) {
    while flag.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::hint::spin_loop();
    }
}

/// Holds a port's tx lock until dropped.
pub(crate) struct SpinGuard<'a>(&'a AtomicBool);

impl<'a> SpinGuard<'a> {
    /// Spins until the lock is taken.
    pub(crate) fn lock(flag: &'a AtomicBool) -> Self {
        acquire(flag);
        SpinGuard(flag)
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A value reached only through [`SpinLock::lock`].
pub(crate) struct SpinLock<T> {
    flag: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the flag),
// so sharing the lock between threads moves the value between them, which `T: Send` allows.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> Self {
        SpinLock { flag: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Spins until the lock is taken; the value is the guard's until it drops.
    pub(crate) fn lock(&self) -> SpinLockGuard<'_, T> {
        acquire(&self.flag);
        SpinLockGuard { lock: self }
    }
}

/// The value of a held [`SpinLock`].
pub(crate) struct SpinLockGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinLockGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.flag.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_under_the_lock_lose_no_update() {
        let lock = std::sync::Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*lock.lock(), 40_000);
    }
}
