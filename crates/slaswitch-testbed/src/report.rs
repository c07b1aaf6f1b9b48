//! `slaswitch experiment report DIR`: the Markdown report and its plots, from what a run
//! recorded (`scenario.toml`, `run.json`, `samples.csv`). Regenerating a report never reruns
//! anything, so a report can be rebuilt (or its format improved) from old data.

use anyhow::anyhow;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

mod recovery;

use crate::samples::{self, mean_in, series, Sample};
use crate::scenario::{Headline, HeadlineType, Scenario, Step};
use slaswitch_plot::{self as plot, Panel, Series};

/// Times at which some VM's phase starts or ends, or a setting changes, inside the run.
pub fn phase_boundaries(s: &Scenario) -> Vec<f64> {
    let mut b: Vec<f64> = Vec::new();
    for step in s.steps().iter().take(1) {
        for vm in &step.vms {
            for p in &vm.phases {
                for t in [p.start_secs, p.end_secs()] {
                    if t > 0.0 && t < s.duration_secs && !b.iter().any(|x| (x - t).abs() < 1e-9) {
                        b.push(t);
                    }
                }
            }
        }
    }
    for c in &s.changes {
        if !b.iter().any(|x| (x - c.at_secs).abs() < 1e-9) {
            b.push(c.at_secs);
        }
    }
    b.sort_by(f64::total_cmp);
    b
}

/// Windows between phase boundaries, each without its first second (the change settling).
pub fn windows(s: &Scenario) -> Vec<(f64, f64)> {
    let mut edges = vec![0.0];
    edges.extend(phase_boundaries(s));
    edges.push(s.duration_secs);
    edges.windows(2).map(|w| if w[1] - w[0] > 2.0 { (w[0] + 1.0, w[1]) } else { (w[0], w[1]) }).collect()
}

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

/// The label of one configuration's run in round `round` of `rounds` (`--rounds`).
pub fn round_label(label: &str, round: usize, rounds: usize) -> String {
    if rounds > 1 {
        format!("{label} #{round}")
    } else {
        label.to_string()
    }
}

/// The configuration a run label belongs to: the label without its ` #k` round.
fn base_label(label: &str) -> &str {
    match label.rsplit_once(" #") {
        Some((base, round)) if round.parse::<usize>().is_ok() => base,
        _ => label,
    }
}

/// Per headline, per configuration in order of first appearance: the median, smallest and
/// largest value over its rounds, and how many rounds gave a value.
type OverRounds = Vec<(String, Vec<(String, Option<f64>, Option<f64>, Option<f64>, usize)>)>;

/// Per headline: (label, per switch: (switch, value, explanation)).
pub type Headlines = Vec<(String, Vec<(String, Option<f64>, String)>)>;

