//! C2TB and HBS (seed 000 Sec. IV) driven by a fake PMD loop.

mod common;

use common::{assert_within, run_pmd, PortLoad, EMPTY_POLL_CYCLES};
use proptest::prelude::*;
use slaswitch_qos::cpu::*;

const HZ: u64 = 2_200_000_000; // the paper's 2.2 GHz core (Fig. 7)
const G: u64 = 1_000_000_000;

fn busy(batch_cycles: u64) -> PortLoad {
    PortLoad { busy_batch_cycles: batch_cycles, batch_packets: 32, busy: true }
}
fn idle() -> PortLoad {
    PortLoad { busy_batch_cycles: 0, batch_packets: 0, busy: false }
}
fn config(refill: RefillMode) -> C2tbConfig {
    C2tbConfig { refill, ..C2tbConfig::one_core(HZ) }
}
fn sched_with(refill: RefillMode, hbs: HbsConfig, ports: &[(u8, CycleLimit)]) -> PortScheduler {
    let mut s = PortScheduler::new(config(refill), hbs, 0);
    for (i, &(prio, limit)) in ports.iter().enumerate() {
        s.add_port(i, prio, limit, 0).unwrap();
    }
    s
}
fn fig7_ports() -> Vec<(u8, CycleLimit)> {
    [(2, 1), (2, 1), (4, 2), (4, 2)]
        .iter()
        .map(|&(tenths, weight)| (8, CycleLimit::MinMax { cycles_per_sec: tenths * G / 10, weight }))
        .collect()
}
const PERIODIC_50US: RefillMode = RefillMode::Periodic { interval_tsc: HZ / 20_000 };

/// The Fig. 7 maxima, exactly: 1 G of idle cycles split 1/6, 1/6, 2/6, 2/6. The paper prints
/// 1/6 G as 0.16 G, so its maxima (0.36/0.36/0.72/0.72 G) add up to 2.16 G, not the 2.2 G core.
const FIG7_MAX: [f64; 4] = [0.2 + 1.0 / 6.0, 0.2 + 1.0 / 6.0, 0.4 + 2.0 / 6.0, 0.4 + 2.0 / 6.0];

#[test]
fn fig7_minmax_maxima() {
    // Fig. 7: 0.2G/0.2G/0.4G/0.4G with weights 1/1/2/2 on a 2.2 GHz core: maxima 0.36/0.36/0.72/0.72G.
    let s = sched_with(RefillMode::Lazy, HbsConfig::default(), &fig7_ports());
    let paper = [0.36, 0.36, 0.72, 0.72];
    for port in 0..4 {
        let (min, max) = s.rates_cycles_per_sec(port).unwrap();
        assert_eq!(min, [2, 2, 4, 4][port] * G / 10);
        assert_within(max, FIG7_MAX[port] * G as f64, 1e-9, &format!("port {port} maximum"));
        // The paper's figures, truncated to two decimals per unit of weight.
        let per_weight_idle =
            ((max / G as f64 - [0.2, 0.2, 0.4, 0.4][port]) / [1.0, 1.0, 2.0, 2.0][port] * 100.0).floor() / 100.0;
        assert_within(
            [0.2, 0.2, 0.4, 0.4][port] + per_weight_idle * [1.0, 1.0, 2.0, 2.0][port],
            paper[port],
            1e-9,
            "paper figure",
        );
    }
    assert_within(s.pool().idle_cycles_per_sec(), G as f64, 1e-9, "C_idle");
}

#[test]
fn fig7_all_busy_get_their_maxima() {
    for refill in [RefillMode::Lazy, PERIODIC_50US] {
        let mut s = sched_with(refill, HbsConfig::default(), &fig7_ports());
        let loads = [busy(6_400), busy(9_000), busy(3_000), busy(12_000)];
        let run = run_pmd(&mut s, &loads, 0, HZ / 5, 0);
        for (port, want) in FIG7_MAX.iter().enumerate() {
            let got = run.cycles_by_port[port] as f64 * 5.0;
            assert_within(got, want * G as f64, 0.01, &format!("{refill:?} port {port} cycles/s"));
        }
    }
}

#[test]
fn minmax_hands_idle_ports_cycles_to_busy_ports_by_weight() {
    // Ports 0 and 1 sleep (empty polls only); 2 and 3 (weight 2 each) are busy.
    for refill in [RefillMode::Lazy, PERIODIC_50US] {
        let mut s = sched_with(refill, HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() }, &fig7_ports());
        let loads = [idle(), idle(), busy(6_400), busy(6_400)];
        let run = run_pmd(&mut s, &loads, 0, HZ / 5, 0);
        let idle_polls = (run.cycles_by_port[0] + run.cycles_by_port[1]) as f64;
        let busy_total = (run.cycles_by_port[2] + run.cycles_by_port[3]) as f64;
        let capacity = (HZ / 5) as f64;
        // Work-conserving: the busy ports use everything but the idle polls and PMD idling.
        assert!(
            busy_total + idle_polls >= 0.99 * capacity,
            "{refill:?}: busy {busy_total} + polls {idle_polls} of {capacity}"
        );
        assert_within(run.cycles_by_port[2] as f64, run.cycles_by_port[3] as f64, 0.01, "equal weights split equally");
    }
}

