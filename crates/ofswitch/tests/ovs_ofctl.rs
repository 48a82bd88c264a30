//! `ovs-ofctl -O OpenFlow13` (Debian openvswitch-common) against a `BridgeOf` over a real
//! `ofproto::Pipeline`: every command's output is checked, and so are the pipeline's rules,
//! groups and translations afterwards. Skipped (with a message) when ovs-ofctl is missing.

mod common;

use std::process::Command;
use std::sync::atomic::Ordering;

use common::*;
use dpif::Action;

use testkit::{have_ofctl, Out};

/// Runs `ovs-ofctl -O OpenFlow13 CMD unix:SOCK ARGS...`.
fn ofctl(h: &Harness, cmd: &str, args: &[&str]) -> Out {
    ofctl_opts(h, &[], cmd, args)
}

fn ofctl_opts(h: &Harness, opts: &[&str], cmd: &str, args: &[&str]) -> Out {
    testkit::ofctl(&h.sock, opts, cmd, args)
}

fn must(h: &Harness, cmd: &str, args: &[&str]) -> String {
    testkit::ofctl_must(&h.sock, cmd, args)
}

fn flow_lines(h: &Harness) -> Vec<String> {
    must(h, "dump-flows", &[])
        .lines()
        .filter(|l| l.contains("cookie="))
        .map(str::to_string)
        .collect()
}

fn pipeline_flows(h: &Harness) -> Vec<String> {
    h.pl.dump_flows_text("br0", None).unwrap()
}

#[test]
fn show_and_dump_ports_desc() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    h.hooks.down.lock().unwrap().push(4);
    let out = must(&h, "show", &[]);
    assert!(out.contains("OFPT_FEATURES_REPLY (OF1.3)"), "{out}");
    let dpid = format!("dpid:{:016x}", h.br.datapath_id());
    assert!(out.contains(&dpid), "{out}");
    assert!(out.contains(" 1(p1): addr:02:00:00:00:00:01"), "{out}");
    assert!(out.contains(" 3(p3): addr:02:00:00:00:00:03"), "{out}");
    assert!(out.contains("miss_send_len=128"), "{out}");
    let out = must(&h, "dump-ports-desc", &[]);
    assert!(out.contains("OFPST_PORT_DESC reply (OF1.3)"), "{out}");
    let p4 = out.split(" 4(p4)").nth(1).expect("p4 listed");
    assert!(p4.contains("LINK_DOWN"), "{out}");
    assert!(out.contains("state:      LIVE"), "{out}");
    let desc = must(&h, "dump-desc", &[]);
    assert!(
        desc.contains("Vireo") && desc.contains("DP Description: br0"),
        "{desc}"
    );
    let tables = must(&h, "dump-tables", &[]);
    assert!(
        tables.contains("table 0:") && tables.contains("active=1"),
        "{tables}"
    );
}

#[test]
fn add_flow_changes_the_pipeline_and_translation() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    // Default rule: NORMAL floods an unknown destination.
    assert_eq!(outputs(&xlate(&h.pl, 1, &f)), vec![12, 13, 14]);
    let before = h.hooks.revalidations.load(Ordering::SeqCst);
    must(
        &h,
        "add-flow",
        &["priority=100,in_port=1,dl_dst=00:00:00:00:00:0b,actions=mod_vlan_vid:7,output:3"],
    );
    assert!(h.hooks.revalidations.load(Ordering::SeqCst) > before);
    let t = xlate(&h.pl, 1, &f);
    assert_eq!(
        t.actions,
        vec![Action::PushVlan(0x1000 | 7), Action::Output(13)]
    );
    let pf = pipeline_flows(&h);
    assert!(
        pf.iter()
            .any(|l| l.contains("priority=100,in_port=p1,dl_dst=00:00:00:00:00:0b")),
        "{pf:?}"
    );
    let lines = flow_lines(&h);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("priority=100,in_port=1,dl_dst=00:00:00:00:00:0b")
            && lines[0].contains("actions=push_vlan:0x8100,set_field:4103->vlan_vid,output:3")
            && lines[0].contains("n_packets=1"),
        "{lines:?}"
    );
    assert!(lines[1].contains("priority=0 actions=NORMAL"), "{lines:?}");
    let agg = must(&h, "dump-aggregate", &[]);
    assert!(agg.contains("flow_count=2"), "{agg}");
    assert!(agg.contains("packet_count=2"), "{agg}");
}

