//! Golden datapath tests through a real vireod with dummy ports, packet by packet: a frame is
//! injected on one port (`vireoctl inject`) and what every port was sent is read back
//! (`vireoctl capture`). NORMAL (learning, flooding, VLANs), every OpenFlow match field class and
//! action, goto_table and priorities, megaflow masks, revalidation without delay, PMD and port
//! statistics, and a live PMD core change.
//!
//! Capture is asynchronous, so every exchange ends with marker frames (ethertype 0x88b5, sent to
//! ALL ports by a top-priority flow) that follow the frame under test through the same rx queue:
//! what a port got before the marker is exactly what the frame produced there, so "nothing
//! arrived" is checked without sleeping.
mod common;
mod dp_harness;
mod frames;

use dp_harness::*;
use frames::*;

#[test]
fn normal_learns_floods_and_never_reflects() {
    let _g = serial();
    let sw = Sw::simple(3);
    let a_to_b = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    let b_to_a = udp(mac(1), mac(2), IP2, IP1, 2000, 1000);
    // Unknown unicast floods (not back to p1).
    sw.expect_same("p1", &a_to_b, &["p2", "p3"]);
    // The reply goes to the learned port only.
    sw.expect_same("p2", &b_to_a, &["p1"]);
    // Now both are known.
    sw.learned("p1", &a_to_b, "p2");
    sw.expect_same("p1", &a_to_b, &["p2"]);
    // Broadcast floods everywhere but the input port.
    let bc = arp(1, mac(3), [10, 0, 0, 3], [0; 6], IP1);
    sw.expect_same("p3", &bc, &["p1", "p2"]);
    // The MAC table.
    let macs = sw.json(&["dump-macs", BR]);
    let port_of = |m: &str| {
        macs.as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"] == m)
            .map(|e| e["port"].as_u64().unwrap())
    };
    assert_eq!(port_of("02:00:00:00:00:01"), Some(1), "{macs}");
    assert_eq!(port_of("02:00:00:00:00:02"), Some(2), "{macs}");
    assert_eq!(port_of("02:00:00:00:00:03"), Some(3), "{macs}");
    // A frame for a MAC learned on its own input port is dropped.
    let to_self = udp(mac(1), mac(4), [10, 0, 0, 4], IP1, 1, 2);
    sw.expect_same("p1", &to_self, &[]);
    // MAC 1 moves to p3: traffic for it follows at once.
    sw.expect_same("p3", &udp(mac(2), mac(1), IP1, IP2, 5, 6), &["p2"]);
    sw.learned("p2", &b_to_a, "p3");
    // Multicast floods too.
    let mc = udp([0x01, 0, 0x5e, 0, 0, 1], mac(2), IP2, [224, 0, 0, 1], 7, 7);
    sw.expect_same("p2", &mc, &["p1", "p3"]);
}

