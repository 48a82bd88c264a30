//! The host's routes as the kernel reports them over rtnetlink: the bytes of a route dump
//! request, and the checked parser of what comes back (`RTM_NEWROUTE` / `RTM_DELROUTE`
//! messages, IPv4 and IPv6), so that native tunneling can follow the host's own routing table
//! (`ip route add 10.2.0.0/16 via 10.1.0.254 dev br-ul`) as well as `vireoctl route/add`.
//!
//! Only what a tunnel can use is kept: unicast routes of the main table, with a destination
//! prefix, an output interface and at most a gateway. Everything else is skipped and counted
//! by reason in [`Skipped`] (other tables, local/broadcast/unreachable types, multipath,
//! `proto kernel` routes, which are the connected routes Vireo already takes from the
//! interface addresses); malformed messages and attributes stop the parse with a
//! [`ParseError`] rather than guessing. The socket itself lives with the daemon.
//!
//! Threads: pure functions; the daemon's housekeeping thread calls them.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Netlink message types and flags this module speaks.
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
#[cfg(test)]
const NLM_F_MULTI: u16 = 0x2;

/// Address families.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Route attributes.
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_VIA: u16 = 18;
/// `rtm_type` of a plain unicast route.
const RTN_UNICAST: u8 = 1;
/// `rtm_protocol` of the routes the kernel makes for an interface's own addresses.
const RTPROT_KERNEL: u8 = 2;
/// The main routing table.
pub const RT_TABLE_MAIN: u32 = 254;

/// Size of `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// Size of `struct rtmsg`.
const RTMSG: usize = 12;

/// The multicast groups a route listener joins (`RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE`).
pub const ROUTE_GROUPS: u32 = 0x40 | 0x400;

/// One route of the host that a native tunnel may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination network (host bits as the kernel gave them: zero).
    pub dst: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Gateway, if the route is not directly connected.
    pub gw: Option<IpAddr>,
    /// Output interface index.
    pub oif: u32,
    /// Route metric (`RTA_PRIORITY`), 0 if absent.
    pub metric: u32,
}

/// Why a well-formed route message was not kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Not the main table.
    pub table: u64,
    /// Not `RTN_UNICAST` (local, broadcast, blackhole, unreachable...).
    pub kind: u64,
    /// `proto kernel`: the connected route of an address.
    pub connected: u64,
    /// Multipath (`RTA_MULTIPATH`), a next hop of another family (`RTA_VIA`), or no output
    /// interface (e.g. a nexthop object).
    pub unsupported: u64,
    /// A family other than IPv4 and IPv6.
    pub family: u64,
}

/// Why a buffer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// A message header shorter than 16 bytes, or a length field past the buffer.
    Truncated,
    /// A route message too short for its `rtmsg`.
    ShortRoute,
    /// An attribute whose length is below 4 or past its message.
    BadAttr,
    /// An address attribute of the wrong length for the family.
    BadAddr,
    /// A prefix length over the family's width.
    BadPrefix,
    /// The kernel answered the request with an error (negative errno).
    Kernel(i32),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Truncated => f.write_str("truncated netlink message"),
            ParseError::ShortRoute => f.write_str("route message shorter than rtmsg"),
            ParseError::BadAttr => f.write_str("malformed route attribute"),
            ParseError::BadAddr => f.write_str("address attribute of the wrong length"),
            ParseError::BadPrefix => f.write_str("prefix length too long"),
            ParseError::Kernel(e) => write!(f, "kernel error {e}"),
        }
    }
}

/// What one buffer of netlink messages said.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Routes added or present (dump answers and `RTM_NEWROUTE` notifications).
    pub routes: Vec<KernelRoute>,
    /// Routes removed (`RTM_DELROUTE` notifications).
    pub removed: Vec<KernelRoute>,
    /// Skipped messages by reason.
    pub skipped: Skipped,
    /// `NLMSG_DONE` seen: the dump is complete.
    pub done: bool,
    /// Messages of other types (ignored).
    pub other: u64,
}

