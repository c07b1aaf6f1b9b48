//! HBS, hierarchical batch scheduling (seed 000 Sec. IV-B, Fig. 8), driving C2TB.
//!
//! A PMD thread asks [`PortScheduler::next_port`] which port to serve, runs one batch for it
//! through ingress, classification and egress, and reports the batch's cycles and packet count
//! with [`PortScheduler::end_batch`]. Between those two calls the port is "in service" and in
//! no queue.
//!
//! # The paper's design
//! * **Ready queues**: 8 priority classes (1 highest), a FIFO per class; the head of the highest
//!   non-empty class is served first (Sec. IV-B-1). A bitmask of non-empty classes makes the
//!   choice O(1) ([`super::ready`]).
//! * **Waiting queue**: ports whose tokens are <= 0, keyed by the TSC at which their own
//!   generation rate makes them positive again (Sec. IV-B-2). It is a timer wheel, so parking
//!   and promoting are O(1); a port is promoted at most one wheel slot late, and its bucket
//!   keeps filling meanwhile, so the lateness costs it nothing.
//! * **Dynamic priority** (Sec. IV-B-3): after `idle_polls_per_step` consecutive empty polls a
//!   port's class drops by one, down to 8; its first packet restores its configured class.
//!
//! With no settings on any port (all unlimited, all class 8) the ready queue is a single FIFO in
//! which every served port goes to the back: the fixed-order round robin of OVS's PMD loop.
//!
//! # Ours (each in its own struct below; the reasons in `docs/deviations.md`)
//! * [`DeferredParking`]: a port that owes tokens goes round its ready queue once more, due at
//!   the TSC its rate pays the debt, and is parked only if it reaches the head early again. It
//!   never runs before it is due, so C2TB's bound holds, and it is never served later than the
//!   paper's queue would serve it. Periodic refill has no due times and parks at once.
//! * [`Resting`]: a port whose poll found nothing goes back to its ready queue once another
//!   port has run a batch with packets (or nothing else is ready), so an idle port keeps its
//!   class at the cost of one empty poll per busy batch.
//! * [`DemotedProbe`]: a demoted port is polled at least every `demoted_probe_us` whatever is
//!   ready above it, so its next packet is seen within that time.
//! * [`Turns`]: a backlogged port of the top configured class may run further full batches, up
//!   to [`HbsConfig::turn_ns`] or a hundred times what a decision costs on this host (at most
//!   [`HbsConfig::turn_max_ns`]), on tokens it already holds, charged once for the turn; a
//!   port beyond its allocation only while no port within it can be waiting.
//! * [`LatencyClass`]: a port of class 1 or 2 within its purchase (in bytes) is never parked
//!   for lack of cycle tokens: its debt is forgiven instead. Nor is a port of those classes
//!   that bought bandwidth demoted by
//!   dynamic priority: between its frames it rests, one empty poll per busy batch, and is
//!   polled as soon as the batch in service ends. While such a port is on the PMD, the ports
//!   of lower classes that forward more than their purchase are polled with short bursts
//!   ([`HbsConfig::lower_class_burst`]), so the batch in service it may wait for is short.
//!
//! Layout: all of a port's state (HBS, its C2TB bucket, its wheel link) sits in one record of
//! two cache lines, and the ready queues are rings of indices: in the data plane every batch
//! evicts the scheduler from the core's caches, so each separate place a decision touches is a
//! miss. Handing a port out only stores to its record; reporting its batch reads it once.

use std::num::NonZeroU8;

use super::c2tb::{Bucket, BucketSet, C2tbConfig, CycleLimit, CyclePool};
use super::latency_class::{LatencyClass, LATENCY_CLASSES};
use super::ready::ReadyQueues;
pub use super::ready::PRIORITY_CLASSES;
use super::PortIndex;
use crate::timer_wheel::{IntrusiveWheel, Link, WheelLinks};
use crate::QosError;

mod turns;
use turns::Turns;
pub use turns::{DEFAULT_TURN_MAX_NS, DEFAULT_TURN_NS, TURN_CYCLES_PER_DECISION_CYCLE};

/// Waiting-queue wheel: 8192-tick slots, 128 of them: about 420 us at 2.5 GHz before the far
/// list, which is re-filed once per turn. A port sharing the core with 27 others waits about
/// 280 us after a 10 us batch; the heads take 8 cache lines.
const WAIT_SLOT_SHIFT: u32 = 13;
const WAIT_SLOTS: usize = 128;

/// Class given to a port that has no priority setting: the lowest, so that a configured
/// priority always means "before the ports nobody configured".
pub const DEFAULT_PRIORITY: u8 = 8;

/// HBS's settings (the extensions' knobs: `docs/deviations.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HbsConfig {
    /// Consecutive empty polls before a port's class drops one step; 0 turns dynamic priority off.
    pub idle_polls_per_step: u32,
    /// Packets in a full batch (the PMD's burst size): a full batch means the port is backlogged.
    pub full_batch_packets: u32,
    /// A demoted port (its class below its configured one) is polled at least this often,
    /// whatever is ready above it; 0 turns the probe off.
    pub demoted_probe_us: u32,
    /// A backlogged port's turn ([`PortScheduler::end_batch`]): it runs further full batches
    /// until its turn has taken this long, if it holds the tokens and is in the top configured
    /// class; 0 makes every turn one batch.
    pub turn_ns: u32,
    /// The longest a turn may grow to when decisions are dear
    /// ([`PortScheduler::set_decision_cycles`]); at most `turn_ns` keeps turns at `turn_ns`.
    pub turn_max_ns: u32,
    /// While a latency-class port with a purchase is on the PMD, the ports of lower classes
    /// beyond their purchase are polled for at most this many packets at a time
    /// ([`PortScheduler::burst_packets`]); 0 or `full_batch_packets` keeps full batches.
    pub lower_class_burst: u32,
}

