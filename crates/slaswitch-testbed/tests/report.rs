//! The report from recorded samples: the headline is computed from the samples, the tables
//! say where numbers come from, and the plots are written.

use slaswitch_testbed::report::generate;
use slaswitch_testbed::samples::{to_csv, Sample};

const SCENARIO: &str = r#"
title = "recorded"
reproduces = "seed 000 Fig. 1(a-b)"
scaling = "one unit is 250 Mbit/s"
duration_secs = 20
switches = ["slaswitch", "ovs-dpdk"]
[uplink]
kind = "sink"
[[vm]]
name = "vm1"
phases = ["start=0,dur=10,size=512,rate=100kpps", "start=10,dur=10,size=64,rate=1mpps"]
[[vm]]
name = "vm2"
phases = ["start=0,dur=20,size=512,rate=300kpps"]
[[headline]]
label = "VM2 loss %"
kind = "loss"
vm = "vm2"
metric = "mbps"
before = [1, 10]
after = [11, 20]
[[headline]]
label = "vm1 residence p99 without stalls"
kind = "residence"
vm = "vm1"
percentile = "p99"
window = [1, 20]
stall_free = true
"#;

fn sample(switch: &str, t: f64, source: &str, subject: &str, metric: &str, value: f64) -> Sample {
    Sample {
        switch: switch.into(),
        step: "run".into(),
        t_secs: t,
        source: source.into(),
        subject: subject.into(),
        metric: metric.into(),
        value,
    }
}

#[test]
fn the_report_computes_its_headline_from_the_samples() {
    let dir = std::env::temp_dir().join(format!("slaswitch-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scenario.toml"), SCENARIO).unwrap();
    let mut samples = Vec::new();
    for t in 1..=20 {
        let t = f64::from(t);
        // slaswitch: VM2 1000 -> 800 Mbit/s (20% loss); OVS: 1000 -> 500 (50%).
        samples.push(sample("slaswitch", t, "sink", "vm2", "mbps", if t <= 10.0 { 1000.0 } else { 800.0 }));
        samples.push(sample("ovs-dpdk", t, "sink", "vm2", "mbps", if t <= 10.0 { 1000.0 } else { 500.0 }));
        samples.push(sample("slaswitch", t, "sink", "vm1", "mbps", 400.0));
        samples.push(sample("slaswitch", t, "sink", "vm1", "lat_p50_us", 12.0));
        samples.push(sample("slaswitch", t, "sink", "vm1", "lat_p99_us", 30.0));
        samples.push(sample("slaswitch", t, "switch", "pmd0", "busy_pct", if t <= 10.0 { 60.0 } else { 99.0 }));
        samples.push(sample("slaswitch", t, "switch", "vm1", "pmd_share_pct", 30.0));
        samples.push(sample("slaswitch", t, "sent", "vm1", "tx_ring_full", if t > 10.0 { 5.0 } else { 0.0 }));
        samples.push(sample("slaswitch", t, "sent", "vm2", "tx_ring_full", 5.0));
        // The PMD lost its core in seconds 11-18, and vm1's residence p99 shows it, in second 19
        // too (a frame that waited through the stall at the end of second 18).
        let stalled = t > 10.0 && t < 19.0;
        samples.push(sample("slaswitch", t, "switch", "pmd0", "stalled_pct", if stalled { 3.0 } else { 0.0 }));
        samples.push(sample("slaswitch", t, "switch", "vm1", "residence_p99_us", if t > 10.0 { 900.0 } else { 30.0 }));
    }
    std::fs::write(dir.join("samples.csv"), to_csv(&samples)).unwrap();
    let run = serde_json::json!({
        "switches": ["slaswitch", "ovs-dpdk"],
        "pinning": {"pmd_cores": [0], "vm_core": 1},
        "machine": {"cpu": "test CPU", "cores": 2, "memory": "1 GiB", "kernel": "k", "dpdk": "22.11"},
        "runs": [{"switch": "ovs-dpdk", "step": "run", "version": "ovs 3.1", "commands": ["ovs-vsctl add-br br0"], "files": [], "tenant_command": "slaswitch-tenant ...",
                  "unsupported": ["vm2: qos.weight (OVS-DPDK has no share weight)"], "notes": []}],
        "command": "slaswitch experiment run recorded.toml",
    });
    std::fs::write(dir.join("run.json"), serde_json::to_string(&run).unwrap()).unwrap();

    generate(&dir).expect("report");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| VM2 loss % | **20.0** (vm2 mbps: 1000 before, 800 after) | **50.0** (vm2 mbps: 1000 before, 500 after) |"), "{md}");
    assert!(
        md.contains("| vm1 residence p99 without stalls | **30.0** (vm1 p99 us in the switch (its own figure), the 10 of 19 seconds without a PMD stall in them or the second before)"),
        "{md}"
    );
    assert!(
        md.contains("PMD core(s) [0], emulated VMs (senders and sink, one process) and the test bed itself on core 1"),
        "{md}"
    );
    assert!(md.contains("**Scaling:** one unit is 250 Mbit/s"));
    // Per-phase means leave each phase's first second out: vm2 on OVS is 1000, then 500.
    assert!(md.contains("| ovs-dpdk | vm2 | 1000 | - | 500 | - | - | - |"), "{md}");
    assert!(md.contains("| slaswitch | vm1 | 400 | - | 400 | - | 12.0 | 30.0 |"), "{md}");
    assert!(md.contains("| slaswitch | *PMD busy %* | 60.0 | 99.0 |"), "{md}");
    assert!(md.contains("vm1 50%, vm2 100% (two or more at once: 50% of seconds)"), "{md}");
    assert!(md.contains("vm2: qos.weight (OVS-DPDK has no share weight)"));
    assert!(md.contains("slaswitch experiment run recorded.toml"));
    for png in ["bandwidth.png", "pmd_share.png", "latency.png", "comparison.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert_eq!(&bytes[1..4], b"PNG", "{png}");
        assert!(md.contains(&format!("]({png})")), "{png} not in the report");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_without_a_run_is_refused_with_a_reason() {
    let e = generate(std::path::Path::new("/nonexistent-run")).unwrap_err().to_string();
    assert!(e.contains("is this a run folder?"), "{e}");
}
