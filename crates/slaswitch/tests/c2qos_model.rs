//! The bandwidth-CPU model end to end (seed 000 Sec. III-IV, VII): `slaswitch calibrate`
//! measures a model on this machine, the daemon turns purchases into cycles with it and
//! explains the working, admission control guards the uplink's line rate, a paced port sends
//! at its line rate, and the NIC-bottleneck fallback holds a VM to its purchase.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn qos_port(q: &Value, name: &str) -> Value {
    q["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {q}"))
        .clone()
}

#[test]
fn calibrate_then_purchases_become_cycles_and_admission_guards_the_uplink() {
    let _g = serial();
    if !can_run() {
        return;
    }
    // A short calibration (the full one takes minutes): every table row, two VM counts, two
    // paces of the batch term's light VM and two PMD counts.
    let dir = std::env::temp_dir().join(format!("slaswitch-it-calibration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model_file = dir.join("model.json");
    let out = Command::new(CLI)
        .args(["calibrate", "--seconds", "0.5", "--repeats", "1", "--vm-counts", "1,2", "--batch-rates", "10,400"])
        .args(["--quiet", "--out"])
        .arg(&model_file)
        .env("SLASWITCH_SOCKET", dir.join("none.ctl"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "calibrate failed: {}{}", stdout, String::from_utf8_lossy(&out.stderr));
    let model: Value = serde_json::from_str(&std::fs::read_to_string(&model_file).unwrap()).unwrap();
    assert_eq!(model["entries"].as_array().unwrap().len(), 12, "6 sizes x 2 flow counts: {model}");
    for e in model["entries"].as_array().unwrap() {
        let c = &e["cycles_per_packet"];
        let total: f64 = ["ingress", "classification", "egress"].iter().map(|k| c[*k].as_f64().unwrap()).sum();
        assert!(total > 20.0 && total < 1e6, "implausible cycles per packet: {e}");
    }
    // The rows are what they say: one flow misses the exact-match tier only at the first
    // packet of a batch, 20,000 flows at every packet. (Their classification may cost the
    // same: the security group's prefixes leave the flows one megaflow, which a packet that
    // agrees with the one before it on that megaflow's mask takes without a lookup.)
    let miss_share = |bytes: u64, flows: &str| {
        model["entries"].as_array().unwrap().iter().find(|e| e["packet_bytes"] == bytes && e["flows"] == flows).unwrap()
            ["emc_miss_share"]
            .as_f64()
            .unwrap()
    };
    assert!(miss_share(64, "single") < 0.1, "{model}");
    assert!(miss_share(64, "many") > 0.9, "{model}");
    assert!(stdout.contains("R vm_count (measured)"), "{stdout}");
    // The PMD-count coefficient is measured with two PMDs (by default), never below 1.
    let pmd = model["pmd_count"]["points"].as_array().unwrap();
    assert_eq!(model["pmd_count"]["source"], "measured", "{model}");
    assert_eq!(pmd.len(), 2, "{model}");
    assert!(pmd[1][1].as_f64().unwrap() >= 1.0, "{model}");
    // The batch term: the slow light VM's batches are smaller than the fast one's, and a batch
    // of a frame or two costs more than its frame's full-batch price.
    let batch = model["batch"]["points"].as_array().unwrap();
    assert_eq!(batch.len(), 2, "{model}");
    let (slow, fast) = (&batch[0], &batch[1]);
    assert!(slow["packets_per_batch"].as_f64() < fast["packets_per_batch"].as_f64(), "{model}");
    assert!(slow["overhead_cycles_per_batch"].as_f64().unwrap() > 0.0, "{model}");
    assert!(stdout.contains("batch term, cycles per batch beyond its frames' rows"), "{stdout}");

    let sw = Switch::start("model", &["--model", &dir.join("daemon-model.json").display().to_string()]);
    sw.ok(&["add-port", "up", "null", "uplink=true", "link_rate_bps=1G"]);
    // Without a model a purchase cannot become cycles: refused, and the port does not exist.
    let (ok, _, err) = sw.cli(&[
        "add-port",
        "vm1",
        "vhost-user",
        "bandwidth_bps=300M",
        "profile_packet_bytes=1024",
        "profile_flows=single",
    ]);
    assert!(!ok && err.contains("slaswitch calibrate"), "{err}");
    assert_eq!(sw.json(&["list-ports"]).as_array().unwrap().len(), 1);
    sw.ok(&["load-model", &model_file.display().to_string()]);
    sw.ok(&[
        "add-port",
        "vm1",
        "vhost-user",
        "bandwidth_bps=300M",
        "profile_packet_bytes=1024",
        "profile_flows=single",
    ]);
    // 1200-byte frames: a cheap purchase whatever this host's calibration measured (a 0.5 s
    // calibration on a slow CI host priced 100-byte frames at over 4000 cycles each).
    sw.ok(&[
        "add-port",
        "vm2",
        "vhost-user",
        "bandwidth_bps=500M",
        "profile_packet_bytes=1200",
        "mode=min-max",
        "weight=2",
    ]);

    // qos-show explains: the row(s), each coefficient, C_single and C_alloc = prod(R) x C_single.
    let q = sw.json(&["qos-show"]);
    let v1 = qos_port(&q, "vm1");
    let a = &v1["allocation"];
    assert_eq!(a["entries"].as_array().unwrap().len(), 1, "{a}");
    let pps = 300e6 / 8.0 / 1024.0;
    assert!((a["packets_per_sec"].as_f64().unwrap() - pps).abs() < 1e-6);
    let c = &a["cycles_per_packet"];
    let cpp: f64 = ["ingress", "classification", "egress"].iter().map(|k| c[*k].as_f64().unwrap()).sum();
    let product: f64 = a["factors"].as_array().unwrap().iter().map(|f| f["value"].as_f64().unwrap()).product();
    let vm_count = a["factors"].as_array().unwrap().iter().find(|f| f["name"] == "vm_count").unwrap();
    assert_eq!(vm_count["input"], 2, "two VMs share the PMD: {a}");
    let expected = (pps * cpp * product).ceil();
    assert!((v1["cycles_per_sec"].as_f64().unwrap() - expected).abs() <= 2.0, "{v1}");
    assert_eq!(v1["cycles_from"], "model");
    assert_eq!(v1["mode"], "strict");
    // 1200-byte frames lie between the 1024 and 1500 rows: interpolated from both.
    let v2 = qos_port(&q, "vm2");
    assert_eq!(v2["allocation"]["entries"].as_array().unwrap().len(), 2, "{v2}");
    assert_eq!(v2["mode"], "min-max");
    let text = sw.ok(&["qos-show", "vm1"]);
    assert!(text.contains("model entry 1024 bytes/single") && text.contains("C_alloc = prod(R) x C_single"), "{text}");

    // A light purchase of one-frame batches pays the batch term on every frame.
    sw.ok(&["add-port", "light", "vhost-user", "bandwidth_bps=1M", "profile_packet_bytes=64", "profile_flows=single"]);
    let full = qos_port(&sw.json(&["qos-show"]), "light");
    sw.ok(&["set-port", "light", "profile_batch_packets=1"]);
    let q = sw.json(&["qos-show"]);
    let light = qos_port(&q, "light");
    let batch = light["allocation"]["batch_cycles_per_packet"].as_f64().unwrap();
    assert!(batch > 0.0, "{light}");
    assert_eq!(full["allocation"]["batch_cycles_per_packet"].as_f64(), Some(0.0), "{full}");
    let ratio = light["cycles_per_sec"].as_f64().unwrap() / full["cycles_per_sec"].as_f64().unwrap();
    let row = ["ingress", "classification", "egress"]
        .iter()
        .map(|k| full["allocation"]["cycles_per_packet"][*k].as_f64().unwrap())
        .sum::<f64>();
    assert!((ratio - (row + batch) / row).abs() < 0.01, "{ratio} vs ({row} + {batch}) / {row}");
    let text = sw.ok(&["qos-show", "light"]);
    assert!(text.contains("batch term: batches of 1 frames"), "{text}");
    let (ok, _, err) = sw.cli(&["set-port", "light", "profile_batch_packets=40"]);
    assert!(!ok && err.contains("profile_batch_packets=40: from 1 to 32"), "{err}");
    sw.ok(&["del-port", "light"]);

    // Admission: 300M + 500M + 300M of purchases exceed the 1G uplink. Refused, nothing changes.
    let before = sw.json(&["show"]);
    let (ok, _, err) = sw.cli(&["add-port", "vm3", "vhost-user", "bandwidth_bps=300M"]);
    assert!(!ok && err.contains("more than the uplink up's link_rate_bps 1000000000"), "{err}");
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "bandwidth_bps=800M"]);
    assert!(!ok && err.contains("1100000000"), "{err}");
    assert_eq!(sw.json(&["show"]), before, "a refused change changed the configuration");
    // Admission on cycles: a purchase the core cannot carry.
    sw.ok(&["set-port", "up", "link_rate_bps=100G"]);
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "bandwidth_bps=90G", "profile_packet_bytes=64"]);
    assert!(!ok && err.contains("more than the core's"), "{err}");

    // A restart keeps the model (copied to the daemon's own file) and the allocations.
    let cycles_before = qos_port(&sw.json(&["qos-show"]), "vm1")["cycles_per_sec"].clone();
    let mut sw = sw;
    sw.restart();
    assert_eq!(qos_port(&sw.json(&["qos-show"]), "vm1")["cycles_per_sec"], cycles_before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Port snapshots at both ends of one window of the paced-uplink test.
struct Window {
    wire: f64,
    a: Value,
    b: Value,
    liar_a: Value,
    liar_b: Value,
    honest_a: Value,
    honest_b: Value,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uplink {:.1} Mbit/s of wire bits", self.wire / 1e6)
    }
}

