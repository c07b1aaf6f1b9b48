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

/// Whether any step of `scenario` has a member in a namespace.
pub fn any_in_scenario(scenario: &Scenario) -> bool {
    scenario.uplink.kind == UplinkKind::Namespace
        || scenario.steps().iter().any(|st| st.vms.iter().any(|v| v.kind == VmKind::Namespace))
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
/// The namespace's kernel receives on `vm_core` (RPS): a frame the switch sends into a veth is
/// otherwise taken through the namespace's whole stack (TCP, the reply it sends) inside the
/// switch's send call, on the PMD's core, where a VM's kernel never runs.
pub fn add_namespace(p: &mut SwitchPlan, name: &str, ip: &str, vm_core: usize) -> String {
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
    p.cmd(&["ip", "netns", "exec", &ns, "sh", "-c", &receive_on_core(&v, vm_core)]);
    p.cmd(&["ip", "link", "set", &b, "up"]);
    p.cmd(&["ethtool", "-K", &b, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]);
    b
}

/// The shell command that steers `iface`'s received frames to `core` (RPS, one receive queue;
/// run where `/sys` is the interface's namespace's).
fn receive_on_core(iface: &str, core: usize) -> String {
    // rps_cpus is a bitmap in comma-separated 32-bit hex words, most significant first.
    let words = core / 32 + 1;
    let mask: Vec<String> =
        (0..words).rev().map(|w| format!("{:08x}", if w == core / 32 { 1u32 << (core % 32) } else { 0 })).collect();
    format!("echo {} > /sys/class/net/{iface}/queues/rx-0/rps_cpus", mask.join(","))
}

/// A namespace whose interface a daemon creates inside it (VDE2's tap plug, run in the
/// namespace): the namespace now, the interface's address and offloads once it exists.
pub fn add_namespace_for_daemon(p: &mut SwitchPlan, name: &str, ip: &str, iface: &str, vm_core: usize) {
    let ns = ns_name(name);
    p.undo_with(&["ip", "netns", "del", &ns]);
    p.cmd(&["ip", "netns", "add", &ns]);
    p.cmd(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    let (mac, cidr) = (crate::plan::mac_of(name), format!("{ip}/24"));
    let rps = receive_on_core(iface, vm_core);
    let after = [
        vec!["ip", "-n", &ns, "link", "set", iface, "address", &mac],
        vec!["ip", "-n", &ns, "addr", "add", &cidr, "dev", iface],
        vec!["ip", "-n", &ns, "link", "set", iface, "up"],
        vec![
            "ip", "netns", "exec", &ns, "ethtool", "-K", iface, "tx", "off", "rx", "off", "tso", "off", "gso", "off",
            "gro", "off",
        ],
        vec!["ip", "netns", "exec", &ns, "sh", "-c", &rps],
    ];
    for a in after {
        p.after_daemons.push(a.into_iter().map(str::to_string).collect());
    }
}

/// A command with `{uplink_ip}`, `{vm_ip}`, `{duration}`, `{names}` (`--name IP=VM` for every
/// namespace VM of the step, for a receiver that reports per sender), `{index}` (the VM's
/// place in its group, from 1) and `{group_count}` (its group's size) filled in; with the
/// last two, `sh` arithmetic splits a load or picks a port (`-p $((5200 + {index}))`).
pub fn fill(cmd: &str, scenario: &Scenario, step: &Step, name: &str) -> String {
    let group = step.vms.iter().find(|v| v.name == name).map(|v| v.group.as_str());
    let members: Vec<&str> =
        step.vms.iter().filter(|v| Some(v.group.as_str()) == group).map(|v| v.name.as_str()).collect();
    let index = members.iter().position(|m| *m == name).map_or(1, |i| i + 1);
    let names: Vec<String> = step
        .vms
        .iter()
        .filter(|v| v.kind.runs_programs())
        .map(|v| format!("--name {}={}", ip_of(scenario, step, &v.name), v.name))
        .collect();
    cmd.replace("{uplink_ip}", &ip_of(scenario, step, &scenario.uplink.name))
        .replace("{vm_ip}", &ip_of(scenario, step, name))
        .replace("{duration}", &format!("{}", scenario.duration_secs.floor() as u64))
        .replace("{names}", &names.join(" "))
        .replace("{index}", &index.to_string())
        .replace("{group_count}", &members.len().max(1).to_string())
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

/// iperf3 -J: Mbit/s per interval (at the interval's end), the receiver's total (when the test
/// completed), and the longest stall (`iperf3_longest_stall_s`: consecutive intervals that carried under 5% of the
/// median interval's rate, e.g. while a switch restarts).
pub fn parse_iperf3(text: &str, vm: &str) -> Vec<Sample> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) else { return Vec::new() };
    let intervals: Vec<(f64, f64, f64)> = doc["intervals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let s = &i["sum"];
            Some((s["start"].as_f64()?, s["end"].as_f64()?, s["bits_per_second"].as_f64()?))
        })
        .collect();
    let mut out: Vec<Sample> =
        intervals.iter().map(|&(_, end, bps)| sample(end, vm, "iperf3_mbps", bps / 1e6)).collect();
    if let Some(&(_, last_end, _)) = intervals.last() {
        out.push(sample(last_end, vm, "iperf3_longest_stall_s", longest_stall_secs(&intervals)));
    }
    // An interrupted client (its peer gone) has no receiver's total.
    if doc.get("error").is_some() {
        return out;
    }
    let end = &doc["end"];
    let total = end["sum_received"]["bits_per_second"].as_f64().or_else(|| end["sum"]["bits_per_second"].as_f64());
    if let (Some(bps), Some(t)) = (total, end["sum_received"]["end"].as_f64().or_else(|| end["sum"]["end"].as_f64())) {
        out.push(sample(t, vm, "iperf3_received_mbps", bps / 1e6));
    }
    out
}

