//! The CLI's text: each reply rendered for a person (`--json` prints it as it travels).

use std::fmt::{self, Display, Formatter};

use slaswitch_datapath::probe::compare::{CompareSide, CompareTotals};

use super::replies::*;
use super::stats::{PmdStatsReply, PmdView, PortList, PortStatsReply, ResidenceUs};

/// A figure as the tables show it: whole numbers as they are, others to one decimal.
pub(super) fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x}")
    } else {
        format!("{x:.1}")
    }
}

/// An optional figure: `-` when absent.
pub(super) fn opt(x: Option<f64>) -> String {
    x.map_or("-".into(), num)
}

impl Display for Response {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Response::PortAdded(r) => r.fmt(f),
            Response::PortDeleted(r) => writeln!(f, "port {} deleted", r.deleted),
            Response::PortsSet(PortsSet::One(p)) => writeln!(f, "port {} set", p.name),
            Response::PortsSet(PortsSet::Several(ps)) => {
                let names: Vec<&str> = ps.iter().map(|p| p.name.as_str()).collect();
                writeln!(f, "ports {} set as one step", names.join(", "))
            }
            Response::Ports(r) => r.fmt(f),
            Response::FlowsAdded(r) => writeln!(f, "{} flows added", r.added),
            Response::FlowsDeleted(r) => writeln!(f, "{} flows deleted", r.deleted),
            Response::Flows(r) => r.fmt(f),
            Response::PortStats(r) => r.fmt(f),
            Response::PmdStats(r) => r.fmt(f),
            Response::QosShow(r) => r.fmt(f),
            Response::ModelLoaded(r) => {
                writeln!(f, "model {} in use, saved as {}", r.loaded.display(), r.saved_as.display())
            }
            Response::Model(r) => writeln!(f, "{}{}", crate::calibrate::render(&r.model), r.path.display()),
            Response::LinkShow(r) => r.fmt(f),
            Response::TenantSet(r) => writeln!(f, "tenant {} has weight {}", r.tenant, r.weight),
            Response::TenantDeleted(r) => writeln!(f, "tenant {} deleted", r.deleted),
            // The configuration is itself the document a person reads.
            Response::Config(c) => writeln!(f, "{}", serde_json::to_string_pretty(c).map_err(|_| fmt::Error)?),
        }
    }
}

impl Display for PortAdded {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "port {} is number {}", self.name, self.number)?;
        match &self.socket {
            Some(s) => writeln!(f, ", socket {}", s.display()),
            None => writeln!(f),
        }
    }
}

impl Display for PortList {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<16} {:>4}  {:<18} {:>4}  {:<5} STATE / SOCKET", "PORT", "NUM", "TYPE", "PMD", "LINK")?;
        for p in &self.0 {
            writeln!(
                f,
                "{:<16} {:>4}  {:<18} {:>4}  {:<5} {}",
                p.name,
                p.number,
                p.port_type,
                p.pmd_core.map_or("-".into(), |c| c.to_string()),
                if p.link_up == Some(true) { "up" } else { "down" },
                if p.state == "up" { p.socket.as_deref().unwrap_or("") } else { &p.state }
            )?;
        }
        Ok(())
    }
}

impl Display for FlowList {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for fl in &self.0 {
            writeln!(f, " n_packets={}, n_bytes={}, {}", fl.packets, fl.bytes, fl.flow)?;
        }
        Ok(())
    }
}

impl Display for PortStatsReply {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for p in &self.ports {
            let rx = &p.rx;
            let malformed: u64 = rx.parse_errors.iter().sum();
            writeln!(
                f,
                "port {} ({}):\n  RX packets:{} bytes:{} malformed:{malformed} rule-drops:{} policed:{} ring-overruns:{} \
                 device-errors:{}\n  TX packets:{} bytes:{} dropped:{} mtu-drops:{} (mtu {})",
                p.number, p.name, rx.rx_packets, rx.rx_bytes, rx.dropped_by_rules, rx.policer_drops, p.device_rx_missed,
                p.device_rx_errors, p.tx_packets, p.tx_bytes, p.tx_dropped, p.tx_mtu_dropped, p.mtu_bytes
            )?;
            let o = &rx.offload;
            if o.segmented + o.checksums + o.drops > 0 {
                let per_byte = o.segment_cycles as f64 / o.segment_bytes.max(1) as f64;
                writeln!(
                    f,
                    "  OFFLOAD segmented:{} into:{} bytes:{} cycles/byte:{per_byte:.2} checksums:{} dropped:{}",
                    o.segmented, o.segments, o.segment_bytes, o.checksums, o.drops
                )?;
            }
        }
        Ok(())
    }
}

