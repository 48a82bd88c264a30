//! Native tunneling over an IPv6 underlay (issue 12) against the real kernel.
//!
//! Routes: the IPv6 address of a bridge's internal port becomes a connected route (its
//! link-local fe80:: address does not), `route/add|del|show` take IPv6 prefixes and refuse a
//! gateway of the other family, and the host's own routes through the internal port (`ip
//! route add`, IPv6 and IPv4, read over rtnetlink) appear as `(kernel)` and go with `ip route
//! del`.
//!
//! Interop with the Linux kernel's VXLAN device over IPv6: host U is a namespace whose veth
//! faces vireod's underlay bridge (`af-packet` port; the internal port holds the tunnel
//! address fd52::1, whose Neighbor Solicitations the host kernel answers); VM V is a namespace
//! on an `af-packet` port of the overlay bridge with the `vxlan` port (`remote_ip=fd52::2`).
//! Ping and an iperf3 TCP transfer cross; the megaflows carry the IPv6 `tnl_push`/`tnl_pop`;
//! the tunnel port's socket carries nothing; host U's MAC is learned through ND (`via nd`);
//! a /128 through a dead gateway (by `route/add`, then by the host's own `ip -6 route`) stops
//! the traffic and counts misses and Neighbor Solicitations; a frame too big for the underlay after the 56 bytes of IPv6 encapsulation
//! is dropped and counted.
//!
//! Names: namespaces `v6n-T-X-PID`, interfaces `v6nTXPID`, bridges `v6nbTPID`, all removed
//! by Drop guards, also when a test fails.
mod common;

use common::host::{kernel_ok, must, sh, Ns};
use common::tunnels::{
    add_user_route, assert_flush_relearns, assert_oversize_dropped, assert_refused, host_route,
    kernel_vxlan_host, native_bridges, native_state, native_vm, neigh_counters, ping_n,
    ping_until_done, pings_answered, socket_packets, tmp, wait_decap_seen, wait_for,
    wait_push_megaflows_gone, LinkGuard, NativeBridges,
};
use common::Daemon;

#[test]
fn ipv6_routes_follow_the_internal_port_and_route_commands_take_ipv6() {
    if !kernel_ok() {
        return;
    }
    let pid = std::process::id();
    let br = format!("v6nbr{pid}");
    // The bridge's kernel interface (the internal port), removed on drop.
    let _link = LinkGuard(br.clone());
    let dir = tmp("v6n", "r");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", &br]);
    must(&["ip", "link", "set", &br, "up"]);
    must(&["ip", "addr", "add", "fd51::1/64", "dev", &br, "nodad"]);
    let connected = format!("fd51::/64 dev {br} src fd51::1 (connected)");
    let shown = wait_for(&d, &["route/show"], &connected, true);
    assert!(shown.contains(&connected), "route/show: {shown}");
    assert!(!shown.contains("fe80"), "a link-local route: {shown}");

    add_user_route(&d, "fd59::/48", &br, "fd51::fe");
    assert_refused(
        &d,
        &[
            (vec!["route/add", "fd59::1/48", br.as_str()], "host bits"),
            (
                vec!["route/add", "fd59::/129", br.as_str()],
                "prefix length",
            ),
            (
                vec!["route/add", "fd58::/48", br.as_str(), "10.0.0.1"],
                "family",
            ),
            (
                vec!["route/add", "10.58.0.0/16", br.as_str(), "fd51::fe"],
                "family",
            ),
            (vec!["route/del", "fd58::/48"], "no route/add route"),
        ],
    );
    d.ok(&["route/del", "fd59::/48"]);
    assert!(!d.ok(&["route/show"]).contains("fd59::/48"));

    // The host's own routes through the internal port (rtnetlink), IPv6 and IPv4, come and
    // go with `ip route`; routes through other devices (the host's default) never show.
    must(&["ip", "addr", "add", "10.51.0.1/24", "dev", &br]);
    host_route("add", "fd5a::/48", Some("fd51::fe"), &br);
    host_route("add", "10.59.0.0/16", Some("10.51.0.254"), &br);
    let k6 = format!("fd5a::/48 dev {br} via fd51::fe (kernel)");
    let k4 = format!("10.59.0.0/16 dev {br} via 10.51.0.254 (kernel)");
    let shown = wait_for(&d, &["route/show"], &k4, true);
    assert!(
        shown.contains(&k6) && shown.contains(&k4),
        "route/show: {shown}"
    );
    assert!(
        !shown.contains("0.0.0.0/0") && !shown.contains("::/0"),
        "a route not through an internal port: {shown}"
    );
    let j = d.json(&["route/show"]);
    assert!(j
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["prefix"] == "fd5a::/48" && r["origin"] == "kernel"));
    host_route("del", "fd5a::/48", None, &br);
    host_route("del", "10.59.0.0/16", None, &br);
    let shown = wait_for(&d, &["route/show"], "(kernel)", false);
    assert!(!shown.contains("(kernel)"), "route/show: {shown}");
    must(&["ip", "addr", "del", "10.51.0.1/24", "dev", &br]);
    must(&["ip", "addr", "del", "fd51::1/64", "dev", &br]);
    let shown = wait_for(&d, &["route/show"], "fd51::/64", false);
    assert!(!shown.contains("fd51::/64"), "route/show: {shown}");
    d.ok(&["del-br", &br]);
}

