//! HBS, hierarchical batch scheduling (seed 000 Sec. IV-B, Fig. 8), driving C2TB.
//!
//! A PMD thread asks [`PortScheduler::next_port`] which port to serve, runs one batch for it
//! through ingress, classification and egress, and reports the batch's cycles and packet count
//! with [`PortScheduler::report_batch`]. Between those two calls the port is "in service" and in
//! no queue.
//!
//! * 8 priority classes (1 highest), a FIFO ready queue per class: the head of the highest
//!   non-empty class is always served first (Sec. IV-B-1). A bitmask of non-empty classes makes
//!   the choice O(1).
//! * One waiting queue for ports whose tokens are <= 0: a timer wheel keyed by the TSC at which
//!   each port's own generation rate makes it positive again, so parking and promoting a port is
//!   O(1) rather than a scan or a heap operation. A port is promoted at most one wheel slot
//!   (8192 ticks, about 3.3 us at 2.5 GHz) after its bucket turns positive: the PMD decides
//!   once per batch (about 10 us for 32 packets), so a finer slot would promote no port
//!   sooner, and the coarse wheel's heads and occupancy fit 9 cache lines. Its bucket keeps
//!   filling meanwhile, so the lateness costs the port nothing.
//! * A port whose batch left it owing tokens goes to the back of its ready queue at once,
//!   with the TSC at which its own rate pays the debt (`due_tsc`, kept in its ready-queue
//!   entry, so the decision reads it from the line the head came from). If it reaches the
//!   head of its queue before then, it goes round once more to the back; only if it reaches
//!   the head early again is it parked in the waiting queue. The paper moves it to the
//!   waiting queue at once and back to the tail when its tokens turn positive. When every
//!   port hovers around zero tokens, as when the allocations add up to the core, that meant
//!   one park and one promotion on every decision, and each touched other ports' records,
//!   which every batch evicts from the caches (the overhead benchmark, docs/results/c2qos-overhead.md). Going round once
//!   more costs a ring's pop and push where parking costs a wheel insert, an expiry and a
//!   requeue: ports whose batches cost more than the average reach the head a little short
//!   every other turn (0.13-0.28 parks per decision in the benchmark, 0.003-0.016 since).
//!   A port never runs before it is due, so C2TB's bound holds, and it is never served
//!   later than the paper's queue would serve it. It may be served sooner:
//!   it keeps the place it had when its batch ended, instead of joining behind the ports that
//!   were requeued while it waited. In periodic refill the due time is not known (tokens come
//!   only with the manager's updates), so a port that owes tokens is parked at once there.
//! * Layout: all a port's state (its HBS state, its C2TB bucket, its wheel link) sits in one
//!   record of two cache lines; the ready queues are rings of indices in the scheduler
//!   ([`super::ready`]). In the data plane every batch evicts the scheduler from the core's
//!   caches, so each separate place a decision touches is a miss (the overhead
//!   measurement). Handing a port out only stores to its record, which does not wait for the
//!   line; reporting its batch reads the record once.
//! * A port whose poll found nothing *rests*: it goes back to its ready queue once another port
//!   has run a batch with packets (or when nothing else is ready). The paper's ready queues hold
//!   the ports that may run; without this an idle class-1 port, charged nothing for its empty
//!   polls, was polled again and again within a microsecond and demoted through every class
//!   before its next packet came, so a light latency-sensitive VM (Fig. 11c: one frame every
//!   29 us) sat behind the busy classes. Resting, an idle port costs one empty poll per busy
//!   batch while it keeps its class.
//! * Dynamic priority (Sec. IV-B-3): after `idle_polls_per_step` consecutive empty polls a port's
//!   class drops by one, down to 8; the first packet restores its configured class at once.
//!   The paper does not say how that first packet is seen while ports above the demoted one
//!   stay ready: a class-1 web server that went quiet between requests sank to class 8 and
//!   then waited behind two backlogged class-4 bulk VMs (MIN-MAX keeps them ready), 5 ms per
//!   request where round robin took 1.9 (Fig. 12). So a demoted port is probed at least every
//!   `demoted_probe_us` regardless of class; its next packet is then seen within that time.
//!
//! * Turns ([`PortScheduler::end_batch`]): a backlogged port of the top configured class may
//!   run further full batches, up to [`HbsConfig::turn_ns`] in all, on tokens it already
//!   holds, and is charged once for the turn; lower classes keep a decision per batch.
//!   The paper decides once per batch; a decision costs 40-45 cycles, 1.3% of a batch of
//!   cheap frames, and sharing it among the batches of a turn takes that off where it
//!   weighs most (the overhead benchmark, docs/results/c2qos-overhead.md).
//!
//! With no settings on any port (all unlimited, all class 8) the ready queue is a single FIFO in
//! which every served port goes to the back: the fixed-order round robin OVS's PMD loop does.

