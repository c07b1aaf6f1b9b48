//! The order in which a PMD thread polls its rx ports: one type, two forms.
//!
//! - **Round robin**: every port once per pass, as a PMD without C2QoS settings polls (and OVS);
//!   the PMD then passes over quiet ones until their look is due (`crate::idle_polling`).
//! - **C2QoS** (seed 000 Sec. IV): HBS picks the next port among those with C2QoS settings and
//!   C2TB is charged what its batch cost; the ports without settings (typically the uplink) are
//!   then polled once per pass beside it. A pass holds as many scheduler decisions as there are
//!   scheduled ports, and ends early when every one of them waits for tokens.
//!
//! Why the ports without settings stay outside HBS: seed 000 Sec. V replaces the polling of *VM*
//! ports by HBS; a port nobody configured, such as the uplink, carries every tenant's return
//! traffic (responses, TCP ACKs), and in the lowest class it starved behind MIN-MAX ports that
//! always hold tokens (`docs/deviations.md`).

use slaswitch_dpdk::{prefetch, rdtsc, MAX_BURST};
use slaswitch_qos::cpu::{C2tbConfig, HbsConfig, PortPlace, PortScheduler, WaitCounts};

use crate::counters::{CpuQosState, Place, PmdTotals};
use crate::pmd_config::PmdConfig;

/// One scheduler decision in this many is timed for the decision's cost.
const DECISION_SAMPLE_PERIOD: u64 = 64;
/// A timed decision longer than this was interrupted by the host and is not a sample.
const DECISION_SAMPLE_MAX_CYCLES: u64 = 20_000;

/// What the poll order says to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Poll rx port `idx` (an index in the configuration's `rx_ports`) for up to `burst`
    /// packets; `scheduled`: C2QoS chose it and is to be charged its batch.
    Port { idx: usize, scheduled: bool, burst: usize },
    /// Every scheduled port waits for cycle tokens: the core idles until the pass's other ports.
    Idle,
    /// The pass is over.
    PassEnd,
}

/// A port polled outside C2QoS: a full burst, not charged.
#[inline]
fn unscheduled(idx: usize) -> Pick {
    Pick::Port { idx, scheduled: false, burst: MAX_BURST }
}

/// The poll order of one PMD thread.
pub(crate) enum PollOrder {
    RoundRobin(Cursor),
    C2qos(Box<C2qosOrder>),
}

/// A walk over a list of rx port indices, once per pass.
#[derive(Default)]
pub(crate) struct Cursor {
    ports: Vec<usize>,
    next: usize,
}

impl Cursor {
    fn over(ports: Vec<usize>) -> Cursor {
        Cursor { ports, next: 0 }
    }

    fn next(&mut self) -> Option<usize> {
        let idx = self.ports.get(self.next).copied();
        self.next += 1;
        idx
    }
}

/// HBS over C2TB for the ports with C2QoS settings, round robin for the rest.
pub(crate) struct C2qosOrder {
    sched: PortScheduler,
    /// Port number -> rx index.
    rx_index: Vec<u16>,
    /// Decisions left in this pass.
    decisions_left: usize,
    decisions_per_pass: usize,
    /// The ports outside HBS.
    others: Cursor,
    /// Every rx port, for a pass that bypasses the scheduler: plain round robin (the overhead
    /// probe's comparison, `crate::probe`).
    all: Cursor,
    bypass: bool,
    /// The port number of the last scheduled pick, until it is charged.
    in_service: Option<usize>,
    decisions: u64,
    /// TSC at which a timed decision began (the batch before it ended), 0 when none is timed.
    sample_from_tsc: u64,
    /// Eight times the moving average of a decision's cycles (charging the batch before and
    /// picking the next port).
    decision_cycles_x8: u64,
    /// The same for the decisions that picked a port anew (not a turn going on): what sets
    /// the length of a turn (`PortScheduler::set_decision_cycles`).
    pick_cycles_x8: u64,
    /// The scheduler's wait counts already added to the PMD's totals.
    folded: WaitCounts,
    /// Batches served as a turn going on, and how many of them the PMD's totals hold.
    turn_batches: u64,
    folded_turn_batches: u64,
}

