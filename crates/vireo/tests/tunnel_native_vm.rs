//! Virtio endpoints across native tunnels (issue 12, Done-when: "a VM behind one Vireo
//! reaches a VM behind another Vireo, a Linux VXLAN endpoint and an OVS Geneve/VXLAN
//! endpoint"): two Vireo hosts (network namespaces, one vireod each), a Linux VXLAN endpoint
//! (namespace U, `vx0`) and Open vSwitch 3.1's userspace datapath with native Geneve
//! (namespace O), their underlays veths into one Linux bridge (MTU 1600, so a 1500-byte
//! guest frame fits after encapsulation). Behind host A a QEMU guest (software emulation,
//! Linux virtio-net driver) on a vhost-user port; behind host B DPDK testpmd (`icmpecho`:
//! answers ARP and ping) on a vhost-user port. The guest pings testpmd (A → B → A over native
//! VXLAN), sends a TCP stream to a listener behind the kernel VXLAN device (A → U, VXLAN) and
//! one to a listener on OVS's overlay bridge (A → O, Geneve), and U and O ping the guest;
//! the megaflows carry `tnl_push` and `tnl_pop`.
//!
//! Names: namespaces `nvm-h-a-PID`, `nvm-h-b-PID`, `nvm-u-a-PID`, `nvm-o-a-PID`, the Linux bridge
//! `nvmbPID`; removed by Drop guards. Skipped (with a message) only when QEMU, testpmd, a
//! kernel image or root is missing; fails under `VIREO_REQUIRE_PEERS=1` then.
mod common;

use common::host::{kernel_ok, must, sh, Ns};
use common::peers::{build_initramfs, guest_peers, Guest, Testpmd, VirtioUser};
use common::tunnels::{ovs_tunnel_host, OvsTunnel};
use common::{wait_until, Daemon};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GUEST_MAC: &str = "52:54:00:24:30:01";
const TP_MAC: &str = "02:00:00:24:30:02";
const MTU: &str = "1600";

struct LinuxBridge(String);

impl Drop for LinuxBridge {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.0]);
    }
}

/// A veth end in the root namespace joined to `bridge` at the underlay MTU.
fn join(bridge: &str, ifname: &str) {
    must(&["ip", "link", "set", ifname, "mtu", MTU]);
    must(&["ip", "link", "set", ifname, "master", bridge]);
    must(&["ip", "link", "set", ifname, "up"]);
}

/// One Vireo host: namespace, daemon, underlay bridge `nvmp` (address `10.243.0.N`) on the
/// veth, overlay bridge `nvmi` (NORMAL) with a vhost-user port `vm`.
struct Host {
    d: Daemon,
    _ns: Ns,
    _dir: tempfile::TempDir,
}

impl Host {
    fn new(side: char, n: u8, bridge: &str) -> Host {
        let ns = Ns::create("nvm", 'h', side);
        join(bridge, &ns.host_if);
        ns.exec(&[
            "ip", "link", "set", "dev", &ns.ns_if, "mtu", MTU, "arp", "off",
        ]);
        ns.exec(&[
            "ethtool", "-K", &ns.ns_if, "tx", "off", "tso", "off", "gso", "off",
        ]);
        let dir = tempfile::Builder::new()
            .prefix(&format!("nvm-{side}-"))
            .tempdir()
            .unwrap();
        let d = Daemon::start_in_netns(&ns.name, dir.path());
        d.ok(&["add-br", "nvmp"]);
        d.ok(&[
            "add-port",
            "nvmp",
            "phy",
            "type=af-packet",
            &format!("ifname={}", ns.ns_if),
            "offloads=false",
        ]);
        let ip = format!("10.243.0.{n}");
        ns.exec(&["ip", "link", "set", "dev", "nvmp", "mtu", MTU]);
        ns.exec(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "nvmp"]);
        d.ok(&["add-br", "nvmi", "internal=false"]);
        d.ok(&["add-port", "nvmi", "vm", "type=vhost-user"]);
        let connected = format!("10.243.0.0/24 dev nvmp src {ip} (connected)");
        assert!(
            wait_until(Duration::from_secs(5), || d
                .ok(&["route/show"])
                .contains(&connected)),
            "host {side}: {}",
            d.ok(&["route/show"])
        );
        Host {
            d,
            _ns: ns,
            _dir: dir,
        }
    }

    /// A fixed tunnel port of `kind` (VNI 100) from `10.243.0.{from}` to `10.243.0.{to}`,
    /// with the split horizon rule (multicast from the tunnel goes to the VM only).
    fn tunnel(&self, name: &str, kind: &str, from: u8, to: u8) {
        self.d.ok(&[
            "add-port",
            "nvmi",
            name,
            &format!("type={kind}"),
            &format!("remote_ip=10.243.0.{to}"),
            &format!("local_ip=10.243.0.{from}"),
            "key=100",
        ]);
        self.d.ok(&[
            "add-flow",
            "nvmi",
            &format!(
                "priority=10,in_port={name},dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,\
                 actions=output:vm"
            ),
        ]);
    }

    fn vm_sock(&self) -> std::path::PathBuf {
        self.d.run_dir.join("vm.sock")
    }
}

