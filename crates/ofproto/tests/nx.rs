//! Nicira extensions in the pipeline: registers (matches that do not widen the megaflow,
//! loads, set_field, xreg/xxreg views), resubmit chains and their limits, move from packet
//! fields (un-wildcarding what it copied), dec_ttl (rewrite, packet-in reason invalid_ttl),
//! note, extension actions refused in write_actions, and the ovs-ofctl text of all of them.
mod common;

use common::*;
use dpif::Action;
use ofproto::types::Regs;
use ofproto::xlate::{decode_cookie, MAX_RESUBMIT_DEPTH};
use ofproto::{Error, NxField, OfError, PacketInReason};
use wire::{Field, FlowKey};

fn base() -> FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0063, 0x0a00_0001), (1234, 80))
}

fn o(n: u32) -> Action {
    Action::Output(dp(n))
}

#[test]
fn registers_steer_through_resubmit_without_widening_the_megaflow() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=10,in_port=1,actions=load:0x2->NXM_NX_REG0[0..15],resubmit(,1)",
            "priority=10,in_port=2,actions=set_field:0x3->reg0,resubmit(,1)",
            "priority=10,in_port=3,actions=resubmit(,1)",
            "table=1,priority=20,reg0=2,actions=output:3",
            "table=1,priority=20,reg0=3,actions=output:4",
            "table=1,priority=20,reg0=0x10/0xf0,actions=output:4",
            "table=1,priority=10,actions=output:1",
        ],
    );
    let t = xlate(&pl, &base());
    assert_eq!(t.actions, vec![o(3)]);
    // Only in_port was consulted: the register match added nothing to the mask.
    let mut want = FlowKey::ZERO;
    want.set_exact(Field::InPort);
    assert_eq!(t.mask, want);
    assert_eq!(
        xlate(&pl, &with(base(), Field::InPort, dp(2).into())).actions,
        vec![o(4)]
    );
    // Registers start at zero for every packet: p3's packet sees reg0=0 (not 2 or 3).
    assert_eq!(
        xlate(&pl, &with(base(), Field::InPort, dp(3).into())).actions,
        vec![o(1)]
    );
}

#[test]
fn xreg_xxreg_and_metadata_are_views_of_the_register_file() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=10,actions=set_field:0x1122334455667788->xreg1,load:0xab->xxreg3[120..127],set_field:0x9->metadata,resubmit(,1)",
            "table=1,priority=20,reg2=0x11223344,reg3=0x55667788,reg12=0xab000000/0xff000000,metadata=9,actions=output:2",
            "table=1,priority=10,actions=drop",
        ],
    );
    assert_eq!(xlate(&pl, &base()).actions, vec![o(2)]);
    let mut r = Regs::ZERO;
    NxField::XReg(1).set_reg(&mut r, 0x1122_3344_5566_7788, u64::MAX.into());
    assert_eq!((r.reg[2], r.reg[3]), (0x1122_3344, 0x5566_7788));
    NxField::XXReg(0).set_reg(&mut r, 1 << 96 | 5, u128::MAX);
    assert_eq!(r.reg[..4], [1, 0, 0, 5]);
}

#[test]
fn move_from_a_packet_field_unwildcards_it() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=10,tcp,actions=move:NXM_OF_TCP_DST[]->NXM_NX_REG1[0..15],resubmit(,1)",
            "table=1,priority=20,reg1=80,actions=output:2",
            "table=1,priority=10,actions=output:3",
        ],
    );
    let web = xlate(&pl, &base());
    let other = xlate(&pl, &with(base(), Field::TpDst, 443));
    assert_eq!(web.actions, vec![o(2)]);
    assert_eq!(other.actions, vec![o(3)]);
    assert_eq!(web.mask.get(Field::TpDst), 0xffff, "tcp_dst is in the mask");
    // The two packets differ only in tcp_dst: their megaflows must not cover each other.
    let other_key = with(base(), Field::TpDst, 443);
    assert_ne!(base().masked(&web.mask), other_key.masked(&web.mask));

    // move into a packet field rewrites the packet.
    flows(
        &pl,
        &["priority=10,tcp,actions=load:0x1f90->reg2[0..15],move:reg2[0..15]->tcp_dst[],output:2"],
    );
    assert_eq!(
        xlate(&pl, &base()).actions,
        vec![Action::SetTpDst(8080), o(2)]
    );
}

