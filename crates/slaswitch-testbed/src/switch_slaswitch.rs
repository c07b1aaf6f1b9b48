//! slaswitch under test: slaswitchd with its PMD on the scenario's cores, vhost-user ports with
//! pinned numbers, the scenario's rules, and per-port ingress policing.

use anyhow::anyhow;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use slaswitch_classifier::security_group::security_group_rules;

use crate::cleanup;
use crate::driver::{on_every_core, run, version_of, wait_for_path, wait_until_connected, Driver, Reading};
use crate::namespaces;
use crate::plan::{guest_port, port_numbers, Attach, SwitchPlan};
use crate::scenario::{Change, PortType, Qos, Scenario, Step, UplinkKind};

/// The flow table, the same on every OpenFlow switch: one rule per VM on its input port (so
/// the switch counts each VM's forwarded traffic the same way), then either the
/// security-group rule set (whose default is `normal`) or a default `normal`. `port` names a
/// port in the switch's own syntax; `extra_actions` puts e.g. a meter before the output.
pub fn flow_table(
    scenario: &Scenario,
    step: &Step,
    port: &dyn Fn(&str) -> String,
    extra_actions: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let sg = scenario.classification.security_group_masks;
    // VMs send to the uplink by rule, not by MAC learning: a null uplink never sends, so its
    // address is never learned and `normal` would flood every frame to every VM. Behind the
    // security-group rules (higher priorities) the lookup still pays for every mask.
    let out = format!("output:{}", port(&scenario.uplink.name));
    let priority = vm_rule_priority(scenario);
    let sample = scenario.classification.sample_flows;
    let mut flows = Vec::new();
    for vm in &step.vms {
        if !scenario.classification.drop_from.contains(&vm.group) {
            flows.push(format!(
                "priority={priority},in_port={},actions={}{out}",
                port(&vm.name),
                extra_actions(&vm.name)
            ));
            continue;
        }
        flows.push(format!("priority={priority},in_port={},actions=drop", port(&vm.name)));
        if sample > 0 {
            // The generator's flow f has UDP source port 1024 + f: one masked rule passes flows 0..N.
            let mask = 0xffff & !(sample - 1);
            flows.push(format!(
                "priority={},udp,in_port={},tp_src=0x400/{mask:#x},actions={out}",
                priority + 1,
                port(&vm.name)
            ));
        }
    }
    if sg > 0 {
        flows.extend(security_group_rules(sg).iter().map(|r| r.to_string()));
    } else {
        flows.push("priority=0,actions=normal".into());
    }
    flows
}

/// The priority of each VM's own rule: under the security group's rules when there are any.
fn vm_rule_priority(scenario: &Scenario) -> u32 {
    if scenario.classification.security_group_masks > 0 {
        1
    } else {
        10
    }
}

/// The rules of `classification.per_flow_rules_for`'s VMs, one per flow (its port and exact
/// UDP source port), above the VM's own rule; apart from [`flow_table`] so a switch can mark
/// them (OVS-DPDK's driver gives them a cookie and reads them in aggregate, not one by one).
pub fn per_flow_rules(
    scenario: &Scenario,
    step: &Step,
    port: &dyn Fn(&str) -> String,
    extra_actions: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let c = &scenario.classification;
    let priority = vm_rule_priority(scenario) + 1;
    let out = format!("output:{}", port(&scenario.uplink.name));
    let mut flows = Vec::new();
    for vm in step.vms.iter().filter(|vm| c.per_flow_rules_for.contains(&vm.group)) {
        // The generator's flow f has UDP source port 1024 + f (`slaswitch_traffic::frames`).
        flows.extend((0..c.per_flow_rules).map(|f| {
            format!(
                "priority={priority},udp,in_port={},tp_src={},actions={}{out}",
                port(&vm.name),
                1024 + f,
                extra_actions(&vm.name)
            )
        }));
    }
    flows
}

