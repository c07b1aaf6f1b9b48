//! The three stages a batch passes through on a PMD thread (seed 000 Sec. III-A, Eq. 1:
//! C = C_ingress + C_classification + C_egress), and the per-port state they keep:
//! 1. [`Stages::ingress`]: `rx_burst` from the port, then its ingress policer and, while the
//!    NIC-bottleneck fallback is engaged, its byte limit (seed 000 Sec. VII), as OVS-DPDK polices
//!    in its rx path;
//! 2. [`Stages::classify`]: parse, exact-match cache, megaflow cache, tuple space search on a
//!    miss of both (`crate::flow_caches`), actions;
//! 3. [`Stages::egress`]: packets grouped per output port, one `tx_burst` each.
//!
//! The stages do no timing: the PMD loop (`crate::pmd`) reads the TSC between them and charges
//! the port. A batch is flushed before the next port is polled, so every packet in the egress
//! stage came from the batch's own port and the egress cycles belong to it entirely (OVS
//! flushes at the end of an iteration and would have to split them by packet count).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::mac_learning::is_multicast;
use slaswitch_classifier::{check_frame, parse_frame, Action, FlowKey, MacTable};
use slaswitch_dpdk::{rdtsc, EthPort, Mbuf, MbufBatch, MAX_BURST};
use slaswitch_qos::meter::{Color, Srtcm, SrtcmParams};

use crate::counters::RxTotals;
use crate::flow_caches::FlowCaches;
use crate::pmd_config::{tsc_to_ns, PmdConfig, RxPort};
use crate::spin::SpinGuard;
use slaswitch_config::policing::Policer;
use slaswitch_config::ranges::MAX_PORTS;

use crate::paced_tx::TX_TRIES;

/// What the ingress stage got from a port: frames received, and those left after policing
/// (packed at the front of the batch).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ingress {
    pub(crate) received: usize,
    pub(crate) kept: usize,
}

/// The packet path's state on one PMD thread.
pub(crate) struct Stages {
    pub(crate) cfg: Arc<PmdConfig>,
    /// Per rx port (same order as `cfg.rx_ports`): its running totals.
    pub(crate) totals: Vec<RxTotals>,
    /// Per rx port: its policer's state, kept across reconfigurations while the port's
    /// policing settings stay the same.
    policers: Vec<Option<Policer>>,
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
}

