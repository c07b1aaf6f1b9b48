//! Moving ports between PMDs by themselves, each second: when a core's promises, at what its
//! ports' packets really cost (their drift factors), exceed what it can deliver now (less the
//! host's stalls), or a core's PMD is busy nearly all the time the host left it while another
//! core has room, the daemon moves one port live (`Datapath::move_port`), chosen by
//! `slaswitch_config::pmd_placement::rebalance`. A port that moved waits [`COOLDOWN`] before it
//! moves again, so that one noisy second does not send it back and forth.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use slaswitch_config::pmd_placement::rebalance;
use slaswitch_datapath::Datapath;

use super::rates::{host_took_cycles, Snapshot};
use crate::protocol::pmd_moves::{PmdMove, PmdMoves};

/// How long a moved port stays where it went.
pub const COOLDOWN: Duration = Duration::from_secs(10);

/// How many moves `qos-show` lists.
const RECENT: usize = 16;

/// The moves so far.
pub struct Rebalancer {
    enabled: bool,
    started: Instant,
    moved_at: BTreeMap<String, Instant>,
    total: BTreeMap<String, u64>,
    recent: VecDeque<PmdMove>,
}

impl Rebalancer {
    /// A rebalancer that moves ports when `enabled`.
    pub fn new(enabled: bool) -> Rebalancer {
        Rebalancer {
            enabled,
            started: Instant::now(),
            moved_at: BTreeMap::new(),
            total: BTreeMap::new(),
            recent: VecDeque::new(),
        }
    }

    /// Looks at the interval from `old` to `new` and makes at most one move.
    pub fn tick(&mut self, dp: &mut Datapath, old: &Snapshot, new: &Snapshot) {
        if !self.enabled || new.pmds.len() < 2 {
            return;
        }
        let secs = new.at.duration_since(old.at).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let per_sec = |delta: u64| (delta as f64 / secs) as u64;
        let used = |name: &str| {
            let now = new.ports.iter().find(|p| p.name == name).map_or(0, |p| p.rx.busy_cycles());
            let then = old.ports.iter().find(|p| p.name == name).map_or(now, |p| p.rx.busy_cycles());
            per_sec(now.saturating_sub(then))
        };
        let pmd_delta = |core: usize, f: fn(&slaswitch_datapath::PmdStats) -> u64| {
            let now = new.pmds.iter().find(|p| p.core == core).map_or(0, f);
            let then = old.pmds.iter().find(|p| p.core == core).map_or(now, f);
            now.saturating_sub(then)
        };
        let busy = |core: usize| per_sec(pmd_delta(core, |p| p.totals.busy_cycles));
        let stalled = |core: usize| per_sec(host_took_cycles(old, new, core, dp.tsc_hz()));
        let (ports, cores) = dp.pmd_loads(&used, &busy, &stalled);
        let Some(m) = rebalance(&ports, &cores) else { return };
        let names: Vec<&str> = std::iter::once(m.port.as_str()).chain(m.swap_with.as_deref()).collect();
        if names.iter().any(|n| self.moved_at.get(*n).is_some_and(|at| at.elapsed() < COOLDOWN)) {
            return;
        }
        let result = match &m.swap_with {
            None => dp.move_port(&m.port, m.to),
            Some(q) => dp.move_ports(&[(&m.port, m.to), (q, m.from)]),
        };
        for n in names {
            self.moved_at.insert(n.to_string(), Instant::now());
        }
        let took_us = result.as_ref().map_or(0, |d| d.as_micros() as u64);
        let refused = result.err().map(|e| e.to_string());
        match &refused {
            None => {
                tracing::info!(port = %m.port, from = m.from, to = m.to, swapped_with = ?m.swap_with, reason = m.reason.name(), took_us, "moved a port between PMDs");
                *self.total.entry(m.reason.name().to_string()).or_default() += 1;
            }
            Some(e) => tracing::warn!(port = %m.port, from = m.from, to = m.to, "a move between PMDs was refused: {e}"),
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(PmdMove {
            at_secs: self.started.elapsed().as_secs_f64(),
            port: m.port,
            from_core: m.from,
            to_core: m.to,
            reason: m.reason,
            swapped_with: m.swap_with,
            took_us,
            refused,
        });
    }

    /// What `qos-show` and the metrics show.
    pub fn view(&self) -> PmdMoves {
        PmdMoves { enabled: self.enabled, total: self.total.clone(), recent: self.recent.iter().cloned().collect() }
    }
}
