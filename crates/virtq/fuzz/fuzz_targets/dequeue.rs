//! Dequeue (and enqueue) over fuzzer-written guest memory.
//!
//! Input: `[size_log][flags][last_avail lo][last_avail hi]` then bytes copied over a 64 KiB
//! guest (two 32 KiB regions at 0 and 32 KiB, so accesses may straddle them). The rings sit at
//! fixed addresses inside it; everything else (descriptors, indices, indirect tables) is the
//! fuzzer's. Flag bit 64 turns one copy for large frames on (threshold from the first byte of
//! the body): packets keep their tail in guest memory, are sent into the same guest's rx ring
//! (tails copied guest to guest from the table the batch holds, possibly over the very buffers
//! they come from) and their chains come back with the next burst.
#![no_main]

use guestmem::GuestMemory;
use libfuzzer_sys::fuzz_target;
use packet::{Batch, Packet, Pool};
use std::sync::Arc;
use virtq::{NetFeatures, Queue, RingAddrs};

const HALF: u64 = 32 * 1024;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let size = 1u16 << (data[0] % 9);
    let flags = data[1];
    let last = u16::from_le_bytes([data[2], data[3]]);
    let mem = Arc::new(GuestMemory::anonymous(&[(0, HALF), (HALF, HALF)]).unwrap());
    let body = &data[4..];
    let _ = mem.write(0, &body[..body.len().min(2 * HALF as usize)]);
    let feat = NetFeatures {
        hdr_len: if flags & 1 != 0 { 12 } else { 10 },
        mrg_rxbuf: flags & 2 != 0,
        indirect: flags & 4 != 0,
        event_idx: flags & 8 != 0,
        // Offloads on: every chain's virtio-net header is read and checked.
        host: if flags & 16 != 0 {
            packet::vnet::Offloads::ALL
        } else {
            packet::vnet::Offloads::default()
        },
        guest: if flags & 32 != 0 {
            packet::vnet::Offloads::ALL
        } else {
            packet::vnet::Offloads::default()
        },
    };
    // desc at 0 (4 KiB for 256 entries), avail at 4 KiB, used at 8 KiB.
    let addrs = RingAddrs {
        size,
        desc: 0,
        avail: 4096,
        used: 8192,
    };
    let Ok(mut q) = Queue::new(Arc::clone(&mem), addrs, feat, last, last) else {
        return;
    };
    let one_copy = flags & 64 != 0;
    if one_copy {
        q.set_one_copy(Some(usize::from(body.first().copied().unwrap_or(0)) * 8));
    }
    let mut rx = Queue::new(Arc::clone(&mem), addrs, feat, last, last).ok();
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::taking_tails();
    for _ in 0..3 {
        let b = q.dequeue(&mut pool, &mut out);
        assert!(b.one_copy == 0 || one_copy);
        assert_eq!(
            out.as_slice().iter().filter(|p| p.has_tail()).count(),
            b.one_copy as usize
        );
        // The batch holds the queue's table exactly when a tail was deferred.
        assert_eq!(
            out.tails().is_some_and(|m| Arc::ptr_eq(m, &mem)),
            b.one_copy > 0
        );
        for p in out.as_slice() {
            if let Some(t) = p.tail() {
                // The head decided the key, the whole frame fits a buffer, the tail is in
                // memory, and every chain of the burst is held.
                assert_eq!(p.len(), virtq::copy::HEAD_LEN);
                assert!(p.frame_len() <= packet::MAX_FRAME);
                assert!(mem.contains(t.gpa, u64::from(t.len)));
                assert!(!p.meta.has_offload());
                assert_eq!(q.held(), (b.packets + b.malformed + b.too_big) as usize
                    + b.vnet.iter().sum::<u32>() as usize);
            }
        }
        if let Some(rx) = rx.as_mut() {
            let e = rx.enqueue_from(out.as_slice(), out.tails().map(|m| &**m));
            assert!(e.one_copy <= b.one_copy);
        }
        assert!(b.packets as usize == out.len());
        assert!(out.as_slice().iter().all(|p| {
            // A frame above a standard buffer only as a checked GSO frame.
            p.len() <= packet::MAX_FRAME
                || matches!(p.meta.offload(), packet::Offload::Tso { .. })
                    && p.len() <= packet::MAX_LARGE_FRAME
        }));
        // Every offload a packet carries lies inside it.
        for p in out.as_slice() {
            match p.meta.offload() {
                packet::Offload::None => {}
                packet::Offload::Csum { start, offset } => {
                    assert!(usize::from(start) + usize::from(offset) + 2 <= p.len())
                }
                packet::Offload::Tso { l4, .. } => assert!(usize::from(l4) + 20 <= p.len()),
            }
        }
        // Every burst stays within the descriptor budget.
        assert!(b.descs <= virtq::BURST_BUDGET);
        pool.put_batch(&mut out);
    }
    // The same memory as a guest rx ring.
    let Ok(mut q) = Queue::new(mem, addrs, feat, last, last) else {
        return;
    };
    let pkts: Vec<Packet> = [60usize, 1500, 9000]
        .iter()
        .map(|&n| Packet::from_slice(&vec![0xab; n]))
        .collect();
    let e = q.enqueue(&pkts);
    assert_eq!(
        (e.packets + e.malformed + e.too_big + e.full + e.cut + e.broken_drops) as usize,
        pkts.len()
    );
    assert!(e.descs <= virtq::BURST_BUDGET);
});
