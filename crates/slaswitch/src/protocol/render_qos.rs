//! `qos-show` for a person: a table of every port, then for each port whose cycles come from
//! the model the working (seed 000 Sec. III-D), then the uplink and the NIC fallback (Sec. VII).

use std::fmt::{self, Display, Formatter};

use slaswitch_datapath::counters::Place;

use super::qos::{QosPortView, QosShowReply};
use super::render::{num, opt};
use super::render_link::link_half;

/// A bandwidth in the table's short form.
fn short_bps(bps: u64) -> String {
    let b = bps as f64;
    match b {
        b if b >= 1e9 => format!("{:.2}G", b / 1e9),
        b if b >= 1e6 => format!("{:.1}M", b / 1e6),
        b if b > 0.0 => format!("{:.0}k", b / 1e3),
        _ => "-".into(),
    }
}

impl Display for QosShowReply {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<12} {:>4} {:>10} {:>13} {:>8} {:>4} {:>6} {:>6} {:>13} {:>14}",
            "port", "core", "bandwidth", "cycles/s", "mode", "prio", "alloc%", "used%", "tokens", "place/class"
        )?;
        for p in &self.ports {
            writeln!(
                f,
                "{:<12} {:>4} {:>10} {:>13} {:>8} {:>4} {:>6} {:>6} {:>13} {:>14}",
                p.name,
                p.pmd_core,
                short_bps(p.bandwidth_bps),
                p.cycles_per_sec,
                p.mode,
                p.priority,
                num(p.allocated_pct_of_core),
                opt(p.used_pct_of_core),
                p.tokens_cycles.map_or("-".into(), |t| format!("{t:.0}")),
                match p.place {
                    Place::Outside => "round-robin".to_string(),
                    place => format!("{}/{}", place.name(), p.current_class),
                }
            )?;
        }
        let mut cores_shown = Vec::new();
        for p in &self.ports {
            if cores_shown.contains(&p.pmd_core) {
                continue;
            }
            cores_shown.push(p.pmd_core);
            writeln!(
                f,
                "PMD core {}: {} cycles/s admitted of {} deliverable ({} the core's), {} in force; \
                 cycle buckets hold {} us of the core unless a purchase needs a ring's worth",
                p.pmd_core,
                p.pmd_allocated_cycles_per_sec,
                p.pmd_deliverable_cycles_per_sec,
                p.pmd_capacity_cycles_per_sec,
                p.pmd_effective_cycles_per_sec,
                self.c2tb_bucket_us
            )?;
        }
        f.write_str(&moves_lines(&self.pmd_moves))?;
        for p in self.ports.iter().filter(|p| p.allocation.is_some()) {
            f.write_str(&allocation_working(p))?;
        }
        for p in &self.ports {
            if let Some(s) = &p.latency_slo {
                f.write_str(&slo_line(&p.name, s))?;
            }
        }
        let fb = &self.fallback;
        match &fb.uplink {
            Some(up) => writeln!(
                f,
                "\nuplink {up}: line rate {} bit/s, utilisation {:.1}%; NIC fallback {} (engaged {} times, {} frames limited)",
                fb.link_rate_bps,
                fb.utilisation * 100.0,
                if !fb.enabled {
                    "off (nic_fallback=false)"
                } else if fb.engaged {
                    "ENGAGED: per-VM byte limits at purchased bandwidth"
                } else {
                    "idle"
                },
                fb.engagements,
                fb.drops
            )?,
            None => writeln!(
                f,
                "\nno uplink declared (uplink=true, link_rate_bps=...): purchased bandwidth is not checked against a NIC"
            )?,
        }
        match &self.model {
            Some(m) => writeln!(f, "bandwidth-CPU model: {} ({})", m.path.display(), m.machine),
            None => writeln!(f, "no bandwidth-CPU model loaded: bandwidth_bps needs `slaswitch calibrate`"),
        }
    }
}

