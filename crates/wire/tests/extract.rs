//! Golden tests per flow-key field and property tests: extraction never panics and stops at
//! the last complete layer.
use proptest::prelude::*;
use wire::{extract, Field, FlowKey};

const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&DST);
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn ipv4(proto: u8, flags_frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(0x0800);
    let total = (20 + l4.len()) as u16;
    f.extend_from_slice(&[0x45, 0xb9]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 7]);
    f.extend_from_slice(&flags_frag.to_be_bytes());
    f.extend_from_slice(&[63, proto, 0, 0, 10, 0, 0, 1, 192, 168, 1, 2]);
    f.extend_from_slice(l4);
    f
}

fn tcp(src: u16, dst: u16, flags: u8) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&src.to_be_bytes());
    t.extend_from_slice(&dst.to_be_bytes());
    t.extend_from_slice(&[0; 8]);
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

fn udp(src: u16, dst: u16) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&src.to_be_bytes());
    u.extend_from_slice(&dst.to_be_bytes());
    u.extend_from_slice(&[0, 8, 0, 0]);
    u
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x86dd);
    f.extend_from_slice(&[0x6b, 0x80, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 255]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(payload);
    f
}

#[test]
fn ethernet_fields() {
    let k = extract(&eth(0x1234), 7);
    assert_eq!(k.get(Field::InPort), 7);
    assert_eq!(k.get(Field::EthType), 0x1234);
    assert_eq!(k.get(Field::EthDst), FlowKey::mac_to_u64(DST));
    assert_eq!(k.get(Field::EthSrc), FlowKey::mac_to_u64(SRC));
    assert_eq!(k.get(Field::VlanTci), 0);
    // 802.3 length field: eth_type is the "none" marker.
    assert_eq!(extract(&eth(0x0100), 1).get(Field::EthType), 0x05ff);
}

#[test]
fn vlan_outer_tci_and_inner_ethertype() {
    let mut f = eth(0x8100);
    f.extend_from_slice(&[0xa0, 0x64, 0x88, 0xa8, 0x00, 0x05, 0x08, 0x00]);
    let inner = ipv4(17, 0, &udp(1, 2));
    f.extend_from_slice(&inner[14..]);
    let k = extract(&f, 1);
    assert_eq!(k.get(Field::VlanTci), 0xa064 | 0x1000);
    assert_eq!(k.get(Field::EthType), 0x0800);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (1, 2));
}

#[test]
fn ipv4_tcp_fields() {
    let k = extract(&ipv4(6, 0x4000, &tcp(1234, 80, 0x12)), 3);
    assert_eq!(k.get(Field::EthType), 0x0800);
    assert_eq!(k.get(Field::IpProto), 6);
    assert_eq!(k.get(Field::IpTos), 0xb9);
    assert_eq!(k.get(Field::IpTtl), 63);
    assert_eq!(k.get(Field::IpFrag), 0);
    assert_eq!(k.get(Field::Ipv4Src), 0x0a00_0001);
    assert_eq!(k.get(Field::Ipv4Dst), 0xc0a8_0102);
    assert_eq!(k.get(Field::TpSrc), 1234);
    assert_eq!(k.get(Field::TpDst), 80);
    assert_eq!(k.get(Field::TcpFlags), 0x12);
}

#[test]
fn ipv4_udp_and_icmp_fields() {
    let k = extract(&ipv4(17, 0, &udp(53, 5353)), 1);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (53, 5353));
    assert_eq!(k.get(Field::TcpFlags), 0);
    let k = extract(&ipv4(1, 0, &[8, 3, 0, 0, 0, 0, 0, 0]), 1);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (8, 3));
}

#[test]
fn ipv4_fragments() {
    let first = extract(&ipv4(17, 0x2000, &udp(1, 2)), 1);
    assert_eq!(first.get(Field::IpFrag), 1);
    assert_eq!(first.get(Field::TpDst), 2);
    let later = extract(&ipv4(17, 0x0010, &udp(1, 2)), 1);
    assert_eq!(later.get(Field::IpFrag), 3);
    assert_eq!(later.get(Field::TpDst), 0, "no L4 in a later fragment");
}

