//! ANCS (seed 002 Sec. 3-4) on a fake link.

mod common;

use common::{assert_within, bps, run_link, Source};
use proptest::prelude::*;
use slaswitch_qos::egress::ancs::{Ancs, AncsConfig, AncsPolicy};
use slaswitch_qos::QosError;

const LINK: u64 = 1_000_000_000;
const SEC: u64 = 1_000_000_000;
const M: u64 = 1_000_000;

fn ancs(policies: &[AncsPolicy]) -> Ancs<u64> {
    let mut a = Ancs::new(AncsConfig::new(LINK), 0).unwrap();
    for (q, &p) in policies.iter().enumerate() {
        a.set_policy(q, p, 256).unwrap();
    }
    a
}
fn greedy(n: usize) -> Vec<Source> {
    (0..n).map(|q| Source::greedy(q, 1500)).collect()
}

#[test]
fn weights_1_to_5_share_the_link_in_proportion() {
    // Sec. 4.2, first phase: five VMs with weights 1:2:3:4:5.
    let mut a = ancs(&(1..=5).map(AncsPolicy::weighted).collect::<Vec<_>>());
    let run = run_link(&mut a, &greedy(5), LINK, 0, 3 * SEC, SEC);
    let total: u64 = run.bytes_by_queue.iter().sum();
    assert!(bps(total, 3 * SEC) >= 0.99 * LINK as f64, "link used {:.1}%", bps(total, 3 * SEC) / LINK as f64 * 100.0);
    for q in 0..5 {
        assert_within(
            run.bytes_by_queue[q] as f64 / total as f64,
            (q + 1) as f64 / 15.0,
            0.01,
            &format!("vif {q} share"),
        );
    }
}

#[test]
fn policies_change_at_run_time_like_section_4_2() {
    let mut a = ancs(&(1..=5).map(AncsPolicy::weighted).collect::<Vec<_>>());
    let sources = greedy(5);
    run_link(&mut a, &sources, LINK, 0, SEC, SEC);
    // VM5 limited to 150 Mbit/s; the others keep their weights and take the rest.
    a.set_policy(4, AncsPolicy { max_rate_bps: Some(150 * M), ..AncsPolicy::weighted(5) }, 256).unwrap();
    let run = run_link(&mut a, &sources, LINK, SEC, 2 * SEC, SEC);
    let vm5 = bps(run.bytes_by_queue[4], 2 * SEC);
    assert!(vm5 <= 150.0 * M as f64 * 1.01, "VM5 at {vm5} bit/s over its 150 Mbit/s maximum");
    let total: u64 = run.bytes_by_queue.iter().sum();
    assert!(bps(total, 2 * SEC) >= 0.99 * LINK as f64, "work-conserving with a maximum set");
    assert_within(run.bytes_by_queue[3] as f64, 4.0 * run.bytes_by_queue[0] as f64, 0.01, "VM4 vs VM1 keep 4:1");
    // VM1 gets a 200 Mbit/s minimum on top.
    a.set_policy(0, AncsPolicy { min_rate_bps: Some(200 * M), ..AncsPolicy::weighted(1) }, 256).unwrap();
    let run = run_link(&mut a, &sources, LINK, 3 * SEC, 2 * SEC, SEC);
    let vm1 = bps(run.bytes_by_queue[0], 2 * SEC);
    assert!(vm1 >= 200.0 * M as f64 * 0.99, "VM1 at {vm1} bit/s below its 200 Mbit/s minimum");
    assert!(bps(run.bytes_by_queue[4], 2 * SEC) <= 150.0 * M as f64 * 1.01, "VM5 maximum still holds");
    assert_within(run.bytes_by_queue[2] as f64, 1.5 * run.bytes_by_queue[1] as f64, 0.01, "VM3 vs VM2 keep 3:2");
}

#[test]
fn idle_vifs_credit_goes_to_busy_ones() {
    // Sec. 4.3: only two of five vifs send; they must fill the link in their 1:2 ratio.
    let mut a = ancs(&(1..=5).map(AncsPolicy::weighted).collect::<Vec<_>>());
    let run = run_link(&mut a, &greedy(2), LINK, 0, 3 * SEC, SEC);
    let total = run.bytes_by_queue[0] + run.bytes_by_queue[1];
    assert!(bps(total, 3 * SEC) >= 0.97 * LINK as f64, "link used {:.1}%", bps(total, 3 * SEC) / LINK as f64 * 100.0);
    assert_within(run.bytes_by_queue[1] as f64, 2.0 * run.bytes_by_queue[0] as f64, 0.01, "busy vifs keep 1:2");
}

