//! Turns every port's settings into what its PMD enforces, and applies the admission rules of
//! seed 000 Sec. IV before anything changes:
//! 1. purchased bandwidths add up to no more than the uplink's line rate (times the
//!    over-commitment the fleet's master granted, `link_overcommit`);
//! 2. the cycles allocated on a PMD add up to no more than its core's cycles.
//!
//! A port's cycles are its `cycles_per_sec` when given, else the bandwidth-CPU model's
//! C_alloc = prod(R_i) * C_single for its purchase (Sec. III). R_i depend on the other ports (how
//! many VMs share the PMD), so one change can move every allocation on a PMD: the whole plan is
//! computed for the candidate configuration and either taken whole or refused.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::model::{FactorTable, ModelEntry, StageCycles};
use slaswitch_qos::cpu::water_fill::DELIVERABLE_CORE_SHARE;
use slaswitch_qos::cpu::{Allocation, BandwidthModel, CycleLimit, Deployment, FlowCount};

/// The cycles a PMD's core can give its ports: [`DELIVERABLE_CORE_SHARE`] of `capacity`.
pub fn deliverable_cycles_per_sec(capacity: u64) -> u64 {
    (capacity as f64 * DELIVERABLE_CORE_SHARE) as u64
}

use crate::error::ConfigError;
use crate::port::PortSpec;
use crate::port_settings::PortSettings;

pub use crate::port_plan::{Candidate, PortPlan};

