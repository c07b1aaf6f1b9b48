//! A PMD (poll-mode driver) thread: pinned to one core, it polls its rx ports in batches of up to
//! 32 and runs each batch through three stages, charging the TSC cycles of each stage to the port
//! the batch came from (seed 000 Sec. III-A, Eq. 1: C = C_ingress + C_classification + C_egress):
//! 1. ingress: `rx_burst` from the port;
//! 2. classification: parse, exact-match cache, tuple space search on a miss, actions;
//! 3. egress: packets grouped per output port, one `tx_burst` each.
//!
//! A batch is flushed before the next port is polled, so every packet in the egress stage came
//! from the batch's own port and the egress cycles belong to it entirely (OVS flushes at the end
//! of an iteration and would have to split them by packet count). One TSC read per stage
//! boundary, reused as the next stage's start, so the stages of all batches plus the empty polls
//! add up to the thread's whole time.
//!
//! No lock on the hot path: the control plane sends a new [`PmdConfig`] over a channel, which the
//! thread checks between passes and acknowledges once it no longer uses the old one. Ports shared
//! by several PMDs take a per-port spin lock around `tx_burst`, as OVS does when a port has fewer
//! tx queues than PMDs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::mac_learning::is_multicast;
use slaswitch_classifier::{parse_frame, Action, Classifier, ExactMatchCache, FlowKey, MacTable};
use slaswitch_dpdk::{free_bulk, rdtsc, rdtsc_after_all, rdtsc_after_loads, EthPort, Mbuf, Mempool, MAX_BURST};

use crate::compare::SchedulerCompare;
use crate::counters::{PmdCounters, PmdTotals, PortCounters, RuleCounters, RxTotals};
use crate::cpu_qos::CpuQos;
use crate::paced_tx::{Fallback, PacedLink};
use crate::pmd_qos::{publish_scheduler, sync_scheduler, Drift, PortSplit, WaitTally};
use crate::policing::{Policer, PolicingSpec};
use slaswitch_qos::cpu::{BandwidthModel, PortScheduler, TrafficProfile};
use slaswitch_qos::meter::{Color, Srtcm, SrtcmParams};

/// Port numbers run from 1 to `MAX_PORTS - 1`.
pub const MAX_PORTS: usize = 1024;
/// Passes between two publications of the counters.
const PUBLISH_EVERY_PASSES: u64 = 1024;
/// Passes between two looks at the control channel while busy.
const CHECK_CONTROL_EVERY_PASSES: u64 = 64;
/// vhost tx bursts retried when the guest's ring is momentarily full (OVS: vhost-tx-retries).
const TX_RETRIES: usize = 4;
/// A stage running longer than this was stalled by the host, not slowed by its packets: the
/// costliest full batch here (32 frames over 99 security-group masks) takes about 30 us. On
/// this shared host the PMD's vCPU is sometimes preempted for 100+ ms mid-batch; charged to
/// the port, one such stall put it 0.5 s of its allocation in debt and cost every VM 2-4% of
/// its purchase (Fig. 11b, 16 VMs).
pub const STALL_NS: u64 = 100_000;
/// One scheduler decision in `1 << QOS_SAMPLE_SHIFT` is timed for [`PmdTotals::qos_cycles`]:
/// two TSC reads every 64 decisions cost well under a cycle per decision.
const QOS_SAMPLE_SHIFT: u32 = 6;

/// What the TSC reads add to an interval timed from [`rdtsc_after_all`] to
/// [`rdtsc_after_loads`]: the smallest difference of two such reads back to back. Subtracted
/// from each timed part of C2QoS's own cost, which is otherwise about a hundred cycles.
fn tsc_read_cycles() -> u64 {
    (0..256)
        .map(|_| {
            let t0 = rdtsc_after_all();
            rdtsc_after_loads() - t0
        })
        .min()
        .unwrap_or(0)
}

