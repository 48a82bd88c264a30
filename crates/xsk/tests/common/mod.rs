//! Shared by the xsk integration tests: an ICMP echo reflector over a `Device`'s queue 0, and
//! the check of a kernel that refuses `xdp-mark`.
#![allow(dead_code)]
use std::time::{Duration, Instant};
use xsk::{Device, DeviceConfig, RxSide, TxSide};

/// One's-complement checksum of `b`.
pub fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        s += u32::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The echo reply to an IPv4 ICMP echo request frame, or None for anything else.
pub fn echo_reply(f: &[u8]) -> Option<Vec<u8>> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 1 {
        return None;
    }
    let ihl = usize::from(f[14] & 0xf) * 4;
    let icmp = 14 + ihl;
    if f.len() < icmp + 8 || f[icmp] != 8 {
        return None;
    }
    let mut r = f.to_vec();
    r[0..6].copy_from_slice(&f[6..12]);
    r[6..12].copy_from_slice(&f[0..6]);
    r[26..30].copy_from_slice(&f[30..34]);
    r[30..34].copy_from_slice(&f[26..30]);
    r[icmp] = 0;
    r[icmp + 2] = 0;
    r[icmp + 3] = 0;
    let c = csum(&r[icmp..]);
    r[icmp + 2..icmp + 4].copy_from_slice(&c.to_be_bytes());
    Some(r)
}

/// Polls `rx` and answers echo requests on `tx` until `done()` or `limit`; returns
/// (frames received, replies sent).
pub fn reflect(
    rx: &mut RxSide,
    tx: &mut TxSide,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> (u64, u64) {
    let (mut got, mut sent) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < limit && !done() {
        let mut replies = Vec::new();
        let b = rx.recv(32, |f| {
            if let Some(r) = echo_reply(f) {
                replies.push(r);
            }
        });
        assert_eq!(
            b.bad_descs, 0,
            "the kernel gave descriptors outside our frames"
        );
        got += u64::from(b.packets);
        if !replies.is_empty() {
            let t = tx.send(replies.iter().map(Vec::as_slice));
            sent += u64::from(t.packets);
        } else {
            tx.send(std::iter::empty());
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    (got, sent)
}

/// `xdp-mark` needs a kernel that lets XDP programs call `bpf_xdp_adjust_meta`
/// (`xsk::kernel_allows_meta`). Where it does not, opening a marking device must fail with the
/// verifier's reason; the caller then stops (the marks go untested on this kernel).
pub fn marks_refused(c: &DeviceConfig) -> bool {
    if xsk::kernel_allows_meta() {
        return false;
    }
    let e = match Device::open(c) {
        Ok(_) => panic!("a marking device opened on a kernel that refuses the helper"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("bpf_xdp_adjust_meta"),
        "refused without the reason: {e}"
    );
    eprintln!("NOT TESTED HERE: this kernel's verifier refuses bpf_xdp_adjust_meta (xdp-mark)");
    true
}
