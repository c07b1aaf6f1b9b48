//! The data plane's side of the paced ports' link schedulers: each link's plan built from every
//! port's settings (a purchase supplying the guarantee and minimum a VM did not set), applied
//! live to the links, PIE-VDE's tenants, and what `link-show` and `pmd-stats` read of the
//! links' counters.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use slaswitch_qos::egress::link_scheduler::{LinkPlan, LinkSettings, VmLinkPolicy};

use super::{Datapath, PortEntry};
use crate::error::DatapathError;
use crate::histogram::Histogram;
use crate::paced_tx::{LinkOut, LinkResidence, PacedLink};
use slaswitch_config::allocation::PortPlan;
use slaswitch_config::latency_slo::lane_rate_bps;
use slaswitch_config::link_policy::DEFAULT_TENANT;

/// A tenant of PIE-VDE's first level (seed 004 Sec. IV).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its index in the link schedulers, fixed for its life.
    #[serde(skip)]
    pub index: usize,
    /// Its weight among tenants.
    pub weight: u32,
}

/// Which frame a full paced queue drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropPolicy {
    /// The arriving frame.
    Tail,
    /// The oldest frame, for the arriving one.
    Head,
}

impl std::fmt::Display for DropPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            DropPolicy::Tail => "tail",
            DropPolicy::Head => "head",
        })
    }
}

/// Tenant weights an operator may set.
pub const TENANT_WEIGHTS: std::ops::RangeInclusive<u32> = 1..=10_000;

/// One VM's row of `link-show`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinkVmStats {
    /// The source port.
    pub name: String,
    /// Its number (the scheduler's queue).
    pub number: u16,
    /// Its settings in the scheduler.
    pub weight: u32,
    /// ANCS minimum in force, wire bits/s.
    pub min_bps: Option<u64>,
    /// ANCS maximum, wire bits/s.
    pub max_bps: Option<u64>,
    /// SoftBW's guarantee in force; in JSON as `link_guarantee` text (`strict:450000000`,
    /// `dynamic:BYTES,SECONDS`, `fairness`).
    #[serde(with = "slaswitch_config::link_policy::guarantee_as_text")]
    pub guarantee: slaswitch_qos::egress::softbw::Guarantee,
    /// PIE-VDE tenant.
    pub tenant: String,
    /// The link's latency class: its frames go ahead of the scheduler's choice up to this rate,
    /// wire bits/s (a latency-class port with a purchase, on a link with `link_latency=on`).
    #[serde(default)]
    pub latency_bps: Option<u64>,
    /// Frames its queue holds at most.
    pub queue_limit: usize,
    /// Frames waiting now.
    pub queued_frames: usize,
    /// Their bytes (wire).
    pub queued_bytes: u64,
    /// The rate the scheduler in force guarantees it now, wire bits/s (0: none).
    pub guarantee_bps: u64,
    /// The scheduler's own state of it.
    pub state: slaswitch_qos::egress::link_scheduler::SchedulerState,
    /// Cumulative counters.
    pub out: LinkOut,
}

/// What `link-show` shows of one paced port.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinkStats {
    /// The paced port.
    pub name: String,
    /// Its scheduler.
    pub scheduler: slaswitch_qos::egress::link_scheduler::SchedulerKind,
    /// Line rate, wire bits/s.
    pub link_rate_bps: u64,
    /// Which frame a full queue drops.
    pub drop_policy: DropPolicy,
    /// ANCS's accounting period.
    pub ancs_period_us: u64,
    /// The baseline's period.
    pub ratelimit_period_us: u64,
    /// Frames waiting in all queues.
    pub queued_frames: usize,
    /// Frames the latency class sent ahead of the scheduler's choice.
    #[serde(default)]
    pub sent_ahead_frames: u64,
    /// Its tenants and their weights.
    pub tenants: BTreeMap<String, u32>,
    /// Every VM (left out when a view puts its own rows there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vms: Vec<LinkVmStats>,
}

