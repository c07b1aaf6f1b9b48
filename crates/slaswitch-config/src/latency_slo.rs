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

use crate::error::ConfigError;
use crate::port_plan::{Candidate, PortPlan};

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
