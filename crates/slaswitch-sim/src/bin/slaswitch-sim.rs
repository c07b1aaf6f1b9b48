//! slaswitch-sim: studies on the switch's own QoS code.
//!
//!   slaswitch-sim overcommit --vms 16 --utilization 0.10,0.15 --max-oc 10 [--max-failure 0.05]
//!       [--step 0.5] [--samples 100000] [--seed 1] [--out DIR] [--json]
//!   slaswitch-sim datacenter [--servers 2000] [--secs 600] [--oc 1,2,3,4,5,6] [--rho 0.15]
//!       [--loads strict,dynamic] [--sharing softbw,per-flow] [--flows 1,1,2] [--seed 1]
//!       [--check-servers 8] [--link-mbps 1000] [--guarantee-mbps 250]
//!       [--flooders N] [--cpu c2qos,c2qos-strict,round-robin --frame-bytes 64,1500 [--model FILE] [--core-hz HZ]]
//!       [--out DIR] [--json]
//!   slaswitch-sim short-flows [--servers 2000] [--oc 1,2,4] [--rho 0.15] [--sample-servers 16]
//!       [--sizes 8192,32768] [--interval-ms 10] [--seed 1] [--out DIR]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

use std::time::Instant;

use clap::{Parser, Subcommand};
use slaswitch_qos::placement::Policy;
use slaswitch_sim::datacenter::{self, DcConfig};
use slaswitch_sim::datacenter_cpu::{CpuHost, CpuSharing};
use slaswitch_sim::datacenter_report::{self, Row};
use slaswitch_sim::overcommit::{self, Study};
use slaswitch_sim::placement_study::{self, parse_policy, PlacementOutcome, PlacementStudy};
use slaswitch_sim::pmd_study::PmdStudy;
use slaswitch_sim::short_flows::{self, ShortFlows};
use slaswitch_sim::short_flows_report::{self, Cell};
use slaswitch_sim::{validate, validate_cpu};

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
        /// Each server's access link, Mbit/s
        #[arg(long, default_value_t = 1000.0)]
        link_mbps: f64,
        /// Each VM's guarantee, Mbit/s (a link's worth of them is 1x over-commitment)
        #[arg(long, default_value_t = 250.0)]
        guarantee_mbps: f64,
        /// CPU-bound hosts: each server's switch core in front of its link, shared by c2qos
        /// (guarantees bought as MIN-MAX cycles), c2qos-strict or round-robin, one run each
        /// (none: the core never limits)
        #[arg(long, value_delimiter = ',')]
        cpu: Vec<String>,
        /// Strict VMs per server that flood (offer ten times their link's rate every second); the failure
        /// figures are of the others
        #[arg(long, default_value_t = 0)]
        flooders: usize,
        /// With --cpu: each VM's frame size, repeated over each server's VMs
        #[arg(long, value_delimiter = ',', default_value = "64,1500")]
        frame_bytes: Vec<u32>,
        /// With --cpu: the bandwidth-CPU model that prices the frames (`slaswitch calibrate`)
        #[arg(long, default_value = slaswitch_config::model_file::DEFAULT_MODEL_PATH)]
        model: PathBuf,
        /// With --cpu: the core's cycles per second (default: the model's TSC rate); the VMs get
        /// the share a PMD gives its ports
        #[arg(long)]
        core_hz: Option<f64>,
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
        /// A placement study instead of fixed ratios: VMs of differing utilization placed first
        /// fit by each of these rules, the master's own code (guarantee:RATIO,
        /// failure-model:TARGET[:MAX_RATIO]; e.g. guarantee:1,guarantee:4,failure-model:0.05)
        #[arg(long, value_delimiter = ',')]
        placement: Vec<String>,
        /// With --placement: VMs offered per server
        #[arg(long, default_value_t = 40)]
        offered_per_server: usize,
        /// With --placement: seconds each VM is measured before it is placed
        #[arg(long, default_value_t = 60)]
        warmup_secs: u32,
    },
    /// Seed 003 Fig. 7 at datacenter scale: the most contended egress links of the strict-load
    /// simulation replayed frame by frame with one VM's short flows, under SoftBW, the
    /// rate-limit baseline and FIFO
    ShortFlows {
        /// Servers, each with a 1 Gbit/s access link
        #[arg(long, default_value_t = 2000)]
        servers: usize,
        /// Seconds simulated (the replay takes the middle one)
        #[arg(long, default_value_t = 600)]
        secs: u32,
        /// Over-commitment ratios, one run each
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        oc: Vec<f64>,
        /// Utilization without over-commitment
        #[arg(long, default_value_t = 0.15)]
        rho: f64,
        /// Servers replayed per ratio: the ones whose VMs offered the most
        #[arg(long, default_value_t = 16)]
        sample_servers: usize,
        /// Short flows' sizes, bytes, taken in turn
        #[arg(long, value_delimiter = ',', default_value = "8192,32768")]
        sizes: Vec<u32>,
        /// Mean time between a VM's short flows, milliseconds
        #[arg(long, default_value_t = 10.0)]
        interval_ms: f64,
        /// Seed of every draw
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where the report, summary.json and the plot go
        #[arg(long, default_value = "results/short-flows")]
        out: PathBuf,
    },
    /// A host with many PMD cores: cycle purchases placed by slaswitch's own placement (per-core
    /// admission) against OVS-DPDK's rx-queue assignment, then some ports' cost doubles:
    /// slaswitch's moves against OVS's pmd-auto-lb
    PmdPlacement {
        #[command(flatten)]
        study: PmdStudy,
        /// Seeds, one run each
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
        seeds: Vec<u64>,
        /// Print the outcomes as JSON
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    let verb = match command {
        Command::Overcommit { .. } => "overcommit",
        Command::ShortFlows { .. } => "short-flows",
        Command::Datacenter { .. } => "datacenter",
        Command::PmdPlacement { .. } => "pmd-placement",
    };
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slaswitch-sim {verb}: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::PmdPlacement { study, seeds, json } => {
            let mut rows = Vec::new();
            for &seed in &seeds {
                rows.extend(PmdStudy { seed, ..study.clone() }.run()?.into_iter().map(|o| (seed, o)));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            let PmdStudy { cores, core_hz, offered, mean_share, min_use_share, cost_rise_share, secs, .. } = study;
            println!("simulator: {cores} PMD cores of {core_hz} cycles/s, {offered} VMs offered (mean purchase {mean_share} of a core, using {min_use_share}-1 of it), {cost_rise_share} of them doubling in cost; {secs} s after");
            println!(
                "{:>5} {:<15} {:>7} {:>14} {:>13} {:>12} {:>14} {:>6}",
                "seed", "rule", "placed", "over-promised", "short before", "short after", "s to whole", "moves"
            );
            for (seed, o) in rows {
                println!(
                    "{seed:>5} {:<15} {:>7} {:>14} {:>13} {:>12} {:>14} {:>6}",
                    o.policy,
                    o.placed,
                    o.on_over_promised_core,
                    o.short_before,
                    o.short_after,
                    o.secs_to_whole.map_or("never".into(), |s| s.to_string()),
                    o.moves
                );
            }
            Ok(())
        }
        Command::Overcommit { vms, utilization, max_oc, step, max_failure, samples, seed, out, json } => {
            overcommit_study(
                Study { vms, utilizations: utilization, max_ratio: max_oc, step, max_failure, samples, seed },
                &out,
                json,
            )
        }
        Command::ShortFlows { servers, secs, oc, rho, sample_servers, sizes, interval_ms, seed, out } => {
            if !(interval_ms.is_finite() && interval_ms > 0.0) {
                bail!("interval-ms: {interval_ms} is not allowed; give a number above 0");
            }
            let base = DcConfig { servers, secs, rho, ..DcConfig::paper(servers, 1.0, seed) };
            let short = ShortFlows { sizes_bytes: sizes, mean_interval_ns: (interval_ms * 1e6) as u64 };
            short_flow_study(&base, &oc, sample_servers, &short, &out)
        }
        Command::Datacenter {
            servers,
            secs,
            oc,
            rho,
            loads,
            sharing,
            flows,
            link_mbps,
            guarantee_mbps,
            cpu,
            flooders,
            frame_bytes,
            model,
            core_hz,
            seed,
            check_servers,
            out,
            json,
            placement,
            offered_per_server,
            warmup_secs,
        } => {
            if !placement.is_empty() {
                let study = PlacementStudy {
                    servers,
                    secs,
                    rho,
                    link_mbps,
                    guarantee_mbps,
                    offered_per_server,
                    warmup_secs,
                    seed,
                };
                return placement_study(&study, &placement, &out, json);
            }
            let base = DcConfig {
                servers,
                secs,
                rho,
                flows,
                link_mbps,
                guarantee_mbps,
                flooders,
                ..DcConfig::paper(servers, 1.0, seed)
            };
            let cpus = cpu_hosts(&cpu, frame_bytes, &model, core_hz)?;
            datacenter_study(&base, (&loads, &sharing, &cpus), &oc, check_servers, &out, json)
        }
    }
}

