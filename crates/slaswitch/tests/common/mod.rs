//! Starts real slaswitchd and slaswitch-tenant processes for integration tests. Each test gets
//! its own run directory, EAL file prefix and configuration file, and everything it starts is
//! stopped when the guard drops (also on panic).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One test at a time: they share the PMD core, the VM core and hugepages.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub use slaswitch_testkit::Component;

/// True when this machine can run the data plane (root, hugepages) and has `extra`; else, under
/// `CI=true`, the test fails naming what is missing, and elsewhere it is reported as skipped and
/// returns early. `scripts/test` installs and sets up all of it.
pub fn can_run_with(extra: &[Component]) -> bool {
    slaswitch_testkit::require(&[&[Component::Root, Component::Hugepages][..], extra].concat())
}

pub fn can_run() -> bool {
    can_run_with(&[])
}

pub const DAEMON: &str = env!("CARGO_BIN_EXE_slaswitchd");
pub const CLI: &str = env!("CARGO_BIN_EXE_slaswitch");
pub const TENANT: &str = env!("CARGO_BIN_EXE_slaswitch-tenant");

/// `slaswitch-master`, built by the cluster crate beside this crate's programs (`cargo test
/// --workspace` builds it; alone, `cargo build --release -p slaswitch-cluster`).
#[allow(dead_code)]
pub fn master() -> PathBuf {
    let path = std::path::Path::new(DAEMON).with_file_name("slaswitch-master");
    assert!(path.exists(), "{} is not built: cargo build --release -p slaswitch-cluster", path.display());
    path
}

pub struct Switch {
    pub dir: PathBuf,
    pub name: String,
    child: Option<Child>,
    extra: Vec<String>,
}

impl Switch {
    pub fn start(name: &str, extra: &[&str]) -> Switch {
        let dir = std::env::temp_dir().join(format!("slaswitch-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s =
            Switch { dir, name: name.to_string(), child: None, extra: extra.iter().map(|s| s.to_string()).collect() };
        s.spawn();
        s
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("slaswitchd.ctl")
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("slaswitchd.log")).unwrap();
        let mut cmd = Command::new(DAEMON);
        if !self.extra.iter().any(|e| e == "--pmd-cores") {
            cmd.args(["--pmd-cores", "0"]);
        }
        cmd.args(["--main-core", "1", "--run-dir"]).arg(&self.dir).arg("--db").arg(self.dir.join("conf.json"));
        cmd.args(["--file-prefix", &format!("ssit-{}", self.name)]).args(&self.extra);
        if !self.extra.iter().any(|e| e.starts_with("--metrics")) {
            cmd.arg("--no-metrics");
        }
        // A model of its own (none unless the test writes one), never the host's.
        if !self.extra.iter().any(|e| e == "--model") {
            cmd.arg("--model").arg(self.dir.join("bandwidth-model.json"));
        }
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().expect("start slaswitchd");
        self.child = Some(child);
        let t = Instant::now();
        while !self.socket().exists() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("slaswitchd exited ({status}): {}", self.log());
            }
            assert!(t.elapsed() < Duration::from_secs(30), "slaswitchd did not come up: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("slaswitchd.log")).unwrap_or_default()
    }

    /// Stops the daemon with SIGTERM and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if t.elapsed() > Duration::from_secs(20) {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The daemon's resident memory, KiB, and its open file descriptors.
    pub fn rss_kib_and_fds(&self) -> (u64, usize) {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
        (rss, fds)
    }

    /// Kills the daemon with SIGKILL and leaves it down.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a daemon that was crashed.
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// Runs the CLI; returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out: Output =
            Command::new(CLI).arg("--socket").arg(self.socket()).args(args).output().expect("run slaswitch");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs the CLI and requires success.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.cli(args);
        assert!(ok, "slaswitch {args:?} failed: {err}\n{}", self.log());
        out
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.ok(&a)).expect("JSON from slaswitch")
    }

    pub fn port_sock(&self, port: &str) -> String {
        self.dir.join(format!("{port}.sock")).display().to_string()
    }

    /// Cumulative stats of one port (`port-stats --json`).
    pub fn port(&self, name: &str) -> Value {
        self.json(&["port-stats", name])["ports"][0].clone()
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        // A daemon that had to be killed leaves its hugepage file behind; take it away.
        let prefix = format!("ssit-{}", self.name);
        slaswitch_dpdk::remove_hugepage_files(&prefix);
    }
}

