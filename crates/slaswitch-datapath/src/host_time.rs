//! What the host gave a PMD thread: the time the kernel ran it. A PMD's stage that took longer
//! than a stall's threshold may be the host's (the thread waited for its core, the hypervisor
//! or an interrupt took it) or the PMD's own (a send through a kernel interface runs the
//! kernel's stack in the PMD's system call). A busy-polling thread that is never descheduled
//! runs all the time; the wall time it did not run is what the host took.

/// The calling thread's id, as `/proc` names it.
pub fn current_thread_id() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Nanoseconds thread `tid` of this process has run, as the kernel counts it (the first field
/// of `/proc/self/task/TID/schedstat`); `None` where the kernel does not say.
pub fn run_ns(tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_runs_nearly_all_the_wall_time_it_spins() {
        let tid = current_thread_id();
        let (t0, r0) = (std::time::Instant::now(), run_ns(tid).expect("schedstat"));
        while t0.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let ran_ns = run_ns(tid).unwrap() - r0;
        assert!(ran_ns > 0 && ran_ns as u128 <= t0.elapsed().as_nanos() + 1_000_000, "{ran_ns}");
    }
}
