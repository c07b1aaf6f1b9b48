//! The checks a parsed scenario passes before it runs: every value in range, every name it
//! refers to defined, every setting one its switches can take; an error names the field.

use super::error_location::{Checker, ScenarioError, Seg};
use super::{parse_rate_bps, Headline, HeadlineType, PortType, Qos, Scenario, SwitchKind, UplinkKind, VmKind};
use slaswitch_datapath::pmd_sleep::MAX_SLEEP_US as MAX_PMD_SLEEP_US;
use slaswitch_qos::cpu::C2tbConfig;
use slaswitch_traffic::phase::Phase;

fn valid_vm_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 12 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub(super) fn validate(s: &Scenario, c: &Checker) -> Result<(), ScenarioError> {
    validate_host(s, c)?;
    validate_topology(s, c)?;
    validate_runs(s, c)
}

/// Duration, sampling, switches and the host's cores and rings.
fn validate_host(s: &Scenario, c: &Checker) -> Result<(), ScenarioError> {
    use Seg::*;
    if !(s.duration_secs > 0.0 && s.duration_secs <= 3600.0) {
        return Err(c.err(
            &[Key("duration_secs")],
            format!("{} must be more than 0 and at most 3600 seconds", s.duration_secs),
        ));
    }
    if !(s.sample_interval_secs >= 0.1 && s.sample_interval_secs <= s.duration_secs) {
        return Err(c.err(
            &[Key("sample_interval_secs")],
            format!("{} must be from 0.1 s to the duration", s.sample_interval_secs),
        ));
    }
    if s.switches.is_empty() {
        return Err(c.err(&[Key("switches")], "name at least one switch"));
    }
    if let Some(at) = s.crash_switch_at_secs.filter(|at| !(*at > 0.0 && *at < s.duration_secs)) {
        return Err(
            c.err(&[Key("crash_switch_at_secs")], format!("{at} must be inside the run (0 to {} s)", s.duration_secs))
        );
    }
    if let Some(cl) = &s.cluster {
        slaswitch_config::link_policy::valid_tenant_name(&cl.tenant)
            .map_err(|e| c.err(&[Key("cluster"), Key("tenant")], e.to_string()))?;
        let others = s.switches.iter().chain(s.variants.iter().map(|v| &v.switch));
        if let Some(sw) = others.into_iter().find(|sw| **sw != SwitchKind::Slaswitch) {
            return Err(c.err(&[Key("switches")], format!("{sw} has no agent: [cluster] runs on slaswitch alone")));
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(us) = s.host.pmd_max_sleep_us.filter(|&us| us > MAX_PMD_SLEEP_US) {
        return Err(c.err(
            &[Key("host"), Key("pmd_max_sleep_us")],
            format!("{us} is too long: from 0 to {MAX_PMD_SLEEP_US} microseconds"),
        ));
    }
    if s.host.pmd_cores.is_empty() {
        return Err(c.err(&[Key("host"), Key("pmd_cores")], "name at least one PMD core"));
    }
    for (i, &core) in s.host.pmd_cores.iter().enumerate() {
        if core >= cores.max(2) {
            return Err(c.err(
                &[Key("host"), Key("pmd_cores"), Index(i)],
                format!("core {core} does not exist (this machine has {cores})"),
            ));
        }
    }
    if s.host.vm_core >= cores.max(2) {
        return Err(c.err(
            &[Key("host"), Key("vm_core")],
            format!("core {} does not exist (this machine has {cores})", s.host.vm_core),
        ));
    }
    if let Some(Err(e)) = s.host.c2tb_bucket_us.map(C2tbConfig::check_bucket_depth_us) {
        return Err(c.err(&[Key("host"), Key("c2tb_bucket_us")], e.to_string()));
    }
    // DPDK 22.11's virtio-user fails to set up rings above 8192 descriptors on this host.
    if !(64..=8192).contains(&s.host.ring) || !s.host.ring.is_power_of_two() {
        return Err(c.err(&[Key("host"), Key("ring")], format!("{}: a power of two from 64 to 8192", s.host.ring)));
    }
    Ok(())
}

/// Every name in `classification.KEY` is a `[[vm]]`'s.
fn names_vms(s: &Scenario, c: &Checker, key: &'static str, names: &[String]) -> Result<(), ScenarioError> {
    use Seg::*;
    match names.iter().position(|g| !s.vms.iter().any(|v| &v.name == g)) {
        Some(i) => Err(c.err(&[Key("classification"), Key(key), Index(i)], format!("no [[vm]] named '{}'", names[i]))),
        None => Ok(()),
    }
}

/// `classification.per_flow_rules_for` names VMs, and `per_flow_rules` is set with it, within
/// the flows the generator sends from one address.
fn validate_per_flow_rules(s: &Scenario, c: &Checker) -> Result<(), ScenarioError> {
    use Seg::*;
    names_vms(s, c, "per_flow_rules_for", &s.classification.per_flow_rules_for)?;
    let per_flow = s.classification.per_flow_rules;
    let most = slaswitch_traffic::frames::FLOWS_PER_ADDRESS;
    if per_flow > most || (per_flow == 0) != s.classification.per_flow_rules_for.is_empty() {
        return Err(c.err(
            &[Key("classification"), Key("per_flow_rules")],
            format!("{per_flow} is not allowed: 1 to {most} with per_flow_rules_for, 0 without"),
        ));
    }
    Ok(())
}

/// The rule set, the uplink and the VMs.
fn validate_topology(s: &Scenario, c: &Checker) -> Result<(), ScenarioError> {
    use Seg::*;
    names_vms(s, c, "drop_from", &s.classification.drop_from)?;
    validate_per_flow_rules(s, c)?;
    let sample = s.classification.sample_flows;
    if sample != 0 && (!sample.is_power_of_two() || sample > 1024) {
        return Err(c.err(
            &[Key("classification"), Key("sample_flows")],
            format!("{sample} is not allowed: 0 or a power of two up to 1024"),
        ));
    }
    if s.classification.security_group_masks > 99 {
        return Err(c.err(&[Key("classification"), Key("security_group_masks")], "at most 99 masks"));
    }
    if !valid_vm_name(&s.uplink.name) {
        return Err(
            c.err(&[Key("uplink"), Key("name")], format!("'{}': 1 to 12 letters, digits, '-' or '_'", s.uplink.name))
        );
    }
    if let Some(rate) = &s.uplink.line_rate {
        parse_rate_bps(rate).map_err(|e| c.err(&[Key("uplink"), Key("line_rate")], e.to_string()))?;
    }
    if !s.uplink.kind.runs_programs() && !s.uplink.commands.is_empty() {
        return Err(c.err(
            &[Key("uplink"), Key("commands")],
            "only a namespace or QEMU uplink runs programs (kind = \"namespace\" or \"qemu\")",
        ));
    }
    if s.uplink.kind != UplinkKind::Qemu && s.uplink.port != PortType::VhostUser {
        return Err(c.err(&[Key("uplink"), Key("port")], "only a QEMU uplink chooses its port (kind = \"qemu\")"));
    }
    if s.vms.is_empty() {
        return Err(c.err(&[], "no [[vm]]: a scenario needs at least one VM"));
    }
    let mut names: Vec<&str> = vec![&s.uplink.name];
    for (i, vm) in s.vms.iter().enumerate() {
        let at = |field: &'static str| vec![Key("vm"), Index(i), Key(field)];
        if !valid_vm_name(&vm.name) {
            return Err(c.err(&at("name"), format!("'{}': 1 to 12 letters, digits, '-' or '_'", vm.name)));
        }
        if names.contains(&vm.name.as_str()) {
            return Err(c.err(&at("name"), format!("'{}' is used twice (VM and uplink names must differ)", vm.name)));
        }
        names.push(&vm.name);
        if vm.count == 0 || vm.count > 64 {
            return Err(c.err(&at("count"), format!("{}: from 1 to 64", vm.count)));
        }
        match vm.kind {
            VmKind::Emulated => {
                if vm.phases.is_empty() {
                    return Err(c.err(&at("phases"), "an emulated VM needs at least one phase"));
                }
                if !vm.commands.is_empty() {
                    return Err(c.err(
                        &at("commands"),
                        "an emulated VM runs phases, not commands (use kind = \"namespace\" or \"qemu\")",
                    ));
                }
                for (j, text) in vm.phases.iter().enumerate() {
                    let p: Phase = text.parse().map_err(|e: slaswitch_traffic::SpecError| {
                        c.err(&[Key("vm"), Index(i), Key("phases"), Index(j)], e.to_string())
                    })?;
                    if p.vm.is_some() {
                        return Err(c.err(
                            &[Key("vm"), Index(i), Key("phases"), Index(j)],
                            "vm= has no place here: the phase belongs to this [[vm]]",
                        ));
                    }
                    if p.start_secs >= s.duration_secs {
                        return Err(c.err(
                            &[Key("vm"), Index(i), Key("phases"), Index(j)],
                            format!("starts at {} s, after the run ends ({} s)", p.start_secs, s.duration_secs),
                        ));
                    }
                }
            }
            VmKind::Namespace | VmKind::Qemu => {
                if vm.commands.is_empty() {
                    return Err(c.err(&at("commands"), "a namespace or QEMU VM needs at least one command"));
                }
                if !vm.phases.is_empty() {
                    return Err(c.err(
                        &at("phases"),
                        "a namespace or QEMU VM runs commands, not phases (use kind = \"emulated\")",
                    ));
                }
                if !s.uplink.kind.runs_programs() {
                    return Err(c.err(
                        &at("kind"),
                        "namespace and QEMU VMs talk to an uplink that runs programs: set [uplink] kind = \"namespace\" or \"qemu\"",
                    ));
                }
            }
        }
        if vm.kind != VmKind::Qemu && vm.port != PortType::VhostUser {
            return Err(c.err(&at("port"), "only a QEMU VM chooses its port (kind = \"qemu\")"));
        }
        if let Some(t) = &vm.tenant {
            if !s.tenants.iter().any(|x| &x.name == t) {
                return Err(c.err(&at("tenant"), format!("no [[tenant]] named '{t}'")));
            }
        }
        validate_qos(&vm.qos, c, &[Key("vm"), Index(i), Key("qos")])?;
    }
    Ok(())
}

/// Variants, tenants, the sweep and the headlines.
fn validate_runs(s: &Scenario, c: &Checker) -> Result<(), ScenarioError> {
    use Seg::*;
    let mut variant_names: Vec<&str> = Vec::new();
    for (i, v) in s.variants.iter().enumerate() {
        let at = |field: &'static str| vec![Key("variant"), Index(i), Key(field)];
        if v.name.is_empty()
            || !v.name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' || ch == '+')
        {
            return Err(c.err(&at("name"), format!("'{}': letters, digits, '-', '_' or '+'", v.name)));
        }
        if variant_names.contains(&v.name.as_str()) {
            return Err(c.err(&at("name"), format!("variant '{}' is named twice", v.name)));
        }
        variant_names.push(&v.name);
        for (group, q) in &v.qos {
            if !s.vms.iter().any(|vm| &vm.name == group) {
                return Err(c.err(&at("qos"), format!("no [[vm]] named '{group}'")));
            }
            validate_qos(q, c, &[Key("variant"), Index(i), Key("qos")])?;
        }
    }
    for (i, v) in s.variants.iter().enumerate() {
        check_scheduler(v.egress_scheduler.as_deref(), c, &[Key("variant"), Index(i), Key("egress_scheduler")])?;
        if v.guest_tso.is_some() && !matches!(v.switch, SwitchKind::OvsDpdk | SwitchKind::Slaswitch) {
            return Err(c.err(
                &[Key("variant"), Index(i), Key("guest_tso")],
                format!("a setting of slaswitch and OVS-DPDK, and this variant runs on {}", v.switch.name()),
            ));
        }
    }
    check_scheduler(s.uplink.egress_scheduler.as_deref(), c, &[Key("uplink"), Key("egress_scheduler")])?;
    let mut last_change = 0.0;
    for (i, ch) in s.changes.iter().enumerate() {
        let at = |field: &'static str| vec![Key("change"), Index(i), Key(field)];
        if !(ch.at_secs > 0.0 && ch.at_secs < s.duration_secs && ch.at_secs >= last_change) {
            return Err(c.err(
                &at("at_secs"),
                format!(
                    "{}: within the run (0 to {} s) and not before the change above it",
                    ch.at_secs, s.duration_secs
                ),
            ));
        }
        last_change = ch.at_secs;
        let vm = &ch.vm;
        if !names_a_vm(s, vm) {
            return Err(c.err(&at("vm"), format!("no VM named '{vm}'")));
        }
        validate_qos(&ch.qos, c, &at("qos"))?;
    }
    for (i, t) in s.tenants.iter().enumerate() {
        if t.weight == 0 {
            return Err(c.err(&[Key("tenant"), Index(i), Key("weight")], "must be at least 1"));
        }
        if s.tenants[..i].iter().any(|x| x.name == t.name) {
            return Err(c.err(&[Key("tenant"), Index(i), Key("name")], format!("tenant '{}' is named twice", t.name)));
        }
    }
    if let Some(sweep) = &s.sweep {
        if !s.vms.iter().any(|v| v.name == sweep.vm) {
            return Err(c.err(&[Key("sweep"), Key("vm")], format!("no [[vm]] named '{}'", sweep.vm)));
        }
        if sweep.counts.is_empty() {
            return Err(c.err(&[Key("sweep"), Key("counts")], "give at least one count"));
        }
        if let Some(j) = sweep.counts.iter().position(|&n| n > 64 && !sweep.flows) {
            return Err(c.err(&[Key("sweep"), Key("counts"), Index(j)], format!("{}: at most 64 VMs", sweep.counts[j])));
        }
    }
    for (i, h) in s.headlines.iter().enumerate() {
        validate_headline(s, c, i, h)?;
    }
    Ok(())
}

/// True when `vm` is a `[[vm]]`'s name, or one of its copies (`NAME2` of a group `NAME`).
fn names_a_vm(s: &Scenario, vm: &str) -> bool {
    s.vms.iter().any(|v| v.name == vm || (vm.starts_with(&v.name) && vm[v.name.len()..].parse::<usize>().is_ok()))
}

/// The `[[headline]]` at `i`: its kind's fields, its window within the run, and its VM.
fn validate_headline(s: &Scenario, c: &Checker, i: usize, h: &Headline) -> Result<(), ScenarioError> {
    use Seg::*;
    let at = |field: &'static str| vec![Key("headline"), Index(i), Key(field)];
    match h.kind {
        HeadlineType::Loss => {
            let metric = h.metric.as_deref().unwrap_or("");
            if metric != "mbps" && metric != "kpps" {
                return Err(
                    c.err(&at("metric"), format!("'{metric}': a loss headline needs metric = \"mbps\" or \"kpps\""))
                );
            }
            for (field, w) in [("before", h.before), ("after", h.after)] {
                let Some(w) = w else {
                    return Err(c.err(&at(field), "a loss headline needs the window [from, to] in seconds"));
                };
                if !(w[0] < w[1] && w[0] >= 0.0 && w[1] <= s.duration_secs) {
                    return Err(c.err(&at(field), format!("[{}, {}] is not a window within the run", w[0], w[1])));
                }
            }
        }
        HeadlineType::Deviation
        | HeadlineType::Latency
        | HeadlineType::Residence
        | HeadlineType::Target
        | HeadlineType::Recovery => {
            let needs_rate = matches!(h.kind, HeadlineType::Target | HeadlineType::Recovery);
            if needs_rate && !h.expected_mbps.is_some_and(|e| e > 0.0 && e.is_finite()) {
                return Err(c.err(&at("expected_mbps"), "a target or recovery headline needs expected_mbps > 0"));
            }
            let Some(w) = h.window else {
                return Err(c.err(&at("window"), "this headline needs the window [from, to] in seconds"));
            };
            if !(w[0] < w[1] && w[0] >= 0.0 && w[1] <= s.duration_secs) {
                return Err(c.err(&at("window"), format!("[{}, {}] is not a window within the run", w[0], w[1])));
            }
            if h.kind == HeadlineType::Latency
                && !["p50", "p90", "p99", "max"].contains(&h.percentile.as_deref().unwrap_or(""))
            {
                return Err(c.err(&at("percentile"), "a latency headline needs percentile = p50, p90, p99 or max"));
            }
            if h.kind == HeadlineType::Residence
                && !["p50", "p90", "p99", "p999"].contains(&h.percentile.as_deref().unwrap_or(""))
            {
                return Err(c.err(&at("percentile"), "a residence headline needs percentile = p50, p90, p99 or p999"));
            }
            if h.unstalled_frames && h.kind != HeadlineType::Residence {
                return Err(c.err(&at("unstalled_frames"), "only a residence headline is the switch's split by stall"));
            }
        }
        HeadlineType::LatencyGrowth => {
            let p = h.percentile.as_deref().unwrap_or("");
            if !["p50", "p90", "p99", "max"].contains(&p) {
                return Err(c.err(
                    &at("percentile"),
                    format!("'{p}': a latency-growth headline needs percentile = p50, p90, p99 or max"),
                ));
            }
            if s.sweep.is_none() {
                return Err(c.err(&at("kind"), "latency-growth compares sweep steps: add a [sweep]"));
            }
        }
        HeadlineType::App => {
            if h.metric.as_deref().is_none_or(str::is_empty) {
                return Err(
                    c.err(&at("metric"), "an app headline needs the program's metric, e.g. \"ping_rtt_avg_us\"")
                );
            }
        }
    }
    let vm = &h.vm;
    let all = (h.kind == HeadlineType::Target
        && (vm == "all" || vm.strip_prefix("tenant:").is_some_and(|t| s.tenants.iter().any(|x| x.name == t))))
        || (h.kind == HeadlineType::App && *vm == s.uplink.name);
    if !all && !names_a_vm(s, vm) {
        return Err(c.err(&at("vm"), format!("no VM named '{vm}'")));
    }

    Ok(())
}

fn validate_qos(q: &Qos, c: &Checker, at: &[Seg]) -> Result<(), ScenarioError> {
    let field = |f: &'static str| {
        let mut p = at.to_vec();
        p.push(Seg::Key(f));
        p
    };
    if let Some(p) = q.priority {
        if !(1..=8).contains(&p) {
            return Err(c.err(&field("priority"), format!("{p}: from 1 (highest) to 8")));
        }
    }
    if let Some(m) = &q.mode {
        if m != "strict" && m != "min-max" {
            return Err(c.err(&field("mode"), format!("'{m}': strict or min-max")));
        }
    }
    if q.weight == Some(0) {
        return Err(c.err(&field("weight"), "must be at least 1"));
    }
    if let (Some(min), Some(max)) = (q.min_rate_kbps, q.max_rate_kbps) {
        if min > max {
            return Err(c.err(&field("min_rate_kbps"), format!("{min} is above max_rate_kbps {max}")));
        }
    }
    for (f, value) in [
        ("ingress_policing_rate_kbps", q.ingress_policing_rate_kbps),
        ("ingress_policing_kpps", q.ingress_policing_kpps),
    ] {
        if value == Some(0) {
            return Err(c.err(&field(f), "0 means no policing: leave the field out"));
        }
    }
    if let Some(b) = q.profile_packet_bytes {
        if !(64..=1500).contains(&b) {
            return Err(c.err(&field("profile_packet_bytes"), format!("{b}: from 64 to 1500")));
        }
    }
    if let Some(b) = q.profile_batch_packets {
        if !(1..=32).contains(&b) {
            return Err(c.err(&field("profile_batch_packets"), format!("{b}: from 1 to 32")));
        }
    }
    if let Some(f) = &q.profile_flows {
        if f != "single" && f != "many" {
            return Err(c.err(&field("profile_flows"), format!("'{f}': single or many")));
        }
    }
    if q.bandwidth_bps == Some(0) {
        return Err(c.err(&field("bandwidth_bps"), "0 means no purchase: leave the field out"));
    }
    if q.link_weight == Some(0) {
        return Err(c.err(&field("link_weight"), "must be at least 1"));
    }
    if let (Some(min), Some(max)) = (q.link_min_bps, q.link_max_bps) {
        if min > max {
            return Err(c.err(&field("link_min_bps"), format!("{min} is above link_max_bps {max}")));
        }
    }
    if let Some(g) = &q.link_guarantee {
        if !(g == "fairness" || g.starts_with("strict:") || g.starts_with("dynamic:")) {
            return Err(
                c.err(&field("link_guarantee"), format!("'{g}': strict:RATE, dynamic:SIZE,SECONDS or fairness"))
            );
        }
    }
    Ok(())
}

fn check_scheduler(name: Option<&str>, c: &Checker, at: &[Seg]) -> Result<(), ScenarioError> {
    const KINDS: [&str; 5] = ["fifo", "ancs", "softbw", "pievde", "ratelimit"];
    match name {
        Some(n) if !KINDS.contains(&n) => Err(c.err(at, format!("'{n}': one of {}", KINDS.join(", ")))),
        _ => Ok(()),
    }
}
