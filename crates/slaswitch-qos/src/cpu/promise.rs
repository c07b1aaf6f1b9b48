//! The purchase ledger: a VM's bandwidth purchase kept as a promise in bytes, not only as the
//! cycles it was priced at (an extension of seed 000 Sec. III-IV; `docs/deviations.md`,
//! purchases kept).
//!
//! C2QoS turns a purchase into a cycle allocation through the bandwidth-CPU model, and drift
//! compensation follows the host's speed a window behind. Whenever a port's packets cost more
//! than its allocation assumed (a neighbour starts thrashing the caches, its bursts outrun the
//! bucket), a backlogged port is held below its purchase, and C2TB never gives the bytes back:
//! a strict bucket fills at the purchase's rate and no faster. The ledger counts, while the
//! port is held, what it was owed against what it forwarded, and raises its allocation until
//! the debt is paid, so a VM that sends at or below its purchase gets it in every second.
//!
//! What lies beyond the purchase keeps the seed's semantics: a port that forwards its purchase
//! is owed nothing, and a MIN-MAX port still shares only idle cycles above it. A strict port
//! that got ahead of its purchase (its packets became cheaper before drift compensation
//! followed) has its allocation lowered until it is even again, so strict means its purchase
//! in bytes too. A port whose traffic costs more per byte than its profile (it lied about its
//! packets) is owed nothing either: it is held to the cycles it bought.

/// How a ledger counts and pays back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PromiseConfig {
    /// What is owed is paid back over about this long: the allocation is raised by
    /// `owed / (purchase * payback_secs)`. Short, so that a shortfall is made up inside the
    /// second it happened in.
    pub payback_secs: f64,
    /// The most a port may be owed, in seconds of its purchase.
    pub max_owed_secs: f64,
    /// What a held port forwarded beyond its purchase offsets later shortfalls, up to this many
    /// seconds of it, so jitter around the purchase does not add up to a raise.
    pub max_surplus_secs: f64,
    /// The allocation is raised by at most this factor.
    pub max_raise: f64,
    /// A strict port ahead of its purchase has its allocation lowered by at most this factor.
    pub min_raise: f64,
    /// A window whose batches were on average at least this share of the port's full batch
    /// counts as held (the port is backlogged), as does one in which it waited for tokens.
    pub held_batch_share: f64,
}

impl Default for PromiseConfig {
    fn default() -> Self {
        PromiseConfig {
            payback_secs: 0.01,
            max_owed_secs: 0.25,
            max_surplus_secs: 0.02,
            max_raise: 2.0,
            min_raise: 0.5,
            held_batch_share: 0.75,
        }
    }
}

/// One port's traffic over a ledger window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LedgerWindow {
    /// The window's length.
    pub secs: f64,
    /// Bytes of frames the port forwarded.
    pub bytes: u64,
    /// Packets, and the batches that carried them.
    pub packets: u64,
    /// See `packets`.
    pub batches: u64,
    /// The port waited for cycle tokens in the window.
    pub waited: bool,
    /// Its traffic costs no more per byte than the profile it bought.
    pub within_profile: bool,
    /// Packets in one of its full batches (the burst the PMD polls it with; 0: 32).
    pub full_batch_packets: u32,
}

/// What one port is owed of its purchase.
#[derive(Clone, Copy, Debug)]
pub struct PurchaseLedger {
    cfg: PromiseConfig,
    purchase_bytes_per_sec: f64,
    /// Held to its purchase (C2TB strict): a surplus lowers its allocation.
    strict: bool,
    /// Negative: a surplus that later shortfalls use up first.
    owed_bytes: f64,
}

impl PurchaseLedger {
    /// A ledger for a purchase of `purchase_bps` bits per second of frames, owing nothing;
    /// `strict`: the port is held to its purchase (C2TB strict), not only promised it.
    pub fn new(purchase_bps: u64, strict: bool, cfg: PromiseConfig) -> Self {
        PurchaseLedger { cfg, purchase_bytes_per_sec: purchase_bps as f64 / 8.0, strict, owed_bytes: 0.0 }
    }

    /// The port is held to its purchase.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// The purchase, bytes per second.
    pub fn purchase_bytes_per_sec(&self) -> f64 {
        self.purchase_bytes_per_sec
    }

    /// Bytes the port is owed now (0 when it is even or ahead).
    pub fn owed_bytes(&self) -> f64 {
        self.owed_bytes.max(0.0)
    }

    /// Whether the port was held back in `w`: it waited for tokens, or its batches were full.
    pub fn held(&self, w: &LedgerWindow) -> bool {
        let full = if w.full_batch_packets == 0 { 32.0 } else { f64::from(w.full_batch_packets) };
        w.waited || (w.batches > 0 && w.packets as f64 >= self.cfg.held_batch_share * full * w.batches as f64)
    }

    /// Feeds one window and returns the factor the port's allocation is raised by (1: none).
    /// A port that was not held got all it sent, and one beyond its profile is held to its
    /// cycles: neither is owed anything, nor ahead.
    pub fn observe(&mut self, w: &LedgerWindow) -> f64 {
        if !w.within_profile || !self.held(w) {
            self.owed_bytes = 0.0;
        } else {
            let per_sec = self.purchase_bytes_per_sec;
            self.owed_bytes = (self.owed_bytes + per_sec * w.secs - w.bytes as f64)
                .clamp(-per_sec * self.cfg.max_surplus_secs, per_sec * self.cfg.max_owed_secs);
        }
        self.raise()
    }