fn overcommit_study(study: Study, out: &std::path::Path, json: bool) -> anyhow::Result<()> {
    study.validate()?;
    let findings = overcommit::run(&study);
    let plot = overcommit::plot(&study, &findings, out)?;
    if json {
        let doc = serde_json::json!({"findings": findings, "plot": plot});
        println!("{}", serde_json::to_string_pretty(&doc).expect("serializable"));
    } else {
        print!("{}", overcommit::render(&findings));
        println!("plot: {}", plot.display());
    }
    Ok(())
}

/// The switch cores `--cpu` asks for (none: one run without them).
fn cpu_hosts(
    sharings: &[String],
    frame_bytes: Vec<u32>,
    model_path: &std::path::Path,
    core_hz: Option<f64>,
) -> anyhow::Result<Vec<Option<CpuHost>>> {
    if sharings.is_empty() {
        return Ok(vec![None]);
    }
    let model = slaswitch_config::model_file::read_model(model_path)?.with_context(|| {
        format!("model: {}: no such file (run slaswitch calibrate, or give --model)", model_path.display())
    })?;
    let hz = core_hz.unwrap_or(model.tsc_hz as f64);
    let core = hz * slaswitch_qos::cpu::water_fill::DELIVERABLE_CORE_SHARE;
    sharings
        .iter()
        .map(|s| {
            let host = CpuHost::from_model(&model, core, frame_bytes.clone(), s.parse::<CpuSharing>()?)?;
            host.validate()?;
            Ok(Some(host))
        })
        .collect()
}

