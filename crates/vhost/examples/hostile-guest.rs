//! hostile-guest: a vhost-user guest that keeps posting the costliest descriptor chains a
//! guest can make, for the bounded-work benchmark (`scripts/bench/hostile-guest.sh`). It
//! connects to a `type=vhost-user` port with the test frontend ([`vhost::frontend`]) and the
//! mock driver (`virtq::mock`), then, every `--period-us`, re-posts up to `--per-post` chains
//! on its tx ring (never more than the switch has returned, so the ring never overflows):
//!
//! - `zero`: heads into one ring-long loop of zero-length descriptors (all of the tx ring but
//!   the last 64 entries);
//! - `indirect`: indirect descriptors naming one table at the cap (1024 chained zero-length
//!   entries, the last holding a frame);
//! - `mrg`: valid 60-byte frames; with the rule `in_port=P,actions=in_port` they come back
//!   to this guest, whose rx ring holds only mergeable heads of 4 zero-length descriptors
//!   (maximal gathers, never consumed).
//!
//! Threads: one; it sleeps between re-posts (pin it with `taskset`).
//!
//! `hostile-guest SOCKET [--ring N] [--period-us N] [--per-post N] [--secs N]
//!  [--modes zero,indirect,mrg]`; prints one JSON line of what it posted when done.
use std::time::{Duration, Instant};
use vhost::frontend::MockGuest;
use virtq::ring::{Desc, DESC_SIZE, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT};

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

fn d(addr: u64, len: u32, flags: u16, next: u16) -> Desc {
    Desc {
        addr,
        len,
        flags,
        next,
    }
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
    let s = a.ring;
    let loop_len = s - 64;
    // Guest rx: mergeable heads of 4 zero-length writable descriptors, filling the ring.
    for _ in 0..s / 4 {
        g.rings[0].post_rx_chain(&[0; 4]);
    }
    let tx = &mut g.rings[1];
    let mem = tx.mem();
    for i in 0..loop_len {
        tx.write_desc(
            i,
            d(tx.buf_addr(0), 0, VIRTQ_DESC_F_NEXT, (i + 1) % loop_len),
        );
    }
    // One indirect table at the cap (16 KiB = 1024 entries) in entry `loop_len`'s buffer.
    let table = tx.buf_addr(loop_len);
    let frame_at = tx.buf_addr(loop_len + 1);
    let n = virtq::ring::MAX_INDIRECT;
    for i in 0..n - 1 {
        let e = d(frame_at, 0, VIRTQ_DESC_F_NEXT, (i + 1) as u16);
        mem.write(table + u64::from(i) * DESC_SIZE, &e.to_bytes())
            .unwrap();
    }
    let last = d(frame_at, 12 + 60, 0, 0);
    mem.write(table + u64::from(n - 1) * DESC_SIZE, &last.to_bytes())
        .unwrap();
    for i in 0..16 {
        let p = d(table, n * DESC_SIZE as u32, VIRTQ_DESC_F_INDIRECT, 0);
        tx.write_desc(loop_len + i, p);
    }
    // Valid frames (zeroed virtio-net header + 60 bytes) in the last 32 entries.
    let mut frame = vec![0u8; 12 + 60];
    frame[12..18].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x33]);
    frame[18..24].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x34]);
    frame[24..26].copy_from_slice(&[0x88, 0xb5]);
    for to in s - 32..s {
        mem.write(tx.buf_addr(to), &frame).unwrap();
        tx.write_desc(to, d(tx.buf_addr(to), frame.len() as u32, 0, 0));
    }
    let mut heads: Vec<u16> = Vec::new();
    for m in &a.modes {
        match m.as_str() {
            "zero" => heads.extend((0..8).map(|i| i * (loop_len / 8))),
            "indirect" => heads.extend((0..8).map(|i| loop_len + i)),
            "mrg" => heads.extend((0..8).map(|i| s - 32 + i)),
            other => {
                eprintln!("hostile-guest: unknown mode {other}");
                std::process::exit(2);
            }
        }
    }
    if heads.is_empty() {
        eprintln!("hostile-guest: no modes");
        std::process::exit(2);
    }
    let mut avail = tx.used_idx();
    let (mut posts, mut chains, mut skipped) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.secs);
    let mut report = start + Duration::from_secs(1);
    let mut k = 0usize;
    while Instant::now() < end {
        if Instant::now() >= report {
            // Cumulative, once a second: whoever stops us early still has the rate.
            println!(
                "{{\"posts\":{posts},\"chains\":{chains},\"skipped\":{skipped},\"secs\":{:.3},\"per_post\":{},\"modes\":\"{}\"}}",
                start.elapsed().as_secs_f64(),
                a.per_post,
                a.modes.join(",")
            );
            report += Duration::from_secs(1);
        }
        let pending = avail.wrapping_sub(tx.used_idx());
        let room = s.saturating_sub(pending);
        let n = a.per_post.min(room);
        if n == 0 {
            skipped += 1;
        }
        for _ in 0..n {
            tx.push_avail(heads[k % heads.len()]);
            k += 1;
        }
        avail = avail.wrapping_add(n);
        if n > 0 {
            posts += 1;
            chains += u64::from(n);
        }
        std::thread::sleep(Duration::from_micros(a.period_us));
    }
    println!(
        "{{\"posts\":{posts},\"chains\":{chains},\"skipped\":{skipped},\"secs\":{:.3},\"per_post\":{},\"modes\":\"{}\"}}",
        start.elapsed().as_secs_f64(),
        a.per_post,
        a.modes.join(",")
    );
}
