//! Groups, PACKET_OUT translation, fail-open and OpenFlow-filtered flow stats on a real
//! pipeline (br0, p1..p4 = OpenFlow 1..4, datapath 11..14).

mod common;

use common::*;
use dpif::Action;
use ofproto::{Bucket, GroupCommand, GroupMod, GroupType, OfAction, OfError};
use wire::Field;

fn group(id: u32, t: GroupType, buckets: Vec<Bucket>) -> GroupMod {
    GroupMod {
        command: GroupCommand::Add,
        group_type: t,
        group_id: id,
        buckets,
        command_bucket_id: ofproto::group::BUCKET_ALL,
    }
}

fn out(p: u32) -> Bucket {
    Bucket::new(vec![OfAction::output(p)])
}

#[test]
fn group_action_text_round_trips_and_needs_the_group() {
    let pl = pipeline();
    let e = pl.add_flow("br0", "in_port=1,actions=group:5").unwrap_err();
    assert_eq!(e, ofproto::Error::Of(OfError::BadOutGroup(5)));
    pl.group_mod("br0", group(5, GroupType::All, vec![out(2), out(3)]))
        .unwrap();
    pl.add_flow("br0", "in_port=1,actions=group:5").unwrap();
    let text = pl.dump_flows_text("br0", None).unwrap();
    assert!(
        text.iter()
            .any(|l| l.ends_with("in_port=p1 actions=group:5")),
        "{text:?}"
    );
    let t = xlate(&pl, &eth(1, MAC_A, MAC_B, 0x0800));
    assert_eq!(t.actions, vec![Action::Output(12), Action::Output(13)]);
    // Stats: one packet on the group and on each bucket; one rule refers to it.
    let s = pl.group_stats("br0", 5).unwrap();
    assert_eq!((s[0].packet_count, s[0].ref_count), (1, 1));
    assert_eq!(
        s[0].bucket_stats.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![1, 1]
    );
    // out_group filter.
    let mut f = ofproto::FlowMod::delete(ofproto::Match::ANY);
    f.out_group = 5;
    assert_eq!(pl.flow_stats("br0", &f).unwrap().len(), 1);
    f.out_group = 6;
    assert!(pl.flow_stats("br0", &f).unwrap().is_empty());
}

#[test]
fn write_actions_group_beats_output_and_buckets_run_on_copies() {
    let pl = pipeline();
    let rewrite = Bucket::new(vec![
        OfAction::SetField(ofproto::SetField::EthDst(MAC_C)),
        OfAction::SetField(ofproto::SetField::VlanVid(9)),
        OfAction::output(3),
    ]);
    pl.group_mod("br0", group(1, GroupType::Indirect, vec![rewrite]))
        .unwrap();
    flows(&pl, &["in_port=1,actions=write_actions(output:4,group:1)"]);
    let t = xlate(&pl, &eth(1, MAC_A, MAC_B, 0x0800));
    assert_eq!(
        t.actions,
        vec![
            Action::SetEthDst(MAC_C),
            Action::PushVlan(0x1000 | 9),
            Action::Output(13),
            Action::SetEthDst(MAC_B)
        ]
    );
    flows(&pl, &["in_port=1,actions=group:1,output:2"]);
    let t = xlate(&pl, &eth(1, MAC_A, MAC_B, 0x0800));
    assert_eq!(
        &t.actions[4..],
        &[Action::PopVlan, Action::Output(12)],
        "the copy's VLAN is not on the original: {:?}",
        t.actions
    );
}

