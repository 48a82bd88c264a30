//! Packed-ring dequeue and enqueue over fuzzer-written guest memory.
//!
//! Input: `[size][flags][base lo][base hi]` then bytes copied over a 64 KiB guest (two 32 KiB
//! regions at 0 and 32 KiB, so accesses may straddle them). The descriptor table sits at 0
//! (any size 1..=256, not only powers of two), the driver event area at 4 KiB and the device
//! area at 8 KiB; everything else (descriptors, flags, ids, indirect tables, the resume base
//! with its wrap counter) is the fuzzer's.
#![no_main]

use guestmem::GuestMemory;
use libfuzzer_sys::fuzz_target;
use packet::{Batch, Packet, Pool};
use std::sync::Arc;
use virtq::{NetFeatures, PackedQueue, RingAddrs};

const HALF: u64 = 32 * 1024;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let size = u16::from(data[0]) + 1;
    let flags = data[1];
    let base = u16::from_le_bytes([data[2], data[3]]);
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
    let addrs = RingAddrs {
        size,
        desc: 0,
        avail: 4096,
        used: 8192,
    };
    let Ok(mut q) = PackedQueue::new(Arc::clone(&mem), addrs, feat, base, base) else {
        return;
    };
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::taking_tails();
    for _ in 0..3 {
        let b = q.dequeue(&mut pool, &mut out);
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
        assert!(b.descs <= virtq::BURST_BUDGET);
        // Indices stay inside the ring.
        assert!(q.last_avail() & 0x7fff < size && q.used_idx() & 0x7fff < size);
        pool.put_batch(&mut out);
    }
    let Ok(mut q) = PackedQueue::new(mem, addrs, feat, base, base) else {
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
    assert!(q.last_avail() & 0x7fff < size && q.used_idx() & 0x7fff < size);
});
