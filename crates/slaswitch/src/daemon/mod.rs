//! slaswitchd: the data plane plus its control plane. Commands arrive on a Unix socket one at a
//! time; each either succeeds whole (and is persisted) or changes nothing and says why.

pub mod access;
pub mod cluster_agent;
pub mod config;
mod link_view;
pub mod metrics;
mod rates;
mod views;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use slaswitch_config::{PortSpec, PortType};
use slaswitch_datapath::Datapath;

use crate::protocol::{parse_request, Options, PortChange, Reply, Request};
use config::{ConfigStore, SavedConfig};
use rates::Snapshot;

/// The data plane with its control state: persistence, the model file, the last rates.
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

/// A view as the reply's result.
fn to_json(view: impl serde::Serialize) -> Result<Value, String> {
    serde_json::to_value(view).map_err(|e| format!("cannot encode the reply: {e}"))
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
        for (name, weight) in saved.tenants {
            if let Err(e) = d.dp.set_tenant(&name, weight) {
                tracing::warn!("tenant {name} not restored: {e}");
            }
        }
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
        let mut tenants = self.dp.tenants();
        // The default tenant at its default weight is not configuration.
        if tenants.get(slaswitch_config::link_policy::DEFAULT_TENANT) == Some(&1) {
            tenants.remove(slaswitch_config::link_policy::DEFAULT_TENANT);
        }
        SavedConfig { tenants, ports, flows: self.dp.flow_texts() }
    }

    fn persist(&self) -> Result<(), String> {
        self.store.save(&self.saved())
    }

    /// Takes a snapshot of the counters, for the rates of the last interval.
    pub fn sample(&mut self) {
        let links = self.dp.paced_ports().iter().filter_map(|n| self.dp.link_stats(n).ok()).collect();
        let snap = Snapshot { at: Instant::now(), ports: self.dp.port_stats(), pmds: self.dp.pmd_stats(), links };
        self.previous = self.latest.replace(snap);
    }

    /// Every counter now, for the metrics endpoint to encode without the daemon.
    pub fn metrics_snapshot(&self) -> metrics::MetricsSnapshot {
        let links: Vec<_> = self.dp.paced_ports().iter().filter_map(|n| self.dp.link_stats(n).ok()).collect();
        metrics::MetricsSnapshot {
            ports: self.dp.port_stats(),
            pmds: self.dp.pmd_stats(),
            flows: self.dp.dump_flows(),
            links,
            tsc_hz: self.dp.tsc_hz(),
            mbufs: self.dp.mbufs(),
        }
    }

    /// Runs one request: it either succeeds whole (and is persisted) or changes nothing and
    /// says why.
    pub fn handle(&mut self, req: Request) -> Reply {
        self.dispatch(req).into()
    }

    fn dispatch(&mut self, req: Request) -> Result<Value, String> {
        match req {
            Request::AddPort { name, port_type, options } => self.add_port(name, &port_type, options),
            Request::DelPort { name } => self.del_port(&name),
            Request::SetPort { ports } => self.set_ports(ports),
            Request::ListPorts => {
                let (ports, specs) = (self.dp.port_stats(), self.dp.port_specs());
                to_json(views::list_ports(&ports, &specs, &self.unrestored_ports))
            }
            Request::AddFlow { flows } => self.changed(|d| d.dp.add_flows(&flows).map(|n| json!({"added": n}))),
            Request::DelFlows { matcher, strict } => {
                let matcher = matcher.filter(|m| !m.trim().is_empty());
                self.changed(|d| d.dp.del_flows(matcher.as_deref(), strict).map(|n| json!({"deleted": n})))
            }
            Request::DumpFlows => to_json(self.dp.dump_flows()),
            Request::PortStats { name } => {
                let (ports, rates) = (self.dp.port_stats(), self.rates());
                to_json(views::port_stats(&ports, &rates, name.as_deref())?)
            }
            Request::PmdStats => {
                let (ports, rates) = (self.dp.port_stats(), self.rates());
                let mut v = to_json(views::pmd_stats(
                    self.dp.pmd_stats(),
                    &ports,
                    &rates,
                    self.dp.tsc_hz(),
                    self.interval_secs(),
                ))?;
                let (in_use, total) = self.dp.mbufs();
                v["mbufs"] = json!({"in_use": in_use, "total": total});
                Ok(v)
            }
            Request::QosShow { name } => {
                let (ports, pmds, rates) = (self.dp.port_stats(), self.dp.pmd_stats(), self.rates());
                let links = self.link_rows();
                to_json(views::qos_show(&self.dp, &ports, &pmds, &rates, &links, name.as_deref(), &self.model_path)?)
            }
            Request::LoadModel { path } => self.load_model(path),
            Request::ModelShow => match self.dp.model() {
                Some(m) => Ok(json!({"path": self.model_path, "model": m})),
                None => Err(format!(
                    "no bandwidth-CPU model loaded ({} does not exist: run slaswitch calibrate)",
                    self.model_path.display()
                )),
            },
            Request::LinkShow { name } => self.link_show(name),
            Request::SetTenant { name, weight } => {
                self.changed(|d| d.dp.set_tenant(&name, weight).map(|()| json!({"tenant": name, "weight": weight})))
            }
            Request::DelTenant { name } => self.changed(|d| d.dp.del_tenant(&name).map(|()| json!({"deleted": name}))),
            Request::Show => to_json(self.saved()),
        }
    }

    /// Runs a change and persists the configuration once it succeeded.
    fn changed(&mut self, change: impl FnOnce(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        let reply = change(self)?;
        self.persist()?;
        Ok(reply)
    }

    fn add_port(&mut self, name: String, port_type: &str, options: Options) -> Result<Value, String> {
        let spec = PortSpec { name, port_type: PortType::parse(port_type)?, number: 0, options };
        self.changed(|d| {
            let added = d.dp.add_port(spec)?;
            d.unrestored_ports.retain(|(s, _)| s.name != added.name);
            let socket = added.socket_path(&d.dp.settings().run_dir);
            Ok(json!({"name": added.name, "number": added.number, "socket": socket}))
        })
    }

    fn del_port(&mut self, name: &str) -> Result<Value, String> {
        self.changed(|d| {
            let before = d.unrestored_ports.len();
            d.unrestored_ports.retain(|(s, _)| s.name != name);
            if d.unrestored_ports.len() == before {
                d.dp.del_port(name)?;
            }
            Ok(json!({"deleted": name}))
        })
    }

    /// One port, or several as one step ([`Datapath::set_ports`]).
    fn set_ports(&mut self, ports: Vec<PortChange>) -> Result<Value, String> {
        let several = ports.len() > 1;
        let changes: Vec<(String, Options)> = ports.into_iter().map(|p| (p.name, p.options)).collect();
        self.changed(|d| {
            let specs = d.dp.set_ports(&changes)?;
            if several {
                to_json(specs)
            } else {
                to_json(&specs[0])
            }
        })
    }

    /// Reads a bandwidth-CPU model (`slaswitch calibrate` writes one) and re-plans every port
    /// with it; refused whole if a purchase would no longer fit. Once taken it is copied to the
    /// daemon's model file, so a restart keeps it.
    fn load_model(&mut self, path: Option<PathBuf>) -> Result<Value, String> {
        let path = path.unwrap_or_else(|| self.model_path.clone());
        let model =
            load_model(&path)?.ok_or_else(|| format!("{}: no such file (run slaswitch calibrate)", path.display()))?;
        let text = serde_json::to_string_pretty(&model).expect("model serialises");
        self.dp.set_model(Some(model))?;
        if path != self.model_path {
            let tmp = self.model_path.with_extension("tmp");
            if let Some(dir) = self.model_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.model_path)).map_err(|e| {
                format!("the model is in use but could not be saved to {}: {e}", self.model_path.display())
            })?;
        }
        self.retry_unrestored();
        self.persist()?;
        Ok(json!({"loaded": path, "saved_as": self.model_path}))
    }

    /// `link-show`: paced port `name`, or the only one.
    fn link_show(&self, name: Option<String>) -> Result<Value, String> {
        let name = match name {
            Some(n) => n,
            None => match self.dp.paced_ports().as_slice() {
                [one] => one.clone(),
                [] => return Err("no port is paced (set link_rate_bps on the uplink)".into()),
                several => return Err(format!("several ports are paced ({}): name one", several.join(", "))),
            },
        };
        let now = self.dp.link_stats(&name)?;
        to_json(link_view::link_show(now, self.previous.as_ref(), self.latest.as_ref()))
    }

    /// The link half of every VM's purchase: its row on the uplink's scheduler (or the only
    /// paced port's).
    fn link_rows(&self) -> Vec<link_view::LinkVmRow> {
        match self.uplink_stats() {
            Some(now) => link_view::link_show(now, self.previous.as_ref(), self.latest.as_ref()).vms,
            None => Vec::new(),
        }
    }

    /// The scheduler of the uplink if it is paced, or of the only paced port.
    fn uplink_stats(&self) -> Option<slaswitch_datapath::datapath::LinkStats> {
        let paced = self.dp.paced_ports();
        let uplink = self.dp.fallback_status().uplink.filter(|u| paced.contains(u));
        let name = uplink.or_else(|| (paced.len() == 1).then(|| paced[0].clone()))?;
        self.dp.link_stats(&name).ok()
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

    /// Stops the PMDs and closes every port.
    pub fn shutdown(self) {
        self.dp.shutdown();
    }
}

