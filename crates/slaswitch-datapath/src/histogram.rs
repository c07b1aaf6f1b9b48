//! A log-linear latency histogram: 16 sub-buckets per power of two of nanoseconds (within about
//! 6% of the true value), constant memory, O(1) record, percentiles by walking its buckets.
//! The emulated sink VM measures one-way latency with it, the PMD its ports' residence time
//! (`crate::residence`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A log-linear latency histogram in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_ns: u64,
    /// The samples added up.
    sum_ns: u64,
}

const SUB: u64 = 16;
/// Buckets: every power of two of nanoseconds a `u64` holds.
pub const BUCKETS: usize = 64 * SUB as usize;

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS], total: 0, max_ns: 0, sum_ns: 0 }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros() as u64; // ns in [2^exp, 2^(exp+1))
    let sub = (ns >> (exp - 4)) & (SUB - 1);
    ((exp - 3) * SUB + sub) as usize
}

fn bucket_floor(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let exp = b / SUB + 3;
    if exp >= 64 {
        return u64::MAX;
    }
    let sub = b % SUB;
    (1 << exp) + (sub << (exp - 4))
}

impl Histogram {
    /// Counts one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Counts `n` samples of one latency.
    #[inline]
    pub fn record_n(&mut self, ns: u64, n: u64) {
        self.add(ns, n);
    }

    /// Counts `n` samples of one latency and notes their bucket in `touched`.
    #[inline]
    pub fn record_n_noting(&mut self, ns: u64, n: u64, touched: &mut Touched) {
        touched.note(self.add(ns, n));
    }

    /// Counts `n` samples of one latency; returns their bucket.
    #[inline(always)]
    fn add(&mut self, ns: u64, n: u64) -> usize {
        let b = bucket(ns).min(self.counts.len() - 1);
        self.counts[b] += n;
        self.total += n;
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns = self.sum_ns.wrapping_add(ns.wrapping_mul(n));
        b
    }

    /// The samples added up, nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The count of each bucket.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// A histogram of these bucket counts ([`BUCKETS`] of them; missing ones are 0) whose
    /// samples added up to `sum_ns`, its largest sample taken as the top of its highest
    /// non-empty bucket.
    pub fn from_counts(counts: &[u64], sum_ns: u64) -> Histogram {
        let mut h = Histogram { sum_ns, ..Histogram::default() };
        for (a, b) in h.counts.iter_mut().zip(counts) {
            *a = *b;
        }
        h.total = h.counts.iter().sum();
        h.max_ns = h.counts.iter().rposition(|&c| c > 0).map_or(0, |b| bucket_floor(b + 1).saturating_sub(1));
        h
    }

    /// What was counted since `earlier`, a copy of this histogram taken before (counts only
    /// grow); its largest sample is bounded by its highest non-empty bucket.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let counts: Vec<u64> = self.counts.iter().zip(&earlier.counts).map(|(a, b)| a.saturating_sub(*b)).collect();
        let mut h = Histogram::from_counts(&counts, self.sum_ns.wrapping_sub(earlier.sum_ns));
        h.max_ns = h.max_ns.min(self.max_ns);
        h
    }

    /// The upper bound of each power of two of nanoseconds up to the highest sample, with the
    /// samples at or below it (a cumulative histogram, as Prometheus exposes one).
    pub fn cumulative_by_power_of_two(&self) -> Vec<(u64, u64)> {
        let Some(top) = self.counts.iter().rposition(|&c| c > 0) else { return Vec::new() };
        let mut out = Vec::new();
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate().take(top + 1) {
            seen += c;
            if ((b + 1) as u64).is_multiple_of(SUB) || b == top {
                out.push((bucket_floor(b + 1), seen));
            }
        }
        out
    }

    /// Latencies counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest latency counted.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// The latency at or below which `q` (0..1) of the samples fall; `None` when empty.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_floor(b).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns = self.sum_ns.wrapping_add(other.sum_ns);
    }
}

/// The buckets a [`Histogram`] counted into since it was last published: a PMD publishes
/// its ports' residence every thousand passes, and storing the whole table each time (8 KB,
/// a quarter of a core's first-level data cache) would evict the packet path's lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touched {
    lo: usize,
    hi: usize,
}

impl Touched {
    /// No bucket.
    pub const NONE: Touched = Touched { lo: usize::MAX, hi: 0 };

    #[inline(always)]
    fn note(&mut self, bucket: usize) {
        self.lo = self.lo.min(bucket);
        self.hi = self.hi.max(bucket);
    }

