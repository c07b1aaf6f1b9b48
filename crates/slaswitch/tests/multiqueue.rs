//! A multiqueue vhost-user port (`queues=2`): a VM that sends on both of its queues has every
//! frame forwarded, from one port with one set of counters and cycles; without the option the
//! port has one queue and a second would never be polled.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn a_vm_sending_on_two_queues_is_polled_on_both_as_one_port() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("multiqueue", &[]);
    sw.ok(&["add-port", "up", "null"]);
    sw.ok(&["add-port", "mq", "vhost-user", "queues=2"]);
    sw.ok(&["add-flow", "in_port=mq,actions=output:up"]);
    let (ok, _, err) = sw.cli(&["add-port", "bad", "vhost-user", "queues=17"]);
    assert!(!ok && err.contains("queues=17") && err.contains("from 1 to 16"), "{err}");

    // 20,000 frames a second for 2 s, bursts alternating between the two queues.
    let ring = 1024u64;
    let gen = Tenant::start(
        &sw.dir,
        "mq",
        &[("mq", &sw.port_sock("mq"))],
        ring as u32,
        3.0,
        &["--queues", "2", "gen", "--phase", "start=0.5,dur=2,vm=mq,size=64,rate=20kpps"],
    );
    let doc = gen.finish();
    let sent = sent_by(&doc, "mq");
    // A queue the switch never polled takes one ring of frames and refuses the rest of the half
    // offered to it, so what was sent could exceed what was refused by at most two rings (and
    // a burst). How much the VM offers is up to the host's scheduler, and is not judged.
    let refused = doc["summary"]["vms"][0]["tx_ring_full"].as_u64().unwrap();
    let bound = 2 * ring + slaswitch_dpdk::MAX_BURST as u64;
    assert!(
        sent > refused + bound,
        "the VM sent {sent} frames, {refused} refused by full rings: no more than one queue was polled"
    );
    let t = std::time::Instant::now();
    let mut port = sw.port("mq");
    while port["rx"]["rx_packets"].as_u64().unwrap() < sent && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        port = sw.port("mq");
    }
    // Half the frames went on the second queue: all arrived, so both queues were polled.
    assert_eq!(port["rx"]["rx_packets"].as_u64().unwrap(), sent, "{port}");
    assert!(port["rx"]["ingress_cycles"].as_u64().unwrap() > 0, "{port}");
    let up = sw.port("up");
    assert_eq!(up["tx_packets"].as_u64().unwrap(), sent, "{up}");
}
