//! Samples: one row per (switch, step, second, source, subject, metric), in `samples.csv`.
//! Sources: `sink` (what the uplink's sink received from each VM, and the one-way latency),
//! `sent` (what each VM put on its ring), `switch` (the switch's own per-port and per-PMD
//! figures over the interval).

use anyhow::anyhow;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::driver::Reading;

/// One figure at one time of one run: a row of `samples.csv`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The configuration (`slaswitch`, `slaswitch/c2tb`, ...).
    pub switch: String,
    /// The step (sweep value), or `run`.
    pub step: String,
    /// Seconds since the VMs started.
    pub t_secs: f64,
    /// Where it comes from: `sink`, `gen`, `switch`, `app`, `host`.
    pub source: String,
    /// What it is about (a VM, `pmd0`, a core).
    pub subject: String,
    /// Which figure.
    pub metric: String,
    /// Its value.
    pub value: f64,
}

/// The header row of `samples.csv`.
pub const HEADER: &str = "switch,step,t_secs,source,subject,metric,value";

/// Samples as CSV with its header, times to the millisecond.
pub fn to_csv(samples: &[Sample]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for s in samples {
        let row = Sample { t_secs: (s.t_secs * 1000.0).round() / 1000.0, ..s.clone() };
        w.serialize(row).expect("CSV into memory");
    }
    let text = String::from_utf8(w.into_inner().expect("CSV into memory")).expect("UTF-8 fields");
    if text.is_empty() {
        format!("{HEADER}\n")
    } else {
        text
    }
}

/// Reads samples from CSV.
pub fn from_csv(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| anyhow!("samples.csv: {e}"))?;
    if header.iter().collect::<Vec<_>>().join(",") != HEADER {
        return Err(anyhow!("not a samples file (first line should be '{HEADER}')"));
    }
    reader.deserialize().enumerate().map(|(i, row)| row.map_err(|e| anyhow!("samples.csv:{}: {e}", i + 2))).collect()
}

/// Reads a `samples.csv`.
pub fn load(path: &Path) -> anyhow::Result<Vec<Sample>> {
    from_csv(&std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?)
}

/// Samples from the tenant's JSON output (sender and sink records), timed from its start.
pub fn from_tenant(doc: &Value, switch: &str, step: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    let mk = |t: f64, source: &str, subject: &str, metric: &str, value: f64| Sample {
        switch: switch.into(),
        step: step.into(),
        t_secs: t,
        source: source.into(),
        subject: subject.into(),
        metric: metric.into(),
        value,
    };
    for r in doc["records"].as_array().into_iter().flatten() {
        let (t, vm) = (r["t_secs"].as_f64().unwrap_or(0.0), r["vm"].as_str().unwrap_or("?"));
        for m in ["mbps", "kpps", "tx_ring_full"] {
            if let Some(v) = r[m].as_f64() {
                out.push(mk(t, "sent", vm, m, v));
            }
        }
    }
    for r in doc["sink_records"].as_array().into_iter().flatten() {
        let (t, vm) = (r["t_secs"].as_f64().unwrap_or(0.0), r["source"].as_str().unwrap_or("?"));
        for m in ["mbps", "kpps", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_max_us", "latency_samples"] {
            if let Some(v) = r[m].as_f64() {
                out.push(mk(t, "sink", vm, m, v));
            }
        }
    }
    out
}