/// A one-connection TCP listener on `addr:port` inside `ns` that prints the bytes it got.
fn listener(ns: &Ns, addr: &str, port: u16) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(format!(
            "import socket\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{addr}', {port})); s.listen(1); s.settimeout(240)\n\
             c, _ = s.accept(); n = 0\n\
             while True:\n    b = c.recv(65536)\n    if not b: break\n    n += len(b)\n\
             print(n, flush=True)\n"
        ))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a listener")
}

/// What a [`listener`] printed, once its connection ended.
fn received(mut l: std::process::Child) -> Option<u64> {
    let mut got = String::new();
    l.stdout.take()?.read_to_string(&mut got).ok()?;
    let _ = l.wait();
    got.trim().parse().ok()
}

/// Bytes of `seq 1 n`, one number a line (what the guest's `vireo.send` sends).
fn seq_bytes(n: u64) -> u64 {
    (1..=n).map(|i| i.to_string().len() as u64 + 1).sum()
}

#[test]
fn a_qemu_guest_reaches_testpmd_behind_another_vireo_a_kernel_vxlan_and_an_ovs_geneve_endpoint() {
    if !kernel_ok()
        || !testkit::require_peer("ethtool", "ethtool")
        || !testkit::require_peer("ovs-vswitchd", "openvswitch-switch")
    {
        return;
    }
    let Some(kernel) = guest_peers(&["dpdk-testpmd"]) else {
        return;
    };
    let pid = std::process::id();
    let br = LinuxBridge(format!("nvmb{pid}"));
    let _ = sh(&["ip", "link", "del", &br.0]);
    must(&["ip", "link", "add", &br.0, "mtu", MTU, "type", "bridge"]);
    must(&["ip", "link", "set", &br.0, "up"]);

    let a = Host::new('a', 1, &br.0);
    let b = Host::new('b', 2, &br.0);
    a.tunnel("vxb", "vxlan", 1, 2);
    a.tunnel("vxu", "vxlan", 1, 3);
    a.tunnel("gno", "geneve", 1, 4);
    b.tunnel("vxa", "vxlan", 2, 1);
    // testpmd's `icmpecho` answers an ARP request for any address: host B lets through only
    // those for its VM's (as a cloud's ARP filter would), or the guest's ARP for the kernel
    // or OVS endpoint races a wrong answer from testpmd (and loses the TCP connection when
    // testpmd's reply comes first, as it did once under load).
    b.d.ok(&[
        "add-flow",
        "nvmi",
        "priority=20,in_port=vxa,arp,arp_tpa=192.168.243.2,actions=output:vm",
    ]);
    b.d.ok(&[
        "add-flow",
        "nvmi",
        "priority=15,in_port=vxa,arp,actions=drop",
    ]);

    // Host U: the Linux kernel's VXLAN device, VNI 100 to host A, and a TCP listener that
    // prints how many bytes one connection brought.
    let u = Ns::create("nvm", 'u', 'a');
    join(&br.0, &u.host_if);
    u.exec(&["ip", "link", "set", "dev", &u.ns_if, "mtu", MTU]);
    u.exec(&["ip", "addr", "add", "10.243.0.3/24", "dev", &u.ns_if]);
    u.exec(&[
        "ip",
        "link",
        "add",
        "vx0",
        "type",
        "vxlan",
        "id",
        "100",
        "remote",
        "10.243.0.1",
        "local",
        "10.243.0.3",
        "dstport",
        "4789",
        "dev",
        &u.ns_if,
    ]);
    u.exec(&["ip", "link", "set", "vx0", "mtu", "1500", "up"]);
    u.exec(&["ip", "addr", "add", "192.168.243.3/24", "dev", "vx0"]);
    let listen_u = listener(&u, "192.168.243.3", 5001);

    // Host O: Open vSwitch's userspace datapath, native Geneve (VNI 100) to host A through
    // `brphy` (tunnel address .4 on its LOCAL port); the overlay address on `brint`'s LOCAL
    // port, with a listener.
    let o = Ns::create("nvm", 'o', 'a');
    join(&br.0, &o.host_if);
    o.exec(&[
        "ip", "link", "set", "dev", &o.ns_if, "mtu", MTU, "arp", "off",
    ]);
    o.exec(&[
        "ethtool", "-K", &o.ns_if, "tx", "off", "tso", "off", "gso", "off",
    ]);
    let ovs_dir = tempfile::Builder::new()
        .prefix("nvm-ovs-")
        .tempdir()
        .unwrap();
    let ovs = ovs_tunnel_host(
        &o,
        ovs_dir.path(),
        &OvsTunnel {
            kind: "geneve",
            port: "gn",
            local: "10.243.0.4/24",
            remote: "10.243.0.1",
            key: "100",
            overlay: "192.168.243.4/24",
            mtu: Some(1500),
        },
    );
    o.exec(&["ip", "link", "set", "brphy", "mtu", MTU]);
    let listen_o = listener(&o, "192.168.243.4", 5002);

    // Behind host B: testpmd answering ARP and ping.
    let mut tp = Testpmd::start(
        &format!("vireo-it-nvm-{pid}"),
        &[VirtioUser {
            path: b.vm_sock(),
            mac: TP_MAC.into(),
            extra: String::new(),
        }],
        &["--forward-mode=icmpecho"],
    );
    tp.wait_ready();
    tp.cmd("start");

    // Behind host A: the guest.
    let dir = tempfile::tempdir().unwrap();
    let initrd = build_initramfs(dir.path());
    let n = 20_000;
    let guest = Guest::boot(
        &kernel,
        &initrd,
        &a.vm_sock(),
        false,
        GUEST_MAC,
        &format!(
            "vireo.ip=192.168.243.1/24 vireo.ping=192.168.243.2 vireo.count=3 \
             vireo.send=192.168.243.3:5001:{n},192.168.243.4:5002:{n} vireo.wait=60"
        ),
    );
    let t0 = Instant::now();
    // The megaflows of the ping to testpmd, taken as soon as it is done: an idle megaflow is
    // removed after a few seconds, and the TCP streams that follow can take minutes under load.
    wait_until(Duration::from_secs(240), || {
        let o = guest.out.text();
        o.contains("VIREO-PING-") || o.contains("Kernel panic")
    });
    let (fa_ping, fb_ping) = (a.d.ok(&["dump-megaflows"]), b.d.ok(&["dump-megaflows"]));
    let done = wait_until(Duration::from_secs(240), || {
        let o = guest.out.text();
        o.contains("VIREO-SEND-OK 192.168.243.4")
            || o.contains("VIREO-SEND-FAIL")
            || o.contains("Kernel panic")
            || o.contains("VIREO-GUEST-DONE")
    });
    let console = guest.out.text();
    eprintln!("guest finished its jobs in {:.0?}", t0.elapsed());
    let diag = || {
        let o_state = o.try_exec(&["sh", "-c", "ip -s link; ip addr; ip neigh; ip route"]);
        format!(
            "{console}\nhost A:\n{}\n{}\n{}\nhost B:\n{}\n{}\nOVS (host O):\n\
             datapath flows:\n{}\nneighbours:\n{}\nroutes:\n{}\ndatapath ports:\n{}\n\
             host O's kernel:\n{}\nlog:\n{}",
            a.d.ok(&["tnl/neigh/show"]),
            a.d.ok(&["dump-megaflows"]),
            a.d.ok(&["port-stats"]),
            b.d.ok(&["tnl/neigh/show"]),
            b.d.ok(&["dump-megaflows"]),
            ovs.appctl(&["dpctl/dump-flows"]),
            ovs.appctl(&["tnl/neigh/show"]),
            ovs.appctl(&["ovs/route/show"]),
            ovs.appctl(&["dpctl/show", "-s"]),
            String::from_utf8_lossy(&o_state.stdout),
            ovs.log_tail(60),
        )
    };
    assert!(done, "guest did not finish in time:\n{}", diag());
    assert!(
        console.contains("VIREO-PING-OK"),
        "the guest could not ping testpmd behind host B:\n{}",
        diag()
    );
    assert!(
        console.contains("VIREO-SEND-OK 192.168.243.3"),
        "the guest could not send TCP to the kernel VXLAN endpoint:\n{}",
        diag()
    );
    assert!(
        console.contains("VIREO-SEND-OK 192.168.243.4"),
        "the guest could not send TCP to OVS's Geneve endpoint:\n{}",
        diag()
    );
    assert_eq!(
        received(listen_u),
        Some(seq_bytes(n)),
        "bytes the kernel endpoint received"
    );
    assert_eq!(
        received(listen_o),
        Some(seq_bytes(n)),
        "bytes OVS's side received"
    );
    // The other way: both endpoints ping the guest while it waits.
    for (ns, who) in [(&u, "the kernel endpoint"), (&o, "OVS's side")] {
        let out = ns.try_exec(&["ping", "-c", "3", "-i", "0.3", "-W", "3", "192.168.243.1"]);
        assert!(
            out.status.success(),
            "{who} could not ping the guest: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            diag()
        );
    }

    // The native path carried it: encapsulation to both peers and decapsulation on A, both
    // on B; testpmd answered.
    // (To testpmd: the megaflows taken after the ping; to U and O: those of the pings back,
    // just now.)
    let fa = a.d.ok(&["dump-megaflows"]);
    for (dst, port, flows) in [
        ("10.243.0.2", 4789, &fa_ping),
        ("10.243.0.3", 4789, &fa),
        ("10.243.0.4", 6081, &fa),
    ] {
        let push = format!("tnl_push(header(src=10.243.0.1,dst={dst},dst_port={port},vni=100)");
        assert!(flows.contains(&push), "host A: no {push}: {flows}");
    }
    assert!(
        fa.contains("tnl_pop(") && fa_ping.contains("tnl_pop("),
        "host A: {fa_ping}\n{fa}"
    );
    assert!(
        fb_ping.contains("tnl_push(header(src=10.243.0.2,dst=10.243.0.1,")
            && fb_ping.contains("tnl_pop("),
        "host B: {fb_ping}"
    );
    // The guest's TSO frames were cut in software before encapsulation, none dropped.
    let drops = &a.d.json(&["tnl/neigh/show"])["native_drops"];
    assert_eq!(drops["gso"].as_u64().unwrap_or(0), 0, "host A: {drops}");
    let pmd = a.d.json(&["pmd-stats-show"]);
    let cut: u64 = pmd
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["sw_segmented"].as_u64().unwrap_or(0))
        .sum();
    eprintln!("host A: {cut} GSO frames cut in software before encapsulation; drops {drops}");
    let tps = tp.port_stats();
    assert!(
        tps[0].0 >= 3 && tps[0].1 >= 3,
        "testpmd answered nothing: {tps:?}"
    );
    drop(guest);
    tp.quit();
    drop(ovs);
    drop(b);
    drop(a);
    let _ = &br;
}
