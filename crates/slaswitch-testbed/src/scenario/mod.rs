//! Scenario files: one TOML file per experiment, under `experiments/` in the repository. A
//! scenario names the host layout (PMD cores, the core the VMs run on), the VMs (emulated
//! vhost-user VMs with phase scripts, or network namespaces running real programs), the uplink,
//! per-VM QoS settings, how long to run and what to sample. Bad files are refused with the line
//! and the field at fault.
//!
//! ```toml
//! title = "Seed 000 Fig. 1(a-b): byte-rate policing"
//! duration_secs = 30
//! switches = ["slaswitch", "ovs-dpdk"]
//! [uplink]
//! kind = "sink"
//! [[vm]]
//! name = "vm1"
//! phases = ["start=0,dur=10,size=512,rate=400mbps", "start=10,dur=20,size=64,rate=400mbps"]
//! qos = { ingress_policing_rate_kbps = 400000 }
//! ```

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use slaswitch_config::ConfigError;
use slaswitch_traffic::phase::Phase;

mod error_location;
mod validate;

pub use error_location::ScenarioError;
use error_location::{field_at, line_of, Checker};
use validate::validate;

/// The switches a scenario runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchKind {
    /// slaswitch with DPDK.
    Slaswitch,
    /// Open vSwitch with DPDK (Debian's 3.1).
    OvsDpdk,
    /// A Linux bridge with tc.
    LinuxTc,
    /// VDE2's vde_switch.
    Vde2,
}

impl SwitchKind {
    /// Every switch.
    pub const ALL: [SwitchKind; 4] =
        [SwitchKind::Slaswitch, SwitchKind::OvsDpdk, SwitchKind::LinuxTc, SwitchKind::Vde2];

    /// Its name on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            SwitchKind::Slaswitch => "slaswitch",
            SwitchKind::OvsDpdk => "ovs-dpdk",
            SwitchKind::LinuxTc => "linux-tc",
            SwitchKind::Vde2 => "vde2",
        }
    }

    /// Parses a switch's name.
    pub fn parse(s: &str) -> Result<SwitchKind, ConfigError> {
        SwitchKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ConfigError::value("--switch", s, "slaswitch, ovs-dpdk, linux-tc or vde2"))
    }
}

impl fmt::Display for SwitchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scenario file: what runs, on which switches, and what the report shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Defaults to the file's name without `.toml`.
    #[serde(default)]
    pub name: String,
    /// The report's title.
    pub title: String,
    /// The seed experiment this reproduces, e.g. "seed 000 Fig. 1(a-b)".
    #[serde(default)]
    pub reproduces: String,
    /// What it shows, for the report.
    #[serde(default)]
    pub description: String,
    /// How the seed's numbers were scaled to this machine; the report repeats it.
    #[serde(default)]
    pub scaling: String,
    /// How long each run lasts.
    pub duration_secs: f64,
    /// Seconds between two samples.
    #[serde(default = "one_sec")]
    pub sample_interval_secs: f64,
    /// The switches to run on when the command line names none.
    #[serde(default = "default_switches")]
    pub switches: Vec<SwitchKind>,
    /// Cores and rings.
    #[serde(default)]
    pub host: Host,
    /// The rule set.
    #[serde(default)]
    pub classification: Classification,
    /// Where the VMs' traffic goes.
    #[serde(default)]
    pub uplink: Uplink,
    /// The VM groups.
    #[serde(rename = "vm", default)]
    pub vms: Vec<VmSpec>,
    /// Tenants and their weights (PIE-VDE's first level, seed 004); VMs name their tenant.
    #[serde(rename = "tenant", default)]
    pub tenants: Vec<TenantSpec>,
    /// Runs the scenario once per size of one VM group.
    pub sweep: Option<Sweep>,
    /// Headline figures the report computes (see [`Headline`]).
    #[serde(rename = "headline", default)]
    pub headlines: Vec<Headline>,
    /// Configurations to compare (see [`Variant`]); none: one run per switch as the file says.
    #[serde(rename = "variant", default)]
    pub variants: Vec<Variant>,
    /// Settings changed during the run, in time order.
    #[serde(rename = "change", default)]
    pub changes: Vec<Change>,
    /// Seconds into the run at which the switch's data-plane process is killed with SIGKILL and
    /// started again at once (as a supervisor would): what a crash costs the VMs.
    pub crash_switch_at_secs: Option<f64>,
    /// Rates as shares of the PMD core's measured capacity, named for `{NAME.UNIT}` placeholders
    /// (see [`crate::capacity`]).
    #[serde(default)]
    pub capacity: std::collections::BTreeMap<String, crate::capacity::Budget>,
    /// SoftBW's system around slaswitch (see [`ClusterSpec`]).
    pub cluster: Option<ClusterSpec>,
}

