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
//! stage segments counts once per segment there). So is a frame a kernel port's sender thread
//! sends (`crate::kernel_tx`), to the moment the sender hands it to the driver.
//!
//! A frame leaves the switch when the driver takes it, as DPDK's own latency statistics count
//! it (their callback runs before the driver's transmit): what the driver then does is the
//! port's, not the switch's queueing. For a NIC or a vhost-user ring that is a descriptor or
//! a copy; for a kernel port it is a system call that runs the receiving stack too, tens of
//! microseconds on a paravirtualized host, which the egress stage's cycles still show (and
//! every frame queued behind it still waits). A batch behind a full one
//! is not timed: its frames may have been in the ring since before that poll, and nothing
//! bounds their wait (a backlogged port's latency is its ring's length over its rate).
//!
//! Beside every frame's residence, the frames no stall the PMD measured touched (no stage of
//! the loop that took over `crate::pmd::STALL_NS` ended after their residence began): what the
//! switch itself did to a frame, apart from the host taking the PMD's core (seed-independent;
//! the latency SLO's `pmd_stall` cause and `docs/operations.md`). Gaps shorter than a stall
//! stay in both. A paced link learns of a stall when the PMD has measured it, so a stall in
//! the very stage or drain that hands a frame to the driver leaves that frame in both.

use crate::histogram::{Histogram, SharedHistogram, Touched};

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
    /// Per frame no measured stall touched, nanoseconds.
    pub(crate) unstalled: Histogram,
    /// The buckets either histogram counted into since the last publication.
    pub(crate) touched: Touched,
}

impl Residence {
    /// Goes on from `frames` and `unstalled`, what was counted before.
    pub(crate) fn new(tsc_hz: u64, frames: Histogram, unstalled: Histogram) -> Residence {
        Residence { drained_at_tsc: 0, clock: TicksToNs::new(tsc_hz), frames, unstalled, touched: Touched::NONE }
    }

    /// When the residence of the batch being served began: the poll that last emptied the
    /// ring; 0 when the batch is not timed.
    #[inline]
    pub(crate) fn since_tsc(&self) -> u64 {
        self.drained_at_tsc
    }

    /// A poll that ended its rx burst at `at.rx_tsc` with `received` frames of a burst of up
    /// to `burst`, `kept` of them past policing, their egress done at `at.sent_tsc`.
    #[inline]
    pub(crate) fn poll(&mut self, at: PollTimes, received: usize, kept: usize, burst: usize) {
        if kept > 0 && self.drained_at_tsc != 0 {
            let ticks = at.sent_tsc.saturating_sub(self.drained_at_tsc);
            let ns = self.clock.ns(ticks);
            self.frames.record_n_noting(ns, kept as u64, &mut self.touched);
            if !stall_touched(self.drained_at_tsc, at.stall_end_tsc) {
                self.unstalled.record_n(ns, kept as u64);
            }
        }
        // After a full batch the ring may still hold frames from before this poll: nothing
        // bounds the next batch's wait, so it is not timed.
        self.drained_at_tsc = if received < burst { at.rx_tsc } else { 0 };
    }
}

/// When a poll's frames were received and left, and when the PMD's last measured stall ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PollTimes {
    pub(crate) rx_tsc: u64,
    pub(crate) sent_tsc: u64,
    pub(crate) stall_end_tsc: u64,
}

/// When a batch's residence began (0: not timed), and when the PMD's last measured stall ended
/// (0: none yet): what a paced link needs to time the batch's frames when it sends them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ResidenceStart {
    pub(crate) since_tsc: u64,
    pub(crate) stall_end_tsc: u64,
}

/// One source's frames timed where they leave the switch after the PMD let them go (a paced
/// link, a kernel port's sender): their residence, all and those no PMD stall touched, readable
/// by the control thread. Its one writer is whoever sends the frames.
#[derive(Debug, Default)]
pub(crate) struct SharedResidence {
    frames: SharedHistogram,
    unstalled: SharedHistogram,
}