use std::num::NonZeroU8;

use super::c2tb::{Bucket, BucketSet, C2tbConfig, CycleLimit, CyclePool};
use super::ready::ReadyQueues;
pub use super::ready::PRIORITY_CLASSES;
use super::PortIndex;
use crate::timer_wheel::{IntrusiveWheel, Link, WheelLinks};

/// Waiting-queue wheel: 8192-tick slots, 128 of them: about 420 us at 2.5 GHz before the far
/// list, which is re-filed once per turn. A port sharing the core with 27 others waits about
/// 280 us after a 10 us batch; the heads take 8 cache lines.
const WAIT_SLOT_SHIFT: u32 = 13;
const WAIT_SLOTS: usize = 128;

/// Class given to a port that has no priority setting: the lowest, so that a configured
/// priority always means "before the ports nobody configured".
pub const DEFAULT_PRIORITY: u8 = 8;

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
}

impl Default for HbsConfig {
    fn default() -> Self {
        HbsConfig { idle_polls_per_step: 4, full_batch_packets: 32, demoted_probe_us: 100, turn_ns: DEFAULT_TURN_NS }
    }
}

/// About one batch of cloud-like packets (64-byte frames through a security-group table cost
/// 200-300 cycles each, 32 of them 2.5-3.7 us at 2.6 GHz): such batches keep one decision
/// each, and cheap ones (one flow, 100 cycles a packet) share a decision by three
/// (`docs/deviations.md`, turns).
pub const DEFAULT_TURN_NS: u32 = 3_000;

/// Where a port is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortPlace {
    Ready {
        class: u8,
    },
    /// Its last poll found nothing: it waits for another port's batch with packets.
    Resting,
    Waiting,
    InService,
}

/// A port's scheduling state, for `qos-show` and the tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortView {
    pub configured_priority: u8,
    pub current_priority: u8,
    pub place: PortPlace,
    pub limit: CycleLimit,
    pub tokens: Option<f64>,
    pub empty_poll_streak: u32,
    /// Times the port has had to wait for tokens (its allocation bound).
    pub waits: u64,
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

/// C2TB + HBS for the ports of one PMD thread. Not shared between threads: each PMD owns one.
#[derive(Clone, Debug)]
pub struct PortScheduler {
    pool: CyclePool,
    config: HbsConfig,
    slots: Slots,
    ready: ReadyQueues,
    waiting: IntrusiveWheel,
    /// [`HbsConfig::demoted_probe_us`] in TSC ticks, and when the next look for a stale demoted
    /// port is due.
    probe_ticks: u64,
    probe_due_tsc: u64,
    /// [`HbsConfig::turn_ns`] in TSC ticks, and the cycles of the turn under way (its batches
    /// before the last one, charged when the turn ends).
    turn_ticks: u64,
    turn_cycles: u64,
    /// Ports whose class is below their configured one (none: no probe scan at all).
    demoted: usize,
    /// The highest configured class of the scheduled ports (smallest number): only its
    /// ports take turns of several batches.
    top_configured_class: u8,
    /// Ports whose last poll was empty, in the order they rested, each with the class it
    /// goes back to: releasing them then only writes their records.
    resting: Vec<(PortIndex, u8)>,
    /// Scratch for ports the wheel hands back.
    expired: Vec<PortIndex>,
    /// Per port: 0, or the TSC at which a port that sits in a ready queue owing tokens has
    /// paid its debt (see the module notes). The decision reads the copy in the port's
    /// ready-queue entry and only stores here; this copy serves lookups by port.
    due_tsc: Vec<u64>,
    /// Ports in a ready queue with a due time (counted as waiting).
    deferred: usize,
    counts: WaitCounts,
}

