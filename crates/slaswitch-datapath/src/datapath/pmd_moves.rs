//! Ports on several PMDs: a new port placed on the core that can hold its purchase
//! ([`slaswitch_config::pmd_placement`]), and a live port moved to another PMD without losing or
//! reordering a frame. A move is two steps: the PMD that polled the port drops it and
//! acknowledges (it has finished the pass that took the port's last frames, and published its
//! counters), then the new PMD picks it up from the counters and the ring as they are. Between
//! the two the port's frames wait in its rx ring, so no two threads ever poll one queue. Ports
//! that trade PMDs (a swap) are parked together, polled by none, between the two steps.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use slaswitch_config::allocation::{deliverable_cycles_per_sec, PortPlan};
use slaswitch_config::pmd_placement::{place, CoreLoad, PortLoad};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::PortSpec;

use super::Datapath;
use crate::error::DatapathError;

impl Datapath {
    /// The PMD (index) a new port goes on: the one `pmd=N` names, else the one whose core can
    /// best hold its purchase.
    pub(super) fn place_new_port(&self, spec: &PortSpec, settings: &PortSettings) -> Result<usize, DatapathError> {
        if settings.pmd_core.is_some() || self.pmds.len() == 1 {
            return self.pick_pmd(settings.pmd_core);
        }
        self.pmd_that_holds(spec, settings)
    }

    /// The PMD (index) whose core can best hold `spec` beside every other port
    /// ([`place`]), or the refusal naming each core's reason.
    fn pmd_that_holds(&self, spec: &PortSpec, settings: &PortSettings) -> Result<usize, DatapathError> {
        let others = self.candidates_except(|name| name == spec.name);
        let cores: Vec<usize> = self.pmds.iter().map(|p| p.core).collect();
        let placed = place(&others, spec, settings, &cores, self.model.as_ref(), self.eal.tsc_hz())?;
        self.pick_pmd(Some(placed.core))
    }

    /// Plans ports with their new settings, each on its PMD; when one unpinned port's new
    /// purchase no longer fits its core, on the core that can hold it instead (the port moves).
    pub(super) fn plan_updated(
        &self,
        updated: &mut [super::UpdatedPort],
    ) -> Result<BTreeMap<String, PortPlan>, DatapathError> {
        let changed: Vec<_> = updated.iter().map(|u| (&u.spec, &u.settings, u.pmd)).collect();
        let refused = match self.plan_with(&changed, None, self.model.as_ref()) {
            Ok(plans) => return Ok(plans),
            Err(e) => e,
        };
        let [u] = updated else { return Err(refused) };
        if u.settings.pmd_core.is_some() || self.pmds.len() == 1 || !matches!(refused, DatapathError::Config(_)) {
            return Err(refused);
        }
        let Ok(pmd) = self.pmd_that_holds(&u.spec, &u.settings) else { return Err(refused) };
        u.pmd = pmd;
        self.plan_with(&[(&u.spec, &u.settings, u.pmd)], None, self.model.as_ref())
    }

    /// Moves port `name` to the PMD on `core`, live, if that core admits it; the port is not
    /// pinned there (`pmd=N` is the operator's). Returns how long the PMDs took.
    pub fn move_port(&mut self, name: &str, core: usize) -> Result<Duration, DatapathError> {
        self.move_ports(&[(name, core)])
    }

