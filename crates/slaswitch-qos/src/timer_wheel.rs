//! A hashed timer wheel over small dense indices: "wake index i at time t", O(1) to park, to
//! unpark and to expire.
//!
//! Both decision points park things until a time: C2TB ports waiting for their bucket to turn
//! positive (TSC ticks), SoftBW queues waiting for their time-to-send (ns). A binary heap made that
//! O(log n) per batch and dominated the decision cost (`BinaryHeap::pop` at hundreds of ports); a wheel of `Vec` slots then missed the cache on every insert.
//! So the lists are intrusive: one `u32` head per slot and per-index links, a few kilobytes. An
//! index's links sit in one [`Link`] record, and [`IntrusiveWheel`] leaves that record wherever its
//! user keeps the rest of the index's state (the HBS scheduler: in each port's record): in the data
//! plane every batch evicts the scheduler from the caches, and each separate array costs a miss.
//! [`TimerWheel`] is the same wheel owning its links. An index is in at most one slot; an entry fires when its slot is fully in the past,
//! so at most one slot (`1 << slot_shift` time units) late, never early. Entries due beyond the
//! wheel's horizon wait in a far list that is re-filed once per turn.

pub(crate) const NIL: u32 = u32::MAX;
const FAR: u32 = u32::MAX - 1;

/// One index's place in the wheel.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    next: u32,
    prev: u32,
    /// Slot the index is parked in, FAR, or NIL when not parked.
    slot: u32,
    /// Due time while in the far list.
    far_due: u64,
}

impl Link {
    /// The link of an index in no slot.
    pub const UNPARKED: Link = Link { next: NIL, prev: NIL, slot: NIL, far_due: 0 };

    /// True when the index is in a slot.
    pub fn is_parked(&self) -> bool {
        self.slot != NIL
    }
}

/// Where the wheel finds index `i`'s link. The wheel only touches links of indices it was given.
pub trait WheelLinks {
    /// The link record of `index`.
    fn link(&mut self, index: usize) -> &mut Link;
}

impl WheelLinks for Vec<Link> {
    fn link(&mut self, index: usize) -> &mut Link {
        &mut self[index]
    }
}

/// The wheel without its links: every call is handed the links' owner.
#[derive(Clone, Debug)]
pub struct IntrusiveWheel {
    slot_shift: u32,
    /// log2 of the slot count (a power of two, so turns are shifts, not divisions).
    turn_shift: u32,
    heads: Vec<u32>,
    /// Bit i set when slot i holds entries: expiry jumps over empty slots a word at a time.
    occupied: Vec<u64>,
    far_head: u32,
    /// Absolute index of the next slot to expire.
    cursor: u64,
    len: usize,
}

impl IntrusiveWheel {
    /// `slot_count` is rounded up to a power of two (at least 64); the horizon is
    /// `slot_count << slot_shift` time units.
    pub fn new(slot_shift: u32, slot_count: usize, now: u64) -> Self {
        let slot_count = slot_count.next_power_of_two().max(64);
        IntrusiveWheel {
            slot_shift,
            turn_shift: slot_count.trailing_zeros(),
            heads: vec![NIL; slot_count],
            occupied: vec![0; slot_count / 64],
            far_head: NIL,
            cursor: now >> slot_shift,
            len: 0,
        }
    }

    /// Indices parked.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Largest lateness of an expiry, in time units.
    pub fn granularity(&self) -> u64 {
        1 << self.slot_shift
    }

    #[inline]
    fn mask(&self) -> u64 {
        self.heads.len() as u64 - 1
    }

    #[inline]
    fn push_front(&mut self, links: &mut impl WheelLinks, list: u32, index: usize) {
        let head = if list == FAR { self.far_head } else { self.heads[list as usize] };
        let link = links.link(index);
        link.next = head;
        link.prev = NIL;
        link.slot = list;
        if head != NIL {
            links.link(head as usize).prev = index as u32;
        }
        if list == FAR {
            self.far_head = index as u32;
        } else {
            self.heads[list as usize] = index as u32;
            self.occupied[list as usize / 64] |= 1 << (list % 64);
        }
    }

    /// Parks `index` until `due`; an index already parked is moved.
    #[inline]
    pub fn insert(&mut self, links: &mut impl WheelLinks, due: u64, index: usize) {
        if links.link(index).is_parked() {
            self.remove(links, index);
        }
        self.insert_unparked(links, due, index);
    }

    /// [`Self::insert`] for an index the caller knows is not parked: its link is then only
    /// written, never read, so parking does not wait for the line that holds it (the HBS
    /// scheduler parks a port it has just taken from a ready queue).
    #[inline]
    pub fn insert_unparked(&mut self, links: &mut impl WheelLinks, due: u64, index: usize) {
        debug_assert!(!links.link(index).is_parked(), "index {index} is parked already");
        self.len += 1;
        let slot = (due >> self.slot_shift).max(self.cursor);
        if slot - self.cursor > self.mask() {
            links.link(index).far_due = due;
            self.push_front(links, FAR, index);
        } else {
            self.push_front(links, (slot & self.mask()) as u32, index);
        }
    }

