//! Geneve options (`tun_metadataN`) on the native path against Open vSwitch 3.1's userspace
//! datapath, both ways, with TLV maps on both sides set by the real `ovs-ofctl
//! add-tlv-map` ({class=0x0102,type=0x80,len=4} -> tun_metadata0: a critical option type,
//! so a receiver that did not map it would drop the packets).
//!
//! Set-up as `tunnel_native_ovs.rs` (Geneve, VNI 42): host C is a namespace running OVS
//! (`brphy` with the underlay veth and the tunnel address .2, `brint` with the tunnel port
//! and the overlay address .2); vireod has the underlay bridge (af-packet port, tunnel
//! address .1 on its internal port) and the overlay bridge with the tunnel port and VM A (a
//! namespace on an af-packet veth). Rules:
//! - OVS `brint`: from LOCAL, UDP to port 9999 gets `tun_metadata0=0x9999`, everything else
//!   `0x1234`; from the tunnel only `tun_metadata0=0x5678` reaches LOCAL.
//! - vireod: from the tunnel `tun_metadata0=0x1234` goes to VM A, `0x9999` is dropped; from
//!   VM A `set_field:0x5678->tun_metadata0`.
//!
//! VM A pings host C: every request needs Vireo's option on encap (OVS's rule counts them),
//! every reply OVS's option on decap (Vireo's rule counts them). UDP to port 9999 from host C
//! is dropped by Vireo's `0x9999` rule, which counts it, while a higher-priority rule that
//! would deliver that UDP with `0x1234` counts nothing.
//! vireod's megaflows show the option in `tnl_push` and the match on `tun_metadata0`. Last,
//! `df_default`: a capture on host C's veth (tshark) reads DF set in the outer IPv4 header,
//! and clear after `set-port tun df_default=false`.
//!
//! Names: namespaces `gmd-g-X-PID`, interfaces `gmdgXPID`, bridges `gmdpPID` / `gmdiPID`;
//! removed by Drop guards. Addresses 10.244.0.0/24 (underlay), 192.168.244.0/24 (overlay).
//! Fails under VIREO_REQUIRE_PEERS=1 without OVS, ovs-ofctl, ethtool or tshark.
mod common;

use common::host::{kernel_ok, ping_count, Ns};
use common::tunnels::{
    native_bridges, native_state, native_vm, no_offloads, ovs_tunnel_host, tmp, vireo_port_end,
    LinkGuard, NativeBridges, OvsTunnel,
};
use common::{wait_until, Daemon};
use std::path::Path;
use std::time::Duration;
use testkit::{ofctl_version, Out};

fn ofctl(sock: &Path, cmd: &str, args: &[&str]) -> Out {
    ofctl_version(sock, Some("OpenFlow13"), &[], cmd, args)
}

fn ofctl_ok(sock: &Path, cmd: &str, args: &[&str]) -> String {
    let o = ofctl(sock, cmd, args);
    assert!(
        o.ok,
        "ovs-ofctl {cmd} {args:?} on {}: {}",
        sock.display(),
        o.stderr
    );
    o.stdout
}

