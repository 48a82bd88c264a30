//! Golden tests, one per action and instruction: the OpenFlow actions a rule carries and the
//! datapath actions (with datapath port numbers) a packet gets.
mod common;

use common::*;
use dpif::Action;
use ofproto::xlate::decode_cookie;
use ofproto::PacketInReason;
use wire::{Field, FlowKey};

fn base() -> FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0063, 0x0a00_0001), (1234, 80))
}

fn tagged(k: FlowKey, tci: u64) -> FlowKey {
    with(k, Field::VlanTci, tci)
}

fn run(pl: &ofproto::Pipeline, flow_list: &[&str], k: &FlowKey) -> Vec<Action> {
    flows(pl, flow_list);
    xlate(pl, k).actions
}

#[test]
fn output_actions() {
    let pl = pipeline();
    let k = base();
    let o = |n| Action::Output(dp(n));
    assert_eq!(run(&pl, &["actions=output:2"], &k), vec![o(2)]);
    assert_eq!(run(&pl, &["actions=output:p3"], &k), vec![o(3)]);
    assert_eq!(
        run(&pl, &["actions=2,4"], &k),
        vec![o(2), o(4)],
        "bare port numbers"
    );
    assert_eq!(
        run(&pl, &["actions=output:1"], &k),
        vec![],
        "not back to the ingress"
    );
    assert_eq!(run(&pl, &["actions=output:9"], &k), vec![], "no such port");
    assert_eq!(run(&pl, &["actions=in_port"], &k), vec![o(1)]);
    assert_eq!(run(&pl, &["actions=drop"], &k), vec![]);
    assert_eq!(run(&pl, &["actions=flood"], &k), vec![o(2), o(3), o(4)]);
    assert_eq!(run(&pl, &["actions=all"], &k), vec![o(2), o(3), o(4)]);
    assert_eq!(
        run(&pl, &["actions=normal"], &k),
        vec![o(2), o(3), o(4)],
        "unknown dst floods"
    );
}

#[test]
fn controller_action_encodes_reason_table_and_cookie() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "table=0,priority=5,actions=goto_table:3",
            "table=3,priority=7,cookie=0xabc,actions=controller:128",
        ],
    );
    let tr = xlate(&pl, &base());
    let [Action::Userspace(c)] = tr.actions[..] else {
        panic!("expected one userspace action: {:?}", tr.actions)
    };
    let (_, reason, table, _) = decode_cookie(c);
    assert_eq!((reason, table), (PacketInReason::Action, 3));
    let pkt = packet::Packet::from_slice(&[0u8; 200]);
    dpif::Upcall::userspace(&pl, c, &base(), &pkt);
    let pis = pl.take_packet_ins(10);
    assert_eq!(pis.len(), 1);
    assert_eq!(
        (pis[0].cookie, pis[0].table_id, pis[0].in_port),
        (0xabc, 3, 1)
    );
    assert_eq!((pis[0].max_len, pis[0].data.len()), (128, 128));
    // A table-miss rule (priority 0, match all) reports NO_MATCH.
    flows(&pl, &["priority=0,actions=controller"]);
    let tr = xlate(&pl, &base());
    let [Action::Userspace(c)] = tr.actions[..] else {
        panic!()
    };
    assert_eq!(decode_cookie(c).1, PacketInReason::NoMatch);
}

