//! `slaswitch experiment run`: for each switch and each step of the scenario, stand the switch
//! up, attach the same emulated VMs (one slaswitch-tenant process on the VM core sends for
//! every VM and receives for the uplink, so the VMs are backlogged together), sample every
//! interval, then take everything down. Writes `samples.csv` and `run.json`, then the report.

use anyhow::anyhow;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::cleanup;
use crate::driver::{Driver, Reading};
use crate::guest::{Guest, GuestConfig, GuestJob};
use crate::plan::{phase_with_destination, SwitchPlan};
use crate::samples::{self, Sample};
use crate::scenario::{Scenario, Step, SwitchKind, VmKind};
use crate::switches::{driver_for, plan};
use crate::{capacity, namespaces, preflight, report};

/// What `slaswitch experiment run` was asked.
pub struct RunOptions {
    /// The scenario file.
    pub scenario_path: PathBuf,
    /// Empty: the scenario's own list.
    pub switches: Vec<SwitchKind>,
    /// Where the run folder goes (default: `results/SCENARIO-TIME`).
    pub out_dir: Option<PathBuf>,
    /// Where slaswitchd, slaswitch and slaswitch-tenant are.
    pub tools: PathBuf,
    /// No progress lines.
    pub quiet: bool,
    /// Times every configuration runs, round after round (1: once). With more than one, each
    /// run's label gets ` #k` and the report adds the median over the rounds.
    pub rounds: usize,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Draws `[####......] label` on one terminal line.
fn progress(label: &str, done: f64, total: f64, quiet: bool) {
    if quiet {
        return;
    }
    let width = 30;
    let filled = ((done / total.max(1e-9)).clamp(0.0, 1.0) * width as f64) as usize;
    eprint!("\r[{}{}] {label} {:>4.0}/{:.0} s ", "#".repeat(filled), ".".repeat(width - filled), done.max(0.0), total);
    let _ = std::io::stderr().flush();
}

/// The tenant's command line: every emulated VM sends, the uplink receives.
pub fn tenant_command(
    scenario: &Scenario,
    step: &Step,
    p: &SwitchPlan,
    tools: &Path,
    out: &Path,
    prefix: &str,
) -> Vec<String> {
    let mut cmd: Vec<String> = vec![
        tools.join("slaswitch-tenant").display().to_string(),
        "--core".into(),
        scenario.host.vm_core.to_string(),
        "--ring".into(),
        scenario.host.ring.to_string(),
        "--virtio-ring".into(),
        scenario.host.vm_virtio_ring.name().into(),
        "--duration".into(),
        scenario.duration_secs.to_string(),
        "--interval".into(),
        scenario.sample_interval_secs.to_string(),
        "--file-prefix".into(),
        prefix.into(),
        "--link-timeout".into(),
        "60".into(),
        "--out".into(),
        out.display().to_string(),
    ];
    for arg in p.attach.iter().filter_map(|(name, a)| a.tenant_arg(name)) {
        cmd.push("--vm".into());
        cmd.push(arg);
    }
    cmd.push("gen".into());
    if p.attach.iter().any(|(n, a)| *n == scenario.uplink.name && a.tenant_arg(n).is_some()) {
        cmd.push("--sink".into());
        cmd.push(scenario.uplink.name.clone());
    }
    for vm in step.vms.iter().filter(|v| v.kind == VmKind::Emulated) {
        for phase in &vm.phase_texts {
            cmd.push("--phase".into());
            cmd.push(format!("{},vm={}", phase_with_destination(phase, &scenario.uplink.name), vm.name));
        }
    }
    cmd
}

/// Where a program runs.
enum Job {
    /// A process in a namespace.
    Process(std::process::Child),
    /// A command in a QEMU guest.
    Guest(GuestJob),
}

/// A program running in a namespace or a guest, its output going to a file.
struct App {
    vm: String,
    command: String,
    output: PathBuf,
    job: Job,
    done: bool,
}

impl App {
    /// Runs `command` in namespace `ns`, pinned to `core` (the VM core: the PMD keeps its own),
    /// with the test bed's own tools (`tools`) on its PATH.
    fn start(ns: &str, command: &str, vm: &str, output: &Path, core: usize, tools: &Path) -> anyhow::Result<App> {
        let file = std::fs::File::create(output).map_err(|e| anyhow!("{}: {e}", output.display()))?;
        let path = format!("{}:{}", tools.display(), std::env::var("PATH").unwrap_or_default());
        let child = Command::new("ip")
            .env("PATH", path)
            .args(["netns", "exec", ns, "taskset", "-c", &core.to_string(), "sh", "-c", command])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("cannot run `{command}` in {ns}: {e}"))?;
        cleanup::process(child.id(), &format!("{vm}: {command}"));
        Ok(App {
            vm: vm.into(),
            command: command.into(),
            output: output.to_path_buf(),
            job: Job::Process(child),
            done: false,
        })
    }

