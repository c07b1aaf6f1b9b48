//! SoftBW's over-commitment failure model (seed 003 Sec. 2.2, Eqs. 1-2).
//!
//! A server hosts `n` VMs with the same bandwidth guarantee; their guarantees add up to `δ`
//! times the server's link (`δ = C_B / C`, the over-commitment ratio). Each VM's demand is
//! exponential and independent of the others' (the seed's reading of datacenter edge traffic),
//! and the server's mean utilization without over-commitment is `ρ`: a VM's mean demand is
//! `ρ C_B / n`. A guarantee fails when the demands add up to more than the link. Eq. 1 is the
//! n-dimensional integral of the joint density over that domain; Eq. 2 its closed form, the
//! tail of an Erlang distribution:
//!
//! `P_n = e^(-αC) Σ_{i=1..n} (αC)^(i-1) / (i-1)!`, with `αC = n / (ρ δ)`.
//!
//! The model is what a provider uses to choose how far to over-commit a utilization
//! ([`max_ratio`]); [`failure_probability_integrated`] integrates Eq. 1 numerically so the two
//! can be checked against each other.

/// One server's over-commitment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overcommit {
    /// VMs on the server (`n`), with equal guarantees and independent exponential demands.
    pub vms: u32,
    /// The server's mean network utilization without over-commitment (`ρ`): the VMs' mean
    /// demands over the sum of their guarantees.
    pub utilization: f64,
    /// The sum of the guarantees over the link's capacity (`δ`).
    pub ratio: f64,
}

impl Overcommit {
    /// `αC = n / (ρ δ)`: the link's capacity in units of one VM's mean demand.
    pub fn capacity_in_mean_demands(&self) -> f64 {
        f64::from(self.vms) / (self.utilization * self.ratio)
    }

    /// Eq. 2: the probability that the demands add up to more than the link. Summed in log
    /// space, so a link of hundreds of mean demands neither underflows nor overflows.
    pub fn failure_probability(&self) -> f64 {
        let lambda = self.capacity_in_mean_demands();
        if self.vms == 0 || !lambda.is_finite() {
            return 0.0;
        }
        if lambda <= 0.0 {
            return 1.0;
        }
        // log of e^-λ λ^k / k!, for k = 0 .. n-1.
        let mut log_terms = Vec::with_capacity(self.vms as usize);
        let mut log_term = -lambda;
        for k in 0..self.vms {
            if k > 0 {
                log_term += (lambda / f64::from(k)).ln();
            }
            log_terms.push(log_term);
        }
        let top = log_terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = log_terms.iter().map(|t| (t - top).exp()).sum();
        (top + sum.ln()).exp().min(1.0)
    }
}

/// Eq. 1 integrated numerically: the density of the sum of the `n` demands is built by
/// convolving one demand's density with itself on `steps` intervals up to the link's capacity
/// (trapezoid rule), and the failure probability is what lies beyond the link. O(n steps²):
/// for checking Eq. 2, not for sweeps.
pub fn failure_probability_integrated(oc: &Overcommit, steps: usize) -> f64 {
    let lambda = oc.capacity_in_mean_demands();
    let steps = steps.max(2);
    let h = lambda / steps as f64;
    // Demands in units of the mean demand: one VM's density is e^-x.
    let one: Vec<f64> = (0..=steps).map(|i| (-(i as f64) * h).exp()).collect();
    let mut sum = one.clone();
    for _ in 1..oc.vms {
        sum = (0..=steps)
            .map(|i| {
                let terms = (0..=i).map(|j| sum[j] * one[i - j]);
                let ends = if i == 0 { 0.0 } else { 0.5 * (sum[0] * one[i] + sum[i] * one[0]) };
                h * (terms.sum::<f64>() - ends)
            })
            .collect();
    }
    let inside = h * (sum.iter().sum::<f64>() - 0.5 * (sum[0] + sum[steps]));
    (1.0 - inside).clamp(0.0, 1.0)
}

/// The largest over-commitment ratio, up to `max_ratio`, whose failure probability stays at or
/// under `max_failure` for `vms` VMs at `utilization` (bisection: the probability grows with
/// the ratio). `None` when even a ratio of 1 fails more often.
pub fn max_ratio(vms: u32, utilization: f64, max_failure: f64, max_ratio: f64) -> Option<f64> {
    let failure = |ratio| Overcommit { vms, utilization, ratio }.failure_probability();
    if failure(1.0) > max_failure {
        return None;
    }
    if failure(max_ratio) <= max_failure {
        return Some(max_ratio);
    }
    let (mut lo, mut hi) = (1.0, max_ratio);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if failure(mid) <= max_failure {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oc(vms: u32, utilization: f64, ratio: f64) -> Overcommit {
        Overcommit { vms, utilization, ratio }
    }

    #[test]
    fn one_vm_fails_when_its_exponential_demand_exceeds_the_link() {
        // n = 1: P = e^-αC, αC = 1 / (ρ δ).
        let o = oc(1, 0.1, 4.0);
        assert!((o.failure_probability() - (-2.5f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn eq_2_matches_the_integral_of_eq_1() {
        for (vms, utilization, ratio) in [(2, 0.1, 5.0), (4, 0.15, 3.0), (16, 0.1, 6.9), (16, 0.15, 4.6), (8, 0.3, 2.0)]
        {
            let o = oc(vms, utilization, ratio);
            let (closed, integrated) = (o.failure_probability(), failure_probability_integrated(&o, 4000));
            assert!((closed - integrated).abs() < 1e-4, "{o:?}: Eq. 2 {closed}, Eq. 1 integrated {integrated}");
        }
    }

    #[test]
    fn the_papers_reading_of_fig_2() {
        // Seed 003 Sec. 2.2: with 16 VMs, under 5% failure at 6.9x for 10% utilization and at
        // 4.6x for 15% (both are about αC = 23.2, so the same probability).
        for (utilization, paper) in [(0.10, 6.9), (0.15, 4.6)] {
            let ratio = max_ratio(16, utilization, 0.05, 20.0).unwrap();
            assert!((ratio - paper).abs() < 0.1, "utilization {utilization}: {ratio:.2}x, the paper {paper}x");
        }
    }

    #[test]
    fn failure_grows_with_over_commitment_and_is_bounded() {
        let mut last = 0.0;
        for tenths in 10..=100 {
            let p = oc(16, 0.1, f64::from(tenths) / 10.0).failure_probability();
            assert!((0.0..=1.0).contains(&p) && p >= last, "{tenths}: {p} after {last}");
            last = p;
        }
        // A huge server stays finite: no underflow to NaN.
        let p = oc(1000, 0.1, 1.5).failure_probability();
        assert!(p.is_finite() && p < 1e-100, "{p}");
    }

    #[test]
    fn no_ratio_is_safe_when_even_a_fully_reserved_link_fails_too_often() {
        assert_eq!(max_ratio(1, 0.9, 0.05, 10.0), None);
        assert_eq!(max_ratio(16, 0.01, 0.05, 3.0), Some(3.0));
    }
}
