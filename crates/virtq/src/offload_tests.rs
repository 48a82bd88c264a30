//! Offloads through both ring layouts against the mock drivers: a checked virtio-net header
//! becomes the packet's offload, a hostile one drops the packet and is counted by reason,
//! GSO frames above a standard buffer get a large one, and enqueue writes the header the
//! packet's offload calls for.
use crate::mock::{MockDriver, TxLayout};
use crate::mock_packed::PackedDriver;
use crate::*;
use packet::vnet::{Offloads, VnetError};
use packet::{Batch, Offload, Packet, Pool, MAX_FRAME};

fn feat(on: bool) -> NetFeatures {
    NetFeatures {
        hdr_len: 12,
        mrg_rxbuf: true,
        indirect: true,
        event_idx: false,
        host: if on {
            Offloads::ALL
        } else {
            Offloads::default()
        },
        guest: if on {
            Offloads::ALL
        } else {
            Offloads::default()
        },
    }
}

/// An Ethernet + IPv4 + TCP frame with `payload` bytes of data.
fn tcp4(payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 54 + payload];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[14 + 9] = 6;
    f[34 + 12] = 5 << 4;
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    f
}

fn hdr(flags: u8, gso_type: u8, gso_size: u16, start: u16, off: u16) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = flags;
    h[1] = gso_type;
    h[2..4].copy_from_slice(&0xffffu16.to_le_bytes()); // hdr_len: never trusted
    h[4..6].copy_from_slice(&gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&start.to_le_bytes());
    h[8..10].copy_from_slice(&off.to_le_bytes());
    h
}

/// One case: header, frame, expected outcome.
type Case = ([u8; 12], Vec<u8>, Result<Offload, VnetError>);

/// The cases every layout must agree on.
fn cases() -> Vec<Case> {
    let small = tcp4(200);
    let big = tcp4(40_000);
    vec![
        ([0; 12], small.clone(), Ok(Offload::None)),
        (
            hdr(1, 0, 0, 34, 16),
            small.clone(),
            Ok(Offload::Csum {
                start: 34,
                offset: 16,
            }),
        ),
        (
            hdr(1, 1, 1448, 34, 16),
            big.clone(),
            Ok(Offload::Tso {
                v6: false,
                mss: 1448,
                l4: 34,
            }),
        ),
        // Checksum field past the end (CVE-2022-2132's class).
        (
            hdr(1, 0, 0, 250, 16),
            small.clone(),
            Err(VnetError::BadCsum),
        ),
        (
            hdr(1, 0, 0, 0xffff, 0xffff),
            small.clone(),
            Err(VnetError::BadCsum),
        ),
        // UDP GSO, ECN: never offered.
        (
            hdr(1, 3, 1448, 34, 16),
            big.clone(),
            Err(VnetError::BadGsoType),
        ),
        (
            hdr(1, 0x81, 1448, 34, 16),
            big.clone(),
            Err(VnetError::BadGsoType),
        ),
        // Zero MSS, offsets that are not the TCP checksum.
        (hdr(1, 1, 0, 34, 16), big.clone(), Err(VnetError::BadGso)),
        (hdr(1, 1, 1448, 20, 16), big.clone(), Err(VnetError::BadGso)),
        // IPv6 GSO over an IPv4 frame.
        (hdr(1, 4, 1448, 34, 16), big.clone(), Err(VnetError::BadGso)),
        // Too many segments for the cap.
        (hdr(1, 1, 64, 34, 16), big, Err(VnetError::GsoTooBig)),
    ]
}

fn check(b: &Burst, out: &mut Batch, want: &[(Vec<u8>, Result<Offload, VnetError>)]) {
    let ok: Vec<_> = want.iter().filter(|w| w.1.is_ok()).collect();
    assert_eq!(b.packets as usize, ok.len(), "{b:?}");
    let got: Vec<Packet> = out.drain().collect();
    for (p, (f, o)) in got.iter().zip(&ok) {
        assert_eq!(p.data(), &f[..]);
        assert_eq!(Ok(p.meta.offload()), *o);
        assert_eq!(p.is_large(), f.len() > MAX_FRAME);
    }
    for e in [
        VnetError::BadCsum,
        VnetError::BadGsoType,
        VnetError::BadGso,
        VnetError::GsoTooBig,
    ] {
        let n = want.iter().filter(|w| w.1 == Err(e)).count() as u32;
        assert_eq!(b.vnet[e as usize], n, "{e:?}: {b:?}");
    }
    assert_eq!(b.malformed, 0);
}

