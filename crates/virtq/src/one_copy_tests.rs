//! One copy for large frames: a split queue's dequeue leaves a large frame's tail in the
//! sender's buffer and holds the chain; split and packed enqueues copy that tail straight into
//! the receiving guest (mergeable or not); the held chains come back, once, with the next
//! dequeue or `return_held`, whatever happened to the packets.
use crate::copy::{HEAD_LEN, ONE_COPY_MIN};
use crate::mock::{MockDriver, TxLayout, MOCK_BUF};
use crate::mock_packed::PackedDriver;
use crate::*;
use packet::{Batch, Pool};

fn feat(mrg: bool) -> NetFeatures {
    NetFeatures {
        hdr_len: 12,
        mrg_rxbuf: mrg,
        indirect: true,
        ..NetFeatures::default()
    }
}

/// An Ethernet frame of `n` bytes with EtherType `et` and a position-dependent payload.
fn eth(n: usize, et: u16, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..n)
        .map(|i| ((i * 31) as u8).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect();
    f[12..14].copy_from_slice(&et.to_be_bytes());
    f[14] = 0x45;
    f
}

fn source(one_copy: bool) -> (MockDriver, Queue) {
    let drv = MockDriver::new(64, 0, 12);
    let mut q = Queue::new(drv.mem(), drv.addrs(), feat(false), 0, 0).unwrap();
    q.set_one_copy(if one_copy { None } else { Some(0) });
    (drv, q)
}

/// Large IPv4 frames (single, chained and indirect layouts), a small one, and a large IPv6
/// frame with an extension header (its head cannot decide its key: copied whole).
fn send_mix(drv: &mut MockDriver) -> (Vec<Vec<u8>>, u32) {
    let mut v6 = eth(1400, 0x86dd, 9);
    v6[14] = 0x60;
    v6[14 + 6] = 0; // hop-by-hop options first
    let frames = vec![
        eth(1518, 0x0800, 1),
        eth(ONE_COPY_MIN, 0x0800, 2),
        eth(100, 0x0800, 3),
        eth(1518, 0x0800, 4),
        v6,
        eth(9000, 0x0800, 5),
    ];
    let layouts = [
        TxLayout::Single,
        TxLayout::Chained(1),
        TxLayout::Single,
        TxLayout::Indirect(1),
        TxLayout::Single,
        TxLayout::Single,
    ];
    for (f, l) in frames.iter().zip(layouts) {
        drv.send(f, l);
    }
    (frames, 4)
}

#[test]
fn split_tx_to_split_rx_moves_tails_guest_to_guest_and_holds_the_chains() {
    for mrg in [false, true] {
        let (mut a, mut qa) = source(true);
        let (frames, deferred) = send_mix(&mut a);
        let mut pool = Pool::new(0, 64);
        let mut out = Batch::taking_tails();
        let b = qa.dequeue(&mut pool, &mut out);
        assert_eq!((b.packets, b.one_copy), (6, deferred));
        let total: usize = frames.iter().map(Vec::len).sum();
        assert_eq!(b.bytes, total as u64);
        for (p, f) in out.as_slice().iter().zip(&frames) {
            assert_eq!(p.frame_len(), f.len());
            if p.has_tail() {
                assert_eq!(p.data(), &f[..HEAD_LEN]);
            } else {
                assert_eq!(p.data(), &f[..]);
            }
        }
        // Nothing returned yet: the tails are still read from those buffers.
        assert!(a.take_used().is_empty());
        assert_eq!((qa.held(), qa.last_avail()), (6, 6));

        let mut bdrv = MockDriver::new(256, 0, 12);
        if mrg {
            bdrv.post_rx(128, 700);
        } else {
            bdrv.post_rx(6, MOCK_BUF as u32);
        }
        let mut qb = Queue::new(bdrv.mem(), bdrv.addrs(), feat(mrg), 0, 0).unwrap();
        let e = qb.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
        assert_eq!((e.packets, e.one_copy), (6, deferred));
        assert_eq!(e.bytes, total as u64);
        let got: Vec<Vec<u8>> = bdrv.recv(mrg).into_iter().map(|(_, f)| f).collect();
        assert_eq!(
            got, frames,
            "mergeable={mrg}: every frame arrives bit-exact"
        );
        pool.put_batch(&mut out);

        // The next dequeue (after the burst was sent on) returns all six, in order, once.
        let b2 = qa.dequeue(&mut pool, &mut out);
        assert_eq!(b2.packets, 0);
        let used = a.take_used();
        assert_eq!(used.iter().map(|u| u.0).collect::<Vec<_>>().len(), 6);
        assert!(used.windows(2).all(|w| w[0].0 < w[1].0), "{used:?}");
        qa.dequeue(&mut pool, &mut out);
        assert!(a.take_used().is_empty());
        assert_eq!(qa.held(), 0);
    }
}

