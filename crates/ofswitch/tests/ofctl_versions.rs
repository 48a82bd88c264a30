//! Plain `ovs-ofctl` (no `-O`: OpenFlow 1.0, as every OVS how-to types it), `-O OpenFlow14`
//! and `-O OpenFlow15` against a `BridgeOf` over a real `ofproto::Pipeline`: show,
//! add-flow, add-flows, dump-flows, mod-flows, del-flows, dump-ports, dump-tables and
//! packet-out, each checked in ovs-ofctl's output and in the pipeline (rules, translations,
//! packet-outs reaching the datapath). Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.

mod common;

use common::*;
use dpif::Action;
use testkit::{have_ofctl, Out};

/// The versions under test: `-O` argument (None = ovs-ofctl's default, 1.0) and the tag
/// ovs-ofctl prints after message names.
const VERSIONS: [(Option<&str>, &str); 3] = [
    (None, ""),
    (Some("OpenFlow14"), " (OF1.4)"),
    (Some("OpenFlow15"), " (OF1.5)"),
];

fn run(h: &Harness, v: Option<&str>, cmd: &str, args: &[&str]) -> Out {
    testkit::ofctl_version(&h.sock, v, &[], cmd, args)
}

fn must(h: &Harness, v: Option<&str>, cmd: &str, args: &[&str]) -> String {
    let o = run(h, v, cmd, args);
    assert!(o.ok, "ovs-ofctl {v:?} {cmd} {args:?} failed: {}", o.stderr);
    assert!(!o.stderr.contains("WARN"), "{v:?} {cmd}: {}", o.stderr);
    o.stdout
}

fn flow_lines(h: &Harness, v: Option<&str>) -> Vec<String> {
    must(h, v, "dump-flows", &[])
        .lines()
        .filter(|l| l.contains("cookie="))
        .map(str::to_string)
        .collect()
}

fn has(lines: &[String], parts: &[&str]) -> bool {
    lines.iter().any(|l| parts.iter().all(|p| l.contains(p)))
}

const FLOWS: &str = "\
cookie=0x10,priority=10,in_port=2,actions=output:1
cookie=0x11,priority=20,arp,arp_tpa=192.168.0.1,arp_op=1,actions=output:1
cookie=0x12,priority=30,tcp,nw_src=10.0.0.0/8,tp_dst=80,actions=mod_tp_dst:8080,output:2
cookie=0x13,priority=40,dl_vlan=10,dl_vlan_pcp=3,actions=strip_vlan,output:2
cookie=0x14,priority=50,udp,nw_tos=184,tp_src=53,actions=mod_nw_dst:10.0.0.1,output:1
";

