//! Pool and buffer cost per burst: 32 gets, 64-byte fills and one batch put back (the port
//! I/O part of every forwarded burst). Run: `cargo bench -p packet --bench pool`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use packet::{Batch, Pool};

fn pool(c: &mut Criterion) {
    let frame = [7u8; 64];
    let mut pool = Pool::new(0, 256);
    let mut batch = Batch::new();
    let mut g = c.benchmark_group("pool");
    g.throughput(Throughput::Elements(32));
    g.bench_function("burst32_get_fill_put", |b| {
        b.iter(|| {
            while !batch.is_full() {
                let mut p = pool.get();
                p.set_frame(black_box(&frame));
                let _ = batch.push(p);
            }
            pool.put_batch(&mut batch);
        })
    });
    g.finish();
}

criterion_group!(benches, pool);
criterion_main!(benches);
