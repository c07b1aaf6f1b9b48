//! Several PMD threads: a purchase is placed on the core that can hold it, admission is per core,
//! a purchase that outgrows its core moves the port, a port moved between PMDs under traffic
//! loses and reorders no frame, and the switch moves a port by itself when the host takes
//! enough of its core that the purchases there can no longer be kept. On a 2-core machine the second PMD shares its core with the
//! VMs: these tests check correctness, not speed.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn core_of(sw: &Switch, port: &str) -> u64 {
    sw.json(&["qos-show"])["ports"].as_array().unwrap().iter().find(|p| p["name"] == port).unwrap()["pmd_core"]
        .as_u64()
        .unwrap()
}

#[test]
fn purchases_are_placed_and_admitted_per_core_and_a_grown_purchase_moves_its_port() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("placement", &["--pmd-cores", "0,1", "--pmd-rebalance", "off"]);
    let hz = sw.json(&["qos-show"])["tsc_hz"].as_u64().unwrap();
    // 60% of a core each: the second cannot go where the first is.
    let big = format!("cycles_per_sec={}", hz * 6 / 10);
    sw.ok(&["add-port", "a", "null", &big]);
    sw.ok(&["add-port", "b", "null", &big]);
    assert_ne!(core_of(&sw, "a"), core_of(&sw, "b"));
    // A third fits on neither core, and the refusal names both.
    let (ok, _, err) = sw.cli(&["add-port", "c", "null", &big]);
    assert!(!ok && err.contains("core 0") && err.contains("core 1"), "{err}");
    // A small purchase goes beside either; growing it beyond what its core has left moves it
    // to the core with room, if there is one.
    sw.ok(&["add-port", "c", "null", &format!("cycles_per_sec={}", hz / 10)]);
    let c_core = core_of(&sw, "c");
    let (other, neighbour) = if c_core == core_of(&sw, "a") { ("b", "a") } else { ("a", "b") };
    sw.ok(&["set-port", other, &format!("cycles_per_sec={}", hz * 3 / 10)]);
    sw.ok(&["set-port", "c", &format!("cycles_per_sec={}", hz * 5 / 10)]);
    assert_eq!(core_of(&sw, "c"), core_of(&sw, other), "c should have moved away from {neighbour}");
    // Pinned (`pmd=N`), it stays and is refused instead.
    let pin = format!("pmd={}", core_of(&sw, "c"));
    sw.ok(&["set-port", "c", &pin, &format!("cycles_per_sec={}", hz / 10)]);
    let (ok, _, err) = sw.cli(&["set-port", "c", &format!("cycles_per_sec={}", hz * 7 / 10)]);
    assert!(!ok && err.contains("cycles"), "{err}");
}

#[test]
fn a_port_moved_between_pmds_under_traffic_loses_and_reorders_no_frame() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("moves", &["--pmd-cores", "0,1", "--pmd-rebalance", "off"]);
    sw.ok(&["add-port", "sink", "vhost-user", "pmd=0"]);
    sw.ok(&["add-port", "vm1", "vhost-user", "pmd=0"]);
    sw.ok(&["add-flow", "in_port=vm1,actions=output:sink"]);
    let (sink, gen) = Tenant::sink_and_senders(&sw, &["vm1"], 9.0, 5.0);
    std::thread::sleep(Duration::from_millis(800));
    // Back and forth while it sends: each move is two steps (release, then pick-up).
    let (mut moves, t0, mut took_ms) = (0, Instant::now(), Vec::new());
    while t0.elapsed() < Duration::from_secs(3) {
        let to = if moves % 2 == 0 { 1 } else { 0 };
        let asked = Instant::now();
        sw.ok(&["set-port", "vm1", &format!("pmd={to}")]);
        took_ms.push(asked.elapsed().as_secs_f64() * 1e3);
        assert_eq!(core_of(&sw, "vm1"), to);
        moves += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let gen = gen.finish();
    let sink = sink.finish();
    let sent = sent_by(&gen, "vm1");
    let got = received_from(&sink, "vm1");
    let reordered = reordered_from(&sink, "vm1");
    took_ms.sort_by(f64::total_cmp);
    eprintln!(
        "{moves} moves, each {:.1} ms median, {:.1} ms at most (the CLI's round trip: an upper bound); vm1 sent {sent}, the sink got {got}, {reordered} out of order",
        took_ms[took_ms.len() / 2],
        took_ms[took_ms.len() - 1]
    );
    assert!(moves >= 10, "only {moves} moves");
    assert!(sent > 50_000, "the generator sent only {sent}");
    assert_eq!(sw.port("vm1")["rx"]["rx_packets"].as_u64().unwrap(), sent, "the switch did not take every frame");
    assert_eq!(got, sent, "frames lost across the moves");
    assert_eq!(reordered, 0, "frames reordered across the moves");
}

/// Runs `sh -c 'while :; do :; done'` on core 1 until dropped: the host taking half the core
/// from the PMD polling there.
struct Hog(std::process::Child);

