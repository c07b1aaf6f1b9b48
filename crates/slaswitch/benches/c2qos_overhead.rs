//! Whole-switch benchmark: what C2QoS's cycle accounting and scheduling cost the data plane
//! (issue 5: at most 1% of the forwarding rate with 28 ports; seed 000 Sec. VI-F reports 0.018%
//! on the PMD plus about 2% for a manager thread, which slaswitch's lazy refill does not need).
//!
//! One slaswitchd (PMD on core 0) with 28 vhost-user VM ports and a null uplink; one tenant
//! process (core 1) runs the 28 emulated VMs, all sending as fast as they can. The same run
//! alternates, live, between
//!   A: plain round robin (no port has C2QoS settings: the PMD has no scheduler at all), and
//!   B: C2QoS on every port: MIN-MAX buckets of 1/28 of the core each under HBS, so every
//!      batch is scheduled and charged but the allocations add up to the whole core and nothing
//!      is held back. All ports stay in one class: classes change which port goes first, and so
//!      batch sizes, which is policy, not overhead.
//! One `set-port` request switches all 28 ports at once (about 30 ms), so a round measures
//! both for `SECS` seconds within about 0.6 s; the host is shared and noisy, so the result is
//! the median over rounds of the B/A ratios of (1) packets forwarded per second of the PMD's
//! own time (busy, idle and stalled cycles between two of its publications) and (2) PMD busy
//! cycles per forwarded packet, with their quartiles so a reader sees how far one run resolves,
//! and (3) the share of the PMD's busy cycles spent in C2QoS's own code, which the PMD measures
//! itself (`qos_cycles` in `pmd-stats`: decisions and charging timed one in 64, publishing and
//! drift windows whole); (3) is what the paper's 0.018% is, and host noise hardly moves it.
//! Only the PMD-limited rounds ([`pmd_limited`]) say what C2QoS takes from forwarding; the
//! summary gives their figures apart.
//! Two workloads: cheap packets (64-byte frames, one flow, a rule
//! per VM port: the worst case for relative overhead) and cloud-like ones (many flows through a
//! 99-mask security-group table).
//!
//!   cargo bench -p slaswitch --bench c2qos_overhead [-- cloud]   (root, hugepages)

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PORTS: usize = 28;
/// Rounds per workload; `C2QOS_OVERHEAD_ROUNDS=N` runs more, to narrow the intervals (about
/// 0.65 s per round).
const ROUNDS: usize = 60;

fn rounds() -> usize {
    std::env::var("C2QOS_OVERHEAD_ROUNDS").ok().and_then(|v| v.parse().ok()).filter(|&n| n >= 2).unwrap_or(ROUNDS)
}
/// A window is short so that a pair's two windows see the same phase of the host; many rounds
/// make up for the noise of each.
const SECS: f64 = 0.25;
/// Wait after a switch before measuring: the PMD has taken the configuration when the request
/// returns, and the ports' rings refill in a few milliseconds.
const SETTLE: Duration = Duration::from_millis(50);

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(socket: &PathBuf, req: Value) -> Value {
    slaswitch::control::request(socket, &req).unwrap_or_else(|e| panic!("{req}: {e}"))
}

/// What one `pmd-stats` gives the bench.
#[derive(Clone, Copy)]
struct Counters {
    packets: f64,
    /// Polls that brought packets, polls that found none, exact-match cache misses.
    batches: f64,
    empty_polls: f64,
    emc_misses: f64,
    busy: f64,
    total: f64,
    /// Busy, idle and stalled (the host held the core): the PMD's whole time.
    elapsed: f64,
    /// Cycles in C2QoS's own code, and its parts picking ports and charging batches.
    qos: f64,
    pick: f64,
    charge: f64,
    decisions: f64,
    /// Decisions whose poll came back empty, and their picking and charging cycles.
    empty_decisions: f64,
    empty_cycles: f64,
    /// Batches that left a port owing tokens; ports parked for tokens.
    owed: f64,
    parked: f64,
    /// Cycles the sampled decisions' fences waited for the batch's stores (not in `qos`).
    sampling: f64,
}

