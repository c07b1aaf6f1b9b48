//! The switch end to end: slaswitchd, slaswitch and slaswitch-tenant as real processes, VMs over
//! vhost-user, PMD on core 0 and the emulated VMs on core 1.

mod common;

use std::time::Duration;

use common::*;

fn sleep(secs: f64) {
    std::thread::sleep(Duration::from_secs_f64(secs));
}

#[test]
fn vms_forward_through_the_switch_with_counters_and_cycle_accounting() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("fwd", &[]);
    for p in ["vm1", "vm2", "sink"] {
        sw.ok(&["add-port", p, "vhost-user"]);
    }
    sw.ok(&["add-flow", "in_port=vm1,actions=output:sink"]);
    sw.ok(&["add-flow", "in_port=vm2,actions=output:sink"]);
    let sink = Tenant::start(
        &sw.dir,
        "sink",
        &[("sink", &sw.port_sock("sink"))],
        8192,
        6.0,
        &["sink", "--source", "vm1", "--source", "vm2"],
    );
    sleep(1.0);
    let steal_from = slaswitch_testbed::host_steal::snapshot(&[0, 1]);
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1")), ("vm2", &sw.port_sock("vm2"))],
        4096,
        3.0,
        &["gen", "--phase", "rate=100kpps,size=64,vm=vm1", "--phase", "rate=50kpps,size=512,vm=vm2"],
    );
    let gen = gen.finish();
    let steal = steal_from.map_or(0.0, |s| s.worst_share_since(&[0, 1]));
    sleep(1.0);
    let stats = sw.json(&["pmd-stats"]);
    let sink = sink.finish();
    let (sent1, sent2) = (sent_by(&gen, "vm1"), sent_by(&gen, "vm2"));
    // Enough traffic for the checks below to mean something (the host may starve either core).
    assert!(sent1 > 100_000 && sent2 > 50_000, "generator fell short: {gen}");
    // The switch took every packet the VMs sent and forwarded each to the sink port: transmitted,
    // or counted as dropped when the sink VM's ring was full (this shared host sometimes starves
    // the sink's core; that is the VM's loss, not the switch's, and the counters must show it).
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent1);
    assert_eq!(sw.port("vm2")["rx"]["rx_bytes"].as_u64().unwrap(), sent2 * 512);
    let sink_port = sw.port("sink");
    let forwarded = sink_port["tx_packets"].as_u64().unwrap() + sink_port["tx_dropped"].as_u64().unwrap();
    assert_eq!(forwarded, sent1 + sent2, "sink port: {sink_port}");
    let (got1, got2) = (received_from(&sink, "vm1"), received_from(&sink, "vm2"));
    // The sink VM shares core 1 with the senders: when the host takes that core away, the sink
    // falls behind and its ring overflows (counted above as the sink port's drops). Only a
    // host that let both cores run makes the sink's share a statement about the switch.
    if steal <= QUIET_STEAL_SHARE {
        assert!(got1 as f64 >= 0.9 * sent1 as f64, "vm1: sent {sent1}, sink got {got1}");
        assert!(got2 as f64 >= 0.9 * sent2 as f64, "vm2: sent {sent2}, sink got {got2}");
    } else {
        eprintln!(
            "host steal {:.1}%: the sink's share is not judged (vm1 {got1} of {sent1}, vm2 {got2} of {sent2})",
            steal * 100.0
        );
    }
    assert!(sink_port["tx_packets"].as_u64().unwrap() >= got1 + got2);
    let flows = sw.json(&["dump-flows"]);
    assert_eq!(flows[0]["packets"].as_u64().unwrap(), sent1, "{flows}");

    // Cycle accounting: the stages of every port add up to the PMD's busy cycles.
    let pmd = &stats["pmds"][0];
    let busy = pmd["busy_cycles"].as_f64().unwrap();
    let stages = pmd["stage_cycles_sum"].as_f64().unwrap();
    assert!(busy > 0.0 && (stages - busy).abs() / busy < 0.03, "stages {stages} vs busy {busy}");
    let vm1 = pmd["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vm1").unwrap();
    for stage in ["ingress_cycles", "classify_cycles", "egress_cycles"] {
        assert!(vm1[stage].as_u64().unwrap() > 0, "vm1 {stage} is zero: {vm1}");
    }
    let share: f64 =
        pmd["ports"].as_array().unwrap().iter().filter_map(|p| p["interval"]["pmd_share_pct"].as_f64()).sum();
    assert!(share <= 100.5, "shares add up to {share}%");
}

