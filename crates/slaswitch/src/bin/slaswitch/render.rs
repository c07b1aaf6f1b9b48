//! The CLI's tables: each verb's reply rendered for a person (`--json` prints it as it is).

use serde_json::Value;

fn f(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            n.as_f64().map_or(n.to_string(), |x| if x.fract() == 0.0 { format!("{x}") } else { format!("{x:.1}") })
        }
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn render(verb: &str, r: &Value) -> String {
    let mut out = String::new();
    match verb {
        "add-port" => {
            out += &format!(
                "port {} is number {}{}\n",
                f(&r["name"]),
                f(&r["number"]),
                r["socket"].as_str().map_or(String::new(), |s| format!(", socket {s}"))
            )
        }
        "list-ports" => {
            out += &format!(
                "{:<16} {:>4}  {:<18} {:>4}  {:<5} {}\n",
                "PORT", "NUM", "TYPE", "PMD", "LINK", "STATE / SOCKET"
            );
            for p in r.as_array().into_iter().flatten() {
                out += &format!(
                    "{:<16} {:>4}  {:<18} {:>4}  {:<5} {}\n",
                    f(&p["name"]),
                    f(&p["number"]),
                    f(&p["type"]),
                    f(&p["pmd_core"]),
                    if p["link_up"].as_bool() == Some(true) { "up" } else { "down" },
                    if p["state"] == "up" { p["socket"].as_str().unwrap_or("").to_string() } else { f(&p["state"]) }
                );
            }
        }
        "dump-flows" => {
            for fl in r.as_array().into_iter().flatten() {
                out += &format!(" n_packets={}, n_bytes={}, {}\n", f(&fl["packets"]), f(&fl["bytes"]), f(&fl["flow"]));
            }
        }
        "port-stats" => {
            for p in r["ports"].as_array().into_iter().flatten() {
                let rx = &p["rx"];
                let errors: u64 = rx["parse_errors"].as_array().into_iter().flatten().filter_map(Value::as_u64).sum();
                out += &format!("port {} ({}):\n  RX packets:{} bytes:{} malformed:{} rule-drops:{} policed:{} ring-overruns:{}\n  TX packets:{} bytes:{} dropped:{}\n",
                    f(&p["number"]), f(&p["name"]), f(&rx["rx_packets"]), f(&rx["rx_bytes"]), errors, f(&rx["dropped_by_rules"]), f(&rx["policer_drops"]), f(&p["device_rx_missed"]),
                    f(&p["tx_packets"]), f(&p["tx_bytes"]), f(&p["tx_dropped"]));
            }
        }
        "pmd-stats" => out += &render_pmd_stats(r),
        "qos-show" => out += &render_qos(r),
        "link-show" => out += &crate::render_link::render_link_show(r),
        "model-show" => match serde_json::from_value::<slaswitch_qos::cpu::BandwidthModel>(r["model"].clone()) {
            Ok(m) => out += &format!("{}{}\n", slaswitch::calibrate::render(&m), f(&r["path"])),
            Err(e) => out += &format!("unreadable model: {e}\n"),
        },
        _ => out += &format!("{}\n", serde_json::to_string(r).expect("JSON")),
    }
    out
}

