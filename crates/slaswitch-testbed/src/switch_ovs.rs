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

use anyhow::anyhow;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cleanup;
use crate::driver::{
    run, run_args, run_until_it_succeeds, version_of, wait_for_path, wait_until_connected, Driver, Reading,
};
use crate::namespaces;
use crate::plan::{guest_port, port_numbers, Attach, SwitchPlan};
use crate::scenario::{PortType, Scenario, Step, UplinkKind};

/// Debian's OVS-DPDK daemon.
pub const VSWITCHD: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
const NULL_VDEV: &str = "net_null0";
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

/// Where a VM on a vhost-user port of OVS attaches: OVS serves `DIR/NAME` (dpdkvhostuser), or
/// a guest serves `DIR/NAME.sock` (dpdkvhostuserclient).
fn vhost_attach(guest: Option<PortType>, dir: &Path, name: &str) -> Attach {
    match guest {
        Some(PortType::VhostUserClient) => {
            Attach::Guest { socket: dir.join(format!("{name}.sock")), guest_serves: true }
        }
        Some(PortType::VhostUser) => Attach::Guest { socket: dir.join(name), guest_serves: false },
        None => Attach::VhostUser(dir.join(name)),
    }
}

/// OVS's bridge, ports, flows and QoS for one step.
pub fn plan(scenario: &Scenario, step: &Step, dir: &Path) -> SwitchPlan {
    let mut p = SwitchPlan::default();
    let numbers = port_numbers(scenario, step);
    for (name, number) in &numbers {
        let null_uplink = *name == scenario.uplink.name && scenario.uplink.kind == UplinkKind::Null;
        let namespace = namespaces::is_namespace(scenario, step, name);
        let iface = namespace.then(|| {
            namespaces::add_namespace(&mut p, name, &namespaces::ip_of(scenario, step, name), scenario.host.vm_core)
        });
        let mut cmd = vsctl(dir);
        cmd.extend(["add-port", "br0", name, "--", "set", "Interface", name].iter().map(|s| s.to_string()));
        if null_uplink {
            // The null device is created by EAL from dpdk-extra (see `Ovs::start`).
            cmd.extend(["type=dpdk".to_string(), format!("options:dpdk-devargs={NULL_VDEV}")]);
        } else if let Some(iface) = &iface {
            // The same af_packet device slaswitch uses, hot-plugged by its devargs.
            cmd.extend([
                "type=dpdk".to_string(),
                format!("options:dpdk-devargs=net_af_packet{number},iface={iface},qpairs=1"),
            ]);
            p.namespaces.push((name.clone(), namespaces::ns_name(name)));
        } else if guest_port(scenario, step, name) == Some(PortType::VhostUserClient) {
            cmd.push("type=dpdkvhostuserclient".into());
            cmd.push(format!("options:vhost-server-path={}", dir.join(format!("{name}.sock")).display()));
        } else {
            cmd.push("type=dpdkvhostuser".into());
        }
        cmd.push(format!("ofport_request={number}"));
        if let Some(vm) = step.vms.iter().find(|v| &v.name == name) {
            if let Some(rate) = vm.qos.ingress_policing_rate_kbps {
                cmd.push(format!("ingress_policing_rate={rate}"));
                cmd.push(format!("ingress_policing_burst={}", vm.qos.ingress_policing_burst_kb.unwrap_or(0)));
            }
        }
        p.commands.push(cmd);
        if !null_uplink && !namespace {
            p.attach.push((name.clone(), vhost_attach(guest_port(scenario, step, name), dir, name)));
        }
    }
    let mut meters: Vec<String> = Vec::new();
    let mut metered: Vec<String> = Vec::new();
    for (i, vm) in step.vms.iter().enumerate() {
        let meter = 2 + i as u32;
        let q = &vm.qos;
        let mut band = None;
        if let Some(kpps) = q.ingress_policing_kpps {
            let burst = q.ingress_policing_kpkts_burst.unwrap_or(16) * 1000;
            band = Some(format!("meter={meter},pktps,burst,band=type=drop,rate={},burst_size={burst}", kpps * 1000));
            p.notes.push(format!(
                "{}: ingress_policing_kpps {kpps} -> OpenFlow meter {meter} (pktps). netdev-dpdk ignores ingress_policing_kpkts_rate (measured: a vhost port set to 1 kpps passed 100 kpps), and a meter acts after classification",
                vm.name
            ));
        }
        if let Some(max) = q.max_rate_kbps {
            if band.is_none() {
                band = Some(format!("meter={meter},kbps,band=type=drop,rate={max}"));
                p.notes.push(format!("{}: max_rate_kbps {max} -> OpenFlow meter {meter} (kbps)", vm.name));
            } else {
                p.unsupported
                    .push(format!("{}: max_rate_kbps together with ingress_policing_kpps (one meter per VM)", vm.name));
            }
        }
        for (field, _) in q.settings() {
            if [
                "min_rate_kbps",
                "weight",
                "priority",
                "cycles_per_sec",
                "bandwidth_bps",
                "profile_packet_bytes",
                "profile_batch_packets",
                "latency_p99_us",
            ]
            .contains(&field)
            {
                p.unsupported.push(format!("{}: qos.{field} (OVS-DPDK has no minimum guarantee, share weight, priority class, cycle allocation, bandwidth-CPU model or latency SLO)", vm.name));
            }
        }
        if let Some(b) = band {
            meters.push(b);
            metered.push(vm.name.clone());
        }
    }
    let number_of = |name: &str| numbers.iter().find(|(n, _)| n == name).map_or(0, |(_, k)| *k).to_string();
    let meter_of = |name: &str| {
        if metered.iter().any(|m| m == name) {
            format!("meter:{},", number_of(name))
        } else {
            String::new()
        }
    };
    let mut flows = crate::switch_slaswitch::flow_table(scenario, step, &number_of, &meter_of);
    let per_flow = crate::switch_slaswitch::per_flow_rules(scenario, step, &number_of, &meter_of);
    flows.extend(per_flow.iter().map(|r| format!("cookie={PER_FLOW_COOKIE:#x},{r}")));
    if scenario.uplink.line_rate.is_some() {
        p.unsupported.push("uplink.line_rate (a vhost-user port has no line rate in OVS)".into());
    }
    if scenario.host.c2tb_bucket_us.is_some() {
        p.unsupported.push("host.c2tb_bucket_us (OVS-DPDK has no cycle buckets)".into());
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
    // One bundle, one commit: rule by rule, OVS commits each alone, slow for a large table.
    add.insert(3, "--bundle".into());
    add.insert(4, "add-flows".into());
    add.push(flows_file.display().to_string());
    p.commands.push(add);
    p
}

/// The cookie of the per-flow rules (`switch_slaswitch::per_flow_rules`): the readings take
/// their counts in one aggregate per VM instead of dumping tens of thousands of rules a second.
const PER_FLOW_COOKIE: u64 = 0x5f;

/// Open vSwitch with DPDK, as a switch of the test bed (its own ovsdb and run folder).
pub struct Ovs {
    /// The run folder.
    pub dir: PathBuf,
    /// Cores of its PMD threads.
    pub pmd_cores: Vec<usize>,
    /// The core of its other threads.
    pub lcore: usize,
    /// Its DPDK file prefix.
    pub file_prefix: String,
    /// (name, OpenFlow port number) of the ports, to name flow counters.
    pub ports: Vec<(String, u16)>,
    /// OpenFlow port numbers of the VMs with per-flow rules.
    pub per_flow_ports: Vec<u16>,
    /// The uplink is a null device (created at EAL start).
    pub null_uplink: bool,
    /// `userspace-tso-enable`.
    pub userspace_tso: bool,
    /// `pmd-auto-lb` (with `pmd-rxq-assign=cycles`).
    pub auto_lb: bool,
    /// `pmd-maxsleep`, microseconds.
    pub max_sleep_us: u64,
    started: bool,
}

impl Ovs {
    /// The switch's driver for `scenario`'s `step`, working in `dir`.
    pub fn new(dir: &Path, scenario: &Scenario, step: &Step, file_prefix: &str) -> Ovs {
        Ovs {
            dir: dir.to_path_buf(),
            pmd_cores: scenario.host.pmd_cores.clone(),
            lcore: scenario.host.vm_core,
            file_prefix: file_prefix.into(),
            ports: port_numbers(scenario, step),
            per_flow_ports: port_numbers(scenario, step)
                .into_iter()
                .filter(|(name, _)| {
                    step.vms
                        .iter()
                        .any(|v| &v.name == name && scenario.classification.per_flow_rules_for.contains(&v.group))
                })
                .map(|(_, number)| number)
                .collect(),
            null_uplink: scenario.uplink.kind == UplinkKind::Null,
            userspace_tso: scenario.host.guest_tso.unwrap_or(false),
            auto_lb: scenario.host.pmd_rebalance.unwrap_or(false),
            max_sleep_us: scenario.host.pmd_max_sleep_us.unwrap_or(0),
            started: false,
        }
    }

    fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd =
            vec!["ovs-appctl".to_string(), "-t".into(), self.dir.join("ovs-vswitchd.ctl").display().to_string()];
        cmd.extend(args.iter().map(|s| s.to_string()));
        run(&cmd)
    }

    fn env(&self, cmd: &mut Command) {
        for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            cmd.env(var, &self.dir);
        }
    }

    fn daemon(&self, program: &str, args: &[String], what: &str) -> anyhow::Result<()> {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        self.env(&mut cmd);
        let child = cmd.spawn().map_err(|e| anyhow!("cannot start {what}: {e}"))?;
        cleanup::process(child.id(), what);
        Ok(())
    }

    /// Starts ovs-vswitchd on the bridge database. Its handler and revalidator threads stay off
    /// the PMD cores (as isolcpus would keep them); the PMD threads set their own affinity from
    /// pmd-cpu-mask.
    fn start_vswitchd(&mut self) -> anyhow::Result<()> {
        let d = self.dir.clone();
        self.daemon(
            "taskset",
            &[
                "-c".into(),
                self.lcore.to_string(),
                VSWITCHD.into(),
                format!("unix:{}", d.join("db.sock").display()),
                format!("--pidfile={}", d.join("ovs-vswitchd.pid").display()),
                format!("--unixctl={}", d.join("ovs-vswitchd.ctl").display()),
                format!("--log-file={}", d.join("ovs-vswitchd.log").display()),
            ],
            "ovs-vswitchd",
        )?;
        self.started = true;
        wait_for_path(
            &d.join("ovs-vswitchd.ctl"),
            Duration::from_secs(60),
            "ovs-vswitchd",
            &d.join("ovs-vswitchd.log"),
        )?;
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

/// (in_port, n_packets, n_bytes) summed over each VM's rules (those that match its `in_port`: the
/// forwarding rule and, for a sampled VM, its sample rule) in `ovs-ofctl dump-flows` output.
pub fn parse_port_flows(text: &str) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64)> = Vec::new();
    for l in text.lines() {
        let Some((stats, rule)) = l.split_once(" priority=") else { continue };
        let Some(matches) = rule.split_whitespace().next() else { continue };
        let Some(port) = matches.split(',').find_map(|f| f.strip_prefix("in_port=")) else { continue };
        let port = port.trim_matches('"').to_string();
        let (Some(packets), Some(bytes)) = (number_after(stats, "n_packets="), number_after(stats, "n_bytes=")) else {
            continue;
        };
        add_port_count(&mut out, port, packets, bytes);
    }
    out
}

