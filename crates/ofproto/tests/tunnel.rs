//! Tunnel fields in the pipeline: rules match `tun_id` / `tun_src` / `tun_dst` (the datapath
//! puts a decapsulated packet's metadata in the key) and the megaflow mask names them;
//! `set_field` and `load` on them become one `SetTunnel` datapath action before the output
//! (what a flow-based `vxlan`/`geneve` port encapsulates with); dump-flows prints them back.
mod common;

use common::*;
use dpif::Action;
use wire::Field;

const VX: u32 = 3;

fn decapped(vni: u64, src: u32) -> wire::FlowKey {
    let k = tcp(VX, MAC_A, MAC_B, (0x0a00_0001, 0x0a00_0002), (1234, 80));
    let k = with(k, Field::TunId, vni);
    with(k, Field::TunSrc, src.into())
}

#[test]
fn tun_id_matches_split_two_vnis_and_enter_the_mask() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "tun_id=5,in_port=3,actions=output:1",
            "tun_id=6,in_port=3,actions=output:2",
            "tun_src=10.231.0.9,in_port=3,actions=output:4",
        ],
    );
    let t5 = xlate(&pl, &decapped(5, 0x0ae7_0002));
    let t6 = xlate(&pl, &decapped(6, 0x0ae7_0002));
    assert_eq!(t5.actions, vec![Action::Output(dp(1))]);
    assert_eq!(t6.actions, vec![Action::Output(dp(2))]);
    // The megaflow must tell the two VNIs apart: tun_id is in the mask.
    assert_eq!(t5.mask.get(Field::TunId), u64::MAX, "{:?}", t5.mask);
    assert!(!decapped(5, 0).matches(&decapped(6, 0), &t5.mask));
    // Neither VNI matched, the source does.
    let t7 = xlate(&pl, &decapped(7, 0x0ae7_0009));
    assert_eq!(t7.actions, vec![Action::Output(dp(4))]);
    assert_eq!(t7.mask.get(Field::TunSrc), 0xffff_ffff);
    // A packet from a VM (no tunnel metadata) matches none of them.
    let vm = tcp(VX, MAC_A, MAC_B, (0x0a00_0001, 0x0a00_0002), (1234, 80));
    assert!(xlate(&pl, &vm).actions.is_empty());
    let dump = pl.dump_flows_text("br0", None).unwrap().join("\n");
    assert!(
        dump.contains("tun_id=0x5,in_port=p3 actions=output:1"),
        "{dump}"
    );
    assert!(dump.contains("tun_src=10.231.0.9,in_port=p3"), "{dump}");
}

#[test]
fn set_field_and_load_commit_one_set_tunnel_before_the_output() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "in_port=1,actions=set_field:5->tun_id,set_field:10.231.0.2->tun_dst,output:3",
            "in_port=2,actions=load:0x6->NXM_NX_TUN_ID[0..23],\
             load:0x0ae70003->NXM_NX_TUN_IPV4_DST[],output:3,output:4",
            "in_port=4,actions=output:3",
        ],
    );
    let k1 = tcp(1, MAC_A, MAC_B, (0x0a00_0001, 0x0a00_0002), (1234, 80));
    let t = xlate(&pl, &k1);
    assert_eq!(
        t.actions,
        vec![
            Action::SetTunnel {
                id: 5,
                src: 0,
                dst: 0x0ae7_0002
            },
            Action::Output(dp(3))
        ]
    );
    // The action carries all three fields: all three are in the mask.
    for f in [Field::TunId, Field::TunSrc, Field::TunDst] {
        assert_eq!(t.mask.get(f), f.full(), "{f:?}");
    }
    // A partial load keeps (and so reads) the other bits; one SetTunnel for two outputs.
    let k2 = with(k1, Field::InPort, dp(2).into());
    let t = xlate(&pl, &k2);
    assert_eq!(
        t.actions,
        vec![
            Action::SetTunnel {
                id: 6,
                src: 0,
                dst: 0x0ae7_0003
            },
            Action::Output(dp(3)),
            Action::Output(dp(4))
        ]
    );
    // No tunnel field set: no SetTunnel (the port drops it for want of tun_dst).
    let k4 = with(k1, Field::InPort, dp(4).into());
    assert_eq!(xlate(&pl, &k4).actions, vec![Action::Output(dp(3))]);
    let dump = pl.dump_flows_text("br0", None).unwrap().join("\n");
    assert!(
        dump.contains("actions=set_field:0x5->tun_id,set_field:10.231.0.2->tun_dst,output:3"),
        "{dump}"
    );
}

