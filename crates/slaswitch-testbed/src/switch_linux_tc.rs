//! A Linux bridge with tc as the egress-scheduling baseline. Each VM is a veth pair: the
//! emulated VM opens its end with af_packet, the other end is in the bridge. Translation:
//! - `min_rate_kbps`/`link_min_bps`, `max_rate_kbps`/`link_max_bps`, `link_weight`/`weight`,
//!   `priority`: an htb class per VM on the uplink's bridge end (rate = the minimum, or with
//!   link weights the weight's share of the line rate; ceil = the maximum or the line rate;
//!   quantum = weight x 1514 bytes; prio = priority - 1), chosen by the VM's source MAC with a
//!   u32 filter; a `[[change]]` becomes `tc class change`;
//! - byte-rate ingress policing becomes that class's ceiling (a shaper, not a policer: the
//!   kernels we run on lack the tc `police` action and the matchall and flower classifiers);
//!   packet-rate policing has no equivalent in htb;
//! - security groups and PMD cores have no equivalent: the kernel forwards in softirq context.

use std::path::PathBuf;
use std::time::Duration;

use crate::cleanup;
use crate::driver::{run_args, version_of, Driver, Reading};
use crate::namespaces::{self, veth_names};
use crate::plan::{mac_of, Attach, SwitchPlan};
use crate::scenario::{parse_rate_bps, Scenario, Step, UplinkKind};

/// The bridge the VMs' veths join.
pub const BRIDGE: &str = "ssbr0";

/// The bridge, veths and tc classes for one step.
pub fn plan(scenario: &Scenario, step: &Step) -> SwitchPlan {
    let mut p = SwitchPlan::default();
    let mut names = vec![scenario.uplink.name.clone()];
    names.extend(step.vms.iter().map(|v| v.name.clone()));
    for name in &names {
        if namespaces::is_namespace(scenario, step, name) {
            let b = namespaces::add_namespace(
                &mut p,
                name,
                &namespaces::ip_of(scenario, step, name),
                scenario.host.vm_core,
            );
            p.cmd(&["ip", "link", "set", &b, "master", BRIDGE, "up"]);
            p.namespaces.push((name.clone(), namespaces::ns_name(name)));
            continue;
        }
        let (b, v) = veth_names(name);
        p.undo_with(&["ip", "link", "del", &b]);
        if *name == scenario.uplink.name && scenario.uplink.kind == UplinkKind::Null {
            // A dummy interface discards what the bridge sends it.
            p.cmd(&["ip", "link", "add", &b, "type", "dummy"]);
            p.cmd(&["ip", "link", "set", &b, "master", BRIDGE, "up"]);
            continue;
        }
        p.cmd(&["ip", "link", "add", &b, "type", "veth", "peer", "name", &v]);
        p.cmd(&["ip", "link", "set", &b, "master", BRIDGE, "up"]);
        p.cmd(&["ip", "link", "set", &v, "up"]);
        p.attach.push((name.clone(), Attach::AfPacket(v)));
    }
    let (up_b, _) = veth_names(&scenario.uplink.name);
    let line_kbit = line_kbit(scenario);
    let shaped = !scenario.changes.is_empty()
        || step.vms.iter().any(|v| {
            let q = &v.qos;
            q.min_rate_kbps.is_some()
                || q.max_rate_kbps.is_some()
                || q.link_weight.is_some()
                || q.link_min_bps.is_some()
                || q.link_max_bps.is_some()
                || q.weight.is_some()
                || q.priority.is_some()
                || q.ingress_policing_rate_kbps.is_some()
        });
    if shaped || scenario.uplink.line_rate.is_some() {
        htb_root(&mut p, &up_b, line_kbit);
    }
    for (i, vm) in step.vms.iter().enumerate() {
        let q = &vm.qos;
        if q.ingress_policing_kpps.is_some() {
            p.unsupported.push(format!("{}: qos.ingress_policing_kpps (htb shapes bytes, not packets)", vm.name));
        }
        if q.cycles_per_sec.is_some() {
            p.unsupported
                .push(format!("{}: qos.cycles_per_sec (the kernel has no per-port cycle allocation)", vm.name));
        }
        if !shaped {
            continue;
        }
        if q.link_guarantee.is_some() {
            p.unsupported.push(format!(
                "{}: qos.link_guarantee (htb has no SoftBW guarantee; its rate is the closest)",
                vm.name
            ));
        }
        shape_vm(&mut p, step, i, &up_b, line_kbit);
    }
    if scenario.classification.security_group_masks > 0 {
        p.unsupported.push(format!(
            "classification.security_group_masks = {} (a Linux bridge forwards by MAC only)",
            scenario.classification.security_group_masks
        ));
    }
    if scenario.host.c2tb_bucket_us.is_some() {
        p.unsupported.push("host.c2tb_bucket_us (a Linux bridge has no cycle buckets)".into());
    }
    p.notes.push(
        "the kernel forwards in softirq context on whatever core the sender runs on: there is no PMD core".into(),
    );
    p
}

