//! Namespace VMs: a network namespace with one end of a veth pair, standing for a VM whose
//! kernel TCP stack runs real programs (iperf3, qperf, sockperf, nginx, wrk). The other end is
//! the switch's port (an af_packet port on slaswitch and OVS-DPDK, a bridge port for Linux tc).
//! Addresses: the uplink is 10.77.0.1, VMs 10.77.0.10 upwards, all in one /24.
//!
//! The programs' own machine-readable output is parsed into samples (source `app`).

use crate::plan::SwitchPlan;
use crate::samples::Sample;
use crate::scenario::{Scenario, Step, UplinkKind, VmKind};

/// The namespace of a VM (or the uplink) named `name`.
pub fn ns_name(name: &str) -> String {
    format!("ss-{name}")
}

/// (switch end, namespace end) of the veth pair.
pub fn veth_names(name: &str) -> (String, String) {
    (format!("s{name}b"), format!("s{name}v"))
}

/// Whether `name` (a VM or the uplink) is a namespace.
pub fn is_namespace(scenario: &Scenario, step: &Step, name: &str) -> bool {
    if name == scenario.uplink.name {
        return scenario.uplink.kind == UplinkKind::Namespace;
    }
    step.vms.iter().any(|v| v.name == name && v.kind == VmKind::Namespace)
}

/// The IPv4 address of namespace member `name` in `step`.
pub fn ip_of(scenario: &Scenario, step: &Step, name: &str) -> String {
    if name == scenario.uplink.name {
        return "10.77.0.1".into();
    }
    let i = step.vms.iter().position(|v| v.name == name).unwrap_or(0);
    format!("10.77.0.{}", 10 + i)
}

/// Adds the namespace, the veth pair and the address to `p`; returns the switch end's name.
/// The namespace end takes the VM's MAC (as an emulated VM's frames carry it), so per-VM
/// classification by source MAC works alike for both kinds.
/// Checksum offload is turned off in the namespace: a frame read with af_packet carries a
/// partial checksum the receiving kernel would drop.
pub fn add_namespace(p: &mut SwitchPlan, name: &str, ip: &str) -> String {
    let ns = ns_name(name);
    let (b, v) = veth_names(name);
    p.undo_with(&["ip", "netns", "del", &ns]);
    p.undo_with(&["ip", "link", "del", &b]);
    p.cmd(&["ip", "netns", "add", &ns]);
    p.cmd(&["ip", "link", "add", &b, "type", "veth", "peer", "name", &v]);
    p.cmd(&["ip", "link", "set", &v, "netns", &ns]);
    p.cmd(&["ip", "-n", &ns, "link", "set", &v, "address", &crate::plan::mac_of(name)]);
    p.cmd(&["ip", "-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", &v]);
    p.cmd(&["ip", "-n", &ns, "link", "set", &v, "up"]);
    p.cmd(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    p.cmd(&[
        "ip", "netns", "exec", &ns, "ethtool", "-K", &v, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro",
        "off",
    ]);
    p.cmd(&["ip", "link", "set", &b, "up"]);
    p.cmd(&["ethtool", "-K", &b, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]);
    b
}

/// A namespace whose interface a daemon creates inside it (VDE2's tap plug, run in the
/// namespace): the namespace now, the interface's address and offloads once it exists.
pub fn add_namespace_for_daemon(p: &mut SwitchPlan, name: &str, ip: &str, iface: &str) {
    let ns = ns_name(name);
    p.undo_with(&["ip", "netns", "del", &ns]);
    p.cmd(&["ip", "netns", "add", &ns]);
    p.cmd(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    let (mac, cidr) = (crate::plan::mac_of(name), format!("{ip}/24"));
    let after = [
        vec!["ip", "-n", &ns, "link", "set", iface, "address", &mac],
        vec!["ip", "-n", &ns, "addr", "add", &cidr, "dev", iface],
        vec!["ip", "-n", &ns, "link", "set", iface, "up"],
        vec![
            "ip", "netns", "exec", &ns, "ethtool", "-K", iface, "tx", "off", "rx", "off", "tso", "off", "gso", "off",
            "gro", "off",
        ],
    ];
    for a in after {
        p.after_daemons.push(a.into_iter().map(str::to_string).collect());
    }
}

/// A command with `{uplink_ip}`, `{vm_ip}` and `{duration}` filled in.
pub fn fill(cmd: &str, scenario: &Scenario, step: &Step, name: &str) -> String {
    cmd.replace("{uplink_ip}", &ip_of(scenario, step, &scenario.uplink.name))
        .replace("{vm_ip}", &ip_of(scenario, step, name))
        .replace("{duration}", &format!("{}", scenario.duration_secs.floor() as u64))
}

fn sample(t: f64, vm: &str, metric: &str, value: f64) -> Sample {
    Sample {
        switch: String::new(),
        step: String::new(),
        t_secs: t,
        source: "app".into(),
        subject: vm.into(),
        metric: metric.into(),
        value,
    }
}

/// Number before `unit` in "... = 26.5 us" style text, scaled to the unit asked for.
fn value_with_unit(text: &str) -> Option<(f64, String)> {
    let mut it = text.split_whitespace();
    let v: f64 = it.next()?.parse().ok()?;
    Some((v, it.next().unwrap_or("").to_string()))
}

fn to_us(v: f64, unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" => v / 1e3,
        "us" => v,
        "ms" => v * 1e3,
        "s" | "sec" => v * 1e6,
        _ => return None,
    })
}

