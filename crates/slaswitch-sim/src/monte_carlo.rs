//! Monte Carlo estimate of the over-commitment failure probability: draws the VMs' exponential
//! demands and counts how often they add up to more than the link (the event of seed 003
//! Eq. 1), as an independent check of the closed form.

use rand::{Rng, SeedableRng};
use slaswitch_qos::overcommit::Overcommit;

/// An estimate and its standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The share of samples in which the guarantees failed.
    pub probability: f64,
    /// Its standard error, `sqrt(p (1 - p) / samples)`.
    pub std_error: f64,
}

/// Draws `samples` servers (seeded, so the same call gives the same estimate).
pub fn failure_probability(oc: &Overcommit, samples: u64, seed: u64) -> Estimate {
    let capacity = oc.capacity_in_mean_demands();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut failures = 0u64;
    for _ in 0..samples {
        // Demands in units of the mean demand: -ln(U) is exponential with mean 1.
        let total: f64 = (0..oc.vms).map(|_| -(1.0 - rng.random::<f64>()).ln()).sum();
        failures += u64::from(total > capacity);
    }
    let n = samples.max(1) as f64;
    let p = failures as f64 / n;
    Estimate { probability: p, std_error: (p * (1.0 - p) / n).sqrt() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampled_failure_rate_agrees_with_eq_2() {
        for (vms, utilization, ratio) in [(16, 0.10, 6.9), (16, 0.15, 4.6), (16, 0.10, 10.0), (4, 0.2, 2.0)] {
            let oc = Overcommit { vms, utilization, ratio };
            let e = failure_probability(&oc, 200_000, 7);
            let closed = oc.failure_probability();
            // Within four standard errors (and a floor for probabilities near 0).
            assert!(
                (e.probability - closed).abs() <= 4.0 * e.std_error + 1e-4,
                "{oc:?}: sampled {} +- {}, Eq. 2 {closed}",
                e.probability,
                e.std_error
            );
        }
    }
}
