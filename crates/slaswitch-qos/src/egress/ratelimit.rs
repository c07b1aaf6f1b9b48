//! Per-VM rate limits recomputed from measured demand, in front of the NIC's first-in,
//! first-out queue: the ElasticSwitch-style baseline SoftBW is measured against (seed 003
//! Sec. 6; Popa et al., SIGCOMM 2013).
//!
//! Every period (50 ms by default) each VM's demand is estimated from what passed its limiter:
//! its measured rate, or, when it was held back by its limit, 1.5 times its limit (it wants
//! more; this is how a limit grows). The link is then split as ElasticSwitch's rate allocation
//! does: each VM gets its demand up to its guarantee, what remains is shared in proportion to
//! the guarantees up to each demand, and the link's spare capacity is spread over all VMs by
//! the same weights as headroom. A VM's limit is never below its guarantee.
//!
//! Between recomputations a token bucket per VM (1 ms deep at its limit) releases its frames
//! into one shared queue, sent first in, first out: the limits decide how much each VM may
//! send, the arrival order who goes first. So when every VM is under its limit (guarantees that
//! over-commit the link), VMs share the link as their flows do, not as their guarantees say
//! (seed 003 Fig. 8); and a flow that starts mid-period runs at its old limit until the next
//! period (Fig. 7). Both are the weaknesses SoftBW's per-packet scheduling removes.

use std::collections::VecDeque;

use super::fill::{weighted_fill, Claim};
use super::{Dequeued, EgressScheduler, PacketQueues, QueueIndex};
use crate::timer_wheel::TimerWheel;
use crate::NS_PER_SEC;

/// How much more than its limit a held-back VM is assumed to want.
const GROWTH: f64 = 1.5;

/// The baseline's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// The link's rate, bits per second.
    pub link_rate_bps: u64,
    /// How often limits are recomputed (ElasticSwitch-style: 50 ms).
    pub period_ns: u64,
    /// A limit's bucket depth, in time at the limit.
    pub burst_ns: u64,
}

impl RateLimitConfig {
    /// 50 ms periods and 1 ms buckets on a link of `link_rate_bps`.
    pub fn new(link_rate_bps: u64) -> Self {
        RateLimitConfig { link_rate_bps, period_ns: 50_000_000, burst_ns: 1_000_000 }
    }
}

#[derive(Clone, Debug)]
struct Limited {
    guarantee_bps: u64,
    limit_bps: f64,
    demand_bps: f64,
    tokens_bytes: f64,
    last_refill_ns: u64,
    /// Its oldest frames that passed the limiter and wait in the shared queue.
    released: usize,
    released_bytes_in_period: u64,
    /// Held back by its limit at some point in this period.
    throttled: bool,
}

/// A VM's figures, for reports and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimitView {
    /// Its guarantee.
    pub guarantee_bps: u64,
    /// Its limit in this period.
    pub limit_bps: f64,
    /// The demand the limit was computed from.
    pub demand_bps: f64,
}

/// ElasticSwitch-style per-VM rate limiting in front of one FIFO link.
pub struct RateLimit<T> {
    config: RateLimitConfig,
    queues: PacketQueues<T>,
    state: Vec<Option<Limited>>,
    /// The VM of every frame that passed its limiter, in the order they passed: the NIC queue.
    order: VecDeque<QueueIndex>,
    /// VMs whose limiter holds frames, by when their bucket will let the next one through
    /// (256 ns slots: a dequeue costs O(1), not a scan of the VMs).
    waiting: TimerWheel,
    fired: Vec<QueueIndex>,
    period_start_ns: u64,
}

impl<T> RateLimit<T> {
    /// No VM yet, the first period starting at `now_ns`.
    pub fn new(config: RateLimitConfig, now_ns: u64) -> Result<Self, crate::QosError> {
        if config.link_rate_bps == 0 || config.period_ns == 0 {
            return Err(crate::QosError::Unusable("rate limiting needs a positive link rate and period"));
        }
        Ok(RateLimit {
            config,
            queues: PacketQueues::default(),
            state: Vec::new(),
            order: VecDeque::new(),
            waiting: TimerWheel::new(8, 8192, now_ns),
            fired: Vec::new(),
            period_start_ns: now_ns,
        })
    }

