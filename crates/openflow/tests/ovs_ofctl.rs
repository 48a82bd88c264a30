//! Interop tests with the real OpenFlow client, `ovs-ofctl -O OpenFlow13`, against the
//! in-test switch of `common` over a unix socket. Each command's exit status and output are
//! checked, and so are the messages the switch decoded. Skipped (with a message) when
//! ovs-ofctl is not installed.

mod common;

use std::net::Ipv4Addr;
use std::process::Command;

use common::Harness;
use openflow::msg::*;
use openflow::{Action, Instruction, OxmField};

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

fn flow_lines(h: &Harness, args: &[&str]) -> Vec<String> {
    let out = must(h, "dump-flows", args);
    out.lines()
        .filter(|l| l.contains("cookie="))
        .map(str::to_string)
        .collect()
}

#[test]
fn show_and_dump_ports_desc() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let out = must(&h, "show", &[]);
    assert!(out.contains("OFPT_FEATURES_REPLY (OF1.3)"), "{out}");
    assert!(out.contains("dpid:00000000000000ab"), "{out}");
    assert!(out.contains("n_tables:254"), "{out}");
    assert!(out.contains(" 1(vport1): addr:02:00:00:00:00:01"), "{out}");
    assert!(out.contains(" 2(vport2): addr:02:00:00:00:00:02"), "{out}");
    assert!(out.contains("frags=normal miss_send_len=128"), "{out}");
    let out = must(&h, "dump-ports-desc", &[]);
    assert!(out.contains("OFPST_PORT_DESC reply (OF1.3)"), "{out}");
    assert!(
        out.contains("2(vport2)") && out.contains("state:      LIVE"),
        "{out}"
    );
    assert!(out.contains("speed: 10000 Mbps now"), "{out}");
}

#[test]
fn add_flow_decodes_match_and_actions() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    must(
        &h,
        "add-flow",
        &["priority=100,ip,nw_dst=10.0.0.0/24,tcp,tp_dst=80,actions=output:2"],
    );
    let fms = h.sw.flow_mods();
    assert_eq!(fms.len(), 1);
    let fm = &fms[0];
    assert_eq!(fm.command, FlowModCommand::Add);
    assert_eq!(
        (fm.priority, fm.table_id, fm.cookie, fm.flags),
        (100, 0, 0, 0)
    );
    assert_eq!(
        (fm.buffer_id, fm.out_port, fm.out_group),
        (NO_BUFFER, port_no::ANY, GROUP_ANY)
    );
    let mut got = fm.matches.fields.clone();
    got.sort_by_key(|f| f.field_num());
    let want = vec![
        OxmField::EthType(0x0800),
        OxmField::IpProto(6),
        OxmField::Ipv4Dst(
            Ipv4Addr::new(10, 0, 0, 0),
            Some(Ipv4Addr::new(255, 255, 255, 0)),
        ),
        OxmField::TcpDst(80),
    ];
    assert_eq!(got, want);
    assert_eq!(
        fm.instructions,
        vec![Instruction::ApplyActions(vec![Action::Output {
            port: 2,
            max_len: 0
        }])]
    );
    let lines = flow_lines(&h, &[]);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].contains("priority=100,tcp,nw_dst=10.0.0.0/24,tp_dst=80 actions=output:2"),
        "{lines:?}"
    );
    let agg = must(&h, "dump-aggregate", &[]);
    assert!(
        agg.contains("packet_count=3 byte_count=180 flow_count=1"),
        "{agg}"
    );
}

const FLOWS: &str = "\
cookie=0x10,priority=10,in_port=1,actions=output:2
cookie=0x11,priority=20,arp,arp_tpa=192.168.0.1,arp_op=1,actions=output:1
cookie=0x20,priority=30,icmp6,ipv6_src=2001:db8::/32,icmp_type=135,nd_target=fe80::1,actions=group:1
cookie=0x21,priority=40,dl_vlan=10,dl_vlan_pcp=3,actions=pop_vlan,output:2
cookie=0x30,priority=50,udp,tp_src=53,ip_dscp=46,actions=set_field:10.0.0.1->ip_dst,dec_ttl,output:1
cookie=0x31,priority=60,metadata=0x5/0xff,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,actions=write_metadata:0x1/0xff,goto_table:1
cookie=0x32,priority=70,icmp,icmp_type=8,icmp_code=0,actions=push_vlan:0x8100,set_field:4196->vlan_vid,set_queue:3,output:2
cookie=0x33,priority=80,tcp6,ipv6_dst=2001:db8::1,tp_src=1000,nw_ecn=1,actions=clear_actions,write_actions(output:1)
";