/// A running slaswitch-tenant process.
pub struct Tenant {
    child: Option<Child>,
    pub out: PathBuf,
    stdout: PathBuf,
}

impl Tenant {
    /// `vms` are (name, socket); `mode_args` start with gen or sink. Writes JSON to `out`.
    pub fn start(
        dir: &Path,
        tag: &str,
        vms: &[(&str, &str)],
        ring: u32,
        duration_secs: f64,
        mode_args: &[&str],
    ) -> Tenant {
        let out = dir.join(format!("{tag}.json"));
        let stdout = dir.join(format!("{tag}.out"));
        let mut cmd = Command::new(TENANT);
        cmd.args([
            "--core",
            "1",
            "--ring",
            &ring.to_string(),
            "--duration",
            &duration_secs.to_string(),
            "--interval",
            "0.5",
            "--file-prefix",
            &format!("ssit-{tag}-{}", std::process::id()),
        ]);
        cmd.arg("--out").arg(&out);
        for (name, sock) in vms {
            cmd.arg("--vm").arg(format!("{name}={sock}"));
        }
        cmd.args(mode_args);
        let child = cmd
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start slaswitch-tenant");
        Tenant { child: Some(child), out, stdout }
    }

    /// Waits for the process to finish and returns its JSON output document.
    pub fn finish(mut self) -> Value {
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(
            status.success(),
            "slaswitch-tenant failed ({status}): {}",
            std::fs::read_to_string(&self.stdout).unwrap_or_default()
        );
        serde_json::from_str(&std::fs::read_to_string(&self.out).expect("tenant output")).expect("tenant JSON")
    }