/// Per-interval figures from consecutive switch readings taken at `times` (seconds from the
/// tenant's start). A port's share of the PMD is its busy cycles over all PMD cycles of the
/// interval divided among the PMDs.
pub fn from_readings(times: &[f64], readings: &[Vec<Reading>], switch: &str, step: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for i in 1..readings.len().min(times.len()) {
        let dt = times[i] - times[i - 1];
        if dt <= 0.0 || times[i] <= 0.0 {
            continue;
        }
        let prev: BTreeMap<(&str, &str), f64> = readings[i - 1]
            .iter()
            .filter(|r| r.counter)
            .map(|r| ((r.subject.as_str(), r.metric.as_str()), r.value))
            .collect();
        let delta = |subject: &str, metric: &str| -> Option<f64> {
            let now = readings[i].iter().find(|r| r.counter && r.subject == subject && r.metric == metric)?.value;
            Some((now - prev.get(&(subject, metric)).copied()?).max(0.0))
        };
        let mut push = |subject: &str, metric: &str, value: f64| {
            out.push(Sample {
                switch: switch.into(),
                step: step.into(),
                t_secs: times[i],
                source: "switch".into(),
                subject: subject.into(),
                metric: metric.into(),
                value,
            })
        };
        let pmds: Vec<&str> = readings[i]
            .iter()
            .filter(|r| r.metric == "idle_cycles" && r.subject.starts_with("pmd"))
            .map(|r| r.subject.as_str())
            .collect();
        let mut pmd_cycles = 0.0;
        for pmd in &pmds {
            if let (Some(b), Some(idle)) = (delta(pmd, "busy_cycles"), delta(pmd, "idle_cycles")) {
                pmd_cycles += b + idle;
                if b + idle > 0.0 {
                    push(pmd, "busy_pct", 100.0 * b / (b + idle));
                }
                // Time the PMD thread lost its core (slaswitch: stages and idle spells longer
                // than its stall threshold), as a share of the interval.
                if let Some(stalled) = delta(pmd, "stalled_cycles") {
                    push(pmd, "stalled_pct", 100.0 * stalled / (b + idle + stalled).max(1.0));
                }
                if let Some(p) = delta(pmd, "packets").filter(|&p| p > 0.0) {
                    push(pmd, "cycles_per_packet", b / p);
                    // Where the PMD's lookups ended (OVS: EMC, SMC, megaflow cache, upcall).
                    for m in ["emc_hits", "smc_hits", "megaflow_hits", "upcalls"] {
                        if let Some(h) = delta(pmd, m) {
                            push(pmd, &format!("{m}_pct"), 100.0 * h / p);
                        }
                    }
                }
            }
        }
        let ports: Vec<&str> = {
            let mut v: Vec<&str> =
                readings[i].iter().filter(|r| r.metric == "rx_packets").map(|r| r.subject.as_str()).collect();
            v.dedup();
            v
        };
        for port in ports {
            let rx = delta(port, "rx_packets");
            if let Some(p) = rx {
                push(port, "rx_kpps", p / dt / 1e3);
            }
            if let Some(b) = delta(port, "rx_bytes") {
                push(port, "rx_mbps", b * 8.0 / dt / 1e6);
            }
            if let Some(d) = delta(port, "policer_drops") {
                push(port, "policed_kpps", d / dt / 1e3);
            }
            if let Some(d) = delta(port, "tx_dropped") {
                push(port, "tx_dropped_kpps", d / dt / 1e3);
            }
            // What the model's drift compensation predicts a port's cost from, beside its size.
            if let (Some(hits), Some(misses)) = (delta(port, "emc_hits"), delta(port, "emc_misses")) {
                if hits + misses > 0.0 {
                    push(port, "emc_miss_pct", 100.0 * misses / (hits + misses));
                }
            }
            if let Some(busy) = delta(port, "busy_cycles") {
                if pmd_cycles > 0.0 {
                    push(port, "pmd_share_pct", 100.0 * busy * pmds.len() as f64 / pmd_cycles);
                }
                if let Some(p) = rx.filter(|&p| p > 0.0) {
                    push(port, "cycles_per_packet", busy / p);
                }
            }
        }
        for r in readings[i].iter().filter(|r| !r.counter) {
            push(&r.subject, &r.metric, r.value);
        }
        // Each latency SLO's seconds judged and missed in the interval, by cause.
        for r in readings[i].iter().filter(|r| r.counter && r.metric.starts_with("slo_")) {
            if let Some(d) = delta(&r.subject, &r.metric) {
                push(&r.subject, &r.metric, d);
            }
        }
        // The hypervisor's steal from each core (host_steal::readings).
        for r in readings[i].iter().filter(|r| r.counter && r.metric == crate::host_steal::STEAL_TICKS) {
            if let (Some(steal), Some(ticks)) =
                (delta(&r.subject, crate::host_steal::STEAL_TICKS), delta(&r.subject, crate::host_steal::TICKS))
            {
                if ticks > 0.0 {
                    out.push(Sample {
                        switch: switch.into(),
                        step: step.into(),
                        t_secs: times[i],
                        source: "host".into(),
                        subject: r.subject.clone(),
                        metric: "steal_pct".into(),
                        value: 100.0 * steal / ticks,
                    });
                }
            }
        }
    }
    out
}

/// Values of one series, ordered by time.
pub fn series(
    samples: &[Sample],
    switch: &str,
    step: &str,
    source: &str,
    subject: &str,
    metric: &str,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| {
            s.switch == switch && s.step == step && s.source == source && s.subject == subject && s.metric == metric
        })
        .map(|s| (s.t_secs, s.value))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Mean of a series over the window `[from, to)` of its time stamps (end of each interval).
pub fn mean_in(series: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    let v: Vec<f64> = series.iter().filter(|(t, _)| *t > from && *t <= to).map(|(_, v)| *v).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_steal_counters_become_a_share_per_interval() {
        let at = |steal: f64, ticks: f64| {
            vec![
                Reading::counter("cpu0", crate::host_steal::STEAL_TICKS, steal),
                Reading::counter("cpu0", crate::host_steal::TICKS, ticks),
            ]
        };
        let readings = vec![at(10.0, 1000.0), at(10.0, 1100.0), at(40.0, 1200.0)];
        let got: Vec<(f64, f64)> = from_readings(&[0.0, 1.0, 2.0], &readings, "sw", "run")
            .into_iter()
            .filter(|s| s.source == "host" && s.subject == "cpu0" && s.metric == "steal_pct")
            .map(|s| (s.t_secs, s.value))
            .collect();
        assert_eq!(got, vec![(1.0, 0.0), (2.0, 30.0)]);
    }

    #[test]
    fn exact_match_cache_counters_become_a_miss_share_per_port() {
        let at = |hits: f64, misses: f64| {
            vec![
                Reading::counter("v1", "rx_packets", hits + misses),
                Reading::counter("v1", "emc_hits", hits),
                Reading::counter("v1", "emc_misses", misses),
            ]
        };
        // The second interval forwarded nothing: no share rather than 0 or NaN.
        let readings = vec![at(0.0, 0.0), at(300.0, 100.0), at(300.0, 100.0)];
        let got: Vec<(f64, f64)> = from_readings(&[0.0, 1.0, 2.0], &readings, "sw", "run")
            .into_iter()
            .filter(|s| s.subject == "v1" && s.metric == "emc_miss_pct")
            .map(|s| (s.t_secs, s.value))
            .collect();
        assert_eq!(got, vec![(1.0, 25.0)]);
    }
}
