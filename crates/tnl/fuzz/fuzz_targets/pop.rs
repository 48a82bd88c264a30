//! Fuzz target: native decapsulation's outer-header parser, IPv4 and IPv6 (then the tunnel
//! header parser on what it accepts) never panics, and what it accepts lies inside the frame.
//! Geneve options are parsed against a TLV map (three mappings, one of them critical, one 16
//! bytes long): a header accepted with the map only differs from one accepted without it by
//! known critical options, every option read lies inside the header, and the values read into
//! the key stay inside the option words.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tnl::pop::{parse_outer, Endpoint};
use wire::tunmd::{knows, read_geneve, TlvTable};
use wire::tunnel::{decap_any, decap_any_with, geneve_options, TunnelKind};
use wire::FlowKey;

fn table() -> TlvTable {
    let mut t = TlvTable::new();
    t.add(&[(0x0102, 0x80, 4, 0), (0xffff, 0x01, 8, 1), (0x0103, 0x05, 16, 7)])
        .unwrap();
    t
}

fn options(payload: &[u8], hlen: usize, t: &TlvTable) {
    let mut seen = 8;
    for (_, _, v) in geneve_options(payload) {
        seen += 4 + v.len();
        assert!(seen <= hlen, "an option runs past the header");
    }
    let mut k = FlowKey::ZERO;
    read_geneve(payload, t, &mut k);
    for (i, w) in k.w.iter().enumerate() {
        assert!(
            *w == 0 || wire::flow::TUN_MD_WORDS.contains(&i),
            "option value outside the option words"
        );
    }
}

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
    let t = table();
    let mac = data.get(..6).map_or([0; 6], |m| m.try_into().unwrap_or([0; 6]));
    if let Ok(o) = parse_outer(data, mac, &eps) {
        assert!(o.payload_at + o.payload_len <= data.len());
        assert_eq!(o.src.is_ipv6(), o.dst.is_ipv6());
        let payload = &data[o.payload_at..o.payload_at + o.payload_len];
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            let plain = decap_any(kind, payload);
            if let Ok((h, _)) = plain {
                assert!(h + 14 <= payload.len());
            }
            let mapped = decap_any_with(kind, payload, |c, ty, l| knows(&t, c, ty, l));
            if plain.is_ok() {
                assert_eq!(plain, mapped, "the map only ever accepts more");
            }
            if let (Ok((h, _)), TunnelKind::Geneve) = (mapped, kind) {
                assert!(h + 14 <= payload.len());
                options(payload, h, &t);
            }
        }
    }
    // The tunnel header parsers on the raw input too (not only behind a valid outer header).
    if let Ok((h, _)) = decap_any_with(TunnelKind::Geneve, data, |c, ty, l| knows(&t, c, ty, l)) {
        assert!(h + 14 <= data.len());
        options(data, h, &t);
    }
});