#[test]
fn add_flows_mod_flows_del_flows_with_cookie_masks() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let file = h.dir.path().join("flows.txt");
    std::fs::write(&file, FLOWS).unwrap();
    must(&h, "add-flows", &[file.to_str().unwrap()]);
    let fms = h.sw.flow_mods();
    assert_eq!(fms.len(), 8);
    assert!(fms.iter().all(|f| f.command == FlowModCommand::Add));
    let cookies: Vec<u64> = fms.iter().map(|f| f.cookie).collect();
    assert_eq!(
        cookies,
        vec![0x10, 0x11, 0x20, 0x21, 0x30, 0x31, 0x32, 0x33]
    );
    assert!(fms[1]
        .matches
        .fields
        .contains(&OxmField::ArpTpa(Ipv4Addr::new(192, 168, 0, 1), None)));
    assert!(fms[2].matches.fields.contains(&OxmField::Icmpv6Type(135)));
    assert!(fms[3].matches.fields.contains(&OxmField::VlanPcp(3)));
    assert!(fms[3]
        .matches
        .fields
        .contains(&OxmField::VlanVid(0x1000 | 10, None)));
    assert_eq!(
        fms[4].instructions,
        vec![Instruction::ApplyActions(vec![
            Action::SetField(OxmField::Ipv4Dst(Ipv4Addr::new(10, 0, 0, 1), None)),
            Action::DecNwTtl,
            Action::Output {
                port: 1,
                max_len: 0
            },
        ])]
    );
    assert!(fms[5].instructions.contains(&Instruction::GotoTable(1)));
    assert!(fms[5].instructions.contains(&Instruction::WriteMetadata {
        metadata: 1,
        mask: 0xff
    }));
    assert!(fms[6].instructions.iter().any(|i| matches!(i, Instruction::ApplyActions(a) if a.contains(&Action::PushVlan(0x8100)) && a.contains(&Action::SetQueue(3)))));
    assert!(fms[7].instructions.contains(&Instruction::ClearActions));
    assert_eq!(flow_lines(&h, &[]).len(), 8);

    // mod-flows selects by cookie/mask: 0x20 and 0x21.
    must(&h, "mod-flows", &["cookie=0x20/0xf0,actions=output:3"]);
    let m = h.sw.flow_mods().pop().unwrap();
    assert_eq!(
        (m.command, m.cookie, m.cookie_mask),
        (FlowModCommand::Modify, 0x20, 0xf0)
    );
    let changed: Vec<String> = flow_lines(&h, &[])
        .into_iter()
        .filter(|l| l.ends_with("actions=output:3"))
        .collect();
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(changed
        .iter()
        .all(|l| l.contains("cookie=0x20") || l.contains("cookie=0x21")));

    // mod-flows --strict touches exactly one flow.
    must(
        &h,
        "mod-flows",
        &["--strict", "priority=10,in_port=1,actions=output:4"],
    );
    let m = h.sw.flow_mods().pop().unwrap();
    assert_eq!((m.command, m.priority), (FlowModCommand::ModifyStrict, 10));
    assert_eq!(
        flow_lines(&h, &[])
            .iter()
            .filter(|l| l.ends_with("actions=output:4"))
            .count(),
        1
    );

    // dump-flows with a cookie filter.
    let sel = flow_lines(&h, &["cookie=0x30/0xf0"]);
    assert_eq!(sel.len(), 4, "{sel:?}");

    // del-flows by cookie mask removes 0x10 and 0x11.
    must(&h, "del-flows", &["cookie=0x10/0xfe"]);
    let d = h.sw.flow_mods().pop().unwrap();
    assert_eq!(
        (d.command, d.cookie, d.cookie_mask, d.table_id),
        (FlowModCommand::Delete, 0x10, 0xfe, TABLE_ALL)
    );
    let left = flow_lines(&h, &[]);
    assert_eq!(left.len(), 6);
    assert!(!left
        .iter()
        .any(|l| l.contains("cookie=0x10,") || l.contains("cookie=0x11,")));

    // del-flows --strict and with an out_port filter.
    must(
        &h,
        "del-flows",
        &["--strict", "priority=50,udp,tp_src=53,ip_dscp=46"],
    );
    assert_eq!(
        h.sw.flow_mods().pop().unwrap().command,
        FlowModCommand::DeleteStrict
    );
    assert_eq!(flow_lines(&h, &[]).len(), 5);
    must(&h, "del-flows", &["out_port=3"]);
    assert_eq!(h.sw.flow_mods().pop().unwrap().out_port, 3);
    assert_eq!(flow_lines(&h, &[]).len(), 3);
    must(&h, "del-flows", &[]);
    assert!(flow_lines(&h, &[]).is_empty());
}

