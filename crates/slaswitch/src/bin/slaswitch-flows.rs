//! slaswitch-flows: the test bed's own traffic tools for namespace VMs, where no packaged tool
//! measures what a seed's experiment needs. Each prints one JSON document on stdout.
//!
//!   slaswitch-flows server [--port 5300]
//!   slaswitch-flows client --to IP:PORT --sizes 8192,32768 --intervals-ms 10,100 --secs-each 8
//!   slaswitch-flows meter --iface IF [--bin-us 1000] [--name IP=NAME ...]
//!
//! `client` opens short TCP flows open-loop and reports their completion times (seed 003 Fig.
//! 7); `meter` counts what the receiver's interface gets per source in millisecond bins until
//! it is stopped, and how fast each source settled after the last one started (seed 003 Fig. 6).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};
use slaswitch::signals::stop_on_signals;
use slaswitch_traffic::meter::{self, Bins};
use slaswitch_traffic::short_flows::{self, Workload};

#[derive(Parser, Debug)]
#[command(name = "slaswitch-flows", version, about = "Short-flow completion times and a millisecond rate meter")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Answers short flows: reads each connection to its end, then sends one byte.
    Server {
        #[arg(long, default_value_t = 5300)]
        port: u16,
    },
    /// Opens short flows, one workload after another (every size with every interval).
    Client {
        /// The server, IP:PORT.
        #[arg(long)]
        to: SocketAddr,
        /// Flow sizes in bytes.
        #[arg(long, value_delimiter = ',', default_values_t = [8192usize, 32768])]
        sizes: Vec<usize>,
        /// Times between flow starts, milliseconds.
        #[arg(long, value_delimiter = ',', default_values_t = [10u64, 100])]
        intervals_ms: Vec<u64>,
        /// How long each workload starts flows, seconds.
        #[arg(long, default_value_t = 8.0)]
        secs_each: f64,
        /// Waits this long first (a neighbour's long flows reach their steady state), seconds.
        #[arg(long, default_value_t = 0.0)]
        after_secs: f64,
    },
    /// Counts received bytes per source in bins until stopped (SIGTERM or SIGINT).
    Meter {
        /// The receiver's interface; by default the namespace's only one besides loopback.
        #[arg(long)]
        iface: Option<String>,
        #[arg(long, default_value_t = 1000)]
        bin_us: u64,
        /// Names for sources, IP=NAME.
        #[arg(long = "name")]
        names: Vec<String>,
        /// Bins averaged when judging convergence.
        #[arg(long, default_value_t = 5)]
        smooth_bins: usize,
        /// Bins the smoothed rate must stay close for.
        #[arg(long, default_value_t = 20)]
        hold_bins: usize,
        /// How close to its steady rate a source must come, a fraction.
        #[arg(long, default_value_t = 0.15)]
        tolerance: f64,
    },
}

fn main() {
    let cli = Cli::parse();
    let out = match cli.command {
        Cmd::Server { port } => {
            let listener = TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| fail(&format!("port {port}: {e}")));
            short_flows::serve(listener).unwrap_or_else(|e| fail(&e.to_string()));
            return;
        }
        Cmd::Client { to, sizes, intervals_ms, secs_each, after_secs } => {
            if !(secs_each.is_finite() && secs_each > 0.0 && after_secs.is_finite() && after_secs >= 0.0) {
                fail("--secs-each must be above 0 and --after-secs at least 0 (seconds)");
            }
            if sizes.contains(&0) || intervals_ms.contains(&0) {
                fail("--sizes and --intervals-ms must be above 0");
            }
            std::thread::sleep(Duration::from_secs_f64(after_secs));
            client(to, &sizes, &intervals_ms, secs_each)
        }
        Cmd::Meter { iface, bin_us, names, smooth_bins, hold_bins, tolerance } => {
            if bin_us == 0 || smooth_bins == 0 || hold_bins == 0 || !(tolerance > 0.0 && tolerance < 1.0) {
                fail("--bin-us, --smooth-bins and --hold-bins must be above 0, --tolerance between 0 and 1");
            }
            let names: Vec<(Ipv4Addr, String)> = names
                .iter()
                .map(|n| {
                    n.split_once('=')
                        .and_then(|(ip, name)| Some((ip.parse().ok()?, name.to_string())))
                        .unwrap_or_else(|| fail(&format!("--name {n}: expected IP=NAME")))
                })
                .collect();
            let iface = iface.unwrap_or_else(only_interface);
            // SIGTERM or SIGINT ends the measurement; the bins so far are reported.
            let stop = stop_on_signals().unwrap_or_else(|e| fail(&format!("signal handler: {e}")));
            let bins = meter::measure(&iface, Duration::from_micros(bin_us), &stop)
                .unwrap_or_else(|e| fail(&format!("{iface}: {e}")));
            meter_report(&bins, &names, (smooth_bins, hold_bins), tolerance)
        }
    };
    println!("{}", serde_json::to_string(&out).expect("JSON"));
}

