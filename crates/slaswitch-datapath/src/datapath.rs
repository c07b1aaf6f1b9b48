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

use serde::{Deserialize, Serialize};
use slaswitch_classifier::{Classifier, Rule};
use slaswitch_dpdk::{
    hugepage_status, probe_device, remove_device, remove_vdev, Eal, EthPort, EthStats, Mempool, PortSetup,
};

use slaswitch_qos::cpu::{Allocation, BandwidthModel};

use crate::counters::{PmdCounters, PmdTotals, PortCounters, RuleCounters, RxTotals};
use crate::error::DatapathError;
use crate::paced_tx::{Fallback, PacedLink};
use crate::pmd;
use crate::pmd_config::{ModelCycles, PmdConfig, PmdMessage, RxPort, TxPort};
use crate::probe::{ProbeCounters, ProbeReport, ProbeSettings};
use slaswitch_config::allocation::{self, Candidate, PortPlan};
use slaswitch_config::link_policy::DEFAULT_TENANT;
use slaswitch_config::policing::PolicingSpec;
use slaswitch_config::port::{DeviceRecipe, PortSpec, PortType};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::ranges::MAX_PORTS;

mod links;
mod pmd_moves;
pub use crate::paced_tx::LinkOut;
pub use links::{DropPolicy, LinkStats, LinkVmStats, Tenant, TENANT_WEIGHTS};

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
    recipe: DeviceRecipe,
    counters: Arc<PortCounters>,
    tx_lock: Arc<AtomicBool>,
    /// Index into `Datapath::pmds` of the thread that polls it.
    pmd: usize,
    /// What its PMD enforces (from its options and the bandwidth model).
    plan: PortPlan,
    /// Its link and queue when it has a line rate.
    paced: Option<Arc<PacedLink>>,
}

/// A port's spec with new options, their settings parsed, and the PMD it would be on.
pub(crate) struct UpdatedPort {
    spec: PortSpec,
    settings: PortSettings,
    pmd: usize,
}

struct PmdHandle {
    core: usize,
    sender: Sender<PmdMessage>,
    counters: Arc<PmdCounters>,
    probe: Option<Arc<ProbeCounters>>,
    join: Option<JoinHandle<()>>,
}

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
    pub cpu_qos: crate::counters::CpuQosState,
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
    pub residence: crate::histogram::Histogram,
    /// Its purchase's latency SLO, microseconds (`latency_p99_us`).
    pub latency_p99_us: Option<u32>,
    /// The part of it its frames waited in paced links' queues, nanoseconds.
    #[serde(skip)]
    pub link_wait: crate::histogram::Histogram,
    /// `residence` of the frames no stall of the PMD measured touched, nanoseconds
    /// (`crate::residence`).
    #[serde(skip)]
    pub residence_unstalled: crate::histogram::Histogram,
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

