//! `slaswitch-sim datacenter --placement`: how many VMs a fleet sells and how often their
//! guarantees fail when the master places them by their guarantees alone (no over-commitment,
//! or a fixed ratio such as seed 003's 4x) or by the failure model of Sec. 2.2 with each VM's
//! measured utilization (the master's own code, `slaswitch_qos::placement`).
//!
//! Workload: seed 003 Sec. 6.4's strict VMs (a 250 Mbit/s guarantee, demand drawn every second,
//! exponential), except that VMs differ: VM i's mean utilization ρ_i is exponential around ρ
//! (clamped to 1-100%), as datacenter tenants do, and its demand is exponential around
//! `ρ_i` times its guarantee. Before it is placed each VM is measured for `warmup_secs` seconds,
//! as the master bills it; the failure model uses that sample mean. VMs arrive one by one and go
//! to the first server that admits them; one refused by every server is not sold. Then every
//! server's link is shared every second by SoftBW's fluid rule, and a VM fails in a second when
//! it gets less than the smaller of its demand and its guarantee. Only the servers' egress links
//! are modelled (the fabric and the receivers' links are left out).

use rayon::prelude::*;
use serde::Serialize;
use slaswitch_qos::egress::softbw_fluid::{fluid_rates, FluidDemand, FluidScratch};
use slaswitch_qos::placement::{place, HostLoad, Policy, Tenancy};

use crate::datacenter::{draw, exponential};
use crate::SimError;

/// The study's settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlacementStudy {
    /// Servers.
    pub servers: usize,
    /// Seconds simulated after placement.
    pub secs: u32,
    /// The fleet's mean utilization per VM (ρ).
    pub rho: f64,
    /// Each server's link, Mbit/s.
    pub link_mbps: f64,
    /// Each VM's guarantee, Mbit/s.
    pub guarantee_mbps: f64,
    /// VMs offered, per server.
    pub offered_per_server: usize,
    /// Seconds each VM is measured before it is placed.
    pub warmup_secs: u32,
    /// Seed of every draw.
    pub seed: u64,
}

/// What one policy gave.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlacementOutcome {
    /// The policy.
    pub policy: Policy,
    /// VMs sold (placed).
    pub placed: usize,
    /// VMs refused by every server.
    pub refused: usize,
    /// Mean over servers of their guarantees over their link.
    pub mean_committed_ratio: f64,
    /// Traffic over all links' capacity, mean over the seconds.
    pub utilization: f64,
    /// Share of placed VMs that failed in at least one second.
    pub vms_failed_share: f64,
    /// Share of VM-seconds that failed.
    pub vm_seconds_failed_share: f64,
    /// Share of server-seconds whose demands exceeded the link (the event of Eq. 2).
    pub server_seconds_over_share: f64,
    /// Mean over servers of Eq. 2's prediction of that share, from the measured means.
    pub predicted_over_share: f64,
}

