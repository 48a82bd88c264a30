//! Packet parsing and in-place tuple rewrites for the tracker.
//!
//! Owns: [`Tuple`] (the direction-sensitive 5-tuple a connection is keyed by), [`parse`] (one
//! bounded pass from an Ethernet frame to the tuple, the TCP fields the window check needs, the
//! fragment fields reassembly needs, and the quoted tuple of an ICMP error) and [`rewrite`]
//! (address/port rewrites with RFC 1624 checksum updates, for NAT, including the headers quoted
//! inside an ICMP error). Every read is length-checked: a short or lying header gives
//! [`Bad::Truncated`], never a panic.
//!
//! Threads: PMD threads, per packet; pure functions, no locks, no allocation.

use wire::checksum::{update16, update16_udp, update32, update32_udp};
use wire::ethernet::ethertype;

/// IP protocol numbers.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A connection's tuple in one direction. IPv4 addresses use the first four bytes of the
/// 16-byte fields (the rest is zero). For ICMP echo, both ports hold the echo identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Tuple {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (TCP/UDP) or echo id (ICMP).
    pub sport: u16,
    /// Destination port (TCP/UDP) or echo id (ICMP).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6 (else IPv4).
    pub v6: bool,
}

impl Tuple {
    /// The tuple of a packet going the other way.
    pub fn reverse(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// An IPv4 tuple.
    pub fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> Tuple {
        Tuple {
            src: v4_addr(src),
            dst: v4_addr(dst),
            sport,
            dport,
            proto,
            v6: false,
        }
    }
}

/// A 4-byte address in the 16-byte field.
pub fn v4_addr(a: [u8; 4]) -> [u8; 16] {
    let mut o = [0u8; 16];
    o[..4].copy_from_slice(&a);
    o
}

/// Why a packet could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// A header is shorter than it must be or than a length field says.
    Truncated,
    /// Not IPv4/IPv6 (the caller should not send it to conntrack).
    NotIp,
    /// An IPv4 header whose checksum does not verify (the receiver would drop the packet:
    /// tracking it would give state to a packet nobody accepts).
    Checksum,
}

/// The TCP fields tracking needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpInfo {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Raw window.
    pub win: u16,
    /// Window-scale option, if present (SYN only).
    pub wscale: Option<u8>,
    /// Payload bytes.
    pub len: u32,
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// What the L4 header is.
#[derive(Clone, Copy, Debug)]
pub enum L4 {
    /// TCP.
    Tcp(TcpInfo),
    /// UDP.
    Udp,
    /// ICMP/ICMPv6 echo; `request` for a request.
    Echo {
        /// Request (else reply).
        request: bool,
    },
    /// ICMP/ICMPv6 error quoting a packet.
    Error(Quote),
    /// ICMP of another type (not tracked: invalid).
    IcmpOther,
    /// Another IP protocol (tracked by addresses only).
    Other,
}

/// The packet an ICMP error quotes.
#[derive(Clone, Copy, Debug)]
pub struct Quote {
    /// Offset of the quoted IP header in the frame.
    pub l3: usize,
    /// Offset of the quoted L4 header in the frame.
    pub l4: usize,
    /// End of the bytes the outer packet holds.
    pub end: usize,
    /// The quoted packet's tuple.
    pub tuple: Tuple,
}

/// Fragment fields.
#[derive(Clone, Copy, Debug)]
pub struct Frag {
    /// Identification (IPv4: 16 bits).
    pub id: u32,
    /// Offset of this fragment's data in the datagram, bytes.
    pub offset: u32,
    /// More fragments follow.
    pub more: bool,
    /// Upper-layer protocol.
    pub proto: u8,
    /// Offset in the frame of the fragmentable part (data after the IP/fragment headers).
    pub data: usize,
    /// Offset in the frame of the IPv6 fragment header (0 for IPv4).
    pub fh: usize,
}

/// One parsed packet.
#[derive(Clone, Copy, Debug)]
pub struct Parsed {
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the L4 header.
    pub l4: usize,
    /// End of the IP datagram within the frame (padding excluded).
    pub end: usize,
    /// The tuple (ports zero if fragment or other protocol).
    pub tuple: Tuple,
    /// The L4 header (meaningless for fragments).
    pub kind: L4,
    /// Set if the packet is a fragment.
    pub frag: Option<Frag>,
}

