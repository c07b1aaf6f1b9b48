//! Stage 2, classification (seed 000 Sec. III-A): parse, exact-match cache, megaflow cache,
//! tuple space search on a miss of both (`crate::flow_caches`), actions; packets end up queued
//! per output port for the egress stage.
//!
//! Two paths. When the rules decide by the input port alone and their actions do not look at
//! the packet, one decision serves the whole batch: the frames are only checked to be well
//! formed (a malformed one is counted and dropped either way), counted once per batch, and
//! moved to their output port as a batch. Otherwise every packet gets a key and a lookup, with
//! a run of one flow's packets reusing the previous packet's decision.

use std::sync::atomic::Ordering;

use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::mac_learning::is_multicast;
use slaswitch_classifier::{check_head, parse_head, Action, FlowKey};
use slaswitch_dpdk::{Drain, Mbuf, MbufBatch};

use super::Stages;

/// One packet's parse: its key, the key's hash (0 when the exact-match cache is not used) and
/// whether it parsed.
pub(super) type Parsed = (FlowKey, u64, bool);

/// A decision one packet's key led to, for the packets after it that agree with that key on
/// `mask`, the bits the decision depended on.
#[derive(Clone, Copy)]
struct Reuse {
    key: FlowKey,
    mask: FlowKey,
    /// `key` under `mask`.
    masked: FlowKey,
    target: u16,
    rule: u32,
}

impl Reuse {
    #[inline(always)]
    fn new(key: FlowKey, mask: FlowKey, target: u16, rule: u32) -> Reuse {
        Reuse { key, mask, masked: key.masked(&mask), target, rule }
    }
}

/// What [`Stages::take_run`] took: packets that went where the decision sent its packet.
#[derive(Default)]
struct Run {
    packets: u64,
    bytes: u64,
    /// Packets whose whole key repeated the deciding packet's (an exact-match hit's worth).
    exact: u64,
}

impl Stages {
    /// The classification stage for one batch from rx port `port_idx`, at TSC `now`. Leaves
    /// `batch` empty. Returns the batch's bytes.
    #[inline]
    pub(crate) fn classify(&mut self, batch: &mut MbufBatch, port_idx: usize, now: u64) -> u64 {
        let in_port = self.cfg.rx_ports[port_idx].number;
        // Rules that look at the input port alone decide the whole batch without the cache.
        let simple = self.cfg.classifier.by_in_port(in_port);
        match simple {
            Some(rule) if !self.rule_actions(rule).contains(&Action::Normal) => {
                self.classify_by_port(batch, port_idx, in_port, rule)
            }
            _ => self.classify_per_packet(batch, port_idx, in_port, simple.is_some(), now),
        }
    }

    fn rule_actions(&self, rule: Option<u32>) -> &[Action] {
        match rule {
            Some(r) => &self.cfg.classifier.rule(r).actions,
            None => &[],
        }
    }

    /// One decision, `rule` (or no rule: drop), for the whole batch.
    #[inline]
    fn classify_by_port(&mut self, batch: &mut MbufBatch, port_idx: usize, in_port: u16, rule: Option<u32>) -> u64 {
        // Locals, not fields: a store to `self` per frame would keep them in memory.
        let (mut bytes, mut care, mut malformed) = (0u64, self.care, false);
        for m in batch.as_slice() {
            bytes += u64::from(m.pkt_len());
            care.note(m);
            malformed |= check_head(m.data(), m.pkt_len() as usize).is_err();
        }
        self.care = care;
        let kept_bytes = if malformed { self.drop_malformed(batch, port_idx) } else { bytes };
        if let Some(r) = rule {
            self.count_rule_packets(r, batch.len() as u64, kept_bytes);
        }
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        targets.extend(self.rule_actions(rule).iter().filter_map(|a| match *a {
            Action::Output(p) if p != in_port => Some(p),
            _ => None,
        }));
        match targets.split_last() {
            None => {
                self.totals[port_idx].dropped_by_rules += batch.len() as u64;
                batch.clear();
            }
            Some((&last, others)) => {
                for &target in others {
                    for m in batch.as_slice() {
                        self.enqueue_copy(target, m);
                    }
                }
                self.enqueue_batch(last, batch, kept_bytes);
            }
        }
        self.targets = targets;
        bytes
    }

    /// Counts and frees the frames of `batch` that are not well formed; returns the bytes of
    /// the rest.
    #[cold]
    #[inline(never)]
    fn drop_malformed(&mut self, batch: &mut MbufBatch, port_idx: usize) -> u64 {
        let errors = &mut self.totals[port_idx].parse_errors;
        batch.retain(|m| match check_head(m.data(), m.pkt_len() as usize) {
            Ok(()) => true,
            Err(e) => {
                errors[e as usize] += 1;
                false
            }
        });
        batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum()
    }