#[test]
fn minmax_redistribution_follows_weights_among_busy_ports() {
    // Port 0 sleeps; ports 1 (weight 1) and 2 (weight 3) have equal minimums and are busy.
    let ports = vec![
        (8, CycleLimit::MinMax { cycles_per_sec: G / 2, weight: 1 }),
        (8, CycleLimit::MinMax { cycles_per_sec: G / 5, weight: 1 }),
        (8, CycleLimit::MinMax { cycles_per_sec: G / 5, weight: 3 }),
    ];
    let mut s = sched_with(RefillMode::Lazy, HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() }, &ports);
    let run = run_pmd(&mut s, &[idle(), busy(5_000), busy(5_000)], 0, HZ / 2, 0);
    // Each busy port: its own max rate plus the sleeping port's unused tokens split 1:3.
    let secs = 0.5;
    let idle_rate = (HZ - G / 2 - 2 * G / 5) as f64; // C_idle, split 1:1:3
    let port0_unused = G as f64 / 2.0 + idle_rate / 5.0 - run.cycles_by_port[0] as f64 / secs;
    let expect1 = G as f64 / 5.0 + idle_rate / 5.0 + port0_unused / 4.0;
    let expect3 = G as f64 / 5.0 + 3.0 * idle_rate / 5.0 + 3.0 * port0_unused / 4.0;
    assert_within(run.cycles_by_port[1] as f64 / secs, expect1, 0.01, "weight-1 port");
    assert_within(run.cycles_by_port[2] as f64 / secs, expect3, 0.01, "weight-3 port");
}

#[test]
fn lazy_and_periodic_refill_give_the_same_shares() {
    let scenarios: Vec<Vec<PortLoad>> = vec![
        vec![busy(6_400), busy(9_000), busy(3_000), busy(12_000)],
        vec![idle(), busy(9_000), idle(), busy(12_000)],
        vec![busy(2_000), idle(), idle(), idle()],
    ];
    for loads in scenarios {
        let mut lazy =
            sched_with(RefillMode::Lazy, HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() }, &fig7_ports());
        let mut periodic =
            sched_with(PERIODIC_50US, HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() }, &fig7_ports());
        let a = run_pmd(&mut lazy, &loads, 0, HZ / 5, 0);
        let b = run_pmd(&mut periodic, &loads, 0, HZ / 5, 0);
        for port in 0..4 {
            if loads[port].busy {
                assert_within(
                    a.cycles_by_port[port] as f64,
                    b.cycles_by_port[port] as f64,
                    0.01,
                    &format!("{loads:?} port {port}"),
                );
            }
        }
    }
}

#[test]
fn ports_without_settings_are_polled_round_robin_in_fixed_order() {
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &[(8, CycleLimit::Unlimited); 3]);
    let run = run_pmd(&mut s, &[busy(1_000), idle(), busy(3_000)], 0, 100_000, 12);
    assert_eq!(run.order, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]);
}

#[test]
fn dynamic_priority_drops_step_by_step_and_restores_at_once() {
    let mut s = sched_with(
        RefillMode::Lazy,
        HbsConfig { idle_polls_per_step: 3, ..HbsConfig::default() },
        &[(2, CycleLimit::Unlimited)],
    );
    let mut now = 0;
    let class_after_polls = |s: &mut PortScheduler, now: &mut u64, packets: u32| {
        let p = s.next_port(*now).unwrap();
        *now += 100;
        s.report_batch(p, 100, packets, *now);
        s.view(0).unwrap().current_priority
    };
    let classes: Vec<u8> = (0..9).map(|_| class_after_polls(&mut s, &mut now, 0)).collect();
    assert_eq!(classes, vec![2, 2, 3, 3, 3, 4, 4, 4, 5]);
    assert_eq!(class_after_polls(&mut s, &mut now, 1), 2, "first packet restores the configured class");
    for _ in 0..100 {
        class_after_polls(&mut s, &mut now, 0);
    }
    assert_eq!(s.view(0).unwrap().current_priority, 8, "never below the lowest class");
}

/// One wait: how long a port waited, and what each port was served meanwhile.
type WaitSample = (u64, Vec<u64>);

/// Runs the PMD loop, checking at every decision that no ready port had a higher class than the
/// one chosen, and measuring each port's wait from becoming ready to being served.
fn run_checking_priority(s: &mut PortScheduler, loads: &[PortLoad], duration: u64) -> (Vec<u64>, Vec<Vec<WaitSample>>) {
    let n = loads.len();
    let mut now = 0u64;
    let mut ready_since: Vec<Option<u64>> = vec![None; n];
    let mut served_while_waiting: Vec<Vec<u64>> = vec![vec![0; n]; n];
    let mut max_wait = vec![0u64; n];
    let mut waits: Vec<Vec<WaitSample>> = vec![Vec::new(); n];
    while now < duration {
        let chosen = s.next_port(now);
        for (p, since) in ready_since.iter_mut().enumerate() {
            if let Some(PortPlace::Ready { .. }) = s.view(p).map(|v| v.place) {
                since.get_or_insert(now);
            }
        }
        let Some(port) = chosen else {
            now += 100;
            continue;
        };
        let class = s.view(port).unwrap().current_priority;
        for p in 0..n {
            if let PortPlace::Ready { class: c } = s.view(p).unwrap().place {
                assert!(c >= class, "port {port} (class {class}) served while port {p} waited in class {c}");
            }
        }
        let since = ready_since[port].take().unwrap_or(now);
        let wait = now - since;
        max_wait[port] = max_wait[port].max(wait);
        waits[port].push((wait, std::mem::replace(&mut served_while_waiting[port], vec![0; n])));
        for (p, counts) in served_while_waiting.iter_mut().enumerate() {
            if ready_since[p].is_some() {
                counts[port] += 1;
            }
        }
        let load = loads[port];
        let (cycles, packets) =
            if load.busy { (load.busy_batch_cycles, load.batch_packets) } else { (EMPTY_POLL_CYCLES, 0) };
        now += cycles;
        s.report_batch(port, cycles, packets, now);
    }
    (max_wait, waits)
}