/// A quiet port outside C2QoS is polled once per `--idle-poll-us`, not every pass, and loses
/// nothing for it: frames 1 ms apart (each after a quiet spell) all get through.
#[test]
fn quiet_ports_are_polled_on_a_timer_and_lose_no_frame() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let interval_us = 50.0;
    let sw = Switch::start("idle-timer", &["--idle-poll-us", "50"]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    for p in ["out", "quiet"] {
        sw.ok(&["add-port", p, "null"]);
    }
    sw.ok(&["add-flow", "in_port=vm1,actions=output:out"]);
    sleep(0.5);
    let empty_polls = |stats: &serde_json::Value| {
        let ports = stats["pmds"][0]["ports"].as_array().unwrap();
        ports.iter().find(|p| p["name"] == "quiet").unwrap()["empty_polls"].as_u64().unwrap()
    };
    let before = (sw.json(&["pmd-stats"]), std::time::Instant::now());
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1"))],
        1024,
        2.0,
        &["gen", "--phase", "rate=1kpps,size=64,vm=vm1"],
    );
    let gen = gen.finish();
    sleep(0.3);
    let (after, elapsed) = (sw.json(&["pmd-stats"]), before.1.elapsed().as_secs_f64());
    let sent = sent_by(&gen, "vm1");
    assert!(sent >= 1_000, "generator fell short: {gen}");
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent);
    assert_eq!(sw.port("out")["tx_packets"].as_u64().unwrap(), sent);
    // Polled every pass, the quiet port would have been looked at millions of times a second.
    let polls = empty_polls(&after) - empty_polls(&before.0);
    let most = elapsed * 1e6 / interval_us;
    assert!(polls as f64 <= 1.05 * most + 100.0, "quiet port polled {polls} times in {elapsed:.2} s");
    assert!(polls > 0, "the quiet port was never polled");
}

/// A rule on the input port alone decides whole batches at once: every output it names gets
/// every frame (copies for all but the last), a port it names twice gets the second copies
/// counted as its drops, and the rule counts each frame once.
#[test]
fn a_rule_on_the_input_port_sends_whole_batches_to_each_of_its_outputs() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("batch-out", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    for p in ["a", "b"] {
        sw.ok(&["add-port", p, "null"]);
    }
    sw.ok(&["add-flow", "in_port=vm1,actions=output:a,output:b,output:b"]);
    let gen = Tenant::start(
        &sw.dir,
        "gen",
        &[("vm1", &sw.port_sock("vm1"))],
        4096,
        2.0,
        &["gen", "--phase", "rate=100kpps,size=64,flows=100,vm=vm1"],
    );
    let gen = gen.finish();
    sleep(0.5);
    let sent = sent_by(&gen, "vm1");
    assert!(sent > 50_000, "generator fell short: {gen}");
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent);
    let (a, b) = (sw.port("a"), sw.port("b"));
    assert_eq!(a["tx_packets"].as_u64().unwrap() + a["tx_dropped"].as_u64().unwrap(), sent, "a: {a}");
    assert_eq!(a["tx_bytes"].as_u64().unwrap(), a["tx_packets"].as_u64().unwrap() * 64, "a: {a}");
    // Port b is named twice: one copy of each frame goes out, the other is counted as dropped.
    let b_total = b["tx_packets"].as_u64().unwrap() + b["tx_dropped"].as_u64().unwrap();
    assert_eq!(b_total, 2 * sent, "b: {b}");
    assert!(b["tx_packets"].as_u64().unwrap() >= sent / 2, "b: {b}");
    let flows = sw.json(&["dump-flows"]);
    assert_eq!(flows[0]["packets"].as_u64().unwrap(), sent, "{flows}");
    assert_eq!(flows[0]["bytes"].as_u64().unwrap(), sent * 64, "{flows}");
}