/// Removes a host IPv6 route (`PREFIX dev DEV`) on drop, if a test left it.
struct Route6(String);

impl Drop for Route6 {
    fn drop(&mut self) {
        let mut a = vec!["ip", "-6", "route", "del"];
        a.extend(self.0.split_whitespace());
        let _ = sh(&a);
    }
}

/// One kernel VXLAN peer over IPv6 and one VM behind vireod (see the module comment).
struct Rig {
    // Field order is drop order: the daemon goes before the namespaces and bridges.
    d: Daemon,
    hu: Ns,
    vm: Ns,
    brp: String,
    bri: String,
    _links: (LinkGuard, LinkGuard),
    _dir: tempfile::TempDir,
}

/// Builds the rig for test `t` on underlay `net`::/64 (vireod `net`::1, host U `net`::2) and
/// overlay 192.168.`o`.0/24; the `vx` port gets `vx_opts`.
fn rig(t: char, net: &str, o: u8, vx_opts: &[&str]) -> Option<Rig> {
    if !kernel_ok()
        || !testkit::require_peer("iperf3", "iperf3")
        || !testkit::require_peer("ethtool", "ethtool")
    {
        return None;
    }
    let pid = std::process::id();
    let (brp, bri) = (format!("v6nb{t}p{pid}"), format!("v6nb{t}i{pid}"));
    let links = (LinkGuard(brp.clone()), LinkGuard(bri.clone()));
    let dir = tmp("v6n", "n");
    let (ours, theirs) = (format!("{net}::1"), format!("{net}::2"));
    // Host U: underlay NET::2, kernel VXLAN VNI 42 to vireod's NET::1.
    // The root namespace's ends of the veths are Vireo's ports, not host interfaces.
    // With IPv6 off there, only the internal port answers ND for NET::1.
    let hu = kernel_vxlan_host(
        "v6n",
        t,
        &format!("{theirs}/64"),
        &ours,
        &format!("192.168.{o}.2/24"),
    );
    let vx_mtu: u32 = hu
        .exec(&["cat", "/sys/class/net/vx0/mtu"])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        vx_mtu, 1430,
        "the kernel's VXLAN over IPv6 leaves 1430 of 1500"
    );
    // VM V: overlay 192.168.O.1, MTU 1430 as the kernel's VXLAN device.
    let vm = native_vm("v6n", t, &format!("192.168.{o}.1/24"), 1430, true);

    let d = Daemon::start(dir.path());
    let mut tun_opts = vec!["type=vxlan"];
    tun_opts.extend_from_slice(vx_opts);
    native_bridges(
        &d,
        &NativeBridges {
            brp: &brp,
            phy_if: &hu.host_if,
            ours: &format!("{ours}/64"),
            bri: &bri,
            tun: "vx",
            tun_opts: &tun_opts,
            vm_if: &vm.host_if,
        },
        &format!("{net}::/64"),
    );
    Some(Rig {
        d,
        hu,
        vm,
        brp,
        bri,
        _links: links,
        _dir: dir,
    })
}

