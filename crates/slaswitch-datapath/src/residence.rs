//! Residence time: how long a port's frames stayed in the switch, so an operator reads a
//! VM's latency through the switch without a sink of their own (`pmd-stats`, metrics).
//!
//! A vhost-user ring does not say when a frame was put in it, so the time is bounded from
//! what the PMD does know: when a poll left the port's ring empty (it took less than a full
//! batch), every frame of the next batch arrived after it. That batch's residence is from the
//! emptying poll to the moment its egress stage handed its last frame to an output port's
//! driver (the start of the last tx burst; a batch whose frames were all dropped, to the
//! stage's end), counted once per frame: the longest any of its frames can have waited in
//! the ring and the switch, and exactly what one arriving just after that poll did. It covers
//! the wait for the PMD (the scheduler's doing) and the three stages. A frame a paced link
//! queues is timed by the link from the same poll to the moment the link hands it to the
//! driver (`crate::paced_tx`), so its residence includes the link's queue (a frame the egress
//! stage segments counts once per segment there).
//!
//! A frame leaves the switch when the driver takes it, as DPDK's own latency statistics count
//! it (their callback runs before the driver's transmit): what the driver then does is the
//! port's, not the switch's queueing. For a NIC or a vhost-user ring that is a descriptor or
//! a copy; for a kernel port it is a system call that runs the receiving stack too, tens of
//! microseconds on a paravirtualized host, which the egress stage's cycles still show (and
//! every frame queued behind it still waits). A batch behind a full one
//! is not timed: its frames may have been in the ring since before that poll, and nothing
//! bounds their wait (a backlogged port's latency is its ring's length over its rate).

use crate::histogram::Histogram;

/// Fraction bits of [`TicksToNs`]'s multiplier.
const NS_SHIFT: u32 = 32;

/// TSC ticks to nanoseconds without a division (a multiplier with [`NS_SHIFT`] fraction
/// bits): how the PMD and the paced links time frames.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TicksToNs(u64);

impl TicksToNs {
    pub(crate) fn new(tsc_hz: u64) -> TicksToNs {
        TicksToNs(((1_000_000_000u128 << NS_SHIFT) / u128::from(tsc_hz.max(1))) as u64)
    }

    #[inline]
    pub(crate) fn ns(self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.0)) >> NS_SHIFT) as u64
    }
}

/// One rx port's residence times.
#[derive(Clone, Debug)]
pub(crate) struct Residence {
    /// TSC at which a poll last left the ring empty; 0 before the first.
    drained_at_tsc: u64,
    clock: TicksToNs,
    /// Per frame, nanoseconds.
    pub(crate) frames: Histogram,
}

impl Residence {
    /// Goes on from `frames`, what was counted before.
    pub(crate) fn new(tsc_hz: u64, frames: Histogram) -> Residence {
        Residence { drained_at_tsc: 0, clock: TicksToNs::new(tsc_hz), frames }
    }

    /// When the residence of the batch being served began: the poll that last emptied the
    /// ring; 0 when the batch is not timed.
    #[inline]
    pub(crate) fn since_tsc(&self) -> u64 {
        self.drained_at_tsc
    }

    /// A poll that ended its rx burst at `rx_tsc` with `received` frames of a burst of up to
    /// `burst`, `kept` of them past policing, their egress done at `sent_tsc`.
    #[inline]
    pub(crate) fn poll(&mut self, rx_tsc: u64, sent_tsc: u64, received: usize, kept: usize, burst: usize) {
        if kept > 0 && self.drained_at_tsc != 0 {
            let ticks = sent_tsc.saturating_sub(self.drained_at_tsc);
            let ns = self.clock.ns(ticks);
            self.frames.record_n(ns, kept as u64);
        }
        // After a full batch the ring may still hold frames from before this poll: nothing
        // bounds the next batch's wait, so it is not timed.
        self.drained_at_tsc = if received < burst { rx_tsc } else { 0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_timed_from_the_last_poll_that_emptied_the_ring() {
        // 1 GHz: a tick is a nanosecond.
        let mut r = Residence::new(1_000_000_000, Histogram::default());
        r.poll(1_000, 1_000, 0, 0, 32);
        // A full batch after an empty poll: its frames arrived after 1000.
        r.poll(5_000, 6_000, 32, 32, 32);
        assert_eq!(r.frames.count(), 32);
        assert_eq!(r.frames.max_ns(), 5_000);
        // Behind a full batch: not timed.
        r.poll(9_000, 9_500, 3, 2, 32);
        assert_eq!(r.frames.count(), 32);
        // That poll emptied the ring: the next batch is timed from it (policing kept 1 of 2).
        r.poll(20_000, 21_000, 2, 1, 32);
        assert_eq!(r.frames.count(), 33);
        assert_eq!(r.frames.max_ns(), 12_000);
    }
}
