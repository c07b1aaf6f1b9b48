//! A PMD (poll-mode driver) thread: pinned to one core, it asks its poll order for the next
//! port, runs the port's batch through the three stages (`crate::stages`) and charges the TSC
//! cycles of each stage to that port (seed 000 Sec. III-A, Eq. 1), then hands the batch's cost
//! to the poll order, which is C2QoS's scheduler when ports have C2QoS settings
//! (`crate::poll_order`). One TSC read per stage boundary, reused as the next stage's start, so
//! the stages of all batches plus the empty polls add up to the thread's whole time.
//!
//! No lock on the hot path: the control plane sends a new [`PmdConfig`] over a channel, which the
//! thread checks between passes and acknowledges once it no longer uses the old one.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use slaswitch_dpdk::{rdtsc, MbufBatch};

use crate::counters::{PmdCounters, PmdTotals};
use crate::drift::{Drift, DriftInputs};
use crate::idle_polling::IdlePolling;
use crate::paced_tx::SendCharges;
use crate::pmd_config::{PmdConfig, PmdMessage};
use crate::pmd_sleep::{tighten_timer_slack, PmdSleep};
use crate::poll_order::{Pick, PollOrder};
use crate::probe::{NoProbe, OverheadProbe, Probe, ProbeCounters, ProbeSettings};
use crate::residence::{PollTimes, Residence, ResidenceStart};
use crate::stages::{Ingress, Stages};

/// Passes between two publications of the counters.
const PUBLISH_EVERY_PASSES: u64 = 1024;
/// Passes between two looks at the control channel while busy.
const CHECK_CONTROL_EVERY_PASSES: u64 = 64;
/// Passes between two looks at whether a purchase-ledger or drift window has ended (a busy
/// pass of many ports takes tens of microseconds, so 1024 passes would be too coarse).
const QOS_WINDOWS_EVERY_PASSES: u64 = 16;
// A publication's time is taken off the ports' batches with the windows' (`run_with`).
const _: () = assert!(PUBLISH_EVERY_PASSES.is_multiple_of(QOS_WINDOWS_EVERY_PASSES));
/// How long a PMD with no port waits for a configuration at a time.
const NO_PORTS_WAIT: Duration = Duration::from_millis(10);
/// A stage running longer than this was stalled by the host (its vCPU preempted, a page
/// fault), not slowed by its packets: the costliest full batch takes a few tens of
/// microseconds. Charged to the port, a stall would put it deep in debt for the host's doing.
pub const STALL_NS: u64 = 100_000;

/// The PMD thread's body. Returns when told to quit. With `probe`, it also measures C2QoS's
/// own work (`crate::probe`).
pub fn run(
    cfg: Arc<PmdConfig>,
    control: Receiver<PmdMessage>,
    counters: Arc<PmdCounters>,
    probe: Option<(ProbeSettings, Arc<ProbeCounters>)>,
) {
    match probe {
        None => run_with(cfg, control, counters, NoProbe),
        Some((settings, probe_counters)) => {
            let probe = OverheadProbe::new(settings, probe_counters, cfg.tsc_hz, stall_cycles(cfg.tsc_hz));
            run_with(cfg, control, counters, probe)
        }
    }
}

