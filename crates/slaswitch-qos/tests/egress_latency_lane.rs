//! The link's latency class on a fake clock: a latency-class VM within its purchase waits at
//! most the frame on the wire, in every scheduler; the lane changes who goes first, not what
//! anyone gets; nothing is lost or reordered, and no VM goes ahead beyond its purchase.

use std::collections::BTreeMap;

use proptest::prelude::*;
use slaswitch_qos::egress::latency_lane::lane_burst_bytes;
use slaswitch_qos::egress::link_scheduler::{
    LinkPlan, LinkScheduler, LinkSettings, Queued, SchedulerKind, VmLinkPolicy,
};
use slaswitch_qos::egress::softbw::Guarantee;

const LINK: u64 = 100_000_000;
const M: u64 = 1_000_000;
const FULL: u32 = 1538;

/// One VM's traffic: `None` keeps its queue backlogged.
#[derive(Clone, Copy)]
struct Flow {
    queue: usize,
    frame_bytes: u32,
    rate_bps: Option<u64>,
}

/// Per VM: wire bytes sent and each frame's wait (arrival to the end of its transmission).
struct Run {
    bytes: Vec<u64>,
    waits_ns: Vec<Vec<u64>>,
}

/// Runs the link for `ns`: a frame's item is its arrival time; the wire sends one frame at a
/// time at `LINK` and asks the scheduler again as soon as it is free.
fn run(s: &mut LinkScheduler<u64>, flows: &[Flow], ns: u64) -> Run {
    let queues = flows.iter().map(|f| f.queue).max().unwrap() + 1;
    let mut out = Run { bytes: vec![0; queues], waits_ns: vec![Vec::new(); queues] };
    let mut next: Vec<u64> = vec![0; flows.len()];
    let mut now = 0;
    while now < ns {
        for (i, f) in flows.iter().enumerate() {
            match f.rate_bps {
                None => {
                    while s.view(f.queue).unwrap().packets < 64
                        && s.enqueue(f.queue, f.frame_bytes, now, now) == Queued::Yes
                    {}
                }
                Some(rate) => {
                    while next[i] <= now {
                        let _ = s.enqueue(f.queue, f.frame_bytes, next[i], now);
                        next[i] += u64::from(f.frame_bytes) * 8 * 1_000_000_000 / rate;
                    }
                }
            }
        }
        match s.dequeue(now) {
            Some(d) => {
                now += (u64::from(d.len_bytes) * 8 * 1_000_000_000).div_ceil(LINK);
                out.bytes[d.queue] += u64::from(d.len_bytes);
                out.waits_ns[d.queue].push(now - d.item);
            }
            None => now += 1_000,
        }
    }
    out
}

fn plan(kind: SchedulerKind, vms: &[VmLinkPolicy]) -> LinkPlan {
    LinkPlan {
        settings: LinkSettings { kind, ..LinkSettings::new(LINK) },
        tenants: BTreeMap::from([(0, 1)]),
        vms: vms.iter().copied().enumerate().collect(),
    }
}

fn serialization_ns(bytes: u32) -> u64 {
    (u64::from(bytes) * 8 * 1_000_000_000).div_ceil(LINK)
}

/// Three bulk VMs keep the link saturated; VM 3 sends 200-byte frames at 2 Mbit/s and bought
/// 10 Mbit/s. `lane`: whether it is in the link's latency class.
fn light_beside_bulk(kind: SchedulerKind, lane: bool) -> Vec<u64> {
    let mut vms = vec![VmLinkPolicy::new(256); 4];
    vms[3].guarantee = Guarantee::Strict { rate_bps: 10 * M };
    vms[3].min_bps = Some(10 * M);
    vms[3].latency_bps = lane.then_some(10 * M);
    let mut s = LinkScheduler::new(plan(kind, &vms), 0).unwrap();
    let mut flows: Vec<Flow> = (0..3).map(|q| Flow { queue: q, frame_bytes: FULL, rate_bps: None }).collect();
    flows.push(Flow { queue: 3, frame_bytes: 200, rate_bps: Some(2 * M) });
    let r = run(&mut s, &flows, 300_000_000);
    let mut waits = r.waits_ns[3].clone();
    waits.sort_unstable();
    waits
}

#[test]
fn a_latency_class_vm_waits_at_most_the_frame_on_the_wire_in_every_scheduler() {
    // The frame it arrives behind may have just started, then its own.
    let bound_ns = serialization_ns(FULL) + serialization_ns(200);
    for kind in SchedulerKind::ALL {
        let with = light_beside_bulk(kind, true);
        assert!(with.len() >= 370, "{kind}: {} frames sent", with.len());
        let worst = *with.last().unwrap();
        assert!(worst <= bound_ns, "{kind}: waited up to {worst} ns in the lane, bound {bound_ns} ns");
    }
    // FIFO puts it behind every bulk frame waiting.
    let fifo = light_beside_bulk(SchedulerKind::Fifo, false);
    assert!(fifo[fifo.len() / 2] > 10 * bound_ns, "FIFO median {} ns", fifo[fifo.len() / 2]);
}

