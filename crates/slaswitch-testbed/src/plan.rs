//! A scenario step translated for one switch: the commands that configure it, where each VM
//! attaches, and what the switch cannot express. Translation is pure (no process runs), so it
//! is tested on its own and printed in the report as the exact configuration; each switch's
//! module writes its plan, and [`crate::switches`] picks the module by kind.

use std::path::PathBuf;

use slaswitch_traffic::frames::{mac_for, mac_text};

use crate::scenario::{PortType, Scenario, Step, UplinkKind, VmKind};

/// How an emulated VM (or the sink) reaches the switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A vhost-user socket the switch serves; the VM is a virtio-user frontend.
    VhostUser(PathBuf),
    /// A kernel interface (veth end or tap) the VM opens with af_packet.
    AfPacket(String),
    /// A QEMU guest's vhost-user socket; with `guest_serves`, QEMU listens on it.
    Guest {
        /// The socket.
        socket: PathBuf,
        /// True for a `vhost-user-client` port.
        guest_serves: bool,
    },
}

impl Attach {
    /// The tenant's `--vm NAME=...` value; none for a QEMU guest (it is no tenant's).
    pub fn tenant_arg(&self, name: &str) -> Option<String> {
        match self {
            Attach::VhostUser(p) => Some(format!("{name}={}", p.display())),
            Attach::AfPacket(iface) => Some(format!("{name}=af_packet:{iface}")),
            Attach::Guest { .. } => None,
        }
    }
}

/// What a switch is to be told for one step: files, commands, attachments, and what it cannot
/// express.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SwitchPlan {
    /// Files the commands read (flow tables), written before they run.
    pub files: Vec<(PathBuf, String)>,
    /// Configuration commands, in order, once the switch is up.
    pub commands: Vec<Vec<String>>,
    /// Commands that undo them (registered before they run, run newest first at cleanup).
    pub undo: Vec<Vec<String>>,
    /// Long-running helper processes the switch needs (e.g. VDE2's tap plugs).
    pub daemons: Vec<Vec<String>>,
    /// Commands that need what the daemons create (a tap they open), retried until they
    /// succeed or 10 s pass.
    pub after_daemons: Vec<Vec<String>>,
    /// Per VM and for the uplink: (name, attachment). The uplink comes first.
    pub attach: Vec<(String, Attach)>,
    /// Settings this switch has no equivalent for (the report lists them).
    pub unsupported: Vec<String>,
    /// How settings were translated where it is not one to one.
    pub notes: Vec<String>,
    /// Namespace members (VMs or the uplink) this switch has plumbed: (name, namespace).
    pub namespaces: Vec<(String, String)>,
    /// The scenario's `[[change]]`s: (seconds from the start, the commands that make it).
    pub changes: Vec<(f64, Vec<Vec<String>>)>,
}

impl SwitchPlan {
    /// Adds a configuration command.
    pub fn cmd(&mut self, args: &[&str]) {
        self.commands.push(args.iter().map(|s| s.to_string()).collect());
    }

    /// Registers an undo command before the command it undoes runs.
    pub fn undo_with(&mut self, args: &[&str]) {
        self.undo.push(args.iter().map(|s| s.to_string()).collect());
    }
}

/// Port numbers: the uplink is 1, the VMs follow in order from 2.
pub fn port_numbers(scenario: &Scenario, step: &Step) -> Vec<(String, u16)> {
    let mut v = Vec::new();
    v.push((scenario.uplink.name.clone(), 1));
    for (i, vm) in step.vms.iter().enumerate() {
        v.push((vm.name.clone(), 2 + i as u16));
    }
    v
}

/// The port type of `name` (a VM or the uplink) when it is a QEMU guest.
pub fn guest_port(scenario: &Scenario, step: &Step, name: &str) -> Option<PortType> {
    if name == scenario.uplink.name {
        return (scenario.uplink.kind == UplinkKind::Qemu).then_some(scenario.uplink.port);
    }
    step.vms.iter().find(|v| v.name == name && v.kind == VmKind::Qemu).map(|v| v.port)
}

/// A VM's MAC address as text.
pub fn mac_of(name: &str) -> String {
    mac_text(mac_for(name))
}

/// The destination every VM's phases send to: the uplink's MAC (MAC learning forwards it).
pub fn phase_with_destination(phase: &str, uplink: &str) -> String {
    if phase.split(',').any(|kv| kv.trim_start().starts_with("dst-mac=")) {
        phase.to_string()
    } else {
        format!("{phase},dst-mac={}", mac_of(uplink))
    }
}
