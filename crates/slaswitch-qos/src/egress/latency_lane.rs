//! Ours, beyond the seeds: a latency class on the link. A latency-class VM's frames go onto
//! the link ahead of whatever the link's scheduler would send next, as long as they stay
//! within that VM's purchase; beyond it they wait their turn like anyone's.
//!
//! Why: the schedulers of seeds 002-004 share bandwidth and say nothing of order, so a light
//! VM's frame waits behind the bulk credits of its neighbours (seed 003 Sec. 5's round robin
//! visits every backlogged queue; ANCS's visits spend a slice of a period's credit). HBS gives
//! the top classes the PMD first (seed 000 Sec. IV-B); this gives them the wire first, as a
//! DiffServ expedited-forwarding queue does: strict priority, policed at the purchased rate so
//! it cannot starve the rest.
//!
//! The lane holds no frames: it only picks whose head goes next, and the scheduler in force
//! sends it with [`EgressScheduler::dequeue_from`], which accounts it as its own departure.
//! So a VM's frames never overtake each other, and the lane changes who goes first, not what
//! anyone gets: ANCS's credits, SoftBW's errors and (S, T) bytes and PIE-VDE's deficits count
//! the frames that went ahead (a VM whose purchase exceeds its PIE-VDE weight's share gets its
//! purchase). The rate-limit baseline's lane is a priority queue of the NIC behind its
//! limiters: only frames a limiter released go ahead, and since its limits may add up to more
//! than the link, the order the lane changes there does move shares, as it would on that
//! baseline's NIC.

use super::{Dequeued, EgressScheduler, QueueIndex};
use crate::meter::TokenBucket;
use crate::NS_PER_SEC;

/// How far ahead of its rate a VM may be and still go first.
pub const LANE_BURST_NS: u64 = 1_000_000;
/// The lane's depth is at least this many bytes: two of the largest frames on the wire.
pub const MIN_LANE_BURST_BYTES: u64 = 2 * 1538;

/// One VM in the lane.
#[derive(Clone, Debug)]
struct LaneVm {
    queue: QueueIndex,
    /// Its purchase, wire bytes.
    bucket: TokenBucket,
}

/// The latency-class VMs of one link, each policed at its purchase.
#[derive(Clone, Debug, Default)]
pub struct LatencyLane {
    vms: Vec<LaneVm>,
    /// Where the next look starts, so lane VMs take turns.
    next: usize,
    /// Frames sent ahead, all VMs.
    sent_ahead: u64,
}

/// The depth of a lane of `rate_bps`.
pub fn lane_burst_bytes(rate_bps: u64) -> u64 {
    ((u128::from(rate_bps) * u128::from(LANE_BURST_NS) / 8 / u128::from(NS_PER_SEC)) as u64).max(MIN_LANE_BURST_BYTES)
}

impl LatencyLane {
    /// Puts VM `queue` in the lane at `rate_bps` (wire bits/s), or changes its rate, keeping
    /// what it has earned; `None` takes it out.
    pub fn set(&mut self, queue: QueueIndex, rate_bps: Option<u64>, now_ns: u64) {
        let at = self.vms.iter().position(|v| v.queue == queue);
        match (at, rate_bps.filter(|&r| r > 0)) {
            (Some(i), Some(rate_bps)) => {
                self.vms[i].bucket.set_rate(rate_bps / 8, lane_burst_bytes(rate_bps), now_ns);
            }
            (None, Some(rate_bps)) => {
                let bucket = TokenBucket::new(rate_bps / 8, lane_burst_bytes(rate_bps), now_ns);
                self.vms.push(LaneVm { queue, bucket });
            }
            (Some(i), None) => {
                self.vms.remove(i);
            }
            (None, None) => {}
        }
    }

    /// True when no VM is in the lane.
    pub fn is_empty(&self) -> bool {
        self.vms.is_empty()
    }

    /// Frames sent ahead so far.
    pub fn sent_ahead(&self) -> u64 {
        self.sent_ahead
    }

    /// The next frame of a lane VM that is waiting and within its purchase, sent through
    /// `sched` (which accounts it); `None` when no lane VM may go ahead now.
    pub fn dequeue<T>(&mut self, sched: &mut dyn EgressScheduler<T>, now_ns: u64) -> Option<Dequeued<T>> {
        let n = self.vms.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let vm = &mut self.vms[i];
            let Some(len) = sched.queues().head_len(vm.queue) else { continue };
            vm.bucket.refill(now_ns);
            if !vm.bucket.has(u64::from(len)) {
                continue;
            }
            let Some(d) = sched.dequeue_from(vm.queue, now_ns) else { continue };
            vm.bucket.take(u64::from(len));
            self.next = (i + 1) % n;
            self.sent_ahead += 1;
            return Some(d);
        }
        None
    }
}