    /// Unparks `index`; false if it was not parked.
    #[inline]
    pub fn remove(&mut self, links: &mut impl WheelLinks, index: usize) -> bool {
        let Link { next, prev, slot: list, .. } = *links.link(index);
        if list == NIL {
            return false;
        }
        if prev != NIL {
            links.link(prev as usize).next = next;
        } else if list == FAR {
            self.far_head = next;
        } else {
            self.heads[list as usize] = next;
            if next == NIL {
                self.occupied[list as usize / 64] &= !(1 << (list % 64));
            }
        }
        if next != NIL {
            links.link(next as usize).prev = prev;
        }
        links.link(index).slot = NIL;
        self.len -= 1;
        true
    }

    /// Slots from slot `i` (included) to the next occupied one, going round; the slot count if
    /// every slot is empty.
    #[inline]
    fn distance_to_occupied(&self, i: usize) -> u64 {
        let words_mask = self.occupied.len() - 1;
        let (w, b) = (i / 64, i % 64);
        let first = self.occupied[w] & (!0u64 << b);
        if first != 0 {
            return (first.trailing_zeros() as usize - b) as u64;
        }
        for k in 1..=words_mask + 1 {
            let word = self.occupied[(w + k) & words_mask];
            if word != 0 {
                return (k * 64 + word.trailing_zeros() as usize - b) as u64;
            }
        }
        self.heads.len() as u64
    }

    /// Unparks and appends to `fired` every index whose slot ended at or before `now`.
    #[inline]
    pub fn expire(&mut self, links: &mut impl WheelLinks, now: u64, fired: &mut Vec<usize>) {
        let target = now >> self.slot_shift;
        if self.len == 0 {
            self.cursor = self.cursor.max(target);
            return;
        }
        while self.cursor < target {
            let i = (self.cursor & self.mask()) as usize;
            let gap = self.distance_to_occupied(i);
            if gap > 0 {
                // Jump over empty slots, re-filing far entries at every turn of the wheel.
                let jump = gap.min(target - self.cursor);
                let turn_before = self.cursor >> self.turn_shift;
                self.cursor += jump;
                if self.cursor >> self.turn_shift != turn_before {
                    self.refile_far(links);
                }
                continue;
            }
            let mut index = self.heads[i];
            self.heads[i] = NIL;
            self.occupied[i / 64] &= !(1 << (i % 64));
            while index != NIL {
                let link = links.link(index as usize);
                let next = link.next;
                link.slot = NIL;
                self.len -= 1;
                fired.push(index as usize);
                index = next;
            }
            self.cursor += 1;
            if self.cursor & self.mask() == 0 {
                self.refile_far(links);
            }
        }
    }

    fn refile_far(&mut self, links: &mut impl WheelLinks) {
        let mut index = self.far_head;
        self.far_head = NIL;
        while index != NIL {
            let link = links.link(index as usize);
            let (next, due) = (link.next, link.far_due);
            link.slot = NIL;
            self.len -= 1;
            self.insert(links, due, index as usize);
            index = next;
        }
    }
}

/// A wheel that owns its links: "wake index i at time t" for any small dense index.
#[derive(Clone, Debug)]
pub struct TimerWheel {
    wheel: IntrusiveWheel,
    links: Vec<Link>,
}

impl TimerWheel {
    /// See [`IntrusiveWheel::new`].
    pub fn new(slot_shift: u32, slot_count: usize, now: u64) -> Self {
        TimerWheel { wheel: IntrusiveWheel::new(slot_shift, slot_count, now), links: Vec::new() }
    }

    /// Indices parked.
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// True when nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// True when `index` is parked.
    pub fn contains(&self, index: usize) -> bool {
        self.links.get(index).is_some_and(Link::is_parked)
    }

    /// Largest lateness of an expiry, in time units.
    pub fn granularity(&self) -> u64 {
        self.wheel.granularity()
    }

    /// Parks `index` until `due`; an index already parked is moved.
    #[inline]
    pub fn insert(&mut self, due: u64, index: usize) {
        if index >= self.links.len() {
            self.links.resize(index + 1, Link::UNPARKED);
        }
        self.wheel.insert(&mut self.links, due, index);
    }

    /// Unparks `index`; false if it was not parked.
    #[inline]
    pub fn remove(&mut self, index: usize) -> bool {
        index < self.links.len() && self.wheel.remove(&mut self.links, index)
    }

    /// Unparks and appends to `fired` every index whose slot ended at or before `now`.
    #[inline]
    pub fn expire(&mut self, now: u64, fired: &mut Vec<usize>) {
        self.wheel.expire(&mut self.links, now, fired);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_each_index_once_never_early_at_most_one_slot_late() {
        let mut w = TimerWheel::new(4, 64, 0);
        let dues = [5u64, 17, 17, 300, 2_000, 40_000];
        for (i, &d) in dues.iter().enumerate() {
            w.insert(d, i);
        }
        w.remove(2);
        let mut fired_at = vec![None; dues.len()];
        let mut out = Vec::new();
        for now in (0..50_000).step_by(7) {
            w.expire(now, &mut out);
            for i in out.drain(..) {
                assert!(fired_at[i].is_none(), "index {i} fired twice");
                fired_at[i] = Some(now);
            }
        }
        for (i, &d) in dues.iter().enumerate() {
            if i == 2 {
                assert_eq!(fired_at[i], None, "removed index fired");
                continue;
            }
            let at = fired_at[i].expect("fired");
            assert!(at >= d && at <= d + w.granularity() + 7, "index {i} due {d} fired at {at}");
        }
        assert!(w.is_empty());
    }
}
