//! Rates over the last sampling interval (1 s), computed from two snapshots of the cumulative
//! counters: what `pmd-stats` and `port-stats` show next to the totals, in the spirit of
//! `ovs-appctl dpif-netdev/pmd-perf-show` and `pmd-rxq-show`.

use std::time::Instant;

use slaswitch_datapath::{PmdStats, PortStats};

use crate::protocol::stats::{PmdRates, PortRates, ResidenceUs, StageCycles};

#[derive(Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub ports: Vec<PortStats>,
    pub pmds: Vec<PmdStats>,
    /// Every paced port's scheduler and VMs.
    pub links: Vec<slaswitch_datapath::datapath::LinkStats>,
}

fn per_packet(cycles: u64, packets: u64) -> f64 {
    if packets == 0 {
        0.0
    } else {
        cycles as f64 / packets as f64
    }
}

/// Rates between `old` and `new` (ports present in both).
pub fn rates(old: &Snapshot, new: &Snapshot) -> Vec<PmdRates> {
    let secs = new.at.duration_since(old.at).as_secs_f64().max(1e-9);
    new.pmds
        .iter()
        .map(|pmd| {
            let old_pmd = old.pmds.iter().find(|p| p.core == pmd.core);
            let pmd_cycles = old_pmd.map_or(pmd.totals.busy_cycles + pmd.totals.idle_cycles, |o| {
                (pmd.totals.busy_cycles + pmd.totals.idle_cycles)
                    .saturating_sub(o.totals.busy_cycles + o.totals.idle_cycles)
            });
            let busy =
                old_pmd.map_or(pmd.totals.busy_cycles, |o| pmd.totals.busy_cycles.saturating_sub(o.totals.busy_cycles));
            let ports = new
                .ports
                .iter()
                .filter(|p| p.pmd_core == pmd.core)
                .map(|p| {
                    let o = old.ports.iter().find(|x| x.name == p.name && x.number == p.number);
                    let d = |f: fn(&PortStats) -> u64| o.map_or(f(p), |o| f(p).saturating_sub(f(o)));
                    let mut packets = d(|s| s.rx.rx_packets);
                    let (mut ing, mut cls, mut egr) =
                        (d(|s| s.rx.ingress_cycles), d(|s| s.rx.classify_cycles), d(|s| s.rx.egress_cycles));
                    if packets == 0 {
                        packets = p.rx.rx_packets;
                        (ing, cls, egr) = (p.rx.ingress_cycles, p.rx.classify_cycles, p.rx.egress_cycles);
                    }
                    let (hits, misses) = (d(|s| s.rx.emc_hits), d(|s| s.rx.emc_misses));
                    let (mega_hits, mega_misses) = (d(|s| s.rx.megaflow_hits), d(|s| s.rx.megaflow_misses));
                    PortRates {
                        name: p.name.clone(),
                        rx_kpps: d(|s| s.rx.rx_packets) as f64 / secs / 1e3,
                        rx_mbps: d(|s| s.rx.rx_bytes) as f64 * 8.0 / secs / 1e6,
                        tx_kpps: d(|s| s.tx_packets) as f64 / secs / 1e3,
                        tx_mbps: d(|s| s.tx_bytes) as f64 * 8.0 / secs / 1e6,
                        cycles_per_packet: StageCycles {
                            ingress: per_packet(ing, packets),
                            classification: per_packet(cls, packets),
                            egress: per_packet(egr, packets),
                            total: per_packet(ing + cls + egr, packets),
                        },
                        pmd_share_pct: if pmd_cycles == 0 {
                            0.0
                        } else {
                            d(|s| s.rx.busy_cycles()) as f64 * 100.0 / pmd_cycles as f64
                        },
                        emc_hit_pct: pct(hits, hits + misses),
                        megaflow_hit_pct: pct(mega_hits, mega_hits + mega_misses),
                        residence_us: ResidenceUs::of(
                            &o.map_or(p.residence.clone(), |o| p.residence.since(&o.residence)),
                        ),
                    }
                })
                .collect();
            PmdRates {
                core: pmd.core,
                busy_pct: if pmd_cycles == 0 { 0.0 } else { busy as f64 * 100.0 / pmd_cycles as f64 },
                ports,
            }
        })
        .collect()
}

/// `part` as a percentage of `whole` (0 when there is no whole).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