/// The bytes of an `RTM_GETROUTE` dump request for every family, sequence number `seq`.
pub fn dump_request(seq: u32) -> [u8; NLMSG_HDR + RTMSG] {
    let mut b = [0u8; NLMSG_HDR + RTMSG];
    b[0..4].copy_from_slice(&((NLMSG_HDR + RTMSG) as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&RTM_GETROUTE.to_ne_bytes());
    b[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    // rtmsg all zero: family AF_UNSPEC, every table.
    b
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses one buffer as read from a netlink socket (one or more messages).
pub fn parse(buf: &[u8]) -> Result<Batch, ParseError> {
    let mut out = Batch::default();
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        if rest.len() < NLMSG_HDR {
            return Err(ParseError::Truncated);
        }
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDR || len > rest.len() {
            return Err(ParseError::Truncated);
        }
        let ty = u16_at(rest, 4);
        let body = &rest[NLMSG_HDR..len];
        match ty {
            NLMSG_DONE => {
                out.done = true;
                return Ok(out);
            }
            NLMSG_ERROR => {
                if body.len() < 4 {
                    return Err(ParseError::Truncated);
                }
                let e = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                if e != 0 {
                    return Err(ParseError::Kernel(e));
                }
            }
            NLMSG_NOOP => {}
            RTM_NEWROUTE | RTM_DELROUTE => {
                if let Some(r) = route(body, &mut out.skipped)? {
                    if ty == RTM_NEWROUTE {
                        out.routes.push(r);
                    } else {
                        out.removed.push(r);
                    }
                }
            }
            _ => out.other += 1,
        }
        at += align4(len).min(rest.len());
    }
    Ok(out)
}

fn addr(family: u8, v: &[u8]) -> Result<IpAddr, ParseError> {
    match (family, v.len()) {
        (AF_INET, 4) => Ok(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
        (AF_INET6, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(v);
            Ok(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => Err(ParseError::BadAddr),
    }
}

/// One route message's body (`rtmsg` and attributes); `None` if well formed but not kept.
fn route(body: &[u8], skipped: &mut Skipped) -> Result<Option<KernelRoute>, ParseError> {
    if body.len() < RTMSG {
        return Err(ParseError::ShortRoute);
    }
    let (family, len, table8, proto, kind) = (body[0], body[1], body[4], body[5], body[7]);
    let width = match family {
        AF_INET => 32,
        AF_INET6 => 128,
        _ => {
            skipped.family += 1;
            return Ok(None);
        }
    };
    if len > width {
        return Err(ParseError::BadPrefix);
    }
    let mut table = u32::from(table8);
    let (mut dst, mut gw, mut oif, mut metric, mut multipath) = (None, None, None, 0, false);
    let mut at = RTMSG;
    while at < body.len() {
        let rest = &body[at..];
        if rest.len() < 4 {
            return Err(ParseError::BadAttr);
        }
        let alen = usize::from(u16_at(rest, 0));
        if alen < 4 || alen > rest.len() {
            return Err(ParseError::BadAttr);
        }
        let v = &rest[4..alen];
        match u16_at(rest, 2) {
            RTA_DST => dst = Some(addr(family, v)?),
            RTA_GATEWAY => gw = Some(addr(family, v)?),
            RTA_OIF | RTA_PRIORITY | RTA_TABLE if v.len() != 4 => return Err(ParseError::BadAttr),
            RTA_OIF => oif = Some(u32_at(v, 0)),
            RTA_PRIORITY => metric = u32_at(v, 0),
            RTA_TABLE => table = u32_at(v, 0),
            // A next hop of the other family (RFC 5549) is not one a tunnel can use.
            RTA_MULTIPATH | RTA_VIA => multipath = true,
            _ => {}
        }
        at += align4(alen).min(rest.len());
    }
    if table != RT_TABLE_MAIN {
        skipped.table += 1;
        return Ok(None);
    }
    if kind != RTN_UNICAST {
        skipped.kind += 1;
        return Ok(None);
    }
    if proto == RTPROT_KERNEL {
        skipped.connected += 1;
        return Ok(None);
    }
    let Some(oif) = oif.filter(|_| !multipath) else {
        skipped.unsupported += 1;
        return Ok(None);
    };
    let dst = match dst {
        Some(d) => d,
        // The default route has no RTA_DST.
        None if family == AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    Ok(Some(KernelRoute {
        dst,
        len,
        gw,
        oif,
        metric,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route message as the kernel writes it.
    fn msg(ty: u16, rtm: [u8; 12], attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = rtm.to_vec();
        for (t, v) in attrs {
            body.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&t.to_ne_bytes());
            body.extend_from_slice(v);
            while !body.len().is_multiple_of(4) {
                body.push(0);
            }
        }
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&body);
        m
    }

    fn rtm(family: u8, len: u8, proto: u8, kind: u8) -> [u8; 12] {
        [family, len, 0, 0, 254, proto, 0, kind, 0, 0, 0, 0]
    }

    const STATIC: u8 = 4;

    #[test]
    fn a_dump_yields_the_unicast_main_table_routes_with_gateways() {
        let mut buf = msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 16, STATIC, RTN_UNICAST),
            &[
                (RTA_TABLE, &254u32.to_ne_bytes()),
                (RTA_DST, &[10, 2, 0, 0]),
                (RTA_GATEWAY, &[10, 1, 0, 254]),
                (RTA_OIF, &7u32.to_ne_bytes()),
                (RTA_PRIORITY, &100u32.to_ne_bytes()),
            ],
        );
        // The default route: no RTA_DST.
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 0, STATIC, RTN_UNICAST),
            &[
                (RTA_GATEWAY, &[10, 1, 0, 1]),
                (RTA_OIF, &7u32.to_ne_bytes()),
            ],
        ));
        let v6 = "fd00:2::".parse::<Ipv6Addr>().unwrap().octets();
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET6, 64, STATIC, RTN_UNICAST),
            &[(RTA_DST, &v6), (RTA_OIF, &3u32.to_ne_bytes())],
        ));
        // Skipped: a connected route, a local one, another table, a multipath one.
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 24, RTPROT_KERNEL, RTN_UNICAST),
            &[(RTA_DST, &[10, 1, 0, 0]), (RTA_OIF, &7u32.to_ne_bytes())],
        ));
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 32, RTPROT_KERNEL, 2),
            &[(RTA_DST, &[10, 1, 0, 1]), (RTA_OIF, &7u32.to_ne_bytes())],
        ));
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 8, STATIC, RTN_UNICAST),
            &[
                (RTA_TABLE, &100u32.to_ne_bytes()),
                (RTA_DST, &[10, 0, 0, 0]),
                (RTA_OIF, &7u32.to_ne_bytes()),
            ],
        ));
        buf.extend(msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 8, STATIC, RTN_UNICAST),
            &[(RTA_DST, &[11, 0, 0, 0]), (RTA_MULTIPATH, &[0; 8])],
        ));
        // NLMSG_DONE: header and a 4-byte status.
        buf.extend([20, 0, 0, 0, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let b = parse(&buf).unwrap();
        assert!(b.done);
        assert_eq!(
            b.routes,
            vec![
                KernelRoute {
                    dst: "10.2.0.0".parse().unwrap(),
                    len: 16,
                    gw: Some("10.1.0.254".parse().unwrap()),
                    oif: 7,
                    metric: 100
                },
                KernelRoute {
                    dst: "0.0.0.0".parse().unwrap(),
                    len: 0,
                    gw: Some("10.1.0.1".parse().unwrap()),
                    oif: 7,
                    metric: 0
                },
                KernelRoute {
                    dst: "fd00:2::".parse().unwrap(),
                    len: 64,
                    gw: None,
                    oif: 3,
                    metric: 0
                },
            ]
        );
        assert_eq!(
            b.skipped,
            Skipped {
                table: 1,
                kind: 1,
                connected: 1,
                unsupported: 1,
                family: 0
            }
        );
    }

    #[test]
    fn deletions_and_kernel_errors_are_reported() {
        let del = msg(
            RTM_DELROUTE,
            rtm(AF_INET, 16, STATIC, RTN_UNICAST),
            &[(RTA_DST, &[10, 2, 0, 0]), (RTA_OIF, &7u32.to_ne_bytes())],
        );
        let b = parse(&del).unwrap();
        assert_eq!((b.routes.len(), b.removed.len(), b.done), (0, 1, false));
        let mut err = vec![0u8; 36];
        err[0] = 36;
        err[4] = NLMSG_ERROR as u8;
        err[16..20].copy_from_slice(&(-13i32).to_ne_bytes());
        assert_eq!(parse(&err), Err(ParseError::Kernel(-13)));
        // An ack (error 0) is not an error.
        err[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert_eq!(parse(&err).map(|b| b.routes.len()), Ok(0));
    }

    #[test]
    fn malformed_input_is_refused_by_reason() {
        let good = msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 16, STATIC, RTN_UNICAST),
            &[(RTA_DST, &[10, 2, 0, 0]), (RTA_OIF, &7u32.to_ne_bytes())],
        );
        assert_eq!(parse(&good[..10]), Err(ParseError::Truncated));
        let mut long = good.clone();
        long[0] = 200;
        assert_eq!(parse(&long), Err(ParseError::Truncated));
        let short = msg(RTM_NEWROUTE, rtm(AF_INET, 16, STATIC, RTN_UNICAST), &[]);
        assert_eq!(parse(&short[..20]).err(), Some(ParseError::Truncated));
        let mut s2 = short[..20].to_vec();
        s2[0] = 20;
        assert_eq!(parse(&s2), Err(ParseError::ShortRoute));
        let bad_addr = msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 16, STATIC, RTN_UNICAST),
            &[(RTA_DST, &[10, 2, 0])],
        );
        assert_eq!(parse(&bad_addr), Err(ParseError::BadAddr));
        let bad_prefix = msg(RTM_NEWROUTE, rtm(AF_INET, 33, STATIC, RTN_UNICAST), &[]);
        assert_eq!(parse(&bad_prefix), Err(ParseError::BadPrefix));
        let mut bad_attr = good.clone();
        bad_attr[28] = 2; // first attribute's length below 4
        assert_eq!(parse(&bad_attr), Err(ParseError::BadAttr));
        let bad_oif = msg(
            RTM_NEWROUTE,
            rtm(AF_INET, 16, STATIC, RTN_UNICAST),
            &[(RTA_OIF, &[7, 0])],
        );
        assert_eq!(parse(&bad_oif), Err(ParseError::BadAttr));
    }

    #[test]
    fn the_dump_request_is_a_well_formed_getroute() {
        let r = dump_request(9);
        assert_eq!(u32_at(&r, 0) as usize, r.len());
        assert_eq!(u16_at(&r, 4), RTM_GETROUTE);
        assert_eq!(u16_at(&r, 6), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(u32_at(&r, 8), 9);
    }
}