    /// A sink VM on the switch's port `sink` counting what `senders` send, for `sink_secs`;
    /// a second later one VM process sending 20 kpps of 128-byte frames over 64 flows from each
    /// of the ports `senders`, for `gen_secs`. Returns (sink, generator).
    pub fn sink_and_senders(sw: &Switch, senders: &[&str], sink_secs: f64, gen_secs: f64) -> (Tenant, Tenant) {
        let mut sink_args = vec!["sink"];
        senders.iter().for_each(|s| sink_args.extend(["--source", s]));
        let sink = Tenant::start(&sw.dir, "sink", &[("sink", &sw.port_sock("sink"))], 4096, sink_secs, &sink_args);
        std::thread::sleep(std::time::Duration::from_secs(1));
        let socks: Vec<String> = senders.iter().map(|s| sw.port_sock(s)).collect();
        let vms: Vec<(&str, &str)> = senders.iter().zip(&socks).map(|(s, sock)| (*s, sock.as_str())).collect();
        let phases: Vec<String> = senders.iter().map(|s| format!("rate=20kpps,size=128,flows=64,vm={s}")).collect();
        let mut gen_args = vec!["gen"];
        phases.iter().for_each(|p| gen_args.extend(["--phase", p.as_str()]));
        (sink, Tenant::start(&sw.dir, "gen", &vms, 4096, gen_secs, &gen_args))
    }

    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The MAC address an emulated VM of this name uses.
pub fn mac(name: &str) -> String {
    slaswitch::tenant::frames::mac_text(slaswitch::tenant::frames::mac_for(name))
}

/// A sink's total of `field` over its records of `source`.
pub fn sink_total(sink_doc: &Value, source: &str, field: &str) -> u64 {
    sink_doc["summary"]["totals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["source"] == source)
        .map(|t| t[field].as_u64().unwrap())
        .sum()
}

/// Packets a sink received from `source` in total.
pub fn received_from(sink_doc: &Value, source: &str) -> u64 {
    sink_total(sink_doc, source, "packets")
}

/// Frames from `source` a sink received out of order.
pub fn reordered_from(sink_doc: &Value, source: &str) -> u64 {
    sink_total(sink_doc, source, "out_of_order")
}

pub fn sent_by(gen_doc: &Value, vm: &str) -> u64 {
    gen_doc["summary"]["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vm"] == vm)
        .map(|v| v["sent_packets"].as_u64().unwrap())
        .unwrap_or(0)
}

/// Most of a core the host may steal during a window a test judges a rate from.
pub const QUIET_STEAL_SHARE: f64 = 0.03;

/// Steal beyond which even the least noisy window measures the host, not the switch: a CI run
/// here once saw 80-95% on both cores for minutes, with the PMD forwarding nothing for whole
/// seconds. A test skips its rate judgement then (and says so) but keeps every other check.
pub const HOST_FROZEN_STEAL_SHARE: f64 = 0.20;

/// Whether a window with this much steal can say anything about a rate; prints why not.
pub fn rate_judgeable(steal: f64, what: &str) -> bool {
    let judgeable = steal <= HOST_FROZEN_STEAL_SHARE;
    if !judgeable {
        eprintln!("host steal {:.1}% in the least noisy window: {what} is not judged", steal * 100.0);
    }
    judgeable
}

/// Runs `measure` (one sampling window) up to `attempts` times, until the hypervisor stole at
/// most [`QUIET_STEAL_SHARE`] of either core during it (the PMD's core 0 or the VMs' core 1:
/// no scheduler holds a rate on a core it does not get). Returns the first quiet window's
/// result and the worst steal share seen in it; if no window was quiet, the least noisy one.
/// Each attempt is printed, so a failure shows what the host did.
pub fn quiet_window<T: std::fmt::Debug>(attempts: usize, mut measure: impl FnMut() -> T) -> (T, f64) {
    let mut best: Option<(T, f64)> = None;
    for attempt in 1..=attempts {
        let start = slaswitch_testbed::host_steal::snapshot(&[0, 1]);
        let result = measure();
        let steal = start.map(|s| s.worst_share_since(&[0, 1])).unwrap_or(0.0);
        eprintln!("window {attempt}/{attempts}: {result:?}, host steal {:.1}%", steal * 100.0);
        if best.as_ref().is_none_or(|(_, s)| steal < *s) {
            best = Some((result, steal));
        }
        if steal <= QUIET_STEAL_SHARE {
            break;
        }
    }
    best.unwrap()
}

/// The whole HTTP response of a switch's metrics endpoint at `addr`.
pub fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// Runs `slaswitch experiment run` on scenario `text` (written as `tag.toml` in a fresh folder)
/// with `args`, and requires it to succeed; returns (the folder, the run's output folder).
pub fn run_experiment(tag: &str, text: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("slaswitch-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join(format!("{tag}.toml"));
    std::fs::write(&scenario, text).unwrap();
    let out = dir.join("out");
    let run = Command::new(CLI)
        .args(["experiment", "run"])
        .arg(&scenario)
        .args(args)
        .args(["--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "experiment run failed: {}", String::from_utf8_lossy(&run.stderr));
    (dir, out)
}

/// (port busy cycles, PMD cycles) from `pmd-stats --json`.
pub fn cycles(stats: &Value, port: &str) -> (f64, f64) {
    let pmd = &stats["pmds"][0];
    let p = pmd["ports"].as_array().unwrap().iter().find(|p| p["name"] == port).unwrap();
    let busy: f64 =
        ["ingress_cycles", "classify_cycles", "egress_cycles"].iter().map(|k| p[*k].as_f64().unwrap()).sum();
    (busy, pmd["busy_cycles"].as_f64().unwrap() + pmd["idle_cycles"].as_f64().unwrap())
}

/// Share (percent) of the PMD's cycles `port` used between two snapshots.
pub fn share(a: &Value, b: &Value, port: &str) -> f64 {
    let ((p0, t0), (p1, t1)) = (cycles(a, port), cycles(b, port));
    100.0 * (p1 - p0) / (t1 - t0)
}

/// Shell commands run when dropped, so a test that fails still removes what it made
/// (namespaces, interfaces).
pub struct OnDrop(pub Vec<String>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        for cmd in &self.0 {
            let _ = sh(cmd);
        }
    }
}

/// Runs a shell command; returns (success, stdout and stderr).
pub fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}
