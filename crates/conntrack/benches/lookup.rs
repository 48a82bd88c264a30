//! Criterion micro-benchmarks of the tracker's per-packet path (issue 13):
//! - `established/N`: one `ct` pass of a reply-direction UDP packet of an existing connection,
//!   with N connections in the table (packets cycle over up to 64K of them, spread over the
//!   table);
//! - `firewall_pair/N`: the two passes `vireo-bench`'s `ct:64` pipeline makes per packet
//!   (`ct(table=1)`, then after recirculation `ct(commit)` on the unchanged frame), as two
//!   plain `execute` calls and (`firewall_pair_hinted`) as the datapath makes them, the second
//!   pass starting from the first's `Hint`;
//! - `setup`: committing new UDP connections into an empty table (time per connection).
//!
//! `cargo bench -p conntrack --bench lookup`
#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use conntrack::{state, Conntrack, CtAction, Hint, Outcome};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "../tests/common/conn_frames.rs"]
mod conn_frames;
use conn_frames::frame_of;

fn commit() -> CtAction {
    CtAction {
        commit: true,
        ..CtAction::default()
    }
}

fn state_of(o: Outcome) -> u32 {
    match o {
        Outcome::Done(r) => r.state,
        _ => panic!("not done"),
    }
}

/// A tracker with `n` committed UDP connections, and reply-direction frames of up to 64K of
/// them.
fn populated(n: u32) -> (Conntrack, Vec<Vec<u8>>) {
    let ct = Conntrack::new();
    let fwd = udp(v4(10, 0, 0, 0), v4(10, 255, 0, 1), 0, 53, 18);
    let rev = udp(v4(10, 255, 0, 1), v4(10, 0, 0, 0), 53, 0, 18);
    for i in 0..n {
        let st = state_of(ct.execute(&mut frame_of(&fwd, i, false), &commit(), 1));
        assert_eq!(st, state::TRK | state::NEW);
    }
    assert_eq!(ct.len(), n);
    let distinct = n.min(65_536);
    let stride = (n / distinct).max(1);
    let frames = (0..distinct)
        .map(|k| frame_of(&rev, k * stride, true))
        .collect();
    (ct, frames)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ct_lookup");
    g.throughput(Throughput::Elements(1));
    for n in [1u32, 1_000, 100_000, 1_000_000] {
        let (ct, mut frames) = populated(n);
        let a = CtAction::default();
        let mut k = 0usize;
        g.bench_with_input(BenchmarkId::new("established", n), &n, |b, _| {
            b.iter(|| {
                k = (k + 1) % frames.len();
                let st = state_of(ct.execute(&mut frames[k], &a, 2));
                debug_assert!(st & state::EST != 0);
                black_box(st)
            })
        });
        if n <= 100_000 {
            g.bench_with_input(BenchmarkId::new("firewall_pair", n), &n, |b, _| {
                b.iter(|| {
                    k = (k + 1) % frames.len();
                    let f = &mut frames[k];
                    let s1 = state_of(ct.execute(f, &a, 2));
                    let s2 = state_of(ct.execute(f, &commit(), 2));
                    black_box(s1 ^ s2)
                })
            });
            // The same two passes as the datapath runs them: the second starts from the
            // first's hint (no parse, hash or table probe).
            g.bench_with_input(BenchmarkId::new("firewall_pair_hinted", n), &n, |b, _| {
                b.iter(|| {
                    k = (k + 1) % frames.len();
                    let f = &mut frames[k];
                    let mut h = Hint::default();
                    let s1 = state_of(ct.execute_hinted(f, &a, 2, &mut h));
                    let s2 = state_of(ct.execute_hinted(f, &commit(), 2, &mut h));
                    black_box(s1 ^ s2)
                })
            });
        }
        let st = state_of(ct.execute(&mut frames[0], &a, 2));
        assert_ne!(
            st & state::EST,
            0,
            "the lookups hit established connections"
        );
    }
    g.finish();

    let mut g = c.benchmark_group("ct_setup");
    g.throughput(Throughput::Elements(1));
    let fwd = udp(v4(10, 0, 0, 0), v4(10, 255, 0, 1), 0, 53, 18);
    g.bench_function("new_udp", |b| {
        b.iter_custom(|iters| {
            // A fresh table every 100K connections, so the table size stays bounded.
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(100_000) as u32;
                let ct = Conntrack::new();
                let mut frames: Vec<Vec<u8>> = (0..n).map(|i| frame_of(&fwd, i, false)).collect();
                let t = Instant::now();
                for f in frames.iter_mut() {
                    black_box(state_of(ct.execute(f, &commit(), 1)));
                }
                total += t.elapsed();
                assert_eq!(ct.len(), n);
                left -= u64::from(n);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
