//! SoftBW's system across hosts (seed 003 Sec. 4): a private etcd speaking only TLS (a CA made
//! for it, client certificates checked), `slaswitch-master` and three
//! `slaswitchd`, each with its own metrics port, paced uplink into a namespace, and VMs.
//! Purchases reach the right switch (by host, or placed by the master's failure model), a host
//! over-commits within the target and the next VM goes elsewhere, a purchase the switch refuses
//! is reported and changes nothing, a dynamic guarantee is kept current, a crashed switch loses its lease and comes back
//! in the same state, and the bill matches the data plane's counters through a master crash, an
//! etcd outage and a duplicated report.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use slaswitch_cluster::etcd_server::EtcdServer;

/// TLS to the private etcd: the CA, this client's certificate and key, as the options of
/// `slaswitchd` and `slaswitch-master` name them.
fn tls_options(etcd: &EtcdServer) -> Vec<(&'static str, String)> {
    let tls = etcd.tls.as_ref().expect("etcd with TLS");
    let (cert, key) = tls.identity.as_ref().expect("a client certificate");
    let path = |p: &std::path::Path| p.display().to_string();
    vec![("--etcd-ca", path(&tls.ca)), ("--etcd-cert", path(cert)), ("--etcd-key", path(key))]
}

/// `slaswitch-master serve`, killed on drop; it and every verb speak TLS to etcd.
struct MasterProc {
    child: Option<Child>,
    etcd: String,
    tls: Vec<(&'static str, String)>,
    db: PathBuf,
    log: PathBuf,
}

impl MasterProc {
    fn start(etcd: &EtcdServer, dir: &std::path::Path) -> MasterProc {
        let mut m = MasterProc {
            child: None,
            etcd: etcd.url(),
            tls: tls_options(etcd),
            db: dir.join("billing.sqlite"),
            log: dir.join("master.log"),
        };
        m.spawn();
        m
    }
    fn tls_args(&self) -> Vec<String> {
        self.tls.iter().flat_map(|(k, v)| [k.to_string(), v.clone()]).collect()
    }
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(master())
            .args(["serve", "--etcd", &self.etcd, "--link-capacity", "1G", "--prior-utilization", "0.3", "--db"])
            .arg(&self.db)
            .args(self.tls_args())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start slaswitch-master");
        self.child = Some(child);
    }
    fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    /// Runs a verb; returns (success, stdout, stderr).
    fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(master())
            .args(args)
            .args(["--etcd", &self.etcd])
            .args(self.tls_args())
            .output()
            .expect("run slaswitch-master");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
    }
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.cli(args);
        assert!(ok, "slaswitch-master {args:?}: {err}\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        out
    }
    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(&[args, &["--json"]].concat())).expect("JSON")
    }
    fn vm(&self, vm: &str) -> Value {
        let db = self.db.display().to_string();
        let all = self.json(&["vms", "--db", &db]);
        all.as_array().unwrap().iter().find(|v| v["vm"] == vm).cloned().unwrap_or(Value::Null)
    }
    fn host_alive(&self, host: &str) -> bool {
        self.json(&["hosts"]).as_array().unwrap().iter().any(|h| h["host"] == host && h["alive"] == true)
    }
}

impl Drop for MasterProc {
    fn drop(&mut self) {
        self.crash();
    }
}

/// The switches' uplink namespaces and veth pairs, removed even if the test fails.
struct Uplinks(Vec<(String, String)>);

impl Drop for Uplinks {
    fn drop(&mut self) {
        for (ns, link) in &self.0 {
            let _ = sh(&format!("ip link del {link}; ip netns del {ns}"));
        }
    }
}

/// etcdctl's TLS options for the private etcd.
fn etcdctl_tls(etcd: &EtcdServer) -> Vec<String> {
    tls_options(etcd)
        .into_iter()
        .map(|(k, v)| format!("--{}={v}", k.trim_start_matches("--etcd-").replace("ca", "cacert")))
        .collect()
}

fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(secs), "not within {secs} s: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn state(v: &Value) -> String {
    v["status"]["state"].as_str().unwrap_or("").to_string()
}

