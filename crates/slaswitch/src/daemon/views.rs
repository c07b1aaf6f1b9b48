//! What `pmd-stats`, `qos-show`, `port-stats` and `list-ports` answer, built from the data
//! plane's typed state and the rates of the last interval. The CLI renders these as tables;
//! `--json` prints them as they are.

use std::path::Path;

use serde::Serialize;
use slaswitch_config::cpu_qos::own_bucket_depth;
use slaswitch_config::PortSpec;
use slaswitch_datapath::counters::CpuQosState;
use slaswitch_datapath::probe::ProbeReport;
use slaswitch_datapath::{Datapath, PmdStats, PortStats};
use slaswitch_qos::cpu::{Allocation, C2tbConfig};

use super::link_view::LinkVmRow;
use super::rates::{PmdRates, PortRates, ResidenceUs};

/// `pmd-stats`: every PMD thread, its totals and its ports' stages.
#[derive(Serialize)]
pub struct PmdStatsView<'a> {
    pub tsc_hz: u64,
    pub interval_secs: Option<f64>,
    pub pmds: Vec<PmdView<'a>>,
}

#[derive(Serialize)]
pub struct PmdView<'a> {
    pub core: usize,
    pub busy_cycles: u64,
    pub idle_cycles: u64,
    pub stalled_cycles: u64,
    pub qos_owed: u64,
    pub qos_parked: u64,
    pub busy_pct_interval: Option<f64>,
    pub drift_factor: f64,
    /// What the overhead probe measured (`slaswitchd --probe`).
    pub probe: Option<ProbeReport>,
    /// The ports' stage cycles added up: equal to `busy_cycles` less the scheduler's decisions.
    pub stage_cycles_sum: u64,
    pub ports: Vec<PmdPortView<'a>>,
}

#[derive(Serialize)]
pub struct PmdPortView<'a> {
    pub name: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub batches: u64,
    pub empty_polls: u64,
    pub policer_drops: u64,
    pub ingress_cycles: u64,
    pub classify_cycles: u64,
    pub egress_cycles: u64,
    pub idle_cycles: u64,
    pub emc_hits: u64,
    pub emc_misses: u64,
    pub megaflow_hits: u64,
    pub megaflow_misses: u64,
    pub megaflows: u64,
    /// Its frames' residence in the switch since the port was added.
    pub residence_us: Option<ResidenceUs>,
    /// Its frames through paced ports' link schedulers: sent, dropped at its queue, and the
    /// schedulers' cycles spent on them (queueing in its egress stage, and a share of the
    /// dequeues that released them).
    pub link_out: slaswitch_datapath::datapath::LinkOut,
    pub interval: Option<&'a PortRates>,
}

pub fn pmd_stats<'a>(
    pmds: Vec<PmdStats>,
    ports: &[PortStats],
    rates: &'a [PmdRates],
    tsc_hz: u64,
    interval_secs: Option<f64>,
) -> PmdStatsView<'a> {
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
                qos_owed: pmd.totals.qos_owed,
                qos_parked: pmd.totals.qos_parked,
                busy_pct_interval: rate.map(|r| r.busy_pct),
                drift_factor: pmd.drift_factor,
                probe: pmd.probe,
                stage_cycles_sum: mine.iter().map(|p| p.rx.busy_cycles()).sum(),
                ports: mine.iter().map(|p| pmd_port(p, rate)).collect(),
            }
        })
        .collect();
    PmdStatsView { tsc_hz, interval_secs, pmds }
}

fn pmd_port<'a>(p: &PortStats, rate: Option<&'a PmdRates>) -> PmdPortView<'a> {
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
        link_out: p.link_out,
        interval: rate.and_then(|r| r.ports.iter().find(|x| x.name == p.name)),
    }
}

/// `qos-show`: what each port is given and why (seed 000 Sec. III-IV): its purchase and
/// profile, the model entry and coefficients, the resulting cycles against its PMD core, the
/// scheduler's view and what it used; and the NIC fallback (Sec. VII).
#[derive(Serialize)]
pub struct QosShowView<'a> {
    pub tsc_hz: u64,
    pub c2tb_bucket_us: u64,
    pub ports: Vec<QosPortView<'a>>,
    pub fallback: slaswitch_datapath::datapath::FallbackStatus,
    pub model: Option<ModelView<'a>>,
}

#[derive(Serialize)]
pub struct QosPortView<'a> {
    pub name: &'a str,
    pub pmd_core: usize,
    pub cycles_per_sec: u64,
    /// The factor the allocation follows, when it comes from the model and is compensated.
    pub drift_factor: Option<f64>,
    /// Bytes of its purchase it is owed (it was held short while backlogged), and the raise
    /// of its allocation paying them back ([`slaswitch_qos::cpu::promise`]).
    pub owed_bytes: Option<f64>,
    pub owed_raise: Option<f64>,
    pub effective_cycles_per_sec: u64,
    /// `cycles_per_sec`, `model` or `none`.
    pub cycles_from: &'static str,
    pub mode: &'static str,
    pub weight: u32,
    pub priority: u8,
    pub bandwidth_bps: u64,
    pub allocation: &'a Option<Allocation>,
    pub allocated_pct_of_core: f64,
    /// Admitted: the allocations of every port on its PMD, as admission added them up.
    pub pmd_allocated_cycles_per_sec: u64,
    /// What the PMD can give its ports: the bound admission holds the allocations to.
    pub pmd_deliverable_cycles_per_sec: u64,
    /// In force: the allocations on its PMD as drift compensation scales them.
    pub pmd_effective_cycles_per_sec: u64,
    /// The PMD core's cycles.
    pub pmd_capacity_cycles_per_sec: u64,
    /// What its bucket may save up, cycles: a ring of its purchase's packets, or the switch's.
    pub bucket_depth_cycles: u64,
    pub tokens_cycles: Option<f64>,
    pub current_class: u8,
    pub place: &'static str,
    /// Cycles of debt forgiven it as a latency-class port within its purchase
    /// (`slaswitch_qos::cpu::latency_class`).
    pub latency_forgiven_cycles: u64,
    pub used_pct_of_core: Option<f64>,
    pub rx_mbps: Option<f64>,
    pub link_rate_bps: u64,
    pub link_queued: usize,
    pub uplink: bool,
    pub fallback_drops: u64,
    /// Ingress policing (kbit/s, kpackets/s), 0 when off.
    pub ingress_policing_rate: u64,
    pub ingress_policing_kpkts_rate: u64,
    /// The link half of its purchase: its row on the uplink's scheduler (`link-show`).
    pub link: Option<&'a LinkVmRow>,
}

