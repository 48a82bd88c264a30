//! Golden tests, one per match field: a rule on the field, a packet that matches, one that does
//! not, and the megaflow mask (exactly the rule's mask plus in_port, since one subtable is probed).
mod common;

use common::*;
use dpif::Action;
use ofproto::parse::parse_flow;
use ofproto::FlowModCommand;
use wire::{Field, FlowKey};

fn base() -> FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0063, 0x0a00_0001), (1234, 80))
}

fn udp() -> FlowKey {
    with(base(), Field::IpProto, 17)
}

fn arp() -> FlowKey {
    let mut k = eth(1, MAC_A, BCAST, 0x0806);
    k.set(Field::ArpOp, 1);
    k.set(Field::Ipv4Src, 0x0a00_0001);
    k.set(Field::Ipv4Dst, 0x0a00_0002);
    k.set(Field::ArpSha, FlowKey::mac_to_u64(MAC_A));
    k.set(Field::ArpTha, 0);
    k
}

fn ipv6() -> FlowKey {
    let mut k = eth(1, MAC_A, MAC_B, 0x86dd);
    k.set(Field::IpProto, 6);
    k.set(Field::Ipv6SrcHi, 0x2001_0db8_0000_0000);
    k.set(Field::Ipv6SrcLo, 1);
    k.set(Field::Ipv6DstHi, 0x2001_0db8_0001_0000);
    k.set(Field::Ipv6DstLo, 2);
    k.set(Field::TpDst, 443);
    k
}

fn tagged(vid: u64, pcp: u64) -> FlowKey {
    with(base(), Field::VlanTci, pcp << 13 | 0x1000 | vid)
}

/// (match text, field that must be in the mask, matching key, non-matching key)
fn cases() -> Vec<(&'static str, Field, FlowKey, FlowKey)> {
    let mac_c = FlowKey::mac_to_u64(MAC_C);
    vec![
        (
            "in_port=p1",
            Field::InPort,
            base(),
            with(base(), Field::InPort, dp(3).into()),
        ),
        (
            "in_port=1",
            Field::InPort,
            base(),
            with(base(), Field::InPort, dp(2).into()),
        ),
        (
            "dl_src=00:00:00:00:00:0a",
            Field::EthSrc,
            base(),
            with(base(), Field::EthSrc, mac_c),
        ),
        (
            "dl_dst=00:00:00:00:00:0b",
            Field::EthDst,
            base(),
            with(base(), Field::EthDst, mac_c),
        ),
        (
            "dl_dst=00:00:00:00:00:00/ff:ff:ff:ff:00:00",
            Field::EthDst,
            with(base(), Field::EthDst, 0xffff),
            with(base(), Field::EthDst, 0x0001_0000_0000),
        ),
        ("dl_type=0x0806", Field::EthType, arp(), base()),
        ("dl_vlan=10", Field::VlanTci, tagged(10, 3), tagged(11, 3)),
        ("dl_vlan=0xffff", Field::VlanTci, base(), tagged(10, 0)),
        (
            "vlan_tci=0x1000/0x1000",
            Field::VlanTci,
            tagged(7, 0),
            base(),
        ),
        (
            "dl_vlan_pcp=5",
            Field::VlanTci,
            tagged(10, 5),
            tagged(10, 0),
        ),
        (
            "dl_vlan=10,dl_vlan_pcp=5",
            Field::VlanTci,
            tagged(10, 5),
            tagged(10, 4),
        ),
        (
            "ip,nw_src=10.0.0.0/24",
            Field::Ipv4Src,
            base(),
            with(base(), Field::Ipv4Src, 0x0a00_0101),
        ),
        (
            "ip,nw_dst=10.0.0.1",
            Field::Ipv4Dst,
            base(),
            with(base(), Field::Ipv4Dst, 0x0a00_0002),
        ),
        (
            "ip,nw_dst=10.0.0.0/255.0.0.255",
            Field::Ipv4Dst,
            with(base(), Field::Ipv4Dst, 0x0a63_6300),
            base(),
        ),
        ("ip,nw_proto=17", Field::IpProto, udp(), base()),
        (
            "ip,ip_dscp=46",
            Field::IpTos,
            with(base(), Field::IpTos, 46 << 2 | 1),
            base(),
        ),
        (
            "ip,nw_tos=184",
            Field::IpTos,
            with(base(), Field::IpTos, 184),
            base(),
        ),
        (
            "ip,nw_ecn=3",
            Field::IpTos,
            with(base(), Field::IpTos, 3),
            base(),
        ),
        (
            "ip,nw_ttl=64",
            Field::IpTtl,
            base(),
            with(base(), Field::IpTtl, 63),
        ),
        (
            "tcp,tp_src=1234",
            Field::TpSrc,
            base(),
            with(base(), Field::TpSrc, 1235),
        ),
        (
            "tcp,tp_dst=80",
            Field::TpDst,
            base(),
            with(base(), Field::TpDst, 81),
        ),
        ("tcp,tcp_dst=80", Field::TpDst, base(), udp()),
        (
            "tcp,tp_dst=0x50/0xfff0",
            Field::TpDst,
            with(base(), Field::TpDst, 0x5f),
            with(base(), Field::TpDst, 0x60),
        ),
        ("udp,tp_dst=80", Field::TpDst, udp(), base()),
        (
            "tcp,tcp_flags=0x002",
            Field::TcpFlags,
            with(base(), Field::TcpFlags, 2),
            base(),
        ),
        (
            "icmp,icmp_type=8,icmp_code=0",
            Field::TpSrc,
            with(
                with(with(base(), Field::IpProto, 1), Field::TpSrc, 8),
                Field::TpDst,
                0,
            ),
            with(
                with(with(base(), Field::IpProto, 1), Field::TpSrc, 0),
                Field::TpDst,
                0,
            ),
        ),
        (
            "arp,arp_op=1",
            Field::ArpOp,
            arp(),
            with(arp(), Field::ArpOp, 2),
        ),
        (
            "arp,nw_proto=1",
            Field::ArpOp,
            arp(),
            with(arp(), Field::ArpOp, 2),
        ),
        (
            "arp,arp_spa=10.0.0.1",
            Field::Ipv4Src,
            arp(),
            with(arp(), Field::Ipv4Src, 9),
        ),
        (
            "arp,arp_tpa=10.0.0.0/30",
            Field::Ipv4Dst,
            arp(),
            with(arp(), Field::Ipv4Dst, 0x0a00_0004),
        ),
        (
            "arp,arp_sha=00:00:00:00:00:0a",
            Field::ArpSha,
            arp(),
            with(arp(), Field::ArpSha, mac_c),
        ),
        (
            "arp,arp_tha=00:00:00:00:00:00",
            Field::ArpTha,
            arp(),
            with(arp(), Field::ArpTha, mac_c),
        ),
        (
            "ipv6,ipv6_src=2001:db8::/32",
            Field::Ipv6SrcHi,
            ipv6(),
            with(ipv6(), Field::Ipv6SrcHi, 0x2002 << 48),
        ),
        (
            "ipv6,ipv6_dst=2001:db8:1::2",
            Field::Ipv6DstLo,
            ipv6(),
            with(ipv6(), Field::Ipv6DstLo, 3),
        ),
        ("tcp6,tp_dst=443", Field::TpDst, ipv6(), base()),
    ]
}

