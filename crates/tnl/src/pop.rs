//! The outer-header parser of native decapsulation: whether a frame the underlay bridge would
//! deliver to its LOCAL port is a tunnel packet for one of our native tunnel endpoints, and
//! where its tunnel header starts.
//!
//! [`parse_outer`] checks, in order: an Ethernet header to `local_mac` (or broadcast is
//! refused: tunnels are unicast) with type IPv4 (a VLAN tag is refused: the underlay port is
//! untagged), an IPv4 header that fits, with version 4, a sane header length, total length
//! inside the frame and a correct checksum, not a fragment, UDP, a UDP header that fits with
//! a length inside the IP payload, destination address and port of an endpoint. Each refusal
//! is a [`PopError`] (counted by reason by the caller); a frame that is simply not for a
//! tunnel endpoint (not IPv4/UDP, other address or port) is [`PopError::NotTunnel`] and goes
//! on to the kernel as before. The tunnel header itself is then checked by
//! `wire::tunnel::decap`.
//!
//! IPv6 (ethertype 0x86dd): whether the frame is ours is decided by the destination address
//! and the upper-layer protocol and UDP port found after any extension headers (walked, at
//! most [`wire::ipv6::MAX_EXT_HEADERS`]; a non-first fragment is UDP to an endpoint when its
//! fragment header says UDP, the port unknown). Ours then needs: version 6, payload length
//! inside the frame, *no* extension header (a Fragment header is [`PopError::Fragment`], any
//! other [`PopError::ExtHeader`]: the tunnel senders we meet never send them and we do not
//! reassemble), a UDP header and length inside the payload, the frame to `local_mac`, and a
//! correct UDP checksum when it is not zero ([`PopError::BadUdpChecksum`]). A zero UDP
//! checksum over IPv6 is accepted (RFC 6935 allows it for tunnels; `csum=false` peers send
//! it); the kernel's VXLAN device sends a real one by default. A chain of extension headers
//! cut short or too long is not ours (the kernel sees it).
//!
//! Threads: pure function, any thread (PMDs).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::checksum;

/// One native tunnel endpoint: the address and UDP port it receives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `local_ip`.
    pub ip: IpAddr,
    /// `dst_port`.
    pub port: u16,
}

/// A tunnel packet's outer headers, as far as the tunnel metadata and neighbour learning need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outer {
    /// Outer source MAC (the sender's next hop: learned as the neighbour of `src`).
    pub src_mac: [u8; 6],
    /// Outer source address (`tun_src` / `tun_ipv6_src`).
    pub src: IpAddr,
    /// Outer destination address (`tun_dst` / `tun_ipv6_dst`).
    pub dst: IpAddr,
    /// TOS byte (IPv6: traffic class).
    pub tos: u8,
    /// TTL (IPv6: hop limit).
    pub ttl: u8,
    /// UDP destination port (which endpoint).
    pub dst_port: u16,
    /// Offset of the UDP payload (the tunnel header) in the frame.
    pub payload_at: usize,
    /// Length of the UDP payload.
    pub payload_len: usize,
}

/// Why a frame was not decapsulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PopError {
    /// Not IPv4/UDP to an endpoint's address and port: not ours, goes to the kernel.
    NotTunnel,
    /// Ethernet or IPv4 header cut short, or IPv4 total length beyond the frame.
    Truncated,
    /// IPv4 version not 4 or header length under 20.
    BadIp,
    /// IPv4 header checksum wrong.
    BadChecksum,
    /// An IPv4 fragment (never reassembled natively).
    Fragment,
    /// UDP header cut short or its length disagrees with the IP payload.
    BadUdp,
    /// To an endpoint's address and port but not to the LOCAL port's MAC, or VLAN tagged.
    BadL2,
    /// IPv6 with an extension header other than a Fragment header.
    ExtHeader,
    /// IPv6 UDP checksum (non-zero) wrong.
    BadUdpChecksum,
}

impl PopError {
    /// Every reason but `NotTunnel`, in order (for counter arrays).
    pub const DROPS: [PopError; 8] = [
        PopError::Truncated,
        PopError::BadIp,
        PopError::BadChecksum,
        PopError::Fragment,
        PopError::BadUdp,
        PopError::BadL2,
        PopError::ExtHeader,
        PopError::BadUdpChecksum,
    ];

