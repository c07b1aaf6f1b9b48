//! A PMD that may sleep while its queues are light (`slaswitchd --pmd-max-sleep-us`): light
//! traffic still arrives whole and in order, and the PMD thread leaves most of its core to
//! whatever shares it instead of polling all of the time.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The kernel's run time of the first PMD thread, nanoseconds.
fn pmd_run_ns(sw: &Switch) -> u64 {
    sw.json(&["pmd-stats"])["pmds"][0]["run_ns"].as_u64().expect("pmd-stats: run_ns")
}

#[test]
fn a_light_pmd_sleeps_and_still_forwards_every_frame_in_order() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("sleep", &["--pmd-cores", "0", "--pmd-max-sleep-us", "200"]);
    sw.ok(&["add-port", "sink", "vhost-user"]);
    sw.ok(&["add-port", "vm1", "vhost-user"]);
    sw.ok(&["add-flow", "in_port=vm1,actions=output:sink"]);
    let (sink, gen) = Tenant::sink_and_senders(&sw, &["vm1"], 7.0, 4.0);
    std::thread::sleep(Duration::from_secs(1));
    let (run0, t0) = (pmd_run_ns(&sw), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let ran = (pmd_run_ns(&sw) - run0) as f64 / t0.elapsed().as_nanos() as f64;
    let gen = gen.finish();
    let sink = sink.finish();
    let (sent, got) = (sent_by(&gen, "vm1"), received_from(&sink, "vm1"));
    eprintln!("the PMD ran {:.1}% of the time under 20 kpps; vm1 sent {sent}, the sink got {got}", ran * 100.0);
    assert!(sent > 50_000, "the generator sent only {sent}");
    assert_eq!(got, sent, "frames lost while the PMD slept");
    assert_eq!(reordered_from(&sink, "vm1"), 0, "frames reordered");
    // A PMD that polls without a pause runs all of the time its core gives it.
    assert!(ran < 0.5, "the PMD ran {:.0}% of the time: it did not sleep", ran * 100.0);
}
