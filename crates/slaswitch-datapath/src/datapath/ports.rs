//! Adding, removing and changing ports: every change planned whole (admission by
//! `slaswitch_config::allocation`) before a device or a PMD is touched, and undone on failure.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use slaswitch_dpdk::{probe_device, remove_device, remove_vdev, EthPort, PortSetup, RxPath};
use slaswitch_qos::cpu::BandwidthModel;

use super::{Datapath, PortEntry};
use crate::counters::PortCounters;
use crate::error::DatapathError;
use crate::kernel_tx::KernelSender;
use slaswitch_config::allocation::{self, Candidate, PortPlan};
use slaswitch_config::port::{DeviceRecipe, PortSpec, PortType};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::ranges::MAX_PORTS;

/// A port's spec with new options, their settings parsed, and the PMD it would be on.
pub(crate) struct UpdatedPort {
    pub(super) spec: PortSpec,
    pub(super) settings: PortSettings,
    pub(super) pmd: usize,
}

impl Datapath {
    /// Adds a port; on any failure nothing changes. `spec.number` 0 means "pick one".
    pub fn add_port(&mut self, mut spec: PortSpec) -> Result<PortSpec, DatapathError> {
        let settings = spec.validate()?;
        if self.ports.contains_key(&spec.name) {
            return Err(DatapathError::PortExists(spec.name));
        }
        let used: Vec<u16> = self.ports.values().map(|p| p.spec.number).collect();
        if let Some(n) = settings.ofport_request {
            if used.contains(&n) {
                return Err(DatapathError::NumberTaken { number: n, by: self.port_name(n) });
            }
            spec.number = n;
        } else if spec.number == 0 || used.contains(&spec.number) {
            spec.number = (1..MAX_PORTS as u16).find(|n| !used.contains(n)).ok_or(DatapathError::NoPortNumber)?;
        }
        let pmd = self.place_new_port(&spec, &settings)?;
        let plans = self.plan_with(&[(&spec, &settings, pmd)], None, self.model.as_ref())?;
        if let Some(path) = spec.socket_path(&self.settings.run_dir) {
            if spec.port_type == PortType::VhostUser && std::path::Path::new(&path).exists() {
                // A stale socket from a previous run would make the vhost driver fail.
                let _ = std::fs::remove_file(&path);
            }
        }
        let recipe = spec.recipe(&self.settings.run_dir);
        let eth = if recipe.is_vdev {
            EthPort::create_vdev(&self.eal, &recipe.device, &recipe.args)
        } else {
            probe_device(&self.eal, &recipe.device)
        }
        .map_err(|cause| DatapathError::CreateDevice {
            port_type: spec.port_type.name(),
            port: spec.name.clone(),
            cause,
        })?;
        if let Some(max) = eth.max_mtu().ok().filter(|&max| settings.mtu_bytes > max) {
            Self::destroy_device(eth, &recipe);
            let (port_type, port) = (spec.port_type.name(), spec.name);
            return Err(DatapathError::Mtu { port_type, port, requested: settings.mtu_bytes, max });
        }
        // A vhost port's guests' partial checksums stay partial until a port needs them whole.
        let partial_checksums = spec.port_type.is_vhost();
        let setup = PortSetup {
            rx_ring: settings.rx_ring_descriptors,
            tx_ring: settings.tx_ring_descriptors,
            queues: spec.queues().unwrap_or(1),
            partial_checksums,
            mtu_bytes: settings.mtu_bytes,
        };
        if let Err(e) = eth.setup_with(&self.pool, &setup) {
            Self::destroy_device(eth, &recipe);
            return Err(DatapathError::StartDevice { port_type: spec.port_type.name(), port: spec.name, cause: e });
        }
        let rx_path = self.rx_path_of(&spec, eth);
        let counters = Arc::new(PortCounters::default());
        let tx_lock = Arc::new(AtomicBool::new(false));
        let kernel_tx = if spec.port_type.is_kernel() && self.settings.kernel_tx_threads {
            match self.kernel_sender(&spec.name, eth, &tx_lock, &counters) {
                Ok(sender) => Some(sender),
                Err(e) => {
                    Self::destroy_device(eth, &recipe);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let entry = PortEntry {
            spec: spec.clone(),
            settings,
            eth,
            rx_path,
            recipe,
            counters,
            tx_lock,
            pmd,
            plan: plans[&spec.name].clone(),
            paced: None,
            kernel_tx,
        };
        self.ports.insert(spec.name.clone(), entry);
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs() {
            self.restore_plans(before);
            let entry = self.ports.remove(&spec.name).expect("just inserted");
            let _ = self.push_configs();
            Self::destroy_device(entry.eth, &entry.recipe);
            return Err(e);
        }
        Ok(spec)
    }

    /// Plans every port as it would be with the `changed` specs added or replaced (each on its
    /// PMD) and `removed` gone, applying the admission rules ([`slaswitch_config::allocation`]). Changes
    /// nothing.
    pub(super) fn plan_with(
        &self,
        changed: &[(&PortSpec, &PortSettings, usize)],
        removed: Option<&str>,
        model: Option<&BandwidthModel>,
    ) -> Result<BTreeMap<String, PortPlan>, DatapathError> {
        let mut candidates =
            self.candidates_except(|name| Some(name) == removed || changed.iter().any(|(s, ..)| s.name == name));
        candidates.extend(changed.iter().map(|&(spec, settings, pmd)| Candidate {
            spec,
            settings,
            pmd_core: self.pmds[pmd].core,
        }));
        let who = match changed {
            [] => removed.map_or("the bandwidth model".to_string(), |r| format!("removing {r}")),
            [(s, ..)] => format!("port {}", s.name),
            several => {
                format!("ports {}", several.iter().map(|(s, ..)| s.name.as_str()).collect::<Vec<_>>().join(", "))
            }
        };
        let plans = allocation::plan(&candidates, model, self.pmds.len(), self.eal.tsc_hz(), &who)?;
        for c in &candidates {
            let tenant = &plans[&c.spec.name].vm_link.tenant;
            if !self.tenants.contains_key(tenant) {
                return Err(DatapathError::NoTenantForPort { port: c.spec.name.clone(), tenant: tenant.clone() });
            }
        }
        let numbers: BTreeMap<&str, u16> = candidates.iter().map(|c| (c.spec.name.as_str(), c.spec.number)).collect();
        for name in plans.iter().filter(|(_, p)| p.link.link_rate_bps > 0).map(|(n, _)| n) {
            self.link_plan(name, &plans, &numbers, &self.tenants)
                .validate()
                .map_err(|cause| DatapathError::LinkRefuses { change: who.clone(), link: name.clone(), cause })?;
        }
        Ok(plans)
    }

    /// Every port as the planner sees it (on its PMD's core), but those `skip` names.
    pub(super) fn candidates_except(&self, skip: impl Fn(&str) -> bool) -> Vec<Candidate<'_>> {
        self.ports
            .values()
            .filter(|p| !skip(&p.spec.name))
            .map(|p| Candidate { spec: &p.spec, settings: &p.settings, pmd_core: self.pmds[p.pmd].core })
            .collect()
    }

    /// Gives each port its new plan and makes the paced links match ([`Self::configure_links`]).
    /// Returns the previous plans, for [`Self::restore_plans`].
    pub(super) fn apply_plans(&mut self, plans: BTreeMap<String, PortPlan>) -> Vec<(String, PortPlan)> {
        let mut before = Vec::new();
        for (name, plan) in plans {
            let Some(entry) = self.ports.get_mut(&name) else { continue };
            if plan.link.link_rate_bps == 0 {
                entry.paced = None;
            }
            before.push((name, std::mem::replace(&mut entry.plan, plan)));
        }
        if let Err(e) = self.configure_links() {
            // Cannot happen: `plan_with` validated every link's plan.
            tracing::error!("a link scheduler refused a validated plan: {e}");
        }
        if !self.ports.values().any(|p| p.plan.link.nic_fallback) {
            self.fallback.engaged.store(false, Relaxed);
        }
        before
    }

    pub(super) fn restore_plans(&mut self, before: Vec<(String, PortPlan)>) {
        for (name, plan) in before {
            if let Some(entry) = self.ports.get_mut(&name) {
                if plan.link.link_rate_bps == 0 {
                    entry.paced = None;
                }
                entry.plan = plan;
            }
        }
        if let Err(e) = self.configure_links() {
            tracing::error!("restoring a link scheduler failed: {e}");
        }
    }

    /// Replaces the bandwidth-CPU model; refused (nothing changes) when some port's purchase
    /// would no longer fit under the new model.
    pub fn set_model(&mut self, model: Option<BandwidthModel>) -> Result<(), DatapathError> {
        let plans = self.plan_with(&[], None, model.as_ref())?;
        let old_model = std::mem::replace(&mut self.model, model);
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs() {
            self.model = old_model;
            self.restore_plans(before);
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn pick_pmd(&self, pmd_core: Option<usize>) -> Result<usize, DatapathError> {
        if let Some(core) = pmd_core {
            return self
                .pmds
                .iter()
                .position(|p| p.core == core)
                .ok_or_else(|| DatapathError::NoPmdOnCore { core, cores: self.settings.pmd_cores.clone() });
        }
        // Round robin: the PMD with the fewest ports.
        Ok((0..self.pmds.len()).min_by_key(|&i| self.ports.values().filter(|p| p.pmd == i).count()).unwrap_or(0))
    }

    /// A started vhost port's guest is received from through the vhost library directly (one
    /// layer less on every poll, as OVS-DPDK does); any other port, or a vhost port whose
    /// driver would do more than hand its frames over, through ethdev.
    fn rx_path_of(&self, spec: &PortSpec, eth: EthPort) -> RxPath {
        if !spec.port_type.is_vhost() {
            return RxPath::Ethdev;
        }
        match eth.receive_vhost_directly(&self.pool) {
            Ok(()) => RxPath::VhostDirect,
            Err(e) => {
                tracing::warn!(port = %spec.name, "receiving through net_vhost's ethdev rx: {e}");
                RxPath::Ethdev
            }
        }
    }

    pub(super) fn destroy_device(eth: EthPort, recipe: &DeviceRecipe) {
        let _ = eth.stop_close();
        if recipe.is_vdev {
            let _ = remove_vdev(&recipe.device);
        } else {
            let _ = remove_device(eth);
        }
    }

    /// Starts kernel port `name`'s sender thread (`crate::kernel_tx`) on the cores no PMD has.
    fn kernel_sender(
        &self,
        name: &str,
        eth: EthPort,
        tx_lock: &Arc<AtomicBool>,
        counters: &Arc<PortCounters>,
    ) -> Result<KernelSender, DatapathError> {
        let cores: Vec<usize> =
            (0..crate::pmd::online_cores()).filter(|c| !self.settings.pmd_cores.contains(c)).collect();
        let register = self.eal.thread_registrar();
        KernelSender::start(name, eth, tx_lock.clone(), counters.clone(), cores, self.eal.tsc_hz(), register)
            .map_err(|cause| DatapathError::SenderThread { port: name.to_string(), cause })
    }

    /// Removes a port: PMDs stop using it first, then its device is closed.
    pub fn del_port(&mut self, name: &str) -> Result<(), DatapathError> {
        if !self.ports.contains_key(name) {
            return Err(DatapathError::NoPort(name.to_string()));
        }
        // Fewer VMs on a PMD only lowers the others' coefficients, so this plan always fits.
        let plans = self.plan_with(&[], Some(name), self.model.as_ref());
        let entry = self.ports.remove(name).expect("checked");
        if let Ok(plans) = plans {
            self.apply_plans(plans);
        }
        let result = self.push_configs();
        // No PMD hands it frames now; its sender ends before the device closes.
        drop(entry.kernel_tx);
        Self::destroy_device(entry.eth, &entry.recipe);
        if entry.spec.port_type == PortType::VhostUser {
            if let Some(path) = entry.spec.socket_path(&self.settings.run_dir) {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }

    /// Changes a port's options. `pmd` moves its rx queue live; any other change recreates the
    /// port's device under the same number (only that port pauses).
    pub fn set_port(&mut self, name: &str, options: &BTreeMap<String, String>) -> Result<PortSpec, DatapathError> {
        let updated = self.updated_spec(name, options)?;
        if options.keys().all(|k| slaswitch_config::port::is_live_option(k)) {
            return Ok(self.apply_live(vec![updated])?.remove(0));
        }
        let spec = updated.spec;
        let old = self.ports.get(name).expect("checked").spec.clone();
        self.del_port(name)?;
        match self.add_port(spec.clone()) {
            Ok(s) => Ok(s),
            Err(e) => {
                // Put the old port back so a bad setting changes nothing.
                if let Err(restore) = self.add_port(old) {
                    return Err(DatapathError::RestoreFailed { error: Box::new(e), restore: Box::new(restore) });
                }
                Err(e)
            }
        }
    }

    /// Changes several ports' options as one step: the admission rules judge only the final
    /// state, and the PMDs switch once. An operator moves cycles or bandwidth from one port to
    /// another this way without passing through a state that would be refused (or, taking
    /// first, one that would overbook the core). Only live options (C2QoS, meters, purchase,
    /// link, `pmd`) can be set together, since recreating devices cannot be undone as a whole;
    /// one port's request is [`Self::set_port`]. Refused whole, changing nothing.
    pub fn set_ports(
        &mut self,
        changes: &[(String, BTreeMap<String, String>)],
    ) -> Result<Vec<PortSpec>, DatapathError> {
        match changes {
            [] => return Err(DatapathError::NothingToSet),
            [(name, options)] => return self.set_port(name, options).map(|s| vec![s]),
            _ => {}
        }
        let mut updated = Vec::with_capacity(changes.len());
        for (i, (name, options)) in changes.iter().enumerate() {
            if changes[..i].iter().any(|(n, _)| n == name) {
                return Err(DatapathError::NamedTwice(name.clone()));
            }
            if let Some(key) = options.keys().find(|k| !slaswitch_config::port::is_live_option(k)) {
                return Err(DatapathError::NotLive { port: name.clone(), key: key.clone() });
            }
            // Among several ports, an error must say whose option it is.
            updated.push(self.updated_spec(name, options).map_err(|e| {
                if e.to_string().contains(name.as_str()) {
                    e
                } else {
                    DatapathError::OfPort { port: name.clone(), cause: Box::new(e) }
                }
            })?);
        }
        self.apply_live(updated)
    }

    /// A port's spec with `options` set, validated, and the PMD it would be on.
    pub(super) fn updated_spec(
        &self,
        name: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<UpdatedPort, DatapathError> {
        let entry = self.ports.get(name).ok_or_else(|| DatapathError::NoPort(name.to_string()))?;
        if options.is_empty() {
            return Err(DatapathError::NoOptions(name.to_string()));
        }
        let mut spec = entry.spec.clone();
        for (k, v) in options {
            spec.options.insert(k.clone(), v.clone());
        }
        let settings = spec.validate()?;
        if options.contains_key("ofport_request") && settings.ofport_request != Some(spec.number) {
            return Err(DatapathError::NumberChange { port: name.to_string(), number: spec.number });
        }
        // A port stays on its PMD unless `pmd` names another.
        let pmd = if settings.pmd_core.is_some() { self.pick_pmd(settings.pmd_core)? } else { entry.pmd };
        Ok(UpdatedPort { spec, settings, pmd })
    }

    /// Gives ports new specs whose changes are all live: one plan, one switch of the PMDs.
    pub(super) fn apply_live(&mut self, mut updated: Vec<UpdatedPort>) -> Result<Vec<PortSpec>, DatapathError> {
        let plans = self.plan_updated(&mut updated)?;
        let mut old = Vec::with_capacity(updated.len());
        for u in &updated {
            let entry = self.ports.get_mut(&u.spec.name).expect("checked by updated_spec");
            old.push((
                std::mem::replace(&mut entry.pmd, u.pmd),
                std::mem::replace(&mut entry.spec, u.spec.clone()),
                std::mem::replace(&mut entry.settings, u.settings.clone()),
            ));
        }
        let moved: Vec<(u16, usize)> = old
            .iter()
            .zip(&updated)
            .filter(|((pmd, ..), u)| *pmd != u.pmd)
            .map(|((pmd, ..), u)| (u.spec.number, *pmd))
            .collect();
        let before = self.apply_plans(plans);
        if let Err(e) = self.push_configs_moving(&moved) {
            for (u, (pmd, spec, settings)) in updated.iter().zip(old) {
                let entry = self.ports.get_mut(&u.spec.name).expect("checked by updated_spec");
                (entry.pmd, entry.spec, entry.settings) = (pmd, spec, settings);
            }
            self.restore_plans(before);
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(updated.into_iter().map(|u| u.spec).collect())
    }
}
