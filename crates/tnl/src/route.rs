//! The route table of native tunneling, IPv4 and IPv6: longest-prefix match over operator
//! routes (`vireoctl route/add PREFIX DEV [GW]`, `route/del`) and connected routes, one per
//! address of a Vireo internal port (set by the daemon from the kernel's addresses of that
//! port; IPv6 link-local addresses, fe80::/10, make no route).
//!
//! Kernel routes ([`RouteTable::set_kernel`]): the host's main-table routes whose output
//! device is a Vireo internal port, read by the daemon over rtnetlink (`crate::netlink`) every
//! housekeeping round, replaced as a whole.
//!
//! A lookup only considers routes of the destination's family. At equal prefix length an
//! operator route wins over a kernel one, and a kernel one over a connected one. A route's source address is its device's first
//! connected address of the same family (none if the device has no such address, in which
//! case a tunnel cannot use it natively). A gateway must be of the prefix's family. Not persisted: like OVS's `ovs/route/add`,
//! operator routes live until the daemon stops.
//!
//! Threads: plain data, owned by [`crate::Underlay`].
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where a route came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `vireoctl route/add`.
    User,
    /// An address of an internal port.
    Connected,
    /// The host's routing table (through an internal port).
    Kernel,
}

impl Origin {
    /// The name `route/show` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Connected => "connected",
            Origin::Kernel => "kernel",
        }
    }
}

/// A kernel route as [`RouteTable::set_kernel`] takes it: prefix, length, device (a Vireo
/// port name), gateway.
pub type KernelEntry = (IpAddr, u8, String, Option<IpAddr>);

/// One route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Network address (host bits zero).
    pub prefix: IpAddr,
    /// Prefix length, 0..=32 (IPv4) or 0..=128 (IPv6).
    pub len: u8,
    /// The Vireo port (an internal port) the route leaves through.
    pub dev: String,
    /// Gateway, if not directly connected (same family as `prefix`).
    pub gw: Option<IpAddr>,
    /// Source address: the device's connected address (filled by lookup for user routes).
    pub src: Option<IpAddr>,
    /// Who made it.
    pub origin: Origin,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} dev {}", self.prefix, self.len, self.dev)?;
        if let Some(gw) = self.gw {
            write!(f, " via {gw}")?;
        }
        if let Some(src) = self.src {
            write!(f, " src {src}")?;
        }
        write!(f, " ({})", self.origin.name())
    }
}

/// The bits of an address (IPv4 in the low 32) and its width.
fn bits(a: IpAddr) -> (u128, u32) {
    match a {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn from_bits(b: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(b))
    } else {
        IpAddr::V4(Ipv4Addr::from(b as u32))
    }
}

/// The mask of a `len`-bit prefix in a `width`-bit address.
fn mask(len: u8, width: u32) -> u128 {
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    all & !all.checked_shr(u32::from(len)).unwrap_or(0)
}

/// Whether `a` is an IPv6 link-local address (fe80::/10: never a connected route).
pub fn is_link_local_v6(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Parses `A.B.C.D/N` or `X:Y::Z/N` (a bare address is a host route, /32 or /128); host
/// bits must be zero.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?;
    let (b, width) = bits(addr);
    let len: u8 = match l {
        None => width as u8,
        Some(l) => match l.parse() {
            Ok(n) if u32::from(n) <= width => n,
            _ => return Err(format!("{l:?} is not a prefix length from 0 to {width}")),
        },
    };
    if b & !mask(len, width) != 0 {
        return Err(format!(
            "{s}: host bits set (the network is {}/{len})",
            from_bits(b & mask(len, width), width == 128)
        ));
    }
    Ok((addr, len))
}

/// Whether `dst` lies in `prefix/len` (false across families).
fn covers(prefix: IpAddr, len: u8, dst: IpAddr) -> bool {
    let ((p, w), (d, dw)) = (bits(prefix), bits(dst));
    w == dw && d & mask(len, w) == p
}

