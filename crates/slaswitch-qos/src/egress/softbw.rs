//! SoftBW's fulfillment-based round-robin packet scheduler (seed 003 Sec. 5) and its three
//! guarantees (Sec. 4): strict rate B, dynamic (S, T), and fairness.
//!
//! Per queue, after each departure of a `p_size` packet with inter-departure time tau:
//! `dtau += tau - p_size / B` (Eq. 4, accumulated), clamped to `[-tau_max, tau_max]`; then
//! * `dtau >= 0`: the guarantee is not met, `tts = 0` (send at once);
//! * `dtau < 0` and it was already negative: `tts = now + p_size / B` (Eq. 5);
//! * `dtau` just turned negative: `tts = now + p_size / B - dtau_prev` (Eq. 6). Reading taken:
//!   the extracted Eq. 6 subtracts "dtau", and the text calls it "a compensation ... since the
//!   VM's rate in the previous round is less than the guarantee", so it is the previous, positive
//!   error that is subtracted, bringing the next send earlier.
//!
//! A dequeue serves, in round-robin order, a backlogged queue with `tts = 0` or `tts <= now`.
//! If there is none, the link's own error `dtau_c` (the same accumulation against the link rate,
//! over departures from any queue) says whether the link has residual capacity; if it does, the
//! next backlogged queue in a second round robin over all backlogged queues sends, so residual
//! bandwidth is shared equally among VMs (the fairness guarantee), work-conserving.
//!
//! Queues waiting for their tts sit in a timer wheel (256 ns slots), so a dequeue costs O(1)
//! and no scan over queues; a queue becomes eligible at most 256 ns after its tts, a lateness
//! the accumulated error repays.
//!
//! Dynamic guarantee (Sec. 4): starts at `S/T`; every `guarantee_update_ns` (the paper: 1 s) it
//! becomes `s'/t'` (remaining bytes over remaining time), never above `S/T`; after T, or once S
//! bytes are sent, the queue has only the fairness guarantee. A fairness-guarantee queue gets a
//! small guarantee (`fairness_rate_bps`) "so that their traffic will not be blocked when the
//! bandwidth is fully utilized by guaranteed traffic".

use std::collections::VecDeque;

use super::{Dequeued, EgressScheduler, PacketQueues, QueueIndex};
use crate::timer_wheel::TimerWheel;
use crate::QosError;
use crate::NS_PER_SEC;

/// What a queue is guaranteed (seed 003 Sec. 3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarantee {
    /// A fixed rate for as long as it is bought.
    Strict {
        /// The rate, bits per second.
        rate_bps: u64,
    },
    /// A size to send within a time: the rate is what is left over the time left.
    Dynamic {
        /// Bytes to send.
        total_bytes: u64,
        /// Within this long.
        duration_ns: u64,
    },
    /// Only the small fairness rate, and a share of what is left.
    Fairness,
}

impl Guarantee {
    /// The rate it starts at: a strict rate, a dynamic guarantee's S/T; 0 for fairness.
    pub fn initial_rate_bps(&self) -> u64 {
        match *self {
            Guarantee::Strict { rate_bps } => rate_bps,
            Guarantee::Dynamic { total_bytes, duration_ns } => average_rate_bps(total_bytes, duration_ns) as u64,
            Guarantee::Fairness => 0,
        }
    }
}

/// A dynamic guarantee's S/T in bits per second (seed 003, Sec. 3.2).
pub fn average_rate_bps(total_bytes: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        return 0.0;
    }
    total_bytes as f64 * 8.0 * NS_PER_SEC as f64 / duration_ns as f64
}

/// SoftBW's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftBwConfig {
    /// The link's rate, bits per second.
    pub link_rate_bps: u64,
    /// Bound on the accumulated inter-departure error of a queue and of the link.
    pub tau_max_ns: u64,
    /// The small guarantee of fairness-guarantee queues.
    pub fairness_rate_bps: u64,
    /// How often dynamic guarantees are recomputed (the paper: 1 s).
    pub guarantee_update_ns: u64,
}

impl SoftBwConfig {
    /// The paper's defaults on a link of `link_rate_bps`.
    pub fn new(link_rate_bps: u64) -> Self {
        SoftBwConfig {
            link_rate_bps,
            tau_max_ns: 2_000_000,
            fairness_rate_bps: (link_rate_bps / 1000).max(1),
            guarantee_update_ns: NS_PER_SEC,
        }
    }
}

