//! The paced uplink's link schedulers through the daemon: settings validated and admitted as a
//! whole, tenants, `link-show`, persistence; and each scheduler carrying real kernel TCP from
//! namespace VMs (a short run per scheduler, through the test bed).

mod common;

use common::*;

#[test]
fn link_settings_are_validated_admitted_whole_and_persisted() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let mut sw = Switch::start("link", &[]);
    sw.ok(&["add-port", "up", "null", "link_rate_bps=1G", "uplink=true"]);
    sw.ok(&["add-port", "vm1", "null"]);
    sw.ok(&["add-port", "vm2", "null"]);

    // Bad values name the option, the value and what is allowed; nothing changes.
    for (port, kv, want) in [
        ("up", "egress_scheduler=wfq", "egress_scheduler=wfq: one of fifo, ancs, softbw, pievde, ratelimit"),
        ("up", "link_drop=random", "link_drop=random: tail or head"),
        ("up", "link_latency=maybe", "link_latency=maybe: on or off"),
        ("vm1", "latency_p99_us=50", "latency_p99_us=50: an SLO is part of a purchase"),
        ("vm1", "link_guarantee=strict:0", "link_guarantee=strict:0"),
        ("vm1", "link_weight=0", "link_weight=0: a whole number from 1 to 10000"),
        ("vm1", "link_queue_frames=0", "link_queue_frames=0"),
    ] {
        let (ok, _, err) = sw.cli(&["set-port", port, kv]);
        assert!(!ok && err.contains(want), "{port} {kv}: {err}");
    }
    // Minimums are reserved on the uplink: refused whole when they exceed its line rate.
    sw.ok(&["set-port", "vm1", "link_min_bps=600M"]);
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "link_min_bps=600M"]);
    assert!(!ok && err.contains("link_min_bps would add up to 1200000000"), "{err}");
    let show = sw.json(&["show"]);
    let vm2 = show["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm2").unwrap();
    assert!(vm2["options"].get("link_min_bps").is_none(), "a refused minimum stayed: {vm2}");
    // So are purchases, the other half (cycles given, so no model is needed).
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "bandwidth_bps=1.5G", "cycles_per_sec=1000"]);
    assert!(!ok && err.contains("purchased bandwidth would add up to 1500000000"), "{err}");

    // Tenants exist before a port names them, and cannot go while one does.
    let (ok, _, err) = sw.cli(&["set-port", "vm1", "tenant=t1"]);
    assert!(!ok && err.contains("tenant=t1 does not exist"), "{err}");
    sw.ok(&["set-tenant", "t1", "weight=2"]);
    sw.ok(&["set-port", "vm1", "tenant=t1"]);
    let (ok, _, err) = sw.cli(&["del-tenant", "t1"]);
    assert!(!ok && err.contains("still has ports: vm1"), "{err}");
    let (ok, _, err) = sw.cli(&["set-tenant", "t1", "weight=0"]);
    assert!(!ok && err.contains("weight=0"), "{err}");

    // One purchase, both halves: the VM's guarantee and minimum on the link come from it.
    sw.ok(&["set-port", "vm2", "bandwidth_bps=400M", "cycles_per_sec=1000000", "profile_packet_bytes=1500"]);
    sw.ok(&["set-port", "up", "egress_scheduler=softbw"]);
    let link = sw.json(&["link-show", "up"]);
    assert_eq!(link["scheduler"], "softbw");
    let row = |name: &str| link["vms"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap().clone();
    assert_eq!(row("vm2")["guarantee"], "strict:406400000", "400 Mbit/s of 1500-byte frames on the wire");
    assert_eq!(row("vm2")["guarantee_bps"], 406_400_000u64);
    // Its minimum from the purchase fits into what vm1's 600 Mbit/s minimum leaves of the link.
    assert_eq!(row("vm2")["min_bps"], 400_000_000u64);
    assert_eq!(row("vm1")["tenant"], "t1");
    assert!(row("vm1")["state"].get("softbw").is_some(), "{}", row("vm1"));
    let qos = sw.json(&["qos-show", "vm2"]);
    assert_eq!(qos["ports"][0]["link"]["guarantee"], "strict:406400000", "qos-show explains the link half");

    // The link's latency class and a latency SLO: only for a latency class, and only above
    // what the class can promise (here the uplink's part: two full frames at 1 Gbit/s).
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "latency_p99_us=100"]);
    assert!(!ok && err.contains("latency_p99_us=100") && err.contains("priority 1 or 2"), "{err}");
    let (ok, _, err) = sw.cli(&["set-port", "vm2", "priority=1", "latency_p99_us=20"]);
    assert!(!ok && err.contains("24.7 us on the uplink"), "{err}");
    sw.ok(&["set-port", "vm2", "priority=1", "latency_p99_us=100"]);
    let lane = sw.json(&["link-show", "up"]);
    let vm2_lane = lane["vms"].as_array().unwrap().iter().find(|v| v["name"] == "vm2").unwrap()["latency_bps"].clone();
    assert_eq!(vm2_lane, 406_400_000u64, "its frames go ahead up to its purchase on the wire");
    let (ok, _, err) = sw.cli(&["set-port", "up", "link_latency=off"]);
    assert!(!ok && err.contains("link_latency=off"), "an SLO in force keeps the class on: {err}");
    let slo = (0..50)
        .find_map(|_| {
            let q = sw.json(&["qos-show", "vm2"]);
            std::thread::sleep(std::time::Duration::from_millis(100));
            Some(q["ports"][0]["latency_slo"].clone()).filter(|s| !s.is_null())
        })
        .expect("qos-show shows the SLO once the switch has sampled");
    assert_eq!(slo["latency_p99_us"], 100);
    // A port that is not paced has no scheduler to show.
    let (ok, _, err) = sw.cli(&["link-show", "vm1"]);
    assert!(!ok && err.contains("not paced"), "{err}");

    // Everything survives a restart: tenants before the ports that name them.
    sw.restart();
    let link = sw.json(&["link-show"]);
    assert_eq!(link["scheduler"], "softbw");
    assert_eq!(link["tenants"]["t1"], 2);
    assert!(link["vms"].as_array().unwrap().iter().any(|v| v["name"] == "vm1" && v["tenant"] == "t1"));
}

