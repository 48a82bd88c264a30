//! Flow tables through the control API: priorities, table-miss, megaflow masks of probed
//! subtables, timeouts, add/modify/delete semantics (strict, non-strict, cookie masks,
//! out_port), counters, `dump-flows` output and parse errors.
mod common;

use common::*;
use dpif::Action;
use ofproto::{flags, Error, FlowModCommand, OfError, RemovedReason};
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

fn base() -> FlowKey {
    tcp(1, MAC_A, MAC_B, (0x0a00_0063, 0x0a00_0001), (1234, 80))
}

fn o(n: u32) -> Action {
    Action::Output(dp(n))
}

fn cookies(pl: &ofproto::Pipeline) -> Vec<u64> {
    let mut c: Vec<u64> = pl
        .dump_flows("br0", None)
        .unwrap()
        .iter()
        .map(|f| f.cookie)
        .collect();
    c.sort();
    c
}

#[test]
fn new_bridge_is_normal_and_del_flows_removes_it() {
    let pl = pipeline();
    let dump = pl.dump_flows_text("br0", None).unwrap();
    assert_eq!(dump.len(), 1);
    assert!(dump[0].starts_with("cookie=0x0, duration="), "{}", dump[0]);
    assert!(
        dump[0].ends_with(", table=0, n_packets=0, n_bytes=0, priority=0 actions=NORMAL"),
        "{}",
        dump[0]
    );
    pl.del_flows("br0", None, false).unwrap();
    let tr = xlate(&pl, &base());
    assert!(tr.actions.is_empty(), "table-miss drops");
    let mut only_in_port = FlowKey::ZERO;
    only_in_port.set_exact(Field::InPort);
    assert_eq!(
        tr.mask, only_in_port,
        "an empty table consults nothing but in_port"
    );
}

#[test]
fn priorities_and_probed_masks() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=100,tcp,tp_dst=22,actions=drop",
            "priority=50,ip,nw_dst=10.0.0.1,actions=output:2",
            "priority=1,actions=output:3",
        ],
    );
    let tr = xlate(&pl, &base());
    assert_eq!(tr.actions, vec![o(2)]);
    assert_eq!(
        tr.mask.get(Field::TpDst),
        0xffff,
        "the higher-priority rule's subtable was probed"
    );
    assert_eq!(tr.mask.get(Field::Ipv4Dst), 0xffff_ffff);
    assert_eq!(tr.rules, vec![(0, 50, 0)]);
    assert_eq!(xlate(&pl, &with(base(), Field::TpDst, 22)).actions, vec![]);
    let other = with(base(), Field::Ipv4Dst, 9);
    assert_eq!(xlate(&pl, &other).actions, vec![o(3)]);
    // A higher-priority match stops the probe: the lowest subtable is not consulted.
    let tr = xlate(&pl, &with(base(), Field::TpDst, 22));
    assert_eq!(
        tr.mask.get(Field::Ipv4Dst),
        0,
        "stopped before the priority-50 subtable"
    );
}

#[test]
fn counters_count_on_upcall_and_survive_modify() {
    let pl = pipeline();
    flows(&pl, &["priority=5,actions=output:2"]);
    for _ in 0..3 {
        xlate(&pl, &base());
    }
    let f = &pl.dump_flows("br0", None).unwrap()[0];
    assert_eq!((f.packet_count, f.byte_count), (3, 180));
    pl.mod_flows("br0", "actions=output:3", false).unwrap();
    let f = &pl.dump_flows("br0", None).unwrap()[0];
    assert_eq!(
        (f.packet_count, f.priority),
        (3, 5),
        "modify keeps counters and priority"
    );
    assert_eq!(xlate(&pl, &base()).actions, vec![o(3)]);
    pl.mod_flows("br0", "priority=5,reset_counts,actions=output:4", true)
        .unwrap();
    assert_eq!(pl.dump_flows("br0", None).unwrap()[0].packet_count, 0);
    assert_eq!(xlate(&pl, &base()).actions, vec![o(4)]);
    pl.mod_flows("br0", "priority=6,actions=output:2", true)
        .unwrap();
    assert_eq!(
        xlate(&pl, &base()).actions,
        vec![o(4)],
        "strict modify needs the exact priority"
    );
    // Re-adding the same match+priority replaces the rule and keeps counters.
    pl.add_flow("br0", "priority=5,actions=output:2").unwrap();
    assert_eq!(pl.dump_flows("br0", None).unwrap()[0].packet_count, 2);
    assert_eq!(pl.dump_flows("br0", None).unwrap().len(), 1);
}

