//! Whole-switch benchmark: what C2QoS's cycle accounting and scheduling cost the data plane
//! (goal: at most 1% of the forwarding rate with 28 ports; seed 000 Sec. VI-F reports 0.018%
//! on the PMD plus about 2% for a manager thread, which slaswitch's lazy refill does not need).
//!
//! One slaswitchd (PMD on core 0, shielded: the bench moves every other thread that may move to
//! core 1 while it runs) with 28 vhost-user VM ports and a null uplink; one tenant
//! process (core 1) runs the 28 emulated VMs (packed rings of 256 descriptors,
//! [`VM_RING_DESCRIPTORS`]), all sending as fast as they can. Every VM port has
//! C2QoS settings: MIN-MAX buckets of 1/28 of what admission lets the core promise its ports
//! each, under HBS, so every batch is scheduled and charged, the allocations add up to all
//! admission allows, and the idle share is lent, not held back. All ports stay in one class: classes change which port goes first, and so batch
//! sizes, which is policy, not overhead.
//!
//! The daemon runs with `--compare-slice-us` ([`SLICE_US`]): its PMD alternates, live, between
//!   A: plain round robin (the scheduler bypassed: the loop a PMD without C2QoS settings runs), and
//!   B: C2QoS,
//! and counts each side's packets and cycles apart in the last quarter of each slice, after
//! the traffic has settled into the side's order (`slaswitch_datapath::probe::compare`). Slices of
//! 20 ms side by side see the same phase of this shared host, which moves a batch's cost by
//! +-5% within a second; the earlier method, switching the ports' settings through the control
//! socket between 0.25 s windows, could not resolve 1% in 60 rounds. Each round reads the
//! totals twice, [`ROUND_SECS`] apart, and gives C2QoS/round-robin ratios of (1) packets
//! forwarded per second of the PMD's time (busy, idle and stalled) and (2) PMD busy cycles per
//! forwarded packet, and (3) the share of the PMD's busy cycles spent in C2QoS's own code,
//! which the PMD measures itself (`qos_cycles`: decisions and charging timed one in 64,
//! publishing and drift windows whole); (3) is what the paper's 0.018% is. Only the
//! PMD-limited rounds ([`pmd_limited`]) say what C2QoS takes from forwarding; the summary
//! gives their figures apart.
//!
//! A run's rounds agree with each other far better than separate runs do: one switch instance
//! against another moved the ratio by 2% (the ports' memory, which of them cost more and so
//! wait for tokens under C2QoS), so each workload runs [`RUNS`] fresh instances and the
//! result is the spread over runs of each run's pooled ratio.
//! Two workloads: cheap packets (64-byte frames, one flow, a rule per VM port: the worst case
//! for relative overhead) and cloud-like ones (many flows through a 99-mask security-group
//! table).
//!
//!   cargo bench -p slaswitch --bench c2qos_overhead -- [cloud|cheap] [--runs N] [--rounds N]
//!       [--slice-us US] [--option KEY=VALUE ...] [--against OTHER/slaswitchd] [--no-shield]
//!       [--vm-ring DESCRIPTORS] [--virtio-ring split|packed]
//!                                                                  (root, hugepages)
//!
//! `--against` alternates runs between this build's daemon and another build's, for a
//! before/after comparison in one sitting (the host drifts too much between sittings).
//!
//! `--option priority=4` (repeatable) gives the ports other settings instead of the MIN-MAX
//! buckets (that one: HBS without cycle limits).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use slaswitch::protocol::stats::PmdStatsReply;
use slaswitch::protocol::Response;
use slaswitch::protocol::{Options, PortChange, Request};
use slaswitch::tenant::VirtioRing;
use slaswitch_config::allocation::deliverable_cycles_per_sec;
use slaswitch_datapath::probe::compare::CompareSide;