/// `[cluster]`: a private etcd and master beside slaswitch, whose agent joins them; every VM's
/// `link_guarantee` is sold to `tenant` by the master instead of set on its port, and the
/// report shows the tenant's bill per phase (seed 003 Sec. 3.3-4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// The tenant that buys the guarantees.
    pub tenant: String,
}

/// One configuration of one switch: the scenario with some VM groups' QoS replaced. A file with
/// variants runs each of them in turn, labelled `switch/name` (e.g. `slaswitch/c2tb`), so a
/// strategy and its baselines are measured side by side in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Its name, the second half of its label.
    pub name: String,
    /// The switch it runs on.
    pub switch: SwitchKind,
    /// What it is, for the report.
    #[serde(default)]
    pub description: String,
    /// VM group name -> its QoS in this variant (replacing the `[[vm]]`'s `qos` whole).
    #[serde(default)]
    pub qos: std::collections::BTreeMap<String, Qos>,
    /// Turns the uplink's NIC-bottleneck fallback on or off (slaswitch).
    pub nic_fallback: Option<bool>,
    /// The uplink's link scheduler (slaswitch): fifo, ancs, softbw, pievde or ratelimit.
    pub egress_scheduler: Option<String>,
    /// The uplink's latency class on or off (slaswitch's `link_latency`).
    pub link_latency: Option<bool>,
    /// TSO offered to guests in this variant (see [`Host::guest_tso`]).
    pub guest_tso: Option<bool>,
    /// Moves between PMDs in this variant (see [`Host::pmd_rebalance`]).
    pub pmd_rebalance: Option<bool>,
    /// Kernel ports' sender threads in this variant (see [`Host::kernel_tx_threads`]).
    pub kernel_tx_threads: Option<bool>,
}

/// A setting changed while the run goes on (`[[change]]`): at `at_secs`, the VM (or every VM
/// of the group) takes the fields of `qos` given, live, on every switch that can.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// When, seconds from the start.
    pub at_secs: f64,
    /// A VM or a VM group.
    pub vm: String,
    /// The fields that change.
    pub qos: Qos,
}

fn one_sec() -> f64 {
    1.0
}

fn default_switches() -> Vec<SwitchKind> {
    vec![SwitchKind::Slaswitch]
}

/// Cores and rings of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Cores of the PMD threads.
    #[serde(default = "default_pmd_cores")]
    pub pmd_cores: Vec<usize>,
    /// The core every emulated VM (and the sink) runs on.
    #[serde(default = "default_vm_core")]
    pub vm_core: usize,
    /// Virtio ring of each emulated VM: large, so VMs sharing a core stay backlogged together.
    #[serde(default = "default_ring")]
    pub ring: u32,
    /// slaswitch's C2TB bucket depth in microseconds of the core (`slaswitchd
    /// --c2tb-bucket-us`); the daemon's default when absent.
    #[serde(default)]
    pub c2tb_bucket_us: Option<u64>,
    /// Whether the switch's vhost-user ports offer QEMU guests TCP segmentation offload (and
    /// segment in software where a port cannot take it): slaswitch's `tso` port option (on when
    /// absent), OVS-DPDK's `userspace-tso-enable` (off when absent).
    #[serde(default)]
    pub guest_tso: Option<bool>,
    /// Whether the switch moves rx queues between its PMDs while it runs: slaswitch's
    /// `--pmd-rebalance` (on when absent), OVS-DPDK's `pmd-auto-lb` with
    /// `pmd-rxq-assign=cycles` and its shortest interval, a minute (off when absent).
    #[serde(default)]
    pub pmd_rebalance: Option<bool>,
    /// Microseconds a PMD may sleep after a pass that found no queue filling, 0 to 10000:
    /// slaswitch's `--pmd-max-sleep-us`, OVS-DPDK's `pmd-maxsleep` (both: never, when absent).
    /// A PMD sharing its core with the VMs then leaves it to them while it has little to do.
    #[serde(default)]
    pub pmd_max_sleep_us: Option<u64>,
    /// Whether slaswitch's kernel ports send from threads of their own on the VM core
    /// (`slaswitchd --kernel-tx thread`) instead of from the PMD (off when absent).
    #[serde(default)]
    pub kernel_tx_threads: Option<bool>,
    /// The virtio ring layout of the emulated VMs (`slaswitch-tenant --virtio-ring`): `split`
    /// (QEMU's default), or `packed`, which one VM core sends fast enough to saturate a PMD.
    #[serde(default)]
    pub vm_virtio_ring: VirtioRing,
}

