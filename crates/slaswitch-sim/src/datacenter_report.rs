//! The datacenter study's outputs: a table per over-commitment, seed 003's Figs. 11-13 as
//! PNGs, the packet-level check of the fluid step, and a report that sets them beside the
//! paper's readings.

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;
use slaswitch_testbed::plot::{self, Panel, Series};

use crate::datacenter::DcResult;
use crate::validate::FluidCheck;

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
}

impl Row {
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
        }
    }
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
            r.flows.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(":"),
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

/// Points of the empirical CDF of `values` (x, share at or below x).
fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    v.iter().enumerate().map(|(i, &x)| (x, (i + 1) as f64 / n)).collect()
}

/// Writes fig11.png, fig12.png and fig13.png into `dir`: utilization per load, completion
/// over deadline from the runs with dynamic guarantees, failure time from those with strict.
pub fn plots(dir: &Path, runs: &[(String, DcResult)], rows: &[Row]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut kinds: Vec<(&str, &str)> = rows.iter().map(|r| (r.load.as_str(), r.sharing.as_str())).collect();
    kinds.dedup();
    let mut util: Vec<Series> = kinds
        .iter()
        .map(|&(l, sh)| Series {
            label: format!("{l}, {sh} (simulated)"),
            points: rows
                .iter()
                .filter(|r| r.load == l && r.sharing == sh)
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
                    "{load} {}{:.0}x",
                    match r.config.as_ref().map(|c| c.sharing) {
                        Some(crate::datacenter::Sharing::PerFlow) => "per-flow ",
                        _ => "",
                    },
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
