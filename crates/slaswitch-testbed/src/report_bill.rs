//! The bill of a run with `[cluster]` (seed 003 Sec. 3.3-4): per VM, its cycles grouped into
//! the phases it was billed under (its guarantee's price, then fairness's once a dynamic
//! guarantee's S was sent or its T ran out), beside what the switch's scheduler had in force,
//! and for a dynamic guarantee when S was sent against T.

use std::fmt::Write;

use serde_json::Value;
use slaswitch_qos::egress::softbw::Guarantee;

use crate::scenario::Scenario;

/// One phase: consecutive cycles billed under the same guarantee.
#[derive(Debug, Default, PartialEq)]
struct Phase {
    guaranteed: bool,
    from_secs: f64,
    to_secs: f64,
    secs: f64,
    bytes: f64,
    charge_guaranteed: f64,
    charge_above: f64,
}

/// A VM's rows (in cycle order) as phases; times from `start_unix_secs`.
fn phases(rows: &[&Value], start_unix_secs: f64) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        let guaranteed = f("guarantee_bps") > 0.0;
        let end = f("cycle_end_unix_ms") / 1000.0 - start_unix_secs;
        if out.last().is_none_or(|p| p.guaranteed != guaranteed) {
            out.push(Phase { guaranteed, from_secs: end - f("secs"), ..Phase::default() });
        }
        let p = out.last_mut().expect("pushed");
        p.to_secs = end;
        p.secs += f("secs");
        p.bytes += f("bytes");
        p.charge_guaranteed += f("charge_guaranteed");
        p.charge_above += f("charge_above");
    }
    out
}

/// Seconds from the first cycle until `total_bytes` were sent, if they were.
fn size_sent_after(rows: &[&Value], total_bytes: f64) -> Option<f64> {
    let first = rows.first()?;
    let begin = first["cycle_end_unix_ms"].as_f64()? / 1000.0 - first["secs"].as_f64()?;
    let mut sent = 0.0;
    for r in rows {
        sent += r["bytes"].as_f64().unwrap_or(0.0);
        if sent >= total_bytes {
            return Some(r["cycle_end_unix_ms"].as_f64()? / 1000.0 - begin);
        }
    }
    None
}

/// The bill section, when some run has a bill.
pub fn write_bill(md: &mut String, s: &Scenario, run: &Value) {
    let runs: Vec<&Value> = run["runs"].as_array().into_iter().flatten().filter(|r| r["bill"].is_array()).collect();
    if runs.is_empty() {
        return;
    }
    let tenant = s.cluster.as_ref().map_or("-", |c| c.tenant.as_str());
    let _ = writeln!(
        md,
        "## The bill\n\nWhat `slaswitch-master` billed tenant `{tenant}` per cycle (one usage report a second from slaswitchd's agent), grouped into phases: cycles priced at the guarantee, then at fairness, from the purchase to the end of the traffic. *Switch disagrees* counts cycles in which the guarantee the switch's scheduler had in force at the cycle's end (its report) was not the one billed. Times are seconds from the start of the run's traffic.\n"
    );
    let _ = writeln!(md, "| run | VM | phase | from s | to s | Mbyte | Mbit/s | charge at guarantee | above | total | switch disagrees |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut sizes = Vec::new();
    for r in &runs {
        let label = r["switch"].as_str().unwrap_or("?");
        let start = r["bill_start_unix_secs"].as_f64().unwrap_or(0.0);
        let rows = r["bill"].as_array().expect("filtered");
        let vms: std::collections::BTreeSet<&str> = rows.iter().filter_map(|x| x["vm"].as_str()).collect();
        for vm in vms {
            // The run's cycles: from the purchase to the end of the traffic.
            let in_run =
                |x: &&Value| x["cycle_end_unix_ms"].as_f64().unwrap_or(0.0) / 1000.0 <= start + s.duration_secs + 1.0;
            let mut mine: Vec<&Value> = rows.iter().filter(|x| x["vm"] == vm).filter(in_run).collect();
            mine.sort_by_key(|x| x["cycle_end_unix_ms"].as_u64().unwrap_or(0));
            let disagree = mine
                .iter()
                .filter(|x| (x["guarantee_bps"].as_f64() > Some(0.0)) != (x["in_force_bps"].as_f64() > Some(0.0)))
                .count();
            for (i, p) in phases(&mine, start).iter().enumerate() {
                let name = if p.guaranteed { mine[0]["guarantee"].as_str().unwrap_or("guarantee") } else { "fairness" };
                let mbps = if p.secs > 0.0 { p.bytes * 8.0 / p.secs / 1e6 } else { 0.0 };
                let total = p.charge_guaranteed + p.charge_above;
                let dis = if i == 0 { format!("{disagree} of {}", mine.len()) } else { String::new() };
                let _ = writeln!(
                    md,
                    "| {label} | {vm} | {name} | {:.1} | {:.1} | {:.1} | {mbps:.1} | {:.4} | {:.4} | {total:.4} | {dis} |",
                    p.from_secs,
                    p.to_secs,
                    p.bytes / 1e6,
                    p.charge_guaranteed,
                    p.charge_above
                );
            }
            let bought = mine[0]["guarantee"].as_str().unwrap_or("");
            if let Ok(Guarantee::Dynamic { total_bytes, duration_ns }) =
                slaswitch_config::link_policy::parse_guarantee(bought)
            {
                let t = duration_ns as f64 / 1e9;
                let line = match size_sent_after(&mine, total_bytes as f64) {
                    Some(at) if at <= t + 1.0 => format!("{label}, {vm}: S = {:.0} Mbyte sent {at:.0} s after it was bought, within T = {t:.0} s (met, to the cycle)", total_bytes as f64 / 1e6),
                    Some(at) => format!("{label}, {vm}: S = {:.0} Mbyte sent only {at:.0} s after it was bought, T = {t:.0} s (missed)", total_bytes as f64 / 1e6),
                    None => format!("{label}, {vm}: S = {:.0} Mbyte never sent in the run (T = {t:.0} s)", total_bytes as f64 / 1e6),
                };
                sizes.push(line);
            }
        }
    }
    md.push('\n');
    for line in sizes {
        let _ = writeln!(md, "- {line}");
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(end_s: u64, bytes: u64, billed_bps: u64, in_force_bps: u64) -> Value {
        json!({"vm": "x", "cycle_end_unix_ms": end_s * 1000, "secs": 1.0, "bytes": bytes, "guarantee": "dynamic:300M,10",
               "guarantee_bps": billed_bps, "in_force_bps": in_force_bps, "charge_guaranteed": 0.5, "charge_above": 0.25})
    }

    #[test]
    fn cycles_group_into_the_phases_they_were_billed_under() {
        let rows = [
            row(101, 100_000_000, 240, 240),
            row(102, 100_000_000, 240, 240),
            row(103, 100_000_000, 240, 0),
            row(104, 50, 0, 0),
        ];
        let refs: Vec<&Value> = rows.iter().collect();
        let p = phases(&refs, 100.0);
        assert_eq!(p.len(), 2);
        assert!(p[0].guaranteed && !p[1].guaranteed);
        assert_eq!((p[0].from_secs, p[0].to_secs, p[0].bytes), (0.0, 3.0, 300_000_000.0));
        assert_eq!((p[1].from_secs, p[1].to_secs, p[1].secs), (3.0, 4.0, 1.0));
        assert_eq!(p[0].charge_guaranteed, 1.5);
        assert_eq!(size_sent_after(&refs, 300_000_000.0), Some(3.0));
        assert_eq!(size_sent_after(&refs, 400_000_000.0), None);
    }
}
