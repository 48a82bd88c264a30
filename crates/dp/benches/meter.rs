//! Cost of one packet through a meter (`Meter::apply`): one band, conforming (rate far above
//! the offered) and exceeding (rate far below); and the execute path with and without a
//! `Meter` action before an output. Single thread, so the bucket's cache line stays local: the
//! figure for one PMD. Run: `cargo bench -p dp --bench meter`.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use dp::meter::{now_ns, BandConfig, BandKind, Meter, MeterConfig};

fn meter(rate: u32) -> Meter {
    Meter::new(
        1,
        MeterConfig {
            pktps: true,
            bands: vec![BandConfig {
                kind: BandKind::Drop,
                rate,
                burst: 0,
            }],
        },
    )
}

fn bench(c: &mut Criterion) {
    let pass = meter(u32::MAX);
    let now = now_ns();
    let mut t = now;
    c.bench_function("meter apply, conforming", |b| {
        b.iter(|| {
            t += 1;
            black_box(pass.apply(black_box(64), t))
        })
    });
    let drop = meter(1);
    drop.apply(64, now);
    c.bench_function("meter apply, exceeding", |b| {
        b.iter(|| black_box(drop.apply(black_box(64), now)))
    });
    c.bench_function("now_ns (once per burst of 32)", |b| b.iter(now_ns));
}

criterion_group!(benches, bench);
criterion_main!(benches);