/// The route table.
#[derive(Debug, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    generation: u64,
}

impl RouteTable {
    /// Adds (or replaces) the operator route for `prefix` through port `dev`, via `gw` if given.
    pub fn add(&mut self, prefix: &str, dev: &str, gw: Option<&str>) -> Result<(), String> {
        let (p, len) = parse_prefix(prefix)?;
        if dev.is_empty() {
            return Err("a route needs a device (a Vireo internal port)".into());
        }
        let gw = match gw {
            None => None,
            Some(g) => {
                let a: IpAddr = g
                    .parse()
                    .map_err(|_| format!("gateway {g:?} is not an IP address"))?;
                if a.is_ipv4() != p.is_ipv4() {
                    return Err(format!("gateway {a} is not of {p}/{len}'s address family"));
                }
                let bad = match a {
                    IpAddr::V4(a) => a.is_unspecified() || a.is_broadcast() || a.is_multicast(),
                    IpAddr::V6(a) => a.is_unspecified() || a.is_multicast() || a.is_loopback(),
                };
                if bad {
                    return Err(format!("gateway {a} is not a unicast address"));
                }
                Some(a)
            }
        };
        self.routes
            .retain(|r| !(r.origin == Origin::User && r.prefix == p && r.len == len));
        self.routes.push(Route {
            prefix: p,
            len,
            dev: dev.to_string(),
            gw,
            src: None,
            origin: Origin::User,
        });
        self.generation += 1;
        Ok(())
    }

    /// Removes the operator route for `prefix`.
    pub fn del(&mut self, prefix: &str) -> Result<(), String> {
        let (p, len) = parse_prefix(prefix)?;
        let before = self.routes.len();
        self.routes
            .retain(|r| !(r.origin == Origin::User && r.prefix == p && r.len == len));
        if self.routes.len() == before {
            return Err(format!("no route/add route for {p}/{len}"));
        }
        self.generation += 1;
        Ok(())
    }

    /// Makes `addrs` (address, prefix length) the connected routes of port `dev`, replacing
    /// what it had. Returns whether anything changed (unchanged input moves nothing).
    /// IPv6 link-local addresses are left out.
    pub fn set_connected(&mut self, dev: &str, addrs: &[(IpAddr, u8)]) -> bool {
        let want: Vec<Route> = addrs
            .iter()
            .filter(|(a, l)| u32::from(*l) <= bits(*a).1)
            .filter(|(a, _)| !matches!(a, IpAddr::V6(a) if is_link_local_v6(*a)))
            .map(|&(a, l)| Route {
                prefix: {
                    let (b, w) = bits(a);
                    from_bits(b & mask(l, w), w == 128)
                },
                len: l,
                dev: dev.to_string(),
                gw: None,
                src: Some(a),
                origin: Origin::Connected,
            })
            .collect();
        let have: Vec<&Route> = self
            .routes
            .iter()
            .filter(|r| r.origin == Origin::Connected && r.dev == dev)
            .collect();
        if have.len() == want.len() && want.iter().all(|w| have.contains(&w)) {
            return false;
        }
        self.routes
            .retain(|r| !(r.origin == Origin::Connected && r.dev == dev));
        self.routes.extend(want);
        self.generation += 1;
        true
    }

