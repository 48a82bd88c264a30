//! Native tunneling's underlay state and packet helpers (issue 12, stage 1), pure code.
//!
//! Owns: the IPv4/IPv6 route table ([`route::RouteTable`]: longest prefix, operator routes
//! from `vireoctl route/add` and connected routes for the addresses of Vireo's internal
//! ports), the ARP/ND neighbour cache ([`neigh::NeighCache`]: IPv4/IPv6 → MAC, learned by
//! snooping ARP and IPv6 Neighbor Discovery ([`nd`]) on the underlay bridge's LOCAL port and
//! from the outer headers of decapsulated traffic, aged out after [`neigh::IDLE`]), the
//! tunnel header template ([`header::Template`]: Ethernet + IPv4 or IPv6 + UDP +
//! VXLAN/Geneve, built once per megaflow, with the per-packet fill of lengths, checksums and
//! UDP source port) and the checked outer-header parser ([`pop::parse_outer`]: every way a
//! received underlay frame is refused, as a [`pop::PopError`]).
//!
//! [`Underlay`] holds the route table and the neighbour cache behind one generation number
//! that moves on every change either makes, so a translation that consulted them can be
//! invalidated (revalidation) when the number it saw is stale.
//!
//! Threads: [`Underlay`] is plain data; the daemon keeps it behind a mutex taken by the
//! control thread (`route/*`, `tnl/neigh/*`), the housekeeping thread (connected routes,
//! aging) and the ports that snoop ARP. [`header`] and [`pop`] are pure functions run on PMDs.
pub mod header;
pub mod nd;
pub mod neigh;
pub mod netlink;
pub mod pop;
pub mod route;

use std::net::IpAddr;

/// The route table and neighbour cache, with one change counter for both.
#[derive(Debug, Default)]
pub struct Underlay {
    /// IPv4 and IPv6 routes.
    pub routes: route::RouteTable,
    /// IPv4 and IPv6 neighbours.
    pub neigh: neigh::NeighCache,
    /// The MAC of each internal port (the outer source MAC of what leaves through it).
    pub port_macs: std::collections::BTreeMap<String, [u8; 6]>,
    /// The IP MTU of each internal port (what an encapsulated frame must fit).
    pub port_mtus: std::collections::BTreeMap<String, u32>,
    /// The [`Underlay::generation`] the translations were last told about (the daemon
    /// revalidates when the generation has moved past it).
    pub published: u64,
}

/// Where a tunnel's remote is reached: the route's device, the next hop (the gateway, or the
/// remote itself on a connected route) and the source address to send from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextHop {
    /// Device (Vireo port name) of the route.
    pub dev: String,
    /// The address whose MAC the outer Ethernet header goes to.
    pub via: IpAddr,
    /// The route's preferred source (the internal port's address on a connected route).
    pub src: Option<IpAddr>,
}

impl Underlay {
    /// An empty underlay.
    pub fn new() -> Underlay {
        Underlay::default()
    }

    /// The change counter: moves whenever a route or a neighbour entry changes (a cached
    /// translation that saw an older value must be redone).
    pub fn generation(&self) -> u64 {
        self.routes.generation() + self.neigh.generation()
    }

    /// The next hop for `dst`, if a route covers it.
    pub fn next_hop(&self, dst: IpAddr) -> Option<NextHop> {
        let r = self.routes.lookup(dst)?;
        Some(NextHop {
            dev: r.dev.clone(),
            via: r.gw.unwrap_or(dst),
            src: r.src,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(a: Ipv4Addr) -> IpAddr {
        IpAddr::V4(a)
    }

    #[test]
    fn next_hop_is_the_gateway_or_the_destination_and_changes_move_the_generation() {
        let mut u = Underlay::new();
        assert_eq!(u.next_hop(ip(Ipv4Addr::new(10, 1, 0, 2))), None);
        let g0 = u.generation();
        u.routes
            .set_connected("brp", &[(ip(Ipv4Addr::new(10, 1, 0, 1)), 24)]);
        assert!(u.generation() > g0);
        let nh = u.next_hop(ip(Ipv4Addr::new(10, 1, 0, 2))).unwrap();
        assert_eq!(nh.via, ip(Ipv4Addr::new(10, 1, 0, 2)));
        assert_eq!(nh.src, Some(ip(Ipv4Addr::new(10, 1, 0, 1))));
        u.routes
            .add("10.9.0.0/16", "brp", Some("10.1.0.254"))
            .unwrap();
        let nh = u.next_hop(ip(Ipv4Addr::new(10, 9, 3, 4))).unwrap();
        assert_eq!(
            (nh.dev.as_str(), nh.via),
            ("brp", ip(Ipv4Addr::new(10, 1, 0, 254)))
        );
        let g1 = u.generation();
        u.neigh.learn(
            ip(Ipv4Addr::new(10, 1, 0, 254)),
            [2, 0, 0, 0, 0, 9],
            "brp",
            0,
            neigh::How::Arp,
        );
        assert!(u.generation() > g1);
    }
}