    /// The core could give only `granted` of the raise asked: the debt beyond what that raise
    /// pays back is forgiven, so it does not pile up while the core is full and come back as
    /// a burst later (the raise would otherwise stay at its bound long after).
    pub fn granted(&mut self, granted: f64) {
        let per_sec = self.purchase_bytes_per_sec * self.cfg.payback_secs;
        if self.owed_bytes > 0.0 && granted < self.raise() {
            self.owed_bytes = self.owed_bytes.min(((granted - 1.0) * per_sec).max(0.0));
        }
    }

    /// The factor the allocation is raised by to pay what is owed over `payback_secs`; for a
    /// strict port ahead of its purchase, below 1 to take the surplus back as fast.
    pub fn raise(&self) -> f64 {
        let per_sec = self.purchase_bytes_per_sec * self.cfg.payback_secs;
        if per_sec <= 0.0 {
            return 1.0;
        }
        let balance = if self.strict { self.owed_bytes } else { self.owed_bytes() };
        (1.0 + balance / per_sec).clamp(self.cfg.min_raise, self.cfg.max_raise)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBPS_800: u64 = 800_000_000;

    fn held(bytes: u64) -> LedgerWindow {
        LedgerWindow {
            secs: 0.01,
            bytes,
            packets: 3200,
            batches: 100,
            waited: true,
            within_profile: true,
            full_batch_packets: 32,
        }
    }

    #[test]
    fn a_held_port_short_of_its_purchase_is_owed_the_difference_and_raised_to_pay_it() {
        let mut l = PurchaseLedger::new(MBPS_800, false, PromiseConfig::default());
        // 100 MB/s purchase: 1 MB per 10 ms window; it forwarded 0.9 MB.
        let raise = l.observe(&held(900_000));
        assert!((l.owed_bytes() - 100_000.0).abs() < 1e-6);
        // Paid back over 10 ms of the purchase (1 MB): raised by 10%.
        assert!((raise - 1.10).abs() < 1e-9, "{raise}");
        // It forwards the purchase plus the debt: even again, no raise.
        assert!((l.observe(&held(1_100_000)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_port_that_is_not_held_or_beyond_its_profile_is_owed_nothing() {
        let mut l = PurchaseLedger::new(MBPS_800, false, PromiseConfig::default());
        l.observe(&held(500_000));
        assert!(l.owed_bytes() > 0.0);
        let idle = LedgerWindow { packets: 100, batches: 100, waited: false, ..held(100_000) };
        assert_eq!(l.observe(&idle), 1.0);
        assert_eq!(l.owed_bytes(), 0.0);
        l.observe(&held(500_000));
        assert_eq!(l.observe(&LedgerWindow { within_profile: false, ..held(500_000) }), 1.0);
        assert_eq!(l.owed_bytes(), 0.0);
    }

    #[test]
    fn full_batches_count_as_held_without_a_wait() {
        let l = PurchaseLedger::new(MBPS_800, false, PromiseConfig::default());
        assert!(l.held(&LedgerWindow { waited: false, ..held(0) }));
        assert!(!l.held(&LedgerWindow { waited: false, packets: 1000, ..held(0) }));
        // A port polled with short bursts is held when those are full.
        let short = LedgerWindow { waited: false, packets: 800, full_batch_packets: 8, ..held(0) };
        assert!(l.held(&short));
        assert!(!l.held(&LedgerWindow { packets: 500, ..short }));
    }

    #[test]
    fn what_is_owed_and_the_raise_are_bounded() {
        let cfg = PromiseConfig::default();
        let mut l = PurchaseLedger::new(MBPS_800, false, cfg);
        for _ in 0..100 {
            l.observe(&held(0));
        }
        assert!((l.owed_bytes() - 100e6 * cfg.max_owed_secs).abs() < 1e-3);
        assert_eq!(l.raise(), cfg.max_raise);
    }

    #[test]
    fn a_strict_port_ahead_of_its_purchase_is_lowered_until_even_and_a_min_max_port_is_not() {
        let ahead = held(1_050_000);
        let mut strict = PurchaseLedger::new(MBPS_800, true, PromiseConfig::default());
        // 50 kB ahead, taken back over 10 ms of the purchase (1 MB): lowered by 5%.
        assert!((strict.observe(&ahead) - 0.95).abs() < 1e-9);
        // Far ahead: lowered by at most half.
        assert_eq!(strict.observe(&held(5_000_000)), 0.5);
        let mut min_max = PurchaseLedger::new(MBPS_800, false, PromiseConfig::default());
        assert_eq!(min_max.observe(&ahead), 1.0);
    }

    #[test]
    fn a_debt_the_core_cannot_pay_is_forgiven_not_piled_up() {
        let mut l = PurchaseLedger::new(MBPS_800, true, PromiseConfig::default());
        // 500 kB short asks for 1.5x; the core gives 1.1x: what 1.1x pays over 10 ms stays.
        assert!((l.observe(&held(500_000)) - 1.5).abs() < 1e-9);
        l.granted(1.1);
        assert!((l.owed_bytes() - 100_000.0).abs() < 1e-6 && (l.raise() - 1.1).abs() < 1e-9);
        // A grant of what was asked changes nothing.
        l.granted(1.1);
        assert!((l.owed_bytes() - 100_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_surplus_offsets_the_next_shortfall_only_up_to_its_bound() {
        let mut l = PurchaseLedger::new(MBPS_800, false, PromiseConfig::default());
        // 10 MB over in one window: only 20 ms of the purchase (2 MB) is kept as surplus.
        l.observe(&held(11_000_000));
        l.observe(&held(0));
        // 2 MB surplus less 1 MB short: still 1 MB ahead.
        assert_eq!(l.owed_bytes(), 0.0);
        l.observe(&held(0));
        assert!(l.owed_bytes().abs() < 1e-6);
        l.observe(&held(0));
        assert!((l.owed_bytes() - 1_000_000.0).abs() < 1e-6);
    }
}
