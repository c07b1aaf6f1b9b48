//! Scenario files: what parses, what is refused (with the line and the field), and how counts
//! and sweeps expand.

use slaswitch_testbed::scenario::{parse, PortType, SwitchKind, UplinkKind};

const GOOD: &str = r#"
title = "two VMs"
duration_secs = 20
switches = ["slaswitch", "ovs-dpdk"]

[uplink]
kind = "sink"

[[vm]]
name = "vm1"
phases = ["start=0,dur=10,size=512,rate=100kpps", "start=10,dur=10,size=64,rate=1mpps,flows=100"]
qos = { ingress_policing_rate_kbps = 400000, priority = 2 }

[[vm]]
name = "busy"
count = 3
phases = ["size=64,rate=max"]

[[headline]]
label = "loss"
kind = "loss"
vm = "vm1"
metric = "mbps"
before = [1, 10]
after = [11, 20]
"#;

#[test]
fn a_good_scenario_parses_and_expands() {
    let s = parse("experiments/two-vms.toml", GOOD).expect("parses");
    assert_eq!(s.name, "two-vms");
    assert_eq!(s.switches, vec![SwitchKind::Slaswitch, SwitchKind::OvsDpdk]);
    assert_eq!(s.uplink.kind, UplinkKind::Sink);
    assert_eq!(s.host.pmd_cores, vec![0]);
    let steps = s.steps();
    assert_eq!(steps.len(), 1);
    let names: Vec<&str> = steps[0].vms.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["vm1", "busy1", "busy2", "busy3"]);
    assert_eq!(steps[0].vms[0].phases.len(), 2);
    assert_eq!(steps[0].vms[0].phases[1].flows, 100);
}

#[test]
fn a_sweep_runs_once_per_count() {
    let text = GOOD.replace("[[headline]]", "[sweep]\nvm = \"busy\"\ncounts = [0, 2]\n\n[[headline]]");
    let s = parse("s.toml", &text).expect("parses");
    let steps = s.steps();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].label, "busy=0");
    assert_eq!(steps[0].vms.len(), 1);
    assert_eq!(steps[1].vms.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["vm1", "busy1", "busy2"]);
}

/// Parses `text` and returns the error's (line, field, message).
fn error(text: &str) -> (Option<usize>, String, String) {
    let e = parse("bad.toml", text).expect_err("should be refused");
    let shown = e.to_string();
    assert!(shown.starts_with("bad.toml:"), "{shown}");
    (e.line, e.field, e.message)
}

/// The line of the last occurrence of `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().enumerate().filter(|(_, l)| l.contains(needle)).last().expect("needle in text").0 + 1
}

#[test]
fn an_unknown_field_names_its_line() {
    let text = GOOD.replace("count = 3", "count = 3\ncolour = \"red\"");
    let (line, _, message) = error(&text);
    assert_eq!(line, Some(line_of(&text, "colour")));
    assert!(message.contains("colour"), "{message}");
}

#[test]
fn a_bad_phase_names_the_phase() {
    let text = GOOD.replace("size=64,rate=1mpps", "size=64,rate=fast");
    let (line, field, message) = error(&text);
    assert_eq!(line, Some(line_of(&text, "rate=fast")));
    assert_eq!(field, "vm[0].phases[1]");
    assert!(message.contains("fast"), "{message}");
}

