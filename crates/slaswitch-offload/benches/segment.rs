//! Segmenting a 64 KB TCP segment into 1500-byte frames (MSS 1448, as Linux sends with
//! timestamps), from a frame in 2 KB buffers as DPDK's vhost library delivers it, into
//! per-frame buffers. The data plane counts the same work on the PMD (`gso_cycles` per port).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slaswitch_offload::{l4_checksum, Chain, Headers, Segments};

fn frame(payload: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 20 + 32 + payload;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        6,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ]);
    f.extend_from_slice(&[0x13, 0x89, 0xc0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0x80, 0x18, 0x01, 0xf5, 0, 0, 0, 0]);
    f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    f.extend((0..payload).map(|i| (i * 7) as u8));
    f
}

fn bench(c: &mut Criterion) {
    let f = frame(65_536 - 66);
    let pieces: Vec<&[u8]> = f.chunks(2048).collect();
    let plan = Segments::plan(&f, f.len(), 1448).expect("TCP");
    let mut out: Vec<Vec<u8>> = (0..plan.count()).map(|i| vec![0u8; plan.frame_len(i)]).collect();
    let mut g = c.benchmark_group("offload");
    g.throughput(Throughput::Bytes(f.len() as u64));
    g.bench_function("segment_64k_mss1448", |b| {
        b.iter(|| {
            let mut chain = Chain::new(pieces.iter().copied());
            chain.skip(plan.headers.len());
            for (i, seg) in out.iter_mut().enumerate() {
                plan.write(i, &f, &mut chain, seg);
            }
        })
    });
    let h = Headers::parse(&f).expect("TCP");
    g.bench_function("checksum_64k", |b| b.iter(|| l4_checksum(&f, &h, f.len() - 34, pieces.iter().copied())));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
