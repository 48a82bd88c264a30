//! Device queue against the mock driver: layouts, mergeable rx, event-idx, hostile rings.
use crate::mock::{MockDriver, TxLayout, MOCK_BASE};
use crate::ring::*;
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

fn device(drv: &MockDriver, f: NetFeatures, start: u16) -> Queue {
    Queue::new(drv.mem(), drv.addrs(), f, start, start).unwrap()
}

fn frame(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn dequeue_all(q: &mut Queue) -> (Burst, Vec<Vec<u8>>) {
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let b = q.dequeue(&mut pool, &mut out);
    let v = out.drain().map(|p| p.data().to_vec()).collect();
    (b, v)
}

#[test]
fn dequeue_single_chained_and_indirect_layouts() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(false, true, false), 0);
    let frames: Vec<Vec<u8>> = (0..6).map(|i| frame(60 + i * 300, i as u8)).collect();
    let layouts = [
        TxLayout::Single,
        TxLayout::Chained(1),
        TxLayout::Chained(4),
        TxLayout::Indirect(1),
        TxLayout::Indirect(5),
        TxLayout::Single,
    ];
    for (f, l) in frames.iter().zip(layouts) {
        drv.send(f, l);
    }
    let (b, got) = dequeue_all(&mut q);
    assert_eq!(b.packets, 6);
    assert_eq!(got, frames);
    assert_eq!(drv.take_used().len(), 6);
    assert_eq!(q.last_avail(), 6);
    // We poll: the device asked the driver not to kick.
    assert_eq!(drv.used_flags(), VRING_USED_F_NO_NOTIFY);
}

/// A frontend that lost track of the ring (reconnect after the backend died) activates it with
/// base 0 while the ring stands at 1000: resyncing to the used ring lets traffic continue
/// instead of breaking the queue on an "avail jump".
#[test]
fn resync_to_used_ring_resumes_where_the_ring_stands() {
    let mut drv = MockDriver::new(64, 1000, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    assert!(q.resync_to_used_ring());
    assert_eq!(q.last_avail(), 1000);
    assert!(!q.resync_to_used_ring(), "already where the ring stands");
    let f = frame(100, 7);
    drv.send(&f, TxLayout::Single);
    let (b, got) = dequeue_all(&mut q);
    assert_eq!((b.packets, got), (1, vec![f]));
    assert!(q.broken().is_none());
    assert_eq!(drv.take_used().len(), 1);
    // Without the resync the same activation breaks the queue on the first poll.
    let mut stale = device(&drv, feat(false, false, false), 0);
    drv.send(&frame(60, 1), TxLayout::Single);
    let _ = dequeue_all(&mut stale);
    assert!(stale.broken().is_some());
}

#[test]
fn dequeue_takes_at_most_a_batch() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    for i in 0..40 {
        drv.send(&frame(64, i), TxLayout::Single);
    }
    assert_eq!(dequeue_all(&mut q).0.packets, 32);
    assert_eq!(dequeue_all(&mut q).0.packets, 8);
    assert_eq!(dequeue_all(&mut q).0.packets, 0);
}

#[test]
fn indirect_refused_when_not_negotiated() {
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.send(&frame(100, 1), TxLayout::Indirect(2));
    drv.send(&frame(100, 2), TxLayout::Single);
    let (b, got) = dequeue_all(&mut q);
    assert_eq!((b.packets, b.malformed), (1, 1));
    assert_eq!(got, vec![frame(100, 2)]);
    // The bad chain is still returned to the driver.
    assert_eq!(drv.take_used().len(), 2);
}

#[test]
fn enqueue_without_mrg_uses_one_chain_per_packet() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.post_rx(2, 2048);
    drv.post_rx_chain(&[12, 100, 2000]);
    let pkts: Vec<Packet> = (0..4)
        .map(|i| Packet::from_slice(&frame(1000, i)))
        .collect();
    let b = q.enqueue(&pkts);
    assert_eq!((b.packets, b.full), (3, 1));
    let got = drv.recv(false);
    assert_eq!(got.len(), 3);
    for (i, (nbuf, f)) in got.iter().enumerate() {
        assert_eq!(*nbuf, 1);
        assert_eq!(f, &frame(1000, i as u8));
    }
}

