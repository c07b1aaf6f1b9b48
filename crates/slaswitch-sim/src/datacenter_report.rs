//! The datacenter study's outputs: a table per over-commitment, seed 003's Figs. 11-13 as
//! PNGs, the packet-level check of the fluid step, and a report that sets them beside the
//! paper's readings.

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;
use slaswitch_plot::{self as plot, Panel, Series};

use crate::datacenter::DcResult;
use crate::validate::FluidCheck;
use crate::SimError;

/// One over-commitment's run, summarized.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The traffic load: "strict", "dynamic" or "mixed".
    pub load: String,
    /// How links were shared: "softbw" or "per-flow".
    pub sharing: String,
    /// Flows per VM, the mix repeated over each server's VMs.
    pub flows: Vec<u32>,
    /// Over-commitment ratio.
    pub oc: f64,
    /// VMs per server.
    pub vms_per_server: usize,
    /// Mean network utilization.
    pub utilization: f64,
    /// Share of strict VMs that failed at least one second.
    pub strict_failed: f64,
    /// Per flow count: the share of those strict VMs that failed.
    pub strict_failed_by_flows: Vec<(u32, f64)>,
    /// Share of strict VM-seconds that failed.
    pub strict_failed_seconds: f64,
    /// Longest failure of a strict VM, seconds.
    pub strict_longest_secs: u32,
    /// Share of dynamic VMs that finished by their deadline.
    pub dynamic_on_time: f64,
    /// Worst completion time over deadline.
    pub dynamic_worst_ratio: f64,
    /// The same among transfers with deadlines of 1 s or more.
    pub dynamic_worst_ratio_1s: f64,
    /// Dynamic VMs still within their deadline at the end (left out).
    pub dynamic_censored: usize,
    /// Wall-clock seconds the run took.
    pub wall_secs: f64,
    /// With CPU-bound hosts: the cores' figures.
    pub cpu: Option<CpuRow>,
}

/// The switch cores' side of a run with CPU-bound hosts.
#[derive(Clone, Debug, Serialize)]
pub struct CpuRow {
    /// How the core was shared: "c2qos" or "round-robin".
    pub sharing: String,
    /// Each VM's frame size, the mix repeated over each server's VMs.
    pub frame_bytes: Vec<u32>,
    /// The guarantees' cycles over the core's (above 1: the core is over-committed).
    pub cycle_commitment: f64,
    /// The cores' mean busy share.
    pub core_utilization: f64,
    /// Per frame size: the share of those strict VMs that failed.
    pub strict_failed_by_frame: Vec<(u32, f64)>,
    /// Of the strict VM-seconds that failed, the share in which the core alone already left
    /// the VM short (the rest: the links).
    pub failed_seconds_at_core: f64,
}

/// A core sharing's name, as `--cpu` spells it.
pub fn cpu_sharing_name(s: crate::datacenter_cpu::CpuSharing) -> &'static str {
    match s {
        crate::datacenter_cpu::CpuSharing::C2qos => "c2qos",
        crate::datacenter_cpu::CpuSharing::C2qosStrict => "c2qos-strict",
        crate::datacenter_cpu::CpuSharing::RoundRobin => "round-robin",
    }
}

impl Row {
    /// How links (and cores, when modelled) were shared, for labels.
    pub fn variant(&self) -> String {
        match &self.cpu {
            Some(c) => format!("{}, core {}", self.sharing, c.sharing),
            None => self.sharing.clone(),
        }
    }

    /// The row of one run.
    pub fn of(load: &str, r: &DcResult, wall_secs: f64) -> Row {
        let cfg = r.config.as_ref().expect("a run's settings");
        Row {
            load: load.to_string(),
            sharing: match cfg.sharing {
                crate::datacenter::Sharing::Softbw => "softbw".into(),
                crate::datacenter::Sharing::PerFlow => "per-flow".into(),
            },
            flows: cfg.flows.clone(),
            oc: cfg.oc,
            vms_per_server: cfg.vms_per_server(),
            utilization: r.mean_utilization(),
            strict_failed: r.strict_failed_share(),
            strict_failed_seconds: r.strict_failed_seconds_share(),
            strict_failed_by_flows: r.strict_failed_by_flows.clone(),
            strict_longest_secs: r.strict_longest_failure_secs(),
            dynamic_on_time: r.dynamic_on_time_share(),
            dynamic_worst_ratio: r.dynamic_worst_ratio(0.0),
            dynamic_worst_ratio_1s: r.dynamic_worst_ratio(1.0),
            dynamic_censored: r.dynamic_censored,
            wall_secs,
            cpu: cfg.cpu.as_ref().map(|h| CpuRow {
                sharing: cpu_sharing_name(h.sharing).into(),
                frame_bytes: h.frame_bytes.clone(),
                cycle_commitment: h.cycle_commitment(cfg.vms_per_server(), cfg.guarantee_mbps * 1e6),
                core_utilization: r.core_utilization.iter().sum::<f64>() / r.core_utilization.len().max(1) as f64,
                strict_failed_by_frame: r.strict_failed_by_frame.clone(),
                failed_seconds_at_core: {
                    let failed: u32 = r.strict_failure_secs.iter().sum();
                    f64::from(r.strict_cpu_failure_secs.iter().sum::<u32>()) / f64::from(failed.max(1))
                },
            }),
        }
    }
}