impl PollOrder {
    /// The order for `cfg`: C2QoS when some port has C2QoS settings.
    pub(crate) fn new(cfg: &PmdConfig, now: u64) -> PollOrder {
        let mut order = PollOrder::RoundRobin(Cursor::default());
        order.reconfigure(cfg, now, &mut PmdTotals::default());
        order
    }

    /// Brings the order in line with a new configuration. A scheduler is created when a port
    /// first has C2QoS settings and dropped when none has; otherwise ports are added, removed
    /// and updated in place, so the others keep their tokens and classes. The scheduler's wait
    /// counts are folded into `totals` first. `now`: the scheduler's clock.
    pub(crate) fn reconfigure(&mut self, cfg: &PmdConfig, now: u64, totals: &mut PmdTotals) {
        self.fold_waits(totals);
        let scheduled = cfg.rx_ports.iter().any(|p| p.cpu_qos.is_set());
        match (scheduled, &mut *self) {
            (false, _) => *self = PollOrder::RoundRobin(Cursor::over((0..cfg.rx_ports.len()).collect())),
            (true, PollOrder::C2qos(order)) => order.reconfigure(cfg, now),
            (true, PollOrder::RoundRobin(_)) => *self = PollOrder::C2qos(Box::new(C2qosOrder::new(cfg, now))),
        }
    }

    /// Starts a pass; `bypass` makes a C2QoS order poll every port in plain round robin.
    #[inline]
    pub(crate) fn start_pass(&mut self, bypass: bool) {
        match self {
            PollOrder::RoundRobin(c) => c.next = 0,
            PollOrder::C2qos(o) => o.start_pass(bypass),
        }
    }

    /// The next port to poll; `now`: the scheduler's clock.
    #[inline]
    pub(crate) fn next(&mut self, now: u64) -> Pick {
        match self {
            PollOrder::RoundRobin(c) => c.next().map_or(Pick::PassEnd, unscheduled),
            PollOrder::C2qos(o) => o.next(now),
        }
    }

    /// The cycles of the decision that picked the port now being served, which are the PMD's
    /// and not the port's (0 for a port C2QoS did not pick).
    #[inline]
    pub(crate) fn decision_cycles(&self, pick: Pick) -> u64 {
        match (self, pick) {
            (PollOrder::C2qos(o), Pick::Port { scheduled: true, .. }) => o.decision_cycles_x8 / 8,
            _ => 0,
        }
    }

    /// Asks the core to fetch the lines the decision after the batch in service will read,
    /// while the batch finishes (`PortScheduler::decision_lines`); nothing for a port C2QoS
    /// did not pick.
    #[inline]
    pub(crate) fn prefetch_decision(&self) {
        if let PollOrder::C2qos(o) = self {
            if let Some(port) = o.in_service {
                prefetch((&**o as *const C2qosOrder).cast(), size_of::<C2qosOrder>());
                o.sched.decision_lines(port, prefetch);
            }
        }
    }

    /// Charges a scheduled port its batch: `cycles` (its three stages), `received` packets of
    /// `bytes`, ended at TSC `end_tsc`, `now` on the scheduler's clock. True: the port's turn
    /// goes on, and the PMD serves it again as it was picked, without asking [`Self::next`]
    /// (most batches of a backlogged PMD: their C2QoS work is then this call alone).
    #[inline]
    pub(crate) fn charge(&mut self, cycles: u64, received: usize, bytes: u64, end_tsc: u64, now: u64) -> bool {
        match self {
            PollOrder::C2qos(o) => o.charge(cycles, received, bytes, end_tsc, now),
            PollOrder::RoundRobin(_) => false,
        }
    }

