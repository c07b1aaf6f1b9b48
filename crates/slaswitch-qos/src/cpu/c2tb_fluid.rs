//! C2TB under HBS in fluid form: the cycles per second each port's batches take on one PMD core
//! over an interval, the limit of [`super::PortScheduler`] for simulations that share a host's
//! switch core per second instead of per batch (seed 000 Sec. IV; the datacenter simulation of
//! seed 003 Sec. 6.4 with CPU-bound hosts).
//!
//! It follows the scheduler's rules. A port with tokens is in its ready queue, and one class's
//! ready queue is a round robin of one batch per port, so backlogged ports get equal turns: each
//! takes cycles in proportion to what its batch costs, until it reaches the smaller of its
//! demand and its allocation (a strict or MIN-MAX port whose tokens run out is parked until its
//! own rate refills them). That is a water-fill weighted by batch cost, each port capped at
//! `min(demand, C_alloc)`; an unlimited port is capped only by its demand. A MIN-MAX port's
//! bucket also fills with the capacity nobody was allocated and the overflow of the ports whose
//! turns meet their demand below their allocation (Fig. 7, Algorithm 1), shared by weight among
//! the backlogged MIN-MAX ports (light ones pass their part on; a backlogged port's own overflow
//! is dropped), so its cap is raised by that part. When that pool is large a flooding MIN-MAX port takes turns
//! like an unlimited one, even from a backlogged port within its allocation: the scheduler
//! does so too. Cycles the turns leave over go to the MIN-MAX ports that want more.
//! `slaswitch-sim datacenter --cpu` checks the result against the scheduler on a fake clock
//! (`validate_cpu`). One priority class: the classes' strict order is not modelled.

use super::CycleLimit;
use crate::egress::fill::capped_fill;

/// One port's interval: what its traffic would cost, what a full batch of it costs, and its
/// limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FluidPort {
    /// The cycles per second its offered traffic would take.
    pub demand_cycles_per_sec: f64,
    /// What one full batch of its traffic costs, cycles: its turn's weight in the round robin.
    pub batch_cycles: f64,
    /// Its C2TB limit.
    pub limit: CycleLimit,
}

/// Reusable buffers, so a simulation allocates nothing per core.
#[derive(Clone, Debug, Default)]
pub struct CpuScratch {
    order: Vec<usize>,
    caps: Vec<f64>,
    weights: Vec<f64>,
    more: Vec<f64>,
}

