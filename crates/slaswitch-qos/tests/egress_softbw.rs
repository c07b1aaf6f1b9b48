//! SoftBW (seed 003 Sec. 4-5) on a fake link.

mod common;

use common::{assert_within, bps, run_link, Source};
use proptest::prelude::*;
use slaswitch_qos::egress::softbw::{Guarantee, SoftBw, SoftBwConfig};
use slaswitch_qos::egress::EgressScheduler;

const LINK: u64 = 1_000_000_000;
const SEC: u64 = 1_000_000_000;
const M: u64 = 1_000_000;

fn softbw(guarantees: &[Guarantee]) -> SoftBw<u64> {
    let mut s = SoftBw::new(SoftBwConfig::new(LINK), 0).unwrap();
    for (q, &g) in guarantees.iter().enumerate() {
        s.set_guarantee(q, g, 256, 0).unwrap();
    }
    s
}
fn strict(mbps: u64) -> Guarantee {
    Guarantee::Strict { rate_bps: mbps * M }
}

#[test]
fn time_to_send_follows_equations_4_to_6() {
    let mut s = softbw(&[strict(100)]);
    let per_packet_ns = 1500 * 8 * 1_000 / 100; // 120 us at 100 Mbit/s
                                                // Back-to-back departures faster than B drive dtau negative: tts = now + p/B (Eq. 5).
    s.enqueue(0, 1500, 1, 0).unwrap();
    s.enqueue(0, 1500, 2, 0).unwrap();
    s.enqueue(0, 1500, 3, 0).unwrap();
    assert!(s.dequeue(0).is_some());
    assert_eq!(s.view(0).unwrap().tts_ns, 0, "first packet: dtau = 0, guarantee not exceeded");
    assert!(s.dequeue(10_000).is_some());
    let v = s.view(0).unwrap();
    assert!(v.dtau_ns < 0.0);
    assert_eq!(v.tts_ns, 10_000 + per_packet_ns, "Eq. 5");
    // Before tts the queue may only use residual link capacity.
    // After a long gap dtau turns positive again: tts = 0 (send at once).
    assert!(s.dequeue(2_000_000).is_some());
    assert_eq!(s.view(0).unwrap().tts_ns, 0);
    let dtau_positive = s.view(0).unwrap().dtau_ns;
    assert!(dtau_positive > 0.0);
    // Positive to negative: tts = now + p/B - previous dtau (Eq. 6, our reading).
    let mut s2 = softbw(&[strict(100)]);
    for i in 0..3 {
        s2.enqueue(0, 1500, i, 0).unwrap();
    }
    s2.dequeue(0).unwrap();
    s2.dequeue(per_packet_ns + 50_000).unwrap(); // slower than B: dtau = +50 us
    assert_eq!(s2.view(0).unwrap().dtau_ns, 50_000.0);
    let now = per_packet_ns + 50_000 + 10_000; // much faster than B: dtau turns negative
    s2.dequeue(now).unwrap();
    assert!(s2.view(0).unwrap().dtau_ns < 0.0);
    assert_eq!(s2.view(0).unwrap().tts_ns, now + per_packet_ns - 50_000, "Eq. 6");
}

#[test]
fn dtau_is_clamped_to_tau_max() {
    let mut s = softbw(&[strict(100)]);
    for t in 0..100u64 {
        s.enqueue(0, 64, t, t * 100_000_000).unwrap();
        s.dequeue(t * 100_000_000).unwrap();
    }
    assert_eq!(s.view(0).unwrap().dtau_ns, s.config().tau_max_ns as f64);
}

#[test]
fn strict_guarantees_hold_and_residual_is_shared_equally() {
    // VM0 and VM1 buy 300 Mbit/s each, VM2 only fairness; all greedy on a 1 Gbit/s link.
    let mut s = softbw(&[strict(300), strict(300), Guarantee::Fairness]);
    let sources: Vec<Source> = (0..3).map(|q| Source::greedy(q, 1500)).collect();
    let run = run_link(&mut s, &sources, LINK, 0, 2 * SEC, SEC);
    let rates: Vec<f64> = run.bytes_by_queue.iter().map(|&b| bps(b, 2 * SEC)).collect();
    assert!(rates[0] >= 300.0 * M as f64 && rates[1] >= 300.0 * M as f64, "{rates:?}");
    assert!(rates.iter().sum::<f64>() >= 0.99 * LINK as f64, "work-conserving: {rates:?}");
    // The 400 Mbit/s left over is shared equally: VM2 gets about a third of it... and more.
    assert!(rates[2] >= 0.3 * 400.0 * M as f64, "fairness VM starved: {rates:?}");
}

#[test]
fn a_guarantee_is_met_against_a_greedy_neighbour() {
    // Like Sec. 6.2: VM X sends at its guarantee; VM Y floods with many packets.
    let mut s = softbw(&[strict(450), strict(450)]);
    let sources = [
        Source { queue: 0, packet_bytes: 1500, rate_bps: Some(450 * M), start_ns: 0, stop_ns: u64::MAX },
        Source::greedy(1, 1500),
    ];
    let run = run_link(&mut s, &sources, LINK, 0, 2 * SEC, SEC);
    assert_within(bps(run.bytes_by_queue[0], 2 * SEC), 450.0 * M as f64, 0.01, "VM X");
    assert!(bps(run.bytes_by_queue[1], 2 * SEC) >= 0.99 * 550.0 * M as f64, "VM Y gets the rest");
}