#[derive(Clone)]
pub struct RxPort {
    pub number: u16,
    pub eth: EthPort,
    pub counters: Arc<PortCounters>,
    pub policing: Option<PolicingSpec>,
    pub cpu_qos: CpuQos,
    /// The purchased bandwidth in bits/s, enforced while the NIC-bottleneck fallback is on.
    pub fallback_limit_bps: Option<u64>,
    /// The allocation the model gave, when it follows the host's speed (drift compensation).
    pub model_cycles: Option<ModelCycles>,
}

/// A port's allocation from the bandwidth-CPU model, with the profile it was priced for.
#[derive(Clone, Copy, Debug)]
pub struct ModelCycles {
    pub cycles_per_sec: u64,
    pub profile: TrafficProfile,
    /// The model's rows were measured on ports of this port's kind (vhost-user).
    pub calibrated_kind: bool,
    /// prod(R_i) of the allocation: `cycles_per_sec` already pays for that much dearer packets.
    pub deployment_factor: f64,
}

#[derive(Clone)]
pub struct TxPort {
    pub number: u16,
    pub eth: EthPort,
    pub counters: Arc<PortCounters>,
    pub lock: Arc<AtomicBool>,
    /// Set when the port has a line rate (`link_rate_bps`).
    pub paced: Option<Arc<PacedLink>>,
}

/// Everything a PMD needs, swapped as a whole.
pub struct PmdConfig {
    pub rx_ports: Vec<RxPort>,
    /// Indexed by port number.
    pub tx_ports: Vec<Option<TxPort>>,
    /// Port numbers a flooded packet goes to (all ports).
    pub flood: Vec<u16>,
    pub classifier: Arc<Classifier>,
    pub rule_counters: Arc<RuleCounters>,
    /// Several PMDs may transmit on one port: take its tx lock.
    pub shared_tx: bool,
    pub pool: Arc<Mempool>,
    /// TSC ticks after which a learned MAC is forgotten.
    pub mac_max_age_tsc: u64,
    /// Depth of every C2TB bucket, microseconds of the core (`DatapathSettings::c2tb_bucket_us`).
    pub c2tb_bucket_us: u64,
    pub tsc_hz: u64,
    /// Numbers of the paced ports (every PMD drains them).
    pub paced: Vec<u16>,
    pub fallback: Arc<Fallback>,
    /// The bandwidth-CPU model, for drift compensation.
    pub model: Option<Arc<BandwidthModel>>,
    /// Slice of the scheduler comparison, 0 when off (`DatapathSettings::compare_slice_us`).
    pub compare_slice_us: u64,
}

pub enum PmdMessage {
    /// Swap in a new configuration; reply once the old one is no longer used.
    Config(Arc<PmdConfig>, Sender<()>),
    Quit,
}

struct SpinGuard<'a>(&'a AtomicBool);

