//! Water-filling of drift-compensated allocations into the cycles a core can give (an
//! extension of seed 000 Sec. III; see `docs/deviations.md`). When the host runs slower than at
//! calibration, every model-derived allocation asks for more cycles than it bought; these
//! functions decide how much of that each port may have when the core cannot give everyone all
//! of it.

use super::latency_class::FORGIVENESS_RESERVE_SHARE;

/// The share of a PMD's core its ports can be given: admission admits allocations up to it,
/// and drift-compensated allocations are fitted below it less the share the host stalls the
/// PMD. The rest is the PMD's own work: empty polls, publishing, draining paced ports.
pub const DELIVERABLE_CORE_SHARE: f64 = 0.95;

/// A model-derived allocation being compensated: its base cycles, its factor, and whether its
/// traffic is beyond the profile it bought.
#[derive(Clone, Copy, Debug)]
pub struct CompensatedPort {
    /// The allocation the model gave, cycles per second.
    pub base: f64,
    /// The factor it would follow with room enough.
    pub factor: f64,
    /// Its traffic costs more per byte than the profile it bought.
    pub beyond_profile: bool,
}

/// Each port's factor cap when the compensated allocations must fit in `room` cycles/s.
///
/// Compensation is there so that a VM sending what it bought gets its purchase on a host
/// slower than at calibration. When the core cannot give every port its compensation, the
/// ports whose traffic is beyond their profile give theirs up first, down to their base
/// allocation (what their purchase buys at the calibrated speed, as admission control
/// priced it): the seed's guarantee binds for the profile bought (seed 000 Sec. III). Only
/// then do the ports within their profile lose compensation, and below a factor of 1 everyone
/// loses the same share: the host is too slow for what was admitted. Within a group the cap
/// is one level (water-filling from the top, [`water_level`]): the ports whose measured cost
/// exceeds the model the most give up first.
pub fn factor_caps(ports: &[CompensatedPort], room: f64) -> Vec<f64> {
    let need = |beyond: bool, cap: f64| -> f64 {
        ports.iter().filter(|p| p.beyond_profile == beyond).map(|p| p.base * p.factor.min(cap)).sum()
    };
    let group = |beyond: bool, cap: f64| -> Vec<(f64, f64)> {
        ports.iter().filter(|p| p.beyond_profile == beyond).map(|p| (p.base, p.factor.min(cap))).collect()
    };
    let (within_full, beyond_at_base) = (need(false, f64::INFINITY), need(true, 1.0));
    let (within_cap, beyond_cap) = if within_full + beyond_at_base <= room {
        // Everyone within profile keeps all of it; the others share what is left.
        (f64::INFINITY, water_level(&group(true, f64::INFINITY), room - within_full))
    } else if need(false, 1.0) + beyond_at_base <= room {
        (water_level(&group(false, f64::INFINITY), room - beyond_at_base), 1.0)
    } else {
        let all: Vec<(f64, f64)> = group(false, f64::INFINITY).into_iter().chain(group(true, 1.0)).collect();
        let level = water_level(&all, room);
        (level, level.min(1.0))
    };
    ports.iter().map(|p| if p.beyond_profile { beyond_cap } else { within_cap }).collect()
}

/// What each port's raise (a purchase ledger's, [`super::promise`]) may be when the raises
/// must fit in `left` cycles/s, what the compensated allocations leave of the core. `ports`
/// holds each port's compensated allocation (cycles/s) and its raise. A raise pays what a
/// port is owed of its purchase, so it never takes from another port's compensated
/// allocation: it comes after them, from what is left. A raise below 1 (a strict port ahead
/// of its purchase) gives cycles back and is always granted. When the raises above 1 do not
/// fit, each gets the same share of its request.
pub fn raise_grants(ports: &[(f64, f64)], left: f64) -> Vec<f64> {
    let given_back: f64 = ports.iter().map(|&(alloc, raise)| alloc * (1.0 - raise).max(0.0)).sum();
    let asked: f64 = ports.iter().map(|&(alloc, raise)| alloc * (raise - 1.0).max(0.0)).sum();
    let room = (left + given_back).max(0.0);
    let share = if asked <= room { 1.0 } else { room / asked };
    ports.iter().map(|&(_, raise)| if raise > 1.0 { 1.0 + (raise - 1.0) * share } else { raise }).collect()
}

