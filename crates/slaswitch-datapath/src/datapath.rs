//! The data plane's control side: owns EAL, the mbuf pool, the ports and the rules, and hands
//! each PMD thread a new [`PmdConfig`] when any of them changes. A change is all-or-nothing: a
//! port whose device cannot be created or started is rolled back, and a rule set that does not
//! parse is refused before anything is sent to the PMDs.
//!
//! A removed port is taken out of every PMD's configuration first; only once every PMD has
//! acknowledged the new configuration is its device stopped and closed, so no thread ever polls
//! a closed port and other ports keep forwarding throughout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use slaswitch_classifier::{Classifier, Rule};
use slaswitch_dpdk::{hugepage_status, Eal, EthPort, Mempool, RxPath};

use slaswitch_qos::cpu::BandwidthModel;

use crate::counters::{PmdCounters, PortCounters, RuleCounters};
use crate::error::DatapathError;
use crate::kernel_tx::KernelSender;
use crate::paced_tx::{Fallback, PacedLink};
use crate::pmd;
use crate::pmd_config::{ModelCycles, PmdConfig, PmdMessage, RxPort, TxPort};
use crate::probe::{ProbeCounters, ProbeSettings};
use slaswitch_config::allocation::PortPlan;
use slaswitch_config::link_policy::DEFAULT_TENANT;
use slaswitch_config::port::{DeviceRecipe, PortSpec, PortType};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::ranges::MAX_PORTS;

mod links;
mod pmd_moves;
mod ports;
mod rules;
mod stats;
pub use crate::paced_tx::LinkOut;
pub use links::{DropPolicy, LinkStats, LinkVmStats, Tenant, TENANT_WEIGHTS};
pub(crate) use ports::UpdatedPort;
pub use rules::FlowStats;
pub use stats::{CpuMode, FallbackStatus, PmdStats, PortStats};

/// How the data plane is started.
#[derive(Clone, Debug)]
pub struct DatapathSettings {
    /// Cores of the PMD threads, one thread each.
    pub pmd_cores: Vec<usize>,
    /// Core of EAL's main thread (the control plane).
    pub main_core: usize,
    /// EAL `--file-prefix`: several instances (and OVS) can run side by side.
    pub file_prefix: String,
    /// Where vhost-user sockets are created by default.
    pub run_dir: PathBuf,
    /// Mbufs in the packet pool.
    pub mbufs: u32,
    /// Use hugepages (the default); without, EAL runs on ordinary memory (`--no-huge`).
    pub hugepages: bool,
    /// Let EAL scan the PCI bus (for `dpdk` ports); off by default on a host with no NIC.
    pub pci: bool,
    /// Seconds before a learned MAC address is forgotten.
    pub mac_max_age_secs: u64,
    /// Depth of every C2TB cycle bucket (Algorithm 1's `bucket_depth`), in microseconds of a
    /// whole core: how much of its allocation a port may save up while it has nothing to send.
    pub c2tb_bucket_us: u64,
    /// While a latency-class port with a purchase is on a PMD, its lower-class ports beyond
    /// their purchase are polled for at most this many packets at a time
    /// (`slaswitch_qos::cpu::HbsConfig::lower_class_burst`; 0 or 32: full batches).
    pub lower_class_burst: u32,
    /// A port without C2QoS settings that received nothing for a while is polled once every
    /// this many microseconds instead of every pass (`crate::idle_polling`); 0: every pass.
    pub idle_poll_us: u64,
    /// After a pass in which no queue was filling, a PMD sleeps, longer each such pass up to
    /// this many microseconds (`crate::pmd_sleep`); 0: it never sleeps.
    pub max_sleep_us: u64,
    /// Kernel ports (tap, af_packet) send from a thread of their own on the cores the PMDs
    /// leave (`crate::kernel_tx`), not from the PMD; off: the PMD makes the system call.
    pub kernel_tx_threads: bool,
    /// Measure C2QoS's own work on every PMD, and optionally compare it live with round robin
    /// ([`crate::probe`]); `None`, the default, runs the PMDs without a probe.
    pub probe: Option<ProbeSettings>,
}

