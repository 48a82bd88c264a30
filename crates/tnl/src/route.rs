//! The IPv4 route table of native tunneling: longest-prefix match over operator routes
//! (`vireoctl route/add PREFIX DEV [GW]`, `route/del`) and connected routes, one per address of
//! a Vireo internal port (set by the daemon from the kernel's addresses of that port).
//!
//! At equal prefix length an operator route wins over a connected one. A route's source
//! address is its device's first connected address (none if the device has no address, in
//! which case a tunnel cannot use it natively). Not persisted: like OVS's `ovs/route/add`,
//! operator routes live until the daemon stops.
//!
//! Threads: plain data, owned by [`crate::Underlay`].
use std::fmt;
use std::net::Ipv4Addr;

/// Where a route came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `vireoctl route/add`.
    User,
    /// An address of an internal port.
    Connected,
    /// The host's routing table (main table, read over rtnetlink), for routes whose output
    /// interface is a Vireo internal port.
    Kernel,
}

impl Origin {
    /// Precedence between routes of the same prefix length: an operator's `route/add` over the
    /// host's table over a connected route.
    fn rank(self) -> u8 {
        match self {
            Origin::User => 2,
            Origin::Kernel => 1,
            Origin::Connected => 0,
        }
    }

    /// The name `route/show` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Kernel => "kernel",
            Origin::Connected => "connected",
        }
    }
}

/// A host route as [`RouteTable::set_kernel`] takes it: prefix, length, device, gateway.
pub type HostRoute = (Ipv4Addr, u8, String, Option<Ipv4Addr>);

/// One route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Network address (host bits zero).
    pub prefix: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub len: u8,
    /// The Vireo port (an internal port) the route leaves through.
    pub dev: String,
    /// Gateway, if not directly connected.
    pub gw: Option<Ipv4Addr>,
    /// Source address: the device's connected address (filled by lookup for user routes).
    pub src: Option<Ipv4Addr>,
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

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

/// Parses `A.B.C.D/N` (or a bare address, /32); host bits must be zero.
pub fn parse_prefix(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, l),
        None => (s, "32"),
    };
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
    let len: u8 = match l.parse() {
        Ok(n) if n <= 32 => n,
        _ => return Err(format!("{l:?} is not a prefix length from 0 to 32")),
    };
    if u32::from(addr) & !mask(len) != 0 {
        return Err(format!(
            "{s}: host bits set (the network is {}/{len})",
            Ipv4Addr::from(u32::from(addr) & mask(len))
        ));
    }
    Ok((addr, len))
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
                let a: Ipv4Addr = g
                    .parse()
                    .map_err(|_| format!("gateway {g:?} is not an IPv4 address"))?;
                if a.is_unspecified() || a.is_broadcast() || a.is_multicast() {
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
    pub fn set_connected(&mut self, dev: &str, addrs: &[(Ipv4Addr, u8)]) -> bool {
        let want: Vec<Route> = addrs
            .iter()
            .filter(|(_, l)| *l <= 32)
            .map(|&(a, l)| Route {
                prefix: Ipv4Addr::from(u32::from(a) & mask(l)),
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

    /// Makes `routes` (prefix, length, device, gateway) the routes taken from the host's table,
    /// replacing the previous set; entries with host bits set or a prefix over 32 are ignored.
    /// Returns whether anything changed.
    pub fn set_kernel(&mut self, routes: &[HostRoute]) -> bool {
        let mut want: Vec<Route> = routes
            .iter()
            .filter(|(p, l, _, _)| *l <= 32 && u32::from(*p) & !mask(*l) == 0)
            .map(|(p, l, dev, gw)| Route {
                prefix: *p,
                len: *l,
                dev: dev.clone(),
                gw: *gw,
                src: None,
                origin: Origin::Kernel,
            })
            .collect();
        // One route per prefix (the kernel's main table can hold several of one prefix with
        // different metrics: the caller passes them best first).
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
    pub fn local_addrs(&self) -> impl Iterator<Item = (&str, Ipv4Addr)> {
        self.routes
            .iter()
            .filter(|r| r.origin == Origin::Connected)
            .filter_map(|r| r.src.map(|s| (r.dev.as_str(), s)))
    }

    /// The longest-prefix route for `dst` (at the same length an operator route before a
    /// kernel one before a connected one), with its source filled in.
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<Route> {
        let d = u32::from(dst);
        let best = self
            .routes
            .iter()
            .filter(|r| d & mask(r.len) == u32::from(r.prefix))
            .max_by_key(|r| (r.len, r.origin.rank()))?;
        let mut r = best.clone();
        if r.src.is_none() {
            r.src = self
                .routes
                .iter()
                .find(|c| c.origin == Origin::Connected && c.dev == r.dev)
                .and_then(|c| c.src);
        }
        Some(r)
    }

    /// Every route, longest prefix first (as `route/show` lists them).
    pub fn show(&self) -> Vec<Route> {
        let mut v = self.routes.clone();
        v.sort_by(|a, b| b.len.cmp(&a.len).then(a.prefix.cmp(&b.prefix)));
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

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn kernel_routes_are_replaced_as_a_set_and_rank_between_user_and_connected() {
        let mut t = RouteTable::default();
        t.set_connected("brp", &[(ip("10.0.0.1"), 24)]);
        let k = |p: &str, l, gw: Option<&str>| (ip(p), l, "brp".to_string(), gw.map(ip));
        let set = [
            k("10.2.0.0", 16, Some("10.0.0.254")),
            k("10.2.0.0", 16, Some("10.0.0.253")),
            k("10.0.0.0", 24, Some("10.0.0.9")),
            k("10.3.0.1", 16, None),
        ];
        let g = t.generation();
        assert!(t.set_kernel(&set));
        assert_eq!(t.generation(), g + 1);
        assert!(!t.set_kernel(&set), "the same set changes nothing");
        assert_eq!(t.generation(), g + 1);
        // The first of a prefix wins; host bits set is ignored; a kernel route beats a
        // connected one of the same length, and its source is the device's address.
        let r = t.lookup(ip("10.2.3.4")).unwrap();
        assert_eq!(
            (r.gw, r.src, r.origin),
            (Some(ip("10.0.0.254")), Some(ip("10.0.0.1")), Origin::Kernel)
        );
        assert_eq!(t.lookup(ip("10.0.0.7")).unwrap().origin, Origin::Kernel);
        assert!(t.lookup(ip("10.3.9.9")).is_none());
        t.add("10.2.0.0/16", "brq", None).unwrap();
        assert_eq!(
            t.lookup(ip("10.2.3.4")).unwrap().dev,
            "brq",
            "user beats kernel"
        );
        assert!(t.set_kernel(&[]));
        assert_eq!(t.lookup(ip("10.0.0.7")).unwrap().origin, Origin::Connected);
        assert_eq!(t.show().len(), 2);
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
            ("fe80::/64", None),
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
}
