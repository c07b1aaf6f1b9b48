//! The live A/B of the PMD's two poll orders: C2QoS (HBS picks, C2TB charges) against plain
//! round robin over the same ports, on the same traffic.
//!
//! With `slaswitchd --compare-slice-us N`, a PMD that has a C2QoS scheduler alternates every N
//! microseconds between running it and bypassing it (round robin exactly as a PMD without C2QoS
//! settings runs, the scheduler left untouched), and counts each side's packets and cycles
//! apart. Why in the PMD: this host moves a batch's cost by several percent within a second, so
//! windows compared through the control socket, tenths of a second apart, differ by more than
//! the overhead being measured; slices of tens of milliseconds side by side see the same phase
//! of the host.
//!
//! The scheduler runs on its own clock, the TSC less the time round robin has run: to it the
//! round-robin slices do not exist, so its buckets and queues are where a scheduler that ran
//! all along would have them (on the TSC its buckets would fill to their depth in every
//! round-robin slice, and no port would ever owe tokens). Only the last quarter of every slice
//! is counted: after a switch the traffic takes milliseconds to settle into the new order
//! (the rings' fill), and counting earlier favoured whichever side had just started. While
//! round robin runs, neither the scheduler's state is published nor drift windows are closed:
//! those are C2QoS's work, and round robin does not pay for them.

use crate::counters::{PmdTotals, RxTotals};

/// Share of each slice left uncounted while the switch settles into the side it switched to.
const SETTLE_PERCENT: u64 = 75;

/// What one side ran and did in its counted time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompareSide {
    /// Slices counted.
    pub slices: u64,
    /// TSC cycles counted: the PMD's whole time (busy, idle and stalled).
    pub elapsed_cycles: u64,
    /// Busy cycles counted.
    pub busy_cycles: u64,
    /// Stalled cycles counted.
    pub stalled_cycles: u64,
    /// Packets received.
    pub packets: u64,
    /// Polls that brought packets, and polls that found none.
    pub batches: u64,
    /// See `batches`.
    pub empty_polls: u64,
    /// C2QoS's own cycles (`qos_cycles`): none on the round-robin side.
    pub qos_cycles: u64,
}

impl CompareSide {
    fn add(&mut self, from: &Snapshot, to: &Snapshot) {
        self.slices += 1;
        self.elapsed_cycles += to.tsc - from.tsc;
        self.busy_cycles += to.busy_cycles - from.busy_cycles;
        self.stalled_cycles += to.stalled_cycles - from.stalled_cycles;
        self.packets += to.packets - from.packets;
        self.batches += to.batches - from.batches;
        self.empty_polls += to.empty_polls - from.empty_polls;
        self.qos_cycles += to.qos_cycles - from.qos_cycles;
    }
}

/// Both sides' counted totals since the daemon started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompareTotals {
    /// The slice, microseconds.
    pub slice_us: u64,
    /// The round-robin side.
    pub round_robin: CompareSide,
    /// The C2QoS side.
    pub c2qos: CompareSide,
}

/// The counters a slice is measured between.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    tsc: u64,
    busy_cycles: u64,
    stalled_cycles: u64,
    packets: u64,
    batches: u64,
    empty_polls: u64,
    qos_cycles: u64,
}

impl Snapshot {
    fn take(tsc: u64, pmd: &PmdTotals, qos_cycles: u64, ports: &[RxTotals]) -> Snapshot {
        let mut s = Snapshot {
            tsc,
            busy_cycles: pmd.busy_cycles,
            stalled_cycles: pmd.stalled_cycles,
            qos_cycles,
            ..Snapshot::default()
        };
        for p in ports {
            s.packets += p.rx_packets;
            s.batches += p.batches;
            s.empty_polls += p.empty_polls;
        }
        s
    }
}

/// One PMD's alternation. Off (`slice_ticks` 0), [`SchedulerCompare::due`] is always false.
pub(crate) struct SchedulerCompare {
    slice_ticks: u64,
    /// The uncounted start of each slice.
    settle_ticks: u64,
    /// The side now running bypasses the scheduler.
    round_robin: bool,
    /// Counting has begun in this slice (its settling part is over).
    counting: bool,
    /// TSC of the next step: the end of the uncounted part, or of the slice.
    next_tsc: u64,
    from: Snapshot,
    totals: CompareTotals,
    /// TSC time round robin has run in finished slices, and when the current one began.
    paused_ticks: u64,
    round_robin_since_tsc: u64,
}

impl SchedulerCompare {
    pub(crate) fn new(slice_us: u64, tsc_hz: u64, now_tsc: u64) -> Self {
        let slice_ticks = (u128::from(slice_us) * u128::from(tsc_hz) / 1_000_000) as u64;
        SchedulerCompare {
            slice_ticks,
            settle_ticks: slice_ticks * SETTLE_PERCENT / 100,
            round_robin: false,
            counting: false,
            next_tsc: if slice_ticks == 0 { u64::MAX } else { now_tsc + slice_ticks * SETTLE_PERCENT / 100 },
            from: Snapshot::default(),
            totals: CompareTotals { slice_us, ..CompareTotals::default() },
            paused_ticks: 0,
            round_robin_since_tsc: 0,
        }
    }