#[test]
fn mac_learning_switch_delivers_unicast_only_to_the_destination() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("l2", &[]);
    for p in ["vm1", "vm2", "sink"] {
        sw.ok(&["add-port", p, "vhost-user"]);
    }
    // No rules: a MAC-learning L2 switch. The sink announces itself, so vm1's frames to its MAC
    // are unicast to the sink port and never reach vm2.
    let sink =
        Tenant::start(&sw.dir, "sink", &[("sink", &sw.port_sock("sink"))], 8192, 5.0, &["sink", "--source", "vm1"]);
    let idle_vm2 = Tenant::start(
        &sw.dir,
        "vm2",
        &[("vm2", &sw.port_sock("vm2"))],
        1024,
        5.0,
        &["gen", "--phase", "start=100,rate=1pps"],
    );
    sleep(1.5);
    let dst = format!("rate=100kpps,size=128,dst-mac={}", mac("sink"));
    let gen =
        Tenant::start(&sw.dir, "gen", &[("vm1", &sw.port_sock("vm1"))], 4096, 2.0, &["gen", "--phase", &dst]).finish();
    let sink = sink.finish();
    idle_vm2.kill();
    let sent = sent_by(&gen, "vm1");
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent);
    assert!(received_from(&sink, "vm1") as f64 >= 0.9 * sent as f64);
    let vm2_tx = sw.port("vm2")["tx_packets"].as_u64().unwrap();
    assert!(vm2_tx < 50, "vm2 got {vm2_tx} frames: unicast was flooded (vm1 sent {sent})");
}

#[test]
fn one_megaflow_answers_many_flows_and_the_exact_match_cache_steps_in_when_masks_multiply() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("flows", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-port", "uplink", "null"]);
    // A security-group-like rule set with 100 distinct masks (seed 000, Fig. 5c).
    let rules: Vec<String> =
        slaswitch_classifier::security_group::security_group_rules(99).iter().map(|r| r.to_string()).collect();
    let file = sw.dir.join("sg.flows");
    std::fs::write(&file, rules.join("\n")).unwrap();
    sw.ok(&["add-flows", file.to_str().unwrap()]);
    assert_eq!(sw.json(&["dump-flows"]).as_array().unwrap().len(), 100);
    // Every rule's packets, summed: each packet is counted to the one rule it matched,
    // whether looked up or decided as the packet before it was.
    let rule_packets =
        || -> u64 { sw.json(&["dump-flows"]).as_array().unwrap().iter().map(|f| f["packets"].as_u64().unwrap()).sum() };
    let measure = |flows: u32| {
        let before = sw.port("vm1")["rx"].clone();
        let rules_before = rule_packets();
        let phase = format!("rate=1mpps,size=64,flows={flows},dst-ip=192.168.1.1");
        Tenant::start(
            &sw.dir,
            &format!("gen{flows}"),
            &[("vm1", &sw.port_sock("vm1"))],
            4096,
            2.0,
            &["gen", "--phase", &phase],
        )
        .finish();
        sleep(0.5);
        let after = sw.port("vm1")["rx"].clone();
        let d = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
        assert_eq!(rule_packets() - rules_before, d("rx_packets"), "{flows} flows: packets counted to rules");
        let megaflows = after["megaflows"].as_u64().unwrap();
        eprintln!(
            "{flows} flows: {} packets, EMC {} hits {} misses, megaflow {} hits {} misses, {megaflows} megaflows",
            d("rx_packets"),
            d("emc_hits"),
            d("emc_misses"),
            d("megaflow_hits"),
            d("megaflow_misses")
        );
        (d("rx_packets"), d("emc_hits"), d("emc_misses"), d("megaflow_hits"), megaflows)
    };
    // The flows differ in their UDP source port, which no rule looks at, and their source
    // address leaves the security group's prefixes at its first bit: one megaflow, one mask,
    // so the exact-match cache is left out and every packet that needs a lookup (all of them
    // with many flows) is a megaflow hit.
    for flows in [1, 20_000] {
        let (packets, emc_hits, emc_misses, mega_hits, megaflows) = measure(flows);
        assert!(packets > 100_000, "{packets} packets");
        assert!(mega_hits as f64 > 0.99 * emc_misses as f64, "{mega_hits} megaflow hits of {emc_misses} lookups");
        assert!(megaflows <= 2, "{megaflows} megaflows");
        if flows > 1 {
            assert!((emc_hits as f64) < 0.01 * packets as f64, "{emc_hits} exact-match hits: it should be left out");
        }
    }
    // A rule on one source port: that flow stops at it, the others look further, so the
    // megaflows need two masks and each flow its own entry; the exact-match cache steps in.
    sw.ok(&["add-flow", "priority=3000,udp,tp_src=1024,actions=normal"]);
    let (packets, emc_hits, _, _, megaflows) = measure(20_000);
    assert!(emc_hits as f64 > 0.2 * packets as f64, "{emc_hits} exact-match hits of {packets}");
    assert!(megaflows > 1000, "{megaflows} megaflows");
}

