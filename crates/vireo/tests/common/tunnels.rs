//! Fixtures shared by the tunnel tests (`tunnel*.rs`): the namespaces and veths of "VMs" and
//! peer hosts, a kernel VXLAN device, Open vSwitch as a tunnel endpoint, vireod's bridges for
//! socket-based and native tunneling, and the waits and pings those tests repeat. Everything
//! here runs on the test's own thread; what it creates is removed by Drop guards (`Ns`,
//! [`LinkGuard`], `Ovs`), also when a test fails.
use super::host::{must, sh, Ns};
use super::ovs::Ovs;
use super::Daemon;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// A kernel link (a veth, or a bridge's internal port) deleted on drop, so that a failed test
/// does not leave it behind.
pub struct LinkGuard(pub String);

impl Drop for LinkGuard {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.0]);
    }
}

/// A temporary directory named `PREFIX-TAG-…`.
pub fn tmp(prefix: &str, tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-{tag}-"))
        .tempdir()
        .unwrap()
}

impl Ns {
    /// `Ns::create` with the root end up and, if given, `addr` on the namespace end: a VM or
    /// peer host whose root end is an af-packet port or holds an underlay address.
    pub fn up(prefix: &str, test: char, side: char, addr: Option<&str>) -> Ns {
        let ns = Ns::create(prefix, test, side);
        must(&["ip", "link", "set", &ns.host_if, "up"]);
        if let Some(a) = addr {
            ns.exec(&["ip", "addr", "add", a, "dev", &ns.ns_if]);
        }
        ns
    }

    /// The MAC address of `dev` inside the namespace.
    pub fn dev_mac(&self, dev: &str) -> String {
        self.exec(&["cat", &format!("/sys/class/net/{dev}/address")])
            .trim()
            .to_string()
    }
}

/// The MAC address of `dev` in the root namespace.
pub fn host_mac(dev: &str) -> String {
    must(&["cat", &format!("/sys/class/net/{dev}/address")])
        .trim()
        .to_string()
}

/// `ip addr add CIDR dev DEV` (inside `ns` if given), `nodad` for an IPv6 address.
pub fn add_addr(ns: Option<&Ns>, cidr: &str, dev: &str) {
    let mut a = vec!["ip", "addr", "add", cidr, "dev", dev];
    if cidr.contains(':') {
        a.push("nodad");
    }
    match ns {
        Some(ns) => ns.exec(&a),
        None => must(&a),
    };
}

/// Checksum offload, TSO and GSO off on `dev` inside `ns`: it stands for a wire (or a guest
/// NIC), so its kernel finishes checksums and segments itself.
pub fn no_offloads(ns: &Ns, dev: &str) {
    ns.exec(&[
        "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off",
    ]);
}

/// A veth's root end that is Vireo's port, not a host interface: up, with ARP (and, with
/// `ipv6`, IPv6) off, so that only Vireo's internal port answers for the tunnel address.
pub fn vireo_port_end(host_if: &str, ipv6: bool) {
    must(&["ip", "link", "set", "dev", host_if, "arp", "off", "up"]);
    if ipv6 {
        must(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{host_if}.disable_ipv6=1"),
        ]);
    }
}

/// A Linux kernel VXLAN device.
pub struct Vxlan<'a> {
    pub name: &'a str,
    pub vni: &'a str,
    /// vireod's underlay address.
    pub remote: &'a str,
    /// The device's own underlay address.
    pub local: &'a str,
    pub dstport: &'a str,
    /// The underlay device.
    pub dev: &'a str,
    /// The overlay address (CIDR) on the device.
    pub addr: &'a str,
    /// Checksum and segmentation offloads off on the device too.
    pub no_offloads: bool,
}

/// Creates `vx` inside `ns`, with its address, up.
pub fn kernel_vxlan(ns: &Ns, vx: &Vxlan) {
    ns.exec(&[
        "ip", "link", "add", vx.name, "type", "vxlan", "id", vx.vni, "remote", vx.remote, "local",
        vx.local, "dstport", vx.dstport, "dev", vx.dev,
    ]);
    if vx.no_offloads {
        no_offloads(ns, vx.name);
    }
    ns.exec(&["ip", "addr", "add", vx.addr, "dev", vx.name]);
    ns.exec(&["ip", "link", "set", vx.name, "up"]);
}