/// slaswitch's ports, flows and settings for one step.
pub fn plan(scenario: &Scenario, step: &Step, dir: &Path, tools: &Path) -> SwitchPlan {
    let mut p = SwitchPlan::default();
    let cli = tools.join("slaswitch").display().to_string();
    let socket = dir.join("slaswitchd.ctl").display().to_string();
    // PIE-VDE's tenants exist before the ports that name them (seed 004 Sec. IV).
    for t in &scenario.tenants {
        p.cmd(&[&cli, "--socket", &socket, "set-tenant", &t.name, &format!("weight={}", t.weight)]);
    }
    for (name, number) in port_numbers(scenario, step) {
        let null_uplink = name == scenario.uplink.name && scenario.uplink.kind == UplinkKind::Null;
        let namespace = namespaces::is_namespace(scenario, step, &name);
        let guest = guest_port(scenario, step, &name);
        let vhost_socket = dir.join(format!("{name}.sock"));
        let kind = if null_uplink {
            "null"
        } else if namespace {
            "af-packet"
        } else {
            guest.unwrap_or_default().name()
        };
        let mut cmd = vec![
            cli.clone(),
            "--socket".into(),
            socket.clone(),
            "add-port".into(),
            name.clone(),
            kind.into(),
            format!("ofport_request={number}"),
        ];
        if namespace {
            let iface = namespaces::add_namespace(
                &mut p,
                &name,
                &namespaces::ip_of(scenario, step, &name),
                scenario.host.vm_core,
            );
            cmd.push(format!("iface={iface}"));
            p.namespaces.push((name.clone(), namespaces::ns_name(&name)));
        }
        if guest == Some(PortType::VhostUserClient) {
            cmd.push(format!("path={}", vhost_socket.display()));
        }
        if let (Some(_), Some(on)) = (guest, scenario.host.guest_tso) {
            cmd.push(format!("tso={on}"));
        }
        if let Some(vm) = step.vms.iter().find(|v| v.name == name) {
            // With a master the guarantee is sold, not configured.
            let sold = |o: &String| scenario.cluster.is_some() && o.starts_with("link_guarantee=");
            cmd.extend(vm_options(&vm.qos).into_iter().filter(|o| !sold(o)));
            if let Some(t) = &vm.tenant {
                cmd.push(format!("tenant={t}"));
            }
        }
        if name == scenario.uplink.name {
            // The uplink as the host's NIC: paced to its line rate, the bound of purchased
            // bandwidth, watched by the NIC-bottleneck fallback (seed 000 Sec. IV and VII).
            if let Some(rate) = &scenario.uplink.line_rate {
                cmd.push(format!("link_rate_bps={}", crate::scenario::parse_rate_bps(rate).expect("validated")));
                cmd.push("uplink=true".into());
                if let Some(on) = scenario.uplink.nic_fallback {
                    cmd.push(format!("nic_fallback={on}"));
                }
                if let Some(kind) = &scenario.uplink.egress_scheduler {
                    cmd.push(format!("egress_scheduler={kind}"));
                }
                if let Some(on) = scenario.uplink.link_latency {
                    cmd.push(format!("link_latency={}", if on { "on" } else { "off" }));
                }
            }
        }
        p.commands.push(cmd);
        if let Some(port) = guest {
            let guest_serves = port == PortType::VhostUserClient;
            p.attach.push((name.clone(), Attach::Guest { socket: vhost_socket, guest_serves }));
        } else if !null_uplink && !namespace {
            p.attach.push((name.clone(), Attach::VhostUser(vhost_socket)));
        }
    }
    let flows_file = dir.join("flows.txt");
    p.files.push((
        flows_file.clone(),
        [
            flow_table(scenario, step, &|n| n.to_string(), &|_| String::new()),
            per_flow_rules(scenario, step, &|n| n.to_string(), &|_| String::new()),
        ]
        .concat()
        .join("\n")
            + "\n",
    ));
    p.commands.push(vec![cli, "--socket".into(), socket, "add-flows".into(), flows_file.display().to_string()]);
    p
}

