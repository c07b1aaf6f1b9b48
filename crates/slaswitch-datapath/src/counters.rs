//! Counters the PMD threads publish and the control plane reads. Rx-side counters of a port have
//! one writer (the PMD that polls it), which accumulates locally and publishes with plain atomic
//! stores; tx-side counters may be written by several PMDs and use relaxed adds, once per burst.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};
use slaswitch_classifier::parse::PARSE_ERROR_KINDS;

use crate::histogram::{Histogram, SharedHistogram, Touched};

/// Rx-side figures of one port, as the owning PMD accumulates them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxTotals {
    /// Packets received and kept (policing's drops are not in it).
    pub rx_packets: u64,
    /// Bytes of those packets.
    pub rx_bytes: u64,
    /// Batches that carried at least one packet.
    pub batches: u64,
    /// Polls that found nothing.
    pub empty_polls: u64,
    /// Cycles spent polling the port and finding nothing (the PMD's idle time).
    pub idle_cycles: u64,
    /// Cycles of the ingress stage (less the scheduler's decisions).
    pub ingress_cycles: u64,
    /// Cycles of the classification stage.
    pub classify_cycles: u64,
    /// Cycles of the egress stage.
    pub egress_cycles: u64,
    /// Packets the exact-match cache answered, or that repeated the previous packet's flow.
    pub emc_hits: u64,
    /// Packets it did not answer: all that went to the megaflow cache, including while the
    /// exact-match cache is left out (a port whose megaflows need one mask).
    pub emc_misses: u64,
    /// Of those, packets the megaflow cache answered, or that agreed with the previous packet
    /// on the bits of its megaflow.
    pub megaflow_hits: u64,
    /// Packets that missed both caches and searched the whole classifier.
    pub megaflow_misses: u64,
    /// Megaflows cached for the port now (a level, not a running total).
    pub megaflows: u64,
    /// Packets a rule dropped, or that matched no rule.
    pub dropped_by_rules: u64,
    /// Packets the port's ingress policer dropped (they are not in `rx_packets`).
    pub policer_drops: u64,
    /// Packets the NIC-bottleneck fallback's byte limit dropped (seed 000 Sec. VII).
    pub fallback_drops: u64,
    /// What the switch did in software for the port's frames whose offloads their output port
    /// could not take.
    pub offload: OffloadTotals,
    /// Malformed frames dropped, by [`slaswitch_classifier::parse::ParseError`] kind.
    pub parse_errors: [u64; PARSE_ERROR_KINDS],
}

/// Software offloads for one rx port's frames (`crate::stages::offload`); their cycles are in
/// the port's egress cycles too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadTotals {
    /// Large TCP segments cut into frames in software.
    pub segmented: u64,
    /// The frames they became.
    pub segments: u64,
    /// Bytes of those frames (what the wire carries).
    pub segment_bytes: u64,
    /// Cycles spent cutting them (allocating and filling the frames, checksums included).
    pub segment_cycles: u64,
    /// Partial TCP/UDP checksums completed in software.
    pub checksums: u64,
    /// Frames dropped because they could not be made whole: a large segment that is not TCP or
    /// whose frames do not fit a buffer, or no buffer free.
    pub drops: u64,
}

impl RxTotals {
    /// Cycles of all three stages.
    pub fn busy_cycles(&self) -> u64 {
        self.ingress_cycles + self.classify_cycles + self.egress_cycles
    }

    /// `reused` packets that took the previous packet's decision: an exact-match hit for each
    /// of the `exact` that repeated that packet's key, a megaflow hit (the tier that would have
    /// answered) for the others.
    #[inline]
    pub(crate) fn count_reuses(&mut self, exact: u64, reused: u64) {
        self.emc_hits += exact;
        self.emc_misses += reused - exact;
        self.megaflow_hits += reused - exact;
    }
}

const RX_FIELDS: usize = 22;