impl DatapathSettings {
    /// EAL's arguments for these settings.
    pub fn eal_args(&self) -> Vec<String> {
        let mut args = vec![
            "slaswitchd".to_string(),
            "--file-prefix".into(),
            self.file_prefix.clone(),
            "--log-level".into(),
            "*:warning".into(),
        ];
        if !self.pci {
            args.push("--no-pci".into());
        }
        if self.hugepages {
            args.push("--single-file-segments".into());
        } else {
            args.extend(["--no-huge".into(), "-m".into(), "1024".into()]);
        }
        args
    }
}

struct PortEntry {
    spec: PortSpec,
    /// Its options parsed, once, when they were set.
    settings: PortSettings,
    eth: EthPort,
    /// How its PMD receives from it.
    rx_path: RxPath,
    recipe: DeviceRecipe,
    counters: Arc<PortCounters>,
    tx_lock: Arc<AtomicBool>,
    /// Index into `Datapath::pmds` of the thread that polls it.
    pmd: usize,
    /// What its PMD enforces (from its options and the bandwidth model).
    plan: PortPlan,
    /// Its link and queue when it has a line rate.
    paced: Option<Arc<PacedLink>>,
    /// A kernel port's sender thread (`crate::kernel_tx`).
    kernel_tx: Option<KernelSender>,
}

struct PmdHandle {
    core: usize,
    sender: Sender<PmdMessage>,
    counters: Arc<PmdCounters>,
    probe: Option<Arc<ProbeCounters>>,
    join: Option<JoinHandle<()>>,
}

/// Ports, rules and PMD threads. Fields drop in order: EAL goes last.
pub struct Datapath {
    settings: DatapathSettings,
    ports: BTreeMap<String, PortEntry>,
    rules: Vec<Rule>,
    classifier: Arc<Classifier>,
    rule_counters: Arc<RuleCounters>,
    pmds: Vec<PmdHandle>,
    /// The bandwidth-CPU model purchases are turned into cycles with.
    model: Option<BandwidthModel>,
    /// PIE-VDE's tenants by name (always holds [`DEFAULT_TENANT`]).
    tenants: BTreeMap<String, Tenant>,
    fallback: Arc<Fallback>,
    pool: Arc<Mempool>,
    eal: Eal,
}

impl Datapath {
    /// Starts EAL and the PMD threads (with no ports yet).
    pub fn start(settings: DatapathSettings) -> Result<Datapath, DatapathError> {
        if settings.pmd_cores.is_empty() {
            return Err(DatapathError::NoPmdCore);
        }
        let cores = pmd::online_cores();
        if let Some(&bad) = settings.pmd_cores.iter().chain([&settings.main_core]).find(|&&c| c >= cores) {
            return Err(DatapathError::NoSuchCore { core: bad, last: cores - 1 });
        }
        if settings.hugepages {
            let (total, free, mounted) = hugepage_status();
            if total == 0 || free == 0 || !mounted {
                return Err(DatapathError::NoHugepages { total, free, mounted });
            }
        }
        std::fs::create_dir_all(&settings.run_dir)
            .map_err(|cause| DatapathError::RunDir { path: settings.run_dir.display().to_string(), cause })?;
        let eal = Eal::init(settings.main_core, &settings.eal_args())?;
        let pool =
            Arc::new(Mempool::new(&eal, &format!("{}_mbufs", settings.file_prefix), settings.mbufs, 256, 2048 + 128)?);
        let classifier = Arc::new(Classifier::new(Vec::new()));
        let rule_counters = Arc::new(RuleCounters::new(0));
        let mut dp = Datapath {
            settings,
            ports: BTreeMap::new(),
            rules: Vec::new(),
            classifier,
            rule_counters,
            pmds: Vec::new(),
            model: None,
            tenants: BTreeMap::from([(DEFAULT_TENANT.to_string(), Tenant { index: 0, weight: 1 })]),
            fallback: Arc::new(Fallback::default()),
            pool,
            eal,
        };
        for core in dp.settings.pmd_cores.clone() {
            let (sender, receiver) = channel();
            let counters = Arc::new(PmdCounters::default());
            let cfg = dp.pmd_config(dp.pmds.len(), &[]);
            let thread_counters = counters.clone();
            let probe = dp.settings.probe.map(|_| Arc::new(ProbeCounters::default()));
            let thread_probe = dp.settings.probe.zip(probe.clone());
            let register = dp.eal.thread_registrar();
            let join = std::thread::Builder::new()
                .name(format!("pmd-c{core:02}"))
                .spawn(move || {
                    thread_counters.set_thread_id(crate::host_time::current_thread_id());
                    if let Err(e) = pmd::pin_to_core(core) {
                        tracing::warn!("{e}");
                    }
                    if let Err(e) = register() {
                        tracing::warn!("PMD on core {core} runs without an lcore id (no mempool cache): {e}");
                    }
                    pmd::run(cfg, receiver, thread_counters, thread_probe);
                })
                .map_err(|cause| DatapathError::PmdThread { core, cause })?;
            dp.pmds.push(PmdHandle { core, sender, counters, probe, join: Some(join) });
        }
        Ok(dp)
    }

