//! The purchase ledger keeps a promise the cycle allocation alone cannot: a port whose packets
//! cost more than its allocation was priced at, for stretches a drift window cannot follow (a
//! neighbour thrashing the caches), still gets every byte it bought in every second, steady
//! or bursty, on a saturated PMD and an idle one; and a port that sends more than it bought,
//! or costlier packets than its profile, is still held to its purchase. Fake time, many seeds.

mod common;

use common::Rng;
use slaswitch_qos::cpu::{
    C2tbConfig, CycleLimit, HbsConfig, LedgerWindow, PortScheduler, PromiseConfig, PurchaseLedger,
};

/// 1 GHz: a tick is a nanosecond.
const HZ: u64 = 1_000_000_000;
/// What a packet of the promised port was priced at, and its allocation: 60% of the core.
const PRICED_CYCLES: u64 = 3_000;
const ALLOC_CYCLES_PER_SEC: u64 = 600_000_000;
const PACKETS_PER_SEC: u64 = ALLOC_CYCLES_PER_SEC / PRICED_CYCLES;
const FRAME_BYTES: u64 = 1_000;
const PURCHASE_BPS: u64 = PACKETS_PER_SEC * FRAME_BYTES * 8;
/// Dearer stretches: the packets cost this much more than priced, for 20 to 300 ms at a time.
const DEARER_PCT: u64 = 15;
const RING: u64 = 1_024;
const BATCH: u64 = 32;
const EMPTY_POLL_CYCLES: u64 = 100;
const FLOOD_COST_CYCLES: u64 = 200;
/// The data plane's ledger window.
const LEDGER_WINDOW_NS: u64 = 5_000_000;
const SECONDS: u64 = 4;

/// How the promised port's VM sends.
#[derive(Clone, Copy, Debug)]
enum Arrivals {
    /// Evenly, at `pct` percent of its purchase.
    Steady { pct: u64 },
    /// On for 0.25-1 ms at four times its purchase, then off three times as long: exactly its
    /// purchase over each cycle, in bursts its ring holds.
    Bursty,
}

/// The VM: frames arrive into its ring; what the ring cannot hold is lost.
struct Vm {
    arrivals: Arrivals,
    rng: Rng,
    next_ns: u64,
    left_in_burst: u64,
    queued: u64,
}

impl Vm {
    fn arrive(&mut self, now_ns: u64) {
        while self.next_ns <= now_ns {
            let spacing = match self.arrivals {
                Arrivals::Steady { pct } => 100 * HZ / (pct * PACKETS_PER_SEC),
                Arrivals::Bursty => {
                    if self.left_in_burst == 0 {
                        let on_ns = self.rng.between(250_000, 1_000_000);
                        self.left_in_burst = on_ns * 4 * PACKETS_PER_SEC / HZ;
                        self.next_ns += 3 * on_ns;
                        continue;
                    }
                    self.left_in_burst -= 1;
                    HZ / (4 * PACKETS_PER_SEC)
                }
            };
            self.queued = (self.queued + 1).min(RING);
            self.next_ns += spacing;
        }
    }
}

/// The promised port's packets cost [`PRICED_CYCLES`], or [`DEARER_PCT`] more in stretches of
/// 20 to 300 ms, about half the time.
struct Cost {
    rng: Rng,
    until_ns: u64,
    dearer: bool,
}

impl Cost {
    fn at(&mut self, now_ns: u64) -> u64 {
        while now_ns >= self.until_ns {
            self.dearer = !self.dearer;
            self.until_ns += self.rng.between(20_000_000, 300_000_000);
        }
        if self.dearer {
            PRICED_CYCLES * (100 + DEARER_PCT) / 100
        } else {
            PRICED_CYCLES
        }
    }
}

/// What one run is made of.
#[derive(Clone, Copy, Debug)]
struct Run {
    seed: u64,
    arrivals: Arrivals,
    saturated: bool,
    ledger: bool,
    /// The port's traffic costs more per byte than its profile (the ledger is told so).
    beyond_profile: bool,
}