#[test]
fn flow_mod_flags_timeouts_and_errors() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let spec = "priority=5,idle_timeout=10,hard_timeout=20,send_flow_rem,check_overlap,reset_counts,no_packet_counts,no_byte_counts,in_port=2,actions=drop";
    must(&h, "add-flow", &[spec]);
    let fm = h.sw.flow_mods().pop().unwrap();
    assert_eq!(fm.flags, flow_mod_flags::ALL);
    assert_eq!((fm.idle_timeout, fm.hard_timeout), (10, 20));
    assert!(
        fm.instructions.is_empty() || fm.instructions == vec![Instruction::ApplyActions(vec![])]
    );
    // The handler refuses an overlapping add; ovs-ofctl prints the error and fails.
    let o = ofctl(&h, "add-flow", &[spec]);
    assert!(!o.ok);
    assert!(o.stderr.contains("OFPFMFC_OVERLAP"), "{}", o.stderr);
}

#[test]
fn dump_ports_and_table_stats() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let out = must(&h, "dump-ports", &[]);
    assert!(
        out.contains("OFPST_PORT reply (OF1.3)") && out.contains("2 ports"),
        "{out}"
    );
    assert!(out.contains("port  1: rx pkts=10, bytes=640"), "{out}");
    assert!(out.contains("port  2: rx pkts=20"), "{out}");
    let out = must(&h, "dump-ports", &["2"]);
    assert!(out.contains("1 ports") && out.contains("port  2:"), "{out}");
    let out = must(&h, "dump-tables", &[]);
    assert!(
        out.contains("OFPST_TABLE reply (OF1.3)") && out.contains("lookup=10"),
        "{out}"
    );
}

#[test]
fn packet_out_is_decoded() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let pkt =
        "ffffffffffff00000000000108060001080006040001000000000001c0a80001000000000000c0a80002";
    must(
        &h,
        "packet-out",
        &[&format!("in_port=1 packet={pkt} actions=output:2")],
    );
    let rx = h.sw.received.lock().unwrap();
    let po = rx.iter().find_map(|m| {
        if let Message::PacketOut(p) = m {
            Some(p.clone())
        } else {
            None
        }
    });
    let po = po.expect("PACKET_OUT decoded");
    assert_eq!(po.in_port, 1);
    assert_eq!(po.buffer_id, NO_BUFFER);
    assert_eq!(
        po.actions,
        vec![Action::Output {
            port: 2,
            max_len: 0
        }]
    );
    assert_eq!(po.data.len(), pkt.len() / 2);
    assert_eq!(&po.data[..6], &[0xff; 6]);
}