#[test]
fn hard_and_idle_timeouts() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=5,cookie=1,hard_timeout=5,send_flow_rem,actions=output:2",
            "priority=4,cookie=2,idle_timeout=5,actions=output:3",
        ],
    );
    let t0 = Instant::now();
    assert!(pl.expire(t0 + Duration::from_secs(3)).is_empty());
    let g = pl.generation();
    let gone = pl.expire(t0 + Duration::from_secs(6));
    assert!(pl.generation() > g, "expiry bumps the generation");
    assert_eq!(gone.len(), 2, "{gone:?}");
    let hard = gone.iter().find(|r| r.cookie == 1).unwrap();
    assert_eq!(hard.reason, RemovedReason::HardTimeout);
    assert!(hard.flags & flags::SEND_FLOW_REM != 0);
    assert_eq!(
        gone.iter().find(|r| r.cookie == 2).unwrap().reason,
        RemovedReason::IdleTimeout
    );
    // Traffic keeps an idle rule alive.
    flows(
        &pl,
        &["priority=4,cookie=3,idle_timeout=5,actions=output:3"],
    );
    let t0 = Instant::now();
    xlate_at(&pl, &base(), t0 + Duration::from_secs(4));
    assert!(
        pl.expire(t0 + Duration::from_secs(8)).is_empty(),
        "used at +4s, idle 4s < 5s"
    );
    let gone = pl.expire(t0 + Duration::from_secs(10));
    assert_eq!(gone.len(), 1);
    assert_eq!(
        (gone[0].reason, gone[0].packet_count),
        (RemovedReason::IdleTimeout, 1)
    );
}

#[test]
fn delete_non_strict_strict_cookie_and_out_port() {
    let pl = pipeline();
    let set = [
        "priority=10,cookie=0x11,tcp,tp_dst=80,actions=output:2",
        "priority=20,cookie=0x12,tcp,actions=output:3",
        "priority=30,cookie=0x21,ip,actions=output:2",
        "table=1,priority=10,cookie=0x22,tcp,tp_dst=80,actions=output:4",
    ];
    flows(&pl, &set);
    let gone = pl
        .del_flows("br0", Some("cookie=0x10/0xf0"), false)
        .unwrap();
    assert_eq!(gone.len(), 2);
    assert_eq!(cookies(&pl), vec![0x21, 0x22]);

    flows(&pl, &set);
    pl.del_flows("br0", Some("cookie=0x12"), false).unwrap();
    assert_eq!(
        cookies(&pl),
        vec![0x11, 0x21, 0x22],
        "a cookie without a mask is an exact filter"
    );

    flows(&pl, &set);
    pl.del_flows("br0", Some("tcp"), false).unwrap();
    assert_eq!(
        cookies(&pl),
        vec![0x21],
        "non-strict: every tcp rule in every table, not the ip one"
    );

    flows(&pl, &set);
    pl.del_flows("br0", Some("table=0,tcp"), false).unwrap();
    assert_eq!(cookies(&pl), vec![0x21, 0x22], "table=0 only");

    flows(&pl, &set);
    pl.del_flows("br0", Some("out_port=2"), false).unwrap();
    assert_eq!(cookies(&pl), vec![0x12, 0x22], "out_port filter");

    flows(&pl, &set);
    pl.del_flows("br0", Some("tcp,tp_dst=80"), true).unwrap();
    assert_eq!(
        cookies(&pl),
        vec![0x11, 0x12, 0x21, 0x22],
        "strict needs the priority too"
    );
    let gone = pl
        .del_flows("br0", Some("priority=10,tcp,tp_dst=80"), true)
        .unwrap();
    assert_eq!(
        (gone.len(), gone[0].reason),
        (2, RemovedReason::Delete),
        "strict in every table"
    );
    assert_eq!(cookies(&pl), vec![0x12, 0x21]);

    flows(&pl, &set);
    pl.del_flows("br0", Some("priority=20,tcp,cookie=0x1/0xff"), true)
        .unwrap();
    assert_eq!(
        cookies(&pl).len(),
        4,
        "cookie mismatch protects the strict match"
    );
}

#[test]
fn check_overlap_and_generation() {
    let pl = pipeline();
    flows(&pl, &["priority=10,tcp,actions=drop"]);
    let g = pl.generation();
    let e = pl.add_flow(
        "br0",
        "priority=10,ip,nw_dst=10.0.0.1,check_overlap,actions=drop",
    );
    assert_eq!(e, Err(Error::Of(OfError::Overlap)));
    assert_eq!(OfError::Overlap.type_code(), (5, 3));
    pl.add_flow(
        "br0",
        "priority=11,ip,nw_dst=10.0.0.1,check_overlap,actions=drop",
    )
    .unwrap();
    assert!(pl.generation() > g);
    let g = pl.generation();
    pl.add_port("br0", port("p5", 5, None, &[])).unwrap();
    assert!(pl.generation() > g, "port changes bump");
    assert_eq!(pl.port_by_dp(dp(5)), Some(("br0".to_string(), 5)));
    pl.del_port("br0", "p5").unwrap();
    assert_eq!(pl.port_by_dp(dp(5)), None);
    assert!(
        pl.add_port("br0", port("p1", 9, None, &[])).is_err(),
        "duplicate name"
    );
    assert!(
        pl.add_flow("br9", "actions=drop").is_err(),
        "unknown bridge"
    );
}

