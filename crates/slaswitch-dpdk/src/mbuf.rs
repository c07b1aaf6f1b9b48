//! Packet buffers with their ownership in the types. An [`Mbuf`] is owned by whoever holds it
//! and returns to its pool when dropped, so safe code frees each exactly once. An [`MbufBatch`]
//! is a burst's worth of them inline: a device fills it (`rx_burst`) or takes from its front
//! (`tx_burst`), and what is left when it drops is freed in one bulk call.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use crate::{
    ffi, ol_flags, EthPort, Mempool, RxPath, MAX_BURST, OFF_BUF_ADDR, OFF_DATA_LEN, OFF_DATA_OFF, OFF_NB_SEGS,
    OFF_NEXT, OFF_OL_FLAGS, OFF_PKT_LEN,
};

/// What a received frame asks of the port it goes to, from the offloads its sender used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadRequest {
    /// Nothing: a whole frame with whole checksums.
    None,
    /// Its TCP or UDP checksum is partial (the pseudo-header's sum only).
    Checksum,
    /// It is a TCP segment to be cut into frames of `mss` payload bytes (its checksum partial).
    Segment {
        /// Payload bytes per frame.
        mss: u16,
    },
}

/// A packet buffer owned by whoever holds it; dropping it returns it to its pool.
#[repr(transparent)]
#[derive(Debug, PartialEq, Eq)]
pub struct Mbuf(NonNull<u8>);

// SAFETY: an mbuf may move between threads with its ownership (e.g. a PMD to a paced link's
// queue that another PMD drains).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `p` is a valid mbuf that no one else owns or will free.
    pub(crate) unsafe fn from_raw(p: NonNull<u8>) -> Mbuf {
        Mbuf(p)
    }

    pub(crate) fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    #[inline(always)]
    fn field<T: Copy>(&self, offset: usize) -> T {
        // SAFETY: offsets checked against offsetof at Eal::init; the mbuf is valid while owned.
        unsafe { self.0.as_ptr().add(offset).cast::<T>().read_unaligned() }
    }

    /// Bytes of the whole packet.
    #[inline(always)]
    pub fn pkt_len(&self) -> u32 {
        self.field::<u32>(OFF_PKT_LEN)
    }

    /// Bytes in the first segment.
    #[inline(always)]
    pub fn data_len(&self) -> u16 {
        self.field::<u16>(OFF_DATA_LEN)
    }

    /// Segments of the packet (1 unless chained).
    #[inline(always)]
    pub fn segments(&self) -> u16 {
        self.field::<u16>(OFF_NB_SEGS)
    }

    /// Its offload flags (`rte_mbuf.ol_flags`, [`crate::ol_flags`]).
    #[inline(always)]
    pub fn ol_flags(&self) -> u64 {
        self.field::<u64>(OFF_OL_FLAGS)
    }

    /// What it asks of the port it goes to (a vhost port set up with partial checksums flags
    /// them; every other port's frames ask nothing).
    #[inline(always)]
    pub fn offload_request(&self) -> OffloadRequest {
        let f = self.ol_flags();
        if f & ol_flags::RX_LRO != 0 {
            // SAFETY: valid mbuf.
            OffloadRequest::Segment { mss: unsafe { ffi::ss_mbuf_tso_segsz(self.as_ptr()) } }
        } else if f & ol_flags::RX_L4_CKSUM_MASK == ol_flags::RX_L4_CKSUM_NONE {
            OffloadRequest::Checksum
        } else {
            OffloadRequest::None
        }
    }

    /// Asks the port it goes to for offloads: header lengths, the segment size (with
    /// [`ol_flags::TX_TCP_SEG`]) and TX flags of [`crate::ol_flags`].
    pub fn set_tx_offload(&mut self, l2_len: u8, l3_len: u16, l4_len: u8, segsz: u16, flags: u64) {
        // SAFETY: valid mbuf, owned.
        unsafe { ffi::ss_mbuf_set_tx_offload(self.as_ptr(), l2_len, l3_len, l4_len, segsz, flags) }
    }

    /// The bytes of each of its segments, in order.
    pub fn pieces(&self) -> Pieces<'_> {
        Pieces { next: Some(self.0), _owner: std::marker::PhantomData }
    }

    /// The first segment's bytes.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let base: *mut u8 = self.field::<*mut u8>(OFF_BUF_ADDR);
        let off = self.field::<u16>(OFF_DATA_OFF) as usize;
        // SAFETY: buf_addr + data_off .. + data_len is the first segment's data, valid while
        // this mbuf is owned.
        unsafe { std::slice::from_raw_parts(base.add(off), self.data_len() as usize) }
    }

    /// The first segment's bytes, writable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let base: *mut u8 = self.field::<*mut u8>(OFF_BUF_ADDR);
        let off = self.field::<u16>(OFF_DATA_OFF) as usize;
        // SAFETY: as in `data`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(base.add(off), self.data_len() as usize) }
    }

    /// Sets a fresh single-segment mbuf's length with two stores (no FFI call), for packets
    /// no longer than `max_len`, the pool's data room less headroom, which the caller knows.
    #[inline(always)]
    pub fn set_len_within(&mut self, len: u16, max_len: u16) -> bool {
        if len > max_len {
            return false;
        }
        // SAFETY: offsets checked at Eal::init; the mbuf is fresh (one segment, headroom only).
        unsafe {
            self.0.as_ptr().add(OFF_DATA_LEN).cast::<u16>().write_unaligned(len);
            self.0.as_ptr().add(OFF_PKT_LEN).cast::<u32>().write_unaligned(u32::from(len));
        }
        true
    }

    /// Makes a fresh single-segment mbuf hold `len` bytes; false if it does not fit.
    pub fn set_len(&mut self, len: u16) -> bool {
        // SAFETY: valid mbuf.
        unsafe { ffi::ss_pktmbuf_set_len(self.as_ptr(), len) == 0 }
    }

    /// Makes a chained mbuf one contiguous segment; false if it cannot.
    pub fn linearize(&mut self) -> bool {
        // SAFETY: valid mbuf.
        unsafe { ffi::ss_pktmbuf_linearize(self.as_ptr()) == 0 }
    }
}