/// Plans every port. `changed` names the port being changed, for the error messages.
pub fn plan(
    candidates: &[Candidate<'_>],
    model: Option<&BandwidthModel>,
    pmd_count: usize,
    core_cycles_per_sec: u64,
    changed: &str,
) -> Result<BTreeMap<String, PortPlan>, ConfigError> {
    let mut slas = BTreeMap::new();
    let mut vms_per_pmd: BTreeMap<usize, u32> = BTreeMap::new();
    for c in candidates {
        let settings = c.settings;
        if let Some(sla) = settings.sla {
            *vms_per_pmd.entry(c.pmd_core).or_default() += 1;
            slas.insert(c.spec.name.clone(), sla);
        }
    }
    let mut plans = BTreeMap::new();
    for c in candidates {
        let settings = c.settings;
        let mut cpu_qos = settings.cpu_qos;
        let sla = slas.get(&c.spec.name).copied();
        let mut allocation = None;
        if let (Some(sla), CycleLimit::Unlimited) = (sla, cpu_qos.limit) {
            let model = model.ok_or_else(|| ConfigError::Purchase {
                port: c.spec.name.clone(),
                why: "bandwidth_bps needs the bandwidth-CPU model of this host (run `slaswitch calibrate`), or give cycles_per_sec".into(),
            })?;
            let deployment = Deployment {
                vm_count: vms_per_pmd[&c.pmd_core],
                numa_remote: sla.numa_remote,
                pmd_count: pmd_count as u32,
            };
            let a = model
                .allocate(sla.bandwidth_bps, sla.profile, deployment)
                .map_err(|why| ConfigError::Purchase { port: c.spec.name.clone(), why: why.to_string() })?;
            cpu_qos = cpu_qos.with_cycles(a.cycles_per_sec.max(1));
            cpu_qos.bucket_depth_cycles = Some(ring_depth_cycles(&a, settings.rx_ring_descriptors));
            allocation = Some(a);
        }
        let plan = PortPlan {
            cpu_qos,
            policing: settings.policing,
            tx_ring_descriptors: settings.tx_ring_descriptors,
            sla,
            allocation,
            link: settings.link,
            egress: settings.egress,
            vm_link: settings.vm_link.clone(),
        };
        plans.insert(c.spec.name.clone(), plan);
    }
    admit_cycles(candidates, &plans, core_cycles_per_sec, changed)?;
    admit_bandwidth(candidates, &plans, changed)?;
    crate::latency_slo::admit(candidates, &plans, core_cycles_per_sec, changed)?;
    Ok(plans)
}

/// A purchase's bucket depth: the cycles one full ring of its profile's packets costs, so a
/// VM whose frames arrive in bursts its ring can hold is served what it bought even after a
/// dry spell (`docs/deviations.md`, bucket depth).
pub fn ring_depth_cycles(a: &Allocation, ring_descriptors: u16) -> u64 {
    let cycles_per_packet = a.cycles_per_sec as f64 / a.packets_per_sec.max(1.0);
    (cycles_per_packet * f64::from(ring_descriptors)).ceil() as u64
}

fn admit_cycles(
    candidates: &[Candidate<'_>],
    plans: &BTreeMap<String, PortPlan>,
    capacity: u64,
    changed: &str,
) -> Result<(), ConfigError> {
    let mut per_core: BTreeMap<usize, Vec<(&str, u64)>> = BTreeMap::new();
    for c in candidates {
        let cycles = plans[&c.spec.name].cpu_qos.limit.alloc_cycles_per_sec();
        if cycles > 0 {
            per_core.entry(c.pmd_core).or_default().push((&c.spec.name, cycles));
        }
    }
    let deliverable = deliverable_cycles_per_sec(capacity);
    for (core, ports) in per_core {
        let total: u64 = ports.iter().map(|(_, c)| c).sum();
        if total > deliverable {
            let list: Vec<String> = ports.iter().map(|(n, c)| format!("{n} {c}")).collect();
            return Err(ConfigError::Refused {
                changed: changed.into(),
                why: format!(
                    "the ports of the PMD on core {core} would be allocated {total} cycles/s, more than the core's {capacity} can deliver to its ports ({:.0}%: {deliverable}; the rest is the PMD's own work) ({})",
                DELIVERABLE_CORE_SHARE * 100.0,
                list.join(", ")
                ),
            });
        }
    }
    Ok(())
}

fn admit_bandwidth(
    candidates: &[Candidate<'_>],
    plans: &BTreeMap<String, PortPlan>,
    changed: &str,
) -> Result<(), ConfigError> {
    let uplinks: Vec<&Candidate> = candidates.iter().filter(|c| plans[&c.spec.name].link.uplink).collect();
    if uplinks.len() > 1 {
        let names: Vec<&str> = uplinks.iter().map(|c| c.spec.name.as_str()).collect();
        return Err(ConfigError::Refused {
            changed: changed.into(),
            why: format!("only one port can be the uplink (uplink=true on {})", names.join(" and ")),
        });
    }
    let Some(uplink) = uplinks.first() else { return Ok(()) };
    let line_rate = plans[&uplink.spec.name].link.link_rate_bps;
    if line_rate == 0 {
        return Err(ConfigError::Refused {
            changed: changed.into(),
            why: format!("the uplink {} needs link_rate_bps (its NIC's line rate)", uplink.spec.name),
        });
    }
    let purchased: Vec<(&str, u64)> = candidates
        .iter()
        .filter_map(|c| plans[&c.spec.name].sla.map(|s| (c.spec.name.as_str(), s.bandwidth_bps)))
        .collect();
    let total: u64 = purchased.iter().map(|(_, b)| b).sum();
    // The fleet's master may grant over-commitment by its failure model (seed 003 Sec. 2.2).
    let permille = plans[&uplink.spec.name].link.overcommit_permille;
    let allowed = (u128::from(line_rate) * u128::from(permille) / 1000) as u64;
    if total > allowed {
        let list: Vec<String> = purchased.iter().map(|(n, b)| format!("{n} {b}")).collect();
        let times = if permille == 1000 {
            String::new()
        } else {
            format!(" times link_overcommit {}", f64::from(permille) / 1000.0)
        };
        return Err(ConfigError::Refused {
            changed: changed.into(),
            why: format!(
                "purchased bandwidth would add up to {total} bit/s, more than the uplink {}'s link_rate_bps {line_rate}{times} ({})",
                uplink.spec.name,
                list.join(", ")
            ),
        });
    }
    // The link's half: minimums set by hand are reserved on the uplink too (seed 002 Sec. 3.3).
    let minimums: Vec<(&str, u64)> = candidates
        .iter()
        .filter_map(|c| plans[&c.spec.name].vm_link.min_bps.map(|m| (c.spec.name.as_str(), m)))
        .collect();
    let total: u64 = minimums.iter().map(|(_, m)| m).sum();
    if total > line_rate {
        let list: Vec<String> = minimums.iter().map(|(n, m)| format!("{n} {m}")).collect();
        return Err(ConfigError::Refused {
            changed: changed.into(),
            why: format!(
                "link_min_bps would add up to {total} bit/s, more than the uplink {}'s link_rate_bps {line_rate} ({})",
                uplink.spec.name,
                list.join(", ")
            ),
        });
    }
    Ok(())
}

/// A small model for tests of the allocation maths and its users: every row 200 cycles; two VMs
/// make each packet 1.1x dearer.
pub fn example_model() -> BandwidthModel {
    let row = |b, flows| ModelEntry {
        packet_bytes: b,
        flows,
        cycles_per_packet: StageCycles { ingress: 100.0, classification: 50.0, egress: 50.0 },
        measured_kpps: 1.0,
        emc_miss_share: None,
        measured_cycles_per_packet: None,
    };
    BandwidthModel {
        machine: "t".into(),
        tsc_hz: 1_000_000_000,
        measured_unix_secs: 0,
        method: "t".into(),
        entries: [64, 1500].iter().flat_map(|&b| [row(b, FlowCount::Single), row(b, FlowCount::Many)]).collect(),
        vm_count: FactorTable { points: vec![(1, 1.0), (2, 1.1)], source: "measured".into() },
        numa_remote: FactorTable { points: vec![(1, 1.4)], source: "given".into() },
        pmd_count: FactorTable { points: vec![(1, 1.0)], source: "given".into() },
        batch: Default::default(),
    }
}

/// A null port with `opts`, validated, for tests of the planner and its users.
pub fn example_port(name: &str, opts: &[(&str, &str)]) -> (PortSpec, PortSettings) {
    let spec = PortSpec {
        name: name.into(),
        port_type: crate::PortType::Null,
        number: 1,
        options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let settings = spec.validate().expect("example options are valid");
    (spec, settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> BandwidthModel {
        example_model()
    }

    /// A null port with `opts`, and its settings parsed as the data plane parses them.
    fn port(name: &str, opts: &[(&str, &str)]) -> (PortSpec, PortSettings) {
        example_port(name, opts)
    }

    fn on_core_0((spec, settings): &(PortSpec, PortSettings)) -> Candidate<'_> {
        Candidate { spec, settings, pmd_core: 0 }
    }

    #[test]
    fn the_vm_count_coefficient_moves_every_allocation_on_the_pmd() {
        let a = port("vm1", &[("bandwidth_bps", "100M"), ("profile_packet_bytes", "64")]);
        let b = port("vm2", &[("bandwidth_bps", "100M"), ("profile_packet_bytes", "64")]);
        let alone = plan(&[on_core_0(&a)], Some(&model()), 1, 1_000_000_000, "vm1").unwrap();
        let both = plan(&[on_core_0(&a), on_core_0(&b)], Some(&model()), 1, 1_000_000_000, "vm2").unwrap();
        let c1 = alone["vm1"].cpu_qos.limit.alloc_cycles_per_sec();
        let c2 = both["vm1"].cpu_qos.limit.alloc_cycles_per_sec();
        // 100 Mbit/s of 64-byte frames = 195312.5 pps x 200 cycles.
        assert_eq!(c1, 39_062_500);
        assert_eq!(c2, (39_062_500.0f64 * 1.1).ceil() as u64);
    }

    #[test]
    fn admission_refuses_too_many_cycles_and_too_much_bandwidth() {
        let big = port("vm1", &[("bandwidth_bps", "2G"), ("profile_packet_bytes", "64")]);
        let e = plan(&[on_core_0(&big)], Some(&model()), 1, 100_000_000, "vm1").unwrap_err().to_string();
        assert!(e.contains("core 0") && e.contains("more than the core's 100000000"), "{e}");
        let up = port("up", &[("uplink", "true"), ("link_rate_bps", "1G")]);
        let v = port("vm1", &[("bandwidth_bps", "1.5G"), ("cycles_per_sec", "1000")]);
        let e = plan(&[on_core_0(&up), on_core_0(&v)], None, 1, 1_000_000_000, "vm1").unwrap_err().to_string();
        assert!(e.contains("1500000000") && e.contains("link_rate_bps 1000000000"), "{e}");
        // Over-committed by the fleet's master: 1.5x allowed, 2x still refused; the core's
        // cycles are checked as before.
        let up = port("up", &[("uplink", "true"), ("link_rate_bps", "1G"), ("link_overcommit", "1.5")]);
        plan(&[on_core_0(&up), on_core_0(&v)], None, 1, 1_000_000_000, "vm1").unwrap();
        let v2 = port("vm1", &[("bandwidth_bps", "2G"), ("cycles_per_sec", "1000")]);
        let e = plan(&[on_core_0(&up), on_core_0(&v2)], None, 1, 1_000_000_000, "vm1").unwrap_err().to_string();
        assert!(e.contains("times link_overcommit 1.5"), "{e}");
        let hungry = port("vm1", &[("bandwidth_bps", "1.5G"), ("cycles_per_sec", "2000000000")]);
        let e = plan(&[on_core_0(&up), on_core_0(&hungry)], None, 1, 1_000_000_000, "vm1").unwrap_err().to_string();
        assert!(e.contains("core 0"), "{e}");
        let bad = PortSpec { options: [("link_overcommit".to_string(), "0.5".to_string())].into(), ..up.0.clone() };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("link_overcommit=0.5: a ratio from 1 to 100"), "{e}");
        let lone = port("vm1", &[("bandwidth_bps", "1G")]);
        let e = plan(&[on_core_0(&lone)], None, 1, 1_000_000_000, "vm1").unwrap_err().to_string();
        assert!(e.contains("slaswitch calibrate"), "{e}");
    }

    // Latency SLOs (`latency_p99_us`, crate::latency_slo): admitted only above what the
    // latency class can promise with the purchases in force.

    /// Plans `ports` on core 0 of a 1 GHz host with the example model.
    fn admit(ports: &[&(PortSpec, PortSettings)]) -> Result<(), String> {
        let candidates: Vec<Candidate> = ports.iter().map(|p| on_core_0(p)).collect();
        plan(&candidates, Some(&model()), 1, 1_000_000_000, "vm1").map(|_| ()).map_err(|e| e.to_string())
    }

    fn vm(slo_us: &str) -> (PortSpec, PortSettings) {
        let opts = [("bandwidth_bps", "10M"), ("profile_packet_bytes", "64"), ("priority", "1")];
        port("vm1", &[opts.as_slice(), &[("latency_p99_us", slo_us)]].concat())
    }

    #[test]
    fn an_slo_is_admitted_only_above_what_the_class_can_promise() {
        // The example model prices a 64-byte frame at 200 cycles: a batch of 32 is 6.4 us on a
        // 1 GHz core; the flood (no priced purchase) is taken to cost as much.
        let flood = port("flood", &[("cycles_per_sec", "500000000")]);
        admit(&[&vm("13"), &flood]).unwrap();
        let e = admit(&[&vm("12"), &flood]).unwrap_err();
        assert!(e.contains("vm1's latency_p99_us=12") && e.contains("12.8 us on the PMD on core 0"), "{e}");
        // A 100 Mbit/s paced uplink adds a full frame on the wire and its own: 2 x 1542 bytes.
        let up = port("up", &[("uplink", "true"), ("link_rate_bps", "100M")]);
        admit(&[&vm("300"), &flood, &up]).unwrap();
        let e = admit(&[&vm("200"), &flood, &up]).unwrap_err();
        assert!(e.contains("246.7 us on the uplink"), "{e}");
        // Another latency-class VM on the link: its burst is ahead too.
        let other = port("vm2", &[("bandwidth_bps", "50M"), ("profile_packet_bytes", "64"), ("priority", "2")]);
        let e = admit(&[&vm("300"), &flood, &up, &other]).unwrap_err();
        assert!(e.contains("on the uplink"), "{e}");
        let off = port("up", &[("uplink", "true"), ("link_rate_bps", "100M"), ("link_latency", "off")]);
        let e = admit(&[&vm("300"), &off]).unwrap_err();
        assert!(e.contains("latency_p99_us=300") && e.contains("link_latency=off"), "{e}");
    }

    #[test]
    fn an_slo_needs_a_purchase_and_a_latency_class() {
        let spec = |opts: &[(&str, &str)]| PortSpec {
            name: "vm1".into(),
            port_type: crate::PortType::Null,
            number: 1,
            options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let e = spec(&[("latency_p99_us", "50")]).validate().unwrap_err().to_string();
        assert!(e.contains("latency_p99_us=50") && e.contains("bandwidth_bps"), "{e}");
        let e = spec(&[("latency_p99_us", "50"), ("bandwidth_bps", "1M")]).validate().unwrap_err().to_string();
        assert!(e.contains("latency_p99_us=50") && e.contains("priority 1 or 2 (this port has 8)"), "{e}");
        let e = spec(&[("latency_p99_us", "0"), ("bandwidth_bps", "1M")]).validate().unwrap_err().to_string();
        assert!(e.contains("latency_p99_us=0") && e.contains("from 1 to 1000000"), "{e}");
    }
}
