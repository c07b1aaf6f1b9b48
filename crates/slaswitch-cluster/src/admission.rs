//! The master's admission and placement of purchases (seed 003 Sec. 4, with the failure model
//! of Sec. 2.2): which host takes a VM's guarantee, with the host's figures, or why none does.
//! The maths is `slaswitch_qos::placement`, which the datacenter simulator uses too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use slaswitch_qos::placement::{place, HostLoad, Placed, Policy, Refusal, Tenancy};

use crate::purchase::{unix_ns, Admission, Purchase};
use crate::utilization::UtilizationBook;

/// How the master admits purchases.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdmissionSettings {
    /// The rule a host's guarantees must keep.
    pub policy: Policy,
    /// The utilization assumed of a VM measured for fewer than `min_samples` cycles (seed 003
    /// Sec. 6.4 simulates ρ = 15%).
    pub prior_utilization: f64,
    /// Billed cycles after which a VM's measured mean rate replaces the prior.
    pub min_samples: u64,
}

impl Default for AdmissionSettings {
    /// The failure model at 5% (seed 003 Sec. 4), at most 10x, a 15% prior over a minute.
    fn default() -> Self {
        AdmissionSettings {
            policy: Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 },
            prior_utilization: 0.15,
            min_samples: 60,
        }
    }
}

impl AdmissionSettings {
    /// Checks every field, naming the one that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        self.policy.validate()?;
        if !(self.prior_utilization.is_finite() && self.prior_utilization > 0.0 && self.prior_utilization <= 1.0) {
            return Err(format!("prior_utilization={}: give a share above 0 and at most 1", self.prior_utilization));
        }
        Ok(())
    }

    /// The mean demand admission assumes of `vm` with a guarantee of `guarantee_bps`: its
    /// measured mean rate once sampled long enough, else the prior times the guarantee.
    pub fn mean_demand_bps(&self, book: &UtilizationBook, vm: &str, guarantee_bps: f64) -> f64 {
        match book.vm(vm) {
            Some(d) if d.samples >= self.min_samples.max(1) => d.mean_rate_bps().unwrap_or(0.0),
            _ => self.prior_utilization * guarantee_bps,
        }
    }
}

/// One host as admission sees it: its link (0 for a host not alive) and its guaranteed VMs.
type HostVms<'a> = (f64, Vec<(&'a str, Tenancy)>);

/// The purchases in force, grouped by host once, as admission sees them.
pub struct Fleet<'a> {
    settings: &'a AdmissionSettings,
    book: &'a UtilizationBook,
    hosts: BTreeMap<&'a str, HostVms<'a>>,
}