/// A port's counters: rx from its PMD, tx from any PMD, C2QoS's view.
#[derive(Debug, Default)]
pub struct PortCounters {
    rx: [AtomicU64; RX_FIELDS + PARSE_ERROR_KINDS],
    /// Packets sent.
    pub tx_packets: AtomicU64,
    /// Bytes sent.
    pub tx_bytes: AtomicU64,
    /// Packets the port did not take (tx ring full, VM not connected) or no mbuf for a copy.
    pub tx_dropped: AtomicU64,
    /// Frames longer than the port's MTU allows, dropped instead of sent.
    pub tx_mtu_dropped: AtomicU64,
    /// The C2QoS scheduler's view of the port, published by its PMD (see [`CpuQosState`]).
    cpu_tokens_bits: AtomicU64,
    cpu_class_place: AtomicU64,
    cpu_forgiven_cycles: AtomicU64,
    cpu_token_waits: AtomicU64,
    /// The drift factor the port's model allocation follows (f64 bits; 0: none yet).
    drift_factor_bits: AtomicU64,
    /// What its purchase ledger says it is owed (bytes), and the raise paying it (f64 bits).
    owed_bytes_bits: AtomicU64,
    owed_raise_bits: AtomicU64,
    /// Its frames' residence times, a histogram's bucket counts (`crate::residence`).
    residence: SharedHistogram,
    /// The same for its frames no measured stall touched.
    residence_unstalled: SharedHistogram,
}

/// Where a port stands in its PMD's C2QoS scheduler, as last published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuQosState {
    /// Cycle tokens (negative: the port overdrew and waits); `None`: no bucket (unlimited).
    pub tokens_cycles: Option<f64>,
    /// Current class (1-8; dynamic priority may have lowered it), 0 when not scheduled.
    pub class: u8,
    /// Where it is in HBS's lists.
    pub place: Place,
    /// Cycles of debt forgiven it as a latency-class port within its purchase.
    pub forgiven_cycles: u64,
    /// Times it had to wait for cycle tokens (held to its allocation, its debt not forgiven).
    #[serde(default)]
    pub token_waits: u64,
}

/// Where a port is in HBS (seed 000 Sec. IV-B): its lists, or outside HBS (round robin, or not
/// scheduled yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// Not in HBS's lists.
    #[default]
    #[serde(rename = "")]
    Outside,
    /// Ready to run, with tokens.
    Ready,
    /// Out of tokens, waiting for them.
    Waiting,
    /// Being served now.
    InService,
    /// Idle: nothing to receive.
    Resting,
}

impl Place {
    const ALL: [Place; 5] = [Place::Outside, Place::Ready, Place::Waiting, Place::InService, Place::Resting];

    /// Its name in `qos-show` ("" outside HBS).
    pub fn name(self) -> &'static str {
        match self {
            Place::Outside => "",
            Place::Ready => "ready",
            Place::Waiting => "waiting",
            Place::InService => "in-service",
            Place::Resting => "resting",
        }
    }
}

impl PortCounters {
    /// Publishes the owner's running totals.
    pub fn publish(&self, t: &RxTotals) {
        let values = [
            t.rx_packets,
            t.rx_bytes,
            t.batches,
            t.empty_polls,
            t.idle_cycles,
            t.ingress_cycles,
            t.classify_cycles,
            t.egress_cycles,
            t.emc_hits,
            t.emc_misses,
            t.dropped_by_rules,
            t.policer_drops,
            t.fallback_drops,
            t.megaflow_hits,
            t.megaflow_misses,
            t.megaflows,
            t.offload.segmented,
            t.offload.segments,
            t.offload.segment_bytes,
            t.offload.segment_cycles,
            t.offload.checksums,
            t.offload.drops,
        ];
        for (slot, v) in self.rx.iter().zip(values.iter().chain(t.parse_errors.iter())) {
            slot.store(*v, Relaxed);
        }
    }

    /// The last published rx totals.
    pub fn rx(&self) -> RxTotals {
        let v: Vec<u64> = self.rx.iter().map(|a| a.load(Relaxed)).collect();
        let mut parse_errors = [0; PARSE_ERROR_KINDS];
        parse_errors.copy_from_slice(&v[RX_FIELDS..]);
        RxTotals {
            rx_packets: v[0],
            rx_bytes: v[1],
            batches: v[2],
            empty_polls: v[3],
            idle_cycles: v[4],
            ingress_cycles: v[5],
            classify_cycles: v[6],
            egress_cycles: v[7],
            emc_hits: v[8],
            emc_misses: v[9],
            dropped_by_rules: v[10],
            policer_drops: v[11],
            fallback_drops: v[12],
            megaflow_hits: v[13],
            megaflow_misses: v[14],
            megaflows: v[15],
            offload: OffloadTotals {
                segmented: v[16],
                segments: v[17],
                segment_bytes: v[18],
                segment_cycles: v[19],
                checksums: v[20],
                drops: v[21],
            },
            parse_errors,
        }
    }

