//! Every kind of drop the switch makes is counted on the port it belongs to, in `port-stats` and
//! in the metrics: each kind of malformed frame (sent by an emulated VM), a frame longer than an
//! output port's MTU (and the same frame delivered where the MTU allows it), a frame for a VM
//! that is not connected, a frame no rule matches, a frame over its port's ingress policer.
//! Frames from the kernel side of tap ports are written with raw sockets. DPDK 22.11's tap
//! driver sends nothing over 1504 bytes of MTU but receives longer frames chained, so the jumbo
//! frame enters on a tap port whose kernel side has MTU 9000 and leaves on a null port.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Sends `count` raw frames of `size` bytes out of kernel interface `iface`: broadcast, IPv4,
/// UDP to port `dport`.
fn send_frames(iface: &str, size: usize, count: usize, dport: u16) {
    let py = format!(
        r#"import socket, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("{iface}", 0))
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, {size} - 14, 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
udp = struct.pack("!HHHH", 4000, {dport}, {size} - 34, 0)
frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + udp
for _ in range({count}):
    s.send(frame + bytes({size} - len(frame)))
"#
    );
    let (ok, out) = sh(&format!("python3 -c '{py}'"));
    assert!(ok, "sending from {iface}: {out}");
}

fn field(p: &Value, path: &[&str]) -> u64 {
    path.iter().fold(p, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("{path:?} in {p}"))
}