/// A Linux bridge with tc, as a switch of the test bed.
pub struct LinuxTc {
    /// The run folder.
    pub dir: PathBuf,
    up: bool,
}

impl LinuxTc {
    /// The switch's driver, working in `dir`.
    pub fn new(dir: &std::path::Path) -> LinuxTc {
        LinuxTc { dir: dir.to_path_buf(), up: false }
    }
}

/// A counter from /sys/class/net/IFACE/statistics.
fn sys_counter(iface: &str, name: &str) -> f64 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0.0)
}

impl Driver for LinuxTc {
    fn start(&mut self) -> anyhow::Result<()> {
        cleanup::undo(&["ip", "link", "del", BRIDGE]);
        run_args(&["ip", "link", "add", BRIDGE, "type", "bridge"])?;
        run_args(&["ip", "link", "set", BRIDGE, "up"])?;
        self.up = true;
        Ok(())
    }

    fn wait_for_vms(&mut self, _names: &[String], _timeout: Duration) -> anyhow::Result<()> {
        // Bridge ports forward once they leave the listening state (no STP: at once).
        Ok(())
    }

    fn sample(&mut self) -> Vec<Reading> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(format!("/sys/class/net/{BRIDGE}/brif")) else { return out };
        for e in entries.flatten() {
            let iface = e.file_name().to_string_lossy().into_owned();
            let Some(name) = iface.strip_prefix('s').and_then(|n| n.strip_suffix('b')) else { continue };
            // The bridge end receives what the VM sends.
            out.push(Reading::counter(name, "rx_packets", sys_counter(&iface, "rx_packets")));
            out.push(Reading::counter(name, "rx_bytes", sys_counter(&iface, "rx_bytes")));
            out.push(Reading::counter(name, "policer_drops", sys_counter(&iface, "rx_dropped")));
            out.push(Reading::counter(name, "tx_packets", sys_counter(&iface, "tx_packets")));
            out.push(Reading::counter(name, "tx_dropped", sys_counter(&iface, "tx_dropped")));
        }
        out
    }

    fn stop(&mut self) {
        if self.up {
            let _ = run_args(&["ip", "link", "del", BRIDGE]);
            self.up = false;
        }
    }

    fn version(&self) -> String {
        format!("Linux bridge + {}", version_of("tc", "-V"))
    }
}

/// The uplink's htb root: the line rate, and a default class for unshaped traffic.
fn htb_root(p: &mut SwitchPlan, up_b: &str, line_kbit: u64) {
    for command in [
        format!("tc qdisc add dev {up_b} root handle 1: htb default ffff"),
        format!("tc class add dev {up_b} parent 1: classid 1:1 htb rate {line_kbit}kbit"),
        format!("tc class add dev {up_b} parent 1:1 classid 1:ffff htb rate 8kbit ceil {line_kbit}kbit"),
    ] {
        p.cmd(&command.split_whitespace().collect::<Vec<_>>());
    }
}

