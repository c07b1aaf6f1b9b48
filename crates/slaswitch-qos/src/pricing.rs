//! SoftBW's usage-based charging (seed 003 Sec. 3.3): per billing cycle a VM pays for the part
//! of its guarantee it actually got (the fulfillment F = rate / guarantee, at most 1), at a unit
//! price that grows with what it bought, and for traffic above its guarantee at the fairness
//! price.
//!
//! Unit prices are per Mbit/s for one second (the paper's "P, the price of using 1 Mbps for 1
//! seconds"):
//! * strict guarantee B: `P_s = P0 (1 + B/C)`;
//! * dynamic guarantee (S, T): `P_d = (1 + S/(T C)) beta P0`, priced on its average B_j = S/T;
//! * fairness, and any rate r above a guarantee: `P_f = r/C beta P0`, below `P_d` always.
//!
//! The price functions are non-decreasing in what is bought, which is what keeps
//! price-performance consistent: declaring a larger guarantee to finish sooner costs more per
//! bit, so it does not pay.

use crate::egress::softbw::{average_rate_bps, Guarantee};

/// The provider's price parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriceParams {
    /// P0: the base price of 1 Mbit/s for one second, in the provider's currency.
    pub p0_per_mbit: f64,
    /// beta: the dynamic and fairness prices' discount against strict, in (0, 1].
    pub beta: f64,
    /// C: the physical bandwidth a VM's access link has, bits per second.
    pub link_capacity_bps: u64,
}

impl Default for PriceParams {
    /// P0 = 1 (prices read in units of P0), beta = 0.8, a 10 Gbit/s link.
    fn default() -> Self {
        PriceParams { p0_per_mbit: 1.0, beta: 0.8, link_capacity_bps: 10_000_000_000 }
    }
}

impl PriceParams {
    /// Checks every field, naming it, its value and what is allowed.
    pub fn validate(&self) -> Result<(), crate::QosError> {
        if !(self.p0_per_mbit.is_finite() && self.p0_per_mbit > 0.0) {
            return Err(crate::QosError::setting(
                format!("p0={}", self.p0_per_mbit),
                "a positive, finite price per Mbit/s-second",
            ));
        }
        if !(self.beta.is_finite() && self.beta > 0.0 && self.beta <= 1.0) {
            return Err(crate::QosError::setting(format!("beta={}", self.beta), "from above 0 to 1"));
        }
        if self.link_capacity_bps == 0 {
            return Err(crate::QosError::setting("link_capacity_bps=0", "a positive rate"));
        }
        Ok(())
    }

    fn capacity(&self) -> f64 {
        self.link_capacity_bps as f64
    }

    /// P_s for a strict guarantee of `rate_bps`.
    pub fn strict_unit_price(&self, rate_bps: u64) -> f64 {
        self.p0_per_mbit * (1.0 + rate_bps as f64 / self.capacity())
    }

    /// P_d for a dynamic guarantee of `total_bytes` within `duration_ns`.
    pub fn dynamic_unit_price(&self, total_bytes: u64, duration_ns: u64) -> f64 {
        (1.0 + average_rate_bps(total_bytes, duration_ns) / self.capacity()) * self.beta * self.p0_per_mbit
    }

    /// P_f for traffic at `rate_bps` with only a fair share.
    pub fn fairness_unit_price(&self, rate_bps: f64) -> f64 {
        (rate_bps / self.capacity()).min(1.0) * self.beta * self.p0_per_mbit
    }
}

/// One VM's charge for one billing cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Charge {
    /// The rate it got over the cycle, bits per second.
    pub rate_bps: f64,
    /// The rate it was promised (B, or B_j = S/T; 0 for fairness), bits per second.
    pub guarantee_bps: f64,
    /// rate / guarantee (none for fairness).
    pub fulfillment: Option<f64>,
    /// For the guaranteed part: unit price times the guarantee times min(F, 1) times the cycle.
    pub guaranteed: f64,
    /// For the rate above the guarantee, at the fairness price.
    pub above: f64,
}

impl Charge {
    /// What the VM pays for the cycle.
    pub fn total(&self) -> f64 {
        self.guaranteed + self.above
    }
}