/// The segments of a chained mbuf, as byte slices ([`Mbuf::pieces`]).
pub struct Pieces<'a> {
    next: Option<NonNull<u8>>,
    _owner: std::marker::PhantomData<&'a Mbuf>,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let seg = self.next?;
        // SAFETY: `seg` is a segment of the borrowed mbuf's chain; the view borrows it, so it
        // is neither freed nor dropped meanwhile, and a segment is an mbuf with the same layout.
        let view = std::mem::ManuallyDrop::new(unsafe { Mbuf::from_raw(seg) });
        self.next = NonNull::new(view.field::<*mut u8>(OFF_NEXT));
        let data = view.data();
        // SAFETY: the bytes live as long as the borrowed chain, 'a.
        Some(unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) })
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: this value owns the mbuf, and it is dropped once.
        unsafe { ffi::ss_pktmbuf_free(self.as_ptr()) }
    }
}

/// Up to [`MAX_BURST`] owned mbufs, inline; the first `len` slots hold them.
pub struct MbufBatch {
    slots: [MaybeUninit<Mbuf>; MAX_BURST],
    len: usize,
}

impl Default for MbufBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl MbufBatch {
    /// An empty batch.
    pub fn new() -> MbufBatch {
        MbufBatch { slots: [const { MaybeUninit::uninit() }; MAX_BURST], len: 0 }
    }

