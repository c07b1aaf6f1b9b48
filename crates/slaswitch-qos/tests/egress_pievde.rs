//! PIE-VDE two-level scheduling (seed 004 Sec. IV-V) and VTRR.

mod common;

use common::{assert_within, run_link, Source};
use proptest::prelude::*;
use slaswitch_qos::egress::pievde::PieVde;
use slaswitch_qos::egress::vtrr::Vtrr;
use slaswitch_qos::egress::EgressScheduler;

const LINK: u64 = 100_000_000;
const SEC: u64 = 1_000_000_000;

#[test]
fn vtrr_reproduces_the_paper_example() {
    // Sec. IV: clients c1, c2, c3 with weights 5, 3, 1 -> (c1, c2, c3, c1, c2, c1, c2, c1, c1).
    let mut v = Vtrr::new();
    for (id, w) in [(1, 5), (2, 3), (3, 1)] {
        v.set_weight(id, w);
        v.join(id);
    }
    let two_cycles: Vec<usize> = (0..18).map(|_| v.pick().unwrap()).collect();
    let paper = [1, 2, 3, 1, 2, 1, 2, 1, 1];
    assert_eq!(&two_cycles[..9], &paper);
    assert_eq!(&two_cycles[9..], &paper, "the same sequence repeats while weights are unchanged");
}

