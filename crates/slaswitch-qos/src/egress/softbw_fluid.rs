//! SoftBW in fluid form: the rates the packet scheduler in `softbw.rs` converges to over an
//! interval, for simulations that allocate a link per second instead of per packet (seed 003
//! Sec. 6.4's 1 s allocation).
//!
//! It follows the dequeue rule step by step. A queue below its guarantee has `dtau >= 0`, so it
//! is eligible at once, and eligible queues are served in round robin: queues under their
//! guarantee share the link equally until each reaches the smaller of its demand and its
//! guarantee, where its time-to-send holds it back. That is a water-fill with equal weights, each
//! queue capped at `min(demand, guarantee)`. When the capped rates leave capacity, the link's
//! own error lets the residual round robin serve every backlogged queue in turn, and residual
//! departures do not count against guarantees: a second equal water-fill of what is left, each
//! queue capped at its unmet demand. Over-committed, the first step already fills the link.
//! `slaswitch-sim validate-fluid` checks this against the packet scheduler on a fake clock.

use super::fill::capped_fill;

/// One queue's second: what it would send, and what it is guaranteed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FluidDemand {
    /// The rate it offers, bits per second.
    pub demand_bps: f64,
    /// The rate its guarantee gives it now (for a fairness guarantee, the small fairness
    /// rate; for a dynamic one, its current expected guarantee), bits per second.
    pub guarantee_bps: f64,
}

/// Reusable buffers, so a simulation allocates nothing per link.
#[derive(Clone, Debug, Default)]
pub struct FluidScratch {
    order: Vec<usize>,
    caps: Vec<f64>,
    more: Vec<f64>,
}

/// The rates (bits per second) SoftBW gives `demands` on a link of `link_rate_bps`, into `rates`.
pub fn fluid_rates(link_rate_bps: f64, demands: &[FluidDemand], scratch: &mut FluidScratch, rates: &mut Vec<f64>) {
    let FluidScratch { order, caps, more } = scratch;
    rates.clear();
    rates.resize(demands.len(), 0.0);
    caps.clear();
    caps.extend(demands.iter().map(|d| d.demand_bps.max(0.0).min(d.guarantee_bps.max(0.0))));
    let used = capped_fill(link_rate_bps, caps, None, order, rates);
    let residual = link_rate_bps - used;
    if residual <= link_rate_bps * 1e-12 {
        return;
    }
    caps.clear();
    caps.extend(demands.iter().zip(rates.iter()).map(|(d, r)| (d.demand_bps - r).max(0.0)));
    more.clear();
    more.resize(demands.len(), 0.0);
    capped_fill(residual, caps, None, order, more);
    for (r, m) in rates.iter_mut().zip(more.iter()) {
        *r += m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(link: f64, d: &[(f64, f64)]) -> Vec<f64> {
        let demands: Vec<FluidDemand> =
            d.iter().map(|&(demand_bps, guarantee_bps)| FluidDemand { demand_bps, guarantee_bps }).collect();
        let mut out = Vec::new();
        fluid_rates(link, &demands, &mut FluidScratch::default(), &mut out);
        out
    }

    #[test]
    fn guarantees_first_then_the_residual_in_equal_parts() {
        // 450 and 300 guaranteed, both wanting the whole link: each its guarantee, then half of
        // the 250 left.
        let r = rates(1000.0, &[(1000.0, 450.0), (1000.0, 300.0)]);
        assert!((r[0] - 575.0).abs() < 1e-9 && (r[1] - 425.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn work_conserving_and_never_above_demand() {
        let r = rates(1000.0, &[(100.0, 450.0), (2000.0, 10.0), (50.0, 1.0)]);
        assert_eq!(r[0], 100.0);
        assert_eq!(r[2], 50.0);
        assert!((r.iter().sum::<f64>() - 1000.0).abs() < 1e-9, "the link is full: {r:?}");
        let idle = rates(1000.0, &[(100.0, 450.0), (200.0, 10.0)]);
        assert_eq!(idle, vec![100.0, 200.0], "below the link everyone gets its demand");
    }

    #[test]
    fn over_committed_equal_guarantees_share_equally_whatever_the_demand() {
        // Seed 003 Fig. 8: three 450 guarantees on 1000.
        let r = rates(1000.0, &[(1000.0, 450.0), (1000.0, 450.0), (2000.0, 450.0)]);
        for x in &r {
            assert!((x - 1000.0 / 3.0).abs() < 1e-9, "{r:?}");
        }
        // Over-committed (1,400 guaranteed on 1,000): equal shares, but no queue above its
        // guarantee while another is below its own; the rest goes to the largest guarantee.
        let r = rates(1000.0, &[(1000.0, 900.0), (1000.0, 300.0), (1000.0, 200.0)]);
        let want = [500.0, 300.0, 200.0];
        assert!(r.iter().zip(want).all(|(x, w)| (x - w).abs() < 1e-9), "{r:?}");
    }
}