const PORTS: usize = 28;
/// Fresh switch instances per workload, and rounds per instance.
const RUNS: usize = 4;
const ROUNDS: usize = 40;
/// The emulated VMs' rings: QEMU's default virtio-net queue size, in the packed layout with
/// in-order completion. With 28 split rings of 1024 the frames the VMs had sent and not yet
/// reclaimed (28 rings' worth of buffers) no longer fitted the VMs' core's caches: reclaiming
/// and reusing them missed the cache on every frame, and one core of VMs could not keep the
/// PMD busy (`docs/results/c2qos-overhead.md`).
const VM_RING_DESCRIPTORS: u16 = 256;

/// The bench's command line (after `cargo bench ... --`).
#[derive(clap::Parser, Debug)]
struct BenchArgs {
    /// Only the workloads whose name holds this (`cheap`, `cloud`).
    filter: Option<String>,
    /// Fresh switch-and-VMs instances per workload.
    #[arg(long, default_value_t = RUNS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    runs: usize,
    /// Rounds per instance.
    #[arg(long, default_value_t = ROUNDS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    rounds: usize,
    /// Each side's slice, microseconds.
    #[arg(long = "slice-us", default_value_t = SLICE_US, value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
    slice_us: u64,
    /// Another build's `slaswitchd` to compare with this one: runs alternate between the two,
    /// and each build's runs are summarized apart (a before/after check in one sitting).
    #[arg(long)]
    against: Option<std::path::PathBuf>,
    /// A port option instead of the MIN-MAX buckets (repeatable), e.g. `priority=4`.
    #[arg(long = "option")]
    options: Vec<String>,
    /// Descriptors per emulated VM's virtio ring (a power of two from 64 to 32768).
    #[arg(long = "vm-ring", default_value_t = VM_RING_DESCRIPTORS, value_parser = slaswitch::tenant::parse_ring_descriptors)]
    vm_ring: u16,
    /// The emulated VMs' virtio ring layout.
    #[arg(long = "virtio-ring", value_enum, default_value_t = VirtioRing::Packed)]
    virtio_ring: VirtioRing,
    /// Leave the other threads of the machine where they are (the PMD's core not shielded).
    #[arg(long = "no-shield")]
    no_shield: bool,
    /// Given by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

static ARGS: std::sync::OnceLock<BenchArgs> = std::sync::OnceLock::new();

fn args() -> &'static BenchArgs {
    ARGS.get().expect("parsed in main")
}

/// Each side's slice: 15 ms of settling, then 5 ms counted. Short enough that both sides see
/// the same phase of the host; the settling covers the 5-20 ms the traffic takes to follow a
/// switch (`slaswitch_datapath::probe::compare`).
const SLICE_US: u64 = 20_000;

/// `--slice-us N` tries another slice (the result should not depend on it).
fn slice_us() -> u64 {
    args().slice_us
}
/// A round: about 12 slices of each side.
const ROUND_SECS: f64 = 0.5;

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

fn cli(socket: &Path, req: Request) -> Response {
    slaswitch::control::request(socket, &req).unwrap_or_else(|e| panic!("{req:?}: {e}"))
}

fn pmd_stats(socket: &Path) -> PmdStatsReply {
    match cli(socket, Request::PmdStats) {
        Response::PmdStats(s) => s,
        other => panic!("pmd-stats answered {other:?}"),
    }
}

/// One side's counted totals (`pmd-stats` `compare`).
#[derive(Clone, Copy, Default)]
struct Side {
    slices: f64,
    elapsed: f64,
    busy: f64,
    packets: f64,
    batches: f64,
    empty_polls: f64,
    qos: f64,
}

impl Side {
    fn of(s: &CompareSide) -> Side {
        Side {
            slices: s.slices as f64,
            elapsed: s.elapsed_cycles as f64,
            busy: s.busy_cycles as f64,
            packets: s.packets as f64,
            batches: s.batches as f64,
            empty_polls: s.empty_polls as f64,
            qos: s.qos_cycles as f64,
        }
    }