fn counters(socket: &PathBuf) -> Counters {
    let stats = cli(socket, json!({"cmd": "pmd-stats"}));
    let pmd = &stats["pmds"][0];
    let sum = |k: &str| -> f64 { pmd["ports"].as_array().unwrap().iter().map(|p| p[k].as_f64().unwrap()).sum() };
    let packets = sum("rx_packets");
    let busy = pmd["busy_cycles"].as_f64().unwrap();
    let qos = |k: &str| pmd[k].as_f64().unwrap();
    Counters {
        packets,
        batches: sum("batches"),
        empty_polls: sum("empty_polls"),
        emc_misses: sum("emc_misses"),
        busy,
        total: busy + pmd["idle_cycles"].as_f64().unwrap(),
        elapsed: busy + pmd["idle_cycles"].as_f64().unwrap() + pmd["stalled_cycles"].as_f64().unwrap(),
        qos: qos("qos_cycles"),
        pick: qos("qos_pick_cycles"),
        charge: qos("qos_charge_cycles"),
        decisions: qos("qos_decisions"),
        empty_decisions: qos("qos_empty_decisions"),
        empty_cycles: qos("qos_empty_cycles"),
        owed: qos("qos_owed"),
        parked: qos("qos_parked"),
        sampling: qos("qos_sampling_cycles"),
    }
}

/// One window of one configuration.
#[derive(Clone, Copy, Default)]
struct Window {
    packets_per_sec: f64,
    busy_cycles_per_packet: f64,
    busy_percent: f64,
    /// C2QoS's own cycles as a share of the PMD's busy cycles, and per decision.
    own_percent_of_busy: f64,
    own_cycles_per_decision: f64,
    /// Of those: picking the port, and charging its batch (the rest is publishing and drift).
    pick_cycles_per_decision: f64,
    charge_cycles_per_decision: f64,
    /// Picking and charging cycles of a decision whose poll came back empty, and of the others:
    /// those whose poll brought packets (and the rare ones that found every port waiting).
    cycles_per_empty_decision: f64,
    cycles_per_full_decision: f64,
    packets_per_decision: f64,
    /// Packets per poll that brought any, empty polls per such poll, and the share of packets
    /// that missed the exact-match cache: what the order ports are served in changes.
    packets_per_batch: f64,
    empty_polls_per_batch: f64,
    emc_miss_percent: f64,
    /// Shares of decisions after which the port owed tokens, and that parked a port.
    owed_per_decision: f64,
    parked_per_decision: f64,
    /// What timing the sampled decisions cost beyond C2QoS's own code, % of busy cycles.
    sampling_percent_of_busy: f64,
}

fn measure(socket: &PathBuf, tsc_hz: u64) -> Window {
    let a = counters(socket);
    std::thread::sleep(Duration::from_secs_f64(SECS));
    let b = counters(socket);
    // The PMD publishes its counters every 1024 passes (about 85 ms when saturated), so the
    // time between two snapshots is the PMD's own: its busy, idle and stalled cycles. The
    // bench's clock would add or drop a publishing interval, +-30% of a 0.25 s window.
    let secs = (b.elapsed - a.elapsed).max(1.0) / tsc_hz as f64;
    let busy = (b.busy - a.busy).max(1.0);
    let (packets, decisions) = ((b.packets - a.packets).max(1.0), (b.decisions - a.decisions).max(1.0));
    Window {
        packets_per_sec: packets / secs,
        busy_cycles_per_packet: busy / packets,
        busy_percent: 100.0 * busy / (b.total - a.total),
        own_percent_of_busy: 100.0 * (b.qos - a.qos) / busy,
        own_cycles_per_decision: (b.qos - a.qos) / decisions,
        pick_cycles_per_decision: (b.pick - a.pick) / decisions,
        charge_cycles_per_decision: (b.charge - a.charge) / decisions,
        cycles_per_empty_decision: (b.empty_cycles - a.empty_cycles) / (b.empty_decisions - a.empty_decisions).max(1.0),
        cycles_per_full_decision: ((b.pick - a.pick) + (b.charge - a.charge) - (b.empty_cycles - a.empty_cycles))
            / (decisions - (b.empty_decisions - a.empty_decisions)).max(1.0),
        packets_per_decision: packets / decisions,
        packets_per_batch: packets / (b.batches - a.batches).max(1.0),
        empty_polls_per_batch: (b.empty_polls - a.empty_polls) / (b.batches - a.batches).max(1.0),
        emc_miss_percent: 100.0 * (b.emc_misses - a.emc_misses) / packets,
        owed_per_decision: (b.owed - a.owed) / decisions,
        parked_per_decision: (b.parked - a.parked) / decisions,
        sampling_percent_of_busy: 100.0 * (b.sampling - a.sampling) / busy,
    }
}