#[test]
fn resubmit_with_a_port_and_the_loop_limits() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=10,in_port=1,actions=resubmit(4,1),output:3",
            "table=1,priority=10,in_port=4,actions=output:2",
            "table=1,priority=5,actions=drop",
        ],
    );
    // The nested lookup sees in_port 4; outputs come in order; in_port is restored.
    assert_eq!(xlate(&pl, &base()).actions, vec![o(2), o(3)]);

    // A chain 70 deep passes the depth limit: dropped and counted.
    let mut deep: Vec<String> = (0..70)
        .map(|t| format!("table={t},actions=output:2,resubmit(,{})", t + 1))
        .collect();
    deep.push("table=70,actions=output:3".into());
    let refs: Vec<&str> = deep.iter().map(String::as_str).collect();
    flows(&pl, &refs);
    let before = pl.xlate_limit_drops();
    let t = xlate(&pl, &base());
    assert!(t.actions.is_empty(), "{} actions", t.actions.len());
    assert_eq!(pl.xlate_limit_drops(), before + 1);
    // 60 deep is within the limit.
    let mut ok: Vec<String> = (0..60)
        .map(|t| format!("table={t},actions=resubmit(,{})", t + 1))
        .collect();
    ok.push("table=60,actions=output:3".into());
    let refs: Vec<&str> = ok.iter().map(String::as_str).collect();
    flows(&pl, &refs);
    const { assert!(60 < MAX_RESUBMIT_DEPTH) };
    assert_eq!(xlate(&pl, &base()).actions, vec![o(3)]);

    // Exponential fan-out (each rule resubmits twice to the next table): cut by the total
    // work limit long before 2^40 lookups, never a stack overflow.
    let fan: Vec<String> = (0..40)
        .map(|t| {
            format!(
                "table={t},actions=resubmit(,{}),resubmit(,{})",
                t + 1,
                t + 1
            )
        })
        .collect();
    let refs: Vec<&str> = fan.iter().map(String::as_str).collect();
    flows(&pl, &refs);
    let before = pl.xlate_limit_drops();
    let t = xlate(&pl, &base());
    assert!(t.actions.is_empty());
    assert_eq!(pl.xlate_limit_drops(), before + 1);
    // A self-loop in one table.
    flows(&pl, &["actions=output:2,resubmit(,0)"]);
    assert!(xlate(&pl, &base()).actions.is_empty());
}

#[test]
fn dec_ttl_rewrites_or_sends_invalid_ttl() {
    let pl = pipeline();
    flows(&pl, &["priority=10,ip,actions=dec_ttl,output:2"]);
    let t = xlate(&pl, &base());
    assert_eq!(t.actions, vec![Action::SetIpTtl(63), o(2)]);
    assert_eq!(t.mask.get(Field::IpTtl), 0xff);
    for ttl in [0, 1] {
        let t = xlate(&pl, &with(base(), Field::IpTtl, ttl));
        let [Action::Userspace(c)] = t.actions[..] else {
            panic!("ttl {ttl}: {:?}", t.actions)
        };
        assert_eq!(decode_cookie(c).1, PacketInReason::InvalidTtl);
    }
    // Non-IP packets are left alone.
    let arp = eth(1, MAC_A, MAC_B, 0x0806);
    flows(&pl, &["priority=10,actions=dec_ttl,output:2"]);
    assert_eq!(xlate(&pl, &arp).actions, vec![o(2)]);
    // The executed rewrite: TTL and IPv4 checksum.
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 99, 10, 0, 0, 1,
    ]);
    let sum = wire::checksum::compute(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    assert!(wire::checksum::verify(&f[14..34]));
    let mut pkt = packet::Packet::from_slice(&f);
    dpif::modify::modify(&mut pkt, &Action::SetIpTtl(63));
    assert_eq!(pkt.data()[22], 63);
    assert!(wire::checksum::verify(&pkt.data()[14..34]));
}