/// `pmd-stats`: per PMD its busy share, C2QoS's own cost, and a row per port.
fn render_pmd_stats(r: &Value) -> String {
    let mut out = String::new();
    for pmd in r["pmds"].as_array().into_iter().flatten() {
        let (busy, idle) = (pmd["busy_cycles"].as_f64().unwrap_or(0.0), pmd["idle_cycles"].as_f64().unwrap_or(0.0));
        out += &format!(
            "pmd thread core {}:\n  busy {:.1}% (last interval {}%), busy cycles {} = per-port stage cycles {}\n",
            f(&pmd["core"]),
            if busy + idle > 0.0 { busy * 100.0 / (busy + idle) } else { 0.0 },
            pmd["busy_pct_interval"].as_f64().map_or("-".into(), |x| format!("{x:.1}")),
            f(&pmd["busy_cycles"]),
            f(&pmd["stage_cycles_sum"])
        );
        let probe = &pmd["probe"];
        let (decisions, qos) =
            (probe["qos_decisions"].as_f64().unwrap_or(0.0), probe["qos_cycles"].as_f64().unwrap_or(0.0));
        if decisions > 0.0 {
            // Of all the thread's cycles: decisions before empty polls are idle time,
            // so a share of busy cycles would overstate a lightly loaded PMD's cost.
            let share = if busy + idle > 0.0 { qos * 100.0 / (busy + idle) } else { 0.0 };
            out += &format!(
                "  C2QoS (probe): {} decisions ({} before empty polls), {:.0} cycles each, {share:.3}% of the PMD's cycles\n",
                f(&probe["qos_decisions"]),
                f(&probe["qos_empty_decisions"]),
                qos / decisions
            );
        }
        if pmd["qos_owed"].as_f64().unwrap_or(0.0) + pmd["qos_parked"].as_f64().unwrap_or(0.0) > 0.0 {
            out += &format!(
                "  C2QoS: {} batches left a port owing tokens, {} parked it\n",
                f(&pmd["qos_owed"]),
                f(&pmd["qos_parked"])
            );
        }
        if let Some(c) = probe["compare"].as_object() {
            out += &render_compare(c, r["tsc_hz"].as_f64().unwrap_or(0.0));
        }
        out += &pmd_port_table(pmd);
        for p in pmd["ports"].as_array().into_iter().flatten() {
            let l = &p["link_out"];
            let frames = l["sent_packets"].as_f64().unwrap_or(0.0);
            if frames > 0.0 || l["dropped"].as_u64().unwrap_or(0) > 0 {
                out += &format!(
                    "  {:<14} link scheduler: {} frames sent, {} dropped at its queue, {:.0} cycles/frame\n",
                    f(&p["name"]),
                    f(&l["sent_packets"]),
                    f(&l["dropped"]),
                    l["sched_cycles"].as_f64().unwrap_or(0.0) / frames.max(1.0)
                );
            }
        }
    }

    out
}

/// A PMD's ports, a row each: rates, cycles per stage, shares, cache hits, residence.
fn pmd_port_table(pmd: &Value) -> String {
    let mut out = String::new();
    out += &format!(
        "  {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9}\n",
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
        "res.p99us"
    );
    for p in pmd["ports"].as_array().into_iter().flatten() {
        let i = &p["interval"];
        let c = &i["cycles_per_packet"];
        let res = |q: &str| i["residence_us"][q].as_f64().map_or("-".into(), |us| format!("{us:.1}"));
        out += &format!(
            "  {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>9} {:>9}\n",
            f(&p["name"]),
            f(&i["rx_kpps"]),
            f(&i["rx_mbps"]),
            f(&c["ingress"]),
            f(&c["classification"]),
            f(&c["egress"]),
            f(&c["total"]),
            f(&i["pmd_share_pct"]),
            f(&i["emc_hit_pct"]),
            f(&i["megaflow_hit_pct"]),
            res("p50"),
            res("p99")
        );
    }
    out
}