    /// Its settings.
    pub fn config(&self) -> RateLimitConfig {
        self.config
    }

    /// Adds a VM or changes its guarantee (0: none, it lives on the spare capacity). A new VM
    /// starts limited to its guarantee, or to an equal share of the link without one.
    pub fn set_guarantee(&mut self, queue: QueueIndex, guarantee_bps: u64, limit_packets: usize, now_ns: u64) {
        if queue >= self.state.len() {
            self.state.resize(queue + 1, None);
        }
        let vms = self.state.iter().flatten().count() as f64 + 1.0;
        let start = (guarantee_bps as f64).max(self.config.link_rate_bps as f64 / vms);
        let vm = self.state[queue].get_or_insert(Limited {
            guarantee_bps,
            limit_bps: start,
            demand_bps: 0.0,
            tokens_bytes: 0.0,
            last_refill_ns: now_ns,
            released: 0,
            released_bytes_in_period: 0,
            throttled: false,
        });
        vm.guarantee_bps = guarantee_bps;
        vm.limit_bps = vm.limit_bps.max(guarantee_bps as f64);
        self.queues.add(queue, limit_packets);
    }

    /// Removes a VM; returns its packets with their lengths.
    pub fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        if let Some(slot) = self.state.get_mut(queue) {
            *slot = None;
        }
        self.order.retain(|&q| q != queue);
        self.waiting.remove(queue);
        self.queues.remove(queue)
    }

    /// A VM's figures (`None`: no such VM).
    pub fn view(&self, queue: QueueIndex) -> Option<RateLimitView> {
        let v = self.state.get(queue)?.as_ref()?;
        Some(RateLimitView { guarantee_bps: v.guarantee_bps, limit_bps: v.limit_bps, demand_bps: v.demand_bps })
    }

    /// Recomputes every limit from the period that ends at `now_ns`.
    pub fn recompute(&mut self, now_ns: u64) {
        let elapsed_ns = now_ns.saturating_sub(self.period_start_ns).max(1) as f64;
        let link = self.config.link_rate_bps as f64;
        let indices: Vec<QueueIndex> = (0..self.state.len()).filter(|&i| self.state[i].is_some()).collect();
        let mut claims = Vec::with_capacity(indices.len());
        for &i in &indices {
            let v = self.state[i].as_mut().expect("listed");
            let measured = v.released_bytes_in_period as f64 * 8.0 * NS_PER_SEC as f64 / elapsed_ns;
            v.demand_bps = if v.throttled { measured.max(v.limit_bps) * GROWTH } else { measured }.min(link);
            // A VM without a guarantee weighs as SoftBW's fairness rate does (a thousandth).
            let weight = v.guarantee_bps.max(self.config.link_rate_bps / 1000).max(1) as f64;
            claims.push(Claim { weight, floor: (v.guarantee_bps as f64).min(v.demand_bps), ceiling: v.demand_bps });
            v.released_bytes_in_period = 0;
            v.throttled = false;
        }
        let shares = weighted_fill(&claims, link);
        let spare = (link - shares.iter().sum::<f64>()).max(0.0);
        let total_weight: f64 = claims.iter().map(|c| c.weight).sum();
        for ((&i, share), claim) in indices.iter().zip(shares).zip(&claims) {
            let v = self.state[i].as_mut().expect("listed");
            let headroom = if total_weight > 0.0 { spare * claim.weight / total_weight } else { 0.0 };
            v.limit_bps = (share + headroom).max(v.guarantee_bps as f64);
        }
        self.period_start_ns = now_ns;
        // A held VM's wait was computed at its old limit.
        for i in indices {
            if self.waiting.remove(i) {
                if let Some(due) = self.release(i, now_ns) {
                    self.waiting.insert(due, i);
                }
            }
        }
    }

    /// Lets VM `queue`'s held frames through its limiter as far as its tokens go; when frames
    /// are still held, returns when its bucket will let the next one through.
    fn release(&mut self, queue: QueueIndex, now_ns: u64) -> Option<u64> {
        let burst_ns = self.config.burst_ns as f64;
        let Some(Some(v)) = self.state.get_mut(queue) else { return None };
        let elapsed = now_ns.saturating_sub(v.last_refill_ns) as f64;
        v.last_refill_ns = now_ns;
        let rate_bytes_per_ns = v.limit_bps / 8.0 / NS_PER_SEC as f64;
        let mut depth = rate_bytes_per_ns * burst_ns;
        v.tokens_bytes += rate_bytes_per_ns * elapsed;
        while let Some(len) = self.queues.len_at(queue, v.released) {
            // A bucket always holds at least the frame at its head.
            depth = depth.max(f64::from(len));
            if v.tokens_bytes < f64::from(len) {
                v.tokens_bytes = v.tokens_bytes.min(depth);
                v.throttled = true;
                let wait_ns = (f64::from(len) - v.tokens_bytes) / rate_bytes_per_ns.max(1e-12);
                return Some(now_ns + wait_ns.min(NS_PER_SEC as f64).ceil() as u64);
            }
            v.tokens_bytes -= f64::from(len);
            v.released += 1;
            v.released_bytes_in_period += u64::from(len);
            self.order.push_back(queue);
        }
        v.tokens_bytes = v.tokens_bytes.min(depth);
        None
    }
}