/// A per-VM mix repeated over each server's VMs, as `1:1:2`.
fn mix(values: &[u32]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(":")
}

/// The table, as text.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| load | sharing | flows | over-commitment | VMs/server | utilization | strict VMs failing | strict VM-seconds failing | longest failure | dynamic on time | worst completion/deadline (all; T >= 1 s) | wall time |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let strict = r.load != "dynamic";
        let dynamic = r.load != "strict";
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1}x | {} | {:.1}% | {} | {} | {} | {} | {} | {:.1} s |",
            r.load,
            r.sharing,
            mix(&r.flows),
            r.oc,
            r.vms_per_server,
            100.0 * r.utilization,
            if !strict {
                "-".into()
            } else if r.strict_failed_by_flows.len() > 1 {
                let each: Vec<String> = r
                    .strict_failed_by_flows
                    .iter()
                    .map(|(n, f)| format!("{n} flow{}: {:.1}%", if *n == 1 { "" } else { "s" }, 100.0 * f))
                    .collect();
                format!("{:.1}% ({})", 100.0 * r.strict_failed, each.join(", "))
            } else {
                format!("{:.1}%", 100.0 * r.strict_failed)
            },
            if strict { format!("{:.2}%", 100.0 * r.strict_failed_seconds) } else { "-".into() },
            if strict { format!("{} s", r.strict_longest_secs) } else { "-".into() },
            if dynamic { format!("{:.1}%", 100.0 * r.dynamic_on_time) } else { "-".into() },
            if dynamic {
                format!("{:.2}x; {:.2}x", r.dynamic_worst_ratio, r.dynamic_worst_ratio_1s)
            } else {
                "-".into()
            },
            r.wall_secs
        );
    }
    s
}

/// The switch cores' table for runs with CPU-bound hosts (empty when there are none).
pub fn cpu_table(rows: &[Row]) -> String {
    let mut s = String::new();
    for (r, c) in rows.iter().filter_map(|r| r.cpu.as_ref().map(|c| (r, c))) {
        if s.is_empty() {
            s.push_str("| load | core shared by | frames | link over-commitment | core over-commitment | link utilization | core utilization | strict VMs failing | by frame size | failed VM-seconds where the core left the VM short |\n|---|---|---|---|---|---|---|---|---|---|\n");
        }
        let by: Vec<String> =
            c.strict_failed_by_frame.iter().map(|(b, f)| format!("{b} B: {:.1}%", 100.0 * f)).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1}x | {:.2}x | {:.1}% | {:.1}% | {:.1}% | {} | {:.0}% |",
            r.load,
            c.sharing,
            mix(&c.frame_bytes),
            r.oc,
            c.cycle_commitment,
            100.0 * r.utilization,
            100.0 * c.core_utilization,
            100.0 * r.strict_failed,
            by.join(", "),
            100.0 * c.failed_seconds_at_core
        );
    }
    s
}

/// Points of the empirical CDF of `values` (x, share at or below x).
fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    v.iter().enumerate().map(|(i, &x)| (x, (i + 1) as f64 / n)).collect()
}