/// `pmd-stats`, the live comparison of C2QoS with round robin (slaswitchd --compare-slice-us):
/// each side's rate over its counted time, and C2QoS's against round robin's.
fn render_compare(c: &serde_json::Map<String, Value>, tsc_hz: f64) -> String {
    let side = |name: &str| {
        let s = &c[name];
        let n = |k: &str| s[k].as_f64().unwrap_or(0.0);
        let secs = n("elapsed_cycles") / tsc_hz.max(1.0);
        (
            n("slices"),
            if secs > 0.0 { n("packets") / secs } else { 0.0 },
            n("busy_cycles") / n("packets").max(1.0),
            n("empty_polls") / n("batches").max(1.0),
            n("qos_cycles") * 100.0 / n("busy_cycles").max(1.0),
        )
    };
    let (rr, c2) = (side("round_robin"), side("c2qos"));
    let mut out = format!("  comparison, slices of {} us (their first three quarters not counted):\n", c["slice_us"]);
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

/// One port's allocation as `qos-show` works it out: the model's row, the batch term, C_single,
/// the factors and C_alloc (seed 000 Sec. III-D), then drift, its link and its latency class.
fn allocation_working(p: &Value) -> String {
    let mut out = String::new();
    let a = &p["allocation"];
    let c = &a["cycles_per_packet"];
    let total = stage_total(c);
    out += &format!(
        "\n{}: purchased {} bit/s, profile {}-byte frames, {} flows\n",
        f(&p["name"]),
        f(&a["bandwidth_bps"]),
        f(&a["profile"]["packet_bytes"]),
        f(&a["profile"]["flows"])
    );
    let rows: Vec<String> = a["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let measured = &e["measured_cycles_per_packet"];
            let raised = if measured.is_null() {
                String::new()
            } else {
                format!(" (raised to the smaller frames' cost; measured {:.0})", stage_total(measured))
            };
            format!("{} bytes/{}{raised}", f(&e["packet_bytes"]), f(&e["flows"]))
        })
        .collect();
    out += &format!(
        "  model entry {}{}: {:.0} cycles/packet (ingress {:.0}, classification {:.0}, egress {:.0})\n",
        rows.join(" and "),
        if rows.len() > 1 { " (interpolated)" } else { "" },
        total,
        c["ingress"].as_f64().unwrap_or(0.0),
        c["classification"].as_f64().unwrap_or(0.0),
        c["egress"].as_f64().unwrap_or(0.0)
    );
    let batch = a["batch_cycles_per_packet"].as_f64().unwrap_or(0.0);
    out += &format!(
        "  batch term: batches of {} frames, {batch:.0} cycles/packet beyond the row\n",
        f(&a["profile"]["batch_packets"])
    );
    out += &format!(
        "  C_single = {:.0} packets/s x {:.0} cycles = {:.0} cycles/s\n",
        a["packets_per_sec"].as_f64().unwrap_or(0.0),
        total + batch,
        a["c_single_cycles_per_sec"].as_f64().unwrap_or(0.0)
    );
    for fa in a["factors"].as_array().into_iter().flatten() {
        out += &format!(
            "  R {} ({} = {}, {}) = {:.3}\n",
            f(&fa["name"]),
            f(&fa["name"]),
            f(&fa["input"]),
            f(&fa["source"]),
            fa["value"].as_f64().unwrap_or(1.0)
        );
    }
    out += &format!("  C_alloc = prod(R) x C_single = {} cycles/s\n", f(&a["cycles_per_sec"]));
    if let Some(d) = p["drift_factor"].as_f64() {
        let raise = p["owed_raise"].as_f64().unwrap_or(1.0);
        let owed = match p["owed_bytes"].as_f64() {
            Some(owed) if raise > 1.0 => format!(" x {raise:.3} (owed {owed:.0} bytes of its purchase, paid back)"),
            _ => String::new(),
        };
        out += &format!(
            "  x host speed factor {d:.3} (drift compensation){owed} = {} cycles/s in force\n",
            f(&p["effective_cycles_per_sec"])
        );
    }
    out += &crate::render_link::link_half(p);
    if p["latency_forgiven_cycles"].as_u64().unwrap_or(0) > 0 {
        out += &format!(
            "  latency class: {} cycles of debt forgiven within its purchase (never parked while within it)\n",
            f(&p["latency_forgiven_cycles"])
        );
    }

    out
}

/// Cycles per packet over the three stages of a `StageCycles` in JSON.
fn stage_total(c: &Value) -> f64 {
    ["ingress", "classification", "egress"].iter().map(|k| c[*k].as_f64().unwrap_or(0.0)).sum()
}