/// A VM's QoS as slaswitch port options: ingress policing, C2QoS (the PMD's cycles, seed 000
/// Sec. IV), its purchase and profile, and its settings on the uplink's link scheduler (the
/// generic `min_rate_kbps`/`max_rate_kbps` become its link minimum and maximum).
pub fn vm_options(q: &Qos) -> Vec<String> {
    let mut out = Vec::new();
    let numbers = [
        ("ingress_policing_rate", q.ingress_policing_rate_kbps),
        ("ingress_policing_burst", q.ingress_policing_burst_kb),
        ("ingress_policing_kpkts_rate", q.ingress_policing_kpps),
        ("ingress_policing_kpkts_burst", q.ingress_policing_kpkts_burst),
        ("cycles_per_sec", q.cycles_per_sec),
        ("priority", q.priority.map(u64::from)),
        ("weight", q.weight.map(u64::from)),
        ("bandwidth_bps", q.bandwidth_bps),
        ("profile_packet_bytes", q.profile_packet_bytes.map(u64::from)),
        ("profile_batch_packets", q.profile_batch_packets.map(u64::from)),
        ("link_weight", q.link_weight.map(u64::from)),
        ("link_min_bps", q.link_min_bps.or(q.min_rate_kbps.map(|k| k * 1000))),
        ("link_max_bps", q.link_max_bps.or(q.max_rate_kbps.map(|k| k * 1000))),
        ("link_queue_frames", q.link_queue_frames.map(u64::from)),
        ("latency_p99_us", q.latency_p99_us.map(u64::from)),
    ];
    for (key, value) in numbers {
        if let Some(v) = value {
            out.push(format!("{key}={v}"));
        }
    }
    for (key, value) in [("mode", &q.mode), ("profile_flows", &q.profile_flows), ("link_guarantee", &q.link_guarantee)]
    {
        if let Some(v) = value {
            out.push(format!("{key}={v}"));
        }
    }
    if let Some(d) = q.drift_compensation {
        out.push(format!("drift_compensation={d}"));
    }
    out
}

/// The `set-port` commands that make `change` live.
pub fn change_commands(
    scenario: &Scenario,
    step: &Step,
    change: &Change,
    dir: &Path,
    tools: &Path,
) -> Vec<Vec<String>> {
    let _ = scenario;
    let cli = tools.join("slaswitch").display().to_string();
    let socket = dir.join("slaswitchd.ctl").display().to_string();
    let options = vm_options(&change.qos);
    step.vms
        .iter()
        .filter(|vm| change.applies_to(vm) && !options.is_empty())
        .map(|vm| {
            let mut cmd = vec![cli.clone(), "--socket".into(), socket.clone(), "set-port".into(), vm.name.clone()];
            cmd.extend(options.iter().cloned());
            cmd
        })
        .collect()
}

/// slaswitch, as a switch of the test bed.
pub struct Slaswitch {
    /// The run folder.
    pub dir: PathBuf,
    /// Where slaswitchd and slaswitch are.
    pub tools: PathBuf,
    /// Cores of its PMD threads.
    pub pmd_cores: Vec<usize>,
    /// The core of its control thread.
    pub main_core: usize,
    /// Its DPDK file prefix.
    pub file_prefix: String,
    /// `slaswitchd --c2tb-bucket-us`, when the scenario sets it.
    pub c2tb_bucket_us: Option<u64>,
    /// `slaswitchd --pmd-rebalance`.
    pub pmd_rebalance: bool,
    /// `slaswitchd --pmd-max-sleep-us`.
    pub pmd_max_sleep_us: u64,
    /// `slaswitchd --kernel-tx thread`.
    pub kernel_tx_threads: bool,
    /// The tenant the master sells to, with `[cluster]`.
    cluster_tenant: Option<String>,
    /// etcd and the master, once started.
    fleet: Option<crate::fleet::Fleet>,
    /// A VM's purchase has a latency SLO: the samples count its seconds and misses.
    slo: bool,
    child: Option<Child>,
}