fn port_option(sw: &Switch, port: &str, key: &str) -> String {
    let show = sw.json(&["show"]);
    let p = show["ports"].as_array().unwrap().iter().find(|p| p["name"] == port).unwrap().clone();
    p["options"][key].as_str().unwrap_or("").to_string()
}

/// Wire bytes a VM has sent on its switch's uplink.
fn sent_on_uplink(sw: &Switch, vm: &str) -> u64 {
    let link = sw.json(&["link-show", "up"]);
    let row = link["vms"].as_array().unwrap().iter().find(|v| v["name"] == vm).unwrap().clone();
    row["out"]["sent_wire_bytes"].as_u64().unwrap()
}

fn billed_bytes(m: &MasterProc, tenant: &str, vm: &str) -> u64 {
    let db = m.db.display().to_string();
    let bill = m.json(&["bill", "--tenant", tenant, "--from", "1h", "--db", &db]);
    bill["vms"].as_array().unwrap().iter().find(|l| l["vm"] == vm).map_or(0, |l| l["bytes"].as_u64().unwrap())
}

/// Over-commitment by the failure model (seed 003 Sec. 2.2): VMs bought without a host go to
/// the first host whose failure probability stays within the target (5%; every VM at the 30%
/// prior here). h1's guarantees pass its link, its switch is granted that much, and the first VM
/// that would take h1 over the target goes elsewhere, naming h1's figures.
fn overcommit_by_the_failure_model(master: &MasterProc, sw1: &Switch) {
    let mut on_h1 = Vec::new();
    let mut elsewhere = Value::Null;
    for i in 1..=8 {
        let vm = format!("o{i}");
        let out = master.json(&["buy", &vm, "--tenant", "gamma", "--strict", "350M", "--cycles", "bandwidth_bps=350M"]);
        if out["host"] == "h1" {
            on_h1.push(vm);
        } else {
            elsewhere = out;
            break;
        }
    }
    assert!(!elsewhere.is_null(), "h1 took every VM: {on_h1:?}");
    let last = master.vm(on_h1.last().unwrap());
    let figures = &last["admission"]["figures"];
    let ratio = figures["committed_ratio"].as_f64().unwrap();
    assert!(ratio > 1.0, "h1 was never over-committed: {last}");
    assert!(figures["failure_probability"].as_f64().unwrap() <= 0.05, "{last}");
    let passed = elsewhere["admission"]["passed_over"][0].as_str().unwrap_or("");
    assert!(
        passed.starts_with("host h1: failure probability would be") && passed.contains("target 0.05"),
        "{elsewhere}"
    );
    // Asked for on h1 by name, it is refused with the figures, and nothing changes.
    let (ok, _, err) = master.cli(&["buy", "x9", "--tenant", "gamma", "--host", "h1", "--strict", "350M"]);
    assert!(!ok && err.contains("refused: host h1: failure probability would be"), "{err}");
    assert!(master.vm("x9").is_null());
    // The switch enforces what was sold: its own admission takes cycle purchases beyond the
    // link's rate, up to the ratio the master granted.
    for vm in &on_h1 {
        sw1.ok(&["add-port", vm, "vhost-user"]);
    }
    wait_until("h1 applies its over-committed purchases", 20, || {
        on_h1.iter().all(|vm| state(&master.vm(vm)) == "applied")
    });
    let granted: f64 = port_option(sw1, "up", "link_overcommit").parse().unwrap();
    assert!((granted - ratio).abs() < 0.01, "the uplink's link_overcommit is {granted}, the master granted {ratio}");
    for vm in &on_h1 {
        assert_eq!(port_option(sw1, vm, "bandwidth_bps"), "350M");
    }
    wait_until("hosts shows h1's committed ratio and failure probability", 10, || {
        let hosts = master.json(&["hosts"]);
        let h1 = hosts.as_array().unwrap().iter().find(|h| h["host"] == "h1").cloned().unwrap();
        (h1["load"]["figures"]["committed_ratio"].as_f64().unwrap_or(0.0) - ratio).abs() < 1e-3
            && h1["load"]["figures"]["failure_probability"].as_f64().is_some_and(|p| p > 0.0 && p <= 0.05)
    });
    for vm in &on_h1 {
        master.ok(&["release", vm]);
    }
    let moved = elsewhere["vm"].as_str().unwrap();
    master.ok(&["release", moved]);
}

