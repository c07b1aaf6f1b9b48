//! How long a tenant's loop runs: its `--duration`, or until SIGTERM or SIGINT asks it to stop
//! early. Either way it ends the same: its totals are reported, so a benchmark that cannot
//! know a run's length in advance (its forwarder paused between windows) still gets them.

use std::sync::atomic::{AtomicBool, Ordering};

/// A run's end: `duration_secs` after its start, or when `stop` is set.
#[derive(Clone, Copy)]
pub struct RunFor<'a> {
    /// The `--duration`.
    pub duration_secs: f64,
    /// Set to end the run sooner.
    pub stop: &'a AtomicBool,
}

impl RunFor<'_> {
    /// Whether a run `t_secs` into it is over.
    #[inline]
    pub fn over(&self, t_secs: f64) -> bool {
        t_secs >= self.duration_secs || self.stop.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_over_at_its_duration_or_once_stopped() {
        let stop = AtomicBool::new(false);
        let run = RunFor { duration_secs: 2.0, stop: &stop };
        assert!(!run.over(1.9));
        assert!(run.over(2.0));
        stop.store(true, Ordering::Relaxed);
        assert!(run.over(0.0));
    }
}
