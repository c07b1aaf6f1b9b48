//! The three stages a batch passes through on a PMD thread (seed 000 Sec. III-A, Eq. 1:
//! C = C_ingress + C_classification + C_egress), and the per-port state they keep:
//! 1. [`Stages::ingress`]: `rx_burst` from the port, then its ingress policer and, while the
//!    NIC-bottleneck fallback is engaged, its byte limit (seed 000 Sec. VII), as OVS-DPDK polices
//!    in its rx path;
//! 2. [`Stages::classify`] (`classify`): parse, exact-match cache, megaflow cache, tuple space
//!    search on a miss of both (`crate::flow_caches`), actions;
//! 3. [`Stages::egress`]: packets grouped per output port, one `tx_burst` each.
//!
//! The stages do no timing: the PMD loop (`crate::pmd`) reads the TSC between them and charges
//! the port. A batch is flushed before the next port is polled, so every packet in the egress
//! stage came from the batch's own port and the egress cycles belong to it entirely (OVS
//! flushes at the end of an iteration and would have to split them by packet count).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use slaswitch_classifier::{FlowKey, MacTable};
use slaswitch_dpdk::{rdtsc, EthPort, MbufBatch, RxPath, MAX_BURST};
use slaswitch_qos::meter::{Color, Srtcm, SrtcmParams};

use crate::counters::RxTotals;
use crate::flow_caches::FlowCaches;
use crate::pmd_config::{PmdConfig, RxPort, TxPort};
use crate::residence::ResidenceStart;
use crate::spin::SpinGuard;
use slaswitch_config::policing::Policer;
use slaswitch_config::ranges::MAX_PORTS;

use crate::paced_tx::{SendCharges, TX_TRIES};

mod classify;
mod offload;

/// What the ingress stage got from a port: frames received, and those left after policing
/// (packed at the front of the batch).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ingress {
    pub(crate) received: usize,
    pub(crate) kept: usize,
}

/// What the egress stage did with a batch: frames it handed on to paced links and kernel
/// ports' senders (they are timed there), and the TSC at which it began its last tx burst (0: none, or the batch's residence
/// is not timed), where the batch's last frame left the switch (`crate::residence`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Egress {
    pub(crate) handed_on: usize,
    pub(crate) handed_tsc: u64,
}

/// The packet path's state on one PMD thread.
pub(crate) struct Stages {
    pub(crate) cfg: Arc<PmdConfig>,
    /// Per rx port (same order as `cfg.rx_ports`): its running totals.
    pub(crate) totals: Vec<RxTotals>,
    /// Per rx port: its policer's state, kept across reconfigurations while the port's
    /// policing settings stay the same.
    policers: Vec<Option<Policer>>,
    /// Per rx port: the queue its next poll starts at (multiqueue ports).
    next_queue: Vec<u16>,
    /// Per rx port: its fallback byte limit (seed 000 Sec. VII), kept like `policers`.
    fallback_meters: Vec<Option<Srtcm>>,
    /// Per rx port (same order as `cfg.rx_ports`), with its number: its flow caches.
    caches: Vec<(u16, FlowCaches)>,
    macs: MacTable,
    /// Pending packets per output port (at most one batch's worth: egress follows every
    /// batch), and their bytes.
    out: Vec<MbufBatch>,
    out_bytes: Vec<u64>,
    dirty: Vec<u16>,
    targets: Vec<u16>,
    rule_hits: Vec<(u64, u64)>,
    rules_touched: Vec<u32>,
    /// The batch's parses (`classify`), kept between batches so none is zeroed per batch.
    keys: [classify::Parsed; MAX_BURST],
    /// What the batch's frames may ask of egress, noted as classification reads them.
    care: offload::BatchCare,
}

