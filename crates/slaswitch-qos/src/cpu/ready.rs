//! HBS's ready queues (seed 000 Sec. IV-B-1): one FIFO per priority class, and a bitmask of
//! the non-empty ones so the highest is found in one instruction.
//!
//! The FIFOs are rings side by side in one buffer owned by the scheduler, not lists through the
//! ports' records: taking the head then touches the ring's line and not the port's record, which
//! every batch has evicted from the caches by the time the PMD decides again (the overhead
//! measurement). An entry holds the port and the TSC before which it may not run (0: at once;
//! see the deferred parking in [`super::hbs`]) and whether it already went round once early,
//! so deciding whether the head may run reads the line the head came from and no other. Each
//! ring holds every port the scheduler may have, since a port is in at most one queue.

use super::PortIndex;

/// HBS's priority classes.
pub const PRIORITY_CLASSES: usize = 8;

/// A queued port and when it may run (0: at once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) due_tsc: u64,
    pub(crate) port: u16,
    /// It reached the head once before its due time and went to the back.
    pub(crate) rotated: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct ReadyQueues {
    /// Class c's ring is `ring[c * capacity .. (c + 1) * capacity]`.
    ring: Vec<Entry>,
    /// Ports a ring holds: a power of two.
    capacity: usize,
    head: [u16; PRIORITY_CLASSES],
    len: [u16; PRIORITY_CLASSES],
    /// Bit c set when class c+1's queue is non-empty.
    mask: u8,
}

impl Default for ReadyQueues {
    fn default() -> Self {
        ReadyQueues {
            ring: vec![Entry::default(); 8 * PRIORITY_CLASSES],
            capacity: 8,
            head: [0; PRIORITY_CLASSES],
            len: [0; PRIORITY_CLASSES],
            mask: 0,
        }
    }
}

impl ReadyQueues {
    /// Largest port index the queues can hold.
    pub(crate) const MAX_PORT: PortIndex = u16::MAX as PortIndex - 1;

    /// Makes room for port indices below `ports` (configuration time: rebuilds the rings).
    pub(crate) fn reserve(&mut self, ports: usize) {
        if ports <= self.capacity {
            return;
        }
        let capacity = ports.next_power_of_two();
        let mut ring = vec![Entry::default(); capacity * PRIORITY_CLASSES];
        for class in 0..PRIORITY_CLASSES {
            for i in 0..usize::from(self.len[class]) {
                ring[class * capacity + i] = self.ring[self.at(class, i)];
            }
            self.head[class] = 0;
        }
        self.ring = ring;
        self.capacity = capacity;
    }

    /// Index in `ring` of the i-th port of a class's queue.
    #[inline]
    fn at(&self, class: usize, i: usize) -> usize {
        class * self.capacity + ((usize::from(self.head[class]) + i) & (self.capacity - 1))
    }

