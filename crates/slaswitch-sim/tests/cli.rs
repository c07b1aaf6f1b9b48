//! `slaswitch-sim overcommit` as an operator runs it: the answers, the plot, the JSON, and a
//! clear refusal of a bad option.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slaswitch-sim")).args(args).output().expect("slaswitch-sim runs")
}

#[test]
fn the_fig_2_study_prints_the_answers_and_draws_the_plot() {
    let dir = std::env::temp_dir().join(format!("slaswitch-sim-test-{}", std::process::id()));
    let out = sim(&["overcommit", "--samples", "2000", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("utilization 10%: 6.93x") && text.contains("utilization 15%: 4.62x"), "{text}");
    let png = std::fs::read(dir.join("overcommit-failure.png")).expect("the plot");
    assert!(png.starts_with(b"\x89PNG"));
    let json = sim(&["overcommit", "--samples", "0", "--json", "--out", dir.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(doc["findings"]["answers"].as_array().map(Vec::len), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_utilization_is_refused_naming_the_option_and_the_range() {
    let out = sim(&["overcommit", "--utilization", "0.1,2"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--utilization 2") && err.contains("at most 1"), "{err}");
}

#[test]
fn a_short_datacenter_study_writes_its_figures_and_checks_the_fluid_step() {
    let dir = std::env::temp_dir().join(format!("slaswitch-sim-dc-{}", std::process::id()));
    let args = ["datacenter", "--servers", "60", "--secs", "40", "--oc", "1,4", "--check-servers", "2", "--json"];
    let out = sim(&[&args[..], &["--out", dir.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "strict and dynamic, at 1x and 4x");
    let util = |load: &str, oc: f64| {
        rows.iter().find(|r| r["load"] == load && r["oc"] == oc).and_then(|r| r["utilization"].as_f64()).unwrap()
    };
    assert!(util("strict", 4.0) > 3.0 * util("strict", 1.0), "over-commitment fills the links: {rows:?}");
    let checks = doc["fluid_check"].as_array().expect("checks");
    assert!(!checks.is_empty());
    for c in checks {
        assert!(c["check"]["worst_of_link"].as_f64().unwrap() < 0.02, "packets within 2% of the fluid step: {c}");
    }
    for f in ["fig11.png", "fig12.png", "fig13.png", "summary.json"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let mix = ["datacenter", "--servers", "60", "--secs", "40", "--oc", "6", "--loads", "strict", "--json"];
    let out =
        sim(&[&mix[..], &["--sharing", "softbw,per-flow", "--flows", "1,2", "--out", dir.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.iter().map(|r| r["sharing"].as_str().unwrap()).collect::<Vec<_>>(), ["softbw", "per-flow"]);
    assert_eq!(rows[1]["strict_failed_by_flows"].as_array().map(Vec::len), Some(2), "{rows:?}");
    let bad = sim(&["datacenter", "--loads", "bursty", "--out", dir.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("loads: 'bursty'"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cpu_bound_hosts_and_short_flows_run_and_check_themselves() {
    let dir = std::env::temp_dir().join(format!("slaswitch-sim-cpu-{}", std::process::id()));
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results/datacenter/bandwidth-model.json");
    let args = ["datacenter", "--servers", "40", "--secs", "30", "--oc", "2", "--loads", "strict", "--json"];
    let cpu = ["--link-mbps", "25000", "--guarantee-mbps", "6250", "--flooders", "1", "--model", model];
    let out =
        sim(&[&args[..], &cpu[..], &["--cpu", "c2qos-strict,round-robin", "--out", dir.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = doc["rows"].as_array().expect("rows");
    let small = |i: usize| rows[i]["cpu"]["strict_failed_by_frame"][0][1].as_f64().unwrap();
    // A 1500-byte flood takes the core's turns under round robin; C2QoS strict holds it to its purchase.
    assert!(small(1) > small(0), "64-byte VMs fail more under round robin: {rows:?}");
    assert!(dir.join("core.png").exists());
    for c in doc["core_check"].as_array().expect("core checks") {
        assert!(c["check"]["worst_of_core"].as_f64().unwrap() < 0.02, "the scheduler within 2% of the fluid form: {c}");
    }
    let bad = sim(&[&args[..], &["--cpu", "fast", "--model", model, "--out", dir.to_str().unwrap()]].concat());
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cpu: 'fast' is not allowed"));
    let short = sim(&[
        "short-flows",
        "--servers",
        "40",
        "--secs",
        "30",
        "--oc",
        "6",
        "--sample-servers",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(short.status.success(), "{}", String::from_utf8_lossy(&short.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let median = |sched: &str| {
        doc["rows"].as_array().unwrap().iter().find(|r| r["scheduler"] == sched).unwrap()["stats"][0]["median_us"]
            .as_f64()
            .unwrap()
    };
    assert!(median("softbw") < median("fifo"), "SoftBW finishes short flows sooner on a congested link: {doc}");
    let bad = sim(&["short-flows", "--interval-ms", "0", "--out", dir.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("interval-ms: 0"));
    let _ = std::fs::remove_dir_all(&dir);
}