/// A virtio ring layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VirtioRing {
    /// QEMU's default: descriptor, available and used rings apart.
    #[default]
    Split,
    /// One ring of descriptors, completed in order, no mergeable buffers.
    Packed,
}

impl VirtioRing {
    /// Its name on slaswitch-tenant's command line.
    pub fn name(self) -> &'static str {
        match self {
            VirtioRing::Split => "split",
            VirtioRing::Packed => "packed",
        }
    }
}

fn default_pmd_cores() -> Vec<usize> {
    vec![0]
}
fn default_vm_core() -> usize {
    1
}
fn default_ring() -> u32 {
    4096
}

impl Default for Host {
    fn default() -> Self {
        Host {
            pmd_cores: default_pmd_cores(),
            vm_core: default_vm_core(),
            ring: default_ring(),
            c2tb_bucket_us: None,
            guest_tso: None,
            pmd_rebalance: None,
            pmd_max_sleep_us: None,
            kernel_tx_threads: None,
            vm_virtio_ring: VirtioRing::Split,
        }
    }
}

/// The rule set ahead of forwarding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Classification {
    /// A security-group-like rule set with this many distinct masks (0 to 99) ahead of the
    /// forwarding rules, so classification costs what it costs in a cloud (seed 000 Fig. 5c).
    #[serde(default)]
    pub security_group_masks: usize,
    /// VM groups whose frames are classified and then dropped by a rule instead of forwarded:
    /// they load the PMD as much (less one tx) without loading the sink VM on the VM core, so
    /// a latency probe's sink is not the bottleneck.
    #[serde(default)]
    pub drop_from: Vec<String>,
    /// Of each `drop_from` VM's flows, this many (a power of two up to 1024: flows 0 to N-1, UDP
    /// source ports 1024 to 1023+N) still reach the uplink by a rule of their own, so the sink
    /// measures every VM's latency from a sample while the rest is dropped; 0: none.
    #[serde(default)]
    pub sample_flows: u32,
    /// VM groups each of whose flows has an allow rule of its own (its port and exact UDP
    /// source port, as a controller installs per-connection rules): every flow is then a
    /// megaflow of its own, and a VM with more flows than the switch caches costs the PMD a
    /// full classification per frame. Rules for [`Classification::per_flow_rules`] flows each.
    #[serde(default)]
    pub per_flow_rules_for: Vec<String>,
    /// Flows per VM of `per_flow_rules_for` given a rule (flows 0 to N-1, UDP source ports
    /// 1024 to 1023+N; at most 60000, beyond which the generator varies the address).
    #[serde(default)]
    pub per_flow_rules: u32,
}

/// What the uplink is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UplinkKind {
    /// An emulated VM that receives everything and measures it (rate and one-way latency).
    Sink,
    /// A port that discards what it is given, as a NIC puts it on the wire: per-VM rates come
    /// from the switch's own counters, and the VM core only sends (for rates a sink on the
    /// same core could not take).
    Null,
    /// A network namespace standing for the remote server, running `commands`.
    Namespace,
    /// A QEMU guest standing for the remote server (on a vhost-user port), running `commands`.
    Qemu,
}

impl UplinkKind {
    /// True for the kinds that run programs (`commands`).
    pub fn runs_programs(self) -> bool {
        matches!(self, UplinkKind::Namespace | UplinkKind::Qemu)
    }
}