/// A load's share of VMs with a dynamic guarantee.
fn dynamic_share(load: &str) -> anyhow::Result<f64> {
    match load {
        "strict" => Ok(0.0),
        "dynamic" => Ok(1.0),
        "mixed" => Ok(0.5),
        other => bail!("loads: '{other}' is not allowed; give strict, dynamic or mixed"),
    }
}

/// Every run of the study, each load with each sharing, core and over-commitment, validated
/// before any runs.
fn datacenter_plan(
    base: &DcConfig,
    (loads, sharings, cpus): (&[String], &[String], &[Option<CpuHost>]),
    ocs: &[f64],
) -> anyhow::Result<Vec<(String, DcConfig)>> {
    if ocs.is_empty() || loads.is_empty() || sharings.is_empty() {
        bail!("oc, loads and sharing: give at least one of each");
    }
    let mut plan = Vec::new();
    for load in loads {
        let share = dynamic_share(load)?;
        for sharing in sharings {
            let sharing: datacenter::Sharing = sharing.parse()?;
            for cpu in cpus {
                for &oc in ocs {
                    let cfg = DcConfig { oc, dynamic_share: share, sharing, cpu: cpu.clone(), ..base.clone() };
                    cfg.validate()?;
                    plan.push((load.clone(), cfg));
                }
            }
        }
    }
    Ok(plan)
}