impl Default for HbsConfig {
    fn default() -> Self {
        HbsConfig {
            idle_polls_per_step: 4,
            full_batch_packets: 32,
            demoted_probe_us: 100,
            turn_ns: DEFAULT_TURN_NS,
            turn_max_ns: DEFAULT_TURN_MAX_NS,
            lower_class_burst: DEFAULT_LOWER_CLASS_BURST,
        }
    }
}

/// Half a full batch: a lower class's batch in service is what a latency-class frame waits
/// for at worst (seed 000 Sec. IV-B-2), and shorter ones make every lower-class frame pay
/// more of a batch's fixed work (`docs/deviations.md`, row 18).
pub const DEFAULT_LOWER_CLASS_BURST: u32 = 16;

/// Where a port is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortPlace {
    /// In the ready queue of this class.
    Ready {
        /// The class whose queue holds it.
        class: u8,
    },
    /// Its last poll found nothing: it waits for another port's batch with packets.
    Resting,
    /// In the waiting queue (or, deferred, owing in a ready queue) until its tokens turn positive.
    Waiting,
    /// Handed out by `next_port`, not yet charged.
    InService,
}

/// A port's scheduling state, for `qos-show` and the tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortView {
    /// The class the operator gave it (1 highest).
    pub configured_priority: u8,
    /// Its class now: dynamic priority may have lowered it.
    pub current_priority: u8,
    /// Where it is.
    pub place: PortPlace,
    /// Its cycle limit.
    pub limit: CycleLimit,
    /// Its tokens, cycles (`None`: unlimited).
    pub tokens: Option<f64>,
    /// Consecutive empty polls.
    pub empty_poll_streak: u32,
    /// Times the port has had to wait for tokens (its allocation bound).
    pub waits: u64,
    /// Cycles of debt forgiven it as a latency-class port within its purchase.
    pub forgiven_cycles: u64,
}

#[derive(Clone, Debug)]
struct PortState {
    /// Never 0, and saying so lets `Option<PortState>` use it as its tag (the record stays
    /// within two cache lines).
    configured_priority: NonZeroU8,
    current_priority: u8,
    empty_poll_streak: u32,
    waits: u64,
}

/// Everything kept about one port. 128-byte aligned: the two lines come in on one miss (the
/// adjacent-line prefetcher of Intel cores fetches the pair).
#[derive(Clone, Debug)]
#[repr(align(128))]
struct PortSlot {
    bucket: Bucket,
    /// `None`: the port is not scheduled here.
    state: Option<PortState>,
    /// Outside `state`, so that [`PortScheduler::next_port`] can set them without reading
    /// the record first.
    place: PortPlace,
    /// When the port was last handed out by [`PortScheduler::next_port`].
    last_served_tsc: u64,
    wheel: Link,
}

const EMPTY_SLOT: PortSlot = PortSlot {
    bucket: Bucket::UNLIMITED,
    state: None,
    place: PortPlace::InService,
    last_served_tsc: 0,
    wheel: Link::UNPARKED,
};

/// The slots are where the wheel keeps its links and C2TB its buckets.
#[derive(Clone, Debug, Default)]
struct Slots(Vec<PortSlot>);

impl WheelLinks for Slots {
    #[inline]
    fn link(&mut self, index: usize) -> &mut Link {
        &mut self.0[index].wheel
    }
}

impl BucketSet for Slots {
    fn bucket_mut(&mut self, port: PortIndex) -> &mut Bucket {
        if port >= self.0.len() {
            self.0.resize(port + 1, EMPTY_SLOT);
        }
        &mut self.0[port].bucket
    }
    fn each_bucket(&mut self, visit: impl FnMut(&mut Bucket)) {
        self.0.iter_mut().map(|s| &mut s.bucket).filter(|b| b.is_limited()).for_each(visit);
    }
}

/// How often ports had to wait for tokens, since the scheduler was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCounts {
    /// Batches after which the port owed tokens (or a port found owing when queued).
    pub owed: u64,
    /// Times a port was parked in the waiting queue (it reached the head of its ready queue
    /// still owing, or owes under periodic refill). What a decision pays extra for.
    pub parked: u64,
}

/// Ours, beyond seed 000 Sec. IV-B-3 (`docs/deviations.md`, demoted probe): a port whose class
/// dynamic priority lowered is still polled every `demoted_probe_us`, so its next packet is
/// seen even while higher classes stay ready.
#[derive(Clone, Debug)]
struct DemotedProbe {
    /// [`HbsConfig::demoted_probe_us`] in TSC ticks (0: off).
    ticks: u64,
    /// When the next look for a stale demoted port is due.
    due_tsc: u64,
    /// Ports whose class is below their configured one (none: no scan at all).
    demoted_ports: usize,
}