/// Per-VM wire bytes over 2 s of a saturated link, VM 0 in the lane or not.
fn shares(kind: SchedulerKind, vms: &mut [VmLinkPolicy], lane_bps: Option<u64>) -> Vec<u64> {
    vms[0].latency_bps = lane_bps;
    let mut s = LinkScheduler::new(plan(kind, vms), 0).unwrap();
    let flows: Vec<Flow> = (0..vms.len()).map(|q| Flow { queue: q, frame_bytes: FULL, rate_bps: None }).collect();
    run(&mut s, &flows, 2_000_000_000).bytes
}

#[test]
fn the_lane_changes_who_goes_first_not_what_anyone_gets() {
    // VM 0 floods and is in the lane at its purchase; the others have their own weights and
    // guarantees. Every scheduler that shares by policy gives each VM the same bytes either
    // way: what went ahead is paid from the VM's own credit, error, deficit or tokens.
    // (The rate-limit baseline's shares are its NIC queue's order, which the lane changes.)
    for kind in [SchedulerKind::Ancs, SchedulerKind::SoftBw, SchedulerKind::PieVde] {
        let mut vms = vec![VmLinkPolicy::new(256); 4];
        // Weights 4, 1, 2, 3: VM 0's share is above its purchase in every scheduler.
        for (q, vm) in vms.iter_mut().enumerate() {
            vm.weight = if q == 0 { 4 } else { q as u32 };
        }
        vms[0].guarantee = Guarantee::Strict { rate_bps: 20 * M };
        vms[0].min_bps = Some(20 * M);
        vms[2].guarantee = Guarantee::Strict { rate_bps: 40 * M };
        vms[2].min_bps = Some(40 * M);
        let without = shares(kind, &mut vms, None);
        let with = shares(kind, &mut vms, Some(20 * M));
        let total: u64 = without.iter().sum();
        for q in 0..4 {
            let off = (with[q] as f64 - without[q] as f64).abs() / total as f64;
            assert!(off <= 0.02, "{kind}: VM {q} got {} bytes with the lane, {} without", with[q], without[q]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any scheduler, lane rates and loads: every frame comes out once, each VM's in the order
    /// they came, and no VM goes ahead of the scheduler beyond its purchase and burst.
    #[test]
    fn no_frame_is_lost_reordered_or_sent_ahead_beyond_its_purchase(
        kind in 0usize..5,
        lanes in prop::collection::vec(prop::option::of(1u64..60), 3),
        loads in prop::collection::vec(prop::option::of(1u64..80), 3),
    ) {
        let kind = SchedulerKind::ALL[kind];
        let mut vms = vec![VmLinkPolicy::new(4096); 3];
        for (vm, lane) in vms.iter_mut().zip(&lanes) {
            vm.latency_bps = lane.map(|r| r * M);
        }
        let mut s = LinkScheduler::new(plan(kind, &vms), 0).unwrap();
        let flows: Vec<Flow> = loads.iter().enumerate()
            .map(|(q, l)| Flow { queue: q, frame_bytes: 200 + 400 * q as u32, rate_bps: l.map(|r| r * M) })
            .collect();
        let ns = 200_000_000;
        let mut now = 0;
        let mut next = [0u64; 3];
        let mut seq = [0u64; 3];
        let mut last = [0u64; 3];
        let mut sent = 0u64;
        let mut queued = 0u64;
        while now < ns {
            for (i, f) in flows.iter().enumerate() {
                let arrive = |s: &mut LinkScheduler<u64>, seq: &mut u64| {
                    *seq += 1;
                    s.enqueue(i, f.frame_bytes, *seq, now) == Queued::Yes
                };
                match f.rate_bps {
                    None => while s.view(i).unwrap().packets < 32 && arrive(&mut s, &mut seq[i]) { queued += 1 },
                    Some(r) => while next[i] <= now {
                        queued += u64::from(arrive(&mut s, &mut seq[i]));
                        next[i] += u64::from(f.frame_bytes) * 8 * 1_000_000_000 / r;
                    },
                }
            }
            match s.dequeue(now) {
                Some(d) => {
                    prop_assert!(d.item > last[d.queue], "VM {} sent {} after {}", d.queue, d.item, last[d.queue]);
                    last[d.queue] = d.item;
                    sent += 1;
                    now += serialization_ns(d.len_bytes);
                }
                None => now += 1_000,
            }
        }
        let ahead = s.sent_ahead();
        let most: u64 = lanes.iter().enumerate().filter_map(|(q, l)| l.map(|r| {
            let bytes = r * M / 8 * ns / 1_000_000_000 + lane_burst_bytes(r * M);
            bytes / u64::from(200 + 400 * q as u32) + 1
        })).sum();
        prop_assert!(ahead <= most, "{} frames went ahead, purchases allow {}", ahead, most);
        let mut p = s.plan().clone();
        p.settings.kind = SchedulerKind::Fifo;
        for vm in p.vms.values_mut() { vm.latency_bps = None; }
        s.reconfigure(p, now).unwrap();
        while let Some(d) = s.dequeue(now) {
            prop_assert!(d.item > last[d.queue]);
            last[d.queue] = d.item;
            sent += 1;
        }
        prop_assert_eq!(sent, queued);
    }
}
