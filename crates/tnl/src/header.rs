//! Tunnel header templates: the outer Ethernet + IPv4 or IPv6 + UDP + VXLAN/Geneve header of
//! one tunnel's packets, built once (per megaflow, at translation) by [`Template::build`],
//! and the per-packet push ([`Template::push`]) that fills only what differs per packet: the
//! IPv4 total length, identification (0 with DF) and checksum, or the IPv6 payload length;
//! the UDP length, source port ([`src_port`], from the inner flow's hash in 32768–61000 as
//! OVS) and checksum (with `csum=true`: the default over IPv6, where the Linux kernel drops a
//! zero UDP checksum unless `udp6zerocsumrx` is set; `csum=false` sends zero, RFC 6935).
//! IPv6: traffic class from `tos`, hop limit from `ttl`, flow label 0, no extension header.
//!
//! Geneve options ([`Params::options`], encoded by [`geneve_options`] from the packet's
//! `tun_metadataN` values and the bridge's TLV map) follow the 8-byte Geneve header, with
//! the header's option length and its C flag (set when an option's type has the critical
//! bit) filled in; the header is then longer than [`HEADER_LEN`] ([`Template::len`]).
//!
//! MTU: [`Template::fits`] says whether an inner frame still fits the underlay MTU after
//! encapsulation; the caller drops and counts one that does not (never fragmented).
//!
//! Threads: built on the thread that translates; `push` runs on any PMD (the only shared
//! state is the process-wide identification counter used without DF, an atomic).
use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use wire::checksum;
use wire::tunnel::{encap_header, TunnelKind};

/// Outer header length over IPv4: Ethernet 14 + IPv4 20 + UDP 8 + tunnel 8 (no Geneve
/// options).
pub const HEADER_LEN: usize = 50;
/// Outer header length over IPv6: Ethernet 14 + IPv6 40 + UDP 8 + tunnel 8.
pub const HEADER_LEN_V6: usize = 70;
/// Most Geneve option bytes a template carries (headers included): every option of the
/// key's 32 value bytes with its 4-byte header, at most 8 options.
pub const MAX_OPTIONS_LEN: usize = 64;
/// Longest outer header (IPv6 with the most options).
pub const MAX_HEADER_LEN: usize = HEADER_LEN_V6 + MAX_OPTIONS_LEN;
/// What encapsulation over IPv4 adds to an inner frame (Ethernet header included) against
/// the underlay's IP MTU: IPv4 20 + UDP 8 + tunnel 8 (Geneve options on top).
pub const MTU_OVERHEAD: usize = 36;
/// The same over IPv6: IPv6 40 + UDP 8 + tunnel 8.
pub const MTU_OVERHEAD_V6: usize = 56;
/// Lowest UDP source port used.
pub const SRC_PORT_MIN: u16 = 32768;
/// Highest UDP source port used.
pub const SRC_PORT_MAX: u16 = 61000;

/// The UDP source port for an inner flow hash, spread over 32768–61000.
pub fn src_port(hash: u32) -> u16 {
    let range = u64::from(SRC_PORT_MAX - SRC_PORT_MIN) + 1;
    SRC_PORT_MIN + ((u64::from(hash) * range) >> 32) as u16
}

/// What a template is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// VXLAN or Geneve.
    pub kind: TunnelKind,
    /// VNI.
    pub vni: u32,
    /// Outer source MAC (the underlay internal port's MAC).
    pub src_mac: [u8; 6],
    /// Outer destination MAC (the next hop's, from the neighbour cache).
    pub dst_mac: [u8; 6],
    /// Outer source address (`local_ip`, or the route's source); of `dst_ip`'s family (a
    /// source of the other family is written as the unspecified address).
    pub src_ip: IpAddr,
    /// Outer destination address (`remote_ip` or the packet's `tun_dst`/`tun_ipv6_dst`):
    /// its family decides the outer header's.
    pub dst_ip: IpAddr,
    /// UDP destination port.
    pub dst_port: u16,
    /// Outer TOS byte (IPv6: traffic class).
    pub tos: u8,
    /// Outer TTL (IPv6: hop limit).
    pub ttl: u8,
    /// Set DF (`df_default`, true unless the port says false; IPv6 never fragments).
    pub df: bool,
    /// Send a UDP checksum (`csum=true`).
    pub csum: bool,
    /// Geneve options, encoded (empty for VXLAN; at most [`MAX_OPTIONS_LEN`] bytes, a
    /// multiple of 4: see [`geneve_options`]).
    pub options: Vec<u8>,
}