fn check_priority(priority: u8) -> Result<(), String> {
    if (1..=PRIORITY_CLASSES as u8).contains(&priority) {
        Ok(())
    } else {
        Err(format!("priority {priority} is out of range: classes are 1 (highest) to 8"))
    }
}

impl PortScheduler {
    pub fn new(c2tb: C2tbConfig, hbs: HbsConfig, now_tsc: u64) -> Self {
        PortScheduler {
            pool: CyclePool::new(c2tb, now_tsc),
            config: hbs,
            slots: Slots::default(),
            ready: ReadyQueues::default(),
            waiting: IntrusiveWheel::new(WAIT_SLOT_SHIFT, WAIT_SLOTS, now_tsc),
            resting: Vec::new(),
            expired: Vec::new(),
            due_tsc: Vec::new(),
            deferred: 0,
            counts: WaitCounts::default(),
            probe_ticks: u64::from(hbs.demoted_probe_us) * c2tb.tsc_hz / 1_000_000,
            turn_ticks: u64::from(hbs.turn_ns) * c2tb.tsc_hz / 1_000_000_000,
            turn_cycles: 0,
            probe_due_tsc: now_tsc,
            demoted: 0,
            top_configured_class: DEFAULT_PRIORITY,
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

    pub fn hbs_config(&self) -> HbsConfig {
        self.config
    }

    pub fn set_hbs_config(&mut self, config: HbsConfig) {
        self.config = config;
        self.probe_ticks = u64::from(config.demoted_probe_us) * self.pool.config().tsc_hz / 1_000_000;
        self.turn_ticks = u64::from(config.turn_ns) * self.pool.config().tsc_hz / 1_000_000_000;
    }

    pub fn set_c2tb_config(&mut self, config: C2tbConfig, now_tsc: u64) {
        self.pool.set_config(&mut self.slots, config, now_tsc);
        // Due times were worked out at the old rates (and periodic refill has none): every
        // queued port that owes tokens is placed again.
        for port in 0..self.due_tsc.len() {
            if self.due_tsc[port] != 0 {
                self.take_out_of_queues(port);
                self.requeue(port, now_tsc);
            }
        }
    }

    pub fn contains(&self, port: PortIndex) -> bool {
        self.slots.0.get(port).is_some_and(|s| s.state.is_some())
    }

    pub fn port_count(&self) -> usize {
        self.slots.0.iter().filter(|s| s.state.is_some()).count()
    }

    /// Adds a port, ready at once. Errors leave the scheduler unchanged.
    pub fn add_port(&mut self, port: PortIndex, priority: u8, limit: CycleLimit, now_tsc: u64) -> Result<(), String> {
        check_priority(priority)?;
        if self.contains(port) {
            return Err(format!("port {port} is already scheduled on this PMD"));
        }
        if port > ReadyQueues::MAX_PORT {
            return Err(format!("port index {port} is too large: at most {}", ReadyQueues::MAX_PORT));
        }
        self.ready.reserve(port + 1);
        if self.due_tsc.len() <= port {
            self.due_tsc.resize(port + 1, 0);
        }
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
        self.recount_demoted();
        true
    }

    /// Ports below their configured class, counted again after a port is added or removed
    /// or its class set (report_batch keeps the count between those); and the highest
    /// configured class.
    fn recount_demoted(&mut self) {
        self.demoted = self.states().filter(|s| s.current_priority > s.configured_priority.get()).count();
        self.top_configured_class =
            self.states().map(|s| s.configured_priority.get()).min().unwrap_or(DEFAULT_PRIORITY);
    }

    fn states(&self) -> impl Iterator<Item = &PortState> {
        self.slots.0.iter().filter_map(|s| s.state.as_ref())
    }

    /// Changes a port's configured class; takes effect at once, also for a queued port.
    pub fn set_priority(&mut self, port: PortIndex, priority: u8, now_tsc: u64) -> Result<(), String> {
        check_priority(priority)?;
        let state = self.state_mut(port)?;
        state.configured_priority = NonZeroU8::new(priority).expect("checked");
        state.current_priority = priority;
        state.empty_poll_streak = 0;
        if matches!(self.slots.0[port].place, PortPlace::Ready { .. }) {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        for (_, class) in self.resting.iter_mut().filter(|(p, _)| *p == port) {
            *class = priority;
        }
        self.recount_demoted();
        Ok(())
    }

    /// Changes a port's cycle limit; takes effect at once (a waiting port that is now unlimited
    /// or positive becomes ready).
    pub fn set_limit(&mut self, port: PortIndex, limit: CycleLimit, now_tsc: u64) -> Result<(), String> {
        self.state_mut(port)?;
        let place = self.slots.0[port].place;
        self.pool.set_limit(&mut self.slots, port, limit, now_tsc);
        if place != PortPlace::InService {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        Ok(())
    }

    pub fn view(&self, port: PortIndex) -> Option<PortView> {
        let slot = self.slots.0.get(port)?;
        let s = slot.state.as_ref()?;
        let deferred = self.due_tsc.get(port).is_some_and(|&due| due != 0);
        Some(PortView {
            configured_priority: s.configured_priority.get(),
            current_priority: s.current_priority,
            place: if deferred { PortPlace::Waiting } else { slot.place },
            limit: slot.bucket.limit(),
            tokens: slot.bucket.tokens(),
            empty_poll_streak: s.empty_poll_streak,
            waits: s.waits,
        })
    }

    /// Number of ports waiting for tokens (parked, or queued with a due time).
    pub fn waiting_len(&self) -> usize {
        self.waiting.len() + self.deferred
    }

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
        self.due_tsc[port] = 0;
        self.deferred -= 1;
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
        if self.demoted == 0 || self.probe_ticks == 0 || now_tsc < self.probe_due_tsc {
            return None;
        }
        self.find_stale_demoted_port(now_tsc)
    }

    /// The scan behind [`Self::stale_demoted_port`], out of the decision's line.
    #[cold]
    #[inline(never)]
    fn find_stale_demoted_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        let mut stalest: Option<(u64, PortIndex)> = None;
        for (port, slot) in self.slots.0.iter().enumerate() {
            let Some(s) = &slot.state else { continue };
            let PortPlace::Ready { class } = slot.place else { continue };
            if self.due_tsc[port] > now_tsc {
                continue;
            }
            let due =
                class > s.configured_priority.get() && now_tsc.saturating_sub(slot.last_served_tsc) >= self.probe_ticks;
            if due && stalest.is_none_or(|(t, _)| slot.last_served_tsc < t) {
                stalest = Some((slot.last_served_tsc, port));
            }
        }
        if stalest.is_none() {
            self.probe_due_tsc = now_tsc + self.probe_ticks / 4;
        }
        stalest.map(|(_, port)| port)
    }

    /// See [`CyclePool::credit_stall`]; call before reporting the stalled batch.
    pub fn credit_stall(&mut self, stall_ticks: u64) {
        self.pool.credit_stall(&mut self.slots, stall_ticks);
    }

    /// Ends a batch of the port in service: either the port keeps the core for another batch
    /// of the same turn (true: serve it again without [`PortScheduler::next_port`]), or its
    /// turn ends and the whole turn is reported ([`PortScheduler::report_batch`]). A turn goes
    /// on while the batches are full (the port is backlogged), the turn so far is shorter than
    /// [`HbsConfig::turn_ns`], the port's tokens (as of its last refill) cover it, no
    /// demoted port is due for its probe, and the port is in the top configured class and
    /// not demoted, so no port can be ready or resting above it: the ports of the top class
    /// share the core in turns, the classes below keep a decision per batch, so a latency-sensitive class above them finds the core exactly
    /// as before (Fig. 11c and 12: its ports rest or sink through the classes between
    /// packets). `may_continue` false ends a turn regardless (the PMD ends every turn with
    /// its pass). A higher class waits at most one batch, as with a decision per batch, and
    /// C2TB's bound holds (a turn runs only on tokens the port has, and
    /// may leave it owing one batch, as one batch may). Seed 000 Sec. IV-B decides once per
    /// batch; sharing the decision among the few cheap batches of one turn takes its cost
    /// off the cheapest packets, where it weighs most (the overhead benchmark, docs/results/c2qos-overhead.md).
    #[inline]
    pub fn end_batch(&mut self, port: PortIndex, cycles: u64, packets: u32, now_tsc: u64, may_continue: bool) -> bool {
        let turn_cycles = self.turn_cycles + cycles;
        if may_continue
            && packets >= self.config.full_batch_packets
            && turn_cycles < self.turn_ticks
            && self.turn_may_go_on(port, turn_cycles, now_tsc)
        {
            self.turn_cycles = turn_cycles;
            return true;
        }
        self.turn_cycles = 0;
        self.report_batch(port, turn_cycles, packets, now_tsc);
        false
    }

    /// A port in the top configured class, not demoted, is in the highest class any port can
    /// be in: no port ready or resting can be above it.
    #[inline]
    fn turn_may_go_on(&self, port: PortIndex, turn_cycles: u64, now_tsc: u64) -> bool {
        let Some(slot) = self.slots.0.get(port) else { return false };
        let Some(s) = slot.state.as_ref() else { return false };
        let probe_due = self.demoted > 0 && self.probe_ticks > 0 && now_tsc >= self.probe_due_tsc;
        s.current_priority == self.top_configured_class
            && slot.place == PortPlace::InService
            && !probe_due
            && slot.bucket.covers(turn_cycles)
    }

    /// Reports the batch just run for `port`: charges its cycles to the bucket, updates the
    /// dynamic priority from the packet count, and puts the port back in the ready or the
    /// waiting queue.
    #[inline]
    pub fn report_batch(&mut self, port: PortIndex, cycles: u64, packets: u32, now_tsc: u64) {
        let steps = self.config.idle_polls_per_step;
        let Some(slot) = self.slots.0.get_mut(port) else { return };
        let Some(s) = slot.state.as_mut() else { return };
        if slot.place != PortPlace::InService {
            return;
        }
        let was_demoted = s.current_priority > s.configured_priority.get();
        if packets > 0 {
            s.current_priority = s.configured_priority.get();
            s.empty_poll_streak = 0;
        } else if steps > 0 {
            s.empty_poll_streak += 1;
            if s.empty_poll_streak >= steps {
                s.empty_poll_streak = 0;
                s.current_priority = (s.current_priority + 1).min(PRIORITY_CLASSES as u8);
            }
        }
        match (was_demoted, s.current_priority > s.configured_priority.get()) {
            (false, true) => self.demoted += 1,
            (true, false) => self.demoted -= 1,
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
                self.resting.push((port, s.current_priority));
            } else {
                // It owes tokens (a probed port may run owing them): queued as after a batch.
                // A bucket that is not positive was just refilled.
                self.requeue_refilled(port, now_tsc);
            }
        } else {
            self.pool.charge(&mut slot.bucket, cycles, packets >= self.config.full_batch_packets);
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
        for &(port, class) in &self.resting {
            self.slots.0[port].place = PortPlace::Ready { class };
            self.ready.push_back(usize::from(class - 1), port, 0);
        }
        self.resting.clear();
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

    fn state_mut(&mut self, port: PortIndex) -> Result<&mut PortState, String> {
        self.slots
            .0
            .get_mut(port)
            .and_then(|s| s.state.as_mut())
            .ok_or_else(|| format!("port {port} is not scheduled on this PMD"))
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
        let wait_ticks = slot.bucket.wait_ticks();
        let s = slot.state.as_mut().expect("requeue of a known port");
        let class = s.current_priority;
        if wait_ticks > 0 {
            s.waits += 1;
            self.counts.owed += 1;
        }
        let defer = wait_ticks > 0 && wait_ticks < u64::MAX / 2 && self.pool.is_lazy();
        if wait_ticks == 0 || defer {
            // A port owing tokens keeps its place in the queue, with its due time (module notes).
            slot.place = PortPlace::Ready { class };
            let due = if defer { now_tsc.saturating_add(wait_ticks) } else { 0 };
            self.ready.push_back(usize::from(class - 1), port, due);
            if defer {
                // Also kept by port, for the paths that look a port up (views, the probe).
                self.due_tsc[port] = due;
                self.deferred += 1;
            }
        } else {
            slot.place = PortPlace::Waiting;
            self.counts.parked += 1;
            self.waiting.insert_unparked(&mut self.slots, now_tsc.saturating_add(wait_ticks), port);
        }
    }

    fn take_out_of_queues(&mut self, port: PortIndex) {
        let place = self.slots.0[port].place;
        match place {
            PortPlace::Ready { class } => {
                self.ready.remove(usize::from(class - 1), port);
                if std::mem::take(&mut self.due_tsc[port]) != 0 {
                    self.deferred -= 1;
                }
            }
            PortPlace::Resting => self.resting.retain(|&(p, _)| p != port),
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
}