#[test]
fn worst_case_formula_matches_the_paper() {
    let n = [2, 3, 1, 0, 0, 0, 0, 4];
    let k = [2.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let b = worst_case_wait_cycles(&n, &k, 10.0);
    assert_eq!(b[0], 20.0); // N1 c
    assert_eq!(b[1], (2.0 * 2.0 + 3.0) * 10.0); // (N1 k1 + N2) c
    assert_eq!(b[2], (4.0 + 9.0 + 1.0) * 10.0); // (N1 k1 + N2 k2 + N3) c
    assert_eq!(b[7], (4.0 + 9.0 + 1.0 + 4.0) * 10.0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// C2TB strict: a busy port never gets more than its allocation plus one bucket plus one
    /// batch, and (the PMD not being over-committed) never less than its allocation.
    #[test]
    fn strict_bucket_holds_each_port_to_its_allocation(
        shares in prop::collection::vec(1u64..20, 1..8),
        batches in prop::collection::vec(500u64..20_000, 8),
    ) {
        let total: u64 = shares.iter().sum();
        let ports: Vec<(u8, CycleLimit)> = shares.iter()
            .map(|&s| (8, CycleLimit::Strict { cycles_per_sec: HZ * 9 / 10 * s / total.max(20) }))
            .collect();
        let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
        let loads: Vec<PortLoad> = (0..ports.len()).map(|i| busy(batches[i])).collect();
        let duration = HZ / 20;
        let run = run_pmd(&mut s, &loads, 0, duration, 0);
        let depth = s.pool().config().bucket_depth_cycles;
        let max_batch = *batches.iter().max().unwrap();
        for (port, &(_, limit)) in ports.iter().enumerate() {
            let allowed = limit.alloc_cycles_per_sec() as f64 * duration as f64 / HZ as f64;
            let got = run.cycles_by_port[port] as f64;
            prop_assert!(got <= allowed + depth as f64 + batches[port] as f64,
                "port {} got {} cycles, allowed {} + depth {} + one batch {}", port, got, allowed, depth, batches[port]);
            // Other ports may spend their full buckets first (their burst), crowding this one out.
            let others_burst = depth as f64 * (ports.len() - 1) as f64;
            prop_assert!(got >= allowed - others_burst - 2.0 * max_batch as f64,
                "port {} got {} cycles, below its allocation {}", port, got, allowed);
        }
    }

    /// HBS: strict priority order at every decision, and a class-1 port never waits longer than
    /// N1 batches once ready (Sec. IV-B-2); class j within the formula with the measured k_i.
    #[test]
    fn hbs_serves_highest_class_first_within_the_worst_case_bound(
        classes in prop::collection::vec(1u8..=4, 2..10),
        batch in 1_000u64..8_000,
    ) {
        // Allocations leave the core slightly under-committed so every port is served.
        let n = classes.len() as u64;
        let ports: Vec<(u8, CycleLimit)> = classes.iter()
            .map(|&c| (c, CycleLimit::Strict { cycles_per_sec: HZ * 8 / 10 / n }))
            .collect();
        let mut s = sched_with(RefillMode::Lazy, HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() }, &ports);
        let loads: Vec<PortLoad> = (0..ports.len()).map(|_| busy(batch)).collect();
        let (max_wait, waits) = run_checking_priority(&mut s, &loads, HZ / 50);
        let mut per_class = [0usize; PRIORITY_CLASSES];
        for &c in &classes { per_class[usize::from(c - 1)] += 1; }
        // Granularity of the fake clock when the PMD idles: one 100-tick step.
        let slack = 100;
        for (port, &c) in classes.iter().enumerate() {
            if c == 1 {
                prop_assert!(max_wait[port] <= per_class[0] as u64 * batch + slack,
                    "class-1 port {} waited {} > N1*c = {}", port, max_wait[port], per_class[0] as u64 * batch);
            }
            for (wait, served) in &waits[port] {
                let mut k = [1.0; PRIORITY_CLASSES - 1];
                for (other, &oc) in classes.iter().enumerate() {
                    if oc < c { k[usize::from(oc - 1)] = f64::max(k[usize::from(oc - 1)], served[other] as f64); }
                }
                let bound = worst_case_wait_cycles(&per_class, &k, batch as f64)[usize::from(c - 1)];
                prop_assert!(*wait as f64 <= bound + slack as f64, "class-{} port {} waited {} > bound {}", c, port, wait, bound);
            }
        }
    }

    /// Ports, limits and priorities change at run time: the scheduler never hands out a removed
    /// port, keeps every live port reachable, and keeps its waiting count right.
    #[test]
    fn runtime_changes_keep_the_scheduler_consistent(ops in prop::collection::vec((0u8..6, 0usize..6, 1u8..=8, 0u64..3), 1..200)) {
        let mut s = PortScheduler::new(config(RefillMode::Lazy), HbsConfig::default(), 0);
        let mut live = [false; 6];
        let mut now = 0u64;
        let mut in_service: Option<usize> = None;
        for (op, port, prio, lim) in ops {
            now += 1_000;
            let limit = match lim { 0 => CycleLimit::Unlimited, 1 => CycleLimit::Strict { cycles_per_sec: G / 10 }, _ => CycleLimit::MinMax { cycles_per_sec: G / 10, weight: u32::from(prio) } };
            match op {
                0 => { let ok = s.add_port(port, prio, limit, now).is_ok(); prop_assert_eq!(ok, !live[port]); live[port] = true; }
                1 => { prop_assert_eq!(s.remove_port(port, now), live[port]); live[port] = false; if in_service == Some(port) { in_service = None; } }
                2 => { prop_assert_eq!(s.set_limit(port, limit, now).is_ok(), live[port]); }
                3 => { prop_assert_eq!(s.set_priority(port, prio, now).is_ok(), live[port]); }
                _ => {
                    if let Some(p) = in_service.take() { s.report_batch(p, 20_000, u32::from(lim > 0) * 32, now); }
                    if let Some(p) = s.next_port(now) { prop_assert!(live[p], "removed port {} was served", p); in_service = Some(p); }
                }
            }
            let waiting = (0..6).filter(|&p| s.view(p).map(|v| v.place) == Some(PortPlace::Waiting)).count();
            prop_assert_eq!(waiting, s.waiting_len());
            prop_assert_eq!(s.port_count(), live.iter().filter(|&&l| l).count());
        }
        // Every live port is eventually served once traffic stops: idle ports fall to class 8 by
        // dynamic priority, so a higher class cannot starve a lower one (Sec. IV-B-3).
        if let Some(p) = in_service.take() { s.report_batch(p, 1_000, 0, now); }
        let mut seen = [false; 6];
        for _ in 0..100_000 {
            // When every port waits for tokens, jump ahead (a deficit can be 200 batches deep).
            match s.next_port(now) {
                Some(p) => { seen[p] = true; now += 1_000; s.report_batch(p, 1_000, 0, now); }
                None => now += 10_000_000,
            }
            if (0..6).all(|p| !live[p] || seen[p]) { break; }
        }
        for p in 0..6 { prop_assert!(!live[p] || seen[p], "live port {} never served: {:?}, waiting {}, now {}", p, s.view(p), s.waiting_len(), now); }
    }
}

#[test]
fn a_host_stall_is_made_up_afterwards_not_lost() {
    // A strict port at 0.1 of the core; the host stalls the PMD for 100 ms. Without credit the
    // bucket caps at its depth (100 us of the core) and the port loses 100 ms of its allocation;
    // with the stall credited it may spend all of it once the PMD runs again.
    let rate = HZ / 10;
    let stall = HZ / 10;
    for credit in [false, true] {
        let mut b = CycleBuckets::new(config(RefillMode::Lazy), 0);
        b.set_limit(0, CycleLimit::Strict { cycles_per_sec: rate }, 0);
        b.charge(0, b.tokens(0).unwrap() as u64, true);
        if credit {
            b.credit_stall(stall);
        }
        b.refill(0, stall);
        let earned = rate as f64 * stall as f64 / HZ as f64;
        let tokens = b.tokens(0).unwrap();
        if credit {
            assert!((tokens - earned).abs() < 1.0, "{tokens} vs {earned}");
            // Spent down to the depth, the credit is gone: the next pause caps as usual.
            b.charge(0, (earned * 0.99) as u64, true);
            b.refill(0, 2 * stall);
            assert!(b.tokens(0).unwrap() <= (HZ / 10_000) as f64 + 1.0);
        } else {
            assert!(tokens <= (HZ / 10_000) as f64 + 1.0, "{tokens}");
        }
    }
}

#[test]
fn a_demoted_port_is_still_probed_behind_backlogged_lower_classes() {
    // Fig. 12's shape: a quiet class-1 web port sinks with its empty polls below two
    // backlogged class-4 bulk ports, which stay ready forever. It must still be polled every
    // `demoted_probe_us`, or its next request waits until the bulk ports run dry.
    let batch = HZ / 100_000; // 10 us per bulk batch
    for probe_us in [0, 100] {
        let hbs = HbsConfig { demoted_probe_us: probe_us, ..HbsConfig::default() };
        let mut s = sched_with(
            RefillMode::Lazy,
            hbs,
            &[(1, CycleLimit::Unlimited), (4, CycleLimit::Unlimited), (4, CycleLimit::Unlimited)],
        );
        let (mut t, mut last_web_poll, mut worst_gap) = (0u64, 0u64, 0u64);
        while t < HZ / 10 {
            let port = s.next_port(t).unwrap();
            let (cycles, packets) = if port == 0 { (200, 0) } else { (batch, 32) };
            if port == 0 {
                worst_gap = worst_gap.max(t - last_web_poll);
                last_web_poll = t;
            }
            t += cycles;
            s.report_batch(port, cycles, packets, t);
        }
        worst_gap = worst_gap.max(t - last_web_poll);
        let probe_ticks = u64::from(probe_us) * HZ / 1_000_000;
        if probe_us == 0 {
            assert!(worst_gap > HZ / 20, "without the probe the demoted port starves: gap {worst_gap}");
        } else {
            // Looked for every quarter interval: due, a port waits at most that and a batch more.
            assert!(worst_gap <= probe_ticks * 5 / 4 + 2 * batch, "gap {worst_gap} ticks, probe {probe_ticks}");
            assert!(s.view(0).unwrap().current_priority > 4, "the quiet port was demoted");
        }
    }
}

#[test]
fn a_light_class_1_port_is_polled_after_every_busy_batch() {
    // Fig. 11(c)'s shape: a class-1 VM sends one frame every 29 us while four class-2 ports are
    // backlogged with 24 us batches. An empty poll must not make the light port spin (and sink
    // through every class within a microsecond): it rests until a busy batch has run, so each
    // frame waits at most about one busy batch.
    let us = HZ / 1_000_000;
    let (gap, batch) = (29 * us, 24 * us);
    let ports = [
        (1, CycleLimit::Unlimited),
        (2, CycleLimit::Unlimited),
        (2, CycleLimit::Unlimited),
        (2, CycleLimit::Unlimited),
        (2, CycleLimit::Unlimited),
    ];
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
    let (mut t, mut next_arrival, mut pending) = (0u64, 0u64, Vec::new());
    let (mut waits, mut busy_cycles) = (Vec::new(), 0u64);
    while t < HZ / 10 {
        while next_arrival <= t {
            pending.push(next_arrival);
            next_arrival += gap;
        }
        let port = s.next_port(t).unwrap();
        let (cycles, packets) = if port == 0 {
            waits.extend(pending.iter().map(|&a| t - a));
            let n = pending.len() as u32;
            pending.clear();
            (if n == 0 { EMPTY_POLL_CYCLES } else { 2_000 * u64::from(n) }, n)
        } else {
            busy_cycles += batch;
            (batch, 32)
        };
        t += cycles;
        s.report_batch(port, cycles, packets, t);
    }
    waits.sort_unstable();
    let (p50, max) = (waits[waits.len() / 2], *waits.last().unwrap());
    assert!(waits.len() > 3000, "{} frames served", waits.len());
    assert!(max <= batch + 3 * us, "a frame waited {} us (a busy batch is 24 us)", max / us);
    assert!(p50 <= batch / 2 + 2 * us, "median wait {} us", p50 / us);
    // The busy ports lose only the light port's own polls and frames.
    assert!(
        busy_cycles as f64 >= 0.9 * (HZ / 10) as f64,
        "busy ports got {:.1}% of the core",
        100.0 * busy_cycles as f64 / (HZ / 10) as f64
    );
}

#[test]
fn an_idle_port_rests_until_another_port_has_run_packets() {
    let mut s = sched_with(
        RefillMode::Lazy,
        HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() },
        &[(1, CycleLimit::Unlimited), (2, CycleLimit::Unlimited)],
    );
    let run = run_pmd(&mut s, &[idle(), busy(10_000)], 0, 200_000, 8);
    // Class 1 first, then, having found nothing, it waits for the class-2 batch each time.
    assert_eq!(run.order, vec![0, 1, 0, 1, 0, 1, 0, 1]);
    assert_eq!(s.view(0).unwrap().current_priority, 1, "dynamic priority off: no demotion");
    // Both idle: they are polled in turn, not one of them in a loop.
    let mut s = sched_with(
        RefillMode::Lazy,
        HbsConfig { idle_polls_per_step: 0, ..HbsConfig::default() },
        &[(1, CycleLimit::Unlimited), (2, CycleLimit::Unlimited)],
    );
    let run = run_pmd(&mut s, &[idle(), idle()], 0, 100_000, 6);
    assert_eq!(run.order, vec![0, 1, 0, 1, 0, 1]);
}

