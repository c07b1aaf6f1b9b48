//! Baseline meters (RFC 2697, RFC 2698, packets per second).

use proptest::prelude::*;
use slaswitch_qos::meter::*;

const SEC: u64 = 1_000_000_000;

#[test]
fn srtcm_colors_by_committed_then_excess_bucket() {
    let mut m = Srtcm::new(SrtcmParams { cir_bytes_per_sec: 1000, cbs_bytes: 1500, ebs_bytes: 3000 }, 0);
    assert_eq!(m.color(1500, 0), Color::Green);
    assert_eq!(m.color(1500, 0), Color::Yellow, "E starts full");
    assert_eq!(m.color(1500, 0), Color::Yellow);
    assert_eq!(m.color(100, 0), Color::Red);
    // 1 s refills C by 1000 bytes; C's overflow (none yet) would go to E.
    assert_eq!(m.color(1000, SEC), Color::Green);
    assert_eq!(m.color(1, SEC), Color::Red);
}

#[test]
fn trtcm_red_above_peak_yellow_above_committed() {
    let mut m = Trtcm::new(
        TrtcmParams { cir_bytes_per_sec: 1000, cbs_bytes: 1000, pir_bytes_per_sec: 2000, pbs_bytes: 2000 },
        0,
    )
    .unwrap();
    assert_eq!(m.color(1000, 0), Color::Green);
    assert_eq!(m.color(1000, 0), Color::Yellow);
    assert_eq!(m.color(1, 0), Color::Red);
    assert!(
        Trtcm::new(TrtcmParams { cir_bytes_per_sec: 2, cbs_bytes: 1, pir_bytes_per_sec: 1, pbs_bytes: 1 }, 0).is_err()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Over any run, what an OVS-style srTCM policer passes never exceeds CIR * t + CBS, and a
    /// sender offering twice the rate gets at least CIR * t.
    #[test]
    fn srtcm_policer_passes_cir_plus_burst(cir in 1_000u64..10_000_000, cbs in 1_500u64..100_000, len in 64u32..1500) {
        let mut p = IngressPolicer::Srtcm(Srtcm::new(SrtcmParams { cir_bytes_per_sec: cir, cbs_bytes: cbs, ebs_bytes: 0 }, 0));
        let gap_ns = (u64::from(len) * SEC / (2 * cir)).max(1);
        let (mut passed, mut now) = (0u64, 0u64);
        while now < SEC {
            if p.allow(len, now) { passed += u64::from(len); }
            now += gap_ns;
        }
        prop_assert!(passed <= cir + cbs, "passed {} > {}", passed, cir + cbs);
        prop_assert!(passed + u64::from(len) >= cir.min(cir * now / SEC), "passed {} < {}", passed, cir);
    }

    #[test]
    fn packet_rate_meter_holds_its_rate(pps in 10u64..50_000, burst in 1u64..64) {
        let mut m = PacketRateMeter::new(pps, burst, 0);
        // Offered at 20x the rate, so a token waits at most 1/20 of its interval in a full bucket.
        let gap_ns = (SEC / (20 * pps)).max(1);
        let (mut passed, mut now) = (0u64, 0u64);
        while now < SEC {
            if m.allow(now) { passed += 1; }
            now += gap_ns;
        }
        // Each token may wait up to one gap (1/20 of its interval) in a full bucket.
        prop_assert!(passed <= pps + burst && passed + 1 >= pps * 19 / 20, "passed {} of {}", passed, pps);
    }
}
