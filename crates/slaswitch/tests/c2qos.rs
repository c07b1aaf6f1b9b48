//! C2QoS in the data plane: a port's cycle allocation bounds its share of the PMD core, the
//! allocation changes live, and admission control refuses an over-allocation without changing
//! anything.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Two vhost-user VM ports forwarding to a null uplink, vm1 allowed a tenth of the core in
/// cycles and vm2 unlimited; returns the TSC rate.
fn two_vms_one_held_to_a_tenth(sw: &Switch) -> f64 {
    sw.ok(&["add-port", "up", "null"]);
    for p in ["vm1", "vm2"] {
        sw.ok(&["add-port", p, "vhost-user"]);
        sw.ok(&["add-flow", &format!("in_port={p},actions=output:up")]);
    }
    let hz = sw.json(&["pmd-stats"])["tsc_hz"].as_f64().unwrap();
    sw.ok(&["set-port", "vm1", &format!("cycles_per_sec={}", (hz / 10.0) as u64)]);
    hz
}

#[test]
fn a_cycle_allocation_bounds_a_ports_share_of_the_pmd() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("c2tb", &["--probe"]);
    // vm1 may use a tenth of the core; vm2 is unlimited.
    let hz = two_vms_one_held_to_a_tenth(&sw);
    // No VM attached yet: every decision ends in an empty poll, and is counted as one.
    std::thread::sleep(Duration::from_millis(300));
    let idle = sw.json(&["pmd-stats"]);
    let field = |k: &str| idle["pmds"][0]["probe"][k].as_f64().unwrap();
    assert!(field("qos_decisions") > 0.0, "{idle}");
    assert!(field("qos_empty_decisions") >= 0.99 * field("qos_decisions"), "{idle}");
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1")), ("vm2", &sw.port_sock("vm2"))],
        1024,
        9.0,
        &["gen", "--phase", "size=64,rate=max"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let a = sw.json(&["pmd-stats"]);
    std::thread::sleep(Duration::from_secs(2));
    let b = sw.json(&["pmd-stats"]);
    // A batch run as a turn going on is one of the probe's decisions (a scheduled pick) on
    // which the scheduler was not called: never more of them than decisions.
    let turn_batches = b["pmds"][0]["qos_turn_batches"].as_u64().expect("qos_turn_batches in pmd-stats");
    assert!(turn_batches <= b["pmds"][0]["probe"]["qos_decisions"].as_u64().unwrap(), "{b}");
    let (s1, s2) = (share(&a, &b, "vm1"), share(&a, &b, "vm2"));
    // Never more than the allocation. (Under the test harness vm1 reaches 7-8%, not 10%, while
    // the PMD idles 10-15%: see the C2QoS issue's note; a manual run on an idle host gives 10.0%.)
    assert!(s1 <= 11.0, "vm1 limited to 10% of the core used {s1:.1}%");
    assert!(s1 >= 3.0, "vm1 limited to 10% of the core was starved: {s1:.1}%");
    // vm2 is held by nothing but the generator, which shares core 1 with vm1's flood.
    assert!(s2 > 2.0 * s1 && s2 > 15.0, "vm2 (unlimited) used {s2:.1}% while vm1 was held to {s1:.1}%");

    // qos-show explains the allocation and the scheduler's view.
    let q = sw.json(&["qos-show"]);
    let port = |n: &str| q["ports"].as_array().unwrap().iter().find(|p| p["name"] == n).unwrap().clone();
    let (q1, q2) = (port("vm1"), port("vm2"));
    assert_eq!(q1["cycles_per_sec"].as_f64().unwrap(), (hz / 10.0).floor());
    assert_eq!(q1["mode"], "strict");
    assert!((q1["allocated_pct_of_core"].as_f64().unwrap() - 10.0).abs() < 0.01, "{q1}");
    assert!(["ready", "resting", "waiting", "in-service"].contains(&q1["place"].as_str().unwrap()), "{q1}");
    assert!(q1["tokens_cycles"].is_number(), "{q1}");
    assert_eq!(q2["mode"], "unlimited");
    assert!(q2["tokens_cycles"].is_null(), "{q2}");
    assert!(sw.cli(&["qos-show", "nosuch"]).2.contains("no port named 'nosuch'"));

    // Admission control: vm2 may not be given more than what is left of the core.
    let (ok, _, err) = sw.cli(&["set-port", "vm2", &format!("cycles_per_sec={}", (hz * 0.95) as u64)]);
    assert!(!ok && err.contains("more than the core's"), "{err}");
    let shown = sw.json(&["list-ports"]);
    let vm2 = shown.as_array().unwrap().iter().find(|p| p["name"] == "vm2").unwrap().clone();
    let show = sw.json(&["show"]);
    assert!(!show.to_string().contains(&format!("{}", (hz * 0.95) as u64)), "the refused setting was kept: {show}");
    assert_eq!(vm2["link_up"], true);

    // Raised live to half the core: vm1's share follows, without recreating its port.
    sw.ok(&["set-port", "vm1", &format!("cycles_per_sec={}", (hz / 2.0) as u64)]);
    std::thread::sleep(Duration::from_millis(500));
    let c = sw.json(&["pmd-stats"]);
    std::thread::sleep(Duration::from_secs(2));
    let d = sw.json(&["pmd-stats"]);
    let raised = share(&c, &d, "vm1");
    let tokens = sw.json(&["qos-show"])["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm1").unwrap()
        ["tokens_cycles"]
        .as_f64()
        .unwrap();
    assert!(raised <= 52.0, "vm1 raised to 50% of the core used {raised:.1}%");
    // Either the share followed, or vm1 is no longer held by its bucket (more than half full:
    // the generator, sharing core 1 with vm2's flood, could not feed it; a port its bucket
    // holds spends each token as it comes and keeps the bucket near empty).
    let not_held = tokens >= 0.5 * hz / 10_000.0;
    assert!(
        raised >= 2.5 * s1 || not_held,
        "vm1 raised from 10% to 50% of the core went from {s1:.1}% to {raised:.1}% with {tokens:.0} tokens"
    );
    gen.finish();
}