/// The switch port a QEMU guest attaches to, in OVS's terms: who serves the vhost-user socket
/// decides what a restart of the switch does to the guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortType {
    /// The switch serves the socket; QEMU connects and reconnects.
    #[default]
    VhostUser,
    /// QEMU serves the socket; the switch connects (and reconnects after a restart).
    VhostUserClient,
}

impl PortType {
    /// Its name in scenario files and on slaswitch's command line.
    pub fn name(self) -> &'static str {
        match self {
            PortType::VhostUser => "vhost-user",
            PortType::VhostUserClient => "vhost-user-client",
        }
    }
}

/// Where the VMs' traffic goes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Uplink {
    /// Its port's name.
    #[serde(default = "default_uplink_name")]
    pub name: String,
    /// What it is.
    #[serde(default = "default_uplink_kind")]
    pub kind: UplinkKind,
    /// The uplink's line rate (e.g. "10gbps"); the switch paces the port to it.
    pub line_rate: Option<String>,
    /// Programs the namespace runs (servers), started before the VMs.
    #[serde(default)]
    pub commands: Vec<String>,
    /// slaswitch: the NIC-bottleneck fallback on the paced uplink (default on; seed 000 Sec. VII).
    pub nic_fallback: Option<bool>,
    /// slaswitch: the uplink's link scheduler (fifo, ancs, softbw, pievde, ratelimit; default fifo).
    pub egress_scheduler: Option<String>,
    /// slaswitch: latency-class VMs go ahead of the scheduler on the uplink (default on).
    pub link_latency: Option<bool>,
    /// A QEMU uplink's port type.
    #[serde(default)]
    pub port: PortType,
}

fn default_uplink_name() -> String {
    "uplink".into()
}
fn default_uplink_kind() -> UplinkKind {
    UplinkKind::Sink
}

impl Default for Uplink {
    fn default() -> Self {
        Uplink {
            name: default_uplink_name(),
            kind: UplinkKind::Sink,
            line_rate: None,
            commands: Vec::new(),
            nic_fallback: None,
            egress_scheduler: None,
            link_latency: None,
            port: PortType::VhostUser,
        }
    }
}

/// What a VM is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmKind {
    /// slaswitch-tenant: a DPDK virtio-user device on a vhost-user port, sending its phases.
    Emulated,
    /// A network namespace on a tap port running real programs (iperf3, qperf, wrk, ...).
    Namespace,
    /// A QEMU guest (Linux's virtio-net, `scripts/guest-image`) on a vhost-user port running
    /// real programs (iperf3, ping, ethtool).
    Qemu,
}

impl VmKind {
    /// True for the kinds that run programs (`commands`).
    pub fn runs_programs(self) -> bool {
        matches!(self, VmKind::Namespace | VmKind::Qemu)
    }
}

/// A group of VMs with the same settings (`[[vm]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    /// The group's name (its VMs' names with `count`).
    pub name: String,
    /// What its VMs are.
    #[serde(default = "default_vm_kind")]
    pub kind: VmKind,
    /// More than 1: VMs NAME1..NAMEn with the same settings.
    #[serde(default = "one_vm")]
    pub count: usize,
    /// Phase scripts (see slaswitch-tenant): emulated VMs only.
    #[serde(default)]
    pub phases: Vec<String>,
    /// Programs to run in the namespace or the guest: namespace and QEMU VMs only.
    /// `{uplink_ip}` and `{duration}` are filled in.
    #[serde(default)]
    pub commands: Vec<String>,
    /// A QEMU VM's port type.
    #[serde(default)]
    pub port: PortType,
    /// Its QoS settings.
    #[serde(default)]
    pub qos: Qos,
    /// The tenant (a `[[tenant]]`) this VM belongs to.
    pub tenant: Option<String>,
}

fn default_vm_kind() -> VmKind {
    VmKind::Emulated
}
fn one_vm() -> usize {
    1
}

