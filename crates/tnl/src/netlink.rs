//! The host's routes for native tunneling, from the kernel over rtnetlink: the
//! `RTM_GETROUTE` dump request ([`dump_request`]) and the checked parser of the kernel's
//! answer ([`parse_routes`]).
//!
//! What is kept (the caller then keeps only routes whose output device is a Vireo internal
//! port): unicast routes of the main table (254), IPv4 and IPv6, with one output device
//! (`RTA_OIF`; multipath routes are skipped), not made by the kernel itself for an address
//! (`RTPROT_KERNEL`: those are the connected routes the daemon already reads with
//! `getifaddrs`). Every length is checked against the buffer before a read; a message or
//! attribute that lies about its length ends the parse with [`NlError`] (the daemon keeps the
//! routes it had and counts the failure).
//!
//! Threads: pure functions; the daemon's housekeeping thread calls them.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const RT_TABLE_MAIN: u32 = 254;
const RTN_UNICAST: u8 = 1;
const RTPROT_KERNEL: u8 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;

/// One route of the kernel's main table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination network (host bits as the kernel gives them: zero).
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Gateway, if any.
    pub gw: Option<IpAddr>,
    /// Output interface index.
    pub oif: u32,
    /// Preferred source, if any.
    pub src: Option<IpAddr>,
}

/// Why a dump could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NlError {
    /// A message or attribute length outside the buffer or below its header.
    Malformed,
    /// The kernel answered with an error (the errno).
    Kernel(i32),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `RTM_GETROUTE` dump request for every family (AF_UNSPEC), sequence number `seq`.
pub fn dump_request(seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(28);
    m.extend_from_slice(&28u32.to_ne_bytes());
    m.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // struct rtmsg, all zero: every family, table, protocol.
    m.extend_from_slice(&[0u8; 12]);
    m
}

fn addr(family: u8, b: &[u8]) -> Option<IpAddr> {
    match (family, b.len()) {
        (AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        (AF_INET6, 16) => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?))),
        _ => None,
    }
}

/// One `RTM_NEWROUTE` payload (rtmsg and attributes), if it is a route we keep.
fn parse_route(p: &[u8]) -> Result<Option<KernelRoute>, NlError> {
    if p.len() < 12 {
        return Err(NlError::Malformed);
    }
    let (family, dst_len, mut table, protocol, rtype) = (p[0], p[1], u32::from(p[4]), p[5], p[7]);
    let width = match family {
        AF_INET => 32,
        AF_INET6 => 128,
        _ => return Ok(None),
    };
    let (mut dst, mut gw, mut oif, mut src, mut multipath) = (None, None, None, None, false);
    let mut at = 12;
    while at + 4 <= p.len() {
        let len = usize::from(u16_at(p, at));
        let ty = u16_at(p, at + 2) & 0x3fff;
        if len < 4 || at + len > p.len() {
            return Err(NlError::Malformed);
        }
        let v = &p[at + 4..at + len];
        match ty {
            RTA_DST => dst = addr(family, v),
            RTA_GATEWAY => gw = addr(family, v),
            RTA_PREFSRC => src = addr(family, v),
            RTA_OIF if v.len() == 4 => oif = Some(u32_at(v, 0)),
            RTA_TABLE if v.len() == 4 => table = u32_at(v, 0),
            RTA_MULTIPATH => multipath = true,
            _ => {}
        }
        at += (len + 3) & !3;
    }
    if table != RT_TABLE_MAIN
        || rtype != RTN_UNICAST
        || protocol == RTPROT_KERNEL
        || multipath
        || u32::from(dst_len) > width
    {
        return Ok(None);
    }
    let Some(oif) = oif else { return Ok(None) };
    let prefix = match dst {
        Some(d) => d,
        None if dst_len == 0 => match family {
            AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            _ => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        },
        None => return Ok(None),
    };
    Ok(Some(KernelRoute {
        prefix,
        len: dst_len,
        gw,
        oif,
        src,
    }))
}

