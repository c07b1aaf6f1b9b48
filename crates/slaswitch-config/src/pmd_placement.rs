//! Which PMD polls a port when the switch runs several. Seed 000 Sec. IV admits purchases per
//! core; with several cores a purchase goes on the core that can hold it, and ports move when a
//! core can no longer keep what it promised or is saturated while another has room. OVS-DPDK
//! assigns rx queues by measured cycles and rebalances after a minute over 95% busy
//! (`pmd-auto-lb`), without a notion of purchases; here promises come first, measured load second.
//!
//! The daemon (placing and moving live ports) and the simulator (a host with many cores) call
//! the same two functions: [`place`] for a new port and [`rebalance`] for the next move.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::BandwidthModel;

use crate::allocation::{deliverable_cycles_per_sec, plan, Candidate, PortPlan};
use crate::error::ConfigError;
use crate::port::PortSpec;
use crate::port_settings::PortSettings;

/// A core is saturated when its PMD is busy this share of its cycles or more.
pub const SATURATED_BUSY_SHARE: f64 = 0.95;

/// A move for load alone must lower the busier core's load by this share of a core at least,
/// so that two cores of near-equal load do not trade a port back and forth.
pub const MIN_GAIN_SHARE: f64 = 0.05;

/// Where a new port goes and the plan that puts it there.
#[derive(Debug)]
pub struct Placed {
    /// The core of the PMD that is to poll it.
    pub core: usize,
    /// Every port's plan with the new one on `core`.
    pub plans: BTreeMap<String, PortPlan>,
}

/// Places a new port: on each of `cores` the whole plan is computed with the port there, and of
/// the cores that admit it the one with the most deliverable cycles left is chosen (then the one
/// polling the fewest ports, then the lowest core). If none admits it, the refusal names each
/// core's reason.
pub fn place(
    others: &[Candidate<'_>],
    spec: &PortSpec,
    settings: &PortSettings,
    cores: &[usize],
    model: Option<&BandwidthModel>,
    core_cycles_per_sec: u64,
) -> Result<Placed, ConfigError> {
    let deliverable = deliverable_cycles_per_sec(core_cycles_per_sec);
    let mut best: Option<(u64, usize, Placed)> = None;
    let mut refusals: Vec<(usize, ConfigError)> = Vec::new();
    for &core in cores {
        let mut candidates: Vec<Candidate> =
            others.iter().map(|c| Candidate { spec: c.spec, settings: c.settings, pmd_core: c.pmd_core }).collect();
        candidates.push(Candidate { spec, settings, pmd_core: core });
        match plan(&candidates, model, cores.len(), core_cycles_per_sec, &spec.name) {
            Ok(plans) => {
                let promised: u64 = candidates
                    .iter()
                    .filter(|c| c.pmd_core == core)
                    .map(|c| plans[&c.spec.name].cpu_qos.limit.alloc_cycles_per_sec())
                    .sum();
                let room = deliverable.saturating_sub(promised);
                let ports = others.iter().filter(|c| c.pmd_core == core).count();
                let better = best.as_ref().is_none_or(|(r, n, _)| room > *r || (room == *r && ports < *n));
                if better {
                    best = Some((room, ports, Placed { core, plans }));
                }
            }
            Err(e) => refusals.push((core, e)),
        }
    }
    if let Some((_, _, placed)) = best {
        return Ok(placed);
    }
    Err(no_core_holds(&spec.name, refusals))
}

/// One refusal when every core refused for the same reason, else each core's.
fn no_core_holds(port: &str, mut refusals: Vec<(usize, ConfigError)>) -> ConfigError {
    let texts: Vec<String> = refusals.iter().map(|(_, e)| e.to_string()).collect();
    if refusals.len() == 1 || texts.windows(2).all(|w| w[0] == w[1]) {
        return refusals.swap_remove(0).1;
    }
    let each: Vec<String> = refusals.iter().zip(&texts).map(|((core, _), t)| format!("core {core}: {t}")).collect();
    ConfigError::Refused { changed: format!("port {port}"), why: format!("no PMD can hold it ({})", each.join("; ")) }
}

/// One port as the rebalancer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PortLoad {
    /// The port.
    pub name: String,
    /// The core of the PMD polling it.
    pub core: usize,
    /// Cycles per second keeping its purchase costs now: its allocation, times its drift factor
    /// where the model under-priced its packets (0: no purchase).
    pub promised_cycles_per_sec: u64,
    /// Cycles per second it used over the last window.
    pub used_cycles_per_sec: u64,
    /// Pinned by the operator (`pmd=N`): never moved.
    pub pinned: bool,
}

/// One PMD's core as the rebalancer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreLoad {
    /// The core.
    pub core: usize,
    /// What it can deliver to its ports now: its deliverable share less what the host took
    /// from it.
    pub deliverable_cycles_per_sec: u64,
    /// Its cycles per second less what the host took from its PMD (a PMD that shares its core
    /// runs only part of the time; busy for all of that, it is saturated).
    pub available_cycles_per_sec: u64,
    /// Cycles per second its PMD was busy over the last window.
    pub busy_cycles_per_sec: u64,
}

/// Why a port moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// Its core's promises exceed what the core can deliver now.
    OverPromised,
    /// Its core is saturated while another has room.
    Saturated,
}

