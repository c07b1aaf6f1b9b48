//! The plain VDE2 switch (vde_switch), the baseline PIE-VDE (seed 004) improves on. Each VM is
//! a tap device plugged into the switch by `vde_plug2tap`; the emulated VM opens the tap with
//! af_packet, and a namespace VM has the plug run inside its namespace, so the tap is its
//! interface. VDE2 has no QoS settings and no classifier: every QoS field and the security
//! groups are listed as having no equivalent.

use anyhow::anyhow;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cleanup;
use crate::driver::{version_of, wait_for_path, Driver, Reading};
use crate::plan::{Attach, SwitchPlan};
use crate::scenario::{Scenario, Step, UplinkKind};

/// The tap interface of VM `name`.
pub fn tap_name(name: &str) -> String {
    format!("v{name}")
}

/// VDE2's switch and tap plugs for one step.
pub fn plan(scenario: &Scenario, step: &Step, dir: &Path) -> SwitchPlan {
    let mut p = SwitchPlan::default();
    let sock = dir.join("vde.ctl").display().to_string();
    let mut names = vec![scenario.uplink.name.clone()];
    names.extend(step.vms.iter().map(|v| v.name.clone()));
    for name in &names {
        let tap = tap_name(name);
        if crate::namespaces::is_namespace(scenario, step, name) {
            // The plug runs inside the VM's namespace, so its tap is created there.
            let ip = crate::namespaces::ip_of(scenario, step, name);
            crate::namespaces::add_namespace_for_daemon(&mut p, name, &ip, &tap, scenario.host.vm_core);
            let ns = crate::namespaces::ns_name(name);
            p.daemons.push(
                ["ip", "netns", "exec", &ns, "vde_plug2tap", "--sock", &sock, &tap]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            );
            p.namespaces.push((name.clone(), ns));
            continue;
        }
        p.daemons.push(vec!["vde_plug2tap".into(), "--sock".into(), sock.clone(), tap.clone()]);
        // A null uplink is a tap nobody reads: the kernel drops what the switch sends it.
        if !(*name == scenario.uplink.name && scenario.uplink.kind == UplinkKind::Null) {
            p.attach.push((name.clone(), Attach::AfPacket(tap)));
        }
    }
    for vm in &step.vms {
        for (field, _) in vm.qos.settings() {
            p.unsupported.push(format!("{}: qos.{field} (vde_switch has no QoS)", vm.name));
        }
    }
    if scenario.classification.security_group_masks > 0 {
        p.unsupported.push("classification.security_group_masks (vde_switch forwards by MAC only)".into());
    }
    if scenario.host.c2tb_bucket_us.is_some() {
        p.unsupported.push("host.c2tb_bucket_us (vde_switch has no cycle buckets)".into());
    }
    if scenario.uplink.line_rate.is_some() {
        p.unsupported.push("uplink.line_rate (vde_switch has no line rate)".into());
    }
    p.notes.push("vde_switch is single-threaded and event driven: there is no PMD core".into());
    p
}

/// VDE2's vde_switch, as a switch of the test bed.
pub struct Vde2 {
    /// The run folder.
    pub dir: PathBuf,
    pid: Option<u32>,
}

impl Vde2 {
    /// The switch's driver, working in `dir`.
    pub fn new(dir: &Path) -> Vde2 {
        Vde2 { dir: dir.to_path_buf(), pid: None }
    }
}

impl Driver for Vde2 {
    fn start(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join("vde_switch.log");
        let child = crate::driver::on_every_core(&mut Command::new("vde_switch"))
            .arg("--sock")
            .arg(self.dir.join("vde.ctl"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("cannot start vde_switch: {e}"))?;
        cleanup::process(child.id(), "vde_switch");
        self.pid = Some(child.id());
        // vde_switch reads commands from stdin; keep it open for the life of the switch.
        std::mem::forget(child);
        wait_for_path(&self.dir.join("vde.ctl"), Duration::from_secs(10), "vde_switch", &log)
    }

    fn wait_for_vms(&mut self, names: &[String], timeout: Duration) -> anyhow::Result<()> {
        let t = std::time::Instant::now();
        for n in names {
            let tap = tap_name(n);
            while !Path::new(&format!("/sys/class/net/{tap}")).exists() {
                if t.elapsed() > timeout {
                    return Err(anyhow!("vde_plug2tap did not create the tap of {n}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // vde_plug2tap leaves its tap down; the VM's af_packet port needs it up.
            crate::driver::run_args(&["ip", "link", "set", &tap, "up"])?;
        }
        Ok(())
    }

    fn sample(&mut self) -> Vec<Reading> {
        // The tap's tx is what vde_plug2tap wrote towards the VM; its rx what the VM sent.
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir("/sys/class/net") else { return out };
        for e in entries.flatten() {
            let iface = e.file_name().to_string_lossy().into_owned();
            let Some(name) = iface.strip_prefix('v') else { continue };
            let read = |c: &str| {
                std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{c}"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            if !Path::new(&format!("/sys/class/net/{iface}/tun_flags")).exists() {
                continue;
            }
            out.push(Reading::counter(name, "rx_packets", read("tx_packets")));
            out.push(Reading::counter(name, "rx_bytes", read("tx_bytes")));
            out.push(Reading::counter(name, "tx_packets", read("rx_packets")));
        }
        out
    }

    fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            cleanup::stop_group(pid as i32, Duration::from_secs(5));
        }
    }

    fn version(&self) -> String {
        version_of("vde_switch", "--version")
    }
}