const FLOWS: &str = "\
cookie=0x10,priority=10,in_port=1,actions=output:2
cookie=0x11,priority=20,arp,arp_tpa=192.168.0.1,arp_op=1,actions=output:1
cookie=0x21,priority=40,dl_vlan=10,dl_vlan_pcp=3,actions=pop_vlan,output:2
cookie=0x30,priority=50,udp,tp_src=53,ip_dscp=46,actions=set_field:10.0.0.1->ip_dst,output:1
cookie=0x32,table=1,priority=70,icmp,icmp_type=8,icmp_code=0,actions=push_vlan:0x8100,set_field:4196->vlan_vid,output:2
cookie=0x33,priority=80,tcp6,ipv6_dst=2001:db8::1,tp_src=1000,actions=clear_actions,write_actions(output:1),goto_table:1
";

#[test]
fn add_flows_mod_flows_del_flows_with_cookie_masks() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(&h, "del-flows", &[]);
    assert!(pipeline_flows(&h).is_empty());
    let file = h.dir.path().join("flows.txt");
    std::fs::write(&file, FLOWS).unwrap();
    must(&h, "add-flows", &[file.to_str().unwrap()]);
    let pf = pipeline_flows(&h);
    assert_eq!(pf.len(), 6, "{pf:?}");
    let lines = flow_lines(&h);
    assert_eq!(lines.len(), 6, "{lines:?}");
    for want in [
        "priority=20,arp,arp_tpa=192.168.0.1,arp_op=1 actions=output:1",
        "priority=40,dl_vlan=10,dl_vlan_pcp=3 actions=pop_vlan,output:2",
        "priority=50,udp,nw_tos=184,tp_src=53 actions=set_field:10.0.0.1->ip_dst,output:1",
        "table=1, n_packets=0, n_bytes=0, priority=70,icmp,icmp_type=8,icmp_code=0",
        "priority=80,tcp6,ipv6_dst=2001:db8::1,tp_src=1000 actions=clear_actions,write_actions(output:1),goto_table:1",
    ] {
        assert!(lines.iter().any(|l| l.contains(want)), "{want} not in {lines:?}");
    }
    // mod-flows with a cookie mask: only cookies 0x30..0x3f change.
    must(&h, "mod-flows", &["cookie=0x30/0xf0,actions=output:4"]);
    let modded: Vec<u64> =
        h.pl.dump_flows("br0", None)
            .unwrap()
            .iter()
            .filter(|f| ofproto::format::format_instructions(&f.instructions) == "output:4")
            .map(|f| f.cookie)
            .collect();
    assert!(
        !modded.is_empty() && modded.iter().all(|c| c & 0xf0 == 0x30),
        "{modded:?}"
    );
    // del-flows with a cookie mask removes 0x10 and 0x11 only.
    must(&h, "del-flows", &["cookie=0x10/0xf0"]);
    let mut cookies: Vec<u64> =
        h.pl.dump_flows("br0", None)
            .unwrap()
            .iter()
            .map(|f| f.cookie)
            .collect();
    cookies.sort();
    assert_eq!(cookies, vec![0x21, 0x30, 0x32, 0x33]);
    // --strict delete needs the exact priority and match.
    let o = ofctl_opts(
        &h,
        &["--strict"],
        "del-flows",
        &["priority=41,dl_vlan=10,dl_vlan_pcp=3"],
    );
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(pipeline_flows(&h).len(), 4);
    let o = ofctl_opts(
        &h,
        &["--strict"],
        "del-flows",
        &["priority=40,dl_vlan=10,dl_vlan_pcp=3"],
    );
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(pipeline_flows(&h).len(), 3);
    // out_port filter.
    must(&h, "del-flows", &["out_port=2"]);
    let left = pipeline_flows(&h);
    assert!(left.iter().all(|l| !l.contains("output:2")), "{left:?}");
}