/// VM number `i`'s htb class: (rate kbit, ceiling kbit, quantum bytes, prio). With link
/// weights, a VM's assured rate is its weight's share of the line rate (htb shares the rest
/// by quantum); a link minimum raises it, a link maximum or byte-rate policing caps it.
fn class_of(step: &Step, i: usize, line_kbit: u64) -> (u64, u64, Option<u64>, Option<u8>) {
    let q = &step.vms[i].qos;
    let max_kbit = q.link_max_bps.map(|b| b / 1000).or(q.max_rate_kbps);
    let ceil = match (max_kbit, q.ingress_policing_rate_kbps) {
        (Some(m), Some(r)) => m.min(r),
        (m, r) => m.or(r).unwrap_or(line_kbit),
    };
    let min_kbit = q.link_min_bps.map(|b| b / 1000).or(q.min_rate_kbps);
    let weighted = step.vms.iter().any(|v| v.qos.link_weight.is_some()).then(|| {
        let total: u64 = step.vms.iter().map(|v| u64::from(v.qos.link_weight.unwrap_or(1))).sum();
        line_kbit * u64::from(q.link_weight.unwrap_or(1)) / total.max(1)
    });
    let rate = match (min_kbit, weighted) {
        (Some(m), Some(w)) => m.max(w),
        (m, w) => m.or(w).unwrap_or(8),
    }
    .min(ceil);
    let quantum = q.link_weight.or(q.weight).map(|w| u64::from(w) * 1514);
    (rate, ceil, quantum, q.priority.map(|p| p - 1))
}

fn class_args(up_b: &str, verb: &str, i: usize, class: (u64, u64, Option<u64>, Option<u8>)) -> Vec<String> {
    let (rate, ceil, quantum, prio) = class;
    let mut c: Vec<String> =
        ["tc", "class", verb, "dev", up_b, "parent", "1:1", "classid", &format!("1:{:x}", 10 + i), "htb"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    c.extend(["rate".into(), format!("{rate}kbit"), "ceil".into(), format!("{ceil}kbit")]);
    if let Some(q) = quantum {
        c.extend(["quantum".into(), q.to_string()]);
    }
    if let Some(p) = prio {
        c.extend(["prio".into(), p.to_string()]);
    }
    c
}

/// VM number `i`'s htb class on the uplink and the filter that sends its frames there.
fn shape_vm(p: &mut SwitchPlan, step: &Step, i: usize, up_b: &str, line_kbit: u64) {
    let vm = &step.vms[i];
    if let Some(r) = vm.qos.ingress_policing_rate_kbps {
        p.notes.push(format!(
            "{}: ingress_policing_rate_kbps {r} -> htb ceil on the uplink (shaped, not policed)",
            vm.name
        ));
    }
    p.commands.push(class_args(up_b, "add", i, class_of(step, i, line_kbit)));
    let filter = format!(
        "tc filter add dev {up_b} parent 1: protocol all prio 1 u32 match ether src {} classid 1:{:x}",
        mac_of(&vm.name),
        10 + i
    );
    p.cmd(&filter.split_whitespace().collect::<Vec<_>>());
}

/// The `tc class change` commands that bring every VM's class to `step` (the scenario's step
/// after a `[[change]]`).
pub fn change_commands(scenario: &Scenario, step: &Step) -> Vec<Vec<String>> {
    let (up_b, _) = veth_names(&scenario.uplink.name);
    let line_kbit = line_kbit(scenario);
    (0..step.vms.len()).map(|i| class_args(&up_b, "change", i, class_of(step, i, line_kbit))).collect()
}

fn line_kbit(scenario: &Scenario) -> u64 {
    scenario.uplink.line_rate.as_deref().and_then(|r| parse_rate_bps(r).ok()).map_or(10_000_000, |b| b / 1000)
}