#[test]
fn select_hashes_into_the_mask_and_fast_failover_follows_liveness() {
    let pl = pipeline();
    let w = |p: u32, weight| Bucket {
        weight,
        watch_port: p,
        ..out(p)
    };
    pl.group_mod("br0", group(2, GroupType::Select, vec![w(2, 1), w(3, 1)]))
        .unwrap();
    flows(&pl, &["in_port=1,actions=group:2"]);
    let mut ports = std::collections::HashSet::new();
    for i in 0..32u32 {
        let k = tcp(
            1,
            MAC_A,
            MAC_B,
            (0x0a00_0001, 0x0a00_0002),
            (1000 + i as u16, 80),
        );
        let t = xlate(&pl, &k);
        assert_eq!(
            t.mask.get(Field::TpSrc),
            0xffff,
            "hashed fields are in the mask"
        );
        assert_eq!(t.mask.get(Field::Ipv4Src), 0xffff_ffff);
        ports.insert(t.actions.clone());
    }
    assert_eq!(ports.len(), 2, "both buckets used: {ports:?}");
    // A dead watch port takes its bucket out of the selection.
    let g0 = pl.generation();
    pl.set_port_live("br0", 3, false).unwrap();
    assert!(pl.generation() > g0, "liveness change revalidates");
    for i in 0..8u16 {
        let k = tcp(1, MAC_A, MAC_B, (1, 2), (i, 80));
        assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(12)]);
    }
    pl.set_port_live("br0", 3, true).unwrap();
    let ff = vec![w(2, 0), w(3, 0), w(4, 0)];
    pl.group_mod("br0", group(3, GroupType::FastFailover, ff))
        .unwrap();
    flows(&pl, &["in_port=1,actions=group:3"]);
    let k = eth(1, MAC_A, MAC_B, 0x0800);
    assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(12)]);
    pl.set_port_live("br0", 2, false).unwrap();
    assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(13)]);
    pl.set_port_live("br0", 3, false).unwrap();
    assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(14)]);
    pl.set_port_live("br0", 4, false).unwrap();
    assert!(xlate(&pl, &k).actions.is_empty());
    assert!(!pl.port_live("br0", 4));
}

#[test]
fn deleting_a_group_deletes_its_rules() {
    let pl = pipeline();
    pl.group_mod("br0", group(1, GroupType::All, vec![out(2)]))
        .unwrap();
    pl.add_flow("br0", "cookie=0x7,send_flow_rem,in_port=1,actions=group:1")
        .unwrap();
    let del = GroupMod {
        command: GroupCommand::Delete,
        ..group(1, GroupType::All, vec![])
    };
    let removed = pl.group_mod("br0", del).unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].cookie, 7);
    assert!(pl.group_descs("br0").unwrap().is_empty());
}

#[test]
fn packet_out_translation() {
    let pl = pipeline();
    let frame = {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&MAC_B);
        f[6..12].copy_from_slice(&MAC_A);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f
    };
    let p = pl
        .packet_out("br0", 1, &[OfAction::output(ofproto::ofpp::FLOOD)], &frame)
        .unwrap();
    assert_eq!(p.in_dp, Some(11));
    assert_eq!(
        p.actions,
        vec![Action::Output(12), Action::Output(13), Action::Output(14)]
    );
    let p = pl
        .packet_out(
            "br0",
            ofproto::ofpp::CONTROLLER,
            &[
                OfAction::output(ofproto::ofpp::IN_PORT),
                OfAction::output(2),
            ],
            &frame,
        )
        .unwrap();
    assert_eq!((p.in_dp, p.actions), (None, vec![Action::Output(12)]));
    // output:TABLE runs the tables (default NORMAL: flood, learning A on p1).
    let p = pl
        .packet_out("br0", 1, &[OfAction::output(ofproto::ofpp::TABLE)], &frame)
        .unwrap();
    assert_eq!(p.actions.len(), 3);
    assert_eq!(
        xlate(&pl, &eth(2, MAC_B, MAC_A, 0x0800)).actions,
        vec![Action::Output(11)]
    );
    let e = pl
        .packet_out("br0", 1, &[OfAction::output(0)], &frame)
        .unwrap_err();
    assert_eq!(e, ofproto::Error::Of(OfError::BadOutPort(0)));
    let e = pl
        .packet_out("br0", 1, &[OfAction::Group(4)], &frame)
        .unwrap_err();
    assert_eq!(e, ofproto::Error::Of(OfError::BadOutGroup(4)));
}

#[test]
fn fail_open_ignores_but_keeps_the_tables() {
    let pl = pipeline();
    flows(&pl, &["priority=10,in_port=1,actions=output:4"]);
    let k = eth(1, MAC_A, MAC_B, 0x0800);
    assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(14)]);
    let g0 = pl.generation();
    assert!(pl.set_fail_open("br0", true).unwrap());
    assert!(pl.generation() > g0 && pl.fail_open("br0"));
    assert_eq!(
        xlate(&pl, &k).actions,
        vec![Action::Output(12), Action::Output(13), Action::Output(14)],
        "NORMAL floods"
    );
    assert_eq!(pl.dump_flows("br0", None).unwrap().len(), 1);
    assert!(!pl.set_fail_open("br0", true).unwrap(), "no change");
    assert!(pl.set_fail_open("br0", false).unwrap());
    assert_eq!(xlate(&pl, &k).actions, vec![Action::Output(14)]);
}