impl Stages {
    pub(crate) fn new(cfg: Arc<PmdConfig>) -> Stages {
        let now_ns = cfg.clock.ns(rdtsc());
        Stages {
            macs: MacTable::new(8192, cfg.mac_max_age_tsc),
            totals: cfg.rx_ports.iter().map(|p| p.counters.rx()).collect(),
            policers: cfg.rx_ports.iter().map(|p| p.policing.map(|s| s.policer(now_ns))).collect(),
            fallback_meters: cfg.rx_ports.iter().map(|p| p.purchase_bps.map(|b| fallback_meter(b, now_ns))).collect(),
            caches: cfg.rx_ports.iter().map(|p| (p.number, FlowCaches::new())).collect(),
            next_queue: vec![0; cfg.rx_ports.len()],
            rule_hits: vec![(0, 0); cfg.classifier.rules().len()],
            cfg,
            out: (0..MAX_PORTS).map(|_| MbufBatch::new()).collect(),
            out_bytes: vec![0; MAX_PORTS],
            dirty: Vec::with_capacity(64),
            targets: Vec::with_capacity(MAX_PORTS),
            rules_touched: Vec::with_capacity(64),
            keys: [(FlowKey::ZERO, 0, false); MAX_BURST],
            care: offload::BatchCare::default(),
        }
    }

    /// Takes a new configuration: caches and meters of the ports that stay are kept (unless
    /// the rules changed, which empties the caches), MACs learned on ports that are gone are
    /// forgotten. The caller has published the old totals.
    pub(crate) fn reconfigure(&mut self, cfg: Arc<PmdConfig>) {
        let mut old_caches = std::mem::take(&mut self.caches);
        self.caches = cfg
            .rx_ports
            .iter()
            .map(|p| match old_caches.iter().position(|(n, _)| *n == p.number) {
                Some(i) => old_caches.swap_remove(i),
                None => (p.number, FlowCaches::new()),
            })
            .collect();
        if !Arc::ptr_eq(&cfg.classifier, &self.cfg.classifier) {
            for (_, caches) in &mut self.caches {
                caches.rules_changed(&cfg.classifier);
            }
            self.rule_hits = vec![(0, 0); cfg.classifier.rules().len()];
        }
        for number in 0..self.cfg.tx_ports.len() {
            if self.cfg.tx_ports[number].is_some() && cfg.tx_ports.get(number).is_none_or(|p| p.is_none()) {
                self.macs.flush_port(number as u16);
            }
        }
        self.macs.set_max_age(cfg.mac_max_age_tsc);
        self.totals = cfg.rx_ports.iter().map(|p| p.counters.rx()).collect();
        self.next_queue = vec![0; cfg.rx_ports.len()];
        let now_ns = cfg.clock.ns(rdtsc());
        self.policers = carry_over(&self.cfg, &cfg, &self.policers, |p| p.policing, |spec| spec.policer(now_ns));
        self.fallback_meters =
            carry_over(&self.cfg, &cfg, &self.fallback_meters, |p| p.purchase_bps, |bps| fallback_meter(bps, now_ns));
        self.cfg = cfg;
    }

    /// Publishes every rx port's running totals, and how many megaflows it holds.
    pub(crate) fn publish(&mut self) {
        self.publish_rule_hits();
        for ((p, t), (_, caches)) in self.cfg.rx_ports.iter().zip(&self.totals).zip(&self.caches) {
            p.counters.publish(&RxTotals { megaflows: caches.megaflow_count() as u64, ..*t });
        }
    }

    /// The ingress stage: receives up to `burst` packets from rx port `idx` into the empty
    /// `batch` and polices them at `now_tsc`. An empty poll returns at once.
    #[inline]
    pub(crate) fn ingress(&mut self, idx: usize, batch: &mut MbufBatch, burst: usize, now_tsc: u64) -> Ingress {
        let port = &self.cfg.rx_ports[idx];
        let (eth, queues, path) = (port.eth, port.queues, port.rx_path);
        let received = if queues <= 1 {
            batch.receive(&eth, path, 0, burst)
        } else {
            self.rx_queues(idx, &eth, path, batch, burst, queues)
        };
        if received == 0 {
            return Ingress { received, kept: 0 };
        }
        Ingress { received, kept: self.police(batch, idx, now_tsc) }
    }