    /// The TSC's frequency.
    pub fn tsc_hz(&self) -> u64 {
        self.eal.tsc_hz()
    }

    /// Mbufs of the packet pool: (in use, in all). In use are those in rings, queues and the
    /// PMDs' hands; the per-core caches count as free. An idle switch's figure is its rings'
    /// fill; one that keeps growing is a leak.
    pub fn mbufs(&self) -> (u32, u32) {
        let total = self.settings.mbufs;
        (total.saturating_sub(self.pool.available()), total)
    }

    /// The settings it was started with.
    pub fn settings(&self) -> &DatapathSettings {
        &self.settings
    }

    /// Every port as configured.
    pub fn port_specs(&self) -> Vec<PortSpec> {
        let mut specs: Vec<PortSpec> = self.ports.values().map(|p| p.spec.clone()).collect();
        specs.sort_by_key(|s| s.number);
        specs
    }

    /// The configuration of PMD `pmd_index`: the rx ports placed on it, less those `parked`
    /// (between the two steps of a move, polled by no PMD).
    fn pmd_config(&self, pmd_index: usize, parked: &[u16]) -> Arc<PmdConfig> {
        let mut tx_ports: Vec<Option<TxPort>> = vec![None; MAX_PORTS];
        let mut flood = Vec::new();
        let mut rx_ports = Vec::new();
        let mut paced = Vec::new();
        let mut kernel_senders = Vec::new();
        for p in self.ports.values() {
            tx_ports[p.spec.number as usize] = Some(TxPort {
                number: p.spec.number,
                eth: p.eth,
                counters: p.counters.clone(),
                lock: p.tx_lock.clone(),
                paced: p.paced.clone(),
                kernel: p.kernel_tx.as_ref().map(|k| k.shared().clone()),
                vhost_tso: p.spec.port_type.is_vhost().then(|| p.spec.tso().unwrap_or(true)),
                max_frame_bytes: p.settings.max_frame_bytes(),
            });
            flood.push(p.spec.number);
            if p.paced.is_some() {
                paced.push(p.spec.number);
            }
            if p.kernel_tx.is_some() {
                kernel_senders.push(p.spec.number);
            }
            if p.pmd == pmd_index && !parked.contains(&p.spec.number) {
                rx_ports.push(RxPort {
                    number: p.spec.number,
                    eth: p.eth,
                    queues: p.spec.queues().unwrap_or(1),
                    rx_path: p.rx_path,
                    counters: p.counters.clone(),
                    policing: p.plan.policing,
                    cpu_qos: p.plan.cpu_qos,
                    purchase_bps: p.plan.sla.map(|s| s.bandwidth_bps),
                    model_cycles: p.plan.allocation.as_ref().zip(p.plan.sla.filter(|s| s.drift_compensation)).map(
                        |(a, sla)| ModelCycles {
                            cycles_per_sec: a.cycles_per_sec.max(1),
                            purchase_bps: sla.bandwidth_bps,
                            profile: a.profile,
                            // `slaswitch calibrate` measures the rows through vhost-user ports.
                            calibrated_kind: matches!(
                                p.spec.port_type,
                                PortType::VhostUser | PortType::VhostUserClient
                            ),
                            deployment_factor: a.deployment_factor(),
                        },
                    ),
                });
            }
        }
        rx_ports.sort_by_key(|p| p.number);
        flood.sort_unstable();
        Arc::new(PmdConfig {
            rx_ports,
            tx_ports,
            flood,
            classifier: self.classifier.clone(),
            rule_counters: self.rule_counters.clone(),
            shared_tx: self.settings.pmd_cores.len() > 1,
            pool: self.pool.clone(),
            mac_max_age_tsc: self.settings.mac_max_age_secs.saturating_mul(self.eal.tsc_hz()),
            c2tb_bucket_us: self.settings.c2tb_bucket_us,
            lower_class_burst: self.settings.lower_class_burst,
            idle_poll_us: self.settings.idle_poll_us,
            max_sleep_us: self.settings.max_sleep_us,
            tsc_hz: self.eal.tsc_hz(),
            clock: crate::residence::TicksToNs::new(self.eal.tsc_hz()),
            paced,
            kernel_senders,
            fallback: self.fallback.clone(),
            model: self.model.clone().map(Arc::new),
        })
    }