/// A PMD's cycles as `qos-show` reports them on `p`, one of its ports: admitted, deliverable,
/// in force, and the buckets' depth.
fn pmd_budget_line(p: &Value, r: &Value) -> String {
    format!(
        "PMD core {}: {} cycles/s admitted of {} deliverable ({} the core's), {} in force; \
         cycle buckets hold {} us of the core unless a purchase needs a ring's worth\n",
        f(&p["pmd_core"]),
        f(&p["pmd_allocated_cycles_per_sec"]),
        f(&p["pmd_deliverable_cycles_per_sec"]),
        f(&p["pmd_capacity_cycles_per_sec"]),
        f(&p["pmd_effective_cycles_per_sec"]),
        f(&r["c2tb_bucket_us"])
    )
}

/// `qos-show`: a table of every port, then for each port whose cycles come from the model the
/// working (seed 000 Sec. III-D), then the uplink and the NIC fallback (Sec. VII).
fn render_qos(r: &Value) -> String {
    let mut out = format!(
        "{:<12} {:>4} {:>10} {:>13} {:>8} {:>4} {:>6} {:>6} {:>13} {:>14}\n",
        "port", "core", "bandwidth", "cycles/s", "mode", "prio", "alloc%", "used%", "tokens", "place/class"
    );
    let ports: Vec<&Value> = r["ports"].as_array().into_iter().flatten().collect();
    let bw = |v: &Value| match v.as_f64() {
        Some(b) if b >= 1e9 => format!("{:.2}G", b / 1e9),
        Some(b) if b >= 1e6 => format!("{:.1}M", b / 1e6),
        Some(b) if b > 0.0 => format!("{:.0}k", b / 1e3),
        _ => "-".into(),
    };
    for p in &ports {
        out += &format!(
            "{:<12} {:>4} {:>10} {:>13} {:>8} {:>4} {:>6} {:>6} {:>13} {:>14}\n",
            f(&p["name"]),
            f(&p["pmd_core"]),
            bw(&p["bandwidth_bps"]),
            f(&p["cycles_per_sec"]),
            f(&p["mode"]),
            f(&p["priority"]),
            f(&p["allocated_pct_of_core"]),
            f(&p["used_pct_of_core"]),
            p["tokens_cycles"].as_f64().map_or("-".into(), |t| format!("{t:.0}")),
            if p["place"].as_str().unwrap_or("").is_empty() {
                "round-robin".to_string()
            } else {
                format!("{}/{}", f(&p["place"]), f(&p["current_class"]))
            }
        );
    }
    if let Some(p) = ports.first() {
        out += &pmd_budget_line(p, r);
    }
    for p in &ports {
        if !p["allocation"].is_null() {
            out += &allocation_working(p);
        }
    }
    let fb = &r["fallback"];
    match fb["uplink"].as_str() {
        Some(up) => {
            out += &format!(
                "\nuplink {up}: line rate {} bit/s, utilisation {:.1}%; NIC fallback {} (engaged {} times, {} frames limited)\n",
                f(&fb["link_rate_bps"]), fb["utilisation"].as_f64().unwrap_or(0.0) * 100.0,
                if fb["enabled"] == false { "off (nic_fallback=false)" } else if fb["engaged"] == true { "ENGAGED: per-VM byte limits at purchased bandwidth" } else { "idle" },
                f(&fb["engagements"]), f(&fb["drops"])
            );
        }
        None => out +=
            "\nno uplink declared (uplink=true, link_rate_bps=...): purchased bandwidth is not checked against a NIC\n",
    }
    match r["model"].as_object() {
        Some(m) => out += &format!("bandwidth-CPU model: {} ({})\n", f(&m["path"]), f(&m["machine"])),
        None => out += "no bandwidth-CPU model loaded: bandwidth_bps needs `slaswitch calibrate`\n",
    }
    out
}