impl Datapath {
    /// The scheduler plan of paced port `link` given every port's plan: each other port a VM
    /// with its own settings, its purchase supplying the minimum and guarantee it did not set.
    /// Minimums that come from purchases are scaled down together if, with those set by hand,
    /// they would exceed the link (purchases are admitted in frame bits, the link counts wire
    /// bits).
    pub(super) fn link_plan(
        &self,
        link: &str,
        plans: &BTreeMap<String, PortPlan>,
        numbers: &BTreeMap<&str, u16>,
        tenants: &BTreeMap<String, Tenant>,
    ) -> LinkPlan {
        let lp = &plans[link];
        let e = lp.egress;
        let settings = LinkSettings {
            kind: e.kind,
            link_rate_bps: lp.link.link_rate_bps,
            ancs_period_ns: e.ancs_period_ns,
            ratelimit_period_ns: e.ratelimit_period_ns,
            head_drop: e.head_drop,
            ..LinkSettings::new(lp.link.link_rate_bps)
        };
        let vms: Vec<(&str, &PortPlan)> =
            plans.iter().filter(|(n, _)| n.as_str() != link).map(|(n, p)| (n.as_str(), p)).collect();
        let explicit: u64 = vms.iter().filter_map(|(_, p)| p.vm_link.min_bps).sum();
        let derived: u64 = vms
            .iter()
            .filter(|(_, p)| p.vm_link.min_bps.is_none())
            .filter_map(|(_, p)| p.vm_link.min_in_force(p.sla.as_ref()))
            .sum();
        let room = settings.link_rate_bps.saturating_sub(explicit);
        let scale = if derived > room { room as f64 / derived as f64 } else { 1.0 };
        let vms = vms
            .into_iter()
            .map(|(name, p)| {
                let v = &p.vm_link;
                let min_bps = match v.min_bps {
                    Some(m) => Some(m),
                    None => v.min_in_force(p.sla.as_ref()).map(|m| (m as f64 * scale) as u64).filter(|&m| m > 0),
                };
                let policy = VmLinkPolicy {
                    weight: v.weight,
                    min_bps,
                    max_bps: v.max_bps,
                    guarantee: v.guarantee_in_force(p.sla.as_ref()),
                    tenant: tenants.get(&v.tenant).map_or(usize::MAX, |t| t.index),
                    limit_packets: v.queue_frames,
                    latency_bps: lane_rate_bps(p).filter(|_| e.latency_lane),
                };
                (usize::from(numbers[name]), policy)
            })
            .collect();
        LinkPlan { settings, tenants: tenants.values().map(|t| (t.index, t.weight)).collect(), vms }
    }

    /// Makes every paced port's link and scheduler match the ports' plans: a new link for a
    /// newly paced port, the same link reconfigured live (no frame lost) otherwise.
    pub(super) fn configure_links(&mut self) -> Result<(), DatapathError> {
        let now_ns = crate::residence::TicksToNs::new(self.eal.tsc_hz()).ns(slaswitch_dpdk::rdtsc());
        let plans: BTreeMap<String, PortPlan> = self.ports.iter().map(|(n, e)| (n.clone(), e.plan.clone())).collect();
        let numbers: BTreeMap<&str, u16> = self.ports.iter().map(|(n, e)| (n.as_str(), e.spec.number)).collect();
        let mut links = Vec::new();
        for (name, entry) in &self.ports {
            if entry.plan.link.link_rate_bps > 0 {
                links.push((name.clone(), self.link_plan(name, &plans, &numbers, &self.tenants)));
            }
        }
        for (name, link_plan) in links {
            let entry = self.ports.get_mut(&name).expect("listed");
            let watch = entry.plan.link.nic_fallback;
            match &entry.paced {
                Some(link) => link.configure(link_plan, watch, now_ns)?,
                None => entry.paced = Some(Arc::new(PacedLink::new(link_plan, watch, now_ns, self.eal.tsc_hz())?)),
            }
        }
        Ok(())
    }

    /// Port `number`'s frames through every paced link, summed.
    pub(super) fn link_out(&self, number: u16) -> LinkOut {
        let mut out = LinkOut::default();
        for link in self.ports.values().filter_map(|p| p.paced.as_ref()) {
            out.add(link.vm_counters(number).read());
        }
        out
    }

    /// Port `number`'s frames that left through paced links, every link together.
    pub(super) fn link_residence(&self, number: u16) -> LinkResidence {
        let mut all = LinkResidence::default();
        for r in self.ports.values().filter_map(|p| p.paced.as_ref()?.residence(number)) {
            all.total.merge(&r.total);
            all.queue_wait.merge(&r.queue_wait);
            all.unstalled.merge(&r.unstalled);
        }
        all
    }

    /// Port `number`'s frames that kernel ports' senders sent (`crate::kernel_tx`), every
    /// kernel port together: residence of all, and of those no PMD stall touched.
    pub(super) fn kernel_sent_residence(&self, number: u16) -> (Histogram, Histogram) {
        let (mut all, mut unstalled) = (Histogram::default(), Histogram::default());
        for (frames, quiet) in self.ports.values().filter_map(|p| p.kernel_tx.as_ref()?.shared().residence(number)) {
            all.merge(&frames);
            unstalled.merge(&quiet);
        }
        (all, unstalled)
    }

