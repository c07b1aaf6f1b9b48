//! The bandwidth decision point: which queued packet goes next onto a shared link.
//!
//! The data plane enqueues each packet (its length and an opaque item, e.g. an mbuf pointer) into
//! its VM's queue and dequeues while the link has room. Every scheduler implements
//! [`EgressScheduler`], so the paced port can carry any of them.
//! * [`ancs::Ancs`]: credits per accounting period by weight, min, max, work-conserving
//!   redistribution (seed 002 Sec. 3).
//! * [`softbw::SoftBw`]: fulfillment-based round robin with time-to-send (seed 003 Sec. 5).
//! * [`pievde::PieVde`]: VTRR among tenants by weight, then fair among each tenant's VMs
//!   (seed 004 Sec. IV).
//! * [`fifo::Fifo`]: first in, first out, what a plain NIC queue does (the baseline).
//! * [`ratelimit::RateLimit`]: per-VM rate limits recomputed from measured demand, the
//!   ElasticSwitch-style baseline SoftBW is compared against (seed 003 Sec. 6).
//!
//! [`link_scheduler::LinkScheduler`] holds any one of them for a paced port, with every VM's
//! settings for all of them, so the scheduler can be swapped live without losing a packet.

pub mod ancs;
pub mod fifo;
pub mod fill;
pub mod latency_lane;
pub mod link_scheduler;
pub mod pievde;
pub mod queues;
pub mod ratelimit;
pub mod softbw;
pub mod softbw_fluid;
pub mod vtrr;

pub use queues::PacketQueues;

/// A queue's index: small and dense, chosen by the data plane (one per VM port).
pub type QueueIndex = usize;

/// A packet handed back by [`EgressScheduler::dequeue`].
#[derive(Debug, PartialEq, Eq)]
pub struct Dequeued<T> {
    /// The queue it came from.
    pub queue: QueueIndex,
    /// Its length in bytes.
    pub len_bytes: u32,
    /// The caller's handle of the packet.
    pub item: T,
}

/// A scheduler of packets onto one link (ANCS, SoftBW, PIE-VDE): queue, dequeue, clock passed in.
pub trait EgressScheduler<T> {
    /// Queues a packet; gives it back when the queue is full or unknown (the caller drops it).
    fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, now_ns: u64) -> Result<(), T>;
    /// The next packet to transmit now, or `None` if none may go now.
    fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued<T>>;
    /// Sends `queue`'s oldest packet now, ahead of the scheduler's own choice, and accounts it
    /// as the scheduler accounts its own departures (credit, error, deficit, tokens): how the
    /// link's latency class ([`latency_lane`]) changes who goes first without changing anyone's
    /// share. `None` when the queue is empty or unknown.
    fn dequeue_from(&mut self, queue: QueueIndex, now_ns: u64) -> Option<Dequeued<T>>;
    /// The packets waiting.
    fn queues(&self) -> &PacketQueues<T>;
    /// Packets queued across all queues.
    fn backlog_packets(&self) -> usize {
        self.queues().backlog_packets()
    }
    /// (packets, bytes) queued in one queue.
    fn queue_backlog(&self, queue: QueueIndex) -> (usize, u64) {
        self.queues().backlog(queue)
    }
    /// Takes the oldest packet of `queue` out without sending it: how a head-drop policy makes
    /// room for a new one.
    fn drop_head(&mut self, queue: QueueIndex) -> Option<(u32, T)>;
}
