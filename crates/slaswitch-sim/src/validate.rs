//! The fluid step checked against packets: a server's egress in one second of the datacenter
//! simulation, replayed frame by frame through the `SoftBw` scheduler the data plane runs, on a
//! fake clock, and the rates compared with what the fluid form gave.

use serde::Serialize;
use slaswitch_qos::egress::softbw::{Guarantee, SoftBw, SoftBwConfig};
use slaswitch_qos::egress::softbw_fluid::{fluid_rates, FluidDemand, FluidScratch};
use slaswitch_qos::egress::EgressScheduler;

/// Frames of every VM, bytes (full-size Ethernet frames, as the paper's MTU traffic).
pub const FRAME_BYTES: u32 = 1500;
/// The replay runs this long before it counts (the queues fill, errors settle), ns.
pub const WARMUP_NS: u64 = 100_000_000;
/// And counts this long, ns.
pub const MEASURE_NS: u64 = 1_000_000_000;

/// One server's second: the fluid rates, the packet scheduler's, and how far apart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FluidCheck {
    /// The server.
    pub server: usize,
    /// What its VMs offered together, as a share of the link (above 1: contended).
    pub offered_of_link: f64,
    /// Per VM: (demand, guarantee, fluid rate, packet rate), Mbit/s.
    pub vms: Vec<[f64; 4]>,
    /// The largest |packet - fluid| over the VMs, as a share of the link.
    pub worst_of_link: f64,
    /// The largest |packet - fluid| / fluid over VMs whose fluid rate is at least 5% of the link.
    pub worst_relative: f64,
}

/// What `SoftBw` sends per queue (Mbit/s) when each queue is fed evenly spaced frames at its
/// demand and holds its guarantee as a strict rate, measured after a warm-up.
pub fn packet_rates(link_bps: f64, demands: &[FluidDemand]) -> Vec<f64> {
    let mut s: SoftBw<()> = SoftBw::new(SoftBwConfig::new(link_bps as u64), 0).expect("a positive link");
    let interval_ns: Vec<u64> = demands
        .iter()
        .map(|d| if d.demand_bps > 0.0 { (f64::from(FRAME_BYTES) * 8e9 / d.demand_bps) as u64 } else { u64::MAX })
        .collect();
    let n = demands.len() as u64;
    // Staggered first arrivals, so the VMs' frames do not all land on the same nanosecond.
    let mut next: Vec<u64> = interval_ns
        .iter()
        .enumerate()
        .map(|(i, &iv)| if iv == u64::MAX { u64::MAX } else { iv / (n + 1) * (i as u64 + 1) })
        .collect();
    for (q, d) in demands.iter().enumerate() {
        let rate_bps = (d.guarantee_bps.round() as u64).max(1);
        s.set_guarantee(q, Guarantee::Strict { rate_bps }, 1 << 20, 0).expect("a positive guarantee");
    }
    let tx_ns = (f64::from(FRAME_BYTES) * 8e9 / link_bps) as u64;
    let mut sent = vec![0u64; demands.len()];
    let (mut now, end) = (0u64, WARMUP_NS + MEASURE_NS);
    while now < end {
        for q in 0..demands.len() {
            while next[q] <= now {
                let _ = s.enqueue(q, FRAME_BYTES, (), now);
                next[q] += interval_ns[q];
            }
        }
        match s.dequeue(now) {
            Some(d) => {
                if now >= WARMUP_NS {
                    sent[d.queue] += u64::from(d.len_bytes);
                }
                now += tx_ns;
            }
            None if s.backlog_packets() > 0 => now += 500,
            None => now = next.iter().copied().min().unwrap_or(end).max(now + 1),
        }
    }
    sent.iter().map(|&b| b as f64 * 8.0 / (MEASURE_NS as f64 / 1e9) / 1e6).collect()
}

/// Compares the fluid form with the packet scheduler on each captured server.
pub fn check(link_bps: f64, captured: &[crate::datacenter::CapturedServer]) -> Vec<FluidCheck> {
    use rayon::prelude::*;
    captured
        .par_iter()
        .map(|crate::datacenter::CapturedServer { server, link: demands, .. }| {
            let mut fluid = Vec::new();
            fluid_rates(link_bps, demands, &mut FluidScratch::default(), &mut fluid);
            let packets = packet_rates(link_bps, demands);
            let link_mbps = link_bps / 1e6;
            let offered = demands.iter().map(|d| d.demand_bps).sum::<f64>() / link_bps;
            let mut c = FluidCheck {
                server: *server,
                offered_of_link: offered,
                vms: Vec::new(),
                worst_of_link: 0.0,
                worst_relative: 0.0,
            };
            for ((d, f), p) in demands.iter().zip(&fluid).zip(&packets) {
                let f = f / 1e6;
                c.vms.push([d.demand_bps / 1e6, d.guarantee_bps / 1e6, f, *p]);
                c.worst_of_link = c.worst_of_link.max((p - f).abs() / link_mbps);
                if f >= 0.05 * link_mbps {
                    c.worst_relative = c.worst_relative.max((p - f).abs() / f);
                }
            }
            c
        })
        .collect()
}

/// A VM's second in Mbit/s, for tests.
#[cfg(test)]
pub(crate) fn d(demand_mbps: f64, guarantee_mbps: f64) -> FluidDemand {
    FluidDemand { demand_bps: demand_mbps * 1e6, guarantee_bps: guarantee_mbps * 1e6 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_match_the_fluid_form_within_two_percent() {
        // Over-committed, under-committed with a residual, and a VM that wants less than its
        // guarantee.
        for demands in [
            vec![d(800.0, 250.0), d(600.0, 250.0), d(700.0, 250.0), d(100.0, 250.0)],
            vec![d(900.0, 450.0), d(900.0, 300.0)],
            vec![d(50.0, 250.0), d(400.0, 250.0), d(30.0, 1.0), d(900.0, 1.0)],
        ] {
            let offered_bps = demands.iter().map(|d| d.demand_bps).collect();
            let c = &check(1e9, &[crate::datacenter::CapturedServer { server: 0, link: demands, offered_bps }])[0];
            assert!(c.worst_of_link < 0.02, "{c:?}");
        }
    }
}
