//! Paced ports: a port with `link_rate_bps` sends no faster than a NIC of that line rate. The
//! egress stage puts each frame into its source VM's queue on the port; the port's link
//! scheduler ([`LinkScheduler`]: FIFO, ANCS, SoftBW, PIE-VDE or the rate-limit baseline)
//! decides which frame goes next, and the frames are released as the link serialises them
//! ([`LinkPacer`]). With a PCI NIC the same code paces to the NIC's line rate; the NIC's own
//! ring then only ever holds what the scheduler released.
//!
//! The uplink's link also runs the NIC-bottleneck detector (seed 000 Sec. VII) while its
//! scheduler is FIFO, and publishes its verdict in [`Fallback`], which every PMD reads before
//! policing.
//!
//! The link's state is owned by its spin lock, which every PMD takes to queue and to drain, and
//! the control thread takes to reconfigure the scheduler. Sending on the device also takes the
//! port's tx lock (always after the link's), as every unpaced send does, so a port that stops
//! or starts being paced is never transmitted on by two PMDs at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use slaswitch_dpdk::{rdtsc, EthPort, Mbuf, MbufBatch, MAX_BURST};
use slaswitch_qos::cpu::{FallbackConfig, FallbackDetector};
use slaswitch_qos::egress::link_scheduler::{LinkPlan, LinkScheduler, QueueView, Queued};
use slaswitch_qos::link::{LinkPacer, WIRE_OVERHEAD_BYTES};

use crate::counters::PortCounters;
use crate::histogram::{Histogram, SharedHistogram};
use crate::residence::{ResidenceStart, SharedResidence, TicksToNs};
use crate::spin::{SpinGuard, SpinLock};
use slaswitch_config::ranges::MAX_PORTS;

/// How much idle wire time a link may make up after its scheduler held frames back (a maximum,
/// a credit or a limit run out): that time must not be sent later as a burst above the line
/// rate. Frames that only waited for a late PMD are all made up, as a NIC's queue would.
const MAX_LATENESS_NS: u64 = 20_000;

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

/// One source VM's traffic through a paced port, readable without the lock.
#[derive(Debug, Default)]
pub struct VmLinkCounters {
    /// Frames sent onto the link.
    pub sent_packets: AtomicU64,
    /// Their wire bytes (frames plus [`WIRE_OVERHEAD_BYTES`]).
    pub sent_wire_bytes: AtomicU64,
    /// Frames its full queue (or the device) dropped.
    pub dropped: AtomicU64,
    /// TSC cycles the scheduler spent on its frames: queueing them, and its share of the
    /// dequeues that released them.
    pub sched_cycles: AtomicU64,
}

impl VmLinkCounters {
    /// The counters now.
    pub fn read(&self) -> LinkOut {
        LinkOut {
            sent_packets: self.sent_packets.load(Relaxed),
            sent_wire_bytes: self.sent_wire_bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            sched_cycles: self.sched_cycles.load(Relaxed),
        }
    }
}

/// A source VM's frames through paced ports, read from [`VmLinkCounters`]: what `pmd-stats`
/// and `link-show` show of the link schedulers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkOut {
    /// Frames sent onto paced links.
    pub sent_packets: u64,
    /// Their wire bytes.
    pub sent_wire_bytes: u64,
    /// Frames dropped at its full queues.
    pub dropped: u64,
    /// TSC cycles the link schedulers spent on its frames.
    pub sched_cycles: u64,
}

impl LinkOut {
    /// Adds another link's counters of the same VM.
    pub fn add(&mut self, o: LinkOut) {
        self.sent_packets += o.sent_packets;
        self.sent_wire_bytes += o.sent_wire_bytes;
        self.dropped += o.dropped;
        self.sched_cycles += o.sched_cycles;
    }
}

/// A frame in a paced link's queue, with the TSC at which its residence in the switch began
/// (0: not timed, `crate::residence`) and the TSC at which it joined the queue.
pub(crate) struct Waiting {
    mbuf: Mbuf,
    since_tsc: u64,
    queued_tsc: u64,
}

/// One source VM's frames that left through the link: their residence in the switch (from the
/// poll that found them to the link handing them to the port's driver, the queue included) and
/// their wait in the link's queue alone, nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct LinkResidence {
    /// From the poll that found each frame to the link handing it to the driver.
    pub total: Histogram,
    /// From joining the link's queue to being handed to the driver.
    pub queue_wait: Histogram,
    /// `total` of the frames no stall of the sending PMD touched (`crate::residence`).
    pub unstalled: Histogram,
}