/// Host U of the native tunnel tests: namespace side `u` of test `t` whose veth holds
/// `theirs` (CIDR) and stands for a wire (no offloads), with a kernel VXLAN device `vx0` (VNI
/// 42, port 4789, no offloads) to vireod's `ours` holding `overlay` (CIDR); the veth's root
/// end is a Vireo port ([`vireo_port_end`]).
pub fn kernel_vxlan_host(prefix: &str, t: char, theirs: &str, ours: &str, overlay: &str) -> Ns {
    let hu = Ns::create(prefix, t, 'u');
    add_addr(Some(&hu), theirs, &hu.ns_if);
    no_offloads(&hu, &hu.ns_if);
    kernel_vxlan(
        &hu,
        &Vxlan {
            name: "vx0",
            vni: "42",
            remote: ours,
            local: theirs.split('/').next().unwrap(),
            dstport: "4789",
            dev: &hu.ns_if,
            addr: overlay,
            no_offloads: true,
        },
    );
    vireo_port_end(&hu.host_if, theirs.contains(':'));
    hu
}

/// Open vSwitch's side of a tunnel (userspace datapath, native tunneling).
pub struct OvsTunnel<'a> {
    /// `vxlan` or `geneve`.
    pub kind: &'a str,
    /// The tunnel port's name on `brint`.
    pub port: &'a str,
    /// OVS's tunnel address (CIDR), on `brphy`'s LOCAL port.
    pub local: &'a str,
    /// vireod's tunnel address.
    pub remote: &'a str,
    pub key: &'a str,
    /// The overlay address (CIDR) on `brint`'s LOCAL port.
    pub overlay: &'a str,
    /// `brint`'s MTU, if not the default.
    pub mtu: Option<u32>,
}

/// Starts OVS in `hc` (database and sockets in `dir`): `brphy` holds `hc`'s veth and the
/// tunnel address, `brint` the tunnel port and the overlay address; both up.
pub fn ovs_tunnel_host(hc: &Ns, dir: &Path, t: &OvsTunnel) -> Ovs {
    let ovs = Ovs::start(hc, dir);
    for br in ["brphy", "brint"] {
        ovs.add_netdev_br(br);
    }
    ovs.vsctl(&["add-port", "brphy", &hc.ns_if]);
    add_addr(Some(hc), t.local, "brphy");
    hc.exec(&["ip", "link", "set", "brphy", "up"]);
    ovs.vsctl(&[
        "add-port",
        "brint",
        t.port,
        "--",
        "set",
        "interface",
        t.port,
        &format!("type={}", t.kind),
        &format!("options:remote_ip={}", t.remote),
        &format!("options:key={}", t.key),
    ]);
    hc.exec(&["ip", "addr", "add", t.overlay, "dev", "brint"]);
    let mtu = t.mtu.map(|m| m.to_string());
    let mut up = vec!["ip", "link", "set", "brint"];
    if let Some(m) = &mtu {
        up.extend_from_slice(&["mtu", m]);
    }
    up.push("up");
    hc.exec(&up);
    ovs
}

/// Host C running OVS ([`ovs_tunnel_host`], `tun`; database in `dir`) and VM A for a
/// socket-based tunnel: host C's veth root end (up) holds vireod's underlay address `ours`
/// (CIDR); VM A is namespace side `v` of test `t` with `vm_addr` (CIDR) at `vm_mtu`, its root
/// end up for an af-packet port. Returned as (host C, VM A, OVS).
pub fn ovs_peer_and_vm(
    prefix: &str,
    t: char,
    ours: &str,
    vm_addr: &str,
    vm_mtu: u32,
    dir: &Path,
    tun: &OvsTunnel,
) -> (Ns, Ns, Ovs) {
    let hc = Ns::up(prefix, t, 'c', None);
    must(&["ip", "addr", "add", ours, "dev", &hc.host_if]);
    let vm = Ns::up(prefix, t, 'v', Some(vm_addr));
    vm.exec(&["ip", "link", "set", &vm.ns_if, "mtu", &vm_mtu.to_string()]);
    let ovs = ovs_tunnel_host(&hc, dir, tun);
    (hc, vm, ovs)
}

/// `add-port BR NAME OPTS...`.
pub fn add_port(d: &Daemon, br: &str, name: &str, opts: &[&str]) {
    let mut a = vec!["add-port", br, name];
    a.extend_from_slice(opts);
    d.ok(&a);
}

/// `add-port BR NAME type=af-packet ifname=IFNAME EXTRA...`.
pub fn add_af_packet(d: &Daemon, br: &str, name: &str, ifname: &str, extra: &[&str]) {
    let ifname = format!("ifname={ifname}");
    let mut opts = vec!["type=af-packet", ifname.as_str()];
    opts.extend_from_slice(extra);
    add_port(d, br, name, &opts);
}