impl<'a> SpinGuard<'a> {
    fn lock(flag: &'a AtomicBool) -> Self {
        while flag.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        SpinGuard(flag)
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Per-thread state of the loop.
pub(crate) struct Pmd {
    pub(crate) cfg: Arc<PmdConfig>,
    pub(crate) totals: Vec<RxTotals>,
    /// Per rx port (same order): its policer's state, kept across reconfigurations while the
    /// port's policing settings stay the same.
    policers: Vec<Option<Policer>>,
    /// Per rx port: its fallback byte limit (seed 000 Sec. VII), kept like `policers`.
    fallback_meters: Vec<Option<Srtcm>>,
    /// Port number -> index in `cfg.rx_ports`.
    index_of: Vec<u16>,
    pub(crate) pmd_totals: PmdTotals,
    pub(crate) counters: Arc<PmdCounters>,
    /// One exact-match cache per rx port (same order as `cfg.rx_ports`): a VM's many flows
    /// evict only its own entries, so a neighbour's cached flows stay cached (OVS shares one
    /// per PMD, and a many-flow VM there turns its neighbours' hits into misses: seed 000
    /// Fig. 5c's cost lands on them).
    emcs: Vec<(u16, ExactMatchCache)>,
    macs: MacTable,
    /// Pending packets per output port, and their bytes.
    out: Vec<Vec<Mbuf>>,
    out_bytes: Vec<u64>,
    dirty: Vec<u16>,
    targets: Vec<u16>,
    rule_hits: Vec<(u64, u64)>,
    rules_touched: Vec<u32>,
    /// [`STALL_NS`] in TSC cycles.
    stall_cycles: u64,
    /// Stalled cycles not yet credited to the cycle buckets.
    pending_stall_cycles: u64,
}

impl Pmd {
    fn new(cfg: Arc<PmdConfig>, counters: Arc<PmdCounters>) -> Pmd {
        let rules = cfg.classifier.rules().len();
        Pmd {
            macs: MacTable::new(8192, cfg.mac_max_age_tsc),
            totals: cfg.rx_ports.iter().map(|p| p.counters.rx()).collect(),
            policers: cfg
                .rx_ports
                .iter()
                .map(|p| p.policing.map(|s| s.policer(tsc_to_ns(rdtsc(), cfg.tsc_hz))))
                .collect(),
            fallback_meters: cfg
                .rx_ports
                .iter()
                .map(|p| p.fallback_limit_bps.map(|b| fallback_meter(b, tsc_to_ns(rdtsc(), cfg.tsc_hz))))
                .collect(),
            index_of: index_of(&cfg),
            emcs: cfg.rx_ports.iter().map(|p| (p.number, ExactMatchCache::new())).collect(),
            stall_cycles: (u128::from(cfg.tsc_hz) * u128::from(STALL_NS) / 1_000_000_000) as u64,
            pending_stall_cycles: 0,
            cfg,
            pmd_totals: PmdTotals::default(),
            counters,
            out: (0..MAX_PORTS).map(|_| Vec::new()).collect(),
            out_bytes: vec![0; MAX_PORTS],
            dirty: Vec::with_capacity(64),
            targets: Vec::with_capacity(MAX_PORTS),
            rule_hits: vec![(0, 0); rules],
            rules_touched: Vec::with_capacity(64),
        }
    }

    fn publish(&self) {
        for (p, t) in self.cfg.rx_ports.iter().zip(&self.totals) {
            p.counters.publish(t);
        }
        self.counters.publish(&self.pmd_totals);
    }

    fn install(&mut self, cfg: Arc<PmdConfig>) {
        self.publish();
        let mut old_emcs = std::mem::take(&mut self.emcs);
        self.emcs = cfg
            .rx_ports
            .iter()
            .map(|p| match old_emcs.iter().position(|(n, _)| *n == p.number) {
                Some(i) => old_emcs.swap_remove(i),
                None => (p.number, ExactMatchCache::new()),
            })
            .collect();
        if !Arc::ptr_eq(&cfg.classifier, &self.cfg.classifier) {
            for (_, emc) in &mut self.emcs {
                emc.invalidate();
            }
            self.rule_hits = vec![(0, 0); cfg.classifier.rules().len()];
        }
        // Forget MACs learned on ports that are gone.
        for number in 0..self.cfg.tx_ports.len() {
            if self.cfg.tx_ports[number].is_some() && cfg.tx_ports.get(number).is_none_or(|p| p.is_none()) {
                self.macs.flush_port(number as u16);
            }
        }
        self.macs.set_max_age(cfg.mac_max_age_tsc);
        self.totals = cfg.rx_ports.iter().map(|p| p.counters.rx()).collect();
        let now_ns = tsc_to_ns(rdtsc(), cfg.tsc_hz);
        self.policers = carry_over(&self.cfg, &cfg, &self.policers, |p| p.policing, |spec| spec.policer(now_ns));
        self.fallback_meters = carry_over(
            &self.cfg,
            &cfg,
            &self.fallback_meters,
            |p| p.fallback_limit_bps,
            |bps| fallback_meter(bps, now_ns),
        );
        self.index_of = index_of(&cfg);
        self.cfg = cfg;
    }

    /// Decides where one parsed packet goes; fills `self.targets`.
    #[inline]
    /// Returns the rule it matched ([`NO_RULE`] if none).
    fn resolve(&mut self, m: &Mbuf, key: &FlowKey, hash: u64, in_port: u16, port_idx: usize, now: u64) -> u32 {
        let key = *key;
        let rule = match self.cfg.classifier.by_in_port(in_port) {
            Some(r) => r.unwrap_or(NO_RULE),
            None => {
                let st = &mut self.totals[port_idx];
                let emc = &mut self.emcs[port_idx].1;
                match emc.lookup(&key, hash) {
                    Some(v) => {
                        st.emc_hits += 1;
                        v
                    }
                    None => {
                        st.emc_misses += 1;
                        let v = self.cfg.classifier.lookup(&key).unwrap_or(NO_RULE);
                        self.emcs[port_idx].1.insert(&key, hash, v);
                        v
                    }
                }
            }
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

    /// A stage that took longer than [`STALL_NS`] was interrupted (the host preempted the
    /// PMD's vCPU, a page fault): the time beyond that is the host's, not the port's. Returns
    /// what the port is charged and counts the rest as stalled.
    #[inline]
    fn unstalled(&mut self, cycles: u64) -> u64 {
        if cycles <= self.stall_cycles {
            return cycles;
        }
        self.pmd_totals.stalled_cycles += cycles - self.stall_cycles;
        self.pending_stall_cycles += cycles - self.stall_cycles;
        self.stall_cycles
    }

    /// Hands the stalls seen since the last call to the cycle buckets (none without C2QoS).
    #[inline]
    fn credit_stalls(&mut self, sched: Option<&mut PortScheduler>) {
        let stalled = std::mem::take(&mut self.pending_stall_cycles);
        if let (Some(s), true) = (sched, stalled > 0) {
            s.credit_stall(stalled);
        }
    }

    /// Polls rx port `idx` once and runs what it gave through the three stages, charging each
    /// stage's cycles to the port. Returns the packets received (before policing), the TSC
    /// at the end, which is the next stage boundary, and the cycles charged to the port (the
    /// time taken less any stall). The ingress stage is timed from `t`, the end of the batch
    /// before; `scheduler_cycles` of that are C2QoS's decision in between, the PMD's work and
    /// not the port's (0 without a scheduler).
    #[inline]
    fn serve(&mut self, idx: usize, batch: &mut [Mbuf; MAX_BURST], t: u64, scheduler_cycles: u64) -> (usize, u64, u64) {
        let eth = self.cfg.rx_ports[idx].eth;
        let received = eth.rx_burst(batch);
        let mut t_rx = rdtsc();
        if received == 0 {
            let idle = self.unstalled(t_rx - t);
            let st = &mut self.totals[idx];
            st.empty_polls += 1;
            st.idle_cycles += idle;
            self.pmd_totals.idle_cycles += idle;
            return (0, t_rx, idle);
        }
        let n = self.police(batch, received, idx, t_rx);
        if n < received {
            // Policing belongs to the ingress stage, as in OVS-DPDK's rx path.
            t_rx = rdtsc();
            if n == 0 {
                let ingress = self.unstalled(t_rx - t);
                let scheduler = scheduler_cycles.min(ingress);
                self.totals[idx].ingress_cycles += ingress - scheduler;
                self.pmd_totals.busy_cycles += ingress;
                return (received, t_rx, ingress - scheduler);
            }
        }
        let bytes = self.classify(&batch[..n], idx, t_rx);
        let t_classified = rdtsc();
        self.flush();
        let t_sent = rdtsc();
        let (mut ingress, mut classify, mut egress) = (t_rx - t, t_classified - t_rx, t_sent - t_classified);
        if t_sent - t > self.stall_cycles {
            // Rare: only a batch longer than a stall can hold one; one compare otherwise.
            (ingress, classify, egress) = (self.unstalled(ingress), self.unstalled(classify), self.unstalled(egress));
        }
        let scheduler = scheduler_cycles.min(ingress);
        ingress -= scheduler;
        let st = &mut self.totals[idx];
        st.rx_packets += n as u64;
        st.rx_bytes += bytes;
        st.batches += 1;
        st.ingress_cycles += ingress;
        st.classify_cycles += classify;
        st.egress_cycles += egress;
        let charged = ingress + classify + egress;
        self.pmd_totals.busy_cycles += charged + scheduler;
        (received, t_sent, charged)
    }

    /// Drops from `batch[..n]` what the port's policer refuses; returns how many are left,
    /// packed at the front.
    #[inline]
    fn police(&mut self, batch: &mut [Mbuf], n: usize, port_idx: usize, now_tsc: u64) -> usize {
        let fallback = match self.fallback_meters[port_idx].as_mut() {
            Some(m) if self.cfg.fallback.engaged.load(Ordering::Relaxed) => Some(m),
            _ => None,
        };
        let policer = self.policers[port_idx].as_mut();
        if policer.is_none() && fallback.is_none() {
            return n;
        }
        let now_ns = tsc_to_ns(now_tsc, self.cfg.tsc_hz);
        let (mut kept, mut policed, mut limited) = (0, 0u64, 0u64);
        let (mut policer, mut fallback) = (policer, fallback);
        for i in 0..n {
            let m = batch[i];
            if let Some(p) = policer.as_mut() {
                if !p.allow(m.pkt_len(), now_ns) {
                    policed += 1;
                    m.free();
                    continue;
                }
            }
            if let Some(f) = fallback.as_mut() {
                // The purchase counts whole frames (bandwidth.rs).
                if f.color(m.pkt_len(), now_ns) != Color::Green {
                    limited += 1;
                    m.free();
                    continue;
                }
            }
            batch[kept] = m;
            kept += 1;
        }
        let st = &mut self.totals[port_idx];
        st.policer_drops += policed;
        if limited > 0 {
            st.fallback_drops += limited;
            self.cfg.fallback.drops.fetch_add(limited, Ordering::Relaxed);
        }
        kept
    }

    /// Lets every paced port send what its link has had time for. `force` also runs it when
    /// nothing waits, so the uplink's fallback detector sees idle windows too.
    #[inline]
    fn drain_links(&mut self, force: bool) {
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
            let _guard = SpinGuard::lock(&tx.lock);
            // SAFETY: the port's tx lock is held.
            unsafe { link.drain(tx.eth, now_ns, &tx.counters, &self.cfg.fallback) };
        }
    }

    #[inline]
    fn enqueue(&mut self, port: u16, m: Mbuf) {
        let p = port as usize;
        if self.out[p].is_empty() {
            self.dirty.push(port);
        }
        self.out_bytes[p] += u64::from(m.pkt_len());
        self.out[p].push(m);
    }

    /// Classification stage for one batch: first parse and hash every packet and prefetch its
    /// exact-match-cache slots, then look up and act, so cache misses overlap.
    #[inline]
    fn classify(&mut self, batch: &[Mbuf], port_idx: usize, now: u64) -> u64 {
        let in_port = self.cfg.rx_ports[port_idx].number;
        // Rules that look at the input port alone decide the whole batch without the cache.
        let simple = self.cfg.classifier.by_in_port(in_port);
        let mut keys = [(FlowKey::ZERO, 0u64, false); MAX_BURST];
        for (slot, m) in keys.iter_mut().zip(batch) {
            match parse_frame(m.data(), in_port) {
                Ok(k) => {
                    let h = if simple.is_some() { 0 } else { k.hash64() };
                    if simple.is_none() {
                        self.emcs[port_idx].1.prefetch(h);
                    }
                    *slot = (k, h, true);
                }
                Err(e) => self.totals[port_idx].parse_errors[e as usize] += 1,
            }
        }
        let mut bytes = 0;
        // Rules on the input port alone whose actions do not look at the packet (no `normal`):
        // one decision serves the whole batch.
        if let Some(rule) = simple {
            let actions: &[Action] = match rule {
                Some(r) => &self.cfg.classifier.rule(r).actions,
                None => &[],
            };
            if !actions.contains(&Action::Normal) {
                self.targets.clear();
                self.targets.extend(actions.iter().filter_map(|a| match *a {
                    Action::Output(p) if p != in_port => Some(p),
                    _ => None,
                }));
                let targets = std::mem::take(&mut self.targets);
                for (i, &m) in batch.iter().enumerate() {
                    let len = m.pkt_len();
                    bytes += u64::from(len);
                    if !keys[i].2 {
                        m.free();
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
        }
        // The previous packet's key and single destination: a run of packets of one flow (the
        // common case within a batch) skips the cache lookup and the actions.
        let mut last: Option<(FlowKey, u16, u32)> = None;
        for (i, &m) in batch.iter().enumerate() {
            bytes += u64::from(m.pkt_len());
            let (key, hash, parsed) = keys[i];
            if !parsed {
                m.free();
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

    /// Hands a packet to its destinations: copies for all but the last; no destination drops it.
    #[inline]
    fn emit(&mut self, m: Mbuf, targets: &[u16], port_idx: usize) {
        let Some((&last, others)) = targets.split_last() else {
            self.totals[port_idx].dropped_by_rules += 1;
            m.free();
            return;
        };
        for &target in others {
            match self.cfg.pool.copy(m) {
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

    /// Egress stage: one tx burst per output port that has packets.
    #[inline]
    fn flush(&mut self) {
        while let Some(port) = self.dirty.pop() {
            let p = port as usize;
            let mut pending = std::mem::take(&mut self.out[p]);
            let bytes = std::mem::take(&mut self.out_bytes[p]);
            match self.cfg.tx_ports.get(p).and_then(|t| t.as_ref()) {
                None => free_bulk(&pending),
                Some(tx) if tx.paced.is_some() => {
                    let link = tx.paced.as_ref().expect("checked");
                    let _guard = SpinGuard::lock(&tx.lock);
                    let now_ns = tsc_to_ns(rdtsc(), self.cfg.tsc_hz);
                    // SAFETY: the port's tx lock is held.
                    unsafe {
                        link.enqueue(&pending, now_ns, &tx.counters);
                        link.drain(tx.eth, now_ns, &tx.counters, &self.cfg.fallback);
                    }
                }
                Some(tx) => {
                    let _guard = self.cfg.shared_tx.then(|| SpinGuard::lock(&tx.lock));
                    let mut sent = 0;
                    for _ in 0..TX_RETRIES {
                        let k = tx.eth.tx_burst(&mut pending[sent..]);
                        sent += k;
                        if sent == pending.len() || k == 0 {
                            break;
                        }
                    }
                    let unsent = &pending[sent..];
                    let unsent_bytes: u64 = unsent.iter().map(|m| u64::from(m.pkt_len())).sum();
                    tx.counters.add_tx(sent as u64, bytes - unsent_bytes, unsent.len() as u64);
                    free_bulk(unsent);
                }
            }
            pending.clear();
            self.out[p] = pending;
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

fn index_of(cfg: &PmdConfig) -> Vec<u16> {
    let mut v = vec![u16::MAX; MAX_PORTS];
    for (i, p) in cfg.rx_ports.iter().enumerate() {
        v[p.number as usize] = i as u16;
    }
    v
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

#[inline]
pub(crate) fn tsc_to_ns(tsc: u64, tsc_hz: u64) -> u64 {
    (u128::from(tsc) * 1_000_000_000 / u128::from(tsc_hz.max(1))) as u64
}

/// Pins the calling thread to `core`.
pub fn pin_to_core(core: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!("cannot pin to core {core}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// The PMD thread's body. Returns when told to quit.
pub fn run(cfg: Arc<PmdConfig>, control: Receiver<PmdMessage>, counters: Arc<PmdCounters>) {
    let mut pmd = Pmd::new(cfg, counters);
    // The C2QoS scheduler, present while some port of this PMD has C2QoS settings; it lives
    // across reconfigurations so tokens and classes survive them.
    let mut sched: Option<PortScheduler> = None;
    let mut split = PortSplit::default();
    let mut tally = WaitTally::default();
    let mut batch = [Mbuf(std::ptr::NonNull::dangling()); MAX_BURST];
    let mut pass: u64 = 0;
    let mut t = rdtsc();
    sync_scheduler(&mut sched, &pmd.cfg, &mut split, t);
    let mut drift = Drift::new(t, &pmd.cfg);
    let read_cost = tsc_read_cycles();
    // A timed interval of C2QoS's own work: less the TSC read inside it, and never a stall's worth.
    let own_cycles = |from: u64, to: u64, stall: u64| (to - from).saturating_sub(read_cost).min(stall);
    let mut compare = SchedulerCompare::new(pmd.cfg.compare_slice_us, pmd.cfg.tsc_hz, t);
    // A batch's ingress is timed from the end of the batch before, so it also holds C2QoS's
    // decision between them (charging the last port, picking this one). A port is charged
    // its three stages (seed 000 Sec. IV-A), in its bucket and its counters, not the
    // scheduler's work: the decision's cost, timed one decision in 64 (eight times its moving
    // average here), is kept out of the port's ingress stage and counted as the PMD's busy
    // time only. Charged to the ports, it was a tax of about 1% on every allocation, which the
    // bandwidth model (calibrated without C2QoS) did not know; in the overhead benchmark's
    // fully allocated core the forwarding rate lost 2.1% (95% CI 1.1-3.6%) to C2QoS, and
    // changed by +0.2% (CI -1.5..+1.2%) since (docs/c2qos.md, 6).
    let mut decision_cycles_x8: u64 = 0;
    loop {
        pass += 1;
        let mut pass_had_packets = false;
        if let Some(sched) = sched.as_mut().filter(|_| !compare.round_robin()) {
            // The scheduler's clock: the TSC, less the comparison's round-robin slices.
            let clock_offset = t - compare.scheduler_clock(t);
            // C2QoS: HBS picks the port, C2TB is charged what its batch cost (seed 000 Sec. IV).
            // A backlogged port may keep the core for a few cheap batches of one turn
            // (`PortScheduler::end_batch`); every turn ends with the pass.
            let batches = split.scheduled.len();
            let mut turn_goes_on: Option<usize> = None;
            for i in 0..batches {
                // C2QoS's own cost, sampled (seed 000 Sec. VI-F measures it on the PMD too).
                let sampled = pmd.pmd_totals.qos_decisions.trailing_zeros() >= QOS_SAMPLE_SHIFT;
                pmd.pmd_totals.qos_decisions += 1;
                // The fences wait for the batch's stores; that wait is the sampling's cost.
                let t_drain = if sampled { rdtsc() } else { 0 };
                let t_decide = if sampled { rdtsc_after_all() } else { 0 };
                let picked = match turn_goes_on.take() {
                    Some(number) => Some(number),
                    None => sched.next_port(t - clock_offset),
                };
                match picked {
                    Some(number) => {
                        let t_decided = if sampled { rdtsc_after_loads() } else { 0 };
                        let idx = pmd.index_of[number] as usize;
                        let (received, t_end, charged) = pmd.serve(idx, &mut batch, t, decision_cycles_x8 / 8);
                        // Not t_end: serve's own bookkeeping after it is round robin's work too.
                        let t_egress_drain = if sampled { rdtsc() } else { 0 };
                        let t_served = if sampled { rdtsc_after_all() } else { 0 };
                        pmd.credit_stalls(Some(&mut *sched));
                        if sched.end_batch(number, charged, received as u32, t_end - clock_offset, i + 1 < batches) {
                            turn_goes_on = Some(number);
                        }
                        pmd.pmd_totals.qos_empty_decisions += u64::from(received == 0);
                        if sampled {
                            let pick = own_cycles(t_decide, t_decided, pmd.stall_cycles);
                            let charge = own_cycles(t_served, rdtsc_after_loads(), pmd.stall_cycles);
                            let totals = &mut pmd.pmd_totals;
                            totals.qos_sampling_cycles += own_cycles(t_drain, t_decide, pmd.stall_cycles)
                                + own_cycles(t_egress_drain, t_served, pmd.stall_cycles);
                            totals.qos_cycles += (pick + charge) << QOS_SAMPLE_SHIFT;
                            totals.qos_pick_cycles += pick << QOS_SAMPLE_SHIFT;
                            totals.qos_charge_cycles += charge << QOS_SAMPLE_SHIFT;
                            if received == 0 {
                                totals.qos_empty_cycles += (pick + charge) << QOS_SAMPLE_SHIFT;
                            } else {
                                decision_cycles_x8 = decision_cycles_x8 - decision_cycles_x8 / 8 + pick + charge;
                            }
                        }
                        pass_had_packets |= received > 0;
                        t = t_end;
                    }
                    None => {
                        // Every port is waiting for cycle tokens: the core idles.
                        let now = rdtsc();
                        if sampled {
                            let pick = own_cycles(t_decide, now, pmd.stall_cycles) << QOS_SAMPLE_SHIFT;
                            pmd.pmd_totals.qos_cycles += pick;
                            pmd.pmd_totals.qos_pick_cycles += pick;
                        }
                        let idle = pmd.unstalled(now - t);
                        pmd.pmd_totals.idle_cycles += idle;
                        pmd.credit_stalls(Some(&mut *sched));
                        t = now;
                        break;
                    }
                }
            }
            // Ports without C2QoS settings: once per pass, as without a scheduler.
            for &idx in &split.round_robin {
                let (received, t_end, _) = pmd.serve(idx, &mut batch, t, 0);
                pmd.credit_stalls(Some(&mut *sched));
                pass_had_packets |= received > 0;
                t = t_end;
            }
        } else {
            for idx in 0..pmd.cfg.rx_ports.len() {
                let (received, t_end, _) = pmd.serve(idx, &mut batch, t, 0);
                pmd.credit_stalls(None);
                pass_had_packets |= received > 0;
                t = t_end;
            }
        }
        pmd.drain_links(pass.is_multiple_of(CHECK_CONTROL_EVERY_PASSES));
        pmd.pmd_totals.passes += 1;
        if compare.due(t) {
            compare.step(t, sched.is_some(), &pmd.pmd_totals, &pmd.totals);
            pmd.counters.publish_compare(&compare.totals());
        }
        if pass.is_multiple_of(PUBLISH_EVERY_PASSES) {
            tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
            pmd.publish();
            let t_publish = rdtsc();
            if !compare.round_robin() {
                // C2QoS's work: not done while a comparison runs round robin.
                publish_scheduler(sched.as_ref(), &pmd.cfg);
                drift.tick(compare.scheduler_clock(t), &pmd, &mut sched);
            }
            if sched.is_some() && !compare.round_robin() {
                // Not a stall's worth: the next batch's first stage, which holds this time, is
                // checked for stalls already.
                pmd.pmd_totals.qos_cycles += own_cycles(t_publish, rdtsc(), pmd.stall_cycles);
            }
        }
        if !pass_had_packets || pass.is_multiple_of(CHECK_CONTROL_EVERY_PASSES) {
            match control.try_recv() {
                Ok(PmdMessage::Config(cfg, ack)) => {
                    tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
                    pmd.install(cfg);
                    let now = compare.scheduler_clock(rdtsc());
                    sync_scheduler(&mut sched, &pmd.cfg, &mut split, now);
                    tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
                    drift.reset(&pmd.cfg, &mut sched, now);
                    compare.restart(rdtsc());
                    let _ = ack.send(());
                }
                Ok(PmdMessage::Quit) | Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {}
            }
            let now = rdtsc();
            let idle = pmd.unstalled(now - t);
            pmd.pmd_totals.idle_cycles += idle;
            pmd.credit_stalls(sched.as_mut());
            t = now;
        }
        if pmd.cfg.rx_ports.is_empty() {
            // Nothing to poll: wait for a configuration instead of spinning.
            match control.recv_timeout(std::time::Duration::from_millis(10)) {
                Ok(PmdMessage::Config(cfg, ack)) => {
                    tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
                    pmd.install(cfg);
                    let now = compare.scheduler_clock(rdtsc());
                    sync_scheduler(&mut sched, &pmd.cfg, &mut split, now);
                    tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
                    drift.reset(&pmd.cfg, &mut sched, now);
                    compare.restart(rdtsc());
                    let _ = ack.send(());
                }
                Ok(PmdMessage::Quit) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            let now = rdtsc();
            pmd.pmd_totals.idle_cycles += now - t;
            t = now;
        }
    }
    tally.fold(sched.as_ref(), &mut pmd.pmd_totals);
    pmd.publish();
}