/// [`LinkResidence`] as the link counts it, read without the link's lock.
#[derive(Debug, Default)]
struct LinkResidenceCounts {
    residence: SharedResidence,
    queue_wait: SharedHistogram,
}

impl LinkResidenceCounts {
    fn read(&self) -> LinkResidence {
        let (total, unstalled) = self.residence.read();
        LinkResidence { total, queue_wait: self.queue_wait.read(), unstalled }
    }

    fn clear(&self) {
        self.residence.clear();
        self.queue_wait.clear();
    }
}

struct LinkState {
    pacer: LinkPacer,
    sched: LinkScheduler<Waiting>,
    detector: Option<FallbackDetector>,
    /// The last drain ended with the wire free and frames waiting that the scheduler held.
    held: bool,
}

/// One paced port's link, scheduler and queues.
pub struct PacedLink {
    state: SpinLock<LinkState>,
    /// Frames waiting, readable without the lock (a cheap "anything to do?").
    queued: AtomicUsize,
    rate_bps: AtomicU64,
    /// By source port number.
    per_vm: Box<[VmLinkCounters]>,
    /// By source port number, made on its first frame; written under the lock by the PMD
    /// sending, read without it (`SharedHistogram` says why).
    residence: Box<[OnceLock<Box<LinkResidenceCounts>>]>,
    /// Times its frames' residence.
    clock: TicksToNs,
}

impl PacedLink {
    /// A link for `plan`; `watch_for_fallback`: the uplink, with its detector running.
    /// `tsc_hz` times its frames' residence.
    pub fn new(
        plan: LinkPlan,
        watch_for_fallback: bool,
        now_ns: u64,
        tsc_hz: u64,
    ) -> Result<PacedLink, slaswitch_qos::QosError> {
        let rate_bps = plan.settings.link_rate_bps;
        Ok(PacedLink {
            state: SpinLock::new(LinkState {
                pacer: LinkPacer::new(rate_bps, now_ns),
                sched: LinkScheduler::new(plan, now_ns)?,
                detector: watch_for_fallback.then(|| FallbackDetector::new(FallbackConfig::default(), now_ns)),
                held: false,
            }),
            queued: AtomicUsize::new(0),
            rate_bps: AtomicU64::new(rate_bps),
            per_vm: (0..MAX_PORTS).map(|_| VmLinkCounters::default()).collect(),
            residence: (0..MAX_PORTS).map(|_| OnceLock::new()).collect(),
            clock: TicksToNs::new(tsc_hz),
        })
    }