#[test]
fn bad_flows_get_openflow_errors() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    // (metadata and dec_ttl are supported since the Nicira work: tests/nx.rs.)
    // (tun_id is supported since flow-based tunnels: tests/nx.rs.)
    let o = ofctl(&h, "add-flow", &["mpls,mpls_label=5,actions=output:1"]);
    assert!(
        !o.ok && o.stderr.contains("OFPBMC_BAD_FIELD"),
        "{}",
        o.stderr
    );
    let o = ofctl(&h, "add-flow", &["ip,actions=mod_nw_ttl:9,output:1"]);
    assert!(
        !o.ok && o.stderr.contains("OFPBAC_BAD_TYPE"),
        "{}",
        o.stderr
    );
    let o = ofctl(&h, "add-flow", &["actions=group:9"]);
    assert!(
        !o.ok && o.stderr.contains("OFPBAC_BAD_OUT_GROUP"),
        "{}",
        o.stderr
    );
    let o = ofctl(&h, "add-flow", &["table=3,actions=goto_table:2"]);
    assert!(
        !o.ok && o.stderr.contains("OFPBIC_BAD_TABLE_ID"),
        "{}",
        o.stderr
    );
    let o = ofctl(&h, "add-flow", &["actions=write_metadata:1"]);
    assert!(
        !o.ok && o.stderr.contains("OFPBIC_UNSUP_INST"),
        "{}",
        o.stderr
    );
    let o = ofctl(
        &h,
        "add-flow",
        &["priority=5,check_overlap,actions=output:1"],
    );
    assert!(o.ok, "{}", o.stderr);
    let o = ofctl(
        &h,
        "add-flow",
        &["priority=5,in_port=2,check_overlap,actions=output:1"],
    );
    assert!(
        !o.ok && o.stderr.contains("OFPFMFC_OVERLAP"),
        "{}",
        o.stderr
    );
    assert_eq!(pipeline_flows(&h).len(), 2, "only the good rule was added");
}

#[test]
fn dump_ports_reports_hook_counters() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let out = must(&h, "dump-ports", &[]);
    assert!(
        out.contains("OFPST_PORT reply (OF1.3)") && out.contains(": 4 ports"),
        "{out}"
    );
    assert!(
        out.contains("port  2: rx pkts=200, bytes=12800, drop=2"),
        "{out}"
    );
    assert!(out.contains("tx pkts=400, bytes=25600"), "{out}");
    let one = must(&h, "dump-ports", &["3"]);
    assert!(one.contains("1 ports") && one.contains("port  3:"), "{one}");
}

#[test]
fn packet_out_reaches_the_datapath() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let f = frame(MAC_A, MAC_B, 0x0806, &[0; 28]);
    let hex = to_hex(&f);
    must(
        &h,
        "packet-out",
        &[&format!("in_port=1 packet={hex} actions=output:2")],
    );
    let sent = h.hooks.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].in_port, Some(11));
    assert_eq!(sent[0].actions, vec![Action::Output(12)]);
    assert_eq!(sent[0].frame, f);
    must(
        &h,
        "packet-out",
        &[&format!("in_port=1 packet={hex} actions=flood")],
    );
    assert_eq!(
        h.hooks.take_sent()[0].actions,
        vec![Action::Output(12), Action::Output(13), Action::Output(14)]
    );
    must(
        &h,
        "packet-out",
        &[&format!("in_port=controller packet={hex} actions=all")],
    );
    let s = h.hooks.take_sent();
    assert_eq!(s[0].in_port, None);
    assert_eq!(s[0].actions.len(), 4);
    must(
        &h,
        "packet-out",
        &[&format!("in_port=2 packet={hex} actions=in_port")],
    );
    assert_eq!(h.hooks.take_sent()[0].actions, vec![Action::Output(12)]);
    // output:TABLE runs the flow tables (here: a rule sending p3's traffic to p4).
    must(&h, "add-flow", &["priority=9,in_port=3,actions=output:4"]);
    must(
        &h,
        "packet-out",
        &[&format!("in_port=3 packet={hex} actions=table")],
    );
    assert_eq!(h.hooks.take_sent()[0].actions, vec![Action::Output(14)]);
    let lines = flow_lines(&h);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("n_packets=1") && l.contains("in_port=3")),
        "{lines:?}"
    );
    // NORMAL learned MAC_A on p1 from the first table walk? No: learn from NORMAL packet-out.
    must(
        &h,
        "packet-out",
        &[&format!("in_port=1 packet={hex} actions=normal")],
    );
    assert_eq!(
        h.hooks.take_sent()[0].actions,
        vec![Action::Output(12), Action::Output(13), Action::Output(14)]
    );
    let back = frame(MAC_B, MAC_A, 0x0806, &[0; 28]);
    assert_eq!(
        outputs(&xlate(&h.pl, 2, &back)),
        vec![11],
        "NORMAL learned A on p1"
    );
}