#[test]
fn bad_tunnel_fields_are_refused() {
    let pl = pipeline();
    for (flow, needle) in [
        ("tun_src=10.0.0.300,actions=drop", "10.0.0.300"),
        ("tun_id=0x10000000000000000,actions=drop", ""),
        ("actions=set_field:1.2.3.4.5->tun_dst", ""),
    ] {
        let e = pl.add_flow("br0", flow).unwrap_err().to_string();
        assert!(e.contains(needle), "{flow}: {e}");
    }
}

fn v6(s: &str) -> u128 {
    s.parse::<std::net::Ipv6Addr>().unwrap().into()
}

fn decapped6(vni: u64, src: &str) -> wire::FlowKey {
    let k = tcp(VX, MAC_A, MAC_B, (0x0a00_0001, 0x0a00_0002), (1234, 80));
    let k = with(k, Field::TunId, vni);
    let s = v6(src);
    let k = with(k, Field::TunIpv6SrcHi, (s >> 64) as u64);
    with(k, Field::TunIpv6SrcLo, s as u64)
}

#[test]
fn ipv6_tunnel_fields_match_enter_the_mask_and_print_as_ovs_ofctl() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "tun_ipv6_src=fd00:5::9,in_port=3,actions=output:1",
            "tun_ipv6_src=fd00:5::/64,in_port=3,actions=output:2",
            "in_port=1,actions=set_field:fd00:5::2->tun_ipv6_dst,output:3",
            "in_port=2,actions=load:0xfd000005000000000000000000000003->NXM_NX_TUN_IPV6_DST[],\
             move:NXM_NX_TUN_IPV6_DST[]->NXM_NX_XXREG1[],output:3",
        ],
    );
    let t = xlate(&pl, &decapped6(5, "fd00:5::9"));
    assert_eq!(t.actions, vec![Action::Output(dp(1))]);
    for f in [Field::TunIpv6SrcHi, Field::TunIpv6SrcLo] {
        assert_eq!(t.mask.get(f), u64::MAX, "{f:?} not in the mask");
    }
    let t = xlate(&pl, &decapped6(5, "fd00:5::7"));
    assert_eq!(t.actions, vec![Action::Output(dp(2))]);
    let t = xlate(&pl, &decapped6(5, "fd00:6::7"));
    assert!(t.actions.is_empty(), "{:?}", t.actions);
    // An IPv4 tunnel packet (no IPv6 words) matches neither.
    assert!(xlate(&pl, &decapped(5, 0x0ae7_0002)).actions.is_empty());
    let dump = pl.dump_flows_text("br0", None).unwrap().join("\n");
    for want in [
        "tun_ipv6_src=fd00:5::9,in_port=p3 actions=output:1",
        "tun_ipv6_src=fd00:5::/64,in_port=p3 actions=output:2",
        "actions=set_field:fd00:5::2->tun_ipv6_dst,output:3",
        "load:0xfd000005000000000000000000000003->NXM_NX_TUN_IPV6_DST[]",
        "move:NXM_NX_TUN_IPV6_DST[]->NXM_NX_XXREG1[]",
    ] {
        assert!(dump.contains(want), "{want} missing: {dump}");
    }
    for (flow, needle) in [
        ("tun_ipv6_src=fd00::1::2,actions=drop", "fd00::1::2"),
        ("tun_ipv6_dst=fd00::/129,actions=drop", ""),
        ("actions=set_field:fd00::g->tun_ipv6_dst", ""),
    ] {
        let e = pl.add_flow("br0", flow).unwrap_err().to_string();
        assert!(e.contains(needle), "{flow}: {e}");
    }
}
