//! Packed queue against the mock packed driver: layouts, wrap, chains across the wrap and over
//! the whole ring, indirect, mergeable rx, event suppression, the budget, hostile rings.
use crate::mock::{TxLayout, MOCK_BUF};
use crate::mock_packed::PackedDriver;
use crate::packed::*;
use crate::*;
use packet::{Batch, Packet, Pool};
use proptest::prelude::*;

fn feat(mrg: bool, indirect: bool, event_idx: bool) -> NetFeatures {
    NetFeatures {
        hdr_len: 12,
        mrg_rxbuf: mrg,
        indirect,
        event_idx,
        ..NetFeatures::default()
    }
}

fn device(drv: &PackedDriver, f: NetFeatures) -> PackedQueue {
    let b = drv.avail_base();
    PackedQueue::new(drv.mem(), drv.addrs(), f, b, b).unwrap()
}

fn frame(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn dequeue(q: &mut PackedQueue) -> (Burst, Vec<Vec<u8>>) {
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let b = q.dequeue(&mut pool, &mut out);
    let v = out.drain().map(|p| p.data().to_vec()).collect();
    (b, v)
}

fn pkts(frames: &[Vec<u8>]) -> Vec<Packet> {
    frames.iter().map(|f| Packet::from_slice(f)).collect()
}

#[test]
fn dequeue_layouts_across_the_wrap() {
    // Start 3 positions before the end in the second lap (wrap counter 0).
    let mut drv = PackedDriver::new(16, 13, false, 12);
    let mut q = device(&drv, feat(false, true, false));
    assert_eq!(
        drv.device_event_flags(),
        EVENT_F_DISABLE,
        "we poll: no kicks"
    );
    let layouts = [
        TxLayout::Single,
        TxLayout::Chained(3), // 4 descriptors: 14, 15, 0, 1 — across the wrap
        TxLayout::Indirect(5),
        TxLayout::Chained(1),
        TxLayout::Single,
    ];
    let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(60 + i * 333, i as u8)).collect();
    for (f, l) in frames.iter().zip(layouts) {
        drv.send(f, l);
    }
    let (b, got) = dequeue(&mut q);
    assert_eq!(b.packets, 5);
    assert_eq!(got, frames);
    // 1 + 4 + 1 (indirect pointer) + 2 + 1 ring positions; descriptors walked also count
    // the table's 6 entries.
    assert_eq!(b.descs, 1 + 4 + 1 + 6 + 2 + 1);
    let used = drv.take_used();
    assert_eq!(used.len(), 5);
    drv.forget(&used);
    // 13 + 9 = 22 = 16 + 6: the device wrapped (counter back to 1).
    assert_eq!(q.last_avail(), 6 | WRAP_BIT);
    assert_eq!(q.used_idx(), 6 | WRAP_BIT);
    assert_eq!(drv.used_base(), 6 | WRAP_BIT);
    // Nothing more available.
    assert_eq!(dequeue(&mut q).0, Burst::default());
}

#[test]
fn many_laps_of_a_non_power_of_two_ring() {
    let mut drv = PackedDriver::new(7, 0, true, 12);
    let mut q = device(&drv, feat(false, true, false));
    for lap in 0..50u32 {
        let layout = match lap % 3 {
            0 => TxLayout::Single,
            1 => TxLayout::Chained(2),
            _ => TxLayout::Indirect(3),
        };
        let f = frame(100 + lap as usize, lap as u8);
        drv.send(&f, layout);
        drv.send(&f, TxLayout::Single);
        let (b, got) = dequeue(&mut q);
        assert_eq!(b.packets, 2, "lap {lap}");
        assert_eq!(got, vec![f.clone(), f]);
        let u = drv.take_used();
        assert_eq!(u.len(), 2);
        drv.forget(&u);
        assert_eq!(q.used_idx(), drv.used_base());
    }
}