    /// Makes `routes` (prefix, length, device, gateway) the kernel routes, replacing what was
    /// there; routes of a bad length or host bits set are left out. Returns whether anything
    /// changed (unchanged input moves nothing).
    pub fn set_kernel(&mut self, routes: &[KernelEntry]) -> bool {
        let mut want: Vec<Route> = routes
            .iter()
            .filter(|(p, l, _, gw)| {
                let (b, w) = bits(*p);
                u32::from(*l) <= w
                    && b & !mask(*l, w) == 0
                    && gw.is_none_or(|g| g.is_ipv4() == p.is_ipv4())
            })
            .map(|(p, l, dev, gw)| Route {
                prefix: *p,
                len: *l,
                dev: dev.clone(),
                gw: *gw,
                src: None,
                origin: Origin::Kernel,
            })
            .collect();
        // One route per prefix: the first (the caller passes the best metric first).
        let mut seen = std::collections::BTreeSet::new();
        want.retain(|r| seen.insert((r.prefix, r.len)));
        let have: Vec<&Route> = self
            .routes
            .iter()
            .filter(|r| r.origin == Origin::Kernel)
            .collect();
        if have.len() == want.len() && want.iter().all(|w| have.contains(&w)) {
            return false;
        }
        self.routes.retain(|r| r.origin != Origin::Kernel);
        self.routes.extend(want);
        self.generation += 1;
        true
    }

    /// The addresses Vireo's internal ports hold (the connected routes' sources).
    pub fn local_addrs(&self) -> impl Iterator<Item = (&str, IpAddr)> {
        self.routes
            .iter()
            .filter(|r| r.origin == Origin::Connected)
            .filter_map(|r| r.src.map(|s| (r.dev.as_str(), s)))
    }

    /// The longest-prefix route for `dst` among routes of its family (an operator route
    /// before a connected one of the same length), with its source filled in.
    pub fn lookup(&self, dst: IpAddr) -> Option<Route> {
        let best = self
            .routes
            .iter()
            .filter(|r| covers(r.prefix, r.len, dst))
            .max_by_key(|r| {
                let rank = match r.origin {
                    Origin::User => 2,
                    Origin::Kernel => 1,
                    Origin::Connected => 0,
                };
                (r.len, rank)
            })?;
        let mut r = best.clone();
        if r.src.is_none() {
            r.src = self
                .routes
                .iter()
                .filter(|c| c.origin == Origin::Connected && c.dev == r.dev)
                .filter_map(|c| c.src)
                .find(|s| s.is_ipv4() == dst.is_ipv4());
        }
        Some(r)
    }

    /// Every route, IPv4 then IPv6, longest prefix first (as `route/show` lists them).
    pub fn show(&self) -> Vec<Route> {
        let mut v = self.routes.clone();
        // IPv4 first, then IPv6; longest prefix first within each.
        v.sort_by(|a, b| {
            (a.prefix.is_ipv6(), b.len, a.prefix).cmp(&(b.prefix.is_ipv6(), a.len, b.prefix))
        });
        v
    }