#[test]
fn normal_vlans_access_and_trunk_ports() {
    let _g = serial();
    let sw = Sw::new(&[
        ("a1", &["tag=10"]),
        ("a2", &["tag=10"]),
        ("b1", &["tag=20"]),
        ("t1", &["trunks=10,20"]),
        ("t2", &[]),
        ("t3", &["trunks=20"]),
    ]);
    let bc = udp(BCAST, mac(1), IP1, [10, 0, 0, 255], 1, 2);
    // Untagged into access VLAN 10: untagged on the other VLAN 10 access port, tagged 10 on the
    // trunks carrying 10, nothing in VLAN 20.
    let got = sw.send("a1", &bc);
    assert_eq!(got["a2"], vec![bc.clone()]);
    assert_eq!(got["t1"], vec![tagged(&bc, 10)]);
    assert_eq!(got["t2"], vec![tagged(&bc, 10)]);
    for p in ["a1", "b1", "t3"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // Tagged 20 into a trunk: untagged to VLAN 20's access port, tagged to the other trunks.
    let bc20 = tagged(&udp(BCAST, mac(4), IP1, [10, 0, 0, 255], 3, 4), 20);
    let got = sw.send("t1", &bc20);
    assert_eq!(got["b1"], vec![untagged(&bc20)]);
    assert_eq!(got["t2"], vec![bc20.clone()]);
    assert_eq!(got["t3"], vec![bc20.clone()]);
    for p in ["a1", "a2", "t1"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // VLAN 30 is not in t1's trunks: dropped at input. From t2 (all VLANs) it has nowhere to go.
    let bc30 = tagged(&bc, 30);
    sw.expect_same("t1", &bc30, &[]);
    sw.expect_same("t2", &bc30, &[]);
    // A tagged frame on an access port is dropped.
    sw.expect_same("a1", &tagged(&bc, 20), &[]);
    // Learning is per VLAN: MAC 1 is known in VLAN 10 (on a1) ...
    let to1 = udp(mac(1), mac(5), [10, 0, 0, 5], IP1, 9, 9);
    sw.learned("a2", &to1, "a1");
    let got = sw.send("t2", &tagged(&to1, 10));
    assert_eq!(got["a1"], vec![to1.clone()]);
    assert!(
        got.iter().all(|(p, f)| p == "a1" || f.is_empty()),
        "{got:?}"
    );
    // ... but unknown in VLAN 20: flooded there only.
    let got = sw.send("b1", &to1);
    assert_eq!(got["t1"], vec![tagged(&to1, 20)]);
    assert_eq!(got["t2"], vec![tagged(&to1, 20)]);
    assert_eq!(got["t3"], vec![tagged(&to1, 20)]);
    for p in ["a1", "a2", "b1"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // Moving a port to another VLAN applies at once.
    sw.ok(&["set-port", "a2", "tag=20"]);
    let got = sw.send("a1", &bc);
    assert!(got["a2"].is_empty(), "a2 left VLAN 10: {:?}", got["a2"]);
    assert_eq!(got["t1"], vec![tagged(&bc, 10)]);
    let got = sw.send("b1", &bc);
    assert_eq!(got["a2"], vec![bc.clone()]);
}

/// One match field: a flow with `m` outputs to p2; a frame that matches goes there, one that
/// differs only in that field falls to the default rule (p4).
struct Case {
    m: &'static str,
    from: &'static str,
    hit: Vec<u8>,
    miss: Vec<u8>,
    miss_from: &'static str,
}

fn case(m: &'static str, hit: Vec<u8>, miss: Vec<u8>) -> Case {
    Case {
        m,
        from: "p1",
        hit,
        miss,
        miss_from: "p1",
    }
}

#[test]
fn every_match_field_class() {
    let _g = serial();
    let sw = Sw::simple(4);
    let u = |sip, dip, sp, dp| udp(mac(2), mac(1), sip, dip, sp, dp);
    let base = u(IP1, IP2, 1000, 2000);
    let cases = vec![
        Case {
            m: "in_port=p1",
            from: "p1",
            hit: base.clone(),
            miss: base.clone(),
            miss_from: "p3",
        },
        case(
            "dl_src=02:00:00:00:00:01",
            base.clone(),
            udp(mac(2), mac(9), IP1, IP2, 1000, 2000),
        ),
        case(
            "dl_dst=02:00:00:00:00:02",
            base.clone(),
            udp(mac(8), mac(1), IP1, IP2, 1000, 2000),
        ),
        case(
            "dl_dst=01:00:00:00:00:00/01:00:00:00:00:00",
            udp(BCAST, mac(1), IP1, IP2, 1000, 2000),
            base.clone(),
        ),
        case(
            "dl_type=0x0806",
            arp(1, mac(1), IP1, [0; 6], IP2),
            base.clone(),
        ),
        case("dl_vlan=10", tagged(&base, 10), tagged(&base, 11)),
        case(
            "ip,nw_src=10.1.0.0/16",
            u([10, 1, 2, 3], IP2, 1, 2),
            u([10, 2, 2, 3], IP2, 1, 2),
        ),
        case(
            "ip,nw_dst=192.168.1.0/255.255.255.0",
            u(IP1, [192, 168, 1, 77], 1, 2),
            u(IP1, [192, 168, 2, 77], 1, 2),
        ),
        case(
            "ip,nw_proto=17",
            base.clone(),
            tcp(mac(2), mac(1), IP1, IP2, 1000, 2000),
        ),
        case(
            "udp,tp_dst=53",
            u(IP1, IP2, 1000, 53),
            u(IP1, IP2, 1000, 54),
        ),
        case(
            "tcp,tp_src=1234",
            tcp(mac(2), mac(1), IP1, IP2, 1234, 80),
            tcp(mac(2), mac(1), IP1, IP2, 1235, 80),
        ),
        case(
            "tcp,tcp_dst=80",
            tcp(mac(2), mac(1), IP1, IP2, 1234, 80),
            // Same port, other protocol.
            u(IP1, IP2, 1234, 80),
        ),
        case(
            "icmp,icmp_type=8,icmp_code=0",
            icmp(mac(2), mac(1), IP1, IP2, 8, 0),
            icmp(mac(2), mac(1), IP1, IP2, 0, 0),
        ),
        case(
            "arp,arp_op=2",
            arp(2, mac(1), IP1, mac(2), IP2),
            arp(1, mac(1), IP1, mac(2), IP2),
        ),
        case(
            "arp,arp_spa=10.0.0.1,arp_tpa=10.0.0.2",
            arp(1, mac(1), IP1, [0; 6], IP2),
            arp(1, mac(1), IP1, [0; 6], [10, 0, 0, 3]),
        ),
        case(
            "arp,arp_sha=02:00:00:00:00:07",
            arp(1, mac(7), IP1, [0; 6], IP2),
            arp(1, mac(1), IP1, [0; 6], IP2),
        ),
    ];
    for c in &cases {
        sw.flows(&[
            "priority=1,actions=output:p4",
            &format!("priority=100,{},actions=output:p2", c.m),
        ]);
        let got = sw.send(c.from, &c.hit);
        assert_eq!(got["p2"], vec![c.hit.clone()], "{}: matching frame", c.m);
        assert!(got["p4"].is_empty(), "{}: matching frame also on p4", c.m);
        let got = sw.send(c.miss_from, &c.miss);
        assert!(got["p2"].is_empty(), "{}: non-matching frame matched", c.m);
        assert_eq!(
            got["p4"],
            vec![c.miss.clone()],
            "{}: non-matching frame",
            c.m
        );
    }
}

#[test]
fn every_action() {
    let _g = serial();
    let sw = Sw::simple(4);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    let t = tcp(mac(2), mac(1), IP1, IP2, 1234, 80);
    let flow = |a: &str| sw.flows(&[&format!("in_port=p1,actions={a}")]);

    flow("output:p2");
    sw.expect_same("p1", &f, &["p2"]);
    flow("output:3");
    sw.expect_same("p1", &f, &["p3"]);
    flow("drop");
    sw.expect_same("p1", &f, &[]);
    flow("output:p1");
    sw.expect_same("p1", &f, &[]);
    flow("in_port");
    sw.expect_same("p1", &f, &["p1"]);
    flow("flood");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    flow("all");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    flow("normal");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    // Two outputs.
    flow("output:p2,output:p4");
    sw.expect_same("p1", &f, &["p2", "p4"]);

    // VLAN actions.
    flow("mod_vlan_vid:100,output:p2");
    assert_eq!(sw.one("p1", &f, "p2"), tagged(&f, 100));
    flow("push_vlan:0x8100,set_field:200->vlan_vid,output:p2");
    assert_eq!(sw.one("p1", &f, "p2"), tagged(&f, 200));
    flow("mod_vlan_vid:300,output:p2");
    assert_eq!(sw.one("p1", &tagged(&f, 5), "p2"), tagged(&f, 300));
    flow("strip_vlan,output:p2");
    assert_eq!(sw.one("p1", &tagged(&f, 7), "p2"), f);
    // Output before and after a change: the first copy is unmodified.
    flow("output:p2,mod_vlan_vid:9,output:p3");
    let got = sw.send("p1", &f);
    assert_eq!(got["p2"], vec![f.clone()]);
    assert_eq!(got["p3"], vec![tagged(&f, 9)]);

    // Ethernet addresses.
    flow("mod_dl_src:0a:0b:0c:0d:0e:0f,mod_dl_dst:02:00:00:00:00:33,output:p2");
    let o = sw.one("p1", &f, "p2");
    assert_eq!(o[..6], [2, 0, 0, 0, 0, 0x33]);
    assert_eq!(o[6..12], [0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
    assert_eq!(o[12..], f[12..]);
    flow("set_field:02:00:00:00:00:44->eth_dst,output:p2");
    let o = sw.one("p1", &f, "p2");
    assert_eq!(o[..6], mac(0x44));
    assert_eq!(o[6..], f[6..]);

    // IPv4 addresses: IP header checksum and the UDP/TCP pseudo-header checksum follow.
    sw.flows(&["udp,in_port=p1,actions=mod_nw_src:192.168.7.1,mod_nw_dst:172.16.0.9,output:p2"]);
    let o = sw.one("p1", &f, "p2");
    check_sums(&o).unwrap();
    assert_eq!(
        ip_fields(&o),
        ([192, 168, 7, 1], [172, 16, 0, 9], 1000, 2000)
    );
    assert_eq!(o.len(), f.len());
    sw.flows(&["tcp,in_port=p1,actions=set_field:1.2.3.4->ip_dst,output:p2"]);
    let o = sw.one("p1", &t, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, [1, 2, 3, 4], 1234, 80));
    // ICMP: IP checksum fixed, ICMP checksum (no pseudo-header) still right.
    sw.flows(&["icmp,in_port=p1,actions=mod_nw_dst:10.9.9.9,output:p2"]);
    let o = sw.one("p1", &icmp(mac(2), mac(1), IP1, IP2, 8, 0), "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o).1, [10, 9, 9, 9]);

    // L4 ports.
    sw.flows(&["udp,in_port=p1,actions=mod_tp_src:53,mod_tp_dst:5353,output:p2"]);
    let o = sw.one("p1", &f, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 53, 5353));
    sw.flows(&["tcp,in_port=p1,actions=mod_tp_dst:8080,set_field:4321->tcp_src,output:p2"]);
    let o = sw.one("p1", &t, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 4321, 8080));
    sw.flows(&["udp,in_port=p1,actions=set_field:7->udp_src,output:p2"]);
    let o = sw.one("p1", &tagged(&f, 12), "p2");
    assert_eq!(vlan_of(&o), Some(12));
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 7, 2000));
}