impl MoveReason {
    /// The name in `qos-show` and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            MoveReason::OverPromised => "over_promised",
            MoveReason::Saturated => "saturated",
        }
    }
}

/// A port to move.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    /// The port.
    pub port: String,
    /// From this core.
    pub from: usize,
    /// To this one.
    pub to: usize,
    /// Why.
    pub reason: MoveReason,
    /// A port of core `to` that goes the other way at the same time (a swap), when no single
    /// port's move would do: the cores' ports are too big for what each has left.
    pub swap_with: Option<String>,
}

/// The next move, if one is needed: first a core whose promises exceed what it can deliver
/// gives a port to the core with the most room for its promise (or, when no port fits there
/// whole, trades it for a smaller one of that core); else a saturated core gives the port (or
/// trades it for a smaller one) that evens the two cores' load best, if that lowers the busier
/// one by [`MIN_GAIN_SHARE`] of a core and the load fits in what the target leaves idle (when
/// every core's promises are spent, ports still go where the cycles are idle).
pub fn rebalance(ports: &[PortLoad], cores: &[CoreLoad]) -> Option<Move> {
    let promised =
        |core: usize| -> u64 { ports.iter().filter(|p| p.core == core).map(|p| p.promised_cycles_per_sec).sum() };
    over_promised_move(ports, cores, &promised).or_else(|| saturated_move(ports, cores))
}

/// One candidate: `port` goes from its core to `to`, and `back` (a smaller port of `to`), if
/// any, the other way; `net` is what `to` gains by the measure the trade was sized by.
struct Trade<'a> {
    port: &'a PortLoad,
    to: &'a CoreLoad,
    back: Option<&'a PortLoad>,
    net: u64,
}

impl Trade<'_> {
    fn to_move(&self, reason: MoveReason) -> Move {
        Move {
            port: self.port.name.clone(),
            from: self.port.core,
            to: self.to.core,
            reason,
            swap_with: self.back.map(|q| q.name.clone()),
        }
    }
}

/// Every trade of a movable port of core `from` with a positive `size` (promise or measured
/// load): to each other core, alone or for a movable port of that core of a smaller size.
fn trades<'a>(
    ports: &'a [PortLoad],
    cores: &'a [CoreLoad],
    from: usize,
    size: fn(&PortLoad) -> u64,
) -> impl Iterator<Item = Trade<'a>> + 'a {
    let movable = move |core: usize| ports.iter().filter(move |p| p.core == core && !p.pinned);
    movable(from).filter(move |p| size(p) > 0).flat_map(move |p| {
        cores.iter().filter(move |c| c.core != from).flat_map(move |to| {
            let back = movable(to.core).filter(move |q| size(q) < size(p));
            std::iter::once(None).chain(back.map(Some)).map(move |q| Trade {
                port: p,
                to,
                back: q,
                net: size(p) - q.map_or(0, size),
            })
        })
    })
}

fn over_promised_move(ports: &[PortLoad], cores: &[CoreLoad], promised: &dyn Fn(usize) -> u64) -> Option<Move> {
    let worst = cores
        .iter()
        .filter(|c| promised(c.core) > c.deliverable_cycles_per_sec)
        .max_by_key(|c| promised(c.core) - c.deliverable_cycles_per_sec)?;
    let excess = promised(worst.core) - worst.deliverable_cycles_per_sec;
    // Of the trades whose promises fit the other core, the one that leaves the least excess
    // wins, then the one moving the smallest promise, then a single move over a swap.
    trades(ports, cores, worst.core, |p| p.promised_cycles_per_sec)
        .filter(|t| promised(t.to.core) + t.net <= t.to.deliverable_cycles_per_sec)
        .min_by_key(|t| (excess.saturating_sub(t.net), t.port.promised_cycles_per_sec, t.back.is_some()))
        .map(|t| t.to_move(MoveReason::OverPromised))
}

fn saturated_move(ports: &[PortLoad], cores: &[CoreLoad]) -> Option<Move> {
    let saturated =
        |c: &CoreLoad| c.busy_cycles_per_sec as f64 >= SATURATED_BUSY_SHARE * c.available_cycles_per_sec as f64;
    // Of the trades whose load fits the other core and lowers the hot one by the minimum gain,
    // the one that leaves the busier of the two cores least busy wins, a single move over a
    // swap.
    cores
        .iter()
        .filter(|c| saturated(c))
        .flat_map(|hot| {
            let min_gain = (MIN_GAIN_SHARE * hot.available_cycles_per_sec as f64) as u64;
            trades(ports, cores, hot.core, |p| p.used_cycles_per_sec).filter_map(move |t| {
                let cold_after = t.to.busy_cycles_per_sec + t.net;
                let after = hot.busy_cycles_per_sec.saturating_sub(t.net).max(cold_after);
                let fits = cold_after <= t.to.deliverable_cycles_per_sec;
                (fits && after.saturating_add(min_gain) <= hot.busy_cycles_per_sec).then_some((after, t))
            })
        })
        .min_by_key(|(after, t)| (*after, t.back.is_some()))
        .map(|(_, t)| t.to_move(MoveReason::Saturated))
}