    /// Sends every PMD its new configuration and waits until each has switched.
    fn push_configs(&self) -> Result<(), DatapathError> {
        let all: Vec<usize> = (0..self.pmds.len()).collect();
        self.push_configs_to(&all, &[])
    }

    /// Sends the PMDs at `indices` their configurations and waits until each has swapped it in.
    fn push_configs_to(&self, indices: &[usize], parked: &[u16]) -> Result<(), DatapathError> {
        let mut acks = Vec::new();
        for &i in indices {
            let pmd = &self.pmds[i];
            let (ack_tx, ack_rx) = channel();
            pmd.sender
                .send(PmdMessage::Config(self.pmd_config(i, parked), ack_tx))
                .map_err(|_| DatapathError::PmdStopped(pmd.core))?;
            acks.push((pmd.core, ack_rx));
        }
        for (core, ack) in acks {
            ack.recv_timeout(Duration::from_secs(10)).map_err(|_| DatapathError::PmdNoAnswer(core))?;
        }
        Ok(())
    }

    fn port_number(&self, name_or_number: &str) -> Option<u16> {
        self.ports.get(name_or_number).map(|p| p.spec.number).or_else(|| {
            let n: u16 = name_or_number.parse().ok()?;
            self.ports.values().any(|p| p.spec.number == n).then_some(n)
        })
    }

    /// Name of a port number (or the number itself if no port has it).
    pub fn port_name(&self, number: u16) -> String {
        self.ports.values().find(|p| p.spec.number == number).map_or(number.to_string(), |p| p.spec.name.clone())
    }

    /// The bandwidth-CPU model in use.
    pub fn model(&self) -> Option<&BandwidthModel> {
        self.model.as_ref()
    }

    /// Stops the PMDs and closes every port.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        for p in &self.pmds {
            let _ = p.sender.send(PmdMessage::Quit);
        }
        for p in &mut self.pmds {
            if let Some(j) = p.join.take() {
                let _ = j.join();
            }
        }
        for (_, entry) in std::mem::take(&mut self.ports) {
            drop(entry.kernel_tx);
            Self::destroy_device(entry.eth, &entry.recipe);
            if entry.spec.port_type == PortType::VhostUser {
                if let Some(path) = entry.spec.socket_path(&self.settings.run_dir) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        self.stop();
    }
}
