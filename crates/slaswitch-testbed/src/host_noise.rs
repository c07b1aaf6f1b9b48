//! How much of a PMD core the host takes in pieces too short for `/proc/stat`: a thread spins
//! on the TSC on that core and keeps every gap between two reads.
//!
//! On a PVM or KVM guest the hypervisor's own work and its other guests can take the vCPU for
//! tens of microseconds at a time, hundreds of times a second, and the guest kernel counts none
//! of it (no steal, no interrupt, no other task); the guest's own interrupts show as gaps too.
//! A frame that arrives in such a gap waits it out whatever the switch
//! does, so the gaps set a floor under every residence percentile a run measures on that core.
//! The kernel's `osnoise` tracer (`rtla osnoise`) measures the same, but only in kernels built
//! with it; this loop runs anywhere.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Gaps shorter than this are the loop's own iterations, cache misses and the like.
const MIN_GAP_NS: f64 = 2_000.0;
/// Gaps from this length on are counted per second: long enough to matter to a latency class.
const COUNTED_GAP_NS: f64 = 10_000.0;

/// What the host took from one core while a thread spun on it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostNoise {
    /// The core measured.
    pub core: usize,
    /// How long the thread spun.
    pub secs: f64,
    /// Gaps of 10 us or more, per second.
    pub gaps_over_10us_per_sec: f64,
    /// Share of the time, in percent, spent in gaps of 2 us or more.
    pub lost_pct: f64,
    /// The longest gap.
    pub max_gap_us: f64,
    /// The wait a frame arriving at a random instant has from the gaps alone, 99th percentile:
    /// the floor the host puts under a residence p99 on this core.
    pub p99_wait_us: f64,
}

/// Spins for `secs` on `core` (a thread of its own, pinned there) and summarizes the gaps.
pub fn measure(core: usize, secs: f64) -> anyhow::Result<HostNoise> {
    let spin = std::thread::spawn(move || -> std::io::Result<(Vec<f64>, f64)> {
        slaswitch_dpdk::pin_current_thread(core)?;
        Ok(spin_gaps(Duration::from_secs_f64(secs)))
    });
    let (gaps_ns, total_ns) = spin
        .join()
        .map_err(|_| anyhow::anyhow!("the spinning thread on core {core} panicked"))?
        .map_err(|e| anyhow::anyhow!("pinning the spinning thread to core {core}: {e}"))?;
    Ok(summarize(core, &gaps_ns, total_ns))
}

/// Reads the TSC in a tight loop for `length`; returns the gaps of `MIN_GAP_NS` or more and the
/// whole time, in ns (the TSC's rate taken from the same interval's wall clock).
fn spin_gaps(length: Duration) -> (Vec<f64>, f64) {
    let started = Instant::now();
    let first = slaswitch_dpdk::rdtsc();
    let mut gaps_cycles = Vec::new();
    let mut prev = first;
    let mut reads: u32 = 0;
    loop {
        let now = slaswitch_dpdk::rdtsc();
        let gap = now.wrapping_sub(prev);
        // 1,000 cycles are under MIN_GAP_NS on any TSC faster than 500 MHz: dropped here, in
        // cycles, so the loop stays tight; the rest is filtered in ns after.
        if gap > 1_000 {
            gaps_cycles.push(gap);
        }
        prev = now;
        reads = reads.wrapping_add(1);
        if reads.is_multiple_of(1024) && started.elapsed() >= length {
            break;
        }
    }
    let ns_per_cycle = started.elapsed().as_nanos() as f64 / prev.wrapping_sub(first).max(1) as f64;
    let gaps_ns = gaps_cycles.into_iter().map(|g| g as f64 * ns_per_cycle).filter(|&g| g >= MIN_GAP_NS).collect();
    (gaps_ns, prev.wrapping_sub(first) as f64 * ns_per_cycle)
}

/// The figures of `gaps_ns` (each gap's length) over `total_ns` of spinning.
pub fn summarize(core: usize, gaps_ns: &[f64], total_ns: f64) -> HostNoise {
    let total_ns = total_ns.max(1.0);
    let lost_ns: f64 = gaps_ns.iter().sum();
    let counted = gaps_ns.iter().filter(|&&g| g >= COUNTED_GAP_NS).count();
    let max_ns = gaps_ns.iter().copied().fold(0.0, f64::max);
    HostNoise {
        core,
        secs: total_ns / 1e9,
        gaps_over_10us_per_sec: counted as f64 / (total_ns / 1e9),
        lost_pct: 100.0 * lost_ns / total_ns,
        max_gap_us: max_ns / 1e3,
        p99_wait_us: wait_quantile_ns(gaps_ns, total_ns, 0.99) / 1e3,
    }
}

/// The `q` quantile of the wait an instant drawn uniformly over `total_ns` has until the gap it
/// fell in ends (0 outside gaps): the share of instants waiting more than `w` is the sum over
/// gaps of `max(0, gap - w)` over the total, which falls as `w` grows; bisect for `1 - q`.
fn wait_quantile_ns(gaps_ns: &[f64], total_ns: f64, q: f64) -> f64 {
    let share_over = |w: f64| gaps_ns.iter().map(|&g| (g - w).max(0.0)).sum::<f64>() / total_ns;
    let (mut lo, mut hi) = (0.0, gaps_ns.iter().copied().fold(0.0, f64::max));
    if share_over(0.0) <= 1.0 - q {
        return 0.0;
    }
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if share_over(mid) > 1.0 - q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The figures of each core in words, one clause per core.
pub fn describe(noise: &[HostNoise]) -> String {
    noise
        .iter()
        .map(|n| {
            format!(
                "core {}: {:.0} gaps a second of 10 us or more, {:.1}% of the time in gaps of 2 us or more, the longest {:.0} us; alone they put a frame's wait at p99 {:.1} us",
                n.core, n.gaps_over_10us_per_sec, n.lost_pct, n.max_gap_us, n.p99_wait_us
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_core_has_no_floor() {
        let n = summarize(0, &[3_000.0, 4_000.0], 1e9);
        assert_eq!(n.gaps_over_10us_per_sec, 0.0);
        assert_eq!(n.p99_wait_us, 0.0);
        assert!((n.lost_pct - 0.0007).abs() < 1e-9);
    }

    #[test]
    fn the_floor_is_the_wait_that_one_instant_in_a_hundred_exceeds() {
        // 1,000 gaps of 40 us in one second: 4% of instants fall in a gap, their wait uniform
        // over 0-40 us; 1% wait more than w where 1000 * (40 - w) us = 10 ms, so w = 30 us.
        let gaps = vec![40_000.0; 1000];
        let n = summarize(0, &gaps, 1e9);
        assert!((n.p99_wait_us - 30.0).abs() < 0.01, "{}", n.p99_wait_us);
        assert_eq!(n.gaps_over_10us_per_sec, 1000.0);
        assert!((n.lost_pct - 4.0).abs() < 1e-9);
        assert_eq!(n.max_gap_us, 40.0);
    }

    #[test]
    fn spinning_finds_its_own_time() {
        let (gaps, total_ns) = spin_gaps(Duration::from_millis(50));
        assert!((45e6..5e9).contains(&total_ns), "{total_ns}");
        assert!(gaps.iter().all(|&g| g >= MIN_GAP_NS && g <= total_ns));
    }
}
