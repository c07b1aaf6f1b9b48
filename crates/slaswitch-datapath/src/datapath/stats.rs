//! What the data plane shows of its ports and PMDs: `port-stats`, `pmd-stats` and the
//! NIC-bottleneck fallback of `qos-show`, read from the counters the PMDs publish.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use serde::{Deserialize, Serialize};
use slaswitch_dpdk::EthStats;
use slaswitch_qos::cpu::{Allocation, CycleLimit};

use super::Datapath;
use crate::counters::{CpuQosState, PmdTotals, RxTotals};
use crate::histogram::Histogram;
use crate::paced_tx::LinkOut;
use crate::probe::ProbeReport;
use slaswitch_config::policing::PolicingSpec;

/// What `port-stats` shows of one port.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PortStats {
    /// The port's name.
    pub name: String,
    /// Its number (OpenFlow's ofport).
    pub number: u16,
    /// Its type's name.
    #[serde(rename = "type")]
    pub port_type: String,
    /// The core of the PMD that polls it.
    pub pmd_core: usize,
    /// True when its device reports its link up.
    pub link_up: bool,
    /// Its vhost-user socket, if it has one.
    pub socket: Option<String>,
    /// What its PMD counted.
    pub rx: RxTotals,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets it did not take (ring full, VM not connected) or no mbuf for a copy.
    pub tx_dropped: u64,
    /// Frames longer than its MTU allows (`mtu_request`), dropped instead of sent.
    pub tx_mtu_dropped: u64,
    /// Its MTU.
    pub mtu_bytes: u16,
    /// The driver's own counters (ring overruns show here as rx_missed).
    pub device_rx_missed: u64,
    /// Receives the device could not give an mbuf.
    pub device_rx_nombuf: u64,
    /// Frames the driver refused before the switch saw them (`rte_eth_stats.ierrors`): a tap
    /// port counts here a frame longer than its receive buffers.
    pub device_rx_errors: u64,
    /// Where it stands in C2QoS's scheduler.
    pub cpu_qos: CpuQosState,
    /// The cycles the port is allocated (0: unlimited), from `cycles_per_sec` or the model.
    pub cycles_per_sec: u64,
    /// How its cycles are limited.
    pub cpu_mode: CpuMode,
    /// Its C2QoS class.
    pub priority: u8,
    /// The MIN-MAX share weight.
    pub weight: u32,
    /// Its own bucket depth, cycles, before drift compensation scales it (`None`: the
    /// switch's).
    pub bucket_depth_cycles: Option<u64>,
    /// Its model allocation follows drift compensation (`drift_compensation`, on by default).
    pub drift_compensation: bool,
    /// Ingress policing, when set.
    pub policing: Option<PolicingSpec>,
    /// What the port's VM purchased (bits/s of frames), 0 when nothing.
    pub bandwidth_bps: u64,
    /// The model's working when the cycles come from it (seed 000 Sec. III).
    pub allocation: Option<Allocation>,
    /// The drift factor its model allocation follows (drift compensation), once measured.
    pub drift_factor: Option<f64>,
    /// What its purchase ledger says it is owed (bytes) and the raise of its allocation that
    /// pays it back, once the ledger has run.
    pub owed: Option<(f64, f64)>,
    /// Its line rate when paced (0: not paced).
    pub link_rate_bps: u64,
    /// Frames waiting in its paced queue.
    pub link_queued: usize,
    /// It is the host's uplink.
    pub uplink: bool,
    /// Its frames through the paced ports' schedulers (as a source VM), all paced ports
    /// together.
    pub link_out: LinkOut,
    /// The port's options (its QoS settings among them).
    pub options: BTreeMap<String, String>,
    /// Its frames' residence times in the switch since it was added, nanoseconds, paced
    /// links' queues included (`pmd-stats` shows percentiles).
    #[serde(skip)]
    pub residence: Histogram,
    /// Its purchase's latency SLO, microseconds (`latency_p99_us`).
    pub latency_p99_us: Option<u32>,
    /// The part of it its frames waited in paced links' queues, nanoseconds.
    #[serde(skip)]
    pub link_wait: Histogram,
    /// `residence` of the frames no stall of the PMD measured touched, nanoseconds
    /// (`crate::residence`).
    #[serde(skip)]
    pub residence_unstalled: Histogram,
}

/// How a port's cycles are limited (seed 000 Sec. IV-A): C2TB strict, MIN-MAX, or not at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuMode {
    /// No limit.
    #[default]
    Unlimited,
    /// Never more than its allocation.
    Strict,
    /// At least its allocation, more while the core has cycles to spare.
    MinMax,
}

impl std::fmt::Display for CpuMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            CpuMode::Unlimited => "unlimited",
            CpuMode::Strict => "strict",
            CpuMode::MinMax => "min-max",
        })
    }
}

/// One PMD thread's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PmdStats {
    /// Its core.
    pub core: usize,
    /// Its totals.
    pub totals: PmdTotals,
    /// Host-speed factor the model's allocations follow (drift compensation).
    pub drift_factor: f64,
    /// The ports it polls.
    pub ports: Vec<String>,
    /// Nanoseconds its thread has run, as the kernel counts it (`crate::host_time`): over an
    /// interval, the wall time less this is what the host took from the PMD.
    #[serde(default)]
    pub run_ns: Option<u64>,
    /// The comparison of C2QoS with round robin, when on.
    /// What the overhead probe measured, when it runs.
    pub probe: Option<ProbeReport>,
}

