//! In-place header rewrites for set-field actions, with RFC 1624 checksum updates.
//!
//! Owns: functions that take a whole frame (`&mut [u8]`), find the header to change through the
//! same L2 walk as extraction, change one field and patch the checksums that cover it. Each
//! returns `true` if it changed the frame and `false` (frame untouched) if the frame has no such
//! field (wrong EtherType or protocol, truncated header, non-first fragment for L4 fields).
//! Threads: PMD threads, per packet. No allocation.
use crate::bytes::{be16, be32, put16, put32};
use crate::checksum::{update16, update16_udp, update32, update32_udp};
use crate::ethernet::{ethertype, EthernetFrame};
use crate::extract::l3_offset;
use crate::ipv4::{self, proto, Ipv4Packet};
use crate::ipv6::{skip_extensions, Ipv6Packet};

/// Sets the Ethernet source address.
pub fn set_eth_src(frame: &mut [u8], mac: [u8; 6]) -> bool {
    match EthernetFrame::new_checked(frame) {
        Ok(mut e) => {
            e.set_src(mac);
            true
        }
        Err(_) => false,
    }
}

/// Sets the Ethernet destination address.
pub fn set_eth_dst(frame: &mut [u8], mac: [u8; 6]) -> bool {
    match EthernetFrame::new_checked(frame) {
        Ok(mut e) => {
            e.set_dst(mac);
            true
        }
        Err(_) => false,
    }
}

/// The IPv4 header of `frame` as a checked view, with its offset.
fn ipv4_mut(frame: &mut [u8]) -> Option<Ipv4Packet<&mut [u8]>> {
    match l3_offset(frame) {
        Some((ethertype::IPV4, off)) => Ipv4Packet::new_checked(&mut frame[off..]).ok(),
        _ => None,
    }
}

/// Sets the IPv4 source address, updating the IP and TCP/UDP checksums.
pub fn set_ipv4_src(frame: &mut [u8], addr: u32) -> bool {
    set_ipv4_addr(frame, addr, ipv4::field::SRC.start)
}

/// Sets the IPv4 destination address, updating the IP and TCP/UDP checksums.
pub fn set_ipv4_dst(frame: &mut [u8], addr: u32) -> bool {
    set_ipv4_addr(frame, addr, ipv4::field::DST.start)
}

fn set_ipv4_addr(frame: &mut [u8], new: u32, at: usize) -> bool {
    let Some(mut ip) = ipv4_mut(frame) else {
        return false;
    };
    let old = if at == ipv4::field::SRC.start {
        ip.src()
    } else {
        ip.dst()
    };
    if at == ipv4::field::SRC.start {
        ip.set_src(new);
    } else {
        ip.set_dst(new);
    }
    ip.set_checksum(update32(ip.checksum(), old, new));
    if ip.frag_offset() != 0 {
        return true;
    }
    let (hl, p) = (ip.header_len(), ip.protocol());
    let end = usize::from(ip.total_len());
    let b = ip.into_inner();
    let end = end.min(b.len());
    let Some(l4) = b.get_mut(hl..end) else {
        return true;
    };
    match p {
        proto::TCP if l4.len() >= 18 => put16(l4, 16, update32(be16(l4, 16), old, new)),
        proto::UDP if l4.len() >= 8 => put16(l4, 6, update32_udp(be16(l4, 6), old, new)),
        _ => {}
    }
    true
}

/// Sets the DSCP (upper six bits of the IPv4 TOS or IPv6 traffic class), keeping ECN and
/// updating the IPv4 header checksum.
pub fn set_ip_dscp(frame: &mut [u8], dscp: u8) -> bool {
    let Some((t, off)) = l3_offset(frame) else {
        return false;
    };
    let b = &mut frame[off..];
    match t {
        ethertype::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&mut *b) else {
                return false;
            };
            let old_word = be16(ip.into_inner(), 0);
            let tos = (dscp << 2) | (old_word as u8 & 0x03);
            let new_word = (old_word & 0xff00) | u16::from(tos);
            let mut ip = Ipv4Packet::new_unchecked(&mut *b);
            ip.set_tos(tos);
            ip.set_checksum(update16(ip.checksum(), old_word, new_word));
            true
        }
        ethertype::IPV6 => {
            if Ipv6Packet::new_checked(&*b).is_err() {
                return false;
            }
            let w = be32(b, 0);
            let tc = u32::from(dscp & 0x3f) << 2 | (w >> 20) & 0x3;
            put32(b, 0, (w & 0xf00f_ffff) | tc << 20);
            true
        }
        _ => false,
    }
}

/// Sets the IPv4 TTL (updating the header checksum) or the IPv6 hop limit (`dec_ttl`).
pub fn set_ip_ttl(frame: &mut [u8], ttl: u8) -> bool {
    let Some((t, off)) = l3_offset(frame) else {
        return false;
    };
    let b = &mut frame[off..];
    match t {
        ethertype::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&mut *b) else {
                return false;
            };
            let b = ip.into_inner();
            let old_word = be16(b, 8);
            let new_word = (u16::from(ttl) << 8) | (old_word & 0x00ff);
            put16(b, 8, new_word);
            let mut ip = Ipv4Packet::new_unchecked(&mut *b);
            ip.set_checksum(update16(ip.checksum(), old_word, new_word));
            true
        }
        ethertype::IPV6 => {
            if Ipv6Packet::new_checked(&*b).is_err() {
                return false;
            }
            b[7] = ttl;
            true
        }
        _ => false,
    }
}