/// Per-VM QoS settings, in OVS's units where OVS has the setting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qos {
    /// Byte-rate ingress policing (srTCM), kbit/s of frames without the Ethernet header.
    pub ingress_policing_rate_kbps: Option<u64>,
    /// Its burst, kbit.
    pub ingress_policing_burst_kb: Option<u64>,
    /// Packet-rate ingress policing, thousands of packets per second.
    pub ingress_policing_kpps: Option<u64>,
    /// Its burst, thousands of packets.
    pub ingress_policing_kpkts_burst: Option<u64>,
    /// Egress shaping towards the VM's traffic on the uplink (min guarantee / max limit).
    pub min_rate_kbps: Option<u64>,
    /// See `min_rate_kbps`.
    pub max_rate_kbps: Option<u64>,
    /// Share weight and priority class (1 highest to 8).
    pub weight: Option<u32>,
    /// See `weight`.
    pub priority: Option<u8>,
    /// C2QoS: the port's PMD cycle allocation, and `strict` or `min-max` (seed 000 Sec. IV).
    pub cycles_per_sec: Option<u64>,
    /// See `cycles_per_sec`.
    pub mode: Option<String>,
    /// C2QoS the normal way: a purchased bandwidth (bits/s of frames) and the traffic profile
    /// the bandwidth-CPU model turns into cycles (seed 000 Sec. III).
    pub bandwidth_bps: Option<u64>,
    /// See `bandwidth_bps`.
    pub profile_packet_bytes: Option<u32>,
    /// `single` or `many`.
    pub profile_flows: Option<String>,
    /// Frames the VM's batches hold, 1 to 32 (the model's batch term).
    pub profile_batch_packets: Option<u32>,
    /// slaswitch: false pins a model allocation instead of following the host's speed.
    pub drift_compensation: Option<bool>,
    /// The VM's weight on the uplink's scheduler (ANCS; PIE-VDE within its tenant; Linux tc:
    /// its share of the line rate as htb rate).
    pub link_weight: Option<u32>,
    /// Its minimum on the uplink, wire bits/s (ANCS MinimumCredit; Linux tc: htb rate).
    pub link_min_bps: Option<u64>,
    /// Its maximum on the uplink, wire bits/s (ANCS MaximumCredit; Linux tc: htb ceil).
    pub link_max_bps: Option<u64>,
    /// SoftBW's guarantee: `strict:RATE`, `dynamic:SIZE,SECONDS` or `fairness`.
    pub link_guarantee: Option<String>,
    /// Frames its queue on the uplink holds (slaswitch).
    pub link_queue_frames: Option<u32>,
    /// slaswitch: a latency SLO in the purchase, residence p99 in each second, microseconds.
    pub latency_p99_us: Option<u32>,
}

impl Qos {
    /// `self` with every field `change` sets replaced.
    pub fn merged(&self, change: &Qos) -> Qos {
        macro_rules! pick {
            ($($f:ident),*) => { Qos { $($f: change.$f.clone().or_else(|| self.$f.clone()),)* } };
        }
        pick!(
            ingress_policing_rate_kbps,
            ingress_policing_burst_kb,
            ingress_policing_kpps,
            ingress_policing_kpkts_burst,
            min_rate_kbps,
            max_rate_kbps,
            weight,
            priority,
            cycles_per_sec,
            mode,
            bandwidth_bps,
            profile_packet_bytes,
            profile_flows,
            profile_batch_packets,
            drift_compensation,
            link_weight,
            link_min_bps,
            link_max_bps,
            link_guarantee,
            link_queue_frames,
            latency_p99_us
        )
    }

    /// (field, value) of every setting present, in a fixed order.
    pub fn settings(&self) -> Vec<(&'static str, u64)> {
        let fields: [(&str, Option<u64>); 16] = [
            ("ingress_policing_rate_kbps", self.ingress_policing_rate_kbps),
            ("ingress_policing_burst_kb", self.ingress_policing_burst_kb),
            ("ingress_policing_kpps", self.ingress_policing_kpps),
            ("ingress_policing_kpkts_burst", self.ingress_policing_kpkts_burst),
            ("min_rate_kbps", self.min_rate_kbps),
            ("max_rate_kbps", self.max_rate_kbps),
            ("weight", self.weight.map(u64::from)),
            ("priority", self.priority.map(u64::from)),
            ("cycles_per_sec", self.cycles_per_sec),
            ("bandwidth_bps", self.bandwidth_bps),
            ("profile_packet_bytes", self.profile_packet_bytes.map(u64::from)),
            ("profile_batch_packets", self.profile_batch_packets.map(u64::from)),
            ("link_weight", self.link_weight.map(u64::from)),
            ("link_min_bps", self.link_min_bps),
            ("link_max_bps", self.link_max_bps),
            ("latency_p99_us", self.latency_p99_us.map(u64::from)),
        ];
        fields.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
    }
}