#[test]
fn dump_flows_format_matches_ovs_ofctl() {
    let pl = pipeline();
    flows(&pl, &["table=0,priority=100,cookie=0x5,in_port=p1,dl_type=0x0800,nw_src=10.0.0.0/24,tcp,tp_dst=80,idle_timeout=10,actions=mod_dl_dst:00:11:22:33:44:55,output:2"]);
    let line = pl.dump_flows_text("br0", None).unwrap().remove(0);
    let (head, rest) = line.split_once(", duration=").unwrap();
    assert_eq!(head, "cookie=0x5");
    let rest = rest.split_once("s, ").unwrap().1;
    assert_eq!(
        rest,
        "table=0, n_packets=0, n_bytes=0, idle_timeout=10, priority=100,tcp,in_port=p1,nw_src=10.0.0.0/24,tp_dst=80 actions=mod_dl_dst:00:11:22:33:44:55,output:2"
    );
}

#[test]
fn dump_output_parses_back() {
    let pl = pipeline();
    let set = [
        "priority=100,cookie=0x5,in_port=p1,tcp,nw_src=10.0.0.0/24,tp_dst=80,idle_timeout=10,send_flow_rem,actions=mod_dl_dst:00:11:22:33:44:55,output:2",
        "priority=9,dl_vlan=10,dl_vlan_pcp=3,dl_src=00:00:00:00:00:01/ff:ff:ff:00:00:00,actions=strip_vlan,mod_vlan_vid:20,flood",
        "priority=8,arp,arp_op=2,arp_spa=10.0.0.1,arp_sha=00:00:00:00:00:02,actions=controller:64,goto_table:3",
        "table=3,priority=7,ipv6,ipv6_src=2001:db8::/32,actions=write_actions(output:4),clear_actions",
        "priority=6,udp,nw_dst=10.0.0.0/255.0.0.255,tp_src=0x100/0xff00,nw_tos=184,actions=set_field:53->udp_dst,mod_nw_tos:8,in_port",
        "priority=5,icmp,icmp_type=8,vlan_tci=0x0000,actions=drop",
        "priority=4,dl_type=0x88cc,hard_timeout=7,actions=all,normal,push_vlan:0x8100",
    ];
    flows(&pl, &set);
    let first = pl.dump_flows("br0", None).unwrap();
    let text = pl.dump_flows_text("br0", None).unwrap();
    pl.del_flows("br0", None, false).unwrap();
    for line in &text {
        pl.add_flow("br0", line)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    let second = pl.dump_flows("br0", None).unwrap();
    assert_eq!(first.len(), set.len());
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(
            (a.table_id, a.priority, a.match_, &a.instructions),
            (b.table_id, b.priority, b.match_, &b.instructions)
        );
        assert_eq!(
            (a.cookie, a.flags, a.idle_timeout, a.hard_timeout),
            (b.cookie, b.flags, b.idle_timeout, b.hard_timeout)
        );
    }
}

#[test]
fn dump_filter_is_non_strict() {
    let pl = pipeline();
    flows(
        &pl,
        &[
            "priority=5,tcp,tp_dst=80,actions=drop",
            "priority=5,udp,actions=drop",
            "table=2,priority=5,tcp,actions=drop",
        ],
    );
    assert_eq!(pl.dump_flows("br0", Some("tcp")).unwrap().len(), 2);
    assert_eq!(pl.dump_flows("br0", Some("table=2")).unwrap().len(), 1);
}