impl PlacementStudy {
    /// Refuses settings the study cannot run, naming the field.
    pub fn validate(&self) -> Result<(), SimError> {
        for (name, v) in [("rho", self.rho), ("link_mbps", self.link_mbps), ("guarantee_mbps", self.guarantee_mbps)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(SimError::setting(name, v, "give a finite number above 0"));
            }
        }
        if self.servers == 0 || self.secs == 0 || self.offered_per_server == 0 {
            return Err(SimError::setting(
                "servers, secs and offered_per_server",
                format!("{}, {} and {}", self.servers, self.secs, self.offered_per_server),
                "give at least 1 of each",
            ));
        }
        Ok(())
    }

    /// VM `vm`'s mean utilization.
    fn rho_of(&self, vm: usize) -> f64 {
        exponential(self.rho, draw(self.seed, vm, 0, 11)).clamp(0.01, 1.0)
    }

    /// VM `vm`'s demand in second `t` (negative seconds: its measurement before placement).
    fn demand_bps(&self, vm: usize, t: u32) -> f64 {
        let mean = self.rho_of(vm) * self.guarantee_mbps * 1e6;
        exponential(mean, draw(self.seed, vm, t, 12)).min(self.link_mbps * 1e6)
    }

    /// Places the offered VMs under `policy`: each server's VMs.
    fn place(&self, policy: &Policy) -> (Vec<Vec<usize>>, Vec<HostLoad>, usize) {
        let capacity_bps = self.link_mbps * 1e6;
        let mut loads = vec![HostLoad { capacity_bps, vms: Vec::new() }; self.servers];
        let mut members = vec![Vec::new(); self.servers];
        let mut refused = 0;
        for vm in 0..self.servers * self.offered_per_server {
            // Measured as the master bills it: the mean of its warm-up seconds.
            let measured = (0..self.warmup_secs).map(|t| self.demand_bps(vm, u32::MAX - t)).sum::<f64>()
                / f64::from(self.warmup_secs.max(1));
            let tenancy = Tenancy { guarantee_bps: self.guarantee_mbps * 1e6, mean_demand_bps: measured };
            match place(policy, loads.iter().enumerate(), tenancy) {
                Ok(p) => {
                    loads[p.host].vms.push(tenancy);
                    members[p.host].push(vm);
                }
                Err(_) => refused += 1,
            }
        }
        (members, loads, refused)
    }

    /// Runs one policy.
    pub fn run(&self, policy: &Policy) -> PlacementOutcome {
        let (members, loads, refused) = self.place(policy);
        let link_bps = self.link_mbps * 1e6;
        let g_bps = self.guarantee_mbps * 1e6;
        // Per server: (VM-seconds failed per VM, seconds over the link, bits delivered).
        let per_server: Vec<(Vec<u32>, u32, f64)> = members
            .par_iter()
            .map_init(
                || (FluidScratch::default(), Vec::new(), Vec::new()),
                |(scratch, demands, rates), vms| {
                    let mut failed = vec![0u32; vms.len()];
                    let (mut over, mut bits) = (0u32, 0.0);
                    for t in 0..self.secs {
                        demands.clear();
                        demands.extend(
                            vms.iter()
                                .map(|&vm| FluidDemand { demand_bps: self.demand_bps(vm, t), guarantee_bps: g_bps }),
                        );
                        over += u32::from(demands.iter().map(|d| d.demand_bps).sum::<f64>() > link_bps);
                        fluid_rates(link_bps, demands, scratch, rates);
                        for (k, (d, r)) in demands.iter().zip(rates.iter()).enumerate() {
                            bits += r;
                            failed[k] += u32::from(*r + 1.0 < d.demand_bps.min(d.guarantee_bps));
                        }
                    }
                    (failed, over, bits)
                },
            )
            .collect();
        let placed: usize = members.iter().map(Vec::len).sum();
        let vm_secs = (placed as f64 * f64::from(self.secs)).max(1.0);
        let server_secs = self.servers as f64 * f64::from(self.secs);
        let failed: Vec<u32> = per_server.iter().flat_map(|(f, _, _)| f.iter().copied()).collect();
        PlacementOutcome {
            policy: *policy,
            placed,
            refused,
            mean_committed_ratio: loads.iter().map(|l| l.assess().committed_ratio).sum::<f64>() / self.servers as f64,
            utilization: per_server.iter().map(|s| s.2).sum::<f64>() / (server_secs * link_bps),
            vms_failed_share: failed.iter().filter(|&&s| s > 0).count() as f64 / placed.max(1) as f64,
            vm_seconds_failed_share: failed.iter().map(|&s| f64::from(s)).sum::<f64>() / vm_secs,
            server_seconds_over_share: per_server.iter().map(|s| f64::from(s.1)).sum::<f64>() / server_secs,
            predicted_over_share: loads.iter().map(|l| l.assess().failure_probability).sum::<f64>()
                / self.servers as f64,
        }
    }
}