fn be16(b: &[u8], at: usize) -> Result<u16, Bad> {
    match b.get(at..at + 2) {
        Some(s) => Ok(u16::from_be_bytes([s[0], s[1]])),
        None => Err(Bad::Truncated),
    }
}
fn be32(b: &[u8], at: usize) -> Result<u32, Bad> {
    match b.get(at..at + 4) {
        Some(s) => Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]])),
        None => Err(Bad::Truncated),
    }
}
fn byte(b: &[u8], at: usize) -> Result<u8, Bad> {
    b.get(at).copied().ok_or(Bad::Truncated)
}

/// IP header facts: (v6, src, dst, proto, l4 offset, end, frag).
struct Ip {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    l4: usize,
    end: usize,
    frag: Option<Frag>,
}

fn parse_ip(b: &[u8], l3: usize, v6: bool, quoted: bool) -> Result<Ip, Bad> {
    if !v6 {
        let vi = byte(b, l3)?;
        if vi >> 4 != 4 {
            return Err(Bad::Truncated);
        }
        let hl = usize::from(vi & 0x0f) * 4;
        let total = usize::from(be16(b, l3 + 2)?);
        if hl < 20 || total < hl || b.len() < l3 + hl {
            return Err(Bad::Truncated);
        }
        // The outer header only: a quote inside an ICMP error is what some host sent, maybe
        // already rewritten (the error's own checksum covers it).
        if !quoted && !wire::checksum::verify(&b[l3..l3 + hl]) {
            return Err(Bad::Checksum);
        }
        // A quoted datagram may be cut short; an outer one must be whole.
        let end = if quoted {
            (l3 + total).min(b.len())
        } else if b.len() < l3 + total {
            return Err(Bad::Truncated);
        } else {
            l3 + total
        };
        let ff = be16(b, l3 + 6)?;
        let proto = byte(b, l3 + 9)?;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..4].copy_from_slice(&b[l3 + 12..l3 + 16]);
        dst[..4].copy_from_slice(&b[l3 + 16..l3 + 20]);
        let off = u32::from(ff & 0x1fff) * 8;
        let more = ff & 0x2000 != 0;
        let frag = (more || off != 0).then_some(Frag {
            id: u32::from(be16(b, l3 + 4)?),
            offset: off,
            more,
            proto,
            data: l3 + hl,
            fh: 0,
        });
        return Ok(Ip {
            v6,
            src,
            dst,
            proto,
            l4: l3 + hl,
            end,
            frag,
        });
    }
    if byte(b, l3)? >> 4 != 6 || b.len() < l3 + 40 {
        return Err(Bad::Truncated);
    }
    let plen = usize::from(be16(b, l3 + 4)?);
    let end = if quoted {
        (l3 + 40 + plen).min(b.len())
    } else if b.len() < l3 + 40 + plen {
        return Err(Bad::Truncated);
    } else {
        l3 + 40 + plen
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&b[l3 + 8..l3 + 24]);
    dst.copy_from_slice(&b[l3 + 24..l3 + 40]);
    let mut next = byte(b, l3 + 6)?;
    let mut off = l3 + 40;
    let mut frag = None;
    for _ in 0..8 {
        let len = match next {
            0 | 43 | 60 => (usize::from(byte(b, off + 1)?) + 1) * 8,
            51 => (usize::from(byte(b, off + 1)?) + 2) * 4,
            44 => {
                let of = be16(b, off + 2)?;
                frag = Some(Frag {
                    id: be32(b, off + 4)?,
                    offset: u32::from(of & 0xfff8),
                    more: of & 1 != 0,
                    proto: byte(b, off)?,
                    data: off + 8,
                    fh: off,
                });
                8
            }
            _ => break,
        };
        next = byte(b, off)?;
        off += len;
        if off > end {
            return Err(Bad::Truncated);
        }
    }
    if matches!(next, 0 | 43 | 60 | 51) {
        return Err(Bad::Truncated);
    }
    // An atomic fragment (offset 0, no more) is a whole datagram.
    if let Some(f) = frag {
        if f.offset == 0 && !f.more {
            frag = None;
        }
    }
    Ok(Ip {
        v6,
        src,
        dst,
        proto: next,
        l4: off,
        end,
        frag,
    })
}

/// Ethernet (with up to two VLAN tags) to IP offset and version.
pub fn l3(frame: &[u8]) -> Result<(usize, bool), Bad> {
    match wire::l3_offset(frame) {
        Some((ethertype::IPV4, off)) => Ok((off, false)),
        Some((ethertype::IPV6, off)) => Ok((off, true)),
        _ => Err(Bad::NotIp),
    }
}

/// Parses an Ethernet frame.
pub fn parse(frame: &[u8]) -> Result<Parsed, Bad> {
    let (l3, v6) = l3(frame)?;
    parse_at(frame, l3, v6, false)
}