/// Ours, beyond seed 000's ready queues (`docs/deviations.md`, resting): a port whose poll was
/// empty waits for another port's batch with packets before it is ready again.
#[derive(Clone, Debug, Default)]
struct Resting {
    /// In the order they rested, each with the class it goes back to: releasing them then only
    /// writes their records.
    ports: Vec<(PortIndex, u8)>,
}

/// Ours, instead of seed 000's parking at once (`docs/deviations.md`, deferred parking): a port
/// that owes tokens goes to the back of its ready queue with the TSC it is due at, and is
/// parked only if it reaches the head before then.
///
/// The due time lives only in the port's ready-queue entry: a decision reads and writes that
/// line and no other, and the rare lookups by port (views, the probe's scan, a change of
/// C2TB's settings) walk the rings.
#[derive(Clone, Debug, Default)]
struct DeferredParking {
    /// Ports in a ready queue with a due time (counted as waiting).
    count: usize,
}

/// C2TB + HBS for the ports of one PMD thread. Not shared between threads: each PMD owns one.
#[derive(Clone, Debug)]
pub struct PortScheduler {
    pool: CyclePool,
    config: HbsConfig,
    slots: Slots,
    ready: ReadyQueues,
    waiting: IntrusiveWheel,
    /// Ours: a demoted port is still probed ([`DemotedProbe`]).
    demoted_probe: DemotedProbe,
    /// Ours: a backlogged top-class port runs several batches on one decision ([`Turns`]).
    turns: Turns,
    /// Ours: a port whose poll was empty rests ([`Resting`]).
    resting: Resting,
    /// Scratch for ports the wheel hands back.
    expired: Vec<PortIndex>,
    /// Ours: a port that owes tokens goes round its ready queue once more ([`DeferredParking`]).
    deferred_parking: DeferredParking,
    /// Ours: a latency-class port within its purchase is never parked ([`LatencyClass`]).
    latency: LatencyClass,
    /// A port of a latency class with a purchase is scheduled here: its batches' bytes are
    /// counted, and lower classes are polled with [`HbsConfig::lower_class_burst`].
    latency_ports_present: bool,
    /// Per port: it forwards more than its purchase, or bought none, so its batches may be
    /// short ([`PortScheduler::set_beyond_purchase`]).
    beyond_purchase: Vec<bool>,
    counts: WaitCounts,
}

fn check_priority(priority: u8) -> Result<(), QosError> {
    if (1..=PRIORITY_CLASSES as u8).contains(&priority) {
        Ok(())
    } else {
        Err(QosError::Priority(priority))
    }
}

impl PortScheduler {
    /// A scheduler with no ports, its clock started at `now_tsc`.
    pub fn new(c2tb: C2tbConfig, hbs: HbsConfig, now_tsc: u64) -> Self {
        PortScheduler {
            pool: CyclePool::new(c2tb, now_tsc),
            config: hbs,
            slots: Slots::default(),
            ready: ReadyQueues::default(),
            waiting: IntrusiveWheel::new(WAIT_SLOT_SHIFT, WAIT_SLOTS, now_tsc),
            resting: Resting::default(),
            expired: Vec::new(),
            deferred_parking: DeferredParking::default(),
            latency: LatencyClass::new(c2tb.tsc_hz),
            latency_ports_present: false,
            beyond_purchase: Vec::new(),
            counts: WaitCounts::default(),
            demoted_probe: DemotedProbe {
                ticks: u64::from(hbs.demoted_probe_us) * c2tb.tsc_hz / 1_000_000,
                due_tsc: now_tsc,
                demoted_ports: 0,
            },
            turns: Turns::new(hbs.turn_ns, hbs.turn_max_ns, c2tb.tsc_hz, DEFAULT_PRIORITY),
        }
    }

    /// The cycles the buckets share (capacity, `C_idle`, configuration).
    pub fn pool(&self) -> &CyclePool {
        &self.pool
    }

    /// See [`CyclePool::rates_cycles_per_sec`]; `None` for an unlimited or unknown port.
    pub fn rates_cycles_per_sec(&self, port: PortIndex) -> Option<(u64, f64)> {
        self.pool.rates_cycles_per_sec(&self.slots.0.get(port)?.bucket)
    }

    /// HBS's settings.
    pub fn hbs_config(&self) -> HbsConfig {
        self.config
    }

    /// Changes HBS's settings.
    pub fn set_hbs_config(&mut self, config: HbsConfig) {
        self.config = config;
        self.demoted_probe.ticks = u64::from(config.demoted_probe_us) * self.pool.config().tsc_hz / 1_000_000;
        let tsc_hz = self.pool.config().tsc_hz;
        self.turns.set_bounds(config.turn_ns, config.turn_max_ns, tsc_hz);
    }