    /// Charges scheduled port `number` cycles it caused outside its batches (a paced link's
    /// sends of its frames, `PortScheduler::charge_outside_batch`); not while the scheduler is
    /// bypassed.
    #[inline]
    pub(crate) fn charge_outside_batch(&mut self, number: usize, cycles: u64) {
        if let PollOrder::C2qos(o) = self {
            if !o.bypass {
                o.sched.charge_outside_batch(number, cycles);
            }
        }
    }

    /// Hands cycles the host stalled the PMD for to the cycle buckets (seed 000 Sec. IV-A
    /// charges a port what its batch took, and a stall is nobody's batch).
    #[inline]
    pub(crate) fn credit_stall(&mut self, cycles: u64) {
        if let PollOrder::C2qos(o) = self {
            if !o.bypass {
                o.sched.credit_stall(cycles);
            }
        }
    }

    pub(crate) fn scheduler(&self) -> Option<&PortScheduler> {
        match self {
            PollOrder::C2qos(o) => Some(&o.sched),
            PollOrder::RoundRobin(_) => None,
        }
    }

    pub(crate) fn scheduler_mut(&mut self) -> Option<&mut PortScheduler> {
        match self {
            PollOrder::C2qos(o) => Some(&mut o.sched),
            PollOrder::RoundRobin(_) => None,
        }
    }

    /// Adds the scheduler's wait counts since the last call to `totals`, which outlive it.
    pub(crate) fn fold_waits(&mut self, totals: &mut PmdTotals) {
        if let PollOrder::C2qos(o) = self {
            let now = o.sched.wait_counts();
            totals.qos_owed += now.owed - o.folded.owed;
            totals.qos_parked += now.parked - o.folded.parked;
            o.folded = now;
            totals.qos_turn_batches += o.turn_batches - o.folded_turn_batches;
            o.folded_turn_batches = o.turn_batches;
        }
    }

    /// Publishes each port's standing in the scheduler for `qos-show`.
    pub(crate) fn publish(&self, cfg: &PmdConfig) {
        for p in &cfg.rx_ports {
            let state = match self.scheduler().and_then(|s| s.view(usize::from(p.number))) {
                Some(v) => CpuQosState {
                    tokens_cycles: v.tokens,
                    class: v.current_priority,
                    place: match v.place {
                        PortPlace::Ready { .. } => Place::Ready,
                        PortPlace::Resting => Place::Resting,
                        PortPlace::Waiting => Place::Waiting,
                        PortPlace::InService => Place::InService,
                    },
                    forgiven_cycles: v.forgiven_cycles,
                    token_waits: v.waits,
                },
                None => CpuQosState::default(),
            };
            p.counters.publish_cpu_qos(&state);
        }
    }
}

impl C2qosOrder {
    fn new(cfg: &PmdConfig, now: u64) -> C2qosOrder {
        let c2tb = C2tbConfig::one_core_with_depth_us(cfg.tsc_hz, cfg.c2tb_bucket_us);
        let mut order = C2qosOrder {
            sched: PortScheduler::new(
                c2tb,
                HbsConfig { lower_class_burst: cfg.lower_class_burst, ..HbsConfig::default() },
                now,
            ),
            rx_index: Vec::new(),
            decisions_left: 0,
            decisions_per_pass: 0,
            others: Cursor::default(),
            all: Cursor::default(),
            bypass: false,
            in_service: None,
            decisions: 0,
            sample_from_tsc: 0,
            decision_cycles_x8: 0,
            pick_cycles_x8: 0,
            folded: WaitCounts::default(),
            turn_batches: 0,
            folded_turn_batches: 0,
        };
        order.reconfigure(cfg, now);
        order
    }

