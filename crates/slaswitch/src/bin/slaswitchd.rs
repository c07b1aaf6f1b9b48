//! slaswitchd: the switch daemon. Runs in the foreground until SIGINT or SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use slaswitch::control::{DEFAULT_MODEL_PATH, DEFAULT_RUN_DIR, SOCKET_NAME};
use slaswitch::daemon::control_plane::{self, ControlPlane, StopSignals};
use slaswitch::daemon::{access, config::ConfigStore, Daemon};
use slaswitch_agent::agent::AgentSettings;
use slaswitch_datapath::idle_polling::DEFAULT_IDLE_POLL_US;
use slaswitch_datapath::probe::ProbeSettings;
use slaswitch_datapath::{Datapath, DatapathSettings};
use slaswitch_qos::cpu::C2tbConfig;

/// Of a slice shorter than a millisecond, a quarter of a millisecond would be counted (the
/// rest is the switch settling); longer than 10 s, the two sides would no longer see the
/// same phase of the host.
const COMPARE_SLICE_US: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;

/// The slaswitch daemon: DPDK PMD threads and the control socket.
#[derive(Parser, Debug)]
#[command(name = "slaswitchd", version)]
struct Cli {
    /// Cores of the PMD threads, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pmd_cores: Vec<usize>,
    /// With several PMDs, move ports between them live when a core cannot keep its promises or
    /// is saturated while another has room (`on`), or only where `pmd=N` and placement put them.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pmd_rebalance: String,
    /// Core of the control thread (default: the last core not used by a PMD).
    #[arg(long)]
    main_core: Option<usize>,
    /// Control socket and default vhost-user sockets.
    #[arg(long, default_value = DEFAULT_RUN_DIR)]
    run_dir: PathBuf,
    /// The group (besides root) that may use the control socket and reach the run directory
    /// (socket 0660, directory 0750); default root's.
    #[arg(long)]
    socket_group: Option<String>,
    /// Persisted configuration.
    #[arg(long, default_value = "/var/lib/slaswitch/conf.json")]
    db: PathBuf,
    /// Bandwidth-CPU model written by `slaswitch calibrate`.
    #[arg(long, default_value = DEFAULT_MODEL_PATH)]
    model: PathBuf,
    /// DPDK EAL file prefix, so instances and OVS can run side by side.
    #[arg(long, default_value = "slaswitch")]
    file_prefix: String,
    /// Prometheus endpoint.
    #[arg(long, default_value = "127.0.0.1:9477")]
    metrics: String,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics")]
    no_metrics: bool,
    /// Mbufs in the packet pool.
    #[arg(long, default_value_t = 65535)]
    mbufs: u32,
    /// Seconds before a learned MAC address is forgotten.
    #[arg(long = "mac-age", default_value_t = 300)]
    mac_age_secs: u64,
    /// Depth of every C2TB cycle bucket, in microseconds of a whole core: what a port may save
    /// up while it has nothing to send.
    #[arg(long = "c2tb-bucket-us", default_value_t = C2tbConfig::DEFAULT_BUCKET_DEPTH_US,
          value_parser = parse_bucket_depth_us)]
    c2tb_bucket_us: u64,
    /// While a latency-class port (priority 1-2, with a purchase) is on a PMD, its lower-class
    /// ports beyond their purchase are polled for at most this many packets at a time, 1 to
    /// 32 (32: full batches).
    #[arg(long = "lower-class-burst", default_value_t = slaswitch_qos::cpu::hbs::DEFAULT_LOWER_CLASS_BURST,
          value_parser = clap::value_parser!(u32).range(1..=32))]
    lower_class_burst: u32,
    /// A port without C2QoS settings that received nothing for 100 us is polled once every
    /// this many microseconds instead of every pass, 0 to 1000 (0: every port every pass).
    /// Its first frame after the quiet spell waits at most this much longer.
    #[arg(long = "idle-poll-us", default_value_t = DEFAULT_IDLE_POLL_US,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    idle_poll_us: u64,
    /// A PMD sleeps after a pass in which no queue was filling (no poll returned half a
    /// batch), twice as long each such pass from 1 us up to this many microseconds, 0 to 10000
    /// (0: never; OVS-DPDK's `pmd-maxsleep`). It leaves a core it shares with VMs to them while
    /// it has little to do; a frame waits in its ring at most this much longer.
    #[arg(long = "pmd-max-sleep-us", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=slaswitch_datapath::pmd_sleep::MAX_SLEEP_US))]
    pmd_max_sleep_us: u64,
    /// Where kernel ports (tap, af-packet) send: `pmd`, the PMD makes each system call (which
    /// runs the receiving namespace's stack, and no port of that PMD is polled meanwhile), or
    /// `thread`, a sender thread per kernel port on the cores no PMD has, charged back to the
    /// ports whose frames it sent (other tenants no longer wait for those calls; the cores
    /// left to the host then do that work).
    #[arg(long = "kernel-tx", default_value = "pmd", value_parser = ["pmd", "thread"])]
    kernel_tx: String,
    /// Measure C2QoS's own work on every PMD (pmd-stats `probe`, metrics `slaswitch_pmd_qos_*`).
    #[arg(long)]
    probe: bool,
    /// With the probe, also compare C2QoS with plain round robin live: a PMD whose ports have
    /// C2QoS settings runs its scheduler and round robin in turn, this long each (1000 to
    /// 10000000), counting each side apart. Meanwhile the ports get their C2QoS guarantees only
    /// half of the time.
    #[arg(long = "compare-slice-us", value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
    compare_slice_us: Option<u64>,
    /// Run EAL without hugepages (slower; vhost-user VMs still need hugepages on their side).
    #[arg(long)]
    no_huge: bool,
    /// Let EAL scan the PCI bus (for `dpdk` ports).
    #[arg(long)]
    pci: bool,
    /// etcd client URLs, comma-separated: run the cluster agent (purchases from
    /// `slaswitch-master`, usage reports for billing). Needs --host-id.
    #[arg(long, value_delimiter = ',', requires = "host_id")]
    etcd: Vec<String>,
    /// This host's id in the cluster.
    #[arg(long, requires = "etcd", value_parser = parse_host_id)]
    host_id: Option<String>,
    /// The cluster's key prefix in etcd.
    #[arg(long, default_value = slaswitch_agent::keys::DEFAULT_PREFIX)]
    etcd_prefix: String,
    /// The billing cycle, milliseconds (100 to 3600000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    billing_cycle_ms: u64,
    /// The agent's lease in etcd, seconds (2 to 600): a switch silent this long is dead to the
    /// master.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(i64).range(2..=600))]
    lease_secs: i64,
    /// Billing cycles the agent writes to etcd under one key (1 to 3600): each cycle is still
    /// billed on its own; more cycles a key mean fewer etcd writes in a large fleet, and a
    /// bill that many cycles later.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    report_every: u64,
    #[command(flatten)]
    etcd_tls: slaswitch_agent::etcd::EtcdTlsArgs,
}

