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
//!   (1024 ticks, about 0.5 us at 2 GHz) after its bucket turns positive.
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
//! With no settings on any port (all unlimited, all class 8) the ready queue is a single FIFO in
//! which every served port goes to the back: the fixed-order round robin OVS's PMD loop does.

use std::collections::VecDeque;

use super::c2tb::{C2tbConfig, CycleBuckets, CycleLimit, RefillMode};
use super::PortIndex;
use crate::timer_wheel::TimerWheel;

/// Waiting-queue wheel: 1024-tick slots, 4096 of them (about 2 ms at 2 GHz before the far list).
const WAIT_SLOT_SHIFT: u32 = 10;
const WAIT_SLOTS: usize = 4096;

pub const PRIORITY_CLASSES: usize = 8;
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
}

impl Default for HbsConfig {
    fn default() -> Self {
        HbsConfig { idle_polls_per_step: 4, full_batch_packets: 32, demoted_probe_us: 100 }
    }
}

/// Where a port is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortPlace {
    Ready { class: u8 },
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
    configured_priority: u8,
    current_priority: u8,
    empty_poll_streak: u32,
    place: PortPlace,
    waits: u64,
    /// When the port was last handed out by [`PortScheduler::next_port`].
    last_served_tsc: u64,
}

/// C2TB + HBS for the ports of one PMD thread. Not shared between threads: each PMD owns one.
#[derive(Clone, Debug)]
pub struct PortScheduler {
    buckets: CycleBuckets,
    config: HbsConfig,
    ports: Vec<Option<PortState>>,
    ready: [VecDeque<PortIndex>; PRIORITY_CLASSES],
    /// Bit c set when class c+1's ready queue is non-empty.
    ready_mask: u8,
    waiting: TimerWheel,
    /// [`HbsConfig::demoted_probe_us`] in TSC ticks, and when the next look for a stale demoted
    /// port is due.
    probe_ticks: u64,
    probe_due_tsc: u64,
    /// Ports whose class is below their configured one (none: no probe scan at all).
    demoted: usize,
    /// Ports whose last poll was empty, in the order they rested.
    resting: Vec<PortIndex>,
    /// Scratch for ports the wheel hands back.
    expired: Vec<PortIndex>,
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
            buckets: CycleBuckets::new(c2tb, now_tsc),
            config: hbs,
            ports: Vec::new(),
            ready: Default::default(),
            ready_mask: 0,
            waiting: TimerWheel::new(WAIT_SLOT_SHIFT, WAIT_SLOTS, now_tsc),
            resting: Vec::new(),
            expired: Vec::new(),
            probe_ticks: u64::from(hbs.demoted_probe_us) * c2tb.tsc_hz / 1_000_000,
            probe_due_tsc: now_tsc,
            demoted: 0,
        }
    }

    pub fn buckets(&self) -> &CycleBuckets {
        &self.buckets
    }

    pub fn hbs_config(&self) -> HbsConfig {
        self.config
    }

    pub fn set_hbs_config(&mut self, config: HbsConfig) {
        self.config = config;
    }

    pub fn set_c2tb_config(&mut self, config: C2tbConfig, now_tsc: u64) {
        self.buckets.set_config(config, now_tsc);
    }

    pub fn contains(&self, port: PortIndex) -> bool {
        matches!(self.ports.get(port), Some(Some(_)))
    }

    pub fn port_count(&self) -> usize {
        self.ports.iter().flatten().count()
    }

    /// Adds a port, ready at once. Errors leave the scheduler unchanged.
    pub fn add_port(
        &mut self,
        port: PortIndex,
        priority: u8,
        limit: CycleLimit,
        now_tsc: u64,
    ) -> Result<(), String> {
        check_priority(priority)?;
        if self.contains(port) {
            return Err(format!("port {port} is already scheduled on this PMD"));
        }
        if port >= self.ports.len() {
            self.ports.resize(port + 1, None);
        }
        self.buckets.set_limit(port, limit, now_tsc);
        self.ports[port] = Some(PortState {
            configured_priority: priority,
            current_priority: priority,
            empty_poll_streak: 0,
            place: PortPlace::InService,
            waits: 0,
            last_served_tsc: now_tsc,
        });
        self.requeue(port, now_tsc);
        Ok(())
    }

    /// Removes a port wherever it is (a port in service is simply not requeued).
    pub fn remove_port(&mut self, port: PortIndex, now_tsc: u64) -> bool {
        if !self.contains(port) {
            return false;
        }
        self.take_out_of_queues(port);
        self.ports[port] = None;
        self.buckets.remove(port, now_tsc);
        self.recount_demoted();
        true
    }

    /// Ports below their configured class, counted again after a port is removed or its
    /// class set (report_batch keeps the count between those).
    fn recount_demoted(&mut self) {
        self.demoted = self.ports.iter().flatten().filter(|s| s.current_priority > s.configured_priority).count();
    }

    /// Changes a port's configured class; takes effect at once, also for a queued port.
    pub fn set_priority(&mut self, port: PortIndex, priority: u8, now_tsc: u64) -> Result<(), String> {
        check_priority(priority)?;
        let state = self.state_mut(port)?;
        state.configured_priority = priority;
        state.current_priority = priority;
        state.empty_poll_streak = 0;
        if matches!(state.place, PortPlace::Ready { .. }) {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        self.recount_demoted();
        Ok(())
    }

    /// Changes a port's cycle limit; takes effect at once (a waiting port that is now unlimited
    /// or positive becomes ready).
    pub fn set_limit(&mut self, port: PortIndex, limit: CycleLimit, now_tsc: u64) -> Result<(), String> {
        let place = self.state_mut(port)?.place;
        self.buckets.set_limit(port, limit, now_tsc);
        if place != PortPlace::InService {
            self.take_out_of_queues(port);
            self.requeue(port, now_tsc);
        }
        Ok(())
    }

    pub fn view(&self, port: PortIndex) -> Option<PortView> {
        let s = self.ports.get(port)?.as_ref()?;
        Some(PortView {
            configured_priority: s.configured_priority,
            current_priority: s.current_priority,
            place: s.place,
            limit: self.buckets.limit(port),
            tokens: self.buckets.tokens(port),
            empty_poll_streak: s.empty_poll_streak,
            waits: s.waits,
        })
    }

    /// Number of ports waiting for tokens.
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// The port to serve next, or `None` when every port is waiting for tokens (or there are no
    /// ports). The port stays in service until [`PortScheduler::report_batch`].
    #[inline]
    pub fn next_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        self.promote_waiting(now_tsc);
        if self.ready_mask == 0 {
            // Nothing with packets to run: poll the resting ports again.
            self.release_resting(now_tsc);
            if self.ready_mask == 0 {
                return None;
            }
        }
        let port = match self.stale_demoted_port(now_tsc) {
            Some(port) => {
                self.take_out_of_queues(port);
                port
            }
            None => {
                let class = self.ready_mask.trailing_zeros() as usize;
                let port = self.ready[class].pop_front().expect("mask says non-empty");
                if self.ready[class].is_empty() {
                    self.ready_mask &= !(1 << class);
                }
                port
            }
        };
        if let Some(Some(s)) = self.ports.get_mut(port) {
            s.place = PortPlace::InService;
            s.last_served_tsc = now_tsc;
        }
        Some(port)
    }

    /// The ready, demoted port polled longest ago, if that was `probe_ticks` or more ago. Scans
    /// the ports at most every quarter probe interval while none is due.
    fn stale_demoted_port(&mut self, now_tsc: u64) -> Option<PortIndex> {
        if self.demoted == 0 || self.probe_ticks == 0 || now_tsc < self.probe_due_tsc {
            return None;
        }
        let mut stalest: Option<(u64, PortIndex)> = None;
        for (port, s) in self.ports.iter().enumerate() {
            let Some(s) = s else { continue };
            let PortPlace::Ready { class } = s.place else { continue };
            let due = class > s.configured_priority && now_tsc.saturating_sub(s.last_served_tsc) >= self.probe_ticks;
            if due && stalest.is_none_or(|(t, _)| s.last_served_tsc < t) {
                stalest = Some((s.last_served_tsc, port));
            }
        }
        if stalest.is_none() {
            self.probe_due_tsc = now_tsc + self.probe_ticks / 4;
        }
        stalest.map(|(_, port)| port)
    }

    /// See [`CycleBuckets::credit_stall`]; call before reporting the stalled batch.
    pub fn credit_stall(&mut self, stall_ticks: u64) {
        self.buckets.credit_stall(stall_ticks);
    }

    /// Reports the batch just run for `port`: charges its cycles to the bucket, updates the
    /// dynamic priority from the packet count, and puts the port back in the ready or the
    /// waiting queue.
    #[inline]
    pub fn report_batch(&mut self, port: PortIndex, cycles: u64, packets: u32, now_tsc: u64) {
        let steps = self.config.idle_polls_per_step;
        let Some(Some(s)) = self.ports.get_mut(port) else { return };
        if s.place != PortPlace::InService {
            return;
        }
        let was_demoted = s.current_priority > s.configured_priority;
        if packets > 0 {
            s.current_priority = s.configured_priority;
            s.empty_poll_streak = 0;
        } else if steps > 0 {
            s.empty_poll_streak += 1;
            if s.empty_poll_streak >= steps {
                s.empty_poll_streak = 0;
                s.current_priority = (s.current_priority + 1).min(PRIORITY_CLASSES as u8);
            }
        }
        match (was_demoted, s.current_priority > s.configured_priority) {
            (false, true) => self.demoted += 1,
            (true, false) => self.demoted -= 1,
            _ => {}
        }
        // An empty poll is the PMD's idle time (as OVS counts it), not the port's use of the
        // core: charging it would make a sleeping port look busy and keep its cycles from being
        // redistributed.
        let charged = if packets == 0 { 0 } else { cycles };
        self.buckets.charge(port, charged, packets >= self.config.full_batch_packets);
        if packets == 0 {
            s.place = PortPlace::Resting;
            self.resting.push(port);
        } else {
            self.release_resting(now_tsc);
            self.requeue(port, now_tsc);
        }
    }

    /// Puts the resting ports back in their queues, in the order they rested.
    #[inline]
    fn release_resting(&mut self, now_tsc: u64) {
        if self.resting.is_empty() {
            return;
        }
        let resting = std::mem::take(&mut self.resting);
        self.resting = self.requeue_each(resting, now_tsc);
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
        self.ports
            .get_mut(port)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| format!("port {port} is not scheduled on this PMD"))
    }

    /// Puts a port (in service, or just taken out of its queue) into the right queue.
    #[inline]
    fn requeue(&mut self, port: PortIndex, now_tsc: u64) {
        let wait_ticks = self.buckets.refill_and_wait_ticks(port, now_tsc);
        let s = self.ports[port].as_mut().expect("requeue of a known port");
        if wait_ticks == 0 {
            let class = s.current_priority;
            s.place = PortPlace::Ready { class };
            let idx = usize::from(class - 1);
            self.ready[idx].push_back(port);
            self.ready_mask |= 1 << idx;
        } else {
            s.place = PortPlace::Waiting;
            s.waits += 1;
            self.waiting.insert(now_tsc.saturating_add(wait_ticks), port);
        }
    }

    fn take_out_of_queues(&mut self, port: PortIndex) {
        let s = self.ports[port].as_mut().expect("known port");
        match s.place {
            PortPlace::Ready { class } => {
                let idx = usize::from(class - 1);
                self.ready[idx].retain(|&p| p != port);
                if self.ready[idx].is_empty() {
                    self.ready_mask &= !(1 << idx);
                }
            }
            PortPlace::Resting => self.resting.retain(|&p| p != port),
            PortPlace::Waiting => {
                self.waiting.remove(port);
            }
            PortPlace::InService => {}
        }
        s.place = PortPlace::InService;
    }

    /// Moves ports whose tokens are positive again from the waiting queue to their ready queue.
    #[inline]
    fn promote_waiting(&mut self, now_tsc: u64) {
        if let RefillMode::Periodic { .. } = self.buckets.config().refill {
            if self.buckets.update(now_tsc) {
                // Every bucket may have changed: re-examine all waiting ports.
                self.waiting.drain_all(&mut self.expired);
            }
        } else if !self.waiting.is_empty() {
            self.waiting.expire(now_tsc, &mut self.expired);
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
