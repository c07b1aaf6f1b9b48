//! Cost per decision (goals: C2TB+HBS under 20 ns per batch decision, every egress
//! scheduler under 30 ns per packet at 256 queues, neither growing with the count).
//!
//! Run: `cargo bench -p slaswitch-qos --bench decisions`. Time is faked (advanced per decision
//! as a saturated PMD or link would), so the numbers are the schedulers' own cost.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use slaswitch_qos::cpu::{C2tbConfig, CycleLimit, HbsConfig, PortScheduler};
use slaswitch_qos::egress::ancs::{Ancs, AncsConfig, AncsPolicy};
use slaswitch_qos::egress::fifo::Fifo;
use slaswitch_qos::egress::link_scheduler::{LinkPlan, LinkScheduler, LinkSettings, SchedulerKind, VmLinkPolicy};
use slaswitch_qos::egress::pievde::PieVde;
use slaswitch_qos::egress::ratelimit::{RateLimit, RateLimitConfig};
use slaswitch_qos::egress::softbw::{Guarantee, SoftBw, SoftBwConfig};
use slaswitch_qos::egress::EgressScheduler;

const HZ: u64 = 2_200_000_000;
const COUNTS: [usize; 4] = [4, 28, 64, 256];
const LINK_BPS: u64 = 10_000_000_000;

fn c2tb_hbs(c: &mut Criterion) {
    let mut group = c.benchmark_group("c2tb_hbs_per_batch");
    group.throughput(Throughput::Elements(1));
    for &ports in &COUNTS {
        // MIN-MAX ports over four classes, all backlogged: every decision also moves ports
        // between the ready and the waiting queues as their tokens run out.
        let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
        for p in 0..ports {
            let limit = CycleLimit::MinMax { cycles_per_sec: HZ / 2 / ports as u64, weight: 1 + (p % 3) as u32 };
            s.add_port(p, 1 + (p % 4) as u8, limit, 0).unwrap();
        }
        let mut now = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(ports), &ports, |b, _| {
            b.iter(|| match s.next_port(now) {
                Some(port) => {
                    now += 6_400;
                    s.report_batch(black_box(port), 6_400, 32, now);
                }
                None => now += 100,
            })
        });
    }
    group.finish();
}

/// The same decision as the PMD makes it: after each batch the classifier and the packets have
/// pushed the scheduler out of the core's private caches. Between decisions a buffer larger
/// than L2 is walked (the batch); only `report_batch` and the following `next_port` are timed,
/// in the PMD's order. 28 MIN-MAX ports sharing the whole core, the overhead benchmark's worst
/// case: every bucket hovers at zero. No prefetch here: the PMD asks for the decision's lines
/// during egress (`PortScheduler::decision_lines`), which this walk would evict again, and what
/// that buys in situ is in docs/results/c2qos-overhead.md.
fn c2tb_hbs_cold(c: &mut Criterion) {
    const PORTS: usize = 28;
    const EVICT_BYTES: usize = 4 << 20;
    let mut group = c.benchmark_group("c2tb_hbs_per_batch_cold_cache");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    let mut s = PortScheduler::new(C2tbConfig::one_core(HZ), HbsConfig::default(), 0);
    for p in 0..PORTS {
        s.add_port(p, 4, CycleLimit::MinMax { cycles_per_sec: HZ / PORTS as u64, weight: 1 }, 0).unwrap();
    }
    let mut evict = vec![0u64; EVICT_BYTES / 8];
    let mut now = 0u64;
    let mut in_service = s.next_port(now);
    group.bench_function(BenchmarkId::new("plain", PORTS), |b| {
        b.iter_custom(|iters| {
            let mut timed = std::time::Duration::ZERO;
            for i in 0..iters {
                for line in evict.chunks_mut(8) {
                    line[0] = line[0].wrapping_add(i);
                }
                black_box(&evict);
                let start = std::time::Instant::now();
                if let Some(port) = in_service {
                    now += 25_000;
                    s.report_batch(black_box(port), 25_000, 32, now);
                } else {
                    now += 1_000;
                }
                in_service = s.next_port(now);
                timed += start.elapsed();
            }
            timed
        })
    });
    group.finish();
}