fn parse_host_id(s: &str) -> Result<String, slaswitch_config::ConfigError> {
    slaswitch_config::names::valid_name("host id", s, slaswitch_agent::purchase::MAX_NAME).map(|()| s.to_string())
}

fn parse_bucket_depth_us(s: &str) -> Result<u64, String> {
    let us: u64 = s.parse().map_err(|_| format!("'{s}' is not a whole number of microseconds"))?;
    C2tbConfig::check_bucket_depth_us(us).map_err(|e| e.to_string())
}

fn main() {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).init();
    let cli: Cli = slaswitch_config::cli::parse_args(None);
    if let Err(e) = run(cli) {
        tracing::error!("{e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // Checked before anything starts.
    let tls = cli.etcd_tls.tls()?;
    let cores = slaswitch_datapath::pmd::online_cores();
    let default_main = (0..cores).rev().find(|c| !cli.pmd_cores.contains(c)).unwrap_or(0);
    debug_assert!(cli.compare_slice_us.is_none_or(|us| COMPARE_SLICE_US.contains(&us)));
    let probe = (cli.probe || cli.compare_slice_us.is_some())
        .then(|| ProbeSettings { compare_slice_us: cli.compare_slice_us.unwrap_or(0) });
    let settings = DatapathSettings {
        pmd_cores: cli.pmd_cores,
        main_core: cli.main_core.unwrap_or(default_main),
        file_prefix: cli.file_prefix,
        run_dir: cli.run_dir.clone(),
        mbufs: cli.mbufs,
        hugepages: !cli.no_huge,
        pci: cli.pci,
        mac_max_age_secs: cli.mac_age_secs,
        c2tb_bucket_us: cli.c2tb_bucket_us,
        lower_class_burst: cli.lower_class_burst,
        idle_poll_us: cli.idle_poll_us,
        max_sleep_us: cli.pmd_max_sleep_us,
        kernel_tx_threads: cli.kernel_tx == "thread",
        probe,
    };
    let socket_gid =
        cli.socket_group.as_deref().map(access::group_id).transpose().map_err(anyhow::Error::msg)?.unwrap_or(0);
    let store = ConfigStore::new(cli.db);
    let metrics = (!cli.no_metrics).then_some(cli.metrics);
    let rt = control_plane::runtime(settings.main_core).context("the control plane's runtime")?;
    let signals = StopSignals::register(&rt).context("signal handlers")?;
    let dp = Datapath::start(settings.clone())?;
    access::secure_run_dir(&cli.run_dir, socket_gid).map_err(anyhow::Error::msg)?;
    let mut daemon = Daemon::start(dp, store, cli.model).map_err(anyhow::Error::msg)?;
    daemon.set_pmd_rebalance(cli.pmd_rebalance == "on");
    let socket = cli.run_dir.join(SOCKET_NAME);
    tracing::info!(
        "ready; PMD cores {:?}, control core {}, control socket {}{}",
        settings.pmd_cores,
        settings.main_core,
        socket.display(),
        metrics.as_ref().map_or(String::new(), |m| format!(", metrics http://{m}/metrics"))
    );
    let agent = cli.host_id.map(|host| {
        let mut a = AgentSettings::new(cli.etcd, host);
        a.tls = tls;
        a.prefix = cli.etcd_prefix;
        a.cycle_ms = cli.billing_cycle_ms;
        a.lease_ttl_secs = cli.lease_secs;
        a.report_every_cycles = cli.report_every as usize;
        a
    });
    let plane = ControlPlane { socket, socket_gid, metrics_addr: metrics, agent };
    control_plane::serve(rt, signals, daemon, plane).map_err(anyhow::Error::msg)
}