    /// Changes C2TB's settings; due times are worked out again.
    pub fn set_c2tb_config(&mut self, config: C2tbConfig, now_tsc: u64) {
        self.pool.set_config(&mut self.slots, config, now_tsc);
        self.turns.settings_changed();
        // Due times were worked out at the old rates (and periodic refill has none): every
        // queued port that owes tokens is placed again.
        let owing: Vec<PortIndex> = (0..PRIORITY_CLASSES)
            .flat_map(|class| self.ready.entries(class))
            .filter(|e| e.due_tsc != 0)
            .map(|e| PortIndex::from(e.port))
            .collect();
        for port in owing {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
    }

    /// True when `port` is scheduled here.
    pub fn contains(&self, port: PortIndex) -> bool {
        self.slots.0.get(port).is_some_and(|s| s.state.is_some())
    }

    /// Ports scheduled here.
    pub fn port_count(&self) -> usize {
        self.slots.0.iter().filter(|s| s.state.is_some()).count()
    }

    /// Adds a port, ready at once. Errors leave the scheduler unchanged.
    pub fn add_port(&mut self, port: PortIndex, priority: u8, limit: CycleLimit, now_tsc: u64) -> Result<(), QosError> {
        check_priority(priority)?;
        if self.contains(port) {
            return Err(QosError::PortScheduled(port));
        }
        if port > ReadyQueues::MAX_PORT {
            return Err(QosError::PortIndex { port, max: ReadyQueues::MAX_PORT });
        }
        self.ready.reserve(port + 1);
        self.pool.set_limit(&mut self.slots, port, limit, now_tsc);
        let slot = &mut self.slots.0[port];
        slot.state = Some(PortState {
            configured_priority: NonZeroU8::new(priority).expect("checked"),
            current_priority: priority,
            empty_poll_streak: 0,
            waits: 0,
        });
        slot.place = PortPlace::InService;
        slot.last_served_tsc = now_tsc;
        self.requeue(port, now_tsc);
        self.recount_demoted();
        Ok(())
    }

    /// Removes a port wherever it is (a port in service is simply not requeued).
    pub fn remove_port(&mut self, port: PortIndex, now_tsc: u64) -> bool {
        if !self.contains(port) {
            return false;
        }
        self.take_out_of_queues(port);
        self.slots.0[port].state = None;
        self.pool.set_limit(&mut self.slots, port, CycleLimit::Unlimited, now_tsc);
        self.latency.remove(port);
        self.recount_demoted();
        true
    }

    /// Ports below their configured class, counted again after a port is added or removed
    /// or its class set (report_batch keeps the count between those); and the highest
    /// configured class.
    fn recount_demoted(&mut self) {
        self.turns.settings_changed();
        self.demoted_probe.demoted_ports =
            self.states().filter(|s| s.current_priority > s.configured_priority.get()).count();
        self.turns.top_class = self.states().map(|s| s.configured_priority.get()).min().unwrap_or(DEFAULT_PRIORITY);
        let latency = &self.latency;
        self.latency_ports_present = self.slots.0.iter().enumerate().any(|(port, slot)| {
            slot.state.as_ref().is_some_and(|s| s.configured_priority.get() <= LATENCY_CLASSES)
                && latency.has_purchase(port)
        });
    }

    /// Packets to poll `port` for at a time: its full batch, or while a latency-class port
    /// with a purchase is scheduled here, [`HbsConfig::lower_class_burst`] for a port of a
    /// lower class that forwards more than its purchase or bought none. A port within its
    /// purchase keeps full batches: a short batch's fixed work would come out of what it
    /// bought (`docs/deviations.md`, row 18).
    #[inline]
    pub fn burst_packets(&self, port: PortIndex) -> u32 {
        let full = self.config.full_batch_packets;
        if !self.latency_ports_present || self.config.lower_class_burst == 0 || !self.is_beyond_purchase(port) {
            return full;
        }
        match self.slots.0.get(port).and_then(|s| s.state.as_ref()) {
            Some(s) if s.configured_priority.get() > LATENCY_CLASSES => self.config.lower_class_burst.min(full),
            _ => full,
        }
    }

    /// Whether `port` forwards more than its purchase (or bought none).
    #[inline]
    fn is_beyond_purchase(&self, port: PortIndex) -> bool {
        self.beyond_purchase.get(port).copied().unwrap_or(true)
    }

    /// Says whether `port` forwards more than its purchase (drift compensation's ledger
    /// windows tell): only then may its batches be short.
    pub fn set_beyond_purchase(&mut self, port: PortIndex, beyond: bool) {
        if self.beyond_purchase.len() <= port {
            self.beyond_purchase.resize(port + 1, true);
        }
        self.beyond_purchase[port] = beyond;
    }

    fn states(&self) -> impl Iterator<Item = &PortState> {
        self.slots.0.iter().filter_map(|s| s.state.as_ref())
    }

    /// Changes a port's configured class; takes effect at once, also for a queued port.
    pub fn set_priority(&mut self, port: PortIndex, priority: u8, now_tsc: u64) -> Result<(), QosError> {
        check_priority(priority)?;
        let state = self.state_mut(port)?;
        state.configured_priority = NonZeroU8::new(priority).expect("checked");
        state.current_priority = priority;
        state.empty_poll_streak = 0;
        if matches!(self.slots.0[port].place, PortPlace::Ready { .. }) {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        for (_, class) in self.resting.ports.iter_mut().filter(|(p, _)| *p == port) {
            *class = priority;
        }
        self.recount_demoted();
        Ok(())
    }

    /// Changes a port's cycle limit; takes effect at once (a waiting port that is now unlimited
    /// or positive becomes ready).
    pub fn set_limit(&mut self, port: PortIndex, limit: CycleLimit, now_tsc: u64) -> Result<(), QosError> {
        self.state_mut(port)?;
        self.turns.settings_changed();
        let place = self.slots.0[port].place;
        self.pool.set_limit(&mut self.slots, port, limit, now_tsc);
        if place != PortPlace::InService {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        Ok(())
    }

    /// Sets several ports' limits and own bucket depths at once ([`CyclePool::set_limits`]),
    /// as [`PortScheduler::set_limit`] then [`PortScheduler::set_bucket_depth`] on each; ports
    /// not scheduled here are left out.
    pub fn set_limits(&mut self, changes: &[(PortIndex, CycleLimit, Option<u64>)], now_tsc: u64) {
        let known: Vec<(PortIndex, CycleLimit, Option<u64>)> =
            changes.iter().copied().filter(|&(port, _, _)| self.contains(port)).collect();
        self.pool.set_limits(&mut self.slots, &known, now_tsc);
        self.turns.settings_changed();
        for &(port, _, _) in &known {
            if self.slots.0[port].place != PortPlace::InService {
                self.take_out_of_queues(port);
                self.requeue(port, now_tsc);
            }
        }
    }

    /// Gives a port a bucket depth of its own (`None`: the pool's); see
    /// [`CyclePool::set_depth`]. Set it after the port's limit.
    pub fn set_bucket_depth(&mut self, port: PortIndex, depth_cycles: Option<u64>, now_tsc: u64) {
        if self.contains(port) {
            self.turns.settings_changed();
            self.pool.set_depth(&mut self.slots, port, depth_cycles, now_tsc);
        }
    }

    /// Holds a port to its purchase in bytes (bits per second of frames; `None`: it bought
    /// none): in class 1 or 2 it is then never parked while within it ([`LatencyClass`]).
    pub fn set_purchase(&mut self, port: PortIndex, purchase_bps: Option<u64>, now_tsc: u64) {
        self.latency.set_purchase(port, purchase_bps, now_tsc);
        self.recount_demoted();
    }

    /// Bounds the cycles a latency-class port may be forgiven to `cycles_per_sec`, its share
    /// of what no port was promised (`None`: unbounded); see [`LatencyClass`].
    pub fn set_forgiveness_budget(&mut self, port: PortIndex, cycles_per_sec: Option<u64>, now_tsc: u64) {
        self.latency.set_cycle_budget(port, cycles_per_sec, now_tsc);
    }

    /// True when `port` is of a latency class and bought bandwidth.
    pub fn is_latency_class(&self, port: PortIndex) -> bool {
        self.slots
            .0
            .get(port)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|s| s.configured_priority.get() <= LATENCY_CLASSES)
            && self.latency.has_purchase(port)
    }

    /// Charges the bytes of the batch the port in service just ran to its purchase; call
    /// before [`PortScheduler::end_batch`]. Costs a compare unless the port is of a latency
    /// class with a purchase.
    #[inline]
    pub fn spend_bytes(&mut self, port: PortIndex, bytes: u64, now_tsc: u64) {
        if self.latency_ports_present && self.is_latency_class(port) {
            self.latency.spend(port, bytes, now_tsc);
        }
    }

    /// Calls `memory` with the start and length of each piece of memory the decision after a
    /// batch of `port` (in service) reads: the scheduler's own fields, the port's record, the
    /// ready queues' heads and tails and the record of the port at the head. A data plane may
    /// ask the core to fetch them while the batch is still under way: a batch of many flows
    /// evicts them, and a decision that then reads each in turn costs several times one that
    /// finds them in the first-level cache (the overhead goal, seed 000 Sec. VI-F). Addresses
    /// only; pieces may overlap.
    #[inline]
    pub fn decision_lines(&self, port: PortIndex, mut memory: impl FnMut(*const u8, usize)) {
        memory((self as *const Self).cast(), size_of::<Self>());
        let slots = self.slots.0.as_ptr();
        for slot in [Some(port), self.ready.first()].into_iter().flatten() {
            memory(slots.wrapping_add(slot).cast(), size_of::<PortSlot>());
        }
        self.ready.decision_lines(&mut memory);
    }

    /// A port's scheduling state (`None`: not scheduled here).
    pub fn view(&self, port: PortIndex) -> Option<PortView> {
        let slot = self.slots.0.get(port)?;
        let s = slot.state.as_ref()?;
        let deferred = match slot.place {
            PortPlace::Ready { class } => self.ready.find(usize::from(class - 1), port).is_some_and(|e| e.due_tsc != 0),
            _ => false,
        };
        Some(PortView {
            configured_priority: s.configured_priority.get(),
            current_priority: s.current_priority,
            place: if deferred { PortPlace::Waiting } else { slot.place },
            limit: slot.bucket.limit(),
            tokens: slot.bucket.tokens(),
            empty_poll_streak: s.empty_poll_streak,
            waits: s.waits,
            forgiven_cycles: self.latency.forgiven_cycles(port),
        })
    }

    /// Number of ports waiting for tokens (parked, or queued with a due time).
    pub fn waiting_len(&self) -> usize {
        self.waiting.len() + self.deferred_parking.count
    }

    /// How often ports waited for tokens.
    pub fn wait_counts(&self) -> WaitCounts {
        self.counts
    }

    /// Of those, the ports parked in the waiting queue (they reached the head of their ready
    /// queue before their due time, or wait under periodic refill).
    pub fn parked_len(&self) -> usize {
        self.waiting.len()
    }

    /// The port to serve next, or `None` when every port is waiting for tokens (or there are no
    /// ports). The port stays in service until [`PortScheduler::report_batch`].
    #[inline]
    pub fn next_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        self.promote_waiting(now_tsc);
        let port = loop {
            if self.ready.is_empty() {
                // Nothing with packets to run: poll the resting ports again.
                self.release_resting();
            }
            let class = self.ready.highest()?;
            if let Some(port) = self.stale_demoted_port(now_tsc) {
                self.take_out_of_queues(port);
                break port;
            }
            let head = self.ready.pop_front(class);
            let port = PortIndex::from(head.port);
            if head.due_tsc > now_tsc && !head.rotated {
                // Early at the head for the first time: once more round the queue, not parked
                // (module notes). A second early turn parks it, so a decision never loops.
                self.ready.push_entry(class, super::ready::Entry { rotated: true, ..head });
                continue;
            }
            if self.is_due(port, head.due_tsc, now_tsc) {
                break port;
            }
        };
        // A new pick starts a turn of its own (one left open by a reconfiguration is dropped).
        self.turns.cycles = 0;
        let slot = &mut self.slots.0[port];
        slot.place = PortPlace::InService;
        slot.last_served_tsc = now_tsc;
        Some(port)
    }

    /// For a port just taken from the head of its ready queue: true if it may run now; if it
    /// still owes tokens, parks it in the waiting queue until its due time and returns false.
    #[inline]
    fn is_due(&mut self, port: PortIndex, due: u64, now_tsc: u64) -> bool {
        if due == 0 {
            return true;
        }
        self.deferred_parking.count -= 1;
        if due <= now_tsc {
            return true;
        }
        self.slots.0[port].place = PortPlace::Waiting;
        self.counts.parked += 1;
        // Just taken from a ready queue, so not parked.
        self.waiting.insert_unparked(&mut self.slots, due, port);
        false
    }

    /// The ready, demoted port polled longest ago, if that was `probe_ticks` or more ago. Scans
    /// the ports at most every quarter probe interval while none is due.
    #[inline]
    fn stale_demoted_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        if !self.demoted_probe_due(now_tsc) {
            return None;
        }
        self.find_stale_demoted_port(now_tsc)
    }