/// Steady state with every queue backlogged: each iteration dequeues one packet and enqueues
/// one to the queue it came from.
fn bench_egress<S: EgressScheduler<u64>>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    queues: usize,
    mut s: S,
) {
    let mut now = 0u64;
    for q in 0..queues {
        for i in 0..8 {
            s.enqueue(q, 1500, i, now).unwrap();
        }
    }
    let tx_ns = 1500 * 8 * 1_000_000_000 / LINK_BPS;
    group.bench_with_input(BenchmarkId::new(name, queues), &queues, |b, _| {
        b.iter(|| {
            now += tx_ns;
            if let Some(d) = s.dequeue(now) {
                let _ = s.enqueue(d.queue, d.len_bytes, black_box(d.item), now);
            }
        })
    });
}

fn egress(c: &mut Criterion) {
    let mut group = c.benchmark_group("egress_per_packet");
    group.throughput(Throughput::Elements(1));
    for &queues in &COUNTS {
        let mut ancs = Ancs::new(AncsConfig::new(LINK_BPS), 0).unwrap();
        for q in 0..queues {
            ancs.set_policy(q, AncsPolicy::weighted(1 + (q % 5) as u32), 64).unwrap();
        }
        bench_egress(&mut group, "ancs", queues, ancs);

        let mut softbw = SoftBw::new(SoftBwConfig::new(LINK_BPS), 0).unwrap();
        for q in 0..queues {
            let g =
                if q % 2 == 0 { Guarantee::Strict { rate_bps: LINK_BPS / queues as u64 } } else { Guarantee::Fairness };
            softbw.set_guarantee(q, g, 64, 0).unwrap();
        }
        bench_egress(&mut group, "softbw", queues, softbw);

        let mut pievde = PieVde::new(1514);
        let tenants = (queues / 4).max(1);
        for t in 0..tenants {
            pievde.set_tenant(t, 1 + (t % 5) as u32).unwrap();
        }
        for q in 0..queues {
            pievde.set_vm(q, q % tenants, 1, 64).unwrap();
        }
        bench_egress(&mut group, "pievde", queues, pievde);

        let mut fifo = Fifo::new();
        for q in 0..queues {
            fifo.set_queue(q, 64);
        }
        bench_egress(&mut group, "fifo", queues, fifo);

        let mut limits = RateLimit::new(RateLimitConfig::new(LINK_BPS), 0).unwrap();
        for q in 0..queues {
            limits.set_guarantee(q, if q % 2 == 0 { LINK_BPS / queues as u64 } else { 0 }, 64, 0);
        }
        bench_egress(&mut group, "ratelimit", queues, limits);
    }
    group.finish();
}

/// The paced port's dispatch around the scheduler (`LinkScheduler`, what the data plane
/// calls): SoftBW behind it at 256 queues, to compare with `egress_per_packet/softbw/256`.
fn link_scheduler(c: &mut Criterion) {
    let mut group = c.benchmark_group("link_scheduler_per_packet");
    group.throughput(Throughput::Elements(1));
    let queues = 256;
    let mut plan = LinkPlan {
        settings: LinkSettings { kind: SchedulerKind::SoftBw, ..LinkSettings::new(LINK_BPS) },
        tenants: [(0, 1)].into(),
        vms: (0..queues).map(|q| (q, VmLinkPolicy::new(64))).collect(),
    };
    for (q, vm) in plan.vms.iter_mut() {
        if q % 2 == 0 {
            vm.guarantee = Guarantee::Strict { rate_bps: LINK_BPS / queues as u64 };
        }
    }
    let mut s: LinkScheduler<u64> = LinkScheduler::new(plan, 0).unwrap();
    for q in 0..queues {
        for i in 0..8 {
            s.enqueue(q, 1500, i, 0);
        }
    }
    let tx_ns = 1500 * 8 * 1_000_000_000 / LINK_BPS;
    let mut now = 0u64;
    group.bench_function(BenchmarkId::new("softbw", queues), |b| {
        b.iter(|| {
            now += tx_ns;
            if let Some(d) = s.dequeue(now) {
                let _ = s.enqueue(d.queue, d.len_bytes, black_box(d.item), now);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, c2tb_hbs, c2tb_hbs_cold, egress, link_scheduler);
criterion_main!(benches);