/// A tenant (`[[tenant]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Its name.
    pub name: String,
    /// Its weight among tenants.
    #[serde(default = "one_weight")]
    pub weight: u32,
}

fn one_weight() -> u32 {
    1
}

/// Runs the scenario once per value, with the VM group `vm` resized to it, or (`flows =
/// true`) with `{count}` in its commands (and any other group's) replaced by it (e.g. `iperf3 -P {count}`: one VM with
/// that many flows, seed 003 Fig. 5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The VM group resized.
    pub vm: String,
    /// Its sizes, one run each.
    pub counts: Vec<usize>,
    /// The value is a count of flows in the group's commands, not of VMs.
    #[serde(default)]
    pub flows: bool,
    /// With `flows`, what the value is, for the steps' labels (default "flows"; e.g. "mbps"
    /// when `{count}` is a rate).
    pub label: Option<String>,
}

/// A figure the report puts first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headline {
    /// What the report calls it.
    pub label: String,
    /// Which figure.
    pub kind: HeadlineType,
    /// The VM it is about.
    pub vm: String,
    /// loss: "mbps" or "kpps" at the sink.
    pub metric: Option<String>,
    /// loss: the windows `[from, to]` (seconds) compared.
    pub before: Option<[f64; 2]>,
    /// See `before`.
    pub after: Option<[f64; 2]>,
    /// latency-growth and latency: "p50", "p90", "p99" or "max"; residence: "p50", "p90", "p99"
    /// or "p999" (the switch's own per-second figure).
    pub percentile: Option<String>,
    /// deviation and latency: the window `[from, to]` (seconds) measured.
    pub window: Option<[f64; 2]>,
    /// deviation: the farthest single second of the window, not the window's mean (a
    /// purchase is kept in every second, not only on average).
    #[serde(default)]
    pub per_second: bool,
    /// latency and residence: only the seconds in which no PMD thread lost its core to the host
    /// (the switch's `stalled_pct` is 0: no stage of the loop took over 100 us), in them or in
    /// the second before, whose stall a frame leaving in them may have waited through.
    #[serde(default)]
    pub stall_free: bool,
    /// residence: the switch's figure over the frames no stall of the PMD touched (no stage of
    /// its loop took over 100 us while they were in the switch), in every second: where the
    /// host takes the PMD's core in every second, `stall_free` keeps none.
    #[serde(default)]
    pub unstalled_frames: bool,
    /// target: the rate the VM (or `all` VMs together) should get over `window`, Mbit/s;
    /// recovery: the rate at which the VM is whole.
    pub expected_mbps: Option<f64>,
}

/// The figures a headline can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadlineType {
    /// How much of `vm`'s received rate it loses from window `before` to window `after`, in %.
    Loss,
    /// `vm`'s latency percentile at the last sweep step over the first.
    LatencyGrowth,
    /// How far `vm`'s received bandwidth over `window` lies from its purchased
    /// `qos.bandwidth_bps`, in % (seed 000 Fig. 11a-b).
    Deviation,
    /// `vm`'s latency percentile (us, the median of the per-second values) over `window`.
    Latency,
    /// The switch's own figure of `vm`'s residence time (us, the median of the per-second
    /// percentiles it reports) over `window`; slaswitch only.
    Residence,
    /// How far `vm`'s received rate over `window` lies from `expected_mbps`, in % (a share,
    /// minimum or maximum a link scheduler should give); `vm` may also be a group, `all`, or
    /// `tenant:NAME` (that tenant's VMs together). With a sweep, the step farthest off.
    Target,
    /// Seconds from the start of `window` until `vm` is whole again: the first of five seconds
    /// in a row in which it got at least 95% of `expected_mbps` (how long a victim stays short
    /// after its PMD's load rose).
    Recovery,
    /// A figure a namespace VM's program reported (`metric`, e.g. `fct_8KB_10ms_p50_us` or
    /// `ping_rtt_avg_us`; see the parsers in `namespaces`) for `vm`; with a sweep, the largest
    /// over the steps, each step's value in the explanation.
    App,
}

