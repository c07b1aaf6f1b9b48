//! slaswitch-sim: studies on the switch's own QoS code.
//!
//!   slaswitch-sim overcommit --vms 16 --utilization 0.10,0.15 --max-oc 10 [--max-failure 0.05]
//!       [--step 0.5] [--samples 100000] [--seed 1] [--out DIR] [--json]
//!   slaswitch-sim datacenter [--servers 2000] [--secs 600] [--oc 1,2,3,4,5,6] [--rho 0.15]
//!       [--loads strict,dynamic] [--sharing softbw,per-flow] [--flows 1,1,2] [--seed 1]
//!       [--check-servers 8] [--out DIR] [--json]

use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Instant;

use clap::{Parser, Subcommand};
use slaswitch_sim::datacenter::{self, DcConfig};
use slaswitch_sim::datacenter_report::{self, Row};
use slaswitch_sim::overcommit::{self, Study};
use slaswitch_sim::validate;

#[derive(Parser)]
#[command(name = "slaswitch-sim", version, about = "Simulations on slaswitch's QoS code (seed 003's over-commitment)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Guarantee failure against over-commitment (seed 003 Fig. 2, Eq. 2), with the largest
    /// over-commitment per utilization for a failure rate
    Overcommit {
        /// VMs per server, each with the same guarantee
        #[arg(long, default_value_t = 16)]
        vms: u32,
        /// Server utilizations without over-commitment, comma-separated (0.10 is 10%)
        #[arg(long, value_delimiter = ',', default_value = "0.10,0.15")]
        utilization: Vec<f64>,
        /// The sweep's largest over-commitment ratio
        #[arg(long = "max-oc", default_value_t = 10.0)]
        max_oc: f64,
        /// The table's step
        #[arg(long, default_value_t = 0.5)]
        step: f64,
        /// The failure rate the answers are for (0.05 is 5%)
        #[arg(long = "max-failure", default_value_t = 0.05)]
        max_failure: f64,
        /// Monte Carlo servers drawn per point to check Eq. 2 (0: none)
        #[arg(long, default_value_t = 100_000)]
        samples: u64,
        /// Seed of the Monte Carlo draws
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where the plot goes
        #[arg(long, default_value = "results/overcommit")]
        out: PathBuf,
        /// Print the findings as JSON
        #[arg(long)]
        json: bool,
    },
    /// Seed 003's datacenter (Sec. 6.4, Figs. 11-13): servers, strict and dynamic guarantees,
    /// SoftBW's fluid allocation every second at each egress and ingress
    Datacenter {
        /// Servers, each with a 1 Gbit/s access link
        #[arg(long, default_value_t = 2000)]
        servers: usize,
        /// Seconds simulated
        #[arg(long, default_value_t = 600)]
        secs: u32,
        /// Over-commitment ratios, one run each
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6")]
        oc: Vec<f64>,
        /// Utilization without over-commitment
        #[arg(long, default_value_t = 0.15)]
        rho: f64,
        /// Traffic loads, one run each per ratio (seed 003 Sec. 6.4's two): strict (every VM a
        /// strict guarantee), dynamic (every VM one (S, T) transfer), mixed (half and half)
        #[arg(long, value_delimiter = ',', default_value = "strict,dynamic")]
        loads: Vec<String>,
        /// How links are shared, one run each: softbw (per-VM queues), per-flow (best effort:
        /// TCP flows through one FIFO)
        #[arg(long, value_delimiter = ',', default_value = "softbw")]
        sharing: Vec<String>,
        /// Flows per VM, repeated over each server's VMs (e.g. 1,1,2)
        #[arg(long, value_delimiter = ',', default_value = "1")]
        flows: Vec<u32>,
        /// Seed of every draw
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Servers whose egress is replayed at packet level through SoftBw: the ones that
        /// offered the most in the middle second (0: none)
        #[arg(long, default_value_t = 8)]
        check_servers: usize,
        /// Where the figures and the report go
        #[arg(long, default_value = "results/datacenter")]
        out: PathBuf,
        /// Print the findings as JSON
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Overcommit { vms, utilization, max_oc, step, max_failure, samples, seed, out, json } => {
            overcommit_study(
                Study { vms, utilizations: utilization, max_ratio: max_oc, step, max_failure, samples, seed },
                &out,
                json,
            )
        }
        Command::Datacenter { servers, secs, oc, rho, loads, sharing, flows, seed, check_servers, out, json } => {
            let base = DcConfig { servers, secs, rho, flows, ..DcConfig::paper(servers, 1.0, seed) };
            datacenter_study(&base, (&loads, &sharing), &oc, check_servers, &out, json)
        }
    }
}

fn overcommit_study(study: Study, out: &std::path::Path, json: bool) -> ExitCode {
    if let Err(e) = study.validate() {
        eprintln!("slaswitch-sim overcommit: {e}");
        return ExitCode::from(1);
    }
    let findings = overcommit::run(&study);
    let plot = match overcommit::plot(&study, &findings, out) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("slaswitch-sim overcommit: the plot: {e}");
            return ExitCode::from(1);
        }
    };
    if json {
        let doc = serde_json::json!({"findings": findings, "plot": plot});
        println!("{}", serde_json::to_string_pretty(&doc).expect("serializable"));
    } else {
        print!("{}", overcommit::render(&findings));
        println!("plot: {}", plot.display());
    }
    ExitCode::SUCCESS
}