    /// Some demoted port may be due for its probe: a look is due.
    #[inline]
    fn demoted_probe_due(&self, now_tsc: u64) -> bool {
        self.demoted_probe.demoted_ports > 0 && self.demoted_probe.ticks > 0 && now_tsc >= self.demoted_probe.due_tsc
    }

    /// The scan behind [`Self::stale_demoted_port`], out of the decision's line.
    #[cold]
    #[inline(never)]
    fn find_stale_demoted_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        let mut stalest: Option<(u64, PortIndex)> = None;
        let ready_now =
            (0..PRIORITY_CLASSES).flat_map(|class| self.ready.entries(class)).filter(|e| e.due_tsc <= now_tsc);
        for port in ready_now.map(|e| PortIndex::from(e.port)) {
            let slot = &self.slots.0[port];
            let Some(s) = &slot.state else { continue };
            let PortPlace::Ready { class } = slot.place else { continue };
            let due = class > s.configured_priority.get()
                && now_tsc.saturating_sub(slot.last_served_tsc) >= self.demoted_probe.ticks;
            if due && stalest.is_none_or(|(t, _)| slot.last_served_tsc < t) {
                stalest = Some((slot.last_served_tsc, port));
            }
        }
        if stalest.is_none() {
            self.demoted_probe.due_tsc = now_tsc + self.demoted_probe.ticks / 4;
        }
        stalest.map(|(_, port)| port)
    }

    /// See [`CyclePool::credit_stall`]; call before reporting the stalled batch.
    pub fn credit_stall(&mut self, stall_ticks: u64) {
        self.pool.credit_stall(&mut self.slots, stall_ticks);
    }

    /// Charges `port` cycles it caused outside its own batches: a paced link sending its
    /// frames after the batch that queued them (seed 000 Sec. IV-A charges every stage to the
    /// port whose packets it handled). Its bucket pays them as it pays a batch; where the port
    /// is queued stays as it is, so the balance counts from the port's next report on, as a
    /// batch that overran its tokens does (Sec. IV-A-2).
    pub fn charge_outside_batch(&mut self, port: PortIndex, cycles: u64) {
        let Some(slot) = self.slots.0.get_mut(port) else { return };
        if slot.state.is_some() {
            self.pool.charge_outside_batch(&mut slot.bucket, cycles);
            if slot.place == PortPlace::InService {
                self.turns.budget_cycles = self.turns.budget_cycles.saturating_sub(cycles);
            }
        }
    }

    /// Reports the batch just run for `port`: charges its cycles to the bucket, updates the
    /// dynamic priority from the packet count, and puts the port back in the ready or the
    /// waiting queue.
    #[inline]
    pub fn report_batch(&mut self, port: PortIndex, cycles: u64, packets: u32, now_tsc: u64) {
        let steps = self.config.idle_polls_per_step;
        let full = self.burst_packets(port);
        let Some(slot) = self.slots.0.get_mut(port) else { return };
        let Some(s) = slot.state.as_mut() else { return };
        if slot.place != PortPlace::InService {
            return;
        }
        let was_demoted = s.current_priority > s.configured_priority.get();
        if packets > 0 {
            s.current_priority = s.configured_priority.get();
            s.empty_poll_streak = 0;
        } else if steps > 0 && !(s.configured_priority.get() <= LATENCY_CLASSES && self.latency.has_purchase(port)) {
            s.empty_poll_streak += 1;
            if s.empty_poll_streak >= steps {
                s.empty_poll_streak = 0;
                s.current_priority = (s.current_priority + 1).min(PRIORITY_CLASSES as u8);
            }
        }
        match (was_demoted, s.current_priority > s.configured_priority.get()) {
            (false, true) => self.demoted_probe.demoted_ports += 1,
            (true, false) => self.demoted_probe.demoted_ports -= 1,
            _ => {}
        }
        if packets == 0 {
            // An empty poll is the PMD's idle time (as OVS counts it), not the port's use of
            // the core: charging it would make a sleeping port look busy and keep its cycles
            // from being redistributed. The bucket is refilled now, while its line is in the
            // cache, so that a sleeping port's overflow reaches the MIN-MAX ports (Algorithm 1)
            // and releasing it later needs nothing from its record.
            self.pool.charge(&mut slot.bucket, 0, false);
            self.pool.refill_after_batch(&mut slot.bucket, now_tsc);
            if slot.bucket.wait_ticks() == 0 {
                slot.place = PortPlace::Resting;
                let class = s.current_priority;
                let class = self.tier_class(port, class, now_tsc);
                self.resting.ports.push((port, class));
            } else {
                // It owes tokens (a probed port may run owing them): queued as after a batch.
                // A bucket that is not positive was just refilled.
                self.requeue_refilled(port, now_tsc);
            }
        } else {
            self.pool.charge(&mut slot.bucket, cycles, packets >= full);
            self.pool.refill_after_batch(&mut slot.bucket, now_tsc);
            self.release_resting();
            self.requeue_refilled(port, now_tsc);
        }
    }

    /// Puts the resting ports back in their queues, in the order they rested. Their buckets
    /// were brought up to date and found positive when they rested, and an empty poll
    /// charges nothing, so they may run at once: no refill, no due time, and their records
    /// are only written.
    #[inline]
    fn release_resting(&mut self) {
        for &(port, class) in &self.resting.ports {
            self.slots.0[port].place = PortPlace::Ready { class };
            self.ready.push_back(usize::from(class - 1), port, 0);
        }
        self.resting.ports.clear();
    }

    /// Requeues every port of a scratch list taken out of `self`; returns the list, emptied, to
    /// be put back (no allocation on the hot path).
    #[inline]
    fn requeue_each(&mut self, mut ports: Vec<PortIndex>, now_tsc: u64) -> Vec<PortIndex> {
        for &port in &ports {
            self.requeue(port, now_tsc);
        }
        ports.clear();
        ports
    }

    fn state_mut(&mut self, port: PortIndex) -> Result<&mut PortState, QosError> {
        self.slots.0.get_mut(port).and_then(|s| s.state.as_mut()).ok_or(QosError::PortNotScheduled(port))
    }

    /// Puts a port (in service, or just taken out of its queue) into the right queue.
    #[inline]
    fn requeue(&mut self, port: PortIndex, now_tsc: u64) {
        self.pool.refill(&mut self.slots.0[port].bucket, now_tsc);
        self.requeue_refilled(port, now_tsc);
    }

    /// [`Self::requeue`] for a port whose bucket the caller has brought up to date.
    #[inline]
    fn requeue_refilled(&mut self, port: PortIndex, now_tsc: u64) {
        let slot = &mut self.slots.0[port];
        let mut wait_ticks = slot.bucket.wait_ticks();
        let s = slot.state.as_mut().expect("requeue of a known port");
        if wait_ticks > 0
            && s.configured_priority.get() <= LATENCY_CLASSES
            && self.latency.may_forgive(port, slot.bucket.debt_cycles(), now_tsc)
        {
            self.latency.forgave(port, slot.bucket.forgive_debt());
            wait_ticks = 0;
        }
        let current_priority = s.current_priority;
        if wait_ticks > 0 {
            s.waits += 1;
            self.counts.owed += 1;
        }
        let class = self.tier_class(port, current_priority, now_tsc);
        let slot = &mut self.slots.0[port];
        let defer = wait_ticks > 0 && wait_ticks < u64::MAX / 2 && self.pool.is_lazy();
        if wait_ticks == 0 || defer {
            // A port owing tokens keeps its place in the queue, with its due time (module notes).
            slot.place = PortPlace::Ready { class };
            let due = if defer { now_tsc.saturating_add(wait_ticks) } else { 0 };
            self.ready.push_back(usize::from(class - 1), port, due);
            if defer {
                self.deferred_parking.count += 1;
            }
        } else {
            slot.place = PortPlace::Waiting;
            self.counts.parked += 1;
            self.waiting.insert_unparked(&mut self.slots, now_tsc.saturating_add(wait_ticks), port);
        }
    }

    /// The class a port is queued in (seed 000 Sec. IV-B's ready queues, with C2TB's MIN-MAX
    /// of Sec. IV-A and Fig. 7): its own while it spends within its allocation, the
    /// lowest once a MIN-MAX port has spent it and runs on idle cycles (`Bucket::beyond_allocation`),
    /// so that every port's allocation is served, class by class, before any port's share of
    /// the idle cycles. Without the tier a class that borrows idle cycles keeps a lower class
    /// below its own allocation whenever the core delivers less to its ports than C2TB hands
    /// out (empty polls and decisions are not port work). A latency-class port within its
    /// purchase in bytes keeps its class ([`LatencyClass`]).
    #[inline]
    fn tier_class(&mut self, port: PortIndex, current_priority: u8, now_tsc: u64) -> u8 {
        let slot = &self.slots.0[port];
        if !slot.bucket.beyond_allocation() {
            return current_priority;
        }
        let configured = slot.state.as_ref().map_or(PRIORITY_CLASSES as u8, |s| s.configured_priority.get());
        if configured <= LATENCY_CLASSES
            && self.latency.has_purchase(port)
            && self.latency.within_purchase(port, now_tsc)
        {
            return current_priority;
        }
        PRIORITY_CLASSES as u8
    }

    fn take_out_of_queues(&mut self, port: PortIndex) {
        let place = self.slots.0[port].place;
        match place {
            PortPlace::Ready { class } => {
                if self.ready.remove(usize::from(class - 1), port).is_some_and(|e| e.due_tsc != 0) {
                    self.deferred_parking.count -= 1;
                }
            }
            PortPlace::Resting => self.resting.ports.retain(|&(p, _)| p != port),
            PortPlace::Waiting => {
                self.waiting.remove(&mut self.slots, port);
            }
            PortPlace::InService => {}
        }
        self.slots.0[port].place = PortPlace::InService;
    }

    /// Moves ports whose tokens are positive again from the waiting queue to their ready queue.
    #[inline]
    fn promote_waiting(&mut self, now_tsc: u64) {
        if !self.pool.is_lazy() {
            if self.pool.update(&mut self.slots, now_tsc) {
                // Every bucket may have changed: re-examine all waiting ports.
                for port in 0..self.slots.0.len() {
                    if self.waiting.remove(&mut self.slots, port) {
                        self.expired.push(port);
                    }
                }
            }
        } else if !self.waiting.is_empty() {
            self.waiting.expire(&mut self.slots, now_tsc, &mut self.expired);
        }
        if self.expired.is_empty() {
            return;
        }
        let expired = std::mem::take(&mut self.expired);
        self.expired = self.requeue_each(expired, now_tsc);
    }
}