/// A model-derived port as [`fit_allocations`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct FittedPort {
    /// Its allocation and drift factor.
    pub port: CompensatedPort,
    /// The raise its purchase ledger asks for ([`super::promise`]).
    pub raise: f64,
    /// A latency-class port with a purchase ([`super::latency_class`]).
    pub latency_class: bool,
}

/// What [`fit_allocations`] grants: per port its drift factor and raise, and the cycles per
/// second no port was promised.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// Per port, in order: (drift factor, raise).
    pub factors: Vec<(f64, f64)>,
    /// Cycles per second left after every grant: what latency-class ports may be forgiven.
    pub spare_cycles_per_sec: f64,
}

/// Fits the compensated allocations into `room` cycles/s. A latency-class port keeps its whole
/// compensation and [`FORGIVENESS_RESERVE_SHARE`] of it is kept out of the others' reach: HBS
/// serves it first anyway, its purchase bounds it in bytes, and capped it would wait for
/// cycles. The others' factors are capped by [`factor_caps`] into what is left, then every
/// raise is granted from what the allocations leave ([`raise_grants`]).
pub fn fit_allocations(ports: &[FittedPort], room: f64) -> Fitted {
    let latency_need: f64 = ports.iter().filter(|p| p.latency_class).map(|p| p.port.base * p.port.factor).sum();
    let reserve = (latency_need * FORGIVENESS_RESERVE_SHARE).min((room - latency_need).max(0.0));
    let others: Vec<CompensatedPort> = ports.iter().filter(|p| !p.latency_class).map(|p| p.port).collect();
    let mut other_caps = factor_caps(&others, (room - latency_need - reserve).max(0.0)).into_iter();
    let drift: Vec<f64> =
        ports
            .iter()
            .map(|p| {
                if p.latency_class {
                    p.port.factor
                } else {
                    p.port.factor.min(other_caps.next().expect("one cap each"))
                }
            })
            .collect();
    let allocs: Vec<(f64, f64)> = ports.iter().zip(&drift).map(|(p, f)| (p.port.base * f, p.raise)).collect();
    let left = room - reserve - allocs.iter().map(|&(a, _)| a).sum::<f64>();
    let raises = raise_grants(&allocs, left);
    let granted: f64 = allocs.iter().zip(&raises).map(|(&(a, _), r)| a * r).sum();
    Fitted { factors: drift.into_iter().zip(raises).collect(), spare_cycles_per_sec: (room - granted).max(0.0) }
}