#[test]
fn split_headers_are_read_checked_and_counted_in_every_layout() {
    for layout in [
        TxLayout::Single,
        TxLayout::Chained(4),
        TxLayout::Indirect(5),
    ] {
        for (h, f, o) in cases() {
            let mut drv = MockDriver::new(64, 0, 12);
            let mut q = Queue::new(drv.mem(), drv.addrs(), feat(true), 0, 0).unwrap();
            if layout == TxLayout::Single && f.len() > 16_000 {
                continue; // one mock buffer holds 16 KB
            }
            drv.send_with_hdr(&h, &f, layout);
            let mut pool = Pool::new(0, 8);
            let mut out = Batch::new();
            let b = q.dequeue(&mut pool, &mut out);
            check(&b, &mut out, &[(f, o)]);
            assert_eq!(drv.take_used().len(), 1, "the chain is returned either way");
        }
    }
}

#[test]
fn packed_headers_are_read_checked_and_counted_in_every_layout() {
    for layout in [
        TxLayout::Single,
        TxLayout::Chained(4),
        TxLayout::Indirect(5),
    ] {
        for (h, f, o) in cases() {
            let mut drv = PackedDriver::new(64, 0, true, 12);
            let b0 = drv.avail_base();
            let mut q = PackedQueue::new(drv.mem(), drv.addrs(), feat(true), b0, b0).unwrap();
            drv.send_with_hdr(&h, &f, layout);
            let mut pool = Pool::new(0, 8);
            let mut out = Batch::new();
            let b = q.dequeue(&mut pool, &mut out);
            check(&b, &mut out, &[(f, o)]);
            assert_eq!(drv.take_used_flags().len(), 1);
        }
    }
}

#[test]
fn without_offloads_the_header_is_ignored_and_large_frames_are_too_big() {
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = Queue::new(drv.mem(), drv.addrs(), feat(false), 0, 0).unwrap();
    // A hostile header is never read: the frame passes with no offload.
    drv.send_with_hdr(&hdr(1, 0, 0, 0xffff, 0xffff), &tcp4(100), TxLayout::Single);
    drv.send_with_hdr(
        &hdr(1, 1, 1448, 34, 16),
        &tcp4(40_000),
        TxLayout::Chained(4),
    );
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::new();
    let b = q.dequeue(&mut pool, &mut out);
    assert_eq!((b.packets, b.too_big), (1, 1));
    assert_eq!(out.as_slice()[0].meta.offload(), Offload::None);
}

#[test]
fn enqueue_writes_the_header_the_offload_calls_for() {
    let tso = Offload::Tso {
        v6: false,
        mss: 1448,
        l4: 34,
    };
    let big = tcp4(30_000);
    let mut p = Packet::from_slice_large(&big);
    p.meta.set_offload(tso);
    let mut c = Packet::from_slice(&tcp4(100));
    c.meta.set_offload(Offload::Csum {
        start: 34,
        offset: 16,
    });
    let plain = Packet::from_slice(&tcp4(10));
    let pkts = [p, c, plain];
    // Split and packed, mergeable buffers of 4 KB.
    let mut drv = MockDriver::new(64, 0, 12);
    let mut q = Queue::new(drv.mem(), drv.addrs(), feat(true), 0, 0).unwrap();
    drv.post_rx(40, 4096);
    let b = q.enqueue(&pkts);
    assert_eq!(b.packets, 3, "{b:?}");
    let split = drv.recv_with_hdr(true);
    let mut pdrv = PackedDriver::new(64, 0, true, 12);
    let b0 = pdrv.avail_base();
    let mut pq = PackedQueue::new(pdrv.mem(), pdrv.addrs(), feat(true), b0, b0).unwrap();
    pdrv.post_rx(40, 4096);
    assert_eq!(pq.enqueue(&pkts).packets, 3);
    let packed = pdrv.recv_with_hdr(true);
    for got in [split, packed] {
        assert_eq!(got.len(), 3);
        for ((_, g), p) in got.iter().zip(&pkts) {
            let h = packet::vnet::Hdr::parse(g[..10].try_into().unwrap());
            assert_eq!(&g[12..], p.data());
            assert_eq!(h.validate(&g[12..], Offloads::ALL), Ok(p.meta.offload()));
        }
        let h = packet::vnet::Hdr::parse(got[0].1[..10].try_into().unwrap());
        assert_eq!(
            (h.hdr_len, h.gso_size),
            (54, 1448),
            "hdr_len computed by us"
        );
    }
}