#[test]
fn native_vxlan_over_ipv6_interop_with_the_kernel() {
    let Some(r) = rig(
        'n',
        "fd52",
        52,
        &["remote_ip=fd52::2", "local_ip=fd52::1", "key=42"],
    ) else {
        return;
    };
    let (d, hu, vm, brp) = (&r.d, &r.hu, &r.vm, r.brp.as_str());
    let socket_at_start = socket_packets(d, "vx");

    assert!(
        vm.ping_until("192.168.52.2", &[], 20),
        "VM V cannot reach the kernel's VXLAN endpoint over IPv6: {}",
        native_state(d)
    );
    let ok = pings_answered(vm, "192.168.52.2", 5);
    assert!(ok >= 4, "only {ok}/5 pings after the first");
    // The host kernel answered host U's Neighbor Solicitation for fd52::1 on the internal
    // port (Vireo does not answer ND itself): host U has the internal port's MAC.
    let brp_mac = std::fs::read_to_string(format!("/sys/class/net/{brp}/address")).unwrap();
    let their_neigh = hu.exec(&["ip", "-6", "neigh", "show", "fd52::1"]);
    assert!(
        their_neigh.contains(brp_mac.trim()),
        "host U's neighbour entry for fd52::1: {their_neigh} (internal port {brp_mac})"
    );
    // Host U's underlay MAC, learned from Neighbor Discovery (its NA to our NS, or its own
    // NS for fd52::1 answered by the host kernel on the internal port).
    let line = format!("fd52::2 {} dev {brp}", hu.dev_mac(&hu.ns_if));
    let neigh = d.ok(&["tnl/neigh/show"]);
    assert!(neigh.contains(&line), "tnl/neigh/show: {neigh}");
    let j = d.json(&["tnl/neigh/show"]);
    let entry = j["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ip"] == "fd52::2")
        .cloned()
        .unwrap();
    assert_eq!(entry["via"], "nd", "{j}");

    // Decapsulated traffic refreshes the entry (outer IPv6 source).
    assert!(wait_decap_seen(d) > 0, "{}", d.ok(&["tnl/neigh/show"]));

    // TCP across: more than 1 MB in 2 s.
    let (bytes, report) = vm.iperf_tcp(hu, "192.168.52.2", false);
    eprintln!("native vxlan/IPv6 iperf3 TCP VM V -> host U: {bytes} bytes in 2 s");
    assert!(bytes > 1_000_000, "iperf3 moved {bytes} bytes: {report}");

    // The native path did it: IPv6 push and pop in the megaflows, nothing through the socket
    // (not even before: every packet since the bridge was set up went natively).
    let flows = d.ok(&["dump-megaflows"]);
    assert!(
        flows.contains("tnl_push(header(src=fd52::1,dst=fd52::2,dst_port=4789,vni=42)"),
        "{flows}"
    );
    assert!(flows.contains("tnl_pop("), "{flows}");
    assert_eq!(
        socket_packets(d, "vx"),
        socket_at_start,
        "the tunnel port's socket carried traffic (tx, rx)"
    );
    // Nothing refused on the way in.
    let drops = d.json(&["tnl/neigh/show"])["native_drops"].clone();
    for r in [
        "outer-bad-udp-checksum",
        "outer-ext-header",
        "outer-bad-l2",
        "outer-truncated",
    ] {
        assert_eq!(drops[r], 0, "{r}: {drops}");
    }

    // A /128 through a gateway nobody answers for: misses and Neighbor Solicitations are
    // counted and the traffic stops; removing it brings the direct route, and traffic, back.
    let before = neigh_counters(d);
    d.ok(&["route/add", "fd52::2/128", brp, "fd52::99"]);
    let missed = || {
        let c = neigh_counters(d);
        c["miss_drops"].as_u64() > before["miss_drops"].as_u64()
            && c["ns_requests"].as_u64() > before["ns_requests"].as_u64()
    };
    assert!(
        ping_until_done(vm, "192.168.52.2", missed),
        "megaflows kept the old route: {}",
        native_state(d)
    );
    // The miss counters already move while the revalidation re-translates; the old push
    // megaflows leave the PMDs just after: wait for that before asserting the traffic stops.
    wait_push_megaflows_gone(d);
    let p = ping_n(vm, "192.168.52.2", 2, &[]);
    assert!(
        !p.status.success(),
        "traffic crossed through a dead gateway: {}\n{}\n{}\n{}",
        String::from_utf8_lossy(&p.stdout),
        d.ok(&["route/show"]),
        d.ok(&["tnl/neigh/show"]),
        d.ok(&["dump-megaflows"])
    );
    assert!(!d.ok(&["tnl/neigh/show"]).contains("fd52::99"));
    d.ok(&["route/del", "fd52::2/128"]);
    assert!(
        vm.ping_until("192.168.52.2", &[], 10),
        "no traffic after the route went"
    );
    // The same through the host's own routing table (read over rtnetlink): a kernel /128
    // via the dead gateway stops the traffic, its removal brings it back.
    let before = neigh_counters(d);
    host_route("add", "fd52::2/128", Some("fd52::98"), brp);
    let _route = Route6(format!("fd52::2/128 dev {brp}"));
    let missed = || neigh_counters(d)["ns_requests"].as_u64() > before["ns_requests"].as_u64();
    assert!(
        ping_until_done(vm, "192.168.52.2", missed)
            && d.ok(&["route/show"]).contains("fd52::2/128 dev"),
        "the kernel route was not used: {}\n{}",
        d.ok(&["route/show"]),
        d.ok(&["tnl/neigh/show"])
    );
    host_route("del", "fd52::2/128", None, brp);
    assert!(
        vm.ping_until("192.168.52.2", &[], 10),
        "no traffic after the kernel route went"
    );
    // A flush empties the cache; traffic goes on (learned again by ND).
    assert_flush_relearns(d, vm, "192.168.52.2");

    // A frame that does not fit the underlay's 1500 after IPv6 encapsulation (56 bytes) is
    // dropped and counted: VM V at MTU 1500 sends 1431-byte IP packets with DF.
    assert_oversize_dropped(d, vm, "192.168.52.2", "1403");
    // 1430 still fits.
    assert!(
        vm.ping_until("192.168.52.2", &["-M", "do", "-s", "1402"], 5),
        "a frame that fits did not cross"
    );
}

