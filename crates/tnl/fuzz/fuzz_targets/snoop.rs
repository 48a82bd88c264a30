//! Fuzz target: ARP and ND snooping never panic, and learn only unicast, non-zero senders.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;
use tnl::neigh::NeighCache;

fuzz_target!(|data: &[u8]| {
    let mut n = NeighCache::default();
    if let Some(ip) = n.snoop_arp(data, "brp", 0) {
        let mac = n
            .lookup(IpAddr::V4(ip))
            .expect("a learned address is in the cache");
        assert!(mac[0] & 1 == 0 && mac != [0; 6]);
        assert!(!ip.is_unspecified() && !ip.is_broadcast() && !ip.is_multicast());
    }
    if let Some(ip) = n.snoop_nd(data, "brp", 0) {
        let IpAddr::V6(v6) = ip else {
            panic!("ND taught an IPv4 address")
        };
        let mac = n.lookup(ip).expect("a learned address is in the cache");
        assert!(mac[0] & 1 == 0 && mac != [0; 6]);
        assert!(!v6.is_unspecified() && !v6.is_multicast() && !v6.is_loopback());
        // The link-layer address learned is the frame's Ethernet source.
        assert_eq!(&data[6..12], &mac);
    }
});
