//! The switches the test bed stands up, chosen by kind: each one's plan (its translation of a
//! scenario step) and its driver. The one place that knows every switch, so the switches'
//! modules and the plan they fill import nothing of each other.

use std::path::Path;

use crate::driver::Driver;
use crate::plan::SwitchPlan;
use crate::scenario::{Scenario, Step, SwitchKind};
use crate::{switch_linux_tc, switch_ovs, switch_slaswitch, switch_vde2};

/// The translation of `step` for `switch`. `dir` is the run's working folder, `tools` the
/// folder of slaswitch's own programs.
pub fn plan(switch: SwitchKind, scenario: &Scenario, step: &Step, dir: &Path, tools: &Path) -> SwitchPlan {
    let mut p = switch_plan(switch, scenario, step, dir, tools);
    // Two-level (tenant, then VM) scheduling is PIE-VDE's: slaswitch's `pievde` link scheduler.
    if switch != SwitchKind::Slaswitch {
        for t in &scenario.tenants {
            p.unsupported
                .push(format!("tenant {} (weight {}): no tenant-level scheduling on {switch}", t.name, t.weight));
        }
    }
    for (k, change) in scenario.changes.iter().enumerate() {
        let commands = match switch {
            SwitchKind::Slaswitch => switch_slaswitch::change_commands(scenario, step, change, dir, tools),
            SwitchKind::LinuxTc => {
                switch_linux_tc::change_commands(scenario, &step.after_changes(&scenario.changes[..=k]))
            }
            SwitchKind::OvsDpdk | SwitchKind::Vde2 => {
                p.unsupported
                    .push(format!("change at {} s to {} (not applied live on {switch})", change.at_secs, change.vm));
                Vec::new()
            }
        };
        p.changes.push((change.at_secs, commands));
    }
    p
}

fn switch_plan(switch: SwitchKind, scenario: &Scenario, step: &Step, dir: &Path, tools: &Path) -> SwitchPlan {
    match switch {
        SwitchKind::Slaswitch => switch_slaswitch::plan(scenario, step, dir, tools),
        SwitchKind::OvsDpdk => switch_ovs::plan(scenario, step, dir),
        SwitchKind::LinuxTc => switch_linux_tc::plan(scenario, step),
        SwitchKind::Vde2 => switch_vde2::plan(scenario, step, dir),
    }
}

/// The driver that stands `switch` up for a step.
pub fn driver_for(
    switch: SwitchKind,
    dir: &Path,
    tools: &Path,
    scenario: &Scenario,
    step: &Step,
    prefix: &str,
) -> Box<dyn Driver> {
    match switch {
        SwitchKind::Slaswitch => Box::new(switch_slaswitch::Slaswitch::new(dir, tools, scenario, prefix)),
        SwitchKind::OvsDpdk => Box::new(switch_ovs::Ovs::new(dir, scenario, step, prefix)),
        SwitchKind::LinuxTc => Box::new(switch_linux_tc::LinuxTc::new(dir)),
        SwitchKind::Vde2 => Box::new(switch_vde2::Vde2::new(dir)),
    }
}
