//! How much of each core the hypervisor took away: the `steal` column of `/proc/stat`.
//!
//! This machine is a KVM guest on a shared host. In bad minutes the host runs something else on
//! our cores for 20-100% of the time (seen 2026-11-23: the PMD counted itself 90% busy while
//! forwarding 1% of a core's worth). No scheduler can hold a purchase on a core it does not
//! get, so a measurement taken while the host stole time says nothing about the switch.
//! Experiments record the steal beside every sample, and tests that judge a rate measure it
//! over their sampling window and sample again when the host got in the way.

use std::time::Instant;

/// Per-core tick counters at one moment (`/proc/stat`, in USER_HZ ticks).
#[derive(Clone, Debug)]
pub struct StealSnapshot {
    taken: Instant,
    /// Per core listed: (steal ticks, all ticks).
    cores: Vec<(u64, u64)>,
}

/// Reads the `cpuN` lines of `/proc/stat` for `cores`. None where `/proc/stat` cannot be read
/// (not Linux) or a core is missing.
pub fn snapshot(cores: &[usize]) -> Option<StealSnapshot> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cores = cores.iter().map(|&c| core_ticks(&text, c)).collect::<Option<Vec<_>>>()?;
    Some(StealSnapshot { taken: Instant::now(), cores })
}

/// (steal, total) ticks of `cpu{core}` in a `/proc/stat` text. The columns are user, nice,
/// system, idle, iowait, irq, softirq, steal, guest, guest_nice; guest time is already counted
/// in user, so the total is the first eight.
fn core_ticks(proc_stat: &str, core: usize) -> Option<(u64, u64)> {
    let prefix = format!("cpu{core} ");
    let line = proc_stat.lines().find(|l| l.starts_with(&prefix))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if fields.len() < 8 {
        return None;
    }
    Some((fields[7], fields.iter().sum()))
}

impl StealSnapshot {
    /// The share (0 to 1) of each core's time stolen between `self` and `later`.
    pub fn shares_until(&self, later: &StealSnapshot) -> Vec<f64> {
        self.cores
            .iter()
            .zip(&later.cores)
            .map(|(&(s0, t0), &(s1, t1))| {
                let total = t1.saturating_sub(t0);
                if total == 0 {
                    0.0
                } else {
                    s1.saturating_sub(s0) as f64 / total as f64
                }
            })
            .collect()
    }

    /// The largest share stolen from any of the cores since this snapshot, read now.
    pub fn worst_share_since(&self, cores: &[usize]) -> f64 {
        snapshot(cores).map(|now| self.shares_until(&now).into_iter().fold(0.0, f64::max)).unwrap_or(0.0)
    }

    /// When the snapshot was taken.
    pub fn taken(&self) -> Instant {
        self.taken
    }
}

/// The steal and total ticks of `cores` as counter readings (subjects `cpu0`, `cpu1`, ...),
/// taken beside a switch's own: [`crate::samples::from_readings`] turns them into the host
/// source's `steal_pct` per interval. Empty where `/proc/stat` cannot be read.
pub fn readings(cores: &[usize]) -> Vec<crate::driver::Reading> {
    let Some(snap) = snapshot(cores) else { return Vec::new() };
    cores
        .iter()
        .zip(&snap.cores)
        .flat_map(|(core, &(steal, total))| {
            let subject = format!("cpu{core}");
            [
                crate::driver::Reading::counter(&subject, STEAL_TICKS, steal as f64),
                crate::driver::Reading::counter(&subject, TICKS, total as f64),
            ]
        })
        .collect()
}

/// Counter names of [`readings`].
pub const STEAL_TICKS: &str = "steal_ticks";
/// Counter name of a core's total ticks in [`readings`].
pub const TICKS: &str = "ticks";
/// Above this share of a core stolen in a phase, a report flags the phase: the host, not the
/// switch, decided what the VMs got.
pub const NOISY_STEAL_PCT: f64 = 3.0;

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 800 5 0 5 40 0 0\n\
                        cpu0 60 0 30 400 5 0 5 30 7 0\n\
                        cpu1 40 0 20 400 0 0 0 10 0 0\n\
                        intr 12345\n";

    #[test]
    fn reads_a_cores_steal_and_total_leaving_guest_time_out() {
        assert_eq!(core_ticks(STAT, 0), Some((30, 530)));
        assert_eq!(core_ticks(STAT, 1), Some((10, 470)));
        assert_eq!(core_ticks(STAT, 2), None);
        // "cpu1" must not match "cpu10".
        assert_eq!(core_ticks("cpu10 1 1 1 1 1 1 1 1 0 0\n", 1), None);
    }

    #[test]
    fn shares_are_the_stolen_part_of_each_cores_elapsed_ticks() {
        let at = |cores| StealSnapshot { taken: Instant::now(), cores };
        let a = at(vec![(30, 530), (10, 470)]);
        let b = at(vec![(80, 730), (10, 570)]);
        assert_eq!(a.shares_until(&b), vec![0.25, 0.0]);
        assert_eq!(a.shares_until(&a), vec![0.0, 0.0]);
    }
}