/// The charge of a VM holding `guarantee` that sent `bytes` over `secs` seconds.
pub fn charge(params: &PriceParams, guarantee: &Guarantee, bytes: u64, secs: f64) -> Charge {
    let rate_bps = if secs > 0.0 { bytes as f64 * 8.0 / secs } else { 0.0 };
    let (guarantee_bps, unit) = match *guarantee {
        Guarantee::Strict { rate_bps: b } => (b as f64, params.strict_unit_price(b)),
        Guarantee::Dynamic { total_bytes, duration_ns } => {
            (average_rate_bps(total_bytes, duration_ns), params.dynamic_unit_price(total_bytes, duration_ns))
        }
        Guarantee::Fairness => (0.0, 0.0),
    };
    let mbit = |bps: f64| bps / 1e6;
    let covered_bps = rate_bps.min(guarantee_bps);
    let above_bps = rate_bps - covered_bps;
    Charge {
        rate_bps,
        guarantee_bps,
        fulfillment: (guarantee_bps > 0.0).then(|| rate_bps / guarantee_bps),
        guaranteed: unit * mbit(covered_bps) * secs,
        above: params.fairness_unit_price(rate_bps) * mbit(above_bps) * secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NS_PER_SEC;

    const C: u64 = 1_000_000_000;

    fn params() -> PriceParams {
        PriceParams { p0_per_mbit: 1.0, beta: 0.5, link_capacity_bps: C }
    }

    #[test]
    fn strict_pays_its_fulfilled_guarantee_and_the_rest_at_the_fairness_price() {
        // Seed 003 Sec. 3.3's example: 100 Mbit/s strict, 150 Mbit/s sent: 100 P_s + 50 P_f.
        let p = params();
        let c = charge(&p, &Guarantee::Strict { rate_bps: 100_000_000 }, 150_000_000 / 8, 1.0);
        assert!((c.guaranteed - 100.0 * p.strict_unit_price(100_000_000)).abs() < 1e-9);
        assert!((c.above - 50.0 * p.fairness_unit_price(150e6)).abs() < 1e-9);
        assert_eq!(c.fulfillment, Some(1.5));
    }

    #[test]
    fn a_half_fulfilled_guarantee_pays_half() {
        let p = params();
        let full = charge(&p, &Guarantee::Strict { rate_bps: 200_000_000 }, 200_000_000 / 8, 1.0);
        let half = charge(&p, &Guarantee::Strict { rate_bps: 200_000_000 }, 100_000_000 / 8, 1.0);
        assert!((half.total() * 2.0 - full.total()).abs() < 1e-9);
        assert_eq!(half.above, 0.0);
        assert_eq!(half.fulfillment, Some(0.5));
    }

    #[test]
    fn unit_prices_never_decrease_with_what_is_bought_and_fairness_is_cheapest() {
        let p = params();
        let mut last = (0.0, 0.0);
        for mbps in (0..=1000).step_by(50) {
            let b = mbps * 1_000_000;
            let s = p.strict_unit_price(b);
            // S/T = b: S bytes in 1 s.
            let d = p.dynamic_unit_price(b / 8, NS_PER_SEC);
            assert!(s >= last.0 && d >= last.1, "{mbps} Mbit/s");
            assert!(p.fairness_unit_price(b as f64) <= d + 1e-12);
            last = (s, d);
        }
    }

    #[test]
    fn declaring_more_to_finish_sooner_costs_more() {
        // The same 1,000 Mbit sent at 100 Mbit/s for 10 s or at 200 for 5 s: the faster
        // purchase pays more (price-performance consistency, Sec. 3.3).
        let p = params();
        let slow: f64 =
            (0..10).map(|_| charge(&p, &Guarantee::Strict { rate_bps: 100_000_000 }, 12_500_000, 1.0).total()).sum();
        let fast: f64 =
            (0..5).map(|_| charge(&p, &Guarantee::Strict { rate_bps: 200_000_000 }, 25_000_000, 1.0).total()).sum();
        assert!(fast > slow, "fast {fast} slow {slow}");
    }

    #[test]
    fn fairness_pays_only_the_fairness_price() {
        let p = params();
        let c = charge(&p, &Guarantee::Fairness, 50_000_000 / 8, 2.0);
        assert_eq!(c.guaranteed, 0.0);
        assert_eq!(c.fulfillment, None);
        assert!((c.above - p.fairness_unit_price(25e6) * 25.0 * 2.0).abs() < 1e-9);
    }

    #[test]
    fn bad_parameters_are_named() {
        for (bad, field) in [
            (PriceParams { p0_per_mbit: f64::NAN, ..params() }, "p0=NaN"),
            (PriceParams { beta: 1.5, ..params() }, "beta=1.5"),
            (PriceParams { link_capacity_bps: 0, ..params() }, "link_capacity_bps=0"),
        ] {
            assert!(bad.validate().unwrap_err().to_string().starts_with(field));
        }
    }
}