/// Worst-case wait, in batch times, of a port in each class (Sec. IV-B-2):
/// class 1: `N1 * c`; class j: `(N1*k1 + ... + N(j-1)*k(j-1) + Nj) * c`, where `ports_per_class[i]`
/// is N(i+1), `batch_cycles` is c, and `k[i] >= 1` is how many batches a class-(i+1) port may run
/// while a lower-class port runs one (bounded in practice by the C2TB allocations).
/// The `Nj` term also covers the one batch of any class that may be in service when the port
/// becomes ready, since a batch is never preempted.
pub fn worst_case_wait_cycles(
    ports_per_class: &[usize; PRIORITY_CLASSES],
    k: &[f64; PRIORITY_CLASSES - 1],
    batch_cycles: f64,
) -> [f64; PRIORITY_CLASSES] {
    let mut bounds = [0.0; PRIORITY_CLASSES];
    let mut higher = 0.0;
    for class in 0..PRIORITY_CLASSES {
        bounds[class] = (higher + ports_per_class[class] as f64) * batch_cycles;
        if class < PRIORITY_CLASSES - 1 {
            higher += ports_per_class[class] as f64 * k[class].max(1.0);
        }
    }
    bounds
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn a_ports_record_fits_the_two_lines_one_miss_brings_in() {
        assert_eq!(std::mem::size_of::<PortSlot>(), 128);
        assert_eq!(std::mem::align_of::<PortSlot>(), 128);
    }

    #[test]
    fn the_lines_a_decision_reads_are_named_for_prefetching() {
        let c2tb = C2tbConfig::one_core_with_depth_us(2_000_000_000, 100);
        let mut s = PortScheduler::new(c2tb, HbsConfig::default(), 0);
        for port in 0..3 {
            s.add_port(port, 2, CycleLimit::Unlimited, 0).unwrap();
        }
        let in_service = s.next_port(10).unwrap();
        let head = s.ready.first().unwrap();
        assert_ne!(in_service, head);
        let mut pieces = Vec::new();
        s.decision_lines(in_service, |start, len| pieces.push((start as usize, len)));
        let named = |byte: usize| pieces.iter().any(|&(start, len)| (start..start + len).contains(&byte));
        let record = |port: PortIndex| &s.slots.0[port] as *const PortSlot as usize;
        for port in [in_service, head] {
            assert!(named(record(port)) && named(record(port) + 64), "record of port {port}");
        }
        let fields = &s as *const PortScheduler as usize;
        for byte in (fields..fields + size_of::<PortScheduler>()).step_by(64) {
            assert!(named(byte), "the scheduler's line at {byte:#x}");
        }
    }
}