    /// `self + sign * o`, field by field.
    fn combined(&self, o: &Side, sign: f64) -> Side {
        Side {
            slices: self.slices + sign * o.slices,
            elapsed: self.elapsed + sign * o.elapsed,
            busy: self.busy + sign * o.busy,
            packets: self.packets + sign * o.packets,
            batches: self.batches + sign * o.batches,
            empty_polls: self.empty_polls + sign * o.empty_polls,
            qos: self.qos + sign * o.qos,
        }
    }

    fn minus(&self, o: &Side) -> Side {
        self.combined(o, -1.0)
    }

    fn plus(&self, o: &Side) -> Side {
        self.combined(o, 1.0)
    }

    fn packets_per_sec(&self, tsc_hz: u64) -> f64 {
        self.packets / (self.elapsed.max(1.0) / tsc_hz as f64)
    }

    fn busy_cycles_per_packet(&self) -> f64 {
        self.busy / self.packets.max(1.0)
    }

    fn busy_percent(&self) -> f64 {
        100.0 * self.busy / self.elapsed.max(1.0)
    }

    fn packets_per_batch(&self) -> f64 {
        self.packets / self.batches.max(1.0)
    }

    fn empty_polls_per_batch(&self) -> f64 {
        self.empty_polls / self.batches.max(1.0)
    }
}

/// What one `pmd-stats` gives the bench: both sides, and C2QoS's own counters (they move only
/// while C2QoS runs).
#[derive(Clone, Copy, Default)]
struct Counters {
    round_robin: Side,
    c2qos: Side,
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
    /// Batches run as a turn going on (counted among the probe's decisions, with no scheduler
    /// call behind them).
    turns: f64,
    /// Timed decisions that were a turn going on, and their cycles (not scaled).
    timed_turns: f64,
    timed_turn_cycles: f64,
    /// Cycles the sampled decisions' fences waited for the batch's stores (not in `qos`).
    sampling: f64,
    /// What the probe takes off each timed interval for its TSC reads.
    tsc_read_cycles: u64,
}

fn counters(socket: &Path) -> Counters {
    let stats = pmd_stats(socket);
    let pmd = &stats.pmds[0];
    let probe = pmd.probe.unwrap_or_else(|| panic!("the daemon runs no probe: {pmd:?}"));
    let compare = probe.compare.unwrap_or_else(|| panic!("the daemon runs no comparison: {pmd:?}"));
    let t = probe.totals;
    Counters {
        round_robin: Side::of(&compare.round_robin),
        c2qos: Side::of(&compare.c2qos),
        qos: t.qos_cycles as f64,
        pick: t.qos_pick_cycles as f64,
        charge: t.qos_charge_cycles as f64,
        decisions: t.qos_decisions as f64,
        empty_decisions: t.qos_empty_decisions as f64,
        empty_cycles: t.qos_empty_cycles as f64,
        owed: pmd.qos_owed as f64,
        parked: pmd.qos_parked as f64,
        turns: pmd.qos_turn_batches as f64,
        timed_turns: t.qos_timed_turns as f64,
        timed_turn_cycles: t.qos_timed_turn_cycles as f64,
        sampling: t.qos_sampling_cycles as f64,
        tsc_read_cycles: probe.tsc_read_cycles,
    }
}

/// One round: both sides' counted time within it, and C2QoS's own figures.
#[derive(Clone, Copy, Default)]
struct Round {
    rr: Side,
    c2: Side,
    /// C2QoS's own cycles as a share of its side's busy cycles, and per decision.
    own_percent_of_busy: f64,
    own_cycles_per_decision: f64,
    /// Of those: picking the port, and charging its batch (the rest is publishing and drift).
    pick_cycles_per_decision: f64,
    charge_cycles_per_decision: f64,
    /// Picking and charging cycles of a decision whose poll came back empty, and of the others.
    cycles_per_empty_decision: f64,
    cycles_per_full_decision: f64,
    /// Shares of decisions after which the port owed tokens, and that parked a port.
    owed_per_decision: f64,
    parked_per_decision: f64,
    /// Share of the decisions that were a turn going on (the scheduler not called).
    turns_per_decision: f64,
    /// What C2QoS's code took on a batch of a turn going on (picking and charging; timed
    /// samples).
    cycles_per_turn_batch: f64,
    /// What timing the sampled decisions cost beyond C2QoS's own code, % of busy cycles.
    sampling_percent_of_busy: f64,
}

