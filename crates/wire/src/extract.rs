//! One-pass flow-key extraction.
//!
//! Owns: [`extract()`] (and [`extract_into`], the same written in place), which reads a frame's
//! headers into a [`FlowKey`] in one forward pass with no allocation, and [`l3_offset`], the
//! same L2 walk for actions that rewrite L3/L4.
//! Extraction never panics: every layer is read through a checked view, and a truncated or
//! malformed layer ends extraction with the fields of the complete layers before it.
//!
//! VLAN: the outermost tag's TCI (with 0x1000 set to mean "tag present") goes into the key; one
//! further inner tag (QinQ) is skipped, and `eth_type` is the innermost EtherType.
//! Threads: PMD threads, per packet. Pure function.
use crate::arp::ArpPacket;
use crate::bytes::be16;
use crate::ethernet::{ethertype, HEADER_LEN, VLAN_TAG_LEN};
use crate::flow::FlowKey;
use crate::icmp::IcmpPacket;
use crate::ipv4::{proto, Ipv4Packet};
use crate::ipv6::{skip_extensions, Ipv6Packet};
use crate::tcp::TcpPacket;
use crate::udp::UdpPacket;

/// Bit set in the key's `vlan_tci` when the frame carries a tag.
pub const VLAN_PRESENT: u16 = 0x1000;

/// The result of walking Ethernet and VLAN headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct L2 {
    ethertype: u16,
    tci: u16,
    l3: usize,
    complete: bool,
}

#[inline]
fn walk_l2(frame: &[u8]) -> L2 {
    let mut t = be16(frame, 12);
    let mut off = HEADER_LEN;
    let mut tci = 0;
    let l2 = |t: u16, tci: u16, l3: usize, complete: bool| L2 {
        ethertype: t,
        tci,
        l3,
        complete,
    };
    if ethertype::is_vlan(t) {
        let Some(tag) = frame.get(off..off + VLAN_TAG_LEN) else {
            return l2(t, 0, off, false);
        };
        tci = be16(tag, 0) | VLAN_PRESENT;
        t = be16(tag, 2);
        off += VLAN_TAG_LEN;
        if ethertype::is_vlan(t) {
            let Some(tag) = frame.get(off..off + VLAN_TAG_LEN) else {
                return l2(t, tci, off, false);
            };
            t = be16(tag, 2);
            off += VLAN_TAG_LEN;
        }
    }
    if t < ethertype::MIN_TYPE {
        return l2(ethertype::NONE, tci, off, false);
    }
    l2(t, tci, off, true)
}

/// EtherType and offset of the L3 header after Ethernet and up to two VLAN tags, or `None` if
/// the frame is too short or has no EtherType.
#[inline]
pub fn l3_offset(frame: &[u8]) -> Option<(u16, usize)> {
    if frame.len() < HEADER_LEN {
        return None;
    }
    let l2 = walk_l2(frame);
    l2.complete.then_some((l2.ethertype, l2.l3))
}

/// The flow key of `frame` received on `in_port`. Never panics, never allocates.
#[inline]
pub fn extract(frame: &[u8], in_port: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    extract_into(frame, in_port, &mut k);
    k
}

/// [`extract()`] written in place into `k` (every word, the metadata words zeroed). The fast
/// path uses this one: a 136-byte key returned by value is copied with a `memcpy` call (twice
/// per packet, about 20 cycles), a key written in place is not copied at all.
#[inline]
pub fn extract_into(frame: &[u8], in_port: u32, k: &mut FlowKey) {
    k.w[0] = u64::from(in_port);
    for w in &mut k.w[1..] {
        *w = 0;
    }
    let (Some(a), Some(b)) = (frame.get(0..8), frame.get(4..12)) else {
        return;
    };
    if frame.len() < HEADER_LEN {
        return;
    }
    k.w[1] = u64::from_be_bytes(a.try_into().unwrap_or([0; 8])) >> 16;
    k.w[2] = u64::from_be_bytes(b.try_into().unwrap_or([0; 8])) & 0xffff_ffff_ffff;
    let l2 = walk_l2(frame);
    k.w[0] |= u64::from(l2.ethertype) << 32 | u64::from(l2.tci) << 48;
    if !l2.complete {
        return;
    }
    let l3 = frame.get(l2.l3..).unwrap_or(&[]);
    match l2.ethertype {
        ethertype::IPV4 => extract_ipv4(l3, k),
        ethertype::IPV6 => extract_ipv6(l3, k),
        ethertype::ARP => extract_arp(l3, k),
        _ => {}
    }
}

#[inline]
fn extract_ipv4(b: &[u8], k: &mut FlowKey) {
    let Ok(ip) = Ipv4Packet::new_checked(b) else {
        return;
    };
    let p = ip.protocol();
    let off = ip.frag_offset();
    let frag = if off != 0 {
        3u64
    } else {
        u64::from(ip.more_frags())
    };
    k.w[1] |= u64::from(p) << 48 | u64::from(ip.tos()) << 56;
    k.w[2] |= u64::from(ip.ttl()) << 48 | frag << 56;
    k.w[4] = u64::from(ip.src()) | u64::from(ip.dst()) << 32;
    if off == 0 {
        extract_l4(p, ip.payload(), false, k);
    }
}