#[derive(Clone, Debug)]
struct SoftQueue {
    guarantee: Guarantee,
    /// Current guaranteed rate B (for a dynamic guarantee, the expected guarantee b').
    rate_bps: u64,
    ns_per_byte: f64,
    dtau_ns: f64,
    /// 0 means "may send now".
    tts_ns: u64,
    last_departure_ns: Option<u64>,
    guarantee_start_ns: u64,
    sent_bytes_since_start: u64,
    in_eligible: bool,
    in_ring: bool,
}

/// A queue's figures, for reports and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftBwQueueView {
    /// Its guarantee.
    pub guarantee: Guarantee,
    /// The rate its guarantee gives it now.
    pub current_rate_bps: u64,
    /// Its accumulated inter-departure error.
    pub dtau_ns: f64,
    /// Its time-to-send.
    pub tts_ns: u64,
    /// Bytes sent since its guarantee began.
    pub sent_bytes_since_start: u64,
}

/// SoftBW (seed 003): fulfillment-based scheduling of queues onto one link.
pub struct SoftBw<T> {
    config: SoftBwConfig,
    queues: PacketQueues<T>,
    state: Vec<Option<SoftQueue>>,
    /// Backlogged queues whose tts has come, round robin.
    eligible: VecDeque<QueueIndex>,
    /// Backlogged queues whose tts is in the future, by tts.
    deferred: TimerWheel,
    expired: Vec<QueueIndex>,
    /// All backlogged queues, round robin, for residual bandwidth.
    ring: VecDeque<QueueIndex>,
    link_ns_per_byte: f64,
    link_dtau_ns: f64,
    link_last_departure_ns: u64,
    next_guarantee_update_ns: u64,
}

fn ns_per_byte(rate_bps: u64) -> f64 {
    8.0 * NS_PER_SEC as f64 / rate_bps.max(1) as f64
}

impl<T> SoftBw<T> {
    /// A scheduler with no queue, its clock started at `now_ns`.
    pub fn new(config: SoftBwConfig, now_ns: u64) -> Result<Self, QosError> {
        if config.link_rate_bps == 0 {
            return Err(QosError::Unusable("SoftBW needs a positive link rate"));
        }
        Ok(SoftBw {
            config,
            queues: PacketQueues::default(),
            state: Vec::new(),
            eligible: VecDeque::new(),
            deferred: TimerWheel::new(8, 8192, now_ns),
            expired: Vec::new(),
            ring: VecDeque::new(),
            link_ns_per_byte: ns_per_byte(config.link_rate_bps),
            link_dtau_ns: 0.0,
            link_last_departure_ns: now_ns,
            next_guarantee_update_ns: now_ns + config.guarantee_update_ns,
        })
    }

    /// Its settings.
    pub fn config(&self) -> SoftBwConfig {
        self.config
    }

    /// Adds a queue or changes its guarantee (a new dynamic guarantee starts counting now).
    pub fn set_guarantee(
        &mut self,
        queue: QueueIndex,
        guarantee: Guarantee,
        limit_packets: usize,
        now_ns: u64,
    ) -> Result<(), QosError> {
        match guarantee {
            Guarantee::Strict { rate_bps: 0 } => {
                return Err(QosError::Queue { queue, why: "a strict guarantee needs a positive rate" })
            }
            Guarantee::Dynamic { duration_ns: 0, .. } => {
                return Err(QosError::Queue { queue, why: "a dynamic guarantee needs T > 0" })
            }
            _ => {}
        }
        if queue >= self.state.len() {
            self.state.resize(queue + 1, None);
        }
        let fresh = SoftQueue {
            guarantee,
            rate_bps: 0,
            ns_per_byte: 0.0,
            dtau_ns: 0.0,
            tts_ns: 0,
            last_departure_ns: None,
            guarantee_start_ns: now_ns,
            sent_bytes_since_start: 0,
            in_eligible: false,
            in_ring: false,
        };
        let q = self.state[queue].get_or_insert(fresh);
        q.guarantee = guarantee;
        q.guarantee_start_ns = now_ns;
        q.sent_bytes_since_start = 0;
        self.queues.add(queue, limit_packets);
        self.refresh_rate(queue, now_ns);
        Ok(())
    }