/// Encodes Geneve options from `(class, type, value bytes)`: each option's 4-byte header
/// (class, type, length in 4-byte words) and its value; values that are all zero are left
/// out (an option absent from the key reads as zero). Stops before
/// [`MAX_OPTIONS_LEN`] would be passed (the TLV map keeps the values within 32 bytes, so
/// every option fits).
pub fn geneve_options<'a>(opts: impl IntoIterator<Item = (u16, u8, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (class, otype, v) in opts {
        if v.iter().all(|&b| b == 0) || !v.len().is_multiple_of(4) || v.len() > 124 {
            continue;
        }
        if out.len() + 4 + v.len() > MAX_OPTIONS_LEN {
            break;
        }
        out.extend_from_slice(&class.to_be_bytes());
        out.push(otype);
        out.push((v.len() / 4) as u8);
        out.extend_from_slice(v);
    }
    out
}

/// IPv4 identification of outer packets sent without DF (process-wide).
static IDENT: AtomicU16 = AtomicU16::new(0);

/// A built header and what `push` needs to finish it per packet.
#[derive(Clone, Debug)]
pub struct Template {
    /// The header ([`HEADER_LEN`] or [`HEADER_LEN_V6`] bytes, then the Geneve options).
    bytes: [u8; MAX_HEADER_LEN],
    /// Bytes of `bytes` in use.
    len: u8,
    /// Whether the outer header is IPv6.
    v6: bool,
    /// IPv4: one's-complement sum of the IPv4 header with length, identification and
    /// checksum 0. IPv6: the UDP pseudo-header's sum without its length.
    ip_sum: u64,
    params: Params,
}

impl PartialEq for Template {
    fn eq(&self, o: &Template) -> bool {
        self.bytes() == o.bytes() && self.params == o.params
    }
}

impl Eq for Template {}

impl std::hash::Hash for Template {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // The bytes hold every parameter but `csum` (DF is the flag bit in the IPv4 header).
        self.bytes().hash(h);
        self.params.csum.hash(h);
    }
}

impl Template {
    /// Builds the header for `p`.
    pub fn build(p: &Params) -> Template {
        let mut b = [0u8; MAX_HEADER_LEN];
        let opts = if p.kind == TunnelKind::Geneve {
            &p.options[..p.options.len().min(MAX_OPTIONS_LEN) & !3]
        } else {
            &[][..]
        };
        b[0..6].copy_from_slice(&p.dst_mac);
        b[6..12].copy_from_slice(&p.src_mac);
        let (v6, ip_sum, udp_at) = match p.dst_ip {
            IpAddr::V4(dst) => {
                b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut b[14..34];
                ip[0] = 0x45;
                ip[1] = p.tos;
                if p.df {
                    ip[6] = 0x40;
                }
                ip[8] = p.ttl;
                ip[9] = wire::ipv4::proto::UDP;
                if let IpAddr::V4(src) = p.src_ip {
                    ip[12..16].copy_from_slice(&src.octets());
                }
                ip[16..20].copy_from_slice(&dst.octets());
                (false, checksum::sum(ip, 0), 34)
            }
            IpAddr::V6(dst) => {
                b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                let ip = &mut b[14..54];
                ip[0] = 0x60 | (p.tos >> 4);
                ip[1] = p.tos << 4;
                ip[6] = wire::ipv4::proto::UDP;
                ip[7] = p.ttl;
                if let IpAddr::V6(src) = p.src_ip {
                    ip[8..24].copy_from_slice(&src.octets());
                }
                ip[24..40].copy_from_slice(&dst.octets());
                let mut src = [0u8; 16];
                src.copy_from_slice(&ip[8..24]);
                let ps = checksum::pseudo_v6(&src, &dst.octets(), wire::ipv4::proto::UDP, 0);
                (true, ps, 54)
            }
        };
        b[udp_at + 2..udp_at + 4].copy_from_slice(&p.dst_port.to_be_bytes());
        let tun_at = udp_at + 8;
        b[tun_at..tun_at + 8].copy_from_slice(&encap_header(p.kind, p.vni));
        let hdr = tun_at + 8;
        if !opts.is_empty() {
            b[tun_at] = (opts.len() / 4) as u8;
            let mut o = opts;
            while o.len() >= 4 {
                if o[2] & 0x80 != 0 {
                    b[tun_at + 1] |= 0x40; // C: a critical option is present
                }
                let olen = (4 + usize::from(o[3] & 0x1f) * 4).min(o.len());
                o = &o[olen..];
            }
            b[hdr..hdr + opts.len()].copy_from_slice(opts);
        }
        Template {
            bytes: b,
            len: (hdr + opts.len()) as u8,
            v6,
            ip_sum,
            params: p.clone(),
        }
    }

