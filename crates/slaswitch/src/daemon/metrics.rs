//! Prometheus exposition of every counter the switch keeps, served on a loopback port
//! (`GET /metrics`) from a snapshot the daemon takes every second.

use std::sync::{Arc, Mutex};

use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use crate::error::DaemonError;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use slaswitch_classifier::parse::ParseError;
use slaswitch_datapath::datapath::{LinkStats, LinkVmStats};
use slaswitch_datapath::histogram::Histogram;
use slaswitch_datapath::probe::compare::CompareSide;
use slaswitch_datapath::probe::ProbeTotals;
use slaswitch_datapath::{FlowStats, PmdStats, PortStats};

/// A metric family of the overhead probe: name, help, and the field it reads.
type ProbeFamily = (&'static str, &'static str, fn(&ProbeTotals) -> u64);

/// One sample: its labels and its value.
type Sample = (Vec<(&'static str, String)>, u64);

/// Writes one metric family: name (counters ending in `_total`), kind, help and its samples.
type Family<'a> = dyn FnMut(&str, &str, &str, Vec<Sample>) + 'a;

/// Every counter the switch keeps, as read at one instant; what a scrape encodes, so a scrape
/// never waits for the daemon.
#[derive(Debug, Default)]
pub struct MetricsSnapshot {
    /// Every port.
    pub ports: Vec<PortStats>,
    /// Every PMD thread.
    pub pmds: Vec<PmdStats>,
    /// Every flow rule.
    pub flows: Vec<FlowStats>,
    /// Every paced port's scheduler.
    pub links: Vec<LinkStats>,
    /// The TSC's frequency.
    pub tsc_hz: u64,
    /// The packet pool's mbufs: (in use, in all).
    pub mbufs: (u32, u32),
    /// Every port with a latency SLO, and how it has been kept.
    pub slo: Vec<(String, crate::protocol::slo::SloStatus)>,
    /// Ports moved between PMDs.
    pub pmd_moves: crate::protocol::pmd_moves::PmdMoves,
}

/// The snapshot in the OpenMetrics text format (`prometheus-client`'s encoder), which
/// Prometheus reads.
pub fn render(snapshot: Arc<MetricsSnapshot>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// Serves `GET /metrics` on `addr` (axum, on the control plane's runtime) from the latest
/// snapshot until `stop`; any other path is 404.
pub async fn serve(
    addr: &str,
    latest: Arc<Mutex<Arc<MetricsSnapshot>>>,
    mut stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, DaemonError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|cause| DaemonError::Access { what: format!("cannot serve metrics on {addr}"), cause })?;
    let scrape = move || {
        let snapshot = latest.lock().expect("metrics snapshot").clone();
        async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(snapshot)) }
    };
    let app = Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { (StatusCode::NOT_FOUND, "slaswitchd serves GET /metrics\n") });
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
            tracing::warn!("metrics endpoint: {e}");
        }
    }))
}

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One family through the encoder; a counter's name is given with its `_total`, which the
/// encoder adds itself.
fn encode_family(
    e: &mut DescriptorEncoder,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[Sample],
) -> std::fmt::Result {
    let counter = kind == "counter";
    let (name, metric_type) = if counter {
        (name.strip_suffix("_total").unwrap_or(name), MetricType::Counter)
    } else {
        (name, MetricType::Gauge)
    };
    let mut family = e.encode_descriptor(name, help, None, metric_type)?;
    for (labels, v) in samples {
        let mut m = family.encode_family(labels)?;
        if counter {
            m.encode_counter::<NoLabelSet, _, u64>(v, None)?;
        } else {
            m.encode_gauge(v)?;
        }
    }
    Ok(())
}

