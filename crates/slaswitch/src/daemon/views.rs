//! The replies of `pmd-stats`, `qos-show`, `port-stats` and `list-ports`, built from the data
//! plane's typed state and the rates of the last interval.

use std::path::Path;

use slaswitch_config::cpu_qos::own_bucket_depth;
use slaswitch_config::PortSpec;
use slaswitch_datapath::counters::CpuQosState;
use slaswitch_datapath::{Datapath, DatapathError, PmdStats, PortStats};
use slaswitch_qos::cpu::C2tbConfig;

use crate::protocol::qos::{CyclesFrom, LinkVmRow, ModelView, QosPortView, QosShowReply};
use crate::protocol::stats::{
    MbufUse, PmdPortView, PmdRates, PmdStatsReply, PmdView, PortLine, PortList, PortRates, PortStatsReply, ResidenceUs,
};

/// `pmd-stats`: every PMD thread, its totals and its ports' stages.
pub fn pmd_stats(
    pmds: Vec<PmdStats>,
    ports: &[PortStats],
    rates: &[PmdRates],
    tsc_hz: u64,
    interval_secs: Option<f64>,
    (in_use, total): (u32, u32),
) -> PmdStatsReply {
    let pmds = pmds
        .into_iter()
        .map(|pmd| {
            let mine: Vec<&PortStats> = ports.iter().filter(|p| p.pmd_core == pmd.core).collect();
            let rate = rates.iter().find(|r| r.core == pmd.core);
            PmdView {
                core: pmd.core,
                busy_cycles: pmd.totals.busy_cycles,
                idle_cycles: pmd.totals.idle_cycles,
                stalled_cycles: pmd.totals.stalled_cycles,
                run_ns: pmd.run_ns,
                qos_owed: pmd.totals.qos_owed,
                qos_parked: pmd.totals.qos_parked,
                qos_turn_batches: pmd.totals.qos_turn_batches,
                busy_pct_interval: rate.map(|r| r.busy_pct),
                drift_factor: pmd.drift_factor,
                probe: pmd.probe,
                stage_cycles_sum: mine.iter().map(|p| p.rx.busy_cycles()).sum(),
                ports: mine.iter().map(|p| pmd_port(p, rate)).collect(),
            }
        })
        .collect();
    PmdStatsReply { tsc_hz, interval_secs, pmds, mbufs: MbufUse { in_use, total } }
}

fn pmd_port(p: &PortStats, rate: Option<&PmdRates>) -> PmdPortView {
    PmdPortView {
        name: p.name.clone(),
        rx_packets: p.rx.rx_packets,
        rx_bytes: p.rx.rx_bytes,
        batches: p.rx.batches,
        empty_polls: p.rx.empty_polls,
        policer_drops: p.rx.policer_drops,
        ingress_cycles: p.rx.ingress_cycles,
        classify_cycles: p.rx.classify_cycles,
        egress_cycles: p.rx.egress_cycles,
        idle_cycles: p.rx.idle_cycles,
        emc_hits: p.rx.emc_hits,
        emc_misses: p.rx.emc_misses,
        megaflow_hits: p.rx.megaflow_hits,
        megaflow_misses: p.rx.megaflow_misses,
        megaflows: p.rx.megaflows,
        residence_us: ResidenceUs::of(&p.residence),
        residence_unstalled_us: ResidenceUs::of(&p.residence_unstalled),
        link_out: p.link_out,
        interval: rate.and_then(|r| r.ports.iter().find(|x| x.name == p.name)).cloned(),
    }
}

/// The `qos-show` reply for the ports `wanted` names (all without a name): what each port is
/// given and why (seed 000 Sec. III-IV), and the NIC fallback (Sec. VII).
pub fn qos_show(
    dp: &Datapath,
    ports: &[PortStats],
    pmds: &[PmdStats],
    rates: &[PmdRates],
    links: &[LinkVmRow],
    wanted: Option<&str>,
    model_path: &Path,
) -> Result<QosShowReply, DatapathError> {
    if let Some(n) = wanted.filter(|n| !ports.iter().any(|p| p.name == *n)) {
        return Err(DatapathError::NoPort(n.to_string()));
    }
    let hz = dp.tsc_hz();
    let switch_depth = C2tbConfig::depth_cycles(hz, dp.settings().c2tb_bucket_us);
    let ports = ports
        .iter()
        .filter(|p| wanted.is_none_or(|n| n == p.name))
        .map(|p| QosPortView {
            link: links.iter().find(|l| l.stats.name == p.name).cloned(),
            ..qos_port(p, ports, pmds, rates, hz, switch_depth)
        })
        .collect();
    let model = dp.model().map(|m| ModelView {
        path: model_path.to_path_buf(),
        machine: m.machine.clone(),
        measured_unix_secs: m.measured_unix_secs,
        tsc_hz: m.tsc_hz,
    });
    Ok(QosShowReply {
        tsc_hz: hz,
        c2tb_bucket_us: dp.settings().c2tb_bucket_us,
        ports,
        fallback: dp.fallback_status(),
        model,
        pmd_moves: Default::default(),
    })
}

