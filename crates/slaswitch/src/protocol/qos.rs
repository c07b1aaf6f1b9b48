//! What `qos-show`, `link-show` and `model-show` answer: each port's purchase and what C2QoS gives
//! it (seed 000 Sec. III-IV, the NIC fallback of Sec. VII), and a paced link's scheduler with its
//! VMs (seeds 002-004).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use slaswitch_datapath::counters::Place;
use slaswitch_datapath::datapath::{FallbackStatus, LinkStats, LinkVmStats};
use slaswitch_datapath::CpuMode;
use slaswitch_qos::cpu::{Allocation, BandwidthModel};

/// `qos-show`: what each port is given and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QosShowReply {
    /// The TSC's rate, cycles per second.
    pub tsc_hz: u64,
    /// How much of the core a C2TB bucket saves up by default, microseconds.
    pub c2tb_bucket_us: u64,
    /// The ports asked for.
    pub ports: Vec<QosPortView>,
    /// The NIC-bottleneck fallback.
    pub fallback: FallbackStatus,
    /// The bandwidth-CPU model in use.
    pub model: Option<ModelView>,
    /// Ports the switch moved between its PMDs.
    #[serde(default)]
    pub pmd_moves: super::pmd_moves::PmdMoves,
}

/// Where a port's cycles come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CyclesFrom {
    /// Its `cycles_per_sec` option.
    CyclesPerSec,
    /// Its purchase through the bandwidth-CPU model.
    Model,
    /// Nothing: unlimited.
    None,
}

/// One port in `qos-show`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QosPortView {
    /// The port.
    pub name: String,
    /// Its latency SLO and how it has been kept, when its purchase has one.
    #[serde(default)]
    pub latency_slo: Option<super::slo::SloStatus>,
    /// The core of its PMD.
    pub pmd_core: usize,
    /// Its allocation, cycles per second (0: unlimited).
    pub cycles_per_sec: u64,
    /// The factor the allocation follows, when it comes from the model and is compensated.
    pub drift_factor: Option<f64>,
    /// Bytes of its purchase it is owed (it was held short while backlogged), and the raise
    /// of its allocation paying them back ([`slaswitch_qos::cpu::promise`]).
    pub owed_bytes: Option<f64>,
    /// See `owed_bytes`.
    pub owed_raise: Option<f64>,
    /// The allocation in force after drift compensation and pay-back, cycles per second.
    pub effective_cycles_per_sec: u64,
    /// Where `cycles_per_sec` comes from.
    pub cycles_from: CyclesFrom,
    /// How its cycles are limited.
    pub mode: CpuMode,
    /// Its MIN-MAX weight.
    pub weight: u32,
    /// Its C2QoS class.
    pub priority: u8,
    /// What it purchased, bits per second of frames (0: nothing).
    pub bandwidth_bps: u64,
    /// The model's working, when the cycles come from it.
    pub allocation: Option<Allocation>,
    /// `cycles_per_sec` of the core, percent.
    pub allocated_pct_of_core: f64,
    /// Admitted: the allocations of every port on its PMD, as admission added them up.
    pub pmd_allocated_cycles_per_sec: u64,
    /// What the PMD can give its ports: the bound admission holds the allocations to.
    pub pmd_deliverable_cycles_per_sec: u64,
    /// In force: the allocations on its PMD as drift compensation scales them.
    pub pmd_effective_cycles_per_sec: u64,
    /// The PMD core's cycles.
    pub pmd_capacity_cycles_per_sec: u64,
    /// What its bucket may save up, cycles: a ring of its purchase's packets, or the switch's.
    pub bucket_depth_cycles: u64,
    /// Its cycle tokens (negative: it overdrew), none outside C2TB.
    pub tokens_cycles: Option<f64>,
    /// Its class now (dynamic priority may have lowered it).
    pub current_class: u8,
    /// Where it is in HBS.
    pub place: Place,
    /// Cycles of debt forgiven it as a latency-class port within its purchase
    /// (`slaswitch_qos::cpu::latency_class`).
    pub latency_forgiven_cycles: u64,
    /// What it used of the core over the last interval, percent.
    pub used_pct_of_core: Option<f64>,
    /// What it received over the last interval, Mbit/s.
    pub rx_mbps: Option<f64>,
    /// Its line rate when paced (0: not paced).
    pub link_rate_bps: u64,
    /// Frames in its paced queue.
    pub link_queued: usize,
    /// It is the host's uplink.
    pub uplink: bool,
    /// Frames the NIC fallback's byte limit dropped.
    pub fallback_drops: u64,
    /// Ingress policing, kbit/s, 0 when off.
    pub ingress_policing_rate: u64,
    /// Ingress policing, thousands of packets per second, 0 when off.
    pub ingress_policing_kpkts_rate: u64,
    /// The link half of its purchase: its row on the uplink's scheduler (`link-show`).
    pub link: Option<LinkVmRow>,
}

/// The model in use, in `qos-show`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelView {
    /// Its file.
    pub path: PathBuf,
    /// The machine it was measured on.
    pub machine: String,
    /// When, Unix seconds.
    pub measured_unix_secs: u64,
    /// That machine's TSC rate.
    pub tsc_hz: u64,
}

/// One VM's row of `link-show`: the data plane's figures and its rates over the last interval
/// (fulfillment = rate / guarantee as seed 003 Sec. 3.3 defines it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinkVmRow {
    /// The data plane's figures.
    #[serde(flatten)]
    pub stats: LinkVmStats,
    /// Wire bits/s sent over the last interval.
    pub rate_bps: Option<f64>,
    /// Of the link's rate, percent.
    pub share_pct: Option<f64>,
    /// rate / the guarantee in force, percent (none without a guarantee).
    pub fulfillment_pct: Option<f64>,
    /// Frames dropped over the interval.
    pub dropped_interval: Option<u64>,
    /// The scheduler's TSC cycles per frame over the interval.
    pub sched_cycles_per_frame: Option<f64>,
}

/// `link-show PORT`: the link as the data plane reports it, its VMs as rows with rates.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinkShowReply {
    /// The link (its VMs are in `vms`).
    #[serde(flatten)]
    pub link: LinkStats,
    /// The interval the rates cover.
    pub interval_secs: Option<f64>,
    /// All VMs' rates over the interval, of the link's rate, percent.
    pub utilisation_pct: Option<f64>,
    /// Every VM.
    pub vms: Vec<LinkVmRow>,
}

/// `model-show`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelShowReply {
    /// The daemon's model file.
    pub path: PathBuf,
    /// The model.
    pub model: BandwidthModel,
}