#[test]
fn semantic_errors_name_line_and_field() {
    let cases: [(&str, &str, &str, &str); 7] = [
        ("priority = 2", "priority = 9", "vm[0].qos.priority", "priority = 9"),
        ("name = \"busy\"", "name = \"vm1\"", "vm[1].name", "name = \"vm1\""),
        ("count = 3", "count = 0", "vm[1].count", "count = 0"),
        ("duration_secs = 20", "duration_secs = -1", "duration_secs", "duration_secs = -1"),
        ("before = [1, 10]", "before = [10, 1]", "headline[0].before", "before = [10, 1]"),
        ("metric = \"mbps\"", "metric = \"gbps\"", "headline[0].metric", "metric = \"gbps\""),
        ("kind = \"sink\"", "kind = \"sink\"\nline_rate = \"fast\"", "uplink.line_rate", "line_rate"),
    ];
    for (from, to, field, needle) in cases {
        let text = GOOD.replace(from, to);
        let (line, f, message) = error(&text);
        assert_eq!(f, field, "{to}: {message}");
        assert_eq!(line, Some(line_of(&text, needle)), "{to}: {message}");
    }
}

#[test]
fn a_bucket_depth_out_of_range_is_refused_and_one_in_range_kept() {
    let text = GOOD.replace("[uplink]", "[host]\nc2tb_bucket_us = 0\n\n[uplink]");
    let (line, field, message) = error(&text);
    assert_eq!(field, "host.c2tb_bucket_us");
    assert_eq!(line, Some(line_of(&text, "c2tb_bucket_us")));
    assert!(message.contains("from 1 to 1000000"), "{message}");
    let s = parse("ok.toml", &GOOD.replace("[uplink]", "[host]\nc2tb_bucket_us = 1000\n\n[uplink]")).expect("parses");
    assert_eq!(s.host.c2tb_bucket_us, Some(1000));
}

#[test]
fn a_phase_after_the_end_and_a_missing_vm_are_refused() {
    let text = GOOD.replace("start=10,dur=10", "start=25,dur=10");
    assert!(error(&text).2.contains("after the run ends"));
    let text = GOOD.replace("vm = \"vm1\"", "vm = \"vm7\"");
    assert!(error(&text).2.contains("vm7"));
    let text = GOOD.replace("[[headline]]", "[sweep]\nvm = \"nobody\"\ncounts = [1]\n[[headline]]");
    assert_eq!(error(&text).1, "sweep.vm");
}

#[test]
fn namespace_vms_need_commands_and_a_namespace_uplink() {
    let text = GOOD.replace(
        "count = 3\nphases = [\"size=64,rate=max\"]",
        "kind = \"namespace\"\ncommands = [\"iperf3 -c {uplink_ip}\"]",
    );
    let (_, field, message) = error(&text);
    assert_eq!(field, "vm[1].kind");
    assert!(message.contains("[uplink] kind = \"namespace\" or \"qemu\""), "{message}");
}

#[test]
fn qemu_guests_run_commands_and_choose_their_port_type() {
    let guests = "duration_secs = 20\ncrash_switch_at_secs = 5\n[uplink]\nname = \"srv\"\nkind = \"qemu\"\nport = \"vhost-user-client\"\ncommands = [\"iperf3 -s\"]\n[[vm]]\nname = \"g\"\nkind = \"qemu\"\nport = \"vhost-user-client\"\ncommands = [\"iperf3 -c {uplink_ip}\"]\n";
    let text = format!("title = \"t\"\n{guests}");
    let s = parse("g.toml", &text).expect("parses");
    assert_eq!(s.uplink.port, PortType::VhostUserClient);
    assert_eq!(s.crash_switch_at_secs, Some(5.0));
    let step = &s.steps()[0];
    assert_eq!(step.vms[0].port, PortType::VhostUserClient);

    let (_, field, message) = error(&text.replace("crash_switch_at_secs = 5", "crash_switch_at_secs = 20"));
    assert_eq!(field, "crash_switch_at_secs");
    assert!(message.contains("inside the run"), "{message}");
    let emulated = text.replace(
        "kind = \"qemu\"\nport = \"vhost-user-client\"\ncommands = [\"iperf3 -c {uplink_ip}\"]",
        "port = \"vhost-user-client\"\nphases = [\"size=64,rate=1kpps\"]",
    );
    let (_, field, message) = error(&emulated);
    assert_eq!(field, "vm[0].port");
    assert!(message.contains("only a QEMU VM"), "{message}");
    let bad = text.replacen("port = \"vhost-user-client\"", "port = \"tap\"", 1);
    let (line, _, message) = error(&bad);
    assert_eq!(line, Some(line_of(&bad, "port = \"tap\"")));
    assert!(message.contains("`tap`") && message.contains("`vhost-user-client`"), "{message}");
}

