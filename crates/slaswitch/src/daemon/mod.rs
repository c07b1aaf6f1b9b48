//! slaswitchd: the data plane plus its control plane ([`control_plane`]). Commands arrive on a
//! Unix socket and are handled one at a time; each either succeeds whole (and is persisted) or
//! changes nothing and says why.

pub mod access;
pub mod cluster_agent;
pub mod config;
pub mod control_plane;
mod link_view;
pub mod metrics;
mod pmd_rebalance;
mod rates;
mod slo;
mod views;

use std::path::PathBuf;
use std::time::Instant;

use slaswitch_config::model_file::read_model;
use slaswitch_config::{PortSpec, PortType};
use slaswitch_datapath::Datapath;

use crate::error::DaemonError;
use crate::protocol::qos::ModelShowReply;
use crate::protocol::replies::*;
use crate::protocol::{Options, PortChange, Reply, Request, Response};
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
    /// Every latency SLO, second by second.
    slo: slo::SloLedger,
    /// Ports moved between PMDs.
    rebalancer: pmd_rebalance::Rebalancer,
}

impl Daemon {
    /// Starts the data plane and replays the saved configuration.
    pub fn start(mut dp: Datapath, store: ConfigStore, model_path: PathBuf) -> Result<Daemon, DaemonError> {
        let saved = store.load()?;
        match read_model(&model_path) {
            Ok(Some(model)) => dp.set_model(Some(model))?,
            Ok(None) => {}
            // A broken model must not keep the switch down: ports with purchases say why.
            Err(e) => tracing::warn!("{e}"),
        }
        let mut d = Daemon {
            dp,
            store,
            unrestored_ports: Vec::new(),
            previous: None,
            latest: None,
            model_path,
            slo: slo::SloLedger::default(),
            rebalancer: pmd_rebalance::Rebalancer::new(true),
        };
        for (name, weight) in saved.tenants {
            if let Err(e) = d.dp.set_tenant(&name, weight) {
                tracing::warn!("tenant {name} not restored: {e}");
            }
        }
        for spec in saved.ports {
            if let Err(e) = d.dp.add_port(spec.clone()) {
                tracing::warn!("port {} not restored: {e}", spec.name);
                d.unrestored_ports.push((spec, e.to_string()));
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
                self.unrestored_ports.push((spec, e.to_string()));
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

    fn persist(&self) -> Result<(), DaemonError> {
        self.store.save(&self.saved())
    }

    /// Takes a snapshot of the counters, for the rates of the last interval.
    pub fn sample(&mut self) {
        let links = self.dp.paced_ports().iter().filter_map(|n| self.dp.link_stats(n).ok()).collect();
        let snap = Snapshot { at: Instant::now(), ports: self.dp.port_stats(), pmds: self.dp.pmd_stats(), links };
        self.previous = self.latest.replace(snap);
        if let (Some(old), Some(new)) = (&self.previous, &self.latest) {
            self.slo.observe(old, new, self.dp.tsc_hz());
            self.rebalancer.tick(&mut self.dp, old, new);
        }
    }

    /// Whether the switch moves ports between its PMDs by itself (on by default).
    pub fn set_pmd_rebalance(&mut self, enabled: bool) {
        self.rebalancer = pmd_rebalance::Rebalancer::new(enabled);
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
            slo: self.slo.all(),
            pmd_moves: self.rebalancer.view(),
        }
    }

    /// Runs one request: it either succeeds whole (and is persisted) or changes nothing and
    /// says why.
    pub fn handle(&mut self, req: Request) -> Reply {
        self.dispatch(req).into()
    }

    fn dispatch(&mut self, req: Request) -> Result<Response, DaemonError> {
        Ok(match req {
            Request::AddPort { name, port_type, options } => {
                Response::PortAdded(self.add_port(name, &port_type, options)?)
            }
            Request::DelPort { name } => Response::PortDeleted(self.del_port(name)?),
            Request::SetPort { ports } => Response::PortsSet(self.set_ports(ports)?),
            Request::ListPorts => {
                let (ports, specs) = (self.dp.port_stats(), self.dp.port_specs());
                Response::Ports(views::list_ports(&ports, &specs, &self.unrestored_ports))
            }
            Request::AddFlow { flows } => {
                Response::FlowsAdded(self.changed(|d| Ok(FlowsAdded { added: d.dp.add_flows(&flows)? }))?)
            }
            Request::DelFlows { matcher, strict } => {
                let matcher = matcher.filter(|m| !m.trim().is_empty());
                let deleted = self.changed(|d| Ok(d.dp.del_flows(matcher.as_deref(), strict)?))?;
                Response::FlowsDeleted(FlowsDeleted { deleted })
            }
            Request::DumpFlows => Response::Flows(FlowList(self.dp.dump_flows())),
            Request::PortStats { name } => {
                Response::PortStats(views::port_stats(self.dp.port_stats(), &self.rates(), name.as_deref())?)
            }
            Request::PmdStats => {
                let (ports, rates) = (self.dp.port_stats(), self.rates());
                let (pmds, hz, secs) = (self.dp.pmd_stats(), self.dp.tsc_hz(), self.interval_secs());
                Response::PmdStats(views::pmd_stats(pmds, &ports, &rates, hz, secs, self.dp.mbufs()))
            }
            Request::QosShow { name } => {
                let (ports, pmds, rates) = (self.dp.port_stats(), self.dp.pmd_stats(), self.rates());
                let links = self.link_rows();
                let wanted = name.as_deref();
                let mut reply = views::qos_show(&self.dp, &ports, &pmds, &rates, &links, wanted, &self.model_path)?;
                for p in &mut reply.ports {
                    p.latency_slo = self.slo.status(&p.name);
                }
                reply.pmd_moves = self.rebalancer.view();
                Response::QosShow(Box::new(reply))
            }
            Request::LoadModel { path } => Response::ModelLoaded(self.load_model(path)?),
            Request::ModelShow => match self.dp.model() {
                Some(m) => {
                    Response::Model(Box::new(ModelShowReply { path: self.model_path.clone(), model: m.clone() }))
                }
                None => return Err(DaemonError::NoModel(self.model_path.clone())),
            },
            Request::LinkShow { name } => Response::LinkShow(Box::new(self.link_show(name)?)),
            Request::SetTenant { name, weight } => Response::TenantSet(self.changed(|d| {
                d.dp.set_tenant(&name, weight)?;
                Ok(TenantSet { tenant: name, weight })
            })?),
            Request::DelTenant { name } => Response::TenantDeleted(self.changed(|d| {
                d.dp.del_tenant(&name)?;
                Ok(TenantDeleted { deleted: name })
            })?),
            Request::Show => Response::Config(self.saved()),
        })
    }

    /// Runs a change and persists the configuration once it succeeded.
    fn changed<T>(&mut self, change: impl FnOnce(&mut Self) -> Result<T, DaemonError>) -> Result<T, DaemonError> {
        let reply = change(self)?;
        self.persist()?;
        Ok(reply)
    }

    fn add_port(&mut self, name: String, port_type: &str, options: Options) -> Result<PortAdded, DaemonError> {
        let spec = PortSpec { name, port_type: PortType::parse(port_type)?, number: 0, options };
        self.changed(|d| {
            let added = d.dp.add_port(spec)?;
            d.unrestored_ports.retain(|(s, _)| s.name != added.name);
            let socket = added.socket_path(&d.dp.settings().run_dir);
            Ok(PortAdded { name: added.name, number: added.number, socket: socket.map(PathBuf::from) })
        })
    }

    fn del_port(&mut self, name: String) -> Result<PortDeleted, DaemonError> {
        self.changed(|d| {
            let before = d.unrestored_ports.len();
            d.unrestored_ports.retain(|(s, _)| s.name != name);
            if d.unrestored_ports.len() == before {
                d.dp.del_port(&name)?;
            }
            Ok(PortDeleted { deleted: name })
        })
    }

    /// One port, or several as one step ([`Datapath::set_ports`]).
    fn set_ports(&mut self, ports: Vec<PortChange>) -> Result<PortsSet, DaemonError> {
        let several = ports.len() > 1;
        let changes: Vec<(String, Options)> = ports.into_iter().map(|p| (p.name, p.options)).collect();
        self.changed(|d| {
            let mut specs = d.dp.set_ports(&changes)?;
            Ok(if several { PortsSet::Several(specs) } else { PortsSet::One(specs.remove(0)) })
        })
    }

    /// Reads a bandwidth-CPU model (`slaswitch calibrate` writes one) and re-plans every port
    /// with it; refused whole if a purchase would no longer fit. Once taken it is copied to the
    /// daemon's model file, so a restart keeps it.
    fn load_model(&mut self, path: Option<PathBuf>) -> Result<ModelLoaded, DaemonError> {
        let path = path.unwrap_or_else(|| self.model_path.clone());
        let model = read_model(&path)?.ok_or_else(|| DaemonError::NoModelFile(path.clone()))?;
        let text = serde_json::to_string_pretty(&model).expect("model serialises");
        self.dp.set_model(Some(model))?;
        if path != self.model_path {
            let tmp = self.model_path.with_extension("tmp");
            if let Some(dir) = self.model_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, &self.model_path))
                .map_err(|cause| DaemonError::ModelNotSaved { path: self.model_path.clone(), cause })?;
        }
        self.retry_unrestored();
        self.persist()?;
        Ok(ModelLoaded { loaded: path, saved_as: self.model_path.clone() })
    }

    /// `link-show`: paced port `name`, or the only one.
    fn link_show(&self, name: Option<String>) -> Result<crate::protocol::qos::LinkShowReply, DaemonError> {
        let name = match name {
            Some(n) => n,
            None => match self.dp.paced_ports().as_slice() {
                [one] => one.clone(),
                [] => return Err(DaemonError::NoPacedPort),
                several => return Err(DaemonError::SeveralPaced(several.join(", "))),
            },
        };
        let now = self.dp.link_stats(&name)?;
        Ok(link_view::link_show(now, self.previous.as_ref(), self.latest.as_ref()))
    }

    /// The link half of every VM's purchase: its row on the uplink's scheduler (or the only
    /// paced port's).
    fn link_rows(&self) -> Vec<crate::protocol::qos::LinkVmRow> {
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

    fn rates(&self) -> Vec<crate::protocol::stats::PmdRates> {
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
