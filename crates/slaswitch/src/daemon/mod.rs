//! slaswitchd: the data plane plus its control plane. Commands arrive on a Unix socket one at a
//! time; each either succeeds whole (and is persisted) or changes nothing and says why.

pub mod config;
pub mod metrics;
pub mod rates;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use slaswitch_datapath::{Datapath, PortSpec, PortType};

use crate::control;
use config::{ConfigStore, SavedConfig};
use rates::Snapshot;

pub struct Daemon {
    dp: Datapath,
    store: ConfigStore,
    /// Ports that could not be brought back at start, kept so they are not lost from the file.
    unrestored_ports: Vec<(PortSpec, String)>,
    previous: Option<Snapshot>,
    latest: Option<Snapshot>,
    /// Where the bandwidth-CPU model is read from.
    model_path: PathBuf,
}

/// Reads a bandwidth-CPU model file; `None` when there is none.
pub fn load_model(path: &std::path::Path) -> Result<Option<slaswitch_qos::cpu::BandwidthModel>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a bandwidth-CPU model: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn str_arg<'a>(req: &'a Value, key: &str) -> Result<&'a str, String> {
    req[key].as_str().ok_or_else(|| format!("'{key}' is missing"))
}

fn options_arg(req: &Value) -> Result<BTreeMap<String, String>, String> {
    match &req["options"] {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))))
            .collect(),
        _ => Err("'options' must be an object of key: value".into()),
    }
}

impl Daemon {
    /// Starts the data plane and replays the saved configuration.
    pub fn start(mut dp: Datapath, store: ConfigStore, model_path: PathBuf) -> Result<Daemon, String> {
        let saved = store.load()?;
        match load_model(&model_path) {
            Ok(Some(model)) => dp.set_model(Some(model))?,
            Ok(None) => {}
            // A broken model must not keep the switch down: ports with purchases say why.
            Err(e) => tracing::warn!("{e}"),
        }
        let mut d = Daemon { dp, store, unrestored_ports: Vec::new(), previous: None, latest: None, model_path };
        for spec in saved.ports {
            if let Err(e) = d.dp.add_port(spec.clone()) {
                tracing::warn!("port {} not restored: {e}", spec.name);
                d.unrestored_ports.push((spec, e));
            }
        }
        for flow in saved.flows {
            if let Err(e) = d.dp.add_flows(std::slice::from_ref(&flow)) {
                tracing::warn!("flow not restored: {e}");
            }
        }
        Ok(d)
    }

    /// Ports that could not be restored get another try (after a new model, say).
    fn retry_unrestored(&mut self) {
        for (spec, err) in std::mem::take(&mut self.unrestored_ports) {
            if let Err(e) = self.dp.add_port(spec.clone()) {
                let _ = err;
                self.unrestored_ports.push((spec, e));
            }
        }
    }

    fn saved(&self) -> SavedConfig {
        let mut ports = self.dp.port_specs();
        ports.extend(self.unrestored_ports.iter().map(|(s, _)| s.clone()));
        SavedConfig { ports, flows: self.dp.flow_texts() }
    }

    fn persist(&self) -> Result<(), String> {
        self.store.save(&self.saved())
    }

    pub fn sample(&mut self) {
        let snap = Snapshot { at: Instant::now(), ports: self.dp.port_stats(), pmds: self.dp.pmd_stats() };
        self.previous = self.latest.replace(snap);
    }

    pub fn metrics(&self) -> String {
        metrics::render(&self.dp.port_stats(), &self.dp.pmd_stats(), &self.dp.dump_flows(), self.dp.tsc_hz())
    }

    /// Runs one command; the reply is `{"ok": ...}`.
    pub fn handle(&mut self, req: &Value) -> Value {
        match self.dispatch(req) {
            Ok(v) => control::ok(v),
            Err(e) => control::err(e),
        }
    }