/// A frame too big for the guest's plain buffer is dropped and ends the burst (no retry with
/// the next packet); the buffer stays for the next burst.
#[test]
fn enqueue_too_big_without_mrg_keeps_the_buffer() {
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.post_rx(1, 256);
    let pkts = [
        Packet::from_slice(&frame(1000, 1)),
        Packet::from_slice(&frame(200, 2)),
    ];
    let b = q.enqueue(&pkts);
    assert_eq!((b.packets, b.too_big, b.cut), (0, 1, 1));
    let b = q.enqueue(&pkts[1..]);
    assert_eq!(b.packets, 1);
    assert_eq!(drv.recv(false), vec![(1, frame(200, 2))]);
}

#[test]
fn enqueue_mergeable_spreads_over_buffers() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(true, false, false), 0);
    drv.post_rx(20, 1024);
    let big = frame(3000, 9);
    let pkts = [Packet::from_slice(&big), Packet::from_slice(&frame(60, 3))];
    let b = q.enqueue(&pkts);
    assert_eq!(b.packets, 2);
    let got = drv.recv(true);
    assert_eq!(got, vec![(3, big), (1, frame(60, 3))]);
    // Not enough buffers left for a 20 KB packet → full, nothing consumed.
    let huge = Packet::from_slice(&frame(9000, 1));
    drv.post_rx(0, 0);
    let before = q.last_avail();
    let mut small = MockDriver::new(16, 0, 12);
    small.post_rx(2, 512);
    let mut q2 = device(&small, feat(true, false, false), 0);
    assert_eq!(q2.enqueue(std::slice::from_ref(&huge)).full, 1);
    assert_eq!(q2.last_avail(), 0);
    assert_eq!(q.last_avail(), before);
}

#[test]
fn event_idx_notifies_only_when_asked() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = device(&drv, feat(true, false, true), 0);
    drv.post_rx(10, 2048);
    drv.set_used_event(5);
    let one = [Packet::from_slice(&frame(60, 0))];
    let mut notes = Vec::new();
    for _ in 0..8 {
        notes.push(q.enqueue(&one).notify);
    }
    // used idx goes 1..=8; the driver asked to hear when entry 5 is used (idx passes 6).
    assert_eq!(
        notes,
        [false, false, false, false, false, true, false, false]
    );
    // Without event-idx, NO_INTERRUPT decides.
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.post_rx(4, 2048);
    drv.set_no_interrupt(true);
    assert!(!q.enqueue(&one).notify);
    drv.set_no_interrupt(false);
    assert!(q.enqueue(&one).notify);
    // An empty burst never notifies.
    let drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    let mut pool = Pool::new(0, 4);
    assert!(!q.dequeue(&mut pool, &mut Batch::new()).notify);
}