#[test]
fn guest_tso_is_a_variant_setting_of_slaswitch_and_ovs() {
    let base = GOOD
        .replace("[[headline]]", "[[variant]]\nname = \"tso\"\nswitch = \"ovs-dpdk\"\nguest_tso = true\n[[headline]]");
    let s = parse("ok.toml", &base).expect("parses");
    let configs = s.run_configs(&[SwitchKind::OvsDpdk]);
    assert_eq!(configs[0].scenario.host.guest_tso, Some(true));
    let on_slaswitch = base.replace("switch = \"ovs-dpdk\"", "switch = \"slaswitch\"");
    assert!(parse("ok.toml", &on_slaswitch).is_ok());
    let (_, field, message) = error(&base.replace("switch = \"ovs-dpdk\"", "switch = \"vde2\""));
    assert_eq!(field, "variant[0].guest_tso");
    assert!(message.contains("runs on vde2"), "{message}");
}

#[test]
fn a_syntax_error_names_its_line() {
    let text = GOOD.replace("duration_secs = 20", "duration_secs = = 20");
    let (line, _, _) = error(&text);
    assert_eq!(line, Some(line_of(&text, "duration_secs")));
}

#[test]
fn vms_name_known_tenants() {
    let text = GOOD
        .replace("[[headline]]", "[[tenant]]\nname = \"t1\"\nweight = 5\n\n[[headline]]")
        .replace("count = 3", "count = 3\ntenant = \"t1\"");
    let s = parse("t.toml", &text).expect("parses");
    assert_eq!(s.tenants[0].weight, 5);
    assert!(s.steps()[0].vms.iter().filter(|v| v.tenant.as_deref() == Some("t1")).count() == 3);
    let bad = GOOD.replace("count = 3", "count = 3\ntenant = \"t9\"");
    let (line, field, message) = error(&bad);
    assert_eq!(field, "vm[1].tenant");
    assert_eq!(line, Some(line_of(&bad, "t9")));
    assert!(message.contains("t9"));
}

/// Every committed scenario parses.
#[test]
fn the_committed_experiments_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            // Files that give rates as shares of the core parse at any capacity.
            let kinds = slaswitch_testbed::capacity::kinds(&slaswitch_testbed::capacity::budgets(&text).unwrap());
            let stand_in = kinds.iter().map(|k| (*k, 5e6)).collect();
            slaswitch_testbed::scenario::parse_with_capacity(&path.display().to_string(), &text, &stand_in)
                .unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 15, "{n} scenarios");
}

