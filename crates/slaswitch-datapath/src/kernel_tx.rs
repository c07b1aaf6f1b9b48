//! Sends to kernel ports (tap, af_packet) off the PMD. Handing a frame to such a port is a
//! system call that runs the receiving namespace's stack, tens of microseconds on a
//! paravirtualised host, during which a PMD would poll none of its ports. So each kernel port
//! has a sender thread, on the cores the PMDs leave to the host: a PMD's egress stage hands it
//! the frames (a bounded queue; a full one drops, as a full device ring does) and goes on.
//!
//! The cycles the sender spends are charged back to the ports whose frames it sent (seed 000
//! Sec. IV-A charges a stage to the port that caused it): the port's PMD collects them into the
//! port's egress stage and, under C2QoS, its cycle bucket, where the system call was before.
//! A frame's residence ends when the sender hands it to the driver (`crate::residence`), so
//! its wait for the sender counts.
//!
//! A paced port's link still sends on the PMD that drains it (`crate::paced_tx`).

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use slaswitch_config::ranges::MAX_PORTS;
use slaswitch_dpdk::{rdtsc, EthPort, Mbuf, MbufBatch, MAX_BURST};

use crate::counters::PortCounters;
use crate::histogram::Histogram;
use crate::paced_tx::TX_TRIES;
use crate::residence::{ResidenceStart, SharedResidence, TicksToNs};
use crate::spin::SpinGuard;

/// Frames a kernel port's queue holds: four PMD batches, so PMDs can hand on while the sender
/// is in a system call; a longer queue only makes TCP keep it full, and every frame behind it
/// (a latency-class VM's among them) wait longer.
pub const KERNEL_TX_QUEUE_FRAMES: usize = 128;

/// How long an idle sender sleeps before it looks again without being woken (a wake-up a PMD
/// missed costs at most this).
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// A frame on its way to a kernel port, with where it came from and when its residence began.
struct Outgoing {
    mbuf: Mbuf,
    source: u16,
    start: ResidenceStart,
}

/// What a kernel port's PMDs and its sender thread share.
pub struct KernelTx {
    queue: ArrayQueue<Outgoing>,
    /// The sender found the queue empty and is (about to be) asleep.
    asleep: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
    eth: EthPort,
    lock: Arc<AtomicBool>,
    counters: Arc<PortCounters>,
    /// By source port number: cycles the sender spent on its frames, not yet charged.
    owed_cycles: Box<[AtomicU64]>,
    /// By source port number, made on its first frame.
    residence: Box<[OnceLock<Box<SharedResidence>>]>,
    clock: TicksToNs,
}

impl KernelTx {
    fn new(eth: EthPort, lock: Arc<AtomicBool>, counters: Arc<PortCounters>, tsc_hz: u64) -> KernelTx {
        KernelTx {
            queue: ArrayQueue::new(KERNEL_TX_QUEUE_FRAMES),
            asleep: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
            eth,
            lock,
            counters,
            owed_cycles: (0..MAX_PORTS).map(|_| AtomicU64::new(0)).collect(),
            residence: (0..MAX_PORTS).map(|_| OnceLock::new()).collect(),
            clock: TicksToNs::new(tsc_hz),
        }
    }