#[test]
fn parse_errors_name_the_token() {
    let pl = pipeline();
    for (flow, tok) in [
        ("tcp,tp_dst=abc,actions=drop", "tp_dst=abc"),
        ("in_port=nosuch,actions=drop", "in_port=nosuch"),
        ("frob=1,actions=drop", "frob=1"),
        ("bogus,actions=drop", "bogus"),
        ("actions=frobnicate", "frobnicate"),
        ("actions=output:p9", "output:p9"),
        ("dl_src=00:11,actions=drop", "dl_src=00:11"),
        ("ip,nw_src=10.0.0.0/33,actions=drop", "nw_src=10.0.0.0/33"),
        ("dl_vlan=5000,actions=drop", "dl_vlan=5000"),
        ("priority=70000,actions=drop", "priority=70000"),
        ("actions=mod_tp_dst:80", "mod_tp_dst:80"),
        ("cookie=1/1,actions=drop", "cookie=1/1"),
    ] {
        match pl.add_flow("br0", flow) {
            Err(Error::Parse(e)) => assert_eq!(e.token, tok, "{flow}: {e}"),
            other => panic!("{flow}: expected parse error, got {other:?}"),
        }
    }
    let e = pl
        .add_flows("br0", "actions=drop\n# c\n\ntcp,tp_dst=x,actions=drop\n")
        .unwrap_err();
    assert!(e.to_string().contains("line 4"), "{e}");
    assert!(matches!(
        pl.del_flows("br0", Some("actions=drop"), false),
        Err(Error::Parse(_))
    ));
    let fm = ofproto::parse::parse_flow("tcp", FlowModCommand::Add, &|_| None);
    assert!(fm.is_err(), "add needs actions");
}

#[test]
fn bridges_are_independent() {
    let pl = pipeline();
    pl.add_bridge("br1").unwrap();
    pl.add_port(
        "br1",
        ofproto::PortSpec {
            name: "q1".into(),
            dp_port: 21,
            ofport: None,
            tag: None,
            trunks: vec![],
            mac_limit: None,
        },
    )
    .unwrap();
    let q2 = pl
        .add_port(
            "br1",
            ofproto::PortSpec {
                name: "q2".into(),
                dp_port: 22,
                ofport: None,
                tag: None,
                trunks: vec![],
                mac_limit: None,
            },
        )
        .unwrap();
    assert_eq!(q2, 2, "lowest free OpenFlow number");
    let mut k = eth(1, MAC_A, BCAST, 0x0800);
    k.set(Field::InPort, 21);
    assert_eq!(
        xlate(&pl, &k).actions,
        vec![Action::Output(22)],
        "floods only within br1"
    );
    assert_eq!(pl.bridges(), vec!["br0".to_string(), "br1".to_string()]);
    pl.del_bridge("br1").unwrap();
    assert!(
        xlate(&pl, &k).actions.is_empty(),
        "unknown datapath port: drop"
    );
}

#[test]
fn credit_counts_megaflow_traffic_without_learning() {
    let pl = pipeline();
    flows(&pl, &["priority=5,idle_timeout=5,actions=normal"]);
    let t0 = Instant::now();
    let g = pl.generation();
    let k = eth(1, MAC_A, MAC_B, 0x0800);
    assert_eq!(pl.credit(&k, 10, 1000, t0 + Duration::from_secs(4)), 1);
    assert_eq!(pl.generation(), g, "no learning, no bump");
    assert!(pl.mac_entries("br0").unwrap().is_empty());
    let f = &pl.dump_flows("br0", None).unwrap()[0];
    assert_eq!((f.packet_count, f.byte_count), (10, 1000));
    assert!(
        pl.expire(t0 + Duration::from_secs(8)).is_empty(),
        "credited traffic keeps it alive"
    );
    assert_eq!(pl.expire(t0 + Duration::from_secs(10)).len(), 1);
}

/// OpenFlow 1.0's table miss (on while a 1.0 controller is connected): a miss of the
/// top-level walk is a no_match packet-in, then a drop; a miss inside a resubmit still just
/// returns; turning it off drops misses again (1.3).
#[test]
fn openflow_1_0_table_miss_sends_a_no_match_packet_in() {
    use ofproto::PacketInReason;
    let pl = pipeline();
    pl.del_flows("br0", None, false).unwrap();
    pl.add_flow(
        "br0",
        "table=0,priority=5,in_port=2,actions=resubmit(,3),output:1",
    )
    .unwrap();
    let k = base();
    assert!(xlate(&pl, &k).actions.is_empty(), "1.3: a miss drops");
    assert!(pl.set_miss_to_controller("br0", true).unwrap());
    assert!(
        !pl.set_miss_to_controller("br0", true).unwrap(),
        "no change"
    );
    let t = xlate(&pl, &k);
    let [Action::Userspace(c)] = t.actions[..] else {
        panic!("{t:?}")
    };
    let (_, reason, table, _) = ofproto::xlate::decode_cookie(c);
    assert_eq!((reason, table), (PacketInReason::NoMatch, 0));
    // The resubmit into empty table 3 comes back; output:1 follows; no packet-in.
    let from2 = with(k, Field::InPort, u64::from(dp(2)));
    assert_eq!(xlate(&pl, &from2).actions, vec![o(1)]);
    assert!(pl.set_miss_to_controller("br0", false).unwrap());
    assert!(xlate(&pl, &k).actions.is_empty());
}