#[test]
fn add_group_and_dump_groups() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    must(
        &h,
        "add-group",
        &["group_id=1,type=select,bucket=weight:10,output:1,bucket=weight:20,output:2"],
    );
    must(&h, "add-group", &["group_id=2,type=fast_failover,bucket=watch_port:1,output:1,bucket=watch_port:2,output:2"]);
    must(
        &h,
        "add-group",
        &["group_id=3,type=indirect,bucket=output:1"],
    );
    must(
        &h,
        "add-group",
        &["group_id=4,type=all,bucket=output:1,bucket=output:2"],
    );
    let gms: Vec<GroupMod> =
        h.sw.received
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| {
                if let Message::GroupMod(g) = m {
                    Some(g.clone())
                } else {
                    None
                }
            })
            .collect();
    assert_eq!(gms.len(), 4);
    assert_eq!(gms[0].group_type, GroupType::Select);
    assert_eq!(
        gms[0].buckets.iter().map(|b| b.weight).collect::<Vec<_>>(),
        vec![10, 20]
    );
    assert_eq!(gms[1].group_type, GroupType::FastFailover);
    assert_eq!(gms[1].buckets[1].watch_port, 2);
    assert_eq!(gms[2].group_type, GroupType::Indirect);
    assert_eq!(
        gms[3].buckets[1].actions,
        vec![Action::Output {
            port: 2,
            max_len: 0
        }]
    );
    let out = must(&h, "dump-groups", &[]);
    assert!(out.contains("group_id=1,type=select,bucket=weight:10,actions=output:1,bucket=weight:20,actions=output:2"), "{out}");
    assert!(
        out.contains("group_id=2,type=ff,bucket=watch_port:1,actions=output:1"),
        "{out}"
    );
    assert!(
        out.contains("group_id=3,type=indirect,bucket=actions=output:1"),
        "{out}"
    );
    let o = ofctl(&h, "add-group", &["group_id=1,type=all,bucket=output:1"]);
    assert!(
        !o.ok && o.stderr.contains("OFPGMFC_GROUP_EXISTS"),
        "{}",
        o.stderr
    );
    let stats = must(&h, "dump-group-stats", &[]);
    assert!(stats.contains("group_id=4"), "{stats}");
    must(&h, "del-groups", &["group_id=1"]);
    assert!(!must(&h, "dump-groups", &[]).contains("group_id=1,"));
}

#[test]
fn large_flow_dump_is_split_with_more_flag() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let file = h.dir.path().join("many.txt");
    let text: String = (0..3000)
        .map(|i| {
            format!(
                "priority={},ip,nw_src=10.{}.{}.0/24,actions=output:1\n",
                1000 + i,
                i / 256,
                i % 256
            )
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    must(&h, "add-flows", &[file.to_str().unwrap()]);
    assert_eq!(h.sw.flows.lock().unwrap().len(), 3000);
    // ~100 bytes a flow: the reply needs several messages chained with MORE.
    assert_eq!(flow_lines(&h, &[]).len(), 3000);
}

#[test]
fn ptcp_listener_serves_ovs_ofctl() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let l = h.of.listen("ptcp:0:127.0.0.1").unwrap();
    let target = format!("tcp:{}", l.local_addr().unwrap());
    let out = Command::new("timeout")
        .args(["30", "ovs-ofctl", "-O", "OpenFlow13", "show", &target])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("dpid:00000000000000ab"));
}

#[test]
fn monitor_receives_async_messages() {
    if !have_ofctl() {
        return;
    }
    let h = common::start();
    let target = format!("unix:{}", h.sock.display());
    let child = Command::new("timeout")
        .args(["3", "ovs-ofctl", "-O", "OpenFlow13", "monitor", &target])
        .env("OVS_RUNDIR", h.dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while h.of.connections().iter().all(|c| !c.ready) && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pi = Message::PacketIn(PacketIn {
        buffer_id: NO_BUFFER,
        total_len: 60,
        reason: 0,
        table_id: 0,
        cookie: 0,
        matches: openflow::Match::new(vec![OxmField::InPort(1)]),
        data: vec![0xff; 60],
    });
    if h.of.broadcast(&pi) != 1 {
        let out = child.wait_with_output().unwrap();
        panic!(
            "monitor: {}\n{}\n{:#?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            h.sw.received.lock().unwrap()
        );
    }
    let ps = Message::PortStatus(PortStatus {
        reason: 2,
        desc: common::ports()[1].clone(),
    });
    assert_eq!(h.of.broadcast(&ps), 1);
    let out = child.wait_with_output().unwrap();
    // Killed by `timeout`, monitor may leave its output in either stream.
    let so =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        so.contains("OFPT_PACKET_IN (OF1.3)") && so.contains("in_port=1"),
        "{so}"
    );
    assert!(
        so.contains("OFPT_PORT_STATUS (OF1.3)") && so.contains("MOD: 2(vport2)"),
        "{so}"
    );
}