/// A round counts as PMD-limited when, under both configurations, the PMD was busy and every
/// poll brought a full batch: the VMs had packets waiting on every port, so the PMD's own
/// speed set the forwarding rate, and only then is C2QoS's time taken from forwarding. The
/// emulated VMs share one core, and in the host's slow phases they cannot keep 28 rings full:
/// then the PMD polls empty rings (round robin too), and C2QoS's decisions use time the PMD
/// would have spent on those polls. A PMD busy 97% of the time was not enough to tell: rounds
/// with 1-2 empty polls per batch passed it.
const SATURATED_BUSY_PERCENT: f64 = 97.0;
const FULL_BATCH_PACKETS: f64 = 31.0;
const MAX_EMPTY_POLLS_PER_BATCH: f64 = 0.1;

fn pmd_limited(w: &Window) -> bool {
    w.busy_percent >= SATURATED_BUSY_PERCENT && w.packets_per_batch >= FULL_BATCH_PACKETS && w.empty_polls_per_batch <= MAX_EMPTY_POLLS_PER_BATCH
}

/// Switches every VM port between the two configurations in one `set-port` request: one
/// admission check, one persist, one switch of the PMD. (Port by port, 28 requests took
/// 0.4-0.7 s, so the two windows of a pair were over a second apart and the host's phases
/// moved cycles per packet by +-5% in between.) Returns how long the switch took.
fn set_c2qos(socket: &PathBuf, on: bool, tsc_hz: u64) -> Duration {
    let options = if on {
        json!({"cycles_per_sec": (tsc_hz / PORTS as u64).to_string(), "mode": "min-max"})
    } else {
        json!({"cycles_per_sec": "0", "mode": "strict"})
    };
    let ports: Vec<Value> = (1..=PORTS).map(|i| json!({"name": format!("vm{i}"), "options": options})).collect();
    let start = Instant::now();
    cli(socket, json!({"cmd": "set-port", "ports": ports}));
    start.elapsed()
}

/// (25th percentile, median, 75th percentile).
fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 4], v[v.len() / 2], v[v.len() * 3 / 4])
}

/// A 95% confidence interval of the median, free of any assumption about the distribution:
/// the order statistics k and n-k+1, with k from the binomial(n, 1/2) tail in its normal
/// approximation. `None` below 6 values (the interval would be the whole range).
fn median_ci95(mut v: Vec<f64>) -> Option<(f64, f64)> {
    let n = v.len();
    let k = (n as f64 / 2.0 - 0.98 * (n as f64).sqrt()).floor() as usize;
    if n < 6 || k == 0 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[k - 1], v[n - k]))
}