#[test]
fn hostile_descriptors_drop_packets_not_the_queue() {
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, true, false), 0);
    let bad = [
        // Outside memory.
        Desc {
            addr: 0xdead_0000_0000,
            len: 100,
            flags: 0,
            next: 0,
        },
        // Address + len overflows.
        Desc {
            addr: u64::MAX - 10,
            len: 100,
            flags: 0,
            next: 0,
        },
        // Shorter than the virtio-net header.
        Desc {
            addr: MOCK_BASE,
            len: 8,
            flags: 0,
            next: 0,
        },
        // Device-writable in a tx chain.
        Desc {
            addr: drv.buf_addr(0),
            len: 100,
            flags: VIRTQ_DESC_F_WRITE,
            next: 0,
        },
        // next beyond the table.
        Desc {
            addr: drv.buf_addr(0),
            len: 100,
            flags: VIRTQ_DESC_F_NEXT,
            next: 99,
        },
        // Indirect table not a multiple of 16.
        Desc {
            addr: drv.buf_addr(0),
            len: 17,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        },
        // Indirect with NEXT.
        Desc {
            addr: drv.buf_addr(0),
            len: 32,
            flags: VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_NEXT,
            next: 1,
        },
        // Oversized frame.
        Desc {
            addr: drv.buf_addr(0),
            len: 12 + 9217,
            flags: 0,
            next: 0,
        },
    ];
    for (i, d) in bad.iter().enumerate() {
        drv.write_desc(i as u16, *d);
        drv.push_avail(i as u16);
    }
    let (b, got) = dequeue_all(&mut q);
    assert!(got.is_empty());
    assert_eq!((b.malformed, b.too_big), (7, 1));
    assert!(q.broken().is_none());
    assert_eq!(drv.take_used().len(), bad.len());
}

#[test]
fn loops_and_nested_indirect_end() {
    let mut drv = MockDriver::new(8, 0, 12);
    let mut q = device(&drv, feat(false, true, false), 0);
    // 0 -> 1 -> 0 -> ...
    let b0 = drv.buf_addr(0);
    drv.write_desc(
        0,
        Desc {
            addr: b0,
            len: 16,
            flags: VIRTQ_DESC_F_NEXT,
            next: 1,
        },
    );
    drv.write_desc(
        1,
        Desc {
            addr: b0,
            len: 16,
            flags: VIRTQ_DESC_F_NEXT,
            next: 0,
        },
    );
    drv.push_avail(0);
    // Indirect table whose entry is itself indirect, and one that loops on itself.
    let t = drv.buf_addr(2);
    let nested = Desc {
        addr: t,
        len: 32,
        flags: VIRTQ_DESC_F_INDIRECT,
        next: 0,
    };
    let selfloop = Desc {
        addr: b0,
        len: 16,
        flags: VIRTQ_DESC_F_NEXT,
        next: 1,
    };
    let mem = drv.mem();
    mem.write(t, &nested.to_bytes()).unwrap();
    mem.write(t + 16, &selfloop.to_bytes()).unwrap();
    drv.write_desc(
        2,
        Desc {
            addr: t,
            len: 32,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        },
    );
    drv.push_avail(2);
    drv.write_desc(
        3,
        Desc {
            addr: t + 16,
            len: 16,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        },
    );
    drv.push_avail(3);
    let (b, _) = dequeue_all(&mut q);
    assert_eq!(b.malformed, 3);
    assert!(q.broken().is_none());
}

#[test]
fn avail_jump_and_bad_head_break_the_queue() {
    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.set_avail_idx(17);
    let (b, _) = dequeue_all(&mut q);
    assert!(b.broke);
    assert_eq!(q.broken(), Some(Broken::AvailJump));
    // Broken stays broken; enqueue counts its drops.
    let e = q.enqueue(&[Packet::from_slice(&[1, 2, 3])]);
    assert_eq!(e.broken_drops, 1);
    assert!(!e.broke);

    let mut drv = MockDriver::new(16, 0, 12);
    let mut q = device(&drv, feat(false, false, false), 0);
    drv.send(&frame(64, 1), TxLayout::Single);
    drv.push_avail(16);
    drv.send(&frame(64, 2), TxLayout::Single);
    let (b, got) = dequeue_all(&mut q);
    assert!(b.broke);
    assert_eq!(got, vec![frame(64, 1)]);
    assert_eq!(q.broken(), Some(Broken::BadHead));
    // The chain done before the bad entry is still returned.
    assert_eq!(drv.used_idx(), 1);
}