    /// Receives up to `burst` packets from the rx queues of a multiqueue port, starting one
    /// queue further each poll so that none is always served last.
    #[inline]
    fn rx_queues(
        &mut self,
        idx: usize,
        eth: &EthPort,
        path: RxPath,
        batch: &mut MbufBatch,
        burst: usize,
        queues: u16,
    ) -> usize {
        let start = self.next_queue[idx];
        self.next_queue[idx] = (start + 1) % queues;
        let mut got = 0;
        for k in 0..queues {
            got += batch.receive(eth, path, (start + k) % queues, burst - got);
            if got == burst {
                break;
            }
        }
        got
    }

    /// Frees from `batch` what the port's policer refuses; returns how many are left.
    #[inline]
    fn police(&mut self, batch: &mut MbufBatch, port_idx: usize, now_tsc: u64) -> usize {
        let n = batch.len();
        let fallback = match self.fallback_meters[port_idx].as_mut() {
            Some(m) if self.cfg.fallback.engaged.load(Ordering::Relaxed) => Some(m),
            _ => None,
        };
        let policer = self.policers[port_idx].as_mut();
        if policer.is_none() && fallback.is_none() {
            return n;
        }
        let now_ns = self.cfg.clock.ns(now_tsc);
        let (mut policed, mut limited) = (0u64, 0u64);
        let (mut policer, mut fallback) = (policer, fallback);
        batch.retain(|m| {
            if let Some(p) = policer.as_mut() {
                if !p.allow(offload::wire_len(m), now_ns) {
                    policed += 1;
                    return false;
                }
            }
            if let Some(f) = fallback.as_mut() {
                // The purchase counts whole frames on the wire (bandwidth.rs).
                if f.color(offload::wire_len(m), now_ns) != Color::Green {
                    limited += 1;
                    return false;
                }
            }
            true
        });
        debug_assert_eq!(batch.len() as u64 + policed + limited, n as u64);
        let st = &mut self.totals[port_idx];
        st.policer_drops += policed;
        if limited > 0 {
            st.fallback_drops += limited;
            self.cfg.fallback.drops.fetch_add(limited, Ordering::Relaxed);
        }
        batch.len()
    }

    /// The egress stage: one tx burst per output port that has packets (a paced port queues
    /// them in the source's queue on its link instead, a kernel port hands them to its sender). Every packet here came from the batch
    /// just classified, polled from rx port `idx`. Frames that carry their sender's offloads are
    /// first made into what their port takes, and those over its MTU dropped (`offload`).
    #[inline]
    pub(crate) fn egress(&mut self, idx: usize, start: ResidenceStart) -> Egress {
        let source = self.cfg.rx_ports[idx].number;
        let mut handed_on = 0;
        let mut handed_tsc = 0;
        while let Some(port) = self.dirty.pop() {
            let p = port as usize;
            let pending = &mut self.out[p];
            let bytes = std::mem::take(&mut self.out_bytes[p]);
            let Some(tx) = self.cfg.tx_ports.get(p).and_then(|t| t.as_ref()) else {
                pending.clear();
                continue;
            };
            if self.care.may_need(tx.max_frame_bytes) && offload::needs_care(pending, tx.max_frame_bytes) {
                let cfg = &self.cfg;
                let mut send = |batch: &mut MbufBatch| {
                    let bytes = batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
                    handed_on += send(cfg, tx, source, start, batch, bytes, &mut handed_tsc);
                };
                offload::send_prepared(cfg, tx, pending, &mut self.totals[idx].offload, &mut send);
            } else {
                handed_on += send(&self.cfg, tx, source, start, pending, bytes, &mut handed_tsc);
            }
            pending.clear();
        }
        self.care = offload::BatchCare::default();
        Egress { handed_on, handed_tsc }
    }

    /// Whether a paced link holds frames waiting for their time.
    pub(crate) fn links_queued(&self) -> bool {
        self.cfg.paced.iter().any(|&number| {
            self.cfg.tx_ports[number as usize].as_ref().and_then(|tx| tx.paced.as_ref()).is_some_and(|l| l.queued() > 0)
        })
    }

