//! Kernel-facing ports (`af-packet`, `tap`, `internal`) against the real kernel: network
//! namespaces and veth pairs made by each test, `ping` and `iperf3` (TCP, the veths' default
//! offloads left on) between namespaces through a running vireod, the host reaching a
//! namespace through the bridge's internal port, VLAN access ports, jumbo frames, an
//! interface deleted and re-created, fd leaks over add/del cycles, OpenFlow packet-out and
//! packet-in through `ovs-ofctl`, and bad input at `add-port`.
//!
//! Names: namespaces `vkp-T-X-PID`, interfaces `vkpTXPID` (T = the test's letter, X = side),
//! all removed by Drop guards, also when a test fails.
mod common;

use common::host::{kernel_ok, mappings, must, sh, Ns};
use common::Daemon;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

impl Ns {
    fn new(test: char, side: char, addr: &str) -> Ns {
        let ns = Ns::create("vkp", test, side);
        ns.exec(&["ip", "addr", "add", addr, "dev", &ns.ns_if]);
        ns
    }

    fn ping(&self, ip: &str, extra: &[&str]) -> bool {
        let mut a = vec!["ping", "-c", "3", "-i", "0.2", "-W", "2"];
        a.extend_from_slice(extra);
        a.push(ip);
        self.try_exec(&a).status.success()
    }
}

fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vkp-{tag}-"))
        .tempdir()
        .unwrap()
}

fn drops(d: &Daemon, port: &str) -> serde_json::Value {
    d.json(&["port-stats", port])
}