#[test]
fn a_port_owing_tokens_never_runs_before_its_own_rate_has_paid_the_debt() {
    // Strict ports whose batches cost more than their share between two turns: each one owes
    // tokens after most batches and waits in its ready queue with a due time, or parked.
    let shares = [(HZ / 10, 9_000u64), (HZ / 5, 25_000), (HZ / 4, 4_000), (HZ / 8, 40_000)];
    let ports: Vec<(u8, CycleLimit)> =
        shares.iter().map(|&(rate, _)| (8, CycleLimit::Strict { cycles_per_sec: rate })).collect();
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
    // Per port: its tokens and the time when its last batch ended.
    let mut after_report: Vec<Option<(f64, u64)>> = vec![None; ports.len()];
    let (mut now, mut served, mut waited) = (0u64, 0u64, 0u64);
    while now < HZ / 20 {
        let Some(port) = s.next_port(now) else {
            now += 100;
            continue;
        };
        if let Some((tokens, at)) = after_report[port] {
            let earned = (now - at) as f64 * shares[port].0 as f64 / HZ as f64;
            assert!(tokens + earned > -1e-6, "port {port} ran owing {:.0} cycles", -(tokens + earned));
            waited += u64::from(tokens <= 0.0);
        }
        served += 1;
        now += shares[port].1;
        s.report_batch(port, shares[port].1, 32, now);
        after_report[port] = Some((s.view(port).unwrap().tokens.unwrap(), now));
        assert_eq!(s.view(port).unwrap().place == PortPlace::Waiting, s.view(port).unwrap().tokens.unwrap() <= 0.0);
    }
    assert!(waited > served / 4, "the shape makes ports owe tokens: {waited} of {served} batches");
}

