//! A real VM through vireod: QEMU (software emulation) boots Debian's kernel with the test
//! initramfs on a vhost-user port of bridge br0, and its Linux virtio-net driver pings a testpmd
//! endpoint (`--forward-mode=icmpecho`: answers ARP and ICMP echo) on a second port, through
//! NORMAL; and a guest and a network namespace (an `af-packet` port) pinging each other.
//! Skipped (with a message) only when QEMU, testpmd, a kernel image or root is missing.
mod common;

use common::peers::{build_initramfs, guest_peers, Guest, Testpmd, VirtioUser};
use common::wait_until;
use common::Daemon;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// QEMU and testpmd are heavy: one such test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const GUEST_MAC: &str = "52:54:00:12:34:56";
const TP_MAC: &str = "00:00:00:00:00:0a";

fn link(d: &Daemon, port: &str) -> String {
    let show = d.json(&["show"]);
    show["bridges"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port)
        .map(|p| p["link"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn qemu_guest_pings_testpmd_through_normal() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = guest_peers(&["dpdk-testpmd"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    d.ok(&["add-port", "br0", "tp", "type=vhost-user"]);
    let initrd = build_initramfs(dir.path());

    // The ping target: testpmd answering ARP and ICMP echo on port tp.
    let mut tp = Testpmd::start(
        &format!("vireo-it-vm-{}", std::process::id()),
        &[VirtioUser {
            path: run.join("tp.sock"),
            mac: TP_MAC.into(),
            extra: String::new(),
        }],
        &["--forward-mode=icmpecho"],
    );
    tp.wait_ready();
    tp.cmd("start");
    assert!(
        wait_until(Duration::from_secs(30), || link(&d, "tp") == "up"),
        "{}",
        d.ok(&["show"])
    );

    let guest = Guest::boot(
        &kernel,
        &initrd,
        &run.join("vm.sock"),
        false,
        GUEST_MAC,
        "vireo.ip=10.0.0.1/24 vireo.ping=10.0.0.2 vireo.count=3",
    );
    let t0 = Instant::now();
    let done = wait_until(Duration::from_secs(200), || {
        let o = guest.out.text();
        o.contains("VIREO-PING-OK") || o.contains("VIREO-PING-FAIL") || o.contains("Kernel panic")
    });
    let console = guest.out.text();
    eprintln!("guest finished in {:.0?}", t0.elapsed());
    assert!(done, "guest did not finish in time:\n{console}");
    assert!(
        console.contains(&format!("VIREO-GUEST-UP {GUEST_MAC}")),
        "{console}"
    );
    assert!(
        console.contains("VIREO-PING-OK"),
        "guest could not ping testpmd through vireod:\n{console}\n{}\n{}",
        d.ok(&["port-stats"]),
        d.ok(&["show"])
    );

    // The switch saw it: both ports moved packets, NORMAL learned both ends on their ports.
    let stats = d.json(&["port-stats"]);
    for row in stats.as_array().unwrap() {
        assert!(
            row["rx_packets"].as_u64().unwrap() >= 4 && row["tx_packets"].as_u64().unwrap() >= 4,
            "{stats:#}"
        );
    }
    let macs = d.json(&["dump-macs", "br0"]);
    let port_of = |m: &str| {
        macs.as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"] == m)
            .map(|e| e["port"].as_u64().unwrap())
    };
    assert_eq!(port_of(GUEST_MAC), Some(1), "{macs}");
    assert_eq!(port_of(TP_MAC), Some(2), "{macs}");
    let vm = d.json(&["show"])["bridges"][0]["ports"][1]["status"].clone();
    assert_eq!(vm["protocol_errors"], 0, "{vm}");
    assert_eq!(vm["broken_queues"], 0, "{vm}");
    let tps = tp.port_stats();
    assert!(
        tps[0].0 >= 4 && tps[0].1 >= 4,
        "testpmd answered nothing: {tps:?}"
    );
    drop(guest);
    tp.quit();
}

/// A QEMU guest on a vhost-user port and a network namespace on an `af-packet` port of the
/// same bridge (NORMAL): the guest pings the namespace, then the namespace pings the guest
/// while it waits. Namespace `vmk-g-a-PID`, veth `vmkgaPID` (removed on drop).
#[test]
fn qemu_guest_and_a_namespace_ping_each_other_through_a_kernel_port() {
    use common::host::{kernel_ok, Ns};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_ok() {
        return;
    }
    let Some(kernel) = guest_peers(&[]) else {
        return;
    };
    let ns = Ns::create("vmk", 'g', 'a');
    ns.exec(&["ip", "addr", "add", "10.0.0.2/24", "dev", &ns.ns_if]);
    let ns_mac = ns.exec(&["cat", &format!("/sys/class/net/{}/address", ns.ns_if)]);
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    d.ok(&[
        "add-port",
        "br0",
        "k",
        "type=af-packet",
        &format!("ifname={}", ns.host_if),
    ]);
    let initrd = build_initramfs(dir.path());
    let guest = Guest::boot(
        &kernel,
        &initrd,
        &run.join("vm.sock"),
        false,
        GUEST_MAC,
        "vireo.ip=10.0.0.1/24 vireo.ping=10.0.0.2 vireo.count=3 vireo.wait=60",
    );
    let done = wait_until(Duration::from_secs(200), || {
        let o = guest.out.text();
        o.contains("VIREO-PING-OK") || o.contains("VIREO-PING-FAIL") || o.contains("Kernel panic")
    });
    let console = guest.out.text();
    assert!(done, "guest did not finish in time:\n{console}");
    assert!(
        console.contains("VIREO-PING-OK"),
        "guest could not ping the namespace through vireod:\n{console}\n{}\n{}",
        d.ok(&["port-stats"]),
        d.ok(&["show"])
    );
    // The other way: the namespace pings the guest while it waits.
    let out = ns.try_exec(&["ping", "-c", "3", "-i", "0.3", "-W", "3", "10.0.0.1"]);
    assert!(
        out.status.success(),
        "namespace could not ping the guest: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // NORMAL learned the guest on the vhost-user port and the namespace on the kernel port,
    // and both ports carried the pings.
    let macs = d.json(&["dump-macs", "br0"]);
    let port_of = |m: &str| {
        macs.as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"] == m)
            .map(|e| e["port"].as_u64().unwrap())
    };
    assert_eq!(port_of(GUEST_MAC), Some(1), "{macs}");
    assert_eq!(port_of(ns_mac.trim()), Some(2), "{macs}");
    let stats = d.json(&["port-stats"]);
    for row in stats.as_array().unwrap() {
        assert!(
            row["rx_packets"].as_u64().unwrap() >= 6 && row["tx_packets"].as_u64().unwrap() >= 6,
            "{stats:#}"
        );
    }
    drop(guest);
}