    /// The scheduler's clock at TSC `now_tsc`: the TSC less the round-robin slices, standing
    /// still during one. Off, the TSC itself.
    #[inline]
    pub(crate) fn scheduler_clock(&self, now_tsc: u64) -> u64 {
        if self.round_robin {
            self.round_robin_since_tsc - self.paused_ticks
        } else {
            now_tsc - self.paused_ticks
        }
    }

    /// True while the scheduler is to be bypassed.
    #[inline]
    pub(crate) fn round_robin(&self) -> bool {
        self.round_robin
    }

    #[inline]
    pub(crate) fn due(&self, now_tsc: u64) -> bool {
        now_tsc >= self.next_tsc
    }

    /// Starts counting, or ends the slice and switches sides. `scheduled`: the PMD has a
    /// scheduler now; without one there is nothing to compare and nothing is counted.
    pub(crate) fn step(&mut self, now_tsc: u64, scheduled: bool, pmd: &PmdTotals, qos_cycles: u64, ports: &[RxTotals]) {
        let now = Snapshot::take(now_tsc, pmd, qos_cycles, ports);
        if !self.counting {
            self.from = now;
            self.counting = true;
            self.next_tsc = self.from.tsc + self.slice_ticks - self.settle_ticks;
            return;
        }
        if scheduled {
            let side = if self.round_robin { &mut self.totals.round_robin } else { &mut self.totals.c2qos };
            side.add(&self.from, &now);
        }
        if self.round_robin {
            self.paused_ticks += now_tsc - self.round_robin_since_tsc;
        } else {
            self.round_robin_since_tsc = now_tsc;
        }
        self.round_robin = !self.round_robin;
        self.counting = false;
        self.next_tsc = now_tsc + self.settle_ticks;
    }

    /// A reconfiguration changed the ports: the slice under way is not counted.
    pub(crate) fn restart(&mut self, now_tsc: u64) {
        if self.slice_ticks > 0 {
            self.counting = false;
            self.next_tsc = now_tsc + self.settle_ticks;
        }
    }

    pub(crate) fn totals(&self) -> CompareTotals {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(packets: u64) -> Vec<RxTotals> {
        vec![RxTotals { rx_packets: packets, batches: packets / 32, ..RxTotals::default() }]
    }

    #[test]
    fn alternates_sides_and_counts_only_the_last_quarter_of_each_slice() {
        // 1000 us slices at 1 MHz: 1000 ticks, 750 uncounted.
        let mut c = SchedulerCompare::new(1000, 1_000_000, 0);
        let pmd = PmdTotals::default();
        assert!(!c.round_robin());
        assert!(!c.due(749) && c.due(750));
        c.step(750, true, &pmd, 0, &ports(96));
        assert!(!c.due(999) && c.due(1000));
        c.step(1000, true, &pmd, 0, &ports(400));
        assert!(c.round_robin(), "the second slice bypasses the scheduler");
        assert_eq!(
            c.totals().c2qos,
            CompareSide { slices: 1, elapsed_cycles: 250, packets: 304, batches: 12 - 3, ..CompareSide::default() }
        );
        c.step(1750, true, &pmd, 0, &ports(500));
        c.step(2000, true, &pmd, 0, &ports(1000));
        assert!(!c.round_robin());
        assert_eq!(c.totals().round_robin.packets, 500);
        assert_eq!(c.totals().round_robin.elapsed_cycles, 250);
        assert_eq!(c.totals().c2qos.slices, 1);
    }

    #[test]
    fn a_slice_without_a_scheduler_or_cut_by_a_reconfiguration_is_not_counted() {
        let mut c = SchedulerCompare::new(1000, 1_000_000, 0);
        let pmd = PmdTotals::default();
        c.step(750, true, &pmd, 0, &ports(0));
        c.restart(900);
        assert!(!c.due(1649) && c.due(1650));
        c.step(1650, true, &pmd, 0, &ports(50));
        c.step(1900, false, &pmd, 0, &ports(90));
        assert_eq!(c.totals().c2qos, CompareSide::default());
        assert!(c.round_robin(), "sides still alternate");
    }

    #[test]
    fn the_scheduler_clock_stands_still_while_round_robin_runs() {
        let mut c = SchedulerCompare::new(1000, 1_000_000, 0);
        let pmd = PmdTotals::default();
        assert_eq!(c.scheduler_clock(700), 700);
        c.step(750, true, &pmd, 0, &ports(0));
        c.step(1000, true, &pmd, 0, &ports(0));
        // Round robin from 1000 to 2000: the scheduler sees 1000 throughout.
        assert_eq!(c.scheduler_clock(1000), 1000);
        assert_eq!(c.scheduler_clock(1900), 1000);
        c.step(1750, true, &pmd, 0, &ports(0));
        c.step(2000, true, &pmd, 0, &ports(0));
        assert!(!c.round_robin());
        assert_eq!(c.scheduler_clock(2000), 1000);
        assert_eq!(c.scheduler_clock(2600), 1600);
    }

    #[test]
    fn off_never_steps() {
        let c = SchedulerCompare::new(0, 2_000_000_000, 5);
        assert!(!c.due(u64::MAX - 1));
        assert!(!c.round_robin());
        assert_eq!(c.scheduler_clock(12_345), 12_345);
    }
}
