//! HBS's turns (`docs/deviations.md` row 5): a backlogged port runs several full batches on
//! one decision, and a turn's length follows what a decision costs on this host.

use super::{PortIndex, PortPlace, PortScheduler, PRIORITY_CLASSES};

/// About one full batch of cloud-like packets (small frames through a security-group table):
/// such batches keep one decision each, and cheap ones share a decision among a few
/// (`docs/deviations.md` row 5; the figures in `docs/results/c2qos-overhead.md`).
pub const DEFAULT_TURN_NS: u32 = 3_000;

/// A turn's ceiling however dear a decision is: with 28 ports of the top class, a port's turn
/// comes round within about half a millisecond.
pub const DEFAULT_TURN_MAX_NS: u32 = 20_000;

/// A turn takes at least this many times the measured cost of the decision that starts it, so
/// that decisions take at most 1% of a backlogged PMD's cycles (the overhead goal) on a host
/// where a batch evicts the scheduler's lines and a decision is dear.
pub const TURN_CYCLES_PER_DECISION_CYCLE: u64 = 100;

/// Ours, beyond seed 000's one decision per batch (`docs/deviations.md`, turns): a backlogged
/// port of the top configured class runs further full batches of one turn on tokens it holds,
/// and is charged once when the turn ends.
#[derive(Clone, Debug)]
pub(super) struct Turns {
    /// A turn's length in TSC ticks: [`super::HbsConfig::turn_ns`], or longer while decisions are
    /// dear ([`PortScheduler::set_decision_cycles`]).
    pub(super) ticks: u64,
    /// [`super::HbsConfig::turn_ns`] and [`super::HbsConfig::turn_max_ns`] in TSC ticks.
    pub(super) min_ticks: u64,
    pub(super) max_ticks: u64,
    /// The cycles of the turn under way (its batches before the last one).
    pub(super) cycles: u64,
    /// What the turn under way may take at most, worked out from the port's record after its
    /// first batch (`PortScheduler::turn_budget`), so that the batches after it read only
    /// these fields; 0 ends the turn at its next batch.
    pub(super) budget_cycles: u64,
    /// The highest configured class of the scheduled ports (smallest number): only its ports
    /// take turns.
    pub(super) top_class: u8,
}

impl Turns {
    /// Turns of `turn_ns` (at most `turn_max_ns` once decisions are measured) on a TSC of
    /// `tsc_hz`.
    pub(super) fn new(turn_ns: u32, turn_max_ns: u32, tsc_hz: u64, top_class: u8) -> Turns {
        let mut turns = Turns { ticks: 0, min_ticks: 0, max_ticks: 0, cycles: 0, budget_cycles: 0, top_class };
        turns.set_bounds(turn_ns, turn_max_ns, tsc_hz);
        turns
    }

    /// Classes, limits, depths or C2TB's settings changed: the budget of a turn under way was
    /// worked out from the old ones, so the turn ends at its next batch.
    pub(super) fn settings_changed(&mut self) {
        self.budget_cycles = 0;
    }

    /// New floor and ceiling; the length goes back to the floor until the next measurement.
    pub(super) fn set_bounds(&mut self, turn_ns: u32, turn_max_ns: u32, tsc_hz: u64) {
        self.min_ticks = ns_to_ticks(turn_ns, tsc_hz);
        self.max_ticks = ns_to_ticks(turn_max_ns.max(turn_ns), tsc_hz);
        self.ticks = self.min_ticks;
    }
}

fn ns_to_ticks(ns: u32, tsc_hz: u64) -> u64 {
    u64::from(ns) * tsc_hz / 1_000_000_000
}