#[test]
fn every_command_in_every_version() {
    if !have_ofctl() {
        return;
    }
    for (v, tag) in VERSIONS {
        let h = start();
        let ctx = format!("{v:?}");

        // show: FEATURES_REPLY (1.0 with its port list; 1.4/1.5 ask PORT_DESC) + config.
        let out = must(&h, v, "show", &[]);
        assert!(
            out.contains(&format!("OFPT_FEATURES_REPLY{tag} (xid=")),
            "{ctx}: {out}"
        );
        let dpid = format!("dpid:{:016x}", h.br.datapath_id());
        assert!(out.contains(&dpid), "{ctx}: {out}");
        for n in 1..=4 {
            let p = format!(" {n}(p{n}): addr:02:00:00:00:00:0{n}");
            assert!(out.contains(&p), "{ctx}: {out}");
        }
        assert!(out.contains("miss_send_len=128"), "{ctx}: {out}");

        // add-flow: the pipeline translates with it.
        let fb = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
        must(
            &h,
            v,
            "add-flow",
            &["priority=100,in_port=1,dl_dst=00:00:00:00:00:0b,actions=mod_vlan_vid:7,output:3"],
        );
        let t = xlate(&h.pl, 1, &fb);
        assert_eq!(
            t.actions,
            vec![Action::PushVlan(0x1000 | 7), Action::Output(13)],
            "{ctx}"
        );

        // add-flows from a file.
        let file = h.dir.path().join("flows.txt");
        std::fs::write(&file, FLOWS).unwrap();
        must(&h, v, "add-flows", &[file.to_str().unwrap()]);
        let pf = h.pl.dump_flows_text("br0", None).unwrap();
        assert_eq!(pf.len(), 7, "{ctx}: {pf:?}");
        assert_eq!(outputs(&xlate(&h.pl, 2, &fb)), vec![11], "{ctx}");

        // dump-flows in the version's own syntax, with counters.
        let lines = flow_lines(&h, v);
        assert_eq!(lines.len(), 7, "{ctx}: {lines:?}");
        let vlan_actions = if v.is_none() {
            "actions=mod_vlan_vid:7,output:3"
        } else {
            "actions=push_vlan:0x8100,set_field:4103->vlan_vid,output:3"
        };
        assert!(
            has(
                &lines,
                &[
                    "priority=100,in_port=1,dl_dst=00:00:00:00:00:0b",
                    vlan_actions,
                    "n_packets=1"
                ]
            ),
            "{ctx}: {lines:?}"
        );
        let tp_action = if v.is_none() {
            "actions=mod_tp_dst:8080,output:2"
        } else {
            "actions=set_field:8080->tcp_dst,output:2"
        };
        assert!(
            has(
                &lines,
                &[
                    "cookie=0x12",
                    "priority=30,tcp,nw_src=10.0.0.0/8,tp_dst=80",
                    tp_action
                ]
            ),
            "{ctx}: {lines:?}"
        );
        assert!(
            has(&lines, &["cookie=0x11", "arp,arp_tpa=192.168.0.1,arp_op=1"]),
            "{ctx}: {lines:?}"
        );
        assert!(
            has(
                &lines,
                &[
                    "cookie=0x13",
                    "dl_vlan=10,dl_vlan_pcp=3",
                    "actions=strip_vlan"
                ]
            ) || has(
                &lines,
                &[
                    "cookie=0x13",
                    "dl_vlan=10,dl_vlan_pcp=3",
                    "actions=pop_vlan"
                ]
            ),
            "{ctx}: {lines:?}"
        );
        assert!(
            has(&lines, &["cookie=0x14", "udp,nw_tos=184,tp_src=53"]),
            "{ctx}: {lines:?}"
        );

        // mod-flows rewrites the actions; the next translation follows.
        must(
            &h,
            v,
            "mod-flows",
            &["in_port=1,dl_dst=00:00:00:00:00:0b,actions=output:4"],
        );
        assert_eq!(outputs(&xlate(&h.pl, 1, &fb)), vec![14], "{ctx}");
        assert!(
            has(
                &flow_lines(&h, v),
                &["priority=100,in_port=1", "actions=output:4"]
            ),
            "{ctx}"
        );

        // del-flows with a match removes only what matches.
        must(&h, v, "del-flows", &["in_port=1"]);
        let pf = h.pl.dump_flows_text("br0", None).unwrap();
        assert_eq!(pf.len(), 6, "{ctx}: {pf:?}");
        assert!(
            !pf.iter().any(|l| l.contains("priority=100")),
            "{ctx}: {pf:?}"
        );

        // dump-ports: the datapath's counters.
        let out = must(&h, v, "dump-ports", &[]);
        assert!(
            out.contains(&format!("OFPST_PORT reply{tag}")),
            "{ctx}: {out}"
        );
        assert!(out.contains("4 ports"), "{ctx}: {out}");
        assert!(
            out.contains("port  3: rx pkts=300, bytes=19200, drop=3"),
            "{ctx}: {out}"
        );
        assert!(out.contains("tx pkts=800, bytes=51200"), "{ctx}: {out}");

        // dump-tables: table 0 holds the 6 rules left.
        let out = must(&h, v, "dump-tables", &[]);
        assert!(
            out.contains(&format!("OFPST_TABLE reply{tag}")),
            "{ctx}: {out}"
        );
        let t0 = out.split("table 0").nth(1).expect("table 0 listed");
        assert!(t0.contains("active=6"), "{ctx}: {out}");

        // packet-out reaches the datapath with the translated actions.
        h.hooks.take_sent();
        let hex = to_hex(&frame(MAC_C, MAC_A, 0x0800, &[0x45; 46]));
        must(
            &h,
            v,
            "packet-out",
            &[&format!("in_port=3,packet={hex},actions=output:2")],
        );
        let sent = h.hooks.take_sent();
        assert_eq!(sent.len(), 1, "{ctx}: {sent:?}");
        assert_eq!(sent[0].in_port, Some(13), "{ctx}");
        assert_eq!(sent[0].actions, vec![Action::Output(12)], "{ctx}");
        assert_eq!(to_hex(&sent[0].frame), hex, "{ctx}");

        // del-flows without a match empties the table.
        must(&h, v, "del-flows", &[]);
        assert!(
            h.pl.dump_flows_text("br0", None).unwrap().is_empty(),
            "{ctx}"
        );
        assert!(flow_lines(&h, v).is_empty(), "{ctx}");
    }
}

