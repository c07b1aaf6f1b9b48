//! The NIC-bottleneck fallback (seed 000 Sec. VII): C2QoS shares the PMD's cycles, which
//! guarantees bandwidth only while the CPU is the bottleneck. A VM that lied about its profile
//! (small packets bought, large ones sent) can fill the uplink within its cycles. The switch
//! then watches the uplink: when it runs at its line rate, per-VM byte limits derived from the
//! purchased bandwidths engage; when it no longer does and none of those limits has had to
//! drop for a while, they release.
//!
//! The detector only decides; the data plane applies the limits (a byte policer per VM).

/// When to engage and release.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FallbackConfig {
    /// Utilisation is judged over windows this long.
    pub window_ns: u64,
    /// A window at or above this share of the line rate means the link is the bottleneck.
    pub engage_utilisation: f64,
    /// Release only after this long with no drop by the limits and the link below the mark.
    pub release_quiet_ns: u64,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig { window_ns: 20_000_000, engage_utilisation: 0.97, release_quiet_ns: 1_000_000_000 }
    }
}

/// Watches the uplink's utilisation and the VMs' drops, and engages the byte limits when the NIC, not the CPU, is the bottleneck (seed 000 Sec. VII).
#[derive(Clone, Copy, Debug)]
pub struct FallbackDetector {
    cfg: FallbackConfig,
    window_start_ns: u64,
    busy_ns: u64,
    engaged: bool,
    last_drop_ns: u64,
    drops_seen: u64,
    last_utilisation: f64,
}

impl FallbackDetector {
    /// A detector that has seen nothing yet, its clock started at `now_ns`.
    pub fn new(cfg: FallbackConfig, now_ns: u64) -> Self {
        FallbackDetector {
            cfg,
            window_start_ns: now_ns,
            busy_ns: 0,
            engaged: false,
            last_drop_ns: now_ns,
            drops_seen: 0,
            last_utilisation: 0.0,
        }
    }

    /// True while the byte limits are in force.
    pub fn engaged(&self) -> bool {
        self.engaged
    }

    /// The link's utilisation over the last whole window (0 to 1).
    pub fn last_utilisation(&self) -> f64 {
        self.last_utilisation
    }

    /// Feeds wire-busy time since the last call and the running total of drops by the
    /// fallback limits. Returns the new state when it changes.
    pub fn observe(&mut self, now_ns: u64, busy_ns: u64, fallback_drops_total: u64) -> Option<bool> {
        self.busy_ns += busy_ns;
        if fallback_drops_total != self.drops_seen {
            self.drops_seen = fallback_drops_total;
            self.last_drop_ns = now_ns;
        }
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < self.cfg.window_ns {
            return None;
        }
        self.last_utilisation = (self.busy_ns as f64 / elapsed as f64).min(1.0);
        self.window_start_ns = now_ns;
        self.busy_ns = 0;
        let full = self.last_utilisation >= self.cfg.engage_utilisation;
        if !self.engaged && full {
            self.engaged = true;
            self.last_drop_ns = now_ns;
            return Some(true);
        }
        if self.engaged && !full && now_ns.saturating_sub(self.last_drop_ns) >= self.cfg.release_quiet_ns {
            self.engaged = false;
            return Some(false);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn engages_at_line_rate_and_releases_once_quiet() {
        let mut d = FallbackDetector::new(FallbackConfig::default(), 0);
        // Half-loaded link: nothing happens.
        for t in 1..=10 {
            assert_eq!(d.observe(t * 10 * MS, 5 * MS, 0), None);
        }
        assert!(!d.engaged());
        // Full link: engages within one window.
        let mut now = 100 * MS;
        let mut changed = None;
        for _ in 0..4 {
            now += 10 * MS;
            changed = changed.or(d.observe(now, 10 * MS, 0));
        }
        assert_eq!(changed, Some(true));
        // The limits keep dropping while the liar sends: stays engaged even below the mark.
        let mut drops = 0;
        for _ in 0..200 {
            now += 10 * MS;
            drops += 5;
            assert_eq!(d.observe(now, 8 * MS, drops), None);
        }
        // The liar stops: no drops, link at 50%: releases after the quiet time, not before.
        let quiet_from = now;
        let mut released_at = None;
        for _ in 0..200 {
            now += 10 * MS;
            if d.observe(now, 5 * MS, drops) == Some(false) {
                released_at = Some(now);
                break;
            }
        }
        let at = released_at.expect("released");
        assert!(at - quiet_from >= 1000 * MS && at - quiet_from <= 1030 * MS, "{}", (at - quiet_from) / MS);
    }

    #[test]
    fn a_full_link_without_drops_stays_engaged() {
        let mut d = FallbackDetector::new(FallbackConfig::default(), 0);
        let mut now = 0;
        for _ in 0..500 {
            now += 10 * MS;
            d.observe(now, 10 * MS, 0);
        }
        assert!(d.engaged());
    }
}