#[test]
fn groups_of_all_four_types() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    must(
        &h,
        "add-group",
        &["group_id=1,type=all,bucket=output:2,bucket=mod_dl_dst:00:00:00:00:00:0c,output:3"],
    );
    must(
        &h,
        "add-group",
        &["group_id=2,type=select,bucket=weight:10,output:2,bucket=weight:20,output:4"],
    );
    must(
        &h,
        "add-group",
        &["group_id=3,type=indirect,bucket=output:4"],
    );
    must(&h, "add-group", &["group_id=4,type=fast_failover,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3"]);
    let out = must(&h, "dump-groups", &[]);
    assert!(out.contains("group_id=1,type=all,bucket=actions=output:2,bucket=actions=set_field:00:00:00:00:00:0c->eth_dst,output:3"), "{out}");
    assert!(out.contains("group_id=2,type=select,bucket=weight:10,actions=output:2,bucket=weight:20,actions=output:4"), "{out}");
    assert!(
        out.contains("group_id=3,type=indirect,bucket=actions=output:4"),
        "{out}"
    );
    assert!(out.contains("group_id=4,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3"), "{out}");
    let o = ofctl(&h, "add-group", &["group_id=1,type=all,bucket=output:1"]);
    assert!(
        !o.ok && o.stderr.contains("OFPGMFC_GROUP_EXISTS"),
        "{}",
        o.stderr
    );
    let o = ofctl(&h, "add-group", &["group_id=7,type=all,bucket=group:99"]);
    assert!(
        !o.ok && o.stderr.contains("OFPGMFC_UNKNOWN_GROUP"),
        "{}",
        o.stderr
    );

    let f = frame(MAC_A, MAC_B, 0x0800, &[0x45]);
    // all: both buckets, the second one's rewrite undone for nothing after it.
    must(&h, "add-flow", &["in_port=1,actions=group:1,output:4"]);
    let t = xlate(&h.pl, 1, &f);
    assert_eq!(
        t.actions,
        vec![
            Action::Output(12),
            Action::SetEthDst(MAC_C),
            Action::Output(13),
            Action::SetEthDst(MAC_B),
            Action::Output(14)
        ]
    );
    // indirect.
    must(&h, "add-flow", &["in_port=2,actions=group:3"]);
    assert_eq!(outputs(&xlate(&h.pl, 2, &f)), vec![14]);
    // fast-failover follows the watch port's liveness.
    must(&h, "add-flow", &["in_port=4,actions=group:4"]);
    assert_eq!(outputs(&xlate(&h.pl, 4, &f)), vec![12]);
    h.br.port_status(
        ofswitch::PortReason::Modify,
        &ofswitch::PortReport {
            link_up: false,
            ..ofswitch::PortReport::new(2, "p2", 12)
        },
    );
    assert_eq!(outputs(&xlate(&h.pl, 4, &f)), vec![13]);
    // select: one bucket, stable per flow; the megaflow mask covers the hashed fields.
    h.pl.set_port_live("br0", 2, true).unwrap();
    must(&h, "add-flow", &["in_port=3,actions=group:2"]);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..64u8 {
        let g = frame([0, 0, 0, 0, 1, i], MAC_B, 0x0800, &[0x45]);
        let t = xlate(&h.pl, 3, &g);
        let o = outputs(&t);
        assert_eq!(o.len(), 1);
        assert_eq!(outputs(&xlate(&h.pl, 3, &g)), o, "stable");
        assert_eq!(t.mask.get(wire::Field::EthSrc), 0xffff_ffff_ffff);
        seen.insert(o[0]);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![12, 14]);
    let stats = must(&h, "dump-group-stats", &[]);
    assert!(
        stats.contains("group_id=2") && stats.contains("ref_count=1"),
        "{stats}"
    );
    // Deleting a group deletes the rules that use it.
    must(&h, "del-groups", &["group_id=3"]);
    assert!(!must(&h, "dump-groups", &[]).contains("group_id=3,"));
    let pf = pipeline_flows(&h);
    assert!(!pf.iter().any(|l| l.contains("group:3")), "{pf:?}");
    assert!(pf.iter().any(|l| l.contains("group:1")), "{pf:?}");
}