/// A concrete VM after `count` and `sweep` are expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct Vm {
    /// Its name.
    pub name: String,
    /// The group it comes from.
    pub group: String,
    /// What it is.
    pub kind: VmKind,
    /// What it sends.
    pub phases: Vec<Phase>,
    /// The phases as written, for the tenant's command line.
    pub phase_texts: Vec<String>,
    /// Programs a namespace or QEMU VM runs.
    pub commands: Vec<String>,
    /// A QEMU VM's port type.
    pub port: PortType,
    /// Its QoS settings.
    pub qos: Qos,
    /// Its tenant.
    pub tenant: Option<String>,
}

/// One run of a scenario on one switch: the sweep value (if any) and its VMs.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// `run`, or the sweep value's label.
    pub label: String,
    /// The sweep value.
    pub sweep_value: Option<usize>,
    /// Its VMs.
    pub vms: Vec<Vm>,
}

impl Change {
    /// True when the change is about `vm` (named, or one of its group).
    pub fn applies_to(&self, vm: &Vm) -> bool {
        self.vm == vm.name || self.vm == vm.group
    }
}

impl Step {
    /// The step as it stands once `changes` have been made.
    pub fn after_changes(&self, changes: &[Change]) -> Step {
        let mut step = self.clone();
        for c in changes {
            for vm in step.vms.iter_mut().filter(|v| c.applies_to(v)) {
                vm.qos = vm.qos.merged(&c.qos);
            }
        }
        step
    }
}

/// Parses and checks a scenario. `file` names it in errors and gives the default name.
pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError {
        file: file.to_string(),
        line: e.span().map(|r| line_of(text, r.start)),
        field: e.span().map_or(String::new(), |r| field_at(text, r.start)),
        message: e.message().trim().to_string(),
    })?;
    if s.name.is_empty() {
        s.name = Path::new(file).file_stem().map_or("scenario".into(), |n| n.to_string_lossy().into_owned());
    }
    validate(&s, &Checker { file, text })?;
    Ok(s)
}

/// Parses and checks a scenario whose `[capacity]` budgets are priced at `capacity_pps` (the
/// core's packets per second for each traffic kind); also returns the file with its
/// placeholders filled in, and the budgets' rates.
pub fn parse_with_capacity(
    file: &str,
    text: &str,
    capacity_pps: &std::collections::BTreeMap<crate::capacity::Kind, f64>,
) -> Result<(Scenario, String, Vec<crate::capacity::Resolved>), ScenarioError> {
    let whole = |e: crate::capacity::BudgetError| ScenarioError {
        file: file.to_string(),
        line: None,
        field: String::new(),
        message: e.to_string(),
    };
    let budgets = crate::capacity::budgets(text).map_err(whole)?;
    let resolved = crate::capacity::resolve(&budgets, capacity_pps).map_err(whole)?;
    let filled = crate::capacity::substitute(text, &resolved).map_err(whole)?;
    let s = parse(file, &filled)?;
    Ok((s, filled, resolved))
}

/// Reads and checks a scenario file.
pub fn load(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(parse(&path.display().to_string(), &text)?)
}

/// Bits per second from "10gbps", "800mbps", "100kbps" or a plain number: the switch's own
/// exact reading of rates, with the "bps" of the scenario files' spelling.
pub fn parse_rate_bps(s: &str) -> Result<u64, ConfigError> {
    let lower = s.trim().to_ascii_lowercase();
    let num = lower.strip_suffix("bps").unwrap_or(&lower);
    match slaswitch_config::bandwidth::parse_rate_bps("rate", num) {
        Ok(0) => Err(ConfigError::value("rate", s, "must be positive")),
        Ok(bps) => Ok(bps),
        Err(_) => Err(ConfigError::value("rate", s, "a whole number of bits per second, e.g. 10gbps or 800mbps")),
    }
}

/// One configuration to run: a label for the samples, the switch, and the scenario as that
/// configuration sees it.
pub struct RunConfig {
    /// Its label in the samples.
    pub label: String,
    /// The switch.
    pub switch: SwitchKind,
    /// The scenario as the configuration sees it.
    pub scenario: Scenario,
}