    /// The scheduler of paced port `name` and every VM in it.
    pub fn link_stats(&self, name: &str) -> Result<LinkStats, DatapathError> {
        let entry = self.ports.get(name).ok_or_else(|| DatapathError::NoPort(name.to_string()))?;
        let link = entry.paced.as_ref().ok_or_else(|| DatapathError::NotPaced(name.to_string()))?;
        let sources: Vec<&PortEntry> = self.ports.values().filter(|p| p.spec.name != name).collect();
        let numbers: Vec<u16> = sources.iter().map(|p| p.spec.number).collect();
        let (plan, views) = link.view(&numbers);
        let tenant_name = |index: usize| {
            self.tenants.iter().find(|(_, t)| t.index == index).map_or("?".to_string(), |(n, _)| n.clone())
        };
        let mut vms = Vec::new();
        for (p, view) in sources.iter().zip(views) {
            let (Some(view), Some(policy)) = (view, plan.vms.get(&usize::from(p.spec.number))) else { continue };
            let c = link.vm_counters(p.spec.number);
            vms.push(LinkVmStats {
                name: p.spec.name.clone(),
                number: p.spec.number,
                weight: policy.weight,
                min_bps: policy.min_bps,
                max_bps: policy.max_bps,
                guarantee: policy.guarantee,
                tenant: tenant_name(policy.tenant),
                latency_bps: policy.latency_bps,
                queue_limit: policy.limit_packets,
                queued_frames: view.packets,
                queued_bytes: view.bytes,
                guarantee_bps: view.guarantee_bps,
                state: view.state,
                out: c.read(),
            });
        }
        let s = plan.settings;
        Ok(LinkStats {
            name: name.to_string(),
            scheduler: s.kind,
            link_rate_bps: s.link_rate_bps,
            drop_policy: if s.head_drop { DropPolicy::Head } else { DropPolicy::Tail },
            ancs_period_us: s.ancs_period_ns / 1_000,
            ratelimit_period_us: s.ratelimit_period_ns / 1_000,
            queued_frames: link.queued(),
            sent_ahead_frames: link.sent_ahead(),
            tenants: self.tenants(),
            vms,
        })
    }

    /// Every paced port's name.
    pub fn paced_ports(&self) -> Vec<String> {
        self.ports.values().filter(|p| p.paced.is_some()).map(|p| p.spec.name.clone()).collect()
    }

    /// Tenants and their weights.
    pub fn tenants(&self) -> BTreeMap<String, u32> {
        self.tenants.iter().map(|(n, t)| (n.clone(), t.weight)).collect()
    }

    /// Adds a tenant or changes its weight, live on every paced link.
    pub fn set_tenant(&mut self, name: &str, weight: u32) -> Result<(), DatapathError> {
        slaswitch_config::link_policy::valid_tenant_name(name)?;
        if !TENANT_WEIGHTS.contains(&weight) {
            let (min, max) = TENANT_WEIGHTS.into_inner();
            return Err(DatapathError::TenantWeight { weight, min, max });
        }
        let index = match self.tenants.get(name) {
            Some(t) => t.index,
            None => (0..).find(|i| !self.tenants.values().any(|t| t.index == *i)).expect("a free index"),
        };
        let old = self.tenants.insert(name.to_string(), Tenant { index, weight });
        if let Err(e) = self.configure_links() {
            match old {
                Some(t) => self.tenants.insert(name.to_string(), t),
                None => self.tenants.remove(name),
            };
            let _ = self.configure_links();
            return Err(e);
        }
        Ok(())
    }

    /// Removes a tenant no port names.
    pub fn del_tenant(&mut self, name: &str) -> Result<(), DatapathError> {
        if name == DEFAULT_TENANT {
            return Err(DatapathError::DefaultTenant(DEFAULT_TENANT));
        }
        if !self.tenants.contains_key(name) {
            return Err(DatapathError::NoTenant(name.to_string()));
        }
        let users: Vec<&str> =
            self.ports.values().filter(|p| p.plan.vm_link.tenant == name).map(|p| p.spec.name.as_str()).collect();
        if !users.is_empty() {
            return Err(DatapathError::TenantInUse { name: name.to_string(), ports: users.join(", ") });
        }
        let old = self.tenants.remove(name).expect("checked");
        if let Err(e) = self.configure_links() {
            self.tenants.insert(name.to_string(), old);
            let _ = self.configure_links();
            return Err(e);
        }
        Ok(())
    }
}