/// `n_packets` of the flow whose dump line contains `needle` and, for `priority=N,...`
/// needles, has that priority (0 if absent).
fn n_packets(sock: &Path, needle: &str) -> u64 {
    let dump = ofctl_ok(sock, "dump-flows", &[]);
    let (prio, rest) = match needle.split_once(',') {
        Some((p, r)) if p.starts_with("priority=") => (Some(p), r),
        _ => (None, needle),
    };
    dump.lines()
        .find(|l| {
            rest.split(',').all(|n| l.contains(n))
                && prio.is_none_or(|p| l.contains(&format!("{p},")))
        })
        .and_then(|l| l.split("n_packets=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn peers_present() -> bool {
    kernel_ok()
        && testkit::have_ofctl()
        && testkit::require_peer("ethtool", "ethtool")
        && testkit::require_peer("tshark", "tshark")
        && testkit::require_peer("ovs-vswitchd", "openvswitch-switch")
        && testkit::require_peer("ovsdb-server", "openvswitch-switch")
}

const MAP: &str = "{class=0x0102,type=0x80,len=4}->tun_metadata0";

#[test]
fn geneve_options_both_ways_with_the_ovs_userspace_datapath() {
    if !peers_present() {
        return;
    }
    let pid = std::process::id();
    let (brp, bri) = (format!("gmdp{pid}"), format!("gmdi{pid}"));
    // vireod's underlay bridge (a kernel tap as its internal port).
    let _tap = LinkGuard(brp.clone());
    let under = |h: u8| format!("10.244.0.{h}");
    let over = |h: u8| format!("192.168.244.{h}");
    let dir = tmp("gmd", "g");
    let ovs_dir = tmp("gmd", "govs");

    // Host C: OVS with native Geneve through brphy.
    let hc = Ns::create("gmd", 'g', 'c');
    no_offloads(&hc, &hc.ns_if);
    let ovs = ovs_tunnel_host(
        &hc,
        ovs_dir.path(),
        &OvsTunnel {
            kind: "geneve",
            port: "tun",
            local: &format!("{}/24", under(2)),
            remote: &under(1),
            key: "42",
            overlay: &format!("{}/24", over(2)),
            mtu: Some(1400),
        },
    );
    let osock = ovs_dir.path().join("brint.mgmt");
    ofctl_ok(&osock, "add-tlv-map", &[MAP]);
    ofctl_ok(&osock, "del-flows", &[]);
    for f in [
        "priority=10,in_port=LOCAL,udp,tp_dst=9999,actions=set_field:0x9999->tun_metadata0,output:tun",
        "priority=5,in_port=LOCAL,actions=set_field:0x1234->tun_metadata0,output:tun",
        "priority=10,in_port=tun,tun_metadata0=0x5678,actions=LOCAL",
        "priority=5,in_port=tun,actions=drop",
    ] {
        ofctl_ok(&osock, "add-flow", &[f]);
    }

    // VM A behind vireod.
    let vm = native_vm("gmd", 'g', &format!("{}/24", over(1)), 1400, false);
    vireo_port_end(&hc.host_if, false);

    let d = Daemon::start_logged(dir.path(), &dir.path().join("vireod.log"));
    native_bridges(
        &d,
        &NativeBridges {
            brp: &brp,
            phy_if: &hc.host_if,
            ours: &format!("{}/24", under(1)),
            bri: &bri,
            tun: "tun",
            tun_opts: &[
                "type=geneve",
                &format!("remote_ip={}", under(2)),
                &format!("local_ip={}", under(1)),
                "key=42",
            ],
            vm_if: &vm.host_if,
        },
        "10.244.0.0/24",
    );
    let vsock = dir.path().join(format!("{bri}.mgmt"));
    ofctl_ok(&vsock, "add-tlv-map", &[MAP]);
    let dump = ofctl_ok(&vsock, "dump-tlv-map", &[]);
    assert!(
        dump.contains("0x102  0x80       4  tun_metadata0"),
        "{dump}"
    );
    d.ok(&["del-flows", &bri]);
    for f in [
        "priority=10,in_port=tun,tun_metadata0=0x1234,actions=output:vm",
        "priority=20,udp,tp_dst=9999,in_port=tun,tun_metadata0=0x1234,actions=output:vm",
        "priority=10,in_port=tun,tun_metadata0=0x9999,actions=drop",
        "priority=5,in_port=vm,actions=set_field:0x5678->tun_metadata0,output:tun",
    ] {
        d.ok(&["add-flow", &bri, f]);
    }
    assert!(
        vm.ping_until(&over(2), &[], 20),
        "VM A cannot reach OVS with Geneve options: {}\nOVS: {}",
        native_state(&d),
        ofctl_ok(&osock, "dump-flows", &[])
    );
    let deliver = "priority=10,tun_metadata0=0x1234";
    let (ours0, theirs0) = (
        n_packets(&vsock, deliver),
        n_packets(&osock, "tun_metadata0=0x5678"),
    );
    let got = ping_count(&vm, &over(2), 5, &[]);
    assert!(got >= 4, "ping lost {} of 5", 5 - got);
    // Both rules that need the other side's option counted the pings.
    assert!(
        wait_until(Duration::from_secs(5), || {
            n_packets(&vsock, deliver) >= ours0 + u64::from(got)
                && n_packets(&osock, "tun_metadata0=0x5678") >= theirs0 + u64::from(got)
        }),
        "counters: vireod {} (from {ours0}), OVS {} (from {theirs0}) after {got} pings",
        n_packets(&vsock, deliver),
        n_packets(&osock, "tun_metadata0=0x5678")
    );

    // Another value: dropped by its own rule; the rule that would deliver that UDP with
    // 0x1234 (higher priority) never sees it.
    let udp_deliver = "priority=20,tun_metadata0=0x1234";
    for _ in 0..5 {
        hc.exec(&[
            "bash",
            "-c",
            &format!("echo hello > /dev/udp/{}/9999", over(1)),
        ]);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        wait_until(Duration::from_secs(5), || n_packets(
            &vsock,
            "tun_metadata0=0x9999"
        ) >= 5),
        "the 0x9999 rule counted {}: {}",
        n_packets(&vsock, "tun_metadata0=0x9999"),
        d.ok(&["dump-megaflows"])
    );
    assert_eq!(
        n_packets(&vsock, udp_deliver),
        0,
        "0x9999 must not be delivered"
    );

    // The megaflows: the option in the push template, the match on the decap side.
    let flows = d.ok(&["dump-megaflows"]);
    eprintln!("{flows}");
    assert!(
        flows.contains("geneve({class=0x102,type=0x80,len=4,0x00005678})"),
        "{flows}"
    );
    assert!(flows.contains("tun_metadata0=0x1234"), "{flows}");
    assert!(flows.contains("tun_metadata0=0x9999"), "{flows}");

    // df_default: the DF bit of the outer IPv4 header as a capture on host C sees it, by
    // default and after `set-port tun df_default=false` (the template is rebuilt).
    let df_bit = || {
        let cap = hc.cmd(&[
            "timeout",
            "20",
            "tshark",
            "-i",
            &hc.ns_if,
            "-c",
            "1",
            "-f",
            &format!("udp dst port 6081 and src host {}", under(1)),
            "-T",
            "fields",
            "-e",
            "ip.flags.df",
            // The outer header's (the inner IPv4 header has one too).
            "-E",
            "occurrence=f",
        ]);
        let mut child = std::process::Command::new(&cap[0])
            .args(&cap[1..])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // tshark starts slowly on a loaded machine: ping until it has its packet.
        while child.try_wait().unwrap().is_none() {
            ping_count(&vm, &over(2), 1, &[]);
        }
        let out = child.wait_with_output().unwrap();
        match String::from_utf8_lossy(&out.stdout).trim() {
            "1" | "True" => Some(true),
            "0" | "False" => Some(false),
            o => {
                eprintln!("tshark: {o:?} {}", String::from_utf8_lossy(&out.stderr));
                None
            }
        }
    };
    assert_eq!(df_bit(), Some(true), "DF by default");
    d.ok(&["set-port", "tun", "df_default=false"]);
    assert!(vm.ping_until(&over(2), &[], 10));
    assert_eq!(df_bit(), Some(false), "df_default=false clears DF");

    let drops = &d.json(&["tnl/neigh/show"])["native_drops"];
    eprintln!("native geneve options drops {drops}");
    drop(ovs);
}
