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

/// Cycles the host took from the PMD on `core` between `old` and `new`: the PMD's stalls (its
/// stages longer than a stall's threshold), but no more than the wall time its thread did not
/// run (`slaswitch_datapath::host_time`), so a long stage the thread spent in its own system
/// call (a send through a kernel interface) counts as the switch's work, not the host's.
pub fn host_took_cycles(old: &Snapshot, new: &Snapshot, core: usize, tsc_hz: u64) -> u64 {
    let (Some(o), Some(n)) = (old.pmds.iter().find(|p| p.core == core), new.pmds.iter().find(|p| p.core == core))
    else {
        return 0;
    };
    let stalled = n.totals.stalled_cycles.saturating_sub(o.totals.stalled_cycles);
    match (o.run_ns, n.run_ns) {
        (Some(a), Some(b)) => {
            let wall_ns = new.at.duration_since(old.at).as_nanos() as u64;
            let not_run_ns = wall_ns.saturating_sub(b.saturating_sub(a));
            stalled.min((not_run_ns as u128 * u128::from(tsc_hz) / 1_000_000_000) as u64)
        }
        _ => stalled,
    }
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
                        residence_unstalled_us: ResidenceUs::of(&o.map_or(p.residence_unstalled.clone(), |o| {
                            p.residence_unstalled.since(&o.residence_unstalled)
                        })),
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

#[cfg(test)]
mod tests {
    use super::*;
    use slaswitch_datapath::counters::PmdTotals;

    fn at(t: Instant, stalled_cycles: u64, run_ns: Option<u64>) -> Snapshot {
        let pmd = PmdStats {
            core: 3,
            totals: PmdTotals { stalled_cycles, ..Default::default() },
            drift_factor: 1.0,
            ports: Vec::new(),
            run_ns,
            probe: None,
        };
        Snapshot { at: t, ports: Vec::new(), pmds: vec![pmd], links: Vec::new() }
    }

    #[test]
    fn the_host_took_the_stalls_its_thread_did_not_run_through() {
        // 1 GHz: a cycle a nanosecond. One second, of which 300 ms in long stages.
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_secs(1);
        let old = at(t0, 0, Some(0));
        // The thread ran the whole second: its long stages were its own system calls.
        assert_eq!(host_took_cycles(&old, &at(t1, 300_000_000, Some(1_000_000_000)), 3, 1_000_000_000), 0);
        // It ran 800 ms: the host took 200 ms of the 300.
        assert_eq!(host_took_cycles(&old, &at(t1, 300_000_000, Some(800_000_000)), 3, 1_000_000_000), 200_000_000);
        // It ran 500 ms but no stage was long: the host took nothing the PMD felt.
        assert_eq!(host_took_cycles(&old, &at(t1, 0, Some(500_000_000)), 3, 1_000_000_000), 0);
        // No run time from the kernel: the stalls as measured.
        assert_eq!(host_took_cycles(&at(t0, 0, None), &at(t1, 300_000_000, None), 3, 1_000_000_000), 300_000_000);
        // No such PMD.
        assert_eq!(host_took_cycles(&old, &at(t1, 300_000_000, None), 4, 1_000_000_000), 0);
    }
}