/// Set by SIGINT/SIGTERM: the accept loop, the PMDs' owner and the sampler stop at their next
/// check.
pub static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// SIGINT and SIGTERM stop the daemon. (Rust's runtime already ignores SIGPIPE, so a client
/// that hangs up gives a write error, not the end of the daemon.)
pub fn install_signal_handlers() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&STOP))?;
    }
    Ok(())
}

/// The longest request line the control socket reads, bytes.
pub const MAX_REQUEST_BYTES: u64 = 1 << 20;
/// Control connections served at once; more are answered "busy" at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request, or to take its reply.
const CLIENT_DEADLINE: Duration = Duration::from_secs(10);

/// Reads one request (at most `MAX_REQUEST_BYTES`, within `CLIENT_DEADLINE`), handles it and
/// always replies.
fn serve_connection(daemon: &Mutex<Daemon>, stream: std::os::unix::net::UnixStream) {
    stream.set_nonblocking(false).ok();
    stream.set_read_timeout(Some(CLIENT_DEADLINE)).ok();
    stream.set_write_timeout(Some(CLIENT_DEADLINE)).ok();
    let mut line = String::new();
    let mut reader = BufReader::new(&stream).take(MAX_REQUEST_BYTES + 1);
    let reply = match reader.read_line(&mut line) {
        Ok(n) if n as u64 > MAX_REQUEST_BYTES => {
            Reply::Err(format!("the request is longer than {MAX_REQUEST_BYTES} bytes"))
        }
        Ok(_) => match parse_request(&line) {
            Ok(req) => daemon.lock().expect("daemon lock").handle(req),
            Err(e) => Reply::Err(e),
        },
        Err(e) => Reply::Err(format!("cannot read the request: {e}")),
    };
    let mut w = &stream;
    let _ = writeln!(w, "{}", serde_json::to_string(&reply).expect("replies serialise"));
}

