//! IPv6 Neighbor Discovery for native tunneling's neighbour cache (RFC 4861): the checked
//! parser of the Neighbor Solicitations and Advertisements snooped on an underlay internal
//! port ([`parse`]) and the Neighbor Solicitation sent on a neighbour miss ([`solicit`]).
//!
//! [`parse`] accepts only an untagged Ethernet frame carrying IPv6 with no extension header,
//! hop limit 255 (so it was not routed), ICMPv6 type 135/136 code 0 with a correct checksum,
//! whose options are well formed (no zero length, none past the payload). What it teaches:
//! an NS's source address with its source link-layer option (an NS from `::`, duplicate
//! address detection, teaches nothing), an NA's target address with its target link-layer
//! option. The link-layer address must equal the frame's Ethernet source (as ARP snooping
//! asks of the sender hardware address). Everything else that is ND but fails a check is
//! [`Snooped::Bad`] (counted by the cache); a frame that is not ND is [`Snooped::NotNd`].
//!
//! Threads: pure functions, any thread (the PMD whose port delivered the frame).
use std::net::Ipv6Addr;
use wire::checksum;

/// ICMPv6 Neighbor Solicitation.
pub const NS: u8 = 135;
/// ICMPv6 Neighbor Advertisement.
pub const NA: u8 = 136;
const ICMPV6: u8 = 58;
const OPT_SLLA: u8 = 1;
const OPT_TLLA: u8 = 2;

/// What a frame taught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Snooped {
    /// Not an NS or NA (not IPv6, not ICMPv6, another ICMPv6 type): not counted.
    NotNd,
    /// An NS or NA that teaches nothing (NS from `::`, or without the link-layer option).
    Nothing,
    /// An NS or NA refused: cut short, bad checksum, hop limit, code, options, or a
    /// link-layer address that is not the Ethernet source.
    Bad,
    /// This address is at this MAC.
    Learn(Ipv6Addr, [u8; 6]),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a)
}

/// Whether `frame` is (at first sight) an ICMPv6 NS or NA: the cheap test a port's burst
/// makes before taking the cache's lock.
pub fn looks_like_nd(frame: &[u8]) -> bool {
    frame.len() > 54
        && frame[12..14] == [0x86, 0xdd]
        && frame[20] == ICMPV6
        && matches!(frame[54], NS | NA)
}

/// Parses `frame` (Ethernet) as a Neighbor Solicitation or Advertisement. Never panics.
pub fn parse(frame: &[u8]) -> Snooped {
    if frame.len() < 14 + 40 + 4 || frame[12..14] != [0x86, 0xdd] {
        return Snooped::NotNd;
    }
    let ip = &frame[14..];
    if ip[6] != ICMPV6 || !matches!(ip[40], NS | NA) {
        return Snooped::NotNd;
    }
    let plen = usize::from(be16(ip, 4));
    if ip[0] >> 4 != 6 || plen > ip.len() - 40 || plen < 24 {
        return Snooped::Bad;
    }
    let icmp = &ip[40..40 + plen];
    let (src, dst) = (addr(&ip[8..]), addr(&ip[24..]));
    let ps = checksum::pseudo_v6(&src.octets(), &dst.octets(), ICMPV6, plen as u32);
    if ip[7] != 255 || icmp[1] != 0 || checksum::fold(checksum::sum(icmp, ps)) != 0xffff {
        return Snooped::Bad;
    }
    let target = addr(&icmp[8..]);
    if target.is_multicast() {
        return Snooped::Bad;
    }
    let want = if icmp[0] == NS { OPT_SLLA } else { OPT_TLLA };
    let mut lla = None;
    let mut opts = &icmp[24..];
    while !opts.is_empty() {
        if opts.len() < 2 {
            return Snooped::Bad;
        }
        let len = usize::from(opts[1]) * 8;
        if len == 0 || len > opts.len() {
            return Snooped::Bad;
        }
        if opts[0] == want {
            if len != 8 {
                return Snooped::Bad;
            }
            let mut m = [0u8; 6];
            m.copy_from_slice(&opts[2..8]);
            lla = Some(m);
        }
        opts = &opts[len..];
    }
    let Some(mac) = lla else {
        return Snooped::Nothing;
    };
    if frame[6..12] != mac {
        return Snooped::Bad;
    }
    if icmp[0] == NS {
        if src.is_unspecified() {
            // Duplicate address detection: must carry no source link-layer option.
            return Snooped::Bad;
        }
        Snooped::Learn(src, mac)
    } else {
        Snooped::Learn(target, mac)
    }
}

/// The solicited-node multicast address of `target` (ff02::1:ffXX:XXXX).
pub fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let t = target.octets();
    let mut a = [0u8; 16];
    a[0] = 0xff;
    a[1] = 0x02;
    a[11] = 0x01;
    a[12] = 0xff;
    a[13..].copy_from_slice(&t[13..]);
    Ipv6Addr::from(a)
}

