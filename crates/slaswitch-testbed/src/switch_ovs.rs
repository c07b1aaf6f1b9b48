//! Open vSwitch with DPDK (Debian's ovs-vswitchd-dpdk, 3.1) as the baseline: its own
//! ovsdb-server and run directory, a netdev (userspace) bridge, dpdkvhostuser ports with pinned
//! OpenFlow numbers, the PMD on the scenario's cores.
//!
//! Translation of the scenario's QoS:
//! - `ingress_policing_rate_kbps` / `_burst_kb` become the interface's `ingress_policing_rate`
//!   and `ingress_policing_burst` (srTCM in netdev-dpdk's rx path, before classification).
//! - `ingress_policing_kpps`: netdev-dpdk ignores `ingress_policing_kpkts_rate` (only the Linux
//!   kernel datapath implements it), so it becomes an OpenFlow meter with a `pktps` drop band on
//!   the VM's traffic; the userspace datapath applies meters as an action, after classification.
//! - `max_rate_kbps` becomes a `kbps` OpenFlow meter on the VM's traffic.
//! - `min_rate_kbps`, `weight`, `priority`: OVS-DPDK has no equivalent (the report says so).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use slaswitch_classifier::security_group::security_group_rules;

use crate::cleanup;
use crate::driver::{run, run_args, version_of, wait_for_path, Driver, Reading};
use crate::plan::{port_numbers, Attach, SwitchPlan};
use crate::scenario::{Scenario, Step};

pub const VSWITCHD: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

fn vsctl(dir: &Path) -> Vec<String> {
    vec!["ovs-vsctl".into(), format!("--db=unix:{}", dir.join("db.sock").display())]
}

fn ofctl(dir: &Path) -> Vec<String> {
    // ovs-ofctl reaches the bridge through its management socket in the run directory.
    vec!["ovs-ofctl".into(), "-O".into(), "OpenFlow13".into()]
        .into_iter()
        .chain(std::iter::once(format!("unix:{}", dir.join("br0.mgmt").display())))
        .collect()
}

pub fn plan(scenario: &Scenario, step: &Step, dir: &Path) -> SwitchPlan {
    let mut p = SwitchPlan::default();
    let numbers = port_numbers(scenario, step);
    let uplink = 1;
    for (name, number) in &numbers {
        let mut cmd = vsctl(dir);
        cmd.extend(["add-port", "br0", name, "--", "set", "Interface", name, "type=dpdkvhostuser"].iter().map(|s| s.to_string()));
        cmd.push(format!("ofport_request={number}"));
        if let Some(vm) = step.vms.iter().find(|v| &v.name == name) {
            if let Some(rate) = vm.qos.ingress_policing_rate_kbps {
                cmd.push(format!("ingress_policing_rate={rate}"));
                cmd.push(format!("ingress_policing_burst={}", vm.qos.ingress_policing_burst_kb.unwrap_or(0)));
            }
        }
        p.commands.push(cmd);
        p.attach.push((name.clone(), Attach::VhostUser(dir.join(name))));
    }
    let mut flows: Vec<String> = Vec::new();
    let mut meters: Vec<String> = Vec::new();
    for (i, vm) in step.vms.iter().enumerate() {
        let number = 2 + i as u16;
        let meter = u32::from(number);
        let q = &vm.qos;
        let mut bands = Vec::new();
        if let Some(kpps) = q.ingress_policing_kpps {
            let burst = q.ingress_policing_kpkts_burst.unwrap_or(16) * 1000;
            bands.push(format!("meter={meter},pktps,burst,band=type=drop,rate={},burst_size={burst}", kpps * 1000));
            p.notes.push(format!("{}: ingress_policing_kpps {kpps} -> OpenFlow meter {meter} (pktps); netdev-dpdk has no packet-rate ingress policer, and a meter acts after classification", vm.name));
        }
        if let Some(max) = q.max_rate_kbps {
            if bands.is_empty() {
                bands.push(format!("meter={meter},kbps,band=type=drop,rate={max}"));
                p.notes.push(format!("{}: max_rate_kbps {max} -> OpenFlow meter {meter} (kbps)", vm.name));
            } else {
                p.unsupported.push(format!("{}: max_rate_kbps together with ingress_policing_kpps (one meter per VM)", vm.name));
            }
        }
        for (field, _) in q.settings() {
            if ["min_rate_kbps", "weight", "priority"].contains(&field) {
                p.unsupported.push(format!("{}: qos.{field} (OVS-DPDK has no minimum guarantee, share weight or priority class)", vm.name));
            }
        }
        let out = if scenario.classification.security_group_masks > 0 { "normal".to_string() } else { format!("output:{uplink}") };
        if let Some(m) = bands.pop() {
            meters.push(m);
            flows.push(format!("priority=10,in_port={number},actions=meter:{meter},{out}"));
        } else if scenario.classification.security_group_masks == 0 {
            flows.push(format!("priority=10,in_port={number},actions={out}"));
        }
    }
    if scenario.classification.security_group_masks > 0 {
        flows.extend(security_group_rules(scenario.classification.security_group_masks).iter().map(|r| r.to_string()));
    } else {
        flows.push("priority=0,actions=normal".into());
    }
    if scenario.uplink.line_rate.is_some() {
        p.unsupported.push("uplink.line_rate (a vhost-user port has no line rate in OVS)".into());
    }
    for m in meters {
        let mut cmd = ofctl(dir);
        cmd.insert(3, "add-meter".into());
        cmd.push(m);
        p.commands.push(cmd);
    }
    let flows_file = dir.join("flows.txt");
    p.files.push((flows_file.clone(), flows.join("\n") + "\n"));
    let mut del = ofctl(dir);
    del.insert(3, "del-flows".into());
    p.commands.push(del);
    let mut add = ofctl(dir);
    add.insert(3, "add-flows".into());
    add.push(flows_file.display().to_string());
    p.commands.push(add);
    p
}

