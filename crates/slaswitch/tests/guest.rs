//! A real guest on the switch: QEMU with Debian's kernel (`scripts/guest-image`, built here if
//! missing) on a vhost-user port, a namespace on a tap port, ping and TCP both ways between
//! them, and the switch's counters against the guest's own. The guest uses TSO: its large
//! segments are cut for the tap port (IPv4 and IPv6), also when the tap port is paced, and for
//! a second guest that takes only whole frames.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use slaswitch_testbed::guest::{self, Guest, GuestConfig};

/// The guest image, built by the repository's script when this machine has none.
fn guest_image() {
    if guest::image().is_ok() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest-image");
    let (ok, out) = sh(&script.display().to_string());
    assert!(ok && guest::image().is_ok(), "scripts/guest-image failed: {out}");
}

/// Runs `cmd` in the guest and returns its output; fails the test on a non-zero status.
fn in_guest(g: &mut Guest, cmd: &str, timeout_secs: u64) -> String {
    let job = g.start(cmd).unwrap();
    let (status, out) = job.wait(Duration::from_secs(timeout_secs)).unwrap();
    assert_eq!(status, 0, "`{cmd}` in the guest failed: {out}");
    out
}

/// Received bits per second of an iperf3 client run in the guest with `args`.
fn iperf3_bps(g: &mut Guest, args: &str) -> f64 {
    let out = in_guest(g, &format!("iperf3 {args} -J"), 60);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 {args}: {e}: {out}"));
    doc["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0)
}

fn counter(g: &mut Guest, name: &str) -> u64 {
    in_guest(g, &format!("cat /sys/class/net/eth0/statistics/{name}"), 20).trim().parse().unwrap()
}

#[test]
fn a_qemu_guest_passes_ping_and_tcp_through_the_switch_and_its_counters_match() {
    let _g = serial();
    if !can_run_with(&[Component::Namespaces, Component::Iperf3, Component::Qemu]) {
        return;
    }
    guest_image();
    let tag = std::process::id() % 10000;
    let (ns, tap) = (format!("ssg{tag}"), format!("stg{tag}"));
    let _ns = OnDrop(vec![format!("ip netns del {ns}")]);
    let sw = Switch::start("guest", &[]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-port", "host", "tap", &format!("iface={tap}")]);
    let (ok, out) = sh(&format!(
        "ip netns add {ns} && ip link set {tap} netns {ns} && ip -n {ns} addr add 10.79.0.1/24 dev {tap} \
         && ip -n {ns} link set {tap} up && ip -n {ns} link set lo up \
         && ip netns exec {ns} ethtool -K {tap} tx off rx off tso off gso off gro off >/dev/null"
    ));
    assert!(ok, "namespace setup: {out}");
    let mut g = Guest::boot(&GuestConfig {
        name: "vm1".into(),
        mac: mac("vm1"),
        ip_cidr: "10.79.0.2/24".into(),
        vhost_socket: sw.port_sock("vm1").into(),
        guest_serves: false,
        core: 1,
        dir: sw.dir.join("guest"),
        receive_tso: true,
    })
    .unwrap();
    let ready = g.wait_ready(Duration::from_secs(180)).unwrap();
    eprintln!("guest up ({}): {}", g.accel.name(), ready.replace('\n', "; "));

    // The switch offers TSO on its vhost ports: the guest sends TCP segments of up to 64 KB.
    let features = in_guest(&mut g, "ethtool -k eth0", 20);
    assert!(features.contains("tcp-segmentation-offload: on"), "the guest's offloads: {features}");
    let out = in_guest(&mut g, "ping -c 5 -i 0.2 10.79.0.1", 30);
    assert!(out.contains(" 0% packet loss"), "ping from the guest: {out}");
    // TCP both ways: the guest's partial checksums must reach the namespace's kernel, which
    // checks every checksum (its offloads are off).
    let server = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "iperf3", "-s", "-p", "5298"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(server);
    std::thread::sleep(Duration::from_millis(500));
    for reverse in ["", " -R"] {
        let bps = iperf3_bps(&mut g, &format!("-c 10.79.0.1 -p 5298 -t 3{reverse}"));
        eprintln!("iperf3{reverse} guest and namespace through slaswitch: {:.0} Mbit/s", bps / 1e6);
        assert!(bps > 10e6, "TCP{reverse} between the guest and the namespace: {bps} bit/s");
    }
    // The guest's large segments were cut for the tap port (which takes no offloads), every
    // one of them, and only at the switch: the namespace's kernel took whole frames.
    let offload = &sw.port("vm1")["rx"]["offload"];
    eprintln!("segmentation for the tap port: {offload}");
    assert!(offload["segmented"].as_u64().unwrap() > 0, "no large segment from the guest was cut: {offload}");
    assert!(offload["segments"].as_u64().unwrap() > offload["segmented"].as_u64().unwrap(), "{offload}");
    assert_eq!(offload["drops"].as_u64().unwrap(), 0, "{offload}");
    // That work is in the guest port's egress cycles, which C2QoS charges to it.
    let rx = &sw.port("vm1")["rx"];
    assert!(rx["egress_cycles"].as_u64().unwrap() >= offload["segment_cycles"].as_u64().unwrap(), "{rx}");

    // IPv6 (the namespace's kernel checks the TCP checksums over the IPv6 pseudo-header).
    let (ok, out) = sh(&format!("ip -n {ns} -6 addr add fd79::1/64 dev {tap} nodad"));
    assert!(ok, "{out}");
    in_guest(&mut g, "ip -6 addr add fd79::2/64 dev eth0 && sleep 2", 30);
    let segmented = |sw: &Switch| sw.port("vm1")["rx"]["offload"]["segmented"].as_u64().unwrap();
    let before_v6 = segmented(&sw);
    let bps = iperf3_bps(&mut g, "-6 -c fd79::1 -p 5298 -t 2");
    eprintln!("iperf3 over IPv6 guest to namespace: {:.0} Mbit/s", bps / 1e6);
    assert!(bps > 10e6, "TCP over IPv6: {bps} bit/s");
    assert!(segmented(&sw) > before_v6, "no IPv6 segment was cut");

    // The tap port paced to 100 Mbit/s: the guest's segments are cut before its link, which
    // sends and counts the frames the wire carries.
    sw.ok(&["set-port", "host", "link_rate_bps=100000000"]);
    let before_paced = segmented(&sw);
    let bps = iperf3_bps(&mut g, "-c 10.79.0.1 -p 5298 -t 3");
    eprintln!("iperf3 through the tap port paced to 100 Mbit/s: {:.1} Mbit/s", bps / 1e6);
    assert!(bps > 10e6 && bps < 101e6, "TCP through the paced port: {bps} bit/s");
    assert!(segmented(&sw) > before_paced, "no segment was cut for the paced port");
    let host = sw.port("host");
    assert_eq!(host["tx_mtu_dropped"].as_u64().unwrap(), 0, "{host}");
    sw.ok(&["set-port", "host", "link_rate_bps=0"]);

    // A second guest whose device takes only whole frames (no GUEST_TSO4/6): the first
    // guest's large segments are cut for it, and its kernel checks every frame.
    sw.ok(&["add-port", "vm2", "vhost-user"]);
    let mut g2 = Guest::boot(&GuestConfig {
        name: "vm2".into(),
        mac: mac("vm2"),
        ip_cidr: "10.79.0.3/24".into(),
        vhost_socket: sw.port_sock("vm2").into(),
        guest_serves: false,
        core: 1,
        dir: sw.dir.join("guest2"),
        receive_tso: false,
    })
    .unwrap();
    g2.wait_ready(Duration::from_secs(180)).unwrap();
    let _server2 = g2.start("iperf3 -s -p 5299").unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let before_g2 = segmented(&sw);
    let bps = iperf3_bps(&mut g, "-c 10.79.0.3 -p 5299 -t 3");
    eprintln!("iperf3 guest to a guest without receive TSO: {:.0} Mbit/s", bps / 1e6);
    assert!(bps > 10e6, "TCP to the guest without receive TSO: {bps} bit/s");
    assert!(segmented(&sw) > before_g2, "no segment was cut for the guest without receive TSO");
    let vm2 = sw.port("vm2");
    assert_eq!(vm2["tx_mtu_dropped"].as_u64().unwrap(), 0, "{vm2}");
    drop(g2);
    sw.ok(&["del-port", "vm2"]);

    // Every frame the guest sent, the switch received from it, and the other way. The switch's
    // figures are a snapshot taken each second; the guest may send a stray frame of its own
    // (neighbour discovery) meanwhile, so compare over a second in which its counters held.
    let mut last = String::new();
    for _ in 0..10 {
        let before = (counter(&mut g, "tx_packets"), counter(&mut g, "rx_packets"));
        std::thread::sleep(Duration::from_millis(1200));
        let port = sw.port("vm1");
        let switch = (port["rx"]["rx_packets"].as_u64().unwrap(), port["tx_packets"].as_u64().unwrap());
        let after = (counter(&mut g, "tx_packets"), counter(&mut g, "rx_packets"));
        if before == after && switch == after {
            return;
        }
        last = format!("guest (tx, rx) {before:?} then {after:?}, switch port (rx, tx) {switch:?}");
    }
    panic!("the switch's counters never matched the guest's: {last}");
}