fn measure(socket: &Path) -> Round {
    let a = counters(socket);
    std::thread::sleep(Duration::from_secs_f64(ROUND_SECS));
    let b = counters(socket);
    let (rr, c2) = (b.round_robin.minus(&a.round_robin), b.c2qos.minus(&a.c2qos));
    let decisions = (b.decisions - a.decisions).max(1.0);
    let busy = c2.busy.max(1.0);
    Round {
        rr,
        c2,
        // The C2QoS side's own counter: the PMD's `qos_cycles` also holds what it published
        // and the drift windows, which only run on that side.
        own_percent_of_busy: 100.0 * c2.qos / busy,
        own_cycles_per_decision: (b.qos - a.qos) / decisions,
        pick_cycles_per_decision: (b.pick - a.pick) / decisions,
        charge_cycles_per_decision: (b.charge - a.charge) / decisions,
        cycles_per_empty_decision: (b.empty_cycles - a.empty_cycles) / (b.empty_decisions - a.empty_decisions).max(1.0),
        cycles_per_full_decision: ((b.pick - a.pick) + (b.charge - a.charge) - (b.empty_cycles - a.empty_cycles))
            / (decisions - (b.empty_decisions - a.empty_decisions)).max(1.0),
        owed_per_decision: (b.owed - a.owed) / decisions,
        parked_per_decision: (b.parked - a.parked) / decisions,
        turns_per_decision: (b.turns - a.turns) / decisions,
        cycles_per_turn_batch: (b.timed_turn_cycles - a.timed_turn_cycles) / (b.timed_turns - a.timed_turns).max(1.0),
        // The decisions' counters run through the uncounted quarters too: their ratio to
        // `qos_cycles` carries over.
        sampling_percent_of_busy: 100.0 * c2.qos / busy * (b.sampling - a.sampling) / (b.qos - a.qos).max(1.0),
    }
}

/// A round counts as PMD-limited when, on both sides, the PMD was busy and every poll brought
/// a full batch: the VMs had packets waiting on every port, so the PMD's own speed set the
/// forwarding rate, and only then is C2QoS's time taken from forwarding. The emulated VMs
/// share one core, and in the host's slow phases they cannot keep 28 rings full: then the
/// PMD polls empty rings (round robin too), and C2QoS's decisions use time the PMD would have
/// spent on those polls. The uplink, polled once per pass and never sending, makes 1/28 empty
/// poll per batch.
const SATURATED_BUSY_PERCENT: f64 = 97.0;
const FULL_BATCH_PACKETS: f64 = 31.0;
const MAX_EMPTY_POLLS_PER_BATCH: f64 = 0.1;

fn pmd_limited(s: &Side) -> bool {
    s.busy_percent() >= SATURATED_BUSY_PERCENT
        && s.packets_per_batch() >= FULL_BATCH_PACKETS
        && s.empty_polls_per_batch() <= MAX_EMPTY_POLLS_PER_BATCH
}

/// Gives every VM port its C2QoS settings, in one `set-port` request.
fn set_c2qos(socket: &Path, tsc_hz: u64) {
    let given: Options = args()
        .options
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("--option {kv}: use KEY=VALUE"));
            (k.to_string(), v.to_string())
        })
        .collect();
    let options: Options = match given.is_empty() {
        false => given,
        true => [
            ("cycles_per_sec".to_string(), (deliverable_cycles_per_sec(tsc_hz) / PORTS as u64).to_string()),
            ("mode".to_string(), "min-max".to_string()),
        ]
        .into(),
    };
    let ports = (1..=PORTS).map(|i| PortChange { name: format!("vm{i}"), options: options.clone() }).collect();
    cli(socket, Request::SetPort { ports });
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

