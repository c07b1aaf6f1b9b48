//! The cluster agent's view of this switch (`slaswitchd --etcd URL --host-id NAME`): VM ports,
//! purchases applied through the same request as `slaswitch set-port` (validation, admission,
//! persistence and all), and the data plane's own counters for billing.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use slaswitch_agent::agent::{Agent, AgentSettings, LocalSwitch};
use slaswitch_agent::usage::VmCounters;

use super::Daemon;
use crate::protocol::{PortChange, Reply, Request};

/// The daemon, as the agent sees it.
pub struct DaemonSwitch(pub Arc<Mutex<Daemon>>);

impl LocalSwitch for DaemonSwitch {
    fn vm_ports(&self) -> Vec<String> {
        self.0.lock().expect("daemon lock").vm_ports()
    }

    fn apply(&self, vm: &str, options: &BTreeMap<String, String>) -> Result<(), String> {
        let req = Request::SetPort { ports: vec![PortChange { name: vm.to_string(), options: options.clone() }] };
        match self.0.lock().expect("daemon lock").handle(req) {
            Reply::Ok(_) => Ok(()),
            Reply::Err(e) => Err(e),
        }
    }

    fn counters(&self) -> Vec<VmCounters> {
        self.0.lock().expect("daemon lock").vm_counters()
    }

    fn uplink_bps(&self) -> Option<u64> {
        self.0.lock().expect("daemon lock").uplink_stats().map(|l| l.link_rate_bps)
    }

    fn set_link_overcommit(&self, ratio: f64) -> Result<(), String> {
        let mut daemon = self.0.lock().expect("daemon lock");
        let uplink = daemon.dp.port_specs().into_iter().find(|s| s.options.get("uplink").is_some_and(|v| v == "true"));
        let Some(uplink) = uplink else { return Ok(()) };
        // Three decimals: what the option keeps.
        let options = [("link_overcommit".to_string(), format!("{:.3}", ratio.min(100.0)))].into();
        let req = Request::SetPort { ports: vec![PortChange { name: uplink.name, options }] };
        match daemon.handle(req) {
            Reply::Ok(_) => Ok(()),
            Reply::Err(e) => Err(e),
        }
    }
}

impl Daemon {
    /// Ports that are VMs: every port but uplinks and paced ports.
    pub fn vm_ports(&self) -> Vec<String> {
        let is_uplink = |o: &BTreeMap<String, String>| {
            o.get("uplink").is_some_and(|v| v == "true") || o.contains_key("link_rate_bps")
        };
        self.dp.port_specs().into_iter().filter(|s| !is_uplink(&s.options)).map(|s| s.name).collect()
    }

    /// What each VM sent, from the data plane's counters: on the uplink's scheduler when the VM
    /// crosses a paced uplink (wire bytes, as its guarantee is in wire bits/s, with the
    /// guarantee in force), else what its port received from it (frame bytes).
    pub fn vm_counters(&self) -> Vec<VmCounters> {
        let on_link: BTreeMap<String, (u64, u64)> = self
            .uplink_stats()
            .map(|l| l.vms.into_iter().map(|v| (v.name, (v.out.sent_wire_bytes, v.guarantee_bps))).collect())
            .unwrap_or_default();
        let ports = self.dp.port_stats();
        self.vm_ports()
            .into_iter()
            .filter_map(|vm| {
                let (sent_bytes, guarantee_bps) = match on_link.get(&vm) {
                    Some(&c) => c,
                    None => (ports.iter().find(|p| p.name == vm)?.rx.rx_bytes, 0),
                };
                Some(VmCounters { vm, sent_bytes, guarantee_bps })
            })
            .collect()
    }
}

/// Starts the agent on the control plane's runtime; it runs until `stop`.
pub fn spawn(
    daemon: Arc<Mutex<Daemon>>,
    settings: AgentSettings,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Agent::new(settings, Arc::new(DaemonSwitch(daemon))).run(stop))
}
