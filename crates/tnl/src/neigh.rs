//! The ARP/ND neighbour cache of native tunneling: IPv4 and IPv6 → MAC of the underlay's
//! next hops.
//!
//! Entries are learned by snooping ARP ([`NeighCache::snoop_arp`]) and IPv6 Neighbor
//! Solicitations and Advertisements ([`NeighCache::snoop_nd`], parsed by [`crate::nd`]) on
//! frames the underlay bridge delivers to its LOCAL (internal) port, and from the outer
//! headers of decapsulated tunnel traffic ([`NeighCache::learn_from_decap`]). Each entry
//! remembers how it was learned ([`How`]: by the way that created it or last changed its
//! MAC). An entry not refreshed for [`IDLE`] is aged out ([`NeighCache::age`], as OVS's 15
//! minutes). A lookup that misses is counted and says whether a request should be sent now
//! ([`NeighCache::miss`]: at most one per address per [`REQUEST_GAP`]); [`arp_request`]
//! builds an ARP request, [`crate::nd::solicit`] a Neighbor Solicitation.
//!
//! What is refused (counted in `snoop_ignored`, never learned): a MAC that is multicast,
//! broadcast or zero, an address that is unspecified (ARP probes, DAD), multicast,
//! broadcast or loopback, an ARP whose Ethernet source differs from its sender hardware
//! address, and every ND message [`crate::nd::parse`] refuses.
//!
//! Threads: plain data, owned by [`crate::Underlay`]; callers pass the time (milliseconds of a
//! monotonic clock) so aging is testable.
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use wire::arp::ArpPacket;
use wire::ethernet::ethertype;

/// Idle time after which an entry is aged out (ms).
pub const IDLE: u64 = 15 * 60 * 1000;
/// Least time between two ARP requests for one address (ms).
pub const REQUEST_GAP: u64 = 1000;

/// How an entry was learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// An ARP request or reply.
    Arp,
    /// An IPv6 Neighbor Solicitation or Advertisement.
    Nd,
    /// The outer header of decapsulated tunnel traffic.
    Decap,
}

impl How {
    /// As `tnl/neigh/show` writes it.
    pub fn name(self) -> &'static str {
        match self {
            How::Arp => "arp",
            How::Nd => "nd",
            How::Decap => "decap",
        }
    }
}

/// One neighbour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: [u8; 6],
    /// The Vireo port (internal port) it was learned on.
    pub dev: String,
    /// When it was last confirmed (ms).
    pub seen_ms: u64,
    /// How it was learned (or its MAC last changed).
    pub how: How,
}

/// Counters (shown by `tnl/neigh/show`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// New entries and changed MACs.
    pub learned: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// ARP requests asked for by misses (IPv4 next hops).
    pub requests: u64,
    /// Neighbor Solicitations asked for by misses (IPv6 next hops).
    pub ns_requests: u64,
    /// Packets dropped because their next hop had no entry.
    pub miss_drops: u64,
    /// ARP or ND frames or sources refused for learning.
    pub snoop_ignored: u64,
    /// Entries aged out.
    pub aged: u64,
    /// Outer sources of decapsulated traffic learned or refreshed.
    pub decap_seen: u64,
}

/// The cache.
#[derive(Debug, Default)]
pub struct NeighCache {
    entries: HashMap<IpAddr, Entry>,
    asked: HashMap<IpAddr, u64>,
    counters: Counters,
    generation: u64,
}

fn usable_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 == 0 && *m != [0; 6]
}

