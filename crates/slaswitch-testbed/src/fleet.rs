//! SoftBW's system around the switch under test (seed 003 Sec. 4): a private etcd, a master
//! billing into SQLite, and slaswitchd's own agent. With `[cluster]` the VMs' link guarantees
//! are sold by the master (`slaswitch-master buy`) instead of set on their ports, so the run
//! measures what a tenant bought end to end, and its bill is kept with the results.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde_json::{json, Value};
use slaswitch_cluster::etcd_server::EtcdServer;

use crate::scenario::Step;

/// The host id the switch's agent announces.
pub const HOST_ID: &str = "testbed";

/// etcd and the master, for one run; both stop when it is dropped.
pub struct Fleet {
    etcd: EtcdServer,
    master: Child,
    tools: PathBuf,
    db: PathBuf,
    tenant: String,
}

impl Fleet {
    /// Starts etcd and `slaswitch-master serve` in `dir`.
    pub fn start(dir: &Path, tools: &Path, tenant: &str) -> anyhow::Result<Fleet> {
        let etcd = EtcdServer::start(&dir.join("etcd")).map_err(|e| anyhow!("etcd: {e}"))?;
        let db = dir.join("billing.sqlite");
        let log = std::fs::File::create(dir.join("master.log"))?;
        let master = Command::new(tools.join("slaswitch-master"))
            .args(["--etcd", &etcd.url(), "serve", "--db"])
            .arg(&db)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow!("cannot start slaswitch-master: {e}"))?;
        Ok(Fleet { etcd, master, tools: tools.to_path_buf(), db, tenant: tenant.to_string() })
    }

    /// slaswitchd's options that make its agent a member.
    pub fn daemon_args(&self) -> Vec<String> {
        vec!["--etcd".into(), self.etcd.url(), "--host-id".into(), HOST_ID.into()]
    }

    fn master(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.tools.join("slaswitch-master"))
            .args(["--etcd", &self.etcd.url()])
            .args(args)
            .output()
            .map_err(|e| anyhow!("slaswitch-master: {e}"))?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => {
                Err(anyhow!("slaswitch-master {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
            }
        }
    }

    /// Sells every VM of `step` its `link_guarantee` on this host and waits until the switch
    /// applies each (at most 20 s).
    pub fn sell(&self, step: &Step) -> anyhow::Result<()> {
        self.wait_for_agent()?;
        let mut sold = Vec::new();
        for vm in &step.vms {
            let Some(g) = &vm.qos.link_guarantee else { continue };
            let mut args = vec!["buy", &vm.name, "--tenant", &self.tenant, "--host", HOST_ID];
            args.extend(guarantee_args(g));
            self.master(&args)?;
            sold.push(vm.name.clone());
        }
        let db = self.db.display().to_string();
        let t = Instant::now();
        loop {
            let views: Value = serde_json::from_str(&self.master(&["--json", "vms", "--db", &db])?)?;
            let applied = |vm: &String| {
                views
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| v["vm"] == vm.as_str() && v["status"]["state"] == "applied")
            };
            let waiting: Vec<&String> = sold.iter().filter(|vm| !applied(vm)).collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(20) {
                return Err(anyhow!("the switch did not apply the purchases of {waiting:?} within 20 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (at most 20 s) until the switch's agent holds its lease.
    fn wait_for_agent(&self) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            let hosts: Value = serde_json::from_str(&self.master(&["--json", "hosts"])?)?;
            if hosts.as_array().into_iter().flatten().any(|h| h["host"] == HOST_ID && h["alive"] == true) {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(20) {
                return Err(anyhow!("slaswitchd's agent did not join etcd within 20 s (see slaswitchd.log)"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every record billed to the tenant since `from_unix_secs`, once the last cycle's
    /// reports are in (the agent reports each second; the master bills within one).
    pub fn bill(&self, from_unix_secs: f64) -> anyhow::Result<Value> {
        std::thread::sleep(Duration::from_secs(3));
        let from = format!("{}", from_unix_secs.floor() as u64);
        let db = self.db.display().to_string();
        let text = self.master(&["bill", "--tenant", &self.tenant, "--from", &from, "--csv", "--db", &db])?;
        let mut rows = Vec::new();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let headers = reader.headers()?.clone();
        for row in reader.records() {
            let row = row?;
            let cells = headers.iter().zip(row.iter()).map(|(h, v)| (h.to_string(), cell(v)));
            rows.push(Value::Object(cells.collect()));
        }
        Ok(json!(rows))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

/// `strict:R`, `dynamic:S,T` or `fairness` as `slaswitch-master buy`'s options.
fn guarantee_args(g: &str) -> Vec<&str> {
    match g.split_once(':') {
        Some(("strict", r)) => vec!["--strict", r],
        Some(("dynamic", st)) => vec!["--dynamic", st],
        _ => vec!["--fairness"],
    }
}

/// A CSV cell as JSON: a number when it is one.
fn cell(v: &str) -> Value {
    v.parse::<u64>().map(Value::from).or_else(|_| v.parse::<f64>().map(Value::from)).unwrap_or_else(|_| json!(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_guarantee_becomes_the_buy_options_that_sell_it() {
        assert_eq!(guarantee_args("strict:478M"), ["--strict", "478M"]);
        assert_eq!(guarantee_args("dynamic:500M,10"), ["--dynamic", "500M,10"]);
        assert_eq!(guarantee_args("fairness"), ["--fairness"]);
        assert_eq!(cell("12"), json!(12));
        assert_eq!(cell("0.5"), json!(0.5));
        assert_eq!(cell("dynamic:1,2"), json!("dynamic:1,2"));
    }
}