impl<'a> Fleet<'a> {
    /// `purchases` on the hosts they are placed on; `capacity_bps` gives each live host's link.
    pub fn new(
        settings: &'a AdmissionSettings,
        book: &'a UtilizationBook,
        purchases: impl IntoIterator<Item = &'a Purchase>,
        capacity_bps: &'a BTreeMap<String, f64>,
    ) -> Fleet<'a> {
        let mut hosts: BTreeMap<&str, HostVms> =
            capacity_bps.iter().map(|(h, &c)| (h.as_str(), (c, Vec::new()))).collect();
        let mut fleet = Fleet { settings, book, hosts: BTreeMap::new() };
        for p in purchases {
            let Some(host) = p.host.as_deref() else { continue };
            let t = fleet.tenancy(p);
            if t.guarantee_bps > 0.0 {
                hosts.entry(host).or_insert((0.0, Vec::new())).1.push((p.vm.as_str(), t));
            }
        }
        fleet.hosts = hosts;
        fleet
    }

    /// `host`'s guaranteed VMs, leaving out `except` (the VM being decided).
    pub fn load(&self, host: &str, except: &str) -> HostLoad {
        let Some((capacity_bps, vms)) = self.hosts.get(host) else { return HostLoad::default() };
        let vms = vms.iter().filter(|(vm, _)| *vm != except).map(|(_, t)| *t).collect();
        HostLoad { capacity_bps: *capacity_bps, vms }
    }

    /// `p` as admission sees it: its guarantee and its mean demand.
    pub fn tenancy(&self, p: &Purchase) -> Tenancy {
        let guarantee_bps = p.guaranteed_bps();
        Tenancy { guarantee_bps, mean_demand_bps: self.settings.mean_demand_bps(self.book, &p.vm, guarantee_bps) }
    }

    /// The live hosts, by name.
    pub fn hosts(&self) -> impl Iterator<Item = &str> + '_ {
        self.hosts.iter().filter(|(_, (c, _))| *c > 0.0).map(|(h, _)| *h)
    }

    /// The answer to `p`: on `candidates` (its host when it has one, else every live host, in
    /// the order given), the first that admits it.
    pub fn decide(&self, p: &Purchase, candidates: &[String]) -> Admission {
        let vm = self.tenancy(p);
        if candidates.is_empty() {
            return Admission::refused(None, "no live host to place it on".into());
        }
        let loads: Vec<(String, HostLoad)> = candidates.iter().map(|h| (h.clone(), self.load(h, &p.vm))).collect();
        let placed = if vm.guarantee_bps <= 0.0 {
            // Fairness alone takes nothing from a host's guarantees.
            let (h, load) = &loads[0];
            Ok(Placed { host: h.clone(), with_vm: load.assess(), passed_over: Vec::new() })
        } else {
            place(&self.settings.policy, loads.iter().map(|(h, l)| (h.clone(), l)), vm)
        };
        let text = |refusals: &[(String, Refusal)]| -> Vec<String> {
            refusals.iter().map(|(h, r)| format!("host {h}: {r}")).collect()
        };
        match placed {
            Ok(placed) => Admission {
                admitted: true,
                host: Some(placed.host),
                figures: Some(placed.with_vm),
                reason: None,
                passed_over: text(&placed.passed_over),
                answered_unix_ns: unix_ns(),
            },
            Err(refusals) => {
                let host = (candidates.len() == 1).then(|| candidates[0].clone());
                let mut a = Admission::refused(host, text(&refusals).join("; "));
                a.figures = (refusals.len() == 1).then(|| refusals[0].1.with_vm);
                a
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slaswitch_qos::egress::softbw::Guarantee;

    fn bought(vm: &str, host: Option<&str>, rate_bps: u64) -> Purchase {
        Purchase {
            vm: vm.into(),
            tenant: "t".into(),
            host: host.map(str::to_string),
            guarantee: Guarantee::Strict { rate_bps },
            cycles: BTreeMap::new(),
            bought_unix_ms: 0,
            admission: None,
        }
    }

    #[test]
    fn a_purchase_goes_to_the_first_host_whose_failure_stays_under_the_target() {
        let settings = AdmissionSettings { prior_utilization: 0.3, ..AdmissionSettings::default() };
        let placed: Vec<Purchase> = (0..4).map(|i| bought(&format!("a{i}"), Some("h1"), 250_000_000)).collect();
        let book = UtilizationBook::default();
        let capacity_bps = [("h1".to_string(), 1e9), ("h2".to_string(), 1e9)].into();
        let fleet = Fleet::new(&settings, &book, &placed, &capacity_bps);
        // Four VMs at a 30% prior fill h1's link: a fifth still fits there (1.25x, about 0.3%).
        let a = fleet.decide(&bought("n", None, 250_000_000), &["h1".into(), "h2".into()]);
        assert!(a.admitted && a.host.as_deref() == Some("h1"), "{a:?}");
        let f = a.figures.unwrap();
        assert!((f.committed_ratio - 1.25).abs() < 1e-9 && f.failure_probability <= 0.05, "{f:?}");
        // A guarantee of the whole link would take h1 to 2x and about 11%: h2 takes it, and
        // the answer says why h1 did not.
        let a = fleet.decide(&bought("big", None, 1_000_000_000), &["h1".into(), "h2".into()]);
        assert_eq!(a.host.as_deref(), Some("h2"), "{a:?}");
        assert!(a.passed_over[0].starts_with("host h1: failure probability would be 0.11"), "{a:?}");
        // Only h1 allowed (the VM runs there): refused, naming the figures.
        let a = fleet.decide(&bought("big", None, 1_000_000_000), &["h1".into()]);
        assert!(!a.admitted && a.host.as_deref() == Some("h1"));
        assert!(a.reason.as_deref().unwrap().starts_with("host h1: failure probability would be"), "{a:?}");
    }

    #[test]
    fn measured_rates_replace_the_prior_once_sampled_long_enough() {
        let settings = AdmissionSettings { min_samples: 2, ..AdmissionSettings::default() };
        let mut book = UtilizationBook::default();
        let e = book.entries.entry((crate::utilization::Owner::Vm, "a".into())).or_default();
        e.add(1.0, 100e6);
        assert_eq!(settings.mean_demand_bps(&book, "a", 100e6), 15e6, "one sample: the prior");
        book.entries.get_mut(&(crate::utilization::Owner::Vm, "a".into())).unwrap().add(0.5, 50e6);
        assert_eq!(settings.mean_demand_bps(&book, "a", 100e6), 75e6);
    }
}