/// rx packets per second of `port` between two `pmd-stats` snapshots taken `secs` apart.
fn rx_pps(a: &Value, b: &Value, port: &str, secs: f64) -> f64 {
    let rx = |s: &Value| {
        let p = s["pmds"][0]["ports"].as_array().unwrap().iter().find(|p| p["name"] == port).unwrap().clone();
        p["rx_packets"].as_f64().unwrap()
    };
    (rx(b) - rx(a)) / secs
}

#[test]
fn a_port_without_settings_keeps_its_polls_beside_min_max_ports() {
    // The uplink of Fig. 12 has no C2QoS settings and carries every tenant's return traffic.
    // In HBS's lowest class it waited behind a backlogged MIN-MAX port in class 1 (which holds
    // tokens at the rate of the whole idle core) and was starved; it is polled once per pass.
    let _g = serial();
    if !can_run() {
        return;
    }
    // Buckets of 2 ms of the core instead of the default 100 us (`--c2tb-bucket-us`).
    let sw = Switch::start("c2rr", &["--c2tb-bucket-us", "2000", "--probe"]);
    sw.ok(&["add-port", "up", "null"]);
    for p in ["vm1", "vm2"] {
        sw.ok(&["add-port", p, "vhost-user"]);
        sw.ok(&["add-flow", &format!("in_port={p},actions=output:up")]);
    }
    let hz = sw.json(&["pmd-stats"])["tsc_hz"].as_f64().unwrap();
    sw.ok(&["set-port", "vm1", &format!("cycles_per_sec={}", (hz / 10.0) as u64), "mode=min-max", "priority=1"]);
    // A new port starts with a full bucket, and an idle one stays full: the depth set reached
    // the PMD's scheduler (the default would hold a twentieth of this).
    std::thread::sleep(Duration::from_millis(300));
    let q = sw.json(&["qos-show", "vm1"]);
    assert_eq!(q["c2tb_bucket_us"], 2000, "{q}");
    let tokens =
        q["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm1").unwrap()["tokens_cycles"].as_f64().unwrap();
    let depth = hz * 2000e-6;
    assert!(tokens > 0.9 * depth && tokens < 1.5 * depth, "vm1 idle with {tokens:.0} tokens, depth {depth:.0}");
    let offered_pps = 100_000.0;
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1")), ("vm2", &sw.port_sock("vm2"))],
        1024,
        7.0,
        &["gen", "--phase", "vm=vm1,size=64,rate=max", "--phase", "vm=vm2,size=64,rate=100kpps"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let a = sw.json(&["pmd-stats"]);
    std::thread::sleep(Duration::from_secs(2));
    let b = sw.json(&["pmd-stats"]);
    let (vm1_pps, vm2_pps) = (rx_pps(&a, &b, "vm1", 2.0), rx_pps(&a, &b, "vm2", 2.0));
    assert!(vm1_pps > 2.0 * offered_pps, "vm1's flood did not reach the switch ({vm1_pps:.0} pps): nothing tested");
    assert!(
        vm2_pps > 0.9 * offered_pps,
        "vm2 (no settings) got {vm2_pps:.0} of its {offered_pps} pps beside vm1's MIN-MAX flood"
    );
    // The switch times vm2's frames (its ring is emptied at every poll): most of them, within
    // the pass of two ports and a batch of the flood, well under a millisecond.
    let vm2 = b["pmds"][0]["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm2").unwrap().clone();
    let residence = &vm2["interval"]["residence_us"];
    let timed = residence["frames"].as_f64().unwrap_or(0.0);
    assert!(timed > 0.5 * offered_pps * 0.5, "{timed} of vm2's frames timed in the last interval: {vm2}");
    let (p50, p99) = (residence["p50"].as_f64().unwrap(), residence["p99"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99 && p50 < 1000.0, "vm2's residence p50 {p50} us, p99 {p99} us");
    assert!(vm2["residence_us"]["frames"].as_f64().unwrap() >= timed, "{vm2}");
    // Frames no PMD stall touched are timed apart too: most of them, never more than all.
    let unstalled = vm2["interval"]["residence_unstalled_us"]["frames"].as_f64().unwrap_or(0.0);
    assert!(unstalled <= timed && unstalled > 0.5 * timed, "{unstalled} of {timed} frames untouched by a stall: {vm2}");
    // The PMD measures what C2QoS's own code costs it: some, and far less than the batches.
    let pmd = &b["pmds"][0];
    let (decisions, qos, busy) = (
        pmd["probe"]["qos_decisions"].as_f64().unwrap(),
        pmd["probe"]["qos_cycles"].as_f64().unwrap(),
        pmd["busy_cycles"].as_f64().unwrap(),
    );
    assert!(decisions > 0.0 && qos > 0.0, "{pmd}");
    assert!(qos < 0.5 * busy, "C2QoS code {qos} of {busy} busy cycles");
    // Timing one decision in 64 costs the fences' waits, counted apart and smaller still.
    let sampling = pmd["probe"]["qos_sampling_cycles"].as_f64().unwrap();
    assert!(sampling > 0.0 && sampling < qos, "sampling's fences {sampling} against C2QoS's code {qos}: {pmd}");
    let q = sw.json(&["qos-show", "vm2"]);
    let vm2 = q["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm2").unwrap().clone();
    assert_eq!(vm2["place"], "", "a port without settings is outside HBS: {vm2}");
    gen.finish();
}

#[test]
fn ports_joined_with_double_dash_change_as_one_step_or_not_at_all() {
    // Moving cycles from one port to another: one port at a time, the first step would overbook
    // the core and be refused; as one step, admission judges only the final state.
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("c2many", &[]);
    for p in ["vm1", "vm2"] {
        sw.ok(&["add-port", p, "vhost-user"]);
    }
    let hz = sw.json(&["pmd-stats"])["tsc_hz"].as_f64().unwrap();
    let cycles = |share: f64| format!("cycles_per_sec={}", (hz * share) as u64);
    sw.ok(&["set-port", "vm1", &cycles(0.6)]);
    sw.ok(&["set-port", "vm2", &cycles(0.3)]);
    let allocated = || {
        let q = sw.json(&["qos-show"]);
        let get = |n: &str| {
            q["ports"].as_array().unwrap().iter().find(|p| p["name"] == n).unwrap()["cycles_per_sec"].as_f64().unwrap()
        };
        (get("vm1"), get("vm2"))
    };
    let before = allocated();
    let (ok, _, err) = sw.cli(&["set-port", "vm2", &cycles(0.6)]);
    assert!(!ok && err.contains("more than the core's"), "{err}");

    sw.ok(&["set-port", "vm1", &cycles(0.3), "--", "set-port", "vm2", &cycles(0.6), "priority=2"]);
    let swapped = allocated();
    assert_eq!(swapped, (before.1, before.0), "the allocations were not swapped");
    let show = sw.json(&["show"]).to_string();
    assert!(
        show.contains(&format!("{}", (hz * 0.6) as u64)) && show.contains("\"priority\":\"2\""),
        "the change was not persisted: {show}"
    );

    // Each refusal names the problem and changes neither port.
    let (tenth, half, six_tenths) = (cycles(0.1), cycles(0.5), cycles(0.6));
    let refused = [
        (vec!["set-port", "vm1", &half, "--", "set-port", "vm2", &six_tenths], "ports vm1, vm2"),
        (vec!["set-port", "vm1", &tenth, "--", "set-port", "vm2", "rx_ring=512"], "rx_ring recreates"),
        (vec!["set-port", "vm1", &tenth, "--", "set-port", "nosuch", "priority=3"], "no port named 'nosuch'"),
        (vec!["set-port", "vm1", &tenth, "--", "set-port", "vm1", "priority=3"], "named twice"),
        (vec!["set-port", "vm1", &tenth, "--", "set-port", "vm2", "priority=9"], "priority"),
        (vec!["set-port", "vm1", &tenth, "--", "del-port", "vm2"], "only set-port commands"),
        (vec!["set-port", "vm1", &tenth, "--", "set-port", "vm2"], "set-port vm2 needs at least one key=value"),
    ];
    for (words, expected) in refused {
        let (ok, _, err) = sw.cli(&words);
        assert!(!ok && err.contains(expected), "{words:?}: expected an error naming '{expected}', got '{err}'");
        assert_eq!(allocated(), swapped, "{words:?} was refused but changed an allocation");
    }
    let q = sw.json(&["qos-show", "vm2"]);
    let vm2 = q["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm2").unwrap().clone();
    assert_eq!(vm2["priority"], 2, "{vm2}");
    assert_eq!(sw.json(&["show"]).to_string(), show, "a refused request changed the persisted configuration");
}

/// `slaswitchd --compare-slice-us`: the PMD runs C2QoS and plain round robin in turn on the same
/// traffic and counts each side apart (the overhead benchmark's method). Round robin's slices
/// really bypass the scheduler: a port limited to a tenth of the core gets more than that
/// over the run, and C2QoS's own cycles are counted on its side only.
#[test]
fn the_live_comparison_alternates_c2qos_with_round_robin_and_counts_each_side() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("compare", &["--compare-slice-us", "4000", "--metrics", "127.0.0.1:19478"]);
    let hz = two_vms_one_held_to_a_tenth(&sw);
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1")), ("vm2", &sw.port_sock("vm2"))],
        1024,
        8.0,
        &["gen", "--keep-refused", "--phase", "size=64,rate=max"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let a = sw.json(&["pmd-stats"]);
    std::thread::sleep(Duration::from_secs(2));
    let b = sw.json(&["pmd-stats"]);
    let side = |s: &Value, name: &str, k: &str| {
        s["pmds"][0]["probe"]["compare"][name][k].as_f64().unwrap_or_else(|| panic!("no compare.{name}.{k}: {s}"))
    };
    for name in ["round_robin", "c2qos"] {
        // 5 s of 4 ms slices, alternating: about 600 of each side since the start.
        assert!(side(&b, name, "slices") >= 100.0, "{name}: {b}");
        assert!(side(&b, name, "packets") > side(&a, name, "packets"), "{name} forwarded nothing: {b}");
        let counted = side(&b, name, "elapsed_cycles") - side(&a, name, "elapsed_cycles");
        // The last quarter of each side's half of the 2 s.
        assert!(
            counted > 0.08 * 2.0 * hz && counted < 0.2 * 2.0 * hz,
            "{name} counted {counted} cycles of 2 s at {hz} Hz"
        );
    }
    assert_eq!(side(&b, "round_robin", "qos_cycles"), 0.0, "C2QoS's code ran in a round-robin slice: {b}");
    assert!(side(&b, "c2qos", "qos_cycles") > 0.0, "{b}");
    // vm1 is held to a tenth of the core only half of the time: over the run it uses clearly
    // more than a tenth (its bucket cannot carry a fifth of its rate over 2 s). A fixed higher
    // bound would depend on how fast the VM core, shared with the rest of the host, fills it.
    let s1 = share(&a, &b, "vm1");
    assert!(s1 > 12.0, "vm1 used {s1:.1}% of the PMD: round robin's slices did not bypass its limit");
    let text = sw.ok(&["pmd-stats"]);
    assert!(text.contains("comparison, slices of 4000 us") && text.contains("C2QoS against round robin"), "{text}");
    let body = metrics("127.0.0.1:19478");
    assert!(body.contains("slaswitch_pmd_compare_packets_total{core=\"0\",side=\"c2qos\"}"), "{body}");
    assert!(body.contains("slaswitch_pmd_compare_cycles_total{core=\"0\",side=\"round_robin\"}"), "{body}");
    gen.kill();
}
