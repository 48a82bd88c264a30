//! Fuzz target: native decapsulation's outer-header parser, IPv4 and IPv6 (then the tunnel
//! header parser on what it accepts) never panics, and what it accepts lies inside the frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tnl::pop::{parse_outer, Endpoint};
use wire::tunnel::{decap_any, TunnelKind};

fuzz_target!(|data: &[u8]| {
    // The endpoints are the frame's own destination address (IPv4 and IPv6 places) when it
    // has one, so the fuzzer reaches the checks past the address match.
    let ip4 = data.get(30..34).map_or(Ipv4Addr::new(10, 0, 0, 2), |b| {
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    });
    let ip6 = data.get(38..54).map_or(Ipv6Addr::LOCALHOST, |b| {
        Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or([0; 16]))
    });
    let eps = [
        Endpoint {
            ip: IpAddr::V4(ip4),
            port: 4789,
        },
        Endpoint {
            ip: IpAddr::V4(ip4),
            port: 6081,
        },
        Endpoint {
            ip: IpAddr::V6(ip6),
            port: 4789,
        },
        Endpoint {
            ip: IpAddr::V6(ip6),
            port: 6081,
        },
    ];
    let mac = data
        .get(..6)
        .map_or([0; 6], |m| m.try_into().unwrap_or([0; 6]));
    if let Ok(o) = parse_outer(data, mac, &eps) {
        assert!(o.payload_at + o.payload_len <= data.len());
        assert_eq!(o.src.is_ipv6(), o.dst.is_ipv6());
        let payload = &data[o.payload_at..o.payload_at + o.payload_len];
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            if let Ok((h, _)) = decap_any(kind, payload) {
                assert!(h + 14 <= payload.len());
            }
        }
    }
});