    /// The header bytes as built (lengths, checksums and source port still zero).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The header's length: [`HEADER_LEN`] over IPv4, [`HEADER_LEN_V6`] over IPv6, plus the
    /// Geneve options.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the outer header is IPv6.
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// What it was built from.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Whether an inner frame of `inner_len` bytes (its Ethernet header included) fits an
    /// underlay IP MTU of `mtu` after encapsulation with this header (options included).
    pub fn fits(&self, inner_len: usize, mtu: usize) -> bool {
        let (over, base) = if self.v6 {
            (MTU_OVERHEAD_V6, HEADER_LEN_V6)
        } else {
            (MTU_OVERHEAD, HEADER_LEN)
        };
        inner_len + over + (self.len() - base) <= mtu
    }

    /// Finishes the packet in `pkt`: `pkt[..self.len()]` receives the header,
    /// `pkt[self.len()..]` is the inner frame already in place. `hash` is the inner flow's
    /// hash.
    ///
    /// # Panics
    /// If `pkt` is shorter than [`Template::len`] or its IP payload longer than 65535 bytes
    /// (callers check [`Template::fits`] first).
    pub fn push(&self, pkt: &mut [u8], hash: u32) {
        if self.v6 {
            return self.push_v6(pkt, hash);
        }
        assert!(pkt.len() >= self.len() && pkt.len() - 14 <= usize::from(u16::MAX));
        pkt[..self.len()].copy_from_slice(self.bytes());
        let ip_len = (pkt.len() - 14) as u16;
        let udp_len = ip_len - 20;
        let ident = if self.params.df {
            0
        } else {
            IDENT.fetch_add(1, Relaxed)
        };
        pkt[16..18].copy_from_slice(&ip_len.to_be_bytes());
        pkt[18..20].copy_from_slice(&ident.to_be_bytes());
        let c = !checksum::fold(self.ip_sum + u64::from(ip_len) + u64::from(ident));
        pkt[24..26].copy_from_slice(&c.to_be_bytes());
        pkt[34..36].copy_from_slice(&src_port(hash).to_be_bytes());
        pkt[38..40].copy_from_slice(&udp_len.to_be_bytes());
        if self.params.csum {
            let (IpAddr::V4(s), IpAddr::V4(d)) = (self.params.src_ip, self.params.dst_ip) else {
                unreachable!("an IPv4 template has IPv4 addresses")
            };
            let ps =
                checksum::pseudo_v4(u32::from(s), u32::from(d), wire::ipv4::proto::UDP, udp_len);
            let c = !checksum::fold(checksum::sum(&pkt[34..], ps));
            let c = if c == 0 { 0xffff } else { c };
            pkt[40..42].copy_from_slice(&c.to_be_bytes());
        }
    }

    fn push_v6(&self, pkt: &mut [u8], hash: u32) {
        assert!(pkt.len() >= self.len() && pkt.len() - 54 <= usize::from(u16::MAX));
        pkt[..self.len()].copy_from_slice(self.bytes());
        let udp_len = (pkt.len() - 54) as u16;
        pkt[18..20].copy_from_slice(&udp_len.to_be_bytes());
        pkt[54..56].copy_from_slice(&src_port(hash).to_be_bytes());
        pkt[58..60].copy_from_slice(&udp_len.to_be_bytes());
        if self.params.csum {
            let c = !checksum::fold(checksum::sum(&pkt[54..], self.ip_sum + u64::from(udp_len)));
            let c = if c == 0 { 0xffff } else { c };
            pkt[60..62].copy_from_slice(&c.to_be_bytes());
        }
    }

    /// [`Template::push`] into a new buffer holding the header and a copy of `inner`.
    pub fn push_vec(&self, inner: &[u8], hash: u32) -> Vec<u8> {
        let mut v = vec![0u8; self.len() + inner.len()];
        v[self.len()..].copy_from_slice(inner);
        self.push(&mut v, hash);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use wire::ipv4::Ipv4Packet;

    pub(crate) fn params(kind: TunnelKind, csum: bool, df: bool) -> Params {
        Params {
            kind,
            vni: 0x123456,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2).into(),
            dst_port: 4789,
            tos: 0x10,
            ttl: 64,
            df,
            csum,
            options: Vec::new(),
        }
    }