/// The loop: a pass asks the poll order for ports until it says the pass is over, serves each
/// through the three stages and charges it (a quiet port C2QoS does not schedule is served
/// only when its look is due, `crate::idle_polling`); between passes, paced links are drained,
/// counters published and the control channel checked.
fn run_with<P: Probe>(cfg: Arc<PmdConfig>, control: Receiver<PmdMessage>, counters: Arc<PmdCounters>, mut probe: P) {
    let mut pmd = Pmd::new(cfg, counters, probe.clock(rdtsc()));
    if pmd.sleep.enabled() {
        tighten_timer_slack();
    }
    let mut batch = MbufBatch::new();
    let mut t = rdtsc();
    for pass in 1u64.. {
        let (mut had_packets, mut filling) = (false, false);
        pmd.order.start_pass(probe.bypass());
        // The pick of a port whose turn goes on: served again without asking the order.
        let mut turn: Option<Pick> = None;
        loop {
            let now = probe.clock(t);
            let pick = match turn.take() {
                Some(pick) => probe.turn_goes_on(pick),
                None => probe.pick(|| pmd.order.next(now)),
            };
            let (idx, scheduled, burst) = match pick {
                Pick::Port { idx, scheduled, burst } => (idx, scheduled, burst),
                Pick::Idle => {
                    t = pmd.idle(t, true);
                    continue;
                }
                Pick::PassEnd => break,
            };
            if !scheduled && !pmd.idle.due(idx, t) {
                continue;
            }
            let served = pmd.serve(idx, &mut batch, burst, t, pmd.order.decision_cycles(pick));
            pmd.credit_stalls();
            if scheduled {
                let now = probe.clock(served.end_tsc);
                let order = &mut pmd.order;
                let goes_on = probe.charge(served.received, || {
                    order.charge(served.charged_cycles, served.received, served.bytes, served.end_tsc, now)
                });
                turn = goes_on.then_some(pick);
            } else {
                pmd.idle.polled(idx, served.received, served.end_tsc);
            }
            had_packets |= served.received > 0;
            filling |= PmdSleep::filling(served.received, burst);
            t = served.end_tsc;
        }
        // The sends are charged to their VMs, not timed into the next port's batch.
        t += pmd.drain_links(pass.is_multiple_of(CHECK_CONTROL_EVERY_PASSES));
        if pass.is_multiple_of(CHECK_CONTROL_EVERY_PASSES) {
            pmd.charge_kernel_sends();
        }
        pmd.totals.passes += 1;
        probe.end_pass(t, pmd.order.scheduler().is_some(), &pmd.totals, &pmd.stages.totals);
        if pass.is_multiple_of(PUBLISH_EVERY_PASSES) {
            pmd.publish(&mut probe);
        }
        if pass.is_multiple_of(QOS_WINDOWS_EVERY_PASSES) {
            pmd.qos_windows(&mut probe, t);
            // The PMD's own work, no port's: not timed into the next port's batch (seed 000
            // Sec. III-A charges a port the stages of its own packets). Publications fall on
            // these passes too.
            t = pmd.idle(t, true);
        }
        if !had_packets || pass.is_multiple_of(CHECK_CONTROL_EVERY_PASSES) {
            let Some(waited) = pmd.check_control(&control, &mut probe) else { break };
            t = pmd.idle(t, !waited);
        }
        if pmd.sleep.enabled() {
            t = pmd.rest(t, filling);
        }
    }
    pmd.order.fold_waits(&mut pmd.totals);
    pmd.publish_totals();
}

/// What serving one port once came to.
#[derive(Clone, Copy, Debug)]
struct Served {
    /// Packets received, before policing.
    received: usize,
    /// Bytes of the packets kept.
    bytes: u64,
    /// The TSC at the end: the next stage boundary.
    end_tsc: u64,
    /// The cycles charged to the port: its stages, less any stall and the scheduler's decision.
    charged_cycles: u64,
}

/// A PMD thread's state.
struct Pmd {
    stages: Stages,
    order: PollOrder,
    drift: Drift,
    totals: PmdTotals,
    counters: Arc<PmdCounters>,
    /// [`STALL_NS`] in TSC cycles.
    stall_cycles: u64,
    /// Stalled cycles not yet credited to the cycle buckets.
    pending_stall_cycles: u64,
    /// The TSC at which the last stall measured ended (0: none yet): frames whose residence
    /// began before it are left out of the unstalled residence (`crate::residence`).
    stall_end_tsc: u64,
    /// Per rx port (same order as `cfg.rx_ports`): its frames' residence times.
    residence: Vec<Residence>,
    /// When the idle ports outside C2QoS are next polled.
    idle: IdlePolling,
    /// Sleeping between light passes.
    sleep: PmdSleep,
    /// What the paced links' drains spent on each VM's frames, until charged.
    send_charges: SendCharges,
    /// Port number -> index in `cfg.rx_ports` (`u16::MAX`: not polled here).
    rx_of_number: Vec<u16>,
}

impl Pmd {
    fn new(cfg: Arc<PmdConfig>, counters: Arc<PmdCounters>, now: u64) -> Pmd {
        Pmd {
            order: PollOrder::new(&cfg, now),
            drift: Drift::new(now, &cfg),
            residence: residence_of(&cfg),
            rx_of_number: cfg.rx_index_by_number(),
            send_charges: SendCharges::new(),
            idle: idle_polling_of(&cfg, rdtsc()),
            sleep: PmdSleep::new(cfg.max_sleep_us),
            stall_cycles: stall_cycles(cfg.tsc_hz),
            stages: Stages::new(cfg),
            totals: PmdTotals::default(),
            counters,
            pending_stall_cycles: 0,
            stall_end_tsc: 0,
        }
    }

