//! Native tunneling's underlay (issue 12, stage 1) against the real kernel: the connected
//! route of a bridge's internal port follows `ip addr add/del`, `route/add|del|show` check
//! their input, and the neighbour cache learns a namespace's MAC from the ARP its kernel sends
//! to the internal port's address through an `af-packet` port (`tnl/neigh/show`, `flush`).
//!
//! Names: namespaces `nat-T-X-PID`, interfaces `natTXPID`, bridges `natbTPID`, all removed by
//! Drop guards, also when a test fails.
mod common;

use common::host::{kernel_ok, must, sh, Ns};
use common::Daemon;
use std::time::{Duration, Instant};

fn wait_for(d: &Daemon, cmd: &[&str], what: &str, present: bool) -> String {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let out = d.ok(cmd);
        if out.contains(what) == present || Instant::now() > end {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn underlay_routes_follow_the_internal_port_and_arp_teaches_the_neighbour() {
    if !kernel_ok() {
        return;
    }
    let pid = std::process::id();
    let br = format!("natbu{pid}");
    let dir = tempfile::Builder::new().prefix("nat-u-").tempdir().unwrap();
    let a = Ns::create("nat", 'u', 'a');
    a.exec(&["ip", "addr", "add", "10.211.0.2/24", "dev", &a.ns_if]);
    let a_mac = a
        .exec(&["cat", &format!("/sys/class/net/{}/address", a.ns_if)])
        .trim()
        .to_string();
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", &br]);
    d.ok(&[
        "add-port",
        &br,
        "up",
        "type=af-packet",
        &format!("ifname={}", a.host_if),
    ]);
    assert!(!d.ok(&["route/show"]).contains("10.211.0.0/24"));

    // The internal port's address becomes a connected route.
    must(&["ip", "addr", "add", "10.211.0.1/24", "dev", &br]);
    let connected = format!("10.211.0.0/24 dev {br} src 10.211.0.1 (connected)");
    let shown = wait_for(&d, &["route/show"], &connected, true);
    assert!(shown.contains(&connected), "route/show: {shown}");

    // Operator routes: through an internal port only, well-formed, listed, removable.
    d.ok(&["route/add", "10.99.0.0/16", &br, "10.211.0.254"]);
    let shown = d.ok(&["route/show"]);
    assert!(
        shown.contains(&format!("10.99.0.0/16 dev {br} via 10.211.0.254 (user)")),
        "{shown}"
    );
    let j = d.json(&["route/show"]);
    assert!(j
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["prefix"] == "10.99.0.0/16" && r["gw"] == "10.211.0.254"));
    for (args, why) in [
        (vec!["route/add", "10.98.0.0/16", "up"], "internal port"),
        (vec!["route/add", "10.98.0.0/16", "nosuch"], "no port"),
        (vec!["route/add", "10.98.0.1/16", br.as_str()], "host bits"),
        (
            vec!["route/add", "10.98.0.0/16", br.as_str(), "x"],
            "gateway",
        ),
        (vec!["route/del", "10.98.0.0/16"], "no route/add route"),
    ] {
        let out = d.ctl(&args);
        assert_ne!(out.code, 0, "{args:?} accepted");
        assert!(out.stderr.contains(why), "{args:?}: {}", out.stderr);
    }
    d.ok(&["route/del", "10.99.0.0/16"]);
    assert!(!d.ok(&["route/show"]).contains("10.99.0.0/16"));

    // The namespace's ARP for 10.211.0.1 reaches the internal port through the bridge: its
    // sender (the namespace's address and MAC) is learned.
    assert!(
        a.ping_until("10.211.0.1", &[], 10),
        "namespace cannot reach the internal port"
    );
    let line = format!("10.211.0.2 {a_mac} dev {br}");
    let neigh = wait_for(&d, &["tnl/neigh/show"], &line, true);
    assert!(neigh.contains(&line), "tnl/neigh/show: {neigh}");
    let j = d.json(&["tnl/neigh/show"]);
    assert!(j["counters"]["learned"].as_u64().unwrap() >= 1, "{j}");
    assert!(d.ok(&["tnl/neigh/flush"]).contains("flushed 1"));
    assert!(!d.ok(&["tnl/neigh/show"]).contains("10.211.0.2"));

    // The address goes: so does its connected route.
    must(&["ip", "addr", "del", "10.211.0.1/24", "dev", &br]);
    let shown = wait_for(&d, &["route/show"], "10.211.0.0/24", false);
    assert!(!shown.contains("10.211.0.0/24"), "route/show: {shown}");
    d.ok(&["del-br", &br]);
    let _ = sh(&["ip", "link", "del", &br]);
}
