//! The same scenario step translated for each switch: the settings each can express, and the
//! ones it cannot, listed rather than dropped.

use std::path::Path;

use slaswitch_testbed::plan::Attach;
use slaswitch_testbed::scenario::{parse, Step, SwitchKind};
use slaswitch_testbed::switches::plan;

const SCENARIO: &str = r#"
title = "translation"
duration_secs = 10
[classification]
security_group_masks = 3
[uplink]
kind = "sink"
[[vm]]
name = "vm1"
phases = ["size=64,rate=1mpps"]
qos = { ingress_policing_rate_kbps = 2000000, ingress_policing_burst_kb = 2000 }
[[vm]]
name = "vm2"
phases = ["size=64,rate=1mpps"]
qos = { ingress_policing_kpps = 600, min_rate_kbps = 1000, max_rate_kbps = 5000, weight = 3, priority = 2 }
"#;

fn step() -> (slaswitch_testbed::scenario::Scenario, Step) {
    let s = parse("t.toml", SCENARIO).expect("parses");
    let step = s.steps().remove(0);
    (s, step)
}

fn commands(kind: SwitchKind) -> (Vec<String>, slaswitch_testbed::plan::SwitchPlan) {
    let (s, st) = step();
    let p = plan(kind, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    (p.commands.iter().map(|c| c.join(" ")).collect(), p)
}

#[test]
fn slaswitch_gets_its_policers_and_lists_what_it_lacks() {
    let (cmds, p) = commands(SwitchKind::Slaswitch);
    assert!(cmds[0].contains("add-port uplink vhost-user ofport_request=1"), "{cmds:?}");
    assert!(
        cmds[1].contains(
            "add-port vm1 vhost-user ofport_request=2 ingress_policing_rate=2000000 ingress_policing_burst=2000"
        ),
        "{cmds:?}"
    );
    assert!(cmds[2].contains("ingress_policing_kpkts_rate=600"), "{cmds:?}");
    assert!(cmds.last().unwrap().contains("add-flows /run/x/flows.txt"));
    let flows = &p.files[0].1;
    assert!(flows.contains("priority=1,in_port=vm1,actions=output:uplink"), "{flows}");
    assert_eq!(flows.lines().filter(|l| l.contains("nw_src=172.")).count(), 3, "{flows}");
    // The generic egress minimum and maximum become the VM's minimum and maximum on the
    // uplink's link scheduler.
    assert!(cmds[2].contains("link_min_bps=1000000") && cmds[2].contains("link_max_bps=5000000"), "{cmds:?}");
    // C2QoS settings go to the port.
    assert!(cmds[2].contains("priority=2") && cmds[2].contains("weight=3"), "{cmds:?}");
    assert_eq!(p.attach[1], ("vm1".to_string(), Attach::VhostUser("/run/x/vm1.sock".into())));
}

#[test]
fn ovs_polices_bytes_on_the_interface_and_packets_with_a_meter() {
    let (cmds, p) = commands(SwitchKind::OvsDpdk);
    assert!(
        cmds.iter().any(|c| c.contains("add-port br0 vm1")
            && c.contains("type=dpdkvhostuser")
            && c.contains("ingress_policing_rate=2000000 ingress_policing_burst=2000")),
        "{cmds:?}"
    );
    assert!(
        cmds.iter().any(|c| c.contains("add-meter")
            && c.ends_with("meter=3,pktps,burst,band=type=drop,rate=600000,burst_size=16000")),
        "{cmds:?}"
    );
    let flows = &p.files[0].1;
    assert!(flows.contains("priority=1,in_port=3,actions=meter:3,output:1"), "{flows}");
    assert!(flows.contains("priority=1,in_port=2,actions=output:1"), "{flows}");
    assert!(
        p.unsupported.iter().any(|u| u.contains("max_rate_kbps together with ingress_policing_kpps")),
        "{:?}",
        p.unsupported
    );
    for field in ["min_rate_kbps", "weight", "priority"] {
        assert!(p.unsupported.iter().any(|u| u.contains(&format!("qos.{field}"))), "{field}: {:?}", p.unsupported);
    }
    assert!(p.notes.iter().any(|n| n.contains("ignores ingress_policing_kpkts_rate")));
    assert_eq!(p.attach[0].1, Attach::VhostUser("/run/x/uplink".into()));
    assert!(!p.unsupported.iter().any(|u| u.contains("c2tb_bucket_us")), "{:?}", p.unsupported);
    // A C2TB bucket depth is slaswitch's alone: the other switches list it.
    let s =
        parse("t.toml", &SCENARIO.replace("duration_secs = 10", "duration_secs = 10\n[host]\nc2tb_bucket_us = 1000"))
            .expect("parses");
    let st = s.steps().remove(0);
    for kind in [SwitchKind::OvsDpdk, SwitchKind::LinuxTc, SwitchKind::Vde2] {
        let p = plan(kind, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
        assert!(p.unsupported.iter().any(|u| u.contains("host.c2tb_bucket_us")), "{kind:?}: {:?}", p.unsupported);
    }
}

#[test]
fn linux_tc_polices_on_the_bridge_port_and_shapes_with_htb() {
    let (cmds, p) = commands(SwitchKind::LinuxTc);
    assert!(cmds.contains(&"ip link add svm1b type veth peer name svm1v".to_string()), "{cmds:?}");
    assert!(cmds.iter().all(|c| !c.contains("police")), "{cmds:?}");
    // vm1's byte policer becomes its class's ceiling; vm2's packet policer has no equivalent.
    assert!(
        cmds.iter().any(|c| c.contains("dev suplinkb parent 1:1 classid 1:a htb rate 8kbit ceil 2000000kbit")),
        "{cmds:?}"
    );
    assert!(p.notes.iter().any(|n| n.contains("shaped, not policed")));
    assert!(p.unsupported.iter().any(|u| u.contains("vm2: qos.ingress_policing_kpps")));
    assert!(
        cmds.iter()
            .any(|c| c
                .contains("dev suplinkb parent 1:1 classid 1:b htb rate 1000kbit ceil 5000kbit quantum 4542 prio 1")),
        "{cmds:?}"
    );
    assert!(cmds.iter().any(|c| c.contains("u32 match ether src") && c.contains("classid 1:b")), "{cmds:?}");
    assert!(p.unsupported.iter().any(|u| u.contains("security_group_masks")));
    assert!(p.undo.iter().any(|u| u.join(" ") == "ip link del svm1b"));
    assert_eq!(p.attach[1].1, Attach::AfPacket("svm1v".into()));
}

#[test]
fn vde2_has_no_qos_and_says_so() {
    let (_, p) = commands(SwitchKind::Vde2);
    assert_eq!(p.daemons.len(), 3);
    assert!(p.daemons[1].join(" ").ends_with("--sock /run/x/vde.ctl vvm1"));
    assert!(p.unsupported.iter().any(|u| u.contains("vm1: qos.ingress_policing_rate_kbps")));
    assert!(p.unsupported.iter().any(|u| u.contains("security_group_masks")));
}

#[test]
fn a_null_uplink_is_a_null_port_and_no_vm_attaches_to_it() {
    let text = SCENARIO.replace("kind = \"sink\"", "kind = \"null\"");
    let s = parse("t.toml", &text).expect("parses");
    let st = s.steps().remove(0);
    let sw = plan(SwitchKind::Slaswitch, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(sw.commands[0].join(" ").contains("add-port uplink null ofport_request=1"));
    assert!(sw.attach.iter().all(|(n, _)| n != "uplink"));
    let ovs = plan(SwitchKind::OvsDpdk, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(ovs.commands[0].join(" ").contains("type=dpdk options:dpdk-devargs=net_null0"));
    assert!(ovs.attach.iter().all(|(n, _)| n != "uplink"));
}

#[test]
fn namespace_vms_get_a_namespace_a_veth_and_an_af_packet_port() {
    let text = r#"
title = "tcp"
duration_secs = 10
[uplink]
kind = "namespace"
commands = ["iperf3 -s"]
[[vm]]
name = "vm1"
kind = "namespace"
commands = ["iperf3 -c {uplink_ip} -t {duration} -J"]
"#;
    let s = parse("t.toml", text).expect("parses");
    let st = s.steps().remove(0);
    let sw = plan(SwitchKind::Slaswitch, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    let cmds: Vec<String> = sw.commands.iter().map(|c| c.join(" ")).collect();
    assert!(cmds.contains(&"ip netns add ss-vm1".to_string()), "{cmds:?}");
    assert!(cmds.contains(&"ip -n ss-vm1 addr add 10.77.0.10/24 dev svm1v".to_string()), "{cmds:?}");
    assert!(cmds.contains(&"ip -n ss-uplink addr add 10.77.0.1/24 dev suplinkv".to_string()), "{cmds:?}");
    assert!(cmds.iter().any(|c| c.ends_with("add-port vm1 af-packet ofport_request=2 iface=svm1b")), "{cmds:?}");
    let ns_at = cmds.iter().position(|c| c == "ip netns add ss-vm1").unwrap();
    let port_at = cmds.iter().position(|c| c.contains("add-port vm1")).unwrap();
    assert!(ns_at < port_at, "the interface must exist before the port");
    assert!(sw.attach.is_empty(), "no emulated VM: {:?}", sw.attach);
    assert!(sw.undo.iter().any(|u| u.join(" ") == "ip netns del ss-vm1"));
    assert_eq!(
        slaswitch_testbed::namespaces::fill(&s.vms[0].commands[0], &s, &st, "vm1"),
        "iperf3 -c 10.77.0.1 -t 10 -J"
    );
    let ovs = plan(SwitchKind::OvsDpdk, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(ovs
        .commands
        .iter()
        .any(|c| c.join(" ").contains("options:dpdk-devargs=net_af_packet2,iface=svm1b,qpairs=1")));
    // VDE2: the tap plug runs inside the namespace, and the tap is given the VM's address.
    let vde = plan(SwitchKind::Vde2, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(vde.namespaces.iter().any(|(n, ns)| n == "vm1" && ns == "ss-vm1"), "{:?}", vde.namespaces);
    let daemons: Vec<String> = vde.daemons.iter().map(|c| c.join(" ")).collect();
    assert!(
        daemons.contains(&"ip netns exec ss-vm1 vde_plug2tap --sock /run/x/vde.ctl vvm1".to_string()),
        "{daemons:?}"
    );
    let after: Vec<String> = vde.after_daemons.iter().map(|c| c.join(" ")).collect();
    assert!(after.contains(&"ip -n ss-vm1 addr add 10.77.0.10/24 dev vvm1".to_string()), "{after:?}");
    assert!(vde.attach.is_empty(), "a namespace VM is not attached by af_packet: {:?}", vde.attach);
}

const LINK: &str = r#"
title = "link"
duration_secs = 30
[uplink]
name = "server"
kind = "namespace"
line_rate = "1gbps"
egress_scheduler = "pievde"
commands = ["iperf3 -s"]
[[tenant]]
name = "c1"
weight = 2
[[vm]]
name = "vm1"
kind = "namespace"
tenant = "c1"
commands = ["iperf3 -c {uplink_ip} -P {count}"]
qos = { link_weight = 2, link_guarantee = "strict:450M" }
[[vm]]
name = "vm2"
kind = "namespace"
commands = ["iperf3 -c {uplink_ip}"]
[sweep]
vm = "vm1"
counts = [1, 4]
flows = true
[[change]]
at_secs = 10
vm = "vm2"
qos = { link_max_bps = 100000000 }
"#;

#[test]
fn link_schedulers_tenants_and_live_changes_translate() {
    let s = parse("l.toml", LINK).expect("parses");
    let steps = s.steps();
    assert_eq!(steps[1].label, "vm1-flows=4");
    assert_eq!(steps[1].vms[0].name, "vm1", "a flow sweep keeps one VM");
    assert_eq!(steps[1].vms[0].commands[0], "iperf3 -c {uplink_ip} -P 4");
    let p = plan(SwitchKind::Slaswitch, &s, &steps[0], Path::new("/run/x"), Path::new("/opt/bin"));
    let cmds: Vec<String> = p.commands.iter().map(|c| c.join(" ")).collect();
    let tenant = cmds.iter().position(|c| c.ends_with("set-tenant c1 weight=2")).expect("tenant set");
    let vm1 = cmds.iter().position(|c| c.contains("add-port vm1")).expect("vm1 added");
    assert!(tenant < vm1, "the tenant exists before the port naming it: {cmds:?}");
    assert!(cmds[vm1].contains("tenant=c1") && cmds[vm1].contains("link_weight=2"), "{cmds:?}");
    assert!(cmds[vm1].contains("link_guarantee=strict:450M"), "{cmds:?}");
    assert!(cmds.iter().any(|c| c.contains("add-port server") && c.contains("egress_scheduler=pievde")), "{cmds:?}");
    assert!(p.unsupported.iter().all(|u| !u.contains("tenant")), "{:?}", p.unsupported);
    let (at, change) = &p.changes[0];
    assert_eq!(*at, 10.0);
    assert!(change[0].join(" ").ends_with("set-port vm2 link_max_bps=100000000"), "{change:?}");
    // Linux tc: htb classes changed live; weights become shares of the line rate.
    let tc = plan(SwitchKind::LinuxTc, &s, &steps[0], Path::new("/run/x"), Path::new("/opt/bin"));
    let changed: Vec<String> = tc.changes[0].1.iter().map(|c| c.join(" ")).collect();
    assert!(changed[1].contains("class change") && changed[1].contains("ceil 100000kbit"), "{changed:?}");
    assert!(changed[0].contains("rate 666666kbit"), "vm1 has weight 2 of 3: {changed:?}");
    assert!(tc.unsupported.iter().any(|u| u.contains("tenant c1")), "{:?}", tc.unsupported);
    let vde = plan(SwitchKind::Vde2, &s, &steps[0], Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(vde.unsupported.iter().any(|u| u.contains("change at 10 s")), "{:?}", vde.unsupported);
}

#[test]
fn qemu_guests_get_vhost_user_ports_of_the_mode_asked_on_both_switches() {
    let text = r#"
title = "guests"
duration_secs = 10
[uplink]
name = "srv"
kind = "qemu"
commands = ["iperf3 -s"]
[[vm]]
name = "g"
kind = "qemu"
port = "vhost-user-client"
commands = ["iperf3 -c {uplink_ip}"]
"#;
    let s = parse("g.toml", text).expect("parses");
    let st = s.steps().remove(0);
    let dir = Path::new("/run/x");
    let p = plan(SwitchKind::Slaswitch, &s, &st, dir, Path::new("/opt/bin"));
    let cmds: Vec<String> = p.commands.iter().map(|c| c.join(" ")).collect();
    assert!(cmds.iter().any(|c| c.contains("add-port srv vhost-user ofport_request=1")), "{cmds:?}");
    assert!(
        cmds.iter().any(|c| c.contains("add-port g vhost-user-client ofport_request=2 path=/run/x/g.sock")),
        "{cmds:?}"
    );
    let guest = |p: &slaswitch_testbed::plan::SwitchPlan, name: &str| {
        p.attach.iter().find(|(n, _)| n == name).map(|(_, a)| a.clone()).expect("attached")
    };
    assert_eq!(guest(&p, "g"), Attach::Guest { socket: dir.join("g.sock"), guest_serves: true });
    assert_eq!(guest(&p, "srv"), Attach::Guest { socket: dir.join("srv.sock"), guest_serves: false });
    // No emulated VM: the guests are not the tenant's.
    assert!(p.attach.iter().all(|(n, a)| a.tenant_arg(n).is_none()));

    let p = plan(SwitchKind::OvsDpdk, &s, &st, dir, Path::new("/opt/bin"));
    let cmds: Vec<String> = p.commands.iter().map(|c| c.join(" ")).collect();
    assert!(
        cmds.iter().any(|c| c.contains("type=dpdkvhostuserclient options:vhost-server-path=/run/x/g.sock")),
        "{cmds:?}"
    );
    assert_eq!(guest(&p, "srv"), Attach::Guest { socket: dir.join("srv"), guest_serves: false });
}

#[test]
fn a_dropped_vms_sample_flows_still_reach_the_uplink_and_a_bad_count_is_refused() {
    let text = SCENARIO
        .replace("security_group_masks = 3", "security_group_masks = 3\ndrop_from = [\"vm2\"]\nsample_flows = 64");
    let s = parse("t.toml", &text).expect("parses");
    let st = s.steps().remove(0);
    let p = plan(SwitchKind::Slaswitch, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    let flows = &p.files[0].1;
    assert!(flows.contains("priority=1,in_port=vm2,actions=drop"), "{flows}");
    assert!(flows.contains("priority=2,udp,in_port=vm2,tp_src=0x400/0xffc0,actions=output:uplink"), "{flows}");
    assert!(!flows.contains("in_port=vm1,tp_src"), "{flows}");
    let bad = SCENARIO.replace("security_group_masks = 3", "security_group_masks = 3\nsample_flows = 48");
    let e = parse("t.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("sample_flows") && e.contains("48") && e.contains("power of two"), "{e}");
}

#[test]
fn per_flow_rules_give_each_flow_its_own_rule_and_ovs_marks_them_with_a_cookie() {
    let text = SCENARIO.replace(
        "security_group_masks = 3",
        "security_group_masks = 3\nper_flow_rules_for = [\"vm1\"]\nper_flow_rules = 3",
    );
    let s = parse("t.toml", &text).expect("parses");
    let st = s.steps().remove(0);
    let p = plan(SwitchKind::Slaswitch, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    let flows = &p.files[0].1;
    for port in [1024, 1025, 1026] {
        assert!(flows.contains(&format!("priority=2,udp,in_port=vm1,tp_src={port},actions=output:")), "{flows}");
    }
    assert!(!flows.contains("tp_src=1027") && !flows.contains("in_port=vm2,tp_src"), "{flows}");
    let p = plan(SwitchKind::OvsDpdk, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    let flows = &p.files.iter().find(|f| f.0.ends_with("flows.txt")).expect("a flows file").1;
    assert_eq!(flows.matches("cookie=0x5f,priority=2,udp,in_port=").count(), 3, "{flows}");
    assert!(p.commands.iter().any(|c| c.join(" ").contains("--bundle add-flows")), "{:?}", p.commands);
    for (bad, says) in [
        ("per_flow_rules_for = [\"vm9\"]\nper_flow_rules = 3", "no [[vm]] named 'vm9'"),
        ("per_flow_rules_for = [\"vm1\"]\nper_flow_rules = 60001", "60001 is not allowed"),
        ("per_flow_rules = 5", "5 is not allowed"),
    ] {
        let text = SCENARIO.replace("security_group_masks = 3", &format!("security_group_masks = 3\n{bad}"));
        let e = parse("t.toml", &text).unwrap_err().to_string();
        assert!(e.contains("per_flow_rules") && e.contains(says), "{e}");
    }
}
