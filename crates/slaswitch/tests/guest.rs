//! A real guest on the switch: QEMU with Debian's kernel (`scripts/guest-image`, built here if
//! missing) on a vhost-user port, a namespace on a tap port, ping and TCP both ways between
//! them, and the switch's counters against the guest's own.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use slaswitch_testbed::guest::{self, Guest, GuestConfig};

fn sh(cmd: &str) -> (bool, String) {
    let out = std::process::Command::new("sh").args(["-c", cmd]).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Deletes the namespace even if the test fails.
struct Namespace(String);
impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns del {}", self.0));
    }
}

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
    let _ns = Namespace(ns.clone());
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
        let out = in_guest(&mut g, &format!("iperf3 -c 10.79.0.1 -p 5298 -t 3 -J{reverse}"), 60);
        let doc: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3{reverse}: {e}: {out}"));
        let bps = doc["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
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