    /// Publishes where the port stands in C2QoS's scheduler.
    pub fn publish_cpu_qos(&self, state: &CpuQosState) {
        self.cpu_tokens_bits.store(state.tokens_cycles.unwrap_or(f64::NAN).to_bits(), Relaxed);
        let place = Place::ALL.iter().position(|p| *p == state.place).unwrap_or(0) as u64;
        self.cpu_class_place.store(u64::from(state.class) << 8 | place, Relaxed);
        self.cpu_forgiven_cycles.store(state.forgiven_cycles, Relaxed);
        self.cpu_token_waits.store(state.token_waits, Relaxed);
    }

    /// Publishes the residence histograms of the port's frames, all of them and those no
    /// measured stall touched (both count a frame in the same bucket, so `touched` holds the
    /// buckets either counted into since the last publication); takes `touched` to none.
    pub fn publish_residence(&self, frames: &Histogram, unstalled: &Histogram, touched: &mut Touched) {
        let mut both = *touched;
        self.residence.publish(frames, touched);
        self.residence_unstalled.publish(unstalled, &mut both);
    }

    /// The residence histogram as last published.
    pub fn residence(&self) -> Histogram {
        self.residence.read()
    }

    /// The residence histogram of the frames no measured stall touched, as last published.
    pub fn residence_unstalled(&self) -> Histogram {
        self.residence_unstalled.read()
    }

    /// Where the port stood at the last publication.
    pub fn cpu_qos(&self) -> CpuQosState {
        let tokens = f64::from_bits(self.cpu_tokens_bits.load(Relaxed));
        let cp = self.cpu_class_place.load(Relaxed);
        CpuQosState {
            tokens_cycles: (!tokens.is_nan()).then_some(tokens),
            class: (cp >> 8) as u8,
            place: Place::ALL[(cp & 0xff) as usize % Place::ALL.len()],
            forgiven_cycles: self.cpu_forgiven_cycles.load(Relaxed),
            token_waits: self.cpu_token_waits.load(Relaxed),
        }
    }

    /// Publishes the factor its model allocation follows.
    pub fn publish_drift_factor(&self, factor: f64) {
        self.drift_factor_bits.store(factor.to_bits(), Relaxed);
    }

    /// The factor the port's model allocation follows, once measured.
    pub fn drift_factor(&self) -> Option<f64> {
        Some(f64::from_bits(self.drift_factor_bits.load(Relaxed))).filter(|f| *f > 0.0)
    }

    /// Publishes what the port is owed of its purchase and the raise of its allocation that
    /// pays it back ([`slaswitch_qos::cpu::promise`]).
    pub fn publish_owed(&self, owed_bytes: f64, raise: f64) {
        self.owed_bytes_bits.store(owed_bytes.to_bits(), Relaxed);
        self.owed_raise_bits.store(raise.to_bits(), Relaxed);
    }

    /// What the port is owed of its purchase (bytes) and its allocation's raise, once its
    /// ledger has run.
    pub fn owed(&self) -> Option<(f64, f64)> {
        let raise = f64::from_bits(self.owed_raise_bits.load(Relaxed));
        (raise > 0.0).then(|| (f64::from_bits(self.owed_bytes_bits.load(Relaxed)), raise))
    }

    /// [`Self::add_tx`] by the port's one writer: plain loads and stores instead of locked
    /// adds, which on x86 wait for every earlier store of the thread to reach the cache.
    #[inline]
    pub fn add_tx_sole_writer(&self, packets: u64, bytes: u64, dropped: u64) {
        let add = |c: &AtomicU64, n: u64| c.store(c.load(Relaxed) + n, Relaxed);
        add(&self.tx_packets, packets);
        add(&self.tx_bytes, bytes);
        if dropped > 0 {
            add(&self.tx_dropped, dropped);
        }
    }

    /// Counts a tx burst: packets and bytes sent, packets dropped.
    #[inline]
    pub fn add_tx(&self, packets: u64, bytes: u64, dropped: u64) {
        if packets > 0 {
            self.tx_packets.fetch_add(packets, Relaxed);
            self.tx_bytes.fetch_add(bytes, Relaxed);
        }
        if dropped > 0 {
            self.tx_dropped.fetch_add(dropped, Relaxed);
        }
    }
}