#[test]
fn changes_and_targets_are_checked() {
    let base = "title = \"t\"\nduration_secs = 20\n[[vm]]\nname = \"vm1\"\nphases = [\"size=64,rate=1kpps\"]\n";
    let late = format!("{base}[[change]]\nat_secs = 25\nvm = \"vm1\"\nqos = {{ link_weight = 2 }}\n");
    let e = parse("t.toml", &late).unwrap_err();
    assert_eq!(e.field, "change[0].at_secs");
    let who = format!("{base}[[change]]\nat_secs = 5\nvm = \"vm9\"\nqos = {{ link_weight = 2 }}\n");
    assert!(parse("t.toml", &who).unwrap_err().message.contains("vm9"));
    let bad = format!("{base}[[variant]]\nname = \"x\"\nswitch = \"slaswitch\"\negress_scheduler = \"wfq\"\n");
    let e = parse("t.toml", &bad).unwrap_err();
    assert!(e.message.contains("fifo, ancs, softbw, pievde, ratelimit"), "{e}");
    let target = format!("{base}[[headline]]\nlabel = \"x\"\nkind = \"target\"\nvm = \"all\"\nwindow = [1, 20]\n");
    assert!(parse("t.toml", &target).unwrap_err().message.contains("expected_mbps"));
    let ok = format!("{target}expected_mbps = 100\n");
    parse("t.toml", &ok).expect("a target for all VMs");
    let recovery = format!("{base}[[headline]]\nlabel = \"x\"\nkind = \"recovery\"\nvm = \"vm1\"\nwindow = [5, 20]\n");
    let e = parse("t.toml", &recovery).unwrap_err();
    assert_eq!(e.field, "headline[0].expected_mbps", "{e}");
    let late = format!(
        "{base}[[headline]]\nlabel = \"x\"\nkind = \"recovery\"\nvm = \"vm1\"\nexpected_mbps = 1\nwindow = [5, 30]\n"
    );
    assert_eq!(parse("t.toml", &late).unwrap_err().field, "headline[0].window");
}

#[test]
fn line_rates_are_read_exactly_as_the_switch_reads_rates() {
    use slaswitch_testbed::scenario::parse_rate_bps;
    assert_eq!(parse_rate_bps("1gbps"), Ok(1_000_000_000));
    assert_eq!(parse_rate_bps("500Mbps"), Ok(500_000_000));
    assert_eq!(parse_rate_bps("2.5gbps"), Ok(2_500_000_000));
    assert_eq!(parse_rate_bps("1000"), Ok(1000));
    for bad in ["0bps", "1e-400bps", "0.5", "fast", "20tbps"] {
        assert!(parse_rate_bps(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_emulated_vms_ring_layout_is_a_host_setting() {
    use slaswitch_testbed::scenario::VirtioRing;
    let s = parse("ok.toml", GOOD).expect("parses");
    assert_eq!(s.host.vm_virtio_ring, VirtioRing::Split);
    let packed = GOOD.replace("[uplink]", "[host]\nvm_virtio_ring = \"packed\"\n\n[uplink]");
    let s = parse("ok.toml", &packed).expect("parses");
    assert_eq!(s.host.vm_virtio_ring, VirtioRing::Packed);
    assert_eq!(s.host.vm_virtio_ring.name(), "packed");
    let bad = packed.replace("\"packed\"", "\"ring\"");
    let (line, field, message) = error(&bad);
    assert_eq!(field, "host.vm_virtio_ring");
    assert_eq!(line, Some(line_of(&bad, "vm_virtio_ring")));
    assert!(message.contains("`ring`") && message.contains("`packed`"), "{message}");
    // A value of the wrong type in the second [[vm]] is named by its index.
    let (_, field, _) = error(&GOOD.replace("count = 3", "count = \"three\""));
    assert_eq!(field, "vm[1].count");
    // Inside an inline table, the key within it.
    let (_, field, _) = error(&GOOD.replace("priority = 2", "priority = \"high\""));
    assert_eq!(field, "vm[0].qos.priority");
}

#[test]
fn a_pmd_sleeps_only_as_long_as_both_switches_allow() {
    let s = parse("ok.toml", GOOD).expect("parses");
    assert_eq!(s.host.pmd_max_sleep_us, None, "never sleeps unless asked");
    let sleeping = GOOD.replace("[uplink]", "[host]\npmd_max_sleep_us = 50\n\n[uplink]");
    assert_eq!(parse("ok.toml", &sleeping).expect("parses").host.pmd_max_sleep_us, Some(50));
    let bad = sleeping.replace("= 50", "= 20000");
    let (line, field, message) = error(&bad);
    assert_eq!(field, "host.pmd_max_sleep_us");
    assert_eq!(line, Some(line_of(&bad, "pmd_max_sleep_us")));
    assert!(message.contains("20000") && message.contains("10000"), "{message}");
}
