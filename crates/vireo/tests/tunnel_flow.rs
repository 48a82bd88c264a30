//! Flow-based tunnels (`remote_ip=flow`, `key=flow`) against real peers: the pipeline picks
//! the VNI and the far end per packet (`set_field:..->tun_id`, `set_field:..->tun_dst`) and
//! matches the VNI and outer source of what arrives (`tun_id=N`, `tun_src=IP`).
//!
//! - Two VNIs on one flow-based VXLAN port, rules written with real `ovs-ofctl -O OpenFlow13`,
//!   to two Linux kernel VXLAN devices in one namespace: each VM behind vireod reaches only its
//!   own VNI's device, so the megaflow cache must tell the VNIs apart (a mask without
//!   `tun_id` would send the second VNI's replies to the first VM). A packet sent to the port
//!   with no `tun_dst` is dropped and counted.
//! - Geneve with Open vSwitch 3.1's userspace datapath (native tunneling, `type=geneve`) in a
//!   namespace, rules written with `vireoctl add-flow`.
//!
//! - `local_ip=flow` towards a kernel VXLAN device: the rule's `tun_src` is the outer source
//!   the device records; a source that is not this host's is refused and counted.
//!
//! Names: namespaces `tun-T-X-PID` (`tnb-s-X-PID` for the `local_ip=flow` test), interfaces
//! `tunTXPID` (T = the test's letter, X = side), removed by Drop guards. Addresses:
//! 10.236.0.0/24, 10.237.0.0/24 and 10.238.0.0/24 (underlays), 192.168.236-239.0/24
//! (overlays).
mod common;

use common::host::{kernel_ok, must, ping_count, Ns};
use common::tunnels::{kernel_vxlan, ovs_peer_and_vm, socket_tunnel_br0, tmp, OvsTunnel, Vxlan};
use common::{port_status, stats, Daemon};

/// A kernel VXLAN device `name` (VNI `vni`) in `hb` towards vireod's 10.236.0.1, holding
/// `addr`.
fn vxlan_to_vireod(hb: &Ns, name: &str, vni: &str, addr: &str) {
    kernel_vxlan(
        hb,
        &Vxlan {
            name,
            vni,
            remote: "10.236.0.1",
            local: "10.236.0.2",
            dstport: "4789",
            dev: &hb.ns_if,
            addr,
            no_offloads: false,
        },
    );
}

