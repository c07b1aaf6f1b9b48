//! Classification cost per packet: exact-match-cache hit; a miss answered by the megaflow cache;
//! and a miss in both that walks the tuple space (with prefix tracking), with 1, 10 and 100
//! masks. Run: `cargo bench -p slaswitch-classifier --bench lookup`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use slaswitch_classifier::parse::build::udp4;
use slaswitch_classifier::security_group::security_group_rules;
use slaswitch_classifier::{parse_frame, Classifier, ExactMatchCache, FlowKey, MegaflowCache};

fn keys(n: usize) -> Vec<FlowKey> {
    (0..n)
        .map(|i| {
            let f = udp4(
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
                [192, 168, 1, 1],
                (i % 60000) as u16,
                80,
                64,
            );
            parse_frame(&f, 1).unwrap()
        })
        .collect()
}

/// The exact-match cache's answer for `k`, or `miss`'s, which it then caches.
fn through_emc(emc: &mut ExactMatchCache, k: &FlowKey, mut miss: impl FnMut(&FlowKey) -> u32) -> u32 {
    let h = k.hash64();
    emc.lookup(k, h).unwrap_or_else(|| {
        let v = miss(k);
        emc.insert(k, h, v);
        v
    })
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify_per_packet");
    group.throughput(Throughput::Elements(1));
    for masks in [1usize, 10, 100] {
        // `masks` subtables in all, the default rule's included.
        let classifier = Classifier::new(security_group_rules(masks - 1));
        assert_eq!(classifier.subtable_count(), masks);
        let flows = keys(65536);
        let mut emc = ExactMatchCache::new();
        let one = flows[0];
        let h = one.hash64();
        emc.insert(&one, h, classifier.lookup(&one).unwrap_or(u32::MAX));
        group.bench_with_input(BenchmarkId::new("emc_hit", masks), &masks, |b, _| {
            b.iter(|| black_box(emc.lookup(black_box(&one), one.hash64())))
        });
        // 65536 distinct flows cycle through an 8192-entry cache: nearly every lookup misses.
        let mut i = 0;
        let mut megaflows = MegaflowCache::new();
        group.bench_with_input(BenchmarkId::new("emc_miss_then_megaflow", masks), &masks, |b, _| {
            b.iter(|| {
                i = (i + 1) & 65535;
                black_box(through_emc(&mut emc, &flows[i], |k| megaflows.resolve(&classifier, k).rule))
            })
        });
        group.bench_with_input(BenchmarkId::new("emc_miss_then_tss", masks), &masks, |b, _| {
            b.iter(|| {
                i = (i + 1) & 65535;
                black_box(through_emc(&mut emc, &flows[i], |k| classifier.lookup(k).unwrap_or(u32::MAX)))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