/// Uplink wire rate in bit/s between two `port-stats` snapshots `secs` apart.
fn wire_bps(a: &Value, b: &Value, secs: f64) -> f64 {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    let frames = f(b, "tx_packets") - f(a, "tx_packets");
    let bytes = f(b, "tx_bytes") - f(a, "tx_bytes");
    (bytes + 24.0 * frames) * 8.0 / secs
}

#[test]
fn a_paced_uplink_runs_at_its_line_rate_and_the_fallback_holds_a_liar_to_its_purchase() {
    let _g = serial();
    if !can_run() {
        return;
    }
    for fallback in [true, false] {
        let sw = Switch::start(if fallback { "fb-on" } else { "fb-off" }, &[]);
        sw.ok(&["add-port", "up", "null", "uplink=true", "link_rate_bps=200M", &format!("nic_fallback={fallback}")]);
        // Explicit cycles (no model needed); the purchases are what the fallback enforces.
        for p in ["vm1", "vm2"] {
            sw.ok(&["add-port", p, "vhost-user", "bandwidth_bps=90M", "cycles_per_sec=1000000000"]);
            sw.ok(&["add-flow", &format!("in_port={p},actions=output:up")]);
        }
        // vm1 sends its purchase; vm2 sends 1500-byte frames far beyond the line rate.
        let gen = Tenant::start(
            &sw.dir,
            "gen",
            &[("vm1", &sw.port_sock("vm1")), ("vm2", &sw.port_sock("vm2"))],
            1024,
            14.0,
            &["gen", "--phase", "vm=vm1,size=1024,rate=80mbps", "--phase", "vm=vm2,size=1500,rate=1000mbps"],
        );
        std::thread::sleep(Duration::from_secs(3));
        // A link's rate is only the switch's to keep while the host runs the PMD: a stall
        // longer than the link's queue lets the wire go idle, as it would under a real NIC.
        let window = || {
            let (a, t0) = (sw.port("up"), std::time::Instant::now());
            let (liar_a, honest_a) = (sw.port("vm2"), sw.port("vm1"));
            std::thread::sleep(Duration::from_secs(3));
            let (b, secs) = (sw.port("up"), t0.elapsed().as_secs_f64());
            let (liar_b, honest_b) = (sw.port("vm2"), sw.port("vm1"));
            Window { wire: wire_bps(&a, &b, secs), a, b, liar_a, liar_b, honest_a, honest_b }
        };
        let (Window { wire, a, b, liar_a, liar_b, honest_a, honest_b }, steal) = quiet_window(3, window);
        let q = sw.json(&["qos-show"]);
        gen.kill();
        let dropped = b["tx_dropped"].as_f64().unwrap() - a["tx_dropped"].as_f64().unwrap();
        let liar_limited =
            liar_b["rx"]["fallback_drops"].as_f64().unwrap() - liar_a["rx"]["fallback_drops"].as_f64().unwrap();
        let honest_limited =
            honest_b["rx"]["fallback_drops"].as_f64().unwrap() - honest_a["rx"]["fallback_drops"].as_f64().unwrap();
        if fallback {
            // The liar is held to 90M at ingress: the link carries about 80M + 90M, below its
            // rate, so nothing waits long enough to be dropped at the link.
            assert_eq!(q["fallback"]["engaged"], true, "{}", q["fallback"]);
            assert!(liar_limited > 1000.0, "the fallback did not limit the liar: {liar_limited}");
            let honest_packets =
                honest_b["rx"]["rx_packets"].as_f64().unwrap() - honest_a["rx"]["rx_packets"].as_f64().unwrap();
            assert!(
                honest_limited < 0.01 * honest_packets,
                "the honest VM was limited: {honest_limited} of {honest_packets}"
            );
            assert!(wire < 200e6 * 1.02, "the link ran above its rate: {wire}");
            assert!(dropped < 100.0, "{dropped} frames dropped at the link with the fallback on");
        } else {
            // The link is the bottleneck: it runs at its line rate and drops what does not fit.
            assert!(
                (wire - 200e6).abs() < 200e6 * 0.03 || !rate_judgeable(steal, "the link's line rate"),
                "a 200M link sent {:.1} Mbit/s of wire bits (host steal {:.1}%)",
                wire / 1e6,
                steal * 100.0
            );
            assert!(dropped > 1000.0, "nothing dropped at a link offered 5x its rate");
            assert_eq!(q["fallback"]["enabled"], false);
            assert_eq!(liar_limited, 0.0);
        }
    }
}