    /// Mbufs held.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds none.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mbufs held.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: the first `len` slots are initialised; MaybeUninit<Mbuf> has Mbuf's layout.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast(), self.len) }
    }

    /// The mbufs held, writable.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`.
        unsafe { std::slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast(), self.len) }
    }

    /// Adds `m` at the end; gives it back when the batch is full.
    #[inline(always)]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == MAX_BURST {
            return Err(m);
        }
        self.slots[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Moves as many of `other`'s mbufs as fit to the end of this batch, in order; what does not
    /// fit stays in `other`, at its front. Returns how many moved.
    #[inline(always)]
    pub fn append(&mut self, other: &mut MbufBatch) -> usize {
        let n = other.len.min(MAX_BURST - self.len);
        let src = other.slots.as_ptr();
        // SAFETY: other's first `n` slots are initialised and move to this batch's free slots;
        // the rest of other's move to its front. Each mbuf keeps exactly one owner.
        unsafe {
            self.take_slots(src, n);
            std::ptr::copy(src.add(n), other.slots.as_mut_ptr(), other.len - n);
        }
        other.len -= n;
        n
    }

    /// Copies `n` mbufs from `src` into the free slots at the end and counts them held.
    ///
    /// # Safety
    /// `src` points to `n` initialised mbufs, `n` fits in the free slots, and the caller
    /// never reads or drops those mbufs at `src` again: they are this batch's now.
    #[inline(always)]
    unsafe fn take_slots(&mut self, src: *const MaybeUninit<Mbuf>, n: usize) {
        debug_assert!(n <= MAX_BURST - self.len);
        std::ptr::copy_nonoverlapping(src, self.slots.as_mut_ptr().add(self.len), n);
        self.len += n;
    }

    /// Receives up to `max` packets from `port` at the end; returns how many came.
    #[inline(always)]
    pub fn rx_burst(&mut self, port: &EthPort, max: usize) -> usize {
        self.rx_burst_queue(port, 0, max)
    }

    /// Receives up to `max` packets from rx queue `queue` of `port` at the end.
    #[inline(always)]
    pub fn rx_burst_queue(&mut self, port: &EthPort, queue: u16, max: usize) -> usize {
        self.receive(port, RxPath::Ethdev, queue, max)
    }

    /// Receives up to `max` packets from rx queue `queue` of `port` at the end, by `path` (a
    /// port never attached to [`RxPath::VhostDirect`] gives nothing that way).
    #[inline(always)]
    pub fn receive(&mut self, port: &EthPort, path: RxPath, queue: u16, max: usize) -> usize {
        let (id, n, slots) = (port.id(), max.min(MAX_BURST - self.len) as u16, self.free_ptr());
        // SAFETY: the driver or the vhost library writes at most `n` mbufs, each ours, into free
        // slots.
        let got = unsafe {
            match path {
                RxPath::Ethdev => ffi::ss_rx_burst(id, queue, slots, n),
                RxPath::VhostDirect => ffi::ss_vhost_rx_burst(id, queue, slots, n),
            }
        } as usize;
        self.len += got;
        got
    }

    /// Fills the batch to `n` mbufs from `pool`, all or nothing.
    pub fn alloc(&mut self, pool: &Mempool, n: usize) -> bool {
        let want = n.saturating_sub(self.len).min(MAX_BURST - self.len);
        // SAFETY: the pool writes `want` mbufs, each ours, into free slots, or none.
        let ok = unsafe { ffi::ss_pktmbuf_alloc_bulk(pool.as_ptr(), self.free_ptr(), want as u32) } == 0;
        if ok {
            self.len += want;
        }
        ok
    }

    /// Transmits from the front on `port`; the mbufs the device took are its own now, the rest
    /// move to the front. Returns how many it took.
    #[inline(always)]
    pub fn tx_burst(&mut self, port: &EthPort) -> usize {
        self.tx_burst_queue(port, 0)
    }

    /// Transmits like [`Self::tx_burst`] on tx queue `queue` of `port`.
    #[inline(always)]
    pub fn tx_burst_queue(&mut self, port: &EthPort, queue: u16) -> usize {
        let base = self.slots.as_mut_ptr().cast::<*mut c_void>();
        // SAFETY: the first `len` slots are ours; the device takes ownership of the first `sent`.
        let sent = unsafe { ffi::ss_tx_burst(port.id(), queue, base, self.len as u16) } as usize;
        if sent > 0 {
            // SAFETY: moves the unsent mbufs to the front; the sent ones are not ours to drop.
            unsafe { std::ptr::copy(base.add(sent), base, self.len - sent) };
            self.len -= sent;
        }
        sent
    }

    /// Transmits like [`Self::tx_burst`], trying again while the device takes some and at most
    /// `tries` times: a ring that fills up mid-burst usually has room a moment later, while one
    /// that took nothing is full. Returns how many it took; the rest stay, at the front.
    #[inline]
    pub fn tx_burst_retrying(&mut self, port: &EthPort, tries: usize) -> usize {
        let mut sent = 0;
        for _ in 0..tries {
            let k = self.tx_burst(port);
            sent += k;
            if self.is_empty() || k == 0 {
                break;
            }
        }
        sent
    }

    /// Moves every mbuf out, in order; those the iterator is dropped before reaching are freed.
    #[inline(always)]
    pub fn drain(&mut self) -> Drain<'_> {
        let len = std::mem::take(&mut self.len);
        Drain { batch: self, next: 0, len }
    }

    /// Keeps the mbufs for which `keep` is true, in order, and frees the others.
    #[inline]
    pub fn retain(&mut self, mut keep: impl FnMut(&Mbuf) -> bool) {
        let len = std::mem::take(&mut self.len);
        for i in 0..len {
            // SAFETY: slot i < len is initialised, and read once.
            let m = unsafe { self.slots[i].assume_init_read() };
            if keep(&m) {
                self.slots[self.len].write(m);
                self.len += 1;
            }
        }
    }

    /// Frees every mbuf, in one bulk call.
    #[inline]
    pub fn clear(&mut self) {
        if self.len > 0 {
            let base = self.slots.as_mut_ptr().cast::<*mut c_void>();
            // SAFETY: the first `len` slots are ours and are forgotten right after.
            unsafe { ffi::ss_pktmbuf_free_bulk(base, self.len as u32) };
            self.len = 0;
        }
    }

    fn free_ptr(&mut self) -> *mut *mut c_void {
        self.slots[self.len..].as_mut_ptr().cast()
    }
}

