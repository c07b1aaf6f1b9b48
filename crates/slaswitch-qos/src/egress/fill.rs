//! Weighted water-filling: split `total` among claimants in proportion to their weights, but
//! never below a claimant's floor nor above its ceiling. Used by ANCS to turn weights,
//! MinimumCredit and MaximumCredit into per-period credits (seed 002 Sec. 3.3).

/// One claimant of [`fill`]: weight, and the bounds of its share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    /// Its share relative to the others'.
    pub weight: f64,
    /// The least it gets.
    pub floor: f64,
    /// The most it gets.
    pub ceiling: f64,
}

/// Returns each claimant's share: `clamp(lambda * weight, floor, ceiling)` for the one `lambda`
/// that makes the shares add up to `total`. The sum grows with lambda, so bisection finds it.
/// If the floors alone exceed `total` they are scaled down proportionally (admission control
/// should have refused that configuration); if the ceilings cannot absorb `total`, everyone gets
/// their ceiling and the rest stays unallocated.
///
/// Bounds are settled together, not one pass at a time: a claimant pinned at its floor early
/// must still receive what ceilings free later (`tests/fill.rs` keeps the case).
pub fn weighted_fill(claims: &[Claim], total: f64) -> Vec<f64> {
    let bounded = |c: &Claim| c.ceiling.max(c.floor);
    let floors: f64 = claims.iter().map(|c| c.floor.min(bounded(c))).sum();
    if floors >= total {
        let scale = if floors > 0.0 { total / floors } else { 0.0 };
        return claims.iter().map(|c| c.floor.min(bounded(c)) * scale).collect();
    }
    let share_at =
        |lambda: f64| -> Vec<f64> { claims.iter().map(|c| (lambda * c.weight).clamp(c.floor, bounded(c))).collect() };
    let sum_at = |lambda: f64| share_at(lambda).iter().sum::<f64>();
    if claims.iter().map(bounded).sum::<f64>() <= total {
        return claims.iter().map(bounded).collect();
    }
    let mut hi = 1.0;
    while sum_at(hi) < total && hi < 1e300 {
        hi *= 2.0;
    }
    let mut lo = 0.0;
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if sum_at(mid) < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    share_at(hi)
}

/// Max-min fair shares of `capacity` in proportion to `weights` (`None`: equal), no one above
/// its cap, into `out`; returns what was given. Exact and allocation-free (`order` is scratch):
/// claimants are settled in order of cap over weight, each taking the smaller of its cap and
/// its weight's part of what is left. The fluid schedulers call it once per link or core and
/// second, so it avoids [`weighted_fill`]'s bisection.
pub fn capped_fill(
    capacity: f64,
    caps: &[f64],
    weights: Option<&[f64]>,
    order: &mut Vec<usize>,
    out: &mut [f64],
) -> f64 {
    let weight = |i: usize| weights.map_or(1.0, |w| w[i].max(0.0));
    let level = |i: usize| if weight(i) > 0.0 { caps[i] / weight(i) } else { f64::INFINITY };
    order.clear();
    order.extend(0..caps.len());
    order.sort_unstable_by(|&a, &b| level(a).total_cmp(&level(b)));
    let mut left = capacity.max(0.0);
    let mut weight_left: f64 = (0..caps.len()).map(weight).sum();
    let mut given = 0.0;
    for &i in order.iter() {
        let share = if weight_left > 0.0 { left * weight(i) / weight_left } else { 0.0 };
        let x = caps[i].max(0.0).min(share);
        out[i] = x;
        left -= x;
        given += x;
        weight_left -= weight(i);
    }
    given
}
