//! Weighted water-filling with floors and ceilings (ANCS CreditFair).

use slaswitch_qos::egress::fill::{weighted_fill, Claim};

fn claim(weight: f64, floor: f64, ceiling: f64) -> Claim {
    Claim { weight, floor, ceiling }
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6 * y.abs().max(1.0))
}

#[test]
fn plain_weights_split_in_proportion() {
    let s = weighted_fill(&[claim(1.0, 0.0, f64::INFINITY), claim(3.0, 0.0, f64::INFINITY)], 100.0);
    assert!(close(&s, &[25.0, 75.0]), "{s:?}");
}

#[test]
fn a_floor_and_capped_neighbours_leave_the_rest_to_the_uncapped_one() {
    // The case the ANCS property test found: weights 4, 1, 6, 7; the weight-1 claimant has a
    // floor and no ceiling, the others a ceiling of 50. It must get everything they leave.
    let s = weighted_fill(
        &[claim(4.0, 0.0, 50.0), claim(1.0, 56.0, f64::INFINITY), claim(6.0, 0.0, 50.0), claim(7.0, 0.0, 50.0)],
        1000.0,
    );
    assert!(close(&s, &[50.0, 850.0, 50.0, 50.0]), "{s:?}");
}

#[test]
fn floors_are_honoured_and_ceilings_respected() {
    let s =
        weighted_fill(&[claim(1.0, 40.0, f64::INFINITY), claim(1.0, 0.0, f64::INFINITY), claim(8.0, 0.0, 30.0)], 100.0);
    assert!(close(&s, &[40.0, 30.0, 30.0]), "{s:?}");
    // Floors beyond the total are scaled down; ceilings below it leave the rest unallocated.
    assert!(close(
        &weighted_fill(&[claim(1.0, 80.0, f64::INFINITY), claim(1.0, 120.0, f64::INFINITY)], 100.0),
        &[40.0, 60.0]
    ));
    assert!(close(&weighted_fill(&[claim(1.0, 0.0, 10.0), claim(1.0, 0.0, 20.0)], 100.0), &[10.0, 20.0]));
}
