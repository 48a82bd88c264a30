//! Per-port policing with real kernel traffic: two namespaces on `af-packet` ports of a
//! running vireod, UDP from `iperf3` at 25 Mbit/s. Unpoliced, vireod delivers nearly all of
//! it to the receiver's port; with `ingress-policing-rate=5000` (kbit/s, counting whole
//! frames) on the sender's port, or an `egress-policer-cir` of 625,000 bytes/s on the
//! receiver's port, it delivers 5,000 kbit/s of frames (measured from the receiving port's
//! counters over a 3 s window in the middle of the run), and the policed port counts the rest
//! as `policed` drops.
//!
//! Names: namespaces `vpo-p-X-PID`, interfaces `vpopXPID`, removed by Drop guards.
mod common;

use common::host::{kernel_ok, Bg, Ns};
use common::Daemon;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ns(side: char, addr: &str) -> Ns {
    let ns = Ns::create("vpo", 'p', side);
    ns.exec(&["ip", "addr", "add", addr, "dev", &ns.ns_if]);
    ns
}

/// While `iperf3 -u` sends 25 Mbit/s for 6 s, the rate at which vireod sent frames to port
/// `rx_port`, in kbit/s of whole frames, over the window from 2 s to 5 s (after the bucket's
/// initial burst, before the end).
fn delivered_kbps(d: &Daemon, client: &Ns, server: &Ns, server_ip: &str, rx_port: &str) -> f64 {
    let _srv = server.iperf3_server();
    let c = client.cmd(&[
        "timeout", "30", "iperf3", "-u", "-b", "25M", "-l", "1448", "-t", "6", "-c", server_ip,
    ]);
    let _cli = Bg(Command::new(&c[0])
        .args(&c[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let tx = |d: &Daemon| {
        d.json(&["port-stats", rx_port])[0]["tx_bytes"]
            .as_u64()
            .unwrap_or(0)
    };
    std::thread::sleep(Duration::from_secs(2));
    let (t0, b0) = (Instant::now(), tx(d));
    std::thread::sleep(Duration::from_secs(3));
    let (t1, b1) = (Instant::now(), tx(d));
    (b1 - b0) as f64 * 8.0 / 1000.0 / (t1 - t0).as_secs_f64()
}

fn policed(d: &Daemon, port: &str) -> u64 {
    let s = d.json(&["port-stats", port]);
    s[0]["drops"]["policed"].as_u64().unwrap_or(0)
}

#[test]
fn ingress_and_egress_policing_limit_real_udp_between_namespaces() {
    if !kernel_ok() || !testkit::require_peer("iperf3", "iperf3") {
        return;
    }
    let dir = tempfile::Builder::new().prefix("vpo-").tempdir().unwrap();
    let a = ns('a', "10.93.0.1/24");
    let b = ns('b', "10.93.0.2/24");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    for (name, n) in [("a", &a), ("b", &b)] {
        let ifname = format!("ifname={}", n.host_if);
        d.ok(&["add-port", "br0", name, "type=af-packet", &ifname]);
    }
    assert!(a.ping_until("10.93.0.2", &[], 15), "no ping through vireod");

    let free = delivered_kbps(&d, &a, &b, "10.93.0.2", "b");
    // At least twice the policed rate (on a loaded machine the path itself loses some).
    assert!(
        free > 10_000.0,
        "unpoliced UDP only {free:.0} kbit/s: the path is the limit"
    );

    // The burst (1 s at the rate, `ingress-policing-burst` is in kbit) covers the gaps in
    // which a busy machine does not run the PMD: frames that waited in the socket meanwhile
    // arrive at the policer together, and a small bucket would drop what the rate allows.
    d.ok(&[
        "set-port",
        "a",
        "ingress-policing-rate=5000",
        "ingress-policing-burst=5000",
    ]);
    let before = policed(&d, "a");
    let ingress = delivered_kbps(&d, &a, &b, "10.93.0.2", "b");
    let dropped = policed(&d, "a") - before;
    d.ok(&["set-port", "a", "ingress-policing-rate=0"]);

    d.ok(&[
        "set-port",
        "b",
        "egress-policer-cir=625000",
        "egress-policer-cbs=625000",
    ]);
    let before_b = policed(&d, "b");
    let egress = delivered_kbps(&d, &a, &b, "10.93.0.2", "b");
    let dropped_b = policed(&d, "b") - before_b;
    eprintln!(
        "kbit/s of frames delivered to b: free {free:.0}, ingress-policed {ingress:.0} \
         ({dropped} policed), egress-policed {egress:.0} ({dropped_b} policed)"
    );
    for (what, got, drops) in [("ingress", ingress, dropped), ("egress", egress, dropped_b)] {
        assert!(
            (4400.0..=5600.0).contains(&got),
            "{what}: {got:.0} kbit/s through a 5,000 kbit/s policer (free: {free:.0})"
        );
        assert!(
            drops > 1000,
            "{what}: only {drops} frames counted as policed"
        );
    }
}
