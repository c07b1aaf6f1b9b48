//! Prometheus exposition of every counter the switch keeps, served on a loopback port
//! (`GET /metrics`, text format 0.0.4).

use std::fmt::Write as _;

use slaswitch_classifier::parse::ParseError;
use slaswitch_datapath::datapath::{LinkStats, LinkVmStats};
use slaswitch_datapath::probe::compare::CompareSide;
use slaswitch_datapath::probe::ProbeTotals;
use slaswitch_datapath::{FlowStats, PmdStats, PortStats};

/// A metric family of the overhead probe: name, help, and the field it reads.
type ProbeFamily = (&'static str, &'static str, fn(&ProbeTotals) -> u64);

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Writes one metric family: name, kind, help and its samples (labels, value).
type Family<'a> = dyn FnMut(&str, &str, &str, Vec<(String, u64)>) + 'a;

/// The text of every metric family, in Prometheus' text format 0.0.4.
pub fn render(ports: &[PortStats], pmds: &[PmdStats], flows: &[FlowStats], links: &[LinkStats], tsc_hz: u64) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    };
    port_families(&mut family, ports);
    pmd_families(&mut family, pmds);
    link_families(&mut family, links);
    family("slaswitch_tsc_hz", "gauge", "TSC frequency, to turn cycles into seconds.", vec![(String::new(), tsc_hz)]);
    let flow = |f: &FlowStats| format!("flow=\"{}\"", escape(&f.flow));
    family(
        "slaswitch_flow_packets_total",
        "counter",
        "Packets that matched the flow.",
        flows.iter().map(|f| (flow(f), f.packets)).collect(),
    );
    family(
        "slaswitch_flow_bytes_total",
        "counter",
        "Bytes that matched the flow.",
        flows.iter().map(|f| (flow(f), f.bytes)).collect(),
    );
    residence_family(&mut out, ports);
    out.replace("{}", "")
}

/// Each port's residence times (`slaswitch_datapath` residence) as a Prometheus histogram with
/// a bucket per power of two of nanoseconds.
fn residence_family(out: &mut String, ports: &[PortStats]) {
    let name = "slaswitch_port_residence_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time the port's frames spent in the switch, from the poll after which they arrived to the end of their egress stage.\n# TYPE {name} histogram"
    );
    for p in ports {
        let port = escape(&p.name);
        for (le_ns, count) in p.residence.cumulative_by_power_of_two() {
            let _ = writeln!(out, "{name}_bucket{{port=\"{port}\",le=\"{:e}\"}} {count}", le_ns as f64 / 1e9);
        }
        let total = p.residence.count();
        let _ = writeln!(out, "{name}_bucket{{port=\"{port}\",le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum{{port=\"{port}\"}} {}", p.residence.sum_ns() as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{port=\"{port}\"}} {total}");
    }
}

/// Each paced port's scheduler, per source VM (`link-show`).
fn link_families(family: &mut Family<'_>, links: &[LinkStats]) {
    let per_vm = |f: &dyn Fn(&LinkVmStats) -> u64| {
        links
            .iter()
            .flat_map(|l| {
                l.vms.iter().map(move |v| (format!("link=\"{}\",vm=\"{}\"", escape(&l.name), escape(&v.name)), f(v)))
            })
            .collect::<Vec<_>>()
    };
    family(
        "slaswitch_link_rate_bps",
        "gauge",
        "Line rate of the paced port, wire bits per second.",
        links
            .iter()
            .map(|l| (format!("link=\"{}\",scheduler=\"{}\"", escape(&l.name), l.scheduler), l.link_rate_bps))
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

/// Per-port counters and gauges.
fn port_families(family: &mut Family<'_>, ports: &[PortStats]) {
    let per_port = |f: &dyn Fn(&PortStats) -> u64| {
        ports.iter().map(|p| (format!("port=\"{}\"", escape(&p.name)), f(p))).collect::<Vec<_>>()
    };
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
            stages.push((format!("port=\"{}\",stage=\"{stage}\"", escape(&p.name)), v));
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
                format!("port=\"{}\",kind=\"{}\"", escape(&p.name), kind.name()),
                p.rx.parse_errors[kind as usize],
            ));
        }
    }
    family("slaswitch_port_parse_errors_total", "counter", "Malformed frames dropped, by kind.", errors);
    family(
        "slaswitch_port_emc_hits_total",
        "counter",
        "Exact-match cache hits for the port's packets.",
        per_port(&|p| p.rx.emc_hits),
    );
    family(
        "slaswitch_port_emc_misses_total",
        "counter",
        "Exact-match cache misses for the port's packets.",
        per_port(&|p| p.rx.emc_misses),
    );
}

/// Per-PMD cycles, C2QoS's waits, the overhead probe's figures and the drift factor.
fn pmd_families(family: &mut Family<'_>, pmds: &[PmdStats]) {
    let mut pmd_cycles = Vec::new();
    for p in pmds {
        pmd_cycles.push((format!("core=\"{}\",state=\"busy\"", p.core), p.totals.busy_cycles));
        pmd_cycles.push((format!("core=\"{}\",state=\"idle\"", p.core), p.totals.idle_cycles));
        pmd_cycles.push((format!("core=\"{}\",state=\"stalled\"", p.core), p.totals.stalled_cycles));
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
        let samples: Vec<(String, u64)> =
            pmds.iter().filter_map(|p| Some((format!("core=\"{}\"", p.core), field(&p.probe?.totals)))).collect();
        if !samples.is_empty() {
            family(name, "counter", help, samples);
        }
    }
    family(
        "slaswitch_pmd_qos_owed_total",
        "counter",
        "Batches after which a C2QoS port owed cycle tokens, on each PMD thread.",
        pmds.iter().map(|p| (format!("core=\"{}\"", p.core), p.totals.qos_owed)).collect(),
    );
    family(
        "slaswitch_pmd_qos_parked_total",
        "counter",
        "Times a C2QoS port was parked in the waiting queue for cycle tokens, on each PMD thread.",
        pmds.iter().map(|p| (format!("core=\"{}\"", p.core), p.totals.qos_parked)).collect(),
    );
    // The comparison of C2QoS with round robin (slaswitchd --compare-slice-us), when on.
    let compare_family = |name: &str, help: &str, field: fn(&CompareSide) -> u64| {
        let mut samples = Vec::new();
        for p in pmds {
            if let Some(c) = p.probe.and_then(|r| r.compare) {
                samples.push((format!("core=\"{}\",side=\"round_robin\"", p.core), field(&c.round_robin)));
                samples.push((format!("core=\"{}\",side=\"c2qos\"", p.core), field(&c.c2qos)));
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
        pmds.iter().map(|p| (format!("core=\"{}\"", p.core), (p.drift_factor * 1e6) as u64)).collect(),
    );
}
