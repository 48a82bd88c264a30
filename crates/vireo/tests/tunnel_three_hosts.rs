//! Three Vireo "hosts" joined by native VXLAN (issue 12, item 6): each host is a network
//! namespace running its own vireod (own run directory and configuration store, started
//! inside the namespace with `ip netns exec`); the hosts' underlay interfaces are veths into
//! one Linux bridge in the root namespace. On each host the underlay bridge `thrp` has the
//! veth as an `af-packet` port and its internal port holds the host's tunnel address
//! (10.241.0.1-3); the overlay bridge `thri` has the VM (a namespace behind an `af-packet`
//! veth, 192.168.241.1-3, MTU 1450) and the tunnel ports.
//!
//! Hosts A and B use fixed tunnel ports (one per remote, VNI 100) and NORMAL, plus one
//! split-horizon rule per tunnel port (multicast from a tunnel goes to the VM only: NORMAL
//! has no split horizon, so a full mesh would otherwise forward floods tunnel to tunnel).
//! Host C has one flow-based port (`remote_ip=flow,key=flow`) and its rules come over
//! OpenFlow from `ovs-ofctl`: `set_field:IP->tun_dst,set_field:100->tun_id,output:vx` by
//! destination MAC (a flood sets two `tun_dst`s in one rule), and `tun_id`/`tun_src` matches
//! for what arrives.
//!
//! Asserted: every VM pings the other two; each host's megaflows carry `tnl_push` (to both
//! other hosts) and `tnl_pop`; `tnl/neigh/show` lists the other two hosts' underlay address
//! and MAC; no tunnel port's own UDP socket carries the pings (the native path did it).
//!
//! Names: namespaces `thr-h-X-PID` (hosts), `thr-v-X-PID` (VMs), interfaces `thrhXPID` /
//! `thrvXPID`, the Linux bridge `thrbPID`; all removed by Drop guards, also when the test
//! fails. Inside a host namespace the bridges are `thrp` and `thri`.
mod common;

use common::host::{kernel_ok, must, ping_count, sh, Ns};
use common::Daemon;
use std::time::{Duration, Instant};

/// The Linux bridge joining the underlays; deleted on drop.
struct LinuxBridge(String);

impl Drop for LinuxBridge {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.0]);
    }
}