#[test]
fn note_has_no_effect_and_extensions_in_write_actions_are_refused() {
    let pl = pipeline();
    flows(&pl, &["priority=10,actions=note:aa.bb,output:2"]);
    assert_eq!(xlate(&pl, &base()).actions, vec![o(2)]);
    assert_eq!(
        OfError::Unsupported("").type_code(),
        (2, 0),
        "OFPBAC_BAD_TYPE"
    );
    let e = pl
        .add_flow("br0", "actions=write_actions(ct(commit))")
        .unwrap_err();
    assert!(matches!(e, Error::Of(OfError::Unsupported(_))), "{e:?}");
    // Extension actions inside write_actions are refused, not dropped.
    let e = pl
        .add_flow("br0", "actions=write_actions(resubmit(,1))")
        .unwrap_err();
    assert!(matches!(e, Error::Of(OfError::Unsupported(_))), "{e:?}");
}

#[test]
fn text_syntax_round_trips_as_ovs_ofctl_prints_it() {
    let pl = pipeline();
    // (as typed, as ovs-ofctl 3.1 prints it: `ovs-ofctl -O OpenFlow13 parse-flow`).
    let cases = [
        ("actions=resubmit(,1)", "actions=resubmit(,1)"),
        ("actions=resubmit:3", "actions=resubmit:3"),
        ("actions=resubmit(3,2)", "actions=resubmit(3,2)"),
        ("actions=resubmit(in_port,2)", "actions=resubmit(,2)"),
        ("actions=load:5->reg0[]", "actions=load:0x5->NXM_NX_REG0[]"),
        ("actions=set_field:5->reg0", "actions=set_field:0x5->reg0"),
        (
            "actions=set_field:0x5/0xff->reg1",
            "actions=load:0x5->NXM_NX_REG1[0..7]",
        ),
        (
            "actions=load:0x1234567890->xreg1[]",
            "actions=load:0x1234567890->OXM_OF_PKT_REG1[]",
        ),
        (
            "actions=move:eth_src[0..31]->reg0[]",
            "actions=move:NXM_OF_ETH_SRC[0..31]->NXM_NX_REG0[]",
        ),
        (
            "actions=move:NXM_OF_ETH_SRC[]->xreg0[0..47]",
            "actions=move:NXM_OF_ETH_SRC[]->OXM_OF_PKT_REG0[0..47]",
        ),
        ("ip,actions=dec_ttl", "ip actions=dec_ttl"),
        ("actions=note:01.02.03", "actions=note:01.02.03"),
        (
            "actions=load:1->NXM_NX_REG0[31]",
            "actions=load:0x1->NXM_NX_REG0[31]",
        ),
        (
            "actions=set_field:0x0->xxreg0",
            "actions=set_field:0->xxreg0",
        ),
        (
            "reg0=5,reg1=0x10/0xf0,xreg2=0x1234567890,actions=drop",
            "reg0=0x5,reg1=0x10/0xf0,reg4=0x12,reg5=0x34567890 actions=drop",
        ),
        (
            "tcp,in_port=1,reg0=5,metadata=1,tp_dst=80,actions=drop",
            "tcp,reg0=0x5,metadata=0x1,in_port=p1,tp_dst=80 actions=drop",
        ),
        ("reg3=0,actions=drop", "reg3=0 actions=drop"),
        (
            "ip,actions=ct(commit,zone=5,exec(set_field:1->ct_mark))",
            "ip actions=ct(commit,zone=5,exec(set_field:0x1->ct_mark))",
        ),
        (
            "ip,actions=ct(commit,zone=NXM_NX_REG0[0..15],table=2)",
            "ip actions=ct(commit,table=2,zone=NXM_NX_REG0[0..15])",
        ),
        (
            "tcp,actions=ct(commit,force,alg=ftp,exec(load:0x1->NXM_NX_CT_LABEL[0..63]))",
            "tcp actions=ct(commit,force,exec(load:0x1->NXM_NX_CT_LABEL[0..63]),alg=ftp)",
        ),
        (
            "ip,actions=ct(commit,nat(src=10.0.0.1-10.0.0.9:1000-2000,persistent,random))",
            "ip actions=ct(commit,nat(src=10.0.0.1-10.0.0.9:1000-2000,persistent,random))",
        ),
        ("ip,actions=ct(nat)", "ip actions=ct(nat)"),
        (
            "ip,actions=ct(commit,nat(src))",
            "ip actions=ct(commit,nat(src))",
        ),
        (
            "ipv6,actions=ct(commit,nat(dst=[2001:db8::1]-[2001:db8::9]:80,hash))",
            "ipv6 actions=ct(commit,nat(dst=[2001:db8::1]-[2001:db8::9]:80,hash))",
        ),
        (
            "ip,actions=ct(commit,exec(set_field:0x1/0x3->ct_mark,set_field:0x5->ct_label))",
            "ip actions=ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0..1],set_field:0x5->ct_label))",
        ),
        (
            "ip,actions=ct(zone=65535,table=254)",
            "ip actions=ct(table=254,zone=65535)",
        ),
        ("ip,actions=ct_clear", "ip actions=ct_clear"),
    ];
    let br_ports = |n: &str| match n {
        "p1" => Some(1),
        _ => None,
    };
    let name_of = |p: u32| (p == 1).then(|| "p1".to_string());
    for (typed, printed) in cases {
        let fm = ofproto::parse::parse_flow(typed, ofproto::FlowModCommand::Add, &br_ports)
            .unwrap_or_else(|e| panic!("{typed}: {e}"));
        let m = ofproto::format::format_match(&fm.match_, fm.priority, &name_of);
        let a = ofproto::format::format_instructions(&fm.instructions);
        let text = if m.is_empty() {
            format!("actions={a}")
        } else {
            format!("{m} actions={a}")
        };
        assert_eq!(text, printed, "{typed}");
        // What is printed parses back to the same flow.
        let again = ofproto::parse::parse_flow(&text, ofproto::FlowModCommand::Add, &br_ports)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(again.match_, fm.match_, "{typed}");
        assert_eq!(again.instructions, fm.instructions, "{typed}");
    }
    let _ = pl;
}