    fn dispatch(&mut self, req: &Value) -> Result<Value, String> {
        let cmd = str_arg(req, "cmd")?;
        match cmd {
            "add-port" => {
                let name = str_arg(req, "name")?.to_string();
                let port_type = PortType::parse(str_arg(req, "type")?)?;
                let spec = PortSpec { name, port_type, number: 0, options: options_arg(req)? };
                let added = self.dp.add_port(spec)?;
                self.unrestored_ports.retain(|(s, _)| s.name != added.name);
                self.persist()?;
                Ok(json!({"name": added.name, "number": added.number, "socket": added.socket_path(&self.dp.settings().run_dir)}))
            }
            "del-port" => {
                let name = str_arg(req, "name")?;
                let before = self.unrestored_ports.len();
                self.unrestored_ports.retain(|(s, _)| s.name != name);
                if self.unrestored_ports.len() == before {
                    self.dp.del_port(name)?;
                }
                self.persist()?;
                Ok(json!({"deleted": name}))
            }
            "set-port" => {
                // {"name", "options"} sets one port; {"ports": [{"name", "options"}, ...]} sets
                // several as one step (Datapath::set_ports).
                let (changes, several) = match &req["ports"] {
                    Value::Array(ports) => (ports.iter().map(|p| Ok((str_arg(p, "name")?.to_string(), options_arg(p)?))).collect::<Result<Vec<_>, String>>()?, true),
                    Value::Null => (vec![(str_arg(req, "name")?.to_string(), options_arg(req)?)], false),
                    _ => return Err("'ports' must be a list of {\"name\", \"options\"}".into()),
                };
                let specs = self.dp.set_ports(&changes)?;
                self.persist()?;
                Ok(if several { serde_json::to_value(specs) } else { serde_json::to_value(&specs[0]) }.expect("specs serialise"))
            }
            "list-ports" => {
                let specs = self.dp.port_specs();
                let mut list: Vec<Value> = self
                    .dp
                    .port_stats()
                    .into_iter()
                    .map(|p| {
                        let spec = specs.iter().find(|s| s.name == p.name).cloned();
                        json!({"name": p.name, "number": p.number, "type": p.port_type, "pmd_core": p.pmd_core,
                               "link_up": p.link_up, "socket": p.socket, "options": spec.map(|s| s.options), "state": "up"})
                    })
                    .collect();
                for (s, e) in &self.unrestored_ports {
                    list.push(json!({"name": s.name, "number": s.number, "type": s.port_type.name(), "options": s.options, "state": format!("error: {e}")}));
                }
                Ok(Value::Array(list))
            }
            "add-flow" => {
                let flows: Vec<String> = match &req["flows"] {
                    Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
                    _ => vec![str_arg(req, "flow")?.to_string()],
                };
                let n = self.dp.add_flows(&flows)?;
                self.persist()?;
                Ok(json!({"added": n}))
            }
            "del-flows" => {
                let matcher = req["match"].as_str().filter(|m| !m.trim().is_empty());
                let strict = req["strict"].as_bool().unwrap_or(false);
                let n = self.dp.del_flows(matcher, strict)?;
                self.persist()?;
                Ok(json!({"deleted": n}))
            }
            "dump-flows" => Ok(serde_json::to_value(self.dp.dump_flows()).expect("flows serialise")),
            "port-stats" => {
                let all = self.dp.port_stats();
                let stats: Vec<_> = match req["name"].as_str() {
                    Some(n) => {
                        let s: Vec<_> = all.into_iter().filter(|p| p.name == n).collect();
                        if s.is_empty() {
                            return Err(format!("no port named '{n}'"));
                        }
                        s
                    }
                    None => all,
                };
                let rates = self.rates();
                Ok(json!({"ports": stats, "rates": rates.iter().flat_map(|p| p.ports.clone()).collect::<Vec<_>>()}))
            }
            "pmd-stats" => {
                let rates = self.rates();
                let pmds: Vec<Value> = self
                    .dp
                    .pmd_stats()
                    .into_iter()
                    .map(|pmd| {
                        let ports = self.dp.port_stats();
                        let ports: Vec<_> = ports.iter().filter(|p| p.pmd_core == pmd.core).collect();
                        let stage_sum: u64 = ports.iter().map(|p| p.rx.busy_cycles()).sum();
                        let rate = rates.iter().find(|r| r.core == pmd.core);
                        json!({
                            "core": pmd.core,
                            "busy_cycles": pmd.totals.busy_cycles,
                            "idle_cycles": pmd.totals.idle_cycles,
                            "stalled_cycles": pmd.totals.stalled_cycles,
                            "qos_owed": pmd.totals.qos_owed,
                            "qos_parked": pmd.totals.qos_parked,
                            "busy_pct_interval": rate.map(|r| r.busy_pct),
                            "drift_factor": pmd.drift_factor,
                            "probe": pmd.probe,
                            "stage_cycles_sum": stage_sum,
                            "ports": ports.iter().map(|p| json!({
                                "name": p.name,
                                "rx_packets": p.rx.rx_packets,
                                "rx_bytes": p.rx.rx_bytes,
                                "batches": p.rx.batches,
                                "empty_polls": p.rx.empty_polls,
                                "policer_drops": p.rx.policer_drops,
                                "ingress_cycles": p.rx.ingress_cycles,
                                "classify_cycles": p.rx.classify_cycles,
                                "egress_cycles": p.rx.egress_cycles,
                                "idle_cycles": p.rx.idle_cycles,
                                "emc_hits": p.rx.emc_hits,
                                "emc_misses": p.rx.emc_misses,
                                "interval": rate.and_then(|r| r.ports.iter().find(|x| x.name == p.name)),
                            })).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                Ok(json!({"tsc_hz": self.dp.tsc_hz(), "interval_secs": self.interval_secs(), "pmds": pmds}))
            }
            "qos-show" => {
                // What a port is given and why (seed 000 Sec. III-IV): its purchase and profile,
                // the model entry and coefficients, the resulting cycles against its PMD core,
                // the scheduler's view and what it used; and the NIC fallback (Sec. VII).
                let all = self.dp.port_stats();
                let wanted = req["name"].as_str();
                if let Some(n) = wanted {
                    if !all.iter().any(|p| p.name == n) {
                        return Err(format!("no port named '{n}'"));
                    }
                }
                let hz = self.dp.tsc_hz() as f64;
                let rates = self.rates();
                let pmds = self.dp.pmd_stats();
                let ports: Vec<Value> = all
                    .iter()
                    .filter(|p| wanted.is_none_or(|n| n == p.name))
                    .map(|p| {
                        let on_pmd: u64 = all.iter().filter(|o| o.pmd_core == p.pmd_core).map(|o| o.cycles_per_sec).sum();
                        let used = rates.iter().find(|r| r.core == p.pmd_core).and_then(|r| r.ports.iter().find(|x| x.name == p.name));
                        let opt = |k: &str| p.options.get(k).cloned();
                        let drift = p.drift_factor.unwrap_or_else(|| pmds.iter().find(|d| d.core == p.pmd_core).map_or(1.0, |d| d.drift_factor));
                        let follows = p.allocation.is_some() && opt("drift_compensation").as_deref() != Some("false");
                        json!({
                            "name": p.name,
                            "pmd_core": p.pmd_core,
                            "cycles_per_sec": p.cycles_per_sec,
                            "drift_factor": if follows { Some(drift) } else { None },
                            "effective_cycles_per_sec": if follows { (p.cycles_per_sec as f64 * drift).round() as u64 } else { p.cycles_per_sec },
                            "cycles_from": if opt("cycles_per_sec").is_some_and(|c| c != "0") { "cycles_per_sec" } else if p.allocation.is_some() { "model" } else { "none" },
                            "mode": p.cpu_mode,
                            "weight": opt("weight").unwrap_or_else(|| "1".into()),
                            "priority": p.priority,
                            "bandwidth_bps": p.bandwidth_bps,
                            "allocation": p.allocation,
                            "allocated_pct_of_core": 100.0 * p.cycles_per_sec as f64 / hz,
                            "pmd_allocated_cycles_per_sec": on_pmd,
                            "pmd_capacity_cycles_per_sec": hz as u64,
                            "tokens_cycles": p.cpu_qos.tokens_cycles,
                            "current_class": p.cpu_qos.class,
                            "place": p.cpu_qos.place,
                            "used_pct_of_core": used.map(|u| u.pmd_share_pct),
                            "rx_mbps": used.map(|u| u.rx_mbps),
                            "link_rate_bps": p.link_rate_bps,
                            "link_queued": p.link_queued,
                            "uplink": p.uplink,
                            "fallback_drops": p.rx.fallback_drops,
                            "ingress_policing_rate": opt("ingress_policing_rate"),
                            "ingress_policing_kpkts_rate": opt("ingress_policing_kpkts_rate"),
                        })
                    })
                    .collect();
                let model = self.dp.model().map(|m| json!({"path": self.model_path, "machine": m.machine, "measured_unix_secs": m.measured_unix_secs, "tsc_hz": m.tsc_hz}));
                let bucket_us = self.dp.settings().c2tb_bucket_us;
                Ok(json!({"tsc_hz": hz as u64, "c2tb_bucket_us": bucket_us, "ports": ports, "fallback": self.dp.fallback_status(), "model": model}))
            }
            "load-model" => {
                // Reads a bandwidth-CPU model (`slaswitch calibrate` writes one) and re-plans every
                // port with it; refused whole if a purchase would no longer fit. Once taken it is
                // copied to the daemon's model file, so a restart keeps it.
                let path = req["path"].as_str().map(PathBuf::from).unwrap_or_else(|| self.model_path.clone());
                let model = load_model(&path)?.ok_or_else(|| format!("{}: no such file (run slaswitch calibrate)", path.display()))?;
                let text = serde_json::to_string_pretty(&model).expect("model serialises");
                self.dp.set_model(Some(model))?;
                if path != self.model_path {
                    let tmp = self.model_path.with_extension("tmp");
                    if let Some(dir) = self.model_path.parent() {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    std::fs::write(&tmp, text)
                        .and_then(|()| std::fs::rename(&tmp, &self.model_path))
                        .map_err(|e| format!("the model is in use but could not be saved to {}: {e}", self.model_path.display()))?;
                }
                self.retry_unrestored();
                self.persist()?;
                Ok(json!({"loaded": path, "saved_as": self.model_path}))
            }
            "model-show" => match self.dp.model() {
                Some(m) => Ok(json!({"path": self.model_path, "model": m})),
                None => Err(format!("no bandwidth-CPU model loaded ({} does not exist: run slaswitch calibrate)", self.model_path.display())),
            },
            "show" => Ok(serde_json::to_value(self.saved()).expect("config serialises")),
            _ => Err(format!(
                "unknown command '{cmd}' (add-port, del-port, set-port, list-ports, add-flow, del-flows, dump-flows, port-stats, pmd-stats, qos-show, load-model, model-show, show)"
            )),
        }
    }

    fn interval_secs(&self) -> Option<f64> {
        match (&self.previous, &self.latest) {
            (Some(a), Some(b)) => Some(b.at.duration_since(a.at).as_secs_f64()),
            _ => None,
        }
    }

    fn rates(&self) -> Vec<rates::PmdRates> {
        match (&self.previous, &self.latest) {
            (Some(a), Some(b)) => rates::rates(a, b),
            _ => Vec::new(),
        }
    }

    pub fn shutdown(self) {
        self.dp.shutdown();
    }
}

/// Set by SIGINT/SIGTERM.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Serves the control socket, the sampler and (optionally) metrics until a signal arrives.
pub fn serve(daemon: Daemon, socket: PathBuf, metrics_addr: Option<String>) -> Result<(), String> {
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let daemon = Arc::new(Mutex::new(daemon));

    let sampler = {
        let daemon = daemon.clone();
        std::thread::spawn(move || {
            while !STOP.load(Ordering::SeqCst) {
                daemon.lock().expect("daemon lock").sample();
                for _ in 0..10 {
                    if STOP.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let metrics = match metrics_addr {
        None => None,
        Some(addr) => {
            let l = TcpListener::bind(&addr).map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            let daemon = daemon.clone();
            Some(std::thread::spawn(move || {
                while !STOP.load(Ordering::SeqCst) {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false).ok();
                            s.set_read_timeout(Some(Duration::from_secs(2))).ok();
                            let mut buf = [0u8; 1024];
                            let _ = s.read(&mut buf);
                            let body = daemon.lock().expect("daemon lock").metrics();
                            let _ = write!(s, "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            }))
        }
    };

    while !STOP.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).ok();
                stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
                let mut line = String::new();
                let mut reader = BufReader::new(&stream);
                let reply = match reader.read_line(&mut line) {
                    Ok(_) => match serde_json::from_str::<Value>(&line) {
                        Ok(req) => daemon.lock().expect("daemon lock").handle(&req),
                        Err(e) => control::err(format!("request is not JSON: {e}")),
                    },
                    Err(e) => control::err(format!("cannot read the request: {e}")),
                };
                let mut w = &stream;
                let _ = writeln!(w, "{reply}");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let _ = sampler.join();
    if let Some(m) = metrics {
        let _ = m.join();
    }
    let _ = std::fs::remove_file(&socket);
    match Arc::try_unwrap(daemon) {
        Ok(m) => m.into_inner().expect("daemon lock").shutdown(),
        Err(_) => tracing::warn!("control state still in use at exit"),
    }
    Ok(())
}