/// The NIC-bottleneck fallback as `qos-show` reports it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FallbackStatus {
    /// The uplink's name, if there is one.
    pub uplink: Option<String>,
    /// False when the uplink has `nic_fallback=false`.
    pub enabled: bool,
    /// Its line rate.
    pub link_rate_bps: u64,
    /// The byte limits are in force.
    pub engaged: bool,
    /// The uplink's utilisation in the last window (0 to 1).
    pub utilisation: f64,
    /// Times the fallback engaged.
    pub engagements: u64,
    /// Frames the byte limits dropped.
    pub drops: u64,
}

impl Datapath {
    /// Every port's counters and settings.
    pub fn port_stats(&self) -> Vec<PortStats> {
        let mut out: Vec<PortStats> = self
            .ports
            .values()
            .map(|p| {
                let dev: EthStats = p.eth.stats().unwrap_or_default();
                let through_links = self.link_residence(p.spec.number);
                let (sent_off_pmd, sent_off_pmd_unstalled) = self.kernel_sent_residence(p.spec.number);
                PortStats {
                    name: p.spec.name.clone(),
                    number: p.spec.number,
                    port_type: p.spec.port_type.name().into(),
                    pmd_core: self.pmds[p.pmd].core,
                    link_up: p.eth.link_up(),
                    socket: p.spec.socket_path(&self.settings.run_dir),
                    rx: p.counters.rx(),
                    tx_packets: p.counters.tx_packets.load(Relaxed),
                    tx_bytes: p.counters.tx_bytes.load(Relaxed),
                    tx_dropped: p.counters.tx_dropped.load(Relaxed),
                    tx_mtu_dropped: p.counters.tx_mtu_dropped.load(Relaxed),
                    mtu_bytes: p.settings.mtu_bytes,
                    device_rx_missed: dev.imissed,
                    device_rx_nombuf: dev.rx_nombuf,
                    device_rx_errors: dev.ierrors,
                    cpu_qos: p.counters.cpu_qos(),
                    cycles_per_sec: p.plan.cpu_qos.limit.alloc_cycles_per_sec(),
                    cpu_mode: match p.plan.cpu_qos.limit {
                        CycleLimit::Unlimited => CpuMode::Unlimited,
                        CycleLimit::Strict { .. } => CpuMode::Strict,
                        CycleLimit::MinMax { .. } => CpuMode::MinMax,
                    },
                    priority: p.plan.cpu_qos.priority,
                    weight: p.plan.cpu_qos.weight(),
                    bucket_depth_cycles: p.plan.cpu_qos.bucket_depth_cycles,
                    drift_compensation: p.plan.sla.is_some_and(|s| s.drift_compensation),
                    policing: p.plan.policing,
                    bandwidth_bps: p.plan.sla.map_or(0, |s| s.bandwidth_bps),
                    allocation: p.plan.allocation.clone(),
                    drift_factor: p.counters.drift_factor(),
                    owed: p.counters.owed(),
                    link_rate_bps: p.plan.link.link_rate_bps,
                    link_queued: p.paced.as_ref().map_or(0, |l| l.queued()),
                    uplink: p.plan.link.uplink,
                    link_out: self.link_out(p.spec.number),
                    options: p.spec.options.clone(),
                    residence: {
                        let mut r = p.counters.residence();
                        r.merge(&through_links.total);
                        r.merge(&sent_off_pmd);
                        r
                    },
                    residence_unstalled: {
                        let mut r = p.counters.residence_unstalled();
                        r.merge(&through_links.unstalled);
                        r.merge(&sent_off_pmd_unstalled);
                        r
                    },
                    link_wait: through_links.queue_wait,
                    latency_p99_us: p.plan.sla.and_then(|s| s.latency_p99_us),
                }
            })
            .collect();
        out.sort_by_key(|p| p.number);
        out
    }

    /// Every PMD's figures.
    pub fn pmd_stats(&self) -> Vec<PmdStats> {
        self.pmds
            .iter()
            .enumerate()
            .map(|(i, p)| PmdStats {
                core: p.core,
                totals: p.counters.read(),
                drift_factor: p.counters.drift_factor(),
                run_ns: p.counters.thread_id().and_then(crate::host_time::run_ns),
                probe: p.probe.as_ref().map(|c| c.read()),
                ports: self.ports.values().filter(|e| e.pmd == i).map(|e| e.spec.name.clone()).collect(),
            })
            .collect()
    }

    /// The NIC-bottleneck fallback's state.
    pub fn fallback_status(&self) -> FallbackStatus {
        let uplink = self.ports.values().find(|p| p.plan.link.uplink);
        FallbackStatus {
            uplink: uplink.map(|p| p.spec.name.clone()),
            enabled: uplink.is_some_and(|p| p.plan.link.nic_fallback),
            link_rate_bps: uplink.map_or(0, |p| p.plan.link.link_rate_bps),
            engaged: self.fallback.engaged.load(Relaxed),
            utilisation: self.fallback.utilisation(),
            engagements: self.fallback.engagements.load(Relaxed),
            drops: self.fallback.drops.load(Relaxed),
        }
    }
}