/// Host B (the kernel) has `vx5` (VNI 5, 192.168.236.2) and `vx6` (VNI 6, 192.168.237.2);
/// vireod has VM A (192.168.236.1) and VM B (192.168.237.1) on af-packet ports and one
/// `vxlan` port with `remote_ip=flow,key=flow`. The rules (ovs-ofctl) put VM A on VNI 5 and
/// VM B on VNI 6 towards host B, and send what arrives by VNI.
#[test]
fn two_vnis_on_one_flow_based_vxlan_port_reach_two_kernel_devices() {
    if !kernel_ok() || !testkit::have_ofctl() {
        return;
    }
    let dir = tmp("tun", "f");
    let hb = Ns::up("tun", 'f', 'b', Some("10.236.0.2/24"));
    must(&["ip", "addr", "add", "10.236.0.1/24", "dev", &hb.host_if]);
    vxlan_to_vireod(&hb, "vx5", "5", "192.168.236.2/24");
    vxlan_to_vireod(&hb, "vx6", "6", "192.168.237.2/24");
    let vma = Ns::up("tun", 'f', 'a', Some("192.168.236.1/24"));
    let vmb = Ns::up("tun", 'f', 'v', Some("192.168.237.1/24"));

    let d = Daemon::start(dir.path());
    socket_tunnel_br0(
        &d,
        &[("vma", &vma.host_if), ("vmb", &vmb.host_if)],
        "vx",
        &[
            "type=vxlan",
            "remote_ip=flow",
            "key=flow",
            "local_ip=10.236.0.1",
        ],
    );
    let st = port_status(&d, "vx");
    assert_eq!(
        (&st["status"]["remote_ip"], &st["status"]["key"]),
        (&"flow".into(), &"flow".into()),
        "{st}"
    );
    // OpenFlow ports in add-port order: vma 1, vmb 2, vx 3.
    let sock = d.run_dir.join("br0.mgmt");
    testkit::ofctl_must(&sock, "del-flows", &[]);
    for f in [
        "in_port=1,actions=set_field:5->tun_id,set_field:10.236.0.2->tun_dst,output:3",
        "in_port=2,actions=set_field:6->tun_id,set_field:10.236.0.2->tun_dst,output:3",
        "tun_id=5,in_port=3,actions=output:1",
        "tun_id=6,in_port=3,actions=output:2",
    ] {
        testkit::ofctl_must(&sock, "add-flow", &[f]);
    }
    let dump = testkit::ofctl_must(&sock, "dump-flows", &[]);
    assert!(
        dump.contains("tun_id=0x5,in_port=3 actions=output:1")
            && dump.contains("set_field:0x6->tun_id,set_field:10.236.0.2->tun_dst,output:3"),
        "{dump}"
    );

    assert!(
        vma.ping_until("192.168.236.2", &[], 10),
        "VM A got no ping through VNI 5: {}",
        port_status(&d, "vx")
    );
    assert!(
        vmb.ping_until("192.168.237.2", &[], 10),
        "VM B got no ping through VNI 6: {}",
        port_status(&d, "vx")
    );
    // Both VNIs' megaflows are in the cache now: interleaved pings all come back to the VM
    // that sent them.
    for _ in 0..2 {
        assert_eq!(ping_count(&vma, "192.168.236.2", 3, &[]), 3, "VNI 5 lost");
        assert_eq!(ping_count(&vmb, "192.168.237.2", 3, &[]), 3, "VNI 6 lost");
    }
    let mf = d.ok(&["dump-megaflows"]);
    assert!(
        mf.contains("tun_id=0x5") && mf.contains("tun_id=0x6"),
        "the megaflows do not match the VNI: {mf}"
    );
    // Host B sees the VNIs apart too: each of its devices received only its VM's packets.
    let rx = |dev: &str| -> u64 {
        let j: serde_json::Value =
            serde_json::from_str(&hb.exec(&["ip", "-j", "-s", "link", "show", dev])).unwrap();
        j[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
    };
    assert!(
        rx("vx5") >= 8 && rx("vx6") >= 8,
        "{} {}",
        rx("vx5"),
        rx("vx6")
    );
    let s = stats(&d, "vx");
    assert_eq!(s["rx_errors"], 0, "{s}");

    // Output to the port with no tun_dst: dropped and counted, by vireoctl's own add-flow.
    d.ok(&[
        "add-flow",
        "br0",
        "in_port=vma,priority=40000,actions=output:vx",
    ]);
    assert_eq!(ping_count(&vma, "192.168.236.2", 2, &[]), 0);
    let st = port_status(&d, "vx");
    let drops = st["status"]["no_tun_dst_drops"].as_u64().unwrap_or(0);
    assert!(drops >= 2, "{st}");
    let s = stats(&d, "vx");
    assert!(s.to_string().contains("no-tunnel-dst"), "{s}");
    // VNI 6 is untouched.
    assert_eq!(ping_count(&vmb, "192.168.237.2", 2, &[]), 2);
}

/// Host C runs Open vSwitch's userspace datapath with native tunneling: `brphy` holds the
/// underlay veth and, on its internal port, the tunnel address 10.237.0.2; `brint` has a Geneve
/// port (VNI 9) to vireod's 10.237.0.1 and its internal port holds 192.168.238.2. vireod's
/// Geneve port is flow-based; its rules (vireoctl add-flow) pick VNI 9 and host C, and accept
/// only VNI 9 from host C's address.
#[test]
fn geneve_flow_based_interop_with_the_ovs_userspace_datapath() {
    if !kernel_ok()
        || !testkit::require_peer("ovs-vswitchd", "openvswitch-switch")
        || !testkit::require_peer("ovsdb-server", "openvswitch-switch")
    {
        return;
    }
    let dir = tmp("tun", "g");
    let ovs_dir = tmp("tun", "ovs");
    let (hc, vm, ovs) = ovs_peer_and_vm(
        "tun",
        'g',
        "10.237.0.1/24",
        "192.168.238.1/24",
        1400,
        ovs_dir.path(),
        &OvsTunnel {
            kind: "geneve",
            port: "gn",
            local: "10.237.0.2/24",
            remote: "10.237.0.1",
            key: "9",
            overlay: "192.168.238.2/24",
            mtu: Some(1400),
        },
    );

    let d = Daemon::start(dir.path());
    socket_tunnel_br0(
        &d,
        &[("vm", &vm.host_if)],
        "gn",
        &[
            "type=geneve",
            "remote_ip=flow",
            "key=flow",
            "local_ip=10.237.0.1",
        ],
    );
    d.ok(&["del-flows", "br0"]);
    for f in [
        "in_port=vm,actions=set_field:9->tun_id,set_field:10.237.0.2->tun_dst,output:gn",
        "tun_id=9,tun_src=10.237.0.2,in_port=gn,actions=output:vm",
    ] {
        d.ok(&["add-flow", "br0", f]);
    }
    let dump = d.ok(&["dump-flows", "br0"]);
    assert!(
        dump.contains("tun_id=0x9,tun_src=10.237.0.2,in_port=gn actions=output:1"),
        "{dump}"
    );
    assert!(
        vm.ping_until("192.168.238.2", &[], 15),
        "no ping to OVS through Geneve: {}",
        port_status(&d, "gn")
    );
    let got = ping_count(&vm, "192.168.238.2", 5, &[]);
    assert!(got >= 4, "ping lost {} of 5", 5 - got);
    // Large pings fit (1400-byte inner MTU plus Geneve's 50 bytes over a 1500 underlay).
    let got = ping_count(&vm, "192.168.238.2", 3, &["-s", "1372", "-M", "do"]);
    assert!(got >= 2, "large pings lost {} of 3", 3 - got);
    let s = stats(&d, "gn");
    assert_eq!(s["rx_errors"], 0, "{s}");
    // Another VNI from host C reaches vireod's port but no rule: OVS now sends VNI 10, and
    // none of host C's pings towards the VM is delivered to it.
    ovs.vsctl(&["set", "interface", "gn", "options:key=10"]);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let (rx0, to_vm0) = (
        stats(&d, "gn")["rx_packets"].as_u64().unwrap(),
        stats(&d, "vm")["tx_packets"].as_u64().unwrap(),
    );
    assert_eq!(
        ping_count(&hc, "192.168.238.1", 3, &[]),
        0,
        "VNI 10 was let in"
    );
    let rx1 = stats(&d, "gn")["rx_packets"].as_u64().unwrap();
    let to_vm1 = stats(&d, "vm")["tx_packets"].as_u64().unwrap();
    assert!(
        rx1 >= rx0 + 3,
        "VNI 10 datagrams did not arrive: {rx0} -> {rx1}"
    );
    assert_eq!(to_vm1, to_vm0, "a VNI 10 packet went to the VM");
}

/// `local_ip=flow`: the rule's `tun_src` is the outer source address. vireod's side of the
/// underlay holds 10.238.0.1 and 10.238.0.3; host B's kernel VXLAN device (VNI 5, learning on)
/// records, for VM A's MAC, the outer source each datagram came from (`bridge fdb`). A rule
/// setting `tun_src=10.238.0.3` makes that entry 10.238.0.3 (the route alone would pick
/// 10.238.0.1), rewritten to `tun_src=10.238.0.1` it moves there, and a `tun_src` that is not
/// this host's address is refused by the kernel, dropped and counted (`tun_src_refused`).
#[test]
fn local_ip_flow_sends_from_the_rules_tun_src() {
    if !kernel_ok() {
        return;
    }
    // A port of our own: 0.0.0.0:4789 would take datagrams meant for other tests' sockets.
    let port = (20000 + std::process::id() % 20000).to_string();
    let dir = tmp("tun", "s");
    let hb = Ns::up("tnb", 's', 'b', Some("10.238.0.2/24"));
    for a in ["10.238.0.1/24", "10.238.0.3/24"] {
        must(&["ip", "addr", "add", a, "dev", &hb.host_if]);
    }
    kernel_vxlan(
        &hb,
        &Vxlan {
            name: "vx5",
            vni: "5",
            remote: "10.238.0.1",
            local: "10.238.0.2",
            dstport: &port,
            dev: &hb.ns_if,
            addr: "192.168.239.2/24",
            no_offloads: false,
        },
    );
    let vma = Ns::up("tnb", 's', 'a', Some("192.168.239.1/24"));
    let link: serde_json::Value =
        serde_json::from_str(&vma.exec(&["ip", "-j", "link", "show", &vma.ns_if])).unwrap();
    let mac = link[0]["address"].as_str().unwrap().to_string();

    let d = Daemon::start(dir.path());
    socket_tunnel_br0(
        &d,
        &[("vma", &vma.host_if)],
        "vx",
        &[
            "type=vxlan",
            "remote_ip=flow",
            "key=flow",
            "local_ip=flow",
            &format!("dst_port={port}"),
        ],
    );
    assert_eq!(port_status(&d, "vx")["status"]["local_ip"], "flow");
    let out = |src: &str| {
        d.ok(&[
            "add-flow",
            "br0",
            &format!(
                "in_port=vma,actions=set_field:5->tun_id,set_field:10.238.0.2->tun_dst,\
                 set_field:{src}->tun_src,output:vx"
            ),
        ]);
    };
    d.ok(&["add-flow", "br0", "tun_id=5,in_port=vx,actions=output:vma"]);
    // The outer source host B's device last saw VM A's frames come from.
    let learned = || -> Option<String> {
        let j: serde_json::Value =
            serde_json::from_str(&hb.exec(&["bridge", "-j", "fdb", "show", "dev", "vx5"])).unwrap();
        j.as_array()?
            .iter()
            .find(|e| e["mac"] == mac.as_str())
            .and_then(|e| e["dst"].as_str().map(String::from))
    };

    out("10.238.0.3");
    assert!(
        vma.ping_until("192.168.239.2", &[], 10),
        "no ping through the tunnel: {}",
        port_status(&d, "vx")
    );
    assert_eq!(learned().as_deref(), Some("10.238.0.3"), "outer source");
    out("10.238.0.1");
    assert_eq!(ping_count(&vma, "192.168.239.2", 2, &[]), 2);
    assert_eq!(learned().as_deref(), Some("10.238.0.1"), "outer source");
    assert_eq!(port_status(&d, "vx")["status"]["tun_src_refused"], 0);

    // Not this host's address: the kernel refuses to send from it.
    out("10.238.0.9");
    assert_eq!(ping_count(&vma, "192.168.239.2", 2, &[]), 0);
    let st = port_status(&d, "vx");
    assert!(
        st["status"]["tun_src_refused"].as_u64().unwrap_or(0) >= 2,
        "{st}"
    );
    assert_eq!(learned().as_deref(), Some("10.238.0.1"));
}
