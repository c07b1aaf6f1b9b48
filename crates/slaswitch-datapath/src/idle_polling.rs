//! Idle ports polled on a timer: a port that C2QoS does not schedule and that has received
//! nothing for [`IDLE_AFTER_US`] is polled once every `interval` instead of every pass.
//!
//! Why: a host has many VMs and most are quiet at any moment, yet a PMD polls every one each
//! pass; an empty vhost-user poll costs about as much as forwarding a packet, so a PMD with one
//! busy port of many spends most of its core looking at empty rings (the benchmark's 32-port
//! kind). OVS-DPDK polls every rx queue each iteration and answers idleness by sleeping the
//! whole PMD (`pmd-maxsleep`), which delays every port alike. Here only a quiet port waits,
//! and at most `interval` more for its first frame after the quiet spell; a port in traffic
//! (a frame within [`IDLE_AFTER_US`]) is polled every pass, and ports C2QoS schedules are
//! polled as HBS decides (seed 000 Sec. IV), latency classes included.

/// A port that received nothing for this long is idle: well above a request-response
/// exchange's gap through a switch, so a port in conversation is never made to wait.
pub const IDLE_AFTER_US: u64 = 100;

/// The switch's default interval between two polls of an idle port, microseconds: a few
/// passes of a busy PMD, and small beside a guest's own path to its virtio ring.
pub const DEFAULT_IDLE_POLL_US: u64 = 5;

/// The PMD's timer for its idle ports, indexed like the configuration's `rx_ports`.
pub(crate) struct IdlePolling {
    /// 0: every port every pass.
    interval_tsc: u64,
    idle_after_tsc: u64,
    ports: Vec<PortPolls>,
}

#[derive(Clone, Copy)]
struct PortPolls {
    /// TSC of the last poll that brought a frame.
    rx_tsc: u64,
    /// TSC of the last poll.
    polled_tsc: u64,
}

impl IdlePolling {
    /// `ports` rx ports, none idle yet at `now_tsc`; idle ones polled every `interval_us`
    /// (0: every pass) of a TSC ticking at `tsc_hz`.
    pub(crate) fn new(ports: usize, interval_us: u64, tsc_hz: u64, now_tsc: u64) -> IdlePolling {
        let tsc_per_us = tsc_hz / 1_000_000;
        IdlePolling {
            interval_tsc: interval_us.saturating_mul(tsc_per_us),
            idle_after_tsc: IDLE_AFTER_US * tsc_per_us,
            ports: vec![PortPolls { rx_tsc: now_tsc, polled_tsc: now_tsc }; ports],
        }
    }

    /// Whether rx port `idx` is to be polled at `now_tsc`: it is not idle, or its look is due.
    #[inline]
    pub(crate) fn due(&self, idx: usize, now_tsc: u64) -> bool {
        let p = self.ports[idx];
        now_tsc.wrapping_sub(p.polled_tsc) >= self.interval_tsc || now_tsc.wrapping_sub(p.rx_tsc) < self.idle_after_tsc
    }

    /// Rx port `idx` was polled at `now_tsc` and brought `received` frames.
    #[inline]
    pub(crate) fn polled(&mut self, idx: usize, received: usize, now_tsc: u64) {
        let p = &mut self.ports[idx];
        p.polled_tsc = now_tsc;
        if received > 0 {
            p.rx_tsc = now_tsc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 GHz: a microsecond is 1,000 ticks.
    const HZ: u64 = 1_000_000_000;

    #[test]
    fn a_port_in_traffic_is_polled_every_pass() {
        let mut t = IdlePolling::new(1, 5, HZ, 0);
        for now in (0..200_000).step_by(1_000) {
            assert!(t.due(0, now), "at {now}");
            t.polled(0, usize::from(now % 50_000 == 0), now);
        }
    }

    #[test]
    fn a_quiet_port_is_polled_once_per_interval_and_wakes_on_a_frame() {
        let mut t = IdlePolling::new(2, 5, HZ, 0);
        let mut polls = 0;
        // 1 ms of passes every 500 ns: the first 100 us every pass, then every 5 us.
        for now in (0..1_000_000).step_by(500) {
            if t.due(0, now) {
                polls += 1;
                t.polled(0, 0, now);
            }
        }
        assert_eq!(polls, 200 + 180);
        // A frame: polled every pass again.
        t.polled(0, 1, 1_000_000);
        assert!(t.due(0, 1_000_500));
        // The other port was never polled: due at once (its first look after idleness).
        assert!(t.due(1, 1_000_500));
    }

    #[test]
    fn an_interval_of_zero_polls_every_port_every_pass() {
        let mut t = IdlePolling::new(1, 0, HZ, 0);
        for now in (0..1_000_000).step_by(100) {
            assert!(t.due(0, now));
            t.polled(0, 0, now);
        }
    }
}
