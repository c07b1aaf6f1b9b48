//! Admission of latency SLOs (`latency_p99_us`, ours, beyond the seeds): a purchase's promise
//! that its frames' residence in the switch, the paced uplink's queue included, stays under a
//! bound in every second. It is admitted only when the latency class can keep it with every
//! purchase in force, and refused naming the figures otherwise.
//!
//! What the class can promise is what neither scheduler can take away from it:
//! * on its PMD, HBS serves the latency classes first (seed 000 Sec. IV-B) but does not cut a
//!   batch short: a frame waits at most for one batch of a lower class already being served,
//!   one batch of each other latency-class port (they take turns), and its own batch;
//! * on the uplink, the link's latency class sends it ahead of the scheduler's choice (its
//!   purchase permitting, `slaswitch_qos::egress::latency_lane`), so it waits at most for the
//!   frame on the wire and the other latency-class VMs' bursts, then is serialised itself.
//!
//! A batch's cost is its port's priced cycles per packet (the model's rows); a port without a
//! priced purchase is taken to cost what the SLO's own port does per packet. What the bound
//! leaves out, and the switch counts when it happens: the host taking the PMD's core.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::latency_class::LATENCY_CLASSES;
use slaswitch_qos::egress::latency_lane::lane_burst_bytes;
use slaswitch_qos::link::WIRE_OVERHEAD_BYTES;

use crate::allocation::{Candidate, PortPlan};
use crate::error::ConfigError;

/// Frames a PMD serves of one port at a time (its rx burst).
const BATCH_PACKETS: f64 = 32.0;

/// The least residence p99 a latency-class port can be promised, and its parts, nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SloBound {
    /// Waiting for, and being served by, its PMD.
    pub pmd_ns: u64,
    /// Waiting for, and being serialised on, the paced uplink.
    pub link_ns: u64,
}

impl SloBound {
    /// Both parts.
    pub fn total_ns(&self) -> u64 {
        self.pmd_ns + self.link_ns
    }
}

/// Refuses a plan in which a port's SLO is below what its class can promise.
pub fn admit(
    candidates: &[Candidate<'_>],
    plans: &BTreeMap<String, PortPlan>,
    core_cycles_per_sec: u64,
    changed: &str,
) -> Result<(), ConfigError> {
    for c in candidates {
        let Some(slo_us) = plans[&c.spec.name].sla.and_then(|s| s.latency_p99_us) else { continue };
        let bound = bound(c, candidates, plans, core_cycles_per_sec)?;
        if bound.total_ns() > u64::from(slo_us) * 1_000 {
            return Err(ConfigError::Refused {
                changed: changed.into(),
                why: format!(
                    "{}'s latency_p99_us={slo_us} is below what its class can promise with the purchases in force: {:.1} us ({:.1} us on the PMD on core {}: a batch of a lower class, one of each other latency-class port and its own; {:.1} us on the uplink: the frame on the wire, the other latency-class VMs' bursts and its own frame)",
                    c.spec.name,
                    bound.total_ns() as f64 / 1e3,
                    bound.pmd_ns as f64 / 1e3,
                    c.pmd_core,
                    bound.link_ns as f64 / 1e3,
                ),
            });
        }
    }
    Ok(())
}

/// What port `c`'s class can promise it.
pub fn bound(
    c: &Candidate<'_>,
    candidates: &[Candidate<'_>],
    plans: &BTreeMap<String, PortPlan>,
    core_cycles_per_sec: u64,
) -> Result<SloBound, ConfigError> {
    let own = &plans[&c.spec.name];
    let own_cpp = cycles_per_packet(own).unwrap_or(0.0);
    let batch_ns = |p: &PortPlan| {
        BATCH_PACKETS * cycles_per_packet(p).unwrap_or(own_cpp) * 1e9 / core_cycles_per_sec.max(1) as f64
    };
    let neighbours = candidates.iter().filter(|o| o.pmd_core == c.pmd_core && o.spec.name != c.spec.name);
    let (mut lower_ns, mut latency_ns) = (0.0f64, 0.0);
    for o in neighbours {
        let p = &plans[&o.spec.name];
        if p.cpu_qos.priority <= LATENCY_CLASSES {
            latency_ns += batch_ns(p);
        } else {
            lower_ns = lower_ns.max(batch_ns(p));
        }
    }
    let pmd_ns = (lower_ns + latency_ns + batch_ns(own)).ceil() as u64;
    Ok(SloBound { pmd_ns, link_ns: link_ns(c, candidates, plans)? })
}

/// The port's packets' priced cost, cycles each: its stages and its batches' share.
fn cycles_per_packet(p: &PortPlan) -> Option<f64> {
    p.allocation.as_ref().map(|a| a.cycles_per_packet.total() + a.batch_cycles_per_packet)
}

/// The uplink's part (0 without a paced uplink).
fn link_ns(
    c: &Candidate<'_>,
    candidates: &[Candidate<'_>],
    plans: &BTreeMap<String, PortPlan>,
) -> Result<u64, ConfigError> {
    let Some(uplink) = candidates.iter().find(|u| plans[&u.spec.name].link.uplink) else { return Ok(0) };
    let up = &plans[&uplink.spec.name];
    if up.link.link_rate_bps == 0 || uplink.spec.name == c.spec.name {
        return Ok(0);
    }
    let slo = plans[&c.spec.name].sla.and_then(|s| s.latency_p99_us).unwrap_or(0);
    if !up.egress.latency_lane {
        return Err(ConfigError::value(
            "latency_p99_us",
            &slo.to_string(),
            format!(
                "a latency class on the uplink: {} has link_latency=off, so its queue bounds no frame's wait",
                uplink.spec.name
            ),
        ));
    }
    let full_frame = u64::from(uplink.settings.max_frame_bytes() + WIRE_OVERHEAD_BYTES);
    let others: u64 = candidates
        .iter()
        .filter(|o| o.spec.name != c.spec.name && o.spec.name != uplink.spec.name)
        .filter_map(|o| lane_rate_bps(&plans[&o.spec.name]))
        .map(lane_burst_bytes)
        .sum();
    let bytes = 2 * full_frame + others;
    Ok((u128::from(bytes) * 8 * 1_000_000_000 / u128::from(up.link.link_rate_bps)) as u64)
}

/// The rate at which a port's frames go ahead on a link whose latency class is on: its
/// purchase on the link, if it is in a latency class.
pub fn lane_rate_bps(p: &PortPlan) -> Option<u64> {
    (p.cpu_qos.priority <= LATENCY_CLASSES).then(|| p.vm_link.latency_in_force(p.sla.as_ref())).flatten()
}

#[cfg(test)]
mod tests {
    use crate::allocation::{example_model, plan, Candidate};
    use crate::port::{PortSpec, PortType};
    use crate::port_settings::PortSettings;

    fn port(name: &str, opts: &[(&str, &str)]) -> (PortSpec, PortSettings) {
        let spec = PortSpec {
            name: name.into(),
            port_type: PortType::Null,
            number: 1,
            options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let settings = spec.validate().unwrap();
        (spec, settings)
    }

    fn admit(ports: &[&(PortSpec, PortSettings)]) -> Result<(), String> {
        let candidates: Vec<Candidate> =
            ports.iter().map(|(spec, settings)| Candidate { spec, settings, pmd_core: 0 }).collect();
        plan(&candidates, Some(&example_model()), 1, 1_000_000_000, "vm1").map(|_| ()).map_err(|e| e.to_string())
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
            port_type: PortType::Null,
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