impl Collector for MetricsSnapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let mut result = Ok(());
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<Sample>| {
            if result.is_ok() {
                result = encode_family(&mut e, name, kind, help, &samples);
            }
        };
        port_families(&mut family, &self.ports);
        pmd_families(&mut family, &self.pmds);
        link_families(&mut family, &self.links);
        slo_families(&mut family, &self.slo);
        move_families(&mut family, &self.pmd_moves);
        family("slaswitch_tsc_hz", "gauge", "TSC frequency, to turn cycles into seconds.", vec![(vec![], self.tsc_hz)]);
        family(
            "slaswitch_mbufs_in_use",
            "gauge",
            "Mbufs of the packet pool in rings, queues and PMDs (per-core caches count as free).",
            vec![(vec![], u64::from(self.mbufs.0))],
        );
        family("slaswitch_mbufs", "gauge", "Mbufs in the packet pool.", vec![(vec![], u64::from(self.mbufs.1))]);
        let flow = |f: &FlowStats| vec![("flow", f.flow.clone())];
        family(
            "slaswitch_flow_packets_total",
            "counter",
            "Packets that matched the flow.",
            self.flows.iter().map(|f| (flow(f), f.packets)).collect(),
        );
        family(
            "slaswitch_flow_bytes_total",
            "counter",
            "Bytes that matched the flow.",
            self.flows.iter().map(|f| (flow(f), f.bytes)).collect(),
        );
        result?;
        residence_family(
            &mut e,
            &self.ports,
            "slaswitch_port_residence_seconds",
            "Time the port's frames spent in the switch, from the poll after which they arrived to the moment the switch handed them to the output port's driver (a paced link's queue included).",
            |p| &p.residence,
        )?;
        residence_family(
            &mut e,
            &self.ports,
            "slaswitch_port_residence_unstalled_seconds",
            "slaswitch_port_residence_seconds of the frames no stall of the PMD touched (no stage of its loop took over 100 us while they were in the switch).",
            |p| &p.residence_unstalled,
        )
    }
}

/// Each port's `histogram` of residence times (`slaswitch_datapath` residence) as a Prometheus
/// histogram with a bucket per power of two of nanoseconds.
fn residence_family(
    e: &mut DescriptorEncoder,
    ports: &[PortStats],
    name: &str,
    help: &str,
    histogram: fn(&PortStats) -> &Histogram,
) -> std::fmt::Result {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for p in ports {
        let h = histogram(p);
        // The encoder takes each bucket's own count and sums them itself.
        let mut buckets = Vec::new();
        let mut below = 0;
        for (le_ns, cumulative) in h.cumulative_by_power_of_two() {
            buckets.push((le_ns as f64 / 1e9, cumulative - below));
            below = cumulative;
        }
        let total = h.count();
        buckets.push((f64::INFINITY, total - below));
        let labels = vec![("port", p.name.clone())];
        family.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            h.sum_ns() as f64 / 1e9,
            total,
            &buckets,
            None,
        )?;
    }
    Ok(())
}

/// Each latency SLO: its target, the seconds judged, and the missed ones by cause.
fn slo_families(family: &mut Family<'_>, slo: &[(String, crate::protocol::slo::SloStatus)]) {
    use crate::protocol::slo::MissCause;
    let port = |n: &String| vec![("port", n.clone())];
    family(
        "slaswitch_port_slo_latency_p99_us",
        "gauge",
        "The port's latency SLO: residence p99 in each second, microseconds.",
        slo.iter().map(|(n, s)| (port(n), u64::from(s.latency_p99_us))).collect(),
    );
    family(
        "slaswitch_port_slo_seconds_total",
        "counter",
        "Seconds in which the port sent frames the switch timed against its SLO.",
        slo.iter().map(|(n, s)| (port(n), s.seconds)).collect(),
    );
    family(
        "slaswitch_port_slo_missed_seconds_total",
        "counter",
        "Seconds whose residence p99 was above the port's SLO, by cause (switch, link_queue, pmd_stall).",
        slo.iter()
            .flat_map(|(n, s)| {
                MissCause::ALL.map(|c| (vec![("port", n.clone()), ("cause", c.name().to_string())], s.missed(c)))
            })
            .collect(),
    );
}

