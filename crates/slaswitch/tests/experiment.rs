//! The test bed end to end: `slaswitch experiment run` on a short scenario with two emulated
//! VMs on slaswitch, checked against the sink's own counters.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

const SCENARIO: &str = r#"
title = "CI: two VMs through slaswitch, one policed"
duration_secs = 4
switches = ["slaswitch"]
[host]
ring = 1024
[uplink]
kind = "sink"
# Phases end a second before the run, so every packet falls in a whole interval.
[[vm]]
name = "vm1"
phases = ["start=0,dur=3,size=64,rate=100kpps"]
[[vm]]
name = "vm2"
phases = ["start=0,dur=3,size=512,rate=100kpps"]
qos = { ingress_policing_kpps = 50, ingress_policing_kpkts_burst = 5 }
"#;

fn sum_packets(samples: &str, vm: &str) -> f64 {
    samples
        .lines()
        .filter(|l| l.contains(&format!(",sink,{vm},kpps,")))
        .map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap() * 1000.0)
        .sum()
}

#[test]
fn a_short_run_reports_what_the_sink_counted() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let (dir, out) = run_experiment("exp-test", SCENARIO, &["--switch", "slaswitch"]);

    let meta: Value = serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let totals = &meta["runs"][0]["tenant_summary"]["sink_totals"];
    let counted = |vm: &str| {
        totals.as_array().unwrap().iter().find(|t| t["source"] == vm).map_or(0.0, |t| t["packets"].as_f64().unwrap())
    };
    let samples = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    for vm in ["vm1", "vm2"] {
        let (sink, sampled) = (counted(vm), sum_packets(&samples, vm));
        assert!(sink > 0.0, "the sink counted nothing from {vm}");
        assert!(
            (sampled - sink).abs() <= sink * 0.01,
            "{vm}: per-second samples add up to {sampled}, the sink counted {sink}"
        );
    }
    // The policer held vm2 to 50 kpps (plus its 5000-packet burst) while vm1 passed whole.
    let (vm1, vm2) = (counted("vm1"), counted("vm2"));
    assert!((140_000.0..=160_000.0).contains(&vm2), "vm2 (policed at 50 kpps for 3 s) got {vm2} packets");
    assert!(vm1 > 1.8 * vm2, "vm1 (not policed) got {vm1} packets, vm2 {vm2}");

    // The report's per-phase mean for vm1 is the mean of its samples in (1, 3].
    let vm1_mbps: Vec<f64> = samples
        .lines()
        .filter(|l| l.contains(",sink,vm1,mbps,"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let t: f64 = f[2].parse().unwrap();
            (t > 1.0 && t <= 3.0).then(|| f[6].parse().unwrap())
        })
        .collect();
    let mean = vm1_mbps.iter().sum::<f64>() / vm1_mbps.len() as f64;
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let shown = if mean >= 100.0 { format!("{mean:.0}") } else { format!("{mean:.1}") };
    assert!(report.contains(&format!("| slaswitch | vm1 | {shown} |")), "report lacks vm1's mean {shown}:\n{report}");
    assert!(out.join("bandwidth.png").exists());
    // The switch's own log stays beside the report.
    let logs: Vec<String> = std::fs::read_dir(out.join("logs"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(logs.iter().any(|n| n.ends_with("slaswitchd.log")), "no slaswitchd log kept in logs/: {logs:?}");
    // Nothing is left behind: no daemon, no run folder.
    let leftovers = Command::new("pgrep").args(["-f", "slaswitch-exp-"]).output().unwrap();
    assert!(leftovers.stdout.is_empty(), "processes left: {}", String::from_utf8_lossy(&leftovers.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `slaswitch experiment shield --pmd-cores 0 -- COMMAND`: the words after `--` are the
/// command's (not a joined `slaswitch` command, as `--` is elsewhere), and its exit status is
/// the CLI's.
#[test]
fn the_cli_hands_a_shielded_command_its_words() {
    let _g = serial();
    let out = Command::new(CLI)
        .args(["experiment", "shield", "--pmd-cores", "0", "--", "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match slaswitch_datapath::pmd::online_cores() {
        1 => assert!(stderr.contains("every core of this machine"), "{stderr}"),
        _ => assert_eq!(out.status.code(), Some(5), "{stderr}"),
    }
}
