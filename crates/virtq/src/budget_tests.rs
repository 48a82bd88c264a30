//! The per-burst descriptor budget against hostile and normal rings: zero-length chains,
//! ring-long chains, indirect tables at the cap, maximal mergeable gathers, reservation
//! failures. Every test checks the descriptors walked per burst against [`BURST_BUDGET`] and
//! the behaviour the budget must produce (what is consumed, what stays whole for later).
use crate::mock::{MockDriver, TxLayout};
use crate::queue::{BURST_BUDGET, MAX_CHAIN};
use crate::ring::*;
use crate::*;
use packet::{Batch, Packet, Pool};
use proptest::prelude::*;

fn feat(mrg: bool, indirect: bool) -> NetFeatures {
    NetFeatures {
        hdr_len: 12,
        mrg_rxbuf: mrg,
        indirect,
        event_idx: false,
        ..NetFeatures::default()
    }
}

fn device(drv: &MockDriver, f: NetFeatures) -> Queue {
    Queue::new(drv.mem(), drv.addrs(), f, 0, 0).unwrap()
}

fn frame(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_add(seed)).collect()
}

fn dequeue(q: &mut Queue) -> (Burst, Vec<Vec<u8>>) {
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let b = q.dequeue(&mut pool, &mut out);
    assert!(b.descs <= BURST_BUDGET, "walked {} > budget", b.descs);
    let v = out.drain().map(|p| p.data().to_vec()).collect();
    (b, v)
}

fn enqueue(q: &mut Queue, pkts: &[Packet]) -> Burst {
    let b = q.enqueue(pkts);
    assert!(b.descs <= BURST_BUDGET, "walked {} > budget", b.descs);
    let accounted = b.packets + b.malformed + b.too_big + b.full + b.cut + b.broken_drops;
    assert_eq!(accounted as usize, pkts.len(), "{b:?}");
    b
}

fn d(addr: u64, len: u32, flags: u16, next: u16) -> Desc {
    Desc {
        addr,
        len,
        flags,
        next,
    }
}

/// A tx chain at descriptors `start..start + zeros + 1`: `zeros` zero-length descriptors, then
/// one holding header and frame. Returns the head.
fn zero_chain(drv: &MockDriver, start: u16, zeros: u16, f: &[u8]) -> u16 {
    for i in 0..zeros {
        drv.write_desc(
            start + i,
            d(drv.buf_addr(start), 0, VIRTQ_DESC_F_NEXT, start + i + 1),
        );
    }
    let last = start + zeros;
    let mut all = vec![0u8; 12];
    all.extend_from_slice(f);
    drv.mem().write(drv.buf_addr(last), &all).unwrap();
    drv.write_desc(last, d(drv.buf_addr(last), all.len() as u32, 0, 0));
    start
}

/// Zero-length descriptors count: chains of 1 data + 99 zero-length descriptors go 10 to a
/// burst (1000 descriptors); the 11th, cut mid-walk by the budget, stays whole for the next.
#[test]
fn zero_length_chains_count_and_a_cut_chain_stays_whole() {
    let mut drv = MockDriver::new(4096, 0, 12);
    let mut q = device(&drv, feat(false, false));
    let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(60 + i, i as u8)).collect();
    for (i, f) in frames.iter().enumerate() {
        let h = zero_chain(&drv, i as u16 * 100, 99, f);
        drv.push_avail(h);
    }
    let mut got = Vec::new();
    let mut per_burst = Vec::new();
    for _ in 0..4 {
        let (b, v) = dequeue(&mut q);
        per_burst.push((b.packets, b.descs, b.budget_cut));
        got.extend(v);
        assert_eq!(
            u32::from(drv.used_idx()),
            got.len() as u32,
            "consumed = delivered"
        );
    }
    assert_eq!(
        per_burst,
        vec![
            (10, 1024, true),
            (10, 1024, true),
            (10, 1024, true),
            (2, 200, false)
        ]
    );
    assert_eq!(
        got, frames,
        "every frame once, in order, none half-consumed"
    );
    assert!(q.broken().is_none());
}

