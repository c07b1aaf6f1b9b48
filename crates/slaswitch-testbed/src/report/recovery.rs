//! The `recovery` headline: how long a VM stays short after something changed on its PMD (a
//! neighbour's cost rose), until a move between PMDs or its scheduler makes it whole again.

use super::{fmt, received};
use crate::samples::Sample;
use crate::scenario::{Headline, Scenario};

/// A second is whole when the VM got at least this share of what it should.
pub const WHOLE_SHARE: f64 = 0.95;
/// Whole again: this many whole seconds in a row, so one good second between two short ones
/// (a host stall, a sample's edge) is not taken for a recovery.
pub const WHOLE_SECONDS: usize = 5;

/// Seconds from the start of `h.window` to the first of [`WHOLE_SECONDS`] whole seconds in a
/// row; `None` when the window has no such run.
pub(super) fn recovery_value(
    s: &Scenario,
    samples: &[Sample],
    sw: &str,
    step: &str,
    h: &Headline,
) -> (String, Option<f64>, String) {
    let w = h.window.unwrap_or_default();
    let expected = h.expected_mbps.unwrap_or(1.0);
    // A sample at t covers the second that ends at t.
    let got: Vec<(f64, f64)> =
        received(s, samples, sw, step, &h.vm, "mbps").into_iter().filter(|p| p.0 > w[0] && p.0 <= w[1]).collect();
    if got.is_empty() {
        return (sw.to_string(), None, format!("{}: nothing received in [{}, {}] s", h.vm, w[0], w[1]));
    }
    let short = got.iter().filter(|p| p.1 < WHOLE_SHARE * expected).count();
    let whole = format!("{WHOLE_SECONDS} s in a row at >= {:.0}% of {} Mbps", WHOLE_SHARE * 100.0, fmt(Some(expected)));
    let tally = format!("{short} of {} s in [{}, {}] short", got.len(), w[0], w[1]);
    match whole_again(&got, WHOLE_SHARE * expected) {
        Some(t) => {
            let from = t - 1.0;
            (sw.to_string(), Some(from - w[0]), format!("{} whole from {from} s ({whole}); {tally}", h.vm))
        }
        None => (sw.to_string(), None, format!("{} never whole ({whole}); {tally}", h.vm)),
    }
}

/// The time of the first sample of [`WHOLE_SECONDS`] in a row at `at_least` or more.
fn whole_again(per_second: &[(f64, f64)], at_least: f64) -> Option<f64> {
    let mut in_a_row = 0;
    for (i, (_, v)) in per_second.iter().enumerate() {
        in_a_row = if *v >= at_least { in_a_row + 1 } else { 0 };
        if in_a_row == WHOLE_SECONDS {
            return Some(per_second[i + 1 - WHOLE_SECONDS].0);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_again_needs_a_run_of_whole_seconds() {
        let mut s: Vec<(f64, f64)> = (16..=40).map(|t| (t as f64, 50.0)).collect();
        // One good second among short ones is not a recovery.
        s[3].1 = 100.0;
        for p in s.iter_mut().skip(10) {
            p.1 = 96.0;
        }
        assert_eq!(whole_again(&s, 95.0), Some(26.0));
        s[12].1 = 90.0;
        assert_eq!(whole_again(&s, 95.0), Some(29.0));
        assert_eq!(whole_again(&s[..14], 95.0), None);
    }
}
