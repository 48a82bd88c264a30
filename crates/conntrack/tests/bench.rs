//! Microbenchmark (ignored; run in release):
//!   cargo test --release -p conntrack --test bench -- --ignored --nocapture
//! Prints ns/packet for established-connection lookups at 1, 1K, 100K and 1M entries, the
//! new-connection setup rate, and the longest lock hold of an expiry sweep at 1M entries.

mod common;
use common::*;
use conntrack::state::*;
use conntrack::{Conntrack, CtAction, Outcome};
use std::time::Instant;

#[path = "common/conn_frames.rs"]
mod conn_frames;
use conn_frames::frame_of;

/// This thread's time on a CPU, ns (from /proc/thread-self/schedstat): on a loaded machine
/// wall time also counts the time other processes ran.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn populate(ct: &Conntrack, n: u32) -> f64 {
    let fwd = udp(v4(10, 0, 0, 0), v4(10, 255, 0, 1), 0, 53, 18);
    let a = CtAction {
        commit: true,
        ..CtAction::default()
    };
    let t = Instant::now();
    for i in 0..n {
        let mut f = frame_of(&fwd, i, false);
        let Outcome::Done(r) = ct.execute(&mut f, &a, 0) else {
            panic!()
        };
        assert_eq!(r.state, TRK | NEW);
    }
    t.elapsed().as_secs_f64()
}

#[test]
#[ignore]
fn bench_conntrack() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    let rev_tpl = udp(v4(10, 255, 0, 1), v4(10, 0, 0, 0), 53, 0, 18);
    let a = CtAction::default();
    for n in [1u32, 1_000, 100_000, 1_000_000] {
        let ct = Conntrack::new();
        let setup = populate(&ct, n);
        assert_eq!(ct.len(), n);
        // Reply-direction packets of up to 64K distinct connections, spread over the table.
        let distinct = n.min(65_536);
        let stride = (n / distinct).max(1);
        let mut frames: Vec<Vec<u8>> = (0..distinct)
            .map(|k| frame_of(&rev_tpl, k * stride, true))
            .collect();
        let iters = 2_000_000u32;
        let t = Instant::now();
        let cpu0 = cpu_ns();
        let mut est = 0u32;
        for k in 0..iters {
            let f = &mut frames[(k % distinct) as usize];
            if let Outcome::Done(r) = ct.execute(f, &a, 1) {
                est += u32::from(r.state & EST != 0);
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(iters);
        let cpu = (cpu_ns() - cpu0) as f64 / f64::from(iters);
        assert_eq!(est, iters);
        println!(
            "entries {:>9}: established lookup {:6.1} ns/packet wall, {:6.1} ns/packet on-CPU; setup {:8.0} conns/s (wall)",
            n,
            ns,
            cpu,
            f64::from(n) / setup
        );
        if n == 1_000_000 {
            // One shard per sweep call: the distribution of the longest lock hold per shard,
            // first with nothing expired (a normal pass), then with everything expired.
            for (label, now) in [("nothing expired", 2u64), ("all expired", u64::MAX / 2)] {
                let mut holds = Vec::with_capacity(conntrack::table::SHARDS);
                let mut wholds = Vec::with_capacity(conntrack::table::SHARDS);
                let mut removed = 0;
                let t = Instant::now();
                for _ in 0..conntrack::table::SHARDS {
                    let r = ct.sweep(now, 1);
                    holds.push(r.max_hold_ns);
                    wholds.push(r.max_write_hold_ns);
                    removed += r.removed;
                }
                let pass = t.elapsed();
                holds.sort_unstable();
                wholds.sort_unstable();
                let pct = |p: f64| holds[((holds.len() - 1) as f64 * p) as usize] / 1000;
                let wpct = |p: f64| wholds[((wholds.len() - 1) as f64 * p) as usize];
                println!(
                    "sweep at 1M, {label}: full pass {pass:?}, removed {removed}; longest lock hold per shard (read or write): median {} us, p99 {} us, max {} us; longest write-lock hold per shard: median {} ns, p99 {} ns, max {} ns",
                    pct(0.5),
                    pct(0.99),
                    pct(1.0),
                    wpct(0.5),
                    wpct(0.99),
                    wpct(1.0)
                );
            }
            assert_eq!(ct.len(), 0);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.trim());
}