/// Packets per second `port` received between two `port-stats` snapshots `secs` apart, and
/// the cycles each cost (all three stages).
fn rx_rate_and_cost(a: &Value, b: &Value, secs: f64) -> (f64, f64) {
    let d = |k: &str| b["rx"][k].as_f64().unwrap() - a["rx"][k].as_f64().unwrap();
    let packets = d("rx_packets");
    let cycles = d("ingress_cycles") + d("classify_cycles") + d("egress_cycles");
    (packets / secs, cycles / packets.max(1.0))
}

/// A model whose every row says `cycles_per_packet`.
fn flat_model(tsc_hz: u64, cycles_per_packet: f64) -> Value {
    let rows: Vec<Value> = [64, 128, 256, 512, 1024, 1500]
        .iter()
        .flat_map(|&bytes| {
            [("single", 0.0), ("many", 0.6)].map(|(flows, miss)| {
                serde_json::json!({
                    "packet_bytes": bytes, "flows": flows, "measured_kpps": 1.0, "emc_miss_share": miss,
                    "cycles_per_packet": {"ingress": cycles_per_packet / 2.0, "classification": cycles_per_packet / 4.0, "egress": cycles_per_packet / 4.0},
                })
            })
        })
        .collect();
    serde_json::json!({
        "machine": "test: 60% of this host's measured cost", "tsc_hz": tsc_hz, "measured_unix_secs": 0, "method": "test",
        "entries": rows,
        "vm_count": {"points": [[1, 1.0]], "source": "given"},
        "numa_remote": {"points": [[1, 1.4]], "source": "given"},
        "pmd_count": {"points": [[1, 1.0]], "source": "given"},
    })
}