#[test]
fn vlan_actions() {
    let pl = pipeline();
    let k = base();
    let o2 = Action::Output(dp(2));
    assert_eq!(
        run(
            &pl,
            &["actions=push_vlan:0x8100,mod_vlan_vid:10,output:2"],
            &k
        ),
        vec![Action::PushVlan(0x100a), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["actions=mod_vlan_vid:10,output:2"], &k),
        vec![Action::PushVlan(0x100a), o2.clone()]
    );
    let t = tagged(k, 0x6000 | 0x1000 | 5);
    assert_eq!(
        run(&pl, &["actions=mod_vlan_vid:10,output:2"], &t),
        vec![Action::PopVlan, Action::PushVlan(0x7000 | 10), o2.clone()],
        "keeps the PCP"
    );
    assert_eq!(
        run(
            &pl,
            &["actions=mod_vlan_pcp:7,set_field:20->vlan_vid,output:2"],
            &t
        ),
        vec![Action::PopVlan, Action::PushVlan(0xf000 | 20), o2.clone()],
        "two VLAN edits, one pop+push"
    );
    assert_eq!(
        run(&pl, &["actions=strip_vlan,output:2"], &t),
        vec![Action::PopVlan, o2.clone()]
    );
    assert_eq!(
        run(&pl, &["actions=pop_vlan,output:2"], &k),
        vec![o2.clone()],
        "nothing to pop"
    );
    assert_eq!(
        run(&pl, &["actions=output:3,mod_vlan_vid:9,output:2"], &k),
        vec![Action::Output(dp(3)), Action::PushVlan(0x1009), o2.clone()],
        "outputs see the packet as modified so far"
    );
    let tr = {
        flows(&pl, &["actions=mod_vlan_vid:10,output:2"]);
        xlate(&pl, &k)
    };
    assert_eq!(
        tr.mask.get(Field::VlanTci),
        0xffff,
        "VLAN rewrite depends on the TCI"
    );
}

#[test]
fn set_field_actions() {
    let pl = pipeline();
    let k = base();
    let o2 = Action::Output(dp(2));
    let mac = [0, 0x11, 0x22, 0x33, 0x44, 0x55];
    assert_eq!(
        run(&pl, &["actions=mod_dl_src:00:11:22:33:44:55,output:2"], &k),
        vec![Action::SetEthSrc(mac), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["actions=mod_dl_dst:00:11:22:33:44:55,output:2"], &k),
        vec![Action::SetEthDst(mac), o2.clone()]
    );
    assert_eq!(
        run(
            &pl,
            &["actions=set_field:00:11:22:33:44:55->eth_dst,output:2"],
            &k
        ),
        vec![Action::SetEthDst(mac), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["ip,actions=mod_nw_src:1.2.3.4,output:2"], &k),
        vec![Action::SetIpv4Src(0x0102_0304), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["ip,actions=mod_nw_dst:1.2.3.4,output:2"], &k),
        vec![Action::SetIpv4Dst(0x0102_0304), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["ip,actions=set_field:5.6.7.8->ip_dst,output:2"], &k),
        vec![Action::SetIpv4Dst(0x0506_0708), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["ip,actions=mod_nw_tos:184,output:2"], &k),
        vec![Action::SetIpDscp(46), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["ip,actions=set_field:46->ip_dscp,output:2"], &k),
        vec![Action::SetIpDscp(46), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["tcp,actions=mod_tp_src:1,output:2"], &k),
        vec![Action::SetTpSrc(1), o2.clone()]
    );
    assert_eq!(
        run(&pl, &["tcp,actions=mod_tp_dst:8080,output:2"], &k),
        vec![Action::SetTpDst(8080), o2.clone()]
    );
    assert_eq!(
        run(
            &pl,
            &["actions=set_field:53->udp_dst,output:2"],
            &with(k, Field::IpProto, 17)
        ),
        vec![Action::SetTpDst(53), o2.clone()]
    );
    // Prerequisites checked per packet: a TCP port rewrite skips a UDP packet, and the mask
    // records that ip_proto was consulted.
    flows(&pl, &["actions=set_field:53->tcp_dst,output:2"]);
    let tr = xlate(&pl, &with(k, Field::IpProto, 17));
    assert_eq!(tr.actions, vec![o2.clone()]);
    assert_eq!(tr.mask.get(Field::IpProto), 0xff);
    // An IPv4 rewrite skips ARP.
    assert_eq!(
        run(
            &pl,
            &["actions=mod_nw_src:1.2.3.4,output:2"],
            &eth(1, MAC_A, BCAST, 0x0806)
        ),
        vec![o2]
    );
}