    /// The highest non-empty class (0 = class 1), if any.
    #[inline]
    pub(crate) fn highest(&self) -> Option<usize> {
        (self.mask != 0).then(|| self.mask.trailing_zeros() as usize)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// Appends a port that may run from `due_tsc` on (it must be in no queue, and below the
    /// reserved count).
    #[inline]
    pub(crate) fn push_back(&mut self, class: usize, port: PortIndex, due_tsc: u64) {
        self.push_entry(class, Entry { due_tsc, port: port as u16, rotated: false });
    }

    #[inline]
    pub(crate) fn push_entry(&mut self, class: usize, entry: Entry) {
        debug_assert!(usize::from(self.len[class]) < self.capacity, "reserve() was not called");
        let at = self.at(class, usize::from(self.len[class]));
        self.ring[at] = entry;
        self.len[class] += 1;
        self.mask |= 1 << class;
    }

    /// Takes the head of a non-empty class.
    #[inline]
    pub(crate) fn pop_front(&mut self, class: usize) -> Entry {
        debug_assert!(self.len[class] > 0, "pop from an empty class");
        let entry = self.ring[self.at(class, 0)];
        self.head[class] = ((usize::from(self.head[class]) + 1) & (self.capacity - 1)) as u16;
        self.len[class] -= 1;
        if self.len[class] == 0 {
            self.mask &= !(1 << class);
        }
        entry
    }

    /// Calls `memory` with each slot a decision reads in these queues: the head of each
    /// non-empty class (the pick) and the slot of each class's tail (a port put back), the
    /// lowest class's always (where a port beyond its allocation goes back).
    #[inline]
    pub(crate) fn decision_lines(&self, memory: &mut impl FnMut(*const u8, usize)) {
        let mut mask = self.mask | 1 << (PRIORITY_CLASSES - 1);
        while mask != 0 {
            let class = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            for i in [0, usize::from(self.len[class])] {
                memory(self.ring.as_ptr().wrapping_add(self.at(class, i)).cast(), size_of::<Entry>());
            }
        }
    }

    /// The port at the head of the highest non-empty class, which the next pick looks at first.
    #[inline]
    pub(crate) fn first(&self) -> Option<PortIndex> {
        self.highest().map(|class| PortIndex::from(self.ring[self.at(class, 0)].port))
    }

    /// Takes a port out of the middle of its queue, keeping the others' order (configuration
    /// changes and the demoted-port probe only); returns its entry.
    pub(crate) fn remove(&mut self, class: usize, port: PortIndex) -> Option<Entry> {
        let len = usize::from(self.len[class]);
        let pos = self.entries(class).position(|e| PortIndex::from(e.port) == port)?;
        let entry = self.ring[self.at(class, pos)];
        for i in pos..len - 1 {
            let (to, from) = (self.at(class, i), self.at(class, i + 1));
            self.ring[to] = self.ring[from];
        }
        self.len[class] -= 1;
        if self.len[class] == 0 {
            self.mask &= !(1 << class);
        }
        Some(entry)
    }

    /// The entry of a port in a class's queue (views and the probe's scan: a walk of the ring).
    pub(crate) fn find(&self, class: usize, port: PortIndex) -> Option<Entry> {
        self.entries(class).find(|e| PortIndex::from(e.port) == port)
    }

    /// A class's queue, head first.
    pub(crate) fn entries(&self, class: usize) -> impl Iterator<Item = Entry> + '_ {
        (0..usize::from(self.len[class])).map(move |i| self.ring[self.at(class, i)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decisions_lines_are_each_queues_head_and_tail_slot() {
        let mut q = ReadyQueues::default();
        q.reserve(16);
        for port in 0..5 {
            q.push_back(2, port, 0);
        }
        q.pop_front(2);
        let mut pieces = Vec::new();
        q.decision_lines(&mut |start, len| pieces.push((start as usize, len)));
        let slot = |class: usize, i: usize| q.ring.as_ptr() as usize + q.at(class, i) * size_of::<Entry>();
        for (class, i) in [(2, 0), (2, 4), (PRIORITY_CLASSES - 1, 0)] {
            assert!(pieces.contains(&(slot(class, i), size_of::<Entry>())), "class {class}, position {i}");
        }
        assert_eq!(q.first(), Some(1));
    }

    #[test]
    fn each_class_is_first_in_first_out_across_wraps_growth_and_removal() {
        let mut q = ReadyQueues::default();
        // Each port with the due time it was queued with: the entry carries it through wraps,
        // growth and removals of others.
        let mut model: Vec<std::collections::VecDeque<(PortIndex, u64)>> = vec![Default::default(); PRIORITY_CLASSES];
        let mut free: Vec<PortIndex> = (0..40).collect();
        q.reserve(40);
        for step in 0..5_000usize {
            let class = step * 7 % PRIORITY_CLASSES;
            match step % 5 {
                0..=2 if !free.is_empty() => {
                    let port = free.swap_remove(step % free.len());
                    q.push_back(class, port, step as u64);
                    model[class].push_back((port, step as u64));
                }
                3 if !model[class].is_empty() => {
                    let head = q.pop_front(class);
                    assert_eq!(Some((PortIndex::from(head.port), head.due_tsc)), model[class].pop_front());
                    free.push(PortIndex::from(head.port));
                }
                4 if !model[class].is_empty() => {
                    let (port, due) = model[class][step % model[class].len()];
                    assert_eq!(q.find(class, port).map(|e| e.due_tsc), Some(due));
                    assert_eq!(q.remove(class, port).map(|e| e.due_tsc), Some(due));
                    assert_eq!(q.find(class, port), None);
                    model[class].retain(|&(p, _)| p != port);
                    free.push(port);
                }
                _ => {}
            }
            if step == 2_500 {
                q.reserve(100);
            }
            let first = model.iter().position(|m| !m.is_empty());
            assert_eq!(q.highest(), first);
        }
        for (class, expected) in model.iter_mut().enumerate() {
            while let Some((port, due)) = expected.pop_front() {
                let head = q.pop_front(class);
                assert_eq!((PortIndex::from(head.port), head.due_tsc), (port, due));
            }
        }
        assert!(q.is_empty());
    }
}
