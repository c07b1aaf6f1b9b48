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
