//! hostile-guest: a vhost-user guest that keeps posting the costliest descriptor chains a
//! guest can make, for the bounded-work benchmark (`scripts/bench/hostile-guest.sh`). It
//! connects to a `type=vhost-user` port with the test frontend ([`vhost::frontend`]), arms the
//! chains of [`vhost::attack`] (modes `zero`, `indirect`, `mrg`), then, every `--period-us`,
//! re-posts up to `--per-post` chains on its tx ring (never more than the switch has returned,
//! so the ring never overflows).
//!
//! Threads: one; it sleeps between re-posts (pin it with `taskset`).
//!
//! `hostile-guest SOCKET [--ring N] [--period-us N] [--per-post N] [--secs N]
//!  [--modes zero,indirect,mrg]`; prints one JSON line of what it posted when done.
use std::time::{Duration, Instant};
use vhost::attack::CostlyChains;
use vhost::frontend::MockGuest;

struct Args {
    sock: std::path::PathBuf,
    ring: u16,
    period_us: u64,
    per_post: u16,
    secs: f64,
    modes: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        sock: Default::default(),
        ring: 32768,
        period_us: 500,
        per_post: 16,
        secs: 10.0,
        modes: vec!["zero".into(), "indirect".into(), "mrg".into()],
    };
    let mut it = std::env::args().skip(1);
    let mut sock = None;
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--ring" => a.ring = v()?.parse().map_err(|e| format!("--ring: {e}"))?,
            "--period-us" => a.period_us = v()?.parse().map_err(|e| format!("--period-us: {e}"))?,
            "--per-post" => a.per_post = v()?.parse().map_err(|e| format!("--per-post: {e}"))?,
            "--secs" => a.secs = v()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--modes" => a.modes = v()?.split(',').map(str::to_string).collect(),
            s if !s.starts_with('-') && sock.is_none() => sock = Some(s.into()),
            s => return Err(format!("unknown argument {s}")),
        }
    }
    a.sock = sock.ok_or("usage: hostile-guest SOCKET [options]")?;
    if !a.ring.is_power_of_two() || a.ring < 256 || a.per_post == 0 {
        return Err("--ring must be a power of two >= 256, --per-post >= 1".into());
    }
    Ok(a)
}

fn main() {
    let a = args().unwrap_or_else(|e| {
        eprintln!("hostile-guest: {e}");
        std::process::exit(2);
    });
    let mut g = MockGuest::connect(&a.sock, 1, a.ring, u64::MAX).unwrap_or_else(|e| {
        eprintln!("hostile-guest: {}: {e}", a.sock.display());
        std::process::exit(1);
    });
    let modes: Vec<&str> = a.modes.iter().map(String::as_str).collect();
    let mut chains_of = CostlyChains::arm(&mut g, &modes).unwrap_or_else(|e| {
        eprintln!("hostile-guest: {e}");
        std::process::exit(2);
    });
    let (mut posts, mut chains, mut skipped) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.secs);
    let mut report = start + Duration::from_secs(1);
    let line = |posts, chains, skipped| {
        format!(
            "{{\"posts\":{posts},\"chains\":{chains},\"skipped\":{skipped},\"secs\":{:.3},\"per_post\":{},\"modes\":\"{}\"}}",
            start.elapsed().as_secs_f64(),
            a.per_post,
            a.modes.join(",")
        )
    };
    while Instant::now() < end {
        if Instant::now() >= report {
            // Cumulative, once a second: whoever stops us early still has the rate.
            println!("{}", line(posts, chains, skipped));
            report += Duration::from_secs(1);
        }
        let n = chains_of.post(&mut g, a.per_post);
        if n == 0 {
            skipped += 1;
        } else {
            posts += 1;
            chains += u64::from(n);
        }
        std::thread::sleep(Duration::from_micros(a.period_us));
    }
    println!("{}", line(posts, chains, skipped));
}
