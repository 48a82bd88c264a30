//! Fuzz target: ARP snooping never panics, and learns only unicast, non-zero senders.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tnl::neigh::NeighCache;

fuzz_target!(|data: &[u8]| {
    let mut n = NeighCache::default();
    if let Some(ip) = n.snoop_arp(data, "brp", 0) {
        let mac = n.lookup(ip).expect("a learned address is in the cache");
        assert!(mac[0] & 1 == 0 && mac != [0; 6]);
        assert!(!ip.is_unspecified() && !ip.is_broadcast() && !ip.is_multicast());
    }
});
