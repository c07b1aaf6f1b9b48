//! What `pmd-stats`, `port-stats` and `list-ports` answer: the data plane's counters with the
//! rates of the last sampling interval (1 s), in the spirit of `ovs-appctl
//! dpif-netdev/pmd-perf-show` and `pmd-rxq-show`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use slaswitch_datapath::datapath::LinkOut;
use slaswitch_datapath::histogram::Histogram;
use slaswitch_datapath::probe::ProbeReport;
use slaswitch_datapath::PortStats;

/// Percentiles of a port's residence times (`slaswitch_datapath` residence), microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResidenceUs {
    /// Frames timed.
    pub frames: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// The longest.
    pub max: f64,
}

impl ResidenceUs {
    /// `None` when no frame was timed.
    pub fn of(h: &Histogram) -> Option<ResidenceUs> {
        let us = |q: f64| h.quantile_ns(q).map(|ns| ns as f64 / 1e3);
        Some(ResidenceUs {
            frames: h.count(),
            p50: us(0.5)?,
            p90: us(0.9)?,
            p99: us(0.99)?,
            p999: us(0.999)?,
            max: h.max_ns() as f64 / 1e3,
        })
    }
}

/// Cycles per received packet in each stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageCycles {
    /// Ingress (receive, policing).
    pub ingress: f64,
    /// Classification (caches, rules).
    pub classification: f64,
    /// Egress (output, link schedulers).
    pub egress: f64,
    /// The three together.
    pub total: f64,
}

/// One port over the last interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortRates {
    /// The port.
    pub name: String,
    /// Received, thousands of packets per second.
    pub rx_kpps: f64,
    /// Received, Mbit/s.
    pub rx_mbps: f64,
    /// Sent, thousands of packets per second.
    pub tx_kpps: f64,
    /// Sent, Mbit/s.
    pub tx_mbps: f64,
    /// Cycles per received packet in each stage over the interval (cumulative if no packet came).
    pub cycles_per_packet: StageCycles,
    /// The port's busy cycles as a share of its PMD's cycles in the interval, in percent.
    pub pmd_share_pct: f64,
    /// Packets the exact-match cache answered, percent.
    pub emc_hit_pct: f64,
    /// Of the lookups that reached the megaflow cache (exact-match misses, or every packet while
    /// the exact-match cache is left out), the share a megaflow answered.
    pub megaflow_hit_pct: f64,
    /// Its frames' residence in the switch over the interval.
    pub residence_us: Option<ResidenceUs>,
    /// The same for its frames no stall of the PMD touched (the host did not take the PMD's
    /// core while they were in the switch).
    #[serde(default)]
    pub residence_unstalled_us: Option<ResidenceUs>,
}

/// One PMD over the last interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmdRates {
    /// Its core.
    pub core: usize,
    /// Busy share of its cycles, percent.
    pub busy_pct: f64,
    /// Its ports.
    pub ports: Vec<PortRates>,
}

/// `pmd-stats`: every PMD thread, its totals and its ports' stages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmdStatsReply {
    /// The TSC's rate, cycles per second.
    pub tsc_hz: u64,
    /// The sampling interval the rates cover, once there are two samples.
    pub interval_secs: Option<f64>,
    /// Every PMD thread.
    pub pmds: Vec<PmdView>,
    /// The packet pool.
    pub mbufs: MbufUse,
}

/// The packet pool's use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MbufUse {
    /// Mbufs out of the pool now.
    pub in_use: u32,
    /// Its size.
    pub total: u32,
}

/// One PMD thread in `pmd-stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmdView {
    /// Its core.
    pub core: usize,
    /// Cycles spent on packets.
    pub busy_cycles: u64,
    /// Cycles spent finding nothing.
    pub idle_cycles: u64,
    /// Cycles of the thread's stages that took longer than a stall's threshold: the host's
    /// (it took the core) or the thread's own system calls (a send through a kernel interface);
    /// `run_ns` tells them apart.
    pub stalled_cycles: u64,
    /// Nanoseconds the kernel ran the thread: over an interval, the wall time less this is
    /// what the host took from it.
    #[serde(default)]
    pub run_ns: Option<u64>,
    /// Batches that left a port owing tokens.
    pub qos_owed: u64,
    /// Batches that parked a port.
    pub qos_parked: u64,
    /// Batches a port ran as a turn going on, on a decision already made.
    #[serde(default)]
    pub qos_turn_batches: u64,
    /// Busy share over the last interval, percent.
    pub busy_pct_interval: Option<f64>,
    /// The host-speed factor the model's allocations follow (drift compensation).
    pub drift_factor: f64,
    /// What the overhead probe measured (`slaswitchd --probe`).
    pub probe: Option<ProbeReport>,
    /// The ports' stage cycles added up: equal to `busy_cycles` less the scheduler's decisions.
    pub stage_cycles_sum: u64,
    /// Its ports.
    pub ports: Vec<PmdPortView>,
}

/// One port of a PMD in `pmd-stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmdPortView {
    /// The port.
    pub name: String,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Batches with at least one packet.
    pub batches: u64,
    /// Polls that found nothing.
    pub empty_polls: u64,
    /// Packets its policer dropped.
    pub policer_drops: u64,
    /// Cycles of its ingress stage.
    pub ingress_cycles: u64,
    /// Cycles of its classification stage.
    pub classify_cycles: u64,
    /// Cycles of its egress stage.
    pub egress_cycles: u64,
    /// Cycles polling it and finding nothing.
    pub idle_cycles: u64,
    /// Exact-match cache hits.
    pub emc_hits: u64,
    /// Exact-match cache misses.
    pub emc_misses: u64,
    /// Megaflow cache hits.
    pub megaflow_hits: u64,
    /// Megaflow cache misses.
    pub megaflow_misses: u64,
    /// Megaflows cached now.
    pub megaflows: u64,
    /// Its frames' residence in the switch since the port was added.
    pub residence_us: Option<ResidenceUs>,
    /// The same for its frames no stall of the PMD touched.
    #[serde(default)]
    pub residence_unstalled_us: Option<ResidenceUs>,
    /// Its frames through paced ports' link schedulers: sent, dropped at its queue, and the
    /// schedulers' cycles spent on them (queueing in its egress stage, and a share of the
    /// dequeues that released them).
    pub link_out: LinkOut,
    /// Its rates over the last interval.
    pub interval: Option<PortRates>,
}

/// `port-stats`: the ports asked for and their rates.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PortStatsReply {
    /// Their counters.
    pub ports: Vec<PortStats>,
    /// Every port's rates over the last interval.
    pub rates: Vec<PortRates>,
}

/// One line of `list-ports`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortLine {
    /// The port.
    pub name: String,
    /// Its number.
    pub number: u16,
    /// Its type's name.
    #[serde(rename = "type")]
    pub port_type: String,
    /// The core of the PMD that polls it (none while it is down).
    pub pmd_core: Option<usize>,
    /// Its device's link.
    pub link_up: Option<bool>,
    /// Its vhost-user socket.
    pub socket: Option<String>,
    /// Its options as configured.
    pub options: Option<BTreeMap<String, String>>,
    /// `up`, or `error: ...` for a port that could not be restored.
    pub state: String,
}

/// `list-ports`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PortList(pub Vec<PortLine>);