    /// Moves each `(port, core)` at once (a swap: two ports trading cores, which neither
    /// core could admit one at a time), if the cores admit the result; nothing moves otherwise.
    /// Pinned ports (`pmd=N`) are refused. Returns how long the PMDs took.
    pub fn move_ports(&mut self, moves: &[(&str, usize)]) -> Result<Duration, DatapathError> {
        let mut changed = Vec::new();
        for &(name, core) in moves {
            let to = self.pick_pmd(Some(core))?;
            let entry = self.ports.get(name).ok_or_else(|| DatapathError::NoPort(name.to_string()))?;
            if entry.pmd == to {
                continue;
            }
            if entry.settings.pmd_core.is_some() {
                return Err(DatapathError::PinnedPort { port: name.to_string(), core: self.pmds[entry.pmd].core });
            }
            changed.push((entry.spec.clone(), entry.settings.clone(), to));
        }
        if changed.is_empty() {
            return Ok(Duration::ZERO);
        }
        let plan_input: Vec<_> = changed.iter().map(|(spec, settings, to)| (spec, settings, *to)).collect();
        let plans = self.plan_with(&plan_input, None, self.model.as_ref())?;
        let mut moved = Vec::new();
        for (spec, _, to) in &changed {
            let entry = self.ports.get_mut(&spec.name).expect("checked");
            moved.push((spec.number, std::mem::replace(&mut entry.pmd, *to)));
        }
        let before = self.apply_plans(plans);
        let started = Instant::now();
        if let Err(e) = self.push_configs_moving(&moved) {
            for ((spec, ..), (_, from)) in changed.iter().zip(&moved) {
                self.ports.get_mut(&spec.name).expect("checked").pmd = *from;
            }
            self.restore_plans(before);
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(started.elapsed())
    }

    /// Sends every PMD its configuration after ports `moved` (number, the PMD that polled it)
    /// changed PMDs: first the PMDs they leave drop them, with every moved port parked (polled
    /// by none), and acknowledge; only then do all PMDs get their new ports. So a moved port is
    /// never polled by two threads at once, a swap included.
    pub(super) fn push_configs_moving(&self, moved: &[(u16, usize)]) -> Result<(), DatapathError> {
        if !moved.is_empty() {
            let mut left: Vec<usize> = moved.iter().map(|m| m.1).collect();
            left.sort_unstable();
            left.dedup();
            let parked: Vec<u16> = moved.iter().map(|m| m.0).collect();
            self.push_configs_to(&left, &parked)?;
        }
        self.push_configs()
    }

    /// What the rebalancer needs: each port's promise at its current cost and its PMD's core,
    /// and each core's. `used` and `busy` are the last window's measured cycles per second
    /// (port, core), `stalled` the cycles per second the host took from a core's PMD: what a
    /// core can deliver and what its PMD had are less that.
    pub fn pmd_loads(
        &self,
        used: &dyn Fn(&str) -> u64,
        busy: &dyn Fn(usize) -> u64,
        stalled: &dyn Fn(usize) -> u64,
    ) -> (Vec<PortLoad>, Vec<CoreLoad>) {
        let tsc_hz = self.eal.tsc_hz();
        let ports = self
            .ports
            .values()
            .map(|p| PortLoad {
                name: p.spec.name.clone(),
                core: self.pmds[p.pmd].core,
                // What keeping its promise costs now: a port's drift (its packets' real cost
                // over the model's) goes with it to whichever core polls it.
                promised_cycles_per_sec: (p.plan.cpu_qos.limit.alloc_cycles_per_sec() as f64
                    * p.counters.drift_factor().unwrap_or(1.0).max(1.0))
                    as u64,
                used_cycles_per_sec: used(&p.spec.name),
                pinned: p.settings.pmd_core.is_some(),
            })
            .collect();
        let cores = self
            .pmds
            .iter()
            .map(|p| {
                let stalled_cycles_per_sec = stalled(p.core).min(tsc_hz);
                let unstalled_share = 1.0 - stalled_cycles_per_sec as f64 / tsc_hz as f64;
                CoreLoad {
                    core: p.core,
                    deliverable_cycles_per_sec: (deliverable_cycles_per_sec(tsc_hz) as f64 * unstalled_share) as u64,
                    available_cycles_per_sec: tsc_hz - stalled_cycles_per_sec,
                    busy_cycles_per_sec: busy(p.core),
                }
            })
            .collect();
        (ports, cores)
    }
}