fn datacenter_study(
    base: &DcConfig,
    (loads, sharings, cpus): (&[String], &[String], &[Option<CpuHost>]),
    ocs: &[f64],
    check_servers: usize,
    out: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    let plan = datacenter_plan(base, (loads, sharings, cpus), ocs)?;
    let bar = indicatif::ProgressBar::new(u64::from(base.secs) * plan.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} simulated seconds, {eta} left")
            .expect("a valid template"),
    );
    let started = Instant::now();
    let check_at = base.secs / 2;
    let (mut runs, mut rows, mut checks, mut core_checks) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (load, cfg)) in plan.iter().enumerate() {
        let core = cfg.cpu.as_ref().map_or(String::new(), |h| format!(" core {:?}", h.sharing));
        bar.set_message(format!("{load} {:?}{core} {}x", cfg.sharing, cfg.oc));
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
        if let Some(host) = &cfg.cpu {
            let run = format!(
                "{load} {} {}x",
                rows.last().and_then(|r: &Row| r.cpu.as_ref()).map_or("", |c| c.sharing.as_str()),
                cfg.oc
            );
            core_checks.extend(
                validate_cpu::check(host, cfg.guarantee_mbps * 1e6, &captured).into_iter().map(|c| (run.clone(), c)),
            );
        }
        runs.push((load.clone(), r));
    }
    bar.finish_and_clear();
    let wall_secs = started.elapsed().as_secs_f64();
    let peak_rss_kib = peak_rss_kib();
    datacenter_report::plots(out, &runs, &rows)?;
    let summary = serde_json::json!({
        "config": base, "rows": rows, "wall_secs": wall_secs, "peak_rss_kib": peak_rss_kib,
        "threads": rayon::current_num_threads(),
        "core_check": core_checks.iter().map(|(run, c)| serde_json::json!({"run": run, "check": c})).collect::<Vec<_>>(),
        "fluid_check": checks.iter().map(|(load, oc, c)| serde_json::json!({"load": load, "oc": oc, "check": c})).collect::<Vec<_>>(),
    });
    let checked: Vec<_> = checks.iter().map(|(_, _, c)| c.clone()).collect();
    let report = format!(
        "# Datacenter simulation (seed 003 Sec. 6.4)\n\nSimulated, not measured: `slaswitch-sim datacenter`, {} servers x {} s, rho {}, seed {}, {} threads, {wall_secs:.1} s in all.\n\n{}\n{}## The fluid step against SoftBw's packets\n\nThe {} busiest servers' egress in second {check_at} of each run, replayed frame by frame (1500-byte frames, a fake clock, 0.1 s of warm-up, 1 s counted).\n\n{}",
        base.servers,
        base.secs,
        base.rho,
        base.seed,
        rayon::current_num_threads(),
        datacenter_report::table(&rows),
        cpu_section(base, cpus, &rows, &core_checks),
        check_servers,
        datacenter_report::check_table(&checked)
    );
    let report_path = out.join("report.md");
    std::fs::write(&report_path, report).with_context(|| report_path.display().to_string())?;
    let text = serde_json::to_string_pretty(&summary).expect("serializable");
    let summary_path = out.join("summary.json");
    std::fs::write(&summary_path, &text).with_context(|| summary_path.display().to_string())?;
    if json {
        println!("{text}");
    } else {
        print!("{}", datacenter_report::table(&rows));
        print!("{}", datacenter_report::cpu_table(&rows));
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
        if !core_checks.is_empty() {
            let worst = core_checks.iter().map(|(_, c)| c.worst_of_core).fold(0.0, f64::max);
            println!(
                "fluid core step against PortScheduler's batches ({} server-seconds): worst {:.2}% of the core",
                core_checks.len(),
                100.0 * worst
            );
        }
        println!("figures and summary.json: {}", out.display());
    }
    Ok(())
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

