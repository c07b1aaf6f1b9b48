//! slaswitch: the command line for slaswitchd, with verbs in the style of ovs-vsctl/ovs-appctl.

use std::path::PathBuf;

use serde_json::{json, Value};
use slaswitch::args::{key_values, Args};
use slaswitch::control::{default_socket, request};

/// Most rounds `experiment run --rounds` accepts (each round runs every configuration again).
const MAX_ROUNDS: usize = 20;
const USAGE: &str = "usage: slaswitch [--socket PATH] COMMAND [ARGS] [--json]
  add-port NAME TYPE [KEY=VALUE...]   TYPE: vhost-user, vhost-user-client, tap, af-packet, null, dpdk
  del-port NAME
  set-port NAME KEY=VALUE... [-- set-port NAME KEY=VALUE...]
                                      joined with --, the ports change as one step: admission
                                      judges the final state (live options only)
  list-ports
  add-flow FLOW                       e.g. \"priority=10,in_port=vm1,actions=output:uplink\"
  add-flows FILE                      one flow per line (# comments), added all or none
  del-flows [MATCH] [--strict]
  dump-flows
  port-stats [NAME]
  pmd-stats                           per port: Kpps, Mbps, cycles/packet by stage, PMD share, EMC hits
  qos-show [NAME]                     C2QoS per port: purchase, model entry and coefficients, cycles,
                                      mode, class, tokens, share used; the uplink and its fallback
  load-model [FILE]                   use a bandwidth-CPU model (default: the daemon's own file)
  model-show                          the bandwidth-CPU model in use
  calibrate [--out FILE] [--seconds S] [--repeats N] [--vm-counts 1,2,4,8,16] [--security-group-masks N]
            [--pmd-core N] [--vm-core N] [--numa-remote R] [--pmd-factor CORES=R ...] [--quiet]
                                      measure this host's bandwidth-CPU model (slaswitchd stopped)
  show                                the persisted configuration
  experiment run SCENARIO [--switch slaswitch|ovs-dpdk|linux-tc|vde2 ...] [--rounds N] [--out DIR] [--quiet]
                                      run a test-bed scenario (experiments/*.toml) on each switch;
                                      --rounds N runs every configuration N times, interleaved,
                                      and the report adds each headline's median over the rounds
  experiment report DIR               rebuild a run's report.md and plots from its samples
The socket defaults to $SLASWITCH_SOCKET or /var/run/slaswitch/slaswitchd.ctl.";

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("slaswitch: {e}");
            std::process::exit(1);
        }
    }
}

/// `set-port NAME K=V... [-- set-port NAME K=V...]`: one port, or several changed as one step.
fn set_port_request(words: &[String]) -> Result<Value, String> {
    let mut ports = Vec::new();
    for command in words.split(|w| w == "--") {
        match command.first().map(String::as_str) {
            Some("set-port") => {
                ports.push(json!({"name": need(command, 1, "port name")?, "options": key_values(&command[2..])?}))
            }
            Some(other) => return Err(format!("only set-port commands can be joined with -- (found '{other}')")),
            None => return Err("an empty command between --".into()),
        }
    }
    Ok(match ports.len() {
        1 => json!({"cmd": "set-port", "name": ports[0]["name"], "options": ports[0]["options"]}),
        _ => json!({"cmd": "set-port", "ports": ports}),
    })
}

fn need<'a>(words: &'a [String], i: usize, what: &str) -> Result<&'a str, String> {
    words.get(i).map(String::as_str).ok_or_else(|| format!("missing {what}\n{USAGE}"))
}

fn experiment(words: Vec<String>) -> Result<(), String> {
    let a = Args::parse(words, &["switch", "out", "rounds"], &["quiet", "help"])?;
    let w = &a.positional;
    match w.first().map(String::as_str) {
        Some("run") => {
            let scenario = need(w, 1, "scenario file")?;
            let mut switches = Vec::new();
            for list in a.all("switch") {
                for name in list.split(',').filter(|s| !s.is_empty()) {
                    switches.push(slaswitch_testbed::scenario::SwitchKind::parse(name)?);
                }
            }
            let rounds = match a.get("rounds") {
                None => 1,
                Some(r) => match r.parse::<usize>() {
                    Ok(n) if (1..=MAX_ROUNDS).contains(&n) => n,
                    _ => return Err(format!("--rounds {r}: a whole number from 1 to {MAX_ROUNDS}")),
                },
            };
            let tools = std::env::current_exe()
                .map_err(|e| e.to_string())?
                .parent()
                .map(PathBuf::from)
                .ok_or("no folder for this program")?;
            let opts = slaswitch_testbed::runner::RunOptions {
                scenario_path: PathBuf::from(scenario),
                switches,
                out_dir: a.get("out").map(PathBuf::from),
                tools,
                quiet: a.flag("quiet"),
                rounds,
            };
            let dir = slaswitch_testbed::runner::run(&opts)?;
            println!("{}", dir.join("report.md").display());
            Ok(())
        }
        Some("report") => {
            let dir = need(w, 1, "run folder")?;
            slaswitch_testbed::report::generate(std::path::Path::new(dir))?;
            println!("{}", std::path::Path::new(dir).join("report.md").display());
            Ok(())
        }
        _ => Err(format!("experiment run SCENARIO | experiment report DIR\n{USAGE}")),
    }
}

fn calibrate(words: Vec<String>) -> Result<(), String> {
    let a = Args::parse(
        words,
        &[
            "out",
            "seconds",
            "repeats",
            "vm-counts",
            "security-group-masks",
            "pmd-core",
            "vm-core",
            "numa-remote",
            "pmd-factor",
            "many-flows",
        ],
        &["quiet"],
    )?;
    if let Some(extra) = a.positional.first() {
        return Err(format!("calibrate: unexpected '{extra}'\n{USAGE}"));
    }
    let vm_counts = a
        .get("vm-counts")
        .unwrap_or("1,2,4,8,16")
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| (1..=64).contains(&n))
                .ok_or_else(|| format!("--vm-counts: '{n}' is not a count from 1 to 64"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pmd_factors = a
        .all("pmd-factor")
        .iter()
        .map(|kv| {
            let (n, r) =
                kv.split_once('=').ok_or_else(|| format!("--pmd-factor {kv}: use CORES=FACTOR, e.g. 2=1.47"))?;
            let n: u32 = n.parse().map_err(|_| format!("--pmd-factor {kv}: '{n}' is not a core count"))?;
            let r: f64 = r
                .parse()
                .ok()
                .filter(|r: &f64| *r >= 1.0 && r.is_finite())
                .ok_or_else(|| format!("--pmd-factor {kv}: the factor must be a number >= 1"))?;
            Ok((n, r))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let numa_remote: f64 = a.parsed("numa-remote", 1.4)?;
    if !(1.0..=10.0).contains(&numa_remote) {
        return Err(format!("--numa-remote {numa_remote}: a factor from 1 to 10"));
    }
    let seconds: f64 = a.parsed("seconds", 3.0)?;
    if !(0.5..=60.0).contains(&seconds) {
        return Err(format!("--seconds {seconds}: from 0.5 to 60"));
    }
    let tools = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .parent()
        .map(PathBuf::from)
        .ok_or("no folder for this program")?;
    let opts = slaswitch::calibrate::CalibrateOptions {
        out: PathBuf::from(a.get("out").unwrap_or(slaswitch::control::DEFAULT_MODEL_PATH)),
        tools,
        pmd_core: a.parsed("pmd-core", 0)?,
        vm_core: a.parsed("vm-core", 1)?,
        seconds,
        repeats: a.parsed("repeats", 3)?,
        vm_counts,
        security_group_masks: a.parsed("security-group-masks", 99)?,
        many_flows: a.parsed("many-flows", 20000)?,
        pmd_factors,
        numa_remote,
        quiet: a.flag("quiet"),
    };
    let model = slaswitch::calibrate::calibrate(&opts)?;
    print!("{}", slaswitch::calibrate::render(&model));
    println!("written to {}", opts.out.display());
    Ok(())
}

fn run() -> Result<(), String> {
    let words: Vec<String> = std::env::args().skip(1).collect();
    if words.first().map(String::as_str) == Some("calibrate") {
        return calibrate(words[1..].to_vec());
    }
    if let Some(i) = words.iter().position(|w| w == "experiment") {
        if words[..i].iter().all(|w| w.starts_with("--")) {
            return experiment(words[i + 1..].to_vec());
        }
    }
    let a = Args::parse(std::env::args().skip(1), &["socket"], &["json", "strict", "help"])?;
    if a.flag("help") || a.positional.is_empty() {
        println!("{USAGE}");
        return if a.flag("help") { Ok(()) } else { Err("no command given".into()) };
    }
    let socket = PathBuf::from(a.get("socket").map(str::to_string).unwrap_or_else(default_socket));
    let w = &a.positional;
    let verb = w[0].as_str();
    let req = match verb {
        "add-port" => {
            json!({"cmd": verb, "name": need(w, 1, "port name")?, "type": need(w, 2, "port type")?, "options": key_values(&w[3..])?})
        }
        "del-port" => json!({"cmd": verb, "name": need(w, 1, "port name")?}),
        "set-port" => set_port_request(w)?,
        "add-flow" => json!({"cmd": verb, "flow": need(w, 1, "flow")?}),
        "add-flows" => {
            let path = need(w, 1, "file of flows")?;
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let flows: Vec<&str> =
                text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
            json!({"cmd": "add-flow", "flows": flows})
        }
        "del-flows" => json!({"cmd": verb, "match": w.get(1), "strict": a.flag("strict")}),
        "port-stats" | "qos-show" => json!({"cmd": verb, "name": w.get(1)}),
        "list-ports" | "dump-flows" | "pmd-stats" | "show" | "model-show" => json!({"cmd": verb}),
        "load-model" => {
            // The daemon reads the file itself; a relative path means the caller's folder.
            let path = w.get(1).map(|p| std::fs::canonicalize(p).map_err(|e| format!("{p}: {e}"))).transpose()?;
            json!({"cmd": verb, "path": path})
        }
        other => return Err(format!("unknown command '{other}'\n{USAGE}")),
    };
    let result = request(&socket, &req)?;
    if a.flag("json") || verb == "show" {
        println!("{}", serde_json::to_string_pretty(&result).expect("JSON"));
        return Ok(());
    }
    print!("{}", render(verb, &result));
    Ok(())
}

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

fn render(verb: &str, r: &Value) -> String {
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
        "pmd-stats" => {
            for pmd in r["pmds"].as_array().into_iter().flatten() {
                let (busy, idle) =
                    (pmd["busy_cycles"].as_f64().unwrap_or(0.0), pmd["idle_cycles"].as_f64().unwrap_or(0.0));
                out += &format!("pmd thread core {}:\n  busy {:.1}% (last interval {}%), busy cycles {} = per-port stage cycles {}\n",
                    f(&pmd["core"]), if busy + idle > 0.0 { busy * 100.0 / (busy + idle) } else { 0.0 },
                    pmd["busy_pct_interval"].as_f64().map_or("-".into(), |x| format!("{x:.1}")), f(&pmd["busy_cycles"]), f(&pmd["stage_cycles_sum"]));
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
                out += &format!(
                    "  {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}\n",
                    "port", "Kpps", "Mbps", "ingress", "classify", "egress", "cyc/pkt", "share%", "emc%"
                );
                for p in pmd["ports"].as_array().into_iter().flatten() {
                    let i = &p["interval"];
                    let c = &i["cycles_per_packet"];
                    out += &format!(
                        "  {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}\n",
                        f(&p["name"]),
                        f(&i["rx_kpps"]),
                        f(&i["rx_mbps"]),
                        f(&c["ingress"]),
                        f(&c["classification"]),
                        f(&c["egress"]),
                        f(&c["total"]),
                        f(&i["pmd_share_pct"]),
                        f(&i["emc_hit_pct"])
                    );
                }
            }
        }
        "qos-show" => out += &render_qos(r),
        "model-show" => match serde_json::from_value::<slaswitch_qos::cpu::BandwidthModel>(r["model"].clone()) {
            Ok(m) => out += &format!("{}{}\n", slaswitch::calibrate::render(&m), f(&r["path"])),
            Err(e) => out += &format!("unreadable model: {e}\n"),
        },
        _ => out += &format!("{}\n", serde_json::to_string(r).expect("JSON")),
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

/// `qos-show`: a table of every port, then for each port whose cycles come from the model the
/// working (seed 000 Sec. III-D), then the uplink and the NIC fallback (Sec. VII).
/// Cycles per packet over the three stages of a `StageCycles` in JSON.
fn stage_total(c: &Value) -> f64 {
    ["ingress", "classification", "egress"].iter().map(|k| c[*k].as_f64().unwrap_or(0.0)).sum()
}

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
        out += &format!(
            "PMD core {}: {} of {} cycles/s allocated; cycle buckets hold {} us of the core\n",
            f(&p["pmd_core"]),
            f(&p["pmd_allocated_cycles_per_sec"]),
            f(&p["pmd_capacity_cycles_per_sec"]),
            f(&r["c2tb_bucket_us"])
        );
    }
    for p in &ports {
        let a = &p["allocation"];
        if a.is_null() {
            continue;
        }
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
        out += &format!(
            "  C_single = {:.0} packets/s x {:.0} cycles = {:.0} cycles/s\n",
            a["packets_per_sec"].as_f64().unwrap_or(0.0),
            total,
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
            out += &format!(
                "  x host speed factor {d:.3} (drift compensation) = {} cycles/s in force\n",
                f(&p["effective_cycles_per_sec"])
            );
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