#[test]
fn ports_hovering_at_zero_tokens_mostly_keep_their_turn_instead_of_being_parked() {
    // The overhead benchmark's shape: MIN-MAX allocations adding up to the core, every port
    // backlogged, batch costs varying around the same mean, buckets two batches deep. Each
    // port's balance wanders around zero, so it often owes tokens after its batch. Mostly its
    // rate has paid them back by the time its turn comes round again: it keeps its place and
    // is not parked in the waiting queue (which the paper's queues would do after every one).
    let n = 28u64;
    let batch = 17_600u64;
    let ports: Vec<(u8, CycleLimit)> =
        (0..n).map(|_| (8, CycleLimit::MinMax { cycles_per_sec: HZ / n, weight: 1 })).collect();
    let c2tb = C2tbConfig { bucket_depth_cycles: 2 * batch, ..config(RefillMode::Lazy) };
    let mut s = PortScheduler::new(c2tb, HbsConfig::default(), 0);
    for (i, &(prio, limit)) in ports.iter().enumerate() {
        s.add_port(i, prio, limit, 0).unwrap();
    }
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let (mut now, mut batches, mut owed, mut served_by_port) = (0u64, 0u64, 0u64, vec![0u64; n as usize]);
    while now < HZ / 10 {
        let Some(port) = s.next_port(now) else {
            now += 100;
            continue;
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let cycles = batch / 2 + rng % batch;
        now += cycles;
        s.report_batch(port, cycles, 32, now);
        batches += 1;
        served_by_port[port] += 1;
        owed += u64::from(s.view(port).unwrap().place == PortPlace::Waiting);
    }
    let counts = s.wait_counts();
    assert_eq!(counts.owed, owed, "the counter counts what the views show");
    assert!(owed > batches / 5, "ports owed tokens after {owed} of {batches} batches: the shape is not tested");
    assert!(counts.parked * 3 < owed, "{} of {owed} owing ports were parked", counts.parked);
    // And the core is still shared evenly.
    let (least, most) = (served_by_port.iter().min().unwrap(), served_by_port.iter().max().unwrap());
    assert!(*least as f64 >= 0.9 * *most as f64, "batches per port from {least} to {most}");
}

#[test]
fn a_port_not_yet_due_at_the_head_goes_round_once_before_it_is_parked() {
    // Two strict ports at half the core each. Port 0 overspends its bucket by 2000 cycles:
    // its rate pays that back 4000 ticks later, so it keeps its place with a due time.
    let ports = [(8, CycleLimit::Strict { cycles_per_sec: HZ / 2 }); 2];
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
    let depth = C2tbConfig::one_core(HZ).bucket_depth_cycles;
    assert_eq!(s.next_port(0), Some(0));
    s.report_batch(0, depth + 2_000, 32, 0);
    let port0 = |s: &PortScheduler| s.view(0).unwrap();
    assert_eq!(port0(&s).place, PortPlace::Waiting, "it owes tokens");
    // Port 1 runs, and goes back behind port 0.
    assert_eq!(s.next_port(0), Some(1));
    s.report_batch(1, 100, 32, 100);
    // Port 0 heads the queue 100 ticks on, not due: it goes to the back instead of the
    // waiting queue, and port 1 runs.
    assert_eq!(s.next_port(100), Some(1));
    assert_eq!(s.parked_len(), 0, "not parked on its first early turn");
    assert_eq!(port0(&s).place, PortPlace::Waiting, "still waiting for tokens, in its queue");
    s.report_batch(1, 100, 32, 200);
    // At its second early turn it is parked, and port 1 runs again.
    assert_eq!(s.next_port(200), Some(1));
    assert_eq!(s.parked_len(), 1, "parked on its second early turn");
    assert_eq!(s.wait_counts().parked, 1);
    s.report_batch(1, 100, 32, 300);
    // Once its debt is paid (and the waiting queue's slot is past) it runs again.
    let mut now = 300;
    loop {
        let p = s.next_port(now).unwrap();
        if p == 0 {
            assert!(now >= 4_000, "port 0 ran at {now}, before its rate paid its debt");
            break;
        }
        now += 500;
        s.report_batch(p, 100, 32, now);
        assert!(now < 40_000, "port 0 never came back");
    }
}

#[test]
fn an_overbooked_class_parks_each_owing_port_after_one_turn_round_the_queue() {
    // Eight strict ports at a twentieth of the core each, all owing after one batch of a
    // whole bucket and a bit: every one is early at the head. Each goes round once, then is
    // parked; nothing runs until the first is due, and no decision loops.
    let ports = [(8, CycleLimit::Strict { cycles_per_sec: HZ / 20 }); 8];
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
    let depth = C2tbConfig::one_core(HZ).bucket_depth_cycles;
    let mut now = 0;
    for _ in 0..8 {
        let p = s.next_port(now).unwrap();
        now += 10;
        s.report_batch(p, depth + 1_000, 32, now);
    }
    assert_eq!(s.next_port(now), None, "every port owes tokens");
    assert_eq!(s.parked_len(), 8);
    assert_eq!(s.wait_counts().parked, 8);
}

#[test]
fn a_resting_port_comes_back_in_the_class_set_while_it_rested() {
    // Port 0 (class 2) finds nothing and rests; its class is set to 6 meanwhile. When port 1
    // (class 4) has run a batch with packets, port 0 must come back behind it, in class 6.
    let ports =
        [(2, CycleLimit::Strict { cycles_per_sec: HZ / 4 }), (4, CycleLimit::Strict { cycles_per_sec: HZ / 4 })];
    let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &ports);
    let mut now = 0;
    assert_eq!(s.next_port(now), Some(0), "class 2 goes first");
    now += 100;
    s.report_batch(0, 100, 0, now);
    assert_eq!(s.view(0).unwrap().place, PortPlace::Resting);
    s.set_priority(0, 6, now).unwrap();
    assert_eq!(s.next_port(now), Some(1), "the resting port waits for a batch with packets");
    now += 1_000;
    s.report_batch(1, 1_000, 32, now);
    assert_eq!(s.view(0).unwrap().place, PortPlace::Ready { class: 6 });
    assert_eq!(s.next_port(now), Some(1), "back in class 6, behind the class-4 port");
}