    /// Runs `command` in `guest` (its programs are the guest's own).
    fn in_guest(guest: &mut Guest, command: &str) -> anyhow::Result<App> {
        let job = guest.start(command)?;
        Ok(App {
            vm: guest.name.clone(),
            command: command.into(),
            output: job.output.clone(),
            job: Job::Guest(job),
            done: false,
        })
    }

    fn finished(&mut self) -> bool {
        if !self.done {
            self.done = match &mut self.job {
                Job::Process(child) => matches!(child.try_wait(), Ok(Some(_))),
                Job::Guest(job) => job.finished(),
            };
        }
        self.done
    }

    fn stop(&mut self) {
        if !self.finished() {
            match &mut self.job {
                Job::Process(child) => cleanup::stop_group(child.id() as i32, Duration::from_secs(3)),
                Job::Guest(job) => job.stop(Duration::from_secs(3)),
            }
            self.done = true;
        }
    }
}

/// Boots the step's QEMU guests on the VM core and waits until each one's agent is up; returns
/// them with what each reported (kernel, offloads).
fn boot_guests(
    scenario: &Scenario,
    step: &Step,
    p: &SwitchPlan,
    work: &Path,
) -> anyhow::Result<(Vec<Guest>, Vec<Value>)> {
    let mut guests = Vec::new();
    for (name, attach) in &p.attach {
        if let crate::plan::Attach::Guest { socket, guest_serves } = attach {
            guests.push(Guest::boot(&GuestConfig {
                name: name.clone(),
                mac: crate::plan::mac_of(name),
                ip_cidr: format!("{}/24", namespaces::ip_of(scenario, step, name)),
                vhost_socket: socket.clone(),
                guest_serves: *guest_serves,
                core: scenario.host.vm_core,
                dir: work.join(format!("guest-{name}")),
                receive_tso: true,
            })?);
        }
    }
    let mut info = Vec::new();
    for g in guests.iter_mut() {
        let ready = g.wait_ready(GUEST_BOOT_TIMEOUT)?;
        info.push(json!({"vm": g.name, "accel": g.accel.name(), "ready": ready.trim()}));
    }
    Ok((guests, info))
}

/// How long a guest may take to boot: under TCG, on a core it shares, tens of seconds.
const GUEST_BOOT_TIMEOUT: Duration = Duration::from_secs(180);

struct StepResult {
    samples: Vec<Sample>,
    meta: Value,
}

