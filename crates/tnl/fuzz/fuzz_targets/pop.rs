//! Fuzz target: native decapsulation's outer-header parser (then the tunnel header parser on
//! what it accepts) never panics, and what it accepts lies inside the frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use tnl::pop::{parse_outer, Endpoint};
use wire::tunnel::{decap_any, TunnelKind};

fuzz_target!(|data: &[u8]| {
    // The endpoint is the frame's own destination address when it has one, so the fuzzer
    // reaches the checks past the address match.
    let ip = data
        .get(30..34)
        .map_or(Ipv4Addr::new(10, 0, 0, 2), |b| Ipv4Addr::new(b[0], b[1], b[2], b[3]));
    let eps = [
        Endpoint { ip, port: 4789 },
        Endpoint { ip, port: 6081 },
    ];
    let mac = data.get(..6).map_or([0; 6], |m| m.try_into().unwrap_or([0; 6]));
    if let Ok(o) = parse_outer(data, mac, &eps) {
        assert!(o.payload_at + o.payload_len <= data.len());
        let payload = &data[o.payload_at..o.payload_at + o.payload_len];
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            if let Ok((h, _)) = decap_any(kind, payload) {
                assert!(h + 14 <= payload.len());
            }
        }
    }
});
