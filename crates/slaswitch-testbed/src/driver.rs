//! What the runner asks of each switch: come up, take its configuration, report its counters,
//! go away. Every process and kernel object a driver creates is registered with
//! [`crate::cleanup`] the moment it exists, so an interrupted run still removes it.

use anyhow::anyhow;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::plan::SwitchPlan;
use crate::scenario::Step;
use serde_json::Value;

/// One figure a switch reports. Counters are cumulative (the runner turns them into rates);
/// gauges are already per interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// What it is about: a VM, a port, `pmd0`.
    pub subject: String,
    /// Which figure.
    pub metric: String,
    /// Its value.
    pub value: f64,
    /// Cumulative (a counter) rather than per interval (a gauge).
    pub counter: bool,
}

impl Reading {
    /// A cumulative figure.
    pub fn counter(subject: &str, metric: &str, value: f64) -> Reading {
        Reading { subject: subject.to_string(), metric: metric.to_string(), value, counter: true }
    }

    /// A figure per interval.
    pub fn gauge(subject: &str, metric: &str, value: f64) -> Reading {
        Reading { subject: subject.to_string(), metric: metric.to_string(), value, counter: false }
    }
}

/// What the runner needs of a switch: start it, configure it, sample it, stop it.
pub trait Driver {
    /// Starts the switch's processes (or kernel objects).
    fn start(&mut self) -> anyhow::Result<()>;

    /// Before the VMs' programs start: what must be in force when traffic begins (a master
    /// selling the VMs' guarantees, [`crate::fleet`]).
    fn before_traffic(&mut self, _step: &Step) -> anyhow::Result<()> {
        Ok(())
    }

    /// After the run: what was billed since `from_unix_secs`, when a master billed it.
    fn bill(&mut self, _from_unix_secs: f64) -> Option<Value> {
        None
    }

    /// Applies the plan: writes its files and runs its commands in order.
    fn configure(&mut self, plan: &SwitchPlan) -> anyhow::Result<()> {
        for (path, text) in &plan.files {
            std::fs::write(path, text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        }
        for undo in &plan.undo {
            crate::cleanup::undo(&undo.iter().map(String::as_str).collect::<Vec<_>>());
        }
        for cmd in &plan.commands {
            run(cmd)?;
        }
        for cmd in &plan.daemons {
            let child = std::process::Command::new(&cmd[0])
                .args(&cmd[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| anyhow!("cannot start {}: {e}", cmd.join(" ")))?;
            crate::cleanup::process(child.id(), &cmd[0]);
        }
        for cmd in &plan.after_daemons {
            run_until_it_succeeds(cmd, Duration::from_secs(10))?;
        }
        Ok(())
    }

    /// Waits until every VM's port sees its VM (link up), where the switch can tell.
    fn wait_for_vms(&mut self, _names: &[String], _timeout: Duration) -> anyhow::Result<()> {
        Ok(())
    }

    /// Counters and gauges now: per port `rx_packets`, `rx_bytes`, `policer_drops`, stage
    /// cycles; per PMD `busy_cycles`, `idle_cycles`.
    fn sample(&mut self) -> Vec<Reading>;

    /// Kills the switch's data-plane process with SIGKILL (a crash) and starts it again at
    /// once, as a supervisor would, restoring what it does not keep itself from `plan`.
    fn crash_and_restart(&mut self, plan: &SwitchPlan) -> anyhow::Result<()> {
        let _ = plan;
        Err(anyhow!("this switch has no data-plane process to crash"))
    }

    /// Stops everything `start` and `configure` created.
    fn stop(&mut self);

    /// The switch's name and version, for the report.
    fn version(&self) -> String;
}

/// Runs a command again and again until it succeeds (what it needs appears), for at most
/// `timeout`; then its last failure is the error.
pub fn run_until_it_succeeds(cmd: &[String], timeout: Duration) -> anyhow::Result<String> {
    let t = Instant::now();
    loop {
        match run(cmd) {
            Ok(out) => return Ok(out),
            Err(e) if t.elapsed() > timeout => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Runs a command; its failure is an error naming the command and its output.
pub fn run(cmd: &[String]) -> anyhow::Result<String> {
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| anyhow!("cannot run {}: {e}", cmd[0]))?;
    if !out.status.success() {
        return Err(anyhow!(
            "`{}` failed ({}): {}{}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Lets a daemon started from the test bed, which runs pinned to the VM core, use every core
/// again, as when started by hand: slaswitchd pins its own threads (its PMDs and its main
/// thread), and vde_switch is scheduled where the kernel likes.
pub fn on_every_core(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only fills a stack value and makes one system
    // call, both async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for core in 0..libc::CPU_SETSIZE as usize {
                libc::CPU_SET(core, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Runs a command and returns its output, or its error output when it fails.
pub fn run_args(args: &[&str]) -> anyhow::Result<String> {
    run(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// Waits for `path` to exist, failing after `timeout` with what `log` holds.
pub fn wait_for_path(path: &Path, timeout: Duration, what: &str, log: &Path) -> anyhow::Result<()> {
    let t = Instant::now();
    while !path.exists() {
        if t.elapsed() > timeout {
            let log_text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log_text.lines().rev().take(10).collect();
            return Err(anyhow!(
                "{what} did not come up within {} s; last log lines:\n{}",
                timeout.as_secs(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// First line of `program --version`, or "unknown".
pub fn version_of(program: &str, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Polls `down` (which returns the VMs not yet connected) until it returns none, failing
/// after `timeout` with their names.
pub fn wait_until_connected(
    switch: &str,
    timeout: Duration,
    mut down: impl FnMut() -> anyhow::Result<Vec<String>>,
) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        let missing = down()?;
        if missing.is_empty() {
            return Ok(());
        }
        if t.elapsed() > timeout {
            return Err(anyhow!("these VMs never connected to {switch}: {}", missing.join(", ")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