    /// Changes how many packets a queue holds, keeping its guarantee and state.
    pub fn set_limit(&mut self, queue: QueueIndex, limit_packets: usize) {
        if self.queues.contains(queue) {
            self.queues.add(queue, limit_packets);
        }
    }

    /// Removes a queue; returns the packets it held, with their lengths.
    pub fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        if let Some(slot) = self.state.get_mut(queue) {
            *slot = None;
        }
        self.eligible.retain(|&q| q != queue);
        self.ring.retain(|&q| q != queue);
        self.deferred.remove(queue);
        self.queues.remove(queue)
    }

    /// A queue's figures (`None`: no such queue).
    pub fn view(&self, queue: QueueIndex) -> Option<SoftBwQueueView> {
        let q = self.state.get(queue)?.as_ref()?;
        Some(SoftBwQueueView {
            guarantee: q.guarantee,
            current_rate_bps: q.rate_bps,
            dtau_ns: q.dtau_ns,
            tts_ns: q.tts_ns,
            sent_bytes_since_start: q.sent_bytes_since_start,
        })
    }

    /// Recomputes every dynamic guarantee now (done by dequeue every `guarantee_update_ns`).
    pub fn update_guarantees(&mut self, now_ns: u64) {
        for queue in 0..self.state.len() {
            if matches!(&self.state[queue], Some(q) if matches!(q.guarantee, Guarantee::Dynamic { .. })) {
                self.refresh_rate(queue, now_ns);
            }
        }
    }

    fn refresh_rate(&mut self, queue: QueueIndex, now_ns: u64) {
        let fairness = self.config.fairness_rate_bps;
        let q = self.state[queue].as_mut().expect("known queue");
        q.rate_bps = match q.guarantee {
            Guarantee::Strict { rate_bps } => rate_bps,
            Guarantee::Fairness => fairness,
            Guarantee::Dynamic { total_bytes, duration_ns } => {
                let elapsed = now_ns.saturating_sub(q.guarantee_start_ns);
                let remaining_bytes = total_bytes.saturating_sub(q.sent_bytes_since_start);
                if remaining_bytes == 0 || elapsed >= duration_ns {
                    fairness
                } else {
                    let initial = total_bytes as f64 * 8.0 * NS_PER_SEC as f64 / duration_ns as f64;
                    let expected = remaining_bytes as f64 * 8.0 * NS_PER_SEC as f64 / (duration_ns - elapsed) as f64;
                    (expected.min(initial) as u64).max(fairness)
                }
            }
        };
        q.ns_per_byte = ns_per_byte(q.rate_bps);
    }

    /// Files a backlogged queue under eligible or deferred, and in the residual ring.
    fn place(&mut self, queue: QueueIndex, now_ns: u64) {
        let q = self.state[queue].as_mut().expect("known queue");
        if !q.in_ring {
            q.in_ring = true;
            self.ring.push_back(queue);
        }
        if q.tts_ns == 0 || q.tts_ns <= now_ns {
            self.deferred.remove(queue);
            if !q.in_eligible {
                q.in_eligible = true;
                self.eligible.push_back(queue);
            }
        } else if !q.in_eligible && !self.deferred.contains(queue) {
            self.deferred.insert(q.tts_ns, queue);
        }
    }

    /// Eqs. 4-6 for the queue after a departure its guarantee paid for, and the same
    /// accumulation for the link after every departure.
    ///
    /// Reading taken: a departure from the residual (step 2 of `dequeue`) moves neither the
    /// queue's error nor its time-to-send. Counted against the guarantee, each residual
    /// departure would push the next guaranteed one back by p / B, so a VM with the larger
    /// guarantee would be held at exactly it while its neighbour took the whole residual,
    /// not Sec. 5's equal shares of the rest (`docs/deviations.md` row 26).
    fn record_departure(&mut self, queue: QueueIndex, len_bytes: u32, now_ns: u64, guaranteed: bool) {
        let tau_max = self.config.tau_max_ns as f64;
        let q = self.state[queue].as_mut().expect("known queue");
        q.sent_bytes_since_start += u64::from(len_bytes);
        if guaranteed {
            let expected_ns = f64::from(len_bytes) * q.ns_per_byte;
            let tau_ns = q.last_departure_ns.map_or(expected_ns, |last| now_ns.saturating_sub(last) as f64);
            let previous = q.dtau_ns;
            q.dtau_ns = (previous + tau_ns - expected_ns).clamp(-tau_max, tau_max);
            q.tts_ns = if q.dtau_ns >= 0.0 {
                0
            } else if previous > 0.0 {
                (now_ns as f64 + expected_ns - previous).max(1.0) as u64
            } else {
                now_ns + expected_ns as u64
            };
            q.last_departure_ns = Some(now_ns);
        }

        let link_tau = now_ns.saturating_sub(self.link_last_departure_ns) as f64;
        self.link_dtau_ns =
            (self.link_dtau_ns + link_tau - f64::from(len_bytes) * self.link_ns_per_byte).clamp(-tau_max, tau_max);
        self.link_last_departure_ns = now_ns;
    }

    /// True when sending `len_bytes` now keeps the link at or under its rate.
    fn link_has_residual(&self, len_bytes: u32, now_ns: u64) -> bool {
        let idle = now_ns.saturating_sub(self.link_last_departure_ns) as f64;
        self.link_dtau_ns + idle - f64::from(len_bytes) * self.link_ns_per_byte >= 0.0
    }

    fn send(&mut self, queue: QueueIndex, now_ns: u64, guaranteed: bool) -> Dequeued<T> {
        let (len_bytes, item) = self.queues.pop(queue).expect("backlogged queue");
        self.record_departure(queue, len_bytes, now_ns, guaranteed);
        if self.queues.is_backlogged(queue) {
            self.place(queue, now_ns);
        }
        Dequeued { queue, len_bytes, item }
    }
}