/// Writes fig11.png, fig12.png and fig13.png into `dir`: utilization per load, completion
/// over deadline from the runs with dynamic guarantees, failure time from those with strict.
pub fn plots(dir: &Path, runs: &[(String, DcResult)], rows: &[Row]) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(SimError::write(dir))?;
    let mut kinds: Vec<(&str, String)> = rows.iter().map(|r| (r.load.as_str(), r.variant())).collect();
    kinds.dedup();
    let mut util: Vec<Series> = kinds
        .iter()
        .map(|(l, v)| Series {
            label: format!("{l}, {v} (simulated)"),
            points: rows
                .iter()
                .filter(|r| r.load == *l && r.variant() == *v)
                .map(|r| (r.oc, 100.0 * r.utilization))
                .collect(),
        })
        .collect();
    util.push(Series { label: "paper (1x, 4x)".into(), points: vec![(1.0, 9.5), (4.0, 37.4)] });
    plot::lines(
        &dir.join("fig11.png"),
        "Seed 003 Fig. 11: network utilization against over-commitment (simulated)",
        "over-commitment ratio",
        "mean utilization (%)",
        &[Panel { title: "all access links, every second".into(), series: util, markers: Vec::new() }],
    )?;
    let per_oc = |f: &dyn Fn(&DcResult) -> Vec<f64>| -> Vec<Series> {
        runs.iter()
            .filter(|(_, r)| !f(r).is_empty())
            .map(|(load, r)| Series {
                label: format!(
                    "{load} {}{}{:.0}x",
                    match r.config.as_ref().map(|c| c.sharing) {
                        Some(crate::datacenter::Sharing::PerFlow) => "per-flow ",
                        _ => "",
                    },
                    r.config
                        .as_ref()
                        .and_then(|c| c.cpu.as_ref())
                        .map_or(String::new(), |h| format!("core {} ", cpu_sharing_name(h.sharing))),
                    r.config.as_ref().map_or(0.0, |c| c.oc)
                ),
                points: cdf(&f(r)),
            })
            .collect()
    };
    plot::lines(
        &dir.join("fig12.png"),
        "Seed 003 Fig. 12: dynamic guarantees, completion time over deadline (CDF, simulated)",
        "completion time / deadline",
        "share of transfers",
        &[Panel {
            title: "transfers finished or past their deadline".into(),
            series: per_oc(&|r| r.dynamic_completion_ratio.iter().map(|x| x.min(5.0)).collect()),
            markers: vec![1.0],
        }],
    )?;
    plot::lines(
        &dir.join("fig13.png"),
        "Seed 003 Fig. 13: strict guarantees, seconds of failure per VM (CDF, simulated)",
        "seconds with less than min(demand, guarantee)",
        "share of strict VMs",
        &[Panel {
            title: "every strict VM".into(),
            series: per_oc(&|r| r.strict_failure_secs.iter().map(|&s| f64::from(s)).collect()),
            markers: Vec::new(),
        }],
    )?;
    core_plot(dir, rows)
}

/// Writes core.png when the runs had CPU-bound hosts: the share of strict VMs that failed
/// against over-commitment, per core sharing and frame size.
fn core_plot(dir: &Path, rows: &[Row]) -> Result<(), SimError> {
    let mut series: Vec<Series> = Vec::new();
    for (r, c) in rows.iter().filter_map(|r| r.cpu.as_ref().map(|c| (r, c))) {
        for &(bytes, failed) in &c.strict_failed_by_frame {
            let label = format!("{}, core {}, {bytes}-byte VMs", r.load, c.sharing);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((r.oc, 100.0 * failed)),
                None => series.push(Series { label, points: vec![(r.oc, 100.0 * failed)] }),
            }
        }
    }
    if series.is_empty() {
        return Ok(());
    }
    plot::lines(
        &dir.join("core.png"),
        "CPU-bound hosts: strict VMs that failed, against over-commitment (simulated)",
        "over-commitment ratio (links)",
        "strict VMs failing at least one second (%)",
        &[Panel { title: "each server's switch core in front of its link".into(), series, markers: Vec::new() }],
    )?;
    Ok(())
}

/// The packet check, as text.
pub fn check_table(checks: &[FluidCheck]) -> String {
    let mut s = String::from("| server | VMs | offered / link | worst |packet - fluid| (share of link) | worst relative (VMs >= 5% of link) |\n|---|---|---|---|---|\n");
    for c in checks {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2}% | {:.2}% |",
            c.server,
            c.vms.len(),
            c.offered_of_link,
            100.0 * c.worst_of_link,
            100.0 * c.worst_relative
        );
    }
    s
}

/// The fluid core step against the scheduler's batches: one row per (run, server).
pub fn core_check_table(checks: &[(String, crate::validate_cpu::CoreCheck)]) -> String {
    let mut s = String::from("| run | server | VMs | offered / core | frames' share of the whole core (replay) | worst |batches - fluid| (share of core) |\n|---|---|---|---|---|---|\n");
    for (run, c) in checks {
        let _ = writeln!(
            s,
            "| {run} | {} | {} | {:.2} | {:.1}% | {:.2}% |",
            c.server,
            c.vms.len(),
            c.offered_of_core,
            100.0 * c.frames_of_whole_core,
            100.0 * c.worst_of_core
        );
    }
    s
}