/// vireod's bridge `br0` (no internal port) for a socket-based tunnel: an af-packet port per
/// `(name, ifname)` of `vms`, in order, then the tunnel port `tun` with `opts`.
pub fn socket_tunnel_br0(d: &Daemon, vms: &[(&str, &str)], tun: &str, opts: &[&str]) {
    d.ok(&["add-br", "br0", "internal=false"]);
    for (name, ifname) in vms {
        add_af_packet(d, "br0", name, ifname, &[]);
    }
    add_port(d, "br0", tun, opts);
}

/// vireod's two bridges for native tunneling.
pub struct NativeBridges<'a> {
    /// The underlay bridge: its internal port holds the tunnel address.
    pub brp: &'a str,
    /// The root end of the underlay veth, its af-packet port `phy`.
    pub phy_if: &'a str,
    /// vireod's tunnel address (CIDR).
    pub ours: &'a str,
    /// The overlay bridge (no internal port).
    pub bri: &'a str,
    /// The tunnel port's name and add-port options.
    pub tun: &'a str,
    pub tun_opts: &'a [&'a str],
    /// The root end of the VM's veth, the overlay's af-packet port `vm`.
    pub vm_if: &'a str,
}

/// Sets up `b` on `d` (OpenFlow ports of the overlay bridge: the tunnel 1, `vm` 2; the
/// af-packet ports without offloads) and asserts the tunnel address's connected route, whose
/// prefix is `prefix`, appears.
pub fn native_bridges(d: &Daemon, b: &NativeBridges, prefix: &str) {
    d.ok(&["add-br", b.brp]);
    add_af_packet(d, b.brp, "phy", b.phy_if, &["offloads=false"]);
    if b.ours.contains(':') {
        must(&["ip", "link", "set", b.brp, "up"]);
    }
    add_addr(None, b.ours, b.brp);
    d.ok(&["add-br", b.bri, "internal=false"]);
    add_port(d, b.bri, b.tun, b.tun_opts);
    add_af_packet(d, b.bri, "vm", b.vm_if, &["offloads=false"]);
    let src = b.ours.split('/').next().unwrap();
    let connected = format!("{prefix} dev {} src {src} (connected)", b.brp);
    let shown = wait_for(d, &["route/show"], &connected, true);
    assert!(shown.contains(&connected), "route/show: {shown}");
}

/// A VM behind vireod for the native tunnel tests: namespace side `v` of test `t`, `addr`
/// (CIDR) and `mtu` on its veth, no offloads (its kernel finishes checksums), the root end
/// a Vireo port ([`vireo_port_end`]).
pub fn native_vm(prefix: &str, t: char, addr: &str, mtu: u32, ipv6: bool) -> Ns {
    let vm = Ns::create(prefix, t, 'v');
    vm.exec(&["ip", "addr", "add", addr, "dev", &vm.ns_if]);
    vm.exec(&["ip", "link", "set", &vm.ns_if, "mtu", &mtu.to_string()]);
    no_offloads(&vm, &vm.ns_if);
    vireo_port_end(&vm.host_if, ipv6);
    vm
}