impl<T> EgressScheduler<T> for SoftBw<T> {
    fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, now_ns: u64) -> Result<(), T> {
        if self.queues.push(queue, len_bytes, item)? {
            self.place(queue, now_ns);
        }
        Ok(())
    }

    fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued<T>> {
        if now_ns >= self.next_guarantee_update_ns {
            self.update_guarantees(now_ns);
            self.next_guarantee_update_ns = now_ns + self.config.guarantee_update_ns;
        }
        // Queues whose tts has come join the eligible round robin.
        if !self.deferred.is_empty() {
            self.deferred.expire(now_ns, &mut self.expired);
            let mut expired = std::mem::take(&mut self.expired);
            for &queue in &expired {
                if matches!(self.state.get(queue), Some(Some(_))) && self.queues.is_backlogged(queue) {
                    self.place(queue, now_ns);
                }
            }
            expired.clear();
            self.expired = expired;
        }
        // 1. A queue below its guarantee (tts = 0 or passed).
        while let Some(queue) = self.eligible.pop_front() {
            let Some(Some(q)) = self.state.get_mut(queue) else { continue };
            q.in_eligible = false;
            if !self.queues.is_backlogged(queue) {
                continue;
            }
            if q.tts_ns != 0 && q.tts_ns > now_ns {
                self.place(queue, now_ns);
                continue;
            }
            return Some(self.send(queue, now_ns, true));
        }
        // 2. Residual link capacity, shared round robin among all backlogged queues.
        while let Some(&queue) = self.ring.front() {
            let Some(len) = self.queues.head_len(queue) else {
                self.ring.pop_front();
                if let Some(Some(q)) = self.state.get_mut(queue) {
                    q.in_ring = false;
                }
                continue;
            };
            if !self.link_has_residual(len, now_ns) {
                return None;
            }
            self.ring.pop_front();
            self.state[queue].as_mut().expect("ring queue").in_ring = false;
            return Some(self.send(queue, now_ns, false));
        }
        None
    }

    fn dequeue_from(&mut self, queue: QueueIndex, now_ns: u64) -> Option<Dequeued<T>> {
        if !matches!(self.state.get(queue), Some(Some(_))) || !self.queues.is_backlogged(queue) {
            return None;
        }
        // A departure its guarantee paid for (Eqs. 4-6): it moves the queue's error and
        // time-to-send, so a VM that goes ahead waits that much longer for its next turn.
        Some(self.send(queue, now_ns, true))
    }

    fn queues(&self) -> &PacketQueues<T> {
        &self.queues
    }

    fn drop_head(&mut self, queue: QueueIndex) -> Option<(u32, T)> {
        // The round robins skip a queue found empty.
        self.queues.pop(queue)
    }
}