#[test]
fn activation_checks_ring_placement() {
    let drv = MockDriver::new(16, 0, 12);
    let mut a = drv.addrs();
    a.size = 12;
    assert!(matches!(
        Queue::new(drv.mem(), a, NetFeatures::default(), 0, 0),
        Err(QueueError::BadSize(12))
    ));
    let mut a = drv.addrs();
    a.used = 0x10;
    assert!(Queue::new(drv.mem(), a, NetFeatures::default(), 0, 0).is_err());
    let mut a = drv.addrs();
    a.desc += 8;
    assert!(Queue::new(drv.mem(), a, NetFeatures::default(), 0, 0).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    // Packets come through in order, intact, across the 16-bit index wraparound, for any
    // starting index, ring size and mix of bursts.
    #[test]
    fn round_trip_across_index_wrap(start in 65000u16..=65535, size_log in 2u32..7, bursts in proptest::collection::vec(1usize..40, 1..8), mrg in any::<bool>()) {
        let size = 1u16 << size_log;
        let mut tx = MockDriver::new(size, start, 12);
        let mut rx = MockDriver::new(size, start, 12);
        let mut qtx = device(&tx, feat(false, true, false), start);
        let mut qrx = device(&rx, feat(mrg, true, false), start);
        let mut pool = Pool::new(0, 64);
        let mut seq = 0u32;
        let mut expect = 0u32;
        for n in bursts {
            // Chained sends take up to 3 descriptors each.
            let n = n.min(usize::from(size) / 3).max(1);
            for _ in 0..n {
                let len = 60 + (seq as usize * 37) % 1400;
                let layout = match seq % 3 { 0 => TxLayout::Single, 1 => TxLayout::Chained(2), _ => TxLayout::Indirect(3) };
                let mut f = frame(len, seq as u8);
                f[..4].copy_from_slice(&seq.to_le_bytes());
                tx.send(&f, layout);
                seq += 1;
            }
            rx.post_rx(n.min(usize::from(size)), 2048);
            let mut out = Batch::new();
            let mut got = 0;
            while got < n {
                let b = qtx.dequeue(&mut pool, &mut out);
                prop_assert!(b.packets > 0);
                got += b.packets as usize;
                let e = qrx.enqueue(out.as_slice());
                prop_assert_eq!(e.packets, b.packets);
                pool.put_batch(&mut out);
            }
            tx.take_used();
            for (_, f) in rx.recv(mrg) {
                prop_assert_eq!(u32::from_le_bytes([f[0], f[1], f[2], f[3]]), expect);
                prop_assert_eq!(f.len(), 60 + (expect as usize * 37) % 1400);
                expect += 1;
            }
        }
        prop_assert_eq!(expect, seq);
        prop_assert!(qtx.broken().is_none() && qrx.broken().is_none());
    }
}

/// Device-side cost per packet of 32 × 64-byte bursts, driver refills excluded. Run with
/// `cargo test --release -p virtq -- --ignored --nocapture burst_cost`.
#[test]
#[ignore]
fn burst_cost() {
    let size = 256u16;
    let mut tx = MockDriver::new(size, 0, 12);
    let mut rx = MockDriver::new(size, 0, 12);
    for i in 0..size {
        tx.send(&frame(64, i as u8), TxLayout::Single);
    }
    rx.post_rx(usize::from(size), 2048);
    let mut qtx = device(&tx, feat(true, true, false), 0);
    let mut qrx = device(&rx, feat(true, true, false), 0);
    rx.set_no_interrupt(true);
    tx.set_no_interrupt(true);
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
        // The driver hands the same buffers back (used entries are not read: the rings are
        // the device's cost only).
        tx.advance_avail(32);
        rx.advance_avail(32);
    }
    let mhz = cpu_mhz();
    let per = |t: std::time::Duration| t.as_nanos() as f64 / n as f64;
    eprintln!(
        "BURST COST: dequeue {:.1} ns/pkt ({:.0} cycles), enqueue {:.1} ns/pkt ({:.0} cycles) at {mhz:.0} MHz",
        per(t_deq),
        per(t_deq) * mhz / 1000.0,
        per(t_enq),
        per(t_enq) * mhz / 1000.0
    );
    assert!(n > 0);
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