/// The one interface besides loopback in this network namespace.
fn only_interface() -> String {
    let names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    match names.iter().filter(|n| *n != "lo").collect::<Vec<_>>()[..] {
        [one] => one.clone(),
        [] => fail("--iface: this namespace has no interface besides lo"),
        ref many => fail(&format!("--iface: give one of {many:?}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("slaswitch-flows: {msg}");
    std::process::exit(2)
}

fn client(to: SocketAddr, sizes: &[usize], intervals_ms: &[u64], secs_each: f64) -> Value {
    let mut results = Vec::new();
    for &size_bytes in sizes {
        for &ms in intervals_ms {
            let w = Workload {
                size_bytes,
                interval: Duration::from_millis(ms),
                duration: Duration::from_secs_f64(secs_each),
            };
            let t = short_flows::run(to, &w);
            results.push(json!({
                "size_bytes": size_bytes,
                "interval_ms": ms,
                "started": t.started,
                "completed": t.fct_us.len(),
                "fct_mean_us": t.mean_us(),
                "fct_p50_us": t.percentile_us(50.0),
                "fct_p90_us": t.percentile_us(90.0),
                "fct_p99_us": t.percentile_us(99.0),
            }));
        }
    }
    json!({ "short_flows": results })
}

/// Per source: its rate per bin from 100 ms before the last source started to 500 ms after,
/// its rate per 100 ms, and how fast it settled after that start.
fn meter_report(
    bins: &Bins,
    names: &[(Ipv4Addr, String)],
    (smooth_bins, hold_bins): (usize, usize),
    tolerance: f64,
) -> Value {
    let name = |ip: &Ipv4Addr| names.iter().find(|(a, _)| a == ip).map(|(_, n)| n.clone()).unwrap_or(ip.to_string());
    let named: Vec<&Ipv4Addr> = bins.bytes.keys().filter(|ip| names.iter().any(|(a, _)| a == *ip)).collect();
    let per_ms = 1000 / bins.bin_us.max(1) as usize;
    let event = named.iter().filter_map(|ip| bins.first_bin(ip)).max().unwrap_or(0);
    let (settle, steady) = (500 * per_ms.max(1), 1000 * per_ms.max(1));
    let window = event.saturating_sub(100 * per_ms)..event + 500 * per_ms;
    let sources: Vec<Value> = named
        .iter()
        .map(|ip| {
            let c = meter::convergence(bins, ip, event, (settle, steady), (smooth_bins, hold_bins), tolerance);
            let len = bins.bytes[*ip].len();
            let per_100ms: Vec<f64> = (0..len.div_ceil(100 * per_ms))
                .map(|k| {
                    (0..100 * per_ms).map(|i| bins.mbps(ip, k * 100 * per_ms + i)).sum::<f64>() / (100 * per_ms) as f64
                })
                .collect();
            json!({
                "name": name(ip),
                "ip": ip.to_string(),
                "first_secs": bins.first_bin(ip).map(|b| b as f64 * bins.bin_us as f64 / 1e6),
                "steady_mbps": c.steady_mbps,
                "converge_ms": c.bins.map(|b| b as f64 * bins.bin_us as f64 / 1e3),
                "fine_from_bin": window.start,
                "fine_mbps": window.clone().map(|i| bins.mbps(ip, i)).collect::<Vec<_>>(),
                "per_100ms_mbps": per_100ms,
            })
        })
        .collect();
    json!({ "meter": {
        "bin_us": bins.bin_us,
        "event_secs": event as f64 * bins.bin_us as f64 / 1e6,
        "smooth_bins": smooth_bins,
        "hold_bins": hold_bins,
        "tolerance": tolerance,
        "sources": sources,
    }})
}