/// A bridge limited to 1.3 refuses ovs-ofctl's default 1.0 the way OVS does, and serves
/// `-O OpenFlow13`; allowing 1.0 again lets plain ovs-ofctl in.
#[test]
fn protocols_setting_is_what_negotiation_allows() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    h.br.set_protocols(ofswitch::Protocols::parse("OpenFlow13").unwrap());
    let o = run(&h, None, "dump-flows", &[]);
    assert!(!o.ok, "{}", o.stdout);
    assert!(
        o.stderr.contains("version negotiation failed"),
        "{}",
        o.stderr
    );
    let o = run(&h, Some("OpenFlow15"), "dump-flows", &[]);
    assert!(
        !o.ok && o.stderr.contains("version negotiation failed"),
        "{}",
        o.stderr
    );
    let out = must(&h, Some("OpenFlow13"), "dump-flows", &[]);
    assert!(out.contains("priority=0 actions=NORMAL"), "{out}");
    h.br.set_protocols(ofswitch::Protocols::ALL);
    let out = must(&h, None, "dump-flows", &[]);
    // ovs-ofctl asks for the NXM flow format first and dumps with NXST_FLOW, as from OVS.
    assert!(out.contains("NXST_FLOW reply (xid="), "{out}");
    // A client allowing several versions gets the highest common one.
    let out = must(&h, Some("OpenFlow10,OpenFlow13,OpenFlow14"), "show", &[]);
    assert!(out.contains("OFPT_FEATURES_REPLY (OF1.4)"), "{out}");
}

/// Groups in 1.4 (1.3 layout) and 1.5 (bucket ids, properties): add-group, dump-groups,
/// a rule through the group, dump-group-stats, del-groups. Plain ovs-ofctl (1.0) has no
/// groups without Nicira extensions: the bridge answers OFPBRC_BAD_VENDOR.
#[test]
fn groups_in_1_4_and_1_5() {
    if !have_ofctl() {
        return;
    }
    for v in [Some("OpenFlow14"), Some("OpenFlow15")] {
        let h = start();
        let ctx = format!("{v:?}");
        must(
            &h,
            v,
            "add-group",
            &["group_id=2,type=select,bucket=weight:10,output:2,bucket=weight:20,output:4"],
        );
        must(
            &h,
            v,
            "add-group",
            &["group_id=4,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3"],
        );
        let out = must(&h, v, "dump-groups", &[]);
        assert!(
            out.contains("group_id=2,type=select")
                && out.contains("weight:10,actions=output:2")
                && out.contains("weight:20,actions=output:4"),
            "{ctx}: {out}"
        );
        assert!(
            out.contains("group_id=4,type=ff")
                && out.contains("watch_port:2,actions=output:2")
                && out.contains("watch_port:3,actions=output:3"),
            "{ctx}: {out}"
        );
        must(&h, v, "add-flow", &["in_port=1,actions=group:4"]);
        let f = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
        assert_eq!(
            outputs(&xlate(&h.pl, 1, &f)),
            vec![12],
            "{ctx}: watch port 2 is live"
        );
        let stats = must(&h, v, "dump-group-stats", &[]);
        assert!(
            stats.contains("group_id=4") && stats.contains("ref_count=1"),
            "{ctx}: {stats}"
        );
        must(&h, v, "del-groups", &["group_id=4"]);
        let out = must(&h, v, "dump-groups", &[]);
        assert!(!out.contains("group_id=4"), "{ctx}: {out}");
        let pf = h.pl.dump_flows_text("br0", None).unwrap();
        assert!(!pf.iter().any(|l| l.contains("group:4")), "{ctx}: {pf:?}");
    }
    let h = start();
    let o = run(
        &h,
        None,
        "add-group",
        &["group_id=1,type=all,bucket=output:1"],
    );
    assert!(
        !o.ok && o.stderr.contains("OFPBRC_BAD_VENDOR"),
        "{}",
        o.stderr
    );
}

/// `table=N` from plain ovs-ofctl: it turns on Nicira's NXT_FLOW_MOD_TABLE_ID and puts the
/// table in the 1.0 FLOW_MOD's command; the rule lands in that table.
#[test]
fn table_ids_in_a_1_0_session() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(
        &h,
        None,
        "add-flow",
        &["table=3,priority=5,in_port=2,actions=output:1"],
    );
    let pf = h.pl.dump_flows_text("br0", Some("table=3")).unwrap();
    assert_eq!(pf.len(), 1, "{pf:?}");
    assert!(pf[0].contains("priority=5,in_port=p2"), "{pf:?}");
    let out = must(&h, None, "dump-flows", &["table=3"]);
    assert!(
        out.contains("table=3, n_packets=0")
            && out.contains("priority=5,in_port=2 actions=output:1"),
        "{out}"
    );
    // Rules without table= still go to table 0; del-flows table=3 leaves table 0 alone.
    must(
        &h,
        None,
        "add-flow",
        &["priority=6,in_port=2,actions=output:3"],
    );
    must(&h, None, "del-flows", &["table=3"]);
    assert!(h
        .pl
        .dump_flows_text("br0", Some("table=3"))
        .unwrap()
        .is_empty());
    let t0 = h.pl.dump_flows_text("br0", Some("table=0")).unwrap();
    assert_eq!(t0.len(), 2, "{t0:?}");
}