/// Parses one datagram of the kernel's answer to [`dump_request`] with sequence `seq`:
/// the routes kept (see the module comment) and whether the dump is complete (`NLMSG_DONE`
/// seen). Messages of another sequence are skipped. Never panics.
pub fn parse_routes(buf: &[u8], seq: u32) -> Result<(Vec<KernelRoute>, bool), NlError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32_at(buf, at) as usize;
        if len < 16 || len > buf.len() - at {
            return Err(NlError::Malformed);
        }
        let ty = u16_at(buf, at + 4);
        let this_seq = u32_at(buf, at + 8);
        let payload = &buf[at + 16..at + len];
        if this_seq == seq {
            match ty {
                NLMSG_DONE => return Ok((out, true)),
                NLMSG_ERROR => {
                    if payload.len() < 4 {
                        return Err(NlError::Malformed);
                    }
                    let e = u32_at(payload, 0) as i32;
                    if e != 0 {
                        // (i32::MIN from a lying kernel has no negation: found by the fuzzer.)
                        return Err(NlError::Kernel(e.checked_neg().unwrap_or(i32::MAX)));
                    }
                }
                RTM_NEWROUTE => {
                    if let Some(r) = parse_route(payload)? {
                        out.push(r);
                    }
                }
                _ => {}
            }
        }
        at += (len + 3) & !3;
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn msg(ty: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m
    }

    /// An RTM_NEWROUTE: family, prefix length, protocol, type, and attributes.
    pub(crate) fn route(
        family: u8,
        dst_len: u8,
        proto: u8,
        rtype: u8,
        attrs: &[Vec<u8>],
    ) -> Vec<u8> {
        let mut p = vec![family, dst_len, 0, 0, 254, proto, 0, rtype, 0, 0, 0, 0];
        for a in attrs {
            p.extend_from_slice(a);
        }
        msg(RTM_NEWROUTE, 7, &p)
    }

    #[test]
    fn a_dump_gives_main_table_unicast_routes_of_both_families() {
        let v6: Ipv6Addr = "fd00:5::".parse().unwrap();
        let gw6: Ipv6Addr = "fd00::fe".parse().unwrap();
        let mut buf = route(
            AF_INET,
            16,
            4,
            RTN_UNICAST,
            &[
                attr(RTA_DST, &[10, 9, 0, 0]),
                attr(RTA_GATEWAY, &[10, 0, 0, 254]),
                attr(RTA_OIF, &5u32.to_ne_bytes()),
            ],
        );
        buf.extend(route(
            AF_INET6,
            64,
            3,
            RTN_UNICAST,
            &[
                attr(RTA_DST, &v6.octets()),
                attr(RTA_GATEWAY, &gw6.octets()),
                attr(RTA_OIF, &6u32.to_ne_bytes()),
                attr(RTA_TABLE, &254u32.to_ne_bytes()),
            ],
        ));
        // A default route, a connected (kernel) one, a local-table one, a multipath one,
        // another message's sequence: only the default is kept.
        buf.extend(route(
            AF_INET,
            0,
            3,
            RTN_UNICAST,
            &[attr(RTA_OIF, &5u32.to_ne_bytes())],
        ));
        buf.extend(route(
            AF_INET,
            24,
            RTPROT_KERNEL,
            RTN_UNICAST,
            &[
                attr(RTA_DST, &[10, 0, 0, 0]),
                attr(RTA_OIF, &5u32.to_ne_bytes()),
            ],
        ));
        buf.extend(route(
            AF_INET,
            32,
            3,
            2,
            &[
                attr(RTA_DST, &[10, 0, 0, 1]),
                attr(RTA_OIF, &5u32.to_ne_bytes()),
            ],
        ));
        buf.extend(route(
            AF_INET,
            8,
            3,
            RTN_UNICAST,
            &[attr(RTA_DST, &[11, 0, 0, 0]), attr(RTA_MULTIPATH, &[0; 8])],
        ));
        let mut other = route(
            AF_INET,
            8,
            3,
            RTN_UNICAST,
            &[attr(RTA_OIF, &5u32.to_ne_bytes())],
        );
        other[8..12].copy_from_slice(&9u32.to_ne_bytes());
        buf.extend(other);
        let (routes, done) = parse_routes(&buf, 7).unwrap();
        assert!(!done);
        assert_eq!(routes.len(), 3, "{routes:?}");
        assert_eq!(
            routes[0],
            KernelRoute {
                prefix: "10.9.0.0".parse().unwrap(),
                len: 16,
                gw: Some("10.0.0.254".parse().unwrap()),
                oif: 5,
                src: None
            }
        );
        assert_eq!(
            (routes[1].prefix, routes[1].gw),
            (IpAddr::V6(v6), Some(IpAddr::V6(gw6)))
        );
        assert_eq!(
            (routes[2].prefix, routes[2].len),
            ("0.0.0.0".parse().unwrap(), 0)
        );
        let done = msg(NLMSG_DONE, 7, &[0; 4]);
        assert_eq!(parse_routes(&done, 7), Ok((vec![], true)));
    }

    #[test]
    fn lying_lengths_and_kernel_errors_are_refused() {
        let good = route(
            AF_INET,
            16,
            4,
            RTN_UNICAST,
            &[attr(RTA_OIF, &5u32.to_ne_bytes())],
        );
        let mut g = good.clone();
        g[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(parse_routes(&g, 7), Err(NlError::Malformed));
        let mut g = good.clone();
        g[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert_eq!(parse_routes(&g, 7), Err(NlError::Malformed));
        let mut g = good.clone();
        g[28..30].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(parse_routes(&g, 7), Err(NlError::Malformed));
        let mut g = good.clone();
        g[28..30].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse_routes(&g, 7), Err(NlError::Malformed));
        let err = msg(NLMSG_ERROR, 7, &(-13i32).to_ne_bytes());
        assert_eq!(parse_routes(&err, 7), Err(NlError::Kernel(13)));
        let err = msg(NLMSG_ERROR, 7, &i32::MIN.to_ne_bytes());
        assert_eq!(parse_routes(&err, 7), Err(NlError::Kernel(i32::MAX)));
        assert_eq!(parse_routes(&dump_request(7)[..10], 7), Ok((vec![], false)));
        assert_eq!(dump_request(7).len(), 28);
    }
}