    /// Hands `frames` from port `source`, whose residence began at `start`, to the sender; what
    /// its queue cannot take is freed and counted as the port's tx drops. Returns the frames
    /// offered, which the PMD does not time (the sender times those it sends).
    pub(crate) fn hand(&self, frames: &mut MbufBatch, source: u16, start: ResidenceStart) -> usize {
        let offered = frames.len();
        let mut dropped = 0u64;
        for mbuf in frames.drain() {
            // A frame the queue gives back is dropped here, which frees it.
            if self.queue.push(Outgoing { mbuf, source, start }).is_err() {
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.counters.add_tx(0, 0, dropped);
        }
        self.wake();
        offered
    }

    /// Wakes the sender if it sleeps. The fence pairs with the sender's: either it sees the
    /// frames just queued, or this sees it asleep.
    fn wake(&self) {
        std::sync::atomic::fence(SeqCst);
        if self.asleep.load(Relaxed) && self.asleep.swap(false, SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// The cycles the sender spent on port `source`'s frames since the last call (its PMD
    /// charges them).
    pub(crate) fn take_owed(&self, source: u16) -> u64 {
        match self.owed_cycles.get(usize::from(source)) {
            Some(owed) if owed.load(Relaxed) != 0 => owed.swap(0, Relaxed),
            _ => 0,
        }
    }

    /// Source port `number`'s frames sent through this port: residence, all and unstalled.
    pub fn residence(&self, number: u16) -> Option<(Histogram, Histogram)> {
        Some(self.residence.get(usize::from(number))?.get()?.read())
    }

    /// Sends `batch`, whose frames came from `sources` with residence from `starts`, and
    /// accounts for it: the port's tx counters, each frame's residence, each source's cycles.
    fn send(&self, batch: &mut MbufBatch, sources: &[u16], starts: &[ResidenceStart]) {
        let t0 = rdtsc();
        let n = batch.len();
        let bytes: u64 = batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
        let sent = {
            let _device = SpinGuard::lock(&self.lock);
            batch.tx_burst_retrying(&self.eth, TX_TRIES)
        };
        let unsent_bytes: u64 = batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
        batch.clear();
        self.counters.add_tx(sent as u64, bytes - unsent_bytes, (n - sent) as u64);
        for (&source, start) in sources[..sent].iter().zip(&starts[..sent]) {
            self.record_residence(source, *start, t0);
        }
        let each = (rdtsc() - t0) / n as u64;
        for &source in sources {
            if let Some(owed) = self.owed_cycles.get(usize::from(source)) {
                owed.fetch_add(each, Relaxed);
            }
        }
    }

    /// A frame from `source` whose residence began at `start` was handed to the driver at
    /// `left_tsc`.
    fn record_residence(&self, source: u16, start: ResidenceStart, left_tsc: u64) {
        let Some(slot) = self.residence.get(usize::from(source)) else { return };
        // The sender thread is the one writer of these histograms.
        slot.get_or_init(Box::default).record(self.clock, start, left_tsc);
    }

    /// The sender thread's loop: sends what is queued, a burst at a time; sleeps when nothing
    /// is, until a PMD wakes it (or [`IDLE_WAIT`]); returns when told to stop, dropping (and so
    /// freeing) what is still queued only with the queue itself.
    fn run(&self) {
        let mut batch = MbufBatch::new();
        let mut sources = [0u16; MAX_BURST];
        let mut starts = [ResidenceStart::default(); MAX_BURST];
        loop {
            let mut n = 0;
            while n < MAX_BURST {
                let Some(o) = self.queue.pop() else { break };
                sources[n] = o.source;
                starts[n] = o.start;
                // Room for it: `n` stays below the batch's capacity.
                let _ = batch.push(o.mbuf);
                n += 1;
            }
            if n > 0 {
                self.send(&mut batch, &sources[..n], &starts[..n]);
                continue;
            }
            if self.stop.load(SeqCst) {
                return;
            }
            self.asleep.store(true, SeqCst);
            std::sync::atomic::fence(SeqCst);
            if self.queue.is_empty() && !self.stop.load(SeqCst) {
                std::thread::park_timeout(IDLE_WAIT);
            }
            self.asleep.store(false, Relaxed);
        }
    }
}

/// A kernel port's sender thread; stopping it (or dropping this) waits for it to end.
pub struct KernelSender {
    shared: Arc<KernelTx>,
    join: Option<JoinHandle<()>>,
}

impl KernelSender {
    /// Starts the sender of kernel port `eth` (named `port`), whose tx lock is `lock`, on
    /// `cores` (none: wherever the host puts it); `register` gives it an lcore id for the
    /// mempool's cache.
    pub fn start(
        port: &str,
        eth: EthPort,
        lock: Arc<AtomicBool>,
        counters: Arc<PortCounters>,
        cores: Vec<usize>,
        tsc_hz: u64,
        register: impl FnOnce() -> Result<u32, slaswitch_dpdk::DpdkError> + Send + 'static,
    ) -> std::io::Result<KernelSender> {
        let shared = Arc::new(KernelTx::new(eth, lock, counters, tsc_hz));
        let thread_shared = shared.clone();
        if cores.is_empty() {
            tracing::warn!("kernel port {port}: every core has a PMD, so its sender thread shares them");
        }
        let name = format!("ktx-{}", port.chars().take(10).collect::<String>());
        let join = std::thread::Builder::new().name(name).spawn(move || {
            if !cores.is_empty() {
                if let Err(e) = slaswitch_dpdk::pin_current_thread_to(&cores) {
                    tracing::warn!("kernel port sender runs unpinned: {e}");
                }
            }
            let registered = register().map_err(|e| {
                tracing::warn!("kernel port sender runs without an lcore id (no mempool cache): {e}");
            });
            let _ = thread_shared.thread.set(std::thread::current());
            thread_shared.run();
            if registered.is_ok() {
                slaswitch_dpdk::unregister_current_thread();
            }
        })?;
        Ok(KernelSender { shared, join: Some(join) })
    }

    /// What the PMDs hand frames to.
    pub fn shared(&self) -> &Arc<KernelTx> {
        &self.shared
    }
}

impl Drop for KernelSender {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(t) = self.shared.thread.get() {
            t.unpark();
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owe(tx: &KernelTx, source: u16, cycles: u64) {
        tx.owed_cycles[usize::from(source)].fetch_add(cycles, Relaxed);
    }

    #[test]
    fn each_source_is_charged_what_it_is_owed_once() {
        let tx = KernelTx::new(EthPort(0), Arc::default(), Arc::default(), 1_000_000_000);
        owe(&tx, 3, 100);
        owe(&tx, 7, 50);
        owe(&tx, 3, 20);
        assert_eq!((tx.take_owed(3), tx.take_owed(7), tx.take_owed(9)), (120, 50, 0));
        assert_eq!((tx.take_owed(3), tx.take_owed(7)), (0, 0), "charged twice");
        assert_eq!(tx.take_owed(u16::MAX), 0);
    }
}