/// Adds `packets` and `bytes` to `port`'s entry of `counts`, making it if need be.
fn add_port_count(counts: &mut Vec<(String, f64, f64)>, port: String, packets: f64, bytes: f64) {
    match counts.iter_mut().find(|e| e.0 == port) {
        Some(e) => {
            e.1 += packets;
            e.2 += bytes;
        }
        None => counts.push((port, packets, bytes)),
    }
}

/// (packets, bytes) from `ovs-ofctl dump-aggregate`'s reply.
pub fn parse_aggregate(text: &str) -> Option<(f64, f64)> {
    Some((number_after(text, "packet_count=")?, number_after(text, "byte_count=")?))
}

/// (meter id, packets dropped, bytes dropped) from `ovs-ofctl meter-stats`.
pub fn parse_meter_drops(text: &str) -> Vec<(u32, f64, f64)> {
    let mut out: Vec<(u32, f64, f64)> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("meter:") {
            if let Some(id) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                out.push((id, 0.0, 0.0));
            }
        } else if let Some(last) = out.last_mut() {
            if l.contains("packet_count:") && l.contains("byte_count:") {
                last.1 += number_after(l, "packet_count:").unwrap_or(0.0);
                last.2 += number_after(l, "byte_count:").unwrap_or(0.0);
            }
        }
    }
    out
}