/// Runs the PMD for [`SECONDS`] and returns, per second, the promised port's bytes forwarded
/// against its purchase (1.0: all of it).
fn served_per_second(run: Run) -> Vec<f64> {
    let strict = CycleLimit::Strict { cycles_per_sec: ALLOC_CYCLES_PER_SEC };
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    s.add_port(0, 8, strict, 0).unwrap();
    s.set_bucket_depth(0, Some(RING * PRICED_CYCLES), 0);
    if run.saturated {
        s.add_port(1, 8, CycleLimit::MinMax { cycles_per_sec: 250_000_000, weight: 1 }, 0).unwrap();
    }
    let mut vm = Vm { arrivals: run.arrivals, rng: Rng::new(run.seed), next_ns: 0, left_in_burst: 0, queued: 0 };
    let mut cost = Cost { rng: Rng::new(run.seed + 1000), until_ns: 0, dearer: true };
    let mut ledger = PurchaseLedger::new(PURCHASE_BPS, true, PromiseConfig::default());
    let mut window = LedgerWindow { within_profile: !run.beyond_profile, ..Default::default() };
    let (mut window_end, mut waits_before, mut raised) = (LEDGER_WINDOW_NS, 0, 1.0);
    let mut served = vec![0u64; SECONDS as usize];
    let mut now = 0u64;
    while now < SECONDS * HZ {
        if run.ledger && now >= window_end {
            let waits = s.view(0).unwrap().waits;
            window.secs = (now - window_end + LEDGER_WINDOW_NS) as f64 / HZ as f64;
            window.waited = waits > waits_before;
            let raise = ledger.observe(&window);
            if raise != raised {
                raised = raise;
                let cycles_per_sec = (ALLOC_CYCLES_PER_SEC as f64 * raise) as u64;
                s.set_limit(0, CycleLimit::Strict { cycles_per_sec }, now).unwrap();
            }
            window = LedgerWindow { within_profile: !run.beyond_profile, ..Default::default() };
            (window_end, waits_before) = (now + LEDGER_WINDOW_NS, waits);
        }
        vm.arrive(now);
        let Some(port) = s.next_port(now) else {
            now += EMPTY_POLL_CYCLES;
            continue;
        };
        let (packets, cycles) = match port {
            0 => {
                let n = vm.queued.min(BATCH);
                vm.queued -= n;
                served[(now / HZ) as usize] += n;
                window.packets += n;
                window.batches += u64::from(n > 0);
                window.bytes += n * FRAME_BYTES;
                (n, if n == 0 { EMPTY_POLL_CYCLES } else { n * cost.at(now) })
            }
            _ => (BATCH, BATCH * FLOOD_COST_CYCLES),
        };
        now += cycles;
        s.end_batch(port, cycles, packets as u32, now, false);
    }
    served.iter().map(|&n| n as f64 / PACKETS_PER_SEC as f64).collect()
}

const EXACT: [Arrivals; 2] = [Arrivals::Steady { pct: 100 }, Arrivals::Bursty];

#[test]
fn a_port_sending_its_purchase_gets_it_every_second_through_dearer_stretches() {
    for arrivals in EXACT {
        for saturated in [true, false] {
            for seed in 1..=10 {
                let run = Run { seed, arrivals, saturated, ledger: true, beyond_profile: false };
                let got = served_per_second(run);
                for (second, share) in got.iter().enumerate().skip(1) {
                    assert!(*share >= 0.99, "{run:?}: second {second} served {share:.4} of the purchase ({got:?})");
                }
            }
        }
    }
}

#[test]
fn without_the_ledger_the_dearer_stretches_cost_the_port_part_of_its_purchase() {
    // The same runs with the allocation alone: some second falls more than 1% short.
    for arrivals in EXACT {
        let worst = (1..=10)
            .flat_map(|seed| {
                served_per_second(Run { seed, arrivals, saturated: true, ledger: false, beyond_profile: false })
                    .into_iter()
                    .skip(1)
            })
            .fold(f64::MAX, f64::min);
        assert!(worst < 0.97, "{arrivals:?}: the worst second served {worst:.4} without the ledger");
    }
}

#[test]
fn a_port_sending_more_than_its_purchase_is_held_to_it() {
    // Twice its purchase, beside the flood: the ledger owes it nothing once it forwards its
    // purchase, so dearer stretches cost it (it gets what its cycles buy), never more.
    for seed in 1..=5 {
        let got = served_per_second(Run {
            seed,
            arrivals: Arrivals::Steady { pct: 200 },
            saturated: true,
            ledger: true,
            beyond_profile: false,
        });
        for (second, share) in got.iter().enumerate().skip(1) {
            assert!(*share <= 1.01, "seed {seed}: second {second} served {share:.4} of the purchase");
        }
    }
}

#[test]
fn a_port_beyond_its_profile_is_owed_nothing() {
    // Its traffic costs more per byte than it bought: held to its cycles, as without a ledger.
    for seed in 1..=5 {
        let run =
            Run { seed, arrivals: Arrivals::Steady { pct: 100 }, saturated: true, ledger: true, beyond_profile: true };
        let without = served_per_second(Run { ledger: false, ..run });
        assert_eq!(served_per_second(run), without, "seed {seed}");
    }
}