#[test]
fn ports_come_and_go_and_a_vm_reconnects_while_another_keeps_forwarding() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("hotplug", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-port", "sink", "vhost-user"]);
    sw.ok(&["add-flow", "in_port=vm1,actions=output:sink"]);
    // vm1 sends for longer than the changes below take on a slow host (the first version gave
    // it 7 s; once, starting the two vm2 processes took so long that vm1 had stopped sending
    // before the last change, and its flat counter read as a stall).
    let sink = Tenant::start(
        &sw.dir,
        "sink",
        &[("sink", &sw.port_sock("sink"))],
        8192,
        17.0,
        &["sink", "--source", "vm1", "--source", "vm2"],
    );
    sleep(1.0);
    let steady = Tenant::start(
        &sw.dir,
        "vm1",
        &[("vm1", &sw.port_sock("vm1"))],
        4096,
        15.0,
        &["gen", "--phase", "rate=100kpps,size=64"],
    );
    sleep(1.0);
    // Hot add a VM port and a flow, attach a VM, drop it, reattach, then remove everything. After
    // each step vm1's packets must still be arriving at the switch (its counter keeps growing).
    let vm1_rx = |sw: &Switch| sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap();
    let mut progress = vec![vm1_rx(&sw)];
    let mut step = |sw: &Switch| {
        sleep(0.3);
        progress.push(vm1_rx(sw));
    };
    sw.ok(&["add-port", "vm2", "vhost-user"]);
    step(&sw);
    sw.ok(&["add-flow", "in_port=vm2,actions=output:sink"]);
    step(&sw);
    let first = Tenant::start(
        &sw.dir,
        "vm2a",
        &[("vm2", &sw.port_sock("vm2"))],
        1024,
        10.0,
        &["gen", "--phase", "rate=50kpps,size=64"],
    );
    sleep(1.0);
    first.kill();
    step(&sw);
    let second = Tenant::start(
        &sw.dir,
        "vm2b",
        &[("vm2", &sw.port_sock("vm2"))],
        1024,
        1.5,
        &["gen", "--phase", "rate=50kpps,size=64"],
    )
    .finish();
    step(&sw);
    sw.ok(&["add-port", "extra", "null"]);
    step(&sw);
    sw.ok(&["del-port", "extra"]);
    step(&sw);
    sw.ok(&["del-port", "vm2"]);
    step(&sw);
    assert!(progress.windows(2).all(|w| w[1] > w[0]), "vm1 stalled during a change: {progress:?}");
    let steady = steady.finish();
    let sink = sink.finish();
    let sent = sent_by(&steady, "vm1");
    let got = received_from(&sink, "vm1");
    // Every vm1 packet reached the switch and went to the sink port while the other ports changed.
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent, "vm1's packets were lost in the switch");
    assert_eq!(sw.port("vm1")["rx"]["dropped_by_rules"].as_u64().unwrap(), 0);
    assert!(got as f64 >= 0.9 * sent as f64, "vm1 sent {sent}, sink got {got}");
    // The reconnected VM's traffic got through.
    let vm2_second = sent_by(&second, "vm2");
    assert!(vm2_second > 0 && received_from(&sink, "vm2") >= vm2_second * 9 / 10, "reconnected vm2 sent {vm2_second}");
    let ports = sw.json(&["list-ports"]);
    assert_eq!(ports.as_array().unwrap().len(), 2, "{ports}");
}