#[test]
fn skipped_refills_hold_a_strict_port_to_its_rate_plus_an_eighth_of_its_depth() {
    // One strict port at a tenth of the core, alone on the PMD. It first sleeps (empty polls)
    // for 50 ms, so its bucket sits full, then sends cheap full batches back to back. Refills
    // that find the bucket positive are skipped for a while (`CyclePool::refill_after_batch`),
    // so the bucket is capped less often: from the moment it wakes, what it spends must stay
    // within its rate plus 1.125 depths (one depth and the skipped window's eighth).
    let rate = HZ / 10;
    let depth = HZ / 10_000;
    for batch in [700u64, 3_000, 20_000] {
        let mut s =
            sched_with(RefillMode::Lazy, HbsConfig::default(), &[(8, CycleLimit::Strict { cycles_per_sec: rate })]);
        let mut now = 0u64;
        while now < HZ / 20 {
            let port = s.next_port(now).expect("a sleeping port is polled");
            now += 200;
            s.report_batch(port, 200, 0, now);
        }
        let woke = now;
        let (mut spent, mut worst_excess) = (0u64, f64::MIN);
        while now < woke + HZ / 10 {
            match s.next_port(now) {
                Some(port) => {
                    now += batch;
                    spent += batch;
                    s.report_batch(port, batch, 32, now);
                }
                None => now += 50,
            }
            let allowed = rate as f64 * (now - woke) as f64 / HZ as f64;
            worst_excess = worst_excess.max(spent as f64 - allowed);
        }
        assert!(
            worst_excess <= 1.125 * depth as f64 + batch as f64,
            "batch {batch}: spent {worst_excess:.0} cycles above its rate (depth {depth})"
        );
        let allowed = rate as f64 * (now - woke) as f64 / HZ as f64;
        assert!(spent as f64 >= allowed - batch as f64, "batch {batch}: spent {spent} of {allowed:.0}");
    }
}

/// A turn ([`PortScheduler::end_batch`]): 3 us at 2.2 GHz is 6600 cycles.
mod turns {
    use super::*;

    const TURN: u64 = 6_600;

    #[test]
    fn cheap_full_batches_share_a_turn_until_it_has_taken_its_time_then_it_is_charged_whole() {
        let mut s = sched_with(
            RefillMode::Lazy,
            HbsConfig::default(),
            &[(4, CycleLimit::Strict { cycles_per_sec: HZ / 2 }), (4, CycleLimit::Unlimited)],
        );
        let port = s.next_port(0).unwrap();
        assert_eq!(port, 0);
        let tokens = s.view(0).unwrap().tokens.unwrap();
        // 2000-cycle batches: after 3 the turn has taken 6000 cycles, after 4 more than a turn.
        let mut now = 0;
        for batch in 1..=4 {
            now += 2_000;
            let goes_on = s.end_batch(0, 2_000, 32, now, true);
            assert_eq!(goes_on, batch < 4, "batch {batch}");
            assert_eq!(
                s.view(0).unwrap().place,
                if batch < 4 { PortPlace::InService } else { PortPlace::Ready { class: 4 } },
                "batch {batch}"
            );
        }
        // Charged the four batches at once (the refill waits: right after one, a positive
        // bucket is not refilled).
        assert_within(s.view(0).unwrap().tokens.unwrap(), tokens - 8_000.0, 1e-9, "tokens after the turn");
        assert_eq!(s.next_port(now), Some(1), "the other port's turn comes next");
        const { assert!(TURN > 6_000 && TURN < 8_000) };
    }

