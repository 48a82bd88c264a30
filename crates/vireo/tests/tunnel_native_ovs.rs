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

use common::host::{kernel_ok, ping_count, Ns};
use common::tunnels::{
    host_mac, native_bridges, native_state, native_vm, no_offloads, ovs_tunnel_host,
    socket_packets, tmp, vireo_port_end, LinkGuard, NativeBridges, OvsTunnel,
};
use common::Daemon;

fn native_interop_with_ovs(kind: &str, t: char, net: u8, ipv6: bool) {
    let pid = std::process::id();
    let pre = if ipv6 { "v6n" } else { "thr" };
    let (brp, bri) = (format!("{pre}p{t}{pid}"), format!("{pre}i{t}{pid}"));
    // vireod's underlay bridge (a kernel tap as its internal port).
    let _tap = LinkGuard(brp.clone());
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
    let dir = tmp(pre, &t.to_string());
    let ovs_dir = tmp(pre, &format!("{t}ovs"));

    // Host C: Open vSwitch, native tunneling through brphy.
    let hc = Ns::create(pre, t, 'c');
    no_offloads(&hc, &hc.ns_if);
    let ovs = ovs_tunnel_host(
        &hc,
        ovs_dir.path(),
        &OvsTunnel {
            kind,
            port: "tun",
            local: &format!("{}/{plen}", under(2)),
            remote: &under(1),
            key: "42",
            overlay: &format!("{}/24", over(2)),
            mtu: Some(mtu),
        },
    );

    // VM A behind vireod.
    let vm = native_vm(pre, t, &format!("{}/24", over(1)), mtu, ipv6);
    // Both veths' root ends are Vireo's ports, not host interfaces: the host must not
    // answer ARP on them (nor, over IPv6, ND: only the internal port answers for the
    // address).
    vireo_port_end(&hc.host_if, ipv6);

    let d = Daemon::start_logged(dir.path(), &dir.path().join("vireod.log"));
    let prefix = if ipv6 {
        format!("fd{net}::/64")
    } else {
        format!("10.{net}.0.0/24")
    };
    native_bridges(
        &d,
        &NativeBridges {
            brp: &brp,
            phy_if: &hc.host_if,
            ours: &format!("{}/{plen}", under(1)),
            bri: &bri,
            tun: "tun",
            tun_opts: &[
                &format!("type={kind}"),
                &format!("remote_ip={}", under(2)),
                &format!("local_ip={}", under(1)),
                "key=42",
            ],
            vm_if: &vm.host_if,
        },
        &prefix,
    );

    assert!(
        vm.ping_until(&over(2), &[], 20),
        "VM A cannot reach OVS over {kind}: {}\nOVS: {}",
        native_state(&d),
        ovs.appctl(&["dpctl/dump-flows"])
    );
    let got = ping_count(&vm, &over(2), 5, &[]);
    assert!(got >= 4, "{kind}: ping lost {} of 5", 5 - got);
    // Full-size frames fit: the overlay MTU + outer headers (VXLAN and Geneve without options:
    // 50 over IPv4, 70 over IPv6).
    let size = (mtu - 28).to_string();
    let got = ping_count(&vm, &over(2), 3, &["-s", &size, "-M", "do"]);
    assert!(got >= 2, "{kind}: full-size pings lost {} of 3", 3 - got);

    let before = socket_packets(&d, "tun");
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
        socket_packets(&d, "tun"),
        before,
        "the tunnel port's socket carried traffic during the transfers (tx, rx)"
    );
    // Each side's neighbour cache has the other's tunnel-address MAC.
    let neigh = d.ok(&["tnl/neigh/show"]);
    let line = format!("{} {} dev {brp}", under(2), hc.dev_mac("brphy"));
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
    let ours = host_mac(&brp);
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
