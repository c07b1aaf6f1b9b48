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
    /// Its cycles per second.
    pub capacity_cycles_per_sec: u64,
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
}

/// The next move, if one is needed: first a core whose promises exceed what it can deliver
/// gives a port to the core with the most room for its promise; else a saturated core gives the
/// port that evens the two cores' load best to the least busy core, if that lowers the busier
/// one by [`MIN_GAIN_SHARE`] of a core and the port's measured load fits in what the target
/// leaves idle (when every core's promises are spent, ports still go where the cycles are idle).
pub fn rebalance(ports: &[PortLoad], cores: &[CoreLoad]) -> Option<Move> {
    let promised =
        |core: usize| -> u64 { ports.iter().filter(|p| p.core == core).map(|p| p.promised_cycles_per_sec).sum() };
    let room = |c: &CoreLoad| c.deliverable_cycles_per_sec.saturating_sub(promised(c.core));
    over_promised_move(ports, cores, &promised, &room).or_else(|| saturated_move(ports, cores))
}

fn over_promised_move(
    ports: &[PortLoad],
    cores: &[CoreLoad],
    promised: &dyn Fn(usize) -> u64,
    room: &dyn Fn(&CoreLoad) -> u64,
) -> Option<Move> {
    let worst = cores
        .iter()
        .filter(|c| promised(c.core) > c.deliverable_cycles_per_sec)
        .max_by_key(|c| promised(c.core) - c.deliverable_cycles_per_sec)?;
    let excess = promised(worst.core) - worst.deliverable_cycles_per_sec;
    let target = cores.iter().filter(|c| c.core != worst.core).max_by_key(|c| room(c))?;
    let movable = ports
        .iter()
        .filter(|p| p.core == worst.core && !p.pinned && p.promised_cycles_per_sec > 0)
        .filter(|p| p.promised_cycles_per_sec <= room(target));
    // The smallest promise that clears the excess, else the largest that fits.
    let (clears, short): (Vec<&PortLoad>, Vec<&PortLoad>) = movable.partition(|p| p.promised_cycles_per_sec >= excess);
    let pick = clears
        .into_iter()
        .min_by_key(|p| p.promised_cycles_per_sec)
        .or_else(|| short.into_iter().max_by_key(|p| p.promised_cycles_per_sec))?;
    Some(Move { port: pick.name.clone(), from: worst.core, to: target.core, reason: MoveReason::OverPromised })
}

fn saturated_move(ports: &[PortLoad], cores: &[CoreLoad]) -> Option<Move> {
    let saturated =
        |c: &CoreLoad| c.busy_cycles_per_sec as f64 >= SATURATED_BUSY_SHARE * c.capacity_cycles_per_sec as f64;
    let busy = |core: usize| cores.iter().find(|c| c.core == core).map_or(0, |c| c.busy_cycles_per_sec);
    // Every (port of a saturated core, other core it fits in) pair; the one that leaves the
    // busier of its two cores least busy wins.
    let mut best: Option<(u64, &PortLoad, &CoreLoad)> = None;
    for hot in cores.iter().filter(|c| saturated(c)) {
        let min_gain = (MIN_GAIN_SHARE * hot.capacity_cycles_per_sec as f64) as u64;
        for p in ports.iter().filter(|p| p.core == hot.core && !p.pinned && p.used_cycles_per_sec > 0) {
            for cold in cores.iter().filter(|c| c.core != hot.core) {
                let cold_busy = busy(cold.core);
                if cold_busy + p.used_cycles_per_sec > cold.deliverable_cycles_per_sec {
                    continue;
                }
                let after = hot
                    .busy_cycles_per_sec
                    .saturating_sub(p.used_cycles_per_sec)
                    .max(cold_busy + p.used_cycles_per_sec);
                if after.saturating_add(min_gain) <= hot.busy_cycles_per_sec
                    && best.as_ref().is_none_or(|b| after < b.0)
                {
                    best = Some((after, p, cold));
                }
            }
        }
    }
    let (_, p, cold) = best?;
    Some(Move { port: p.name.clone(), from: p.core, to: cold.core, reason: MoveReason::Saturated })
}