/// The report's section on the switch cores, when the runs had them.
fn cpu_section(
    base: &DcConfig,
    cpus: &[Option<CpuHost>],
    rows: &[Row],
    checks: &[(String, validate_cpu::CoreCheck)],
) -> String {
    let Some(host) = cpus.iter().flatten().next() else { return String::new() };
    let prices: Vec<String> = host
        .frame_bytes
        .iter()
        .zip(&host.cycles_per_frame)
        .map(|(b, c)| format!("{b}-byte frames {c:.0} cycles"))
        .collect();
    format!(
        "## CPU-bound hosts\n\nEach server's switch core gives its VMs {:.2} G cycles per second; the bandwidth-CPU model prices {} (many flows). Links {} Mbit/s, guarantees {} Mbit/s, {} flooding VM(s) per server (ten times their link's rate every second, as fast as their virtual NICs take frames; the failure figures are of the other VMs). `c2qos`: each VM's guarantee at its frame size as a MIN-MAX cycle allocation, idle cycles and unused allocations shared equally; `c2qos-strict`: the same allocations, never more; `round-robin`: no cycle QoS. Only the sender's core is modelled.\n\n{}\n### The fluid core step against PortScheduler's batches\n\nThe busiest servers' cores in the middle second of each run, replayed batch by batch through `PortScheduler` (C2TB under HBS, as the data plane runs it) on a fake clock: 0.1 s of warm-up, 1 s counted, empty polls {} cycles, rings of {} frames. The fluid form is given the cycles the replay's frames took.\n\n{}\n",
        host.core_cycles_per_sec / 1e9,
        prices.join(", "),
        base.link_mbps,
        base.guarantee_mbps,
        base.flooders,
        datacenter_report::cpu_table(rows),
        validate_cpu::EMPTY_POLL_CYCLES,
        validate_cpu::RING_FRAMES,
        datacenter_report::core_check_table(checks)
    )
}

/// `slaswitch-sim short-flows`: the datacenter's most contended egress links replayed with one
/// VM's short flows, under each link scheduler.
fn short_flow_study(
    base: &DcConfig,
    ocs: &[f64],
    sample: usize,
    short: &ShortFlows,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    if ocs.is_empty() || sample == 0 || short.sizes_bytes.contains(&0) || short.sizes_bytes.is_empty() {
        bail!("oc, sample-servers and sizes: give at least one ratio, one server and sizes above 0");
    }
    let started = Instant::now();
    let mut cells = Vec::new();
    for &oc in ocs {
        let cfg = DcConfig { oc, dynamic_share: 0.0, ..base.clone() };
        cfg.validate()?;
        let (_, captured) = datacenter::run(&cfg, Some((cfg.secs / 2, sample)), &|_| {});
        for (scheduler, flows) in short_flows::study(cfg.link_mbps * 1e6, &captured, short, cfg.seed) {
            cells.push(Cell { oc, scheduler, flows });
        }
    }
    let wall_secs = started.elapsed().as_secs_f64();
    let table = short_flows_report::write(out, base, (sample, short), &cells, wall_secs)?;
    print!("{table}");
    println!("{wall_secs:.1} s; report, summary.json and fct.png: {}", out.display());
    Ok(())
}

fn placement_study(
    study: &PlacementStudy,
    policies: &[String],
    out: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    study.validate()?;
    let policies: Vec<Policy> = policies.iter().map(|p| parse_policy(p)).collect::<Result<_, _>>()?;
    let outcomes: Vec<PlacementOutcome> = policies.iter().map(|p| study.run(p)).collect();
    std::fs::create_dir_all(out)?;
    let summary = serde_json::json!({"study": study, "outcomes": outcomes});
    std::fs::write(out.join("placement.json"), serde_json::to_string_pretty(&summary)?)?;
    let table = placement_study::render(study, &outcomes);
    std::fs::write(out.join("placement.txt"), &table)?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&summary)?),
        false => print!("{table}"),
    }
    Ok(())
}