    /// Scheduler port indices are port numbers.
    fn reconfigure(&mut self, cfg: &PmdConfig, now: u64) {
        let s = &mut self.sched;
        for number in 0..self.rx_index.len() {
            let stays = cfg.rx_ports.iter().any(|p| usize::from(p.number) == number && p.cpu_qos.is_set());
            if s.contains(number) && !stays {
                s.remove_port(number, now);
            }
        }
        for p in cfg.rx_ports.iter().filter(|p| p.cpu_qos.is_set()) {
            let n = usize::from(p.number);
            let result = if s.contains(n) {
                s.set_limit(n, p.cpu_qos.limit, now).and_then(|()| s.set_priority(n, p.cpu_qos.priority, now))
            } else {
                s.add_port(n, p.cpu_qos.priority, p.cpu_qos.limit, now)
            };
            // Settings were validated by the control plane; a refusal here is a bug.
            debug_assert!(result.is_ok(), "{result:?}");
            s.set_bucket_depth(n, cfg.bucket_depth_cycles(p, 1.0), now);
            s.set_purchase(n, p.purchase_bps, now);
        }
        self.rx_index = cfg.rx_index_by_number();
        self.decisions_per_pass = cfg.rx_ports.iter().filter(|p| p.cpu_qos.is_set()).count();
        self.others = Cursor::over((0..cfg.rx_ports.len()).filter(|&i| !cfg.rx_ports[i].cpu_qos.is_set()).collect());
        self.all = Cursor::over((0..cfg.rx_ports.len()).collect());
        self.in_service = None;
        self.sample_from_tsc = 0;
    }

    #[inline]
    fn start_pass(&mut self, bypass: bool) {
        self.decisions_left = self.decisions_per_pass;
        self.others.next = 0;
        self.all.next = 0;
        self.bypass = bypass;
    }

    #[inline]
    fn next(&mut self, now: u64) -> Pick {
        if self.bypass {
            return self.all.next().map_or(Pick::PassEnd, unscheduled);
        }
        if self.decisions_left > 0 {
            self.decisions_left -= 1;
            let picked = self.sched.next_port(now);
            self.end_timed_decision(true);
            let Some(number) = picked else {
                self.decisions_left = 0;
                return Pick::Idle;
            };
            self.in_service = Some(number);
            let burst = (self.sched.burst_packets(number) as usize).clamp(1, MAX_BURST);
            return Pick::Port { idx: usize::from(self.rx_index[number]), scheduled: true, burst };
        }
        self.others.next().map_or(Pick::PassEnd, unscheduled)
    }

    /// A turn going on takes one of the pass's decisions, as a pick would.
    #[inline]
    fn charge(&mut self, cycles: u64, received: usize, bytes: u64, end_tsc: u64, now: u64) -> bool {
        let Some(number) = self.in_service else { return false };
        self.sched.spend_bytes(number, bytes, now);
        self.decisions += 1;
        // Half a period off the overhead probe's own sampling (`crate::probe`), so the probe
        // never times this timing.
        if received > 0 && self.decisions % DECISION_SAMPLE_PERIOD == DECISION_SAMPLE_PERIOD / 2 {
            self.sample_from_tsc = end_tsc;
        }
        if !self.sched.end_batch(number, cycles, received as u32, now, self.decisions_left > 0) {
            self.in_service = None;
            return false;
        }
        self.decisions_left -= 1;
        self.turn_batches += 1;
        self.end_timed_decision(false);
        true
    }

    /// Closes a timed decision: from the end of the batch before to the pick. Only decisions
    /// after a batch with packets are timed: they are the ones kept out of a port's charge.
    /// `picked`: the scheduler picked a port (no turn went on); those set a turn's length.
    #[inline]
    fn end_timed_decision(&mut self, picked: bool) {
        if self.sample_from_tsc == 0 {
            return;
        }
        let cycles = rdtsc().saturating_sub(std::mem::take(&mut self.sample_from_tsc));
        if cycles < DECISION_SAMPLE_MAX_CYCLES {
            self.decision_cycles_x8 = self.decision_cycles_x8 - self.decision_cycles_x8 / 8 + cycles;
            if picked {
                self.pick_cycles_x8 = self.pick_cycles_x8 - self.pick_cycles_x8 / 8 + cycles;
                self.sched.set_decision_cycles(self.pick_cycles_x8 / 8);
            }
        }
    }
}