/// One run's pooled sides over all its rounds and over its PMD-limited ones, and C2QoS's own
/// share of busy cycles in each (the median over rounds).
struct RunResult {
    all: (Side, Side),
    limited: Option<(Side, Side)>,
    limited_rounds: usize,
    own_percent_all: f64,
    own_percent_limited: Option<f64>,
    /// C2QoS's cycles per decision after a batch (its record evicted by the batch: the
    /// data plane's case), the median over all rounds.
    cycles_per_full_decision: f64,
}

fn pooled(rs: &[&Round]) -> (Side, Side) {
    rs.iter().fold((Side::default(), Side::default()), |(a, b), r| (a.plus(&r.rr), b.plus(&r.c2)))
}

fn workload(name: &str, security_group_masks: usize, flows_per_vm: u32) {
    let runs = args().runs;
    println!("{name}: {PORTS} VM ports, 64-byte frames, {flows_per_vm} flow(s) per VM, {security_group_masks} security-group masks; {runs} runs, each a fresh switch and VMs; slices of {} ms, rounds of {ROUND_SECS} s", slice_us() as f64 / 1000.0);
    let this_build = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slaswitchd"));
    let Some(other) = args().against.clone() else {
        let results: Vec<RunResult> =
            (1..=runs).map(|run| one_run(run, &this_build, security_group_masks, flows_per_vm)).collect();
        across_runs(name, &results);
        return;
    };
    // This build first, then the other, and so on: each pair sees nearly the same host phase.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        println!("  this build:");
        ours.push(one_run(run, &this_build, security_group_masks, flows_per_vm));
        println!("  {}:", other.display());
        theirs.push(one_run(run, &other, security_group_masks, flows_per_vm));
    }
    across_runs(&format!("{name}, this build"), &ours);
    across_runs(&format!("{name}, {}", other.display()), &theirs);
}