/// The cycles per second each of `ports` gets of a core that gives them `capacity_cycles_per_sec`
/// in all, into `cycles`.
pub fn fluid_cycles(capacity_cycles_per_sec: f64, ports: &[FluidPort], s: &mut CpuScratch, cycles: &mut Vec<f64>) {
    // The overflow each backlogged MIN-MAX port receives, per unit of weight, is where the
    // overflow the turns leave (from the ports they satisfy) shared among the ports they leave
    // backlogged equals it. More overflow per weight gives the backlogged ports more turns,
    // which leaves fewer ports satisfied and less overflow: one crossing, found by bisection.
    let (mut lo, mut hi) = (0.0, overflow_per_weight(capacity_cycles_per_sec, ports, 0.0, s, cycles));
    if hi > 0.0 {
        for _ in 0..BISECTION_STEPS {
            let mid = 0.5 * (lo + hi);
            if overflow_per_weight(capacity_cycles_per_sec, ports, mid, s, cycles) > mid {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    overflow_per_weight(capacity_cycles_per_sec, ports, hi, s, cycles);
    // Cycles still over go to the MIN-MAX ports that want more (Algorithm 1).
    let left = capacity_cycles_per_sec - cycles.iter().sum::<f64>();
    if left > capacity_cycles_per_sec * 1e-9 {
        min_max_extras(left, ports, cycles, s);
        cycles.iter_mut().zip(&s.more).for_each(|(c, e)| *c += e);
    }
}

/// Steps of the bisection for the overflow per weight: 2^-40 of its range.
const BISECTION_STEPS: u32 = 40;

/// Shares the core by turns with each MIN-MAX port's tokens raised by `per_weight` times its
/// weight (into `cycles`); returns the overflow per unit of backlogged MIN-MAX weight that
/// sharing leaves: the capacity nobody was allocated plus the unused allocation of the ports
/// whose demand it meets (a backlogged port's own overflow is dropped), over the weight of the
/// MIN-MAX ports it leaves wanting more.
fn overflow_per_weight(
    capacity_cycles_per_sec: f64,
    ports: &[FluidPort],
    per_weight: f64,
    s: &mut CpuScratch,
    cycles: &mut Vec<f64>,
) -> f64 {
    let demand = |p: &FluidPort| p.demand_cycles_per_sec.max(0.0);
    s.caps.clear();
    s.caps.extend(ports.iter().map(|p| match p.limit {
        CycleLimit::Unlimited => demand(p),
        CycleLimit::Strict { cycles_per_sec } => demand(p).min(cycles_per_sec as f64),
        CycleLimit::MinMax { cycles_per_sec, weight } => {
            demand(p).min(cycles_per_sec as f64 + per_weight * f64::from(weight))
        }
    }));
    by_turns(capacity_cycles_per_sec, ports, s, cycles);
    let allocated: f64 = ports.iter().map(|p| p.limit.alloc_cycles_per_sec() as f64).sum();
    let (mut overflow, mut backlogged_weight) = ((capacity_cycles_per_sec - allocated).max(0.0), 0.0);
    for (p, &got) in ports.iter().zip(cycles.iter()) {
        let met = got >= demand(p) * (1.0 - 1e-9);
        match p.limit {
            CycleLimit::Unlimited => {}
            _ if met => overflow += (p.limit.alloc_cycles_per_sec() as f64 - demand(p)).max(0.0),
            CycleLimit::MinMax { weight, .. } => backlogged_weight += f64::from(weight),
            CycleLimit::Strict { .. } => {}
        }
    }
    if backlogged_weight > 0.0 {
        overflow / backlogged_weight
    } else {
        0.0
    }
}

/// Equal turns of one batch each, up to each port's cap in `s.caps`: a water-fill weighted by
/// batch cost, into `cycles`. Returns the cycles given.
fn by_turns(capacity_cycles_per_sec: f64, ports: &[FluidPort], s: &mut CpuScratch, cycles: &mut Vec<f64>) -> f64 {
    s.weights.clear();
    s.weights.extend(ports.iter().map(|p| p.batch_cycles.max(1.0)));
    cycles.clear();
    cycles.resize(ports.len(), 0.0);
    capped_fill(capacity_cycles_per_sec, &s.caps, Some(&s.weights), &mut s.order, cycles)
}

/// Into `s.more`: `pool` cycles shared by MIN-MAX weight among the MIN-MAX ports, none beyond
/// its demand less what it has (`got`).
fn min_max_extras(pool: f64, ports: &[FluidPort], got: &[f64], s: &mut CpuScratch) {
    s.caps.clear();
    s.weights.clear();
    for (p, g) in ports.iter().zip(got) {
        let (want, weight) = match p.limit {
            CycleLimit::MinMax { weight, .. } => ((p.demand_cycles_per_sec - g).max(0.0), f64::from(weight)),
            _ => (0.0, 0.0),
        };
        s.caps.push(want);
        s.weights.push(weight);
    }
    s.more.clear();
    s.more.resize(ports.len(), 0.0);
    capped_fill(pool, &s.caps, Some(&s.weights), &mut s.order, &mut s.more);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORE: f64 = 2.0e9;

    fn port(demand: f64, batch: f64, limit: CycleLimit) -> FluidPort {
        FluidPort { demand_cycles_per_sec: demand, batch_cycles: batch, limit }
    }

    fn run(ports: &[FluidPort]) -> Vec<f64> {
        let mut out = Vec::new();
        fluid_cycles(CORE, ports, &mut CpuScratch::default(), &mut out);
        out
    }

    fn strict(c: u64) -> CycleLimit {
        CycleLimit::Strict { cycles_per_sec: c }
    }

    #[test]
    fn round_robin_gives_backlogged_ports_cycles_in_proportion_to_their_batch_cost() {
        // Two unlimited ports, each wanting the whole core; one's batches cost three times more.
        let got = run(&[port(CORE, 3000.0, CycleLimit::Unlimited), port(CORE, 9000.0, CycleLimit::Unlimited)]);
        assert!((got[0] - 0.5e9).abs() < 1.0 && (got[1] - 1.5e9).abs() < 1.0, "{got:?}");
        // A light one takes what it needs; the rest goes to the other (work conservation).
        let got = run(&[port(0.2e9, 3000.0, CycleLimit::Unlimited), port(CORE, 3000.0, CycleLimit::Unlimited)]);
        assert!((got[0] - 0.2e9).abs() < 1.0 && (got[1] - 1.8e9).abs() < 1.0, "{got:?}");
    }

    #[test]
    fn strict_ports_get_their_allocation_and_no_more_even_with_the_core_idle() {
        let got = run(&[port(CORE, 3000.0, strict(500_000_000)), port(0.1e9, 3000.0, strict(800_000_000))]);
        assert_eq!(got, vec![0.5e9, 0.1e9]);
    }

    #[test]
    fn over_committed_allocations_share_the_core_by_turns_up_to_each_allocation() {
        // 3 G of allocations on a 2 G core, everyone backlogged: equal turns of equal batches
        // give 2/3 G each, under every allocation.
        let ports: Vec<FluidPort> = (0..3).map(|_| port(CORE, 3000.0, strict(1_000_000_000))).collect();
        let got = run(&ports);
        assert!(got.iter().all(|g| (g - CORE / 3.0).abs() < 1.0), "{got:?}");
        // A small allocation is met in full; the big ones split the rest.
        let got = run(&[
            port(CORE, 3000.0, strict(200_000_000)),
            port(CORE, 3000.0, strict(1_500_000_000)),
            port(CORE, 3000.0, strict(1_500_000_000)),
        ]);
        assert!((got[0] - 0.2e9).abs() < 1.0 && (got[1] - 0.9e9).abs() < 1.0, "{got:?}");
        assert!((got.iter().sum::<f64>() - CORE).abs() < 1.0);
    }

    #[test]
    fn min_max_ports_share_what_is_left_by_weight() {
        // Allocations 0.4 G and 0.2 G, weights 1 and 3, both backlogged: 1.4 G left, split 1:3.
        let mm = |c: u64, weight: u32| CycleLimit::MinMax { cycles_per_sec: c, weight };
        let got = run(&[port(CORE, 3000.0, mm(400_000_000, 1)), port(CORE, 3000.0, mm(200_000_000, 3))]);
        assert!((got[0] - 0.75e9).abs() < 1.0 && (got[1] - 1.25e9).abs() < 1.0, "{got:?}");
        // A strict neighbour's unused allocation goes to the MIN-MAX port, not to itself.
        let got = run(&[port(0.1e9, 3000.0, strict(1_000_000_000)), port(CORE, 3000.0, mm(200_000_000, 1))]);
        assert!((got[0] - 0.1e9).abs() < 1.0 && (got[1] - 1.9e9).abs() < 1.0, "{got:?}");
    }
}