pub struct Ovs {
    pub dir: PathBuf,
    pub pmd_cores: Vec<usize>,
    pub lcore: usize,
    pub file_prefix: String,
    started: bool,
}

impl Ovs {
    pub fn new(dir: &Path, scenario: &Scenario, file_prefix: &str) -> Ovs {
        Ovs { dir: dir.to_path_buf(), pmd_cores: scenario.host.pmd_cores.clone(), lcore: scenario.host.vm_core, file_prefix: file_prefix.into(), started: false }
    }

    fn appctl(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = vec!["ovs-appctl".to_string(), "-t".into(), self.dir.join("ovs-vswitchd.ctl").display().to_string()];
        cmd.extend(args.iter().map(|s| s.to_string()));
        run(&cmd)
    }

    fn env(&self, cmd: &mut Command) {
        for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            cmd.env(var, &self.dir);
        }
    }

    fn daemon(&self, program: &str, args: &[String], what: &str) -> Result<(), String> {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        self.env(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("cannot start {what}: {e}"))?;
        cleanup::process(child.id(), what);
        Ok(())
    }
}

fn mask(cores: &[usize]) -> String {
    format!("0x{:x}", cores.iter().fold(0u64, |m, &c| m | (1 << c)))
}

/// `key: NUMBER` from OVS's text output.
fn number_after(text: &str, key: &str) -> Option<f64> {
    let at = text.find(key)? + key.len();
    text[at..].trim_start().split(|c: char| !c.is_ascii_digit() && c != '.').next()?.parse().ok()
}

/// Per-port counters from `dpctl/show -s`: (name, rx packets, rx bytes, rx dropped, tx packets, tx dropped).
pub fn parse_dpctl_show(text: &str) -> Vec<(String, [f64; 5])> {
    let mut out: Vec<(String, [f64; 5])> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("port ") {
            // "port 2: vm1 (dpdkvhostuser: ...)"
            if let Some((_, name)) = rest.split_once(": ") {
                out.push((name.split_whitespace().next().unwrap_or("?").to_string(), [0.0; 5]));
            }
        } else if let Some((_, v)) = out.last_mut() {
            if l.starts_with("RX packets:") {
                v[0] = number_after(l, "RX packets:").unwrap_or(0.0);
                v[2] = number_after(l, "dropped:").unwrap_or(0.0);
            } else if l.starts_with("TX packets:") {
                v[3] = number_after(l, "TX packets:").unwrap_or(0.0);
                v[4] = number_after(l, "dropped:").unwrap_or(0.0);
            } else if l.starts_with("RX bytes:") {
                v[1] = number_after(l, "RX bytes:").unwrap_or(0.0);
            }
        }
    }
    out
}

/// Per-PMD (core, idle cycles, processing cycles) from `dpif-netdev/pmd-stats-show`.
pub fn parse_pmd_stats(text: &str) -> Vec<(usize, f64, f64)> {
    let mut out = Vec::new();
    for block in text.split("pmd thread").skip(1) {
        let core = number_after(block, "core_id").unwrap_or(-1.0) as usize;
        out.push((core, number_after(block, "idle cycles:").unwrap_or(0.0), number_after(block, "processing cycles:").unwrap_or(0.0)));
    }
    out
}

/// Per-port PMD usage in percent from `dpif-netdev/pmd-rxq-show` (OVS averages it over its
/// last six 10-second intervals; it is not a per-second figure).
pub fn parse_rxq_usage(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let name = l.split("port:").nth(1)?.split_whitespace().next()?.to_string();
            let usage = number_after(l, "usage:")?;
            Some((name, usage))
        })
        .collect()
}