    #[test]
    fn source_ports_stay_in_range_and_spread() {
        assert_eq!(src_port(0), SRC_PORT_MIN);
        assert_eq!(src_port(u32::MAX), SRC_PORT_MAX);
        let mut seen = std::collections::HashSet::new();
        for h in (0..1000u32).map(|i| i.wrapping_mul(0x9e37_79b9)) {
            let p = src_port(h);
            assert!((SRC_PORT_MIN..=SRC_PORT_MAX).contains(&p));
            seen.insert(p);
        }
        assert!(seen.len() > 900, "{} distinct ports", seen.len());
    }

    #[test]
    fn pushed_headers_are_valid_ipv4_udp_with_the_tunnel_header() {
        let inner: Vec<u8> = (0..77u8).collect();
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            for (csum, df) in [(false, true), (true, false), (true, true)] {
                let t = Template::build(&params(kind, csum, df));
                let a = t.push_vec(&inner, 7);
                let b = t.push_vec(&inner, 7);
                assert_eq!(a.len(), HEADER_LEN + 77);
                assert_eq!(&a[..6], &[2, 0, 0, 0, 0, 2]);
                let ip = Ipv4Packet::new_checked(&a[14..]).unwrap();
                assert!(ip.verify_checksum(), "{kind:?} csum={csum} df={df}");
                assert_eq!(usize::from(ip.total_len()), a.len() - 14);
                assert_eq!((ip.tos(), ip.ttl(), ip.dont_frag()), (0x10, 64, df));
                if df {
                    assert_eq!(
                        (
                            ip.ident(),
                            Ipv4Packet::new_checked(&b[14..]).unwrap().ident()
                        ),
                        (0, 0)
                    );
                } else {
                    let ib = Ipv4Packet::new_checked(&b[14..]).unwrap().ident();
                    assert_ne!(ip.ident(), ib, "without DF the identification moves");
                    assert!(Ipv4Packet::new_checked(&b[14..]).unwrap().verify_checksum());
                }
                let udp = &a[34..];
                assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), src_port(7));
                assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4789);
                assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
                let uc = u16::from_be_bytes([udp[6], udp[7]]);
                if csum {
                    let ps = checksum::pseudo_v4(0x0a00_0001, 0x0a00_0002, 17, udp.len() as u16);
                    assert_eq!(checksum::fold(checksum::sum(udp, ps)), 0xffff);
                } else {
                    assert_eq!(uc, 0);
                }
                let (h, vni) = wire::tunnel::decap_any(kind, &udp[8..]).unwrap();
                assert_eq!((h, vni), (8, 0x123456));
                assert_eq!(&udp[16..], &inner[..]);
            }
        }
    }

    #[test]
    fn geneve_options_follow_the_header_with_length_and_critical_flag() {
        let opts = geneve_options([
            (0x0102u16, 0x80u8, &[0, 0, 0x12, 0x34][..]),
            (0xffff, 0x01, &[0; 8][..]), // zero: absent
            (0x0103, 0x02, &[1, 2, 3, 4, 5, 6, 7, 8][..]),
        ]);
        assert_eq!(opts.len(), 8 + 12);
        let mut p = params(TunnelKind::Geneve, true, true);
        p.options = opts.clone();
        let t = Template::build(&p);
        assert_eq!(t.len(), HEADER_LEN + 20);
        let inner: Vec<u8> = (0..60u8).collect();
        let a = t.push_vec(&inner, 9);
        let ip = Ipv4Packet::new_checked(&a[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(usize::from(ip.total_len()), a.len() - 14);
        let udp = &a[34..];
        assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
        let ps = checksum::pseudo_v4(0x0a00_0001, 0x0a00_0002, 17, udp.len() as u16);
        assert_eq!(checksum::fold(checksum::sum(udp, ps)), 0xffff);
        let g = &udp[8..];
        assert_eq!(g[0] & 0x3f, 5, "option length in 4-byte words");
        assert_eq!(g[1] & 0x40, 0x40, "C flag: a critical option is present");
        assert_eq!(&g[8..28], &opts[..]);
        assert_eq!(&g[28..], &inner[..]);
        assert!(t.fits(1500 - 36 - 20, 1500) && !t.fits(1500 - 36 - 19, 1500));
        // VXLAN ignores options.
        let mut v = params(TunnelKind::Vxlan, false, true);
        v.options = opts;
        assert_eq!(Template::build(&v).len(), HEADER_LEN);
    }

    #[test]
    fn geneve_options_over_ipv6_follow_the_70_byte_header() {
        let opts = geneve_options([(0x0102u16, 0x80u8, &[0, 0, 0x12, 0x34][..])]);
        let mut p = params6(TunnelKind::Geneve, true);
        p.options = opts.clone();
        let t = Template::build(&p);
        assert_eq!(t.len(), HEADER_LEN_V6 + 8);
        let inner: Vec<u8> = (0..60u8).collect();
        let a = t.push_vec(&inner, 9);
        assert_eq!(&a[12..14], &[0x86, 0xdd]);
        let udp = &a[54..];
        assert_eq!(usize::from(u16::from_be_bytes([a[18], a[19]])), udp.len());
        assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
        let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
        s.copy_from_slice(&a[22..38]);
        d.copy_from_slice(&a[38..54]);
        let ps = checksum::pseudo_v6(&s, &d, 17, udp.len() as u32);
        assert_eq!(checksum::fold(checksum::sum(udp, ps)), 0xffff);
        let g = &udp[8..];
        assert_eq!((g[0] & 0x3f, g[1] & 0x40), (2, 0x40));
        assert_eq!(&g[8..16], &opts[..]);
        assert_eq!(&g[16..], &inner[..]);
        // The options count against the MTU on top of the 56 bytes.
        assert!(t.fits(1500 - 56 - 8, 1500) && !t.fits(1500 - 56 - 7, 1500));
    }

    #[test]
    fn mtu_fit_counts_the_outer_ip_udp_and_tunnel_headers() {
        let t = Template::build(&params(TunnelKind::Vxlan, false, true));
        assert!(t.fits(1464, 1500));
        assert!(!t.fits(1465, 1500));
        let t6 = Template::build(&params6(TunnelKind::Vxlan, false));
        assert!(t6.fits(1444, 1500));
        assert!(!t6.fits(1445, 1500));
    }

    pub(crate) fn params6(kind: TunnelKind, csum: bool) -> Params {
        Params {
            src_ip: "fd00::1".parse().unwrap(),
            dst_ip: "fd00::2".parse().unwrap(),
            tos: 0xb8,
            ttl: 17,
            ..params(kind, csum, true)
        }
    }

    #[test]
    fn pushed_ipv6_headers_carry_lengths_hop_limit_class_and_a_right_checksum() {
        let inner: Vec<u8> = (0..91u8).collect();
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            for csum in [true, false] {
                let t = Template::build(&params6(kind, csum));
                assert!(t.is_v6());
                assert_eq!(t.len(), HEADER_LEN_V6);
                let a = t.push_vec(&inner, 7);
                assert_eq!(a.len(), HEADER_LEN_V6 + 91);
                assert_eq!(&a[12..14], &[0x86, 0xdd]);
                let ip = &a[14..54];
                // Version 6, traffic class 0xb8, flow label 0.
                assert_eq!(&ip[..4], &[0x6b, 0x80, 0, 0]);
                assert_eq!(
                    usize::from(u16::from_be_bytes([ip[4], ip[5]])),
                    a.len() - 54
                );
                assert_eq!((ip[6], ip[7]), (17, 17));
                let src: [u8; 16] = ip[8..24].try_into().unwrap();
                let dst: [u8; 16] = ip[24..40].try_into().unwrap();
                assert_eq!(
                    std::net::Ipv6Addr::from(dst),
                    "fd00::2".parse::<std::net::Ipv6Addr>().unwrap()
                );
                let udp = &a[54..];
                assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), src_port(7));
                assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4789);
                assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
                let uc = u16::from_be_bytes([udp[6], udp[7]]);
                if csum {
                    assert_ne!(uc, 0);
                    let ps = checksum::pseudo_v6(&src, &dst, 17, udp.len() as u32);
                    assert_eq!(checksum::fold(checksum::sum(udp, ps)), 0xffff);
                } else {
                    assert_eq!(uc, 0);
                }
                let (h, vni) = wire::tunnel::decap_any(kind, &udp[8..]).unwrap();
                assert_eq!((h, vni), (8, 0x123456));
                assert_eq!(&udp[16..], &inner[..]);
                // Another hash: another source port, and the checksum still right.
                let b = t.push_vec(&inner, 0x8000_0000);
                assert_ne!(&b[54..56], &a[54..56]);
                if csum {
                    let ps = checksum::pseudo_v6(&src, &dst, 17, udp.len() as u32);
                    assert_eq!(checksum::fold(checksum::sum(&b[54..], ps)), 0xffff);
                }
            }
        }
    }
}
