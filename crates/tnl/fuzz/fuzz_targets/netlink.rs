//! Fuzz target: the rtnetlink route-dump parser never panics, and every route it keeps has a
//! prefix length within its family and a gateway of the same family.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tnl::netlink::parse_routes;

fuzz_target!(|data: &[u8]| {
    let seq = data
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    if let Ok((routes, _)) = parse_routes(data, seq) {
        for r in routes {
            let width = if r.prefix.is_ipv4() { 32 } else { 128 };
            assert!(u32::from(r.len) <= width);
            assert!(r.gw.is_none_or(|g| g.is_ipv4() == r.prefix.is_ipv4()));
        }
    }
});