fn move_families(family: &mut Family<'_>, moves: &crate::protocol::pmd_moves::PmdMoves) {
    use slaswitch_config::pmd_placement::MoveReason;
    family(
        "slaswitch_pmd_moves_total",
        "counter",
        "Ports the switch moved between its PMDs, by reason (over_promised, saturated).",
        [MoveReason::OverPromised, MoveReason::Saturated]
            .map(|r| (vec![("reason", r.name().to_string())], moves.total.get(r.name()).copied().unwrap_or(0)))
            .to_vec(),
    );
    family(
        "slaswitch_pmd_move_last_duration_us",
        "gauge",
        "How long the last move between PMDs took, from the first PMD's release to the second's pick-up, microseconds.",
        moves.recent.iter().rev().find(|m| m.refused.is_none()).map(|m| (vec![], m.took_us)).into_iter().collect(),
    );
}

/// Each paced port's scheduler, per source VM (`link-show`).
fn link_families(family: &mut Family<'_>, links: &[LinkStats]) {
    let per_vm = |f: &dyn Fn(&LinkVmStats) -> u64| {
        links
            .iter()
            .flat_map(|l| l.vms.iter().map(move |v| (vec![("link", l.name.clone()), ("vm", v.name.clone())], f(v))))
            .collect::<Vec<_>>()
    };
    family(
        "slaswitch_link_rate_bps",
        "gauge",
        "Line rate of the paced port, wire bits per second.",
        links
            .iter()
            .map(|l| (vec![("link", l.name.clone()), ("scheduler", l.scheduler.to_string())], l.link_rate_bps))
            .collect(),
    );
    family(
        "slaswitch_link_sent_packets_total",
        "counter",
        "Frames the VM sent onto the paced link.",
        per_vm(&|v| v.out.sent_packets),
    );
    family(
        "slaswitch_link_sent_wire_bytes_total",
        "counter",
        "Wire bytes (frames plus 24) the VM sent onto the paced link.",
        per_vm(&|v| v.out.sent_wire_bytes),
    );
    family(
        "slaswitch_link_dropped_total",
        "counter",
        "The VM's frames its full queue on the link dropped.",
        per_vm(&|v| v.out.dropped),
    );
    family(
        "slaswitch_link_sched_cycles_total",
        "counter",
        "TSC cycles the link scheduler spent on the VM's frames.",
        per_vm(&|v| v.out.sched_cycles),
    );
    family(
        "slaswitch_link_queued_frames",
        "gauge",
        "The VM's frames waiting on the link.",
        per_vm(&|v| v.queued_frames as u64),
    );
    family(
        "slaswitch_link_guarantee_bps",
        "gauge",
        "The rate the link's scheduler guarantees the VM now, wire bits per second (0: none).",
        per_vm(&|v| v.guarantee_bps),
    );
}

/// One sample per port, labelled with its name.
fn per_port_of(ports: &[PortStats], f: &dyn Fn(&PortStats) -> u64) -> Vec<Sample> {
    ports.iter().map(|p| (vec![("port", p.name.clone())], f(p))).collect()
}

/// The ports' drivers' own counters: what they dropped before the switch saw it.
fn device_families(family: &mut Family<'_>, ports: &[PortStats]) {
    let per_port = |f: &dyn Fn(&PortStats) -> u64| per_port_of(ports, f);
    family(
        "slaswitch_port_device_rx_missed_total",
        "counter",
        "Frames the port's device dropped because its receive ring was full.",
        per_port(&|p| p.device_rx_missed),
    );
    family(
        "slaswitch_port_device_rx_nombuf_total",
        "counter",
        "Receives the port's device could not give a buffer.",
        per_port(&|p| p.device_rx_nombuf),
    );
    family(
        "slaswitch_port_device_rx_errors_total",
        "counter",
        "Frames the port's driver refused before the switch saw them (a tap port's frame longer than its buffers).",
        per_port(&|p| p.device_rx_errors),
    );
}