#[derive(Serialize)]
pub struct ModelView<'a> {
    pub path: &'a Path,
    pub machine: &'a str,
    pub measured_unix_secs: u64,
    pub tsc_hz: u64,
}

/// The `qos-show` view of the ports `wanted` names (all without a name).
pub fn qos_show<'a>(
    dp: &'a Datapath,
    ports: &'a [PortStats],
    pmds: &[PmdStats],
    rates: &[PmdRates],
    links: &'a [LinkVmRow],
    wanted: Option<&str>,
    model_path: &'a Path,
) -> Result<QosShowView<'a>, String> {
    if let Some(n) = wanted.filter(|n| !ports.iter().any(|p| p.name == *n)) {
        return Err(format!("no port named '{n}'"));
    }
    let hz = dp.tsc_hz();
    let switch_depth = C2tbConfig::depth_cycles(hz, dp.settings().c2tb_bucket_us);
    let ports = ports
        .iter()
        .filter(|p| wanted.is_none_or(|n| n == p.name))
        .map(|p| QosPortView {
            link: links.iter().find(|l| l.stats.name == p.name),
            ..qos_port(p, ports, pmds, rates, hz, switch_depth)
        })
        .collect();
    let model = dp.model().map(|m| ModelView {
        path: model_path,
        machine: &m.machine,
        measured_unix_secs: m.measured_unix_secs,
        tsc_hz: m.tsc_hz,
    });
    Ok(QosShowView {
        tsc_hz: hz,
        c2tb_bucket_us: dp.settings().c2tb_bucket_us,
        ports,
        fallback: dp.fallback_status(),
        model,
    })
}

fn qos_port<'a>(
    p: &'a PortStats,
    all: &[PortStats],
    pmds: &[PmdStats],
    rates: &[PmdRates],
    hz: u64,
    switch_depth: u64,
) -> QosPortView<'a> {
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
    let CpuQosState { tokens_cycles, class, place, forgiven_cycles } = p.cpu_qos;
    QosPortView {
        name: &p.name,
        pmd_core: p.pmd_core,
        cycles_per_sec: p.cycles_per_sec,
        drift_factor: drift,
        owed_bytes: drift.and(p.owed).map(|(owed, _)| owed),
        owed_raise: drift.and(p.owed).map(|(_, raise)| raise),
        effective_cycles_per_sec: effective(p),
        cycles_from: match (&p.allocation, p.cycles_per_sec) {
            (Some(_), _) => "model",
            (None, 0) => "none",
            (None, _) => "cycles_per_sec",
        },
        mode: p.cpu_mode,
        weight: p.weight,
        priority: p.priority,
        bandwidth_bps: p.bandwidth_bps,
        allocation: &p.allocation,
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
#[derive(Serialize)]
pub struct PortStatsView<'a> {
    pub ports: Vec<&'a PortStats>,
    pub rates: Vec<&'a PortRates>,
}

pub fn port_stats<'a>(
    ports: &'a [PortStats],
    rates: &'a [PmdRates],
    wanted: Option<&str>,
) -> Result<PortStatsView<'a>, String> {
    if let Some(n) = wanted.filter(|n| !ports.iter().any(|p| p.name == *n)) {
        return Err(format!("no port named '{n}'"));
    }
    Ok(PortStatsView {
        ports: ports.iter().filter(|p| wanted.is_none_or(|n| n == p.name)).collect(),
        rates: rates.iter().flat_map(|r| &r.ports).collect(),
    })
}

/// One line of `list-ports`.
#[derive(Serialize)]
pub struct PortLine<'a> {
    pub name: &'a str,
    pub number: u16,
    #[serde(rename = "type")]
    pub port_type: &'a str,
    pub pmd_core: Option<usize>,
    pub link_up: Option<bool>,
    pub socket: Option<&'a str>,
    pub options: Option<&'a std::collections::BTreeMap<String, String>>,
    /// `up`, or `error: ...` for a port that could not be restored.
    pub state: String,
}

pub fn list_ports<'a>(
    ports: &'a [PortStats],
    specs: &'a [PortSpec],
    unrestored: &'a [(PortSpec, String)],
) -> Vec<PortLine<'a>> {
    let up = ports.iter().map(|p| PortLine {
        name: &p.name,
        number: p.number,
        port_type: &p.port_type,
        pmd_core: Some(p.pmd_core),
        link_up: Some(p.link_up),
        socket: p.socket.as_deref(),
        options: specs.iter().find(|s| s.name == p.name).map(|s| &s.options),
        state: "up".into(),
    });
    let down = unrestored.iter().map(|(s, e)| PortLine {
        name: &s.name,
        number: s.number,
        port_type: s.port_type.name(),
        pmd_core: None,
        link_up: None,
        socket: None,
        options: Some(&s.options),
        state: format!("error: {e}"),
    });
    up.chain(down).collect()
}