impl Slaswitch {
    /// The switch's driver for `scenario`'s `step`, working in `dir`.
    pub fn new(dir: &Path, tools: &Path, scenario: &Scenario, file_prefix: &str) -> Slaswitch {
        Slaswitch {
            dir: dir.to_path_buf(),
            tools: tools.to_path_buf(),
            pmd_cores: scenario.host.pmd_cores.clone(),
            main_core: scenario.host.vm_core,
            file_prefix: file_prefix.to_string(),
            c2tb_bucket_us: scenario.host.c2tb_bucket_us,
            pmd_rebalance: scenario.host.pmd_rebalance.unwrap_or(true),
            pmd_max_sleep_us: scenario.host.pmd_max_sleep_us.unwrap_or(0),
            kernel_tx_threads: scenario.host.kernel_tx_threads.unwrap_or(false),
            cluster_tenant: scenario.cluster.as_ref().map(|c| c.tenant.clone()),
            fleet: None,
            slo: scenario.vms.iter().any(|v| v.qos.latency_p99_us.is_some()),
            child: None,
        }
    }

    fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = vec![
            self.tools.join("slaswitch").display().to_string(),
            "--socket".into(),
            self.dir.join("slaswitchd.ctl").display().to_string(),
        ];
        cmd.extend(args.iter().map(|s| s.to_string()));
        run(&cmd)
    }

    fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.cli(&a)?).map_err(|e| anyhow!("slaswitch {}: {e}", args.join(" ")))
    }
}

impl Slaswitch {
    /// Each SLO's seconds judged and missed, by cause (`qos-show`), as counters.
    fn slo_readings(&self) -> Vec<Reading> {
        let mut out = Vec::new();
        let Ok(qos) = self.json(&["qos-show"]) else { return out };
        for p in qos["ports"].as_array().into_iter().flatten() {
            let (name, slo) = (p["name"].as_str().unwrap_or("?"), &p["latency_slo"]);
            if slo.is_null() {
                continue;
            }
            out.push(Reading::counter(name, "slo_seconds", slo["seconds"].as_f64().unwrap_or(0.0)));
            out.push(Reading::counter(name, "slo_missed_seconds", slo["missed_seconds"].as_f64().unwrap_or(0.0)));
            for (cause, n) in slo["missed_by_cause"].as_object().into_iter().flatten() {
                out.push(Reading::counter(name, &format!("slo_missed_{cause}"), n.as_f64().unwrap_or(0.0)));
            }
        }
        out
    }
}