    /// The change counter.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_and_user_beats_connected_at_equal_length() {
        let mut t = RouteTable::default();
        t.set_connected("brp", &[(ip("10.0.0.1"), 8)]);
        t.add("10.1.0.0/16", "brq", None).unwrap();
        t.add("10.1.2.0/24", "brp", Some("10.0.0.254")).unwrap();
        assert_eq!(t.lookup(ip("10.9.9.9")).unwrap().dev, "brp");
        assert_eq!(t.lookup(ip("10.1.9.9")).unwrap().dev, "brq");
        let r = t.lookup(ip("10.1.2.3")).unwrap();
        assert_eq!((r.len, r.gw), (24, Some(ip("10.0.0.254"))));
        // The source of a user route is its device's connected address.
        assert_eq!(r.src, Some(ip("10.0.0.1")));
        assert_eq!(t.lookup(ip("10.1.9.9")).unwrap().src, None);
        assert_eq!(t.lookup(ip("11.0.0.1")), None);
        t.add("10.0.0.0/8", "brq", None).unwrap();
        assert_eq!(t.lookup(ip("10.9.9.9")).unwrap().dev, "brq");
        t.add("0.0.0.0/0", "brp", Some("10.0.0.254")).unwrap();
        assert_eq!(t.lookup(ip("11.0.0.1")).unwrap().gw, Some(ip("10.0.0.254")));
    }

    #[test]
    fn bad_prefixes_and_gateways_are_refused_and_change_nothing() {
        let mut t = RouteTable::default();
        for (p, gw) in [
            ("10.0.0.1/24", None),
            ("10.0.0.0/33", None),
            ("fe80::1/64", None),
            ("fd00::/129", None),
            ("fd00::/64", Some("10.0.0.1")),
            ("10.0.0.0/24", Some("fd00::1")),
            ("fd00::/64", Some("ff02::1")),
            ("10.0.0.0/x", None),
            ("10.0.0.0/24", Some("nope")),
            ("10.0.0.0/24", Some("255.255.255.255")),
        ] {
            assert!(t.add(p, "brp", gw).is_err(), "{p} {gw:?}");
        }
        assert!(t.add("10.0.0.0/24", "", None).is_err());
        assert_eq!(t.generation(), 0);
        assert!(t.show().is_empty());
        assert!(t.del("10.0.0.0/24").is_err());
    }

    #[test]
    fn del_removes_only_the_user_route_and_readd_replaces() {
        let mut t = RouteTable::default();
        t.set_connected("brp", &[(ip("10.0.0.1"), 24)]);
        t.add("10.0.0.0/24", "brq", None).unwrap();
        t.add("10.0.0.0/24", "brr", None).unwrap();
        assert_eq!(t.show().len(), 2);
        assert_eq!(t.lookup(ip("10.0.0.5")).unwrap().dev, "brr");
        t.del("10.0.0.0/24").unwrap();
        assert_eq!(t.lookup(ip("10.0.0.5")).unwrap().dev, "brp");
        assert!(t.del("10.0.0.0/24").is_err());
    }

    #[test]
    fn connected_routes_follow_the_ports_addresses() {
        let mut t = RouteTable::default();
        assert!(t.set_connected("brp", &[(ip("10.0.0.1"), 24), (ip("192.168.5.9"), 30)]));
        let g = t.generation();
        assert!(!t.set_connected("brp", &[(ip("192.168.5.9"), 30), (ip("10.0.0.1"), 24)]));
        assert_eq!(t.generation(), g);
        assert_eq!(
            t.lookup(ip("192.168.5.10")).unwrap().prefix,
            ip("192.168.5.8")
        );
        let locals: Vec<_> = t.local_addrs().map(|(_, a)| a).collect();
        assert_eq!(locals.len(), 2);
        assert!(t.set_connected("brp", &[]));
        assert_eq!(t.lookup(ip("10.0.0.2")), None);
        assert!(t.generation() > g);
        assert_eq!(
            t.show().len(),
            0,
            "removing a port's addresses removes its connected routes"
        );
    }

    #[test]
    fn show_lists_longest_first_and_formats() {
        let mut t = RouteTable::default();
        t.add("0.0.0.0/0", "brp", Some("10.0.0.254")).unwrap();
        t.set_connected("brp", &[(ip("10.0.0.1"), 24)]);
        let s: Vec<String> = t.show().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            s,
            vec![
                "10.0.0.0/24 dev brp src 10.0.0.1 (connected)".to_string(),
                "0.0.0.0/0 dev brp via 10.0.0.254 (user)".to_string(),
            ]
        );
    }

    #[test]
    fn ipv6_prefixes_match_longest_first_and_never_across_families() {
        let mut t = RouteTable::default();
        t.set_connected(
            "brp",
            &[
                (ip("10.0.0.1"), 24),
                (ip("fd00:1::1"), 64),
                (ip("fe80::1"), 64),
            ],
        );
        // The link-local address makes no route.
        assert_eq!(t.show().len(), 2);
        assert_eq!(t.lookup(ip("fe80::2")), None);
        let r = t.lookup(ip("fd00:1::2")).unwrap();
        assert_eq!(
            (r.prefix, r.len, r.src),
            (ip("fd00:1::"), 64, Some(ip("fd00:1::1")))
        );
        assert_eq!(t.lookup(ip("fd00:2::2")), None);
        t.add("fd00:2::/48", "brp", Some("fd00:1::fe")).unwrap();
        t.add("fd00:2:0:5::/64", "brq", None).unwrap();
        let r = t.lookup(ip("fd00:2::9")).unwrap();
        // A user route takes its device's connected source of the same family.
        assert_eq!(
            (r.gw, r.src),
            (Some(ip("fd00:1::fe")), Some(ip("fd00:1::1")))
        );
        assert_eq!(t.lookup(ip("fd00:2:0:5::9")).unwrap().dev, "brq");
        // An IPv6 default route does not catch IPv4, nor the reverse.
        t.add("::/0", "brq", Some("fd00:1::fe")).unwrap();
        assert_eq!(t.lookup(ip("11.0.0.1")), None);
        t.add("0.0.0.0/0", "brp", Some("10.0.0.254")).unwrap();
        assert_eq!(t.lookup(ip("2001:db8::1")).unwrap().dev, "brq");
        assert_eq!(t.lookup(ip("11.0.0.1")).unwrap().dev, "brp");
        // A bare address is a host route.
        assert_eq!(parse_prefix("fd00::7"), Ok((ip("fd00::7"), 128)));
        assert_eq!(parse_prefix("10.0.0.7"), Ok((ip("10.0.0.7"), 32)));
        assert!(parse_prefix("fd00::1/64")
            .unwrap_err()
            .contains("fd00::/64"));
        let shown: Vec<String> = t.show().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            shown.first().unwrap(),
            "10.0.0.0/24 dev brp src 10.0.0.1 (connected)"
        );
        assert_eq!(shown.last().unwrap(), "::/0 dev brq via fd00:1::fe (user)");
        t.del("fd00:2::/48").unwrap();
        assert_eq!(t.lookup(ip("fd00:2::9")).unwrap().dev, "brq");
    }

    #[test]
    fn kernel_routes_rank_between_user_and_connected_and_are_replaced_whole() {
        let mut t = RouteTable::default();
        t.set_connected("brp", &[(ip("10.0.0.1"), 24), (ip("fd00::1"), 64)]);
        let k = |p: &str, l: u8, gw: Option<&str>| (ip(p), l, "brp".to_string(), gw.map(ip));
        assert!(t.set_kernel(&[
            k("10.9.0.0", 16, Some("10.0.0.254")),
            k("fd09::", 48, Some("fd00::fe")),
            k("10.0.0.0", 24, None),
            // Refused: host bits, a gateway of the other family.
            k("10.8.0.1", 16, None),
            k("10.7.0.0", 16, Some("fd00::fe")),
        ]));
        let g = t.generation();
        assert!(!t.set_kernel(&[
            k("fd09::", 48, Some("fd00::fe")),
            k("10.9.0.0", 16, Some("10.0.0.254")),
            k("10.0.0.0", 24, None),
            k("10.8.0.1", 16, None),
        ]));
        assert_eq!(t.generation(), g);
        let r = t.lookup(ip("10.9.1.1")).unwrap();
        assert_eq!(
            (r.origin, r.gw, r.src),
            (Origin::Kernel, Some(ip("10.0.0.254")), Some(ip("10.0.0.1")))
        );
        assert_eq!(t.lookup(ip("fd09::5")).unwrap().origin, Origin::Kernel);
        // Kernel beats connected at equal length; user beats kernel.
        assert_eq!(t.lookup(ip("10.0.0.5")).unwrap().origin, Origin::Kernel);
        t.add("10.9.0.0/16", "brq", None).unwrap();
        assert_eq!(t.lookup(ip("10.9.1.1")).unwrap().dev, "brq");
        assert_eq!(t.lookup(ip("10.8.0.1")), None);
        assert!(t
            .show()
            .iter()
            .any(|r| r.to_string() == "fd09::/48 dev brp via fd00::fe (kernel)"));
        assert!(t.set_kernel(&[]));
        assert_eq!(t.lookup(ip("fd09::5")), None);
        assert_eq!(t.lookup(ip("10.0.0.5")).unwrap().origin, Origin::Connected);
    }
}
