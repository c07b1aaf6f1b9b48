//! The short-flow study's outputs: a completion-time table per over-commitment and scheduler,
//! a CDF at the largest over-commitment, `report.md` and `summary.json`.

use std::fmt::Write;
use std::path::Path;

use slaswitch_plot::{self as plot, Panel, Series};

use crate::datacenter::DcConfig;
use crate::short_flows::{self, FlowTime, Scheduler, ShortFlows};
use crate::SimError;

/// One scheduler's short flows at one over-commitment.
pub struct Cell {
    /// The over-commitment ratio.
    pub oc: f64,
    /// The link scheduler.
    pub scheduler: Scheduler,
    /// Every counted flow.
    pub flows: Vec<FlowTime>,
}

/// Median and 99th-percentile completion times per cell and size, as a Markdown table.
pub fn table(cells: &[Cell], link_bps: f64) -> String {
    let mut s = String::from(
        "| over-commitment | scheduler | size | flows | lost | median | p99 | alone on the link |\n|---|---|---|---|---|---|---|---|\n",
    );
    for c in cells {
        for st in short_flows::stats(&c.flows, link_bps) {
            let _ = writeln!(
                s,
                "| {:.0}x | {} | {} KB | {} | {:.1}% | {:.0} us | {:.0} us | {:.0} us |",
                c.oc,
                c.scheduler.name(),
                st.size_bytes / 1024,
                st.flows,
                100.0 * st.lost_share,
                st.median_us,
                st.p99_us,
                st.alone_us
            );
        }
    }
    s
}

/// fct.png: the completion times' CDF per scheduler at the largest over-commitment.
fn cdf_plot(out: &Path, cells: &[Cell]) -> Result<(), SimError> {
    let last = cells.iter().map(|c| c.oc).fold(f64::MIN, f64::max);
    let series = cells
        .iter()
        .filter(|c| c.oc == last)
        .map(|c| {
            let mut us: Vec<f64> = c.flows.iter().filter_map(|f| f.completion_ns).map(|ns| ns as f64 / 1e3).collect();
            us.sort_by(f64::total_cmp);
            let n = c.flows.len().max(1) as f64;
            let points = us.iter().enumerate().map(|(i, &x)| (x.max(1.0).log10(), (i + 1) as f64 / n)).collect();
            Series { label: c.scheduler.name().into(), points }
        })
        .collect();
    plot::lines(
        &out.join("fct.png"),
        &format!("Short flows on the most contended links at {last:.0}x over-commitment (simulated)"),
        "completion time, log10 of microseconds",
        "share of short flows",
        &[Panel { title: "every short flow (lost ones never reach 1)".into(), series, markers: Vec::new() }],
    )?;
    Ok(())
}

/// Writes fct.png, report.md and summary.json into `out`; returns the table.
pub fn write(
    out: &Path,
    base: &DcConfig,
    (sample, short): (usize, &ShortFlows),
    cells: &[Cell],
    wall_secs: f64,
) -> Result<String, SimError> {
    std::fs::create_dir_all(out).map_err(SimError::write(out))?;
    let link_bps = base.link_mbps * 1e6;
    cdf_plot(out, cells)?;
    let table = table(cells, link_bps);
    let report = format!(
        "# Short flows at datacenter scale (seed 003 Fig. 7 on Sec. 6.4's links)\n\nSimulated, not measured: `slaswitch-sim short-flows`, {} servers, rho {}, seed {}. In second {} of each strict-load run the {sample} servers whose VMs offered the most are replayed frame by frame for {} s on a fake clock: their first VM sends short flows of {:?} bytes (exponential gaps, mean {} ms; a flow's frames are queued on arrival), the others what the simulation had them offer, through each link scheduler of the data plane. Queues of {} frames; a flow that loses a frame is lost. {wall_secs:.1} s in all.\n\n{table}\n![completion times](fct.png)\n",
        base.servers,
        base.rho,
        base.seed,
        base.secs / 2,
        short_flows::MEASURE_NS as f64 / 1e9,
        short.sizes_bytes,
        short.mean_interval_ns as f64 / 1e6,
        short_flows::QUEUE_FRAMES
    );
    let report_path = out.join("report.md");
    std::fs::write(&report_path, &report).map_err(SimError::write(&report_path))?;
    let rows: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| serde_json::json!({"oc": c.oc, "scheduler": c.scheduler.name(), "stats": short_flows::stats(&c.flows, link_bps)}))
        .collect();
    let summary = serde_json::json!({"config": base, "short": short, "sample_servers": sample, "rows": rows, "wall_secs": wall_secs});
    let text = serde_json::to_string_pretty(&summary).expect("serializable");
    let summary_path = out.join("summary.json");
    std::fs::write(&summary_path, &text).map_err(SimError::write(&summary_path))?;
    Ok(table)
}