/// One port's allocation as `qos-show` works it out: the model's row, the batch term, C_single,
/// the factors and C_alloc (seed 000 Sec. III-D), then drift, its link and its latency class.
fn allocation_working(p: &QosPortView) -> String {
    let Some(a) = &p.allocation else { return String::new() };
    let c = &a.cycles_per_packet;
    let mut out = format!(
        "\n{}: purchased {} bit/s, profile {}-byte frames, {} flows\n",
        p.name,
        a.bandwidth_bps,
        a.profile.packet_bytes,
        a.profile.flows.name()
    );
    let rows: Vec<String> = a
        .entries
        .iter()
        .map(|e| {
            let raised = e
                .measured_cycles_per_packet
                .map_or(String::new(), |m| format!(" (raised to the smaller frames' cost; measured {:.0})", m.total()));
            format!("{} bytes/{}{raised}", e.packet_bytes, e.flows.name())
        })
        .collect();
    out += &format!(
        "  model entry {}{}: {:.0} cycles/packet (ingress {:.0}, classification {:.0}, egress {:.0})\n",
        rows.join(" and "),
        if rows.len() > 1 { " (interpolated)" } else { "" },
        c.total(),
        c.ingress,
        c.classification,
        c.egress
    );
    let batch = a.batch_cycles_per_packet;
    out += &format!(
        "  batch term: batches of {} frames, {batch:.0} cycles/packet beyond the row\n",
        a.profile.batch_packets
    );
    out += &format!(
        "  C_single = {:.0} packets/s x {:.0} cycles = {:.0} cycles/s\n",
        a.packets_per_sec,
        c.total() + batch,
        a.c_single_cycles_per_sec
    );
    for fa in &a.factors {
        out += &format!("  R {} ({} = {}, {}) = {:.3}\n", fa.name, fa.name, fa.input, fa.source, fa.value);
    }
    out += &format!("  C_alloc = prod(R) x C_single = {} cycles/s\n", a.cycles_per_sec);
    if let Some(d) = p.drift_factor {
        let raise = p.owed_raise.unwrap_or(1.0);
        let owed = match p.owed_bytes {
            Some(owed) if raise > 1.0 => format!(" x {raise:.3} (owed {owed:.0} bytes of its purchase, paid back)"),
            _ => String::new(),
        };
        out += &format!(
            "  x host speed factor {d:.3} (drift compensation){owed} = {} cycles/s in force\n",
            p.effective_cycles_per_sec
        );
    }
    if let Some(l) = &p.link {
        out += &link_half(l);
    }
    if p.latency_forgiven_cycles > 0 {
        out += &format!(
            "  latency class: {} cycles of debt forgiven within its purchase (never parked while within it)\n",
            p.latency_forgiven_cycles
        );
    }
    out
}

/// A port's latency SLO: seconds kept and missed, by cause, and the last miss.
fn slo_line(name: &str, s: &super::slo::SloStatus) -> String {
    use super::slo::MissCause;
    let causes: Vec<String> = MissCause::ALL.iter().map(|&c| format!("{} {}", c.name(), s.missed(c))).collect();
    let mut line = format!(
        "\n{name}: latency SLO p99 <= {} us: {} of {} seconds missed ({})",
        s.latency_p99_us,
        s.missed_seconds,
        s.seconds,
        causes.join(", ")
    );
    if let Some(m) = s.last_miss {
        let unstalled = m.unstalled_p99_us.map_or("-".into(), |us| format!("{us:.1}"));
        line += &format!(
            "; last at {:.0} s: p99 {:.1} us ({unstalled} us of frames no stall touched), link queue p99 {:.1} us, PMD stalled {:.0} us ({})",
            m.at_secs,
            m.p99_us,
            m.link_wait_p99_us,
            m.stalled_us,
            m.cause.name()
        );
    }
    line + "\n"
}

/// The moves between PMDs: how many, and each recent one.
fn moves_lines(m: &super::pmd_moves::PmdMoves) -> String {
    if m.total.is_empty() && m.recent.is_empty() {
        return String::new();
    }
    let by_reason: Vec<String> = m.total.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let mut out =
        format!("moves between PMDs: {}\n", if by_reason.is_empty() { "none".into() } else { by_reason.join(", ") });
    for mv in &m.recent {
        let what = match &mv.refused {
            None => format!("in {} us", mv.took_us),
            Some(e) => format!("refused: {e}"),
        };
        let swap = mv
            .swapped_with
            .as_ref()
            .map_or(String::new(), |q| format!(", {q} core {} -> {}", mv.to_core, mv.from_core));
        out.push_str(&format!(
            "  at {:.0} s: {} core {} -> {}{swap} ({}) {what}\n",
            mv.at_secs,
            mv.port,
            mv.from_core,
            mv.to_core,
            mv.reason.name()
        ));
    }
    out
}
