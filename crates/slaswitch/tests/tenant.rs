//! The emulated VMs of one process share its core as a hypervisor's vCPUs share one: a VM
//! flooding a ring that the switch drains about as fast as it is filled does not keep the VM
//! beside it from its pace (the experiments' floods and well-behaved VMs share the VM core).

mod common;

use common::*;

#[test]
fn a_flood_the_switch_keeps_up_with_leaves_its_neighbour_its_pace() {
    let _g = serial();
    if !can_run() {
        return;
    }
    let sw = Switch::start("tenant-share", &[]);
    sw.ok(&["add-port", "up", "null"]);
    for p in ["flood", "paced"] {
        sw.ok(&["add-port", p, "vhost-user"]);
        sw.ok(&["add-flow", &format!("in_port={p},actions=output:up")]);
    }
    let secs = 4.0;
    let pace_pps = 50_000.0;
    // A rate no VM core reaches: the flood is always behind its pace, so it would send burst
    // after burst for as long as its ring had room. Over 60,000 flows the generator writes
    // each frame whole, which costs it more than the switch's one-rule forwarding costs the PMD.
    let gen = Tenant::start(
        &sw.dir,
        "share",
        &[("flood", &sw.port_sock("flood")), ("paced", &sw.port_sock("paced"))],
        1024,
        secs,
        &["gen", "--phase", "vm=flood,size=64,rate=500mpps,flows=65000", "--phase", "vm=paced,size=64,rate=50kpps"],
    );
    let doc = gen.finish();
    let (flood, paced) = (sent_by(&doc, "flood"), sent_by(&doc, "paced"));
    assert!(flood as f64 > 20.0 * pace_pps * secs, "the flood sent only {flood} frames: no flood");
    assert!(
        paced as f64 >= 0.9 * pace_pps * secs,
        "the paced VM sent {paced} of {} frames beside a flood of {flood}",
        pace_pps * secs
    );
}