#[test]
fn ipv6_fields_with_extension_headers() {
    let mut pl = vec![17, 0, 0, 0, 0, 0, 0, 0]; // hop-by-hop -> UDP
    pl.extend_from_slice(&udp(546, 547));
    let k = extract(&ipv6(0, &pl), 9);
    assert_eq!(k.get(Field::EthType), 0x86dd);
    assert_eq!(k.get(Field::IpProto), 17);
    assert_eq!(k.get(Field::IpTos), 0xb8);
    assert_eq!(k.get(Field::IpTtl), 255);
    assert_eq!(k.get(Field::Ipv6SrcHi), 0x2001_0db8_0000_0000);
    assert_eq!(k.get(Field::Ipv6SrcLo), 1);
    assert_eq!(k.get(Field::Ipv6DstHi), 0xfe80_0000_0000_0000);
    assert_eq!(k.get(Field::Ipv6DstLo), 2);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (546, 547));
}

#[test]
fn icmpv6_type_code() {
    let k = extract(&ipv6(58, &[135, 0, 0, 0, 0, 0, 0, 0]), 1);
    assert_eq!(k.get(Field::IpProto), 58);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (135, 0));
}

#[test]
fn arp_fields() {
    let mut f = eth(0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.extend_from_slice(&DST);
    f.extend_from_slice(&[10, 0, 0, 2]);
    let k = extract(&f, 1);
    assert_eq!(k.get(Field::ArpOp), 2);
    assert_eq!(k.get(Field::IpProto), 2);
    assert_eq!(k.get(Field::Ipv4Src), 0x0a00_0001);
    assert_eq!(k.get(Field::Ipv4Dst), 0x0a00_0002);
    assert_eq!(k.get(Field::ArpSha), FlowKey::mac_to_u64(SRC));
    assert_eq!(k.get(Field::ArpTha), FlowKey::mac_to_u64(DST));
}

#[test]
fn truncation_stops_at_last_complete_layer() {
    let full = ipv4(6, 0, &tcp(1, 2, 0x02));
    // Cut inside TCP: L3 kept, no L4.
    let k = extract(&full[..14 + 20 + 10], 1);
    assert_eq!(k.get(Field::Ipv4Src), 0x0a00_0001);
    assert_eq!(k.get(Field::TpSrc), 0);
    // Cut inside IPv4: L2 kept, no L3.
    let k = extract(&full[..14 + 19], 1);
    assert_eq!(k.get(Field::EthType), 0x0800);
    assert_eq!(k.get(Field::Ipv4Src), 0);
    // Cut inside Ethernet: only in_port.
    let k = extract(&full[..13], 5);
    assert_eq!(k, {
        let mut z = FlowKey::ZERO;
        z.set(Field::InPort, 5);
        z
    });
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256), port in any::<u32>()) {
        let k = extract(&bytes, port);
        prop_assert_eq!(k.get(Field::InPort), u64::from(port));
        // In place over a key left dirty by an earlier packet (every word set, a tail too):
        // the same key, tail zeroed.
        let mut dirty = FlowKey { w: [u64::MAX; wire::KEY_WORDS] };
        wire::extract_into(&bytes, port, &mut dirty);
        prop_assert_eq!(dirty, k);
        prop_assert!(!dirty.has_tail());
    }

    #[test]
    fn never_panics_on_mutated_valid_frames(
        which in 0usize..4,
        cut in 0usize..120,
        flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6),
    ) {
        let mut f = match which {
            0 => ipv4(6, 0, &tcp(1, 2, 3)),
            1 => ipv4(17, 0, &udp(1, 2)),
            2 => ipv6(0, &[6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 2, 0, 0, 0, 0, 0, 0]),
            _ => { let mut v = eth(0x8100); v.extend_from_slice(&[0, 5, 0x08, 0x06]); v.extend_from_slice(&[0; 28]); v }
        };
        for (at, b) in flips {
            if let Some(x) = f.get_mut(at) { *x = b; }
        }
        f.truncate(cut);
        let k = extract(&f, 1);
        // A shorter frame never yields more L4 information than exists: ports need bytes.
        if f.len() < 14 + 20 + 4 {
            prop_assert_eq!(k.get(Field::TpSrc) | k.get(Field::TpDst), 0);
        }
    }

    #[test]
    fn rewrites_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128), v in any::<u32>()) {
        let mut f = bytes.clone();
        wire::rewrite::set_ipv4_src(&mut f, v);
        wire::rewrite::set_ipv4_dst(&mut f, v);
        wire::rewrite::set_tp_src(&mut f, v as u16);
        wire::rewrite::set_tp_dst(&mut f, v as u16);
        wire::rewrite::set_ip_dscp(&mut f, v as u8);
        prop_assert_eq!(f.len(), bytes.len());
    }
}
