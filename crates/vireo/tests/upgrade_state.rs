//! `vireoctl upgrade` carries the live state the config store does not hold: learned MACs
//! (the new vireod forwards to a known MAC instead of flooding) and the connection table with
//! its limits (a reply of a connection committed before the upgrade is still `+est` after it).
//! Dummy ports (frames injected and captured through `vireoctl`), so no peer is needed.
mod common;
mod upgrade_harness;

use common::wait_until;
use std::collections::BTreeSet;
use std::time::Duration;
use upgrade_harness::Vireod;

const MAC_A: &str = "020000000a01";
const MAC_B: &str = "020000000b02";
const BCAST: &str = "ffffffffffff";

/// An Ethernet + IPv4 + UDP frame, as hex.
fn udp(dst: &str, src: &str, ip_src: [u8; 4], ip_dst: [u8; 4], sp: u16, dp: u16) -> String {
    let payload = [0x5au8; 18];
    let udp_len = 8 + payload.len() as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&ip_src);
    ip.extend_from_slice(&ip_dst);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = ip;
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
    format!("{dst}{src}0800{hex}")
}

/// Frames captured on `port` since the last capture, as lowercase hex.
fn captured(d: &Vireod, port: &str) -> Vec<String> {
    d.ok(&["capture", port])
        .lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect()
}