impl PortScheduler {
    /// Tells the scheduler what a decision after a batch costs here (the PMD measures it): a
    /// turn then lasts [`TURN_CYCLES_PER_DECISION_CYCLE`] times that, between
    /// [`super::HbsConfig::turn_ns`] and [`super::HbsConfig::turn_max_ns`].
    pub fn set_decision_cycles(&mut self, cycles: u64) {
        let wanted = cycles.saturating_mul(TURN_CYCLES_PER_DECISION_CYCLE);
        self.turns.ticks = wanted.clamp(self.turns.min_ticks, self.turns.max_ticks);
    }

    /// The length of a turn now, TSC ticks.
    pub fn turn_ticks(&self) -> u64 {
        self.turns.ticks
    }

    /// Ends a batch of the port in service: either the port keeps the core for another batch
    /// of the same turn (true: serve it again without [`PortScheduler::next_port`]), or its
    /// turn ends and the whole turn is reported ([`PortScheduler::report_batch`]). A turn goes
    /// on while the batches are full (the port is backlogged), the turn so far is shorter than
    /// a turn ([`PortScheduler::set_decision_cycles`]), the port's tokens cover it, no
    /// demoted port is due for its probe, and no port can be ready or resting above it
    /// (`turn_budget`): the ports of the top class share the core in turns, the
    /// classes below keep a decision per batch, so a latency-sensitive class above them finds
    /// the core exactly as before (Fig. 11c and 12: its ports rest or sink through the
    /// classes between packets). `may_continue` false ends a turn regardless (the PMD ends
    /// every turn with its pass). A higher class waits at most one batch, as with a decision
    /// per batch, and C2TB's bound holds (a turn runs only on tokens the port has, and may
    /// leave it owing one batch, as one batch may). Seed 000 Sec. IV-B decides once per
    /// batch; a decision after a batch costs what reloading the scheduler's lines costs, so
    /// sharing it among the batches of one turn keeps it near 1% of the work it schedules
    /// (the overhead benchmark, `docs/results/c2qos-overhead.md`).
    #[inline]
    pub fn end_batch(&mut self, port: PortIndex, cycles: u64, packets: u32, now_tsc: u64, may_continue: bool) -> bool {
        let turn_cycles = self.turns.cycles + cycles;
        if may_continue && packets >= self.burst_packets(port) && turn_cycles < self.turns.ticks {
            if self.turns.cycles == 0 {
                self.turns.budget_cycles = self.turn_budget(port, now_tsc);
            }
            if turn_cycles < self.turns.budget_cycles && !self.demoted_probe_due(now_tsc) {
                self.turns.cycles = turn_cycles;
                return true;
            }
        }
        self.turns.cycles = 0;
        self.report_batch(port, turn_cycles, packets, now_tsc);
        false
    }

    /// The cycles a turn of `port` may take: what its tokens cover, brought up to `now_tsc`
    /// (what it earned while it waited for its turn counts), if it is in service and no port
    /// can be ready or resting above the queue it goes back to; else 0. That holds for a port
    /// of the top configured class, not demoted, within its allocation; and for one beyond
    /// its allocation (C2TB's lowest tier, [`Self::tier_class`]) only while every ready port
    /// is in that tier too and none rests. Read from its record once per turn: the record,
    /// evicted by every batch, is not read again until the turn ends, and nothing moves in
    /// the queues meanwhile.
    fn turn_budget(&mut self, port: PortIndex, now_tsc: u64) -> u64 {
        let top_class = self.turns.top_class;
        let only_lowest_tier_ready =
            self.ready.highest().is_none_or(|class| class + 1 >= PRIORITY_CLASSES) && self.resting.ports.is_empty();
        let Some(slot) = self.slots.0.get_mut(port) else { return 0 };
        let Some(s) = slot.state.as_ref() else { return 0 };
        if s.current_priority != top_class || slot.place != PortPlace::InService {
            return 0;
        }
        self.pool.refill(&mut slot.bucket, now_tsc);
        if slot.bucket.beyond_allocation() && !only_lowest_tier_ready {
            return 0;
        }
        slot.bucket.covered_cycles()
    }
}
