//! Measuring the PMD thread itself, kept out of the packet path: the PMD loop is generic over a
//! [`Probe`] that it calls at fixed points. [`NoProbe`], the default, does nothing and compiles
//! away. [`OverheadProbe`] (`slaswitchd --probe`) times C2QoS's own work, as seed 000 Sec. VI-F
//! measures it on the PMD, and with a slice (`--compare-slice-us`) runs the live comparison of
//! C2QoS with plain round robin on the same traffic ([`compare`]).

pub mod compare;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use slaswitch_dpdk::{rdtsc, rdtsc_after_all, rdtsc_after_loads};

use crate::counters::{PmdTotals, RxTotals};
use crate::poll_order::Pick;
use compare::{CompareTotals, SchedulerCompare};

/// What the daemon asks of each PMD's probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeSettings {
    /// Microseconds per side of the live comparison; 0: no comparison, only the timing.
    pub compare_slice_us: u64,
}

/// The fixed points at which the PMD loop hands its work to a probe. Every method's default
/// is what the loop does without one.
pub(crate) trait Probe {
    /// True while the scheduler is to be bypassed (plain round robin over every port).
    #[inline(always)]
    fn bypass(&self) -> bool {
        false
    }

    /// The scheduler's clock at TSC `now_tsc`.
    #[inline(always)]
    fn clock(&self, now_tsc: u64) -> u64 {
        now_tsc
    }

    /// Runs the poll order's pick.
    #[inline(always)]
    fn pick(&mut self, pick: impl FnOnce() -> Pick) -> Pick {
        pick()
    }

    /// The PMD serves `pick` again as its port's turn goes on, without a pick; returns it.
    #[inline(always)]
    fn turn_goes_on(&mut self, pick: Pick) -> Pick {
        pick
    }

    /// Runs the charging of a port C2QoS picked (or served again as its turn went on), whose
    /// poll brought `received` packets, and returns what it returns.
    #[inline(always)]
    fn charge(&mut self, _received: usize, charge: impl FnOnce() -> bool) -> bool {
        charge()
    }

    /// Runs C2QoS's work between passes (publishing its state, drift windows); `scheduled`:
    /// the PMD has a scheduler.
    #[inline(always)]
    fn scheduler_work(&mut self, _scheduled: bool, work: impl FnOnce()) {
        work()
    }

    /// The end of a pass at TSC `now_tsc`.
    #[inline(always)]
    fn end_pass(&mut self, _now_tsc: u64, _scheduled: bool, _pmd: &PmdTotals, _ports: &[RxTotals]) {}

    /// The ports changed at TSC `now_tsc`.
    fn reconfigured(&mut self, _now_tsc: u64) {}

    /// Publishes what the probe measured.
    fn publish(&self) {}
}

/// No probe: the PMD as it runs in production.
pub(crate) struct NoProbe;

impl Probe for NoProbe {}

/// What the overhead probe measured on one PMD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTotals {
    /// C2QoS scheduler decisions (HBS picks, C2TB charges).
    pub qos_decisions: u64,
    /// Cycles C2QoS's own code took: decisions (one in 64 timed, scaled up), publishing its
    /// state and drift windows.
    pub qos_cycles: u64,
    /// The parts of `qos_cycles` spent picking the port and charging its batch.
    pub qos_pick_cycles: u64,
    /// See `qos_pick_cycles`.
    pub qos_charge_cycles: u64,
    /// Decisions whose poll came back empty, and their share of the pick and charge cycles: an
    /// empty poll costs round robin only the poll, C2QoS the decision too.
    pub qos_empty_decisions: u64,
    /// See `qos_empty_decisions`.
    pub qos_empty_cycles: u64,
    /// Cycles the timed decisions' fences waited for earlier stores to drain, which no timed
    /// interval holds: the cost of the timing itself.
    pub qos_sampling_cycles: u64,
    /// Timed decisions that were a port's turn going on (no pick: the PMD serves the port
    /// again), and their charging cycles, not scaled: what a batch of a turn costs C2QoS's code.
    #[serde(default)]
    pub qos_timed_turns: u64,
    /// See `qos_timed_turns`.
    #[serde(default)]
    pub qos_timed_turn_cycles: u64,
}