/// A flow and what it matched.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlowStats {
    /// The flow as `add-flow` text.
    pub flow: String,
    /// Its priority.
    pub priority: u32,
    /// Packets it matched.
    pub packets: u64,
    /// Bytes it matched.
    pub bytes: u64,
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

    /// Every rule, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The configuration of PMD `pmd_index`: the rx ports placed on it, less those `parked`
    /// (between the two steps of a move, polled by no PMD).
    fn pmd_config(&self, pmd_index: usize, parked: &[u16]) -> Arc<PmdConfig> {
        let mut tx_ports: Vec<Option<TxPort>> = vec![None; MAX_PORTS];
        let mut flood = Vec::new();
        let mut rx_ports = Vec::new();
        let mut paced = Vec::new();
        for p in self.ports.values() {
            tx_ports[p.spec.number as usize] = Some(TxPort {
                number: p.spec.number,
                eth: p.eth,
                counters: p.counters.clone(),
                lock: p.tx_lock.clone(),
                paced: p.paced.clone(),
                vhost_tso: p.spec.port_type.is_vhost().then(|| p.spec.tso().unwrap_or(true)),
                max_frame_bytes: p.settings.max_frame_bytes(),
            });
            flood.push(p.spec.number);
            if p.paced.is_some() {
                paced.push(p.spec.number);
            }
            if p.pmd == pmd_index && !parked.contains(&p.spec.number) {
                rx_ports.push(RxPort {
                    number: p.spec.number,
                    eth: p.eth,
                    queues: p.spec.queues().unwrap_or(1),
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

    /// Adds a port; on any failure nothing changes. `spec.number` 0 means "pick one".
    pub fn add_port(&mut self, mut spec: PortSpec) -> Result<PortSpec, DatapathError> {
        let settings = spec.validate()?;
        if self.ports.contains_key(&spec.name) {
            return Err(DatapathError::PortExists(spec.name));
        }
        let used: Vec<u16> = self.ports.values().map(|p| p.spec.number).collect();
        if let Some(n) = settings.ofport_request {
            if used.contains(&n) {
                return Err(DatapathError::NumberTaken { number: n, by: self.port_name(n) });
            }
            spec.number = n;
        } else if spec.number == 0 || used.contains(&spec.number) {
            spec.number = (1..MAX_PORTS as u16).find(|n| !used.contains(n)).ok_or(DatapathError::NoPortNumber)?;
        }
        let pmd = self.place_new_port(&spec, &settings)?;
        let plans = self.plan_with(&[(&spec, &settings, pmd)], None, self.model.as_ref())?;
        if let Some(path) = spec.socket_path(&self.settings.run_dir) {
            if spec.port_type == PortType::VhostUser && std::path::Path::new(&path).exists() {
                // A stale socket from a previous run would make the vhost driver fail.
                let _ = std::fs::remove_file(&path);
            }
        }
        let recipe = spec.recipe(&self.settings.run_dir);
        let eth = if recipe.is_vdev {
            EthPort::create_vdev(&self.eal, &recipe.device, &recipe.args)
        } else {
            probe_device(&self.eal, &recipe.device)
        }
        .map_err(|cause| DatapathError::CreateDevice {
            port_type: spec.port_type.name(),
            port: spec.name.clone(),
            cause,
        })?;
        if let Some(max) = eth.max_mtu().ok().filter(|&max| settings.mtu_bytes > max) {
            Self::destroy_device(eth, &recipe);
            let (port_type, port) = (spec.port_type.name(), spec.name);
            return Err(DatapathError::Mtu { port_type, port, requested: settings.mtu_bytes, max });
        }
        // A vhost port's guests' partial checksums stay partial until a port needs them whole.
        let partial_checksums = spec.port_type.is_vhost();
        let setup = PortSetup {
            rx_ring: settings.rx_ring_descriptors,
            tx_ring: settings.tx_ring_descriptors,
            queues: spec.queues().unwrap_or(1),
            partial_checksums,
            mtu_bytes: settings.mtu_bytes,
        };
        if let Err(e) = eth.setup_with(&self.pool, &setup) {
            Self::destroy_device(eth, &recipe);
            return Err(DatapathError::StartDevice { port_type: spec.port_type.name(), port: spec.name, cause: e });
        }
        let entry = PortEntry {
            spec: spec.clone(),
            settings,
            eth,
            recipe,
            counters: Arc::new(PortCounters::default()),
            tx_lock: Arc::new(AtomicBool::new(false)),
            pmd,
            plan: plans[&spec.name].clone(),
            paced: None,
        };
        self.ports.insert(spec.name.clone(), entry);
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs() {
            self.restore_plans(before);
            let entry = self.ports.remove(&spec.name).expect("just inserted");
            let _ = self.push_configs();
            Self::destroy_device(entry.eth, &entry.recipe);
            return Err(e);
        }
        Ok(spec)
    }

    /// Plans every port as it would be with the `changed` specs added or replaced (each on its
    /// PMD) and `removed` gone, applying the admission rules ([`slaswitch_config::allocation`]). Changes
    /// nothing.
    fn plan_with(
        &self,
        changed: &[(&PortSpec, &PortSettings, usize)],
        removed: Option<&str>,
        model: Option<&BandwidthModel>,
    ) -> Result<BTreeMap<String, PortPlan>, DatapathError> {
        let mut candidates =
            self.candidates_except(|name| Some(name) == removed || changed.iter().any(|(s, ..)| s.name == name));
        candidates.extend(changed.iter().map(|&(spec, settings, pmd)| Candidate {
            spec,
            settings,
            pmd_core: self.pmds[pmd].core,
        }));
        let who = match changed {
            [] => removed.map_or("the bandwidth model".to_string(), |r| format!("removing {r}")),
            [(s, ..)] => format!("port {}", s.name),
            several => {
                format!("ports {}", several.iter().map(|(s, ..)| s.name.as_str()).collect::<Vec<_>>().join(", "))
            }
        };
        let plans = allocation::plan(&candidates, model, self.pmds.len(), self.eal.tsc_hz(), &who)?;
        for c in &candidates {
            let tenant = &plans[&c.spec.name].vm_link.tenant;
            if !self.tenants.contains_key(tenant) {
                return Err(DatapathError::NoTenantForPort { port: c.spec.name.clone(), tenant: tenant.clone() });
            }
        }
        let numbers: BTreeMap<&str, u16> = candidates.iter().map(|c| (c.spec.name.as_str(), c.spec.number)).collect();
        for name in plans.iter().filter(|(_, p)| p.link.link_rate_bps > 0).map(|(n, _)| n) {
            self.link_plan(name, &plans, &numbers, &self.tenants)
                .validate()
                .map_err(|cause| DatapathError::LinkRefuses { change: who.clone(), link: name.clone(), cause })?;
        }
        Ok(plans)
    }

    /// Every port as the planner sees it (on its PMD's core), but those `skip` names.
    fn candidates_except(&self, skip: impl Fn(&str) -> bool) -> Vec<Candidate<'_>> {
        self.ports
            .values()
            .filter(|p| !skip(&p.spec.name))
            .map(|p| Candidate { spec: &p.spec, settings: &p.settings, pmd_core: self.pmds[p.pmd].core })
            .collect()
    }

    /// Gives each port its new plan and makes the paced links match ([`Self::configure_links`]).
    /// Returns the previous plans, for [`Self::restore_plans`].
    fn apply_plans(&mut self, plans: BTreeMap<String, PortPlan>) -> Vec<(String, PortPlan)> {
        let mut before = Vec::new();
        for (name, plan) in plans {
            let Some(entry) = self.ports.get_mut(&name) else { continue };
            if plan.link.link_rate_bps == 0 {
                entry.paced = None;
            }
            before.push((name, std::mem::replace(&mut entry.plan, plan)));
        }
        if let Err(e) = self.configure_links() {
            // Cannot happen: `plan_with` validated every link's plan.
            tracing::error!("a link scheduler refused a validated plan: {e}");
        }
        if !self.ports.values().any(|p| p.plan.link.nic_fallback) {
            self.fallback.engaged.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        before
    }

    fn restore_plans(&mut self, before: Vec<(String, PortPlan)>) {
        for (name, plan) in before {
            if let Some(entry) = self.ports.get_mut(&name) {
                if plan.link.link_rate_bps == 0 {
                    entry.paced = None;
                }
                entry.plan = plan;
            }
        }
        if let Err(e) = self.configure_links() {
            tracing::error!("restoring a link scheduler failed: {e}");
        }
    }

    /// Replaces the bandwidth-CPU model; refused (nothing changes) when some port's purchase
    /// would no longer fit under the new model.
    pub fn set_model(&mut self, model: Option<BandwidthModel>) -> Result<(), DatapathError> {
        let plans = self.plan_with(&[], None, model.as_ref())?;
        let old_model = std::mem::replace(&mut self.model, model);
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs() {
            self.model = old_model;
            self.restore_plans(before);
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(())
    }

    /// The bandwidth-CPU model in use.
    pub fn model(&self) -> Option<&BandwidthModel> {
        self.model.as_ref()
    }

    /// The NIC-bottleneck fallback's state.
    pub fn fallback_status(&self) -> FallbackStatus {
        use std::sync::atomic::Ordering::Relaxed;
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

    fn pick_pmd(&self, pmd_core: Option<usize>) -> Result<usize, DatapathError> {
        if let Some(core) = pmd_core {
            return self
                .pmds
                .iter()
                .position(|p| p.core == core)
                .ok_or_else(|| DatapathError::NoPmdOnCore { core, cores: self.settings.pmd_cores.clone() });
        }
        // Round robin: the PMD with the fewest ports.
        Ok((0..self.pmds.len()).min_by_key(|&i| self.ports.values().filter(|p| p.pmd == i).count()).unwrap_or(0))
    }

    fn destroy_device(eth: EthPort, recipe: &DeviceRecipe) {
        let _ = eth.stop_close();
        if recipe.is_vdev {
            let _ = remove_vdev(&recipe.device);
        } else {
            let _ = remove_device(eth);
        }
    }

    /// Removes a port: PMDs stop using it first, then its device is closed.
    pub fn del_port(&mut self, name: &str) -> Result<(), DatapathError> {
        if !self.ports.contains_key(name) {
            return Err(DatapathError::NoPort(name.to_string()));
        }
        // Fewer VMs on a PMD only lowers the others' coefficients, so this plan always fits.
        let plans = self.plan_with(&[], Some(name), self.model.as_ref());
        let entry = self.ports.remove(name).expect("checked");
        if let Ok(plans) = plans {
            self.apply_plans(plans);
        }
        let result = self.push_configs();
        Self::destroy_device(entry.eth, &entry.recipe);
        if entry.spec.port_type == PortType::VhostUser {
            if let Some(path) = entry.spec.socket_path(&self.settings.run_dir) {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }

    /// Changes a port's options. `pmd` moves its rx queue live; any other change recreates the
    /// port's device under the same number (only that port pauses).
    pub fn set_port(&mut self, name: &str, options: &BTreeMap<String, String>) -> Result<PortSpec, DatapathError> {
        let updated = self.updated_spec(name, options)?;
        if options.keys().all(|k| slaswitch_config::port::is_live_option(k)) {
            return Ok(self.apply_live(vec![updated])?.remove(0));
        }
        let spec = updated.spec;
        let old = self.ports.get(name).expect("checked").spec.clone();
        self.del_port(name)?;
        match self.add_port(spec.clone()) {
            Ok(s) => Ok(s),
            Err(e) => {
                // Put the old port back so a bad setting changes nothing.
                if let Err(restore) = self.add_port(old) {
                    return Err(DatapathError::RestoreFailed { error: Box::new(e), restore: Box::new(restore) });
                }
                Err(e)
            }
        }
    }

    /// Changes several ports' options as one step: the admission rules judge only the final
    /// state, and the PMDs switch once. An operator moves cycles or bandwidth from one port to
    /// another this way without passing through a state that would be refused (or, taking
    /// first, one that would overbook the core). Only live options (C2QoS, meters, purchase,
    /// link, `pmd`) can be set together, since recreating devices cannot be undone as a whole;
    /// one port's request is [`Self::set_port`]. Refused whole, changing nothing.
    pub fn set_ports(
        &mut self,
        changes: &[(String, BTreeMap<String, String>)],
    ) -> Result<Vec<PortSpec>, DatapathError> {
        match changes {
            [] => return Err(DatapathError::NothingToSet),
            [(name, options)] => return self.set_port(name, options).map(|s| vec![s]),
            _ => {}
        }
        let mut updated = Vec::with_capacity(changes.len());
        for (i, (name, options)) in changes.iter().enumerate() {
            if changes[..i].iter().any(|(n, _)| n == name) {
                return Err(DatapathError::NamedTwice(name.clone()));
            }
            if let Some(key) = options.keys().find(|k| !slaswitch_config::port::is_live_option(k)) {
                return Err(DatapathError::NotLive { port: name.clone(), key: key.clone() });
            }
            // Among several ports, an error must say whose option it is.
            updated.push(self.updated_spec(name, options).map_err(|e| {
                if e.to_string().contains(name.as_str()) {
                    e
                } else {
                    DatapathError::OfPort { port: name.clone(), cause: Box::new(e) }
                }
            })?);
        }
        self.apply_live(updated)
    }

    /// A port's spec with `options` set, validated, and the PMD it would be on.
    fn updated_spec(&self, name: &str, options: &BTreeMap<String, String>) -> Result<UpdatedPort, DatapathError> {
        let entry = self.ports.get(name).ok_or_else(|| DatapathError::NoPort(name.to_string()))?;
        if options.is_empty() {
            return Err(DatapathError::NoOptions(name.to_string()));
        }
        let mut spec = entry.spec.clone();
        for (k, v) in options {
            spec.options.insert(k.clone(), v.clone());
        }
        let settings = spec.validate()?;
        if options.contains_key("ofport_request") && settings.ofport_request != Some(spec.number) {
            return Err(DatapathError::NumberChange { port: name.to_string(), number: spec.number });
        }
        // A port stays on its PMD unless `pmd` names another.
        let pmd = if settings.pmd_core.is_some() { self.pick_pmd(settings.pmd_core)? } else { entry.pmd };
        Ok(UpdatedPort { spec, settings, pmd })
    }

    /// Gives ports new specs whose changes are all live: one plan, one switch of the PMDs.
    fn apply_live(&mut self, mut updated: Vec<UpdatedPort>) -> Result<Vec<PortSpec>, DatapathError> {
        let plans = self.plan_updated(&mut updated)?;
        let mut old = Vec::with_capacity(updated.len());
        for u in &updated {
            let entry = self.ports.get_mut(&u.spec.name).expect("checked by updated_spec");
            old.push((
                std::mem::replace(&mut entry.pmd, u.pmd),
                std::mem::replace(&mut entry.spec, u.spec.clone()),
                std::mem::replace(&mut entry.settings, u.settings.clone()),
            ));
        }
        let moved: Vec<(u16, usize)> = old
            .iter()
            .zip(&updated)
            .filter(|((pmd, ..), u)| *pmd != u.pmd)
            .map(|((pmd, ..), u)| (u.spec.number, *pmd))
            .collect();
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs_moving(&moved) {
            for (u, (pmd, spec, settings)) in updated.iter().zip(old) {
                let entry = self.ports.get_mut(&u.spec.name).expect("checked by updated_spec");
                (entry.pmd, entry.spec, entry.settings) = (pmd, spec, settings);
            }
            self.restore_plans(before);
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(updated.into_iter().map(|u| u.spec).collect())
    }

    fn resolve_port(&self) -> impl Fn(&str) -> Option<u16> + '_ {
        move |s| self.port_number(s)
    }

    /// Installs a new rule set, keeping the counters of rules that stay.
    fn install_rules(&mut self, rules: Vec<Rule>) -> Result<(), DatapathError> {
        let classifier = Arc::new(Classifier::new(rules));
        let counters = RuleCounters::new(classifier.rules().len());
        for (i, r) in classifier.rules().iter().enumerate() {
            if let Some(j) =
                self.classifier.rules().iter().position(|o| o.priority == r.priority && o.matcher == r.matcher)
            {
                counters.packets[i].store(
                    self.rule_counters.packets[j].load(std::sync::atomic::Ordering::Relaxed),
                    std::sync::atomic::Ordering::Relaxed,
                );
                counters.bytes[i].store(
                    self.rule_counters.bytes[j].load(std::sync::atomic::Ordering::Relaxed),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        let (old_classifier, old_counters, old_rules) =
            (self.classifier.clone(), self.rule_counters.clone(), self.rules.clone());
        self.rules = classifier.rules().to_vec();
        self.classifier = classifier;
        self.rule_counters = Arc::new(counters);
        if let Err(e) = self.push_configs() {
            self.classifier = old_classifier;
            self.rule_counters = old_counters;
            self.rules = old_rules;
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(())
    }

    /// Adds flows given as `add-flow` text, all or none; returns how many.
    pub fn add_flows(&mut self, texts: &[String]) -> Result<usize, DatapathError> {
        let mut new_rules = Vec::new();
        {
            let resolve = self.resolve_port();
            for t in texts {
                new_rules
                    .push(Rule::parse(t, &resolve).map_err(|cause| DatapathError::Flow { flow: t.clone(), cause })?);
            }
        }
        let mut rules = self.rules.clone();
        rules.extend(new_rules);
        let n = texts.len();
        self.install_rules(rules)?;
        Ok(n)
    }

    /// Deletes every rule, or those whose match equals `matcher` (and priority, when `strict`).
    pub fn del_flows(&mut self, matcher: Option<&str>, strict: bool) -> Result<usize, DatapathError> {
        let parsed = match matcher {
            None => None,
            Some(m) => {
                let resolve = self.resolve_port();
                let text = if m.contains("actions=") { m.to_string() } else { format!("{m},actions=drop") };
                Some(
                    Rule::parse(&text, &resolve)
                        .map_err(|cause| DatapathError::Match { matcher: m.to_string(), cause })?,
                )
            }
        };
        let (kept, removed) = self
            .classifier
            .without(parsed.as_ref().map(|r| &r.matcher), parsed.as_ref().filter(|_| strict).map(|r| r.priority));
        if removed > 0 {
            self.install_rules(kept)?;
        }
        Ok(removed)
    }

    /// Every flow with its counters.
    pub fn dump_flows(&self) -> Vec<FlowStats> {
        let names = |n: u16| self.port_name(n);
        self.classifier
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| FlowStats {
                flow: r.to_text(&names),
                priority: r.priority,
                packets: self.rule_counters.packets[i].load(std::sync::atomic::Ordering::Relaxed),
                bytes: self.rule_counters.bytes[i].load(std::sync::atomic::Ordering::Relaxed),
            })
            .collect()
    }

    /// Flows as text with port names, in a form `add_flows` reads back (for persistence).
    pub fn flow_texts(&self) -> Vec<String> {
        self.dump_flows().into_iter().map(|f| f.flow).collect()
    }

    /// Every port's counters and settings.
    pub fn port_stats(&self) -> Vec<PortStats> {
        let mut out: Vec<PortStats> = self
            .ports
            .values()
            .map(|p| {
                let dev: EthStats = p.eth.stats().unwrap_or_default();
                let through_links = self.link_residence(p.spec.number);
                PortStats {
                    name: p.spec.name.clone(),
                    number: p.spec.number,
                    port_type: p.spec.port_type.name().into(),
                    pmd_core: self.pmds[p.pmd].core,
                    link_up: p.eth.link_up(),
                    socket: p.spec.socket_path(&self.settings.run_dir),
                    rx: p.counters.rx(),
                    tx_packets: p.counters.tx_packets.load(std::sync::atomic::Ordering::Relaxed),
                    tx_bytes: p.counters.tx_bytes.load(std::sync::atomic::Ordering::Relaxed),
                    tx_dropped: p.counters.tx_dropped.load(std::sync::atomic::Ordering::Relaxed),
                    tx_mtu_dropped: p.counters.tx_mtu_dropped.load(std::sync::atomic::Ordering::Relaxed),
                    mtu_bytes: p.settings.mtu_bytes,
                    device_rx_missed: dev.imissed,
                    device_rx_nombuf: dev.rx_nombuf,
                    device_rx_errors: dev.ierrors,
                    cpu_qos: p.counters.cpu_qos(),
                    cycles_per_sec: p.plan.cpu_qos.limit.alloc_cycles_per_sec(),
                    cpu_mode: match p.plan.cpu_qos.limit {
                        slaswitch_qos::cpu::CycleLimit::Unlimited => CpuMode::Unlimited,
                        slaswitch_qos::cpu::CycleLimit::Strict { .. } => CpuMode::Strict,
                        slaswitch_qos::cpu::CycleLimit::MinMax { .. } => CpuMode::MinMax,
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
                        r
                    },
                    residence_unstalled: {
                        let mut r = p.counters.residence_unstalled();
                        r.merge(&through_links.unstalled);
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