#[test]
fn over_committed_guarantees_share_by_fulfillment() {
    // 800 + 800 Mbit/s promised on 1 Gbit/s: both get half (equal fulfillment).
    let mut s = softbw(&[strict(800), strict(800)]);
    let sources: Vec<Source> = (0..2).map(|q| Source::greedy(q, 1500)).collect();
    let run = run_link(&mut s, &sources, LINK, 0, 2 * SEC, SEC);
    assert_within(run.bytes_by_queue[0] as f64, run.bytes_by_queue[1] as f64, 0.01, "equal shares");
}

#[test]
fn dynamic_guarantee_delivers_s_within_t() {
    // S = 100 MB over T = 2 s (400 Mbit/s on average) against a greedy strict 700 Mbit/s VM.
    let total = 100_000_000;
    let mut s = softbw(&[Guarantee::Dynamic { total_bytes: total, duration_ns: 2 * SEC }, strict(700)]);
    let sources: Vec<Source> = (0..2).map(|q| Source::greedy(q, 1500)).collect();
    let run = run_link(&mut s, &sources, LINK, 0, 2 * SEC, SEC / 10);
    let mut sent = 0;
    let mut done_at = None;
    for (i, w) in run.windows.iter().enumerate() {
        sent += w[0];
        if sent >= total && done_at.is_none() {
            done_at = Some(i + 1);
        }
    }
    assert!(done_at.is_some_and(|w| w <= 20), "S not delivered within T: sent {sent} of {total}");
    // After S is delivered the guarantee falls to the fairness floor.
    s.update_guarantees(2 * SEC + 1);
    assert_eq!(s.view(0).unwrap().current_rate_bps, s.config().fairness_rate_bps);
}

#[test]
fn dynamic_guarantee_never_exceeds_its_initial_rate() {
    // A VM that sends nothing at first would see s'/t' rise above S/T; the guarantee is capped.
    let mut s = softbw(&[Guarantee::Dynamic { total_bytes: 50_000_000, duration_ns: 2 * SEC }]);
    s.update_guarantees(SEC);
    assert_eq!(s.view(0).unwrap().current_rate_bps, 200 * M, "capped at S/T");
    s.update_guarantees(3 * SEC);
    assert_eq!(s.view(0).unwrap().current_rate_bps, s.config().fairness_rate_bps, "fairness only after T");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Guarantees that fit the link are met for every greedy queue, and the link stays busy.
    #[test]
    fn fitting_guarantees_are_met_and_work_is_conserved(
        rates in prop::collection::vec(10u64..300, 1..6),
        sizes in prop::collection::vec(prop::sample::select(vec![64u32, 512, 1500]), 6),
    ) {
        let scale = (rates.iter().sum::<u64>() as f64 / 900.0).max(1.0);
        let guarantees: Vec<Guarantee> = rates.iter().map(|&r| strict((r as f64 / scale) as u64 + 1)).collect();
        let mut s = softbw(&guarantees);
        let sources: Vec<Source> = (0..rates.len()).map(|q| Source::greedy(q, sizes[q])).collect();
        let run = run_link(&mut s, &sources, LINK, 0, SEC, SEC);
        for (q, g) in guarantees.iter().enumerate() {
            let Guarantee::Strict { rate_bps } = g else { unreachable!() };
            prop_assert!(bps(run.bytes_by_queue[q], SEC) >= 0.99 * *rate_bps as f64, "queue {} got {} of {}", q, bps(run.bytes_by_queue[q], SEC), rate_bps);
        }
        prop_assert!(run.busy_ns as f64 >= 0.99 * SEC as f64, "link busy {} ns", run.busy_ns);
    }
}

/// Sec. 5's fairness guarantee with unequal guarantees: each VM gets its guarantee and an
/// equal part of the rest, whatever the guarantees (residual departures do not count against
/// a guarantee).
#[test]
fn the_residual_is_shared_equally_whatever_the_guarantees() {
    let link = 200 * M;
    for (g, fair0, fair1) in [(Guarantee::Fairness, 175.0, 25.0), (strict(10), 170.0, 30.0)] {
        let mut s = SoftBw::new(SoftBwConfig::new(link), 0).unwrap();
        s.set_guarantee(0, strict(150), 256, 0).unwrap();
        s.set_guarantee(1, g, 256, 0).unwrap();
        let run = run_link(&mut s, &[Source::greedy(0, 1500), Source::greedy(1, 1500)], link, 0, 2 * SEC, SEC);
        let w = &run.windows[1];
        assert_within(bps(w[0], SEC), fair0 * 1e6, 0.02, "the larger guarantee plus half the rest");
        assert_within(bps(w[1], SEC), fair1 * 1e6, 0.05, "the smaller guarantee plus half the rest");
    }
}