#[test]
fn split_tx_to_packed_rx_moves_tails_guest_to_guest() {
    for mrg in [false, true] {
        let (mut a, mut qa) = source(true);
        let (frames, deferred) = send_mix(&mut a);
        let mut pool = Pool::new(0, 64);
        let mut out = Batch::taking_tails();
        assert_eq!(qa.dequeue(&mut pool, &mut out).one_copy, deferred);
        let mut pdrv = PackedDriver::new(256, 0, true, 12);
        let base = pdrv.avail_base();
        let mut qp = PackedQueue::new(pdrv.mem(), pdrv.addrs(), feat(mrg), base, base).unwrap();
        if mrg {
            pdrv.post_rx(64, 1024);
        } else {
            pdrv.post_rx(6, MOCK_BUF as u32);
        }
        let e = qp.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
        assert_eq!((e.packets, e.one_copy), (6, deferred));
        let got: Vec<Vec<u8>> = pdrv.recv(mrg).into_iter().map(|(_, f)| f).collect();
        assert_eq!(got, frames, "packed, mergeable={mrg}");
        pool.put_batch(&mut out);
        assert!(qa.return_held() || a.used_idx() == 6);
        assert_eq!(a.take_used().len(), 6);
    }
}

#[test]
fn what_was_classified_was_copied_and_a_later_write_changes_only_the_payload() {
    let (mut a, mut qa) = source(true);
    let f = eth(1500, 0x0800, 7);
    let head = a.send(&f, TxLayout::Single);
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::taking_tails();
    assert_eq!(qa.dequeue(&mut pool, &mut out).one_copy, 1);
    // The guest rewrites its whole buffer (headers and payload) while we hold the chain.
    let junk = vec![0xeeu8; 12 + f.len()];
    a.mem().write(a.buf_addr(head), &junk).unwrap();
    let mut bdrv = MockDriver::new(64, 0, 12);
    bdrv.post_rx(1, 4096);
    let mut qb = Queue::new(bdrv.mem(), bdrv.addrs(), feat(false), 0, 0).unwrap();
    qb.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
    let got = bdrv.recv(false).remove(0).1;
    assert_eq!(&got[..HEAD_LEN], &f[..HEAD_LEN], "headers as classified");
    assert!(
        got[HEAD_LEN..].iter().all(|&x| x == 0xee),
        "its own payload"
    );
    pool.put_batch(&mut out);
}

#[test]
fn dropped_packets_and_bad_chains_still_return_every_chain_once() {
    let (mut a, mut qa) = source(true);
    a.send(&eth(1518, 0x0800, 1), TxLayout::Single);
    // A chain whose second descriptor points outside guest memory: malformed.
    a.send(&eth(1518, 0x0800, 2), TxLayout::Chained(1));
    let bad = crate::ring::Desc {
        addr: 0xdead_0000_0000,
        len: 1518,
        flags: 0,
        next: 0,
    };
    a.write_desc(2, bad);
    a.send(&eth(1518, 0x0800, 3), TxLayout::Single);
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::taking_tails();
    let b = qa.dequeue(&mut pool, &mut out);
    assert_eq!((b.packets, b.malformed, b.one_copy), (2, 1, 2));
    assert!(a.take_used().is_empty());
    // Every packet dropped (no output), then the queue stops: all three come back once.
    pool.put_batch(&mut out);
    qa.return_held();
    let used = a.take_used();
    assert_eq!(used.len(), 3, "{used:?}");
    assert!(used.iter().all(|u| u.1 == 0));
    qa.dequeue(&mut pool, &mut out);
    assert!(!qa.return_held());
    assert!(a.take_used().is_empty());
    // A burst without a deferred tail returns its chains at once, as before.
    a.send(&eth(300, 0x0800, 4), TxLayout::Single);
    let b = qa.dequeue(&mut pool, &mut out);
    assert_eq!((b.packets, b.one_copy), (1, 0));
    assert_eq!(a.take_used().len(), 1);
}