/// Reads `guarantee:RATIO` or `failure-model:TARGET[:MAX_RATIO]`.
pub fn parse_policy(text: &str) -> Result<Policy, SimError> {
    let bad = || {
        SimError::setting(
            "placement",
            format!("'{text}'"),
            "give guarantee:RATIO or failure-model:TARGET[:MAX_RATIO] (e.g. guarantee:1, failure-model:0.05)",
        )
    };
    let mut parts = text.split(':');
    let number = |p: Option<&str>| p.and_then(|v| v.parse::<f64>().ok());
    let policy = match parts.next() {
        Some("guarantee") => Policy::Guarantee { max_ratio: number(parts.next()).ok_or_else(bad)? },
        Some("failure-model") => {
            let target_failure = number(parts.next()).ok_or_else(bad)?;
            let max_ratio = match parts.next() {
                Some(v) => number(Some(v)).ok_or_else(bad)?,
                None => 10.0,
            };
            Policy::FailureModel { target_failure, max_ratio }
        }
        _ => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    policy.validate().map_err(|why| SimError::setting("placement", format!("'{text}'"), why))?;
    Ok(policy)
}

/// The outcomes as a table; the gain is over the first policy's utilization.
pub fn render(study: &PlacementStudy, outcomes: &[PlacementOutcome]) -> String {
    let mut out = format!(
        "{} servers of {} Mbit/s, VMs of {} Mbit/s at a mean utilization of {} (each its own), {} offered per \
         server, measured {} s before placement, {} s simulated (slaswitch-sim: the simulator, not the data plane)\n",
        study.servers,
        study.link_mbps,
        study.guarantee_mbps,
        study.rho,
        study.offered_per_server,
        study.warmup_secs,
        study.secs
    );
    out += &format!(
        "{:<26} {:>7} {:>8} {:>9} {:>11} {:>6} {:>10} {:>12} {:>11} {:>10}\n",
        "placement", "placed", "refused", "ratio", "utilization", "gain", "VMs fail", "VM-s fail", "over link", "Eq. 2"
    );
    let base = outcomes.first().map_or(1.0, |o| o.utilization.max(1e-12));
    for o in outcomes {
        let name = match o.policy {
            Policy::Guarantee { max_ratio } => format!("guarantee {max_ratio}x"),
            Policy::FailureModel { target_failure, max_ratio } => {
                format!("failure model {target_failure} (<= {max_ratio}x)")
            }
        };
        out += &format!(
            "{:<26} {:>7} {:>8} {:>9.2} {:>11.4} {:>6.2} {:>10.4} {:>12.5} {:>11.5} {:>10.5}\n",
            name,
            o.placed,
            o.refused,
            o.mean_committed_ratio,
            o.utilization,
            o.utilization / base,
            o.vms_failed_share,
            o.vm_seconds_failed_share,
            o.server_seconds_over_share,
            o.predicted_over_share
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn study() -> PlacementStudy {
        PlacementStudy {
            servers: 20,
            secs: 200,
            rho: 0.15,
            link_mbps: 1000.0,
            guarantee_mbps: 250.0,
            offered_per_server: 30,
            warmup_secs: 60,
            seed: 7,
        }
    }

    #[test]
    fn the_failure_model_sells_more_than_no_over_commitment_and_keeps_near_its_target() {
        let s = study();
        let none = s.run(&Policy::Guarantee { max_ratio: 1.0 });
        let model = s.run(&Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 });
        assert_eq!(none.placed, 80, "four 250M VMs per 1G server");
        assert_eq!(none.vm_seconds_failed_share, 0.0, "no over-commitment, no failure");
        assert!(model.placed > 2 * none.placed, "{model:?}");
        assert!(model.utilization > 2.0 * none.utilization, "{model:?} against {none:?}");
        // The event Eq. 2 bounds stays near the target (the measured means are estimates).
        assert!(model.server_seconds_over_share < 0.1, "{model:?}");
        assert!(model.predicted_over_share <= 0.05 + 1e-9, "{model:?}");
    }

    #[test]
    fn policies_are_read_with_their_figures() {
        assert_eq!(parse_policy("guarantee:4").unwrap(), Policy::Guarantee { max_ratio: 4.0 });
        assert_eq!(
            parse_policy("failure-model:0.05").unwrap(),
            Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 }
        );
        for bad in ["guarantee", "guarantee:0.5", "failure-model:2", "best:1", "guarantee:1:2"] {
            assert!(parse_policy(bad).unwrap_err().to_string().contains("placement"), "{bad}");
        }
    }
}