impl Stages {
    pub(crate) fn new(cfg: Arc<PmdConfig>) -> Stages {
        let now_ns = tsc_to_ns(rdtsc(), cfg.tsc_hz);
        Stages {
            macs: MacTable::new(8192, cfg.mac_max_age_tsc),
            totals: cfg.rx_ports.iter().map(|p| p.counters.rx()).collect(),
            policers: cfg.rx_ports.iter().map(|p| p.policing.map(|s| s.policer(now_ns))).collect(),
            fallback_meters: cfg.rx_ports.iter().map(|p| p.purchase_bps.map(|b| fallback_meter(b, now_ns))).collect(),
            caches: cfg.rx_ports.iter().map(|p| (p.number, FlowCaches::new())).collect(),
            rule_hits: vec![(0, 0); cfg.classifier.rules().len()],
            cfg,
            out: (0..MAX_PORTS).map(|_| MbufBatch::new()).collect(),
            out_bytes: vec![0; MAX_PORTS],
            dirty: Vec::with_capacity(64),
            targets: Vec::with_capacity(MAX_PORTS),
            rules_touched: Vec::with_capacity(64),
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
        let now_ns = tsc_to_ns(rdtsc(), cfg.tsc_hz);
        self.policers = carry_over(&self.cfg, &cfg, &self.policers, |p| p.policing, |spec| spec.policer(now_ns));
        self.fallback_meters =
            carry_over(&self.cfg, &cfg, &self.fallback_meters, |p| p.purchase_bps, |bps| fallback_meter(bps, now_ns));
        self.cfg = cfg;
    }

    /// Publishes every rx port's running totals, and how many megaflows it holds.
    pub(crate) fn publish(&self) {
        for ((p, t), (_, caches)) in self.cfg.rx_ports.iter().zip(&self.totals).zip(&self.caches) {
            p.counters.publish(&RxTotals { megaflows: caches.megaflow_count() as u64, ..*t });
        }
    }

    /// The ingress stage: receives up to `burst` packets from rx port `idx` into the empty
    /// `batch` and polices them at `now_tsc`. An empty poll returns at once.
    #[inline]
    pub(crate) fn ingress(&mut self, idx: usize, batch: &mut MbufBatch, burst: usize, now_tsc: u64) -> Ingress {
        let eth: EthPort = self.cfg.rx_ports[idx].eth;
        let received = batch.rx_burst(&eth, burst);
        if received == 0 {
            return Ingress { received, kept: 0 };
        }
        Ingress { received, kept: self.police(batch, idx, now_tsc) }
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
        let now_ns = tsc_to_ns(now_tsc, self.cfg.tsc_hz);
        let (mut policed, mut limited) = (0u64, 0u64);
        let (mut policer, mut fallback) = (policer, fallback);
        batch.retain(|m| {
            if let Some(p) = policer.as_mut() {
                if !p.allow(m.pkt_len(), now_ns) {
                    policed += 1;
                    return false;
                }
            }
            if let Some(f) = fallback.as_mut() {
                // The purchase counts whole frames (bandwidth.rs).
                if f.color(m.pkt_len(), now_ns) != Color::Green {
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

    /// The classification stage for one batch: first parse and hash every packet and prefetch
    /// its exact-match-cache slots, then look up and act, so cache misses overlap. Packets end
    /// up queued per output port for [`Stages::egress`], and `batch` empty. Returns the
    /// batch's bytes.
    #[inline]
    pub(crate) fn classify(&mut self, batch: &mut MbufBatch, port_idx: usize, now: u64) -> u64 {
        let in_port = self.cfg.rx_ports[port_idx].number;
        // Rules that look at the input port alone decide the whole batch without the cache.
        let simple = self.cfg.classifier.by_in_port(in_port);
        // Rules on the input port alone whose actions do not look at the packet (no `normal`):
        // one decision serves the whole batch, and its frames need no key, only to be well formed.
        let rule_actions = |rule: Option<u32>| -> &[Action] {
            match rule {
                Some(r) => &self.cfg.classifier.rule(r).actions,
                None => &[],
            }
        };
        let whole_batch = simple.filter(|&rule| !rule_actions(rule).contains(&Action::Normal));
        let emc = simple.is_none() && self.caches[port_idx].1.uses_emc();
        let mut keys = [(FlowKey::ZERO, 0u64, false); MAX_BURST];
        for (slot, m) in keys.iter_mut().zip(batch.as_slice()) {
            let parsed = match whole_batch {
                Some(_) => check_frame(m.data()).map(|()| FlowKey::ZERO),
                None => parse_frame(m.data(), in_port),
            };
            match parsed {
                Ok(k) => {
                    let h = if emc { k.hash64() } else { 0 };
                    if emc {
                        self.caches[port_idx].1.emc.prefetch(h);
                    }
                    *slot = (k, h, true);
                }
                Err(e) => self.totals[port_idx].parse_errors[e as usize] += 1,
            }
        }
        let mut bytes = 0;
        if let Some(rule) = whole_batch {
            self.targets.clear();
            self.targets.extend(rule_actions(rule).iter().filter_map(|a| match *a {
                Action::Output(p) if p != in_port => Some(p),
                _ => None,
            }));
            let targets = std::mem::take(&mut self.targets);
            for (i, m) in batch.drain().enumerate() {
                let len = m.pkt_len();
                bytes += u64::from(len);
                if !keys[i].2 {
                    continue;
                }
                if let Some(r) = rule {
                    self.count_rule(r, len);
                }
                self.emit(m, &targets, port_idx);
            }
            self.targets = targets;
            self.publish_rule_hits();
            return bytes;
        }
        // The previous packet's key and single destination: a run of packets of one flow (the
        // common case within a batch) skips the cache lookup and the actions.
        let mut last: Option<(FlowKey, u16, u32)> = None;
        for (i, m) in batch.drain().enumerate() {
            bytes += u64::from(m.pkt_len());
            let (key, hash, parsed) = keys[i];
            if !parsed {
                continue;
            }
            if let Some((k, target, rule)) = last {
                if k == key {
                    if simple.is_none() {
                        self.totals[port_idx].emc_hits += 1;
                    }
                    if rule != NO_RULE {
                        self.count_rule(rule, m.pkt_len());
                    }
                    self.enqueue(target, m);
                    continue;
                }
            }
            let rule = self.resolve(&m, &key, hash, in_port, port_idx, now);
            last = (self.targets.len() == 1).then(|| (key, self.targets[0], rule));
            let targets = std::mem::take(&mut self.targets);
            self.emit(m, &targets, port_idx);
            self.targets = targets;
        }
        self.publish_rule_hits();
        bytes
    }

    /// Decides where one parsed packet goes; fills `self.targets`. Returns the rule it matched
    /// ([`NO_RULE`] if none).
    #[inline]
    fn resolve(&mut self, m: &Mbuf, key: &FlowKey, hash: u64, in_port: u16, port_idx: usize, now: u64) -> u32 {
        let key = *key;
        let rule = match self.cfg.classifier.by_in_port(in_port) {
            Some(r) => r.unwrap_or(NO_RULE),
            None => self.caches[port_idx].1.resolve(&self.cfg.classifier, &key, hash, &mut self.totals[port_idx]),
        };
        self.targets.clear();
        let actions: &[Action] = if rule == NO_RULE {
            // With no rules the switch is a MAC-learning L2 switch; with rules, a miss drops.
            if self.cfg.classifier.rules().is_empty() {
                &[Action::Normal]
            } else {
                &[]
            }
        } else {
            self.count_rule(rule, m.pkt_len());
            &self.cfg.classifier.rule(rule).actions
        };
        for action in actions {
            match *action {
                Action::Output(p) if p != in_port => self.targets.push(p),
                Action::Output(_) | Action::Drop => {}
                Action::Normal => {
                    let vlan = key.vlan_tci();
                    self.macs.learn(key.eth_src(), vlan, in_port, now);
                    let dst = key.eth_dst();
                    match (!is_multicast(dst)).then(|| self.macs.lookup(dst, vlan, now)).flatten() {
                        Some(p) if p != in_port => self.targets.push(p),
                        Some(_) => {}
                        None => self.targets.extend(self.cfg.flood.iter().copied().filter(|&p| p != in_port)),
                    }
                }
            }
        }
        rule
    }

    #[inline(always)]
    fn count_rule(&mut self, rule: u32, len: u32) {
        let hits = &mut self.rule_hits[rule as usize];
        if hits.0 == 0 {
            self.rules_touched.push(rule);
        }
        hits.0 += 1;
        hits.1 += u64::from(len);
    }

    /// Hands a packet to its destinations: copies for all but the last; no destination drops it.
    #[inline]
    fn emit(&mut self, m: Mbuf, targets: &[u16], port_idx: usize) {
        let Some((&last, others)) = targets.split_last() else {
            self.totals[port_idx].dropped_by_rules += 1;
            return;
        };
        for &target in others {
            match self.cfg.pool.copy(&m) {
                Some(copy) => self.enqueue(target, copy),
                None => {
                    if let Some(Some(tx)) = self.cfg.tx_ports.get(target as usize) {
                        tx.counters.add_tx(0, 0, 1);
                    }
                }
            }
        }
        self.enqueue(last, m);
    }

    #[inline]
    fn enqueue(&mut self, port: u16, m: Mbuf) {
        let p = port as usize;
        if self.out[p].is_empty() {
            self.dirty.push(port);
        }
        let len = m.pkt_len();
        match self.out[p].push(m) {
            Ok(()) => self.out_bytes[p] += u64::from(len),
            // Unreachable while egress follows every batch; dropped (freed) and counted if not.
            Err(_) => {
                if let Some(Some(tx)) = self.cfg.tx_ports.get(p) {
                    tx.counters.add_tx(0, 0, 1);
                }
            }
        }
    }

    /// Adds this batch's per-rule counts to the shared counters.
    #[inline]
    fn publish_rule_hits(&mut self) {
        for &rule in &self.rules_touched {
            let (packets, bytes) = std::mem::take(&mut self.rule_hits[rule as usize]);
            self.cfg.rule_counters.packets[rule as usize].fetch_add(packets, Ordering::Relaxed);
            self.cfg.rule_counters.bytes[rule as usize].fetch_add(bytes, Ordering::Relaxed);
        }
        self.rules_touched.clear();
    }

    /// The egress stage: one tx burst per output port that has packets (a paced port queues
    /// them in the source's queue on its link instead). Every packet here came from the batch
    /// just classified, polled from rx port `idx`.
    #[inline]
    pub(crate) fn egress(&mut self, idx: usize) {
        let source = self.cfg.rx_ports[idx].number;
        while let Some(port) = self.dirty.pop() {
            let p = port as usize;
            let pending = &mut self.out[p];
            let bytes = std::mem::take(&mut self.out_bytes[p]);
            match self.cfg.tx_ports.get(p).and_then(|t| t.as_ref()) {
                None => {}
                Some(tx) if tx.paced.is_some() => {
                    let link = tx.paced.as_ref().expect("checked");
                    let now_ns = tsc_to_ns(rdtsc(), self.cfg.tsc_hz);
                    link.send(pending, source, &tx.device(), now_ns, &self.cfg.fallback);
                }
                Some(tx) => {
                    let _guard = self.cfg.shared_tx.then(|| SpinGuard::lock(&tx.lock));
                    let offered = pending.len();
                    let sent = pending.tx_burst_retrying(&tx.eth, TX_TRIES);
                    let unsent_bytes: u64 = pending.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
                    tx.counters.add_tx(sent as u64, bytes - unsent_bytes, (offered - sent) as u64);
                }
            }
            pending.clear();
        }
    }

    /// Lets every paced port send what its link has had time for. `force` also runs it when
    /// nothing waits, so the uplink's fallback detector sees idle windows too.
    #[inline]
    pub(crate) fn drain_links(&mut self, force: bool) {
        if self.cfg.paced.is_empty() {
            return;
        }
        let now_ns = tsc_to_ns(rdtsc(), self.cfg.tsc_hz);
        for &number in &self.cfg.paced {
            let Some(tx) = self.cfg.tx_ports[number as usize].as_ref() else { continue };
            let Some(link) = tx.paced.as_ref() else { continue };
            if link.queued() == 0 && !force {
                continue;
            }
            link.drain(&tx.device(), now_ns, &self.cfg.fallback);
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
