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
    CoreLoad { core, deliverable_cycles_per_sec: deliverable, available_cycles_per_sec: 100, busy_cycles_per_sec: busy }
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
    // The target must not be overloaded: a port whose load does not fit there goes only in
    // trade for a smaller one, and not at all when the trade would not fit either.
    let heavy = [load("a", 0, 0, 80), load("b", 0, 0, 80), load("d", 1, 0, 60)];
    let m = rebalance(&heavy, &[core(0, 95, 100), core(1, 95, 60)]).unwrap();
    assert_eq!((m.port.as_str(), m.to, m.swap_with.as_deref()), ("a", 1, Some("d")), "{m:?}");
    let heavier = [load("a", 0, 0, 80), load("b", 0, 0, 80), load("d", 1, 0, 40), load("e", 1, 0, 40)];
    assert_eq!(rebalance(&heavier, &[core(0, 95, 100), core(1, 95, 80)]), None);
}

#[test]
fn an_over_promised_core_whose_ports_fit_nowhere_whole_trades_one_for_a_smaller() {
    // Core 0 can deliver 80 and promised 90; core 1 has 25 of room: neither a (50) nor b (40)
    // fits there, but b for d (20) does, and clears core 0.
    let ports = [load("a", 0, 50, 50), load("b", 0, 40, 40), load("c", 1, 50, 50), load("d", 1, 20, 20)];
    let m = rebalance(&ports, &[core(0, 80, 90), core(1, 95, 70)]).unwrap();
    assert_eq!(
        (m.port.as_str(), m.from, m.to, m.swap_with.as_deref(), m.reason),
        ("b", 0, 1, Some("d"), MoveReason::OverPromised)
    );
    // A pinned port is not traded.
    let mut pinned = ports.clone();
    pinned[3].pinned = true;
    assert_eq!(rebalance(&pinned, &[core(0, 80, 90), core(1, 95, 70)]).and_then(|m| m.swap_with), None);
}

#[test]
fn a_pmd_busy_for_all_the_time_its_shared_core_gave_it_is_saturated() {
    // Core 1's PMD had half the core (the host ran something else the other half) and was busy
    // for all of it: saturated, though busy only half of the core's cycles.
    let ports = [load("a", 0, 0, 10), load("n", 1, 0, 30), load("v", 1, 0, 18)];
    let shared =
        CoreLoad { core: 1, deliverable_cycles_per_sec: 47, available_cycles_per_sec: 50, busy_cycles_per_sec: 48 };
    let m = rebalance(&ports, &[core(0, 95, 10), shared.clone()]).unwrap();
    assert_eq!((m.port.as_str(), m.from, m.to, m.reason), ("v", 1, 0, MoveReason::Saturated));
    // The same busy cycles on a core the PMD had whole: room left, nothing moves.
    let whole = CoreLoad { available_cycles_per_sec: 100, ..shared };
    assert_eq!(rebalance(&ports, &[core(0, 95, 10), whole]), None);
}