/// One step of one configuration; `run_label` names it in the samples (`slaswitch`, or
/// `slaswitch/c2tb` for a variant).
fn run_step(
    scenario: &Scenario,
    step: &Step,
    switch: SwitchKind,
    run_label: &str,
    work: &Path,
    opts: &RunOptions,
    label: &str,
) -> anyhow::Result<StepResult> {
    std::fs::create_dir_all(work).map_err(|e| anyhow!("{}: {e}", work.display()))?;
    let prefix = format!("tb{}{}", std::process::id(), switch.name().chars().next().unwrap_or('x'));
    let mut driver = driver_for(switch, work, &opts.tools, scenario, step, &format!("{prefix}sw"));
    let p = plan(switch, scenario, step, work, &opts.tools);
    let mut members: Vec<&str> = vec![scenario.uplink.name.as_str()];
    members.extend(step.vms.iter().map(|v| v.name.as_str()));
    for name in members {
        if namespaces::is_namespace(scenario, step, name) && !p.namespaces.iter().any(|(n, _)| n == name) {
            return Err(anyhow!(
                "{switch} cannot attach the namespace VM {name} (the runner plugs only emulated VMs into it)"
            ));
        }
        let attached_as_guest =
            p.attach.iter().any(|(n, a)| n == name && matches!(a, crate::plan::Attach::Guest { .. }));
        if crate::plan::guest_port(scenario, step, name).is_some() && !attached_as_guest {
            return Err(anyhow!("{switch} cannot attach the QEMU VM {name} (it has no vhost-user ports)"));
        }
    }
    let result = (|| {
        driver.start()?;
        driver.configure(&p)?;
        driver.before_traffic(step)?;
        let tenant_out = work.join("tenant.json");
        let cmd = tenant_command(scenario, step, &p, &opts.tools, &tenant_out, &format!("{prefix}vm"));
        let log = work.join("tenant.log");
        let names: Vec<String> = p.attach.iter().map(|(n, _)| n.clone()).collect();
        let (mut guests, guest_info) = boot_guests(scenario, step, &p, work)?;
        let (mut apps, servers) = start_apps(scenario, step, &p, work, &opts.tools, &mut guests)?;
        let emulated = p.attach.iter().any(|(n, a)| a.tenant_arg(n).is_some());
        let mut child = if emulated { Some(start_tenant(&cmd, work, &log)?) } else { None };
        driver.wait_for_vms(&names, Duration::from_secs(90))?;
        let connected_at = unix_now();
        let mut events = LiveEvents { changes_done: 0, crash_at: scenario.crash_switch_at_secs, crash: None };
        let mut times: Vec<f64> = Vec::new();
        let mut readings: Vec<Vec<Reading>> = Vec::new();
        let interval = Duration::from_secs_f64(scenario.sample_interval_secs);
        let mut next = Instant::now();
        let status = loop {
            if cleanup::interrupted() {
                return Err(anyhow!("interrupted"));
            }
            match child.as_mut() {
                Some(c) => {
                    if let Some(status) = c.try_wait()? {
                        break Some(status);
                    }
                }
                None => {
                    // No emulated VM: the run lasts as long as the VMs' programs (at most
                    // the duration plus 20 s).
                    let elapsed = unix_now() - connected_at;
                    if (elapsed >= scenario.duration_secs && apps[servers..].iter_mut().all(|a| a.finished()))
                        || elapsed > scenario.duration_secs + 20.0
                    {
                        break None;
                    }
                }
            }
            events.make_due(unix_now() - connected_at, driver.as_mut(), &p)?;
            if Instant::now() >= next {
                times.push(unix_now());
                let mut reading = driver.sample();
                reading.extend(crate::host_steal::readings(&[0, 1]));
                readings.push(reading);
                next += interval;
                progress(label, unix_now() - connected_at, scenario.duration_secs, opts.quiet);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !opts.quiet {
            eprintln!();
        }
        if let Some(status) = status.filter(|s| !s.success()) {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(anyhow!("slaswitch-tenant failed ({status}): {}", tail.trim()));
        }
        let doc: Value = match child {
            Some(_) => read_json(&tenant_out)?,
            None => json!({"start_unix_secs": connected_at}),
        };
        let start = doc["start_unix_secs"].as_f64().unwrap_or(connected_at);
        // The clients first, then the uplink's programs (a receiver-side meter reports when stopped).
        let (mut app_samples, mut app_outputs) = stop_apps(&mut apps[servers..], scenario, step, run_label);
        let (server_samples, server_outputs) = stop_apps(&mut apps[..servers], scenario, step, run_label);
        app_samples.extend(server_samples);
        app_outputs.extend(server_outputs);
        let rel: Vec<f64> = times.iter().map(|t| t - start).collect();
        let mut out = samples::from_tenant(&doc, run_label, &step.label);
        out.extend(app_samples);
        out.extend(samples::from_readings(&rel, &readings, run_label, &step.label));
        // Samples after the VMs stopped say nothing about the scenario.
        out.retain(|s| s.t_secs <= scenario.duration_secs + 0.5);
        let mut meta = step_meta(run_label, step, driver.version(), &p, &cmd, &doc, app_outputs);
        meta["guests"] = json!(guest_info);
        meta["crash"] = json!(events.crash);
        // From before the purchases, so their first cycles are in it.
        if let Some(bill) = driver.bill(start - 30.0) {
            meta["bill"] = bill;
            meta["bill_start_unix_secs"] = json!(start);
        }
        Ok(StepResult { samples: out, meta })
    })();
    // Newest first: the VMs stop before the switch they are attached to.
    cleanup::undo_all();
    driver.stop();
    result
}

/// What happens to the switch during a run: the scenario's live changes and its crash.
struct LiveEvents {
    /// How many of the plan's changes have been made.
    changes_done: usize,
    /// When the switch is to crash, until it has.
    crash_at: Option<f64>,
    /// The crash, once made: when, and how long the restart took.
    crash: Option<Value>,
}

impl LiveEvents {
    /// Makes every event due `elapsed_secs` into the run.
    fn make_due(&mut self, elapsed_secs: f64, driver: &mut dyn Driver, p: &SwitchPlan) -> anyhow::Result<()> {
        if let Some(at) = self.crash_at.filter(|at| elapsed_secs >= *at) {
            let t = Instant::now();
            driver.crash_and_restart(p).map_err(|e| anyhow!("crash at {at} s: {e}"))?;
            self.crash = Some(json!({"at_secs": at, "restarted_in_secs": t.elapsed().as_secs_f64()}));
            self.crash_at = None;
        }
        for (at, commands) in p.changes.iter().skip(self.changes_done).take_while(|(at, _)| elapsed_secs >= *at) {
            for c in commands {
                crate::driver::run(c).map_err(|e| anyhow!("change at {at} s: {e}"))?;
            }
            self.changes_done += 1;
        }
        Ok(())
    }
}

/// Starts the emulated VMs (`slaswitch-tenant`) in a process group of their own, registered for
/// cleanup; their log goes to `log`.
fn start_tenant(cmd: &[String], work: &Path, log: &Path) -> anyhow::Result<std::process::Child> {
    let c = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(work.join("tenant.stdout"))?)
        .stderr(std::fs::File::create(log)?)
        .process_group(0)
        .spawn()
        .map_err(|e| anyhow!("cannot start slaswitch-tenant: {e}"))?;
    cleanup::process(c.id(), "slaswitch-tenant");
    Ok(c)
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// What the run's metadata records of one step: versions, exact commands, files, notes.
fn step_meta(
    run_label: &str,
    step: &Step,
    version: String,
    p: &SwitchPlan,
    cmd: &[String],
    doc: &Value,
    app_outputs: Vec<Value>,
) -> Value {
    json!({
        "switch": run_label,
        "step": step.label,
        "version": version,
        "commands": p.commands.iter().map(|c| c.join(" ")).collect::<Vec<_>>(),
        "daemons": p.daemons.iter().map(|c| c.join(" ")).collect::<Vec<_>>(),
        "files": p.files.iter().map(|(f, t)| json!({"file": f.file_name().map(|n| n.to_string_lossy().into_owned()), "text": t})).collect::<Vec<_>>(),
        "tenant_command": cmd.join(" "),
        "unsupported": p.unsupported,
        "notes": p.notes,
        "tenant_summary": doc["summary"],
        "apps": app_outputs,
    })
}

/// Starts the programs of the namespace and QEMU VMs: the uplink's servers first, then the
/// VMs' clients. Returns them and how many are servers.
fn start_apps(
    scenario: &Scenario,
    step: &Step,
    p: &SwitchPlan,
    work: &Path,
    tools: &Path,
    guests: &mut [Guest],
) -> anyhow::Result<(Vec<App>, usize)> {
    let mut apps: Vec<App> = Vec::new();
    let mut start = |apps: &mut Vec<App>, name: &str, commands: &[String]| -> anyhow::Result<()> {
        for (i, c) in commands.iter().enumerate() {
            let command = namespaces::fill(c, scenario, step, name);
            if let Some(g) = guests.iter_mut().find(|g| g.name == name) {
                apps.push(App::in_guest(g, &command)?);
            } else if let Some((_, ns)) = p.namespaces.iter().find(|(n, _)| n == name) {
                let output = work.join(format!("app-{name}-{i}.out"));
                apps.push(App::start(ns, &command, name, &output, scenario.host.vm_core, tools)?);
            }
        }
        Ok(())
    };
    if scenario.uplink.kind.runs_programs() && !scenario.uplink.commands.is_empty() {
        start(&mut apps, &scenario.uplink.name, &scenario.uplink.commands)?;
        std::thread::sleep(Duration::from_secs(1));
    }
    let servers = apps.len();
    for vm in step.vms.iter().filter(|v| v.kind.runs_programs()) {
        start(&mut apps, &vm.name, &vm.commands)?;
    }
    Ok((apps, servers))
}

/// Stops the VMs' client programs and reads their outputs: the samples parsed from them, and
/// what the run's metadata records of each.
fn stop_apps(apps: &mut [App], scenario: &Scenario, step: &Step, run_label: &str) -> (Vec<Sample>, Vec<Value>) {
    let mut app_samples = Vec::new();
    let mut app_outputs = Vec::new();
    for app in apps.iter_mut() {
        app.stop();
        let text = std::fs::read_to_string(&app.output).unwrap_or_default();
        let mut parsed = namespaces::parse_output(&app.command, &text, &app.vm, scenario.duration_secs);
        for s in parsed.iter_mut() {
            s.switch = run_label.into();
            s.step = step.label.clone();
        }
        app_outputs.push(json!({"vm": app.vm, "command": app.command, "parsed_samples": parsed.len(), "output_tail": text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")}));
        app_samples.extend(parsed);
    }
    (app_samples, app_outputs)
}

/// Pins the test bed to the VM core, and with it everything it starts that does not pin itself
/// (the command-line calls that sample the switches each second, the switches' control
/// threads): the kernel otherwise places them on a PMD core now and then, and a busy-polling
/// PMD that loses its core for a few milliseconds lets every VM's ring overflow.
fn keep_off_pmd_cores(vm_core: usize) -> anyhow::Result<()> {
    slaswitch_datapath::pmd::pin_to_core(vm_core).map_err(|e| anyhow!("the test bed: {e}"))
}

/// Seconds each traffic kind is measured alone when capacities are measured.
const CAPACITY_PROBE_SECS: f64 = 4.0;

/// What slaswitch's first PMD core forwards of each kind, packets per second at 100% busy: each
/// kind from its own VM at full speed, alone, through the scenario's rule set to a null uplink.
/// The first second of each kind is left out (rings filling, caches warming).
fn measure_capacity(
    s: &Scenario,
    kinds: &[capacity::Kind],
    work: &Path,
    opts: &RunOptions,
) -> anyhow::Result<std::collections::BTreeMap<capacity::Kind, f64>> {
    let mut probe = s.clone();
    probe.host.pmd_cores.truncate(1);
    // A PMD that sleeps while light forwards the same at full load, but its busy share at a
    // lower load (from which the capacity is scaled) counts fuller batches, cheaper per frame.
    probe.host.pmd_max_sleep_us = None;
    probe.uplink = crate::scenario::Uplink {
        name: s.uplink.name.clone(),
        kind: crate::scenario::UplinkKind::Null,
        ..Default::default()
    };
    probe.vms = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| crate::scenario::VmSpec {
            name: format!("cap{i}"),
            kind: VmKind::Emulated,
            count: 1,
            phases: vec![format!(
                "start={},dur={CAPACITY_PROBE_SECS},size={},flows={},rate=max",
                i as f64 * CAPACITY_PROBE_SECS,
                k.size,
                k.flows
            )],
            commands: Vec::new(),
            port: Default::default(),
            qos: Default::default(),
            tenant: None,
        })
        .collect();
    (probe.variants, probe.changes, probe.headlines, probe.tenants) = (vec![], vec![], vec![], vec![]);
    probe.sweep = None;
    probe.duration_secs = CAPACITY_PROBE_SECS * kinds.len() as f64;
    let step = probe.steps().remove(0);
    let r = run_step(&probe, &step, SwitchKind::Slaswitch, "capacity", work, opts, "the PMD's capacity")?;
    let at = |subject: &str, metric: &str, t: f64| {
        r.samples.iter().find(|x| x.subject == subject && x.metric == metric && x.t_secs == t).map(|x| x.value)
    };
    let pmd = r.samples.iter().find(|x| x.metric == "busy_pct").map(|x| x.subject.clone()).unwrap_or_default();
    let mut out = std::collections::BTreeMap::new();
    for (i, k) in kinds.iter().enumerate() {
        let name = format!("cap{i}");
        // Seconds in which only this kind was sent, past its first.
        let mut pps: Vec<f64> = r
            .samples
            .iter()
            .filter(|x| x.subject == name && x.metric == "rx_kpps" && x.value > 0.0)
            .filter(|x| {
                (0..kinds.len()).all(|j| j == i || at(&format!("cap{j}"), "rx_kpps", x.t_secs).unwrap_or(0.0) == 0.0)
            })
            .skip(1)
            .filter_map(|x| at(&pmd, "busy_pct", x.t_secs).filter(|b| *b > 0.0).map(|b| x.value * 1e3 * 100.0 / b))
            .collect();
        pps.sort_by(f64::total_cmp);
        let median = pps.get(pps.len() / 2).copied().ok_or_else(|| {
            anyhow!(
                "measuring the PMD's capacity: no second carried {}-byte frames over {} flows alone",
                k.size,
                k.flows
            )
        })?;
        out.insert(*k, median);
    }
    let _ = std::fs::remove_dir_all(work);
    Ok(out)
}

/// The bandwidth-CPU model slaswitchd prices purchases with (its default path, as the test bed
/// starts it), if there is a readable one.
fn switch_model() -> Option<slaswitch_qos::cpu::BandwidthModel> {
    let path = std::path::Path::new(slaswitch_config::model_file::DEFAULT_MODEL_PATH);
    slaswitch_config::model_file::read_model(path).unwrap_or_else(|e| {
        eprintln!("slaswitch experiment: {e}");
        None
    })
}

/// Keeps the logs of a run that failed in `out_dir/failed-logs` (each step's folder under
/// `base` as a prefix), and returns that folder.
fn keep_failed_logs(base: &Path, out_dir: &Path) -> PathBuf {
    let kept = out_dir.join("failed-logs");
    let _ = std::fs::create_dir_all(&kept);
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        keep_step_logs(&entry.path(), &kept);
    }
    kept
}

/// Copies the logs of one step's folder into `kept`, its name as a prefix: a result, or a
/// failure, is then read in the switches' own words (OVS-DPDK's log says why `pmd-auto-lb`
/// did or did not reassign).
fn keep_step_logs(step_dir: &Path, kept: &Path) {
    let _ = std::fs::create_dir_all(kept);
    let step = step_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for file in std::fs::read_dir(step_dir).into_iter().flatten().flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") || name.ends_with(".stdout") {
            let _ = std::fs::copy(file.path(), kept.join(format!("{step}-{name}")));
        }
    }
}

/// What a run's rounds measured: the samples, each step's record, and the runs' labels.
type Rounds = (Vec<Sample>, Vec<Value>, Vec<String>);

/// Round after round, every configuration in each, so a drift of the host during the run
/// touches every configuration alike (the host is shared and noisy). Stops at the first step
/// that fails, naming it.
fn run_rounds(
    configs: &[crate::scenario::RunConfig],
    step_count: usize,
    rounds: usize,
    base: &Path,
    logs: &Path,
    opts: &RunOptions,
) -> anyhow::Result<Rounds> {
    let (mut all, mut metas, mut labels) = (Vec::new(), Vec::new(), Vec::new());
    for (round, (si, cfg)) in (1..=rounds).flat_map(|r| configs.iter().enumerate().map(move |c| (r, c))) {
        let run_label = crate::report::round_label(&cfg.label, round, rounds);
        if !labels.contains(&run_label) {
            labels.push(run_label.clone());
        }
        for (ti, step) in cfg.scenario.steps().iter().enumerate() {
            let of_rounds = if rounds > 1 { format!(" round {round}/{rounds}") } else { String::new() };
            let (n, steps) = (configs.len(), step_count);
            let label = format!("{} ({}/{n}){of_rounds} {} ({}/{steps})", cfg.label, si + 1, step.label, ti + 1);
            let work = base.join(format!("{}-{round}-{si}-{ti}", cfg.switch.name()));
            let r = run_step(&cfg.scenario, step, cfg.switch, &run_label, &work, opts, &label)
                .map_err(|e| anyhow!("{}, {}: {e}", cfg.label, step.label))?;
            all.extend(r.samples);
            metas.push(r.meta);
            keep_step_logs(&work, logs);
            let _ = std::fs::remove_dir_all(&work);
        }
    }
    Ok((all, metas, labels))
}

/// How long the host's noise is measured on each PMD core before a run.
const HOST_NOISE_SECS: f64 = 2.0;

/// Runs the scenario; returns the folder with the samples and the report.
pub fn run(opts: &RunOptions) -> anyhow::Result<PathBuf> {
    let source =
        std::fs::read_to_string(&opts.scenario_path).map_err(|e| anyhow!("{}: {e}", opts.scenario_path.display()))?;
    let file = opts.scenario_path.display().to_string();
    let kinds = capacity::kinds(&capacity::budgets(&source).map_err(|e| anyhow!("{file}: {e}"))?);
    // Read the host layout with every kind at a stand-in capacity, before measuring the real one.
    let stand_in = kinds.iter().map(|k| (*k, 1e6)).collect();
    let (provisional, _, _) = crate::scenario::parse_with_capacity(&file, &source, &stand_in)?;
    let switches = if opts.switches.is_empty() { provisional.switches.clone() } else { opts.switches.clone() };
    let mut probe_switches = switches.clone();
    if !kinds.is_empty() && !probe_switches.contains(&SwitchKind::Slaswitch) {
        probe_switches.push(SwitchKind::Slaswitch);
    }
    preflight::check(&provisional, &probe_switches, &opts.tools)?;
    keep_off_pmd_cores(provisional.host.vm_core)?;
    // Held to the end of the run, capacity probe included; dropped, it gives the cores back.
    let shield = crate::core_shield::CoreShield::raise(&provisional.host.pmd_cores);
    let noise: Vec<crate::host_noise::HostNoise> = provisional
        .host
        .pmd_cores
        .iter()
        .map(|&core| crate::host_noise::measure(core, HOST_NOISE_SECS))
        .collect::<anyhow::Result<_>>()?;
    cleanup::install_signal_handlers().map_err(|e| anyhow!("signal handlers: {e}"))?;
    let base = std::env::temp_dir().join(format!("slaswitch-exp-{}", std::process::id()));
    let capacity_pps = if kinds.is_empty() {
        Default::default()
    } else {
        let measured = measure_capacity(&provisional, &kinds, &base.join("capacity"), opts);
        cleanup::undo_all();
        measured?
    };
    let model = switch_model();
    let used_pps = capacity::smaller_of_probe_and_model(&capacity_pps, model.as_ref());
    let (scenario, text, mut budgets) = crate::scenario::parse_with_capacity(&file, &source, &used_pps)?;
    capacity::note_sources(&mut budgets, &capacity_pps, model.as_ref());
    let out_dir = opts.out_dir.clone().unwrap_or_else(|| {
        let stamp = crate::provenance::command_output("date", &["+%Y%m%d-%H%M%S"]);
        PathBuf::from("results").join(format!("{}-{stamp}", scenario.name))
    });
    std::fs::create_dir_all(&out_dir).map_err(|e| anyhow!("{}: {e}", out_dir.display()))?;
    // The run folder's scenario is the one that ran: placeholders filled in with this host's rates.
    std::fs::write(out_dir.join("scenario.toml"), &text)?;
    if !budgets.is_empty() {
        std::fs::write(out_dir.join("scenario-source.toml"), &source)?;
        if !opts.quiet {
            eprintln!("rates from the PMD's measured capacity:");
            capacity::describe(&budgets).iter().for_each(|l| eprintln!("  {l}"));
        }
    }
    let steps = scenario.steps();
    let configs = scenario.run_configs(&switches);
    if configs.is_empty() {
        return Err(anyhow!(
            "no variant of {} runs on {}",
            scenario.name,
            switches.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
        ));
    }
    let started = unix_now();
    // The tree as the run starts: the binaries were built from it, whatever is edited meanwhile.
    let commit = crate::provenance::commit();
    let rounds = opts.rounds.max(1);
    let ran = run_rounds(&configs, steps.len(), rounds, &base, &out_dir.join("logs"), opts);
    cleanup::undo_all();
    let (all, metas, labels) = match ran {
        Ok(ran) => ran,
        Err(e) => {
            let kept = keep_failed_logs(&base, &out_dir);
            let _ = std::fs::remove_dir_all(&base);
            return Err(anyhow!("{e}\n(logs in {})", kept.display()));
        }
    };
    let _ = std::fs::remove_dir_all(&base);
    std::fs::write(out_dir.join("samples.csv"), samples::to_csv(&all))?;
    let run = json!({
        "scenario": scenario.name,
        "scenario_file": opts.scenario_path.display().to_string(),
        "started_unix_secs": started,
        "finished_unix_secs": unix_now(),
        "switches": labels,
        "rounds": rounds,
        "machine": crate::provenance::machine(),
        "commit": commit,
        "pinning": {
            "pmd_cores": scenario.host.pmd_cores,
            "vm_core": scenario.host.vm_core,
            "threads_moved_off_pmd_cores": shield.moved(),
            "threads_left_on_pmd_cores": shield.refused,
        },
        "host_noise": noise,
        "runs": metas,
        "capacity": budgets,
        "command": format!("slaswitch experiment run {} --switch {} --rounds {rounds} --out {}", opts.scenario_path.display(), switches.iter().map(|s| s.name()).collect::<Vec<_>>().join(","), out_dir.display()),
    });
    std::fs::write(out_dir.join("run.json"), serde_json::to_string_pretty(&run).expect("JSON"))?;
    report::generate(&out_dir)?;
    Ok(out_dir)
}
