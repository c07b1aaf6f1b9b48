//! How long HBS's turns are ([`PortScheduler::end_batch`], `docs/deviations.md` row 5): a
//! turn grows with what a decision costs, and a port running on idle cycles (C2TB's lowest
//! tier) takes turns while no port within its allocation can be waiting for it.

use slaswitch_qos::cpu::*;

const HZ: u64 = 2_200_000_000;

#[test]
fn a_turn_lasts_a_hundred_decisions_between_its_floor_and_its_ceiling() {
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    // 3 us and 20 us at 2.2 GHz.
    assert_eq!(s.turn_ticks(), 6_600, "the floor until the PMD says what a decision costs");
    s.set_decision_cycles(150);
    assert_eq!(s.turn_ticks(), 15_000);
    s.set_decision_cycles(1_000);
    assert_eq!(s.turn_ticks(), 44_000, "the ceiling");
    s.set_decision_cycles(10);
    assert_eq!(s.turn_ticks(), 6_600, "the floor");

    // 2000-cycle batches share a 15,000-tick turn: seven go on, the eighth ends it.
    s.set_decision_cycles(150);
    s.add_port(0, 4, CycleLimit::Unlimited, 0).unwrap();
    s.add_port(1, 4, CycleLimit::Unlimited, 0).unwrap();
    assert_eq!(s.next_port(0), Some(0));
    let mut now = 0;
    for batch in 1..=8 {
        now += 2_000;
        assert_eq!(s.end_batch(0, 2_000, 32, now, true), batch < 8, "batch {batch}");
    }
    assert_eq!(s.next_port(now), Some(1));

    // A ceiling below the floor keeps every turn at the floor.
    let mut s =
        PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig { turn_max_ns: 1_000, ..HbsConfig::default() }, 0);
    s.set_decision_cycles(150);
    assert_eq!(s.turn_ticks(), 6_600);
}

/// Two ports that bought almost nothing and run on idle cycles: after a 12,000-cycle batch
/// each has spent its allocation (MIN-MAX's committed balance is below zero) and queues in the
/// lowest tier; 100,000 ticks later its bucket is full again from the idle share.
fn two_ports_beyond_their_allocation(third: Option<CycleLimit>) -> (PortScheduler, u64) {
    let c2tb = C2tbConfig { bucket_depth_cycles: 10_000, ..C2tbConfig::one_core(HZ) };
    let mut s = PortScheduler::new(c2tb, HbsConfig::default(), 0);
    let tiny = CycleLimit::MinMax { cycles_per_sec: HZ / 1_000, weight: 1 };
    s.add_port(0, 4, tiny, 0).unwrap();
    s.add_port(1, 4, tiny, 0).unwrap();
    if let Some(limit) = third {
        s.add_port(2, 4, limit, 0).unwrap();
    }
    let mut now = 0;
    for port in [0, 1] {
        assert_eq!(s.next_port(now), Some(port));
        now += 12_000;
        assert!(!s.end_batch(port, 12_000, 32, now, true), "longer than a turn");
    }
    (s, now + 100_000)
}

#[test]
fn a_port_beyond_its_allocation_takes_turns_while_every_ready_port_is_too() {
    let (mut s, mut now) = two_ports_beyond_their_allocation(None);
    assert_eq!(s.next_port(now), Some(0));
    now += 1_000;
    // Its tokens as of its last report were negative: what it earned while it waited counts.
    assert!(s.end_batch(0, 1_000, 32, now, true), "port 1 is in the lowest tier too");
    now += 1_000;
    assert!(s.end_batch(0, 1_000, 32, now, true));
    assert_eq!(s.view(0).unwrap().place, PortPlace::InService);
}

#[test]
fn a_resting_port_keeps_a_lowest_tier_turn_to_one_batch() {
    // Port 2 bought nothing in cycles (no allocation to spend) and its poll finds nothing: it
    // rests until another port has run a batch, and may be within any tier when it wakes.
    let (mut s, mut now) = two_ports_beyond_their_allocation(Some(CycleLimit::Unlimited));
    assert_eq!(s.next_port(now - 100_000), Some(2));
    assert!(!s.end_batch(2, 0, 0, now - 99_000, true));
    assert_eq!(s.view(2).unwrap().place, PortPlace::Resting);
    assert_eq!(s.next_port(now), Some(0));
    now += 1_000;
    assert!(!s.end_batch(0, 1_000, 32, now, true), "port 2 rests: the turn ends after one batch");
    assert_eq!(s.next_port(now), Some(2), "back in its class after the busy batch");
}