#[test]
fn chain_over_the_whole_ring_toggles_the_wrap_counter() {
    let mut drv = PackedDriver::new(8, 5, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    let f = frame(700, 3);
    drv.send(&f, TxLayout::Chained(7)); // 8 descriptors: every position of the ring
    let (b, got) = dequeue(&mut q);
    assert_eq!((b.packets, b.descs), (1, 8));
    assert_eq!(got, vec![f.clone()]);
    assert_eq!(
        q.last_avail(),
        5,
        "same position, wrap counter toggled to 0"
    );
    let u = drv.take_used();
    assert_eq!(u.len(), 1);
    drv.forget(&u);
    // And the ring keeps working in the next lap.
    drv.send(&f, TxLayout::Single);
    assert_eq!(dequeue(&mut q).1, vec![f]);
}

#[test]
fn enqueue_mergeable_across_the_wrap() {
    let mut drv = PackedDriver::new(32, 30, true, 12);
    let mut q = device(&drv, feat(true, false, false));
    drv.post_rx(10, 1000);
    let frames = vec![frame(60, 1), frame(2500, 2), frame(1500, 3)];
    let b = q.enqueue(&pkts(&frames));
    assert_eq!((b.packets, b.full, b.malformed), (3, 0, 0));
    let got = drv.recv(true);
    let nbufs: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(nbufs, vec![1, 3, 2]);
    let data: Vec<Vec<u8>> = got.into_iter().map(|g| g.1).collect();
    assert_eq!(data, frames);
    assert_eq!(
        q.used_idx(),
        4,
        "30 + 6 buffers = 36 = 32 + 4, wrap counter 0"
    );
}

#[test]
fn enqueue_chains_without_mergeable_and_too_big() {
    let mut drv = PackedDriver::new(16, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    drv.post_rx_chain(&[12, 500, 1000]);
    drv.post_rx(1, 200);
    let frames = vec![frame(1400, 1), frame(1000, 2)];
    let b = q.enqueue(&pkts(&frames));
    // The first fits its chain; the second is bigger than the one buffer left: the burst ends.
    assert_eq!((b.packets, b.too_big, b.cut), (1, 1, 0));
    let got = drv.recv(false);
    assert_eq!(got, vec![(1, frames[0].clone())]);
    assert_eq!(
        q.last_avail(),
        3 | WRAP_BIT,
        "the 200-byte buffer stays in the ring"
    );
    let b = q.enqueue(&pkts(&[frame(100, 9)]));
    assert_eq!(b.packets, 1);
    assert_eq!(drv.recv(false), vec![(1, frame(100, 9))]);
}

#[test]
fn enqueue_full_ring_leaves_buffers_whole() {
    let mut drv = PackedDriver::new(8, 0, true, 12);
    let mut q = device(&drv, feat(true, false, false));
    drv.post_rx(2, 1000);
    // 2500 bytes need three buffers; only two: not reserved, the burst ends as full.
    let b = q.enqueue(&pkts(&[frame(2500, 1), frame(60, 2)]));
    assert_eq!((b.packets, b.full), (0, 2));
    assert!(drv.take_used().is_empty());
    drv.post_rx(1, 1000);
    let b = q.enqueue(&pkts(&[frame(2500, 1)]));
    assert_eq!(b.packets, 1);
    assert_eq!(drv.recv(true), vec![(3, frame(2500, 1))]);
}

#[test]
fn event_suppression_enable_disable_and_event_idx() {
    let mut drv = PackedDriver::new(16, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    drv.set_event(EVENT_F_ENABLE, 0);
    drv.send(&frame(60, 1), TxLayout::Single);
    assert!(dequeue(&mut q).0.notify);
    drv.set_event(EVENT_F_DISABLE, 0);
    drv.send(&frame(60, 1), TxLayout::Single);
    assert!(!dequeue(&mut q).0.notify);
    // Nothing used: no notification whatever the driver asks.
    drv.set_event(EVENT_F_ENABLE, 0);
    assert!(!dequeue(&mut q).0.notify);
    drv.take_used();

    // EVENT_IDX: notify only when the burst uses the position the driver names.
    let mut drv = PackedDriver::new(16, 12, true, 12);
    let mut q = device(&drv, feat(false, false, true));
    drv.set_event(EVENT_F_DESC, join_base(2, false)); // position 2 of the next lap
    for _ in 0..3 {
        drv.send(&frame(60, 1), TxLayout::Single);
    }
    assert!(!dequeue(&mut q).0.notify, "used 12..15: event not reached");
    for _ in 0..4 {
        drv.send(&frame(60, 1), TxLayout::Single);
    }
    assert!(dequeue(&mut q).0.notify, "used 15, 0, 1, 2 of the next lap");
    drv.send(&frame(60, 1), TxLayout::Single);
    assert!(!dequeue(&mut q).0.notify, "event already passed");
    // Without EVENT_IDX negotiated, DESC is not a valid mode: treated as enabled.
    let mut drv = PackedDriver::new(16, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    drv.set_event(EVENT_F_DESC, join_base(9, true));
    drv.send(&frame(60, 1), TxLayout::Single);
    assert!(dequeue(&mut q).0.notify);
}

#[test]
fn used_flags_carry_the_wrap_counter_and_write_bit() {
    let mut drv = PackedDriver::new(4, 3, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    drv.post_rx(2, 1000);
    q.enqueue(&pkts(&[frame(60, 1), frame(60, 2)]));
    let u = drv.take_used_flags();
    assert_eq!(u.len(), 2);
    // Position 3 in lap 1, position 0 in lap 0.
    assert_eq!(u[0].2, DESC_F_AVAIL | DESC_F_USED | DESC_F_WRITE);
    assert_eq!(u[1].2, DESC_F_WRITE);
    assert_eq!(u[0].1, 72);
}

#[test]
fn resume_from_get_vring_base() {
    let mut drv = PackedDriver::new(8, 6, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    for i in 0..4 {
        drv.send(&frame(60, i), TxLayout::Single);
    }
    assert_eq!(dequeue(&mut q).0.packets, 4);
    let u = drv_used(&mut drv);
    drv.forget(&u);
    let base = q.last_avail();
    assert_eq!(base, 2, "wrap counter 0 after passing the end");
    // A new queue from the reported base resumes where the old one stopped.
    let mut q2 = PackedQueue::new(
        drv.mem(),
        drv.addrs(),
        feat(false, false, false),
        base,
        base,
    )
    .unwrap();
    drv.send(&frame(80, 7), TxLayout::Single);
    assert_eq!(dequeue(&mut q2).1, vec![frame(80, 7)]);
    assert_eq!(drv_used(&mut drv).len(), 1);
}

fn drv_used(drv: &mut PackedDriver) -> Vec<(u16, u32)> {
    drv.take_used()
}

// ---- hostile rings ----

#[test]
fn bad_buffers_are_dropped_counted_and_returned() {
    let mut drv = PackedDriver::new(32, 0, true, 12);
    let mut q = device(&drv, feat(false, true, false));
    let good = frame(100, 5);
    let a = drv.buf_addr(0);
    // Out of range, device-writable on tx, nested indirect, indirect len % 16 != 0, an
    // indirect descriptor with NEXT, a frame shorter than the header.
    drv.post_chain(&[(0xdead_0000_0000, 100, 0)]);
    drv.post_chain(&[(a, 100, DESC_F_WRITE)]);
    let t = drv.table_addr(2);
    drv.write_table(t, &[(t, 16, DESC_F_INDIRECT)]);
    drv.post_chain(&[(t, 16, DESC_F_INDIRECT)]);
    drv.post_chain(&[(drv.table_addr(3), 24, DESC_F_INDIRECT)]);
    drv.post_chain(&[(drv.table_addr(4), 16, DESC_F_INDIRECT), (a, 10, 0)]);
    drv.post_chain(&[(a, 4, 0)]);
    drv.send(&good, TxLayout::Single);
    let (b, got) = dequeue(&mut q);
    assert_eq!((b.packets, b.malformed), (1, 6));
    assert_eq!(got, vec![good]);
    assert!(q.broken().is_none());
    // Every chain was returned, the one with two descriptors as one used entry.
    let u = drv.take_used();
    assert_eq!(u.len(), 7);
    assert_eq!(q.used_idx(), 8 | WRAP_BIT);
}

#[test]
fn garbage_ids_are_passed_back_not_trusted() {
    let drv = PackedDriver::new(8, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    let a = drv.buf_addr(0);
    drv.mem().write(a, &[0u8; 72]).unwrap();
    // The driver names id 0xffff: the device returns it as it is and indexes nothing by it.
    drv.write_raw(0, a, 72, 0xffff, PackedDriver::avail_flags(true));
    let (b, _) = dequeue(&mut q);
    assert_eq!(b.packets, 1);
    let off = drv.addrs().desc + 12;
    assert_eq!(drv.mem().read_obj::<u16>(off).unwrap(), 0xffff);
}

#[test]
fn endless_chains_break_the_queue_without_reading_past_the_caps() {
    // A ring whose every descriptor says NEXT: no end within the ring.
    let drv = PackedDriver::new(64, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    let a = drv.buf_addr(0);
    for i in 1..64 {
        drv.write_raw(i, a, 0, 0, DESC_F_NEXT | PackedDriver::avail_flags(true));
    }
    drv.write_raw(0, a, 0, 0, DESC_F_NEXT | PackedDriver::avail_flags(true));
    let (b, _) = dequeue(&mut q);
    assert!(b.broke);
    assert_eq!(
        b.descs, 64,
        "each descriptor of the ring read once, no more"
    );
    assert_eq!(q.broken(), Some(Broken::LongChain));
    // Broken stays broken: nothing more is read.
    assert_eq!(dequeue(&mut q).0, Burst::default());
    // Longer than MAX_CHAIN in a bigger ring.
    let drv = PackedDriver::new(1024, 0, true, 12);
    let mut q = device(&drv, feat(false, false, false));
    for i in (0..400).rev() {
        drv.write_raw(i, a, 0, 0, DESC_F_NEXT | PackedDriver::avail_flags(true));
    }
    let (b, _) = dequeue(&mut q);
    assert_eq!(b.descs, MAX_CHAIN);
    assert_eq!(q.broken(), Some(Broken::LongChain));
    let e = q.enqueue(&pkts(&[frame(60, 1)]));
    assert_eq!(e.broken_drops, 1);
}

#[test]
fn the_budget_cuts_between_chains_and_the_cut_chain_stays_whole() {
    let mut drv = PackedDriver::new(2048, 0, true, 12);
    let mut q = device(&drv, feat(false, true, false));
    let f = frame(200, 1);
    // Five chains of MAX_CHAIN descriptors: header, frame, then zero-length ones.
    for _ in 0..5 {
        let base = drv.buf_addr(0);
        drv.mem().write(base + 12, &f).unwrap();
        let mut v = vec![(base, 12, 0), (base + 12, 200, 0)];
        v.resize(MAX_CHAIN as usize, (base, 0, 0));
        drv.post_chain(&v);
    }
    let (b, got) = dequeue(&mut q);
    assert_eq!((b.packets, b.descs), (4, BURST_BUDGET));
    assert!(b.budget_cut);
    assert_eq!(got.len(), 4);
    assert_eq!(drv.take_used().len(), 4);
    let (b, got) = dequeue(&mut q);
    assert_eq!((b.packets, b.descs, b.budget_cut), (1, MAX_CHAIN, false));
    assert_eq!(got, vec![f]);
    // An indirect table past the chain cap is malformed but returnable (its end is known).
    let t = drv.table_addr(0);
    let a = drv.buf_addr(0);
    drv.write_table(t, &vec![(a, 0, 0); 300]);
    drv.post_chain(&[(t, 300 * 16, DESC_F_INDIRECT)]);
    let (b, _) = dequeue(&mut q);
    assert_eq!((b.malformed, b.descs), (1, MAX_CHAIN));
    assert!(q.broken().is_none());
}

#[test]
fn mergeable_gathers_count_against_the_budget() {
    let mut drv = PackedDriver::new(4096, 0, true, 12);
    let mut q = device(&drv, feat(true, false, false));
    // 2000 zero-length writable buffers: one packet would gather all of them.
    for _ in 0..2000 {
        let a = drv.buf_addr(0);
        drv.post_chain(&[(a, 0, DESC_F_WRITE)]);
    }
    let b = q.enqueue(&pkts(&[frame(60, 1), frame(60, 2)]));
    assert!(b.descs <= BURST_BUDGET);
    assert!(b.too_big + b.cut + b.full == 2 && b.packets == 0, "{b:?}");
    assert!(
        drv.take_used().is_empty(),
        "nothing reserved, nothing returned"
    );
}

proptest! {
    // Any mix of layouts and sizes over many laps of any ring size: frames arrive whole and in
    // order both ways, indices agree with the driver's.
    #[test]
    fn round_trips_over_many_laps(
        size in 9u16..70,
        start in 0u16..70,
        wrap in any::<bool>(),
        ops in proptest::collection::vec((0u8..3, 1usize..4, 14usize..4000), 1..60),
    ) {
        let start = start % size;
        let mut tx = PackedDriver::new(size, start, wrap, 12);
        let mut rx = PackedDriver::new(size, start, wrap, 12);
        let mut qtx = device(&tx, feat(true, true, true));
        let mut qrx = device(&rx, feat(true, true, true));
        for (i, &(kind, n, len)) in ops.iter().enumerate() {
            let f = frame(len, i as u8);
            let layout = match kind {
                0 => TxLayout::Single,
                1 => TxLayout::Chained(n),
                _ => TxLayout::Indirect(n),
            };
            tx.send(&f, layout);
            let (b, got) = dequeue(&mut qtx);
            prop_assert_eq!(b.packets, 1);
            prop_assert_eq!(&got, &vec![f.clone()]);
            let u = tx.take_used();
            tx.forget(&u);
            let need = (len + 12).div_ceil(1024);
            rx.post_rx(need, 1024);
            let e = qrx.enqueue(&pkts(&got));
            prop_assert_eq!(e.packets, 1);
            let r = rx.recv(true);
            prop_assert_eq!(r.len(), 1);
            prop_assert_eq!(&r[0].1, &f);
            prop_assert_eq!(qtx.used_idx(), tx.used_base());
            prop_assert_eq!(qrx.used_idx(), rx.used_base());
        }
        prop_assert!(qtx.broken().is_none() && qrx.broken().is_none());
    }

    // The packed event rule agrees with a model over unbounded positions.
    #[test]
    fn need_event_packed_matches_model(size in 1u16..300, old in 0u32..100_000, step in 0u32..300, ev in 0u32..600) {
        let step = step % (u32::from(size) + 1);
        let s = u32::from(size);
        // Lap l has wrap counter (l + 1) % 2 == 1 for even l (the first lap is wrap 1).
        let pos = |x: u32| ((x % s) as u16, (x / s).is_multiple_of(2));
        let new = old + step;
        let evx = old + ev % (2 * s);
        let want = evx < new;
        prop_assert_eq!(need_event_packed(pos(evx), pos(new), pos(old), size), want);
    }
}

#[test]
fn sizes_and_bases() {
    assert!(valid_size(1) && valid_size(100) && valid_size(32768));
    assert!(!valid_size(0) && !valid_size(32769));
    assert_eq!(split_base(join_base(1234, true)), (1234, true));
    assert_eq!(split_base(5), (5, false));
    let _ = MOCK_BUF;
}

/// Device-side cost per packet of 32 × 64-byte bursts on packed rings, driver refills
/// excluded (the packed twin of `tests::burst_cost`). Run with
/// `cargo test --release -p virtq -- --ignored --nocapture burst_cost`.
#[test]
#[ignore]
fn burst_cost_packed() {
    let size = 256u16;
    let mut tx = PackedDriver::new(size, 0, true, 12);
    let mut rx = PackedDriver::new(size, 0, true, 12);
    let mut qtx = device(&tx, feat(true, true, false));
    let mut qrx = device(&rx, feat(true, true, false));
    for i in 0..size {
        tx.send(&frame(64, i as u8), TxLayout::Single);
    }
    rx.post_rx(usize::from(size), 2048);
    tx.set_event(EVENT_F_DISABLE, 0);
    rx.set_event(EVENT_F_DISABLE, 0);
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let iters = 200_000u32;
    let (mut t_deq, mut t_enq) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    let mut n = 0u64;
    for i in 0..iters {
        let t0 = std::time::Instant::now();
        let d = qtx.dequeue(&mut pool, &mut out);
        let t1 = std::time::Instant::now();
        let e = qrx.enqueue(out.as_slice());
        let t2 = std::time::Instant::now();
        assert_eq!((d.packets, e.packets), (32, 32), "iteration {i}");
        n += 32;
        pool.put_batch(&mut out);
        t_deq += t1 - t0;
        t_enq += t2 - t1;
        // The driver takes the used descriptors and posts 32 buffers again (not timed).
        let u = tx.take_used();
        tx.forget(&u);
        for k in 0..32u8 {
            tx.send(&frame(64, k), TxLayout::Single);
        }
        let _ = rx.take_used();
        rx.post_rx(32, 2048);
    }
    let mhz = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(1000.0);
    let per = |t: std::time::Duration| t.as_nanos() as f64 / n as f64;
    eprintln!(
        "BURST COST PACKED: dequeue {:.1} ns/pkt ({:.0} cycles), enqueue {:.1} ns/pkt ({:.0} cycles) at {mhz:.0} MHz",
        per(t_deq),
        per(t_deq) * mhz / 1000.0,
        per(t_enq),
        per(t_enq) * mhz / 1000.0
    );
    assert!(n > 0);
}

/// Time one packed-ring burst takes when a hostile guest makes it spend the whole budget
/// (the packed twin of `budget_tests::budget_cost`): chains of `MAX_CHAIN` zero-length
/// descriptors, indirect tables of 1024 entries (cut at `MAX_CHAIN`), zero-length mergeable
/// heads (enqueue). Driver refills are not timed. Run with
/// `cargo test --release -p virtq -- --ignored --nocapture budget_cost`.
#[test]
#[ignore]
fn budget_cost_packed() {
    let iters = 5_000u32;
    let report = |what: &str, t: std::time::Duration, descs: u64| {
        let ns = t.as_nanos() as f64 / f64::from(iters);
        eprintln!(
            "BUDGET COST PACKED {what}: {ns:.0} ns/burst, {:.1} descriptors/burst, {:.2} ns/descriptor",
            descs as f64 / f64::from(iters),
            t.as_nanos() as f64 / descs as f64
        );
    };
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let mut drv = PackedDriver::new(4096, 0, true, 12);
    let mut q = device(&drv, feat(false, true, false));
    drv.set_event(EVENT_F_DISABLE, 0);
    let a = drv.buf_addr(0);
    let chain = vec![(a, 0u32, 0u16); MAX_CHAIN as usize];
    let (mut t, mut descs) = (std::time::Duration::ZERO, 0u64);
    for _ in 0..iters {
        while drv.free() >= MAX_CHAIN as u16 {
            drv.post_chain(&chain);
        }
        let t0 = std::time::Instant::now();
        let b = q.dequeue(&mut pool, &mut out);
        t += t0.elapsed();
        assert_eq!(b.descs, BURST_BUDGET);
        descs += u64::from(b.descs);
        let u = drv.take_used();
        drv.forget(&u);
    }
    report("zero-length chains of MAX_CHAIN (dequeue)", t, descs);
    let mut drv = PackedDriver::new(256, 0, true, 12);
    let mut q = device(&drv, feat(false, true, false));
    drv.set_event(EVENT_F_DISABLE, 0);
    let table = drv.table_addr(0);
    drv.write_table(table, &vec![(a, 0, 0); crate::ring::MAX_INDIRECT as usize]);
    let ind = [(table, crate::ring::MAX_INDIRECT * 16, DESC_F_INDIRECT)];
    let (mut t, mut descs) = (std::time::Duration::ZERO, 0u64);
    for _ in 0..iters {
        while drv.free() > 0 {
            drv.post_chain(&ind);
        }
        let t0 = std::time::Instant::now();
        let b = q.dequeue(&mut pool, &mut out);
        t += t0.elapsed();
        assert_eq!(b.descs, BURST_BUDGET);
        descs += u64::from(b.descs);
        let u = drv.take_used();
        drv.forget(&u);
    }
    report("indirect tables of 1024 (dequeue)", t, descs);
    let mut drv = PackedDriver::new(4096, 0, true, 12);
    let mut q = device(&drv, feat(true, false, false));
    for _ in 0..800 {
        drv.post_rx_chain(&[0; 5]);
    }
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