/// iperf3 -J: Mbit/s per interval (at the interval's end) and the receiver's total.
pub fn parse_iperf3(text: &str, vm: &str) -> Vec<Sample> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) else { return Vec::new() };
    let mut out: Vec<Sample> = doc["intervals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some(sample(i["sum"]["end"].as_f64()?, vm, "iperf3_mbps", i["sum"]["bits_per_second"].as_f64()? / 1e6))
        })
        .collect();
    let end = &doc["end"];
    let total = end["sum_received"]["bits_per_second"].as_f64().or_else(|| end["sum"]["bits_per_second"].as_f64());
    if let (Some(bps), Some(t)) = (total, end["sum_received"]["end"].as_f64().or_else(|| end["sum"]["end"].as_f64())) {
        out.push(sample(t, vm, "iperf3_received_mbps", bps / 1e6));
    }
    out
}

/// wrk --latency: requests per second and the latency distribution (microseconds).
pub fn parse_wrk(text: &str, vm: &str, t: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut in_distribution = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("Latency Distribution") {
            in_distribution = true;
            continue;
        }
        if in_distribution {
            let mut it = l.split_whitespace();
            match (it.next().and_then(|p| p.strip_suffix('%')).and_then(|p| p.parse::<f64>().ok()), it.next()) {
                (Some(p), Some(v)) => {
                    // "1.23ms": the number, then its unit.
                    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
                    if let Some(us) = v[..split].parse::<f64>().ok().and_then(|x| to_us(x, &v[split..])) {
                        out.push(sample(t, vm, &format!("wrk_lat_p{}_us", p as u32), us));
                    }
                    continue;
                }
                _ => in_distribution = false,
            }
        }
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            if let Ok(x) = v.trim().parse() {
                out.push(sample(t, vm, "wrk_requests_per_sec", x));
            }
        }
    }
    out
}

/// qperf: `tcp_lat` latency (microseconds) and `tcp_bw` bandwidth (Mbit/s).
pub fn parse_qperf(text: &str, vm: &str, t: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut test = "";
    for line in text.lines() {
        let l = line.trim();
        if let Some(name) = l.strip_suffix(':') {
            test = if name.contains("lat") {
                "lat"
            } else if name.contains("bw") {
                "bw"
            } else {
                ""
            };
            continue;
        }
        let Some((key, value)) = l.split_once('=') else { continue };
        let Some((v, unit)) = value_with_unit(value.trim()) else { continue };
        match (test, key.trim()) {
            ("lat", "latency") => {
                if let Some(us) = to_us(v, &unit) {
                    out.push(sample(t, vm, "qperf_tcp_lat_us", us));
                }
            }
            ("bw", "bw") => {
                let scale = match unit.as_str() {
                    "GB/sec" => 8e3,
                    "MB/sec" => 8.0,
                    "KB/sec" => 8e-3,
                    _ => continue,
                };
                out.push(sample(t, vm, "qperf_tcp_bw_mbps", v * scale));
            }
            _ => {}
        }
    }
    out
}

/// sockperf ping-pong: average latency and percentiles (microseconds).
pub fn parse_sockperf(text: &str, vm: &str, t: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim_start_matches("sockperf:").trim();
        if let Some(rest) = l.strip_prefix("---> percentile") {
            // "---> percentile 99.000 =   12.345"
            if let Some((p, v)) = rest.split_once('=') {
                if let (Ok(p), Ok(v)) = (p.trim().parse::<f64>(), v.trim().parse::<f64>()) {
                    out.push(sample(t, vm, &format!("sockperf_lat_p{}_us", (p * 1000.0).round() / 1000.0), v));
                }
            }
        } else if l.starts_with("Summary: Latency is") {
            if let Some(v) = l.split_whitespace().nth(3).and_then(|v| v.parse::<f64>().ok()) {
                out.push(sample(t, vm, "sockperf_avg_lat_us", v));
            }
        }
    }
    out
}

/// Samples from one program's output; the program is the command's first word.
pub fn parse_output(command: &str, text: &str, vm: &str, t_end: f64) -> Vec<Sample> {
    match command.split_whitespace().next().unwrap_or("") {
        "iperf3" => parse_iperf3(text, vm),
        "wrk" => parse_wrk(text, vm, t_end),
        "qperf" => parse_qperf(text, vm, t_end),
        "sockperf" => parse_sockperf(text, vm, t_end),
        _ => Vec::new(),
    }
}