/// Whole-PMD figures: busy is the sum of every batch's three stages, idle everything else
/// (empty polls, reconfiguration), so busy + idle is the thread's whole time on the TSC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmdTotals {
    /// Cycles of every batch's three stages and the scheduler's decisions.
    pub busy_cycles: u64,
    /// Cycles of empty polls and waits.
    pub idle_cycles: u64,
    /// Passes over the poll order.
    pub passes: u64,
    /// Time a stage ran beyond [`crate::pmd::STALL_NS`]: the host's, charged to no port.
    pub stalled_cycles: u64,
    /// Batches after which a C2QoS port owed cycle tokens, and times a port was parked in the
    /// waiting queue for them (see `slaswitch_qos::cpu::WaitCounts`).
    pub qos_owed: u64,
    /// Times a port was parked in the waiting queue for tokens.
    pub qos_parked: u64,
    /// Batches a C2QoS port ran on a decision already made: the further batches of HBS's
    /// turns (`docs/deviations.md`, turns), which no decision precedes.
    pub qos_turn_batches: u64,
}

/// A PMD's totals as published, for the control plane.
#[derive(Debug, Default)]
pub struct PmdCounters {
    busy: AtomicU64,
    idle: AtomicU64,
    passes: AtomicU64,
    stalled: AtomicU64,
    qos_owed: AtomicU64,
    qos_parked: AtomicU64,
    qos_turn_batches: AtomicU64,
    /// The drift-compensation factor (f64 bits; 0 before the first window).
    drift_factor_bits: AtomicU64,
    /// The PMD thread's id (0 before it started).
    thread_id: AtomicU32,
}

impl PmdCounters {
    /// Publishes the PMD's totals.
    pub fn publish(&self, t: &PmdTotals) {
        self.busy.store(t.busy_cycles, Relaxed);
        self.idle.store(t.idle_cycles, Relaxed);
        self.passes.store(t.passes, Relaxed);
        self.stalled.store(t.stalled_cycles, Relaxed);
        self.qos_owed.store(t.qos_owed, Relaxed);
        self.qos_parked.store(t.qos_parked, Relaxed);
        self.qos_turn_batches.store(t.qos_turn_batches, Relaxed);
    }

    /// Records the PMD thread's id, from the thread.
    pub fn set_thread_id(&self, tid: u32) {
        self.thread_id.store(tid, Relaxed);
    }

    /// The PMD thread's id, once it runs.
    pub fn thread_id(&self) -> Option<u32> {
        Some(self.thread_id.load(Relaxed)).filter(|t| *t != 0)
    }

    /// Publishes the PMD-wide drift factor.
    pub fn publish_drift_factor(&self, factor: f64) {
        self.drift_factor_bits.store(factor.to_bits(), Relaxed);
    }

    /// The host-speed factor model allocations follow (1.0 until measured).
    pub fn drift_factor(&self) -> f64 {
        match f64::from_bits(self.drift_factor_bits.load(Relaxed)) {
            f if f > 0.0 => f,
            _ => 1.0,
        }
    }

    /// The last published totals.
    pub fn read(&self) -> PmdTotals {
        PmdTotals {
            busy_cycles: self.busy.load(Relaxed),
            idle_cycles: self.idle.load(Relaxed),
            passes: self.passes.load(Relaxed),
            stalled_cycles: self.stalled.load(Relaxed),
            qos_owed: self.qos_owed.load(Relaxed),
            qos_parked: self.qos_parked.load(Relaxed),
            qos_turn_batches: self.qos_turn_batches.load(Relaxed),
        }
    }
}

/// Packets and bytes per rule, added by each PMD with its ports' counters.
#[derive(Debug, Default)]
pub struct RuleCounters {
    /// Packets per rule.
    pub packets: Vec<AtomicU64>,
    /// Bytes per rule.
    pub bytes: Vec<AtomicU64>,
}

impl RuleCounters {
    /// Counters for `rules` rules, at zero.
    pub fn new(rules: usize) -> Self {
        RuleCounters {
            packets: (0..rules).map(|_| AtomicU64::new(0)).collect(),
            bytes: (0..rules).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sole_writer_counts_what_the_locked_adds_count() {
        let (locked, sole) = (PortCounters::default(), PortCounters::default());
        for (packets, bytes, dropped) in [(32, 2048, 0), (0, 0, 5), (7, 448, 25)] {
            locked.add_tx(packets, bytes, dropped);
            sole.add_tx_sole_writer(packets, bytes, dropped);
        }
        let read =
            |c: &PortCounters| [c.tx_packets.load(Relaxed), c.tx_bytes.load(Relaxed), c.tx_dropped.load(Relaxed)];
        assert_eq!(read(&sole), read(&locked));
        assert_eq!(read(&sole), [39, 2496, 30]);
    }
}