/// Per-port counters and gauges.
/// What the egress stage did besides sending: frames made into what their output port takes
/// (offloads done in software), frames over its MTU dropped.
fn egress_families(family: &mut Family<'_>, ports: &[PortStats]) {
    let per_port = |f: &dyn Fn(&PortStats) -> u64| per_port_of(ports, f);
    family(
        "slaswitch_port_tx_mtu_dropped_total",
        "counter",
        "Frames longer than the port's MTU allows, dropped instead of sent.",
        per_port(&|p| p.tx_mtu_dropped),
    );
    family(
        "slaswitch_port_segmented_total",
        "counter",
        "Large TCP segments from the port (virtio-net TSO) cut into frames in software for a port that takes none.",
        per_port(&|p| p.rx.offload.segmented),
    );
    family(
        "slaswitch_port_segments_total",
        "counter",
        "Frames those segments became.",
        per_port(&|p| p.rx.offload.segments),
    );
    family(
        "slaswitch_port_segment_cycles_total",
        "counter",
        "PMD cycles spent cutting them (charged to the port in its egress cycles too).",
        per_port(&|p| p.rx.offload.segment_cycles),
    );
    family(
        "slaswitch_port_checksums_completed_total",
        "counter",
        "Partial TCP/UDP checksums from the port completed in software.",
        per_port(&|p| p.rx.offload.checksums),
    );
    family(
        "slaswitch_port_offload_dropped_total",
        "counter",
        "Frames from the port dropped because they could not be made whole (not TCP, too large for a buffer, no buffer).",
        per_port(&|p| p.rx.offload.drops),
    );
}

