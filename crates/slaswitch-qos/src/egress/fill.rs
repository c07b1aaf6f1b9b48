//! Weighted water-filling: split `total` among claimants in proportion to their weights, but
//! never below a claimant's floor nor above its ceiling. Used by ANCS to turn weights,
//! MinimumCredit and MaximumCredit into per-period credits (seed 002 Sec. 3.3).

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    pub weight: f64,
    pub floor: f64,
    pub ceiling: f64,
}

/// Returns each claimant's share. If the floors alone exceed `total`, they are scaled down
/// proportionally (admission control should have refused that configuration). What the
/// ceilings leave unallocated stays unallocated.
pub fn weighted_fill(claims: &[Claim], total: f64) -> Vec<f64> {
    let n = claims.len();
    let mut share = vec![0.0; n];
    let floors: f64 = claims.iter().map(|c| c.floor.min(c.ceiling)).sum();
    if floors >= total {
        let scale = if floors > 0.0 { total / floors } else { 0.0 };
        for (s, c) in share.iter_mut().zip(claims) {
            *s = c.floor.min(c.ceiling) * scale;
        }
        return share;
    }
    // Fix claimants whose proportional share falls outside their bounds, one kind at a time,
    // until the proportional split of what is left respects every remaining bound.
    let mut fixed = vec![false; n];
    loop {
        let remaining: f64 = total - (0..n).filter(|&i| fixed[i]).map(|i| share[i]).sum::<f64>();
        let free_weight: f64 = (0..n).filter(|&i| !fixed[i]).map(|i| claims[i].weight).sum();
        if free_weight <= 0.0 {
            break;
        }
        let per_weight = remaining / free_weight;
        let below: Vec<usize> =
            (0..n).filter(|&i| !fixed[i] && per_weight * claims[i].weight < claims[i].floor).collect();
        let to_fix = if below.is_empty() {
            (0..n).filter(|&i| !fixed[i] && per_weight * claims[i].weight > claims[i].ceiling).collect()
        } else {
            below
        };
        if to_fix.is_empty() {
            for i in (0..n).filter(|&i| !fixed[i]) {
                share[i] = per_weight * claims[i].weight;
            }
            break;
        }
        for i in to_fix {
            fixed[i] = true;
            share[i] = if per_weight * claims[i].weight < claims[i].floor { claims[i].floor } else { claims[i].ceiling };
        }
    }
    share
}