    /// Its line rate.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps.load(Relaxed)
    }

    /// Frames waiting.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// Source port `number`'s counters.
    pub fn vm_counters(&self, number: u16) -> &VmLinkCounters {
        &self.per_vm[usize::from(number)]
    }

    /// Takes a new plan live: no queued frame is lost except those of VMs the plan no longer
    /// has (freed and counted as theirs). Refused whole, changing nothing, if the scheduler
    /// refuses the plan.
    pub fn configure(
        &self,
        plan: LinkPlan,
        watch_for_fallback: bool,
        now_ns: u64,
    ) -> Result<(), slaswitch_qos::QosError> {
        let mut s = self.state.lock();
        let gone: Vec<usize> = s.sched.plan().vms.keys().filter(|q| !plan.vms.contains_key(q)).copied().collect();
        let gone: Vec<(usize, usize)> =
            gone.into_iter().map(|q| (q, s.sched.view(q).map_or(0, |v| v.packets))).collect();
        let rate_bps = plan.settings.link_rate_bps;
        let freed = s.sched.reconfigure(plan, now_ns)?;
        for (q, lost) in gone {
            if let Some(r) = self.residence.get(q).and_then(OnceLock::get) {
                r.clear();
            }
            self.per_vm[q].dropped.fetch_add(lost as u64, Relaxed);
        }
        drop(freed);
        if rate_bps != s.pacer.rate_bps() {
            s.pacer.set_rate(rate_bps);
            self.rate_bps.store(rate_bps, Relaxed);
        }
        match (&s.detector, watch_for_fallback) {
            (None, true) => s.detector = Some(FallbackDetector::new(FallbackConfig::default(), now_ns)),
            (Some(_), false) => s.detector = None,
            _ => {}
        }
        self.queued.store(s.sched.backlog_packets(), Relaxed);
        Ok(())
    }

    /// Source port `number`'s frames that left through this link: residence and queue wait.
    pub fn residence(&self, number: u16) -> Option<LinkResidence> {
        Some(self.residence.get(usize::from(number))?.get()?.read())
    }

    /// Frames the latency class sent ahead of the scheduler's choice.
    pub fn sent_ahead(&self) -> u64 {
        self.state.lock().sched.sent_ahead()
    }

    /// What each VM has waiting and its state in the scheduler.
    pub fn view(&self, numbers: &[u16]) -> (LinkPlan, Vec<Option<QueueView>>) {
        let mut s = self.state.lock();
        let views = numbers.iter().map(|&n| s.sched.view(usize::from(n))).collect();
        (s.sched.plan().clone(), views)
    }

    /// Queues `frames` from source port `source`, whose residence began at `start.since_tsc`
    /// (0: not timed; what its queue cannot take is freed and counted as dropped, for the port
    /// and for the VM), then sends what the link has had time for, as [`Self::drain`] does.
    pub(crate) fn send(
        &self,
        frames: &mut MbufBatch,
        source: u16,
        start: ResidenceStart,
        port: &TxDevice,
        now_ns: u64,
        fallback: &Fallback,
    ) {
        let mut s = self.state.lock();
        self.enqueue(&mut s, frames, source, start.since_tsc, now_ns, port.counters);
        // Inside the sending port's egress stage: that port is charged whatever is sent now.
        self.drain_locked(&mut s, port, (now_ns, start.stall_end_tsc), fallback, None);
    }

    /// Sends what the scheduler releases and the link has had time for by `now_ns`, and adds
    /// to `charges` what sending each source VM's frames took; runs the fallback detector when
    /// this is the uplink. The sending PMD's last measured stall ended at `stall_end_tsc`.
    pub(crate) fn drain(
        &self,
        port: &TxDevice,
        now_ns: u64,
        stall_end_tsc: u64,
        fallback: &Fallback,
        charges: &mut SendCharges,
    ) {
        self.drain_locked(&mut self.state.lock(), port, (now_ns, stall_end_tsc), fallback, Some(charges));
    }

    fn enqueue(
        &self,
        s: &mut LinkState,
        frames: &mut MbufBatch,
        source: u16,
        since_tsc: u64,
        now_ns: u64,
        counters: &PortCounters,
    ) {
        let t0 = rdtsc();
        if self.queued.load(Relaxed) == 0 && !frames.is_empty() {
            s.pacer.queue_was_empty(now_ns);
        }
        let mut dropped = 0u64;
        for m in frames.drain() {
            let wire_bytes = m.pkt_len() + WIRE_OVERHEAD_BYTES;
            let waiting = Waiting { mbuf: m, since_tsc, queued_tsc: t0 };
            match s.sched.enqueue(usize::from(source), wire_bytes, waiting, now_ns) {
                Queued::Yes => {}
                // Dropping the frame the queue gave back frees it.
                Queued::DroppedOldest(_) | Queued::No(_) => dropped += 1,
            }
        }
        self.queued.store(s.sched.backlog_packets(), Relaxed);
        let vm = &self.per_vm[usize::from(source)];
        if dropped > 0 {
            counters.add_tx(0, 0, dropped);
            vm.dropped.fetch_add(dropped, Relaxed);
        }
        vm.sched_cycles.fetch_add(rdtsc() - t0, Relaxed);
    }

    /// Times frames handed to the port's driver at `left_tsc` (`crate::residence`: where a
    /// frame leaves the switch): residence (those timed, and apart those no stall that ended
    /// by `stall_end_tsc` touched) and queue wait, per source.
    fn record_residence(&self, _held: &mut LinkState, sources: &[u16], stamps: &[(u64, u64)], tsc: (u64, u64)) {
        let (left_tsc, stall_end_tsc) = tsc;
        for (&src, &(since_tsc, queued_tsc)) in sources.iter().zip(stamps) {
            let Some(slot) = self.residence.get(usize::from(src)) else { continue };
            // `_held`, the link's state, proves this PMD is the one writer now.
            let r = slot.get_or_init(Box::default);
            r.queue_wait.record(self.clock.ns(left_tsc.saturating_sub(queued_tsc)));
            r.residence.record(self.clock, ResidenceStart { since_tsc, stall_end_tsc }, left_tsc);
        }
    }

    /// `now`: the time in nanoseconds, and the TSC at which the sending PMD's last measured
    /// stall ended.
    fn drain_locked(
        &self,
        s: &mut LinkState,
        port: &TxDevice,
        now: (u64, u64),
        fallback: &Fallback,
        mut charges: Option<&mut SendCharges>,
    ) {
        let (now_ns, stall_end_tsc) = now;
        let counters = port.counters;
        if s.held {
            s.pacer.bound_lateness(now_ns, MAX_LATENESS_NS);
        }
        s.held = false;
        let mut burst = MbufBatch::new();
        let mut sources = [0u16; MAX_BURST];
        let mut frame_lens = [0u32; MAX_BURST];
        let mut stamps = [(0u64, 0u64); MAX_BURST];
        loop {
            let t0 = rdtsc();
            let mut n = 0;
            let mut bytes = 0u64;
            while n < MAX_BURST && s.pacer.may_send(now_ns) {
                let Some(d) = s.sched.dequeue(now_ns) else {
                    s.held = s.sched.backlog_packets() > 0;
                    break;
                };
                let frame_bytes = d.len_bytes - WIRE_OVERHEAD_BYTES;
                s.pacer.send(frame_bytes);
                bytes += u64::from(frame_bytes);
                frame_lens[n] = d.item.mbuf.pkt_len();
                sources[n] = d.queue as u16;
                stamps[n] = (d.item.since_tsc, d.item.queued_tsc);
                // Room for it: `n` stays below the batch's capacity.
                let _ = burst.push(d.item.mbuf);
                n += 1;
            }
            if n == 0 {
                break;
            }
            let handed_tsc = rdtsc();
            let share = (handed_tsc - t0) / n as u64;
            let device = SpinGuard::lock(port.lock);
            let sent = burst.tx_burst_retrying(&port.eth, TX_TRIES);
            drop(device);
            self.record_residence(s, &sources[..sent], &stamps[..sent], (handed_tsc, stall_end_tsc));
            if let Some(c) = charges.as_deref_mut() {
                let each = (rdtsc() - t0) / n as u64;
                sources[..n].iter().for_each(|&src| c.add(src, each));
            }
            for (i, (&src, &len)) in sources[..n].iter().zip(&frame_lens[..n]).enumerate() {
                let vm = &self.per_vm[usize::from(src)];
                vm.sched_cycles.fetch_add(share, Relaxed);
                if i < sent {
                    vm.sent_packets.fetch_add(1, Relaxed);
                    vm.sent_wire_bytes.fetch_add(u64::from(len + WIRE_OVERHEAD_BYTES), Relaxed);
                } else {
                    vm.dropped.fetch_add(1, Relaxed);
                }
            }
            let unsent_bytes: u64 = frame_lens[sent..n].iter().map(|&l| u64::from(l)).sum();
            counters.add_tx(sent as u64, bytes - unsent_bytes, (n - sent) as u64);
            burst.clear();
        }
        self.queued.store(s.sched.backlog_packets(), Relaxed);
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

/// What a paced link's drains spent sending each source VM's frames (its share of the
/// scheduler's dequeues and of the driver's tx bursts), for the PMD to charge the VMs
/// (`crate::pmd`). By source port number.
pub(crate) struct SendCharges {
    cycles: Box<[u64]>,
    /// The numbers with cycles, each once.
    dirty: Vec<u16>,
}

impl SendCharges {
    pub(crate) fn new() -> SendCharges {
        SendCharges { cycles: vec![0; MAX_PORTS].into_boxed_slice(), dirty: Vec::with_capacity(MAX_PORTS) }
    }

    fn add(&mut self, source: u16, cycles: u64) {
        let Some(c) = self.cycles.get_mut(usize::from(source)) else { return };
        if *c == 0 && cycles > 0 {
            self.dirty.push(source);
        }
        *c += cycles;
    }

    /// Each source with its cycles, once, leaving none.
    pub(crate) fn take(&mut self) -> impl Iterator<Item = (u16, u64)> + '_ {
        let cycles = &mut self.cycles;
        self.dirty.drain(..).map(move |s| (s, std::mem::take(&mut cycles[usize::from(s)])))
    }
}

/// Tx bursts tried per batch when a device's ring is momentarily full (OVS:
/// vhost-tx-retries), by the paced links' drains and by unpaced sends alike.
pub(crate) const TX_TRIES: usize = 4;

/// What sending on a paced port's device takes: the device, its tx lock and its counters.
pub struct TxDevice<'a> {
    /// The device.
    pub eth: EthPort,
    /// The port's tx lock, held around each `tx_burst`.
    pub lock: &'a AtomicBool,
    /// The port's counters.
    pub counters: &'a PortCounters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_charges_give_each_source_its_sum_once_and_forget_it() {
        let mut c = SendCharges::new();
        c.add(3, 100);
        c.add(7, 50);
        c.add(3, 20);
        c.add(9, 0);
        c.add(u16::MAX, 10);
        let mut got: Vec<(u16, u64)> = c.take().collect();
        got.sort_unstable();
        assert_eq!(got, vec![(3, 120), (7, 50)]);
        assert_eq!(c.take().count(), 0);
        c.add(7, 5);
        assert_eq!(c.take().collect::<Vec<_>>(), vec![(7, 5)]);
    }
}
