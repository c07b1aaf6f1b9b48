//! `link-show`'s table, and the link half of a purchase in `qos-show`.

use serde_json::Value;

fn mbps(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |b| format!("{:.1}", b / 1e6))
}

fn pct(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.1}"))
}

/// The scheduler's state of one VM in a few words.
fn state(v: &Value) -> String {
    if let Some(a) = v.get("ancs") {
        return format!(
            "credit {:.0}/{:.0} B",
            a["remain_credit_bytes"].as_f64().unwrap_or(0.0),
            a["credit_peak_bytes"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(s) = v.get("softbw") {
        return format!("dtau {:.1} us, tts {}", s["dtau_ns"].as_f64().unwrap_or(0.0) / 1e3, s["tts_ns"]);
    }
    if let Some(r) = v.get("ratelimit") {
        return format!("limit {} demand {}", mbps(&r["limit_bps"]), mbps(&r["demand_bps"]));
    }
    "-".into()
}

pub fn render_link_show(r: &Value) -> String {
    let mut out = format!(
        "{}: {} on {} Mbit/s (wire), {} drop, ANCS period {} us, rate-limit period {} us; {} frames queued; utilisation {}%\n",
        r["name"].as_str().unwrap_or("?"),
        r["scheduler"].as_str().unwrap_or("?"),
        mbps(&r["link_rate_bps"]),
        r["drop_policy"].as_str().unwrap_or("?"),
        r["ancs_period_us"],
        r["ratelimit_period_us"],
        r["queued_frames"],
        pct(&r["utilisation_pct"]),
    );
    if let Some(t) = r["tenants"].as_object() {
        let list: Vec<String> = t.iter().map(|(n, w)| format!("{n}={w}")).collect();
        out += &format!("tenants (weight): {}\n", list.join(" "));
    }
    out += &format!(
        "{:<12} {:>6} {:>9} {:>9} {:<22} {:<10} {:>7} {:>9} {:>6} {:>7} {:>8} {:>7}  {}\n",
        "vm",
        "weight",
        "min Mb/s",
        "max Mb/s",
        "guarantee",
        "tenant",
        "queued",
        "rate Mb/s",
        "share%",
        "fulfil%",
        "drops/s",
        "cyc/frm",
        "scheduler state"
    );
    for v in r["vms"].as_array().into_iter().flatten() {
        out += &format!(
            "{:<12} {:>6} {:>9} {:>9} {:<22} {:<10} {:>7} {:>9} {:>6} {:>7} {:>8} {:>7}  {}\n",
            v["name"].as_str().unwrap_or("?"),
            v["weight"],
            mbps(&v["min_bps"]),
            mbps(&v["max_bps"]),
            v["guarantee"].as_str().unwrap_or("?"),
            v["tenant"].as_str().unwrap_or("?"),
            v["queued_frames"],
            mbps(&v["rate_bps"]),
            pct(&v["share_pct"]),
            pct(&v["fulfillment_pct"]),
            v["dropped_interval"].as_u64().map_or("-".into(), |d| d.to_string()),
            v["sched_cycles_per_frame"].as_f64().map_or("-".into(), |c| format!("{c:.0}")),
            state(&v["state"]),
        );
    }
    out
}

/// One line for a port's link half in `qos-show`, or nothing when it has none.
pub fn link_half(p: &Value) -> String {
    let l = &p["link"];
    if l.is_null() {
        return String::new();
    }
    format!(
        "  link half: guarantee {} (now {} Mbit/s wire), min {} Mbit/s, tenant {}; sent {} Mbit/s, fulfillment {}%, {} frames queued\n",
        l["guarantee"].as_str().unwrap_or("?"),
        mbps(&l["guarantee_bps"]),
        mbps(&l["min_bps"]),
        l["tenant"].as_str().unwrap_or("?"),
        mbps(&l["rate_bps"]),
        pct(&l["fulfillment_pct"]),
        l["queued_frames"],
    )
}