/// Waits up to 5 s for `port`'s `path` counter to reach `at_least`; returns its value.
fn wait_for(sw: &Switch, port: &str, path: &[&str], at_least: u64) -> u64 {
    let t = Instant::now();
    loop {
        let v = field(&sw.port(port), path);
        if v >= at_least || t.elapsed() > Duration::from_secs(5) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_kind_of_drop_is_counted_on_its_port() {
    let _g = serial();
    if !can_run_with(&[Component::Namespaces]) {
        return;
    }
    let tag = std::process::id() % 10000;
    let sw = Switch::start("drops", &["--metrics", "127.0.0.1:19478"]);
    let iface = |p: &str| format!("sd{p}{tag}");
    let _links = OnDrop(["in", "small", "pol", "x"].iter().map(|p| format!("ip link del {}", iface(p))).collect());
    // A driver's limit is refused by name, with the most it takes.
    let (ok, _, err) = sw.cli(&["add-port", "x", "tap", &format!("iface={}", iface("x")), "mtu_request=9000"]);
    assert!(!ok && err.contains("mtu_request=9000") && err.contains("at most 1504"), "{err}");
    assert!(!sw.ok(&["list-ports"]).contains(" x"), "the refused port is not there");
    sw.ok(&["add-port", "in", "tap", &format!("iface={}", iface("in"))]);
    sw.ok(&["add-port", "big", "null", "mtu_request=9000"]);
    sw.ok(&["add-port", "small", "tap", &format!("iface={}", iface("small")), "mtu_request=1400"]);
    sw.ok(&["add-port", "gone", "vhost-user"]);
    // 8 kbit/s with a 1 kbit burst: a few frames of 1000 bytes go over it.
    sw.ok(&[
        "add-port",
        "pol",
        "tap",
        &format!("iface={}", iface("pol")),
        "ingress_policing_rate=8",
        "ingress_policing_burst=1",
    ]);
    sw.ok(&["add-port", "evil", "vhost-user"]);
    for p in ["in", "small", "pol"] {
        let (ok, out) = sh(&format!("ip link set {} up", iface(p)));
        assert!(ok, "{out}");
    }
    // The switch gave the kernel side of a tap port its MTU.
    let mtu = |p: &str| std::fs::read_to_string(format!("/sys/class/net/{}/mtu", iface(p))).unwrap();
    assert_eq!((mtu("in").trim(), mtu("small").trim()), ("1500", "1400"));
    let (ok, out) = sh(&format!("ip link set {} mtu 9000", iface("in")));
    assert!(ok, "{out}");

    // A 9000-byte broadcast from `in` floods: `big` (MTU 9000) sends it whole, `small` (1400),
    // `gone` and `evil` (1500) drop it for their MTU.
    let before = |p: &str, path: &[&str]| field(&sw.port(p), path);
    let (big0, small0) = (before("big", &["tx_bytes"]), before("small", &["tx_mtu_dropped"]));
    send_frames(&iface("in"), 9000, 1, 9);
    assert!(wait_for(&sw, "big", &["tx_bytes"], big0 + 9000) >= big0 + 9000, "{}", sw.port("big"));
    assert_eq!(wait_for(&sw, "small", &["tx_mtu_dropped"], small0 + 1), small0 + 1, "{}", sw.port("small"));
    assert!(wait_for(&sw, "evil", &["tx_mtu_dropped"], 1) >= 1, "{}", sw.port("evil"));
    assert!(wait_for(&sw, "gone", &["tx_mtu_dropped"], 1) >= 1, "{}", sw.port("gone"));
    // A 1450-byte one fits everywhere but `small`; `gone` drops it for want of a VM.
    let (small1, gone0) = (before("small", &["tx_mtu_dropped"]), before("gone", &["tx_dropped"]));
    send_frames(&iface("in"), 1450, 1, 9);
    assert_eq!(wait_for(&sw, "small", &["tx_mtu_dropped"], small1 + 1), small1 + 1, "{}", sw.port("small"));
    assert!(wait_for(&sw, "gone", &["tx_dropped"], gone0 + 1) > gone0, "{}", sw.port("gone"));

    // Over the policer: 20 frames of 1000 bytes against a 1 kbit burst.
    send_frames(&iface("pol"), 1000, 20, 9);
    assert!(wait_for(&sw, "pol", &["rx", "policer_drops"], 1) >= 1, "{}", sw.port("pol"));

    // Malformed frames, each kind for half a second at 2,000 frames/s.
    let kinds = slaswitch::tenant::frames::Malformed::ALL;
    let phases: Vec<String> = kinds
        .iter()
        .enumerate()
        .map(|(i, (name, _))| format!("start={},dur=0.5,vm=evil,size=64,rate=2kpps,malformed={name}", i as f64 * 0.5))
        .collect();
    let mut args = vec!["gen"];
    for p in &phases {
        args.extend(["--phase", p.as_str()]);
    }
    let gen = Tenant::start(&sw.dir, "drops", &[("evil", &sw.port_sock("evil"))], 1024, 4.5, &args);
    let doc = gen.finish();
    let sent = sent_by(&doc, "evil");
    let expected_kind = [0usize, 1, 2, 3, 3, 4, 5, 6];
    let t = Instant::now();
    let mut evil = sw.port("evil");
    let counted = |p: &Value| -> Vec<u64> {
        p["rx"]["parse_errors"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
    };
    while counted(&evil).iter().sum::<u64>() < sent && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        evil = sw.port("evil");
    }
    let by_kind = counted(&evil);
    assert_eq!(by_kind.iter().sum::<u64>(), sent, "every malformed frame counted once: {by_kind:?}, sent {sent}");
    for (k, (name, _)) in expected_kind.iter().zip(kinds.iter()) {
        assert!(by_kind[*k] > 0, "{name} frames were counted under no kind {k}: {by_kind:?}");
    }
    // Received (so counted in rx_packets too), and none of them forwarded.
    assert_eq!(field(&evil, &["rx", "rx_packets"]), sent, "{evil}");

    // With a rule in force, a frame no rule matches is dropped and counted.
    sw.ok(&["add-flow", "in_port=evil,actions=output:big"]);
    let rule0 = field(&sw.port("in"), &["rx", "dropped_by_rules"]);
    send_frames(&iface("in"), 100, 3, 9);
    assert!(wait_for(&sw, "in", &["rx", "dropped_by_rules"], rule0 + 3) >= rule0 + 3, "{}", sw.port("in"));

    // The same figures in port-stats and the metrics.
    let text = sw.ok(&["port-stats"]);
    for word in ["malformed:", "rule-drops:", "policed:", "dropped:", "mtu-drops:", "device-errors:"] {
        assert!(text.contains(word), "port-stats lacks {word}: {text}");
    }
    // Scrapes read the snapshot the daemon takes every second.
    std::thread::sleep(Duration::from_millis(1500));
    let m = metrics("127.0.0.1:19478");
    let small_mtu = format!("slaswitch_port_tx_mtu_dropped_total{{port=\"small\"}} {}", small1 + 1);
    for family in [
        small_mtu.as_str(),
        "slaswitch_port_tx_dropped_total{port=\"gone\"}",
        "slaswitch_port_policer_dropped_total{port=\"pol\"}",
        "slaswitch_port_rule_dropped_total{port=\"in\"}",
        "slaswitch_port_parse_errors_total{",
        "slaswitch_port_offload_dropped_total{port=\"evil\"} 0",
    ] {
        assert!(m.contains(family), "metrics lack {family}: {m}");
    }
}