impl Driver for Ovs {
    fn start(&mut self) -> Result<(), String> {
        let d = &self.dir;
        cleanup::undo(&["pkill", "-f", &format!("--file-prefix {}", self.file_prefix)]);
        run_args(&["ovsdb-tool", "create", &d.join("conf.db").display().to_string(), SCHEMA])?;
        self.daemon(
            "ovsdb-server",
            &[
                d.join("conf.db").display().to_string(),
                format!("--remote=punix:{}", d.join("db.sock").display()),
                format!("--pidfile={}", d.join("ovsdb-server.pid").display()),
                format!("--unixctl={}", d.join("ovsdb-server.ctl").display()),
                format!("--log-file={}", d.join("ovsdb-server.log").display()),
            ],
            "ovsdb-server",
        )?;
        wait_for_path(&d.join("db.sock"), Duration::from_secs(20), "ovsdb-server", &d.join("ovsdb-server.log"))?;
        let mut init = vsctl(d);
        init.extend(["--no-wait", "init"].iter().map(|s| s.to_string()));
        run(&init)?;
        let mut cfg = vsctl(d);
        cfg.extend(
            [
                "--no-wait".to_string(),
                "set".into(),
                "Open_vSwitch".into(),
                ".".into(),
                "other_config:dpdk-init=true".into(),
                format!("other_config:pmd-cpu-mask={}", mask(&self.pmd_cores)),
                format!("other_config:dpdk-lcore-mask={}", mask(&[self.lcore])),
                "other_config:dpdk-socket-mem=1024".into(),
                format!("other_config:dpdk-extra=--no-pci --file-prefix {} --single-file-segments", self.file_prefix),
            ]
            .into_iter(),
        );
        run(&cfg)?;
        self.daemon(
            VSWITCHD,
            &[
                format!("unix:{}", d.join("db.sock").display()),
                format!("--pidfile={}", d.join("ovs-vswitchd.pid").display()),
                format!("--unixctl={}", d.join("ovs-vswitchd.ctl").display()),
                format!("--log-file={}", d.join("ovs-vswitchd.log").display()),
            ],
            "ovs-vswitchd",
        )?;
        self.started = true;
        wait_for_path(&d.join("ovs-vswitchd.ctl"), Duration::from_secs(60), "ovs-vswitchd", &d.join("ovs-vswitchd.log"))?;
        let mut br = vsctl(d);
        br.extend(["add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"].iter().map(|s| s.to_string()));
        run(&br)?;
        Ok(())
    }

    fn wait_for_vms(&mut self, names: &[String], timeout: Duration) -> Result<(), String> {
        // A vhost port shows "enabled" before any VM connects; a VM has connected once the
        // interface reports link state up.
        let t = Instant::now();
        loop {
            let mut down = Vec::new();
            for n in names {
                let mut cmd = vsctl(&self.dir);
                cmd.extend(["get", "Interface", n, "link_state"].iter().map(|s| s.to_string()));
                if run(&cmd).map(|s| s.trim().to_string()).as_deref() != Ok("up") {
                    down.push(n.clone());
                }
            }
            if down.is_empty() {
                return Ok(());
            }
            if t.elapsed() > timeout {
                return Err(format!("these VMs never connected to OVS: {}", down.join(", ")));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn sample(&mut self) -> Vec<Reading> {
        let mut out = Vec::new();
        if let Ok(text) = self.appctl(&["dpctl/show", "-s"]) {
            for (name, v) in parse_dpctl_show(&text) {
                for (i, key) in ["rx_packets", "rx_bytes", "policer_drops", "tx_packets", "tx_dropped"].iter().enumerate() {
                    out.push(Reading::counter(&name, key, v[i]));
                }
            }
        }
        if let Ok(text) = self.appctl(&["dpif-netdev/pmd-stats-show"]) {
            for (core, idle, busy) in parse_pmd_stats(&text) {
                out.push(Reading::counter(&format!("pmd{core}"), "busy_cycles", busy));
                out.push(Reading::counter(&format!("pmd{core}"), "idle_cycles", idle));
            }
        }
        if let Ok(text) = self.appctl(&["dpif-netdev/pmd-rxq-show"]) {
            for (name, usage) in parse_rxq_usage(&text) {
                out.push(Reading::gauge(&name, "pmd_usage_avg60s_pct", usage));
            }
        }
        out
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        for pidfile in ["ovs-vswitchd.pid", "ovsdb-server.pid"] {
            if let Some(pid) = std::fs::read_to_string(self.dir.join(pidfile)).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
                // SAFETY: signals a daemon we started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let t = Instant::now();
                // SAFETY: signal 0 checks existence.
                while unsafe { libc::kill(pid, 0) } == 0 && t.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        self.started = false;
    }

    fn version(&self) -> String {
        version_of(VSWITCHD, "--version")
    }
}