/// A Neighbor Solicitation for `target` from `src_mac`/`src_ip`, to its solicited-node
/// multicast address (Ethernet 33:33:ff:XX:XX:XX), hop limit 255, with the source
/// link-layer option and its checksum (86 bytes).
pub fn solicit(src_mac: [u8; 6], src_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let dst = solicited_node(target);
    let d = dst.octets();
    let mut f = Vec::with_capacity(86);
    f.extend_from_slice(&[0x33, 0x33, d[12], d[13], d[14], d[15]]);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&32u16.to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&src_ip.octets());
    f.extend_from_slice(&d);
    f.extend_from_slice(&[NS, 0, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&target.octets());
    f.extend_from_slice(&[OPT_SLLA, 1]);
    f.extend_from_slice(&src_mac);
    let ps = checksum::pseudo_v6(&src_ip.octets(), &d, ICMPV6, 32);
    let c = !checksum::fold(checksum::sum(&f[54..], ps));
    f[56..58].copy_from_slice(&c.to_be_bytes());
    f
}

/// A Neighbor Advertisement (solicited, override) of `target` at `mac`, sent from `mac` to
/// `dst_mac`/`dst_ip`: what a peer answers (tests and the fuzz corpus).
pub fn advert(mac: [u8; 6], target: Ipv6Addr, dst_mac: [u8; 6], dst_ip: Ipv6Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(86);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&32u16.to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&target.octets());
    f.extend_from_slice(&dst_ip.octets());
    f.extend_from_slice(&[NA, 0, 0, 0, 0x60, 0, 0, 0]);
    f.extend_from_slice(&target.octets());
    f.extend_from_slice(&[OPT_TLLA, 1]);
    f.extend_from_slice(&mac);
    let ps = checksum::pseudo_v6(&target.octets(), &dst_ip.octets(), ICMPV6, 32);
    let c = !checksum::fold(checksum::sum(&f[54..], ps));
    f[56..58].copy_from_slice(&c.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn ip(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn fix_csum(f: &mut [u8]) {
        f[56] = 0;
        f[57] = 0;
        let ps = checksum::pseudo_v6(
            &f[22..38].try_into().unwrap(),
            &f[38..54].try_into().unwrap(),
            ICMPV6,
            (f.len() - 54) as u32,
        );
        let c = !checksum::fold(checksum::sum(&f[54..], ps));
        f[56..58].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn the_solicitation_is_well_formed_and_teaches_its_sender() {
        let f = solicit(A, ip("fd00::1"), ip("fd00::1234:5678"));
        assert_eq!(f.len(), 86);
        assert_eq!(&f[..6], &[0x33, 0x33, 0xff, 0x34, 0x56, 0x78]);
        assert_eq!(&f[38..54], &ip("ff02::1:ff34:5678").octets());
        assert!(looks_like_nd(&f));
        // The checksum is right: the parser verifies it, and the NS teaches its sender.
        assert_eq!(parse(&f), Snooped::Learn(ip("fd00::1"), A));
    }

    #[test]
    fn an_advert_teaches_its_target() {
        let f = advert(B, ip("fd00::2"), A, ip("fd00::1"));
        assert_eq!(parse(&f), Snooped::Learn(ip("fd00::2"), B));
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(parse(&padded), Snooped::Learn(ip("fd00::2"), B));
    }

    #[test]
    fn bad_nd_is_refused_and_other_traffic_is_not_nd() {
        let good = advert(B, ip("fd00::2"), A, ip("fd00::1"));
        let bad = |f: &[u8]| assert_eq!(parse(f), Snooped::Bad);
        // Checksum, hop limit, code, cut short, option length 0, option past the end.
        let mut f = good.clone();
        f[60] ^= 1;
        bad(&f);
        let mut f = good.clone();
        f[21] = 64;
        fix_csum(&mut f);
        bad(&f);
        let mut f = good.clone();
        f[55] = 1;
        fix_csum(&mut f);
        bad(&f);
        bad(&good[..70]);
        let mut f = good.clone();
        f[79] = 0;
        fix_csum(&mut f);
        bad(&f);
        let mut f = good.clone();
        f[79] = 2;
        fix_csum(&mut f);
        bad(&f);
        // Link-layer address not the Ethernet source; multicast target.
        let mut f = good.clone();
        f[6..12].copy_from_slice(&A);
        bad(&f);
        let mut f = good.clone();
        f[62..78].copy_from_slice(&ip("ff02::1").octets());
        fix_csum(&mut f);
        bad(&f);
        // DAD: an NS from :: with a source link-layer option is refused; without, nothing.
        let mut f = solicit(A, ip("::"), ip("fd00::9"));
        bad(&f);
        f.truncate(78);
        f[18..20].copy_from_slice(&24u16.to_be_bytes());
        fix_csum(&mut f);
        assert_eq!(parse(&f), Snooped::Nothing);
        // Not ND: IPv4, another ICMPv6 type, UDP.
        let mut f = good.clone();
        f[12..14].copy_from_slice(&[8, 0]);
        assert_eq!(parse(&f), Snooped::NotNd);
        let mut f = good.clone();
        f[54] = 128;
        assert_eq!(parse(&f), Snooped::NotNd);
        assert!(!looks_like_nd(&f));
        let mut f = good.clone();
        f[20] = 17;
        assert_eq!(parse(&f), Snooped::NotNd);
    }
}