/// A load's share of VMs with a dynamic guarantee.
fn dynamic_share(load: &str) -> Result<f64, String> {
    match load {
        "strict" => Ok(0.0),
        "dynamic" => Ok(1.0),
        "mixed" => Ok(0.5),
        other => Err(format!("loads: '{other}' is not allowed; give strict, dynamic or mixed")),
    }
}

fn datacenter_study(
    base: &DcConfig,
    (loads, sharings): (&[String], &[String]),
    ocs: &[f64],
    check_servers: usize,
    out: &std::path::Path,
    json: bool,
) -> ExitCode {
    let fail = |e: String| {
        eprintln!("slaswitch-sim datacenter: {e}");
        ExitCode::from(1)
    };
    if ocs.is_empty() || loads.is_empty() || sharings.is_empty() {
        return fail("oc, loads and sharing: give at least one of each".into());
    }
    let mut plan = Vec::new();
    for load in loads {
        let share = match dynamic_share(load) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        for sharing in sharings {
            let sharing: datacenter::Sharing = match sharing.parse() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            for &oc in ocs {
                let cfg = DcConfig { oc, dynamic_share: share, sharing, ..base.clone() };
                if let Err(e) = cfg.validate() {
                    return fail(e);
                }
                plan.push((load.clone(), cfg));
            }
        }
    }
    let bar = indicatif::ProgressBar::new(u64::from(base.secs) * plan.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} simulated seconds, {eta} left")
            .expect("a valid template"),
    );
    let started = Instant::now();
    let check_at = base.secs / 2;
    let (mut runs, mut rows, mut checks) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (load, cfg)) in plan.iter().enumerate() {
        bar.set_message(format!("{load} {:?} {}x", cfg.sharing, cfg.oc));
        let t = Instant::now();
        let done = i as u64 * u64::from(base.secs);
        let (r, captured) =
            datacenter::run(cfg, Some((check_at, check_servers)), &|s| bar.set_position(done + u64::from(s)));
        rows.push(Row::of(load, &r, t.elapsed().as_secs_f64()));
        // The packet check is of SoftBW's fluid form; best effort has no packet scheduler to check.
        if cfg.sharing == datacenter::Sharing::Softbw {
            checks
                .extend(validate::check(cfg.link_mbps * 1e6, &captured).into_iter().map(|c| (load.clone(), cfg.oc, c)));
        }
        runs.push((load.clone(), r));
    }
    bar.finish_and_clear();
    let wall_secs = started.elapsed().as_secs_f64();
    let peak_rss_kib = peak_rss_kib();
    if let Err(e) = datacenter_report::plots(out, &runs, &rows) {
        return fail(format!("the plots: {e}"));
    }
    let summary = serde_json::json!({
        "config": base, "rows": rows, "wall_secs": wall_secs, "peak_rss_kib": peak_rss_kib,
        "threads": rayon::current_num_threads(),
        "fluid_check": checks.iter().map(|(load, oc, c)| serde_json::json!({"load": load, "oc": oc, "check": c})).collect::<Vec<_>>(),
    });
    let checked: Vec<_> = checks.iter().map(|(_, _, c)| c.clone()).collect();
    let report = format!(
        "# Datacenter simulation (seed 003 Sec. 6.4)\n\nSimulated, not measured: `slaswitch-sim datacenter`, {} servers x {} s, rho {}, seed {}, {} threads, {wall_secs:.1} s in all.\n\n{}\n## The fluid step against SoftBw's packets\n\nThe {} busiest servers' egress in second {check_at} of each run, replayed frame by frame (1500-byte frames, a fake clock, 0.1 s of warm-up, 1 s counted).\n\n{}",
        base.servers,
        base.secs,
        base.rho,
        base.seed,
        rayon::current_num_threads(),
        datacenter_report::table(&rows),
        check_servers,
        datacenter_report::check_table(&checked)
    );
    if let Err(e) = std::fs::write(out.join("report.md"), report) {
        return fail(format!("{}: {e}", out.join("report.md").display()));
    }
    let text = serde_json::to_string_pretty(&summary).expect("serializable");
    if let Err(e) = std::fs::write(out.join("summary.json"), &text) {
        return fail(format!("{}: {e}", out.join("summary.json").display()));
    }
    if json {
        println!("{text}");
    } else {
        print!("{}", datacenter_report::table(&rows));
        let worst = checks.iter().map(|(_, _, c)| c.worst_of_link).fold(0.0, f64::max);
        println!(
            "\n{} servers x {} s, {} runs in {wall_secs:.1} s on {} threads, peak RSS {} MiB",
            base.servers,
            base.secs,
            plan.len(),
            rayon::current_num_threads(),
            peak_rss_kib / 1024
        );
        if !checks.is_empty() {
            println!(
                "fluid step against SoftBw's packets ({} server-seconds): worst {:.2}% of the link",
                checks.len(),
                100.0 * worst
            );
        }
        println!("figures and summary.json: {}", out.display());
    }
    ExitCode::SUCCESS
}

/// The process's peak resident memory (VmHWM), KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