/// A chain as long as the ring (1024 zero-length descriptors, posted 32 times): each is
/// malformed after MAX_CHAIN descriptors, four fit a burst; the old walk read 32 × 1024.
#[test]
fn ring_long_chains_are_malformed_at_max_chain() {
    let mut drv = MockDriver::new(1024, 0, 12);
    let mut q = device(&drv, feat(false, false));
    for i in 0..1024u16 {
        let next = (i + 1) % 1024;
        drv.write_desc(i, d(drv.buf_addr(0), 0, VIRTQ_DESC_F_NEXT, next));
    }
    for _ in 0..32 {
        drv.push_avail(0);
    }
    let mut malformed = 0;
    let mut bursts = 0;
    while malformed < 32 {
        let (b, v) = dequeue(&mut q);
        assert!(v.is_empty());
        malformed += b.malformed;
        // Cut while chains remain; the last burst ends with the ring.
        let left = malformed < 32;
        assert_eq!(
            (b.malformed, b.descs, b.budget_cut),
            (4, 4 * MAX_CHAIN, left)
        );
        bursts += 1;
    }
    assert_eq!(bursts, 8);
    assert_eq!(drv.take_used().len(), 32);
    assert!(q.broken().is_none());
}

/// The chain cap is exact: MAX_CHAIN descriptors pass, one more is malformed.
#[test]
fn chain_of_exactly_max_chain_passes_one_more_is_malformed() {
    let mut drv = MockDriver::new(1024, 0, 12);
    let mut q = device(&drv, feat(false, false));
    let ok = frame(100, 1);
    drv.push_avail(zero_chain(&drv, 0, MAX_CHAIN as u16 - 1, &ok));
    drv.push_avail(zero_chain(&drv, 300, MAX_CHAIN as u16, &frame(100, 2)));
    let (b, v) = dequeue(&mut q);
    assert_eq!((b.packets, b.malformed, b.descs), (1, 1, 2 * MAX_CHAIN));
    assert_eq!(v, vec![ok]);
}

/// Writes an indirect table of `n` chained entries at `table`: `n - 1` zero-length, the last
/// holding header and frame at `data`. Returns the descriptor that points at it.
fn indirect_table(drv: &MockDriver, table: u64, data: u64, n: u32, f: &[u8]) -> Desc {
    let mem = drv.mem();
    for i in 0..n - 1 {
        let e = d(data, 0, VIRTQ_DESC_F_NEXT, (i + 1) as u16);
        mem.write(table + u64::from(i) * DESC_SIZE, &e.to_bytes())
            .unwrap();
    }
    let mut all = vec![0u8; 12];
    all.extend_from_slice(f);
    mem.write(data, &all).unwrap();
    let e = d(data, all.len() as u32, 0, 0);
    mem.write(table + u64::from(n - 1) * DESC_SIZE, &e.to_bytes())
        .unwrap();
    d(table, n * DESC_SIZE as u32, VIRTQ_DESC_F_INDIRECT, 0)
}

/// Indirect tables at the cap (MAX_INDIRECT entries, all chained): the pointer and every entry
/// count, so each is malformed after MAX_CHAIN descriptors and four fit a burst; a table whose
/// chain is MAX_CHAIN long with its pointer (255 entries) is delivered.
#[test]
fn indirect_tables_at_the_cap_count_every_entry() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(false, true));
    // One table at the cap in descriptor 40's data buffer (16 KiB = 1024 entries), frame in 41's.
    let cap = indirect_table(
        &drv,
        drv.buf_addr(40),
        drv.buf_addr(41),
        MAX_INDIRECT,
        &frame(60, 0),
    );
    for i in 0..8u16 {
        drv.write_desc(i, cap);
        drv.push_avail(i);
    }
    let fits = frame(200, 5);
    let t = indirect_table(
        &drv,
        drv.buf_addr(42),
        drv.buf_addr(43),
        MAX_CHAIN - 1,
        &fits,
    );
    drv.write_desc(8, t);
    drv.push_avail(8);
    let (b1, v1) = dequeue(&mut q);
    assert_eq!(
        (b1.malformed, b1.descs, b1.budget_cut),
        (4, 4 * MAX_CHAIN, true)
    );
    assert!(v1.is_empty());
    let (b2, _) = dequeue(&mut q);
    assert_eq!(
        (b2.malformed, b2.descs, b2.budget_cut),
        (4, 4 * MAX_CHAIN, true)
    );
    let (b3, v3) = dequeue(&mut q);
    assert_eq!((b3.packets, b3.descs, b3.budget_cut), (1, MAX_CHAIN, false));
    assert_eq!(v3, vec![fits]);
    assert_eq!(drv.take_used().len(), 9);
}