fn parse_at(b: &[u8], l3: usize, v6: bool, quoted: bool) -> Result<Parsed, Bad> {
    let ip = parse_ip(b, l3, v6, quoted)?;
    let mut tuple = Tuple {
        src: ip.src,
        dst: ip.dst,
        sport: 0,
        dport: 0,
        proto: ip.proto,
        v6: ip.v6,
    };
    if let Some(f) = ip.frag {
        if !quoted {
            return Ok(Parsed {
                l3,
                l4: ip.l4,
                end: ip.end,
                tuple,
                kind: L4::Other,
                frag: Some(f),
            });
        }
        if f.offset != 0 {
            return Err(Bad::Truncated);
        }
    }
    let l4 = ip.l4;
    let p = &b[..ip.end];
    let kind = match (ip.proto, v6) {
        (proto::TCP, _) => {
            tuple.sport = be16(p, l4)?;
            tuple.dport = be16(p, l4 + 2)?;
            if quoted {
                // A quote carries at least 8 bytes of L4: ports and sequence number.
                L4::Tcp(TcpInfo {
                    seq: be32(p, l4 + 4)?,
                    ..TcpInfo::default()
                })
            } else {
                L4::Tcp(parse_tcp(p, l4)?)
            }
        }
        (proto::UDP, _) => {
            tuple.sport = be16(p, l4)?;
            tuple.dport = be16(p, l4 + 2)?;
            if !quoted && p.len() < l4 + 8 {
                return Err(Bad::Truncated);
            }
            L4::Udp
        }
        (proto::ICMP, false) | (proto::ICMPV6, true) => {
            let ty = byte(p, l4)?;
            if p.len() < l4 + 8 {
                return Err(Bad::Truncated);
            }
            let (req, rep, errs): (u8, u8, &[u8]) = if v6 {
                (128, 129, &[1, 2, 3, 4])
            } else {
                (8, 0, &[3, 4, 5, 11, 12])
            };
            if ty == req || ty == rep {
                let id = be16(p, l4 + 4)?;
                tuple.sport = id;
                tuple.dport = id;
                L4::Echo { request: ty == req }
            } else if errs.contains(&ty) && !quoted {
                let q = parse_at(p, l4 + 8, v6, true)?;
                L4::Error(Quote {
                    l3: l4 + 8,
                    l4: q.l4,
                    end: ip.end,
                    tuple: q.tuple,
                })
            } else {
                L4::IcmpOther
            }
        }
        _ => L4::Other,
    };
    Ok(Parsed {
        l3,
        l4,
        end: ip.end,
        tuple,
        kind,
        frag: None,
    })
}

fn parse_tcp(p: &[u8], l4: usize) -> Result<TcpInfo, Bad> {
    let doff = usize::from(byte(p, l4 + 12)? >> 4) * 4;
    if doff < 20 || p.len() < l4 + doff {
        return Err(Bad::Truncated);
    }
    let flags = byte(p, l4 + 13)?;
    let mut wscale = None;
    if flags & tcp_flags::SYN != 0 {
        let mut i = l4 + 20;
        while i < l4 + doff {
            match p[i] {
                0 => break,
                1 => i += 1,
                k => {
                    let Some(&l) = p.get(i + 1) else { break };
                    if l < 2 || i + usize::from(l) > l4 + doff {
                        break;
                    }
                    if k == 3 && l == 3 {
                        wscale = Some(p[i + 2].min(14));
                    }
                    i += usize::from(l);
                }
            }
        }
    }
    Ok(TcpInfo {
        seq: be32(p, l4 + 4)?,
        ack: be32(p, l4 + 8)?,
        flags,
        win: be16(p, l4 + 14)?,
        wscale,
        len: (p.len() - l4 - doff) as u32,
    })
}

/// Where a transport checksum sits and whether it follows UDP's zero rule.
fn l4_csum(proto_: u8, v6: bool) -> Option<(usize, bool, bool)> {
    // (offset, udp rule, covers the pseudo-header)
    match proto_ {
        proto::TCP => Some((16, false, true)),
        proto::UDP => Some((6, !v6, true)),
        proto::ICMP if !v6 => Some((2, false, false)),
        proto::ICMPV6 if v6 => Some((2, false, true)),
        _ => None,
    }
}

fn get16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}
fn put16(b: &mut [u8], at: usize, v: u16) -> bool {
    match b.get_mut(at..at + 2) {
        Some(s) => {
            s.copy_from_slice(&v.to_be_bytes());
            true
        }
        None => false,
    }
}