/// `pmd-stats`: per PMD its busy share, C2QoS's own cost, and a row per port.
impl Display for PmdStatsReply {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for pmd in &self.pmds {
            let (busy, idle) = (pmd.busy_cycles as f64, pmd.idle_cycles as f64);
            let total = busy + idle;
            writeln!(
                f,
                "pmd thread core {}:\n  busy {:.1}% (last interval {}%), busy cycles {} = per-port stage cycles {}",
                pmd.core,
                if total > 0.0 { busy * 100.0 / total } else { 0.0 },
                pmd.busy_pct_interval.map_or("-".into(), |x| format!("{x:.1}")),
                pmd.busy_cycles,
                pmd.stage_cycles_sum
            )?;
            let probe = pmd.probe.unwrap_or_default();
            let t = probe.totals;
            if t.qos_decisions > 0 {
                // Of all the thread's cycles: decisions before empty polls are idle time,
                // so a share of busy cycles would overstate a lightly loaded PMD's cost.
                let share = if total > 0.0 { t.qos_cycles as f64 * 100.0 / total } else { 0.0 };
                writeln!(
                    f,
                    "  C2QoS (probe): {} decisions ({} before empty polls), {:.0} cycles each, {share:.3}% of the PMD's cycles",
                    t.qos_decisions,
                    t.qos_empty_decisions,
                    t.qos_cycles as f64 / t.qos_decisions as f64
                )?;
            }
            if pmd.qos_owed + pmd.qos_parked + pmd.qos_turn_batches > 0 {
                writeln!(
                    f,
                    "  C2QoS: {} batches left a port owing tokens, {} parked it; {} batches ran as a turn going on",
                    pmd.qos_owed, pmd.qos_parked, pmd.qos_turn_batches
                )?;
            }
            if let Some(c) = probe.compare {
                f.write_str(&render_compare(&c, self.tsc_hz as f64))?;
            }
            f.write_str(&pmd_port_table(pmd))?;
            for p in &pmd.ports {
                let l = &p.link_out;
                if l.sent_packets > 0 || l.dropped > 0 {
                    writeln!(
                        f,
                        "  {:<14} link scheduler: {} frames sent, {} dropped at its queue, {:.0} cycles/frame",
                        p.name,
                        l.sent_packets,
                        l.dropped,
                        l.sched_cycles as f64 / (l.sent_packets as f64).max(1.0)
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// The widths of `pmd-stats`' port table: the name left-aligned, the figures right-aligned.
const PORT_TABLE_WIDTHS: [usize; 12] = [14, 9, 9, 8, 8, 8, 8, 7, 7, 7, 9, 9];

fn port_table_row<S: AsRef<str>>(cells: &[S]) -> String {
    let mut line = String::from(" ");
    for (i, (cell, w)) in cells.iter().zip(PORT_TABLE_WIDTHS).enumerate() {
        line += &if i == 0 { format!(" {:<w$}", cell.as_ref()) } else { format!(" {:>w$}", cell.as_ref()) };
    }
    line + "\n"
}

/// A PMD's ports, a row each: rates, cycles per stage, shares, cache hits, residence.
fn pmd_port_table(pmd: &PmdView) -> String {
    let mut out = port_table_row(&[
        "port",
        "Kpps",
        "Mbps",
        "ingress",
        "classify",
        "egress",
        "cyc/pkt",
        "share%",
        "emc%",
        "mega%",
        "res.p50us",
        "res.p99us",
        "no-stall.p99us",
    ]);
    for p in &pmd.ports {
        let i = p.interval.as_ref();
        let c = i.map(|i| &i.cycles_per_packet);
        let res = |q: fn(&ResidenceUs) -> f64| {
            i.and_then(|i| i.residence_us.as_ref()).map_or("-".into(), |r| format!("{:.1}", q(r)))
        };
        let unstalled_p99 =
            i.and_then(|i| i.residence_unstalled_us.as_ref()).map_or("-".into(), |r| format!("{:.1}", r.p99));
        out += &port_table_row(&[
            p.name.clone(),
            opt(i.map(|i| i.rx_kpps)),
            opt(i.map(|i| i.rx_mbps)),
            opt(c.map(|c| c.ingress)),
            opt(c.map(|c| c.classification)),
            opt(c.map(|c| c.egress)),
            opt(c.map(|c| c.total)),
            opt(i.map(|i| i.pmd_share_pct)),
            opt(i.map(|i| i.emc_hit_pct)),
            opt(i.map(|i| i.megaflow_hit_pct)),
            res(|r| r.p50),
            res(|r| r.p99),
            unstalled_p99,
        ]);
    }
    out
}

/// `pmd-stats`, the live comparison of C2QoS with round robin (slaswitchd --compare-slice-us):
/// each side's rate over its counted time, and C2QoS's against round robin's.
fn render_compare(c: &CompareTotals, tsc_hz: f64) -> String {
    let side = |s: &CompareSide| {
        let secs = s.elapsed_cycles as f64 / tsc_hz.max(1.0);
        let packets = s.packets as f64;
        (
            s.slices,
            if secs > 0.0 { packets / secs } else { 0.0 },
            s.busy_cycles as f64 / packets.max(1.0),
            s.empty_polls as f64 / (s.batches as f64).max(1.0),
            s.qos_cycles as f64 * 100.0 / (s.busy_cycles as f64).max(1.0),
        )
    };
    let (rr, c2) = (side(&c.round_robin), side(&c.c2qos));
    let mut out = format!("  comparison, slices of {} us (their first three quarters not counted):\n", c.slice_us);
    for (name, s) in [("round robin", rr), ("C2QoS", c2)] {
        out += &format!("    {name:<12} {:>6} slices  {:>9.3} Mpps  {:>6.1} busy cycles/packet  {:>5.2} empty polls/batch  own code {:.3}% of busy\n", s.0, s.1 / 1e6, s.2, s.3, s.4);
    }
    if rr.1 > 0.0 && rr.2 > 0.0 {
        out += &format!(
            "    C2QoS against round robin: forwarding rate {:+.2}%, busy cycles per packet {:+.2}%\n",
            (c2.1 / rr.1 - 1.0) * 100.0,
            (c2.2 / rr.2 - 1.0) * 100.0
        );
    }
    out
}