/// Counters of `dpif-netdev/pmd-stats-show` we sample, by the metric name we give them.
pub const PMD_STATS: [(&str, &str); 7] = [
    ("idle_cycles", "idle cycles:"),
    ("busy_cycles", "processing cycles:"),
    ("packets", "packets received:"),
    ("emc_hits", "emc hits:"),
    ("smc_hits", "smc hits:"),
    ("megaflow_hits", "megaflow hits:"),
    ("upcalls", "miss with success upcall:"),
];

/// Per PMD: (core, the [`PMD_STATS`] values in order) from `dpif-netdev/pmd-stats-show`.
pub fn parse_pmd_stats(text: &str) -> Vec<(usize, Vec<f64>)> {
    let mut out = Vec::new();
    for block in text.split("pmd thread").skip(1) {
        let core = number_after(block, "core_id").unwrap_or(-1.0) as usize;
        out.push((core, PMD_STATS.iter().map(|(_, key)| number_after(block, key).unwrap_or(0.0)).collect()));
    }
    out
}

/// Per port from `dpif-netdev/pmd-rxq-show`: (name, the core of the PMD polling it, its PMD
/// usage in percent, which OVS averages over its last six 10-second intervals: not a per-second
/// figure; absent while OVS has no measurement).
pub fn parse_rxq_usage(text: &str) -> Vec<(String, usize, Option<f64>)> {
    let mut core = None;
    text.lines()
        .filter_map(|l| {
            if l.starts_with("pmd thread") {
                core = number_after(l, "core_id").map(|c| c as usize);
                return None;
            }
            let name = l.split("port:").nth(1)?.split_whitespace().next()?.to_string();
            Some((name, core?, number_after(l, "usage:")))
        })
        .collect()
}

