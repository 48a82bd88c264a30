//! Key extraction and key hashing cost per packet.
use criterion::{black_box, criterion_group, criterion_main, Criterion};

fn frame_ipv4_udp() -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend_from_slice(&[0x04, 0xd2, 0x00, 0x35, 0, 26, 0, 0]);
    f.resize(64, 0);
    f
}

fn frame_ipv6_tcp() -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
    f.extend((0u8..32).collect::<Vec<_>>());
    f.extend_from_slice(&[
        0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f
}

fn bench(c: &mut Criterion) {
    let v4 = frame_ipv4_udp();
    let v6 = frame_ipv6_tcp();
    c.bench_function("extract/ipv4_udp", |b| {
        b.iter(|| wire::extract(black_box(&v4), black_box(1)))
    });
    c.bench_function("extract/ipv6_tcp", |b| {
        b.iter(|| wire::extract(black_box(&v6), black_box(1)))
    });
    let k = wire::extract(&v4, 1);
    c.bench_function("flowkey/hash", |b| b.iter(|| black_box(&k).hash()));
    c.bench_function("extract+hash/ipv4_udp", |b| {
        b.iter(|| wire::extract(black_box(&v4), 1).hash())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
