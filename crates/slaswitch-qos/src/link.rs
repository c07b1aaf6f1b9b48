//! A link of fixed line rate, as a NIC serialises frames onto the wire: the state every paced
//! port keeps (the `link_rate_bps` port option), and what the NIC-bottleneck fallback (seed 000
//! Sec. VII) reads to know the link is full.
//!
//! The link is busy until `busy_until_ns`; a frame may start once the link is free, and takes
//! its wire bits over the line rate. A frame that waits in the queue starts exactly when the one
//! before it ends, even if the caller looks late, so a PMD that polls every few microseconds
//! still sends at the line rate on average, as the NIC's own hardware queue would.

/// Bytes a frame occupies on an Ethernet wire beyond what the switch counts: FCS (4),
/// preamble and start delimiter (8), inter-frame gap (12).
pub const WIRE_OVERHEAD_BYTES: u32 = 24;

/// A link of a fixed rate: when the wire is free again after each frame.
#[derive(Clone, Copy, Debug)]
pub struct LinkPacer {
    rate_bps: u64,
    busy_until_ns: u64,
    /// Nanoseconds the wire was busy since the last `take_busy_ns`.
    busy_ns: u64,
}

impl LinkPacer {
    /// An idle link of `rate_bps`.
    pub fn new(rate_bps: u64, now_ns: u64) -> LinkPacer {
        assert!(rate_bps > 0, "a link needs a rate");
        LinkPacer { rate_bps, busy_until_ns: now_ns, busy_ns: 0 }
    }

    /// The line rate, bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Nanoseconds a frame of `frame_bytes` (as the switch counts it) holds the wire.
    pub fn wire_ns(&self, frame_bytes: u32) -> u64 {
        (u64::from(frame_bytes + WIRE_OVERHEAD_BYTES) * 8 * crate::NS_PER_SEC).div_ceil(self.rate_bps)
    }

    /// A new line rate, from the next frame on.
    pub fn set_rate(&mut self, rate_bps: u64) {
        assert!(rate_bps > 0, "a link needs a rate");
        self.rate_bps = rate_bps;
    }

    /// The wire was idle for longer than `max_ns` before `now_ns`: it cannot send that time
    /// later. A link whose frames were held back (by a scheduler, not by a late caller) must
    /// not make up for it with a burst above its line rate.
    pub fn bound_lateness(&mut self, now_ns: u64, max_ns: u64) {
        self.busy_until_ns = self.busy_until_ns.max(now_ns.saturating_sub(max_ns));
    }

    /// Called when a frame arrives at an empty queue: the link cannot have been sending it
    /// before it arrived.
    pub fn queue_was_empty(&mut self, now_ns: u64) {
        self.busy_until_ns = self.busy_until_ns.max(now_ns);
    }

    /// True when the next frame may start now.
    #[inline]
    pub fn may_send(&self, now_ns: u64) -> bool {
        self.busy_until_ns <= now_ns
    }

    /// The next frame starts (where the previous one ended).
    #[inline]
    pub fn send(&mut self, frame_bytes: u32) {
        let t = self.wire_ns(frame_bytes);
        self.busy_until_ns += t;
        self.busy_ns += t;
    }

    /// Wire-busy nanoseconds since the last call.
    pub fn take_busy_ns(&mut self) -> u64 {
        std::mem::take(&mut self.busy_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_drains_at_line_rate_even_when_polled_late() {
        // 1 Gbit/s, 1476-byte frames: 1500 wire bytes = 12 us each.
        let mut link = LinkPacer::new(1_000_000_000, 0);
        let mut sent = 0u64;
        let mut now = 0;
        link.queue_was_empty(0);
        // Polled every 100 us for 1 ms, always backlogged.
        while now <= 1_000_000 {
            while link.may_send(now) {
                link.send(1476);
                sent += 1;
            }
            now += 100_000;
        }
        // 1 ms / 12 us = 83.3 frames started by t = 1 ms (the last may start at 1 ms).
        assert!((83..=85).contains(&sent), "{sent}");
        assert!((link.take_busy_ns() as i64 - (sent * 12_000) as i64).abs() < 100);
    }

    #[test]
    fn held_back_frames_go_at_line_rate_not_in_a_catch_up_burst() {
        let mut link = LinkPacer::new(1_000_000_000, 0);
        link.send(1476);
        // Frames held back for 1 ms, then released: at most 50 us (4 frames) are made up.
        link.bound_lateness(1_012_000, 50_000);
        let mut at_once = 0;
        while link.may_send(1_012_000) {
            link.send(1476);
            at_once += 1;
        }
        assert_eq!(at_once, 5, "the frame at 1,012 us and the 50 us owed");
    }

    #[test]
    fn an_idle_link_does_not_bank_time() {
        let mut link = LinkPacer::new(1_000_000_000, 0);
        // Idle for 1 ms, then a burst arrives: only one frame goes at once.
        link.queue_was_empty(1_000_000);
        assert!(link.may_send(1_000_000));
        link.send(1476);
        assert!(!link.may_send(1_000_000 + 11_000));
        assert!(link.may_send(1_000_000 + 12_000));
    }
}
