//! Churn under traffic: while two steady VMs send at a fixed rate, ports are added and removed,
//! a VM connects, sends and disconnects, and QoS settings change, every second. The steady VMs
//! lose nothing, no port or file descriptor is left behind, the daemon's memory stays flat and
//! every mbuf comes back. The CI runs it for 20 s; `SLASWITCH_SOAK_SECS=600` runs the long form
//! (`scripts/soak`).

mod common;

use std::time::{Duration, Instant};

use common::*;

fn rx(sw: &Switch, port: &str) -> u64 {
    sw.port(port)["rx"]["rx_packets"].as_u64().unwrap()
}

fn mbufs_in_use(sw: &Switch) -> u64 {
    sw.json(&["pmd-stats"])["mbufs"]["in_use"].as_u64().unwrap()
}

#[test]
fn ports_vms_and_settings_churning_under_traffic_leak_nothing_and_disturb_no_one() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let secs: u64 = std::env::var("SLASWITCH_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let sw = Switch::start("churn", &["--mbufs", "16383"]);
    sw.ok(&["add-port", "up", "null"]);
    for p in ["s1", "s2"] {
        sw.ok(&["add-port", p, "vhost-user"]);
    }
    std::thread::sleep(Duration::from_millis(500));
    let idle_mbufs = mbufs_in_use(&sw);
    // Taken before any VM connects: once every VM is gone the daemon holds these again.
    let idle_fds = sw.rss_kib_and_fds().1;
    let rate_pps = 50_000.0;
    let steady = Tenant::start(
        &sw.dir,
        "steady",
        &[("s1", &sw.port_sock("s1")), ("s2", &sw.port_sock("s2"))],
        1024,
        secs as f64 + 8.0,
        &["gen", "--phase", "size=128,rate=50kpps"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let (rss0, fds0) = sw.rss_kib_and_fds();
    let ports0 = sw.json(&["list-ports"]).as_array().unwrap().len();
    let (s1_0, s2_0, t0) = (rx(&sw, "s1"), rx(&sw, "s2"), Instant::now());
    let mut rss_max = rss0;
    let mut round = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        round += 1;
        let name = format!("c{}", round % 3);
        sw.ok(&["add-port", &name, "vhost-user"]);
        sw.ok(&["set-port", &name, "priority=2", "cycles_per_sec=100000000"]);
        sw.ok(&["set-port", "s1", &format!("priority={}", 3 + round % 4)]);
        // A VM connects, sends a burst and goes away.
        let vm = Tenant::start(
            &sw.dir,
            &format!("churn{round}"),
            &[(&name, &sw.port_sock(&name))],
            256,
            0.3,
            &["gen", "--phase", "size=64,rate=200kpps"],
        );
        vm.finish();
        sw.ok(&["del-port", &name]);
        rss_max = rss_max.max(sw.rss_kib_and_fds().0);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (s1, s2) = ((rx(&sw, "s1") - s1_0) as f64 / elapsed, (rx(&sw, "s2") - s2_0) as f64 / elapsed);
    steady.finish();
    std::thread::sleep(Duration::from_millis(500));
    let (rss1, fds1) = sw.rss_kib_and_fds();
    eprintln!(
        "{round} rounds in {elapsed:.0} s: steady VMs {s1:.0} and {s2:.0} pps of {rate_pps}; RSS {rss0} -> {rss1} KiB (max {rss_max}); fds {idle_fds} idle, {fds0} under traffic, {fds1} after"
    );
    assert!(round >= secs / 4, "only {round} churn rounds in {elapsed:.0} s");
    for (vm, got) in [("s1", s1), ("s2", s2)] {
        assert!((got / rate_pps - 1.0).abs() < 0.02, "{vm} got {got:.0} pps of {rate_pps} while the others churned");
    }
    assert_eq!(sw.json(&["list-ports"]).as_array().unwrap().len(), ports0, "a churned port was left behind");
    assert!(fds1 <= idle_fds, "file descriptors: {idle_fds} before any VM, {fds1} after every VM left");
    assert!(rss1 <= rss0 + 8 * 1024, "RSS grew {rss0} -> {rss1} KiB");
    // Every mbuf comes back once the traffic stops.
    let t = Instant::now();
    while mbufs_in_use(&sw) > idle_mbufs + 64 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let in_use = mbufs_in_use(&sw);
    assert!(in_use <= idle_mbufs + 64, "mbufs in use: {idle_mbufs} idle before, {in_use} after");
}