/// Folds a change of a 16-byte (or 4-byte) address into checksum `c`.
fn csum_addr(c: u16, old: &[u8], new: &[u8], udp: bool) -> u16 {
    let mut c = c;
    for (o, n) in old.chunks_exact(4).zip(new.chunks_exact(4)) {
        let o = u32::from_be_bytes([o[0], o[1], o[2], o[3]]);
        let n = u32::from_be_bytes([n[0], n[1], n[2], n[3]]);
        if o != n {
            c = if udp {
                update32_udp(c, o, n)
            } else {
                update32(c, o, n)
            };
        }
    }
    c
}

/// Checksum change accumulated by a rewrite (sum of `~old + new` per 16-bit word, RFC 1624),
/// for the ICMP checksum of an enclosing error. No allocation.
#[derive(Default)]
pub struct Delta {
    acc: u64,
}

impl Delta {
    fn push_bytes(&mut self, old: &[u8], new: &[u8]) {
        for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
            self.acc += u64::from(!u16::from_be_bytes([o[0], o[1]]));
            self.acc += u64::from(u16::from_be_bytes([n[0], n[1]]));
        }
    }
    /// Applies every recorded word change to checksum `c`.
    pub fn apply(&self, c: u16) -> u16 {
        if self.acc == 0 {
            return c;
        }
        !wire::checksum::fold(u64::from(!c) + self.acc)
    }
}

/// Rewrites the IP header at `l3` and its L4 header at `l4` from tuple `old` to `new`
/// (addresses and ports that differ), updating the IPv4 header and transport checksums.
/// `end` bounds the packet (a quoted packet may be cut short: a checksum out of reach is
/// left alone). Every changed byte is recorded in `delta` (for an enclosing ICMP checksum).
pub fn rewrite(
    b: &mut [u8],
    l3: usize,
    l4: usize,
    end: usize,
    old: &Tuple,
    new: &Tuple,
    delta: &mut Delta,
) {
    let n = end.min(b.len());
    let b = &mut b[..n];
    let alen = if old.v6 { 16 } else { 4 };
    let (sa, da) = if old.v6 { (8, 24) } else { (12, 16) };
    let csum = l4_csum(old.proto, old.v6);
    // Transport checksum first (it reads the old addresses through `old`).
    let mut l4c = csum.and_then(|(at, _, _)| get16(b, l4 + at));
    let icmp = matches!(old.proto, proto::ICMP | proto::ICMPV6);
    if let (Some(c), Some((_, udp, pseudo))) = (l4c.as_mut(), csum) {
        if pseudo {
            *c = csum_addr(*c, &old.src[..alen], &new.src[..alen], udp);
            *c = csum_addr(*c, &old.dst[..alen], &new.dst[..alen], udp);
        }
        if !icmp {
            for (o, n) in [(old.sport, new.sport), (old.dport, new.dport)] {
                if o != n {
                    *c = if udp {
                        update16_udp(*c, o, n)
                    } else {
                        update16(*c, o, n)
                    };
                }
            }
        }
    }
    if !icmp {
        for (at, o, n) in [(l4, old.sport, new.sport), (l4 + 2, old.dport, new.dport)] {
            if o != n && put16(b, at, n) {
                delta.push_bytes(&o.to_be_bytes(), &n.to_be_bytes());
            }
        }
    }
    if let (Some(c), Some((at, _, _))) = (l4c, csum) {
        if let Some(oldc) = get16(b, l4 + at) {
            if oldc != c {
                put16(b, l4 + at, c);
                delta.push_bytes(&oldc.to_be_bytes(), &c.to_be_bytes());
            }
        }
    }
    for (at, o, n) in [(sa, &old.src, &new.src), (da, &old.dst, &new.dst)] {
        if o[..alen] != n[..alen] {
            b[l3 + at..l3 + at + alen].copy_from_slice(&n[..alen]);
            delta.push_bytes(&o[..alen], &n[..alen]);
            if !old.v6 {
                if let Some(c) = get16(b, l3 + 10) {
                    let nc = csum_addr(c, &o[..4], &n[..4], false);
                    put16(b, l3 + 10, nc);
                    delta.push_bytes(&c.to_be_bytes(), &nc.to_be_bytes());
                }
            }
        }
    }
}

/// Offset of the ICMP checksum of an outer error packet at `l4`.
pub fn icmp_csum_fix(b: &mut [u8], l4: usize, delta: &Delta) {
    if let Some(c) = get16(b, l4 + 2) {
        put16(b, l4 + 2, delta.apply(c));
    }
}