    /// Counter name.
    pub fn name(self) -> &'static str {
        match self {
            PopError::NotTunnel => "not-tunnel",
            PopError::Truncated => "outer-truncated",
            PopError::BadIp => "outer-bad-ip",
            PopError::BadChecksum => "outer-bad-checksum",
            PopError::Fragment => "outer-fragment",
            PopError::BadUdp => "outer-bad-udp",
            PopError::BadL2 => "outer-bad-l2",
            PopError::ExtHeader => "outer-ext-header",
            PopError::BadUdpChecksum => "outer-bad-udp-checksum",
        }
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Parses `frame`'s outer headers for the endpoints `eps` of a LOCAL port with MAC
/// `local_mac`. Never panics, whatever the input.
pub fn parse_outer(frame: &[u8], local_mac: [u8; 6], eps: &[Endpoint]) -> Result<Outer, PopError> {
    if frame.len() < 14 {
        return Err(PopError::NotTunnel);
    }
    let mut l3 = 14;
    let mut tagged = false;
    let mut ty = be16(frame, 12);
    if ty == 0x8100 || ty == 0x88a8 {
        if frame.len() < 18 {
            return Err(PopError::NotTunnel);
        }
        tagged = true;
        ty = be16(frame, 16);
        l3 = 18;
    }
    if ty == 0x86dd {
        return parse_v6(frame, l3, tagged, local_mac, eps);
    }
    if ty != 0x0800 {
        return Err(PopError::NotTunnel);
    }
    let ip = &frame[l3..];
    if ip.len() < 20 {
        return Err(PopError::Truncated);
    }
    if ip[9] != wire::ipv4::proto::UDP {
        return Err(PopError::NotTunnel);
    }
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // The UDP destination port, if the header is there, decides whether this is ours.
    let dport = (ihl >= 20 && ip.len() >= ihl + 4).then(|| be16(ip, ihl + 2));
    let ep = eps
        .iter()
        .find(|e| e.ip == dst && dport.is_none_or(|p| p == e.port));
    let Some(ep) = ep else {
        return Err(PopError::NotTunnel);
    };
    if ip[0] >> 4 != 4 || ihl < 20 {
        return Err(PopError::BadIp);
    }
    let total = usize::from(be16(ip, 2));
    if ip.len() < ihl || total > ip.len() {
        return Err(PopError::Truncated);
    }
    if total < ihl {
        return Err(PopError::BadIp);
    }
    if !checksum::verify(&ip[..ihl]) {
        return Err(PopError::BadChecksum);
    }
    let frag = be16(ip, 6);
    if frag & 0x3fff != 0 {
        return Err(PopError::Fragment);
    }
    if total < ihl + 8 {
        return Err(PopError::BadUdp);
    }
    let udp = &ip[ihl..total];
    let ulen = usize::from(be16(udp, 4));
    if ulen < 8 || ulen > udp.len() {
        return Err(PopError::BadUdp);
    }
    if tagged || frame[0..6] != local_mac {
        return Err(PopError::BadL2);
    }
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&frame[6..12]);
    Ok(Outer {
        src_mac,
        src: IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15])),
        dst,
        tos: ip[1],
        ttl: ip[8],
        dst_port: ep.port,
        payload_at: l3 + ihl + 8,
        payload_len: ulen - 8,
    })
}

fn addr6(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a)
}

/// The upper-layer protocol of an IPv6 packet past its extension headers: (protocol, its
/// offset in `ip`, extension headers seen, fragment header seen, offset known). `None`: a
/// chain cut short or longer than [`wire::ipv6::MAX_EXT_HEADERS`].
fn upper_v6(ip: &[u8]) -> Option<(u8, usize, usize, bool, bool)> {
    use wire::ipv6::ext;
    let (mut next, mut at, mut n, mut frag) = (ip[6], 40usize, 0usize, false);
    loop {
        match next {
            ext::HOP_BY_HOP
            | ext::ROUTING
            | ext::DEST_OPTS
            | ext::AUTH
            | ext::FRAGMENT
            | 135
            | 139
            | 140
            | 253
            | 254 => {}
            _ => return Some((next, at, n, frag, true)),
        }
        if n == wire::ipv6::MAX_EXT_HEADERS || at + 8 > ip.len() {
            return None;
        }
        n += 1;
        let h = &ip[at..];
        if next == ext::FRAGMENT {
            frag = true;
            if be16(h, 2) & 0xfff8 != 0 {
                // A later fragment: what follows is not a header.
                return Some((h[0], at + 8, n, true, false));
            }
            at += 8;
        } else if next == ext::AUTH {
            at += (usize::from(h[1]) + 2) * 4;
        } else {
            at += (usize::from(h[1]) + 1) * 8;
        }
        next = h[0];
    }
}