    /// Polls rx port `idx` once for up to `burst` packets into `batch` and runs them through the
    /// three stages, timed from `t`,
    /// the end of the batch before. `decision_cycles` of that time were the scheduler's
    /// decision in between: the PMD's work, not the port's.
    #[inline(always)]
    fn serve(&mut self, idx: usize, batch: &mut MbufBatch, burst: usize, t: u64, decision_cycles: u64) -> Served {
        let ingress = self.stages.ingress(idx, batch, burst, t);
        let t_rx = rdtsc();
        if ingress.received == 0 {
            return self.empty_poll(idx, t, t_rx, burst);
        }
        self.serve_batch(idx, batch, burst, ingress, [t, t_rx], decision_cycles)
    }

    /// Classification and egress of a batch `ingress` received, polled at `t[0]` and received
    /// by `t[1]`. Kept out of line: most polls of a host with many ports are empty, and their
    /// path stays short without this function's frame.
    #[inline(never)]
    fn serve_batch(
        &mut self,
        idx: usize,
        batch: &mut MbufBatch,
        burst: usize,
        ingress: Ingress,
        [t, t_rx]: [u64; 2],
        decision_cycles: u64,
    ) -> Served {
        let bytes = if ingress.kept > 0 { self.stages.classify(batch, idx, t_rx) } else { 0 };
        let t_classified = rdtsc();
        self.order.prefetch_decision();
        let start = ResidenceStart { since_tsc: self.residence[idx].since_tsc(), stall_end_tsc: self.stall_end_tsc };
        let egress = self.stages.egress(idx, start);
        let t_sent = rdtsc();
        // Charged first: a stall in this batch's stages touches its own frames.
        let served = self.charge_stages(idx, ingress, bytes, [t, t_rx, t_classified, t_sent], decision_cycles);
        // Frames a paced link or a kernel port's sender took are timed when they send them; the
        // others left at the last tx burst's start (or, dropped, at the stage's end).
        let left = ingress.kept.saturating_sub(egress.handed_on);
        let sent_tsc = if egress.handed_tsc != 0 { egress.handed_tsc } else { t_sent };
        let at = PollTimes { rx_tsc: t_rx, sent_tsc, stall_end_tsc: self.stall_end_tsc };
        self.residence[idx].poll(at, ingress.received, left, burst);
        served
    }

    /// An empty poll is the PMD's idle time; the port is charged it (a port C2QoS picks pays
    /// for looking, seed 000 Sec. IV-A).
    #[inline]
    fn empty_poll(&mut self, idx: usize, t: u64, t_rx: u64, burst: usize) -> Served {
        let idle = self.unstalled(t_rx - t, t_rx);
        let at = PollTimes { rx_tsc: t_rx, sent_tsc: t_rx, stall_end_tsc: self.stall_end_tsc };
        self.residence[idx].poll(at, 0, 0, burst);
        let st = &mut self.stages.totals[idx];
        st.empty_polls += 1;
        st.idle_cycles += idle;
        self.totals.idle_cycles += idle;
        Served { received: 0, bytes: 0, end_tsc: t_rx, charged_cycles: idle }
    }

    /// Charges a batch's three stages, timed at the boundaries `t`, to its port.
    #[inline]
    fn charge_stages(&mut self, idx: usize, ingress: Ingress, bytes: u64, t: [u64; 4], decision_cycles: u64) -> Served {
        let (mut ingress_cycles, mut classify, mut egress) = (t[1] - t[0], t[2] - t[1], t[3] - t[2]);
        if t[3] - t[0] > self.stall_cycles {
            // Rare: only a batch longer than a stall can hold one; one compare otherwise.
            ingress_cycles = self.unstalled(ingress_cycles, t[1]);
            classify = self.unstalled(classify, t[2]);
            egress = self.unstalled(egress, t[3]);
        }
        let decision = decision_cycles.min(ingress_cycles);
        ingress_cycles -= decision;
        let st = &mut self.stages.totals[idx];
        st.rx_packets += ingress.kept as u64;
        st.rx_bytes += bytes;
        st.batches += u64::from(ingress.kept > 0);
        st.ingress_cycles += ingress_cycles;
        st.classify_cycles += classify;
        st.egress_cycles += egress;
        let charged = ingress_cycles + classify + egress;
        self.totals.busy_cycles += charged + decision;
        Served { received: ingress.received, bytes, end_tsc: t[3], charged_cycles: charged }
    }