fn wait_for(d: &Daemon, cmd: &[&str], what: &[&str]) -> String {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let out = d.ok(cmd);
        if what.iter().all(|w| out.contains(w)) || Instant::now() > end {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One host: its namespace, its VM's namespace and its daemon (dropped first).
struct Host {
    d: Daemon,
    vm: Ns,
    _h: Ns,
    /// Tunnel address.
    ip: String,
    /// The underlay internal port's MAC.
    mac: String,
    _dir: tempfile::TempDir,
}

impl Host {
    fn new(side: char, n: u8, bridge: &str) -> Host {
        let h = Ns::create("thr", 'h', side);
        must(&["ip", "link", "set", &h.host_if, "master", bridge]);
        must(&["ip", "link", "set", &h.host_if, "up"]);
        // The underlay veth is Vireo's port: the host's kernel must not answer ARP on it.
        h.exec(&["ip", "link", "set", "dev", &h.ns_if, "arp", "off"]);
        h.exec(&[
            "ethtool", "-K", &h.ns_if, "tx", "off", "tso", "off", "gso", "off",
        ]);
        let vm = Ns::create("thr", 'v', side);
        must(&["ip", "link", "set", &vm.host_if, "netns", &h.name]);
        h.exec(&["ip", "link", "set", "dev", &vm.host_if, "arp", "off", "up"]);
        for a in [
            vec!["ip", "link", "set", "dev", &vm.ns_if, "down"],
            vec![
                "ip",
                "link",
                "set",
                "dev",
                &vm.ns_if,
                "address",
                &vm_mac(n),
                "mtu",
                "1450",
            ],
            vec!["ip", "link", "set", "dev", &vm.ns_if, "up"],
            vec!["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
            vec![
                "ethtool", "-K", &vm.ns_if, "tx", "off", "tso", "off", "gso", "off",
            ],
        ] {
            vm.exec(&a);
        }
        vm.exec(&[
            "ip",
            "addr",
            "add",
            &format!("192.168.241.{n}/24"),
            "dev",
            &vm.ns_if,
        ]);

        let dir = tempfile::Builder::new()
            .prefix(&format!("thr-{side}-"))
            .tempdir()
            .unwrap();
        let d = Daemon::start_in_netns(&h.name, dir.path());
        d.ok(&["add-br", "thrp"]);
        d.ok(&[
            "add-port",
            "thrp",
            "phy",
            "type=af-packet",
            &format!("ifname={}", h.ns_if),
            "offloads=false",
        ]);
        let ip = format!("10.241.0.{n}");
        h.exec(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "thrp"]);
        let mac = h
            .exec(&["cat", "/sys/class/net/thrp/address"])
            .trim()
            .to_string();
        d.ok(&["add-br", "thri", "internal=false"]);
        d.ok(&[
            "add-port",
            "thri",
            "vm",
            "type=af-packet",
            &format!("ifname={}", vm.host_if),
            "offloads=false",
        ]);
        let connected = format!("10.241.0.0/24 dev thrp src {ip} (connected)");
        let shown = wait_for(&d, &["route/show"], &[&connected]);
        assert!(shown.contains(&connected), "host {side}: {shown}");
        Host {
            d,
            vm,
            _h: h,
            ip,
            mac,
            _dir: dir,
        }
    }

    /// A fixed VXLAN port `name` (VNI 100) to `remote`.
    fn tunnel_to(&self, name: &str, remote: &Host) {
        self.d.ok(&[
            "add-port",
            "thri",
            name,
            "type=vxlan",
            &format!("remote_ip={}", remote.ip),
            &format!("local_ip={}", self.ip),
            "key=100",
        ]);
        // Split horizon: multicast from a tunnel goes to the VM only.
        self.d.ok(&[
            "add-flow",
            "thri",
            &format!(
                "priority=10,in_port={name},dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,\
                 actions=output:vm"
            ),
        ]);
    }

    /// (tx, rx) packets of the tunnel ports' own UDP sockets, summed.
    fn socket_packets(&self, ports: &[&str]) -> (u64, u64) {
        ports.iter().fold((0, 0), |(t, r), p| {
            let s = &self.d.json(&["port-stats", p])[0];
            (
                t + s["tx_packets"].as_u64().unwrap(),
                r + s["rx_packets"].as_u64().unwrap(),
            )
        })
    }
}

fn vm_mac(n: u8) -> String {
    format!("02:74:68:72:00:0{n}")
}

#[test]
fn three_vireo_hosts_native_vxlan_full_mesh_with_an_openflow_programmed_host() {
    if !kernel_ok() || !testkit::require_peer("ethtool", "ethtool") || !testkit::have_ofctl() {
        return;
    }
    let pid = std::process::id();
    let br = LinuxBridge(format!("thrb{pid}"));
    let _ = sh(&["ip", "link", "del", &br.0]);
    must(&["ip", "link", "add", &br.0, "type", "bridge"]);
    must(&["ip", "link", "set", &br.0, "up"]);

    let a = Host::new('a', 1, &br.0);
    let b = Host::new('b', 2, &br.0);
    let c = Host::new('c', 3, &br.0);
    a.tunnel_to("vxb", &b);
    a.tunnel_to("vxc", &c);
    b.tunnel_to("vxa", &a);
    b.tunnel_to("vxc", &c);

    // Host C: one flow-based port; its rules over OpenFlow from ovs-ofctl (ports: vm 1, vx 2).
    c.d.ok(&[
        "add-port",
        "thri",
        "vx",
        "type=vxlan",
        "remote_ip=flow",
        "key=flow",
        &format!("local_ip={}", c.ip),
    ]);
    let sock = c.d.run_dir.join("thri.mgmt");
    testkit::ofctl_must(&sock, "del-flows", &[]);
    let to = |h: &Host| format!("set_field:{}->tun_dst,set_field:100->tun_id,output:2", h.ip);
    let flows = [
        format!("in_port=1,dl_dst={},actions={}", vm_mac(1), to(&a)),
        format!("in_port=1,dl_dst={},actions={}", vm_mac(2), to(&b)),
        format!(
            "in_port=1,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,actions={},{}",
            to(&a),
            to(&b)
        ),
        format!("in_port=2,tun_id=100,tun_src={},actions=output:1", a.ip),
        format!("in_port=2,tun_id=100,tun_src={},actions=output:1", b.ip),
    ];
    for f in &flows {
        testkit::ofctl_must(&sock, "add-flow", &[f]);
    }
    let dump = testkit::ofctl_must(&sock, "dump-flows", &[]);
    assert!(
        dump.contains(&format!("tun_id=0x64,tun_src={},in_port=2", a.ip))
            && dump.contains("set_field:10.241.0.2->tun_dst"),
        "{dump}"
    );

    let hosts = [&a, &b, &c];
    let socket_ports: [&[&str]; 3] = [&["vxb", "vxc"], &["vxa", "vxc"], &["vx"]];
    // First contact: ARP over the overlay, the underlay neighbours resolved (the first
    // packets to an unresolved neighbour are dropped while it is asked).
    for (i, x) in hosts.iter().enumerate() {
        for (j, y) in hosts.iter().enumerate() {
            if i != j {
                let ip = format!("192.168.241.{}", j + 1);
                assert!(
                    x.vm.ping_until(&ip, &[], 20),
                    "VM {} cannot reach VM {}: {}\n{}\n{}",
                    i + 1,
                    j + 1,
                    x.d.ok(&["tnl/neigh/show"]),
                    x.d.ok(&["dump-megaflows"]),
                    y.d.ok(&["dump-megaflows"])
                );
            }
        }
    }
    let before: Vec<(u64, u64)> = hosts
        .iter()
        .zip(socket_ports)
        .map(|(h, p)| h.socket_packets(p))
        .collect();
    // Steady state: every VM pings the other two, nothing lost.
    for (i, x) in hosts.iter().enumerate() {
        for j in 0..3 {
            if i != j {
                let ip = format!("192.168.241.{}", j + 1);
                let got = ping_count(&x.vm, &ip, 5, &[]);
                assert!(got >= 4, "VM {} -> VM {}: {got}/5", i + 1, j + 1);
            }
        }
    }

    for (i, x) in hosts.iter().enumerate() {
        let flows = x.d.ok(&["dump-megaflows"]);
        assert!(flows.contains("tnl_pop("), "host {}: {flows}", i + 1);
        let neigh = x.d.ok(&["tnl/neigh/show"]);
        for (j, y) in hosts.iter().enumerate() {
            if i == j {
                continue;
            }
            let push = format!(
                "tnl_push(header(src={},dst={},dst_port=4789,vni=100)",
                x.ip, y.ip
            );
            assert!(flows.contains(&push), "host {}: no {push}: {flows}", i + 1);
            let line = format!("{} {} dev thrp", y.ip, y.mac);
            assert!(neigh.contains(&line), "host {}: no {line}: {neigh}", i + 1);
        }
        assert_eq!(
            x.socket_packets(socket_ports[i]),
            before[i],
            "host {}: the tunnel sockets carried the pings (tx, rx)",
            i + 1
        );
    }
    // Host C's megaflows were built from its OpenFlow rules: what arrives is matched on the
    // tunnel's VNI and outer source.
    let flows = c.d.ok(&["dump-megaflows"]);
    assert!(
        flows.contains("tun_id=0x64") && flows.contains(&format!("tun_src={}", a.ip)),
        "{flows}"
    );
    // The flood rule: VM C's ARP request for VM A (its neighbour cache flushed) leaves in one
    // megaflow encapsulated twice, to host A and to host B.
    c.vm.exec(&["ip", "neigh", "flush", "all"]);
    assert!(
        c.vm.ping_until("192.168.241.1", &[], 10),
        "no ping after the flush"
    );
    let flood = wait_for(
        &c.d,
        &["dump-megaflows"],
        &["eth_dst=ff:ff:ff:ff:ff:ff,tun_id=0x0"],
    );
    let line = flood
        .lines()
        .find(|l| l.contains("match=in_port=3,eth_dst=ff:ff:ff:ff:ff:ff"))
        .unwrap_or_else(|| panic!("no flood megaflow from VM C: {flood}"));
    eprintln!("host C's flood megaflow: {line}");
    for h in [&a, &b] {
        let push = format!("tnl_push(header(src={},dst={},", c.ip, h.ip);
        assert!(line.contains(&push), "{line}");
    }
    // A rule change on host C reaches the datapath: without the rule for VM A's MAC, C's
    // unicast to VM A falls to the table miss and is dropped; VM B is untouched.
    testkit::ofctl_must(
        &sock,
        "del-flows",
        &[&format!("in_port=1,dl_dst={}", vm_mac(1))],
    );
    let end = Instant::now() + Duration::from_secs(5);
    while ping_count(&c.vm, "192.168.241.1", 1, &[]) != 0 && Instant::now() < end {}
    assert_eq!(
        ping_count(&c.vm, "192.168.241.1", 2, &[]),
        0,
        "rule removal ignored"
    );
    assert!(ping_count(&c.vm, "192.168.241.2", 3, &[]) >= 2);
    drop(c);
    drop(b);
    drop(a);
    // The namespaces' ends of the bridge's veths went with them.
    let _ = &br;
}