#[test]
fn table_features_and_monitor_packet_ins() {
    if !have_ofctl() {
        return;
    }
    let h = start();
    let tf = must(&h, "dump-table-features", &[]);
    assert!(
        tf.contains("table 0") && tf.contains("table 254"),
        "{}",
        &tf[..tf.len().min(2000)]
    );
    // OVS's decoder names the Nicira match fields Vireo lists, as it names its own
    // (registers, xregs, xxregs, conntrack and tunnel fields maskable; ct_zone and ct_nw_proto
    // exact); the tunnel fields (flow-based tunnels) are matched and set.
    let t0 = &tf[..tf.find("\n  table").unwrap_or(tf.len())];
    let line = |what: &str| {
        t0.lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what}: {t0}"))
            .to_string()
    };
    let masked = line("arbitrary mask:");
    for want in [
        "reg0...reg15",
        "xreg0...xreg7",
        "xxreg0...xxreg3",
        "ct_{state,mark,label,nw_{src,dst},ipv6_{src,dst},tp_{src,dst}}",
        "metadata",
        "tun_{id,src,dst,ipv6_{src,dst}}",
    ] {
        assert!(masked.contains(want), "{want}: {masked}");
    }
    let exact = line("exact match or wildcard:");
    assert!(exact.contains("ct_{zone,nw_proto}"), "{exact}");
    // Every field may be left out of a rule (WILDCARDS lists them all).
    assert!(!t0.contains("must exact match"), "{t0}");
    let set = line("supported on Set-Field:");
    assert!(
        set.contains("reg0...reg15")
            && set.contains("xreg0...xreg7")
            && set.contains("tun_{id,src,dst,ipv6_{src,dst}}"),
        "{set}"
    );
    // `ovs-ofctl monitor` asks for async messages with SET_CONFIG (miss_send_len).
    must(&h, "add-flow", &["priority=0,actions=CONTROLLER:65535"]);
    let target = format!("unix:{}", h.sock.display());
    let log = h.dir.path().join("monitor.log");
    let f = std::fs::File::create(&log).unwrap();
    let unixctl = format!("--unixctl={}", h.dir.path().join("ofctl.ctl").display());
    let mut mon = Command::new("timeout")
        .args(["20", "ovs-ofctl", "-O", "OpenFlow13", &unixctl])
        .args(["monitor", &target, "65534"])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let arp = frame(MAC_A, BCAST, 0x0806, &[0; 28]);
    let got = wait_for(std::time::Duration::from_secs(10), || {
        inject(&h, 2, &arp);
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("OFPT_PACKET_IN"))
    });
    let _ = mon.kill();
    let _ = mon.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(got, "{text}");
    assert!(
        text.contains("in_port=2 (via no_match)") && text.contains("(unbuffered)"),
        "{text}"
    );
}