fn port_families(family: &mut Family<'_>, ports: &[PortStats]) {
    let per_port = |f: &dyn Fn(&PortStats) -> u64| per_port_of(ports, f);
    family(
        "slaswitch_port_rx_packets_total",
        "counter",
        "Packets received on the port.",
        per_port(&|p| p.rx.rx_packets),
    );
    family("slaswitch_port_rx_bytes_total", "counter", "Bytes received on the port.", per_port(&|p| p.rx.rx_bytes));
    family(
        "slaswitch_port_tx_packets_total",
        "counter",
        "Packets transmitted on the port.",
        per_port(&|p| p.tx_packets),
    );
    family("slaswitch_port_tx_bytes_total", "counter", "Bytes transmitted on the port.", per_port(&|p| p.tx_bytes));
    family("slaswitch_port_tx_dropped_total", "counter", "Packets the port did not take.", per_port(&|p| p.tx_dropped));
    device_families(family, ports);
    egress_families(family, ports);
    family(
        "slaswitch_port_rule_dropped_total",
        "counter",
        "Packets from the port dropped by a rule or a table miss.",
        per_port(&|p| p.rx.dropped_by_rules),
    );
    family(
        "slaswitch_port_policer_dropped_total",
        "counter",
        "Packets the port's ingress policer dropped.",
        per_port(&|p| p.rx.policer_drops),
    );
    family("slaswitch_port_link_up", "gauge", "1 when the port's link is up.", per_port(&|p| u64::from(p.link_up)));
    family(
        "slaswitch_port_cpu_alloc_cycles_per_sec",
        "gauge",
        "C2QoS cycle allocation (0: unlimited), from cycles_per_sec or the bandwidth-CPU model.",
        per_port(&|p| p.cycles_per_sec),
    );
    family(
        "slaswitch_port_purchased_bps",
        "gauge",
        "Purchased bandwidth (bandwidth_bps), 0 when none.",
        per_port(&|p| p.bandwidth_bps),
    );
    family(
        "slaswitch_port_purchase_owed_bytes",
        "gauge",
        "Bytes of its purchase the port is owed (held short while backlogged), being paid back by a raise.",
        per_port(&|p| p.owed.map_or(0, |(owed, _)| owed.round() as u64)),
    );
    family(
        "slaswitch_port_fallback_dropped_total",
        "counter",
        "Packets the NIC-bottleneck fallback's byte limit dropped.",
        per_port(&|p| p.rx.fallback_drops),
    );
    family(
        "slaswitch_port_link_rate_bps",
        "gauge",
        "Line rate a paced port sends at (0: not paced).",
        per_port(&|p| p.link_rate_bps),
    );
    family(
        "slaswitch_port_link_queued_frames",
        "gauge",
        "Frames waiting in a paced port's queue.",
        per_port(&|p| p.link_queued as u64),
    );
    let mut stages = Vec::new();
    for p in ports {
        for (stage, v) in [
            ("ingress", p.rx.ingress_cycles),
            ("classification", p.rx.classify_cycles),
            ("egress", p.rx.egress_cycles),
            ("idle", p.rx.idle_cycles),
        ] {
            stages.push((vec![("port", p.name.clone()), ("stage", stage.to_string())], v));
        }
    }
    family(
        "slaswitch_port_cycles_total",
        "counter",
        "TSC cycles the PMD spent on the port, per stage (idle: empty polls).",
        stages,
    );
    let mut errors = Vec::new();
    for p in ports {
        for kind in ParseError::ALL {
            errors.push((
                vec![("port", p.name.clone()), ("kind", kind.name().to_string())],
                p.rx.parse_errors[kind as usize],
            ));
        }
    }
    family("slaswitch_port_parse_errors_total", "counter", "Malformed frames dropped, by kind.", errors);
    // The classification caches, tier by tier (`slaswitch-datapath/src/flow_caches.rs`).
    let caches: [(&str, &str, &str, PortFigure); 5] = [
        ("slaswitch_port_emc_hits_total", "counter", "Packets the exact-match cache answered.", |p| p.rx.emc_hits),
        (
            "slaswitch_port_emc_misses_total",
            "counter",
            "Packets the exact-match cache did not answer (all that went to the megaflow cache).",
            |p| p.rx.emc_misses,
        ),
        ("slaswitch_port_megaflow_hits_total", "counter", "Packets a megaflow answered.", |p| p.rx.megaflow_hits),
        (
            "slaswitch_port_megaflow_misses_total",
            "counter",
            "Packets that missed both caches and searched every subtable.",
            |p| p.rx.megaflow_misses,
        ),
        ("slaswitch_port_megaflows", "gauge", "Megaflows cached for the port.", |p| p.rx.megaflows),
    ];
    for (name, kind, help, value) in caches {
        family(name, kind, help, per_port(&value));
    }
}

/// One figure of a port, read from its stats.
type PortFigure = fn(&PortStats) -> u64;