fn qos_port(
    p: &PortStats,
    all: &[PortStats],
    pmds: &[PmdStats],
    rates: &[PmdRates],
    hz: u64,
    switch_depth: u64,
) -> QosPortView {
    let on_pmd: Vec<&PortStats> = all.iter().filter(|o| o.pmd_core == p.pmd_core).collect();
    let used = rates.iter().find(|r| r.core == p.pmd_core).and_then(|r| r.ports.iter().find(|x| x.name == p.name));
    let pmd_factor = pmds.iter().find(|d| d.core == p.pmd_core).map_or(1.0, |d| d.drift_factor);
    let drift_of =
        |o: &PortStats| (o.allocation.is_some() && o.drift_compensation).then(|| o.drift_factor.unwrap_or(pmd_factor));
    let raise_of = |o: &PortStats| drift_of(o).and(o.owed).map_or(1.0, |(_, raise)| raise);
    let effective = |o: &PortStats| {
        drift_of(o).map_or(o.cycles_per_sec, |f| (o.cycles_per_sec as f64 * f * raise_of(o)).round() as u64)
    };
    let drift = drift_of(p);
    let CpuQosState { tokens_cycles, class, place, forgiven_cycles, .. } = p.cpu_qos;
    QosPortView {
        name: p.name.clone(),
        latency_slo: None,
        pmd_core: p.pmd_core,
        cycles_per_sec: p.cycles_per_sec,
        drift_factor: drift,
        owed_bytes: drift.and(p.owed).map(|(owed, _)| owed),
        owed_raise: drift.and(p.owed).map(|(_, raise)| raise),
        effective_cycles_per_sec: effective(p),
        cycles_from: match (&p.allocation, p.cycles_per_sec) {
            (Some(_), _) => CyclesFrom::Model,
            (None, 0) => CyclesFrom::None,
            (None, _) => CyclesFrom::CyclesPerSec,
        },
        mode: p.cpu_mode,
        weight: p.weight,
        priority: p.priority,
        bandwidth_bps: p.bandwidth_bps,
        allocation: p.allocation.clone(),
        allocated_pct_of_core: 100.0 * p.cycles_per_sec as f64 / hz as f64,
        pmd_allocated_cycles_per_sec: on_pmd.iter().map(|o| o.cycles_per_sec).sum(),
        pmd_deliverable_cycles_per_sec: slaswitch_config::allocation::deliverable_cycles_per_sec(hz),
        pmd_effective_cycles_per_sec: on_pmd.iter().map(|o| effective(o)).sum(),
        pmd_capacity_cycles_per_sec: hz,
        bucket_depth_cycles: own_bucket_depth(p.bucket_depth_cycles, drift.unwrap_or(1.0), switch_depth)
            .unwrap_or(switch_depth),
        tokens_cycles,
        current_class: class,
        place,
        latency_forgiven_cycles: forgiven_cycles,
        used_pct_of_core: used.map(|u| u.pmd_share_pct),
        rx_mbps: used.map(|u| u.rx_mbps),
        link_rate_bps: p.link_rate_bps,
        link_queued: p.link_queued,
        uplink: p.uplink,
        fallback_drops: p.rx.fallback_drops,
        ingress_policing_rate: p.policing.map_or(0, |s| s.rate_kbps),
        ingress_policing_kpkts_rate: p.policing.map_or(0, |s| s.rate_kpps),
        link: None,
    }
}

/// `port-stats`: the ports `wanted` names (all without a name) and their rates.
pub fn port_stats(
    ports: Vec<PortStats>,
    rates: &[PmdRates],
    wanted: Option<&str>,
) -> Result<PortStatsReply, DatapathError> {
    if let Some(n) = wanted.filter(|n| !ports.iter().any(|p| p.name == *n)) {
        return Err(DatapathError::NoPort(n.to_string()));
    }
    let rates: Vec<PortRates> = rates.iter().flat_map(|r| r.ports.iter().cloned()).collect();
    Ok(PortStatsReply { ports: ports.into_iter().filter(|p| wanted.is_none_or(|n| n == p.name)).collect(), rates })
}

/// `list-ports`: the ports up, then those that could not be restored.
pub fn list_ports(ports: &[PortStats], specs: &[PortSpec], unrestored: &[(PortSpec, String)]) -> PortList {
    let up = ports.iter().map(|p| PortLine {
        name: p.name.clone(),
        number: p.number,
        port_type: p.port_type.clone(),
        pmd_core: Some(p.pmd_core),
        link_up: Some(p.link_up),
        socket: p.socket.clone(),
        options: specs.iter().find(|s| s.name == p.name).map(|s| s.options.clone()),
        state: "up".into(),
    });
    let down = unrestored.iter().map(|(s, e)| PortLine {
        name: s.name.clone(),
        number: s.number,
        port_type: s.port_type.name().to_string(),
        pmd_core: None,
        link_up: None,
        socket: None,
        options: Some(s.options.clone()),
        state: format!("error: {e}"),
    });
    PortList(up.chain(down).collect())
}