#[test]
fn text_syntax_errors_name_the_token() {
    let pl = pipeline();
    for (flow, needle) in [
        ("actions=set_field:5->ct_label", "outside of ct"),
        ("actions=load:0x1ffff->reg0[0..15]", "does not fit"),
        ("actions=load:1->reg16[]", "unknown field"),
        ("actions=move:reg0[0..15]->reg1[0..7]", "16 bits"),
        (
            "actions=move:NXM_OF_IP_SRC[]->reg2[]",
            "invalid with specified match",
        ),
        (
            "actions=move:reg0[0..15]->tcp_dst[]",
            "invalid with specified match",
        ),
        ("actions=load:1->NXM_NX_IP_TTL[]", "may write registers"),
        ("ip,actions=nat(src=1.2.3.4)", "outside of \"ct\""),
        (
            "ip,actions=ct(commit,nat(src=10.0.0.1,random,hash))",
            "hash",
        ),
        ("ip,actions=ct(commit,exec(output:1))", "ct_mark"),
        ("ip,actions=ct(force)", "force needs commit"),
        ("actions=resubmit(,255)", "table"),
        ("actions=resubmit(70000,1)", "cannot resubmit"),
        ("ip,actions=dec_ttl(1,2)", "controller ids"),
        ("reg0=0x100000000,actions=drop", "wider"),
    ] {
        let e = pl.add_flow("br0", flow).unwrap_err().to_string();
        assert!(e.contains(needle), "{flow}: {e}");
    }
}