const TCP: &str = r#"
title = "CI: two TCP VMs through each link scheduler"
duration_secs = 5
switches = ["slaswitch"]
[uplink]
name = "server"
kind = "namespace"
line_rate = "200mbps"
commands = ["iperf3 -s -p 5201", "iperf3 -s -p 5202"]
[[tenant]]
name = "t1"
weight = 3
[[tenant]]
name = "t2"
weight = 1
[[vm]]
name = "vm1"
kind = "namespace"
tenant = "t1"
commands = ["iperf3 -c {uplink_ip} -p 5201 -t {duration} -J"]
qos = { link_weight = 3, link_guarantee = "strict:150M" }
[[vm]]
name = "vm2"
kind = "namespace"
tenant = "t2"
commands = ["iperf3 -c {uplink_ip} -p 5202 -t {duration} -J"]
[[variant]]
name = "fifo"
switch = "slaswitch"
egress_scheduler = "fifo"
[[variant]]
name = "ancs"
switch = "slaswitch"
egress_scheduler = "ancs"
[[variant]]
name = "softbw"
switch = "slaswitch"
egress_scheduler = "softbw"
[[variant]]
name = "pievde"
switch = "slaswitch"
egress_scheduler = "pievde"
[[variant]]
name = "ratelimit"
switch = "slaswitch"
egress_scheduler = "ratelimit"
"#;

/// Per-second values of `metric` of `subject` from `source` (`app`: the VMs' programs,
/// `switch`: its own figures) under configuration `label`, in seconds `from` (excluded) to `to`.
fn series(samples: &str, label: &str, source: &str, subject: &str, metric: &str, [from, to]: [f64; 2]) -> Vec<f64> {
    samples
        .lines()
        .filter(|l| l.starts_with(&format!("{label},")) && l.contains(&format!(",{source},{subject},{metric},")))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let t: f64 = f[2].parse().ok()?;
            (t > from && t <= to).then(|| f[6].parse().ok())?
        })
        .collect()
}

/// Mean iperf3 goodput of `vm` under configuration `label`, seconds 2 to 5.
fn goodput(samples: &str, label: &str, vm: &str) -> f64 {
    let v = series(samples, label, "app", vm, "iperf3_mbps", [2.0, 5.0]);
    assert!(!v.is_empty(), "{label} {vm}: no iperf3 samples");
    v.iter().sum::<f64>() / v.len() as f64
}