    /// A key, a lookup and actions for each packet. `simple`: the rules decide by the input
    /// port alone (the packet is looked at for `normal` only), so no cache is counted.
    #[inline]
    fn classify_per_packet(
        &mut self,
        batch: &mut MbufBatch,
        port_idx: usize,
        in_port: u16,
        simple: bool,
        now: u64,
    ) -> u64 {
        let emc = !simple && self.caches[port_idx].1.uses_emc();
        // First parse and hash every packet and prefetch its exact-match-cache slot, then look
        // up and act, so cache misses overlap. `care` is a local: through `self` it would be a
        // load and a store per frame, each frame waiting on the one before.
        let mut care = self.care;
        for (slot, m) in self.keys.iter_mut().zip(batch.as_slice()) {
            care.note(m);
            *slot = match parse_head(m.data(), m.pkt_len() as usize, in_port) {
                Ok(k) => {
                    let h = if emc { k.hash64() } else { 0 };
                    if emc {
                        self.caches[port_idx].1.emc.prefetch(h);
                    }
                    (k, h, true)
                }
                Err(e) => {
                    self.totals[port_idx].parse_errors[e as usize] += 1;
                    (FlowKey::ZERO, 0, false)
                }
            };
        }
        self.care = care;
        let mut bytes = 0;
        // The previous decision when it came to one destination: the packets after it that
        // agree with its key on the bits it depended on (a run of one flow, or many flows of
        // one megaflow) skip the caches and the actions. And the last rule whose actions came
        // to one destination without looking at the packet: many flows matching one rule skip
        // the actions.
        let mut last: Option<Reuse> = None;
        let mut last_rule: Option<(u32, u16)> = None;
        // Reuses that repeated the deciding key, and all reuses: counted once per batch, not
        // per packet through the port's totals in memory.
        let (mut reused_exact, mut reused) = (0u64, 0u64);
        let mut drain = batch.drain();
        let mut i = 0;
        loop {
            if let Some(reuse) = &last {
                let run = self.take_run(&mut drain, i, reuse);
                i += run.packets as usize;
                bytes += run.bytes;
                reused += run.packets;
                reused_exact += run.exact;
            }
            let Some(m) = drain.next() else { break };
            let len = m.pkt_len();
            bytes += u64::from(len);
            let (key, hash, parsed) = self.keys[i];
            i += 1;
            if !parsed {
                continue;
            }
            let (rule, mask) = self.lookup_rule(&key, hash, in_port, port_idx);
            if let Some((r, target)) = last_rule.filter(|&(r, _)| r == rule) {
                self.count_rule_packets(r, 1, u64::from(len));
                last = Some(Reuse::new(key, mask, target, r));
                self.enqueue(target, m);
                continue;
            }
            let plain = self.act(rule, &key, in_port, now);
            if rule != NO_RULE {
                self.count_rule_packets(rule, 1, u64::from(len));
            }
            // Actions that looked at the packet (`normal`) hold for its exact key only.
            let mask = if plain { mask } else { FlowKey::EXACT };
            last = (self.targets.len() == 1).then(|| Reuse::new(key, mask, self.targets[0], rule));
            last_rule = match last {
                Some(reuse) if plain && rule != NO_RULE => Some((rule, reuse.target)),
                _ => last_rule,
            };
            let targets = std::mem::take(&mut self.targets);
            self.emit(m, &targets, port_idx);
            self.targets = targets;
        }
        if !simple {
            self.totals[port_idx].count_reuses(reused_exact, reused);
        }
        bytes
    }

    /// Takes from `drain` (whose next frame is the batch's `first`) the frames that parsed and
    /// whose keys agree with `reuse`'s on its mask, up to the first that does not, and queues
    /// them, in one move, where the decision sent its packet. Out of line, and counting in
    /// locals only, so the run's loop keeps the decision in registers and no frame waits on a
    /// store of the one before.
    #[inline(never)]
    fn take_run(&mut self, drain: &mut Drain<'_>, first: usize, reuse: &Reuse) -> Run {
        let rest = drain.rest();
        let mut run = Run::default();
        for (m, (key, _, parsed)) in rest.iter().zip(&self.keys[first..]) {
            if !*parsed || !key.masked_eq(&reuse.mask, &reuse.masked) {
                break;
            }
            run.packets += 1;
            run.bytes += u64::from(m.pkt_len());
            run.exact += u64::from(*key == reuse.key);
        }
        if run.packets == 0 {
            return run;
        }
        let target = usize::from(reuse.target);
        if self.out[target].is_empty() {
            self.dirty.push(reuse.target);
        }
        let wanted = run.packets as usize;
        let moved = drain.move_to(&mut self.out[target], wanted);
        let mut sent_bytes = run.bytes;
        if moved < wanted {
            // Unreachable while egress follows every batch; dropped (freed) and counted if not.
            for m in drain.by_ref().take(wanted - moved) {
                sent_bytes -= u64::from(m.pkt_len());
            }
            self.count_tx_drops(reuse.target, (wanted - moved) as u64);
        }
        self.out_bytes[target] += sent_bytes;
        if reuse.rule != NO_RULE {
            self.count_rule_packets(reuse.rule, run.packets, run.bytes);
        }
        run
    }