/// Maximal mergeable gather: zero-capacity rx buffers. The first packet gathers MAX_SEGS
/// heads, finds them too small and ends the burst: no rewind and retry with the next packet,
/// nothing consumed.
#[test]
fn maximal_mergeable_gather_ends_the_burst() {
    let mut drv = MockDriver::new(1024, 0, 12);
    let mut q = device(&drv, feat(true, false));
    drv.post_rx(1024, 0);
    let pkts: Vec<Packet> = (0..32).map(|i| Packet::from_slice(&frame(60, i))).collect();
    let b = enqueue(&mut q, &pkts);
    assert_eq!((b.packets, b.too_big, b.cut), (0, 1, 31));
    assert_eq!(b.descs, MAX_SEGS as u32, "one gather, no retry");
    assert!(!b.budget_cut);
    assert_eq!((q.last_avail(), drv.used_idx()), (0, 0), "nothing consumed");
}

/// Mergeable heads that are chains of 5 zero-length descriptors: the budget cuts the gather
/// (204 heads × 5 = 1020, the 205th cut) before MAX_SEGS heads; nothing is consumed.
#[test]
fn mergeable_gather_of_long_heads_is_cut_by_the_budget() {
    let mut drv = MockDriver::new(2048, 0, 12);
    let mut q = device(&drv, feat(true, false));
    for _ in 0..300 {
        drv.post_rx_chain(&[0; 5]);
    }
    let pkts: Vec<Packet> = (0..32).map(|i| Packet::from_slice(&frame(60, i))).collect();
    let b = enqueue(&mut q, &pkts);
    assert_eq!((b.packets, b.cut, b.budget_cut), (0, 32, true));
    assert_eq!(b.descs, BURST_BUDGET);
    assert_eq!((q.last_avail(), drv.used_idx()), (0, 0), "nothing consumed");
}

/// A packet too big for a plain (non-mergeable) buffer ends the burst; the buffer stays and
/// the next burst uses it. One descriptor walked: no retry with the packets after it.
#[test]
fn reservation_failure_ends_the_burst_without_retry() {
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false));
    drv.post_rx(1, 256);
    let pkts = [
        Packet::from_slice(&frame(1000, 1)),
        Packet::from_slice(&frame(200, 2)),
        Packet::from_slice(&frame(200, 3)),
    ];
    let b = enqueue(&mut q, &pkts);
    assert_eq!((b.packets, b.too_big, b.cut, b.descs), (0, 1, 2, 1));
    assert_eq!(drv.used_idx(), 0);
    let b = enqueue(&mut q, &pkts[1..]);
    assert_eq!((b.packets, b.full), (1, 1));
    assert_eq!(drv.recv(false), vec![(1, frame(200, 2))]);
}

/// The normal fast path is never cut: 32 packets of 2 descriptors, 32 indirect packets of 7,
/// 32 mergeable packets over 3 buffers each.
#[test]
fn normal_bursts_are_never_cut() {
    let mut drv = MockDriver::new(256, 0, 12);
    let mut q = device(&drv, feat(true, true));
    for i in 0..32 {
        drv.send(&frame(1500, i), TxLayout::Chained(1));
    }
    let (b, v) = dequeue(&mut q);
    assert_eq!((b.packets, b.descs, b.budget_cut), (32, 64, false));
    assert_eq!(v.len(), 32);
    for i in 0..32 {
        drv.send(&frame(1500, i), TxLayout::Indirect(5));
    }
    let (b, _) = dequeue(&mut q);
    assert_eq!((b.packets, b.descs, b.budget_cut), (32, 32 * 7, false));

    let mut rx = MockDriver::new(128, 0, 12);
    let mut q = device(&rx, feat(true, false));
    rx.post_rx(96, 1024);
    let pkts: Vec<Packet> = (0..32)
        .map(|i| Packet::from_slice(&frame(2500, i)))
        .collect();
    let b = enqueue(&mut q, &pkts);
    assert_eq!((b.packets, b.descs, b.budget_cut), (32, 96, false));
    assert_eq!(rx.recv(true).len(), 32);
}