/// On a 200 Mbit/s uplink (188 of goodput): vm1 has weight 3, a 150 Mbit/s guarantee and the
/// tenant of weight 3; vm2 nothing. Each scheduler gives vm1 what its rule says, and the link
/// stays full; FIFO has no rule, and TCP decides.
#[test]
fn each_scheduler_shares_real_tcp_by_its_rule() {
    let _g = serial();
    if !can_run_with(&[Component::Iperf3, Component::Namespaces]) {
        return;
    }
    let (dir, out) = run_experiment("link-tcp", TCP, &[]);
    let samples = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    // vm1's share of what both got, per scheduler: (lowest, highest) its rule allows.
    for (label, lo, hi) in [
        // FIFO has no rule: TCP decides, and behind one drop-tail queue one flow can take most
        // of the link for seconds; both still get through, and the link stays full.
        ("slaswitch/fifo", 0.01, 0.99),
        // 3:1 by weight (ANCS) and by tenant (PIE-VDE).
        ("slaswitch/ancs", 0.68, 0.82),
        ("slaswitch/pievde", 0.68, 0.82),
        // 150 of 200 guaranteed, the rest shared equally: 175 of 200.
        ("slaswitch/softbw", 0.80, 0.95),
        // Its guarantee, and the rest in proportion to guarantees.
        ("slaswitch/ratelimit", 0.72, 1.0),
    ] {
        let (a, b) = (goodput(&samples, label, "vm1"), goodput(&samples, label, "vm2"));
        let share = a / (a + b);
        eprintln!("{label}: vm1 {a:.1} Mbit/s, vm2 {b:.1} Mbit/s, vm1's share {share:.3}");
        assert!((lo..=hi).contains(&share), "{label}: vm1's share {share:.3} is outside {lo}-{hi}");
        assert!(a + b > 0.85 * 188.3, "{label}: the link carried only {:.1} Mbit/s of 188", a + b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const LANE: &str = r#"
title = "CI: a light latency-class VM beside bulk TCP on a full 200 Mbit/s uplink, the link's latency class on and off"
duration_secs = 8
switches = ["slaswitch"]
[uplink]
name = "server"
kind = "namespace"
line_rate = "200mbps"
commands = ["iperf3 -s -p 5201", "iperf3 -s -p 5202"]
[[vm]]
name = "probe"
kind = "namespace"
commands = ["ping -q -i 0.01 -c 700 {uplink_ip}"]
[[vm]]
name = "b"
kind = "namespace"
count = 2
commands = ["iperf3 -c {uplink_ip} -p $((5200 + {index})) -P 4 -t {duration} -J"]
[[variant]]
name = "lane"
switch = "slaswitch"
qos.probe = { priority = 1, bandwidth_bps = 2000000, cycles_per_sec = 20000000, latency_p99_us = 100000 }
[[variant]]
name = "no-lane"
switch = "slaswitch"
link_latency = false
qos.probe = { priority = 1, bandwidth_bps = 2000000, cycles_per_sec = 20000000 }
"#;

/// The probe pings through a FIFO uplink that two bulk VMs keep full. With the link's latency
/// class its frames go ahead of the bulk (within its purchase): its residence in the switch,
/// the link's queue included, stays far below what it is without, where it waits behind the
/// bulk's queue; and the switch judges its SLO every second. Compared on frames no PMD stall
/// touched, as the SLO's goal is: one stall of the host's in a second of 100 pings is that
/// second's p99, whatever the link did.
#[test]
fn the_links_latency_class_sends_a_light_vm_ahead_of_bulk_tcp() {
    const UNSTALLED_P99: &str = "residence_unstalled_p99_us";
    let _g = serial();
    if !can_run_with(&[Component::Iperf3, Component::Namespaces]) {
        return;
    }
    let (dir, out) = run_experiment("link-lane", LANE, &[]);
    let samples = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    let median = |mut v: Vec<f64>| {
        assert!(!v.is_empty(), "no samples");
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let lane = median(series(&samples, "slaswitch/lane", "switch", "probe", UNSTALLED_P99, [3.0, 8.5]));
    let queued = median(series(&samples, "slaswitch/no-lane", "switch", "probe", UNSTALLED_P99, [3.0, 8.5]));
    eprintln!(
        "probe residence p99 (unstalled frames): {lane:.0} us with the link's latency class, {queued:.0} us without"
    );
    assert!(lane * 5.0 < queued, "with the latency class {lane:.0} us, without {queued:.0} us");
    let judged: f64 = series(&samples, "slaswitch/lane", "switch", "probe", "slo_seconds", [3.0, 8.5]).iter().sum();
    assert!(judged >= 3.0, "the switch judged {judged} seconds of the probe's SLO");
    let _ = std::fs::remove_dir_all(&dir);
}
