//! Native tunneling against Open vSwitch 3.1's userspace datapath (`datapath_type=netdev`,
//! OVS's own native tunneling), VXLAN and Geneve: the native-path twins of
//! `tunnel.rs::vxlan_interop_with_the_ovs_userspace_datapath` (which uses the tunnel port's
//! UDP socket).
//!
//! Host C is a namespace running OVS: `brphy` holds the underlay veth and, on its LOCAL port,
//! the tunnel address .2; `brint` has the tunnel port (VNI 42) to vireod's .1 and holds the
//! overlay address .2 on its LOCAL port (MTU 1450). vireod (root namespace) has the underlay
//! bridge `thrp` (the veth's other end as an `af-packet` port, ARP off on it, the tunnel
//! address .1 on its internal port) and the overlay bridge `thri` with the tunnel port and VM
//! A (a namespace on an `af-packet` veth, MTU 1450). VM A pings host C's overlay address and
//! runs iperf3 TCP both ways; vireod's megaflows carry `tnl_push` and `tnl_pop`, its tunnel
//! port's socket carries none of the transfer, `tnl/neigh/show` has OVS's `brphy` MAC, and
//! OVS's `tnl/neigh/show` has vireod's internal port MAC.
//!
//! The same over an IPv6 underlay, Geneve (`native_geneve_over_ipv6_...`): underlay
//! fd44::/64, the overlay MTU 1430 (70 bytes of outer headers), the neighbours learned by ND.
//!
//! Names: namespaces `thr-T-X-PID`, interfaces `thrTXPID` (T = `x` VXLAN / `g` Geneve), the
//! bridges `thrpTPID` / `thriTPID`; over IPv6 the prefix is `v6n` (T = `6`); removed by Drop
//! guards, also when a test fails. Addresses: 10.242.0.0/24 and 192.168.242.0/24 (VXLAN),
//! 10.243.0.0/24 and 192.168.243.0/24 (Geneve), fd44::/64 and 192.168.244.0/24 (Geneve over
//! IPv6).
mod common;

use common::host::{kernel_ok, must, ping_count, sh, Ns};
use common::ovs::Ovs;
use common::Daemon;
use std::time::{Duration, Instant};

/// vireod's underlay bridge (a kernel tap as its internal port): deleted on drop, so that a
/// failed test does not leave it behind.
struct Tap(String);

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.0]);
    }
}

