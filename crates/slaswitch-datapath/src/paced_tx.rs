//! Paced ports: a port with `link_rate_bps` sends no faster than a NIC of that line rate. The
//! switch puts its frames into the port's queue (as deep as its `tx_ring`, like the NIC's
//! descriptor ring; a full queue drops, as a full ring does) and releases them as the link
//! serialises them ([`slaswitch_qos::link::LinkPacer`]). The egress schedulers of ANCS, SoftBW
//! and PIE-VDE will decide the order in this queue; for now it is first in, first out.
//!
//! The uplink's link also runs the NIC-bottleneck detector (seed 000 Sec. VII) and publishes
//! its verdict in [`Fallback`], which every PMD reads before policing.
//!
//! State is touched only under the port's tx spin lock, which every PMD takes for a paced port.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

use slaswitch_dpdk::{free_bulk, EthPort, Mbuf, MAX_BURST};
use slaswitch_qos::cpu::{FallbackConfig, FallbackDetector};
use slaswitch_qos::link::LinkPacer;

use crate::counters::PortCounters;

/// The switch-wide state of the NIC-bottleneck fallback.
#[derive(Debug, Default)]
pub struct Fallback {
    /// Per-VM byte limits apply while set.
    pub engaged: AtomicBool,
    /// Frames the limits dropped, all ports together (the detector's release condition).
    pub drops: AtomicU64,
    /// The uplink's utilisation over the last window, f64 bits.
    utilisation_bits: AtomicU64,
    /// Times the fallback engaged.
    pub engagements: AtomicU64,
}

impl Fallback {
    /// The uplink's utilisation in the last window (0 to 1).
    pub fn utilisation(&self) -> f64 {
        f64::from_bits(self.utilisation_bits.load(Relaxed))
    }
}

struct LinkState {
    pacer: LinkPacer,
    queue: VecDeque<Mbuf>,
    detector: Option<FallbackDetector>,
}

/// One paced port's link and queue.
pub struct PacedLink {
    state: UnsafeCell<LinkState>,
    capacity: usize,
    /// Frames waiting, readable without the lock (a cheap "anything to do?").
    queued: AtomicUsize,
}

// SAFETY: `state` is only reached through methods whose callers hold the port's tx spin lock
// (see `Pmd::flush` and `Pmd::drain_links`), so one thread at a time uses it.
unsafe impl Sync for PacedLink {}
unsafe impl Send for PacedLink {}

impl PacedLink {
    /// A link of `rate_bps` with room for `queue_frames`; `watch_for_fallback`: the uplink.
    pub fn new(rate_bps: u64, queue_frames: usize, watch_for_fallback: bool, now_ns: u64) -> PacedLink {
        PacedLink {
            state: UnsafeCell::new(LinkState {
                pacer: LinkPacer::new(rate_bps, now_ns),
                queue: VecDeque::with_capacity(queue_frames),
                detector: watch_for_fallback.then(|| FallbackDetector::new(FallbackConfig::default(), now_ns)),
            }),
            capacity: queue_frames,
            queued: AtomicUsize::new(0),
        }
    }

    /// Its line rate.
    pub fn rate_bps(&self) -> u64 {
        // SAFETY: the rate never changes after creation; reading it races with nothing.
        unsafe { (*self.state.get()).pacer.rate_bps() }
    }

    /// Frames waiting.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// Queues `frames`; what does not fit is freed and counted as dropped.
    ///
    /// # Safety
    /// The caller holds the port's tx lock.
    pub unsafe fn enqueue(&self, frames: &[Mbuf], now_ns: u64, counters: &PortCounters) {
        let s = &mut *self.state.get();
        if s.queue.is_empty() && !frames.is_empty() {
            s.pacer.queue_was_empty(now_ns);
        }
        let room = self.capacity - s.queue.len();
        let (taken, dropped) = frames.split_at(frames.len().min(room));
        s.queue.extend(taken.iter().copied());
        if !dropped.is_empty() {
            counters.add_tx(0, 0, dropped.len() as u64);
            free_bulk(dropped);
        }
        self.queued.store(s.queue.len(), Relaxed);
    }

    /// Sends what the link has had time for by `now_ns`; runs the fallback detector when this
    /// is the uplink.
    ///
    /// # Safety
    /// The caller holds the port's tx lock.
    pub unsafe fn drain(&self, eth: EthPort, now_ns: u64, counters: &PortCounters, fallback: &Fallback) {
        let s = &mut *self.state.get();
        let mut burst = [Mbuf(std::ptr::NonNull::dangling()); MAX_BURST];
        loop {
            let mut n = 0;
            let mut bytes = 0u64;
            while n < MAX_BURST && s.pacer.may_send(now_ns) {
                let Some(m) = s.queue.pop_front() else { break };
                s.pacer.send(m.pkt_len());
                bytes += u64::from(m.pkt_len());
                burst[n] = m;
                n += 1;
            }
            if n == 0 {
                break;
            }
            let mut sent = 0;
            for _ in 0..4 {
                let k = eth.tx_burst(&mut burst[sent..n]);
                sent += k;
                if sent == n || k == 0 {
                    break;
                }
            }
            let unsent = &burst[sent..n];
            let unsent_bytes: u64 = unsent.iter().map(|m| u64::from(m.pkt_len())).sum();
            counters.add_tx(sent as u64, bytes - unsent_bytes, unsent.len() as u64);
            free_bulk(unsent);
        }
        self.queued.store(s.queue.len(), Relaxed);
        if let Some(d) = s.detector.as_mut() {
            let busy = s.pacer.take_busy_ns();
            if let Some(engaged) = d.observe(now_ns, busy, fallback.drops.load(Relaxed)) {
                fallback.engaged.store(engaged, Relaxed);
                if engaged {
                    fallback.engagements.fetch_add(1, Relaxed);
                }
            }
            fallback.utilisation_bits.store(d.last_utilisation().to_bits(), Relaxed);
        }
    }
}

impl Drop for PacedLink {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        let left: Vec<Mbuf> = s.queue.drain(..).collect();
        free_bulk(&left);
    }
}
