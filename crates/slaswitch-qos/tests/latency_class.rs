//! The latency class (`slaswitch_qos::cpu::latency_class`): a light priority-1 port within its
//! purchase is never parked while it has frames, though its one-frame batches cost far more
//! cycles than its allocation was priced at, and fifteen lower-class ports flood the core.

use slaswitch_qos::cpu::*;

const HZ: u64 = 2_600_000_000;
/// A flood's full batch: 32 frames at 450 cycles.
const FLOOD_BATCH_CYCLES: u64 = 14_400;
/// The light port's batch of one frame: the batch's fixed work dominates.
const LIGHT_BATCH_CYCLES: u64 = 2_000;
const EMPTY_POLL_CYCLES: u64 = 100;
/// 5000 frames a second of 64 bytes; it bought 3 Mbit/s (5859 frames a second).
const LIGHT_GAP_TICKS: u64 = HZ / 5_000;
const LIGHT_PURCHASE_BPS: u64 = 3_000_000;

/// What the light port went through over one simulated second.
struct Outcome {
    served: u64,
    /// Longest time a frame waited from its arrival to its batch, TSC ticks.
    max_wait_ticks: u64,
    /// Decisions at which it had a frame and sat in the waiting queue.
    parked_with_frames: u64,
    forgiven_cycles: u64,
}

/// A fake PMD: the light port 0 in class 1 with a strict allocation priced per frame at the
/// full-batch rate (5000 x 450 cycles), ports 1-15 backlogged in class 4, MIN-MAX.
fn run(light_purchase_bps: Option<u64>) -> Outcome {
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    s.add_port(0, 1, CycleLimit::Strict { cycles_per_sec: 5_000 * 450 }, 0).unwrap();
    s.set_purchase(0, light_purchase_bps, 0);
    for port in 1..=15 {
        s.add_port(port, 4, CycleLimit::MinMax { cycles_per_sec: 123_000_000, weight: 1 }, 0).unwrap();
        s.set_purchase(port, Some(140_000_000), 0);
    }
    // While the latency-class port bought bandwidth, the floods are polled with short bursts.
    let flood_burst = if light_purchase_bps.is_some() { 16 } else { 32 };
    assert_eq!((s.burst_packets(0), s.burst_packets(1)), (32, flood_burst));
    let mut out = Outcome { served: 0, max_wait_ticks: 0, parked_with_frames: 0, forgiven_cycles: 0 };
    let (mut now, mut next_arrival, mut pending) = (0u64, 0u64, std::collections::VecDeque::new());
    while now < HZ {
        while next_arrival <= now {
            pending.push_back(next_arrival);
            next_arrival += LIGHT_GAP_TICKS;
        }
        if !pending.is_empty() && s.view(0).unwrap().place == PortPlace::Waiting {
            out.parked_with_frames += 1;
        }
        let Some(port) = s.next_port(now) else {
            now += 1_000;
            continue;
        };
        let (cycles, packets) = match port {
            0 if pending.is_empty() => (EMPTY_POLL_CYCLES, 0),
            0 => {
                let arrived = pending.len().min(32);
                for _ in 0..arrived {
                    let at = pending.pop_front().unwrap();
                    out.max_wait_ticks = out.max_wait_ticks.max(now - at);
                }
                out.served += arrived as u64;
                (LIGHT_BATCH_CYCLES, arrived as u32)
            }
            _ => (FLOOD_BATCH_CYCLES * u64::from(s.burst_packets(port)) / 32, s.burst_packets(port)),
        };
        now += cycles;
        s.spend_bytes(port, u64::from(packets) * 64, now);
        s.end_batch(port, cycles, packets, now, false);
    }
    out.forgiven_cycles = s.view(0).unwrap().forgiven_cycles;
    out
}

#[test]
fn a_light_priority_1_port_within_its_purchase_is_never_parked_while_it_has_frames() {
    let o = run(Some(LIGHT_PURCHASE_BPS));
    assert_eq!(o.parked_with_frames, 0);
    assert!(o.served >= 4_990, "served {}", o.served);
    // A frame waits at most for the flood's short batch in service and an empty poll.
    assert!(o.max_wait_ticks <= FLOOD_BATCH_CYCLES / 2 + LIGHT_BATCH_CYCLES, "waited {} ticks", o.max_wait_ticks);
    // Its batches cost about 10 M cycles a second, 2.25 M of them allocated.
    assert!(o.forgiven_cycles > 5_000_000, "forgave {}", o.forgiven_cycles);
}

#[test]
fn without_a_purchase_the_same_port_waits_for_its_cycles() {
    let o = run(None);
    assert!(o.parked_with_frames > 0);
    assert!(o.max_wait_ticks > 20 * FLOOD_BATCH_CYCLES, "waited only {} ticks", o.max_wait_ticks);
    assert_eq!(o.forgiven_cycles, 0);
}

#[test]
fn a_port_beyond_its_purchase_waits_like_any_other() {
    // It bought a fifth of what it sends: once beyond it, its frames wait for its cycles.
    let o = run(Some(LIGHT_PURCHASE_BPS / 5));
    assert!(o.parked_with_frames > 0);
    assert!(o.max_wait_ticks > 20 * FLOOD_BATCH_CYCLES, "waited only {} ticks", o.max_wait_ticks);
}

#[test]
fn a_lower_class_port_is_not_in_the_latency_class() {
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    s.add_port(0, 3, CycleLimit::Strict { cycles_per_sec: 1_000_000 }, 0).unwrap();
    s.set_purchase(0, Some(LIGHT_PURCHASE_BPS), 0);
    assert_eq!(s.next_port(0), Some(0));
    s.spend_bytes(0, 64, 10_000_000);
    s.end_batch(0, 10_000_000, 1, 10_000_000, false);
    assert_eq!(s.view(0).unwrap().place, PortPlace::Waiting);
    assert_eq!(s.view(0).unwrap().forgiven_cycles, 0);
}

#[test]
fn short_bursts_end_with_the_last_latency_class_purchase() {
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    s.add_port(0, 1, CycleLimit::Strict { cycles_per_sec: 1_000_000 }, 0).unwrap();
    s.add_port(1, 4, CycleLimit::MinMax { cycles_per_sec: 1_000_000, weight: 1 }, 0).unwrap();
    assert_eq!(s.burst_packets(1), 32);
    s.set_purchase(0, Some(LIGHT_PURCHASE_BPS), 0);
    assert_eq!(s.burst_packets(1), 16);
    s.set_priority(0, 3, 0).unwrap();
    assert_eq!(s.burst_packets(1), 32, "class 3 is not a latency class");
    s.set_priority(0, 2, 0).unwrap();
    assert_eq!(s.burst_packets(1), 16);
    // A lower-class port within its purchase keeps full batches.
    s.set_beyond_purchase(1, false);
    assert_eq!(s.burst_packets(1), 32);
    s.set_beyond_purchase(1, true);
    assert_eq!(s.burst_packets(1), 16);
    s.remove_port(0, 0);
    assert_eq!(s.burst_packets(1), 32);
    let off = HbsConfig { lower_class_burst: 0, ..HbsConfig::default() };
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), off, 0);
    s.add_port(0, 1, CycleLimit::Strict { cycles_per_sec: 1_000_000 }, 0).unwrap();
    s.add_port(1, 4, CycleLimit::Strict { cycles_per_sec: 1_000_000 }, 0).unwrap();
    s.set_purchase(0, Some(LIGHT_PURCHASE_BPS), 0);
    assert_eq!(s.burst_packets(1), 32);
}