/// (vlan, mac, port) of `dump-macs`, without the ages.
fn macs(d: &Vireod, br: &str) -> BTreeSet<String> {
    d.ok(&["dump-macs", br])
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// `dump-conntrack` lines without the time left.
fn conns(d: &Vireod) -> Vec<String> {
    d.ok(&["dump-conntrack"])
        .lines()
        .map(|l| {
            l.split([',', ' '])
                .filter(|w| !w.starts_with("expires") && !w.is_empty())
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn upgrade_keeps_learned_macs_and_connections() {
    let _g = upgrade_harness::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut d = Vireod::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-br", "br1", "internal=false"]);
    for (br, p) in [("br0", "p1"), ("br0", "p2"), ("br0", "p3")] {
        d.ok(&["add-port", br, p, "type=dummy"]);
    }
    for p in ["q1", "q2"] {
        d.ok(&["add-port", "br1", p, "type=dummy"]);
    }

    // br0 learns A on p1 and B on p2 (NORMAL).
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    d.ok(&["inject", "p1", &udp(BCAST, MAC_A, a, b, 1, 2)]);
    d.ok(&["inject", "p2", &udp(BCAST, MAC_B, b, a, 2, 1)]);
    assert!(
        wait_until(Duration::from_secs(5), || macs(&d, "br0").len() == 2),
        "not learned: {:?}",
        macs(&d, "br0")
    );
    let macs_before = macs(&d, "br0");

    // br1: q1 → q2 commits a connection in zone 3; from q2 only its replies pass.
    d.ok(&["del-flows", "br1"]);
    for rule in [
        "table=0,priority=100,udp,in_port=q1,actions=ct(commit,zone=3),output:q2",
        "table=0,priority=100,udp,in_port=q2,actions=ct(zone=3,table=1)",
        "table=1,priority=100,udp,ct_state=+trk+est,actions=output:q1",
        "table=1,priority=1,actions=drop",
    ] {
        d.ok(&["add-flow", "br1", rule]);
    }
    d.ok(&["set-ct-limit", "zone=3", "50"]);
    let (c, s) = ([10, 9, 0, 1], [10, 9, 0, 2]);
    d.ok(&["inject", "q1", &udp(MAC_B, MAC_A, c, s, 4000, 53)]);
    assert!(
        wait_until(Duration::from_secs(5), || conns(&d).len() == 1),
        "no connection: {:?}",
        conns(&d)
    );
    let conns_before = conns(&d);
    let stats_before = d.ok(&["ct-stats"]);
    assert!(stats_before.contains("zone 3"), "{stats_before}");
    let rx_before: Vec<u64> = ["p1", "p2", "q1"].iter().map(|p| d.rx(p)).collect();
    assert!(rx_before.iter().all(|&n| n >= 1), "{rx_before:?}");

    d.upgrade();

    // Port counters go on from the old process's (state version 3).
    let rx_after: Vec<u64> = ["p1", "p2", "q1"].iter().map(|p| d.rx(p)).collect();
    assert_eq!(
        rx_after, rx_before,
        "port counters did not survive the upgrade"
    );

    // The new vireod has the same MACs, and forwards to them without flooding: a frame to A
    // from p3 leaves on p1 only.
    assert_eq!(macs(&d, "br0"), macs_before);
    captured(&d, "p1");
    captured(&d, "p2");
    let to_a = udp(MAC_A, "020000000c03", [10, 0, 0, 3], a, 5, 6);
    d.ok(&["inject", "p3", &to_a]);
    assert!(
        wait_until(Duration::from_secs(5), || captured(&d, "p1")
            .contains(&to_a)),
        "frame to A not delivered on p1"
    );
    assert!(
        captured(&d, "p2").is_empty(),
        "frame to A flooded: the MAC table was not carried"
    );

    // The connection, its zone and limit came along; its reply is +est here.
    assert_eq!(conns(&d), conns_before);
    let stats_after = d.ok(&["ct-stats"]);
    let limit_line = |s: &str| s.lines().find(|l| l.contains("zone 3")).map(str::to_string);
    assert_eq!(limit_line(&stats_after), limit_line(&stats_before));
    captured(&d, "q1");
    let reply = udp(MAC_A, MAC_B, s, c, 53, 4000);
    let stray = udp(MAC_A, MAC_B, s, c, 53, 4001);
    d.ok(&["inject", "q2", &stray]);
    d.ok(&["inject", "q2", &reply]);
    assert!(
        wait_until(Duration::from_secs(5), || {
            let got = captured(&d, "q1");
            assert!(!got.contains(&stray), "a new connection from q2 passed");
            got.contains(&reply)
        }),
        "the reply of the connection committed before the upgrade did not pass\n{}",
        d.log_tail()
    );
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("takeover: connections restored"), "{log}");
}

/// OpenFlow groups (added with `ovs-ofctl -O OpenFlow15`, bucket ids included, one group
/// naming another) are handed over: the new vireod dumps the same groups, and a rule sending
/// to a group still delivers through it. (An upgrade used to be refused while a bridge had any.)
#[test]
fn upgrade_keeps_groups_with_their_bucket_ids() {
    if common::peers::missing("ovs-ofctl").is_some() {
        return;
    }
    let _g = upgrade_harness::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut d = Vireod::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["p1", "p2", "p3"] {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
    let mgmt = d.run.join("br0.mgmt");
    let of15 = |cmd: &str, args: &[&str]| {
        let o = testkit::ofctl_version(&mgmt, Some("OpenFlow15"), &[], cmd, args);
        assert!(o.ok, "ovs-ofctl {cmd} {args:?}: {}", o.stderr);
        o.stdout
    };
    of15(
        "add-group",
        &["group_id=9,type=indirect,bucket=bucket_id:3,actions=output:3"],
    );
    of15(
        "add-group",
        &["group_id=1,type=all,bucket=bucket_id:7,actions=output:2,bucket=bucket_id:12,actions=group:9"],
    );
    of15("add-flow", &["priority=100,in_port=1,actions=group:1"]);
    let groups = || {
        let mut v: Vec<String> = of15("dump-groups", &[])
            .lines()
            .skip(1)
            .map(|l| l.trim().to_string())
            .collect();
        v.sort();
        v
    };
    let before = groups();
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(
        before.iter().any(|g| g.contains("bucket_id:12")),
        "{before:?}"
    );

    d.upgrade();

    assert_eq!(groups(), before);
    captured(&d, "p2");
    captured(&d, "p3");
    let f = udp(MAC_B, MAC_A, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
    d.ok(&["inject", "p1", &f]);
    for p in ["p2", "p3"] {
        assert!(
            wait_until(Duration::from_secs(5), || captured(&d, p).contains(&f)),
            "the frame did not leave through group 1 on {p}\n{}",
            d.log_tail()
        );
    }
}