impl Driver for Slaswitch {
    fn start(&mut self) -> anyhow::Result<()> {
        if let (Some(tenant), None) = (&self.cluster_tenant, &self.fleet) {
            self.fleet = Some(crate::fleet::Fleet::start(&self.dir, &self.tools, tenant)?);
        }
        let member = self.fleet.as_ref().map(|f| f.daemon_args()).unwrap_or_default();
        let log = self.dir.join("slaswitchd.log");
        let cores: Vec<String> = self.pmd_cores.iter().map(|c| c.to_string()).collect();
        let child = on_every_core(&mut Command::new(self.tools.join("slaswitchd")))
            .args(["--pmd-cores", &cores.join(","), "--main-core", &self.main_core.to_string(), "--run-dir"])
            .arg(&self.dir)
            .arg("--db")
            .arg(self.dir.join("conf.json"))
            .args(["--file-prefix", &self.file_prefix, "--no-metrics"])
            .args(["--pmd-rebalance", if self.pmd_rebalance { "on" } else { "off" }])
            .args(["--pmd-max-sleep-us", &self.pmd_max_sleep_us.to_string()])
            .args(["--kernel-tx", if self.kernel_tx_threads { "thread" } else { "pmd" }])
            .args(self.c2tb_bucket_us.iter().flat_map(|us| ["--c2tb-bucket-us".to_string(), us.to_string()]))
            .args(member)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| anyhow!("{}: {e}", log.display()))?)
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("cannot start slaswitchd: {e}"))?;
        cleanup::process(child.id(), "slaswitchd");
        self.child = Some(child);
        wait_for_path(&self.dir.join("slaswitchd.ctl"), Duration::from_secs(30), "slaswitchd", &log)
    }

    fn before_traffic(&mut self, step: &Step) -> anyhow::Result<()> {
        match &self.fleet {
            Some(f) => f.sell(step),
            None => Ok(()),
        }
    }

    fn bill(&mut self, from_unix_secs: f64) -> Option<Value> {
        let f = self.fleet.as_ref()?;
        Some(f.bill(from_unix_secs).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() })))
    }

    fn wait_for_vms(&mut self, names: &[String], timeout: Duration) -> anyhow::Result<()> {
        wait_until_connected("slaswitch", timeout, || {
            let ports = self.json(&["list-ports"])?;
            let up = |n: &str| ports.as_array().into_iter().flatten().any(|p| p["name"] == n && p["link_up"] == true);
            Ok(names.iter().filter(|n| !up(n)).cloned().collect())
        })
    }

    fn sample(&mut self) -> Vec<Reading> {
        let mut out = Vec::new();
        let Ok(stats) = self.json(&["pmd-stats"]) else { return out };
        for pmd in stats["pmds"].as_array().into_iter().flatten() {
            let core = format!("pmd{}", pmd["core"]);
            for key in ["busy_cycles", "idle_cycles", "stalled_cycles"] {
                out.push(Reading::counter(&core, key, pmd[key].as_f64().unwrap_or(0.0)));
            }
            for p in pmd["ports"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or("?");
                out.push(Reading::gauge(name, "pmd_core", pmd["core"].as_f64().unwrap_or(-1.0)));
                for key in [
                    "rx_packets",
                    "rx_bytes",
                    "policer_drops",
                    "ingress_cycles",
                    "classify_cycles",
                    "egress_cycles",
                    "emc_hits",
                    "emc_misses",
                ] {
                    out.push(Reading::counter(name, key, p[key].as_f64().unwrap_or(0.0)));
                }
                let busy: f64 = ["ingress_cycles", "classify_cycles", "egress_cycles"]
                    .iter()
                    .map(|k| p[*k].as_f64().unwrap_or(0.0))
                    .sum();
                out.push(Reading::counter(name, "busy_cycles", busy));
                // The switch's residence percentiles over its last one-second interval, of all
                // frames and of those no PMD stall touched.
                for (field, metric) in
                    [("residence_us", "residence"), ("residence_unstalled_us", "residence_unstalled")]
                {
                    for q in ["p50", "p90", "p99", "p999"] {
                        if let Some(us) = p["interval"][field][q].as_f64() {
                            out.push(Reading::gauge(name, &format!("{metric}_{q}_us"), us));
                        }
                    }
                }
            }
        }
        if self.slo {
            out.extend(self.slo_readings());
        }
        if let Ok(ports) = self.json(&["port-stats"]) {
            for p in ports["ports"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or("?");
                for key in ["tx_packets", "tx_bytes", "tx_dropped"] {
                    out.push(Reading::counter(name, key, p[key].as_f64().unwrap_or(0.0)));
                }
            }
        }
        out
    }

    /// slaswitchd keeps its ports and rules in its database (`--db`): it restores them itself.
    fn crash_and_restart(&mut self, _plan: &SwitchPlan) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            // SAFETY: a signal to the process group we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.dir.join("slaswitchd.ctl"));
        self.start()
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            cleanup::stop_group(child.id() as i32, Duration::from_secs(15));
        }
        // A daemon that had to be killed leaves its EAL hugepage file behind.
        slaswitch_dpdk::remove_hugepage_files(&self.file_prefix);
        self.fleet = None;
    }

    fn version(&self) -> String {
        let v = version_of(&self.tools.join("slaswitch").display().to_string(), "--version");
        if v == "unknown" || v.starts_with("usage") {
            format!("slaswitch {}", env!("CARGO_PKG_VERSION"))
        } else {
            v
        }
    }
}