/// Runs `cmd` until its output contains `what` (`present`) or no longer does (`!present`),
/// for at most 5 s; returns the last output.
pub fn wait_for(d: &Daemon, cmd: &[&str], what: &str, present: bool) -> String {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let out = d.ok(cmd);
        if out.contains(what) == present || Instant::now() > end {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (tx, rx) packets of tunnel port `port`'s own UDP socket.
pub fn socket_packets(d: &Daemon, port: &str) -> (u64, u64) {
    let s = d.json(&["port-stats", port]);
    let g = |k: &str| s[0][k].as_u64().unwrap();
    (g("tx_packets"), g("rx_packets"))
}

/// `tnl/neigh/show` and `dump-megaflows`, for assertion messages.
pub fn native_state(d: &Daemon) -> String {
    format!(
        "{}\n{}",
        d.ok(&["tnl/neigh/show"]),
        d.ok(&["dump-megaflows"])
    )
}

/// `ping -c 1 -W 1 IP` from `ns`, `n` times: how many were answered.
pub fn pings_answered(ns: &Ns, ip: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| {
            ns.try_exec(&["ping", "-c", "1", "-W", "1", ip])
                .status
                .success()
        })
        .count()
}

/// `ping -c N -W 1 IP` from `ns` with `extra` options.
pub fn ping_n(ns: &Ns, ip: &str, n: u32, extra: &[&str]) -> Output {
    let c = n.to_string();
    let mut a = vec!["ping", "-c", &c, "-W", "1"];
    a.extend_from_slice(extra);
    a.push(ip);
    ns.try_exec(&a)
}

/// The native tunnel neighbour cache's counters (`tnl/neigh/show`).
pub fn neigh_counters(d: &Daemon) -> serde_json::Value {
    d.json(&["tnl/neigh/show"])["counters"].clone()
}

/// Waits up to 5 s for decapsulated traffic to be seen by the neighbour cache; the count.
pub fn wait_decap_seen(d: &Daemon) -> u64 {
    let seen = || neigh_counters(d)["decap_seen"].as_u64().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while seen() == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    seen()
}

/// Pings `ip` from `vm` (one echo at a time) until `done` holds or 5 s pass; `done` at the end.
pub fn ping_until_done(vm: &Ns, ip: &str, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < end {
        let _ = vm.try_exec(&["ping", "-c", "1", "-W", "1", ip]);
    }
    done()
}

/// Waits up to 5 s for the `tnl_push` megaflows to leave the PMDs (after a route change the
/// miss counters move while the revalidation re-translates, the old megaflows go just after).
pub fn wait_push_megaflows_gone(d: &Daemon) {
    let end = Instant::now() + Duration::from_secs(5);
    while d.ok(&["dump-megaflows"]).contains("tnl_push(") && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A frame that does not fit the 1500-byte underlay after encapsulation is dropped and
/// counted, never fragmented: `vm` at MTU 1500 sends three `size`-byte pings with DF to `ip`;
/// asserts none crossed and vireod counted three MTU drops.
pub fn assert_oversize_dropped(d: &Daemon, vm: &Ns, ip: &str, size: &str) {
    let mtu_drops = || {
        d.json(&["tnl/neigh/show"])["native_drops"]["mtu"]
            .as_u64()
            .unwrap()
    };
    let before = mtu_drops();
    vm.exec(&["ip", "link", "set", &vm.ns_if, "mtu", "1500"]);
    let big = ping_n(vm, ip, 3, &["-M", "do", "-s", size]);
    assert!(
        !big.status.success(),
        "an oversize frame crossed the tunnel"
    );
    assert!(
        mtu_drops() >= before + 3,
        "oversize frames not counted: {}",
        d.ok(&["tnl/neigh/show"])
    );
}

/// `route/add PREFIX BR GW` on `d`; asserts `route/show` lists it as a user route, in text
/// and in JSON.
pub fn add_user_route(d: &Daemon, prefix: &str, br: &str, gw: &str) {
    d.ok(&["route/add", prefix, br, gw]);
    let shown = d.ok(&["route/show"]);
    assert!(
        shown.contains(&format!("{prefix} dev {br} via {gw} (user)")),
        "{shown}"
    );
    let j = d.json(&["route/show"]);
    assert!(j
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["prefix"] == prefix && r["gw"] == gw));
}

/// Asserts each vireoctl command of `cases` fails with its stderr containing the given text.
pub fn assert_refused(d: &Daemon, cases: &[(Vec<&str>, &str)]) {
    for (args, why) in cases {
        let out = d.ctl(args);
        assert_ne!(out.code, 0, "{args:?} accepted");
        assert!(out.stderr.contains(why), "{args:?}: {}", out.stderr);
    }
}

/// `ip [-6] route VERB PREFIX [via VIA] dev DEV` in the root namespace (`-6` for an IPv6
/// prefix); fails the test if it does not succeed.
pub fn host_route(verb: &str, prefix: &str, via: Option<&str>, dev: &str) {
    let mut a = vec!["ip"];
    if prefix.contains(':') {
        a.push("-6");
    }
    a.extend_from_slice(&["route", verb, prefix]);
    if let Some(v) = via {
        a.extend_from_slice(&["via", v]);
    }
    a.extend_from_slice(&["dev", dev]);
    must(&a);
}

/// `tnl/neigh/flush` empties the neighbour cache; asserts traffic from `vm` to `ip` goes on
/// (the entry is learned again).
pub fn assert_flush_relearns(d: &Daemon, vm: &Ns, ip: &str) {
    d.ok(&["tnl/neigh/flush"]);
    assert!(vm.ping_until(ip, &[], 10), "no traffic after the flush");
}
