//! What a PMD thread runs on, handed over whole by the control plane: its rx ports with their
//! settings, every tx port, the classifier and the shared resources. The thread swaps a new
//! [`PmdConfig`] in between passes (`crate::pmd`), so the hot loop never takes a lock for it.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use slaswitch_classifier::Classifier;
use slaswitch_dpdk::{EthPort, Mempool, RxPath};
use slaswitch_qos::cpu::{BandwidthModel, C2tbConfig, TrafficProfile};

use crate::counters::{PortCounters, RuleCounters};
use crate::kernel_tx::KernelTx;
use crate::paced_tx::{Fallback, PacedLink};
use crate::residence::TicksToNs;
use slaswitch_config::cpu_qos::CpuQos;
use slaswitch_config::policing::PolicingSpec;

use slaswitch_config::ranges::MAX_PORTS;

/// A port the PMD polls, with what it enforces on it.
#[derive(Clone)]
pub struct RxPort {
    /// Its number.
    pub number: u16,
    /// Its device.
    pub eth: EthPort,
    /// Its rx queues (a multiqueue vhost port has several), polled together as one port.
    pub queues: u16,
    /// How its frames are received.
    pub rx_path: RxPath,
    /// Its counters.
    pub counters: Arc<PortCounters>,
    /// Its ingress policing.
    pub policing: Option<PolicingSpec>,
    /// Its C2QoS settings.
    pub cpu_qos: CpuQos,
    /// The purchased bandwidth in bits/s of frames: enforced while the NIC-bottleneck fallback
    /// is on, and what a latency-class port is held to (`slaswitch_qos::cpu::latency_class`).
    pub purchase_bps: Option<u64>,
    /// The allocation the model gave, when it follows the host's speed (drift compensation).
    pub model_cycles: Option<ModelCycles>,
}

/// A port's allocation from the bandwidth-CPU model, with the profile it was priced for.
#[derive(Clone, Copy, Debug)]
pub struct ModelCycles {
    /// The allocation, cycles per second.
    pub cycles_per_sec: u64,
    /// The purchase it was priced from, bits per second of frames: what the port's ledger
    /// holds it to ([`slaswitch_qos::cpu::promise`]).
    pub purchase_bps: u64,
    /// The profile it was priced for.
    pub profile: TrafficProfile,
    /// The model's rows were measured on ports of this port's kind (vhost-user).
    pub calibrated_kind: bool,
    /// prod(R_i) of the allocation: `cycles_per_sec` already pays for that much dearer packets.
    pub deployment_factor: f64,
}

/// A port the PMD may transmit on.
#[derive(Clone)]
pub struct TxPort {
    /// Its number.
    pub number: u16,
    /// Its device.
    pub eth: EthPort,
    /// Its counters.
    pub counters: Arc<PortCounters>,
    /// Taken around `tx_burst` when several PMDs transmit on it, and by every send of a paced link.
    pub lock: Arc<AtomicBool>,
    /// Set when the port has a line rate (`link_rate_bps`).
    pub paced: Option<Arc<PacedLink>>,
    /// A kernel port's sender thread, which sends its unpaced frames off the PMD.
    pub kernel: Option<Arc<KernelTx>>,
    /// For a vhost port: whether it takes large TCP segments from the switch when its guest
    /// negotiated them (its `tso` option). `None`: not a vhost port, it takes no offloads.
    pub vhost_tso: Option<bool>,
    /// The longest frame it sends (its MTU's): longer ones are dropped and counted.
    pub max_frame_bytes: u32,
}

impl TxPort {
    /// What a paced link sends through.
    pub fn device(&self) -> crate::paced_tx::TxDevice<'_> {
        crate::paced_tx::TxDevice { eth: self.eth, lock: &self.lock, counters: &self.counters }
    }
}

/// Everything a PMD needs, swapped as a whole.
pub struct PmdConfig {
    /// The ports this PMD polls, by number.
    pub rx_ports: Vec<RxPort>,
    /// Indexed by port number.
    pub tx_ports: Vec<Option<TxPort>>,
    /// Port numbers a flooded packet goes to (all ports).
    pub flood: Vec<u16>,
    /// The rules.
    pub classifier: Arc<Classifier>,
    /// Per-rule counters.
    pub rule_counters: Arc<RuleCounters>,
    /// Several PMDs may transmit on one port: take its tx lock and count with locked adds.
    /// False only with one PMD thread, the one writer of every plain port's tx counters.
    pub shared_tx: bool,
    /// The mbuf pool, for copies.
    pub pool: Arc<Mempool>,
    /// TSC ticks after which a learned MAC is forgotten.
    pub mac_max_age_tsc: u64,
    /// Depth of every C2TB bucket, microseconds of the core (`DatapathSettings::c2tb_bucket_us`).
    pub c2tb_bucket_us: u64,
    /// `DatapathSettings::lower_class_burst`.
    pub lower_class_burst: u32,
    /// `DatapathSettings::idle_poll_us`.
    pub idle_poll_us: u64,
    /// `DatapathSettings::max_sleep_us`.
    pub max_sleep_us: u64,
    /// The TSC's frequency.
    pub tsc_hz: u64,
    /// TSC ticks to nanoseconds by a multiplier: the loop converts every pass (pacing,
    /// policing), and a 128-bit division there is a library call.
    pub(crate) clock: TicksToNs,
    /// Numbers of the paced ports (every PMD drains them).
    pub paced: Vec<u16>,
    /// Numbers of the kernel ports with a sender thread, which owes their sources cycles.
    pub kernel_senders: Vec<u16>,
    /// The NIC-bottleneck fallback's shared state.
    pub fallback: Arc<Fallback>,
    /// The bandwidth-CPU model, for drift compensation.
    pub model: Option<Arc<BandwidthModel>>,
}

/// What the control plane tells a PMD thread.
pub enum PmdMessage {
    /// Swap in a new configuration; reply once the old one is no longer used.
    Config(Arc<PmdConfig>, Sender<()>),
    /// Stop.
    Quit,
}

impl PmdConfig {
    /// The bucket depth of rx port `p` whose allocation is scaled by `factor`: its own (a
    /// purchase's ring of packets, scaled like its allocation), never below the switch's;
    /// `None` for a port that keeps the switch's.
    pub fn bucket_depth_cycles(&self, p: &RxPort, factor: f64) -> Option<u64> {
        p.cpu_qos.own_bucket_depth(factor, C2tbConfig::depth_cycles(self.tsc_hz, self.c2tb_bucket_us))
    }

    /// Port number -> index in `rx_ports` (`u16::MAX` for ports this PMD does not poll).
    pub fn rx_index_by_number(&self) -> Vec<u16> {
        let mut v = vec![u16::MAX; MAX_PORTS];
        for (i, p) in self.rx_ports.iter().enumerate() {
            v[p.number as usize] = i as u16;
        }
        v
    }
}