fn over_rounds(heads: &Headlines) -> OverRounds {
    heads
        .iter()
        .map(|(label, values)| {
            let mut bases: Vec<&str> = Vec::new();
            for (sw, _, _) in values {
                if !bases.contains(&base_label(sw)) {
                    bases.push(base_label(sw));
                }
            }
            let per_base = bases
                .iter()
                .map(|&b| {
                    let mut got: Vec<f64> =
                        values.iter().filter(|(sw, _, _)| base_label(sw) == b).filter_map(|(_, v, _)| *v).collect();
                    got.sort_by(f64::total_cmp);
                    // An even count takes the middle two's mean: with two rounds, their midpoint.
                    let n = got.len();
                    let mid =
                        (n > 0).then(|| if n % 2 == 1 { got[n / 2] } else { (got[n / 2 - 1] + got[n / 2]) / 2.0 });
                    (b.to_string(), mid, got.first().copied(), got.last().copied(), n)
                })
                .collect();
            (label.clone(), per_base)
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// What the uplink received from `vm` (`metric` "mbps" or "kpps"): the sink's count, or with a
/// null uplink the switch's count of what it forwarded.
pub fn received(s: &Scenario, samples: &[Sample], sw: &str, step: &str, vm: &str, metric: &str) -> Vec<(f64, f64)> {
    let (source, prefix) = s.received_source();
    series(samples, sw, step, source, vm, &format!("{prefix}{metric}"))
}

/// The sample of `series` in `[from, to)` farthest from `target`: (time, value).
fn farthest_in(series: &[(f64, f64)], from: f64, to: f64, target: f64) -> Option<(f64, f64)> {
    series
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .copied()
        .max_by(|a, b| (a.1 - target).abs().total_cmp(&(b.1 - target).abs()))
}

/// For a per-second figure at `t_secs`: when a PMD thread lost its core in that second (the
/// hypervisor stole the vCPU, or the kernel ran something else on it), says how much: no
/// switch forwards frames while its core is taken.
fn stall_note(s: &Scenario, samples: &[Sample], sw: &str, step: &str, t_secs: f64) -> String {
    let at = |source: &str, subject: &str, metric: &str| {
        series(samples, sw, step, source, subject, metric).iter().find(|(t, _)| (t - t_secs).abs() < 0.5).map(|p| p.1)
    };
    let lost: Vec<String> = s
        .host
        .pmd_cores
        .iter()
        .filter_map(|core| {
            let stolen = at("host", &format!("cpu{core}"), "steal_pct").filter(|p| *p >= 0.5);
            let stalled = at("switch", &format!("pmd{core}"), "stalled_pct").filter(|p| *p >= 0.05);
            let parts: Vec<String> = [
                stolen.map(|p| format!("the host stole {p:.0}%")),
                stalled.map(|p| format!("the PMD lost {:.0} ms", p * 10.0)),
            ]
            .into_iter()
            .flatten()
            .collect();
            (!parts.is_empty()).then(|| format!("{} of core {core}", parts.join(", ")))
        })
        .collect();
    if lost.is_empty() {
        String::new()
    } else {
        format!("; {} in that second", lost.join("; "))
    }
}

/// The run's VMs that send (names), for one step.
fn vm_names(step: &Step) -> Vec<String> {
    step.vms.iter().map(|v| v.name.clone()).collect()
}

/// What `vm` purchased (Mbps) in the run labelled `run_label`: its `bandwidth_bps` there, or,
/// for a baseline that enforces the purchase otherwise (policers), the purchase another
/// configuration of the file states for it.
fn purchased_mbps(s: &Scenario, vm: &str, run_label: &str) -> Option<f64> {
    let variant = base_label(run_label).split_once('/').map(|(_, v)| v);
    let group = s
        .vms
        .iter()
        .find(|v| v.name == vm || (vm.starts_with(&v.name) && vm[v.name.len()..].parse::<usize>().is_ok()))?;
    let own = variant
        .and_then(|name| s.variants.iter().find(|x| x.name == name))
        .and_then(|v| v.qos.get(&group.name))
        .unwrap_or(&group.qos);
    let stated = std::iter::once(own)
        .chain(std::iter::once(&group.qos))
        .chain(s.variants.iter().filter_map(|v| v.qos.get(&group.name)));
    stated.filter_map(|q| q.bandwidth_bps).next().map(|b| b as f64 / 1e6)
}

/// A target headline's `vm`: a VM, a VM group, `all`, or `tenant:NAME` (its VMs together).
fn target_includes(target: &str, vm: &crate::scenario::Vm) -> bool {
    match target.strip_prefix("tenant:") {
        Some(t) => vm.tenant.as_deref() == Some(t),
        None => target == "all" || target == vm.name || target == vm.group,
    }
}

/// A deviation headline on one switch: a VM, or every VM of a group in every step, the one
/// farthest off its purchase, in % of it.
fn deviation_value(
    s: &Scenario,
    samples: &[Sample],
    sw: &str,
    h: &Headline,
    steps: &[Step],
) -> (String, Option<f64>, String) {
    // A VM, or every VM of a group in every step: the one farthest off.
    let w = h.window.unwrap_or_default();
    let mut worst: Option<(f64, String)> = None;
    let mut n = 0;
    for step in steps {
        for vm in step.vms.iter().filter(|v| v.name == h.vm || v.group == h.vm) {
            let series = received(s, samples, sw, &step.label, &vm.name, "mbps");
            let purchased = purchased_mbps(s, &vm.name, sw);
            let (got, when) = match (h.per_second, purchased) {
                (true, Some(p)) => match farthest_in(&series, w[0], w[1], p) {
                    Some((t, v)) => {
                        (Some(v), format!(" in the second to {t:.0} s{}", stall_note(s, samples, sw, &step.label, t)))
                    }
                    None => (None, String::new()),
                },
                _ => (mean_in(&series, w[0], w[1]), String::new()),
            };
            if let (Some(g), Some(p)) = (got, purchased.filter(|p| *p > 0.0)) {
                n += 1;
                let dev = 100.0 * (g - p) / p;
                let at = if steps.len() > 1 { format!(" at {}", step.label) } else { String::new() };
                if worst.as_ref().is_none_or(|(d, _)| dev.abs() > d.abs()) {
                    worst = Some((
                        dev,
                        format!("{}{at} got {} Mbps{when}, purchased {}", vm.name, fmt(Some(g)), fmt(Some(p))),
                    ));
                }
            }
        }
    }
    match worst {
        Some((d, why)) => (sw.to_string(), Some(d), if n > 1 { format!("farthest of {n}: {why}") } else { why }),
        None => (sw.to_string(), None, format!("{}: nothing received or nothing purchased", h.vm)),
    }
}

/// A target headline on one switch: in every step (a sweep's values), the one farthest from the
/// expected rate, in % of it.
fn target_value(
    s: &Scenario,
    samples: &[Sample],
    sw: &str,
    h: &Headline,
    steps: &[Step],
) -> (String, Option<f64>, String) {
    // Every step (a sweep's values): the one farthest from the target.
    let w = h.window.unwrap_or_default();
    let expected = h.expected_mbps.unwrap_or(1.0);
    let mut worst: Option<(f64, String)> = None;
    for step in steps {
        let names: Vec<&str> = step.vms.iter().filter(|v| target_includes(&h.vm, v)).map(|v| v.name.as_str()).collect();
        let got: Option<f64> =
            names.iter().map(|vm| mean_in(&received(s, samples, sw, &step.label, vm, "mbps"), w[0], w[1])).sum();
        let Some(g) = got else { continue };
        let dev = 100.0 * (g - expected) / expected;
        let at = if steps.len() > 1 { format!(" at {}", step.label) } else { String::new() };
        if worst.as_ref().is_none_or(|(d, _)| dev.abs() > d.abs()) {
            worst = Some((dev, format!("{}{at} got {} Mbps", h.vm, fmt(Some(g)))));
        }
    }
    match worst {
        Some((d, why)) => (sw.to_string(), Some(d), format!("{why}, expected {}", fmt(Some(expected)))),
        None => (sw.to_string(), None, format!("{}: nothing received", h.vm)),
    }
}

/// The median over a headline's window of a per-second figure; with `stall_free`, of the seconds
/// in which no PMD lost time to the host, nor in the second before (a frame that leaves in a
/// second may have waited through a stall at the end of the one before), and a note of how
/// many seconds that kept.
fn per_second_median(
    s: &Scenario,
    samples: &[Sample],
    sw: &str,
    step: &str,
    h: &Headline,
    source: &str,
    metric: &str,
) -> (Option<f64>, String) {
    let w = h.window.unwrap_or_default();
    let inside: Vec<(f64, f64)> =
        series(samples, sw, step, source, &h.vm, metric).into_iter().filter(|p| p.0 >= w[0] && p.0 < w[1]).collect();
    if !h.stall_free {
        return (median(inside.into_iter().map(|p| p.1).collect()), String::new());
    }
    let stalled_at: Vec<f64> = s
        .host
        .pmd_cores
        .iter()
        .flat_map(|core| series(samples, sw, step, "switch", &format!("pmd{core}"), "stalled_pct"))
        .filter(|(_, pct)| *pct > 0.0)
        .map(|(at, _)| at)
        .collect();
    let stalled = |t: f64| stalled_at.iter().any(|at| (at - t).abs() < 0.5 || (t - 1.0 - at).abs() < 0.5);
    let total = inside.len();
    let kept: Vec<f64> = inside.into_iter().filter(|p| !stalled(p.0)).map(|p| p.1).collect();
    let note = format!(", the {} of {total} seconds without a PMD stall in them or the second before", kept.len());
    (median(kept), note)
}

/// One headline figure per switch: (switch, value, explanation).
pub fn headline_values(s: &Scenario, samples: &[Sample], switches: &[String]) -> Headlines {
    let steps = s.steps();
    s.headlines
        .iter()
        .map(|h| {
            let values = switches
                .iter()
                .map(|sw| match h.kind {
                    HeadlineType::Loss => {
                        let (vm, metric) = (&h.vm, h.metric.as_deref().unwrap_or("mbps"));
                        let (before, after) = (h.before.unwrap_or_default(), h.after.unwrap_or_default());
                        let step = &steps[0].label;
                        let ser = received(s, samples, sw, step, vm, metric);
                        let (b, a) = (mean_in(&ser, before[0], before[1]), mean_in(&ser, after[0], after[1]));
                        let loss = match (b, a) {
                            (Some(b), Some(a)) if b > 0.0 => Some(100.0 * (b - a) / b),
                            _ => None,
                        };
                        (sw.clone(), loss, format!("{} {metric}: {} before, {} after", vm, fmt(b), fmt(a)))
                    }
                    HeadlineType::Deviation => deviation_value(s, samples, sw, h, &steps),
                    HeadlineType::Target => target_value(s, samples, sw, h, &steps),
                    HeadlineType::Recovery => recovery::recovery_value(s, samples, sw, &steps[0].label, h),
                    HeadlineType::Latency | HeadlineType::Residence => {
                        let percentile = h.percentile.as_deref().unwrap_or("p50");
                        let (source, metric, what) = if h.kind == HeadlineType::Latency {
                            ("sink", format!("lat_{percentile}_us"), format!("{} {percentile} us", h.vm))
                        } else if h.unstalled_frames {
                            (
                                "switch",
                                format!("residence_unstalled_{percentile}_us"),
                                format!("{} {percentile} us in the switch, frames no PMD stall touched", h.vm),
                            )
                        } else {
                            (
                                "switch",
                                format!("residence_{percentile}_us"),
                                format!("{} {percentile} us in the switch (its own figure)", h.vm),
                            )
                        };
                        let (v, note) = per_second_median(s, samples, sw, &steps[0].label, h, source, &metric);
                        (sw.clone(), v, format!("{what}{note}"))
                    }
                    HeadlineType::App => {
                        let metric = h.metric.as_deref().unwrap_or("");
                        let per_step: Vec<(String, Option<f64>)> = steps
                            .iter()
                            .map(|step| {
                                let v = median(
                                    series(samples, sw, &step.label, "app", &h.vm, metric)
                                        .into_iter()
                                        .map(|p| p.1)
                                        .collect(),
                                );
                                (step.label.clone(), v)
                            })
                            .collect();
                        let worst = per_step.iter().filter_map(|(_, v)| *v).reduce(f64::max);
                        let why = if per_step.len() > 1 {
                            let each: Vec<String> = per_step.iter().map(|(l, v)| format!("{l}: {}", fmt(*v))).collect();
                            format!("{} {metric}, the largest of {}", h.vm, each.join(", "))
                        } else {
                            format!("{} {metric}", h.vm)
                        };
                        (sw.clone(), worst, why)
                    }
                    HeadlineType::LatencyGrowth => {
                        let (vm, percentile) = (&h.vm, h.percentile.as_deref().unwrap_or("p50"));
                        let metric = format!("lat_{percentile}_us");
                        let at = |step: &Step| {
                            median(
                                series(samples, sw, &step.label, "sink", vm, &metric)
                                    .into_iter()
                                    .map(|p| p.1)
                                    .collect(),
                            )
                        };
                        let (first, last) = (at(&steps[0]), at(steps.last().expect("a step")));
                        let growth = match (first, last) {
                            (Some(f), Some(l)) if f > 0.0 => Some(l / f),
                            _ => None,
                        };
                        (
                            sw.clone(),
                            growth,
                            format!(
                                "{vm} {percentile}: {} us at {}, {} us at {}",
                                fmt(first),
                                steps[0].label,
                                fmt(last),
                                steps.last().expect("a step").label
                            ),
                        )
                    }
                })
                .collect();
            (h.label.clone(), values)
        })
        .collect()
}

/// Share of intervals in which each VM found its ring full (it was backlogged), and in which
/// two or more VMs were backlogged at once.
fn overlap(samples: &[Sample], sw: &str, step: &Step) -> (Vec<(String, f64)>, f64) {
    let mut per_vm = Vec::new();
    let mut by_time: std::collections::BTreeMap<i64, usize> = Default::default();
    let mut intervals = 0;
    for vm in vm_names(step) {
        let ser = series(samples, sw, &step.label, "sent", &vm, "tx_ring_full");
        if ser.is_empty() {
            continue;
        }
        intervals = intervals.max(ser.len());
        let full = ser.iter().filter(|p| p.1 > 0.0).count();
        for p in ser.iter().filter(|p| p.1 > 0.0) {
            *by_time.entry((p.0 * 1000.0) as i64).or_default() += 1;
        }
        per_vm.push((vm, 100.0 * full as f64 / ser.len() as f64));
    }
    let both = by_time.values().filter(|&&n| n >= 2).count();
    (per_vm, if intervals == 0 { 0.0 } else { 100.0 * both as f64 / intervals as f64 })
}

fn write_plots(
    dir: &Path,
    s: &Scenario,
    samples: &[Sample],
    switches: &[String],
) -> anyhow::Result<Vec<(String, String)>> {
    let steps = s.steps();
    let markers = phase_boundaries(s);
    let mut made = Vec::new();
    // For a sweep the time plots show its last (busiest) step.
    let step = steps.last().expect("a step");
    let vms = vm_names(step);
    let shown: Vec<&String> = vms.iter().take(8).collect();
    let (recv_source, recv_prefix) = s.received_source();
    let recv_metric = format!("{recv_prefix}mbps");
    let panels = |source: &str, metric: &str, extra: Option<(&str, &str)>| -> Vec<Panel> {
        switches
            .iter()
            .map(|sw| {
                let mut series_list: Vec<Series> = shown
                    .iter()
                    .map(|vm| Series {
                        label: vm.to_string(),
                        points: series(samples, sw, &step.label, source, vm, metric),
                    })
                    .filter(|x| !x.points.is_empty())
                    .collect();
                if let Some((subject, m)) = extra {
                    let pts = series(samples, sw, &step.label, "switch", subject, m);
                    if !pts.is_empty() {
                        series_list.push(Series { label: format!("PMD busy ({subject})"), points: pts });
                    }
                }
                Panel { title: format!("{sw} ({})", step.label), series: series_list, markers: markers.clone() }
            })
            .collect()
    };
    plot::lines(
        &dir.join("bandwidth.png"),
        &format!("{}: bandwidth received at the uplink per VM", s.name),
        "time (s)",
        "Mbit/s",
        &panels(recv_source, &recv_metric, None),
    )?;
    made.push((
        "bandwidth.png".into(),
        "Per-VM bandwidth received at the uplink over time; vertical lines mark phase changes.".into(),
    ));
    let share = panels("switch", "pmd_share_pct", Some(("pmd0", "busy_pct")));
    if share.iter().any(|p| !p.series.is_empty()) {
        plot::lines(
            &dir.join("pmd_share.png"),
            "Share of the PMD core per VM, and the PMD's busy share",
            "time (s)",
            "% of the PMD's cycles",
            &share,
        )?;
        made.push(("pmd_share.png".into(), "Per-VM share of the PMD's cycles (the switch's own accounting; OVS gives only the PMD's busy share per second).".into()));
    }
    if let Some(sweep) = &s.sweep {
        made.extend(sweep_latency_plot(dir, &steps, sweep, samples, switches)?);
    } else if samples.iter().any(|x| x.source == "sink" && x.metric == "lat_p99_us") {
        plot::lines(
            &dir.join("latency.png"),
            "One-way latency p99 per VM",
            "time (s)",
            "microseconds",
            &panels("sink", "lat_p99_us", None),
        )?;
        made.push(("latency.png".into(), "Per-VM one-way latency (99th percentile per second).".into()));
    }
    made.extend(convergence_plot(dir, samples, switches, step)?);
    let last = *windows(s).last().expect("a window");
    let groups: Vec<(String, Vec<f64>)> = shown
        .iter()
        .map(|vm| {
            (
                vm.to_string(),
                switches
                    .iter()
                    .map(|sw| {
                        mean_in(&received(s, samples, sw, &step.label, vm, "mbps"), last.0, last.1).unwrap_or(0.0)
                    })
                    .collect(),
            )
        })
        .collect();
    plot::bars(
        &dir.join("comparison.png"),
        &format!("Mean received bandwidth per VM, {}-{} s, by switch", last.0, last.1),
        "Mbit/s",
        switches,
        &groups,
    )?;
    made.push(("comparison.png".into(), "Mean per-VM bandwidth in the last phase, switches side by side.".into()));
    Ok(made)
}

/// Where the run measured rates in 1 ms bins (`rate_fine_mbps`): each VM's rate at the
/// receiver around the last VM's start, a panel per switch.
fn convergence_plot(
    dir: &Path,
    samples: &[Sample],
    switches: &[String],
    step: &Step,
) -> anyhow::Result<Option<(String, String)>> {
    if !samples.iter().any(|x| x.source == "app" && x.metric == "rate_fine_mbps") {
        return Ok(None);
    }
    let fine: Vec<Panel> = switches
        .iter()
        .map(|sw| {
            let mut subjects: Vec<&str> = samples
                .iter()
                .filter(|x| x.switch == *sw && x.step == step.label && x.metric == "rate_fine_mbps")
                .map(|x| x.subject.as_str())
                .collect();
            subjects.sort_unstable();
            subjects.dedup();
            let series_list = subjects
                .iter()
                .map(|vm| Series {
                    label: vm.to_string(),
                    points: series(samples, sw, &step.label, "app", vm, "rate_fine_mbps"),
                })
                .collect();
            Panel { title: format!("{sw} ({})", step.label), series: series_list, markers: Vec::new() }
        })
        .collect();
    plot::lines(
        &dir.join("convergence.png"),
        "Rate per VM at the receiver, per millisecond bin, around the last VM's start",
        "seconds since the last VM's first frame",
        "Mbit/s (frames)",
        &fine,
    )?;
    Ok(Some(("convergence.png".into(), "Per-VM rate at the receiver in 1 ms bins (slaswitch-flows meter, kernel receive timestamps), from 100 ms before the last VM started to 500 ms after.".into())))
}

/// For a sweep: the probe VM's latency by number of VMs on the PMD, one box per switch.
fn sweep_latency_plot(
    dir: &Path,
    steps: &[Step],
    sweep: &crate::scenario::Sweep,
    samples: &[Sample],
    switches: &[String],
) -> anyhow::Result<Option<(String, String)>> {
    let probe = steps[0].vms.first().map(|v| v.name.clone()).unwrap_or_default();
    let at = |sw: &str, st: &Step, pct: &str| {
        median(
            series(samples, sw, &st.label, "sink", &probe, &format!("lat_{pct}_us")).into_iter().map(|p| p.1).collect(),
        )
    };
    let groups: Vec<(String, Vec<Option<plot::LatencyBox>>)> = steps
        .iter()
        .map(|st| {
            let boxes = switches
                .iter()
                .map(|sw| {
                    Some(plot::LatencyBox { p50: at(sw, st, "p50")?, p90: at(sw, st, "p90")?, p99: at(sw, st, "p99")? })
                })
                .collect();
            (format!("{} VMs", st.vms.len()), boxes)
        })
        .collect();
    // A sweep without a sink (a null uplink) has no latency to draw.
    if !groups.iter().any(|(_, boxes)| boxes.iter().any(Option::is_some)) {
        return Ok(None);
    }
    plot::latency_boxes(
        &dir.join("latency.png"),
        &format!("One-way latency of {probe} as '{}' VMs are added (box p50-p90, whisker p99)", sweep.vm),
        "VMs on the PMD core",
        switches,
        &groups,
    )?;
    Ok(Some(("latency.png".into(), format!("Latency of {probe} by number of VMs on the PMD: box from p50 to p90, whisker to p99 (medians of the per-second percentiles), log scale."))))
}

/// Writes a run folder's `report.md` and plots from its samples and metadata.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    let scenario_path = dir.join("scenario.toml");
    let text = std::fs::read_to_string(&scenario_path)
        .map_err(|e| anyhow!("{}: {e} (is this a run folder?)", scenario_path.display()))?;
    let mut s = crate::scenario::parse(&scenario_path.display().to_string(), &text)?;
    let run: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run.json"))
            .map_err(|e| anyhow!("{}: {e}", dir.join("run.json").display()))?,
    )
    .map_err(|e| anyhow!("run.json: {e}"))?;
    // The copy in the run folder is called scenario.toml; the run knows the scenario's name.
    if let Some(name) = run["scenario"].as_str() {
        s.name = name.to_string();
    }
    let samples = samples::load(&dir.join("samples.csv"))?;
    let switches: Vec<String> =
        run["switches"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
    let plots = write_plots(dir, &s, &samples, &switches)?;
    let steps = s.steps();
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", s.title);
    if !s.reproduces.is_empty() {
        let _ = writeln!(md, "Reproduces {}.\n", s.reproduces);
    }
    if !s.description.is_empty() {
        let _ = writeln!(md, "{}\n", s.description.trim());
    }
    let pin = &run["pinning"];
    let guests = s.has_qemu_guests();
    let guest_accel = run["runs"][0]["guests"][0]["accel"].as_str().unwrap_or("unknown").to_uppercase();
    let guest_vms = format!("QEMU guests (Debian 12's kernel, virtio-net over vhost-user; {guest_accel}), the other VMs and the test bed itself");
    let (measured_by, vms) = match s.uplink.kind {
        _ if guests => (
            "by the programs in the guests and namespace VMs (iperf3's received rate per second, ping's round trips) and each switch's own counters",
            guest_vms.as_str(),
        ),
        crate::scenario::UplinkKind::Namespace => (
            "by the programs in the namespace VMs (iperf3's received rate per second, the latency tools' own figures) and each switch's own counters",
            "the namespace VMs' programs (real kernel TCP) and the test bed itself",
        ),
        _ => (
            "by each switch's own counters and by the emulated sink VM",
            "emulated VMs (senders and sink, one process) and the test bed itself",
        ),
    };
    let _ = writeln!(
        md,
        "**Where the numbers come from:** measured on the data plane of this run's host, {measured_by}. PMD core(s) {}, {vms} on core {}. Host: {}. Commit {}.\n",
        pin["pmd_cores"],
        pin["vm_core"],
        crate::provenance::host_line(&run["machine"]),
        run["commit"].as_str().unwrap_or("unknown (run before reports named it)")
    );
    if let Some(moved) = pin["threads_moved_off_pmd_cores"].as_u64() {
        let rps = match crate::namespaces::any_in_scenario(&s) {
            true => " Namespace VMs' kernels receive on the VM core (RPS).",
            false => "",
        };
        let _ = writeln!(
            md,
            "**The PMD cores shielded:** for the run, {moved} of the machine's other threads were confined to the other cores (given back after); {} kernel threads bound to a PMD core stayed.{rps}\n",
            pin["threads_left_on_pmd_cores"]
        );
    }
    let noise: Vec<crate::host_noise::HostNoise> =
        serde_json::from_value(run["host_noise"].clone()).unwrap_or_default();
    if !noise.is_empty() {
        let _ = writeln!(
            md,
            "**The host's noise on the PMD cores** (before the run, a thread spinning on the TSC for {:.0} s on each with the shield up; a gap between two reads is time the core ran something else: the guest kernel's interrupts, or the hypervisor, which the guest counts nowhere): {}.\n",
            noise[0].secs,
            crate::host_noise::describe(&noise)
        );
    }
    if !s.scaling.is_empty() {
        let _ = writeln!(md, "**Scaling:** {}\n", s.scaling.trim());
    }
    let budgets: Vec<crate::capacity::Resolved> = serde_json::from_value(run["capacity"].clone()).unwrap_or_default();
    if !budgets.is_empty() {
        let _ = writeln!(
            md,
            "**Rates from this host's capacity** (`[capacity]`; measured just before the run on slaswitch's PMD core, each kind alone at full speed through the same rules, or what slaswitch's bandwidth-CPU model prices the frames at where that is less, so that purchases sized from it fit the core by the model admission uses; `scenario.toml` here has them filled in, `scenario-source.toml` is the file as written):\n"
        );
        for line in crate::capacity::describe(&budgets) {
            let _ = writeln!(md, "- {line}");
        }
        md.push('\n');
    }
    if !s.variants.is_empty() {
        let _ = writeln!(md, "**Configurations compared** (run one after the other on the same cores):\n");
        for v in &s.variants {
            let _ = writeln!(md, "- `{}/{}`: {}", v.switch.name(), v.name, v.description.trim());
        }
        md.push('\n');
    }
    write_headlines(&mut md, &s, &samples, &switches, &run);
    write_per_vm(&mut md, &s, &samples, &switches, &steps);
    crate::report_bill::write_bill(&mut md, &s, &run);
    let _ = writeln!(md, "## Plots\n");
    for (file, caption) in &plots {
        let _ = writeln!(md, "![{caption}]({file})\n\n{caption}\n");
    }
    write_configuration(&mut md, &run, &text);
    let _ = writeln!(md, "## Rerun\n\n```\n{}\n```\n\nRaw samples: `samples.csv` (switch, step, t_secs, source, subject, metric, value); run metadata: `run.json`.", crate::provenance::rerun_command(run["command"].as_str().unwrap_or("")));
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

/// The headline table: each headline per configuration, with medians over rounds.
fn write_headlines(md: &mut String, s: &Scenario, samples: &[Sample], switches: &[String], run: &Value) {
    let heads = headline_values(s, samples, switches);
    if !heads.is_empty() {
        let _ = writeln!(
            md,
            "## Headline\n\n| figure | {} |\n|---|{}",
            switches.join(" | "),
            "---|".repeat(switches.len())
        );
        for (label, values) in &heads {
            let _ = writeln!(
                md,
                "| {label} | {} |",
                values.iter().map(|(_, v, why)| format!("**{}** ({why})", fmt(*v))).collect::<Vec<_>>().join(" | ")
            );
        }
        md.push('\n');
        let rounds = run["rounds"].as_u64().unwrap_or(1);
        if rounds > 1 {
            let summary = over_rounds(&heads);
            let bases: Vec<String> =
                summary.first().map(|(_, v)| v.iter().map(|(b, ..)| b.clone()).collect()).unwrap_or_default();
            let _ = writeln!(
                md,
                "### Over {rounds} rounds

Every configuration ran {rounds} times, round after round; median (smallest .. largest) of each headline.

| figure | {} |
|---|{}",
                bases.join(" | "),
                "---|".repeat(bases.len())
            );
            for (label, per_base) in &summary {
                let cells: Vec<String> = per_base
                    .iter()
                    .map(|(_, m, lo, hi, n)| format!("**{}** ({} .. {}, {n} rounds)", fmt(*m), fmt(*lo), fmt(*hi)))
                    .collect();
                let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
            }
            md.push('\n');
        }
    }
}

/// Per step, per VM: rates, latency and the PMD's figures; the phases the host disturbed; the
/// programs' own outputs.
fn write_per_vm(md: &mut String, s: &Scenario, samples: &[Sample], switches: &[String], steps: &[Step]) {
    let win = windows(s);
    let measured = match s.uplink.kind {
        crate::scenario::UplinkKind::Null => {
            "of what the switch forwarded to the uplink (a null port; the switch's own per-VM counters after policing)"
        }
        crate::scenario::UplinkKind::Namespace => {
            "of each VM's TCP goodput as iperf3 measured it at the receiver, per second"
        }
        _ => "of what the uplink's sink VM received",
    };
    let _ = writeln!(md, "## Per VM, per phase\n\nMean over each phase (its first second left out) {measured}; latency is the median of the per-second percentiles at the sink; the switch's p99 is slaswitch's own residence figure for the VM's frames (from the poll after which a frame arrived to the moment the switch handed it to the output port's driver, a paced uplink's queue included; the median of its per-second p99); PMD busy is the switch's own figure.\n");
    let mut noisy: Vec<String> = Vec::new();
    for step in steps {
        let _ = writeln!(md, "### {}\n", if step.label == "run" { "Run".to_string() } else { step.label.clone() });
        let mut header = "| switch | VM |".to_string();
        let mut rule = "|---|---|".to_string();
        for w in &win {
            let _ = write!(header, " {}-{} s Mbps | kpps |", w.0, w.1);
            rule.push_str("---|---|");
        }
        header.push_str(" p50 us | p99 us | switch's p99 us |");
        rule.push_str("---|---|---|");
        let _ = writeln!(md, "{header}\n{rule}");
        for sw in switches {
            for vm in vm_names(step).iter().take(20) {
                let mut row = format!("| {sw} | {vm} |");
                for w in &win {
                    let _ = write!(
                        row,
                        " {} | {} |",
                        fmt(mean_in(&received(s, samples, sw, &step.label, vm, "mbps"), w.0, w.1)),
                        fmt(mean_in(&received(s, samples, sw, &step.label, vm, "kpps"), w.0, w.1))
                    );
                }
                let lat = |m: &str| {
                    median(series(samples, sw, &step.label, "sink", vm, m).into_iter().map(|p| p.1).collect())
                };
                let residence = median(
                    series(samples, sw, &step.label, "switch", vm, "residence_p99_us")
                        .into_iter()
                        .map(|p| p.1)
                        .collect(),
                );
                let _ = writeln!(
                    md,
                    "{row} {} | {} | {} |",
                    fmt(lat("lat_p50_us")),
                    fmt(lat("lat_p99_us")),
                    fmt(residence)
                );
            }
            let busy: Vec<String> = win
                .iter()
                .map(|w| fmt(mean_in(&series(samples, sw, &step.label, "switch", "pmd0", "busy_pct"), w.0, w.1)))
                .collect();
            let steal = |core: &str, w: &(f64, f64)| {
                mean_in(&series(samples, sw, &step.label, "host", core, "steal_pct"), w.0, w.1)
            };
            if win.iter().any(|w| steal("cpu0", w).is_some()) {
                let cells: Vec<String> =
                    win.iter().map(|w| format!("{} / {}", fmt(steal("cpu0", w)), fmt(steal("cpu1", w)))).collect();
                let _ = writeln!(md, "| {sw} | *host steal % (core 0 / 1)* | {} | | |", cells.join(" | | "));
                for w in &win {
                    let worst = steal("cpu0", w).unwrap_or(0.0).max(steal("cpu1", w).unwrap_or(0.0));
                    if worst > crate::host_steal::NOISY_STEAL_PCT {
                        noisy.push(format!("{sw}, {}, {}-{} s: {worst:.1}%", step.label, w.0, w.1));
                    }
                }
            }
            let (per_vm, both) = overlap(samples, sw, step);
            let _ = writeln!(
                md,
                "| {sw} | *PMD busy %* | {} | | |",
                busy.iter().map(|b| format!("{b} | ")).collect::<String>().trim_end_matches(" | ")
            );
            if !per_vm.is_empty() {
                let _ = writeln!(
                    md,
                    "| {sw} | *backlogged* | {} (two or more at once: {both:.0}% of seconds) |{}",
                    per_vm.iter().map(|(v, p)| format!("{v} {p:.0}%")).collect::<Vec<_>>().join(", "),
                    " |".repeat(win.len() * 2 + 1)
                );
            }
        }
        md.push('\n');
    }
    if !noisy.is_empty() {
        let _ = writeln!(
            md,
            "**The host got in the way.** In these phases the hypervisor took more than {}% of the PMD's or the VMs' core (steal time, `/proc/stat`); what the VMs got there says more about the host than about the switch:\n\n{}\n",
            crate::host_steal::NOISY_STEAL_PCT,
            noisy.iter().map(|n| format!("- {n}")).collect::<Vec<_>>().join("\n")
        );
    }
    let apps: Vec<&Sample> = samples
        .iter()
        .filter(|x| x.source == "app" && !x.metric.starts_with("iperf3_mbps") && !x.metric.starts_with("rate_"))
        .collect();
    if !apps.is_empty() {
        let _ = writeln!(md, "## Programs in the VMs (namespaces and guests)\n\nFrom each program's own output (iperf3 -J, wrk --latency, qperf, sockperf, ping, slaswitch-flows).\n\n| switch | step | VM | figure | value |\n|---|---|---|---|---|");
        for a in apps {
            let _ =
                writeln!(md, "| {} | {} | {} | {} | {} |", a.switch, a.step, a.subject, a.metric, fmt(Some(a.value)));
        }
        md.push('\n');
    }
}

/// The scenario file and, per switch, the exact commands and flow tables of the run.
fn write_configuration(md: &mut String, run: &Value, text: &str) {
    let _ = writeln!(md, "## Configuration\n\nThe scenario file:\n\n```toml\n{}\n```\n", text.trim());
    let mut seen = std::collections::BTreeSet::new();
    for r in run["runs"].as_array().into_iter().flatten() {
        let sw = r["switch"].as_str().unwrap_or("?");
        let _ = writeln!(
            md,
            "### {sw}, {} ({})\n",
            r["step"].as_str().unwrap_or("?"),
            r["version"].as_str().unwrap_or("?")
        );
        let unsupported: Vec<&str> =
            r["unsupported"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if !unsupported.is_empty() {
            let _ = writeln!(md, "No equivalent on this switch (not applied):\n");
            for u in unsupported {
                let _ = writeln!(md, "- {u}");
            }
            md.push('\n');
        }
        let notes: Vec<&str> = r["notes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
        if seen.insert(sw.to_string()) {
            let _ = writeln!(
                md,
                "\nCommands:\n\n```\n{}\n```\n",
                r["commands"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(crate::provenance::portable)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            for f in r["files"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    md,
                    "{}:\n\n```\n{}\n```\n",
                    f["file"].as_str().unwrap_or("file"),
                    abbreviated(f["text"].as_str().unwrap_or("").trim(), FILE_LINES_SHOWN)
                );
            }
            let _ = writeln!(
                md,
                "Emulated VMs:\n\n```\n{}\n```\n",
                crate::provenance::portable(r["tenant_command"].as_str().unwrap_or(""))
            );
        }
    }
}

/// Lines of a switch's configuration file a report shows; `run.json` keeps the whole file.
const FILE_LINES_SHOWN: usize = 200;

/// `text` cut to its first `lines` lines, saying how many more there are: a flow table of one
/// rule per flow would make a report of tens of megabytes.
fn abbreviated(text: &str, lines: usize) -> String {
    let total = text.lines().count();
    if total <= lines {
        return text.to_string();
    }
    let head: Vec<&str> = text.lines().take(lines).collect();
    format!("{}\n... {} more lines (the run's run.json has them all)", head.join("\n"), total - lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_file_is_shown_in_part() {
        let text: String = (0..5).map(|i| format!("rule {i}\n")).collect();
        assert_eq!(abbreviated(text.trim(), 5), text.trim());
        assert_eq!(abbreviated(text.trim(), 2), "rule 0\nrule 1\n... 3 more lines (the run's run.json has them all)");
    }

    #[test]
    fn rounds_of_a_configuration_are_summarized_together() {
        assert_eq!(round_label("slaswitch/c2tb", 2, 3), "slaswitch/c2tb #2");
        assert_eq!(round_label("slaswitch/c2tb", 1, 1), "slaswitch/c2tb");
        assert_eq!(base_label("slaswitch/c2tb #12"), "slaswitch/c2tb");
        assert_eq!(base_label("ovs-dpdk/policing"), "ovs-dpdk/policing");
        let v = |sw: &str, x: Option<f64>| (sw.to_string(), x, String::new());
        let heads = vec![(
            "loss".to_string(),
            vec![
                v("a/x #1", Some(3.0)),
                v("b/y #1", Some(10.0)),
                v("a/x #2", Some(-1.0)),
                v("b/y #2", None),
                v("a/x #3", Some(1.0)),
                v("b/y #3", Some(20.0)),
            ],
        )];
        let s = over_rounds(&heads);
        let (label, per) = &s[0];
        assert_eq!(label, "loss");
        assert_eq!(per[0], ("a/x".to_string(), Some(1.0), Some(-1.0), Some(3.0), 3));
        // A round without a value is left out, not counted as zero.
        assert_eq!(per[1].0, "b/y");
        assert_eq!(per[1], ("b/y".to_string(), Some(15.0), Some(10.0), Some(20.0), 2));
    }
}