/// Starts a switch and the VMs, measures the rounds, and tears both down.
fn one_run(run: usize, daemon_bin: &Path, security_group_masks: usize, flows_per_vm: u32) -> RunResult {
    let dir = std::env::temp_dir().join(format!("slaswitch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("slaswitchd.ctl");
    let prefix = format!("ssbench{}", std::process::id());
    let daemon = Proc(
        Command::new(daemon_bin)
            .args([
                "--pmd-cores",
                "0",
                "--main-core",
                "1",
                "--no-metrics",
                "--file-prefix",
                &prefix,
                "--compare-slice-us",
                &slice_us().to_string(),
                "--run-dir",
            ])
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
    cli(&socket, Request::AddPort { name: "up".into(), port_type: "null".into(), options: Options::new() });
    let mut flows = Vec::new();
    for i in 1..=PORTS {
        cli(
            &socket,
            Request::AddPort { name: format!("vm{i}"), port_type: "vhost-user".into(), options: Options::new() },
        );
        flows.push(format!("priority=1,in_port=vm{i},actions=output:up"));
    }
    flows.extend(
        slaswitch_classifier::security_group::security_group_rules(security_group_masks)
            .iter()
            .map(|r| r.to_string())
            .filter(|_| security_group_masks > 0),
    );
    cli(&socket, Request::AddFlow { flows });
    let tsc_hz = pmd_stats(&socket).tsc_hz;
    set_c2qos(&socket, tsc_hz);
    let mut tenant = Command::new(env!("CARGO_BIN_EXE_slaswitch-tenant"));
    tenant.args([
        "--core",
        "1",
        "--ring",
        &args().vm_ring.to_string(),
        "--virtio-ring",
        args().virtio_ring.name(),
        "--duration",
        "600",
        "--out",
        "/dev/null",
        "--file-prefix",
        &format!("{prefix}vm"),
    ]);
    for i in 1..=PORTS {
        tenant.arg("--vm").arg(format!("vm{i}={}", dir.join(format!("vm{i}.sock")).display()));
    }
    // Refused frames are kept and offered again: building and freeing them took most of the
    // VMs' core, and the PMD-limited rounds went from 11 in 60 to 44 in 120.
    tenant.args(["gen", "--keep-refused", "--phase", &format!("size=64,rate=max,flows={flows_per_vm}")]);
    let tenant = Proc(tenant.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start slaswitch-tenant"));
    std::thread::sleep(Duration::from_secs(4));
    let read_cycles = counters(&socket).tsc_read_cycles;
    println!("  run {run} (the probe takes {read_cycles} cycles of TSC reads off each timed interval)\n  round (* PMD-limited)   RR Mpps  C2QoS Mpps  ratio   RR cyc/pkt  C2QoS cyc/pkt  ratio   busy% RR/C2QoS  C2QoS code: % of busy (+ sampling's fences %), cyc/decision (picking, charging; after an empty poll / a batch), owed/decision, parked/decision, turn batches/decision (their cycles); RR/C2QoS: pkts/batch, empty polls/batch");
    let mut all: Vec<(bool, Round)> = Vec::new();
    let rounds = args().rounds;
    for round in 0..rounds {
        let r = measure(&socket);
        let limited = pmd_limited(&r.rr) && pmd_limited(&r.c2);
        all.push((limited, r));
        let (rr, c2) = (r.rr, r.c2);
        println!(
            "  {round:>4}{} {:>8.3}  {:>10.3}  {:>5.3}  {:>11.0}  {:>13.0}  {:>5.3}   {:>3.0}/{:<3.0}       {:>6.3} (+{:.3})  {:>5.0} ({:>3.0}, {:>3.0}; {:>3.0} / {:>3.0})  {:>5.3}  {:>5.3}  {:>5.3} ({:>3.0});  {:.1}/{:.1}  {:.2}/{:.2}",
            if limited { "*" } else { " " },
            rr.packets_per_sec(tsc_hz) / 1e6,
            c2.packets_per_sec(tsc_hz) / 1e6,
            c2.packets_per_sec(tsc_hz) / rr.packets_per_sec(tsc_hz),
            rr.busy_cycles_per_packet(),
            c2.busy_cycles_per_packet(),
            c2.busy_cycles_per_packet() / rr.busy_cycles_per_packet(),
            rr.busy_percent(),
            c2.busy_percent(),
            r.own_percent_of_busy,
            r.sampling_percent_of_busy,
            r.own_cycles_per_decision,
            r.pick_cycles_per_decision,
            r.charge_cycles_per_decision,
            r.cycles_per_empty_decision,
            r.cycles_per_full_decision,
            r.owed_per_decision,
            r.parked_per_decision,
            r.turns_per_decision,
            r.cycles_per_turn_batch,
            rr.packets_per_batch(),
            c2.packets_per_batch(),
            rr.empty_polls_per_batch(),
            c2.empty_polls_per_batch(),
        );
    }
    let result = summarize(&all, rounds, tsc_hz);
    drop(tenant);
    drop(daemon);
    slaswitch_dpdk::remove_hugepage_files(&prefix);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Each run's pooled ratios side by side, and their median and range.
fn across_runs(name: &str, results: &[RunResult]) {
    let change = |(rr, c2): &(Side, Side)| {
        ((c2.packets / c2.elapsed.max(1.0)) / (rr.packets / rr.elapsed.max(1.0)) - 1.0) * 100.0
    };
    let cost = |(rr, c2): &(Side, Side)| (c2.busy_cycles_per_packet() / rr.busy_cycles_per_packet() - 1.0) * 100.0;
    let line = |label: &str, v: Vec<f64>, unit: &str| {
        if v.is_empty() {
            println!("    {label}: no run");
            return;
        }
        let (_, mid, _) = quartiles(v.clone());
        let (lo, hi) =
            (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        let each: Vec<String> = v.iter().map(|x| format!("{x:+.2}")).collect();
        println!("    {label}: median {mid:+.2}{unit}, from {lo:+.2} to {hi:+.2} (runs: {})", each.join(", "));
    };
    println!("  {name}, C2QoS against round robin over {} runs (each run's rounds pooled):", results.len());
    line("forwarding rate, all rounds, %", results.iter().map(|r| change(&r.all)).collect(), "%");
    line("PMD cycles per packet, all rounds, %", results.iter().map(|r| cost(&r.all)).collect(), "%");
    let limited: Vec<&RunResult> = results.iter().filter(|r| r.limited.is_some()).collect();
    let counts: Vec<String> = results.iter().map(|r| r.limited_rounds.to_string()).collect();
    println!("    PMD-limited rounds per run: {}", counts.join(", "));
    line(
        "forwarding rate, PMD-limited rounds, %",
        limited.iter().map(|r| change(r.limited.as_ref().expect("filtered"))).collect(),
        "%",
    );
    line(
        "PMD cycles per packet, PMD-limited rounds, %",
        limited.iter().map(|r| cost(r.limited.as_ref().expect("filtered"))).collect(),
        "%",
    );
    line("C2QoS's own code, % of busy cycles, all rounds", results.iter().map(|r| r.own_percent_all).collect(), "");
    line(
        "C2QoS's own code, % of busy cycles, PMD-limited rounds",
        limited.iter().filter_map(|r| r.own_percent_limited).collect(),
        "",
    );
    let decisions: Vec<f64> = results.iter().map(|r| r.cycles_per_full_decision).collect();
    let each: Vec<String> = decisions.iter().map(|c| format!("{c:.0}")).collect();
    println!(
        "    C2QoS's cycles per decision after a batch, all rounds: median {:.0} (runs: {})",
        quartiles(decisions).1,
        each.join(", ")
    );
    println!();
}

/// The run's medians with their intervals, and the pooled ratios, for all rounds and for the
/// PMD-limited ones.
fn summarize(all: &[(bool, Round)], rounds: usize, tsc_hz: u64) -> RunResult {
    let pct = |ratios: Vec<f64>| {
        let (lo, mid, hi) = quartiles(ratios.clone());
        let ci = median_ci95(ratios).map_or(String::new(), |(a, b)| {
            format!("95% CI of the median {:+.2}%..{:+.2}%, ", (a - 1.0) * 100.0, (b - 1.0) * 100.0)
        });
        format!("{:+.2}% ({ci}quartiles {:+.2}%, {:+.2}%)", (mid - 1.0) * 100.0, (lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
    };
    let report = |label: &str, rs: Vec<&Round>| {
        if rs.is_empty() {
            println!("    {label}: none");
            return;
        }
        let (rr, c2) = pooled(&rs);
        println!("    {label} ({} rounds; {:.0} slices of each side):", rs.len(), rr.slices.min(c2.slices));
        if rs.len() >= 2 {
            println!(
                "      forwarding rate          {}",
                pct(rs.iter().map(|r| r.c2.packets_per_sec(tsc_hz) / r.rr.packets_per_sec(tsc_hz)).collect())
            );
            println!(
                "      PMD cycles per packet    {}",
                pct(rs.iter().map(|r| r.c2.busy_cycles_per_packet() / r.rr.busy_cycles_per_packet()).collect())
            );
        }
        println!(
            "      pooled over the rounds: forwarding rate {:+.2}% ({:.3} against {:.3} Mpps), PMD cycles per packet {:+.2}% ({:.1} against {:.1})",
            (c2.packets_per_sec(tsc_hz) / rr.packets_per_sec(tsc_hz) - 1.0) * 100.0,
            c2.packets_per_sec(tsc_hz) / 1e6,
            rr.packets_per_sec(tsc_hz) / 1e6,
            (c2.busy_cycles_per_packet() / rr.busy_cycles_per_packet() - 1.0) * 100.0,
            c2.busy_cycles_per_packet(),
            rr.busy_cycles_per_packet()
        );
        let median = |f: fn(&Round) -> f64| quartiles(rs.iter().map(|r| f(r)).collect()).1;
        let shares: Vec<f64> = rs.iter().map(|r| r.own_percent_of_busy).collect();
        let (least, most) =
            (shares.iter().copied().fold(f64::INFINITY, f64::min), shares.iter().copied().fold(0.0, f64::max));
        println!(
            "      C2QoS's own code, measured on the PMD: {:.3}% of its busy cycles (median; from {least:.3}% to {most:.3}%; pooled {:.3}%), {:.0} cycles per decision ({:.0} picking, {:.0} charging; {:.0} after an empty poll, {:.0} after a batch), {:.3} owed and {:.3} parked per decision, {:.3} of the decisions a turn going on ({:.0} cycles each); empty polls per batch {:.2} round robin, {:.2} C2QoS (medians)",
            median(|r| r.own_percent_of_busy),
            100.0 * c2.qos / c2.busy.max(1.0),
            median(|r| r.own_cycles_per_decision),
            median(|r| r.pick_cycles_per_decision),
            median(|r| r.charge_cycles_per_decision),
            median(|r| r.cycles_per_empty_decision),
            median(|r| r.cycles_per_full_decision),
            median(|r| r.owed_per_decision),
            median(|r| r.parked_per_decision),
            median(|r| r.turns_per_decision),
            median(|r| r.cycles_per_turn_batch),
            median(|r| r.rr.empty_polls_per_batch()),
            median(|r| r.c2.empty_polls_per_batch()),
        );
    };
    println!("  C2QoS against round robin, side by side in {} ms slices:", slice_us() as f64 / 1000.0);
    let every: Vec<&Round> = all.iter().map(|(_, r)| r).collect();
    let limited: Vec<&Round> = all.iter().filter(|(l, _)| *l).map(|(_, r)| r).collect();
    report("all rounds", every.clone());
    println!("      (C2QoS's code also runs while the PMD polls empty rings: only a PMD-limited round's share is taken from forwarding)");
    report(
        &format!("PMD-limited rounds (PMD busy >= {SATURATED_BUSY_PERCENT}%, >= {FULL_BATCH_PACKETS} packets per poll and <= {MAX_EMPTY_POLLS_PER_BATCH} empty polls per batch on both sides; of {rounds})"),
        limited.clone(),
    );
    println!();
    let own = |rs: &[&Round]| quartiles(rs.iter().map(|r| r.own_percent_of_busy).collect()).1;
    RunResult {
        all: pooled(&every),
        limited: (!limited.is_empty()).then(|| pooled(&limited)),
        limited_rounds: limited.len(),
        own_percent_all: own(&every),
        own_percent_limited: (!limited.is_empty()).then(|| own(&limited)),
        cycles_per_full_decision: quartiles(every.iter().map(|r| r.cycles_per_full_decision).collect()).1,
    }
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
    // The PMD's core kept for it, as an operator keeps it (`docs/operations.md`): this process
    // (and so the daemons and VMs it starts) on core 1, every other thread of the machine that
    // may move confined there too, until the bench ends.
    let args = ARGS.get_or_init(<BenchArgs as clap::Parser>::parse);
    slaswitch_datapath::pmd::pin_to_core(1).expect("pin the bench to core 1");
    let shield = (!args.no_shield).then(|| slaswitch_testbed::core_shield::CoreShield::raise(&[0]));
    let shielded = match &shield {
        Some(s) => format!("shielded: {} other threads moved off it", s.moved()),
        None => "not shielded".to_string(),
    };
    println!("C2QoS overhead (data plane on this machine; PMD on core 0, {shielded}; emulated VMs on core 1)\n");
    let filter = args.filter.clone().unwrap_or_default();
    for (name, masks, flows) in [("cheap packets", 0, 1), ("cloud-like packets", 99, 2000)] {
        if name.contains(filter.as_str()) {
            workload(name, masks, flows);
        }
    }
}