#[test]
fn drift_compensation_holds_a_purchase_the_model_underprices() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start(
        "drift",
        &[
            "--model",
            &std::env::temp_dir().join(format!("slaswitch-it-drift-{}.json", std::process::id())).display().to_string(),
        ],
    );
    sw.ok(&["add-port", "up", "null"]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-flow", "in_port=vm1,actions=output:up"]);
    let tsc_hz = sw.json(&["pmd-stats"])["tsc_hz"].as_u64().unwrap();
    let sample = |settle: f64, secs: f64| {
        std::thread::sleep(Duration::from_secs_f64(settle));
        let (a, t0) = (sw.port("vm1"), std::time::Instant::now());
        std::thread::sleep(Duration::from_secs_f64(secs));
        rx_rate_and_cost(&a, &sw.port("vm1"), t0.elapsed().as_secs_f64())
    };

    // What a backlogged 512-byte frame really costs here, then a model that says 60% of it
    // (the compensator then needs about 1.7x, leaving room below its 3x cap for a host that
    // slows down between the two steps: one run here slowed by 46%).
    let mut gen = Tenant::start(
        &sw.dir,
        "measure",
        &[("vm1", &sw.port_sock("vm1"))],
        1024,
        8.0,
        &["gen", "--phase", "size=512,rate=max,flows=1"],
    );
    let (_, cost) = sample(2.0, 2.0);
    gen.kill();
    let model_file = sw.dir.join("cheap-model.json");
    std::fs::write(&model_file, flat_model(tsc_hz, cost * 0.6).to_string()).unwrap();
    sw.ok(&["load-model", &model_file.display().to_string()]);

    // A purchase that really needs 5% of the core; the VM offers 1.5x it.
    let purchase_pps = 0.05 * tsc_hz as f64 / cost;
    let bandwidth = format!("bandwidth_bps={}", (purchase_pps * 512.0 * 8.0).round() as u64);
    sw.ok(&[
        "set-port",
        "vm1",
        &bandwidth,
        "profile_packet_bytes=512",
        "profile_flows=single",
        "drift_compensation=false",
    ]);
    gen = Tenant::start(
        &sw.dir,
        "offer",
        &[("vm1", &sw.port_sock("vm1"))],
        1024,
        90.0,
        &["gen", "--phase", &format!("size=512,rate={:.0}pps,flows=1", purchase_pps * 1.5)],
    );
    let (fixed_pps, fixed_cost) = sample(2.0, 3.0);
    sw.ok(&["set-port", "vm1", "drift_compensation=true"]);
    std::thread::sleep(Duration::from_secs(3));
    // A window counts when the host let both cores run and the compensator had settled (its
    // factor moved less than 5% across the window): on a host whose speed changes by half
    // within seconds (seen here), a window taken while the factor still climbs measures the
    // catching up, not the compensation.
    let drift_factor = || qos_port(&sw.json(&["qos-show"]), "vm1")["drift_factor"].as_f64().unwrap();
    let settled_window = || {
        for _ in 0..3 {
            let before = drift_factor();
            let (pps, cost) = sample(0.0, 4.0);
            let after = drift_factor();
            if (after / before - 1.0).abs() < 0.05 {
                return (pps, cost, after);
            }
            eprintln!("the drift factor moved from {before:.2} to {after:.2} ({pps:.0} pps): sampling again");
        }
        let (pps, cost) = sample(0.0, 4.0);
        (pps, cost, drift_factor())
    };
    // The factor is judged as it stood at the end of the judged window: read later, it follows
    // whatever the host's speed did since.
    let ((compensated_pps, cost_now, window_factor), steal) = quiet_window(4, settled_window);
    let q = qos_port(&sw.json(&["qos-show"]), "vm1");
    gen.kill();
    // Fixed, as the paper allocates: the model's cheap rows buy about 60% of the purchase,
    // while packets still cost what they did when measured. The host's speed can change by
    // half or more within a minute, and the "cheap" model then buys the whole purchase.
    let fixed_premise = fixed_cost / (0.6 * cost) >= 1.25;
    if !fixed_premise {
        eprintln!("packets cost {fixed_cost:.0} cycles against {cost:.0} when measured: the model is no longer cheap; the fixed rate is not judged");
    }
    assert!(
        fixed_pps < 0.85 * purchase_pps || !fixed_premise,
        "fixed allocation gave {fixed_pps:.0} pps of {purchase_pps:.0} purchased (cost {fixed_cost:.0} cycles against {cost:.0} measured)"
    );
    // Compensated: the port's measured cost restores the purchase. The premise is that the
    // model underprices by 1/0.6 = 1.67x; if the host's speed moved between measuring and now
    // so that the factor needed leaves the compensator's range (at most 3x) or nearly vanishes,
    // the premise is gone (a CI run saw packets cost 319 cycles against 141 measured seconds
    // earlier, without steal).
    let needed_factor = cost_now / (0.6 * cost);
    let premise_holds = (1.25..=2.9).contains(&needed_factor);
    if !premise_holds {
        eprintln!("packets cost {cost_now:.0} cycles against {cost:.0} when measured: the compensator would need {needed_factor:.2}x, outside 1.25-2.9x; the compensated rate is not judged");
    }
    let deviation = compensated_pps / purchase_pps - 1.0;
    assert!(
        deviation.abs() < 0.08 || !premise_holds || !rate_judgeable(steal, "the compensated rate"),
        "compensated allocation gave {compensated_pps:.0} pps of {purchase_pps:.0} purchased ({:+.1}%; packets cost {cost_now:.0} cycles against {cost:.0} when measured; host steal {:.1}%): {q}",
        deviation * 100.0,
        steal * 100.0
    );
    assert!(window_factor > 1.2 || !premise_holds, "drift factor {window_factor:.2} at the window's end: {q}");
    // The purchase ledger runs beside drift compensation and shows what it owes and raises.
    let (raise, owed) = (q["owed_raise"].as_f64(), q["owed_bytes"].as_f64());
    assert!(raise.is_some_and(|r| (0.5..=2.0).contains(&r)) && owed.is_some_and(|o| o >= 0.0), "{q}");
}
