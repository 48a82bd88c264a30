//! XDP flow marks through the real vireod (namespaces and veths prefixed `mrk-`/`mrk`): UDP
//! from namespace A enters on an `af-xdp` port with `xdp-mark=on`; vireod gives the megaflow a
//! mark in the XDP program's map (`dump-megaflows`, `show`), and from then on the PMD
//! classifies those packets by their mark (`pmd-stats-show` `mark_hits`), without even
//! extracting their flow key (`mark_skips`: the megaflow matches only what the 5-tuple
//! decides and its actions are an output or a drop). Rule changes
//! (`del-flows` + `add-flow`) move the traffic from namespace B to C and then drop it; every
//! datagram goes where the rules of its moment say (the namespaces' receive counters), never
//! where a stale mark's megaflow went.
mod common;

use common::Daemon;
use std::time::{Duration, Instant};
use testkit::veth::{have_ip, NsVeth};

fn have_peers() -> bool {
    have_ip() && testkit::require_peer("python3", "python3")
}

/// Namespace `mrk-xN` (10.79.N.i/24) with its veth `mrkxNh`/`mrkxNn`.
fn ns(x: char, n: u32, i: u32) -> NsVeth {
    NsVeth::new(
        &format!("mrk-{x}{n}"),
        &format!("mrk{x}{n}h"),
        &format!("mrk{x}{n}n"),
        &format!("10.79.{n}.{i}/24"),
        1,
    )
}

/// [`ns`] with IPv6 off on both ends, so neither the namespace nor the host side of the veth
/// sends neighbour discovery or MLD frames that the receive counters would count.
fn quiet_ns(x: char, n: u32, i: u32) -> NsVeth {
    let v = ns(x, n, i);
    testkit::veth::must(
        "sysctl",
        &[
            "-qw",
            &format!("net.ipv6.conf.{}.disable_ipv6=1", v.host_if),
        ],
    );
    v.exec_must(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", v.ns_if),
    ]);
    v
}

/// Frames the namespace side of `v` received (whatever their MAC or address).
fn rx_packets(v: &NsVeth) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/rx_packets", v.ns_if);
    v.exec_must(&["cat", &path]).trim().parse().unwrap()
}

/// Sends `count` UDP datagrams from A, all of one 5-tuple (source port 4242 → 10.79.N.2:9).
fn send(a: &NsVeth, n: u32, count: u32) {
    let script = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('',4242))\nfor i in range({count}):\n s.sendto(b'x'*32,('10.79.{n}.2',9))\n time.sleep(0.001)"
    );
    a.exec_must(&["python3", "-c", &script]);
}

fn pmd_counter(d: &Daemon, what: &str) -> u64 {
    let v = d.json(&["pmd-stats-show"]);
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p[what].as_u64().unwrap())
        .sum()
}

/// (actions, mark) of every megaflow `dump-megaflows` shows with a mark.
fn marked(d: &Daemon) -> Vec<(String, String)> {
    d.json(&["dump-megaflows"])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| {
            let m = f["mark"].as_str()?;
            Some((f["actions"].as_str().unwrap().to_string(), m.to_string()))
        })
        .collect()
}

/// Waits for a marked megaflow whose actions are an output other than `not`; returns them.
fn wait_marked_output(d: &Daemon, not: &str) -> String {
    let mut found = None;
    wait("a marked megaflow", || {
        found = marked(d)
            .into_iter()
            .find(|(a, _)| a.starts_with("output:") && a != not);
        found.is_some()
    });
    let (actions, mark) = found.unwrap();
    eprintln!("marked megaflow: actions {actions}, mark {mark}");
    actions
}