proptest! {
    /// Random tx chains (zero-length padding, some past MAX_CHAIN): every burst stays within
    /// the budget; every chain is consumed exactly once, whole: frames of legal chains arrive
    /// in order, each over-long chain counts one malformed.
    #[test]
    fn bursts_stay_within_budget(zeros in proptest::collection::vec(0u16..300, 1..40)) {
        let mut drv = MockDriver::new(16384, 0, 12);
        let mut q = device(&drv, feat(false, false));
        let mut expect = Vec::new();
        let mut bad = 0;
        let mut at = 0u16;
        for (i, &z) in zeros.iter().enumerate() {
            let f = frame(60, i as u8);
            drv.push_avail(zero_chain(&drv, at, z, &f));
            at += z + 1;
            if u32::from(z) < MAX_CHAIN {
                expect.push(f);
            } else {
                bad += 1;
            }
        }
        let (mut got, mut malformed) = (Vec::new(), 0);
        for _ in 0..zeros.len() * 2 {
            let (b, v) = dequeue(&mut q);
            prop_assert!(b.descs <= BURST_BUDGET);
            prop_assert!(b.packets + b.malformed > 0 || u32::from(drv.used_idx()) == zeros.len() as u32);
            got.extend(v);
            malformed += b.malformed;
        }
        prop_assert_eq!(got, expect);
        prop_assert_eq!(malformed, bad);
        prop_assert_eq!(u32::from(drv.used_idx()), zeros.len() as u32);
    }
}

/// Time one burst takes when a hostile guest makes it spend the whole budget: ring-long
/// zero-length chains, indirect tables at the cap (dequeue), zero-length mergeable heads of 5
/// descriptors (enqueue). Run with
/// `cargo test --release -p virtq -- --ignored --nocapture budget_cost`.
#[test]
#[ignore]
fn budget_cost() {
    let iters = 20_000u32;
    let mhz = cpu_mhz();
    let report = |what: &str, t: std::time::Duration, descs: u64| {
        let ns = t.as_nanos() as f64 / f64::from(iters);
        eprintln!(
            "BUDGET COST {what}: {ns:.0} ns/burst ({:.0} cycles), {:.1} descriptors/burst, {:.2} ns/descriptor at {mhz:.0} MHz",
            ns * mhz / 1000.0,
            descs as f64 / f64::from(iters),
            t.as_nanos() as f64 / descs as f64
        );
    };
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    // Direct: one ring-long loop of zero-length descriptors, every avail slot names it.
    let mut drv = MockDriver::new(1024, 0, 12);
    for i in 0..1024u16 {
        drv.write_desc(i, d(drv.buf_addr(0), 0, VIRTQ_DESC_F_NEXT, (i + 1) % 1024));
    }
    for _ in 0..1024 {
        drv.push_avail(0);
    }
    drv.set_no_interrupt(true);
    let mut q = device(&drv, feat(false, true));
    let (mut t, mut descs) = (std::time::Duration::ZERO, 0u64);
    for _ in 0..iters {
        let t0 = std::time::Instant::now();
        let b = q.dequeue(&mut pool, &mut out);
        t += t0.elapsed();
        assert_eq!(b.descs, BURST_BUDGET);
        descs += u64::from(b.descs);
        drv.advance_avail(b.malformed as u16);
    }
    report("direct zero-length chains (dequeue)", t, descs);
    // Indirect tables at the cap.
    let mut drv = MockDriver::new(64, 0, 12);
    let cap = indirect_table(
        &drv,
        drv.buf_addr(60),
        drv.buf_addr(61),
        MAX_INDIRECT,
        &[0; 60],
    );
    for i in 0..64u16 {
        drv.write_desc(i, cap);
        drv.push_avail(i);
    }
    drv.set_no_interrupt(true);
    let mut q = device(&drv, feat(false, true));
    let (mut t, mut descs) = (std::time::Duration::ZERO, 0u64);
    for _ in 0..iters {
        let t0 = std::time::Instant::now();
        let b = q.dequeue(&mut pool, &mut out);
        t += t0.elapsed();
        assert_eq!(b.descs, BURST_BUDGET);
        descs += u64::from(b.descs);
        drv.advance_avail(b.malformed as u16);
    }
    report("indirect tables at the cap (dequeue)", t, descs);
    // Mergeable gather over zero-length heads of 5 descriptors: nothing is ever consumed.
    let mut drv = MockDriver::new(2048, 0, 12);
    for _ in 0..400 {
        drv.post_rx_chain(&[0; 5]);
    }
    let mut q = device(&drv, feat(true, false));
    let pkts: Vec<Packet> = (0..32).map(|i| Packet::from_slice(&frame(64, i))).collect();
    let (mut t, mut descs) = (std::time::Duration::ZERO, 0u64);
    for _ in 0..iters {
        let t0 = std::time::Instant::now();
        let b = q.enqueue(&pkts);
        t += t0.elapsed();
        assert_eq!(b.descs, BURST_BUDGET);
        descs += u64::from(b.descs);
    }
    report("mergeable gather of zero-length heads (enqueue)", t, descs);
}

fn cpu_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1000.0)
}