/// The longest run of consecutive (start, end, bit/s) intervals under 5% of the median rate of
/// the intervals that carried anything (a stream that stalled for most of its run still has
/// its normal rate as the reference; one that never carried anything stalled throughout).
fn longest_stall_secs(intervals: &[(f64, f64, f64)]) -> f64 {
    let mut rates: Vec<f64> = intervals.iter().map(|i| i.2).filter(|r| *r > 0.0).collect();
    rates.sort_by(f64::total_cmp);
    let floor = rates.get(rates.len() / 2).map_or(f64::INFINITY, |median| median * 0.05);
    let (mut longest, mut since) = (0.0f64, None::<f64>);
    for &(start, end, bps) in intervals {
        if bps < floor {
            let from = *since.get_or_insert(start);
            longest = longest.max(end - from);
        } else {
            since = None;
        }
    }
    longest
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

/// ping's summary: round-trip times (microseconds) and the share of probes lost.
pub fn parse_ping(text: &str, vm: &str, t: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    for l in text.lines().map(str::trim) {
        // iputils: "rtt min/avg/max/mdev = 0.045/0.061/0.102/0.012 ms";
        // busybox (in a guest): "round-trip min/avg/max = 4.048/8.852/18.405 ms".
        let summary = l.strip_prefix("rtt ").or_else(|| l.strip_prefix("round-trip "));
        if let Some((names, values)) = summary.and_then(|r| r.split_once(" = ")) {
            let (values, unit) = values.split_once(' ').unwrap_or((values, "ms"));
            for (n, v) in names.split('/').zip(values.split('/')) {
                if let Some(us) = v.parse::<f64>().ok().and_then(|v| to_us(v, unit)) {
                    out.push(sample(t, vm, &format!("ping_rtt_{n}_us"), us));
                }
            }
        } else if let Some(loss) = l.split(", ").find_map(|p| p.strip_suffix("% packet loss")) {
            if let Ok(x) = loss.parse::<f64>() {
                out.push(sample(t, vm, "ping_loss_pct", x));
            }
        }
    }
    out
}

/// slaswitch-flows: short-flow completion times per workload (`fct_8KB_10ms_p50_us`), or the
/// meter's per-source rates (every bin around the last start as `rate_fine_mbps`, its time in
/// seconds since that start; per 100 ms as `rate_100ms_mbps`) and convergence (`converge_ms`,
/// `steady_mbps`).
pub fn parse_flows(text: &str, vm: &str, t: f64) -> Vec<Sample> {
    let Some(doc) = text.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for w in doc["short_flows"].as_array().into_iter().flatten() {
        let (Some(size), Some(ms)) = (w["size_bytes"].as_u64(), w["interval_ms"].as_u64()) else { continue };
        let tag = format!("{}KB_{ms}ms", size / 1024);
        for key in ["fct_mean_us", "fct_p50_us", "fct_p90_us", "fct_p99_us"] {
            if let Some(v) = w[key].as_f64() {
                out.push(sample(t, vm, &format!("fct_{tag}_{}", &key[4..]), v));
            }
        }
        if let (Some(s), Some(c)) = (w["started"].as_f64(), w["completed"].as_f64()) {
            out.push(sample(t, vm, &format!("fct_{tag}_incomplete"), s - c));
        }
    }
    let m = &doc["meter"];
    let bin_us = m["bin_us"].as_f64().unwrap_or(1000.0);
    let event_secs = m["event_secs"].as_f64().unwrap_or(0.0);
    for src in m["sources"].as_array().into_iter().flatten() {
        let name = src["name"].as_str().unwrap_or("?");
        for key in ["converge_ms", "steady_mbps"] {
            if let Some(v) = src[key].as_f64() {
                out.push(sample(t, name, key, v));
            }
        }
        let from = src["fine_from_bin"].as_f64().unwrap_or(0.0);
        for (i, v) in src["fine_mbps"].as_array().into_iter().flatten().enumerate() {
            if let Some(v) = v.as_f64() {
                out.push(sample((from + i as f64) * bin_us / 1e6 - event_secs, name, "rate_fine_mbps", v));
            }
        }
        for (i, v) in src["per_100ms_mbps"].as_array().into_iter().flatten().enumerate() {
            if let Some(v) = v.as_f64() {
                out.push(sample((i + 1) as f64 / 10.0, name, "rate_100ms_mbps", v));
            }
        }
    }
    out
}

/// Samples from one program's output; the program is the first word of the command's last
/// part (`sleep 5; iperf3 ...` runs iperf3).
pub fn parse_output(command: &str, text: &str, vm: &str, t_end: f64) -> Vec<Sample> {
    let last = command.rsplit([';', '&']).next().unwrap_or(command);
    match last.split_whitespace().next().unwrap_or("") {
        // A client that outlived the run (its peer gone) still has its summary counted at
        // the run's end.
        "iperf3" => parse_iperf3(text, vm)
            .into_iter()
            .map(|mut s| {
                if s.metric != "iperf3_mbps" {
                    s.t_secs = s.t_secs.min(t_end);
                }
                s
            })
            .collect(),
        "ping" => parse_ping(text, vm, t_end),
        "slaswitch-flows" => parse_flows(text, vm, t_end),
        "wrk" => parse_wrk(text, vm, t_end),
        "qperf" => parse_qperf(text, vm, t_end),
        "sockperf" => parse_sockperf(text, vm, t_end),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_is_steered_to_the_vm_core_in_rps_words() {
        assert_eq!(receive_on_core("sav", 1), "echo 00000002 > /sys/class/net/sav/queues/rx-0/rps_cpus");
        assert_eq!(receive_on_core("sav", 33), "echo 00000002,00000000 > /sys/class/net/sav/queues/rx-0/rps_cpus");
    }
}