#[test]
fn a_fleet_enforces_what_the_master_sold_and_bills_what_the_data_plane_counted() {
    let _g = serial();
    if !can_run_with(&[Component::Etcd, Component::Namespaces]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("slaswitch-it-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // etcd serves TLS only and checks client certificates (a CA made for it).
    let mut etcd = EtcdServer::start_tls(&dir.join("etcd")).expect("etcd");
    let url = etcd.url();
    let tls: Vec<String> = tls_options(&etcd).into_iter().flat_map(|(k, v)| [k.to_string(), v]).collect();
    // A client that trusts etcd's CA but has no certificate of its own is refused.
    let ca = etcd.tls.as_ref().unwrap().ca.display().to_string();
    let anonymous = Command::new(master()).args(["hosts", "--etcd", &url, "--etcd-ca", &ca]).output().unwrap();
    assert!(!anonymous.status.success(), "a client without a certificate reached etcd");
    let mut master = MasterProc::start(&etcd, &dir);
    // Each switch: its own file prefix, run directory, metrics port, and an uplink into a
    // namespace of its own (af_packet on one end of a veth pair, the other end in the namespace).
    let tag = std::process::id() % 10000;
    let mut uplinks = Uplinks(Vec::new());
    let sws: Vec<Switch> = (1..=3)
        .map(|i| {
            let metrics = format!("127.0.0.1:{}", 19480 + i);
            let host = format!("h{i}");
            let mut args =
                vec!["--etcd", &url, "--host-id", &host, "--lease-secs", "2", "--mbufs", "8191", "--metrics", &metrics];
            args.extend(tls.iter().map(String::as_str));
            // h1 prices cycle purchases with a bandwidth-CPU model; h2 and h3 have none.
            let model = dir.join("bandwidth-model.json");
            let model_arg = model.display().to_string();
            if i == 1 {
                std::fs::create_dir_all(&dir).unwrap();
                let text = serde_json::to_string(&slaswitch_config::allocation::example_model()).unwrap();
                std::fs::write(&model, text).unwrap();
                args.extend(["--model", &model_arg]);
            }
            let sw = Switch::start(&format!("cl{host}"), &args);
            let (ns, inside, outside) = (format!("scl{i}{tag}"), format!("cn{i}{tag}"), format!("cu{i}{tag}"));
            uplinks.0.push((ns.clone(), outside.clone()));
            let (ok, out) = sh(&format!(
                "ip link add {outside} type veth peer name {inside} && ip link set {outside} up && ip netns add {ns} \
                 && ip link set {inside} netns {ns} && ip -n {ns} link set {inside} up \
                 && ethtool -K {outside} tso off gso off gro off tx off rx off >/dev/null"
            ));
            assert!(ok, "uplink namespace: {out}");
            let iface = format!("iface={outside}");
            sw.ok(&[
                "add-port",
                "up",
                "af-packet",
                &iface,
                "link_rate_bps=1G",
                "uplink=true",
                "egress_scheduler=softbw",
            ]);
            sw
        })
        .collect();
    let [sw1, sw2, mut sw3]: [Switch; 3] = sws.try_into().ok().unwrap();
    // Each agent announces its uplink's rate (the port came after it connected): C in the price
    // functions for its VMs.
    wait_until("every host announces its 1G uplink", 15, || {
        let hosts = master.json(&["hosts"]);
        hosts.as_array().unwrap().iter().filter(|h| h["uplink_bps"].as_u64() == Some(1_000_000_000)).count() == 3
    });
    sw2.ok(&["add-port", "b1", "vhost-user"]);
    sw3.ok(&["add-port", "c1", "vhost-user"]);
    sw3.ok(&["add-port", "c2", "vhost-user"]);

    // Bad purchases are refused before any host sees them.
    let (ok, _, err) = master.cli(&["buy", "x1", "--tenant", "acme", "--strict", "fast"]);
    assert!(!ok && err.contains("link_guarantee=strict:fast"), "{err}");
    let (ok, _, err) = master.cli(&["buy", "x1", "--tenant", "acme", "--fairness", "--cycles", "pmd=1"]);
    assert!(!ok && err.contains("pmd is not a purchase option"), "{err}");
    // a1 is bought before its VM exists anywhere: the master places it (Sec. 4.1), on the first
    // live host its failure model allows.
    let a1 = master.ok(&["buy", "a1", "--tenant", "acme", "--strict", "300M"]);
    assert!(a1.contains("placed on h1: committed ratio 0.30, failure probability 0.0000"), "{a1}");
    master.ok(&["buy", "b1", "--tenant", "acme", "--host", "h2", "--dynamic", "200M,30"]);
    master.ok(&["buy", "c1", "--tenant", "beta", "--host", "h3", "--strict", "400M"]);
    // No bandwidth-CPU model on h3: the switch refuses a cycle purchase it cannot price.
    master.ok(&["buy", "c2", "--tenant", "beta", "--host", "h3", "--strict", "100M", "--cycles", "bandwidth_bps=500M"]);
    let (ok, _, err) = master.cli(&["buy", "c1", "--tenant", "acme", "--fairness"]);
    assert!(!ok && err.contains("already bought by tenant beta"), "{err}");
    assert!(master.vm("x1").is_null());
    assert_eq!(master.vm("a1")["host"], "h1", "placed before its port exists");
    sw1.ok(&["add-port", "a1", "vhost-user"]);

    wait_until("every purchase answered", 20, || {
        ["a1", "b1", "c1", "c2"].iter().all(|vm| ["applied", "refused"].contains(&state(&master.vm(vm)).as_str()))
    });
    assert_eq!(master.vm("a1")["host"], "h1");
    assert_eq!(state(&master.vm("a1")), "applied");
    assert_eq!(port_option(&sw1, "a1", "link_guarantee"), "strict:300000000");
    assert_eq!(port_option(&sw3, "c1", "link_guarantee"), "strict:400000000");
    let c2 = master.vm("c2");
    assert_eq!(state(&c2), "refused", "{c2}");
    assert!(c2["status"]["reason"].as_str().unwrap().contains("bandwidth_bps"), "{c2}");
    assert_eq!(port_option(&sw3, "c2", "bandwidth_bps"), "", "a refused purchase was half-applied");
    let hosts = master.json(&["hosts"]);
    let h3 = hosts.as_array().unwrap().iter().find(|h| h["host"] == "h3").unwrap().clone();
    assert_eq!((h3["applied"].as_u64(), h3["refused"].as_u64()), (Some(1), Some(1)), "{hosts}");

    // Purchase to enforcement on one host, through the data plane's own set-port path.
    let lat = master.json(&["latency", "a1", "--rounds", "5"]);
    assert_eq!(lat["applied"]["count"], 5, "{lat}");
    eprintln!("purchase to enforcement, 5 changes: {lat}");
    wait_until("a1 back at its own guarantee", 10, || port_option(&sw1, "a1", "link_guarantee") == "strict:300000000");

    // The dynamic guarantee is rewritten every cycle as what is left of it.
    wait_until("b1's dynamic guarantee counts down", 10, || {
        let g = port_option(&sw2, "b1", "link_guarantee");
        let secs: f64 = g.rsplit(',').next().unwrap().parse().unwrap_or(30.0);
        g.starts_with("dynamic:") && secs < 28.5
    });

    overcommit_by_the_failure_model(&master, &sw1);

    // A crashed switch loses its lease, and comes back enforcing the same.
    sw3.crash();
    wait_until("h3 dead to the master", 10, || !master.host_alive("h3"));
    sw3.start_again();
    wait_until("h3 back with the same answers", 20, || {
        master.host_alive("h3") && state(&master.vm("c1")) == "applied" && state(&master.vm("c2")) == "refused"
    });
    assert_eq!(port_option(&sw3, "c1", "link_guarantee"), "strict:400000000");

    // Traffic through a1 while the master crashes and etcd goes away and comes back.
    let gen = Tenant::start(
        &sw1.dir,
        "cgen",
        &[("a1", &sw1.port_sock("a1"))],
        1024,
        14.0,
        &["gen", "--phase", "size=1000,rate=100mbps"],
    );
    std::thread::sleep(Duration::from_secs(3));
    master.crash();
    std::thread::sleep(Duration::from_secs(3));
    master.spawn();
    std::thread::sleep(Duration::from_secs(2));
    etcd.kill();
    std::thread::sleep(Duration::from_secs(3));
    // Without etcd the switch keeps what it last had.
    assert_eq!(port_option(&sw1, "a1", "link_guarantee"), "strict:300000000");
    etcd.restart().expect("etcd back");
    gen.finish();
    let counted = sent_on_uplink(&sw1, "a1");
    assert!(counted > 50_000_000, "a1 sent only {counted} bytes");
    wait_until("every byte a1 sent is billed", 30, || billed_bytes(&master, "acme", "a1") >= counted);
    std::thread::sleep(Duration::from_secs(2));
    let billed = billed_bytes(&master, "acme", "a1");
    let error = (billed as f64 - counted as f64).abs() / counted as f64;
    eprintln!("billing: {billed} bytes billed, {counted} counted by the data plane, error {:.6}%", 100.0 * error);
    assert!(error <= 0.001, "billed {billed} bytes, the data plane counted {counted}");

    // A report delivered twice is billed once.
    let csv =
        master.ok(&["bill", "--tenant", "acme", "--from", "1h", "--csv", "--db", &master.db.display().to_string()]);
    let line = csv.lines().find(|l| l.starts_with("a1,") && !l.contains(",0,strict")).expect("a billed a1 cycle");
    let end_ms: u64 = line.split(',').nth(1).unwrap().parse().unwrap();
    let report = serde_json::json!({"host": "h1", "cycle": end_ms / 1000, "cycle_ms": 1000, "secs": 1.0,
        "read_unix_ms": end_ms, "vms": [{"vm": "a1", "bytes": 123456789u64, "guarantee_bps": 0}]});
    let key = format!("/slaswitch/usage/h1/{:012}", end_ms / 1000);
    let ctl_tls = etcdctl_tls(&etcd);
    let put = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(&ctl_tls)
        .args(["--endpoints", &url, "put", &key, &report.to_string()])
        .output()
        .expect("etcdctl");
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    wait_until("the duplicate consumed", 10, || {
        let got = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(&ctl_tls)
            .args(["--endpoints", &url, "get", &key])
            .output()
            .unwrap();
        got.stdout.is_empty()
    });
    assert_eq!(billed_bytes(&master, "acme", "a1"), billed, "a duplicated report was billed again");

    // Each switch serves its own metrics, on its own port.
    for (i, vm) in [(1, "a1"), (2, "b1"), (3, "c1")] {
        let body = metrics(&format!("127.0.0.1:{}", 19480 + i));
        assert!(body.contains(&format!("slaswitch_port_rx_packets_total{{port=\"{vm}\"}}")), "h{i}: {body}");
    }

    // The bill: a table, CSV, and a plot.
    let plot = dir.join("acme.png");
    let db = master.db.display().to_string();
    let table =
        master.ok(&["bill", "--tenant", "acme", "--from", "1h", "--db", &db, "--plot", &plot.display().to_string()]);
    // The guarantee as the switch takes it: parsed once when bought, whatever its spelling.
    assert!(table.contains("a1") && table.contains("strict:300000000"), "{table}");
    assert!(std::fs::metadata(&plot).unwrap().len() > 1000);
    let a1 = master.vm("a1");
    assert!(a1["latest"]["rate_bps"].is_number(), "{a1}");

    // Released: the port goes back to the switch's default.
    master.ok(&["release", "a1"]);
    wait_until("a1 released on h1", 10, || port_option(&sw1, "a1", "link_guarantee") == "fairness");
    drop(master);
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}
