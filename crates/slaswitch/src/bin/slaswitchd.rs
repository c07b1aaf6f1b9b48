//! slaswitchd: the switch daemon. Runs in the foreground until SIGINT or SIGTERM.
//!
//! slaswitchd [--pmd-cores 0[,1...]] [--main-core N] [--run-dir DIR] [--db FILE] [--model FILE]
//!            [--file-prefix NAME] [--metrics ADDR | --no-metrics] [--mbufs N] [--mac-age SECS]
//!            [--c2tb-bucket-us US] [--compare-slice-us US] [--no-huge] [--pci]

use std::path::PathBuf;

use slaswitch::args::Args;
use slaswitch::control::{DEFAULT_RUN_DIR, SOCKET_NAME};
use slaswitch::daemon::{config::ConfigStore, install_signal_handlers, serve, Daemon};
use slaswitch_datapath::{Datapath, DatapathSettings};
use slaswitch_qos::cpu::C2tbConfig;

const USAGE_HEAD: &str = "usage: slaswitchd [--pmd-cores LIST] [--main-core N] [--run-dir DIR] [--db FILE] [--model FILE] [--file-prefix NAME]
                  [--metrics ADDR | --no-metrics] [--mbufs N] [--mac-age SECS] [--c2tb-bucket-us US]
                  [--compare-slice-us US] [--no-huge] [--pci]
  --pmd-cores   cores of the PMD threads, comma-separated (default 0)
  --main-core   core of the control thread (default: the last core not used by a PMD)
  --run-dir     control socket and default vhost-user sockets (default /var/run/slaswitch)
  --db          persisted configuration (default /var/lib/slaswitch/conf.json)
  --model       bandwidth-CPU model written by `slaswitch calibrate` (default /var/lib/slaswitch/bandwidth-model.json)
  --file-prefix DPDK EAL file prefix, so instances and OVS can run side by side (default slaswitch)
  --metrics     Prometheus endpoint (default 127.0.0.1:9477)
  --c2tb-bucket-us
                depth of every C2TB cycle bucket, in microseconds of a whole core: what a port
                may save up while it has nothing to send
  --compare-slice-us
                measure what C2QoS costs, live: a PMD whose ports have C2QoS settings runs its
                scheduler and plain round robin in turn, this long each, and counts each side's
                packets and cycles apart in the last quarter of each slice (pmd-stats
                `compare`; 1000 to 10000000; default off).
                Meanwhile the ports get their C2QoS guarantees only half of the time";

/// The usage text, with the bucket depth's default and range from where they are defined.
fn usage() -> String {
    let (lo, hi) = C2tbConfig::BUCKET_DEPTH_US.into_inner();
    format!("{USAGE_HEAD} (default {}; {lo} to {hi})", C2tbConfig::DEFAULT_BUCKET_DEPTH_US)
}

/// Of a slice shorter than a millisecond, a quarter of a millisecond would be counted (the
/// rest is the switch settling); longer than 10 s, the two sides would no longer see the
/// same phase of the host.
const COMPARE_SLICE_US: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;

fn check_compare_slice_us(us: u64) -> Result<u64, String> {
    if us == 0 || COMPARE_SLICE_US.contains(&us) {
        Ok(us)
    } else {
        Err(format!(
            "--compare-slice-us {us} is out of range: {} to {} microseconds, or 0 for off",
            COMPARE_SLICE_US.start(),
            COMPARE_SLICE_US.end()
        ))
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("slaswitchd: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let a = Args::parse(
        std::env::args().skip(1),
        &[
            "pmd-cores",
            "main-core",
            "run-dir",
            "db",
            "model",
            "file-prefix",
            "metrics",
            "mbufs",
            "mac-age",
            "c2tb-bucket-us",
            "compare-slice-us",
        ],
        &["no-huge", "pci", "no-metrics", "help"],
    )
    .map_err(|e| format!("{e}\n{}", usage()))?;
    if a.flag("help") {
        println!("{}", usage());
        return Ok(());
    }
    if let Some(extra) = a.positional.first() {
        return Err(format!("unexpected argument '{extra}'\n{}", usage()));
    }
    let pmd_cores: Vec<usize> = a
        .get("pmd-cores")
        .unwrap_or("0")
        .split(',')
        .map(|c| c.trim().parse().map_err(|_| format!("--pmd-cores: '{c}' is not a core number")))
        .collect::<Result<_, _>>()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default_main = (0..cores).rev().find(|c| !pmd_cores.contains(c)).unwrap_or(0);
    let run_dir = PathBuf::from(a.get("run-dir").unwrap_or(DEFAULT_RUN_DIR));
    let settings = DatapathSettings {
        pmd_cores,
        main_core: a.parsed("main-core", default_main)?,
        file_prefix: a.get("file-prefix").unwrap_or("slaswitch").to_string(),
        run_dir: run_dir.clone(),
        mbufs: a.parsed("mbufs", 65535)?,
        hugepages: !a.flag("no-huge"),
        pci: a.flag("pci"),
        mac_max_age_secs: a.parsed("mac-age", 300)?,
        c2tb_bucket_us: C2tbConfig::check_bucket_depth_us(
            a.parsed("c2tb-bucket-us", C2tbConfig::DEFAULT_BUCKET_DEPTH_US)?,
        )
        .map_err(|e| format!("--c2tb-bucket-us {e}"))?,
        compare_slice_us: check_compare_slice_us(a.parsed("compare-slice-us", 0)?)?,
    };
    let store = ConfigStore::new(PathBuf::from(a.get("db").unwrap_or("/var/lib/slaswitch/conf.json")));
    let metrics =
        if a.flag("no-metrics") { None } else { Some(a.get("metrics").unwrap_or("127.0.0.1:9477").to_string()) };
    install_signal_handlers();
    let dp = Datapath::start(settings.clone())?;
    let model = PathBuf::from(a.get("model").unwrap_or(slaswitch::control::DEFAULT_MODEL_PATH));
    let daemon = Daemon::start(dp, store, model)?;
    let socket = run_dir.join(SOCKET_NAME);
    eprintln!(
        "slaswitchd: ready; PMD cores {:?}, control core {}, control socket {}{}",
        settings.pmd_cores,
        settings.main_core,
        socket.display(),
        metrics.as_ref().map_or(String::new(), |m| format!(", metrics http://{m}/metrics"))
    );
    serve(daemon, socket, metrics)
}
