//! Issue 11's "done when", one test per kernel port kind: a veth (for `tap`, the tap Vireo
//! makes) on a Vireo bridge, the host with an address on the bridge's `internal` port, and a
//! VM on the same bridge (DPDK testpmd's `icmpecho` on a vhost-user port: it answers ARP and
//! ping for any address). The host (root namespace, through the internal port) and the
//! namespace both reach the VM, and each other, through the real vireod.
//!
//! Names: namespaces `vkv-K-a-PID`, interfaces `vkvKaPID` (K = the kind's letter), bridges
//! `vkvKPID` (also the internal interface), subnets 10.214.N.0/24; all removed on drop, also
//! when a test fails. One test at a time (each runs a PMD on core 0 and testpmd on core 1).
mod common;

use common::host::{kernel_ok, must, sh, Ns};
use common::Daemon;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// How the namespace is attached.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    AfPacket,
    AfXdp,
    Tap,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AfPacket => "af-packet",
            Kind::AfXdp => "af-xdp",
            Kind::Tap => "tap",
        }
    }
}

/// The root namespace pings `ip` until one echo is answered or `secs` pass.
fn host_ping_until(ip: &str, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if sh(&["ping", "-c", "1", "-W", "1", ip]).status.success() {
            return true;
        }
    }
    false
}

/// Deletes the bridge's interface if the test leaves it behind (vireod killed on a failure).
struct LinkGuard(String);

impl Drop for LinkGuard {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", &self.0]);
    }
}

fn host_and_namespace_reach_a_vm(kind: Kind, letter: char, net: u8) {
    if !kernel_ok() || common::peers::missing("dpdk-testpmd").is_some() {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    let br = format!("vkv{letter}{pid}");
    let _br_guard = LinkGuard(br.clone());
    let dir = tempfile::Builder::new()
        .prefix(&format!("vkv-{letter}-"))
        .tempdir()
        .unwrap();
    let (host_ip, ns_ip, vm_ip) = (
        format!("10.214.{net}.1"),
        format!("10.214.{net}.2"),
        format!("10.214.{net}.99"),
    );
    let d = Daemon::start_with(dir.path(), &["--pmd-cores", "0"]);
    // The bridge gets its internal port (a tap named after it), as `ovs-vsctl add-br` does.
    d.ok(&["add-br", &br]);
    let ns = match kind {
        Kind::AfPacket | Kind::AfXdp => {
            let ns = Ns::create("vkv", letter, 'a');
            if kind == Kind::AfXdp {
                // XDP carries no checksum metadata: the peer completes its own (README).
                ns.exec(&["ethtool", "-K", &ns.ns_if, "tx", "off"]);
            }
            d.ok(&[
                "add-port",
                &br,
                "a",
                &format!("type={}", kind.name()),
                &format!("ifname={}", ns.host_if),
            ]);
            ns
        }
        Kind::Tap => {
            let tap = format!("vkv{letter}a{pid}");
            d.ok(&["add-port", &br, &tap, "type=tap"]);
            let ns = Ns {
                name: format!("vkv-{letter}-a-{pid}"),
                host_if: tap.clone(),
                ns_if: tap.clone(),
            };
            let _ = sh(&["ip", "netns", "del", &ns.name]);
            must(&["ip", "netns", "add", &ns.name]);
            must(&["ip", "link", "set", &tap, "netns", &ns.name]);
            ns.exec(&["ip", "link", "set", &tap, "up"]);
            ns.exec(&["ip", "link", "set", "lo", "up"]);
            ns
        }
    };
    ns.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{ns_ip}/24"),
        "dev",
        &ns.ns_if,
    ]);
    must(&["ip", "addr", "add", &format!("{host_ip}/24"), "dev", &br]);
    d.ok(&["add-port", &br, "vm", "type=vhost-user"]);
    let vu = common::peers::VirtioUser {
        path: dir.path().join("vm.sock"),
        mac: format!("02:00:00:00:e{net}:01"),
        extra: String::new(),
    };
    let prefix = format!("vkv-{letter}-{pid}");
    let mut tp = common::peers::Testpmd::start(&prefix, &[vu], &["--forward-mode=icmpecho"]);
    tp.cmd("start");
    assert!(
        tp.out.wait_for("icmpecho", Duration::from_secs(60)),
        "testpmd did not start:\n{}",
        tp.out.text()
    );
    let show = |port: &str| -> serde_json::Value {
        let v = d.json(&["show"]);
        v["bridges"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .cloned()
            .unwrap_or_else(|| panic!("no port {port} in {v}"))
    };
    let end = Instant::now() + Duration::from_secs(30);
    while show("vm")["link"] != "up" {
        assert!(Instant::now() < end, "vhost-user link never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let port = if kind == Kind::Tap {
        ns.host_if.clone()
    } else {
        "a".to_string()
    };
    assert_eq!(show(&port)["link"], "up", "{}", show(&port));
    assert_eq!(show(&br)["type"], "internal");
    // The namespace reaches the VM, the host reaches the VM over the bridge's interface,
    // and the host and the namespace reach each other.
    assert!(
        ns.ping_until(&vm_ip, &[], 20),
        "{}: namespace got no answer from the VM\n{}",
        kind.name(),
        tp.out.text()
    );
    assert!(
        host_ping_until(&vm_ip, 20),
        "{}: host got no answer from the VM through {br}\n{}",
        kind.name(),
        tp.out.text()
    );
    assert!(
        host_ping_until(&ns_ip, 10),
        "{}: host cannot reach the namespace",
        kind.name()
    );
    assert!(
        ns.ping_until(&host_ip, &[], 10),
        "{}: namespace cannot reach the host",
        kind.name()
    );
    // Three echoes in a row from each, none lost once learned.
    let o = sh(&["ping", "-c", "3", "-i", "0.2", "-W", "2", &vm_ip]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = ns.try_exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2", &vm_ip]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let stats = d.json(&["port-stats", "vm"]);
    assert!(stats[0]["rx_packets"].as_u64().unwrap() >= 6, "{stats}");
    let out = tp.quit();
    eprintln!(
        "{}: testpmd {}",
        kind.name(),
        out.lines()
            .filter(|l| l.contains("RX-packets"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    drop(d);
    drop(ns);
}

#[test]
fn af_packet_host_and_namespace_reach_a_vm() {
    host_and_namespace_reach_a_vm(Kind::AfPacket, 'p', 1);
}

#[test]
fn af_xdp_host_and_namespace_reach_a_vm() {
    host_and_namespace_reach_a_vm(Kind::AfXdp, 'x', 2);
}

#[test]
fn tap_host_and_namespace_reach_a_vm() {
    host_and_namespace_reach_a_vm(Kind::Tap, 't', 3);
}