/// Sets the TCP or UDP source port, updating the transport checksum.
pub fn set_tp_src(frame: &mut [u8], port: u16) -> bool {
    set_tp_port(frame, port, 0)
}

/// Sets the TCP or UDP destination port, updating the transport checksum.
pub fn set_tp_dst(frame: &mut [u8], port: u16) -> bool {
    set_tp_port(frame, port, 2)
}

/// Protocol and offset of the L4 header within `frame`, if it is a first (or only) fragment.
fn l4_offset(frame: &[u8]) -> Option<(u8, usize)> {
    let (t, off) = l3_offset(frame)?;
    let b = &frame[off..];
    match t {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(b).ok()?;
            (ip.frag_offset() == 0).then(|| (ip.protocol(), off + ip.header_len()))
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(b).ok()?;
            let ul = skip_extensions(ip.next_header(), ip.payload());
            (ul.complete && ul.frag & 2 == 0).then_some((ul.proto, off + 40 + ul.offset))
        }
        _ => None,
    }
}

fn set_tp_port(frame: &mut [u8], port: u16, at: usize) -> bool {
    let Some((p, off)) = l4_offset(frame) else {
        return false;
    };
    let l4 = &mut frame[off..];
    let (csum_at, udp) = match p {
        proto::TCP => (16, false),
        proto::UDP => (6, true),
        _ => return false,
    };
    if l4.len() < csum_at + 2 {
        return false;
    }
    let old = be16(l4, at);
    put16(l4, at, port);
    let c = be16(l4, csum_at);
    let c = if udp {
        update16_udp(c, old, port)
    } else {
        update16(c, old, port)
    };
    put16(l4, csum_at, c);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;

    /// Ethernet + IPv4 + UDP with correct checksums.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..34].copy_from_slice(&[
            0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f[34..42].copy_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 12, 0, 0]);
        f[42..46].copy_from_slice(&[1, 2, 3, 4]);
        fill_checksums(&mut f);
        f
    }

    fn fill_checksums(f: &mut [u8]) {
        let mut ip = Ipv4Packet::new_checked(&mut f[14..]).unwrap();
        ip.fill_checksum();
        let ps = checksum::pseudo_v4(ip.src(), ip.dst(), 17, 12);
        f[40..42].copy_from_slice(&[0, 0]);
        let c = !checksum::fold(checksum::sum(&f[34..46], ps));
        f[40..42].copy_from_slice(&c.to_be_bytes());
    }

    fn udp_ok(f: &[u8]) -> bool {
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        let ps = checksum::pseudo_v4(ip.src(), ip.dst(), 17, 12);
        ip.verify_checksum() && checksum::fold(checksum::sum(&f[34..46], ps)) == 0xffff
    }

    #[test]
    fn ipv4_and_port_rewrites_keep_checksums_valid() {
        let mut f = udp_frame();
        assert!(udp_ok(&f));
        assert!(set_ipv4_src(&mut f, 0xc0a8_0001));
        assert!(set_ipv4_dst(&mut f, 0xc0a8_0002));
        assert!(set_tp_src(&mut f, 1111));
        assert!(set_tp_dst(&mut f, 2222));
        assert!(set_ip_dscp(&mut f, 46));
        assert!(udp_ok(&f));
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(
            (ip.src(), ip.dst(), ip.tos()),
            (0xc0a8_0001, 0xc0a8_0002, 46 << 2)
        );
        assert_eq!((be16(&f, 34), be16(&f, 36)), (1111, 2222));
    }

    #[test]
    fn rewrites_refuse_frames_without_the_field() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        assert!(!set_ipv4_src(&mut arp, 1));
        assert!(!set_tp_dst(&mut arp, 1));
        assert!(!set_ip_dscp(&mut arp, 1));
        assert_eq!(arp, before);
        let mut tiny = vec![0u8; 5];
        assert!(!set_eth_src(&mut tiny, [1; 6]));
        let mut f = udp_frame();
        f.truncate(38); // UDP header cut before the checksum
        assert!(!set_tp_src(&mut f, 7));
    }

    #[test]
    fn udp_zero_checksum_stays_zero() {
        let mut f = udp_frame();
        f[40..42].copy_from_slice(&[0, 0]);
        assert!(set_ipv4_dst(&mut f, 0x0102_0304));
        assert!(set_tp_dst(&mut f, 9));
        assert_eq!(be16(&f, 40), 0);
    }

    #[test]
    fn ttl_rewrite_keeps_the_ipv4_checksum_and_sets_the_ipv6_hop_limit() {
        let mut f = udp_frame();
        assert!(set_ip_ttl(&mut f, 63));
        assert_eq!(f[22], 63);
        assert!(udp_ok(&f));
        let mut v6 = vec![0u8; 14 + 40];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[21] = 64;
        assert!(set_ip_ttl(&mut v6, 63));
        assert_eq!(v6[21], 63);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        assert!(!set_ip_ttl(&mut arp, 1));
        assert_eq!(arp, before);
    }
}