#[test]
fn instructions_apply_write_clear_goto() {
    let pl = pipeline();
    let k = base();
    let o = |n| Action::Output(dp(n));
    assert_eq!(
        run(
            &pl,
            &["actions=mod_dl_dst:00:00:00:00:00:01,write_actions(output:3),output:2"],
            &k
        ),
        vec![Action::SetEthDst([0, 0, 0, 0, 0, 1]), o(2), o(3)],
        "apply now, action set at the end"
    );
    assert_eq!(
        run(
            &pl,
            &[
                "table=0,actions=write_actions(output:3),goto_table:1",
                "table=1,actions=clear_actions,output:2"
            ],
            &k
        ),
        vec![o(2)]
    );
    assert_eq!(
        run(
            &pl,
            &[
                "table=0,actions=write_actions(output:3),goto_table:1",
                "table=1,actions=write_actions(output:4)"
            ],
            &k
        ),
        vec![o(4)],
        "a later write replaces the set's output"
    );
    assert_eq!(
        run(
            &pl,
            &["table=0,actions=write_actions(output:3),goto_table:1"],
            &k
        ),
        vec![],
        "a miss in table 1 drops: the action set is not executed"
    );
    // Later tables match on the rewritten packet.
    assert_eq!(
        run(
            &pl,
            &[
                "table=0,actions=mod_vlan_vid:7,goto_table:5",
                "table=5,dl_vlan=7,actions=output:4"
            ],
            &k
        ),
        vec![Action::PushVlan(0x1007), o(4)]
    );
    assert!(matches!(
        pl.add_flow("br0", "table=3,actions=goto_table:2"),
        Err(ofproto::Error::Of(ofproto::OfError::BadGotoTable(2)))
    ));
}

/// An Ethernet/IPv4/TCP frame of `payload` bytes whose TCP checksum is left partial (the
/// pseudo-header sum, as a sender with checksum offload leaves it) and, for a GSO frame, whose
/// IPv4 length and header checksum are zero.
fn partial_tcp(payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 54 + payload];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[46] = 5 << 4;
    f[47] = 0x18;
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let p = wire::checksum::pseudo_v4(0x0a00_0001, 0x0a00_0002, 6, (f.len() - 34) as u16);
    f[50..52].copy_from_slice(&wire::checksum::fold(p).to_be_bytes());
    f
}

fn tcp_checksum_ok(f: &[u8]) -> bool {
    let p = wire::checksum::pseudo_v4(0x0a00_0001, 0x0a00_0002, 6, (f.len() - 34) as u16);
    wire::checksum::fold(wire::checksum::sum(&f[34..], p)) == 0xffff
}

#[test]
fn packet_ins_carry_finished_checksums_not_partial_ones() {
    let pl = pipeline();
    flows(&pl, &["priority=7,actions=controller"]);
    let tr = xlate(&pl, &base());
    let [Action::Userspace(c)] = tr.actions[..] else {
        panic!("expected one userspace action: {:?}", tr.actions)
    };
    // A partial checksum (a guest with `csum`): completed in the packet-in's copy.
    let mut pkt = packet::Packet::from_slice(&partial_tcp(100));
    pkt.meta.set_offload(packet::Offload::Csum {
        start: 34,
        offset: 16,
    });
    assert!(!tcp_checksum_ok(pkt.data()));
    dpif::Upcall::userspace(&pl, c, &base(), &pkt);
    // A GSO frame (a guest with `host_tso4`): lengths and checksums of the whole frame.
    let mut f = partial_tcp(3000);
    f[16..18].copy_from_slice(&[0, 0]);
    let mut gso = packet::Packet::from_slice(&f);
    gso.meta.set_offload(packet::Offload::Tso {
        v6: false,
        mss: 1448,
        l4: 34,
    });
    dpif::Upcall::userspace(&pl, c, &base(), &gso);
    let pis = pl.take_packet_ins(10);
    assert_eq!(pis.len(), 2);
    assert!(tcp_checksum_ok(&pis[0].frame), "partial checksum completed");
    let g = &pis[1].frame;
    assert_eq!(
        usize::from(u16::from_be_bytes([g[16], g[17]])),
        g.len() - 14
    );
    assert_eq!(
        wire::checksum::fold(wire::checksum::sum(&g[14..34], 0)),
        0xffff
    );
    assert!(
        tcp_checksum_ok(g),
        "GSO frame's checksum over the whole payload"
    );
    // The datapath's own packet is left as it was (it may still be output with its offload).
    assert!(!tcp_checksum_ok(pkt.data()));
    assert!(pkt.meta.has_offload());
}