#[test]
fn every_match_field_golden() {
    let pl = pipeline();
    for (m, field, yes, no) in cases() {
        let flow = format!("priority=10,{m},actions=output:2");
        flows(&pl, &[&flow]);
        let hit = xlate(&pl, &yes);
        assert_eq!(
            hit.actions,
            vec![Action::Output(dp(2))],
            "{m}: should match"
        );
        let miss = xlate(&pl, &no);
        assert!(miss.actions.is_empty(), "{m}: should not match");
        assert_ne!(hit.mask.get(field), 0, "{m}: {field:?} must be in the mask");
        let resolve = |n: &str| {
            pl.ports("br0")
                .unwrap()
                .iter()
                .find(|p| p.name == n)
                .map(|p| p.ofport)
        };
        let parsed = parse_flow(&flow, FlowModCommand::Add, &resolve).unwrap();
        let mut expect = parsed.match_.mask;
        expect.set_exact(Field::InPort);
        assert_eq!(
            hit.mask, expect,
            "{m}: mask is exactly the rule's (one subtable probed)"
        );
        // A miss consults a subset of those bits (staged lookup may stop at L2 or L3), but
        // enough of them to rule the rule out for every key that agrees on them.
        assert_eq!(
            miss.mask.masked(&expect),
            miss.mask,
            "{m}: miss mask within the rule's"
        );
        let both = miss.mask.masked(&parsed.match_.mask);
        let mut rule_key = parsed.match_.key;
        rule_key.set(Field::InPort, no.get(Field::InPort));
        if parsed.match_.mask.get(Field::InPort) != 0 {
            rule_key.set(Field::InPort, yes.get(Field::InPort));
        }
        assert!(
            !rule_key.matches(&no, &both),
            "{m}: miss mask must exclude the rule"
        );
    }
}

#[test]
fn prerequisites_are_enforced_and_name_the_token() {
    let pl = pipeline();
    for (flow, tok) in [
        ("tp_dst=80,actions=drop", "tp_dst=80"),
        ("ip,tp_src=1,actions=drop", "tp_src=1"),
        ("nw_src=10.0.0.1,actions=drop", "nw_src=10.0.0.1"),
        ("arp_op=1,actions=drop", "arp_op=1"),
        ("ip,ipv6_dst=::1,actions=drop", "ipv6_dst=::1"),
        ("ip_dscp=1,actions=drop", "ip_dscp=1"),
    ] {
        match pl.add_flow("br0", flow) {
            Err(ofproto::Error::Parse(e)) => assert_eq!(e.token, tok, "{flow}"),
            other => panic!("{flow}: expected a parse error, got {other:?}"),
        }
    }
}