    #[test]
    fn a_partial_batch_a_higher_class_a_bucket_that_does_not_cover_the_turn_or_the_pass_end_it() {
        // A partial batch: the port is not backlogged.
        let mut s = sched_with(
            RefillMode::Lazy,
            HbsConfig::default(),
            &[(4, CycleLimit::Unlimited), (4, CycleLimit::Unlimited)],
        );
        assert_eq!(s.next_port(0), Some(0));
        assert!(!s.end_batch(0, 1_000, 31, 1_000, true));
        // The PMD's pass ends.
        assert_eq!(s.next_port(1_000), Some(1));
        assert!(!s.end_batch(1, 1_000, 32, 2_000, false));

        // A higher class is ready: port 1 (class 2) waits behind port 0 (class 4) only one batch.
        let mut s = sched_with(
            RefillMode::Lazy,
            HbsConfig::default(),
            &[(4, CycleLimit::Unlimited), (2, CycleLimit::Unlimited)],
        );
        assert_eq!(s.next_port(0), Some(1));
        assert!(s.end_batch(1, 1_000, 32, 1_000, true), "nothing above class 2");
        assert!(!s.end_batch(1, 1_000, 32, 2_000, false));
        assert_eq!(s.next_port(2_000), Some(1), "class 2 first again");
        // Its poll finds nothing: it rests, and class 4 runs.
        assert!(!s.end_batch(1, 0, 0, 2_100, true));
        assert_eq!(s.next_port(2_100), Some(0));
        // Class 2 is configured above it (here resting): class 4's turn stops.
        assert!(!s.end_batch(0, 1_000, 32, 3_100, true), "a class-2 port exists");
        assert_eq!(s.next_port(3_100), Some(1));
        // Port 1's poll finds nothing again.
        assert!(!s.end_batch(1, 0, 0, 3_200, true));
        assert_eq!(s.next_port(3_200), Some(0));
        assert!(!s.end_batch(0, 1_000, 32, 4_200, true), "port 1, class 2, rests again");

        // A port of a higher class becomes ready during a turn (added at run time).
        let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &[(4, CycleLimit::Unlimited)]);
        assert_eq!(s.next_port(0), Some(0));
        assert!(s.end_batch(0, 1_000, 32, 1_000, true));
        s.add_port(1, 3, CycleLimit::Unlimited, 1_000).unwrap();
        assert!(!s.end_batch(0, 1_000, 32, 2_000, true), "a class-3 port is ready");
        assert_eq!(s.next_port(2_000), Some(1));

        // Tokens that do not cover the turn so far: a strict port with 1500 cycles of depth.
        let c2tb = C2tbConfig { bucket_depth_cycles: 1_500, ..C2tbConfig::one_core(HZ) };
        let mut s = PortScheduler::new(c2tb, HbsConfig::default(), 0);
        s.add_port(0, 4, CycleLimit::Strict { cycles_per_sec: HZ / 100 }, 0).unwrap();
        assert_eq!(s.next_port(0), Some(0));
        assert!(s.end_batch(0, 1_000, 32, 1_000, true), "1000 of 1500 cycles");
        assert!(!s.end_batch(0, 1_000, 32, 2_000, true), "2000 cycles are more than the bucket held");
        assert!(s.view(0).unwrap().tokens.unwrap() < 0.0, "charged the whole turn: it owes");
    }

    #[test]
    fn only_the_top_configured_class_takes_turns() {
        // Port 1, class 1, owes tokens and waits: nothing of class 1 is ready or resting, yet
        // class 4 keeps a decision per batch.
        let c2tb = C2tbConfig { bucket_depth_cycles: 1_000, ..C2tbConfig::one_core(HZ) };
        let mut s = PortScheduler::new(c2tb, HbsConfig::default(), 0);
        s.add_port(0, 4, CycleLimit::Unlimited, 0).unwrap();
        s.add_port(1, 1, CycleLimit::Strict { cycles_per_sec: HZ / 1000 }, 0).unwrap();
        assert_eq!(s.next_port(0), Some(1));
        assert!(!s.end_batch(1, 50_000, 32, 50_000, true), "it ran out of tokens");
        assert_eq!(s.next_port(50_000), Some(0));
        assert_eq!(s.view(1).unwrap().place, PortPlace::Waiting);
        assert!(!s.end_batch(0, 1_000, 32, 51_000, true), "class 4 is below the configured class 1");
        // Without the class-1 port, class 4 is the top class and takes turns.
        assert!(s.remove_port(1, 51_000));
        assert_eq!(s.next_port(51_000), Some(0));
        assert!(s.end_batch(0, 1_000, 32, 52_000, true));
    }

    #[test]
    fn a_demoted_port_due_for_its_probe_cuts_a_turn_short() {
        // Three ports of one class: port 0 is quiet, so its empty polls demote it; ports 1 and
        // 2 are backlogged with 1000-cycle batches and take turns of TURN. The quiet port's
        // probe, every microsecond, must end the turn under way at its next batch.
        let hbs = HbsConfig { demoted_probe_us: 1, ..HbsConfig::default() };
        let mut s = sched_with(RefillMode::Lazy, hbs, &[(4, CycleLimit::Unlimited); 3]);
        let probe_ticks = HZ / 1_000_000;
        let (mut t, mut last_quiet_poll, mut worst_gap, mut turn_batches) = (0u64, 0u64, 0u64, 0u64);
        while t < HZ / 1_000 {
            let port = s.next_port(t).unwrap();
            if port == 0 {
                if s.view(0).unwrap().current_priority > 4 {
                    worst_gap = worst_gap.max(t - last_quiet_poll);
                }
                last_quiet_poll = t;
                t += 200;
                assert!(!s.end_batch(0, 200, 0, t, true), "an empty poll ends a turn");
                continue;
            }
            loop {
                t += 1_000;
                if !s.end_batch(port, 1_000, 32, t, true) {
                    break;
                }
                turn_batches += 1;
            }
        }
        assert!(s.view(0).unwrap().current_priority > 4, "the quiet port was demoted");
        assert!(turn_batches > 0, "the busy ports took turns");
        // Looked for every quarter interval: due, the port waits at most that and the batch
        // under way, where a turn left to run would have made it wait up to TURN more.
        assert!(worst_gap <= probe_ticks * 5 / 4 + 2 * 1_000, "gap {worst_gap} ticks, probe {probe_ticks}");
        const { assert!(TURN > 2 * 1_000 + HZ / 4_000_000) };
    }

    #[test]
    fn turns_off_is_one_batch_per_decision() {
        let mut s = sched_with(
            RefillMode::Lazy,
            HbsConfig { turn_ns: 0, ..HbsConfig::default() },
            &[(4, CycleLimit::Unlimited)],
        );
        assert_eq!(s.next_port(0), Some(0));
        assert!(!s.end_batch(0, 100, 32, 100, true));
    }
}

