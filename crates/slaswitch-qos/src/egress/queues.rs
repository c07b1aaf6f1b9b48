//! Per-queue packet FIFOs shared by every egress scheduler: a bounded FIFO of (length, item)
//! per queue, plus packet and byte backlog counters.

use std::collections::VecDeque;

use super::QueueIndex;

#[derive(Debug)]
struct Fifo<T> {
    packets: VecDeque<(u32, T)>,
    backlog_bytes: u64,
    limit_packets: usize,
}

/// FIFO packet queues by index, with their backlogs: what every egress scheduler holds.
#[derive(Debug)]
pub struct PacketQueues<T> {
    queues: Vec<Option<Fifo<T>>>,
    backlog_packets: usize,
}

impl<T> Default for PacketQueues<T> {
    fn default() -> Self {
        PacketQueues { queues: Vec::new(), backlog_packets: 0 }
    }
}

impl<T> PacketQueues<T> {
    /// True when `queue` exists.
    pub fn contains(&self, queue: QueueIndex) -> bool {
        matches!(self.queues.get(queue), Some(Some(_)))
    }

    /// Creates a queue that holds at most `limit_packets`; an existing queue keeps its packets.
    pub fn add(&mut self, queue: QueueIndex, limit_packets: usize) {
        if queue >= self.queues.len() {
            self.queues.resize_with(queue + 1, || None);
        }
        match &mut self.queues[queue] {
            Some(fifo) => fifo.limit_packets = limit_packets,
            slot => *slot = Some(Fifo { packets: VecDeque::new(), backlog_bytes: 0, limit_packets }),
        }
    }

    /// Removes a queue and hands back its packets, oldest first, with their lengths, so the
    /// caller can free them or queue them elsewhere.
    pub fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        match self.queues.get_mut(queue).and_then(Option::take) {
            Some(fifo) => {
                self.backlog_packets -= fifo.packets.len();
                fifo.packets.into()
            }
            None => Vec::new(),
        }
    }

    /// The queue's packet limit (0 for a queue that does not exist).
    pub fn limit(&self, queue: QueueIndex) -> usize {
        self.queues.get(queue).and_then(|q| q.as_ref()).map_or(0, |f| f.limit_packets)
    }

    /// Pushes a packet; true when the queue went from empty to non-empty.
    #[inline]
    pub fn push(&mut self, queue: QueueIndex, len_bytes: u32, item: T) -> Result<bool, T> {
        let Some(Some(fifo)) = self.queues.get_mut(queue) else { return Err(item) };
        if fifo.packets.len() >= fifo.limit_packets {
            return Err(item);
        }
        let was_empty = fifo.packets.is_empty();
        fifo.packets.push_back((len_bytes, item));
        fifo.backlog_bytes += u64::from(len_bytes);
        self.backlog_packets += 1;
        Ok(was_empty)
    }

    /// The queue's oldest packet and its length.
    #[inline]
    pub fn pop(&mut self, queue: QueueIndex) -> Option<(u32, T)> {
        let fifo = self.queues.get_mut(queue)?.as_mut()?;
        let (len, item) = fifo.packets.pop_front()?;
        fifo.backlog_bytes -= u64::from(len);
        self.backlog_packets -= 1;
        Some((len, item))
    }

    /// Length of the packet at the head of the queue.
    #[inline]
    pub fn head_len(&self, queue: QueueIndex) -> Option<u32> {
        self.queues.get(queue)?.as_ref()?.packets.front().map(|&(len, _)| len)
    }

    /// Length of the queue's `index`-th oldest packet.
    #[inline]
    pub fn len_at(&self, queue: QueueIndex, index: usize) -> Option<u32> {
        self.queues.get(queue)?.as_ref()?.packets.get(index).map(|&(len, _)| len)
    }

    /// True when the queue holds a packet.
    #[inline]
    pub fn is_backlogged(&self, queue: QueueIndex) -> bool {
        self.head_len(queue).is_some()
    }

    /// (packets, bytes) queued in one queue.
    pub fn backlog(&self, queue: QueueIndex) -> (usize, u64) {
        self.queues.get(queue).and_then(|q| q.as_ref()).map_or((0, 0), |f| (f.packets.len(), f.backlog_bytes))
    }

    /// Packets waiting in all queues.
    pub fn backlog_packets(&self) -> usize {
        self.backlog_packets
    }

    /// Indices of all existing queues.
    pub fn indices(&self) -> impl Iterator<Item = QueueIndex> + '_ {
        self.queues.iter().enumerate().filter(|(_, q)| q.is_some()).map(|(i, _)| i)
    }
}
