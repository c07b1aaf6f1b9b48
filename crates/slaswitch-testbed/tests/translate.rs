//! The same scenario step translated for each switch: the settings each can express, and the
//! ones it cannot, listed rather than dropped.

use std::path::Path;

use slaswitch_testbed::plan::{plan, Attach};
use slaswitch_testbed::scenario::{parse, Step, SwitchKind};

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
    for field in ["min_rate_kbps", "max_rate_kbps"] {
        assert!(p.unsupported.iter().any(|u| u.contains(field)), "{field} not listed: {:?}", p.unsupported);
    }
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
    let vde = plan(SwitchKind::Vde2, &s, &st, Path::new("/run/x"), Path::new("/opt/bin"));
    assert!(vde.namespaces.is_empty() && vde.unsupported.iter().any(|u| u.contains("namespace VMs")));
}