#[test]
fn vtrr_with_equal_weights_is_round_robin() {
    let mut v = Vtrr::new();
    for id in 0..4 {
        v.set_weight(id, 3);
        v.join(id);
    }
    let order: Vec<usize> = (0..12).map(|_| v.pick().unwrap()).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn vtrr_leaving_and_rejoining_buys_no_extra_quanta() {
    let mut v = Vtrr::new();
    v.set_weight(0, 1);
    v.set_weight(1, 1);
    v.join(0);
    v.join(1);
    let mut count = [0i32; 2];
    for _ in 0..1000 {
        let id = v.pick().unwrap();
        count[id] += 1;
        if id == 1 {
            v.leave(1);
            v.join(1);
        }
    }
    assert!((count[0] - count[1]).abs() <= 1, "{count:?}");
}

#[test]
fn vtrr_a_client_away_for_many_cycles_rejoins_at_its_share() {
    // Sparse ids (a tenant's VMs keep their global queue numbers) and weights 2:1:1; client
    // 200 leaves for many cycles and comes back: it is neither starved by a stale virtual
    // time nor given a burst for the time it was away.
    let mut v = Vtrr::new();
    for (id, w) in [(3, 2), (70, 1), (200, 1)] {
        v.set_weight(id, w);
        v.join(id);
    }
    for _ in 0..40 {
        v.pick();
    }
    v.leave(200);
    for _ in 0..3000 {
        assert_ne!(v.pick(), Some(200));
    }
    v.join(200);
    let mut count = std::collections::HashMap::new();
    for _ in 0..400 {
        *count.entry(v.pick().unwrap()).or_insert(0i32) += 1;
    }
    assert!(
        (count[&3] - 200).abs() <= 2 && (count[&70] - 100).abs() <= 2 && (count[&200] - 100).abs() <= 2,
        "{count:?}"
    );
    let first: Vec<usize> = (0..4).map(|_| v.pick().unwrap()).collect();
    assert_eq!(first.iter().filter(|&&id| id == 200).count(), 1, "one quantum per cycle of four: {first:?}");
}

fn pievde(tenants: &[(usize, u32)], vms: &[(usize, usize, u32)]) -> PieVde<u64> {
    let mut p = PieVde::new(1514);
    for &(t, w) in tenants {
        p.set_tenant(t, w).unwrap();
    }
    for &(q, t, w) in vms {
        p.set_vm(q, t, w, 256).unwrap();
    }
    p
}

#[test]
fn tenants_share_by_weight_and_vms_share_equally_like_section_v() {
    // Sec. V: c1 (weight 1) and c2 (weight 2) with three VMs each, every VM greedy.
    let mut p = pievde(&[(0, 1), (1, 2)], &[(0, 0, 1), (1, 0, 1), (2, 0, 1), (3, 1, 1), (4, 1, 1), (5, 1, 1)]);
    let sources: Vec<Source> = (0..6).map(|q| Source::greedy(q, 1514)).collect();
    let run = run_link(&mut p, &sources, LINK, 0, 2 * SEC, SEC);
    let c1: u64 = run.bytes_by_queue[..3].iter().sum();
    let c2: u64 = run.bytes_by_queue[3..].iter().sum();
    assert_within(c2 as f64 / c1 as f64, 2.0, 0.01, "B2/B1");
    for q in 0..6 {
        let tenant_total = if q < 3 { c1 } else { c2 };
        assert_within(
            run.bytes_by_queue[q] as f64,
            tenant_total as f64 / 3.0,
            0.01,
            &format!("VM {q} within its tenant"),
        );
    }
}

#[test]
fn shares_hold_in_bytes_with_mixed_packet_sizes() {
    // Tenant 0 sends 64-byte frames, tenant 1 full frames: weights still split the bandwidth.
    let mut p = pievde(&[(0, 1), (1, 1)], &[(0, 0, 1), (1, 1, 1)]);
    let sources = [Source::greedy(0, 64), Source::greedy(1, 1514)];
    let run = run_link(&mut p, &sources, LINK, 0, SEC, SEC);
    assert_within(run.bytes_by_queue[0] as f64, run.bytes_by_queue[1] as f64, 0.01, "byte shares");
}

#[test]
fn idle_tenants_and_vms_are_skipped() {
    let mut p = pievde(&[(0, 5), (1, 3), (2, 1)], &[(0, 0, 1), (1, 1, 1), (2, 1, 1), (3, 2, 1)]);
    // Only tenant 2's VM and one of tenant 1's VMs send.
    let sources = [Source::greedy(3, 1514), Source::greedy(2, 1514)];
    let run = run_link(&mut p, &sources, LINK, 0, SEC, SEC);
    assert!(run.busy_ns as f64 >= 0.99 * SEC as f64, "work-conserving");
    assert_within(
        run.bytes_by_queue[2] as f64,
        3.0 * run.bytes_by_queue[3] as f64,
        0.01,
        "3:1 between the active tenants",
    );
}

#[test]
fn nested_weights_inside_a_tenant() {
    let mut p = pievde(&[(0, 1)], &[(0, 0, 1), (1, 0, 3)]);
    let run = run_link(&mut p, &[Source::greedy(0, 1514), Source::greedy(1, 1514)], LINK, 0, SEC, SEC);
    assert_within(run.bytes_by_queue[1] as f64, 3.0 * run.bytes_by_queue[0] as f64, 0.01, "VM weights 1:3");
}

#[test]
fn weights_change_at_run_time() {
    let mut p = pievde(&[(0, 1), (1, 1)], &[(0, 0, 1), (1, 1, 1)]);
    let sources = [Source::greedy(0, 1514), Source::greedy(1, 1514)];
    run_link(&mut p, &sources, LINK, 0, SEC, SEC);
    p.set_tenant(1, 4).unwrap();
    let run = run_link(&mut p, &sources, LINK, SEC, SEC, SEC);
    assert_within(run.bytes_by_queue[1] as f64, 4.0 * run.bytes_by_queue[0] as f64, 0.01, "after change");
    // Moving a backlogged VM to another tenant keeps its packets.
    p.set_tenant(2, 1).unwrap();
    let backlog = p.queue_backlog(1);
    p.set_vm(1, 2, 1, 256).unwrap();
    assert_eq!(p.queue_backlog(1), backlog);
    assert!(p.remove_tenant(2).is_err(), "a tenant with VMs cannot be removed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Long-run tenant shares within 1% of their weights, for any weights.
    #[test]
    fn tenant_shares_follow_weights(weights in prop::collection::vec(1u32..10, 2..6), vms_per_tenant in 1usize..4) {
        let tenants: Vec<(usize, u32)> = weights.iter().copied().enumerate().collect();
        let vms: Vec<(usize, usize, u32)> = (0..weights.len() * vms_per_tenant).map(|q| (q, q / vms_per_tenant, 1)).collect();
        let mut p = pievde(&tenants, &vms);
        let sources: Vec<Source> = vms.iter().map(|&(q, _, _)| Source::greedy(q, 1514)).collect();
        let run = run_link(&mut p, &sources, LINK, 0, 2 * SEC, SEC);
        let total: u64 = run.bytes_by_queue.iter().sum();
        let weight_sum: u32 = weights.iter().sum();
        for (t, &w) in weights.iter().enumerate() {
            let got: u64 = run.bytes_by_queue[t * vms_per_tenant..(t + 1) * vms_per_tenant].iter().sum();
            let want = f64::from(w) / f64::from(weight_sum);
            prop_assert!(((got as f64 / total as f64) - want).abs() <= 0.01 * want, "tenant {} share {} vs {}", t, got as f64 / total as f64, want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Work conservation under any pattern of arrivals and departures: while a packet waits,
    /// a dequeue returns one.
    #[test]
    fn a_waiting_packet_is_always_sent(steps in prop::collection::vec((0usize..6, 0u32..4, 0u32..4), 1..400)) {
        let mut s = pievde(&[(0, 5), (1, 3), (2, 1)], &[(0, 0, 1), (1, 0, 1), (2, 0, 1), (3, 1, 1), (4, 1, 1), (5, 2, 1)]);
        let mut seq = 0u64;
        for (vm, arrivals, departures) in steps {
            for _ in 0..arrivals {
                seq += 1;
                let _ = s.enqueue(vm, 1538, seq, 0);
            }
            for _ in 0..departures {
                let waiting = s.backlog_packets();
                let got = s.dequeue(0);
                prop_assert_eq!(got.is_some(), waiting > 0, "{} waiting", waiting);
            }
        }
    }
}