#[inline]
fn extract_ipv6(b: &[u8], k: &mut FlowKey) {
    let Ok(ip) = Ipv6Packet::new_checked(b) else {
        return;
    };
    let (s, d) = (ip.src(), ip.dst());
    let hi_lo = |a: [u8; 16]| {
        let x = u128::from_be_bytes(a);
        ((x >> 64) as u64, x as u64)
    };
    (k.w[5], k.w[6]) = hi_lo(s);
    (k.w[7], k.w[8]) = hi_lo(d);
    k.w[1] |= u64::from(ip.traffic_class()) << 56;
    let payload = ip.payload();
    let ul = skip_extensions(ip.next_header(), payload);
    k.w[2] |= u64::from(ip.hop_limit()) << 48 | u64::from(ul.frag) << 56;
    if !ul.complete {
        return;
    }
    k.w[1] |= u64::from(ul.proto) << 48;
    if ul.frag & 2 == 0 {
        extract_l4(ul.proto, payload.get(ul.offset..).unwrap_or(&[]), true, k);
    }
}

#[inline]
fn extract_l4(p: u8, b: &[u8], v6: bool, k: &mut FlowKey) {
    let ports = |src: u16, dst: u16| u64::from(src) | u64::from(dst) << 16;
    match p {
        proto::TCP => {
            if let Ok(t) = TcpPacket::new_checked(b) {
                k.w[3] |= ports(t.src_port(), t.dst_port()) | u64::from(t.flags()) << 32;
            }
        }
        proto::UDP => {
            if let Ok(u) = UdpPacket::new_checked(b) {
                k.w[3] |= ports(u.src_port(), u.dst_port());
            }
        }
        proto::SCTP if b.len() >= 12 => {
            k.w[3] |= ports(be16(b, 0), be16(b, 2));
        }
        proto::ICMP | proto::ICMPV6 if v6 == (p == proto::ICMPV6) => {
            if let Ok(i) = IcmpPacket::new_checked(b) {
                k.w[3] |= ports(u16::from(i.msg_type()), u16::from(i.code()));
            }
        }
        _ => {}
    }
}

#[inline]
fn extract_arp(b: &[u8], k: &mut FlowKey) {
    let Ok(a) = ArpPacket::new_checked(b) else {
        return;
    };
    let op = a.oper();
    k.w[1] |= u64::from(op & 0xff) << 48;
    k.w[3] |= u64::from(op) << 48;
    k.w[4] = u64::from(a.spa()) | u64::from(a.tpa()) << 32;
    k.w[5] = FlowKey::mac_to_u64(a.sha());
    k.w[6] = FlowKey::mac_to_u64(a.tha());
}

/// Bytes past the L3 offset extraction may read, at most: an IPv4 header with options (60)
/// plus a TCP header with options (60); IPv6 (40) with its L4 header directly after is less.
const L3_L4_MAX: usize = 60 + 60;

/// True if the key of every frame that begins with `head` is the key of `head` alone: what
/// extraction reads (L2, up to two VLAN tags, the L3 header and the L4 ports/type) lies within
/// `head`, whatever follows. One copy for large frames copies only such a head into the
/// packet buffer before classification (the rest stays in the sender's memory until output).
/// IPv6 with an extension header is refused: the chain may run on past any fixed head.
#[inline]
pub fn key_within(head: &[u8]) -> bool {
    if head.len() < HEADER_LEN {
        return false;
    }
    let l2 = walk_l2(head);
    if !l2.complete {
        // No EtherType (an 802.3 length): nothing past L2 is read. A tag cut short by the
        // head's end: the head is too short.
        return l2.ethertype == ethertype::NONE && l2.l3 <= head.len();
    }
    let room = head.len() - l2.l3.min(head.len());
    match l2.ethertype {
        ethertype::IPV4 => room >= L3_L4_MAX,
        ethertype::IPV6 => {
            let nh = head.get(l2.l3 + 6).copied();
            matches!(
                nh,
                Some(proto::TCP | proto::UDP | proto::ICMPV6 | proto::SCTP | 59)
            ) && room >= L3_L4_MAX
        }
        ethertype::ARP => room >= 28,
        _ => true,
    }
}

#[cfg(test)]
mod head_tests {
    use super::*;

    fn eth(t: u16, l3: &[u8], total: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f[0] = 2;
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(l3);
        f.resize(total, 0xab);
        f
    }

    #[test]
    fn a_long_enough_head_gives_the_whole_frames_key() {
        // IPv4 with 40 bytes of options and TCP with 40 bytes of options.
        let mut ip = vec![0x4f, 0, 0x05, 0xdc, 0, 0, 0, 0, 64, proto::TCP];
        ip.resize(60, 0);
        let mut tcp = vec![0x12, 0x34, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0xf0, 0x18];
        tcp.resize(60, 0);
        ip.extend_from_slice(&tcp);
        let f = eth(ethertype::IPV4, &ip, 1514);
        for n in [14 + 120, 192, 256] {
            assert!(key_within(&f[..n]), "{n}");
            assert_eq!(extract(&f[..n], 1), extract(&f, 1));
        }
        assert!(!key_within(&f[..14 + 119]));
        // IPv6 + UDP directly: yes; with a hop-by-hop header first: never.
        let mut v6 = vec![0x60, 0, 0, 0, 0x05, 0xb4, proto::UDP, 64];
        v6.resize(40, 1);
        v6.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0x05, 0xb4, 0, 0]);
        let f6 = eth(ethertype::IPV6, &v6, 1514);
        assert!(key_within(&f6[..192]));
        assert_eq!(extract(&f6[..192], 1), extract(&f6, 1));
        v6[6] = 0;
        assert!(!key_within(&eth(ethertype::IPV6, &v6, 1514)[..192]));
        // Other EtherTypes: only L2 is read.
        assert!(key_within(&eth(0x88b5, &[], 1514)[..64]));
        assert!(!key_within(&f[..10]));
    }
}