/// The probe's report, as the control plane reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The timing figures.
    #[serde(flatten)]
    pub totals: ProbeTotals,
    /// The live comparison's totals, when it runs.
    pub compare: Option<CompareTotals>,
    /// What the TSC reads add to a timed interval, taken off each ([`tsc_read_cycles`]).
    #[serde(default)]
    pub tsc_read_cycles: u64,
}

/// Where a PMD's probe publishes. The PMD never waits for it: a publication that finds the
/// reader holding the lock is skipped, and the next one carries the totals.
#[derive(Debug, Default)]
pub struct ProbeCounters(Mutex<ProbeReport>);

impl ProbeCounters {
    /// The last report.
    pub fn read(&self) -> ProbeReport {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One decision in `1 << SAMPLE_SHIFT` is timed.
const SAMPLE_SHIFT: u32 = 6;

/// Times C2QoS's decisions and runs the comparison.
pub(crate) struct OverheadProbe {
    counters: Arc<ProbeCounters>,
    totals: ProbeTotals,
    compare: Option<SchedulerCompare>,
    /// What the TSC reads add to a timed interval.
    read_cycles: u64,
    /// Longer than this, a timed interval held a stall, and counts as this.
    stall_cycles: u64,
    /// The decision under way is timed, and its pick's cycles.
    sampled: bool,
    pick_cycles: u64,
    /// The batch under way is a port's turn going on (`turn_goes_on`), not picked.
    turn: bool,
}

impl OverheadProbe {
    pub(crate) fn new(settings: ProbeSettings, counters: Arc<ProbeCounters>, tsc_hz: u64, stall_cycles: u64) -> Self {
        let compare =
            (settings.compare_slice_us > 0).then(|| SchedulerCompare::new(settings.compare_slice_us, tsc_hz, rdtsc()));
        OverheadProbe {
            counters,
            totals: ProbeTotals::default(),
            compare,
            read_cycles: tsc_read_cycles(),
            stall_cycles,
            sampled: false,
            pick_cycles: 0,
            turn: false,
        }
    }

    /// A timed interval of C2QoS's own work: less the TSC read inside it, and never a stall.
    fn own(&self, from: u64, to: u64) -> u64 {
        (to - from).saturating_sub(self.read_cycles).min(self.stall_cycles)
    }
}

impl Probe for OverheadProbe {
    fn bypass(&self) -> bool {
        self.compare.as_ref().is_some_and(|c| c.round_robin())
    }

    fn clock(&self, now_tsc: u64) -> u64 {
        self.compare.as_ref().map_or(now_tsc, |c| c.scheduler_clock(now_tsc))
    }

    fn pick(&mut self, pick: impl FnOnce() -> Pick) -> Pick {
        self.turn = false;
        self.sampled = self.totals.qos_decisions.trailing_zeros() >= SAMPLE_SHIFT;
        if !self.sampled {
            let picked = pick();
            self.totals.qos_decisions +=
                u64::from(!matches!(picked, Pick::Port { scheduled: false, .. } | Pick::PassEnd));
            return picked;
        }
        // The fences wait for the batch's stores; that wait is the sampling's own cost.
        let t_drain = rdtsc();
        let t0 = rdtsc_after_all();
        let picked = pick();
        let t1 = rdtsc_after_loads();
        if matches!(picked, Pick::Port { scheduled: false, .. } | Pick::PassEnd) {
            self.sampled = false;
            return picked;
        }
        self.totals.qos_decisions += 1;
        self.totals.qos_sampling_cycles += self.own(t_drain, t0);
        self.pick_cycles = self.own(t0, t1);
        if picked == Pick::Idle {
            let scaled = self.pick_cycles << SAMPLE_SHIFT;
            self.totals.qos_cycles += scaled;
            self.totals.qos_pick_cycles += scaled;
        }
        picked
    }

    /// A turn's batch counts as a decision, sampled as picks are, with no picking cycles.
    fn turn_goes_on(&mut self, pick: Pick) -> Pick {
        self.sampled = self.totals.qos_decisions.trailing_zeros() >= SAMPLE_SHIFT;
        self.totals.qos_decisions += 1;
        self.pick_cycles = 0;
        self.turn = true;
        pick
    }

    fn charge(&mut self, received: usize, charge: impl FnOnce() -> bool) -> bool {
        self.totals.qos_empty_decisions += u64::from(received == 0);
        if !self.sampled {
            return charge();
        }
        let t_drain = rdtsc();
        let t0 = rdtsc_after_all();
        let goes_on = charge();
        let (charge_cycles, drain_cycles) = (self.own(t0, rdtsc_after_loads()), self.own(t_drain, t0));
        let decision = (self.pick_cycles + charge_cycles) << SAMPLE_SHIFT;
        let t = &mut self.totals;
        t.qos_sampling_cycles += drain_cycles;
        t.qos_cycles += decision;
        t.qos_pick_cycles += self.pick_cycles << SAMPLE_SHIFT;
        t.qos_charge_cycles += charge_cycles << SAMPLE_SHIFT;
        if self.turn {
            t.qos_timed_turns += 1;
            t.qos_timed_turn_cycles += charge_cycles;
        }
        if received == 0 {
            t.qos_empty_cycles += decision;
        }
        goes_on
    }

    fn scheduler_work(&mut self, scheduled: bool, work: impl FnOnce()) {
        let t0 = rdtsc();
        work();
        if scheduled {
            self.totals.qos_cycles += self.own(t0, rdtsc());
        }
    }

    fn end_pass(&mut self, now_tsc: u64, scheduled: bool, pmd: &PmdTotals, ports: &[RxTotals]) {
        if let Some(c) = self.compare.as_mut().filter(|c| c.due(now_tsc)) {
            c.step(now_tsc, scheduled, pmd, self.totals.qos_cycles, ports);
        }
    }

    fn reconfigured(&mut self, now_tsc: u64) {
        if let Some(c) = self.compare.as_mut() {
            c.restart(now_tsc);
        }
    }

    fn publish(&self) {
        if let Ok(mut report) = self.counters.0.try_lock() {
            *report = ProbeReport {
                totals: self.totals,
                compare: self.compare.as_ref().map(|c| c.totals()),
                tsc_read_cycles: self.read_cycles,
            };
        }
    }
}

/// What the TSC reads add to an interval timed from [`rdtsc_after_all`] to
/// [`rdtsc_after_loads`]: the average difference of two such reads back to back
/// ([`read_cost_cycles`]).
fn tsc_read_cycles() -> u64 {
    let mut samples: Vec<u64> = (0..READ_COST_SAMPLES)
        .map(|_| {
            let t0 = rdtsc_after_all();
            rdtsc_after_loads() - t0
        })
        .collect();
    read_cost_cycles(&mut samples)
}

/// Back-to-back reads sampled for [`tsc_read_cycles`].
const READ_COST_SAMPLES: usize = 4096;

/// The read cost from back-to-back samples: their average, leaving out the slowest hundredth
/// (reads the host interrupted). Not the smallest: the TSC of some hosts advances in steps of
/// many cycles (AMD EPYC guests do), so a reading is a whole number of steps and only its
/// average says what an interval took; subtracting the smallest difference would leave about
/// half a step in every timed interval.
fn read_cost_cycles(samples: &mut [u64]) -> u64 {
    samples.sort_unstable();
    let kept = &samples[..samples.len() - samples.len() / 100];
    if kept.is_empty() {
        return 0;
    }
    let sum: u64 = kept.iter().sum();
    (sum + kept.len() as u64 / 2) / kept.len() as u64
}

#[cfg(test)]
mod tests {
    use super::read_cost_cycles;

    #[test]
    fn a_stepped_tsc_costs_its_reads_their_average_not_their_smallest_difference() {
        // A TSC advancing 26 cycles at a time: reads 38.5 cycles apart read 26 or 52, half each.
        let mut samples: Vec<u64> = (0..1000).map(|i| if i % 2 == 0 { 26 } else { 52 }).collect();
        assert_eq!(read_cost_cycles(&mut samples), 39);
        // A fine-grained TSC: the average, a little above the smallest.
        let mut samples: Vec<u64> = (0..1000).map(|i| 36 + i % 7).collect();
        assert_eq!(read_cost_cycles(&mut samples), 39);
    }

    #[test]
    fn reads_the_host_interrupted_are_left_out() {
        let mut samples = vec![30u64; 990];
        samples.extend([2_000_000; 10]);
        assert_eq!(read_cost_cycles(&mut samples), 30);
        assert_eq!(read_cost_cycles(&mut []), 0);
    }
}