fn parse_v6(
    frame: &[u8],
    l3: usize,
    tagged: bool,
    local_mac: [u8; 6],
    eps: &[Endpoint],
) -> Result<Outer, PopError> {
    let ip = &frame[l3..];
    if ip.len() < 40 {
        return Err(PopError::Truncated);
    }
    let dst = IpAddr::V6(addr6(&ip[24..]));
    if !eps.iter().any(|e| e.ip == dst) {
        return Err(PopError::NotTunnel);
    }
    let Some((proto, at, n_ext, frag, known)) = upper_v6(ip) else {
        return Err(PopError::NotTunnel);
    };
    if proto != wire::ipv4::proto::UDP {
        return Err(PopError::NotTunnel);
    }
    let dport = (known && ip.len() >= at + 4).then(|| be16(ip, at + 2));
    let ep = eps
        .iter()
        .find(|e| e.ip == dst && dport.is_none_or(|p| p == e.port));
    let Some(ep) = ep else {
        return Err(PopError::NotTunnel);
    };
    if ip[0] >> 4 != 6 {
        return Err(PopError::BadIp);
    }
    let plen = usize::from(be16(ip, 4));
    if 40 + plen > ip.len() {
        return Err(PopError::Truncated);
    }
    if frag {
        return Err(PopError::Fragment);
    }
    if n_ext > 0 {
        return Err(PopError::ExtHeader);
    }
    let src = addr6(&ip[8..]);
    if src.is_multicast() || src.is_unspecified() {
        return Err(PopError::BadIp);
    }
    let udp = &ip[40..40 + plen];
    if udp.len() < 8 {
        return Err(PopError::BadUdp);
    }
    let ulen = usize::from(be16(udp, 4));
    if ulen < 8 || ulen > udp.len() {
        return Err(PopError::BadUdp);
    }
    if tagged || frame[0..6] != local_mac {
        return Err(PopError::BadL2);
    }
    if be16(udp, 6) != 0 {
        let IpAddr::V6(d) = dst else { unreachable!() };
        let ps = checksum::pseudo_v6(
            &src.octets(),
            &d.octets(),
            wire::ipv4::proto::UDP,
            ulen as u32,
        );
        if checksum::fold(checksum::sum(&udp[..ulen], ps)) != 0xffff {
            return Err(PopError::BadUdpChecksum);
        }
    }
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&frame[6..12]);
    Ok(Outer {
        src_mac,
        src: IpAddr::V6(src),
        dst,
        tos: (ip[0] << 4) | (ip[1] >> 4),
        ttl: ip[7],
        dst_port: ep.port,
        payload_at: l3 + 40 + 8,
        payload_len: ulen - 8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Params, Template};
    use wire::tunnel::TunnelKind;

    const LOCAL: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn eps() -> Vec<Endpoint> {
        vec![Endpoint {
            ip: Ipv4Addr::new(10, 0, 0, 2).into(),
            port: 4789,
        }]
    }

    fn packet() -> Vec<u8> {
        let t = Template::build(&Params {
            kind: TunnelKind::Vxlan,
            vni: 5,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: LOCAL,
            src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2).into(),
            dst_port: 4789,
            tos: 0,
            ttl: 64,
            df: true,
            csum: false,
            options: Vec::new(),
        });
        t.push_vec(&[0xaa; 60], 1)
    }

    fn fix_ip_csum(f: &mut [u8]) {
        f[24] = 0;
        f[25] = 0;
        let c = checksum::compute(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn a_pushed_packet_pops_back() {
        let f = packet();
        let o = parse_outer(&f, LOCAL, &eps()).unwrap();
        assert_eq!(o.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(o.src_mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!((o.payload_at, o.payload_len), (42, 68));
        let (h, vni) =
            wire::tunnel::decap_any(TunnelKind::Vxlan, &f[o.payload_at..][..o.payload_len])
                .unwrap();
        assert_eq!((h, vni), (8, 5));
        // Ethernet padding after the IP packet is allowed.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(parse_outer(&padded, LOCAL, &eps()).unwrap().payload_len, 68);
    }

    #[test]
    fn frames_not_for_an_endpoint_are_not_tunnel() {
        let f = packet();
        let other_port = [Endpoint {
            ip: Ipv4Addr::new(10, 0, 0, 2).into(),
            port: 6081,
        }];
        assert_eq!(
            parse_outer(&f, LOCAL, &other_port),
            Err(PopError::NotTunnel)
        );
        let other_ip = [Endpoint {
            ip: Ipv4Addr::new(10, 0, 0, 3).into(),
            port: 4789,
        }];
        assert_eq!(parse_outer(&f, LOCAL, &other_ip), Err(PopError::NotTunnel));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[8, 6]);
        assert_eq!(parse_outer(&arp, LOCAL, &eps()), Err(PopError::NotTunnel));
        let mut tcp = f.clone();
        tcp[23] = 6;
        assert_eq!(parse_outer(&tcp, LOCAL, &eps()), Err(PopError::NotTunnel));
        assert_eq!(
            parse_outer(&f[..10], LOCAL, &eps()),
            Err(PopError::NotTunnel)
        );
    }

    #[test]
    fn bad_outer_headers_are_refused_by_reason() {
        let f = packet();
        let e = eps();
        let check = |g: &[u8], want: PopError| assert_eq!(parse_outer(g, LOCAL, &e), Err(want));
        check(&f[..30], PopError::Truncated);
        let mut g = f.clone();
        g[14] = 0x65;
        check(&g, PopError::BadIp);
        let mut g = f.clone();
        g[16..18].copy_from_slice(&2000u16.to_be_bytes());
        fix_ip_csum(&mut g);
        check(&g, PopError::Truncated);
        let mut g = f.clone();
        g[22] ^= 1;
        check(&g, PopError::BadChecksum);
        for frag in [0x2000u16, 0x0001, 0x4001] {
            let mut g = f.clone();
            g[20..22].copy_from_slice(&frag.to_be_bytes());
            fix_ip_csum(&mut g);
            check(&g, PopError::Fragment);
        }
        let mut g = f.clone();
        g[38..40].copy_from_slice(&3000u16.to_be_bytes());
        check(&g, PopError::BadUdp);
        let mut g = f.clone();
        g[38..40].copy_from_slice(&4u16.to_be_bytes());
        check(&g, PopError::BadUdp);
        let mut g = f.clone();
        g[0..6].copy_from_slice(&[0xff; 6]);
        check(&g, PopError::BadL2);
        let mut g = f[..12].to_vec();
        g.extend_from_slice(&[0x81, 0, 0, 5]);
        g.extend_from_slice(&f[12..]);
        check(&g, PopError::BadL2);
    }

    fn eps6() -> Vec<Endpoint> {
        vec![Endpoint {
            ip: "fd00::2".parse().unwrap(),
            port: 4789,
        }]
    }

    fn packet6(csum: bool) -> Vec<u8> {
        let t = Template::build(&Params {
            kind: TunnelKind::Vxlan,
            vni: 5,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: LOCAL,
            src_ip: "fd00::1".parse().unwrap(),
            dst_ip: "fd00::2".parse().unwrap(),
            dst_port: 4789,
            tos: 0x28,
            ttl: 33,
            df: true,
            csum,
            options: Vec::new(),
        });
        t.push_vec(&[0xaa; 60], 1)
    }

    /// `f` with an 8-byte extension header `nh` put before its UDP header (payload length
    /// and next header fixed up; the UDP checksum does not cover it).
    fn with_ext(f: &[u8], nh: u8, ext: [u8; 8]) -> Vec<u8> {
        let mut g = f[..54].to_vec();
        let mut e = ext;
        e[0] = g[20];
        g[20] = nh;
        g.extend_from_slice(&e);
        g.extend_from_slice(&f[54..]);
        let plen = (g.len() - 54) as u16;
        g[18..20].copy_from_slice(&plen.to_be_bytes());
        g
    }

    #[test]
    fn an_ipv6_packet_pops_back_with_or_without_a_checksum() {
        for csum in [true, false] {
            let f = packet6(csum);
            let o = parse_outer(&f, LOCAL, &eps6()).unwrap();
            assert_eq!(o.src, "fd00::1".parse::<IpAddr>().unwrap());
            assert_eq!(o.dst, "fd00::2".parse::<IpAddr>().unwrap());
            assert_eq!((o.tos, o.ttl, o.dst_port), (0x28, 33, 4789));
            assert_eq!((o.payload_at, o.payload_len), (62, 68));
            let (h, vni) =
                wire::tunnel::decap_any(TunnelKind::Vxlan, &f[o.payload_at..][..o.payload_len])
                    .unwrap();
            assert_eq!((h, vni), (8, 5));
        }
        // Not for an endpoint: another address, another port, ICMPv6 to our address.
        let f = packet6(true);
        let other = [Endpoint {
            ip: "fd00::3".parse().unwrap(),
            port: 4789,
        }];
        assert_eq!(parse_outer(&f, LOCAL, &other), Err(PopError::NotTunnel));
        let v4_same_port = eps();
        assert_eq!(
            parse_outer(&f, LOCAL, &v4_same_port),
            Err(PopError::NotTunnel)
        );
        let mut g = f.clone();
        g[56..58].copy_from_slice(&6081u16.to_be_bytes());
        assert_eq!(parse_outer(&g, LOCAL, &eps6()), Err(PopError::NotTunnel));
        let mut g = f.clone();
        g[20] = 58;
        assert_eq!(parse_outer(&g, LOCAL, &eps6()), Err(PopError::NotTunnel));
        // An extension header before ICMPv6: not ours either.
        let mut g = with_ext(&f, 60, [0; 8]);
        g[54] = 58;
        assert_eq!(parse_outer(&g, LOCAL, &eps6()), Err(PopError::NotTunnel));
    }

    #[test]
    fn bad_ipv6_outer_headers_are_refused_by_reason() {
        let f = packet6(true);
        let e = eps6();
        let check = |g: &[u8], want: PopError| assert_eq!(parse_outer(g, LOCAL, &e), Err(want));
        check(&f[..50], PopError::Truncated);
        let mut g = f.clone();
        g[14] = 0x40;
        check(&g, PopError::BadIp);
        let mut g = f.clone();
        g[18..20].copy_from_slice(&500u16.to_be_bytes());
        check(&g, PopError::Truncated);
        // Fragment header: first fragment (UDP header visible) and a later one (port unknown).
        check(
            &with_ext(&f, 44, [0, 0, 0, 1, 0, 0, 0, 9]),
            PopError::Fragment,
        );
        check(
            &with_ext(&f, 44, [0, 0, 0, 0x18, 0, 0, 0, 9]),
            PopError::Fragment,
        );
        // Hop-by-hop, destination options, routing: refused as extension headers.
        for nh in [0, 60, 43] {
            check(&with_ext(&f, nh, [0; 8]), PopError::ExtHeader);
        }
        // UDP length too long or too short; checksum wrong; source multicast.
        let mut g = f.clone();
        g[58..60].copy_from_slice(&3000u16.to_be_bytes());
        check(&g, PopError::BadUdp);
        let mut g = f.clone();
        g[58..60].copy_from_slice(&4u16.to_be_bytes());
        check(&g, PopError::BadUdp);
        let mut g = f.clone();
        g[18..20].copy_from_slice(&4u16.to_be_bytes());
        check(&g, PopError::BadUdp);
        let mut g = f.clone();
        let last = g.len() - 1;
        g[last] ^= 0x40;
        check(&g, PopError::BadUdpChecksum);
        let mut g = f.clone();
        g[22] = 0xff;
        check(&g, PopError::BadIp);
        // Not to our MAC, tagged.
        let mut g = f.clone();
        g[0..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
        check(&g, PopError::BadL2);
        let mut g = f[..12].to_vec();
        g.extend_from_slice(&[0x81, 0, 0, 5]);
        g.extend_from_slice(&f[12..]);
        check(&g, PopError::BadL2);
        // A chain of nine extension headers is too long to walk: the kernel's.
        let mut g = f.clone();
        for _ in 0..9 {
            g = with_ext(&g, 60, [0; 8]);
        }
        check(&g, PopError::NotTunnel);
    }
}