/// Serves the control socket, the sampler, (optionally) metrics and the cluster agent until a
/// signal arrives.
pub fn serve(
    daemon: Daemon,
    socket: PathBuf,
    socket_gid: u32,
    metrics_addr: Option<String>,
    agent: Option<slaswitch_cluster::agent::AgentSettings>,
) -> Result<(), String> {
    let listener = access::bind_control_socket(&socket, socket_gid)?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let daemon = Arc::new(Mutex::new(daemon));

    // The sampler takes the rates' snapshot every second and, when metrics are served, the
    // metrics' snapshot with it: a scrape encodes the latest one and never takes the daemon's
    // lock, so no scrape delays a control request.
    let published: Option<Arc<Mutex<Arc<metrics::MetricsSnapshot>>>> = metrics_addr
        .as_ref()
        .map(|_| Arc::new(Mutex::new(Arc::new(daemon.lock().expect("daemon lock").metrics_snapshot()))));
    let sampler = {
        let (daemon, published) = (daemon.clone(), published.clone());
        std::thread::spawn(move || {
            while !STOP.load(Ordering::SeqCst) {
                let snapshot = {
                    let mut d = daemon.lock().expect("daemon lock");
                    d.sample();
                    published.as_ref().map(|_| d.metrics_snapshot())
                };
                if let (Some(p), Some(s)) = (&published, snapshot) {
                    *p.lock().expect("metrics snapshot") = Arc::new(s);
                }
                for _ in 0..10 {
                    if STOP.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let metrics = match (metrics_addr, published) {
        (Some(addr), Some(published)) => Some(metrics::serve(&addr, published)?),
        _ => None,
    };

    let agent_stop = Arc::new(AtomicBool::new(false));
    let agent = agent.map(|settings| cluster_agent::spawn(daemon.clone(), settings, agent_stop.clone()));

    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !STOP.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // Every connection on its own thread: a slow or silent client delays nobody;
                // the lock is taken only to handle a request already read.
                if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    open.fetch_sub(1, Ordering::SeqCst);
                    let mut w = &stream;
                    let busy = Reply::Err(format!("slaswitchd is serving {MAX_CONNECTIONS} connections; try again"));
                    let _ = writeln!(w, "{}", serde_json::to_string(&busy).expect("replies serialise"));
                    continue;
                }
                let (daemon, open) = (daemon.clone(), open.clone());
                std::thread::spawn(move || {
                    serve_connection(&daemon, stream);
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    // The agent reports the last partial cycle and gives its lease back while the data plane
    // still counts.
    agent_stop.store(true, Ordering::SeqCst);
    if let Some(a) = agent {
        let _ = a.join();
    }
    // Connections still open end within their deadline; the data plane shuts down after them.
    let waited = std::time::Instant::now();
    while open.load(Ordering::SeqCst) > 0 && waited.elapsed() < CLIENT_DEADLINE + Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
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