/// Per-PMD cycles, C2QoS's waits, the overhead probe's figures and the drift factor.
fn pmd_families(family: &mut Family<'_>, pmds: &[PmdStats]) {
    let mut pmd_cycles = Vec::new();
    for p in pmds {
        pmd_cycles.push((vec![("core", p.core.to_string()), ("state", "busy".to_string())], p.totals.busy_cycles));
        pmd_cycles.push((vec![("core", p.core.to_string()), ("state", "idle".to_string())], p.totals.idle_cycles));
        pmd_cycles
            .push((vec![("core", p.core.to_string()), ("state", "stalled".to_string())], p.totals.stalled_cycles));
    }
    family("slaswitch_pmd_cycles_total", "counter", "TSC cycles of each PMD thread: busy, idle, or stalled (a stage interrupted by the host for over 100 us, charged to no port).", pmd_cycles);
    // What the overhead probe (slaswitchd --probe) measures, when it runs.
    let probe_fields: [ProbeFamily; 5] = [
        ("slaswitch_pmd_qos_decisions_total", "C2QoS scheduler decisions of each PMD thread.", |t| t.qos_decisions),
        (
            "slaswitch_pmd_qos_cycles_total",
            "Cycles C2QoS's own code took on each PMD thread (decisions sampled one in 64).",
            |t| t.qos_cycles,
        ),
        ("slaswitch_pmd_qos_empty_decisions_total", "C2QoS decisions whose poll came back empty.", |t| {
            t.qos_empty_decisions
        }),
        (
            "slaswitch_pmd_qos_empty_cycles_total",
            "Of slaswitch_pmd_qos_cycles_total, the decisions whose poll came back empty.",
            |t| t.qos_empty_cycles,
        ),
        (
            "slaswitch_pmd_qos_sampling_cycles_total",
            "Cycles the timed decisions' fences waited for earlier stores: the timing's own cost.",
            |t| t.qos_sampling_cycles,
        ),
    ];
    for (name, help, field) in probe_fields {
        let samples: Vec<Sample> =
            pmds.iter().filter_map(|p| Some((vec![("core", p.core.to_string())], field(&p.probe?.totals)))).collect();
        if !samples.is_empty() {
            family(name, "counter", help, samples);
        }
    }
    family(
        "slaswitch_pmd_qos_owed_total",
        "counter",
        "Batches after which a C2QoS port owed cycle tokens, on each PMD thread.",
        pmds.iter().map(|p| (vec![("core", p.core.to_string())], p.totals.qos_owed)).collect(),
    );
    family(
        "slaswitch_pmd_qos_parked_total",
        "counter",
        "Times a C2QoS port was parked in the waiting queue for cycle tokens, on each PMD thread.",
        pmds.iter().map(|p| (vec![("core", p.core.to_string())], p.totals.qos_parked)).collect(),
    );
    family(
        "slaswitch_pmd_qos_turn_batches_total",
        "counter",
        "Batches a C2QoS port ran as its turn going on, with no scheduler decision before them, on each PMD thread.",
        pmds.iter().map(|p| (vec![("core", p.core.to_string())], p.totals.qos_turn_batches)).collect(),
    );
    // The comparison of C2QoS with round robin (slaswitchd --compare-slice-us), when on.
    let compare_family = |name: &str, help: &str, field: fn(&CompareSide) -> u64| {
        let mut samples = Vec::new();
        for p in pmds {
            if let Some(c) = p.probe.and_then(|r| r.compare) {
                samples.push((
                    vec![("core", p.core.to_string()), ("side", "round_robin".to_string())],
                    field(&c.round_robin),
                ));
                samples.push((vec![("core", p.core.to_string()), ("side", "c2qos".to_string())], field(&c.c2qos)));
            }
        }
        (name.to_string(), help.to_string(), samples)
    };
    for (name, help, samples) in [
        compare_family(
            "slaswitch_pmd_compare_slices_total",
            "Counted slices of each side of the live comparison of C2QoS with round robin.",
            |s| s.slices,
        ),
        compare_family(
            "slaswitch_pmd_compare_cycles_total",
            "TSC cycles counted on each side of the comparison (busy, idle and stalled).",
            |s| s.elapsed_cycles,
        ),
        compare_family(
            "slaswitch_pmd_compare_busy_cycles_total",
            "Busy cycles counted on each side of the comparison.",
            |s| s.busy_cycles,
        ),
        compare_family(
            "slaswitch_pmd_compare_packets_total",
            "Packets received on each side of the comparison.",
            |s| s.packets,
        ),
        compare_family(
            "slaswitch_pmd_compare_empty_polls_total",
            "Polls that found nothing on each side of the comparison.",
            |s| s.empty_polls,
        ),
        compare_family(
            "slaswitch_pmd_compare_qos_cycles_total",
            "C2QoS's own cycles on each side of the comparison (none on round robin's).",
            |s| s.qos_cycles,
        ),
    ] {
        if !samples.is_empty() {
            family(&name, "counter", &help, samples);
        }
    }
    family(
        "slaswitch_pmd_drift_factor_ppm",
        "gauge",
        "Host-speed factor model allocations follow, in millionths (1000000: as calibrated).",
        pmds.iter().map(|p| (vec![("core", p.core.to_string())], (p.drift_factor * 1e6) as u64)).collect(),
    );
}