fn usable_ip(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_broadcast() || a.is_multicast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_loopback()),
    }
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn mac_str(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

impl NeighCache {
    /// Learns (or refreshes) `ip` at `mac` on port `dev`, taught by `how`. Returns true when
    /// the cache changed (a new entry or another MAC); a refresh only moves the entry's time.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], dev: &str, now_ms: u64, how: How) -> bool {
        if !usable_mac(&mac) || !usable_ip(ip) {
            self.counters.snoop_ignored += 1;
            return false;
        }
        self.asked.remove(&ip);
        if let Some(e) = self.entries.get_mut(&ip) {
            e.seen_ms = now_ms;
            if e.mac == mac && e.dev == dev {
                return false;
            }
            e.mac = mac;
            e.dev = dev.to_string();
            e.how = how;
        } else {
            self.entries.insert(
                ip,
                Entry {
                    ip,
                    mac,
                    dev: dev.to_string(),
                    seen_ms: now_ms,
                    how,
                },
            );
        }
        self.counters.learned += 1;
        self.generation += 1;
        true
    }

    /// Learns (or refreshes) `ip` at `mac` from the outer headers of decapsulated traffic
    /// (counted in `decap_seen`). Returns true when the cache changed.
    pub fn learn_from_decap(&mut self, ip: IpAddr, mac: [u8; 6], dev: &str, now_ms: u64) -> bool {
        self.counters.decap_seen += 1;
        self.learn(ip, mac, dev, now_ms, How::Decap)
    }

    /// Learns from an ARP frame (Ethernet, untagged) seen on port `dev`: the sender's address
    /// pair of a request or reply. Returns the address learned or refreshed; a frame that is
    /// not ARP returns `None` without counting.
    pub fn snoop_arp(&mut self, frame: &[u8], dev: &str, now_ms: u64) -> Option<Ipv4Addr> {
        if frame.len() < 14 || u16::from_be_bytes([frame[12], frame[13]]) != ethertype::ARP {
            return None;
        }
        let Ok(arp) = ArpPacket::new_checked(&frame[14..]) else {
            self.counters.snoop_ignored += 1;
            return None;
        };
        if !matches!(arp.oper(), 1 | 2) || frame[6..12] != arp.sha() {
            self.counters.snoop_ignored += 1;
            return None;
        }
        let ip = Ipv4Addr::from(arp.spa());
        let before = self.counters.snoop_ignored;
        self.learn(IpAddr::V4(ip), arp.sha(), dev, now_ms, How::Arp);
        (self.counters.snoop_ignored == before).then_some(ip)
    }

    /// Learns from an IPv6 Neighbor Solicitation (its source and source link-layer option)
    /// or Advertisement (its target and target link-layer option) seen on port `dev`.
    /// Returns the address learned or refreshed; a frame that is not ND returns `None`
    /// without counting, a refused one (see [`crate::nd::parse`]) is counted in
    /// `snoop_ignored`.
    pub fn snoop_nd(&mut self, frame: &[u8], dev: &str, now_ms: u64) -> Option<IpAddr> {
        use crate::nd::Snooped;
        match crate::nd::parse(frame) {
            Snooped::NotNd | Snooped::Nothing => None,
            Snooped::Bad => {
                self.counters.snoop_ignored += 1;
                None
            }
            Snooped::Learn(ip, mac) => {
                let ip = IpAddr::V6(ip);
                let before = self.counters.snoop_ignored;
                self.learn(ip, mac, dev, now_ms, How::Nd);
                (self.counters.snoop_ignored == before).then_some(ip)
            }
        }
    }

    /// The MAC of `ip`, if known.
    pub fn lookup(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.entries.get(&ip).map(|e| e.mac)
    }

    /// The entry of `ip`, if known.
    pub fn entry(&self, ip: IpAddr) -> Option<&Entry> {
        self.entries.get(&ip)
    }

    /// Counts a lookup of `ip` that missed; true if a request (ARP for IPv4, a Neighbor
    /// Solicitation for IPv6) should go out now (none was asked for `ip` in the last
    /// [`REQUEST_GAP`]).
    pub fn miss(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        self.counters.misses += 1;
        match self.asked.get(&ip) {
            Some(&t) if now_ms.saturating_sub(t) < REQUEST_GAP => false,
            _ => {
                self.asked.insert(ip, now_ms);
                if ip.is_ipv4() {
                    self.counters.requests += 1;
                } else {
                    self.counters.ns_requests += 1;
                }
                true
            }
        }
    }

    /// Counts `n` packets dropped for want of a neighbour.
    pub fn count_miss_drops(&mut self, n: u64) {
        self.counters.miss_drops += n;
    }

    /// Removes entries idle for [`IDLE`] or more; returns how many.
    pub fn age(&mut self, now_ms: u64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, e| now_ms.saturating_sub(e.seen_ms) < IDLE);
        self.asked
            .retain(|_, t| now_ms.saturating_sub(*t) < REQUEST_GAP * 60);
        let n = before - self.entries.len();
        if n > 0 {
            self.counters.aged += n as u64;
            self.generation += 1;
        }
        n
    }

    /// Removes every entry; returns how many there were.
    pub fn flush(&mut self) -> usize {
        let n = self.entries.len();
        self.entries.clear();
        self.asked.clear();
        self.generation += 1;
        n
    }

    /// The entries, by address (IPv4 first).
    pub fn show(&self) -> Vec<Entry> {
        let mut v: Vec<Entry> = self.entries.values().cloned().collect();
        v.sort_by_key(|e| e.ip);
        v
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The change counter.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// An ARP request (broadcast, padded to 60 bytes) from `src_mac`/`src_ip` for `target`.
pub fn arp_request(src_mac: [u8; 6], src_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ethertype::ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&src_ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f.resize(60, 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn reply(eth_src: [u8; 6], sha: [u8; 6], spa: IpAddr) -> Vec<u8> {
        let IpAddr::V4(spa) = spa else { panic!() };
        let mut f = arp_request(sha, spa, "10.0.0.1".parse().unwrap());
        f[6..12].copy_from_slice(&eth_src);
        f[21] = 2;
        f
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn arp_requests_and_replies_teach_the_sender() {
        let mut n = NeighCache::default();
        let req = arp_request(A, v4("10.0.0.2"), v4("10.0.0.1"));
        assert_eq!(n.snoop_arp(&req, "brp", 5), Some(v4("10.0.0.2")));
        assert_eq!(n.lookup(ip("10.0.0.2")), Some(A));
        assert_eq!(
            n.snoop_arp(&reply(B, B, ip("10.0.0.3")), "brp", 6),
            Some(v4("10.0.0.3"))
        );
        assert_eq!(n.lookup(ip("10.0.0.3")), Some(B));
        assert_eq!(n.counters().learned, 2);
        // Not ARP: ignored without counting.
        let mut ipv4 = req.clone();
        ipv4[12..14].copy_from_slice(&[8, 0]);
        assert_eq!(n.snoop_arp(&ipv4, "brp", 7), None);
        assert_eq!(n.counters().snoop_ignored, 0);
    }

    #[test]
    fn spoofy_or_unusable_arp_is_ignored_and_counted() {
        let mut n = NeighCache::default();
        // Ethernet source differs from the sender hardware address.
        assert_eq!(n.snoop_arp(&reply(A, B, ip("10.0.0.3")), "brp", 1), None);
        // Probe (sender 0.0.0.0), multicast sender MAC, truncated, bad opcode.
        assert_eq!(n.snoop_arp(&reply(B, B, ip("0.0.0.0")), "brp", 1), None);
        let mc = [1, 0, 0x5e, 0, 0, 1];
        assert_eq!(n.snoop_arp(&reply(mc, mc, ip("10.0.0.4")), "brp", 1), None);
        assert_eq!(
            n.snoop_arp(&reply(B, B, ip("10.0.0.5"))[..30], "brp", 1),
            None
        );
        let mut op = reply(B, B, ip("10.0.0.6"));
        op[21] = 9;
        assert_eq!(n.snoop_arp(&op, "brp", 1), None);
        assert_eq!(n.counters().snoop_ignored, 5);
        assert!(n.show().is_empty());
        assert_eq!(n.generation(), 0);
    }

    #[test]
    fn refresh_keeps_the_generation_a_new_mac_moves_it() {
        let mut n = NeighCache::default();
        assert!(n.learn(ip("10.0.0.2"), A, "brp", 0, How::Arp));
        let g = n.generation();
        assert!(!n.learn(ip("10.0.0.2"), A, "brp", 100, How::Arp));
        assert_eq!(n.generation(), g);
        assert!(n.learn(ip("10.0.0.2"), B, "brp", 200, How::Arp));
        assert!(n.generation() > g);
        assert_eq!(n.lookup(ip("10.0.0.2")), Some(B));
    }

    #[test]
    fn entries_age_out_after_idle_unless_refreshed() {
        let mut n = NeighCache::default();
        n.learn(ip("10.0.0.2"), A, "brp", 0, How::Arp);
        n.learn(ip("10.0.0.3"), B, "brp", 0, How::Arp);
        n.learn(ip("10.0.0.3"), B, "brp", IDLE - 10, How::Arp);
        assert_eq!(n.age(IDLE - 1), 0);
        assert_eq!(n.age(IDLE), 1);
        assert_eq!(n.lookup(ip("10.0.0.2")), None);
        assert_eq!(n.lookup(ip("10.0.0.3")), Some(B));
        assert_eq!(n.counters().aged, 1);
        assert_eq!(n.flush(), 1);
        assert!(n.show().is_empty());
    }

    #[test]
    fn misses_ask_for_one_request_per_gap() {
        let mut n = NeighCache::default();
        assert!(n.miss(ip("10.0.0.9"), 0));
        assert!(!n.miss(ip("10.0.0.9"), REQUEST_GAP - 1));
        assert!(n.miss(ip("10.0.0.8"), 10));
        assert!(n.miss(ip("10.0.0.9"), REQUEST_GAP));
        n.count_miss_drops(4);
        assert!(n.learn_from_decap(ip("10.0.0.7"), B, "brp", 5));
        assert_eq!(n.counters().decap_seen, 1);
        let c = n.counters();
        assert_eq!((c.misses, c.requests, c.miss_drops), (4, 3, 4));
        // Learning the address resets the gap.
        n.learn(ip("10.0.0.8"), A, "brp", 20, How::Arp);
        assert!(n.miss(ip("10.0.0.8"), 21));
    }

    #[test]
    fn the_request_is_a_well_formed_broadcast_arp() {
        let f = arp_request(A, v4("10.0.0.1"), v4("10.0.0.2"));
        assert_eq!(f.len(), 60);
        assert_eq!(&f[..6], &[0xff; 6]);
        let a = ArpPacket::new_checked(&f[14..]).unwrap();
        assert_eq!((a.oper(), a.sha()), (1, A));
        assert_eq!((a.spa(), a.tpa()), (0x0a00_0001, 0x0a00_0002));
        assert_eq!(mac_str(&A), "02:00:00:00:00:0a");
    }

    #[test]
    fn nd_teaches_ipv6_neighbours_and_bad_nd_is_counted() {
        use crate::nd::{advert, solicit};
        let mut n = NeighCache::default();
        let (a6, b6) = ("fd00::a".parse().unwrap(), "fd00::b".parse().unwrap());
        let na = advert(B, b6, A, a6);
        assert_eq!(n.snoop_nd(&na, "brp", 1), Some(ip("fd00::b")));
        assert_eq!(n.lookup(ip("fd00::b")), Some(B));
        assert_eq!(n.entry(ip("fd00::b")).unwrap().how, How::Nd);
        let ns = solicit(A, a6, b6);
        assert_eq!(n.snoop_nd(&ns, "brp", 2), Some(ip("fd00::a")));
        // A refresh from decapsulated traffic keeps how the entry was learned.
        assert!(!n.learn_from_decap(ip("fd00::b"), B, "brp", 3));
        assert_eq!(n.entry(ip("fd00::b")).unwrap().how, How::Nd);
        let mut bad = na.clone();
        bad[60] ^= 1;
        assert_eq!(n.snoop_nd(&bad, "brp", 4), None);
        assert_eq!(n.counters().snoop_ignored, 1);
        // ARP is not ND: not counted.
        assert_eq!(
            n.snoop_nd(&arp_request(A, v4("10.0.0.1"), v4("10.0.0.2")), "brp", 5),
            None
        );
        assert_eq!(n.counters().snoop_ignored, 1);
        assert_eq!(n.counters().learned, 2);
        // IPv6 misses ask for Neighbor Solicitations, counted apart from ARP requests.
        assert!(n.miss(ip("fd00::c"), 10));
        assert!(!n.miss(ip("fd00::c"), 11));
        assert!(n.miss(ip("10.0.0.9"), 12));
        let c = n.counters();
        assert_eq!((c.misses, c.ns_requests, c.requests), (3, 1, 1));
        let shown: Vec<IpAddr> = n.show().iter().map(|e| e.ip).collect();
        assert_eq!(shown, vec![ip("fd00::a"), ip("fd00::b")]);
    }
}
