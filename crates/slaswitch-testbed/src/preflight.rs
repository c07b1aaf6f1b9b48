//! Before a run: the machine must have what the scenario needs. Missing Debian packages are
//! installed; what cannot be fixed here (not root, no hugepages) stops the run with a message
//! saying what to do.

use anyhow::anyhow;
use std::path::Path;
use std::process::Command;

use slaswitch_plot::FONT;

use crate::scenario::{Scenario, SwitchKind, UplinkKind, VmKind};

/// (a file the package provides, the package).
fn needs(switch: SwitchKind, scenario: &Scenario) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![(FONT, "fonts-dejavu-core")];
    match switch {
        SwitchKind::Slaswitch => {}
        SwitchKind::OvsDpdk => v.push((crate::switch_ovs::VSWITCHD, "openvswitch-switch-dpdk")),
        SwitchKind::LinuxTc => v.push(("/usr/sbin/tc", "iproute2")),
        SwitchKind::Vde2 => v.push(("/usr/bin/vde_switch", "vde2")),
    }
    // The programs of the namespace VMs and of a namespace uplink (servers such as nginx); a
    // QEMU guest brings its own.
    let uplink_commands =
        if scenario.uplink.kind == UplinkKind::Namespace { &scenario.uplink.commands[..] } else { &[] };
    let namespace_commands = scenario
        .vms
        .iter()
        .filter(|vm| vm.kind == VmKind::Namespace)
        .flat_map(|vm| &vm.commands)
        .chain(uplink_commands);
    for cmd in namespace_commands {
        for (program, package) in
            [("iperf3", "iperf3"), ("qperf", "qperf"), ("sockperf", "sockperf"), ("nginx", "nginx"), ("wrk", "wrk")]
        {
            if cmd.split_whitespace().next() == Some(program) {
                v.push((program, package));
            }
        }
    }
    if scenario.has_qemu_guests() {
        v.push((crate::guest::QEMU, "qemu-system-x86"));
    }
    v
}

fn present(file_or_program: &str) -> bool {
    if file_or_program.starts_with('/') {
        return Path::new(file_or_program).exists();
    }
    Command::new("sh").args(["-c", &format!("command -v {file_or_program}")]).output().is_ok_and(|o| o.status.success())
}

fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    eprintln!("installing {} from Debian", packages.join(" "));
    // Keep the packages' own services (e.g. the system Open vSwitch) from starting.
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let had_policy = policy.exists();
    if !had_policy {
        let _ = std::fs::write(policy, "#!/bin/sh\nexit 101\n");
        let _ = Command::new("chmod").args(["+x", "/usr/sbin/policy-rc.d"]).status();
    }
    let run = |args: &[&str]| {
        Command::new("apt-get").args(args).env("DEBIAN_FRONTEND", "noninteractive").status().is_ok_and(|s| s.success())
    };
    let ok = run(&["install", "-y", "-q", "--no-install-recommends"]
        .iter()
        .copied()
        .chain(packages.iter().copied())
        .collect::<Vec<_>>())
        || (run(&["update", "-q"])
            && run(&["install", "-y", "-q", "--no-install-recommends"]
                .iter()
                .copied()
                .chain(packages.iter().copied())
                .collect::<Vec<_>>()));
    if !had_policy {
        let _ = std::fs::remove_file(policy);
    }
    if ok {
        Ok(())
    } else {
        Err(anyhow!("apt-get could not install {}", packages.join(" ")))
    }
}

/// Checks (and where it can, fixes) what `switches` need for `scenario`.
pub fn check(scenario: &Scenario, switches: &[SwitchKind], tools: &Path) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(anyhow!("experiments need root (DPDK, hugepages, network namespaces, tc): run with sudo"));
    }
    let (total, free, mounted) = slaswitch_dpdk::hugepage_status();
    if total == 0 || !mounted {
        return Err(anyhow!("no hugepages: run `scripts/hugepages 1024` (or echo 1024 > /proc/sys/vm/nr_hugepages and mount hugetlbfs on /dev/hugepages)"));
    }
    if free < 512 {
        return Err(anyhow!("only {free} of {total} hugepages are free (another DPDK process is running?); the emulated VMs and the switch need 512"));
    }
    for program in ["slaswitchd", "slaswitch", "slaswitch-tenant", "slaswitch-flows"] {
        if !tools.join(program).exists() {
            return Err(anyhow!("{} is missing: build with `cargo build --release`", tools.join(program).display()));
        }
    }
    let mut missing: Vec<&str> = Vec::new();
    for &switch in switches {
        for (what, package) in needs(switch, scenario) {
            if !present(what) && !missing.contains(&package) {
                missing.push(package);
            }
        }
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    if scenario.has_qemu_guests() {
        crate::guest::image()?;
    }
    Ok(())
}