impl Hog {
    fn on_core_1() -> Hog {
        Hog(std::process::Command::new("taskset")
            .args(["-c", "1", "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("taskset (util-linux)"))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 15 s for `port` to be polled on `core`; returns the switch's moves.
fn wait_until_on(sw: &Switch, port: &str, core: u64) -> serde_json::Value {
    let t0 = Instant::now();
    while core_of(sw, port) != core && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let moves = sw.json(&["qos-show"])["pmd_moves"].clone();
    eprintln!("after {:.1} s: {moves}", t0.elapsed().as_secs_f64());
    moves
}

/// Starts a switch with PMDs on cores 0 and 1 and adds null ports buying these shares of a
/// core, in order.
fn switch_with_purchases(name: &str, shares_pct: &[(&str, u64)]) -> Switch {
    let sw = Switch::start(name, &["--pmd-cores", "0,1"]);
    let hz = sw.json(&["qos-show"])["tsc_hz"].as_u64().unwrap();
    for (port, pct) in shares_pct {
        sw.ok(&["add-port", port, "null", &format!("cycles_per_sec={}", hz * pct / 100)]);
    }
    sw
}

#[test]
fn a_port_whose_core_the_host_takes_moves_by_itself_to_a_core_that_can_keep_its_purchase() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = switch_with_purchases("automatic", &[("a", 15), ("b", 60)]);
    assert_eq!((core_of(&sw, "a"), core_of(&sw, "b")), (0, 1), "each purchase on the core with the most room");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(core_of(&sw, "b"), 1, "moved while its core was whole");
    let pmds = sw.json(&["pmd-stats"])["pmds"].clone();
    assert!(pmds.as_array().unwrap().iter().all(|p| p["run_ns"].as_u64().is_some_and(|ns| ns > 0)), "{pmds}");
    // A busy process on core 1: the kernel gives the PMD there about half of it, less than b
    // bought, while core 0 has room for b.
    let hog = Hog::on_core_1();
    let moves = wait_until_on(&sw, "b", 0);
    drop(hog);
    assert_eq!(core_of(&sw, "b"), 0, "b stayed on the core the host took: {moves}");
    let last = moves["recent"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["port"].as_str(), last["reason"].as_str()), (Some("b"), Some("over_promised")), "{moves}");
    assert_eq!((last["from_core"].as_u64(), last["to_core"].as_u64()), (Some(1), Some(0)), "{moves}");
    assert_eq!(core_of(&sw, "a"), 0, "a had no reason to move");
}

#[test]
fn ports_too_big_to_move_alone_trade_cores_when_the_host_takes_one() {
    let _g = serial();
    if !can_run() {
        return;
    }
    // a (40%) and c (20%) on core 0, b (60%) on core 1: once the host takes half of core 1, b
    // fits neither there nor, alone, on core 0; b for a fits both.
    let sw = switch_with_purchases("swap", &[("a", 40), ("b", 60), ("c", 20)]);
    let cores = |sw: &Switch| ["a", "b", "c"].map(|p| core_of(sw, p));
    assert_eq!(cores(&sw), [0, 1, 0]);
    let hog = Hog::on_core_1();
    let moves = wait_until_on(&sw, "b", 0);
    drop(hog);
    assert_eq!(cores(&sw), [1, 0, 0], "{moves}");
    let last = moves["recent"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["port"].as_str(), last["swapped_with"].as_str()), (Some("b"), Some("a")), "{moves}");
    assert!(last["refused"].is_null(), "{moves}");
}

#[test]
fn a_swap_under_traffic_loses_and_reorders_no_frame_of_either_port() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("swap-traffic", &["--pmd-cores", "0,1"]);
    let hz = sw.json(&["qos-show"])["tsc_hz"].as_u64().unwrap();
    let buy = |pct: u64| format!("cycles_per_sec={}", hz * pct / 100);
    sw.ok(&["add-port", "sink", "vhost-user", "pmd=0"]);
    // x (60%) goes on core 1, y (40%) and z (20%) beside the sink on core 0: once the host
    // takes half of core 1 (the VMs' process spins there, and a busy process), x fits nowhere
    // alone and trades cores with y while both send.
    sw.ok(&["add-port", "x", "vhost-user", &buy(60)]);
    sw.ok(&["add-port", "y", "vhost-user", &buy(40)]);
    sw.ok(&["add-port", "z", "null", &buy(20)]);
    assert_eq!(["x", "y", "z"].map(|p| core_of(&sw, p)), [1, 0, 0]);
    sw.ok(&["add-flow", "in_port=x,actions=output:sink"]);
    sw.ok(&["add-flow", "in_port=y,actions=output:sink"]);
    let (sink, gen) = Tenant::sink_and_senders(&sw, &["x", "y"], 9.0, 6.0);
    std::thread::sleep(Duration::from_secs(1));
    let hog = Hog::on_core_1();
    let moves = wait_until_on(&sw, "x", 0);
    drop(hog);
    let (gen, sink) = (gen.finish(), sink.finish());
    assert_eq!(["x", "y"].map(|p| core_of(&sw, p)), [0, 1], "{moves}");
    let last = moves["recent"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["port"].as_str(), last["swapped_with"].as_str()), (Some("x"), Some("y")), "{moves}");
    for vm in ["x", "y"] {
        let (sent, got) = (sent_by(&gen, vm), received_from(&sink, vm));
        let reordered = reordered_from(&sink, vm);
        eprintln!("{vm}: sent {sent}, the sink got {got}, {reordered} out of order");
        assert!(sent > 50_000, "{vm} sent only {sent}");
        assert_eq!(
            sw.port(vm)["rx"]["rx_packets"].as_u64().unwrap(),
            sent,
            "the switch did not take every frame of {vm}"
        );
        assert_eq!(got, sent, "frames of {vm} lost across the swap");
        assert_eq!(reordered, 0, "frames of {vm} reordered across the swap");
    }
}