impl Scenario {
    /// The configurations to run: each variant (on the switches asked for), or each switch.
    pub fn run_configs(&self, switches: &[SwitchKind]) -> Vec<RunConfig> {
        if self.variants.is_empty() {
            return switches
                .iter()
                .map(|&sw| RunConfig { label: sw.name().to_string(), switch: sw, scenario: self.clone() })
                .collect();
        }
        self.variants
            .iter()
            .filter(|v| switches.contains(&v.switch))
            .map(|v| {
                let mut s = self.clone();
                for vm in s.vms.iter_mut() {
                    if let Some(q) = v.qos.get(&vm.name) {
                        vm.qos = q.clone();
                    }
                }
                if v.nic_fallback.is_some() {
                    s.uplink.nic_fallback = v.nic_fallback;
                }
                if v.egress_scheduler.is_some() {
                    s.uplink.egress_scheduler = v.egress_scheduler.clone();
                }
                if v.link_latency.is_some() {
                    s.uplink.link_latency = v.link_latency;
                }
                if v.guest_tso.is_some() {
                    s.host.guest_tso = v.guest_tso;
                }
                if v.pmd_rebalance.is_some() {
                    s.host.pmd_rebalance = v.pmd_rebalance;
                }
                if v.kernel_tx_threads.is_some() {
                    s.host.kernel_tx_threads = v.kernel_tx_threads;
                }
                RunConfig { label: format!("{}/{}", v.switch.name(), v.name), switch: v.switch, scenario: s }
            })
            .collect()
    }

    /// True when a VM or the uplink is a QEMU guest.
    pub fn has_qemu_guests(&self) -> bool {
        self.uplink.kind == UplinkKind::Qemu || self.vms.iter().any(|vm| vm.kind == VmKind::Qemu)
    }

    /// Where a VM's received traffic is measured: (source, metric prefix) of the samples.
    pub fn received_source(&self) -> (&'static str, &'static str) {
        match self.uplink.kind {
            UplinkKind::Null => ("switch", "rx_"),
            // TCP programs: iperf3's per-second rate.
            UplinkKind::Namespace | UplinkKind::Qemu => ("app", "iperf3_"),
            UplinkKind::Sink => ("sink", ""),
        }
    }

    /// The runs this scenario makes on each switch: one, or one per sweep value.
    pub fn steps(&self) -> Vec<Step> {
        let values: Vec<Option<usize>> = match &self.sweep {
            Some(sw) => sw.counts.iter().map(|&n| Some(n)).collect(),
            None => vec![None],
        };
        values
            .into_iter()
            .map(|value| {
                let mut vms = Vec::new();
                for spec in &self.vms {
                    let swept = self.sweep.as_ref().filter(|sw| sw.vm == spec.name).zip(value);
                    let count = match swept {
                        Some((sw, n)) if !sw.flows => n,
                        _ => spec.count,
                    };
                    // A swept flow count is every group's `{count}` (a sender and the guest
                    // that later receives the same number of streams).
                    let commands: Vec<String> = match self.sweep.as_ref().zip(value) {
                        Some((sw, n)) if sw.flows => {
                            spec.commands.iter().map(|c| c.replace("{count}", &n.to_string())).collect()
                        }
                        _ => spec.commands.clone(),
                    };
                    let phases: Vec<Phase> = spec.phases.iter().map(|p| p.parse().expect("validated")).collect();
                    for k in 1..=count {
                        let grouped =
                            spec.count > 1 || self.sweep.as_ref().is_some_and(|s| s.vm == spec.name && !s.flows);
                        vms.push(Vm {
                            name: if grouped { format!("{}{k}", spec.name) } else { spec.name.clone() },
                            group: spec.name.clone(),
                            kind: spec.kind,
                            phases: phases.clone(),
                            phase_texts: spec.phases.clone(),
                            commands: commands.clone(),
                            port: spec.port,
                            qos: spec.qos.clone(),
                            tenant: spec.tenant.clone(),
                        });
                    }
                }
                let label = match (value, &self.sweep) {
                    (Some(n), Some(sw)) if sw.flows => {
                        format!("{}-{}={n}", sw.vm, sw.label.as_deref().unwrap_or("flows"))
                    }
                    (Some(n), Some(sw)) => format!("{}={n}", sw.vm),
                    _ => "run".to_string(),
                };
                Step { label, sweep_value: value, vms }
            })
            .collect()
    }
}