#[test]
fn setting_many_limits_at_once_is_setting_them_one_by_one() {
    let ports = fig7_ports();
    let (mut one_by_one, mut at_once) = (
        sched_with(RefillMode::Lazy, HbsConfig::default(), &ports),
        sched_with(RefillMode::Lazy, HbsConfig::default(), &ports),
    );
    let changes: Vec<(usize, CycleLimit, Option<u64>)> = vec![
        (0, CycleLimit::MinMax { cycles_per_sec: 3 * G / 10, weight: 1 }, Some(400_000)),
        (2, CycleLimit::Strict { cycles_per_sec: G / 10 }, None),
        (9, CycleLimit::Strict { cycles_per_sec: G / 10 }, None),
    ];
    for &(port, limit, depth) in &changes {
        let _ = one_by_one.set_limit(port, limit, 0);
        one_by_one.set_bucket_depth(port, depth, 0);
    }
    at_once.set_limits(&changes, 0);
    for port in 0..4 {
        assert_eq!(one_by_one.rates_cycles_per_sec(port), at_once.rates_cycles_per_sec(port), "port {port}");
        let (a, b) = (one_by_one.view(port).unwrap(), at_once.view(port).unwrap());
        assert_eq!((a.limit, a.tokens, a.place), (b.limit, b.tokens, b.place), "port {port}");
    }
    assert!(!at_once.contains(9));
}

/// Backlogged ports in classes 2 and 4 on a PMD that spends a third of its time on work no port
/// is charged for (empty polls, decisions): C2TB hands out the whole core in tokens, so the
/// ports together get less than their maxima. The class above borrows idle cycles only after
/// the class below has had its allocation (`Bucket::beyond_allocation`); without the tiers it
/// took its whole maximum first and left the class-4 port almost nothing.
#[test]
fn a_lower_class_keeps_its_allocation_beside_higher_classes_that_borrow() {
    for refill in [RefillMode::Lazy, PERIODIC_50US] {
        let high = CycleLimit::MinMax { cycles_per_sec: G / 5, weight: 1 };
        let low = CycleLimit::MinMax { cycles_per_sec: 3 * G / 10, weight: 1 };
        let mut s = sched_with(refill, HbsConfig::default(), &[(2, high), (2, high), (2, high), (4, low)]);
        let (batch_cycles, uncharged_cycles) = (6_400, 3_200);
        let duration = HZ / 2;
        let mut got = [0u64; 4];
        let mut now = 0;
        while now < duration {
            match s.next_port(now) {
                None => now += 100,
                Some(port) => {
                    now += batch_cycles + uncharged_cycles;
                    s.report_batch(port, batch_cycles, 32, now);
                    got[port] += batch_cycles;
                }
            }
        }
        let secs = duration as f64 / HZ as f64;
        let low_rate = got[3] as f64 / secs;
        assert!(
            low_rate >= 0.97 * (3 * G / 10) as f64,
            "{refill:?}: class 4 got {low_rate} cycles/s of {}",
            3 * G / 10
        );
        for (port, &cycles) in got.iter().enumerate().take(3) {
            let rate = cycles as f64 / secs;
            assert!(rate >= 0.97 * (G / 5) as f64, "{refill:?}: class-2 port {port} got {rate} cycles/s");
        }
    }
}

/// A paced link sends a strict port's frames after the batches that queued them, and the PMD
/// charges the port those sends (`PortScheduler::charge_outside_batch`): its batches and its
/// sends together stay within its allocation, so it gets that much less core for batches. A
/// port the scheduler does not have is charged nothing (and nothing breaks).
#[test]
fn cycles_charged_outside_batches_come_out_of_the_ports_allocation() {
    let strict = CycleLimit::Strict { cycles_per_sec: G / 5 };
    let (batch_cycles, send_cycles) = (6_400, 1_600);
    let duration = HZ / 2;
    let secs = duration as f64 / HZ as f64;
    for charged in [false, true] {
        let mut s = sched_with(RefillMode::Lazy, HbsConfig::default(), &[(4, strict)]);
        let (mut batches, mut sent) = (0u64, 0u64);
        let mut now = 0;
        while now < duration {
            match s.next_port(now) {
                None => now += 100,
                Some(port) => {
                    now += batch_cycles;
                    s.report_batch(port, batch_cycles, 32, now);
                    batches += batch_cycles;
                    if charged {
                        s.charge_outside_batch(port, send_cycles);
                        sent += send_cycles;
                    }
                    s.charge_outside_batch(7, send_cycles);
                }
            }
        }
        let rate = (batches + sent) as f64 / secs;
        assert_within(rate, (G / 5) as f64, 0.03, &format!("charged outside batches: {charged}"));
    }
}