fn workload(name: &str, security_group_masks: usize, flows_per_vm: u32) {
    let dir = std::env::temp_dir().join(format!("slaswitch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("slaswitchd.ctl");
    let prefix = format!("ssbench{}", std::process::id());
    let daemon = Proc(
        Command::new(env!("CARGO_BIN_EXE_slaswitchd"))
            .args(["--pmd-cores", "0", "--main-core", "1", "--no-metrics", "--file-prefix", &prefix, "--run-dir"])
            .arg(&dir)
            .arg("--db")
            .arg(dir.join("conf.json"))
            .arg("--model")
            .arg(dir.join("none.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start slaswitchd"),
    );
    let t = Instant::now();
    while !socket.exists() {
        assert!(t.elapsed() < Duration::from_secs(30), "slaswitchd did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    cli(&socket, json!({"cmd": "add-port", "name": "up", "type": "null"}));
    let mut flows = Vec::new();
    for i in 1..=PORTS {
        cli(&socket, json!({"cmd": "add-port", "name": format!("vm{i}"), "type": "vhost-user"}));
        flows.push(format!("priority=1,in_port=vm{i},actions=output:up"));
    }
    flows.extend(slaswitch_classifier::security_group::security_group_rules(security_group_masks).iter().map(|r| r.to_string()).filter(|_| security_group_masks > 0));
    cli(&socket, json!({"cmd": "add-flow", "flows": flows}));
    let tsc_hz = cli(&socket, json!({"cmd": "pmd-stats"}))["tsc_hz"].as_u64().unwrap();
    let mut tenant = Command::new(env!("CARGO_BIN_EXE_slaswitch-tenant"));
    tenant.args(["--core", "1", "--ring", "1024", "--duration", "600", "--out", "/dev/null", "--file-prefix", &format!("{prefix}vm")]);
    for i in 1..=PORTS {
        tenant.arg("--vm").arg(format!("vm{i}={}", dir.join(format!("vm{i}.sock")).display()));
    }
    tenant.args(["gen", "--phase", &format!("size=64,rate=max,flows={flows_per_vm}")]);
    let tenant = Proc(tenant.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start slaswitch-tenant"));
    std::thread::sleep(Duration::from_secs(4));
    let (mut rate_ratios, mut cost_ratios, mut own_shares, mut limited_rounds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut limited_cost_ratios, mut limited_rate_ratios, mut switch_times) = (Vec::new(), Vec::new(), Vec::new());
    // Every round's two windows, and whether it was PMD-limited, for the ABBA pairs below.
    let mut paired: Vec<(bool, Window, Window)> = Vec::new();
    println!("{name}: {PORTS} VM ports, 64-byte frames, {flows_per_vm} flow(s) per VM, {security_group_masks} security-group masks");
    println!("  round (* PMD-limited)   RR Mpps  C2QoS Mpps  ratio   RR cyc/pkt  C2QoS cyc/pkt  ratio   busy% RR/C2QoS  C2QoS code: % of busy (+ sampling's fences %), cyc/decision (picking, charging; after an empty poll / a batch), pkts/decision, owed/decision, parked/decision; RR/C2QoS: pkts/batch, empty polls/batch, EMC miss %");
    let rounds = rounds();
    for round in 0..rounds {
        // Alternate which goes first, so a drift of the host does not favour one side.
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        let mut r = [Window::default(); 2];
        for on in order {
            switch_times.push(set_c2qos(&socket, on, tsc_hz).as_secs_f64());
            std::thread::sleep(SETTLE);
            r[usize::from(on)] = measure(&socket, tsc_hz);
        }
        let (rr, c2) = (r[0], r[1]);
        rate_ratios.push(c2.packets_per_sec / rr.packets_per_sec);
        cost_ratios.push(c2.busy_cycles_per_packet / rr.busy_cycles_per_packet);
        own_shares.push(c2.own_percent_of_busy);
        let limited = pmd_limited(&rr) && pmd_limited(&c2);
        paired.push((limited, rr, c2));
        if limited {
            limited_rounds.push(c2);
            limited_cost_ratios.push(c2.busy_cycles_per_packet / rr.busy_cycles_per_packet);
            limited_rate_ratios.push(c2.packets_per_sec / rr.packets_per_sec);
        }
        println!(
            "  {round:>4}{} {:>8.3}  {:>10.3}  {:>5.3}  {:>11.0}  {:>13.0}  {:>5.3}   {:>3.0}/{:<3.0}       {:>6.3} (+{:.3})  {:>5.0} ({:>3.0}, {:>3.0}; {:>3.0} / {:>3.0})  {:>5.1}  {:>5.3}  {:>5.3};  {:.1}/{:.1}  {:.2}/{:.2}  {:.1}/{:.1}",
            if limited { "*" } else { " " },
            rr.packets_per_sec / 1e6,
            c2.packets_per_sec / 1e6,
            c2.packets_per_sec / rr.packets_per_sec,
            rr.busy_cycles_per_packet,
            c2.busy_cycles_per_packet,
            c2.busy_cycles_per_packet / rr.busy_cycles_per_packet,
            rr.busy_percent,
            c2.busy_percent,
            c2.own_percent_of_busy,
            c2.sampling_percent_of_busy,
            c2.own_cycles_per_decision,
            c2.pick_cycles_per_decision,
            c2.charge_cycles_per_decision,
            c2.cycles_per_empty_decision,
            c2.cycles_per_full_decision,
            c2.packets_per_decision,
            c2.owed_per_decision,
            c2.parked_per_decision,
            rr.packets_per_batch,
            c2.packets_per_batch,
            rr.empty_polls_per_batch,
            c2.empty_polls_per_batch,
            rr.emc_miss_percent,
            c2.emc_miss_percent
        );
    }
    let pct = |ratios: &Vec<f64>| {
        let (lo, mid, hi) = quartiles(ratios.clone());
        let ci = median_ci95(ratios.clone()).map_or(String::new(), |(a, b)| format!("95% CI of the median {:+.2}%..{:+.2}%, ", (a - 1.0) * 100.0, (b - 1.0) * 100.0));
        format!("{:+.2}% ({ci}quartiles {:+.2}%, {:+.2}%)", (mid - 1.0) * 100.0, (lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
    };
    let (_, switch_median, _) = quartiles(switch_times.clone());
    let switch_slowest = switch_times.iter().copied().fold(0.0, f64::max);
    println!("  switching all {PORTS} ports in one set-port: {:.1} ms median, {:.1} ms at most; windows of {SECS} s, {} ms apart after a switch", switch_median * 1e3, switch_slowest * 1e3, SETTLE.as_millis());
    println!("  median of the paired rounds, C2QoS against RR:");
    println!("    forwarding rate          {}", pct(&rate_ratios));
    println!("    PMD cycles per packet    {}", pct(&cost_ratios));
    let (lo, mid, hi) = quartiles(own_shares);
    println!("    C2QoS's own code, measured on the PMD: {mid:.3}% of its busy cycles (quartiles {lo:.3}%, {hi:.3}%), all rounds");
    println!("      (it also runs while the PMD polls empty rings or idles: only a PMD-limited round's share is taken from forwarding)");
    if limited_rounds.is_empty() {
        println!("    no round was PMD-limited (PMD busy >= {SATURATED_BUSY_PERCENT}%, every poll a full batch, on both sides): the VMs' core was the limit\n");
    } else {
        let median = |f: fn(&Window) -> f64| quartiles(limited_rounds.iter().map(f).collect()).1;
        let shares: Vec<f64> = limited_rounds.iter().map(|w| w.own_percent_of_busy).collect();
        let (least, most) = (shares.iter().copied().fold(f64::INFINITY, f64::min), shares.iter().copied().fold(0.0, f64::max));
        // Rounds 2k and 2k+1 run RR, C2QoS, C2QoS, RR: summed, a drift of the host that is
        // linear over the four windows cancels out.
        let abba: Vec<(f64, f64)> = paired
            .chunks_exact(2)
            .filter(|p| p[0].0 && p[1].0)
            .map(|p| {
                let (rr_a, c2_a, rr_b, c2_b) = (p[0].1, p[0].2, p[1].1, p[1].2);
                (
                    (c2_a.packets_per_sec + c2_b.packets_per_sec) / (rr_a.packets_per_sec + rr_b.packets_per_sec),
                    (c2_a.busy_cycles_per_packet + c2_b.busy_cycles_per_packet) / (rr_a.busy_cycles_per_packet + rr_b.busy_cycles_per_packet),
                )
            })
            .collect();
        if abba.len() >= 2 {
            println!("    ABBA pairs of PMD-limited rounds ({}): forwarding rate {}; PMD cycles per packet {}", abba.len(), pct(&abba.iter().map(|a| a.0).collect()), pct(&abba.iter().map(|a| a.1).collect()));
        }
        println!("    forwarding rate, PMD-limited rounds:       {}", pct(&limited_rate_ratios));
        println!("    PMD cycles per packet, PMD-limited rounds: {}", pct(&limited_cost_ratios));
        println!(
            "    PMD-limited rounds ({} of {rounds}: PMD busy >= {SATURATED_BUSY_PERCENT}%, >= {FULL_BATCH_PACKETS} packets per poll and <= {MAX_EMPTY_POLLS_PER_BATCH} empty polls per batch on both sides): C2QoS's own code {:.3}% of busy cycles (from {least:.3}% to {most:.3}%), {:.0} cycles per decision ({:.0} picking, {:.0} charging; {:.0} after an empty poll, {:.0} after a batch), {:.1} packets per decision, {:.3} owed and {:.3} parked per decision (medians)\n",
            limited_rounds.len(),
            median(|w| w.own_percent_of_busy),
            median(|w| w.own_cycles_per_decision),
            median(|w| w.pick_cycles_per_decision),
            median(|w| w.charge_cycles_per_decision),
            median(|w| w.cycles_per_empty_decision),
            median(|w| w.cycles_per_full_decision),
            median(|w| w.packets_per_decision),
            median(|w| w.owed_per_decision),
            median(|w| w.parked_per_decision)
        );
    }
    drop(tenant);
    drop(daemon);
    slaswitch_dpdk::remove_hugepage_files(&prefix);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // `cargo test --benches` runs benches with --bench absent: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if unsafe { libc::geteuid() } != 0 || slaswitch_dpdk::hugepage_status().0 == 0 {
        eprintln!("c2qos_overhead: needs root and hugepages (scripts/test sets them up); skipped");
        return;
    }
    println!("C2QoS overhead (data plane on this machine; PMD on core 0, emulated VMs on core 1)\n");
    // `cargo bench --bench c2qos_overhead -- cloud` runs only the workloads whose name holds
    // "cloud".
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--")).unwrap_or_default();
    for (name, masks, flows) in [("cheap packets", 0, 1), ("cloud-like packets", 99, 2000)] {
        if name.contains(filter.as_str()) {
            workload(name, masks, flows);
        }
    }
}