impl<T> EgressScheduler<T> for RateLimit<T> {
    fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, now_ns: u64) -> Result<(), T> {
        self.queues.push(queue, len_bytes, item)?;
        if !self.waiting.contains(queue) {
            if let Some(due) = self.release(queue, now_ns) {
                self.waiting.insert(due, queue);
            }
        }
        Ok(())
    }

    fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued<T>> {
        if now_ns >= self.period_start_ns + self.config.period_ns {
            self.recompute(now_ns);
        }
        if !self.waiting.is_empty() {
            let mut fired = std::mem::take(&mut self.fired);
            self.waiting.expire(now_ns, &mut fired);
            for &queue in &fired {
                if let Some(due) = self.release(queue, now_ns) {
                    self.waiting.insert(due, queue);
                }
            }
            fired.clear();
            self.fired = fired;
        }
        while let Some(queue) = self.order.pop_front() {
            let Some(Some(v)) = self.state.get_mut(queue) else { continue };
            if v.released == 0 {
                continue; // its frame was dropped from the head
            }
            v.released -= 1;
            let (len_bytes, item) = self.queues.pop(queue).expect("a released frame waits");
            return Some(Dequeued { queue, len_bytes, item });
        }
        None
    }

    fn dequeue_from(&mut self, queue: QueueIndex, _now_ns: u64) -> Option<Dequeued<T>> {
        // Only a frame its limiter released: a latency class here is a priority queue of the
        // NIC behind the limiters, so it reorders the NIC's queue and never passes a limit.
        let v = self.state.get_mut(queue)?.as_mut()?;
        if v.released == 0 {
            return None;
        }
        // An entry of the order now stands for a later frame of the same VM.
        v.released -= 1;
        let (len_bytes, item) = self.queues.pop(queue).expect("a released frame waits");
        Some(Dequeued { queue, len_bytes, item })
    }

    fn queues(&self) -> &PacketQueues<T> {
        &self.queues
    }

    fn drop_head(&mut self, queue: QueueIndex) -> Option<(u32, T)> {
        let dropped = self.queues.pop(queue)?;
        if let Some(Some(v)) = self.state.get_mut(queue) {
            // The oldest frame was released if any was; its entry in the order is skipped.
            v.released = v.released.saturating_sub(1);
        }
        Some(dropped)
    }
}