impl Drop for MbufBatch {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The mbufs of a batch, moved out one by one ([`MbufBatch::drain`]).
pub struct Drain<'a> {
    batch: &'a mut MbufBatch,
    next: usize,
    len: usize,
}

impl Iterator for Drain<'_> {
    type Item = Mbuf;

    #[inline(always)]
    fn next(&mut self) -> Option<Mbuf> {
        if self.next == self.len {
            return None;
        }
        // SAFETY: slots next..len are initialised and not yet read.
        let m = unsafe { self.batch.slots[self.next].assume_init_read() };
        self.next += 1;
        Some(m)
    }

    #[inline(always)]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len - self.next, Some(self.len - self.next))
    }
}

impl ExactSizeIterator for Drain<'_> {}

impl Drain<'_> {
    /// The mbufs not yet taken, in order.
    #[inline(always)]
    pub fn rest(&self) -> &[Mbuf] {
        // SAFETY: slots next..len are initialised and not yet read; MaybeUninit<Mbuf> has
        // Mbuf's layout.
        unsafe { std::slice::from_raw_parts(self.batch.slots.as_ptr().add(self.next).cast(), self.len - self.next) }
    }

    /// Moves the next `n` mbufs (at most as many as are left and as fit) to the end of `to`, in
    /// one copy; returns how many moved.
    #[inline(always)]
    pub fn move_to(&mut self, to: &mut MbufBatch, n: usize) -> usize {
        let n = n.min(self.len - self.next).min(MAX_BURST - to.len);
        // SAFETY: the `n` slots from `next` are initialised and not yet read; they move to
        // `to`'s free slots and this iterator never reads them again, so each mbuf keeps one owner.
        unsafe { to.take_slots(self.batch.slots.as_ptr().add(self.next), n) };
        self.next += n;
        n
    }
}

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        for slot in &mut self.batch.slots[self.next..self.len] {
            // SAFETY: the slots not yet read are initialised; each is dropped once.
            drop(unsafe { slot.assume_init_read() });
        }
    }
}
