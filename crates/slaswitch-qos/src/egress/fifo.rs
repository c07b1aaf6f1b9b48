//! First in, first out across all VMs: what a NIC's single transmit queue does, and the
//! baseline every link scheduler is compared with. Each VM still has its own bounded queue, so
//! a full queue drops that VM's frames and no one else's; only the order is shared.

use std::collections::VecDeque;

use super::{Dequeued, EgressScheduler, PacketQueues, QueueIndex};

/// One shared arrival order over per-VM queues.
pub struct Fifo<T> {
    queues: PacketQueues<T>,
    /// The queue of every packet waiting, in arrival order.
    order: VecDeque<QueueIndex>,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo { queues: PacketQueues::default(), order: VecDeque::new() }
    }
}

impl<T> Fifo<T> {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a queue or changes its limit.
    pub fn set_queue(&mut self, queue: QueueIndex, limit_packets: usize) {
        self.queues.add(queue, limit_packets);
    }

    /// Removes a queue; returns its packets with their lengths.
    pub fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        self.order.retain(|&q| q != queue);
        self.queues.remove(queue)
    }
}

impl<T> EgressScheduler<T> for Fifo<T> {
    fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, _now_ns: u64) -> Result<(), T> {
        self.queues.push(queue, len_bytes, item)?;
        self.order.push_back(queue);
        Ok(())
    }

    fn dequeue(&mut self, _now_ns: u64) -> Option<Dequeued<T>> {
        while let Some(queue) = self.order.pop_front() {
            // A head drop leaves one entry more than packets; it is skipped here.
            if let Some((len_bytes, item)) = self.queues.pop(queue) {
                return Some(Dequeued { queue, len_bytes, item });
            }
        }
        None
    }

    fn dequeue_from(&mut self, queue: QueueIndex, _now_ns: u64) -> Option<Dequeued<T>> {
        // Its entry in the order stays and is skipped when found empty, as after a head drop.
        let (len_bytes, item) = self.queues.pop(queue)?;
        Some(Dequeued { queue, len_bytes, item })
    }

    fn queues(&self) -> &PacketQueues<T> {
        &self.queues
    }

    fn drop_head(&mut self, queue: QueueIndex) -> Option<(u32, T)> {
        // The order keeps an entry for it, skipped when found empty.
        self.queues.pop(queue)
    }
}