    /// Lets every paced port send what its link has had time for, adding to `charges` what
    /// each source VM's frames took. `force` also runs it when nothing waits, so the uplink's
    /// fallback detector sees idle windows too. The PMD's last measured stall ended at
    /// `stall_end_tsc`.
    #[inline]
    pub(crate) fn drain_links(&mut self, force: bool, stall_end_tsc: u64, charges: &mut SendCharges) {
        if self.cfg.paced.is_empty() {
            return;
        }
        let now_ns = self.cfg.clock.ns(rdtsc());
        for &number in &self.cfg.paced {
            let Some(tx) = self.cfg.tx_ports[number as usize].as_ref() else { continue };
            let Some(link) = tx.paced.as_ref() else { continue };
            if link.queued() == 0 && !force {
                continue;
            }
            link.drain(&tx.device(), now_ns, stall_end_tsc, &self.cfg.fallback, charges);
        }
    }
}

/// Sends `pending` (of `bytes`) from port `source` on `tx`: one tx burst (its start in
/// `handed_tsc` when the batch's residence is timed), or into the source's queue on a paced
/// port's link or to a kernel port's sender, which time their residence from `start`. What the
/// device did not take stays in `pending`. Returns the frames handed on to a link or sender.
#[inline]
fn send(
    cfg: &PmdConfig,
    tx: &TxPort,
    source: u16,
    start: ResidenceStart,
    pending: &mut MbufBatch,
    bytes: u64,
    handed_tsc: &mut u64,
) -> usize {
    match (tx.paced.as_ref(), tx.kernel.as_ref()) {
        (Some(link), _) => {
            let now_ns = cfg.clock.ns(rdtsc());
            let frames = pending.len();
            link.send(pending, source, start, &tx.device(), now_ns, &cfg.fallback);
            frames
        }
        (None, Some(sender)) => sender.hand(pending, source, start),
        (None, None) => {
            // Only a timed batch needs the time (`crate::residence`): no clock read otherwise.
            if start.since_tsc != 0 {
                *handed_tsc = rdtsc();
            }
            let _guard = cfg.shared_tx.then(|| SpinGuard::lock(&tx.lock));
            let offered = pending.len();
            let sent = pending.tx_burst_retrying(&tx.eth, TX_TRIES);
            let unsent_bytes: u64 = pending.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
            let (sent_bytes, dropped) = (bytes - unsent_bytes, (offered - sent) as u64);
            // One PMD: it alone sends on (and counts drops of) a port that is neither paced
            // nor a kernel port, so its counters need no locked adds.
            match cfg.shared_tx {
                true => tx.counters.add_tx(sent as u64, sent_bytes, dropped),
                false => tx.counters.add_tx_sole_writer(sent as u64, sent_bytes, dropped),
            }
            0
        }
    }
}

/// Per-rx-port meter state for a new configuration: a port whose `setting` is unchanged keeps
/// its meter (and so its tokens); a new or changed setting starts a fresh one.
fn carry_over<S: PartialEq + Copy, M: Copy>(
    old: &PmdConfig,
    new: &PmdConfig,
    old_state: &[Option<M>],
    setting: impl Fn(&RxPort) -> Option<S>,
    fresh: impl Fn(S) -> M,
) -> Vec<Option<M>> {
    new.rx_ports
        .iter()
        .map(|p| {
            let s = setting(p)?;
            let kept = old.rx_ports.iter().position(|o| o.number == p.number && setting(o) == Some(s));
            Some(kept.and_then(|i| old_state[i]).unwrap_or_else(|| fresh(s)))
        })
        .collect()
}

/// The fallback's byte limit for a purchase of `bps`: a burst of 50 ms at the purchase, at least
/// 64 KB, so an honest VM whose frames arrive bunched (its ring filled while the PMD or its own
/// core was busy) is not cut.
fn fallback_meter(bps: u64, now_ns: u64) -> Srtcm {
    let rate_bytes = bps / 8;
    Srtcm::new(
        SrtcmParams { cir_bytes_per_sec: rate_bytes, cbs_bytes: (rate_bytes / 20).max(65_536), ebs_bytes: 0 },
        now_ns,
    )
}
