//! Placing ports on several PMDs by their purchases, and the moves that keep the promises.

use slaswitch_config::allocation::{example_model, example_port as port, Candidate};
use slaswitch_config::pmd_placement::{place, rebalance, CoreLoad, MoveReason, PortLoad};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::PortSpec;

fn on((spec, settings): &(PortSpec, PortSettings), core: usize) -> Candidate<'_> {
    Candidate { spec, settings, pmd_core: core }
}

// The example model prices 64-byte frames at 200 cycles: 100 Mbit/s is 39.06 M cycles/s.
const CORE: u64 = 100_000_000;

#[test]
fn a_purchase_goes_on_the_core_with_the_most_room_and_a_refusal_names_every_core() {
    let big = port("big", &[("bandwidth_bps", "150M"), ("profile_packet_bytes", "64")]);
    let small = port("small", &[("bandwidth_bps", "50M"), ("profile_packet_bytes", "64")]);
    let new = port("new", &[("bandwidth_bps", "100M"), ("profile_packet_bytes", "64")]);
    let m = example_model();
    // big (about 58.6 M) on core 2, small (19.5 M) on core 4: the new port fits only on core 4.
    let others = [on(&big, 2), on(&small, 4)];
    let placed = place(&others, &new.0, &new.1, &[2, 4], Some(&m), CORE).unwrap();
    assert_eq!(placed.core, 4);
    assert!(placed.plans["new"].cpu_qos.limit.alloc_cycles_per_sec() > 0);
    // Without purchases the core polling the fewest ports gets it.
    let plain = port("plain", &[]);
    let placed = place(&[on(&plain, 2)], &new.0, &new.1, &[2, 4], Some(&m), CORE).unwrap();
    assert_eq!(placed.core, 4);
    let placed = place(&[on(&small, 4)], &plain.0, &plain.1, &[2, 4], Some(&m), CORE).unwrap();
    assert_eq!(placed.core, 2);
    // Room on neither core: the refusal names both.
    let huge = port("huge", &[("bandwidth_bps", "200M"), ("profile_packet_bytes", "64")]);
    let e = place(&others, &huge.0, &huge.1, &[2, 4], Some(&m), CORE).unwrap_err().to_string();
    assert!(e.contains("no PMD can hold it") && e.contains("core 2") && e.contains("core 4"), "{e}");
}

fn load(name: &str, core: usize, promised: u64, used: u64) -> PortLoad {
    PortLoad { name: name.into(), core, promised_cycles_per_sec: promised, used_cycles_per_sec: used, pinned: false }
}

fn core(core: usize, deliverable: u64, busy: u64) -> CoreLoad {
    CoreLoad { core, deliverable_cycles_per_sec: deliverable, capacity_cycles_per_sec: 100, busy_cycles_per_sec: busy }
}

#[test]
fn an_over_promised_core_gives_the_smallest_port_that_clears_it_to_the_core_with_room() {
    // Core 0 can deliver 80 now (drift) but promised 95: a, b, c promised 50, 25, 20.
    let ports = [load("a", 0, 50, 50), load("b", 0, 25, 25), load("c", 0, 20, 20), load("d", 1, 30, 30)];
    let cores = [core(0, 80, 95), core(1, 95, 30)];
    let m = rebalance(&ports, &cores).unwrap();
    assert_eq!((m.port.as_str(), m.from, m.to, m.reason), ("c", 0, 1, MoveReason::OverPromised));
    // A pinned port stays: the next smallest that clears the excess goes.
    let mut pinned = ports.clone();
    pinned[2].pinned = true;
    assert_eq!(rebalance(&pinned, &cores).unwrap().port, "b");
    // No room anywhere: nothing moves (the core keeps its classes' order and reports it).
    let full = [core(0, 80, 95), core(1, 40, 30)];
    assert_eq!(rebalance(&ports, &full), None);
}

#[test]
fn a_saturated_core_gives_the_port_that_evens_the_load_and_equal_cores_trade_nothing() {
    // Core 0 at 100% busy, core 1 at 20%: moving b (40) leaves 60 / 60.
    let ports = [load("a", 0, 0, 40), load("b", 0, 0, 40), load("c", 0, 0, 20), load("d", 1, 0, 20)];
    let cores = [core(0, 95, 100), core(1, 95, 20)];
    let m = rebalance(&ports, &cores).unwrap();
    assert_eq!((m.from, m.to, m.reason), (0, 1, MoveReason::Saturated));
    assert!(m.port == "a" || m.port == "b", "{m:?}");
    // Both cores saturated: no move helps.
    assert_eq!(rebalance(&ports, &[core(0, 95, 100), core(1, 95, 98)]), None);
    // One port alone on the hot core: moving it would only move the heat.
    let one = [load("a", 0, 0, 100), load("d", 1, 0, 20)];
    assert_eq!(rebalance(&one, &cores), None);
    // The target must not be overloaded by it: a port whose load does not fit stays.
    let heavy = [load("a", 0, 0, 80), load("b", 0, 0, 80), load("d", 1, 0, 60)];
    assert_eq!(rebalance(&heavy, &[core(0, 95, 100), core(1, 95, 60)]), None);
}