/// The highest factor level `L` such that `sum(base * min(factor, L))` fits in `room`
/// (`f64::INFINITY` when everything fits). When even a level of 1 does not fit, the level is
/// the common share below 1 that does.
pub fn water_level(ports: &[(f64, f64)], room: f64) -> f64 {
    let need = |level: f64| -> f64 { ports.iter().map(|&(base, f)| base * f.min(level)).sum() };
    if need(f64::INFINITY) <= room {
        return f64::INFINITY;
    }
    let base_sum: f64 = ports.iter().map(|&(b, _)| b).sum();
    let floor = ports.iter().map(|&(_, f)| f).fold(f64::INFINITY, f64::min);
    if need(floor) >= room {
        // Every factor is cut to the same level: room / sum(base), below the lowest factor.
        return if base_sum > 0.0 { room / base_sum } else { 0.0 };
    }
    // need() is continuous and increasing in the level: bisect between the lowest factor
    // (fits) and the highest (does not).
    let (mut lo, mut hi) = (floor, ports.iter().map(|&(_, f)| f).fold(0.0, f64::max));
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if need(mid) <= room {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::{factor_caps, fit_allocations, water_level, CompensatedPort, FittedPort};

    #[test]
    fn ports_beyond_their_profile_give_up_compensation_before_the_others() {
        // Fig. 10 on a slow host: every port needs 1.3x; VM1 sends its profile, the three
        // others flood 64-byte frames; room for 1.2x all round.
        let port = |base, beyond_profile| CompensatedPort { base, factor: 1.3, beyond_profile };
        let ports = [port(833.0, false), port(833.0, true), port(208.0, true), port(208.0, true)];
        let caps = factor_caps(&ports, 2500.0);
        assert_eq!(caps[0], f64::INFINITY, "the VM within its profile keeps its compensation");
        let given: f64 = ports.iter().zip(&caps).map(|(p, &c)| p.base * p.factor.min(c)).sum();
        assert!((given - 2500.0).abs() < 0.01, "{given}");
        assert!(caps[1] > 1.0 && caps[1] < 1.3, "{caps:?}");
        // Less room: the floods are held to their base, VM1 takes what is left.
        let caps = factor_caps(&ports, 1249.0 + 833.0 * 1.1);
        assert_eq!(caps[1], 1.0);
        assert!((caps[0] - 1.1).abs() < 1e-6, "{caps:?}");
        // Not even the bases fit: everyone at the same share.
        let caps = factor_caps(&ports, 1000.0);
        assert!(caps.iter().all(|&c| (c - 1000.0 / 2082.0).abs() < 1e-9), "{caps:?}");
        // With nobody beyond its profile this is plain water-filling.
        let honest: Vec<CompensatedPort> =
            ports.iter().map(|p| CompensatedPort { beyond_profile: false, ..*p }).collect();
        let caps = factor_caps(&honest, 2500.0);
        assert!(caps.iter().all(|&c| (c - 2500.0 / 2082.0).abs() < 1e-6), "{caps:?}");
    }

    #[test]
    fn the_costliest_ports_give_up_their_compensation_first() {
        // Fig. 10's shape: a well-behaved VM at 1.2, two floods at 2.0, room for about 1.2 each.
        let ports = [(833.0, 1.2), (833.0, 2.0), (208.0, 1.3), (208.0, 2.0)];
        let level = water_level(&ports, 2500.0);
        assert!((1.19..1.21).contains(&level), "{level}");
        let given: f64 = ports.iter().map(|&(b, f)| b * f.min(level)).sum();
        assert!((given - 2500.0).abs() < 0.01, "{given}");
        // Enough room: nobody is capped.
        assert_eq!(water_level(&ports, 1e9), f64::INFINITY);
        // Not even the lowest factor fits: everyone at the same share.
        let level = water_level(&ports, 1000.0);
        assert!((level - 1000.0 / 2082.0).abs() < 1e-9, "{level}");
    }

    #[test]
    fn a_latency_class_port_keeps_its_compensation_and_a_reserve_beside_floods() {
        // Floods whose cost is twice their price would take the whole core; the latency-class
        // port keeps its 1.7x and half of it stays unpromised, to be forgiven from.
        let flood = |raise| FittedPort {
            port: CompensatedPort { base: 600.0, factor: 2.0, beyond_profile: false },
            raise,
            latency_class: false,
        };
        let probe = FittedPort {
            port: CompensatedPort { base: 10.0, factor: 1.7, beyond_profile: false },
            raise: 1.0,
            latency_class: true,
        };
        let fitted = fit_allocations(&[flood(1.5), probe, flood(1.0)], 1000.0);
        assert_eq!(fitted.factors[1], (1.7, 1.0));
        assert!((fitted.spare_cycles_per_sec - 8.5).abs() < 1e-6, "{fitted:?}");
        let floods: f64 = [0, 2].iter().map(|&i| 600.0 * fitted.factors[i].0 * fitted.factors[i].1).sum();
        assert!((floods - (1000.0 - 17.0 - 8.5)).abs() < 1e-6, "{fitted:?}");
        // Without a latency-class port nothing is kept back.
        let fitted = fit_allocations(&[flood(1.0), flood(1.0)], 1000.0);
        assert!(fitted.spare_cycles_per_sec < 1e-6, "{fitted:?}");
    }

    #[test]
    fn raises_share_what_the_compensated_allocations_leave() {
        // Two raised ports asking 100 and 300 cycles/s beyond 1000 each; 200 left: half each.
        let g = super::raise_grants(&[(1000.0, 1.1), (1000.0, 1.3), (500.0, 1.0)], 200.0);
        assert!((g[0] - 1.05).abs() < 1e-12 && (g[1] - 1.15).abs() < 1e-12 && g[2] == 1.0, "{g:?}");
        // Enough left: as asked. A port lowered below 1 gives its cycles to the others.
        assert_eq!(super::raise_grants(&[(1000.0, 1.1)], 500.0), vec![1.1]);
        let g = super::raise_grants(&[(1000.0, 1.2), (1000.0, 0.9)], 0.0);
        assert!((g[0] - 1.1).abs() < 1e-12 && g[1] == 0.9, "{g:?}");
        // Nothing left: no raise.
        assert_eq!(super::raise_grants(&[(1000.0, 2.0)], 0.0), vec![1.0]);
    }
}