fn two_af_packet_ports(test: char, net: u8) -> (Daemon, tempfile::TempDir, Ns, Ns) {
    let dir = tmp(&test.to_string());
    let a = Ns::new(test, 'a', &format!("10.{net}.0.1/24"));
    let b = Ns::new(test, 'b', &format!("10.{net}.0.2/24"));
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&[
        "add-port",
        "br0",
        "a",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    d.ok(&[
        "add-port",
        "br0",
        "b",
        "type=af-packet",
        &format!("ifname={}", b.host_if),
    ]);
    (d, dir, a, b)
}

#[test]
fn af_packet_ping_and_tcp_between_namespaces() {
    if !kernel_ok() || !testkit::require_peer("iperf3", "iperf3") {
        return;
    }
    let (d, _dir, a, b) = two_af_packet_ports('p', 201);
    assert!(
        a.ping_until("10.201.0.2", &[], 10),
        "no ping through af-packet"
    );
    assert!(a.ping("10.201.0.2", &[]), "ping lost packets");
    let bytes = a.iperf_tcp_to(&b, "10.201.0.2");
    eprintln!("af-packet iperf3 TCP: {bytes} bytes in 2 s");
    assert!(
        bytes > 10_000_000,
        "TCP through af-packet moved only {bytes} bytes"
    );
    // The veths' offloads are on: GSO frames came and went through whole (port offloads on).
    let st = common::port_status(&d, "a")["status"].clone();
    assert!(st["gso_frames"].as_u64().unwrap() > 0, "no GSO frame: {st}");
    assert_eq!(st["gso_segments"], 0, "segmented with offloads on: {st}");
    // They are above a ring slot: each came whole through the socket's queue.
    assert!(st["ring_copies"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["bad_ring_slots"], 0, "{st}");
    // Our own transmissions are not received back: a's rx is what namespace a sent.
    let sa = drops(&d, "a");
    let sb = drops(&d, "b");
    eprintln!("stats a={sa} b={sb}");
    assert_eq!(
        sa[0]["rx_errors"].as_u64().unwrap() + sb[0]["rx_errors"].as_u64().unwrap(),
        0
    );
    let rxqs = d.json(&["pmd-rxq-show"]);
    let polled: Vec<&str> = rxqs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["port"].as_str())
        .collect();
    assert!(polled.contains(&"a") && polled.contains(&"b"), "{rxqs}");
}

/// `offloads=false`: the veths still hand over partial checksums and GSO frames; Vireo
/// completes and segments them in software on receive and sends plain frames.
#[test]
fn af_packet_without_offloads_completes_and_segments_in_software() {
    if !kernel_ok() || !testkit::require_peer("iperf3", "iperf3") {
        return;
    }
    let (d, _dir, a, b) = two_af_packet_ports('o', 211);
    for p in ["a", "b"] {
        d.ok(&["set-port", p, "offloads=false"]);
    }
    assert!(
        a.ping_until("10.211.0.2", &[], 10),
        "no ping through af-packet"
    );
    let bytes = a.iperf_tcp_to(&b, "10.211.0.2");
    eprintln!("af-packet (offloads=false) iperf3 TCP: {bytes} bytes in 2 s");
    assert!(bytes > 1_000_000, "TCP moved only {bytes} bytes");
    let st = common::port_status(&d, "a")["status"].clone();
    let completed = st["csum_completed"].as_u64().unwrap() + st["gso_segments"].as_u64().unwrap();
    assert!(completed > 0, "no partial checksum was completed: {st}");
}

#[test]
fn tap_ports_moved_into_namespaces_carry_ping_and_tcp() {
    if !kernel_ok() || !testkit::require_peer("iperf3", "iperf3") {
        return;
    }
    let pid = std::process::id();
    let dir = tmp("t");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    let mut nss = Vec::new();
    for (side, ip) in [('a', "10.202.0.1/24"), ('b', "10.202.0.2/24")] {
        let tap = format!("vkpt{side}{pid}");
        d.ok(&["add-port", "br0", &tap, "type=tap"]);
        let ns = Ns {
            name: format!("vkp-t-{side}-{pid}"),
            host_if: tap.clone(),
            ns_if: tap.clone(),
        };
        let _ = sh(&["ip", "netns", "del", &ns.name]);
        must(&["ip", "netns", "add", &ns.name]);
        must(&["ip", "link", "set", &tap, "netns", &ns.name]);
        ns.exec(&["ip", "addr", "add", ip, "dev", &tap]);
        ns.exec(&["ip", "link", "set", &tap, "up"]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        nss.push(ns);
    }
    assert!(
        nss[0].ping_until("10.202.0.2", &[], 10),
        "no ping through tap"
    );
    assert!(nss[0].ping("10.202.0.2", &[]));
    let bytes = nss[0].iperf_tcp_to(&nss[1], "10.202.0.2");
    eprintln!("tap iperf3 TCP: {bytes} bytes in 2 s");
    assert!(
        bytes > 10_000_000,
        "TCP through tap moved only {bytes} bytes"
    );
    let port = format!("vkpta{pid}");
    assert_eq!(common::port_status(&d, &port)["link"], "up");
    // Deleting the tap (inside its namespace) takes the port down; Vireo re-creates it.
    nss[0].exec(&["ip", "link", "del", &port]);
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let st = common::port_status(&d, &port);
        if st["status"]["reopened"].as_u64() == Some(1) && st["link"] == "up" {
            assert_eq!(st["status"]["link_lost"], 1);
            break;
        }
        assert!(Instant::now() < end, "tap not re-created: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(must(&["ip", "link", "show", &port]).contains(&port));
}

#[test]
fn host_reaches_a_namespace_through_the_internal_port() {
    if !kernel_ok() {
        return;
    }
    let pid = std::process::id();
    let br = format!("vkpi{pid}");
    let dir = tmp("i");
    let a = Ns::new('i', 'a', "10.203.0.2/24");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", &br]);
    // The bridge's interface exists, is up, is OpenFlow LOCAL, and is not in list-ports.
    let st = common::port_status(&d, &br);
    assert_eq!(st["type"], "internal");
    assert_eq!(st["ofport"], 0xffff_fffeu32);
    assert!(must(&["ip", "link", "show", &br]).contains(",UP"));
    assert_eq!(d.ok(&["list-ports", &br]).trim(), "");
    assert!(d.ok(&["show"]).contains("ofport: LOCAL"));
    d.ok(&[
        "add-port",
        &br,
        "a",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    must(&["ip", "addr", "add", "10.203.0.1/24", "dev", &br]);
    // From the root namespace (the host) over the bridge's interface.
    let ok = (0..10).any(|_| {
        sh(&["ping", "-c", "1", "-W", "1", "10.203.0.2"])
            .status
            .success()
    });
    assert!(ok, "host cannot reach the namespace through {br}");
    assert!(a.ping("10.203.0.1", &[]), "namespace cannot reach the host");
    assert!(d
        .ctl(&["del-port", &br, &br])
        .stderr
        .contains("internal port"));
    d.ok(&["del-br", &br]);
    assert!(
        !sh(&["ip", "link", "show", &br]).status.success(),
        "tap left behind"
    );
    // internal=false: no interface.
    d.ok(&["add-br", &br, "internal=false"]);
    assert!(!sh(&["ip", "link", "show", &br]).status.success());
}

/// Sends one raw Ethernet frame (hex) out of `ifname` inside `ns`, with Python's packet
/// socket (this kernel has no 8021q module, so no VLAN device can make tagged frames).
fn send_raw(ns: &Ns, ifname: &str, hex: &str) {
    let py = format!(
        "import socket; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
         s.bind(('{ifname}', 0)); s.send(bytes.fromhex('{hex}'))"
    );
    ns.exec(&["python3", "-c", &py]);
}

/// An ARP request from 10.204.0.2 (MAC 02:00:00:00:d4:02) for 10.204.0.1, tagged with `vlan`.
fn arp_request(vlan: Option<u16>) -> String {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0xd4, 2]);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[2, 0, 0, 0, 0xd4, 2, 10, 204, 0, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 204, 0, 1]);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn vlan_access_port_and_stripped_tags_restored() {
    if !kernel_ok() || !testkit::require_peer("python3", "python3") {
        return;
    }
    let (d, _dir, a, b) = two_af_packet_ports('v', 204);
    // a is an access port of VLAN 100; b is a trunk.
    d.ok(&["set-port", "a", "tag=100"]);
    let neigh = || a.exec(&["ip", "neigh", "show", "10.204.0.2"]);
    // Untagged from b is not VLAN 100: namespace a never hears it.
    send_raw(&b, &b.ns_if, &arp_request(None));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !neigh().contains("02:00:00:00:d4:02"),
        "untagged leaked into VLAN 100"
    );
    // Tagged 100 from b: the receiving veth strips the tag into metadata; Vireo puts it back
    // from PACKET_AUXDATA, so the frame is VLAN 100 and reaches access port a, untagged.
    send_raw(&b, &b.ns_if, &arp_request(Some(100)));
    let end = Instant::now() + Duration::from_secs(5);
    while !neigh().contains("02:00:00:00:d4:02") {
        assert!(
            Instant::now() < end,
            "tagged ARP never reached access port a: a {} b {}",
            drops(&d, "a"),
            drops(&d, "b"),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Another VLAN does not reach a.
    a.exec(&["ip", "neigh", "flush", "dev", &a.ns_if]);
    send_raw(&b, &b.ns_if, &arp_request(Some(200)));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !neigh().contains("02:00:00:00:d4:02"),
        "VLAN 200 leaked into VLAN 100"
    );
}

#[test]
fn jumbo_frames_with_mtu_9000() {
    if !kernel_ok() {
        return;
    }
    let (d, _dir, a, b) = two_af_packet_ports('j', 206);
    for ns in [&a, &b] {
        ns.exec(&["ip", "link", "set", &ns.ns_if, "mtu", "9000"]);
        must(&["ip", "link", "set", &ns.host_if, "mtu", "9000"]);
    }
    assert!(a.ping_until("10.206.0.2", &[], 10));
    assert!(
        a.ping("10.206.0.2", &["-s", "8000", "-M", "do"]),
        "8000-byte ping did not cross"
    );
    // Raised behind Vireo's back past what its buffers hold: such frames are dropped and
    // counted as too big, and the port keeps working.
    for ns in [&a, &b] {
        ns.exec(&["ip", "link", "set", &ns.ns_if, "mtu", "9500"]);
        must(&["ip", "link", "set", &ns.host_if, "mtu", "9500"]);
    }
    assert!(!a.ping("10.206.0.2", &["-s", "9400", "-M", "do", "-c", "1"]));
    let st = d.json(&["port-stats", "a"]);
    assert!(
        st[0]["drops"]["too-big"].as_u64().unwrap_or(0) >= 1,
        "oversized frame not counted: {st}"
    );
    assert!(
        a.ping("10.206.0.2", &["-s", "8000"]),
        "port broken after a too-big frame"
    );
}

#[test]
fn af_packet_interface_deleted_and_recreated_comes_back() {
    if !kernel_ok() {
        return;
    }
    let (d, _dir, a, _b) = two_af_packet_ports('r', 207);
    assert!(a.ping_until("10.207.0.2", &[], 10));
    must(&["ip", "link", "del", &a.host_if]);
    let wait = |want: &str, key: &str, n: u64| {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let st = common::port_status(&d, "a");
            if st["link"] == want && st["status"][key].as_u64() == Some(n) {
                return;
            }
            assert!(Instant::now() < end, "port a never {want}: {st}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("down", "link_lost", 1);
    // Traffic to a down port is dropped and counted, not lost silently.
    a.add_veth();
    a.exec(&["ip", "addr", "add", "10.207.0.1/24", "dev", &a.ns_if]);
    wait("up", "reopened", 1);
    assert!(
        a.ping_until("10.207.0.2", &[], 10),
        "no ping after re-creation"
    );
}

fn fds(pid: u32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn two_hundred_add_del_cycles_leak_no_fd_or_mapping() {
    if !kernel_ok() {
        return;
    }
    let pid = std::process::id();
    let dir = tmp("l");
    let a = Ns::new('l', 'a', "10.208.0.1/24");
    // Quiet: nobody reads the daemon's stderr pipe, and 1,200 commands' info lines fill it.
    let d = Daemon::start_with(dir.path(), &["--log-level", "warn"]);
    let br = format!("vkpl{pid}");
    d.ok(&["add-br", "br0", "internal=false"]);
    let vpid = d.child.id();
    let tap = format!("vkplt{pid}");
    let ifname = format!("ifname={}", a.host_if);
    let mut before = Vec::new();
    let mut maps_before = (0, 0);
    // One warm-up cycle first: what is opened once and kept (not per port) is not a leak.
    for i in 0..201 {
        if i == 1 {
            before = fds(vpid);
            maps_before = mappings(vpid);
        }
        d.ok(&["add-port", "br0", "a", "type=af-packet", &ifname]);
        d.ok(&["del-port", "br0", "a"]);
        d.ok(&["add-port", "br0", &tap, "type=tap"]);
        d.ok(&["del-port", "br0", &tap]);
        d.ok(&["add-br", &br]);
        d.ok(&["del-br", &br]);
    }
    let after = fds(vpid);
    let maps_after = mappings(vpid);
    eprintln!(
        "vireod fds: {} before, {} after 200 cycles of 3 kinds; shared mappings {} -> {}, private writable KiB {} -> {}",
        before.len(),
        after.len(),
        maps_before.0,
        maps_after.0,
        maps_before.1 >> 10,
        maps_after.1 >> 10
    );
    assert_eq!(before, after, "fd leak over 200 add/del cycles");
    assert_eq!(maps_before.0, maps_after.0, "shared mappings leaked");
    // A port's buffers: a leak of each port's (hundreds of KiB) over 200 cycles would be
    // tens of MiB; allocator arenas may grow a little.
    assert!(
        maps_after.1 < maps_before.1 + (16 << 20),
        "private memory grew {} -> {} KiB over 200 cycles",
        maps_before.1 >> 10,
        maps_after.1 >> 10
    );
    // Neither the tap nor the internal port of the added and deleted bridge is left.
    assert!(!sh(&["ip", "link", "show", &tap]).status.success());
    assert!(!sh(&["ip", "link", "show", &br]).status.success());
}

#[test]
fn bad_kernel_port_requests_are_clear_errors() {
    if !kernel_ok() {
        return;
    }
    let dir = tmp("e");
    let a = Ns::new('e', 'a', "10.209.0.1/24");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    let pid = std::process::id();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "add-port".into(),
                "br0".into(),
                "x".into(),
                "type=af-packet".into(),
                "ifname=vkpnope0".into(),
            ],
            "no network interface named vkpnope0",
        ),
        (
            vec![
                "add-port".into(),
                "br0".into(),
                "x".into(),
                "type=af-packet".into(),
            ],
            "needs ifname=IF",
        ),
        (
            vec![
                "add-port".into(),
                "br0".into(),
                a.host_if.clone(),
                "type=tap".into(),
            ],
            "already exists",
        ),
        (
            vec![
                "add-port".into(),
                "br0".into(),
                format!("vkpe{pid}t"),
                "type=tap".into(),
                "mtu=9500".into(),
            ],
            "outside 68..",
        ),
        (
            vec![
                "add-port".into(),
                "br0".into(),
                "averyveryverylongtapname".into(),
                "type=tap".into(),
            ],
            "15 characters",
        ),
    ];
    for (args, want) in cases {
        let r: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = d.ctl(&r);
        assert_eq!(o.code, 1, "{args:?} should fail");
        assert!(o.stderr.contains(want), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    }
    d.ok(&[
        "add-port",
        "br0",
        "a",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    let o = d.ctl(&[
        "add-port",
        "br0",
        "a2",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    assert!(o.stderr.contains("already used by port a"), "{}", o.stderr);
    // An interface whose MTU the buffers cannot hold is refused at add-port.
    let b = Ns::new('e', 'b', "10.209.0.2/24");
    must(&["ip", "link", "set", &b.host_if, "mtu", "9500"]);
    let o = d.ctl(&[
        "add-port",
        "br0",
        "b",
        "type=af-packet",
        &format!("ifname={}", b.host_if),
    ]);
    assert!(o.stderr.contains("MTU 9500"), "{}", o.stderr);
    // Tap MTU 9000 is accepted and applied.
    let tap = format!("vkpe{pid}j");
    d.ok(&["add-port", "br0", &tap, "type=tap", "mtu=9000"]);
    assert!(must(&["ip", "link", "show", &tap]).contains("mtu 9000"));
    assert!(d.ok(&["list-ports", "br0"]).contains("a"));
}

#[test]
fn openflow_packet_out_to_and_packet_in_from_a_kernel_port() {
    if !kernel_ok() || !testkit::have_ofctl() {
        return;
    }
    let (d, _dir, a, _b) = two_af_packet_ports('o', 210);
    let sock: PathBuf = d.run_dir.join("br0.mgmt");
    // Packet-out: an ARP request for 10.210.0.1 out of port a; namespace a answers it, and
    // a rule sends every ARP reply from port a to the controller (the monitor).
    let mac = a.exec(&["cat", &format!("/sys/class/net/{}/address", a.ns_if)]);
    let mac: Vec<u8> = mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0xd2, 0x01]);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0xd2, 0x01, 10, 210, 0, 9]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 210, 0, 1]);
    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
    let log = d.run_dir.join("monitor.log");
    let mut cmd = Command::new("ovs-ofctl");
    // Its unixctl socket goes to OVS_RUNDIR (default /var/run/openvswitch may not exist).
    cmd.env("OVS_RUNDIR", &d.run_dir);
    cmd.args([
        "-O",
        "OpenFlow13",
        "monitor",
        &format!("unix:{}", sock.display()),
        "65535",
    ]);
    let mon = testkit::Proc::spawn(cmd, log);
    std::thread::sleep(Duration::from_millis(500));
    testkit::ofctl_must(
        &sock,
        "add-flow",
        &["priority=100,in_port=1,arp,arp_op=2,actions=controller"],
    );
    let rx_before: u64 = a
        .exec(&[
            "cat",
            &format!("/sys/class/net/{}/statistics/rx_packets", a.ns_if),
        ])
        .trim()
        .parse()
        .unwrap();
    testkit::ofctl_must(
        &sock,
        "packet-out",
        &[&format!("in_port=controller packet={hex} actions=output:1")],
    );
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let rx: u64 = a
            .exec(&[
                "cat",
                &format!("/sys/class/net/{}/statistics/rx_packets", a.ns_if),
            ])
            .trim()
            .parse()
            .unwrap();
        let got_in = mon.log().contains("OFPT_PACKET_IN");
        if rx > rx_before && got_in {
            let l = mon.log();
            let mac_hex: String = mac
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            assert!(
                l.contains(&mac_hex) || l.contains("arp"),
                "packet-in is not the reply: {l}"
            );
            break;
        }
        assert!(
            Instant::now() < end,
            "packet-out arrived: {}; packet-in: {got_in}; monitor log:\n{}",
            rx > rx_before,
            mon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn namespace_reaches_a_virtio_endpoint() {
    if !kernel_ok() || common::peers::missing("dpdk-testpmd").is_some() {
        return;
    }
    let dir = tmp("x");
    let a = Ns::new('x', 'a', "10.211.0.1/24");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&[
        "add-port",
        "br0",
        "a",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    // testpmd (the VM stand-in, on core 1) answers ARP and ICMP echo for any address.
    let vu = common::peers::VirtioUser {
        path: dir.path().join("vm.sock"),
        mac: "02:00:00:00:d3:01".into(),
        extra: String::new(),
    };
    let prefix = format!("vkp-x-{}", std::process::id());
    let mut tp = common::peers::Testpmd::start(&prefix, &[vu], &["--forward-mode=icmpecho"]);
    tp.cmd("start");
    assert!(
        tp.out.wait_for("icmpecho", Duration::from_secs(60)),
        "testpmd did not start:\n{}",
        tp.out.text()
    );
    let end = Instant::now() + Duration::from_secs(30);
    while common::port_status(&d, "vm")["link"] != "up" {
        assert!(Instant::now() < end, "vhost-user link never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        a.ping_until("10.211.0.99", &[], 15),
        "namespace got no answer from the virtio endpoint\n{}",
        tp.out.text()
    );
    assert!(a.ping("10.211.0.99", &[]));
    let out = tp.quit();
    eprintln!(
        "testpmd: {}",
        out.lines()
            .filter(|l| l.contains("RX-packets"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}