    /// The buckets noted, if any; leaves none.
    fn take(&mut self) -> Option<std::ops::RangeInclusive<usize>> {
        let t = std::mem::replace(self, Touched::NONE);
        (t.lo <= t.hi).then_some(t.lo..=t.hi)
    }
}

/// A [`Histogram`]'s bucket counts and sum in atomics, so that the control plane reads them
/// without a lock a PMD needs: a reader holding the PMD's lock on a core shared with VMs can
/// lose that core mid-read and hold the PMD up for a scheduler slice. One writer at a time
/// (the port's PMD, or whichever PMD holds a paced link's lock); readers may see a sample's
/// bucket before its sum.
#[derive(Debug)]
pub struct SharedHistogram {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Default for SharedHistogram {
    fn default() -> Self {
        SharedHistogram { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(), sum_ns: AtomicU64::new(0) }
    }
}

impl SharedHistogram {
    /// Counts one latency. The caller is the only writer for the call's length.
    #[inline]
    pub fn record(&self, ns: u64) {
        let slot = &self.buckets[bucket(ns).min(BUCKETS - 1)];
        slot.store(slot.load(Relaxed) + 1, Relaxed);
        self.sum_ns.store(self.sum_ns.load(Relaxed).wrapping_add(ns), Relaxed);
    }

    /// Stores `h`'s buckets that `touched` names, and its sum: `h` holds everything counted
    /// so far (counts only grow), and its other buckets were stored before. Takes `touched`
    /// back to none.
    pub fn publish(&self, h: &Histogram, touched: &mut Touched) {
        if let Some(range) = touched.take() {
            for (slot, &c) in self.buckets[range.clone()].iter().zip(&h.counts[range]) {
                slot.store(c, Relaxed);
            }
        }
        self.sum_ns.store(h.sum_ns, Relaxed);
    }

    /// Forgets every sample.
    pub fn clear(&self) {
        for slot in self.buckets.iter() {
            slot.store(0, Relaxed);
        }
        self.sum_ns.store(0, Relaxed);
    }

    /// A copy of what has been counted.
    pub fn read(&self) -> Histogram {
        let counts: Vec<u64> = self.buckets.iter().map(|a| a.load(Relaxed)).collect();
        Histogram::from_counts(&counts, self.sum_ns.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bucket_width() {
        let mut h = Histogram::default();
        for ns in 1..=100_000u64 {
            h.record(ns);
        }
        for q in [0.5, 0.9, 0.99] {
            let got = h.quantile_ns(q).unwrap() as f64;
            let want = q * 100_000.0;
            assert!((got - want).abs() / want < 0.07, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.max_ns(), 100_000);
        assert_eq!(Histogram::default().quantile_ns(0.5), None);
    }

    #[test]
    fn the_difference_of_two_copies_holds_what_came_between() {
        let mut h = Histogram::default();
        h.record_n(1_000, 10);
        let before = h.clone();
        h.record_n(50_000, 3);
        let d = h.since(&before);
        assert_eq!(d.count(), 3);
        let p50 = d.quantile_ns(0.5).unwrap() as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.07, "{p50}");
        assert_eq!(d.sum_ns(), 150_000);
        assert_eq!(Histogram::from_counts(h.counts(), h.sum_ns()).count(), 13);
        // Cumulative by power of two: 1000 ns is under 1024, 50000 under 65536.
        let cum = h.cumulative_by_power_of_two();
        assert_eq!(cum.iter().find(|(le, _)| *le == 1024).map(|c| c.1), Some(10));
        assert_eq!(cum.last().map(|c| c.1), Some(13));
    }

    #[test]
    fn a_shared_histogram_reads_what_was_recorded_and_published() {
        let shared = SharedHistogram::default();
        shared.record(1_000);
        shared.record(50_000);
        let h = shared.read();
        assert_eq!((h.count(), h.sum_ns()), (2, 51_000));
        let (mut more, mut touched) = (h.clone(), Touched::NONE);
        more.record_n_noting(7_000, 5, &mut touched);
        shared.publish(&more, &mut touched);
        let read = shared.read();
        assert_eq!((read.counts(), read.sum_ns()), (more.counts(), more.sum_ns()));
        assert_eq!(touched, Touched::NONE, "a publication takes what it stored");
        // Only the noted buckets are stored: a count recorded without noting it is not.
        more.record_n(7_000, 1);
        more.record_n_noting(900_000, 2, &mut touched);
        shared.publish(&more, &mut touched);
        let read = shared.read();
        assert_eq!(read.count(), more.count() - 1);
        assert_eq!(read.quantile_ns(1.0), more.quantile_ns(1.0));
        shared.clear();
        assert_eq!(shared.read().count(), 0);
    }
}