    /// Counts the time from `t` to now as idle (less any stall, when `may_stall`); returns now.
    fn idle(&mut self, t: u64, may_stall: bool) -> u64 {
        let now = rdtsc();
        self.totals.idle_cycles += if may_stall { self.unstalled(now - t, now) } else { now - t };
        self.credit_stalls();
        now
    }

    /// A stage that took longer than [`STALL_NS`] (and ended at `end_tsc`) was interrupted: the
    /// time beyond that is the host's, not the port's. Returns what the port is charged and
    /// counts the rest as stalled.
    #[inline]
    fn unstalled(&mut self, cycles: u64, end_tsc: u64) -> u64 {
        if cycles <= self.stall_cycles {
            return cycles;
        }
        self.stall_end_tsc = self.stall_end_tsc.max(end_tsc);
        self.totals.stalled_cycles += cycles - self.stall_cycles;
        self.pending_stall_cycles += cycles - self.stall_cycles;
        self.stall_cycles
    }

    /// Sleeps after a pass that found no queue filling (`crate::pmd_sleep`); the time asleep
    /// is the PMD's idle time, not a stall. Returns now.
    fn rest(&mut self, t: u64, filling: bool) -> u64 {
        let pause = self.sleep.after_pass(filling, self.stages.links_queued());
        if pause.is_zero() {
            return t;
        }
        let t = self.idle(t, true);
        std::thread::sleep(pause);
        self.idle(t, false)
    }

    /// Lets the paced links send what they have had time for, and charges each VM what sending
    /// its frames took (seed 000 Sec. IV-A charges a stage to the port whose packets it
    /// handled): to its egress stage, which drift compensation reads, and under C2QoS to its
    /// cycle bucket. A VM this PMD does not poll is not charged here, nor anyone for a drain
    /// the host stalled. Returns the drain's ticks, so that the next port's batch is not timed
    /// with them.
    fn drain_links(&mut self, force: bool) -> u64 {
        // Most passes find no frame waiting: no clock read for them.
        if self.stages.cfg.paced.is_empty() || !(force || self.stages.links_queued()) {
            return 0;
        }
        let start = rdtsc();
        self.stages.drain_links(force, self.stall_end_tsc, &mut self.send_charges);
        let ticks = rdtsc() - start;
        let spent = self.unstalled(ticks, start + ticks);
        self.totals.busy_cycles += spent;
        for (source, cycles) in self.send_charges.take() {
            let idx = self.rx_of_number.get(usize::from(source)).copied().unwrap_or(u16::MAX);
            if spent < ticks || idx == u16::MAX {
                continue;
            }
            self.stages.totals[usize::from(idx)].egress_cycles += cycles;
            self.order.charge_outside_batch(usize::from(source), cycles);
        }
        ticks
    }

    /// Charges each VM this PMD polls what the kernel ports' senders spent sending its frames
    /// (`crate::kernel_tx`): to its egress stage and, under C2QoS, its cycle bucket, where the
    /// send was when the PMD made it. The PMD itself was not busy for them.
    fn charge_kernel_sends(&mut self) {
        if self.stages.cfg.kernel_senders.is_empty() {
            return;
        }
        let cfg = self.stages.cfg.clone();
        let (totals, order) = (&mut self.stages.totals, &mut self.order);
        for &number in &cfg.kernel_senders {
            let Some(sender) = cfg.tx_ports[usize::from(number)].as_ref().and_then(|t| t.kernel.as_ref()) else {
                continue;
            };
            for (idx, p) in cfg.rx_ports.iter().enumerate() {
                let cycles = sender.take_owed(p.number);
                if cycles > 0 {
                    totals[idx].egress_cycles += cycles;
                    order.charge_outside_batch(usize::from(p.number), cycles);
                }
            }
        }
    }

    /// Hands the stalls seen since the last call to the cycle buckets.
    #[inline]
    fn credit_stalls(&mut self) {
        if self.pending_stall_cycles > 0 {
            self.order.credit_stall(std::mem::take(&mut self.pending_stall_cycles));
        }
    }