#[test]
fn a_batch_holds_one_table_for_its_tails_and_never_mixes_two() {
    let (mut a, mut qa) = source(true);
    let (mut c, mut qc) = source(true);
    let fa = eth(1518, 0x0800, 1);
    let fc = eth(1518, 0x0800, 2);
    a.send(&fa, TxLayout::Single);
    c.send(&fc, TxLayout::Single);
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::taking_tails();
    assert!(out.tails().is_none());
    assert_eq!(qa.dequeue(&mut pool, &mut out).one_copy, 1);
    // The batch holds A's table once for the burst.
    assert!(out
        .tails()
        .is_some_and(|m| std::sync::Arc::ptr_eq(m, &a.mem())));
    // A second queue's burst into the same batch (another table): its frames come whole.
    let b = qc.dequeue(&mut pool, &mut out);
    assert_eq!((b.packets, b.one_copy), (1, 0));
    assert_eq!(out.as_slice()[1].data(), &fc[..]);
    assert_eq!(c.take_used().len(), 1, "nothing deferred: returned at once");
    // An enqueue without the table does not send a packet with a tail: never resolved
    // against another guest's memory.
    let mut bdrv = MockDriver::new(64, 0, 12);
    bdrv.post_rx(2, 4096);
    let mut qb = Queue::new(bdrv.mem(), bdrv.addrs(), feat(false), 0, 0).unwrap();
    let e = qb.enqueue(out.as_slice());
    assert_eq!((e.packets, e.malformed, e.one_copy), (1, 1, 0));
    let got = bdrv.recv(false);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, fc);
    // With it, the same packet arrives bit-exact.
    let e = qb.enqueue_from(&out.as_slice()[..1], out.tails().map(|m| &**m));
    assert_eq!((e.packets, e.one_copy), (1, 1));
    assert_eq!(bdrv.recv(false)[0].1, fa);
    // Given back, the batch lets the table go.
    pool.put_batch(&mut out);
    assert!(out.tails().is_none());
    qa.return_held();
    assert_eq!(a.take_used().len(), 1);
}

#[test]
fn off_by_default_and_a_tail_split_over_segments_is_copied_whole() {
    let (mut a, mut qa) = source(false);
    a.send(&eth(1518, 0x0800, 1), TxLayout::Single);
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::taking_tails();
    assert_eq!(qa.dequeue(&mut pool, &mut out).one_copy, 0);
    assert_eq!(a.take_used().len(), 1);
    pool.put_batch(&mut out);
    qa.set_one_copy(None);
    // Frame over four pieces: the tail spans segments, so no deferral.
    let f = eth(1518, 0x0800, 2);
    a.send(&f, TxLayout::Chained(4));
    let b = qa.dequeue(&mut pool, &mut out);
    assert_eq!((b.packets, b.one_copy), (1, 0));
    assert_eq!(out.as_slice()[0].data(), &f[..]);
    assert_eq!(a.take_used().len(), 1);
}