    /// The rule a parsed packet matches ([`NO_RULE`] if none) and the bits of its key that
    /// answer depended on, from the input port's rule or the port's caches.
    #[inline]
    fn lookup_rule(&mut self, key: &FlowKey, hash: u64, in_port: u16, port_idx: usize) -> (u32, FlowKey) {
        match self.cfg.classifier.by_in_port(in_port) {
            Some(r) => (r.unwrap_or(NO_RULE), FlowKey::EXACT),
            None => self.caches[port_idx].1.resolve(&self.cfg.classifier, key, hash, &mut self.totals[port_idx]),
        }
    }

    /// Fills `self.targets` with where `rule`'s actions send a packet of `key` from `in_port`.
    /// Returns true when they did not look at the packet (no `normal`), so another packet
    /// matching the rule goes to the same places.
    #[inline]
    fn act(&mut self, rule: u32, key: &FlowKey, in_port: u16, now: u64) -> bool {
        self.targets.clear();
        let actions: &[Action] = if rule == NO_RULE {
            // With no rules the switch is a MAC-learning L2 switch; with rules, a miss drops.
            if self.cfg.classifier.rules().is_empty() {
                &[Action::Normal]
            } else {
                &[]
            }
        } else {
            &self.cfg.classifier.rule(rule).actions
        };
        let mut plain = true;
        for action in actions {
            match *action {
                Action::Output(p) if p != in_port => self.targets.push(p),
                Action::Output(_) | Action::Drop => {}
                Action::Normal => {
                    plain = false;
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
        plain
    }

    #[inline(always)]
    fn count_rule_packets(&mut self, rule: u32, packets: u64, bytes: u64) {
        let hits = &mut self.rule_hits[rule as usize];
        if hits.0 == 0 {
            self.rules_touched.push(rule);
        }
        hits.0 += packets;
        hits.1 += bytes;
    }

    /// Hands a packet to its destinations: copies for all but the last; no destination drops it.
    #[inline]
    fn emit(&mut self, m: Mbuf, targets: &[u16], port_idx: usize) {
        let Some((&last, others)) = targets.split_last() else {
            self.totals[port_idx].dropped_by_rules += 1;
            return;
        };
        for &target in others {
            self.enqueue_copy(target, &m);
        }
        self.enqueue(last, m);
    }

    /// Queues a copy of `m` for `port`; a copy the pool has no room for is counted as the
    /// port's drop.
    fn enqueue_copy(&mut self, port: u16, m: &Mbuf) {
        match self.cfg.pool.copy(m) {
            Some(copy) => self.enqueue(port, copy),
            None => self.count_tx_drops(port, 1),
        }
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
            Err(_) => self.count_tx_drops(port, 1),
        }
    }

    /// Queues the whole `batch`, of `bytes`, for `port`; leaves it empty.
    #[inline]
    fn enqueue_batch(&mut self, port: u16, batch: &mut MbufBatch, bytes: u64) {
        let p = port as usize;
        if batch.is_empty() {
            return;
        }
        if self.out[p].is_empty() {
            self.dirty.push(port);
        }
        self.out_bytes[p] += bytes;
        self.out[p].append(batch);
        if !batch.is_empty() {
            // Only when one rule outputs to a port twice: the second batch does not fit.
            let (n, unsent) =
                (batch.len() as u64, batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum::<u64>());
            self.out_bytes[p] -= unsent;
            self.count_tx_drops(port, n);
            batch.clear();
        }
    }

    fn count_tx_drops(&self, port: u16, packets: u64) {
        if let Some(Some(tx)) = self.cfg.tx_ports.get(port as usize) {
            tx.counters.add_tx(0, 0, packets);
        }
    }

    /// Adds the rules' packets and bytes since the last call to the shared rule counters: with
    /// the ports' counters, not per batch, since each is an atomic add on a line the control
    /// plane reads.
    pub(super) fn publish_rule_hits(&mut self) {
        for &rule in &self.rules_touched {
            let (packets, bytes) = std::mem::take(&mut self.rule_hits[rule as usize]);
            self.cfg.rule_counters.packets[rule as usize].fetch_add(packets, Ordering::Relaxed);
            self.cfg.rule_counters.bytes[rule as usize].fetch_add(bytes, Ordering::Relaxed);
        }
        self.rules_touched.clear();
    }
}