impl Driver for Ovs {
    fn start(&mut self) -> anyhow::Result<()> {
        let d = &self.dir.clone();
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
        cfg.extend([
            "--no-wait".to_string(),
            "set".into(),
            "Open_vSwitch".into(),
            ".".into(),
            "other_config:dpdk-init=true".into(),
            format!("other_config:pmd-cpu-mask={}", mask(&self.pmd_cores)),
            format!("other_config:dpdk-lcore-mask={}", mask(&[self.lcore])),
            "other_config:dpdk-socket-mem=1024".into(),
            format!("other_config:userspace-tso-enable={}", self.userspace_tso),
            // Auto load balancing acts on a PMD over its load threshold (95%) for six 10-s
            // intervals, at most once per `pmd-auto-lb-rebal-interval` (a minute by default),
            // with cycles-based assignment (the default, set here to be sure).
            format!("other_config:pmd-auto-lb={}", self.auto_lb),
            format!("other_config:pmd-maxsleep={}", self.max_sleep_us),
            format!(
                "other_config:dpdk-extra=--no-pci --file-prefix {} --single-file-segments{}",
                self.file_prefix,
                if self.null_uplink { format!(" --vdev {NULL_VDEV},no-rx=1") } else { String::new() }
            ),
        ]);
        if self.auto_lb {
            cfg.push("other_config:pmd-rxq-assign=cycles".into());
        }
        run(&cfg)?;
        self.start_vswitchd()?;
        if self.auto_lb {
            // Auto load balancing says why it did or did not reassign (its dry run's variance
            // estimates) only at debug level; the run's logs keep it.
            self.appctl(&["vlog/set", "dpif_netdev:file:dbg"])?;
        }
        let mut br = vsctl(d);
        br.extend(
            ["add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"].iter().map(|s| s.to_string()),
        );
        run(&br)?;
        Ok(())
    }

    fn wait_for_vms(&mut self, names: &[String], timeout: Duration) -> anyhow::Result<()> {
        // A vhost port shows "enabled" before any VM connects; a VM has connected once the
        // interface reports link state up.
        wait_until_connected("OVS", timeout, || {
            let up = |n: &str| {
                let mut cmd = vsctl(&self.dir);
                cmd.extend(["get", "Interface", n, "link_state"].iter().map(|s| s.to_string()));
                run(&cmd).is_ok_and(|s| s.trim() == "up")
            };
            Ok(names.iter().filter(|n| !up(n)).cloned().collect())
        })
    }

