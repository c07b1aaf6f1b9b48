//! Why the data plane refused a change or could not start. Every change it refuses leaves it as
//! it was; each error names what was asked and what is allowed, and the control socket's replies
//! take its `Display`. A cause is part of the message (a field named `cause`, not a `source`
//! chain), so that one line of text carries all of it.

use slaswitch_classifier::RuleError;
use slaswitch_config::ConfigError;
use slaswitch_dpdk::DpdkError;
use slaswitch_qos::QosError;

/// A refused change, or a data plane that could not start.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    /// Settings or options refused by the configuration's own rules (names, values, admission).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// DPDK refused a call.
    #[error(transparent)]
    Dpdk(#[from] DpdkError),
    /// No PMD core given.
    #[error("at least one PMD core is needed")]
    NoPmdCore,
    /// A core this machine does not have.
    #[error("core {core} does not exist: this machine has cores 0 to {last}")]
    NoSuchCore {
        /// The core asked for.
        core: usize,
        /// The last core there is.
        last: usize,
    },
    /// Hugepages asked for and not there.
    #[error(
        "no usable hugepages (total {total}, free {free}, hugetlbfs mounted: {mounted}). Fix as root:\n  \
         echo 1024 > /proc/sys/vm/nr_hugepages\n  mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages\n\
         or start with --no-huge (slower; vhost-user VMs still need hugepages on their side)"
    )]
    NoHugepages {
        /// Hugepages configured.
        total: u64,
        /// Free.
        free: u64,
        /// hugetlbfs is mounted.
        mounted: bool,
    },
    /// The run directory could not be made.
    #[error("cannot create run directory {path}: {cause}")]
    RunDir {
        /// The directory.
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// A PMD thread could not be started or pinned.
    #[error("cannot start the PMD thread for core {core}: {cause}")]
    PmdThread {
        /// Its core.
        core: usize,
        /// Why.
        cause: std::io::Error,
    },
    /// A kernel port's sender thread could not be started.
    #[error("cannot start the sender thread of kernel port {port}: {cause}")]
    SenderThread {
        /// The port.
        port: String,
        /// Why.
        cause: std::io::Error,
    },
    /// A PMD thread has stopped.
    #[error("the PMD thread on core {0} has stopped")]
    PmdStopped(usize),
    /// A PMD thread did not take a new configuration in time.
    #[error("the PMD thread on core {0} did not take the new configuration")]
    PmdNoAnswer(usize),
    /// `pmd=N` names a core without a PMD thread.
    #[error("pmd={core}: no PMD thread runs on core {core} (PMD cores: {cores:?})")]
    NoPmdOnCore {
        /// The core asked for.
        core: usize,
        /// The PMD cores.
        cores: Vec<usize>,
    },
    /// A port pinned by `pmd=N` is not moved by anyone else.
    #[error("port {port} is pinned to the PMD on core {core} (pmd={core}); set pmd= to move it")]
    PinnedPort {
        /// The port.
        port: String,
        /// Its core.
        core: usize,
    },
    /// A thread could not be pinned.
    #[error("cannot pin to core {core}: {cause}")]
    Pin {
        /// The core.
        core: usize,
        /// Why.
        cause: std::io::Error,
    },
    /// A port of that name exists.
    #[error("a port named '{0}' already exists")]
    PortExists(String),
    /// No port of that name.
    #[error("no port named '{0}'")]
    NoPort(String),
    /// `ofport_request` names a taken number.
    #[error("ofport_request={number}: port number {number} is taken by '{by}'")]
    NumberTaken {
        /// The number.
        number: u16,
        /// The port that has it.
        by: String,
    },
    /// Every port number is taken.
    #[error("no port number left")]
    NoPortNumber,
    /// `ofport_request` changed on a live port.
    #[error("ofport_request cannot change on a live port ({port} is number {number}); delete and add it")]
    NumberChange {
        /// The port.
        port: String,
        /// Its number.
        number: u16,
    },
    /// A port's device could not be created.
    #[error("cannot create {port_type} port {port}: {cause}")]
    CreateDevice {
        /// Its type.
        port_type: &'static str,
        /// The port.
        port: String,
        /// Why.
        cause: DpdkError,
    },
    /// The port's device cannot take the MTU asked for.
    #[error("{port_type} port {port}: mtu_request={requested}: this port's driver takes at most {max}")]
    Mtu {
        /// Its type.
        port_type: &'static str,
        /// The port.
        port: String,
        /// The MTU asked for.
        requested: u16,
        /// The most its driver takes.
        max: u16,
    },
    /// A port's device could not be started.
    #[error("cannot start {port_type} port {port}: {cause}")]
    StartDevice {
        /// Its type.
        port_type: &'static str,
        /// The port.
        port: String,
        /// Why.
        cause: DpdkError,
    },
    /// A change failed and putting the old port back failed too.
    #[error("{error}; restoring the old port failed too: {restore}")]
    RestoreFailed {
        /// The change's error.
        error: Box<DatapathError>,
        /// The restore's.
        restore: Box<DatapathError>,
    },
    /// `set-port` with no port.
    #[error("no port to set")]
    NothingToSet,
    /// `set-port NAME` with no option.
    #[error("set-port {0} needs at least one key=value")]
    NoOptions(String),
    /// A port named twice in one change.
    #[error("port {0} is named twice; give all its options in one place")]
    NamedTwice(String),
    /// An option that recreates a device, among several ports' changes.
    #[error("{port}: {key} recreates the port's device, so it cannot be set together with other ports; set it alone")]
    NotLive {
        /// The port.
        port: String,
        /// The option.
        key: String,
    },
    /// One port's error among several ports' changes.
    #[error("{port}: {cause}")]
    OfPort {
        /// The port.
        port: String,
        /// Its error.
        cause: Box<DatapathError>,
    },
    /// A port names a tenant that does not exist.
    #[error("port {port}: tenant={tenant} does not exist (create it first: slaswitch set-tenant {tenant} weight=W)")]
    NoTenantForPort {
        /// The port.
        port: String,
        /// The tenant it names.
        tenant: String,
    },
    /// A change a paced link's scheduler would refuse.
    #[error("{change}: the link scheduler of {link} would refuse it: {cause}")]
    LinkRefuses {
        /// The change.
        change: String,
        /// The paced port.
        link: String,
        /// Why.
        cause: QosError,
    },
    /// A link scheduler refused its settings.
    #[error(transparent)]
    Qos(#[from] QosError),
    /// A port without a link scheduler.
    #[error("port {0} has no link scheduler: it is not paced (set link_rate_bps on it)")]
    NotPaced(String),
    /// A tenant weight outside the range.
    #[error("weight={weight}: a whole number from {min} to {max}")]
    TenantWeight {
        /// The weight given.
        weight: u32,
        /// The smallest.
        min: u32,
        /// The largest.
        max: u32,
    },
    /// The default tenant cannot go.
    #[error("tenant {0} always exists (ports that name no tenant are in it)")]
    DefaultTenant(&'static str),
    /// No tenant of that name.
    #[error("no tenant named '{0}'")]
    NoTenant(String),
    /// A tenant removed while ports name it.
    #[error("tenant {name} still has ports: {ports} (move them first)")]
    TenantInUse {
        /// The tenant.
        name: String,
        /// Its ports, comma separated.
        ports: String,
    },
    /// A flow that does not parse.
    #[error("flow '{flow}': {cause}")]
    Flow {
        /// The flow's text.
        flow: String,
        /// Why.
        cause: RuleError,
    },
    /// A match that does not parse.
    #[error("match '{matcher}': {cause}")]
    Match {
        /// The match's text.
        matcher: String,
        /// Why.
        cause: RuleError,
    },
}