/// Flow-based over IPv6 (`remote_ip=flow,key=flow,local_ip=fd53::1`): rules written with
/// ovs-ofctl set `tun_ipv6_dst` and match `tun_ipv6_src`; the native path carries it (the
/// socket nothing); the megaflows match the outer IPv6 source; a rule for another source
/// stops the traffic.
#[test]
fn flow_based_native_vxlan_over_ipv6_with_tun_ipv6_fields() {
    if !testkit::have_ofctl() {
        return;
    }
    let Some(r) = rig(
        'f',
        "fd53",
        53,
        &["remote_ip=flow", "key=flow", "local_ip=fd53::1"],
    ) else {
        return;
    };
    let (d, vm) = (&r.d, &r.vm);
    let socket_at_start = socket_packets(d, "vx");
    // OpenFlow ports in add-port order: vx 1, vm 2.
    let sock = d.run_dir.join(format!("{}.mgmt", r.bri));
    testkit::ofctl_must(&sock, "del-flows", &[]);
    for f in [
        "in_port=2,actions=set_field:42->tun_id,set_field:fd53::2->tun_ipv6_dst,output:1",
        "in_port=1,tun_id=42,tun_ipv6_src=fd53::2,actions=output:2",
    ] {
        testkit::ofctl_must(&sock, "add-flow", &[f]);
    }
    let dump = testkit::ofctl_must(&sock, "dump-flows", &[]);
    assert!(
        dump.contains("tun_id=0x2a,tun_ipv6_src=fd53::2,in_port=1 actions=output:2"),
        "{dump}"
    );
    assert!(
        vm.ping_until("192.168.53.2", &[], 20),
        "no ping through the flow-based IPv6 tunnel: {}",
        native_state(d)
    );
    let flows = d.ok(&["dump-megaflows"]);
    assert!(
        flows.contains("tnl_push(header(src=fd53::1,dst=fd53::2,dst_port=4789,vni=42)"),
        "{flows}"
    );
    assert!(flows.contains("tun_ipv6_src=fd53::2"), "{flows}");
    assert_eq!(
        socket_packets(d, "vx"),
        socket_at_start,
        "the socket carried traffic"
    );
    // Only datagrams from fd53::2 reach the VM: a rule for another source stops them.
    testkit::ofctl_must(
        &sock,
        "mod-flows",
        &["in_port=1,tun_id=42,tun_ipv6_src=fd53::2,actions=drop"],
    );
    testkit::ofctl_must(
        &sock,
        "add-flow",
        &["in_port=1,tun_id=42,tun_ipv6_src=fd53::9,actions=output:2"],
    );
    let p = ping_n(vm, "192.168.53.2", 2, &[]);
    assert!(
        !p.status.success(),
        "replies from fd53::2 matched a rule for fd53::9: {}",
        d.ok(&["dump-megaflows"])
    );
}