/// Waits until `f` holds (10 s).
fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `count` datagrams and waits until B and C have received what `want` says (their
/// increments), then checks they received exactly that.
fn send_and_expect(a: &NsVeth, b: &NsVeth, c: &NsVeth, n: u32, count: u32, want: (u64, u64)) {
    let (b0, c0) = (rx_packets(b), rx_packets(c));
    send(a, n, count);
    let end = Instant::now() + Duration::from_secs(5);
    while (rx_packets(b) - b0, rx_packets(c) - c0) != want && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Late frames (a wrong output) would still arrive: look once more after a pause.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!((rx_packets(b) - b0, rx_packets(c) - c0), want);
}

#[test]
fn marked_packets_are_classified_by_mark_and_follow_rule_changes() {
    if !have_peers() {
        return;
    }
    let n = 1;
    let (a, b, c) = (
        quiet_ns('a', n, 1),
        quiet_ns('b', n, 2),
        quiet_ns('c', n, 3),
    );
    // Nobody answers ARP through the rules below: A's neighbour entry is static.
    a.exec_must(&[
        "ip",
        "neigh",
        "add",
        &format!("10.79.{n}.2"),
        "lladdr",
        "02:79:00:00:00:02",
        "dev",
        &a.ns_if,
    ]);
    let dir = tempfile::tempdir().unwrap();
    // A PMD on core 1: its marks carry tag 1, which the worker must know (not its tx queue).
    let d = Daemon::start_with(&dir.path().join("run"), &["--pmd-cores", "1"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    let add = |p: &str, v: &NsVeth, extra: &str| {
        let ifname = format!("ifname={}", v.host_if);
        [
            "add-port",
            "br0",
            p,
            "type=af-xdp",
            &ifname,
            "xdp-mode=native",
            extra,
        ]
        .map(String::from)
    };
    let pa = add("pa", &a, "xdp-mark=on");
    let pa: Vec<&str> = pa.iter().map(String::as_str).collect();
    if !common::xdp_mark_usable(|args| d.ctl(args), &pa) {
        return;
    }
    d.ok(&pa);
    for (p, v) in [("pb", &b), ("pc", &c)] {
        let args = add(p, v, "xdp-mark=off");
        d.ok(&args.each_ref().map(String::as_str));
    }
    d.ok(&["del-flows", "br0"]);
    d.ok(&["add-flow", "br0", "in_port=pa,udp,actions=output:pb"]);

    // The first datagrams create the megaflow; housekeeping gives it a mark.
    send_and_expect(&a, &b, &c, n, 50, (50, 0));
    let out_b = wait_marked_output(&d, "");
    let st = common::port_status(&d, "pa");
    assert_eq!(st["status"]["xdp_mark"], "on", "{st}");
    assert!(st["status"]["xdp_marks"].as_u64() >= Some(1), "{st}");
    let hits0 = pmd_counter(&d, "mark_hits");
    let skips0 = pmd_counter(&d, "mark_skips");
    let emc0 = pmd_counter(&d, "emc_hits");
    send_and_expect(&a, &b, &c, n, 200, (200, 0));
    let hits1 = pmd_counter(&d, "mark_hits");
    let skips1 = pmd_counter(&d, "mark_skips");
    eprintln!(
        "marks {:?}, mark hits {hits0} -> {hits1}, skips {skips0} -> {skips1}, emc hits {emc0} -> {}",
        marked(&d),
        pmd_counter(&d, "emc_hits")
    );
    assert!(hits1 >= hits0 + 200, "marked hits {hits0} -> {hits1}");
    // One 5-tuple, the one the mark was installed for: every marked packet skips extraction.
    assert!(skips1 >= skips0 + 200, "skips {skips0} -> {skips1}");
    assert!(skips1 <= hits1, "skips are mark hits");
    assert_eq!(
        pmd_counter(&d, "emc_hits"),
        emc0,
        "marked packets skip the EMC"
    );

    // The rules change: the same 5-tuple now goes to C. Its mark named B's megaflow.
    d.ok(&["del-flows", "br0"]);
    d.ok(&["add-flow", "br0", "in_port=pa,udp,actions=output:pc"]);
    send_and_expect(&a, &b, &c, n, 200, (0, 200));
    let out_c = wait_marked_output(&d, &out_b);
    assert!(
        marked(&d).iter().all(|(a, _)| *a == out_c),
        "B's megaflow and its mark are gone: {:?}",
        marked(&d)
    );
    let (hits2, skips2) = (pmd_counter(&d, "mark_hits"), pmd_counter(&d, "mark_skips"));
    send_and_expect(&a, &b, &c, n, 200, (0, 200));
    let (hits3, skips3) = (pmd_counter(&d, "mark_hits"), pmd_counter(&d, "mark_skips"));
    assert!(hits3 >= hits2 + 200, "marked hits {hits2} -> {hits3}");
    assert!(skips3 >= skips2 + 200, "skips {skips2} -> {skips3}");

    // And then dropped: nothing reaches B or C, whatever mark the frames still carry.
    d.ok(&["del-flows", "br0"]);
    d.ok(&["add-flow", "br0", "in_port=pa,udp,actions=drop"]);
    send_and_expect(&a, &b, &c, n, 200, (0, 0));
    // Every frame from A came with the program's metadata.
    let st = common::port_status(&d, "pa");
    assert!(st["status"]["rx_marked"].as_u64() >= Some(850), "{st}");
    // Removing the port removes its marks with it (no error, daemon still answers).
    d.ok(&["del-port", "br0", "pa"]);
    let _ = d.json(&["dump-megaflows"]);
}