#[test]
fn packed_tx_holds_its_chains_and_its_tails_arrive_whole() {
    for mrg in [false, true] {
        let mut a = PackedDriver::new(64, 0, true, 12);
        let base = a.avail_base();
        let mut qa = PackedQueue::new(a.mem(), a.addrs(), feat(false), base, base).unwrap();
        qa.set_one_copy(None);
        let frames = vec![
            eth(1518, 0x0800, 1),
            eth(200, 0x0800, 2),
            eth(1200, 0x0800, 3),
            eth(3000, 0x0800, 4),
        ];
        let layouts = [
            TxLayout::Single,
            TxLayout::Single,
            TxLayout::Chained(1),
            TxLayout::Indirect(1),
        ];
        for (f, l) in frames.iter().zip(layouts) {
            a.send(f, l);
        }
        let mut pool = Pool::new(0, 16);
        let mut out = Batch::taking_tails();
        let b = qa.dequeue(&mut pool, &mut out);
        assert_eq!((b.packets, b.one_copy), (4, 3));
        assert!(a.take_used().is_empty(), "held while the tails are read");
        assert_eq!(qa.held(), 4);
        let mut bdrv = MockDriver::new(256, 0, 12);
        if mrg {
            bdrv.post_rx(32, 600);
        } else {
            bdrv.post_rx(4, 4096);
        }
        let mut qb = Queue::new(bdrv.mem(), bdrv.addrs(), feat(mrg), 0, 0).unwrap();
        let e = qb.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
        assert_eq!((e.packets, e.one_copy), (4, 3));
        let got: Vec<Vec<u8>> = bdrv.recv(mrg).into_iter().map(|(_, f)| f).collect();
        assert_eq!(got, frames);
        pool.put_batch(&mut out);
        // The next dequeue returns them, once, in ring order.
        qa.dequeue(&mut pool, &mut out);
        let used = a.take_used();
        assert_eq!(used.len(), 4, "{used:?}");
        qa.dequeue(&mut pool, &mut out);
        assert!(a.take_used().is_empty());
        // Held chains of a stopped queue come back through `return_held`.
        a.send(&frames[0], TxLayout::Single);
        assert_eq!(qa.dequeue(&mut pool, &mut out).one_copy, 1);
        pool.put_batch(&mut out);
        qa.return_held();
        assert_eq!(a.take_used().len(), 1);
        assert!(!qa.return_held());
    }
}

/// What a burst of 32 frames costs from guest A's tx ring to guest B's rx ring, with one copy
/// off and on, split into dequeue, enqueue and buffer return
/// (`cargo test --release -p virtq --lib one_copy_cost -- --ignored --nocapture`).
/// 256 buffers per ring, 16 KiB apart (4 MiB: the frames come from the last-level cache).
#[test]
#[ignore]
fn one_copy_cost() {
    use std::time::{Duration, Instant};
    for size in [256usize, 512, 1024, 1518] {
        for min in [0usize, 193, 512] {
            let mut a = MockDriver::new(256, 0, 12);
            let mut qa = Queue::new(a.mem(), a.addrs(), feat(true), 0, 0).unwrap();
            qa.set_one_copy(Some(min));
            let f = eth(size, 0x0800, 1);
            for _ in 0..256 {
                a.send(&f, TxLayout::Single);
            }
            let mut b = MockDriver::new(256, 0, 12);
            let mut qb = Queue::new(b.mem(), b.addrs(), feat(true), 0, 0).unwrap();
            let mut pool = Pool::new(0, 256);
            let mut out = Batch::taking_tails();
            let mut t = [Duration::ZERO; 3];
            let n = 30_000;
            for i in 0..n + 1000 {
                if i >= 8 {
                    a.advance_avail(32);
                }
                if i == 1000 {
                    t = [Duration::ZERO; 3];
                }
                let t0 = Instant::now();
                qa.dequeue(&mut pool, &mut out);
                b.post_rx(32, 2048);
                let t1 = Instant::now();
                let e = qb.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
                let t2 = Instant::now();
                pool.put_batch(&mut out);
                let t3 = Instant::now();
                assert_eq!(e.packets, 32);
                b.take_used();
                a.take_used();
                t[0] += t1 - t0;
                t[1] += t2 - t1;
                t[2] += t3 - t2;
            }
            let per = |d: Duration| d.as_nanos() as f64 / (n * 32) as f64;
            eprintln!(
                "{size:>5} B  one-copy min {min:>4}: dequeue {:6.1}  enqueue {:6.1}  put {:5.1}  total {:6.1} ns/pkt",
                per(t[0]),
                per(t[1]),
                per(t[2]),
                per(t[0] + t[1] + t[2])
            );
        }
    }
}