#[test]
fn a_vm_behind_a_vhost_user_client_port_survives_a_switch_restart() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let mut sw = Switch::start("client", &[]);
    // The VM owns the socket (server); the switch connects to it and reconnects after a restart.
    let sock = sw.dir.join("vm-owned.sock").display().to_string();
    sw.ok(&["add-port", "vmc", "vhost-user-client", &format!("path={sock}")]);
    sw.ok(&["add-port", "up", "null"]);
    sw.ok(&["add-flow", "in_port=vmc,actions=output:up"]);
    let vm = Tenant::start(
        &sw.dir,
        "vmc",
        &[("vmc", &format!("{sock},server"))],
        1024,
        10.0,
        &["gen", "--phase", "rate=50kpps,size=64"],
    );
    let rx = |sw: &Switch| sw.port("vmc")["rx"]["rx_packets"].as_u64().unwrap();
    let t = std::time::Instant::now();
    while rx(&sw) == 0 && t.elapsed() < Duration::from_secs(8) {
        sleep(0.2);
    }
    assert!(rx(&sw) > 0, "no traffic from the VM before the restart: {}", sw.log());
    sw.restart();
    // Counters start again from zero; traffic from the same VM process must come back.
    let t = std::time::Instant::now();
    while rx(&sw) < 1000 && t.elapsed() < Duration::from_secs(6) {
        sleep(0.2);
    }
    assert!(rx(&sw) >= 1000, "the VM's traffic did not come back after the switch restarted: {}", sw.log());
    let doc = vm.finish();
    assert!(sent_by(&doc, "vmc") > 0);
}