impl SharedResidence {
    /// A frame whose residence began at `start` (not timed when `since_tsc` is 0) left at
    /// `left_tsc`.
    #[inline]
    pub(crate) fn record(&self, clock: TicksToNs, start: ResidenceStart, left_tsc: u64) {
        if start.since_tsc == 0 {
            return;
        }
        let ns = clock.ns(left_tsc.saturating_sub(start.since_tsc));
        self.frames.record(ns);
        if !stall_touched(start.since_tsc, start.stall_end_tsc) {
            self.unstalled.record(ns);
        }
    }

    /// All the frames' residence, and the unstalled frames'.
    pub(crate) fn read(&self) -> (Histogram, Histogram) {
        (self.frames.read(), self.unstalled.read())
    }

    /// Forgets every frame.
    pub(crate) fn clear(&self) {
        self.frames.clear();
        self.unstalled.clear();
    }
}

/// A frame whose residence began at `since_tsc` was touched by a stall that ended at
/// `stall_end_tsc` (0: none yet) if it ended after the frame's residence began.
#[inline]
pub(crate) fn stall_touched(since_tsc: u64, stall_end_tsc: u64) -> bool {
    stall_end_tsc != 0 && stall_end_tsc >= since_tsc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rx_tsc: u64, sent_tsc: u64) -> PollTimes {
        PollTimes { rx_tsc, sent_tsc, stall_end_tsc: 0 }
    }

    #[test]
    fn a_batch_is_timed_from_the_last_poll_that_emptied_the_ring() {
        // 1 GHz: a tick is a nanosecond.
        let mut r = Residence::new(1_000_000_000, Histogram::default(), Histogram::default());
        r.poll(at(1_000, 1_000), 0, 0, 32);
        // A full batch after an empty poll: its frames arrived after 1000.
        r.poll(at(5_000, 6_000), 32, 32, 32);
        assert_eq!(r.frames.count(), 32);
        assert_eq!(r.frames.max_ns(), 5_000);
        // Behind a full batch: not timed.
        r.poll(at(9_000, 9_500), 3, 2, 32);
        assert_eq!(r.frames.count(), 32);
        // That poll emptied the ring: the next batch is timed from it (policing kept 1 of 2).
        r.poll(at(20_000, 21_000), 2, 1, 32);
        assert_eq!(r.frames.count(), 33);
        assert_eq!(r.frames.max_ns(), 12_000);
        assert_eq!(r.unstalled.count(), 33, "no stall measured");
    }

    #[test]
    fn frames_a_stall_ended_after_the_start_of_are_left_out_of_the_unstalled_figure() {
        let mut r = Residence::new(1_000_000_000, Histogram::default(), Histogram::default());
        r.poll(at(1_000, 1_000), 0, 0, 32);
        // A stall ended at 150,000, after these frames' residence began at 1,000.
        r.poll(PollTimes { rx_tsc: 100_000, sent_tsc: 200_000, stall_end_tsc: 150_000 }, 4, 4, 32);
        assert_eq!((r.frames.count(), r.unstalled.count()), (4, 0));
        // The next batch's residence began at 100,000, before the stall ended: touched too.
        r.poll(PollTimes { rx_tsc: 210_000, sent_tsc: 212_000, stall_end_tsc: 150_000 }, 2, 2, 32);
        assert_eq!((r.frames.count(), r.unstalled.count()), (6, 0));
        // Its residence began at 210,000, after the stall: untouched.
        r.poll(PollTimes { rx_tsc: 215_000, sent_tsc: 216_000, stall_end_tsc: 150_000 }, 1, 1, 32);
        assert_eq!((r.frames.count(), r.unstalled.count()), (7, 1));
        assert_eq!(r.unstalled.max_ns(), 6_000);
    }
}
