//! Nicira extensions through the real daemon: `ovs-ofctl -O OpenFlow13` installs rules that
//! set registers (`load`, `move` from the Ethernet source), `resubmit` to a table that
//! matches on them and `dec_ttl`; frames injected on dummy ports (`vireoctl inject` /
//! `capture`) leave where the registers steer them, with the TTL decremented and the IPv4
//! checksum still right; `ovs-ofctl dump-flows` prints the rules back as typed; plain
//! ovs-ofctl (OpenFlow 1.0) writes and reads `resubmit`; `vireoctl add-flow` takes the same
//! syntax; `ct(...)` is installed. Fails under VIREO_REQUIRE_PEERS=1
//! without ovs-ofctl.
mod common;

use std::path::Path;
use std::time::Duration;

use common::wait_until;
use common::Daemon;
use testkit::{have_ofctl, ofctl_version, Out};

fn captured(d: &Daemon, port: &str) -> Vec<String> {
    d.ok(&["capture", port])
        .lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect()
}

fn ofctl(run: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> Out {
    ofctl_version(&run.join("br0.mgmt"), v, &[], cmd, args)
}

fn must(run: &Path, v: Option<&str>, cmd: &str, args: &[&str]) -> String {
    let o = ofctl(run, v, cmd, args);
    assert!(o.ok, "ovs-ofctl {v:?} {cmd} {args:?}: {}", o.stderr);
    o.stdout
}

fn checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An IPv4/UDP frame from 02:..:`src` to 02:..:`dst` with this TTL (valid checksum).
fn ip_frame(src: u8, dst: u8, ttl: u8, fill: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, src, 0x08, 0x00];
    let mut ip = vec![
        0x45, 0, 0, 46, 0, 1, 0, 0, ttl, 17, 0, 0, 10, 0, 0, src, 10, 0, 0, dst,
    ];
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 26, 0, 0]);
    f.resize(60, fill);
    f
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn registers_resubmit_move_and_dec_ttl_steer_real_frames() {
    if !have_ofctl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["p1", "p2", "p3"] {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
    let v13 = Some("OpenFlow13");
    must(&run, v13, "del-flows", &[]);
    let flows = [
        "priority=100,in_port=1 actions=load:0x2->NXM_NX_REG0[0..15],resubmit(,1)",
        "priority=100,in_port=2 actions=move:NXM_OF_ETH_SRC[0..7]->NXM_NX_REG1[0..7],resubmit(,1)",
        "table=1, priority=10,ip,reg0=0x2 actions=dec_ttl,output:3",
        "table=1, priority=10,reg1=0xa actions=output:1",
        "table=1, priority=10,reg1=0xb actions=note:01.02.03.04.05.06,output:3",
    ];
    for f in flows {
        must(&run, v13, "add-flow", &[&f.replace(", ", ",")]);
    }
    for p in ["p1", "p2", "p3"] {
        captured(&d, p);
    }

    // p1: reg0=2 → table 1 → dec_ttl → p3 with TTL 63 and a valid header checksum.
    let f = ip_frame(0x0a, 0x0b, 64, 1);
    d.ok(&["inject", "p1", &hex(&f)]);
    let mut got = Vec::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            got = captured(&d, "p3");
            !got.is_empty()
        }),
        "nothing on p3"
    );
    let out = unhex(&got[0]);
    assert_eq!(out[22], 63, "TTL decremented: {}", got[0]);
    assert_eq!(checksum(&out[14..34]), 0, "checksum patched: {}", got[0]);
    let mut expect = f.clone();
    expect[22] = 63;
    expect[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&expect[14..34]);
    expect[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(out, expect);

    // TTL 1: dec_ttl sends it to the controller (none here): nothing leaves.
    d.ok(&["inject", "p1", &hex(&ip_frame(0x0a, 0x0b, 1, 2))]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(captured(&d, "p3").is_empty());

    // p2: the low byte of eth_src picks the port (two megaflows that differ in eth_src).
    let from_a = ip_frame(0x0a, 0x0c, 64, 3);
    let from_b = ip_frame(0x0b, 0x0c, 64, 4);
    d.ok(&["inject", "p2", &hex(&from_a)]);
    d.ok(&["inject", "p2", &hex(&from_b)]);
    assert!(wait_until(Duration::from_secs(10), || captured(&d, "p1")
        .contains(&hex(&from_a))));
    assert!(wait_until(Duration::from_secs(10), || captured(&d, "p3")
        .contains(&hex(&from_b))));
    // Again, now from the megaflow cache.
    d.ok(&["inject", "p2", &hex(&from_b)]);
    assert!(wait_until(Duration::from_secs(10), || captured(&d, "p3")
        .contains(&hex(&from_b))));
    assert!(captured(&d, "p1").is_empty());

    // dump-flows prints every rule as it was typed, with the traffic counted.
    let dump = must(&run, v13, "dump-flows", &[]);
    for f in flows {
        assert!(
            dump.contains(f.split_once(" priority").map_or(f, |x| x.1)),
            "{f}\n{dump}"
        );
    }
    assert!(
        dump.contains("n_packets=2, n_bytes=120, priority=100,in_port=1 "),
        "{dump}"
    );

    // Plain ovs-ofctl (OpenFlow 1.0): Nicira actions are vendor actions there too.
    must(
        &run,
        None,
        "add-flow",
        &["priority=100,in_port=3,actions=resubmit(,1),output:1"],
    );
    must(
        &run,
        None,
        "add-flow",
        &["priority=90,ip,in_port=3,actions=dec_ttl,output:2"],
    );
    let dump10 = must(&run, None, "dump-flows", &[]);
    assert!(
        dump10.contains("priority=100,in_port=3 actions=resubmit(,1),output:1"),
        "{dump10}"
    );
    assert!(
        dump10.contains("priority=90,ip,in_port=3 actions=dec_ttl,output:2"),
        "{dump10}"
    );

    // vireoctl add-flow takes the same syntax; dump-flows prints it the same way.
    d.ok(&[
        "add-flow",
        "br0",
        "table=2,priority=5,reg3=0x10/0xf0,actions=move:reg3[]->reg4[],resubmit(,3)",
    ]);
    let vdump = d.ok(&["dump-flows", "br0"]);
    assert!(
        vdump.contains("table=2, n_packets=0, n_bytes=0, priority=5,reg3=0x10/0xf0 actions=move:NXM_NX_REG3[]->NXM_NX_REG4[],resubmit(,3)"),
        "{vdump}"
    );
    let dump = must(&run, v13, "dump-flows", &["table=2"]);
    assert!(
        dump.contains(
            "priority=5,reg3=0x10/0xf0 actions=move:NXM_NX_REG3[]->NXM_NX_REG4[],resubmit(,3)"
        ),
        "{dump}"
    );

    // A resubmit loop: the packet is dropped and counted (`vireoctl show`'s JSON).
    must(
        &run,
        v13,
        "add-flow",
        &["table=0,priority=200,in_port=3,actions=output:1,resubmit(,0)"],
    );
    let before = d.json(&["show"])["pipeline"]["xlate_limit_drops"]
        .as_u64()
        .unwrap();
    let looped = ip_frame(0x0c, 0x0a, 64, 9);
    d.ok(&["inject", "p3", &hex(&looped)]);
    assert!(wait_until(Duration::from_secs(10), || d.json(&["show"])
        ["pipeline"]["xlate_limit_drops"]
        .as_u64()
        .unwrap()
        > before));
    assert!(!captured(&d, "p1").contains(&hex(&looped)));

    // ct is decoded and installed (the datapath tracks connections: see conntrack.rs).
    let o = ofctl(
        &run,
        v13,
        "add-flow",
        &["table=4,ip,actions=ct(commit,table=5)"],
    );
    assert!(o.ok, "{}", o.stderr);
    let o = d.ctl(&["add-flow", "br0", "table=4,ipv6,actions=ct(commit)"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let dump = must(&run, v13, "dump-flows", &["table=4"]);
    assert!(dump.contains("ct(commit,table=5)"), "{dump}");
}