#[test]
fn minimums_that_exceed_the_link_are_refused_without_change() {
    let mut a = ancs(&[AncsPolicy { min_rate_bps: Some(600 * M), ..AncsPolicy::weighted(1) }]);
    let err = a.set_policy(1, AncsPolicy { min_rate_bps: Some(500 * M), ..AncsPolicy::weighted(1) }, 256).unwrap_err();
    assert_eq!(err, QosError::MinimumsAboveLink { total_bps: 1_100_000_000, link_bps: 1_000_000_000 });
    assert!(err.to_string().contains("1100000000") && err.to_string().contains("1000000000"), "{err}");
    assert!(a.view(1).is_none(), "refused vif must not exist");
    let err = a
        .set_policy(0, AncsPolicy { min_rate_bps: Some(300 * M), max_rate_bps: Some(200 * M), weight: 1 }, 256)
        .unwrap_err();
    assert_eq!(err, QosError::MinAboveMax { queue: 0, min_bps: 300 * M, max_bps: 200 * M });
    assert!(err.to_string().contains("above the maximum"), "{err}");
    assert_eq!(a.view(0).unwrap().policy.min_rate_bps, Some(600 * M));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Random weights, minimums and maximums: every greedy vif gets at least its minimum, at most
    /// its maximum (plus a packet per period), and the link stays busy unless the maximums cap it.
    #[test]
    fn minimums_and_maximums_hold_and_the_link_stays_busy(
        vifs in prop::collection::vec((1u32..8, prop::option::of(10u64..150), prop::option::of(50u64..600)), 2..6),
    ) {
        let policies: Vec<AncsPolicy> = vifs.iter().map(|&(w, min, max)| {
            let max = max.map(|m| m.max(min.unwrap_or(0)));
            AncsPolicy { weight: w, min_rate_bps: min.map(|m| m * M), max_rate_bps: max.map(|m| m * M) }
        }).collect();
        let mut a = ancs(&policies);
        let secs = 2;
        let run = run_link(&mut a, &greedy(policies.len()), LINK, 0, secs * SEC, SEC);
        let per_packet_per_period = 1500.0 * 8.0 / 0.03;
        let mut capped_total = 0.0;
        for (q, p) in policies.iter().enumerate() {
            let rate = bps(run.bytes_by_queue[q], secs * SEC);
            if let Some(min) = p.min_rate_bps { prop_assert!(rate >= 0.98 * min as f64, "vif {} at {} below min {}", q, rate, min); }
            // A window of `secs` seconds sees up to one accounting period more of credit.
            if let Some(max) = p.max_rate_bps { prop_assert!(rate <= max as f64 * (secs as f64 + 0.03) / secs as f64 + per_packet_per_period, "vif {} at {} above max {}", q, rate, max); }
            capped_total += p.max_rate_bps.map_or(f64::INFINITY, |m| m as f64);
        }
        let total = bps(run.bytes_by_queue.iter().sum(), secs * SEC);
        prop_assert!(total >= 0.97 * (LINK as f64).min(capped_total), "link at {} of {}", total, (LINK as f64).min(capped_total));
    }
}

#[test]
fn a_minimum_with_capped_neighbours_takes_what_they_leave() {
    // A case the property test below found: VM2 (weight 1, minimum 56 Mbit/s) must get the
    // 850 Mbit/s that three capped VMs leave.
    let mut a = ancs(&[
        AncsPolicy { weight: 4, min_rate_bps: None, max_rate_bps: Some(50 * M) },
        AncsPolicy { weight: 1, min_rate_bps: Some(56 * M), max_rate_bps: None },
        AncsPolicy { weight: 6, min_rate_bps: None, max_rate_bps: Some(50 * M) },
        AncsPolicy { weight: 7, min_rate_bps: None, max_rate_bps: Some(50 * M) },
    ]);
    let run = run_link(&mut a, &greedy(4), LINK, 0, 2 * SEC, SEC);
    let vm2 = bps(run.bytes_by_queue[1], 2 * SEC);
    assert!(vm2 >= 0.97 * 850.0 * M as f64, "VM2 got {vm2} bit/s");
}