#[test]
fn restart_keeps_ports_numbers_and_flows() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let mut sw = Switch::start("restart", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-port", "up", "null", "ofport_request=7"]);
    sw.ok(&["add-flow", "priority=10,in_port=vm1,udp,tp_dst=53,actions=drop"]);
    sw.ok(&["add-flow", "priority=5,in_port=vm1,actions=output:up"]);
    let before = (sw.json(&["list-ports"]), sw.ok(&["dump-flows"]));
    sw.restart();
    let after = (sw.json(&["list-ports"]), sw.ok(&["dump-flows"]));
    let names = |v: &serde_json::Value| {
        v.as_array().unwrap().iter().map(|p| (p["name"].to_string(), p["number"].to_string())).collect::<Vec<_>>()
    };
    assert_eq!(names(&before.0), names(&after.0));
    let flows = |s: &str| s.lines().map(|l| l.split(", ").last().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(flows(&before.1), flows(&after.1));
    assert!(after.1.contains("in_port=vm1") && after.1.contains("output:up"), "{}", after.1);
}

#[test]
fn rejected_commands_say_why_and_change_nothing() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("reject", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-flow", "in_port=vm1,actions=drop"]);
    let before = sw.ok(&["show"]);
    for (args, says) in [
        (vec!["add-port", "vm1", "null"], "already exists"),
        (vec!["add-port", "x", "frobnicator"], "unknown port type"),
        (vec!["add-port", "x", "null", "colour=blue"], "unknown option 'colour'"),
        (vec!["add-port", "x", "null", "rx_ring=1000"], "power of two"),
        (vec!["add-port", "x", "null", "ofport_request=1"], "taken by 'vm1'"),
        (vec!["add-port", "x", "af-packet"], "needs iface"),
        (vec!["add-port", "x", "af-packet", "iface=no-such-if0"], "cannot create"),
        (vec!["add-port", "x", "null", "pmd=1"], "no PMD thread runs on core 1"),
        (vec!["del-port", "nope"], "no port named 'nope'"),
        (vec!["set-port", "vm1", "path=/elsewhere", "rx_ring=3"], "power of two"),
        (vec!["add-flow", "in_port=nope,actions=drop"], "no port named 'nope'"),
        (vec!["add-flow", "tp_dst=80,actions=drop"], "tcp, udp"),
        (vec!["del-flows", "in_port=zz"], "no port named 'zz'"),
        (vec!["port-stats", "nope"], "no port named 'nope'"),
        (vec!["add-port", "_x", "null"], "starting with a letter or a digit"),
        (vec!["set-port", "vm1", "bandwidth_bps=1e-400"], "bandwidth_bps=1e-400: not a whole number"),
        (vec!["set-port", "vm1", "bandwidth_bps=20T"], "bandwidth_bps=20T: not a number"),
    ] {
        let (ok, _, err) = sw.cli(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(says), "{args:?}: '{err}' should say '{says}'");
        assert_eq!(sw.ok(&["show"]), before, "{args:?} changed the configuration");
    }
    // The failed af-packet port left no device behind: the same name works now.
    sw.ok(&["add-port", "x", "null"]);
}

/// A client that connects and sends nothing holds up no one, and a request without end is
/// cut at the limit with an answer.
#[test]
fn a_silent_or_endless_client_delays_no_other_command() {
    use std::io::{Read, Write};
    let _serial = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("silent", &[]);
    let mut silent = std::os::unix::net::UnixStream::connect(sw.socket()).unwrap();
    sw.ok(&["add-port", "vm1", "null"]);
    assert!(sw.ok(&["show"]).contains("vm1"));
    // The silent client is still connected and unanswered: the commands did not wait for it
    // to be timed out.
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    assert!(
        matches!(silent.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the silent client was answered (timed out) before the other commands ran"
    );
    let mut endless = std::os::unix::net::UnixStream::connect(sw.socket()).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    let limit = slaswitch::daemon::control_plane::MAX_REQUEST_BYTES as usize;
    while sent <= limit {
        if endless.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    let mut reply = String::new();
    let _ = endless.read_to_string(&mut reply);
    assert!(reply.contains(&format!("longer than {limit} bytes")), "{reply}");
    assert!(sw.ok(&["show"]).contains("vm1"), "the daemon still serves");
    // Silent clients up to the limit of 64 connections: the next one is told the daemon is busy
    // at once, and once they go the daemon serves again.
    let held: Vec<_> = (1..64).map(|_| std::os::unix::net::UnixStream::connect(sw.socket()).unwrap()).collect();
    let t = std::time::Instant::now();
    let (ok, _, err) = sw.cli(&["show"]);
    assert!(!ok && err.contains("serving 64 connections"), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "the busy answer waited {:?}", t.elapsed());
    drop(held);
    drop(silent);
    let t = std::time::Instant::now();
    while !sw.cli(&["show"]).0 {
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "the daemon did not serve again");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn iperf3_tcp_between_namespaces_attached_by_tap_and_af_packet() {
    let _g = serial();
    if !can_run_with(&[Component::Iperf3, Component::Namespaces]) {
        return;
    }
    let sw = Switch::start("iperf", &[]);
    iperf3_between_kernel_ports(&sw, "the PMD");
    for port in ["tapa", "tapb"] {
        assert!(thread_cores(sw.pid(), &format!("ktx-{port}")).is_empty(), "{port} has a sender thread");
    }
}

#[test]
fn kernel_ports_send_from_threads_of_their_own_off_the_pmd() {
    let _g = serial();
    if !can_run_with(&[Component::Iperf3, Component::Namespaces]) {
        return;
    }
    let sw = Switch::start("ktx", &["--kernel-tx", "thread"]);
    iperf3_between_kernel_ports(&sw, "sender threads");
    // Each kernel port has a sender thread on the cores the PMD (core 0) leaves, and the frames
    // a sender sent count in their source port's residence and egress cycles.
    for port in ["tapa", "tapb"] {
        let cores = thread_cores(sw.pid(), &format!("ktx-{port}"));
        assert!(!cores.is_empty() && !cores.contains(&0), "{port}'s sender thread on cores {cores:?}");
    }
    let stats = sw.json(&["pmd-stats"]);
    let tapa = stats["pmds"][0]["ports"].as_array().unwrap().iter().find(|p| p["name"] == "tapa").unwrap().clone();
    let timed = tapa["residence_us"]["frames"].as_f64().unwrap_or(0.0);
    assert!(timed > 1000.0, "{timed} of tapa's frames timed through tapb's sender: {tapa}");
    let p50 = tapa["residence_us"]["p50"].as_f64().unwrap();
    assert!(p50 > 0.0 && p50 < 100_000.0, "tapa's residence p50 {p50} us");
    // A port the switch no longer has leaves no sender behind.
    sw.ok(&["del-port", "tapb"]);
    assert!(thread_cores(sw.pid(), "ktx-tapb").is_empty(), "tapb's sender outlived its port");
}

/// Two namespaces, one behind a tap port and one behind an af-packet port on a veth, ping and
/// then run three seconds of iperf3 TCP through `sw` (whose kernel ports send from `sending`).
fn iperf3_between_kernel_ports(sw: &Switch, sending: &str) {
    let tag = std::process::id() % 10000;
    let (a, b) = (format!("ssa{tag}"), format!("ssb{tag}"));
    let _ns = OnDrop(vec![format!("ip netns del {a}"), format!("ip netns del {b}")]);
    // Namespace a hangs off a tap port; namespace b off one end of a veth pair, whose other end
    // the switch opens as an af-packet port.
    let (ta, vb, vsw) = (format!("sta{tag}"), format!("svb{tag}"), format!("svs{tag}"));
    sw.ok(&["add-port", "tapa", "tap", &format!("iface={ta}")]);
    let (ok, out) = sh(&format!("ip link add {vsw} type veth peer name {vb} && ip link set {vsw} up"));
    assert!(ok, "veth: {out}");
    struct Link(String);
    impl Drop for Link {
        fn drop(&mut self) {
            let _ = sh(&format!("ip link del {}", self.0));
        }
    }
    let _veth = Link(vsw.clone());
    sw.ok(&["add-port", "tapb", "af-packet", &format!("iface={vsw}")]);
    for (ns, dev, ip) in [(&a, &ta, "10.77.0.1/24"), (&b, &vb, "10.77.0.2/24")] {
        let (ok, out) = sh(&format!("ip netns add {ns} && ip link set {dev} netns {ns} && ip -n {ns} addr add {ip} dev {dev} && ip -n {ns} link set {dev} up && ip -n {ns} link set lo up"));
        assert!(ok, "namespace setup: {out}");
    }
    // A veth hands af_packet 64 KB GSO frames with partial checksums unless its offloads are off
    // (the switch sees real frames, as a NIC would give it).
    let (ok, out) = sh(&format!("ethtool -K {vsw} tso off gso off gro off tx off rx off >/dev/null && ip netns exec {b} ethtool -K {vb} tso off gso off gro off tx off rx off >/dev/null"));
    assert!(ok, "ethtool: {out}");
    let (ok, out) = sh(&format!("ip netns exec {a} ping -c 3 -i 0.2 -W 2 10.77.0.2"));
    assert!(ok, "ping through the switch failed: {out}");
    let server = std::process::Command::new("ip")
        .args(["netns", "exec", &b, "iperf3", "-s", "-1", "-p", "5299"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    sleep(0.5);
    let (ok, out) = sh(&format!("timeout 20 ip netns exec {a} iperf3 -c 10.77.0.2 -p 5299 -t 3 -J"));
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    assert!(ok, "iperf3 failed: {out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bps = doc["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 gave no result: {out}"));
    eprintln!(
        "iperf3 through slaswitch (tap and af-packet ports, PMD core 0, sends from {sending}): {:.0} Mbit/s",
        bps / 1e6
    );
    assert!(bps > 50e6, "TCP throughput {bps} bit/s");
    assert!(sw.port("tapb")["tx_packets"].as_u64().unwrap() > 1000);
}

/// The cores the thread of process `pid` named `name` may run on (empty: no such thread).
fn thread_cores(pid: u32, name: &str) -> Vec<usize> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim();
        return list
            .split(',')
            .flat_map(|r| match r.split_once('-') {
                Some((a, b)) => (a.parse().unwrap_or(0)..=b.parse().unwrap_or(0)).collect::<Vec<usize>>(),
                None => r.parse().into_iter().collect(),
            })
            .collect();
    }
    Vec::new()
}

#[test]
fn prometheus_metrics_are_served_on_loopback() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("metrics", &["--metrics", "127.0.0.1:19477"]);
    sw.ok(&["add-port", "up", "null"]);
    // Scrapes read the snapshot the daemon takes every second.
    sleep(1.5);
    let body = metrics("127.0.0.1:19477");
    assert!(body.starts_with("HTTP/1.") && body.lines().next().unwrap().ends_with("200 OK"), "{body}");
    assert!(body.contains("application/openmetrics-text"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(body.contains("slaswitch_port_rx_packets_total{port=\"up\"}"), "{body}");
    assert!(body.contains("slaswitch_port_cycles_total{port=\"up\",stage=\"classification\"}"));
    assert!(body.contains("slaswitch_pmd_cycles_total{core=\"0\",state=\"busy\"}"));
    assert!(body.contains("# TYPE slaswitch_port_residence_seconds histogram"), "{body}");
    assert!(body.contains("slaswitch_port_residence_seconds_bucket{le=\"+Inf\",port=\"up\"}"), "{body}");
    assert!(body.contains("slaswitch_port_residence_seconds_count{port=\"up\"}"), "{body}");
    // Only /metrics is served.
    let other = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect("127.0.0.1:19477").unwrap();
        s.write_all(b"GET /admin HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    assert!(other.lines().next().unwrap().contains("404"), "{other}");
}