    fn sample(&mut self) -> Vec<Reading> {
        let mut out = Vec::new();
        // vhost ports give no statistics here ("could not retrieve stats (Protocol error)"), so a
        // VM's forwarded traffic is read from its per-VM flow (OVS refreshes flow counters
        // every 500 ms).
        // A rule counts what it matched, before its meter drops: the meter's band counts are
        // taken off (each VM's meter has the VM's port number).
        let mut cmd = ofctl(&self.dir);
        cmd.insert(3, "meter-stats".into());
        let dropped = run(&cmd).map(|t| parse_meter_drops(&t)).unwrap_or_default();
        let mut cmd = ofctl(&self.dir);
        cmd.insert(3, "dump-flows".into());
        cmd.push("cookie=0/-1".into());
        if let Ok(text) = run(&cmd) {
            let mut counts = parse_port_flows(&text);
            for number in &self.per_flow_ports {
                let mut cmd = ofctl(&self.dir);
                cmd.insert(3, "dump-aggregate".into());
                cmd.push(format!("in_port={number},cookie={PER_FLOW_COOKIE:#x}/-1"));
                // Like the dump above, a failed reading leaves a gap in the VM's counters.
                let Some((packets, bytes)) = run(&cmd).ok().and_then(|t| parse_aggregate(&t)) else { continue };
                add_port_count(&mut counts, number.to_string(), packets, bytes);
            }
            for (port, packets, bytes) in counts {
                let entry = self.ports.iter().find(|(name, n)| n.to_string() == port || *name == port);
                let name = entry.map_or(port.clone(), |(name, _)| name.clone());
                let (drop_packets, drop_bytes) = entry
                    .and_then(|(_, n)| dropped.iter().find(|d| d.0 == u32::from(*n)))
                    .map_or((0.0, 0.0), |d| (d.1, d.2));
                out.push(Reading::counter(&name, "rx_packets", packets - drop_packets));
                out.push(Reading::counter(&name, "rx_bytes", bytes - drop_bytes));
                out.push(Reading::counter(&name, "policer_drops", drop_packets));
            }
        }
        if let Ok(text) = self.appctl(&["dpif-netdev/pmd-stats-show"]) {
            for (core, values) in parse_pmd_stats(&text) {
                for ((metric, _), v) in PMD_STATS.iter().zip(values) {
                    out.push(Reading::counter(&format!("pmd{core}"), metric, v));
                }
            }
        }
        if let Ok(text) = self.appctl(&["dpif-netdev/pmd-rxq-show"]) {
            for (name, core, usage) in parse_rxq_usage(&text) {
                out.push(Reading::gauge(&name, "pmd_core", core as f64));
                if let Some(usage) = usage {
                    out.push(Reading::gauge(&name, "pmd_usage_avg60s_pct", usage));
                }
            }
        }
        out
    }

    /// ovsdb-server keeps the bridge and its ports; OpenFlow rules and meters live only in
    /// ovs-vswitchd, so they are added again from the plan, as `ovs-save` and a restart script
    /// do in production.
    fn crash_and_restart(&mut self, plan: &SwitchPlan) -> anyhow::Result<()> {
        let pidfile = self.dir.join("ovs-vswitchd.pid");
        let pid = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<i32>().ok());
        let pid = pid.ok_or_else(|| anyhow!("ovs-vswitchd has no pid file in {}", self.dir.display()))?;
        // SAFETY: a signal to the process group we created.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        cleanup::stop_group(pid, Duration::from_secs(5));
        let _ = std::fs::remove_file(&pidfile);
        let _ = std::fs::remove_file(self.dir.join("ovs-vswitchd.ctl"));
        self.start_vswitchd()?;
        // The bridge's management socket appears once ovs-vswitchd has read the database.
        for cmd in plan.commands.iter().filter(|c| c.first().is_some_and(|p| p == "ovs-ofctl")) {
            run_until_it_succeeds(cmd, Duration::from_secs(20))?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        for pidfile in ["ovs-vswitchd.pid", "ovsdb-server.pid"] {
            // Both run in the foreground as our children, each leading its own process group.
            if let Some(pid) =
                std::fs::read_to_string(self.dir.join(pidfile)).ok().and_then(|s| s.trim().parse::<i32>().ok())
            {
                cleanup::stop_group(pid, Duration::from_secs(20));
            }
        }
        self.started = false;
    }

    fn version(&self) -> String {
        version_of(VSWITCHD, "--version")
    }
}
