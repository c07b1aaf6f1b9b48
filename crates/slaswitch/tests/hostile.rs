//! A hostile VM: it sends frames the parser must refuse, as fast as its ring takes them. They
//! are dropped and counted on its own port, by kind; their cycles are charged to it, so its
//! C2QoS allocation bounds what its garbage costs; and the VM beside it keeps forwarding.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn malformed_frames_at_full_rate_cost_only_their_senders_budget() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("hostile", &[]);
    sw.ok(&["add-port", "up", "null"]);
    for p in ["good", "evil"] {
        sw.ok(&["add-port", p, "vhost-user"]);
        sw.ok(&["add-flow", &format!("in_port={p},actions=output:up")]);
    }
    let hz = sw.json(&["pmd-stats"])["tsc_hz"].as_f64().unwrap();
    // The hostile VM may use a tenth of the core; the good one is not limited.
    sw.ok(&["set-port", "evil", &format!("cycles_per_sec={}", (hz / 10.0) as u64)]);
    let gen = Tenant::start(
        &sw.dir,
        "hostile",
        &[("good", &sw.port_sock("good")), ("evil", &sw.port_sock("evil"))],
        1024,
        8.0,
        &["gen", "--phase", "vm=good,size=64,rate=max", "--phase", "vm=evil,size=64,rate=max,malformed=bad-ihl"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let (a, up_a) = (sw.json(&["pmd-stats"]), sw.port("up"));
    std::thread::sleep(Duration::from_secs(3));
    let (b, up_b) = (sw.json(&["pmd-stats"]), sw.port("up"));
    let evil = sw.port("evil");
    gen.finish();

    // Every frame of the hostile VM was refused by the parser and counted as what it was.
    let rx = evil["rx"]["rx_packets"].as_u64().unwrap();
    let bad_header = evil["rx"]["parse_errors"][3].as_u64().unwrap();
    assert!(rx > 10_000, "the hostile VM got {rx} frames in");
    assert_eq!(bad_header, rx, "{evil}");
    // None of them left the switch: the uplink carried the good VM's frames only.
    let good = sw.port("good");
    assert!(up_b["tx_packets"].as_u64().unwrap() <= good["rx"]["rx_packets"].as_u64().unwrap());
    let forwarded = up_b["tx_packets"].as_u64().unwrap() - up_a["tx_packets"].as_u64().unwrap();
    assert!(forwarded > 100_000, "the good VM forwarded only {forwarded} frames in 3 s");
    // Its cycles were charged to it and held to its allocation.
    let (evil_share, good_share) = (share(&a, &b, "evil"), share(&a, &b, "good"));
    assert!(evil_share <= 11.0, "the hostile VM held to 10% of the core used {evil_share:.1}%");
    assert!(evil_share > 1.0, "the hostile VM's parsing was charged to no one: {evil_share:.1}%");
    assert!(good_share > 2.0 * evil_share, "good {good_share:.1}%, hostile {evil_share:.1}%");
}