    /// Takes a message from the control plane, waiting a little when there is no port to
    /// poll. Returns whether it waited, or `None` when told to quit.
    fn check_control<P: Probe>(&mut self, control: &Receiver<PmdMessage>, probe: &mut P) -> Option<bool> {
        let waits = self.stages.cfg.rx_ports.is_empty();
        let message = if waits {
            match control.recv_timeout(NO_PORTS_WAIT) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        } else {
            match control.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return None,
            }
        };
        match message {
            Some(PmdMessage::Config(cfg, ack)) => {
                self.reconfigure(cfg, probe);
                let _ = ack.send(());
            }
            Some(PmdMessage::Quit) => return None,
            None => {}
        }
        Some(waits)
    }

    /// Swaps in a new configuration: the stages keep the caches and meters of the ports that
    /// stay, the poll order their tokens and classes, drift compensation their factors.
    fn reconfigure<P: Probe>(&mut self, cfg: Arc<PmdConfig>, probe: &mut P) {
        self.publish_totals();
        self.stages.reconfigure(cfg);
        self.residence = residence_of(&self.stages.cfg);
        self.rx_of_number = self.stages.cfg.rx_index_by_number();
        self.idle = idle_polling_of(&self.stages.cfg, rdtsc());
        let now = probe.clock(rdtsc());
        self.order.reconfigure(&self.stages.cfg, now, &mut self.totals);
        self.drift.reset(&self.stages.cfg, self.order.scheduler_mut(), now);
        probe.reconfigured(rdtsc());
    }

    /// Publishes the counters, and C2QoS's state for `qos-show` (not while the probe has the
    /// scheduler bypassed).
    fn publish<P: Probe>(&mut self, probe: &mut P) {
        self.order.fold_waits(&mut self.totals);
        self.publish_totals();
        probe.publish();
        if probe.bypass() {
            return;
        }
        let (order, stages) = (&mut self.order, &self.stages);
        probe.scheduler_work(order.scheduler().is_some(), || order.publish(&stages.cfg));
    }

    /// C2QoS's windows: the purchase ledgers and drift compensation, each when its window has
    /// ended (not while the probe has the scheduler bypassed).
    fn qos_windows<P: Probe>(&mut self, probe: &mut P, t: u64) {
        if probe.bypass() {
            return;
        }
        let now = probe.clock(t);
        let (order, drift, stages) = (&mut self.order, &mut self.drift, &self.stages);
        let inputs = DriftInputs {
            cfg: &stages.cfg,
            totals: &stages.totals,
            stalled_cycles: self.totals.stalled_cycles,
            counters: &self.counters,
        };
        probe.scheduler_work(order.scheduler().is_some(), || drift.tick(now, inputs, order.scheduler_mut()));
    }

    fn publish_totals(&mut self) {
        self.stages.publish();
        for (p, r) in self.stages.cfg.rx_ports.iter().zip(&mut self.residence) {
            p.counters.publish_residence(&r.frames, &r.unstalled, &mut r.touched);
        }
        self.counters.publish(&self.totals);
    }
}

/// Each rx port's residence times, going on from what its counters last published.
fn residence_of(cfg: &PmdConfig) -> Vec<Residence> {
    cfg.rx_ports
        .iter()
        .map(|p| Residence::new(cfg.tsc_hz, p.counters.residence(), p.counters.residence_unstalled()))
        .collect()
}

/// Every rx port polled every pass until it has been quiet for a while.
fn idle_polling_of(cfg: &PmdConfig, now_tsc: u64) -> IdlePolling {
    IdlePolling::new(cfg.rx_ports.len(), cfg.idle_poll_us, cfg.tsc_hz, now_tsc)
}

/// [`STALL_NS`] in TSC cycles.
fn stall_cycles(tsc_hz: u64) -> u64 {
    (u128::from(tsc_hz) * u128::from(STALL_NS) / 1_000_000_000) as u64
}

/// The cores this machine has online, whatever the calling thread may run on: a daemon started
/// under a narrower affinity (`taskset`, the test bed's shield) still places its threads on any.
pub fn online_cores() -> usize {
    // SAFETY: sysconf takes no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    match n > 0 {
        true => n as usize,
        false => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Pins the calling thread to `core` (the threads and processes it starts later inherit it).
pub fn pin_to_core(core: usize) -> Result<(), crate::DatapathError> {
    slaswitch_dpdk::pin_current_thread(core).map_err(|cause| crate::DatapathError::Pin { core, cause })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_core_still_counts_every_online_core() {
        let processors =
            std::fs::read_to_string("/proc/cpuinfo").unwrap().lines().filter(|l| l.starts_with("processor")).count();
        let counted = std::thread::spawn(|| {
            pin_to_core(0).unwrap();
            (std::thread::available_parallelism().unwrap().get(), online_cores())
        })
        .join()
        .unwrap();
        assert_eq!(counted, (1, processors));
    }
}