fn wait_for(d: &Daemon, cmd: &[&str], what: &str) -> String {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let out = d.ok(cmd);
        if out.contains(what) || Instant::now() > end {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mac(ns: Option<&Ns>, dev: &str) -> String {
    let path = format!("/sys/class/net/{dev}/address");
    match ns {
        Some(ns) => ns.exec(&["cat", &path]),
        None => must(&["cat", &path]),
    }
    .trim()
    .to_string()
}

/// (tx, rx) packets of the tunnel port's own UDP socket.
fn socket_packets(d: &Daemon) -> (u64, u64) {
    let s = d.json(&["port-stats", "tun"]);
    let g = |k: &str| s[0][k].as_u64().unwrap();
    (g("tx_packets"), g("rx_packets"))
}

fn native_interop_with_ovs(kind: &str, t: char, net: u8, ipv6: bool) {
    let pid = std::process::id();
    let pre = if ipv6 { "v6n" } else { "thr" };
    let (brp, bri) = (format!("{pre}p{t}{pid}"), format!("{pre}i{t}{pid}"));
    let _tap = Tap(brp.clone());
    let under = |h: u8| {
        if ipv6 {
            format!("fd{net}::{h}")
        } else {
            format!("10.{net}.0.{h}")
        }
    };
    let plen = if ipv6 { 64 } else { 24 };
    // Overlay MTU: 1500 less the outer IP + UDP + tunnel header + inner Ethernet.
    let mtu = if ipv6 { 1430 } else { 1450 };
    let over = |h: u8| format!("192.168.{net}.{h}");
    let dir = tempfile::Builder::new()
        .prefix(&format!("{pre}-{t}-"))
        .tempdir()
        .unwrap();
    let ovs_dir = tempfile::Builder::new()
        .prefix(&format!("{pre}-{t}ovs-"))
        .tempdir()
        .unwrap();
    let mut nodad = vec![];
    if ipv6 {
        nodad.push("nodad");
    }

    // Host C: Open vSwitch, native tunneling through brphy.
    let hc = Ns::create(pre, t, 'c');
    hc.exec(&[
        "ethtool", "-K", &hc.ns_if, "tx", "off", "tso", "off", "gso", "off",
    ]);
    let ovs = Ovs::start(&hc, ovs_dir.path());
    for br in ["brphy", "brint"] {
        ovs.add_netdev_br(br);
    }
    ovs.vsctl(&["add-port", "brphy", &hc.ns_if]);
    let a = format!("{}/{plen}", under(2));
    let mut add = vec!["ip", "addr", "add", &a, "dev", "brphy"];
    add.extend_from_slice(&nodad);
    hc.exec(&add);
    hc.exec(&["ip", "link", "set", "brphy", "up"]);
    ovs.vsctl(&[
        "add-port",
        "brint",
        "tun",
        "--",
        "set",
        "interface",
        "tun",
        &format!("type={kind}"),
        &format!("options:remote_ip={}", under(1)),
        "options:key=42",
    ]);
    hc.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{}/24", over(2)),
        "dev",
        "brint",
    ]);
    hc.exec(&["ip", "link", "set", "brint", "mtu", &mtu.to_string(), "up"]);

    // VM A behind vireod.
    let vm = Ns::create(pre, t, 'v');
    vm.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{}/24", over(1)),
        "dev",
        &vm.ns_if,
    ]);
    vm.exec(&["ip", "link", "set", &vm.ns_if, "mtu", &mtu.to_string()]);
    vm.exec(&[
        "ethtool", "-K", &vm.ns_if, "tx", "off", "tso", "off", "gso", "off",
    ]);
    // Both veths' root ends are Vireo's ports, not host interfaces: the host must not
    // answer ARP on them.
    for i in [&hc.host_if, &vm.host_if] {
        must(&["ip", "link", "set", "dev", i, "arp", "off", "up"]);
        if ipv6 {
            // Nor ND: with no IPv6 there, only the internal port answers for the address.
            must(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{i}.disable_ipv6=1"),
            ]);
        }
    }

    let d = Daemon::start_logged(dir.path(), &dir.path().join("vireod.log"));
    d.ok(&["add-br", &brp]);
    d.ok(&[
        "add-port",
        &brp,
        "phy",
        "type=af-packet",
        &format!("ifname={}", hc.host_if),
        "offloads=false",
    ]);
    if ipv6 {
        must(&["ip", "link", "set", &brp, "up"]);
    }
    let a = format!("{}/{plen}", under(1));
    let mut add = vec!["ip", "addr", "add", &a, "dev", &brp];
    add.extend_from_slice(&nodad);
    must(&add);
    d.ok(&["add-br", &bri, "internal=false"]);
    d.ok(&[
        "add-port",
        &bri,
        "tun",
        &format!("type={kind}"),
        &format!("remote_ip={}", under(2)),
        &format!("local_ip={}", under(1)),
        "key=42",
    ]);
    d.ok(&[
        "add-port",
        &bri,
        "vm",
        "type=af-packet",
        &format!("ifname={}", vm.host_if),
        "offloads=false",
    ]);
    let prefix = if ipv6 {
        format!("fd{net}::/64")
    } else {
        format!("10.{net}.0.0/24")
    };
    let connected = format!("{prefix} dev {brp} src {} (connected)", under(1));
    assert!(wait_for(&d, &["route/show"], &connected).contains(&connected));

    assert!(
        vm.ping_until(&over(2), &[], 20),
        "VM A cannot reach OVS over {kind}: {}\n{}\nOVS: {}",
        d.ok(&["tnl/neigh/show"]),
        d.ok(&["dump-megaflows"]),
        ovs.appctl(&["dpctl/dump-flows"])
    );
    let got = ping_count(&vm, &over(2), 5, &[]);
    assert!(got >= 4, "{kind}: ping lost {} of 5", 5 - got);
    // Full-size frames fit: the overlay MTU + outer headers (VXLAN and Geneve without options:
    // 50 over IPv4, 70 over IPv6).
    let size = (mtu - 28).to_string();
    let got = ping_count(&vm, &over(2), 3, &["-s", &size, "-M", "do"]);
    assert!(got >= 2, "{kind}: full-size pings lost {} of 3", 3 - got);

    let before = socket_packets(&d);
    let dst = over(2);
    for reverse in [false, true] {
        let (bytes, report) = vm.iperf_tcp(&hc, &dst, reverse);
        let way = if reverse {
            "OVS -> VM A"
        } else {
            "VM A -> OVS"
        };
        eprintln!("native {kind} iperf3 TCP {way}: {bytes} bytes in 2 s");
        assert!(
            bytes > 1_000_000,
            "native {kind} TCP {way} moved only {bytes} bytes: {}",
            report
        );
    }

    // The native path carried it: push and pop in the megaflows, nothing through the socket.
    let flows = d.ok(&["dump-megaflows"]);
    let push = format!(
        "tnl_push(header(src={},dst={},dst_port={}",
        under(1),
        under(2),
        if kind == "geneve" { 6081 } else { 4789 }
    );
    assert!(flows.contains(&push), "no {push}: {flows}");
    assert!(flows.contains("tnl_pop("), "{flows}");
    assert_eq!(
        socket_packets(&d),
        before,
        "the tunnel port's socket carried traffic during the transfers (tx, rx)"
    );
    // Each side's neighbour cache has the other's tunnel-address MAC.
    let neigh = d.ok(&["tnl/neigh/show"]);
    let line = format!("{} {} dev {brp}", under(2), mac(Some(&hc), "brphy"));
    assert!(neigh.contains(&line), "no {line}: {neigh}");
    if ipv6 {
        let j = d.json(&["tnl/neigh/show"]);
        let e = j["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["ip"] == under(2).as_str())
            .cloned();
        assert!(
            e.as_ref()
                .is_some_and(|e| e["via"] == "nd" || e["via"] == "decap"),
            "{j}"
        );
    }
    let ovs_neigh = ovs.appctl(&["tnl/neigh/show"]);
    let ours = mac(None, &brp);
    assert!(
        ovs_neigh.contains(&under(1)) && ovs_neigh.contains(&ours),
        "OVS has not learned {} at {ours}: {ovs_neigh}",
        under(1)
    );
    let drops = &d.json(&["tnl/neigh/show"])["native_drops"];
    eprintln!("native {kind} drops {drops}");
    drop(ovs);
}

/// The kernel and every peer these tests need (a missing one fails under
/// `VIREO_REQUIRE_PEERS=1`).
fn peers_present() -> bool {
    kernel_ok()
        && testkit::require_peer("iperf3", "iperf3")
        && testkit::require_peer("ethtool", "ethtool")
        && testkit::require_peer("ovs-vswitchd", "openvswitch-switch")
        && testkit::require_peer("ovsdb-server", "openvswitch-switch")
        && testkit::require_peer("ovs-appctl", "openvswitch-common")
}

#[test]
fn native_vxlan_interop_with_the_ovs_userspace_datapath() {
    if !peers_present() {
        return;
    }
    native_interop_with_ovs("vxlan", 'x', 242, false);
}

#[test]
fn native_geneve_interop_with_the_ovs_userspace_datapath() {
    if !peers_present() {
        return;
    }
    native_interop_with_ovs("geneve", 'g', 243, false);
}

#[test]
fn native_geneve_over_ipv6_interop_with_the_ovs_userspace_datapath() {
    if !peers_present() {
        return;
    }
    native_interop_with_ovs("geneve", '6', 44, true);
}
